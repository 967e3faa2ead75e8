#!/usr/bin/env bash
# serve_structured.sh — structured output through the official openai SDK against
# `rocmforge serve` on loopback (tests/server/structured_test.py): json_schema answers validate
# for many schemas, seeds and temperatures; json_object; GBNF; tool_choice required / named
# yields a call of the model's own; unsupported schemas are 400s naming the keyword. Needs
# models/SmolLM2-135M-Instruct.Q4_1.gguf and the `openai` package; skipped (77) when missing.
# usage: bash serve_structured.sh <rocmforge> <source-dir>
set -u
RF=$(realpath "$1")
SRC=$(realpath "$2")
"$RF" serve --help 2>&1 | grep -qi "not part of this build\|unknown command" && { echo "SKIP: built without the server"; exit 77; }
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "SKIP: $MODEL missing (make models)"; exit 77; }
PY=$SRC/.venv/bin/python
[ -x "$PY" ] || PY=python3
"$PY" -c "import openai" 2>/dev/null || { echo "SKIP: the openai package is missing ($PY)"; exit 77; }
args=("$RF" "$MODEL")
[ "${RF_TEST_QUICK:-0}" = 1 ] && args+=(--quick)
cd "$SRC/tests/server" && exec "$PY" structured_test.py "${args[@]}"
