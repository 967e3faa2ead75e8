/* gpu_elementwise.cu — small f32 kernels: scale, add, mul, causal mask, softmax, RMSNorm,
 * LayerNorm, SwiGLU, GeGLU. Each has the contract of its CPU twin in backend/ref/ref_ops.h. */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_rmsnorm.cuh"

#define RF_EW_THREADS 256
#define RF_ROW_THREADS 256 /* a multiple of 64: whole warps on every target */

/* scale: y[i] = x[i] * s; f32 [n], y may alias x; any n >= 0; grid-stride.
 * twin rf_ref_scale; tolerance: exact (one rounding, same as CPU). */
__global__ void rf_k_scale(float *y, const float *x, float s, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i] * s;
}
/* add / mul: y[i] = a[i] + b[i] / a[i] * b[i]; twin rf_ref_add / rf_ref_mul; exact. */
__global__ void rf_k_add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}
__global__ void rf_k_mul(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] * b[i];
}

/* causal_mask: x[i,j] = -inf where j > pos0+i or (window > 0 and j <= pos0+i-window);
 * x f32 [n_q, n_kv] in place; grid-stride over all elements; twin rf_ref_causal_mask; exact. */
__global__ void rf_k_causal_mask(float *x, int64_t n_q, int64_t n_kv, int64_t pos0, int64_t window) {
    const int64_t n = n_q * n_kv;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / n_kv, j = e % n_kv, p = pos0 + i;
        if (j > p || (window > 0 && j <= p - window)) x[e] = -INFINITY;
    }
}

/* swiglu / geglu: y[i] = act(gate[i]) * up[i]; f32 [n]; y may alias; grid-stride.
 * twins rf_ref_swiglu / rf_ref_geglu; tolerance rel. L2 < 1e-5. */
__global__ void rf_k_swiglu(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = rf_silu(g[i]) * u[i];
}
__global__ void rf_k_geglu(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = rf_gelu_tanh(g[i]) * u[i];
}
/* swiglu_oai (gpt-oss): rf_swiglu_oai (gpu_internal.h). twin rf_ref_swiglu_oai; rel. L2 < 1e-5. */
/* in: gate rows at stride gs, up rows at stride us (floats); out: y packed [rows, n] (may alias
 * when packed); grid (blocks over n, rows) with rows = 1 for a packed vector of any length. */
__global__ void rf_k_swiglu_oai_rows(float *y, const float *g, int64_t gs, const float *u, int64_t us, int64_t n) {
    const int64_t r = blockIdx.y;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[r * n + i] = rf_swiglu_oai(g[r * gs + i], u[r * us + i]);
}

/* softmax: y[r,i] = exp(s*x[r,i] - max_r) / sum_r; -inf entries -> 0; all -inf row -> zeros;
 * NaN in a row -> whole row NaN; +inf max -> equal mass on the +inf entries.
 * in: x f32 [rows, n]; out: y f32 [rows, n] (may alias x); launch: one block per row,
 * RF_ROW_THREADS threads, any n >= 1. twin rf_ref_softmax; tolerance rel. L2 < 1e-5. */
__global__ void rf_k_softmax(float *y, const float *x, int64_t n, float scale) {
    __shared__ float sh[1024 / 32];
    const float *xr = x + blockIdx.x * n;
    float *yr = y + blockIdx.x * n;
    float mx = -INFINITY, nan = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        if (v != v) nan = 1.0f;
        else if (v != -INFINITY) mx = fmaxf(mx, scale * v);
    }
    nan = rf_block_max(nan, sh);
    mx = rf_block_max(mx, sh);
    if (nan > 0.0f || mx == -INFINITY) {
        const float fill = nan > 0.0f ? NAN : 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = fill;
        return;
    }
    const bool inf_max = mx == INFINITY;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        float e = v == -INFINITY ? 0.0f : inf_max ? (scale * v == INFINITY ? 1.0f : 0.0f)
                                                  : expf(scale * v - mx);
        sum += e;
    }
    sum = rf_block_sum(sum, sh);
    const float inv = 1.0f / sum;
    /* recompute rather than store: y may alias x, and every x is still unread-after-write here
     * because each element is read and written by the same thread */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        float e = v == -INFINITY ? 0.0f : inf_max ? (scale * v == INFINITY ? 1.0f : 0.0f)
                                                  : expf(scale * v - mx);
        yr[i] = e * inv;
    }
}

/* rms_norm: y[r,i] = x[r,i] / sqrt(mean_i(x[r,:]^2) + eps) * w[i]
 * in: x f32 [rows, n] row-major, w f32 [n] or NULL (ones); out: y f32 [rows, n] (may alias x)
 * launch: one block per row, RF_ROW_THREADS threads; any n >= 1
 * twin rf_ref_rmsnorm; tolerance rel. L2 < 1e-5 (f32) */
__global__ void rf_k_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    __shared__ float sh[1024 / 32];
    const float *xr = x + blockIdx.x * n;
    float *yr = y + blockIdx.x * n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    ss = rf_block_sum(ss, sh);
    const float inv = rsqrtf(ss / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * (w ? w[i] : 1.0f);
}

/* rmsnorm_v: rf_k_rmsnorm for rows of n <= 1024 K elements: element i = k * 1024 + threadIdx.x
 * of the row, every load (x and w) issued before the first use, so a decode step's norm costs
 * one memory latency instead of one per loop trip (the loop above, 16 dependent trips per pass
 * for a 4096 row at 256 threads, took ~15 us on an H100). The arithmetic (each thread's sum of
 * squares over k in order, the block sum, h = x * inv * w) is rf_k_rmsnorm_quantize_x's
 * exactly, so the fused and the unfused decode step see the same h bit for bit. It lets the
 * next kernel launch at its start (programmatic dependent launch: a GEMV then streams its
 * weights meanwhile). With res (not NULL), x = x + res is formed first and written back (the
 * residual add before a norm; y must then not alias x). launch: one block per row, 1024
 * threads. tolerance as rf_k_rmsnorm. */
template <int K>
__global__ void __launch_bounds__(1024) rf_k_rmsnorm_v(float *y, float *x, const float *res, const float *w, int n,
                                                       float eps) {
    rf_pdl_trigger();
    __shared__ float sh[1024 / 32];
    float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    float v[K], wv[K];
    rf_rms_load_row<K>(v, wv, xr, res, 1, 0, w, n);
    const float inv = rf_rms_inv<K>(v, n, eps, sh);
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = k * 1024 + threadIdx.x;
        if (i < n) yr[i] = v[k] * inv * wv[k];
    }
}

/* add_norm: gemma4's post-norms with what follows them, in one kernel per row: with o (not NULL)
 * o = rmsnorm(o) * wo, then x = (x + o) * s (both written back); with y (not NULL) y =
 * rmsnorm(x) * wy * sy (the next block's pre-norm, or the router's input norm and scale). Each
 * norm's arithmetic is rf_k_rmsnorm_v's (a thread's squares over k in order, the block sum,
 * v * inv * w) and the add and the scales are rf_k_add's and rf_k_scale's (rounded apart), in
 * the order the unfused ops apply them: the same values as those ops give. y must alias
 * neither x nor o. launch: one block per row, 1024 threads, n <= 1024 K. tolerance as
 * rf_k_rmsnorm. */
template <int K>
__global__ void __launch_bounds__(1024) rf_k_add_norm(float *x, float *o, const float *wo, float s, float *y,
                                                      const float *wy, float sy, int n, float eps) {
    rf_pdl_trigger();
    __shared__ float sh[1024 / 32];
    float *xr = x + (int64_t)blockIdx.x * n;
    float v[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = k * 1024 + threadIdx.x;
        v[k] = i < n ? xr[i] : 0.0f;
    }
    if (o) {
        float *orow = o + (int64_t)blockIdx.x * n;
        float u[K], wv[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = k * 1024 + threadIdx.x;
            u[k] = i < n ? orow[i] : 0.0f;
            wv[k] = wo && i < n ? wo[i] : 1.0f;
        }
        const float inv = rf_rms_inv<K>(u, n, eps, sh);
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = k * 1024 + threadIdx.x;
            u[k] = u[k] * inv * wv[k];
            v[k] = __fadd_rn(v[k], u[k]); /* rounded as rf_k_add's: no contraction with the norm's product */
            if (s != 1.0f) v[k] = __fmul_rn(v[k], s);
            if (i < n) orow[i] = u[k], xr[i] = v[k];
        }
    }
    if (y) {
        float *yr = y + (int64_t)blockIdx.x * n;
        const float inv = rf_rms_inv<K>(v, n, eps, sh);
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = k * 1024 + threadIdx.x;
            if (i < n) {
                float h = v[k] * inv * (wy ? wy[i] : 1.0f);
                if (sy != 1.0f) h = h * sy;
                yr[i] = h;
            }
        }
    }
}

/* layer_norm: y[r,i] = (x[r,i] - mean) / sqrt(var + eps) * w[i] + b[i] (population variance)
 * in: x f32 [rows, n], w, b f32 [n] or NULL; out: y (may alias x); one block per row; n >= 1
 * twin rf_ref_layernorm; tolerance rel. L2 < 1e-5 (two passes: mean first, then variance) */
__global__ void rf_k_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n,
                               float eps) {
    __shared__ float sh[1024 / 32];
    const float *xr = x + blockIdx.x * n;
    float *yr = y + blockIdx.x * n;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
    const float mean = rf_block_sum(s, sh) / (float)n;
    float v = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
    const float inv = rsqrtf(rf_block_sum(v, sh) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = (xr[i] - mean) * inv * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

/* ---- host glue ------------------------------------------------------------------------- */

#define RF_EW_LAUNCH(ctx, kern, n, ...)                                                      \
    do {                                                                                     \
        if ((n) <= 0) return RF_OK;                                                          \
        kern<<<rf_gpu_blocks((n), RF_EW_THREADS), RF_EW_THREADS, 0, (ctx)->stream>>>(        \
            __VA_ARGS__);                                                                    \
        return RF_GPU_LAUNCHED(ctx, #kern);                                                  \
    } while (0)

extern "C" rf_status rf_gpu_scale(rf_gpu_ctx *ctx, float *y, const float *x, float s, int64_t n) {
    RF_EW_LAUNCH(ctx, rf_k_scale, n, y, x, s, n);
}
extern "C" rf_status rf_gpu_add(rf_gpu_ctx *ctx, float *y, const float *a, const float *b,
                                int64_t n) {
    RF_EW_LAUNCH(ctx, rf_k_add, n, y, a, b, n);
}
extern "C" rf_status rf_gpu_mul(rf_gpu_ctx *ctx, float *y, const float *a, const float *b,
                                int64_t n) {
    RF_EW_LAUNCH(ctx, rf_k_mul, n, y, a, b, n);
}
/* glu_rows: y[r, i] = act(gate[r * gs + i]) * up[r * us + i], y packed [rows, n]; grid (blocks
 * over n, rows). twins rf_ref_swiglu / rf_ref_geglu (the arithmetic of rf_k_swiglu / geglu). */
template <bool GEGLU>
__global__ void rf_k_glu_rows(float *y, const float *g, int64_t gs, const float *u, int64_t us, int64_t n) {
    const int64_t r = blockIdx.y;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float gv = g[r * gs + i];
        y[r * n + i] = (GEGLU ? rf_gelu_tanh(gv) : rf_silu(gv)) * u[r * us + i];
    }
}

extern "C" rf_status rf_gpu_glu_rows(rf_gpu_ctx *ctx, float *y, const float *gate, int64_t gs, const float *up,
                                     int64_t us, int64_t rows, int64_t n, bool geglu) {
    RF_GPU_REQUIRE(rows >= 0 && rows <= 65535 && n >= 1 && gs >= n && us >= n, "rf_gpu_glu_rows",
                   "rows=%lld n=%lld strides %lld, %lld", (long long)rows, (long long)n, (long long)gs,
                   (long long)us);
    if (rows == 0) return RF_OK;
    int64_t bx = (n + 255) / 256;
    const dim3 grid((unsigned)(bx > 64 ? 64 : bx), (unsigned)rows);
    if (geglu) rf_k_glu_rows<true><<<grid, 256, 0, ctx->stream>>>(y, gate, gs, up, us, n);
    else rf_k_glu_rows<false><<<grid, 256, 0, ctx->stream>>>(y, gate, gs, up, us, n);
    return RF_GPU_LAUNCHED(ctx, "rf_k_glu_rows");
}

extern "C" rf_status rf_gpu_swiglu(rf_gpu_ctx *ctx, float *y, const float *g, const float *u,
                                   int64_t n) {
    RF_EW_LAUNCH(ctx, rf_k_swiglu, n, y, g, u, n);
}
extern "C" rf_status rf_gpu_geglu(rf_gpu_ctx *ctx, float *y, const float *g, const float *u,
                                  int64_t n) {
    RF_EW_LAUNCH(ctx, rf_k_geglu, n, y, g, u, n);
}
extern "C" rf_status rf_gpu_swiglu_oai(rf_gpu_ctx *ctx, float *y, const float *gate, int64_t gs, const float *up,
                                       int64_t us, int64_t rows, int64_t n) {
    RF_GPU_REQUIRE(rows >= 0 && rows <= 65535 && n >= 1 && (rows <= 1 || (gs >= n && us >= n)), "rf_gpu_swiglu_oai",
                   "rows=%lld n=%lld strides %lld, %lld", (long long)rows, (long long)n, (long long)gs,
                   (long long)us);
    if (rows == 0) return RF_OK;
    const int64_t bx = (n + 255) / 256;
    const dim3 grid((unsigned)(bx > (rows > 1 ? 64 : 4096) ? (rows > 1 ? 64 : 4096) : bx), (unsigned)rows);
    rf_k_swiglu_oai_rows<<<grid, 256, 0, ctx->stream>>>(y, gate, gs, up, us, n);
    return RF_GPU_LAUNCHED(ctx, "rf_k_swiglu_oai_rows");
}
extern "C" rf_status rf_gpu_causal_mask(rf_gpu_ctx *ctx, float *x, int64_t n_q, int64_t n_kv,
                                        int64_t pos0, int64_t window) {
    RF_GPU_REQUIRE(n_q >= 0 && n_kv >= 0, "rf_gpu_causal_mask", "negative shape %lld x %lld",
                   (long long)n_q, (long long)n_kv);
    RF_EW_LAUNCH(ctx, rf_k_causal_mask, n_q * n_kv, x, n_q, n_kv, pos0, window);
}

#define RF_ROW_CHECK(op)                                                                     \
    RF_GPU_REQUIRE(n >= 1 && rows >= 0 && rows <= 0x7fffffff, op,                           \
                   "rows=%lld n=%lld outside the contract (n >= 1, rows < 2^31)",           \
                   (long long)rows, (long long)n)

extern "C" rf_status rf_gpu_softmax(rf_gpu_ctx *ctx, float *y, const float *x, int64_t rows,
                                    int64_t n, float scale) {
    RF_ROW_CHECK("rf_gpu_softmax");
    if (rows == 0) return RF_OK;
    rf_k_softmax<<<(unsigned)rows, RF_ROW_THREADS, 0, ctx->stream>>>(y, x, n, scale);
    return RF_GPU_LAUNCHED(ctx, "rf_k_softmax");
}
extern "C" rf_status rf_gpu_add_rmsnorm(rf_gpu_ctx *ctx, float *y, float *x, const float *res, const float *w,
                                        int64_t rows, int64_t n, float eps) {
    RF_GPU_REQUIRE(n >= 1 && n <= 16384 && rows >= 0 && rows <= 0x7fffffff && (!res || y != x), "rf_gpu_add_rmsnorm",
                   "rows=%lld n=%lld (n <= 16384; y must not alias x with a residual)", (long long)rows, (long long)n);
    if (rows == 0) return RF_OK;
    const int k = (int)((n + 1023) / 1024);
    if (k <= 4) rf_k_rmsnorm_v<4><<<(unsigned)rows, 1024, 0, ctx->stream>>>(y, x, res, w, (int)n, eps);
    else if (k <= 8) rf_k_rmsnorm_v<8><<<(unsigned)rows, 1024, 0, ctx->stream>>>(y, x, res, w, (int)n, eps);
    else rf_k_rmsnorm_v<16><<<(unsigned)rows, 1024, 0, ctx->stream>>>(y, x, res, w, (int)n, eps);
    return RF_GPU_LAUNCHED(ctx, "rf_k_rmsnorm_v");
}

extern "C" rf_status rf_gpu_add_norm(rf_gpu_ctx *ctx, float *x, float *o, const float *wo, float s, float *y,
                                     const float *wy, float sy, int64_t rows, int64_t n, float eps) {
    RF_GPU_REQUIRE(n >= 1 && n <= 16384 && rows >= 0 && rows <= 0x7fffffff && (!y || (y != x && y != o)) &&
                       (o || s == 1.0f),
                   "rf_gpu_add_norm", "rows=%lld n=%lld (n <= 16384; y must alias neither x nor o; s 1 without o)",
                   (long long)rows, (long long)n);
    if (rows == 0 || (!o && !y)) return RF_OK;
    const int k = (int)((n + 1023) / 1024);
#define RF_AN(K) rf_k_add_norm<K><<<(unsigned)rows, 1024, 0, ctx->stream>>>(x, o, wo, s, y, wy, sy, (int)n, eps)
    if (k <= 4) RF_AN(4);
    else if (k <= 8) RF_AN(8);
    else RF_AN(16);
#undef RF_AN
    return RF_GPU_LAUNCHED(ctx, "rf_k_add_norm");
}

extern "C" rf_status rf_gpu_rmsnorm(rf_gpu_ctx *ctx, float *y, const float *x, const float *w,
                                    int64_t rows, int64_t n, float eps) {
    RF_ROW_CHECK("rf_gpu_rmsnorm");
    if (rows == 0) return RF_OK;
    if (n <= 16384) return rf_gpu_add_rmsnorm(ctx, y, (float *)x, NULL, w, rows, n, eps);
    rf_k_rmsnorm<<<(unsigned)rows, RF_ROW_THREADS, 0, ctx->stream>>>(y, x, w, n, eps);
    return RF_GPU_LAUNCHED(ctx, "rf_k_rmsnorm");
}
extern "C" rf_status rf_gpu_layernorm(rf_gpu_ctx *ctx, float *y, const float *x, const float *w,
                                      const float *b, int64_t rows, int64_t n, float eps) {
    RF_ROW_CHECK("rf_gpu_layernorm");
    if (rows == 0) return RF_OK;
    rf_k_layernorm<<<(unsigned)rows, RF_ROW_THREADS, 0, ctx->stream>>>(y, x, w, b, n, eps);
    return RF_GPU_LAUNCHED(ctx, "rf_k_layernorm");
}
