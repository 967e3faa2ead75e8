/* gpu_gemv_xq.cu — the activation quantization of the int8-x GEMVs: x f32 -> int8 per 32 with
 * scale and sums (rf_k_quantize_x), in the block order the product kernel reads. */
#include "backend/gpu/gpu_gemv.cuh"

/* ---- x quantization ------------------------------------------------------------------------
 * quantize_x: for each 32-element group g of x: d = f16(max|x| / 127), qx = rint(x * 127 / max|x|),
 * dx[g] = (d, the sum of the group's int8 qx as int bits) as a float2, with FS (Q4_1 / Q5_1 /
 * K-quant weights, which need it) a float4 (d, that sum, the sum of the group's f32 x, the sum
 * of its first 16 int8 qx as int bits).
 * in: x f32 [nt, n_in] (n_in a multiple of 32 * GB); out: qx int8 [nt, n_in], dx [nt, n_in/32],
 * each token's blocks in the order the GEMV reads them. GB = 1: in order. GB = 2, 4 or 8
 * (gemv_q32s, groups of GB blocks): block b = g * GB + j (ng = n_in / 32 / GB groups) has dx at
 * j * ng + g and its two 16-byte halves h at 16-byte units (2 j + h) * ng + g of qx, so lanes
 * taking the j-th block of consecutive groups read consecutive 16-byte words.
 * launch: grid (elements of a token / block size, tokens), one thread per element (programmatic
 * dependent launch allowed), blocks of a multiple of 64 threads, so each 32-group is 32
 * consecutive lanes of one warp (the reduction width below is the group size RF_QK, not the warp
 * size). */
template <int GB, bool FS>
__global__ void rf_k_quantize_x(int8_t *qx, float4 *dx, const float *x, int n_in) {
    rf_pdl_trigger();
    rf_pdl_wait(); /* x is the previous kernel's output; qx may still be read by it */
    const int i = blockIdx.x * blockDim.x + threadIdx.x; /* element in the token (n_in < 2^28) */
    if (i - (int)(threadIdx.x % RF_QK) >= n_in) return; /* whole groups leave together */
    const int64_t e = (int64_t)blockIdx.y * n_in + i;
    const float v = i < n_in ? x[e] : 0.0f;
    float amax = fabsf(v), sum = v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && RF_QK == 32
    constexpr bool RX = !FS; /* the group is one whole warp: one redux.sync per reduction */
#else
    constexpr bool RX = false;
#endif
    if (RX) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        /* |x| as bits orders like the floats, and any NaN lies above +inf: a NaN max is NaN */
        amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(amax)));
#endif
    } else {
#pragma unroll
        for (int m = RF_QK / 2; m > 0; m >>= 1) {
            amax = fmaxf(amax, RF_SHFL_XOR(amax, m));
            sum += RF_SHFL_XOR(sum, m);
        }
    }
    /* ggml's activation blocks (the CPU twin's act_q8): q = rint(x * 127/amax) and the scale
     * kept as f16 (as f32 where f16 would overflow, |x| > 8e6, where ggml gives inf), so GPU and
     * CPU round the same activations the same way. A NaN in the group must reach y: NaN d
     * poisons every product (int8 cannot hold it). */
    const float d32 = amax / 127.0f, d16 = __half2float(__float2half(d32));
    const float d = sum != sum ? sum : (d16 <= 65504.0f ? d16 : d32); /* beyond f16's range: f32 */
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const int q = __float2int_rn(v * id);
    int qs = q, qlo = q;
    if (RX) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        qs = __reduce_add_sync(0xffffffffu, q);
#endif
    } else {
#pragma unroll
        for (int m = RF_QK / 2; m > 0; m >>= 1) qs += RF_SHFL_XOR(qs, m);
    }
    if (FS) /* the sum of the group's first 16 (Q6_K: one scale per 16) */
#pragma unroll
        for (int m = RF_QK / 4; m > 0; m >>= 1) qlo += RF_SHFL_XOR(qlo, m);
    const int b = i / RF_QK, ng = n_in / RF_QK / GB, j = b % GB, g = b / GB;
    const int h = (int)(threadIdx.x % RF_QK) / 16, c = (int)threadIdx.x % 16;
    const int unit = GB == 1 ? 2 * b + h : (2 * j + h) * ng + g; /* < 2^24: n_in < 2^28 */
    if (i < n_in) qx[(int64_t)blockIdx.y * n_in + unit * 16 + c] = (int8_t)q;
    const int64_t r = (int64_t)blockIdx.y * (n_in / RF_QK) + (GB == 1 ? b : j * ng + g);
    if (i < n_in && (threadIdx.x % RF_QK) == 0) {
        if (FS) dx[r] = make_float4(d, __int_as_float(qs), sum, __int_as_float(qlo));
        else ((float2 *)dx)[r] = make_float2(d, __int_as_float(qs));
    }
}

extern "C" size_t rf_gpu_xq_bytes(int64_t n_tokens, int64_t n_in) {
    const size_t n = (size_t)n_tokens * (size_t)n_in;
    return ((n + 255) & ~(size_t)255) + n / RF_QK * sizeof(float4);
}

rf_status rf_gemv_launch_quantize_x(rf_gpu_ctx *ctx, void *xq, int gb, bool fs, const float *x,
                                    int nt, int64_t n_in) {
    const size_t n = (size_t)nt * (size_t)n_in;
    float4 *dx = (float4 *)((char *)xq + ((n + 255) & ~(size_t)255));
    const dim3 grid(rf_gpu_blocks(n_in, 256), (unsigned)nt), block(256);
#define RF_QX(GB, FS) rf_gpu_launch(ctx, "rf_k_quantize_x", true, rf_k_quantize_x<GB, FS>, grid, block, 0, (int8_t *)xq, dx, x, (int)n_in)
    switch (gb * 2 + fs) {
    case 3: return RF_QX(1, true);
    case 4: return RF_QX(2, false);
    case 5: return RF_QX(2, true);
    case 8: return RF_QX(4, false);
    case 9: return RF_QX(4, true);
    case 16: return RF_QX(8, false);
    case 17: return RF_QX(8, true);
    default: return RF_QX(1, false);
    }
#undef RF_QX
}
