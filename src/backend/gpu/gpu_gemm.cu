/* gpu_gemm.cu — the vendor BLAS path of a many-token product (rf_gpu_gemm, which the router
 * in gpu_matmul.cu picks past what the GEMV groups and MMQ take): W dequantized to f16 and x
 * converted to f16 (for quantized W through ggml's int8 activation rounding) in the scratch
 * arena, then cublasGemmEx with f32 accumulation and an f32 result. On HIP without hipBLAS
 * (Debian) rf_gpu_gemm is gpu_matmul.cu's GEMV groups instead. Twin: rf_ref_matmul. */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_quant.cuh"
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

#if !defined(RF_GPU_NO_BLAS)
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
