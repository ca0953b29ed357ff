"""The Python tests' way to check: every failed check is printed and kept, so a test
reports all of its problems at once and exits 1 at the end when `failures` is not empty."""
import contextlib
import os
import shutil
import sys
import tempfile

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, file=sys.stderr, flush=True)
    return condition


def rel(a, b):
    """Relative difference of a from the reference b."""
    return abs(a - b) / max(abs(b), 1e-30)


@contextlib.contextmanager
def work_dir(prefix, keep=None):
    """A test's working directory: a fresh temporary one named prefix..., removed afterwards,
    or `keep` (made if missing), left in place."""
    work = keep or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(work, exist_ok=True)
    try:
        yield work
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def finish(name, seconds=None):
    """The last lines of a test: its time (when given), then exit 1 when any check failed."""
    if seconds is not None:
        print(f"{name}: {seconds:.1f} s in all", file=sys.stderr, flush=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print(f"{name}: all checks passed")
