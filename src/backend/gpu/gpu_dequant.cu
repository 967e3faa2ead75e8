/* gpu_dequant.cu — dequantize whole matrices (to f32 or f16, for the GEMM path and tests) and
 * embedding lookup from quantized rows. Twin: rf_dequantize_row / rf_ref_get_rows. */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_quant.cuh"

template <typename T> static __device__ __forceinline__ T rf_out(float v);
template <> __device__ __forceinline__ float rf_out<float>(float v) { return v; }
template <> __device__ __forceinline__ rf_half rf_out<rf_half>(float v) { return rf_float2half(v); }

/* dequantize: dst[r, i] = element i of row r of src (type t; rows of row_bytes bytes)
 * in: src [n_rows] rows of n_in elements in ggml layout; out: dst T [n_rows, n_in]
 * launch: one thread per element, grid-stride; n_in a multiple of the block size
 * twin rf_dequantize_row; tolerance: f32 exact up to rounding (rel. L2 < 1e-6), f16 < 1e-3 */
template <typename T>
__global__ void rf_k_dequantize(T *dst, const uint8_t *src, int t, int64_t n_rows, int64_t n_in,
                                int64_t row_bytes, int bs, int bb) {
    const int64_t total = n_rows * n_in;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / n_in, i = e % n_in;
        const uint8_t *blk = src + r * row_bytes + (i / bs) * bb;
        dst[e] = rf_out<T>(rf_dq_elem(t, blk, (int)(i % bs)));
    }
}

/* dequantize8: rf_k_dequantize for rows of a multiple of 8 elements, one thread per 8 consecutive
 * elements (one 64-bit division per 8 elements, one 16-byte store of f16 or two of f32, so a
 * warp writes 512 contiguous bytes): the per-element kernel above spent its time in the index
 * arithmetic, and a quantized prompt step dequantizes every weight it uses. Same values. */
template <typename T>
__global__ void rf_k_dequantize8(T *dst, const uint8_t *src, int t, int64_t n_rows, int64_t n_in,
                                 int64_t row_bytes, int bs, int bb) {
    const int64_t per_row = n_in / 8, total = n_rows * per_row;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < total;
         c += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = c / per_row, i0 = (c - r * per_row) * 8;
        const uint8_t *blk = src + r * row_bytes + (i0 / bs) * bb;
        const int e0 = (int)(i0 % bs);
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = rf_dq_elem(t, blk, e0 + j);
        T *d = dst + r * n_in + i0;
        if constexpr (sizeof(T) == 2) {
            union { rf_half h[8]; uint4 u; } o;
#pragma unroll
            for (int j = 0; j < 8; j++) o.h[j] = rf_float2half(v[j]);
            *(uint4 *)d = o.u;
        } else {
            ((float4 *)d)[0] = make_float4(v[0], v[1], v[2], v[3]);
            ((float4 *)d)[1] = make_float4(v[4], v[5], v[6], v[7]);
        }
    }
}

/* get_rows: y[k, :] = dequantize(row ids[k] of W); an id outside [0, n_rows) gives NaNs.
 * in: W n_rows rows of n_in elements (type t), ids int32 [n_ids]; out: y f32 [n_ids, n_in]
 * launch: one thread per output element, grid-stride. twin rf_ref_get_rows; exact (f32). */
__global__ void rf_k_get_rows(float *y, const uint8_t *w, int t, const int32_t *ids, int64_t n_ids,
                              int64_t n_in, int64_t n_rows, int64_t row_bytes, int bs, int bb) {
    const int64_t total = n_ids * n_in;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = e / n_in, i = e % n_in;
        const int32_t id = ids[k];
        if (id < 0 || id >= n_rows) {
            y[e] = __int_as_float(0x7fc00000);
            continue;
        }
        const uint8_t *blk = w + (int64_t)id * row_bytes + (i / bs) * bb;
        y[e] = rf_dq_elem(t, blk, (int)(i % bs));
    }
}

extern "C" bool rf_gpu_type_supported(rf_type t) {
    return (int)t >= 0 && (int)t < RF_TYPE_COUNT && rf_gq_block((int)t) > 0;
}

static rf_status rf_gpu_row_bytes(const char *op, rf_type t, int64_t n_in, int64_t *rb) {
    if (!rf_gpu_type_supported(t))
        return rf_set_error(RF_ERR_UNSUPPORTED, "%s: type %d has no GPU decoder", op, (int)t);
    const int bs = rf_gq_block((int)t);
    if (n_in <= 0 || n_in % bs)
        return rf_set_error(RF_ERR_INVALID_ARG, "%s: n_in=%lld is not a positive multiple of the "
                            "block size %d", op, (long long)n_in, bs);
    *rb = n_in / bs * rf_gq_bytes((int)t);
    return RF_OK;
}

extern "C" rf_status rf_gpu_dequantize(rf_gpu_ctx *ctx, void *dst, rf_type dst_type,
                                       const void *src, rf_type type, int64_t n_rows,
                                       int64_t n_in) {
    int64_t rb;
    rf_status st = rf_gpu_row_bytes("rf_gpu_dequantize", type, n_in, &rb);
    if (st) return st;
    RF_GPU_REQUIRE(dst_type == RF_TYPE_F32 || dst_type == RF_TYPE_F16, "rf_gpu_dequantize",
                   "output type %d (want f32 or f16)", (int)dst_type);
    RF_GPU_REQUIRE(n_rows >= 0, "rf_gpu_dequantize", "n_rows=%lld", (long long)n_rows);
    const int64_t total = n_rows * n_in;
    if (total == 0) return RF_OK;
    const int bs = rf_gq_block((int)type), bb = rf_gq_bytes((int)type), ti = (int)type;
    const uint8_t *s = (const uint8_t *)src;
    if (n_in % 8 == 0 && bs % 8 == 0 && ((uintptr_t)dst & 15) == 0) {
        const int64_t chunks = total / 8;
        if (dst_type == RF_TYPE_F32)
            rf_k_dequantize8<float><<<rf_gpu_blocks(chunks, 256), 256, 0, ctx->stream>>>(
                (float *)dst, s, ti, n_rows, n_in, rb, bs, bb);
        else
            rf_k_dequantize8<rf_half><<<rf_gpu_blocks(chunks, 256), 256, 0, ctx->stream>>>(
                (rf_half *)dst, s, ti, n_rows, n_in, rb, bs, bb);
        return RF_GPU_LAUNCHED(ctx, "rf_k_dequantize8");
    }
    if (dst_type == RF_TYPE_F32) {
        float *d = (float *)dst;
        rf_k_dequantize<float><<<rf_gpu_blocks(total, 256), 256, 0, ctx->stream>>>(
            d, s, ti, n_rows, n_in, rb, bs, bb);
    } else {
        rf_half *d = (rf_half *)dst;
        rf_k_dequantize<rf_half><<<rf_gpu_blocks(total, 256), 256, 0, ctx->stream>>>(
            d, s, ti, n_rows, n_in, rb, bs, bb);
    }
    return RF_GPU_LAUNCHED(ctx, "rf_k_dequantize");
}

extern "C" rf_status rf_gpu_get_rows(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                     const int32_t *ids, int64_t n_ids, int64_t n_in,
                                     int64_t n_rows) {
    int64_t rb;
    rf_status st = rf_gpu_row_bytes("rf_gpu_get_rows", wtype, n_in, &rb);
    if (st) return st;
    RF_GPU_REQUIRE(n_ids >= 0 && n_rows >= 1, "rf_gpu_get_rows", "n_ids=%lld n_rows=%lld",
                   (long long)n_ids, (long long)n_rows);
    const int64_t total = n_ids * n_in;
    if (total == 0) return RF_OK;
    const int bs = rf_gq_block((int)wtype), bb = rf_gq_bytes((int)wtype), ti = (int)wtype;
    const uint8_t *wp = (const uint8_t *)w;
    rf_k_get_rows<<<rf_gpu_blocks(total, 256), 256, 0, ctx->stream>>>(y, wp, ti, ids, n_ids, n_in,
                                                                      n_rows, rb, bs, bb);
    return RF_GPU_LAUNCHED(ctx, "rf_k_get_rows");
}
