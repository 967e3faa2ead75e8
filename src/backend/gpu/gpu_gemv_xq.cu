/* gpu_gemv_xq.cu — the activation quantization of the int8-x GEMVs: x f32 -> int8 per 32 with
 * scale and sums (rf_k_quantize_x), in the block order the product kernel reads. */
#include "backend/gpu/gpu_cluster.cuh"
#include "backend/gpu/gpu_gemv.cuh"
#include "backend/gpu/gpu_rmsnorm.cuh"
#include "core/test_hooks.h"

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
template <int GB, int RK>
__global__ void rf_k_quantize_x(int8_t *qx, float4 *dx, const float *x, int n_in) {
    rf_pdl_trigger();
    rf_pdl_wait(); /* x is the previous kernel's output; qx may still be read by it */
    const int i = blockIdx.x * blockDim.x + threadIdx.x; /* element in the token (n_in < 2^28) */
    if (i - (int)(threadIdx.x % RF_QK) >= n_in) return; /* whole groups leave together */
    const int64_t e = (int64_t)blockIdx.y * n_in + i;
    const float v = i < n_in ? x[e] : 0.0f;
    rf_quantize_elem<GB, RK>(qx, dx, v, i, n_in, (int)blockIdx.y, (int)(threadIdx.x % RF_QK));
}

/* x per 256 (rk 3: the MMQ's x for K-quant weights, CUDA): one super-block of 256 elements held
 * by 8 consecutive warps of the block (threads 256 s .. 256 s + 255), element v at e (its offset in
 * qx; its record at e / 32), with one f32 scale over the 256 (as ggml's Q8_K), d = amax / 127, q =
 * rint(x * (127 / amax)) in f32 as rf_quantize_elem rounds, so that the product sums a super-block's
 * 8 blocks in int32 and scales once (rf_k_mmq); the records of each 32-block as rf_k_quantize_x<1,
 * 1>'s: (d of its 256, the block's int sum, 0, the int sum of its first 16). A NaN among the 256
 * makes d NaN (it must reach y). sa, ss: shared floats, one per warp of the block; every thread of
 * the block calls it (a __syncthreads inside, so a caller calling it again must pass other sa / ss
 * or synchronize first); valid false: v is 0 and nothing is stored (a row's end). */
static __device__ __forceinline__ void rf_quantize_256(int8_t *qx, float4 *dx, float v, int64_t e, bool valid,
                                                       float *sa, float *ss) {
    const int lane = threadIdx.x % 32, wp = threadIdx.x / 32, w0 = wp & ~7;
    float amax = fabsf(v), sum = v;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
        amax = fmaxf(amax, RF_SHFL_XOR(amax, m));
        sum += RF_SHFL_XOR(sum, m);
    }
    if (lane == 0) sa[wp] = amax, ss[wp] = sum;
    __syncthreads();
    amax = sa[w0], sum = ss[w0];
#pragma unroll
    for (int k = 1; k < 8; k++) amax = fmaxf(amax, sa[w0 + k]), sum += ss[w0 + k];
    const float d = sum != sum ? sum : amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const int q = __float2int_rn(v * id);
    int qs = q, qlo = q;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) qs += RF_SHFL_XOR(qs, m);
#pragma unroll
    for (int m = 8; m > 0; m >>= 1) qlo += RF_SHFL_XOR(qlo, m);
    if (!valid) return;
    qx[e] = (int8_t)q;
    if (lane == 0) dx[e / 32] = make_float4(d, __int_as_float(qs), 0.0f, __int_as_float(qlo));
}

#if !defined(RF_HIP)
/* quantize_x256: x f32 [nt, n_in] (n_in a multiple of 256) -> rf_quantize_256's x per 256, laid
 * out as rf_k_quantize_x's with GB 1. launch: grid (n_in / 256, nt), 256 threads (programmatic
 * dependent launch allowed). */
__global__ void __launch_bounds__(256) rf_k_quantize_x256(int8_t *qx, float4 *dx, const float *x, int n_in) {
    rf_pdl_trigger();
    rf_pdl_wait();
    __shared__ float sa[8], ss[8];
    const int64_t e = (int64_t)blockIdx.y * n_in + blockIdx.x * 256 + threadIdx.x;
    rf_quantize_256(qx, dx, x[e], e, true, sa, ss);
}
#endif

/* rmsnorm_quantize_x: h = rmsnorm(x) * w (rf_k_rmsnorm_v's arithmetic: f32 h written too, for
 * products that take f32 x) and h quantized as rf_k_quantize_x<GB, FS> does, in one kernel: a
 * decode step's norm and its activation quantization were two launches, each a memory latency
 * plus a dependency wait. Element i = k * 1024 + threadIdx.x, so each warp's 32 lanes hold one
 * 32-group per k. in: x f32 [rows, n], w f32 [n] or NULL (n a multiple of 32, <= 1024 K);
 * res f32 [rows, n] or NULL: x = x + res first, written back (h must not alias x then); res may
 * be np arrays rows * n apart, a product's split-K partials, summed first (rf_parts_sum: the bits
 * of rf_k_mmq_reduce's sum, so the same as that kernel and then this one with np 1);
 * out: h f32 [rows, n] (may alias x without res), qx/dx as rf_k_quantize_x. launch: one block per row, 1024
 * threads (a multiple of the group size on every target). RK 3 (the MMQ's x for K-quant weights,
 * n a multiple of 256): x per 256 (rf_quantize_256), a round's four super-blocks reduced through
 * shared memory, one barrier a round. twin: rf_ref_rmsnorm then rf_k_quantize_x (or
 * rf_k_quantize_x256; bit-identical to that pair on the GPU where h is). */
template <int GB, int RK, int K>
__global__ void __launch_bounds__(1024) rf_k_rmsnorm_quantize_x(float *hout, int8_t *qx, float4 *dx, float *x,
                                                                const float *res, int np, const float *w, int n,
                                                                float eps) {
    rf_pdl_trigger();
    rf_pdl_wait();
    __shared__ float sh[1024 / 32];
    float *xr = x + (int64_t)blockIdx.x * n;
    float v[K], wv[K];
    rf_rms_load_row<K>(v, wv, xr, res, np, (int64_t)gridDim.x * n, w, n);
    const float inv = rf_rms_inv<K>(v, n, eps, sh);
    float *hr = hout + (int64_t)blockIdx.x * n;
    if constexpr (RK == 3) { /* x per 256: every thread reaches each round's barrier */
        __shared__ float sa[2][1024 / 32], ss[2][1024 / 32]; /* by round parity: one barrier a round */
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (k * 1024 >= n) break; /* the same for the whole block */
            const int i = k * 1024 + threadIdx.x;
            const float hv = i < n ? v[k] * inv * wv[k] : 0.0f;
            if (i < n) hr[i] = hv;
            rf_quantize_256(qx, dx, hv, (int64_t)blockIdx.x * n + i, i < n, sa[k & 1], ss[k & 1]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = k * 1024 + threadIdx.x;
            if (i - (int)(threadIdx.x % RF_QK) >= n) break; /* whole groups leave together */
            const float hv = v[k] * inv * wv[k];
            if (i < n) hr[i] = hv;
            rf_quantize_elem<GB, RK>(qx, dx, hv, i, n, (int)blockIdx.x, (int)(threadIdx.x % RF_QK));
        }
    }
}

#if defined(RF_CUDA_BUILD)
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

/* rmsnorm_quantize_x over a cluster of blocks (CUDA, sm_90): the same output bits, with a
 * row's elements spread over its nsl = ceil(n / 1024) blocks instead of one. One block per row
 * left a decode step's norm on one SM: every thread quantized its K elements one after another
 * (K dependent rounds of warp reductions), 4.9 us for a 4096 row and 7.9 us for 8192 on an H200
 * (ncu, clocks and caches as they run; 2 of the ~11 kernels of a layer). Here block p of the
 * cluster loads, normalizes and quantizes slice p only (element p * 1024 + threadIdx.x: the
 * element and the 32-lane group the single-block kernel's thread held in its round k = p): x +
 * res (res's np arrays summed as rf_parts_sum does) goes to the block's shared memory, and after
 * a cluster barrier each thread reads the row's other slices from the other blocks' shared
 * memory, so every block forms the sum of squares exactly as rf_k_rmsnorm_quantize_x does (same
 * per-thread order over k, same block sum), holds the same inv, and the outputs are that
 * kernel's bits. A block touches only its own slice of x in global memory; the second barrier
 * keeps each block's shared slice alive until every block has read it. launch: grid (nsl,
 * rows), cluster (nsl, 1, 1), nsl <= 8, 1024 threads. */
template <int GB, int RK, int K>
__global__ void __launch_bounds__(1024) rf_k_rmsnorm_quantize_x_cl(float *hout, int8_t *qx, float4 *dx, float *x,
                                                                   const float *res, int np, const float *w, int n,
                                                                   float eps) {
    rf_pdl_trigger();
    rf_pdl_wait();
    __shared__ float sh[1024 / 32], slice[1024];
    const int part = (int)blockIdx.x, row = (int)blockIdx.y, nsl = (int)gridDim.x;
    const int i = part * 1024 + threadIdx.x;
    float *xr = x + (int64_t)row * n;
    float own = i < n ? xr[i] : 0.0f;
    if (res && i < n) own = own + rf_parts_sum(res + (int64_t)row * n + i, np, (int64_t)gridDim.y * n);
    slice[threadIdx.x] = own;
    cg::cluster_group cl = cg::this_cluster();
    rf_cluster_sync(); /* never launched below sm_90 (rf_gemv_launch_rmsnorm_quantize_x) */
    float v[K];
#pragma unroll
    for (int k = 0; k < K; k++) v[k] = k < nsl ? cl.map_shared_rank(slice, k)[threadIdx.x] : 0.0f;
    const float inv = rf_rms_inv<K>(v, n, eps, sh);
    rf_cluster_sync(); /* every block's slice read: a block may leave from here */
    if (RK != 3 && i - (int)(threadIdx.x % RF_QK) >= n) return; /* whole groups leave together */
    if (res && i < n) xr[i] = own;
    const float wv = w && i < n ? w[i] : 1.0f;
    const float hv = i < n ? own * inv * wv : 0.0f;
    if (i < n) hout[(int64_t)row * n + i] = hv;
    if constexpr (RK == 3) {
        __shared__ float sa[1024 / 32], ss[1024 / 32];
        rf_quantize_256(qx, dx, hv, (int64_t)row * n + i, i < n, sa, ss);
    } else {
        rf_quantize_elem<GB, RK>(qx, dx, hv, i, n, row, (int)(threadIdx.x % RF_QK));
    }
}

#endif

/* glu_quantize_x: y = act(gate) * up (rf_k_swiglu / rf_k_geglu's arithmetic, written as f32)
 * and y quantized as rf_k_quantize_x<GB, FS> does, in one kernel: the FFN's GLU and the down
 * product's activation quantization were two launches. in: gate, up f32 rows of n (n a
 * multiple of 32) at strides gs, us (the halves of a joined gate/up product, or packed);
 * out: y f32 [rows, n] packed (may alias packed gate or up), qx/dx as rf_k_quantize_x (RK 3: as
 * rf_k_quantize_x256, a block's 256 elements one super-block). launch as rf_k_quantize_x: grid
 * (ceil(n / 256), rows), 256 threads. */
template <int GB, int RK, bool GEGLU>
__global__ void rf_k_glu_quantize_x(float *y, int8_t *qx, float4 *dx, const float *gate, int64_t gs,
                                    const float *up, int64_t us, int n_in) {
    rf_pdl_trigger();
    rf_pdl_wait();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (RK != 3 && i - (int)(threadIdx.x % RF_QK) >= n_in) return; /* whole groups leave together */
    const int64_t e = (int64_t)blockIdx.y * n_in + i;
    float v = 0.0f;
    if (i < n_in) {
        const float gv = gate[blockIdx.y * gs + i], uv = up[blockIdx.y * us + i];
        v = (GEGLU ? rf_gelu_tanh(gv) : rf_silu(gv)) * uv;
        y[e] = v;
    }
    if constexpr (RK == 3) { /* a block of 256 is one super-block (n_in a multiple of 256) */
        __shared__ float sa[8], ss[8];
        rf_quantize_256(qx, dx, v, e, i < n_in, sa, ss);
    } else {
        rf_quantize_elem<GB, RK>(qx, dx, v, i, n_in, (int)blockIdx.y, (int)(threadIdx.x % RF_QK));
    }
}

rf_status rf_gemv_launch_glu_quantize_x(rf_gpu_ctx *ctx, float *y, void *xq, int gb, int rk, bool geglu,
                                        const float *gate, int64_t gs, const float *up, int64_t us, int rows,
                                        int64_t n) {
    const size_t tot = (size_t)rows * (size_t)n;
    float4 *dx = (float4 *)((char *)xq + ((tot + 255) & ~(size_t)255));
    const dim3 grid(rf_gpu_blocks(n, 256), (unsigned)rows), block(256);
#define RF_GQ(GB, FS)                                                                                \
    (geglu ? rf_gpu_launch(ctx, "rf_k_glu_quantize_x", true, rf_k_glu_quantize_x<GB, FS, true>, grid, block, 0, y, \
                           (int8_t *)xq, dx, gate, gs, up, us, (int)n)                                       \
           : rf_gpu_launch(ctx, "rf_k_glu_quantize_x", true, rf_k_glu_quantize_x<GB, FS, false>, grid, block, 0, y, \
                           (int8_t *)xq, dx, gate, gs, up, us, (int)n))
    switch (gb * 4 + rk) { /* records: rk 0 plain, 1 with f32 sums, 2 with ggml's q8_1 s, 3 x per 256 */
#if !defined(RF_HIP)
    case 7: return RF_GQ(1, 3);
#endif
    case 5: return RF_GQ(1, 1);
    case 6: return RF_GQ(1, 2);
    case 8: return RF_GQ(2, 0);
    case 9: return RF_GQ(2, 1);
    case 10: return RF_GQ(2, 2);
    case 16: return RF_GQ(4, 0);
    case 17: return RF_GQ(4, 1);
    case 18: return RF_GQ(4, 2);
    case 32: return RF_GQ(8, 0);
    case 33: return RF_GQ(8, 1);
    case 34: return RF_GQ(8, 2);
    default: return RF_GQ(1, 0);
    }
#undef RF_GQ
}

rf_status rf_gemv_launch_rmsnorm_quantize_x(rf_gpu_ctx *ctx, float *h, void *xq, int gb, int rk, float *x,
                                            const float *res, int np, const float *w, int rows, int64_t n,
                                            float eps) {
    const size_t tot = (size_t)rows * (size_t)n;
    float4 *dx = (float4 *)((char *)xq + ((tot + 255) & ~(size_t)255));
    const int k = (int)((n + 1023) / 1024);
#if defined(RF_CUDA_BUILD)
    /* a cluster of blocks a row (rf_k_rmsnorm_quantize_x_cl, the same bits) for rows of 2..8
     * slices where the rows alone would leave most SMs idle (rows x slices at most 2 blocks an
     * SM). First for rows of 8 only: on an H200 the 70B's 8,192 gained 8 us a layer (TP 1 +5.3%,
     * TP 2 +5.7%: docs/perf-gpu.md), while the 8B's 4,096 (4 blocks) gained nothing measurable
     * then. Since the MMQ takes x from these norms (x per 256: each round of the single-block
     * kernel waits on a barrier), for 2..8 (H200, 2026-12-02, qwen3-8b Q4_K_M, `bench -p 0 -n 64
     * --batch-prompt 128`, 2 rounds, the old rule as test hook RF_NORM_NOCL): 1 / 16 / 32 / 64
     * sequences 417 / 2,667 / 4,269 / 5,955 -> 428 / 2,737 / 4,359 / 5,952 tok/s. 8 is also the
     * largest portable cluster. */
    const rf_test_hooks *th = rf_test_hooks_get();
    const bool cl = ctx->info.cc_major >= 9 && k >= 2 && k <= 8 && !(th && th->gpu_norm_nocl) &&
                    (int64_t)rows * k <= 2 * (int64_t)(ctx->info.sm_count > 0 ? ctx->info.sm_count : 1);
#endif
#define RF_RQ(GB, FS, K)                                                                             \
    rf_gpu_launch(ctx, "rf_k_rmsnorm_quantize_x", true, rf_k_rmsnorm_quantize_x<GB, FS, K>,         \
                  dim3((unsigned)rows), dim3(1024), 0, h, (int8_t *)xq, dx, x, res, np, w, (int)n, eps)
#if defined(RF_CUDA_BUILD) /* the cluster kernel where it runs (K: 4 or 8, k <= K slices) */
#define RF_RQC(GB, FS, K)                                                                            \
    (cl ? rf_gpu_launch_cluster(ctx, "rf_k_rmsnorm_quantize_x_cl", true, rf_k_rmsnorm_quantize_x_cl<GB, FS, K>, \
                                dim3((unsigned)k, (unsigned)rows), dim3(1024), 0, dim3((unsigned)k, 1, 1), h,   \
                                (int8_t *)xq, dx, x, res, np, w, (int)n, eps)                                  \
        : RF_RQ(GB, FS, K))
#else
#define RF_RQC(GB, FS, K) RF_RQ(GB, FS, K)
#endif
#define RF_RQK(GB, FS) (k <= 4 ? RF_RQC(GB, FS, 4) : k <= 8 ? RF_RQC(GB, FS, 8) : RF_RQ(GB, FS, 16))
    switch (gb * 4 + rk) { /* records: rk 0 plain, 1 with f32 sums, 2 with ggml's q8_1 s, 3 x per 256 */
#if !defined(RF_HIP)
    case 7: return RF_RQK(1, 3);
#endif
    case 5: return RF_RQK(1, 1);
    case 6: return RF_RQK(1, 2);
    case 8: return RF_RQK(2, 0);
    case 9: return RF_RQK(2, 1);
    case 10: return RF_RQK(2, 2);
    case 16: return RF_RQK(4, 0);
    case 17: return RF_RQK(4, 1);
    case 18: return RF_RQK(4, 2);
    case 32: return RF_RQK(8, 0);
    case 33: return RF_RQK(8, 1);
    case 34: return RF_RQK(8, 2);
    default: return RF_RQK(1, 0);
    }
#undef RF_RQK
#undef RF_RQC
#undef RF_RQ
}

extern "C" size_t rf_gpu_xq_bytes(int64_t n_tokens, int64_t n_in) {
    const size_t n = (size_t)n_tokens * (size_t)n_in;
    return ((n + 255) & ~(size_t)255) + n / RF_QK * sizeof(float4);
}

rf_status rf_gemv_launch_quantize_x(rf_gpu_ctx *ctx, void *xq, int gb, int rk, const float *x,
                                    int nt, int64_t n_in) {
    const size_t n = (size_t)nt * (size_t)n_in;
    float4 *dx = (float4 *)((char *)xq + ((n + 255) & ~(size_t)255));
    const dim3 grid(rf_gpu_blocks(n_in, 256), (unsigned)nt), block(256);
#if !defined(RF_HIP)
    if (rk == 3) {
        if (gb != 1 || n_in % 256) return rf_set_error(RF_ERR_INVALID_ARG, "rf_k_quantize_x256: gb %d, n_in %lld", gb, (long long)n_in);
        return rf_gpu_launch(ctx, "rf_k_quantize_x256", true, rf_k_quantize_x256, grid, block, 0, (int8_t *)xq, dx, x, (int)n_in);
    }
#endif
#define RF_QX(GB, FS) rf_gpu_launch(ctx, "rf_k_quantize_x", true, rf_k_quantize_x<GB, FS>, grid, block, 0, (int8_t *)xq, dx, x, (int)n_in)
    switch (gb * 4 + rk) { /* records: rk 0 plain, 1 with f32 sums, 2 with ggml's q8_1 s (3: above) */
    case 5: return RF_QX(1, 1);
    case 6: return RF_QX(1, 2);
    case 8: return RF_QX(2, 0);
    case 9: return RF_QX(2, 1);
    case 10: return RF_QX(2, 2);
    case 16: return RF_QX(4, 0);
    case 17: return RF_QX(4, 1);
    case 18: return RF_QX(4, 2);
    case 32: return RF_QX(8, 0);
    case 33: return RF_QX(8, 1);
    case 34: return RF_QX(8, 2);
    default: return RF_QX(1, 0);
    }
#undef RF_QX
}
