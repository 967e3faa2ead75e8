/* gpu_moe.cuh — the device functions the MoE kernels (gpu_moe.cu, gpu_moe_gemv.cu) share: the
 * GLU. (Their folded activation quantization is rf_quantize_elem<1, RK>, gpu_gemv.cuh: the bits
 * rf_k_quantize_x writes in its in-order layout.) */
#ifndef RF_GPU_MOE_CUH
#define RF_GPU_MOE_CUH

#include "backend/backend.h"        /* rf_glu_kind */
#include "backend/gpu/gpu_gemv.cuh" /* RF_QK, rf_quantize_elem */

/* the GLU of the forward's ffn (rf_glu_kind), the arithmetic of the glu kernels (gpu_internal.h) */
static __device__ __forceinline__ float rf_moe_glu(int kind, float g, float u) {
    return kind == RF_GLU_SWIGLU ? rf_silu(g) * u : kind == RF_GLU_GEGLU ? rf_gelu_tanh(g) * u : rf_swiglu_oai(g, u);
}

#endif
