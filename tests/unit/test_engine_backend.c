/* test_engine_backend.c — the CPU backend's ops against the scalar references of ref_ops.h on
 * fresh random inputs (seed printed), outputs poisoned first: matmul (f32/f16/q8_0/q4_1/q4_K/
 * q6_K weights; tolerance rel. L2 < 1e-2 for quantized activations, 1e-5 for f32), rmsnorm,
 * rope (normal and neox, with freq factors), attention (f32 cache, GQA, causal, sliding
 * window, several query positions), glu (swiglu exact, geglu through ggml's f16 table < 2e-3),
 * get_rows and store_rows. Thread counts 1 and 3. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ref/ref_ops.h"

static rf_rng g_rng;

static int setup(void **state) {
    (void)state;
    rf_rng_init(&g_rng, rf_test_seed());
    return 0;
}

static float *rnd(size_t n, float scale) {
    float *x = malloc(n * sizeof(float));
    rf_rng_fill_normal(&g_rng, x, n, scale);
    return x;
}

static rf_tensor host_f32(float *p, int64_t n, int64_t rows) {
    rf_tensor t = {RF_TYPE_F32, {n, rows}, (size_t)n * 4, p, false};
    return t;
}

static void check(const char *what, const float *got, const float *want, size_t n, double tol) {
    double e = rf_rel_l2(got, want, n);
    printf("  %-34s rel_l2 %.2e (tol %.0e)\n", what, e, tol);
    if (!(e < tol)) fail_msg("%s: rel_l2 %g >= %g", what, e, tol);
}

static void test_matmul(void **state) {
    (void)state;
    const rf_type types[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0, RF_TYPE_Q4_1, RF_TYPE_Q4_K, RF_TYPE_Q6_K};
    for (int th = 1; th <= 3; th += 2) {
        rf_backend *be;
        assert_int_equal(rf_backend_cpu_new(th, &be), RF_OK);
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            int64_t n_in = 512, n_out = 37, nt = 5;
            float *wf = rnd((size_t)(n_in * n_out), 0.5f), *x = rnd((size_t)(n_in * nt), 1.0f);
            size_t rs;
            assert_int_equal(rf_row_size(types[ti], n_in, &rs), RF_OK);
            void *wq = malloc(rs * (size_t)n_out);
            for (int64_t o = 0; o < n_out; o++)
                assert_int_equal(rf_quantize_row(types[ti], wf + o * n_in, (char *)wq + o * rs, n_in), RF_OK);
            float *want = malloc((size_t)(nt * n_out) * 4), *got = malloc((size_t)(nt * n_out) * 4);
            assert_int_equal(rf_ref_matmul(want, wq, types[ti], x, nt, n_in, n_out), RF_OK);
            rf_poison_f32(got, (size_t)(nt * n_out));
            rf_tensor w, xt = host_f32(x, n_in, nt), yt = host_f32(got, n_out, nt);
            assert_int_equal(be->ops->weight(be, types[ti], n_in, n_out, wq, &w), RF_OK);
            assert_int_equal(be->ops->matmul(be, &yt, &w, &xt, nt), RF_OK);
            char name[64];
            snprintf(name, sizeof name, "matmul %s t=%d", rf_type_name(types[ti]), th);
            check(name, got, want, (size_t)(nt * n_out), types[ti] == RF_TYPE_F32 ? 1e-5 : 1e-2);
            free(wf), free(x), free(wq), free(want), free(got);
        }
        be->ops->destroy(be);
    }
}

static void test_norm_rope_glu(void **state) {
    (void)state;
    rf_backend *be;
    assert_int_equal(rf_backend_cpu_new(2, &be), RF_OK);
    int64_t rows = 7, n = 96;
    float *x = rnd((size_t)(rows * n), 2.0f), *w = rnd((size_t)n, 1.0f);
    float *want = malloc((size_t)(rows * n) * 4), *got = malloc((size_t)(rows * n) * 4);
    rf_ref_rmsnorm(want, x, w, rows, n, 1e-6f);
    rf_poison_f32(got, (size_t)(rows * n));
    rf_tensor xt = host_f32(x, n, rows), yt = host_f32(got, n, rows), wt = host_f32(w, n, 1);
    assert_int_equal(be->ops->rmsnorm(be, &yt, &xt, &wt, rows, n, 1e-6f), RF_OK);
    check("rmsnorm", got, want, (size_t)(rows * n), 1e-5);

    /* rope: 5 tokens x 3 heads x 64, positions 11.., both modes, partial rotation, factors */
    int64_t nt = 5, nh = 3, hd = 64;
    float ff[16];
    for (int i = 0; i < 16; i++) ff[i] = 1.0f + 0.25f * (float)i;
    for (int mode = 0; mode <= 2; mode += 2) {
        for (int use_ff = 0; use_ff < 2; use_ff++) {
            int64_t n_rot = use_ff ? 32 : 64;
            float *q = rnd((size_t)(nt * nh * hd), 1.0f), *r = malloc((size_t)(nt * nh * hd) * 4);
            memcpy(r, q, (size_t)(nt * nh * hd) * 4);
            int32_t pos[5] = {11, 12, 13, 14, 15};
            rf_ref_rope(r, nt, nh, hd, n_rot, nh * hd, hd, pos, 10000.0f, 0.5f, use_ff ? ff : NULL, mode);
            rf_tensor qt = host_f32(q, nh * hd, nt), fft = host_f32(ff, 16, 1);
            assert_int_equal(be->ops->rope(be, &qt, nt, nh, hd, n_rot, 11, 10000.0f, 0.5f, use_ff ? &fft : NULL, mode), RF_OK);
            check(mode ? "rope neox" : "rope normal", q, r, (size_t)(nt * nh * hd), 1e-5);
            free(q), free(r);
        }
    }
    /* glu */
    size_t m = 1000;
    float *g = rnd(m, 3.0f), *u = rnd(m, 1.0f), *gw = malloc(m * 4), *gg = malloc(m * 4);
    rf_tensor gt = host_f32(g, (int64_t)m, 1), ut = host_f32(u, (int64_t)m, 1), ot = host_f32(gg, (int64_t)m, 1);
    rf_ref_swiglu(gw, g, u, (int64_t)m);
    rf_poison_f32(gg, m);
    assert_int_equal(be->ops->glu(be, &ot, &gt, &ut, (int64_t)m, RF_GLU_SWIGLU), RF_OK);
    check("swiglu", gg, gw, m, 1e-6);
    rf_ref_geglu(gw, g, u, (int64_t)m);
    rf_poison_f32(gg, m);
    assert_int_equal(be->ops->glu(be, &ot, &gt, &ut, (int64_t)m, RF_GLU_GEGLU), RF_OK);
    check("geglu (ggml f16 table)", gg, gw, m, 2e-3);
    free(g), free(u), free(gw), free(gg);
    free(x), free(w), free(want), free(got);
    be->ops->destroy(be);
}

static void test_attention(void **state) {
    (void)state;
    for (int th = 1; th <= 3; th += 2) {
        rf_backend *be;
        assert_int_equal(rf_backend_cpu_new(th, &be), RF_OK);
        int64_t H = 6, HKV = 2, D = 64, n_ctx = 40, pos0 = 17, nq = 9, nkv = pos0 + nq;
        for (int64_t window = 0; window <= 8; window += 8) {
            float *q = rnd((size_t)(nq * H * D), 1.0f), *k = rnd((size_t)(nkv * HKV * D), 1.0f),
                  *v = rnd((size_t)(nkv * HKV * D), 1.0f);
            float *want = malloc((size_t)(nq * H * D) * 4), *got = malloc((size_t)(nq * H * D) * 4);
            rf_ref_attention(want, q, k, v, nq, nkv, H, HKV, D, 0.125f, true, pos0, window, 0.0f);
            rf_tensor kc, vc;
            assert_int_equal(be->ops->alloc(be, RF_TYPE_F32, HKV * D, n_ctx, &kc), RF_OK);
            assert_int_equal(be->ops->alloc(be, RF_TYPE_F32, HKV * D, n_ctx, &vc), RF_OK);
            rf_tensor ks = host_f32(k, HKV * D, nkv), vs = host_f32(v, HKV * D, nkv);
            assert_int_equal(be->ops->store_rows(be, &kc, 0, &ks, nkv), RF_OK);
            assert_int_equal(be->ops->store_rows(be, &vc, 0, &vs, nkv), RF_OK);
            rf_tensor qt = host_f32(q, H * D, nq), ot = host_f32(got, H * D, nq);
            rf_poison_f32(got, (size_t)(nq * H * D));
            assert_int_equal(be->ops->attention(be, &ot, &qt, &kc, &vc, nq, nkv, H, HKV, D, 0.125f, pos0, window, 0.0f), RF_OK);
            check(window ? "attention f32, window 8" : "attention f32, causal", got, want, (size_t)(nq * H * D), 1e-5);
            /* the f16 cache stays within f16 rounding */
            rf_tensor kc16, vc16;
            assert_int_equal(be->ops->alloc(be, RF_TYPE_F16, HKV * D, n_ctx, &kc16), RF_OK);
            assert_int_equal(be->ops->alloc(be, RF_TYPE_F16, HKV * D, n_ctx, &vc16), RF_OK);
            assert_int_equal(be->ops->store_rows(be, &kc16, 0, &ks, nkv), RF_OK);
            assert_int_equal(be->ops->store_rows(be, &vc16, 0, &vs, nkv), RF_OK);
            rf_poison_f32(got, (size_t)(nq * H * D));
            assert_int_equal(be->ops->attention(be, &ot, &qt, &kc16, &vc16, nq, nkv, H, HKV, D, 0.125f, pos0, window, 0.0f), RF_OK);
            check("attention f16 cache", got, want, (size_t)(nq * H * D), 5e-3);
            be->ops->free(be, &kc), be->ops->free(be, &vc), be->ops->free(be, &kc16), be->ops->free(be, &vc16);
            free(q), free(k), free(v), free(want), free(got);
        }
        be->ops->destroy(be);
    }
}

static void test_get_rows(void **state) {
    (void)state;
    rf_backend *be;
    assert_int_equal(rf_backend_cpu_new(1, &be), RF_OK);
    int64_t n = 64, rows = 10;
    float *wf = rnd((size_t)(n * rows), 1.0f);
    size_t rs;
    assert_int_equal(rf_row_size(RF_TYPE_Q8_0, n, &rs), RF_OK);
    void *wq = malloc(rs * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) rf_quantize_row(RF_TYPE_Q8_0, wf + r * n, (char *)wq + r * rs, n);
    int32_t ids[3] = {9, 0, 4};
    float want[3 * 64], got[3 * 64];
    assert_int_equal(rf_ref_get_rows(want, wq, RF_TYPE_Q8_0, ids, 3, n, rows), RF_OK);
    rf_tensor w, yt = host_f32(got, n, 3);
    be->ops->weight(be, RF_TYPE_Q8_0, n, rows, wq, &w);
    rf_poison_f32(got, 3 * 64);
    assert_int_equal(be->ops->get_rows(be, &yt, &w, ids, 3), RF_OK);
    check("get_rows q8_0", got, want, 3 * 64, 1e-6);
    int32_t bad = 10;
    assert_int_equal(be->ops->get_rows(be, &yt, &w, &bad, 1), RF_ERR_RANGE);
    free(wf), free(wq);
    be->ops->destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul), cmocka_unit_test(test_norm_rope_glu),
        cmocka_unit_test(test_attention), cmocka_unit_test(test_get_rows),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
