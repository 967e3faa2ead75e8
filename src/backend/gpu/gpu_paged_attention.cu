/* gpu_paged_attention.cu — attention of the batched engine over a paged K/V cache: one call
 * serves a batch that mixes single decode tokens of many sequences with prompt chunks of others;
 * each token's keys are found through its sequence's block table. Twin: rf_ref_paged_attention
 * (contract in gpu.h).
 *
 * Batch invariance, bit for bit — the arithmetic of a row (token, query head) is fixed by the
 * row alone:
 *   * Keys are cut at fixed absolute positions: splits of RF_PA_SPLIT (128) keys starting at
 *     multiples of 128 from position 0, each cut into RF_PA_WARPS (8) chunks of RF_PA_CHUNK (16)
 *     keys, one per warp of the block; groups of RF_PA_GROUP (16) splits (2048 keys).
 *   * A chunk's state per row (max, sum, P.V) depends only on the row and the keys of the chunk
 *     it may see. The fold is a fixed tree: the 8 chunk states of a split in warp order into the
 *     split's state, the splits of a group in order into the group's state, the groups in order
 *     into the row's state, then one division (rf_pa_factors / rf_pa_apply / rf_pa_final are the
 *     only merge code, shared by the block's own fold and by the reduce kernel).
 *   * Every floating-point operation on a row's data is an explicit IEEE intrinsic (__fmaf_rn,
 *     __fadd_rn, __fmul_rn, ...), so no variant contracts or reorders differently; cross-lane
 *     sums are the same butterfly trees in every variant (rf_pa_tsum's transposed levels add the
 *     same pairs as a plain butterfly per row, and IEEE addition is commutative).
 *   * A row never sees a key outside its range: the score becomes -inf, the probability exactly
 *     0 and the P.V term is skipped (another token's key, or a NaN in a slot nobody owns, cannot
 *     leak in); a chunk, split or group without a visible key is an exact no-op in the folds.
 *   What the host chooses from n_tokens / max_pos / the device — how many rows share a warp, how
 *   many tokens share a block, how the splits spread over blocks (gridDim.z) and whether partial
 *   states go through memory per split or per group — changes none of the arithmetic of a row.
 *
 * Speed: a warp reads each K/V row of its chunk once for all the query rows it holds (the group
 * of query heads of a kv head; for prompt chunks also several consecutive tokens of one
 * sequence), with 16-byte loads (L lanes per key, KPW keys per warp step) and U steps of loads in
 * flight. Long contexts spread over gridDim.z blocks per (tokens, kv head), so that a handful of
 * decoding sequences still fills the device; a second kernel folds the partial states. */
#include "backend/gpu/gpu_internal.h"

#include <limits.h>

#define RF_PA_SPLIT 128      /* keys per split, anchored at multiples of 128 */
#define RF_PA_CHUNK 16       /* keys per warp and split */
#define RF_PA_WARPS (RF_PA_SPLIT / RF_PA_CHUNK)
#define RF_PA_GROUP 16       /* splits per group (2048 keys) */
#define RF_PA_MAXNQ 8        /* tokens per block at most (rows per warp <= 8) */
#define RF_PA_DECODE_MAX 64  /* up to this many tokens per call: one token per block */
#define RF_PA_SCRATCH (32u << 20) /* partial states per call at most (bytes), else fewer splits */
#if defined(RF_HIP)
#define RF_PA_RMAX 4 /* rows per warp at most: 8 spills on gfx90a (f16: 224-424 bytes per lane) */
#else
#define RF_PA_RMAX 8
#endif

/* merge steps (rf_pa_factors) */
#define RF_PA_SKIP 0 /* the incoming state is empty: nothing changes */
#define RF_PA_SET 1  /* the running state is empty: it becomes the incoming one */
#define RF_PA_COMB 2 /* num = num * fa + a * fb */

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
    static constexpr int EPP = 16 / (int)sizeof(KT), EPU = 1;
    static __device__ __forceinline__ uint4 ld(const KT *__restrict__ c, int64_t u, int pc) {
        return *reinterpret_cast<const uint4 *>(c + u + pc * EPP);
    }
};
template <> struct rf_pa_kt<rf_pa_q8> {
    static constexpr int EPP = 8, EPU = 32;
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

/* a piece of K/V (rf_pa_kt::ld) -> floats */
template <typename KT> struct rf_pa_cvt;
template <> struct rf_pa_cvt<rf_pa_q8> {
    static __device__ __forceinline__ void run(const uint4 &w, float *f) {
        const float d = rf_half2float(__ushort_as_half((unsigned short)(w.x & 0xFFFFu)));
#pragma unroll
        for (int j = 0; j < 4; j++) {
            f[j] = __fmul_rn(d, (float)(int8_t)(w.y >> (8 * j)));
            f[4 + j] = __fmul_rn(d, (float)(int8_t)(w.z >> (8 * j)));
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

/* One step of the ordered merge of softmax states (max M, sum den, numerator num per element):
 * folds the incoming (m, l) into (M, den) and returns how num folds in the incoming numerator
 * (rf_pa_apply with the factors fa, fb). An incoming m == -inf is an empty state (skipped). */
static __device__ __forceinline__ int rf_pa_factors(float &M, float &den, float m, float l,
                                                    float &fa, float &fb) {
    fa = 1.0f, fb = 1.0f;
    if (m == -INFINITY) return RF_PA_SKIP;
    if (M == -INFINITY) {
        M = m, den = l;
        return RF_PA_SET;
    }
    const float Mn = fmaxf(M, m);
    fa = __expf(__fsub_rn(M, Mn));
    fb = __expf(__fsub_rn(m, Mn));
    den = __fmaf_rn(l, fb, __fmul_rn(den, fa));
    M = Mn;
    return RF_PA_COMB;
}
static __device__ __forceinline__ float rf_pa_apply(float num, float a, int mode, float fa, float fb) {
    return mode == RF_PA_COMB ? __fmaf_rn(a, fb, __fmul_rn(num, fa)) : mode == RF_PA_SET ? a : num;
}
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

/* paged_attn: rows (token t, query head h) of a block of tokens against their sequences' keys.
 *   Block (x, y, z): tokens t0 = x*NQ .. t0+NQ-1 (NQ consecutive batch slots), kv head
 *   hk = y / HS and head slice hs = y % HS (query heads hk*G + hs*GS .. + GS-1, G = n_head /
 *   n_head_kv, GS = min(G, R)); row r of the R rows = token t0 + r / GS, head slot r % GS.
 *   The tokens of a block are served in passes, one per distinct sequence among them (a pass
 *   only holds rows of one sequence, which share its block table). A pass walks units (mode
 *   RF_PA_SPLITS: splits; else groups of RF_PA_GROUP splits) u = first + z, first + z +
 *   gridDim.z, ... of the union of its rows' key ranges, and the splits of a unit in order; in a
 *   split, warp w takes the keys s*128 + w*16 + [0, 16).
 *   Per chunk a warp looks the keys' cache rows up in the block table (a lane per key), reads
 *   each K row once (16-byte loads; scores of all R rows), masks, softmaxes the chunk per row,
 *   reads each V row once and accumulates P.V for all R rows; then the block folds the warps'
 *   states into the split's, the split's into its group's.
 *   mode RF_PA_TOTAL (gridDim.z == 1): groups fold into the row, which is written normalised.
 *   RF_PA_SPLITS / RF_PA_GROUPS: a row with one unit is written normalised; otherwise the unit's
 *   (max, sum) goes to pml[row * nsp + i] and its numerator to part[(row * nsp + i) * D + d],
 *   i = unit - the row's first unit, for rf_k_paged_attn_reduce.
 *   Rows of padding tokens (pos < 0) are written as zeros by the z == 0 blocks, rows of tokens
 *   with pos > pmax (max_pos, or past the block table) or seq < 0 as NaN; nothing else is read
 *   for them. sinks (f32 [n_head] or NULL): head h's sink folds into a row's state last, at
 *   the one place a row is normalised (rf_pa_final_sink).
 * in:  q f32 [n_tokens, n_head, D] (16-byte aligned), k, v KT [rows, n_head_kv, D] (16-byte
 *      aligned), pos, seq int32 [n_tokens], bt int32 [*, max_blocks] (device).
 * out: out f32 [n_tokens, n_head, D].
 * launch: grid (ceil(n_tokens / NQ), n_head_kv * HS, Z), RF_PA_WARPS * RF_WARP_SIZE threads;
 *   NQ * GS <= R <= 8, R * D <= 1024.
 * tolerance vs rf_ref_paged_attention on the same K/V values: rel. L2 < 1e-5 (f32 K/V, and f16
 *   K/V against the reference on the f16 values; < 1e-2 against unrounded f32 values; q8_0 K/V
 *   against the reference on the dequantized values d * q, which are exact in f32, so the f32
 *   arithmetic: the query is not rounded, as the CPU's q8_0 path does not round it). */
template <int D, typename KT, int R>
__global__ void __launch_bounds__(RF_PA_WARPS * RF_WARP_SIZE, R <= 4 ? 2 : 1)
rf_k_paged_attn(float *out, float *part, float2 *pml, const float *__restrict__ q,
                const KT *__restrict__ k, const KT *__restrict__ v, const int32_t *__restrict__ pos,
                const int32_t *__restrict__ seq, const int32_t *__restrict__ bt, int n_tokens,
                int max_blocks, int bs, int n_head, int n_head_kv, int G, int GS, int NQ, int HS,
                float scale, int window, float softcap, int pmax, int mode, int nsp,
                const float *__restrict__ sinks) {
    typedef rf_pa_geo<D, KT> geo;
    constexpr int WS = RF_WARP_SIZE, W = RF_PA_WARPS, CH = RF_PA_CHUNK, NT = W * WS;
    constexpr int EPP = geo::EPP, P = geo::P, L = geo::L, NP = geo::NP, KPW = geo::KPW;
    constexpr int NS = geo::NS, EL = geo::EL, U = R >= 4 && geo::U0 > 1 ? geo::U0 / 2 : geo::U0;
    constexpr int RD = R * D, EPT = (RD + NT - 1) / NT, LR = L / R;
    static_assert(R >= 1 && R <= 8 && L % R == 0 && RD <= 1024, "rows per warp");

    __shared__ __align__(16) float s_sc[W][CH * R]; /* a warp's scores, then probabilities [key][row] */
    __shared__ __align__(16) float s_acc[W][RD];    /* a warp's P.V of its chunk [row][dim] */
    __shared__ float2 s_ml[W][R];                   /* a warp's (max, sum) per row */
    __shared__ float2 s_fw[W][R];                   /* fold factors of the warps' states ... */
    __shared__ int s_mw[W][R];                      /* ... and modes */
    __shared__ float2 s_grp[R], s_tot[R], s_gst[R]; /* running group / row state, finished group */
    __shared__ float2 s_f1[R], s_f2[R];             /* factors split -> group, group -> row */
    __shared__ int s_m1[R], s_m2[R];
    __shared__ int s_tpos[RF_PA_MAXNQ], s_tseq[RF_PA_MAXNQ], s_tst[RF_PA_MAXNQ];

    const int tid = threadIdx.x, lane = tid % WS, warp = tid / WS, ks = lane / L, sl = lane % L;
    const int64_t t0 = (int64_t)blockIdx.x * NQ;
    const int hk = blockIdx.y / HS, hs = blockIdx.y % HS, z = blockIdx.z, Z = gridDim.z;
    rf_pdl_trigger(); /* the reduce kernel (a dependent launch) may be scheduled; it waits */

    /* the block's tokens: state 0 none, 1 padding, 2 invalid (NaN row), 3 attends */
    if (tid < RF_PA_MAXNQ) {
        int st = 0, p = -1, sq = -1;
        if (tid < NQ && t0 + tid < n_tokens) {
            p = pos[t0 + tid];
            st = 1;
            if (p >= 0) {
                st = 2;
                if (p <= pmax) {
                    sq = seq[t0 + tid];
                    if (sq >= 0) st = 3;
                }
            }
        }
        s_tpos[tid] = p, s_tseq[tid] = sq, s_tst[tid] = st;
    }
    __syncthreads();

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

    constexpr int EPU = rf_pa_kt<KT>::EPU; /* row offsets in units of the cache type (rf_pa_kt) */
    const int64_t rstride = (int64_t)n_head_kv * D / EPU, hoff = (int64_t)hk * D / EPU;
    const int ustep = mode == RF_PA_SPLITS ? 1 : RF_PA_GROUP; /* splits per unit */
    for (int i = 0; i < NQ; i++) { /* one pass per distinct sequence among the block's tokens */
        if (s_tst[i] != 3) continue;
        const int sq = s_tseq[i];
        bool dup = false;
        for (int j = 0; j < i; j++) dup = dup || (s_tst[j] == 3 && s_tseq[j] == sq);
        if (dup) continue;

        /* rows of this pass and their key ranges [lo, hi] (empty: lo > hi) */
        int lo[R], hi[R], ulo = INT_MAX, uhi = -1;
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
        /* this lane's dimensions of each row's query, times scale */
        float qr[R][EL];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const bool act = hi[r] >= lo[r];
            const int64_t qoff = act ? ((t0 + r / GS) * n_head + (int64_t)hk * G + hs * GS + r % GS) * D : 0;
#pragma unroll
            for (int np = 0; np < NP; np++) {
                const int pc = sl + np * L;
#pragma unroll
                for (int c = 0; c < EPP / 4; c++) {
                    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (act && pc < P) x = *reinterpret_cast<const float4 *>(q + qoff + pc * EPP + 4 * c);
                    if (sizeof(KT) == 2) { /* f16 cache: q rounded to f16 first, as the CPU and llama.cpp do */
                        x.x = rf_half2float(rf_float2half(x.x)), x.y = rf_half2float(rf_float2half(x.y));
                        x.z = rf_half2float(rf_float2half(x.z)), x.w = rf_half2float(rf_float2half(x.w));
                    }
                    float *qd = &qr[r][np * EPP + 4 * c];
                    qd[0] = __fmul_rn(x.x, scale), qd[1] = __fmul_rn(x.y, scale);
                    qd[2] = __fmul_rn(x.z, scale), qd[3] = __fmul_rn(x.w, scale);
                }
            }
        }
        if (tid < R) s_grp[tid] = s_tot[tid] = make_float2(-INFINITY, 0.0f);
        float rg[EPT], rt[EPT]; /* this thread's elements of the group's / the row's numerator */
#pragma unroll
        for (int e = 0; e < EPT; e++) rg[e] = rt[e] = 0.0f;

        const int sfirst = ulo / RF_PA_SPLIT, slast = uhi / RF_PA_SPLIT;
        for (int un = sfirst / ustep + z; un <= slast / ustep; un += Z) {
            const int s0 = max(sfirst, un * ustep), s1 = min(slast, un * ustep + ustep - 1);
            for (int s = s0; s <= s1; s++) {
                const bool uend = s == s1; /* last split of the unit (of this pass) */
                const int j0 = s * RF_PA_SPLIT + warp * CH;
                if (j0 > uhi || j0 + CH - 1 < ulo) {
                    if (lane == 0) {
#pragma unroll
                        for (int r = 0; r < R; r++) s_ml[warp][r] = make_float2(-INFINITY, 0.0f);
                    }
                } else {
                    /* cache row of key j0 + lane (-1: none of this pass's rows may see it) */
                    const int j = j0 + lane;
                    int phys = -1;
                    if (lane < CH && j >= ulo && j <= uhi)
                        phys = bt[(int64_t)sq * max_blocks + j / bs] * bs + j % bs;
                    float *sc = s_sc[warp];
                    /* scores: step i, key slot ks -> key i * KPW + ks of the chunk */
#pragma unroll 1
                    for (int g = 0; g < NS / U; g++) {
                        uint4 kw[U][NP];
#pragma unroll
                        for (int u = 0; u < U; u++) {
                            const int ph = RF_SHFL(phys, (g * U + u) * KPW + ks);
#pragma unroll
                            for (int np = 0; np < NP; np++) {
                                const int pc = sl + np * L;
                                kw[u][np] = make_uint4(0u, 0u, 0u, 0u);
                                if (ph >= 0 && pc < P)
                                    kw[u][np] = rf_pa_kt<KT>::ld(k, ph * rstride + hoff, pc);
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
                    RF_SYNCWARP();
                    /* softmax of the chunk per row: lane = key (lanes past the chunk: none) */
                    float pr[R], mx[R], ls[R];
                    if (lane < CH) {
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
                    if (lane < CH) rf_pa_sts<R>(sc + lane * R, pr);
                    RF_SYNCWARP();
                    /* P.V: each key slot accumulates its own keys, then the slots are summed */
                    float acc[R][EL];
#pragma unroll
                    for (int r = 0; r < R; r++)
#pragma unroll
                        for (int e = 0; e < EL; e++) acc[r][e] = 0.0f;
#pragma unroll 1
                    for (int g = 0; g < NS / U; g++) {
                        uint4 vw[U][NP];
#pragma unroll
                        for (int u = 0; u < U; u++) {
                            const int ph = RF_SHFL(phys, (g * U + u) * KPW + ks);
#pragma unroll
                            for (int np = 0; np < NP; np++) {
                                const int pc = sl + np * L;
                                vw[u][np] = make_uint4(0u, 0u, 0u, 0u);
                                if (ph >= 0 && pc < P)
                                    vw[u][np] = rf_pa_kt<KT>::ld(v, ph * rstride + hoff, pc);
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
                                        *reinterpret_cast<float4 *>(&s_acc[warp][r * D + pc * EPP + 4 * c]) =
                                            make_float4(a[0], a[1], a[2], a[3]);
                                    }
                            }
                        }
                    }
                    if (lane == 0) {
#pragma unroll
                        for (int r = 0; r < R; r++) s_ml[warp][r] = make_float2(mx[r], ls[r]);
                    }
                }
                __syncthreads();
                /* per row (one thread each): fold factors warps -> split -> group (-> row) */
                if (tid < R) {
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
                __syncthreads();
                /* per element: the split's numerator, folded on or stored */
#pragma unroll
                for (int e = 0; e < EPT; e++) {
                    const int idx = tid + e * NT;
                    if (idx >= RD) break;
                    const int r = idx / D, d = idx % D, qi = r / GS, hh = hs * GS + r % GS;
                    if (qi >= NQ || hh >= G || s_tst[qi] != 3 || s_tseq[qi] != sq) continue;
                    float num = 0.0f;
#pragma unroll
                    for (int w = 0; w < W; w++) {
                        const float2 f = s_fw[w][r];
                        num = rf_pa_apply(num, s_acc[w][r * D + d], s_mw[w][r], f.x, f.y);
                    }
                    if (mode != RF_PA_SPLITS) {
                        const float2 f1 = s_f1[r];
                        rg[e] = rf_pa_apply(rg[e], num, s_m1[r], f1.x, f1.y);
                        if (!uend) continue;
                        num = rg[e];
                        rg[e] = 0.0f;
                        if (mode == RF_PA_TOTAL) {
                            const float2 f2 = s_f2[r];
                            rt[e] = rf_pa_apply(rt[e], num, s_m2[r], f2.x, f2.y);
                            continue;
                        }
                    }
                    /* store the unit's state of this row (if the unit is in the row's range) */
                    const int p = s_tpos[qi];
                    const int ufr = (window > 0 && p >= window ? p - window + 1 : 0) / RF_PA_SPLIT / ustep;
                    const int ulr = p / RF_PA_SPLIT / ustep;
                    if (un < ufr || un > ulr) continue;
                    const int64_t orow = (t0 + qi) * n_head + (int64_t)hk * G + hh;
                    const float2 st = s_gst[r];
                    if (ufr == ulr) {
                        out[orow * D + d] = rf_pa_final_sink(st.x, st.y, num, sinks, (int64_t)hk * G + hh);
                    } else {
                        const int64_t si = orow * nsp + (un - ufr);
                        part[si * D + d] = num;
                        if (d == 0) pml[si] = st;
                    }
                }
                __syncthreads();
            }
        }
        if (mode == RF_PA_TOTAL) {
#pragma unroll
            for (int e = 0; e < EPT; e++) {
                const int idx = tid + e * NT;
                if (idx >= RD) break;
                const int r = idx / D, d = idx % D, qi = r / GS, hh = hs * GS + r % GS;
                if (qi >= NQ || hh >= G || s_tst[qi] != 3 || s_tseq[qi] != sq) continue;
                const float2 to = s_tot[r];
                out[((t0 + qi) * n_head + (int64_t)hk * G + hh) * D + d] =
                    rf_pa_final_sink(to.x, to.y, rt[e], sinks, (int64_t)hk * G + hh);
            }
        }
        __syncthreads(); /* the row states are reset by the next pass */
    }
}

/* paged_attn_reduce: for each row (t, h) whose keys span more than one unit (mode RF_PA_SPLITS:
 * splits, RF_PA_GROUPS: groups), folds the unit states rf_k_paged_attn left in part / pml with
 * the same tree as the block's own fold (splits into their group in order, groups into the row
 * in order): out[t, h, d] = num / den. Rows with one unit, padding and invalid tokens were
 * written by rf_k_paged_attn and are skipped.
 * in: part f32 [n_tokens * n_head, nsp, D], pml float2 [n_tokens * n_head, nsp], pos, seq.
 * launch: grid (n_tokens, n_head), D threads rounded up to a warp; a programmatic dependent
 * launch after rf_k_paged_attn where the device has it (waits for it before reading anything).
 * tolerance: as rf_k_paged_attn. */
__global__ void __launch_bounds__(256)
rf_k_paged_attn_reduce(float *out, const float *__restrict__ part, const float2 *__restrict__ pml,
                       const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, int n_head,
                       int D, int window, int pmax, int mode, int nsp, const float *__restrict__ sinks) {
    rf_pdl_trigger();
    rf_pdl_wait(); /* part, pml: written by rf_k_paged_attn, which may still be running */
    const int64_t t = blockIdx.x;
    const int h = blockIdx.y, d = threadIdx.x;
    const int p = pos[t];
    if (p < 0 || p > pmax || d >= D) return;
    const int ustep = mode == RF_PA_SPLITS ? 1 : RF_PA_GROUP;
    const int ufr = (window > 0 && p >= window ? p - window + 1 : 0) / RF_PA_SPLIT / ustep;
    const int ulr = p / RF_PA_SPLIT / ustep;
    if (ufr == ulr || seq[t] < 0) return;
    const int64_t orow = t * n_head + h;
    float M = -INFINITY, den = 0.0f, num = 0.0f, Mg = -INFINITY, deng = 0.0f, numg = 0.0f, fa, fb;
    for (int u = ufr; u <= ulr; u++) {
        const int64_t si = orow * nsp + (u - ufr);
        const float2 ml = pml[si];
        const float a = part[si * D + d];
        if (mode == RF_PA_SPLITS) { /* split u into its group; a finished group into the row */
            const int m1 = rf_pa_factors(Mg, deng, ml.x, ml.y, fa, fb);
            numg = rf_pa_apply(numg, a, m1, fa, fb);
            if ((u + 1) % RF_PA_GROUP != 0 && u != ulr) continue;
            const int m2 = rf_pa_factors(M, den, Mg, deng, fa, fb);
            num = rf_pa_apply(num, numg, m2, fa, fb);
            Mg = -INFINITY, deng = 0.0f, numg = 0.0f;
        } else {
            const int m2 = rf_pa_factors(M, den, ml.x, ml.y, fa, fb);
            num = rf_pa_apply(num, a, m2, fa, fb);
        }
    }
    out[orow * D + d] = rf_pa_final_sink(M, den, num, sinks, h);
}

/* ---- host ------------------------------------------------------------------------------- */

struct rf_pa_args {
    float *out, *part;
    float2 *pml;
    const float *q;
    const void *k, *v;
    const int32_t *pos, *seq, *bt;
    int n_tokens, max_blocks, bs, n_head, n_head_kv, G, GS, NQ, HS;
    float scale;
    int window;
    float softcap;
    int pmax, mode, nsp;
    const float *sinks;
};

template <int D, typename KT, int R>
static rf_status rf_pa_go(rf_gpu_ctx *ctx, dim3 grid, unsigned threads, const rf_pa_args &a) {
    const KT *k = (const KT *)a.k, *v = (const KT *)a.v;
    return rf_gpu_launch(ctx, "rf_k_paged_attn", false, rf_k_paged_attn<D, KT, R>, grid, dim3(threads), 0,
                         a.out, a.part, a.pml, a.q, k, v, a.pos, a.seq, a.bt, a.n_tokens, a.max_blocks,
                         a.bs, a.n_head, a.n_head_kv, a.G, a.GS, a.NQ, a.HS, a.scale, a.window,
                         a.softcap, a.pmax, a.mode, a.nsp, a.sinks);
}

template <typename KT>
static rf_status rf_pa_dispatch(rf_gpu_ctx *ctx, int D, int R, dim3 grid, unsigned threads,
                                const rf_pa_args &a) {
#define RF_PA_CASE(DD, RR)                                                                    \
    if constexpr (DD % rf_pa_kt<KT>::EPU == 0)                                                \
        if (D == DD && R == RR) return rf_pa_go<DD, KT, RR>(ctx, grid, threads, a);
#define RF_PA_DIM(DD) RF_PA_CASE(DD, 1) RF_PA_CASE(DD, 2) RF_PA_CASE(DD, 4)
    RF_PA_DIM(64)
    RF_PA_DIM(80)
    RF_PA_DIM(96)
    RF_PA_DIM(128)
    RF_PA_DIM(256)
#if RF_PA_RMAX == 8
    RF_PA_CASE(64, 8)
    RF_PA_CASE(80, 8)
    RF_PA_CASE(96, 8)
    RF_PA_CASE(128, 8)
#endif
#undef RF_PA_DIM
#undef RF_PA_CASE
    return rf_set_error(RF_ERR_INVALID_ARG, "rf_gpu_paged_attention: no kernel for head_dim %d, %d rows", D, R);
}

extern "C" rf_status rf_gpu_paged_attention(rf_gpu_ctx *ctx, float *out, const float *q,
                                            const void *k, const void *v, rf_type kv_type,
                                            int64_t n_tokens, const int32_t *pos,
                                            const int32_t *seq, const int32_t *block_table,
                                            int64_t max_blocks, int64_t block_size, int64_t n_head,
                                            int64_t n_head_kv, int64_t head_dim, float scale,
                                            int64_t window, float softcap, int64_t max_pos,
                                            const float *sinks) {
    const char *op = "rf_gpu_paged_attention";
    RF_GPU_REQUIRE(kv_type == RF_TYPE_F16 || kv_type == RF_TYPE_F32 || (kv_type == RF_TYPE_Q8_0 && head_dim % 32 == 0),
                   op, "K/V type %d with head_dim %lld (want f16, f32, or q8_0 with head_dim %% 32 == 0)",
                   (int)kv_type, (long long)head_dim);
    RF_GPU_REQUIRE(head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128 ||
                       head_dim == 256,
                   op, "head_dim=%lld (supported: 64, 80, 96, 128, 256)", (long long)head_dim);
    RF_GPU_REQUIRE(n_head >= 1 && n_head_kv >= 1 && n_head % n_head_kv == 0 && n_head <= 65535,
                   op, "n_head=%lld must be a multiple of n_head_kv=%lld (and <= 65535)",
                   (long long)n_head, (long long)n_head_kv);
    RF_GPU_REQUIRE(n_tokens >= 0 && n_tokens <= INT_MAX, op, "n_tokens=%lld", (long long)n_tokens);
    RF_GPU_REQUIRE(block_size >= 1 && block_size <= INT_MAX && max_blocks >= 1 && max_blocks <= INT_MAX,
                   op, "block_size=%lld max_blocks=%lld", (long long)block_size, (long long)max_blocks);
    RF_GPU_REQUIRE(window >= 0 && max_pos < (1LL << 30), op, "window=%lld max_pos=%lld",
                   (long long)window, (long long)max_pos);
    if (n_tokens == 0) return RF_OK;
    RF_GPU_REQUIRE(out && q && k && v && pos && seq && block_table, op, "NULL pointer argument");
    RF_GPU_REQUIRE((((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) == 0, op,
                   "q, k and v must be 16-byte aligned");

    const int D = (int)head_dim;
    const int64_t G = n_head / n_head_kv;
    const int rmax = D <= 128 ? RF_PA_RMAX : 4; /* R * D <= 1024: the block's shared memory */
    /* decode: one token per block, its query heads of one kv head in a warp; prompt chunks:
     * consecutive tokens fill a warp's rows too */
    const int R = n_tokens > RF_PA_DECODE_MAX ? rmax : rf_pa_pow2((int)(G < rmax ? G : rmax));
    const int64_t GS = G < R ? G : R, NQ = R / GS, HS = (G + GS - 1) / GS;
    const int64_t X = (n_tokens + NQ - 1) / NQ, Y = n_head_kv * HS;
    RF_GPU_REQUIRE(Y <= 65535, op, "n_head_kv=%lld too large", (long long)n_head_kv);

    const int64_t pmax64 = max_pos < max_blocks * block_size - 1 ? max_pos : max_blocks * block_size - 1;
    const int pmax = pmax64 < 0 ? -1 : (int)pmax64;
    /* a window that covers every position does nothing: drop it (same arithmetic) */
    const int win = window > 0 && window <= pmax ? (int)window : 0;
    /* units (splits, groups) a row can span */
    const int64_t span = win > 0 ? win : (int64_t)pmax + 1;
    const int64_t nsp_s = pmax < 0 ? 1 : (span - 1) / RF_PA_SPLIT + 2 < pmax / RF_PA_SPLIT + 1
                                            ? (span - 1) / RF_PA_SPLIT + 2 : pmax / RF_PA_SPLIT + 1;
    const int64_t gk = (int64_t)RF_PA_SPLIT * RF_PA_GROUP;
    const int64_t nsp_g = pmax < 0 ? 1 : (span - 1) / gk + 2 < pmax / gk + 1 ? (span - 1) / gk + 2 : pmax / gk + 1;

    /* spread the splits over gridDim.z blocks when the rows alone would leave the device idle,
     * the partial states through memory per split, or per group if that is too large */
    const int64_t target = 4LL * (ctx->info.sm_count > 0 ? ctx->info.sm_count : 1);
    const size_t row_slot = (size_t)n_tokens * (size_t)n_head * ((size_t)D + 2) * sizeof(float);
    int mode = RF_PA_TOTAL;
    int64_t Zb = 1, nsp = 1;
    if (X * Y < target && nsp_s > 1) {
        const int64_t want = (target + X * Y - 1) / (X * Y);
        if (row_slot * (size_t)nsp_s <= RF_PA_SCRATCH) {
            mode = RF_PA_SPLITS, nsp = nsp_s, Zb = want < nsp_s ? want : nsp_s;
        } else if (nsp_g > 1 && row_slot * (size_t)nsp_g <= RF_PA_SCRATCH) {
            mode = RF_PA_GROUPS, nsp = nsp_g, Zb = want < nsp_g ? want : nsp_g;
        }
        if (Zb > 65535) Zb = 65535;
        if (Zb <= 1) mode = RF_PA_TOTAL, Zb = 1, nsp = 1;
    }
    rf_pa_args a;
    a.out = out, a.part = NULL, a.pml = NULL, a.q = q, a.k = k, a.v = v;
    a.pos = pos, a.seq = seq, a.bt = block_table;
    a.n_tokens = (int)n_tokens, a.max_blocks = (int)max_blocks, a.bs = (int)block_size;
    a.n_head = (int)n_head, a.n_head_kv = (int)n_head_kv, a.G = (int)G, a.GS = (int)GS;
    a.NQ = (int)NQ, a.HS = (int)HS, a.scale = scale, a.window = win, a.softcap = softcap;
    a.pmax = pmax, a.mode = mode, a.nsp = (int)nsp, a.sinks = sinks;

    size_t mark = ctx->scratch_used;
    if (mode != RF_PA_TOTAL) {
        const size_t rows = (size_t)n_tokens * (size_t)n_head * (size_t)nsp;
        const size_t pbytes = rows * (size_t)D * sizeof(float);
        void *tmp;
        rf_status st = rf_gpu_tmp(ctx, pbytes + 256 + rows * sizeof(float2), &tmp, &mark);
        if (st) return st;
        a.part = (float *)tmp;
        a.pml = (float2 *)((char *)tmp + ((pbytes + 255) & ~(size_t)255));
    }
    const int ws = ctx->info.warp_size > 0 ? ctx->info.warp_size : RF_WARP_SIZE;
    const dim3 grid((unsigned)X, (unsigned)Y, (unsigned)Zb);
    const unsigned threads = (unsigned)(RF_PA_WARPS * ws);
    rf_status st = kv_type == RF_TYPE_F16    ? rf_pa_dispatch<rf_half>(ctx, D, R, grid, threads, a)
                   : kv_type == RF_TYPE_Q8_0 ? rf_pa_dispatch<rf_pa_q8>(ctx, D, R, grid, threads, a)
                                             : rf_pa_dispatch<float>(ctx, D, R, grid, threads, a);
    if (st || mode == RF_PA_TOTAL) {
        ctx->scratch_used = mark;
        return st;
    }
    const unsigned rt = (unsigned)((D + ws - 1) / ws * ws);
    st = rf_gpu_launch(ctx, "rf_k_paged_attn_reduce", true, rf_k_paged_attn_reduce,
                       dim3((unsigned)n_tokens, (unsigned)n_head), dim3(rt), 0, out,
                       (const float *)a.part, (const float2 *)a.pml, pos, seq, a.n_head, D, win,
                       pmax, mode, a.nsp, sinks);
    ctx->scratch_used = mark;
    return st;
}
