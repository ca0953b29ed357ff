"""The Python tests' way to check: every failed check is printed and kept, so a test
reports all of its problems at once and exits 1 at the end when `failures` is not empty."""
import sys

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, file=sys.stderr, flush=True)
    return condition


def rel(a, b):
    """Relative difference of a from the reference b."""
    return abs(a - b) / max(abs(b), 1e-30)


def finish(name, seconds):
    """The last lines of a test: its time, then exit 1 when any check failed."""
    print(f"{name}: {seconds:.1f} s in all", file=sys.stderr, flush=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print(f"{name}: all checks passed")
