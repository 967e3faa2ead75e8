/* gpu_sample.cu — the sampler on the device: greedy, temperature, top-k, min-p, top-p and a
 * seeded draw, one block per sequence, one int32 per sequence back to the host. It picks the
 * token rf_ref_sample would pick for the same u (u from a counter-based generator the host can
 * recompute: rf_gpu_sample_u). Sorting is replaced by bisection over a 64-bit order key, so
 * each cut (top-k, top-p, the draw) is a few dozen block reductions over the vocabulary. */
#include "backend/gpu/gpu_internal.h"

#define RF_SAMPLE_THREADS 1024

static __host__ __device__ inline float rf_sample_u_impl(uint64_t seed, uint64_t step, int64_t seq) {
    uint64_t z = (seed ^ (0x9E3779B97F4A7C15ull * (step + 1))) + (uint64_t)seq;
    z += 0x9E3779B97F4A7C15ull; /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) * (1.0 / 16777216.0));
}

extern "C" float rf_gpu_sample_u(uint64_t seed, uint64_t step, int64_t seq) {
    return rf_sample_u_impl(seed, step, seq);
}

/* Descending order of (value, then lower id) as one unsigned number: the float's order bits
 * above, (idmax - id) below. NaN is handled by the caller (never a candidate). */
static __device__ __forceinline__ uint64_t rf_order_key(float v, int64_t id, int ib) {
    uint32_t b = __float_as_uint(v);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)b << ib) | (uint64_t)(((1ll << ib) - 1) - id);
}

struct rf_sample_dev {
    float temperature, top_p, min_p;
    int32_t top_k;
    float u; /* < 0: draw from (seed, step, row) */
};

/* Block-wide reduction of a double-precision-free pair of sums: count (float, exact < 2^24)
 * or mass. Uses rf_block_sum (contains barriers: every thread must call). */

/* sample: out[s] = rf_ref_sample(logits[s, :], params[s], u(seed, step, s)).
 * in: logits f32 [n_seq, n_vocab]; params [n_seq]. out: int32 [n_seq] (device).
 * launch: one block of RF_SAMPLE_THREADS threads per sequence. tolerance: the same token as the
 * CPU twin except where u lies within f32 rounding of a cumulative-probability boundary. */
__global__ void __launch_bounds__(RF_SAMPLE_THREADS)
rf_k_sample(int32_t *out, const float *logits, int64_t n, const rf_sample_dev *params,
            uint64_t seed, uint64_t step, int ib) {
    __shared__ float sh[1024 / 32];
    __shared__ int64_t sh_idx[1024 / 32];
    const int64_t s = blockIdx.x;
    const float *x = logits + s * n;
    const rf_sample_dev P = params[s];
    const int tid = threadIdx.x, lane = tid % RF_WARP_SIZE, warp = tid / RF_WARP_SIZE;
    const int nw = blockDim.x / RF_WARP_SIZE;
    const uint64_t idmask = (1ull << ib) - 1;

    /* best order key among non-NaN entries (argmax with lowest id on ties) */
    uint64_t best = 0;
    bool any = false;
    for (int64_t i = tid; i < n; i += blockDim.x) {
        const float v = x[i];
        if (v != v) continue;
        const uint64_t c = rf_order_key(v, i, ib);
        if (!any || c > best) best = c, any = true;
    }
    /* block max of best (0 = none) via shuffles on two 32-bit halves */
    {
        uint64_t b = any ? best : 0;
        for (int m = RF_WARP_SIZE / 2; m > 0; m >>= 1) {
            uint32_t hi = RF_SHFL_XOR((uint32_t)(b >> 32), m), lo = RF_SHFL_XOR((uint32_t)b, m);
            const uint64_t o = ((uint64_t)hi << 32) | lo;
            if (o > b) b = o;
        }
        if (lane == 0) sh_idx[warp] = (int64_t)b;
        __syncthreads();
        b = 0;
        for (int w = 0; w < nw; w++)
            if ((uint64_t)sh_idx[w] > b) b = (uint64_t)sh_idx[w];
        best = b;
        __syncthreads();
    }
    if (best == 0) { /* all NaN */
        if (tid == 0) out[s] = -1;
        return;
    }
    const int64_t best_id = (int64_t)(idmask - (best & idmask));
    if (P.temperature <= 0.0f) {
        if (tid == 0) out[s] = (int32_t)best_id;
        return;
    }
    const float lmax = x[best_id] / P.temperature; /* division, as the CPU twin */
    if (lmax == INFINITY || lmax == -INFINITY) {
        if (tid == 0) out[s] = (int32_t)best_id;
        return;
    }

    /* count of valid entries; top-k threshold ck (keep c >= ck) */
    float cnt = 0.0f;
    for (int64_t i = tid; i < n; i += blockDim.x) cnt += x[i] == x[i] ? 1.0f : 0.0f;
    const float m_valid = rf_block_sum(cnt, sh);
    uint64_t ck = 0;
    if (P.top_k > 0 && (float)P.top_k < m_valid) {
        uint64_t prefix = 0;
        for (int bit = 31 + ib; bit >= 0; bit--) {
            const uint64_t cand = prefix | (1ull << bit);
            float c = 0.0f;
            for (int64_t i = tid; i < n; i += blockDim.x) {
                const float v = x[i];
                if (v == v && rf_order_key(v / P.temperature, i, ib) >= cand) c += 1.0f;
            }
            if (rf_block_sum(c, sh) >= (float)P.top_k) prefix = cand;
        }
        ck = prefix;
    }
    /* kept(i): valid, c >= ck, and p >= min_p (p = e^(l - lmax), so p_max = 1) */
#define RF_P(i, v) __expf((v) / P.temperature - lmax)
#define RF_KEPT(i, v, c, p) ((v) == (v) && (c) >= ck && (P.min_p <= 0.0f || (p) >= P.min_p))
    float tot = 0.0f;
    for (int64_t i = tid; i < n; i += blockDim.x) {
        const float v = x[i];
        if (v != v) continue;
        if (rf_order_key(v / P.temperature, i, ib) >= ck) tot += RF_P(i, v);
    }
    const float total_k = rf_block_sum(tot, sh); /* the mass top_p is measured against */
    float m2 = 0.0f;
    for (int64_t i = tid; i < n; i += blockDim.x) {
        const float v = x[i];
        if (v != v) continue;
        const float p = RF_P(i, v);
        if (RF_KEPT(i, v, rf_order_key(v / P.temperature, i, ib), p)) m2 += p;
    }
    const float mass2 = rf_block_sum(m2, sh);
    uint64_t cp = 0;
    if (P.top_p < 1.0f && mass2 >= P.top_p * total_k) {
        const float target = P.top_p * total_k;
        uint64_t prefix = 0;
        for (int bit = 31 + ib; bit >= 0; bit--) {
            const uint64_t cand = prefix | (1ull << bit);
            float mm = 0.0f;
            for (int64_t i = tid; i < n; i += blockDim.x) {
                const float v = x[i];
                if (v != v) continue;
                const uint64_t c = rf_order_key(v / P.temperature, i, ib);
                const float p = RF_P(i, v);
                if (c >= cand && RF_KEPT(i, v, c, p)) mm += p;
            }
            if (rf_block_sum(mm, sh) >= target) prefix = cand;
        }
        cp = prefix;
    }
    /* final mass and the draw: the first entry (descending) whose cumulative mass > u * total */
    float m3 = 0.0f;
    for (int64_t i = tid; i < n; i += blockDim.x) {
        const float v = x[i];
        if (v != v) continue;
        const uint64_t c = rf_order_key(v / P.temperature, i, ib);
        const float p = RF_P(i, v);
        if (c >= cp && RF_KEPT(i, v, c, p)) m3 += p;
    }
    const float total3 = rf_block_sum(m3, sh);
    const float target = (P.u >= 0.0f ? P.u : rf_sample_u_impl(seed, step, s)) * total3;
    uint64_t prefix = 0;
    for (int bit = 31 + ib; bit >= 0; bit--) {
        const uint64_t cand = prefix | (1ull << bit);
        float mm = 0.0f;
        for (int64_t i = tid; i < n; i += blockDim.x) {
            const float v = x[i];
            if (v != v) continue;
            const uint64_t c = rf_order_key(v / P.temperature, i, ib);
            const float p = RF_P(i, v);
            if (c >= cand && c >= cp && RF_KEPT(i, v, c, p)) mm += p;
        }
        if (rf_block_sum(mm, sh) > target) prefix = cand;
    }
    if (prefix == 0) { /* rounding: nothing exceeded the target; take the last kept entry */
        uint64_t lo = ~0ull;
        for (int64_t i = tid; i < n; i += blockDim.x) {
            const float v = x[i];
            if (v != v) continue;
            const uint64_t c = rf_order_key(v / P.temperature, i, ib);
            if (c >= cp && RF_KEPT(i, v, c, RF_P(i, v)) && c < lo) lo = c;
        }
        for (int m = RF_WARP_SIZE / 2; m > 0; m >>= 1) {
            uint32_t hi = RF_SHFL_XOR((uint32_t)(lo >> 32), m), l2 = RF_SHFL_XOR((uint32_t)lo, m);
            const uint64_t o = ((uint64_t)hi << 32) | l2;
            if (o < lo) lo = o;
        }
        if (lane == 0) sh_idx[warp] = (int64_t)lo;
        __syncthreads();
        lo = ~0ull;
        for (int w = 0; w < nw; w++)
            if ((uint64_t)sh_idx[w] < lo) lo = (uint64_t)sh_idx[w];
        prefix = lo;
    }
#undef RF_P
#undef RF_KEPT
    if (tid == 0) out[s] = (int32_t)(idmask - (prefix & idmask));
}

extern "C" rf_status rf_gpu_sample(rf_gpu_ctx *ctx, int32_t *out, const float *logits,
                                   int64_t n_seq, int64_t n_vocab, const rf_sample_params *params,
                                   uint64_t seed, uint64_t step) {
    const char *op = "rf_gpu_sample";
    RF_GPU_REQUIRE(n_seq >= 0 && n_seq <= 65535, op, "n_seq=%lld", (long long)n_seq);
    RF_GPU_REQUIRE(n_vocab >= 1 && n_vocab < (1ll << 31), op, "n_vocab=%lld", (long long)n_vocab);
    if (n_seq == 0) return RF_OK;
    int ib = 1;
    while ((1ll << ib) <= n_vocab) ib++;
    size_t mark;
    void *tmp;
    const size_t pbytes = (size_t)n_seq * sizeof(rf_sample_dev);
    rf_status st = rf_gpu_tmp(ctx, pbytes + 256 + (size_t)n_seq * sizeof(int32_t), &tmp, &mark);
    if (st) return st;
    rf_sample_dev *host = (rf_sample_dev *)malloc(pbytes);
    if (!host) {
        ctx->scratch_used = mark;
        return rf_set_error(RF_ERR_OOM, "%s: host memory", op);
    }
    for (int64_t i = 0; i < n_seq; i++) {
        host[i].temperature = params ? params[i].temperature : 0.0f;
        host[i].top_k = params ? params[i].top_k : 0;
        host[i].top_p = params ? params[i].top_p : 1.0f;
        host[i].min_p = params ? params[i].min_p : 0.0f;
        host[i].u = -1.0f;
    }
    rf_sample_dev *dp = (rf_sample_dev *)tmp;
    int32_t *dout = (int32_t *)((char *)tmp + ((pbytes + 255) & ~(size_t)255));
    cudaError_t e = cudaMemcpyAsync(dp, host, pbytes, cudaMemcpyHostToDevice, ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream); /* host buffer is freed next */
    free(host);
    if (e != cudaSuccess) {
        ctx->scratch_used = mark;
        return rf_set_error(RF_ERR_DEVICE, "%s: parameter upload failed: %s", op, cudaGetErrorString(e));
    }
    rf_k_sample<<<(unsigned)n_seq, RF_SAMPLE_THREADS, 0, ctx->stream>>>(dout, logits, n_vocab, dp,
                                                                       seed, step, ib);
    st = RF_GPU_LAUNCHED(ctx, "rf_k_sample");
    if (!st) st = rf_gpu_download(ctx, out, dout, (size_t)n_seq * sizeof(int32_t));
    ctx->scratch_used = mark;
    return st;
}

/* penalize: for each row r of logits [n_rows, n_vocab] and each of its penalty entries
 * (ids[k], counts[k]) for k in [off[r], off[r] + cnt[r]): v = logit; v = v > 0 ? v / rep : v * rep;
 * v -= count * freq + pres (rf_sampler's rule, each distinct id once). In place.
 * launch: one block per row, threads over its entries (ids are distinct within a row). exact. */
__global__ void rf_k_penalize(float *logits, int64_t n_vocab, const rf_gpu_sample_row *rows,
                              const int32_t *ids, const int32_t *counts) {
    const rf_gpu_sample_row R = rows[blockIdx.x];
    float *x = logits + (int64_t)blockIdx.x * n_vocab;
    for (int k = threadIdx.x; k < R.pen_n; k += blockDim.x) {
        const int32_t id = ids[R.pen_off + k];
        if (id < 0 || id >= n_vocab) continue;
        float v = x[id];
        v = v > 0 ? v / R.repeat_penalty : v * R.repeat_penalty;
        v -= (float)counts[R.pen_off + k] * R.frequency_penalty + R.presence_penalty;
        x[id] = v;
    }
}

/* rows_to_params: the sample kernel's parameter records from the row records (device). */
__global__ void rf_k_sample_params(rf_sample_dev *p, const rf_gpu_sample_row *rows, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    p[i].temperature = rows[i].temperature;
    p[i].top_k = rows[i].top_k;
    p[i].top_p = rows[i].top_p;
    p[i].min_p = rows[i].min_p;
    p[i].u = rows[i].u;
}

extern "C" rf_status rf_gpu_sample_rows(rf_gpu_ctx *ctx, int32_t *d_out, float *logits, int64_t n_rows,
                                        int64_t n_vocab, const rf_gpu_sample_row *d_rows,
                                        const int32_t *d_pen_ids, const int32_t *d_pen_counts,
                                        bool any_penalty) {
    const char *op = "rf_gpu_sample_rows";
    RF_GPU_REQUIRE(n_rows >= 0 && n_rows <= 65535, op, "n_rows=%lld", (long long)n_rows);
    RF_GPU_REQUIRE(n_vocab >= 1 && n_vocab < (1ll << 31), op, "n_vocab=%lld", (long long)n_vocab);
    if (n_rows == 0) return RF_OK;
    rf_status st;
    if (any_penalty) {
        rf_k_penalize<<<(unsigned)n_rows, 128, 0, ctx->stream>>>(logits, n_vocab, d_rows, d_pen_ids,
                                                                d_pen_counts);
        if ((st = RF_GPU_LAUNCHED(ctx, "rf_k_penalize"))) return st;
    }
    int ib = 1;
    while ((1ll << ib) <= n_vocab) ib++;
    size_t mark;
    void *tmp;
    if ((st = rf_gpu_tmp(ctx, (size_t)n_rows * sizeof(rf_sample_dev), &tmp, &mark))) return st;
    rf_sample_dev *dp = (rf_sample_dev *)tmp;
    rf_k_sample_params<<<(unsigned)((n_rows + 127) / 128), 128, 0, ctx->stream>>>(dp, d_rows, n_rows);
    if (!(st = RF_GPU_LAUNCHED(ctx, "rf_k_sample_params"))) {
        rf_k_sample<<<(unsigned)n_rows, RF_SAMPLE_THREADS, 0, ctx->stream>>>(d_out, logits, n_vocab, dp, 0,
                                                                            0, ib);
        st = RF_GPU_LAUNCHED(ctx, "rf_k_sample");
    }
    ctx->scratch_used = mark;
    return st;
}

extern "C" rf_status rf_gpu_bench_sample(rf_gpu_ctx *ctx, const float *logits, int64_t n_seq,
                                         int64_t n_vocab, const rf_sample_params *params, int reps,
                                         double *us_per_call) {
    if (n_seq < 1 || n_seq > 65535 || reps < 1 || !params)
        return rf_set_error(RF_ERR_INVALID_ARG, "bench sample: n_seq %lld reps %d", (long long)n_seq, reps);
    rf_gpu_sample_row *h = (rf_gpu_sample_row *)calloc((size_t)n_seq, sizeof *h);
    if (!h) return rf_set_error(RF_ERR_OOM, "bench sample: host memory");
    for (int64_t i = 0; i < n_seq; i++) {
        h[i].temperature = params->temperature, h[i].top_k = params->top_k;
        h[i].top_p = params->top_p, h[i].min_p = params->min_p, h[i].u = 0.5f;
        h[i].repeat_penalty = 1.0f;
    }
    void *buf;
    const size_t rb = (size_t)n_seq * sizeof *h;
    rf_status st = rf_gpu_alloc(ctx, rb + 256 + (size_t)n_seq * 4, &buf);
    if (!st) st = rf_gpu_upload(ctx, buf, h, rb);
    free(h);
    if (st) return st;
    int32_t *dout = (int32_t *)((char *)buf + ((rb + 255) & ~(size_t)255));
    cudaEvent_t e0, e1;
    RF_GPU_CHECK(cudaEventCreate(&e0));
    RF_GPU_CHECK(cudaEventCreate(&e1));
    for (int r = 0; r < 10 && !st; r++)
        st = rf_gpu_sample_rows(ctx, dout, (float *)logits, n_seq, n_vocab, (const rf_gpu_sample_row *)buf,
                                NULL, NULL, false);
    cudaEventRecord(e0, ctx->stream);
    for (int r = 0; r < reps && !st; r++)
        st = rf_gpu_sample_rows(ctx, dout, (float *)logits, n_seq, n_vocab, (const rf_gpu_sample_row *)buf,
                                NULL, NULL, false);
    cudaEventRecord(e1, ctx->stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (!st) st = rf_gpu_sync(ctx);
    *us_per_call = (double)ms * 1e3 / reps;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    rf_gpu_free(ctx, buf);
    return st;
}
