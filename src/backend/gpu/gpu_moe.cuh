/* gpu_moe.cuh — the device functions the MoE kernels (gpu_moe.cu, gpu_moe_gemv.cu) share: the
 * activation quantization of rf_k_quantize_x (gpu_gemv_xq.cu) in its in-order layout (GB 1), for
 * the kernels that fold it into their epilogue instead of a quantize_x launch, and the GLU. */
#ifndef RF_GPU_MOE_CUH
#define RF_GPU_MOE_CUH

#include "backend/backend.h"        /* rf_glu_kind */
#include "backend/gpu/gpu_gemv.cuh" /* RF_QK */

/* One element's share of rf_k_quantize_x<1, RK>: v is element i of row tok of an x of rows of
 * n_in (a multiple of 32); its 32-element group is 32 consecutive lanes of one warp, all present
 * (v = 0 past n_in); lane = the place in the group. The operations are rf_quantize_elem's, step
 * for step (the same reductions in the same order, the same roundings), so qx and the records
 * are the bits rf_k_quantize_x<1, RK> writes (test_gpu_moe_fused compares the fused MoE ops with
 * the unfused ones, which quantize with that kernel). qx int8 [rows, n_in] in order; dx: records
 * [rows, n_in / 32], float2 (d, int sum) for RK 0, float4 (d, int sum, f32 sum or ggml's q8_1 s
 * for RK 2, int sum of the first 16) for RK 1 / 2. */
template <int RK>
static __device__ __forceinline__ void rf_moe_quantize_elem(int8_t *qx, float4 *dx, float v, int i, int n_in, int tok,
                                                            int lane) {
    constexpr bool FS = RK >= 1;
    float amax = fabsf(v), sum = v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && RF_QK == 32
    constexpr bool RX = !FS; /* the group is one whole warp: one redux.sync per reduction */
#else
    constexpr bool RX = false;
#endif
    if (RX) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(amax)));
#endif
    } else {
#pragma unroll
        for (int m = RF_QK / 2; m > 0; m >>= 1) {
            amax = fmaxf(amax, RF_SHFL_XOR(amax, m));
            sum += RF_SHFL_XOR(sum, m);
        }
    }
    const float d32 = amax / 127.0f, d16 = __half2float(__float2half(d32));
    const float d = sum != sum ? sum : (d16 <= 65504.0f ? d16 : d32);
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
    if (FS)
#pragma unroll
        for (int m = RF_QK / 4; m > 0; m >>= 1) qlo += RF_SHFL_XOR(qlo, m);
    const int b = i / RF_QK;
    if (i < n_in) qx[(int64_t)tok * n_in + (2 * b + lane / 16) * 16 + lane % 16] = (int8_t)q;
    const int64_t r = (int64_t)tok * (n_in / RF_QK) + b;
    if (i < n_in && lane == 0) {
        const float s32 = d32 * (float)qs, s16 = __half2float(__float2half(s32));
        const float rs = RK == 2 ? (sum != sum ? sum : fabsf(s16) <= 65504.0f ? s16 : s32) : sum;
        if (FS) dx[r] = make_float4(d, __int_as_float(qs), rs, __int_as_float(qlo));
        else ((float2 *)dx)[r] = make_float2(d, __int_as_float(qs));
    }
}

/* the GLU of the forward's ffn (rf_glu_kind), the arithmetic of the glu kernels (gpu_internal.h) */
static __device__ __forceinline__ float rf_moe_glu(int kind, float g, float u) {
    return kind == RF_GLU_SWIGLU ? rf_silu(g) * u : kind == RF_GLU_GEGLU ? rf_gelu_tanh(g) * u : rf_swiglu_oai(g, u);
}

#endif
