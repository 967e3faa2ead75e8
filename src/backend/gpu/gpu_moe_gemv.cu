/* gpu_moe_gemv.cu — the GEMV half of the indirect product over expert ids (matmul_id): a GEMV
 * per (token, slot) that reads only its expert's rows, on the int8-x dots of the dense GEMVs
 * (gpu_gemv_dot.cuh) or, for the other types, f32 x; its decode fusions (gate and up with the
 * GLU; down with the router-weighted sum); and the same GEMV per expert tile of sorted slots for
 * the types MMQ does not take (MXFP4, widths not a multiple of 256). gpu_moe.cu dispatches. */
#include "backend/backend.h" /* rf_glu_kind */
#include "backend/gpu/gpu_gemv_dot.cuh"
#include "backend/gpu/gpu_moe.cuh"

#define RF_MOE_GEMV_THREADS 128 /* threads per block: rows of LPR lanes each */
#define RF_MOE_TILE 8           /* slots per tile of the tiled GEMV (moe_gemv_qt) */

/* the dense GEMVs' x records (rf_k_quantize_x, GB 1): (d, int sum) or (d, int sum, f32 sum or
 * q8_1 s, int sum of the first 16) */
template <int T> struct rf_moe_fmt {
    static constexpr bool K = T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K || T == RF_TYPE_Q6_K;
    static constexpr int REC = K || T == RF_TYPE_Q4_1 || T == RF_TYPE_Q5_1 ? 16 : 8;
    static constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : T == RF_TYPE_Q4_1 ? 20 : T == RF_TYPE_Q5_0 ? 22
                            : T == RF_TYPE_Q5_1 ? 24 : T == RF_TYPE_Q8_0 ? 34 : T == RF_TYPE_MXFP4 ? 17
                            : T == RF_TYPE_Q4_K ? 144
                            : T == RF_TYPE_Q5_K ? 176 : 210;
    static constexpr int UE = K ? 256 : 32; /* elements per unit (a lane's step) */
};

/* N aligned words of the 2-byte-aligned bytes at p (Q6_K super-blocks sit at any even byte):
 * reads one word more when p is 2 mod 4 (within rf_gpu_alloc's tail padding at a row's end) */
template <int N>
static __device__ __forceinline__ void rf_moe_words(uint32_t *o, const uint8_t *p) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    if (((uintptr_t)p & 3) == 0) {
#pragma unroll
        for (int i = 0; i < N; i++) o[i] = a[i];
    } else {
        uint32_t prev = a[0];
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint32_t nx = a[i + 1];
            o[i] = __byte_perm(prev, nx, 0x5432u);
            prev = nx;
        }
    }
}

/* the int8-x dot of unit u of a weight row wr with token row xr of the quantized x */
template <int T>
static __device__ __forceinline__ float rf_moe_unit_dot(const uint8_t *wr, int u, const int8_t *qx,
                                                        const uint8_t *rec) {
    using F = rf_moe_fmt<T>;
    if constexpr (T == RF_TYPE_MXFP4) { /* 17-byte blocks at any byte offset: Q8_0-style x records */
        const int4 *xv = (const int4 *)(qx + (int64_t)u * 32);
        const int4 x0 = xv[0], x1 = xv[1];
        const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        return rf_mxfp4_dot(wr + (int64_t)u * F::BB, xi, ((const float2 *)rec)[u].x);
    } else if constexpr (!F::K) {
        const uint8_t *bp = wr + (int64_t)u * F::BB;
        const uint32_t *aw = (const uint32_t *)((uintptr_t)bp & ~(uintptr_t)3);
        const int o = (int)((uintptr_t)bp & 3);
        const int4 *xv = (const int4 *)(qx + (int64_t)u * 32);
        const int4 x0 = xv[0], x1 = xv[1];
        const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        if constexpr (F::REC == 16) {
            const float4 r = ((const float4 *)rec)[u];
            return rf_q32_dot<T>(aw, o, xi, r.x, __float_as_int(r.y), r.z);
        } else {
            const float2 r = ((const float2 *)rec)[u];
            return rf_q32_dot<T>(aw, o, xi, r.x, __float_as_int(r.y), 0.0f);
        }
    } else {
        constexpr int NW = T == RF_TYPE_Q4_K ? 36 : T == RF_TYPE_Q5_K ? 44 : 53;
        uint32_t w[T == RF_TYPE_Q6_K ? NW : NW / 4 * 4];
        if constexpr (T == RF_TYPE_Q6_K) {
            rf_moe_words<NW>(w, wr + (int64_t)u * F::BB);
        } else { /* 144 / 176-byte super-blocks in rows of them: 16-byte aligned */
            const uint4 *q = (const uint4 *)(wr + (int64_t)u * F::BB);
#pragma unroll
            for (int i = 0; i < NW / 4; i++) {
                const uint4 v = q[i];
                w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
            }
        }
        int xi[8][8], sxi[8], slo[8];
        float dxd[8], fs[8];
        const int4 *xv = (const int4 *)(qx + (int64_t)u * 256);
        const float4 *rv = (const float4 *)rec + (int64_t)u * 8;
#pragma unroll
        for (int b = 0; b < 8; b++) {
            const int4 x0 = xv[2 * b], x1 = xv[2 * b + 1];
            xi[b][0] = x0.x, xi[b][1] = x0.y, xi[b][2] = x0.z, xi[b][3] = x0.w;
            xi[b][4] = x1.x, xi[b][5] = x1.y, xi[b][6] = x1.z, xi[b][7] = x1.w;
            const float4 r = rv[b];
            dxd[b] = r.x, sxi[b] = __float_as_int(r.y), fs[b] = r.z, slo[b] = __float_as_int(r.w);
        }
        if constexpr (T == RF_TYPE_Q6_K) return rf_q6k_dot(w, xi, dxd, sxi, slo);
        else return rf_qk_dot<T == RF_TYPE_Q5_K>(w, xi, dxd, sxi, fs);
    }
}

/* RF_MOE_F32X: the template type of the f32-x path (rf_moe_row over f32 x, any type) */
#define RF_MOE_F32X (-1)

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
 * row_bytes; x as rf_moe_row takes it (LPR 2, 4, 8 or 32: the fewest covering a row's units).
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

/* moe_gemv_gluq: moe_gemv_glu over 32 rows a block (32 LPR threads: LPR <= 8), and the block's
 * 32 outputs of slot s, one 32-element group of the down product's x, quantized as
 * rf_k_quantize_x<1, rkd> does (qd / dd: rows of n_out) by the first warp from shared memory: y
 * is moe_gemv_glu's bits and qd / dd quantize_x's of that y, one launch where there were two.
 * n_out a multiple of 32. launch: grid (n_out / 32, slots), 32 LPR threads. */
template <int T, int LPR>
__global__ void __launch_bounds__(32 * LPR)
rf_k_moe_gemv_gluq(float *y, int8_t *qd, float4 *dd, int rkd, const uint8_t *wg, const uint8_t *wu, rf_type t,
                   const int8_t *qx, const uint8_t *rec, const float *x, const int32_t *ids, const float *bg,
                   const float *bu, int n_in, int n_out, int64_t row_bytes, int k, int n_expert, int kind, int s0) {
    __shared__ float ys[32];
    const int s = s0 + (int)blockIdx.y, sub = (int)threadIdx.x % LPR, r = (int)threadIdx.x / LPR;
    const int row = (int)blockIdx.x * 32 + r;
    const int e = rf_moe_expert(ids, s, n_expert);
    const int64_t wo = ((int64_t)e * n_out + row) * row_bytes;
    const float ag = rf_moe_row<T, LPR>(wg + wo, t, qx, rec, x, s / k, n_in, sub);
    const float au = rf_moe_row<T, LPR>(wu + wo, t, qx, rec, x, s / k, n_in, sub);
    if (sub == 0) {
        const int64_t bo = (int64_t)e * n_out + row;
        const float v = rf_moe_glu(kind, ag + (bg ? bg[bo] : 0.0f), au + (bu ? bu[bo] : 0.0f));
        y[(int64_t)s * n_out + row] = v;
        ys[r] = v;
    }
    __syncthreads();
    if ((int)threadIdx.x < 32) { /* rkd: the down weight's record kind, one branch for the warp */
        const int i = (int)blockIdx.x * 32 + (int)threadIdx.x, l = (int)threadIdx.x;
        if (rkd == 0) rf_quantize_elem<1, 0>(qd, dd, ys[l], i, n_out, s, l);
        else if (rkd == 1) rf_quantize_elem<1, 1>(qd, dd, ys[l], i, n_out, s, l);
        else rf_quantize_elem<1, 2>(qd, dd, ys[l], i, n_out, s, l);
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
 * launch: grid (ceil(n_out / R), tokens), 128 threads. */
#define RF_MOE_COMB_PAIRS 64
template <int T, int LPR>
__global__ void __launch_bounds__(RF_MOE_GEMV_THREADS)
rf_k_moe_gemv_comb(float *y, const uint8_t *w, rf_type t, const int8_t *qx, const uint8_t *rec, const float *x,
                   const int32_t *ids, const float *bias, const float *wts, int n_in, int n_out, int64_t row_bytes,
                   int k, int n_expert, int rpb, int t0) {
    constexpr int G = RF_MOE_GEMV_THREADS / LPR;
    __shared__ float zs[RF_MOE_COMB_PAIRS];
    const int tok = t0 + (int)blockIdx.y, sub = (int)threadIdx.x % LPR, grp = (int)threadIdx.x / LPR;
    const int o0 = (int)blockIdx.x * rpb, np = rpb * k;
    for (int p0 = 0; p0 < np; p0 += G) {
        const int p = p0 + grp, pc = p < np ? p : np - 1, j = pc / rpb, row = o0 + pc % rpb;
        const int rowc = row < n_out ? row : n_out - 1, s = tok * k + j, e = rf_moe_expert(ids, s, n_expert);
        const float acc = rf_moe_row<T, LPR>(w + ((int64_t)e * n_out + rowc) * row_bytes, t, qx, rec, x, s, n_in, sub);
        if (sub == 0 && p < np) zs[p] = acc + (bias ? bias[(int64_t)e * n_out + rowc] : 0.0f);
    }
    __syncthreads();
    const int r = (int)threadIdx.x, row = o0 + r;
    if (r < rpb && row < n_out) {
        float out = 0.0f;
        for (int j = 0; j < k; j++) out = __fmaf_rn(wts[tok * k + j], zs[j * rpb + r], out);
        y[(int64_t)tok * n_out + row] = out;
    }
}

/* moe_gemv_qt: moe_gemv over a tile of slots that chose the same expert: blockIdx.y's tile
 * tiles[y] = (expert e, first row p0, end row p1, 0) of rf_k_moe_group (e < 0: unused, the block
 * exits), rows p0 .. p1 - 1 (at most BN) of qx / rec sorted by expert (rf_k_moe_gather_xq);
 * ys[p, o] = W_e[o] . x_p without the bias (rf_k_moe_scatter adds it). Each row's units are read
 * from memory once for the whole tile (the tokens after the first hit L1). A slot's sum takes
 * exactly rf_moe_row's operations in its order (explicitly rounded adds over the same units, the
 * same butterfly, the bias added after), so its bits do not depend on which path or tile took it
 * (batch invariant). launch: grid (ceil(n_out / (128 / LPR)), n_tiles), 128 threads. */
template <int T, int LPR, int BN>
__global__ void __launch_bounds__(RF_MOE_GEMV_THREADS)
rf_k_moe_gemv_qt(float *ys, const uint8_t *w, const int8_t *qx, const uint8_t *rec, const int4 *tiles, int n_in,
                 int n_out, int64_t row_bytes) {
    constexpr int RPB = RF_MOE_GEMV_THREADS / LPR;
    const int4 tl = tiles[blockIdx.y];
    if (tl.x < 0) return;
    const int sub = (int)threadIdx.x % LPR, row = (int)blockIdx.x * RPB + (int)threadIdx.x / LPR;
    const int rowc = row < n_out ? row : n_out - 1, np = tl.z - tl.y;
    const uint8_t *wr = w + ((int64_t)tl.x * n_out + rowc) * row_bytes;
    constexpr int REC = rf_moe_fmt<T>::REC, UE = rf_moe_fmt<T>::UE;
    const int nu = n_in / UE, rb = n_in / 32 * REC;
    float acc[BN];
#pragma unroll
    for (int j = 0; j < BN; j++) acc[j] = 0.0f;
    for (int u = sub; u < nu; u += LPR)
#pragma unroll
        for (int j = 0; j < BN; j++)
            if (j < np) {
                const int p = tl.y + j;
                acc[j] = __fadd_rn(acc[j], rf_moe_unit_dot<T>(wr, u, qx + (int64_t)p * n_in, rec + (int64_t)p * rb));
            }
#pragma unroll
    for (int j = 0; j < BN; j++) {
        float a = acc[j];
#pragma unroll
        for (int m = LPR / 2; m > 0; m >>= 1) a += RF_SHFL_XOR(a, m);
        if (sub == 0 && row < n_out && j < np) ys[(int64_t)(tl.y + j) * n_out + row] = a;
    }
}

/* lanes per row: the fewest of 2, 4, 8, 32 covering the row's units (idle lanes past them) */
static int rf_moe_lpr(int64_t units) { return units <= 2 ? 2 : units <= 4 ? 4 : units <= 8 ? 8 : 32; }

/* The one type dispatch of the launchers: st = CALL(T) with the template type of t (the int8-x
 * types with qx, RF_MOE_F32X without), or the error naming who. */
#define RF_MOE_DISPATCH(st, t, qx, CALL, who)                                                                   \
    do {                                                                                                          \
        if (!(qx)) { st = CALL(RF_MOE_F32X); break; }                                                             \
        switch (t) {                                                                                              \
        case RF_TYPE_Q4_0: st = CALL(RF_TYPE_Q4_0); break;                                                        \
        case RF_TYPE_Q4_1: st = CALL(RF_TYPE_Q4_1); break;                                                        \
        case RF_TYPE_Q5_0: st = CALL(RF_TYPE_Q5_0); break;                                                        \
        case RF_TYPE_Q5_1: st = CALL(RF_TYPE_Q5_1); break;                                                        \
        case RF_TYPE_Q8_0: st = CALL(RF_TYPE_Q8_0); break;                                                        \
        case RF_TYPE_MXFP4: st = CALL(RF_TYPE_MXFP4); break;                                                      \
        case RF_TYPE_Q4_K: st = CALL(RF_TYPE_Q4_K); break;                                                        \
        case RF_TYPE_Q5_K: st = CALL(RF_TYPE_Q5_K); break;                                                        \
        case RF_TYPE_Q6_K: st = CALL(RF_TYPE_Q6_K); break;                                                        \
        default: st = rf_set_error(RF_ERR_INVALID_ARG, "%s: no int8-x kernel for type %d", who, (int)(t));      \
        }                                                                                                         \
    } while (0)

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
        const char *nm = "rf_k_moe_gemv_gluq";
#define RF_GQL(L)                                                                                                \
    rf_gpu_launch(ctx, nm, false, rf_k_moe_gemv_gluq<T, L>, grid, dim3(32 * L), 0, y, qd, dd, rkd, wg, wu, t, qx, rec, \
                  (const float *)NULL, ids, bg, bu, n_in, n_out, rb, k, n_expert, kind, s0)
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
    rf_status st;
    RF_MOE_BY_LANES(st, lpr, "rf_k_moe_gemv_comb", rf_k_moe_gemv_comb, T, grid, y, w, t, qx, rec, x, ids, bias, wts,
                    n_in, n_out, rb, k, n_expert, rpb, t0);
    return st;
}

template <int T>
static rf_status rf_moe_launch_qt(rf_gpu_ctx *ctx, float *ys, const uint8_t *w, const int8_t *qx, const uint8_t *rec,
                                  const int4 *tiles, int n_tiles, int n_in, int n_out, int64_t rb) {
    if constexpr (T == RF_MOE_F32X) {
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_moe_gemv_tiles_launch: the tiled GEMV takes int8 x only");
    } else {
        const int lpr = rf_moe_lanes<T>(RF_TYPE_F32, n_in);
        const dim3 grid = rf_moe_grid(n_out, lpr, n_tiles), b(RF_MOE_GEMV_THREADS);
        const char *nm = "rf_k_moe_gemv_qt";
        return lpr == 2   ? rf_gpu_launch(ctx, nm, false, rf_k_moe_gemv_qt<T, 2, RF_MOE_TILE>, grid, b, 0, ys, w, qx, rec, tiles, n_in, n_out, rb)
               : lpr == 4 ? rf_gpu_launch(ctx, nm, false, rf_k_moe_gemv_qt<T, 4, RF_MOE_TILE>, grid, b, 0, ys, w, qx, rec, tiles, n_in, n_out, rb)
               : lpr == 8 ? rf_gpu_launch(ctx, nm, false, rf_k_moe_gemv_qt<T, 8, RF_MOE_TILE>, grid, b, 0, ys, w, qx, rec, tiles, n_in, n_out, rb)
                          : rf_gpu_launch(ctx, nm, false, rf_k_moe_gemv_qt<T, 32, RF_MOE_TILE>, grid, b, 0, ys, w, qx, rec, tiles, n_in, n_out, rb);
    }
}

rf_status rf_moe_gemv_tiles_launch(rf_gpu_ctx *ctx, float *ys, const void *w, rf_type t, const int8_t *qx,
                                   const uint8_t *rec, const int4 *tiles, int64_t n_tiles, int64_t n_in, int64_t n_out,
                                   int64_t row_bytes) {
    const uint8_t *wp = (const uint8_t *)w;
    const int ni = (int)n_in, no = (int)n_out;
    rf_status st = RF_OK;
    for (int64_t t0 = 0; t0 < n_tiles && !st; t0 += 65535) { /* grid.y holds 65535 tiles */
        const int nt = (int)(n_tiles - t0 < 65535 ? n_tiles - t0 : 65535);
        const int4 *tl = tiles + t0;
#define RF_MQT(T) rf_moe_launch_qt<T>(ctx, ys, wp, qx, rec, tl, nt, ni, no, row_bytes)
        RF_MOE_DISPATCH(st, t, qx, RF_MQT, "rf_moe_gemv_tiles_launch");
#undef RF_MQT
    }
    return st;
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

/* whether rf_moe_gemv_gluq_launch takes (t, n_in, n_out): int8 x, rows of at most 8 units */
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
