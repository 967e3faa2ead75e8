#!/usr/bin/env bash
# gpu-long-prompt.sh — long prompts on a GPU machine: test_gpu_long_prompt (plainly and under
# compute-sanitizer racecheck and synccheck), then a synthetic llama3-8b Q4_0 written there with
# `rocmforge mkmodel`: prompts of several thousand tokens through `rocmforge run`, and `bench`
# at KV depths that are not a multiple of the 512-token chunk. Logs under $OUT.
#   scripts/gpu-long-prompt.sh BIN_DIR     (BIN_DIR holds rocmforge, test_gpu_long_prompt, libcmocka)
# env: SKIP_SAN=1 (no compute-sanitizer runs), SAN_TOOLS (default: racecheck synccheck)
set -u
BIN=$(cd "${1:?usage: gpu-long-prompt.sh BIN_DIR}" && pwd)
OUT=${OUT:-./gpu-long-prompt-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:${LD_LIBRARY_PATH:-}"
export RF_CLI=$BIN/rocmforge RF_SYNTH_DIR=${RF_SYNTH_DIR:-/tmp/rf-synth}
mkdir -p "$RF_SYNTH_DIR"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
echo "date: $(date -u +%FT%TZ)"

for t in "$BIN"/test_gpu_long_prompt*; do
    n=$(basename "$t")
    "$t" >"$OUT/$n.log" 2>&1
    echo "== $n rc=$?"
    grep -E "host ahead|prompts, max|FAILED|PASSED|error|differ" "$OUT/$n.log" | head -20
done
if [ -n "$SAN" ] && [ -z "${SKIP_SAN:-}" ]; then
    for tool in ${SAN_TOOLS:-racecheck synccheck}; do
        RF_TEST_QUICK=1 timeout 300 "$SAN" --tool $tool --error-exitcode 99 "$BIN/test_gpu_long_prompt" \
            >"$OUT/san-$tool.log" 2>&1
        echo "== $tool rc=$? $(grep -E "SUMMARY" "$OUT/san-$tool.log" | tail -1)"
    done
fi

M=$RF_SYNTH_DIR/8b-q4_0.gguf
[ -f "$M" ] || "$BIN/rocmforge" mkmodel --preset llama3-8b --type q4_0 -o "$M" -q >"$OUT/mkmodel.log" 2>&1
ls -la "$M"
TXT=/usr/share/common-licenses/GPL-3
[ -f "$TXT" ] || TXT=$BIN/GPL-3 # carried beside the binaries where the machine has none
for bytes in 9000 14000 17000 23000 34000; do
    head -c $bytes "$TXT" >"$OUT/prompt-$bytes.txt"
    "$BIN/rocmforge" run -m "$M" --device gpu --ctx 20480 -f "$OUT/prompt-$bytes.txt" -n 4 --ignore-eos \
        >"$OUT/run-$bytes.log" 2>&1
    echo "== run, $bytes bytes of prompt: rc=$? $(grep -E 'prompt|error' "$OUT/run-$bytes.log" | tail -2 | tr '\n' ' ')"
done
for d in 8000 8192 9000; do
    "$BIN/rocmforge" bench -m "$M" --device gpu -p 0 -n 16 -d $d -b 0 -r 2 >"$OUT/bench-d$d.log" 2>&1
    echo "== bench -d $d: rc=$?"; grep -E "tg|error" "$OUT/bench-d$d.log" | tail -3
done
exit 0
