/* quant/vec_dot_vnni.c — AVX-VNNI (VEX `vpdpbusd`, CPUID.(7,1):EAX[4]) dot kernels for Q4_0, Q4_1
 * and Q8_0 x their activation types. Compiled per function with __attribute__((target)); type_table.c
 * selects them only when the CPU has AVX2+FMA+F16C and AVX-VNNI (rf_cpu_has_avxvnni) and RF_NO_SIMD
 * is unset. vec_dot_vnni512.c compiles this same file again with RF_VNNI_EVEX for CPUs that have
 * the EVEX form instead (AVX512-VNNI + VL, 256-bit vectors): same instructions, same bits, *_vnni512
 * names. Same contracts as vec_dot.c. The integer block sums are exact for any int8 input (the
 * unsigned x signed `vpdpbusd` with an offset correction, no sign trick). The float steps are
 * ggml's x86 order (one fma chain over the blocks in order, Q4_1's m*s summed in order in a scalar)
 * and the same as vec_dot_avx2.c's, so results are bit-identical to the AVX2 kernels and to
 * llama.cpp's: two accumulators were 3-5 % faster but broke the engine's bit-match with llama.cpp
 * (tests/unit/test_model_golden.c). */
#include "quant/quant_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

#ifndef RF_VNNI_EVEX
/* AVX-VNNI: CPUID leaf 7 subleaf 1, EAX bit 4. Callers also require rf_cpu_has_avx2() (OS YMM state). */
bool rf_cpu_has_avxvnni(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 4) & 1u;
}
#endif

#ifndef RF_VNNI_EVEX
#define RF_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define VN(f) f##_vnni
#define RF_DPBUSD _mm256_dpbusd_avx_epi32
#else
#define RF_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define VN(f) f##_vnni512
#define RF_DPBUSD _mm256_dpbusd_epi32
#endif

RF_VNNI static inline float vn_hsum_ps(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

RF_VNNI static inline float vn_h2f(uint16_t h) { return _cvtsh_ss(h); }

static inline int ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return (int)v;
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31). */
RF_VNNI static inline __m256i vn_nibbles_32(const uint8_t *p, __m256i m4) {
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m4);
}

/* d(a0)*d(b0) and d(a1)*d(b1) of two blocks as broadcast vectors: one vcvtph2ps for the four f16
 * scales (the product is the same single f32 rounding as the scalar kernel's). */
RF_VNNI static inline void vn_scales2(uint16_t a0, uint16_t b0, uint16_t a1, uint16_t b1, __m256 *d0, __m256 *d1) {
    __m128i h = _mm_cvtsi32_si128((int)((uint32_t)a0 | (uint32_t)b0 << 16));
    h = _mm_insert_epi32(h, (int)((uint32_t)a1 | (uint32_t)b1 << 16), 1);
    __m128 f = _mm_cvtph_ps(h); /* [a0 b0 a1 b1] */
    __m128 p = _mm_mul_ps(f, _mm_permute_ps(f, _MM_SHUFFLE(2, 3, 0, 1)));
    *d0 = _mm256_broadcastss_ps(p);
    *d1 = _mm256_broadcastss_ps(_mm_movehl_ps(p, p));
}

/* sum over 4-byte groups of u8(a) * i8(b) into 8 int32 lanes (exact: |sum| <= 4*255*128) */
#define DPB(a, b) RF_DPBUSD(_mm256_setzero_si256(), (a), (b))

/* Q4_0 x Q8_0: sum (q-8)*y = sum q*y - 8*sum y, both with vpdpbusd (q in 0..15 unsigned). */
RF_VNNI void VN(rf_vec_dot_q4_0)(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_0 *a = w;
    const rf_block_q8_0 *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), k8 = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps();
    const int64_t nb = n / 32;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256 d0, d1;
        vn_scales2(a[i].d, b[i].d, a[i + 1].d, b[i + 1].d, &d0, &d1);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i y1 = _mm256_loadu_si256((const __m256i *)b[i + 1].qs);
        __m256i s0 = _mm256_sub_epi32(DPB(vn_nibbles_32(a[i].qs, m4), y0), DPB(k8, y0));
        __m256i s1 = _mm256_sub_epi32(DPB(vn_nibbles_32(a[i + 1].qs, m4), y1), DPB(k8, y1));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(s0), acc0);
        acc0 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(s1), acc0);
    }
    for (; i < nb; i++) {
        const __m256 d0 = _mm256_set1_ps(vn_h2f(a[i].d) * vn_h2f(b[i].d));
        __m256i y0 = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i s0 = _mm256_sub_epi32(DPB(vn_nibbles_32(a[i].qs, m4), y0), DPB(k8, y0));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(s0), acc0);
    }
    *out = vn_hsum_ps(acc0);
}

/* Q4_1 x Q8_1: d*dy*sum q*y + m*s. The f16 pairs (d, m) and (dy, s) of two blocks are converted
 * with one vcvtph2ps and multiplied with one vmulps. */
RF_VNNI void VN(rf_vec_dot_q4_1)(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_1 *a = w;
    const rf_block_q8_1 *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i idx0 = _mm256_setzero_si256(), idx1 = _mm256_set1_epi32(4);
    __m256 acc0 = _mm256_setzero_ps();
    float summs = 0;
    const int64_t nb = n / 32;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        uint32_t a0, a1, b0, b1; /* (d, m) and (d, s) f16 pairs */
        memcpy(&a0, &a[i].d, 4), memcpy(&a1, &a[i + 1].d, 4);
        memcpy(&b0, &b[i].d, 4), memcpy(&b1, &b[i + 1].d, 4);
        /* [a0.d a0.m b0.d b0.s | a1.d a1.m b1.d b1.s] */
        __m256 f = _mm256_cvtph_ps(_mm_set_epi32((int)b1, (int)a1, (int)b0, (int)a0));
        /* lanes 0/4: d*dy, lanes 1/5: m*s (each one f32 rounding, as in the scalar kernel) */
        __m256 p = _mm256_mul_ps(f, _mm256_permute_ps(f, _MM_SHUFFLE(1, 0, 3, 2)));
        summs += _mm_cvtss_f32(_mm_movehdup_ps(_mm256_castps256_ps128(p)));    /* block i: m*s */
        summs += _mm_cvtss_f32(_mm_movehdup_ps(_mm256_extractf128_ps(p, 1))); /* block i+1 */
        __m256i s0 = DPB(vn_nibbles_32(a[i].qs, m4), _mm256_loadu_si256((const __m256i *)b[i].qs));
        __m256i s1 = DPB(vn_nibbles_32(a[i + 1].qs, m4), _mm256_loadu_si256((const __m256i *)b[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, idx0), _mm256_cvtepi32_ps(s0), acc0);
        acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, idx1), _mm256_cvtepi32_ps(s1), acc0);
    }
    for (; i < nb; i++) {
        summs += vn_h2f(a[i].m) * vn_h2f(b[i].s);
        const __m256 d0 = _mm256_set1_ps(vn_h2f(a[i].d) * vn_h2f(b[i].d));
        __m256i s0 = DPB(vn_nibbles_32(a[i].qs, m4), _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(s0), acc0);
    }
    *out = vn_hsum_ps(acc0) + summs;
}

/* Four Q4_1 rows (w, w + ws, w + 2 ws, w + 3 ws bytes) x one Q8_1 row: out[r] bit-identical to
 * rf_vec_dot_q4_1_vnni(n, &out[r], row r, x) (each row keeps its own fma chain over the blocks in
 * order and its own in-order m*s sum, held in lane 2r+1 of a vector). The activation block is
 * loaded once per 4 rows, and the 4 independent fma chains hide the fma latency that bounds the
 * one-row kernel. Nibbles: a 128-bit broadcast load and a per-half variable shift (no lane
 * insert, which competes with the scale broadcasts for the shuffle port). */
RF_VNNI void VN(rf_vec_dot4_q4_1)(int64_t n, float *out, const void *w, size_t ws, const void *x) {
    const rf_block_q4_1 *a0 = w;
    const rf_block_q4_1 *a1 = (const rf_block_q4_1 *)((const char *)w + ws);
    const rf_block_q4_1 *a2 = (const rf_block_q4_1 *)((const char *)w + 2 * ws);
    const rf_block_q4_1 *a3 = (const rf_block_q4_1 *)((const char *)w + 3 * ws);
    const rf_block_q8_1 *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), sh = _mm256_set_epi64x(4, 4, 0, 0);
    const __m256i i0 = _mm256_set1_epi32(0), i1 = _mm256_set1_epi32(2), i2 = _mm256_set1_epi32(4),
                  i3 = _mm256_set1_epi32(6);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, summs = acc0;
    const int64_t nb = n / 32;
#define NIB(p) _mm256_and_si256(_mm256_srlv_epi64(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p))), sh), m4)
    for (int64_t i = 0; i < nb; i++) {
        rf_dot4_prefetch(w, ws, i, sizeof(rf_block_q4_1));
        uint32_t r0, r1, r2, r3, by; /* (d, m) of each row, (d, s) of the activation */
        memcpy(&r0, &a0[i].d, 4), memcpy(&r1, &a1[i].d, 4), memcpy(&r2, &a2[i].d, 4), memcpy(&r3, &a3[i].d, 4);
        memcpy(&by, &b[i].d, 4);
        /* [d0 m0 d1 m1 d2 m2 d3 m3] * [dy s dy s ...]: d_r*dy in lane 2r, m_r*s in lane 2r+1 */
        __m256 p = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set_epi32((int)r3, (int)r2, (int)r1, (int)r0)),
                                 _mm256_cvtph_ps(_mm_set1_epi32((int)by)));
        summs = _mm256_add_ps(summs, p);
        const __m256i y = _mm256_loadu_si256((const __m256i *)b[i].qs);
        acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i0), _mm256_cvtepi32_ps(DPB(NIB(a0[i].qs), y)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i1), _mm256_cvtepi32_ps(DPB(NIB(a1[i].qs), y)), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i2), _mm256_cvtepi32_ps(DPB(NIB(a2[i].qs), y)), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i3), _mm256_cvtepi32_ps(DPB(NIB(a3[i].qs), y)), acc3);
    }
#undef NIB
    float ms[8];
    _mm256_storeu_ps(ms, summs);
    out[0] = vn_hsum_ps(acc0) + ms[1];
    out[1] = vn_hsum_ps(acc1) + ms[3];
    out[2] = vn_hsum_ps(acc2) + ms[5];
    out[3] = vn_hsum_ps(acc3) + ms[7];
}

/* Four Q4_1 rows x two Q8_1 rows (two tokens of a prompt): out0[r] / out1[r] bit-identical to
 * rf_vec_dot_q4_1_vnni(row r, x0 / x1) (each (row, token) pair keeps its own in-order fma chain
 * and m*s sum). Each weight block is unpacked once for both tokens; the per-row scale products
 * go through a small stack array and come back as broadcast loads (no shuffle-port permutes). */
RF_VNNI void VN(rf_vec_dot4x2_q4_1)(int64_t n, float *out0, float *out1, const void *w, size_t ws, const void *x0,
                                     const void *x1) {
    const rf_block_q4_1 *a0 = w;
    const rf_block_q4_1 *a1 = (const rf_block_q4_1 *)((const char *)w + ws);
    const rf_block_q4_1 *a2 = (const rf_block_q4_1 *)((const char *)w + 2 * ws);
    const rf_block_q4_1 *a3 = (const rf_block_q4_1 *)((const char *)w + 3 * ws);
    const rf_block_q8_1 *b0 = x0, *b1 = x1;
    const __m256i m4 = _mm256_set1_epi8(0x0F), sh = _mm256_set_epi64x(4, 4, 0, 0);
    __m256 c00 = _mm256_setzero_ps(), c10 = c00, c20 = c00, c30 = c00; /* row r, token 0 */
    __m256 c01 = c00, c11 = c00, c21 = c00, c31 = c00;                 /* row r, token 1 */
    __m256 sm0 = c00, sm1 = c00;
    float pp[16];
    const int64_t nb = n / 32;
#define NIB(p) _mm256_and_si256(_mm256_srlv_epi64(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p))), sh), m4)
    for (int64_t i = 0; i < nb; i++) {
        uint32_t r0, r1, r2, r3, y0s, y1s;
        memcpy(&r0, &a0[i].d, 4), memcpy(&r1, &a1[i].d, 4), memcpy(&r2, &a2[i].d, 4), memcpy(&r3, &a3[i].d, 4);
        memcpy(&y0s, &b0[i].d, 4), memcpy(&y1s, &b1[i].d, 4);
        const __m256 f = _mm256_cvtph_ps(_mm_set_epi32((int)r3, (int)r2, (int)r1, (int)r0));
        const __m256 p0 = _mm256_mul_ps(f, _mm256_cvtph_ps(_mm_set1_epi32((int)y0s)));
        const __m256 p1 = _mm256_mul_ps(f, _mm256_cvtph_ps(_mm_set1_epi32((int)y1s)));
        sm0 = _mm256_add_ps(sm0, p0);
        sm1 = _mm256_add_ps(sm1, p1);
        _mm256_storeu_ps(pp, p0);
        _mm256_storeu_ps(pp + 8, p1);
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)b0[i].qs);
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)b1[i].qs);
        __m256i q = NIB(a0[i].qs);
        c00 = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 0), _mm256_cvtepi32_ps(DPB(q, y0)), c00);
        c01 = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 8), _mm256_cvtepi32_ps(DPB(q, y1)), c01);
        q = NIB(a1[i].qs);
        c10 = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 2), _mm256_cvtepi32_ps(DPB(q, y0)), c10);
        c11 = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 10), _mm256_cvtepi32_ps(DPB(q, y1)), c11);
        q = NIB(a2[i].qs);
        c20 = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 4), _mm256_cvtepi32_ps(DPB(q, y0)), c20);
        c21 = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 12), _mm256_cvtepi32_ps(DPB(q, y1)), c21);
        q = NIB(a3[i].qs);
        c30 = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 6), _mm256_cvtepi32_ps(DPB(q, y0)), c30);
        c31 = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 14), _mm256_cvtepi32_ps(DPB(q, y1)), c31);
    }
#undef NIB
    float ms0[8], ms1[8];
    _mm256_storeu_ps(ms0, sm0);
    _mm256_storeu_ps(ms1, sm1);
    out0[0] = vn_hsum_ps(c00) + ms0[1], out0[1] = vn_hsum_ps(c10) + ms0[3];
    out0[2] = vn_hsum_ps(c20) + ms0[5], out0[3] = vn_hsum_ps(c30) + ms0[7];
    out1[0] = vn_hsum_ps(c01) + ms1[1], out1[1] = vn_hsum_ps(c11) + ms1[3];
    out1[2] = vn_hsum_ps(c21) + ms1[5], out1[3] = vn_hsum_ps(c31) + ms1[7];
}

#ifdef RF_VNNI_EVEX
/* Four Q4_1 rows x four Q8_1 rows (tokens t = 0..3 at x + t*xs bytes): out[t*os + r] bit-identical
 * to rf_vec_dot_q4_1_vnni(row r, token t) -- each (row, token) pair keeps its own in-order fma chain
 * and m*s sum, as in the 4x2 kernel. Each weight block is unpacked once for four tokens: 17 %
 * less time per (row, token) than 4x2 on Zen 4 (10.4 vs 12.5 ns, 576 x 1536, L2-resident); a
 * 512-bit 4x2 (a token per half) was slower (15.2 ns: the kernel is bound by vector-pipe work, not
 * by instruction count). EVEX build only: the 16 accumulators and 4 activation rows need the 32
 * ymm registers of AVX-512VL. pf != 0 prefetches the row group two ahead (rf_dot4_prefetch), for
 * the first token tile of a group; later tiles find the rows in cache. */
RF_VNNI void VN(rf_vec_dot4x4_q4_1)(int64_t n, float *out, size_t os, const void *w, size_t ws, const void *x,
                                     size_t xs, int pf) {
    const rf_block_q4_1 *a[4];
    const rf_block_q8_1 *b[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (const rf_block_q4_1 *)((const char *)w + k * ws);
        b[k] = (const rf_block_q8_1 *)((const char *)x + k * xs);
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), sh = _mm256_set_epi64x(4, 4, 0, 0);
    __m256 c[4][4], sm[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        sm[t] = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) c[r][t] = _mm256_setzero_ps();
    }
    float pp[32]; /* d_r*dy_t in lane 8t+2r, m_r*s_t in lane 8t+2r+1: read back as broadcasts */
    const int64_t nb = n / 32;
    for (int64_t i = 0; i < nb; i++) {
        if (pf) rf_dot4_prefetch(w, ws, i, sizeof(rf_block_q4_1));
        uint32_t rs[4], ys;
        for (int r = 0; r < 4; r++) memcpy(&rs[r], &a[r][i].d, 4);
        const __m256 f = _mm256_cvtph_ps(_mm_set_epi32((int)rs[3], (int)rs[2], (int)rs[1], (int)rs[0]));
        __m256i y[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            memcpy(&ys, &b[t][i].d, 4);
            const __m256 p = _mm256_mul_ps(f, _mm256_cvtph_ps(_mm_set1_epi32((int)ys)));
            sm[t] = _mm256_add_ps(sm[t], p);
            _mm256_storeu_ps(pp + 8 * t, p);
            y[t] = _mm256_loadu_si256((const __m256i *)b[t][i].qs);
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m256i q = _mm256_and_si256(
                _mm256_srlv_epi64(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)a[r][i].qs)), sh), m4);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                c[r][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 8 * t + 2 * r), _mm256_cvtepi32_ps(DPB(q, y[t])),
                                          c[r][t]);
        }
    }
    for (int t = 0; t < 4; t++) {
        float ms[8];
        _mm256_storeu_ps(ms, sm[t]);
        for (int r = 0; r < 4; r++) out[(size_t)t * os + r] = vn_hsum_ps(c[r][t]) + ms[2 * r + 1];
    }
}
#endif

#ifdef RF_VNNI_EVEX
/* Four Q8_0 rows x four Q8_0 tokens with the AVX2 kernel's numerics: out[t*os + r] bit-identical
 * to rf_vec_dot_q8_0_avx2(row r, token t) (the same int16 widening, the same int32 lanes -- pairs
 * of elements e, e+1 and e+16, e+17 -- and the same fma chain; d_r*dy_t is one f32 product either
 * way). It is the table's default Q8_0 kernel (the VNNI one groups lanes differently), so this is
 * what the LM head of a batch runs: each weight block is widened once for four tokens and each
 * activation block once for four rows. No VNNI instruction; in the EVEX build for the 32 ymm
 * registers (16 accumulators, 8 widened activation halves). pf as in rf_vec_dot4x4_q4_1. */
RF_VNNI void rf_vec_dot4x4_q8_0_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, const void *x,
                                       size_t xs, int pf) {
    const rf_block_q8_0 *a[4], *b[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (const rf_block_q8_0 *)((const char *)w + k * ws);
        b[k] = (const rf_block_q8_0 *)((const char *)x + k * xs);
    }
    __m256 c[4][4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) c[r][t] = _mm256_setzero_ps();
    float pp[32]; /* d_r*dy_t in lane 8t+r */
    const int64_t nb = n / 32;
    for (int64_t i = 0; i < nb; i++) {
        if (pf) rf_dot4_prefetch(w, ws, i, sizeof(rf_block_q8_0));
        const __m128i hd = _mm_set_epi16(0, 0, 0, 0, (short)a[3][i].d, (short)a[2][i].d, (short)a[1][i].d, (short)a[0][i].d);
        const __m256 f = _mm256_cvtph_ps(hd);
        __m256i y0[4], y1[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            _mm256_storeu_ps(pp + 8 * t, _mm256_mul_ps(f, _mm256_set1_ps(vn_h2f(b[t][i].d))));
            y0[t] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[t][i].qs));
            y1[t] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b[t][i].qs + 16)));
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[r][i].qs));
            const __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a[r][i].qs + 16)));
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(x0, y0[t]), _mm256_madd_epi16(x1, y1[t]));
                c[r][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(pp + 8 * t + r), _mm256_cvtepi32_ps(sum), c[r][t]);
            }
        }
    }
    for (int t = 0; t < 4; t++)
        for (int r = 0; r < 4; r++) out[(size_t)t * os + r] = vn_hsum_ps(c[r][t]);
}
#endif

/* Q8_0 x Q8_0: sum w*y = sum (w+128)*y - 128*sum y; w+128 is w ^ 0x80 as an unsigned byte. Exact
 * for every int8 pair, -128 included. */
RF_VNNI void VN(rf_vec_dot_q8_0)(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q8_0 *a = w;
    const rf_block_q8_0 *b = x;
    const __m256i k80 = _mm256_set1_epi8((char)0x80);
    __m256 acc0 = _mm256_setzero_ps();
    const int64_t nb = n / 32;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256 d0, d1;
        vn_scales2(a[i].d, b[i].d, a[i + 1].d, b[i + 1].d, &d0, &d1);
        __m256i y0 = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i y1 = _mm256_loadu_si256((const __m256i *)b[i + 1].qs);
        __m256i u0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)a[i].qs), k80);
        __m256i u1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)a[i + 1].qs), k80);
        __m256i s0 = _mm256_sub_epi32(DPB(u0, y0), DPB(k80, y0));
        __m256i s1 = _mm256_sub_epi32(DPB(u1, y1), DPB(k80, y1));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(s0), acc0);
        acc0 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(s1), acc0);
    }
    for (; i < nb; i++) {
        const __m256 d0 = _mm256_set1_ps(vn_h2f(a[i].d) * vn_h2f(b[i].d));
        __m256i y0 = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i u0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)a[i].qs), k80);
        __m256i s0 = _mm256_sub_epi32(DPB(u0, y0), DPB(k80, y0));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(s0), acc0);
    }
    *out = vn_hsum_ps(acc0);
}
/* Four Q8_0 rows x one Q8_0 row, each out[r] bit-identical to rf_vec_dot_q8_0_vnni; the
 * activation's 128*sum(y) term is computed once per block for the four rows. */
RF_VNNI void VN(rf_vec_dot4_q8_0)(int64_t n, float *out, const void *w, size_t ws, const void *x) {
    const rf_block_q8_0 *a0 = w;
    const rf_block_q8_0 *a1 = (const rf_block_q8_0 *)((const char *)w + ws);
    const rf_block_q8_0 *a2 = (const rf_block_q8_0 *)((const char *)w + 2 * ws);
    const rf_block_q8_0 *a3 = (const rf_block_q8_0 *)((const char *)w + 3 * ws);
    const rf_block_q8_0 *b = x;
    const __m256i k80 = _mm256_set1_epi8((char)0x80);
    const __m256i i0 = _mm256_set1_epi32(0), i1 = _mm256_set1_epi32(1), i2 = _mm256_set1_epi32(2),
                  i3 = _mm256_set1_epi32(3);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    const int64_t nb = n / 32;
#define U(p) _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p)), k80)
    for (int64_t i = 0; i < nb; i++) {
        rf_dot4_prefetch(w, ws, i, sizeof(rf_block_q8_0));
        /* [d0 d1 d2 d3 dy dy dy dy] -> d_r*dy in lanes 0..3 (exact: f16 x f16 fits in f32) */
        __m128i h = _mm_set_epi16((short)b[i].d, (short)b[i].d, (short)b[i].d, (short)b[i].d, (short)a3[i].d,
                                  (short)a2[i].d, (short)a1[i].d, (short)a0[i].d);
        __m256 f = _mm256_cvtph_ps(h);
        __m256 p = _mm256_mul_ps(f, _mm256_permute2f128_ps(f, f, 0x11));
        const __m256i y = _mm256_loadu_si256((const __m256i *)b[i].qs);
        const __m256i ky = DPB(k80, y);
        acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i0), _mm256_cvtepi32_ps(_mm256_sub_epi32(DPB(U(a0[i].qs), y), ky)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i1), _mm256_cvtepi32_ps(_mm256_sub_epi32(DPB(U(a1[i].qs), y), ky)), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i2), _mm256_cvtepi32_ps(_mm256_sub_epi32(DPB(U(a2[i].qs), y), ky)), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i3), _mm256_cvtepi32_ps(_mm256_sub_epi32(DPB(U(a3[i].qs), y), ky)), acc3);
    }
#undef U
    out[0] = vn_hsum_ps(acc0);
    out[1] = vn_hsum_ps(acc1);
    out[2] = vn_hsum_ps(acc2);
    out[3] = vn_hsum_ps(acc3);
}
/* Four Q5_0 rows x one Q8_0 row, each out[r] bit-identical to rf_vec_dot_q5_0_avx2 (the table's
 * one-row Q5_0 kernel): the same exact int32 lanes (4-byte groups, ggml's), computed as
 * sum u*y - 16*sum y with u = nibble | 16*high bit in 0..31 (vpdpbusd; the 16*sum y term once per
 * block for the four rows), and the same fma chain per row. */
RF_VNNI void VN(rf_vec_dot4_q5_0)(int64_t n, float *out, const void *w, size_t ws, const void *x) {
    const rf_block_q5_0 *a0 = w;
    const rf_block_q5_0 *a1 = (const rf_block_q5_0 *)((const char *)w + ws);
    const rf_block_q5_0 *a2 = (const rf_block_q5_0 *)((const char *)w + 2 * ws);
    const rf_block_q5_0 *a3 = (const rf_block_q5_0 *)((const char *)w + 3 * ws);
    const rf_block_q8_0 *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), k16 = _mm256_set1_epi8(16), sh = _mm256_set_epi64x(4, 4, 0, 0);
    const __m256i bshuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bmask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe), ones = _mm256_set1_epi64x(-1);
    const __m256i i0 = _mm256_set1_epi32(0), i1 = _mm256_set1_epi32(1), i2 = _mm256_set1_epi32(2),
                  i3 = _mm256_set1_epi32(3);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    const int64_t nb = n / 32;
    /* u = low/high nibbles | 16 where bit e of qh is set (bit e -> byte e: broadcast, shuffle, test) */
#define U5(blk)                                                                                                   \
    _mm256_or_si256(                                                                                              \
        _mm256_and_si256(_mm256_srlv_epi64(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk).qs)), sh), m4), \
        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(ld32((blk).qh)), bshuf), bmask), ones), k16))
    for (int64_t i = 0; i < nb; i++) {
        rf_dot4_prefetch(w, ws, i, sizeof(rf_block_q5_0));
        __m128i h = _mm_set_epi16((short)b[i].d, (short)b[i].d, (short)b[i].d, (short)b[i].d, (short)a3[i].d,
                                  (short)a2[i].d, (short)a1[i].d, (short)a0[i].d);
        __m256 f = _mm256_cvtph_ps(h);
        __m256 p = _mm256_mul_ps(f, _mm256_permute2f128_ps(f, f, 0x11)); /* d_r*dy in lanes 0..3 */
        const __m256i y = _mm256_loadu_si256((const __m256i *)b[i].qs);
        const __m256i ky = DPB(k16, y);
        acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i0), _mm256_cvtepi32_ps(_mm256_sub_epi32(DPB(U5(a0[i]), y), ky)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i1), _mm256_cvtepi32_ps(_mm256_sub_epi32(DPB(U5(a1[i]), y), ky)), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i2), _mm256_cvtepi32_ps(_mm256_sub_epi32(DPB(U5(a2[i]), y), ky)), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, i3), _mm256_cvtepi32_ps(_mm256_sub_epi32(DPB(U5(a3[i]), y), ky)), acc3);
    }
#undef U5
    out[0] = vn_hsum_ps(acc0);
    out[1] = vn_hsum_ps(acc1);
    out[2] = vn_hsum_ps(acc2);
    out[3] = vn_hsum_ps(acc3);
}
#undef DPB

#else /* not x86: never selected (rf_cpu_has_avxvnni() is false); forward to the scalar kernels */

#ifndef RF_VNNI_EVEX
#define VN(f) f##_vnni
bool rf_cpu_has_avxvnni(void) { return false; }
#else
#define VN(f) f##_vnni512
#endif
void VN(rf_vec_dot_q4_0)(int64_t n, float *out, const void *w, const void *x) { rf_vec_dot_q4_0(n, out, w, x); }
void VN(rf_vec_dot_q4_1)(int64_t n, float *out, const void *w, const void *x) { rf_vec_dot_q4_1(n, out, w, x); }
void VN(rf_vec_dot_q8_0)(int64_t n, float *out, const void *w, const void *x) { rf_vec_dot_q8_0(n, out, w, x); }
void VN(rf_vec_dot4_q4_1)(int64_t n, float *out, const void *w, size_t ws, const void *x) {
    for (int r = 0; r < 4; r++) rf_vec_dot_q4_1(n, &out[r], (const char *)w + r * ws, x);
}
void VN(rf_vec_dot4_q8_0)(int64_t n, float *out, const void *w, size_t ws, const void *x) {
    for (int r = 0; r < 4; r++) rf_vec_dot_q8_0(n, &out[r], (const char *)w + r * ws, x);
}
void VN(rf_vec_dot4_q5_0)(int64_t n, float *out, const void *w, size_t ws, const void *x) {
    for (int r = 0; r < 4; r++) rf_vec_dot_q5_0(n, &out[r], (const char *)w + r * ws, x);
}
void VN(rf_vec_dot4x2_q4_1)(int64_t n, float *out0, float *out1, const void *w, size_t ws, const void *x0,
                            const void *x1) {
    for (int r = 0; r < 4; r++) {
        rf_vec_dot_q4_1(n, &out0[r], (const char *)w + r * ws, x0);
        rf_vec_dot_q4_1(n, &out1[r], (const char *)w + r * ws, x1);
    }
}
#ifdef RF_VNNI_EVEX
void VN(rf_vec_dot4x4_q4_1)(int64_t n, float *out, size_t os, const void *w, size_t ws, const void *x, size_t xs,
                            int pf) {
    (void)pf;
    for (int t = 0; t < 4; t++)
        for (int r = 0; r < 4; r++) rf_vec_dot_q4_1(n, &out[(size_t)t * os + r], (const char *)w + r * ws, (const char *)x + t * xs);
}
void rf_vec_dot4x4_q8_0_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, const void *x, size_t xs,
                               int pf) {
    (void)pf;
    for (int t = 0; t < 4; t++)
        for (int r = 0; r < 4; r++) rf_vec_dot_q8_0(n, &out[(size_t)t * os + r], (const char *)w + r * ws, (const char *)x + t * xs);
}
#endif

#endif
