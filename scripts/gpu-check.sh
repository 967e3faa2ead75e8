#!/usr/bin/env bash
# gpu-check.sh — the GPU checks in one call on a machine WITH a GPU: the GPU test suite (kernels
# against their CPU twins, the whole forward against the CPU engine), compute-sanitizer memcheck
# and racecheck, a short generation under memcheck, a decode-step transfer trace, and optionally
# the GEMV micro-benchmark. Logs go under $OUT (or ./gpu-check-out), all of them also in
# $OUT/logs.tgz; a short table is printed last.
#   scripts/gpu-check.sh --pack [BUILD_DIR]   on the build machine: build with CUDA (RF_SHARED) and
#                                             collect the binaries, librocmforge.so (+ libcmocka)
#                                             into build-gpu-carry/
#   scripts/gpu-check.sh [BIN_DIR]            on the GPU machine (default build-gpu-carry)
# env: TESTS (default: every test_gpu_*), SAN_TESTS / RACE_TESTS (which tests run under memcheck /
#      racecheck), SKIP_SAN=1, BENCH=1 (rf_gpu_bench), RF_MODELS_DIR (real models, default models/),
#      LANES (test lanes run at once, lane i on GPU i mod the GPU count; default every GPU listed, at
#      most 4; more lanes than GPUs share them, for a suite of mostly small kernels: how much
#      wall time that saves on one GPU is not measured yet)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--pack" ]; then
    # RF_SHARED: one librocmforge.so beside small binaries (each static test binary held its own
    # ~9 MB copy of the kernels: the whole suite did not fit one device call's carry)
    B=${2:-$ROOT/build-shared}
    C=$ROOT/build-gpu-carry
    cmake -S "$ROOT" -B "$B" -DRF_CUDA=ON -DRF_CUDA_ARCHS=90 -DRF_SHARED=ON >/dev/null || exit 1
    cmake --build "$B" -j2 || exit 1
    rm -rf "$C" && mkdir -p "$C"
    cp "$B"/tests/test_gpu_* "$B"/rf_gpu_bench "$B"/rf_greedy_trace "$B"/rocmforge "$B"/librocmforge.so "$C"/
    cp -P /usr/lib/x86_64-linux-gnu/libcmocka.so.0* "$C"/
    for l in libmicrohttpd.so.12; do [ -e /usr/lib/x86_64-linux-gnu/$l ] && cp -L /usr/lib/x86_64-linux-gnu/$l "$C"/; done
    strip --strip-debug "$C"/test_gpu_* "$C"/rf_gpu_bench "$C"/rf_greedy_trace "$C"/rocmforge "$C"/librocmforge.so 2>/dev/null
    du -sh "$C"
    exit 0
fi
BIN=$(cd "${1:-build-gpu-carry}" && pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
for d in /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
export RF_CLI=$BIN/rocmforge RF_SYNTH_DIR=${RF_SYNTH_DIR:-/tmp/rf-synth} RF_MODELS_DIR=${RF_MODELS_DIR:-$ROOT/models}
mkdir -p "$RF_SYNTH_DIR"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
ALL=$(cd "$BIN" && ls test_gpu_* | tr '\n' ' ')
TESTS=${TESTS:-$ALL}
SAN_TESTS=${SAN_TESTS:-"test_gpu_batch_ops test_gpu_paged_attention test_gpu_sample test_gpu_attention test_gpu_decode_attention"}
RACE_TESTS=${RACE_TESTS:-"test_gpu_paged_attention test_gpu_sample test_gpu_attention test_gpu_decode_attention"}
declare -A RES MEM RACE
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } \
    >"$OUT/device.txt" 2>&1
# clocks, power limits and throttle reasons: machines of one kind differ by a few percent, and
# this is what to compare when a number from another call disagrees
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE >"$OUT/device-clocks.txt" 2>&1
cat "$OUT/device.txt"
echo "date: $(date -u +%FT%TZ)  seed: ${RF_TEST_SEED:-fresh per test (printed in each log)}"

# LANES lanes (default: every GPU nvidia-smi lists, at most 4) each run every LANES-th test on GPU
# lane mod NGPU, then test_gpu_tp alone with every GPU used (it splits models over the GPUs it
# sees); results go to files because each lane is its own subshell
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
LANES=${LANES:-$(( NGPU > 4 ? 4 : (NGPU < 1 ? 1 : NGPU) ))}
[ "$NGPU" -ge 1 ] || NGPU=1
GPUS=$(( LANES < NGPU ? LANES : NGPU ))   # the GPUs the lanes use: 0 .. GPUS-1
mkdir -p "$OUT/res"
run_test() {  # $1 test, $2 GPU indices (CUDA_VISIBLE_DEVICES)
    local t=$1 start rc r
    start=$(date +%s)
    CUDA_VISIBLE_DEVICES=$2 "$BIN/$t" >"$OUT/$t.log" 2>&1
    rc=$?
    r="rc=$rc ($(($(date +%s) - start))s, GPUs $2)"
    case $rc in 0) r="PASS $r" ;; 77) r="SKIP $r" ;; *) r="FAIL $r" ;; esac
    echo "$r" >"$OUT/res/$t"
}
for lane in $(seq 0 $((LANES - 1))); do
    (j=0; for t in $TESTS; do
        [ "$t" = test_gpu_tp ] && continue
        [ $((j % LANES)) -eq "$lane" ] && run_test "$t" "$((lane % GPUS))"; j=$((j + 1))
    done) &
done
wait
case " $TESTS " in *" test_gpu_tp "*) run_test test_gpu_tp "$(seq -s, 0 $((GPUS - 1)))" ;; esac
for t in $TESTS; do
    RES[$t]=$(cat "$OUT/res/$t" 2>/dev/null || echo "NOT RUN")
    echo "== $t: ${RES[$t]}"
    grep -E "FAILED|ERROR|error|RF_TEST_SEED|PASSED|rel. L2|identical|diverges|memory free|tokens x" "$OUT/$t.log" | head -60
done

# a short generation on the GPU, its per-step transfers, then the same under memcheck
"$BIN/rocmforge" mkmodel --preset tiny --type q4_0 -o "$RF_SYNTH_DIR/check-tiny.gguf" -q >/dev/null 2>&1
RF_GPU_STEP_TRACE=1 "$BIN/rocmforge" run -m "$RF_SYNTH_DIR/check-tiny.gguf" --device gpu -p "Hello there" -n 12 \
    --ignore-eos >"$OUT/trace.log" 2>&1
echo "== decode-step trace (rc=$?):"
grep -E "^\[step|prompt:" "$OUT/trace.log" | head -20

if [ -n "$SAN" ] && [ -z "${SKIP_SAN:-}" ]; then
    # memcheck on GPU 0 and racecheck on the last GPU, at once when there are two
    RG=$((GPUS - 1))
    (
        : >"$OUT/sanitizer-memcheck.log"
        for t in $SAN_TESTS; do
            echo "### $t" >>"$OUT/sanitizer-memcheck.log"
            CUDA_VISIBLE_DEVICES=0 RF_TEST_NO_OOM=1 RF_TEST_QUICK=1 timeout ${SAN_TIMEOUT:-300} "$SAN" --tool memcheck \
                --error-exitcode 99 "$BIN/$t" >>"$OUT/sanitizer-memcheck.log" 2>&1
            echo "rc=$? $(grep -E "ERROR SUMMARY" "$OUT/sanitizer-memcheck.log" | tail -1)" >"$OUT/res/mem.$t"
        done
        echo "### rocmforge run --device gpu (generation)" >>"$OUT/sanitizer-memcheck.log"
        CUDA_VISIBLE_DEVICES=0 timeout ${SAN_TIMEOUT:-300} "$SAN" --tool memcheck --error-exitcode 99 "$BIN/rocmforge" run \
            -m "$RF_SYNTH_DIR/check-tiny.gguf" --device gpu -p "Hello there" -n 24 --ignore-eos \
            >>"$OUT/sanitizer-memcheck.log" 2>&1
        echo "rc=$? $(grep -E "ERROR SUMMARY" "$OUT/sanitizer-memcheck.log" | tail -1)" >"$OUT/res/mem.generation"
    ) &
    [ "$RG" -eq 0 ] && wait
    (
        : >"$OUT/sanitizer-racecheck.log"
        for t in $RACE_TESTS; do
            echo "### $t" >>"$OUT/sanitizer-racecheck.log"
            CUDA_VISIBLE_DEVICES=$RG RF_TEST_NO_OOM=1 RF_TEST_QUICK=1 timeout ${SAN_TIMEOUT:-300} "$SAN" --tool racecheck \
                --error-exitcode 99 "$BIN/$t" >>"$OUT/sanitizer-racecheck.log" 2>&1
            echo "rc=$? $(grep -E "RACECHECK SUMMARY" "$OUT/sanitizer-racecheck.log" | tail -1)" >"$OUT/res/race.$t"
        done
    ) &
    wait
    for t in $SAN_TESTS generation; do MEM[$t]=$(cat "$OUT/res/mem.$t" 2>/dev/null || echo "NOT RUN"); done
    for t in $RACE_TESTS; do RACE[$t]=$(cat "$OUT/res/race.$t" 2>/dev/null || echo "NOT RUN"); done
fi

if [ -n "${BENCH:-}" ]; then
    "$BIN/rf_gpu_bench" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
    echo "== bench rc=$?"
fi

echo
echo "================ summary ================"
printf "%-28s %s\n" test result
for t in $TESTS; do printf "%-28s %s\n" "$t" "${RES[$t]}"; done
for t in "${!MEM[@]}"; do printf "memcheck  %-18s %s\n" "$t" "${MEM[$t]}"; done
for t in "${!RACE[@]}"; do printf "racecheck %-18s %s\n" "$t" "${RACE[$t]}"; done
[ -f "$OUT/bench.log" ] && cat "$OUT/bench.log"
# every log in one file as well: machines lent by the call return only a few files from $OUT. The
# tar is written outside $OUT: one written inside changes the directory it reads, tar exits 1
# ("file changed as we read it") and the archive was left as logs.tgz.part
LT=$(mktemp) && tar -czf "$LT" -C "$OUT" --exclude=./logs.tgz . && chmod 644 "$LT" && mv "$LT" "$OUT/logs.tgz"
exit 0
