/* gpu_twin.h — the CPU twin of the GPU's int8-x quantized products (GEMVs, gemv_mt, MMQ: x rounded
 * by rf_k_quantize_x per 32 with an f16 scale; the MMQ's K-quants per 256, check_twin_mmq): for the rounded x and the exact weights the
 * exact product in double, and a float-order bound per output, so the GPU's outputs and the twin
 * differ by float order alone (test_gpu_gemvn's header states the model); and that of the BLAS
 * route, whose operands are those rounded further to f16 (check_twin_blas). */
#ifndef RF_GPU_TWIN_H
#define RF_GPU_TWIN_H

#include "gpu_test_common.h"

#include "core/knobs.h"
#include "rocmforge/quant.h"

/* the types with a twin: those whose integer sums the kernels form from x rounded this way.
 * MXFP4 as Q8_0: a block's sum of doubled E2M1 values times x's int8 is an exact integer, its
 * scale 2^(e - 128) times x's f16 scale an exact product (a power of two; random_weights draws
 * e in 120..129, far from under- and overflow), so the block's one rounding and the sum over
 * blocks are all the float error, as the generic bound below counts it for Q8_0 */
static inline bool twin_has(rf_type t) {
    return t == RF_TYPE_Q4_0 || t == RF_TYPE_Q8_0 || t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K ||
           t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_0 || t == RF_TYPE_Q5_1 || t == RF_TYPE_MXFP4;
}

/* x rounded per blk elements: d = amax / 127, kept as f16 where f16 (and within its range), q =
 * rint(x * (127 / amax)) in f32, x' = d q */
static inline void round_blocks(const float *x, float *xr, int64_t n, int blk, bool f16) {
    for (int64_t b = 0; b < n / blk; b++) {
        const float *xb = x + b * blk;
        float amax = 0.0f;
        for (int k = 0; k < blk; k++) amax = fmaxf(amax, fabsf(xb[k]));
        const float d32 = amax / 127.0f, d16 = f16 ? rf_fp16_to_f32(rf_f32_to_fp16(d32)) : d32;
        const float d = d16 <= 65504.0f ? d16 : d32, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int k = 0; k < blk; k++) xr[b * blk + k] = d * nearbyintf(xb[k] * id);
    }
}

/* x rounded as the GPU's rf_k_quantize_x rounds it (rf_quantize_elem): per 32, d = f16(amax / 127)
 * (f32 beyond f16's range) */
static inline void round_like_gpu(const float *x, float *xr, int64_t n) { round_blocks(x, xr, n, 32, true); }

/* ggml's q8_1 s of one block of x as rf_k_quantize_x makes it for Q4_1 / Q5_1 weights:
 * f16(amax / 127 * sum q) (f32 beyond f16's range) */
static inline double q81_s(const float *xb) {
    float amax = 0.0f;
    for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(xb[k]));
    const float d32 = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sq = 0;
    for (int k = 0; k < 32; k++) sq += (int)nearbyintf(xb[k] * id);
    const float s32 = d32 * (float)sq, s16 = rf_fp16_to_f32(rf_f32_to_fp16(s32));
    return fabsf(s16) <= 65504.0f ? s16 : s32;
}

/* Q4_K / Q5_K sub-block j's 6-bit scale and min (ggml's 12-byte field at q) */
static inline void twin_k4_sm(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The twin of y[t, o] in double and its float-order bound (see the header): wf the dequantized
 * row, wrow its bytes, x / xr token t's x and rounded x. */
static inline void twin_one(rf_type t, const float *wf, const uint8_t *wrow, const float *x, const float *xr, int64_t n_in,
                     double *twin, double *bound) {
    const int64_t nb = n_in / 32;
    double s = 0.0, a = 0.0;
    for (int64_t k = 0; k < n_in; k++) {
        s += (double)wf[k] * xr[k];
        a += fabs((double)wf[k] * xr[k]);
    }
    if (t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K) { /* cm (sum x - sum x'), and the terms' sizes */
        const int bytes = t == RF_TYPE_Q4_K ? 144 : 176;
        const double c = t == RF_TYPE_Q4_K ? 8.0 : 16.0;
        /* a keeps sum |w x'|: the dequantized d sc q - dmin m may round in f32 */
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *sb = wrow + (b / 8) * bytes;
            uint16_t hd, hm;
            memcpy(&hd, sb, 2), memcpy(&hm, sb + 2, 2);
            const double d = rf_fp16_to_f32(hd), dmin = rf_fp16_to_f32(hm);
            int sc, m;
            twin_k4_sm((int)(b % 8), sb + 4, &sc, &m);
            double sx = 0.0, sxr = 0.0, ax = 0.0, axr = 0.0;
            for (int k = 0; k < 32; k++) {
                sx += x[b * 32 + k], sxr += xr[b * 32 + k];
                ax += fabs(x[b * 32 + k]), axr += fabs(xr[b * 32 + k]);
            }
            s += (c * d * sc - dmin * m) * (sx - sxr);
            /* |d sc sum (q - c) x'| <= |d sc| c_max sum |x'| (|q - c| <= c); the cm term */
            a += fabs(d * sc) * c * axr + (fabs(c * d * sc) + fabs(dmin * m)) * ax;
        }
    }
    if (t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_1) { /* d dx sum q x + m s: s is q8_1's, not sum x' */
        const int bytes = t == RF_TYPE_Q4_1 ? 20 : 24;
        const double qmax = t == RF_TYPE_Q4_1 ? 15.0 : 31.0;
        for (int64_t b = 0; b < nb; b++) {
            uint16_t hd, hm;
            memcpy(&hd, wrow + b * bytes, 2), memcpy(&hm, wrow + b * bytes + 2, 2);
            const double d = rf_fp16_to_f32(hd), m = rf_fp16_to_f32(hm), sq = q81_s(x + b * 32);
            double sxr = 0.0, axr = 0.0;
            for (int k = 0; k < 32; k++) sxr += xr[b * 32 + k], axr += fabs(xr[b * 32 + k]);
            s += m * (sq - sxr);
            a += fabs(d) * qmax * axr + fabs(m * sq);
        }
    }
    const double u = ldexp(1.0, -24), n = (double)(nb + 16);
    *twin = s;
    *bound = n * u / (1.0 - n * u) * a;
}

/* keeps in *worst / *bad the largest share of its bound bd an output g at index at takes from
 * its twin value tw (a NaN output counts as worst: the comparison fails) */
static inline void twin_keep_worst(double g, double tw, double bd, int64_t at, double *worst, int64_t *bad) {
    const double e = fabs(g - tw), r = bd > 0 ? e / bd : (e > 0 ? INFINITY : 0);
    if (!(r <= *worst)) *worst = r, *bad = at;
}

/* prints the worst share (label: which twin) and fails the test where an output left its bound */
static inline void twin_verdict(const char *what, const char *label, const float *got, int64_t n_out, double worst,
                                int64_t bad) {
    fprintf(stderr, "  %-48s %s: worst %.3g of the float-order bound\n", what, label, worst);
    if (!(worst <= 1.0)) fprintf(stderr, "  element %lld (token %lld, row %lld): got %.9g\n", (long long)bad,
                                 (long long)(bad / n_out), (long long)(bad % n_out), got[bad]);
    assert_true(worst <= 1.0);
}

/* every element of got within its bound of the twin (printing the worst element's share of it);
 * bias (may be NULL): n_out values the kernel adds to each output in f32 (one more rounding: u
 * times |twin + bias| on the bound); *rounded_rel: the twin's rel. L2 against want, the f32-x
 * reference (the rounding's own error) */
static inline void check_twin_b(const char *what, rf_type t, const float *got, const uint8_t *w, const float *x,
                                const float *want, const float *bias, int64_t nt, int64_t n_in, int64_t n_out,
                                double *rounded_rel) {
    size_t rb;
    assert_int_equal(rf_row_size(t, n_in, &rb), RF_OK);
    float *wf = host_f32(n_in), *xr = host_f32(nt * n_in);
    for (int64_t k = 0; k < nt; k++) round_like_gpu(x + k * n_in, xr + k * n_in, n_in);
    double worst = 0.0, d2 = 0.0, y2 = 0.0;
    int64_t bad = -1;
    for (int64_t o = 0; o < n_out; o++) {
        assert_int_equal(rf_dequantize_row(t, w + o * rb, wf, n_in), RF_OK);
        for (int64_t k = 0; k < nt; k++) {
            double tw, bd;
            twin_one(t, wf, w + o * rb, x + k * n_in, xr + k * n_in, n_in, &tw, &bd);
            if (bias) { /* f32 (dot + b): one rounding of a sum within bd of tw + b */
                tw += bias[o];
                bd += ldexp(1.0, -24) * (fabs(tw) + bd) * 1.0000001;
            }
            const double yw = want[k * n_out + o];
            d2 += (tw - yw) * (tw - yw), y2 += yw * yw;
            twin_keep_worst(got[k * n_out + o], tw, bd, k * n_out + o, &worst, &bad);
        }
    }
    twin_verdict(what, "twin", got, n_out, worst, bad);
    *rounded_rel = y2 > 0.0 ? sqrt(d2 / y2) : 0.0;
    free(wf), free(xr);
}

/* The twin of the BLAS route (rf_gpu_gemm: W dequantized to f16, x through the int8 rounding
 * then to f16, cuBLAS with f32 accumulation): y = sum f16(w) f16(x') exactly (each product is
 * exact in f32), bounded by gamma(n_in + 16) times the sum of |terms| (any summation order: the
 * library picks it), plus, for the types whose dequantized value is more than one product of a
 * scale and a small integer (all but Q4_0, Q5_0, Q8_0, MXFP4, whose f32 value and its f16
 * rounding are then the CPU's bits), one f16 ulp (2^-10 relative) per term: the GPU's f32 value
 * may differ from the CPU's in its last bit and round to the neighbouring f16. */
static inline void check_twin_blas(const char *what, rf_type t, const float *got, const uint8_t *w, const float *x,
                                   int64_t nt, int64_t n_in, int64_t n_out) {
    size_t rb;
    assert_int_equal(rf_row_size(t, n_in, &rb), RF_OK);
    float *wf = host_f32(n_in), *xr = host_f32(nt * n_in);
    for (int64_t k = 0; k < nt; k++) round_like_gpu(x + k * n_in, xr + k * n_in, n_in);
    for (int64_t i = 0; i < nt * n_in; i++) xr[i] = rf_fp16_to_f32(rf_f32_to_fp16(xr[i]));
    const bool exact = t == RF_TYPE_Q4_0 || t == RF_TYPE_Q5_0 || t == RF_TYPE_Q8_0 || t == RF_TYPE_MXFP4;
    const double u = ldexp(1.0, -24), n = (double)(n_in + 16), g = n * u / (1.0 - n * u);
    double worst = 0.0;
    int64_t bad = -1;
    for (int64_t o = 0; o < n_out; o++) {
        assert_int_equal(rf_dequantize_row(t, w + o * rb, wf, n_in), RF_OK);
        for (int64_t i = 0; i < n_in; i++) wf[i] = rf_fp16_to_f32(rf_f32_to_fp16(wf[i]));
        for (int64_t k = 0; k < nt; k++) {
            double sum = 0.0, a = 0.0;
            for (int64_t i = 0; i < n_in; i++) {
                const double p = (double)wf[i] * xr[k * n_in + i];
                sum += p, a += fabs(p);
            }
            const double bd = g * a + (exact ? 0.0 : ldexp(1.0, -10) * a);
            twin_keep_worst(got[k * n_out + o], sum, bd, k * n_out + o, &worst, &bad);
        }
    }
    twin_verdict(what, "twin (f16 operands)", got, n_out, worst, bad);
    free(wf), free(xr);
}

/* ---- the MMQ's dense K-quant products (rf_gpu_mmq: Q4_K, Q5_K, Q6_K) take x per 256 ----------
 * rf_k_quantize_x256: per 256 elements d = amax / 127 in f32, q = rint(x * (127 / amax)) in f32,
 * x' = d q; the kernel sums each super-block's integer products exactly and scales once a
 * super-block: y_s = d_x (d I1 - dmin I2) (Q6_K: d d_x I1) with I1 = sum_j sc_j sum_k q_k qx_k,
 * I2 = sum_j m_j sum_k qx_k, which equals sum_k (d sc_j q_k - dmin m_j) x'_k exactly. Its float
 * error: I1's conversion, the two products, the difference and the product by d_x (4 roundings a
 * super-block term, each relative to at most |d_x| (|d I1| + |dmin I2|) <= sum_k (|d sc_j q_k x'_k|
 * + |dmin m_j x'_k|)), then the running sum over the n_in / 256 super-blocks and the sum of at
 * most 8 splits: gamma(n_in / 256 + 12) <= gamma(n_in / 32 + 16) (twin_one's n) times that sum. */
static inline bool twin_x256(rf_type t) { return t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K; }


/* element e of a K-quant super-block sb: its integer q (Q6_K: q - 32) and its scale's and min's
 * factors (w = fd q - fm exactly: Q4_K / Q5_K fd = d sc_j, fm = dmin m_j; Q6_K fd = d sc16, fm 0) */
static inline void twin_k_elem(rf_type t, const uint8_t *sb, int e, int *q, double *fd, double *fm) {
    if (t == RF_TYPE_Q6_K) {
        const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
        const uint8_t byte = sb[64 * h + l + 32 * (k & 1)];
        const int lo = k < 2 ? (byte & 0xF) : (byte >> 4), hi = (sb[128 + 32 * h + l] >> (2 * k)) & 3;
        uint16_t hd;
        memcpy(&hd, sb + 208, 2);
        *q = (lo | (hi << 4)) - 32;
        *fd = (double)rf_fp16_to_f32(hd) * (int8_t)sb[192 + e / 16], *fm = 0.0;
        return;
    }
    const int j = e / 32, l = e % 32, qo = t == RF_TYPE_Q4_K ? 16 : 48;
    const uint8_t byte = sb[qo + 32 * (j / 2) + l];
    int v = j % 2 ? byte >> 4 : byte & 0xF;
    if (t == RF_TYPE_Q5_K) v |= ((sb[16 + l] >> j) & 1) << 4;
    uint16_t hd, hm;
    memcpy(&hd, sb, 2), memcpy(&hm, sb + 2, 2);
    int sc, m;
    twin_k4_sm(j, sb + 4, &sc, &m);
    *q = v;
    *fd = (double)rf_fp16_to_f32(hd) * sc, *fm = (double)rf_fp16_to_f32(hm) * m;
}

/* every element of got within its bound (above) of the exact product of x rounded per 256 */
static inline void check_twin_x256(const char *what, rf_type t, const float *got, const uint8_t *w, const float *x,
                                   const float *want, int64_t nt, int64_t n_in, int64_t n_out, double *rounded_rel) {
    size_t rb;
    assert_int_equal(rf_row_size(t, n_in, &rb), RF_OK);
    const int sbb = t == RF_TYPE_Q4_K ? 144 : t == RF_TYPE_Q5_K ? 176 : 210;
    float *xr = host_f32(nt * n_in);
    for (int64_t k = 0; k < nt; k++) round_blocks(x + k * n_in, xr + k * n_in, n_in, 256, false);
    const double u = ldexp(1.0, -24), n = (double)(n_in / 32 + 16), g = n * u / (1.0 - n * u);
    double *wv = malloc((size_t)n_in * sizeof *wv), *wa = malloc((size_t)n_in * sizeof *wa); /* a row: w, |terms| */
    assert_non_null(wv), assert_non_null(wa);
    double worst = 0.0, d2 = 0.0, y2 = 0.0;
    int64_t bad = -1;
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t i = 0; i < n_in; i++) {
            int q;
            double fd, fm;
            twin_k_elem(t, w + o * rb + (i / 256) * sbb, (int)(i % 256), &q, &fd, &fm);
            wv[i] = fd * q - fm, wa[i] = fabs(fd * q) + fabs(fm);
        }
        for (int64_t k = 0; k < nt; k++) {
            double sum = 0.0, a = 0.0;
            for (int64_t i = 0; i < n_in; i++) {
                const double xv = xr[k * n_in + i];
                sum += wv[i] * xv, a += wa[i] * fabs(xv);
            }
            const double yw = want[k * n_out + o];
            d2 += (sum - yw) * (sum - yw), y2 += yw * yw;
            twin_keep_worst(got[k * n_out + o], sum, g * a, k * n_out + o, &worst, &bad);
        }
    }
    twin_verdict(what, "twin (x per 256)", got, n_out, worst, bad);
    *rounded_rel = y2 > 0.0 ? sqrt(d2 / y2) : 0.0;
    free(xr), free(wv), free(wa);
}

/* the twin of rf_gpu_mmq's product of type t (x per 256 for the K-quants, else per 32; per 32 for
 * all under RF_MMQ_X256=off) */
static inline void check_twin_mmq(const char *what, rf_type t, const float *got, const uint8_t *w, const float *x,
                                  const float *want, int64_t nt, int64_t n_in, int64_t n_out, double *rounded_rel) {
    if (twin_x256(t) && rf_knob_bool(RF_KNOB_MMQ_X256)) check_twin_x256(what, t, got, w, x, want, nt, n_in, n_out, rounded_rel);
    else check_twin_b(what, t, got, w, x, want, NULL, nt, n_in, n_out, rounded_rel);
}

static inline void check_twin(const char *what, rf_type t, const float *got, const uint8_t *w, const float *x,
                              const float *want, int64_t nt, int64_t n_in, int64_t n_out, double *rounded_rel) {
    check_twin_b(what, t, got, w, x, want, NULL, nt, n_in, n_out, rounded_rel);
}

#endif
