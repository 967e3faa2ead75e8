/* gpu_gemm.cu — many-token products: which path a product of n tokens takes (rf_gpu_matmul: GEMV,
 * MMQ in gpu_mmq.cu, GEMV groups of 8, or the following), and
 * the vendor BLAS path: W dequantized to f16 and x converted to f16 (for quantized W through
 * ggml's int8 activation rounding) in the scratch arena, then cublasGemmEx with f32
 * accumulation and an f32 result. On HIP without hipBLAS (Debian) rf_gpu_gemm runs the GEMV
 * kernels in token groups of 8 instead. Twin: rf_ref_matmul. */
#include <stdlib.h>

#include "core/knobs.h"
#include "backend/gpu/gpu_internal.h"
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
         g0 += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[g0 + lane];
        float amax = fabsf(v);
        for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, RF_SHFL_XOR(amax, m)); /* m < 32: within the group on wave32 and wave64 */
        const float d32 = amax / 127.0f, d16 = __half2float(__float2half(d32));
        const float d = d16 <= 65504.0f ? d16 : d32; /* f16 would overflow: keep f32 */
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        y[g0 + lane] = rf_float2half((float)__float2int_rn(v * id) * d);
    }
}

/* y = W x for any n_tokens through the GEMV kernels, up to 8 tokens per call */
static rf_status rf_gemv_groups(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                                int64_t n_tokens, int64_t n_in, int64_t n_out) {
    for (int64_t t = 0; t < n_tokens; t += 8) {
        const int64_t nt = n_tokens - t < 8 ? n_tokens - t : 8;
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

/* The most tokens a quantized product takes through the GEMV kernels in groups of 8 (env
 * RF_GPU_GEMV_MAX, default 64) before the dequantize + BLAS path. A decode step of 9..64
 * sequences reads each quantized weight once per 8 tokens (the later groups largely from L2,
 * the products of one weight running back to back), where the BLAS path writes and reads the
 * whole weight as f16 every step: on an H100, llama3-8b Q4_0 at 32 sequences took 49 ms per
 * step that way (docs/PERFORMANCE.md). */
static int64_t rf_gemv_max_tokens(void) {
    static int64_t v = -1;
    if (v < 0) {
        v = rf_knob_int(RF_KNOB_GPU_GEMV_MAX);
    }
    return v;
}

/* The most tokens a product takes through MMQ (rf_gpu_mmq: the weight read once per 64 tokens
 * on the int8 tensor cores) where the type has it, before the paths below (env RF_GPU_MMQ_MAX,
 * 0 = never). Default 128: on the H100 MMQ beat dequantize + cuBLAS at 128 tokens in every
 * shape measured (Q4_0 4096x4096 33 vs 52 us, 28672x4096 183 vs 297, Q6_K 128256x4096 1462
 * vs 1712), and lost at 512 (1.7-2.7x slower); docs/perf-gpu.md, "MMQ". */
static int64_t rf_mmq_max_tokens(void) {
    static int64_t v = -1;
    if (v < 0) {
        v = rf_knob_int(RF_KNOB_GPU_MMQ_MAX);
    }
    return v;
}

/* The fewest tokens a product takes through MMQ (env RF_GPU_MMQ_MIN, default 5: 1-4 tokens keep
 * the GEMVs and their shared, fused activation quantization). H100, llama3-8b Q4_0 decode,
 * 2026-11-28: 8 sequences 6.52 -> 6.11 ms a step with MMQ from 5 (1,213 -> 1,293 tok/s); from 2,
 * 2 and 4 sequences lost (3.34 -> 6.00 and 5.27 -> 6.07 ms). test_gpu_mmq checks 1..512 tokens. */
static int64_t rf_mmq_min_tokens(void) {
    static int64_t v = -1;
    if (v < 0) {
        v = rf_knob_int(RF_KNOB_GPU_MMQ_MIN);
        if (v < 1) v = 1;
    }
    return v;
}

extern "C" void rf_gpu_set_batch_invariant(rf_gpu_ctx *ctx, bool on) { ctx->invariant = on; }

extern "C" bool rf_gpu_mmq_takes(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in) {
    if (ctx->invariant) return n_tokens >= 1 && ctx->info.cc_major >= 8 && rf_gpu_mmq_supported(wtype, n_in);
    return n_tokens >= rf_mmq_min_tokens() && n_tokens <= rf_mmq_max_tokens() && ctx->info.cc_major >= 8 &&
           rf_gpu_mmq_supported(wtype, n_in);
}

/* Whether rf_gpu_matmul (and the backend's shared-x products, which take the GEMV's rule) rounds
 * x to int8 blocks of 32 for this product: the path choice below, asked by the CPU twin in tests
 * (core/test_hooks.h, cpu_act). MMQ, the int8-x GEMVs and the BLAS path of quantized weights
 * round; the f32-x GEMVs (K-quants where q32s does not take the rows, the generic kernel) and
 * unquantized weights do not. */
extern "C" bool rf_gpu_matmul_rounds_x(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in) {
    if (wtype == RF_TYPE_F32 || wtype == RF_TYPE_F16 || wtype == RF_TYPE_BF16) return false;
    if (rf_gpu_mmq_takes(ctx, wtype, n_tokens, n_in)) return true;
    if (n_tokens <= 8 || (rf_gpu_gemv_supported(wtype) && n_tokens <= rf_gemv_max_tokens()))
        return rf_gpu_gemv_has_xq(ctx, wtype, 1, n_in); /* the GEMV's rule (groups of 8 alike) */
    return true; /* BLAS: x through ggml's int8 rounding, then f16 */
}

extern "C" rf_status rf_gpu_matmul(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                   const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    if (rf_gpu_mmq_takes(ctx, wtype, n_tokens, n_in)) return rf_gpu_mmq(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    if (ctx->invariant)
        return rf_set_error(RF_ERR_UNSUPPORTED, "deterministic mode: no batch-invariant GPU product for %s weights with "
                            "%lld inputs (it has q4_0, q8_0, q4_K, q5_K and q6_K on sm_80 and newer); use the CPU or "
                            "leave the mode off", rf_type_name(wtype), (long long)n_in);
    if (n_tokens <= 8) return rf_gpu_gemv(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    const bool quantized = wtype != RF_TYPE_F16 && wtype != RF_TYPE_BF16 && wtype != RF_TYPE_F32;
    if (quantized && rf_gpu_gemv_supported(wtype) && n_tokens <= rf_gemv_max_tokens())
        return rf_gemv_groups(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    return rf_gpu_gemm(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
}
