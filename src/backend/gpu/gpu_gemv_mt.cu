/* gpu_gemv_mt.cu — gemv_mt: products of 2..16 tokens on the int8 tensor cores (CUDA sm_80+): each
 * weight chunk is staged once per block and multiplied against every token's int8 x with
 * mma.m16n8k32 (tokens as n), so the weights are read once per call and decoded once per 8 or 16
 * tokens. Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K. Twin: rf_cpu_matmul with test_hooks cpu_act =
 * RF_CPU_ACT_GPU (x rounded as rf_k_quantize_x rounds it). */
#include "backend/gpu/gpu_gemv_dot.cuh" /* rf_qh4 */
#include "core/test_hooks.h"

#if !defined(RF_HIP) /* mma.sync, cp.async: CUDA only */

/* The formats' chunks: KB 32-element blocks per chunk (8 blocks of the 32-element formats, one K
 * super-block; Q6_K two super-blocks), CB bytes of a row per chunk, copied as CW 16-byte cp.async
 * pieces from the 16-byte boundary at or before the chunk (Q6_K's 420-byte chunks start 0, 4, 8
 * or 12 bytes past one, in rows of whole 16-byte words: 27 pieces cover any of them, where 4-byte
 * copies took 105); SROW: a staged row's stride (a multiple of 16 bytes whose word count is 4 mod
 * 8, so the 8 rows g of one fragment load fall on distinct banks; Q6_K: room for the offset and
 * a realigned word read past the chunk); REC: bytes of an x record (rf_k_quantize_x, GB 1: 8 = (d, int
 * sum), 16 = + the f32 sum (Q4_1 / Q5_1: ggml's q8_1 s instead), int sum of the first 16); ST:
 * pipeline stages where they fit. */
template <int T> struct rf_mt_fmt;
template <> struct rf_mt_fmt<RF_TYPE_Q4_0> { static constexpr int KB = 8, CB = 144, CW = 9, SROW = 144, REC = 8, ST = 3; };
template <> struct rf_mt_fmt<RF_TYPE_Q4_1> { static constexpr int KB = 8, CB = 160, CW = 10, SROW = 176, REC = 16, ST = 3; };
template <> struct rf_mt_fmt<RF_TYPE_Q5_0> { static constexpr int KB = 8, CB = 176, CW = 11, SROW = 176, REC = 8, ST = 3; };
template <> struct rf_mt_fmt<RF_TYPE_Q5_1> { static constexpr int KB = 8, CB = 192, CW = 12, SROW = 208, REC = 16, ST = 3; };
template <> struct rf_mt_fmt<RF_TYPE_Q8_0> { static constexpr int KB = 8, CB = 272, CW = 17, SROW = 272, REC = 8, ST = 3; };
template <> struct rf_mt_fmt<RF_TYPE_Q4_K> { static constexpr int KB = 8, CB = 144, CW = 9, SROW = 144, REC = 16, ST = 3; };
template <> struct rf_mt_fmt<RF_TYPE_Q5_K> { static constexpr int KB = 8, CB = 176, CW = 11, SROW = 176, REC = 16, ST = 3; };
template <> struct rf_mt_fmt<RF_TYPE_Q6_K> { static constexpr int KB = 16, CB = 420, CW = 27, SROW = 464, REC = 16, ST = 2; };
/* where chunk c of a row starts past the 16-byte boundary its copy starts at */
template <int T> static __device__ __forceinline__ int rf_mt_off(int c) { return rf_mt_fmt<T>::CB % 16 ? c * rf_mt_fmt<T>::CB % 16 : 0; }

#define RF_MT_NW 8 /* warps per block: 8 / KS along the rows (16 each) x KS along the row's chunks */
#define RF_MT_SMEM_MAX (227 * 1024)

/* The block's tile: RB = 128 / KS rows by BN = 8 NF tokens; a stage holds KS consecutive chunks
 * (warp (wr, ks) takes chunk ks of each stage): the rows' bytes (plus 16 a realigned word may
 * read past the last), x (per token KB blocks of 32 plus 16: the 8 tokens g of one fragment load
 * on distinct banks) and the records (per token KB records plus 16). */
template <int T, int NF, int KS> struct rf_mt_tile {
    using F = rf_mt_fmt<T>;
    static constexpr int WR = RF_MT_NW / KS, RB = 16 * WR, BN = 8 * NF;
    static constexpr int XT = F::KB * 32 + 16, RS = F::KB * F::REC + 16;
    static constexpr int XO = KS * RB * F::SROW + 16, RO = XO + KS * BN * XT;
    static constexpr int BYTES = RO + KS * BN * RS;
    /* ST: the format's stages where they fit, but 2 where 3 would leave one block (8 warps) an SM
     * (228 KB, 1 KB reserved a block) and 2 let two share it (Q8_0 at KS 2, 4, 8: 118-168 KB;
     * KS 8 of the 4-bit formats): as many bytes in flight an SM, twice the warps to hide the
     * products' latencies. ST_OLD: the stages before that (the old copies' kernel). */
    static constexpr int ST_OLD = F::ST * BYTES <= RF_MT_SMEM_MAX ? F::ST : 2;
    static constexpr int ST = ST_OLD == 3 && 2 * (3 * BYTES + 1024) > 228 * 1024 && 2 * (2 * BYTES + 1024) <= 228 * 1024 ? 2 : ST_OLD;
    static constexpr int SMEM = ST * BYTES, SMEM_OLD = ST_OLD * BYTES;
    /* 3 blocks an SM by shared memory: NF 1 then asks ptxas for 80 registers, which it meets
     * without spilling (NF 2 and the rest: 128, where 80 spilled Q5_1) */
    static constexpr bool MINB3 = NF == 1 && 3 * (SMEM + 1024) <= 228 * 1024;
};

/* d = a b + c for one m16n8k32 int8 tile (A unsigned bytes with AU, else signed; B signed) or
 * one m16n8k16 tile (A unsigned), c given per element: the centres of the formats and the bias
 * of rf_mt_unbias ride in it for free */
template <bool AU>
static __device__ __forceinline__ void rf_mt_k32(int *d, const uint32_t *a, const int *b, int c0, int c1) {
    if (AU)
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%10,%11};"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c0), "r"(c1));
    else
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%10,%11};"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c0), "r"(c1));
}
static __device__ __forceinline__ void rf_mt_k16u(int *d, uint32_t a0, uint32_t a1, int b, int c0, int c1) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%7,%8};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b), "r"(c0), "r"(c1));
}

/* Exact int -> f32 without the conversion unit: v + RF_MT_MAGIC read as a float is 1.5 2^23 + v
 * for |v| < 2^22, so taking 1.5 2^23 off gives (float)v bit for bit (the int8 formats' block
 * sums: |sum| <= 32 * 128 * 127 < 2^22; Q6_K's scaled sums reach 2^24 and take I2F) */
#define RF_MT_MAGIC 0x4B400000
static __device__ __forceinline__ float rf_mt_unbias(int biased) { return __int_as_float(biased) - 12582912.0f; }

/* the 4 bytes at byte p of a staged row r, p even (a compile-time constant once unrolled) */
static __device__ __forceinline__ uint32_t rf_mt_word(const uint8_t *r, int p) {
    if (p % 4 == 0) return *(const uint32_t *)(r + p);
    return __byte_perm(*(const uint32_t *)(r + p - 2), *(const uint32_t *)(r + p + 2), 0x5432u);
}

/* Block b of the chunk for one staged row r, lane t (b a compile-time constant once unrolled):
 * the A fragment's words of that row (lo: elements 4t..4t+3, hi: 16 + 4t..; any order of the 32
 * elements serves, as long as x's words follow it, and this is the order x is stored in), the
 * factor d of the block's integer sum, the factor cm of the record's sum of x (Q4_K / Q5_K: q
 * centred on c in the integer sum, so cm = c d sc - dmin m, as rf_qk_dot; Q4_1 / Q5_1: the
 * minimum m, against q8_1's s, as rf_q32_dot) and Q6_K's two int8 scales of the 16-element
 * halves. Q5_0 / Q5_1: bit 4 of element j is bit j of qh. */
template <int T>
static __device__ __forceinline__ void rf_mt_row(const uint8_t *r, int t, int b, uint32_t &lo, uint32_t &hi, float &d,
                                                 float &cm, int &sc0, int &sc1) {
    const uint8_t *rt = r + 4 * t; /* offsets below stay compile-time constants */
    if constexpr (T == RF_TYPE_Q4_0) {
        const uint32_t q = rf_mt_word(rt, b * 18 + 2);
        lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
        d = rf_h2f_bits(*(const uint16_t *)(r + b * 18));
    } else if constexpr (T == RF_TYPE_Q4_1) { /* d, m, 16 bytes of nibbles: 4-byte aligned */
        const uint32_t q = *(const uint32_t *)(rt + b * 20 + 4);
        lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
        d = rf_h2f_bits(*(const uint16_t *)(r + b * 20)), cm = rf_h2f_bits(*(const uint16_t *)(r + b * 20 + 2));
    } else if constexpr (T == RF_TYPE_Q5_0) { /* d, qh (4 bytes), 16 bytes of nibbles */
        const uint32_t qh = rf_mt_word(r, b * 22 + 2), q = rf_mt_word(rt, b * 22 + 6);
        lo = (q & 0x0F0F0F0Fu) | (uint32_t)rf_qh4(qh, 4 * t), hi = ((q >> 4) & 0x0F0F0F0Fu) | (uint32_t)rf_qh4(qh, 16 + 4 * t);
        d = rf_h2f_bits(*(const uint16_t *)(r + b * 22));
    } else if constexpr (T == RF_TYPE_Q5_1) { /* d, m, qh, 16 bytes of nibbles: 4-byte aligned */
        const uint32_t qh = *(const uint32_t *)(r + b * 24 + 4), q = *(const uint32_t *)(rt + b * 24 + 8);
        lo = (q & 0x0F0F0F0Fu) | (uint32_t)rf_qh4(qh, 4 * t), hi = ((q >> 4) & 0x0F0F0F0Fu) | (uint32_t)rf_qh4(qh, 16 + 4 * t);
        d = rf_h2f_bits(*(const uint16_t *)(r + b * 24)), cm = rf_h2f_bits(*(const uint16_t *)(r + b * 24 + 2));
    } else if constexpr (T == RF_TYPE_Q8_0) {
        lo = rf_mt_word(rt, b * 34 + 2), hi = rf_mt_word(rt, b * 34 + 18);
        d = rf_h2f_bits(*(const uint16_t *)(r + b * 34));
    } else if constexpr (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K) {
        /* sub-block b: nibble b % 2 of qs bytes 32 (b / 2) + l; Q5_K: bit b of qh byte l */
        constexpr int QS = T == RF_TYPE_Q4_K ? 16 : 48;
        const int sh = 4 * (b % 2);
        lo = (*(const uint32_t *)(rt + QS + 32 * (b / 2)) >> sh) & 0x0F0F0F0Fu;
        hi = (*(const uint32_t *)(rt + QS + 32 * (b / 2) + 16) >> sh) & 0x0F0F0F0Fu;
        if (T == RF_TYPE_Q5_K) {
            lo |= ((*(const uint32_t *)(rt + 16) >> b) & 0x01010101u) << 4;
            hi |= ((*(const uint32_t *)(rt + 32) >> b) & 0x01010101u) << 4;
        }
        int sc, m;
        rf_k4_sm(b, r + 4, &sc, &m);
        const float dd = rf_h2f_bits(*(const uint16_t *)r), dmin = rf_h2f_bits(*(const uint16_t *)(r + 2));
        constexpr float C = T == RF_TYPE_Q4_K ? 8.0f : 16.0f;
        d = dd * rf_mt_unbias(sc + RF_MT_MAGIC); /* (float)sc, (float)m: 0..63 */
        cm = C * d - dmin * rf_mt_unbias(m + RF_MT_MAGIC);
    } else { /* Q6_K: block b = 8 s + 4 hh + kk of super-block s (at byte 210 s) */
        const int s = b / 8, hh = b % 8 / 4, kk = b % 4, o = 210 * s;
        const uint32_t l0 = rf_mt_word(rt, o + 64 * hh + 32 * (kk & 1));
        const uint32_t l1 = rf_mt_word(rt, o + 64 * hh + 32 * (kk & 1) + 16);
        const uint32_t h0 = rf_mt_word(rt, o + 128 + 32 * hh), h1 = rf_mt_word(rt, o + 128 + 32 * hh + 16);
        const int ls = 4 * (kk >> 1), hs = 2 * kk;
        lo = ((l0 >> ls) & 0x0F0F0F0Fu) | (((h0 >> hs) & 0x03030303u) << 4);
        hi = ((l1 >> ls) & 0x0F0F0F0Fu) | (((h1 >> hs) & 0x03030303u) << 4);
        const uint32_t sw = rf_mt_word(r, o + 192 + 8 * hh + 2 * kk);
        sc0 = (int)(int8_t)(sw & 0xFFu), sc1 = (int)(int8_t)((sw >> 8) & 0xFFu);
        d = rf_h2f_bits((uint16_t)(rf_mt_word(r, o + 208) & 0xFFFFu));
    }
}

/* One block b of the chunk, rows g, g + 8 (ra, rb) against NF fragments of 8 tokens: x words t
 * and 4 + t of token g of each fragment at sx (fragment stride 8 XT), records of tokens 2t,
 * 2t + 1 at sr (fragment stride 8 RS); acc[nf][i]: rows g (i < 2), g + 8 by tokens 2t, 2t + 1
 * += d_w d_x s (+ cm * the record's sum of x for Q4_K / Q5_K, Q4_1 / Q5_1). Fragments wholly
 * past the call's tokens (nf >= nfa) are skipped. */
template <int T, int NF, int XT, int RS>
static __device__ __forceinline__ void rf_mt_block(float (*acc)[4], const uint8_t *ra, const uint8_t *rb, const uint8_t *sx,
                                                   const uint8_t *sr, int t, int b, int nfa) {
    using F = rf_mt_fmt<T>;
    uint32_t A[4];
    float D[2], CM[2] = {0.0f, 0.0f};
    int SC[2][2] = {{0, 0}, {0, 0}};
    rf_mt_row<T>(ra, t, b, A[0], A[2], D[0], CM[0], SC[0][0], SC[0][1]);
    rf_mt_row<T>(rb, t, b, A[1], A[3], D[1], CM[1], SC[1][0], SC[1][1]);
#pragma unroll
    for (int nf = 0; nf < NF; nf++) {
        if (nf >= nfa) break;
        const uint8_t *xp = sx + nf * 8 * XT + b * 32 + 4 * t;
        const int X[2] = {*(const int *)xp, *(const int *)(xp + 16)};
        const uint8_t *q0 = sr + nf * 8 * RS + b * F::REC, *q1 = q0 + RS;
        const float dx0 = *(const float *)q0, dx1 = *(const float *)q1;
        const int sx0 = *(const int *)(q0 + 4), sx1 = *(const int *)(q1 + 4);
        int s[4];
        if constexpr (T == RF_TYPE_Q6_K) { /* per 16-element half: its scale, centre 32 in c */
            const int lo0 = *(const int *)(q0 + 12), lo1 = *(const int *)(q1 + 12);
            int sl[4], sh[4];
            rf_mt_k16u(sl, A[0], A[1], X[0], -32 * lo0, -32 * lo1);
            rf_mt_k16u(sh, A[2], A[3], X[1], -32 * (sx0 - lo0), -32 * (sx1 - lo1));
#pragma unroll
            for (int i = 0; i < 4; i++) s[i] = SC[i / 2][0] * sl[i] + SC[i / 2][1] * sh[i];
        } else if constexpr (T == RF_TYPE_Q8_0) {
            rf_mt_k32<false>(s, A, X, RF_MT_MAGIC, RF_MT_MAGIC);
        } else if constexpr (T == RF_TYPE_Q4_1 || T == RF_TYPE_Q5_1) { /* q uncentred: the minimum takes m s */
            rf_mt_k32<true>(s, A, X, RF_MT_MAGIC, RF_MT_MAGIC);
        } else { /* q centred on C in exact integers: sum (q - C) x = sum q x - C sum x */
            constexpr int C = T == RF_TYPE_Q5_K || T == RF_TYPE_Q5_0 ? 16 : 8;
            rf_mt_k32<true>(s, A, X, RF_MT_MAGIC - C * sx0, RF_MT_MAGIC - C * sx1);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float fs = T == RF_TYPE_Q6_K ? (float)s[i] : rf_mt_unbias(s[i]); /* (float) of the sum */
            acc[nf][i] += D[i / 2] * (i % 2 ? dx1 : dx0) * fs;
            if constexpr (T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K || T == RF_TYPE_Q4_1 || T == RF_TYPE_Q5_1)
                acc[nf][i] += CM[i / 2] * *(const float *)((i % 2 ? q1 : q0) + 8);
        }
    }
}

/* Copies of stage s (chunks s KS .. s KS + KS - 1, those below nch) into the slot at shared
 * address so, by all threads of the block: the weights of the RB rows from r0 (rows past n_out
 * read the last row), or x and its records of BN tokens (tokens past nt read the last token). */
template <int T, int NF, int KS>
static __device__ __forceinline__ void rf_mt_issue_w(unsigned so, const uint8_t *w, int64_t row_bytes, int64_t r0,
                                                     int64_t n_out, int s, int nch) {
    using F = rf_mt_fmt<T>;
    using L = rf_mt_tile<T, NF, KS>;
    constexpr int CW = F::CW, N = KS * L::RB * CW;
    static_assert(16 * CW >= F::CB + (F::CB % 16 ? 12 : 0) && 16 * CW <= F::SROW, "the copies cover any chunk");
#pragma unroll 4
    for (int i = threadIdx.x; i < N; i += RF_MT_NW * 32) {
        const int kc = i / (L::RB * CW), row = i / CW % L::RB, col = i % CW, c = s * KS + kc;
        if (c >= nch) continue;
        const int64_t r = r0 + row < n_out ? r0 + row : n_out - 1;
        const uint8_t *src = w + r * row_bytes + (int64_t)c * F::CB - rf_mt_off<T>(c) + col * 16;
        rf_cp_async16_s(so + (unsigned)((kc * L::RB + row) * F::SROW + col * 16), src);
    }
}
template <int T, int NF, int KS>
static __device__ __forceinline__ void rf_mt_issue_x(unsigned so, const int8_t *qx, const uint8_t *rec, int nt,
                                                     int64_t n_in, int s, int nch) {
    using F = rf_mt_fmt<T>;
    using L = rf_mt_tile<T, NF, KS>;
    constexpr int XW = F::KB * 2, RW = F::KB * F::REC / 16; /* 16-byte copies per token and chunk */
    const int64_t nb = n_in / 32;
#pragma unroll
    for (int i = threadIdx.x; i < KS * L::BN * XW; i += RF_MT_NW * 32) {
        const int kc = i / (L::BN * XW), n = i / XW % L::BN, cc = i % XW, c = s * KS + kc;
        const int tok = n < nt ? n : nt - 1;
        if (c < nch)
            rf_cp_async16_s(so + (unsigned)(L::XO + (kc * L::BN + n) * L::XT + cc * 16),
                            qx + tok * n_in + (int64_t)c * F::KB * 32 + cc * 16);
    }
#pragma unroll
    for (int i = threadIdx.x; i < KS * L::BN * RW; i += RF_MT_NW * 32) {
        const int kc = i / (L::BN * RW), n = i / RW % L::BN, cc = i % RW, c = s * KS + kc;
        const int tok = n < nt ? n : nt - 1;
        if (c < nch)
            rf_cp_async16_s(so + (unsigned)(L::RO + (kc * L::BN + n) * L::RS + cc * 16),
                            rec + (tok * nb + (int64_t)c * F::KB) * F::REC + cc * 16);
    }
}

/* A 16-byte copy that reads nothing and zero-fills where v is false (cp.async's src-size 0) */
static __device__ __forceinline__ void rf_mt_cp16(unsigned s, const void *gmem, bool v) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(v ? 16 : 0) : "memory");
#else
    (void)s, (void)gmem, (void)v;
    RF_DEVICE_TRAP();
#endif
}

/* The copy plan: what this thread copies of every stage, worked out once. The index arithmetic of
 * rf_mt_issue_w / _x (divisions by 9, 17, 27 pieces, 64-bit products per 16 bytes) took ~30
 * instructions per copy, as many per stage as the products themselves (Q4_0: ~190 against ~300
 * per warp); here a stage costs a few adds and one instruction per copy. The same bytes land in
 * the same places (the outputs do not change), except that x of tokens past nt is zero-filled
 * instead of read again from the last token (those columns are never stored; the repeated reads
 * of one token's lines made 2 tokens slower than 8). Weights: a team of 2 threads per row of a
 * chunk (KS RB = 128 of them: 256 threads), pieces h, h + 2, ...; x and records: a team of
 * PX = 256 / (KS BN) threads per (chunk, token), pieces h, h + PX, ... */
template <int T, int NF, int KS> struct rf_mt_plan {
    using F = rf_mt_fmt<T>;
    using L = rf_mt_tile<T, NF, KS>;
    static constexpr int PX = RF_MT_NW * 32 / (KS * L::BN), XW = F::KB * 2, RW = F::KB * F::REC / 16;
    static_assert(KS * L::RB * 2 == RF_MT_NW * 32 && PX * KS * L::BN == RF_MT_NW * 32, "teams cover the block");
    const uint8_t *ws, *xs, *rs; /* chunk 0's sources of this thread's first piece */
    unsigned wd, xd, rd;         /* their offsets in a slot */
    int wkc, xkc;                /* the chunks of a stage they belong to */
    int c0, c1;                  /* the block's chunks: stage s holds c0 + s KS .., those below c1 */
    bool xv;                     /* x of a token of the call (else zero-filled) */

    __device__ __forceinline__ rf_mt_plan(const uint8_t *w, int64_t row_bytes, int64_t r0, int64_t n_out,
                                          const int8_t *qx, const uint8_t *rec, int nt, int64_t n_in, int c0_, int c1_) {
        const int tid = threadIdx.x;
        c0 = c0_, c1 = c1_;
        const int q = tid / 2, h = tid % 2, row = q % L::RB;
        wkc = q / L::RB;
        const int64_t r = r0 + row < n_out ? r0 + row : n_out - 1; /* rows past n_out read the last */
        ws = w + r * row_bytes + (int64_t)wkc * F::CB + h * 16;
        wd = (unsigned)((wkc * L::RB + row) * F::SROW + h * 16);
        const int p = tid / PX, hx = tid % PX, n = p % L::BN;
        xkc = p / L::BN;
        xv = n < nt;
        const int tok = n < nt ? n : nt - 1;
        xs = (const uint8_t *)qx + tok * n_in + (int64_t)xkc * F::KB * 32 + hx * 16;
        xd = (unsigned)(L::XO + (xkc * L::BN + n) * L::XT + hx * 16);
        rs = rec + (tok * (n_in / 32) + (int64_t)xkc * F::KB) * F::REC + hx * 16;
        rd = (unsigned)(L::RO + (xkc * L::BN + n) * L::RS + hx * 16);
    }
    /* stage s's weights into the slot at shared address so (chunks at or past c1 skipped) */
    __device__ __forceinline__ void issue_w(unsigned so, int s) const {
        const int c = c0 + s * KS + wkc;
        if (c >= c1) return;
        const uint8_t *src = ws + (int64_t)(c0 + s * KS) * F::CB - rf_mt_off<T>(c);
        const int h = threadIdx.x % 2;
#pragma unroll
        for (int j = 0; j < (F::CW + 1) / 2; j++)
            if (h + 2 * j < F::CW) rf_cp_async16_s(so + wd + 32 * j, src + 32 * j);
    }
    /* stage s's x and records */
    __device__ __forceinline__ void issue_x(unsigned so, int s) const {
        if (c0 + s * KS + xkc >= c1) return;
        const int h = threadIdx.x % PX;
        const int64_t cs = c0 + s * KS;
        const uint8_t *xsrc = xs + cs * F::KB * 32, *rsrc = rs + cs * F::KB * F::REC;
#pragma unroll
        for (int j = 0; j < (XW + PX - 1) / PX; j++)
            if (h + PX * j < XW) rf_mt_cp16(so + xd + 16 * PX * j, xsrc + 16 * PX * j, xv);
#pragma unroll
        for (int j = 0; j < (RW + PX - 1) / PX; j++)
            if (h + PX * j < RW) rf_mt_cp16(so + rd + 16 * PX * j, rsrc + 16 * PX * j, xv);
    }
};

/* the cluster's barrier (sm_90: kernels launched with sk > 1 only there), every thread of every
 * block of the cluster: shared-memory writes before it are visible to the cluster's reads after */
static __device__ __forceinline__ void rf_mt_cluster_sync(void) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    RF_DEVICE_TRAP();
#endif
}
/* the float at local shared address a in block rank of the cluster */
static __device__ __forceinline__ float rf_mt_ld_cluster(unsigned a, int rank) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned ra;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    return v;
#else
    (void)a, (void)rank;
    RF_DEVICE_TRAP();
    return 0.0f;
#endif
}

/* The end of gemv_mt: the KS warps of each row fragment in each of the sk blocks of the cluster
 * hold partial sums of its outputs (acc: rows g, g + 8 by tokens 2t, 2t + 1 of each token
 * fragment); they are added in (block rank, ks) order through shared memory (red: the ring, free
 * once every copy has landed; other blocks' through the cluster's shared memory) and the tokens
 * < nt of rows < n_out stored to y [nt, n_out] by the rank-0 block. Every thread of the cluster
 * calls it. */
template <int NF, int KS, int WR>
static __device__ __forceinline__ void rf_mt_store(float (*acc)[4], float *red, float *y, int nt, int64_t r0,
                                                   int64_t n_out, int sk, int rank) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int wr = warp % WR, ks = warp / WR;
    if (KS > 1 || sk > 1) {
        rf_cp_async_wait<0>();
        __syncthreads(); /* every warp is past its last read of the ring */
#pragma unroll
        for (int nf = 0; nf < NF; nf++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[((warp * NF + nf) * 4 + i) * 32 + lane] = acc[nf][i];
        if (sk > 1) rf_mt_cluster_sync();
        else __syncthreads();
        const bool mine = ks == 0 && rank == 0;
        if (mine) {
#pragma unroll
            for (int nf = 0; nf < NF; nf++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float v = acc[nf][i];
                    for (int k = 1; k < KS; k++) v += red[(((k * WR + wr) * NF + nf) * 4 + i) * 32 + lane];
                    for (int q = 1; q < sk; q++)
                        for (int k = 0; k < KS; k++)
                            v += rf_mt_ld_cluster(rf_smem_addr(&red[(((k * WR + wr) * NF + nf) * 4 + i) * 32 + lane]), q);
                    acc[nf][i] = v;
                }
        }
        if (sk > 1) rf_mt_cluster_sync(); /* the other blocks' shared memory stays until it is read */
        if (!mine) return;
    }
#pragma unroll
    for (int nf = 0; nf < NF; nf++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t row = r0 + 16 * wr + g + 8 * (i / 2);
            const int tok = 8 * nf + 2 * t + i % 2;
            if (row < n_out && tok < nt) y[tok * n_out + row] = acc[nf][i];
        }
}

/* gemv_mt: y[t, o] = sum_i W[o, i] x[t, i] for the nt <= 8 NF tokens and the RB = 128 / KS rows
 * of blockIdx.x's tile. W: n_out rows of row_bytes in ggml's layout (n_in a multiple of 32 KB);
 * qx / rec: rf_k_quantize_x's x with GB = 1 (in order) and records of REC bytes. Warp (wr, ks) =
 * (warp % WR, warp / WR) owns rows 16 wr .. 16 wr + 15 (one m16 fragment) by all tokens (NF n8
 * fragments, those wholly past nt skipped) over chunks ks, ks + KS, ...: per 32-element block
 * one mma per fragment gives the exact int32 sum of q x (Q4_0 / Q5_0 / Q4_K / Q5_K: their centres
 * 8 / 16 / 8 / 16 taken off in the mma's c operand, which also adds the bias of rf_mt_unbias;
 * Q4_1 / Q5_1 uncentred, their minimum times q8_1's s added as the K-quants' cm term; Q6_K: two k16
 * products, one per 16-element half with its int8 scale, converted by the conversion unit: its
 * sums reach 2^24), scaled in f32 into register accumulators: y += d_w d_x s (Q4_K / Q5_K: + cm *
 * the record's sum, as the GEMV's rf_qk_dot and rf_q32_dot). The KS partial sums of an output are then added in
 * ks order (deterministic). With sk > 1 the sk blocks of a cluster share the tile, block rank q
 * taking the chunks [q per, (q + 1) per) (per: ceil(nch / (sk KS)) KS), and rank 0 adds the
 * partial sums in (rank, ks) order. An output's arithmetic does not depend on nt or on the
 * token's place: for a given KS and sk (chosen from the shape and device alone) a token's result
 * has the same bits in every call of 2..16 tokens. Stages (KS chunks of every row of the tile,
 * their x and records) go through a ring of ST slots shared by the block with cp.async, each
 * thread copying the same pieces of every stage (rf_mt_plan); the weights of the first stages are
 * requested before rf_pdl_wait() (W must not be written by work in flight), x after it. OLD: the
 * per-stage copies it had before the plan (tests' timing only, sk 1). launch: grid
 * ceil(n_out / RB) sk, clusters of sk (sm_90) where sk > 1, 256 threads,
 * rf_mt_tile<T, NF, KS>::SMEM bytes of dynamic shared memory. */
template <int T, int NF, int KS, bool OLD>
__global__ void __launch_bounds__(RF_MT_NW * 32, (rf_mt_tile<T, NF, KS>::MINB3 && !OLD) ? 3 : 2)
rf_k_gemv_mt(float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec, int nt, int64_t n_in, int64_t n_out,
             int64_t row_bytes, int sk) {
    using F = rf_mt_fmt<T>;
    using L = rf_mt_tile<T, NF, KS>;
    constexpr int ST = OLD ? L::ST_OLD : L::ST;
    static_assert(RF_WARP_SIZE == 32, "mma.sync: 32-lane warps");
    extern __shared__ __align__(16) uint8_t rf_mt_smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int wr = warp % L::WR, ks = warp / L::WR;
    const int rank = (int)(blockIdx.x % (unsigned)sk); /* the cluster's blocks split the row's chunks */
    const int64_t r0 = (int64_t)(blockIdx.x / (unsigned)sk) * L::RB;
    const int nch = (int)(n_in / 32 / F::KB), per = (nch + sk * KS - 1) / (sk * KS) * KS;
    const int c0 = rank * per < nch ? rank * per : nch, c1 = c0 + per < nch ? c0 + per : nch, nst = (c1 - c0 + KS - 1) / KS;
    const unsigned base = rf_smem_addr(rf_mt_smem);
    const rf_mt_plan<T, NF, KS> plan(w, row_bytes, r0, n_out, qx, rec, nt, n_in, c0, c1);
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nst) {
            if (OLD) rf_mt_issue_w<T, NF, KS>(base + s * L::BYTES, w, row_bytes, r0, n_out, s, nch);
            else plan.issue_w(base + s * L::BYTES, s);
        }
        rf_cp_async_commit();
    }
    rf_pdl_trigger();
    rf_pdl_wait();
#pragma unroll
    for (int s = 0; s < ST - 1; s++) { /* groups W0..W(ST-2), X0..X(ST-2), then W+X per stage:
                                        * at stage s, wait<ST - 2> leaves stage s landed */
        if (s < nst) {
            if (OLD) rf_mt_issue_x<T, NF, KS>(base + s * L::BYTES, qx, rec, nt, n_in, s, nch);
            else plan.issue_x(base + s * L::BYTES, s);
        }
        rf_cp_async_commit();
    }
    const int nfa = (nt + 7) / 8; /* token fragments holding any of the call's tokens */
    float acc[NF][4];
#pragma unroll
    for (int nf = 0; nf < NF; nf++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[nf][i] = 0.0f;
    for (int s = 0; s < nst; s++) {
        rf_cp_async_wait<ST - 2>();
        __syncthreads(); /* stage s visible to all; slot (s - 1) % ST read by all */
        const int sn = s + ST - 1;
        if (sn < nst) {
            const unsigned so = base + (unsigned)(sn % ST * L::BYTES);
            if (OLD) {
                rf_mt_issue_w<T, NF, KS>(so, w, row_bytes, r0, n_out, sn, nch);
                rf_mt_issue_x<T, NF, KS>(so, qx, rec, nt, n_in, sn, nch);
            } else {
                plan.issue_w(so, sn);
                plan.issue_x(so, sn);
            }
        }
        rf_cp_async_commit();
        if (c0 + s * KS + ks >= c1) continue; /* this warp's chunk lies past the block's */
        const uint8_t *sl = rf_mt_smem + s % ST * L::BYTES;
        const uint8_t *ra = sl + (ks * L::RB + 16 * wr + g) * F::SROW + rf_mt_off<T>(c0 + s * KS + ks), *rb = ra + 8 * F::SROW;
        const uint8_t *sx = sl + L::XO + (ks * L::BN + g) * L::XT, *sr = sl + L::RO + (ks * L::BN + 2 * t) * L::RS;
#pragma unroll
        for (int b = 0; b < F::KB; b++) rf_mt_block<T, NF, L::XT, L::RS>(acc, ra, rb, sx, sr, t, b, nfa);
    }
    rf_mt_store<NF, KS, L::WR>(acc, (float *)rf_mt_smem, y, nt, r0, n_out, sk, rank);
}

/* the device's shared memory one block may opt in to, asked once per GPU */
static int rf_mt_optin(const rf_gpu_ctx *ctx) {
    static int v[RF_GPU_MAX_DEVICES];
    const int d = ctx->device >= 0 && ctx->device < RF_GPU_MAX_DEVICES ? ctx->device : 0;
    if (!v[d]) {
        int x = 0;
        if (cudaDeviceGetAttribute(&x, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device) != cudaSuccess || x < 1) {
            (void)cudaGetLastError();
            x = 48 * 1024;
        }
        v[d] = x;
    }
    return v[d];
}
/* the shared memory of KS = ks, the larger of the 8- and 16-token tiles (their stage counts may
 * differ), so the choice of KS does not depend on the token count */
template <int T, int KS> static constexpr int rf_mt_smem_ks() {
    return rf_mt_tile<T, 1, KS>::SMEM > rf_mt_tile<T, 2, KS>::SMEM ? rf_mt_tile<T, 1, KS>::SMEM : rf_mt_tile<T, 2, KS>::SMEM;
}
template <int T> static int rf_mt_smem(int ks) {
    return ks == 1 ? rf_mt_smem_ks<T, 1>() : ks == 2 ? rf_mt_smem_ks<T, 2>() : ks == 4 ? rf_mt_smem_ks<T, 4>() : rf_mt_smem_ks<T, 8>();
}
/* Warps along the row (KS) for an n_out x n_in product: variants 27..30 force 1, 2, 4, 8;
 * otherwise the fewest whose grid (ceil(n_out / (128 / KS)) blocks) gives at least 7 in 8 SMs a
 * block (4096 rows: KS 4, 128 blocks on 132 SMs, where KS 8 would stage x for 16 rows only and
 * run 256 blocks of 186 KB in two waves; 14336 rows: KS 2), with at least two chunks per such
 * warp and the stages fitting the device. From the shape and device alone, never the token
 * count (a token's bits do not depend on the call's count). */
template <int T> static int rf_mt_ks(const rf_gpu_ctx *ctx, int64_t n_in, int64_t n_out) {
    const int64_t nch = n_in / 32 / rf_mt_fmt<T>::KB;
    const int optin = rf_mt_optin(ctx), v = ctx->gemv_variant;
    int ks = 1;
    if (v >= 27 && v <= 30) ks = 1 << (v - 27);
    else
        while (ks < 8 && 8 * ((n_out + 128 / ks - 1) / (128 / ks)) < 7 * (int64_t)ctx->info.sm_count && 4 * ks <= nch &&
               rf_mt_smem<T>(2 * ks) <= optin)
            ks *= 2;
    while (ks > 1 && rf_mt_smem<T>(ks) > optin) ks /= 2;
    return ks;
}

/* Blocks of a cluster splitting each row tile's chunks (sk, 1: no split) for KS warps along the
 * row: where the grid of ceil(n_out / (128 / KS)) tiles holds under 1.5 blocks per SM (4096 rows:
 * 128 tiles at KS 4, one block of 8 warps per SM; 6144: 192), the fewest of 2, 4 that give 1.75
 * per SM, each block keeping two stages or more; Hopper and later (clusters), never with the old
 * copies. From the shape, KS and the device alone: the order in which an output's partial sums
 * are added (block rank, then ks) does not depend on the token count. test_hooks gemv_mt_sk
 * forces it. */
template <int T> static int rf_mt_sk(const rf_gpu_ctx *ctx, int ks, int64_t n_in, int64_t n_out) {
    const rf_test_hooks *th = rf_test_hooks_get();
    if (th && th->gemv_mt_old_copies) return 1;
    if (ctx->info.cc_major < 9) return 1;
    if (th && th->gemv_mt_sk > 0) return th->gemv_mt_sk >= 4 ? 4 : th->gemv_mt_sk >= 2 ? 2 : 1;
    const int64_t nch = n_in / 32 / rf_mt_fmt<T>::KB, tiles = (n_out + 128 / ks - 1) / (128 / ks);
    const int64_t sms = ctx->info.sm_count;
    if (2 * tiles >= 3 * sms) return 1;
    int sk = 1;
    while (sk < 4 && 4 * tiles * sk < 7 * sms && nch >= 2 * ks * (2 * sk)) sk *= 2;
    return sk;
}

template <int T, int NF, int KS>
static rf_status rf_launch_mt_k(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec, int nt,
                                int64_t n_in, int64_t n_out, int64_t rb) {
    using L = rf_mt_tile<T, NF, KS>;
    const rf_test_hooks *th = rf_test_hooks_get(); /* tests only: the old copies, for timing */
    const bool old = th && th->gemv_mt_old_copies;
    auto kern = old ? rf_k_gemv_mt<T, NF, KS, true> : rf_k_gemv_mt<T, NF, KS, false>;
    static size_t attr[2][RF_GPU_MAX_DEVICES];
    const size_t smem = (size_t)(old ? L::SMEM_OLD : L::SMEM);
    const rf_status ast = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(kern), smem, 0, attr[old], "rf_k_gemv_mt");
    if (ast) return ast;
    const int sk = rf_mt_sk<T>(ctx, KS, n_in, n_out);
    const dim3 grid((unsigned)((n_out + L::RB - 1) / L::RB * sk)), block(RF_MT_NW * 32);
    if (sk == 1)
        return rf_gpu_launch(ctx, "rf_k_gemv_mt", true, kern, grid, block, smem, y, w, qx, rec, nt, n_in, n_out, rb, 1);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)sk, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = ctx->pdl ? 2 : 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, y, w, qx, rec, nt, n_in, n_out, rb, sk);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rf_set_error(RF_ERR_DEVICE, "GPU kernel rf_k_gemv_mt (clusters of %d): launch failed: %s", sk,
                            cudaGetErrorString(e));
    }
    return rf_gpu_after_launch(ctx, "rf_k_gemv_mt");
}
template <int T, int NF>
static rf_status rf_launch_mt_nf(rf_gpu_ctx *ctx, int ks, float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec,
                                 int nt, int64_t n_in, int64_t n_out, int64_t rb) {
    switch (ks) {
    case 1: return rf_launch_mt_k<T, NF, 1>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case 2: return rf_launch_mt_k<T, NF, 2>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case 4: return rf_launch_mt_k<T, NF, 4>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    default: return rf_launch_mt_k<T, NF, 8>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    }
}
template <int T>
static rf_status rf_launch_mt(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec, int nt,
                              int64_t n_in, int64_t n_out, int64_t rb) {
    const int ks = rf_mt_ks<T>(ctx, n_in, n_out);
    if (nt <= 8) return rf_launch_mt_nf<T, 1>(ctx, ks, y, w, qx, rec, nt, n_in, n_out, rb);
    return rf_launch_mt_nf<T, 2>(ctx, ks, y, w, qx, rec, nt, n_in, n_out, rb);
}

bool rf_gemv_mt_ok(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in) {
    if (ctx->info.cc_major < 8 || n_in < 256) return false;
    const int optin = rf_mt_optin(ctx);
    switch (t) { /* whole chunks, and the 16-token stages of one warp per row fit the device */
    case RF_TYPE_Q4_0: return n_in % 256 == 0 && rf_mt_smem<RF_TYPE_Q4_0>(1) <= optin;
    case RF_TYPE_Q4_1: return n_in % 256 == 0 && rf_mt_smem<RF_TYPE_Q4_1>(1) <= optin;
    case RF_TYPE_Q5_0: return n_in % 256 == 0 && rf_mt_smem<RF_TYPE_Q5_0>(1) <= optin;
    case RF_TYPE_Q5_1: return n_in % 256 == 0 && rf_mt_smem<RF_TYPE_Q5_1>(1) <= optin;
    case RF_TYPE_Q8_0: return n_in % 256 == 0 && rf_mt_smem<RF_TYPE_Q8_0>(1) <= optin;
    case RF_TYPE_Q4_K: return n_in % 256 == 0 && rf_mt_smem<RF_TYPE_Q4_K>(1) <= optin;
    case RF_TYPE_Q5_K: return n_in % 256 == 0 && rf_mt_smem<RF_TYPE_Q5_K>(1) <= optin;
    case RF_TYPE_Q6_K: return n_in % 2048 == 0 && rf_mt_smem<RF_TYPE_Q6_K>(1) <= optin; /* rows of whole words */
    default: return false;
    }
}

int rf_gemv_mt_warps_per_row(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n_out) {
    switch (t) {
    case RF_TYPE_Q4_0: return rf_mt_ks<RF_TYPE_Q4_0>(ctx, n_in, n_out);
    case RF_TYPE_Q4_1: return rf_mt_ks<RF_TYPE_Q4_1>(ctx, n_in, n_out);
    case RF_TYPE_Q5_0: return rf_mt_ks<RF_TYPE_Q5_0>(ctx, n_in, n_out);
    case RF_TYPE_Q5_1: return rf_mt_ks<RF_TYPE_Q5_1>(ctx, n_in, n_out);
    case RF_TYPE_Q8_0: return rf_mt_ks<RF_TYPE_Q8_0>(ctx, n_in, n_out);
    case RF_TYPE_Q4_K: return rf_mt_ks<RF_TYPE_Q4_K>(ctx, n_in, n_out);
    case RF_TYPE_Q5_K: return rf_mt_ks<RF_TYPE_Q5_K>(ctx, n_in, n_out);
    default: return rf_mt_ks<RF_TYPE_Q6_K>(ctx, n_in, n_out);
    }
}

rf_status rf_gemv_launch_mt(rf_gpu_ctx *ctx, rf_type t, float *y, const uint8_t *w, const void *xq, int nt,
                            int64_t n_in, int64_t n_out, int64_t rb) {
    const size_t n = (size_t)nt * (size_t)n_in;
    const int8_t *qx = (const int8_t *)xq;
    const uint8_t *rec = (const uint8_t *)xq + ((n + 255) & ~(size_t)255); /* rf_gpu_xq_bytes' layout */
    switch (t) {
    case RF_TYPE_Q4_0: return rf_launch_mt<RF_TYPE_Q4_0>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case RF_TYPE_Q4_1: return rf_launch_mt<RF_TYPE_Q4_1>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case RF_TYPE_Q5_0: return rf_launch_mt<RF_TYPE_Q5_0>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case RF_TYPE_Q5_1: return rf_launch_mt<RF_TYPE_Q5_1>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case RF_TYPE_Q8_0: return rf_launch_mt<RF_TYPE_Q8_0>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case RF_TYPE_Q4_K: return rf_launch_mt<RF_TYPE_Q4_K>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case RF_TYPE_Q5_K: return rf_launch_mt<RF_TYPE_Q5_K>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case RF_TYPE_Q6_K: return rf_launch_mt<RF_TYPE_Q6_K>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    default: return rf_set_error(RF_ERR_INVALID_ARG, "rf_gemv_launch_mt: weight type %d", (int)t);
    }
}

#endif
