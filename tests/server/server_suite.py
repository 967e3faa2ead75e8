"""server_suite.py — what every server test file shares: the `rocmforge serve` child process
(started on a free port, its port read from its first line, stopped with SIGTERM and checked to
exit 0), and how a file runs its steps against it: each step f(srv) timed and printed as
`ok NAME (S s)`, the server stopped, then the steps that need no server; a failed check (Fail)
prints FAIL with the server's stderr and returns 1, a Skip prints SKIP and returns 77, any other
exception prints the stderr and is raised again. Written once so that the start/stop and failure
handling are the same in serve_test.py, harden_test.py and the tests built on serve_test.py."""

import os
import re
import signal
import subprocess
import time


class Fail(Exception):
    """A failed check (serve_test.check raises it; every test file catches it here)."""


class Skip(Exception):
    """The server cannot run this test (e.g. built without a feature): exit 77."""


def check(cond, what):
    if not cond:
        raise Fail(what)


class Process:
    """`RF serve -m MODEL --device cpu --port 0 ARGS` as a child; .port once it listens.
    wait_ready(probe) waits until probe() is true (the callers ask /health their own way)."""

    def __init__(self, rf, model, args, env=None, tag="serve-test"):
        e = dict(os.environ)
        e.update(env or {})
        self.log = open(f"/tmp/rf-{tag}-{os.getpid()}-{id(self)}.log", "w+")
        self.p = subprocess.Popen([rf, "serve", "-m", model, "--device", "cpu", "--port", "0", *args],
                                  stdout=subprocess.DEVNULL, stderr=self.log, env=e)
        t0 = time.time()
        self.port = None
        while time.time() - t0 < 60 and self.port is None:
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
            elif self.p.poll() is not None:
                raise Fail(f"server exited {self.p.returncode}: {self.stderr()}")
            else:
                time.sleep(0.05)
        check(self.port, "server did not print its port")

    def wait_ready(self, probe, timeout=120):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if probe():
                return
            time.sleep(0.1)
        raise Fail("server not ready: " + self.stderr())

    def stderr(self):
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                rc = self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                raise Fail("server did not stop within 30 s of SIGTERM")
            check(rc == 0, f"server exited {rc} after SIGTERM: {self.stderr()}")


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
