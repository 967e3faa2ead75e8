/* test_gpu_gemvn.c — products of 1..16 tokens through rf_gpu_matmul (whatever kernel the router,
 * gpu_route.c, sends them to: one GEMV call, MMQ from 5 tokens, GEMV groups) against
 * rf_ref_matmul, for every type with a fast path (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, F16) and MXFP4,
 * Q2_K, Q3_K, at real and odd widths and odd heights, outputs poisoned first; and that the route's
 * rounding answer (rf_gpu_matmul_rounds_x) is consistent with it. Tolerance model: the products
 * differ from the double-precision oracle by the activation rounding only where the route rounds x
 * (int8 per 32, step amax/127: for Gaussian x, amax ~2.2 sigma, the uniform error's rms is
 * ~0.5% of an output's rms, as in test_gpu_mmq) and by tf32 / f32 float order otherwise
 * (< 1e-3): rel. L2 < 1e-2 where x is rounded, 2e-3 where not. RF_GEMVN_BENCH=1 times each type
 * at 1, 2, 4, 8, 16 tokens on 4096 -> 14336 and 14336 -> 4096 (us and GB/s of the weight read).
 * Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_gemvn: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_test_common.h"

#include <time.h>

#include "backend/ref/ref_ops.h"
#include "rocmforge/quant.h"

static const rf_type k_types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K,
                                  RF_TYPE_F16,  RF_TYPE_MXFP4, RF_TYPE_Q2_K, RF_TYPE_Q3_K};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static void run_case(rf_rng *r, rf_type t, int64_t nt, int64_t n_in, int64_t n_out) {
    size_t bytes;
    uint8_t *w = random_weights(r, t, n_out, n_in, &bytes);
    float *x = host_f32(nt * n_in), *got = host_f32(nt * n_out), *want = host_f32(nt * n_out);
    rf_rng_fill_normal(r, x, nt * n_in, 1.0f);
    assert_int_equal(rf_ref_matmul(want, w, t, x, nt, n_in, n_out), RF_OK);
    void *dw = dev_from(w, bytes);
    float *dx = dev_from(x, nt * n_in * 4), *dy = dev_poison(nt * n_out * 4);
    const rf_status st = rf_gpu_matmul(g_ctx, dy, dw, t, dx, nt, n_in, n_out);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    dev_to(got, dy, nt * n_out * 4);
    for (int64_t i = 0; i < nt * n_out; i++) assert_false(isnan(got[i])); /* every output written */
    const bool rounds = rf_gpu_matmul_rounds_x(g_ctx, t, nt, n_in);
    char what[112];
    snprintf(what, sizeof what, "matmul %s nt=%lld %lldx%lld (%s x)", rf_type_name(t), (long long)nt,
             (long long)n_out, (long long)n_in, rounds ? "int8" : "f32");
    check_rel(what, got, want, nt * n_out, rounds ? 1e-2 : 2e-3);
    if (t == RF_TYPE_F16) assert_false(rounds); /* unquantized weights never round x */
    rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
    free(w), free(x), free(got), free(want);
}

static void test_gemvn_vs_ref(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 13);
    /* widths: 512 (every type's fast kernels and MMQ), 1536 (Q6_K MMQ needs 512s: 3 of them),
     * 96 (32-element formats and F16 only: the generic / f32-x paths); heights odd */
    const struct { int64_t n_in, n_out; } shapes[] = {{512, 131}, {1536, 67}, {96, 45}};
    for (size_t k = 0; k < N_TYPES; k++) {
        const rf_type t = k_types[k];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (shapes[s].n_in % rf_type_info(t)->block_size) continue;
            for (int64_t nt = 1; nt <= 16; nt++) run_case(&r, t, nt, shapes[s].n_in, shapes[s].n_out);
        }
    }
}

/* ---- RF_GEMVN_BENCH=1: time per call (host clock over synchronized runs, the weights rotating
 * among copies of > 200 MB so that each call reads them from device memory) ----------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench_shape(rf_type t, int64_t n_in, int64_t n_out) {
    size_t rb;
    assert_int_equal(rf_row_size(t, n_in, &rb), RF_OK);
    const size_t wb = rb * (size_t)n_out;
    int nmat = (int)(((size_t)200 << 20) / wb) + 1;
    if (nmat < 2) nmat = 2;
    if (nmat > 64) nmat = 64;
    void *w[64];
    for (int i = 0; i < nmat; i++) {
        assert_int_equal(rf_gpu_alloc(g_ctx, wb, &w[i]), RF_OK);
        assert_int_equal(rf_gpu_memset(g_ctx, w[i], 0x11 + i, wb), RF_OK); /* finite f16 scales */
    }
    float *x, *y;
    assert_int_equal(rf_gpu_alloc(g_ctx, 16 * n_in * 4, (void **)&x), RF_OK);
    assert_int_equal(rf_gpu_alloc(g_ctx, 16 * n_out * 4, (void **)&y), RF_OK);
    assert_int_equal(rf_gpu_memset(g_ctx, x, 0x3c, 16 * n_in * 4), RF_OK);
    const int64_t nts[] = {1, 2, 4, 8, 16};
    for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
        const int64_t nt = nts[k];
        const int reps = nmat * (64 / nmat > 8 ? 64 / nmat : 8);
        for (int i = 0; i < nmat; i++) assert_int_equal(rf_gpu_matmul(g_ctx, y, w[i], t, x, nt, n_in, n_out), RF_OK);
        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
        const double t0 = now_s();
        for (int i = 0; i < reps; i++)
            assert_int_equal(rf_gpu_matmul(g_ctx, y, w[i % nmat], t, x, nt, n_in, n_out), RF_OK);
        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
        const double us = (now_s() - t0) / reps * 1e6;
        fprintf(stderr, "  %-6s %5lldx%-6lld %3lld tok %9.1f us %7.0f GB/s\n", rf_type_name(t), (long long)n_out,
                (long long)n_in, (long long)nt, us, wb / us * 1e-3);
    }
    for (int i = 0; i < nmat; i++) rf_gpu_free(g_ctx, w[i]);
    rf_gpu_free(g_ctx, x), rf_gpu_free(g_ctx, y);
}

static void test_gemvn_bench(void **state) {
    (void)state;
    if (!getenv("RF_GEMVN_BENCH")) return;
    for (size_t k = 0; k < N_TYPES; k++) {
        bench_shape(k_types[k], 4096, 14336);
        bench_shape(k_types[k], 14336, 4096);
    }
}

int main(void) {
    gpu_test_init_or_skip("test_gpu_gemvn");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemvn_vs_ref),
        cmocka_unit_test(test_gemvn_bench),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
