#!/usr/bin/env bash
# gpu-check.sh — run on a machine WITH a GPU: the GPU test suite, compute-sanitizer memcheck and
# racecheck over it, and the GEMV micro-benchmark. Logs go under $OUT (or ./gpu-check-out), a
# short table is printed last.
#   usage: scripts/gpu-check.sh [BIN_DIR]     (default build-gpu-carry)
# BIN_DIR holds test_gpu_* and rf_gpu_bench built with -DRF_CUDA=ON, plus any shared libraries
# the device lacks (libcmocka.so.0). Build and fill it with scripts/gpu-check.sh --pack.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--pack" ]; then
    # On the build machine: configure, build and collect what the device run needs.
    B=${2:-$ROOT/build-gpu}
    C=$ROOT/build-gpu-carry
    cmake -S "$ROOT" -B "$B" -DRF_CUDA=ON -DRF_CUDA_ARCHS=90 >/dev/null || exit 1
    cmake --build "$B" -j2 --target rf_gpu_bench test_gpu_ops test_gpu_quant test_gpu_attention \
        test_gpu_sample || exit 1
    rm -rf "$C" && mkdir -p "$C"
    cp "$B"/tests/test_gpu_* "$B"/rf_gpu_bench "$C"/
    cp -P /usr/lib/x86_64-linux-gnu/libcmocka.so.0* "$C"/
    du -sh "$C"
    exit 0
fi
BIN=${1:-build-gpu-carry}
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
# cuBLAS may live only in the Python wheels on some images
for d in /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
TESTS="test_gpu_ops test_gpu_quant test_gpu_attention test_gpu_sample"
declare -A RES MEM RACE
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } \
    >"$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
echo "seed: ${RF_TEST_SEED:-fresh per test (printed in each log)}"

for t in $TESTS; do
    start=$(date +%s)
    "$BIN/$t" >"$OUT/$t.log" 2>&1
    rc=$?
    RES[$t]="rc=$rc ($(($(date +%s) - start))s)"
    case $rc in 0) RES[$t]="PASS ${RES[$t]}" ;; 77) RES[$t]="SKIP ${RES[$t]}" ;; *) RES[$t]="FAIL ${RES[$t]}" ;; esac
    echo "== $t: ${RES[$t]}"
    grep -E "FAILED|first bad|error|RF_TEST_SEED|PASSED" "$OUT/$t.log" | head -20
done

if [ -n "$SAN" ] && [ -z "${SKIP_SAN:-}" ]; then
    for tool in memcheck racecheck; do
        : >"$OUT/sanitizer-$tool.log"
        for t in $TESTS; do
            echo "### $t" >>"$OUT/sanitizer-$tool.log"
            RF_TEST_NO_OOM=1 RF_TEST_QUICK=1 timeout ${SAN_TIMEOUT:-360} "$SAN" --tool $tool --error-exitcode 99 "$BIN/$t" \
                >>"$OUT/sanitizer-$tool.log" 2>&1
            rc=$?
            summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-$tool.log" | tail -1)
            [ $rc = 124 ] && summary="timeout after ${SAN_TIMEOUT:-360}s (partial: $summary)"
            if [ $tool = memcheck ]; then MEM[$t]="rc=$rc $summary"; else RACE[$t]="rc=$rc $summary"; fi
        done
    done
else
    for t in $TESTS; do MEM[$t]="not run"; RACE[$t]="not run"; done
fi

"$BIN/rf_gpu_bench" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
echo "== bench rc=$?"

echo
echo "================ summary ================"
printf "%-20s %-22s %-34s %s\n" test result memcheck racecheck
for t in $TESTS; do printf "%-20s %-22s %-34s %s\n" "$t" "${RES[$t]}" "${MEM[$t]}" "${RACE[$t]}"; done
echo
cat "$OUT/bench.log"
