/* gpu_attention_wide.cu — paged attention for heads wider than the other kernels take (up to 512:
 * Gemma 4's full-attention layers), decode rows and prompt chunks alike, over an f16 or q8_0
 * (CUDA: also f32) cache: K/V tiles staged in shared memory, the keys split over blocks with a reduce. Twin:
 * rf_ref_paged_attention (contract in gpu.h, rf_gpu_attention_wide).
 *
 * A row (token, query head) has one fixed tree of floating-point operations, whatever the batch:
 *   * tiles of RF_AW_TK keys at multiples of RF_AW_TK: scores (one thread per (key, row), the dot
 *     in dimension order), the tile's max m, weights e^(s - m) (0 for keys the row may not see),
 *     their butterfly sum l, and the P.V numerator in key order (zero weights skipped);
 *   * units of RF_AW_UNIT keys at multiples of RF_AW_UNIT: the unit's tiles folded in order;
 *   * the row: its units folded in order, head h's sink last, then one division.
 * Every fold is rf_pa_factors / rf_pa_apply on explicit IEEE intrinsics, in the block (one block
 * walks all units: mode RF_AW_TOTAL) or in rf_k_attn_wide_reduce (units spread over gridDim.z,
 * their states through memory: RF_AW_UNITS): the same bits either way, so a token's output does
 * not depend on the batch, the shape hint or max_pos. (Not the same bits as the <= 256 kernels,
 * nor between CUDA and HIP, whose tiles differ: RF_AW_TK.)
 *
 * Speed: a block holds up to RF_AW_RMAX rows sharing a kv head (the query heads of one token for
 * decode; for prompt chunks also consecutive tokens of a sequence) and reads each K and V row of a
 * tile once for all of them (cp.async where the device has it: the tile's K and V in flight
 * together). f32 arithmetic on the CUDA cores: decode is bound by the K/V bytes, a prompt chunk by
 * the shared-memory reads (about 2-3x the time a tensor-core kernel would take; docs/perf-gpu.md). */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_softmax_merge.cuh"

#include <limits.h>

#if defined(RF_HIP)
#define RF_AW_TK 16 /* keys per tile: the K and V tiles of 512-wide f16 rows fit 64 KiB of LDS */
#else
#define RF_AW_TK 32
#endif
#define RF_AW_UNIT 128  /* keys per unit (the partial states' grain), anchored at multiples of 128 */
#define RF_AW_THREADS 128
#define RF_AW_RMAX 8    /* rows per block */
#define RF_AW_NG (RF_AW_THREADS / RF_AW_TK) /* row groups of the score phase */
#define RF_AW_RPT (RF_AW_RMAX / RF_AW_NG)   /* rows per thread in the score phase */
#define RF_AW_DMAX 512
#define RF_AW_SCRATCH (64u << 20) /* partial states per call at most (bytes), else one block walks all */

#define RF_AW_TOTAL 0 /* the block walks every unit of its rows and writes them */
#define RF_AW_UNITS 1 /* unit states to part / pml, rf_k_attn_wide_reduce folds them */

static_assert(RF_AW_UNIT % RF_AW_TK == 0 && RF_AW_RMAX % RF_AW_NG == 0 && RF_AW_TK <= 32, "wide attention tiles");

/* Tag of a q8_0 cache (blocks of 32: f16 scale, 32 int8; 34 bytes). */
struct rf_aw_q8 {
    uint8_t b;
};

/* Bytes of one kv head's row of D elements, and the row stride of a staged tile in shared memory
 * (f16: 16-byte loads from rows 16 bytes apart mod 128: no bank conflicts; q8_0: an odd number of
 * words, the 2-byte reads of the rows of a tile fall in different banks). */
template <typename KT> struct rf_aw_kt;
template <> struct rf_aw_kt<rf_half> {
    static __host__ __device__ constexpr int rb(int D) { return 2 * D; }
    static __host__ __device__ constexpr int ks(int D) { return 2 * D + 16; }
};
template <> struct rf_aw_kt<float> {
    static __host__ __device__ constexpr int rb(int D) { return 4 * D; }
    static __host__ __device__ constexpr int ks(int D) { return 4 * D + 16; }
};
template <> struct rf_aw_kt<rf_aw_q8> {
    static __host__ __device__ constexpr int rb(int D) { return D / 32 * 34; }
    static __host__ __device__ constexpr int ks(int D) { return D / 32 * 34 + ((D / 32 * 34 / 4) % 2 ? 0 : 4); }
};

/* The normalised output of a row's state with head h's sink (sinks NULL: none) folded in last as
 * one more state (max sink, sum 1, numerator 0); no key and no sink: 0. */
static __device__ __forceinline__ float rf_aw_final(float M, float L, float num, const float *sinks, int64_t h) {
    if (sinks) {
        float fa, fb;
        const int md = rf_pa_factors(M, L, sinks[h], 1.0f, fa, fb);
        num = rf_pa_apply(num, 0.0f, md, fa, fb);
    }
    return M == -INFINITY ? 0.0f : __fdiv_rn(num, L);
}

/* Asynchronous 4-byte global -> shared copy (cp.async, sm_80+; elsewhere a load and a store). */
static __device__ __forceinline__ void rf_aw_cp4(void *smem, const void *gmem) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(rf_smem_addr(smem)), "l"(gmem) : "memory");
#else
    *(uint32_t *)smem = *(const uint32_t *)gmem;
#endif
}

/* Cache rows of keys kt .. kt + RF_AW_TK - 1 of sequence sq into phys (threads tid < RF_AW_TK):
 * -1 outside [ulo, uhi], the keys no row of the pass may see. */
static __device__ __forceinline__ void rf_aw_phys(int *phys, const int32_t *__restrict__ bt, int sq, int max_blocks,
                                                  int bs, int kt, int ulo, int uhi) {
    if (threadIdx.x < RF_AW_TK) {
        const int j = kt + threadIdx.x;
        int ph = -1;
        if (j >= ulo && j <= uhi) {
            const int b = bt[(int64_t)sq * max_blocks + j / bs];
            ph = b >= 0 ? b * bs + j % bs : -1;
        }
        phys[threadIdx.x] = ph;
    }
}

/* The tile's rows of one cache (phys[j]: cache row of key j; -1: left unwritten, no row may see
 * that key) into dst, asynchronously: one commit group (rf_cp_async_wait, then a barrier). */
template <typename KT>
static __device__ __forceinline__ void rf_aw_copy(unsigned char *dst, const int *phys,
                                                  const unsigned char *__restrict__ src, int64_t rstride,
                                                  int64_t hoff, int D) {
    const int RB = rf_aw_kt<KT>::rb(D), KS = rf_aw_kt<KT>::ks(D);
    constexpr int W = sizeof(KT) >= 2 ? 16 : 4; /* bytes per copy */
    const int per = RB / W, n = RF_AW_TK * per;
    for (int i = threadIdx.x; i < n; i += RF_AW_THREADS) {
        const int j = i / per, c = (i % per) * W, ph = phys[j];
        if (ph < 0) continue;
        const int64_t go = (int64_t)ph * rstride + hoff + c;
        if (W == 16) rf_cp_async16(dst + j * KS + c, src + go);
        else rf_aw_cp4(dst + j * KS + c, src + go);
    }
    rf_cp_async_commit();
}

/* Elements 8 pc .. 8 pc + 7 of a staged row as floats (q8_0: d * q, exact in f32). */
template <typename KT> struct rf_aw_rd;
template <> struct rf_aw_rd<rf_half> {
    static __device__ __forceinline__ void piece8(const unsigned char *row, int pc, float *f) {
        const uint4 w = *reinterpret_cast<const uint4 *>(row + pc * 16);
        const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            f[2 * j] = rf_half2float(__ushort_as_half((unsigned short)(u[j] & 0xFFFFu)));
            f[2 * j + 1] = rf_half2float(__ushort_as_half((unsigned short)(u[j] >> 16)));
        }
    }
    /* elements d .. d + 3 (d % 4 == 0) */
    static __device__ __forceinline__ void piece4(const unsigned char *row, int d, float *f) {
        const uint2 w = *reinterpret_cast<const uint2 *>(row + d * 2);
        f[0] = rf_half2float(__ushort_as_half((unsigned short)(w.x & 0xFFFFu)));
        f[1] = rf_half2float(__ushort_as_half((unsigned short)(w.x >> 16)));
        f[2] = rf_half2float(__ushort_as_half((unsigned short)(w.y & 0xFFFFu)));
        f[3] = rf_half2float(__ushort_as_half((unsigned short)(w.y >> 16)));
    }
};
template <> struct rf_aw_rd<float> {
    static __device__ __forceinline__ void piece8(const unsigned char *row, int pc, float *f) {
        const float4 a = *reinterpret_cast<const float4 *>(row + pc * 32), b = *reinterpret_cast<const float4 *>(row + pc * 32 + 16);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    }
    static __device__ __forceinline__ void piece4(const unsigned char *row, int d, float *f) {
        const float4 a = *reinterpret_cast<const float4 *>(row + d * 4);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    }
};
template <> struct rf_aw_rd<rf_aw_q8> {
    static __device__ __forceinline__ void piece8(const unsigned char *row, int pc, float *f) {
        const unsigned char *b = row + (pc >> 2) * 34;
        const float d = rf_half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(b)));
        const unsigned short *h = reinterpret_cast<const unsigned short *>(b + 2 + (pc & 3) * 8);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned short x = h[j];
            f[2 * j] = __fmul_rn(d, (float)(int8_t)(x & 0xFF));
            f[2 * j + 1] = __fmul_rn(d, (float)(int8_t)(x >> 8));
        }
    }
    static __device__ __forceinline__ void piece4(const unsigned char *row, int e, float *f) {
        const unsigned char *b = row + (e >> 5) * 34;
        const float d = rf_half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(b)));
        const unsigned short *h = reinterpret_cast<const unsigned short *>(b + 2 + (e & 31));
        const unsigned short x0 = h[0], x1 = h[1];
        f[0] = __fmul_rn(d, (float)(int8_t)(x0 & 0xFF)), f[1] = __fmul_rn(d, (float)(int8_t)(x0 >> 8));
        f[2] = __fmul_rn(d, (float)(int8_t)(x1 & 0xFF)), f[3] = __fmul_rn(d, (float)(int8_t)(x1 >> 8));
    }
};

/* A tile's scores and softmax: thread (key j = tid % TK, row group g = tid / TK) scores rows
 * g + i * NG against key kt + j (the query rows sq, scaled, in shared memory), masks them by the
 * rows' ranges, and leaves the weights e^(s - m) in sp[j][row] and the rows' (m, l) in sml. */
template <typename KT>
static __device__ __forceinline__ void rf_aw_scores(float *sp, float2 *sml, const float *sq, const unsigned char *sk,
                                                    const int *phys, const int *slo, const int *shi, int kt, int D,
                                                    int R, float softcap) {
    const int j = threadIdx.x % RF_AW_TK, g = threadIdx.x / RF_AW_TK, KS = rf_aw_kt<KT>::ks(D);
    const unsigned char *row = sk + j * KS;
    const int kp = kt + j;
    const bool have = phys[j] >= 0;
    float dot[RF_AW_RPT];
#pragma unroll
    for (int i = 0; i < RF_AW_RPT; i++) dot[i] = 0.0f;
#pragma unroll 2
    for (int pc = 0; pc < D / 8; pc++) {
        float kf[8];
        rf_aw_rd<KT>::piece8(row, pc, kf);
#pragma unroll
        for (int i = 0; i < RF_AW_RPT; i++) {
            const int r = g + i * RF_AW_NG;
            if (r < R) { /* (no break: HIP unrolls only loops without one) */
                const float4 q0 = *reinterpret_cast<const float4 *>(sq + r * D + pc * 8);
                const float4 q1 = *reinterpret_cast<const float4 *>(sq + r * D + pc * 8 + 4);
                float s = dot[i];
                s = __fmaf_rn(q0.x, kf[0], s), s = __fmaf_rn(q0.y, kf[1], s);
                s = __fmaf_rn(q0.z, kf[2], s), s = __fmaf_rn(q0.w, kf[3], s);
                s = __fmaf_rn(q1.x, kf[4], s), s = __fmaf_rn(q1.y, kf[5], s);
                s = __fmaf_rn(q1.z, kf[6], s), s = __fmaf_rn(q1.w, kf[7], s);
                dot[i] = s;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < RF_AW_RPT; i++) {
        const int r = g + i * RF_AW_NG; /* uniform over the TK lanes of the group */
        if (r >= R) continue;
        float s = dot[i];
        if (softcap > 0.0f) s = __fmul_rn(softcap, tanhf(__fdiv_rn(s, softcap)));
        if (!have || kp < slo[r] || kp > shi[r]) s = -INFINITY;
        float m = s;
#pragma unroll
        for (int o = RF_AW_TK / 2; o > 0; o >>= 1) m = fmaxf(m, RF_SHFL_XOR(m, o));
        const float p = s == -INFINITY ? 0.0f : __expf(__fsub_rn(s, m));
        float l = p;
#pragma unroll
        for (int o = RF_AW_TK / 2; o > 0; o >>= 1) l = __fadd_rn(l, RF_SHFL_XOR(l, o));
        sp[j * RF_AW_RMAX + r] = p;
        if (j == 0) sml[r] = make_float2(m, l);
    }
}

/* The block's tokens (state 0 none, 1 padding, 2 invalid: a NaN row, 3 attends) into stok;
 * then the z == 0 blocks write the rows of padding (zeros) and invalid tokens (NaN). */
static __device__ __forceinline__ void rf_aw_tokens(float *out, int4 *stok, const int32_t *__restrict__ pos,
                                                    const int32_t *__restrict__ seq, int64_t t0, int n_tokens, int NQ,
                                                    int pmax, int n_head, int hk, int G, int GS, int hs, int D) {
    const int tid = threadIdx.x;
    if (tid < RF_AW_RMAX) {
        int st = 0, p = -1, sq = -1;
        if (tid < NQ && t0 + tid < n_tokens) {
            p = pos[t0 + tid], st = 1;
            if (p >= 0) {
                st = 2;
                if (p <= pmax) {
                    sq = seq[t0 + tid];
                    if (sq >= 0) st = 3;
                }
            }
        }
        stok[tid] = make_int4(p, sq, st, 0);
    }
    __syncthreads();
    if (blockIdx.z != 0) return;
    for (int idx = tid; idx < RF_AW_RMAX * D; idx += RF_AW_THREADS) {
        const int r = idx / D, d = idx % D, qi = r / GS, hh = hs * GS + r % GS;
        if (qi >= NQ || hh >= G) continue;
        const int st = stok[qi].z;
        if (st == 1 || st == 2)
            out[((t0 + qi) * n_head + (int64_t)hk * G + hh) * D + d] = st == 1 ? 0.0f : __int_as_float(0x7fc00000);
    }
}

/* The block's geometry and the pass's place, as the unit-end and write steps read them. */
struct rf_aw_at {
    float *out, *part;
    float2 *pml;
    const float *sinks;
    int64_t t0;
    int n_head, hk, G, GS, hs, D, nsp, mode;
};

/* A tile's P.V for this thread's dims d0 .. d0 + 3 (each V row read once for all rows, keys in
 * order, zero weights skipped), folded into the unit's state (ua, uM, uL) by the tile's (m, l). */
template <typename KT>
static __device__ __forceinline__ void rf_aw_pv(float (&ua)[RF_AW_RMAX][4], float (&uM)[RF_AW_RMAX],
                                                float (&uL)[RF_AW_RMAX], const float *sp, const float2 *sml,
                                                const unsigned char *sv, int KS, int d0, int R) {
    float acc[RF_AW_RMAX][4];
#pragma unroll
    for (int r = 0; r < RF_AW_RMAX; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
    for (int j = 0; j < RF_AW_TK; j++) {
        float vf[4], pr[RF_AW_RMAX];
        rf_aw_rd<KT>::piece4(sv + j * KS, d0, vf);
#pragma unroll
        for (int i = 0; i < RF_AW_RMAX / 4; i++) {
            const float4 x = *reinterpret_cast<const float4 *>(sp + j * RF_AW_RMAX + 4 * i);
            pr[4 * i] = x.x, pr[4 * i + 1] = x.y, pr[4 * i + 2] = x.z, pr[4 * i + 3] = x.w;
        }
#pragma unroll
        for (int r = 0; r < RF_AW_RMAX; r++) {
            if (r < R && pr[r] != 0.0f) {
#pragma unroll
                for (int e = 0; e < 4; e++) acc[r][e] = __fmaf_rn(pr[r], vf[e], acc[r][e]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RF_AW_RMAX; r++) {
        if (r >= R) continue;
        const float2 ml = sml[r];
        float fa, fb;
        const int md = rf_pa_factors(uM[r], uL[r], ml.x, ml.y, fa, fb);
#pragma unroll
        for (int e = 0; e < 4; e++) ua[r][e] = rf_pa_apply(ua[r][e], acc[r][e], md, fa, fb);
    }
}

/* Unit u's end, per row of the pass: mode TOTAL folds the unit's state into the row's; UNITS
 * writes it (a row whose keys lie in this one unit: normalised, to out; else to part / pml).
 * The unit's state is reset. */
static __device__ __forceinline__ void rf_aw_unit_end(const rf_aw_at &a, int u, float (&ua)[RF_AW_RMAX][4],
                                                      float (&uM)[RF_AW_RMAX], float (&uL)[RF_AW_RMAX],
                                                      float (&ra)[RF_AW_RMAX][4], float (&rM)[RF_AW_RMAX],
                                                      float (&rL)[RF_AW_RMAX], const int *slo, const int *shi, int d0,
                                                      int R) {
#pragma unroll
    for (int r = 0; r < RF_AW_RMAX; r++) {
        if (r >= R) continue;
        if (a.mode == RF_AW_TOTAL) {
            float fa, fb;
            const int md = rf_pa_factors(rM[r], rL[r], uM[r], uL[r], fa, fb);
#pragma unroll
            for (int e = 0; e < 4; e++) ra[r][e] = rf_pa_apply(ra[r][e], ua[r][e], md, fa, fb);
        } else if (slo[r] <= shi[r]) {
            const int ufr = slo[r] / RF_AW_UNIT, ulr = shi[r] / RF_AW_UNIT;
            if (u >= ufr && u <= ulr) {
                const int64_t orow = (a.t0 + r / a.GS) * a.n_head + (int64_t)a.hk * a.G + a.hs * a.GS + r % a.GS;
                if (ufr == ulr) {
                    float4 o;
                    o.x = rf_aw_final(uM[r], uL[r], ua[r][0], a.sinks, orow % a.n_head);
                    o.y = rf_aw_final(uM[r], uL[r], ua[r][1], a.sinks, orow % a.n_head);
                    o.z = rf_aw_final(uM[r], uL[r], ua[r][2], a.sinks, orow % a.n_head);
                    o.w = rf_aw_final(uM[r], uL[r], ua[r][3], a.sinks, orow % a.n_head);
                    *reinterpret_cast<float4 *>(a.out + orow * a.D + d0) = o;
                } else {
                    const int64_t si = orow * a.nsp + (u - ufr);
                    *reinterpret_cast<float4 *>(a.part + si * a.D + d0) = make_float4(ua[r][0], ua[r][1], ua[r][2], ua[r][3]);
                    if (d0 == 0) a.pml[si] = make_float2(uM[r], uL[r]);
                }
            }
        }
        uM[r] = -INFINITY, uL[r] = 0.0f;
        ua[r][0] = ua[r][1] = ua[r][2] = ua[r][3] = 0.0f;
    }
}

/* mode TOTAL, after a pass: its rows written normalised from the row states. */
static __device__ __forceinline__ void rf_aw_write_rows(const rf_aw_at &a, const float (&ra)[RF_AW_RMAX][4],
                                                        const float (&rM)[RF_AW_RMAX], const float (&rL)[RF_AW_RMAX],
                                                        const int *slo, const int *shi, int d0, int R) {
#pragma unroll
    for (int r = 0; r < RF_AW_RMAX; r++) {
        if (r >= R || slo[r] > shi[r]) continue;
        const int64_t orow = (a.t0 + r / a.GS) * a.n_head + (int64_t)a.hk * a.G + a.hs * a.GS + r % a.GS;
        float4 o;
        o.x = rf_aw_final(rM[r], rL[r], ra[r][0], a.sinks, orow % a.n_head);
        o.y = rf_aw_final(rM[r], rL[r], ra[r][1], a.sinks, orow % a.n_head);
        o.z = rf_aw_final(rM[r], rL[r], ra[r][2], a.sinks, orow % a.n_head);
        o.w = rf_aw_final(rM[r], rL[r], ra[r][3], a.sinks, orow % a.n_head);
        *reinterpret_cast<float4 *>(a.out + orow * a.D + d0) = o;
    }
}

/* attn_wide: rows (token t, query head h) of a block against their sequences' keys.
 *   Block (x, y, z): tokens t0 = x * NQ .. + NQ - 1, kv head hk = y / HS, head slice hs = y % HS
 *   (query heads hk * G + hs * GS .. + GS - 1); row r < R = NQ * GS: token t0 + r / GS, head slot
 *   r % GS. One pass per distinct sequence among the block's tokens (a pass's rows share its
 *   block table); a pass walks units u = first + z, first + z + gridDim.z, ... of the union of its
 *   rows' key ranges, and a unit's tiles in order.
 *   mode RF_AW_TOTAL (gridDim.z == 1): units fold into the rows, written normalised. RF_AW_UNITS:
 *   a row with one unit is written normalised, else unit u's (max, sum) goes to
 *   pml[row * nsp + u - its first unit] and its numerator to part[(...) * D + d].
 * in:  q f32 [n_tokens, n_head, D] (16-byte aligned); k, v: rows of n_head_kv * D elements of KT
 *      (16-byte aligned); pos, seq int32 [n_tokens]; bt int32 [*, max_blocks] (device).
 * out: out f32 [n_tokens, n_head, D].
 * launch: grid (ceil(n_tokens / NQ), n_head_kv * HS, Z), RF_AW_THREADS threads, rf_aw_smem(D)
 *   bytes of dynamic shared memory; D % 64 == 0, D <= 512, R <= RF_AW_RMAX.
 * tolerance vs rf_ref_paged_attention on the same K/V values (f16: and the query rounded to f16
 *   as the CPU does; q8_0: the dequantized d * q, the query unrounded): the sums run in another
 *   order, in f32: rel. L2 < 1e-5 (tests/gpu/test_gpu_attention_wide.c states the model). */
template <typename KT>
__global__ void __launch_bounds__(RF_AW_THREADS)
rf_k_attn_wide(float *out, float *part, float2 *pml, const float *__restrict__ q, const void *__restrict__ kv_k,
               const void *__restrict__ kv_v, const int32_t *__restrict__ pos, const int32_t *__restrict__ seq,
               const int32_t *__restrict__ bt, int n_tokens, int max_blocks, int bs, int n_head, int n_head_kv,
               int D, int G, int GS, int NQ, int HS, float scale, int window, float softcap, int pmax, int mode,
               int nsp, const float *__restrict__ sinks) {
    extern __shared__ __align__(16) unsigned char rf_aw_sm[];
    __shared__ __align__(16) float s_p[RF_AW_TK * RF_AW_RMAX]; /* [key][row] */
    __shared__ float2 s_ml[RF_AW_RMAX];
    __shared__ int s_phys[2][RF_AW_TK], s_lo[RF_AW_RMAX], s_hi[RF_AW_RMAX];
    __shared__ int4 s_tok[RF_AW_RMAX];
    const int KS = rf_aw_kt<KT>::ks(D);
    float *s_q = reinterpret_cast<float *>(rf_aw_sm);
    unsigned char *s_k = rf_aw_sm + (size_t)RF_AW_RMAX * D * 4, *s_v = s_k + (size_t)RF_AW_TK * KS;

    const int tid = threadIdx.x, R = NQ * GS;
    const int64_t t0 = (int64_t)blockIdx.x * NQ;
    const int hk = blockIdx.y / HS, hs = blockIdx.y % HS, z = blockIdx.z, Z = gridDim.z;
    rf_aw_tokens(out, s_tok, pos, seq, t0, n_tokens, NQ, pmax, n_head, hk, G, GS, hs, D);

    const int RB = rf_aw_kt<KT>::rb(D);
    const int64_t rstride = (int64_t)n_head_kv * RB, hoff = (int64_t)hk * RB; /* bytes */
    const unsigned char *kc = (const unsigned char *)kv_k, *vc = (const unsigned char *)kv_v;
    const int d0 = tid * 4; /* this thread's 4 dimensions in the P.V phase (d0 < D) */
    for (int i = 0; i < NQ; i++) { /* one pass per distinct sequence among the block's tokens */
        if (s_tok[i].z != 3) continue;
        const int sq = s_tok[i].y;
        bool dup = false;
        for (int j = 0; j < i; j++) dup = dup || (s_tok[j].z == 3 && s_tok[j].y == sq);
        if (dup) continue;

        /* the pass's rows: ranges (empty: lo > hi) and scaled queries */
        if (tid < RF_AW_RMAX) {
            const int qi = tid / GS, hh = hs * GS + tid % GS;
            int lo = 1, hi = 0;
            if (tid < R && hh < G && s_tok[qi].z == 3 && s_tok[qi].y == sq) {
                const int p = s_tok[qi].x;
                lo = window > 0 && p >= window ? p - window + 1 : 0, hi = p;
            }
            s_lo[tid] = lo, s_hi[tid] = hi;
        }
        __syncthreads();
        for (int idx = tid; idx < R * (D / 4); idx += RF_AW_THREADS) {
            const int r = idx / (D / 4), d = idx % (D / 4) * 4;
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (s_lo[r] <= s_hi[r]) {
                const int64_t qo = ((t0 + r / GS) * n_head + (int64_t)hk * G + hs * GS + r % GS) * D + d;
                x = *reinterpret_cast<const float4 *>(q + qo);
                if (sizeof(KT) == 2) { /* f16 cache: q rounded to f16 first, as the CPU and llama.cpp do */
                    x.x = rf_half2float(rf_float2half(x.x)), x.y = rf_half2float(rf_float2half(x.y));
                    x.z = rf_half2float(rf_float2half(x.z)), x.w = rf_half2float(rf_float2half(x.w));
                }
            }
            *reinterpret_cast<float4 *>(s_q + r * D + d) =
                make_float4(__fmul_rn(x.x, scale), __fmul_rn(x.y, scale), __fmul_rn(x.z, scale), __fmul_rn(x.w, scale));
        }
        int ulo = INT_MAX, uhi = -1;
        for (int r = 0; r < R; r++)
            if (s_lo[r] <= s_hi[r]) ulo = min(ulo, s_lo[r]), uhi = max(uhi, s_hi[r]);

        /* per row (this thread's 4 dims): the unit's state and, mode TOTAL, the row's */
        float uM[RF_AW_RMAX], uL[RF_AW_RMAX], rM[RF_AW_RMAX], rL[RF_AW_RMAX];
        float ua[RF_AW_RMAX][4], ra[RF_AW_RMAX][4];
#pragma unroll
        for (int r = 0; r < RF_AW_RMAX; r++) {
            uM[r] = rM[r] = -INFINITY, uL[r] = rL[r] = 0.0f;
#pragma unroll
            for (int e = 0; e < 4; e++) ua[r][e] = ra[r][e] = 0.0f;
        }
        const rf_aw_at at = {out, part, pml, sinks, t0, n_head, hk, G, GS, hs, D, nsp, mode};
        /* the pass's tiles in order: units u = first + z, + Z, ..., a unit's tiles of RF_AW_TK keys.
         * The next tile's K rows are copied while this one's P.V runs, its V rows while the next
         * scores run (cp.async: two commit groups per tile, K then V; elsewhere the copies are
         * plain loads and stores and nothing overlaps). */
        const int ulast = uhi / RF_AW_UNIT;
        int u = ulo / RF_AW_UNIT + z, kt = max(ulo, u * RF_AW_UNIT) / RF_AW_TK * RF_AW_TK, buf = 0;
        if (u <= ulast) {
            rf_aw_phys(s_phys[0], bt, sq, max_blocks, bs, kt, ulo, uhi);
            __syncthreads();
            rf_aw_copy<KT>(s_k, s_phys[0], kc, rstride, hoff, D);
            rf_aw_copy<KT>(s_v, s_phys[0], vc, rstride, hoff, D);
        }
        while (u <= ulast) {
            const bool uend = kt + RF_AW_TK > min(uhi, u * RF_AW_UNIT + RF_AW_UNIT - 1); /* the unit's last tile */
            const int un = uend ? u + Z : u;
            const int ktn = uend ? max(ulo, un * RF_AW_UNIT) / RF_AW_TK * RF_AW_TK : kt + RF_AW_TK;
            const bool more = un <= ulast;
            rf_cp_async_wait<1>(); /* this tile's K rows (its V rows may still be in flight) */
            __syncthreads();
            rf_aw_scores<KT>(s_p, s_ml, s_q, s_k, s_phys[buf], s_lo, s_hi, kt, D, R, softcap);
            if (more) rf_aw_phys(s_phys[buf ^ 1], bt, sq, max_blocks, bs, ktn, ulo, uhi);
            __syncthreads(); /* s_k read; s_p, s_ml and the next tile's rows written */
            if (more) rf_aw_copy<KT>(s_k, s_phys[buf ^ 1], kc, rstride, hoff, D);
            else rf_cp_async_commit(); /* an empty group: two per tile, always */
            rf_cp_async_wait<1>();     /* this tile's V rows */
            __syncthreads();
            if (d0 < D) {
                rf_aw_pv<KT>(ua, uM, uL, s_p, s_ml, s_v, KS, d0, R);
                if (uend) rf_aw_unit_end(at, u, ua, uM, uL, ra, rM, rL, s_lo, s_hi, d0, R);
            }
            __syncthreads(); /* s_v, s_p read */
            if (more) rf_aw_copy<KT>(s_v, s_phys[buf ^ 1], vc, rstride, hoff, D);
            else rf_cp_async_commit();
            u = un, kt = ktn, buf ^= 1;
        }
        if (mode == RF_AW_TOTAL && d0 < D) rf_aw_write_rows(at, ra, rM, rL, s_lo, s_hi, d0, R);
        __syncthreads(); /* s_lo, s_hi, s_q are the next pass's */
    }
}

/* attn_wide_reduce: for each row (t, h) whose keys span more than one unit, folds the unit states
 * rf_k_attn_wide left in part / pml in order, as the block's own fold does (the same bits), then
 * the sink and the division. Rows with one unit, padding and invalid tokens were written by
 * rf_k_attn_wide and are skipped.
 * launch: grid (n_tokens, n_head), D threads; a programmatic dependent launch after
 * rf_k_attn_wide where the device has it (waits for it before reading anything). */
__global__ void __launch_bounds__(RF_AW_DMAX)
rf_k_attn_wide_reduce(float *out, const float *__restrict__ part, const float2 *__restrict__ pml,
                      const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, int n_head, int D, int window,
                      int pmax, int nsp, const float *__restrict__ sinks) {
    rf_pdl_wait(); /* part, pml: written by rf_k_attn_wide, which may still be running */
    const int64_t t = blockIdx.x;
    const int h = blockIdx.y, d = threadIdx.x;
    const int p = pos[t];
    if (p < 0 || p > pmax || d >= D || seq[t] < 0) return;
    const int ufr = (window > 0 && p >= window ? p - window + 1 : 0) / RF_AW_UNIT, ulr = p / RF_AW_UNIT;
    if (ufr == ulr) return;
    const int64_t orow = t * n_head + h;
    float M = -INFINITY, L = 0.0f, num = 0.0f, fa, fb;
    constexpr int NB = 8; /* units whose loads are issued together */
    for (int u0 = ufr; u0 <= ulr; u0 += NB) {
        float2 mlb[NB];
        float ab[NB];
        rf_pa_load_units<NB>(mlb, ab, part, pml, orow, nsp, ufr, u0, ulr, D, d);
#pragma unroll
        for (int i = 0; i < NB; i++) {
            if (u0 + i <= ulr) {
                const int md = rf_pa_factors(M, L, mlb[i].x, mlb[i].y, fa, fb);
                num = rf_pa_apply(num, ab[i], md, fa, fb);
            }
        }
    }
    out[orow * D + d] = rf_aw_final(M, L, num, sinks, h);
}

/* ---- host ------------------------------------------------------------------------------- */

template <typename KT> static size_t rf_aw_smem(int D) {
    return (size_t)RF_AW_RMAX * D * 4 + 2 * (size_t)RF_AW_TK * rf_aw_kt<KT>::ks(D);
}

struct rf_aw_args {
    float *out, *part;
    float2 *pml;
    const float *q;
    const void *k, *v;
    const int32_t *pos, *seq, *bt;
    int n_tokens, max_blocks, bs, n_head, n_head_kv, D, G, GS, NQ, HS;
    float scale;
    int window;
    float softcap;
    int pmax, mode, nsp;
    const float *sinks;
};

template <typename KT> static rf_status rf_aw_go(rf_gpu_ctx *ctx, dim3 grid, const rf_aw_args &a) {
    static size_t attr[RF_GPU_MAX_DEVICES];
    const size_t smem = rf_aw_smem<KT>(a.D);
    const size_t stat = RF_AW_RMAX * RF_AW_TK * 4 + RF_AW_RMAX * 8 + 2 * RF_AW_TK * 4 + 2 * RF_AW_RMAX * 4 + RF_AW_RMAX * 16 + 256;
    auto kern = rf_k_attn_wide<KT>;
    const rf_status st = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(kern), smem, stat, attr, "rf_k_attn_wide");
    if (st) return st;
    return rf_gpu_launch(ctx, "rf_k_attn_wide", false, kern, grid, dim3(RF_AW_THREADS), smem, a.out, a.part, a.pml,
                         a.q, a.k, a.v, a.pos, a.seq, a.bt, a.n_tokens, a.max_blocks, a.bs, a.n_head, a.n_head_kv,
                         a.D, a.G, a.GS, a.NQ, a.HS, a.scale, a.window, a.softcap, a.pmax, a.mode, a.nsp, a.sinks);
}

/* f32 caches: a tile of 512-wide rows takes 2 x 64 KiB of shared memory, more than HIP devices give */
extern "C" bool rf_gpu_attention_wide_supported(rf_type kv_type, int64_t head_dim) {
#if defined(RF_HIP)
    const bool f32 = false;
#else
    const bool f32 = kv_type == RF_TYPE_F32;
#endif
    return (kv_type == RF_TYPE_F16 || kv_type == RF_TYPE_Q8_0 || f32) && head_dim >= 64 && head_dim <= RF_AW_DMAX &&
           head_dim % 64 == 0;
}

extern "C" rf_status rf_gpu_attention_wide(rf_gpu_ctx *ctx, float *out, const float *q, const void *k, const void *v,
                                           rf_type kv_type, int64_t n_tokens, const int32_t *pos, const int32_t *seq,
                                           const int32_t *block_table, int64_t max_blocks, int64_t block_size,
                                           int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                                           int64_t window, float softcap, int64_t max_pos, const float *sinks,
                                           bool decode) {
    const char *op = "rf_gpu_attention_wide";
    RF_GPU_REQUIRE(rf_gpu_attention_wide_supported(kv_type, head_dim), op,
                   "K/V type %d with head_dim %lld (want an f16 or q8_0 cache (f32: CUDA), head_dim a multiple of 64 up to %d)",
                   (int)kv_type, (long long)head_dim, RF_AW_DMAX);
    RF_GPU_REQUIRE(n_head >= 1 && n_head_kv >= 1 && n_head % n_head_kv == 0 && n_head <= 65535, op,
                   "n_head=%lld must be a multiple of n_head_kv=%lld (and <= 65535)", (long long)n_head,
                   (long long)n_head_kv);
    RF_GPU_REQUIRE(n_tokens >= 0 && n_tokens <= INT_MAX, op, "n_tokens=%lld", (long long)n_tokens);
    RF_GPU_REQUIRE(block_size >= 1 && block_size <= INT_MAX && max_blocks >= 1 && max_blocks <= INT_MAX, op,
                   "block_size=%lld max_blocks=%lld", (long long)block_size, (long long)max_blocks);
    RF_GPU_REQUIRE(window >= 0 && max_pos < (1LL << 30), op, "window=%lld max_pos=%lld", (long long)window,
                   (long long)max_pos);
    if (n_tokens == 0) return RF_OK;
    RF_GPU_REQUIRE(out && q && k && v && pos && seq && block_table, op, "NULL pointer argument");
    RF_GPU_REQUIRE((((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) == 0, op, "q, k and v must be 16-byte aligned");

    const int D = (int)head_dim;
    const int64_t G = n_head / n_head_kv;
    /* decode rows: the query heads of one token per block; prompt chunks: consecutive tokens of
     * a sequence fill the block's rows too, sharing each K/V tile */
    const int64_t GS = G < RF_AW_RMAX ? G : RF_AW_RMAX, NQ = decode ? 1 : RF_AW_RMAX / GS, HS = (G + GS - 1) / GS;
    const int64_t X = (n_tokens + NQ - 1) / NQ, Y = n_head_kv * HS;
    RF_GPU_REQUIRE(Y <= 65535, op, "n_head_kv=%lld too large", (long long)n_head_kv);

    const int64_t pmax64 = max_pos < max_blocks * block_size - 1 ? max_pos : max_blocks * block_size - 1;
    const int pmax = pmax64 < 0 ? -1 : (int)pmax64;
    const int win = window > 0 && window <= pmax ? (int)window : 0; /* a window over every position does nothing */
    const int64_t span = win > 0 ? win : (int64_t)pmax + 1;
    const int64_t nsp_u = pmax < 0 ? 1
                          : (span - 1) / RF_AW_UNIT + 2 < pmax / RF_AW_UNIT + 1 ? (span - 1) / RF_AW_UNIT + 2
                                                                                : pmax / RF_AW_UNIT + 1;
    /* units over gridDim.z when the rows alone leave the device idle (2 blocks per SM fit) */
    const int64_t target = 2LL * (ctx->info.sm_count > 0 ? ctx->info.sm_count : 1);
    const size_t row_slot = (size_t)n_tokens * (size_t)n_head * ((size_t)D + 2) * sizeof(float);
    int mode = RF_AW_TOTAL;
    int64_t Zb = 1, nsp = 1;
    if (X * Y < target && nsp_u > 1 && row_slot * (size_t)nsp_u <= RF_AW_SCRATCH) {
        const int64_t want = (target + X * Y - 1) / (X * Y);
        Zb = want < nsp_u ? want : nsp_u;
        if (Zb > 65535) Zb = 65535;
        if (Zb > 1) mode = RF_AW_UNITS, nsp = nsp_u;
        else Zb = 1;
    }
    rf_aw_args a;
    a.out = out, a.part = NULL, a.pml = NULL, a.q = q, a.k = k, a.v = v;
    a.pos = pos, a.seq = seq, a.bt = block_table;
    a.n_tokens = (int)n_tokens, a.max_blocks = (int)max_blocks, a.bs = (int)block_size;
    a.n_head = (int)n_head, a.n_head_kv = (int)n_head_kv, a.D = D, a.G = (int)G, a.GS = (int)GS;
    a.NQ = (int)NQ, a.HS = (int)HS, a.scale = scale, a.window = win, a.softcap = softcap;
    a.pmax = pmax, a.mode = mode, a.nsp = (int)nsp, a.sinks = sinks;

    size_t mark = ctx->scratch_used;
    if (mode == RF_AW_UNITS) {
        const size_t rows = (size_t)n_tokens * (size_t)n_head * (size_t)nsp;
        const size_t pbytes = rows * (size_t)D * sizeof(float);
        void *tmp;
        rf_status st = rf_gpu_tmp(ctx, pbytes + 256 + rows * sizeof(float2), &tmp, &mark);
        if (st) return st;
        a.part = (float *)tmp;
        a.pml = (float2 *)((char *)tmp + ((pbytes + 255) & ~(size_t)255));
    }
    const dim3 grid((unsigned)X, (unsigned)Y, (unsigned)Zb);
    rf_status st = kv_type == RF_TYPE_F16    ? rf_aw_go<rf_half>(ctx, grid, a)
                   : kv_type == RF_TYPE_Q8_0 ? rf_aw_go<rf_aw_q8>(ctx, grid, a)
                                             : rf_aw_go<float>(ctx, grid, a);
    if (!st && mode == RF_AW_UNITS)
        st = rf_gpu_launch(ctx, "rf_k_attn_wide_reduce", true, rf_k_attn_wide_reduce,
                           dim3((unsigned)n_tokens, (unsigned)n_head), dim3((unsigned)D), 0, out,
                           (const float *)a.part, (const float2 *)a.pml, pos, seq, a.n_head, D, win, pmax, a.nsp,
                           sinks);
    ctx->scratch_used = mark;
    return st;
}
