#!/usr/bin/env bash
# demo.sh — the main job, run by `make demo`. Until the engine generates text this writes a
# tiny synthetic model and shows its inspection.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
mkdir -p models
"$B/rocmforge" mkmodel --preset tiny -o models/tiny.gguf
"$B/rocmforge" inspect models/tiny.gguf
