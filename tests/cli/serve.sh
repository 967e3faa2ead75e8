#!/usr/bin/env bash
# serve.sh — `rocmforge serve` over real HTTP on loopback: the command line here, then
# tests/server/serve_test.py (the official `openai` client, curl and raw sockets against a
# server on a free port: chat and completions, streaming and not, n = 3, stop strings, logprobs,
# every bad input with its status and error shape, 64 concurrent greedy streams equal to each
# alone, a disconnect storm after which every KV block is back in the pool, 503s while loading
# and when the queue is full, a queued request cancelled, SIGTERM).
# Needs models/SmolLM2-135M-Instruct.Q4_1.gguf, curl and the `openai` package in .venv
# (scripts/setup.sh installs it); skipped (77) when one is missing or the server is not built.
# Under the sanitizer build (the binary holds __asan_init, or RF_TEST_QUICK=1) it runs 8
# concurrent streams and fewer tokens: an -O0 ASan build makes a few tokens per second.
# usage: bash serve.sh <rocmforge> <source-dir>
set -u
RF=$(realpath "$1")
SRC=$(realpath "$2")
fail() { echo "FAIL: $*"; exit 1; }

"$RF" serve --help >/tmp/rf-serve-help.$$ 2>&1
rc=$?
if grep -qi "not part of this build\|unknown command" /tmp/rf-serve-help.$$; then
    echo "SKIP: rocmforge was built without the server (libmicrohttpd missing)"; rm -f /tmp/rf-serve-help.$$; exit 77
fi
[ $rc = 0 ] || fail "serve --help exited $rc: $(cat /tmp/rf-serve-help.$$)"
grep -q "usage: rocmforge serve" /tmp/rf-serve-help.$$ || fail "serve --help: $(cat /tmp/rf-serve-help.$$)"
rm -f /tmp/rf-serve-help.$$
out=$("$RF" serve 2>&1); [ $? = 2 ] && grep -q "usage: rocmforge serve" <<<"$out" || fail "serve without -m: $out"
out=$("$RF" serve -m x.gguf --port 70000 2>&1); [ $? = 2 ] && grep -q "port" <<<"$out" || fail "--port 70000: $out"
out=$("$RF" serve -m /nonexistent.gguf --port 0 2>&1); [ $? = 1 ] && grep -q "/nonexistent.gguf" <<<"$out" || fail "missing model: $out"

# a second server on a port a first one holds must fail, not share it (SO_REUSEPORT would let
# it start, the kernel then splitting the connections between the two)
T=$(mktemp -d)
if "$RF" mkmodel --preset tiny --type q8_0 -o "$T/tiny.gguf" >/dev/null 2>&1; then
    "$RF" serve -m "$T/tiny.gguf" --host 127.0.0.1 --port 0 --device cpu 2>"$T/a.log" &
    A=$!
    port=
    for _ in $(seq 1 100); do
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/a.log" | head -1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { kill $A; fail "the first server did not listen: $(cat "$T/a.log")"; }
    out=$(timeout 60 "$RF" serve -m "$T/tiny.gguf" --host 127.0.0.1 --port "$port" --device cpu 2>&1)
    rc=$?
    kill $A; wait $A 2>/dev/null
    [ $rc = 1 ] && grep -q "cannot listen" <<<"$out" || fail "a second server on busy port $port exited $rc: $out"
    echo "ok   a second server on a busy port ($port) is refused: $(grep -m1 'cannot listen' <<<"$out")"
fi
rm -rf "$T"

MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "SKIP: $MODEL missing (make models)"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=$SRC/.venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" -c "import openai" 2>/dev/null || { echo "SKIP: the openai package is missing ($PY; scripts/setup.sh installs it)"; exit 77; }

QUICK=${RF_TEST_QUICK:-0}
if [ "$QUICK" = 0 ] && command -v nm >/dev/null && nm "$RF" 2>/dev/null | grep -q __asan_init; then QUICK=1; fi
# the servers that need a test hook (a load delay, simulated faults) run rocmforge-test
RFT=${RF_TEST_CLI:-$(dirname "$RF")/tests/rocmforge-test}
[ -x "$RFT" ] || fail "rocmforge-test not found ($RFT; set RF_TEST_CLI): the hook tests need it"
args=("$RF" "$MODEL" --hooks-bin "$(realpath "$RFT")")
[ "$QUICK" = 1 ] && args+=(--quick)
exec "$PY" "$SRC/tests/server/serve_test.py" "${args[@]}"
