/* gpu_paged_attention.cuh — the device side of the paged-attention kernels (gpu_paged_attention.cu,
 * whose header comment states the batch invariance these serve): the block geometry, K/V piece
 * loads, the butterfly sums, a merged softmax state's output (the merge step itself:
 * gpu_softmax_merge.cuh), and rf_k_paged_attn's steps. */
#ifndef RF_GPU_PAGED_ATTENTION_CUH
#define RF_GPU_PAGED_ATTENTION_CUH

#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_softmax_merge.cuh"

#include <limits.h>

#define RF_PA_SPLIT 128      /* keys per split, anchored at multiples of 128 */
#define RF_PA_CHUNK 16       /* keys per warp and split */
#define RF_PA_WARPS (RF_PA_SPLIT / RF_PA_CHUNK)
#define RF_PA_GROUP 16       /* splits per group (2048 keys) */
#define RF_PA_MAXNQ 8        /* tokens per block at most (rows per warp <= 8) */
#define RF_PA_DECODE_MAX 64  /* up to this many tokens per call: one token per block */
#define RF_PA_SCRATCH (32u << 20) /* partial states per call at most (bytes), else fewer splits */
#define RF_PA_DECODE_RMAX 4 /* decode rows per warp at most (rf_gpu_paged_attention_route says why) */
#if defined(RF_HIP)
#define RF_PA_RMAX 4 /* rows per warp at most: 8 spills on gfx90a (f16: 224-424 bytes per lane) */
#else
#define RF_PA_RMAX 8
#endif


/* where a block's folded states go (kernel argument `mode`) */
#define RF_PA_TOTAL 0 /* the block walks every split of its rows and writes the rows */
#define RF_PA_SPLITS 1 /* split states to part/pml (one slot per split of a row) */
#define RF_PA_GROUPS 2 /* group states to part/pml (one slot per group of a row) */

__host__ __device__ constexpr int rf_pa_pow2(int x) { return x <= 1 ? 1 : 2 * rf_pa_pow2((x + 1) / 2); }

/* Tag type of a q8_0 cache (ggml's blocks of 32: f16 scale d, 32 int8 q; 34 bytes, so a block
 * sits at a 2-byte boundary). */
struct rf_pa_q8 {
    uint8_t b;
};

/* How the kernel addresses and reads a cache of KT. A row of one kv head is D / EPU units (f32,
 * f16: elements; q8_0: blocks of 32), so head hk of cache row ph starts at unit
 * ph * n_head_kv * D / EPU + hk * D / EPU; ld reads piece pc (EPP consecutive elements) of the
 * row starting at unit u into a uint4, cvt turns that into EPP floats. f32 / f16: one 16-byte
 * load. q8_0: pieces of 8 elements (a quarter block; the lane geometry of f16), 10 bytes read
 * (the scale and 8 quants as 2-byte loads: the blocks are only 2-byte aligned), dequantized in
 * registers to d * q exactly as the CPU's rf_cpu_row_to_f32 (the product of an f16 and an int8
 * is exact in f32): 5/8 of f16's bytes per key (the 4 lanes of a block read its scale once
 * from memory; the quants are half of f16's bytes). */
template <typename KT> struct rf_pa_kt {
    static constexpr int EPP = 16 / (int)sizeof(KT), EPU = 1, UB = (int)sizeof(KT); /* UB: bytes per unit */
    static __device__ __forceinline__ uint4 ld(const KT *__restrict__ c, int64_t u, int pc) {
        return *reinterpret_cast<const uint4 *>(c + u + pc * EPP);
    }
};
template <> struct rf_pa_kt<rf_pa_q8> {
    static constexpr int EPP = 8, EPU = 32, UB = 34;
    static __device__ __forceinline__ uint4 ld(const rf_pa_q8 *__restrict__ c, int64_t u, int pc) {
        const uint8_t *b = reinterpret_cast<const uint8_t *>(c) + (u + pc / 4) * 34;
        const uint16_t *h = reinterpret_cast<const uint16_t *>(b + 2 + (pc % 4) * 8);
        return make_uint4(*reinterpret_cast<const uint16_t *>(b), (uint32_t)h[0] | ((uint32_t)h[1] << 16),
                          (uint32_t)h[2] | ((uint32_t)h[3] << 16), 0u);
    }
};

/* Lane geometry of one K/V row of D elements of KT: P pieces of 16 bytes (EPP elements each),
 * L lanes per key (P rounded up to a power of two, at most a warp), NP pieces per lane, KPW keys
 * per warp step, NS steps per chunk, EL elements per lane, U0 steps whose loads are issued
 * together (the kernel halves it with 4 or more rows per warp, for the registers). Lane `lane`
 * serves key slot lane / L and pieces lane % L + i * L. */
template <int D, typename KT> struct rf_pa_geo {
    static constexpr int WS = RF_WARP_SIZE;
    static constexpr int EPP = rf_pa_kt<KT>::EPP;
    static constexpr int P = D / EPP;
    static constexpr int L = rf_pa_pow2(P) < WS ? rf_pa_pow2(P) : WS;
    static constexpr int NP = (P + L - 1) / L;
    static constexpr int KPW = WS / L;
    static constexpr int NS = RF_PA_CHUNK / KPW;
    static constexpr int EL = NP * EPP;
    static constexpr int U0 = 8 / NP < NS ? 8 / NP : NS;
    static_assert(D % EPP == 0 && NP <= 2 && NS >= 1 && NS % U0 == 0 && L >= 8, "paged attention geometry");
    static_assert(RF_PA_CHUNK <= WS && RF_PA_CHUNK % KPW == 0, "chunk vs warp");
};

/* A hint that the 128-byte line holding p is wanted soon: fetched into L2, no register waits for
 * it (CUDA; elsewhere nothing). */
static __device__ __forceinline__ void rf_pa_pf(const void *p) {
#if defined(RF_HIP)
    (void)p;
#else
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

/* The cache row of key j for sequence sq, or -1 where the lane holds no key of the chunk or no
 * row of the pass may see key j (lane < RF_PA_CHUNK: key j = chunk start + lane). */
static __device__ __forceinline__ int rf_pa_phys(const int32_t *__restrict__ bt, int sq, int max_blocks, int bs,
                                                 int lane, int j, int ulo, int uhi) {
    int phys = -1;
    if (lane < RF_PA_CHUNK && j >= ulo && j <= uhi) phys = bt[(int64_t)sq * max_blocks + j / bs] * bs + j % bs;
    return phys;
}

/* Every K and V line of a warp's chunk (lane l < RF_PA_CHUNK holds key l's cache row phys, -1:
 * none) prefetched into L2, so that the chunk's loads that follow (the later rounds of the K
 * reads, all of V, or the next split's) find it there instead of waiting on memory one round
 * after another; it changes no value. A row of RB bytes is named by its starts every 128 bytes
 * and its last byte (rows need not be line-aligned: q8_0 rows are 34-byte blocks). */
template <int D, typename KT>
static __device__ __forceinline__ void rf_pa_prefetch(const KT *__restrict__ k, const KT *__restrict__ v, int phys,
                                                      int64_t rstride, int64_t hoff, int lane) {
    constexpr int UB = rf_pa_kt<KT>::UB, RB = D / rf_pa_kt<KT>::EPU * UB, NA = (RB + 127) / 128 + 1;
    constexpr int N = RF_PA_CHUNK * NA, IT = (N + RF_WARP_SIZE - 1) / RF_WARP_SIZE;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i = it * RF_WARP_SIZE + lane, key = i / NA < RF_PA_CHUNK ? i / NA : RF_PA_CHUNK - 1;
        const int ph = RF_SHFL(phys, key); /* every lane takes part */
        if (i < N && ph >= 0) {
            const int a = i % NA;
            const int64_t off = ((int64_t)ph * rstride + hoff) * UB + (a * 128 < RB ? a * 128 : RB - 1);
            rf_pa_pf(reinterpret_cast<const char *>(k) + off);
            rf_pa_pf(reinterpret_cast<const char *>(v) + off);
        }
    }
}

/* Staging (the decode speed-up of rf_k_paged_attn's ST variant, CUDA sm_80+): a warp copies
 * its chunk's K rows, and separately its V rows, into its own shared-memory slots with cp.async
 * (no register holds them in flight, so a warp has a whole chunk's K and V, 8 KiB for f16 x 128,
 * outstanding at once instead of one round of U loads), and the next split's while it works on
 * this one. Slot i of a stage holds key i's head row (RB bytes, at a stride of RBP = RB rounded
 * up to 16); the reads that follow take the same 16-byte pieces from there that they took from
 * memory: the values, and so the bits, are unchanged. gr: bytes per copy (16, 8 or 4: the
 * largest that divides every row's address; the host's choice). */
template <int D, typename KT> struct rf_pa_stg {
    static constexpr int UB = rf_pa_kt<KT>::UB, RB = D / rf_pa_kt<KT>::EPU * UB, RBP = (RB + 15) / 16 * 16;
    static constexpr int BYTES = RF_PA_CHUNK * RBP; /* one stage (K or V) of one warp */
};
static __device__ __forceinline__ void rf_pa_cp4(unsigned s, const void *g) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(g) : "memory");
#else
    (void)s, (void)g;
    RF_DEVICE_TRAP();
#endif
}
/* The head rows of the chunk's keys (lane l < RF_PA_CHUNK holds key l's cache row phys, -1:
 * none, nothing copied) from c into the stage at smem address st, in copies of gr bytes; every
 * lane takes part (the shuffles). Not committed: the caller closes the group. */
template <int D, typename KT, int GR>
static __device__ __forceinline__ void rf_pa_stage_gr(unsigned st, const KT *__restrict__ c, int phys,
                                                      int64_t rstride, int64_t hoff, int lane) {
    typedef rf_pa_stg<D, KT> S;
    constexpr int gr = GR, npc = S::RB / GR, n = RF_PA_CHUNK * npc;
#pragma unroll 1
    for (int i0 = 0; i0 < n; i0 += RF_WARP_SIZE) { /* uniform trip count: every lane shuffles */
        const int i = i0 + lane, key = i / npc < RF_PA_CHUNK ? i / npc : RF_PA_CHUNK - 1, pc = i % npc;
        const int ph = RF_SHFL(phys, key);
        if (i < n && ph >= 0) {
            const char *src = reinterpret_cast<const char *>(c) + ((int64_t)ph * rstride + hoff) * S::UB + pc * gr;
            const unsigned dst = st + (unsigned)(key * S::RBP + pc * gr);
            if constexpr (gr == 16) rf_cp_async16_s(dst, src);
            else if constexpr (gr == 8) rf_cp_async8_s(dst, src);
            else rf_pa_cp4(dst, src);
        }
    }
}
template <int D, typename KT>
static __device__ __forceinline__ void rf_pa_stage(unsigned st, const KT *__restrict__ c, int phys, int64_t rstride,
                                                   int64_t hoff, int lane, int gr) {
    typedef rf_pa_stg<D, KT> S;
    if constexpr (S::RB % 16 == 0) { /* f16: rows of 2 x D bytes, 16-byte copies (the host's gr) */
        (void)gr;
        rf_pa_stage_gr<D, KT, 16>(st, c, phys, rstride, hoff, lane);
    } else { /* q8_0: rows of D / 32 blocks of 34 bytes, 8- or 4-byte copies */
        if constexpr (S::RB % 8 == 0) {
            if (gr == 8) {
                rf_pa_stage_gr<D, KT, 8>(st, c, phys, rstride, hoff, lane);
                return;
            }
        }
        rf_pa_stage_gr<D, KT, 4>(st, c, phys, rstride, hoff, lane);
    }
}

/* a piece of K/V (rf_pa_kt::ld) -> floats */
template <typename KT> struct rf_pa_cvt;
/* q8_0: the int8 q becomes a float without an integer conversion (a quarter-rate instruction on
 * sm_90, 32 of them per 16-byte piece of f16's bytes): q + 128 in the low byte of 2^23's bits is
 * the float 2^23 + q + 128, and subtracting 2^23 + 128 leaves q exactly, so d * q is the same
 * product as before, bit for bit. */
static __device__ __forceinline__ float rf_pa_i8f(uint32_t biased, int j) {
#if defined(RF_HIP) /* HIP's __byte_perm is a byte-array emulation: shift and mask instead */
    const uint32_t b = 0x4B000000u | ((biased >> (8 * j)) & 0xFFu);
#else
    const uint32_t b = __byte_perm(biased, 0x4B000000u, 0x7540u | (unsigned)j); /* one PRMT */
#endif
    return __fsub_rn(__uint_as_float(b), 8388736.0f);
}
template <> struct rf_pa_cvt<rf_pa_q8> {
    static __device__ __forceinline__ void run(const uint4 &w, float *f) {
        const float d = rf_half2float(__ushort_as_half((unsigned short)(w.x & 0xFFFFu)));
        const uint32_t y = w.y ^ 0x80808080u, z = w.z ^ 0x80808080u; /* q + 128 per byte */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            f[j] = __fmul_rn(d, rf_pa_i8f(y, j));
            f[4 + j] = __fmul_rn(d, rf_pa_i8f(z, j));
        }
    }
};
template <> struct rf_pa_cvt<float> {
    static __device__ __forceinline__ void run(const uint4 &w, float *f) {
        f[0] = __uint_as_float(w.x), f[1] = __uint_as_float(w.y);
        f[2] = __uint_as_float(w.z), f[3] = __uint_as_float(w.w);
    }
};
template <> struct rf_pa_cvt<rf_half> {
    static __device__ __forceinline__ void run(const uint4 &w, float *f) {
        const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            f[2 * j] = rf_half2float(__ushort_as_half((unsigned short)(u[j] & 0xFFFFu)));
            f[2 * j + 1] = rf_half2float(__ushort_as_half((unsigned short)(u[j] >> 16)));
        }
    }
};

/* R consecutive floats from / to shared memory (16-byte aligned when R % 4 == 0) */
template <int R> static __device__ __forceinline__ void rf_pa_lds(const float *p, float *v) {
    if constexpr (R % 4 == 0) {
#pragma unroll
        for (int i = 0; i < R / 4; i++) {
            const float4 x = reinterpret_cast<const float4 *>(p)[i];
            v[4 * i] = x.x, v[4 * i + 1] = x.y, v[4 * i + 2] = x.z, v[4 * i + 3] = x.w;
        }
    } else if constexpr (R == 2) {
        const float2 x = *reinterpret_cast<const float2 *>(p);
        v[0] = x.x, v[1] = x.y;
    } else {
        v[0] = p[0];
    }
}
template <int R> static __device__ __forceinline__ void rf_pa_sts(float *p, const float *v) {
    if constexpr (R % 4 == 0) {
#pragma unroll
        for (int i = 0; i < R / 4; i++)
            reinterpret_cast<float4 *>(p)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    } else if constexpr (R == 2) {
        *reinterpret_cast<float2 *>(p) = make_float2(v[0], v[1]);
    } else {
        p[0] = v[0];
    }
}

/* Sum of v[0..CNT) over the L lanes of a key (M = L / 2 at the call): the first log2(CNT)
 * butterfly levels are transposed (each lane sends the half of its values it gives away and
 * keeps the other half), the rest are plain. Afterwards v[0] holds the total of row
 * sl / (L / CNT) (sl = lane % L). Each sum adds the same two partial sums as a plain butterfly
 * per row would, so the result is the plain tree's, bit for bit, whatever CNT is. */
template <int CNT, int M> struct rf_pa_tsum {
    static __device__ __forceinline__ void run(float *v, int sl) {
        constexpr int H = CNT / 2;
        const bool up = (sl & M) != 0;
#pragma unroll
        for (int i = 0; i < H; i++) {
            const float send = up ? v[i] : v[i + H];
            const float keep = up ? v[i + H] : v[i];
            v[i] = __fadd_rn(keep, RF_SHFL_XOR(send, M));
        }
        rf_pa_tsum<H, M / 2>::run(v, sl);
    }
};
template <int M> struct rf_pa_tsum<1, M> {
    static __device__ __forceinline__ void run(float *v, int sl) {
        (void)sl;
#pragma unroll
        for (int m = M; m > 0; m /= 2) v[0] = __fadd_rn(v[0], RF_SHFL_XOR(v[0], m));
    }
};

/* normalised output of a merged state (no key at all: 0; NaN stays NaN) */
static __device__ __forceinline__ float rf_pa_final(float M, float den, float num) {
    return M == -INFINITY ? 0.0f : __fdiv_rn(num, den);
}
/* the same after folding in head h's attention sink (sinks f32 [n_head] or NULL): one more
 * state of max sinks[h], sum 1 and numerator 0, merged last by the same rule, so the row's
 * arithmetic stays fixed by the row alone */
static __device__ __forceinline__ float rf_pa_final_sink(float M, float den, float num, const float *sinks,
                                                         int64_t h) {
    if (sinks) {
        float fa, fb;
        const int md = rf_pa_factors(M, den, sinks[h], 1.0f, fa, fb);
        num = rf_pa_apply(num, 0.0f, md, fa, fb);
    }
    return rf_pa_final(M, den, num);
}

/* The shapes of rf_k_paged_attn for head size D, cache type KT and R rows per warp (rf_pa_geo),
 * shared by the kernel and its device helpers below. The helpers are the kernel's own steps cut
 * out as they stood (inlined, every operation and its order unchanged), so the bits are too. */
template <int D, typename KT, int R> struct rf_pa_cfg {
    typedef rf_pa_geo<D, KT> geo;
    static constexpr int WS = RF_WARP_SIZE, W = RF_PA_WARPS, CH = RF_PA_CHUNK, NT = W * WS;
    static constexpr int EPP = geo::EPP, P = geo::P, L = geo::L, NP = geo::NP, KPW = geo::KPW;
    static constexpr int NS = geo::NS, EL = geo::EL, U = R >= 4 && geo::U0 > 1 ? geo::U0 / 2 : geo::U0;
    static constexpr int RD = R * D, EPT = (RD + NT - 1) / NT, LR = L / R;
};

/* The block's tokens (state 0 none, 1 padding, 2 invalid: a NaN row, 3 attends) into s_tpos,
 * s_tseq, s_tst; then the z == 0 blocks write the rows of padding (zeros) and invalid tokens (NaN).
 * Tokens at positions >= pskip are none: rf_gpu_decode_attention takes them. */
template <int D, int R>
static __device__ __forceinline__ void rf_pa_tokens(float *out, const int32_t *__restrict__ pos,
                                                    const int32_t *__restrict__ seq, int64_t t0, int n_tokens,
                                                    int NQ, int pmax, int n_head, int hk, int G, int GS, int hs,
                                                    int z, int *s_tpos, int *s_tseq, int *s_tst, int pskip) {
    constexpr int NT = RF_PA_WARPS * RF_WARP_SIZE, RD = R * D;
    const int tid = threadIdx.x;
    if (tid < RF_PA_MAXNQ) {
        int st = 0, p = -1, sq = -1;
        if (tid < NQ && t0 + tid < n_tokens) {
            /* both loads issued together: one round trip before the block's first barrier, not
             * two (seq has n_tokens entries: always readable; used only as before) */
            p = pos[t0 + tid];
            const int s = seq[t0 + tid];
            st = 1;
            if (p >= pskip) {
                st = 0; /* another kernel's row (rf_gpu_decode_attention) */
            } else if (p >= 0) {
                st = 2;
                if (p <= pmax) {
                    sq = s;
                    if (sq >= 0) st = 3;
                }
            }
        }
        s_tpos[tid] = p, s_tseq[tid] = sq, s_tst[tid] = st;
    }
    __syncthreads();
    /* rf_k_paged_attn is a programmatic dependent launch: it may start while the RoPE + KV append
     * before it still runs. pos and seq (the step's upload, which no kernel writes) were read
     * before this wait; q, the K/V cache and everything written come after it. */
    rf_pdl_wait();

    if (z == 0) {
        for (int idx = tid; idx < RD; idx += NT) {
            const int r = idx / D, d = idx % D, qi = r / GS, hh = hs * GS + r % GS;
            if (qi >= NQ || hh >= G) continue;
            const int st = s_tst[qi];
            if (st == 1 || st == 2)
                out[((t0 + qi) * n_head + (int64_t)hk * G + hh) * D + d] =
                    st == 1 ? 0.0f : __int_as_float(0x7fc00000);
        }
    }
}

/* A pass's rows (those of sequence sq) and their key ranges [lo, hi] (empty: lo > hi), with
 * the union [ulo, uhi] (uhi < 0: none). */
template <int R>
static __device__ __forceinline__ void rf_pa_ranges(int (&lo)[R], int (&hi)[R], int &ulo, int &uhi, int sq, int NQ,
                                                    int G, int GS, int hs, int window, const int *s_tpos,
                                                    const int *s_tseq, const int *s_tst) {
    ulo = INT_MAX, uhi = -1;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int qi = r / GS, hh = hs * GS + r % GS;
        lo[r] = 1, hi[r] = 0;
        if (qi < NQ && hh < G && s_tst[qi] == 3 && s_tseq[qi] == sq) {
            const int p = s_tpos[qi];
            lo[r] = window > 0 && p >= window ? p - window + 1 : 0;
            hi[r] = p;
            ulo = min(ulo, lo[r]), uhi = max(uhi, hi[r]);
        }
    }
}

/* This lane's dimensions of each row's query, times scale (an f16 cache: q rounded to f16 first,
 * as the CPU and llama.cpp do). */
template <int D, typename KT, int R, int EL>
static __device__ __forceinline__ void rf_pa_query(float (&qr)[R][EL],
                                                   const float *__restrict__ q, const int (&lo)[R], const int (&hi)[R],
                                                   int64_t t0, int n_head, int hk, int G, int GS, int hs, int sl,
                                                   float scale) {
    typedef rf_pa_cfg<D, KT, R> C;
    static_assert(EL == C::EL, "a lane's query elements");
#pragma unroll
    for (int r = 0; r < R; r++) {
        const bool act = hi[r] >= lo[r];
        const int64_t qoff = act ? ((t0 + r / GS) * n_head + (int64_t)hk * G + hs * GS + r % GS) * D : 0;
#pragma unroll
        for (int np = 0; np < C::NP; np++) {
            const int pc = sl + np * C::L;
#pragma unroll
            for (int c = 0; c < C::EPP / 4; c++) {
                float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (act && pc < C::P) x = *reinterpret_cast<const float4 *>(q + qoff + pc * C::EPP + 4 * c);
                if (sizeof(KT) == 2) { /* f16 cache: q rounded to f16 first, as the CPU and llama.cpp do */
                    x.x = rf_half2float(rf_float2half(x.x)), x.y = rf_half2float(rf_float2half(x.y));
                    x.z = rf_half2float(rf_float2half(x.z)), x.w = rf_half2float(rf_float2half(x.w));
                }
                float *qd = &qr[r][np * C::EPP + 4 * c];
                qd[0] = __fmul_rn(x.x, scale), qd[1] = __fmul_rn(x.y, scale);
                qd[2] = __fmul_rn(x.z, scale), qd[3] = __fmul_rn(x.w, scale);
            }
        }
    }
}

/* A warp's chunk, scores: step i, key slot ks -> key i * KPW + ks of the chunk; each K row read
 * once (16-byte loads) for all R rows; the softcapped score of (key, row) to sc[key * R + row]. */
template <int D, typename KT, int R, int EL, bool ST = false>
static __device__ __forceinline__ void rf_pa_scores(float *sc, const float (&qr)[R][EL],
                                                    const KT *__restrict__ k, int phys, int64_t rstride,
                                                    int64_t hoff, int ks, int sl, float softcap,
                                                    const char *stg = nullptr) {
    typedef rf_pa_cfg<D, KT, R> C;
    static_assert(EL == C::EL, "a lane's query elements");
    constexpr int U = C::U, NP = C::NP, KPW = C::KPW, L = C::L, P = C::P, EPP = C::EPP, LR = C::LR;
#pragma unroll 1
    for (int g = 0; g < C::NS / U; g++) {
        uint4 kw[U][NP];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int ph = RF_SHFL(phys, (g * U + u) * KPW + ks);
#pragma unroll
            for (int np = 0; np < NP; np++) {
                const int pc = sl + np * L;
                kw[u][np] = make_uint4(0u, 0u, 0u, 0u);
                if (ph >= 0 && pc < P) {
                    if constexpr (ST) /* key (g * U + u) * KPW + ks of the chunk, from its slot */
                        kw[u][np] = rf_pa_kt<KT>::ld(reinterpret_cast<const KT *>(
                                                         stg + ((g * U + u) * KPW + ks) * rf_pa_stg<D, KT>::RBP),
                                                     0, pc);
                    else
                        kw[u][np] = rf_pa_kt<KT>::ld(k, ph * rstride + hoff, pc);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float dot[R];
#pragma unroll
            for (int r = 0; r < R; r++) dot[r] = 0.0f;
#pragma unroll
            for (int np = 0; np < NP; np++) {
                float kf[EPP];
                rf_pa_cvt<KT>::run(kw[u][np], kf);
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int e = 0; e < EPP; e++)
                        dot[r] = __fmaf_rn(qr[r][np * EPP + e], kf[e], dot[r]);
            }
            rf_pa_tsum<R, L / 2>::run(dot, sl);
            if (sl % LR == 0) {
                float sv = dot[0];
                if (softcap > 0.0f) sv = __fmul_rn(softcap, tanhf(__fdiv_rn(sv, softcap)));
                sc[((g * U + u) * KPW + ks) * R + sl / LR] = sv;
            }
        }
    }
}

/* A warp's chunk, softmax per row (lane = key j; lanes past the chunk: none): the scores in sc
 * become probabilities, the rows' maxima to mx and sums to ls. */
template <int R>
static __device__ __forceinline__ void rf_pa_softmax(float *sc, int lane, int j, const int (&lo)[R],
                                                     const int (&hi)[R], float (&mx)[R], float (&ls)[R]) {
    float pr[R];
    if (lane < RF_PA_CHUNK) {
        rf_pa_lds<R>(sc + lane * R, pr);
    } else {
#pragma unroll
        for (int r = 0; r < R; r++) pr[r] = -INFINITY;
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (j < lo[r] || j > hi[r]) pr[r] = -INFINITY;
        mx[r] = rf_warp_max(pr[r]);
        pr[r] = pr[r] == -INFINITY ? 0.0f : __expf(__fsub_rn(pr[r], mx[r]));
        ls[r] = rf_warp_sum(pr[r]);
    }
    if (lane < RF_PA_CHUNK) rf_pa_sts<R>(sc + lane * R, pr);
}

/* A warp's chunk, P.V: each key slot accumulates its own keys (each V row read once for all R
 * rows), then the slots are summed across the warp; the chunk's [row][dim] to acc_w. */
template <int D, typename KT, int R, bool ST = false>
static __device__ __forceinline__ void rf_pa_pv(float *acc_w, const float *sc, const KT *__restrict__ v, int phys,
                                                int64_t rstride, int64_t hoff, int ks, int sl,
                                                const char *stg = nullptr) {
    typedef rf_pa_cfg<D, KT, R> C;
    constexpr int U = C::U, NP = C::NP, KPW = C::KPW, L = C::L, P = C::P, EPP = C::EPP, EL = C::EL, WS = C::WS;
    float acc[R][EL];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < EL; e++) acc[r][e] = 0.0f;
#pragma unroll 1
    for (int g = 0; g < C::NS / U; g++) {
        uint4 vw[U][NP];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int ph = RF_SHFL(phys, (g * U + u) * KPW + ks);
#pragma unroll
            for (int np = 0; np < NP; np++) {
                const int pc = sl + np * L;
                vw[u][np] = make_uint4(0u, 0u, 0u, 0u);
                if (ph >= 0 && pc < P) {
                    if constexpr (ST)
                        vw[u][np] = rf_pa_kt<KT>::ld(reinterpret_cast<const KT *>(
                                                         stg + ((g * U + u) * KPW + ks) * rf_pa_stg<D, KT>::RBP),
                                                     0, pc);
                    else
                        vw[u][np] = rf_pa_kt<KT>::ld(v, ph * rstride + hoff, pc);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float pv[R];
            rf_pa_lds<R>(sc + ((g * U + u) * KPW + ks) * R, pv);
#pragma unroll
            for (int np = 0; np < NP; np++) {
                float vf[EPP];
                rf_pa_cvt<KT>::run(vw[u][np], vf);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (pv[r] != 0.0f) {
#pragma unroll
                        for (int e = 0; e < EPP; e++)
                            acc[r][np * EPP + e] = __fmaf_rn(pv[r], vf[e], acc[r][np * EPP + e]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int m = L; m < WS; m *= 2)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int e = 0; e < EL; e++)
                acc[r][e] = __fadd_rn(acc[r][e], RF_SHFL_XOR(acc[r][e], m));
    if (ks == 0) {
#pragma unroll
        for (int np = 0; np < NP; np++) {
            const int pc = sl + np * L;
            if (pc < P) {
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int c = 0; c < EPP / 4; c++) {
                        const float *a = &acc[r][np * EPP + 4 * c];
                        *reinterpret_cast<float4 *>(&acc_w[r * D + pc * EPP + 4 * c]) =
                            make_float4(a[0], a[1], a[2], a[3]);
                    }
            }
        }
    }
}

/* Per row (one thread each, tid < R): the fold factors warps -> split -> group (-> row), the
 * running group and row states updated; the finished unit's state to s_gst. */
template <int R>
static __device__ __forceinline__ void rf_pa_fold_rows(int tid, int mode, bool uend, float2 (*s_ml)[R],
                                                       int (*s_mw)[R], float2 (*s_fw)[R], float2 *s_grp,
                                                       float2 *s_tot, float2 *s_gst, float2 *s_f1, float2 *s_f2,
                                                       int *s_m1, int *s_m2) {
    constexpr int W = RF_PA_WARPS;
    float M = -INFINITY, den = 0.0f, fa, fb;
#pragma unroll
    for (int w = 0; w < W; w++) {
        const float2 ml = s_ml[w][tid];
        s_mw[w][tid] = rf_pa_factors(M, den, ml.x, ml.y, fa, fb);
        s_fw[w][tid] = make_float2(fa, fb);
    }
    if (mode == RF_PA_SPLITS) {
        s_gst[tid] = make_float2(M, den);
    } else {
        float2 gr = s_grp[tid];
        s_m1[tid] = rf_pa_factors(gr.x, gr.y, M, den, fa, fb);
        s_f1[tid] = make_float2(fa, fb);
        s_grp[tid] = gr;
        if (uend) {
            s_gst[tid] = gr;
            s_grp[tid] = make_float2(-INFINITY, 0.0f);
            if (mode == RF_PA_TOTAL) {
                float2 to = s_tot[tid];
                s_m2[tid] = rf_pa_factors(to.x, to.y, gr.x, gr.y, fa, fb);
                s_f2[tid] = make_float2(fa, fb);
                s_tot[tid] = to;
            }
        }
    }
}

/* The block's geometry and the pass's place, as the per-element folds and writes read them. */
struct rf_pa_at {
    float *out, *part;
    float2 *pml;
    const float *sinks;
    int64_t t0;
    int n_head, hk, G, GS, hs, NQ, sq, window, ustep, nsp, mode;
};

/* Per element (tid + e * NT): the split's numerator from the warps' (s_acc), folded into the
 * group's (rg) and the row's (rt), or, at a unit's end, the unit's state stored: written
 * normalised when the row has one unit, else to part / pml. */
template <int D, int R>
static __device__ __forceinline__ void rf_pa_fold_elems(const rf_pa_at &a, float *rg, float *rt, int un, bool uend,
                                                        float (*s_acc)[R * D], int (*s_mw)[R], float2 (*s_fw)[R],
                                                        const float2 *s_gst, const float2 *s_f1, const float2 *s_f2,
                                                        const int *s_m1, const int *s_m2, const int *s_tpos,
                                                        const int *s_tseq, const int *s_tst) {
    constexpr int W = RF_PA_WARPS, NT = W * RF_WARP_SIZE, RD = R * D, EPT = (RD + NT - 1) / NT;
    const int tid = threadIdx.x;
#pragma unroll
    for (int e = 0; e < EPT; e++) {
        const int idx = tid + e * NT;
        if (idx >= RD) break;
        const int r = idx / D, d = idx % D, qi = r / a.GS, hh = a.hs * a.GS + r % a.GS;
        if (qi >= a.NQ || hh >= a.G || s_tst[qi] != 3 || s_tseq[qi] != a.sq) continue;
        float num = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++) {
            const float2 f = s_fw[w][r];
            num = rf_pa_apply(num, s_acc[w][r * D + d], s_mw[w][r], f.x, f.y);
        }
        if (a.mode != RF_PA_SPLITS) {
            const float2 f1 = s_f1[r];
            rg[e] = rf_pa_apply(rg[e], num, s_m1[r], f1.x, f1.y);
            if (!uend) continue;
            num = rg[e];
            rg[e] = 0.0f;
            if (a.mode == RF_PA_TOTAL) {
                const float2 f2 = s_f2[r];
                rt[e] = rf_pa_apply(rt[e], num, s_m2[r], f2.x, f2.y);
                continue;
            }
        }
        /* store the unit's state of this row (if the unit is in the row's range) */
        const int p = s_tpos[qi];
        const int ufr = (a.window > 0 && p >= a.window ? p - a.window + 1 : 0) / RF_PA_SPLIT / a.ustep;
        const int ulr = p / RF_PA_SPLIT / a.ustep;
        if (un < ufr || un > ulr) continue;
        const int64_t orow = (a.t0 + qi) * a.n_head + (int64_t)a.hk * a.G + hh;
        const float2 st = s_gst[r];
        if (ufr == ulr) {
            a.out[orow * D + d] = rf_pa_final_sink(st.x, st.y, num, a.sinks, (int64_t)a.hk * a.G + hh);
        } else {
            const int64_t si = orow * a.nsp + (un - ufr);
            a.part[si * D + d] = num;
            if (d == 0) a.pml[si] = st;
        }
    }
}

/* mode RF_PA_TOTAL, after a pass: its rows written normalised from the row states. */
template <int D, int R>
static __device__ __forceinline__ void rf_pa_write_rows(const rf_pa_at &a, const float *rt, const float2 *s_tot,
                                                        const int *s_tseq, const int *s_tst) {
    constexpr int NT = RF_PA_WARPS * RF_WARP_SIZE, RD = R * D, EPT = (RD + NT - 1) / NT;
    const int tid = threadIdx.x;
#pragma unroll
    for (int e = 0; e < EPT; e++) {
        const int idx = tid + e * NT;
        if (idx >= RD) break;
        const int r = idx / D, d = idx % D, qi = r / a.GS, hh = a.hs * a.GS + r % a.GS;
        if (qi >= a.NQ || hh >= a.G || s_tst[qi] != 3 || s_tseq[qi] != a.sq) continue;
        const float2 to = s_tot[r];
        a.out[((a.t0 + qi) * a.n_head + (int64_t)a.hk * a.G + hh) * D + d] =
            rf_pa_final_sink(to.x, to.y, rt[e], a.sinks, (int64_t)a.hk * a.G + hh);
    }
}

#endif
