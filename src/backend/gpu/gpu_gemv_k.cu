/* gpu_gemv_k.cu — the K-quant GEMVs with f32 x (gemv_k for Q4_K / Q5_K / Q6_K, gemv_k45 for Q4_K /
 * Q5_K): the path where the int8-x q32s kernel does not take the rows (HIP, other widths,
 * variants 1..3). Twin: rf_ref_matmul (f32 x). */
#include "backend/gpu/gpu_gemv.cuh"

/* acc[t] += sum_j wq[j] x[t, j] - mterm * sum_j x[t, j] over one 32-element chunk (xc: the chunk
 * in token 0; tokens n_in apart), for t < nt: the K-quant GEMVs' inner product, f32. */
template <int NTMAX>
static __device__ __forceinline__ void rf_chunk_acc(float *acc, const float *wq, float mterm,
                                                    const float *xc, int nt, int64_t n_in) {
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (t >= nt) break;
        const float4 *xp = (const float4 *)(xc + t * n_in);
        float s = 0.0f, sx = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float4 a = xp[j];
            s += wq[4 * j] * a.x + wq[4 * j + 1] * a.y + wq[4 * j + 2] * a.z + wq[4 * j + 3] * a.w;
            sx += a.x + a.y + a.z + a.w;
        }
        acc[t] += s - mterm * sx;
    }
}

/* gemv_k: W in Q4_K / Q5_K / Q6_K (256-element super-blocks), x f32 [nt, n_in]. Each lane takes
 * 32-element chunks (chunk c of block b: sub-block c of Q4_K/Q5_K, or (half c/4, quarter c%4) of
 * Q6_K); consecutive lanes read consecutive chunks, the Q4_K/Q5_K quant bytes with 16-byte
 * loads (those blocks are 144/176 bytes, so 16-byte aligned in 16-byte aligned rows).
 * launch: RF_GEMV_WARPS warps per block, one row per warp. tolerance rel. L2 < 1e-2 (f32 math). */
template <int T, int NTMAX, int WPR>
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_k(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out,
            int64_t row_bytes) {
    constexpr int BB = T == RF_TYPE_Q4_K ? 144 : T == RF_TYPE_Q5_K ? 176 : 210;
    constexpr int G = WPR * RF_WARP_SIZE, GROUPS = RF_GEMV_WARPS / WPR;
    __shared__ float red[RF_GEMV_WARPS][NTMAX];
    const int gl = threadIdx.x % G, grp = threadIdx.x / G;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1; /* keep every thread for the block reduction */
    const int64_t nchunks = n_in / 32;
    const uint8_t *wr = w + row * row_bytes;
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t c = gl; c < nchunks; c += G) {
        const int64_t b = c / 8;
        const int sb = (int)(c % 8);
        const uint8_t *blk = wr + b * BB;
        float wq[32]; /* the chunk's 32 integer quants times the sub-scale, min folded below */
        float mterm = 0.0f;
        if (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
            const uint4 *qp = (const uint4 *)(blk + (T == RF_TYPE_Q4_K ? 16 : 48) + 32 * (sb / 2));
            const uint4 q0 = qp[0], q1 = qp[1];
            const uint32_t qv[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
            uint32_t hv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (T == RF_TYPE_Q5_K) {
                const uint4 h0 = ((const uint4 *)(blk + 16))[0], h1 = ((const uint4 *)(blk + 16))[1];
                hv[0] = h0.x, hv[1] = h0.y, hv[2] = h0.z, hv[3] = h0.w;
                hv[4] = h1.x, hv[5] = h1.y, hv[6] = h1.z, hv[7] = h1.w;
            }
            int sc, m;
            rf_k4_sm(sb, blk + 4, &sc, &m);
            const float d1 = rf_ld_half(blk) * (float)sc;
            mterm = rf_ld_half(blk + 2) * (float)m;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const uint32_t q = (sb & 1) ? (qv[j] >> 4) : qv[j];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    int v = (int)((q >> (8 * k)) & 0xF);
                    if (T == RF_TYPE_Q5_K) v |= (int)(((hv[j] >> (8 * k + sb)) & 1u) << 4);
                    wq[4 * j + k] = d1 * (float)v;
                }
            }
        } else { /* Q6_K: half h = sb/4, quarter k = sb%4, l = 0..31 */
            const int h = sb / 4, k = sb % 4;
            const uint8_t *ql = blk + 64 * h + 32 * (k & 1);
            const uint8_t *qh = blk + 128 + 32 * h;
            const float d = rf_ld_half(blk + 208);
            const float s0 = d * (float)(int8_t)blk[192 + 8 * h + 2 * k];
            const float s1 = d * (float)(int8_t)blk[192 + 8 * h + 2 * k + 1];
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const uint32_t l2 = rf_ld_u16(ql + 2 * j), h2 = rf_ld_u16(qh + 2 * j);
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int l = 2 * j + e;
                    const int lo = (int)((l2 >> (8 * e + (k < 2 ? 0 : 4))) & 0xF);
                    const int hi = (int)((h2 >> (8 * e + 2 * k)) & 3);
                    wq[l] = (l < 16 ? s0 : s1) * (float)((lo | (hi << 4)) - 32);
                }
            }
        }
        rf_chunk_acc<NTMAX>(acc, wq, mterm, x + c * 32, nt, n_in);
    }
    rf_gemv_store<NTMAX, WPR>(y, acc, red, nt, row, n_out, valid);
}

/* gemv_k45: Q4_K / Q5_K, the same contract as gemv_k, with the raw 16-byte words of the next
 * chunk (quants, high bits, the 16-byte header d|dmin|scales) loaded before the current chunk
 * is decoded, so each lane keeps ~80 bytes in flight. tolerance rel. L2 < 1e-2 (f32 math). */
template <int T, int NTMAX, int WPR>
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_k45(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out,
              int64_t row_bytes) {
    constexpr int BB = T == RF_TYPE_Q4_K ? 144 : 176;
    constexpr int QO = T == RF_TYPE_Q4_K ? 16 : 48;
    constexpr int G = WPR * RF_WARP_SIZE, GROUPS = RF_GEMV_WARPS / WPR;
    __shared__ float red[RF_GEMV_WARPS][NTMAX];
    const int gl = threadIdx.x % G, grp = threadIdx.x / G;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1; /* keep every thread for the block reduction */
    const int64_t nchunks = n_in / 32;
    const uint8_t *wr = w + row * row_bytes;
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
    uint4 hd, q0, q1, h0 = make_uint4(0, 0, 0, 0), h1 = make_uint4(0, 0, 0, 0);
    auto fetch = [&](int64_t c) {
        const uint8_t *blk = wr + (c / 8) * BB;
        const int sb = (int)(c % 8);
        hd = *(const uint4 *)blk;
        const uint4 *qp = (const uint4 *)(blk + QO + 32 * (sb / 2));
        q0 = qp[0], q1 = qp[1];
        if (T == RF_TYPE_Q5_K) h0 = ((const uint4 *)(blk + 16))[0], h1 = ((const uint4 *)(blk + 16))[1];
    };
    if (gl < nchunks) fetch(gl); /* weights only: safe before the wait */
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t c = gl; c < nchunks; c += G) {
        const int sb = (int)(c % 8);
        const uint32_t qv[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        const uint32_t hv[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        const uint32_t hw[4] = {hd.x, hd.y, hd.z, hd.w};
        if (c + G < nchunks) fetch(c + G);
        /* byte i of the header without indexing a register array at run time */
        auto hbyte = [&](int i) -> int {
            const uint32_t wv = (i >> 2) == 1 ? hw[1] : (i >> 2) == 2 ? hw[2] : hw[3];
            return (int)((wv >> (8 * (i & 3))) & 0xFF);
        };
        int sc, m; /* rf_k4_sm on scales = header bytes 4..15 */
        if (sb < 4) {
            sc = hbyte(4 + sb) & 63;
            m = hbyte(8 + sb) & 63;
        } else {
            sc = (hbyte(8 + sb) & 0xF) | ((hbyte(sb) >> 6) << 4);
            m = (hbyte(8 + sb) >> 4) | ((hbyte(4 + sb) >> 6) << 4);
        }
        const float d1 = rf_h2f_bits((uint16_t)(hw[0] & 0xFFFF)) * (float)sc;
        const float mterm = rf_h2f_bits((uint16_t)(hw[0] >> 16)) * (float)m;
        float wq[32];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint32_t q = (sb & 1) ? (qv[j] >> 4) : qv[j];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                int v = (int)((q >> (8 * k)) & 0xF);
                if (T == RF_TYPE_Q5_K) v |= (int)(((hv[j] >> (8 * k + sb)) & 1u) << 4);
                wq[4 * j + k] = d1 * (float)v;
            }
        }
        rf_chunk_acc<NTMAX>(acc, wq, mterm, x + c * 32, nt, n_in);
    }
    rf_gemv_store<NTMAX, WPR>(y, acc, red, nt, row, n_out, valid);
}

template <int T>
static rf_status rf_launch_k(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, float *y,
                             const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out,
                             int64_t rb) {
    const char *name = "rf_k_gemv_k";
#define RF_K(K, NTM, WPR) rf_gpu_launch(ctx, name, true, K<TK, NTM, WPR>, dim3(grid), dim3(threads), 0, y, w, x, nt, n_in, n_out, rb)
    if (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
        constexpr int TK = T == RF_TYPE_Q5_K ? RF_TYPE_Q5_K : RF_TYPE_Q4_K;
        if (v == 1) return nt == 1 ? RF_K(rf_k_gemv_k45, 1, 1) : RF_K(rf_k_gemv_k45, 8, 1);
        return nt == 1 ? RF_K(rf_k_gemv_k45, 1, 4) : RF_K(rf_k_gemv_k45, 8, 4);
    }
    constexpr int TK = T;
    if (v == 1) return nt == 1 ? RF_K(rf_k_gemv_k, 1, 1) : RF_K(rf_k_gemv_k, 8, 1);
    return nt == 1 ? RF_K(rf_k_gemv_k, 1, 4) : RF_K(rf_k_gemv_k, 8, 4);
#undef RF_K
}

rf_status rf_gemv_launch_k(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, rf_type t,
                           float *y, const uint8_t *w, const float *x, int nt, int64_t n_in,
                           int64_t n_out, int64_t rb) {
    if (t == RF_TYPE_Q4_K) return rf_launch_k<RF_TYPE_Q4_K>(ctx, v, grid, threads, y, w, x, nt, n_in, n_out, rb);
    if (t == RF_TYPE_Q5_K) return rf_launch_k<RF_TYPE_Q5_K>(ctx, v, grid, threads, y, w, x, nt, n_in, n_out, rb);
    return rf_launch_k<RF_TYPE_Q6_K>(ctx, v, grid, threads, y, w, x, nt, n_in, n_out, rb);
}
