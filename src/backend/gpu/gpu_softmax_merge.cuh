/* gpu_softmax_merge.cuh — one step of the ordered merge of online-softmax states, on explicit
 * IEEE intrinsics so every kernel that folds states in the same order gets the same bits: the
 * paged-attention kernels (gpu_paged_attention.cu) and the wide-head ones (gpu_attention_wide.cu);
 * and the reduce kernels' batched loads of the states they fold. */
#ifndef RF_GPU_SOFTMAX_MERGE_CUH
#define RF_GPU_SOFTMAX_MERGE_CUH

#include "backend/gpu/gpu_compat.h"

/* merge steps (rf_pa_factors) */
#define RF_PA_SKIP 0 /* the incoming state is empty: nothing changes */
#define RF_PA_SET 1  /* the running state is empty: it becomes the incoming one */
#define RF_PA_COMB 2 /* num = num * fa + a * fb */

/* One step of the ordered merge of softmax states (max M, sum den, numerator num per element):
 * folds the incoming (m, l) into (M, den) and returns how num folds in the incoming numerator
 * (rf_pa_apply with the factors fa, fb). An incoming m == -inf is an empty state (skipped). */
static __device__ __forceinline__ int rf_pa_factors(float &M, float &den, float m, float l,
                                                    float &fa, float &fb) {
    fa = 1.0f, fb = 1.0f;
    if (m == -INFINITY) return RF_PA_SKIP;
    if (M == -INFINITY) {
        M = m, den = l;
        return RF_PA_SET;
    }
    const float Mn = fmaxf(M, m);
    fa = __expf(__fsub_rn(M, Mn));
    fb = __expf(__fsub_rn(m, Mn));
    den = __fmaf_rn(l, fb, __fmul_rn(den, fa));
    M = Mn;
    return RF_PA_COMB;
}
static __device__ __forceinline__ float rf_pa_apply(float num, float a, int mode, float fa, float fb) {
    return mode == RF_PA_COMB ? __fmaf_rn(a, fb, __fmul_rn(num, fa)) : mode == RF_PA_SET ? a : num;
}

/* The partial states of units u0 .. u0 + NB - 1 of output row orow, element d, into mlb / ab (a
 * unit past u1: empty, -inf and 0), the loads issued together: one memory latency per NB units.
 * Unit u's state is number u - ufr of the row's nsp: (m, l) in pml, its D numerators in part. */
template <int NB>
static __device__ __forceinline__ void rf_pa_load_units(float2 (&mlb)[NB], float (&ab)[NB],
                                                        const float *__restrict__ part,
                                                        const float2 *__restrict__ pml, int64_t orow, int nsp,
                                                        int ufr, int u0, int u1, int D, int d) {
#pragma unroll
    for (int i = 0; i < NB; i++) {
        const int64_t si = orow * nsp + (u0 + i - ufr);
        mlb[i] = make_float2(-INFINITY, 0.0f), ab[i] = 0.0f;
        if (u0 + i <= u1) mlb[i] = pml[si], ab[i] = part[si * D + d];
    }
}

#endif
