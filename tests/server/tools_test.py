#!/usr/bin/env python3
"""tools_test.py — tool calls and reasoning through the official `openai` SDK against
`rocmforge-test serve` on SmolLM2 (run by tests/cli/serve_tools.sh; serve_test.py's harness).

SmolLM2-135M does not emit tool calls of its own accord, so the parser and the streaming path
are driven by the test hook X-RF-Test-Output (rocmforge-test with RF_SERVE_TEST_FAULTS=1): the
model's answer is replaced by a recorded one, streamed in 3-byte pieces so that every marker
straddles chunks. What the model itself does is checked where it can be: the tools reach the
prompt (prompt_tokens grow by the tools' text), a real generation with tools returns 200 and
well-formed fields, and a two-turn tool loop renders the call and its result back.
usage: tools_test.py ROCMFORGE_TEST MODEL [--quick]
Exit 0 = pass, 1 = fail (the first failed check is printed)."""
import json
import os
import subprocess
import sys
import tempfile

import openai

import serve_test as st
from serve_test import KEY, Server, check, expect_error, req

import server_suite

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
# SmolLM2's template is ChatML: the Hermes <tool_call> format is the one its answers are read in
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TWO = CALL + '\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
DS = {"reasoning_format": "deepseek"}
MID = None  # the served model's id (from /v1/models)
PIECES = {}  # the last streamed chat's argument fragments per call (chat(stream=True))
THINK = "<think>\nThe user wants the weather; call the tool.\n</think>\n\n"


def client(srv, answer=None):
    h = {"X-RF-Test-Output": json.dumps(answer)} if answer is not None else None
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, default_headers=h, max_retries=0)


def chat(srv, answer, stream=False, **kw):
    args = dict(model=MID, messages=MSGS, tools=TOOLS, max_tokens=1, temperature=0)
    args.update(kw)
    c = client(srv, answer)
    if not stream:
        return c.chat.completions.create(**args)
    # accumulate the stream as the SDK's users do
    content, reasoning, calls, finish, chunks = "", "", {}, None, 0
    global PIECES
    PIECES = {}  # call index -> non-empty arguments fragments
    for ch in c.chat.completions.create(stream=True, **args):
        chunks += 1
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                check(tc.id and tc.type == "function" and tc.function.name, f"first tool-call delta lacks id/type/name: {tc}")
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            calls[tc.index]["arguments"] += tc.function.arguments or ""
            PIECES[tc.index] = PIECES.get(tc.index, 0) + bool(tc.function.arguments)
        finish = ch.choices[0].finish_reason or finish
    return content, reasoning, [calls[k] for k in sorted(calls)], finish, chunks


def test_tools_rendered(srv):
    """The tool definitions reach the prompt: SmolLM2's template ignores `tools`, so they are
    described in a system message (Hermes format); the prompt grows by far more than 20 tokens."""
    base = client(srv).chat.completions.create(model=MID, messages=MSGS, max_tokens=1, temperature=0)
    with_tools = client(srv).chat.completions.create(model=MID, messages=MSGS, tools=TOOLS, max_tokens=1, temperature=0)
    none = client(srv).chat.completions.create(model=MID, messages=MSGS, tools=TOOLS, tool_choice="none",
                                               max_tokens=1, temperature=0)
    p0, p1, p2 = base.usage.prompt_tokens, with_tools.usage.prompt_tokens, none.usage.prompt_tokens
    print(f"  prompt tokens: {p0} plain, {p1} with 2 tools, {p2} with tool_choice none")
    check(p1 > p0 + 60, f"tools did not reach the prompt ({p0} -> {p1} tokens)")
    check(p2 == p0, f"tool_choice none still rendered the tools ({p2} vs {p0})")
    named = client(srv).chat.completions.create(model=MID, messages=MSGS, tools=TOOLS, max_tokens=1, temperature=0,
                                                tool_choice={"type": "function", "function": {"name": "get_time"}})
    check(p0 < named.usage.prompt_tokens < p1, f"a named tool_choice should offer one tool ({named.usage.prompt_tokens})")
    # the model's own answer with tools: whatever it writes comes back as well-formed fields
    r = client(srv).chat.completions.create(model=MID, messages=MSGS, tools=TOOLS, max_tokens=24, temperature=0)
    m = r.choices[0].message
    check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"finish {r.choices[0].finish_reason}")
    check(m.content is not None or m.tool_calls, "neither content nor tool_calls")
    print(f"  SmolLM2's own answer with tools: {(m.content or '')[:60]!r}, tool_calls {m.tool_calls}")


def test_parse(srv):
    r = chat(srv, "Let me check.\n" + CALL)
    m, f = r.choices[0].message, r.choices[0].finish_reason
    check(f == "tool_calls", f"finish_reason {f}")
    check(m.content == "Let me check.\n", f"content {m.content!r}")
    check(len(m.tool_calls) == 1 and m.tool_calls[0].function.name == "get_weather", f"calls {m.tool_calls}")
    check(json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris"}, m.tool_calls[0].function.arguments)
    check(m.tool_calls[0].id.startswith("call_") and m.tool_calls[0].type == "function", f"id {m.tool_calls[0].id}")
    r = chat(srv, TWO)
    m = r.choices[0].message
    check(m.content is None and [c.function.name for c in m.tool_calls] == ["get_weather", "get_time"], f"{m}")
    check(len({c.id for c in m.tool_calls}) == 2, "tool-call ids repeat")
    r = chat(srv, TWO, parallel_tool_calls=False)
    check(len(r.choices[0].message.tool_calls) == 1, "parallel_tool_calls false kept more than one call")
    # malformed and truncated calls: the text comes back as content, 200
    for bad in ['<tool_call>\n{"name": "get_weather", "arguments": {"city": </tool_call>',
                '<tool_call>\n{"name": "get_weather", "argu', "<tool_call>not json</tool_call> after"]:
        r = chat(srv, bad)
        m = r.choices[0].message
        check(r.choices[0].finish_reason == "stop" and not m.tool_calls and m.content == bad, f"{bad!r}: {m}")
    # without tools the same text is content
    r = chat(srv, CALL, tools=openai.NOT_GIVEN)
    check(r.choices[0].message.content == CALL and not r.choices[0].message.tool_calls, "parsed without tools")


def test_stream(srv):
    for answer, want_content, want_names in [("Let me check.\n" + CALL, "Let me check.\n", ["get_weather"]),
                                             (TWO, "", ["get_weather", "get_time"]),
                                             ("No tools needed: 42.", "No tools needed: 42.", [])]:
        content, reasoning, calls, finish, n = chat(srv, answer, stream=True)
        check(content == want_content, f"stream content {content!r} != {want_content!r}")
        check([c["name"] for c in calls] == want_names, f"stream calls {calls}")
        check(finish == ("tool_calls" if want_names else "stop"), f"stream finish {finish}")
        for c in calls:
            json.loads(c["arguments"])
        # the same answer without streaming: the same parts
        r = chat(srv, answer)
        m = r.choices[0].message
        check((m.content or "") == content and [t.function.name for t in m.tool_calls or []] == want_names, "stream != non-stream")
        check([t.function.arguments for t in m.tool_calls or []] == [c["arguments"] for c in calls], "arguments differ")
    # the arguments come in pieces as they are written (the hook streams 3 bytes at a time)
    long = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Saint-R\u00e9my-de-Provence, Bouches-du-Rh\u00f4ne"}}\n</tool_call>'
    _, _, calls, finish, _ = chat(srv, long, stream=True)
    want = chat(srv, long).choices[0].message.tool_calls[0].function.arguments
    print(f"  a {len(want)}-byte arguments text streamed in {PIECES[0]} pieces")
    check(PIECES[0] > 10 and calls[0]["arguments"] == want and finish == "tool_calls", f"{PIECES} {calls} {want}")
    check(json.loads(want)["city"] == "Saint-R\u00e9my-de-Provence, Bouches-du-Rh\u00f4ne", want)
    # cut off inside the arguments: the call began and ends with what was sent (not JSON); its
    # text is the content, as without streaming, and the finish reason is not tool_calls
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    content, _, calls, finish, _ = chat(srv, bad, stream=True)
    check(content == bad and finish == "stop", f"truncated call streamed as {content!r} {calls} {finish}")
    check([c["name"] for c in calls] == ["get_weather"] and '{"city":"Par'.startswith(calls[0]["arguments"]), f"{calls}")


def test_forced_stream(srv):
    """SmolLM2 forced into a call (tool_choice naming a tool, the grammar doing the forcing) with a
    long string argument: the stream sends the arguments in several pieces as the tokens come,
    and they add up to the non-streaming call's arguments, through the SDK's own accumulation."""
    note = [{"type": "function", "function": {"name": "write_note", "parameters": {
        "type": "object", "properties": {"text": {"type": "string", "minLength": 40, "maxLength": 200}},
        "required": ["text"]}}}]
    args = dict(model=MID, messages=[{"role": "user", "content": "Write a note about Paris."}], tools=note,
                tool_choice={"type": "function", "function": {"name": "write_note"}}, max_tokens=120, temperature=0)
    r = client(srv).chat.completions.create(**args)
    want = r.choices[0].message.tool_calls[0].function.arguments
    _, _, calls, finish, _ = chat(srv, None, stream=True, **args)
    print(f"  {len(want)}-byte arguments in {PIECES.get(0)} pieces: {want[:60]!r}")
    check(len(calls) == 1 and calls[0]["name"] == "write_note" and finish == "tool_calls", f"{calls} {finish}")
    check(PIECES[0] > 1, f"the arguments came in {PIECES[0]} piece(s)")
    check(json.loads(calls[0]["arguments"]) == json.loads(want) and len(json.loads(want)["text"]) >= 40, f"{calls} vs {want}")
    # the SDK's stream helper accumulates the same call
    with client(srv).chat.completions.stream(**args) as st_:
        final = st_.get_final_completion()
    tc = final.choices[0].message.tool_calls[0]
    check(tc.function.name == "write_note" and json.loads(tc.function.arguments) == json.loads(want), f"{tc}")


def test_tool_loop(srv):
    """Two turns: the call comes back, the client runs it and sends the result as role tool."""
    r = chat(srv, CALL)
    call = r.choices[0].message.tool_calls[0]
    msgs = MSGS + [r.choices[0].message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 21})}]
    r2 = client(srv).chat.completions.create(model=MID, messages=msgs, tools=TOOLS, max_tokens=8, temperature=0)
    check(r2.choices[0].finish_reason in ("stop", "length", "tool_calls"), "second turn failed")
    r1 = client(srv).chat.completions.create(model=MID, messages=MSGS, tools=TOOLS, max_tokens=1, temperature=0)
    grew = r2.usage.prompt_tokens - r1.usage.prompt_tokens
    print(f"  second turn: prompt {r2.usage.prompt_tokens} tokens ({grew} more than the first), answer "
          f"{(r2.choices[0].message.content or '')[:50]!r}")
    check(grew > 25, f"the call and its result did not reach the prompt ({grew} tokens)")


def test_reasoning(srv):
    """SmolLM2's template knows no <think>: "reasoning_format": "deepseek" asks for the split (it
    is on by default for templates that mention <think> and for harmony)."""
    r = chat(srv, THINK + "It is sunny.", tools=openai.NOT_GIVEN)
    check(r.choices[0].message.content == THINK + "It is sunny.", "split without reasoning_format on a template without <think>")
    r = chat(srv, THINK + "It is sunny.", tools=openai.NOT_GIVEN, extra_body=DS)
    m = r.choices[0].message
    rc = (m.model_extra or {}).get("reasoning_content")
    check(m.content == "It is sunny." and rc == "The user wants the weather; call the tool.", f"{m}")
    content, reasoning, _, finish, _ = chat(srv, THINK + "It is sunny.", stream=True, tools=openai.NOT_GIVEN, extra_body=DS)
    check(content == "It is sunny." and reasoning == rc and finish == "stop", f"stream: {content!r} {reasoning!r}")
    # reasoning then a call
    content, reasoning, calls, finish, _ = chat(srv, THINK + CALL, stream=True, extra_body=DS)
    check(reasoning == rc and content == "" and calls[0]["name"] == "get_weather" and finish == "tool_calls",
          f"think + call: {content!r} {reasoning!r} {calls} {finish}")
    # "reasoning_format": "none" leaves the think block in the content
    r = chat(srv, THINK + "x", tools=openai.NOT_GIVEN, extra_body={"reasoning_format": "none"})
    check(r.choices[0].message.content == THINK + "x", f"reasoning_format none: {r.choices[0].message.content!r}")
    # an unclosed think block (max_tokens hit): all reasoning
    r = chat(srv, "<think>still thinking", tools=openai.NOT_GIVEN, extra_body=DS)
    check((r.choices[0].message.model_extra or {}).get("reasoning_content") == "still thinking", "unclosed think")
    # template variables: accepted (SmolLM2's template has none of them), checked
    r = chat(srv, "ok", tools=openai.NOT_GIVEN, extra_body={"chat_template_kwargs": {"enable_thinking": False}},
             reasoning_effort="low")
    check(r.choices[0].message.content == "ok", "kwargs request failed")


def test_real_stream(srv):
    """The model's own answer through the parser (tools given, reasoning split asked): streamed
    with logprobs it adds up to the non-streaming answer, and every token's logprob arrives."""
    args = dict(model=MID, messages=MSGS, tools=TOOLS, max_tokens=16, temperature=0, extra_body=DS)
    r = client(srv).chat.completions.create(**args)
    content, n_lp, finish = "", 0, None
    for ch in client(srv).chat.completions.create(stream=True, logprobs=True, **args):
        if ch.choices:
            content += ch.choices[0].delta.content or ""
            n_lp += len((ch.choices[0].logprobs.content or []) if ch.choices[0].logprobs else [])
            finish = ch.choices[0].finish_reason or finish
    check(content == (r.choices[0].message.content or ""), f"stream {content!r} != {r.choices[0].message.content!r}")
    check(n_lp == r.usage.completion_tokens, f"{n_lp} logprobs for {r.usage.completion_tokens} tokens")
    check(finish == r.choices[0].finish_reason, f"finish {finish} vs {r.choices[0].finish_reason}")


def test_bad_requests(srv):
    path = "/v1/chat/completions"
    base = {"messages": MSGS, "max_tokens": 1}
    for tools, param in [("x", "tools"), ([{"type": "function"}], "tools[0]"),
                         ([{"type": "retrieval", "function": {"name": "a"}}], "tools[0]"),
                         ([{"type": "function", "function": {"name": "bad name!"}}], "tools[0]"),
                         ([{"type": "function", "function": {"name": "a", "parameters": "x"}}], "tools[0]"),
                         ([TOOLS[0], TOOLS[0]], "tools[1]")]:
        expect_error(srv, 400, "invalid_request_error", None, "POST", path, dict(base, tools=tools), param=param)
    for tc in ["sometimes", {"type": "function", "function": {"name": "nope"}}, 3]:
        expect_error(srv, 400, "invalid_request_error", None, "POST", path, dict(base, tools=TOOLS, tool_choice=tc),
                     param="tool_choice")
    expect_error(srv, 400, "invalid_request_error", None, "POST", path,
                 dict(base, messages=MSGS + [{"role": "assistant", "tool_calls": [{"type": "function", "function": {}}]}]),
                 param="messages[1].tool_calls[0]")
    expect_error(srv, 400, "invalid_request_error", None, "POST", path, dict(base, reasoning_effort="max"),
                 param="reasoning_effort")
    expect_error(srv, 400, "invalid_request_error", None, "POST", path, dict(base, chat_template_kwargs=[1]),
                 param="chat_template_kwargs")
    expect_error(srv, 400, "invalid_request_error", None, "POST", path,
                 dict(base, chat_template_kwargs={"messages": []}), param="chat_template_kwargs")
    # tool_choice required is accepted (and enforced: structured_test.py checks the call)
    s, _, data = req(srv, "POST", path, dict(base, tools=TOOLS, tool_choice="required"))
    check(s == 200, f"tool_choice required: {s} {data[:200]!r}")


def test_forced_llama3(srv):
    """tool_choice "required" and a named tool on a Llama 3 template (mkmodel's tiny model: random
    weights, the template of <|start_header_id|> turns, so the answer is read as Llama 3.x JSON
    calls): the grammar alone makes the call, which parses into tool_calls, streamed or not, and
    whose arguments follow the tool's schema. A random model spends what the grammar lets it on
    whitespace (up to 12 bytes at each of the ~10 places between an object's tokens), so the call
    is bounded, not short: one call (parallel_tool_calls false) of these enum / 0-9 arguments is
    under 250 bytes with the fixed text, and 320 tokens always reach its end."""
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}}, "required": ["zone"]}}},
        {"type": "function", "function": {"name": "set_unit", "parameters": {
            "type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "n": {"type": "integer", "minimum": 0,
                                                                             "maximum": 9}},
            "required": ["unit", "n"]}}}]
    schema = {"get_time": lambda a: set(a) == {"zone"} and a["zone"] in ("utc", "local"),
              "set_unit": lambda a: set(a) == {"unit", "n"} and a["unit"] in ("c", "f") and a["n"] in range(10)}
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "tiny.gguf")
        subprocess.run([st.RF, "mkmodel", "--preset", "tiny", "--type", "q8_0", "-o", m], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tiny = Server("--api-key", KEY, "-c", "1024", "-t", "2", model=m)
        try:
            c = client(tiny)
            mid = c.models.list().data[0].id
            for choice, names in [("required", set(schema)), ({"type": "function", "function": {"name": "set_unit"}},
                                                              {"set_unit"})]:
                args = dict(model=mid, messages=MSGS, tools=tools, tool_choice=choice, max_tokens=320, temperature=0,
                            parallel_tool_calls=False)
                r = c.chat.completions.create(**args)
                ch = r.choices[0]
                calls = [(t.function.name, json.loads(t.function.arguments)) for t in ch.message.tool_calls or []]
                print(f"  llama3 template, tool_choice {choice if isinstance(choice, str) else 'named'}: "
                      f"{calls} ({r.usage.completion_tokens} tokens, content {ch.message.content!r})")
                check(ch.finish_reason == "tool_calls" and calls and not ch.message.content, f"{ch}")
                for name, a in calls:
                    check(name in names and schema[name](a), f"call {name} {a}")
                content, _, scalls, finish, _ = chat(tiny, None, stream=True, **args)
                check(finish == "tool_calls" and content == "" and
                      [(x["name"], json.loads(x["arguments"])) for x in scalls] == calls, f"stream {scalls} {finish}")
        finally:
            tiny.stop()


def set_model_id(srv):
    global MID
    MID = client(srv).models.list().data[0].id


def main():
    srv = Server("--api-key", KEY, "-c", "2048", "-t", "2", env={"RF_SERVE_TEST_FAULTS": "1"})
    return server_suite.run(srv, [("tools rendered", test_tools_rendered), ("tool calls parsed", test_parse),
                                  ("tool calls streamed", test_stream),
                                  ("a forced call streamed in pieces", test_forced_stream), ("two-turn tool loop", test_tool_loop),
                                  ("reasoning split", test_reasoning), ("the model's own answer streamed", test_real_stream),
                                  ("bad tool requests", test_bad_requests),
                                  ("tool_choice forced on a Llama 3 template", test_forced_llama3)], setup=set_model_id)


if __name__ == "__main__":
    sys.exit(main())
