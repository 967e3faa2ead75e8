#!/usr/bin/env bash
# serve_harden.sh — `rocmforge serve` against hostile HTTP clients: tests/server/harden_test.py
# (raw sockets on loopback: read timeouts, half-closed connections, per-IP / global connection
# caps with /health answered from the reserve, the buffered-bytes cap, strict framing, lingering
# close of an early 413, the Host / Origin allow-list, JSON content type and CORS; docs/server.md,
# "Security"). ~40 s; needs models/SmolLM2-135M-Instruct.Q4_1.gguf and Linux (127.0.0.2.. as
# other client addresses); skipped (77) when the model is missing or the server is not built.
# usage: bash serve_harden.sh <rocmforge> <source-dir>
set -u
RF=$(realpath "$1")
SRC=$(realpath "$2")
if "$RF" serve --help 2>&1 | grep -qi "not part of this build\|unknown command"; then
    echo "SKIP: rocmforge was built without the server (libmicrohttpd missing)"; exit 77
fi
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "SKIP: $MODEL missing (make models)"; exit 77; }
PY=$SRC/.venv/bin/python
[ -x "$PY" ] || PY=python3
args=("$RF" "$MODEL")
if [ "${RF_TEST_QUICK:-0}" = 1 ] || { command -v nm >/dev/null && nm "$RF" 2>/dev/null | grep -q __asan_init; }; then
    args+=(--quick)
fi
exec "$PY" "$SRC/tests/server/harden_test.py" "${args[@]}"
