/* quant/quantize.c — reference quantizers f32 -> block formats, one row of n elements (n a
 * multiple of the block). The algorithms are ggml's *_ref ones (scale from the absolute max,
 * make_qkx2-style min/scale search for Q4_K/Q5_K/Q2_K, make_qx/make_q3 searches for Q6_K/Q3_K)
 * re-expressed here, so that our bytes equal ggml's for the same input (tests compare with gguf-py
 * where it has a quantizer). Inputs must be finite; NaN/inf in -> unspecified but memory-safe.
 * The K-quants (Q2_K..Q8_K) and their scale searches are in quantize_k.c. */
#include <float.h>
#include <math.h>
#include <stdbool.h>

#include "quant/quant_impl.h"
#include "quant/quantize_round.h"

/* Keep a*b+c as two roundings even under -march=native: the goldens (ggml, gguf-py) round twice. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static const int8_t k_fp4[16] = RF_KVALUES_FP4_INIT;

/* ---- plain floats ---- */

void rf_qz_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

void rf_qz_f16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = rf_f32_to_fp16(src[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}

void rf_qz_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = rf_f32_to_bf16(src[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}

/* ---- 32-element blocks ---- */

/* Q4_0: d = (value of largest magnitude) / -8, so that value maps to q = 0 exactly. */
void rf_qz_q4_0(const float *x, void *dst, int64_t n) {
    rf_block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rf_f32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = trunc_clamp(x[j] * id + 8.5f, 0, 15);
            int q1 = trunc_clamp(x[j + 16] * id + 8.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q4_1: d = (max - min) / 15, m = min; q = trunc((x - min)/d + 0.5). */
void rf_qz_q4_1(const float *x, void *dst, int64_t n) {
    rf_block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rf_f32_to_fp16(d);
        y[i].m = rf_f32_to_fp16(min);
        for (int j = 0; j < 16; j++) {
            int q0 = trunc_clamp((x[j] - min) * id + 0.5f, 0, 15);
            int q1 = trunc_clamp((x[j + 16] - min) * id + 0.5f, 0, 15);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void rf_qz_q5_0(const float *x, void *dst, int64_t n) {
    rf_block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rf_f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = trunc_clamp(x[j] * id + 16.5f, 0, 31);
            int q1 = trunc_clamp(x[j + 16] * id + 16.5f, 0, 31);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
        }
        for (int k = 0; k < 4; k++) y[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

void rf_qz_q5_1(const float *x, void *dst, int64_t n) {
    rf_block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rf_f32_to_fp16(d);
        y[i].m = rf_f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = trunc_clamp((x[j] - min) * id + 0.5f, 0, 31);
            int q1 = trunc_clamp((x[j + 16] - min) * id + 0.5f, 0, 31);
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + 16);
        }
        for (int k = 0; k < 4; k++) y[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* Q8_0: d = amax / 127, q = roundf(x / d) (half away from zero). */
void rf_qz_q8_0(const float *x, void *dst, int64_t n) {
    rf_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rf_f32_to_fp16(d);
        for (int j = 0; j < 32; j++) y[i].qs[j] = (int8_t)trunc_clamp(roundf(x[j] * id), -127, 127);
    }
}

/* Q8_1: as Q8_0, plus s = d * sum(q) (f16), the cached term of the min correction in dots. */
void rf_qz_q8_1(const float *x, void *dst, int64_t n) {
    rf_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rf_f32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)trunc_clamp(roundf(x[j] * id), -127, 127);
            sum += y[i].qs[j];
        }
        y[i].s = rf_f32_to_fp16((float)sum * d);
    }
}

/* MXFP4: shared exponent e = floor(log2(amax)) - 2 (+127 bias), then each value to the nearest
 * doubled-E2M1 level (first of equals). e is clamped to 0..254 (ggml leaves tiny amax undefined). */
void rf_qz_mxfp4(const float *x, void *dst, int64_t n) {
    rf_block_mxfp4 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        int e = 0;
        if (amax > 0.0f) {
            float fe = floorf(log2f(amax)) - 2 + 127;
            e = fe < 0 ? 0 : fe > 254 ? 254 : (int)fe;
        }
        const float d = rf_e8m0_to_f32_half((uint8_t)e);
        y[i].e = (uint8_t)e;
        for (int j = 0; j < 32; j++) {
            int best = 0;
            float best_err = fabsf((float)k_fp4[0] * d - x[j]);
            for (int k = 1; k < 16; k++) {
                float err = fabsf((float)k_fp4[k] * d - x[j]);
                if (err < best_err) { best = k; best_err = err; }
            }
            if (j < 16) y[i].qs[j] = (uint8_t)best;
            else y[i].qs[j - 16] |= (uint8_t)(best << 4);
        }
    }
}

/* ---- ternary (TQ1_0, TQ2_0): d = amax, q = lroundf(x/d) in {-1,0,1} stored as 0..2 ---- */

static inline int trit(float v, float id) { return (int)lroundf(v * id) + 1; }

/* TQ1_0 packs 5 trits per byte as ceil(value * 256 / 243), the base-3 number read as a
 * fraction of 243 (so that decoding is a multiply and a shift): 32 bytes x 5 strides of 32,
 * 16 bytes x 5 strides of 16, then 4 bytes x 4 strides of 4 in qh. */
void rf_qz_tq1_0(const float *x, void *dst, int64_t n) {
    rf_block_tq1_0 *y = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 256; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rf_f32_to_fp16(d);
        for (int m = 0; m < 32; m++) {
            int q = 0;
            for (int k = 0; k < 5; k++) q = q * 3 + trit(x[m + 32 * k], id);
            y[i].qs[m] = (uint8_t)((q * 256 + 242) / 243);
        }
        x += 160;
        for (int m = 0; m < 16; m++) {
            int q = 0;
            for (int k = 0; k < 5; k++) q = q * 3 + trit(x[m + 16 * k], id);
            y[i].qs[32 + m] = (uint8_t)((q * 256 + 242) / 243);
        }
        x += 80;
        for (int j = 0; j < 4; j++) {
            int q = 0;
            for (int k = 0; k < 4; k++) q = q * 3 + trit(x[j + 4 * k], id);
            q *= 3; /* the first trit goes to the most significant place */
            y[i].qh[j] = (uint8_t)((q * 256 + 242) / 243);
        }
        x += 16;
    }
}

void rf_qz_tq2_0(const float *x, void *dst, int64_t n) {
    rf_block_tq2_0 *y = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 256; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rf_f32_to_fp16(d);
        for (int j = 0; j < 64; j += 32, x += 128)
            for (int m = 0; m < 32; m++) {
                int q = 0;
                for (int k = 0; k < 4; k++) q |= (trit(x[m + 32 * k], id) & 3) << (2 * k);
                y[i].qs[j + m] = (uint8_t)q;
            }
    }
}

/* ---- IQ4_NL / IQ4_XS: non-linear 16-level codebook ---- */

static const int8_t k_iq4nl[16] = RF_KVALUES_IQ4NL_INIT;

/* Index of the codebook level nearest to x (levels ascending; ties to the lower one unless x is
 * strictly closer to the upper). */
static int best_index_iq4(float x) {
    const int8_t *v = k_iq4nl;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < v[mid]) hi = mid;
        else lo = mid;
    }
    return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

/* ggml's quantize_row_iq4_nl_impl without importance weights (weights x^2) and ntry = 7, i.e.
 * what quantize_iq4_nl / quantize_iq4_xs (llama-quantize) produce: per 32-block, a weighted
 * least-squares scale refined over 15 trial inverse scales (itry + v[0]) / max; for a super-block
 * of 256 (IQ4_XS) the block scales become 6-bit multiples of -max_scale/32 and the quants are
 * re-picked against them. n_sub = super_block / 32 (1 for IQ4_NL). */
static void iq4_impl(int n_sub, const float *x, rf_half *dh, uint8_t *q4, uint16_t *scales_h, uint8_t *scales_l) {
    const int ntry = 7;
    uint8_t L[256];
    float scales[8], weight[32];
    memset(q4, 0, (size_t)n_sub * 16);
    *dh = rf_f32_to_fp16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < n_sub; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        for (int j = 0; j < 32; j++) weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            if (fabsf(xb[j]) > amax) { amax = fabsf(xb[j]); max = xb[j]; }
        }
        if (amax < RF_GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / k_iq4nl[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            int l = best_index_iq4(id * xb[j]);
            Lb[j] = (uint8_t)l;
            float q = k_iq4nl[l], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; itry++) {
            id = (itry + k_iq4nl[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                int l = best_index_iq4(id * xb[j]);
                float q = k_iq4nl[l], w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if (fabsf(d) > amax_scale) { amax_scale = fabsf(d); max_scale = d; }
    }
    if (n_sub > 1) {
        *scales_h = 0;
        float d = -max_scale / 32;
        *dh = rf_f32_to_fp16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < n_sub; ib++) {
            int l = imax(-32, imin(31, nearest_int(id * scales[ib])));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)best_index_iq4(idl * x[32 * ib + j]);
            l += 32;
            if (ib % 2 == 0) scales_l[ib / 2] = (uint8_t)(l & 0xF);
            else scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4);
            *scales_h |= (uint16_t)((l >> 4) << (2 * (ib % 8)));
        }
    } else {
        *dh = rf_f32_to_fp16(scales[0]);
        float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)best_index_iq4(id * x[j]);
    }
    for (int i = 0; i < n_sub; i++)
        for (int j = 0; j < 16; j++) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void rf_qz_iq4_nl(const float *x, void *dst, int64_t n) {
    rf_block_iq4_nl *y = dst;
    for (int64_t i = 0; i < n / 32; i++) iq4_impl(1, x + 32 * i, &y[i].d, y[i].qs, NULL, NULL);
}

void rf_qz_iq4_xs(const float *x, void *dst, int64_t n) {
    rf_block_iq4_xs *y = dst;
    for (int64_t i = 0; i < n / 256; i++) {
        uint16_t sh = 0;
        iq4_impl(8, x + 256 * i, &y[i].d, y[i].qs, &sh, y[i].scales_l);
        y[i].scales_h = sh;
    }
}

/* NVFP4: per 16 values a UE4M3 scale amax/6, then each value to the nearest doubled-E2M1 level. */
void rf_qz_nvfp4(const float *x, void *dst, int64_t n) {
    rf_block_nvfp4 *y = dst;
    for (int64_t i = 0; i < n / 64; i++) {
        for (int s = 0; s < 4; s++) {
            const float *xb = x + 64 * i + 16 * s;
            float amax = 0.0f;
            for (int j = 0; j < 16; j++) amax = fmaxf(amax, fabsf(xb[j]));
            const uint8_t ue = rf_f32_to_ue4m3(amax / 6.0f);
            y[i].d[s] = ue;
            const float d = rf_ue4m3_to_f32_half(ue);
            for (int j = 0; j < 8; j++) {
                int q[2];
                for (int h = 0; h < 2; h++) {
                    const float v = xb[j + 8 * h];
                    int best = 0;
                    float best_err = fabsf((float)k_fp4[0] * d - v);
                    for (int k = 1; k < 16; k++) {
                        float err = fabsf((float)k_fp4[k] * d - v);
                        if (err < best_err) { best = k; best_err = err; }
                    }
                    q[h] = best;
                }
                y[i].qs[8 * s + j] = (uint8_t)(q[0] | (q[1] << 4));
            }
        }
    }
}

/* Q1_0: d = mean |x| of 128 values, bit j set where x_j >= 0. */
void rf_qz_q1_0(const float *x, void *dst, int64_t n) {
    rf_block_q1_0 *y = dst;
    for (int64_t i = 0; i < n / 128; i++, x += 128) {
        float sum_abs = 0.0f;
        for (int j = 0; j < 128; j++) sum_abs += fabsf(x[j]);
        y[i].d = rf_f32_to_fp16(sum_abs / 128);
        memset(y[i].qs, 0, 16);
        for (int j = 0; j < 128; j++)
            if (x[j] >= 0.0f) y[i].qs[j / 8] |= (uint8_t)(1 << (j % 8));
    }
}

/* Q2_0: d = amax of 64 values, q = clamp(roundf(x/d) + 1, 0, 3), x = (q - 1) d. */
void rf_qz_q2_0(const float *x, void *dst, int64_t n) {
    rf_block_q2_0 *y = dst;
    for (int64_t i = 0; i < n / 64; i++, x += 64) {
        float amax = 0.0f;
        for (int j = 0; j < 64; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
        y[i].d = rf_f32_to_fp16(amax);
        memset(y[i].qs, 0, 16);
        for (int j = 0; j < 64; j++) {
            int q = trunc_clamp(roundf(x[j] * id), -1, 2) + 1;
            y[i].qs[j / 4] |= (uint8_t)(q << (2 * (j % 4)));
        }
    }
}
