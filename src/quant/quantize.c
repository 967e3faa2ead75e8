/* quant/quantize.c — reference quantizers f32 -> block formats, one row of n elements (n a
 * multiple of the block). The algorithms are ggml's *_ref ones (scale from the absolute max,
 * make_qkx2-style min/scale search for Q4_K/Q5_K/Q2_K, make_qx/make_q3 searches for Q6_K/Q3_K)
 * re-expressed here, so that our bytes equal ggml's for the same input (tests compare with gguf-py
 * where it has a quantizer). Inputs must be finite; NaN/inf in -> unspecified but memory-safe. */
#include <float.h>
#include <math.h>
#include <stdbool.h>

#include "quant/quant_impl.h"

/* Keep a*b+c as two roundings even under -march=native: the goldens (ggml, gguf-py) round twice. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define RF_GROUP_MAX_EPS 1e-15f

static const int8_t k_fp4[16] = RF_KVALUES_FP4_INIT;

/* Round half to even, as ggml's nearest_int (which is exact for |v| < 2^22; we clamp to that
 * range first so that huge or non-finite intermediates stay defined). */
static inline int nearest_int(float v) {
    if (!(v > -4194303.f)) v = -4194303.f; /* also NaN */
    if (v > 4194303.f) v = 4194303.f;
    return (int)lrintf(v);
}
/* C's float->int truncation, clamped to [lo, hi] (NaN -> lo) so that out-of-range values from
 * degenerate scales cannot invoke undefined behaviour; identical to a plain cast in range. */
static inline int trunc_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

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

/* ---- scale searches (K-quants) ---- */

/* Symmetric search for nmax-level signed quants with rmse weighting w = x^2 (rmse_type 1), trying
 * 18 scales around -nmax/max and keeping the one that maximises (sum w x l)^2 / sum w l^2.
 * L receives l + nmax in 0..2*nmax-1. Returns the scale. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < RF_GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
                L[i] = (int8_t)(l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's search: start from -nmax/max, then up to 5 passes of coordinate descent moving single
 * quants while the weighted fit improves. L receives l + nmax. Returns the scale. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < RF_GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = imax(-nmax, imin(nmax - 1, nearest_int(x[i] * sl2 / slx)));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric x ~ scale*L + min search (min <= 0): start from (max-min)/nmax, then nstep+1
 * candidate inverse scales (rmin + rdelta*is + nmax)/(max-min), each refined by weighted least
 * squares for (scale, min); keeps the lowest weighted error (|diff| if use_mad, else diff^2).
 * L receives 0..nmax; *the_min receives -min (>= 0). Returns the scale. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ---- K-quants ---- */

/* Packs element-order 2-bit values (0..3) into the Q2_K/Q3_K qs layout. */
static void pack_2bit(const uint8_t L[256], uint8_t qs[64]) {
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void rf_qz_q2_K(const float *x, void *dst, int64_t n) {
    rf_block_q2_K *y = dst;
    uint8_t L[256], Laux[16];
    float weights[16], mins[16], scales[16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = rf_f32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < 16; j++) y[i].scales[j] = 0;
            y[i].d = rf_f32_to_fp16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = rf_f32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = rf_f32_to_fp16(0.f);
        }
        /* re-quantize against the rounded scales */
        for (int j = 0; j < 16; j++) {
            const float d = rf_fp16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = rf_fp16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)imax(0, imin(3, nearest_int((x[16 * j + l] + dm) / d)));
        }
        pack_2bit(L, y[i].qs);
    }
}

void rf_qz_q3_K(const float *x, void *dst, int64_t n) {
    rf_block_q3_K *y = dst;
    int8_t L[256];
    float scales[16];
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float a = fabsf(scales[j]);
            if (a > amax) { amax = a; max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = imax(-32, imin(31, (int)(int8_t)nearest_int(iscale * scales[j]))) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = rf_f32_to_fp16(1 / iscale);
        } else {
            y[i].d = rf_f32_to_fp16(0.f);
        }
        int8_t sc[16];
        rf_q3_K_scales(y[i].scales, sc);
        for (int j = 0; j < 16; j++) {
            const float d = rf_fp16_to_f32(y[i].d) * sc[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(imax(-4, imin(3, nearest_int(x[16 * j + l] / d))) + 4);
        }
        /* high bit of element e goes to bit e/32 of hmask[e%32] */
        memset(y[i].hmask, 0, 32);
        uint8_t Lu[256];
        for (int e = 0; e < 256; e++) {
            int l = L[e];
            if (l > 3) {
                y[i].hmask[e % 32] |= (uint8_t)(1 << (e / 32));
                l -= 4;
            }
            Lu[e] = (uint8_t)l;
        }
        pack_2bit(Lu, y[i].qs);
    }
}

/* Packs 8 6-bit scales and mins into the 12-byte Q4_K/Q5_K field. */
static void pack_k4_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t out[12]) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] = ls[j];
            out[j + 4] = lm[j];
        } else {
            out[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            out[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            out[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per 32-element sub-block, make_qkx2 with weights
 * av_x + |x|; scales/mins to 6 bits against the super-block maxima; then re-quantize. */
static void kquant_4_5(const float *x, rf_half *dd, rf_half *ddmin, uint8_t scales12[12], uint8_t L[256],
                       int nmax, float rmin, int nstep) {
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        lm[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_min * mins[j]));
    }
    memset(scales12, 0, 12);
    pack_k4_scales(ls, lm, scales12);
    *dd = rf_f32_to_fp16(max_scale / 63.f);
    *ddmin = rf_f32_to_fp16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rf_k4_scale_min(j, scales12, &sc, &m);
        const float d = rf_fp16_to_f32(*dd) * sc;
        if (!d) continue;
        const float dm = rf_fp16_to_f32(*ddmin) * m;
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + l] + dm) / d)));
    }
}

void rf_qz_q4_K(const float *x, void *dst, int64_t n) {
    rf_block_q4_K *y = dst;
    uint8_t L[256];
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        rf_half d, dmin;
        kquant_4_5(x, &d, &dmin, y[i].scales, L, 15, -1.f, 20);
        y[i].d = d;
        y[i].dmin = dmin;
        uint8_t *q = y[i].qs;
        for (int j = 0; j < 256; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void rf_qz_q5_K(const float *x, void *dst, int64_t n) {
    rf_block_q5_K *y = dst;
    uint8_t L[256];
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        rf_half d, dmin;
        kquant_4_5(x, &d, &dmin, y[i].scales, L, 31, -0.5f, 15);
        y[i].d = d;
        y[i].dmin = dmin;
        memset(y[i].qh, 0, 32);
        uint8_t *ql = y[i].qs;
        uint8_t m1 = 1, m2 = 2;
        for (int nn = 0; nn < 256; nn += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[nn + j], l2 = L[nn + j + 32];
                if (l1 > 15) { l1 -= 16; y[i].qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; y[i].qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

void rf_qz_q6_K(const float *x, void *dst, int64_t n) {
    rf_block_q6_K *y = dst;
    int8_t L[256];
    float scales[16];
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) { max_abs_scale = fabsf(scale); max_scale = scale; }
        }
        if (max_abs_scale < RF_GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = rf_f32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < 16; j++) {
            float d = rf_fp16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + l] / d))) + 32);
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* Q8_K: d = max/-127 of the value of largest magnitude (f32 scale), q = nearest_int(x/d) capped
 * at 127, bsums = sums of 16 quants. An all-zero block is all zero (bsums included). */
void rf_qz_q8_K(const float *x, void *dst, int64_t n) {
    rf_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        float max = 0, amax = 0;
        for (int j = 0; j < 256; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < 256; j++) y[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
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
