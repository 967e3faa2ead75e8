#!/usr/bin/env python3
"""bench-serve.py — load benchmark of an OpenAI-compatible server with the official `openai`
client (AsyncOpenAI, streaming): for each N in --streams, N concurrent streams each send
--rounds requests one after another (a closed loop), every request a prompt of --prompt-tokens
random token ids (unique per request, so no prefix cache helps) and --gen-tokens generated tokens
with ignore_eos. Works against `rocmforge serve` and llama.cpp's llama-server alike (both take
token-id prompts on /v1/completions and ignore_eos).

Reported per N (a markdown table, and --json FILE for the raw numbers):
  gen tok/s   generated tokens (usage.completion_tokens, else chunks) / the level's wall time,
              from the first request sent to the last answer done
  TTFT        time from sending a request to its first generated text, p50 / p99
  ITL         time between consecutive streamed chunks of a request (one token each, unless
              the server merges tokens: UTF-8 held back), p50 / p99
Client CPU must not be the bottleneck: above --per-proc streams (default 32) the streams are
spread over several processes, each with its own event loop, started together.
usage: bench-serve.py --base-url http://127.0.0.1:8080/v1 [--streams 1,8,32,64] [--model NAME]
       [--prompt-tokens 128] [--gen-tokens 128] [--rounds 2] [--api-key KEY] [--json FILE] [--label TEXT]"""
import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import random
import statistics
import sys
import time

import openai


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    f, c = math.floor(k), math.ceil(k)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


async def one_request(ac, a, prompt):
    t0 = time.perf_counter()
    first = None
    last = None
    gaps = []
    chunks = 0
    usage = None
    stream = await ac.completions.create(model=a.model, prompt=prompt, max_tokens=a.gen_tokens, temperature=0,
                                         stream=True, stream_options={"include_usage": True},
                                         extra_body={"ignore_eos": True})
    async for ch in stream:
        now = time.perf_counter()
        if ch.usage is not None:
            usage = ch.usage.completion_tokens
        if ch.choices and ch.choices[0].text:
            chunks += 1
            if first is None:
                first = now
            else:
                gaps.append(now - last)
            last = now
    t1 = time.perf_counter()
    return {"t0": t0, "t1": t1, "ttft": (first - t0) if first else None, "gaps": gaps, "chunks": chunks,
            "tokens": usage if usage is not None else chunks}


async def run_streams(a, n_streams, seed, start_at):
    rng = random.Random(seed)
    ac = openai.AsyncOpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=1800)
    lo, hi = 100, max(200, min(a.vocab, 30000))

    async def stream_loop():
        out = []
        for _ in range(a.rounds):
            prompt = [rng.randrange(lo, hi) for _ in range(a.prompt_tokens)]
            try:
                out.append(await one_request(ac, a, prompt))
            except Exception as x:  # a failed request is counted, not fatal
                out.append({"error": f"{type(x).__name__}: {x}"[:300]})
        return out

    delay = start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    res = await asyncio.gather(*[stream_loop() for _ in range(n_streams)])
    await ac.close()
    # perf_counter is per process: report times relative to this process's wall clock
    off = time.time() - time.perf_counter()
    flat = []
    for r in res:
        for q in r:
            if "t0" in q:
                q["t0"] += off
                q["t1"] += off
            flat.append(q)
    return flat


def proc_main(args):
    a, n, seed, start_at = args
    try:
        import uvloop  # faster event loop where present (the GPU machine has it)
        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(run_streams(a, n, seed, start_at))


def level(a, n):
    procs = max(1, math.ceil(n / a.per_proc))
    split = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    start_at = time.time() + (1.0 if procs > 1 else 0.0)
    jobs = [(a, k, hash((a.seed, n, i)) & 0xFFFFFFFF, start_at) for i, k in enumerate(split)]
    if procs == 1:
        res = proc_main(jobs[0])
    else:
        with mp.get_context("spawn").Pool(procs) as pool:
            res = [q for part in pool.map(proc_main, jobs) for q in part]
    ok = [q for q in res if "t0" in q]
    errs = [q["error"] for q in res if "error" in q]
    if not ok:
        return {"streams": n, "requests": 0, "errors": len(errs), "error_sample": errs[:3]}
    wall = max(q["t1"] for q in ok) - min(q["t0"] for q in ok)
    toks = sum(q["tokens"] for q in ok)
    ttft = [q["ttft"] for q in ok if q["ttft"] is not None]
    gaps = [g for q in ok for g in q["gaps"]]
    return {"streams": n, "requests": len(ok), "errors": len(errs), "error_sample": errs[:3], "wall_s": wall,
            "gen_tokens": toks, "gen_tok_s": toks / wall if wall > 0 else float("nan"),
            "ttft_p50_ms": pct(ttft, 50) * 1e3, "ttft_p99_ms": pct(ttft, 99) * 1e3,
            "itl_p50_ms": pct(gaps, 50) * 1e3, "itl_p99_ms": pct(gaps, 99) * 1e3,
            "tokens_per_request": statistics.mean(q["tokens"] for q in ok), "processes": procs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    ap.add_argument("--model", default=None, help="model id (default: the first of /v1/models)")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="requests per stream, one after another")
    ap.add_argument("--per-proc", type=int, default=32, help="streams per client process")
    ap.add_argument("--vocab", type=int, default=0, help="token ids are drawn below this (default: from /v1/models, else 30000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    c = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0)
    models = c.models.list()
    if a.model is None:
        a.model = models.data[0].id
    if a.vocab <= 0:
        a.vocab = 30000
        try:
            extra = models.data[0].model_extra or {}
            nv = (extra.get("meta") or {}).get("n_vocab")
            if nv:
                a.vocab = int(nv)
        except Exception:
            pass
    # warm-up: one short request (first-call costs: graphs, allocations)
    c.completions.create(model=a.model, prompt=[101] * 8, max_tokens=4, extra_body={"ignore_eos": True})
    rows = []
    print(f"# {a.label or a.base_url}: model {a.model}, {a.prompt_tokens}-token prompts, {a.gen_tokens} generated "
          f"(ignore_eos), {a.rounds} requests per stream", flush=True)
    print("| streams | requests | gen tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | errors |", flush=True)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for n in [int(x) for x in a.streams.split(",") if x.strip()]:
        r = level(a, n)
        rows.append(r)
        if r["requests"]:
            print(f"| {n} | {r['requests']} | {r['gen_tok_s']:.0f} | {r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
                  f"{r['itl_p50_ms']:.2f} | {r['itl_p99_ms']:.2f} | {r['errors']} |", flush=True)
        else:
            print(f"| {n} | 0 | - | - | - | - | - | {r['errors']} |", flush=True)
        if r["errors"]:
            print(f"  errors, e.g.: {r['error_sample']}", file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"label": a.label, "base_url": a.base_url, "model": a.model, "prompt_tokens": a.prompt_tokens,
                       "gen_tokens": a.gen_tokens, "rounds": a.rounds, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "levels": rows}, f, indent=1)
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
