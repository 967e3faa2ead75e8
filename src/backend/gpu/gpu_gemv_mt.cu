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
 * on distinct banks) and the records (per token KB records plus 16). ST: the format's stages
 * (2 where they do not fit); DEEP (grids of one block an SM at most, where nothing else shares
 * the SM's shared memory): as many as fit, up to RF_MT_DEEP, so that more of the row is in flight
 * while the block's 8 warps decode (two stages fewer took the 4096-row Q4_0 product at 12 tokens
 * from 27 to 39 us). The results do not depend on ST. */
#define RF_MT_DEEP 8
template <int T, int NF, int KS, bool DEEP = false> struct rf_mt_tile {
    using F = rf_mt_fmt<T>;
    static constexpr int WR = RF_MT_NW / KS, RB = 16 * WR, BN = 8 * NF;
    static constexpr int XT = F::KB * 32 + 16, RS = F::KB * F::REC + 16;
    static constexpr int XO = KS * RB * F::SROW + 16, RO = XO + KS * BN * XT;
    static constexpr int BYTES = RO + KS * BN * RS;
    static constexpr int STD = RF_MT_SMEM_MAX / BYTES < RF_MT_DEEP ? RF_MT_SMEM_MAX / BYTES : RF_MT_DEEP;
    static constexpr int ST = DEEP && STD > F::ST ? STD : F::ST * BYTES <= RF_MT_SMEM_MAX ? F::ST : 2;
    static constexpr int SMEM = ST * BYTES;
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
 * += d_w d_x s (+ cm * the record's sum of x for Q4_K / Q5_K, Q4_1 / Q5_1). Every fragment holds
 * some of the call's tokens (NF 1 up to 8 tokens, 2 from 9): no guard, which would keep the two
 * mma of NF 2 from overlapping (rf_mmq_mma's note). */
template <int T, int NF, int XT, int RS>
static __device__ __forceinline__ void rf_mt_block(float (*acc)[4], const uint8_t *ra, const uint8_t *rb, const uint8_t *sx,
                                                   const uint8_t *sr, int t, int b) {
    using F = rf_mt_fmt<T>;
    uint32_t A[4];
    float D[2], CM[2] = {0.0f, 0.0f};
    int SC[2][2] = {{0, 0}, {0, 0}};
    rf_mt_row<T>(ra, t, b, A[0], A[2], D[0], CM[0], SC[0][0], SC[0][1]);
    rf_mt_row<T>(rb, t, b, A[1], A[3], D[1], CM[1], SC[1][0], SC[1][1]);
#pragma unroll
    for (int nf = 0; nf < NF; nf++) {
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

/* A stage's copies of one operand, planned once per thread. The stage's bytes are R rows by P
 * 16-byte pieces: KS chunks of PC pieces each, chunk kc of row r landing at shared offset
 * kc CSTR + r RSTR and read from the row's bytes at chunk c = s KS + kc (c CB, less Q6_K's
 * realignment: CB = 16 PC in every other format). Copy j of thread tid is piece i = tid + 256 j
 * in row-major order (a warp's copies run along a row's contiguous bytes), its offsets worked
 * out once, so a stage's copy costs an add and a compare, where working out (chunk, row, piece)
 * from i at every stage cost ~25 instructions a copy: about a third of the kernel's instructions
 * at 8 tokens. */
template <int T, int KS, int R, int P, int PC, int CB, int RSTR, int CSTR> struct rf_mt_plan {
    static constexpr int NT = RF_MT_NW * 32, NJ = (R * P + NT - 1) / NT;
    /* Q6_K's realignment depends on the chunk past the stage's first only when KS is not a
     * multiple of 4 (420 = 4 mod 16): else it is folded into off at make */
    static constexpr bool REAL = CB % 16 != 0 && KS % 4 != 0;
    /* P dividing the thread count (x and its records): copy j is copy 0 NT / P rows further
     * down, so one copy's offsets serve them all (registers: the 16-token Q6_K tile spilled) */
    static constexpr bool AFF = NT % P == 0;
    static constexpr int NA = AFF ? 1 : NJ, DR = AFF ? NT / P : 0;
    int off[NA];          /* copy j's byte past the operand's base at stage 0 (before realignment if REAL) */
    int lim[NA];          /* copy j is made at stages s with s KS < lim[j] (nch - its chunk; 0: never) */
    int kc[REAL ? NA : 1]; /* copy j's chunk in the stage (REAL only) */
    unsigned dst[NA];     /* copy j's shared offset in a slot */
    int ostep, nj;        /* AFF: off from one copy to the next; copies j < nj are made */
    /* row(i): the plan's row i as a row past the base, clamped by the caller's rule; rows from
     * nrows on are not copied at all (x of tokens past the call's: their slots keep whatever they
     * held, and only their own outputs, never stored, read them; copying the last token there
     * instead made every block read the same lines several times over: gemv_mt at 4 tokens took
     * 1.4x its time at 8). Offsets are 32-bit (rf_gemv_mt_ok bounds R rows of a row below 2^31). */
    template <typename F> __device__ __forceinline__ void make(int64_t stride, int nch, int nrows, F row) {
#pragma unroll
        for (int j = 0; j < NA; j++) {
            const int i = (int)threadIdx.x + NT * j, r = i / P, p = i % P, c = p / PC, col = p % PC;
            const bool ok = i < R * P && r < nrows;
            off[j] = ok ? (int)(row(r) * stride) + c * CB + col * 16 - (CB % 16 && !REAL ? rf_mt_off<T>(c) : 0) : 0;
            lim[j] = ok ? nch - c : 0;
            if constexpr (REAL) kc[j] = c;
            dst[j] = (unsigned)(c * CSTR + r * RSTR + col * 16);
        }
        if constexpr (AFF) {
            const int r = (int)threadIdx.x / P, rl = nrows < R ? nrows : R;
            ostep = (int)(DR * stride);
            nj = r < rl ? (rl - r + DR - 1) / DR : 0;
        }
    }
    /* the copies of stage s from the operand at base into the slot at shared address so */
    __device__ __forceinline__ void issue(unsigned so, const uint8_t *base, int s) const {
        const int sk = s * KS;
        const uint8_t *sp = base + sk * CB; /* once a stage: each copy adds a 32-bit offset */
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int a = AFF ? 0 : j;
            if (AFF ? j >= nj || sk >= lim[0] : sk >= lim[a]) continue;
            int o = off[a] + (AFF ? j * ostep : 0);
            if constexpr (REAL) o -= rf_mt_off<T>(sk + kc[a]);
            rf_cp_async16_s(so + dst[a] + (unsigned)(j * DR * RSTR), sp + o);
        }
    }
};

/* The three plans of a tile: the weights of the RB rows from r0 (rows past n_out read the last),
 * x of the call's tokens and their records (tokens past nt not copied). */
template <int T, int NF, int KS> struct rf_mt_plans {
    using F = rf_mt_fmt<T>;
    using L = rf_mt_tile<T, NF, KS>;
    static constexpr int XW = F::KB * 2, RW = F::KB * F::REC / 16; /* 16-byte pieces per token and chunk */
    rf_mt_plan<T, KS, L::RB, KS * F::CW, F::CW, F::CB, F::SROW, L::RB * F::SROW> w;
    rf_mt_plan<T, KS, L::BN, KS * XW, XW, XW * 16, L::XT, L::BN * L::XT> x;
    rf_mt_plan<T, KS, L::BN, KS * RW, RW, RW * 16, L::RS, L::BN * L::RS> r;
};

/* The end of gemv_mt: the KS warps of each row fragment hold partial sums of its outputs (acc:
 * rows g, g + 8 by tokens 2t, 2t + 1 of each token fragment); they are added in ks order
 * through shared memory (red: the ring, free once every copy has landed) and the tokens < nt of
 * rows < n_out stored to y [nt, n_out]. Every thread of the block calls it. */
template <int NF, int KS, int WR>
static __device__ __forceinline__ void rf_mt_store(float (*acc)[4], float *red, float *y, int nt, int64_t r0,
                                                   int64_t n_out) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int wr = warp % WR, ks = warp / WR;
    if (KS > 1) {
        rf_cp_async_wait<0>();
        __syncthreads(); /* every warp is past its last read of the ring */
#pragma unroll
        for (int nf = 0; nf < NF; nf++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[((warp * NF + nf) * 4 + i) * 32 + lane] = acc[nf][i];
        __syncthreads();
        if (ks != 0) return;
#pragma unroll
        for (int nf = 0; nf < NF; nf++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float v = acc[nf][i];
                for (int k = 1; k < KS; k++) v += red[(((k * WR + wr) * NF + nf) * 4 + i) * 32 + lane];
                acc[nf][i] = v;
            }
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
 * fragments) over chunks ks, ks + KS, ...: per 32-element block
 * one mma per fragment gives the exact int32 sum of q x (Q4_0 / Q5_0 / Q4_K / Q5_K: their centres
 * 8 / 16 / 8 / 16 taken off in the mma's c operand, which also adds the bias of rf_mt_unbias;
 * Q4_1 / Q5_1 uncentred, their minimum times q8_1's s added as the K-quants' cm term; Q6_K: two k16
 * products, one per 16-element half with its int8 scale, converted by the conversion unit: its
 * sums reach 2^24), scaled in f32 into register accumulators: y += d_w d_x s (Q4_K / Q5_K: + cm *
 * the record's sum, as the GEMV's rf_qk_dot and rf_q32_dot). The KS partial sums of an output are then added in
 * ks order (deterministic). An output's arithmetic does not depend on nt or on the token's place:
 * for a given KS (chosen from the shape and device alone) a token's result has the same bits in
 * every call of 2..16 tokens. Stages (KS chunks of every row of the tile, their x and records)
 * go through a ring of ST slots shared by the block with cp.async; the weights of the first
 * stages are requested before rf_pdl_wait() (W must not be written by work in flight), x after
 * it. launch: grid ceil(n_out / RB), 256 threads, rf_mt_tile<T, NF, KS>::SMEM bytes of dynamic
 * shared memory. */
template <int T, int NF, int KS, bool DEEP>
__global__ void __launch_bounds__(RF_MT_NW * 32, 2) /* 128 registers: ptxas's own choice of 80 spilled Q5_1 */
rf_k_gemv_mt(float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec, int nt, int64_t n_in, int64_t n_out,
             int64_t row_bytes) {
    using F = rf_mt_fmt<T>;
    using L = rf_mt_tile<T, NF, KS, DEEP>;
    constexpr int ST = L::ST;
    static_assert(RF_WARP_SIZE == 32, "mma.sync: 32-lane warps");
    extern __shared__ __align__(16) uint8_t rf_mt_smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int wr = warp % L::WR, ks = warp / L::WR;
    const int64_t r0 = (int64_t)blockIdx.x * L::RB;
    const int nch = (int)(n_in / 32 / F::KB), nst = (nch + KS - 1) / KS;
    const unsigned base = rf_smem_addr(rf_mt_smem);
    rf_mt_plans<T, NF, KS> pl;
    const uint8_t *wb = w + r0 * row_bytes; /* the tile's first row */
    pl.w.make(row_bytes, nch, L::RB, [&](int i) { return (r0 + i < n_out ? r0 + i : n_out - 1) - r0; });
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nst) pl.w.issue(base + s * L::BYTES, wb, s);
        rf_cp_async_commit();
    }
    rf_pdl_trigger();
    rf_pdl_wait();
    const auto tok = [&](int i) { return (int64_t)(i < nt ? i : nt - 1); };
    pl.x.make(n_in, nch, nt, tok);
    pl.r.make(n_in / 32 * F::REC, nch, nt, tok);
#pragma unroll
    for (int s = 0; s < ST - 1; s++) { /* groups W0..W(ST-2), X0..X(ST-2), then W+X per stage:
                                        * at stage s, wait<ST - 2> leaves stage s landed */
        if (s < nst) {
            pl.x.issue(base + s * L::BYTES + L::XO, (const uint8_t *)qx, s);
            pl.r.issue(base + s * L::BYTES + L::RO, rec, s);
        }
        rf_cp_async_commit();
    }
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
            pl.w.issue(so, wb, sn);
            pl.x.issue(so + L::XO, (const uint8_t *)qx, sn);
            pl.r.issue(so + L::RO, rec, sn);
        }
        rf_cp_async_commit();
        if (s * KS + ks >= nch) continue; /* this warp's chunk lies past the row */
        const uint8_t *sl = rf_mt_smem + s % ST * L::BYTES;
        const uint8_t *ra = sl + (ks * L::RB + 16 * wr + g) * F::SROW + rf_mt_off<T>(s * KS + ks), *rb = ra + 8 * F::SROW;
        const uint8_t *sx = sl + L::XO + (ks * L::BN + g) * L::XT, *sr = sl + L::RO + (ks * L::BN + 2 * t) * L::RS;
#pragma unroll
        for (int b = 0; b < F::KB; b++) rf_mt_block<T, NF, L::XT, L::RS>(acc, ra, rb, sx, sr, t, b);
    }
    rf_mt_store<NF, KS, L::WR>(acc, (float *)rf_mt_smem, y, nt, r0, n_out);
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
    const int optin = (int)rf_gpu_smem_optin(ctx), v = ctx->gemv_variant;
    int ks = 1;
    if (v >= 27 && v <= 30) ks = 1 << (v - 27);
    else
        while (ks < 8 && 8 * ((n_out + 128 / ks - 1) / (128 / ks)) < 7 * (int64_t)ctx->info.sm_count && 4 * ks <= nch &&
               rf_mt_smem<T>(2 * ks) <= optin)
            ks *= 2;
    while (ks > 1 && rf_mt_smem<T>(ks) > optin) ks /= 2;
    return ks;
}

template <int T, int NF, int KS, bool DEEP>
static rf_status rf_launch_mt_k(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec, int nt,
                                int64_t n_in, int64_t n_out, int64_t rb) {
    using L = rf_mt_tile<T, NF, KS, DEEP>;
    auto kern = rf_k_gemv_mt<T, NF, KS, DEEP>;
    static size_t attr[RF_GPU_MAX_DEVICES];
    const rf_status ast = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(kern), (size_t)L::SMEM, 0, attr, "rf_k_gemv_mt");
    if (ast) return ast;
    return rf_gpu_launch(ctx, "rf_k_gemv_mt", true, kern, dim3((unsigned)((n_out + L::RB - 1) / L::RB)),
                         dim3(RF_MT_NW * 32), (size_t)L::SMEM, y, w, qx, rec, nt, n_in, n_out, rb);
}
/* KS 4 and 8 (the shapes of few rows), tiles of 8 tokens: the deep ring where the grid is one
 * block an SM at most and it fits the device (test hook gpu_mt_shallow: never, for a side-by-side
 * timing). Only where the deep tile has more stages than the format's (Q6_K: 2 either way).
 * 16-token tiles keep theirs: deep, llama3-8b Q4_0 / Q8_0 at 16 sequences lost 0.9% / 0.4%
 * (H200), where 4 and 8 sequences of Q4_0 gained 9%. Not Q8_0: its 8-sequence step lost 1.7-1.8%
 * in two runs (three stages of its rows already hold more bytes than Q4_0's six). */
template <int T, int NF, int KS>
static rf_status rf_launch_mt_ring(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec,
                                   int nt, int64_t n_in, int64_t n_out, int64_t rb) {
    using D = rf_mt_tile<T, NF, KS, true>;
    if constexpr (NF == 1 && KS >= 4 && T != RF_TYPE_Q8_0 && D::ST > rf_mt_tile<T, NF, KS>::ST) {
        const rf_test_hooks *th = rf_test_hooks_get();
        if (!(th && th->gpu_mt_shallow) && (n_out + D::RB - 1) / D::RB <= ctx->info.sm_count &&
            D::SMEM <= (int)rf_gpu_smem_optin(ctx))
            return rf_launch_mt_k<T, NF, KS, true>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    }
    return rf_launch_mt_k<T, NF, KS, false>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
}
template <int T, int NF>
static rf_status rf_launch_mt_nf(rf_gpu_ctx *ctx, int ks, float *y, const uint8_t *w, const int8_t *qx, const uint8_t *rec,
                                 int nt, int64_t n_in, int64_t n_out, int64_t rb) {
    switch (ks) {
    case 1: return rf_launch_mt_ring<T, NF, 1>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case 2: return rf_launch_mt_ring<T, NF, 2>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    case 4: return rf_launch_mt_ring<T, NF, 4>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
    default: return rf_launch_mt_ring<T, NF, 8>(ctx, y, w, qx, rec, nt, n_in, n_out, rb);
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
    /* n_in <= 2^22: a tile's 128 rows of at most 34/32 bytes an element stay below 2^31 bytes
     * (rf_mt_plan's 32-bit offsets) */
    if (ctx->info.cc_major < 8 || n_in < 256 || n_in > ((int64_t)1 << 22)) return false;
    const int optin = (int)rf_gpu_smem_optin(ctx);
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
