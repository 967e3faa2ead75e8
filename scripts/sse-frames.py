#!/usr/bin/env python3
"""sse-frames.py — how a server's SSE tokens reach the socket, without the openai client: N
threads (blocking sockets, TCP_NODELAY), each sending --rounds streaming /v1/completions requests
(--prompt-tokens random ids below --vocab, --gen-tokens generated, ignore_eos) one after another,
recording every recv(): its time and how many `data: {` frames it held. Reports per N the frames,
the recvs that held two or more frames (tokens the server wrote, or the kernel delivered,
together), and the inter-frame gap p10/p50/p90 and share under 1 ms. A client this thin reads a
frame within microseconds of its arrival, so a gap here is the server's; bench-serve.py's ITL
(openai SDK, asyncio) adds its own parsing and scheduling, and where the two disagree (bench-serve
showing sub-millisecond gaps, tokens "in pairs", this script not) the pairing is the client's.
usage: sse-frames.py [--host 127.0.0.1] [--port 8080] [--streams 8,32] [--rounds 2]
       [--prompt-tokens 128] [--gen-tokens 128] [--vocab 30000] [--model bench]"""
import argparse
import json
import random
import socket
import threading
import time


def one(a, rng, frames, gaps):
    body = json.dumps({"model": a.model, "prompt": [rng.randrange(100, a.vocab) for _ in range(a.prompt_tokens)],
                       "max_tokens": a.gen_tokens, "temperature": 0, "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection((a.host, a.port))
    s.settimeout(600)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (a.host.encode(), len(body)) + body)
    last, tail = None, b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        t = time.perf_counter()
        k = d.count(b"data: {")
        if k:
            frames.append(k)
            if last is not None:
                gaps.append(t - last)
            gaps.extend([0.0] * (k - 1))
            last = t
        tail = (tail + d)[-64:]
        if b"[DONE]" in tail or b"HTTP/1.1 4" in d[:12] or b"HTTP/1.1 5" in d[:12]:
            break
    s.close()


def level(a, n):
    frames, gaps = [], []

    def stream(i):
        rng = random.Random(i * 7919 + n)
        for _ in range(a.rounds):
            one(a, rng, frames, gaps)  # list.append is atomic under the GIL

    t0 = time.time()
    th = [threading.Thread(target=stream, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.time() - t0
    g = sorted(gaps)
    if not g:
        print(f"| {n} | no frames (check --port, --model, the server's log) |")
        return
    q = lambda p: g[int(p * (len(g) - 1))] * 1e3
    multi = sum(1 for k in frames if k >= 2)
    print(f"| {n} | {sum(frames)} | {len(frames)} | {multi} ({100 * multi / len(frames):.1f}%) | "
          f"{q(.1):.2f} / {q(.5):.2f} / {q(.9):.2f} | {100 * sum(1 for x in g if x < 1e-3) / len(g):.1f}% | "
          f"{sum(frames) / wall:.0f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--streams", default="8,32")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=30000)
    ap.add_argument("--model", default="bench")
    a = ap.parse_args()
    print("| streams | frames | recvs with frames | recvs with >= 2 | gap p10 / p50 / p90 ms | gaps < 1 ms | frames/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for n in [int(x) for x in a.streams.split(",") if x.strip()]:
        level(a, n)


if __name__ == "__main__":
    main()
