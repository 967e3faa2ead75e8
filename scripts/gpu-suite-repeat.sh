#!/usr/bin/env bash
# gpu-suite-repeat.sh — the GPU test suite N times in a row with fresh seeds, on a machine WITH
# GPUs: each round runs every test_gpu_* binary once, spread over the GPUs (one lane per GPU, each
# with its own RF_SYNTH_DIR: two lanes writing the same synthetic model race), then test_gpu_tp with
# every GPU; RF_TEST_SEED is left unset, so each test picks and prints its own seed. A failure
# keeps its log (the seed is in it: rerun with RF_TEST_SEED=...). Prints a table per test: runs,
# passed, failed, skipped, the slowest run; exit 0 only if nothing failed.
#   scripts/gpu-suite-repeat.sh BIN_DIR N        (logs under $OUT or ./gpu-repeat-out)
# env: TESTS (default: every test_gpu_* in BIN_DIR but test_gpu_tp), GPUS (default: nvidia-smi -L's
#      count, 0 without it: every test then skips), TIMEOUT (seconds a test, default 300)
set -u
BIN=$(cd "${1:?usage: gpu-suite-repeat.sh BIN_DIR N}" && pwd)
N=${2:?usage: gpu-suite-repeat.sh BIN_DIR N}
OUT=${OUT:-./gpu-repeat-out}
TIMEOUT=${TIMEOUT:-300}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for l in "$d"/nvidia/cu*/lib "$d"/nvidia/nccl/lib; do [ -d "$l" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$l"; done
done
export RF_CLI=$BIN/rocmforge NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
unset RF_TEST_SEED
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
GPUS=${GPUS:-0}
TESTS=${TESTS:-$(cd "$BIN" && ls test_gpu_* 2>/dev/null | grep -v '^test_gpu_tp$' | tr '\n' ' ')}
LANES=$((GPUS > 0 ? GPUS : 1))
echo "gpu-suite-repeat: $N rounds of $(echo $TESTS | wc -w) tests over $GPUS GPU(s), logs in $OUT"

# one test run: result line "test rc seconds" appended to $OUT/results
run_one() { # run_one ROUND TEST GPU_LIST
    local r=$1 t=$2 g=$3 log="$OUT/r$1-$2.log" s rc
    s=$(date +%s)
    CUDA_VISIBLE_DEVICES=$g timeout "$TIMEOUT" "$BIN/$t" >"$log" 2>&1
    rc=$?
    echo "$t $rc $(($(date +%s) - s))" >>"$OUT/results"
    case $rc in 0 | 77) rm -f "$log" ;; *) echo "  round $r: $t FAILED (rc $rc, $(grep -m1 RF_TEST_SEED "$log"), log $log)" ;; esac
}
: >"$OUT/results"
for r in $(seq 1 "$N"); do
    start=$(date +%s)
    for lane in $(seq 0 $((LANES - 1))); do
        ( export RF_SYNTH_DIR=/tmp/rf-repeat-$lane; mkdir -p "$RF_SYNTH_DIR"
          j=0
          for t in $TESTS; do
              [ $((j % LANES)) -eq "$lane" ] && run_one "$r" "$t" "$lane"
              j=$((j + 1))
          done ) &
    done
    wait
    if [ -x "$BIN/test_gpu_tp" ]; then
        RF_SYNTH_DIR=/tmp/rf-repeat-tp run_one "$r" test_gpu_tp "$(seq -s, 0 $((LANES - 1)))"
    fi
    echo "round $r done in $(($(date +%s) - start)) s"
done
python3 - "$OUT/results" <<'EOF'
import sys, collections
st = collections.OrderedDict()
for line in open(sys.argv[1]):
    t, rc, s = line.split()
    d = st.setdefault(t, [0, 0, 0, 0, 0])
    d[0] += 1
    d[1 if rc == "0" else 3 if rc == "77" else 2] += 1
    d[4] = max(d[4], int(s))
print("| test | runs | passed | failed | skipped | slowest s |")
print("|---|---:|---:|---:|---:|---:|")
for t, d in st.items():
    print(f"| {t} | {d[0]} | {d[1]} | {d[2]} | {d[3]} | {d[4]} |")
fails = sum(d[2] for d in st.values())
print(f"{fails} failed run(s) of {sum(d[0] for d in st.values())}")
sys.exit(1 if fails else 0)
EOF
