/* gpu_compat.h — the one place that maps CUDA names to HIP names (runtime, BLAS, intrinsics) and
 * defines the per-target warp size, so every src/backend/gpu/ *.cu compiles with nvcc and with
 * hipcc -x hip unchanged (docs/ARCHITECTURE.md §5.1). Device code uses only the rf_/RF_ names below. */
#ifndef RF_GPU_COMPAT_H
#define RF_GPU_COMPAT_H

#include <stdint.h>

#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__) || defined(__HIPCC__)
#define RF_HIP 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

/* Debian ships no hipBLAS: the cuBLAS GEMM path is compiled out unless RF_HAVE_HIPBLAS is set. */
#if defined(RF_HAVE_HIPBLAS)
#include <hipblas.h>
#else
#define RF_GPU_NO_BLAS 1
#endif

/* runtime */
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaGetErrorString hipGetErrorString
#define cudaGetErrorName hipGetErrorName
#define cudaGetLastError hipGetLastError
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaSetDevice hipSetDevice
#define cudaGetDevice hipGetDevice
#define cudaDeviceCanAccessPeer hipDeviceCanAccessPeer
#define cudaDeviceProp hipDeviceProp_t
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMallocHost hipHostMalloc
#define cudaFreeHost hipHostFree
#define cudaMemGetInfo hipMemGetInfo
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDefault hipMemcpyDefault
#define cudaMemcpy2DAsync hipMemcpy2DAsync
#define cudaDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define cudaErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define cudaStream_t hipStream_t
#define cudaStreamCreate hipStreamCreate
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaEvent_t hipEvent_t
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaStreamQuery hipStreamQuery
#define cudaEventQuery hipEventQuery
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaStreamCaptureStatus hipStreamCaptureStatus
#define cudaStreamCaptureStatusNone hipStreamCaptureStatusNone
#define cudaErrorNotReady hipErrorNotReady
#define cudaLaunchHostFunc hipLaunchHostFunc
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphDestroy hipGraphDestroy
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize

/* blas */
#if !defined(RF_GPU_NO_BLAS)
#define cublasHandle_t hipblasHandle_t
#define cublasStatus_t hipblasStatus_t
#define CUBLAS_STATUS_SUCCESS HIPBLAS_STATUS_SUCCESS
#define cublasCreate hipblasCreate
#define cublasDestroy hipblasDestroy
#define cublasSetStream hipblasSetStream
#define cublasGemmEx hipblasGemmEx
#define CUBLAS_OP_N HIPBLAS_OP_N
#define CUBLAS_OP_T HIPBLAS_OP_T
#define CUDA_R_16F HIPBLAS_R_16F
#define CUDA_R_32F HIPBLAS_R_32F
#define CUBLAS_COMPUTE_32F HIPBLAS_R_32F
#define CUBLAS_GEMM_DEFAULT HIPBLAS_GEMM_DEFAULT
#endif

typedef __half rf_half;
#define rf_half2float(h) __half2float(h)
#define rf_float2half(f) __float2half(f)

/* Warp (wavefront) size is fixed per offload target: 64 on CDNA/GCN (gfx9xx), 32 on RDNA.
 * The compiler defines __AMDGCN_WAVEFRONT_SIZE in device passes; the host pass has no single
 * answer (one binary holds several targets), so host code asks the device (ctx->warp_size). */
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define RF_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#elif defined(__GFX9__)
#define RF_WARP_SIZE 64
#else
#define RF_WARP_SIZE 32 /* host pass and RDNA fallback; never used for a device reduction there */
#endif

#define RF_SHFL_XOR(v, m) __shfl_xor((v), (m), RF_WARP_SIZE)
#define RF_SHFL(v, src) __shfl((v), (src), RF_WARP_SIZE)
#define RF_SHFL_DOWN(v, m) __shfl_down((v), (m), RF_WARP_SIZE)
#define RF_SHFL_UP(v, m) __shfl_up((v), (m), RF_WARP_SIZE)
#define RF_BALLOT(p) __ballot(p)
#define RF_SYNCWARP() rf_hip_syncwarp()
static __device__ __forceinline__ void rf_hip_syncwarp(void) {
    /* AMD wavefronts execute in lock-step; a compiler fence keeps shared-memory order */
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
/* 4-way int8 dot product with accumulate; a portable version (sdot4 exists only on some gfx) */
static __device__ __forceinline__ int rf_dp4a(int a, int b, int c) {
    c += (int)(int8_t)(a) * (int)(int8_t)(b);
    c += (int)(int8_t)(a >> 8) * (int)(int8_t)(b >> 8);
    c += (int)(int8_t)(a >> 16) * (int)(int8_t)(b >> 16);
    c += (int)(int8_t)(a >> 24) * (int)(int8_t)(b >> 24);
    return c;
}
/* the same with a's bytes unsigned (0..255) */
static __device__ __forceinline__ int rf_dp4a_us(unsigned a, int b, int c) {
    c += (int)(a & 0xFFu) * (int)(int8_t)(b);
    c += (int)((a >> 8) & 0xFFu) * (int)(int8_t)(b >> 8);
    c += (int)((a >> 16) & 0xFFu) * (int)(int8_t)(b >> 16);
    c += (int)(a >> 24) * (int)(int8_t)(b >> 24);
    return c;
}

#else /* ---------------------------------------------------------------- CUDA */
#define RF_CUDA_BUILD 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>

typedef __half rf_half;
#define rf_half2float(h) __half2float(h)
#define rf_float2half(f) __float2half(f)

#define RF_WARP_SIZE 32
#define RF_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), RF_WARP_SIZE)
#define RF_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src), RF_WARP_SIZE)
#define RF_SHFL_DOWN(v, m) __shfl_down_sync(0xffffffffu, (v), (m), RF_WARP_SIZE)
#define RF_SHFL_UP(v, m) __shfl_up_sync(0xffffffffu, (v), (m), RF_WARP_SIZE)
#define RF_BALLOT(p) __ballot_sync(0xffffffffu, (p))
#define RF_SYNCWARP() __syncwarp()
static __device__ __forceinline__ int rf_dp4a(int a, int b, int c) { return __dp4a(a, b, c); }
/* 4-way dot of unsigned bytes of a with signed bytes of b, plus c (dp4a.u32.s32) */
static __device__ __forceinline__ int rf_dp4a_us(unsigned a, int b, int c) {
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
#endif

/* ---- shared helpers (both platforms) --------------------------------------------------- */

/* Warp-wide reductions: log2(RF_WARP_SIZE) butterfly steps, never a literal width. */
static __device__ __forceinline__ float rf_warp_sum(float v) {
#pragma unroll
    for (int m = RF_WARP_SIZE / 2; m > 0; m >>= 1) v += RF_SHFL_XOR(v, m);
    return v;
}
static __device__ __forceinline__ float rf_warp_max(float v) {
#pragma unroll
    for (int m = RF_WARP_SIZE / 2; m > 0; m >>= 1) v = fmaxf(v, RF_SHFL_XOR(v, m));
    return v;
}

/* Block-wide sum for blockDim.x a multiple of RF_WARP_SIZE, <= 1024. `sh` holds >= 1024/
 * RF_WARP_SIZE floats. Every thread gets the result. Contains __syncthreads. */
static __device__ __forceinline__ float rf_block_sum(float v, float *sh) {
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    const int nwarps = blockDim.x / RF_WARP_SIZE;
    v = rf_warp_sum(v);
    __syncthreads(); /* sh may be in use by a previous reduction */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nwarps ? sh[lane] : 0.0f;
    return rf_warp_sum(v);
}
/* p[0] + p[ps] + ... + p[(np - 1) ps] added in that order (rf_k_mmq_reduce's sum of a product's
 * split-K partials, so a kernel that takes them sees the reduced value's bits), np in 1..8; every
 * load issued before the first add */
static __device__ __forceinline__ float rf_parts_sum(const float *p, int np, int64_t ps) {
    float a[8];
#pragma unroll
    for (int j = 0; j < 8; j++) a[j] = j < np ? p[j * ps] : 0.0f;
    float s = a[0];
#pragma unroll
    for (int j = 1; j < 8; j++)
        if (j < np) s += a[j];
    return s;
}

/* The RMS norm's 1 / sqrt(mean(v^2) + eps) over a block's row of n held as v[0..K) per thread
 * (element k * blockDim.x + threadIdx.x, zeros past n): each thread's squares summed over k in
 * order, then rf_block_sum. One definition, so every fused norm kernel (rmsnorm_v, add_norm,
 * rmsnorm_quantize_x) computes the same bits. Contains __syncthreads. */
template <int K>
static __device__ __forceinline__ float rf_rms_inv(const float *v, int n, float eps, float *sh) {
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) ss += v[k] * v[k];
    ss = rf_block_sum(ss, sh);
    return rsqrtf(ss / (float)n + eps);
}
static __device__ __forceinline__ float rf_block_max(float v, float *sh) {
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    const int nwarps = blockDim.x / RF_WARP_SIZE;
    v = rf_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nwarps ? sh[lane] : -INFINITY;
    return rf_warp_max(v);
}

/* Programmatic dependent launch (sm_90+, CUDA only; no-ops elsewhere and in kernels launched
 * without the attribute). A kernel launched with rf_gpu_launch(..., pdl = true) may start while
 * the previous kernel on the stream is still running: it may read only data no in-flight work
 * writes (uploaded weights) before rf_pdl_wait(), which returns once the previous kernel has
 * completed and its writes are visible. rf_pdl_trigger() lets the next such kernel launch. */
static __device__ __forceinline__ void rf_pdl_wait(void) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void rf_pdl_trigger(void) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* abort the kernel (device code of a path the host never launches on this target) */
#if defined(RF_CUDA_BUILD)
#define RF_DEVICE_TRAP() __trap()
#else
#define RF_DEVICE_TRAP() __builtin_trap()
#endif

/* Asynchronous 16-byte global -> shared copies (cp.async, sm_80+), one commit group per call of
 * rf_cp_async_commit(); rf_cp_async_wait<N>() returns when at most N of this thread's groups are
 * still in flight (then a warp or block barrier makes other threads' copies visible). Elsewhere
 * the copy is a plain load and store and the group calls are no-ops. */
static __device__ __forceinline__ unsigned rf_smem_addr(const void *smem) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return (unsigned)__cvta_generic_to_shared(smem);
#else
    return (unsigned)(uintptr_t)smem;
#endif
}
/* the copy to a shared-memory address already converted by rf_smem_addr (CUDA sm_80+ only:
 * kernels using it are not built elsewhere) */
static __device__ __forceinline__ void rf_cp_async16_s(unsigned s, const void *gmem) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
#else
    (void)s, (void)gmem;
    RF_DEVICE_TRAP();
#endif
}
/* 8 bytes (through L1: .cg takes 16 only), as rf_cp_async16_s */
static __device__ __forceinline__ void rf_cp_async8_s(unsigned s, const void *gmem) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(gmem) : "memory");
#else
    (void)s, (void)gmem;
    RF_DEVICE_TRAP();
#endif
}
static __device__ __forceinline__ void rf_cp_async16(void *smem, const void *gmem) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    rf_cp_async16_s(rf_smem_addr(smem), gmem);
#else
    *(uint4 *)smem = *(const uint4 *)gmem;
#endif
}
static __device__ __forceinline__ void rf_cp_async_commit(void) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> static __device__ __forceinline__ void rf_cp_async_wait(void) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* Warp-level tensor-core products (mma.sync, sm_80+; the kernels using them are launched only
 * where the device's compute capability is 8.0 or more, and trap elsewhere): d += a b for one
 * m16n8k32 tile of int8 (A unsigned with AU, else signed; B signed; c = 0 in, s32 out) and one
 * m16n8k8 tile of tf32 (f32 accumulate in place). Fragments as the PTX ISA lays them out. */
template <bool AU>
static __device__ __forceinline__ void rf_mma_i8(int *d, const uint32_t *a, const int *b) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (AU)
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
    else
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
#else
    (void)d, (void)a, (void)b;
    RF_DEVICE_TRAP();
#endif
}
static __device__ __forceinline__ void rf_mma_tf32(float *d, const uint32_t *a, const uint32_t *b) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
    RF_DEVICE_TRAP();
#endif
}

static __device__ __forceinline__ float rf_bf16_to_float_dev(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}

#endif
