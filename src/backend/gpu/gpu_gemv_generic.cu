/* gpu_gemv_generic.cu — gemv_generic: the correct path for every other type with a device
 * decoder (IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K, F32, ...) and for shapes the fast kernels do not take. Twin: rf_ref_matmul (f32 x). */
#include "backend/gpu/gpu_gemv.cuh"

/* gemv_generic: any type with a device decoder (rf_dq_elem), element by element; the fallback
 * for formats and shapes the fast kernels do not take. Same launch; tolerance rel. L2 < 1e-5
 * against rf_ref_matmul (f32 arithmetic on exact dequantized values). */
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_generic(float *y, const uint8_t *w, int type, const float *x, int nt, int64_t n_in,
                  int64_t n_out, int64_t row_bytes, int bs, int bb) {
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    const int64_t row = (int64_t)blockIdx.x * RF_GEMV_WARPS + warp;
    if (row >= n_out) return;
    const uint8_t *wr = w + row * row_bytes;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = lane; i < n_in; i += RF_WARP_SIZE) {
        const float wv = rf_dq_elem(type, wr + (i / bs) * bb, (int)(i % bs));
#pragma unroll
        for (int t = 0; t < 8; t++)
            if (t < nt) acc[t] += wv * x[t * n_in + i];
    }
#pragma unroll
    for (int t = 0; t < 8; t++) {
        if (t >= nt) break;
        const float s = rf_warp_sum(acc[t]);
        if (lane == 0) y[t * n_out + row] = s;
    }
}

rf_status rf_gemv_launch_generic(rf_gpu_ctx *ctx, unsigned grid, unsigned threads, rf_type t,
                                 float *y, const uint8_t *w, const float *x, int nt, int64_t n_in,
                                 int64_t n_out, int64_t rb, int bs, int bb) {
    return rf_gpu_launch(ctx, "rf_k_gemv_generic", false, rf_k_gemv_generic, dim3(grid),
                         dim3(threads), 0, y, w, (int)t, x, nt, n_in, n_out, rb, bs, bb);
}
