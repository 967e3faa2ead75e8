/* gpu_rope.cu — rotary position embedding (normal and NeoX pairing, any layout via strides,
 * llama3 frequency factors) and the fused RoPE + KV-cache append. */
#include "backend/gpu/gpu_internal.h"

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
 * store V). twin rf_ref_rope then a copy/convert; tolerance rel. L2 < 1e-5 (f32 cache),
 * < 1e-2 (f16); Q bit-identical to rf_k_rope. */
template <typename T>
__global__ void rf_k_rope_kv_append(float *qout, const float *qin, int64_t sq, int64_t n_head, const float *k,
                                    int64_t sk, const float *v, int64_t sv, int64_t n_tokens, int64_t n_head_kv,
                                    int64_t head_dim, int64_t n_rot, const int32_t *pos, const int32_t *slot,
                                    float base, float fscale, const float *ff, int neox, float af, T *kc,
                                    T *vc, int64_t cache_rows) {
    const int64_t nh = n_head + n_head_kv;
    const int64_t total = n_tokens * nh * head_dim, half = n_rot / 2;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
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
            vc[((int64_t)sl * n_head_kv + h) * head_dim + d] = rf_to_cache<T>(v[t * sv + h * head_dim + d]);
        }
        if (d >= n_rot) {
            if (is_q) qo[d] = ks[d];
            else kd[d] = rf_to_cache<T>(ks[d]);
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
        float c, s;
        rf_rope_cs(pos[t], i, n_rot, base, fscale, ff, af, &c, &s);
        const float a = ks[i0], b = ks[i1];
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

extern "C" rf_status rf_gpu_rope_qkv_append(rf_gpu_ctx *ctx, float *qout, const float *qin, int64_t sq,
                                            int64_t n_head, const float *k, int64_t sk, const float *v,
                                            int64_t sv, int64_t n_tokens, int64_t n_head_kv, int64_t head_dim,
                                            int64_t n_rot, const int32_t *pos, const int32_t *slot,
                                            float freq_base, float freq_scale, const float *freq_factors,
                                            int mode, float attn_factor, void *k_cache, void *v_cache,
                                            rf_type cache_type, int64_t cache_rows) {
    const char *op = "rf_gpu_rope_qkv_append";
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
        rf_k_rope_kv_append<float><<<rf_gpu_blocks(total, 256), 256, 0, ctx->stream>>>(
            qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim, n_rot, pos, NULL, freq_base,
            freq_scale, freq_factors, neox, attn_factor, ks, vs, n_tokens);
        st = RF_GPU_LAUNCHED(ctx, "rf_k_rope_kv_append");
        if (!st) st = rf_gpu_kv_store_q8(ctx, k_cache, cache_rows, ks, kvd, n_tokens, kvd, slot);
        if (!st) st = rf_gpu_kv_store_q8(ctx, v_cache, cache_rows, vs, kvd, n_tokens, kvd, slot);
        ctx->scratch_used = mark;
        return st;
    }
    if (cache_type == RF_TYPE_F16) {
        rf_half *kc = (rf_half *)k_cache, *vc = (rf_half *)v_cache;
        rf_k_rope_kv_append<rf_half><<<rf_gpu_blocks(total, 256), 256, 0, ctx->stream>>>(
            qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim, n_rot, pos, slot, freq_base,
            freq_scale, freq_factors, neox, attn_factor, kc, vc, cache_rows);
    } else {
        float *kc = (float *)k_cache, *vc = (float *)v_cache;
        rf_k_rope_kv_append<float><<<rf_gpu_blocks(total, 256), 256, 0, ctx->stream>>>(
            qout, qin, sq, n_head, k, sk, v, sv, n_tokens, n_head_kv, head_dim, n_rot, pos, slot, freq_base,
            freq_scale, freq_factors, neox, attn_factor, kc, vc, cache_rows);
    }
    return RF_GPU_LAUNCHED(ctx, "rf_k_rope_kv_append");
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
