#!/usr/bin/env bash
# serve_tools.sh — tool calls and reasoning through the official openai SDK against
# `rocmforge-test serve` on loopback (tests/server/tools_test.py): tools rendered, calls parsed
# (streaming and not, malformed and truncated ones as content), a two-turn tool loop, the
# reasoning split, 400s for malformed tool definitions. Needs rocmforge-test ($RF_TEST_CLI: the
# X-RF-Test-Output hook injects recorded answers), models/SmolLM2-135M-Instruct.Q4_1.gguf and
# the `openai` package; skipped (77) when one is missing.
# usage: bash serve_tools.sh <rocmforge> <source-dir>
set -u
. "$2/tests/server/serve_common.sh" "$1" "$2" openai
TRF=${RF_TEST_CLI:-}
[ -n "$TRF" ] && [ -x "$TRF" ] || { echo "SKIP: rocmforge-test (RF_TEST_CLI) missing"; exit 77; }
args=("$(realpath "$TRF")" "$MODEL")
[ "${RF_TEST_QUICK:-0}" = 1 ] && args+=(--quick)
cd "$SRC/tests/server" && exec "$PY" tools_test.py "${args[@]}"
