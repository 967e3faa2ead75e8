/* gpu_gemv_f16.cu — the GEMVs of float weights (F16, BF16, and F32: routers, small heads) with
 * f32 x: gemv_f16 (variants 1..3) and, for 2..8 tokens of F16 / BF16, gemv_tc on the tf32 tensor
 * cores (CUDA sm_80+, variants 25 / 26). Twin: rf_ref_matmul (f32 x). */
#include "backend/gpu/gpu_gemv.cuh"

/* gemv_f16: the same product for W in f16, bf16 or f32 (T), x f32 [nt, n_in]; n_in % 8 == 0
 * (f32: % 4) so each row is 16-byte aligned; a 16-byte word holds E = 8 (f32: 4) elements; each thread keeps UNR independent 16-byte loads in flight while
 * it decodes the previous UNR (the first before rf_pdl_wait(): see gemv_q32 on w).
 * launch: RF_GEMV_WARPS warps per block, WPR warps per row. tolerance rel. L2 < 1e-5 vs the
 * f32 reference on the same (already 16-bit) weights. */
template <int T, int NTMAX, int UNR, int WPR>
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_f16(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out) {
    constexpr int G = WPR * RF_WARP_SIZE, GROUPS = RF_GEMV_WARPS / WPR;
    __shared__ float red[RF_GEMV_WARPS][NTMAX];
    const int gl = threadIdx.x % G, grp = threadIdx.x / G;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1;
    constexpr int E = T == RF_TYPE_F32 ? 4 : 8; /* elements per 16-byte word */
    const int64_t n8 = n_in / E;
    const uint4 *wr = (const uint4 *)(w + row * n_in * (16 / E));
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
    /* the loads of the next UNR words are issued before this batch is decoded; the first batch
     * (weights only) before the programmatic-launch wait */
    uint4 nx[UNR];
    auto load = [&](int64_t i0) {
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            if (i < n8) nx[u] = wr[i];
        }
    };
    if (gl < n8) load(gl);
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t i0 = gl; i0 < n8; i0 += (int64_t)G * UNR) {
        uint4 r[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++) r[u] = nx[u];
        if (i0 + (int64_t)G * UNR < n8) load(i0 + (int64_t)G * UNR);
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            if (i >= n8) break;
            const uint32_t wv[4] = {r[u].x, r[u].y, r[u].z, r[u].w};
            float wf[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (T == RF_TYPE_F32) {
                    wf[j] = __uint_as_float(wv[j]);
                } else if (T == RF_TYPE_F16) {
                    wf[2 * j] = rf_h2f_bits((uint16_t)(wv[j] & 0xFFFF));
                    wf[2 * j + 1] = rf_h2f_bits((uint16_t)(wv[j] >> 16));
                } else {
                    wf[2 * j] = __uint_as_float(wv[j] << 16);
                    wf[2 * j + 1] = __uint_as_float(wv[j] & 0xFFFF0000u);
                }
            }
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                if (t >= nt) break;
                const float4 *xp = (const float4 *)(x + t * n_in + i * E);
                const float4 a = xp[0];
                if (E == 4) {
                    acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w;
                } else {
                    const float4 b = xp[1];
                    acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                              wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
                }
            }
        }
    }
    rf_gemv_store<NTMAX, WPR>(y, acc, red, nt, row, n_out, valid);
}

#if !defined(RF_HIP) /* mma.sync: CUDA, sm_80 and up */
/* gemv_tc: gemv_f16 for 2..8 tokens on the tensor cores (mma.m16n8k8, tf32 in, f32 out). The
 * loop kernel reads x again for every token (8 tokens: 16 loads of x per 16-byte word of W) and
 * fell to 22-25% of the bandwidth at 8 tokens; here one mma takes 16 rows by 8 tokens. f16 and
 * bf16 values are exact in tf32; x is split as x = hi + lo, hi its top 10 mantissa bits and lo
 * the rest (exact in f32, truncated to tf32 by the mma: |error| <= 2^-20 |x|), each multiplied
 * in a separate mma, so the product stays near f32 (f16 x would overflow past 65504 and lose
 * small values). A block of NW warps owns 16 rows; warp w takes 32-element chunks w, w + NW, ...
 * of the row, U at a time: lane (g, c) = (lane / 4, lane % 4) loads 16 bytes of rows g and g + 8
 * and 8 floats of token g's x at elements 8c..8c+7 of the chunk (the product is a sum over k, so
 * mma j of the chunk takes elements 8c + 2j and 8c + 2j + 1 as its k = c and c + 4 for both
 * operands). Tokens past nt are zero columns. The warps' sums are added in warp order
 * (rf_mma_tile_store, deterministic). The weights of the first U chunks are requested before
 * rf_pdl_wait().
 * launch: NW warps per block, ceil(n_out / 16) blocks; n_in a multiple of 32; rows past n_out read
 * the last row and are not stored. tolerance as gemv_f16 (rel. L2 < 1e-5). */
template <int T, int NW, int U>
__global__ void __launch_bounds__(NW * 32, 2)
rf_k_gemv_tc(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out) {
    static_assert(RF_WARP_SIZE == 32, "mma.sync: 32-lane warps");
    __shared__ float red[NW][16][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    const int64_t r0 = (int64_t)blockIdx.x * 16;
    const int64_t ra = r0 + g < n_out ? r0 + g : n_out - 1, rb = r0 + g + 8 < n_out ? r0 + g + 8 : n_out - 1;
    const uint4 *wa = (const uint4 *)(w + ra * n_in * 2) + c, *wb = (const uint4 *)(w + rb * n_in * 2) + c;
    const bool xon = g < nt;
    const float4 *xp = (const float4 *)(x + (xon ? g : 0) * n_in) + 2 * c;
    const int nch = (int)(n_in / 32);
    uint4 A[U][2];
    float4 X[U][2];
    auto load_w = [&](int k0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = k0 + u * NW;
            if (k < nch) A[u][0] = wa[4 * k], A[u][1] = wb[4 * k];
        }
    };
    auto load_x = [&](int k0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = k0 + u * NW;
            if (k < nch && xon) X[u][0] = xp[8 * k], X[u][1] = xp[8 * k + 1];
            else X[u][0] = X[u][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    load_w(warp);
    rf_pdl_trigger();
    rf_pdl_wait();
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* rows g, g + 8 by tokens 2c, 2c + 1 */
    /* a 16-bit weight as a tf32 operand (f16 via f32, bf16 by position) */
    auto wv = [](uint32_t word, int h) -> uint32_t {
        const uint16_t b = (uint16_t)(h ? word >> 16 : word & 0xFFFFu);
        if (T == RF_TYPE_F16) return __float_as_uint(rf_h2f_bits(b));
        return (uint32_t)b << 16;
    };
    for (int k0 = warp; k0 < nch; k0 += NW * U) {
        load_x(k0);
        uint4 Ac[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) Ac[u][0] = A[u][0], Ac[u][1] = A[u][1];
        if (k0 + NW * U < nch) load_w(k0 + NW * U);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (k0 + u * NW >= nch) break;
            const uint32_t pa[4] = {Ac[u][0].x, Ac[u][0].y, Ac[u][0].z, Ac[u][0].w};
            const uint32_t pb[4] = {Ac[u][1].x, Ac[u][1].y, Ac[u][1].z, Ac[u][1].w};
            const float xs[8] = {X[u][0].x, X[u][0].y, X[u][0].z, X[u][0].w,
                                 X[u][1].x, X[u][1].y, X[u][1].z, X[u][1].w};
            /* the chunk's 8 mma accumulate apart, then into acc with f32 adds: the tensor cores'
             * own f32 accumulation rounds short, which over a 14336-wide row (448 mma into one
             * fragment) cost ~9e-6 rel. L2 on the H100 */
            float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < 4; j++) { /* elements 8c + 2j, 8c + 2j + 1 */
                const uint32_t a0 = wv(pa[j], 0), a2 = wv(pa[j], 1), a1 = wv(pb[j], 0), a3 = wv(pb[j], 1);
                uint32_t bh[2], bl[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float v = xs[2 * j + e];
                    const float hi = __uint_as_float(__float_as_uint(v) & 0xFFFFE000u);
                    /* inf: hi is inf, lo would be NaN; NaN stays NaN in hi or lo */
                    const float lo = fabsf(v) == INFINITY ? 0.0f : v - hi;
                    bh[e] = __float_as_uint(hi), bl[e] = __float_as_uint(lo);
                }
                const uint32_t af[4] = {a0, a1, a2, a3};
                rf_mma_tf32(cc, af, bh);
                rf_mma_tf32(cc, af, bl);
            }
#pragma unroll
            for (int i = 0; i < 4; i++) acc[i] += cc[i];
        }
    }
    rf_mma_tile_store<NW>(red, acc, y, nt, r0, n_out);
}
#endif

template <int T>
static rf_status rf_launch_f16(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, float *y,
                               const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out) {
    const char *name = "rf_k_gemv_f16";
#define RF_F16(NTM, UNR, WPR) rf_gpu_launch(ctx, name, true, rf_k_gemv_f16<T, NTM, UNR, WPR>, dim3(grid), dim3(threads), 0, y, w, x, nt, n_in, n_out)
    if (nt == 1) {
        if (v == 1) return RF_F16(1, 4, 1);
        if (v == 2) return RF_F16(1, 4, 4);
        return RF_F16(1, 2, 4);
    }
    if (v == 1) return RF_F16(8, 4, 1);
    return RF_F16(8, 4, 4);
#undef RF_F16
}
#if !defined(RF_HIP)
/* gemv_tc (2..8 tokens of F16 / BF16, n_in a multiple of 32): 8 warps per 16 rows, each with 4
 * chunks in flight (121 registers, two blocks per SM; 8 spill). Variant 26 keeps 2 in flight
 * (69 registers, three blocks per SM): 2-8 tokens read 77 / 83 / 84% of the bandwidth at
 * 4096x4096 / 4096->14336 / 14336->4096 against 84 / 84 / 88% with 4 (H100, session 9) */
template <int T>
static rf_status rf_launch_tc(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const float *x, int nt,
                              int64_t n_in, int64_t n_out) {
    constexpr int NW = 8;
    const dim3 grid((unsigned)((n_out + 15) / 16)), block(NW * 32);
    if (ctx->gemv_variant == 26)
        return rf_gpu_launch(ctx, "rf_k_gemv_tc", true, rf_k_gemv_tc<T, NW, 2>, grid, block, 0, y, w, x, nt, n_in, n_out);
    return rf_gpu_launch(ctx, "rf_k_gemv_tc", true, rf_k_gemv_tc<T, NW, 4>, grid, block, 0, y, w, x, nt, n_in, n_out);
}
#endif

rf_status rf_gemv_launch_f16(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, rf_type t,
                             float *y, const uint8_t *w, const float *x, int nt, int64_t n_in,
                             int64_t n_out) {
    if (t == RF_TYPE_F16) return rf_launch_f16<RF_TYPE_F16>(ctx, v, grid, threads, y, w, x, nt, n_in, n_out);
    if (t == RF_TYPE_F32) return rf_launch_f16<RF_TYPE_F32>(ctx, v, grid, threads, y, w, x, nt, n_in, n_out);
    return rf_launch_f16<RF_TYPE_BF16>(ctx, v, grid, threads, y, w, x, nt, n_in, n_out);
}
#if !defined(RF_HIP)
rf_status rf_gemv_launch_tc(rf_gpu_ctx *ctx, rf_type t, float *y, const uint8_t *w, const float *x,
                            int nt, int64_t n_in, int64_t n_out) {
    if (t == RF_TYPE_F16) return rf_launch_tc<RF_TYPE_F16>(ctx, y, w, x, nt, n_in, n_out);
    return rf_launch_tc<RF_TYPE_BF16>(ctx, y, w, x, nt, n_in, n_out);
}
#endif
