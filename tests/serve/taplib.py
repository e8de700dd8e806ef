"""TAP output shared by the server tests (tests/serve/test_*.py): numbered
`ok N - name` / `not ok N - name` lines with the failure's detail as
comments, the plan line, and the failure count for the exit status."""
import traceback

_count = 0
_failed = 0


def tap(ok, name, detail=""):
    global _count, _failed
    _count += 1
    if not ok:
        _failed += 1
    print(f"{'ok' if ok else 'not ok'} {_count} - {name}", flush=True)
    if not ok and detail:
        for line in str(detail).splitlines()[:25]:
            print(f"#   {line}", flush=True)


def check(name, fn):
    """Runs fn(); a false result or an exception is a failure.  Returns
    whether it passed."""
    try:
        r = fn()
        ok = r is None or bool(r)
        tap(ok, name, "" if ok else f"returned {r!r}")
        return ok
    except Exception:
        tap(False, name, traceback.format_exc())
        return False


def plan():
    """Prints the plan line (1..N) and returns the exit status: 1 if anything failed."""
    print(f"1..{_count}", flush=True)
    return 1 if _failed else 0
