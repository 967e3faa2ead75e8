#!/usr/bin/env bash
# gguf_python.sh — our GGUF writer and reader against the independent `gguf` Python package:
# a file covering every metadata type (nested arrays included) and 7 tensors is written by
# `test_gguf_write --emit`, then GGUFReader must see exactly the keys, types, values, tensor
# names, shapes, types and bytes that were written, and `rocmforge inspect --json --full` must
# agree with GGUFReader on the same file and on tests/data/gguf/tiny_llama.gguf.
# usage: gguf_python.sh <rocmforge> <source-dir>; exit 77 (skip) without .venv/bin/python + gguf.
set -u
RF=$1
SRC=$2
PY=$SRC/.venv/bin/python
if ! [ -x "$PY" ] || ! "$PY" -c 'import gguf, numpy' 2>/dev/null; then
  echo "skip: $PY with the gguf package is missing (run scripts/setup.sh)"
  exit 77
fi
GEN=$(dirname "$RF")/tests/test_gguf_write
if ! [ -x "$GEN" ]; then echo "error: $GEN not built"; exit 1; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
set -e
"$GEN" --emit "$TMP/all.gguf" "$TMP/all.json"
"$RF" inspect --json --full "$TMP/all.gguf" >"$TMP/all.inspect.json"
"$PY" "$SRC/tests/cli/gguf_python_check.py" "$TMP/all.gguf" --manifest "$TMP/all.json" \
  --inspect "$TMP/all.inspect.json"
F=$SRC/tests/data/gguf/tiny_llama.gguf
"$RF" inspect --json --full "$F" >"$TMP/tiny.inspect.json"
"$PY" "$SRC/tests/cli/gguf_python_check.py" "$F" --inspect "$TMP/tiny.inspect.json"
echo "gguf-py agrees with our writer and reader"
