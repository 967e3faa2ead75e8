#!/usr/bin/env python3
"""responses_test.py — OpenAI's Responses API (POST /v1/responses, stateless) of `rocmforge
serve` on loopback, driven by the official `openai` SDK (run by tests/cli/serve_responses.sh;
reuses serve_test.py's server harness). SmolLM2 on the CPU, greedy, so texts compare:
  - a response's output_text equals /v1/chat/completions' text for the same turns (input as a
    string, as message items with input_text / output_text parts, instructions as the system);
  - status completed, or incomplete with incomplete_details.reason max_output_tokens; usage;
  - streaming: the events in order (response.created, response.in_progress,
    response.output_item.added, response.content_part.added, response.output_text.delta...,
    response.output_text.done, response.content_part.done, response.output_item.done,
    response.completed / response.incomplete), sequence_number 0, 1, 2, ..., deltas joined
    equal to the text of the .done events and of the non-streamed response;
  - what needs state is refused (previous_response_id, store: true, conversation), and bad
    input items, with 400s naming the field.
usage: responses_test.py ROCMFORGE MODEL [--quick]
Exit 0 = pass, 1 = fail (the first failed check is printed)."""
import json
import sys

import openai

from serve_test import KEY, Fail, Server, check, expect_error, req

import server_suite

INSTR = "You are a helpful assistant."
USER = "List the numbers from 1 to 12."


def chat_text(srv, msgs, max_tokens):
    s, _, data = req(srv, "POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": max_tokens, "temperature": 0})
    check(s == 200, f"chat: {s} {data[:200]!r}")
    j = json.loads(data)
    return j["choices"][0]["message"]["content"], j["choices"][0]["finish_reason"]


def client(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0)


def test_response(srv):
    c = client(srv)
    r = c.responses.create(model="gpt-any-name", input=USER, instructions=INSTR, max_output_tokens=40, temperature=0)
    ref, fin = chat_text(srv, [{"role": "system", "content": INSTR}, {"role": "user", "content": USER}], 40)
    check(r.object == "response" and r.id.startswith("resp_"), f"response {r}")
    check(r.output_text == ref, f"output_text {r.output_text!r} != chat's {ref!r}")
    check(len(r.output) == 1 and r.output[0].type == "message" and r.output[0].role == "assistant", f"output {r.output}")
    check(r.output[0].content[0].type == "output_text", f"part {r.output[0].content}")
    want = "incomplete" if fin == "length" else "completed"
    check(r.status == want and r.output[0].status == want, f"status {r.status}, chat finished with {fin}")
    check(r.instructions == INSTR and r.max_output_tokens == 40, f"echoed fields {r.instructions!r} {r.max_output_tokens}")
    u = r.usage
    check(u.input_tokens > 0 and 0 < u.output_tokens <= 40 and u.total_tokens == u.input_tokens + u.output_tokens, f"usage {u}")
    r2 = c.responses.create(model="x", input=USER, max_output_tokens=3, temperature=0)
    check(r2.status == "incomplete" and r2.incomplete_details.reason == "max_output_tokens" and r2.usage.output_tokens == 3,
          f"max_output_tokens 3: {r2.status} {r2.incomplete_details} {r2.usage}")
    items = [{"role": "developer", "content": INSTR},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
             {"role": "user", "content": "Say it again."}]
    r3 = c.responses.create(model="x", input=items, max_output_tokens=12, temperature=0)
    ref3, _ = chat_text(srv, [{"role": "system", "content": INSTR}, {"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Say it again."}], 12)
    check(r3.output_text == ref3, f"items: {r3.output_text!r} != {ref3!r}")


ORDER_HEAD = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
ORDER_TAIL = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


def check_events(evs, text, final_type):
    types = [e.type for e in evs]
    check(types[:4] == ORDER_HEAD, f"opening events {types[:5]}")
    check(types[-4:] == ORDER_TAIL + [final_type], f"closing events {types[-5:]}")
    check(set(types[4:-4]) <= {"response.output_text.delta"}, f"middle events {types}")
    check([e.sequence_number for e in evs] == list(range(len(evs))), "sequence numbers")
    deltas = "".join(e.delta for e in evs if e.type == "response.output_text.delta")
    check(deltas == text, f"deltas {deltas!r} != {text!r}")
    check(evs[-4].text == text and evs[-3].part.text == text and evs[-2].item.content[0].text == text, "done events' text")
    check(evs[-1].response.output_text == text, f"final response {evs[-1].response.output_text!r}")
    item = evs[2].item.id
    check(all(e.item_id == item for e in evs if hasattr(e, "item_id")), "item ids")
    check(evs[0].response.status == "in_progress" and evs[0].response.id == evs[-1].response.id, "response ids")


def test_stream(srv):
    c = client(srv)
    kw = dict(model="x", input=USER, instructions=INSTR, max_output_tokens=40, temperature=0)
    ref = c.responses.create(**kw)
    evs = list(c.responses.create(stream=True, **kw))
    check_events(evs, ref.output_text, "response.incomplete" if ref.status == "incomplete" else "response.completed")
    check(evs[-1].response.usage.output_tokens == ref.usage.output_tokens, "usage")
    evs = list(c.responses.create(stream=True, **dict(kw, max_output_tokens=4)))
    check(evs[-1].type == "response.incomplete" and evs[-1].response.usage.output_tokens == 4, f"incomplete stream {evs[-1]}")
    with c.responses.stream(**kw) as s:  # the SDK's helper accumulates the events
        for _ in s:
            pass
        final = s.get_final_response()
    check(final.output_text == ref.output_text, f"stream helper {final.output_text!r}")


def test_errors(srv):
    c = client(srv)
    try:
        c.responses.create(model="x", input="hi", previous_response_id="resp_123")
        raise Fail("previous_response_id accepted")
    except openai.BadRequestError as e:
        check(e.body["param"] == "previous_response_id" and "stateless" in e.body["message"], f"{e.body}")
    ok = {"input": "hi", "max_output_tokens": 4}
    P = "/v1/responses"
    for bad, param in [({"store": True}, "store"), ({"conversation": "c_1"}, "conversation"), ({"input": None}, "input"),
                       ({"input": []}, "input"), ({"input": 5}, "input"),
                       ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
                       ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0]"),
                       ({"input": [{"type": "computer_call"}]}, "input[0]"),
                       ({"tools": [{"type": "web_search"}]}, "tools[0]"), ({"reasoning": "high"}, "reasoning"),
                       ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
                       ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
                       ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
                       ({"instructions": 5}, "instructions"), ({"max_output_tokens": 0}, "max_output_tokens"),
                       ({"temperature": 3}, "temperature"),
                       ({"text": {"format": {"type": "yaml"}}}, None)]:
        expect_error(srv, 400, "invalid_request_error", None, "POST", P, dict(ok, **bad), param=param)
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "POST", P, ok, key=None)
    expect_error(srv, 415, "invalid_request_error", "unsupported_media_type", "POST", P, json.dumps(ok).encode(),
                 {"Content-Type": "text/plain"})
    expect_error(srv, 405, "invalid_request_error", "method_not_allowed", "GET", P)
    expect_error(srv, 400, "invalid_request_error", "context_length_exceeded", "POST", P, dict(ok, max_output_tokens=100000))
    # text.format is chat's response_format: a constrained answer (docs/server.md, Structured output)
    s, _, data = req(srv, "POST", P, dict(ok, text={"format": {"type": "json_schema", "name": "c", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}, max_output_tokens=40))
    check(s == 200, f"text.format json_schema: {s} {data[:200]!r}")
    j = json.loads(data)
    if j.get("status") == "completed":
        txt = "".join(c.get("text", "") for o in j["output"] if o.get("type") == "message" for c in o["content"])
        check(isinstance(json.loads(txt).get("ok"), bool), f"text.format json_schema: {txt!r}")
    expect_error(srv, 400, "invalid_request_error", "unsupported_schema", "POST", P,
                 dict(ok, text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "string", "not": {"const": "a"}}}}),
                 msg="'not'")
    s, _, _ = req(srv, "POST", P, dict(ok, store=False))
    check(s == 200, f"store: false refused ({s})")


def main():
    srv = Server("--parallel", "2", "--api-key", KEY, "-c", "2048", "-t", "2")
    return server_suite.run(srv, [("response", test_response), ("stream", test_stream), ("errors", test_errors)])


if __name__ == "__main__":
    sys.exit(main())
