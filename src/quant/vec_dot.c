/* quant/vec_dot.c — scalar reference dot kernels: weight row (any table type) · activation row
 * (the weight type's vec_dot_type). Integer sums per block, float accumulation across blocks,
 * like ggml's generic kernels; the AVX2 kernels (vec_dot_avx2.c) are tested against these. */
#include "quant/quant_impl.h"

static const int8_t k_fp4[16] = RF_KVALUES_FP4_INIT;
static const int8_t k_iq4nl[16] = RF_KVALUES_IQ4NL_INIT;

/* ---- float weights x f32 activations (double accumulation: this is the reference) ---- */

void rf_vec_dot_f32(int64_t n, float *out, const void *w, const void *x) {
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    *out = (float)s;
}

void rf_vec_dot_f16(int64_t n, float *out, const void *w, const void *x) {
    const uint8_t *a = w;
    const float *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, a + 2 * i, 2);
        s += (double)rf_fp16_to_f32(h) * b[i];
    }
    *out = (float)s;
}

void rf_vec_dot_bf16(int64_t n, float *out, const void *w, const void *x) {
    const uint8_t *a = w;
    const float *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, a + 2 * i, 2);
        s += (double)rf_bf16_to_f32(h) * b[i];
    }
    *out = (float)s;
}

/* ---- 32-blocks x Q8_0 / Q8_1 ---- */

void rf_vec_dot_q4_0(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_0 *a = w;
    const rf_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
            sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        }
        s += (float)sumi * (rf_fp16_to_f32(a[i].d) * rf_fp16_to_f32(b[i].d));
    }
    *out = s;
}

/* (d q + m) . (dx qx) = d dx sum(q qx) + m * (dx sum qx) = ... + m * s */
void rf_vec_dot_q4_1(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_1 *a = w;
    const rf_block_q8_1 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (a[i].qs[j] & 0xF) * b[i].qs[j];
            sumi += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
        }
        s += (float)sumi * (rf_fp16_to_f32(a[i].d) * rf_fp16_to_f32(b[i].d)) +
             rf_fp16_to_f32(a[i].m) * rf_fp16_to_f32(b[i].s);
    }
    *out = s;
}

static inline uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void rf_vec_dot_q5_0(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q5_0 *a = w;
    const rf_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint32_t qh = load_u32(a[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = ((a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4)) - 16;
            int q1 = ((a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) - 16;
            sumi += q0 * b[i].qs[j] + q1 * b[i].qs[j + 16];
        }
        s += (float)sumi * (rf_fp16_to_f32(a[i].d) * rf_fp16_to_f32(b[i].d));
    }
    *out = s;
}

void rf_vec_dot_q5_1(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q5_1 *a = w;
    const rf_block_q8_1 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        const uint32_t qh = load_u32(a[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            sumi += q0 * b[i].qs[j] + q1 * b[i].qs[j + 16];
        }
        s += (float)sumi * (rf_fp16_to_f32(a[i].d) * rf_fp16_to_f32(b[i].d)) +
             rf_fp16_to_f32(a[i].m) * rf_fp16_to_f32(b[i].s);
    }
    *out = s;
}

void rf_vec_dot_q8_0(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q8_0 *a = w;
    const rf_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += a[i].qs[j] * b[i].qs[j];
        s += (float)sumi * (rf_fp16_to_f32(a[i].d) * rf_fp16_to_f32(b[i].d));
    }
    *out = s;
}

void rf_vec_dot_mxfp4(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_mxfp4 *a = w;
    const rf_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += k_fp4[a[i].qs[j] & 0xF] * b[i].qs[j];
            sumi += k_fp4[a[i].qs[j] >> 4] * b[i].qs[j + 16];
        }
        s += (float)sumi * (rf_e8m0_to_f32_half(a[i].e) * rf_fp16_to_f32(b[i].d));
    }
    *out = s;
}

void rf_vec_dot_iq4_nl(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_iq4_nl *a = w;
    const rf_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += k_iq4nl[a[i].qs[j] & 0xF] * b[i].qs[j];
            sumi += k_iq4nl[a[i].qs[j] >> 4] * b[i].qs[j + 16];
        }
        s += (float)sumi * (rf_fp16_to_f32(a[i].d) * rf_fp16_to_f32(b[i].d));
    }
    *out = s;
}

/* ---- K-quants x Q8_K ---- */

__attribute__((noinline)) float rf_kq_accum(float s, float d8, float d, int32_t isum, float dmin, int32_t summs) {
    return s + (d8 * d * (float)isum - d8 * dmin * (float)summs);
}

static inline float q8k_d(const rf_block_q8_K *b) {
    float d;
    memcpy(&d, &b->d, 4);
    return d;
}

/* x = d*sc*q - dmin*m per 16: the min term uses the activation's 16-element bsums. */
void rf_vec_dot_q2_K(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q2_K *a = w;
    const rf_block_q8_K *b = x;
    uint8_t q[256];
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        rf_q2_K_unpack(&a[i], q);
        int isum = 0, summs = 0;
        for (int j = 0; j < 16; j++) {
            int t = 0;
            for (int l = 0; l < 16; l++) t += q[16 * j + l] * b[i].qs[16 * j + l];
            isum += (a[i].scales[j] & 0xF) * t;
            summs += (a[i].scales[j] >> 4) * b[i].bsums[j];
        }
        s = rf_kq_accum(s, q8k_d(&b[i]), rf_fp16_to_f32(a[i].d), isum, rf_fp16_to_f32(a[i].dmin), summs);
    }
    *out = s;
}

void rf_vec_dot_q3_K(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q3_K *a = w;
    const rf_block_q8_K *b = x;
    int8_t q[256], sc[16];
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        rf_q3_K_unpack(&a[i], q);
        rf_q3_K_scales(a[i].scales, sc);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int t = 0;
            for (int l = 0; l < 16; l++) t += q[16 * j + l] * b[i].qs[16 * j + l];
            isum += sc[j] * t;
        }
        s = rf_kq_accum(s, q8k_d(&b[i]), rf_fp16_to_f32(a[i].d), isum, 0.0f, 0);
    }
    *out = s;
}

/* One super-block of Q4_K or Q5_K (they share the 8x32 scale/min layout) against Q8_K: the
 * unpacked weights q, their packed scales, and the block's d/dmin, accumulated into s. */
static float k4_block_dot(float s, const uint8_t q[256], const uint8_t *scales, float d, float dmin,
                          const rf_block_q8_K *b) {
    int isum = 0, summs = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rf_k4_scale_min(j, scales, &sc, &m);
        int t = 0;
        for (int l = 0; l < 32; l++) t += q[32 * j + l] * b->qs[32 * j + l];
        isum += sc * t;
        summs += m * (b->bsums[2 * j] + b->bsums[2 * j + 1]);
    }
    return rf_kq_accum(s, q8k_d(b), d, isum, dmin, summs);
}

void rf_vec_dot_q4_K(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q4_K *a = w;
    const rf_block_q8_K *b = x;
    uint8_t q[256];
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        rf_q4_K_unpack(&a[i], q);
        s = k4_block_dot(s, q, a[i].scales, rf_fp16_to_f32(a[i].d), rf_fp16_to_f32(a[i].dmin), &b[i]);
    }
    *out = s;
}

void rf_vec_dot_q5_K(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q5_K *a = w;
    const rf_block_q8_K *b = x;
    uint8_t q[256];
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        rf_q5_K_unpack(&a[i], q);
        s = k4_block_dot(s, q, a[i].scales, rf_fp16_to_f32(a[i].d), rf_fp16_to_f32(a[i].dmin), &b[i]);
    }
    *out = s;
}

void rf_vec_dot_q6_K(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q6_K *a = w;
    const rf_block_q8_K *b = x;
    int8_t q[256];
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        rf_q6_K_unpack(&a[i], q);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int t = 0;
            for (int l = 0; l < 16; l++) t += q[16 * j + l] * b[i].qs[16 * j + l];
            isum += a[i].scales[j] * t;
        }
        s = rf_kq_accum(s, q8k_d(&b[i]), rf_fp16_to_f32(a[i].d), isum, 0.0f, 0);
    }
    *out = s;
}

/* ---- further types (scalar only) ---- */

/* IQ4_XS x Q8_K: 8 sub-blocks of 32 with 6-bit scales (minus 32) times the f16 super scale. */
void rf_vec_dot_iq4_xs(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_iq4_xs *a = w;
    const rf_block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((a[i].scales_h >> (2 * ib)) & 3) << 4);
            const uint8_t *qs = a[i].qs + 16 * ib;
            const int8_t *q8 = b[i].qs + 32 * ib;
            int t = 0;
            for (int j = 0; j < 16; j++) t += k_iq4nl[qs[j] & 0xF] * q8[j] + k_iq4nl[qs[j] >> 4] * q8[j + 16];
            isum += (ls - 32) * t;
        }
        s = rf_kq_accum(s, q8k_d(&b[i]), rf_fp16_to_f32(a[i].d), isum, 0.0f, 0);
    }
    *out = s;
}

/* NVFP4 (64 = 4 x 16) x Q8_0 (32): sub-block s uses half s%2 of activation block 2i + s/2. */
void rf_vec_dot_nvfp4(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_nvfp4 *a = w;
    const rf_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int sb = 0; sb < 4; sb++) {
            const rf_block_q8_0 *y = &b[2 * i + sb / 2];
            const int8_t *q8 = y->qs + 16 * (sb % 2);
            int t = 0;
            for (int j = 0; j < 8; j++) {
                const uint8_t q = a[i].qs[8 * sb + j];
                t += k_fp4[q & 0xF] * q8[j] + k_fp4[q >> 4] * q8[j + 8];
            }
            s += rf_fp16_to_f32(y->d) * rf_ue4m3_to_f32_half(a[i].d[sb]) * (float)t;
        }
    }
    *out = s;
}

/* Q1_0 (128) x Q8_0: +-q8 by bit. */
void rf_vec_dot_q1_0(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q1_0 *a = w;
    const rf_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 128; i++) {
        float si = 0;
        for (int k = 0; k < 4; k++) {
            const rf_block_q8_0 *y = &b[4 * i + k];
            int t = 0;
            for (int j = 0; j < 32; j++) t += ((a[i].qs[4 * k + j / 8] >> (j % 8)) & 1) ? y->qs[j] : -y->qs[j];
            si += rf_fp16_to_f32(y->d) * (float)t;
        }
        s += rf_fp16_to_f32(a[i].d) * si;
    }
    *out = s;
}

/* Q2_0 (64) x Q8_0: (q - 1) * q8. */
void rf_vec_dot_q2_0(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_q2_0 *a = w;
    const rf_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 64; i++) {
        float si = 0;
        for (int k = 0; k < 2; k++) {
            const rf_block_q8_0 *y = &b[2 * i + k];
            int t = 0;
            for (int j = 0; j < 32; j++) {
                const int e = 32 * k + j;
                t += (((a[i].qs[e / 4] >> (2 * (e % 4))) & 3) - 1) * y->qs[j];
            }
            si += rf_fp16_to_f32(y->d) * (float)t;
        }
        s += rf_fp16_to_f32(a[i].d) * si;
    }
    *out = s;
}

/* Ternary x Q8_K: decode the trits (same order as dequantization) and sum t * q8. */
static inline int tq_trit_i(uint8_t byte, int pow3) {
    uint8_t q = (uint8_t)(byte * pow3);
    return (((uint16_t)q * 3) >> 8) - 1;
}

void rf_vec_dot_tq1_0(int64_t n, float *out, const void *w, const void *x) {
    static const int pow3[5] = {1, 3, 9, 27, 81};
    const rf_block_tq1_0 *a = w;
    const rf_block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const int8_t *q8 = b[i].qs;
        int isum = 0, e = 0;
        for (int p = 0; p < 5; p++)
            for (int m = 0; m < 32; m++) isum += tq_trit_i(a[i].qs[m], pow3[p]) * q8[e++];
        for (int p = 0; p < 5; p++)
            for (int m = 0; m < 16; m++) isum += tq_trit_i(a[i].qs[32 + m], pow3[p]) * q8[e++];
        for (int p = 0; p < 4; p++)
            for (int j = 0; j < 4; j++) isum += tq_trit_i(a[i].qh[j], pow3[p]) * q8[e++];
        s = rf_kq_accum(s, q8k_d(&b[i]), rf_fp16_to_f32(a[i].d), isum, 0.0f, 0);
    }
    *out = s;
}

void rf_vec_dot_tq2_0(int64_t n, float *out, const void *w, const void *x) {
    const rf_block_tq2_0 *a = w;
    const rf_block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const int8_t *q8 = b[i].qs;
        int isum = 0, e = 0;
        for (int j = 0; j < 64; j += 32)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) isum += (((a[i].qs[j + m] >> (2 * l)) & 3) - 1) * q8[e++];
        s = rf_kq_accum(s, q8k_d(&b[i]), rf_fp16_to_f32(a[i].d), isum, 0.0f, 0);
    }
    *out = s;
}
