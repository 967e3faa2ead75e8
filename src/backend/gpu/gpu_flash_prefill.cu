/* gpu_flash_prefill.cu — attention of a prompt chunk on the tensor cores: the tokens of one
 * sequence at consecutive positions over its paged f16 or q8_0 K/V, flash-attention style (a block takes
 * 64 tokens of one query head (32 at head dim 512), walks the keys in tiles of 64 (32) through the
 * block table with an online softmax; mma.sync m16n8k16, f16 operands, f32 accumulation). CUDA
 * sm_80+ only: elsewhere rf_gpu_flash_prefill_supported is false and the caller keeps
 * rf_gpu_paged_attention. Twin: rf_ref_paged_attention (contract in gpu.h). */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_mma.cuh"

#include <limits.h>

/* The kernel's geometry for head dim D.
 * D <= 128: 4 warps, each with 16 query rows (BR = 64) whose Q fragments (D / 4 registers) and
 *   output accumulators (D / 2) span all of D.
 * D = 256 / 512: those would be 192 / 384 registers, so D is split: DS = D / 128 warps share a
 *   row group's 16 rows, each owning DW = 128 columns of Q (its part of every score) and of the
 *   output, i.e. D = 128's registers. The DS partial scores of a tile meet in shared memory (X:
 *   [W][NT * 4][32] f32, a lane's fragment elements at its lane) and every warp of the group sums
 *   them in part order, so all hold the same bits of each score and the same softmax state.
 *   8 warps: 4 row groups at 256 (BR = 64), 2 at 512 (BR = 32).
 * Shared memory (halves): the block's Q tile [BR][QS] and two stages of the K and V tiles [BC][QS]
 * each (QS = D + 8: the 8 rows of an ldmatrix fall in different banks); the next tile is copied in
 * (cp.async) while the current one is multiplied. Split heads read Q into registers once, so its
 * tile shares the K/V stages' space (ALIAS). Bytes: 87,040 at D = 128; 167,936 at 256 (K/V
 * 135,168 + X 32,768); 149,504 at 512 (keys in tiles of BC = 32: K/V 133,120 + X 16,384), so one
 * block (8 warps) per SM where the device allows that much (H100/H200: 227 KiB; A100's 163 KiB
 * takes 512 only; 99 KiB parts neither). */
template <int D> struct rf_fp_geo {
    static_assert(D <= 128 || D == 256 || D == 512, "head dims: up to 128, 256, 512");
    static constexpr int DS = D <= 128 ? 1 : D / 128; /* warps sharing a row group */
    static constexpr int DW = D / DS;                 /* columns of D per warp */
    static constexpr int W = D <= 128 ? 4 : 8;        /* warps per block */
    static constexpr int RG = W / DS;                 /* row groups of 16 */
    static constexpr int BR = 16 * RG;                /* query rows (tokens) per block */
    static constexpr int BC = D > 256 ? 32 : 64;      /* keys per tile */
    static constexpr int NT = BC / 8;                 /* n-tiles of 8 keys */
    static constexpr int QS = D + 8;
    static constexpr bool ALIAS = DS > 1;
    static constexpr size_t kv0 = ALIAS ? 0 : (size_t)BR * QS; /* halves */
    static constexpr size_t kv_end = kv0 + 4 * (size_t)BC * QS, q_end = (size_t)BR * QS;
    static constexpr size_t x0 = (kv_end > q_end ? kv_end : q_end) * 2; /* bytes */
    static constexpr size_t smem = x0 + (DS > 1 ? (size_t)W * NT * 4 * 32 * 4 : 0);
};

#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* rf_mma_f16, rf_pack_h2, rf_ldsm4, rf_ldsm4_t: gpu_mma.cuh */
static __device__ __forceinline__ uint32_t rf_ld_h2(const rf_half *p) { return *reinterpret_cast<const uint32_t *>(p); }
/* 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read) */
static __device__ __forceinline__ void rf_cp16_or_zero(rf_half *dst, const rf_half *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(rf_smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
/* barrier id among the first `threads` threads that reach it (a row group's warps) */
static __device__ __forceinline__ void rf_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
/* q8_0 piece pc (elements 8 pc .. 8 pc + 7) of the head row whose first block is at b (blocks of
 * 34 bytes, 2-byte aligned): (scale bits, quants 0..3, quants 4..7) as 2-byte loads */
static __device__ __forceinline__ uint4 rf_fp_ld_q8(const uint8_t *b, int pc) {
    b += (pc / 4) * 34;
    const uint16_t *h = reinterpret_cast<const uint16_t *>(b + 2 + (pc % 4) * 8);
    return make_uint4(*reinterpret_cast<const uint16_t *>(b), (uint32_t)h[0] | ((uint32_t)h[1] << 16),
                      (uint32_t)h[2] | ((uint32_t)h[3] << 16), 0u);
}
/* ... dequantized to d * q (exact in f32) and rounded to f16 for the tensor cores */
static __device__ __forceinline__ uint4 rf_fp_q8_to_h8(const uint4 w) {
    const float d = __half2float(__ushort_as_half((unsigned short)(w.x & 0xFFFFu)));
    uint32_t o[4];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const uint32_t q = j ? w.z : w.y;
        o[2 * j] = rf_pack_h2(d * (float)(int8_t)q, d * (float)(int8_t)(q >> 8));
        o[2 * j + 1] = rf_pack_h2(d * (float)(int8_t)(q >> 16), d * (float)(int8_t)(q >> 24));
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* rf_k_flash_prefill's steps (inlined). A warp's rows are wr .. wr + 15 of the block, its
 * columns of D d0 .. d0 + DW - 1 (all of D up to 128: the arithmetic of the unsplit kernel). */

/* The block's Q tile, rounded to f16 (rows past n are zeros), into Qs; then this warp's A
 * fragments of its 16 rows and DW columns into qa. */
template <int D>
static __device__ __forceinline__ void rf_fp_q_tile(uint32_t (&qa)[rf_fp_geo<D>::DW / 16][4], rf_half *Qs,
                                                    const float *q, int r0, int n, int h, int n_head, int wr, int d0,
                                                    int g, int c) {
    using G = rf_fp_geo<D>;
    constexpr int QS = G::QS, NK = G::DW / 16;
    const int tid = threadIdx.x;
    for (int i = tid; i < G::BR * (D / 4); i += G::W * 32) {
        const int r = i / (D / 4), d = i % (D / 4) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < n) x = *(const float4 *)(q + ((int64_t)(r0 + r) * n_head + h) * D + d);
        *(uint32_t *)&Qs[r * QS + d] = rf_pack_h2(x.x, x.y);
        *(uint32_t *)&Qs[r * QS + d + 2] = rf_pack_h2(x.z, x.w);
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < NK; ks++) {
        const int d = d0 + ks * 16 + 2 * c;
        qa[ks][0] = rf_ld_h2(&Qs[(wr + g) * QS + d]);
        qa[ks][1] = rf_ld_h2(&Qs[(wr + g + 8) * QS + d]);
        qa[ks][2] = rf_ld_h2(&Qs[(wr + g) * QS + d + 8]);
        qa[ks][3] = rf_ld_h2(&Qs[(wr + g + 8) * QS + d + 8]);
    }
}

/* The warp's scores (its DW columns' part of them) against the tile's keys (Ks): s[nt] is the C
 * fragment of keys nt * 8 .. nt * 8 + 7 of its 16 rows. */
template <int D>
static __device__ __forceinline__ void rf_fp_scores(float (&s)[rf_fp_geo<D>::NT][4],
                                                    const uint32_t (&qa)[rf_fp_geo<D>::DW / 16][4], const rf_half *Ks,
                                                    int d0, int lane) {
    using G = rf_fp_geo<D>;
    constexpr int QS = G::QS, NK = G::DW / 16, NT = G::NT;
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        s[nt + 1][0] = s[nt + 1][1] = s[nt + 1][2] = s[nt + 1][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < NK; ks++) {
            uint32_t kb[4]; /* (nt, k lo), (nt, k hi), (nt + 1, k lo), (nt + 1, k hi) */
            rf_ldsm4(kb, &Ks[(nt * 8 + (lane & 7) + ((lane >> 4) << 3)) * QS + d0 + ks * 16 + ((lane >> 3) & 1) * 8]);
            rf_mma_f16(s[nt], qa[ks], kb[0], kb[1]);
            rf_mma_f16(s[nt + 1], qa[ks], kb[2], kb[3]);
        }
    }
}

/* Split heads: the DS partial scores of row group rg summed in part order (every warp of the
 * group then holds the same bits). Xs: [W][NT * 4][32] f32; barrier 1 + rg holds the group's
 * warps only. The block barrier that closes each tile keeps the next tile's stores after these
 * loads. */
template <int D>
static __device__ __forceinline__ void rf_fp_sum_parts(float (&s)[rf_fp_geo<D>::NT][4], float *Xs, int warp, int rg,
                                                       int lane) {
    using G = rf_fp_geo<D>;
    constexpr int E = G::NT * 4;
    float *mine = Xs + (size_t)warp * E * 32;
#pragma unroll
    for (int i = 0; i < E; i++) mine[i * 32 + lane] = s[i / 4][i % 4];
    rf_bar_sync(1 + rg, G::DS * 32);
    const float *grp = Xs + (size_t)rg * G::DS * E * 32;
#pragma unroll
    for (int i = 0; i < E; i++) {
        float t = grp[i * 32 + lane];
#pragma unroll
        for (int p = 1; p < G::DS; p++) t += grp[(p * E + i) * 32 + lane];
        s[i / 4][i % 4] = t;
    }
}

/* The tile's online softmax for this thread's two rows (a at position pa, b at pb; keys from kt):
 * scaled, softcapped and masked scores, the running maxima (ma, mb) and sums (la, lb), the
 * accumulator o rescaled, then o += P.V (P rounded to f16) from the tile's values (Vs, the
 * warp's columns d0 ..). */
template <int D>
static __device__ __forceinline__ void rf_fp_softmax_pv(float (&o)[rf_fp_geo<D>::DW / 8][4], float &ma, float &mb,
                                                        float &la, float &lb, float (&s)[rf_fp_geo<D>::NT][4],
                                                        const rf_half *Vs, int kt, int pa, int pb, int d0, int c,
                                                        int lane, float scale, float softcap, int window) {
    using G = rf_fp_geo<D>;
    constexpr int QS = G::QS, ND = G::DW / 8, NT = G::NT;
    float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int kp = kt + nt * 8 + 2 * c + e;
            float va = s[nt][e] * scale, vb = s[nt][2 + e] * scale;
            if (softcap > 0.0f) va = softcap * tanhf(va / softcap), vb = softcap * tanhf(vb / softcap);
            const bool sa = kp <= pa && (window <= 0 || kp > pa - window);
            const bool sb = kp <= pb && (window <= 0 || kp > pb - window);
            s[nt][e] = sa ? va : -INFINITY;
            s[nt][2 + e] = sb ? vb : -INFINITY;
            xa = fmaxf(xa, s[nt][e]);
            xb = fmaxf(xb, s[nt][2 + e]);
        }
    xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 1));
    xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 2));
    xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 1));
    xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 2));
    const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
    /* nothing seen yet (max still -inf): keep the state as it is */
    const float fa = na == -INFINITY ? 1.0f : __expf(ma - na), fb = nb == -INFINITY ? 1.0f : __expf(mb - nb);
    ma = na, mb = nb;
    uint32_t pf[NT / 2][4];
    float sa = 0.0f, sb = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const float p0a = na == -INFINITY ? 0.0f : __expf(s[nt][0] - na);
        const float p1a = na == -INFINITY ? 0.0f : __expf(s[nt][1] - na);
        const float p0b = nb == -INFINITY ? 0.0f : __expf(s[nt][2] - nb);
        const float p1b = nb == -INFINITY ? 0.0f : __expf(s[nt][3] - nb);
        sa += p0a + p1a;
        sb += p0b + p1b;
        pf[nt / 2][(nt & 1) * 2 + 0] = rf_pack_h2(p0a, p1a);
        pf[nt / 2][(nt & 1) * 2 + 1] = rf_pack_h2(p0b, p1b);
    }
    la = la * fa + sa;
    lb = lb * fb + sb;
#pragma unroll
    for (int dn = 0; dn < ND; dn++) o[dn][0] *= fa, o[dn][1] *= fa, o[dn][2] *= fb, o[dn][3] *= fb;
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++)
#pragma unroll
        for (int dn = 0; dn < ND; dn += 2) {
            uint32_t vb[4]; /* (k lo, dn), (k hi, dn), (k lo, dn + 1), (k hi, dn + 1) */
            rf_ldsm4_t(vb, &Vs[(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * QS + d0 + dn * 8 + (lane >> 4) * 8]);
            rf_mma_f16(o[dn], pf[kk], vb[0], vb[1]);
            rf_mma_f16(o[dn + 1], pf[kk], vb[2], vb[3]);
        }
}

/* The rows' end: the sums over the row's 4 lanes, head h's sink (one more logit in the max and
 * the denominator, no value), and o / l written for rows ra = r0 + wr + g and ra + 8 below n
 * (the warp's columns d0 ..). */
template <int D>
static __device__ __forceinline__ void rf_fp_write(float *out, float (&o)[rf_fp_geo<D>::DW / 8][4], float ma, float mb,
                                                   float la, float lb, const float *sinks, int h, int n, int n_head,
                                                   int r0, int wr, int d0, int g, int c) {
    constexpr int ND = rf_fp_geo<D>::DW / 8;
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
    if (sinks) { /* head h's sink: one more logit in the max and the denominator, no value */
        const float sk = sinks[h], na = fmaxf(ma, sk), nb = fmaxf(mb, sk);
        const float fa = ma == -INFINITY ? 0.0f : __expf(ma - na), fb = mb == -INFINITY ? 0.0f : __expf(mb - nb);
        la = la * fa + (na == -INFINITY ? 0.0f : __expf(sk - na));
        lb = lb * fb + (nb == -INFINITY ? 0.0f : __expf(sk - nb));
#pragma unroll
        for (int dn = 0; dn < ND; dn++) o[dn][0] *= fa, o[dn][1] *= fa, o[dn][2] *= fb, o[dn][3] *= fb;
    }
    const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
    const int ra = r0 + wr + g, rb = ra + 8;
#pragma unroll
    for (int dn = 0; dn < ND; dn++) {
        const int d = d0 + dn * 8 + 2 * c;
        if (ra < n) *(float2 *)(out + ((int64_t)ra * n_head + h) * D + d) = make_float2(o[dn][0] * ia, o[dn][1] * ia);
        if (rb < n) *(float2 *)(out + ((int64_t)rb * n_head + h) * D + d) = make_float2(o[dn][2] * ib, o[dn][3] * ib);
    }
}
#endif

/* flash_prefill: for each row r < n (token r of the run, position p0 + r) and query head h:
 *   out[r, h] = softmax_j(s_j) . v_j over the keys j of the sequence with
 *   max(0, p0 + r - window + 1 if window > 0) <= j <= p0 + r, s_j = scale * (f16(q[r, h]) . k_j),
 *   softcapped (c * tanh(s / c)) when softcap > 0; key j is row bt[j / bs] * bs + j % bs of the
 *   caches k, v f16 [rows, n_head_kv, D] (Q8: q8_0, rows of D / 32 blocks per kv head), kv head
 *   h / (n_head / n_head_kv); sinks (f32 [n_head] or NULL): head h's sink logit joins the row's max
 *   and denominator once, at the end.
 * Q8: a tile's K and V pieces are loaded into registers before the products of the tile before
 *   it (the loads overlap that work as the cp.async of the f16 path do), then dequantized and
 *   stored to shared memory as f16, so the tensor-core part is the f16 path's. Cost: 34 bytes
 *   read per 32 elements instead of 64, 6 more registers per piece (48 at D = 128) and the
 *   convert + 16-byte shared store per 8 elements; each K and V element is rounded to f16
 *   (relative error <= 2^-11 on top of q8_0's own rounding).
 * in: q f32 [n, n_head, D] (16-byte aligned), bt int32 (the sequence's block-table row); out f32
 *   [n, n_head, D].
 * launch: grid (ceil(n / BR), n_head), W * 32 threads, rf_fp_geo<D>::smem bytes of dynamic shared
 *   memory; D in {64, 80, 96, 128, 256, 512}; every position <= p0 + n - 1 of the sequence is in the
 *   cache.
 * numerics: as the twin, except that the softmax weights enter P.V rounded to f16 (relative
 *   error <= 2^-11 each) and the sums run in another order: rel. L2 < 1e-3 against it (Q8: against
 *   the twin on the dequantized K/V, with K and V also rounded to f16: rel. L2 < 2e-3, see
 *   tests/gpu/test_gpu_flash_prefill.c). Split heads (256, 512) add the partial scores of D's
 *   parts in a fixed order: one more summation order, the same bound.
 * A row's arithmetic depends only on its own position and the keys it sees: key tiles start at
 *   multiples of BC from position 0, a tile a row sees nothing of is an exact no-op (weights 0,
 *   V rows past the last key zero-filled), so the output of a token does not depend on how its
 *   prompt was cut into chunks (as long as each chunk takes this kernel). */
template <int D, bool Q8>
__global__ void __launch_bounds__(rf_fp_geo<D>::W * 32)
rf_k_flash_prefill(float *out, const float *q, const void *kcv, const void *vcv, const int32_t *bt, int n,
                   int p0, int bs, int n_head, int n_head_kv, float scale, int window, float softcap,
                   const float *sinks) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    static_assert(RF_WARP_SIZE == 32, "mma.sync: 32-lane warps");
    using G = rf_fp_geo<D>;
    constexpr int QS = G::QS, NK = G::DW / 16, ND = G::DW / 8, NT = G::NT, BR = G::BR, BC = G::BC, NTH = G::W * 32;
    extern __shared__ __align__(16) unsigned char rf_fp_sm[];
    /* stage s: K at KV + 2s BC QS, V after; X (split heads) past both */
    rf_half *Qs = (rf_half *)rf_fp_sm, *KV = Qs + G::kv0;
    float *Xs = (float *)(rf_fp_sm + G::x0);
    (void)Xs;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int rg = warp / G::DS, d0 = warp % G::DS * G::DW; /* row group, first column */
    const int h = blockIdx.y, hk = h / (n_head / n_head_kv);
    const int r0 = blockIdx.x * BR, wr = rg * 16;
    const int64_t rstride = (int64_t)n_head_kv * D;
    const rf_half *kc = (const rf_half *)kcv, *vc = (const rf_half *)vcv;

    uint32_t qa[NK][4];
    rf_fp_q_tile<D>(qa, Qs, q, r0, n, h, n_head, wr, d0, g, c);
    if constexpr (G::ALIAS) __syncthreads(); /* every warp has its fragments before K/V overwrite Qs */
    /* this thread's two rows (a: g, b: g + 8 of the warp) by position; -1: past the run */
    const int pa = r0 + wr + g < n ? p0 + r0 + wr + g : -1, pb = r0 + wr + g + 8 < n ? p0 + r0 + wr + g + 8 : -1;
    const int last = (r0 + BR < n ? r0 + BR : n) - 1;
    const int khi = p0 + last; /* the block's last key */
    const int klo = window > 0 && p0 + r0 - window + 1 > 0 ? p0 + r0 - window + 1 : 0;
    /* the warp's key range (tiles outside it are skipped: no-ops for its rows) */
    const int wlo = window > 0 ? p0 + r0 + wr - window + 1 : 0;
    const int whi = r0 + wr < n ? p0 + (r0 + wr + 15 < n ? r0 + wr + 15 : n - 1) : -1;

    float o[ND][4];
#pragma unroll
    for (int dn = 0; dn < ND; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

    /* K and V rows of keys kt..kt+BC-1 into stage st (rows past the block's last key: zeros) */
    auto load_tile = [&](int kt, int st) {
        rf_half *Kd = KV + (size_t)2 * st * BC * QS, *Vd = Kd + BC * QS;
        for (int i = tid; i < BC * (D / 8); i += NTH) {
            const int j = i / (D / 8), d = i % (D / 8) * 8, kp = kt + j;
            const bool ok = kp <= khi;
            const int64_t row = ok ? (int64_t)bt[kp / bs] * bs + kp % bs : 0;
            rf_cp16_or_zero(&Kd[j * QS + d], kc + row * rstride + (int64_t)hk * D + d, ok);
            rf_cp16_or_zero(&Vd[j * QS + d], vc + row * rstride + (int64_t)hk * D + d, ok);
        }
        rf_cp_async_commit();
    };
    /* q8_0: this thread's NPC pieces of the next tile's K (then V) in registers, raw: K's are
     * loaded before this tile's Q.K products and stored after them, V's around the P.V products
     * (one of the two in registers at a time: 24 registers at D = 128, where both spilled) */
    constexpr int NPC = BC * (D / 8) / NTH;
    static_assert(!Q8 || (D % 32 == 0 && BC * (D / 8) % NTH == 0), "q8_0 tile pieces");
    uint4 rq[NPC];
    auto fetch_q8 = [&](int kt, const void *src) {
        const uint8_t *cb = (const uint8_t *)src;
        const int64_t hb = (int64_t)hk * (D / 32), rb = rstride / 32; /* blocks */
#pragma unroll
        for (int p = 0; p < NPC; p++) {
            const int i = tid + p * NTH, j = i / (D / 8), pc = i % (D / 8), kp = kt + j;
            rq[p] = make_uint4(0u, 0u, 0u, 0u); /* past the block's last key: zeros (d = 0) */
            if (kp <= khi) rq[p] = rf_fp_ld_q8(cb + ((int64_t)bt[kp / bs] * bs * rb + (kp % bs) * rb + hb) * 34, pc);
        }
    };
    auto put_q8 = [&](int st, int v) { /* v: 0 K, 1 V */
        rf_half *Dd = KV + (size_t)(2 * st + v) * BC * QS;
#pragma unroll
        for (int p = 0; p < NPC; p++) {
            const int i = tid + p * NTH, j = i / (D / 8), d = i % (D / 8) * 8;
            *(uint4 *)&Dd[j * QS + d] = rf_fp_q8_to_h8(rq[p]);
        }
    };
    const int kt0 = klo / BC * BC;
    if constexpr (Q8) {
        fetch_q8(kt0, kcv);
        put_q8(0, 0);
        fetch_q8(kt0, vcv);
        put_q8(0, 1);
    } else {
        load_tile(kt0, 0);
    }
    for (int kt = kt0, it = 0; kt <= khi; kt += BC, it++) {
        const bool more = kt + BC <= khi; /* a next tile to fetch */
        if constexpr (Q8) {
            if (more) fetch_q8(kt + BC, kcv); /* stored after this tile's Q.K products */
        } else if (more) {
            load_tile(kt + BC, (it + 1) & 1); /* that stage was read in iteration it - 1 */
            rf_cp_async_wait<1>();
        } else {
            rf_cp_async_wait<0>();
        }
        __syncthreads(); /* tile it is in shared memory for every thread */
        const rf_half *Ks = KV + (size_t)2 * (it & 1) * BC * QS, *Vs = Ks + BC * QS;
        bool kput = false; /* Q8: the next tile's K stored (every thread stores its pieces, skipping or not) */
        if (whi >= kt && kt + BC - 1 >= wlo) { /* else no row of this warp (or its group) sees the tile */
            float s[NT][4];
            rf_fp_scores<D>(s, qa, Ks, d0, lane);
            if constexpr (Q8) /* stage (it + 1) & 1 was last read in iteration it - 1, before its closing sync */
                if (more) {
                    put_q8((it + 1) & 1, 0);
                    fetch_q8(kt + BC, vcv); /* stored after this tile's P.V products */
                    kput = true;
                }
            if constexpr (G::DS > 1) rf_fp_sum_parts<D>(s, Xs, warp, rg, lane);
            rf_fp_softmax_pv<D>(o, ma, mb, la, lb, s, Vs, kt, pa, pb, d0, c, lane, scale, softcap, window);
        }
        if constexpr (Q8)
            if (more) {
                if (!kput) { /* this warp skipped the tile */
                    put_q8((it + 1) & 1, 0);
                    fetch_q8(kt + BC, vcv);
                }
                put_q8((it + 1) & 1, 1);
            }
        __syncthreads(); /* every warp is done with stage it & 1 before it is refilled */
    }
    rf_fp_write<D>(out, o, ma, mb, la, lb, sinks, h, n, n_head, r0, wr, d0, g, c);
#else
    (void)out, (void)q, (void)kcv, (void)vcv, (void)bt, (void)n, (void)p0, (void)bs, (void)n_head, (void)n_head_kv;
    (void)scale, (void)window, (void)softcap, (void)sinks;
    RF_DEVICE_TRAP();
#endif
}

extern "C" bool rf_gpu_flash_prefill_supported(rf_gpu_ctx *ctx, rf_type kv_type, int64_t head_dim) {
#if defined(RF_HIP)
    (void)ctx, (void)kv_type, (void)head_dim;
    return false; /* mma.sync: the HIP build keeps rf_gpu_paged_attention */
#else
    if (ctx->info.cc_major < 8) return false;
    if (head_dim == 256 || head_dim == 512) { /* split heads: f16 or q8_0, where the shared memory fits */
        if (kv_type != RF_TYPE_F16 && kv_type != RF_TYPE_Q8_0) return false;
        return rf_gpu_smem_optin(ctx) >= (head_dim == 256 ? rf_fp_geo<256>::smem : rf_fp_geo<512>::smem);
    }
    return (kv_type == RF_TYPE_F16 && (head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128)) ||
           (kv_type == RF_TYPE_Q8_0 && (head_dim == 64 || head_dim == 96 || head_dim == 128));
#endif
}

template <int D, bool Q8>
static rf_status rf_fp_go(rf_gpu_ctx *ctx, float *out, const float *q, const void *k, const void *v,
                          const int32_t *bt, int n, int p0, int bs, int n_head, int n_head_kv, float scale,
                          int window, float softcap, const float *sinks) {
    const size_t smem = rf_fp_geo<D>::smem;
    static size_t attr[RF_GPU_MAX_DEVICES];
    auto kern = rf_k_flash_prefill<D, Q8>;
    const rf_status ast = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(kern), smem, 0, attr, "rf_k_flash_prefill");
    if (ast) return ast;
    constexpr int BR = rf_fp_geo<D>::BR;
    const dim3 grid((unsigned)((n + BR - 1) / BR), (unsigned)n_head);
    return rf_gpu_launch(ctx, "rf_k_flash_prefill", false, rf_k_flash_prefill<D, Q8>, grid, dim3(rf_fp_geo<D>::W * 32),
                         smem, out, q, k, v, bt, n, p0, bs, n_head, n_head_kv, scale, window, softcap, sinks);
}

extern "C" rf_status rf_gpu_flash_prefill(rf_gpu_ctx *ctx, float *out, const float *q, const void *k, const void *v,
                                          rf_type kv_type, int64_t n, int64_t pos0, const int32_t *bt_row,
                                          int64_t block_size, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                          float scale, int64_t window, float softcap, const float *sinks) {
    const char *op = "rf_gpu_flash_prefill";
    RF_GPU_REQUIRE(rf_gpu_flash_prefill_supported(ctx, kv_type, head_dim), op,
                   "not available for K/V type %d, head_dim %lld on this device", (int)kv_type, (long long)head_dim);
    RF_GPU_REQUIRE(n >= 0 && n <= 65535LL * 32 && pos0 >= 0 && pos0 + n < (1LL << 30), op,
                   "n=%lld pos0=%lld", (long long)n, (long long)pos0);
    RF_GPU_REQUIRE(n_head >= 1 && n_head <= 65535 && n_head_kv >= 1 && n_head % n_head_kv == 0, op,
                   "n_head=%lld must be a multiple of n_head_kv=%lld (and <= 65535)", (long long)n_head,
                   (long long)n_head_kv);
    RF_GPU_REQUIRE(block_size >= 1 && block_size <= INT_MAX && window >= 0 && window <= INT_MAX, op,
                   "block_size=%lld window=%lld", (long long)block_size, (long long)window);
    if (n == 0) return RF_OK;
    RF_GPU_REQUIRE(out && q && k && v && bt_row, op, "NULL pointer argument");
    RF_GPU_REQUIRE((((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) == 0, op, "q, k and v must be 16-byte aligned");
    const int a[] = {(int)n, (int)pos0, (int)block_size, (int)n_head, (int)n_head_kv};
    if (kv_type == RF_TYPE_Q8_0) switch (head_dim) {
        case 64: return rf_fp_go<64, true>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
        case 96: return rf_fp_go<96, true>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
        case 256: return rf_fp_go<256, true>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
        case 512: return rf_fp_go<512, true>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
        default: return rf_fp_go<128, true>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
        }
    switch (head_dim) {
    case 64: return rf_fp_go<64, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    case 80: return rf_fp_go<80, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    case 96: return rf_fp_go<96, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    case 256: return rf_fp_go<256, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    case 512: return rf_fp_go<512, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    default: return rf_fp_go<128, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    }
}
