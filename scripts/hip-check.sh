#!/usr/bin/env bash
# hip-check.sh — compile-check the GPU kernels as HIP for AMD targets (docs/ARCHITECTURE.md §5.1): every
# src/backend/gpu/*.cu with `hipcc -x hip --offload-arch=gfx90a --offload-arch=gfx1030 -c`
# (gfx90a = CDNA2, wave64; gfx1030 = RDNA2, wave32), plus a probe that RF_WARP_SIZE is 64 on the
# first and 32 on the second. No AMD GPU is needed; nothing is run.
#   usage: scripts/hip-check.sh [HIPCC]     exit 0 all compiled, 1 a failure, 77 no hipcc
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HIPCC=${1:-${HIPCC:-$(command -v hipcc || true)}}
if [ -z "$HIPCC" ] || [ ! -x "$HIPCC" ]; then
    echo "hip-check: skipped, hipcc not found (install Debian's hipcc or set HIPCC)"
    exit 77
fi
ARCHS="--offload-arch=gfx90a --offload-arch=gfx1030"
FLAGS="-x hip $ARCHS -O2 -std=c++17 -I$ROOT/include -I$ROOT/src -Wno-unused-parameter"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "hip-check: $($HIPCC --version 2>/dev/null | grep -m1 -i 'HIP version' || echo hipcc) ($HIPCC)"
echo "hip-check: targets gfx90a (wave64) gfx1030 (wave32)"
echo "hip-check: left out: the cuBLAS GEMM path (gpu_gemm.cu compiles its kernels only, gpu_matmul.cu its no-BLAS fallback: Debian"
echo "           ships no hipBLAS; define RF_HAVE_HIPBLAS with hipBLAS installed to build it)"
fail=0
n=0
for f in "$ROOT"/src/backend/gpu/*.cu; do
    n=$((n + 1))
    name=$(basename "$f")
    start=$(date +%s)
    if nice "$HIPCC" $FLAGS -c "$f" -o "$TMP/${name%.cu}.o" >"$TMP/log" 2>&1; then
        warn=$(grep -c "warning:" "$TMP/log")
        printf "  %-24s OK   (%ss, %s warnings)\n" "$name" $(($(date +%s) - start)) "$warn"
    else
        printf "  %-24s FAIL\n" "$name"
        sed 's/^/      /' "$TMP/log" | head -40
        fail=1
    fi
done
# warp-size probe: the device passes must see 64 on gfx90a and 32 on gfx1030
cat >"$TMP/probe.cu" <<'PROBE'
#include "backend/gpu/gpu_compat.h"
#if defined(__HIP_DEVICE_COMPILE__)
#if defined(__gfx90a__)
static_assert(RF_WARP_SIZE == 64, "gfx90a must be wave64");
#elif defined(__gfx1030__)
static_assert(RF_WARP_SIZE == 32, "gfx1030 must be wave32");
#endif
#endif
__global__ void rf_probe(int *o) { o[0] = RF_WARP_SIZE; }
PROBE
if nice "$HIPCC" $FLAGS -c "$TMP/probe.cu" -o "$TMP/probe.o" >"$TMP/log" 2>&1; then
    echo "  warp-size probe          OK   (RF_WARP_SIZE 64 on gfx90a, 32 on gfx1030)"
else
    echo "  warp-size probe          FAIL"
    sed 's/^/      /' "$TMP/log" | head -20
    fail=1
fi
[ $fail = 0 ] && echo "hip-check: all $n files compiled for gfx90a and gfx1030" || echo "hip-check: FAILED"
exit $fail
