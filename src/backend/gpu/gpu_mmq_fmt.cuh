/* gpu_mmq_fmt.cuh — the MMQ kernel's formats (rf_mmq_fmt: blocks, bytes and stages a chunk),
 * its shared-memory layout (rf_mmq_stage), the int8 mma wrappers, the A-fragment decoders of
 * every format and the cp.async copies of a chunk; included by gpu_mmq.cu alone. */
#ifndef RF_GPU_MMQ_FMT_CUH
#define RF_GPU_MMQ_FMT_CUH

#include "backend/gpu/gpu_gemv.cuh"     /* gpu_quant.cuh: f16, K-quant scales; cp.async */
#include "backend/gpu/gpu_gemv_dot.cuh" /* rf_fp4x8, rf_mxfp4_scale */

#define RF_MMQ_BM 128 /* weight rows per block */
#define RF_MMQ_NW 8   /* warps per block: 8 / WN along the rows x WN (1, 2 or 4) along 32 tokens each */
#define RF_MMQ_SMEM_MAX (227 * 1024) /* dynamic shared memory one block may have (sm_80 163 KB: see rf_mmq_stage) */

#if !defined(RF_HIP) /* mma.sync, cp.async: CUDA only */

/* The formats' tiles: KB 32-element blocks of x per chunk (a pipeline stage), CB bytes of a row
 * per chunk, copied in CPY-byte cp.async pieces; SROW: a staged row's stride in shared memory
 * (a multiple of 16 bytes whose word count is 4 mod 8, so the 8 rows g of one fragment load
 * fall on distinct banks); REC: bytes of an x record (rf_k_quantize_x: 8 = (d, int sum),
 * 16 = + f32 sum, int sum of the first 16); ST: pipeline stages. */
template <int T> struct rf_mmq_fmt;
template <> struct rf_mmq_fmt<RF_TYPE_Q4_0> {
    static constexpr int KB = 8, CB = 144, CPY = 16, SROW = 144, REC = 8, RK = 0, ST = 4, BB = 18, UA = 0;
};
template <> struct rf_mmq_fmt<RF_TYPE_Q8_0> {
    static constexpr int KB = 8, CB = 272, CPY = 16, SROW = 272, REC = 8, RK = 0, ST = 3, BB = 34, UA = 0;
};
/* Q5_0: 8 blocks of 22 bytes (f16 d, 4 bytes of high bits, 16 of nibbles), rows of whole chunks
 * 16-byte aligned (176 = 11 x 16) */
template <> struct rf_mmq_fmt<RF_TYPE_Q5_0> {
    static constexpr int KB = 8, CB = 176, CPY = 16, SROW = 176, REC = 8, RK = 0, ST = 4, BB = 22, UA = 0;
};
template <> struct rf_mmq_fmt<RF_TYPE_Q4_K> {
    static constexpr int KB = 8, CB = 144, CPY = 16, SROW = 144, REC = 16, RK = 1, ST = 3, BB = 144, UA = 0;
};
template <> struct rf_mmq_fmt<RF_TYPE_Q5_K> {
    static constexpr int KB = 8, CB = 176, CPY = 16, SROW = 176, REC = 16, RK = 1, ST = 3, BB = 176, UA = 0;
};
/* Q6_K: two 210-byte super-blocks per chunk (420 bytes, 4-byte aligned in rows of an even
 * number of super-blocks; the second one sits 2 bytes past a word) */
template <> struct rf_mmq_fmt<RF_TYPE_Q6_K> {
    static constexpr int KB = 16, CB = 420, CPY = 4, SROW = 432, REC = 16, RK = 1, ST = 2, BB = 210, UA = 0;
};
/* Rows at any byte alignment (UA = 1): Q4_0 / Q8_0 rows of a count of blocks not a multiple of
 * 8 (gpt-oss's 2880 = 90 blocks: 1620 / 3060-byte rows, 4 but not 16 bytes aligned, and a last
 * chunk of 2 blocks), Q6_K rows of an odd count of super-blocks (qwen3-30b-a3b's 768: 630-byte
 * rows, every other one 2 bytes past a word; one super-block per chunk), MXFP4 (17-byte
 * blocks). A row's chunk is staged from the 16-byte word below its first byte (sh = its
 * address mod 16 bytes further on) up to its last, in 16-byte copies, the one crossing the row's
 * end (last chunk) read byte by byte so nothing past a row is read; the staged bytes are then read
 * as words at any offset (rf_mmq_wsh), the blocks past the row's end in a last partial chunk
 * skipped. SROW: 16 ceil((15 + CB + 15) / 16) rounded up to 4 mod 8 words (Q6_K: 16 more).
 * Pseudo types for the rewrites of formats that have an aligned kernel: */
#define RF_MMQ_UA(t) (1000 + (t))
template <int T> struct rf_mmq_base { static constexpr int v = T >= 1000 ? T - 1000 : T; };
template <> struct rf_mmq_fmt<RF_MMQ_UA(RF_TYPE_Q4_0)> {
    static constexpr int KB = 8, CB = 144, CPY = 16, SROW = 176, REC = 8, RK = 0, ST = 4, BB = 18, UA = 1;
};
template <> struct rf_mmq_fmt<RF_MMQ_UA(RF_TYPE_Q8_0)> {
    static constexpr int KB = 8, CB = 272, CPY = 16, SROW = 304, REC = 8, RK = 0, ST = 3, BB = 34, UA = 1;
};
template <> struct rf_mmq_fmt<RF_MMQ_UA(RF_TYPE_Q5_0)> { /* gemma4-26b-a4b's 704-wide down experts */
    static constexpr int KB = 8, CB = 176, CPY = 16, SROW = 208, REC = 8, RK = 0, ST = 4, BB = 22, UA = 1;
};
template <> struct rf_mmq_fmt<RF_MMQ_UA(RF_TYPE_Q6_K)> {
    static constexpr int KB = 8, CB = 210, CPY = 16, SROW = 272, REC = 16, RK = 1, ST = 3, BB = 210, UA = 1;
};
/* MXFP4: 8 blocks of 17 bytes (E8M0 exponent, 16 bytes of codes) per chunk; x as Q8_0's */
template <> struct rf_mmq_fmt<RF_TYPE_MXFP4> {
    static constexpr int KB = 8, CB = 136, CPY = 16, SROW = 176, REC = 8, RK = 0, ST = 4, BB = 17, UA = 1;
};
/* the tile of BN = 32 WN tokens: bytes of one stage: rows (plus 16 a realigned word may read
 * past the last), x (per token KB blocks of 32 plus 16: the 8 tokens g of one fragment load on
 * distinct banks), records (per token KB records plus 16); ST stages (WN 1: one fewer where that
 * lets 2 blocks share an SM; WN 4: as many of the format's as fit one block, 2 to 3). WN 4 needs
 * 227 KB of shared memory for Q4_0 / Q4_K / Q5_K in 3 stages (sm_90; on sm_80 / sm_86 the
 * attribute is refused and the launch fails with a message: use RF_MMQ_CFG 1-3 there) */
template <int T, int WN, int STX = 0> struct rf_mmq_stage {
    using F = rf_mmq_fmt<T>;
    static constexpr int BN = 32 * WN;
    static constexpr int XT = F::KB * 32 + 16, RS = F::KB * F::REC + 16;
    static constexpr int XO = RF_MMQ_BM * F::SROW + 16, RO = XO + BN * XT;
    static constexpr int BYTES = RO + BN * RS;
    static constexpr int ST4 = F::ST * BYTES <= RF_MMQ_SMEM_MAX ? F::ST : (F::ST - 1) * BYTES <= RF_MMQ_SMEM_MAX ? F::ST - 1 : 2;
    static constexpr int ST = STX ? STX : WN == 4 ? ST4 : WN == 2 || T == RF_TYPE_Q6_K ? F::ST : F::ST == 4 ? 3 : F::ST == 3 && F::CB > 200 ? 2 : F::ST;
    static constexpr int SMEM = ST * BYTES;
    static constexpr int MINB = 2 * SMEM + 2048 <= 228 * 1024 ? 2 : 1; /* blocks per SM */
};

/* d = a b + c for one m16n8k32 (A unsigned bytes with AU, else signed) or m16n8k16 (A unsigned)
 * int8 tile, c given per element (the offsets of the centred formats ride in it for free) */
template <bool AU>
static __device__ __forceinline__ void rf_mmq_k32(int *d, const uint32_t *a, const int *b, const int *c) {
    if (AU)
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]),
              "r"(c[2]), "r"(c[3]));
    else
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]),
              "r"(c[2]), "r"(c[3]));
}
static __device__ __forceinline__ void rf_mmq_k16u(int *d, uint32_t a0, uint32_t a1, int b, int c0, int c1) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b), "r"(c0), "r"(c1), "r"(c0), "r"(c1));
}

/* The mins' term of the K-quants' XS flush, I2 = sum_j m_j s_j over a super-block's 8 blocks (m_j
 * a row's 6-bit min, s_j a token's int x sum, |s_j| <= 32 * 127), as one m16n8k16 f16 mma of
 * A = [m_j | 64 m_j] by B = [s_j mod 64 | floor(s_j / 64)] (k = j | 8 + j): every operand an
 * integer f16 holds exactly (m <= 63, 64 m <= 4032, s mod 64 <= 63, |floor(s / 64)| <= 64), every
 * product below 2^18 and every sum below 8 * 63 * 4064 < 2^22, so the f32 result is the exact
 * integer (the tensor cores align a step's products to the largest with more than the 24 bits
 * these need). Small integers v become f16 by their bits: 0x6400 + v is 1024 + v for 0 <= v < 1024. */
static __device__ __forceinline__ uint32_t rf_mmq_h2sub(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("sub.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
/* lane (g, t)'s A fragment (rows g, g + 8 at their Q4_K / Q5_K scale bytes q0, q1; k = 2t, 2t + 1
 * and 8 + 2t, 9 + 2t): the mins m_2t, m_2t+1 of each row (rf_k4_sm's packing), then 64 times them */
static __device__ __forceinline__ void rf_mmq_mins_a(uint32_t (&a)[4], const uint8_t *q0, const uint8_t *q1, int t) {
    const uint8_t *q[2] = {q0, q1};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t w1 = *(const uint32_t *)(q[h] + 4), w2 = *(const uint32_t *)(q[h] + 8);
        const int u = 16 * (t & 1);
        /* blocks 2t, 2t + 1 as two bytes: j < 4: bytes j of q + 4, low 6 bits; else the high
         * nibbles of bytes j of q + 4 (w2's j - 4) under the top 2 bits of byte j of q (w1's j - 4) */
        const uint32_t pr = t < 2 ? (w1 >> u) & 0x3F3Fu : ((w2 >> (u + 4)) & 0x0F0Fu) | (((w1 >> (u + 6)) & 0x0303u) << 4);
        const uint32_t m = rf_mmq_h2sub(__byte_perm(pr, 0x6464u, 0x5140u), 0x64006400u); /* (m_2t, m_2t+1) */
        uint32_t m64;
        asm("mul.f16x2 %0, %1, %2;" : "=r"(m64) : "r"(m), "r"(0x54005400u)); /* times 64 */
        a[h] = m, a[2 + h] = m64;
    }
}
/* lane (g, t)'s B fragment: token g's s_2t, s_2t+1 as (s mod 64) in b0, floor(s / 64) in b1 */
static __device__ __forceinline__ void rf_mmq_mins_b(uint32_t *b0, uint32_t *b1, int s0, int s1) {
    *b0 = rf_mmq_h2sub(((uint32_t)s0 & 63u) | (((uint32_t)s1 & 63u) << 16) | 0x64006400u, 0x64006400u);
    *b1 = rf_mmq_h2sub((uint32_t)((s0 >> 6) + 64) | ((uint32_t)((s1 >> 6) + 64) << 16) | 0x64006400u, 0x64406440u);
}
/* Q6_K's centre term as the same mma: A = the row's 16 int8 scales sc_k (k = 0..15, at q: the
 * super-block's byte 192), B = a token's 16 half-block x sums h_k (|h_k| <= 16 * 127 < 2^11), all
 * exact in f16; products below 2^18 and sums below 16 * 128 * 2032 < 2^22: the exact integer.
 * Lane (g, t)'s A: rows g, g + 8 at q0, q1, k = 2t, 2t + 1 and 8 + 2t, 9 + 2t (byte loads: the
 * super-block sits at any even offset, and at any offset in the unaligned kernels) */
static __device__ __forceinline__ void rf_mmq_scales_a(uint32_t (&a)[4], const uint8_t *q0, const uint8_t *q1, int t) {
    const uint8_t *q[2] = {q0, q1};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int8_t *s = (const int8_t *)q[h] + 2 * t;
        const __half2 lo = __halves2half2(__int2half_rn(s[0]), __int2half_rn(s[1]));
        const __half2 hi = __halves2half2(__int2half_rn(s[8]), __int2half_rn(s[9]));
        a[h] = *reinterpret_cast<const uint32_t *>(&lo), a[2 + h] = *reinterpret_cast<const uint32_t *>(&hi);
    }
}
/* a block's two half sums (the record's int sum s and first half's lo) as B's f16 pair (lo, s - lo) */
static __device__ __forceinline__ uint32_t rf_mmq_halves_b(int s, int lo) {
    const __half2 h = __halves2half2(__int2half_rn(lo), __int2half_rn(s - lo));
    return *reinterpret_cast<const uint32_t *>(&h);
}
/* d = a b (f32 accumulators from zero) */
static __device__ __forceinline__ void rf_mmq_mins(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* the 4 bytes at byte p of a staged row r, p even (a compile-time constant once unrolled, but
 * for Q6_K's second super-block) */
static __device__ __forceinline__ uint32_t rf_mmq_word(const uint8_t *r, int p) {
    if (p % 4 == 0) return *(const uint32_t *)(r + p);
    return __byte_perm(*(const uint32_t *)(r + p - 2), *(const uint32_t *)(r + p + 2), 0x5432u);
}

/* the 4 bytes at byte o of the shared memory (any o: two aligned words funnel-shifted; the
 * unaligned formats' staged rows, whose offsets are known only at run time) */
static __device__ __forceinline__ uint32_t rf_mmq_wsh(const uint8_t *smem, int o) {
    const uint32_t *a = (const uint32_t *)smem + (o >> 2);
    return __funnelshift_r(a[0], a[1], 8u * (unsigned)(o & 3));
}

/* Exact int -> f32 without the conversion unit (16 results per clock per SM on sm_80 / sm_90,
 * which bounded the kernel: 4 conversions per mma): v + RF_MMQ_MAGIC read as a float is 1.5 2^23
 * + v exactly for |v| < 2^22, so taking 1.5 2^23 off gives (float)v bit for bit, on the
 * integer and FMA pipes. The int8 formats' block sums add the bias in the mma's c operand (free):
 * |sum| <= 32 * 128 * 127 < 2^22. */
#define RF_MMQ_MAGIC 0x4B400000
static __device__ __forceinline__ float rf_mmq_unbias(int biased) { return __int_as_float(biased) - 12582912.0f; }
static __device__ __forceinline__ float rf_mmq_i2f(int v) { return rf_mmq_unbias(v + RF_MMQ_MAGIC); }

/* The unaligned formats' weights of one chunk (CB bytes at byte off of each row, fewer in a
 * partial last chunk) of the 128 rows from r0 into a stage (sm: its generic address, so: its
 * shared-space one), row by row SROW apart: from the 16-byte word below the chunk's first byte to
 * its last byte in CW 16-byte cp.async copies at most, the copy that would cross the row's end
 * read byte by byte and zero-padded (nothing past a row is read: the last row of the tensor ends
 * the allocation); rows past n_out copy the last. All 256 threads. */
template <int CB, int SROW, int CW>
static __device__ __forceinline__ void rf_mmq_issue_w_ua(uint8_t *sm, unsigned so, const uint8_t *w, int64_t row_bytes,
                                                         int64_t off, int r0, int n_out) {
    const int cbv = row_bytes - off < CB ? (int)(row_bytes - off) : CB;
#pragma unroll 2
    for (int i = threadIdx.x; i < RF_MMQ_BM * CW; i += RF_MMQ_NW * 32) {
        const int row = i / CW, col = i % CW;
        const int r = r0 + row < n_out ? r0 + row : n_out - 1;
        const uint8_t *rs = w + (int64_t)r * row_bytes, *s0 = rs + off;
        const uint8_t *a = (const uint8_t *)((uintptr_t)s0 & ~(uintptr_t)15), *src = a + 16 * col;
        if (col >= ((int)(s0 - a) + cbv + 15) / 16) continue;
        if (src + 16 <= rs + row_bytes) {
            rf_cp_async16_s(so + (unsigned)(row * SROW + col * 16), src);
        } else {
            uint32_t v[4] = {0u, 0u, 0u, 0u};
            const int nv = (int)(rs + row_bytes - src);
#pragma unroll
            for (int j = 0; j < 16; j++) /* unrolled: v stays in registers */
                if (j < nv) v[j >> 2] |= (uint32_t)src[j] << (8 * (j & 3));
            *(uint4 *)(sm + row * SROW + col * 16) = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
}

/* Q5_0's high bits: bits 0..3 of x to bit 4 of bytes 0..3 (rf_qh4's values in 4 operations where
 * it takes ~10: the product puts bit i at i + 7 j for j = 0..3, no two terms on one bit, and
 * bit i of byte i, i + 7 i = 8 i, is the one kept) */
static __device__ __forceinline__ uint32_t rf_mmq_qh4(uint32_t x) {
    return ((x & 0xFu) * 0x00204081u << 4) & 0x10101010u;
}

/* The unaligned formats' A fragment words of block b for lane (g, t) of one staged row whose
 * chunk starts at byte ro of the shared memory (run-time offsets: rf_mmq_wsh): lo = elements
 * 4t..4t+3, hi = 16+4t..16+4t+3 as int8 (Q4_0: as its unsigned codes, centre in the mma's c),
 * d the block's (Q6_K: the super-block's) scale, sc Q6_K's two int8 scales of the halves. */
template <int B>
static __device__ __forceinline__ void rf_mmq_a_ua(const uint8_t *smem, int ro, int t, int b, uint32_t *lo,
                                                   uint32_t *hi, float *d, int *sc) {
    const int ot = ro + 4 * t;
    if constexpr (B == RF_TYPE_Q4_0) {
        const uint32_t q = rf_mmq_wsh(smem, ot + b * 18 + 2);
        *lo = q & 0x0F0F0F0Fu, *hi = (q >> 4) & 0x0F0F0F0Fu;
        *d = rf_h2f_bits((uint16_t)(rf_mmq_wsh(smem, ro + b * 18) & 0xFFFFu));
    } else if constexpr (B == RF_TYPE_Q8_0) {
        *lo = rf_mmq_wsh(smem, ot + b * 34 + 2), *hi = rf_mmq_wsh(smem, ot + b * 34 + 18);
        *d = rf_h2f_bits((uint16_t)(rf_mmq_wsh(smem, ro + b * 34) & 0xFFFFu));
    } else if constexpr (B == RF_TYPE_Q5_0) { /* bit 4 of element j: bit j of qh */
        const uint32_t qh = rf_mmq_wsh(smem, ro + b * 22 + 2) >> (4 * t), q = rf_mmq_wsh(smem, ot + b * 22 + 6);
        *lo = (q & 0x0F0F0F0Fu) | rf_mmq_qh4(qh), *hi = ((q >> 4) & 0x0F0F0F0Fu) | rf_mmq_qh4(qh >> 16);
        *d = rf_h2f_bits((uint16_t)(rf_mmq_wsh(smem, ro + b * 22) & 0xFFFFu));
    } else if constexpr (B == RF_TYPE_MXFP4) {
        /* codes j and 16 + j in the low and high nibble of byte 1 + j; the value 2^(e - 128) kv
         * (kv: the doubled E2M1 value, int8), as rf_mxfp4_dot; the exponent byte read alone */
        rf_fp4x8(rf_mmq_wsh(smem, ot + b * 17 + 1), lo, hi);
        *d = rf_mxfp4_scale(smem[ro + b * 17]);
    } else { /* Q6_K, one super-block per chunk: block b = 4 hh + kk (see rf_k_mmq's aligned one) */
        const int hh = b / 4, kk = b % 4, ls = 4 * (kk >> 1), hs = 2 * kk;
        const uint32_t l0 = rf_mmq_wsh(smem, ot + 64 * hh + 32 * (kk & 1));
        const uint32_t l1 = rf_mmq_wsh(smem, ot + 64 * hh + 32 * (kk & 1) + 16);
        const uint32_t h0 = rf_mmq_wsh(smem, ot + 128 + 32 * hh), h1 = rf_mmq_wsh(smem, ot + 128 + 32 * hh + 16);
        *lo = ((l0 >> ls) & 0x0F0F0F0Fu) | (((h0 >> hs) & 0x03030303u) << 4);
        *hi = ((l1 >> ls) & 0x0F0F0F0Fu) | (((h1 >> hs) & 0x03030303u) << 4);
        const uint32_t sw = rf_mmq_wsh(smem, ro + 192 + 8 * hh + 2 * kk);
        sc[0] = (int)(int8_t)(sw & 0xFFu), sc[1] = (int)(int8_t)((sw >> 8) & 0xFFu);
        *d = rf_h2f_bits((uint16_t)(rf_mmq_wsh(smem, ro + 208) & 0xFFFFu));
    }
}

/* The aligned formats' A fragment words of block b for lane (g, t) of a staged row r whose chunk
 * starts at r (offsets compile-time constants once unrolled, but for Q6_K's second super-block):
 * lo, hi, d and sc as rf_mmq_a_ua; cm: Q4_K / Q5_K's f32 factor of the block's x sum
 * (c d sc - dmin m, the centre and the minimum). XS (x per 256, rf_k_mmq): Q4_K / Q5_K give
 * the super-block's d and dmin in d and cm and the block's 6-bit scale and min in sc. */
template <int T, int XS>
static __device__ __forceinline__ void rf_mmq_a_al(const uint8_t *r, int t, int b, uint32_t *lo, uint32_t *hi,
                                                   float *d, float *cm, int *sc) {
    const uint8_t *rt = r + 4 * t; /* rt: offsets known at compile time */
    if constexpr (T == RF_TYPE_Q4_0) {
        const uint32_t q = rf_mmq_word(rt, b * 18 + 2);
        *lo = q & 0x0F0F0F0Fu, *hi = (q >> 4) & 0x0F0F0F0Fu;
        *d = rf_h2f_bits(*(const uint16_t *)(r + b * 18));
    } else if constexpr (T == RF_TYPE_Q5_0) { /* bit 4 of element j: bit j of qh */
        const uint32_t qh = rf_mmq_word(r, b * 22 + 2) >> (4 * t), q = rf_mmq_word(rt, b * 22 + 6);
        *lo = (q & 0x0F0F0F0Fu) | rf_mmq_qh4(qh), *hi = ((q >> 4) & 0x0F0F0F0Fu) | rf_mmq_qh4(qh >> 16);
        *d = rf_h2f_bits(*(const uint16_t *)(r + b * 22));
    } else if constexpr (T == RF_TYPE_Q8_0) {
        *lo = rf_mmq_word(rt, b * 34 + 2);
        *hi = rf_mmq_word(rt, b * 34 + 18);
        *d = rf_h2f_bits(*(const uint16_t *)(r + b * 34));
    } else if constexpr (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
        /* sub-block b: nibble b % 2 of qs bytes 32 (b / 2) + l; Q5_K: bit b of qh byte l */
        constexpr int QS = T == RF_TYPE_Q4_K ? 16 : 48;
        const int sh = 4 * (b % 2);
        uint32_t q0 = (*(const uint32_t *)(rt + QS + 32 * (b / 2)) >> sh) & 0x0F0F0F0Fu;
        uint32_t q1 = (*(const uint32_t *)(rt + QS + 32 * (b / 2) + 16) >> sh) & 0x0F0F0F0Fu;
        if (T == RF_TYPE_Q5_K) {
            q0 |= ((*(const uint32_t *)(rt + 16) >> b) & 0x01010101u) << 4;
            q1 |= ((*(const uint32_t *)(rt + 32) >> b) & 0x01010101u) << 4;
        }
        *lo = q0, *hi = q1;
        int s, m;
        rf_k4_sm(b, r + 4, &s, &m);
        const float dd = rf_h2f_bits(*(const uint16_t *)r), dmin = rf_h2f_bits(*(const uint16_t *)(r + 2));
        if constexpr (XS) {
            *d = dd, *cm = dmin, sc[0] = s, sc[1] = m;
        } else {
            constexpr float C = T == RF_TYPE_Q4_K ? 8.0f : 16.0f;
            *d = dd * rf_mmq_i2f(s); /* = (float)sc, (float)m: 0..63 */
            *cm = C * *d - dmin * rf_mmq_i2f(m);
        }
    } else { /* Q6_K: block b = 8 s + 4 hh + kk of super-block s (at 210 s) */
        const int s = b / 8, hh = b % 8 / 4, kk = b % 4, o = 210 * s;
        const uint32_t l0 = rf_mmq_word(rt, o + 64 * hh + 32 * (kk & 1));
        const uint32_t l1 = rf_mmq_word(rt, o + 64 * hh + 32 * (kk & 1) + 16);
        const uint32_t h0 = rf_mmq_word(rt, o + 128 + 32 * hh);
        const uint32_t h1 = rf_mmq_word(rt, o + 128 + 32 * hh + 16);
        const int ls = 4 * (kk >> 1), hs = 2 * kk;
        *lo = ((l0 >> ls) & 0x0F0F0F0Fu) | (((h0 >> hs) & 0x03030303u) << 4);
        *hi = ((l1 >> ls) & 0x0F0F0F0Fu) | (((h1 >> hs) & 0x03030303u) << 4);
        const uint32_t sw = rf_mmq_word(r, o + 192 + 8 * hh + 2 * kk);
        sc[0] = (int)(int8_t)(sw & 0xFFu), sc[1] = (int)(int8_t)((sw >> 8) & 0xFFu);
        *d = rf_h2f_bits((uint16_t)(rf_mmq_word(r, o + 208) & 0xFFFFu));
    }
}

/* rf_k_mmq's copies of chunk kc of a row share into stage slot (shared base address base,
 * generic smem): the weights of the 128 rows from r0 (rows past n_out copy the last; the
 * unaligned formats through rf_mmq_issue_w_ua), all 256 threads */
template <int T, int WN, int STX>
static __device__ __forceinline__ void rf_mmq_issue_w(uint8_t *smem, unsigned base, const uint8_t *w,
                                                      int64_t row_bytes, int kc, int slot, int r0, int n_out) {
    using F = rf_mmq_fmt<T>;
    using L = rf_mmq_stage<T, WN, STX>;
    constexpr int CW = F::UA ? (15 + F::CB + 15) / 16 : F::CB / F::CPY; /* copies per row per chunk (UA: at most) */
    const int64_t off = (int64_t)kc * F::CB;
    const unsigned so = base + (unsigned)(slot * L::BYTES);
    if constexpr (F::UA) {
        rf_mmq_issue_w_ua<F::CB, F::SROW, CW>(smem + slot * L::BYTES, so, w, row_bytes, off, r0, n_out);
    } else {
#pragma unroll 4
        for (int i = threadIdx.x; i < RF_MMQ_BM * CW; i += RF_MMQ_NW * 32) {
            const int row = i / CW, col = i % CW;
            const int r = r0 + row < n_out ? r0 + row : n_out - 1;
            const uint8_t *src = w + (int64_t)r * row_bytes + off + col * F::CPY;
            const unsigned dst = so + (unsigned)(row * F::SROW + col * F::CPY);
            if (F::CPY == 16) rf_cp_async16_s(dst, src);
            else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
        }
    }
}

/* the same for x and its records: the BN tokens from t0 (tokens past nt copy the last), the
 * blocks of chunk kc (nb blocks a row: the unaligned formats' partial last chunk copies its own) */
template <int T, int WN, int STX>
static __device__ __forceinline__ void rf_mmq_issue_x(unsigned base, const int8_t *qx, const uint8_t *rec, int kc,
                                                      int slot, int t0, int nt, int n_in, int nb) {
    using F = rf_mmq_fmt<T>;
    using L = rf_mmq_stage<T, WN, STX>;
    constexpr int KB = F::KB, BN = L::BN, NTH = RF_MMQ_NW * 32, UA = F::UA;
    constexpr int XW = KB * 2, RW = UA ? KB * F::REC / 8 : KB * F::REC / 16; /* copies per token: x (16 bytes),
                                                                              * records (16, UA 8) */
    const int tid = threadIdx.x;
    const int kb = kc * KB, nbv = nb - kb < KB ? nb - kb : KB; /* blocks in the chunk */
    const unsigned so = base + (unsigned)(slot * L::BYTES);
#pragma unroll
    for (int i = tid; i < BN * XW; i += NTH) {
        const int n = i / XW, c = i % XW, tok = t0 + n < nt ? t0 + n : nt - 1;
        if (UA && c >= 2 * nbv) continue; /* past the row (partial last chunk) */
        rf_cp_async16_s(so + (unsigned)(L::XO + n * L::XT + c * 16),
                        qx + (int64_t)tok * n_in + (int64_t)kb * 32 + c * 16);
    }
    if constexpr (UA) { /* 8-byte copies: 8-byte records of an odd count of blocks sit 8 past 16 */
#pragma unroll
        for (int i = tid; i < BN * RW; i += NTH) {
            const int n = i / RW, c = i % RW, tok = t0 + n < nt ? t0 + n : nt - 1;
            if (c >= nbv * F::REC / 8) continue;
            rf_cp_async8_s(so + (unsigned)(L::RO + n * L::RS + c * 8), rec + ((int64_t)tok * nb + kb) * F::REC + c * 8);
        }
    } else {
#pragma unroll
        for (int i = tid; i < BN * RW; i += NTH) {
            const int n = i / RW, c = i % RW, tok = t0 + n < nt ? t0 + n : nt - 1;
            rf_cp_async16_s(so + (unsigned)(L::RO + n * L::RS + c * 16),
                            rec + ((int64_t)tok * nb + kb) * F::REC + c * 16);
        }
    }
}

#endif /* !RF_HIP */

#endif
