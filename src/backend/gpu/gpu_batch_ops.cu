/* gpu_batch_ops.cu — the small kernels the batched forward needs around the big ones: storing
 * K/V rows at per-token slots of the paged pool, gathering the rows whose logits are wanted,
 * bias add and logit softcap. Twins: the CPU backend's kv_store, gather_rows, add_bias and
 * softcap (backend/cpu/cpu_backend.c), which tests/gpu/test_gpu_batch_ops.c compares against. */
#include "backend/gpu/gpu_internal.h"

#define RF_BO_THREADS 256

/* kv_store: cache row slot[t] = convert(src row t) for t < n_tokens; src f32 [n_tokens, n];
 * cache CT [cache_rows, n]; slot outside [0, cache_rows) (padding tokens) is skipped.
 * launch: grid (ceil(n / threads), n_tokens); f16 rounding is round-to-nearest-even, the CPU's. */
template <typename CT>
__global__ void rf_k_kv_store(CT *cache, const float *src, const int32_t *slot, int64_t n,
                              int64_t cache_rows) {
    const int64_t t = blockIdx.y;
    const int32_t s = slot[t];
    if (s < 0 || s >= cache_rows) return;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float x = src[t * n + i];
        if constexpr (sizeof(CT) == 4) cache[(int64_t)s * n + i] = x;
        else cache[(int64_t)s * n + i] = rf_float2half(x);
    }
}

/* kv_store into a q8_0 cache: cache row slot[t] = q8_0(src row t) for t < n_tokens, src row t
 * at src + t * ss (floats); the row of n elements (n % 32 == 0) is n / 32 blocks of 34 bytes
 * (f16 scale, 32 int8), ggml's layout. The CPU twin's rule bit for bit (row_to_q8_0 in
 * backend/cpu/cpu_backend.c): amax = max |x| over the block, d = amax / 127, id = 1 / d (0 when
 * d is 0), q = roundf(x * id) (half away from zero), d stored rounded to f16 (nearest even).
 * Slots outside [0, cache_rows) (padding) are skipped.
 * launch: grid (ceil(n / 32 / 8), n_tokens), 256 threads: one warp per block of 32. */
__global__ void rf_k_kv_store_q8(uint8_t *cache, const float *src, int64_t ss, const int32_t *slot, int64_t n,
                                 int64_t cache_rows) {
    const int64_t t = blockIdx.y;
    const int32_t s = slot[t];
    if (s < 0 || s >= cache_rows) return;
    const int lane = threadIdx.x % 32;
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n / 32) return; /* a whole warp leaves together */
    const float x = src[t * ss + b * 32 + lane];
    float amax = fabsf(x);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, RF_SHFL_XOR(amax, m)); /* within the 32 (wave64: its half) */
    const float d = __fdiv_rn(amax, 127.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    uint8_t *blk = cache + ((int64_t)s * (n / 32) + b) * 34;
    blk[2 + lane] = (uint8_t)(int8_t)roundf(__fmul_rn(x, id));
    if (lane == 0) *(rf_half *)blk = rf_float2half(d);
}

/* gather_rows: y[i, :] = x[idx[i], :] for i < n_idx; f32 rows of n; grid (ceil(n/threads),
 * n_idx); exact. */
__global__ void rf_k_gather_rows(float *y, const float *x, const int32_t *idx, int64_t n) {
    const int64_t i = blockIdx.y;
    const int64_t r = idx[i];
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < n;
         c += (int64_t)gridDim.x * blockDim.x)
        y[i * n + c] = x[r * n + c];
}

/* add_bias: y[r, i] += b[i] over rows x n; grid-stride; exact. */
__global__ void rf_k_add_bias(float *y, const float *b, int64_t rows, int64_t n) {
    const int64_t total = rows * n;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x)
        y[e] += b[e % n];
}

/* softcap: x[i] = cap * tanh(x[i] / cap) in place; grid-stride; tolerance 1e-6 relative. */
__global__ void rf_k_softcap(float *x, float cap, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

static unsigned cols_blocks(int64_t n) {
    int64_t b = (n + RF_BO_THREADS - 1) / RF_BO_THREADS;
    return (unsigned)(b < 1 ? 1 : (b > 64 ? 64 : b));
}

extern "C" rf_status rf_gpu_kv_store(rf_gpu_ctx *ctx, void *cache, rf_type cache_type,
                                     int64_t cache_rows, const float *src, int64_t n_tokens,
                                     int64_t n, const int32_t *slot) {
    const char *op = "rf_gpu_kv_store";
    if (cache_type == RF_TYPE_Q8_0) return rf_gpu_kv_store_q8(ctx, cache, cache_rows, src, n, n_tokens, n, slot);
    RF_GPU_REQUIRE(cache_type == RF_TYPE_F16 || cache_type == RF_TYPE_F32, op,
                   "cache type %d (want f16, f32 or q8_0)", (int)cache_type);
    RF_GPU_REQUIRE(n_tokens >= 0 && n_tokens <= 65535 && n >= 1, op, "n_tokens=%lld n=%lld",
                   (long long)n_tokens, (long long)n);
    if (n_tokens == 0) return RF_OK;
    dim3 grid(cols_blocks(n), (unsigned)n_tokens);
    if (cache_type == RF_TYPE_F16)
        rf_k_kv_store<rf_half><<<grid, RF_BO_THREADS, 0, ctx->stream>>>((rf_half *)cache, src, slot,
                                                                        n, cache_rows);
    else
        rf_k_kv_store<float><<<grid, RF_BO_THREADS, 0, ctx->stream>>>((float *)cache, src, slot, n,
                                                                      cache_rows);
    return RF_GPU_LAUNCHED(ctx, "rf_k_kv_store");
}

extern "C" rf_status rf_gpu_kv_store_q8(rf_gpu_ctx *ctx, void *cache, int64_t cache_rows, const float *src,
                                        int64_t ss, int64_t n_tokens, int64_t n, const int32_t *slot) {
    const char *op = "rf_gpu_kv_store_q8";
    RF_GPU_REQUIRE(n_tokens >= 0 && n_tokens <= 65535 && n >= 32 && n % 32 == 0 && ss >= n, op,
                   "n_tokens=%lld n=%lld (a multiple of 32) stride=%lld", (long long)n_tokens, (long long)n,
                   (long long)ss);
    if (n_tokens == 0) return RF_OK;
    const dim3 grid((unsigned)((n / 32 + 7) / 8), (unsigned)n_tokens);
    rf_k_kv_store_q8<<<grid, 256, 0, ctx->stream>>>((uint8_t *)cache, src, ss, slot, n, cache_rows);
    return RF_GPU_LAUNCHED(ctx, "rf_k_kv_store_q8");
}

extern "C" rf_status rf_gpu_gather_rows(rf_gpu_ctx *ctx, float *y, const float *x,
                                        const int32_t *idx, int64_t n_idx, int64_t n) {
    RF_GPU_REQUIRE(n_idx >= 0 && n_idx <= 65535 && n >= 1, "rf_gpu_gather_rows",
                   "n_idx=%lld n=%lld", (long long)n_idx, (long long)n);
    if (n_idx == 0) return RF_OK;
    dim3 grid(cols_blocks(n), (unsigned)n_idx);
    rf_k_gather_rows<<<grid, RF_BO_THREADS, 0, ctx->stream>>>(y, x, idx, n);
    return RF_GPU_LAUNCHED(ctx, "rf_k_gather_rows");
}

extern "C" rf_status rf_gpu_add_bias(rf_gpu_ctx *ctx, float *y, const float *b, int64_t rows,
                                     int64_t n) {
    RF_GPU_REQUIRE(rows >= 0 && n >= 1, "rf_gpu_add_bias", "rows=%lld n=%lld", (long long)rows,
                   (long long)n);
    if (rows == 0) return RF_OK;
    rf_k_add_bias<<<rf_gpu_blocks(rows * n, RF_BO_THREADS), RF_BO_THREADS, 0, ctx->stream>>>(
        y, b, rows, n);
    return RF_GPU_LAUNCHED(ctx, "rf_k_add_bias");
}

extern "C" rf_status rf_gpu_softcap(rf_gpu_ctx *ctx, float *x, float cap, int64_t n) {
    RF_GPU_REQUIRE(cap > 0 && n >= 0, "rf_gpu_softcap", "cap=%g n=%lld", cap, (long long)n);
    if (n == 0) return RF_OK;
    rf_k_softcap<<<rf_gpu_blocks(n, RF_BO_THREADS), RF_BO_THREADS, 0, ctx->stream>>>(x, cap, n);
    return RF_GPU_LAUNCHED(ctx, "rf_k_softcap");
}

extern "C" rf_status rf_gpu_copy(rf_gpu_ctx *ctx, void *dst, const void *src, size_t bytes) {
    RF_GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
    return RF_OK;
}

/* The runtime answers for the calling thread's current device, which need not be ctx's: a split
 * holds a context per GPU, and a server's metrics thread asks while the engine thread steps. So
 * ctx's device is made current for the query alone and the thread's own current device is put
 * back (the current device is per host thread: the engine thread's is not touched). */
extern "C" rf_status rf_gpu_mem_info(rf_gpu_ctx *ctx, size_t *free_bytes, size_t *total_bytes) {
    int prev = -1;
    RF_GPU_CHECK(cudaGetDevice(&prev));
    if (prev != ctx->device) RF_GPU_CHECK(cudaSetDevice(ctx->device));
    const cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (prev != ctx->device) RF_GPU_CHECK(cudaSetDevice(prev));
    if (e != cudaSuccess)
        return rf_set_error(RF_ERR_DEVICE, "GPU %d: cudaMemGetInfo failed: %s", ctx->device, cudaGetErrorString(e));
    return RF_OK;
}

extern "C" rf_status rf_gpu_host_alloc(size_t bytes, void **p) {
    if (cudaMallocHost(p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return rf_set_error(RF_ERR_OOM, "pinned host buffer of %zu bytes: allocation failed", bytes);
    }
    return RF_OK;
}

extern "C" void rf_gpu_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" rf_status rf_gpu_upload_async(rf_gpu_ctx *ctx, void *d_dst, const void *src,
                                         size_t bytes) {
    RF_GPU_CHECK(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
    return RF_OK;
}

extern "C" rf_status rf_gpu_download_async(rf_gpu_ctx *ctx, void *dst, const void *d_src, size_t bytes) {
    RF_GPU_CHECK(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
    return RF_OK;
}
