/* gpu_moe.cu — mixture of experts on the GPU (docs/ARCHITECTURE.md §4.9): the router (scores,
 * top-k and weights in one kernel), the indirect product over expert ids (few slots: a GEMV per
 * slot, gpu_moe_gemv.cu; many: slots grouped by expert on the device and one grouped MMQ) and
 * the weighted combine. No host round-trip and no size that depends on the ids: capturable. */
#include "core/knobs.h"
#include "backend/backend.h" /* rf_moe_gating */
#include "backend/gpu/gpu_gemv.cuh"
#include "backend/gpu/gpu_moe.cuh"

#define RF_MOE_ROUTE_WARPS 4

/* ---- router -------------------------------------------------------------------------------
 * moe_route: one warp per token t; expert e = i * warp + lane sits in slot i < EPL of its lane.
 * p (the weight's source) per gating: SOFTMAX p = softmax(l), SIGMOID p = 1 / (1 + exp(-l)),
 * SOFTMAX_TOPK p = l (then softmax over the k chosen); the choosing score c = p + sel_bias (when
 * given: rf_ref_moe_route adds it whatever the gating). k rounds of a warp arg-max of (c, lower
 * id) over the experts not yet taken give the k in descending order, ties to the lower id; lane
 * j keeps choice j. Weights: p, / their sum (clamped below at 6.103515625e-5, llama.cpp's guard)
 * when norm, * scale. launch: RF_MOE_ROUTE_WARPS warps per block. */
/* token t's routing by one warp (lane = its lane); lb (NULL, or f32 [n_expert]) the router's
 * bias, added to each logit first as add_bias does (one rounded add) */
template <int EPL>
static __device__ __forceinline__ void rf_moe_route_warp(int32_t *ids, float *wts, const float *logits, const float *lb,
                                                         const float *sel_bias, int t, int n_expert, int k, int gating,
                                                         int norm, float scale, int lane) {
    const int W = RF_WARP_SIZE;
    const float *l = logits + (int64_t)t * n_expert;
    float p[EPL], c[EPL];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        const int e = i * W + lane;
        p[i] = e < n_expert ? (lb ? l[e] + lb[e] : l[e]) : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
    if (gating == RF_MOE_SOFTMAX) {
        mx = rf_warp_max(mx);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            p[i] = i * W + lane < n_expert ? expf(p[i] - mx) : 0.0f;
            s += p[i];
        }
        s = rf_warp_sum(s);
#pragma unroll
        for (int i = 0; i < EPL; i++) p[i] /= s;
    } else if (gating == RF_MOE_SIGMOID) {
#pragma unroll
        for (int i = 0; i < EPL; i++) p[i] = 1.0f / (1.0f + expf(-p[i]));
    }
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        const int e = i * W + lane;
        c[i] = p[i] + (sel_bias && e < n_expert ? sel_bias[e] : 0.0f);
    }
    unsigned taken = 0;
    int my_e = 0;
    float my_p = 0.0f;
    for (int j = 0; j < k; j++) {
        float bc = 0.0f, bp = 0.0f;
        int be = 0x7fffffff; /* none */
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            const int e = i * W + lane;
            if (e < n_expert && !((taken >> i) & 1u) && (be == 0x7fffffff || c[i] > bc)) bc = c[i], bp = p[i], be = e;
        }
#pragma unroll
        for (int m = W / 2; m > 0; m >>= 1) {
            const float oc = RF_SHFL_XOR(bc, m), op = RF_SHFL_XOR(bp, m);
            const int oe = RF_SHFL_XOR(be, m);
            if (oe != 0x7fffffff && (be == 0x7fffffff || oc > bc || (oc == bc && oe < be))) bc = oc, bp = op, be = oe;
        }
        if (be % W == lane) taken |= 1u << (be / W);
        if (lane == j) my_e = be, my_p = bp;
    }
    if (gating == RF_MOE_SOFTMAX_TOPK) { /* choice 0 holds the largest logit */
        const float m0 = RF_SHFL(my_p, 0);
        my_p = lane < k ? expf(my_p - m0) : 0.0f;
        my_p /= rf_warp_sum(my_p);
    }
    if (norm) my_p /= fmaxf(rf_warp_sum(lane < k ? my_p : 0.0f), 6.103515625e-5f);
    if (lane < k) {
        ids[(int64_t)t * k + lane] = my_e;
        wts[(int64_t)t * k + lane] = my_p * scale;
    }
}

template <int EPL>
__global__ void rf_k_moe_route(int32_t *ids, float *wts, const float *logits, const float *sel_bias, int n,
                               int n_expert, int k, int gating, int norm, float scale) {
    const int W = RF_WARP_SIZE, lane = (int)threadIdx.x % W;
    const int t = (int)blockIdx.x * ((int)blockDim.x / W) + (int)threadIdx.x / W;
    if (t >= n) return; /* whole warps leave; nothing below syncs the block */
    rf_moe_route_warp<EPL>(ids, wts, logits, NULL, sel_bias, t, n_expert, k, gating, norm, scale, lane);
}

/* moe_route_q: block t routes token t (its first warp, as moe_route, the router's bias lb added
 * to the logits first when not NULL: add_bias then moe_route) and, when qx is not NULL, quantizes
 * the token's row of x (f32 [n, n_in], n_in a multiple of 32) as rf_k_quantize_x<1, RK> does
 * (the other warps, whole 32-element groups): the router's top-k, the expert products' activation
 * quantization and gpt-oss's router bias were three launches. launch: grid (n), 512 threads. */
template <int EPL, int RK>
__global__ void __launch_bounds__(512)
rf_k_moe_route_q(int32_t *ids, float *wts, int8_t *qx, float4 *dx, const float *logits, const float *lb,
                 const float *sel_bias, const float *x, int n_in, int n_expert, int k, int gating, int norm,
                 float scale) {
    const int t = (int)blockIdx.x;
    if ((int)threadIdx.x < RF_WARP_SIZE) { /* the first warp routes while the others quantize */
        rf_moe_route_warp<EPL>(ids, wts, logits, lb, sel_bias, t, n_expert, k, gating, norm, scale, (int)threadIdx.x);
        return;
    }
    if (qx) {
        const int tq = (int)threadIdx.x - RF_WARP_SIZE, nq = (int)blockDim.x - RF_WARP_SIZE; /* multiples of 32 */
        const float *xr = x + (int64_t)t * n_in;
        for (int i0 = tq & ~31; i0 < n_in; i0 += nq) {
            const int i = i0 + tq % 32;
            rf_quantize_elem<1, RK>(qx, dx, xr[i], i, n_in, t, tq % 32);
        }
    }
}

/* the router's checks (op names the caller) */
static rf_status rf_moe_route_check(const char *op, int64_t n, int64_t n_expert, int64_t k, int gating) {
    RF_GPU_REQUIRE(n >= 1 && n <= 0x7fffffff / (n_expert > 0 ? n_expert : 1), op, "%lld tokens", (long long)n);
    RF_GPU_REQUIRE(n_expert >= 1 && n_expert <= RF_MOE_MAX_EXPERT, op,
                   "n_expert=%lld (the GPU router takes 1..%d)", (long long)n_expert, RF_MOE_MAX_EXPERT);
    RF_GPU_REQUIRE(k >= 1 && k <= n_expert && k <= RF_MOE_MAX_K, op,
                   "k=%lld with %lld experts (1 <= k <= n_expert, at most %d on the GPU)", (long long)k,
                   (long long)n_expert, RF_MOE_MAX_K);
    RF_GPU_REQUIRE(gating >= RF_MOE_SOFTMAX && gating <= RF_MOE_SOFTMAX_TOPK, op, "gating %d", gating);
    return RF_OK;
}

extern "C" rf_status rf_gpu_moe_route(rf_gpu_ctx *ctx, int32_t *ids, float *wts, const float *logits,
                                      const float *sel_bias, int64_t n, int64_t n_expert, int64_t k, int gating,
                                      bool norm, float scale) {
    const rf_status st = rf_moe_route_check("moe_route", n, n_expert, k, gating);
    if (st) return st;
    const int ws = ctx->info.warp_size > 0 ? ctx->info.warp_size : 32;
    const int64_t epl = (n_expert + ws - 1) / ws;
    const dim3 grid((unsigned)((n + RF_MOE_ROUTE_WARPS - 1) / RF_MOE_ROUTE_WARPS)), block(RF_MOE_ROUTE_WARPS * ws);
    const int ni = (int)n, ne = (int)n_expert, kk = (int)k, nm = norm ? 1 : 0;
#define RF_RT(E)                                                                                                  \
    rf_gpu_launch(ctx, "rf_k_moe_route", false, rf_k_moe_route<E>, grid, block, 0, ids, wts, logits, sel_bias, ni, \
                  ne, kk, gating, nm, scale)
    return epl <= 1 ? RF_RT(1) : epl <= 4 ? RF_RT(4) : epl <= 8 ? RF_RT(8) : epl <= 16 ? RF_RT(16) : RF_RT(32);
#undef RF_RT
}

/* moe_route_q's launch (x's records of kind rk, xq NULL: routing only) */
rf_status rf_moe_route_q_launch(rf_gpu_ctx *ctx, const rf_gpu_moe_ffn_desc *d, void *xq, int rk) {
    const int ws = ctx->info.warp_size > 0 ? ctx->info.warp_size : 32;
    const int64_t epl = (d->n_expert + ws - 1) / ws;
    int8_t *qx = (int8_t *)xq;
    float4 *dx = xq ? (float4 *)((char *)xq + (((size_t)d->n * (size_t)d->n_in + 255) & ~(size_t)255)) : NULL;
    const int ni = (int)d->n_in, ne = (int)d->n_expert, kk = (int)d->k, nm = d->norm ? 1 : 0;
#define RF_RQ(E, R)                                                                                                \
    rf_gpu_launch(ctx, "rf_k_moe_route_q", false, rf_k_moe_route_q<E, R>, dim3((unsigned)d->n), dim3(512), 0, d->ids, \
                  d->wts, qx, dx, (const float *)d->logits, d->lb, d->sel_bias, d->x, ni, ne, kk, d->gating, nm,       \
                  d->scale)
#define RF_RQE(R) (epl <= 1 ? RF_RQ(1, R) : epl <= 4 ? RF_RQ(4, R) : epl <= 8 ? RF_RQ(8, R) : epl <= 16 ? RF_RQ(16, R) : RF_RQ(32, R))
    return rk == 1 ? RF_RQE(1) : rk == 2 ? RF_RQE(2) : RF_RQE(0);
#undef RF_RQE
#undef RF_RQ
}

/* ---- combine ------------------------------------------------------------------------------ */
/* y[t, i] = sum over j = 0..k-1 in order of wts[t, j] z[t k + j, i], explicit fma from 0 (the
 * fused down GEMV, rf_k_moe_gemv_comb, sums the same way: the same bits); grid-stride over n m */
__global__ void rf_k_moe_combine(float *y, const float *z, const float *wts, int64_t n, int k, int64_t m) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n * m; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = q / m, i = q % m;
        float s = 0.0f;
        for (int j = 0; j < k; j++) s = __fmaf_rn(wts[t * k + j], z[(t * k + j) * m + i], s);
        y[q] = s;
    }
}

extern "C" rf_status rf_gpu_moe_combine(rf_gpu_ctx *ctx, float *y, const float *z, const float *wts, int64_t n,
                                        int64_t k, int64_t m) {
    RF_GPU_REQUIRE(n >= 1 && k >= 1 && k <= 0x7fffffff && m >= 1, "moe_combine", "n=%lld k=%lld m=%lld",
                   (long long)n, (long long)k, (long long)m);
    return rf_gpu_launch(ctx, "rf_k_moe_combine", false, rf_k_moe_combine, dim3(rf_gpu_blocks(n * m, 256)), dim3(256),
                         0, y, z, wts, n, (int)k, m);
}

/* ---- the shared expert's sigmoid gate ----------------------------------------------------------
 * one block of 256 per token t: g = w . h[t] (strided partial sums, then a block tree), then
 * y[t, i] += z[t, i] * sigmoid(g) by the same threads */
__global__ void rf_k_moe_shared_gate(float *y, const float *z, const float *h, int64_t hs, const float *w, int64_t m) {
    __shared__ float part[256];
    const int64_t t = blockIdx.x;
    const float *hr = h + t * hs;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) acc += w[i] * hr[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = (int)blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    const float sg = 1.0f / (1.0f + expf(-part[0]));
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) y[t * m + i] += z[t * m + i] * sg;
}

extern "C" rf_status rf_gpu_moe_shared_gate(rf_gpu_ctx *ctx, float *y, const float *z, const float *h, int64_t h_stride,
                                            const float *w, int64_t n, int64_t m) {
    RF_GPU_REQUIRE(n >= 1 && n <= 0x7fffffff && m >= 1 && h_stride >= m, "moe_shared_gate", "n=%lld m=%lld stride=%lld",
                   (long long)n, (long long)m, (long long)h_stride);
    return rf_gpu_launch(ctx, "rf_k_moe_shared_gate", false, rf_k_moe_shared_gate, dim3((unsigned)n), dim3(256), 0, y,
                         z, h, h_stride, w, m);
}

/* ---- grouping by expert (the batched product) ---------------------------------------------
 * the inclusive prefix sums of *a and *b over the block's threads in order (every thread calls;
 * blockDim a multiple of the warp, at most 32 warps): a warp scan, then one over the warps' sums */
static __device__ __forceinline__ void rf_block_scan2(int *a, int *b) {
    __shared__ int wa[32], wb[32];
    const int W = RF_WARP_SIZE, lane = (int)threadIdx.x % W, wid = (int)threadIdx.x / W, nw = (int)blockDim.x / W;
    int va = *a, vb = *b;
#pragma unroll
    for (int m = 1; m < W; m <<= 1) {
        const int ta = RF_SHFL_UP(va, m), tb = RF_SHFL_UP(vb, m);
        if (lane >= m) va += ta, vb += tb;
    }
    if (lane == W - 1) wa[wid] = va, wb[wid] = vb;
    __syncthreads();
    if (wid == 0) {
        int sa = lane < nw ? wa[lane] : 0, sb = lane < nw ? wb[lane] : 0;
#pragma unroll
        for (int m = 1; m < W; m <<= 1) {
            const int ta = RF_SHFL_UP(sa, m), tb = RF_SHFL_UP(sb, m);
            if (lane >= m) sa += ta, sb += tb;
        }
        if (lane < nw) wa[lane] = sa, wb[lane] = sb;
    }
    __syncthreads();
    *a = va + (wid ? wa[wid - 1] : 0), *b = vb + (wid ? wb[wid - 1] : 0);
}

/* moe_group, one block: cnt[e] = the slots choosing e (ids clamped to [0, n_expert)), off[e]
 * their exclusive prefix sum; slot s gets row pos[s] in off[e] .. off[e] + cnt[e] of the sorted
 * rows and src[pos[s]] = its x row (s with x_per_slot, else s / k); tiles[]: for each expert in
 * order, (e, first row, end row, 0) per BN rows, then (-1, 0, 0, 0) up to n_tiles (the most any
 * ids can need: ceil(nk / BN) + n_expert, so the grid is fixed by the shapes). The rows of one
 * expert come in atomic order, which varies: a row's result does not depend on its place in a
 * tile (rf_k_mmq), so the outputs do not either. launch: 1 block of 1024, 4 n_expert ints of
 * dynamic shared memory. */
__global__ void rf_k_moe_group(int32_t *pos, int32_t *src, int4 *tiles, const int32_t *ids, int nk, int k,
                               int n_expert, int x_per_slot, int bn, int n_tiles) {
    extern __shared__ int rf_moe_sh[];
    int *cnt = rf_moe_sh, *off = cnt + n_expert, *fill = off + n_expert, *tb = fill + n_expert;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) cnt[e] = 0, fill[e] = 0;
    __syncthreads();
    for (int s = threadIdx.x; s < nk; s += blockDim.x) {
        int e = ids[s];
        e = e < 0 ? 0 : e >= n_expert ? n_expert - 1 : e;
        atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    __shared__ int used;
    { /* the experts' exclusive prefix sums of rows and tiles, thread i taking a run of per in
       * order (was one thread's loop over them: ~0.1 us an expert, 12 us of qwen3-30b-a3b's 128) */
        const int per = (n_expert + (int)blockDim.x - 1) / (int)blockDim.x, e0 = (int)threadIdx.x * per;
        const int e1 = e0 + per < n_expert ? e0 + per : n_expert;
        int c = 0, nt = 0;
        for (int e = e0; e < e1; e++) c += cnt[e], nt += (cnt[e] + bn - 1) / bn;
        int o = c, tt = nt;
        rf_block_scan2(&o, &tt);
        if (threadIdx.x == blockDim.x - 1) used = tt;
        o -= c, tt -= nt;
        for (int e = e0; e < e1; e++) {
            off[e] = o, tb[e] = tt;
            o += cnt[e], tt += (cnt[e] + bn - 1) / bn;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
        for (int r = 0, ti = tb[e]; r < cnt[e]; r += bn, ti++)
            tiles[ti] = make_int4(e, off[e] + r, off[e] + (r + bn < cnt[e] ? r + bn : cnt[e]), 0);
    for (int ti = used + threadIdx.x; ti < n_tiles; ti += blockDim.x) tiles[ti] = make_int4(-1, 0, 0, 0);
    for (int s = threadIdx.x; s < nk; s += blockDim.x) {
        int e = ids[s];
        e = e < 0 ? 0 : e >= n_expert ? n_expert - 1 : e;
        const int p = off[e] + atomicAdd(&fill[e], 1);
        pos[s] = p;
        src[p] = x_per_slot ? s : s / k;
    }
}

/* row p of the sorted quantized x = row src[p] / div of xq (int8 row of n_in bytes, a multiple
 * of 16, and its records of rb bytes, a multiple of 8: 8-byte records of an odd number of
 * 32-element blocks, as the tiled GEMV takes them); launch: grid (rows), 128 threads */
__global__ void rf_k_moe_gather_xq(int8_t *qd, uint8_t *rd, const int8_t *qs, const uint8_t *rs, const int32_t *src,
                                   int n_in, int rb, int div) {
    const int p = blockIdx.x, r = src[p] / div;
    const uint4 *a = (const uint4 *)(qs + (int64_t)r * n_in);
    uint4 *b = (uint4 *)(qd + (int64_t)p * n_in);
    for (int i = threadIdx.x; i < n_in / 16; i += blockDim.x) b[i] = a[i];
    const uint2 *c = (const uint2 *)(rs + (int64_t)r * rb);
    uint2 *d = (uint2 *)(rd + (int64_t)p * rb);
    for (int i = threadIdx.x; i < rb / 8; i += blockDim.x) d[i] = c[i];
}

/* y[s, o] = ys[pos[s], o] (+ bias[e_s, o]); grid-stride over nk n_out */
__global__ void rf_k_moe_scatter(float *y, const float *ys, const int32_t *pos, const int32_t *ids, const float *bias,
                                 int64_t nk, int64_t n_out, int n_expert) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < nk * n_out; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = q / n_out, o = q % n_out;
        float v = ys[(int64_t)pos[s] * n_out + o];
        if (bias) {
            int e = ids[s];
            e = e < 0 ? 0 : e >= n_expert ? n_expert - 1 : e;
            v += bias[(int64_t)e * n_out + o];
        }
        y[q] = v;
    }
}

/* moe_glu_sorted (the grouped path of moe_ffn): row p of the expert-sorted gate and up products
 * ysg, ysu [nk, n] (slot s = src[p], e = ids[s] clamped): v = glu(ysg[p] + bg[e], ysu[p] + bu[e])
 * (moe_scatter's bias add, then the GLU: the bits of scatter, scatter, glu), written to g[s] in
 * slot order and quantized as rf_k_quantize_x<1, RK> does into row p of qd / dd: the down
 * product's x already in its sorted order, where the unfused ops quantize g and gather it.
 * n a multiple of 32. launch: grid (nk), 256 threads. */
template <int RK>
__global__ void rf_k_moe_glu_sorted(float *g, int8_t *qd, float4 *dd, const float *ysg, const float *ysu,
                                    const int32_t *src, const int32_t *ids, const float *bg, const float *bu, int n,
                                    int n_expert, int kind) {
    const int p = (int)blockIdx.x, s = src[p], lane = (int)threadIdx.x % 32;
    int e = ids[s];
    e = e < 0 ? 0 : e >= n_expert ? n_expert - 1 : e;
    for (int i0 = (int)(threadIdx.x & ~31u); i0 < n; i0 += (int)blockDim.x) {
        const int i = i0 + lane;
        float a = ysg[(int64_t)p * n + i], b = ysu[(int64_t)p * n + i];
        if (bg) a += bg[(int64_t)e * n + i];
        if (bu) b += bu[(int64_t)e * n + i];
        const float v = rf_moe_glu(kind, a, b);
        g[(int64_t)s * n + i] = v;
        rf_quantize_elem<1, RK>(qd, dd, v, i, n, p, lane);
    }
}

/* y[t, o] = sum over j = 0..k-1 in order of wts[t k + j] (ys[pos[t k + j], o] (+ bias[e, o])),
 * explicit fma from 0: moe_scatter then moe_combine's arithmetic, one launch; grid-stride over
 * n n_out */
__global__ void rf_k_moe_scatter_comb(float *y, const float *ys, const int32_t *pos, const int32_t *ids,
                                      const float *bias, const float *wts, int64_t n, int k, int64_t n_out,
                                      int n_expert) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n * n_out; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = q / n_out, o = q % n_out;
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            const int64_t s = t * k + j;
            float v = ys[(int64_t)pos[s] * n_out + o];
            if (bias) {
                int e = ids[s];
                e = e < 0 ? 0 : e >= n_expert ? n_expert - 1 : e;
                v += bias[(int64_t)e * n_out + o];
            }
            acc = __fmaf_rn(wts[s], v, acc);
        }
        y[q] = acc;
    }
}

rf_status rf_moe_group_launch(rf_gpu_ctx *ctx, int32_t *pos, int32_t *src, int4 *tiles, const int32_t *ids, int64_t nk,
                              int64_t k, int64_t n_expert, bool x_per_slot, int bn, int n_tiles) {
    return rf_gpu_launch(ctx, "rf_k_moe_group", false, rf_k_moe_group, dim3(1), dim3(1024),
                         (size_t)(4 * n_expert * sizeof(int)), pos, src, tiles, ids, (int)nk, (int)k, (int)n_expert,
                         x_per_slot ? 1 : 0, bn, n_tiles);
}

rf_status rf_moe_scatter_comb_launch(rf_gpu_ctx *ctx, float *y, const float *ys, const int32_t *pos,
                                     const int32_t *ids, const float *bias, const float *wts, int64_t n, int64_t k,
                                     int64_t n_out, int64_t n_expert) {
    return rf_gpu_launch(ctx, "rf_k_moe_scatter_comb", false, rf_k_moe_scatter_comb, dim3(rf_gpu_blocks(n * n_out, 256)),
                         dim3(256), 0, y, ys, pos, ids, bias, wts, n, (int)k, n_out, (int)n_expert);
}

/* ---- the indirect product ----------------------------------------------------------------- */

/* The grouped path: x quantized once (n_x rows), sorted by expert into nk rows, one grouped MMQ
 * over tiles of 32 rows of one expert (each expert's weights read once per tile column), or,
 * for the types and widths MMQ does not take (gemv), the tiled GEMV over tiles of RF_MOE_TILE
 * rows; the results scattered back to their slots. */
static rf_status rf_moe_grouped(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, int64_t n_out, const float *x,
                                int64_t n_x, bool xps, const int32_t *ids, const float *bias, int64_t k, int64_t n_expert,
                                int64_t n_in, int64_t nk, bool gemv) {
    const int bn = gemv ? RF_MOE_TILE : rf_gpu_mmq_grouped_rows(nk, n_expert), n_tiles = (int)((nk + bn - 1) / bn + n_expert);
    const int rk = gemv ? rf_moe_gemv_rk(t, n_in) : t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K ? 1 : 0;
    const int rec = rk ? 16 : 8;
    const size_t xb = rf_moe_al(rf_gpu_xq_bytes(n_x, n_in)), pb = rf_moe_al(rf_gpu_xq_bytes(nk, n_in));
    const size_t ib = rf_moe_al((size_t)nk * 4), tb = rf_moe_al((size_t)n_tiles * 16);
    const size_t yb = (size_t)nk * (size_t)n_out * 4;
    size_t mark;
    void *tmp;
    rf_status st = rf_gpu_tmp(ctx, xb + pb + 2 * ib + tb + yb, &tmp, &mark);
    if (st) return st;
    char *base = (char *)tmp;
    int8_t *xq = (int8_t *)base, *xp = (int8_t *)(base + xb);
    int32_t *pos = (int32_t *)(base + xb + pb), *src = (int32_t *)(base + xb + pb + ib);
    int4 *tiles = (int4 *)(base + xb + pb + 2 * ib);
    float *ys = (float *)(base + xb + pb + 2 * ib + tb);
    const uint8_t *xr = (const uint8_t *)xq + rf_moe_al((size_t)n_x * n_in);
    uint8_t *pr = (uint8_t *)xp + rf_moe_al((size_t)nk * n_in);
    st = rf_gemv_launch_quantize_x(ctx, xq, 1, rk, x, (int)n_x, n_in);
    if (!st)
        st = rf_moe_group_launch(ctx, pos, src, tiles, ids, nk, k, n_expert, xps, bn, n_tiles);
    if (!st)
        st = rf_gpu_launch(ctx, "rf_k_moe_gather_xq", false, rf_k_moe_gather_xq, dim3((unsigned)nk), dim3(128), 0, xp,
                           pr, (const int8_t *)xq, xr, (const int32_t *)src, (int)n_in, (int)(n_in / 32 * rec), 1);
    if (!st && gemv)
        st = rf_moe_gemv_tiles_launch(ctx, ys, w, t, xp, pr, NULL, 1, tiles, n_tiles, n_in, n_out,
                                      n_in / rf_gq_block((int)t) * rf_gq_bytes((int)t));
    else if (!st)
        st = rf_gpu_mmq_grouped_bn(ctx, ys, w, t, xp, pr, tiles, n_tiles, bn, (int)nk, n_in, n_out);
    if (!st)
        st = rf_gpu_launch(ctx, "rf_k_moe_scatter", false, rf_k_moe_scatter, dim3(rf_gpu_blocks(nk * n_out, 256)),
                           dim3(256), 0, y, (const float *)ys, (const int32_t *)pos, ids, bias, nk, n_out, (int)n_expert);
    ctx->scratch_used = mark; /* stream order protects the reuse */
    return st;
}

extern "C" bool rf_gpu_moe_grouped_takes(rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n, int64_t k) {
#if defined(RF_HIP)
    (void)ctx, (void)t, (void)n_in, (void)n, (void)k;
    return false;
#else
    static int64_t min_slots = -1;
    if (min_slots < 0) min_slots = rf_knob_int(RF_KNOB_GPU_MOE_GROUPED_MIN);
    if (!rf_gpu_mmq_supported(t, n_in) || ctx->info.cc_major < 8) return false;
    /* batch-invariant mode: the grouped MMQ at every slot count for every type and width MMQ
     * takes, MXFP4 and the partial-chunk widths (gpt-oss's 2880, qwen3-30b-a3b's Q6_K 768)
     * included, so one kernel sums a slot's row whatever the count */
    return ctx->invariant || n * k >= min_slots;
#endif
}

/* the shapes every indirect product checks (op names the caller) */
static rf_status rf_moe_check(const char *op, rf_type t, int64_t n_out, int64_t n_expert, int64_t n_in, const void *w,
                              const float *x, int64_t n, int64_t k) {
    RF_GPU_REQUIRE(n >= 1 && k >= 1 && n_expert >= 1 && k <= n_expert, op, "n=%lld k=%lld n_expert=%lld",
                   (long long)n, (long long)k, (long long)n_expert);
    RF_GPU_REQUIRE(k <= 65535 && n <= 0x7fffffff / k, op, "n=%lld k=%lld", (long long)n, (long long)k);
    RF_GPU_REQUIRE(n_out >= 1 && n_in >= 1 && n_in <= ((int64_t)1 << 28) && n_expert * n_out <= 0x7fffffff, op,
                   "shape n_in=%lld n_out=%lld n_expert=%lld", (long long)n_in, (long long)n_out, (long long)n_expert);
    const int bs = rf_gq_block((int)t);
    RF_GPU_REQUIRE(bs > 0 && n_in % bs == 0, op, "weight type %d with rows of %lld", (int)t, (long long)n_in);
    RF_GPU_REQUIRE(((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0, op,
                   "w and x must be 16-byte aligned (rf_gpu_alloc memory)");
    RF_GPU_REQUIRE(!(t == RF_TYPE_F16 || t == RF_TYPE_BF16) || rf_moe_gemv_rk(t, n_in) >= 0 || n_in % 8 == 0, op,
                   "F16 rows of %lld", (long long)n_in);
    return RF_OK;
}

/* the tiled GEMV (rf_moe_grouped, gemv) below the grouped MMQ's minimum, for the types and
 * widths the aligned MMQ kernels do not take (those MMQ has no kernel for; MXFP4, Q4_0 / Q8_0
 * rows not a multiple of 256 such as gpt-oss's 2880, Q6_K not of 512), once the slots average two
 * or more per expert (each expert's rows then read once per 8 slots instead of once per slot):
 * the rule from before MMQ took the unaligned ones, kept until that crossover is measured;
 * bit-identical to the per-slot GEMV, so the crossover keeps batch invariance */
static bool rf_moe_tiled_takes(rf_type t, int64_t n_in, int64_t nk, int64_t n_expert) {
    const bool mmq_aligned = rf_gpu_mmq_supported(t, n_in) && t != RF_TYPE_MXFP4 &&
                             n_in % (t == RF_TYPE_Q6_K ? 512 : 256) == 0;
    return !mmq_aligned && rf_moe_gemv_rk(t, n_in) >= 0 && nk >= 2 * n_expert && nk >= 16;
}

/* whether matmul_id takes the GEMV per slot (the decode fusions' path) for these shapes */
static bool rf_moe_per_slot(rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n, int64_t k, int64_t n_expert) {
    return n * k <= 65535 && !rf_gpu_moe_grouped_takes(ctx, t, n_in, n, k) && !rf_moe_tiled_takes(t, n_in, n * k, n_expert);
}

/* whether the fused ops of level lvl (RF_GPU_MOE_FUSE: matmul_id_glu 1, matmul_id_combine 2,
 * moe_ffn 3) take the grouped GEMV (gpu_moe_ggemv.cu) for a product of type t over rows of n_in:
 * few slots per expert (batched decode: at most RF_GPU_MOE_GGEMV on average, by default 4 for MXFP4,
 * 3 for K-quants where the staged form runs and for Q5_0 / Q8_0 rows of 9-31 blocks, none for the
 * others: below), from
 * RF_GPU_MOE_GGEMV_MIN slots or, that 0, wherever the per-slot GEMV stops (slot counts where the
 * grouped MMQ or the unfused tiled GEMV would run); the int8-x types; not in batch-invariant
 * mode (there the grouped MMQ sums every slot count, its own bits); CUDA only. The bound's model (H200,
 * ~4.8 TB/s, ~3.3e13 lane operations/s): the expert rows are read once per RF_MOE_TILE slots;
 * the dots cost ~0.8 integer operations per weight and slot (Q4_K) or ~0.4 plus ~2.2 once for the
 * decode (MXFP4), so they cost what the bytes do from ~4-5 slots an expert and s / 4.7 times
 * that past it; the grouped MMQ took 3-6 times the bytes' time at 2-4 slots an expert (eager op
 * times, 32 sequences: qwen3-30b-a3b 79 us a call, gpt-oss-20b 181 us), its 32-row tiles mostly
 * padding, so the GEMV should lead up to ~10-15 slots an expert: 8 until a measurement moves it
 * (test_gpu_moe_ggemv's bench prints both sides). */
/* RF_GPU_MOE_GGEMV's default (-1) by the expert type: MXFP4 up to 4 slots an expert (H200,
 * gpt-oss-20b, step p50 at 16/24/32/48/64 sequences: 9.42/10.94/12.38/15.74/16.72 ms against the
 * grouped MMQ's 9.37/13.71/14.31/15.92/16.62: -20% at 24, -13% at 32, even elsewhere; 6 lost 1.4%
 * at 48); the K-quants up to 3 where the staged form runs (H200, qwen3-30b-a3b Q4_K_M 12 layers,
 * 2026-12-01, against the grouped MMQ: 16 sequences (1 an expert) 5,060 -> 6,361-6,389 tok/s, 32
 * (2) 7,332-7,388 -> 8,592-8,621, 48 (3) 9,688 -> 10,414, 64 (4) 12,338-12,344 -> 11,989-12,054),
 * never without it (25% slower at 32 sequences, docs/perf-gpu.md); Q5_0 and Q8_0 rows of 9-31 blocks up to
 * 3 (4 or 8 lanes a row, rf_moe_lpr; the types llama-quantize gives K-quant expert rows whose width is
 * no multiple of 256: H200, gemma4-26b-a4b Q4_K_M 6 layers, down rows of 704, Q5_0 and Q8_0, with
 * RF_GPU_MOE_GGEMV=3, 2026-12-01, against the grouped MMQ: 16 sequences 5,633-5,638 -> 6,229-6,246
 * tok/s, 32 8,060-8,067 -> 8,557-8,659; Q5_0 alone 5,974 / 8,278; other widths and types not measured) */
#define RF_MOE_GGEMV_MXFP4 4
#define RF_MOE_GGEMV_KSTAGED 3
#define RF_MOE_GGEMV_SHORT 3

/* Q5_0 / Q8_0 rows of 9-31 blocks: the rows rf_moe_lpr gives 4 or 8 lanes */
static inline bool rf_moe_ggemv_short(rf_type t, int64_t n_in) {
    return (t == RF_TYPE_Q5_0 || t == RF_TYPE_Q8_0) && n_in % 32 == 0 && n_in / 32 >= 9 && n_in / 32 <= 31;
}

static bool rf_moe_ggemv_fits(rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n, int64_t k, int64_t n_expert,
                              int lvl) {
#if defined(RF_HIP) /* the gate+up kernels are not built for HIP (their compile time), nor is the grouped MMQ */
    (void)ctx, (void)t, (void)n_in, (void)n, (void)k, (void)n_expert, (void)lvl;
    return false;
#else
    const int64_t knob = rf_knob_int(RF_KNOB_GPU_MOE_GGEMV), least = rf_knob_int(RF_KNOB_GPU_MOE_GGEMV_MIN);
    const int64_t nk = n * k, most = knob >= 0                          ? knob
                                     : t == RF_TYPE_MXFP4                  ? RF_MOE_GGEMV_MXFP4
                                     : rf_moe_ggemv_staged(ctx, t, n_in) ? RF_MOE_GGEMV_KSTAGED
                                     : rf_moe_ggemv_short(t, n_in)         ? RF_MOE_GGEMV_SHORT
                                                                           : 0;
    return rf_knob_int(RF_KNOB_GPU_MOE_FUSE) >= lvl && most > 0 && !ctx->invariant && k <= RF_MOE_MAX_K &&
           nk <= 65535 && nk <= most * n_expert && (nk + RF_MOE_TILE - 1) / RF_MOE_TILE + n_expert <= 65535 &&
           rf_moe_gemv_rk(t, n_in) >= 0 && (least == 0 || nk >= least);
#endif
}

static bool rf_moe_ggemv_takes(rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n, int64_t k, int64_t n_expert,
                               int lvl) {
    return rf_moe_ggemv_fits(ctx, t, n_in, n, k, n_expert, lvl) &&
           (rf_knob_int(RF_KNOB_GPU_MOE_GGEMV_MIN) > 0 || !rf_moe_per_slot(ctx, t, n_in, n, k, n_expert));
}

extern "C" rf_status rf_gpu_matmul_id(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, int64_t n_out,
                                      int64_t n_expert, int64_t n_in, const float *x, bool x_per_slot,
                                      const int32_t *ids, const float *bias, int64_t n, int64_t k) {
    rf_status st0 = rf_moe_check("matmul_id", t, n_out, n_expert, n_in, w, x, n, k);
    if (st0) return st0;
    const int bs = rf_gq_block((int)t);
    const int64_t nk = n * k, n_x = x_per_slot ? nk : n;
    const int64_t rb = n_in / bs * rf_gq_bytes((int)t);
    if (nk > 65535) { /* calls of at most 65535 slots (grid and buffer bounds), whole tokens each */
        const int64_t nc = 65535 / k;
        for (int64_t t0 = 0; t0 < n; t0 += nc) {
            const int64_t m = n - t0 < nc ? n - t0 : nc;
            const rf_status st = rf_gpu_matmul_id(ctx, y + t0 * k * n_out, w, t, n_out, n_expert, n_in,
                                                  x + (x_per_slot ? t0 * k : t0) * n_in, x_per_slot, ids + t0 * k,
                                                  bias, m, k);
            if (st) return st;
        }
        return RF_OK;
    }
    /* few slots per expert (rf_moe_ggemv_fits, any fusion level): the tiled GEMV where the
     * grouped MMQ would run, so the unfused ops give the fused grouped GEMV's bits */
    const bool few = rf_moe_ggemv_fits(ctx, t, n_in, n, k, n_expert, 0);
    if (rf_gpu_moe_grouped_takes(ctx, t, n_in, n, k) && !few)
        return rf_moe_grouped(ctx, y, w, t, n_out, x, n_x, x_per_slot, ids, bias, k, n_expert, n_in, nk, false);
    /* types / widths MMQ does not take, or few slots an expert: the tiled GEMV */
    if (rf_moe_tiled_takes(t, n_in, nk, n_expert) || (few && rf_gpu_moe_grouped_takes(ctx, t, n_in, n, k)))
        return rf_moe_grouped(ctx, y, w, t, n_out, x, n_x, x_per_slot, ids, bias, k, n_expert, n_in, nk, true);
    /* the GEMV path: every type; batch invariant by construction (a slot's sum never sees the
     * others), so batch-invariant mode takes it for the types MMQ does not */
    const int rk = rf_moe_gemv_rk(t, n_in);
    if (rk < 0)
        return rf_moe_gemv_launch(ctx, y, w, t, NULL, NULL, x, ids, bias, n_in, n_out, rb, k, n_expert, x_per_slot, nk);
    size_t mark;
    void *xq;
    rf_status st = rf_gpu_tmp(ctx, rf_gpu_xq_bytes(n_x, n_in), &xq, &mark);
    if (st) return st;
    st = rf_gemv_launch_quantize_x(ctx, xq, 1, rk, x, (int)n_x, n_in);
    if (!st)
        st = rf_moe_gemv_launch(ctx, y, w, t, (const int8_t *)xq, (const uint8_t *)xq + rf_moe_al((size_t)n_x * n_in),
                                NULL, ids, bias, n_in, n_out, rb, k, n_expert, x_per_slot, nk);
    ctx->scratch_used = mark;
    return st;
}

/* ---- the decode fusions (the GEMV per slot only; other paths: the unfused ops) -------------- */

/* y [n k, n_out] = glu(gate product, up product) of the same x rows (backend.h's matmul_id_glu):
 * on the GEMV path x quantized once and one kernel for both products and the GLU; else the two
 * matmul_id (the up product into u) and the glu op. */
extern "C" rf_status rf_gpu_matmul_id_glu(rf_gpu_ctx *ctx, float *y, float *u, const void *wg, const void *wu,
                                          rf_type t, int64_t n_out, int64_t n_expert, int64_t n_in, const float *x,
                                          const int32_t *ids, const float *bg, const float *bu, int64_t n, int64_t k,
                                          int glu) {
    const char *op = "matmul_id_glu";
    rf_status st = rf_moe_check(op, t, n_out, n_expert, n_in, wg, x, n, k);
    if (st) return st;
    RF_GPU_REQUIRE(glu >= RF_GLU_SWIGLU && glu <= RF_GLU_SWIGLU_OAI && ((uintptr_t)wu & 15) == 0, op,
                   "glu kind %d (or an unaligned up weight)", glu);
    const int64_t nk = n * k;
    if (rf_moe_ggemv_takes(ctx, t, n_in, n, k, n_expert, 1))
        return rf_moe_glu_ggemv(ctx, y, wg, wu, t, n_out, n_expert, n_in, x, ids, bg, bu, n, k, glu);
    if (rf_knob_int(RF_KNOB_GPU_MOE_FUSE) < 1 || !rf_moe_per_slot(ctx, t, n_in, n, k, n_expert)) {
        st = rf_gpu_matmul_id(ctx, y, wg, t, n_out, n_expert, n_in, x, false, ids, bg, n, k);
        if (!st) st = rf_gpu_matmul_id(ctx, u, wu, t, n_out, n_expert, n_in, x, false, ids, bu, n, k);
        if (st) return st;
        if (glu == RF_GLU_SWIGLU) return rf_gpu_swiglu(ctx, y, y, u, nk * n_out);
        if (glu == RF_GLU_GEGLU) return rf_gpu_geglu(ctx, y, y, u, nk * n_out);
        return rf_gpu_swiglu_oai(ctx, y, y, nk * n_out, u, nk * n_out, 1, nk * n_out);
    }
    const int64_t rb = n_in / rf_gq_block((int)t) * rf_gq_bytes((int)t);
    const int rk = rf_moe_gemv_rk(t, n_in);
    if (rk < 0)
        return rf_moe_gemv_glu_launch(ctx, y, wg, wu, t, NULL, NULL, x, ids, bg, bu, n_in, n_out, rb, k, n_expert, glu, nk);
    size_t mark;
    void *xq;
    st = rf_gpu_tmp(ctx, rf_gpu_xq_bytes(n, n_in), &xq, &mark);
    if (st) return st;
    st = rf_gemv_launch_quantize_x(ctx, xq, 1, rk, x, (int)n, n_in);
    if (!st)
        st = rf_moe_gemv_glu_launch(ctx, y, wg, wu, t, (const int8_t *)xq,
                                    (const uint8_t *)xq + rf_moe_al((size_t)n * n_in), NULL, ids, bg, bu, n_in, n_out,
                                    rb, k, n_expert, glu, nk);
    ctx->scratch_used = mark;
    return st;
}

/* y [n, n_out] = the router-weighted sum of each token's k down products of x [n k, n_in]
 * (backend.h's matmul_id_combine): on the GEMV path one kernel; else matmul_id into z and
 * moe_combine. */
extern "C" rf_status rf_gpu_matmul_id_combine(rf_gpu_ctx *ctx, float *y, float *z, const void *w, rf_type t,
                                              int64_t n_out, int64_t n_expert, int64_t n_in, const float *x,
                                              const int32_t *ids, const float *bias, const float *wts, int64_t n,
                                              int64_t k) {
    rf_status st = rf_moe_check("matmul_id_combine", t, n_out, n_expert, n_in, w, x, n, k);
    if (st) return st;
    const int64_t nk = n * k;
    if (rf_moe_ggemv_takes(ctx, t, n_in, n, k, n_expert, 2))
        return rf_moe_comb_ggemv(ctx, y, w, t, n_out, n_expert, n_in, x, ids, bias, wts, n, k);
    /* RF_GPU_MOE_FUSE (read per call: a test or a bench may turn it) below 2: the unfused ops
     * (the default until the slot-parallel kernel is measured: the first fused kernel walked a
     * token's k slots one after another in one block and lost 15% of qwen3-30b-a3b's tg128 on an
     * H200, 2026-11-29); k above the router's 32: the unfused ops (the kernel's shared memory) */
    if (rf_knob_int(RF_KNOB_GPU_MOE_FUSE) < 2 || k > RF_MOE_MAX_K || !rf_moe_per_slot(ctx, t, n_in, n, k, n_expert)) {
        st = rf_gpu_matmul_id(ctx, z, w, t, n_out, n_expert, n_in, x, true, ids, bias, n, k);
        return st ? st : rf_gpu_moe_combine(ctx, y, z, wts, n, k, n_out);
    }
    const int64_t rb = n_in / rf_gq_block((int)t) * rf_gq_bytes((int)t);
    const int rk = rf_moe_gemv_rk(t, n_in);
    if (rk < 0)
        return rf_moe_gemv_comb_launch(ctx, y, w, t, NULL, NULL, x, ids, bias, wts, n_in, n_out, rb, k, n_expert, n);
    size_t mark;
    void *xq;
    st = rf_gpu_tmp(ctx, rf_gpu_xq_bytes(nk, n_in), &xq, &mark);
    if (st) return st;
    st = rf_gemv_launch_quantize_x(ctx, xq, 1, rk, x, (int)nk, n_in);
    if (!st)
        st = rf_moe_gemv_comb_launch(ctx, y, w, t, (const int8_t *)xq,
                                     (const uint8_t *)xq + rf_moe_al((size_t)nk * n_in), NULL, ids, bias, wts, n_in,
                                     n_out, rb, k, n_expert, n);
    ctx->scratch_used = mark;
    return st;
}

/* ---- one MoE feed-forward's experts (backend.h's moe_ffn) ---------------------------------- */

/* whether rf_gpu_moe_ffn takes its three-kernel path for these shapes */
static bool rf_moe_ffn_fused(rf_gpu_ctx *ctx, const rf_gpu_moe_ffn_desc *d) {
    const int64_t n = d->n, k = d->k, ne = d->n_expert;
    return rf_knob_int(RF_KNOB_GPU_MOE_FUSE) >= 3 && k <= RF_MOE_MAX_K && n * k <= 65535 &&
           rf_moe_gemv_rk(d->tg, d->n_in) >= 0 && rf_moe_gemv_rk(d->td, d->n_ff) >= 0 && d->n_ff % 32 == 0 &&
           rf_moe_per_slot(ctx, d->tg, d->n_in, n, k, ne) && rf_moe_per_slot(ctx, d->td, d->n_ff, n, k, ne);
}

/* whether rf_gpu_moe_ffn takes its grouped path (both products on the grouped MMQ), up to 4096
 * slots (batched decode and short prompts: its scratch holds the three products' sorted outputs
 * at once, where the unfused ops hold one; longer prompts gain nothing from fewer launches) */
static bool rf_moe_ffn_grouped_takes(rf_gpu_ctx *ctx, const rf_gpu_moe_ffn_desc *d) {
    const int64_t n = d->n, k = d->k;
    return rf_knob_int(RF_KNOB_GPU_MOE_FUSE) >= 3 && k <= RF_MOE_MAX_K && n * k <= 4096 && d->n_ff % 32 == 0 &&
           rf_gpu_moe_grouped_takes(ctx, d->tg, d->n_in, n, k) && rf_gpu_moe_grouped_takes(ctx, d->td, d->n_ff, n, k);
}

/* The grouped path of moe_ffn (many slots: rf_moe_grouped's, once for the three products): the
 * route kernel quantizes h; one grouping of the ids (pos, src = the slot, the tile table) serves
 * gate, up and down; h's rows gathered once for gate and up; the GLU of the sorted products
 * quantizes the down input straight into its sorted order; the down products scattered and
 * summed in one kernel. 8 launches where the unfused ops take 19; each slot's bits those of the
 * unfused grouped ops (an MMQ row's result does not depend on its place: rf_k_mmq's contract). */
static rf_status rf_moe_ffn_grouped(rf_gpu_ctx *ctx, float *y, const rf_gpu_moe_ffn_desc *d) {
    const int64_t n = d->n, k = d->k, nk = n * k, ne = d->n_expert, ni = d->n_in, nf = d->n_ff, no = d->n_out;
    const bool kg = d->tg == RF_TYPE_Q4_K || d->tg == RF_TYPE_Q5_K || d->tg == RF_TYPE_Q6_K;
    const bool kd = d->td == RF_TYPE_Q4_K || d->td == RF_TYPE_Q5_K || d->td == RF_TYPE_Q6_K;
    const int bn = rf_gpu_mmq_grouped_rows(nk, ne), n_tiles = (int)((nk + bn - 1) / bn + ne), rkg = kg ? 1 : 0, rkd = kd ? 1 : 0;
    const size_t bh = rf_moe_al(rf_gpu_xq_bytes(n, ni)), bhs = rf_moe_al(rf_gpu_xq_bytes(nk, ni));
    const size_t bd = rf_moe_al(rf_gpu_xq_bytes(nk, nf)), bi = rf_moe_al((size_t)nk * 4);
    const size_t bt = rf_moe_al((size_t)n_tiles * 16), bf = rf_moe_al((size_t)nk * nf * 4);
    size_t mark;
    void *tmp;
    rf_status st = rf_gpu_tmp(ctx, bh + bhs + bd + 2 * bi + bt + 2 * bf + (size_t)nk * no * 4, &tmp, &mark);
    if (st) return st;
    char *c = (char *)tmp; /* qh, qhs, qd, pos, src, tiles, ysg, ysu, ysd */
    const size_t o_qd = bh + bhs, o_pos = o_qd + bd, o_tl = o_pos + 2 * bi, o_ys = o_tl + bt;
    int8_t *qh = (int8_t *)c, *qhs = (int8_t *)(c + bh), *qd = (int8_t *)(c + o_qd);
    int32_t *pos = (int32_t *)(c + o_pos), *src = (int32_t *)(c + o_pos + bi);
    int4 *tiles = (int4 *)(c + o_tl);
    float *ysg = (float *)(c + o_ys), *ysu = (float *)(c + o_ys + bf), *ysd = (float *)(c + o_ys + 2 * bf);
    uint8_t *rh = (uint8_t *)qh + rf_moe_al((size_t)n * ni), *rhs = (uint8_t *)qhs + rf_moe_al((size_t)nk * ni);
    uint8_t *rd = (uint8_t *)qd + rf_moe_al((size_t)nk * nf);
    st = rf_moe_route_q_launch(ctx, d, qh, rkg);
    if (!st)
        st = rf_moe_group_launch(ctx, pos, src, tiles, d->ids, nk, k, ne, true, bn, n_tiles);
    if (!st)
        st = rf_gpu_launch(ctx, "rf_k_moe_gather_xq", false, rf_k_moe_gather_xq, dim3((unsigned)nk), dim3(128), 0, qhs,
                           rhs, (const int8_t *)qh, (const uint8_t *)rh, (const int32_t *)src, (int)ni,
                           (int)(ni / 32 * (rkg ? 16 : 8)), (int)k);
    if (!st) st = rf_gpu_mmq_grouped_bn(ctx, ysg, d->wg, d->tg, qhs, rhs, tiles, n_tiles, bn, (int)nk, ni, nf);
    if (!st) st = rf_gpu_mmq_grouped_bn(ctx, ysu, d->wu, d->tg, qhs, rhs, tiles, n_tiles, bn, (int)nk, ni, nf);
    if (!st) {
#define RF_GS(R)                                                                                                    \
    rf_gpu_launch(ctx, "rf_k_moe_glu_sorted", false, rf_k_moe_glu_sorted<R>, dim3((unsigned)nk), dim3(256), 0, d->g, qd, \
                  (float4 *)rd, (const float *)ysg, (const float *)ysu, (const int32_t *)src, (const int32_t *)d->ids,  \
                  d->bg, d->bu, (int)nf, (int)ne, d->glu)
        st = rkd ? RF_GS(1) : RF_GS(0);
#undef RF_GS
    }
    if (!st) st = rf_gpu_mmq_grouped_bn(ctx, ysd, d->wd, d->td, qd, rd, tiles, n_tiles, bn, (int)nk, nf, no);
    if (!st)
        st = rf_moe_scatter_comb_launch(ctx, y, ysd, pos, d->ids, d->bd, d->wts, n, k, no, ne);
    ctx->scratch_used = mark;
    return st;
}

/* whether rf_gpu_moe_ffn takes its grouped GEMV path (rf_moe_ggemv_takes' rule for both
 * products; with RF_GPU_MOE_GGEMV_MIN 0, wherever its three-kernel per-slot path stops) */
static bool rf_moe_ffn_ggemv_takes(rf_gpu_ctx *ctx, const rf_gpu_moe_ffn_desc *d) {
    const int64_t n = d->n, k = d->k, ne = d->n_expert;
    return d->n_ff % 32 == 0 && rf_moe_ggemv_fits(ctx, d->tg, d->n_in, n, k, ne, 3) &&
           rf_moe_ggemv_fits(ctx, d->td, d->n_ff, n, k, ne, 3) &&
           (rf_knob_int(RF_KNOB_GPU_MOE_GGEMV_MIN) > 0 || !rf_moe_ffn_fused(ctx, d));
}

extern "C" rf_status rf_gpu_moe_ffn(rf_gpu_ctx *ctx, float *y, const rf_gpu_moe_ffn_desc *d) {
    const char *op = "moe_ffn";
    rf_status st = rf_moe_route_check(op, d->n, d->n_expert, d->k, d->gating);
    if (!st) st = rf_moe_check(op, d->tg, d->n_ff, d->n_expert, d->n_in, d->wg, d->x, d->n, d->k);
    if (!st) st = rf_moe_check(op, d->td, d->n_out, d->n_expert, d->n_ff, d->wd, d->g, d->n, d->k);
    if (st) return st;
    RF_GPU_REQUIRE(d->glu >= RF_GLU_SWIGLU && d->glu <= RF_GLU_SWIGLU_OAI && ((uintptr_t)d->wu & 15) == 0, op,
                   "glu kind %d (or an unaligned up weight)", d->glu);
    const int64_t n = d->n, k = d->k, nk = n * k, ne = d->n_expert;
    if (rf_moe_ffn_ggemv_takes(ctx, d)) return rf_moe_ffn_ggemv(ctx, y, d);
    if (!rf_moe_ffn_fused(ctx, d) && rf_moe_ffn_grouped_takes(ctx, d)) return rf_moe_ffn_grouped(ctx, y, d);
    if (!rf_moe_ffn_fused(ctx, d)) { /* the ops it stands for */
        if (d->lb) st = rf_gpu_add_bias(ctx, d->logits, d->lb, n, ne);
        if (!st) st = rf_gpu_moe_route(ctx, d->ids, d->wts, d->logits, d->sel_bias, n, ne, k, d->gating, d->norm, d->scale);
        if (!st) st = rf_gpu_matmul_id_glu(ctx, d->g, d->u, d->wg, d->wu, d->tg, d->n_ff, ne, d->n_in, d->x, d->ids, d->bg,
                                           d->bu, n, k, d->glu);
        if (!st) st = rf_gpu_matmul_id_combine(ctx, y, d->z, d->wd, d->td, d->n_out, ne, d->n_ff, d->g, d->ids, d->bd,
                                               d->wts, n, k);
        return st;
    }
    const int rkg = rf_moe_gemv_rk(d->tg, d->n_in), rkd = rf_moe_gemv_rk(d->td, d->n_ff);
    const size_t xh = rf_moe_al(rf_gpu_xq_bytes(n, d->n_in)), xd = rf_gpu_xq_bytes(nk, d->n_ff);
    size_t mark;
    void *tmp;
    if ((st = rf_gpu_tmp(ctx, xh + xd, &tmp, &mark))) return st;
    char *qh = (char *)tmp, *qd = qh + xh;
    const uint8_t *rh = (const uint8_t *)qh + rf_moe_al((size_t)n * d->n_in);
    const uint8_t *rd = (const uint8_t *)qd + rf_moe_al((size_t)nk * d->n_ff);
    const int64_t rbg = d->n_in / rf_gq_block((int)d->tg) * rf_gq_bytes((int)d->tg);
    const int64_t rbd = d->n_ff / rf_gq_block((int)d->td) * rf_gq_bytes((int)d->td);
    /* route (+ the router's bias) and h's quantization for gate / up */
    st = rf_moe_route_q_launch(ctx, d, qh, rkg);
    /* gate + up + GLU, and the down input's quantization: one kernel where the rows take it */
    if (!st && rf_moe_gemv_gluq_takes(d->tg, d->n_in, d->n_ff))
        st = rf_moe_gemv_gluq_launch(ctx, d->g, qd, rkd, d->wg, d->wu, d->tg, (const int8_t *)qh, rh, d->ids, d->bg,
                                     d->bu, d->n_in, d->n_ff, rbg, k, ne, d->glu, nk);
    else if (!st) {
        st = rf_moe_gemv_glu_launch(ctx, d->g, d->wg, d->wu, d->tg, (const int8_t *)qh, rh, NULL, d->ids, d->bg, d->bu,
                                    d->n_in, d->n_ff, rbg, k, ne, d->glu, nk);
        if (!st) st = rf_gemv_launch_quantize_x(ctx, qd, 1, rkd, d->g, (int)nk, d->n_ff);
    }
    /* down + the router-weighted sum */
    if (!st)
        st = rf_moe_gemv_comb_launch(ctx, y, d->wd, d->td, (const int8_t *)qd, rd, NULL, d->ids, d->bd, d->wts,
                                     d->n_ff, d->n_out, rbd, k, ne, n);
    ctx->scratch_used = mark;
    return st;
}
