/* gpu_gemv_q32.cu — gemv_q32: the int8-x product for the legacy 32-element formats (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0) in any row layout; variants 1..3, and the only int8-x kernel of the HIP build. Twin: rf_cpu_matmul with test_hooks cpu_act = RF_CPU_ACT_GPU (x rounded as rf_k_quantize_x rounds it). */
#include "backend/gpu/gpu_gemv_dot.cuh"

#if defined(RF_HIP)
#define RF_Q32_WARPS 2 /* wave64: 4 waves of Q8_0 rings would pass the 64 KB of LDS */
#else
#define RF_Q32_WARPS RF_GEMV_WARPS
#endif

/* gemv_q32: y[t, o] = sum_i W[o, i] x[t, i] (+ bias[o] where bias is not NULL: the product's
 * bias in its epilogue, one launch where a bias kernel followed) for W in a 32-element block
 * format T.
 * in: w rows of row_bytes (ggml layout, readable 16 bytes past the end: rf_gpu_alloc pads);
 *     qx int8 [nt, n_in] and dx [nt, n_in/32] from rf_k_quantize_x (GB 1); 1 <= nt <= NTMAX.
 * out: y f32 [nt, n_out]. launch: NW warps per block; a group of WPR warps owns R consecutive
 * rows, warp k of the group taking stages k, k + WPR, ... (more warps per SM hide more latency).
 * A stage is one block per lane and row. Each warp streams its stages through a ring of S
 * shared-memory slots (the stage's bytes, a multiple of 16, plus 16 of slack because 18/20/22/
 * 24/34-byte blocks leave a row start anywhere in a 16-byte word): S stages of aligned 16-byte
 * cp.async copies are in flight while the oldest is decoded. A lane's x (two 16-byte loads and
 * its scale per token, loaded one stage ahead when nt is 1) serves all R rows: x costs more load
 * bandwidth than the weights (32 + 8 bytes per 18-byte Q4_0 block), so sharing it keeps the
 * kernel off the load-store limit. The first S stages are issued before rf_pdl_wait() (w must
 * not be written by work still in flight on the stream).
 * tolerance vs rf_ref_matmul: rel. L2 < 1e-2 (x is quantized to int8 per 32). */
template <int T, int NTMAX, int R, int S, int WPR, int NW>
__global__ void __launch_bounds__(NW * RF_WARP_SIZE)
rf_k_gemv_q32(float *y, const uint8_t *w, const int8_t *qx, const float4 *dx, int nt,
              int64_t n_in, int64_t n_out, int64_t row_bytes, const float *bias) {
    constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : T == RF_TYPE_Q4_1 ? 20 : T == RF_TYPE_Q5_0 ? 22
                     : T == RF_TYPE_Q5_1 ? 24 : 34;
    constexpr int G = RF_WARP_SIZE;                /* lanes = blocks per stage and row */
    static_assert((G * BB) % 16 == 0, "a stage must be whole 16-byte words");
    static_assert(NW % WPR == 0, "whole warp groups per block");
    constexpr int STEP = G * BB / 16;              /* 16-byte words per stage and row */
    constexpr int SU4 = STEP + 1;                  /* plus the slack word */
    constexpr int LPR = (SU4 + G - 1) / G;         /* copies per lane, stage and row */
    __shared__ uint4 ring[NW][S][R][SU4];
    __shared__ float red[WPR > 1 ? NW : 1][R][NTMAX];
    const int lane = threadIdx.x % G, warp = threadIdx.x / G;
    const int wg = warp % WPR; /* this warp's place in its group */
    const int64_t row0 = ((int64_t)blockIdx.x * (NW / WPR) + warp / WPR) * R;
    const int nb = (int)(n_in / RF_QK), nst = (nb + G - 1) / G;
    const uint4 *src[R];
    int nu4[R];
    uint32_t boff[R]; /* byte offset of this lane's block in a slot: shift + lane * BB */
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = row0 + r < n_out ? row0 + r : n_out - 1; /* rows past the end: a
                                                  harmless duplicate, keeps the lanes together */
        const uint8_t *wr = w + row * row_bytes;
        const int shift = (int)((uintptr_t)wr & 15); /* even: w 16-aligned, row_bytes even */
        src[r] = (const uint4 *)(wr - shift);
        nu4[r] = (shift + nb * BB + 15) / 16; /* words covering the row (n_in < 2^31 checked) */
        boff[r] = (uint32_t)(shift + lane * BB);
    }
    auto issue = [&](int k) { /* this warp's k-th stage, into slot k % S */
        const int base = (wg + k * WPR) * STEP;
#pragma unroll
        for (int r = 0; r < R; r++) {
            uint4 *dst = ring[warp][k % S][r];
#pragma unroll
            for (int l = 0; l < LPR; l++) {
                const int idx = l * G + lane;
                if ((LPR == 1 || idx < SU4) && base + idx < nu4[r]) rf_cp_async16(&dst[idx], &src[r][base + idx]);
            }
        }
        rf_cp_async_commit(); /* one group per stage, empty or not: the wait count relies on it */
    };
    const int nk = (nst - wg + WPR - 1) / WPR; /* stages of this warp */
#pragma unroll
    for (int k = 0; k < S; k++) {
        if (k < nk) issue(k);
        else rf_cp_async_commit();
    }
    rf_pdl_trigger();
    rf_pdl_wait();
    float acc[R][NTMAX];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NTMAX; t++) acc[r][t] = 0.0f;
    /* x of token 0 for a block, loaded a stage ahead of its use when NTMAX == 1 */
    int4 nx0 = make_int4(0, 0, 0, 0), nx1 = nx0;
    float4 ndx = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    constexpr bool FS = T == RF_TYPE_Q4_1 || T == RF_TYPE_Q5_1; /* dx records: float4, else float2 */
    auto ldx = [&](int64_t i) -> float4 {
        if (FS) return dx[i];
        const float2 v = ((const float2 *)dx)[i];
        return make_float4(v.x, v.y, 0.0f, 0.0f);
    };
    auto load_x = [&](int bi) {
        if (bi < nb) {
            const int4 *xp = (const int4 *)(qx + (int64_t)bi * RF_QK);
            nx0 = xp[0], nx1 = xp[1], ndx = ldx(bi);
        }
    };
    if (NTMAX == 1) load_x(wg * G + lane);
    for (int k = 0; k < nk; k++) {
        const int bi = (wg + k * WPR) * G + lane;
        int4 x0 = nx0, x1 = nx1;
        float4 dxv = ndx;
        if (NTMAX == 1) load_x(bi + WPR * G);
        rf_cp_async_wait<S - 1>(); /* this lane's copies of stage k have landed */
        RF_SYNCWARP();             /* ... and every lane's are visible */
        if (bi < nb) {
            const uint8_t *slot = (const uint8_t *)ring[warp][k % S];
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                if (t >= nt) break;
                if (NTMAX > 1) {
                    const int4 *xp = (const int4 *)(qx + t * n_in + (int64_t)bi * RF_QK);
                    x0 = xp[0], x1 = xp[1], dxv = ldx((int64_t)t * nb + bi);
                }
                const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                const int sxi = __float_as_int(dxv.y);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t *aw = (const uint32_t *)(slot + r * SU4 * 16 + (boff[r] & ~3u));
                    acc[r][t] += rf_q32_dot<T>(aw, (int)(boff[r] & 3u), xi, dxv.x, sxi, dxv.z);
                }
            }
        }
        RF_SYNCWARP(); /* the slot is read by all lanes before it is refilled */
        if (k + S < nk) issue(k + S);
        else rf_cp_async_commit();
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NTMAX; t++) {
            if (t >= nt) break;
            float v = rf_warp_sum(acc[r][t]);
            if (WPR > 1) {
                if (lane == 0) red[warp][r][t] = v;
            } else if (row0 + r < n_out && lane == 0) {
                y[t * n_out + row0 + r] = bias ? v + bias[row0 + r] : v;
            }
        }
    if (WPR > 1) {
        __syncthreads();
        if (wg == 0 && lane < R * NTMAX) {
            const int r = lane / NTMAX, t = lane % NTMAX;
            float v = 0.0f;
            for (int j = 0; j < WPR; j++) v += red[warp + j][r][t];
            if (t < nt && row0 + r < n_out) y[t * n_out + row0 + r] = bias ? v + bias[row0 + r] : v;
        }
    }
}

template <int T>
static rf_status rf_launch_q32(rf_gpu_ctx *ctx, int v, float *y, const uint8_t *w,
                               const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                               int64_t n_out, int64_t rb, const float *bias) {
    const char *name = "rf_k_gemv_q32";
#if defined(RF_HIP)
    (void)v; /* one configuration: wave64 rings of the larger variants pass the 64 KB of LDS */
    const int nw = RF_Q32_WARPS, rpw = 2, wpr = 2;
#else
    const int nw = RF_Q32_WARPS, rpw = v == 2 ? 2 : 4, wpr = v == 3 ? 2 : 4;
#endif
    const int64_t rows_per_block = nw / wpr * rpw;
    const dim3 grid((unsigned)((n_out + rows_per_block - 1) / rows_per_block)), block(nw * ctx->info.warp_size);
#define RF_Q32(NTM, R, S, WPR) rf_gpu_launch(ctx, name, true, rf_k_gemv_q32<T, NTM, R, S, WPR, RF_Q32_WARPS>, grid, block, 0, y, w, qx, dx, nt, n_in, n_out, rb, bias)
#if defined(RF_HIP)
    return nt == 1 ? RF_Q32(1, 2, 2, 2) : RF_Q32(8, 2, 2, 2);
#else
    if (nt == 1) {
        if (v == 2) return RF_Q32(1, 2, 2, 4);
        if (v == 3) return RF_Q32(1, 4, 2, 2);
        return RF_Q32(1, 4, 2, 4);
    }
    if (v == 2) return RF_Q32(8, 2, 2, 4);
    if (v == 3) return RF_Q32(8, 4, 2, 2);
    return RF_Q32(8, 4, 2, 4);
#endif
#undef RF_Q32
}

rf_status rf_gemv_launch_q32(rf_gpu_ctx *ctx, int v, float *y, const uint8_t *w, rf_type t,
                             const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                             int64_t n_out, int64_t rb, const float *bias) {
    switch (t) {
    case RF_TYPE_Q4_0: return rf_launch_q32<RF_TYPE_Q4_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, bias);
    case RF_TYPE_Q4_1: return rf_launch_q32<RF_TYPE_Q4_1>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, bias);
    case RF_TYPE_Q5_0: return rf_launch_q32<RF_TYPE_Q5_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, bias);
    case RF_TYPE_Q5_1: return rf_launch_q32<RF_TYPE_Q5_1>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, bias);
    default: return rf_launch_q32<RF_TYPE_Q8_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, bias);
    }
}
