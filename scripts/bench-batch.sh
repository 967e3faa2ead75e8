#!/usr/bin/env bash
# bench-batch.sh — aggregate throughput of the batching engine (`rocmforge batch`) at 1/4/16/64
# parallel sequences, and, when LLAMA_BATCHED_BENCH points at llama.cpp's llama-batched-bench
# (built outside the repo), the peer on the same file and thread count, interleaved per batch
# size so both see the same machine load. Shapes as llama-batched-bench -npp 128 -ntg 64: each
# sequence has a distinct ~128-token prompt (the prefix cache is off, so nothing is shared) and
# generates 64 tokens; the step budget holds every prompt at once, so the prompts are processed
# first and generation follows, as in the peer's PP / TG split.
#   scripts/bench-batch.sh [BUILD_DIR] [MODEL]
#   env: NPL="1 4 16 64", THREADS=2, REPS=1, BLOCK=16 (KV block size), DEVICE=cpu,
#        LLAMA_BATCHED_BENCH=..., LLAMA_OMP_WAIT_POLICY=unset|PASSIVE|ACTIVE (default unset)
# Prints each run, then a markdown table of medians with the ratios, and the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
M=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
NPL=${NPL:-"1 4 16 64"}
THREADS=${THREADS:-2}
REPS=${REPS:-1}
BLOCK=${BLOCK:-16}
DEVICE=${DEVICE:-cpu}
POL=${LLAMA_OMP_WAIT_POLICY:-unset}
NPP=128
NTG=64
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
echo "model: $M  date: $(date -u +%F\ %H:%M) UTC  threads: $THREADS  block: $BLOCK  device: $DEVICE  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  load: $(cut -d' ' -f1-3 /proc/loadavg)  llama OMP_WAIT_POLICY: $POL"

# distinct prompts of about NPP tokens: consecutive 95-word windows of the GPL text
WORDS=$(tr -s ' \n\t' ' ' </usr/share/common-licenses/GPL-3)
make_prompts() { # n file
    : >"$2"
    for i in $(seq 0 $(($1 - 1))); do
        echo "$WORDS" | cut -d' ' -f$((i * 37 + 1))-$((i * 37 + 95)) | sed "s/^/Text $i: /" >>"$2"
    done
}

for npl in $NPL; do
    make_prompts "$npl" "$TMP/p$npl.txt"
    budget=$((npl * 200 > 512 ? npl * 200 : 512))
    for r in $(seq 1 "$REPS"); do
        line=$("$B/rocmforge" batch -m "$M" -f "$TMP/p$npl.txt" -n $NTG --ignore-eos --parallel "$npl" -b $budget \
            --ctx 512 --block-size "$BLOCK" --no-prefix-cache -t "$THREADS" --device "$DEVICE" -o jsonl 2>&1 >/dev/null |
            grep '^batch:' || true)
        echo "rocmforge npl=$npl: $line"
        # batch: N prompts | prompt: P tokens in X ms (Y tok/s) | generation: G tokens in X ms (Y tok/s) | total ...
        # generation rate without the first token of each sequence (sampled in the prompt step), as S_TG
        echo "$line" | awk -v n="$npl" '{for (i=1;i<=NF;i++) {if ($i=="prompt:") {pt=$(i+1); pms=$(i+4)}
            if ($i=="generation:") {gt=$(i+1); gms=$(i+4)}}
            if (pms > 0) print pt / (pms / 1000) > "/dev/stderr"; if (gms > 0) print (gt - n) / (gms / 1000)}' \
            >>"$TMP/rf_tg_$npl" 2>>"$TMP/rf_pp_$npl"
        if [ -n "${LLAMA_BATCHED_BENCH:-}" ]; then
            ctx=$((npl * (NPP + NTG) + 256))
            if [ "$POL" = unset ]; then
                env -u OMP_WAIT_POLICY "$LLAMA_BATCHED_BENCH" -m "$M" -c $ctx -b 2048 -ub 512 -npp $NPP -ntg $NTG -npl "$npl" \
                    -t "$THREADS" >"$TMP/lb.txt" 2>/dev/null || true
            else
                OMP_WAIT_POLICY=$POL "$LLAMA_BATCHED_BENCH" -m "$M" -c $ctx -b 2048 -ub 512 -npp $NPP -ntg $NTG -npl "$npl" \
                    -t "$THREADS" >"$TMP/lb.txt" 2>/dev/null || true
            fi
            # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
            awk -F'|' -v pp="$TMP/lb_pp_$npl" -v tg="$TMP/lb_tg_$npl" '$4+0 > 0 && $2+0 > 0 {
                gsub(/ /, ""); print $7 >> pp; print $9 >> tg; printf "llama.cpp npl=%s: S_PP %s t/s, S_TG %s t/s\n", $4, $7, $9 }' "$TMP/lb.txt"
        fi
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| sequences | rocmforge prompt tok/s | llama.cpp S_PP | ratio | rocmforge generation tok/s | llama.cpp S_TG | ratio |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for npl in $NPL; do
    rp=$(median <"$TMP/rf_pp_$npl"); rg=$(median <"$TMP/rf_tg_$npl")
    lp=nan; lg=nan
    [ -f "$TMP/lb_pp_$npl" ] && lp=$(median <"$TMP/lb_pp_$npl")
    [ -f "$TMP/lb_tg_$npl" ] && lg=$(median <"$TMP/lb_tg_$npl")
    awk -v n="$npl" -v rp="$rp" -v lp="$lp" -v rg="$rg" -v lg="$lg" 'BEGIN {
        printf "| %s | %.1f | %.1f | %s | %.1f | %.1f | %s |\n", n, rp, lp, (lp > 0 ? sprintf("%.2f", rp / lp) : "-"),
               rg, lg, (lg > 0 ? sprintf("%.2f", rg / lg) : "-") }'
done
