#!/usr/bin/env bash
# serve_tools.sh — tool calls and reasoning through the official openai SDK against
# `rocmforge-test serve` on loopback (tests/server/tools_test.py): tools rendered, calls parsed
# (streaming and not, malformed and truncated ones as content), a two-turn tool loop, the
# reasoning split, 400s for malformed tool definitions. Needs rocmforge-test ($RF_TEST_CLI: the
# X-RF-Test-Output hook injects recorded answers), models/SmolLM2-135M-Instruct.Q4_1.gguf and
# the `openai` package; skipped (77) when one is missing.
# usage: bash serve_tools.sh <rocmforge> <source-dir>
set -u
RF=$(realpath "$1")
SRC=$(realpath "$2")
"$RF" serve --help 2>&1 | grep -qi "not part of this build\|unknown command" && { echo "SKIP: built without the server"; exit 77; }
TRF=${RF_TEST_CLI:-}
[ -n "$TRF" ] && [ -x "$TRF" ] || { echo "SKIP: rocmforge-test (RF_TEST_CLI) missing"; exit 77; }
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "SKIP: $MODEL missing (make models)"; exit 77; }
PY=$SRC/.venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" -c "import openai" 2>/dev/null || { echo "SKIP: the openai package is missing ($PY)"; exit 77; }
args=("$(realpath "$TRF")" "$MODEL")
[ "${RF_TEST_QUICK:-0}" = 1 ] && args+=(--quick)
cd "$SRC/tests/server" && exec "$PY" tools_test.py "${args[@]}"
