#!/usr/bin/env python3
"""serve_tp_storm.py — a disconnect storm against a running `rocmforge serve` (tests/cli/serve_tp.sh).

N streaming chat requests at once (ignore_eos, long max_tokens, more than --parallel so some
wait in the queue); once every slot runs a sequence and tokens stream, every client is cut at once (TCP
reset, like a killed client). Then, once the server reports nothing active, /metrics must show:
rocmforge_kv_blocks_used 0 (free + cached = total: the one block table of the split has every
block back, and with it each GPU's pool), rocmforge_sequences_running and _waiting 0, the
disconnects counted, on a hybrid model (rocmforge_state_slots_total > 0) every recurrent-state
slot back (rocmforge_state_slots_used 0); and a normal request must still be answered.

The per-GPU series (rocmforge_gpu_memory_total_bytes / _free_bytes / rocmforge_gpu_kv_bytes,
label gpu = the ordinal) must be present for each of the --gpus GPUs (none on the CPU), with
rocmforge_tp_size = --tp and the GPUs' KV pools adding up to rocmforge_kv_bytes.

GPU memory. The model of it: the KV pools and the step buffers are allocated when the engine is
made, so a storm, which only takes KV blocks from the pool and gives them back, must not change
any GPU's free memory. Two things may legitimately grow on first use: the GPU scratch arena
(grows to the largest step seen) and the decode steps' CUDA graphs (one recording per batch-size
and depth bucket, recorded the first time a step of that shape runs). So one warm-up storm runs
first, uncompared; then a storm must leave every GPU's free memory exactly as it found it. A
storm's shape (how many sequences are still running at each step of the cut) depends on timing,
so a measured storm may still meet a step shape the warm-up did not and record one more graph:
such a storm prints the difference and another storm is measured, up to 3. PASS needs one of
them to leave every GPU's free memory unchanged; 3 storms in a row that each change it are a
leak (FAIL).

usage: serve_tp_storm.py PORT NAME --tp T --gpus G [--clients N] [--max-tokens M]
Prints PASS / FAIL lines; exit 0 = pass, 1 = fail."""
import json
import socket
import sys
import threading
import time
import urllib.request

PORT, NAME = int(sys.argv[1]), sys.argv[2]


def arg(flag, default):
    return int(sys.argv[sys.argv.index(flag) + 1]) if flag in sys.argv else default


TP, GPUS = arg("--tp", 1), arg("--gpus", 0)
N, MAX_TOK = arg("--clients", 24), arg("--max-tokens", 960)
MEASURED = 3  # storms measured at most, after the warm-up (GPUs only)


class Fail(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Fail(what)


def metrics():
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=30) as r:
        check(r.status == 200, f"/metrics: HTTP {r.status}")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def gpu_series(m, name):
    """{ordinal: value} of a per-GPU gauge."""
    pre = name + '{gpu="'
    return {int(k[len(pre):-2]): v for k, v in m.items() if k.startswith(pre)}


def check_series(m):
    """The per-GPU series and rocmforge_tp_size, as the server's placement implies."""
    check(m.get("rocmforge_tp_size") == TP, f"rocmforge_tp_size {m.get('rocmforge_tp_size')}, expected {TP}")
    tot, fr = gpu_series(m, "rocmforge_gpu_memory_total_bytes"), gpu_series(m, "rocmforge_gpu_memory_free_bytes")
    kv = gpu_series(m, "rocmforge_gpu_kv_bytes")
    if GPUS == 0:
        extra = [k for k in m if k.startswith("rocmforge_gpu_")]
        check(not extra, f"per-GPU series on the CPU: {extra[:3]}")
        print(f"storm {NAME}: rocmforge_tp_size {TP}, no per-GPU series (CPU): PASS")
        return
    check(len(tot) == GPUS and len(fr) == GPUS and len(kv) == GPUS,
          f"per-GPU series for {len(tot)} / {len(fr)} / {len(kv)} GPUs (total / free / kv), expected {GPUS}")
    for g in sorted(tot):
        check(tot[g] > 0 and 0 < fr.get(g, -1) <= tot[g], f"GPU {g}: free {fr.get(g)} of total {tot[g]}")
        check(kv.get(g, 0) > 0, f"GPU {g}: KV pool {kv.get(g)} bytes")
    check(sum(kv.values()) == m["rocmforge_kv_bytes"],
          f"the GPUs' KV pools add up to {sum(kv.values()):.0f} bytes, rocmforge_kv_bytes is {m['rocmforge_kv_bytes']:.0f}")
    if GPUS > 1:
        check(len(set(kv.values())) == 1, f"the GPUs' KV pools differ: {kv}")
    print(f"storm {NAME}: rocmforge_tp_size {TP}; " + ", ".join(
        f"GPU {g}: {fr[g] / 2**20:.1f} of {tot[g] / 2**20:.1f} MiB free, KV pool {kv[g] / 2**20:.1f} MiB" for g in sorted(tot))
        + f" (together {m['rocmforge_kv_bytes'] / 2**20:.1f} MiB = rocmforge_kv_bytes): PASS")


def client(i, k, cut, st):
    """One streaming request; reads until cut, then resets the connection (a killed client)."""
    body = json.dumps({"model": "m", "max_tokens": MAX_TOK, "stream": True, "ignore_eos": True, "temperature": 0.8,
                       "messages": [{"role": "user", "content": f"Storm {i}, client {k}: count to a thousand."}]}).encode()
    s = socket.create_connection(("127.0.0.1", PORT), timeout=60)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (PORT, len(body), body))
        s.settimeout(0.05)
        buf = b""
        while not cut.is_set():
            try:
                d = s.recv(65536)
            except socket.timeout:
                continue
            if not d:
                break
            buf += d
            if not buf.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in buf:
                st["error"] = buf[:300].decode(errors="replace")
                break
            st["events"] = buf.count(b"data: ")  # the role chunk, then a chunk per token
            if b"data: [DONE]" in buf:
                st["done"] = True
                break
    except OSError as e:
        st["error"] = str(e)
    finally:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
        s.close()


def wait_idle(timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        m = metrics()
        if m["rocmforge_sequences_running"] == 0 and m["rocmforge_sequences_waiting"] == 0 and m["rocmforge_requests_active"] == 0:
            return m
        time.sleep(0.1)
    m = metrics()
    raise Fail(f"not idle {timeout} s after the cut: {m['rocmforge_sequences_running']:.0f} running, "
               f"{m['rocmforge_sequences_waiting']:.0f} waiting, {m['rocmforge_requests_active']:.0f} active")


def storm(i):
    before = metrics()
    par = int(before["rocmforge_parallel"])
    target = min(N, par)
    cut, sts = threading.Event(), [{"events": 0, "done": False} for _ in range(N)]
    threads = [threading.Thread(target=client, args=(i, k, cut, sts[k])) for k in range(N)]
    for t in threads:
        t.start()
    # cut once every slot runs a sequence and clients have tokens (the role chunk + a token)
    t0, running, streaming = time.time(), 0, 0
    while time.time() - t0 < 60:
        running = metrics()["rocmforge_sequences_running"]
        streaming = sum(1 for s in sts if s["events"] >= 2 and not s["done"])
        if running >= target and streaming >= 1:
            break
        bad = [s["error"] for s in sts if "error" in s]
        if bad:
            cut.set()
            raise Fail(f"storm {i}: {len(bad)} request(s) refused: {bad[0]!r}")
        time.sleep(0.05)
    cut.set()
    for t in threads:
        t.join(60)
    mid = sum(1 for s in sts if not s["done"])
    check(running >= target and streaming >= 1,
          f"storm {i}: only {running:.0f} sequences running and {streaming} clients streaming after 60 s (wanted {target})")
    m = wait_idle()
    total, used = m["rocmforge_kv_blocks_total"], m["rocmforge_kv_blocks_used"]
    free, cached = m["rocmforge_kv_blocks_free"], m["rocmforge_kv_blocks_cached"]
    gone = m["rocmforge_client_disconnects_total"] - before["rocmforge_client_disconnects_total"]
    check(used == 0 and free + cached == total, f"storm {i}: {used:.0f} KV blocks used, {free:.0f} free + {cached:.0f} cached of {total:.0f}")
    check(m["rocmforge_sequences_running"] == 0, f"storm {i}: {m['rocmforge_sequences_running']:.0f} sequences running")
    check(mid * 5 // 6 <= gone <= N, f"storm {i}: {gone:.0f} disconnects counted for {mid} clients cut mid-stream")
    slots = ""
    if m.get("rocmforge_state_slots_total", 0) > 0:  # a hybrid model: every recurrent-state slot back too
        s_tot, s_used = m["rocmforge_state_slots_total"], m["rocmforge_state_slots_used"]
        ck_tot, ck_used = m.get("rocmforge_state_checkpoints_total", 0), m.get("rocmforge_state_checkpoints_used", 0)
        check(s_used == 0, f"storm {i}: {s_used:.0f} of {s_tot:.0f} recurrent-state slots still held")
        check(ck_used <= ck_tot, f"storm {i}: {ck_used:.0f} state checkpoints used of {ck_tot:.0f}")
        slots = f", state slots used {s_used:.0f} of {s_tot:.0f} (checkpoints {ck_used:.0f} of {ck_tot:.0f} hold prefixes)"
    print(f"storm {NAME} #{i}: {N} clients, {running:.0f} sequences running at the cut, {mid} cut mid-stream, "
          f"{gone:.0f} disconnects; after: KV blocks used {used:.0f} ({free:.0f} free + {cached:.0f} cached of {total:.0f}), "
          f"sequences running {m['rocmforge_sequences_running']:.0f}{slots}: PASS")
    return m


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def normal_request():
    body = json.dumps({"model": "m", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "After the storm: say something."}]}).encode()
    rq = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/chat/completions", data=body,
                                headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        check(r.status == 200, f"a request after the storm: HTTP {r.status}")
        j = json.load(r)
    n = j.get("usage", {}).get("completion_tokens")
    check(n == 8, f"a request after the storm: {n} tokens: {json.dumps(j)[:300]}")
    print(f"storm {NAME}: a request after the storm answered ({n} tokens): PASS")


def main():
    check_series(metrics())
    if GPUS == 0:
        storm(1)
    else:
        storm(1)  # the warm-up: may grow the scratch arena and record graphs (the docstring)
        base = gpu_series(metrics(), "rocmforge_gpu_memory_free_bytes")
        for i in range(2, 2 + MEASURED):
            after = gpu_series(storm(i), "rocmforge_gpu_memory_free_bytes")
            diff = {g: after.get(g, 0) - base[g] for g in base}
            line = ", ".join(f"GPU {g} {mib(base[g])} -> {mib(after.get(g, 0))} ({diff[g]:+.0f} B)" for g in sorted(base))
            if all(d == 0 for d in diff.values()):
                print(f"storm {NAME} #{i}: free memory unchanged: {line}: PASS")
                break
            print(f"storm {NAME} #{i}: free memory changed: {line} (a step shape the earlier storms did not meet, "
                  f"or a leak: storming again)")
            base = after
        else:
            raise Fail(f"{MEASURED} storms in a row changed a GPU's free memory: a leak")
    normal_request()
    check_series(metrics())
    print(f"storm {NAME}: PASS")


try:
    main()
except (Fail, OSError, KeyError, ValueError) as e:
    print(f"FAIL: storm {NAME}: {e}")
    sys.exit(1)
