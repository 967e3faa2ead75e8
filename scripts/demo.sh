#!/usr/bin/env bash
# demo.sh — the main job, run by `make demo`: fetch SmolLM2-135M-Instruct (scripts/fetch-models.sh)
# and chat with it once on the CPU. Falls back to a tiny synthetic model when the download is
# not possible (offline), so the demo always shows generation.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
mkdir -p models
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$M" ] && ! bash scripts/fetch-models.sh smollm2 >/dev/null; then
    echo "demo: could not fetch SmolLM2 (offline?); using a tiny synthetic model (random weights)" >&2
    M=models/tiny.gguf
    "$B/rocmforge" mkmodel --preset tiny -o "$M"
fi
echo "== rocmforge run --chat -m $M"
"$B/rocmforge" run -m "$M" --chat -s "You are a helpful assistant. Answer in one sentence." \
    -p "Why is the sky blue?" -n 64
