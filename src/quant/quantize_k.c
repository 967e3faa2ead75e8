/* quant/quantize_k.c — reference quantizers of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K)
 * and ggml's scale searches they use (make_qx/make_q3/make_qkx2), one row of n elements (n a
 * multiple of 256); bytes equal to ggml's *_ref for the same input (see quantize.c). */
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
