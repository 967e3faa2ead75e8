/* gpu_dequant.cu — dequantize whole matrices (to f32 or f16, for the GEMM path and tests) and
 * embedding lookup from quantized rows. Twin: rf_dequantize_row / rf_ref_get_rows. */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_quant.cuh"

template <typename T> static __device__ __forceinline__ T rf_out(float v);
template <> __device__ __forceinline__ float rf_out<float>(float v) { return v; }
template <> __device__ __forceinline__ rf_half rf_out<rf_half>(float v) { return rf_float2half(v); }

/* 8 floats to 16-byte aligned d: one 16-byte store of f16, or two of f32 */
template <typename T> static __device__ __forceinline__ void rf_st8(T *d, const float *v) {
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
        rf_st8(dst + r * n_in + i0, v);
    }
}

/* 8 consecutive elements e0 .. e0 + 7 of one block of type QT (e0 a multiple of 8), rf_dq_elem's
 * values. Q4_0 / Q8_0 read their 8 quant bytes as 4 aligned 16-bit words (blocks sit at 2-byte
 * boundaries) and the scale once; Q4_K / Q5_K / Q6_K decode their sub-block's scale (and min)
 * once for the 8; the other types let the compiler fold rf_dq_elem's switch. */
template <int QT> static __device__ __forceinline__ void rf_dq8(const uint8_t *b, int e0, float *v) {
    if constexpr (QT == RF_TYPE_Q4_0 || QT == RF_TYPE_Q8_0) {
        const float d = rf_ld_half(b);
        const int o = 2 + (QT == RF_TYPE_Q4_0 ? e0 % 16 : e0);
        uint8_t q[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint16_t w = rf_ld_u16(b + o + 2 * j);
            q[2 * j] = (uint8_t)(w & 0xFF), q[2 * j + 1] = (uint8_t)(w >> 8);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if constexpr (QT == RF_TYPE_Q4_0) v[j] = (float)((e0 < 16 ? q[j] & 0xF : q[j] >> 4) - 8) * d;
            else v[j] = (float)(int8_t)q[j] * d;
        }
    } else if constexpr (QT == RF_TYPE_Q4_K || QT == RF_TYPE_Q5_K) {
        /* the 8 share sub-block j's scale and min, and 8 consecutive quant bytes */
        int sc, m;
        rf_k4_sm(e0 / 32, b + 4, &sc, &m);
        const float d = rf_ld_half(b) * (float)sc, dm = rf_ld_half(b + 2) * (float)m;
        const uint8_t *qs = b + (QT == RF_TYPE_Q4_K ? 16 : 48) + 32 * (e0 / 64) + e0 % 32;
        const bool hi = (e0 % 64) >= 32;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int q = hi ? (qs[j] >> 4) : (qs[j] & 0xF);
            if constexpr (QT == RF_TYPE_Q5_K) q |= ((b[16 + e0 % 32 + j] >> (e0 / 32)) & 1) << 4;
            v[j] = d * (float)q - dm; /* rf_dq_elem's (d * sc) * q - dmin * m */
        }
    } else if constexpr (QT == RF_TYPE_Q6_K) {
        /* one 16-element scale group, 8 consecutive low and high quant bytes */
        const int h = e0 / 128, r = e0 % 128, k = r / 32, l = r % 32;
        const uint8_t *ql = b + 64 * h + l + 32 * (k & 1), *qh = b + 128 + 32 * h + l;
        const float d = rf_ld_half(b + 208), sc = (float)(int8_t)b[192 + e0 / 16];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int lo = k < 2 ? (ql[j] & 0xF) : (ql[j] >> 4);
            const int q = (lo | (((qh[j] >> (2 * k)) & 3) << 4)) - 32;
            v[j] = d * sc * (float)q;
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = rf_dq_elem(QT, b, e0 + j);
    }
}

/* dequantize8_rows: rf_k_dequantize8 for one compile-time type, laid out by rows: blockIdx.y
 * walks rows (grid-stride over y), the x threads the 8-element chunks of a row, so no thread
 * divides a 64-bit index (the generic kernel spent most of its instructions there and in the
 * runtime type switch: 1.5 TB/s of traffic on an H100 where a copy moves 3.0). Same values.
 * launch: grid (ceil(n_in / 8 / 256), min(n_rows, 65535)), 256 threads; n_in % 8 == 0,
 * n_in / 8 < 2^31, dst 16-byte aligned. */
template <typename T, int QT>
__global__ void rf_k_dequantize8_rows(T *dst, const uint8_t *src, int64_t n_rows, int n_in, int64_t row_bytes) {
    constexpr int BS = QT == RF_TYPE_Q4_0 || QT == RF_TYPE_Q4_1 || QT == RF_TYPE_Q5_0 || QT == RF_TYPE_Q5_1 ||
                               QT == RF_TYPE_Q8_0 ? 32 : 256;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_in / 8) return;
    const int i0 = c * 8, e0 = i0 % BS;
    for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const uint8_t *blk = src + r * row_bytes + (int64_t)(i0 / BS) * rf_gq_bytes(QT);
        float v[8];
        rf_dq8<QT>(blk, e0, v);
        rf_st8(dst + r * n_in + i0, v);
    }
}

template <typename T>
static bool rf_dq_rows_launch(rf_gpu_ctx *ctx, T *dst, const uint8_t *s, int t, int64_t n_rows, int64_t n_in,
                              int64_t rb) {
    if (n_in / 8 >= (1LL << 31)) return false;
    const dim3 grid(rf_gpu_blocks(n_in / 8, 256), (unsigned)(n_rows < 65535 ? n_rows : 65535));
#define RF_DQR(QT) rf_k_dequantize8_rows<T, QT><<<grid, 256, 0, ctx->stream>>>(dst, s, n_rows, (int)n_in, rb)
    switch (t) {
    case RF_TYPE_Q4_0: RF_DQR(RF_TYPE_Q4_0); return true;
    case RF_TYPE_Q4_1: RF_DQR(RF_TYPE_Q4_1); return true;
    case RF_TYPE_Q5_0: RF_DQR(RF_TYPE_Q5_0); return true;
    case RF_TYPE_Q5_1: RF_DQR(RF_TYPE_Q5_1); return true;
    case RF_TYPE_Q8_0: RF_DQR(RF_TYPE_Q8_0); return true;
    case RF_TYPE_Q4_K: RF_DQR(RF_TYPE_Q4_K); return true;
    case RF_TYPE_Q5_K: RF_DQR(RF_TYPE_Q5_K); return true;
    case RF_TYPE_Q6_K: RF_DQR(RF_TYPE_Q6_K); return true;
    default: return false;
    }
#undef RF_DQR
}

/* get_rows: y[k, :] = dequantize(row ids[k] - r0 of W) where that row is W's, else zeros (a
 * shard's part of a lookup split by rows: W is rows [r0, r0 + n_rows) of n_all); an id outside
 * [0, n_all) gives NaNs. The whole table: r0 = 0, n_all = n_rows.
 * in: W n_rows rows of n_in elements (type t), ids int32 [n_ids]; out: y f32 [n_ids, n_in]
 * launch: one thread per output element, grid-stride. twin rf_ref_get_rows(_part); exact (f32). */
__global__ void rf_k_get_rows(float *y, const uint8_t *w, int t, const int32_t *ids, int64_t n_ids,
                              int64_t n_in, int64_t r0, int64_t n_rows, int64_t n_all, int64_t row_bytes, int bs,
                              int bb) {
    const int64_t total = n_ids * n_in;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = e / n_in, i = e % n_in;
        const int32_t id = ids[k];
        if (id < 0 || id >= n_all) {
            y[e] = __int_as_float(0x7fc00000);
            continue;
        }
        const int64_t r = (int64_t)id - r0;
        if (r < 0 || r >= n_rows) {
            y[e] = 0.0f;
            continue;
        }
        const uint8_t *blk = w + r * row_bytes + (i / bs) * bb;
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
        const bool rows = dst_type == RF_TYPE_F32
                              ? rf_dq_rows_launch<float>(ctx, (float *)dst, s, ti, n_rows, n_in, rb)
                              : rf_dq_rows_launch<rf_half>(ctx, (rf_half *)dst, s, ti, n_rows, n_in, rb);
        if (rows) return RF_GPU_LAUNCHED(ctx, "rf_k_dequantize8_rows");
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

extern "C" rf_status rf_gpu_get_rows_part(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                          const int32_t *ids, int64_t n_ids, int64_t n_in, int64_t r0,
                                          int64_t n_rows, int64_t n_all) {
    int64_t rb;
    rf_status st = rf_gpu_row_bytes("rf_gpu_get_rows", wtype, n_in, &rb);
    if (st) return st;
    RF_GPU_REQUIRE(n_ids >= 0 && n_rows >= 1 && r0 >= 0 && r0 + n_rows <= n_all, "rf_gpu_get_rows",
                   "n_ids=%lld rows [%lld, %lld) of %lld", (long long)n_ids, (long long)r0,
                   (long long)(r0 + n_rows), (long long)n_all);
    const int64_t total = n_ids * n_in;
    if (total == 0) return RF_OK;
    const int bs = rf_gq_block((int)wtype), bb = rf_gq_bytes((int)wtype), ti = (int)wtype;
    const uint8_t *wp = (const uint8_t *)w;
    rf_k_get_rows<<<rf_gpu_blocks(total, 256), 256, 0, ctx->stream>>>(y, wp, ti, ids, n_ids, n_in, r0,
                                                                      n_rows, n_all, rb, bs, bb);
    return RF_GPU_LAUNCHED(ctx, "rf_k_get_rows");
}

extern "C" rf_status rf_gpu_get_rows(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                     const int32_t *ids, int64_t n_ids, int64_t n_in,
                                     int64_t n_rows) {
    return rf_gpu_get_rows_part(ctx, y, w, wtype, ids, n_ids, n_in, 0, n_rows, n_rows);
}
