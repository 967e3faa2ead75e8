#!/usr/bin/env bash
# serve_embeddings.sh — `rocmforge serve` on loopback: POST /v1/embeddings (tests/server/embeddings_test.py).
# Needs models/SmolLM2-135M-Instruct.Q4_1.gguf and the Python package(s) openai (scripts/setup.sh's
# .venv); skipped (77) when one is missing or the server is not built.
# usage: bash serve_embeddings.sh <rocmforge> <source-dir>
set -u
. "$2/tests/server/serve_common.sh" "$1" "$2" openai
cd "$SRC/tests/server" && exec "$PY" embeddings_test.py "$RF" "$MODEL"
