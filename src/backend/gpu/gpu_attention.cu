/* gpu_attention.cu — flash attention (online softmax, causal / sliding window / softcap, sinks, GQA)
 * over a K/V cache in f16 or f32, with an optional split over the keys (split-K) for decode
 * over long caches and the kernel that reduces the splits. Twin: rf_ref_attention. */
#include "backend/gpu/gpu_internal.h"

#define RF_ATT_WARPS 4 /* rows (query, head) per block, one per warp; all share one kv head */

template <typename KT> static __device__ __forceinline__ float rf_kv(const KT *p);
template <> __device__ __forceinline__ float rf_kv<float>(const float *p) { return *p; }
template <> __device__ __forceinline__ float rf_kv<rf_half>(const rf_half *p) { return rf_half2float(*p); }

/* flash_attn: for row r of block (x, kv head hk): query i = r / group, head h = hk*group + r%group;
 * over keys j in this split's range [k0, k1): s_j = scale * q.k_j (softcap: c*tanh(s/c)), causal
 * and window masks as rf_ref_causal_mask, online softmax in chunks of RF_WARP_SIZE keys.
 * in: q f32 [n_q, n_head, D]; k, v KT [n_kv, n_head_kv, D]. out (n_splits == 1): o f32
 * [n_q, n_head, D] normalised (a row with every key masked gets zeros; sinks (f32 [n_head] or
 * NULL): head h's sink logit joins the final max and denominator once); out (n_splits > 1):
 * part f32 [split, n_q*n_head, D] unnormalised and ml float2 [split, n_q*n_head] (max, sum),
 * the sinks left to the reduce.
 * launch: grid (ceil(n_q*group / RF_ATT_WARPS), n_head_kv, n_splits), RF_ATT_WARPS warps;
 * each lane owns dims lane + RF_WARP_SIZE*k. tolerance vs rf_ref_attention: rel. L2 < 1e-5
 * (f32 K/V), < 1e-2 (f16 K/V). */
template <int D, typename KT>
__global__ void __launch_bounds__(RF_ATT_WARPS * RF_WARP_SIZE)
rf_k_flash_attn(float *o, float *part, float2 *ml, const float *q, const KT *k, const KT *v,
                int64_t n_q, int64_t n_kv, int64_t n_head, int64_t n_head_kv, float scale,
                int causal, int64_t pos0, int64_t window, float softcap, int64_t keys_per_split,
                const float *sinks) {
    constexpr int DK = (D + RF_WARP_SIZE - 1) / RF_WARP_SIZE;
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    const int64_t group = n_head / n_head_kv;
    const int64_t r = (int64_t)blockIdx.x * RF_ATT_WARPS + warp;
    if (r >= n_q * group) return;
    const int64_t hk = blockIdx.y, i = r / group, h = hk * group + r % group;
    const int64_t g = i * n_head + h; /* output row */
    const int split = blockIdx.z;
    int64_t k0 = (int64_t)split * keys_per_split, k1 = k0 + keys_per_split;
    if (k1 > n_kv) k1 = n_kv;
    const int64_t p = pos0 + i;
    if (causal) {
        if (k1 > p + 1) k1 = p + 1;
        if (window > 0 && k0 < p - window + 1) k0 = p - window + 1;
    }
    float qr[DK], acc[DK];
#pragma unroll
    for (int c = 0; c < DK; c++) {
        const int d = lane + c * RF_WARP_SIZE;
        qr[c] = d < D ? q[g * D + d] * scale : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t kstride = n_head_kv * D;
    for (int64_t j0 = k0; j0 < k1; j0 += RF_WARP_SIZE) {
        /* scores of up to RF_WARP_SIZE keys; lane jj keeps the score of key j0 + jj */
        float mine = -INFINITY;
        for (int jj = 0; jj < RF_WARP_SIZE && j0 + jj < k1; jj++) {
            const KT *kr = k + (j0 + jj) * kstride + hk * D;
            float s = 0.0f;
#pragma unroll
            for (int c = 0; c < DK; c++) {
                const int d = lane + c * RF_WARP_SIZE;
                if (d < D) s += qr[c] * rf_kv<KT>(kr + d);
            }
            s = rf_warp_sum(s);
            if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
            if (lane == jj) mine = s;
        }
        const float cmax = rf_warp_max(mine);
        const float m_new = fmaxf(m, cmax);
        if (m_new == -INFINITY) continue; /* nothing visible yet */
        const float alpha = m == -INFINITY ? 0.0f : __expf(m - m_new);
        const float pj = mine == -INFINITY ? 0.0f : __expf(mine - m_new);
        l = l * alpha + rf_warp_sum(pj);
#pragma unroll
        for (int c = 0; c < DK; c++) acc[c] *= alpha;
        for (int jj = 0; jj < RF_WARP_SIZE && j0 + jj < k1; jj++) {
            const float pb = RF_SHFL(pj, jj);
            const KT *vr = v + (j0 + jj) * kstride + hk * D;
#pragma unroll
            for (int c = 0; c < DK; c++) {
                const int d = lane + c * RF_WARP_SIZE;
                if (d < D) acc[c] += pb * rf_kv<KT>(vr + d);
            }
        }
        m = m_new;
    }
    if (part) {
        const int64_t pr = (int64_t)split * n_q * n_head + g;
#pragma unroll
        for (int c = 0; c < DK; c++) {
            const int d = lane + c * RF_WARP_SIZE;
            if (d < D) part[pr * D + d] = acc[c];
        }
        if (lane == 0) ml[pr] = make_float2(m, l);
    } else {
        if (sinks) { /* the sink: one more logit in the max and the denominator, no value */
            const float sk = sinks[h], mn = fmaxf(m, sk);
            const float a = m == -INFINITY ? 0.0f : __expf(m - mn);
            l = l * a + (mn == -INFINITY ? 0.0f : __expf(sk - mn));
#pragma unroll
            for (int c = 0; c < DK; c++) acc[c] *= a;
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
        for (int c = 0; c < DK; c++) {
            const int d = lane + c * RF_WARP_SIZE;
            if (d < D) o[g * D + d] = acc[c] * inv;
        }
    }
}

/* attn_reduce: o[g, d] = sum_s e^(m_s - M) part[s, g, d] / sum_s e^(m_s - M) l_s, M = max_s m_s;
 * zeros when every split saw only masked keys. With sinks (f32 [n_head] or NULL) row g's head
 * g % n_head adds its sink logit to M and e^(sink - M) to the denominator, once. launch: one
 * block of D threads (rounded to a warp multiple) per output row g; grid n_rows. */
__global__ void rf_k_attn_reduce(float *o, const float *part, const float2 *ml, int n_splits,
                                 int64_t n_rows, int D, const float *sinks, int64_t n_head) {
    const int64_t g = blockIdx.x;
    const int d = threadIdx.x;
    if (d >= D) return;
    const float sk = sinks ? sinks[g % n_head] : -INFINITY;
    float M = sk;
    for (int s = 0; s < n_splits; s++) M = fmaxf(M, ml[s * n_rows + g].x);
    float num = 0.0f, den = 0.0f;
    if (M != -INFINITY) {
        if (sinks) den = __expf(sk - M);
        for (int s = 0; s < n_splits; s++) {
            const float2 e = ml[s * n_rows + g];
            if (e.x == -INFINITY) continue;
            const float f = __expf(e.x - M);
            num += f * part[(s * n_rows + g) * D + d];
            den += f * e.y;
        }
    }
    o[g * D + d] = den > 0.0f ? num / den : 0.0f;
}

template <int D, typename KT>
static void rf_launch_fa(rf_gpu_ctx *ctx, dim3 grid, unsigned threads, float *o, float *part,
                         float2 *ml, const float *q, const void *k, const void *v, int64_t n_q,
                         int64_t n_kv, int64_t n_head, int64_t n_head_kv, float scale, int causal,
                         int64_t pos0, int64_t window, float softcap, int64_t kps, const float *sinks) {
    const KT *kk = (const KT *)k, *vv = (const KT *)v;
    rf_k_flash_attn<D, KT><<<grid, threads, 0, ctx->stream>>>(o, part, ml, q, kk, vv, n_q, n_kv,
                                                              n_head, n_head_kv, scale, causal,
                                                              pos0, window, softcap, kps, sinks);
}

template <typename KT>
static bool rf_dispatch_fa(int64_t D, rf_gpu_ctx *ctx, dim3 grid, unsigned threads, float *o,
                           float *part, float2 *ml, const float *q, const void *k, const void *v,
                           int64_t n_q, int64_t n_kv, int64_t n_head, int64_t n_head_kv,
                           float scale, int causal, int64_t pos0, int64_t window, float softcap,
                           int64_t kps, const float *sinks) {
#define RF_FA_CASE(DD)                                                                        \
    case DD:                                                                                  \
        rf_launch_fa<DD, KT>(ctx, grid, threads, o, part, ml, q, k, v, n_q, n_kv, n_head,     \
                             n_head_kv, scale, causal, pos0, window, softcap, kps, sinks);    \
        return true;
    switch (D) {
        RF_FA_CASE(64)
        RF_FA_CASE(80)
        RF_FA_CASE(96)
        RF_FA_CASE(128)
        RF_FA_CASE(256)
    default: return false;
    }
#undef RF_FA_CASE
}

extern "C" rf_status rf_gpu_attention_splits(rf_gpu_ctx *ctx, float *out, const float *q,
                                             const void *k, const void *v, rf_type kv_type,
                                             int64_t n_q, int64_t n_kv, int64_t n_head,
                                             int64_t n_head_kv, int64_t head_dim, float scale,
                                             bool causal, int64_t pos0, int64_t window,
                                             float softcap, int n_splits, const float *sinks) {
    const char *op = "rf_gpu_attention";
    RF_GPU_REQUIRE(kv_type == RF_TYPE_F16 || kv_type == RF_TYPE_F32, op,
                   "K/V type %d (want f16 or f32)", (int)kv_type);
    RF_GPU_REQUIRE(head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128 ||
                       head_dim == 256,
                   op, "head_dim=%lld (supported: 64, 80, 96, 128, 256)", (long long)head_dim);
    RF_GPU_REQUIRE(n_head >= 1 && n_head_kv >= 1 && n_head % n_head_kv == 0 && n_head_kv <= 65535,
                   op, "n_head=%lld must be a multiple of n_head_kv=%lld", (long long)n_head,
                   (long long)n_head_kv);
    RF_GPU_REQUIRE(n_q >= 0 && n_kv >= 0 && n_splits >= 1 && n_splits <= 65535, op,
                   "n_q=%lld n_kv=%lld n_splits=%d", (long long)n_q, (long long)n_kv, n_splits);
    if (n_q == 0) return RF_OK;
    const int64_t group = n_head / n_head_kv, rows = n_q * group;
    const int64_t gx = (rows + RF_ATT_WARPS - 1) / RF_ATT_WARPS;
    RF_GPU_REQUIRE(gx <= 0x7fffffff, op, "too many rows (%lld)", (long long)rows);
    if (n_splits > 1 && n_kv < n_splits) n_splits = n_kv > 0 ? (int)n_kv : 1;
    const int64_t kps = n_splits > 1 ? (n_kv + n_splits - 1) / n_splits : (n_kv > 0 ? n_kv : 1);
    float *part = NULL;
    float2 *ml = NULL;
    size_t mark = ctx->scratch_used;
    const int64_t out_rows = n_q * n_head;
    if (n_splits > 1) {
        void *tmp;
        size_t pbytes = (size_t)n_splits * out_rows * head_dim * sizeof(float);
        rf_status st = rf_gpu_tmp(ctx, pbytes + 256 + (size_t)n_splits * out_rows * sizeof(float2),
                                  &tmp, &mark);
        if (st) return st;
        part = (float *)tmp;
        ml = (float2 *)((char *)tmp + ((pbytes + 255) & ~(size_t)255));
    }
    dim3 grid((unsigned)gx, (unsigned)n_head_kv, (unsigned)n_splits);
    const unsigned threads = RF_ATT_WARPS * ctx->info.warp_size;
    const int c = causal ? 1 : 0;
    if (kv_type == RF_TYPE_F16)
        rf_dispatch_fa<rf_half>(head_dim, ctx, grid, threads, out, part, ml, q, k, v, n_q, n_kv,
                                n_head, n_head_kv, scale, c, pos0, window, softcap, kps, sinks);
    else
        rf_dispatch_fa<float>(head_dim, ctx, grid, threads, out, part, ml, q, k, v, n_q, n_kv,
                              n_head, n_head_kv, scale, c, pos0, window, softcap, kps, sinks);
    rf_status st = RF_GPU_LAUNCHED(ctx, "rf_k_flash_attn");
    if (st || n_splits == 1) {
        ctx->scratch_used = mark;
        return st;
    }
    const unsigned rt = (unsigned)((head_dim + ctx->info.warp_size - 1) / ctx->info.warp_size *
                                   ctx->info.warp_size);
    rf_k_attn_reduce<<<(unsigned)out_rows, rt, 0, ctx->stream>>>(out, part, ml, n_splits, out_rows,
                                                                (int)head_dim, sinks, n_head);
    ctx->scratch_used = mark;
    return RF_GPU_LAUNCHED(ctx, "rf_k_attn_reduce");
}

extern "C" rf_status rf_gpu_attention(rf_gpu_ctx *ctx, float *out, const float *q, const void *k,
                                      const void *v, rf_type kv_type, int64_t n_q, int64_t n_kv,
                                      int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                      float scale, bool causal, int64_t pos0, int64_t window,
                                      float softcap, const float *sinks) {
    /* split the keys when the rows alone cannot fill the device: aim for ~2 blocks per SM and
     * at least 128 keys per split */
    int splits = 1;
    if (n_head_kv > 0 && n_head >= n_head_kv) {
        const int64_t rows = n_q * (n_head / n_head_kv);
        const int64_t blocks = (rows + RF_ATT_WARPS - 1) / RF_ATT_WARPS * n_head_kv;
        const int64_t want = 2LL * (ctx->info.sm_count > 0 ? ctx->info.sm_count : 1);
        if (blocks < want && n_kv >= 256) {
            int64_t s = (want + blocks - 1) / blocks;
            if (s > n_kv / 128) s = n_kv / 128;
            if (s > 256) s = 256;
            splits = s > 1 ? (int)s : 1;
        }
    }
    return rf_gpu_attention_splits(ctx, out, q, k, v, kv_type, n_q, n_kv, n_head, n_head_kv,
                                   head_dim, scale, causal, pos0, window, softcap, splits, sinks);
}
