#!/usr/bin/env python3
"""gen-chat-goldens.py — renders every tests/data/chat/*.jinja template with Python jinja2 the
way Hugging Face transformers renders chat templates, over a fixed set of conversations, and
writes tests/data/chat/goldens.json (the expected strings, or the expected error).

The C test tests/unit/test_chat_template.c renders the same cases and requires byte-identical
output. Run with the project venv:  .venv/bin/python scripts/gen-chat-goldens.py

Environment as in transformers (utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
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


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
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
        bos, eos = tokens_for(fn)
        for cname, msgs, tools, extra in CASES:
            for agp in (False, True):
                ctx = dict(messages=msgs, tools=tools, add_generation_prompt=agp,
                           bos_token=bos, eos_token=eos)
                ctx.update(extra)
                case = {"template": fn, "case": cname, "add_generation_prompt": agp,
                        "bos_token": bos, "eos_token": eos, "messages": msgs, "tools": tools,
                        "extra": extra}
                try:
                    case["expected"] = tmpl.render(**ctx)
                    case["error"] = None
                except TemplateError as e:
                    case["expected"] = None
                    raised = type(e) is TemplateError  # raise_exception() raises this exact type
                    case["error"] = {"type": type(e).__name__, "message": str(e), "raised": raised}
                except Exception as e:  # TypeError etc. from the template's own operations
                    case["expected"] = None
                    case["error"] = {"type": type(e).__name__, "message": str(e), "raised": False}
                out["cases"].append(case)
    path = os.path.join(DATA, "goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in out["cases"] if c["error"])
    print("wrote %s: %d cases (%d templates x %d conversations x 2), %d expected errors"
          % (path, len(out["cases"]), len(names), len(CASES), n_err))


if __name__ == "__main__":
    sys.exit(main())
