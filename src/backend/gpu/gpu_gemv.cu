/* gpu_gemv.cu — quantized matrix-vector products for decode (1..8 tokens): y = W x with W in
 * ggml block layout streamed once from device memory with 16-byte loads, several in flight per
 * lane. Twin: rf_ref_matmul (dequantize row, accumulate in double). */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_quant.cuh"

#define RF_GEMV_WARPS 4 /* warps per block; one output row per warp */
#define RF_QK 32        /* elements per block of the 32-element formats and of quantized x */

/* ---- x quantization ------------------------------------------------------------------------
 * quantize_x: for each 32-element group g of x: d = max|x| / 127, qx = round(x / d) (int8),
 * dx[g] = (d, sum of the f32 x of the group). in: x f32 [n] (n a multiple of 32);
 * out: qx int8 [n], dx float2 [n/32]. launch: one thread per element, blocks of a multiple of
 * 64 threads, so each 32-group is 32 consecutive lanes of one warp (the reduction width below
 * is the group size RF_QK, not the warp size). */
__global__ void rf_k_quantize_x(int8_t *qx, float2 *dx, const float *x, int64_t n) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e - (threadIdx.x % RF_QK) >= n) return; /* whole groups leave together */
    const float v = e < n ? x[e] : 0.0f;
    float amax = fabsf(v), sum = v;
#pragma unroll
    for (int m = RF_QK / 2; m > 0; m >>= 1) {
        amax = fmaxf(amax, RF_SHFL_XOR(amax, m));
        sum += RF_SHFL_XOR(sum, m);
    }
    /* a NaN in the group must reach y: NaN d poisons every product (int8 cannot hold it) */
    const float d = sum != sum ? sum : amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    if (e < n) qx[e] = (int8_t)__float2int_rn(v * id);
    if (e < n && (threadIdx.x % RF_QK) == 0) dx[e / RF_QK] = make_float2(d, sum);
}

/* bit 4 of each byte of a packed 4-element word from 4 consecutive bits of qh starting at sh */
static __device__ __forceinline__ int rf_qh4(uint32_t qh, int sh) {
    qh >>= sh;
    return (int)(((qh & 1u) << 4) | ((qh & 2u) << 11) | ((qh & 4u) << 18) | ((qh & 8u) << 25));
}

/* Dot of one 32-element block at blk (ggml layout, 2-byte aligned) with one token's quantized
 * x (xi: 8 packed int8x4, dxv: (d, sum x)). */
template <int T>
static __device__ __forceinline__ float rf_block_dot(const uint8_t *blk, const int *xi, float2 dxv) {
    int s = 0;
    if (T == RF_TYPE_Q8_0) {
#pragma unroll
        for (int i = 0; i < 8; i++) s = rf_dp4a((int)rf_ld_u32_a2(blk + 2 + 4 * i), xi[i], s);
        return rf_ld_half(blk) * dxv.x * (float)s;
    }
    const int qo = T == RF_TYPE_Q4_0 ? 2 : T == RF_TYPE_Q4_1 ? 4 : T == RF_TYPE_Q5_0 ? 6 : 8;
    uint32_t qh = 0;
    if (T == RF_TYPE_Q5_0) qh = rf_ld_u32_a2(blk + 2);
    if (T == RF_TYPE_Q5_1) qh = rf_ld_u32_a2(blk + 4);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t q = rf_ld_u32_a2(blk + qo + 4 * i);
        int lo = (int)(q & 0x0F0F0F0Fu), hi = (int)((q >> 4) & 0x0F0F0F0Fu);
        if (T == RF_TYPE_Q5_0 || T == RF_TYPE_Q5_1) {
            lo |= rf_qh4(qh, 4 * i);
            hi |= rf_qh4(qh, 16 + 4 * i);
        }
        /* Q4_0 / Q5_0: subtract the offset (8 / 16) per byte before the product, so the error of
         * the int8 activations scales with |q - offset|, not with |q| (no cancellation after):
         * bias each byte by 0x80 so the subtraction cannot borrow, then flip it back. */
        if (T == RF_TYPE_Q4_0 || T == RF_TYPE_Q4_1) {
            lo = (int)((((uint32_t)lo | 0x80808080u) - 0x08080808u) ^ 0x80808080u);
            hi = (int)((((uint32_t)hi | 0x80808080u) - 0x08080808u) ^ 0x80808080u);
        }
        if (T == RF_TYPE_Q5_0 || T == RF_TYPE_Q5_1) {
            lo = (int)((((uint32_t)lo | 0x80808080u) - 0x10101010u) ^ 0x80808080u);
            hi = (int)((((uint32_t)hi | 0x80808080u) - 0x10101010u) ^ 0x80808080u);
        }
        s = rf_dp4a(lo, xi[i], s);
        s = rf_dp4a(hi, xi[4 + i], s);
    }
    const float d = rf_ld_half(blk);
    if (T == RF_TYPE_Q4_0 || T == RF_TYPE_Q5_0) return d * dxv.x * (float)s;
    /* Q4_1, Q5_1: d*q + m = d*(q - c) + (m + c*d) with c = 8 / 16 centring q as above */
    const float c = T == RF_TYPE_Q4_1 ? 8.0f : 16.0f;
    return d * dxv.x * (float)s + (rf_ld_half(blk + 2) + c * d) * dxv.y;
}

/* gemv_q32: y[t, o] = sum_i W[o, i] x[t, i] for W in a 32-element block format T.
 * in: w rows of row_bytes (ggml layout, readable 16 bytes past the end: rf_gpu_alloc pads);
 *     qx int8 [nt, n_in], dx float2 [nt, n_in/32] from rf_k_quantize_x; 1 <= nt <= NTMAX.
 * out: y f32 [nt, n_out]. launch: NW warps per block; a group of WPR warps owns
 * one row (NW / WPR rows per block). Each tile of BPL blocks per thread is fetched
 * with aligned 16-byte loads into the group's shared-memory slice (the next tile's loads are
 * in flight while this one is decoded), then decoded from there: blocks of 18/20/22/34 bytes
 * are not 16-byte aligned, the staging makes the global loads so.
 * FUSED: qx_g/dx_g are unused; each block quantizes x (f32 [nt, n_in]) itself into dynamic
 * shared memory (qx: nt*n_in bytes rounded up to 16, then dx: nt*n_in/32 float2) exactly as
 * rf_k_quantize_x does, after its first weight tile is already in flight: one launch per call
 * instead of two (the separate launch cost ~1-2 us, large against a 3 us 4096x4096 Q4_0 call).
 * Needs rf_q32_fused_smem() bytes of dynamic shared memory.
 * tolerance vs rf_ref_matmul: rel. L2 < 1e-2 (x is quantized to int8 per 32). */
template <int T, int NTMAX, int BPL, int WPR, bool FUSED, int NW>
__global__ void __launch_bounds__(NW * RF_WARP_SIZE)
rf_k_gemv_q32(float *y, const uint8_t *w, const int8_t *qx_g, const float2 *dx_g, const float *x,
              int nt, int64_t n_in, int64_t n_out, int64_t row_bytes) {
    constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : T == RF_TYPE_Q4_1 ? 20 : T == RF_TYPE_Q5_0 ? 22
                     : T == RF_TYPE_Q5_1 ? 24 : 34;
    constexpr int G = WPR * RF_WARP_SIZE;        /* threads per row */
    constexpr int GROUPS = NW / WPR;  /* rows per block */
    constexpr int TB = G * BPL;                  /* blocks per tile */
    constexpr int TILE_U4 = (TB * BB + 15) / 16 + 1;
    constexpr int U = (TILE_U4 + G - 1) / G;
    __shared__ uint4 sm[GROUPS][U * G];
    __shared__ float red[NW][NTMAX];
    const int gl = threadIdx.x % G, grp = threadIdx.x / G;
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1; /* keep every thread in the barriers below */
    const int64_t nb = n_in / RF_QK;
    const uint8_t *wr = w + row * row_bytes;
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
    uint4 r[U];
    int shift = 0, nu4 = 0;
    auto fetch = [&](int64_t b0) {
        const int nblk = (int)(nb - b0 < TB ? nb - b0 : TB);
        const uint8_t *a = wr + b0 * BB;
        shift = (int)((uintptr_t)a & 15);
        nu4 = (shift + nblk * BB + 15) / 16;
        const uint4 *src = (const uint4 *)(a - shift);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int idx = u * G + gl;
            if (idx < nu4) r[u] = src[idx];
        }
    };
    fetch(0);
    const int8_t *qx = qx_g;
    const float2 *dx = dx_g;
    if (FUSED) {
        /* quantize x into shared memory while the first tile's loads are in flight: each lane
         * takes 4 consecutive elements, 8 lanes one 32-group (groups never straddle tokens as
         * n_in % 32 == 0); K float4 loads per lane are issued before any is used. The loop
         * bound is uniform across the block so every lane reaches the shuffles. */
        extern __shared__ __align__(16) unsigned char rf_q32_xsm[];
        int8_t *sqx = (int8_t *)rf_q32_xsm;
        const int64_t n = (int64_t)nt * n_in, n4 = n / 4;
        float2 *sdx = (float2 *)(rf_q32_xsm + ((n + 15) & ~(int64_t)15));
        const float4 *x4 = (const float4 *)x;
        constexpr int K = 4;
        constexpr int NTH = NW * RF_WARP_SIZE;
        for (int64_t base = 0; base < n4; base += (int64_t)NTH * K) {
            float4 v[K];
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int64_t i = base + k * NTH + threadIdx.x;
                v[k] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int64_t i = base + k * NTH + threadIdx.x;
                float amax = fmaxf(fmaxf(fabsf(v[k].x), fabsf(v[k].y)), fmaxf(fabsf(v[k].z), fabsf(v[k].w)));
                float sum = (v[k].x + v[k].y) + (v[k].z + v[k].w);
#pragma unroll
                for (int m = 4; m > 0; m >>= 1) {
                    amax = fmaxf(amax, RF_SHFL_XOR(amax, m));
                    sum += RF_SHFL_XOR(sum, m);
                }
                /* a NaN in the group must reach y (see rf_k_quantize_x) */
                const float d = sum != sum ? sum : amax / 127.0f;
                const float id = d > 0.0f ? 1.0f / d : 0.0f;
                if (i < n4) {
                    const uint32_t b0 = (uint32_t)(__float2int_rn(v[k].x * id) & 0xFF);
                    const uint32_t b1 = (uint32_t)(__float2int_rn(v[k].y * id) & 0xFF);
                    const uint32_t b2 = (uint32_t)(__float2int_rn(v[k].z * id) & 0xFF);
                    const uint32_t b3 = (uint32_t)(__float2int_rn(v[k].w * id) & 0xFF);
                    ((uint32_t *)sqx)[i] = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
                    if ((i & 7) == 0) sdx[i / 8] = make_float2(d, sum);
                }
            }
        }
        __syncthreads();
        qx = sqx;
        dx = sdx;
    }
    for (int64_t b0 = 0; b0 < nb; b0 += TB) {
        const int nblk = (int)(nb - b0 < TB ? nb - b0 : TB);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int idx = u * G + gl;
            if (idx < nu4) sm[grp][idx] = r[u];
        }
        if (WPR == 1) RF_SYNCWARP(); else __syncthreads();
        const uint8_t *sb = (const uint8_t *)sm[grp] + shift;
        if (b0 + TB < nb) fetch(b0 + TB);
#pragma unroll
        for (int k = 0; k < BPL; k++) {
            const int bl = k * G + gl;
            if (bl >= nblk) break;
            const int64_t bi = b0 + bl;
            const uint8_t *blk = sb + bl * BB;
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                if (t >= nt) break;
                const int4 *xp = (const int4 *)(qx + t * n_in + bi * RF_QK);
                const int4 x0 = xp[0], x1 = xp[1];
                const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                acc[t] += rf_block_dot<T>(blk, xi, dx[t * nb + bi]);
            }
        }
        if (WPR == 1) RF_SYNCWARP(); else __syncthreads(); /* the slice is reused next tile */
    }
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (t >= nt) break;
        float v = rf_warp_sum(acc[t]);
        if (WPR > 1) {
            if (lane == 0) red[warp][t] = v;
            __syncthreads();
            v = 0.0f;
            for (int k = 0; k < WPR; k++) v += red[grp * WPR + k][t];
        }
        if (valid && gl == 0) y[t * n_out + row] = v;
    }
}

/* gemv_f16: the same product for W in f16 or bf16 (T), x f32 [nt, n_in]; n_in % 8 == 0 so
 * each row is 16-byte aligned; each thread keeps UNR independent 16-byte loads in flight.
 * launch: RF_GEMV_WARPS warps per block, WPR warps per row. tolerance rel. L2 < 1e-5 vs the
 * f32 reference on the same (already 16-bit) weights. */
template <int T, int NTMAX, int UNR, int WPR>
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_f16(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out) {
    constexpr int G = WPR * RF_WARP_SIZE, GROUPS = RF_GEMV_WARPS / WPR;
    __shared__ float red[RF_GEMV_WARPS][NTMAX];
    const int gl = threadIdx.x % G, grp = threadIdx.x / G;
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1;
    const int64_t n8 = n_in / 8;
    const uint4 *wr = (const uint4 *)(w + row * n_in * 2);
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
    for (int64_t i0 = gl; i0 < n8; i0 += (int64_t)G * UNR) {
        uint4 r[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            if (i < n8) r[u] = wr[i];
        }
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            if (i >= n8) break;
            const uint32_t wv[4] = {r[u].x, r[u].y, r[u].z, r[u].w};
            float wf[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (T == RF_TYPE_F16) {
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
                const float4 *xp = (const float4 *)(x + t * n_in + i * 8);
                const float4 a = xp[0], b = xp[1];
                acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                          wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (t >= nt) break;
        float v = rf_warp_sum(acc[t]);
        if (WPR > 1) {
            if (lane == 0) red[warp][t] = v;
            __syncthreads();
            v = 0.0f;
            for (int k = 0; k < WPR; k++) v += red[grp * WPR + k][t];
        }
        if (valid && gl == 0) y[t * n_out + row] = v;
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
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1; /* keep every thread for the block reduction */
    const int64_t nchunks = n_in / 32;
    const uint8_t *wr = w + row * row_bytes;
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
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
#pragma unroll
        for (int t = 0; t < NTMAX; t++) {
            if (t >= nt) break;
            const float4 *xp = (const float4 *)(x + t * n_in + c * 32);
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
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (t >= nt) break;
        float v = rf_warp_sum(acc[t]);
        if (WPR > 1) {
            if (lane == 0) red[warp][t] = v;
            __syncthreads();
            v = 0.0f;
            for (int k = 0; k < WPR; k++) v += red[grp * WPR + k][t];
        }
        if (valid && gl == 0) y[t * n_out + row] = v;
    }
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
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
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
    if (gl < nchunks) fetch(gl);
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
#pragma unroll
        for (int t = 0; t < NTMAX; t++) {
            if (t >= nt) break;
            const float4 *xp = (const float4 *)(x + t * n_in + c * 32);
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
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (t >= nt) break;
        float v = rf_warp_sum(acc[t]);
        if (WPR > 1) {
            if (lane == 0) red[warp][t] = v;
            __syncthreads();
            v = 0.0f;
            for (int k = 0; k < WPR; k++) v += red[grp * WPR + k][t];
        }
        if (valid && gl == 0) y[t * n_out + row] = v;
    }
}

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

/* ---- host glue ------------------------------------------------------------------------- */

extern "C" void rf_gpu_set_gemv_variant(rf_gpu_ctx *ctx, int variant) { ctx->gemv_variant = variant; }

extern "C" bool rf_gpu_gemv_supported(rf_type t) {
    switch (t) {
    case RF_TYPE_F16: case RF_TYPE_BF16: case RF_TYPE_Q8_0: case RF_TYPE_Q4_0: case RF_TYPE_Q4_1:
    case RF_TYPE_Q5_0: case RF_TYPE_Q5_1: case RF_TYPE_Q4_K: case RF_TYPE_Q5_K: case RF_TYPE_Q6_K:
        return true;
    default: return false;
    }
}

/* Kernel variants, chosen per call by ctx->gemv_variant (0 = default; the benchmark sweeps
 * 1..3): q32: see rf_launch_q32 below;
 * f16 (warps per row, loads in flight) = 1: (1, 4), 2: (4, 4), 3: (4, 2). */
/* defaults from the H100 sweep in docs/perf-gpu.md: f16 variant 3 (q32: RF_GEMV_DEFAULT_Q32F) */
#define RF_GEMV_DEFAULT_F16 3
static int rf_gemv_rows_per_block(int variant) { return variant == 1 ? RF_GEMV_WARPS : 1; }
#define RF_GEMV_DEFAULT_Q32F 3 /* default q32 variant (see rf_launch_q32) */

/* Static shared memory of rf_k_gemv_q32<T, NTMAX, BPL, 1, *> (the staging slices and the
 * reduction array) for warp size ws, mirroring the kernel's constants. */
static size_t rf_q32_static_smem(int bb, int bpl, int ntmax, int ws, int nw) {
    const int tb = ws * bpl, tile_u4 = (tb * bb + 15) / 16 + 1, u = (tile_u4 + ws - 1) / ws;
    return (size_t)nw * u * ws * 16 + (size_t)nw * ntmax * 4;
}
/* Dynamic shared memory the fused kernel needs for nt tokens of n_in: qx then dx. */
static size_t rf_q32_fused_smem(int64_t nt, int64_t n_in) {
    const int64_t n = nt * n_in;
    return (size_t)((n + 15) & ~(int64_t)15) + (size_t)(n / RF_QK) * sizeof(float2);
}

/* q32 variants (all one warp per row, 2 blocks per lane per tile): 1 = fused x quantization,
 * 16 warps per block; 2 = fused, 8 warps per block; 3 = the separate rf_k_quantize_x launch,
 * 4 warps per block (the kernel of the first H100 sweep). Every block of a fused variant
 * re-reads and quantizes all of x, so it wants many rows per block (with 4 rows per block the
 * re-read x outweighed the Q4_0 weights: slower than variant 3 on the H100). A fused variant
 * whose shared memory would exceed 48 KB falls back to variant 3. */
#if defined(RF_HIP)
#define RF_Q32_NW1 8 /* 16 wave64 warps would need more than 64 KB of static LDS */
#else
#define RF_Q32_NW1 16
#endif
static int rf_q32_warps(int v) { return v == 1 ? RF_Q32_NW1 : v == 2 ? 8 : RF_GEMV_WARPS; }
static bool rf_q32_fused_fits(int v, int bb, int64_t nt, int64_t n_in, int ws) {
    if (v == 3) return false;
    return rf_q32_static_smem(bb, 2, nt == 1 ? 1 : 8, ws, rf_q32_warps(v)) +
               rf_q32_fused_smem(nt, n_in) <= 48 * 1024;
}

template <int T>
static void rf_launch_q32(rf_gpu_ctx *ctx, int v, bool fused, float *y, const uint8_t *w,
                          const int8_t *qx, const float2 *dx, const float *x, int nt,
                          int64_t n_in, int64_t n_out, int64_t rb) {
    cudaStream_t s = ctx->stream;
    const size_t dyn = fused ? rf_q32_fused_smem(nt, n_in) : 0;
    const int nw = fused ? rf_q32_warps(v) : RF_GEMV_WARPS;
    const unsigned grid = (unsigned)((n_out + nw - 1) / nw), threads = nw * ctx->info.warp_size;
#define RF_Q32(NTM, F, NW) rf_k_gemv_q32<T, NTM, 2, 1, F, NW><<<grid, threads, dyn, s>>>(y, w, qx, dx, x, nt, n_in, n_out, rb)
    if (!fused) {
        if (nt == 1) RF_Q32(1, false, RF_GEMV_WARPS);
        else RF_Q32(8, false, RF_GEMV_WARPS);
    } else if (nt == 1) {
        if (v == 1) RF_Q32(1, true, RF_Q32_NW1);
        else RF_Q32(1, true, 8);
    } else {
        if (v == 1) RF_Q32(8, true, RF_Q32_NW1);
        else RF_Q32(8, true, 8);
    }
#undef RF_Q32
}
template <int T>
static void rf_launch_f16(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, float *y,
                          const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out) {
    cudaStream_t s = ctx->stream;
#define RF_F16(NTM, UNR, WPR) rf_k_gemv_f16<T, NTM, UNR, WPR><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out)
    if (nt == 1) {
        if (v == 1) RF_F16(1, 4, 1);
        else if (v == 2) RF_F16(1, 4, 4);
        else RF_F16(1, 2, 4);
    } else {
        if (v == 1) RF_F16(8, 4, 1);
        else RF_F16(8, 4, 4);
    }
#undef RF_F16
}
/* K-quant variants: 1 = one warp per row, 2 and 3 = four warps per row (default: see vk) */
template <int T>
static void rf_launch_k(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, float *y,
                        const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out,
                        int64_t rb) {
    cudaStream_t s = ctx->stream;
    if (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
        constexpr int T45 = T == RF_TYPE_Q5_K ? RF_TYPE_Q5_K : RF_TYPE_Q4_K;
        if (v == 1) {
            if (nt == 1) rf_k_gemv_k45<T45, 1, 1><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out, rb);
            else rf_k_gemv_k45<T45, 8, 1><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out, rb);
        } else {
            if (nt == 1) rf_k_gemv_k45<T45, 1, 4><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out, rb);
            else rf_k_gemv_k45<T45, 8, 4><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out, rb);
        }
        return;
    }
    if (v == 1) {
        if (nt == 1) rf_k_gemv_k<T, 1, 1><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out, rb);
        else rf_k_gemv_k<T, 8, 1><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out, rb);
    } else {
        if (nt == 1) rf_k_gemv_k<T, 1, 4><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out, rb);
        else rf_k_gemv_k<T, 8, 4><<<grid, threads, 0, s>>>(y, w, x, nt, n_in, n_out, rb);
    }
}

extern "C" rf_status rf_gpu_gemv(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                 const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_gemv";
    RF_GPU_REQUIRE(rf_gpu_type_supported(wtype), op, "weight type %d has no GPU decoder",
                   (int)wtype);
    RF_GPU_REQUIRE(n_tokens >= 1 && n_tokens <= 8, op, "n_tokens=%lld outside 1..8",
                   (long long)n_tokens);
    const int bs = rf_gq_block((int)wtype), bb = rf_gq_bytes((int)wtype);
    RF_GPU_REQUIRE(n_in >= 1 && n_in % bs == 0, op, "n_in=%lld not a multiple of block size %d",
                   (long long)n_in, bs);
    RF_GPU_REQUIRE(n_out >= 1 && n_out <= 0x7fffffff, op,
                   "n_out=%lld", (long long)n_out);
    RF_GPU_REQUIRE(((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 3) == 0,
                   op, "w and x must be 16-byte aligned (rf_gpu_alloc memory)");
    const int64_t rb = n_in / bs * bb;
    const int nt = (int)n_tokens;
    const unsigned threads = RF_GEMV_WARPS * ctx->info.warp_size;
    const unsigned grid = (unsigned)((n_out + RF_GEMV_WARPS - 1) / RF_GEMV_WARPS);
    const int v = ctx->gemv_variant >= 1 && ctx->gemv_variant <= 3
                      ? ctx->gemv_variant
                      : RF_GEMV_DEFAULT_F16; /* only F16/BF16 use v */
    const int rpb = rf_gemv_rows_per_block(v);
    const unsigned vgrid = (unsigned)((n_out + rpb - 1) / rpb); /* n_out < 2^31 checked above */
    /* K-quant default from the same sweep: one warp per row for Q4_K/Q5_K, four for Q6_K */
    const int vk = ctx->gemv_variant >= 1 && ctx->gemv_variant <= 3 ? ctx->gemv_variant
                   : wtype == RF_TYPE_Q6_K                          ? 2
                                                                    : 1;
    const unsigned kgrid = (unsigned)((n_out + rf_gemv_rows_per_block(vk) - 1) / rf_gemv_rows_per_block(vk));
    const uint8_t *wp = (const uint8_t *)w;
    const char *kname;
    size_t mark = ctx->scratch_used;
    switch (wtype) {
    case RF_TYPE_Q4_0: case RF_TYPE_Q4_1: case RF_TYPE_Q5_0: case RF_TYPE_Q5_1: case RF_TYPE_Q8_0: {
        /* x -> int8 per 32 (+ scale and exact sum), then the dp4a kernel; the fused variants do
         * both in one launch when x fits in shared memory */
        const int vq = ctx->gemv_variant >= 1 && ctx->gemv_variant <= 3 ? ctx->gemv_variant
                                                                        : RF_GEMV_DEFAULT_Q32F;
        const bool fused = rf_q32_fused_fits(vq, bb, n_tokens, n_in, (int)ctx->info.warp_size);
        int8_t *qx = NULL;
        float2 *dx = NULL;
        rf_status st;
        if (!fused) {
            const int64_t n = n_tokens * n_in;
            void *tmp;
            st = rf_gpu_tmp(ctx, (size_t)n + (size_t)(n / RF_QK) * sizeof(float2) + 256, &tmp, &mark);
            if (st) return st;
            qx = (int8_t *)tmp;
            dx = (float2 *)((char *)tmp + (((size_t)n + 255) & ~(size_t)255));
            rf_k_quantize_x<<<rf_gpu_blocks(n, 256), 256, 0, ctx->stream>>>(qx, dx, x, n);
            if ((st = RF_GPU_LAUNCHED(ctx, "rf_k_quantize_x"))) return st;
        }
        switch (wtype) {
        case RF_TYPE_Q4_0: rf_launch_q32<RF_TYPE_Q4_0>(ctx, vq, fused, y, wp, qx, dx, x, nt, n_in, n_out, rb); break;
        case RF_TYPE_Q4_1: rf_launch_q32<RF_TYPE_Q4_1>(ctx, vq, fused, y, wp, qx, dx, x, nt, n_in, n_out, rb); break;
        case RF_TYPE_Q5_0: rf_launch_q32<RF_TYPE_Q5_0>(ctx, vq, fused, y, wp, qx, dx, x, nt, n_in, n_out, rb); break;
        case RF_TYPE_Q5_1: rf_launch_q32<RF_TYPE_Q5_1>(ctx, vq, fused, y, wp, qx, dx, x, nt, n_in, n_out, rb); break;
        default: rf_launch_q32<RF_TYPE_Q8_0>(ctx, vq, fused, y, wp, qx, dx, x, nt, n_in, n_out, rb); break;
        }
        kname = "rf_k_gemv_q32";
        break;
    }
    case RF_TYPE_F16: case RF_TYPE_BF16:
        if (n_in % 8 == 0) {
            if (wtype == RF_TYPE_F16) rf_launch_f16<RF_TYPE_F16>(ctx, v, vgrid, threads, y, wp, x, nt, n_in, n_out);
            else rf_launch_f16<RF_TYPE_BF16>(ctx, v, vgrid, threads, y, wp, x, nt, n_in, n_out);
            kname = "rf_k_gemv_f16";
            break;
        }
        /* fall through: unaligned rows take the generic kernel */
    default:
        if (wtype == RF_TYPE_Q4_K || wtype == RF_TYPE_Q5_K || wtype == RF_TYPE_Q6_K) {
            if (wtype == RF_TYPE_Q4_K) rf_launch_k<RF_TYPE_Q4_K>(ctx, vk, kgrid, threads, y, wp, x, nt, n_in, n_out, rb);
            else if (wtype == RF_TYPE_Q5_K) rf_launch_k<RF_TYPE_Q5_K>(ctx, vk, kgrid, threads, y, wp, x, nt, n_in, n_out, rb);
            else rf_launch_k<RF_TYPE_Q6_K>(ctx, vk, kgrid, threads, y, wp, x, nt, n_in, n_out, rb);
            kname = "rf_k_gemv_k";
            break;
        }
        rf_k_gemv_generic<<<grid, threads, 0, ctx->stream>>>(y, wp, (int)wtype, x, nt, n_in, n_out,
                                                            rb, bs, bb);
        kname = "rf_k_gemv_generic";
        break;
    }
    ctx->scratch_used = mark;
    return RF_GPU_LAUNCHED(ctx, kname);
}
