/* gpu_gemv.cu — quantized matrix-vector products for decode (1..8 tokens): y = W x with W in
 * ggml block layout streamed once from device memory with 16-byte loads, several in flight per
 * lane. Twin: rf_ref_matmul (dequantize row, accumulate in double). */
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
__device__ unsigned long long rf_trace_buf[RF_TRACE_CALLS][RF_TRACE_BLOCKS][4];
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
/* gemv_mma: warp 0 of each block stamps its start, release, then per chunk k < 6 the moment
 * chunk k has landed and the moment its decode ends, then its end (slot [call % 64][block]) */
#define RF_TRACE_MMA_CALLS 64
#define RF_TRACE_MMA_BLOCKS 1024
__device__ unsigned long long rf_trace_mma[RF_TRACE_MMA_CALLS][RF_TRACE_MMA_BLOCKS][16];
#define RF_TRACE_MMA(i)                                                                         \
    if (threadIdx.x == 0 && blockIdx.x < RF_TRACE_MMA_BLOCKS)                                   \
    rf_trace_mma[rf_tr_call % RF_TRACE_MMA_CALLS][blockIdx.x][i] = rf_gtime()
#else
#define RF_TRACE_MMA(i) (void)0
#define RF_TRACE_START() (void)0
#define RF_TRACE_WAITED() (void)0
#define RF_TRACE_END() (void)0
#endif

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

/* bit 4 of each byte of a packed 4-element word from 4 consecutive bits of qh starting at sh */
static __device__ __forceinline__ int rf_qh4(uint32_t qh, int sh) {
    qh >>= sh;
    return (int)(((qh & 1u) << 4) | ((qh & 2u) << 11) | ((qh & 4u) << 18) | ((qh & 8u) << 25));
}

/* Dot of one 32-element block with one token's quantized x (xi: 8 packed int8x4, dxd: its scale,
 * sxi: the sum of its int8 values, fsum: the sum of its f32 values, used by Q4_1 / Q5_1 only).
 * The block sits at a 2-byte boundary: aw points at the 4-byte word holding its first byte, o
 * (0 or 2) is that byte's offset in it (OC: o as a compile-time constant, -1: not known then;
 * known, the aligned fields are plain words and no byte_perm is spent on them; HI16: the high
 * nibbles are taken in place as 16 q with an unsigned-byte dp4a, one mask instead of shift and
 * mask: faster in gemv_q32s, slower in gemv_q32 on the H100);
 * the block is read with aligned 32-bit loads and each field realigned with one byte_perm
 * (16-bit loads cost twice the shared-memory wavefronts, and this kernel is bound by them).
 * Integer sums are exact, so the offset c is taken off once: sum (q - c) x = sum q x - c sum x
 * over the int8 x; Q4_1 / Q5_1: sum (d q + m) x = d sum (q - c) x + (m + c d) sum x. */
template <int T, int OC = -1, bool HI16 = false>
static __device__ __forceinline__ float rf_q32_dot(const uint32_t *aw, int o, const int *xi,
                                                   float dxd, int sxi, float fsum) {
    constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : T == RF_TYPE_Q4_1 ? 20 : T == RF_TYPE_Q5_0 ? 22
                     : T == RF_TYPE_Q5_1 ? 24 : 34;
    constexpr int NWD = (BB + 2 + 3) / 4; /* words covering bytes [o, o + BB) for o <= 2 */
    uint32_t a[NWD + 1];
#pragma unroll
    for (int k = 0; k < NWD; k++) a[k] = aw[k];
    a[NWD] = 0; /* only ever selected with zero bytes taken from it */
    /* the 4 bytes at block offset f (f a compile-time constant once unrolled) */
    auto fw = [&](int f) -> uint32_t {
        if (OC >= 0) {
            const int b = OC + f; /* compile-time once unrolled */
            return b % 4 == 0 ? a[b / 4] : __byte_perm(a[b / 4], a[b / 4 + 1], 0x3210u + (unsigned)(b % 4) * 0x1111u);
        }
        return __byte_perm(a[f / 4], a[f / 4 + 1], 0x3210u + (unsigned)(o + f % 4) * 0x1111u);
    };
    const float d = rf_h2f_bits((uint16_t)(fw(0) & 0xFFFFu));
    int s = 0;
    if (T == RF_TYPE_Q8_0) {
#pragma unroll
        for (int k = 0; k < 8; k++) s = rf_dp4a((int)fw(2 + 4 * k), xi[k], s);
        return d * dxd * (float)s;
    }
    constexpr int QO = T == RF_TYPE_Q4_0 ? 2 : T == RF_TYPE_Q4_1 ? 4 : T == RF_TYPE_Q5_0 ? 6 : 8;
    uint32_t qh = 0;
    if (T == RF_TYPE_Q5_0) qh = fw(2);
    if (T == RF_TYPE_Q5_1) qh = fw(4);
    if (HI16 && (T == RF_TYPE_Q4_0 || T == RF_TYPE_Q4_1)) {
        /* high nibbles in place (16 q) with unsigned bytes: one mask instead of shift and mask */
        int sh = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t q = fw(QO + 4 * k);
            s = rf_dp4a((int)(q & 0x0F0F0F0Fu), xi[k], s);
            sh = rf_dp4a_us(q & 0xF0F0F0F0u, xi[4 + k], sh);
        }
        s += sh >> 4; /* exact: sh is 16 times an integer */
    }
#pragma unroll
    for (int k = 0; k < 4 && !(HI16 && (T == RF_TYPE_Q4_0 || T == RF_TYPE_Q4_1)); k++) {
        const uint32_t q = fw(QO + 4 * k);
        int lo = (int)(q & 0x0F0F0F0Fu), hi = (int)((q >> 4) & 0x0F0F0F0Fu);
        if (T == RF_TYPE_Q5_0 || T == RF_TYPE_Q5_1) {
            lo |= rf_qh4(qh, 4 * k);
            hi |= rf_qh4(qh, 16 + 4 * k);
        }
        s = rf_dp4a(lo, xi[k], s);
        s = rf_dp4a(hi, xi[4 + k], s);
    }
    /* centre q on c (8 / 16) in exact integers: the int8 rounding error of x then scales with
     * |q - c|, not |q|; Q4_1 / Q5_1 add the minimum back on the exact f32 sum of x (more exact
     * than ggml's q8_1 s = f16(d * sum q), which the CPU uses: tried, and on blocks with large
     * minimums it broke the 1e-2 tolerance against the f32 reference) */
    constexpr int C = T == RF_TYPE_Q4_0 || T == RF_TYPE_Q4_1 ? 8 : 16;
    const float sc = d * dxd * (float)(s - C * sxi);
    if (T == RF_TYPE_Q4_0 || T == RF_TYPE_Q5_0) return sc;
    const float m = rf_h2f_bits((uint16_t)(fw(2) & 0xFFFFu));
    return sc + (m + (float)C * d) * fsum;
}

/* gemv_q32: y[t, o] = sum_i W[o, i] x[t, i] for W in a 32-element block format T.
 * in: w rows of row_bytes (ggml layout, readable 16 bytes past the end: rf_gpu_alloc pads);
 *     qx int8 [nt, n_in] and dx [nt, n_in/32] from rf_k_quantize_x (GB 1); 1 <= nt <= NTMAX.
 * out: y f32 [nt, n_out]. launch: NW warps per block; a group of WPR warps owns R consecutive
 * rows, warp k of the group taking stages k, k + WPR, ... (more warps per SM hide more latency).
 * A stage is one block per lane and row. Each warp streams its stages through a ring of S
 * shared-memory slots (the stage's bytes, a multiple of 16, plus 16 of slack because 18/20/22/
 * 24/34-byte blocks leave a row start anywhere in a 16-byte word): S stages of aligned 16-byte
 * cp.async copies are in flight while the oldest is decoded. A lane's x (two 16-byte loads and
 * its scale per token, loaded one stage ahead when nt is 1) serves all R rows: x costs more load
 * bandwidth than the weights (32 + 8 bytes per 18-byte Q4_0 block), so sharing it keeps the
 * kernel off the load-store limit. The first S stages are issued before rf_pdl_wait() (w must
 * not be written by work still in flight on the stream).
 * tolerance vs rf_ref_matmul: rel. L2 < 1e-2 (x is quantized to int8 per 32). */
template <int T, int NTMAX, int R, int S, int WPR, int NW>
__global__ void __launch_bounds__(NW * RF_WARP_SIZE)
rf_k_gemv_q32(float *y, const uint8_t *w, const int8_t *qx, const float4 *dx, int nt,
              int64_t n_in, int64_t n_out, int64_t row_bytes) {
    constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : T == RF_TYPE_Q4_1 ? 20 : T == RF_TYPE_Q5_0 ? 22
                     : T == RF_TYPE_Q5_1 ? 24 : 34;
    constexpr int G = RF_WARP_SIZE;                /* lanes = blocks per stage and row */
    static_assert((G * BB) % 16 == 0, "a stage must be whole 16-byte words");
    static_assert(NW % WPR == 0, "whole warp groups per block");
    constexpr int STEP = G * BB / 16;              /* 16-byte words per stage and row */
    constexpr int SU4 = STEP + 1;                  /* plus the slack word */
    constexpr int LPR = (SU4 + G - 1) / G;         /* copies per lane, stage and row */
    __shared__ uint4 ring[NW][S][R][SU4];
    __shared__ float red[WPR > 1 ? NW : 1][R][NTMAX];
    const int lane = threadIdx.x % G, warp = threadIdx.x / G;
    const int wg = warp % WPR; /* this warp's place in its group */
    const int64_t row0 = ((int64_t)blockIdx.x * (NW / WPR) + warp / WPR) * R;
    const int nb = (int)(n_in / RF_QK), nst = (nb + G - 1) / G;
    const uint4 *src[R];
    int nu4[R];
    uint32_t boff[R]; /* byte offset of this lane's block in a slot: shift + lane * BB */
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = row0 + r < n_out ? row0 + r : n_out - 1; /* rows past the end: a
                                                  harmless duplicate, keeps the lanes together */
        const uint8_t *wr = w + row * row_bytes;
        const int shift = (int)((uintptr_t)wr & 15); /* even: w 16-aligned, row_bytes even */
        src[r] = (const uint4 *)(wr - shift);
        nu4[r] = (shift + nb * BB + 15) / 16; /* words covering the row (n_in < 2^31 checked) */
        boff[r] = (uint32_t)(shift + lane * BB);
    }
    auto issue = [&](int k) { /* this warp's k-th stage, into slot k % S */
        const int base = (wg + k * WPR) * STEP;
#pragma unroll
        for (int r = 0; r < R; r++) {
            uint4 *dst = ring[warp][k % S][r];
#pragma unroll
            for (int l = 0; l < LPR; l++) {
                const int idx = l * G + lane;
                if ((LPR == 1 || idx < SU4) && base + idx < nu4[r]) rf_cp_async16(&dst[idx], &src[r][base + idx]);
            }
        }
        rf_cp_async_commit(); /* one group per stage, empty or not: the wait count relies on it */
    };
    const int nk = (nst - wg + WPR - 1) / WPR; /* stages of this warp */
#pragma unroll
    for (int k = 0; k < S; k++) {
        if (k < nk) issue(k);
        else rf_cp_async_commit();
    }
    rf_pdl_trigger();
    rf_pdl_wait();
    float acc[R][NTMAX];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NTMAX; t++) acc[r][t] = 0.0f;
    /* x of token 0 for a block, loaded a stage ahead of its use when NTMAX == 1 */
    int4 nx0 = make_int4(0, 0, 0, 0), nx1 = nx0;
    float4 ndx = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    constexpr bool FS = T == RF_TYPE_Q4_1 || T == RF_TYPE_Q5_1; /* dx records: float4, else float2 */
    auto ldx = [&](int64_t i) -> float4 {
        if (FS) return dx[i];
        const float2 v = ((const float2 *)dx)[i];
        return make_float4(v.x, v.y, 0.0f, 0.0f);
    };
    auto load_x = [&](int bi) {
        if (bi < nb) {
            const int4 *xp = (const int4 *)(qx + (int64_t)bi * RF_QK);
            nx0 = xp[0], nx1 = xp[1], ndx = ldx(bi);
        }
    };
    if (NTMAX == 1) load_x(wg * G + lane);
    for (int k = 0; k < nk; k++) {
        const int bi = (wg + k * WPR) * G + lane;
        int4 x0 = nx0, x1 = nx1;
        float4 dxv = ndx;
        if (NTMAX == 1) load_x(bi + WPR * G);
        rf_cp_async_wait<S - 1>(); /* this lane's copies of stage k have landed */
        RF_SYNCWARP();             /* ... and every lane's are visible */
        if (bi < nb) {
            const uint8_t *slot = (const uint8_t *)ring[warp][k % S];
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                if (t >= nt) break;
                if (NTMAX > 1) {
                    const int4 *xp = (const int4 *)(qx + t * n_in + (int64_t)bi * RF_QK);
                    x0 = xp[0], x1 = xp[1], dxv = ldx((int64_t)t * nb + bi);
                }
                const int xi[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                const int sxi = __float_as_int(dxv.y);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t *aw = (const uint32_t *)(slot + r * SU4 * 16 + (boff[r] & ~3u));
                    acc[r][t] += rf_q32_dot<T>(aw, (int)(boff[r] & 3u), xi, dxv.x, sxi, dxv.z);
                }
            }
        }
        RF_SYNCWARP(); /* the slot is read by all lanes before it is refilled */
        if (k + S < nk) issue(k + S);
        else rf_cp_async_commit();
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NTMAX; t++) {
            if (t >= nt) break;
            float v = rf_warp_sum(acc[r][t]);
            if (WPR > 1) {
                if (lane == 0) red[warp][r][t] = v;
            } else if (row0 + r < n_out && lane == 0) {
                y[t * n_out + row0 + r] = v;
            }
        }
    if (WPR > 1) {
        __syncthreads();
        if (wg == 0 && lane < R * NTMAX) {
            const int r = lane / NTMAX, t = lane % NTMAX;
            float v = 0.0f;
            for (int j = 0; j < WPR; j++) v += red[warp + j][r][t];
            if (t < nt && row0 + r < n_out) y[t * n_out + row0 + r] = v;
        }
    }
}

/* Groups of the q32s kernel: GB blocks of a 32-element format that are exactly NU 16-byte words
 * (Q4_0: 8 blocks = 144 bytes = 9 words; Q4_K / Q5_K: one super-block, 9 / 11 words, against 8
 * blocks of x). In a row whose bytes are a multiple of 16, every group
 * starts 16-byte aligned, so a lane reads one with NU aligned 16-byte shared-memory loads (NU is
 * odd: lanes NU words apart hit distinct banks) and every field offset in it is a compile-time
 * constant. */
template <int T> struct rf_q32_group {
    /* the x records carry the f32 sum of each block of x (16 bytes, else 8) */
    static constexpr bool FS = T == RF_TYPE_Q4_1 || T == RF_TYPE_Q5_1 || T == RF_TYPE_Q4_K ||
                               T == RF_TYPE_Q5_K || T == RF_TYPE_Q6_K;
    /* bytes per 32 elements (Q4_K / Q5_K: a 256-element super-block of 144 / 176 bytes is the
     * group; Q6_K: one of 210 bytes, so groups start at any even byte: rows of 8k super-blocks) */
    static constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : T == RF_TYPE_Q4_1 ? 20 : T == RF_TYPE_Q5_0 ? 22
                            : T == RF_TYPE_Q5_1 ? 24 : T == RF_TYPE_Q4_K ? 18 : T == RF_TYPE_Q5_K ? 22
                            : T == RF_TYPE_Q6_K ? 0 /* not used */ : 34;
    static constexpr int GB = T == RF_TYPE_Q4_1 ? 4 : T == RF_TYPE_Q5_1 ? 2 : 8; /* blocks */
    static constexpr int GBYTES = T == RF_TYPE_Q6_K ? 210 : GB * BB;            /* bytes */
    static constexpr int NU = GB * BB / 16; /* 16-byte words (Q6_K: 0, not used) */
    static_assert(T == RF_TYPE_Q6_K || (GB * BB % 16 == 0 && NU % 2 == 1),
                  "a group: an odd number of 16-byte words");
};

/* Q6_K super-block (128 bytes of low nibbles ql, 64 of high bit pairs qh, 16 int8 scales, f16 d)
 * as 53 aligned words w against 8 blocks of int8 x (xi, dxd, sxi as for rf_qk_dot; slo[b]: the
 * sum of block b's first 16 int8 values): block b = 4 h + k (half h, quarter k) takes nibble
 * k / 2 of ql bytes 64 h + 32 (k & 1) + l and bits 2k, 2k + 1 of qh byte 32 h + l, value q - 32;
 * its two 16-element halves have scales 8 h + 2 k and 8 h + 2 k + 1. The offset 32 is taken off
 * in exact integers: sum (q - 32) x = sum q x - 32 sum x per half. */
static __device__ __forceinline__ float rf_q6k_dot(const uint32_t *w, const int (*xi)[8],
                                                   const float *dxd, const int *sxi,
                                                   const int *slo) {
    float acc = 0.0f;
#pragma unroll
    for (int b = 0; b < 8; b++) {
        const int h = b / 4, k = b % 4;
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint32_t lw = w[16 * h + 8 * (k & 1) + j], hw = w[32 + 8 * h + j];
            const uint32_t lo = (k >> 1) ? (lw >> 4) : lw;
            const uint32_t hi = k == 0 ? hw << 4 : k == 1 ? hw << 2 : k == 2 ? hw : hw >> 2;
            const int q = (int)((lo & 0x0F0F0F0Fu) | (hi & 0x30303030u));
            if (j < 4) s0 = rf_dp4a(q, xi[b][j], s0);
            else s1 = rf_dp4a(q, xi[b][j], s1);
        }
        const int si = 8 * h + 2 * k; /* scale bytes 192 + si, 192 + si + 1 (si even) */
        const uint32_t sw = w[48 + si / 4] >> (8 * (si % 4));
        const int sc0 = (int)(int8_t)(sw & 0xFFu), sc1 = (int)(int8_t)((sw >> 8) & 0xFFu);
        const int lo16 = slo[b], hi16 = sxi[b] - slo[b];
        acc += dxd[b] * (float)(sc0 * (s0 - 32 * lo16) + sc1 * (s1 - 32 * hi16));
    }
    return rf_h2f_bits((uint16_t)(w[52] & 0xFFFFu)) * acc;
}

/* Q4_K super-block (d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles) as 36
 * aligned words w (Q5: Q5_K, 44 words, 32 bytes of fifth bits before the nibbles, q centred on
 * 16) against 8 blocks of int8 x (xi[b]: 8 packed words, dxd[b] its scale, sxi[b]
 * the sum of its int8 values, fsum[b] of its f32 values): over sub-blocks b, sum (d sc_b q -
 * dmin m_b) x = d sc_b dx_b sum (q - 8) xi + (8 d sc_b - dmin m_b) fsum_b, q centred in exact
 * integers as for Q4_1 (the int8 error then scales with |q - 8|). Sub-block 2j is the low nibbles
 * of bytes 32j..32j+31, 2j+1 their high nibbles (ggml's layout). */
template <bool Q5>
static __device__ __forceinline__ float rf_qk_dot(const uint32_t *w, const int (*xi)[8],
                                                  const float *dxd, const int *sxi,
                                                  const float *fsum) {
    const float d = rf_h2f_bits((uint16_t)(w[0] & 0xFFFFu)), dmin = rf_h2f_bits((uint16_t)(w[0] >> 16));
    constexpr int QS = Q5 ? 12 : 4; /* first word of the nibbles (Q5_K: after 32 bytes of qh) */
    constexpr int C = Q5 ? 16 : 8;  /* centre of q */
    /* scales bytes 0..11 = words 1..3: sc/m 0-3 in bytes 0-3 / 4-7 (low 6 bits), 4-7 from bytes
     * 8-11 (low / high nibble) plus the top 2 bits of bytes 0-3 / 4-7 */
    const uint32_t a = w[1], b = w[2], c = w[3];
    const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int s0 = 0, s1 = 0, h0 = 0, h1 = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint32_t q = w[QS + 8 * j + k];
            s0 = rf_dp4a((int)(q & 0x0F0F0F0Fu), xi[2 * j][k], s0);
            s1 = rf_dp4a_us(q & 0xF0F0F0F0u, xi[2 * j + 1][k], s1);
            if (Q5) { /* the fifth bits: qh byte l, bit 2j (low nibbles) and 2j + 1 (high) */
                const uint32_t h = w[4 + k];
                h0 = rf_dp4a((int)((h >> (2 * j)) & 0x01010101u), xi[2 * j][k], h0);
                h1 = rf_dp4a((int)((h >> (2 * j + 1)) & 0x01010101u), xi[2 * j + 1][k], h1);
            }
        }
        s1 >>= 4; /* exact: 16 times an integer */
        if (Q5) s0 += 16 * h0, s1 += 16 * h1;
        const int b0 = 2 * j, b1 = 2 * j + 1;
        const uint32_t scw = b0 < 4 ? sc_lo : sc_hi, mw = b0 < 4 ? m_lo : m_hi;
        const int sh0 = 8 * (b0 % 4), sh1 = 8 * (b1 % 4);
        const float sc0 = (float)((scw >> sh0) & 0xFF), sc1 = (float)((scw >> sh1) & 0xFF);
        const float m0 = (float)((mw >> sh0) & 0xFF), m1 = (float)((mw >> sh1) & 0xFF);
        acc += d * (sc0 * dxd[b0] * (float)(s0 - C * sxi[b0]) + sc1 * dxd[b1] * (float)(s1 - C * sxi[b1])) +
               ((float)C * d * sc0 - dmin * m0) * fsum[b0] + ((float)C * d * sc1 - dmin * m1) * fsum[b1];
    }
    return acc;
}

#if !defined(RF_HIP) /* cp.async with converted addresses, 32-lane ballots: CUDA only */
/* A warp's weight ring (gemv_q32s, gemv_q32h): the warp streams a contiguous run of `words`
 * 16-byte words in stages of SLOT words through S shared-memory slots with cp.async, lane l
 * copying words l, l + WS, ... of each stage. issue() sends the next stage to the next slot and
 * commits one cp.async group, an empty one past the run, so after each issue()
 * rf_cp_async_wait<S - 1>() means the stage issued S calls earlier has landed. The run must not
 * be written by work in flight (the first S stages are issued before rf_pdl_wait()). */
template <int SLOT, int S> struct rf_wring {
    const char *src; /* this lane's first word of the next stage */
    unsigned sa;     /* its word in slot 0 (shared-memory address) */
    int lane, left, slot; /* words left from the next stage on, and its slot */
    __device__ __forceinline__ rf_wring(const void *run, uint4 *slot0, int words, int lane_)
        : src((const char *)run + lane_ * 16), sa(rf_smem_addr(slot0) + (unsigned)lane_ * 16),
          lane(lane_), left(words), slot(0) {}
    __device__ __forceinline__ void issue() {
        constexpr int WS = RF_WARP_SIZE, NC = (SLOT + WS - 1) / WS;
        const unsigned s = sa + (unsigned)(slot * SLOT * 16);
        if (left >= SLOT) { /* a whole stage: no per-copy test where SLOT is a multiple of WS */
#pragma unroll
            for (int m = 0; m < NC; m++)
                if ((m + 1) * WS <= SLOT || lane + m * WS < SLOT) rf_cp_async16_s(s + m * WS * 16, src + m * WS * 16);
        } else {
#pragma unroll
            for (int m = 0; m < NC; m++)
                if (lane + m * WS < left) rf_cp_async16_s(s + m * WS * 16, src + m * WS * 16);
        }
        rf_cp_async_commit();
        src += SLOT * 16;
        left -= SLOT;
        slot = slot + 1 == S ? 0 : slot + 1;
    }
};

/* gemv_q32s: the same product as gemv_q32 for rows of whole groups (rf_q32_group; rf_gpu_gemv
 * checks row_bytes % 16 == 0). Such rows lie back to back as one run of groups, so warp w takes
 * rows [w * rpw, w * rpw + rpw) as one contiguous run of rpw * ng groups (ng per row) and streams
 * it in stages of RF_WARP_SIZE groups, one per lane: coalesced 16-byte cp.async copies into a
 * ring of S slots per warp (the first S stages issued before rf_pdl_wait(): w must not be written
 * by work in flight on the stream), each lane decoding its group from shared memory. No lane
 * idles whatever ng is, except in a warp's last stage. Row sums, all in a fixed order
 * (deterministic): stages of whole rows (ng divides 32) sum each row over its ng lanes; with
 * ng >= 32 a stage holds parts of at most two rows, which each lane keeps apart until the first
 * ends (then one warp sum); otherwise a segmented shuffle reduction sums each row's lanes in the
 * stage, a row running on into the next stage is carried over in a register.
 * Q4_K / Q5_K: a group is one super-block, decoded by rf_qk_dot against its 8 blocks of x;
 * Q6_K likewise (rf_q6k_dot), its 210-byte super-blocks read with aligned 32-bit shared loads
 * and one byte_perm per word (a group starts at an even byte; rows of 8k super-blocks).
 * x is int8 per 32 from rf_k_quantize_x with gb = GB (lanes taking the j-th block of
 * consecutive groups read consecutive 16-byte words of it). With XS (one token) each block first
 * copies x into shared memory (rf_q32s_smem: after the rings; per block of 32 the scale and int
 * sum, plus the f32 sum for Q4_1 / Q5_1), so the decode waits on shared-memory loads only;
 * otherwise x is read from global memory. The rings are static shared memory (<= 48 KB), x
 * dynamic (the launch passes its size).
 * (Quantizing x in every block instead, from the f32 x, was measured: 1.3-2x slower.)
 * XR (one token, NG dividing the warp): a lane's group is the same in every stage, so its x is
 * loaded into registers once, before the loop. MINB: __launch_bounds__'s blocks per SM (0: none).
 * launch: NW warps per block, any grid with grid * NW * rpw >= n_out; NG = n_in / 32 / GB or 0.
 * tolerance as gemv_q32. */
template <int T, int NTMAX, int S, int NW, bool XS, int NG, int MINB = 0, bool XR = false>
__global__ void __launch_bounds__(NW * RF_WARP_SIZE, MINB)
rf_k_gemv_q32s(float *y, const uint8_t *w, const int8_t *qx, const float4 *dx, int nt,
               int64_t n_in, int64_t n_out, int64_t row_bytes, int rpw) {
    using G = rf_q32_group<T>;
    constexpr int BB = G::BB, GB = G::GB, NU = G::NU, WS = RF_WARP_SIZE;
    constexpr int SLOT = WS * G::GBYTES / 16; /* 16-byte words per stage */
    constexpr bool FS = G::FS; /* the x records carry the f32 sum */
    __shared__ uint4 ring[NW][S][SLOT];
    extern __shared__ uint4 rf_dyn[]; /* XS: x */
    RF_TRACE_START();
    const int lane = threadIdx.x % WS, warp = threadIdx.x / WS;
    /* NG: groups per row known at compile time (0: not), so x's offsets are immediates */
    const int nb = NG ? NG * GB : (int)(n_in / RF_QK), ng = NG ? NG : nb / GB;
    const int64_t row0 = ((int64_t)blockIdx.x * NW + warp) * rpw;
    const int rows = n_out - row0 < rpw ? (int)(n_out > row0 ? n_out - row0 : 0) : rpw;
    const int ngr = rows * ng;              /* groups of this warp (< 2^31: rpw * ng small) */
    const int nk = (ngr + WS - 1) / WS;     /* its stages */
    /* ngr * GBYTES is a multiple of 16: rows of whole 16-byte words (the launch checks) */
    rf_wring<SLOT, S> wr(w + row0 * row_bytes, ring[warp][0], ngr * G::GBYTES / 16, lane);
    for (int k = 0; k < S; k++) wr.issue();
    rf_pdl_trigger();
    rf_pdl_wait();
    RF_TRACE_WAITED();
    uint4 *xs = rf_dyn; /* XS: qx (n_in bytes), then nb records */
    if (XS) {
        const int nq = (int)(n_in / 16);
        const uint4 *qx4 = (const uint4 *)qx;
        for (int i = threadIdx.x; i < nq; i += NW * WS) xs[i] = qx4[i];
        const int nr = FS ? nb : nb / 2; /* records of 16 or 8 bytes (nb is even: GB >= 2) */
        for (int i = threadIdx.x; i < nr; i += NW * WS) xs[nq + i] = ((const uint4 *)dx)[i];
        __syncthreads();
    }
    const int8_t *xq = XS ? (const int8_t *)xs : qx;
    const char *xd = XS ? (const char *)(xs + n_in / 16) : (const char *)dx;
    constexpr int DXB = FS ? 16 : 8; /* bytes per record of xd */
    constexpr bool KQ = T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K || T == RF_TYPE_Q6_K;
    /* x block j of group gg (token t): 8 int words, the scale, the int sum, the f32 sum and the
     * int sum of the first 16 (the last two where the records carry them) */
    auto load_x = [&](int t, int j, int gg, int *xi, float &dxd, int &sxi, float &fsum, int &slo) {
        const int4 *xp = (const int4 *)(xq + t * n_in) + 2 * j * ng + gg;
        const int4 x0 = xp[0], x1 = xp[ng];
        xi[0] = x0.x, xi[1] = x0.y, xi[2] = x0.z, xi[3] = x0.w;
        xi[4] = x1.x, xi[5] = x1.y, xi[6] = x1.z, xi[7] = x1.w;
        const char *dp = xd + ((int64_t)t * nb + j * ng + gg) * DXB;
        if (FS) {
            const float4 q = *(const float4 *)dp;
            dxd = q.x, sxi = __float_as_int(q.y), fsum = q.z, slo = __float_as_int(q.w);
        } else { /* the sum of the f32 x is not needed: one 8-byte load */
            const float2 q = *(const float2 *)dp;
            dxd = q.x, sxi = __float_as_int(q.y), fsum = 0.0f, slo = 0;
        }
    };
    /* XR: ng divides the warp, so a lane's group is the same in every stage: its x (the blocks
     * of one group, 8 for the super-block formats) is loaded into registers once */
    static_assert(!XR || (NTMAX == 1 && !XS && NG > 0 && WS % (NG > 0 ? NG : 1) == 0), "XR: one token, ng | WS");
    constexpr int XN = XR ? (KQ ? 8 : GB) : 1;
    int xr[XN][8], xsr[XN], xlr[XN];
    float xdr[XN], xfr[XN];
    if constexpr (XR) {
#pragma unroll
        for (int j = 0; j < XN; j++) load_x(0, j, lane % NG, xr[j], xdr[j], xsr[j], xfr[j], xlr[j]);
    }
    float carry[NTMAX]; /* the partial sum of the row running on from the previous stage */
    float accA[NTMAX], accB[NTMAX]; /* ng >= 32: this lane's share of the open and next rows */
#pragma unroll
    for (int t = 0; t < NTMAX; t++) carry[t] = accA[t] = accB[t] = 0.0f;
    int r = lane / ng, g = lane % ng; /* this lane's row (in the warp's run) and group */
    /* stages of whole rows: ng divides the warp, rpw is a multiple of WS / ng (the launch) */
    const int rps = ng <= WS ? WS / ng : 1; /* rows per stage when whole */
    const bool whole = ng <= WS && WS % ng == 0 && rpw % rps == 0;
    int slot = 0;
    for (int k = 0; k < nk; k++) {
        const int gid = k * WS + lane;
        rf_cp_async_wait<S - 1>(); /* this lane's copies of stage k have landed */
        RF_SYNCWARP();             /* ... and every lane's are visible */
        float v[NTMAX];
#pragma unroll
        for (int t = 0; t < NTMAX; t++) v[t] = 0.0f;
        if (gid < ngr) {
            /* the group as words, plus a zero word rf_q32_dot may read; Q6_K: its 210 bytes at an
             * even byte, realigned from the 53 aligned words that hold them */
            uint32_t cw[T == RF_TYPE_Q6_K ? 53 : NU * 4 + 1];
            if constexpr (T == RF_TYPE_Q6_K) {
                const int off = lane * G::GBYTES; /* in the stage */
                const uint32_t *sw = (const uint32_t *)&ring[warp][slot][0] + off / 4;
                const unsigned sel = (off & 2) ? 0x5432u : 0x3210u;
                uint32_t a[54];
#pragma unroll
                for (int u = 0; u < 53; u++) a[u] = sw[u];
                a[53] = 0;
#pragma unroll
                for (int u = 0; u < 53; u++) cw[u] = __byte_perm(a[u], a[u + 1], sel);
            } else {
                const uint4 *src = &ring[warp][slot][lane * NU];
#pragma unroll
                for (int u = 0; u < NU; u++) {
                    const uint4 q = src[u];
                    cw[4 * u] = q.x, cw[4 * u + 1] = q.y, cw[4 * u + 2] = q.z, cw[4 * u + 3] = q.w;
                }
                cw[NU * 4] = 0;
            }
            if constexpr (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K || T == RF_TYPE_Q6_K) {
#pragma unroll
                for (int t = 0; t < NTMAX; t++) { /* one super-block per group, 8 blocks of x */
                    if (NTMAX > 1 && t >= nt) break;
                    int xi[8][8], sxi[8], slo[8];
                    float dxd[8], fsum[8];
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        if constexpr (XR) {
#pragma unroll
                            for (int u = 0; u < 8; u++) xi[j][u] = xr[j][u];
                            dxd[j] = xdr[j], sxi[j] = xsr[j], fsum[j] = xfr[j], slo[j] = xlr[j];
                        } else
                            load_x(t, j, g, xi[j], dxd[j], sxi[j], fsum[j], slo[j]);
                    }
                    if constexpr (T == RF_TYPE_Q6_K) v[t] += rf_q6k_dot(cw, xi, dxd, sxi, slo);
                    else v[t] += rf_qk_dot<T == RF_TYPE_Q5_K>(cw, xi, dxd, sxi, fsum);
                }
            } else
#pragma unroll
            for (int j = 0; j < GB; j++) {
#pragma unroll
                for (int t = 0; t < NTMAX; t++) {
                    if (NTMAX > 1 && t >= nt) break; /* NTMAX 1: nt is 1 */
                    int xi[8], sxi, slo;
                    float dxd, fsum;
                    if constexpr (XR) {
#pragma unroll
                        for (int u = 0; u < 8; u++) xi[u] = xr[j][u];
                        dxd = xdr[j], sxi = xsr[j], fsum = xfr[j], slo = xlr[j];
                    } else
                        load_x(t, j, g, xi, dxd, sxi, fsum, slo);
                    (void)slo;
                    /* the block's offset in its word, 0 or 2, is fixed for each j */
                    if (j * BB % 4 == 0) v[t] += rf_q32_dot<T, 0, true>(&cw[j * BB / 4], 0, xi, dxd, sxi, fsum);
                    else v[t] += rf_q32_dot<T, 2, true>(&cw[j * BB / 4], 2, xi, dxd, sxi, fsum);
                }
            }
        }
        RF_SYNCWARP(); /* the slot is read by all lanes before it is refilled */
        wr.issue(); /* stage k + S (an empty group past the run) */
        slot = slot + 1 == S ? 0 : slot + 1;
        if (whole) { /* the stage is 32 / ng whole rows: a butterfly over each row's ng lanes */
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                if (NTMAX > 1 && t >= nt) break;
#pragma unroll
                for (int m = 1; m < WS; m <<= 1)
                    if (m < ng) v[t] += RF_SHFL_XOR(v[t], m);
                if (g == 0 && gid < ngr) y[t * n_out + row0 + r] = v[t];
            }
            r += WS / ng;
            continue;
        }
        if (ng >= WS) { /* a stage holds parts of at most two rows and ends at most one: lanes
                         * keep the open row's sum (accA) and the next one's (accB) */
            const int ra = RF_SHFL(r, 0);           /* the open row */
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                if (r == ra) accA[t] += v[t];
                else accB[t] += v[t];
            }
            if ((ra + 1) * ng - 1 < (k + 1) * WS) { /* the open row ends here */
#pragma unroll
                for (int t = 0; t < NTMAX; t++) {
                    if (NTMAX > 1 && t >= nt) break;
                    const float tot = rf_warp_sum(accA[t]);
                    if (lane == 0 && ra < rows) y[t * n_out + row0 + ra] = tot;
                    accA[t] = accB[t], accB[t] = 0.0f;
                }
            }
            g += WS;
            if (g >= ng) g -= ng, r++;
            continue;
        }
        /* rows of this stage: lanes of one row are consecutive; after the shuffles the first
         * lane of each row's segment holds the segment's sum (lanes past the run: row rows) */
        const int rr = gid < ngr ? r : rows;
#pragma unroll
        for (int m = 1; m < WS; m <<= 1) {
            const int ro = RF_SHFL_DOWN(rr, m);
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                const float o = RF_SHFL_DOWN(v[t], m);
                if (lane + m < WS && ro == rr) v[t] += o;
            }
        }
        const int rprev = RF_SHFL_UP(rr, 1);
        const bool head = lane == 0 || rprev != rr;      /* first lane of its row here */
        const int glast = (rr + 1) * ng - 1;              /* the row's last group in the run */
        const bool ends = glast < (k + 1) * WS;           /* ... lies in this stage */
        const int r31 = RF_SHFL(rr, WS - 1);
        const int hl = __ffs(RF_BALLOT(rr == r31)) - 1; /* head lane of the last row here */
#pragma unroll
        for (int t = 0; t < NTMAX; t++) {
            if (NTMAX > 1 && t >= nt) break;
            float tot = v[t] + (lane == 0 ? carry[t] : 0.0f); /* lane 0's row may run on */
            if (head && rr < rows && ends) y[t * n_out + row0 + rr] = tot;
            /* the last row here, if it runs on, is carried: its head lane's total */
            const float c = RF_SHFL(tot, hl);
            carry[t] = ((r31 + 1) * ng - 1 < (k + 1) * WS || r31 >= rows) ? 0.0f : c;
        }
        g += WS; /* this lane's group in the next stage */
        while (g >= ng) g -= ng, r++;
    }
    RF_TRACE_END();
}

/* the formats gemv_q32h takes: 8-block groups whose records carry no f32 sum (Q4_0, Q5_0, Q8_0;
 * Q4_K / Q5_K have the sums) */
template <int T> struct rf_q32h_ok {
    static constexpr bool value = rf_q32_group<T>::GB == 8 && !rf_q32_group<T>::FS;
};

/* gemv_q32h: gemv_q32s for one token with two lanes per group, each decoding 4 of its 8 blocks,
 * so a stage is WS / 2 groups and a warp's serial decode per stage is half as long. Meant for
 * the shapes where q32s gives each warp a single stage, all of it decoded after the PDL wait
 * (4096x4096 Q4_0: 2 rows per warp): twice as many warps, each half as long, share that work.
 * For Q4_0, Q5_0, Q8_0 (rf_q32h_ok) and rows of ng groups with ng dividing WS / 2, so every
 * stage holds whole rows of 2 ng lanes (4096-wide rows and narrower powers of two). A half group
 * (4 BB bytes) starts 8 bytes past a 16-byte boundary in the odd half, so lanes read it with
 * 4 BB / 8 8-byte shared loads; a half-warp's 16 lanes then hit 16 distinct 8-byte bank pairs
 * (NU = 9, 11, 17). x as for q32s (rf_k_quantize_x, gb = 8).
 * launch: NW warps per block, any grid with grid * NW * rpw >= n_out (rpw a multiple of
 * (WS / 2) / ng keeps every warp's stages whole); NG = n_in / 256 or 0. tolerance as gemv_q32. */
template <int T, int S, int NW, int NG>
__global__ void __launch_bounds__(NW * RF_WARP_SIZE)
rf_k_gemv_q32h(float *y, const uint8_t *w, const int8_t *qx, const float4 *dx, int64_t n_in,
               int64_t n_out, int64_t row_bytes, int rpw) {
    using G = rf_q32_group<T>;
    constexpr int BB = G::BB, GB = G::GB, NU = G::NU, WS = RF_WARP_SIZE, HS = WS / 2;
    static_assert(rf_q32h_ok<T>::value && 4 * BB % 8 == 0, "8-block groups without f32 sums");
    constexpr int SLOT = HS * NU; /* 16-byte words per stage */
    constexpr int HL = 4 * BB / 8; /* 8-byte words per half group */
    __shared__ uint4 ring[NW][S][SLOT];
    const int lane = threadIdx.x % WS, warp = threadIdx.x / WS;
    const int hf = lane & 1, gi = lane >> 1; /* this lane's half and its group in the stage */
    const int ng = NG ? NG : (int)(n_in / RF_QK / GB);
    const int rps = HS / ng; /* whole rows per stage */
    const int64_t row0 = ((int64_t)blockIdx.x * NW + warp) * rpw;
    const int rows = n_out - row0 < rpw ? (int)(n_out > row0 ? n_out - row0 : 0) : rpw;
    const int ngr = rows * ng;          /* groups of this warp */
    const int nk = (ngr + HS - 1) / HS; /* its stages */
    rf_wring<SLOT, S> wr(w + row0 * row_bytes, ring[warp][0], ngr * NU, lane);
    for (int k = 0; k < S; k++) wr.issue();
    rf_pdl_trigger();
    rf_pdl_wait();
    /* this lane's group in its row is the same in every stage; its blocks are j = 4 hf + jj:
     * x halves at 16-byte units (2 j) ng + g and (2 j + 1) ng + g, records at j ng + g */
    const int g = gi % ng;
    const int4 *xp = (const int4 *)qx + 8 * hf * ng + g;
    const float2 *dp = (const float2 *)dx + 4 * hf * ng + g;
    /* ... so its x (4 blocks) is loaded once, all in flight together, and serves every stage */
    int xi[GB / 2][8];
    float2 xd[GB / 2];
#pragma unroll
    for (int jj = 0; jj < GB / 2; jj++) {
        const int4 x0 = xp[2 * jj * ng], x1 = xp[(2 * jj + 1) * ng];
        xi[jj][0] = x0.x, xi[jj][1] = x0.y, xi[jj][2] = x0.z, xi[jj][3] = x0.w;
        xi[jj][4] = x1.x, xi[jj][5] = x1.y, xi[jj][6] = x1.z, xi[jj][7] = x1.w;
        xd[jj] = dp[jj * ng];
    }
    int slot = 0;
    for (int k = 0; k < nk; k++) {
        const int gid = k * HS + gi;
        rf_cp_async_wait<S - 1>(); /* this lane's copies of stage k have landed */
        RF_SYNCWARP();             /* ... and every lane's are visible */
        float v = 0.0f;
        if (gid < ngr) {
            const uint2 *src = (const uint2 *)&ring[warp][slot][gi * NU] + hf * HL;
            uint32_t cw[2 * HL + 1]; /* the half group as words, plus a zero word */
#pragma unroll
            for (int u = 0; u < HL; u++) {
                const uint2 q = src[u];
                cw[2 * u] = q.x, cw[2 * u + 1] = q.y;
            }
            cw[2 * HL] = 0;
#pragma unroll
            for (int jj = 0; jj < GB / 2; jj++) {
                const float2 q = xd[jj];
                /* a half starts 4-byte aligned: block jj's offset in its word is fixed */
                if (jj * BB % 4 == 0)
                    v += rf_q32_dot<T, 0, true>(&cw[jj * BB / 4], 0, xi[jj], q.x, __float_as_int(q.y), 0.0f);
                else
                    v += rf_q32_dot<T, 2, true>(&cw[jj * BB / 4], 2, xi[jj], q.x, __float_as_int(q.y), 0.0f);
            }
        }
        RF_SYNCWARP(); /* the slot is read by all lanes before it is refilled */
        wr.issue(); /* stage k + S (an empty group past the run) */
        slot = slot + 1 == S ? 0 : slot + 1;
        /* rps whole rows of 2 ng lanes (2 ng divides the warp): a butterfly over each row's lanes */
#pragma unroll
        for (int m = 1; m < WS; m <<= 1)
            if (m < 2 * ng) v += RF_SHFL_XOR(v, m);
        if (lane % (2 * ng) == 0 && gid < ngr) y[row0 + k * rps + gi / ng] = v;
    }
}

/* The end of the 16-row tensor-core GEMVs (gemv_mma, gemv_tc): each of the NW warps holds an
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

/* gemv_mma: the product for 2..8 tokens on the tensor cores, for Q4_0 and Q8_0 rows of whole
 * 8-block groups (n_in a multiple of 256). One mma.m16n8k32 (int8 in, int32 out) takes one
 * 32-element block of 16 rows against the same block of all 8 token columns of x, so a weight
 * block is decoded once whatever the token count (gemv_q32s loops over the tokens, decoding and
 * loading x again for each: 2-8 tokens ran at 22-63% of the bandwidth). A block of NW warps owns
 * 16 rows; warp w takes chunks w, w + NW, ... of 8 blocks (per row 8 BB contiguous bytes, whole
 * 16-byte words), each staged with cp.async in one slot of a ring of S: the 16 rows' chunks
 * (SROW bytes apart, an odd number of 16-byte words, so the 8 rows one load touches fall on
 * distinct banks), the int8 x of the nt tokens for those 8 blocks (token stride XT = 272 bytes,
 * likewise conflict-free) and their records, token-minor (the two tokens a lane scales by are
 * one 16-byte load). The weights of the first S chunks are requested before rf_pdl_wait() (w
 * must not be written by work in flight), their x after it.
 * Fragments (PTX m16n8k32, 8-bit A row-major, B column-major): lane (g, t) = (lane / 4,
 * lane % 4) holds word t and word 4 + t of a block of rows g and g + 8 (Q4_0: the low and high
 * nibbles of quant word t, u8 0..15, the -8 taken off in exact integers with the int sum of x as
 * gemv_q32 does), words t and 4 + t of token g's x (zero for g >= nt), and gets the int32 sums of
 * rows g, g + 8 by tokens 2t, 2t + 1, scaled per block in f32 (d_w d_x). The warps' sums are
 * added in warp order (deterministic). x: rf_k_quantize_x with gb = 8 (block b = 8 gg + j: int8
 * halves at 16-byte units (2 j + h) ng + gg, record at j ng + gg).
 * launch: NW warps per block, ceil(n_out / 16) blocks, NW * S * rf_mma_slot(BB, nt) bytes of
 * dynamic shared memory; rows past n_out read the last row and are not stored. tolerance as
 * gemv_q32. */
#define RF_MMA_XT 272 /* bytes per token of a slot's x: 8 blocks of 32, plus 16 (banks) */
static __host__ __device__ constexpr int rf_mma_srow(int bb) { return 8 * bb + (8 * bb / 16 % 2 ? 0 : 16); }
/* bytes of a slot for nt tokens: rows (plus 16 a realigned word may read past the last), x,
 * records (8 blocks x 8 tokens x 8 bytes) */
static __host__ __device__ constexpr int rf_mma_slot(int bb, int nt) { return 16 * rf_mma_srow(bb) + 16 + nt * RF_MMA_XT + 512; }
template <int T, int S, int NW>
__global__ void __launch_bounds__(NW * 32)
rf_k_gemv_mma(float *y, const uint8_t *w, const int8_t *qx, const float2 *dx, int nt,
              int64_t n_in, int64_t n_out, int64_t row_bytes) {
    static_assert(T == RF_TYPE_Q4_0 || T == RF_TYPE_Q8_0, "Q4_0 or Q8_0");
    static_assert(RF_WARP_SIZE == 32, "mma.sync: 32-lane warps");
    constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : 34;
    constexpr int CB = 8 * BB, CW = CB / 16, SROW = rf_mma_srow(BB);
    constexpr int XO = 16 * SROW + 16;   /* x in a slot */
    constexpr int NCP = (16 * CW + 31) / 32; /* weight copies per lane per chunk */
    extern __shared__ __align__(16) uint8_t rf_mma_ring[];
    __shared__ float red[NW][16][8];
#if defined(RF_GEMV_TRACE)
    const unsigned rf_tr_call = (unsigned)nt >> 8; /* the launch's call number (trace builds) */
    nt &= 0xff;
#endif
    RF_TRACE_MMA(0);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int slotb = rf_mma_slot(BB, nt), ro = XO + nt * RF_MMA_XT; /* records in a slot */
    uint8_t *ring = rf_mma_ring + (size_t)warp * S * slotb;
    const int64_t r0 = (int64_t)blockIdx.x * 16;
    const int nb = (int)(n_in / 32), nch = nb / 8, ng = nch;
    const char *src[NCP]; /* this lane's weight copies: the same (row, word) in every chunk */
    unsigned dst[NCP];
    const unsigned base = rf_smem_addr(ring);
#pragma unroll
    for (int m = 0; m < NCP; m++) {
        const int i = lane + 32 * m, row = i < 16 * CW ? i / CW : 0, col = i % CW;
        const int64_t r = r0 + row < n_out ? r0 + row : n_out - 1;
        src[m] = (const char *)w + r * row_bytes + col * 16;
        dst[m] = base + (unsigned)(row * SROW + col * 16);
    }
    const int nk = warp < nch ? (nch - warp + NW - 1) / NW : 0; /* this warp's chunks */
    auto issue_w = [&](int k, int slot) { /* the weights of chunk k */
        if (k >= nk) return;
        const int64_t off = (int64_t)(warp + k * NW) * CB;
        const unsigned so = (unsigned)(slot * slotb);
#pragma unroll
        for (int m = 0; m < NCP; m++)
            if ((m + 1) * 32 <= 16 * CW || lane + 32 * m < 16 * CW) rf_cp_async16_s(dst[m] + so, src[m] + off);
    };
    /* this lane's x copies (the same in every chunk but for the group gg = c): int8 halves
     * i = lane + 32 m of token i / 16, unit i % 16 (= 2 j + h); records i = lane + 32 m of token
     * i / 8, block i % 8, at (8 j + n) * 8 in the slot */
    const int8_t *xsrc[4];
    unsigned xdst[4];
    const float2 *rsrc[2];
    unsigned rdst[2];
#pragma unroll
    for (int m = 0; m < 4; m++) {
        const int i = lane + 32 * m, n = i / 16, u = i % 16;
        xsrc[m] = qx + (int64_t)(i < nt * 16 ? n : 0) * n_in + (int64_t)u * ng * 16;
        xdst[m] = (unsigned)(XO + n * RF_MMA_XT + u * 16);
    }
#pragma unroll
    for (int m = 0; m < 2; m++) {
        const int i = lane + 32 * m, n = i / 8, j = i % 8;
        rsrc[m] = dx + (int64_t)(i < nt * 8 ? n : 0) * nb + (int64_t)j * ng;
        rdst[m] = (unsigned)(ro + (8 * j + n) * 8);
    }
    auto issue_x = [&](int k, int slot) { /* x of chunk k */
        if (k >= nk) return;
        const int c = warp + k * NW; /* = gg of its blocks */
        const unsigned s = base + (unsigned)(slot * slotb);
#pragma unroll
        for (int m = 0; m < 4; m++)
            if (lane + 32 * m < nt * 16) rf_cp_async16_s(s + xdst[m], xsrc[m] + c * 16);
#pragma unroll
        for (int m = 0; m < 2; m++)
            if (lane + 32 * m < nt * 8) rf_cp_async8_s(s + rdst[m], rsrc[m] + c);
    };
    /* the records of tokens nt..7 are zero in every slot (never copied), so the scaling needs no
     * token test: their columns of x are zero, their scales zero too */
    for (int i = lane; i < S * 64; i += 32) {
        const int sl = i / 64, j = i % 64 / 8, n = i % 8;
        if (n >= nt) *(float2 *)(ring + sl * slotb + ro + (8 * j + n) * 8) = make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int k = 0; k < S; k++) {
        issue_w(k, k);
        rf_cp_async_commit();
    }
    rf_pdl_trigger();
    rf_pdl_wait();
    RF_TRACE_MMA(1);
#pragma unroll
    for (int k = 0; k < S; k++) { /* groups W0..W(S-1), X0..X(S-1), then W+X per chunk: after
                                   * the issue for chunk k + S - 1, wait<S - 1> leaves chunk k */
        issue_x(k, k);
        rf_cp_async_commit();
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* rows g, g + 8 by tokens 2t, 2t + 1 */
    const bool xon = g < nt;
    int slot = 0;
    for (int k = 0; k < nk; k++) {
        rf_cp_async_wait<S - 1>(); /* this lane's copies of chunk k have landed */
        RF_SYNCWARP();             /* ... and every lane's are visible */
        if (k < 6) RF_TRACE_MMA(2 + 2 * k);
        const uint8_t *sl = ring + slot * slotb;
        const uint8_t *ra = sl + g * SROW, *rb = ra + 8 * SROW, *xs = sl + XO + g * RF_MMA_XT;
        /* every operand of the chunk first (independent shared loads in flight together: with
         * ~4 warps per scheduler the decode is bound by their latency), then the 8 products */
        uint32_t A[8][4];
        int X[8][2];
        float4 Q[8];
        float D[8][2];
#pragma unroll
        for (int b = 0; b < 8; b++) {
            /* the 4 bytes at offset o of block b of row r (even: 2-byte aligned in the slot) */
            auto word = [&](const uint8_t *r, int o) -> uint32_t {
                const int p = b * BB + o; /* compile-time once unrolled */
                if (p % 4 == 0) return *(const uint32_t *)(r + p);
                return __byte_perm(*(const uint32_t *)(r + p - 2), *(const uint32_t *)(r + p + 2), 0x5432u);
            };
            X[b][0] = xon ? *(const int *)(xs + b * 32 + 4 * t) : 0;
            X[b][1] = xon ? *(const int *)(xs + b * 32 + 16 + 4 * t) : 0;
            Q[b] = *(const float4 *)(sl + ro + (8 * b + 2 * t) * 8); /* tokens 2t, 2t + 1 */
            D[b][0] = rf_h2f_bits(*(const uint16_t *)(ra + b * BB));
            D[b][1] = rf_h2f_bits(*(const uint16_t *)(rb + b * BB));
            if (T == RF_TYPE_Q4_0) {
                const uint32_t wa = word(ra, 2 + 4 * t), wb = word(rb, 2 + 4 * t);
                A[b][0] = wa & 0x0F0F0F0Fu, A[b][2] = (wa >> 4) & 0x0F0F0F0Fu;
                A[b][1] = wb & 0x0F0F0F0Fu, A[b][3] = (wb >> 4) & 0x0F0F0F0Fu;
            } else {
                A[b][0] = word(ra, 2 + 4 * t), A[b][2] = word(ra, 18 + 4 * t);
                A[b][1] = word(rb, 2 + 4 * t), A[b][3] = word(rb, 18 + 4 * t);
            }
        }
#pragma unroll
        for (int b = 0; b < 8; b++) {
            int sv[4];
            rf_mma_i8<T == RF_TYPE_Q4_0>(sv, A[b], X[b]);
            int s0 = sv[0], s1 = sv[1], s2 = sv[2], s3 = sv[3];
            const float dx0 = Q[b].x, dx1 = Q[b].z;
            if (T == RF_TYPE_Q4_0) { /* centre q on 8: sum (q - 8) x = sum q x - 8 sum x */
                const int sx0 = __float_as_int(Q[b].y), sx1 = __float_as_int(Q[b].w);
                s0 -= 8 * sx0, s1 -= 8 * sx1, s2 -= 8 * sx0, s3 -= 8 * sx1;
            }
            acc[0] += D[b][0] * dx0 * (float)s0, acc[1] += D[b][0] * dx1 * (float)s1;
            acc[2] += D[b][1] * dx0 * (float)s2, acc[3] += D[b][1] * dx1 * (float)s3;
        }
        RF_SYNCWARP(); /* the slot is read by all lanes before it is refilled */
        if (k < 6) RF_TRACE_MMA(3 + 2 * k);
        issue_w(k + S, slot);
        issue_x(k + S, slot);
        rf_cp_async_commit();
        slot = slot + 1 == S ? 0 : slot + 1;
    }
    rf_mma_tile_store<NW>(red, acc, y, nt, r0, n_out);
    RF_TRACE_MMA(14);
#if defined(RF_GEMV_TRACE)
    if (threadIdx.x == 0 && blockIdx.x < RF_TRACE_MMA_BLOCKS)
        rf_trace_mma[rf_tr_call % RF_TRACE_MMA_CALLS][blockIdx.x][15] = gridDim.x;
#endif
}
#endif

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

/* acc[t] += sum_j wq[j] x[t, j] - mterm * sum_j x[t, j] over one 32-element chunk (xc: the chunk
 * in token 0; tokens n_in apart), for t < nt: the K-quant GEMVs' inner product, f32. */
template <int NTMAX>
static __device__ __forceinline__ void rf_chunk_acc(float *acc, const float *wq, float mterm,
                                                    const float *xc, int nt, int64_t n_in) {
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (t >= nt) break;
        const float4 *xp = (const float4 *)(xc + t * n_in);
        float s = 0.0f, sx = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float4 a = xp[j];
            s += wq[4 * j] * a.x + wq[4 * j + 1] * a.y + wq[4 * j + 2] * a.z + wq[4 * j + 3] * a.w;
            sx += a.x + a.y + a.z + a.w;
        }
        acc[t] += s - mterm * sx;
    }
}

/* gemv_f16: the same product for W in f16 or bf16 (T), x f32 [nt, n_in]; n_in % 8 == 0 so
 * each row is 16-byte aligned; each thread keeps UNR independent 16-byte loads in flight while
 * it decodes the previous UNR (the first before rf_pdl_wait(): see gemv_q32 on w).
 * launch: RF_GEMV_WARPS warps per block, WPR warps per row. tolerance rel. L2 < 1e-5 vs the
 * f32 reference on the same (already 16-bit) weights. */
template <int T, int NTMAX, int UNR, int WPR>
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_f16(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out) {
    constexpr int G = WPR * RF_WARP_SIZE, GROUPS = RF_GEMV_WARPS / WPR;
    __shared__ float red[RF_GEMV_WARPS][NTMAX];
    const int gl = threadIdx.x % G, grp = threadIdx.x / G;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1;
    const int64_t n8 = n_in / 8;
    const uint4 *wr = (const uint4 *)(w + row * n_in * 2);
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
    /* the loads of the next UNR words are issued before this batch is decoded; the first batch
     * (weights only) before the programmatic-launch wait */
    uint4 nx[UNR];
    auto load = [&](int64_t i0) {
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            if (i < n8) nx[u] = wr[i];
        }
    };
    if (gl < n8) load(gl);
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t i0 = gl; i0 < n8; i0 += (int64_t)G * UNR) {
        uint4 r[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++) r[u] = nx[u];
        if (i0 + (int64_t)G * UNR < n8) load(i0 + (int64_t)G * UNR);
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            if (i >= n8) break;
            const uint32_t wv[4] = {r[u].x, r[u].y, r[u].z, r[u].w};
            float wf[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                if (T == RF_TYPE_F16) {
                    wf[2 * j] = rf_h2f_bits((uint16_t)(wv[j] & 0xFFFF));
                    wf[2 * j + 1] = rf_h2f_bits((uint16_t)(wv[j] >> 16));
                } else {
                    wf[2 * j] = __uint_as_float(wv[j] << 16);
                    wf[2 * j + 1] = __uint_as_float(wv[j] & 0xFFFF0000u);
                }
            }
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                if (t >= nt) break;
                const float4 *xp = (const float4 *)(x + t * n_in + i * 8);
                const float4 a = xp[0], b = xp[1];
                acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                          wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
            }
        }
    }
    rf_gemv_store<NTMAX, WPR>(y, acc, red, nt, row, n_out, valid);
}

#if !defined(RF_HIP) /* mma.sync: CUDA, sm_80 and up */
/* gemv_tc: gemv_f16 for 2..8 tokens on the tensor cores (mma.m16n8k8, tf32 in, f32 out). The
 * loop kernel reads x again for every token (8 tokens: 16 loads of x per 16-byte word of W) and
 * fell to 22-25% of the bandwidth at 8 tokens; here one mma takes 16 rows by 8 tokens. f16 and
 * bf16 values are exact in tf32; x is split as x = hi + lo, hi its top 10 mantissa bits and lo
 * the rest (exact in f32, truncated to tf32 by the mma: |error| <= 2^-20 |x|), each multiplied
 * in a separate mma, so the product stays near f32 (f16 x would overflow past 65504 and lose
 * small values). A block of NW warps owns 16 rows; warp w takes 32-element chunks w, w + NW, ...
 * of the row, U at a time: lane (g, c) = (lane / 4, lane % 4) loads 16 bytes of rows g and g + 8
 * and 8 floats of token g's x at elements 8c..8c+7 of the chunk (the product is a sum over k, so
 * mma j of the chunk takes elements 8c + 2j and 8c + 2j + 1 as its k = c and c + 4 for both
 * operands). Tokens past nt are zero columns. The warps' sums are added in warp order
 * (rf_mma_tile_store, deterministic). The weights of the first U chunks are requested before
 * rf_pdl_wait().
 * launch: NW warps per block, ceil(n_out / 16) blocks; n_in a multiple of 32; rows past n_out read
 * the last row and are not stored. tolerance as gemv_f16 (rel. L2 < 1e-5). */
template <int T, int NW, int U>
__global__ void __launch_bounds__(NW * 32, 2)
rf_k_gemv_tc(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out) {
    static_assert(RF_WARP_SIZE == 32, "mma.sync: 32-lane warps");
    __shared__ float red[NW][16][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    const int64_t r0 = (int64_t)blockIdx.x * 16;
    const int64_t ra = r0 + g < n_out ? r0 + g : n_out - 1, rb = r0 + g + 8 < n_out ? r0 + g + 8 : n_out - 1;
    const uint4 *wa = (const uint4 *)(w + ra * n_in * 2) + c, *wb = (const uint4 *)(w + rb * n_in * 2) + c;
    const bool xon = g < nt;
    const float4 *xp = (const float4 *)(x + (xon ? g : 0) * n_in) + 2 * c;
    const int nch = (int)(n_in / 32);
    uint4 A[U][2];
    float4 X[U][2];
    auto load_w = [&](int k0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = k0 + u * NW;
            if (k < nch) A[u][0] = wa[4 * k], A[u][1] = wb[4 * k];
        }
    };
    auto load_x = [&](int k0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = k0 + u * NW;
            if (k < nch && xon) X[u][0] = xp[8 * k], X[u][1] = xp[8 * k + 1];
            else X[u][0] = X[u][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    load_w(warp);
    rf_pdl_trigger();
    rf_pdl_wait();
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* rows g, g + 8 by tokens 2c, 2c + 1 */
    /* a 16-bit weight as a tf32 operand (f16 via f32, bf16 by position) */
    auto wv = [](uint32_t word, int h) -> uint32_t {
        const uint16_t b = (uint16_t)(h ? word >> 16 : word & 0xFFFFu);
        if (T == RF_TYPE_F16) return __float_as_uint(rf_h2f_bits(b));
        return (uint32_t)b << 16;
    };
    for (int k0 = warp; k0 < nch; k0 += NW * U) {
        load_x(k0);
        uint4 Ac[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) Ac[u][0] = A[u][0], Ac[u][1] = A[u][1];
        if (k0 + NW * U < nch) load_w(k0 + NW * U);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (k0 + u * NW >= nch) break;
            const uint32_t pa[4] = {Ac[u][0].x, Ac[u][0].y, Ac[u][0].z, Ac[u][0].w};
            const uint32_t pb[4] = {Ac[u][1].x, Ac[u][1].y, Ac[u][1].z, Ac[u][1].w};
            const float xs[8] = {X[u][0].x, X[u][0].y, X[u][0].z, X[u][0].w,
                                 X[u][1].x, X[u][1].y, X[u][1].z, X[u][1].w};
            /* the chunk's 8 mma accumulate apart, then into acc with f32 adds: the tensor cores'
             * own f32 accumulation rounds short, which over a 14336-wide row (448 mma into one
             * fragment) cost ~9e-6 rel. L2 on the H100 */
            float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < 4; j++) { /* elements 8c + 2j, 8c + 2j + 1 */
                const uint32_t a0 = wv(pa[j], 0), a2 = wv(pa[j], 1), a1 = wv(pb[j], 0), a3 = wv(pb[j], 1);
                uint32_t bh[2], bl[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float v = xs[2 * j + e];
                    const float hi = __uint_as_float(__float_as_uint(v) & 0xFFFFE000u);
                    /* inf: hi is inf, lo would be NaN; NaN stays NaN in hi or lo */
                    const float lo = fabsf(v) == INFINITY ? 0.0f : v - hi;
                    bh[e] = __float_as_uint(hi), bl[e] = __float_as_uint(lo);
                }
                const uint32_t af[4] = {a0, a1, a2, a3};
                rf_mma_tf32(cc, af, bh);
                rf_mma_tf32(cc, af, bl);
            }
#pragma unroll
            for (int i = 0; i < 4; i++) acc[i] += cc[i];
        }
    }
    rf_mma_tile_store<NW>(red, acc, y, nt, r0, n_out);
}
#endif

/* gemv_k: W in Q4_K / Q5_K / Q6_K (256-element super-blocks), x f32 [nt, n_in]. Each lane takes
 * 32-element chunks (chunk c of block b: sub-block c of Q4_K/Q5_K, or (half c/4, quarter c%4) of
 * Q6_K); consecutive lanes read consecutive chunks, the Q4_K/Q5_K quant bytes with 16-byte
 * loads (those blocks are 144/176 bytes, so 16-byte aligned in 16-byte aligned rows).
 * launch: RF_GEMV_WARPS warps per block, one row per warp. tolerance rel. L2 < 1e-2 (f32 math). */
template <int T, int NTMAX, int WPR>
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_k(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out,
            int64_t row_bytes) {
    constexpr int BB = T == RF_TYPE_Q4_K ? 144 : T == RF_TYPE_Q5_K ? 176 : 210;
    constexpr int G = WPR * RF_WARP_SIZE, GROUPS = RF_GEMV_WARPS / WPR;
    __shared__ float red[RF_GEMV_WARPS][NTMAX];
    const int gl = threadIdx.x % G, grp = threadIdx.x / G;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1; /* keep every thread for the block reduction */
    const int64_t nchunks = n_in / 32;
    const uint8_t *wr = w + row * row_bytes;
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t c = gl; c < nchunks; c += G) {
        const int64_t b = c / 8;
        const int sb = (int)(c % 8);
        const uint8_t *blk = wr + b * BB;
        float wq[32]; /* the chunk's 32 integer quants times the sub-scale, min folded below */
        float mterm = 0.0f;
        if (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
            const uint4 *qp = (const uint4 *)(blk + (T == RF_TYPE_Q4_K ? 16 : 48) + 32 * (sb / 2));
            const uint4 q0 = qp[0], q1 = qp[1];
            const uint32_t qv[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
            uint32_t hv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (T == RF_TYPE_Q5_K) {
                const uint4 h0 = ((const uint4 *)(blk + 16))[0], h1 = ((const uint4 *)(blk + 16))[1];
                hv[0] = h0.x, hv[1] = h0.y, hv[2] = h0.z, hv[3] = h0.w;
                hv[4] = h1.x, hv[5] = h1.y, hv[6] = h1.z, hv[7] = h1.w;
            }
            int sc, m;
            rf_k4_sm(sb, blk + 4, &sc, &m);
            const float d1 = rf_ld_half(blk) * (float)sc;
            mterm = rf_ld_half(blk + 2) * (float)m;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const uint32_t q = (sb & 1) ? (qv[j] >> 4) : qv[j];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    int v = (int)((q >> (8 * k)) & 0xF);
                    if (T == RF_TYPE_Q5_K) v |= (int)(((hv[j] >> (8 * k + sb)) & 1u) << 4);
                    wq[4 * j + k] = d1 * (float)v;
                }
            }
        } else { /* Q6_K: half h = sb/4, quarter k = sb%4, l = 0..31 */
            const int h = sb / 4, k = sb % 4;
            const uint8_t *ql = blk + 64 * h + 32 * (k & 1);
            const uint8_t *qh = blk + 128 + 32 * h;
            const float d = rf_ld_half(blk + 208);
            const float s0 = d * (float)(int8_t)blk[192 + 8 * h + 2 * k];
            const float s1 = d * (float)(int8_t)blk[192 + 8 * h + 2 * k + 1];
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const uint32_t l2 = rf_ld_u16(ql + 2 * j), h2 = rf_ld_u16(qh + 2 * j);
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int l = 2 * j + e;
                    const int lo = (int)((l2 >> (8 * e + (k < 2 ? 0 : 4))) & 0xF);
                    const int hi = (int)((h2 >> (8 * e + 2 * k)) & 3);
                    wq[l] = (l < 16 ? s0 : s1) * (float)((lo | (hi << 4)) - 32);
                }
            }
        }
        rf_chunk_acc<NTMAX>(acc, wq, mterm, x + c * 32, nt, n_in);
    }
    rf_gemv_store<NTMAX, WPR>(y, acc, red, nt, row, n_out, valid);
}

/* gemv_k45: Q4_K / Q5_K, the same contract as gemv_k, with the raw 16-byte words of the next
 * chunk (quants, high bits, the 16-byte header d|dmin|scales) loaded before the current chunk
 * is decoded, so each lane keeps ~80 bytes in flight. tolerance rel. L2 < 1e-2 (f32 math). */
template <int T, int NTMAX, int WPR>
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_k45(float *y, const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out,
              int64_t row_bytes) {
    constexpr int BB = T == RF_TYPE_Q4_K ? 144 : 176;
    constexpr int QO = T == RF_TYPE_Q4_K ? 16 : 48;
    constexpr int G = WPR * RF_WARP_SIZE, GROUPS = RF_GEMV_WARPS / WPR;
    __shared__ float red[RF_GEMV_WARPS][NTMAX];
    const int gl = threadIdx.x % G, grp = threadIdx.x / G;
    int64_t row = (int64_t)blockIdx.x * GROUPS + grp;
    const bool valid = row < n_out;
    if (!valid) row = n_out - 1; /* keep every thread for the block reduction */
    const int64_t nchunks = n_in / 32;
    const uint8_t *wr = w + row * row_bytes;
    float acc[NTMAX];
#pragma unroll
    for (int t = 0; t < NTMAX; t++) acc[t] = 0.0f;
    uint4 hd, q0, q1, h0 = make_uint4(0, 0, 0, 0), h1 = make_uint4(0, 0, 0, 0);
    auto fetch = [&](int64_t c) {
        const uint8_t *blk = wr + (c / 8) * BB;
        const int sb = (int)(c % 8);
        hd = *(const uint4 *)blk;
        const uint4 *qp = (const uint4 *)(blk + QO + 32 * (sb / 2));
        q0 = qp[0], q1 = qp[1];
        if (T == RF_TYPE_Q5_K) h0 = ((const uint4 *)(blk + 16))[0], h1 = ((const uint4 *)(blk + 16))[1];
    };
    if (gl < nchunks) fetch(gl); /* weights only: safe before the wait */
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t c = gl; c < nchunks; c += G) {
        const int sb = (int)(c % 8);
        const uint32_t qv[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        const uint32_t hv[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        const uint32_t hw[4] = {hd.x, hd.y, hd.z, hd.w};
        if (c + G < nchunks) fetch(c + G);
        /* byte i of the header without indexing a register array at run time */
        auto hbyte = [&](int i) -> int {
            const uint32_t wv = (i >> 2) == 1 ? hw[1] : (i >> 2) == 2 ? hw[2] : hw[3];
            return (int)((wv >> (8 * (i & 3))) & 0xFF);
        };
        int sc, m; /* rf_k4_sm on scales = header bytes 4..15 */
        if (sb < 4) {
            sc = hbyte(4 + sb) & 63;
            m = hbyte(8 + sb) & 63;
        } else {
            sc = (hbyte(8 + sb) & 0xF) | ((hbyte(sb) >> 6) << 4);
            m = (hbyte(8 + sb) >> 4) | ((hbyte(4 + sb) >> 6) << 4);
        }
        const float d1 = rf_h2f_bits((uint16_t)(hw[0] & 0xFFFF)) * (float)sc;
        const float mterm = rf_h2f_bits((uint16_t)(hw[0] >> 16)) * (float)m;
        float wq[32];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint32_t q = (sb & 1) ? (qv[j] >> 4) : qv[j];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                int v = (int)((q >> (8 * k)) & 0xF);
                if (T == RF_TYPE_Q5_K) v |= (int)(((hv[j] >> (8 * k + sb)) & 1u) << 4);
                wq[4 * j + k] = d1 * (float)v;
            }
        }
        rf_chunk_acc<NTMAX>(acc, wq, mterm, x + c * 32, nt, n_in);
    }
    rf_gemv_store<NTMAX, WPR>(y, acc, red, nt, row, n_out, valid);
}

/* gemv_generic: any type with a device decoder (rf_dq_elem), element by element; the fallback
 * for formats and shapes the fast kernels do not take. Same launch; tolerance rel. L2 < 1e-5
 * against rf_ref_matmul (f32 arithmetic on exact dequantized values). */
__global__ void __launch_bounds__(RF_GEMV_WARPS * RF_WARP_SIZE)
rf_k_gemv_generic(float *y, const uint8_t *w, int type, const float *x, int nt, int64_t n_in,
                  int64_t n_out, int64_t row_bytes, int bs, int bb) {
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    const int64_t row = (int64_t)blockIdx.x * RF_GEMV_WARPS + warp;
    if (row >= n_out) return;
    const uint8_t *wr = w + row * row_bytes;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = lane; i < n_in; i += RF_WARP_SIZE) {
        const float wv = rf_dq_elem(type, wr + (i / bs) * bb, (int)(i % bs));
#pragma unroll
        for (int t = 0; t < 8; t++)
            if (t < nt) acc[t] += wv * x[t * n_in + i];
    }
#pragma unroll
    for (int t = 0; t < 8; t++) {
        if (t >= nt) break;
        const float s = rf_warp_sum(acc[t]);
        if (lane == 0) y[t * n_out + row] = s;
    }
}

/* ---- host glue ------------------------------------------------------------------------- */

extern "C" void rf_gpu_set_gemv_variant(rf_gpu_ctx *ctx, int variant) { ctx->gemv_variant = variant; }
extern "C" void rf_gpu_set_gemv_rpw(rf_gpu_ctx *ctx, int rpw) { ctx->gemv_rpw = rpw > 0 ? (rpw < 1024 ? rpw : 1024) : 0; }
extern "C" void rf_gpu_set_gemv_pad(rf_gpu_ctx *ctx, int kb) { ctx->gemv_pad_kb = kb < 0 ? 0 : kb < 16 ? kb : 16; }

extern "C" bool rf_gpu_gemv_supported(rf_type t) {
    switch (t) {
    case RF_TYPE_F16: case RF_TYPE_BF16: case RF_TYPE_Q8_0: case RF_TYPE_Q4_0: case RF_TYPE_Q4_1:
    case RF_TYPE_Q5_0: case RF_TYPE_Q5_1: case RF_TYPE_Q4_K: case RF_TYPE_Q5_K: case RF_TYPE_Q6_K:
        return true;
    default: return false;
    }
}

/* Kernel variants, chosen per call by ctx->gemv_variant (0 = default; the benchmark sweeps
 * some of 1..23), all launched as programmatic dependent launches where ctx->pdl:
 * q32 (rows per warp group, ring stages, warps per group; RF_Q32_WARPS warps per block) =
 *   1: (4, 2, 4), 2: (2, 2, 4), 3: (4, 2, 2); HIP: (2, 2, 2) always;
 * q32s (32-element formats, rows of whole 16-byte groups, CUDA) = 4..7, see rf_launch_q32s;
 * q32h (two lanes per group, one token, Q4_0/Q5_0/Q8_0 rows of 16 groups or fewer, CUDA) = 8,
 *   else as 7; 9..12: v7 compiled for at least 1, 3, 4, 5 blocks per SM (register budgets: ptxas
 *   gives v7 itself ~80; one token, else as 7; see docs/perf-gpu.md); 13..20: x in registers
 *   (XR: rows of 16 or 32 groups, one token, else as 7) with (ring stages, warps per block at
 *   most) = 13: (2, 4), 14: (3, 4), 15: (4, 4), 16: (2, 2), 17: (4, 1), 18: (6, 1), 19: (3, 2),
 *   20: (2, 1); 21..23: v7 in one-warp blocks at register budgets 128, ~255 and ptxas's own;
 *   24: 2..8 tokens of Q4_0 / Q8_0 on the tensor cores (gemv_mma; one token as 7);
 * f16 (warps per row, loads in flight) = 1: (1, 4), 2: (4, 4), 3: (4, 2); 25, 26: 2..8 tokens of
 *   F16 / BF16 on the tensor cores (gemv_tc, rows a multiple of 32 wide; 4 and 2 chunks in
 *   flight per warp; 25 is their default; one token as the default);
 * K-quants: 1 = one warp per row, 2 and 3 = four warps per row.
 * Defaults from the H100 sweeps in docs/perf-gpu.md. */
#define RF_GEMV_DEFAULT_F16 3
#if defined(RF_HIP)
#define RF_Q32_WARPS 2 /* wave64: 4 waves of Q8_0 rings would pass the 64 KB of LDS */
#else
#define RF_Q32_WARPS RF_GEMV_WARPS
#endif
static int rf_gemv_rows_per_block(int variant) { return variant == 1 ? RF_GEMV_WARPS : 1; }

template <int T>
static rf_status rf_launch_q32(rf_gpu_ctx *ctx, int v, float *y, const uint8_t *w,
                               const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                               int64_t n_out, int64_t rb) {
    const char *name = "rf_k_gemv_q32";
#if defined(RF_HIP)
    (void)v; /* one configuration: wave64 rings of the larger variants pass the 64 KB of LDS */
    const int nw = RF_Q32_WARPS, rpw = 2, wpr = 2;
#else
    const int nw = RF_Q32_WARPS, rpw = v == 2 ? 2 : 4, wpr = v == 3 ? 2 : 4;
#endif
    const int64_t rows_per_block = nw / wpr * rpw;
    const dim3 grid((unsigned)((n_out + rows_per_block - 1) / rows_per_block)), block(nw * ctx->info.warp_size);
#define RF_Q32(NTM, R, S, WPR) rf_gpu_launch(ctx, name, true, rf_k_gemv_q32<T, NTM, R, S, WPR, RF_Q32_WARPS>, grid, block, 0, y, w, qx, dx, nt, n_in, n_out, rb)
#if defined(RF_HIP)
    return nt == 1 ? RF_Q32(1, 2, 2, 2) : RF_Q32(8, 2, 2, 2);
#else
    if (nt == 1) {
        if (v == 2) return RF_Q32(1, 2, 2, 4);
        if (v == 3) return RF_Q32(1, 4, 2, 2);
        return RF_Q32(1, 4, 2, 4);
    }
    if (v == 2) return RF_Q32(8, 2, 2, 4);
    if (v == 3) return RF_Q32(8, 4, 2, 2);
    return RF_Q32(8, 4, 2, 4);
#endif
#undef RF_Q32
}
#if !defined(RF_HIP)
/* resident blocks per SM of kern at `threads` and `smem` dynamic bytes, from the runtime (1 when it
 * cannot say) */
template <typename K>
static int rf_blocks_per_sm(K kern, int threads, size_t smem) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, threads, smem) != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = 1;
    }
    return n;
}
/* rows per warp for a grid of nw-warp blocks, per_sm of them resident per SM: rpw_req where not
 * 0, else the fewest that let the grid fit on the device at once; rounded up to a multiple of
 * unit (whole stages) */
static int64_t rf_rows_per_warp(const rf_gpu_ctx *ctx, int per_sm, int nw, int64_t n_out,
                                int rpw_req, int unit) {
    const int64_t warps = (int64_t)per_sm * ctx->info.sm_count * nw;
    const int64_t rpw = rpw_req ? rpw_req : (n_out + warps - 1) / warps;
    return (rpw + unit - 1) / unit * unit;
}
/* q32s variants (ring stages per warp, x of one token in shared memory): 4: (2, yes),
 * 5: (3, yes), 6: (1, yes), 7: (2, no: x read through L1); 9..12: 7 compiled for at least MINB =
 * 1, 3, 4, 5 resident blocks per SM (ptxas's register budget; 0: its own choice). Warps per
 * block: 4, fewer where the rings would pass 48 KB (Q8_0: 2 with 2 stages). Rows per warp:
 * rpw_req where not 0 (rounded up to whole stages), else the fewest that let the grid fit on the
 * device at once (resident blocks per SM from the runtime, asked once per kernel and KB of x). */
template <int T, int NTM, int S, int NW, bool XS, int NG, int MINB = 0, bool XR = false>
static rf_status rf_launch_q32s_k(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                                  const float4 *dx, int nt, int64_t n_in, int64_t n_out,
                                  int64_t rb, int rpw_req) {
    constexpr int SLOT = RF_WARP_SIZE * rf_q32_group<T>::GBYTES;
    constexpr bool FS = rf_q32_group<T>::FS;
    auto kern = rf_k_gemv_q32s<T, NTM, S, NW, XS, NG, MINB, XR>;
    /* x: n_in bytes of int8 + 8 (16 with the f32 sum) bytes per 32 (n_in <= 16384) */
    const size_t ring = (size_t)NW * S * SLOT;
    const size_t pad = (size_t)ctx->gemv_pad_kb * 1024; /* <= 16 KB */
    const size_t smem = (XS ? (size_t)n_in + (size_t)n_in / RF_QK * (FS ? 16 : 8) : 0) + pad;
    static int per_sm[48]; /* by KB of x and pad (<= 25 + 16) */
    static int attr_kb = (int)((48 * 1024 - ring) / 1024); /* dynamic KB the kernel may take */
    const int kb = (int)((smem + 1023) / 1024);
    if (kb > attr_kb) { /* raised only when needed: it can cost L1 */
        attr_kb = kb;
        (void)cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kb * 1024);
    }
    if (!per_sm[kb]) per_sm[kb] = rf_blocks_per_sm(kern, NW * ctx->info.warp_size, (size_t)kb * 1024);
    const int ng = (int)(n_in / RF_QK / rf_q32_group<T>::GB);
    /* whole stages where ng divides the warp: a multiple of 32 / ng rows */
    const int64_t rpw = rf_rows_per_warp(ctx, per_sm[kb], NW, n_out, rpw_req, ng < 32 && 32 % ng == 0 ? 32 / ng : 1);
    const int64_t blocks = (n_out + rpw * NW - 1) / (rpw * NW);
#if defined(RF_GEMV_TRACE)
    const int rpw_arg = (int)rpw | (int)((ctx->trace_seq++ & 0x7fffu) << 16); /* the call's slot */
#else
    const int rpw_arg = (int)rpw;
#endif
    return rf_gpu_launch(ctx, "rf_k_gemv_q32s", true, kern, dim3((unsigned)blocks),
                         dim3(NW * ctx->info.warp_size), smem, y, w, qx, dx, nt, n_in, n_out, rb,
                         rpw_arg);
}
/* q32h (variant 8): 4 warps per block, 2 ring stages; rows per warp as for q32s, a multiple of
 * the rows per stage */
template <int T, int NG>
static rf_status rf_launch_q32h(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                                const float4 *dx, int64_t n_in, int64_t n_out, int64_t rb,
                                int rpw_req) {
    constexpr int NW = 4, S = 2;
    auto kern = rf_k_gemv_q32h<T, S, NW, NG>;
    static int per_sm = 0;
    if (!per_sm) per_sm = rf_blocks_per_sm(kern, NW * ctx->info.warp_size, 0);
    const int ng = (int)(n_in / RF_QK / rf_q32_group<T>::GB), rps = RF_WARP_SIZE / 2 / ng;
    const int64_t rpw = rf_rows_per_warp(ctx, per_sm, NW, n_out, rpw_req, rps);
    const int64_t blocks = (n_out + rpw * NW - 1) / (rpw * NW);
    return rf_gpu_launch(ctx, "rf_k_gemv_q32h", true, kern, dim3((unsigned)blocks),
                         dim3(NW * ctx->info.warp_size), 0, y, w, qx, dx, n_in, n_out, rb, (int)rpw);
}
/* The default q32s configuration for one token, from the H100 occupancy sweeps of 2026-11-22
 * (docs/perf-gpu.md, sessions 6 and 7): the variant (7: ptxas's own register budget, ~80 for the
 * 4/5-bit formats; 9: at least one block per SM, ~140, more loads of x in flight; 11: at least 4
 * blocks per SM, 128; 13..20: x in registers (XR) with S ring stages and NW warps per block; 21:
 * one-warp blocks at 128 registers), and the rows per warp (0: the fewest that let the grid fit
 * on the device at once). Small products (4096x4096) gain from more resident warps, long ones
 * from more registers; Q8_0 (~148 registers whatever the budget) from 3 ring stages per warp,
 * but not right after the x quantization kernel (whole: rf_gpu_gemv), whose own latency then
 * adds to the product's tail; there Q4_0, Q4_K and Q5_K rows wider than 8192 take 4 rows per
 * warp (Q4_1, Q5_1 and Q8_0 lost 7-31 points with it on the H100). Rows of 16 or 32 groups
 * (4096 wide, where it was measured; narrower rows whose groups divide the warp take the same
 * rows per warp, and v7 in place of XR) keep x in registers where that won by more than ~2
 * points, mostly in one-warp blocks, which pack around the next call's blocks. */
static int rf_q32s_gb(rf_type t);
static void rf_q32s_tune(rf_type t, int64_t n_in, int64_t n_out, bool whole, int *v, int *rpw) {
    const int64_t ng = n_in / RF_QK / rf_q32s_gb(t);
    *v = n_in > 8192 ? 11 : n_out > 8192 ? 9 : 7;
    *rpw = whole && n_in > 8192 && (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K) ? 4 : 0;
    if (t == RF_TYPE_Q6_K && n_out <= 8192) *v = 11; /* ~150 registers at 4096x4096 too: 75% vs 56% */
    /* one-warp blocks at 128 registers, products only (14336->4096: 88% -> 90%, 84% -> 85%) */
    if (!whole && n_in > 8192 && (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_K)) *v = 21;
    if (t == RF_TYPE_Q8_0) {
        *v = 7;
        *rpw = whole || ng < 16 ? 0 : ng <= RF_WARP_SIZE && RF_WARP_SIZE % ng == 0 ? 3 * (RF_WARP_SIZE / (int)ng) : 2;
    }
    if (n_in > 4096 || ng > RF_WARP_SIZE || RF_WARP_SIZE % ng) return;
    /* x in registers: {variant, rows per warp} at n_out <= 8192 and above (4096 -> 14336), for
     * the product and the whole call alike (whole_only: the whole call only); the comments:
     * product, then whole call, at 4096x4096 and 4096->14336, before -> after, H100 */
    static const struct { rf_type t; bool whole_only; int v, rpw, v_tall, rpw_tall; } xr[] = {
        {RF_TYPE_Q4_0, false, 17, 0, 17, 12}, /* 81 -> 85%, 90 -> 96%; 62 -> 65%, 83 -> 89% */
        {RF_TYPE_Q4_1, false, 20, 0, 17, 0},  /* 76 -> 89%, 90 -> 94% */
        {RF_TYPE_Q8_0, true, 20, 0, 17, 0},   /* whole call: 79 -> 83%, 91 -> 93% */
        {RF_TYPE_Q4_K, false, 17, 0, 17, 12}, /* 72 -> 88%, 89 -> 95% */
        {RF_TYPE_Q5_K, false, 20, 0, 9, 0},   /* 70 -> 76%; (v13, 4 rows: 92% in the sweep, 87% after) */
        {RF_TYPE_Q6_K, false, 11, 0, 17, 16}, /* -, 91 -> 96% */
    };
    for (size_t i = 0; i < sizeof xr / sizeof xr[0]; i++)
        if (xr[i].t == t && (whole || !xr[i].whole_only)) {
            *v = n_out > 8192 ? xr[i].v_tall : xr[i].v;
            *rpw = n_out > 8192 ? xr[i].rpw_tall : xr[i].rpw;
        }
    /* 4096 < n_out <= 8192 (Q, K and V as one product: 4096 -> 6144): v20 at about 1024 warps,
     * as the default gives 4096x4096 (H100 products, 4096 -> 5120 / 6144 / 8192: Q4_0 82 / 79 /
     * 84 -> 86 / 87 / 89%, Q4_K 77 / 77 / 76 -> 75 / 88 / 91%; docs/data, session 8) */
    if (!whole && n_out > 4096 && n_out <= 8192 && (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_K))
        *v = 20, *rpw = (int)((n_out + 1023) / 1024 + 1) / 2 * 2;
}
/* q32s warps per block for S ring stages: nmax (4 unless asked), fewer where the rings would pass
 * 48 KB */
template <int T> static constexpr int rf_q32s_warps(int s, int nmax = 4) {
    return 49152 / (s * RF_WARP_SIZE * rf_q32_group<T>::GBYTES) >= nmax ? nmax
         : 49152 / (s * RF_WARP_SIZE * rf_q32_group<T>::GBYTES) >= 1 ? 49152 / (s * RF_WARP_SIZE * rf_q32_group<T>::GBYTES) : 1;
}
/* v7 for one token at register budget MB (0: ptxas's own): the common widths' group counts
 * compiled in, so x's offsets are immediates */
template <int T, int MB, int S = 2, int NWR = 4>
static rf_status rf_launch_q32s_ng(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                                   const float4 *dx, int64_t n_in, int64_t n_out, int64_t rb,
                                   int rpw) {
    constexpr int NW = rf_q32s_warps<T>(S, NWR);
    const int64_t ng = n_in / RF_QK / rf_q32_group<T>::GB;
    if (ng == 16) /* 4096 wide (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K) */
        return rf_launch_q32s_k<T, 1, S, NW, false, 16, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw);
    if (ng == 32) /* 4096 wide (Q4_1, Q5_1), 8192 (Q4_0 ...) */
        return rf_launch_q32s_k<T, 1, S, NW, false, 32, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw);
    if (ng == 56) /* 14336 wide */
        return rf_launch_q32s_k<T, 1, S, NW, false, 56, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw);
    return rf_launch_q32s_k<T, 1, S, NW, false, 0, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw);
}
/* XR (x in registers; rows of 16 or 32 groups, else v7) with S ring stages and up to NWR warps
 * per block (fewer where the rings would pass 48 KB) */
template <int T, int S, int NWR>
static rf_status rf_launch_q32s_xr(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                                   const float4 *dx, int64_t n_in, int64_t n_out, int64_t rb,
                                   int rpw) {
    constexpr int SB = RF_WARP_SIZE * rf_q32_group<T>::GBYTES; /* bytes per slot */
    constexpr int SS = S * SB > 49152 ? 49152 / SB : S;
    constexpr int NW = rf_q32s_warps<T>(SS, NWR);
    const int64_t ng = n_in / RF_QK / rf_q32_group<T>::GB;
    if (ng == 16)
        return rf_launch_q32s_k<T, 1, SS, NW, false, 16, 0, true>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw);
    if (ng == 32)
        return rf_launch_q32s_k<T, 1, SS, NW, false, 32, 0, true>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw);
    return rf_launch_q32s_ng<T, 0>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
}
/* gemv_mma (2..8 tokens, Q4_0 / Q8_0, n_in a multiple of 256): 8 warps per 16 rows, 3 ring
 * stages (4 and 6 measured the same on the H100, 2 lower: docs/perf-gpu.md, session 8); the
 * dynamic shared memory (up to 169 KB for 8 tokens of Q8_0) allowed once it passes 48 KB */
template <int T>
static rf_status rf_launch_mma(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                               const float4 *dx, int nt, int64_t n_in, int64_t n_out, int64_t rb) {
    constexpr int S = 3, NW = 8;
    auto kern = rf_k_gemv_mma<T, S, NW>;
    const size_t smem = (size_t)NW * S * rf_mma_slot(T == RF_TYPE_Q4_0 ? 18 : 34, nt);
    static size_t attr = 48 * 1024;
    if (smem > attr) {
        const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return rf_set_error(RF_ERR_DEVICE, "rf_k_gemv_mma: %zu bytes of shared memory: %s", smem,
                                cudaGetErrorString(e));
        attr = smem;
    }
#if defined(RF_GEMV_TRACE)
    const int nt_arg = nt | (int)((ctx->trace_seq++ & 0x7fffu) << 8); /* the call's trace slot */
#else
    const int nt_arg = nt;
#endif
    return rf_gpu_launch(ctx, "rf_k_gemv_mma", true, kern, dim3((unsigned)((n_out + 15) / 16)),
                         dim3(NW * 32), smem, y, w, qx, (const float2 *)dx, nt_arg, n_in, n_out, rb);
}
template <int T>
static rf_status rf_launch_q32s(rf_gpu_ctx *ctx, int v, float *y, const uint8_t *w,
                                const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                                int64_t n_out, int64_t rb, bool whole) {
#define RF_Q32S(NTM, S, XS) rf_launch_q32s_k<T, NTM, S, rf_q32s_warps<T>(S), XS, 0>(ctx, y, w, qx, dx, nt, n_in, n_out, rb, rpw)
    int rpw = ctx->gemv_rpw;
    if (nt == 1 && ctx->gemv_variant == 0) { /* the default: tuned by shape */
        int tv = 7, trpw = 0;
        rf_q32s_tune((rf_type)T, n_in, n_out, whole, &tv, &trpw);
        v = tv;
        if (!rpw) rpw = trpw;
    }
    if (nt == 1) {
        if constexpr (rf_q32h_ok<T>::value) { /* v8: q32h where each stage holds whole rows */
            const int64_t ng = n_in / RF_QK / rf_q32_group<T>::GB;
            if (v == 8 && ng == 16) return rf_launch_q32h<T, 16>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
            if (v == 8 && RF_WARP_SIZE / 2 % ng == 0) return rf_launch_q32h<T, 0>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        }
        if (v == 5) return RF_Q32S(1, 3, true);
        if (v == 6) return RF_Q32S(1, 1, true);
        switch (v) { /* v7 (and v8 where its kernel does not apply); 9..12: at least MB blocks
                      * per SM */
        case 9: return rf_launch_q32s_ng<T, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 10: return rf_launch_q32s_ng<T, 3>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 11: return rf_launch_q32s_ng<T, 4>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 12: return rf_launch_q32s_ng<T, 5>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 13: return rf_launch_q32s_xr<T, 2, 4>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 14: return rf_launch_q32s_xr<T, 3, 4>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 15: return rf_launch_q32s_xr<T, 4, 4>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 16: return rf_launch_q32s_xr<T, 2, 2>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 17: return rf_launch_q32s_xr<T, 4, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 18: return rf_launch_q32s_xr<T, 6, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 19: return rf_launch_q32s_xr<T, 3, 2>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 20: return rf_launch_q32s_xr<T, 2, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 21: return rf_launch_q32s_ng<T, 16, 2, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 22: return rf_launch_q32s_ng<T, 1, 2, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 23: return rf_launch_q32s_ng<T, 0, 2, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        case 7: case 8: case 24: return rf_launch_q32s_ng<T, 0>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw);
        default: break;
        }
        return RF_Q32S(1, 2, true);
    }
    /* 2..8 tokens of Q4_0 / Q8_0 on the tensor cores (variant 24), by default from 4 tokens on
     * and for rows wider than 8192 (H100: 4 tokens 27-43% -> 34-63%, 8 tokens 16-23% -> 23-49%;
     * 2 tokens of 4096-wide rows stay faster in q32s: 44-67% against 36-54%) */
    if constexpr (T == RF_TYPE_Q4_0 || T == RF_TYPE_Q8_0)
        if ((v == 24 || (ctx->gemv_variant == 0 && (nt >= 4 || n_in > 8192))) && n_in % 256 == 0 &&
            ctx->info.cc_major >= 8)
            return rf_launch_mma<T>(ctx, y, w, qx, dx, nt, n_in, n_out, rb);
    if (v == 5) return RF_Q32S(8, 3, false);
    if (v == 6) return RF_Q32S(8, 1, false);
    return RF_Q32S(8, 2, false);
#undef RF_Q32S
}
#endif
/* the blocks per group of the q32s kernel for a 32-element format, 0 for others */
static int rf_q32s_gb(rf_type t) {
    switch (t) {
    case RF_TYPE_Q4_0: return rf_q32_group<RF_TYPE_Q4_0>::GB;
    case RF_TYPE_Q4_1: return rf_q32_group<RF_TYPE_Q4_1>::GB;
    case RF_TYPE_Q5_0: return rf_q32_group<RF_TYPE_Q5_0>::GB;
    case RF_TYPE_Q5_1: return rf_q32_group<RF_TYPE_Q5_1>::GB;
    case RF_TYPE_Q8_0: return rf_q32_group<RF_TYPE_Q8_0>::GB;
    case RF_TYPE_Q4_K: return rf_q32_group<RF_TYPE_Q4_K>::GB;
    case RF_TYPE_Q5_K: return rf_q32_group<RF_TYPE_Q5_K>::GB;
    case RF_TYPE_Q6_K: return rf_q32_group<RF_TYPE_Q6_K>::GB;
    default: return 0;
    }
}
template <int T>
static rf_status rf_launch_f16(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, float *y,
                               const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out) {
    const char *name = "rf_k_gemv_f16";
#define RF_F16(NTM, UNR, WPR) rf_gpu_launch(ctx, name, true, rf_k_gemv_f16<T, NTM, UNR, WPR>, dim3(grid), dim3(threads), 0, y, w, x, nt, n_in, n_out)
    if (nt == 1) {
        if (v == 1) return RF_F16(1, 4, 1);
        if (v == 2) return RF_F16(1, 4, 4);
        return RF_F16(1, 2, 4);
    }
    if (v == 1) return RF_F16(8, 4, 1);
    return RF_F16(8, 4, 4);
#undef RF_F16
}
#if !defined(RF_HIP)
/* gemv_tc (2..8 tokens of F16 / BF16, n_in a multiple of 32): 8 warps per 16 rows, each with 4
 * chunks in flight (121 registers, two blocks per SM; 8 spill). Variant 26 keeps 2 in flight
 * (69 registers, three blocks per SM): 2-8 tokens read 77 / 83 / 84% of the bandwidth at
 * 4096x4096 / 4096->14336 / 14336->4096 against 84 / 84 / 88% with 4 (H100, session 9) */
template <int T>
static rf_status rf_launch_tc(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const float *x, int nt,
                              int64_t n_in, int64_t n_out) {
    constexpr int NW = 8;
    const dim3 grid((unsigned)((n_out + 15) / 16)), block(NW * 32);
    if (ctx->gemv_variant == 26)
        return rf_gpu_launch(ctx, "rf_k_gemv_tc", true, rf_k_gemv_tc<T, NW, 2>, grid, block, 0, y, w, x, nt, n_in, n_out);
    return rf_gpu_launch(ctx, "rf_k_gemv_tc", true, rf_k_gemv_tc<T, NW, 4>, grid, block, 0, y, w, x, nt, n_in, n_out);
}
#endif
template <int T>
static rf_status rf_launch_k(rf_gpu_ctx *ctx, int v, unsigned grid, unsigned threads, float *y,
                             const uint8_t *w, const float *x, int nt, int64_t n_in, int64_t n_out,
                             int64_t rb) {
    const char *name = "rf_k_gemv_k";
#define RF_K(K, NTM, WPR) rf_gpu_launch(ctx, name, true, K<TK, NTM, WPR>, dim3(grid), dim3(threads), 0, y, w, x, nt, n_in, n_out, rb)
    if (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
        constexpr int TK = T == RF_TYPE_Q5_K ? RF_TYPE_Q5_K : RF_TYPE_Q4_K;
        if (v == 1) return nt == 1 ? RF_K(rf_k_gemv_k45, 1, 1) : RF_K(rf_k_gemv_k45, 8, 1);
        return nt == 1 ? RF_K(rf_k_gemv_k45, 1, 4) : RF_K(rf_k_gemv_k45, 8, 4);
    }
    constexpr int TK = T;
    if (v == 1) return nt == 1 ? RF_K(rf_k_gemv_k, 1, 1) : RF_K(rf_k_gemv_k, 8, 1);
    return nt == 1 ? RF_K(rf_k_gemv_k, 1, 4) : RF_K(rf_k_gemv_k, 8, 4);
#undef RF_K
}

/* ---- the 32-element formats: x quantized once, then the product ---------------------- */

/* the product kernel for (type, n_in, n_tokens) and the context's variant: q32 variants 1..3,
 * q32s 4..7, 9..23 and q32h 8 (rows of whole 16-byte groups, n_in <= 16384, CUDA); default from the H100 sweeps
 * in docs/perf-gpu.md */
static int rf_q32_variant(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n_out) {
    const int gb = rf_q32s_gb(t);
#if defined(RF_HIP)
    const bool fits = false; /* wave64 rings of 64 groups would not fit */
    (void)gb;
#else
    /* x in 24 KB; Q6_K rows of whole 16-byte words (8k super-blocks of 210 bytes); the rings'
     * cp.async needs sm_80 (older GPUs take gemv_q32, whose copies fall back to loads) */
    const bool fits = gb > 0 && n_in / RF_QK % gb == 0 && n_in <= 16384 &&
                      (t != RF_TYPE_Q6_K || n_in % 2048 == 0) && ctx->info.cc_major >= 8;
#endif
    int v = ctx->gemv_variant >= 1 && ctx->gemv_variant <= 24 ? ctx->gemv_variant : 0;
    /* q32s (x through L1; its register budget and rows per warp tuned by shape, rf_q32s_tune)
     * wherever it takes the rows, except Q5_0 rows wider than 8192, which decode faster in
     * gemv_q32 (H100, product at 14336->4096: 78.6% vs 72-77% for q32s). The kernel family may
     * depend on the type and n_in only, never n_out: x's order follows it, and one quantized x
     * serves products of several heights (rf_gpu_quantize_x). */
    if (!v) v = fits && (t != RF_TYPE_Q5_0 || n_in <= 8192) ? 7 : n_in <= 4096 && n_out <= 4096 ? 3 : 2;
    if (v >= 4 && !fits) v = 2; /* a forced q32s variant on rows it cannot take */
    return v;
}

extern "C" size_t rf_gpu_xq_bytes(int64_t n_tokens, int64_t n_in) {
    const size_t n = (size_t)n_tokens * (size_t)n_in;
    return ((n + 255) & ~(size_t)255) + n / RF_QK * sizeof(float4);
}

/* quantize_x into xq for the product rf_q32_variant picks (its x order); n_out does not change
 * the order, only the variant's kernel among 1..3, which share it */
static rf_status rf_q32_quantize(rf_gpu_ctx *ctx, void *xq, rf_type t, const float *x, int nt,
                                 int64_t n_in) {
    const int v = rf_q32_variant(ctx, t, n_in, 1);
    const size_t n = (size_t)nt * (size_t)n_in;
    float4 *dx = (float4 *)((char *)xq + ((n + 255) & ~(size_t)255));
    const int gb = v >= 4 ? rf_q32s_gb(t) : 1;
    const bool fs = t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_1 || t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K ||
                    t == RF_TYPE_Q6_K;
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

/* whole: x was quantized by the kernel right before (rf_gpu_gemv), which the default tuning
 * takes into account */
static rf_status rf_q32_product(rf_gpu_ctx *ctx, float *y, const uint8_t *w, rf_type t,
                                const void *xq, int nt, int64_t n_in, int64_t n_out, bool whole) {
    const int v = rf_q32_variant(ctx, t, n_in, n_out);
    (void)whole; /* HIP: q32 only, not tuned by shape */
    const int64_t rb = n_in / rf_gq_block((int)t) * rf_gq_bytes((int)t);
    const size_t n = (size_t)nt * (size_t)n_in;
    const int8_t *qx = (const int8_t *)xq;
    const float4 *dx = (const float4 *)((const char *)xq + ((n + 255) & ~(size_t)255));
#if !defined(RF_HIP)
    if (v >= 4) {
        switch (t) {
        case RF_TYPE_Q4_0: return rf_launch_q32s<RF_TYPE_Q4_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole);
        case RF_TYPE_Q4_1: return rf_launch_q32s<RF_TYPE_Q4_1>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole);
        case RF_TYPE_Q5_0: return rf_launch_q32s<RF_TYPE_Q5_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole);
        case RF_TYPE_Q5_1: return rf_launch_q32s<RF_TYPE_Q5_1>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole);
        case RF_TYPE_Q4_K: return rf_launch_q32s<RF_TYPE_Q4_K>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole);
        case RF_TYPE_Q5_K: return rf_launch_q32s<RF_TYPE_Q5_K>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole);
        case RF_TYPE_Q6_K: return rf_launch_q32s<RF_TYPE_Q6_K>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole);
        default: return rf_launch_q32s<RF_TYPE_Q8_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole);
        }
    }
#endif
    switch (t) {
    case RF_TYPE_Q4_0: return rf_launch_q32<RF_TYPE_Q4_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb);
    case RF_TYPE_Q4_1: return rf_launch_q32<RF_TYPE_Q4_1>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb);
    case RF_TYPE_Q5_0: return rf_launch_q32<RF_TYPE_Q5_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb);
    case RF_TYPE_Q5_1: return rf_launch_q32<RF_TYPE_Q5_1>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb);
    default: return rf_launch_q32<RF_TYPE_Q8_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb);
    }
}

/* whether (t, n_in) has an int8-x product: the 32-element formats always, Q4_K / Q5_K / Q6_K
 * where the q32s kernel takes the rows (CUDA, n_in a multiple of 256 up to 16384) and the context's variant
 * is not one of the K kernels' (1..3) */
static bool rf_has_xq(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in) {
    if (t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K) return rf_q32_variant(ctx, t, n_in, 1) >= 4;
    return t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_0 || t == RF_TYPE_Q5_1 ||
           t == RF_TYPE_Q8_0;
}

/* the checks rf_gpu_quantize_x and rf_gpu_gemv_xq share (op names the caller) */
static rf_status rf_xq_check(const rf_gpu_ctx *ctx, const char *op, rf_type wtype,
                             int64_t n_tokens, int64_t n_in) {
    RF_GPU_REQUIRE(n_tokens >= 1 && n_tokens <= 8, op, "n_tokens=%lld outside 1..8", (long long)n_tokens);
    RF_GPU_REQUIRE(n_in >= RF_QK && n_in % RF_QK == 0 && n_in <= ((int64_t)1 << 28), op,
                   "n_in=%lld not a multiple of 32 in 32..2^28", (long long)n_in);
    RF_GPU_REQUIRE(rf_has_xq(ctx, wtype, n_in), op,
                   "weight type %d has no int8-x product for n_in=%lld (32-element formats; Q4_K, "
                   "Q5_K with CUDA and n_in a multiple of 256 up to 16384, Q6_K of 2048)", (int)wtype, (long long)n_in);
    return RF_OK;
}

/* the whole int8-x product: x quantized into scratch, then the product kernel */
static rf_status rf_xq_gemv(rf_gpu_ctx *ctx, float *y, const uint8_t *w, rf_type t, const float *x,
                            int nt, int64_t n_in, int64_t n_out) {
    size_t mark;
    void *xq;
    rf_status st = rf_gpu_tmp(ctx, rf_gpu_xq_bytes(nt, n_in), &xq, &mark);
    if (!st) st = rf_q32_quantize(ctx, xq, t, x, nt, n_in);
    if (!st) st = rf_q32_product(ctx, y, w, t, xq, nt, n_in, n_out, true);
    ctx->scratch_used = mark; /* stream order (and rf_pdl_wait) protects the reuse */
    return st;
}

extern "C" rf_status rf_gpu_quantize_x(rf_gpu_ctx *ctx, void *xq, rf_type wtype, const float *x,
                                       int64_t n_tokens, int64_t n_in) {
    const char *op = "rf_gpu_quantize_x";
    const rf_status st = rf_xq_check(ctx, op, wtype, n_tokens, n_in);
    if (st) return st;
    RF_GPU_REQUIRE(((uintptr_t)xq & 15) == 0 && ((uintptr_t)x & 15) == 0, op,
                   "x and xq must be 16-byte aligned (rf_gpu_alloc memory)");
    return rf_q32_quantize(ctx, xq, wtype, x, (int)n_tokens, n_in);
}

extern "C" rf_status rf_gpu_gemv_xq(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                    const void *xq, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_gemv_xq";
    const rf_status st = rf_xq_check(ctx, op, wtype, n_tokens, n_in);
    if (st) return st;
    RF_GPU_REQUIRE(n_out >= 1 && n_out <= 0x7fffffff, op, "n_out=%lld", (long long)n_out);
    RF_GPU_REQUIRE(((uintptr_t)w & 15) == 0 && ((uintptr_t)xq & 15) == 0 && ((uintptr_t)y & 3) == 0,
                   op, "w and xq must be 16-byte aligned (rf_gpu_alloc memory)");
    return rf_q32_product(ctx, y, (const uint8_t *)w, wtype, xq, (int)n_tokens, n_in, n_out, false);
}

extern "C" rf_status rf_gpu_gemv(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                 const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_gemv";
    RF_GPU_REQUIRE(rf_gpu_type_supported(wtype), op, "weight type %d has no GPU decoder",
                   (int)wtype);
    RF_GPU_REQUIRE(n_tokens >= 1 && n_tokens <= 8, op, "n_tokens=%lld outside 1..8",
                   (long long)n_tokens);
    const int bs = rf_gq_block((int)wtype), bb = rf_gq_bytes((int)wtype);
    RF_GPU_REQUIRE(n_in >= 1 && n_in % bs == 0, op, "n_in=%lld not a multiple of block size %d",
                   (long long)n_in, bs);
    RF_GPU_REQUIRE(n_out >= 1 && n_out <= 0x7fffffff, op,
                   "n_out=%lld", (long long)n_out);
    RF_GPU_REQUIRE(n_in <= ((int64_t)1 << 28), op, "n_in=%lld above 2^28", (long long)n_in);
    RF_GPU_REQUIRE(((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 3) == 0,
                   op, "w and x must be 16-byte aligned (rf_gpu_alloc memory)");
    const int64_t rb = n_in / bs * bb;
    const int nt = (int)n_tokens;
    const unsigned threads = RF_GEMV_WARPS * ctx->info.warp_size;
    const unsigned grid = (unsigned)((n_out + RF_GEMV_WARPS - 1) / RF_GEMV_WARPS);
    /* variants 4..7 are the q32s kernel's only: the other kernels take their default */
    const int vsel = ctx->gemv_variant >= 1 && ctx->gemv_variant <= 3 ? ctx->gemv_variant : 0;
    const int v = vsel ? vsel : RF_GEMV_DEFAULT_F16; /* F16/BF16 */
    const int rpb = rf_gemv_rows_per_block(v);
    const unsigned vgrid = (unsigned)((n_out + rpb - 1) / rpb); /* n_out < 2^31 checked above */
    /* K-quant default: one warp per row for Q4_K/Q5_K, four for Q6_K */
    const int vk = vsel ? vsel : wtype == RF_TYPE_Q6_K ? 2 : 1;
    const unsigned kgrid = (unsigned)((n_out + rf_gemv_rows_per_block(vk) - 1) / rf_gemv_rows_per_block(vk));
    const uint8_t *wp = (const uint8_t *)w;
    /* the 32-element formats, and Q4_K / Q5_K where q32s takes them: x -> int8 per 32 (+ scale
     * and sums) in scratch, then the dp4a kernel */
    if (rf_has_xq(ctx, wtype, n_in)) return rf_xq_gemv(ctx, y, wp, wtype, x, nt, n_in, n_out);
    switch (wtype) {
    case RF_TYPE_F16: case RF_TYPE_BF16:
#if !defined(RF_HIP)
        /* 2..8 tokens on the tensor cores (variants 25 and 26; 25 is the default) */
        if (nt >= 2 && n_in % 32 == 0 && ctx->info.cc_major >= 8 &&
            (ctx->gemv_variant == 0 || ctx->gemv_variant == 25 || ctx->gemv_variant == 26)) {
            if (wtype == RF_TYPE_F16) return rf_launch_tc<RF_TYPE_F16>(ctx, y, wp, x, nt, n_in, n_out);
            return rf_launch_tc<RF_TYPE_BF16>(ctx, y, wp, x, nt, n_in, n_out);
        }
#endif
        if (n_in % 8 == 0) {
            if (wtype == RF_TYPE_F16) return rf_launch_f16<RF_TYPE_F16>(ctx, v, vgrid, threads, y, wp, x, nt, n_in, n_out);
            return rf_launch_f16<RF_TYPE_BF16>(ctx, v, vgrid, threads, y, wp, x, nt, n_in, n_out);
        }
        /* fall through: unaligned rows take the generic kernel */
    default:
        if (wtype == RF_TYPE_Q4_K) return rf_launch_k<RF_TYPE_Q4_K>(ctx, vk, kgrid, threads, y, wp, x, nt, n_in, n_out, rb);
        if (wtype == RF_TYPE_Q5_K) return rf_launch_k<RF_TYPE_Q5_K>(ctx, vk, kgrid, threads, y, wp, x, nt, n_in, n_out, rb);
        if (wtype == RF_TYPE_Q6_K) return rf_launch_k<RF_TYPE_Q6_K>(ctx, vk, kgrid, threads, y, wp, x, nt, n_in, n_out, rb);
        return rf_gpu_launch(ctx, "rf_k_gemv_generic", false, rf_k_gemv_generic, dim3(grid),
                             dim3(threads), 0, y, wp, (int)wtype, x, nt, n_in, n_out, rb, bs, bb);
    }
}

/* the timeline trace (RF_GEMV_TRACE builds; else RF_ERR_UNSUPPORTED) */
extern "C" rf_status rf_gpu_trace_reset(rf_gpu_ctx *ctx) {
#if defined(RF_GEMV_TRACE)
    RF_GPU_CHECK(cudaStreamSynchronize(ctx->stream));
    ctx->trace_seq = 0;
    return RF_OK;
#else
    (void)ctx;
    return rf_set_error(RF_ERR_UNSUPPORTED, "GEMV trace: build with -DRF_GEMV_TRACE=ON");
#endif
}
#if defined(RF_GEMV_TRACE)
/* the last min(max_calls, cap, launches) calls' slots of a trace buffer (sym: cap slots of per
 * bytes), oldest first, into out; *ncalls = their number */
static rf_status rf_trace_copy(rf_gpu_ctx *ctx, const void *sym, int cap, size_t per, uint64_t *out,
                               int max_calls, int *ncalls) {
    RF_GPU_CHECK(cudaStreamSynchronize(ctx->stream));
    int n = (int)ctx->trace_seq < max_calls ? (int)ctx->trace_seq : max_calls;
    if (n > cap) n = cap;
    for (int i = 0; i < n; i++) {
        const unsigned c = (ctx->trace_seq - (unsigned)n + (unsigned)i) % (unsigned)cap;
        RF_GPU_CHECK(cudaMemcpyFromSymbol((char *)out + i * per, sym, per, c * per));
    }
    *ncalls = n;
    return RF_OK;
}
#endif
extern "C" rf_status rf_gpu_trace_read_mma(rf_gpu_ctx *ctx, uint64_t *out, int max_calls,
                                           int *ncalls, int *grid) {
#if defined(RF_GEMV_TRACE)
    const rf_status st = rf_trace_copy(ctx, rf_trace_mma, RF_TRACE_MMA_CALLS,
                                       (size_t)RF_TRACE_MMA_BLOCKS * 16 * sizeof(uint64_t), out,
                                       max_calls, ncalls);
    *grid = !st && *ncalls ? (int)out[15] : 0;
    return st;
#else
    (void)ctx, (void)out, (void)max_calls;
    *ncalls = *grid = 0;
    return rf_set_error(RF_ERR_UNSUPPORTED, "GEMV trace: build with -DRF_GEMV_TRACE=ON");
#endif
}
extern "C" rf_status rf_gpu_trace_read(rf_gpu_ctx *ctx, uint64_t *out, int max_calls, int *ncalls,
                                       int *grid) {
#if defined(RF_GEMV_TRACE)
    const rf_status st = rf_trace_copy(ctx, rf_trace_buf, RF_TRACE_CALLS,
                                       (size_t)RF_TRACE_BLOCKS * 4 * sizeof(uint64_t), out,
                                       max_calls, ncalls);
    *grid = !st && *ncalls ? (int)(out[3] & 0xffffffffu) : 0;
    return st;
#else
    (void)ctx, (void)out, (void)max_calls;
    *ncalls = *grid = 0;
    return rf_set_error(RF_ERR_UNSUPPORTED, "GEMV trace: build with -DRF_GEMV_TRACE=ON");
#endif
}
