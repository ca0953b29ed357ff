"""The record an idempotent script leaves beside what it made (a JSON file): whether
it says the output was made from the same inputs, so the script can keep it."""
import json


def records(path, key, value):
    """True when the JSON file at `path` has `key` equal to `value`; False when it
    differs, is missing or cannot be read (then the output is made again)."""
    try:
        with open(path) as f:
            return json.load(f).get(key) == value
    except (OSError, ValueError, AttributeError):
        return False
