#!/usr/bin/env bash
# bench-cpu.sh — prompt and generation speed of `rocmforge run` on the CPU (docs/perf-cpu.md),
# and, when LLAMA_BENCH points at a llama-bench binary (built outside the repo), the peer's
# numbers on the same file, interleaved run by run (ours, then llama.cpp's, REPS times per
# thread count) so that both see the same load on a shared machine. Prints every run, then a
# markdown table of medians with the ratios, and the load average before and after.
# Prompt: the text below (46 tokens with SmolLM2's vocabulary; llama-bench -p 48); generation:
# 64 tokens (llama-bench -n 64). llama-bench runs with OMP_WAIT_POLICY=PASSIVE (its threads
# sleep between jobs, as a shared machine wants) unless LLAMA_OMP_WAIT_POLICY says otherwise
# ("unset": OpenMP's default, spin a while then sleep, which is much faster at -t 2 on a quiet
# machine: quote both).
#   scripts/bench-cpu.sh [BUILD_DIR] [MODEL]
#   env: THREADS="1 2", REPS=3, LLAMA_BENCH=..., LLAMA_OMP_WAIT_POLICY=PASSIVE|ACTIVE|unset
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
M=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-"1 2"}
REPS=${REPS:-3}
P="The history of the lighthouse begins with fires lit on hilltops to guide ships at night. Later, towers of stone carried the flames higher, and in time oil lamps and mirrors made the light reach farther across the dark sea, until"
POL=${LLAMA_OMP_WAIT_POLICY:-PASSIVE}
echo "model: $M   date: $(date -u +%F\ %H:%M) UTC   cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)   load: $(cut -d' ' -f1-3 /proc/loadavg)   llama-bench OMP_WAIT_POLICY: $POL"
median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for t in $THREADS; do
    for r in $(seq 1 "$REPS"); do
        line=$("$B/rocmforge" run -m "$M" -p "$P" -n 64 --ignore-eos -t "$t" 2>&1 >/dev/null | grep '^prompt:' || true)
        echo "rocmforge t=$t: $line"
        # prompt: N tokens in X ms (Y tok/s) | generation: 64 tokens in X ms (Y tok/s) ("token" when 1)
        echo "$line" | sed -n 's/.*(\([0-9.]*\) tok\/s) |.*/\1/p' >>"$TMP/rf_pp_$t"
        echo "$line" | sed -n 's/.*generation.*(\([0-9.]*\) tok\/s).*/\1/p' >>"$TMP/rf_tg_$t"
        if [ -n "${LLAMA_BENCH:-}" ]; then
            if [ "$POL" = unset ]; then
                env -u OMP_WAIT_POLICY "$LLAMA_BENCH" -m "$M" -p 48 -n 64 -t "$t" -r 1 -o csv 2>/dev/null >"$TMP/lb.csv" || true
            else
                OMP_WAIT_POLICY=$POL "$LLAMA_BENCH" -m "$M" -p 48 -n 64 -t "$t" -r 1 -o csv 2>/dev/null >"$TMP/lb.csv" || true
            fi
            # csv: header line names the columns; avg_ts is tokens/s, n_prompt / n_gen say which test
            awk -F, -v pp="$TMP/lb_pp_$t" -v tg="$TMP/lb_tg_$t" '
                NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i }; next }
                { gsub(/"/, ""); np = $c["n_prompt"]; ng = $c["n_gen"]; ts = $c["avg_ts"];
                  if (np > 0) print ts >> pp; else if (ng > 0) print ts >> tg;
                  printf "llama.cpp t=%s: %s %s tok/s\n", $c["n_threads"], (np > 0 ? "pp" np : "tg" ng), ts }' "$TMP/lb.csv"
        fi
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| threads | rocmforge prompt tok/s | llama.cpp pp48 | ratio | rocmforge gen tok/s | llama.cpp tg64 | ratio |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for t in $THREADS; do
    rp=$(median <"$TMP/rf_pp_$t"); rg=$(median <"$TMP/rf_tg_$t")
    lp=nan; lg=nan
    [ -f "$TMP/lb_pp_$t" ] && lp=$(median <"$TMP/lb_pp_$t")
    [ -f "$TMP/lb_tg_$t" ] && lg=$(median <"$TMP/lb_tg_$t")
    awk -v t="$t" -v rp="$rp" -v lp="$lp" -v rg="$rg" -v lg="$lg" 'BEGIN {
        printf "| %s | %.1f | %.1f | %s | %.1f | %.1f | %s |\n", t, rp, lp, (lp > 0 ? sprintf("%.2f", rp / lp) : "-"),
               rg, lg, (lg > 0 ? sprintf("%.2f", rg / lg) : "-") }'
done
