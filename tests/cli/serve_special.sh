#!/usr/bin/env bash
# serve_special.sh — special tokens and oversized prompts against `rocmforge serve` on loopback
# (tests/server/special_test.py): chat content never becomes control tokens, completions only
# with parse_special, 4 MiB prompts refused with context_length_exceeded in well under a second
# and /health fast meanwhile. Needs models/SmolLM2-135M-Instruct.Q4_1.gguf and the `openai`
# package (serve_test.py's harness); skipped (77) when one is missing or the server is not built.
# usage: bash serve_special.sh <rocmforge> <source-dir>
set -u
. "$2/tests/server/serve_common.sh" "$1" "$2" openai
QUICK=${RF_TEST_QUICK:-0}
if [ "$QUICK" = 0 ] && command -v nm >/dev/null && nm "$RF" 2>/dev/null | grep -q __asan_init; then QUICK=1; fi
args=("$RF" "$MODEL")
[ "$QUICK" = 1 ] && args+=(--quick)
cd "$SRC/tests/server" && exec "$PY" special_test.py "${args[@]}"
