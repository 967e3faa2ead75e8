/* quant/vec_dot_avx2.c — AVX2+FMA+F16C dot kernels for every weight type of the table's dot list
 * (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, IQ4_NL, IQ4_XS, Q2_K..Q6_K). Compiled per function with
 * __attribute__((target)) (no global -march); type_table.c only selects them after
 * __builtin_cpu_supports says the CPU has AVX2, FMA and F16C. Same contracts as vec_dot.c.
 * The K-quant kernels sum exactly in int32 per super-block and accumulate through the same
 * rf_kq_accum as the scalar ones (bit for bit); rf_vec_dot_q4_K_ggml / _q6_K_ggml are the same
 * integer work accumulated per lane in ggml's x86 float order (what llama.cpp computes, opt-in:
 * type_table.c); the 32-block kernels accumulate per lane (float reordering only).
 * Activations are expected from our quantizers (int8 in [-127, 127]); -128 could saturate the
 * sign trick of Q4_0/Q5_0 (as in ggml). */
#include "quant/quant_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define RF_AVX2 __attribute__((target("avx2,fma,f16c")))

RF_AVX2 static inline float hsum_ps(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

RF_AVX2 static inline int32_t hsum_epi32(__m256i x) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

RF_AVX2 static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31). */
RF_AVX2 static inline __m256i nibbles_32(const uint8_t *p) {
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, 0xFF where bit j is set. */
RF_AVX2 static inline __m256i bits_32(const uint8_t *p) {
    uint32_t x;
    memcpy(&x, p, 4);
    __m256i b = _mm256_set1_epi32((int)x);
    b = _mm256_shuffle_epi8(b, _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* Signed int8 x signed int8, 32 pairs -> 8 float partial sums (|x| <= 16 keeps maddubs exact). */
RF_AVX2 static inline __m256 dot_i8_small(__m256i x, __m256i y) {
    __m256i ax = _mm256_sign_epi8(x, x);
    __m256i sy = _mm256_sign_epi8(y, x);
    __m256i p16 = _mm256_maddubs_epi16(ax, sy);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

RF_AVX2 void rf_vec_dot_f32_avx2(int64_t n, float *out, const void *w, const void *x) {
    const float *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    *out = s;
}

RF_AVX2 void rf_vec_dot_f16_avx2(int64_t n, float *out, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
#define LD16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(LD16(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(LD16(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(LD16(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(LD16(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LD16(a + i), _mm256_loadu_ps(b + i), s0);
#undef LD16
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, a + i, 2);
        s += h2f(h) * b[i];
    }
    *out = s;
}

RF_AVX2 void rf_vec_dot_q4_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_0 *a = w;
    const rf_block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        __m256i qx = _mm256_sub_epi8(nibbles_32(a[i].qs), _mm256_set1_epi8(8));
        __m256i qy = _mm256_loadu_si256((const __m256i *)b[i].qs);
        acc = _mm256_fmadd_ps(d, dot_i8_small(qx, qy), acc);
    }
    *out = hsum_ps(acc);
}

RF_AVX2 void rf_vec_dot_q4_1_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_1 *a = w;
    const rf_block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        summs += h2f(a[i].m) * h2f(b[i].s);
        const __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        __m256i qx = nibbles_32(a[i].qs); /* unsigned 0..15 */
        __m256i qy = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i p16 = _mm256_maddubs_epi16(qx, qy);
        __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
        acc = _mm256_fmadd_ps(d, p, acc);
    }
    *out = hsum_ps(acc) + summs;
}

RF_AVX2 void rf_vec_dot_q5_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q5_0 *a = w;
    const rf_block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        __m256i hi = _mm256_and_si256(bits_32(a[i].qh), _mm256_set1_epi8(0x10));
        __m256i qx = _mm256_sub_epi8(_mm256_or_si256(nibbles_32(a[i].qs), hi), _mm256_set1_epi8(16));
        __m256i qy = _mm256_loadu_si256((const __m256i *)b[i].qs);
        acc = _mm256_fmadd_ps(d, dot_i8_small(qx, qy), acc);
    }
    *out = hsum_ps(acc);
}

/* Q8_0 x Q8_0 widens to int16 (madd) so that no value pair can saturate. */
RF_AVX2 void rf_vec_dot_q8_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q8_0 *a = w;
    const rf_block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[i].qs));
        __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a[i].qs + 16)));
        __m256i y0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].qs));
        __m256i y1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b[i].qs + 16)));
        __m256i s = _mm256_add_epi32(_mm256_madd_epi16(x0, y0), _mm256_madd_epi16(x1, y1));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
    }
    *out = hsum_ps(acc);
}

/* Four Q8_0 rows x one Q8_0 row, each out[r] bit-identical to rf_vec_dot_q8_0_avx2 (same int16
 * widening and lanes, same fma chain per row); the activation block is widened once for the four. */
RF_AVX2 void rf_vec_dot4_q8_0_avx2(int64_t n, float *out, const void *w, size_t ws, const void *x) {
    const rf_block_q8_0 *a[4];
    for (int r = 0; r < 4; r++) a[r] = (const rf_block_q8_0 *)((const char *)w + r * ws);
    const rf_block_q8_0 *b = x;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / 32; i++) {
        rf_dot4_prefetch(w, ws, i, sizeof(rf_block_q8_0));
        const float dy = h2f(b[i].d);
        __m256i y0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].qs));
        __m256i y1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b[i].qs + 16)));
        for (int r = 0; r < 4; r++) {
            const __m256 d = _mm256_set1_ps(h2f(a[r][i].d) * dy);
            __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[r][i].qs));
            __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a[r][i].qs + 16)));
            __m256i s = _mm256_add_epi32(_mm256_madd_epi16(x0, y0), _mm256_madd_epi16(x1, y1));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[r]);
        }
    }
    for (int r = 0; r < 4; r++) out[r] = hsum_ps(acc[r]);
}

RF_AVX2 void rf_vec_dot_q4_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_K *a = w;
    const rf_block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], m[8];
        int summs = 0;
        for (int j = 0; j < 8; j++) {
            rf_k4_scale_min(j, a[i].scales, &sc[j], &m[j]);
            summs += m[j] * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * j));
            __m256i q4l = _mm256_and_si256(q4, m4);
            __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            __m256i q8l = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * j));
            __m256i q8h = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * j + 32));
            __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(q4l, q8l), _mm256_set1_epi16(sc[2 * j]));
            __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(q4h, q8h), _mm256_set1_epi16(sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        float d8;
        memcpy(&d8, &b[i].d, 4);
        s = rf_kq_accum(s, d8, h2f(a[i].d), hsum_epi32(sumi), h2f(a[i].dmin), summs);
    }
    *out = s;
}

/* Q4_K in ggml's x86 float order (not the scalar kernel's): per super-block the exact int32
 * lanes (lane k = sum over the 8 sub-blocks of scale * sum of the 4 products at bytes 4k..4k+3)
 * go through one fma with d = d8*d into 8 float accumulators, the min terms (4 int32 lanes: pairs
 * of sub-blocks) through one fma with -d8*dmin into 4 more, and the lanes are summed at the end
 * as ggml does. Within the stated tolerance of the scalar kernel (test_quant_dot) and, on the
 * same inputs, bit-identical to llama.cpp's ggml_vec_dot_q4_K_q8_K on AVX2. */
RF_AVX2 void rf_vec_dot_q4_K_ggml(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_K *a = w;
    const rf_block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) rf_k4_scale_min(j, a[i].scales, &sc[j], &m[j]);
        int32_t pm[4]; /* min lane l: m[2l]*S(2l) + m[2l+1]*S(2l+1), S(j) = sum of the 32 q8 of sub-block j */
        for (int l = 0; l < 4; l++)
            pm[l] = m[2 * l] * (b[i].bsums[4 * l] + b[i].bsums[4 * l + 1]) +
                    m[2 * l + 1] * (b[i].bsums[4 * l + 2] + b[i].bsums[4 * l + 3]);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * j));
            __m256i q4l = _mm256_and_si256(q4, m4);
            __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            __m256i q8l = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * j));
            __m256i q8h = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * j + 32));
            __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(q4l, q8l), _mm256_set1_epi16(sc[2 * j]));
            __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(q4h, q8h), _mm256_set1_epi16(sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        float d8;
        memcpy(&d8, &b[i].d, 4);
        const float d = d8 * h2f(a[i].d), dmin = -d8 * h2f(a[i].dmin);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_setr_epi32(pm[0], pm[1], pm[2], pm[3])), acc_m);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
    *out = hsum_ps(acc) + _mm_cvtss_f32(acc_m);
}

RF_AVX2 void rf_vec_dot_q6_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q6_K *a = w;
    const rf_block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        /* q - 32 is done as a correction: sum_j sc_j * 32 * bsum_j */
        int corr = 0;
        for (int j = 0; j < 16; j++) corr += a[i].scales[j] * b[i].bsums[j];
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *q8 = b[i].qs + 128 * h, *sc = a[i].scales + 8 * h;
            __m256i l1 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l2 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l2, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                __m256i y = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                __m256i p16 = _mm256_maddubs_epi16(q[k], y);
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scv));
            }
        }
        float d8;
        memcpy(&d8, &b[i].d, 4);
        s = rf_kq_accum(s, d8, h2f(a[i].d), hsum_epi32(sumi) - 32 * corr, 0.0f, 0);
    }
    *out = s;
}

/* Q6_K in ggml's x86 float order: exact int32 lanes per super-block (the -32 offset as a per-lane
 * correction from the activation's 16-element sums), one fma per super-block into 8 float lanes
 * with d = d8*d, lanes summed at the end. Within tolerance of the scalar kernel; bit-identical to
 * llama.cpp's ggml_vec_dot_q6_K_q8_K on AVX2 for the same inputs. */
RF_AVX2 void rf_vec_dot_q6_K_ggml(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q6_K *a = w;
    const rf_block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        /* q - 32 is done as a per-lane correction, lane k: 32 * (sc[2k] bsum[2k] + sc[2k+1] bsum[2k+1]) */
        const __m256i corr = _mm256_slli_epi32(
            _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)b[i].bsums),
                              _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[i].scales))), 5);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *q8 = b[i].qs + 128 * h, *sc = a[i].scales + 8 * h;
            __m256i l1 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l2 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l2, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                __m256i y = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                __m256i p16 = _mm256_maddubs_epi16(q[k], y);
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scv));
            }
        }
        float d8;
        memcpy(&d8, &b[i].d, 4);
        const float d = d8 * h2f(a[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, corr)), acc);
    }
    *out = hsum_ps(acc);
}

/* ---- further kernels: bf16, q5_1, mxfp4, iq4_nl, q2_K, q3_K, q5_K ---- */

RF_AVX2 void rf_vec_dot_bf16_avx2(int64_t n, float *out, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
#define LDB(p) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(LDB(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(LDB(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LDB(a + i), _mm256_loadu_ps(b + i), s0);
#undef LDB
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, a + i, 2);
        s += rf_bf16_to_f32(h) * b[i];
    }
    *out = s;
}

RF_AVX2 void rf_vec_dot_q5_1_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q5_1 *a = w;
    const rf_block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        summs += h2f(a[i].m) * h2f(b[i].s);
        const __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        __m256i hi = _mm256_and_si256(bits_32(a[i].qh), _mm256_set1_epi8(0x10));
        __m256i qx = _mm256_or_si256(nibbles_32(a[i].qs), hi); /* unsigned 0..31 */
        __m256i qy = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i p16 = _mm256_maddubs_epi16(qx, qy);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1))), acc);
    }
    *out = hsum_ps(acc) + summs;
}

/* 16-entry int8 codebook lookup of 32 nibbles (both 128-bit lanes hold the table). */
RF_AVX2 static inline __m256i lookup16(const int8_t table[16], const uint8_t *qs) {
    __m128i t = _mm_loadu_si128((const __m128i *)table);
    return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles_32(qs));
}

static const int8_t k_fp4_avx[16] = RF_KVALUES_FP4_INIT;
static const int8_t k_iq4nl_avx[16] = RF_KVALUES_IQ4NL_INIT;

RF_AVX2 void rf_vec_dot_mxfp4_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_mxfp4 *a = w;
    const rf_block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(rf_e8m0_to_f32_half(a[i].e) * h2f(b[i].d));
        __m256i qy = _mm256_loadu_si256((const __m256i *)b[i].qs);
        acc = _mm256_fmadd_ps(d, dot_i8_small(lookup16(k_fp4_avx, a[i].qs), qy), acc);
    }
    *out = hsum_ps(acc);
}

/* iq4_nl levels reach -127: |level| * |y| pairs stay <= 2*127*127 < 2^15, so maddubs is exact. */
RF_AVX2 void rf_vec_dot_iq4_nl_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_iq4_nl *a = w;
    const rf_block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d));
        __m256i qy = _mm256_loadu_si256((const __m256i *)b[i].qs);
        acc = _mm256_fmadd_ps(d, dot_i8_small(lookup16(k_iq4nl_avx, a[i].qs), qy), acc);
    }
    *out = hsum_ps(acc);
}

/* Variable 16-bit lane shift (count in a register). */
RF_AVX2 static inline __m256i srl16(__m256i v, int c) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(c)); }

/* Q2_K/Q3_K: element 128h + 32k + l, 16-element scale groups 8h + 2k + (l >= 16). q are unsigned
 * (Q3_K: low2 + 4*hbit, i.e. q + 4, corrected with 4 * sum sc*bsum). */
RF_AVX2 void rf_vec_dot_q2_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q2_K *a = w;
    const rf_block_q8_K *b = x;
    const __m256i m3 = _mm256_set1_epi8(3);
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += (a[i].scales[j] >> 4) * b[i].bsums[j];
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_and_si256(srl16(qb, 2 * k), m3);
                __m256i y = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * k));
                const uint8_t *sc = a[i].scales + 8 * h + 2 * k;
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[1] & 0xF), _mm_set1_epi16(sc[0] & 0xF));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scv));
            }
        }
        float d8;
        memcpy(&d8, &b[i].d, 4);
        s = rf_kq_accum(s, d8, h2f(a[i].d), hsum_epi32(sumi), h2f(a[i].dmin), summs);
    }
    *out = s;
}

RF_AVX2 void rf_vec_dot_q3_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q3_K *a = w;
    const rf_block_q8_K *b = x;
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int8_t sc[16];
        rf_q3_K_scales(a[i].scales, sc);
        int corr = 0;
        for (int j = 0; j < 16; j++) corr += sc[j] * b[i].bsums[j];
        __m256i hm = _mm256_loadu_si256((const __m256i *)a[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                __m256i lo = _mm256_and_si256(srl16(qb, 2 * k), m3);
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(srl16(hm, 4 * h + k), m1), 2);
                __m256i q = _mm256_or_si256(lo, hb); /* 0..7 = value + 4 */
                __m256i y = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * k));
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[8 * h + 2 * k + 1]), _mm_set1_epi16(sc[8 * h + 2 * k]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scv));
            }
        }
        float d8;
        memcpy(&d8, &b[i].d, 4);
        s = rf_kq_accum(s, d8, h2f(a[i].d), hsum_epi32(sumi) - 4 * corr, 0.0f, 0);
    }
    *out = s;
}

RF_AVX2 void rf_vec_dot_q5_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q5_K *a = w;
    const rf_block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t sc[8], m[8];
        int summs = 0;
        for (int j = 0; j < 8; j++) {
            rf_k4_scale_min(j, a[i].scales, &sc[j], &m[j]);
            summs += m[j] * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        __m256i qh = _mm256_loadu_si256((const __m256i *)a[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * g));
            __m256i hl = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * g), m1), 4);
            __m256i hh = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * g + 1), m1), 4);
            __m256i ql = _mm256_or_si256(_mm256_and_si256(q4, m4), hl);
            __m256i qhi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), m4), hh);
            __m256i yl = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * g));
            __m256i yh = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * g + 32));
            __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(ql, yl), _mm256_set1_epi16(sc[2 * g]));
            __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(qhi, yh), _mm256_set1_epi16(sc[2 * g + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        float d8;
        memcpy(&d8, &b[i].d, 4);
        s = rf_kq_accum(s, d8, h2f(a[i].d), hsum_epi32(sumi), h2f(a[i].dmin), summs);
    }
    *out = s;
}

/* IQ4_XS x Q8_K: codebook lookup per 32, sign trick (|level|, |q8| <= 127: maddubs exact), 6-bit
 * scale (minus 32) applied in the int16 -> int32 madd; exact int32 sum like the scalar kernel. */
RF_AVX2 void rf_vec_dot_iq4_xs_avx2(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_iq4_xs *a = w;
    const rf_block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((a[i].scales_h >> (2 * ib)) & 3) << 4);
            __m256i q = lookup16(k_iq4nl_avx, a[i].qs + 16 * ib);
            __m256i y = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * ib));
            __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16((short)(ls - 32))));
        }
        float d8;
        memcpy(&d8, &b[i].d, 4);
        s = rf_kq_accum(s, d8, h2f(a[i].d), hsum_epi32(sumi), 0.0f, 0);
    }
    *out = s;
}

#else /* not x86: never selected (rf_cpu_has_avx2() is false); forward to the scalar kernels */

#define RF_FWD(name) \
    void rf_vec_dot_##name##_avx2(int64_t n, float *out, const void *w, const void *x) { rf_vec_dot_##name(n, out, w, x); }
RF_FWD(f32) RF_FWD(f16) RF_FWD(q4_0) RF_FWD(q4_1) RF_FWD(q5_0) RF_FWD(q8_0) RF_FWD(q4_K) RF_FWD(q6_K)
RF_FWD(bf16) RF_FWD(q5_1) RF_FWD(mxfp4) RF_FWD(iq4_nl) RF_FWD(q2_K) RF_FWD(q3_K) RF_FWD(q5_K) RF_FWD(iq4_xs)
#undef RF_FWD
void rf_vec_dot_q4_K_ggml(int64_t n, float *out, const void *w, const void *x) { rf_vec_dot_q4_K(n, out, w, x); }
void rf_vec_dot_q6_K_ggml(int64_t n, float *out, const void *w, const void *x) { rf_vec_dot_q6_K(n, out, w, x); }
void rf_vec_dot4_q8_0_avx2(int64_t n, float *out, const void *w, size_t ws, const void *x) {
    for (int r = 0; r < 4; r++) rf_vec_dot_q8_0(n, &out[r], (const char *)w + r * ws, x);
}

#endif
