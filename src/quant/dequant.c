/* quant/dequant.c — block formats to f32 (one row of n elements, n a multiple of the block).
 * The arithmetic order per element matches ggml's reference dequantizers (e.g. Q4_K:
 * (d*sc)*q - (dmin*m)), so results are bit-identical to ggml and to gguf-py's numpy versions. */
#include "quant/quant_impl.h"

/* Keep a*b+c as two roundings even under -march=native: the goldens (ggml, gguf-py) round twice. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static const int8_t k_fp4[16] = RF_KVALUES_FP4_INIT;
static const int8_t k_iq4nl[16] = RF_KVALUES_IQ4NL_INIT;

/* ---- plain element types ---- */

void rf_dq_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

void rf_dq_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = rf_fp16_to_f32(h);
    }
}

void rf_dq_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = rf_bf16_to_f32(h);
    }
}

void rf_dq_f64(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, s + 8 * i, 8);
        dst[i] = (float)v;
    }
}

#define RF_INT_TO_F32(name, T)                                         \
    void rf_dq_##name(const void *src, float *dst, int64_t n) { \
        const uint8_t *s = src;                                        \
        for (int64_t i = 0; i < n; i++) {                              \
            T v;                                                       \
            memcpy(&v, s + sizeof(T) * i, sizeof(T));                  \
            dst[i] = (float)v;                                         \
        }                                                              \
    }
RF_INT_TO_F32(i8, int8_t)
RF_INT_TO_F32(i16, int16_t)
RF_INT_TO_F32(i32, int32_t)
RF_INT_TO_F32(i64, int64_t)

/* ---- 32-element blocks ---- */

void rf_dq_q4_0(const void *src, float *y, int64_t n) {
    const rf_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rf_fp16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void rf_dq_q4_1(const void *src, float *y, int64_t n) {
    const rf_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rf_fp16_to_f32(b[i].d), m = rf_fp16_to_f32(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

static inline uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void rf_dq_q5_0(const void *src, float *y, int64_t n) {
    const rf_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rf_fp16_to_f32(b[i].d);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)(q0 - 16) * d;
            y[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

void rf_dq_q5_1(const void *src, float *y, int64_t n) {
    const rf_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rf_fp16_to_f32(b[i].d), m = rf_fp16_to_f32(b[i].m);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            y[j] = (float)q0 * d + m;
            y[j + 16] = (float)q1 * d + m;
        }
    }
}

void rf_dq_q8_0(const void *src, float *y, int64_t n) {
    const rf_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rf_fp16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

/* Q8_1 values are d*q; the s field is a cached d*sum(q) used only by dot products. */
void rf_dq_q8_1(const void *src, float *y, int64_t n) {
    const rf_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rf_fp16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

void rf_dq_mxfp4(const void *src, float *y, int64_t n) {
    const rf_block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rf_e8m0_to_f32_half(b[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)k_fp4[b[i].qs[j] & 0xF] * d;
            y[j + 16] = (float)k_fp4[b[i].qs[j] >> 4] * d;
        }
    }
}

void rf_dq_nvfp4(const void *src, float *y, int64_t n) {
    const rf_block_nvfp4 *b = src;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int s = 0; s < 4; s++, y += 16) {
            const float d = rf_ue4m3_to_f32_half(b[i].d[s]);
            for (int j = 0; j < 8; j++) {
                y[j] = (float)k_fp4[b[i].qs[8 * s + j] & 0xF] * d;
                y[j + 8] = (float)k_fp4[b[i].qs[8 * s + j] >> 4] * d;
            }
        }
    }
}

void rf_dq_iq4_nl(const void *src, float *y, int64_t n) {
    const rf_block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / 32; i++, y += 32) {
        const float d = rf_fp16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)k_iq4nl[b[i].qs[j] & 0xF];
            y[j + 16] = d * (float)k_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

void rf_dq_iq4_xs(const void *src, float *y, int64_t n) {
    const rf_block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = rf_fp16_to_f32(b[i].d);
        const uint8_t *qs = b[i].qs;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            int ls = ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b[i].scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)k_iq4nl[qs[j] & 0xF];
                y[j + 16] = dl * (float)k_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* Ternary: a byte holds 5 (or 4) base-3 digits as a fixed-point fraction of 256; digit k is
 * recovered as ((uint8)(byte * 3^k) * 3) >> 8. */
static inline float tq_trit(uint8_t byte, int pow3, float d) {
    uint8_t q = (uint8_t)(byte * pow3);
    int xi = ((uint16_t)q * 3) >> 8;
    return (float)(xi - 1) * d;
}

void rf_dq_tq1_0(const void *src, float *y, int64_t n) {
    static const int pow3[5] = {1, 3, 9, 27, 81};
    const rf_block_tq1_0 *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = rf_fp16_to_f32(b[i].d);
        for (int p = 0; p < 5; p++)
            for (int m = 0; m < 32; m++) *y++ = tq_trit(b[i].qs[m], pow3[p], d);
        for (int p = 0; p < 5; p++)
            for (int m = 0; m < 16; m++) *y++ = tq_trit(b[i].qs[32 + m], pow3[p], d);
        for (int p = 0; p < 4; p++)
            for (int j = 0; j < 4; j++) *y++ = tq_trit(b[i].qh[j], pow3[p], d);
    }
}

void rf_dq_tq2_0(const void *src, float *y, int64_t n) {
    const rf_block_tq2_0 *b = src;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = rf_fp16_to_f32(b[i].d);
        for (int j = 0; j < 64; j += 32)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) *y++ = (float)(((b[i].qs[j + m] >> (2 * l)) & 3) - 1) * d;
    }
}

void rf_dq_q1_0(const void *src, float *y, int64_t n) {
    const rf_block_q1_0 *b = src;
    for (int64_t i = 0; i < n / 128; i++, y += 128) {
        const float d = rf_fp16_to_f32(b[i].d);
        for (int j = 0; j < 128; j++) y[j] = ((b[i].qs[j / 8] >> (j % 8)) & 1) ? d : -d;
    }
}

void rf_dq_q2_0(const void *src, float *y, int64_t n) {
    const rf_block_q2_0 *b = src;
    for (int64_t i = 0; i < n / 64; i++, y += 64) {
        const float d = rf_fp16_to_f32(b[i].d);
        for (int j = 0; j < 64; j++) y[j] = (float)(((b[i].qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

/* ---- K-quants: unpack helpers (also used by the scalar dot kernels) ---- */

/* Q2_K/Q3_K/Q6_K share a layout: element e = 128h + 32k + l (h half, k quarter, l 0..31) lives in
 * byte 32h + l of the 64-byte low-bit field, at bit pair k. Loops are written without divisions so
 * that these helpers (used by dequantization and the scalar dots) vectorize. */
void rf_q2_K_unpack(const rf_block_q2_K *b, uint8_t q[256]) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) q[128 * h + 32 * k + l] = (b->qs[32 * h + l] >> (2 * k)) & 3;
}

void rf_q3_K_scales(const uint8_t p[12], int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (p[j] & 0xF) : (p[j - 8] >> 4);
        int hi = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* The high bit of element e is bit e/32 of hmask[e%32]; a CLEAR bit means "subtract 4". */
void rf_q3_K_unpack(const rf_block_q3_K *b, int8_t q[256]) {
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                int lo = (b->qs[32 * h + l] >> (2 * k)) & 3;
                int hbit = (b->hmask[l] >> (4 * h + k)) & 1;
                q[128 * h + 32 * k + l] = (int8_t)(lo - 4 + 4 * hbit);
            }
}

/* Q4_K: in each 64 elements, the first 32 are the low nibbles of 32 bytes, the next 32 the high. */
void rf_q4_K_unpack(const rf_block_q4_K *b, uint8_t q[256]) {
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            q[64 * g + l] = b->qs[32 * g + l] & 0xF;
            q[64 * g + 32 + l] = b->qs[32 * g + l] >> 4;
        }
}

/* Q5_K: as Q4_K plus the 5th bit of element e in bit e/32 of qh[e%32]. */
void rf_q5_K_unpack(const rf_block_q5_K *b, uint8_t q[256]) {
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            q[64 * g + l] = (uint8_t)((b->qs[32 * g + l] & 0xF) | (((b->qh[l] >> (2 * g)) & 1) << 4));
            q[64 * g + 32 + l] = (uint8_t)((b->qs[32 * g + l] >> 4) | (((b->qh[l] >> (2 * g + 1)) & 1) << 4));
        }
}

/* Q6_K: in each half h of 128, quarter k takes the low (k<2) or high nibble of ql[64h + l + 32*(k&1)]
 * and bits 2k..2k+1 of qh[32h + l]. */
void rf_q6_K_unpack(const rf_block_q6_K *b, int8_t q[256]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        int8_t *y = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            y[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            y[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            y[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            y[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

/* ---- K-quants: dequantize ---- */

void rf_dq_q2_K(const void *src, float *y, int64_t n) {
    const rf_block_q2_K *b = src;
    uint8_t q[256];
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = rf_fp16_to_f32(b[i].d), dmin = rf_fp16_to_f32(b[i].dmin);
        rf_q2_K_unpack(&b[i], q);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)(b[i].scales[j] & 0xF), ml = dmin * (float)(b[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) y[16 * j + l] = dl * (float)q[16 * j + l] - ml;
        }
    }
}

void rf_dq_q3_K(const void *src, float *y, int64_t n) {
    const rf_block_q3_K *b = src;
    int8_t q[256], sc[16];
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = rf_fp16_to_f32(b[i].d);
        rf_q3_K_scales(b[i].scales, sc);
        rf_q3_K_unpack(&b[i], q);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)sc[j];
            for (int l = 0; l < 16; l++) y[16 * j + l] = dl * (float)q[16 * j + l];
        }
    }
}

void rf_dq_q4_K(const void *src, float *y, int64_t n) {
    const rf_block_q4_K *b = src;
    uint8_t q[256];
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = rf_fp16_to_f32(b[i].d), dmin = rf_fp16_to_f32(b[i].dmin);
        rf_q4_K_unpack(&b[i], q);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            rf_k4_scale_min(j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int l = 0; l < 32; l++) y[32 * j + l] = d1 * (float)q[32 * j + l] - m1;
        }
    }
}

void rf_dq_q5_K(const void *src, float *y, int64_t n) {
    const rf_block_q5_K *b = src;
    uint8_t q[256];
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = rf_fp16_to_f32(b[i].d), dmin = rf_fp16_to_f32(b[i].dmin);
        rf_q5_K_unpack(&b[i], q);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            rf_k4_scale_min(j, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int l = 0; l < 32; l++) y[32 * j + l] = d1 * (float)q[32 * j + l] - m1;
        }
    }
}

void rf_dq_q6_K(const void *src, float *y, int64_t n) {
    const rf_block_q6_K *b = src;
    int8_t q[256];
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        const float d = rf_fp16_to_f32(b[i].d);
        rf_q6_K_unpack(&b[i], q);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)b[i].scales[j];
            for (int l = 0; l < 16; l++) y[16 * j + l] = dl * (float)q[16 * j + l];
        }
    }
}

void rf_dq_q8_K(const void *src, float *y, int64_t n) {
    const rf_block_q8_K *b = src;
    for (int64_t i = 0; i < n / 256; i++, y += 256) {
        float d;
        memcpy(&d, &b[i].d, 4);
        for (int j = 0; j < 256; j++) y[j] = d * (float)b[i].qs[j];
    }
}
