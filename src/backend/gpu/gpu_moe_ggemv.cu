/* gpu_moe_ggemv.cu — the grouped GEMV of the indirect product over expert ids: the slots sorted
 * by expert (rf_k_moe_group's tiles of up to RF_MOE_TILE), a block per (tile, 32 output rows)
 * reads each weight unit once and dots it with every slot of its tile, each slot's sum the
 * one-token GEMV's operations in its order (the same bits). Two forms: one product into the
 * sorted rows (matmul_id's tiled path, moe_ffn's down), and gate + up with the GLU and the down
 * input's quantization in the epilogue (moe_ffn's gate/up). gpu_moe.cu dispatches. */
#include "backend/gpu/gpu_moe.cuh"

/* The block of rf_k_moe_ggemv<T, LPR, NP>: a group of LPR lanes sums a row as rf_moe_row does
 * (the one-token kernels' lanes per row: the bits depend on it), R rows at once (their NP
 * products: every unit of x read from L1 once for NP R weight units; the K-quants' units are
 * 144-210 bytes of registers each, so one), NT threads (at most 128), P passes over the block's
 * 32 rows. */
template <int T, int LPR, int NP> struct rf_gg_shape {
#if defined(RF_HIP) /* compile-checked only: one row a group, the size of the tiled kernel before */
    static constexpr int R = 1;
#else
    static constexpr int R = rf_moe_fmt<T>::K ? 1 : NP == 1 && LPR == 32 ? 4 : 2;
#endif
    static constexpr int NT = 32 * LPR / R < 128 ? 32 * LPR / R : 128;
    static constexpr int G = NT / LPR;
    static constexpr int P = 32 / (G * R);
    static_assert(NT % 32 == 0 && G * R * P == 32, "32 rows a block, whole warps");
};

/* moe_ggemv's arguments. Tile tiles[blockIdx.y] = (expert e, first row p0, end row p1, 0) of
 * the sorted slots (e < 0: unused, the block leaves); weights: n_expert * n_out rows of
 * row_bytes (w0; NP 2: w0 the gate, w1 the up weight of one type); x: qx / rec, rf_k_quantize_x's
 * layout with rf_moe_fmt<T>::REC-byte records, row p of the sorted rows (src NULL) or src[p] /
 * xdiv (src[p]: the slot of sorted row p; xdiv k: x per token, 1: x per slot). */
struct rf_moe_gg_args {
    float *ys;      /* NP 1: [rows, n_out] in sorted order, no bias */
    float *g;       /* NP 2: the GLU [n k, n_out] in slot order */
    int8_t *qd;     /* NP 2, NULL or the GLU quantized as rf_k_quantize_x<1, rkd> in sorted rows */
    float4 *dd;     /*       (qd's records) */
    int rkd;
    const uint8_t *w0, *w1;
    const int8_t *qx;
    const uint8_t *rec;
    const int4 *tiles;
    const int32_t *src;       /* NULL, or the slot of sorted row p (NP 2: not NULL) */
    int xdiv;
    const float *bg, *bu;     /* NP 2: NULL or [n_expert, n_out] */
    int n_in, n_out, kind; /* kind: rf_glu_kind */
    int64_t row_bytes;
    int wrun, xb;          /* staged form: bytes of shared memory a weight run takes, a slot's x units */
};

/* moe_ggemv: for each slot j of the tile (sorted row p = p0 + j) and row o of the block's 32,
 * NP 1: ys[p, o] = W_e[o] . x_p; NP 2: v = glu(Wg_e[o] . x_p + bg[e, o], Wu_e[o] . x_p + bu[e, o]),
 * g[src[p], o] = v, and (qd not NULL) the block's 32 v of slot j (one 32-element group of the
 * down product's x) quantized into row p of qd / dd by one warp from shared memory. Each (row,
 * slot) sum: lane sub of the row's LPR adds units sub, sub + LPR, ... with explicitly rounded
 * adds (rf_moe_xdot of the unit rf_moe_wload read once for the tile), then the butterfly over
 * the LPR lanes, the biases added after: rf_moe_row's operations (the per-slot and decode
 * kernels') in its order, so a slot's bits never depend on its tile or path. n_out a multiple
 * of 32 for NP 2. launch: grid (ceil(n_out / 32), tiles), NT threads. */
template <int T, int LPR, int NP, bool STG>
__global__ void __launch_bounds__((rf_gg_shape<T, LPR, NP>::NT)) rf_k_moe_ggemv(const rf_moe_gg_args a) {
    using S = rf_gg_shape<T, LPR, NP>;
    constexpr int R = S::R, BN = RF_MOE_TILE, REC = rf_moe_fmt<T>::REC, UE = rf_moe_fmt<T>::UE;
    static_assert(!STG || (rf_moe_fmt<T>::K && R == 1), "the staged form: K-quants, one row a group");
    __shared__ float ysh[NP == 2 ? BN : 1][32];
    extern __shared__ uint4 rf_gg_smem[]; /* STG: NP weight runs of the block's 32 rows, then the tile's x units */
    const int4 tl = a.tiles[blockIdx.y];
    if (tl.x < 0) return; /* the whole block: nothing below it syncs */
    const int e = tl.x, np = tl.z - tl.y, sub = (int)threadIdx.x % LPR, grp = (int)threadIdx.x / LPR;
    const int n_in = a.n_in, n_out = a.n_out, nu = n_in / UE, rb = n_in / 32 * REC;
    int xrow[BN]; /* the tile's x rows (past np: the first, never summed) */
#pragma unroll
    for (int j = 0; j < BN; j++) {
        const int p = tl.y + (j < np ? j : 0);
        xrow[j] = a.src ? a.src[p] / a.xdiv : p;
    }
    const uint8_t *wb[NP] = {a.w0};
    if constexpr (NP == 2) wb[1] = a.w1;
    uint8_t *sm = (uint8_t *)rf_gg_smem, *xs = sm + NP * a.wrun;
    const int row0 = (int)blockIdx.x * 32;
    int woff[NP] = {0};
    if constexpr (STG) { /* the block's rows of each weight and the tile's x units, then the same dots */
        const int nr = n_out - row0 < 32 ? n_out - row0 : 32;
#pragma unroll
        for (int q = 0; q < NP; q++)
            woff[q] = rf_moe_stage(sm + q * a.wrun, wb[q] + ((int64_t)e * n_out + row0) * a.row_bytes,
                                   nr * (int)a.row_bytes, (int)threadIdx.x, S::NT);
        for (int j = 0; j < np; j++) rf_moe_stage_x<T>(xs + j * a.xb, a.qx, a.rec, xrow[j], n_in, (int)threadIdx.x, S::NT);
        rf_cp_async_commit();
        rf_cp_async_wait<0>();
        __syncthreads();
    }
#pragma unroll 1
    for (int ps = 0; ps < S::P; ps++) {
        const int rl = (ps * S::G + grp) * R; /* the group's first row of the pass, in the block */
        int64_t wo[R];
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int row = (int)blockIdx.x * 32 + rl + i;
            wo[i] = ((int64_t)e * n_out + (row < n_out ? row : n_out - 1)) * a.row_bytes;
        }
        float acc[NP][R][BN];
#pragma unroll
        for (int q = 0; q < NP; q++)
#pragma unroll
            for (int i = 0; i < R; i++)
#pragma unroll
                for (int j = 0; j < BN; j++) acc[q][i][j] = 0.0f;
        for (int u = sub; u < nu; u += LPR) {
            rf_moe_wu<T> wv[NP][R];
#pragma unroll
            for (int q = 0; q < NP; q++)
#pragma unroll
                for (int i = 0; i < R; i++) {
                    if constexpr (STG) { /* row rl + i of the staged run (a clamped row: the last one) */
                        const int rr = row0 + rl + i < n_out ? rl + i : n_out - 1 - row0;
                        rf_moe_wload<T>(wv[q][i], sm + q * a.wrun + woff[q] + (int64_t)rr * a.row_bytes, u);
                    } else {
                        rf_moe_wload<T>(wv[q][i], wb[q] + wo[i], u);
                    }
                }
#pragma unroll
            for (int j = 0; j < BN; j++)
                if (j < np) { /* the slot's unit of x read once for the NP R weight units */
                    rf_moe_xu<T> xu;
                    if constexpr (STG) {
                        const uint8_t *xu0 = xs + j * a.xb + u * rf_moe_xs<T>::XS;
                        rf_moe_xload<T>(xu, 0, (const int8_t *)xu0, xu0 + UE);
                    } else {
                        rf_moe_xload<T>(xu, u, a.qx + (int64_t)xrow[j] * n_in, a.rec + (int64_t)xrow[j] * rb);
                    }
#pragma unroll
                    for (int q = 0; q < NP; q++)
#pragma unroll
                        for (int i = 0; i < R; i++)
                            acc[q][i][j] = __fadd_rn(acc[q][i][j], rf_moe_xdot<T>(wv[q][i], xu));
                }
        }
#pragma unroll
        for (int j = 0; j < BN; j++)
            if (j < np) /* np: the same for the whole block, so every lane meets the butterfly */
#pragma unroll
                for (int q = 0; q < NP; q++)
#pragma unroll
                    for (int i = 0; i < R; i++)
#pragma unroll
                        for (int m = LPR / 2; m > 0; m >>= 1) acc[q][i][j] += RF_SHFL_XOR(acc[q][i][j], m);
        if constexpr (NP == 1) { /* a store a pair, by the group's first lane (spread over the lanes as
                                  * below, the predicated moves cost more than the stores: ncu,
                                  * gpt-oss's down at 32 tokens, 54.1M -> 58.8M instructions) */
            if (sub == 0)
#pragma unroll
                for (int i = 0; i < R; i++)
#pragma unroll
                    for (int j = 0; j < BN; j++)
                        if (j < np && row0 + rl + i < n_out) a.ys[(int64_t)(tl.y + j) * n_out + row0 + rl + i] = acc[0][i][j];
        } else {
            /* the GLU's epilogue spread over the group's lanes (after the butterfly every lane holds
             * every sum): lane sub takes pairs k = i BN + j = sub, sub + LPR, ..., its two sums
             * picked by predicated moves. One lane doing all R BN pairs (an exp and a division
             * each) left a quarter of the issue slots with one thread active (ncu, gpt-oss's
             * gate/up at 32 tokens: 23.4 active threads a warp, 254 us; spread: 29.3, 222 us).
             * The same operations on the same sums. */
#pragma unroll
            for (int k0 = 0; k0 < R * BN; k0 += LPR) {
                const int k = k0 + sub, i = k / BN, j = k % BN, row = row0 + rl + i;
                float vg = 0.0f, vu = 0.0f;
#pragma unroll
                for (int kk = k0; kk < k0 + LPR && kk < R * BN; kk++)
                    if (k == kk) vg = acc[0][kk / BN][kk % BN], vu = acc[NP - 1][kk / BN][kk % BN];
                if (k >= R * BN || j >= np || row >= n_out) continue;
                const int64_t bo = (int64_t)e * n_out + row;
                const float v = rf_moe_glu(a.kind, vg + (a.bg ? a.bg[bo] : 0.0f), vu + (a.bu ? a.bu[bo] : 0.0f));
                a.g[(int64_t)a.src[tl.y + j] * n_out + row] = v;
                ysh[j][rl + i] = v;
            }
        }
    }
    if constexpr (NP == 2) { /* moe_gemv_gluq's epilogue: slot j's 32 outputs quantized by warp j % warps */
        if (!a.qd) return; /* the whole block */
        __syncthreads();
        const int l = (int)threadIdx.x % 32, i = (int)blockIdx.x * 32 + l;
        for (int j = (int)threadIdx.x / 32; j < np; j += S::NT / 32) {
            if (a.rkd == 0) rf_quantize_elem<1, 0>(a.qd, a.dd, ysh[j][l], i, n_out, tl.y + j, l);
            else if (a.rkd == 1) rf_quantize_elem<1, 1>(a.qd, a.dd, ysh[j][l], i, n_out, tl.y + j, l);
            else rf_quantize_elem<1, 2>(a.qd, a.dd, ysh[j][l], i, n_out, tl.y + j, l);
        }
    }
}

/* the staged form's shared memory: NP runs of the block's 32 rows, a tile's x units */
template <int T> static size_t rf_gg_smem_bytes(int np, int64_t n_in, int64_t row_bytes) {
    return (size_t)np * rf_moe_run_bytes(32 * (int)row_bytes) + (size_t)RF_MOE_TILE * (n_in / rf_moe_fmt<T>::UE) * rf_moe_xs<T>::XS;
}

bool rf_moe_ggemv_staged(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in) {
    size_t smem;
    switch (t) {
    case RF_TYPE_Q4_K: smem = rf_gg_smem_bytes<RF_TYPE_Q4_K>(2, n_in, n_in / 256 * 144); break;
    case RF_TYPE_Q5_K: smem = rf_gg_smem_bytes<RF_TYPE_Q5_K>(2, n_in, n_in / 256 * 176); break;
    case RF_TYPE_Q6_K: smem = rf_gg_smem_bytes<RF_TYPE_Q6_K>(2, n_in, n_in / 256 * 210); break;
    default: return false;
    }
    return n_in % 256 == 0 && n_in <= (1 << 20) && rf_moe_stages(t) && smem <= rf_gpu_smem_optin(ctx);
}

/* the launch of rf_k_moe_ggemv<T, lanes, NP> over n_tiles tiles (at most 65535) */
template <int T, int NP>
static rf_status rf_gg_launch(rf_gpu_ctx *ctx, const rf_moe_gg_args &a, int n_tiles) {
    if constexpr (T == RF_MOE_F32X) {
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_k_moe_ggemv: int8 x only");
    } else {
        const int lpr = rf_moe_lpr(a.n_in / rf_moe_fmt<T>::UE);
        const dim3 grid((unsigned)((a.n_out + 31) / 32), (unsigned)n_tiles);
        if constexpr (RF_MOE_STAGED && rf_moe_fmt<T>::K) { /* the staged form where the shared memory fits */
            rf_moe_gg_args b = a;
            b.wrun = rf_moe_run_bytes(32 * (int)a.row_bytes), b.xb = a.n_in / rf_moe_fmt<T>::UE * rf_moe_xs<T>::XS;
            const size_t smem = rf_gg_smem_bytes<T>(NP, a.n_in, a.row_bytes);
            if (rf_moe_stages((rf_type)T) && smem <= rf_gpu_smem_optin(ctx)) {
                static size_t attr[4][RF_GPU_MAX_DEVICES];
                const int li = lpr == 2 ? 0 : lpr == 4 ? 1 : lpr == 8 ? 2 : 3;
                const char *nms = NP == 2 ? "rf_k_moe_ggemv_glus" : "rf_k_moe_ggemvs";
                rf_status st;
#define RF_GGS(L)                                                                                                 \
    ((st = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(rf_k_moe_ggemv<T, L, NP, true>), smem,            \
                            sizeof(float) * 32 * (NP == 2 ? RF_MOE_TILE : 1), attr[li], nms)) ? st                \
     : rf_gpu_launch(ctx, nms, false, rf_k_moe_ggemv<T, L, NP, true>, grid, dim3(rf_gg_shape<T, L, NP>::NT), smem, b))
                return lpr == 2 ? RF_GGS(2) : lpr == 4 ? RF_GGS(4) : lpr == 8 ? RF_GGS(8) : RF_GGS(32);
#undef RF_GGS
            }
        }
        const char *nm = NP == 2 ? "rf_k_moe_ggemv_glu" : "rf_k_moe_ggemv";
#define RF_GGL(L) \
    rf_gpu_launch(ctx, nm, false, rf_k_moe_ggemv<T, L, NP, false>, grid, dim3(rf_gg_shape<T, L, NP>::NT), 0, a)
        return lpr == 2 ? RF_GGL(2) : lpr == 4 ? RF_GGL(4) : lpr == 8 ? RF_GGL(8) : RF_GGL(32);
#undef RF_GGL
    }
}

rf_status rf_moe_gemv_tiles_launch(rf_gpu_ctx *ctx, float *ys, const void *w, rf_type t, const int8_t *qx,
                                   const uint8_t *rec, const int32_t *src, int64_t xdiv, const int4 *tiles,
                                   int64_t n_tiles, int64_t n_in, int64_t n_out, int64_t row_bytes) {
    rf_moe_gg_args a = {};
    a.ys = ys, a.w0 = (const uint8_t *)w, a.qx = qx, a.rec = rec, a.src = src, a.xdiv = (int)xdiv;
    a.n_in = (int)n_in, a.n_out = (int)n_out, a.row_bytes = row_bytes;
    rf_status st = RF_OK;
    for (int64_t t0 = 0; t0 < n_tiles && !st; t0 += 65535) { /* grid.y holds 65535 tiles */
        const int nt = (int)(n_tiles - t0 < 65535 ? n_tiles - t0 : 65535);
        a.tiles = tiles + t0;
#define RF_MQT(T) rf_gg_launch<T, 1>(ctx, a, nt)
        RF_MOE_DISPATCH(st, t, qx, RF_MQT, "rf_moe_gemv_tiles_launch");
#undef RF_MQT
    }
    return st;
}

rf_status rf_moe_ggemv_glu_launch(rf_gpu_ctx *ctx, float *g, void *xqd, int rkd, const void *wg, const void *wu,
                                  rf_type t, const int8_t *qx, const uint8_t *rec, const int32_t *src,
                                  const int4 *tiles, int64_t n_tiles, const float *bg, const float *bu, int64_t n_in,
                                  int64_t n_out, int64_t row_bytes, int64_t k, int kind, int64_t nk) {
    if (rf_moe_gemv_rk(t, n_in) < 0 || (xqd && (n_out % 32 || rkd < 0 || rkd > 2)) || !src || n_tiles > 65535 ||
        nk > 65535)
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_moe_ggemv_glu_launch: type %d rows %lld x %lld, %lld tiles",
                            (int)t, (long long)n_in, (long long)n_out, (long long)n_tiles);
#if defined(RF_HIP) /* not built for HIP (its compile time; rf_moe_ggemv_fits keeps HIP off it) */
    (void)ctx, (void)g, (void)wg, (void)wu, (void)qx, (void)rec, (void)tiles, (void)bg, (void)bu, (void)row_bytes;
    (void)kind;
    return rf_set_error(RF_ERR_UNSUPPORTED, "rf_moe_ggemv_glu_launch: not built for HIP");
#else
    rf_moe_gg_args a = {};
    a.g = g, a.qd = (int8_t *)xqd, a.rkd = rkd;
    a.dd = xqd ? (float4 *)((char *)xqd + (((size_t)nk * (size_t)n_out + 255) & ~(size_t)255)) : NULL;
    a.w0 = (const uint8_t *)wg, a.w1 = (const uint8_t *)wu, a.qx = qx, a.rec = rec, a.tiles = tiles, a.src = src;
    a.bg = bg, a.bu = bu, a.n_in = (int)n_in, a.n_out = (int)n_out, a.xdiv = (int)k, a.kind = kind;
    a.row_bytes = row_bytes;
    rf_status st = RF_OK;
#define RF_MQG(T) rf_gg_launch<T, 2>(ctx, a, (int)n_tiles)
    RF_MOE_DISPATCH(st, t, qx, RF_MQG, "rf_moe_ggemv_glu_launch");
#undef RF_MQG
    return st;
#endif
}

/* The grouped GEMV path of moe_ffn (few slots per expert): the route kernel quantizes h; one
 * grouping of the ids into tiles of RF_MOE_TILE slots of one expert serves both products; gate +
 * up + GLU over the tiles (each unit of the two weights read once a tile, x read in place by
 * token) writes g and quantizes the down input into its sorted rows; down over the same tiles;
 * the scatter and the router-weighted sum in one kernel. 5 launches; each slot's bits those of
 * the one-token fused kernels (rf_moe_row's sums, the GLU and quantization of moe_gemv_gluq, the
 * combine's explicit fma from 0 in slot order), so a token's output does not depend on the
 * others in its step. */
rf_status rf_moe_ffn_ggemv(rf_gpu_ctx *ctx, float *y, const rf_gpu_moe_ffn_desc *d) {
    const int64_t n = d->n, k = d->k, nk = n * k, ne = d->n_expert, ni = d->n_in, nf = d->n_ff, no = d->n_out;
    const int rkg = rf_moe_gemv_rk(d->tg, ni), rkd = rf_moe_gemv_rk(d->td, nf);
    const int n_tiles = (int)((nk + RF_MOE_TILE - 1) / RF_MOE_TILE + ne);
    const size_t bh = rf_moe_al(rf_gpu_xq_bytes(n, ni)), bd = rf_moe_al(rf_gpu_xq_bytes(nk, nf));
    const size_t bi = rf_moe_al((size_t)nk * 4), bt = rf_moe_al((size_t)n_tiles * 16);
    size_t mark;
    void *tmp;
    rf_status st = rf_gpu_tmp(ctx, bh + bd + 2 * bi + bt + (size_t)nk * no * 4, &tmp, &mark);
    if (st) return st;
    char *c = (char *)tmp; /* qh, qd, pos, src, tiles, ysd */
    int8_t *qh = (int8_t *)c, *qd = (int8_t *)(c + bh);
    int32_t *pos = (int32_t *)(c + bh + bd), *src = (int32_t *)(c + bh + bd + bi);
    int4 *tiles = (int4 *)(c + bh + bd + 2 * bi);
    float *ysd = (float *)(c + bh + bd + 2 * bi + bt);
    const uint8_t *rh = (const uint8_t *)qh + rf_moe_al((size_t)n * ni), *rd = (const uint8_t *)qd + rf_moe_al((size_t)nk * nf);
    const int64_t rbg = ni / rf_gq_block((int)d->tg) * rf_gq_bytes((int)d->tg);
    const int64_t rbd = nf / rf_gq_block((int)d->td) * rf_gq_bytes((int)d->td);
    st = rf_moe_route_q_launch(ctx, d, qh, rkg);
    if (!st)
        st = rf_moe_group_launch(ctx, pos, src, tiles, d->ids, nk, k, ne, true, RF_MOE_TILE, n_tiles);
    if (!st)
        st = rf_moe_ggemv_glu_launch(ctx, d->g, qd, rkd, d->wg, d->wu, d->tg, qh, rh, src, tiles, n_tiles, d->bg, d->bu,
                                     ni, nf, rbg, k, d->glu, nk);
    if (!st) st = rf_moe_gemv_tiles_launch(ctx, ysd, d->wd, d->td, qd, rd, NULL, 1, tiles, n_tiles, nf, no, rbd);
    if (!st)
        st = rf_moe_scatter_comb_launch(ctx, y, ysd, pos, d->ids, d->bd, d->wts, n, k, no, ne);
    ctx->scratch_used = mark;
    return st;
}

/* matmul_id_glu on the grouped GEMV: x quantized once per token, the ids grouped into tiles, gate
 * + up + GLU over the tiles into y in slot order (the bits of the per-slot fused kernel) */
rf_status rf_moe_glu_ggemv(rf_gpu_ctx *ctx, float *y, const void *wg, const void *wu, rf_type t, int64_t n_out,
                           int64_t n_expert, int64_t n_in, const float *x, const int32_t *ids, const float *bg,
                           const float *bu, int64_t n, int64_t k, int glu) {
    const int64_t nk = n * k, rb = n_in / rf_gq_block((int)t) * rf_gq_bytes((int)t);
    const int n_tiles = (int)((nk + RF_MOE_TILE - 1) / RF_MOE_TILE + n_expert);
    const size_t bx = rf_moe_al(rf_gpu_xq_bytes(n, n_in)), bi = rf_moe_al((size_t)nk * 4);
    size_t mark;
    void *tmp;
    rf_status st = rf_gpu_tmp(ctx, bx + 2 * bi + (size_t)n_tiles * 16, &tmp, &mark);
    if (st) return st;
    char *c = (char *)tmp; /* xq, pos, src, tiles */
    int8_t *xq = (int8_t *)c;
    int32_t *pos = (int32_t *)(c + bx), *src = (int32_t *)(c + bx + bi);
    int4 *tiles = (int4 *)(c + bx + 2 * bi);
    st = rf_gemv_launch_quantize_x(ctx, xq, 1, rf_moe_gemv_rk(t, n_in), x, (int)n, n_in);
    if (!st) st = rf_moe_group_launch(ctx, pos, src, tiles, ids, nk, k, n_expert, true, RF_MOE_TILE, n_tiles);
    if (!st)
        st = rf_moe_ggemv_glu_launch(ctx, y, NULL, 0, wg, wu, t, xq, (const uint8_t *)xq + rf_moe_al((size_t)n * n_in),
                                     src, tiles, n_tiles, bg, bu, n_in, n_out, rb, k, glu, nk);
    ctx->scratch_used = mark;
    return st;
}

/* matmul_id_combine on the grouped GEMV: each slot's x row quantized, the ids grouped into tiles,
 * the down products over the tiles into sorted rows, then scattered (+ bias) and summed with the
 * router's weights in slot order (the bits of the per-slot fused kernel) */
rf_status rf_moe_comb_ggemv(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, int64_t n_out, int64_t n_expert,
                            int64_t n_in, const float *x, const int32_t *ids, const float *bias, const float *wts,
                            int64_t n, int64_t k) {
    const int64_t nk = n * k, rb = n_in / rf_gq_block((int)t) * rf_gq_bytes((int)t);
    const int n_tiles = (int)((nk + RF_MOE_TILE - 1) / RF_MOE_TILE + n_expert);
    const size_t bx = rf_moe_al(rf_gpu_xq_bytes(nk, n_in)), bi = rf_moe_al((size_t)nk * 4);
    const size_t bt = rf_moe_al((size_t)n_tiles * 16);
    size_t mark;
    void *tmp;
    rf_status st = rf_gpu_tmp(ctx, bx + 2 * bi + bt + (size_t)nk * n_out * 4, &tmp, &mark);
    if (st) return st;
    char *c = (char *)tmp; /* xq, pos, src, tiles, ys */
    int8_t *xq = (int8_t *)c;
    int32_t *pos = (int32_t *)(c + bx), *src = (int32_t *)(c + bx + bi);
    int4 *tiles = (int4 *)(c + bx + 2 * bi);
    float *ys = (float *)(c + bx + 2 * bi + bt);
    st = rf_gemv_launch_quantize_x(ctx, xq, 1, rf_moe_gemv_rk(t, n_in), x, (int)nk, n_in);
    if (!st) st = rf_moe_group_launch(ctx, pos, src, tiles, ids, nk, k, n_expert, true, RF_MOE_TILE, n_tiles);
    if (!st)
        st = rf_moe_gemv_tiles_launch(ctx, ys, w, t, xq, (const uint8_t *)xq + rf_moe_al((size_t)nk * n_in), src, 1,
                                      tiles, n_tiles, n_in, n_out, rb);
    if (!st) st = rf_moe_scatter_comb_launch(ctx, y, ys, pos, ids, bias, wts, n, k, n_out, n_expert);
    ctx->scratch_used = mark;
    return st;
}
