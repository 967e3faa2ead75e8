/* test_cpu_moe.c — the CPU backend's mixture-of-experts ops (moe_route, matmul_id, moe_combine)
 * against the scalar references of ref_ops.h on random inputs (seed printed), outputs poisoned
 * first: matmul_id over f32/f16/q8_0/q4_0/q4_K/q6_K experts, x per token and per slot, with and
 * without a bias, decode (1 token) and a batch, threads 1 and 3 (tolerance: 1e-5 for f32, 1e-2
 * for f16; quantized weights: the reference takes x in f32, the CPU rounds x to int8 per block,
 * see act_tol); the router bit for bit; the combine; i32 tensors from alloc; an out-of-range
 * expert id refused. */
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

static rf_tensor host_f32(float *p, int64_t n, int64_t rows) {
    rf_tensor t = {RF_TYPE_F32, {n, rows}, (size_t)n * 4, p, false};
    return t;
}

/* The CPU rounds x to int8 per block of blk (256 for the K-quants' q8_K, 32 otherwise) with
 * d = amax/127, an error uniform in +-d/2 per element: its expected size relative to x is
 * e = sqrt(sum over blocks of blk d^2/12) / ||x||, and for random weights a product carries it
 * unchanged (||W dx|| / ||W x|| ~ ||dx|| / ||x||, +-sqrt(2/n_out) per side). So the bound is
 * 2 e of the rows of x (the worst row): the 2 covers that spread many times over, and it follows x's
 * own largest element (a 1-token draw with amax 4.4 gives 1.0e-2, which a fixed 1e-2 failed). */
static double act_tol(rf_type t, const float *x, int64_t n_in, int64_t rows) {
    const int64_t blk = t == RF_TYPE_Q4_K || t == RF_TYPE_Q6_K ? 256 : 32;
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        double err = 0, nx = 0;
        for (int64_t b = 0; b < n_in; b += blk) {
            double amax = 0;
            for (int64_t i = b; i < b + blk && i < n_in; i++) amax = fmax(amax, fabs(x[r * n_in + i])), nx += (double)x[r * n_in + i] * x[r * n_in + i];
            err += (double)blk * (amax / 127) * (amax / 127) / 12;
        }
        worst = fmax(worst, sqrt(err / nx));
    }
    return 2 * worst;
}

static void test_route_combine(void **state) {
    (void)state;
    rf_backend *be;
    assert_int_equal(rf_backend_cpu_new(3, &be), RF_OK);
    const int64_t n = 7, ne = 16, k = 4, m = 40;
    float *lg = rf_test_randn(&g_rng, (size_t)(n * ne), 2.0f), *sb = rf_test_randn(&g_rng, (size_t)ne, 0.5f);
    rf_tensor ids, wts, lt = host_f32(lg, ne, n), bt = host_f32(sb, ne, 1);
    assert_int_equal(be->ops->alloc(be, RF_TYPE_I32, k, n, &ids), RF_OK);
    assert_int_equal(ids.nb1, (size_t)k * 4);
    assert_int_equal(be->ops->alloc(be, RF_TYPE_F32, k, n, &wts), RF_OK);
    int32_t rid[7 * 4];
    float rw[7 * 4];
    const rf_moe_gating gs[] = {RF_MOE_SOFTMAX, RF_MOE_SIGMOID, RF_MOE_SOFTMAX_TOPK};
    for (int g = 0; g < 3; g++) {
        const rf_tensor *bias = gs[g] == RF_MOE_SIGMOID ? &bt : NULL;
        assert_int_equal(be->ops->moe_route(be, &ids, &wts, &lt, bias, n, ne, k, gs[g], g != 2, 1.5f), RF_OK);
        assert_int_equal(rf_ref_moe_route(rid, rw, lg, bias ? sb : NULL, n, ne, k, gs[g], g != 2, 1.5f), RF_OK);
        assert_memory_equal(ids.data, rid, sizeof rid);
        assert_memory_equal(wts.data, rw, sizeof rw);
    }
    assert_int_equal(be->ops->moe_route(be, &ids, &wts, &lt, NULL, n, ne, ne + 1, RF_MOE_SOFTMAX, true, 1.0f),
                     RF_ERR_INVALID_ARG);
    /* combine */
    float *z = rf_test_randn(&g_rng, (size_t)(n * k * m), 1.0f), *want = malloc((size_t)(n * m) * 4), *got = malloc((size_t)(n * m) * 4);
    rf_poison_f32(got, (size_t)(n * m));
    rf_tensor zt = host_f32(z, m, n * k), yt = host_f32(got, m, n);
    assert_int_equal(be->ops->moe_combine(be, &yt, &zt, &wts, n, k, m), RF_OK);
    rf_ref_moe_combine(want, z, wts.data, n, k, m);
    rf_test_check_l2("moe_combine", got, want, (size_t)(n * m), 1e-6);
    be->ops->free(be, &ids);
    be->ops->free(be, &wts);
    free(lg), free(sb), free(z), free(want), free(got);
    be->ops->destroy(be);
}

static void test_matmul_id(void **state) {
    (void)state;
    const rf_type types[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0, RF_TYPE_Q4_0, RF_TYPE_Q4_K, RF_TYPE_Q6_K};
    const int64_t n_in = 256, n_out = 67, ne = 6, k = 3; /* 67: a partial block of 16 rows */
    for (int th = 1; th <= 3; th += 2) {
        rf_backend *be;
        assert_int_equal(rf_backend_cpu_new(th, &be), RF_OK);
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (int64_t n = 1; n <= 5; n += 4)
                for (int per_slot = 0; per_slot < 2; per_slot++) {
                    const int64_t nx = per_slot ? n * k : n;
                    float *wf = rf_test_randn(&g_rng, (size_t)(n_in * n_out * ne), 0.5f), *x = rf_test_randn(&g_rng, (size_t)(n_in * nx), 1.0f);
                    float *bias = per_slot ? rf_test_randn(&g_rng, (size_t)(ne * n_out), 1.0f) : NULL;
                    size_t rs;
                    assert_int_equal(rf_row_size(types[ti], n_in, &rs), RF_OK);
                    void *wq = malloc(rs * (size_t)(n_out * ne));
                    for (int64_t o = 0; o < n_out * ne; o++)
                        assert_int_equal(rf_quantize_row(types[ti], wf + o * n_in, (char *)wq + o * rs, n_in), RF_OK);
                    int32_t id[5 * 3];
                    for (int64_t s = 0; s < n * k; s++) id[s] = (int32_t)((s * 5 + s / k) % ne); /* repeats across tokens */
                    float *want = malloc((size_t)(n * k * n_out) * 4), *got = malloc((size_t)(n * k * n_out) * 4);
                    assert_int_equal(rf_ref_matmul_id(want, wq, types[ti], n_in, n_out, ne, x, per_slot, id, bias, n, k),
                                     RF_OK);
                    rf_poison_f32(got, (size_t)(n * k * n_out));
                    rf_tensor w, ids, xt = host_f32(x, n_in, nx), yt = host_f32(got, n_out, n * k),
                                      bt = bias ? host_f32(bias, n_out, ne) : (rf_tensor){0};
                    assert_int_equal(be->ops->weight(be, types[ti], n_in, n_out * ne, wq, &w), RF_OK);
                    assert_int_equal(be->ops->alloc(be, RF_TYPE_I32, k, n, &ids), RF_OK);
                    memcpy(ids.data, id, (size_t)(n * k) * 4);
                    assert_int_equal(be->ops->matmul_id(be, &yt, &w, n_out, &xt, per_slot, &ids, bias ? &bt : NULL, n, k),
                                     RF_OK);
                    char name[96];
                    snprintf(name, sizeof name, "matmul_id %s n=%lld %s%s t=%d", rf_type_name(types[ti]), (long long)n,
                             per_slot ? "per-slot" : "per-token", bias ? " +bias" : "", th);
                    const double tol = types[ti] == RF_TYPE_F32 ? 1e-5 : types[ti] == RF_TYPE_F16 ? 1e-2
                                                                    : act_tol(types[ti], x, n_in, nx);
                    rf_test_check_l2(name, got, want, (size_t)(n * k * n_out), tol);
                    ((int32_t *)ids.data)[n * k - 1] = (int32_t)ne; /* out of range */
                    assert_int_equal(be->ops->matmul_id(be, &yt, &w, n_out, &xt, per_slot, &ids, NULL, n, k), RF_ERR_RANGE);
                    be->ops->free(be, &ids);
                    be->ops->free(be, &w);
                    free(wf), free(x), free(bias), free(wq), free(want), free(got);
                }
        be->ops->destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_route_combine, setup),
        cmocka_unit_test_setup(test_matmul_id, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
