#!/usr/bin/env python3
"""harden_test.py — `rocmforge serve` against hostile HTTP clients (run by tests/cli/serve_harden.sh).

Raw sockets on loopback against servers on free ports (SmolLM2 on the CPU), each check bounded in
count and time (docs/server.md, "Security"):
  - read timeouts: a socket that sends nothing, half a request line, or half a body is closed
    after --read-timeout; a kept-alive connection that finished its request is not;
  - half-closed connections (the client's FIN) are closed promptly: no CLOSE-WAIT left behind;
  - per-client-IP connection cap, a global connection cap whose reserve still answers /health,
    and a cap on request bytes buffered across connections (503 + Retry-After);
  - strict framing: conflicting Content-Length, Content-Length with Transfer-Encoding, bad or
    oversized chunk lines are 400, never 5xx or 200;
  - lingering close: a client still uploading 64 MB after its 413 reads the 413;
  - browser rules: Host / Origin allow-list without a key, JSON content type on API POSTs, CORS
    only with --cors-origin (preflight answered), the chat page still served.
Client sockets bind to 127.0.0.2.. (every 127/8 address is local on Linux) to act as other hosts.
usage: harden_test.py ROCMFORGE MODEL [--quick] [--only NAME,...]
Exit 0 = every test passed; 1 = one failed (each test prints PASS / FAIL with the reason)."""
import json
import select
import socket
import sys
import threading
import time

import server_suite
from server_suite import Fail, check

RF, MODEL = sys.argv[1], sys.argv[2]
QUICK = "--quick" in sys.argv
ONLY = None
if "--only" in sys.argv:
    ONLY = set(sys.argv[sys.argv.index("--only") + 1].split(","))
DEFAULT_READ_TIMEOUT = 10  # docs/server.md: --read-timeout's default
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}


class Server(server_suite.Process):
    """A `rocmforge serve` child process; .port once it listens, ready once /health is 200."""

    def __init__(self, *args):
        super().__init__(RF, MODEL, ["-t", "1", "--http-threads", "2", *args], tag="harden-test")
        self.wait_ready(self.healthy)

    def healthy(self):
        try:
            return request(self, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")[0] == 200
        except OSError:
            return False


def connect(srv, src="127.0.0.1", timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", srv.port))
    return s


def read_response(s, timeout=10):
    """Reads one HTTP/1.1 response (Content-Length or chunked or until close): (status, headers, body)."""
    s.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise Fail(f"connection closed before a full response head: {buf[:200]!r}")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hd = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        k = k.strip().lower()
        hd[k] = hd[k] + ", " + v.strip() if k in hd else v.strip()  # repeated fields are one list
    if status in (204, 304):
        return status, hd, rest
    if "content-length" in hd:
        n = int(hd["content-length"])
        while len(rest) < n:
            d = s.recv(65536)
            if not d:
                break
            rest += d
        return status, hd, rest[:n]
    if hd.get("transfer-encoding", "").lower() == "chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            d = s.recv(65536)
            if not d:
                break
            rest += d
        return status, hd, rest
    while True:
        d = s.recv(65536)
        if not d:
            return status, hd, rest
        rest += d


def request(srv, raw, src="127.0.0.1", timeout=120):  # generous: a chat request under ASan at -O0
    s = connect(srv, src, timeout)
    try:
        s.sendall(raw)
        return read_response(s, timeout)
    finally:
        s.close()


def post(path, body, ctype="application/json", extra=b"", host=b"127.0.0.1"):
    b = json.dumps(body).encode() if not isinstance(body, bytes) else body
    h = b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + host + b"\r\n"
    if ctype:
        h += b"Content-Type: " + ctype.encode() + b"\r\n"
    return h + extra + b"Content-Length: %d\r\n\r\n" % len(b) + b


def closed_within(s, seconds):
    """True when the peer closes s (EOF or reset) within `seconds`; data before EOF is dropped."""
    t_end = time.time() + seconds
    while time.time() < t_end:
        r, _, _ = select.select([s], [], [], max(0.0, t_end - time.time()))
        if not r:
            break
        try:
            if not s.recv(65536):
                return True
        except OSError:
            return True
    return False


def close_wait_count(port):
    """Server-side sockets of `port` in CLOSE-WAIT (the peer sent FIN, the server has not closed)."""
    n = 0
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                next(fh)
                for ln in fh:
                    p = ln.split()
                    if int(p[1].split(":")[1], 16) == port and p[3] == "08":
                        n += 1
        except OSError:
            pass
    return n


def error_code(body):
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


# ---- tests on a server with the defaults (no key) -------------------------------------------------

def test_read_timeout(a):
    """Nothing sent / half a request line / half the headers / half a body: closed by --read-timeout
    (default 10 s); a kept-alive connection idle as long is still served (the idle timeout is longer)."""
    keep = connect(a)
    keep.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    check(read_response(keep)[0] == 200, "keep-alive /health")
    socks = {"nothing": connect(a), "half line": connect(a), "half headers": connect(a), "half body": connect(a)}
    socks["half line"].sendall(b"GET /hea")
    socks["half headers"].sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    socks["half body"].sendall(post("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "Hi"}]}')[:-20])
    t0 = time.time()
    limit = DEFAULT_READ_TIMEOUT + 4  # the watchdog ticks every 0.1 s; 4 s of slack for a loaded machine
    for what, s in socks.items():
        check(closed_within(s, max(0.1, t0 + limit - time.time())), f"'{what}' socket still open after {limit} s")
        s.close()
    keep.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    check(read_response(keep)[0] == 200, f"a kept-alive connection was dropped by the read timeout")
    keep.close()


def test_half_close(a):
    """200 clients send GET /health then half-close (FIN): each gets its answer and EOF within 3 s,
    and no server socket is left in CLOSE-WAIT."""
    n = 60 if QUICK else 200
    socks = []
    for i in range(n):
        s = connect(a)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        socks.append(s)
    t_end = time.time() + 3
    left = 0
    for s in socks:
        if not closed_within(s, max(0.05, t_end - time.time())):
            left += 1
    time.sleep(0.2)
    cw = close_wait_count(a.port)
    for s in socks:
        s.close()
    check(left == 0, f"{left} of {n} half-closed connections not closed by the server within 3 s")
    check(cw == 0, f"{cw} server sockets in CLOSE-WAIT")


def test_framing(a):
    """Conflicting Content-Length, Content-Length + Transfer-Encoding, bad and oversized chunk lines,
    unknown Transfer-Encoding: a 400 (never 5xx nor 200), then the connection is closed."""
    body = json.dumps(CHAT).encode()
    cases = {
        "two Content-Length": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(body), len(body) + 7) + body + b"GET /x",
        "Content-Length + chunked": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n",
        "bad chunk size": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n",
        "33 KB chunk extension": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n%x;" % len(body) + b"e" * 33000 + b"\r\n" + body + b"\r\n0\r\n\r\n",
        "Transfer-Encoding gzip": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                  b"Transfer-Encoding: gzip\r\n\r\n" + body,
    }
    for what, raw in cases.items():
        s = connect(a)
        try:
            s.sendall(raw)
        except OSError:
            pass
        try:
            st, hd, data = read_response(s)
        except (OSError, Fail) as e:
            raise Fail(f"{what}: no answer ({e})")
        check(st == 400, f"{what}: status {st}, expected 400: {data[:200]!r}")
        check(closed_within(s, 3), f"{what}: the connection stayed open after the {st}")
        s.close()


def test_linger_413(a):
    """A client that keeps uploading a 64 MB body after the early 413 (its Content-Length is over
    --max-body) can still read the 413: the server drains before closing instead of resetting."""
    n = 64_000_000
    s = connect(a, timeout=30)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % n)
    chunk = b"x" * (1 << 20)
    sent = 0
    err = None
    try:
        while sent < n:
            sent += s.send(chunk[: min(len(chunk), n - sent)])
    except OSError as e:
        err = e
    try:
        st, hd, data = read_response(s, timeout=30)
    except (OSError, Fail) as e:
        raise Fail(f"the 413 could not be read after sending {sent} bytes ({err or 'no send error'}): {e}")
    finally:
        s.close()
    check(st == 413 and error_code(data) == "request_too_large", f"status {st} {data[:200]!r}")
    check(err is None and sent == n, f"the upload broke after {sent} of {n} bytes: {err}")


def test_browser_rules(a):
    """No key: a foreign Host (DNS rebinding) or Origin (cross-site) is refused with 403; an API POST
    needs a JSON content type (text/plain, form: 415); no CORS headers and preflights refused
    without --cors-origin; the chat page and same-origin API calls work."""
    ok = post("/v1/chat/completions", CHAT)
    st, _, data = request(a, ok)
    check(st == 200, f"plain JSON POST: {st} {data[:200]!r}")
    st, _, data = request(a, post("/v1/chat/completions", CHAT, host=b"attacker.example:8080"))
    check(st == 403 and error_code(data) == "host_not_allowed", f"foreign Host: {st} {data[:200]!r}")
    st, _, data = request(a, b"GET /v1/models HTTP/1.1\r\nHost: rebind.attacker.example\r\n\r\n")
    check(st == 403, f"foreign Host on /v1/models: {st}")
    st, _, data = request(a, b"GET / HTTP/1.1\r\nHost: rebind.attacker.example\r\n\r\n")
    check(st == 403, f"foreign Host on the chat page: {st}")
    for host in (b"localhost:%d" % a.port, b"127.0.0.1:%d" % a.port, b"[::1]:%d" % a.port):
        st, _, _ = request(a, b"GET /v1/models HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        check(st == 200, f"Host {host!r}: {st}")
    st, _, data = request(a, post("/v1/chat/completions", CHAT, extra=b"Origin: https://evil.example\r\n"))
    check(st == 403 and error_code(data) == "origin_not_allowed", f"cross-site Origin: {st} {data[:200]!r}")
    st, _, data = request(a, post("/v1/chat/completions", CHAT, extra=b"Origin: null\r\n"))
    check(st == 403, f"Origin null: {st}")
    st, _, data = request(a, post("/v1/chat/completions", CHAT, extra=b"Origin: http://127.0.0.1:%d\r\n" % a.port))
    check(st == 200, f"same-origin POST (the chat page's): {st} {data[:200]!r}")
    for ct in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", None):
        st, _, data = request(a, post("/v1/chat/completions", CHAT, ctype=ct))
        check(st == 415 and error_code(data) == "unsupported_media_type", f"Content-Type {ct}: {st} {data[:200]!r}")
    st, _, data = request(a, post("/v1/completions", {"prompt": "a", "max_tokens": 1}, ctype="application/json; charset=utf-8"))
    check(st == 200, f"application/json; charset=utf-8: {st} {data[:200]!r}")
    st, hd, _ = request(a, b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://app.example\r\n"
                           b"Access-Control-Request-Method: POST\r\n\r\n")
    check(st in (403, 405) and "access-control-allow-origin" not in hd, f"preflight without --cors-origin: {st} {hd}")
    st, hd, data = request(a, b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % a.port)
    check(st == 200 and b"<html" in data.lower(), f"chat page: {st}")


def test_cors_and_limits(quick):
    """--cors-origin answers preflights and adds the CORS headers for that origin only; per-IP cap;
    the global cap's reserve answers /health (other routes 503); the buffered-bytes cap (503 +
    Retry-After); --read-timeout 2."""
    b = Server("--cors-origin", "https://app.example", "--max-conns-per-ip", "8", "--max-conns", "24",
               "--read-timeout", "2", "--max-body", "1000000", "--max-buffered", "2500000")
    held = []
    try:
        pre = (b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://app.example\r\n"
               b"Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type, authorization\r\n\r\n")
        st, hd, _ = request(b, pre)
        check(st == 204, f"preflight: {st} {hd}")
        check(hd.get("access-control-allow-origin") == "https://app.example", f"preflight ACAO {hd}")
        check("POST" in hd.get("access-control-allow-methods", ""), f"preflight methods {hd}")
        allow_h = hd.get("access-control-allow-headers", "").lower()
        check("content-type" in allow_h and "authorization" in allow_h, f"preflight headers {hd}")
        check("origin" in hd.get("vary", "").lower(), f"preflight Vary {hd}")
        st, hd, _ = request(b, pre.replace(b"https://app.example", b"https://other.example"))
        check(st == 403 and "access-control-allow-origin" not in hd, f"preflight from another origin: {st} {hd}")
        st, hd, data = request(b, post("/v1/chat/completions", CHAT, extra=b"Origin: https://app.example\r\n"))
        check(st == 200 and hd.get("access-control-allow-origin") == "https://app.example", f"CORS POST: {st} {hd}")
        # per-IP cap: 8 idle sockets from 127.0.0.2; a 9th from it is closed at once, 127.0.0.3 is served
        for _ in range(8):
            held.append(connect(b, "127.0.0.2"))
        time.sleep(0.2)
        ninth = connect(b, "127.0.0.2")
        check(closed_within(ninth, 1.0), "a 9th connection from one IP was accepted (--max-conns-per-ip 8)")
        ninth.close()
        st, _, _ = request(b, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", src="127.0.0.3", timeout=2)
        check(st == 200, f"/health from another IP while one IP is at its cap: {st}")
        # global cap 24: 8 + 8 + 8 idle sockets from three IPs; /health still answered from the
        # reserve, a chat request gets 503 + Retry-After
        for src in ("127.0.0.4", "127.0.0.5"):
            for _ in range(8):
                held.append(connect(b, src))
        time.sleep(0.2)
        t0 = time.time()
        st, hd, _ = request(b, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", src="127.0.0.6", timeout=2)
        check(st == 200 and time.time() - t0 < 1.5, f"/health with the pool full: {st} in {time.time() - t0:.2f} s")
        check(hd.get("connection") == "close", f"a reserve connection is kept alive: {hd}")
        st, hd, data = request(b, post("/v1/chat/completions", CHAT), src="127.0.0.7", timeout=2)
        check(st == 503 and hd.get("retry-after") and error_code(data) == "too_many_connections",
              f"chat with the pool full: {st} {hd} {data[:200]!r}")
        # --read-timeout 2: the idle sockets go within 2 + 2 s, then the pool serves again
        t0 = time.time()
        for s in held:
            check(closed_within(s, max(0.1, t0 + 4 - time.time())), "an idle socket outlived --read-timeout 2 by 2 s")
            s.close()
        held = []
        time.sleep(0.3)
        st, _, data = request(b, post("/v1/chat/completions", CHAT), src="127.0.0.2")
        check(st == 200, f"chat after the idle sockets went: {st} {data[:200]!r}")
        # buffered bytes: two bodies of 1,000,000 announced and half sent hold 2,000,000 of 2,500,000;
        # a third of 600,000 is refused at its headers with 503 + Retry-After, served once they go
        half = []
        for src in ("127.0.0.8", "127.0.0.9"):
            s = connect(b, src)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000000\r\n\r\n" + b" " * 500000)
            half.append(s)
        time.sleep(0.3)
        padded = json.dumps(CHAT).encode() + b" " * 600000  # 2,600,000 > 2,500,000 with the two above
        st, hd, data = request(b, post("/v1/chat/completions", padded), src="127.0.0.10")
        check(st == 503 and hd.get("retry-after") and error_code(data) == "server_busy",
              f"over --max-buffered: {st} {hd} {data[:200]!r}")
        for s in half:
            s.close()
        time.sleep(0.3)
        st, _, data = request(b, post("/v1/chat/completions", padded), src="127.0.0.10")
        check(st == 200, f"after the buffered bodies went: {st} {data[:200]!r}")
    finally:
        for s in held:
            s.close()
        b.stop()


def test_key_rules(quick):
    """With an API key the Host / Origin allow-list is off (the key guards), the JSON content type
    is still required."""
    c = Server("--api-key", "k-harden")
    try:
        auth = b"Authorization: Bearer k-harden\r\n"
        st, _, data = request(c, post("/v1/chat/completions", CHAT, extra=auth, host=b"api.example.com"))
        check(st == 200, f"keyed request with another Host: {st} {data[:200]!r}")
        st, _, data = request(c, post("/v1/chat/completions", CHAT, ctype="text/plain", extra=auth))
        check(st == 415, f"keyed text/plain POST: {st} {data[:200]!r}")
    finally:
        c.stop()


def main():
    tests_a = [test_read_timeout, test_half_close, test_framing, test_linger_413, test_browser_rules]
    tests_other = [test_cors_and_limits, test_key_rules]
    failed = []
    a = Server()
    try:
        for t in tests_a:
            if ONLY and t.__name__ not in ONLY:
                continue
            t0 = time.time()
            try:
                t(a)
                print(f"PASS {t.__name__} ({time.time() - t0:.1f} s)", flush=True)
            except (Fail, OSError) as e:
                print(f"FAIL {t.__name__}: {e}", flush=True)
                failed.append(t.__name__)
            check(a.p.poll() is None, f"the server died: {a.stderr()}")
    finally:
        a.stop()
    for t in tests_other:
        if ONLY and t.__name__ not in ONLY:
            continue
        t0 = time.time()
        try:
            t(QUICK)
            print(f"PASS {t.__name__} ({time.time() - t0:.1f} s)", flush=True)
        except (Fail, OSError) as e:
            print(f"FAIL {t.__name__}: {e}", flush=True)
            failed.append(t.__name__)
    if failed:
        print("FAILED: " + ", ".join(failed))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
