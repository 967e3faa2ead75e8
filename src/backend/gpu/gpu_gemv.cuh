/* gpu_gemv.cuh — what the gpu_gemv*.cu files share: the constants, the timeline-trace macros,
 * the q32s group layout, the row stores, and each family file's entry point for the dispatcher
 * (gpu_matmul.cu). Not for callers outside the GEMV: they use gpu.h. */
#ifndef RF_GPU_GEMV_CUH
#define RF_GPU_GEMV_CUH

#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_quant.cuh"

#define RF_GEMV_WARPS 4 /* warps per block; one output row per warp */
#define RF_QK 32        /* elements per block of the 32-element formats and of quantized x */

/* ---- timeline trace (diagnostic builds: cmake -DRF_GEMV_TRACE=ON) ------------------------
 * gemv_q32s records per block the global timer at its start, past rf_pdl_wait() and at its end,
 * and its SM and grid size, in slot [call % RF_TRACE_CALLS][block]: the launch numbers its calls
 * (ctx->trace_seq, passed in rpw's high bits; a graph's nodes keep theirs, so a replay rewrites
 * the slots of the one before). Block start order does not follow call order: a PDL launch can
 * start blocks while the previous call's last blocks still wait for room. rf_gpu_trace_read
 * copies the last calls out (rf_gpu_bench -T prints a timeline summary). Off: no code. */
#if defined(RF_GEMV_TRACE)
#define RF_TRACE_CALLS 256
#define RF_TRACE_BLOCKS 2048
/* the buffer: rf_trace_buf in gpu_gemv_q32s.cu (one definition, in the file whose kernels write
 * it: no relocatable device code) */
static __device__ __forceinline__ unsigned long long rf_gtime(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
static __device__ __forceinline__ unsigned rf_smid(void) {
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}
#define RF_TRACE_START()                                                                       \
    const unsigned rf_tr_call = (unsigned)rpw >> 16;                                            \
    rpw &= 0xffff;                                                                              \
    unsigned long long rf_tr_t0 = 0, rf_tr_t1 = 0;                                              \
    if (threadIdx.x == 0) rf_tr_t0 = rf_gtime()
#define RF_TRACE_WAITED() if (threadIdx.x == 0) rf_tr_t1 = rf_gtime()
#define RF_TRACE_END()                                                                          \
    if (threadIdx.x == 0 && blockIdx.x < RF_TRACE_BLOCKS) {                                     \
        unsigned long long *rf_tr = rf_trace_buf[rf_tr_call % RF_TRACE_CALLS][blockIdx.x];      \
        rf_tr[0] = rf_tr_t0, rf_tr[1] = rf_tr_t1, rf_tr[2] = rf_gtime();                        \
        rf_tr[3] = ((unsigned long long)rf_smid() << 32) | gridDim.x;                           \
    }
#else
#define RF_TRACE_START() (void)0
#define RF_TRACE_WAITED() (void)0
#define RF_TRACE_END() (void)0
#endif

/* Groups of the q32s kernel: GB blocks of a 32-element format that are exactly NU 16-byte words
 * (Q4_0: 8 blocks = 144 bytes = 9 words; Q4_K / Q5_K: one super-block, 9 / 11 words, against 8
 * blocks of x). In a row whose bytes are a multiple of 16, every group
 * starts 16-byte aligned, so a lane reads one with NU aligned 16-byte shared-memory loads (NU is
 * odd: lanes NU words apart hit distinct banks) and every field offset in it is a compile-time
 * constant. T is the weight type, or RF_Q32_G2 + the type: Q4_0 / Q8_0 rows of an even count of
 * blocks that is not a multiple of 8 (gpt-oss's 2880 = 90 blocks, 576 = 18, 896 = 28) taken in
 * groups of 2 blocks (36 / 68 bytes: an odd count N4 of 4-byte words, so groups start 4-byte
 * aligned in a stage and lanes N4 words apart hit distinct banks). */
#define RF_Q32_G2 64                          /* above every rf_type */
#define RF_Q32_WT(T) ((T) % RF_Q32_G2)        /* the weight type of a q32s format */
template <int T> struct rf_q32_group {
    static constexpr int W = RF_Q32_WT(T);
    static constexpr bool G2 = T >= RF_Q32_G2;
    /* the x records carry the f32 sum of each block of x (16 bytes, else 8) */
    static constexpr bool FS = W == RF_TYPE_Q4_1 || W == RF_TYPE_Q5_1 || W == RF_TYPE_Q4_K ||
                               W == RF_TYPE_Q5_K || W == RF_TYPE_Q6_K;
    /* bytes per 32 elements (Q4_K / Q5_K: a 256-element super-block of 144 / 176 bytes is the
     * group; Q6_K: one of 210 bytes, so groups start at any even byte) */
    static constexpr int BB = W == RF_TYPE_Q4_0 ? 18 : W == RF_TYPE_Q4_1 ? 20 : W == RF_TYPE_Q5_0 ? 22
                            : W == RF_TYPE_Q5_1 ? 24 : W == RF_TYPE_Q4_K ? 18 : W == RF_TYPE_Q5_K ? 22
                            : W == RF_TYPE_Q6_K ? 0 /* not used */ : 34;
    static constexpr int GB = G2 ? 2 : W == RF_TYPE_Q4_1 ? 4 : W == RF_TYPE_Q5_1 ? 2 : 8; /* blocks */
    static constexpr int GBYTES = W == RF_TYPE_Q6_K ? 210 : GB * BB;                    /* bytes */
    static constexpr int NU = G2 ? 0 : GB * BB / 16; /* 16-byte words (Q6_K, G2: 0, not used) */
    static constexpr int N4 = G2 ? GBYTES / 4 : 0;   /* G2: 4-byte words */
    static_assert(W == RF_TYPE_Q6_K || (G2 && (W == RF_TYPE_Q4_0 || W == RF_TYPE_Q8_0) && N4 % 2 == 1) ||
                      (!G2 && GB * BB % 16 == 0 && NU % 2 == 1),
                  "a group: an odd number of 16-byte words (G2: of 4-byte words)");
};

/* the blocks per group of the q32s kernel for a 32-element format and rows of n_in, 0 for others
 * (Q4_0 / Q8_0: 8, or 2 where the row's blocks are even but not a multiple of 8, RF_Q32_G2) */
static inline int rf_q32s_gb(rf_type t, int64_t n_in) {
    const int64_t nb = n_in / 32;
    switch (t) {
    case RF_TYPE_Q4_0: return nb % 8 && nb % 2 == 0 ? 2 : rf_q32_group<RF_TYPE_Q4_0>::GB;
    case RF_TYPE_Q4_1: return rf_q32_group<RF_TYPE_Q4_1>::GB;
    case RF_TYPE_Q5_0: return rf_q32_group<RF_TYPE_Q5_0>::GB;
    case RF_TYPE_Q5_1: return rf_q32_group<RF_TYPE_Q5_1>::GB;
    case RF_TYPE_Q8_0: return nb % 8 && nb % 2 == 0 ? 2 : rf_q32_group<RF_TYPE_Q8_0>::GB;
    case RF_TYPE_Q4_K: return rf_q32_group<RF_TYPE_Q4_K>::GB;
    case RF_TYPE_Q5_K: return rf_q32_group<RF_TYPE_Q5_K>::GB;
    case RF_TYPE_Q6_K: return rf_q32_group<RF_TYPE_Q6_K>::GB;
    default: return 0;
    }
}

/* Shared tail of the one-row-per-warp-group GEMVs (f16, K-quants): y[t, row] = the sum of acc[t]
 * over the group's WPR warps (through red when WPR > 1), for t < nt. Every thread of the block
 * calls it (it holds a barrier when WPR > 1); only valid rows are written. */
template <int NTMAX, int WPR>
static __device__ __forceinline__ void rf_gemv_store(float *y, const float *acc,
                                                     float (*red)[NTMAX], int nt, int64_t row,
                                                     int64_t n_out, bool valid) {
    const int G = WPR * RF_WARP_SIZE, gl = threadIdx.x % G, grp = threadIdx.x / G;
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (t >= nt) break;
        float v = rf_warp_sum(acc[t]);
        if (WPR > 1) {
            if (lane == 0) red[warp][t] = v;
            __syncthreads();
            v = 0.0f;
            for (int k = 0; k < WPR; k++) v += red[grp * WPR + k][t];
        }
        if (valid && gl == 0) y[t * n_out + row] = v;
    }
}

#if !defined(RF_HIP)
/* The end of the 16-row tensor-core GEMV gemv_tc: each of the NW warps holds an
 * m16n8 f32 fragment of partial sums (lane (g, c): rows g, g + 8 by tokens 2c, 2c + 1); they are
 * added in warp order (deterministic) and tokens < nt of rows < n_out stored to y [nt, n_out]. */
template <int NW>
static __device__ __forceinline__ void rf_mma_tile_store(float (*red)[16][8], const float *acc,
                                                         float *y, int nt, int64_t r0, int64_t n_out) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    red[warp][g][2 * c] = acc[0], red[warp][g][2 * c + 1] = acc[1];
    red[warp][g + 8][2 * c] = acc[2], red[warp][g + 8][2 * c + 1] = acc[3];
    __syncthreads();
    for (int i = threadIdx.x; i < 16 * 8; i += NW * 32) {
        const int row = i / 8, n = i % 8;
        float s = 0.0f;
#pragma unroll
        for (int v = 0; v < NW; v++) s += red[v][row][n];
        if (n < nt && r0 + row < n_out) y[(int64_t)n * n_out + r0 + row] = s;
    }
}
#endif

/* ---- the family files' entry points (each switches on t to its kernels' instantiations) ---- */

/* gpu_gemv_xq.cu: rf_k_quantize_x into xq (qx, then the records at rf_gpu_xq_bytes' offset) in
 * the x order of groups of gb blocks, fs: records with the f32 sums */
/* ... and fused with the RMSNorm before it: h = rmsnorm(x) * w written as f32 and quantized
 * (rows tokens, n <= 16384 a multiple of 32); res (or NULL): np arrays of rows x n, summed in
 * order and added to x first (np 1..8) */
/* the x order (gb) and record kind (rk) that rf_gpu_rmsnorm_quantize_x writes for a product of
 * (wtype, n_tokens, n_in), checked as it checks (gpu_matmul.cu): for kernels elsewhere that
 * quantize a product's x themselves (gpu_tp_p2p.cu) */
rf_status rf_gpu_xq_plan(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in, int *gb, int *rk);
rf_status rf_gemv_launch_rmsnorm_quantize_x(rf_gpu_ctx *ctx, float *h, void *xq, int gb, int rk, float *x,
                                            const float *res, int np, const float *w, int rows, int64_t n,
                                            float eps);
/* ... and fused with the GLU before it: y = act(gate) * up written as f32 and quantized */
rf_status rf_gemv_launch_glu_quantize_x(rf_gpu_ctx *ctx, float *y, void *xq, int gb, int rk, bool geglu,
                                        const float *gate, int64_t gs, const float *up, int64_t us, int rows,
                                        int64_t n);
/* ... alone (rk 3, gb 1, CUDA: one scale per 256, rf_k_quantize_x256, the MMQ's K-quant x) */
rf_status rf_gemv_launch_quantize_x(rf_gpu_ctx *ctx, void *xq, int gb, int rk, const float *x,
                                    int nt, int64_t n_in);
/* gpu_gemv_q32.cu: gemv_q32 (variants 1..3; HIP's only int8-x kernel), Q4_0 .. Q8_0; bias: NULL,
 * or one f32 per output row added in the kernel's store (as the q32s launch's) */
rf_status rf_gemv_launch_q32(rf_gpu_ctx *ctx, int v, float *y, const uint8_t *w, rf_type t,
                             const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                             int64_t n_out, int64_t rb, const float *bias);
#if !defined(RF_HIP)
/* gpu_gemv_q32s.cu: gemv_q32s / gemv_q32h (variants 4..23; 24: as 7), the 32-element formats and
 * Q4_K / Q5_K / Q6_K */
rf_status rf_gemv_launch_q32s(rf_gpu_ctx *ctx, int v, float *y, const uint8_t *w, rf_type t,
                              const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                              int64_t n_out, int64_t rb, bool whole, const float *bias);
/* gpu_gemv_mt.cu: gemv_mt, 2..16 tokens of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K / Q6_K
 * on the int8 tensor cores; x from rf_k_quantize_x with gb = 1 (in order) at xq (rf_gpu_xq_bytes' layout).
 * rf_gemv_mt_ok: the kernel takes (t, n_in) on this device (sm_80+, whole chunks of 256
 * elements, Q6_K rows of 2048, its stages fit); rf_gemv_mt_warps_per_row: the warps it puts along a row
 * for the shape (1, 2, 4 or 8; variants 27..30 force them) */
bool rf_gemv_mt_ok(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in);
int rf_gemv_mt_warps_per_row(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n_out);
rf_status rf_gemv_launch_mt(rf_gpu_ctx *ctx, rf_type t, float *y, const uint8_t *w, const void *xq, int nt,
                            int64_t n_in, int64_t n_out, int64_t rb);
/* gpu_gemv_f16.cu: gemv_tc (2..8 tokens of F16 / BF16, n_in a multiple of 32, sm_80+) */
rf_status rf_gemv_launch_tc(rf_gpu_ctx *ctx, rf_type t, float *y, const uint8_t *w, const float *x,
                            int nt, int64_t n_in, int64_t n_out);
#endif
/* gpu_gemv_f16.cu: gemv_f16 (F16 / BF16, n_in a multiple of 8; F32, n_in a multiple of 4) */
rf_status rf_gemv_launch_f16(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, rf_type t,
                             float *y, const uint8_t *w, const float *x, int nt, int64_t n_in,
                             int64_t n_out);
/* gpu_gemv_k.cu: gemv_k / gemv_k45 (Q4_K / Q5_K / Q6_K with f32 x) */
rf_status rf_gemv_launch_k(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, rf_type t,
                           float *y, const uint8_t *w, const float *x, int nt, int64_t n_in,
                           int64_t n_out, int64_t rb);
/* gpu_gemv_generic.cu: gemv_generic (any type with a device decoder) */
rf_status rf_gemv_launch_generic(rf_gpu_ctx *ctx, unsigned grid, unsigned threads, rf_type t,
                                 float *y, const uint8_t *w, const float *x, int nt, int64_t n_in,
                                 int64_t n_out, int64_t rb, int bs, int bb);
#if defined(RF_GEMV_TRACE)
/* gpu_matmul.cu: the last calls' slots of a trace buffer (rf_gpu_trace_read) */
rf_status rf_trace_copy(rf_gpu_ctx *ctx, const void *sym, int cap, size_t per, uint64_t *out,
                        int max_calls, int *ncalls);
#endif

/* One element's share of rf_k_quantize_x<GB, RK> (gpu_gemv_xq.cu: the layouts and records): v is
 * element i of token tok; lane = its place in the group (the group is 32 consecutive lanes of one
 * warp, all present, v = 0 past n_in). Here so that the kernels which fold the quantization into
 * their epilogue (rmsnorm_quantize_x, the MoE kernels) write the same bits as rf_k_quantize_x. */
template <int GB, int RK>
static __device__ __forceinline__ void rf_quantize_elem(int8_t *qx, float4 *dx, float v, int i, int n_in,
                                                        int tok, int lane) {
    constexpr bool FS = RK >= 1; /* 16-byte records; RK 2: their sum is ggml's q8_1 s (below) */
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
    const int h = lane / 16, c = lane % 16;
    const int unit = GB == 1 ? 2 * b + h : (2 * j + h) * ng + g; /* < 2^24: n_in < 2^28 */
    if (i < n_in) qx[(int64_t)tok * n_in + unit * 16 + c] = (int8_t)q;
    const int64_t r = (int64_t)tok * (n_in / RF_QK) + (GB == 1 ? b : j * ng + g);
    if (i < n_in && lane == 0) {
        /* RK 2 (Q4_1 / Q5_1 weights): the record's sum is s = f16(amax / 127 * sum q), ggml's
         * q8_1 s and the CPU twin's, so the minimum term m * s is the CPU's exactly */
        const float s32 = d32 * (float)qs, s16 = __half2float(__float2half(s32));
        const float rs = RK == 2 ? (sum != sum ? sum : fabsf(s16) <= 65504.0f ? s16 : s32) : sum; /* as d */
        if (FS) dx[r] = make_float4(d, __int_as_float(qs), rs, __int_as_float(qlo));
        else ((float2 *)dx)[r] = make_float2(d, __int_as_float(qs));
    }
}

#endif
