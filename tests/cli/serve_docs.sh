#!/usr/bin/env bash
# serve_docs.sh — `rocmforge serve` on loopback: every example of docs/server.md run as written
# (tests/server/docs_test.py). Needs models/SmolLM2-135M-Instruct.Q4_1.gguf and the Python packages
# openai and anthropic (scripts/setup.sh's .venv); skipped (77) when one is missing or the server
# is not built.
# usage: bash serve_docs.sh <rocmforge> <source-dir>
set -u
. "$2/tests/server/serve_common.sh" "$1" "$2" openai anthropic
cd "$SRC/tests/server" && exec "$PY" docs_test.py "$RF" "$MODEL"
