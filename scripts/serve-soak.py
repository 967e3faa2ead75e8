#!/usr/bin/env python3
"""serve-soak.py — a soak test of `rocmforge serve`, run by hand (not in `make test`).

One server on a free loopback port; N minutes (default 30) of mixed traffic from threads:
  normal    chat and completions, streaming and not (their latencies are the numbers reported)
  slow      clients that trickle their headers or body (cut by --read-timeout), and streams read
            slowly then dropped
  idle      floods of sockets that connect and send nothing, from several 127.0.0.x addresses
  oversized a 64 MB upload past --max-body (its 413 must be readable), chunked bodies, huge headers
  malformed garbage, conflicting Content-Length, bad JSON, foreign Host / Origin, text/plain POSTs,
            half-closed and reset connections
  health    GET /health once a second (must always be 200)
Then it waits for the quiet state and asserts: the server is alive; every KV block free
(/metrics: used 0, free + cached = total, no request active); open fds at most the baseline
taken after a warm-up with the same traffic; RSS at most the baseline + max(16 MiB, 10 %) (the
allocator keeps what the warm-up grew; a leak grows with the request count, which the soak
multiplies many times over). The KV pool's pages count in RSS from their first use, so the
server runs with a small pool (-c 256 --parallel 4 --kv-blocks 64, overridable after --) that
the warm-up fills completely first (4 sequences of 240 tokens). Prints the p50 / p99 latency of
the normal requests.
usage: scripts/serve-soak.py [--minutes M] [--rocmforge build/rocmforge] [--model FILE] [--seed S]
                             [--warmup S] [-- extra serve options]
Exit 0 = every assertion held."""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--minutes", type=float, default=30)
ap.add_argument("--warmup", type=float, default=30, help="seconds of traffic before the baseline (default 30)")
ap.add_argument("--rocmforge", default="build/rocmforge")
ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("extra", nargs="*", help="more `rocmforge serve` options (after --)")
A = ap.parse_args()

MSG = [{"role": "user", "content": "Write one short sentence about the sea."}]
stats_lock = threading.Lock()
stats = {}          # kind -> {status or error name: count}
lat = []            # seconds of each normal request (phase: main only)
health_lat = []
problems = []       # assertion failures seen during the run
stop = threading.Event()
measuring = threading.Event()


def count(kind, what):
    with stats_lock:
        d = stats.setdefault(kind, {})
        d[what] = d.get(what, 0) + 1


def problem(msg):
    with stats_lock:
        if len(problems) < 50:
            problems.append(msg)


class Server:
    def __init__(self):
        self.log = open(f"/tmp/rf-soak-{os.getpid()}.log", "w+")
        cmd = [A.rocmforge, "serve", "-m", A.model, "--device", "cpu", "--port", "0", "-c", "256", "--parallel", "4",
               "--kv-blocks", "64", *A.extra]
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        t0 = time.time()
        self.port = None
        while time.time() - t0 < 60 and not self.port:
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
            elif self.p.poll() is not None:
                sys.exit(f"server exited {self.p.returncode}")
            time.sleep(0.05)
        while time.time() - t0 < 120:
            try:
                if get(self.port, "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        sys.exit("server not ready")

    def rss_fds(self, samples=1):
        """RSS and open fds; with samples > 1 the least fd count over samples 0.5 s apart (a
        connection the last probe just closed may still be open for a moment)."""
        fds = []
        for i in range(samples):
            if i:
                time.sleep(0.5)
            fds.append(len(os.listdir(f"/proc/{self.p.pid}/fd")))
        with open(f"/proc/{self.p.pid}/status") as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) * 1024
        return rss, min(fds)


def get(port, path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def metrics(port):
    st, body = get(port, "/metrics")
    m = {}
    for ln in body.decode().splitlines():
        if ln and not ln.startswith("#"):
            k, _, v = ln.rpartition(" ")
            m[k] = float(v)
    return m


def raw(port, data, src="127.0.0.1", timeout=15, read=True):
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    try:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        while True:
            d = s.recv(65536)
            if not d:
                return out
            out += d
    finally:
        s.close()


def status_of(resp):
    m = re.match(rb"HTTP/1\.1 (\d+)", resp)
    return int(m.group(1)) if m else "no answer"


def post_bytes(path, body, extra=b"", ctype=b"application/json"):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: " + ctype +
            b"\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)


# ---- traffic --------------------------------------------------------------------------------

def normal(port, rng):
    stream = rng.random() < 0.5
    chat = rng.random() < 0.7
    body = {"max_tokens": rng.randint(4, 24), "temperature": 0.7, "stream": stream}
    if chat:
        body["messages"] = MSG
    else:
        body["prompt"] = "The sea is"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        ok = r.status == 200 and (not stream or data.rstrip().endswith(b"data: [DONE]"))
        count("normal", r.status if ok or r.status != 200 else "bad stream")
        if not ok:
            problem(f"normal request: {r.status} {data[:200]!r}")
        elif measuring.is_set():
            with stats_lock:
                lat.append(time.time() - t0)
    finally:
        c.close()


def slow(port, rng):
    kind = rng.randrange(3)
    s = socket.socket()
    s.settimeout(60)
    s.connect(("127.0.0.1", port))
    try:
        if kind == 0:  # trickled headers: cut by the read timeout
            req = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
            for i in range(len(req)):
                s.send(req[i:i + 1])
                time.sleep(0.5)
                if stop.is_set():
                    break
            count("slow", "headers sent")
        elif kind == 1:  # half a body, then silence
            body = json.dumps({"messages": MSG, "max_tokens": 4}).encode()
            s.sendall(post_bytes(b"/v1/chat/completions", body)[:-10])
            d = s.recv(1000)
            count("slow", "body cut" if not d else "body answered")
        else:  # a stream read slowly, then dropped
            body = json.dumps({"messages": MSG, "max_tokens": 64, "stream": True}).encode()
            s.sendall(post_bytes(b"/v1/chat/completions", body))
            for _ in range(rng.randint(1, 5)):
                s.recv(16)
                time.sleep(1)
            count("slow", "stream dropped")
    except OSError as e:
        count("slow", type(e).__name__)
    finally:
        s.close()


def idle_flood(port, rng):
    socks = []
    for i in range(rng.randint(50, 300)):
        try:
            s = socket.socket()
            s.bind((f"127.0.0.{2 + i % 8}", 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            socks.append(s)
        except OSError:
            count("idle", "connect failed")
    time.sleep(rng.uniform(1, 12))
    for s in socks:
        s.close()
    count("idle", "flood")


def oversized(port, rng):
    kind = rng.randrange(3)
    try:
        if kind == 0:  # 64 MB after an early 413: the 413 must be readable
            s = socket.socket()
            s.settimeout(60)
            s.connect(("127.0.0.1", port))
            n = 64_000_000
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % n)
            chunk, sent = b" " * (1 << 20), 0
            while sent < n:
                sent += s.send(chunk[: n - sent])
            resp = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                resp += d
            s.close()
            st = status_of(resp)
            count("oversized", st)
            if st != 413:
                problem(f"64 MB upload: {st}")
        elif kind == 1:  # chunked body
            resp = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: "
                             b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n")
            count("oversized", status_of(resp))
        else:  # 60 KB of headers
            resp = raw(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * 60000 + b"\r\n\r\n")
            count("oversized", status_of(resp))
    except OSError as e:
        count("oversized", type(e).__name__)
        if kind == 0:
            problem(f"64 MB upload: {e!r}")


def malformed(port, rng):
    body = json.dumps({"messages": MSG, "max_tokens": 2}).encode()
    cases = [
        lambda: raw(port, bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))),
        lambda: raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\nContent-Length: 3\r\n\r\n" % len(body) + body),
        lambda: raw(port, post_bytes(b"/v1/chat/completions", b'{"messages": [')),
        lambda: raw(port, post_bytes(b"/v1/chat/completions", body, ctype=b"text/plain")),
        lambda: raw(port, post_bytes(b"/v1/chat/completions", body, extra=b"Origin: https://evil.example\r\n")),
        lambda: raw(port, post_bytes(b"/v1/chat/completions", body).replace(b"Host: 127.0.0.1", b"Host: evil.example")),
        lambda: raw(port, b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
    ]
    try:
        if rng.random() < 0.15:  # half-close after the request, then read to the end
            s = socket.socket()
            s.settimeout(15)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
            s.close()
            count("malformed", "half-close")
        elif rng.random() < 0.15:  # reset mid-request
            s = socket.socket()
            s.connect(("127.0.0.1", port))
            s.sendall(post_bytes(b"/v1/chat/completions", json.dumps({"messages": MSG, "stream": True}).encode()))
            time.sleep(rng.uniform(0, 0.5))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
            count("malformed", "reset")
        else:
            st = status_of(rng.choice(cases)())
            count("malformed", st)
            if isinstance(st, int) and st >= 500:
                problem(f"malformed request answered {st}")
    except OSError as e:
        count("malformed", type(e).__name__)


def health(port):
    t0 = time.time()
    try:
        st, _ = get(port, "/health", timeout=10)
    except OSError as e:
        st = type(e).__name__
    dt = time.time() - t0
    count("health", st)
    if st != 200:
        problem(f"/health: {st}")
    if measuring.is_set():
        with stats_lock:
            health_lat.append(dt)


def worker(port, fn, seed, pause):
    rng = random.Random(seed)
    while not stop.is_set():
        try:
            fn(port, rng)
        except Exception as e:  # a crash of the client is reported, not fatal
            count(fn.__name__, "client " + type(e).__name__)
            if fn is normal:
                problem(f"normal request: {e!r}")
        time.sleep(rng.uniform(*pause))


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def fill_pool(port):
    """4 sequences of 240 positions at once: every block of the 64-block pool is written once."""
    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", "/v1/completions", json.dumps({"prompt": f"{i}", "max_tokens": 238, "ignore_eos": True,
                                                          "temperature": 0}), {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        count("fill", r.status)
        c.close()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def run_phase(port, seconds, seed):
    stop.clear()
    plan = [(normal, 4, (0, 0.2)), (slow, 2, (0, 1)), (idle_flood, 1, (2, 10)), (oversized, 1, (1, 5)),
            (malformed, 2, (0, 0.3))]
    ts = []
    for fn, n, pause in plan:
        for i in range(n):
            ts.append(threading.Thread(target=worker, args=(port, fn, seed * 1000 + len(ts), pause), daemon=True))
    ts.append(threading.Thread(target=worker, args=(port, lambda p, r: health(p), seed, (1, 1)), daemon=True))
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join(90)


TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
              7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}


def tcp_table():
    """inode -> (local port, remote port, state) of every TCP socket on the machine"""
    out = {}
    for fn in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(fn) as f:
                next(f)
                for line in f:
                    c = line.split()
                    out[c[9]] = (int(c[1].rsplit(":", 1)[1], 16), int(c[2].rsplit(":", 1)[1], 16),
                                 TCP_STATES.get(int(c[3], 16), c[3]))
        except OSError:
            pass
    return out


def fd_report(pid):
    """The process's fds with, for TCP sockets, their state and whether the peer is a socket this
    script still holds open (a client thread that outlived its join: not the server's leak)."""
    tcp = tcp_table()
    mine = set()
    for fd in os.listdir(f"/proc/{os.getpid()}/fd"):
        try:
            t = os.readlink(f"/proc/{os.getpid()}/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:[") and t[8:-1] in tcp:
            mine.add(tcp[t[8:-1]][0])
    rows, leaks = [], 0
    for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:[") and t[8:-1] in tcp:
            lp, rp, st = tcp[t[8:-1]]
            held = rp in mine
            rows.append(f"{fd}: tcp :{lp} <- :{rp} {st}{' (peer held open by this script)' if held else ''}")
            leaks += 0 if held or st == "LISTEN" else 1
        else:
            rows.append(f"{fd}: {t}")
    return rows, leaks


def quiet(srv, seconds=30):
    """Waits until no request is active and the fd count settles (read timeouts, lingering)."""
    t_end = time.time() + seconds
    last = None
    while time.time() < t_end:
        m = metrics(srv.port)
        fds = srv.rss_fds()[1]
        if m.get("rocmforge_requests_active", 1) == 0 and fds == last:
            return
        last = fds
        time.sleep(2)


def main():
    srv = Server()
    print(f"serve-soak: server pid {srv.p.pid} port {srv.port}; warm-up {A.warmup:.0f} s, soak {A.minutes:g} min", flush=True)
    fill_pool(srv.port)
    run_phase(srv.port, A.warmup, A.seed)
    time.sleep(12)  # past --read-timeout: the warm-up's slow and idle sockets are gone
    quiet(srv)
    rss0, fd0 = srv.rss_fds(samples=6)
    print(f"serve-soak: baseline RSS {rss0 / 2**20:.1f} MiB, {fd0} fds", flush=True)
    with stats_lock:
        stats.clear()
    measuring.set()
    t0 = time.time()
    run_phase(srv.port, A.minutes * 60, A.seed + 1)
    measuring.clear()
    dur = time.time() - t0
    time.sleep(12)
    quiet(srv)
    alive = srv.p.poll() is None
    rss1, fd1 = srv.rss_fds(samples=6) if alive else (0, 0)
    m = metrics(srv.port) if alive else {}
    used, free = m.get("rocmforge_kv_blocks_used", -1), m.get("rocmforge_kv_blocks_free", -1)
    cached, total = m.get("rocmforge_kv_blocks_cached", -1), m.get("rocmforge_kv_blocks_total", -2)
    print(f"serve-soak: {dur / 60:.1f} min of traffic")
    for k in sorted(stats):
        print(f"  {k:10s} " + ", ".join(f"{s}: {n}" for s, n in sorted(stats[k].items(), key=lambda x: str(x[0]))))
    print(f"  normal requests: {len(lat)}, latency p50 {pct(lat, 0.5):.3f} s, p99 {pct(lat, 0.99):.3f} s, max {max(lat or [0]):.3f} s")
    print(f"  /health: p50 {pct(health_lat, 0.5) * 1000:.1f} ms, p99 {pct(health_lat, 0.99) * 1000:.1f} ms, "
          f"max {max(health_lat or [0]) * 1000:.1f} ms")
    print(f"  RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB, fds {fd0} -> {fd1}; KV blocks used {used:.0f}, "
          f"free {free:.0f} + cached {cached:.0f} of {total:.0f}; active {m.get('rocmforge_requests_active', -1):.0f}")
    fails = list(problems)
    if not alive:
        fails.append(f"the server died (exit {srv.p.returncode})")
    else:
        if used != 0 or free + cached != total or m.get("rocmforge_requests_active") != 0:
            fails.append("KV blocks or requests still held")
        if fd1 > fd0:  # a leak grows; fewer than at the baseline is a connection the baseline caught open
            rows, _ = fd_report(srv.p.pid)
            print("  the server's fds now:\n    " + "\n    ".join(rows))
            extra_held = sum(1 for r in rows if "peer held open by this script" in r)
            if fd1 - extra_held > fd0:
                fails.append(f"open fds {fd0} -> {fd1} ({extra_held} of them connections this script still holds)")
            else:
                print(f"  fds {fd0} -> {fd1}: the {fd1 - fd0} more are connections whose client (this script) is still open")
        if rss1 > rss0 + max(16 << 20, rss0 // 10):
            fails.append(f"RSS grew {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB")
        srv.p.send_signal(signal.SIGTERM)
        rc = srv.p.wait(60)
        if rc != 0:
            fails.append(f"exit {rc} after SIGTERM")
    for f in fails:
        print("FAIL: " + f)
    print("serve-soak: " + ("FAILED" if fails else "passed"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
