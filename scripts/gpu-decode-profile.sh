#!/usr/bin/env bash
# gpu-decode-profile.sh — where a decode step's time goes, on a GPU machine: Nsight Compute times
# every kernel of a few decode steps of `rocmforge run` (graph nodes profiled one by one, clocks
# and caches left alone: ncu's default flush before each kernel made every short kernel start from
# a cold L2, which a decode step's kernels, reading what the last one wrote, never do), then the kernels are summed by name per step, beside the step time measured
# without the profiler (the difference is launch gaps and dependency waits).
#   scripts/gpu-decode-profile.sh MODEL [BIN_DIR]     (logs under $OUT or ./gpu-check-out)
# env: SKIP (kernels launched before the profiled ones; default: past load and prompt),
#      COUNT (kernels profiled; default 1200), RF_GPU_UNFUSED (passed through)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
M=$1
BIN=$(cd "${2:-build-gpu-carry}" && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
tag=$(basename "$M" .gguf)${RF_GPU_UNFUSED:+-unfused}
# kernels of the load and the prompt step: count them in a run that stops after the prompt
COUNT=${COUNT:-1200}
SKIP=${SKIP:-}
if [ -z "$SKIP" ]; then
    "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
        "$BIN/rocmforge" run -m "$M" --device gpu -p "Hello" -n 1 --ignore-eos >"$OUT/ncu-$tag-prompt.csv" 2>/dev/null
    SKIP=$(grep -c '"gpu__time_duration.sum"' "$OUT/ncu-$tag-prompt.csv")
    SKIP=$((SKIP + 50))
fi
"$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --launch-skip "$SKIP" --launch-count "$COUNT" \
    "$BIN/rocmforge" run -m "$M" --device gpu -p "Hello" -n 64 --ignore-eos >"$OUT/ncu-$tag.csv" 2>"$OUT/ncu-$tag.err"
python3 - "$OUT/ncu-$tag.csv" "$tag" <<'EOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]
ki, vi = hdr.index("Kernel Name"), hdr.index("Metric Value")
tot = collections.Counter(); cnt = collections.Counter()
for r in rows[1:]:
    if r[hdr.index("Metric Name")] != "gpu__time_duration.sum":
        continue
    name = r[ki].split("(")[0].split("<")[0].replace("void ", "")
    tot[name] += float(r[vi].replace(",", "")); cnt[name] += 1
# steps: the sampler kernel ends each step
steps = max(1, cnt.get("rf_k_sample_params", 0) or cnt.get("rf_k_sample", 0) or 1)
s = sum(tot.values())
print(f"{sys.argv[2]}: {sum(cnt.values())} kernels profiled, ~{steps} steps; per step: {s / steps / 1e3:.1f} us of kernels, {sum(cnt.values()) / steps:.0f} launches")
print("| kernel | launches/step | us/step | share |")
print("|---|---:|---:|---:|")
for k, v in tot.most_common(16):
    print(f"| {k} | {cnt[k] / steps:.0f} | {v / steps / 1e3:.1f} | {100 * v / s:.1f}% |")
EOF
