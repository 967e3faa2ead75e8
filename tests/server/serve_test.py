#!/usr/bin/env python3
"""serve_test.py — `rocmforge serve` over real HTTP on loopback (run by tests/cli/serve.sh).

Starts the server on a free port (--port 0, the port read from its first line) with SmolLM2 on
the CPU and drives it with the official `openai` client, `curl` and raw sockets:
  - chat and completions, streaming and not; the SSE bytes exactly (data: {json}\\n\\n, a first
    role delta, content deltas with finish_reason null, a last empty delta with the reason, the
    usage chunk with choices [] when asked, data: [DONE]); n = 3 (prompt computed once);
    stop strings; logprobs; echo; /v1/models, /health, /metrics;
  - every bad input, checked for status and the OpenAI error shape (type, code, param);
  - 64 concurrent greedy streams whose texts equal each one run alone;
  - a disconnect storm (clients dropping mid-stream, mid-prefill, while queued, non-streaming
    ones too) after which /metrics shows every KV block back in the pool, and the server answers;
  - a second server with --parallel 1 --max-queue 1 and a load delay: 503 + Retry-After while
    loading and when the queue is full, a queued request cancelled by its client, SIGTERM;
  - the test hooks (the load delay, the X-RF-Test-Fault header) honoured by rocmforge-test only:
    the servers that need them run HOOKS_BIN, and `rocmforge` itself ignores them.
usage: serve_test.py ROCMFORGE MODEL --hooks-bin ROCMFORGE_TEST [--quick]
--quick (sanitizer builds): 8 concurrent streams instead of 64, fewer tokens, a smaller storm.
Exit 0 = pass, 1 = fail (the first failed check is printed)."""
import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import openai

import server_suite
from server_suite import Fail, check  # the other test files import them from here

RF, MODEL = sys.argv[1], sys.argv[2]
HOOKS_RF = sys.argv[sys.argv.index("--hooks-bin") + 1] if "--hooks-bin" in sys.argv else None
QUICK = "--quick" in sys.argv
KEY = "sk-test-key-0123456789"
N_CONC = 8 if QUICK else 64
N_TOK = 6 if QUICK else 12


class Server(server_suite.Process):
    """A `rocmforge serve` child process (rf: another binary, e.g. rocmforge-test); .port once it
    listens, ready once /health is 200 (unless wait_ready=False); model: another file."""

    def __init__(self, *args, env=None, wait_ready=True, rf=None, model=None):
        super().__init__(rf or RF, model or MODEL, args, env=env, tag="serve-test")
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout=120):
        super().wait_ready(lambda: req(self, "GET", "/health")[0] == 200, timeout)


def req(srv, method, path, body=None, headers=None, key=KEY, timeout=120):
    """One request on a fresh connection: (status, headers dict (lower-case), body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    h = dict(headers or {})
    if key:
        h["Authorization"] = "Bearer " + key
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hd, data


def expect_error(srv, status, etype, code, method, path, body=None, headers=None, key=KEY, param=None, msg=None):
    st, hd, data = req(srv, method, path, body, headers, key)
    what = f"{method} {path} {str(body)[:80]!r}"
    check(st == status, f"{what}: status {st}, expected {status}: {data[:300]!r}")
    try:
        j = json.loads(data)
    except ValueError:
        raise Fail(f"{what}: error body is not JSON: {data[:200]!r}")
    e = j.get("error")
    check(isinstance(e, dict) and set(e) == {"message", "type", "param", "code"}, f"{what}: error shape {j}")
    check(isinstance(e["message"], str) and e["message"], f"{what}: message {e}")
    check(e["type"] == etype, f"{what}: type {e['type']}, expected {etype}")
    check(e["code"] == code, f"{what}: code {e['code']!r}, expected {code!r}")
    if param is not None:
        check(e["param"] == param, f"{what}: param {e['param']!r}, expected {param!r}")
    if msg is not None:
        check(all(m in e["message"] for m in ([msg] if isinstance(msg, str) else msg)), f"{what}: message {e['message']!r} lacks {msg!r}")
    check(hd.get("content-type", "").startswith("application/json"), f"{what}: content-type {hd.get('content-type')}")
    if status == 503:
        check("retry-after" in hd, f"{what}: 503 without Retry-After")
    if status == 401:
        check(hd.get("www-authenticate", "").startswith("Bearer"), f"{what}: 401 without WWW-Authenticate")
    return hd, e


def metrics(srv):
    st, _, data = req(srv, "GET", "/metrics")
    check(st == 200, f"/metrics: {st}")
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def sse_events(raw):
    """Splits an SSE body exactly: every event must be 'data: ...' or a ': comment' line followed by
    a blank line; returns the data payloads."""
    text = raw.decode("utf-8")
    check(text.endswith("data: [DONE]\n\n"), f"stream does not end with data: [DONE]: {text[-200:]!r}")
    events = text.split("\n\n")
    check(events[-1] == "", "stream tail")
    out = []
    for ev in events[:-1]:
        check("\n" not in ev, f"an event spans lines: {ev[:200]!r}")
        if ev.startswith(":"):
            continue
        check(ev.startswith("data: "), f"not a data line: {ev[:200]!r}")
        out.append(ev[6:])
    check(out[-1] == "[DONE]" and "[DONE]" not in out[:-1], "[DONE] is not last, or twice")
    return [json.loads(x) for x in out[:-1]]


def client(srv, **kw):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0, **kw)


def aclient(srv):
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0, timeout=600)


MSG = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Name three colors."}]


# ---- the happy paths -------------------------------------------------------------------------

def test_routes(srv):
    st, hd, data = req(srv, "GET", "/health", key=None)
    check(st == 200 and json.loads(data) == {"status": "ok"}, f"/health {st} {data!r}")
    st, _, _ = req(srv, "HEAD", "/health", key=None)
    check(st == 200, f"HEAD /health {st}")
    st, _, data = req(srv, "GET", "/v1/models", key=None)  # open without a key, as llama-server
    m = json.loads(data)
    check(st == 200 and m["object"] == "list" and len(m["data"]) == 1, f"/v1/models {data!r}")
    d = m["data"][0]
    check(d["object"] == "model" and d["id"] == "smol" and isinstance(d["created"], int) and d["owned_by"], f"model {d}")
    ids = [x.id for x in client(srv).models.list().data]
    check(ids == ["smol"], f"client models.list {ids}")
    mt = metrics(srv)
    for k in ("rocmforge_kv_blocks_total", "rocmforge_kv_blocks_used", "rocmforge_kv_blocks_free", "rocmforge_kv_blocks_cached",
              "rocmforge_sequences_running", "rocmforge_sequences_waiting", "rocmforge_prefix_cache_hit_tokens_total",
              "rocmforge_time_to_first_token_seconds_count", "rocmforge_inter_token_latency_seconds_count",
              "rocmforge_prompt_tokens_total", "rocmforge_generation_tokens_total"):
        check(k in mt, f"/metrics lacks {k}")


def test_chat(srv):
    c = client(srv)
    r = c.chat.completions.create(model="smol", messages=MSG, max_tokens=N_TOK, temperature=0)
    check(r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "smol", f"chat {r}")
    ch = r.choices[0]
    check(ch.index == 0 and ch.message.role == "assistant" and ch.message.content, f"choice {ch}")
    check(ch.finish_reason in ("length", "stop"), f"finish {ch.finish_reason}")
    u = r.usage
    check(u.prompt_tokens > 10 and u.completion_tokens == N_TOK and u.total_tokens == u.prompt_tokens + N_TOK, f"usage {u}")
    # max_completion_tokens is the current name; content as a list of text parts
    msg2 = [{"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]},
            {"role": "user", "content": "Name three colors."}]
    r2 = c.chat.completions.create(model="smol", messages=msg2, max_completion_tokens=N_TOK, temperature=0)
    check(r2.choices[0].message.content == ch.message.content, "text parts differ from a string content")
    # streaming through the client, usage chunk last
    chunks = list(c.chat.completions.create(model="smol", messages=MSG, max_tokens=N_TOK, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    check(len({x.id for x in chunks}) == 1 and len({x.created for x in chunks}) == 1, "ids/created differ across chunks")
    check(all(x.object == "chat.completion.chunk" for x in chunks), "chunk object")
    check(chunks[0].choices[0].delta.role == "assistant" and not chunks[0].choices[0].delta.content, f"first {chunks[0]}")
    text = "".join(x.choices[0].delta.content or "" for x in chunks if x.choices)
    check(text == ch.message.content, f"stream text {text!r} != {ch.message.content!r}")
    fin = [x for x in chunks if x.choices and x.choices[0].finish_reason]
    check(len(fin) == 1 and fin[0] is chunks[-2], "one finish chunk, just before the usage chunk")
    check(chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == N_TOK, f"usage chunk {chunks[-1]}")
    check(chunks[-1].usage.prompt_tokens_details.cached_tokens > 0, "the repeated prompt found no cached tokens")
    # the same stream's bytes through curl: the exact SSE framing
    body = json.dumps({"model": "smol", "messages": MSG, "max_tokens": N_TOK, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    raw = subprocess.run(["curl", "-sS", "-N", "--fail-with-body", "-H", "Authorization: Bearer " + KEY,
                          "-H", "Content-Type: application/json", "-d", body,
                          f"http://127.0.0.1:{srv.port}/v1/chat/completions"], capture_output=True, timeout=120)
    check(raw.returncode == 0, f"curl stream rc {raw.returncode} {raw.stderr!r}")
    ev = sse_events(raw.stdout)
    check(ev[0]["choices"][0]["delta"] == {"role": "assistant"} and ev[0]["choices"][0]["finish_reason"] is None, f"first {ev[0]}")
    for e in ev[1:-2]:
        check(set(e["choices"][0]["delta"]) == {"content"} and e["choices"][0]["finish_reason"] is None, f"content chunk {e}")
    check(ev[-2]["choices"][0]["delta"] == {} and ev[-2]["choices"][0]["finish_reason"] == "length", f"finish chunk {ev[-2]}")
    check(ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == N_TOK, f"usage chunk {ev[-1]}")
    check("".join(e["choices"][0]["delta"]["content"] for e in ev[1:-2]) == text, "curl stream text")
    # curl, not streaming
    raw = subprocess.run(["curl", "-sS", "--fail-with-body", "-H", "Authorization: Bearer " + KEY,
                          "-H", "Content-Type: application/json", "-d",
                          json.dumps({"messages": MSG, "max_tokens": N_TOK, "temperature": 0}),
                          f"http://127.0.0.1:{srv.port}/v1/chat/completions"], capture_output=True, timeout=120)
    j = json.loads(raw.stdout)
    check(j["choices"][0]["message"]["content"] == text and j["object"] == "chat.completion", f"curl chat {j}")
    return text


def test_n3(srv):
    c = client(srv)
    before = metrics(srv)
    msg = [{"role": "user", "content": "Write a word that rhymes with cat, then explain it at length."}]
    r = c.chat.completions.create(model="smol", messages=msg, max_tokens=N_TOK, n=3, temperature=1.0, seed=7,
                                  extra_body={"ignore_eos": True})
    after = metrics(srv)
    check([x.index for x in r.choices] == [0, 1, 2], f"n=3 indices {[x.index for x in r.choices]}")
    check(r.usage.completion_tokens == 3 * N_TOK and all(x.finish_reason == "length" for x in r.choices), f"n=3 usage {r.usage}")
    computed = after["rocmforge_prompt_tokens_computed_total"] - before["rocmforge_prompt_tokens_computed_total"]
    hits = after["rocmforge_prefix_cache_hit_tokens_total"] - before["rocmforge_prefix_cache_hit_tokens_total"]
    check(computed + hits == r.usage.prompt_tokens, f"n=3: the prompt ({r.usage.prompt_tokens} tokens) was computed "
          f"{computed} + {hits} cached: not once")
    texts = [x.message.content for x in r.choices]
    check(len(set(texts)) > 1, f"n=3 at temperature 1 gave three identical texts {texts}")
    r2 = c.chat.completions.create(model="smol", messages=msg, max_tokens=N_TOK, n=3, temperature=1.0, seed=7,
                                   extra_body={"ignore_eos": True})
    check([x.message.content for x in r2.choices] == texts, "same seed, different choices")
    # streaming n=3: every index gets content and exactly one finish chunk
    chunks = list(c.chat.completions.create(model="smol", messages=msg, max_tokens=N_TOK, n=3, temperature=1.0, seed=7,
                                            stream=True, extra_body={"ignore_eos": True}))
    got = {0: "", 1: "", 2: ""}
    fins = {0: 0, 1: 0, 2: 0}
    for x in chunks:
        for ch in x.choices:
            got[ch.index] += ch.delta.content or ""
            fins[ch.index] += ch.finish_reason is not None
    check([got[i] for i in range(3)] == texts and fins == {0: 1, 1: 1, 2: 1}, f"n=3 stream {got} {fins}")


def test_stop_logprobs(srv, text):
    c = client(srv)
    # a stop string from inside the greedy text: the output ends right before it, reason "stop"
    words = text.split()
    check(len(words) >= 2, f"greedy text too short for a stop test: {text!r}")
    stop = " " + words[1]
    r = c.chat.completions.create(model="smol", messages=MSG, max_tokens=N_TOK, temperature=0, stop=[stop, "zzzz"])
    out = r.choices[0].message.content
    check(out == text[:text.index(stop)] and r.choices[0].finish_reason == "stop", f"stop {stop!r}: {out!r} from {text!r}")
    r = c.chat.completions.create(model="smol", messages=MSG, max_tokens=N_TOK, temperature=0, stop=stop, stream=True)
    out = "".join(x.choices[0].delta.content or "" for x in r if x.choices)
    check(out == text[:text.index(stop)], f"streamed stop: {out!r}")
    # logprobs: greedy picks the most likely token, listed first among the alternatives
    r = c.chat.completions.create(model="smol", messages=MSG, max_tokens=N_TOK, temperature=0, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    check(len(lp) == N_TOK, f"logprobs entries {len(lp)}")
    for t in lp:
        check(t.logprob <= 0 and len(t.top_logprobs) == 3 and isinstance(t.bytes, list), f"logprob entry {t}")
        check(abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, f"greedy token is not the most likely: {t}")
    check("".join(t.token for t in lp) == r.choices[0].message.content, "logprob tokens do not spell the text")
    chunks = list(c.chat.completions.create(model="smol", messages=MSG, max_tokens=N_TOK, temperature=0, logprobs=True,
                                            top_logprobs=2, stream=True))
    n = sum(len(x.choices[0].logprobs.content) for x in chunks if x.choices and x.choices[0].logprobs)
    check(n == N_TOK, f"streamed logprob entries {n}")


def test_completions(srv):
    c = client(srv)
    r = c.completions.create(model="smol", prompt="The capital of France is", max_tokens=N_TOK, temperature=0)
    check(r.object == "text_completion" and r.id.startswith("cmpl-") and r.choices[0].text, f"completion {r}")
    t = r.choices[0].text
    r = c.completions.create(model="smol", prompt="The capital of France is", max_tokens=N_TOK, temperature=0, echo=True)
    check(r.choices[0].text == "The capital of France is" + t, f"echo {r.choices[0].text!r}")
    # two prompts x n=2 = four choices, in prompt-major order
    r = c.completions.create(model="smol", prompt=["The capital of France is", "One, two, three,"], max_tokens=N_TOK,
                             temperature=0, n=2)
    check([x.index for x in r.choices] == [0, 1, 2, 3] and r.choices[0].text == t and r.choices[1].text == t,
          f"list prompt {[x.text for x in r.choices]}")
    r = c.completions.create(model="smol", prompt="The capital of France is", max_tokens=N_TOK, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    check(len(lp.tokens) == N_TOK and len(lp.token_logprobs) == N_TOK and len(lp.top_logprobs) == N_TOK
          and len(lp.text_offset) == N_TOK and "".join(lp.tokens) == t, f"completion logprobs {lp}")
    out = "".join(x.choices[0].text for x in c.completions.create(model="smol", prompt="The capital of France is",
                                                                    max_tokens=N_TOK, temperature=0, stream=True))
    check(out == t, f"streamed completion {out!r} != {t!r}")
    # token ids as the prompt
    r = c.completions.create(model="smol", prompt=[504, 3575, 282], max_tokens=2, temperature=0)
    check(r.usage.prompt_tokens == 3, f"id prompt usage {r.usage}")


# ---- bad input ------------------------------------------------------------------------------

def test_bad_input(srv):
    C = "/v1/chat/completions"
    E = "invalid_request_error"
    ok = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    J = {"Content-Type": "application/json"}
    expect_error(srv, 400, E, None, "POST", C, b'{"messages": [', J, param=None, msg="invalid JSON")
    expect_error(srv, 400, E, None, "POST", C, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', J, msg="invalid JSON")
    expect_error(srv, 400, E, None, "POST", C, b"", J, msg="empty")
    expect_error(srv, 400, E, None, "POST", C, [1, 2], msg="JSON object")
    expect_error(srv, 400, E, None, "POST", C, {}, param="messages")
    expect_error(srv, 400, E, None, "POST", C, {"messages": []}, param="messages")
    expect_error(srv, 400, E, None, "POST", C, {"messages": "hi"}, param="messages")
    expect_error(srv, 400, E, None, "POST", C, {"messages": [{"role": "wizard", "content": "x"}]}, param="messages[0].role")
    expect_error(srv, 400, E, None, "POST", C, {"messages": [{"role": "user", "content": 3}]}, param="messages[0].content")
    expect_error(srv, 400, E, None, "POST", C, dict(ok, n=0), param="n")
    expect_error(srv, 400, E, None, "POST", C, dict(ok, n=65), param="n")
    expect_error(srv, 400, E, None, "POST", C, dict(ok, temperature="hot"), param="temperature")
    expect_error(srv, 400, E, None, "POST", C, dict(ok, max_tokens=-1), param="max_tokens")
    expect_error(srv, 400, E, None, "POST", C, dict(ok, stop=[1]), param="stop")
    expect_error(srv, 400, E, None, "POST", C, dict(ok, stream="yes"), param="stream")
    expect_error(srv, 400, E, None, "POST", C, dict(ok, response_format={"type": "xml"}), param="response_format.type")
    expect_error(srv, 400, E, None, "POST", "/v1/completions", {"prompt": [1, 10 ** 6]}, param="prompt",
                 msg="outside the vocabulary")
    expect_error(srv, 400, E, None, "POST", "/v1/completions", {"prompt": 5}, param="prompt")
    # prompt + max_tokens over the context: a 400 naming both numbers, never a silent truncation
    ctx = int(metrics(srv)["rocmforge_context_size"])
    _, e = expect_error(srv, 400, E, "context_length_exceeded", "POST", C, dict(ok, max_tokens=ctx), param="messages")
    check(f"{ctx} tokens" in e["message"] and f"{ctx} in the completion" in e["message"], f"context message {e['message']}")
    long_prompt = "hello " * (ctx + 10)
    expect_error(srv, 400, E, "context_length_exceeded", "POST", "/v1/completions", {"prompt": long_prompt}, param="prompt")
    # the official client raises the matching exceptions
    try:
        client(srv).chat.completions.create(model="smol", messages=[], max_tokens=1)
        raise Fail("empty messages accepted by the client path")
    except openai.BadRequestError as x:
        check(x.status_code == 400 and x.body["type"] == E, f"client 400 {x.body}")
    # 401: missing or wrong key (constant-time compare); /health and /v1/models stay open
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "POST", C, ok, key=None)
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "POST", C, ok, key="sk-wrong")
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "POST", C, ok, key=KEY + "x")
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "POST", C, ok, key=KEY[:-1])
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "GET", "/metrics", key=None)
    try:
        openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="nope", max_retries=0).chat.completions.create(
            model="smol", messages=MSG, max_tokens=1)
        raise Fail("a wrong key was accepted")
    except openai.AuthenticationError as x:
        check(x.status_code == 401, "client 401")
    # 404: unknown route (a trailing slash is another route)
    expect_error(srv, 404, "not_found_error", None, "GET", "/v2/nothing")
    expect_error(srv, 404, "not_found_error", None, "POST", C + "/", ok)
    # any other model name is served by the loaded model (agent clients send their own names);
    # --strict-model-name's 404 is tested by tokenize_test.py
    r = client(srv).chat.completions.create(model="gpt-4", messages=MSG, max_tokens=1)
    check(r.choices[0].finish_reason in ("stop", "length"), "another model name served")
    # 405 with Allow
    hd, _ = expect_error(srv, 405, E, "method_not_allowed", "GET", C)
    check(hd.get("allow") == "POST", f"405 Allow {hd.get('allow')}")
    hd, _ = expect_error(srv, 405, E, "method_not_allowed", "POST", "/health", ok)
    check(hd.get("allow") == "GET, HEAD", f"405 Allow {hd.get('allow')}")
    # 413: over --max-body by Content-Length, and by a chunked upload that grows past it (built
    # against libmicrohttpd < 1.0 a chunked body is refused at its headers: 400, docs/server.md)
    expect_error(srv, 413, E, "request_too_large", "POST", C, b"x" * 70000)
    big = json.dumps({"messages": [{"role": "user", "content": "y" * 70000}]}).encode()
    st, _, data = raw_chunked(srv, C, big)
    check((st, json.loads(data)["error"]["code"]) in ((413, "request_too_large"), (400, "invalid_framing")),
          f"chunked 413: {st} {data[:200]!r}")
    # the same limit on every other POST route, by Content-Length and by a chunked upload;
    # /v1/messages answers in Anthropic's error shape
    for path in ("/v1/completions", "/v1/messages", "/v1/responses", "/v1/embeddings", "/tokenize", "/detokenize"):
        for how, (st, hd, data) in (("content-length", req(srv, "POST", path, b"x" * 70000)),
                                    ("chunked", raw_chunked(srv, path, big))):
            if how == "chunked" and st == 400:  # libmicrohttpd < 1.0 (above): refused at its headers
                check(b"chunked request bodies are not accepted" in data, f"{path} chunked: 400 {data[:200]!r}")
                continue
            check(st == 413, f"{path} {how}: status {st}, expected 413: {data[:200]!r}")
            j = json.loads(data)
            if path == "/v1/messages":
                check(j.get("type") == "error" and j["error"]["type"] == "request_too_large", f"{path} {how}: {j}")
            else:
                check(j["error"]["code"] == "request_too_large", f"{path} {how}: {j}")
    # the server still answers
    st, _, _ = req(srv, "POST", C, ok)
    check(st == 200, f"after bad inputs: {st}")
    # no 500 anywhere so far
    mt = metrics(srv)
    bad = {k: v for k, v in mt.items() if k.startswith("rocmforge_http_requests_total") and 'status="5' in k and 'status="503' not in k}
    check(not bad, f"5xx answers: {bad}")


def raw_chunked(srv, path, body):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.putrequest("POST", path)
    c.putheader("Authorization", "Bearer " + KEY)
    c.putheader("Transfer-Encoding", "chunked")
    c.putheader("Content-Type", "application/json")
    c.endheaders()
    try:
        for i in range(0, len(body), 8192):
            part = body[i:i + 8192]
            c.send(b"%x\r\n%s\r\n" % (len(part), part))
        c.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.getheaders(), data


def test_alloc_failure(srv):
    """A request whose memory runs out (simulated: RF_SERVE_TEST_FAULTS and a header make each of
    its event copies fail) gets a 503 server_error, or an error event in its stream; the server
    goes on serving and the request's blocks come back."""
    C = "/v1/chat/completions"
    body = {"messages": MSG, "max_tokens": N_TOK, "temperature": 0}
    expect_error(srv, 503, "server_error", None, "POST", C, body, headers={"X-RF-Test-Fault": "oom-events"}, msg="out of memory")
    st, _, data = req(srv, "POST", C, dict(body, stream=True), headers={"X-RF-Test-Fault": "oom-events"})
    check(st == 200, f"stream with failing memory: {st}")
    ev = data.decode().split("\n\n")
    check(ev[-2] == "data: [DONE]" and '"server_error"' in ev[-3] and ev[-3].startswith('data: {"error":'),
          f"stream with failing memory: {data[-400:]!r}")
    st, _, _ = req(srv, "POST", C, body)
    check(st == 200, f"after an allocation failure: {st}")
    m = wait_idle(srv)
    check(m["rocmforge_kv_blocks_used"] == 0, f"blocks still used after an allocation failure: {m['rocmforge_kv_blocks_used']}")


# ---- many at once ----------------------------------------------------------------------------

def conc_prompts(n):
    topics = ["rivers", "cats", "the moon", "bread", "trains", "music", "winter", "bees", "chess", "rain", "ships", "owls",
              "glass", "maps", "tea", "clocks"]
    return [[{"role": "user", "content": f"Tell me one fact about {topics[i % 16]} (#{i})."}] for i in range(n)]


async def stream_one(ac, msg, n_tok):
    s = await ac.chat.completions.create(model="smol", messages=msg, max_tokens=n_tok, temperature=0, stream=True)
    out = []
    async for x in s:
        if x.choices:
            out.append(x.choices[0].delta.content or "")
    return "".join(out)


def test_concurrent(srv):
    prompts = conc_prompts(N_CONC)

    async def all_at_once():
        ac = aclient(srv)
        return await asyncio.gather(*[stream_one(ac, m, N_TOK) for m in prompts])

    t0 = time.time()
    together = asyncio.run(all_at_once())
    t1 = time.time()
    c = client(srv)
    alone = []
    for m in prompts:
        alone.append(c.chat.completions.create(model="smol", messages=m, max_tokens=N_TOK, temperature=0).choices[0].message.content)
    t2 = time.time()
    diff = [i for i in range(N_CONC) if together[i] != alone[i]]
    check(not diff, f"{len(diff)} of {N_CONC} concurrent outputs differ from alone, e.g. #{diff[:1]}: "
          f"{together[diff[0]]!r} vs {alone[diff[0]]!r}" if diff else "")
    check(len(set(alone)) > 1, "all outputs equal: the prompts did not matter")
    print(f"  {N_CONC} concurrent streams ({N_TOK} tokens) in {t1 - t0:.1f} s equal each one alone ({t2 - t1:.1f} s one by one)")


def drop_after(srv, body, n_bytes, delay=None):
    """Sends a request and closes the socket after reading n_bytes of the answer (0: right after
    sending; with delay, after that many seconds)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    b = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b))
    got = 0
    try:
        if delay:
            time.sleep(delay)
        while got < n_bytes:
            d = s.recv(4096)
            if not d:
                break
            got += len(d)
    finally:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST, like a killed client
        s.close()


def wait_idle(srv, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        m = metrics(srv)
        if m["rocmforge_sequences_running"] == 0 and m["rocmforge_sequences_waiting"] == 0 and m["rocmforge_requests_active"] == 0:
            return m
        time.sleep(0.2)
    raise Fail(f"not idle after {timeout} s: {metrics(srv)}")


def test_storm(srv):
    before = metrics(srv)
    long_user = "Summarize this. " + " ".join(f"item {i} is fine;" for i in range(40 if QUICK else 70))  # + 300 tokens fits -c 1024
    threads = []
    n = 6 if QUICK else 24
    for i in range(n):
        kind = i % 4
        if kind == 0:    # mid-stream: after the role chunk and a few tokens
            body = {"messages": [{"role": "user", "content": f"Count to a hundred ({i})."}], "max_tokens": 400, "stream": True,
                    "temperature": 0.8, "ignore_eos": True}
            args = (srv, body, 1500)
        elif kind == 1:  # mid-prefill: a long prompt, dropped before any token
            body = {"messages": [{"role": "user", "content": long_user + f" ({i})"}], "max_tokens": 50, "stream": True}
            args = (srv, body, 0, 0.05)
        elif kind == 2:  # not streaming, dropped while waiting (queued or in prefill)
            body = {"messages": [{"role": "user", "content": long_user + f" [{i}]"}], "max_tokens": 300, "ignore_eos": True}
            args = (srv, body, 0, 0.3)
        else:            # n=3 stream, dropped mid-stream: forked sequences share blocks
            body = {"messages": [{"role": "user", "content": f"Write a poem ({i})."}], "max_tokens": 400, "stream": True,
                    "n": 3, "temperature": 1.0, "ignore_eos": True}
            args = (srv, body, 3000)
        t = threading.Thread(target=drop_after, args=args)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(120)
    m = wait_idle(srv)
    total, used = m["rocmforge_kv_blocks_total"], m["rocmforge_kv_blocks_used"]
    free, cached = m["rocmforge_kv_blocks_free"], m["rocmforge_kv_blocks_cached"]
    check(used == 0 and free + cached == total, f"after the storm: {used} blocks used, {free} free + {cached} cached of {total}")
    gone = m["rocmforge_client_disconnects_total"] - before["rocmforge_client_disconnects_total"]
    cancelled = m['rocmforge_choices_finished_total{reason="cancelled"}'] - before['rocmforge_choices_finished_total{reason="cancelled"}']
    check(n * 5 // 6 <= gone <= n, f"{gone} disconnects seen for {n} clients")
    gen = m["rocmforge_engine_generated_tokens_total"] - before["rocmforge_engine_generated_tokens_total"]
    # had nothing been cancelled, the storm would have generated ~n/2 * 400 + n/4 * 3 * 400 tokens
    check(gen < n * 200, f"{gen:.0f} tokens generated: the dropped requests ran on")
    r = client(srv).chat.completions.create(model="smol", messages=MSG, max_tokens=2, temperature=0)
    check(r.choices[0].message.content, "no answer after the storm")
    print(f"  storm: {n} clients dropped, {gone:.0f} disconnects, {cancelled:.0f} choices cancelled, {gen:.0f} tokens generated;"
          f" KV pool back to {free:.0f} free + {cached:.0f} cached of {total:.0f}")


# ---- loading, the queue limit, shutdown -------------------------------------------------------

def test_queue_and_loading():
    srv = Server("--parallel", "1", "--max-queue", "1", "--api-key", KEY, "--alias", "smol", "-c", "1024", "-t", "1",
                 "--sse-ping", "0.3",
                 env={"RF_SERVE_LOAD_DELAY_MS": "1500"}, wait_ready=False, rf=HOOKS_RF)
    try:
        hd, _ = expect_error(srv, 503, "unavailable_error", "model_loading", "GET", "/health", key=None)
        expect_error(srv, 503, "unavailable_error", "model_loading", "POST", "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "hi"}]})
        st, _, _ = req(srv, "GET", "/v1/models", key=None)
        check(st == 200, f"/v1/models while loading: {st}")
        srv.wait_ready()
        # one running, one queued, the third refused
        long_body = {"messages": [{"role": "user", "content": "Count."}], "max_tokens": 900, "ignore_eos": True, "stream": True}
        s1 = socket.create_connection(("127.0.0.1", srv.port))
        b = json.dumps(long_body).encode()
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        s1.sendall(head % len(b) + b)
        s1.recv(100)  # it runs
        q = {"messages": [{"role": "user", "content": "Queued."}], "max_tokens": 5}
        b2 = json.dumps(dict(q, stream=True)).encode()
        s2 = socket.create_connection(("127.0.0.1", srv.port))
        s2.sendall(head % len(b2) + b2)
        t0 = time.time()
        while True:  # the engine's counts are snapshots taken at the end of each step
            m = metrics(srv)
            if (m["rocmforge_requests_active"] >= 2 and m["rocmforge_sequences_waiting"] >= 1) or time.time() - t0 > 10:
                break
            time.sleep(0.05)
        check(m["rocmforge_sequences_waiting"] >= 1, "the second request is not waiting: " +
              str({k: v for k, v in m.items() if "sequences" in k or "active" in k or "steps" in k or "disconn" in k or "generated" in k
                   or "first_token_seconds_count" in k}) + f" after {time.time() - t0:.1f} s")
        expect_error(srv, 503, "unavailable_error", "queue_full", "POST", "/v1/chat/completions", q)
        # the queued stream has its role chunk, then comment pings (--sse-ping 0.3) while it waits
        s2.settimeout(0.2)
        waited = b""
        t0 = time.time()
        while time.time() - t0 < 2.0 and waited.count(b": ping\n\n") < 2:
            try:
                waited += s2.recv(65536)
            except socket.timeout:
                pass
        check(b'"role":"assistant"' in waited and waited.count(b": ping\n\n") >= 2 and b'"content"' not in waited,
              f"queued stream: {waited[-400:]!r}")
        # the queued request is cancelled by its client: it leaves the queue
        d0 = m["rocmforge_client_disconnects_total"]
        s2.close()
        t0 = time.time()
        while (metrics(srv)["rocmforge_client_disconnects_total"] == d0 or metrics(srv)["rocmforge_requests_active"] > 1) \
                and time.time() - t0 < 10:
            time.sleep(0.05)
        m = metrics(srv)
        check(m["rocmforge_client_disconnects_total"] == d0 + 1 and m["rocmforge_requests_active"] == 1,
              f"queued request not cancelled: {m['rocmforge_client_disconnects_total']} {m['rocmforge_requests_active']}")
        # room again: a new request is queued, not refused; SIGTERM ends the running stream with an error event
        s3 = socket.create_connection(("127.0.0.1", srv.port))
        s3.sendall(head % len(b2) + b2)
        time.sleep(0.3)
        srv.p.send_signal(signal.SIGTERM)
        data = b""
        s1.settimeout(30)
        while True:
            d = s1.recv(65536)
            if not d:
                break
            data += d
        check(b'"shutting_down"' in data and b"data: [DONE]" in data, f"stream at shutdown: {data[-300:]!r}")
        s3.settimeout(30)
        ans = s3.recv(65536)
        check(ans.startswith(b"HTTP/1.1 503") or ans.startswith(b"HTTP/1.1 200"), f"queued request at shutdown: {ans[:200]!r}")
        rc = srv.p.wait(30)
        check(rc == 0, f"exit code {rc} after SIGTERM")
    finally:
        if srv.p.poll() is None:
            srv.p.kill()


def test_product_ignores_hooks():
    """`rocmforge` (not rocmforge-test) with every hook variable set: no load delay (a 10-minute one
    would outlast wait_ready), and the fault header changes nothing."""
    srv = Server("-c", "512", "-t", "1", env={"RF_SERVE_LOAD_DELAY_MS": "600000", "RF_SERVE_TEST_FAULTS": "1"},
                 wait_ready=False)
    try:
        srv.wait_ready()
        body = {"messages": MSG, "max_tokens": 2, "temperature": 0}
        st, _, data = req(srv, "POST", "/v1/chat/completions", body, headers={"X-RF-Test-Fault": "oom-events"})
        check(st == 200, f"rocmforge honoured X-RF-Test-Fault: {st} {data[:300]!r}")
        check("test hooks" not in srv.stderr(), "rocmforge reported test hooks")
        srv.stop()
    finally:
        if srv.p.poll() is None:
            srv.p.kill()


def main():
    check(os.path.exists(MODEL), "model missing")
    check(HOOKS_RF and os.path.exists(HOOKS_RF), "--hooks-bin ROCMFORGE_TEST is needed (tests/cli/serve.sh passes it)")
    if "--only-queue" in sys.argv:  # debugging: the second server alone
        test_queue_and_loading()
        print("ok loading, queue limit, cancel while queued, SIGTERM")
        return 0
    srv = Server("--parallel", str(max(N_CONC, 16)), "--api-key", KEY, "--alias", "smol", "-c", "1024", "--kv-blocks", "2048",
                 "--max-body", "65536", "-t", "2", env={"RF_SERVE_TEST_FAULTS": "1"}, rf=HOOKS_RF)
    got = {}
    steps = [("routes", test_routes), ("chat", lambda s: got.update(text=test_chat(s))), ("n=3", test_n3),
             ("stop + logprobs", lambda s: test_stop_logprobs(s, got["text"])), ("completions", test_completions),
             ("bad input", test_bad_input), ("allocation failure", test_alloc_failure),
             ("64 concurrent" if not QUICK else f"{N_CONC} concurrent", test_concurrent), ("disconnect storm", test_storm)]
    rc = server_suite.run(srv, steps, pass_line=False)
    if rc:
        return rc
    t = time.time()
    try:
        test_queue_and_loading()
    except Fail as x:
        print(f"FAIL: {x}")
        return 1
    print(f"ok loading, queue limit, cancel while queued, SIGTERM ({time.time() - t:.1f} s)")
    t = time.time()
    try:
        test_product_ignores_hooks()
    except Fail as x:
        print(f"FAIL: {x}")
        return 1
    print(f"ok rocmforge ignores the test hooks ({time.time() - t:.1f} s)")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
