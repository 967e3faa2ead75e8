#!/usr/bin/env bash
# gpu-8b.sh — on a GPU machine: a synthetic llama3-8b Q4_0 from mkmodel (random weights, real
# shapes), 1,000 generated tokens on the GPU with device memory sampled every 200 ms (it must stay
# constant once generation runs), then 64 concurrent sequences through `rocmforge batch`.
#   scripts/gpu-8b.sh [BIN_DIR]   (default build-gpu-carry; logs under $OUT or ./gpu-check-out)
# env: MODEL (reuse a file), TYPE (q4_0), N (1000), PAR (64), GEN (128 tokens per batch prompt)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "${1:-build-gpu-carry}" && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
TYPE=${TYPE:-q4_0}
M=${MODEL:-/tmp/rf-llama3-8b-$TYPE.gguf}
N=${N:-1000}
PAR=${PAR:-64}
GEN=${GEN:-128}
if [ ! -s "$M" ]; then
    start=$(date +%s)
    "$BIN/rocmforge" mkmodel --preset llama3-8b --type "$TYPE" -o "$M" -q || { echo "mkmodel failed"; exit 1; }
    echo "mkmodel llama3-8b $TYPE: $(($(date +%s) - start)) s, $(du -h "$M" | cut -f1)"
fi

# 1,000 tokens, device memory sampled in the background
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$OUT/mem-8b.log" 2>/dev/null &
SMI=$!
t0=$(date +%s%N)
RF_LOG=info "$BIN/rocmforge" run -m "$M" --device gpu -p "Once upon a time" -n "$N" --ignore-eos --ctx 2048 \
    >"$OUT/gen-8b.txt" 2>"$OUT/gen-8b.err"
rc=$?
t1=$(date +%s%N)
kill $SMI 2>/dev/null
wait $SMI 2>/dev/null
echo "== $N-token generation (rc=$rc, $(( (t1 - t0) / 1000000 )) ms wall):"
grep -E "prompt:|engine:|model:|error" "$OUT/gen-8b.err"
# memory while generating: the samples after the peak is first reached (load and warm-up excluded)
awk '{v[NR]=$1} END {mx=0; for(i=1;i<=NR;i++) if(v[i]>mx) mx=v[i];
     first=0; for(i=1;i<=NR;i++) if(v[i]==mx){first=i;break}
     mn=mx; for(i=first;i<=NR;i++) if(v[i]>0 && v[i]<mn) mn=v[i];
     last=NR; while(last>first && v[last]<mx*0.5) last--;
     mn2=mx; for(i=first;i<=last;i++) if(v[i]<mn2) mn2=v[i];
     printf "device memory (MiB, nvidia-smi every 200 ms): %d samples, peak %d first at sample %d; from there until the model was freed: min %d max %d (%s)\n",
            NR, mx, first, mn2, mx, (mn2==mx ? "constant" : "CHANGED")}' "$OUT/mem-8b.log"

# 64 concurrent sequences through the batching engine
P=$OUT/prompts-64.txt
: >"$P"
for i in $(seq 1 "$PAR"); do echo "Story number $i begins in a small town where the people" >>"$P"; done
"$BIN/rocmforge" batch -m "$M" --device gpu -f "$P" -n "$GEN" --ignore-eos --parallel "$PAR" --ctx 1024 -o jsonl \
    >"$OUT/batch-8b.jsonl" 2>"$OUT/batch-8b.err"
rc=$?
echo "== rocmforge batch, $PAR concurrent sequences x $GEN tokens (rc=$rc): $(wc -l <"$OUT/batch-8b.jsonl") results"
grep -E "^batch:|error" "$OUT/batch-8b.err"
python3 -c "
import json,sys
r=[json.loads(l) for l in open('$OUT/batch-8b.jsonl')]
print('finish reasons:', {k: sum(1 for x in r if x['finish_reason']==k) for k in set(x['finish_reason'] for x in r)}, '; n_gen all', set(x['n_gen'] for x in r))
" 2>&1
exit 0
