#!/usr/bin/env python3
"""embeddings_test.py — POST /v1/embeddings of `rocmforge serve` on loopback (run by
tests/cli/serve_embeddings.sh; serve_test.py's harness; SmolLM2 on the CPU, whose file has no
pooling_type: last-token pooling):
  - shapes: one string, a list of strings, a list of ids, a list of lists of ids; each vector has
    the model's n_embd floats and unit L2 norm; data in input order with its index; usage counts
    the prompt tokens; `model` names the model as chat answers do (its alias);
  - a batch of inputs equals each input alone, bit for bit (the CPU is batch-invariant), and so
    does a run beside generation requests; ids equal to the text's tokens give the text's vector;
    base64 decodes to the float answer; 'dimensions' equal to n_embd is accepted;
  - the official `openai` client's embeddings.create (its default base64 and float);
  - errors in OpenAI's shape: empty input, an empty string or list, bad types, ids outside the
    vocabulary, an input longer than the context (context_length_exceeded), 'dimensions' other than
    n_embd, a bad encoding_format; the API key enforced; GET refused;
  - clients hanging up mid-batch: cancelled, every KV block back, the server still answers;
  - the pooling from the file: copies of the model with <arch>.pooling_type written (cls, mean),
    each served: cls gives the first token's vector (the plain server's vector of that token
    alone), mean gives neither the last row nor anything but the one row for a one-token input.
usage: embeddings_test.py ROCMFORGE MODEL
Exit 0 = pass, 1 = fail (the first failed check is printed)."""
import base64
import json
import math
import struct
import sys
import threading

import os
import socket
import tempfile
import time

import serve_test
from serve_test import KEY, Server, check, client, expect_error, metrics, req, wait_idle

import server_suite

TEXTS = ["The quick brown fox jumps over the lazy dog.", "café naïve résumé", "日本語のテキスト", "a",
         "Embeddings map text to vectors; similar texts give nearby vectors. " * 6]
N_CTX = 512

def f32(v):
    """The float32 values of a vector (JSON numbers are written with 9 digits: exact as float32)."""
    return [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]


def post(srv, body, status=200):
    s, _, data = req(srv, "POST", "/v1/embeddings", body)
    check(s == status, f"/v1/embeddings {str(body)[:80]}: {s} {data[:300]!r}")
    return json.loads(data)

def vectors(j, n):
    check(j["object"] == "list" and len(j["data"]) == n, f"answer shape {str(j)[:200]}")
    out = []
    for i, d in enumerate(j["data"]):
        check(d["object"] == "embedding" and d["index"] == i, f"data[{i}] {str(d)[:100]}")
        out.append(d["embedding"])
    return out

def test_shapes(srv):
    j = post(srv, {"input": TEXTS[0], "model": "text-embedding-3-small"})
    (v,) = vectors(j, 1)
    check(len(v) == 576, f"SmolLM2's n_embd is 576, got {len(v)}")
    check(all(isinstance(x, float) for x in v), "floats")
    # unit length up to float32 rounding: each element rounded once (relative 2^-24) moves the norm
    # by ~6e-8; 1e-5 leaves room for the engine's f32 sum of squares, not for a missed normalisation
    norm = math.sqrt(sum(x * x for x in v))
    check(abs(norm - 1) < 1e-5, f"L2 norm {norm}")
    check(j["model"] == json.loads(post_chat(srv))["model"], f"model {j['model']}: not the name chat answers with")
    ids = post_tok(srv, TEXTS[0])
    check(j["usage"] == {"prompt_tokens": len(ids), "total_tokens": len(ids)}, f"usage {j['usage']} vs {len(ids)} tokens")
    j = post(srv, {"input": TEXTS})
    vs = vectors(j, len(TEXTS))
    total = sum(len(post_tok(srv, t)) for t in TEXTS)
    check(j["usage"]["prompt_tokens"] == total, f"usage {j['usage']} vs {total}")
    for t, v in zip(TEXTS, vs):
        (one,) = vectors(post(srv, {"input": t}), 1)
        check(one == v, f"{t[:30]!r}: batched vector differs from its own")
        check(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5, "unit norm")
    check(vs[0] != vs[1], "different texts give different vectors")
    j = post(srv, {"input": TEXTS[1], "dimensions": 576})
    check(len(vectors(j, 1)[0]) == 576, "dimensions = n_embd accepted")

def post_chat(srv):
    s, _, data = req(srv, "POST", "/v1/chat/completions", {"model": "gpt-4o", "max_tokens": 1,
                                                           "messages": [{"role": "user", "content": "hi"}]})
    check(s == 200, f"chat {s}")
    return data


def post_tok(srv, text):
    s, _, data = req(srv, "POST", "/tokenize", {"content": text, "add_special": True})
    check(s == 200, f"/tokenize {s}")
    return json.loads(data)["tokens"]

def test_ids(srv):
    for t in TEXTS[:3]:
        ids = post_tok(srv, t)
        (a,) = vectors(post(srv, {"input": t}), 1)
        (b,) = vectors(post(srv, {"input": ids}), 1)
        check(a == b, f"{t!r}: ids {ids[:8]} give another vector than the text")
    lists = [post_tok(srv, t) for t in TEXTS[:3]]
    vs = vectors(post(srv, {"input": lists}), 3)
    for t, v in zip(TEXTS[:3], vs):
        check(v == vectors(post(srv, {"input": t}), 1)[0], f"{t!r}: list of lists")

def test_base64(srv):
    (f,) = vectors(post(srv, {"input": TEXTS[0], "encoding_format": "float"}), 1)
    (b,) = vectors(post(srv, {"input": TEXTS[0], "encoding_format": "base64"}), 1)
    check(isinstance(b, str), "base64 is a string")
    raw = base64.b64decode(b)
    dec = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    check(dec == f32(f), "base64 decodes to the float answer")

def test_sdk(srv):
    c = client(srv)
    r = c.embeddings.create(model="any-name", input=["hello world", "goodbye world"])
    check(len(r.data) == 2 and len(r.data[0].embedding) == 576, f"SDK (base64 by default): {len(r.data)}")
    check(r.usage.prompt_tokens > 0 and r.model, f"SDK usage {r.usage} model {r.model}")
    f = c.embeddings.create(model="any-name", input="hello world", encoding_format="float")
    check(f32(f.data[0].embedding) == f32(r.data[0].embedding), "SDK: float equals base64 (as float32)")

def test_with_generation(srv):
    """Embeddings computed beside generation requests in the same steps equal those alone."""
    alone = vectors(post(srv, {"input": TEXTS}), len(TEXTS))
    errs = []

    def gen():
        s, _, d = req(srv, "POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24})
        if s != 200:
            errs.append(d)

    th = [threading.Thread(target=gen) for _ in range(3)]
    for t in th:
        t.start()
    mixed = vectors(post(srv, {"input": TEXTS}), len(TEXTS))
    for t in th:
        t.join()
    check(not errs, f"generation failed: {errs[:1]}")
    check(mixed == alone, "embeddings beside generation differ from alone")

def drop(srv, body, delay):
    """Sends an embeddings request and resets the connection after `delay` seconds."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    b = json.dumps(body).encode()
    s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b))
    time.sleep(delay)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    s.close()


def test_disconnect(srv):
    """Clients that hang up mid-batch: their requests are cancelled and every KV block returns."""
    long = "Embeddings map text to vectors. " * 40
    for delay in (0.0, 0.05, 0.3):
        drop(srv, {"input": [long] * 12}, delay)
    m = wait_idle(srv)
    check(m["rocmforge_kv_blocks_used"] == 0, f"blocks still used: {m['rocmforge_kv_blocks_used']}")
    (v,) = vectors(post(srv, {"input": "after the hang-ups"}), 1)
    check(len(v) == 576, "answers after the hang-ups")


def test_errors(srv):
    E = "/v1/embeddings"
    for body, param in [({}, "input"), ({"input": ""}, "input"), ({"input": []}, "input"), ({"input": [""]}, "input"),
                        ({"input": [[]]}, "input"), ({"input": 5}, "input"), ({"input": [1.5]}, "input"),
                        ({"input": ["a", 3]}, "input"), ({"input": [-1]}, "input"), ({"input": [10 ** 9]}, "input"),
                        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
                        ({"input": "x", "dimensions": 64}, "dimensions"), ({"input": "x", "dimensions": "576"}, "dimensions"),
                        ({"input": "x", "model": 3}, "model")]:
        expect_error(srv, 400, "invalid_request_error", None, "POST", E, body, param=param)
    long = "word " * (N_CTX * 2)
    expect_error(srv, 400, "invalid_request_error", "context_length_exceeded", "POST", E, {"input": long}, param="input")
    expect_error(srv, 400, "invalid_request_error", "context_length_exceeded", "POST", E, {"input": ["a", long]}, param="input")
    expect_error(srv, 400, "invalid_request_error", "context_length_exceeded", "POST", E, {"input": [1] * (N_CTX + 1)},
                 param="input")
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "POST", E, {"input": "x"}, key=None)
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "POST", E, {"input": "x"}, key="wrong")
    expect_error(srv, 405, "invalid_request_error", "method_not_allowed", "GET", E)
    expect_error(srv, 400, "invalid_request_error", None, "POST", E, b"{", {"Content-Type": "application/json"})
    # the server still answers, every block back
    (v,) = vectors(post(srv, {"input": "still here"}), 1)
    check(len(v) == 576, "after the errors")

def with_pooling(src, dst, pooling):
    """A copy of the GGUF file src with <arch>.pooling_type = pooling (u32) added: the key goes
    first in the metadata, with a padding string key sized so that the header grows by a multiple
    of the alignment; the tensor infos' offsets are relative to the data section and stay right."""
    with open(src, "rb") as f:
        head = f.read(24)
        magic, ver, n_t, n_kv = struct.unpack("<4sIQQ", head)
        check(magic == b"GGUF" and ver == 3, f"{src}: not a GGUF v3 file")
        arch = None
        # general.architecture is the first key in files written by the converters and by mkmodel
        (kl,) = struct.unpack("<Q", f.read(8))
        k = f.read(kl).decode()
        (ty,) = struct.unpack("<I", f.read(4))
        if k == "general.architecture" and ty == 8:
            (vl,) = struct.unpack("<Q", f.read(8))
            arch = f.read(vl).decode()
        check(arch, f"{src}: general.architecture is not the first key")
        f.seek(0)
        data = f.read()
    align = 32  # general.alignment: the default (SmolLM2's file sets none)
    check(b"general.alignment" not in data[:1 << 20], "the file sets general.alignment")

    def kv_str(key, val):
        return struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(val)) + val

    kv = struct.pack("<Q", len(arch) + 13) + f"{arch}.pooling_type".encode() + struct.pack("<II", 4, pooling)
    pad_key = b"rocmforge.test.pad"
    n = len(kv) + len(kv_str(pad_key, b""))
    kv += kv_str(pad_key, b"x" * ((-n) % align))
    check(len(kv) % align == 0, "padding")
    with open(dst, "wb") as f:
        f.write(struct.pack("<4sIQQ", magic, ver, n_t, n_kv + 2) + kv + data[24:])


def test_pooling_file(srv):
    ids = post_tok(srv, TEXTS[0])
    check(len(ids) > 3, f"tokens {ids}")
    (first,) = vectors(post(srv, {"input": ids[:1]}), 1)
    (last,) = vectors(post(srv, {"input": ids}), 1)
    (second,) = vectors(post(srv, {"input": ids[:2]}), 1)  # the second row's direction (causal)
    with tempfile.TemporaryDirectory() as d:
        for pooling in (2, 1):
            path = os.path.join(d, f"pool{pooling}.gguf")
            with_pooling(serve_test.MODEL, path, pooling)
            other = Server("--api-key", KEY, "-t", "2", "-c", str(N_CTX), model=path)
            try:
                (v,) = vectors(post(other, {"input": ids}), 1)
                (v1,) = vectors(post(other, {"input": ids[:1]}), 1)
                v2 = vectors(post(other, {"input": [ids, ids[:1]]}), 2)
                (m2,) = vectors(post(other, {"input": ids[:2]}), 1)
            finally:
                other.stop()
            check(v2 == [v, v1], f"pooling {pooling}: a batch differs from the inputs alone")
            check(v1 == first, f"pooling {pooling}: a one-token input is not that token's vector")
            if pooling == 2:
                check(v == first, f"cls: not the first token's vector (max diff {max(abs(a - b) for a, b in zip(v, first)):.3g})")
            else:
                diff_first = max(abs(a - b) for a, b in zip(v, first))
                diff_last = max(abs(a - b) for a, b in zip(v, last))
                check(diff_first > 1e-3 and diff_last > 1e-3, f"mean: the first ({diff_first:.3g}) or last ({diff_last:.3g}) row")
                check(abs(sum(x * x for x in v) - 1) < 1e-4, "mean: not unit norm")
                # two tokens: h0 + h1 is a combination of the rows' directions with positive
                # weights (|h0|, |h1|): least squares on the two, residual ~ float32 rounding
                dot = lambda a, b: sum(x * y for x, y in zip(a, b))
                g00, g01, g11 = dot(first, first), dot(first, second), dot(second, second)
                r0, r1 = dot(first, m2), dot(second, m2)
                det = g00 * g11 - g01 * g01
                a, b = (r0 * g11 - r1 * g01) / det, (r1 * g00 - r0 * g01) / det
                res = math.sqrt(sum((z - a * x - b * y) ** 2 for x, y, z in zip(first, second, m2)))
                check(res < 1e-4 and a > 0 and b > 0, f"mean of two tokens: weights {a:.3g} {b:.3g}, residual {res:.3g}")


def main():
    srv = Server("--parallel", "4", "--api-key", KEY, "-t", "2", "-c", str(N_CTX), "-b", "64")
    return server_suite.run(srv, [("shapes, batch = singles", test_shapes), ("token ids", test_ids), ("base64", test_base64),
                                  ("openai SDK", test_sdk), ("beside generation", test_with_generation),
                                  ("errors", test_errors), ("disconnects", test_disconnect),
                                  ("pooling from the file", test_pooling_file)])

if __name__ == "__main__":
    sys.exit(main())
