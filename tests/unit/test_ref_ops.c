/* test_ref_ops.c — the scalar reference ops against hand-computed values and their definitions
 * (docs/ARCHITECTURE.md §6, step 1 of the oracle chain). Random inputs use rf_test_seed() (printed). */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ref/ref_ops.h"

#define NEAR(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))

static void test_rmsnorm(void **state) {
    (void)state;
    const float x[4] = {1, 2, 3, 4};
    float y[4];
    rf_poison_f32(y, 4);
    rf_ref_rmsnorm(y, x, NULL, 1, 4, 0.0f);
    /* mean(x^2) = 30/4 = 7.5 -> scale 1/sqrt(7.5) = 0.36514837 */
    const double s = 0.3651483716701107;
    for (int i = 0; i < 4; i++) NEAR(y[i], (i + 1) * s, 1e-6);
    const float w[4] = {1, 2, 1, 2};
    float z[8] = {1, 2, 3, 4, 0, 0, 0, 0};
    rf_ref_rmsnorm(z, z, w, 2, 4, 1e-5f); /* aliasing, and an all-zero row with eps */
    NEAR(z[1], 2 * 2 / sqrt(7.5 + 1e-5), 1e-6);
    NEAR(z[3], 4 * 2 / sqrt(7.5 + 1e-5), 1e-6);
    for (int i = 4; i < 8; i++) assert_true(z[i] == 0.0f);
    float one = -3.0f;
    rf_ref_rmsnorm(&one, &one, NULL, 1, 1, 0.0f);
    NEAR(one, -1.0, 1e-7);
}

static void test_layernorm(void **state) {
    (void)state;
    const float x[4] = {1, 2, 3, 4};
    float y[4];
    rf_poison_f32(y, 4);
    rf_ref_layernorm(y, x, NULL, NULL, 1, 4, 0.0f);
    /* mean 2.5, population var 1.25 */
    const double inv = 1.0 / sqrt(1.25);
    for (int i = 0; i < 4; i++) NEAR(y[i], (i + 1 - 2.5) * inv, 1e-6);
    const float w[4] = {2, 2, 2, 2}, b[4] = {1, 1, 1, 1};
    rf_ref_layernorm(y, x, w, b, 1, 4, 0.0f);
    for (int i = 0; i < 4; i++) NEAR(y[i], (i + 1 - 2.5) * inv * 2 + 1, 1e-6);
    /* only w, only b */
    rf_ref_layernorm(y, x, w, NULL, 1, 4, 0.0f);
    NEAR(y[0], -1.5 * inv * 2, 1e-6);
    rf_ref_layernorm(y, x, NULL, b, 1, 4, 0.0f);
    NEAR(y[0], -1.5 * inv + 1, 1e-6);
    /* a constant row normalises to 0 (+b) */
    const float c[3] = {5, 5, 5};
    rf_ref_layernorm(y, c, NULL, b, 1, 3, 1e-5f);
    for (int i = 0; i < 3; i++) NEAR(y[i], 1.0, 1e-6);
}

static void test_softmax(void **state) {
    (void)state;
    float x[3] = {0, logf(2), logf(3)}, y[3];
    rf_poison_f32(y, 3);
    rf_ref_softmax(y, x, 1, 3, 1.0f);
    NEAR(y[0], 1.0 / 6, 1e-7);
    NEAR(y[1], 2.0 / 6, 1e-7);
    NEAR(y[2], 3.0 / 6, 1e-7);
    /* scale multiplies before exp */
    float xs[3] = {0, logf(2) / 2, logf(3) / 2};
    rf_ref_softmax(y, xs, 1, 3, 2.0f);
    NEAR(y[2], 0.5, 1e-6);
    /* stability: huge logits */
    float big[2] = {1000.0f, 1000.0f};
    rf_ref_softmax(big, big, 1, 2, 1.0f);
    NEAR(big[0], 0.5, 1e-7);
    NEAR(big[1], 0.5, 1e-7);
    /* masked entries get 0, an all -inf row gives zeros (not NaN) */
    float m[6] = {0, -INFINITY, 0, -INFINITY, -INFINITY, -INFINITY};
    rf_ref_softmax(m, m, 2, 3, 1.0f);
    NEAR(m[0], 0.5, 1e-7);
    assert_true(m[1] == 0.0f);
    NEAR(m[2], 0.5, 1e-7);
    for (int i = 3; i < 6; i++) assert_true(m[i] == 0.0f);
    /* a NaN poisons its row only */
    float n[4] = {1, NAN, 1, 1};
    rf_ref_softmax(n, n, 2, 2, 1.0f);
    assert_true(isnan(n[0]) && isnan(n[1]));
    NEAR(n[2], 0.5, 1e-7);
    /* +inf takes all the mass */
    float pinf[3] = {INFINITY, 1, INFINITY};
    rf_ref_softmax(pinf, pinf, 1, 3, 1.0f);
    NEAR(pinf[0], 0.5, 0);
    assert_true(pinf[1] == 0.0f);
    /* definition on random rows: sums to 1, ratios are exp differences */
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    float a[37], p[37];
    rf_rng_fill_normal(&r, a, 37, 3.0f);
    rf_ref_softmax(p, a, 1, 37, 0.7f);
    double sum = 0;
    for (int i = 0; i < 37; i++) sum += p[i];
    NEAR(sum, 1.0, 1e-6);
    NEAR(p[5] / p[9], exp(0.7 * ((double)a[5] - a[9])), 1e-4 * exp(0.7 * ((double)a[5] - a[9])));
}

static void test_elementwise(void **state) {
    (void)state;
    float a[3] = {1, -2, 3}, b[3] = {4, 5, -6}, y[3];
    rf_ref_scale(y, a, 2.0f, 3);
    assert_true(y[0] == 2 && y[1] == -4 && y[2] == 6);
    rf_ref_add(y, a, b, 3);
    assert_true(y[0] == 5 && y[1] == 3 && y[2] == -3);
    rf_ref_mul(y, a, b, 3);
    assert_true(y[0] == 4 && y[1] == -10 && y[2] == -18);
    rf_ref_add(a, a, a, 3); /* aliasing */
    assert_true(a[0] == 2 && a[1] == -4 && a[2] == 6);
}

static void test_causal_mask(void **state) {
    (void)state;
    /* 3 queries at positions 2,3,4 over 5 keys */
    float x[15];
    for (int i = 0; i < 15; i++) x[i] = 1.0f;
    rf_ref_causal_mask(x, 3, 5, 2, 0);
    const char *want = "111--"
                       "1111-"
                       "11111";
    for (int i = 0; i < 15; i++) assert_true((want[i] == '-') == (x[i] == -INFINITY));
    /* sliding window of 2: each query sees itself and the one before */
    for (int i = 0; i < 15; i++) x[i] = 1.0f;
    rf_ref_causal_mask(x, 3, 5, 2, 2);
    const char *want_w = "-11--"
                         "--11-"
                         "---11";
    for (int i = 0; i < 15; i++) assert_true((want_w[i] == '-') == (x[i] == -INFINITY));
}

static void test_activations(void **state) {
    (void)state;
    NEAR(rf_ref_silu(0), 0, 0);
    NEAR(rf_ref_silu(1), 0.7310585786300049, 1e-7);
    NEAR(rf_ref_silu(-2), -2 / (1 + exp(2.0)), 1e-7);
    NEAR(rf_ref_gelu_tanh(0), 0, 0);
    NEAR(rf_ref_gelu_tanh(1), 0.8411919906082768, 1e-6);
    NEAR(rf_ref_gelu_tanh(-1), -0.15880800939172324, 1e-6);
    float g[2] = {1, -2}, u[2] = {2, 3}, y[2];
    rf_ref_swiglu(y, g, u, 2);
    NEAR(y[0], 2 * 0.7310585786300049, 1e-6);
    NEAR(y[1], 3 * (-2 / (1 + exp(2.0))), 1e-6);
    rf_ref_geglu(y, g, u, 2);
    NEAR(y[0], 2 * 0.8411919906082768, 1e-6);
    /* gpt-oss's clamped SwiGLU: gate capped at 7 (not below), up clamped to [-7, 7], plus 1 */
    float go[4] = {1, 9, -9, 2}, uo[4] = {2, 3, 0.5f, -20}, yo[4];
    rf_ref_swiglu_oai(yo, go, uo, 4);
    NEAR(yo[0], 1 / (1 + exp(-1.702)) * 3, 1e-6);
    NEAR(yo[1], 7 / (1 + exp(-1.702 * 7)) * 4, 1e-5);
    NEAR(yo[2], -9 / (1 + exp(1.702 * 9)) * 1.5, 1e-9);
    NEAR(yo[3], 2 / (1 + exp(-1.702 * 2)) * -6, 1e-5);
    rf_ref_swiglu(g, g, u, 2); /* aliasing */
    NEAR(g[0], 2 * 0.7310585786300049, 1e-6);
}

static void test_rope_hand(void **state) {
    (void)state;
    const int32_t pos[1] = {3};
    /* head_dim 4, n_rot 4, base 10000: theta_0 = 3, theta_1 = 3 * 10000^(-1/2) = 0.03 */
    float x[4] = {1, 0, 0, 1};
    rf_ref_rope(x, 1, 1, 4, 4, 4, 4, pos, 10000.0f, 1.0f, NULL, RF_ROPE_NORMAL);
    NEAR(x[0], cos(3.0), 1e-6);
    NEAR(x[1], sin(3.0), 1e-6);
    NEAR(x[2], -sin(0.03), 1e-6);
    NEAR(x[3], cos(0.03), 1e-6);
    float n[4] = {1, 0, 0, 1}; /* NeoX pairs (0,2) and (1,3) */
    rf_ref_rope(n, 1, 1, 4, 4, 4, 4, pos, 10000.0f, 1.0f, NULL, RF_ROPE_NEOX);
    NEAR(n[0], cos(3.0), 1e-6);
    NEAR(n[2], sin(3.0), 1e-6);
    NEAR(n[1], -sin(0.03), 1e-6);
    NEAR(n[3], cos(0.03), 1e-6);
    /* freq_scale and freq factors divide the angle */
    const float ff[2] = {1.0f, 2.0f};
    float f[4] = {1, 0, 1, 0};
    rf_ref_rope(f, 1, 1, 4, 4, 4, 4, pos, 10000.0f, 0.5f, ff, RF_ROPE_NORMAL);
    NEAR(f[0], cos(1.5), 1e-6);
    NEAR(f[1], sin(1.5), 1e-6);
    NEAR(f[2], cos(0.0075), 1e-6);
    NEAR(f[3], sin(0.0075), 1e-6);
    /* dims past n_rot pass through; position 0 is the identity */
    float p[6] = {1, 2, 3, 4, 5, 6};
    rf_ref_rope(p, 1, 1, 6, 2, 6, 6, pos, 10000.0f, 1.0f, NULL, RF_ROPE_NORMAL);
    NEAR(p[0], cos(3.0) - 2 * sin(3.0), 1e-6);
    for (int i = 2; i < 6; i++) assert_true(p[i] == i + 1);
    const int32_t zero[1] = {0};
    float q[4] = {1, 2, 3, 4};
    rf_ref_rope(q, 1, 1, 4, 4, 4, 4, zero, 10000.0f, 1.0f, NULL, RF_ROPE_NEOX);
    for (int i = 0; i < 4; i++) NEAR(q[i], i + 1, 1e-7);
}

static void test_rope_layouts_and_norms(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 1);
    enum { T = 5, H = 3, D = 8 };
    float a[T * H * D], b[T * H * D], orig[T * H * D];
    rf_rng_fill_normal(&r, orig, T * H * D, 1.0f);
    int32_t pos[T] = {0, 1, 7, 100, 4095};
    for (int mode = 0; mode <= 2; mode += 2) {
        /* a: [t,h,d]; b: the same data as [h,t,d] */
        memcpy(a, orig, sizeof a);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) memcpy(b + (h * T + t) * D, orig + (t * H + h) * D, D * 4);
        rf_ref_rope(a, T, H, D, D, H * D, D, pos, 10000.0f, 1.0f, NULL, mode);
        rf_ref_rope(b, T, H, D, D, D, T * D, pos, 10000.0f, 1.0f, NULL, mode);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const float *va = a + (t * H + h) * D, *vb = b + (h * T + t) * D;
                const float *vo = orig + (t * H + h) * D;
                for (int d = 0; d < D; d++) assert_true(va[d] == vb[d]);
                /* each rotated pair keeps its norm */
                for (int i = 0; i < D / 2; i++) {
                    int i0 = mode == RF_ROPE_NEOX ? i : 2 * i;
                    int i1 = mode == RF_ROPE_NEOX ? i + D / 2 : 2 * i + 1;
                    double n0 = hypot(vo[i0], vo[i1]), n1 = hypot(va[i0], va[i1]);
                    NEAR(n1, n0, 1e-5 * (1 + n0));
                }
            }
    }
}

static void test_matmul_get_rows_f32(void **state) {
    (void)state;
    const float w[6] = {1, 2, 3, 4, 5, 6}; /* 2 rows of 3 */
    const float x[6] = {1, 1, 1, 1, 0, -1};
    float y[4];
    rf_poison_f32(y, 4);
    assert_int_equal(rf_ref_matmul(y, w, RF_TYPE_F32, x, 2, 3, 2), RF_OK);
    assert_true(y[0] == 6 && y[1] == 15 && y[2] == -2 && y[3] == -2);
    const int32_t ids[3] = {1, 0, 1};
    float g[9];
    rf_poison_f32(g, 9);
    assert_int_equal(rf_ref_get_rows(g, w, RF_TYPE_F32, ids, 3, 3, 2), RF_OK);
    assert_true(g[0] == 4 && g[3] == 1 && g[8] == 6);
    const int32_t bad[1] = {2};
    assert_int_equal(rf_ref_get_rows(g, w, RF_TYPE_F32, bad, 1, 3, 2), RF_ERR_RANGE);
    const int32_t neg[1] = {-1};
    assert_int_equal(rf_ref_get_rows(g, w, RF_TYPE_F32, neg, 1, 3, 2), RF_ERR_RANGE);
}

static void test_attention(void **state) {
    (void)state;
    /* one key: out = v for every head; GQA: 4 query heads over 2 kv heads */
    enum { D = 4 };
    float q[4 * D], k[2 * D], v[2 * D], out[4 * D];
    for (int i = 0; i < 4 * D; i++) q[i] = (float)(i % 5) - 2;
    for (int i = 0; i < 2 * D; i++) {
        k[i] = 0.5f * (float)i;
        v[i] = 10.0f + (float)i;
    }
    rf_poison_f32(out, 4 * D);
    rf_ref_attention(out, q, k, v, 1, 1, 4, 2, D, 0.5f, false, 0, 0, 0, NULL);
    for (int h = 0; h < 4; h++)
        for (int d = 0; d < D; d++) assert_true(out[h * D + d] == v[(h / 2) * D + d]);
    /* two keys, equal scores -> average; causal row 0 sees only key 0 */
    float q2[2 * D] = {0}, k2[2 * D] = {0}, v2[2 * D] = {1, 2, 3, 4, 5, 6, 7, 8}, o2[2 * D];
    rf_ref_attention(o2, q2, k2, v2, 2, 2, 1, 1, D, 1.0f, false, 0, 0, 0, NULL);
    for (int d = 0; d < D; d++) NEAR(o2[d], (v2[d] + v2[D + d]) / 2, 1e-6);
    rf_ref_attention(o2, q2, k2, v2, 2, 2, 1, 1, D, 1.0f, true, 0, 0, 0, NULL);
    for (int d = 0; d < D; d++) {
        NEAR(o2[d], v2[d], 1e-7);
        NEAR(o2[D + d], (v2[d] + v2[D + d]) / 2, 1e-6);
    }
    /* window 1: each query sees only itself */
    rf_ref_attention(o2, q2, k2, v2, 2, 2, 1, 1, D, 1.0f, true, 0, 1, 0, NULL);
    for (int d = 0; d < D; d++) NEAR(o2[D + d], v2[D + d], 1e-7);
    /* a query with every key masked (position -1) gets zeros */
    rf_poison_f32(o2, 2 * D);
    rf_ref_attention(o2, q2, k2, v2, 1, 2, 1, 1, D, 1.0f, true, -1, 0, 0, NULL);
    for (int d = 0; d < D; d++) assert_true(o2[d] == 0.0f);
    /* scores by definition, with softcap: q.k = 4 and 0 on two keys */
    float q3[D] = {1, 1, 1, 1}, k3[2 * D] = {1, 1, 1, 1, 0, 0, 0, 0};
    float v3[2 * D] = {1, 0, 0, 0, 0, 1, 0, 0}, o3[D];
    rf_ref_attention(o3, q3, k3, v3, 1, 2, 1, 1, D, 0.5f, false, 0, 0, 3.0f, NULL);
    double s0 = 3.0 * tanh(2.0 / 3.0), p0 = exp(s0) / (exp(s0) + 1.0);
    NEAR(o3[0], p0, 1e-6);
    NEAR(o3[1], 1 - p0, 1e-6);
    /* attention sinks: two keys with equal scores 0 and a sink logit ln 2 for head 0: the
     * denominator is e^0 + e^0 + 2 = 4, so each key gets 1/4 and the output is half the
     * average; a sink of -inf changes nothing. Head 1 (sink 0) shares the query: 1/3 each. */
    float qs[2 * D] = {0}, os[2 * D], sk[2] = {logf(2.0f), 0.0f};
    float ks[2 * D] = {0};
    float vs1[2 * D]; /* one kv head: keys 0 and 1 of head 0 */
    for (int d = 0; d < D; d++) vs1[d] = 4.0f + d, vs1[D + d] = 8.0f + d;
    rf_ref_attention(os, qs, ks, vs1, 1, 2, 2, 1, D, 1.0f, false, 0, 0, 0, sk);
    for (int d = 0; d < D; d++) {
        NEAR(os[d], (vs1[d] + vs1[D + d]) / 4, 1e-6);
        NEAR(os[D + d], (vs1[d] + vs1[D + d]) / 3, 1e-6);
    }
    float skinf[2] = {-INFINITY, -INFINITY};
    rf_ref_attention(os, qs, ks, vs1, 1, 2, 2, 1, D, 1.0f, false, 0, 0, 0, skinf);
    for (int d = 0; d < 2 * D; d++) NEAR(os[d], (vs1[d % D] + vs1[D + d % D]) / 2, 1e-6);
    /* a sink far above the scores takes (almost) all the mass: the output goes to 0 */
    float skbig[2] = {60.0f, 60.0f};
    rf_ref_attention(os, qs, ks, vs1, 1, 2, 2, 1, D, 1.0f, false, 0, 0, 0, skbig);
    for (int d = 0; d < 2 * D; d++) NEAR(os[d], 0.0, 1e-20);
}

static void test_argmax(void **state) {
    (void)state;
    const float a[5] = {1, 3, NAN, 3, 2};
    assert_int_equal(rf_ref_argmax(a, 5), 1);
    const float b[3] = {NAN, NAN, NAN};
    assert_int_equal(rf_ref_argmax(b, 3), -1);
    const float c[3] = {NAN, -INFINITY, -INFINITY};
    assert_int_equal(rf_ref_argmax(c, 3), 1);
    const float d[3] = {1, NAN, INFINITY};
    assert_int_equal(rf_ref_argmax(d, 3), 2);
}

static void test_sample(void **state) {
    (void)state;
    /* probabilities 0.1, 0.2, 0.3, 0.4 -> descending order ids 3, 2, 1, 0 */
    const float l[4] = {logf(1), logf(2), logf(3), logf(4)};
    rf_sample_params p = {1.0f, 0, 1.0f, 0.0f};
    const float us[8] = {0.0f, 0.39f, 0.41f, 0.69f, 0.71f, 0.89f, 0.91f, 0.999f};
    const int want[8] = {3, 3, 2, 2, 1, 1, 0, 0};
    for (int i = 0; i < 8; i++) assert_int_equal(rf_ref_sample(l, 4, &p, us[i]), want[i]);
    /* greedy */
    rf_sample_params g = {0.0f, 0, 1.0f, 0.0f};
    assert_int_equal(rf_ref_sample(l, 4, &g, 0.99f), 3);
    assert_int_equal(rf_ref_sample(l, 4, NULL, 0.99f), 3);
    /* top_k = 1 is argmax for any u; top_k = 2 keeps ids 3, 2 (0.4/0.7 split) */
    rf_sample_params k1 = {1.0f, 1, 1.0f, 0.0f}, k2 = {1.0f, 2, 1.0f, 0.0f};
    for (int i = 0; i < 8; i++) assert_int_equal(rf_ref_sample(l, 4, &k1, us[i]), 3);
    assert_int_equal(rf_ref_sample(l, 4, &k2, 0.56f), 3);
    assert_int_equal(rf_ref_sample(l, 4, &k2, 0.58f), 2);
    assert_int_equal(rf_ref_sample(l, 4, &k2, 0.999f), 2);
    /* top_p 0.5: 0.4 < 0.5, 0.4 + 0.3 >= 0.5 -> keep {3, 2} */
    rf_sample_params tp = {1.0f, 0, 0.5f, 0.0f};
    assert_int_equal(rf_ref_sample(l, 4, &tp, 0.56f), 3);
    assert_int_equal(rf_ref_sample(l, 4, &tp, 0.58f), 2);
    assert_int_equal(rf_ref_sample(l, 4, &tp, 0.999f), 2);
    /* min_p 0.6: threshold 0.24 keeps 0.4 and 0.3 */
    rf_sample_params mp = {1.0f, 0, 1.0f, 0.6f};
    assert_int_equal(rf_ref_sample(l, 4, &mp, 0.999f), 2);
    /* temperature 2: p ~ sqrt(1..4); p3 = 2 / (1 + 1.41421 + 1.73205 + 2) = 0.32540 */
    rf_sample_params t2 = {2.0f, 0, 1.0f, 0.0f};
    assert_int_equal(rf_ref_sample(l, 4, &t2, 0.32f), 3);
    assert_int_equal(rf_ref_sample(l, 4, &t2, 0.33f), 2);
    /* rf_ref_sample_interval: the u interval picking each id, consistent with rf_ref_sample */
    double lo, hi;
    assert_true(rf_ref_sample_interval(l, 4, &p, 2, &lo, &hi));
    assert_true(fabs(lo - 0.4) < 1e-6 && fabs(hi - 0.7) < 1e-6); /* logf rounding */
    assert_false(rf_ref_sample_interval(l, 4, &tp, 1, &lo, &hi)); /* cut by top_p */
    assert_true(rf_ref_sample_interval(l, 4, &tp, 2, &lo, &hi));
    assert_true(fabs(lo - 4.0 / 7) < 1e-6 && fabs(hi - 1.0) < 1e-6);
    assert_true(rf_ref_sample_interval(l, 4, &g, 3, &lo, &hi) && lo == 0 && hi == 1);
    assert_false(rf_ref_sample_interval(l, 4, &g, 0, &lo, &hi));
    for (int i = 0; i < 100; i++) {
        const float u = 0.01f * (float)i + 0.005f;
        const int32_t id = rf_ref_sample(l, 4, &t2, u);
        assert_true(rf_ref_sample_interval(l, 4, &t2, id, &lo, &hi));
        assert_true(lo <= u && u < hi);
    }
    /* ties break by lower id; NaN is never picked */
    const float t[4] = {NAN, 1, 1, NAN};
    assert_int_equal(rf_ref_sample(t, 4, &p, 0.0f), 1);
    assert_int_equal(rf_ref_sample(t, 4, &p, 0.6f), 2);
    /* frequencies over a u sweep follow the probabilities */
    int cnt[4] = {0};
    for (int i = 0; i < 10000; i++) cnt[rf_ref_sample(l, 4, &p, (i + 0.5f) / 10000.0f)]++;
    for (int i = 0; i < 4; i++) NEAR(cnt[i], 1000 * (i + 1), 2);
}

/* matmul / get_rows on quantized weights equal the same ops on the rf_dequantize_row output */
static void test_matmul_quantized(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 4);
    const rf_type types[] = {RF_TYPE_F16, RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q6_K};
    for (int ti = 0; ti < 5; ti++) {
        const int64_t n_in = 512, n_out = 5, nt = 3;
        float w[5 * 512], wd[5 * 512], x[3 * 512], y[15], yd[15], g[2 * 512], gd[2 * 512];
        rf_rng_fill_normal(&r, w, n_out * n_in, 1.0f);
        rf_rng_fill_normal(&r, x, nt * n_in, 1.0f);
        size_t rb;
        assert_int_equal(rf_row_size(types[ti], n_in, &rb), RF_OK);
        uint8_t *q = malloc(rb * n_out);
        for (int o = 0; o < n_out; o++) {
            assert_int_equal(rf_quantize_row(types[ti], w + o * n_in, q + o * rb, n_in), RF_OK);
            assert_int_equal(rf_dequantize_row(types[ti], q + o * rb, wd + o * n_in, n_in), RF_OK);
        }
        assert_int_equal(rf_ref_matmul(y, q, types[ti], x, nt, n_in, n_out), RF_OK);
        assert_int_equal(rf_ref_matmul(yd, wd, RF_TYPE_F32, x, nt, n_in, n_out), RF_OK);
        for (int i = 0; i < nt * n_out; i++) NEAR(y[i], yd[i], 1e-4 * (1 + fabs(yd[i])));
        const int32_t ids[2] = {4, 1};
        assert_int_equal(rf_ref_get_rows(g, q, types[ti], ids, 2, n_in, n_out), RF_OK);
        assert_int_equal(rf_ref_get_rows(gd, wd, RF_TYPE_F32, ids, 2, n_in, n_out), RF_OK);
        assert_memory_equal(g, gd, sizeof g);
        free(q);
    }
    float y[1];
    assert_int_equal(rf_ref_matmul(y, NULL, RF_TYPE_Q4_0, NULL, 1, 33, 1), RF_ERR_INVALID_ARG);
}

/* ---- mixture of experts: router, indirect product, combine ---- */

static void test_moe_route(void **state) {
    (void)state;
    int32_t ids[8];
    float w[8];
    /* softmax gating, a tie between experts 1 and 3 -> the lower id first */
    const float lg[4] = {1, 3, 2, 3};
    const double Z = exp(1.0) + 2 * exp(3.0) + exp(2.0);
    assert_int_equal(rf_ref_moe_route(ids, w, lg, NULL, 1, 4, 2, RF_MOE_SOFTMAX, false, 1.0f), RF_OK);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 3);
    NEAR(w[0], exp(3.0) / Z, 1e-6);
    NEAR(w[1], exp(3.0) / Z, 1e-6);
    assert_int_equal(rf_ref_moe_route(ids, w, lg, NULL, 1, 4, 3, RF_MOE_SOFTMAX, true, 1.0f), RF_OK);
    assert_int_equal(ids[2], 2); /* third: expert 2 (logit 2) */
    const double s3 = (2 * exp(3.0) + exp(2.0)) / Z;
    NEAR(w[0], exp(3.0) / Z / s3, 1e-6);
    NEAR(w[2], exp(2.0) / Z / s3, 1e-6);
    /* sigmoid gating with a selection bias that picks expert 2; the weights ignore the bias;
     * norm then scale */
    const float lg2[4] = {0, 1, -1, 2}, bias[4] = {0, 0, 5, 0};
    assert_int_equal(rf_ref_moe_route(ids, w, lg2, bias, 1, 4, 2, RF_MOE_SIGMOID, true, 2.5f), RF_OK);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 3);
    const double a = 1 / (1 + exp(1.0)), b = 1 / (1 + exp(-2.0));
    NEAR(w[0], 2.5 * a / (a + b), 1e-6);
    NEAR(w[1], 2.5 * b / (a + b), 1e-6);
    /* softmax over the top-k logits (gpt-oss), two tokens */
    const float lg3[8] = {0.5f, 2, 1, -1, /* token 1: */ 4, 0, 0, 4};
    assert_int_equal(rf_ref_moe_route(ids, w, lg3, NULL, 2, 4, 2, RF_MOE_SOFTMAX_TOPK, false, 1.0f), RF_OK);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    NEAR(w[0], 1 / (1 + exp(-1.0)), 1e-6);
    NEAR(w[1], 1 / (1 + exp(1.0)), 1e-6);
    assert_int_equal(ids[2], 0);
    assert_int_equal(ids[3], 3);
    NEAR(w[2], 0.5, 1e-7);
    NEAR(w[3], 0.5, 1e-7);
    /* k == n_expert: every expert, in order of score, ties by id */
    const float lg4[3] = {0, 0, 0};
    assert_int_equal(rf_ref_moe_route(ids, w, lg4, NULL, 1, 3, 3, RF_MOE_SOFTMAX, true, 1.0f), RF_OK);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(ids[j], j);
        NEAR(w[j], 1.0 / 3, 1e-7);
    }
    /* norm of near-zero sigmoid weights: the sum clamps at 2^-14 */
    const float lg5[2] = {-30, -30};
    assert_int_equal(rf_ref_moe_route(ids, w, lg5, NULL, 1, 2, 2, RF_MOE_SIGMOID, true, 1.0f), RF_OK);
    NEAR(w[0], 1 / (1 + exp(30.0)) / 6.103515625e-5, 1e-9);
    /* bad k, bad gating */
    assert_int_equal(rf_ref_moe_route(ids, w, lg, NULL, 1, 4, 0, RF_MOE_SOFTMAX, true, 1.0f), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_ref_moe_route(ids, w, lg, NULL, 1, 4, 5, RF_MOE_SOFTMAX, true, 1.0f), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_ref_moe_route(ids, w, lg, NULL, 1, 0, 1, RF_MOE_SOFTMAX, true, 1.0f), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_ref_moe_route(ids, w, lg, NULL, 1, 4, 2, (rf_moe_gating)7, true, 1.0f), RF_ERR_INVALID_ARG);
}

static void test_matmul_id(void **state) {
    (void)state;
    /* 3 experts of 2 x 2: identity, 2 * identity, swap */
    const float W[12] = {1, 0, 0, 1, 2, 0, 0, 2, 0, 1, 1, 0};
    const float x[4] = {1, 2, 3, 4};
    const int32_t ids[4] = {2, 0, 1, 2};
    float y[8];
    assert_int_equal(rf_ref_matmul_id(y, W, RF_TYPE_F32, 2, 2, 3, x, false, ids, NULL, 2, 2), RF_OK);
    const float want[8] = {2, 1, 1, 2, 6, 8, 4, 3};
    for (int i = 0; i < 8; i++) NEAR(y[i], want[i], 0);
    const float bias[6] = {10, 20, 30, 40, 50, 60};
    assert_int_equal(rf_ref_matmul_id(y, W, RF_TYPE_F32, 2, 2, 3, x, false, ids, bias, 2, 2), RF_OK);
    NEAR(y[0], 52, 0);
    NEAR(y[3], 22, 0);
    NEAR(y[4], 36, 0);
    /* x per slot: 4 rows */
    const float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(rf_ref_matmul_id(y, W, RF_TYPE_F32, 2, 2, 3, xs, true, ids, NULL, 2, 2), RF_OK);
    const float want2[8] = {2, 1, 3, 4, 10, 12, 8, 7};
    for (int i = 0; i < 8; i++) NEAR(y[i], want2[i], 0);
    const int32_t bad[4] = {0, 3, 0, 0};
    assert_int_equal(rf_ref_matmul_id(y, W, RF_TYPE_F32, 2, 2, 3, x, false, bad, NULL, 2, 2), RF_ERR_RANGE);
    /* quantized experts: each slot equals rf_ref_matmul on that expert's rows */
    enum { NI = 64, NO = 3, NE = 4 };
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    float wf[NE * NO * NI], xq[2 * NI], yq[4 * NO], yr[NO];
    rf_rng_fill_normal(&r, wf, NE * NO * NI, 1.0f);
    rf_rng_fill_normal(&r, xq, 2 * NI, 1.0f);
    size_t rb;
    assert_int_equal(rf_row_size(RF_TYPE_Q8_0, NI, &rb), RF_OK);
    uint8_t *q = malloc(rb * NE * NO);
    for (int o = 0; o < NE * NO; o++) assert_int_equal(rf_quantize_row(RF_TYPE_Q8_0, wf + o * NI, q + o * rb, NI), RF_OK);
    const int32_t qi[4] = {3, 1, 1, 0};
    assert_int_equal(rf_ref_matmul_id(yq, q, RF_TYPE_Q8_0, NI, NO, NE, xq, false, qi, NULL, 2, 2), RF_OK);
    for (int s = 0; s < 4; s++) {
        assert_int_equal(rf_ref_matmul(yr, q + (size_t)qi[s] * NO * rb, RF_TYPE_Q8_0, xq + (s / 2) * NI, 1, NI, NO), RF_OK);
        assert_memory_equal(yr, yq + s * NO, sizeof yr);
    }
    free(q);
}

static void test_moe_combine(void **state) {
    (void)state;
    const float z[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w[4] = {0.5f, 0.25f, 1, 2};
    float y[4];
    rf_poison_f32(y, 4);
    rf_ref_moe_combine(y, z, w, 2, 2, 2);
    NEAR(y[0], 0.5 + 0.75, 0);
    NEAR(y[1], 1 + 1, 0);
    NEAR(y[2], 5 + 14, 0);
    NEAR(y[3], 6 + 16, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_causal_mask),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_rope_hand),
        cmocka_unit_test(test_rope_layouts_and_norms),
        cmocka_unit_test(test_matmul_get_rows_f32),
        cmocka_unit_test(test_matmul_quantized),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_moe_route),
        cmocka_unit_test(test_matmul_id),
        cmocka_unit_test(test_moe_combine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
