#!/usr/bin/env bash
# serve_structured.sh — structured output through the official openai SDK against
# `rocmforge serve` on loopback (tests/server/structured_test.py): json_schema answers validate
# for many schemas, seeds and temperatures; json_object; GBNF; tool_choice required / named
# yields a call of the model's own; unsupported schemas are 400s naming the keyword. Needs
# models/SmolLM2-135M-Instruct.Q4_1.gguf and the `openai` package; skipped (77) when missing.
# usage: bash serve_structured.sh <rocmforge> <source-dir>
set -u
. "$2/tests/server/serve_common.sh" "$1" "$2" openai
args=("$RF" "$MODEL")
[ "${RF_TEST_QUICK:-0}" = 1 ] && args+=(--quick)
cd "$SRC/tests/server" && exec "$PY" structured_test.py "${args[@]}"
