/* gpu_rmsnorm.cuh — the row load of the fused RMS-norm kernels that take a residual
 * (gpu_elementwise.cu's rf_k_rmsnorm_v, gpu_gemv_xq.cu's rf_k_rmsnorm_quantize_x): one
 * definition, so both see the same x + res bits (the norm itself: rf_rms_inv, gpu_compat.h). */
#ifndef RF_GPU_RMSNORM_CUH
#define RF_GPU_RMSNORM_CUH

#include "backend/gpu/gpu_compat.h"

/* Block row blockIdx.x of x (xr, n wide) as v[k] = element k * 1024 + threadIdx.x (zeros past n)
 * and w's elements as wv (ones without w); with res (not NULL) v = x + r first, written back to
 * xr (the residual add before the norm, rf_k_add's x + r), r the sum of res's np arrays ps apart
 * (rf_parts_sum; np 1: res itself). */
template <int K>
static __device__ __forceinline__ void rf_rms_load_row(float (&v)[K], float (&wv)[K], float *xr, const float *res,
                                                       int np, int64_t ps, const float *w, int n) {
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = k * 1024 + threadIdx.x;
        v[k] = i < n ? xr[i] : 0.0f;
        wv[k] = w && i < n ? w[i] : 1.0f;
    }
    if (res) {
        const float *rr = res + (int64_t)blockIdx.x * n;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = k * 1024 + threadIdx.x;
            if (i < n) {
                v[k] = v[k] + rf_parts_sum(rr + i, np, ps);
                xr[i] = v[k];
            }
        }
    }
}

#endif
