/* gpu_moe_gemv.cu — the GEMV half of the indirect product over expert ids (matmul_id): a GEMV
 * per (token, slot) that reads only its expert's rows, on the int8-x dots of the dense GEMVs
 * (gpu_gemv_dot.cuh, through gpu_moe.cuh's unit dot) or, for the other types, f32 x; and its
 * decode fusions (gate and up with the GLU; down with the router-weighted sum). The same GEMV
 * over expert tiles of sorted slots is gpu_moe_ggemv.cu's; gpu_moe.cu dispatches. */
#include "backend/gpu/gpu_moe.cuh"

#define RF_MOE_GEMV_THREADS 128 /* threads per block: rows of LPR lanes each */

/* One weight row wr against token row xr of x, summed over the row's LPR lanes: lane j takes
 * units j, j + LPR, ... (a unit: a 32-element block, or a 256-element super-block of the
 * K-quants; for F16 / BF16 8 elements, for the other f32-x types their block), explicitly
 * rounded adds in that order, then a butterfly over the LPR lanes (every lane holds the sum).
 * The order depends on the shape alone, never on the other slots (batch invariant). T >= 0:
 * int8 x (qx / rec: rf_k_quantize_x's x, records of rf_moe_fmt<T>::REC bytes); RF_MOE_F32X: f32
 * x of type t (F16 / BF16 in 16-byte loads, any other type element by element with rf_dq_elem:
 * the obviously-right path, not a fast one). */
template <int T, int LPR>
static __device__ __forceinline__ float rf_moe_row(const uint8_t *wr, rf_type t, const int8_t *qx, const uint8_t *rec,
                                                   const float *x, int xr, int n_in, int sub) {
    float acc = 0.0f;
    if constexpr (T != RF_MOE_F32X) {
        constexpr int REC = rf_moe_fmt<T>::REC, UE = rf_moe_fmt<T>::UE;
        const int nu = n_in / UE;
        const int8_t *xq = qx + (int64_t)xr * n_in;
        const uint8_t *xrec = rec + (int64_t)xr * (n_in / 32) * REC;
        for (int u = sub; u < nu; u += LPR) acc = __fadd_rn(acc, rf_moe_unit_dot<T>(wr, u, xq, xrec));
    } else {
        const float *xv = x + (int64_t)xr * n_in;
        if (t == RF_TYPE_F16 || t == RF_TYPE_BF16) {
            for (int u = sub; u < n_in / 8; u += LPR) {
                const uint4 q = *(const uint4 *)(wr + (int64_t)u * 16);
                const float4 a = *(const float4 *)(xv + 8 * u), b = *(const float4 *)(xv + 8 * u + 4);
                const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
                const float xf[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const uint16_t h = (uint16_t)(qw[i / 2] >> (16 * (i % 2)));
                    const float wv = t == RF_TYPE_F16 ? rf_h2f_bits(h) : rf_bf16_to_float_dev(h);
                    acc += wv * xf[i];
                }
            }
        } else {
            const int bs = rf_gq_block((int)t), bb = rf_gq_bytes((int)t), nb = n_in / bs;
            for (int u = sub; u < nb; u += LPR) {
                const uint8_t *bp = wr + (int64_t)u * bb;
                float s1 = 0.0f;
                for (int i = 0; i < bs; i++) s1 += rf_dq_elem((int)t, bp, i) * xv[(int64_t)u * bs + i];
                acc += s1;
            }
        }
    }
#pragma unroll
    for (int m = LPR / 2; m > 0; m >>= 1) acc += RF_SHFL_XOR(acc, m);
    return acc;
}

static __device__ __forceinline__ int rf_moe_expert(const int32_t *ids, int s, int n_expert) {
    const int e = ids[s];
    return e < 0 ? 0 : e >= n_expert ? n_expert - 1 : e;
}

/* moe_gemv: y[s, o] = W_e[o] . x_r (+ bias[e, o]) for slot s = s0 + blockIdx.y, e = ids[s]
 * clamped to [0, n_expert), r = s with x_per_slot, else s / k; W: n_expert * n_out rows of
 * row_bytes; x as rf_moe_row takes it (LPR 2, 4, 8 or 32: rf_moe_lpr's of the row's units).
 * Not a programmatic dependent launch (ids come from the kernel before). launch: grid
 * (ceil(n_out / (128 / LPR)), slots), 128 threads. */
template <int T, int LPR>
__global__ void __launch_bounds__(RF_MOE_GEMV_THREADS)
rf_k_moe_gemv(float *y, const uint8_t *w, rf_type t, const int8_t *qx, const uint8_t *rec, const float *x,
              const int32_t *ids, const float *bias, int n_in, int n_out, int64_t row_bytes, int k, int n_expert,
              int x_per_slot, int s0) {
    constexpr int RPB = RF_MOE_GEMV_THREADS / LPR;
    const int s = s0 + (int)blockIdx.y, sub = (int)threadIdx.x % LPR;
    const int row = (int)blockIdx.x * RPB + (int)threadIdx.x / LPR, rowc = row < n_out ? row : n_out - 1;
    const int e = rf_moe_expert(ids, s, n_expert);
    const float acc = rf_moe_row<T, LPR>(w + ((int64_t)e * n_out + rowc) * row_bytes, t, qx, rec, x,
                                         x_per_slot ? s : s / k, n_in, sub);
    if (sub == 0 && row < n_out) y[(int64_t)s * n_out + row] = acc + (bias ? bias[(int64_t)e * n_out + row] : 0.0f);
}

/* moe_gemv_glu: the gate and up products of slot s over the same x row s / k, and their GLU:
 * y[s, o] = glu(Wg_e[o] . x + bg[e, o], Wu_e[o] . x + bu[e, o]) (biases where not NULL), each
 * product moe_gemv's operations in its order and the GLU the glu op's, so y is the bits of
 * matmul_id (gate), matmul_id (up), glu. wg and wu: one type and row size. launch as moe_gemv. */
template <int T, int LPR>
__global__ void __launch_bounds__(RF_MOE_GEMV_THREADS)
rf_k_moe_gemv_glu(float *y, const uint8_t *wg, const uint8_t *wu, rf_type t, const int8_t *qx, const uint8_t *rec,
                  const float *x, const int32_t *ids, const float *bg, const float *bu, int n_in, int n_out,
                  int64_t row_bytes, int k, int n_expert, int kind, int s0) {
    constexpr int RPB = RF_MOE_GEMV_THREADS / LPR;
    const int s = s0 + (int)blockIdx.y, sub = (int)threadIdx.x % LPR;
    const int row = (int)blockIdx.x * RPB + (int)threadIdx.x / LPR, rowc = row < n_out ? row : n_out - 1;
    const int e = rf_moe_expert(ids, s, n_expert);
    const int64_t wo = ((int64_t)e * n_out + rowc) * row_bytes;
    const float ag = rf_moe_row<T, LPR>(wg + wo, t, qx, rec, x, s / k, n_in, sub);
    const float au = rf_moe_row<T, LPR>(wu + wo, t, qx, rec, x, s / k, n_in, sub);
    if (sub == 0 && row < n_out) {
        const int64_t bo = (int64_t)e * n_out + row;
        y[(int64_t)s * n_out + row] = rf_moe_glu(kind, ag + (bg ? bg[bo] : 0.0f), au + (bu ? bu[bo] : 0.0f));
    }
}

/* ---- the decode fusions; their staged forms (STG: K-quant experts) -------------------------
 * A lane dots a whole unit, for the K-quants a super-block of 144-210 bytes, so the plain kernels'
 * 16-byte loads fall a super-block apart across a warp: each load touches 32 sectors for half
 * their bytes. At one token that bound the kernels on L1 wavefronts (ncu, qwen3-30b-a3b Q4_K,
 * H200 2026-12-01: rf_k_moe_gemv_gluq 18 us, L1/TEX 88% busy, 0.12 eligible warps a scheduler,
 * stalled on L1TEX). The staged forms (STG) first copy the block's weight runs (rows of one expert are
 * contiguous) and the x units they read into shared memory, a warp's 16-byte copies side by side
 * (cp.async on CUDA sm_80+), then each lane dots its unit from there: the same bytes dotted in
 * the same order as the plain kernels, so the same bits (test_gpu_moe_fused). */

/* rf_moe_row over a staged weight row wr and a staged x row xs (the same adds in the same order) */
template <int T, int LPR>
static __device__ __forceinline__ float rf_moe_row_s(const uint8_t *wr, const uint8_t *xs, int n_in, int sub) {
    using F = rf_moe_fmt<T>;
    float acc = 0.0f;
    for (int u = sub; u < n_in / F::UE; u += LPR) {
        rf_moe_wu<T> a;
        rf_moe_xu<T> x;
        rf_moe_wload<T>(a, wr, u);
        rf_moe_xload<T>(x, 0, (const int8_t *)(xs + u * rf_moe_xs<T>::XS), xs + u * rf_moe_xs<T>::XS + F::UE);
        acc = __fadd_rn(acc, rf_moe_xdot<T>(a, x));
    }
#pragma unroll
    for (int m = LPR / 2; m > 0; m >>= 1) acc += RF_SHFL_XOR(acc, m);
    return acc;
}

/* moe_gemv_gluq: moe_gemv_glu over 32 rows a block (32 LPR threads: LPR <= 8), and the block's
 * 32 outputs of slot s, one 32-element group of the down product's x, quantized as
 * rf_k_quantize_x<1, rkd> does (qd / dd: rows of n_out) by the first warp from shared memory: y
 * is moe_gemv_glu's bits and qd / dd quantize_x's of that y, one launch where there were two.
 * n_out a multiple of 32. STG (K-quants, CUDA): the block's 32 gate rows and 32 up rows (two
 * runs of 32 row_bytes, wrun bytes of shared memory apart) and the token's x units are staged
 * first, then the same arithmetic. launch: grid (n_out / 32, slots), 32 LPR threads; STG: 2 wrun
 * + the x units' bytes of dynamic shared memory. */
template <int T, int LPR, bool STG>
__global__ void __launch_bounds__(32 * LPR)
rf_k_moe_gemv_gluq(float *y, int8_t *qd, float4 *dd, int rkd, const uint8_t *wg, const uint8_t *wu, rf_type t,
                   const int8_t *qx, const uint8_t *rec, const float *x, const int32_t *ids, const float *bg,
                   const float *bu, int n_in, int n_out, int64_t row_bytes, int k, int n_expert, int kind, int s0,
                   int wrun) {
    extern __shared__ uint4 rf_moe_smem[];
    __shared__ float ys[32];
    const int tid = (int)threadIdx.x, s = s0 + (int)blockIdx.y, sub = tid % LPR, r = tid / LPR;
    const int row = (int)blockIdx.x * 32 + r;
    const int e = rf_moe_expert(ids, s, n_expert);
    float ag, au;
    if constexpr (STG) {
        uint8_t *sm = (uint8_t *)rf_moe_smem, *xs = sm + 2 * wrun;
        const int64_t w0 = ((int64_t)e * n_out + (int64_t)blockIdx.x * 32) * row_bytes;
        const int len = 32 * (int)row_bytes, nthr = 32 * LPR;
        const int og = rf_moe_stage(sm, wg + w0, len, tid, nthr), ou = rf_moe_stage(sm + wrun, wu + w0, len, tid, nthr);
        rf_moe_stage_x<T>(xs, qx, rec, s / k, n_in, tid, nthr);
        rf_cp_async_commit();
        rf_cp_async_wait<0>();
        __syncthreads();
        ag = rf_moe_row_s<T, LPR>(sm + og + (int64_t)r * row_bytes, xs, n_in, sub);
        au = rf_moe_row_s<T, LPR>(sm + wrun + ou + (int64_t)r * row_bytes, xs, n_in, sub);
    } else {
        const int64_t wo = ((int64_t)e * n_out + row) * row_bytes;
        ag = rf_moe_row<T, LPR>(wg + wo, t, qx, rec, x, s / k, n_in, sub);
        au = rf_moe_row<T, LPR>(wu + wo, t, qx, rec, x, s / k, n_in, sub);
    }
    if (sub == 0) {
        const int64_t bo = (int64_t)e * n_out + row;
        const float v = rf_moe_glu(kind, ag + (bg ? bg[bo] : 0.0f), au + (bu ? bu[bo] : 0.0f));
        y[(int64_t)s * n_out + row] = v;
        ys[r] = v;
    }
    __syncthreads();
    if (tid < 32) { /* rkd: the down weight's record kind, one branch for the warp */
        const int i = (int)blockIdx.x * 32 + tid;
        if (rkd == 0) rf_quantize_elem<1, 0>(qd, dd, ys[tid], i, n_out, s, tid);
        else if (rkd == 1) rf_quantize_elem<1, 1>(qd, dd, ys[tid], i, n_out, s, tid);
        else rf_quantize_elem<1, 2>(qd, dd, ys[tid], i, n_out, s, tid);
    }
}

/* moe_gemv_comb: the down products of token tok = t0 + blockIdx.y's k slots (x per slot) and
 * their weighted sum: y[tok, o] = sum over j = 0..k-1 in order of wts[tok k + j] z_j with z_j =
 * W_e[o] . x[tok k + j] (+ bias[e, o]), e = ids[tok k + j]. The slots run in parallel: the
 * block's 128 / LPR groups of LPR lanes take its R rows' R k (slot, row) pairs, pair p = j R + r
 * (slot j, row o0 + r: neighbouring groups read neighbouring rows of one expert), in rounds of
 * the group count (uniform over the block, so every lane of a warp meets the butterfly; a group
 * past the last pair recomputes it and stores nothing); each z_j is moe_gemv's operations in its
 * order, kept in shared memory; then thread r sums its row's k terms as moe_combine does
 * (explicit fma from 0, j = 0..k-1). So y is the bits of matmul_id then moe_combine, a token's
 * sum never sees the other tokens (batch invariant), and a token has as many blocks as the
 * per-slot GEMV gives its k slots (R = max(1, groups / k) rows a block). R k <= RF_MOE_COMB_PAIRS.
 * STG (K-quants, CUDA): for each of the k slots the block's rows of its expert (one run of up to
 * rpb rows, wrun bytes apart) and the slot's x units (xb bytes apart) are staged first (any rpb
 * with rpb k <= RF_MOE_COMB_PAIRS: the groups take the pairs in rounds). launch: grid
 * (ceil(n_out / R), tokens), 128 threads; STG: k (wrun + xb) bytes of dynamic shared memory. */
#define RF_MOE_COMB_PAIRS 64
template <int T, int LPR, bool STG>
__global__ void __launch_bounds__(RF_MOE_GEMV_THREADS)
rf_k_moe_gemv_comb(float *y, const uint8_t *w, rf_type t, const int8_t *qx, const uint8_t *rec, const float *x,
                   const int32_t *ids, const float *bias, const float *wts, int n_in, int n_out, int64_t row_bytes,
                   int k, int n_expert, int rpb, int t0, int wrun, int xb) {
    constexpr int G = RF_MOE_GEMV_THREADS / LPR;
    extern __shared__ uint4 rf_moe_smem[];
    __shared__ float zs[RF_MOE_COMB_PAIRS];
    const int tid = (int)threadIdx.x, tok = t0 + (int)blockIdx.y, sub = tid % LPR, grp = tid / LPR;
    const int o0 = (int)blockIdx.x * rpb, np = rpb * k;
    if constexpr (STG) {
        uint8_t *sm = (uint8_t *)rf_moe_smem, *xs = sm + (int64_t)k * wrun;
        const int nr = n_out - o0 < rpb ? n_out - o0 : rpb;
        for (int j = 0; j < k; j++) {
            const int e = rf_moe_expert(ids, tok * k + j, n_expert);
            (void)rf_moe_stage(sm + (int64_t)j * wrun, w + ((int64_t)e * n_out + o0) * row_bytes,
                               nr * (int)row_bytes, tid, RF_MOE_GEMV_THREADS);
        }
        for (int j = 0; j < k; j++)
            rf_moe_stage_x<T>(xs + (int64_t)j * xb, qx, rec, tok * k + j, n_in, tid, RF_MOE_GEMV_THREADS);
        rf_cp_async_commit();
        rf_cp_async_wait<0>();
        __syncthreads();
    }
    for (int p0 = 0; p0 < np; p0 += G) {
        const int p = p0 + grp, pc = p < np ? p : np - 1, j = pc / rpb, row = o0 + pc % rpb;
        const int rowc = row < n_out ? row : n_out - 1, s = tok * k + j, e = rf_moe_expert(ids, s, n_expert);
        float acc;
        if constexpr (STG) {
            const uint8_t *src = w + ((int64_t)e * n_out + o0) * row_bytes; /* where its run was staged from */
            const int off = (int)((uintptr_t)src & 15);
            const uint8_t *sm = (const uint8_t *)rf_moe_smem, *xs = sm + (int64_t)k * wrun;
            acc = rf_moe_row_s<T, LPR>(sm + (int64_t)j * wrun + off + (int64_t)(rowc - o0) * row_bytes,
                                       xs + (int64_t)j * xb, n_in, sub);
        } else {
            acc = rf_moe_row<T, LPR>(w + ((int64_t)e * n_out + rowc) * row_bytes, t, qx, rec, x, s, n_in, sub);
        }
        if (sub == 0 && p < np) zs[p] = acc + (bias ? bias[(int64_t)e * n_out + rowc] : 0.0f);
    }
    __syncthreads();
    const int row = o0 + tid;
    if (tid < rpb && row < n_out) {
        float out = 0.0f;
        for (int j = 0; j < k; j++) out = __fmaf_rn(wts[tok * k + j], zs[j * rpb + tid], out);
        y[(int64_t)tok * n_out + row] = out;
    }
}

/* a row's lanes for type T (RF_MOE_F32X: of runtime type t) over rows of n_in */
template <int T> static int rf_moe_lanes(rf_type t, int64_t n_in) {
    if constexpr (T != RF_MOE_F32X) return rf_moe_lpr(n_in / rf_moe_fmt<T>::UE);
    else return rf_moe_lpr(t == RF_TYPE_F16 || t == RF_TYPE_BF16 ? n_in / 8 : n_in / rf_gq_block((int)t));
}

static dim3 rf_moe_grid(int64_t n_out, int lpr, int ny) {
    return dim3((unsigned)((n_out + RF_MOE_GEMV_THREADS / lpr - 1) / (RF_MOE_GEMV_THREADS / lpr)), (unsigned)ny);
}

/* the launch of kernel K<T, lanes> (lanes from rf_moe_lanes<T>) with the arguments after */
#define RF_MOE_BY_LANES(st, lpr, name, K, T, grid, ...)                                                          \
    do {                                                                                                          \
        const dim3 b_(RF_MOE_GEMV_THREADS);                                                                       \
        st = lpr == 2   ? rf_gpu_launch(ctx, name, false, K<T, 2>, grid, b_, 0, __VA_ARGS__)                       \
             : lpr == 4 ? rf_gpu_launch(ctx, name, false, K<T, 4>, grid, b_, 0, __VA_ARGS__)                       \
             : lpr == 8 ? rf_gpu_launch(ctx, name, false, K<T, 8>, grid, b_, 0, __VA_ARGS__)                       \
                        : rf_gpu_launch(ctx, name, false, K<T, 32>, grid, b_, 0, __VA_ARGS__);                     \
    } while (0)

template <int T>
static rf_status rf_moe_launch_one(rf_gpu_ctx *ctx, float *y, const uint8_t *w, rf_type t, const int8_t *qx,
                                   const uint8_t *rec, const float *x, const int32_t *ids, const float *bias, int n_in,
                                   int n_out, int64_t rb, int k, int n_expert, int xps, int s0, int ns) {
    const int lpr = rf_moe_lanes<T>(t, n_in);
    rf_status st;
    RF_MOE_BY_LANES(st, lpr, "rf_k_moe_gemv", rf_k_moe_gemv, T, rf_moe_grid(n_out, lpr, ns), y, w, t, qx, rec, x, ids,
                    bias, n_in, n_out, rb, k, n_expert, xps, s0);
    return st;
}

template <int T>
static rf_status rf_moe_launch_glu(rf_gpu_ctx *ctx, float *y, const uint8_t *wg, const uint8_t *wu, rf_type t,
                                   const int8_t *qx, const uint8_t *rec, const float *x, const int32_t *ids,
                                   const float *bg, const float *bu, int n_in, int n_out, int64_t rb, int k,
                                   int n_expert, int kind, int s0, int ns) {
    const int lpr = rf_moe_lanes<T>(t, n_in);
    rf_status st;
    RF_MOE_BY_LANES(st, lpr, "rf_k_moe_gemv_glu", rf_k_moe_gemv_glu, T, rf_moe_grid(n_out, lpr, ns), y, wg, wu, t, qx,
                    rec, x, ids, bg, bu, n_in, n_out, rb, k, n_expert, kind, s0);
    return st;
}

template <int T>
static rf_status rf_moe_launch_gluq(rf_gpu_ctx *ctx, float *y, int8_t *qd, float4 *dd, int rkd, const uint8_t *wg,
                                    const uint8_t *wu, rf_type t, const int8_t *qx, const uint8_t *rec,
                                    const int32_t *ids, const float *bg, const float *bu, int n_in, int n_out,
                                    int64_t rb, int k, int n_expert, int kind, int s0, int ns) {
    if constexpr (T == RF_MOE_F32X) {
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_moe_gemv_gluq_launch: int8 x only");
    } else {
        const int lpr = rf_moe_lanes<T>(t, n_in);
        const dim3 grid((unsigned)(n_out / 32), (unsigned)ns);
        if constexpr (RF_MOE_STAGED && rf_moe_fmt<T>::K) {
            const int wrun = rf_moe_run_bytes(32 * (int)rb);
            const size_t smem = 2 * (size_t)wrun + (size_t)(n_in / rf_moe_fmt<T>::UE) * rf_moe_xs<T>::XS;
            if (rf_moe_stages(t) && smem <= rf_gpu_smem_optin(ctx)) {
                static size_t attr[4][RF_GPU_MAX_DEVICES];
                const int li = lpr == 2 ? 0 : lpr == 4 ? 1 : 2;
                const char *nms = "rf_k_moe_gemv_gluq (staged)";
                rf_status st;
#define RF_GQS(L)                                                                                                 \
    ((st = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(rf_k_moe_gemv_gluq<T, L, true>), smem,           \
                            32 * sizeof(float), attr[li], nms)) ? st                                              \
     : rf_gpu_launch(ctx, nms, false, rf_k_moe_gemv_gluq<T, L, true>, grid, dim3(32 * L), smem, y, qd, dd, rkd, wg, \
                     wu, t, qx, rec, (const float *)NULL, ids, bg, bu, n_in, n_out, rb, k, n_expert, kind, s0, wrun))
                return lpr == 2 ? RF_GQS(2) : lpr == 4 ? RF_GQS(4) : lpr == 8 ? RF_GQS(8)
                                : rf_set_error(RF_ERR_INVALID_ARG, "rf_moe_gemv_gluq_launch: rows of %d units", n_in);
#undef RF_GQS
            }
        }
        const char *nm = "rf_k_moe_gemv_gluq";
#define RF_GQL(L)                                                                                                \
    rf_gpu_launch(ctx, nm, false, rf_k_moe_gemv_gluq<T, L, false>, grid, dim3(32 * L), 0, y, qd, dd, rkd, wg, wu, t, \
                  qx, rec, (const float *)NULL, ids, bg, bu, n_in, n_out, rb, k, n_expert, kind, s0, 0)
        return lpr == 2 ? RF_GQL(2) : lpr == 4 ? RF_GQL(4) : lpr == 8 ? RF_GQL(8)
                        : rf_set_error(RF_ERR_INVALID_ARG, "rf_moe_gemv_gluq_launch: rows of %d units", n_in);
#undef RF_GQL
    }
}

template <int T>
static rf_status rf_moe_launch_comb(rf_gpu_ctx *ctx, float *y, const uint8_t *w, rf_type t, const int8_t *qx,
                                    const uint8_t *rec, const float *x, const int32_t *ids, const float *bias,
                                    const float *wts, int n_in, int n_out, int64_t rb, int k, int n_expert, int t0,
                                    int nt) {
    const int lpr = rf_moe_lanes<T>(t, n_in), groups = RF_MOE_GEMV_THREADS / lpr;
    const int rpb = groups / k > 1 ? groups / k : 1; /* rows a block: its groups over the k slots */
    if (rpb * k > RF_MOE_COMB_PAIRS)
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_moe_gemv_comb_launch: k=%d above %d", k, RF_MOE_COMB_PAIRS);
    const dim3 grid((unsigned)((n_out + rpb - 1) / rpb), (unsigned)nt);
    if constexpr (RF_MOE_STAGED && T != RF_MOE_F32X && rf_moe_fmt<T>::K) {
        /* rows a block: as many as its pairs hold (each block stages every slot's x, so more
         * rows a block read it fewer times; 8 rather than 4 rows at k = 8: +2-5% qwen3-30b-a3b
         * decode, H200 2026-12-01); which block computes a row does not change its bits */
        const int rps = RF_MOE_COMB_PAIRS / k > 1 ? RF_MOE_COMB_PAIRS / k : 1;
        const dim3 gs((unsigned)((n_out + rps - 1) / rps), (unsigned)nt);
        const int wrun = rf_moe_run_bytes(rps * (int)rb), xb = (n_in / rf_moe_fmt<T>::UE) * rf_moe_xs<T>::XS;
        const size_t smem = (size_t)k * (size_t)(wrun + xb);
        if (qx && rf_moe_stages(t) && smem <= rf_gpu_smem_optin(ctx)) {
            static size_t attr[4][RF_GPU_MAX_DEVICES];
            const int li = lpr == 2 ? 0 : lpr == 4 ? 1 : lpr == 8 ? 2 : 3;
            const char *nms = "rf_k_moe_gemv_comb (staged)";
            const dim3 b(RF_MOE_GEMV_THREADS);
            rf_status st;
#define RF_GCS(L)                                                                                                 \
    ((st = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(rf_k_moe_gemv_comb<T, L, true>), smem,           \
                            RF_MOE_COMB_PAIRS * sizeof(float), attr[li], nms)) ? st                               \
     : rf_gpu_launch(ctx, nms, false, rf_k_moe_gemv_comb<T, L, true>, gs, b, smem, y, w, t, qx, rec, x, ids, bias, \
                     wts, n_in, n_out, rb, k, n_expert, rps, t0, wrun, xb))
            return lpr == 2 ? RF_GCS(2) : lpr == 4 ? RF_GCS(4) : lpr == 8 ? RF_GCS(8) : RF_GCS(32);
#undef RF_GCS
        }
    }
#define RF_GCL(L)                                                                                                 \
    rf_gpu_launch(ctx, "rf_k_moe_gemv_comb", false, rf_k_moe_gemv_comb<T, L, false>, grid, dim3(RF_MOE_GEMV_THREADS), \
                  0, y, w, t, qx, rec, x, ids, bias, wts, n_in, n_out, rb, k, n_expert, rpb, t0, 0, 0)
    return lpr == 2 ? RF_GCL(2) : lpr == 4 ? RF_GCL(4) : lpr == 8 ? RF_GCL(8) : RF_GCL(32);
#undef RF_GCL
}

/* the record kind rf_k_quantize_x makes for a type of the int8-x path: 0 (d, sum), 1 (+ f32 sum),
 * 2 (+ q8_1 s); -1: not an int8-x type for this n_in */
extern "C" int rf_moe_gemv_rk(rf_type t, int64_t n_in) {
    switch (t) {
    case RF_TYPE_Q4_0: case RF_TYPE_Q5_0: case RF_TYPE_Q8_0: case RF_TYPE_MXFP4: return n_in % 32 == 0 ? 0 : -1;
    case RF_TYPE_Q4_1: case RF_TYPE_Q5_1: return n_in % 32 == 0 ? 2 : -1;
    case RF_TYPE_Q4_K: case RF_TYPE_Q5_K: case RF_TYPE_Q6_K: return n_in % 256 == 0 ? 1 : -1;
    default: return -1;
    }
}

rf_status rf_moe_gemv_launch(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, const int8_t *qx,
                             const uint8_t *rec, const float *x, const int32_t *ids, const float *bias, int64_t n_in,
                             int64_t n_out, int64_t row_bytes, int64_t k, int64_t n_expert, bool x_per_slot,
                             int64_t nk) {
    const uint8_t *wp = (const uint8_t *)w;
    const int ni = (int)n_in, no = (int)n_out, kk = (int)k, ne = (int)n_expert, xps = x_per_slot ? 1 : 0;
    rf_status st = RF_OK;
    for (int64_t s0 = 0; s0 < nk && !st; s0 += 65535) { /* grid.y holds 65535 slots */
        const int ns = (int)(nk - s0 < 65535 ? nk - s0 : 65535), s = (int)s0;
#define RF_MQ(T) rf_moe_launch_one<T>(ctx, y, wp, t, qx, rec, x, ids, bias, ni, no, row_bytes, kk, ne, xps, s, ns)
        RF_MOE_DISPATCH(st, t, qx, RF_MQ, "rf_moe_gemv_launch");
#undef RF_MQ
    }
    return st;
}

rf_status rf_moe_gemv_glu_launch(rf_gpu_ctx *ctx, float *y, const void *wg, const void *wu, rf_type t,
                                 const int8_t *qx, const uint8_t *rec, const float *x, const int32_t *ids,
                                 const float *bg, const float *bu, int64_t n_in, int64_t n_out, int64_t row_bytes,
                                 int64_t k, int64_t n_expert, int kind, int64_t nk) {
    const uint8_t *gp = (const uint8_t *)wg, *up = (const uint8_t *)wu;
    const int ni = (int)n_in, no = (int)n_out, kk = (int)k, ne = (int)n_expert;
    rf_status st = RF_OK;
    for (int64_t s0 = 0; s0 < nk && !st; s0 += 65535) {
        const int ns = (int)(nk - s0 < 65535 ? nk - s0 : 65535), s = (int)s0;
#define RF_MQ(T) rf_moe_launch_glu<T>(ctx, y, gp, up, t, qx, rec, x, ids, bg, bu, ni, no, row_bytes, kk, ne, kind, s, ns)
        RF_MOE_DISPATCH(st, t, qx, RF_MQ, "rf_moe_gemv_glu_launch");
#undef RF_MQ
    }
    return st;
}

/* whether rf_moe_gemv_gluq_launch takes (t, n_in, n_out): int8 x, rows on at most 8 lanes */
bool rf_moe_gemv_gluq_takes(rf_type t, int64_t n_in, int64_t n_out) {
    const int rk = rf_moe_gemv_rk(t, n_in);
    if (rk < 0 || n_out % 32) return false;
    const int ue = t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K ? 256 : 32;
    return rf_moe_lpr(n_in / ue) <= 8;
}

rf_status rf_moe_gemv_gluq_launch(rf_gpu_ctx *ctx, float *y, void *xqd, int rkd, const void *wg, const void *wu,
                                  rf_type t, const int8_t *qx, const uint8_t *rec, const int32_t *ids, const float *bg,
                                  const float *bu, int64_t n_in, int64_t n_out, int64_t row_bytes, int64_t k,
                                  int64_t n_expert, int kind, int64_t nk) {
    if (!rf_moe_gemv_gluq_takes(t, n_in, n_out) || rkd < 0 || rkd > 2 || nk > 65535)
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_moe_gemv_gluq_launch: type %d rows %lld x %lld, %lld slots",
                            (int)t, (long long)n_in, (long long)n_out, (long long)nk);
    int8_t *qd = (int8_t *)xqd;
    float4 *dd = (float4 *)((char *)xqd + (((size_t)nk * (size_t)n_out + 255) & ~(size_t)255));
    const uint8_t *gp = (const uint8_t *)wg, *up = (const uint8_t *)wu;
    const int ni = (int)n_in, no = (int)n_out, kk = (int)k, ne = (int)n_expert, ns = (int)nk;
    rf_status st = RF_OK;
#define RF_MQ(T) rf_moe_launch_gluq<T>(ctx, y, qd, dd, rkd, gp, up, t, qx, rec, ids, bg, bu, ni, no, row_bytes, kk, ne, kind, 0, ns)
    RF_MOE_DISPATCH(st, t, qx, RF_MQ, "rf_moe_gemv_gluq_launch");
#undef RF_MQ
    return st;
}

rf_status rf_moe_gemv_comb_launch(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, const int8_t *qx,
                                  const uint8_t *rec, const float *x, const int32_t *ids, const float *bias,
                                  const float *wts, int64_t n_in, int64_t n_out, int64_t row_bytes, int64_t k,
                                  int64_t n_expert, int64_t n) {
    const uint8_t *wp = (const uint8_t *)w;
    const int ni = (int)n_in, no = (int)n_out, kk = (int)k, ne = (int)n_expert;
    rf_status st = RF_OK;
    for (int64_t t0 = 0; t0 < n && !st; t0 += 65535) { /* grid.y holds 65535 tokens */
        const int nt = (int)(n - t0 < 65535 ? n - t0 : 65535), tt = (int)t0;
#define RF_MQ(T) rf_moe_launch_comb<T>(ctx, y, wp, t, qx, rec, x, ids, bias, wts, ni, no, row_bytes, kk, ne, tt, nt)
        RF_MOE_DISPATCH(st, t, qx, RF_MQ, "rf_moe_gemv_comb_launch");
#undef RF_MQ
    }
    return st;
}
