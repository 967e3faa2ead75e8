/* gpu_mmq.cu — MMQ: quantized products of many tokens (9 .. thousands) on the int8 tensor cores
 * (CUDA sm_80+, mma.sync): each weight tile is read once per 64 tokens, x quantized once per
 * call (rf_k_quantize_x's q8 blocks, as the GEMVs; for the K-quants' dense products one scale per
 * 256, rf_k_quantize_x256); Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4. */
#include <stdlib.h>

#include "core/knobs.h"
#include "backend/gpu/gpu_gemv.cuh"     /* rf_gemv_launch_quantize_x; gpu_quant.cuh: f16, K-quant scales */

#include "backend/gpu/gpu_mmq_fmt.cuh" /* formats, stages, fragments, copies */

#if !defined(RF_HIP) /* mma.sync, cp.async: CUDA only */

template <bool V> struct rf_mmq_tag { static constexpr bool v = V; }; /* a compile-time choice passed to a lambda */

/* rf_k_mmq's products of block b: for each of the warp's four token fragments nf (B: words t,
 * 4 + t of token 8 nf + g's block b at sx; records of tokens 8 nf + 2t, + 1 at sr) and m16
 * fragments mf (A, D, CM, SC: rf_mmq_a_al / rf_mmq_a_ua), one mma, its exact int32 sum scaled
 * into acc (see rf_k_mmq); XS (K-quants, x per 256): added in int32 into the super-block's
 * I1 (the sum of the blocks' integer scale times their mma sum), scaled by rf_mmq_flush.
 * G: fragments nf >= nfa (wholly past the warp's tokens) skipped. Without G all four are
 * computed (their staged x is the last token's, their sums never stored): the guard around each
 * mma made every mma wait for the one before (one basic block each, the same registers), 4 mma a
 * block in a chain at 16 warps an SM, so rf_k_mmq takes it only for warps of 1-2 fragments. */
template <int T, int WN, int STX, int XS, bool G>
static __device__ __forceinline__ void rf_mmq_mma(float (&acc)[WN][4][4], int (&I1)[WN][4][4],
                                                  const uint32_t (&A)[WN][4],
                                                  const float (&D)[WN][2], const float (&CM)[WN][2],
                                                  const int (&SC)[WN][2][2], const uint8_t *sx, const uint8_t *sr,
                                                  int b, int t, int nfa) {
    using F = rf_mmq_fmt<T>;
    using L = rf_mmq_stage<T, WN, STX>;
    constexpr int MF = WN, B = rf_mmq_base<T>::v;
#pragma unroll
    for (int nf = 0; nf < 4; nf++) {
        if (G && nf >= nfa) break;
        const int X[2] = {*(const int *)(sx + nf * 8 * L::XT + b * 32 + 4 * t),
                          *(const int *)(sx + nf * 8 * L::XT + b * 32 + 16 + 4 * t)};
        const uint8_t *q0 = sr + nf * 8 * L::RS + b * F::REC, *q1 = q0 + L::RS;
        const float dx0 = *(const float *)q0, dx1 = *(const float *)q1;
        const int sx0 = *(const int *)(q0 + 4), sx1 = *(const int *)(q1 + 4);
#pragma unroll
        for (int mf = 0; mf < MF; mf++) {
            int s[4];
            if constexpr (B == RF_TYPE_Q6_K && XS) { /* q unsigned, the centre 32 in rf_mmq_flush */
                int sl4[4], sh4[4];
                rf_mmq_k16u(sl4, A[mf][0], A[mf][1], X[0], 0, 0);
                rf_mmq_k16u(sh4, A[mf][2], A[mf][3], X[1], 0, 0);
#pragma unroll
                for (int i = 0; i < 4; i++) /* two multiply-adds into the super-block's sum (integers: any order) */
                    I1[mf][nf][i] += SC[mf][i / 2][0] * sl4[i], I1[mf][nf][i] += SC[mf][i / 2][1] * sh4[i];
            } else if constexpr (B == RF_TYPE_Q6_K) {
                const int lo0 = *(const int *)(q0 + 12), lo1 = *(const int *)(q1 + 12);
                int sl4[4], sh4[4];
                rf_mmq_k16u(sl4, A[mf][0], A[mf][1], X[0], -32 * lo0, -32 * lo1);
                rf_mmq_k16u(sh4, A[mf][2], A[mf][3], X[1], -32 * (sx0 - lo0), -32 * (sx1 - lo1));
#pragma unroll
                for (int i = 0; i < 4; i++) s[i] = SC[mf][i / 2][0] * sl4[i] + SC[mf][i / 2][1] * sh4[i];
            } else if constexpr (XS) { /* Q4_K / Q5_K: q unsigned, no centre (the mins: rf_mmq_flush) */
                const int c[4] = {0, 0, 0, 0};
                rf_mmq_k32<true>(s, A[mf], X, c);
#pragma unroll
                for (int i = 0; i < 4; i++) I1[mf][nf][i] += SC[mf][i / 2][0] * s[i];
            } else if constexpr (B == RF_TYPE_Q8_0 || B == RF_TYPE_MXFP4) { /* signed values */
                const int c[4] = {RF_MMQ_MAGIC, RF_MMQ_MAGIC, RF_MMQ_MAGIC, RF_MMQ_MAGIC};
                rf_mmq_k32<false>(s, A[mf], X, c);
            } else {
                constexpr int C = B == RF_TYPE_Q5_K || B == RF_TYPE_Q5_0 ? 16 : 8;
                const int c0 = RF_MMQ_MAGIC - C * sx0, c1 = RF_MMQ_MAGIC - C * sx1;
                const int c[4] = {c0, c1, c0, c1};
                rf_mmq_k32<true>(s, A[mf], X, c);
            }
            if constexpr (!XS)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float dw = D[mf][i / 2], dxv = i % 2 ? dx1 : dx0;
                const float fs = B == RF_TYPE_Q6_K ? (float)s[i] : rf_mmq_unbias(s[i]); /* (float) of the sum */
                acc[mf][nf][i] += dw * dxv * fs;
                if constexpr (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K)
                    acc[mf][nf][i] += CM[mf][i / 2] * *(const float *)((i % 2 ? q1 : q0) + 8);
            }
        }
    }
}

/* XS: the super-block ending at block b (its 8 blocks from b - 7) into acc, I1 reset: y += d_x
 * (d I1 - dmin I2) (Q4_K / Q5_K; D, CM: the rows' d and dmin; I2 = sum_j m_j s_j of the 8 blocks'
 * mins, from the rows' staged chunks ra, and the tokens' int x sums s_j) or d d_x (I1 - 32 I2) (Q6_K, D
 * its d; I2 = sum_k sc_k h_k of the 16 half-blocks' int8 scales and the tokens' int x sums h_k:
 * the centre 32 that the mma's c operand took off before); d_x the tokens' one scale of the 256
 * (their records of block b); |I1| may pass 2^24 (one rounding in the conversion). I2 of a
 * fragment pair is one f16 mma (rf_mmq_mins), exact: the integer the earlier multiply-adds made,
 * so the same bits. */
template <int T, int WN, int STX, bool G>
static __device__ __forceinline__ void rf_mmq_flush(float (&acc)[WN][4][4], int (&I1)[WN][4][4],
                                                    const float (&D)[WN][2], const float (&CM)[WN][2],
                                                    const uint8_t *const (&ra)[WN][2], const uint8_t *sr, int b,
                                                    int nfa) {
    using F = rf_mmq_fmt<T>;
    using L = rf_mmq_stage<T, WN, STX>;
    constexpr int B = rf_mmq_base<T>::v;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint32_t MA[WN][4]; /* the rows' mins (Q4_K / Q5_K) or 16 scales (Q6_K) as rf_mmq_mins' A fragments */
#pragma unroll
    for (int mf = 0; mf < WN; mf++)
        if constexpr (B != RF_TYPE_Q6_K) rf_mmq_mins_a(MA[mf], ra[mf][0] + 4, ra[mf][1] + 4, t);
        else rf_mmq_scales_a(MA[mf], ra[mf][0] + 210 * (b / 8) + 192, ra[mf][1] + 210 * (b / 8) + 192, t);
#pragma unroll
    for (int nf = 0; nf < 4; nf++) {
        if (G && nf >= nfa) break;
        const uint8_t *q0 = sr + nf * 8 * L::RS + b * F::REC;
        const float dx0 = *(const float *)q0, dx1 = *(const float *)(q0 + L::RS);
        uint32_t X0, X1; /* token 8 nf + g's block sums s_2t, s_2t+1 (Q4_K / Q5_K) or half-block sums
                          * of blocks t, t + 4 (Q6_K) as rf_mmq_mins' B */
        if constexpr (B != RF_TYPE_Q6_K) {
            const uint8_t *qg = q0 + (g - 2 * t) * L::RS + (2 * t - 7) * F::REC + 4; /* its record of block b - 7 + 2t */
            rf_mmq_mins_b(&X0, &X1, *(const int *)qg, *(const int *)(qg + F::REC));
        } else {
            const uint8_t *qg = q0 + (g - 2 * t) * L::RS + (t - 7) * F::REC; /* its record of block b - 7 + t */
            X0 = rf_mmq_halves_b(*(const int *)(qg + 4), *(const int *)(qg + 12));
            X1 = rf_mmq_halves_b(*(const int *)(qg + 4 * F::REC + 4), *(const int *)(qg + 4 * F::REC + 12));
        }
#pragma unroll
        for (int mf = 0; mf < WN; mf++) {
            float i2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            rf_mmq_mins(i2, MA[mf], X0, X1);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if constexpr (B == RF_TYPE_Q6_K) I1[mf][nf][i] -= 32 * __float2int_rn(i2[i]); /* the centre, exact */
                const float dxv = i % 2 ? dx1 : dx0, f1 = (float)I1[mf][nf][i];
                if constexpr (B == RF_TYPE_Q6_K)
                    acc[mf][nf][i] += D[mf][i / 2] * dxv * f1;
                else
                    acc[mf][nf][i] += dxv * (D[mf][i / 2] * f1 - CM[mf][i / 2] * i2[i]);
                I1[mf][nf][i] = 0;
            }
        }
    }
}

/* mmq: y[t, o] = sum_i W[o, i] x[t, i] for the tokens t of blockIdx.x's tile of BN = 32 WN and
 * the rows o of blockIdx.y's tile of 128, over the chunks of blockIdx.z's share of the row
 * (splits shares: the partial sums go to y + z * nt * n_out, summed by rf_k_mmq_reduce). W:
 * n_out rows of row_bytes in ggml's layout (n_in a multiple of 32 KB), qx / rec:
 * rf_k_quantize_x's x with GB = 1 (in order) and records of REC bytes. Warp (wm, wn) = (warp %
 * (8 / WN), warp / (8 / WN)) owns rows 16 WN wm .. + 16 WN - 1 (WN m16 fragments) by tokens
 * 32 wn .. + 31 (four n8 fragments; a warp with none of the call's tokens skips the chunks, one
 * whose tokens fill 1-2 of them skips the others: rf_mmq_mma's G); per
 * 32-element block b, one mma per fragment pair gives the exact int32 sum of q x (Q4_0 / Q4_K /
 * Q5_K: their centres 8 / 8 / 16 taken off in the mma's c operand, - c sum x, which also adds
 * the bias of rf_mmq_unbias; Q6_K: two k16 products, one per 16-element half with its int8
 * scale, centre 32 likewise, converted by the conversion unit: its sums reach 2^24), which is
 * scaled in f32 into the register accumulators: y += d_w d_x s (Q4_K / Q5_K: + (c d sc - dmin m) *
 * the sum of f32 x, as the GEMV's rf_qk_dot). Each output is one thread's running sum over its
 * blocks in row order with the same operations whatever WN, STX, the token count or the
 * token's place in the tile: a token's result has the same bits in every call of the same
 * (W, n_in, n_out, splits) (batch invariant); splits depends on the shape alone (rf_gpu_mmq).
 * Chunks are staged with cp.async in a ring of ST stages shared by all warps; the weights of
 * the first stages are requested before rf_pdl_wait() (W must not be written by work in
 * flight), x after it. Rows past n_out read the last row and tokens past nt the last token;
 * neither is stored. launch: grid (ceil(nt / BN), ceil(n_out / 128), splits), 256 threads,
 * rf_mmq_stage<T, WN, STX>::SMEM bytes of dynamic shared memory.
 * Grouped (mixture of experts, tiles not NULL; gpu_moe.cu): blockIdx.x's tile is tiles[blockIdx.x]
 * = (expert e, first row t0, end row t1) of x's rows sorted by expert (e < 0: an unused tile,
 * the block exits), W is expert e's n_out rows of the n_expert * n_out, rows t0 .. t1 - 1 of y
 * are written; splits 1. The table is the previous kernel's output: such a launch must not be a
 * programmatic dependent one (it is read before rf_pdl_wait).
 * XS (Q4_K, Q5_K, Q6_K; rf_gpu_mmq's dense products): x quantized per 256 with one scale
 * (rf_k_quantize_x256), so a super-block's 8 blocks add in int32 (each block's mma sum times its
 * integer scale; all three: unsigned q, no centre in the mma; the mins' term of Q4_K / Q5_K and
 * the centre of Q6_K once a super-block as an f16 mma in rf_mmq_flush) and the f32 scaling runs
 * once a super-block (rf_mmq_flush) instead of once a block: ~44
 * instructions an mma were ~12 of the block's 8 conversions, products and sums. The same
 * operations in the same order at every WN, STX and token count (batch invariance as above). */
template <int T, int WN, int STX, int XS>
__global__ void __launch_bounds__(RF_MMQ_NW * 32, rf_mmq_stage<T, WN, STX>::MINB)
rf_k_mmq(float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec, int nt, int n_in,
         int n_out, int64_t row_bytes, int splits, const int4 *tiles) {
    using F = rf_mmq_fmt<T>;
    using L = rf_mmq_stage<T, WN, STX>;
    constexpr int KB = F::KB, ST = L::ST, BN = L::BN, WM = RF_MMQ_NW / WN, MF = WN;
    constexpr int B = rf_mmq_base<T>::v, UA = F::UA; /* the format; rows at any alignment */
    extern __shared__ __align__(16) uint8_t rf_mmq_smem[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int wm = warp % WM, wn = warp / WM;
    const int r0 = blockIdx.y * RF_MMQ_BM; /* token tiles of a row tile run together (W from L2) */
    int t0 = blockIdx.x * BN;
    if (tiles) { /* grouped: one expert's rows */
        const int4 tl = tiles[blockIdx.x];
        if (tl.x < 0) return;
        w += (int64_t)tl.x * n_out * row_bytes;
        t0 = tl.y, nt = tl.z;
    }
    const int nb = n_in / 32, nch = UA ? (nb + KB - 1) / KB : nb / KB; /* UA: the last chunk may be partial */
    const int kc0 = (int)((int64_t)blockIdx.z * nch / splits), nk = (int)((int64_t)(blockIdx.z + 1) * nch / splits) - kc0;
    const unsigned base = rf_smem_addr(rf_mmq_smem);
    const int ntile = nt - t0 < BN ? nt - t0 : BN;

#pragma unroll
    for (int k = 0; k < ST - 1; k++) {
        if (k < nk) rf_mmq_issue_w<T, WN, STX>(rf_mmq_smem, base, w, row_bytes, kc0 + k, k, r0, n_out);
        rf_cp_async_commit();
    }
    rf_pdl_trigger();
    rf_pdl_wait();
#pragma unroll
    for (int k = 0; k < ST - 1; k++) { /* groups W0..W(ST-2), X0..X(ST-2), then W+X per chunk:
                                       * at chunk k, wait<ST - 2> leaves chunk k landed */
        if (k < nk) rf_mmq_issue_x<T, WN, STX>(base, qx, rec, kc0 + k, k, t0, nt, n_in, nb);
        rf_cp_async_commit();
    }
    /* token fragments of this warp holding any of the call's tokens */
    const int nfa = ntile - 32 * wn <= 0 ? 0 : ntile - 32 * wn >= 32 ? 4 : (ntile - 32 * wn + 7) / 8;
    float acc[MF][4][4];
    int I1[MF][4][4]; /* XS: the super-block's integer sums (rf_mmq_mma) */
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int nf = 0; nf < 4; nf++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mf][nf][i] = 0.0f, I1[mf][nf][i] = 0;
    int ral[MF][2]; /* UA: the staged rows g, g + 8 of each m16 fragment: row start address mod 16 */
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rr = r0 + 16 * MF * wm + 16 * mf + 8 * h + g;
            ral[mf][h] = (int)((uintptr_t)(w + (int64_t)(rr < n_out ? rr : n_out - 1) * row_bytes) & 15);
        }
    (void)ral;

    for (int k = 0; k < nk; k++) {
        rf_cp_async_wait<ST - 2>();
        __syncthreads(); /* chunk k visible to all; slot (k - 1) % ST read by all */
        const int kn = k + ST - 1, sn = (k + ST - 1) % ST;
        if (kn < nk) {
            rf_mmq_issue_w<T, WN, STX>(rf_mmq_smem, base, w, row_bytes, kc0 + kn, sn, r0, n_out);
            rf_mmq_issue_x<T, WN, STX>(base, qx, rec, kc0 + kn, sn, t0, nt, n_in, nb);
        }
        rf_cp_async_commit();
        if (nfa == 0) continue;
        const uint8_t *sl = rf_mmq_smem + (k % ST) * L::BYTES;
        const uint8_t *sx = sl + L::XO + (32 * wn + g) * L::XT, *sr = sl + L::RO + (32 * wn + 2 * t) * L::RS;
        const uint8_t *ra[MF][2]; /* rows g, g + 8 of each m16 fragment */
        int ro[MF][2]; /* UA: the rows' chunk starts, offsets in the shared memory */
        const int offm = (int)((int64_t)(kc0 + k) * F::CB & 15), nbv = nb - (kc0 + k) * KB;
#pragma unroll
        for (int mf = 0; mf < MF; mf++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                ra[mf][h] = sl + (16 * MF * wm + 16 * mf + 8 * h + g) * F::SROW;
                ro[mf][h] = (k % ST) * L::BYTES + (16 * MF * wm + 16 * mf + 8 * h + g) * F::SROW + ((ral[mf][h] + offm) & 15);
            }
        const uint8_t *rd[MF][2]; /* the rows' staged chunk as rf_mmq_flush reads it */
#pragma unroll
        for (int mf = 0; mf < MF; mf++)
#pragma unroll
            for (int h = 0; h < 2; h++) rd[mf][h] = UA ? rf_mmq_smem + ro[mf][h] : ra[mf][h];
        (void)nbv;
        /* the chunk's blocks, G: fragments past the warp's tokens skipped (a grouped product's
         * tiles of a few tokens), else all four computed (rf_mmq_mma's note) */
        const auto blocks = [&](auto guarded) {
            constexpr bool G = decltype(guarded)::v;
#pragma unroll
            for (int b = 0; b < KB; b++) {
                if (UA && b >= nbv) break; /* a partial last chunk: the row ends at block nbv */
                /* the A fragments of block b (lane (g, t): words t and 4 + t of rows g, g + 8) and
                 * the rows' f32 factors */
                uint32_t A[MF][4];
                float D[MF][2], CM[MF][2];
                int SC[MF][2][2]; /* Q6_K: the two halves' int8 scales */
#pragma unroll
                for (int mf = 0; mf < MF; mf++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if constexpr (UA)
                            rf_mmq_a_ua<B>(rf_mmq_smem, ro[mf][h], t, b, &A[mf][h], &A[mf][2 + h], &D[mf][h], SC[mf][h]);
                        else
                            rf_mmq_a_al<T, XS>(ra[mf][h], t, b, &A[mf][h], &A[mf][2 + h], &D[mf][h], &CM[mf][h], SC[mf][h]);
                    }
                rf_mmq_mma<T, WN, STX, XS, G>(acc, I1, A, D, CM, SC, sx, sr, b, t, nfa);
                if constexpr (XS)
                    if (b % 8 == 7) rf_mmq_flush<T, WN, STX, G>(acc, I1, D, CM, rd, sr, b, nfa);
            }
        };
        if (nfa >= 3) blocks(rf_mmq_tag<false>{});
        else blocks(rf_mmq_tag<true>{});
    }
    float *out = tiles ? y : y + (int64_t)blockIdx.z * nt * n_out;
#pragma unroll
    for (int mf = 0; mf < MF; mf++)
#pragma unroll
        for (int nf = 0; nf < 4; nf++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r0 + 16 * MF * wm + 16 * mf + g + 8 * (i / 2), tok = t0 + 32 * wn + 8 * nf + 2 * t + i % 2;
                if (row < n_out && tok < nt) out[(int64_t)tok * n_out + row] = acc[mf][nf][i];
            }
}

/* y[i] = part[0][i] + part[1][i] + ... + part[splits - 1][i] in that order, i < n (parts n
 * apart); launch: grid-stride, programmatic dependent launch allowed */
__global__ void rf_k_mmq_reduce(float *y, const float *part, int64_t n, int splits) {
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float s = part[i];
        for (int k = 1; k < splits; k++) s += part[k * n + i];
        y[i] = s;
    }
}

/* the product kernel for T: dynamic shared memory allowed once per type, then the launch */
template <int T, int WN, int STX = 0, int XS = 0>
static rf_status rf_launch_mmq_wn(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec,
                                  int nt, int n_in, int n_out, int64_t rb, int splits,
                                  const int4 *tiles = nullptr, int n_tiles = 0) {
    auto kern = rf_k_mmq<T, WN, STX, XS>;
    constexpr int smem = rf_mmq_stage<T, WN, STX>::SMEM, BN = rf_mmq_stage<T, WN, STX>::BN;
    static size_t attr[RF_GPU_MAX_DEVICES];
    const rf_status ast = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(kern), (size_t)smem, 0, attr, "rf_k_mmq");
    if (ast) return ast;
    const dim3 grid((unsigned)(tiles ? n_tiles : (nt + BN - 1) / BN), (unsigned)((n_out + RF_MMQ_BM - 1) / RF_MMQ_BM),
                    (unsigned)splits);
    return rf_gpu_launch(ctx, tiles ? "rf_k_mmq (grouped)" : "rf_k_mmq", !tiles, kern, grid, dim3(RF_MMQ_NW * 32),
                         (size_t)smem, y, w, qx, rec, nt, n_in, n_out, rb, splits, tiles);
}
/* tiles of 32 tokens (8 warps along the rows: every warp busy) up to 32 tokens, of 64 in 2
 * stages past that;
 * each output's arithmetic is the same in all (batch invariance holds across them). RF_MMQ_CFG
 * (measurement knob, read at every call so that a test may change it with rf_knob_override):
 * 1 = tiles of 32 always, 2 = tiles of 64 above 32 tokens in 2 stages, 3 = in the format's
 * stages, 4 = tiles of 128 (2 warps along the rows x 4 along the tokens, each warp 64 rows x
 * 32 tokens: 16 mma per A and B fragment load) at every token count in as many stages as fit,
 * 5 = the same in 2 stages (Q6_K and the unaligned formats: 4 and 5 are 3, fewer instances to build). */
template <int T>
static rf_status rf_launch_mmq(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec,
                               int nt, int n_in, int n_out, int64_t rb, int splits, bool x256) {
    constexpr int B = rf_mmq_base<T>::v;
    constexpr int XS = B == RF_TYPE_Q4_K || B == RF_TYPE_Q5_K || B == RF_TYPE_Q6_K; /* x per 256 */
    if (XS && !x256) /* the earlier per-32 kernels (those the grouped products keep) */
        return nt <= 32 ? rf_launch_mmq_wn<T, 1>(ctx, y, w, qx, rec, nt, n_in, n_out, rb, splits)
                        : rf_launch_mmq_wn<T, 2, 2>(ctx, y, w, qx, rec, nt, n_in, n_out, rb, splits);
    const int cfg = (int)rf_knob_int(RF_KNOB_MMQ_CFG);
    if constexpr (T != RF_TYPE_Q6_K && !rf_mmq_fmt<T>::UA) {
        if (cfg == 4) return rf_launch_mmq_wn<T, 4, 0, XS>(ctx, y, w, qx, rec, nt, n_in, n_out, rb, splits);
        if (cfg == 5) {
            constexpr int S5 = rf_mmq_stage<T, 4>::ST == 2 ? 0 : 2; /* one instance where the default is 2 */
            return rf_launch_mmq_wn<T, 4, S5, XS>(ctx, y, w, qx, rec, nt, n_in, n_out, rb, splits);
        }
    }
    if (cfg == 1 || (nt <= 32 && cfg != 4 && cfg != 5))
        return rf_launch_mmq_wn<T, 1, 0, XS>(ctx, y, w, qx, rec, nt, n_in, n_out, rb, splits);
    /* the default past 32 tokens: tiles of 64 in 2 stages, the fastest configuration at every type
     * (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K), shape (4096-28672 rows) and count (64-512 tokens) measured
     * on an H200 (docs/PERFORMANCE.md, 2026-11-29: e.g. Q8_0 28672 x 4096 at 64 tokens 94.8 us
     * against 120.3 in the format's stages, 192.2 with tiles of 128) */
    if (cfg == 2 || cfg == 0) return rf_launch_mmq_wn<T, 2, 2, XS>(ctx, y, w, qx, rec, nt, n_in, n_out, rb, splits);
    return rf_launch_mmq_wn<T, 2, 0, XS>(ctx, y, w, qx, rec, nt, n_in, n_out, rb, splits);
}
#endif

/* The kernel's format for (type, n_in): the aligned kernels where the rows hold whole chunks
 * (Q4_0 / Q5_0 / Q8_0: n_in a multiple of 256, Q6_K of 512), else the unaligned ones (rf_mmq_fmt's
 * UA); -1: none (rf_gpu_mmq_supported's rule) */
#if !defined(RF_HIP)
static int rf_mmq_kernel_type(rf_type t, int64_t n_in) {
    if (n_in < 256 || n_in > ((int64_t)1 << 28)) return -1;
    switch (t) {
    case RF_TYPE_Q4_0: case RF_TYPE_Q5_0: case RF_TYPE_Q8_0:
        return n_in % 256 == 0 ? (int)t : n_in % 32 == 0 ? RF_MMQ_UA((int)t) : -1;
    case RF_TYPE_Q4_K: case RF_TYPE_Q5_K: return n_in % 256 == 0 ? (int)t : -1;
    case RF_TYPE_Q6_K: return n_in % 512 == 0 ? (int)t : n_in % 256 == 0 ? RF_MMQ_UA((int)t) : -1;
    case RF_TYPE_MXFP4: return n_in % 32 == 0 ? (int)t : -1;
    default: return -1;
    }
}
#endif

/* Tiles of 64 rows once the experts average 48 slots or more (gpt-oss-20b's pp512: 2048 slots over
 * 32 experts; gemma4-26b-a4b's pp4096: 32768 over 128), else 32 (qwen3-30b-a3b's pp512: 4096
 * over 128): the dense kernel's tiles of 64 in 2 stages read each staged weight chunk for twice
 * the tokens (Q4_0 28672 x 4096 at 64 tokens, H200: 96 us against 125 with tiles of 32, so a tile
 * of 64 costs ~1.5 of 32: it wins from ~40 slots per expert). Each output's arithmetic is the
 * same in both (rf_k_mmq), so the switch keeps batch invariance. */
extern "C" int rf_gpu_mmq_grouped_rows(int64_t nk, int64_t n_expert) { return nk >= 48 * n_expert ? 64 : 32; }

/* The grouped product of gpu_moe.cu (see rf_k_mmq): tiles of bn = 32 or 64 rows, no split. */
extern "C" rf_status rf_gpu_mmq_grouped_bn(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const int8_t *qx,
                                           const uint8_t *rec, const int4 *tiles, int n_tiles, int bn, int n_rows,
                                           int64_t n_in, int64_t n_out) {
#if defined(RF_HIP)
    (void)ctx, (void)y, (void)w, (void)wtype, (void)qx, (void)rec, (void)tiles, (void)n_tiles, (void)n_rows, (void)bn;
    (void)n_in, (void)n_out;
    return rf_set_error(RF_ERR_UNSUPPORTED, "rf_gpu_mmq_grouped: no MMQ kernel on HIP");
#else
    const int64_t rb = n_in / rf_gq_block((int)wtype) * rf_gq_bytes((int)wtype);
    const uint8_t *wp = (const uint8_t *)w;
    const int ni = (int)n_in, no = (int)n_out;
#define RF_MMQ_G(K)                                                                                 \
    (bn == 64 ? rf_launch_mmq_wn<K, 2, 2>(ctx, y, wp, qx, rec, n_rows, ni, no, rb, 1, tiles, n_tiles) \
              : rf_launch_mmq_wn<K, 1>(ctx, y, wp, qx, rec, n_rows, ni, no, rb, 1, tiles, n_tiles))
    switch (rf_mmq_kernel_type(wtype, n_in)) {
    case RF_TYPE_Q4_0: return RF_MMQ_G(RF_TYPE_Q4_0);
    case RF_TYPE_Q5_0: return RF_MMQ_G(RF_TYPE_Q5_0);
    case RF_TYPE_Q8_0: return RF_MMQ_G(RF_TYPE_Q8_0);
    case RF_TYPE_Q4_K: return RF_MMQ_G(RF_TYPE_Q4_K);
    case RF_TYPE_Q5_K: return RF_MMQ_G(RF_TYPE_Q5_K);
    case RF_TYPE_Q6_K: return RF_MMQ_G(RF_TYPE_Q6_K);
    case RF_TYPE_MXFP4: return RF_MMQ_G(RF_TYPE_MXFP4);
    case RF_MMQ_UA(RF_TYPE_Q4_0): return RF_MMQ_G(RF_MMQ_UA(RF_TYPE_Q4_0));
    case RF_MMQ_UA(RF_TYPE_Q5_0): return RF_MMQ_G(RF_MMQ_UA(RF_TYPE_Q5_0));
    case RF_MMQ_UA(RF_TYPE_Q8_0): return RF_MMQ_G(RF_MMQ_UA(RF_TYPE_Q8_0));
    case RF_MMQ_UA(RF_TYPE_Q6_K): return RF_MMQ_G(RF_MMQ_UA(RF_TYPE_Q6_K));
#undef RF_MMQ_G
    default:
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_gpu_mmq_grouped: weight type %d with n_in=%lld has no MMQ kernel",
                            (int)wtype, (long long)n_in);
    }
#endif
}

/* tiles of 32 rows (the tables gpu_moe.cu's other grouped callers build) */
extern "C" rf_status rf_gpu_mmq_grouped(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const int8_t *qx,
                                        const uint8_t *rec, const int4 *tiles, int n_tiles, int n_rows, int64_t n_in,
                                        int64_t n_out) {
    return rf_gpu_mmq_grouped_bn(ctx, y, w, wtype, qx, rec, tiles, n_tiles, 32, n_rows, n_in, n_out);
}

/* MMQ takes (CUDA): Q4_0, Q5_0, Q8_0, MXFP4 with n_in a multiple of their 32-element block, Q4_K,
 * Q5_K, Q6_K of their 256-element super-block, n_in >= 256 (at least one whole chunk of 8
 * blocks of 32: a split of the rows, rf_mmq_splits, is never empty) and <= 2^28 (int offsets).
 * Rows whose length is not a whole number of chunks end in a partial last chunk (the
 * unaligned kernels, rf_mmq_fmt's UA). HIP: none. */
extern "C" bool rf_gpu_mmq_supported(rf_type t, int64_t n_in) {
#if defined(RF_HIP)
    (void)t, (void)n_in;
    return false;
#else
    return rf_mmq_kernel_type(t, n_in) >= 0;
#endif
}

/* Splits of the rows (split-K) for an n_out-row product: row tiles times splits about fill 2
 * blocks per SM (what the 32-token tiles and Q4_0's 2-stage 64-token tiles hold), from the
 * shape and device alone (never the token count: batch invariance), at least 2 chunks per
 * split, at most 8 splits. RF_MMQ_SLOTS=1 (measurement knob): fill 1 block per SM, at least 4
 * chunks per split, the first choice. Splits against none, H100, Q4_0: 4096x4096 at 16 / 32
 * tokens 18.0 / 21.8 -> 14.2 / 15.9 us, 6144x4096 at 32 35.3 -> 22.0, 4096x14336 at 32 47.2 ->
 * 36.8, but at 128 tokens 33.3 -> 38.8; llama3-8b decode at 16 / 32 / 64 sequences 2,525 /
 * 4,434 / 6,277 -> 2,843 / 5,188 / 6,914 tok/s (docs/perf-gpu.md, "MMQ"). RF_MMQ_SLOTS=3-4:
 * more splits (H200, 2026-12-01: qwen3-8b Q4_K_M's gate/up, 192 row tiles, in 2 splits at 3:
 * +3.6% at 32 sequences, none at 1 and 16); not the default while the other shapes it moves
 * (e.g. 8B's 6,144-row QKV from 5 to 8 splits) are unmeasured. */
static int rf_mmq_splits(const rf_gpu_ctx *ctx, int64_t n_in, int64_t n_out, int kb) {
    static int slots = -1;
    if (slots < 0) {
        slots = (int)rf_knob_int(RF_KNOB_MMQ_SLOTS);
    }
    const int64_t mt = (n_out + RF_MMQ_BM - 1) / RF_MMQ_BM, nch = (n_in / 32 + kb - 1) / kb; /* a partial chunk counts */
    int64_t s = slots * ctx->info.sm_count / mt;
    if (s > nch / (slots == 1 ? 4 : 2)) s = nch / (slots == 1 ? 4 : 2);
    if (s > 8) s = 8;
    return s < 1 ? 1 : (int)s;
}

/* the records of the MMQ's x for weights of type t: 3 (x per 256, rf_k_mmq's XS) for the K-quants
 * with RF_MMQ_X256 on (a measurement knob, read at every call so that a test may change it with
 * rf_knob_override), 1 (per 32 with sums) with it off, 0 for the 32-element formats */
static bool rf_mmq_kquant(rf_type t) { return t == RF_TYPE_Q6_K || t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K; }
extern "C" int rf_gpu_mmq_rk(rf_type t) { return rf_mmq_kquant(t) ? (rf_knob_bool(RF_KNOB_MMQ_X256) ? 3 : 1) : 0; }

/* the checks of both entries */
static rf_status rf_mmq_check(const rf_gpu_ctx *ctx, const char *op, const void *w, rf_type wtype, const void *x,
                              const float *y, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    RF_GPU_REQUIRE(rf_gpu_mmq_supported(wtype, n_in), op, "weight type %d with n_in=%lld has no MMQ kernel "
                   "(CUDA: Q4_0, Q5_0, Q8_0, MXFP4 with n_in a multiple of 32, Q4_K, Q5_K, Q6_K of 256; n_in >= 256)",
                   (int)wtype, (long long)n_in);
    RF_GPU_REQUIRE(n_tokens >= 1 && n_tokens <= 65535 && n_out >= 1 && n_out <= 0x7fffffff &&
                       n_tokens * n_in <= 0x7fffffff, op, "shape %lld x %lld x %lld", (long long)n_tokens,
                   (long long)n_in, (long long)n_out);
    RF_GPU_REQUIRE(w && x && y && ((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 3) == 0, op,
                   "w and x must be 16-byte aligned device memory (rf_gpu_alloc)");
#if !defined(RF_HIP)
    RF_GPU_REQUIRE(ctx->info.cc_major >= 8, op, "the int8 tensor-core kernel needs compute capability 8.0+");
#else
    (void)ctx;
#endif
    return RF_OK;
}

#if !defined(RF_HIP)
/* the split-K partial sums' bytes for the product of (wtype, n_tokens, n_in, n_out): 0 without splits */
static size_t rf_mmq_part_bytes(const rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const int kt = rf_mmq_kernel_type(wtype, n_in), splits = rf_mmq_splits(ctx, n_in, n_out, kt == RF_TYPE_Q6_K ? 16 : 8);
    return splits > 1 ? (size_t)splits * n_tokens * n_out * sizeof(float) : 0;
}

/* the product from x quantized as rf_gemv_launch_quantize_x(gb 1, rk) writes it at xq (int8 x,
 * then the records 256-byte aligned), the split-K partial sums at tmp (rf_mmq_part_bytes of
 * scratch; NULL: taken here) and their sum; with keep (not NULL) and tmp the caller's (keep_cap
 * bytes), a product in splits that fit leaves its partial sums at tmp unsummed and says how many
 * (*keep; 0 where it wrote y) */
static rf_status rf_mmq_run(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq, int rk,
                            int64_t n_tokens, int64_t n_in, int64_t n_out, void *tmp, size_t keep_cap = 0,
                            int *keep = nullptr) {
    const int kt = rf_mmq_kernel_type(wtype, n_in), kb = kt == RF_TYPE_Q6_K ? 16 : 8;
    const int splits = rf_mmq_splits(ctx, n_in, n_out, kb);
    const int64_t rb = n_in / rf_gq_block((int)wtype) * rf_gq_bytes((int)wtype);
    const size_t part = rf_mmq_part_bytes(ctx, wtype, n_tokens, n_in, n_out); /* 0: one split */
    if (keep) {
        *keep = part && part <= keep_cap ? splits : 0;
        if (!*keep) tmp = NULL;
    }
    const size_t pb = tmp ? 0 : part;
    size_t mark;
    rf_status st = pb ? rf_gpu_tmp(ctx, pb, &tmp, &mark) : RF_OK;
    if (st) return st;
    const size_t n = (size_t)n_tokens * (size_t)n_in;
    const int8_t *qx = (const int8_t *)xq;
    const uint8_t *rec = (const uint8_t *)xq + ((n + 255) & ~(size_t)255);
    float *out = splits > 1 ? (float *)tmp : y;
    const uint8_t *wp = (const uint8_t *)w;
    const int nt = (int)n_tokens, ni = (int)n_in, no = (int)n_out;
    const bool x256 = rk == 3;
#define RF_MMQ_D(K) rf_launch_mmq<K>(ctx, out, wp, qx, rec, nt, ni, no, rb, splits, x256)
    switch (kt) {
    case RF_TYPE_Q4_0: st = RF_MMQ_D(RF_TYPE_Q4_0); break;
    case RF_TYPE_Q5_0: st = RF_MMQ_D(RF_TYPE_Q5_0); break;
    case RF_TYPE_Q8_0: st = RF_MMQ_D(RF_TYPE_Q8_0); break;
    case RF_TYPE_Q4_K: st = RF_MMQ_D(RF_TYPE_Q4_K); break;
    case RF_TYPE_Q5_K: st = RF_MMQ_D(RF_TYPE_Q5_K); break;
    case RF_TYPE_MXFP4: st = RF_MMQ_D(RF_TYPE_MXFP4); break;
    case RF_MMQ_UA(RF_TYPE_Q4_0): st = RF_MMQ_D(RF_MMQ_UA(RF_TYPE_Q4_0)); break;
    case RF_MMQ_UA(RF_TYPE_Q5_0): st = RF_MMQ_D(RF_MMQ_UA(RF_TYPE_Q5_0)); break;
    case RF_MMQ_UA(RF_TYPE_Q8_0): st = RF_MMQ_D(RF_MMQ_UA(RF_TYPE_Q8_0)); break;
    case RF_MMQ_UA(RF_TYPE_Q6_K): st = RF_MMQ_D(RF_MMQ_UA(RF_TYPE_Q6_K)); break;
    default: st = RF_MMQ_D(RF_TYPE_Q6_K); break;
    }
#undef RF_MMQ_D
    if (!st && splits > 1 && !(keep && *keep)) st = rf_gpu_sum_parts(ctx, y, out, n_tokens * n_out, splits);
    if (pb) ctx->scratch_used = mark; /* stream order (and rf_pdl_wait) protects the reuse */
    return st;
}
#endif

extern "C" rf_status rf_gpu_sum_parts(rf_gpu_ctx *ctx, float *y, const float *parts, int64_t n, int np) {
    const char *op = "rf_gpu_sum_parts";
    RF_GPU_REQUIRE(y && parts && n >= 1 && np >= 1 && np <= 8, op, "%lld elements in %d parts", (long long)n, np);
#if defined(RF_HIP) /* no MMQ there: nothing leaves its parts */
    return rf_set_error(RF_ERR_UNSUPPORTED, "%s: no MMQ kernel on HIP", op);
#else
    return rf_gpu_launch(ctx, "rf_k_mmq_reduce", true, rf_k_mmq_reduce, dim3(rf_gpu_blocks(n, 256)), dim3(256), 0, y,
                         parts, n, np);
#endif
}

extern "C" rf_status rf_gpu_mmq(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                                int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_mmq";
    rf_status st = rf_mmq_check(ctx, op, w, wtype, x, y, n_tokens, n_in, n_out);
    if (st) return st;
#if defined(RF_HIP)
    return rf_set_error(RF_ERR_UNSUPPORTED, "%s: no MMQ kernel on HIP", op);
#else
    /* rk read once, so that x's rounding and the kernels agree */
    const int rk = rf_gpu_mmq_rk(wtype);
    size_t mark;
    void *xq;
    /* x's quantization and the partial sums in one piece of scratch (the arena grows only while
     * nothing else is in use) */
    const size_t xqb = (rf_gpu_xq_bytes(n_tokens, n_in) + 255) & ~(size_t)255,
                 pb = rf_mmq_part_bytes(ctx, wtype, n_tokens, n_in, n_out);
    if ((st = rf_gpu_tmp(ctx, xqb + pb, &xq, &mark))) return st;
    st = rf_gemv_launch_quantize_x(ctx, xq, 1, rk, x, (int)n_tokens, n_in);
    if (!st) st = rf_mmq_run(ctx, y, w, wtype, xq, rk, n_tokens, n_in, n_out, pb ? (char *)xq + xqb : NULL);
    ctx->scratch_used = mark; /* stream order (and rf_pdl_wait) protects the reuse */
    return st;
#endif
}

extern "C" rf_status rf_gpu_mmq_xq(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq, int rk,
                                   int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_mmq_xq";
    const rf_status st = rf_mmq_check(ctx, op, w, wtype, xq, y, n_tokens, n_in, n_out);
    if (st) return st;
    RF_GPU_REQUIRE(rf_mmq_kquant(wtype) ? rk == 1 || (rk == 3 && n_in % 256 == 0) : rk == 0, op,
                   "records %d for weight type %d (K-quants: 1 or 3, the others 0)", rk, (int)wtype);
#if defined(RF_HIP)
    return rf_set_error(RF_ERR_UNSUPPORTED, "%s: no MMQ kernel on HIP", op);
#else
    return rf_mmq_run(ctx, y, w, wtype, xq, rk, n_tokens, n_in, n_out, NULL);
#endif
}

extern "C" rf_status rf_gpu_mmq_xq_parts(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq,
                                         int rk, int64_t n_tokens, int64_t n_in, int64_t n_out, float *parts,
                                         size_t cap, int *np) {
    *np = 0;
#if defined(RF_HIP)
    (void)parts, (void)cap;
    return rf_gpu_mmq_xq(ctx, y, w, wtype, xq, rk, n_tokens, n_in, n_out);
#else
    const char *op = "rf_gpu_mmq_xq";
    const rf_status st = rf_mmq_check(ctx, op, w, wtype, xq, y, n_tokens, n_in, n_out);
    if (st) return st;
    RF_GPU_REQUIRE(rf_mmq_kquant(wtype) ? rk == 1 || (rk == 3 && n_in % 256 == 0) : rk == 0, op,
                   "records %d for weight type %d (K-quants: 1 or 3, the others 0)", rk, (int)wtype);
    return rf_mmq_run(ctx, y, w, wtype, xq, rk, n_tokens, n_in, n_out, parts, cap, np);
#endif
}
