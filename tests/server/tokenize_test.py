#!/usr/bin/env python3
"""tokenize_test.py — /tokenize and /detokenize (llama-server's shapes) and model names of
`rocmforge serve` on loopback (run by tests/cli/serve_tokenize.sh; reuses serve_test.py's
server harness; SmolLM2 on the CPU):
  - round trips text -> ids -> text (ASCII, accents, CJK, emoji, newlines), the ids' count equal
    to the prompt tokens /v1/completions reports; with_pieces pieces that join to the text;
    parse_special (default true) makes "<|im_end|>" one id, false makes it text; add_special;
  - bad bodies and ids outside the vocabulary are 400s naming the field; the key and the JSON
    content type are required as on the other routes;
  - model names: by default any requested name is served (chat, messages, responses); with
    --strict-model-name and two --alias names, /v1/models lists both, either is served, any
    other is a 404 model_not_found (OpenAI's shape; Anthropic's on /v1/messages).
usage: tokenize_test.py ROCMFORGE MODEL [--quick]
Exit 0 = pass, 1 = fail (the first failed check is printed)."""
import json
import sys

from serve_test import KEY, Server, check, expect_error, req

import server_suite

TEXTS = ["Hello world", "  leading spaces and\ttabs\n\nnew lines", "café naïve résumé", "日本語のテキスト",
         "emoji 🙂🚀 mixed", "x" * 300]


def post(srv, path, body, status=200):
    s, _, data = req(srv, "POST", path, body)
    check(s == status, f"{path} {str(body)[:80]}: {s} {data[:200]!r}")
    return json.loads(data)


def test_round_trip(srv):
    for t in TEXTS:
        ids = post(srv, "/tokenize", {"content": t})["tokens"]
        check(all(isinstance(i, int) for i in ids) and ids, f"{t!r}: ids {ids[:10]}")
        back = post(srv, "/detokenize", {"tokens": ids})["content"]
        check(back == t, f"round trip {t!r} -> {back!r}")
        pieces = post(srv, "/tokenize", {"content": t, "with_pieces": True})["tokens"]
        check([p["id"] for p in pieces] == ids, f"{t!r}: with_pieces ids differ")
        joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
        check(joined.decode() == t, f"{t!r}: pieces join to {joined!r}")
        u = post(srv, "/v1/completions", {"prompt": t, "max_tokens": 1})["usage"]["prompt_tokens"]
        bos = len(post(srv, "/tokenize", {"content": t, "add_special": True})["tokens"]) - len(ids)
        check(bos in (0, 1) and u == len(ids) + bos, f"{t!r}: {len(ids)} ids (+{bos} special), completions counts {u}")
    sp = post(srv, "/tokenize", {"content": "<|im_end|>"})["tokens"]
    plain = post(srv, "/tokenize", {"content": "<|im_end|>", "parse_special": False})["tokens"]
    check(len(sp) == 1 and len(plain) > 1, f"parse_special: {sp} vs {plain}")
    check(post(srv, "/detokenize", {"tokens": sp})["content"] == "<|im_end|>", "special token rendered")
    check(post(srv, "/tokenize", {})["tokens"] == [] and post(srv, "/detokenize", {})["content"] == "", "empty bodies")


def test_errors(srv):
    for path, body, param in [("/tokenize", {"content": 5}, "content"), ("/tokenize", {"content": "x", "with_pieces": 1}, "with_pieces"),
                              ("/tokenize", {"content": "x", "add_special": "no"}, "add_special"),
                              ("/detokenize", {"tokens": "1 2"}, "tokens"), ("/detokenize", {"tokens": [1, -2]}, "tokens"),
                              ("/detokenize", {"tokens": [1, 1.5]}, "tokens"), ("/detokenize", {"tokens": [10 ** 9]}, "tokens")]:
        expect_error(srv, 400, "invalid_request_error", None, "POST", path, body, param=param)
    expect_error(srv, 400, "invalid_request_error", None, "POST", "/tokenize", b"[1]", {"Content-Type": "application/json"})
    expect_error(srv, 401, "authentication_error", "invalid_api_key", "POST", "/tokenize", {"content": "x"}, key=None)
    expect_error(srv, 415, "invalid_request_error", "unsupported_media_type", "POST", "/detokenize", b"{}", {"Content-Type": "text/plain"})
    expect_error(srv, 405, "invalid_request_error", "method_not_allowed", "GET", "/tokenize")


def served(srv, model):
    """Statuses of chat, messages and responses naming `model`."""
    out = []
    for path, body in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/responses", {"input": "hi"})]:
        b = dict(body, model=model, max_tokens=1) if path != "/v1/responses" else dict(body, model=model, max_output_tokens=1)
        s, _, data = req(srv, "POST", path, b)
        out.append((s, json.loads(data)))
    return out


def test_any_name(srv):
    for model in ["gpt-4o", "claude-opus-4-5", "qwen3:8b", ""]:
        res = served(srv, model)
        check(all(s == 200 for s, _ in res), f"model {model!r}: {[s for s, _ in res]}")


def test_strict():
    srv = Server("--api-key", KEY, "-t", "1", "--alias", "smol", "--alias", "claude-local", "--strict-model-name")
    try:
        ids = [m["id"] for m in json.loads(req(srv, "GET", "/v1/models")[2])["data"]]
        check(ids == ["smol", "claude-local"], f"/v1/models lists {ids}")
        for model in ["smol", "claude-local"]:
            check(all(s == 200 for s, _ in served(srv, model)), f"alias {model} not served")
        (s1, j1), (s2, j2), (s3, j3) = served(srv, "gpt-4o")
        check(s1 == 404 and j1["error"]["code"] == "model_not_found" and j1["error"]["type"] == "not_found_error", f"chat {j1}")
        check(s2 == 404 and j2["type"] == "error" and j2["error"]["type"] == "not_found_error", f"messages {j2}")
        check(s3 == 404 and j3["error"]["code"] == "model_not_found", f"responses {j3}")
        srv.stop()
    except BaseException:
        srv.p.kill()
        raise


def main():
    srv = Server("--parallel", "2", "--api-key", KEY, "-t", "2")
    return server_suite.run(srv, [("round trip", test_round_trip), ("errors", test_errors), ("any model name", test_any_name)],
                            after=[("--strict-model-name and --alias", test_strict)])


if __name__ == "__main__":
    sys.exit(main())
