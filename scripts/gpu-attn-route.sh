#!/usr/bin/env bash
# gpu-attn-route.sh — on a GPU machine: which decode attention kernel wins where, the measurement
# behind RF_GPU_DECODE_MMA_MIN / RF_GPU_DECODE_MMA_SHORT (docs/gpu.md, "Routing"). A synthetic
# llama3-8b Q4_0 written there with `rocmforge mkmodel`; for an f16 and a q8_0 cache, three arms
# alternating for ROUNDS rounds: the default rule, the paged kernel below 16,384 keys
# (MMA_SHORT=0) and the decode kernel for every decode call (MMA_MIN=1); one sequence at KV depths
# DEPTHS, then BATCHES sequences of 128-token prompts. Tables of tok/s per arm last; logs under $OUT.
#   scripts/gpu-attn-route.sh BIN_DIR     (BIN_DIR holds rocmforge and librocmforge.so)
# env: DEPTHS (default 0,512,2048,4096,8192), BATCHES (default 1,8,32,64,128,256), ROUNDS (2),
#      PRESET (llama3-8b), TYPE (q4_0), KV (f16 q8_0)
set -u
BIN=$(cd "${1:?usage: gpu-attn-route.sh BIN_DIR}" && pwd)
OUT=${OUT:-./gpu-attn-route-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
R=$BIN/rocmforge
DEPTHS=${DEPTHS:-0,512,2048,4096,8192}
BATCHES=${BATCHES:-1,8,32,64,128,256}
ROUNDS=${ROUNDS:-2}
M=${RF_SYNTH_DIR:-/tmp}/route-${PRESET:-llama3-8b}-${TYPE:-q4_0}.gguf
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"
echo "date: $(date -u +%FT%TZ)  model: ${PRESET:-llama3-8b} ${TYPE:-q4_0}"
[ -f "$M" ] || "$R" mkmodel --preset "${PRESET:-llama3-8b}" --type "${TYPE:-q4_0}" -o "$M" -q >/dev/null ||
    { echo "mkmodel failed"; exit 1; }
arm_env() {
    case $1 in
    default) echo "" ;;
    paged) echo "RF_GPU_DECODE_MMA_SHORT=0" ;;
    decode) echo "RF_GPU_DECODE_MMA_MIN=1" ;;
    esac
}
for kv in ${KV:-f16 q8_0}; do
    for r in $(seq "$ROUNDS"); do
        for arm in default paged decode; do
            # the bench's rows "| tgN @ dD | t/s | ..." and "| tgN x B seqs | t/s | ..." with the arm in front
            env $(arm_env $arm) "$R" bench -m "$M" --device gpu -p 0 -n 32 -r 1 -d "$DEPTHS" -b 0 --kv-type "$kv" \
                2>&1 | grep -E '^\| tg' | sed "s/^/$kv $arm $r /" >>"$OUT/depth.txt"
            env $(arm_env $arm) "$R" bench -m "$M" --device gpu -p 0 -n 64 -r 1 -b "$BATCHES" --kv-type "$kv" \
                2>&1 | grep -E '^\| tg.* seqs' | sed "s/^/$kv $arm $r /" >>"$OUT/batch.txt"
            echo "  $kv $arm round $r done ($(date -u +%T))"
        done
    done
done
# one table per file: rows = test, columns = cache x arm, cells = the rounds' tok/s
for f in depth batch; do
    echo
    echo "## $f (tok/s per round)"
    awk -F'|' '{ split($1, a, " "); key = a[1] " " a[2]; t = $2; gsub(/^ +| +$/, "", t); v = $3; sub(/ ±.*/, "", v);
                 gsub(/ /, "", v); cell[t, key] = (cell[t, key] == "" ? v : cell[t, key] " / " v);
                 if (!(t in seen)) { seen[t] = 1; order[++n] = t } if (!(key in ks)) { ks[key] = 1; keys[++m] = key } }
        END { printf "| test |"; for (j = 1; j <= m; j++) printf " %s |", keys[j]; printf "\n|---|";
              for (j = 1; j <= m; j++) printf "---:|"; printf "\n";
              for (i = 1; i <= n; i++) { printf "| %s |", order[i]; for (j = 1; j <= m; j++) printf " %s |", cell[order[i], keys[j]]; printf "\n" } }' \
        "$OUT/$f.txt"
done
