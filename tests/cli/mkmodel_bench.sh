#!/usr/bin/env bash
# mkmodel_bench.sh — how long `rocmforge mkmodel` takes for the big presets (docs/perf-mkmodel.md).
# Writes multi-GB files, so it only runs when asked: RF_MKMODEL_BENCH=1 (else exit 77 = skipped).
# usage: RF_MKMODEL_BENCH=1 bash mkmodel_bench.sh <rocmforge> <source-dir> [dir for the files]
#   RF_MKMODEL_BENCH_CASES="llama3-8b:q4_0:1 llama3-8b:q4_0:16" overrides the preset:type:threads list
set -u
RF=${1:?rocmforge binary}
if [ "${RF_MKMODEL_BENCH:-0}" != 1 ]; then
    echo "skip: set RF_MKMODEL_BENCH=1 to run the mkmodel benchmark (writes GB-sized files)"
    exit 77
fi
DIR=${3:-${TMPDIR:-/tmp}}
CASES=${RF_MKMODEL_BENCH_CASES:-"llama3-8b:q4_0:1 llama3-8b:q4_0:$(nproc) llama3-8b:q4_k_m:$(nproc)"}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%F)"
for c in $CASES; do
    IFS=: read -r preset type threads <<< "$c"
    f="$DIR/rf_mkbench_$preset-$type.gguf"
    start=$(date +%s.%N)
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f "user %U s, sys %S s, max RSS %M KiB" -o "$f.time" \
            "$RF" mkmodel --preset "$preset" --type "$type" -t "$threads" -q -o "$f" || { echo "FAIL $c"; exit 1; }
        cpu=$(cat "$f.time"); rm -f "$f.time"
    else
        "$RF" mkmodel --preset "$preset" --type "$type" -t "$threads" -q -o "$f" || { echo "FAIL $c"; exit 1; }
        cpu="(no /usr/bin/time)"
    fi
    end=$(date +%s.%N)
    size=$(stat -c %s "$f")
    sum=$(sha256sum "$f" | cut -c1-16)
    printf '%-12s %-7s threads %-3s wall %7.1f s  file %s bytes (%.2f GiB)  sha256 %s  %s\n' \
        "$preset" "$type" "$threads" "$(echo "$end - $start" | bc)" "$size" "$(echo "$size / 1073741824" | bc -l)" "$sum" "$cpu"
    rm -f "$f"
done
