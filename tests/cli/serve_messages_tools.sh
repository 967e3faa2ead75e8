#!/usr/bin/env bash
# serve_messages_tools.sh — tool use on /v1/messages and /v1/responses (tests/server/messages_tools_test.py:
# the official `anthropic` and `openai` SDKs against `rocmforge-test serve`, whose test hook replaces
# the answer by a recorded tool call). Skipped (77) without the model, the packages, the server, or
# where the server has no tool calls.
# usage: bash serve_messages_tools.sh <rocmforge> <source-dir>
set -u
RF=$(realpath "$1")
SRC=$(realpath "$2")
"$RF" serve --help 2>&1 | grep -qi "not part of this build\|unknown command" && { echo "SKIP: built without the server"; exit 77; }
TRF=${RF_TEST_CLI:-$(dirname "$RF")/tests/rocmforge-test}
[ -x "$TRF" ] || { echo "FAIL: rocmforge-test not found ($TRF; set RF_TEST_CLI)"; exit 1; }
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "SKIP: $MODEL missing (make models)"; exit 77; }
PY=$SRC/.venv/bin/python
[ -x "$PY" ] || PY=python3
for p in openai anthropic; do
    "$PY" -c "import $p" 2>/dev/null || { echo "SKIP: the $p package is missing ($PY; scripts/setup.sh installs it)"; exit 77; }
done
cd "$SRC/tests/server" && exec "$PY" messages_tools_test.py "$(realpath "$TRF")" "$MODEL"
