#!/usr/bin/env python3
"""gen-chat-goldens.py — renders every tests/data/chat/*.jinja template with Python jinja2 the
way Hugging Face transformers renders chat templates, over a fixed set of conversations, and
writes tests/data/chat/goldens.json (the expected strings, or the expected error).

The C test tests/unit/test_chat_template.c renders the same cases and requires byte-identical
output. Run with the project venv:  .venv/bin/python scripts/gen-chat-goldens.py

Environment as in transformers (utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]),
globals raise_exception (TemplateError) and strftime_now, and a tojson filter that is
json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
strftime_now uses a fixed UTC time (NOW below) so the goldens are stable.
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "chat")
NOW = datetime.datetime(2026, 1, 5, 12, 30, 0, tzinfo=datetime.timezone.utc)

# bos/eos texts as the models' tokenizers define them (what transformers passes)
TOKENS = {
    "SmolLM2": ("<|im_start|>", "<|im_end|>"),
    "SmolLM3": ("", "<|im_end|>"),
    "Qwen": ("", "<|im_end|>"),
    "Llama": ("<|begin_of_text|>", "<|eot_id|>"),
    "Mistral": ("<s>", "</s>"),
    "gemma": ("<bos>", "<eos>"),
    "Phi": ("<s>", "<|endoftext|>"),
}


def tokens_for(name):
    for k, v in TOKENS.items():
        if k.lower() in name.lower():
            return v
    return ("<s>", "</s>")


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag; renders its body unchanged (the index tracking
    transformers adds does not change the text)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render", [])
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    # Not in transformers: llama.cpp's from_json, which DeepSeek V3.2/V4 templates call on
    # OpenAI-style string arguments. ROCmForge supports it; the goldens use json.loads.
    env.filters["from_json"] = json.loads
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city, e.g. \"Paris\".",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]

UNICODE = "Grüße aus Köln 🌍 — 日本語のテキスト"
QUOTES = "He said \"hi\" and 'bye' \\ backslash"
NEWLINES = "Line one\nLine two\n\n  indented line\ttab"
PADDED = "  padded with spaces and a newline  \n"
USPACE = "\u00a0 non-breaking and ideographic spaces \u3000"

CASES = [
    ("single", [{"role": "user", "content": "Hello!"}], None, {}),
    ("system_single", [{"role": "system", "content": "You are a helpful assistant."},
                       {"role": "user", "content": "What is 2+2?"}], None, {}),
    ("multi_turn", [{"role": "user", "content": NEWLINES},
                    {"role": "assistant", "content": QUOTES},
                    {"role": "user", "content": UNICODE},
                    {"role": "assistant", "content": PADDED},
                    {"role": "user", "content": "Last question?"}], None, {}),
    ("system_multi", [{"role": "system", "content": "Be brief.\nAnswer in English."},
                      {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello! How can I help?"},
                      {"role": "user", "content": USPACE}], None, {}),
    ("assistant_last", [{"role": "user", "content": "Tell me a joke."},
                        {"role": "assistant", "content": "Why did the chicken cross the road?"}],
     None, {}),
    ("bad_alternation", [{"role": "user", "content": "one"},
                         {"role": "user", "content": "two"}], None, {}),
    ("empty_content", [{"role": "user", "content": ""}], None, {}),
    ("tools", [{"role": "system", "content": "You can call tools."},
               {"role": "user", "content": "Weather in Paris?"}], TOOLS, {}),
    ("tool_call_roundtrip", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call12345", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "user", "content": "Thanks!"}], TOOLS, {}),
    ("tool_call_json_args", [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "abc123XYZ", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\", \"days\": 3}"}}]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "content": "sunny"}], TOOLS, {}),
    ("tools_in_system", [{"role": "user", "content": "Weather in Oslo?"}], TOOLS,
     {"tools_in_user_message": False}),
    ("builtin_tools", [
        {"role": "system", "content": "Use search."},
        {"role": "user", "content": "Find news."},
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {
            "name": "brave_search", "arguments": {"query": "latest news"}}}]},
        {"role": "ipython", "content": "no results"}], None,
     {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}),
    ("date_string", [{"role": "user", "content": "What day is it?"}], None,
     {"date_string": "01 Feb 2025"}),
    ("no_thinking", [{"role": "user", "content": "Quick answer please."}], None,
     {"enable_thinking": False}),
    ("think_in_system", [{"role": "system", "content": "Reply tersely. /no_think"},
                         {"role": "user", "content": "2+3?"},
                         {"role": "assistant", "content": "\n\n5"},
                         {"role": "user", "content": "and 4+4?"}], None, {}),
    ("list_content", [{"role": "system", "content": [{"type": "text", "text": "System as parts."}]},
                      {"role": "user", "content": [{"type": "image"},
                                                   {"type": "text", "text": "  Describe this.  "}]}],
     None, {}),
]

# Small templates that pin one construct each (whitespace control, scoping, filters, tests,
# methods, literals, printing). Rendered with the same environment; name -> (template, vars).
FEATURES = [
    ("ws_trim_lstrip", "  {% if true %}\n    x\n  {% endif %}\n  {{ 'y' }}  \n{# c #}\nz\n", {}),
    ("ws_dash", "a  \n  {%- if true -%}  \n b \n {%- endif -%}\n  c {{- ' d ' -}} e", {}),
    ("ws_plus", "a\n  {%+ if true +%}\nb\n  {%+ endif %}\nc", {}),
    ("ws_comment_trim", "a\n  {# comment #}\nb {#- x -#}  c\n", {}),
    ("ws_var_no_lstrip", "a\n  {{ 'v' }}\n  {% if 1 %}w{% endif %}\n", {}),
    ("ws_unicode", "a\u00a0\u3000{%- if true -%}\u2003 b \u00a0{%- endif %}\n\u00a0 {% if 1 %}c{% endif %}{{\u00a0'd'\u00a0}}", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", {}),
    ("raw", "{% raw %}{{ not rendered }}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|", {}),
    ("scope_loop", "{% set c = 0 %}{% for i in [1,2,3] %}{% set c = c + i %}{{ c }}{% endfor %}|{{ c }}", {}),
    ("scope_if", "{% if true %}{% set v = 5 %}{% endif %}{{ v }}", {}),
    ("namespace", "{% set ns = namespace(x=false, n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% if i == 2 %}{% set ns.x = true %}{% endif %}{% endfor %}{{ ns.x }} {{ ns.n }}", {}),
    ("loop_vars", "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", {}),
    ("loop_filter_else", "{% for x in [1,2,3,4,5] if x is odd %}{{ x }}{{ loop.last }},{% else %}none{% endfor %}{% for y in [] %}y{% else %}empty{% endfor %}", {}),
    ("loop_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d | items %}{{ k }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": [1, 2]}}),
    ("loop_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_cycle", "{% for i in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}", {}),
    ("set_block", "{% set body %}  inner {{ 1 + 1 }}  {% endset %}[{{ body }}][{{ body | trim }}]", {}),
    ("filter_block", "{% filter upper %}shout {{ 'it' }}{% endfilter %}", {}),
    ("literals", "{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}|{{ (1, 2) }}|{{ (1,) }}|{{ {} }}|{{ 'it\\'s' }}|{{ \"q\\\"\" }}|{{ 'tab\\tnl\\n' }}|{{ '\\u00e9\\x41' }}|{{ 'a' 'b' }}", {}),
    ("numbers", "{{ 1.0 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 3 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 10 / 5 }} {{ 1_000 }} {{ -3 }} {{ 5.5 // 2 }} {{ 123456789.0 }} {{ 1e16 }} {{ 0.0001 }}", {}),
    ("compare_logic", "{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }}{{ 'x' in 'xyz' }}{{ 2 not in [1] }}{{ 'k' in {'k': 1} }}{{ none or 'd' }}{{ 0 and 1 }}{{ not [] }}{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a': 1} }}", {}),
    ("ternary", "{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]{{ ('a' if false else 'b') ~ 'c' }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ [1] }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ 'ab' * 3 }}|{{ undefined_thing ~ 'x' }}", {}),
    ("slicing", "{{ s[1:] }}|{{ s[:-1] }}|{{ s[::-1] }}|{{ s[1:5:2] }}|{{ s[-3:] }}|{{ l[1:] }}|{{ l[::-1] }}|{{ l[-1] }}|{{ s[0] }}|{{ s[-1] }}|{{ l[5:] }}", {"s": "héllo wörld", "l": [1, 2, 3, 4]}),
    ("attr_subscript", "{{ m.role }}|{{ m['content'] }}|{{ m.missing is defined }}|{{ m.nested.k }}|{{ m['nested']['k'] }}|{{ l.0 }}|{{ m.get('role') }}|{{ m.get('nope', 'dflt') }}|{{ m.get('nope') }}", {"m": {"role": "user", "content": "c", "nested": {"k": 1}}, "l": ["z"]}),
    ("tests", "{{ none is none }}{{ 1 is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ x is defined }}{{ x is undefined }}{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 'a' is eq 'a' }}{{ 2 is in [1, 2] }}{{ 'ab' is lower }}{{ 1 is not string }}{{ {} is sequence }}{{ 1 is sameas 1 }}{{ 3 is gt 2 }}", {}),
    ("filters_str", "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'MiXed' | lower }}|{{ 'MiXed' | upper }}|{{ 'hello world' | capitalize }}|{{ 'hello world' | title }}|{{ 'a-b-c' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 42 | string }}|{{ 'ab' | length }}|{{ 'héllo' | length }}|{{ 'abc' | reverse }}|{{ '<&>' | e }}", {}),
    ("filters_list", "{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ [1, 2] | length }}|{{ ['a', 'b'] | join(', ') }}|{{ [1, 2] | join }}|{{ [3, 1, 2] | sort }}|{{ [1, 2, 1] | unique | list }}|{{ [1, 2] | reverse | list }}|{{ [1, 2, 3] | sum }}|{{ [1, 5, 3] | max }}{{ [4, 2] | min }}|{{ 'abc' | list }}|{{ [{'n': 'a'}, {'n': 'b'}] | map(attribute='n') | join }}|{{ [' a ', 'b '] | map('trim') | join('.') }}", {}),
    ("filters_select", "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}|{{ msgs | rejectattr('role', 'eq', 'user') | map(attribute='role') | join }}|{{ [0, 1, 2, ''] | select | list }}|{{ ['a', 'code', 'b'] | reject('equalto', 'code') | join(',') }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ msgs | selectattr('tool') | list | length }}", {"msgs": [{"role": "user"}, {"role": "assistant", "tool": 1}, {"role": "user"}]}),
    ("filters_num", "{{ '42' | int }}{{ '4.7' | int }}{{ 'x' | int }}{{ 'x' | int(7) }}{{ 3.9 | int }}|{{ '2.5' | float }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}", {}),
    ("filters_default", "{{ x | default('dflt') }}|{{ '' | default('e') }}|{{ '' | default('e', true) }}|{{ none | default('n') }}|{{ x | d('short') }}|{{ 0 | default(5, boolean=true) }}", {}),
    ("tojson", "{{ v | tojson }}\n{{ v | tojson(indent=2) }}\n{{ v | tojson(sort_keys=true) }}\n{{ 'é\"\\n\\u2028' | tojson }}\n{{ 'é' | tojson(ensure_ascii=true) }}\n{{ [] | tojson(indent=4) }}{{ {} | tojson }}\n{{ v | tojson(separators=(',', ':')) }}", {"v": {"b": [1, 2.5, None, True, "s"], "a": {"x": {}}, "c": -0.0}}),
    ("str_methods", "{{ ' x '.strip() }}|{{ 'xxy'.lstrip('x') }}|{{ 'yxx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b\\tc\\n'.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}|{{ 'aXb'.upper() }}{{ 'aXb'.lower() }}|{{ 'a.b.c'.replace('.', '/') }}|{{ 'hello'.find('l') }}{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ 'l1\\nl2\\r\\nl3'.splitlines() }}|{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}", {}),
    ("dict_methods", "{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.items() | list }}|{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", {"d": {"x": 1, "y": "z"}}),
    ("strftime", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now is defined }}", {}),
    ("range", "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(5, 0, -2) | list }}{{ range(0) | list }}", {}),
    ("print_values", "{{ none }}|{{ true }}|{{ x }}|{{ {'a': 'it\\'s', 'b': \"q\\\"\"} }}|{{ ['x\\ny'] }}|{{ ns }}", {}),
    ("dict_literal_iteration", "{% set names = {'assistant': ' A:', 'user': ' U:'} %}{% for m in msgs %}{{ names[m.role] }}{{ m.content }}{% endfor %}", {"msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    ("unicode_trim", "[{{ s | trim }}][{{ s.strip() }}][{{ s.split() }}]", {"s": "\u00a0\u3000 mid dle \u2003\n"}),
    ("indent", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'x\\n\\ny' | indent(3, blank=true) }}|{{ 'a\\n' | indent }}", {}),
    ("nested_data", "{% for m in messages %}{% for tc in m.tool_calls %}{{ tc.function.name }}({{ tc.function.arguments | tojson }}){% endfor %}{% endfor %}", {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": [True, None]}}}, {"function": {"name": "g", "arguments": {}}}]}]}),
    ("raise_in_macro", "{% macro check(x) %}{% if x > 1 %}{{ raise_exception('too big: ' ~ x) }}{% endif %}ok{% endmacro %}{{ check(1) }}{{ check(2) }}", {}),
    ("error_type", "{{ 'a' + 1 }}", {}),
    ("error_undefined_attr", "{{ nothing.attr }}", {}),
    ("error_none_iter", "{% for x in none %}{% endfor %}", {}),
    ("generation_tag", "{% for m in msgs %}{% generation %}[{{ m }}]{% endgeneration %}{% endfor %}", {"msgs": ["a", "b"]}),
]


# tests/data/chat/extra: every other template of the peer snapshot, over fewer cases
EXTRA_CASES = [("single", True), ("system_multi", True), ("multi_turn", False),
               ("tool_call_roundtrip", True), ("tool_call_json_args", True)]


# continue_final_message (prefill) cases: rendered without the generation prompt, then cut
# after the final message's content exactly as transformers' apply_chat_template does
CONTINUE_CASES = [
    ("assistant_last", [{"role": "user", "content": "Tell me a joke."},
                        {"role": "assistant", "content": "Why did the chicken cross the road?"}]),
    ("prefill_padded", [{"role": "system", "content": "Answer in JSON."},
                        {"role": "user", "content": "Name a colour."},
                        {"role": "assistant", "content": "  {\"colour\": \""}]),
]


def continue_final(rendered, msgs):
    final = msgs[-1]["content"]
    if isinstance(final, (list, tuple)):
        final = final[-1]["text"]
    try:
        return rendered[: rendered.rindex(final) + len(final)]
    except ValueError:
        final = final.strip()
        return rendered[: rendered.rindex(final) + len(final)]


def render_case(tmpl, fn, cname, msgs, tools, extra, agp, cont=False):
    bos, eos = tokens_for(fn)
    ctx = dict(messages=msgs, tools=tools, add_generation_prompt=agp, bos_token=bos,
               eos_token=eos)
    ctx.update(extra)
    case = {"template": fn, "case": cname, "add_generation_prompt": agp, "bos_token": bos,
            "eos_token": eos, "messages": msgs, "tools": tools, "extra": extra}
    if cont:
        case["continue_final_message"] = True
    try:
        case["expected"] = tmpl.render(**ctx)
        if cont:
            case["expected"] = continue_final(case["expected"], msgs)
        case["error"] = None
    except TemplateError as e:
        case["expected"] = None
        raised = type(e) is TemplateError  # raise_exception() raises this exact type
        case["error"] = {"type": type(e).__name__, "message": str(e), "raised": raised}
    except Exception as e:  # TypeError etc. from the template's own operations
        case["expected"] = None
        case["error"] = {"type": type(e).__name__, "message": str(e), "raised": False}
    return case


# The templates of the models people run in 2026 (Qwen3 / Qwen3-MoE, gpt-oss, Phi-4, Phi-4-mini,
# Mistral Small 3.x / Devstral / Ministral 3, SmolLM3) over conversations that exercise what the
# server sends them: thinking on and off, reasoning in history, tools, parallel tool calls and
# their results, reasoning_effort, developer messages. Written to goldens-2026.json.
TEMPLATES_2026 = [
    "extra/Qwen-Qwen3-0.6B.jinja",  # Qwen3 dense and Qwen3-MoE (30B-A3B, 235B-A22B) ship this template
    "extra/Qwen3-Coder.jinja",
    "extra/openai-gpt-oss-120b.jinja",  # gpt-oss-20b ships the same harmony template
    "microsoft-Phi-4.jinja",
    "microsoft-Phi-4-mini-instruct.jinja",
    "extra/Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "extra/unsloth-mistral-Devstral-Small-2507.jinja",
    "extra/mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
]
TOKENS_2026 = {"gpt-oss": ("<|startoftext|>", "<|return|>"), "Phi-4.jinja": ("<|endoftext|>", "<|im_end|>")}

TOOLS2 = TOOLS + [{"type": "function", "function": {
    "name": "get_time", "description": "Local time in a timezone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}]
CALL_W = {"id": "callA1234", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL_T = {"id": "callB5678", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}}
CALL_S = {"id": "callC9012", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"}}
REASON = "The user wants the weather.\nI should call get_weather."

CASES_2026 = [
    ("think_on", [{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "What is 17 * 23?"}], None, {"enable_thinking": True}),
    ("think_off", [{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": "What is 17 * 23?"}], None, {"enable_thinking": False}),
    ("think_default", [{"role": "user", "content": "Hi there"}], None, {}),
    ("reasoning_history", [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
        {"role": "user", "content": "And 3+3?"}], None, {}),
    ("reasoning_last_turn", [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."}], None, {}),
    ("think_inline_history", [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "<think>\nAny will do.\n</think>\n\nBlue."},
        {"role": "user", "content": "Another?"}], None, {}),
    ("thinking_field", [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "thinking": "Simple arithmetic."},
        {"role": "user", "content": "And 3+3?"}], None, {}),
    ("tools_auto", [{"role": "system", "content": "You can call tools."},
                    {"role": "user", "content": "Weather and time in Paris?"}], TOOLS2, {}),
    ("tools_no_system", [{"role": "user", "content": "Weather in Paris?"}], TOOLS2, {}),
    ("tools_think_off", [{"role": "user", "content": "Weather in Paris?"}], TOOLS2, {"enable_thinking": False}),
    ("tool_loop_parallel", [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL_W, CALL_T]},
        {"role": "tool", "tool_call_id": "callA1234", "name": "get_weather", "content": "{\"temp\": 21}"},
        {"role": "tool", "tool_call_id": "callB5678", "name": "get_time", "content": "14:05"},
        {"role": "assistant", "content": "It is 21 degrees and 14:05 in Paris."},
        {"role": "user", "content": "Thanks!"}], TOOLS2, {}),
    ("tool_result_pending", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL_W]},
        {"role": "tool", "tool_call_id": "callA1234", "name": "get_weather", "content": "sunny, 21 C"}], TOOLS2, {}),
    ("tool_call_with_reasoning", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": REASON, "thinking": REASON, "tool_calls": [CALL_W]},
        {"role": "tool", "tool_call_id": "callA1234", "name": "get_weather", "content": "sunny"}], TOOLS2, {}),
    ("tool_call_string_args", [
        {"role": "user", "content": "Weather in Lyon?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL_S]},
        {"role": "tool", "tool_call_id": "callC9012", "content": "rain"},
        {"role": "user", "content": "Ok."}], TOOLS2, {}),
    ("tool_call_content_and_thinking", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking.", "thinking": "Need the tool.", "tool_calls": [CALL_W]},
        {"role": "tool", "tool_call_id": "callA1234", "content": "sunny"}], TOOLS2, {}),
    ("effort_high", [{"role": "system", "content": "Be exact."},
                     {"role": "user", "content": "Prove that sqrt(2) is irrational."}], None, {"reasoning_effort": "high"}),
    ("effort_low_tools", [{"role": "user", "content": "Weather in Paris?"}], TOOLS2, {"reasoning_effort": "low"}),
    ("developer", [{"role": "developer", "content": "Answer in French."},
                   {"role": "user", "content": "Hello"}], None, {}),
    ("builtin_browser_python", [{"role": "user", "content": "Search the news."}], None,
     {"builtin_tools": ["browser", "python"]}),
    ("phi4mini_system_tools", [{"role": "system", "content": "You are a helpful assistant with tools.",
                                "tools": json.dumps([t["function"] for t in TOOLS2])},
                               {"role": "user", "content": "Weather in Paris?"}], None, {}),
]


def write_2026(env):
    out = {"generator": "scripts/gen-chat-goldens.py (2026 set), Python jinja2 %s" % jinja2.__version__,
           "now_unix": int(NOW.timestamp()), "now": NOW.isoformat(), "cases": []}
    for fn in TEMPLATES_2026:
        tmpl = env.from_string(open(os.path.join(DATA, fn), encoding="utf-8").read())
        for cname, msgs, tools, extra in CASES_2026:
            for agp in (True, False):
                c = render_case(tmpl, fn, cname, msgs, tools, extra, agp)
                for k, (bos, eos) in TOKENS_2026.items():
                    if k in fn:
                        c = render_case(tmpl, fn, cname, msgs, tools, dict(extra, bos_token=bos, eos_token=eos), agp)
                        c["bos_token"], c["eos_token"] = bos, eos
                out["cases"].append(c)
    path = os.path.join(DATA, "goldens-2026.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in out["cases"] if c["error"])
    print("wrote %s: %d cases (%d templates), %d expected errors" % (path, len(out["cases"]), len(TEMPLATES_2026), n_err))


def write_extra(env):
    d = os.path.join(DATA, "extra")
    out = {"generator": "scripts/gen-chat-goldens.py (extra set), Python jinja2 %s"
                        % jinja2.__version__,
           "now_unix": int(NOW.timestamp()), "now": NOW.isoformat(), "cases": []}
    names = sorted(f for f in os.listdir(d) if f.endswith(".jinja"))
    byname = {c[0]: c for c in CASES}
    for fn in names:
        tmpl = env.from_string(open(os.path.join(d, fn), encoding="utf-8").read())
        for cname, agp in EXTRA_CASES:
            _, msgs, tools, extra = byname[cname]
            out["cases"].append(render_case(tmpl, "extra/" + fn, cname, msgs, tools, extra, agp))
    path = os.path.join(DATA, "goldens-extra.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %s: %d cases (%d templates)" % (path, len(out["cases"]), len(names)))


def main():
    env = make_env()
    out = {
        "generator": "scripts/gen-chat-goldens.py with Python jinja2 %s (transformers-style "
                     "environment)" % jinja2.__version__,
        "now_unix": int(NOW.timestamp()),
        "now": NOW.isoformat(),
        "cases": [],
    }
    names = sorted(f for f in os.listdir(DATA) if f.endswith(".jinja"))
    for fn in names:
        src = open(os.path.join(DATA, fn), encoding="utf-8").read()
        tmpl = env.from_string(src)
        for cname, msgs, tools, extra in CASES:
            for agp in (False, True):
                out["cases"].append(render_case(tmpl, fn, cname, msgs, tools, extra, agp))
        for cname, msgs in CONTINUE_CASES:
            out["cases"].append(render_case(tmpl, fn, cname + "+continue", msgs, None, {}, False,
                                            cont=True))
    out["features"] = []
    for fname, src, variables in FEATURES:
        case = {"name": fname, "template": src, "vars": variables}
        try:
            case["expected"] = env.from_string(src).render(**variables)
            case["error"] = None
        except TemplateError as e:
            case["expected"] = None
            case["error"] = {"type": type(e).__name__, "message": str(e),
                             "raised": type(e) is TemplateError}
        except Exception as e:
            case["expected"] = None
            case["error"] = {"type": type(e).__name__, "message": str(e), "raised": False}
        out["features"].append(case)
    path = os.path.join(DATA, "goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in out["cases"] if c["error"])
    print("wrote %s: %d cases (%d templates x (%d conversations x 2 + %d continue_final_message)), "
          "%d expected errors, "
          "%d feature templates" % (path, len(out["cases"]), len(names), len(CASES),
                                    len(CONTINUE_CASES), n_err,
                                    len(out["features"])))
    write_extra(env)
    write_2026(env)


if __name__ == "__main__":
    sys.exit(main())
