/* test_rope_yarn.c — YaRN RoPE scaling as frequency factors (model_yarn.c) against a direct YaRN
 * reference written from ggml's rope_yarn: theta = s theta_e (1 - r) + theta_e r per pair, gain
 * (1 + 0.1 ln(1/s)) on cos and sin, ramp r over ggml's correction dims (r in f32 as ggml computes
 * it, the rest in double). The factors route it
 * through rf_ref_rope (freq_scale 1, rotated dims times the gain): the model of the difference is
 * the f32 rounding of each factor (relative 2^-24 on theta), so each output element may differ
 * by at most 2^-23 theta_i (|a| + |b|) times the gain, plus the gain's f32 evaluation and the
 * output's rounding (2^-21 relative of the pair). */
#include "test_util.h"

#include <math.h>
#include <string.h>

#include "model/model.h"

/* gpt-oss-20b's rope: 64 dims, base 150000, factor 32 over 4096 positions, beta 32 / 1 */
#define N_ROT 64
#define BASE 150000.0f
#define ORIG 4096
#define SCALE (1.0f / 32.0f)

/* pair i of a NEOX-rotated head by YaRN, ggml's formulas in double (corr dims as ggml: f32) */
static void yarn_direct(double *out, const float *x, int p, float s, float ext, float gain_llama) {
    float dims[2];
    rf_yarn_corr_dims(N_ROT, ORIG, BASE, 32.0f, 1.0f, dims);
    for (int i = 0; i < N_ROT / 2; i++) {
        const double te = p * pow((double)BASE, -2.0 * i / N_ROT), ti = s * te;
        /* the ramp in f32 as ggml's rope_yarn_ramp evaluates it (its value is YaRN's definition
         * in llama.cpp: a double ramp differs by up to ~9 ulps of r near the ramp's end, e.g.
         * r = 1 - 0.9f at i = 17, which moved theta by 4x the factors' own rounding) */
        const float yf = ((float)i - dims[0]) / fmaxf(0.001f, dims[1] - dims[0]);
        const double rm = (double)((1.0f - fminf(1.0f, fmaxf(0.0f, yf))) * ext);
        const double th = ext != 0 ? ti * (1 - rm) + te * rm : ti;
        const double ms = gain_llama * (ext != 0 ? 1 + 0.1 * log(1.0 / s) : 1);
        const double a = x[i], b = x[i + N_ROT / 2], c = cos(th) * ms, sn = sin(th) * ms;
        out[i] = a * c - b * sn;
        out[i + N_ROT / 2] = a * sn + b * c;
    }
}

static void test_corr_dims(void **state) {
    (void)state;
    /* 64 ln(4096 / (beta 2 pi)) / (2 ln 150000): 8.0928 (beta 32) and 17.398 (beta 1) */
    float d[2];
    rf_yarn_corr_dims(N_ROT, ORIG, BASE, 32.0f, 1.0f, d);
    assert_true(d[0] == 8.0f && d[1] == 18.0f);
    /* clamped to [0, n_dims - 1] */
    rf_yarn_corr_dims(N_ROT, 1 << 30, 10.0f, 32.0f, 1.0f, d);
    assert_true(d[0] > 0 && d[1] == N_ROT - 1);
    rf_yarn_corr_dims(N_ROT, 8, BASE, 32.0f, 1.0f, d);
    assert_true(d[0] == 0);
}

static void test_factors(void **state) {
    (void)state;
    float ff[N_ROT / 2];
    rf_yarn_freq_factors(N_ROT, ORIG, BASE, SCALE, 1.0f, 32.0f, 1.0f, ff);
    /* below the ramp: extrapolated (factor 1, exact); past it: interpolated (1 / s = 32, exact) */
    for (int i = 0; i <= 8; i++) assert_true(ff[i] == 1.0f);
    for (int i = 18; i < N_ROT / 2; i++) assert_true(ff[i] == 32.0f);
    for (int i = 9; i < 18; i++) { /* the ramp: r = 1 - (i - 8) / 10 */
        const double r = 1 - (i - 8) / 10.0;
        assert_true(fabs(ff[i] - 1 / (SCALE * (1 - r) + r)) <= 1e-6 * ff[i]);
        assert_true(ff[i] > ff[i - 1]);
    }
    /* ext_factor 0: plain linear scaling */
    rf_yarn_freq_factors(N_ROT, ORIG, BASE, SCALE, 0.0f, 32.0f, 1.0f, ff);
    for (int i = 0; i < N_ROT / 2; i++) assert_true(ff[i] == 32.0f);
    /* the gain: llama.cpp's yarn_attn_factor (get_mscale(32) / (1 + 0.1 ln 32) = 1, in f32) times
     * ggml's 1 + 0.1 ln 32 = 1.34657359; ext_factor 0: the file's attn_factor alone */
    assert_true(fabs(rf_yarn_attn_factor(SCALE, 1.0f, 1.0f) - 1.3465735902799727) < 2e-7);
    assert_true(fabs(rf_yarn_attn_factor(SCALE, 1.0f, 0.5f) - 0.5 * 1.3465735902799727) < 2e-7);
    assert_true(rf_yarn_attn_factor(SCALE, 0.0f, 0.75f) == 0.75f);
    assert_true(rf_yarn_attn_factor(1.0f, 1.0f, 1.0f) == 1.0f);
}

static void test_rope_equal(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    const int pos[] = {0, 1, 7, 100, 4095, 4096, 20000, 131071};
    const float exts[] = {1.0f, 0.5f};
    for (int e = 0; e < 2; e++) {
        float ff[N_ROT / 2];
        rf_yarn_freq_factors(N_ROT, ORIG, BASE, SCALE, exts[e], 32.0f, 1.0f, ff);
        const float gain = rf_yarn_attn_factor(SCALE, exts[e], 1.0f);
        double worst = 0;
        for (size_t k = 0; k < sizeof pos / sizeof *pos; k++) {
            float x[N_ROT], y[N_ROT];
            double want[N_ROT];
            rf_rng_fill_normal(&r, x, N_ROT, 1.0f);
            memcpy(y, x, sizeof x);
            const int32_t p = pos[k];
            rf_ref_rope(y, 1, 1, N_ROT, N_ROT, N_ROT, N_ROT, &p, BASE, 1.0f, ff, RF_ROPE_NEOX);
            for (int i = 0; i < N_ROT; i++) y[i] *= gain;
            yarn_direct(want, x, p, SCALE, exts[e], 1.0); /* llama.cpp's yarn_attn_factor: 1 */
            for (int i = 0; i < N_ROT / 2; i++) {
                const double th = p * pow((double)BASE, -2.0 * i / N_ROT) / ff[i];
                const double bound = ldexp(th, -23) * (fabs(x[i]) + fabs(x[i + N_ROT / 2])) * gain +
                                     ldexp(fabs(want[i]) + fabs(want[i + N_ROT / 2]), -21) + 1e-30;
                for (int h = 0; h < 2; h++) {
                    const int j = i + h * N_ROT / 2;
                    const double d = fabs(y[j] - want[j]);
                    if (d / bound > worst) worst = d / bound;
                    if (!(d <= bound))
                        fail_msg("ext %g pos %d dim %d: %.9g vs direct YaRN %.9g (bound %.3g)", exts[e], p, j, y[j],
                                 want[j], bound);
                }
            }
        }
        printf("  ext_factor %g: worst difference %.3f of the bound\n", exts[e], worst);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corr_dims),
        cmocka_unit_test(test_factors),
        cmocka_unit_test(test_rope_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
