/* gpu_gemv_dot.cuh — the int8-x dot products of one block of each format, shared by the int8-x
 * GEMVs and MMQ: the 32-element formats (rf_q32_dot, rf_mxfp4_dot, MXFP4 also decoded once for
 * several tokens) and the Q4_K / Q5_K / Q6_K super-blocks (rf_qk_dot, rf_q6k_dot). */
#ifndef RF_GPU_GEMV_DOT_CUH
#define RF_GPU_GEMV_DOT_CUH

#include "backend/gpu/gpu_gemv.cuh"

/* bit 4 of each byte of a packed 4-element word from 4 consecutive bits of qh starting at sh */
static __device__ __forceinline__ int rf_qh4(uint32_t qh, int sh) {
    qh >>= sh;
    return (int)(((qh & 1u) << 4) | ((qh & 2u) << 11) | ((qh & 4u) << 18) | ((qh & 8u) << 25));
}

/* Dot of one 32-element block with one token's quantized x (xi: 8 packed int8x4, dxd: its scale,
 * sxi: the sum of its int8 values, fsum: Q4_1 / Q5_1 only, q8_1's s of the block).
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
     * |q - c|, not |q|. Q4_1 / Q5_1 take the block as ggml's CPU code and the CPU twin do:
     * (d dx) sum q x + m s, with fsum carrying q8_1's s = f16(amax / 127 * sum q) (the records
     * of rf_xq_records 2). The exact f32 sum of x instead (as before 2026-11-25) is closer to
     * the f32 reference, but shifts every product by about the int8 rounding itself against
     * the CPU engine: SmolLM2 Q4_1 logits 3.6-4.5e-2 from the CPU's, greedy text apart early. */
    constexpr int C = T == RF_TYPE_Q4_0 || T == RF_TYPE_Q4_1 ? 8 : 16;
    if (T == RF_TYPE_Q4_0 || T == RF_TYPE_Q5_0) return d * dxd * (float)(s - C * sxi);
    const float m = rf_h2f_bits((uint16_t)(fw(2) & 0xFFFFu));
    return d * dxd * (float)s + m * fsum;
}

/* The doubled E2M1 values (0, 1, 2, 3, 4, 6, 8, 12 and their negatives: MXFP4's table) of the
 * four 4-bit codes in the low nibbles of q's bytes (q & 0xF0F0F0F0 == 0), as four int8: two
 * byte_perm lookups by the code's low 3 bits, the sign bit (bit 3) choosing between them. */
static __device__ __forceinline__ int rf_fp4x4(uint32_t q) {
    const uint32_t sel = (q & 0x7u) | ((q >> 4) & 0x70u) | ((q >> 8) & 0x700u) | ((q >> 12) & 0x7000u);
    const uint32_t pos = __byte_perm(0x03020100u, 0x0C080604u, sel); /* 0 1 2 3 | 4 6 8 12 */
    const uint32_t neg = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, sel); /* 0 -1 -2 -3 | -4 -6 -8 -12 */
    const uint32_t m = ((q >> 3) & 0x01010101u) * 0xFFu;
    return (int)((pos & ~m) | (neg & m));
}

/* The doubled E2M1 values (int8) of the 8 MXFP4 codes in q (byte k: codes j + k in its low
 * nibble, 16 + j + k in its high one): lo = those of the low nibbles, hi of the high ones, the
 * values of rf_fp4x4 in 14 operations where two rf_fp4x4 take ~28: the nibbles index the two
 * halves of the table (codes 0-7 and their negatives) as byte_perm selectors in place, two
 * nibbles per byte (bytes lo0 hi0 lo1 hi1 | lo2 hi2 lo3 hi3), the sign bit picks the half per
 * byte, and two more byte_perm de-interleave. (MMQ's A fragments and the grouped MoE GEMV, which
 * decode a block once for several tokens.) */
static __device__ __forceinline__ void rf_fp4x8(uint32_t q, uint32_t *lo, uint32_t *hi) {
    const uint32_t m = q & 0x77777777u, mb = m >> 16; /* 3-bit selectors: bit 3 of a nibble would
                                                       * make byte_perm replicate a sign */
    const uint32_t pa = __byte_perm(0x03020100u, 0x0C080604u, m), pb = __byte_perm(0x03020100u, 0x0C080604u, mb);
    const uint32_t na = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, m), nb = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, mb);
    const uint32_t ra = __byte_perm(pa, na, 0x3210u | ((q >> 1) & 0x4444u));
    const uint32_t rb = __byte_perm(pb, nb, 0x3210u | ((q >> 17) & 0x4444u));
    *lo = __byte_perm(ra, rb, 0x6420u), *hi = __byte_perm(ra, rb, 0x7531u);
}

/* an MXFP4 block's scale 2^(e - 128) (E8M0 e times 0.5, as rf_e8m0_to_f32_half) */
static __device__ __forceinline__ float rf_mxfp4_scale(uint32_t ex) {
    return __uint_as_float(ex < 2 ? (0x00200000u << ex) : ((ex - 1) << 23));
}

/* An MXFP4 block's 16 code bytes (after its exponent byte at bp) as five aligned words w and the
 * byte offset o of the codes in w[0]: __byte_perm(w[k], w[k + 1], 0x3210 + o * 0x1111) is code
 * word k (up to 3 bytes read past the block: rf_gpu_alloc pads every allocation by 16). */
static __device__ __forceinline__ unsigned rf_mxfp4_words(const uint8_t *bp, uint32_t *w) {
    const uint8_t *qp = bp + 1;
    const uint32_t *a = (const uint32_t *)((uintptr_t)qp & ~(uintptr_t)3);
    const unsigned o = (unsigned)((uintptr_t)qp & 3);
#pragma unroll
    for (int k = 0; k < 4; k++) w[k] = a[k];
    w[4] = o ? a[4] : 0u;
    return o;
}

/* Dot of one MXFP4 block (17 bytes at any byte offset: E8M0 exponent e, then 16 bytes of codes,
 * element j in the low nibble of byte j, j + 16 in its high nibble) with one token's Q8_0-style
 * int8 x (xi: 8 packed int8x4, dxd its scale): 2^(e - 128) * dxd * sum kv[q] x in exact
 * integers, the twin of rf_vec_dot_mxfp4 (quant/vec_dot.c); the codes read by rf_mxfp4_words. */
static __device__ __forceinline__ float rf_mxfp4_dot(const uint8_t *bp, const int *xi, float dxd) {
    uint32_t w[5];
    const unsigned o = rf_mxfp4_words(bp, w);
    int s = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t q = __byte_perm(w[k], w[k + 1], 0x3210u + o * 0x1111u);
        s = rf_dp4a(rf_fp4x4(q & 0x0F0F0F0Fu), xi[k], s);
        s = rf_dp4a(rf_fp4x4((q >> 4) & 0x0F0F0F0Fu), xi[4 + k], s);
    }
    const float d = rf_mxfp4_scale(bp[0]);
    return d * dxd * (float)s;
}

/* rf_mxfp4_dot in two halves, for a block dotted with several tokens' x: the block decoded once
 * (q[k] and q[4 + k]: the int8 values of elements 4k..4k+3 and 16+4k..16+4k+3, rf_fp4x8's; the
 * return value its scale), then each token's dot, the same integers and the same float
 * operations as rf_mxfp4_dot (its bits). */
static __device__ __forceinline__ float rf_mxfp4_decode(const uint8_t *bp, int *q) {
    uint32_t w[5];
    const unsigned o = rf_mxfp4_words(bp, w);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t lo, hi;
        rf_fp4x8(__byte_perm(w[k], w[k + 1], 0x3210u + o * 0x1111u), &lo, &hi);
        q[k] = (int)lo, q[4 + k] = (int)hi;
    }
    return rf_mxfp4_scale(bp[0]);
}

static __device__ __forceinline__ float rf_mxfp4_dot_dq(const int *q, float d, const int *xi, float dxd) {
    int s = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        s = rf_dp4a(q[k], xi[k], s);
        s = rf_dp4a(q[4 + k], xi[4 + k], s);
    }
    return d * dxd * (float)s;
}

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

#endif
