"""What every bench test (bench/tests/*_test.py) prints and how it ends: `check(ok, what)` prints "ok   what" or
"FAIL what" and counts the failures; `finish()` exits 1 saying how many failed (0 when none did)."""
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def finish():
    if failures:
        print(f"{len(failures)} check(s) failed")
        raise SystemExit(1)
