/* gpu_w4a16.cu — W4A16: quantized products of many tokens (33..thousands) on the f16 tensor cores
 * (CUDA sm_80+, mma.sync m16n8k16; on sm_90 the stages filled by tensor copies), the weights kept
 * quantized in memory and dequantized to f16 in registers per fragment; Q4_0, Q4_K, Q5_K, Q8_0.
 * Twin: rf_ref_matmul (x as rf_gpu_gemm rounds it).
 *
 * Contract (rf_gpu_w4a16, rf_gpu_w4a16_f16x):
 *   y[t, o] = sum_i W[o, i] x[t, i], y f32 [n_tokens, n_out] row-major (rf_gpu_matmul's layout),
 *   W: n_out rows in ggml's layout (row_bytes = n_in / block * block bytes), n_in a multiple of
 *   256 (256 .. 2^28), 1 <= n_tokens <= 65535, n_tokens * n_in < 2^31; W and x 16-byte aligned
 *   (rf_gpu_alloc memory), y 4-byte aligned. rf_gpu_w4a16 takes f32 x and rounds it as the BLAS
 *   path does (rf_k_f32_to_f16_q8 of gpu_gemm.cu: int8 per 32 with ggml's rounding, times the
 *   f16 scale, rounded to f16), so rf_gpu_matmul_rounds_x answers the same for either route;
 *   rf_gpu_w4a16_f16x takes x already in f16 [n_tokens, n_in].
 * Error model against a twin that uses the same f16 operands (the test's): every weight is the
 *   f16 the kernel forms, Q4_0 / Q8_0 f16(d (q - c)) (one rounding of an exact product), Q4_K
 *   / Q5_K f16(q s - m) with s = f16(d sc), m = f16(dmin mn) (three roundings); x the f16 above.
 *   Products of two f16 are exact in f32; the tensor cores add each k16 step's 16 products to
 *   the f32 accumulator with the significands aligned to the largest and truncated (a few extra
 *   bits), then normalised toward zero: per step at most ~(17 2^-26 + 2^-23) of the larger of
 *   |acc| and the step's sum of |w x|, taken as 8 u32 (u32 = 2^-24); steps in k order within a
 *   split (RF_W4A16_CFG 3: each half of every chunk summed by its own warp, the two added once at
 *   the end: fewer steps in a chain, the same bound), splits (<= 8) added in order by
 *   rf_k_w4a16_reduce. Bound per output:
 *   8 u32 (n_in / 16 + 8) sum_i |w_i x_i|. Against rf_ref_matmul (f32 x, exact weights): the
 *   int8 rounding of x (~0.5% rel. L2, as MMQ / BLAS) and 2^-11 per weight dominate: rel. L2
 *   < 1e-2. (Q8_0 is W8A16 by the same scheme; the name is the family's.)
 * Not batch invariant (splits depend on the token count); deterministic call to call. */
#include <stdlib.h>
#include <string.h>

#if !defined(RF_HIP)
#include <cuda.h> /* CUtensorMap and its encoder's types (the encoder itself through the runtime) */
#endif

#include "core/knobs.h"
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_quant.cuh"

#define RF_W4_BM 128   /* weight rows per block: 4 warps along them, 32 rows (2 m16 fragments) each */
#define RF_W4_KC 256   /* elements of a row per pipeline stage (a Q4_K super-block, 8 Q4_0 / Q8_0 blocks) */
#define RF_W4_SB 528   /* a staged token's stride: 512 bytes of f16 x + 16 (ldmatrix rows on distinct banks) */
#define RF_W4_NTH 256  /* threads per block: 8 warps, 4 along the rows x 2 along the tokens or the chunk */

#if !defined(RF_HIP) /* mma.sync, ldmatrix, cp.async: CUDA only */

/* SA: bytes of a row per stage (16-byte multiple; word count 4 mod 8, so the rows g of a fragment
 * load fall on distinct banks) */
template <int T> struct rf_w4_fmt;
template <> struct rf_w4_fmt<RF_TYPE_Q4_0> { static constexpr int SA = 144; };
template <> struct rf_w4_fmt<RF_TYPE_Q4_K> { static constexpr int SA = 144; };
template <> struct rf_w4_fmt<RF_TYPE_Q5_K> { static constexpr int SA = 176; };
template <> struct rf_w4_fmt<RF_TYPE_Q8_0> { static constexpr int SA = 272; };

/* BN tokens per block (64 or 128), ST stages; 8 warps, 4 along the rows x WN along the tokens x
 * KW along a chunk: KW 1 (WN 2, each BN / 2 tokens) or, with BN 64, KW 2 (WN 1, each all 64
 * tokens and half of every chunk: each weight fragment decoded by one warp, not two). (BN 128 with
 * KW 2 in 16 warps at <= 128 registers was measured, H200 2026-11-30: no faster than KW 1 at 128
 * tokens, so not kept.) TM: the stages filled by the tensor memory accelerator (sm_90: one thread
 * issues a stage's copies, rf_k_w4a16's header), x staged as four 128-byte-swizzled column
 * blocks of BN rows (XBYTES: no padding), a stage's full barrier (8 bytes) after the ring and
 * 1,024 bytes of room to align the ring (TMA's swizzle works on 1,024-byte-aligned addresses). */
template <int T, int BN, int KW, bool TM> struct rf_w4_tile {
    static_assert(KW == 1 || (KW == 2 && BN == 64), "the chunk split in 8 warps: tiles of 64 tokens");
    static constexpr int WN = 2 / KW;                                   /* warps along the tokens */
    static constexpr int SA = rf_w4_fmt<T>::SA;
    static constexpr int ST = 2;
    static constexpr int ABYTES = RF_W4_BM * SA;
    static constexpr int XBYTES = TM ? BN * 512 : BN * RF_W4_SB;
    static constexpr int STAGE = ABYTES + XBYTES;
    static_assert(!TM || (ABYTES % 1024 == 0 && STAGE % 1024 == 0), "TMA stages on 1,024-byte boundaries");
    static constexpr int SMEM = ST * STAGE + (TM ? 1024 + 8 * ST : 0);
    /* blocks per SM (Q4_K / Q5_K: 1, their scales would spill at 128 registers) */
    static constexpr int MINB = T != RF_TYPE_Q4_K && T != RF_TYPE_Q5_K && 2 * SMEM + 2048 <= 228 * 1024 ? 2 : 1;
    static constexpr int NF = BN / WN / 8;                              /* n8 fragments per warp */
    static_assert(KW == 1 || 4 * (2 * NF * 4) * 32 * 4 <= ST * STAGE, "the k-split's partial sums fit the stages");
};

/* The tensor memory accelerator (CUDA sm_90; the kernels using it are launched only there and trap
 * elsewhere): an mbarrier in shared memory that completes a phase once its one arrival and the
 * bytes it expects have landed, and a 2-D tile copy of a CUtensorMap's box at (c0, c1) into
 * shared memory, signalling that barrier with its bytes. */
static __device__ __forceinline__ void rf_w4_bar_init(unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
#else
    (void)bar;
    RF_DEVICE_TRAP();
#endif
}
/* the barriers' initialisation and the generic proxy's earlier shared-memory accesses ordered
 * before the copies that follow (async proxy) */
static __device__ __forceinline__ void rf_w4_fence_async(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
static __device__ __forceinline__ void rf_w4_bar_expect(unsigned bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#else
    (void)bar, (void)bytes;
#endif
}
static __device__ __forceinline__ void rf_w4_bar_wait(unsigned bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
#else
    (void)bar, (void)parity;
#endif
}
static __device__ __forceinline__ void rf_w4_tma2d(unsigned dst, const CUtensorMap *map, int c0, int c1, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
#else
    (void)dst, (void)map, (void)c0, (void)c1, (void)bar;
    RF_DEVICE_TRAP();
#endif
}
/* the same for a 3-D map's box at (c0, c1, c2) */
static __device__ __forceinline__ void rf_w4_tma3d(unsigned dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                   unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
#else
    (void)dst, (void)map, (void)c0, (void)c1, (void)c2, (void)bar;
    RF_DEVICE_TRAP();
#endif
}

/* d += a b for one m16n8k16 f16 tile, f32 accumulators (not volatile: no memory effect, so the
 * compiler may interleave them with the next fragments' decoding) */
static __device__ __forceinline__ void rf_w4_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* four 8x8 f16 matrices from shared memory (volatile: ordered with the barriers) */
static __device__ __forceinline__ void rf_w4_ldm4(uint32_t *r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
static __device__ __forceinline__ __half2 rf_w4_h2(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return h;
}
static __device__ __forceinline__ uint32_t rf_w4_u(__half2 h) {
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
static __device__ __forceinline__ __half2 rf_w4_hb(uint16_t bits) { /* (h, h) from its bits */
    return rf_w4_h2((uint32_t)bits * 0x10001u);
}

/* The 4 bytes at o + 2t, + 1, + 8, + 9 of a staged row (its k16 pairs of lane t), as
 * (b0, b8, b1, b9): 4-bit nibbles of byte pairs fall in the two f16 halves by shift and mask */
static __device__ __forceinline__ uint32_t rf_w4_bytes(const uint8_t *r) {
    const uint32_t lo = *(const uint16_t *)r, hi = *(const uint16_t *)(r + 8);
    return __byte_perm(lo, hi, 0x5140u);
}
/* the halves (1024 + nibble) of v >> sh's low nibbles in bytes 0 and 2 (exact f16 integers) */
static __device__ __forceinline__ __half2 rf_w4_nib(uint32_t v, int sh) {
    return rf_w4_h2(((v >> sh) & 0x000F000Fu) | 0x64006400u);
}
/* the halves (1024 + 16 nibble) of v's high nibbles in bytes 0 and 2, unshifted: one LOP3 where
 * rf_w4_nib(v, 4) takes a shift too (H200: Q4_K's products 2-4% faster, Q4_0's unchanged); times
 * 1/16 in an fma it gives 64 + nibble + the fma's addend exactly */
static __device__ __forceinline__ __half2 rf_w4_nib16(uint32_t v) {
    return rf_w4_h2((v & 0x00F000F0u) | 0x64006400u);
}

/* The A elements one lane decodes from one staged row r for the k16 steps klo (lo) and khi (hi)
 * of sub-chunk (j, c): lo[0], lo[2] / hi[0], hi[2] are its two words of each (rf_k_w4a16's
 * fragment order); sl, ml / sh, mh: the K-quants' f16 scale and min of sub-blocks 2j and 2j + 1. */
template <int T>
static __device__ __forceinline__ void rf_w4_frags(uint32_t *lo, uint32_t *hi, const uint8_t *r, int j, int c, int t,
                                                   __half2 sl, __half2 ml, __half2 sh, __half2 mh) {
    (void)sl, (void)ml, (void)sh, (void)mh;
    if constexpr (T == RF_TYPE_Q4_0) {
        const int b = 2 * j + c;
        const uint32_t v = rf_w4_bytes(r + 18 * b + 2 + 2 * t);
        const __half2 d = rf_w4_hb(*(const uint16_t *)(r + 18 * b)), c8 = __float2half2_rn(1032.0f);
        const __half2 s16 = __float2half2_rn(0.0625f), c72 = __float2half2_rn(-72.0f);
        const uint32_t v8 = v >> 8; /* bytes 1, 3 of v in 0, 2 */
        /* q - 8 exactly either way ((1024 + 16 q) / 16 - 72 in one fma), then one rounding by d */
        lo[0] = rf_w4_u(__hmul2(__hsub2(rf_w4_nib(v, 0), c8), d));
        lo[2] = rf_w4_u(__hmul2(__hsub2(rf_w4_nib(v8, 0), c8), d));
        hi[0] = rf_w4_u(__hmul2(__hfma2(rf_w4_nib16(v), s16, c72), d));
        hi[2] = rf_w4_u(__hmul2(__hfma2(rf_w4_nib16(v8), s16, c72), d));
    } else if constexpr (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
        /* qs at 16 (Q4_K) / 48 (Q5_K): bytes 32 j + 16 c + 2t..; Q5_K's fifth
         * bit: bit 2j / 2j + 1 of qh bytes 16 c + 2t.. (at 16), as bit 4 */
        constexpr int QS = T == RF_TYPE_Q4_K ? 16 : 48;
        const uint32_t v = rf_w4_bytes(r + QS + 32 * j + 16 * c + 2 * t);
        uint32_t b5[4] = {0, 0, 0, 0}; /* lo pair, hi pair of klo; of khi */
        if constexpr (T == RF_TYPE_Q5_K) {
            const uint32_t vh = rf_w4_bytes(r + 16 + 16 * c + 2 * t);
            b5[0] = ((vh >> (2 * j)) & 0x00010001u) << 4;
            b5[1] = ((vh >> (8 + 2 * j)) & 0x00010001u) << 4;
            b5[2] = ((vh >> (2 * j + 1)) & 0x00010001u) << 4;
            b5[3] = ((vh >> (8 + 2 * j + 1)) & 0x00010001u) << 4;
        }
        const __half2 c0 = __float2half2_rn(1024.0f);
        const __half2 nl = __hneg2(ml), nh = __hneg2(mh);
        auto q = [&](int n, uint32_t hb) { return __hsub2(rf_w4_h2(rf_w4_u(rf_w4_nib(v, n)) | hb), c0); };
        if constexpr (T == RF_TYPE_Q4_K) { /* the high nibbles without a shift (rf_w4_nib16): q exactly */
            const __half2 s16 = __float2half2_rn(0.0625f), c64 = __float2half2_rn(-64.0f);
            const uint32_t v8 = v >> 8;
            lo[0] = rf_w4_u(__hfma2(q(0, 0), sl, nl));
            lo[2] = rf_w4_u(__hfma2(__hsub2(rf_w4_nib(v8, 0), c0), sl, nl));
            hi[0] = rf_w4_u(__hfma2(__hfma2(rf_w4_nib16(v), s16, c64), sh, nh));
            hi[2] = rf_w4_u(__hfma2(__hfma2(rf_w4_nib16(v8), s16, c64), sh, nh));
            return;
        }
        lo[0] = rf_w4_u(__hfma2(q(0, b5[0]), sl, nl));
        lo[2] = rf_w4_u(__hfma2(q(8, b5[1]), sl, nl));
        hi[0] = rf_w4_u(__hfma2(q(4, b5[2]), sh, nh));
        hi[2] = rf_w4_u(__hfma2(q(12, b5[3]), sh, nh));
    } else { /* Q8_0, block 2j + c: bytes 2t.. of the first 16 quants, then of the second */
        const int b = 2 * j + c;
        const uint8_t *q = r + 34 * b + 2 + 2 * t;
        const __half2 d = rf_w4_hb(*(const uint16_t *)(r + 34 * b)), c8 = __float2half2_rn(1152.0f);
        const uint32_t q0 = *(const uint16_t *)q, q1 = *(const uint16_t *)(q + 8);
        const uint32_t q2 = *(const uint16_t *)(q + 16), q3 = *(const uint16_t *)(q + 24);
        /* (b ^ 0x80) | 0x6400 in each half: 1024 + 128 + b exactly */
        auto h8 = [&](uint32_t u) {
            return __hmul2(__hsub2(rf_w4_h2(__byte_perm(u ^ 0x8080u, 0x6464u, 0x5140u)), c8), d);
        };
        lo[0] = rf_w4_u(h8(q0)), lo[2] = rf_w4_u(h8(q1));
        hi[0] = rf_w4_u(h8(q2)), hi[2] = rf_w4_u(h8(q3));
    }
}

/* Q4_K / Q5_K: the f16 scale and min of sub-blocks 2j (sl, ml) and 2j + 1 (sh, mh) of staged row r */
static __device__ __forceinline__ void rf_w4_kscales(const uint8_t *r, int j, __half2 *sl, __half2 *ml, __half2 *sh,
                                                     __half2 *mh) {
    const float d = rf_h2f_bits(*(const uint16_t *)r), dm = rf_h2f_bits(*(const uint16_t *)(r + 2));
    int sc, m;
    rf_k4_sm(2 * j, r + 4, &sc, &m);
    *sl = __float2half2_rn(d * (float)sc), *ml = __float2half2_rn(dm * (float)m);
    rf_k4_sm(2 * j + 1, r + 4, &sc, &m);
    *sh = __float2half2_rn(d * (float)sc), *mh = __float2half2_rn(dm * (float)m);
}

/* rf_k_w4a16's stage filling: chunk k of the block's row of chunks into ring slot slot, the
 * weights (w) and x (x) apart (W of the first stages goes out before rf_pdl_wait, x after). TM:
 * thread 0 arms the slot's barrier with both operands' bytes (in w, so both must be issued before
 * anyone waits) and issues the tensor copies; else every thread issues its share of 16-byte
 * cp.async copies (rows past n_out copy the last, tokens past nt the last). */
template <int T, int BN, int KW, bool TM> struct rf_w4_stager {
    using L = rf_w4_tile<T, BN, KW, TM>;
    static constexpr int SA = L::SA, CW = SA / 16;
    const CUtensorMap *tw, *tx; /* TM: the grid constants' addresses */
    const uint8_t *wp;
    const rf_half *x16;
    int64_t row_bytes;
    unsigned base, bars; /* the ring's and the barriers' shared addresses */
    int r0, t0, kc0, nk, nt, n_in, n_out;

    __device__ __forceinline__ void w(int k, int slot) const {
        if (k >= nk) return;
        const int tid = threadIdx.x;
        if constexpr (TM) { /* the stage's barrier expects W's and x's bytes: one arrival */
            if (tid == 0) {
                rf_w4_bar_expect(bars + 8u * slot, (unsigned)(L::ABYTES + L::XBYTES));
                if constexpr (SA <= 256) /* a box's rows are at most 256 elements: Q8_0's 272 bytes as 17 x 16 */
                    rf_w4_tma2d(base + (unsigned)(slot * L::STAGE), tw, (kc0 + k) * SA, r0, bars + 8u * slot);
                else
                    rf_w4_tma3d(base + (unsigned)(slot * L::STAGE), tw, 0, (kc0 + k) * (SA / 16), r0, bars + 8u * slot);
            }
            return;
        }
        const int64_t off = (int64_t)(kc0 + k) * SA;
        const unsigned so = base + (unsigned)(slot * L::STAGE);
#pragma unroll 4
        for (int i = tid; i < RF_W4_BM * CW; i += RF_W4_NTH) {
            const int row = i / CW, col = i % CW;
            const int r = r0 + row < n_out ? r0 + row : n_out - 1;
            rf_cp_async16_s(so + (unsigned)(row * SA + col * 16), wp + (int64_t)r * row_bytes + off + col * 16);
        }
    }
    __device__ __forceinline__ void x(int k, int slot) const {
        if (k >= nk) return;
        const int tid = threadIdx.x;
        if constexpr (TM) {
            if (tid == 0) {
#pragma unroll
                for (int q = 0; q < 4; q++)
                    rf_w4_tma2d(base + (unsigned)(slot * L::STAGE + L::ABYTES + q * BN * 128), tx,
                                (kc0 + k) * RF_W4_KC + 64 * q, t0, bars + 8u * slot);
            }
            return;
        }
        const int64_t kx = (int64_t)(kc0 + k) * RF_W4_KC;
        const unsigned so = base + (unsigned)(slot * L::STAGE + L::ABYTES);
#pragma unroll 4
        for (int i = tid; i < BN * 32; i += RF_W4_NTH) {
            const int n = i / 32, c = i % 32, tok = t0 + n < nt ? t0 + n : nt - 1;
            rf_cp_async16_s(so + (unsigned)(n * RF_W4_SB + c * 16), x16 + (int64_t)tok * n_in + kx + c * 8);
        }
    }
};

/* KW 2's end: the second half of each chunk's sums (warps wk = 1) added to the first's, in
 * that order, through the ring (red) once every copy has landed and every warp is past its last
 * read. Every thread of the block calls it; true for the warps that then store (wk = 0). */
template <int NF>
static __device__ __forceinline__ bool rf_w4_join(float (&acc)[2][NF][4], float *red, int wm, int wk, int lane) {
    float *part = red + (size_t)wm * (2 * NF * 4 * 32) + lane;
    rf_cp_async_wait<0>(); /* TM: every stage issued was waited for in the loop */
    __syncthreads();
    if (wk == 1) {
#pragma unroll
        for (int mf = 0; mf < 2; mf++)
#pragma unroll
            for (int nf = 0; nf < NF; nf++)
#pragma unroll
                for (int i = 0; i < 4; i++) part[((mf * NF + nf) * 4 + i) * 32] = acc[mf][nf][i];
    }
    __syncthreads();
    if (wk == 1) return false;
#pragma unroll
    for (int mf = 0; mf < 2; mf++)
#pragma unroll
        for (int nf = 0; nf < NF; nf++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mf][nf][i] += part[((mf * NF + nf) * 4 + i) * 32];
    return true;
}

/* w4a16: y[t, o] for the tokens of blockIdx.x's tile of BN and the rows of blockIdx.y's tile of
 * 128, over the chunks of 256 of blockIdx.z's share of the row (splits > 1: partial sums to
 * y + z * nt * n_out, added by rf_k_w4a16_reduce). x16: f16 [nt, n_in]. KW 1: warp (wm, wn) =
 * (warp % 4, warp / 4) owns rows 32 wm .. + 31 (two m16 fragments) by tokens BN / 2 wn .. + BN / 2
 * - 1 (NF n8 fragments); KW 2: warp (wm, wk) owns rows 32 wm .. + 31 by all BN tokens over
 * sub-chunks 2 wk, 2 wk + 1 of every chunk, the halves added at the end. Per unit of 16 staged bytes of a row's quants (a Q4_0 block's, half of a Q4_K
 * sub-block pair's) lane (g, t) reads 4 bytes of rows g, g + 8 that hold its A elements of two
 * k16 steps (low nibbles: one, high: the other), forms 1024 + q as f16 by mask and or, subtracts
 * the centre exactly and scales in f16 (one rounding: the f16 weight), then one mma per
 * fragment pair and k16 step; B by ldmatrix from the staged f16 x. Chunks are staged by cp.async
 * in a ring of ST stages (W of the first ones requested before rf_pdl_wait: W is not written by
 * work in flight). Rows past n_out read the last row, tokens past nt the last token; neither is
 * stored. TM (sm_90): thread 0 fills a stage with one tensor copy of W's 128 x SA-byte box (map
 * tw: W as bytes [n_out][row_bytes]) and four of x's 64 x BN boxes (map tx: x16 as f16 [nt][n_in],
 * 128-byte swizzle: 16-byte column c of token n at n 128 + 16 (c ^ n % 8), so the ldmatrix rows
 * of a matrix fall on distinct banks without padding), every thread waiting on the stage's
 * barrier: the per-thread copy loops (a quarter or more of the instructions at 64 tokens) leave
 * the warps; rows and tokens past the ends read as zeros; neither is stored. launch: grid
 * (ceil(nt / BN), ceil(n_out / 128), splits), 256 threads, rf_w4_tile<T, BN, KW, TM>::SMEM bytes of
 * dynamic shared memory. */
template <int T, int BN, int KW, bool TM>
__global__ void __launch_bounds__(RF_W4_NTH, rf_w4_tile<T, BN, KW, TM>::MINB)
rf_k_w4a16(float *y, const uint8_t *w, const rf_half *x16, int nt, int n_in, int n_out, int64_t row_bytes,
           int splits, const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx) {
    using L = rf_w4_tile<T, BN, KW, TM>;
    constexpr int SA = L::SA, ST = L::ST, NF = L::NF;
    extern __shared__ __align__(16) uint8_t rf_w4_smem_raw[];
    /* TM: the ring from the first 1,024-byte boundary, the barriers after it */
    uint8_t *const rf_w4_smem =
        TM ? rf_w4_smem_raw + ((1024u - (rf_smem_addr(rf_w4_smem_raw) & 1023u)) & 1023u) : rf_w4_smem_raw;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    /* wn: the warp's half of the tokens (KW 1); wk: its half of each chunk (KW 2) */
    const int wm = warp % 4, wn = KW == 1 ? (warp / 4) % 2 : 0, wk = KW == 2 ? warp / 4 : 0;
    const int r0 = blockIdx.y * RF_W4_BM, t0 = blockIdx.x * BN;
    const int nch = n_in / RF_W4_KC;
    const int kc0 = (int)((int64_t)blockIdx.z * nch / splits), nk = (int)((int64_t)(blockIdx.z + 1) * nch / splits) - kc0;
    const unsigned base = rf_smem_addr(rf_w4_smem), bars = base + (unsigned)(ST * L::STAGE);
    if constexpr (TM) {
        if (tid == 0) {
#pragma unroll
            for (int i = 0; i < ST; i++) rf_w4_bar_init(bars + 8u * i);
            rf_w4_fence_async();
        }
        __syncthreads();
    }

    const rf_w4_stager<T, BN, KW, TM> fill{&tw, &tx, w, x16, row_bytes, base, bars, r0, t0, kc0, nk, nt, n_in, n_out};
#pragma unroll
    for (int k = 0; k < ST - 1; k++) {
        fill.w(k, k);
        rf_cp_async_commit();
    }
    rf_pdl_trigger();
    rf_pdl_wait();
#pragma unroll
    for (int k = 0; k < ST - 1; k++) { /* groups W0..W(ST-2), X0..X(ST-2), then W+X per chunk */
        fill.x(k, k);
        rf_cp_async_commit();
    }
    float acc[2][NF][4];
#pragma unroll
    for (int mf = 0; mf < 2; mf++)
#pragma unroll
        for (int nf = 0; nf < NF; nf++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mf][nf][i] = 0.0f;
    /* ldmatrix.x4 rows of lane: matrix lane / 8 = (tokens + 8 (lane / 16), k + 8 ((lane / 8) % 2));
     * TM: token n's 16-byte column c of a 64-wide block at n 128 + 16 (c ^ n % 8), n % 8 = lane % 8,
     * c = 2 (kk & 3) + (lane / 8) % 2 for k16 step kk (block kk >> 2): the token's row starts on a
     * 128-byte boundary, so bl holds 16 ((lane / 8) % 2 ^ n % 8) in its low 7 bits and the step's
     * column is bl ^ 32 (kk & 3) (one XOR, kk's low bits known after unrolling) */
    const int bn0 = wn * (BN / 2) + (lane / 16) * 8 + lane % 8;
    const unsigned bl = TM ? (unsigned)(bn0 * 128 + ((((lane / 8) % 2) ^ (lane % 8)) * 16))
                           : (unsigned)(bn0 * RF_W4_SB + ((lane / 8) % 2) * 16);

    /* one k16 step: A (this warp's two m16 fragments) times the warp's NF n8 fragments of x */
    auto step = [&](unsigned sb, int kk, const uint32_t (*A)[4]) {
#pragma unroll
        for (int p = 0; p < NF / 2; p++) {
            uint32_t b[4];
            if constexpr (TM)
                rf_w4_ldm4(b, sb + (unsigned)((kk >> 2) * BN * 128 + p * 16 * 128) + (bl ^ ((unsigned)(kk & 3) << 5)));
            else
                rf_w4_ldm4(b, sb + bl + (unsigned)(p * 16 * RF_W4_SB + kk * 32));
#pragma unroll
            for (int mf = 0; mf < 2; mf++) {
                rf_w4_mma(acc[mf][2 * p], A[mf], b[0], b[1]);
                rf_w4_mma(acc[mf][2 * p + 1], A[mf], b[2], b[3]);
            }
        }
    };

    for (int k = 0; k < nk; k++) {
        if constexpr (TM)
            rf_w4_bar_wait(bars + 8u * (k % ST), (unsigned)(k / ST) & 1u);
        else
            rf_cp_async_wait<ST - 2>();
        __syncthreads(); /* chunk k visible to all; slot (k - 1) % ST read by all */
        if constexpr (TM)
            if (tid == 0) rf_w4_fence_async(); /* those reads before the copies that overwrite the slot */
        fill.w(k + ST - 1, (k + ST - 1) % ST);
        fill.x(k + ST - 1, (k + ST - 1) % ST);
        rf_cp_async_commit();
        const uint8_t *sl = rf_w4_smem + (k % ST) * L::STAGE;
        const unsigned sb = base + (unsigned)((k % ST) * L::STAGE + L::ABYTES);
        const uint8_t *ra[2][2]; /* rows g, g + 8 of each m16 fragment */
#pragma unroll
        for (int mf = 0; mf < 2; mf++)
#pragma unroll
            for (int h = 0; h < 2; h++) ra[mf][h] = sl + (32 * wm + 16 * mf + 8 * h + g) * SA;
#pragma unroll
        for (int jj = 0; jj < 4 / KW; jj++) {
            const int j = KW == 1 ? jj : jj + 2 * wk;
            /* Q4_K / Q5_K: sub-blocks 2j (low nibbles) and 2j + 1 (high) of each row: f16 scale s and min m */
            __half2 SL[2][2], ML[2][2], SH[2][2], MH[2][2];
            if constexpr (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
#pragma unroll
                for (int mf = 0; mf < 2; mf++)
#pragma unroll
                    for (int h = 0; h < 2; h++) rf_w4_kscales(ra[mf][h], j, &SL[mf][h], &ML[mf][h], &SH[mf][h], &MH[mf][h]);
            }
            (void)SL, (void)ML, (void)SH, (void)MH;
#pragma unroll
            for (int c = 0; c < 2; c++) {
                uint32_t Alo[2][4], Ahi[2][4]; /* the fragments of k16 steps klo and khi */
                int klo, khi;
                if constexpr (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) klo = 4 * j + c, khi = 4 * j + 2 + c;
                else klo = 4 * j + 2 * c, khi = klo + 1; /* block 2j + c: its halves */
#pragma unroll
                for (int mf = 0; mf < 2; mf++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        rf_w4_frags<T>(&Alo[mf][h], &Ahi[mf][h], ra[mf][h], j, c, t, SL[mf][h], ML[mf][h], SH[mf][h],
                                       MH[mf][h]);
                    }
                step(sb, klo, Alo);
                step(sb, khi, Ahi);
            }
        }
    }
    if constexpr (KW == 2)
        if (!rf_w4_join<NF>(acc, reinterpret_cast<float *>(rf_w4_smem), wm, wk, lane)) return;
    float *out = splits > 1 ? y + (int64_t)blockIdx.z * nt * n_out : y;
#pragma unroll
    for (int mf = 0; mf < 2; mf++)
#pragma unroll
        for (int nf = 0; nf < NF; nf++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int row = r0 + 32 * wm + 16 * mf + g + 8 * (i / 2);
                const int tok = t0 + wn * (BN / 2) + 8 * nf + 2 * t + i % 2;
                if (row < n_out && tok < nt) out[(int64_t)tok * n_out + row] = acc[mf][nf][i];
            }
}

/* y[i] = part[0][i] + ... + part[splits - 1][i] in that order (parts n apart) */
__global__ void rf_k_w4a16_reduce(float *y, const float *part, int64_t n, int splits) {
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float s = part[i];
        for (int k = 1; k < splits; k++) s += part[k * n + i];
        y[i] = s;
    }
}

/* x -> f16 as rf_gpu_gemm's x operand of a quantized weight (rf_act_q8_half, as gpu_gemm.cu's
 * rf_k_f32_to_f16_q8); n a multiple of 32; launch: blocks of 256, grid-stride over groups of 32
 * lanes. */
__global__ void rf_k_w4a16_x(rf_half *y, const float *x, int64_t n) {
    const int lane = threadIdx.x % 32;
    rf_pdl_trigger();
    rf_pdl_wait();
    for (int64_t g0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32 * 32; g0 < n;
         g0 += (int64_t)gridDim.x * blockDim.x)
        y[g0 + lane] = rf_act_q8_half(x[g0 + lane]);
}

/* cuTensorMapEncodeTiled from the driver, through the runtime (no link to libcuda); NULL where the
 * driver has none. Resolved once (a function-local static: thread-safe). */
typedef CUresult (*rf_w4_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static rf_w4_encode_fn rf_w4_encoder(void) {
    static const rf_w4_encode_fn fn = [] {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
#else
        const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q);
#endif
        return e == cudaSuccess && q == cudaDriverEntryPointSuccess ? (rf_w4_encode_fn)f : (rf_w4_encode_fn)NULL;
    }();
    return fn;
}
/* The two maps of a TM launch: W as bytes [n_out][rb] in boxes of 128 rows x SA bytes (SA > 256,
 * past a box row's limit: as [n_out][rb / 16][16] in boxes of 128 x SA / 16 x 16), x16 as f16
 * [nt][n_in] in boxes of BN tokens x 64 with the 128-byte swizzle; false if the driver refuses
 * (the caller then takes the copy loops). */
static bool rf_w4_maps(CUtensorMap *mw, CUtensorMap *mx, const uint8_t *w, const rf_half *x16, int sa, int bn, int nt,
                       int n_in, int n_out, int64_t rb) {
    const rf_w4_encode_fn enc = rf_w4_encoder();
    if (!enc) return false;
    const bool w3 = sa > 256;
    const cuuint64_t wd[3] = {w3 ? 16u : (cuuint64_t)rb, w3 ? (cuuint64_t)rb / 16 : (cuuint64_t)n_out, (cuuint64_t)n_out};
    const cuuint64_t ws[2] = {w3 ? 16u : (cuuint64_t)rb, (cuuint64_t)rb};
    const cuuint32_t wb[3] = {w3 ? 16u : (cuuint32_t)sa, w3 ? (cuuint32_t)sa / 16 : RF_W4_BM, RF_W4_BM}, one[3] = {1, 1, 1};
    const cuuint64_t xd[2] = {(cuuint64_t)n_in, (cuuint64_t)nt}, xs[1] = {(cuuint64_t)n_in * 2};
    const cuuint32_t xb[2] = {64, (cuuint32_t)bn};
    return enc(mw, CU_TENSOR_MAP_DATA_TYPE_UINT8, w3 ? 3 : 2, (void *)w, wd, ws, wb, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS &&
           enc(mx, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)x16, xd, xs, xb, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int T, int BN, int KW, bool TM>
static rf_status rf_w4a16_launch_t(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const rf_half *x16, int nt, int n_in,
                                   int n_out, int64_t rb, int splits, const CUtensorMap *mw, const CUtensorMap *mx) {
    auto kern = rf_k_w4a16<T, BN, KW, TM>;
    constexpr int smem = rf_w4_tile<T, BN, KW, TM>::SMEM;
    static size_t attr[RF_GPU_MAX_DEVICES];
    const rf_status st = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(kern), (size_t)smem, 0, attr, "rf_k_w4a16");
    if (st) return st;
    const dim3 grid((unsigned)((nt + BN - 1) / BN), (unsigned)((n_out + RF_W4_BM - 1) / RF_W4_BM), (unsigned)splits);
    return rf_gpu_launch(ctx, "rf_k_w4a16", true, kern, grid, dim3(RF_W4_NTH), (size_t)smem, y, w, x16, nt, n_in,
                         n_out, rb, splits, *mw, *mx);
}
/* TM where the device has the tensor memory accelerator (sm_90+), RF_GPU_W4A16_TMA allows it and
 * the driver encodes both maps, except Q8_0's split tiles of 64 (its 272-byte rows come as 17
 * boxes of 16 bytes; measured on an H200, 2026-11-30: those tiles 3-6% slower per product and
 * the 8B Q8_0 64-sequence step -3.5%, where its tiles of 128 gain 20-27%); else the copy loops */
template <int T>
static rf_status rf_w4a16_launch(rf_gpu_ctx *ctx, int bn, int kw, float *y, const uint8_t *w, const rf_half *x16, int nt,
                                 int n_in, int n_out, int64_t rb, int splits) {
    CUtensorMap mw, mx;
    memset(&mw, 0, sizeof mw), memset(&mx, 0, sizeof mx);
    const bool tm = ctx->info.cc_major >= 9 && rf_knob_int(RF_KNOB_GPU_W4A16_TMA) != 0 &&
                    !(rf_w4_fmt<T>::SA > 256 && kw == 2) &&
                    rf_w4_maps(&mw, &mx, w, x16, rf_w4_fmt<T>::SA, bn, nt, n_in, n_out, rb);
    if (tm) {
        if (bn == 64 && kw == 2) return rf_w4a16_launch_t<T, 64, 2, true>(ctx, y, w, x16, nt, n_in, n_out, rb, splits, &mw, &mx);
        if (bn == 64) return rf_w4a16_launch_t<T, 64, 1, true>(ctx, y, w, x16, nt, n_in, n_out, rb, splits, &mw, &mx);
        return rf_w4a16_launch_t<T, 128, 1, true>(ctx, y, w, x16, nt, n_in, n_out, rb, splits, &mw, &mx);
    }
    if (bn == 64 && kw == 2) return rf_w4a16_launch_t<T, 64, 2, false>(ctx, y, w, x16, nt, n_in, n_out, rb, splits, &mw, &mx);
    if (bn == 64) return rf_w4a16_launch_t<T, 64, 1, false>(ctx, y, w, x16, nt, n_in, n_out, rb, splits, &mw, &mx);
    return rf_w4a16_launch_t<T, 128, 1, false>(ctx, y, w, x16, nt, n_in, n_out, rb, splits, &mw, &mx);
}
#endif /* !RF_HIP */

extern "C" bool rf_gpu_w4a16_supported(rf_type t, int64_t n_in) {
#if defined(RF_HIP)
    (void)t, (void)n_in;
    return false;
#else
    if (n_in < RF_W4_KC || n_in > ((int64_t)1 << 28) || n_in % RF_W4_KC) return false;
    return t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q8_0;
#endif
}

/* the shape checks of both entries */
static rf_status rf_w4a16_check(const char *op, const void *w, rf_type wtype, const void *x, const float *y,
                                int64_t n_tokens, int64_t n_in, int64_t n_out) {
    RF_GPU_REQUIRE(rf_gpu_w4a16_supported(wtype, n_in), op, "weight type %d with n_in=%lld has no W4A16 kernel "
                   "(CUDA: Q4_0, Q4_K, Q5_K, Q8_0 with n_in a multiple of 256)", (int)wtype, (long long)n_in);
    RF_GPU_REQUIRE(n_tokens >= 1 && n_tokens <= 65535 && n_out >= 1 && n_out <= 0x7fffffff &&
                       n_tokens * n_in <= 0x7fffffff && n_tokens * n_out <= 0x7fffffff, op, "shape %lld x %lld x %lld",
                   (long long)n_tokens, (long long)n_in, (long long)n_out);
    RF_GPU_REQUIRE(((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 3) == 0, op,
                   "w and x must be 16-byte aligned (rf_gpu_alloc memory)");
    return RF_OK;
}

#if !defined(RF_HIP)
/* Tiles and split-K from the shape: tiles of 64 tokens up to 64 (Q4_0 / Q8_0 with the warps split
 * along the chunk), else 128 (RF_W4A16_CFG 1 / 2 / 3: always 64 / 128 / 64 split; a measurement
 * knob read at every call, so a test may turn it); the row of chunks split so that the blocks
 * about fill the SMs once (1 block per SM, 2 with Q4_0's tiles of 64) where the tiles alone leave
 * half of them idle, at least 4 chunks per split, at most 8. */
static_assert(rf_w4_tile<RF_TYPE_Q4_K, 64, 1, false>::MINB == 1 && rf_w4_tile<RF_TYPE_Q5_K, 64, 1, false>::MINB == 1 &&
                  rf_w4_tile<RF_TYPE_Q8_0, 64, 1, false>::MINB == 1 && rf_w4_tile<RF_TYPE_Q4_0, 128, 1, false>::MINB == 1 &&
                  rf_w4_tile<RF_TYPE_Q4_K, 64, 2, false>::MINB == 1 && rf_w4_tile<RF_TYPE_Q5_K, 64, 2, false>::MINB == 1 &&
                  rf_w4_tile<RF_TYPE_Q8_0, 64, 2, false>::MINB == 1,
              "rf_w4a16_plan counts 2 blocks per SM for Q4_0's tiles of 64 only");
static_assert(rf_w4_tile<RF_TYPE_Q4_0, 64, 2, true>::MINB == rf_w4_tile<RF_TYPE_Q4_0, 64, 2, false>::MINB &&
                  rf_w4_tile<RF_TYPE_Q4_0, 64, 1, true>::MINB == rf_w4_tile<RF_TYPE_Q4_0, 64, 1, false>::MINB &&
                  rf_w4_tile<RF_TYPE_Q8_0, 64, 2, true>::MINB == 1 && rf_w4_tile<RF_TYPE_Q4_0, 128, 1, true>::MINB == 1,
              "the tensor-copy tiles keep the copy loops' blocks per SM");
static void rf_w4a16_plan(const rf_gpu_ctx *ctx, rf_type t, int64_t nt, int64_t n_in, int64_t n_out, int *bn,
                          int *kw, int *splits) {
    const int64_t cfg = rf_knob_int(RF_KNOB_W4A16_CFG);
    const bool split_fits = t == RF_TYPE_Q4_0 || t == RF_TYPE_Q8_0; /* the K-quants' scales take registers */
    *bn = cfg == 1 || cfg == 3 ? 64 : cfg == 2 ? 128 : nt <= 64 ? 64 : 128;
    /* auto: Q4_0 / Q8_0's tiles of 64 split along the chunk (H200: 8B products at 64 tokens 8-14% faster) */
    *kw = cfg == 3 || (cfg == 0 && *bn == 64 && split_fits) ? 2 : 1;
    /* blocks per SM: the instance's launch bound (only Q4_0's tiles of 64 fit 2) */
    const int minb = *bn == 128 || t != RF_TYPE_Q4_0 ? 1
                     : *kw == 2                       ? rf_w4_tile<RF_TYPE_Q4_0, 64, 2, false>::MINB
                                                      : rf_w4_tile<RF_TYPE_Q4_0, 64, 1, false>::MINB;
    const int64_t slots = (int64_t)ctx->info.sm_count * minb;
    const int64_t tiles = ((nt + *bn - 1) / *bn) * ((n_out + RF_W4_BM - 1) / RF_W4_BM);
    int64_t s = slots / (tiles > 0 ? tiles : 1);
    const int64_t nch = n_in / RF_W4_KC;
    if (s > nch / 4) s = nch / 4;
    if (s > 8) s = 8;
    *splits = s < 1 ? 1 : (int)s;
}

/* the product from f16 x; part: splits * n_tokens * n_out floats of scratch where splits > 1 */
static rf_status rf_w4a16_run(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const rf_half *x16,
                              int64_t n_tokens, int64_t n_in, int64_t n_out, int bn, int kw, int splits, float *part) {
    const int64_t rb = n_in / rf_gq_block((int)wtype) * rf_gq_bytes((int)wtype);
    float *out = splits > 1 ? part : y;
    const uint8_t *wp = (const uint8_t *)w;
    const int nt = (int)n_tokens, ni = (int)n_in, no = (int)n_out;
    rf_status st;
    switch (wtype) {
    case RF_TYPE_Q4_0: st = rf_w4a16_launch<RF_TYPE_Q4_0>(ctx, bn, kw, out, wp, x16, nt, ni, no, rb, splits); break;
    case RF_TYPE_Q4_K: st = rf_w4a16_launch<RF_TYPE_Q4_K>(ctx, bn, kw, out, wp, x16, nt, ni, no, rb, splits); break;
    case RF_TYPE_Q5_K: st = rf_w4a16_launch<RF_TYPE_Q5_K>(ctx, bn, kw, out, wp, x16, nt, ni, no, rb, splits); break;
    default: st = rf_w4a16_launch<RF_TYPE_Q8_0>(ctx, bn, kw, out, wp, x16, nt, ni, no, rb, splits); break;
    }
    if (!st && splits > 1) {
        const int64_t ny = n_tokens * n_out;
        st = rf_gpu_launch(ctx, "rf_k_w4a16_reduce", true, rf_k_w4a16_reduce, dim3(rf_gpu_blocks(ny, 256)), dim3(256),
                           0, y, (const float *)part, ny, splits);
    }
    return st;
}
#endif

extern "C" rf_status rf_gpu_w4a16_f16x(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *x16,
                                       int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_w4a16";
    rf_status st = rf_w4a16_check(op, w, wtype, x16, y, n_tokens, n_in, n_out);
    if (st) return st;
#if defined(RF_HIP)
    (void)ctx;
    return rf_set_error(RF_ERR_UNSUPPORTED, "%s: no W4A16 kernel on HIP", op);
#else
    RF_GPU_REQUIRE(ctx->info.cc_major >= 8, op, "the f16 tensor-core kernel needs compute capability 8.0+");
    int bn, kw, splits;
    rf_w4a16_plan(ctx, wtype, n_tokens, n_in, n_out, &bn, &kw, &splits);
    size_t mark = ctx->scratch_used;
    void *tmp = NULL;
    if (splits > 1 && (st = rf_gpu_tmp(ctx, (size_t)splits * n_tokens * n_out * sizeof(float), &tmp, &mark)))
        return st;
    st = rf_w4a16_run(ctx, y, w, wtype, (const rf_half *)x16, n_tokens, n_in, n_out, bn, kw, splits, (float *)tmp);
    ctx->scratch_used = mark; /* stream order (and rf_pdl_wait) protects the reuse */
    return st;
#endif
}

extern "C" rf_status rf_gpu_w4a16(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                                  int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_w4a16";
    rf_status st = rf_w4a16_check(op, w, wtype, x, y, n_tokens, n_in, n_out);
    if (st) return st;
#if defined(RF_HIP)
    (void)ctx;
    return rf_set_error(RF_ERR_UNSUPPORTED, "%s: no W4A16 kernel on HIP", op);
#else
    RF_GPU_REQUIRE(ctx->info.cc_major >= 8, op, "the f16 tensor-core kernel needs compute capability 8.0+");
    int bn, kw, splits;
    rf_w4a16_plan(ctx, wtype, n_tokens, n_in, n_out, &bn, &kw, &splits);
    const int64_t nx = n_tokens * n_in;
    const size_t xb = ((size_t)nx * 2 + 255) & ~(size_t)255;
    const size_t pb = splits > 1 ? (size_t)splits * n_tokens * n_out * sizeof(float) : 0;
    size_t mark;
    void *tmp;
    if ((st = rf_gpu_tmp(ctx, xb + pb, &tmp, &mark))) return st;
    rf_half *x16 = (rf_half *)tmp;
    st = rf_gpu_launch(ctx, "rf_k_w4a16_x", true, rf_k_w4a16_x, dim3(rf_gpu_blocks(nx, 256)), dim3(256), 0, x16, x, nx);
    if (!st)
        st = rf_w4a16_run(ctx, y, w, wtype, x16, n_tokens, n_in, n_out, bn, kw, splits, (float *)((char *)tmp + xb));
    ctx->scratch_used = mark;
    return st;
#endif
}
