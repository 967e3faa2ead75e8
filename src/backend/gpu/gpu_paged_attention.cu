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
 * flight; it prefetches every K/V line of its chunk into L2 when it looks the keys up, and the
 * next split's while it works on this one, so that a split waits on memory about once, not once
 * per round of loads (decode is bound by that latency, not by the bytes). Long contexts spread
 * over gridDim.z blocks per (tokens, kv head), so that a handful of decoding sequences still
 * fills the device; a second kernel folds the partial states (its loads issued together, the
 * groups of a row side by side). Decode rows (the host's hint, rf_gpu_paged_attention_hint) get
 * one token per block at any batch size. Staged variant (ST; CUDA sm_80+, f16 and q8_0 caches,
 * head dims 64 and 128): a warp copies its chunk's K and V rows into shared memory with cp.async
 * (one round trip per chunk, no registers held by the loads in flight) and the next split's while
 * it computes and folds this one; the grid is one wave of resident blocks, each walking several
 * splits. The same pieces feed the same arithmetic: the bits of the plain kernel. */
#include "backend/gpu/gpu_paged_attention.cuh"

#include "core/knobs.h"
#include "core/test_hooks.h"

/* The staged variant's dynamic shared memory: per warp a K and a V stage (rf_pa_stg). */
extern __shared__ __align__(16) char rf_pa_dyn[];

/* One split of a warp's chunk, staged (rf_k_paged_attn's ST variant; the steps and the
 * arithmetic of the plain path, the K/V pieces read from the warp's stages): on a fresh lookup
 * the chunk's K and V are copied in (two commit groups); the next split's K is copied in as soon
 * as this one's scores have read the K stage, its V once P.V has read the V stage, so that each
 * waits on memory while the warp works on this split and the block folds it. gr: bytes per copy.
 * had_n / phys_n / have_n: as the plain path's lookahead (more: a next split exists, key sn *
 * RF_PA_SPLIT + warp * RF_PA_CHUNK + lane its key). */
template <int D, typename KT, int R, int EL>
static __device__ __forceinline__ void rf_pa_split_staged(float *sc, float *acc_w, float2 *ml_w, const float (&qr)[R][EL],
                                                          const KT *__restrict__ k, const KT *__restrict__ v,
                                                          const int32_t *__restrict__ bt, int sq, int max_blocks, int bs,
                                                          int lane, int j, int ulo, int uhi, const int (&lo)[R],
                                                          const int (&hi)[R], int64_t rstride, int64_t hoff, int ks,
                                                          int sl, float softcap, int gr, bool had_n, int &phys_n,
                                                          bool &have_n, bool more, int sn, int warp) {
    typedef rf_pa_stg<D, KT> S;
    char *sk = rf_pa_dyn + (size_t)warp * 2 * S::BYTES, *sv = sk + S::BYTES;
    const unsigned ak = rf_smem_addr(sk), av = rf_smem_addr(sv);
    const int phys = had_n ? phys_n : rf_pa_phys(bt, sq, max_blocks, bs, lane, j, ulo, uhi);
    if (!had_n) {
        rf_pa_stage<D, KT>(ak, k, phys, rstride, hoff, lane, gr);
        rf_cp_async_commit();
        rf_pa_stage<D, KT>(av, v, phys, rstride, hoff, lane, gr);
        rf_cp_async_commit();
    }
    have_n = false;
    if (more) {
        phys_n = rf_pa_phys(bt, sq, max_blocks, bs, lane, sn * RF_PA_SPLIT + warp * RF_PA_CHUNK + lane, ulo, uhi);
        have_n = true;
    }
    rf_cp_async_wait<1>(); /* this split's K (its V may still be on the way) */
    RF_SYNCWARP();
    rf_pa_scores<D, KT, R, EL, true>(sc, qr, k, phys, rstride, hoff, ks, sl, softcap, sk);
    RF_SYNCWARP(); /* the K stage is read: the next split's K may come in */
    if (have_n) rf_pa_stage<D, KT>(ak, k, phys_n, rstride, hoff, lane, gr);
    rf_cp_async_commit();
    float mx[R], ls[R];
    rf_pa_softmax<R>(sc, lane, j, lo, hi, mx, ls);
    rf_cp_async_wait<1>(); /* this split's V (the next K may still be on the way) */
    RF_SYNCWARP();
    rf_pa_pv<D, KT, R, true>(acc_w, sc, v, phys, rstride, hoff, ks, sl, sv);
    RF_SYNCWARP(); /* the V stage is read */
    if (have_n) rf_pa_stage<D, KT>(av, v, phys_n, rstride, hoff, lane, gr);
    rf_cp_async_commit();
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) ml_w[r] = make_float2(mx[r], ls[r]);
    }
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
 *   the one place a row is normalised (rf_pa_final_sink). pf: 1 prefetches the K/V lines into
 *   L2 (rf_pa_prefetch), 0 not (the former kernel, for the test hook gpu_pa_old); ST: the bytes
 *   per cp.async copy (16, 8 or 4), with 2 * RF_PA_WARPS * rf_pa_stg::BYTES of dynamic shared
 *   memory (rf_pa_split_staged). Tokens at positions >= pskip are left to rf_k_decode_attn
 *   (rf_gpu_paged_attention_route): nothing is read or written for them.
 * in:  q f32 [n_tokens, n_head, D] (16-byte aligned), k, v KT [rows, n_head_kv, D] (16-byte
 *      aligned), pos, seq int32 [n_tokens], bt int32 [*, max_blocks] (device).
 * out: out f32 [n_tokens, n_head, D].
 * launch: grid (ceil(n_tokens / NQ), n_head_kv * HS, Z), RF_PA_WARPS * RF_WARP_SIZE threads;
 *   NQ * GS <= R <= 8, R * D <= 1024; a programmatic dependent launch (it reads pos and seq, which
 *   no kernel writes, before rf_pdl_wait() in rf_pa_tokens, so the launch and that round trip
 *   overlap the kernel before it).
 * tolerance vs rf_ref_paged_attention on the same K/V values: rel. L2 < 1e-5 (f32 K/V, and f16
 *   K/V against the reference on the f16 values; < 1e-2 against unrounded f32 values; q8_0 K/V
 *   against the reference on the dequantized values d * q, which are exact in f32, so the f32
 *   arithmetic: the query is not rounded, as the CPU's q8_0 path does not round it). */
template <int D, typename KT, int R, bool ST>
__global__ void __launch_bounds__(RF_PA_WARPS * RF_WARP_SIZE, R <= 4 ? 2 : 1)
rf_k_paged_attn(float *out, float *part, float2 *pml, const float *__restrict__ q,
                const KT *__restrict__ k, const KT *__restrict__ v, const int32_t *__restrict__ pos,
                const int32_t *__restrict__ seq, const int32_t *__restrict__ bt, int n_tokens,
                int max_blocks, int bs, int n_head, int n_head_kv, int G, int GS, int NQ, int HS,
                float scale, int window, float softcap, int pmax, int mode, int nsp,
                const float *__restrict__ sinks, int pf, int pskip) {
    typedef rf_pa_cfg<D, KT, R> C;
    constexpr int WS = C::WS, W = C::W, CH = C::CH, L = C::L, EL = C::EL, RD = C::RD, EPT = C::EPT;
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

    rf_pa_tokens<D, R>(out, pos, seq, t0, n_tokens, NQ, pmax, n_head, hk, G, GS, hs, z, s_tpos, s_tseq, s_tst, pskip);

    constexpr int EPU = rf_pa_kt<KT>::EPU; /* row offsets in units of the cache type (rf_pa_kt) */
    const int64_t rstride = (int64_t)n_head_kv * D / EPU, hoff = (int64_t)hk * D / EPU;
    const int ustep = mode == RF_PA_SPLITS ? 1 : RF_PA_GROUP; /* splits per unit */
    for (int i = 0; i < NQ; i++) { /* one pass per distinct sequence among the block's tokens */
        if (s_tst[i] != 3) continue;
        const int sq = s_tseq[i];
        bool dup = false;
        for (int j = 0; j < i; j++) dup = dup || (s_tst[j] == 3 && s_tseq[j] == sq);
        if (dup) continue;

        int lo[R], hi[R], ulo, uhi;
        rf_pa_ranges<R>(lo, hi, ulo, uhi, sq, NQ, G, GS, hs, window, s_tpos, s_tseq, s_tst);
        float qr[R][EL];
        rf_pa_query<D, KT, R>(qr, q, lo, hi, t0, n_head, hk, G, GS, hs, sl, scale);
        if (tid < R) s_grp[tid] = s_tot[tid] = make_float2(-INFINITY, 0.0f);
        float rg[EPT], rt[EPT]; /* this thread's elements of the group's / the row's numerator */
#pragma unroll
        for (int e = 0; e < EPT; e++) rg[e] = rt[e] = 0.0f;
        const rf_pa_at at = {out, part, pml, sinks, t0, n_head, hk, G, GS, hs, NQ, sq, window, ustep, nsp, mode};

        const int sfirst = ulo / RF_PA_SPLIT, slast = uhi / RF_PA_SPLIT;
        /* pf: the warp looks up its next split's keys while it works on this one and prefetches
         * their K/V lines into L2 (and this split's on a fresh lookup); values unchanged */
        int phys_n = -1;
        bool have_n = false;
        if constexpr (ST) { /* this pass's stages are free: the last pass's reads are done */
            RF_SYNCWARP();
        }
        for (int un = sfirst / ustep + z; un <= slast / ustep; un += Z) {
            const int s0 = max(sfirst, un * ustep), s1 = min(slast, un * ustep + ustep - 1);
            for (int s = s0; s <= s1; s++) {
                const bool uend = s == s1; /* last split of the unit (of this pass) */
                const int j0 = s * RF_PA_SPLIT + warp * CH;
                const bool had_n = have_n;
                have_n = false;
                if (j0 > uhi || j0 + CH - 1 < ulo) {
                    if (lane == 0) {
#pragma unroll
                        for (int r = 0; r < R; r++) s_ml[warp][r] = make_float2(-INFINITY, 0.0f);
                    }
                } else if constexpr (ST) {
                    const int j = j0 + lane;
                    rf_pa_split_staged<D, KT, R>(s_sc[warp], s_acc[warp], s_ml[warp], qr, k, v, bt, sq, max_blocks, bs,
                                                 lane, j, ulo, uhi, lo, hi, rstride, hoff, ks, sl, softcap, pf, had_n,
                                                 phys_n, have_n, s < s1 || un + Z <= slast / ustep,
                                                 s < s1 ? s + 1 : max(sfirst, (un + Z) * ustep), warp);
                } else {
                    /* cache row of key j0 + lane (-1: none of this pass's rows may see it) */
                    const int j = j0 + lane;
                    const int phys = had_n ? phys_n : rf_pa_phys(bt, sq, max_blocks, bs, lane, j, ulo, uhi);
                    if (pf) {
                        if (!had_n) rf_pa_prefetch<D, KT>(k, v, phys, rstride, hoff, lane);
                        const int un2 = un + Z, sn = s < s1 ? s + 1 : max(sfirst, un2 * ustep);
                        if (s < s1 || un2 <= slast / ustep) {
                            phys_n = rf_pa_phys(bt, sq, max_blocks, bs, lane, sn * RF_PA_SPLIT + warp * CH + lane,
                                                ulo, uhi);
                            have_n = true;
                        }
                    }
                    rf_pa_scores<D, KT, R>(s_sc[warp], qr, k, phys, rstride, hoff, ks, sl, softcap);
                    if (have_n) rf_pa_prefetch<D, KT>(k, v, phys_n, rstride, hoff, lane);
                    RF_SYNCWARP();
                    float mx[R], ls[R];
                    rf_pa_softmax<R>(s_sc[warp], lane, j, lo, hi, mx, ls);
                    RF_SYNCWARP();
                    rf_pa_pv<D, KT, R>(s_acc[warp], s_sc[warp], v, phys, rstride, hoff, ks, sl);
                    if (lane == 0) {
#pragma unroll
                        for (int r = 0; r < R; r++) s_ml[warp][r] = make_float2(mx[r], ls[r]);
                    }
                }
                __syncthreads();
                if (tid < R) rf_pa_fold_rows<R>(tid, mode, uend, s_ml, s_mw, s_fw, s_grp, s_tot, s_gst, s_f1, s_f2, s_m1, s_m2);
                __syncthreads();
                rf_pa_fold_elems<D, R>(at, rg, rt, un, uend, s_acc, s_mw, s_fw, s_gst, s_f1, s_f2, s_m1, s_m2, s_tpos,
                                       s_tseq, s_tst);
                __syncthreads();
            }
        }
        if (mode == RF_PA_TOTAL) rf_pa_write_rows<D, R>(at, rt, s_tot, s_tseq, s_tst);
        __syncthreads(); /* the row states are reset by the next pass */
    }
}

/* paged_attn_reduce: for each row (t, h) whose keys span more than one unit (mode RF_PA_SPLITS:
 * splits, RF_PA_GROUPS: groups), folds the unit states rf_k_paged_attn left in part / pml with
 * the same tree as the block's own fold (splits into their group in order, groups into the row
 * in order): out[t, h, d] = num / den. Rows with one unit, padding and invalid tokens were
 * written by rf_k_paged_attn and are skipped.
 * in: part f32 [n_tokens * n_head, nsp, D], pml float2 [n_tokens * n_head, nsp], pos, seq.
 * NB units' loads are issued together (1: one unit at a time, the former kernel, for the test
 * hook gpu_pa_old).
 * launch: grid (n_tokens, n_head), D threads rounded up to a warp; a programmatic dependent
 * launch after rf_k_paged_attn where the device has it (waits for it before reading anything).
 * tolerance: as rf_k_paged_attn. */
template <int NB>
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
    /* NB units' loads issued together, then folded one by one in order: the same arithmetic as
     * one unit at a time, one memory latency per NB units instead of per unit */
    for (int u0 = ufr; u0 <= ulr; u0 += NB) {
        float2 mlb[NB];
        float ab[NB];
        rf_pa_load_units<NB>(mlb, ab, part, pml, orow, nsp, ufr, u0, ulr, D, d);
#pragma unroll
        for (int i = 0; i < NB; i++) {
            const int u = u0 + i;
            if (u > ulr) break;
            const float2 ml = mlb[i];
            const float a = ab[i];
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
    }
    out[orow * D + d] = rf_pa_final_sink(M, den, num, sinks, h);
}

/* paged_attn_reduce_gp: rf_k_paged_attn_reduce for mode RF_PA_SPLITS with the groups of a row
 * folded side by side: thread (d, gi) folds the splits of group gb + gi in order (the loads of
 * its <= RF_PA_GROUP splits issued together), then thread (d, 0) folds the groups' states into
 * the row in order. The tree and every operation are those of rf_k_paged_attn_reduce (groups are
 * independent until they fold into the row), so the bits are too; one memory latency and
 * RF_PA_GROUP + GP fold steps per GP groups instead of a step per split.
 * launch: grid (n_tokens, n_head), block (D rounded up to a warp, GP), GP * blockDim.x <= 512
 * (at 1024 the register cap of 64 spills the loads in flight). */
__global__ void __launch_bounds__(512)
rf_k_paged_attn_reduce_gp(float *out, const float *__restrict__ part, const float2 *__restrict__ pml,
                          const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, int n_head, int D,
                          int window, int pmax, int nsp, const float *__restrict__ sinks) {
    __shared__ float s_num[512];
    __shared__ float2 s_gml[32];
    rf_pdl_trigger();
    rf_pdl_wait(); /* part, pml: written by rf_k_paged_attn, which may still be running */
    const int64_t t = blockIdx.x;
    const int h = blockIdx.y, d = threadIdx.x, gi = threadIdx.y, DT = blockDim.x, GP = blockDim.y;
    const int p = pos[t]; /* the same for the whole block: it returns as one */
    if (p < 0 || p > pmax) return;
    const int ufr = (window > 0 && p >= window ? p - window + 1 : 0) / RF_PA_SPLIT, ulr = p / RF_PA_SPLIT;
    if (ufr == ulr || seq[t] < 0) return;
    const bool act = d < D;
    const int64_t orow = t * n_head + h;
    float M = -INFINITY, den = 0.0f, num = 0.0f, fa, fb;
    for (int gb = ufr / RF_PA_GROUP; gb <= ulr / RF_PA_GROUP; gb += GP) {
        const int g = gb + gi;
        float Mg = -INFINITY, deng = 0.0f, numg = 0.0f;
        if (act && g <= ulr / RF_PA_GROUP) {
            const int u0 = max(ufr, g * RF_PA_GROUP), u1 = min(ulr, g * RF_PA_GROUP + RF_PA_GROUP - 1);
            float2 mlb[RF_PA_GROUP];
            float ab[RF_PA_GROUP];
            rf_pa_load_units<RF_PA_GROUP>(mlb, ab, part, pml, orow, nsp, ufr, u0, u1, D, d);
#pragma unroll
            for (int i = 0; i < RF_PA_GROUP; i++) { /* split u0 + i into its group */
                if (u0 + i <= u1) {
                    const int m1 = rf_pa_factors(Mg, deng, mlb[i].x, mlb[i].y, fa, fb);
                    numg = rf_pa_apply(numg, ab[i], m1, fa, fb);
                }
            }
        }
        __syncthreads(); /* the previous round's group states are read */
        s_num[gi * DT + d] = numg;
        if (d == 0) s_gml[gi] = make_float2(Mg, deng);
        __syncthreads();
        if (gi == 0 && act) {
            for (int j = 0; j < GP && gb + j <= ulr / RF_PA_GROUP; j++) { /* the groups into the row */
                const float2 ml = s_gml[j];
                const int m2 = rf_pa_factors(M, den, ml.x, ml.y, fa, fb);
                num = rf_pa_apply(num, s_num[j * DT + d], m2, fa, fb);
            }
        }
    }
    if (gi == 0 && act) out[orow * D + d] = rf_pa_final_sink(M, den, num, sinks, h);
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
    int pf; /* plain kernel: 1 L2 prefetch, 0 none; staged: bytes per copy */
    bool st; /* the staged variant (rf_pa_stage_gr) */
    int pskip; /* tokens at positions >= pskip are rf_gpu_decode_attention's (INT_MAX: none) */
};

template <int D, typename KT, int R, bool ST>
static rf_status rf_pa_go(rf_gpu_ctx *ctx, dim3 grid, unsigned threads, const rf_pa_args &a) {
    const KT *k = (const KT *)a.k, *v = (const KT *)a.v;
    size_t smem = 0;
    if constexpr (ST) { /* a K and a V stage per warp, past the default 48 KiB with the static arrays */
        static size_t set[RF_GPU_MAX_DEVICES];
        smem = (size_t)2 * RF_PA_WARPS * rf_pa_stg<D, KT>::BYTES;
        rf_status st = rf_gpu_smem_attr(ctx, (const void *)rf_k_paged_attn<D, KT, R, ST>, smem, 48 * 1024, set,
                                        "rf_k_paged_attn");
        if (st) return st;
    }
    const rf_test_hooks *hk = rf_test_hooks_get();
    const bool pdl = !(hk && hk->gpu_attn_nopdl); /* the test hook: in stream order, as before */
    return rf_gpu_launch(ctx, "rf_k_paged_attn", pdl, rf_k_paged_attn<D, KT, R, ST>, grid, dim3(threads), smem,
                         a.out, a.part, a.pml, a.q, k, v, a.pos, a.seq, a.bt, a.n_tokens, a.max_blocks,
                         a.bs, a.n_head, a.n_head_kv, a.G, a.GS, a.NQ, a.HS, a.scale, a.window,
                         a.softcap, a.pmax, a.mode, a.nsp, a.sinks, a.pf, a.pskip);
}

/* The staged variant's shapes (rf_pa_stg): f16 and q8_0 caches with head dims 64 and 128 (two
 * stages of 16 rows per warp stay <= 64 KiB a block), CUDA only (cp.async, sm_80+). */
template <typename KT> static constexpr bool rf_pa_stage_kt() {
    return sizeof(KT) == 2 || rf_pa_kt<KT>::EPU == 32;
}
#if !defined(RF_HIP)
static bool rf_pa_stage_dim(int D) { return D == 64 || D == 128; }
#endif

template <typename KT>
static rf_status rf_pa_dispatch(rf_gpu_ctx *ctx, int D, int R, dim3 grid, unsigned threads,
                                const rf_pa_args &a) {
#if !defined(RF_HIP)
    if constexpr (rf_pa_stage_kt<KT>()) {
        if (a.st) {
#define RF_PA_SCASE(DD, RR) \
    if (D == DD && R == RR) return rf_pa_go<DD, KT, RR, true>(ctx, grid, threads, a);
#define RF_PA_SDIM(DD) RF_PA_SCASE(DD, 1) RF_PA_SCASE(DD, 2) RF_PA_SCASE(DD, 4) RF_PA_SCASE(DD, 8)
            RF_PA_SDIM(64)
            RF_PA_SDIM(128)
#undef RF_PA_SDIM
#undef RF_PA_SCASE
        }
    }
#endif
#define RF_PA_CASE(DD, RR)                                                                    \
    if constexpr (DD % rf_pa_kt<KT>::EPU == 0)                                                \
        if (D == DD && R == RR) return rf_pa_go<DD, KT, RR, false>(ctx, grid, threads, a);
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
    return rf_gpu_paged_attention_hint(ctx, out, q, k, v, kv_type, n_tokens, pos, seq, block_table, max_blocks,
                                       block_size, n_head, n_head_kv, head_dim, scale, window, softcap, max_pos,
                                       sinks, n_tokens <= RF_PA_DECODE_MAX);
}

extern "C" rf_status rf_gpu_paged_attention_hint(rf_gpu_ctx *ctx, float *out, const float *q, const void *k,
                                                 const void *v, rf_type kv_type, int64_t n_tokens,
                                                 const int32_t *pos, const int32_t *seq,
                                                 const int32_t *block_table, int64_t max_blocks, int64_t block_size,
                                                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                                                 int64_t window, float softcap, int64_t max_pos, const float *sinks,
                                                 bool decode) {
    return rf_gpu_paged_attention_route(ctx, out, q, k, v, kv_type, n_tokens, pos, seq, block_table, max_blocks,
                                        block_size, n_head, n_head_kv, head_dim, scale, window, softcap, max_pos, sinks,
                                        decode, 0);
}

extern "C" rf_status rf_gpu_paged_attention_route(rf_gpu_ctx *ctx, float *out, const float *q, const void *k,
                                                  const void *v, rf_type kv_type, int64_t n_tokens,
                                                  const int32_t *pos, const int32_t *seq,
                                                  const int32_t *block_table, int64_t max_blocks, int64_t block_size,
                                                  int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                                                  int64_t window, float softcap, int64_t max_pos, const float *sinks,
                                                  bool decode, int64_t min_keys) {
    if (head_dim > 256) /* wider heads (Gemma 4's full layers): gpu_attention_wide.cu */
        return rf_gpu_attention_wide(ctx, out, q, k, v, kv_type, n_tokens, pos, seq, block_table, max_blocks,
                                     block_size, n_head, n_head_kv, head_dim, scale, window, softcap, max_pos, sinks,
                                     decode);
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
    const rf_test_hooks *hk = rf_test_hooks_get();
    const bool old = hk && hk->gpu_pa_old;
    if (old) decode = n_tokens <= RF_PA_DECODE_MAX; /* the former rule: by the count alone */
    /* decode rows: one token per block, its query heads of one kv head in a warp (a block of
     * several tokens of different sequences would walk their keys one sequence after another,
     * its rows half idle, at the larger R's register count); prompt chunks: consecutive tokens
     * of a sequence fill a warp's rows too, sharing each K/V load */
    /* decode rows per warp at most RF_PA_DECODE_RMAX (4): a GQA group of 8 query heads takes two
     * blocks of 4 rows, the R = 4 kernel's code (~2/3 of R = 8's; a short row runs most of it once,
     * cold: the step's weights have emptied L2 and the instruction caches since the last layer).
     * Measured on an H200 (test_gpu_paged_attention's short-depth table, 2026-11-29): 70B-shaped
     * decode rows (64 / 8 heads, head 128) 10.5-15.9 us a call back to back at depths 16-1,024 where
     * 8 rows took 14.2-19.7, 16-21 us cold where 8 rows took 25-30, 8 sequences at 1,024 keys 52.6
     * against 61.7 us; the same bits (every case of the test checks the row caps) */
    int dcap = RF_PA_DECODE_RMAX < rmax ? RF_PA_DECODE_RMAX : rmax;
    if (hk && hk->gpu_pa_rows > 0) dcap = hk->gpu_pa_rows < rmax ? hk->gpu_pa_rows : rmax; /* test hook: another cap */
    int R = decode ? rf_pa_pow2((int)(G < dcap ? G : dcap)) : rmax;
    if (hk && hk->gpu_pa_rows > 0) /* test hook: prompt chunks too (the same arithmetic per row) */
        while (R > 1 && R > hk->gpu_pa_rows) R /= 2;
    const int64_t GS = G < R ? G : R, NQ = R / GS, HS = (G + GS - 1) / GS;
    const int64_t X = (n_tokens + NQ - 1) / NQ, Y = n_head_kv * HS;
    RF_GPU_REQUIRE(Y <= 65535, op, "n_head_kv=%lld too large", (long long)n_head_kv);

    const int64_t pmax64 = max_pos < max_blocks * block_size - 1 ? max_pos : max_blocks * block_size - 1;
    int pmax = pmax64 < 0 ? -1 : (int)pmax64;
    /* decode rows that see min_keys keys or more: the tensor-core kernel (gpu_decode_attention.cu);
     * a row's kernel follows from its own position, so the rows here keep their bits. This kernel
     * then serves positions < min_keys - 1 only, and sizes its splits for them. */
    int pskip = INT_MAX;
    if (decode && !old && min_keys > 0 &&
        rf_gpu_decode_attention_wanted(ctx, kv_type, n_tokens, head_dim, n_head, n_head_kv, window, pmax, min_keys)) {
        rf_status st = rf_gpu_decode_attention(ctx, out, q, k, v, kv_type, n_tokens, pos, seq, block_table, max_blocks,
                                               block_size, n_head, n_head_kv, head_dim, scale, window, softcap, max_pos,
                                               sinks, min_keys);
        if (st) return st;
        /* min_keys 1: every row with a position is the decode kernel's (its merge writes the padding
         * rows' zeros): the paged kernel and its reduce would launch for nothing, two kernels of a
         * graph step (~9.6 us a layer in op times at depth 16,384, the step's cost at depth 0) */
        if (min_keys <= 1) return RF_OK;
        pskip = (int)(min_keys - 1);
        if (pmax > pskip - 1) pmax = pskip - 1;
    }
    /* a window that covers every position does nothing: drop it (same arithmetic) */
    const int win = window > 0 && window <= pmax ? (int)window : 0;
    /* units (splits, groups) a row can span */
    const int64_t span = win > 0 ? win : (int64_t)pmax + 1;
    const int64_t nsp_s = pmax < 0 ? 1 : (span - 1) / RF_PA_SPLIT + 2 < pmax / RF_PA_SPLIT + 1
                                            ? (span - 1) / RF_PA_SPLIT + 2 : pmax / RF_PA_SPLIT + 1;
    const int64_t gk = (int64_t)RF_PA_SPLIT * RF_PA_GROUP;
    const int64_t nsp_g = pmax < 0 ? 1 : (span - 1) / gk + 2 < pmax / gk + 1 ? (span - 1) / gk + 2 : pmax / gk + 1;

    /* staged (CUDA sm_80+, f16 / q8_0, head dim 64 or 128): the K/V copies' size, the largest
     * of 16, 8, 4 bytes that divides every head row's address (q8_0 rows are 34-byte blocks) */
    int gr = 0;
#if !defined(RF_HIP)
    if (!old && !(hk && hk->gpu_pa_nostage) && ctx->info.cc_major >= 8 && kv_type != RF_TYPE_F32 &&
        rf_pa_stage_dim(D)) {
        const int64_t hbytes = kv_type == RF_TYPE_Q8_0 ? D / 32 * 34 : (int64_t)D * 2;
        const uint64_t al = (uint64_t)(hbytes * n_head_kv) | (uint64_t)hbytes | (uint64_t)(uintptr_t)k |
                            (uint64_t)(uintptr_t)v;
        gr = 16;
        while (gr >= 4 && al % (uint64_t)gr) gr /= 2;
        if (gr < 4) gr = 0;
    }
#endif
    /* decode calls that can see few keys (their depth bucket, RF_GPU_PA_ONE_BLOCK: graph steps
     * record their bucket's last position as pmax), where one block holds all of a kv head's
     * query heads, leave each row group to that block: it walks the row's splits in order and
     * folds them in place, no partial states and no second kernel (which launches and waits for
     * the whole grid even with nothing to fold). Measured on an H200 (docs/perf-gpu.md): llama3-8b
     * (4 query heads a kv head) +3.6 to +3.9% a step at depths 128-255, +3.5% at 8 sequences, +5%
     * at 32; llama2-70b widths (8 a kv head: two blocks) -1 to -2%, so those keep the split form;
     * deeper rows (three splits and more) lose as one block's walk. And 16 sequences (128 row
     * groups, over half the SMs) lost 1-2%: where the row groups alone take more than half the
     * SMs and the split form's grid is still resident at once, the split form stays. */
    const int64_t one_block = rf_knob_int(RF_KNOB_GPU_PA_ONE_BLOCK);
    const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
    bool whole = decode && !old && HS == 1 && one_block > 0 && pmax >= 0 && rf_depth_bucket_keys(pmax) <= one_block;
    /* spread the splits over gridDim.z blocks when the rows alone would leave the device idle,
     * the partial states through memory per split, or per group if that is too large. Staged:
     * as many blocks as are resident at once (two per SM up to 4 rows per warp, else one), so
     * that a block walks several splits and its copies of the next overlap this one's work;
     * plain: four per SM. The schedule changes no bits (the header comment). */
    const int64_t per_sm = gr ? (R <= 4 ? 2 : 1) : 4;
    const int64_t target = per_sm * sms;
    if (whole && 2 * X * Y > sms && 2 * X * Y <= target) whole = false;
    const size_t row_slot = (size_t)n_tokens * (size_t)n_head * ((size_t)D + 2) * sizeof(float);
    int mode = RF_PA_TOTAL;
    int64_t Zb = 1, nsp = 1;
    if (!whole && X * Y < target && nsp_s > 1) {
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
    a.pmax = pmax, a.mode = mode, a.nsp = (int)nsp, a.sinks = sinks, a.pf = gr ? gr : old ? 0 : 1;
    a.st = gr > 0, a.pskip = pskip;

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
    if (mode == RF_PA_SPLITS && !old) { /* the groups of a row side by side */
        const int64_t ng = nsp / RF_PA_GROUP + 2; /* groups a row can touch */
        const unsigned gp = (unsigned)(ng < 512 / rt ? ng : 512 / rt);
        st = rf_gpu_launch(ctx, "rf_k_paged_attn_reduce_gp", true, rf_k_paged_attn_reduce_gp,
                           dim3((unsigned)n_tokens, (unsigned)n_head), dim3(rt, gp), 0, out, (const float *)a.part,
                           (const float2 *)a.pml, pos, seq, a.n_head, D, win, pmax, a.nsp, sinks);
    } else {
        st = rf_gpu_launch(ctx, "rf_k_paged_attn_reduce", true,
                           old ? rf_k_paged_attn_reduce<1> : rf_k_paged_attn_reduce<16>,
                           dim3((unsigned)n_tokens, (unsigned)n_head), dim3(rt), 0, out, (const float *)a.part,
                           (const float2 *)a.pml, pos, seq, a.n_head, D, win, pmax, mode, a.nsp, sinks);
    }
    ctx->scratch_used = mark;
    return st;
}
