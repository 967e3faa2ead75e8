#!/usr/bin/env bash
# serve_tokenize.sh — `rocmforge serve` on loopback: /tokenize, /detokenize and model names (tests/server/tokenize_test.py).
# Needs models/SmolLM2-135M-Instruct.Q4_1.gguf and the Python package(s) openai (scripts/setup.sh's
# .venv); skipped (77) when one is missing or the server is not built.
# usage: bash serve_tokenize.sh <rocmforge> <source-dir>
set -u
RF=$(realpath "$1")
SRC=$(realpath "$2")
"$RF" serve --help 2>&1 | grep -qi "not part of this build\|unknown command" && { echo "SKIP: built without the server"; exit 77; }
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "SKIP: $MODEL missing (make models)"; exit 77; }
PY=$SRC/.venv/bin/python
[ -x "$PY" ] || PY=python3
for p in openai; do
    "$PY" -c "import $p" 2>/dev/null || { echo "SKIP: the $p package is missing ($PY; scripts/setup.sh installs it)"; exit 77; }
done
cd "$SRC/tests/server" && exec "$PY" tokenize_test.py "$RF" "$MODEL"
