/* gpu_flash_prefill.cu — attention of a prompt chunk on the tensor cores: the tokens of one
 * sequence at consecutive positions over its paged f16 or q8_0 K/V, flash-attention style (a block takes
 * 64 tokens of one query head, walks the keys in tiles of 64 through the block table with an
 * online softmax; mma.sync m16n8k16, f16 operands, f32 accumulation). CUDA sm_80+ only:
 * elsewhere rf_gpu_flash_prefill_supported is false and the caller keeps rf_gpu_paged_attention.
 * Twin: rf_ref_paged_attention (contract in gpu.h). */
#include "backend/gpu/gpu_internal.h"

#include <limits.h>

#define RF_FP_BR 64 /* query rows (tokens) per block: RF_FP_WARPS warps of 16 */
#define RF_FP_BC 64 /* keys per tile */
#define RF_FP_WARPS 4

/* Shared memory (halves): the block's Q tile [BR][QS] and two stages of the K and V tiles
 * [BC][QS] each (QS = D + 8: the 8 rows of an ldmatrix fall in different banks); the next tile
 * is copied in (cp.async) while the current one is multiplied. */
template <int D> struct rf_fp_geo {
    static constexpr int QS = D + 8;
    static constexpr size_t smem = ((size_t)RF_FP_BR * QS + 4 * (size_t)RF_FP_BC * QS) * 2;
};

#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
static __device__ __forceinline__ void rf_mma_f16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ uint32_t rf_pack_h2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}
static __device__ __forceinline__ uint32_t rf_ld_h2(const rf_half *p) { return *reinterpret_cast<const uint32_t *>(p); }
/* four 8x8 b16 matrices from shared memory, lane l giving the address of row l % 8 of matrix
 * l / 8; .trans hands each thread the transposed pair (the B operand from row-major V) */
static __device__ __forceinline__ void rf_ldsm4(uint32_t *r, const rf_half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(rf_smem_addr(p)));
}
static __device__ __forceinline__ void rf_ldsm4_t(uint32_t *r, const rf_half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(rf_smem_addr(p)));
}
/* 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read) */
static __device__ __forceinline__ void rf_cp16_or_zero(rf_half *dst, const rf_half *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(rf_smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
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

/* rf_k_flash_prefill's steps, cut out of it as they stood (inlined, every operation and its
 * order unchanged, so the bits are too). */

/* The block's Q tile, rounded to f16 (rows past n are zeros), into Qs; then this warp's A
 * fragments of its 16 rows (wr ..) into qa. */
template <int D>
static __device__ __forceinline__ void rf_fp_q_tile(uint32_t (&qa)[D / 16][4], rf_half *Qs, const float *q, int r0,
                                                    int n, int h, int n_head, int wr, int g, int c) {
    constexpr int QS = rf_fp_geo<D>::QS, NK = D / 16;
    const int tid = threadIdx.x;
    for (int i = tid; i < RF_FP_BR * (D / 4); i += RF_FP_WARPS * 32) {
        const int r = i / (D / 4), d = i % (D / 4) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < n) x = *(const float4 *)(q + ((int64_t)(r0 + r) * n_head + h) * D + d);
        *(uint32_t *)&Qs[r * QS + d] = rf_pack_h2(x.x, x.y);
        *(uint32_t *)&Qs[r * QS + d + 2] = rf_pack_h2(x.z, x.w);
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < NK; ks++) {
        qa[ks][0] = rf_ld_h2(&Qs[(wr + g) * QS + ks * 16 + 2 * c]);
        qa[ks][1] = rf_ld_h2(&Qs[(wr + g + 8) * QS + ks * 16 + 2 * c]);
        qa[ks][2] = rf_ld_h2(&Qs[(wr + g) * QS + ks * 16 + 8 + 2 * c]);
        qa[ks][3] = rf_ld_h2(&Qs[(wr + g + 8) * QS + ks * 16 + 8 + 2 * c]);
    }
}

/* The warp's scores against the tile's keys (Ks): s[nt] is the C fragment of keys nt * 8 ..
 * nt * 8 + 7 of its 16 rows. */
template <int D>
static __device__ __forceinline__ void rf_fp_scores(float (&s)[RF_FP_BC / 8][4], const uint32_t (&qa)[D / 16][4],
                                                    const rf_half *Ks, int lane) {
    constexpr int QS = rf_fp_geo<D>::QS, NK = D / 16, NT = RF_FP_BC / 8;
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        s[nt + 1][0] = s[nt + 1][1] = s[nt + 1][2] = s[nt + 1][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < NK; ks++) {
            uint32_t kb[4]; /* (nt, k lo), (nt, k hi), (nt + 1, k lo), (nt + 1, k hi) */
            rf_ldsm4(kb, &Ks[(nt * 8 + (lane & 7) + ((lane >> 4) << 3)) * QS + ks * 16 + ((lane >> 3) & 1) * 8]);
            rf_mma_f16(s[nt], qa[ks], kb[0], kb[1]);
            rf_mma_f16(s[nt + 1], qa[ks], kb[2], kb[3]);
        }
    }
}

/* The tile's online softmax for this thread's two rows (a at position pa, b at pb; keys from kt):
 * scaled, softcapped and masked scores, the running maxima (ma, mb) and sums (la, lb), the
 * accumulator o rescaled, then o += P.V (P rounded to f16) from the tile's values (Vs). */
template <int D>
static __device__ __forceinline__ void rf_fp_softmax_pv(float (&o)[D / 8][4], float &ma, float &mb, float &la,
                                                        float &lb, float (&s)[RF_FP_BC / 8][4], const rf_half *Vs,
                                                        int kt, int pa, int pb, int c, int lane, float scale,
                                                        float softcap, int window) {
    constexpr int QS = rf_fp_geo<D>::QS, ND = D / 8, NT = RF_FP_BC / 8;
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
            rf_ldsm4_t(vb, &Vs[(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * QS + dn * 8 + (lane >> 4) * 8]);
            rf_mma_f16(o[dn], pf[kk], vb[0], vb[1]);
            rf_mma_f16(o[dn + 1], pf[kk], vb[2], vb[3]);
        }
}

/* The rows' end: the sums over the row's 4 lanes, head h's sink (one more logit in the max and
 * the denominator, no value), and o / l written for rows ra = r0 + wr + g and ra + 8 below n. */
template <int D>
static __device__ __forceinline__ void rf_fp_write(float *out, float (&o)[D / 8][4], float ma, float mb, float la,
                                                   float lb, const float *sinks, int h, int n, int n_head, int r0,
                                                   int wr, int g, int c) {
    constexpr int ND = D / 8;
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
        const int d = dn * 8 + 2 * c;
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
 * launch: grid (ceil(n / 64), n_head), 128 threads, rf_fp_geo<D>::smem bytes of dynamic shared
 *   memory; D in {64, 80, 96, 128}; every position <= p0 + n - 1 of the sequence is in the cache.
 * numerics: as the twin, except that the softmax weights enter P.V rounded to f16 (relative
 *   error <= 2^-11 each) and the sums run in another order: rel. L2 < 1e-3 against it (Q8: against
 *   the twin on the dequantized K/V, with K and V also rounded to f16: rel. L2 < 2e-3, see
 *   tests/gpu/test_gpu_flash_prefill.c).
 * A row's arithmetic depends only on its own position and the keys it sees: key tiles start at
 *   multiples of 64 from position 0, a tile a row sees nothing of is an exact no-op (weights 0,
 *   V rows past the last key zero-filled), so the output of a token does not depend on how its
 *   prompt was cut into chunks (as long as each chunk takes this kernel). */
template <int D, bool Q8>
__global__ void __launch_bounds__(RF_FP_WARPS * 32)
rf_k_flash_prefill(float *out, const float *q, const void *kcv, const void *vcv, const int32_t *bt, int n,
                   int p0, int bs, int n_head, int n_head_kv, float scale, int window, float softcap,
                   const float *sinks) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    static_assert(RF_WARP_SIZE == 32, "mma.sync: 32-lane warps");
    constexpr int QS = rf_fp_geo<D>::QS, NK = D / 16, ND = D / 8, NT = RF_FP_BC / 8;
    extern __shared__ __align__(16) unsigned char rf_fp_sm[];
    rf_half *Qs = (rf_half *)rf_fp_sm, *KV = Qs + RF_FP_BR * QS; /* stage s: K at KV + 2s BC QS, V after */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int h = blockIdx.y, hk = h / (n_head / n_head_kv);
    const int r0 = blockIdx.x * RF_FP_BR, wr = warp * 16;
    const int64_t rstride = (int64_t)n_head_kv * D;
    const rf_half *kc = (const rf_half *)kcv, *vc = (const rf_half *)vcv;

    uint32_t qa[NK][4];
    rf_fp_q_tile<D>(qa, Qs, q, r0, n, h, n_head, wr, g, c);
    /* this thread's two rows (a: g, b: g + 8 of the warp) by position; -1: past the run */
    const int pa = r0 + wr + g < n ? p0 + r0 + wr + g : -1, pb = r0 + wr + g + 8 < n ? p0 + r0 + wr + g + 8 : -1;
    const int last = (r0 + RF_FP_BR < n ? r0 + RF_FP_BR : n) - 1;
    const int khi = p0 + last; /* the block's last key */
    const int klo = window > 0 && p0 + r0 - window + 1 > 0 ? p0 + r0 - window + 1 : 0;
    /* the warp's key range (tiles outside it are skipped: no-ops for its rows) */
    const int wlo = window > 0 ? p0 + r0 + wr - window + 1 : 0;
    const int whi = r0 + wr < n ? p0 + (r0 + wr + 15 < n ? r0 + wr + 15 : n - 1) : -1;

    float o[ND][4];
#pragma unroll
    for (int dn = 0; dn < ND; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

    /* K and V rows of keys kt..kt+63 into stage st (rows past the block's last key: zeros) */
    auto load_tile = [&](int kt, int st) {
        rf_half *Kd = KV + (size_t)2 * st * RF_FP_BC * QS, *Vd = Kd + RF_FP_BC * QS;
        for (int i = tid; i < RF_FP_BC * (D / 8); i += RF_FP_WARPS * 32) {
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
    constexpr int NPC = RF_FP_BC * (D / 8) / (RF_FP_WARPS * 32);
    static_assert(!Q8 || (D % 32 == 0 && RF_FP_BC * (D / 8) % (RF_FP_WARPS * 32) == 0), "q8_0 tile pieces");
    uint4 rq[NPC];
    auto fetch_q8 = [&](int kt, const void *src) {
        const uint8_t *cb = (const uint8_t *)src;
        const int64_t hb = (int64_t)hk * (D / 32), rb = rstride / 32; /* blocks */
#pragma unroll
        for (int p = 0; p < NPC; p++) {
            const int i = tid + p * RF_FP_WARPS * 32, j = i / (D / 8), pc = i % (D / 8), kp = kt + j;
            rq[p] = make_uint4(0u, 0u, 0u, 0u); /* past the block's last key: zeros (d = 0) */
            if (kp <= khi) rq[p] = rf_fp_ld_q8(cb + ((int64_t)bt[kp / bs] * bs * rb + (kp % bs) * rb + hb) * 34, pc);
        }
    };
    auto put_q8 = [&](int st, int v) { /* v: 0 K, 1 V */
        rf_half *Dd = KV + (size_t)(2 * st + v) * RF_FP_BC * QS;
#pragma unroll
        for (int p = 0; p < NPC; p++) {
            const int i = tid + p * RF_FP_WARPS * 32, j = i / (D / 8), d = i % (D / 8) * 8;
            *(uint4 *)&Dd[j * QS + d] = rf_fp_q8_to_h8(rq[p]);
        }
    };
    const int kt0 = klo / RF_FP_BC * RF_FP_BC;
    if constexpr (Q8) {
        fetch_q8(kt0, kcv);
        put_q8(0, 0);
        fetch_q8(kt0, vcv);
        put_q8(0, 1);
    } else {
        load_tile(kt0, 0);
    }
    for (int kt = kt0, it = 0; kt <= khi; kt += RF_FP_BC, it++) {
        const bool more = kt + RF_FP_BC <= khi; /* a next tile to fetch */
        if constexpr (Q8) {
            if (more) fetch_q8(kt + RF_FP_BC, kcv); /* stored after this tile's Q.K products */
        } else if (more) {
            load_tile(kt + RF_FP_BC, (it + 1) & 1); /* that stage was read in iteration it - 1 */
            rf_cp_async_wait<1>();
        } else {
            rf_cp_async_wait<0>();
        }
        __syncthreads(); /* tile it is in shared memory for every thread */
        const rf_half *Ks = KV + (size_t)2 * (it & 1) * RF_FP_BC * QS, *Vs = Ks + RF_FP_BC * QS;
        bool kput = false; /* Q8: the next tile's K stored (every thread stores its pieces, skipping or not) */
        if (whi >= kt && kt + RF_FP_BC - 1 >= wlo) { /* else no row of this warp sees the tile */
            float s[NT][4];
            rf_fp_scores<D>(s, qa, Ks, lane);
            if constexpr (Q8) /* stage (it + 1) & 1 was last read in iteration it - 1, before its closing sync */
                if (more) {
                    put_q8((it + 1) & 1, 0);
                    fetch_q8(kt + RF_FP_BC, vcv); /* stored after this tile's P.V products */
                    kput = true;
                }
            rf_fp_softmax_pv<D>(o, ma, mb, la, lb, s, Vs, kt, pa, pb, c, lane, scale, softcap, window);
        }
        if constexpr (Q8)
            if (more) {
                if (!kput) { /* this warp skipped the tile */
                    put_q8((it + 1) & 1, 0);
                    fetch_q8(kt + RF_FP_BC, vcv);
                }
                put_q8((it + 1) & 1, 1);
            }
        __syncthreads(); /* every warp is done with stage it & 1 before it is refilled */
    }
    rf_fp_write<D>(out, o, ma, mb, la, lb, sinks, h, n, n_head, r0, wr, g, c);
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
    return ctx->info.cc_major >= 8 &&
           ((kv_type == RF_TYPE_F16 && (head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128)) ||
            (kv_type == RF_TYPE_Q8_0 && (head_dim == 64 || head_dim == 96 || head_dim == 128)));
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
    const dim3 grid((unsigned)((n + RF_FP_BR - 1) / RF_FP_BR), (unsigned)n_head);
    return rf_gpu_launch(ctx, "rf_k_flash_prefill", false, rf_k_flash_prefill<D, Q8>, grid, dim3(RF_FP_WARPS * 32),
                         smem, out, q, k, v, bt, n, p0, bs, n_head, n_head_kv, scale, window, softcap, sinks);
}

extern "C" rf_status rf_gpu_flash_prefill(rf_gpu_ctx *ctx, float *out, const float *q, const void *k, const void *v,
                                          rf_type kv_type, int64_t n, int64_t pos0, const int32_t *bt_row,
                                          int64_t block_size, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                          float scale, int64_t window, float softcap, const float *sinks) {
    const char *op = "rf_gpu_flash_prefill";
    RF_GPU_REQUIRE(rf_gpu_flash_prefill_supported(ctx, kv_type, head_dim), op,
                   "not available for K/V type %d, head_dim %lld on this device", (int)kv_type, (long long)head_dim);
    RF_GPU_REQUIRE(n >= 0 && n <= 65535LL * RF_FP_BR && pos0 >= 0 && pos0 + n < (1LL << 30), op,
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
        default: return rf_fp_go<128, true>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
        }
    switch (head_dim) {
    case 64: return rf_fp_go<64, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    case 80: return rf_fp_go<80, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    case 96: return rf_fp_go<96, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    default: return rf_fp_go<128, false>(ctx, out, q, k, v, bt_row, a[0], a[1], a[2], a[3], a[4], scale, (int)window, softcap, sinks);
    }
}
