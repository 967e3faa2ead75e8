#!/usr/bin/env python3
"""messages_tools_test.py — tool use on /v1/messages and /v1/responses through the official
`anthropic` and `openai` SDKs against `rocmforge-test serve` on SmolLM2 (run by
tests/cli/serve_messages_tools.sh; serve_test.py's harness). Skipped (77) when the server has no
tool calls (its chat path refuses `tools`).

SmolLM2-135M does not call tools of its own accord: the answer is replaced by a recorded Hermes
`<tool_call>` (the test hook X-RF-Test-Output, rocmforge-test with RF_SERVE_TEST_FAULTS=1) and
streamed in 3-byte pieces. Checked: Messages' tool_use blocks (input parsed, stop_reason
tool_use), streamed as content_block_start tool_use + input_json_delta and accumulated by the
SDK into the same message; text before a call as its own block; a two-turn loop (tool_use and
tool_result sent back) renders; Responses' function_call items (call_id, name, arguments),
streamed with response.function_call_arguments.delta / .done and accumulated by the SDK's
stream helper; function_call / function_call_output items sent back render. A recorded `<think>`
block comes back as Messages' thinking block and Responses' reasoning item when the request asks
for thinking (`thinking` / `reasoning`), streamed and not, through both SDKs' stream helpers.
usage: messages_tools_test.py ROCMFORGE_TEST MODEL
Exit 0 = pass, 1 = fail, 77 = skipped."""
import json
import sys

import anthropic
import openai

from serve_test import KEY, Server, check, req

import server_suite

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TWO = "Let me look.\n" + CALL + '\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
LONG = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Saint-R\u00e9my-de-Provence, Bouches-du-Rh\u00f4ne"}}\n</tool_call>'
A_TOOLS = [{"name": "get_weather", "description": "Current weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
           {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}]
R_TOOLS = [{"type": "function", "name": t["name"], "description": t.get("description", ""), "parameters": t["input_schema"]}
           for t in A_TOOLS]
Q = "What is the weather in Paris?"


def hdr(answer):
    return {"X-RF-Test-Output": json.dumps(answer)}


def a_client(srv, answer=None):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key=KEY, max_retries=0,
                               default_headers=hdr(answer) if answer is not None else None)


def o_client(srv, answer=None):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0,
                         default_headers=hdr(answer) if answer is not None else None)


def test_messages(srv):
    kw = dict(model="x", max_tokens=8, tools=A_TOOLS, messages=[{"role": "user", "content": Q}])
    m = a_client(srv, CALL).messages.create(**kw)
    check(m.stop_reason == "tool_use" and len(m.content) == 1, f"message {m}")
    b = m.content[0]
    check(b.type == "tool_use" and b.name == "get_weather" and b.input == {"city": "Paris"} and b.id, f"tool_use {b}")
    with a_client(srv, CALL).messages.stream(**kw) as s:
        f = s.get_final_message()
    check(f.stop_reason == "tool_use" and [c.type for c in f.content] == ["tool_use"], f"streamed {f}")
    check(f.content[0].input == {"city": "Paris"} and f.content[0].name == "get_weather", f"streamed input {f.content[0]}")
    m2 = a_client(srv, TWO).messages.create(**kw)
    check([c.type for c in m2.content] == ["text", "tool_use", "tool_use"], f"two calls: {m2.content}")
    check(m2.content[0].text.strip() == "Let me look." and m2.content[2].name == "get_time" and m2.content[2].input == {}, f"{m2.content}")
    with a_client(srv, TWO).messages.stream(**kw) as s:
        text = "".join(s.text_stream)
        f2 = s.get_final_message()
    check([c.type for c in f2.content] == ["text", "tool_use", "tool_use"] and text.strip() == "Let me look.", f"two streamed {f2.content}")
    # a long input streams in pieces (input_json_delta), as the model writes it
    m6 = a_client(srv, LONG).messages.create(**kw)
    pieces = [e.delta.partial_json for e in a_client(srv, LONG).messages.create(stream=True, **kw)
              if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    print(f"  a long input in {len(pieces)} input_json_delta pieces")
    check(len(pieces) > 10 and json.loads("".join(pieces)) == m6.content[0].input, f"{pieces} vs {m6.content}")
    with a_client(srv, LONG).messages.stream(**kw) as s:
        f6 = s.get_final_message()
    check(f6.content[0].input == m6.content[0].input and f6.stop_reason == "tool_use", f"{f6}")
    # the loop: the call and its result go back; the prompt holds both
    turns = [{"role": "user", "content": Q}, {"role": "assistant", "content": [{"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "18 C, sunny"}]}]
    m3 = a_client(srv).messages.create(model="x", max_tokens=4, tools=A_TOOLS, messages=turns)
    check(m3.usage.input_tokens > m.usage.input_tokens + 10, f"loop prompt {m3.usage.input_tokens} vs {m.usage.input_tokens}")
    # tool_choice none: the tools are not rendered
    m4 = a_client(srv).messages.create(model="x", max_tokens=1, tools=A_TOOLS, tool_choice={"type": "none"},
                                       messages=[{"role": "user", "content": Q}])
    m5 = a_client(srv).messages.create(model="x", max_tokens=1, messages=[{"role": "user", "content": Q}])
    check(m4.usage.input_tokens == m5.usage.input_tokens, f"tool_choice none: {m4.usage.input_tokens} vs {m5.usage.input_tokens}")


def test_responses(srv):
    kw = dict(model="x", input=Q, tools=R_TOOLS, max_output_tokens=8)
    r = o_client(srv, CALL).responses.create(**kw)
    calls = [o for o in r.output if o.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}, f"output {r.output}")
    check(calls[0].call_id and calls[0].id.startswith("fc_"), f"ids {calls[0]}")
    evs = list(o_client(srv, TWO).responses.create(stream=True, **kw))
    types = [e.type for e in evs]
    check(types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed", f"events {types}")
    check(types.count("response.function_call_arguments.done") == 2, f"events {types}")
    check([e.sequence_number for e in evs] == list(range(len(evs))), "sequence numbers")
    final = evs[-1].response
    check([o.type for o in final.output] == ["message", "function_call", "function_call"], f"final {final.output}")
    added = [e.item.id for e in evs if e.type == "response.output_item.added"]
    check(added == [o.id for o in final.output], f"item ids {added} vs {[o.id for o in final.output]}")
    with o_client(srv, TWO).responses.stream(**kw) as s:
        for _ in s:
            pass
        f = s.get_final_response()
    check([o.type for o in f.output] == ["message", "function_call", "function_call"], f"stream helper {f.output}")
    # a long call's arguments stream in pieces that add up to the .done event's and the
    # non-streaming call's arguments
    want = next(o for o in o_client(srv, LONG).responses.create(**kw).output if o.type == "function_call").arguments
    evs = list(o_client(srv, LONG).responses.create(stream=True, **kw))
    pieces = [e.delta for e in evs if e.type == "response.function_call_arguments.delta"]
    done = [e.arguments for e in evs if e.type == "response.function_call_arguments.done"]
    print(f"  a long call's arguments in {len(pieces)} response.function_call_arguments.delta events")
    check(len(pieces) > 10 and "".join(pieces) == want and done == [want], f"{pieces} {done} vs {want}")
    with o_client(srv, LONG).responses.stream(**kw) as s:
        for _ in s:
            pass
        f = s.get_final_response()
    check([o.arguments for o in f.output if o.type == "function_call"] == [want], f"stream helper {f.output}")
    c = calls[0]
    loop = [{"role": "user", "content": Q}, {"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments},
            {"type": "function_call_output", "call_id": c.call_id, "output": "18 C, sunny"}]
    r3 = o_client(srv).responses.create(model="x", input=loop, tools=R_TOOLS, max_output_tokens=4)
    check(r3.usage.input_tokens > r.usage.input_tokens + 10, f"loop prompt {r3.usage.input_tokens} vs {r.usage.input_tokens}")


THINK = "<think>\nThe user asks about the weather.\n</think>\n\nIt is sunny."
REASON = "The user asks about the weather."


def test_thinking(srv):
    """A `<think>` block in the answer comes back as Anthropic's thinking block (non-streaming:
    a content block before the text; streaming: content_block_start thinking + thinking_delta,
    accumulated by the SDK's stream helper) and as the Responses reasoning item (reasoning_text,
    streamed as response.reasoning_text.delta). SmolLM2's template knows no <think>: the request
    asks for the split (Anthropic's `thinking`, Responses' `reasoning`)."""
    kw = dict(model="x", max_tokens=8, messages=[{"role": "user", "content": Q}],
              thinking={"type": "enabled", "budget_tokens": 1024})
    m = a_client(srv, THINK).messages.create(**kw)
    check([c.type for c in m.content] == ["thinking", "text"], f"blocks {m.content}")
    check(m.content[0].thinking.strip() == REASON and m.content[1].text.strip() == "It is sunny.", f"blocks {m.content}")
    with a_client(srv, THINK).messages.stream(**kw) as s:
        evs = list(s)
        f = s.get_final_message()
    starts = [e.content_block.type for e in evs if e.type == "content_block_start"]
    deltas = {e.delta.type for e in evs if e.type == "content_block_delta"}
    check(starts == ["thinking", "text"] and {"thinking_delta", "text_delta"} <= deltas, f"events {starts} {deltas}")
    check([c.type for c in f.content] == ["thinking", "text"], f"streamed {f.content}")
    check(f.content[0].thinking.strip() == REASON and f.content[1].text.strip() == "It is sunny.", f"streamed {f.content}")
    # without `thinking` the block stays in the text (the template has no <think>)
    m2 = a_client(srv, THINK).messages.create(**{k: v for k, v in kw.items() if k != "thinking"})
    check([c.type for c in m2.content] == ["text"] and m2.content[0].text == THINK, f"no thinking asked: {m2.content}")
    # Responses: the reasoning item, then the message
    rk = dict(model="x", input=Q, max_output_tokens=8, reasoning={"effort": "low"})
    r = o_client(srv, THINK).responses.create(**rk)
    check([o.type for o in r.output] == ["reasoning", "message"], f"output {r.output}")
    rt = "".join(c.text for c in (r.output[0].content or []))
    check(rt.strip() == REASON and r.output_text.strip() == "It is sunny.", f"reasoning {r.output[0]} text {r.output_text!r}")
    # every event of the message's part names the message's place (1), not the reasoning's (0)
    evs = list(o_client(srv, THINK).responses.create(stream=True, **rk))
    idx = {e.output_index for e in evs if e.type.startswith(("response.output_text.", "response.content_part."))}
    check(idx == {1}, f"text events' output_index {idx}")
    with o_client(srv, THINK).responses.stream(**rk) as s:
        types = [e.type for e in s]
        fr = s.get_final_response()
    check("response.reasoning_text.delta" in types and "response.reasoning_text.done" in types, f"events {types}")
    check([o.type for o in fr.output] == ["reasoning", "message"] and fr.output_text.strip() == "It is sunny.", f"stream helper {fr.output}")
    check("".join(c.text for c in fr.output[0].content).strip() == REASON, f"streamed reasoning {fr.output[0]}")


def tools_offered(srv):
    s, _, _ = req(srv, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                                         "tools": [{"type": "function", "function": {"name": "f"}}]})
    if s != 200:
        raise server_suite.Skip("this server has no tool calls (the chat path refuses tools)")


def main():
    srv = Server("--api-key", KEY, "-t", "2", env={"RF_SERVE_TEST_FAULTS": "1"})
    return server_suite.run(srv, [("messages tool_use", test_messages), ("responses function_call", test_responses),
                                  ("thinking blocks and reasoning items", test_thinking)],
                            setup=tools_offered)


if __name__ == "__main__":
    sys.exit(main())
