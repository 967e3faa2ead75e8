#!/usr/bin/env bash
# serve_messages.sh — `rocmforge serve` on loopback: Anthropic's Messages API (tests/server/messages_test.py, the official `anthropic` SDK).
# Needs models/SmolLM2-135M-Instruct.Q4_1.gguf and the Python package(s) openai anthropic (scripts/setup.sh's
# .venv); skipped (77) when one is missing or the server is not built.
# usage: bash serve_messages.sh <rocmforge> <source-dir>
set -u
. "$2/tests/server/serve_common.sh" "$1" "$2" openai anthropic
cd "$SRC/tests/server" && exec "$PY" messages_test.py "$RF" "$MODEL"
