#!/usr/bin/env python3
"""fuzz_http.py — a fuzzer for `rocmforge serve` over HTTP: the router, the header checks, the
body limit and the request parser as a client reaches them, with real generation behind.

Starts the server (SmolLM2 on the CPU, a small context so generations stay short), then for
--seconds sends random requests from several threads through raw sockets: methods and paths
from the routes and mutations of them, Authorization / Content-Type / Content-Length /
Transfer-Encoding headers right, wrong and broken, and bodies made from valid chat and
completion requests by JSON-aware mutations (values of other types, extreme numbers, deleted
and added keys, deep nesting) and byte-level ones (flips, cuts, splices, invalid UTF-8).
Clients read the answer with a short timeout and then drop the connection, mid-stream or not.
Fails on: any 5xx other than 503, the server dying, /health not answering; at the end the
server must go idle with every KV block back in the pool. A failing input is printed.
usage: fuzz_http.py ROCMFORGE MODEL [--seconds N] [--threads N] [--seed N]"""
import argparse
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

KEY = "sk-fuzz"
ROUTES = ["/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions", "/v1/models", "/models",
          "/health", "/metrics", "/v1/health", "/", "/v1", "/v1/embeddings"]
METHODS = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT", "POST ", "get", "X" * 40]
CHAT = {"model": "smol", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}],
        "max_tokens": 4, "temperature": 0.7, "top_p": 0.9, "n": 1, "stream": False, "stop": ["\n"], "seed": 1,
        "logprobs": False, "stream_options": {"include_usage": True}}
COMPL = {"model": "smol", "prompt": "Once upon a time", "max_tokens": 4, "echo": False, "logprobs": 1, "n": 1,
         "stream": False, "stop": "x"}
EMBED = {"model": "x", "input": ["Hello", [1, 2, 3]], "encoding_format": "base64"}
ODD = [None, True, False, 0, -1, 1, 2, 64, 65, 2 ** 31, 2 ** 63, -2 ** 63, 1e308, -1e308, 0.5, -0.0, 1e-320, "", "x",
       "\u0000", "\ud800" if False else "\udbff", "é😀", "a" * 5000, [], [1], ["a", 1], {}, {"a": {"b": [None]}},
       [[[[[[[[[[]]]]]]]]]], "<|im_start|>", "<|im_end|>", "user", "assistant", "system", "tool", "json_object"]
KEYS = ["messages", "prompt", "role", "content", "model", "max_tokens", "max_completion_tokens", "n", "stream",
        "stream_options", "include_usage", "temperature", "top_p", "top_k", "min_p", "stop", "seed", "logprobs",
        "top_logprobs", "echo", "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos",
        "logit_bias", "tools", "tool_choice", "response_format", "best_of", "suffix", "type", "text", "user"]


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.n = 0
        self.status = {}
        self.closed = 0
        self.timeouts = 0
        self.fail = None


def mutate_json(rng, v, depth=0):
    if depth > 6:
        return rng.choice(ODD)
    r = rng.random()
    if isinstance(v, dict):
        v = dict(v)
        if r < 0.3 and v:
            k = rng.choice(list(v))
            v[k] = mutate_json(rng, v[k], depth + 1)
        elif r < 0.45 and v:
            del v[rng.choice(list(v))]
        elif r < 0.6:
            v[rng.choice(KEYS)] = rng.choice(ODD)
        elif r < 0.7:
            return rng.choice(ODD)
        else:
            for k in list(v):
                if rng.random() < 0.3:
                    v[k] = mutate_json(rng, v[k], depth + 1)
        return v
    if isinstance(v, list):
        v = list(v)
        if r < 0.3 and v:
            i = rng.randrange(len(v))
            v[i] = mutate_json(rng, v[i], depth + 1)
        elif r < 0.45 and v:
            del v[rng.randrange(len(v))]
        elif r < 0.6:
            v.append(mutate_json(rng, rng.choice(v) if v else rng.choice(ODD), depth + 1))
        elif r < 0.7:
            v = v * rng.randint(2, 80)
        else:
            return rng.choice(ODD)
        return v
    if r < 0.5:
        return rng.choice(ODD)
    if isinstance(v, str):
        return v + rng.choice(["", "x" * rng.randint(1, 300), " ".join(["word"] * rng.randint(1, 200))])
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return rng.choice([v * 10, -v, v + 0.5, 10 ** rng.randint(1, 20)])
    return v


def mutate_bytes(rng, b):
    b = bytearray(b)
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if not b:
            b += bytes([rng.randrange(256)])
        elif r < 0.3:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif r < 0.5:
            del b[rng.randrange(len(b)):][:rng.randint(1, 20)]
        elif r < 0.7:
            i = rng.randrange(len(b))
            b[i:i] = rng.choice([b"\xff\xfe", b"\xc0\x80", b"\\u0000", b"\\ud800", b"{", b"[", b"\"", b"\x00", b"1e999"])
        elif r < 0.8:
            b = b[:rng.randrange(len(b))]
        else:
            i = rng.randrange(len(b))
            b[i:i] = b[rng.randrange(len(b)):][:50]
    return bytes(b)


def make_request(rng):
    route = rng.choice(ROUTES[:2] * 4 + ROUTES)
    if rng.random() < 0.1:
        route = route + rng.choice(["/", "?a=1", "%2F", "//", "/../health", "?" + "x" * 3000, "\x7f"])
    method = "POST" if route.startswith(("/v1/chat", "/v1/compl", "/chat", "/compl", "/v1/embed")) and rng.random() < 0.85 else rng.choice(METHODS)
    base = CHAT if "chat" in route else EMBED if "embed" in route else COMPL
    body_obj = base
    for _ in range(rng.randint(0, 4)):
        body_obj = mutate_json(rng, body_obj)
    if isinstance(body_obj, dict) and rng.random() < 0.9:
        mt = body_obj.get("max_tokens")  # keep generation short on the CPU: most requests cap it
        if not isinstance(mt, int) or mt > 16:
            body_obj["max_tokens"] = rng.randint(1, 16)
        if rng.random() < 0.3:
            body_obj["stream"] = True
    try:
        body = json.dumps(body_obj, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError):
        body = b"{}"
    if rng.random() < 0.25:
        body = mutate_bytes(rng, body)
    if method in ("GET", "HEAD") and rng.random() < 0.8:
        body = b""
    hdr = [f"{method} {route} HTTP/1.1", "Host: 127.0.0.1"]
    if rng.random() < 0.9:
        hdr.append("Connection: close")  # else keep-alive: the client's timeout ends it
    r = rng.random()
    if r < 0.8:
        hdr.append("Authorization: Bearer " + KEY)
    elif r < 0.85:
        hdr.append("Authorization: Bearer " + KEY[:-1])
    elif r < 0.9:
        hdr.append("Authorization: " + rng.choice(["Basic eDp5", "Bearer", "Bearer  " + KEY + "  ", "bearer " + KEY, "x" * 500]))
    r = rng.random()
    if r < 0.75:  # the API refuses other types (415) before parsing: mostly JSON, so bodies reach the parser
        hdr.append("Content-Type: " + rng.choice(["application/json", "application/json; charset=latin1"]))
    elif r < 0.9:
        hdr.append("Content-Type: " + rng.choice(["text/plain", "multipart/form-data; boundary=x",
                                                    "application/x-www-form-urlencoded", "application/jsonx"]))
    chunked = rng.random() < 0.1
    r = rng.random()
    if chunked:
        hdr.append("Transfer-Encoding: chunked")
        parts = []
        i = 0
        while i < len(body):
            k = rng.randint(1, 4096)
            parts.append(b"%x\r\n%s\r\n" % (len(body[i:i + k]), body[i:i + k]))
            i += k
        payload = b"".join(parts) + rng.choice([b"0\r\n\r\n", b"0\r\n\r\n", b"zz\r\n", b""])
    else:
        if r < 0.9:
            hdr.append(f"Content-Length: {len(body)}")
        elif r < 0.95:
            hdr.append("Content-Length: " + rng.choice(["-1", "abc", "99999999999999999999", str(len(body) + 5), "0"]))
        payload = body
    if rng.random() < 0.05:
        hdr.append("X-" + "a" * rng.randint(1, 9000) + ": 1")
    head = ("\r\n".join(hdr) + "\r\n\r\n").encode("utf-8", "surrogatepass")
    return head + payload


def one(port, data, rng, st):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass
        s.settimeout(rng.choice([0.05, 0.5, 3.0, 8.0]))
        got = b""
        try:
            while len(got) < 200000:
                d = s.recv(65536)
                if not d:
                    break
                got += d
                if rng.random() < 0.02:
                    break  # drop mid-answer
        except socket.timeout:
            with st.mu:
                st.timeouts += 1
        except OSError:
            pass
    finally:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3})", got)
    with st.mu:
        st.n += 1
        if not m:
            st.closed += 1
            return
        code = int(m.group(1))
        st.status[code] = st.status.get(code, 0) + 1
        if code >= 500 and code != 503 and st.fail is None:
            st.fail = f"status {code} for request {data[:2000]!r}\nanswer {got[:1000]!r}"


def get(port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nConnection: close\r\n\r\n".encode())
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rocmforge")
    ap.add_argument("model")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    print(f"fuzz_http: seed {a.seed}, {a.seconds:.0f} s, {a.threads} threads", flush=True)
    log = open(f"/tmp/rf-fuzz-http-{os.getpid()}.log", "w+")
    p = subprocess.Popen([a.rocmforge, "serve", "-m", a.model, "--device", "cpu", "--port", "0", "--api-key", KEY,
                          "--alias", "smol", "-c", "256", "--parallel", "8", "--max-queue", "16", "--max-body", "262144",
                          "-t", "1", "--timeout", "20"], stderr=log, stdout=subprocess.DEVNULL)
    port = None
    for _ in range(600):
        log.seek(0)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.1)
    assert port, "server did not start"
    while b" 200 " not in get(port, "/health").split(b"\r\n")[0] + b" ":
        time.sleep(0.2)
    st = Stats()
    stop = time.time() + a.seconds

    def worker(i):
        rng = random.Random(a.seed * 1000 + i)
        while time.time() < stop and st.fail is None and p.poll() is None:
            data = make_request(rng)
            try:
                one(port, data, rng, st)
            except OSError as x:
                if p.poll() is None:
                    continue
                st.fail = f"server died ({p.returncode}) after {data[:2000]!r}: {x}"

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(a.threads)]
    for t in ths:
        t.start()
    last = time.time()
    while any(t.is_alive() for t in ths):
        time.sleep(1)
        if time.time() - last >= 60:
            last = time.time()
            h = get(port, "/health")
            with st.mu:
                print(f"  {st.n} requests, statuses {dict(sorted(st.status.items()))}, closed without answer {st.closed}, "
                      f"client timeouts {st.timeouts}; /health {h.split(b' ')[1].decode()}", flush=True)
    for t in ths:
        t.join()
    rc = 0
    if p.poll() is not None:
        st.fail = st.fail or f"server died: exit {p.returncode}"
    if st.fail is None:  # idle with every block back
        t0 = time.time()
        while time.time() - t0 < 120:
            mt = get(port, "/metrics").decode("utf-8", "replace")
            val = {k: float(v) for k, v in re.findall(r"^(rocmforge_[a-z_]+) ([-0-9.e+]+)$", mt, re.M)}
            if val.get("rocmforge_requests_active", 1) == 0 and val.get("rocmforge_sequences_running", 1) == 0:
                break
            time.sleep(0.5)
        ok = val["rocmforge_kv_blocks_used"] == 0 and val["rocmforge_kv_blocks_free"] + val["rocmforge_kv_blocks_cached"] == val["rocmforge_kv_blocks_total"]
        fives = re.findall(r'status="(5\d\d)"\} (\d+)', mt)
        print(f"  end: {val.get('rocmforge_requests_active')} active, KV blocks {val['rocmforge_kv_blocks_used']:.0f} used, "
              f"{val['rocmforge_kv_blocks_free']:.0f} free + {val['rocmforge_kv_blocks_cached']:.0f} cached of "
              f"{val['rocmforge_kv_blocks_total']:.0f}; server-side 5xx: {fives}; "
              f"disconnects {val.get('rocmforge_client_disconnects_total', 0):.0f}")
        if not ok:
            st.fail = "KV blocks not back in the pool after the fuzz"
        if any(c != "503" for c, _ in fives):
            st.fail = f"the server counted 5xx answers: {fives}"
    print(f"fuzz_http: {st.n} requests, statuses {dict(sorted(st.status.items()))}, closed without answer {st.closed}, "
          f"client timeouts {st.timeouts}")
    if st.fail:
        print("FAIL: " + st.fail)
        log.seek(0)
        print(log.read()[-3000:])
        rc = 1
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            prc = p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            print("FAIL: server did not stop after SIGTERM")
            return 1
        if prc != 0:
            print(f"FAIL: server exit code {prc} after SIGTERM")
            rc = 1
    print("PASS" if rc == 0 else "FAILED")
    return rc


if __name__ == "__main__":
    sys.exit(main())
