"""server_suite.py — how every server test file runs its steps against the server it started
(serve_test.py's Server): each step f(srv) timed and printed as `ok NAME (S s)`, the server
stopped, then the steps that need no server; a failed check (Fail) prints FAIL with the server's
stderr and returns 1, a Skip prints SKIP and returns 77, any other exception prints the stderr
and is raised again. Shared so that the start/stop and failure handling are written once."""

import time


class Fail(Exception):
    """A failed check (serve_test.check raises it; every test file catches it here)."""


class Skip(Exception):
    """The server cannot run this test (e.g. built without a feature): exit 77."""


def timed(name, f, *args):
    t = time.time()
    r = f(*args)
    print(f"ok {name} ({time.time() - t:.1f} s)", flush=True)
    return r


def run(srv, steps, setup=None, after=(), pass_line=True):
    """Runs setup(srv) (not printed), then the steps [(name, f)] as f(srv), stops srv, then the
    steps of after as f(). Returns 0 (PASS printed unless pass_line is false), 1 or 77."""
    try:
        if setup:
            setup(srv)
        for name, f in steps:
            timed(name, f, srv)
        srv.stop()
        for name, f in after:
            timed(name, f)
    except Skip as x:
        print(f"SKIP: {x}")
        srv.stop()
        return 77
    except Fail as x:
        print(f"FAIL: {x}\n--- server stderr ---\n{srv.stderr()}")
        srv.p.kill()
        return 1
    except Exception:
        print(f"--- server stderr ---\n{srv.stderr()}")
        srv.p.kill()
        raise
    if pass_line:
        print("PASS")
    return 0
