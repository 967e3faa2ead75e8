#!/usr/bin/env bash
# bench-cpu.sh — prompt and generation speed of `rocmforge run` on the CPU (docs/perf-cpu.md),
# and, when LLAMA_BENCH points at a llama-bench binary (built outside the repo), the peer's
# numbers on the same file in the same run. Prompt: 64 tokens of text; generation: 64 tokens.
#   scripts/bench-cpu.sh [BUILD_DIR] [MODEL]      env: THREADS="1 2", REPS=3, LLAMA_BENCH=...
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
M=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-"1 2"}
REPS=${REPS:-3}
P="The history of the lighthouse begins with fires lit on hilltops to guide ships at night. Later, towers of stone carried the flames higher, and in time oil lamps and mirrors made the light reach farther across the dark sea, until"
echo "model: $M   date: $(date -u +%F\ %H:%M) UTC   cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)   load: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $THREADS; do
    for r in $(seq 1 "$REPS"); do
        "$B/rocmforge" run -m "$M" -p "$P" -n 64 --ignore-eos -t "$t" 2>&1 >/dev/null | grep '^prompt:' | sed "s/^/rocmforge t=$t: /"
    done
done
if [ -n "${LLAMA_BENCH:-}" ]; then
    "$LLAMA_BENCH" -m "$M" -p 48 -n 64 -t "$(echo $THREADS | tr ' ' ,)" -r "$REPS" 2>/dev/null | grep -E '^\|'
fi
