#!/usr/bin/env python3
"""messages_test.py — Anthropic's Messages API (POST /v1/messages) of `rocmforge serve` on
loopback, driven by the official `anthropic` SDK (run by tests/cli/serve_messages.sh; reuses
serve_test.py's server harness). SmolLM2 on the CPU, greedy (temperature 0), so texts compare:
  - a message equals /v1/chat/completions' text for the same turns (system, text blocks);
  - stop_reason max_tokens with output_tokens == max_tokens; end_turn otherwise;
  - streaming: the SDK's text stream equals the message; the raw SSE events in Anthropic's order
    (message_start, content_block_start, ping, content_block_delta..., content_block_stop,
    message_delta, message_stop), each `event:` naming its data's type;
  - stop_sequences: the text ends before the first one hit, stop_reason stop_sequence and
    stop_sequence naming it (one of several, streaming and not);
  - the key as x-api-key (the SDK's default) and as a Bearer token; errors in Anthropic's shape
    (invalid_request_error, authentication_error, not_found_error) for a missing max_tokens,
    bad fields, unsupported blocks, a wrong key, a wrong content type, an unknown route method.
usage: messages_test.py ROCMFORGE MODEL [--quick]
Exit 0 = pass, 1 = fail (the first failed check is printed)."""
import json
import re
import sys

import anthropic

import serve_test as st
from serve_test import KEY, Fail, Server, check, req

import server_suite

# The SDK of 2026 has no sampling arguments (temperature, top_p, top_k) any more; the API and
# this server still take them in the body.
T0 = {"extra_body": {"temperature": 0}}
SYSTEM = "You are a helpful assistant."
USER = "List the numbers from 1 to 12, one per line."


def chat_text(srv, msgs, max_tokens, stop=None):
    body = {"messages": msgs, "max_tokens": max_tokens, "temperature": 0}
    if stop:
        body["stop"] = stop
    s, _, data = req(srv, "POST", "/v1/chat/completions", body)
    check(s == 200, f"chat: {s} {data[:200]!r}")
    j = json.loads(data)
    return j["choices"][0]["message"]["content"], j["choices"][0]["finish_reason"]


def client(srv, **kw):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", max_retries=0, **kw)


def anthropic_error(srv, status, etype, body, headers=None, key=KEY, path="/v1/messages", method="POST"):
    h = dict(headers or {})
    if key:
        h["x-api-key"] = key
    s, hd, data = req(srv, method, path, body, h, key=None)
    what = f"{method} {path} {str(body)[:80]}"
    check(s == status, f"{what}: status {s}, expected {status}: {data[:300]!r}")
    j = json.loads(data)
    check(j.get("type") == "error" and isinstance(j.get("error"), dict), f"{what}: shape {j}")
    check(j["error"].get("type") == etype, f"{what}: type {j['error'].get('type')}, expected {etype}")
    check(isinstance(j["error"].get("message"), str) and j["error"]["message"], f"{what}: message {j}")
    return j["error"]["message"]


def tools_supported(srv):
    """Whether this server has tool calls (the chat path takes `tools`); messages_tools_test.py
    tests their mapping then."""
    s, _, _ = req(srv, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                                         "tools": [{"type": "function", "function": {"name": "f"}}]})
    return s == 200


def test_message(srv):
    c = client(srv, api_key=KEY)
    m = c.messages.create(model="claude-any-name", max_tokens=24, **T0, system=SYSTEM,
                          messages=[{"role": "user", "content": USER}])
    ref, fin = chat_text(srv, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}], 24)
    check(m.type == "message" and m.role == "assistant" and m.id.startswith("msg_"), f"message {m}")
    check(len(m.content) == 1 and m.content[0].type == "text", f"content {m.content}")
    check(m.content[0].text == ref, f"text {m.content[0].text!r} != chat's {ref!r}")
    want = "max_tokens" if fin == "length" else "end_turn"
    check(m.stop_reason == want, f"stop_reason {m.stop_reason}, chat finished with {fin}")
    check(m.stop_sequence is None, f"stop_sequence {m.stop_sequence}")
    check(m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 24, f"usage {m.usage}")
    # system and content as blocks, the key as a Bearer token
    c2 = client(srv, auth_token=KEY)
    m2 = c2.messages.create(model="x", max_tokens=24, **T0, system=[{"type": "text", "text": SYSTEM}],
                            messages=[{"role": "user", "content": [{"type": "text", "text": USER}]}])
    check(m2.content[0].text == ref, f"blocks: {m2.content[0].text!r} != {ref!r}")
    # max_tokens reached
    m3 = c.messages.create(model="x", max_tokens=3, **T0, messages=[{"role": "user", "content": USER}])
    check(m3.stop_reason == "max_tokens" and m3.usage.output_tokens == 3, f"max_tokens 3: {m3}")
    # a multi-turn conversation with a thinking block in the assistant's turn (dropped)
    turns = [{"role": "user", "content": "Hi"},
             {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"},
                                               {"type": "text", "text": "Hello!"}]},
             {"role": "user", "content": "Say it again."}]
    m4 = c.messages.create(model="x", max_tokens=12, **T0, messages=turns)
    ref4, _ = chat_text(srv, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                              {"role": "user", "content": "Say it again."}], 12)
    check(m4.content[0].text == ref4, f"turns: {m4.content[0].text!r} != {ref4!r}")


def sse_events(srv, body):
    s, hd, data = req(srv, "POST", "/v1/messages", body, {"x-api-key": KEY, "anthropic-version": "2023-06-01"}, key=None)
    check(s == 200, f"stream: {s} {data[:200]!r}")
    check(hd.get("content-type", "").startswith("text/event-stream"), f"content-type {hd.get('content-type')}")
    evs = []
    for block in data.decode().split("\n\n"):
        if not block.strip() or block.startswith(":"):
            continue
        lines = block.split("\n")
        check(len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), f"SSE block {block!r}")
        name, d = lines[0][7:], json.loads(lines[1][6:])
        check(d.get("type") == name, f"event {name} carries type {d.get('type')}")
        evs.append((name, d))
    return evs


def test_stream(srv):
    c = client(srv, api_key=KEY)
    kw = dict(model="claude-x", max_tokens=24, **T0, system=SYSTEM, messages=[{"role": "user", "content": USER}])
    ref = c.messages.create(**kw)
    with c.messages.stream(**kw) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    check(text == ref.content[0].text, f"streamed {text!r} != {ref.content[0].text!r}")
    check(final.content[0].text == text and final.stop_reason == ref.stop_reason, f"final {final}")
    check(final.usage.output_tokens == ref.usage.output_tokens, f"usage {final.usage} vs {ref.usage}")
    raw = {k: v for k, v in kw.items() if k != "extra_body"}
    evs = sse_events(srv, dict(raw, temperature=0, stream=True))
    names = [n for n, _ in evs]
    check(names[:3] == ["message_start", "content_block_start", "ping"], f"opening {names[:4]}")
    check(names[-3:] == ["content_block_stop", "message_delta", "message_stop"], f"closing {names[-4:]}")
    check(set(names[3:-3]) <= {"content_block_delta"} and len(names) > 6, f"middle {names}")
    start = evs[0][1]["message"]
    check(start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0, f"message_start {start}")
    check(evs[1][1]["content_block"] == {"type": "text", "text": ""} and evs[1][1]["index"] == 0, f"block start {evs[1]}")
    deltas = "".join(d["delta"]["text"] for n, d in evs if n == "content_block_delta")
    check(all(d["delta"]["type"] == "text_delta" for n, d in evs if n == "content_block_delta"), "delta types")
    check(deltas == text, f"raw deltas {deltas!r} != {text!r}")
    md = evs[-2][1]
    check(md["delta"]["stop_reason"] == ref.stop_reason and md["usage"]["output_tokens"] == ref.usage.output_tokens, f"message_delta {md}")


def test_stop_sequences(srv):
    c = client(srv, api_key=KEY)
    msgs = [{"role": "user", "content": USER}]
    full = c.messages.create(model="x", max_tokens=40, **T0, messages=msgs).content[0].text
    lines = [l.strip() for l in re.split(r"[\n,]", full) if l.strip()]
    check(len(lines) >= 4, f"the greedy text is too short to cut: {full!r}")
    stop = lines[2]  # the third line's text: it appears after the first two
    cut = full[:full.index(stop)]
    for stops in ([stop], ["never-in-the-output", stop]):
        m = c.messages.create(model="x", max_tokens=40, **T0, messages=msgs, stop_sequences=stops)
        check(m.stop_reason == "stop_sequence" and m.stop_sequence == stop, f"{stops}: {m.stop_reason} {m.stop_sequence!r}")
        check(m.content[0].text == cut, f"{stops}: text {m.content[0].text!r} != {cut!r}")
        with c.messages.stream(model="x", max_tokens=40, **T0, messages=msgs, stop_sequences=stops) as s:
            text = "".join(s.text_stream)
            f = s.get_final_message()
        check(text == cut and f.stop_reason == "stop_sequence" and f.stop_sequence == stop, f"stream {stops}: {text!r} {f.stop_reason} {f.stop_sequence!r}")
    # a later stop sequence listed first: the one hit first names the stop
    later = lines[3]
    m = c.messages.create(model="x", max_tokens=40, **T0, messages=msgs, stop_sequences=[later, stop])
    check(m.stop_sequence == stop, f"two hits: named {m.stop_sequence!r}, expected {stop!r}")


def test_errors(srv):
    c = client(srv, api_key=KEY)
    try:
        c.messages.create(model="x", max_tokens=8, messages=[{"role": "user", "content": "hi"}],
                          extra_body={"temperature": 1.5})
        raise Fail("temperature 1.5 accepted")
    except anthropic.BadRequestError as e:
        check(e.status_code == 400 and e.body["error"]["type"] == "invalid_request_error", f"temperature: {e.body}")
    try:
        client(srv, api_key="wrong").messages.create(model="x", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        raise Fail("a wrong key accepted")
    except anthropic.AuthenticationError as e:
        check(e.body["error"]["type"] == "authentication_error", f"401: {e.body}")
    ok = {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    m = anthropic_error(srv, 400, "invalid_request_error", {"messages": ok["messages"]})
    check("max_tokens" in m, m)
    for bad in [{"max_tokens": 0}, {"max_tokens": "8"}, {"messages": []}, {"messages": "hi"},
                {"messages": [{"role": "system", "content": "x"}]}, {"messages": [{"role": "user"}]},
                {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
                {"system": 5}, {"stop_sequences": "x"}, {"stop_sequences": [1]}, {"top_k": -1}, {"top_p": 2},
                {"stream": "yes"}, {"tools": [{"type": "web_search_20250305", "name": "w"}]},
                {"tools": [{"name": "f"}]}, {"tool_choice": {"type": "maybe"}}, {"thinking": {"type": "maybe"}},
                {"thinking": True},
                {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]}]}]:
        anthropic_error(srv, 400, "invalid_request_error", dict(ok, **bad))
    if not tools_supported(srv):  # this tree has no tool calls: tools and tool results are refused
        for bad in [{"tools": [{"name": "f", "input_schema": {"type": "object"}}]},
                    {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]}]:
            anthropic_error(srv, 400, "invalid_request_error", dict(ok, **bad))
    anthropic_error(srv, 400, "invalid_request_error", b"{not json", {"Content-Type": "application/json"})
    anthropic_error(srv, 401, "authentication_error", ok, key=None)
    anthropic_error(srv, 415, "invalid_request_error", json.dumps(ok).encode(), {"Content-Type": "text/plain"})
    anthropic_error(srv, 405, "invalid_request_error", None, method="GET")
    # a prompt + max_tokens over the context
    anthropic_error(srv, 400, "invalid_request_error", dict(ok, max_tokens=100000))


def main():
    srv = Server("--parallel", "2", "--api-key", KEY, "-c", "2048", "-t", "2")
    return server_suite.run(srv, [("message", test_message), ("stream", test_stream),
                                  ("stop sequences", test_stop_sequences), ("errors", test_errors)])


if __name__ == "__main__":
    sys.exit(main())
