#!/usr/bin/env bash
# serve_messages_tools.sh — tool use on /v1/messages and /v1/responses (tests/server/messages_tools_test.py:
# the official `anthropic` and `openai` SDKs against `rocmforge-test serve`, whose test hook replaces
# the answer by a recorded tool call). Skipped (77) without the model, the packages, the server, or
# where the server has no tool calls.
# usage: bash serve_messages_tools.sh <rocmforge> <source-dir>
set -u
. "$2/tests/server/serve_common.sh" "$1" "$2" openai anthropic
TRF=${RF_TEST_CLI:-$(dirname "$RF")/tests/rocmforge-test}
[ -x "$TRF" ] || { echo "FAIL: rocmforge-test not found ($TRF; set RF_TEST_CLI)"; exit 1; }
cd "$SRC/tests/server" && exec "$PY" messages_tools_test.py "$(realpath "$TRF")" "$MODEL"
