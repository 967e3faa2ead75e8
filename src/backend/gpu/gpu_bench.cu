/* gpu_bench.cu — measurement helpers for the GPU micro-benchmark (tests/bench/gpu_bench.c) and
 * `rocmforge bench`: the device's own read bandwidth (16-byte loads over a buffer far larger
 * than L2) and the time of one quantized GEMV, rotating among enough weight matrices that L2
 * cannot hold them, replayed from a CUDA/HIP graph so launch gaps do not count. */
#include "core/knobs.h"
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_quant.cuh"

#include <stdlib.h>

#if defined(RF_HIP)
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphDestroy hipGraphDestroy
#define RF_GRAPH_INSTANTIATE(e, g) hipGraphInstantiate((e), (g), NULL, NULL, 0)
#else
#define RF_GRAPH_INSTANTIATE(e, g) cudaGraphInstantiate((e), (g), 0)
#endif

/* read_bw: every thread sums its 16-byte words (4 loads in flight), one xor per block is kept so
 * the loads cannot be removed. launch: grid-stride, any grid. */
__global__ void rf_k_read_bw(const uint4 *p, int64_t n, unsigned *sink) {
    unsigned acc = 0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
               d.z ^ d.w;
    }
    for (; i < n; i += stride) acc ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
    if (acc == 0x9E3779B9u) sink[0] = acc; /* practically never true; keeps the loads */
}

/* fill: pseudo-random bytes (a hash of the index), f16 scale fields of quant blocks left random:
 * timings do not depend on values. */
__global__ void rf_k_fill_hash(uint32_t *p, int64_t n, uint32_t salt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 0x9E3779B1u ^ salt;
        z ^= z >> 15, z *= 0x2C1B3C6Du, z ^= z >> 12, z *= 0x297A2D39u, z ^= z >> 15;
        /* keep f16/bf16 and scale bytes finite: clear the exponent's top bit of each half */
        p[i] = z & 0xBFFFBFFFu;
    }
}

static int rf_cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median of `reps` timings (ms) of read passes over `bytes`; returns GB/s (1e9 bytes/s). */
extern "C" rf_status rf_gpu_bench_read_bw(rf_gpu_ctx *ctx, size_t bytes, int reps, double *gbps) {
    void *buf;
    rf_status st = rf_gpu_alloc(ctx, bytes + 64, &buf);
    if (st) return st;
    unsigned *sink = (unsigned *)((char *)buf + bytes);
    const int64_t n4 = (int64_t)(bytes / 16);
    rf_k_fill_hash<<<1024, 256, 0, ctx->stream>>>((uint32_t *)buf, (int64_t)(bytes / 4), 1u);
    cudaEvent_t e0, e1;
    RF_GPU_CHECK(cudaEventCreate(&e0));
    RF_GPU_CHECK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * (reps > 0 ? reps : 1));
    const unsigned grid = (unsigned)ctx->info.sm_count * 8;
    for (int r = -2; r < reps; r++) {
        cudaEventRecord(e0, ctx->stream);
        rf_k_read_bw<<<grid, 256, 0, ctx->stream>>>((const uint4 *)buf, n4, sink);
        cudaEventRecord(e1, ctx->stream);
        cudaEventSynchronize(e1);
        if (r >= 0) cudaEventElapsedTime(&ms[r], e0, e1);
    }
    st = rf_gpu_sync(ctx);
    qsort(ms, reps, sizeof(float), rf_cmp_float);
    *gbps = (double)bytes / (ms[reps / 2] * 1e-3) / 1e9;
    free(ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    rf_gpu_free(ctx, buf);
    return st;
}

/* Median time (microseconds) of one rf_gpu_gemv(type, n_tokens, n_in, n_out) call (xq: of one
 * rf_gpu_gemv_xq call on an x quantized once before), with the weights rotating among enough
 * matrices to exceed min_bytes (pass >= 4x L2); calls are captured into a graph of `per_graph`
 * (>= 64, or RF_BENCH_CALLS) calls and the graph replayed `reps` times. */
extern "C" rf_status rf_gpu_bench_gemv(rf_gpu_ctx *ctx, rf_type type, int64_t n_tokens,
                                       int64_t n_in, int64_t n_out, size_t min_bytes, int reps,
                                       bool xq, double *us_per_call, size_t *weight_bytes) {
    const int bs = rf_gq_block((int)type), bb = rf_gq_bytes((int)type);
    if (!bs || n_in % bs)
        return rf_set_error(RF_ERR_INVALID_ARG, "bench gemv: type %d n_in %lld", (int)type,
                            (long long)n_in);
    const size_t mbytes = (size_t)(n_in / bs * bb) * (size_t)n_out;
    int nmat = (int)((min_bytes + mbytes - 1) / mbytes);
    if (nmat < 2) nmat = 2;
    if (nmat > 512) nmat = 512;
    void **w = (void **)calloc(nmat, sizeof(void *));
    float *x = NULL, *y = NULL;
    void *xqb = NULL;
    rf_status st = RF_OK;
    for (int i = 0; i < nmat && !st; i++) {
        st = rf_gpu_alloc(ctx, mbytes, &w[i]);
        if (!st) {
            rf_k_fill_hash<<<1024, 256, 0, ctx->stream>>>((uint32_t *)w[i], (int64_t)(mbytes / 4),
                                                           (uint32_t)i * 77u + 5u);
            st = RF_GPU_LAUNCHED(ctx, "rf_k_fill_hash");
        }
    }
    if (!st) st = rf_gpu_alloc(ctx, (size_t)n_tokens * n_in * 4, (void **)&x);
    if (!st) st = rf_gpu_alloc(ctx, (size_t)n_tokens * n_out * 4, (void **)&y);
    if (!st) st = rf_gpu_memset(ctx, x, 0, (size_t)n_tokens * n_in * 4);
    if (!st) st = rf_gpu_scratch_reserve(ctx, (size_t)n_tokens * n_in * 2 + 65536);
    if (!st && xq) st = rf_gpu_alloc(ctx, rf_gpu_xq_bytes(n_tokens, n_in), &xqb);
    if (!st && xq) st = rf_gpu_quantize_x(ctx, xqb, type, x, n_tokens, n_in);
    /* one call: the whole product, or the product kernel alone on the quantized x */
    auto call = [&](int i) {
        return xq ? rf_gpu_gemv_xq(ctx, y, w[i % nmat], type, xqb, n_tokens, n_in, n_out)
                  : rf_gpu_gemv(ctx, y, w[i % nmat], type, x, n_tokens, n_in, n_out);
    };
    /* warm-up outside the graph (also checks the call works) */
    for (int i = 0; i < nmat && !st; i++) st = call(i);
    if (!st) st = rf_gpu_sync(ctx);
    /* >= 64 calls per graph (the method of every recorded run); RF_BENCH_CALLS sets another
     * minimum, to see how the figures depend on it (H100, 256 calls: the small products lose
     * 2-3 points, the whole calls gain 1-2; docs/perf-gpu.md, session 7) */
    const int minc = (int)rf_knob_int(RF_KNOB_BENCH_CALLS);
    const int per_graph = nmat > minc ? nmat : ((minc + nmat - 1) / nmat) * nmat;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (!st) {
        cudaError_t e = cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal);
        if (e != cudaSuccess) st = rf_set_error(RF_ERR_DEVICE, "bench: capture: %s", cudaGetErrorString(e));
        for (int i = 0; i < per_graph && !st; i++) st = call(i);
        if (e == cudaSuccess) {
            cudaError_t e2 = cudaStreamEndCapture(ctx->stream, &graph);
            if (!st && e2 != cudaSuccess)
                st = rf_set_error(RF_ERR_DEVICE, "bench: end capture: %s", cudaGetErrorString(e2));
        }
        if (!st && RF_GRAPH_INSTANTIATE(&exec, graph) != cudaSuccess)
            st = rf_set_error(RF_ERR_DEVICE, "bench: graph instantiate failed");
    }
    if (!st) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        float *ms = (float *)malloc(sizeof(float) * reps);
        for (int r = -2; r < reps; r++) {
            cudaEventRecord(e0, ctx->stream);
            cudaGraphLaunch(exec, ctx->stream);
            cudaEventRecord(e1, ctx->stream);
            cudaEventSynchronize(e1);
            if (r >= 0) cudaEventElapsedTime(&ms[r], e0, e1);
        }
        st = rf_gpu_sync(ctx);
        qsort(ms, reps, sizeof(float), rf_cmp_float);
        *us_per_call = ms[reps / 2] * 1e3 / per_graph;
        *weight_bytes = mbytes;
        free(ms);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    for (int i = 0; i < nmat; i++) rf_gpu_free(ctx, w[i]);
    free(w);
    rf_gpu_free(ctx, x);
    rf_gpu_free(ctx, y);
    if (xqb) rf_gpu_free(ctx, xqb);
    return st;
}

/* Median time (ms) of one rf_gpu_gemm call (dequantize to f16 + GemmEx) for n_tokens x n_in x
 * n_out, with `reps` timed calls after two warm-ups. */
extern "C" rf_status rf_gpu_bench_gemm(rf_gpu_ctx *ctx, rf_type type, int64_t n_tokens,
                                       int64_t n_in, int64_t n_out, int reps, double *ms_per_call) {
    const int bs = rf_gq_block((int)type), bb = rf_gq_bytes((int)type);
    if (!bs || n_in % bs) return rf_set_error(RF_ERR_INVALID_ARG, "bench gemm: bad type/shape");
    const size_t mbytes = (size_t)(n_in / bs * bb) * (size_t)n_out;
    void *w = NULL;
    float *x = NULL, *y = NULL;
    rf_status st = rf_gpu_alloc(ctx, mbytes, &w);
    if (!st) {
        rf_k_fill_hash<<<1024, 256, 0, ctx->stream>>>((uint32_t *)w, (int64_t)(mbytes / 4), 9u);
        st = RF_GPU_LAUNCHED(ctx, "rf_k_fill_hash");
    }
    if (!st) st = rf_gpu_alloc(ctx, (size_t)n_tokens * n_in * 4, (void **)&x);
    if (!st) st = rf_gpu_alloc(ctx, (size_t)n_tokens * n_out * 4, (void **)&y);
    if (!st) st = rf_gpu_memset(ctx, x, 0, (size_t)n_tokens * n_in * 4);
    float *ms = (float *)malloc(sizeof(float) * reps);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int r = -2; r < reps && !st; r++) {
        cudaEventRecord(e0, ctx->stream);
        st = rf_gpu_gemm(ctx, y, w, type, x, n_tokens, n_in, n_out);
        cudaEventRecord(e1, ctx->stream);
        cudaEventSynchronize(e1);
        if (r >= 0) cudaEventElapsedTime(&ms[r], e0, e1);
    }
    if (!st) st = rf_gpu_sync(ctx);
    if (!st) {
        qsort(ms, reps, sizeof(float), rf_cmp_float);
        *ms_per_call = ms[reps / 2];
    }
    free(ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    rf_gpu_free(ctx, w);
    rf_gpu_free(ctx, x);
    rf_gpu_free(ctx, y);
    return st;
}
