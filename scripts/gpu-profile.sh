#!/usr/bin/env bash
# gpu-profile.sh — run on a machine WITH a GPU: Nsight Compute over single GEMV configurations of
# rf_gpu_bench (-1 TYPE N_IN N_OUT VARIANT), one kernel each, key metrics printed; full reports
# under $OUT. usage: scripts/gpu-profile.sh BIN_DIR "q4_0 4096 14336 4" ["q8_0 ..."] ...
set -u
BIN=$1; shift
OUT=${OUT:-./gpu-profile-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
for cfg in "$@"; do
    set -- $cfg
    name="$1-$2-$3-v$4"
    "$NCU" -k "${KREGEX:-regex:gemv}" --launch-skip ${SKIP:-30} --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section LaunchStats \
        "$BIN/rf_gpu_bench" -r 3 -1 "$1" "$2" "$3" "$4" >"$OUT/$name.txt" 2>&1
    echo "=== $name"
    grep -E "rf_k_|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Issued Warp Per|No Eligible|Active Warps Per|Eligible Warps|Registers Per|Block Limit|Warp Cycles Per Issued|L1/TEX Hit|Stall|Grid Size|Shared Memory Configuration Size" "$OUT/$name.txt" | head -40
done
