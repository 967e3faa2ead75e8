/* gpu_mma.cuh — the f16 tensor-core helpers of the attention kernels (gpu_flash_prefill.cu,
 * gpu_decode_attention.cu): mma.sync m16n8k16 with f32 accumulation, two floats packed as f16,
 * ldmatrix x4 plain and transposed. CUDA sm_80+ device code only (empty elsewhere). */
#ifndef RF_GPU_MMA_CUH
#define RF_GPU_MMA_CUH

#include "backend/gpu/gpu_internal.h"

#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* d += a b: a the 16x16 A fragment (4 registers of f16 pairs), b0 b1 the 16x8 B fragment */
static __device__ __forceinline__ void rf_mma_f16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ uint32_t rf_pack_h2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}
/* four 8x8 b16 matrices from shared memory, lane l giving the address of row l % 8 of matrix
 * l / 8; .trans hands each thread the transposed pair (the B operand from row-major V) */
static __device__ __forceinline__ void rf_ldsm4(uint32_t *r, const rf_half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(rf_smem_addr(p)));
}
static __device__ __forceinline__ void rf_ldsm4_t(uint32_t *r, const rf_half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(rf_smem_addr(p)));
}
#endif

#endif
