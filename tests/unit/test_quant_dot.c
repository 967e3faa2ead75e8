/* test_quant_dot.c — the CPU dot kernels of the type table (scalar and AVX2) against double
 * precision definitions, on fresh random rows (seed printed by rf_test_seed).
 * Checks, per weight type and row length:
 *  (a) kernel arithmetic: vs a double dot of dequant(w) and dequant(x_q) (the exact value of
 *      what the kernel is given; for Q8_1 with its cached f16 sum): |err| <= 1e-5 * sum|w_i x_i|
 *      (f32 accumulation only);
 *  (b) end to end, a 256-row matvec vs double dot of dequant(w) and the f32 activations (so the
 *      activation quantization error is included): rel. L2 < 1e-2 (docs/ARCHITECTURE.md §6) for weights
 *      dotted with Q8_0/Q8_1 activations, and < 1.5e-2 for the K-quants, whose ggml activation
 *      format Q8_K has one scale per 256 values (step amax/127 with amax ~3.5 sigma). That error
 *      is the activation rounding itself, not the kernel (whose own error, (a), is ~1e-8); the
 *      one x row is shared by all rows, so for short rows it rides on a few blocks' amax. Over
 *      320 seeds: mean 0.53% / 0.70%, max 0.91% / 1.17% (at 64 rows, one seed in ~40 crossed 1e-2);
 *  (c) AVX2 vs scalar: <= 1e-5 * sum|w_i x_i|; bit-identical for the K-quants (int32 sums);
 *  (c') the kernels in ggml's x86 float order (AVX2/VNNI Q4_0/Q4_1/Q5_0, opt-in Q8_0/Q4_K/Q6_K) bit for
 *      bit against a plain-C emulation of that order (ggml_order_ref), and within (c)'s tolerance;
 *  (d) RF_NO_SIMD=1 forces the scalar level (checked in a child process);
 *  (e) where the CPU has AVX-VNNI the table uses the VNNI Q4_0/Q4_1 kernels (the ones (a)-(c)
 *      check), and RF_NO_VNNI=1 gives the AVX2 ones (child process). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "core/knobs.h"
#include "test_util.h"

#include "quant/quant_impl.h" /* rf_vec_dot4_for */

/* rf_vec_dot_impl level of the AVX-VNNI kernels (src/quant/quant_impl.h RF_SIMD_AVXVNNI_INTERNAL) */
#define RF_TEST_SIMD_AVXVNNI ((rf_simd_level)2)
/* ... and of the kernels in ggml's exact float order (RF_SIMD_GGML_ORDER_INTERNAL) */
#define RF_TEST_SIMD_GGML_ORDER ((rf_simd_level)3)

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const rf_type k_dot_types[] = {
    RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_BF16, RF_TYPE_Q8_0, RF_TYPE_Q4_0, RF_TYPE_Q4_1, RF_TYPE_Q5_0,
    RF_TYPE_Q5_1, RF_TYPE_Q2_K, RF_TYPE_Q3_K, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K, RF_TYPE_MXFP4,
    RF_TYPE_IQ4_NL, RF_TYPE_IQ4_XS, RF_TYPE_NVFP4, RF_TYPE_TQ1_0, RF_TYPE_TQ2_0, RF_TYPE_Q1_0,
    RF_TYPE_Q2_0,
};
#define N_DOT_TYPES (sizeof k_dot_types / sizeof k_dot_types[0])

/* Random weight row of type t: quantized from N(0,1) values, or random bytes with a sane f16 scale
 * for types without a quantizer (IQ4_NL). */
static void make_weight_row(rf_rng *r, rf_type t, int64_t n, void *wq, float *wf) {
    const rf_type_traits *tr = rf_type_info(t);
    float *src = malloc(sizeof(float) * (size_t)n);
    rf_rng_fill_normal(r, src, (size_t)n, 1.0f);
    if (tr->from_f32) {
        assert_int_equal(rf_quantize_row(t, src, wq, n), RF_OK);
    } else {
        size_t sz;
        assert_int_equal(rf_row_size(t, n, &sz), RF_OK);
        uint8_t *b = wq;
        for (size_t i = 0; i < sz; i++) b[i] = (uint8_t)rf_rng_u64(r);
        for (int64_t blk = 0; blk < n / tr->block_size; blk++) {
            uint16_t h = rf_f32_to_fp16(0.01f + 0.02f * rf_rng_uniform(r));
            memcpy(b + blk * tr->type_size, &h, 2); /* IQ4_NL: d first */
        }
    }
    assert_int_equal(rf_dequantize_row(t, wq, wf, n), RF_OK);
    free(src);
}

/* Activation row in the weight type's vec_dot_type; xd gets its dequantized values. */
static void make_act_row(rf_type vt, const float *x, int64_t n, void *xq, float *xd) {
    assert_int_equal(rf_quantize_row(vt, x, xq, n), RF_OK);
    assert_int_equal(rf_dequantize_row(vt, xq, xd, n), RF_OK);
}

static double dot_d(const float *a, const float *b, int64_t n, double *abs_sum) {
    double s = 0, as = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)a[i] * b[i];
        as += fabs((double)a[i] * b[i]);
    }
    if (abs_sum) *abs_sum = as;
    return s;
}

/* Q4_1/Q5_1 x Q8_1 kernels use the activation's cached s = f16(d * sum q) for the min term (as
 * ggml does); the exact value of what they compute replaces m * d * sum(q) by m * s per block. */
static double q8_1_s_correction(rf_type t, const uint8_t *w, const uint8_t *xq, int64_t n) {
    if (t != RF_TYPE_Q4_1 && t != RF_TYPE_Q5_1) return 0;
    const size_t wsz = rf_type_info(t)->type_size, xsz = 36;
    double c = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        uint16_t hm, hd, hs;
        memcpy(&hm, w + b * wsz + 2, 2);
        memcpy(&hd, xq + b * xsz, 2);
        memcpy(&hs, xq + b * xsz + 2, 2);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += (int8_t)xq[b * xsz + 4 + j];
        c += (double)rf_fp16_to_f32(hm) * ((double)rf_fp16_to_f32(hs) - (double)rf_fp16_to_f32(hd) * sum);
    }
    return c;
}

/* ggml's x86 (AVX2/VNNI) float order of some dots, in plain C. Per block (32) or super-block (256)
 * 8 exact int32 lanes, lane k holding the products at bytes 4k..4k+3 of every 32-element group
 * (times their scales for the K-quants; Q6_K minus 32 * (sc[2k] bsum[2k] + sc[2k+1] bsum[2k+1])),
 * one fused multiply-add per lane (fmaf) with the block's d product, the lanes summed at the end
 * as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)); Q4_1 adds its in-order m*s sum, Q4_K its min terms
 * (4 lanes of sub-block pairs, own fma chain, summed (m0+m2)+(m1+m3)). NAN for other types. */
static float hsum8(const float *l) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }
static float ggml_order_ref(rf_type t, int64_t n, const void *w, const void *x) {
    float acc[8] = {0}, accm[4] = {0}, summs = 0;
    if (t == RF_TYPE_Q8_0 || t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_0) {
        for (int64_t i = 0; i < n / 32; i++) {
            int32_t lane[8] = {0};
            float d;
            if (t == RF_TYPE_Q4_1) {
                const rf_block_q4_1 *a = (const rf_block_q4_1 *)w + i;
                const rf_block_q8_1 *b = (const rf_block_q8_1 *)x + i;
                for (int e = 0; e < 32; e++) {
                    int q = e < 16 ? a->qs[e] & 15 : a->qs[e - 16] >> 4;
                    lane[e / 4] += q * b->qs[e];
                }
                summs += rf_fp16_to_f32(a->m) * rf_fp16_to_f32(b->s);
                d = rf_fp16_to_f32(a->d) * rf_fp16_to_f32(b->d);
            } else {
                const rf_block_q8_0 *b = (const rf_block_q8_0 *)x + i;
                if (t == RF_TYPE_Q5_0) {
                    const rf_block_q5_0 *a = (const rf_block_q5_0 *)w + i;
                    uint32_t qh;
                    memcpy(&qh, a->qh, 4);
                    for (int e = 0; e < 32; e++) {
                        int q = (e < 16 ? a->qs[e] & 15 : a->qs[e - 16] >> 4) | (int)((qh >> e) & 1) << 4;
                        lane[e / 4] += (q - 16) * b->qs[e];
                    }
                    d = rf_fp16_to_f32(a->d) * rf_fp16_to_f32(b->d);
                } else if (t == RF_TYPE_Q8_0) {
                    const rf_block_q8_0 *a = (const rf_block_q8_0 *)w + i;
                    for (int e = 0; e < 32; e++) lane[e / 4] += a->qs[e] * b->qs[e];
                    d = rf_fp16_to_f32(a->d) * rf_fp16_to_f32(b->d);
                } else {
                    const rf_block_q4_0 *a = (const rf_block_q4_0 *)w + i;
                    for (int e = 0; e < 32; e++) lane[e / 4] += ((e < 16 ? a->qs[e] & 15 : a->qs[e - 16] >> 4) - 8) * b->qs[e];
                    d = rf_fp16_to_f32(a->d) * rf_fp16_to_f32(b->d);
                }
            }
            for (int k = 0; k < 8; k++) acc[k] = fmaf(d, (float)lane[k], acc[k]);
        }
        return hsum8(acc) + summs;
    }
    if (t != RF_TYPE_Q4_K && t != RF_TYPE_Q6_K) return NAN;
    const rf_block_q8_K *b = x;
    for (int64_t i = 0; i < n / 256; i++) {
        int32_t lane[8] = {0}, pm[4] = {0};
        float d, dmin = 0;
        if (t == RF_TYPE_Q4_K) {
            const rf_block_q4_K *a = (const rf_block_q4_K *)w + i;
            uint8_t q[256], sc[8], m[8];
            rf_q4_K_unpack(a, q);
            for (int j = 0; j < 8; j++) rf_k4_scale_min(j, a->scales, &sc[j], &m[j]);
            for (int e = 0; e < 256; e++) lane[(e % 32) / 4] += sc[e / 32] * q[e] * b[i].qs[e];
            for (int l = 0; l < 4; l++)
                pm[l] = m[2 * l] * (b[i].bsums[4 * l] + b[i].bsums[4 * l + 1]) +
                        m[2 * l + 1] * (b[i].bsums[4 * l + 2] + b[i].bsums[4 * l + 3]);
            d = b[i].d * rf_fp16_to_f32(a->d);
            dmin = -b[i].d * rf_fp16_to_f32(a->dmin);
        } else {
            const rf_block_q6_K *a = (const rf_block_q6_K *)w + i;
            int8_t q[256];
            rf_q6_K_unpack(a, q);
            for (int e = 0; e < 256; e++) lane[(e % 32) / 4] += a->scales[e / 16] * (q[e] + 32) * b[i].qs[e];
            for (int k = 0; k < 8; k++)
                lane[k] -= 32 * (b[i].bsums[2 * k] * a->scales[2 * k] + b[i].bsums[2 * k + 1] * a->scales[2 * k + 1]);
            d = b[i].d * rf_fp16_to_f32(a->d);
        }
        for (int k = 0; k < 8; k++) acc[k] = fmaf(d, (float)lane[k], acc[k]);
        for (int l = 0; l < 4; l++) accm[l] = fmaf(dmin, (float)pm[l], accm[l]);
    }
    return hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

static void check_type(rf_rng *r, rf_type t, int64_t n, bool have_avx2) {
    const rf_type_traits *tr = rf_type_info(t);
    assert_non_null(tr->vec_dot);
    const rf_type vt = tr->vec_dot_type;
    enum { ROWS = 256 };
    size_t wsz, xsz;
    assert_int_equal(rf_row_size(t, n, &wsz), RF_OK);
    assert_int_equal(rf_row_size(vt, n, &xsz), RF_OK);
    uint8_t *wq = malloc(wsz * ROWS), *xq = malloc(xsz);
    float *wf = malloc(sizeof(float) * (size_t)n * ROWS), *x = malloc(sizeof(float) * (size_t)n);
    float *xd = malloc(sizeof(float) * (size_t)n);
    float y[ROWS], yref[ROWS], ys[ROWS];
    rf_rng_fill_normal(r, x, (size_t)n, 1.0f);
    make_act_row(vt, x, n, xq, xd);
    rf_vec_dot_fn scalar = rf_vec_dot_impl(t, RF_SIMD_SCALAR);
    rf_vec_dot_fn avx2 = have_avx2 ? rf_vec_dot_impl(t, RF_SIMD_AVX2) : NULL;
    /* AVX-VNNI kernel (level 2, internal until the public enum has it): NULL where none/no CPU */
    rf_vec_dot_fn vnni = rf_vec_dot_impl(t, RF_TEST_SIMD_AVXVNNI);
    assert_non_null(scalar);
    double worst_a = 0, worst_c = 0, worst_v = 0;
    int n_ggml = 0; /* rows checked against ggml's order */
    for (int row = 0; row < ROWS; row++) {
        make_weight_row(r, t, n, wq + wsz * row, wf + n * row);
        double as;
        double exact = dot_d(wf + n * row, xd, n, &as) + q8_1_s_correction(t, wq + wsz * row, xq, n);
        yref[row] = (float)dot_d(wf + n * row, x, n, NULL);
        float got = NAN;
        scalar(n, &got, wq + wsz * row, xq);
        ys[row] = got;
        double ea = fabs(got - exact) / (as > 0 ? as : 1);
        if (!(ea <= 1e-5))
            fail_msg("%s n=%lld row %d scalar: %.9g vs exact %.9g (err %.3g of sum|wx|)", tr->name, (long long)n, row,
                     got, exact, ea);
        if (ea > worst_a) worst_a = ea;
        if (avx2) {
            float g2 = NAN;
            avx2(n, &g2, wq + wsz * row, xq);
            double ec = fabs((double)g2 - got) / (as > 0 ? as : 1);
            if (!(ec <= 1e-5))
                fail_msg("%s n=%lld row %d avx2 %.9g vs scalar %.9g", tr->name, (long long)n, row, g2, got);
            if (rf_type_info(t)->vec_dot_type == RF_TYPE_Q8_K && memcmp(&g2, &got, 4) != 0)
                fail_msg("%s avx2 not bit-identical to scalar: %.9g vs %.9g", tr->name, g2, got);
            /* ggml's x86 float order, emulated in plain C: the AVX2 Q4_0/Q4_1 kernels follow it, and the
             * opt-in ggml-order kernels of Q8_0/Q4_K/Q6_K (within tolerance of scalar like the rest) */
            float go = ggml_order_ref(t, n, wq + wsz * row, xq);
            rf_vec_dot_fn fg = rf_vec_dot_impl(t, RF_TEST_SIMD_GGML_ORDER);
            if (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_0) fg = avx2;
            if (fg && !isnan(go)) {
                float gg = NAN;
                fg(n, &gg, wq + wsz * row, xq);
                if (memcmp(&gg, &go, 4) != 0)
                    fail_msg("%s n=%lld row %d ggml-order kernel %.9g not bit-identical to ggml's order %.9g", tr->name,
                             (long long)n, row, gg, go);
                double eg = fabs((double)gg - got) / (as > 0 ? as : 1);
                if (!(eg <= 1e-5)) fail_msg("%s n=%lld row %d ggml-order kernel %.9g vs scalar %.9g", tr->name, (long long)n, row, gg, got);
                n_ggml++;
            }
            if (ec > worst_c) worst_c = ec;
        }
        if (vnni) {
            float g3 = NAN;
            vnni(n, &g3, wq + wsz * row, xq);
            double ev = fabs((double)g3 - got) / (as > 0 ? as : 1);
            if (!(ev <= 1e-5))
                fail_msg("%s n=%lld row %d avx-vnni %.9g vs scalar %.9g", tr->name, (long long)n, row, g3, got);
            if (ev > worst_v) worst_v = ev;
            /* same lanes (4-byte groups) and float steps as the AVX2 kernel (ggml's order): bit-identical
             * to it; not Q8_0, whose AVX2 kernel sums pairs of int16 lanes (other lane grouping) */
            if (avx2 && t != RF_TYPE_Q8_0) {
                float g2 = NAN;
                avx2(n, &g2, wq + wsz * row, xq);
                if (memcmp(&g2, &g3, 4) != 0)
                    fail_msg("%s n=%lld avx-vnni not bit-identical to avx2: %.9g vs %.9g", tr->name, (long long)n, g3, g2);
            }
        }
        /* the table's own pointer (whatever level it picked) */
        y[row] = NAN;
        tr->vec_dot(n, &y[row], wq + wsz * row, xq);
    }
    /* the table's 4-row kernel (where it has one): bit-identical to its one-row kernel */
    rf_vec_dot4_fn d4 = rf_vec_dot4_for(t);
    if (d4) {
        for (int row = 0; row + 4 <= ROWS; row += 4) {
            float o4[4] = {NAN, NAN, NAN, NAN};
            d4(n, o4, wq + wsz * row, wsz, xq);
            if (memcmp(o4, &y[row], sizeof o4) != 0)
                fail_msg("%s n=%lld rows %d..%d: 4-row kernel %.9g %.9g %.9g %.9g vs one-row %.9g %.9g %.9g %.9g",
                         tr->name, (long long)n, row, row + 3, o4[0], o4[1], o4[2], o4[3], y[row], y[row + 1],
                         y[row + 2], y[row + 3]);
        }
    }
    /* the table's 4-row x 2-token kernel (where it has one): bit-identical too; token 1 is a second,
     * independent activation row */
    rf_vec_dot4x2_fn d42 = rf_vec_dot4x2_for(t);
    if (d42) {
        uint8_t *xq2 = malloc(xsz);
        float *x2 = malloc(sizeof(float) * (size_t)n), *xd2 = malloc(sizeof(float) * (size_t)n);
        rf_rng_fill_normal(r, x2, (size_t)n, 1.0f);
        make_act_row(vt, x2, n, xq2, xd2);
        for (int row = 0; row + 4 <= ROWS; row += 4) {
            float o0[4] = {NAN, NAN, NAN, NAN}, o1[4] = {NAN, NAN, NAN, NAN}, e1[4];
            d42(n, o0, o1, wq + wsz * row, wsz, xq, xq2);
            for (int k = 0; k < 4; k++) tr->vec_dot(n, &e1[k], wq + wsz * (row + k), xq2);
            if (memcmp(o0, &y[row], sizeof o0) != 0 || memcmp(o1, e1, sizeof o1) != 0)
                fail_msg("%s n=%lld rows %d..%d: 4x2 kernel differs from the one-row kernel (%.9g vs %.9g, %.9g vs %.9g)",
                         tr->name, (long long)n, row, row + 3, o0[0], y[row], o1[0], e1[0]);
        }
        free(xq2), free(x2), free(xd2);
    }
    /* the 4-row x 4-token kernel (where it has one): bit-identical too, four independent tokens */
    rf_vec_dot4x4_fn d44 = rf_vec_dot4x4_for(t);
    if (d44) {
        uint8_t *xq4 = malloc(4 * xsz);
        float *x4 = malloc(sizeof(float) * (size_t)n), *xd4 = malloc(sizeof(float) * (size_t)n);
        for (int k = 0; k < 4; k++) {
            rf_rng_fill_normal(r, x4, (size_t)n, 1.0f);
            make_act_row(vt, x4, n, xq4 + k * xsz, xd4);
        }
        for (int row = 0; row + 4 <= ROWS; row += 4) {
            float o[4 * 5], e;
            for (int k = 0; k < 20; k++) o[k] = NAN;
            d44(n, o, 5, wq + wsz * row, wsz, xq4, xsz, row == 0);
            for (int tk = 0; tk < 4; tk++)
                for (int k = 0; k < 4; k++) {
                    tr->vec_dot(n, &e, wq + wsz * (row + k), xq4 + tk * xsz);
                    if (memcmp(&o[tk * 5 + k], &e, 4) != 0)
                        fail_msg("%s n=%lld row %d token %d: 4x4 kernel %.9g vs one-row %.9g", tr->name, (long long)n,
                                 row + k, tk, o[tk * 5 + k], e);
                }
        }
        free(xq4), free(x4), free(xd4);
    }
    double e_tab = rf_rel_l2(y, yref, ROWS), e_scalar = rf_rel_l2(ys, yref, ROWS);
    print_message("dot %-6s (x %-4s) n=%-5lld rel.L2 vs f32 %.2e (scalar %.2e); kernel err %.1e; avx2-scalar %.1e%s",
                  tr->name, rf_type_name(vt), (long long)n, e_tab, e_scalar, worst_a, worst_c, avx2 ? "" : " (no avx2)");
    if (vnni) print_message("; vnni-scalar %.1e", worst_v);
    if (d4) print_message("; 4-row kernel bit-identical");
    if (d42) print_message("; 4x2 kernel bit-identical");
    if (d44) print_message("; 4x4 kernel bit-identical");
    if (n_ggml) print_message("; ggml order bit-identical");
    print_message("\n");
    const double bound = vt == RF_TYPE_Q8_K ? 1.5e-2 : 1e-2;
    if (!(e_tab < bound) || !(e_scalar < bound))
        fail_msg("%s n=%lld: matvec rel.L2 %.3g (table) %.3g (scalar) >= %g", tr->name, (long long)n, e_tab, e_scalar,
                 bound);
    free(wq), free(xq), free(wf), free(x), free(xd);
}

static void test_dot_kernels(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    bool have_avx2 = rf_vec_dot_impl(RF_TYPE_Q4_0, RF_SIMD_AVX2) != NULL;
    print_message("table SIMD level: %s; AVX2 kernels %s\n", rf_quant_simd_level() == RF_SIMD_AVX2 ? "avx2" : "scalar",
                  have_avx2 ? "tested" : "not testable on this CPU");
    for (size_t k = 0; k < N_DOT_TYPES; k++) {
        rf_type t = k_dot_types[k];
        int64_t bs = rf_type_info(t)->block_size == 1 ? 32 : rf_type_info(rf_type_info(t)->vec_dot_type)->block_size;
        if (rf_type_info(t)->block_size > bs) bs = rf_type_info(t)->block_size;
        const int64_t lens[] = {bs, 3 * bs, 2048 + bs, 4096};
        for (int l = 0; l < 4; l++) check_type(&r, t, lens[l], have_avx2);
    }
    /* float types: lengths that are not a multiple of 8 exercise the AVX2 tails */
    for (int64_t n = 1; n <= 41; n += 5) {
        check_type(&r, RF_TYPE_F32, n, have_avx2);
        check_type(&r, RF_TYPE_F16, n, have_avx2);
    }
}

/* All-zero weights give exactly 0; a NaN weight scale gives NaN (not silently 0). */
static void test_dot_edges(void **state) {
    (void)state;
    for (size_t k = 0; k < N_DOT_TYPES; k++) {
        rf_type t = k_dot_types[k];
        const rf_type_traits *tr = rf_type_info(t);
        const int64_t n = 512;
        size_t wsz, xsz;
        rf_row_size(t, n, &wsz);
        rf_row_size(tr->vec_dot_type, n, &xsz);
        uint8_t *w = calloc(1, wsz), *xq = malloc(xsz);
        float x[512];
        for (int i = 0; i < n; i++) x[i] = (float)(i % 7) - 3.0f;
        assert_int_equal(rf_quantize_row(tr->vec_dot_type, x, xq, n), RF_OK);
        for (int lv = 0; lv < 3; lv++) {
            rf_vec_dot_fn f = rf_vec_dot_impl(t, (rf_simd_level)lv);
            if (!f) continue;
            float out = NAN;
            f(n, &out, w, xq);
            if (out != 0.0f) fail_msg("%s level %d: zero weights give %g", tr->name, lv, out);
        }
        free(w), free(xq);
    }
}

/* Q8_0 x Q8_0 with the extreme int8 values (-128 included, which our quantizer never emits but a
 * file may hold): every level must give the exact sum (integers, scale 1). */
static void test_q8_0_extremes(void **state) {
    (void)state;
    enum { NB = 5 };
    uint8_t w[NB * 34], xq[NB * 34];
    const int8_t vals[] = {-128, 127, -127, 0, 1, -1};
    int64_t exact = 0;
    for (int b = 0; b < NB; b++) {
        uint16_t one = rf_f32_to_fp16(1.0f);
        memcpy(w + b * 34, &one, 2), memcpy(xq + b * 34, &one, 2);
        for (int j = 0; j < 32; j++) {
            int8_t wv = vals[(b + j) % 6], xv = vals[(b * 3 + j / 2) % 6];
            if (b == 0) wv = -128, xv = -128; /* a whole block of (-128)*(-128) */
            w[b * 34 + 2 + j] = (uint8_t)wv, xq[b * 34 + 2 + j] = (uint8_t)xv;
            exact += (int64_t)wv * xv;
        }
    }
    for (int lv = 0; lv < 3; lv++) {
        rf_vec_dot_fn f = rf_vec_dot_impl(RF_TYPE_Q8_0, (rf_simd_level)lv);
        if (!f) continue;
        float out = NAN;
        f(NB * 32, &out, w, xq);
        if (out != (float)exact) fail_msg("q8_0 level %d: %.9g, exact %lld", lv, out, (long long)exact);
    }
    rf_vec_dot4_fn d4 = rf_vec_dot4_for(RF_TYPE_Q8_0); /* the table's 4-row kernel: same row 4 times */
    if (d4) {
        float o4[4] = {NAN, NAN, NAN, NAN};
        d4(NB * 32, o4, w, 0, xq);
        for (int r = 0; r < 4; r++)
            if (o4[r] != (float)exact) fail_msg("q8_0 4-row kernel row %d: %.9g, exact %lld", r, o4[r], (long long)exact);
    }
}

/* Runs this test binary again with env=1 and the check flag, and expects exit 0: a fresh
 * process, since the table's SIMD level is decided once per process. */
static void check_in_child(const char *env, const char *flag) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv(env, "1", 1);
        char *argv[] = {"test_quant_dot", (char *)flag, NULL};
        execv("/proc/self/exe", argv);
        _exit(3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_no_simd_env(void **state) {
    (void)state;
    check_in_child("RF_NO_SIMD", "--check-scalar-level");
}

/* The table's default picks: VNNI for Q4_0/Q4_1 where the CPU has it (bit-identical to AVX2). */
static void test_vnni_default(void **state) {
    (void)state;
    const rf_type ts[] = {RF_TYPE_Q4_0, RF_TYPE_Q4_1};
    for (int k = 0; k < 2; k++) {
        rf_vec_dot_fn v = rf_vec_dot_impl(ts[k], RF_TEST_SIMD_AVXVNNI);
        if (!v || rf_knob_bool(RF_KNOB_NO_VNNI) || rf_knob_bool(RF_KNOB_NO_SIMD)) {
            print_message("no AVX-VNNI (or disabled by env): default check skipped\n");
            return;
        }
        assert_true(rf_type_info(ts[k])->vec_dot == v);
    }
    check_in_child("RF_NO_VNNI", "--check-no-vnni");
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--check-no-vnni") == 0)
        return rf_type_info(RF_TYPE_Q4_1)->vec_dot == rf_vec_dot_impl(RF_TYPE_Q4_1, RF_SIMD_AVX2) &&
                       rf_type_info(RF_TYPE_Q4_0)->vec_dot == rf_vec_dot_impl(RF_TYPE_Q4_0, RF_SIMD_AVX2)
                   ? 0
                   : 1;
    if (argc > 1 && strcmp(argv[1], "--check-scalar-level") == 0)
        return rf_quant_simd_level() == RF_SIMD_SCALAR &&
                       rf_type_info(RF_TYPE_Q4_0)->vec_dot == rf_vec_dot_impl(RF_TYPE_Q4_0, RF_SIMD_SCALAR)
                   ? 0
                   : 1;
    rf_test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot_kernels),
        cmocka_unit_test(test_dot_edges),
        cmocka_unit_test(test_q8_0_extremes),
        cmocka_unit_test(test_no_simd_env),
        cmocka_unit_test(test_vnni_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
