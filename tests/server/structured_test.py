#!/usr/bin/env python3
"""structured_test.py — structured output through the official `openai` SDK against
`rocmforge serve` on SmolLM2 (CPU, loopback; run by tests/cli/serve_structured.sh; serve_test.py's
harness): response_format json_schema answers parse and validate against their schema for many
schemas, seeds and temperatures; json_object answers are JSON objects; llama-server's `grammar`
field, and a grammar that dead-ends (admits no token and not the end) after a prefix: the choice
ends with finish_reason "stop" and a warning on the server's log, streamed or not, n > 1, no hang;
tool_choice "required" and a named function yield a well-formed call of the model's own
(no recorded answers); schemas outside the subset are 400s naming the keyword.
Answers are validated by schema_cases.valid (the schemas are there too): the `jsonschema` package
(with its format checker) when it is installed, and always a strict validator of exactly the
subset the server accepts.
usage: structured_test.py ROCMFORGE MODEL [--quick]
Exit 0 = pass, 1 = fail (the first failed check is printed)."""
import json
import sys

import openai

from serve_test import KEY, Fail, Server, check, expect_error

import server_suite
from schema_cases import SCHEMAS, valid

QUICK = "--quick" in sys.argv
MID = None


def client(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0)


def test_schemas(srv):
    c = client(srv)
    runs = [(0.0, 1)] if QUICK else [(0.0, 1), (0.8, 7), (1.3, 42)]
    n = cut = 0
    for name, sc in SCHEMAS:
        for temp, seed in runs:
            # SmolLM2-135M loops inside strings ("1.1.1.1..."); a mild frequency penalty ends most
            # loops, and an answer cut by max_tokens is counted, not validated (at most 10%)
            r = c.chat.completions.create(
                model=MID, temperature=temp, seed=seed, max_tokens=200, frequency_penalty=0.5,
                messages=[{"role": "user", "content": f"Give an example {name} as JSON."}],
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": sc, "strict": True}})
            ch = r.choices[0]
            text = ch.message.content
            if ch.finish_reason == "length":
                cut += 1
                print(f"  cut by max_tokens: {name} T={temp} seed={seed}: {text[:80]!r}...")
                continue
            check(ch.finish_reason == "stop", f"{name} T={temp}: finish {ch.finish_reason}, text {text!r}")
            try:
                v = json.loads(text)
            except ValueError:
                raise Fail(f"{name} T={temp} seed={seed}: not JSON: {text!r}")
            valid(v, sc)
            n += 1
    print(f"  {n} answers over {len(SCHEMAS)} schemas validate, {cut} cut by max_tokens")
    check(cut * 10 <= n + cut, f"{cut} of {n + cut} answers cut by max_tokens")


def test_json_object_and_stream(srv):
    c = client(srv)
    stops = 0
    for seed in (1, 2, 3):
        r = c.chat.completions.create(model=MID, temperature=0.7, seed=seed, max_tokens=200, frequency_penalty=0.5,
                                      messages=[{"role": "user", "content": "Describe a cat in JSON."}],
                                      response_format={"type": "json_object"})
        t = r.choices[0].message.content
        if r.choices[0].finish_reason == "length":
            continue
        stops += 1
        check(r.choices[0].finish_reason == "stop", f"json_object: finish {r.choices[0].finish_reason}: {t!r}")
        check(isinstance(json.loads(t), dict), f"json_object: {t!r}")
    check(stops >= 2, f"json_object: {3 - stops} of 3 answers cut by max_tokens")
    # streaming: the deltas join into the same valid answer
    sc = SCHEMAS[0][1]
    txt = "".join((ch.choices[0].delta.content or "") for ch in c.chat.completions.create(
        model=MID, temperature=0, max_tokens=120, stream=True, messages=[{"role": "user", "content": "A person?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": sc}}) if ch.choices)
    valid(json.loads(txt), sc)
    # completions route and n > 1: every choice constrained
    r = c.completions.create(model=MID, prompt="List:", max_tokens=80, n=3, temperature=1.0, seed=5,
                             extra_body={"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMAS[3][1]}}})
    check(len(r.choices) == 3, f"n=3: {len(r.choices)} choices")
    for ch in r.choices:
        valid(json.loads(ch.text), SCHEMAS[3][1])
    # llama-server's GBNF field
    r = c.chat.completions.create(model=MID, max_tokens=20, temperature=1.0, seed=3,
                                  messages=[{"role": "user", "content": "Yes or no?"}],
                                  extra_body={"grammar": 'root ::= ("yes" | "no") "!"'})
    check(r.choices[0].message.content in ("yes!", "no!"), f"grammar: {r.choices[0].message.content!r}")


# "a" then "b" then x, which is left-recursive: "a" has a live continuation ("b"), but feeding "b"
# expands x without end, so after "a" no byte (hence no token) is admitted and the state is not
# accepting (the end of generation is not allowed either). SmolLM2's vocabulary has every byte,
# so a dead end has to come from the grammar itself.
DEAD_END = 'root ::= "a" "b" x\nx ::= x'
DEAD_WARN = "the grammar admits no token here"


def test_grammar_dead_end(srv):
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0, timeout=30)
    msgs = [{"role": "user", "content": "Say something."}]
    before = srv.stderr().count(DEAD_WARN)
    r = c.chat.completions.create(model=MID, max_tokens=16, temperature=0, messages=msgs, extra_body={"grammar": DEAD_END})
    ch = r.choices[0]
    check(ch.finish_reason == "stop" and ch.message.content == "a", f"dead end: {ch.finish_reason} {ch.message.content!r}")
    check(r.usage.completion_tokens <= 2, f"dead end: {r.usage.completion_tokens} tokens")
    txt, fin = "", None
    for x in c.chat.completions.create(model=MID, max_tokens=16, temperature=0, messages=msgs, stream=True,
                                       extra_body={"grammar": DEAD_END}):
        if x.choices:
            txt += x.choices[0].delta.content or ""
            fin = x.choices[0].finish_reason or fin
    check(fin == "stop" and txt == "a", f"dead end streamed: {fin} {txt!r}")
    # several rows dead-ending in the same step, sampled
    r = c.completions.create(model=MID, prompt="Letters:", max_tokens=16, n=3, temperature=1.0, seed=4,
                             extra_body={"grammar": DEAD_END})
    check(len(r.choices) == 3 and all(x.finish_reason == "stop" and x.text == "a" for x in r.choices),
          f"dead end n=3: {[(x.finish_reason, x.text) for x in r.choices]}")
    n = srv.stderr().count(DEAD_WARN)
    check(n >= before + 5, f"dead end: {n - before} warnings on the server's log, expected 5 (one a choice)")


def test_unconstrained_unchanged(srv):
    """A constrained request in the batch leaves another request's greedy text unchanged."""
    import threading
    c = client(srv)
    args = dict(model=MID, temperature=0, max_tokens=24, messages=[{"role": "user", "content": "Tell me about Paris."}])
    alone = c.chat.completions.create(**args).choices[0].message.content
    out = {}
    def constrained():
        out["c"] = c.chat.completions.create(model=MID, temperature=0.7, seed=9, max_tokens=60,
                                             messages=[{"role": "user", "content": "JSON please"}],
                                             response_format={"type": "json_object"})
    t = threading.Thread(target=constrained)
    t.start()
    together = c.chat.completions.create(**args).choices[0].message.content
    t.join()
    check(together == alone, f"unconstrained text changed beside a constrained one: {alone!r} vs {together!r}")


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]


def test_tool_choice(srv):
    c = client(srv)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    for seed, temp in ((1, 0.0), (2, 0.9), (3, 1.2)):
        r = c.chat.completions.create(model=MID, messages=msgs, tools=TOOLS, tool_choice="required", max_tokens=120,
                                      temperature=temp, seed=seed, parallel_tool_calls=False)
        ch = r.choices[0]
        check(ch.finish_reason == "tool_calls", f"required: finish {ch.finish_reason}, {ch.message}")
        check(len(ch.message.tool_calls) == 1, f"required, not parallel: {ch.message.tool_calls}")
        tc = ch.message.tool_calls[0]
        check(tc.function.name in ("get_weather", "get_time"), f"required: name {tc.function.name}")
        args = json.loads(tc.function.arguments)
        valid(args, next(t for t in TOOLS if t["function"]["name"] == tc.function.name)["function"]["parameters"])
    r = c.chat.completions.create(model=MID, messages=msgs, tools=TOOLS, max_tokens=120, temperature=0.8, seed=4,
                                  tool_choice={"type": "function", "function": {"name": "get_time"}})
    tcs = r.choices[0].message.tool_calls
    check(tcs and all(t.function.name == "get_time" for t in tcs), f"named: {r.choices[0].message}")
    # streaming: argument deltas assemble into the same call shape
    name, args = None, ""
    for ch in c.chat.completions.create(model=MID, messages=msgs, tools=TOOLS, tool_choice="required", max_tokens=120,
                                        temperature=0, stream=True):
        for tc in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
            name = tc.function.name or name
            args += tc.function.arguments or ""
    check(name in ("get_weather", "get_time"), f"streamed required: name {name}")
    json.loads(args)


def test_bad_schemas(srv):
    body = lambda sc: {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": sc}}}
    for sc, word in [({"type": "string", "pattern": "(?<=a)b"}, "lookaround"),
                     ({"type": "object", "properties": {"d": {"type": "string", "format": "hostname"}}}, "'hostname'"),
                     ({"$ref": "#/$defs/b", "$defs": {"a": {"type": "string"}}}, "'$ref'"),
                     ({"type": "integer", "minimum": 3, "maximum": 2}, "minimum above maximum"),
                     ({"type": "string", "not": {"const": "a"}}, "'not'"),
                     ({"type": "object", "required": ["zz"]}, "'zz'"),
                     ({"type": "array", "maxItems": 100000}, "maxItems")]:
        expect_error(srv, 400, "invalid_request_error", "unsupported_schema", "POST", "/v1/chat/completions", body(sc),
                     param="response_format.json_schema.schema", msg=word)
    expect_error(srv, 400, "invalid_request_error", None, "POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}},
                 param="response_format.type")
    expect_error(srv, 400, "invalid_request_error", "invalid_grammar", "POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= undefined-rule"}, param="grammar")
    # an OpenAI SDK call gets a BadRequestError naming the keyword
    try:
        client(srv).chat.completions.create(model=MID, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                            response_format={"type": "json_schema", "json_schema": {
                                                "name": "x", "schema": {"type": "string", "if": {"maxLength": 3}}}})
        raise Fail("'if' accepted")
    except openai.BadRequestError as x:
        check("'if'" in str(x), f"BadRequestError lacks the keyword: {x}")


def set_model_id(srv):
    global MID
    MID = client(srv).models.list().data[0].id


def main():
    srv = Server("--api-key", KEY, "-c", "2048", "-t", "2", "--parallel", "4")
    return server_suite.run(srv, [("bad schemas are 400s", test_bad_schemas),
                                  ("json_object, streaming, completions n=3, GBNF", test_json_object_and_stream),
                                  ("a grammar's dead end stops the choice", test_grammar_dead_end),
                                  ("unconstrained sequences unchanged", test_unconstrained_unchanged),
                                  ("tool_choice required / named", test_tool_choice),
                                  ("json_schema answers validate", test_schemas)], setup=set_model_id)


if __name__ == "__main__":
    sys.exit(main())
