/* gpu_rope.cu — rotary position embedding (normal and NeoX pairing, any layout via strides,
 * llama3 frequency factors) and the fused RoPE + KV-cache append (with or without the per-head
 * Q/K RMSNorms before it). */
#include "backend/gpu/gpu_internal.h"

#include "core/test_hooks.h"

/* Angle of pair i at position p. Computed in double: at positions in the thousands an f32 angle
 * is off by ~1e-4 rad, which alone would break the 1e-5 tolerance against the CPU twin. cos and
 * sin are then times the gain af (ggml's attn_factor; x 1.0f is exact). */
static __device__ __forceinline__ void rf_rope_cs(int32_t p, int64_t i, int64_t n_rot, float base,
                                                  float fscale, const float *ff, float af, float *c,
                                                  float *s) {
    double theta = (double)p * (double)fscale * pow((double)base, -2.0 * (double)i / (double)n_rot);
    if (ff) theta /= (double)ff[i];
    *c = (float)cos(theta) * af;
    *s = (float)sin(theta) * af;
}

/* The pair index of element d of a head whose first n_rot dims rotate, or -1 where d is not the
 * first element of a rotated pair (NeoX pairs d with d + n_rot / 2, the normal mode d with d + 1). */
static __device__ __forceinline__ int64_t rf_rope_pair(int64_t d, int64_t n_rot, int neox) {
    if (d >= n_rot) return -1;
    if (neox) return d < n_rot / 2 ? d : -1;
    return d & 1 ? -1 : d / 2;
}

/* The fused RoPE + KV-append kernels below are programmatic dependent launches (rf_gpu_launch with
 * pdl): they may start while the Q/K/V product that feeds them is still running. Before
 * rf_pdl_wait() a thread reads only the step's positions and the frequency factors, which no
 * kernel writes, and computes its first pair's angle (double-precision pow, cos and sin: the
 * longest part of the kernel) off the product's critical path; rf_rope_hold makes the compiler
 * finish that arithmetic there rather than sink it past the wait. */
static __device__ __forceinline__ void rf_rope_hold(float &c, float &s) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__)
    asm volatile("" : "+f"(c), "+f"(s));
#else
    (void)c, (void)s;
#endif
}

/* rope: rotates the first n_rot dims of every (t, h) vector in place (rf_ref_rope's contract),
 * times the gain af (1 = none).
 * in/out: x f32, vector (t,h) at x + t*stride_t + h*stride_h; pos int32 [n_tokens];
 * freq_factors f32 [n_rot/2] or NULL. launch: one thread per (t, h, pair), grid-stride;
 * any sizes. twin rf_ref_rope; tolerance rel. L2 < 1e-5. */
__global__ void rf_k_rope(float *x, int64_t n_tokens, int64_t n_heads, int64_t n_rot,
                          int64_t stride_t, int64_t stride_h, const int32_t *pos, float base,
                          float fscale, const float *ff, int neox, float af) {
    const int64_t half = n_rot / 2, total = n_tokens * n_heads * half;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % half, th = e / half, h = th % n_heads, t = th / n_heads;
        float *v = x + t * stride_t + h * stride_h;
        float c, s;
        rf_rope_cs(pos[t], i, n_rot, base, fscale, ff, af, &c, &s);
        const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
    }
}

template <typename T> static __device__ __forceinline__ T rf_to_cache(float v);
template <> __device__ __forceinline__ float rf_to_cache<float>(float v) { return v; }
template <> __device__ __forceinline__ rf_half rf_to_cache<rf_half>(float v) {
    return rf_float2half(v);
}

/* rope_kv_append: qout[t,h,:] = rope(qin[t,h,:], pos[t]) (when qin is not NULL; qout packed,
 * qin row t at qin + t * sq, qout may be qin with sq = n_head * head_dim: in place);
 * k_cache[slot[t],h,:] = rope(k[t,h,:], pos[t]); v_cache[slot[t],h,:] = v[t,h,:] (k and v rows
 * at strides sk, sv: the columns of one joined Q/K/V product, or packed).
 * pos, slot int32 [n_tokens] (slot NULL: row t); caches T [cache_rows, n_head_kv, head_dim] (T = f32 or f16);
 * slots outside [0, cache_rows) skipped (q is still rotated). launch: one thread per
 * (t, h, d) over the n_head query heads then the n_head_kv key/value heads, grid-stride: a
 * thread owning the first element of a rotated pair reads and writes both, the partner writes
 * nothing for Q and K. One kernel where the unfused step takes four (rope Q, rope K, store K,
 * store V). With np > 1 (npv > 1), q and k (v) are views of a product's split-K partial sums,
 * np (npv) arrays ps apart, each value summed as it is read (rf_parts_sum: the bits of the
 * reduced product). twin rf_ref_rope then a copy/convert; tolerance rel. L2 < 1e-5 (f32
 * cache), < 1e-2 (f16); Q bit-identical to rf_k_rope. */
template <typename T>
__global__ void rf_k_rope_kv_append(float *qout, const float *qin, int64_t sq, int64_t n_head, const float *k,
                                    int64_t sk, const float *v, int64_t sv, int64_t n_tokens, int64_t n_head_kv,
                                    int64_t head_dim, int64_t n_rot, const int32_t *pos, const int32_t *slot,
                                    float base, float fscale, const float *ff, int neox, float af, T *kc,
                                    T *vc, int64_t cache_rows, int np, int npv, int64_t ps) {
    const int64_t nh = n_head + n_head_kv;
    const int64_t total = n_tokens * nh * head_dim, half = n_rot / 2;
    const int64_t e0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    float c0 = 0.0f, s0 = 0.0f; /* the angle of this thread's first element's pair, if it has one */
    if (e0 < total) {
        const int64_t i = rf_rope_pair(e0 % head_dim, n_rot, neox);
        if (i >= 0) rf_rope_cs(pos[e0 / head_dim / nh], i, n_rot, base, fscale, ff, af, &c0, &s0);
    }
    rf_rope_hold(c0, s0);
    rf_pdl_wait(); /* q, k, v: the previous kernel's output */
    rf_pdl_trigger(); /* after the wait: the attention's blocks (shared memory, 8 warps) would
                       * otherwise sit on the SMs for the whole Q/K/V product */
    for (int64_t e = e0; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = e % head_dim, th = e / head_dim, hh = th % nh, t = th / nh;
        const bool is_q = hh < n_head;
        const int64_t h = is_q ? hh : hh - n_head;
        T *kd = NULL;
        float *qo = NULL;
        const float *ks;
        if (is_q) {
            ks = qin + t * sq + h * head_dim;
            qo = qout + (t * n_head + h) * head_dim;
        } else {
            const int32_t sl = slot ? slot[t] : (int32_t)t; /* NULL: row t (the q8_0 path's staging) */
            if (sl < 0 || sl >= cache_rows) continue;
            ks = k + t * sk + h * head_dim;
            kd = kc + ((int64_t)sl * n_head_kv + h) * head_dim;
            vc[((int64_t)sl * n_head_kv + h) * head_dim + d] =
                rf_to_cache<T>(rf_parts_sum(v + t * sv + h * head_dim + d, npv, ps));
        }
        if (d >= n_rot) {
            const float x = rf_parts_sum(ks + d, np, ps);
            if (is_q) qo[d] = x;
            else kd[d] = rf_to_cache<T>(x);
            continue;
        }
        /* pair index and whether d is its first element */
        int64_t i, i0, i1;
        if (neox) {
            if (d >= half) continue;
            i = d, i0 = d, i1 = d + half;
        } else {
            if (d & 1) continue;
            i = d / 2, i0 = d, i1 = d + 1;
        }
        float c = c0, s = s0; /* e0's pair: computed before the wait, the same way */
        if (e != e0) rf_rope_cs(pos[t], i, n_rot, base, fscale, ff, af, &c, &s);
        const float a = rf_parts_sum(ks + i0, np, ps), b = rf_parts_sum(ks + i1, np, ps);
        const float r0 = a * c - b * s, r1 = a * s + b * c;
        if (is_q) {
            qo[i0] = r0;
            qo[i1] = r1;
        } else {
            kd[i0] = rf_to_cache<T>(r0);
            kd[i1] = rf_to_cache<T>(r1);
        }
    }
}

/* norm_rope_kv_append: rf_k_rope_kv_append with the per-head RMSNorms first: the (t, h) row of q
 * (n_head heads) is rmsnorm(row, qw, eps) before its RoPE, the K row rmsnorm(row, kw, eps) (qw or
 * kw NULL: that one not normed), V stored as is, or with vnorm as rmsnorm(row, NULL, eps) (gemma4).
 * Each norm's arithmetic is rf_k_rmsnorm_v's for a row of head_dim <= 1024: thread d holds
 * element d (0 past the row), its square, rf_block_sum (warps of RF_WARP_SIZE consecutive
 * elements, then the warp sums; the warps rmsnorm_v's 1024 threads have past the row add exact
 * zeros), inv = rsqrtf(ss / n + eps), x * inv * w. The normed row goes through shared memory to
 * the thread of its rotated pair, whose arithmetic is rf_k_rope_kv_append's: Q, K and V
 * bit-identical to rf_gpu_rmsnorm per row then rf_gpu_rope_qkv_append (np, npv, ps: as there, split-K
 * partial sums summed as read). launch: one block per
 * (t, head) over the n_head query heads then the n_head_kv key/value heads, blockDim head_dim
 * rounded up to 64 (a multiple of either warp width). */
template <typename T>
__global__ void __launch_bounds__(1024)
    rf_k_norm_rope_kv_append(float *qout, const float *qin, int64_t sq, int64_t n_head, const float *k, int64_t sk,
                             const float *v, int64_t sv, int64_t n_head_kv, int64_t head_dim, int64_t n_rot,
                             const int32_t *pos, const int32_t *slot, float base, float fscale, const float *ff,
                             int neox, float af, T *kc, T *vc, int64_t cache_rows, const float *qw, const float *kw,
                             int vnorm, float eps, int np, int npv, int64_t ps) {
    __shared__ float sh[1024 / 32];
    __shared__ float xs[1024];
    const int64_t nh = n_head + n_head_kv, t = blockIdx.x / nh, hh = blockIdx.x % nh;
    const bool is_q = hh < n_head;
    const int64_t h = is_q ? hh : hh - n_head;
    const int d = threadIdx.x;
    const int64_t pi = d < head_dim ? rf_rope_pair(d, n_rot, neox) : -1; /* this thread's pair */
    float c = 0.0f, s = 0.0f;
    if (pi >= 0) rf_rope_cs(pos[t], pi, n_rot, base, fscale, ff, af, &c, &s);
    rf_rope_hold(c, s);
    rf_pdl_wait(); /* q, k, v: the previous kernel's output */
    rf_pdl_trigger(); /* after the wait, as rf_k_rope_kv_append */
    const float *src, *w;
    T *kd = NULL;
    float *qo = NULL;
    if (is_q) {
        src = qin + t * sq + h * head_dim;
        qo = qout + (t * n_head + h) * head_dim;
        w = qw;
    } else {
        const int32_t sl = slot ? slot[t] : (int32_t)t; /* NULL: row t (the q8_0 path's staging) */
        if (sl < 0 || sl >= cache_rows) return;          /* the whole block: before any barrier */
        src = k + t * sk + h * head_dim;
        kd = kc + ((int64_t)sl * n_head_kv + h) * head_dim;
        w = kw;
        float y = d < head_dim ? rf_parts_sum(v + t * sv + h * head_dim + d, npv, ps) : 0.0f;
        if (vnorm) { /* gemma4's V: RMS-normed without a gain (rmsnorm_v's w NULL: times 1) */
            float ss = 0.0f;
            ss += y * y;
            ss = rf_block_sum(ss, sh);
            const float inv = rsqrtf(ss / (float)(int)head_dim + eps);
            y = y * inv * 1.0f;
        }
        if (d < head_dim) vc[((int64_t)sl * n_head_kv + h) * head_dim + d] = rf_to_cache<T>(y);
    }
    float x = d < head_dim ? rf_parts_sum(src + d, np, ps) : 0.0f;
    if (w) { /* uniform over the block */
        const float wv = d < head_dim ? w[d] : 1.0f;
        float ss = 0.0f;
        ss += x * x;
        ss = rf_block_sum(ss, sh);
        const float inv = rsqrtf(ss / (float)(int)head_dim + eps);
        x = x * inv * wv;
    }
    xs[d] = x; /* in place (qout == qin) is safe: this block alone reads and writes its row */
    __syncthreads();
    if (d >= head_dim) return;
    if (d >= n_rot) {
        if (is_q) qo[d] = x;
        else kd[d] = rf_to_cache<T>(x);
        return;
    }
    if (pi < 0) return; /* the second element of a pair: its partner writes both */
    const int64_t i0 = d, i1 = neox ? d + n_rot / 2 : d + 1;
    const float a = xs[i0], b = xs[i1];
    const float r0 = a * c - b * s, r1 = a * s + b * c;
    if (is_q) {
        qo[i0] = r0;
        qo[i1] = r1;
    } else {
        kd[i0] = rf_to_cache<T>(r0);
        kd[i1] = rf_to_cache<T>(r1);
    }
}

extern "C" rf_status rf_gpu_rope(rf_gpu_ctx *ctx, float *x, int64_t n_tokens, int64_t n_heads,
                                 int64_t head_dim, int64_t n_rot, int64_t stride_t,
                                 int64_t stride_h, const int32_t *pos, float freq_base,
                                 float freq_scale, const float *freq_factors, int mode,
                                 float attn_factor) {
    RF_GPU_REQUIRE(n_rot >= 0 && n_rot % 2 == 0 && n_rot <= head_dim, "rf_gpu_rope",
                   "n_rot=%lld must be even and <= head_dim=%lld", (long long)n_rot,
                   (long long)head_dim);
    RF_GPU_REQUIRE(mode == RF_ROPE_NORMAL || mode == RF_ROPE_NEOX, "rf_gpu_rope", "mode %d", mode);
    RF_GPU_REQUIRE(n_tokens >= 0 && n_heads >= 0, "rf_gpu_rope", "negative shape");
    const int64_t total = n_tokens * n_heads * (n_rot / 2);
    if (total == 0) return RF_OK;
    int neox = mode == RF_ROPE_NEOX;
    rf_k_rope<<<rf_gpu_blocks(total, 256), 256, 0, ctx->stream>>>(
        x, n_tokens, n_heads, n_rot, stride_t, stride_h, pos, freq_base, freq_scale, freq_factors,
        neox, attn_factor);
    return RF_GPU_LAUNCHED(ctx, "rf_k_rope");
}

/* One launch of the RoPE + KV append kernel writing caches of T: the norm-first kernel when a
 * norm is asked for, else the per-element one. */
template <typename T>
static rf_status rope_append_launch(rf_gpu_ctx *ctx, float *qout, const float *qin, int64_t sq, int64_t n_head,
                                    const float *k, int64_t sk, const float *v, int64_t sv, int64_t n_tokens,
                                    int64_t n_head_kv, int64_t head_dim, int64_t n_rot, const int32_t *pos,
                                    const int32_t *slot, float base, float fscale, const float *ff, int neox, float af,
                                    T *kc, T *vc, int64_t cache_rows, const float *qw, const float *kw, int vnorm,
                                    float eps, int np, int npv, int64_t ps) {
    const rf_test_hooks *hk = rf_test_hooks_get();
    const bool pdl = !(hk && hk->gpu_attn_nopdl); /* the test hook: in stream order, as before */
    if (qw || kw || vnorm) {
        const int64_t blocks = n_tokens * (n_head + n_head_kv);
        const int threads = (int)((head_dim + 63) / 64 * 64);
        return rf_gpu_launch(ctx, "rf_k_norm_rope_kv_append", pdl, rf_k_norm_rope_kv_append<T>, dim3((unsigned)blocks),
                             dim3(threads), 0, qout, qin, sq, n_head, k, sk, v, sv, n_head_kv, head_dim, n_rot, pos, slot,
                             base, fscale, ff, neox, af, kc, vc, cache_rows, qw, kw, vnorm, eps, np, npv, ps);
    }
    const int64_t total = n_tokens * (n_head + n_head_kv) * head_dim;
    return rf_gpu_launch(ctx, "rf_k_rope_kv_append", pdl, rf_k_rope_kv_append<T>, dim3(rf_gpu_blocks(total, 256)),
                         dim3(256), 0, qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim, n_rot, pos,
                         slot, base, fscale, ff, neox, af, kc, vc, cache_rows, np, npv, ps);
}

extern "C" rf_status rf_gpu_norm_rope_qkv_append_parts(
    rf_gpu_ctx *ctx, float *qout, const float *qin, int64_t sq, int64_t n_head, const float *k, int64_t sk,
    const float *v, int64_t sv, int64_t n_tokens, int64_t n_head_kv, int64_t head_dim, int64_t n_rot,
    const int32_t *pos, const int32_t *slot, float freq_base, float freq_scale, const float *freq_factors, int mode,
    float attn_factor, void *k_cache, void *v_cache, rf_type cache_type, int64_t cache_rows, const float *q_norm,
    const float *k_norm, int v_norm, float eps, int np, int npv, int64_t ps) {
    const char *op = "rf_gpu_rope_qkv_append";
    RF_GPU_REQUIRE(np >= 1 && np <= 8 && npv >= 1 && npv <= 8 && (np == 1 || (ps >= 1 && qin != qout)) &&
                       (npv == 1 || ps >= 1),
                   op, "%d / %d split-K parts %lld apart (1..8; not in place)", np, npv, (long long)ps);
    RF_GPU_REQUIRE(n_rot >= 0 && n_rot % 2 == 0 && n_rot <= head_dim, op,
                   "n_rot=%lld must be even and <= head_dim=%lld", (long long)n_rot,
                   (long long)head_dim);
    RF_GPU_REQUIRE(mode == RF_ROPE_NORMAL || mode == RF_ROPE_NEOX, op, "mode %d", mode);
    RF_GPU_REQUIRE(cache_type == RF_TYPE_F16 || cache_type == RF_TYPE_F32 || cache_type == RF_TYPE_Q8_0, op,
                   "cache type %d (want f16, f32 or q8_0)", (int)cache_type);
    RF_GPU_REQUIRE(n_tokens >= 0 && n_head_kv >= 1 && head_dim >= 1 && n_head >= 0 &&
                       (n_head == 0 || (qin && qout && sq >= n_head * head_dim)) &&
                       sk >= n_head_kv * head_dim && sv >= n_head_kv * head_dim,
                   op, "bad shape or strides");
    RF_GPU_REQUIRE(qin != qout || sq == n_head * head_dim || n_head == 0, op, "in place needs packed q rows");
    RF_GPU_REQUIRE((!q_norm && !k_norm && !v_norm) ||
                       (head_dim <= 1024 && n_tokens * (n_head + n_head_kv) <= 0x7fffffff),
                   op,
                   "the per-head norms need head_dim <= 1024 and fewer than 2^31 rows (head_dim %lld)",
                   (long long)head_dim);
    const int64_t total = n_tokens * (n_head + n_head_kv) * head_dim;
    if (total == 0) return RF_OK;
    int neox = mode == RF_ROPE_NEOX;
    if (cache_type == RF_TYPE_Q8_0) {
        /* A q8_0 block's scale needs its 32 roped values at once, and NeoX pairs cross blocks:
         * the kernel stages K and V as f32 rows [n_tokens, n_head_kv * head_dim] in scratch, then
         * rf_k_kv_store_q8 quantizes them (two more launches, 8 * n_head_kv * head_dim bytes per
         * token through L2). */
        const int64_t kvd = n_head_kv * head_dim;
        RF_GPU_REQUIRE(kvd % 32 == 0, op, "a q8_0 cache needs n_head_kv * head_dim %% 32 == 0 (%lld)", (long long)kvd);
        void *tmp;
        size_t mark;
        rf_status st = rf_gpu_tmp(ctx, (size_t)n_tokens * (size_t)kvd * 8, &tmp, &mark);
        if (st) return st;
        float *ks = (float *)tmp, *vs = ks + n_tokens * kvd;
        st = rope_append_launch<float>(ctx, qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim, n_rot,
                                       pos, NULL, freq_base, freq_scale, freq_factors, neox, attn_factor, ks, vs,
                                       n_tokens, q_norm, k_norm, v_norm, eps, np, npv, ps);
        if (!st) st = rf_gpu_kv_store_q8(ctx, k_cache, cache_rows, ks, kvd, n_tokens, kvd, slot);
        if (!st) st = rf_gpu_kv_store_q8(ctx, v_cache, cache_rows, vs, kvd, n_tokens, kvd, slot);
        ctx->scratch_used = mark;
        return st;
    }
    if (cache_type == RF_TYPE_F16)
        return rope_append_launch<rf_half>(ctx, qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim,
                                           n_rot, pos, slot, freq_base, freq_scale, freq_factors, neox, attn_factor,
                                           (rf_half *)k_cache, (rf_half *)v_cache, cache_rows, q_norm, k_norm, v_norm, eps,
                                           np, npv, ps);
    return rope_append_launch<float>(ctx, qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim, n_rot,
                                     pos, slot, freq_base, freq_scale, freq_factors, neox, attn_factor,
                                     (float *)k_cache, (float *)v_cache, cache_rows, q_norm, k_norm, v_norm, eps, np, npv, ps);
}

extern "C" rf_status rf_gpu_norm_rope_qkv_append(rf_gpu_ctx *ctx, float *qout, const float *qin, int64_t sq,
                                                 int64_t n_head, const float *k, int64_t sk, const float *v,
                                                 int64_t sv, int64_t n_tokens, int64_t n_head_kv, int64_t head_dim,
                                                 int64_t n_rot, const int32_t *pos, const int32_t *slot,
                                                 float freq_base, float freq_scale, const float *freq_factors,
                                                 int mode, float attn_factor, void *k_cache, void *v_cache,
                                                 rf_type cache_type, int64_t cache_rows, const float *q_norm,
                                                 const float *k_norm, int v_norm, float eps) {
    return rf_gpu_norm_rope_qkv_append_parts(ctx, qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim,
                                             n_rot, pos, slot, freq_base, freq_scale, freq_factors, mode, attn_factor,
                                             k_cache, v_cache, cache_type, cache_rows, q_norm, k_norm, v_norm, eps, 1, 1, 0);
}

extern "C" rf_status rf_gpu_rope_qkv_append(rf_gpu_ctx *ctx, float *qout, const float *qin, int64_t sq,
                                            int64_t n_head, const float *k, int64_t sk, const float *v,
                                            int64_t sv, int64_t n_tokens, int64_t n_head_kv, int64_t head_dim,
                                            int64_t n_rot, const int32_t *pos, const int32_t *slot,
                                            float freq_base, float freq_scale, const float *freq_factors,
                                            int mode, float attn_factor, void *k_cache, void *v_cache,
                                            rf_type cache_type, int64_t cache_rows) {
    return rf_gpu_norm_rope_qkv_append(ctx, qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim, n_rot,
                                       pos, slot, freq_base, freq_scale, freq_factors, mode, attn_factor, k_cache,
                                       v_cache, cache_type, cache_rows, NULL, NULL, 0, 0.0f);
}

extern "C" rf_status rf_gpu_rope_kv_append(rf_gpu_ctx *ctx, const float *k, const float *v,
                                           int64_t n_tokens, int64_t n_head_kv, int64_t head_dim,
                                           int64_t n_rot, const int32_t *pos, const int32_t *slot,
                                           float freq_base, float freq_scale,
                                           const float *freq_factors, int mode, float attn_factor,
                                           void *k_cache, void *v_cache, rf_type cache_type,
                                           int64_t cache_rows) {
    const int64_t kv = n_head_kv * head_dim;
    return rf_gpu_rope_qkv_append(ctx, NULL, NULL, 0, 0, k, kv, v, kv, n_tokens, n_head_kv, head_dim, n_rot, pos,
                                  slot, freq_base, freq_scale, freq_factors, mode, attn_factor, k_cache, v_cache,
                                  cache_type, cache_rows);
}
