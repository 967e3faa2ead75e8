/* gpu_gemm.cu — many-token products: rf_gpu_matmul dispatching on the router's choice
 * (gpu_route.c: GEMV, MMQ in gpu_mmq.cu, GEMV groups of 8 or 16, or the following), and
 * the vendor BLAS path: W dequantized to f16 and x converted to f16 (for quantized W through
 * ggml's int8 activation rounding) in the scratch arena, then cublasGemmEx with f32
 * accumulation and an f32 result. On HIP without hipBLAS (Debian) rf_gpu_gemm runs the GEMV
 * kernels in token groups of 8 (16) instead. Twin: rf_ref_matmul. */
#include <stdlib.h>

#include "core/knobs.h"
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_quant.cuh"
#include "backend/gpu/gpu_route.h"
#include "rocmforge/quant.h"

/* f32 -> f16, grid-stride; the GEMM's x operand */
__global__ void rf_k_f32_to_f16(rf_half *y, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = rf_float2half(x[i]);
}

/* x -> f16 through ggml's activation quantization (as rf_k_quantize_x and the CPU's act_q8):
 * per 32-element group, q = rint(x * 127/amax), y = q * f16(amax/127) rounded to f16. The
 * many-token product of a quantized weight then sees the activations the GEMV and the CPU see
 * (up to the f16 rounding of q*d), so a token's result hardly depends on which path the batch
 * size picked. n a multiple of 32; launch: blocks of 256 threads, one group per 32 lanes,
 * grid-stride over groups. */
__global__ void rf_k_f32_to_f16_q8(rf_half *y, const float *x, int64_t n) {
    const int lane = threadIdx.x % 32;
    for (int64_t g0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32 * 32; g0 < n;
         g0 += (int64_t)gridDim.x * blockDim.x)
        y[g0 + lane] = rf_act_q8_half(x[g0 + lane]);
}

/* y = W x for any n_tokens through the GEMV kernels, as many tokens per call as one takes (8, or
 * 16 where gemv_mt takes the type) */
static rf_status rf_gemv_groups(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                                int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const int64_t g = rf_gpu_gemv_max_tokens(ctx, wtype, n_in); /* 16 where gemv_mt takes them, else 8 */
    for (int64_t t = 0; t < n_tokens; t += g) {
        const int64_t nt = n_tokens - t < g ? n_tokens - t : g;
        const rf_status st = rf_gpu_gemv(ctx, y + t * n_out, w, wtype, x + t * n_in, nt, n_in, n_out);
        if (st) return st;
    }
    return RF_OK;
}

#if defined(RF_GPU_NO_BLAS)
extern "C" rf_status rf_gpu_gemm(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                 const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    return rf_gemv_groups(ctx, y, w, wtype, x, n_tokens, n_in, n_out); /* no BLAS in this build */
}
#else
/* y[t, o] = sum_i W[o, i] x[t, i]: in column-major terms Y^T (n_out x nt) = W (op T of the
 * n_in x n_out column-major view of row-major W) times X^T (n_in x nt, ld n_in).
 * tolerance vs rf_ref_matmul: rel. L2 < 1e-2 (f16 operands, f32 accumulation). */
extern "C" rf_status rf_gpu_gemm(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                 const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_gemm";
    RF_GPU_REQUIRE(n_tokens >= 1 && n_in >= 1 && n_out >= 1 && n_tokens <= 0x7fffffff &&
                       n_in <= 0x7fffffff && n_out <= 0x7fffffff,
                   op, "shape %lld x %lld x %lld", (long long)n_tokens, (long long)n_in,
                   (long long)n_out);
    RF_GPU_REQUIRE(rf_gpu_type_supported(wtype), op, "weight type %d has no GPU decoder", (int)wtype);
    size_t mark;
    void *tmp;
    const size_t wbytes = ((size_t)n_out * n_in * 2 + 255) & ~(size_t)255;
    rf_status st = rf_gpu_tmp(ctx, wbytes + (size_t)n_tokens * n_in * 2, &tmp, &mark);
    if (st) return st;
    rf_half *w16 = (rf_half *)tmp, *x16 = (rf_half *)((char *)tmp + wbytes);
    if (wtype == RF_TYPE_F16) {
        w16 = (rf_half *)w; /* already the operand */
    } else if ((st = rf_gpu_dequantize(ctx, w16, RF_TYPE_F16, w, wtype, n_out, n_in))) {
        ctx->scratch_used = mark;
        return st;
    }
    const int64_t nx = n_tokens * n_in;
    const bool q8 = wtype != RF_TYPE_F32 && wtype != RF_TYPE_F16 && wtype != RF_TYPE_BF16 && n_in % 32 == 0;
    if (q8) rf_k_f32_to_f16_q8<<<rf_gpu_blocks(nx, 256), 256, 0, ctx->stream>>>(x16, x, nx);
    else rf_k_f32_to_f16<<<rf_gpu_blocks(nx, 256), 256, 0, ctx->stream>>>(x16, x, nx);
    if ((st = RF_GPU_LAUNCHED(ctx, q8 ? "rf_k_f32_to_f16_q8" : "rf_k_f32_to_f16"))) {
        ctx->scratch_used = mark;
        return st;
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t bs = cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n_tokens,
                                     (int)n_in, &alpha, w16, CUDA_R_16F, (int)n_in, x16, CUDA_R_16F,
                                     (int)n_in, &beta, y, CUDA_R_32F, (int)n_out,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    ctx->scratch_used = mark;
    ctx->last_kernel = "cublasGemmEx";
    if (bs != CUBLAS_STATUS_SUCCESS) {
        /* a fault in earlier work makes cuBLAS's own launch fail: name it rather than the GEMM */
        const cudaError_t e = cudaStreamQuery(ctx->stream);
        return rf_set_error(RF_ERR_DEVICE, "%s: cublasGemmEx failed with status %d (m=%lld n=%lld "
                            "k=%lld)%s%s", op, (int)bs, (long long)n_out, (long long)n_tokens,
                            (long long)n_in, e != cudaSuccess && e != cudaErrorNotReady
                                ? "; the device reports a fault in earlier work: " : "",
                            e != cudaSuccess && e != cudaErrorNotReady ? cudaGetErrorString(e) : "");
    }
    return RF_GPU_LAUNCHED(ctx, "cublasGemmEx");
}
#endif

/* The knobs of the route (read once): RF_GPU_GEMV_MAX (default 64), RF_GPU_MMQ_MAX (96, 0 =
 * never), RF_GPU_MMQ_MIN (17); what each threshold rests on: gpu_route.c */
static void rf_route_knobs(int64_t *gemv_max, int64_t *mmq_min, int64_t *mmq_max) {
    static int64_t g = -1, lo = -1, hi = -1;
    if (g < 0) {
        hi = rf_knob_int(RF_KNOB_GPU_MMQ_MAX);
        lo = rf_knob_int(RF_KNOB_GPU_MMQ_MIN);
        if (lo < 1) lo = 1;
        g = rf_knob_int(RF_KNOB_GPU_GEMV_MAX);
    }
    *gemv_max = g, *mmq_min = lo, *mmq_max = hi;
}

/* the router's facts for this context and product (gpu_route.h) */
extern "C" rf_gpu_route_kind rf_gpu_route_for(const rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in,
                                     int64_t n_out) {
    rf_gpu_route_facts f;
    f.type = wtype, f.n_tokens = n_tokens, f.n_in = n_in, f.n_out = n_out;
    f.invariant = ctx->invariant;
    f.mmq = ctx->info.cc_major >= 8 && rf_gpu_mmq_supported(wtype, n_in);
    f.gemv = rf_gpu_gemv_supported(wtype);
    f.gemv_n = rf_gpu_gemv_max_tokens(ctx, wtype, n_in);
#if defined(RF_GPU_NO_BLAS)
    f.blas = false;
#else
    f.blas = true;
#endif
    rf_route_knobs(&f.gemv_max, &f.mmq_min, &f.mmq_max);
    /* RF_GPU_W4A16 read per call, so a test may turn it: 1 from the minimum up, 2 (auto, the
     * default) up to RF_GPU_W4A16_MAX as well */
    const int w4 = (int)rf_knob_int(RF_KNOB_GPU_W4A16);
    f.w4a16 = w4 != 0 && ctx->info.cc_major >= 8 && rf_gpu_w4a16_supported(wtype, n_in);
    f.w4a16_min = rf_knob_int(RF_KNOB_GPU_W4A16_MIN);
    f.w4a16_max = w4 == 2 ? rf_knob_int(RF_KNOB_GPU_W4A16_MAX) : 0;
    return rf_gpu_route(&f);
}

extern "C" void rf_gpu_set_batch_invariant(rf_gpu_ctx *ctx, bool on) { ctx->invariant = on; }

extern "C" bool rf_gpu_mmq_takes(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in) {
    return rf_gpu_route_for(ctx, wtype, n_tokens, n_in, 1) == RF_ROUTE_MMQ;
}

/* Whether rf_gpu_matmul (and the backend's shared-x products, which take the GEMV's rule) rounds
 * x to int8 blocks of 32 for this product: by the route, asked by the CPU twin in tests
 * (core/test_hooks.h, cpu_act). MMQ and the BLAS path of quantized weights round; the GEMVs
 * (one call or groups of 8) round where their kernel takes int8 x (rf_gpu_gemv_rounds_x: the 32-element
 * formats, K-quants where q32s takes the rows), not in the f32-x kernels; unquantized weights never. */
extern "C" bool rf_gpu_matmul_rounds_x(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in) {
    if (wtype == RF_TYPE_F32 || wtype == RF_TYPE_F16 || wtype == RF_TYPE_BF16) return false;
    switch (rf_gpu_route_for(ctx, wtype, n_tokens, n_in, 1)) {
    case RF_ROUTE_GEMV: case RF_ROUTE_GEMV_GROUPS: return rf_gpu_gemv_rounds_x(ctx, wtype, n_in);
    case RF_ROUTE_NONE: return false;
    default: return true; /* MMQ; BLAS: x through ggml's int8 rounding, then f16 */
    }
}

/* y = W x for any n_tokens: the kernel family rf_gpu_route picks */
extern "C" rf_status rf_gpu_matmul(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                   const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    switch (rf_gpu_route_for(ctx, wtype, n_tokens, n_in, n_out)) {
    case RF_ROUTE_MMQ: return rf_gpu_mmq(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    case RF_ROUTE_GEMV: return rf_gpu_gemv(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    case RF_ROUTE_GEMV_GROUPS: return rf_gemv_groups(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    case RF_ROUTE_BLAS: return rf_gpu_gemm(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    case RF_ROUTE_W4A16: return rf_gpu_w4a16(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    default:
        return rf_set_error(RF_ERR_UNSUPPORTED, "deterministic mode: no batch-invariant GPU product for %s weights with "
                            "%lld inputs (it has q4_0, q8_0, q4_K, q5_K and q6_K on sm_80 and newer); use the CPU or "
                            "leave the mode off", rf_type_name(wtype), (long long)n_in);
    }
}
