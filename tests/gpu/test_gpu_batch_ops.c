/* test_gpu_batch_ops.c — the batched forward's small GPU kernels against the CPU backend's ops:
 * kv_store (f32 and f16 caches, scattered slots, a padding slot -1 skipped), gather_rows,
 * add_bias and softcap; fresh random inputs, outputs poisoned first. f32 results must be exact,
 * f16 stores must equal the CPU's round-to-nearest-even conversion bit for bit. Skips (77)
 * without a GPU. */
#include "gpu_test_common.h"

#include "backend/backend.h"

static rf_rng g_rng;

static int setup(void **state) {
    (void)state;
    gpu_test_init_or_skip("test_gpu_batch_ops");
    rf_rng_init(&g_rng, rf_test_seed());
    return 0;
}

static float *rnd(size_t n, float scale) {
    float *x = host_f32(n);
    rf_rng_fill_normal(&g_rng, x, n, scale);
    return x;
}

static void test_kv_store(void **state) {
    (void)state;
    rf_backend *cpu;
    assert_int_equal(rf_backend_cpu_new(1, &cpu), RF_OK);
    const int64_t n = 200, rows = 37, nt = 6;
    int32_t slots[6] = {36, 0, 17, -1, 5, 18};
    float *src = rnd((size_t)(nt * n), 2.0f);
    for (int ti = 0; ti < 2; ti++) {
        rf_type t = ti ? RF_TYPE_F16 : RF_TYPE_F32;
        size_t es = ti ? 2 : 4;
        rf_tensor c;
        assert_int_equal(cpu->ops->alloc(cpu, t, n, rows, &c), RF_OK);
        memset(c.data, 0xFF, (size_t)rows * n * es);
        /* the CPU op refuses a padding slot: store the valid ones only */
        for (int k = 0; k < nt; k++) {
            if (slots[k] < 0) continue;
            rf_batch one = {0};
            one.n_tokens = 1;
            one.slot = &slots[k];
            rf_tensor s1 = {RF_TYPE_F32, {n, 1}, (size_t)n * 4, src + k * n, false};
            assert_int_equal(cpu->ops->kv_store(cpu, &c, &s1, &one), RF_OK);
        }
        void *dc = dev_poison((size_t)rows * n * es);
        float *dsrc = dev_from(src, (size_t)(nt * n) * 4);
        int32_t *dslot = dev_from(slots, sizeof slots);
        assert_int_equal(rf_gpu_kv_store(g_ctx, dc, t, rows, dsrc, nt, n, dslot), RF_OK);
        void *got = malloc((size_t)rows * n * es);
        dev_to(got, dc, (size_t)rows * n * es);
        if (memcmp(got, c.data, (size_t)rows * n * es)) fail_msg("kv_store %s differs from the CPU", rf_type_name(t));
        printf("  kv_store %s: identical to the CPU (padding slot skipped)\n", rf_type_name(t));
        free(got);
        rf_gpu_free(g_ctx, dc);
        rf_gpu_free(g_ctx, dsrc);
        rf_gpu_free(g_ctx, dslot);
        cpu->ops->free(cpu, &c);
    }
    free(src);
    cpu->ops->destroy(cpu);
}

static void test_gather_bias_softcap(void **state) {
    (void)state;
    const int64_t n = 300, rows = 9;
    float *x = rnd((size_t)(rows * n), 3.0f), *b = rnd((size_t)n, 1.0f);
    int32_t idx[4] = {8, 0, 3, 3};
    float *dx = dev_from(x, (size_t)(rows * n) * 4), *dy = dev_poison((size_t)(4 * n) * 4);
    int32_t *didx = dev_from(idx, sizeof idx);
    assert_int_equal(rf_gpu_gather_rows(g_ctx, dy, dx, didx, 4, n), RF_OK);
    float *got = host_f32((size_t)(rows * n));
    dev_to(got, dy, (size_t)(4 * n) * 4);
    for (int i = 0; i < 4; i++) assert_memory_equal(got + i * n, x + idx[i] * n, (size_t)n * 4);
    float *db = dev_from(b, (size_t)n * 4);
    assert_int_equal(rf_gpu_add_bias(g_ctx, dx, db, rows, n), RF_OK);
    dev_to(got, dx, (size_t)(rows * n) * 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++)
            if (got[r * n + i] != x[r * n + i] + b[i]) fail_msg("add_bias [%lld,%lld]", (long long)r, (long long)i);
    assert_int_equal(rf_gpu_softcap(g_ctx, dx, 5.0f, rows * n), RF_OK);
    float *want = host_f32((size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++) want[i] = 5.0f * tanhf(got[i] / 5.0f);
    dev_to(got, dx, (size_t)(rows * n) * 4);
    check_rel("softcap", got, want, (size_t)(rows * n), 1e-6);
    printf("  gather_rows, add_bias exact; softcap within 1e-6\n");
    rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy), rf_gpu_free(g_ctx, didx), rf_gpu_free(g_ctx, db);
    free(x), free(b), free(got), free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_store),
        cmocka_unit_test(test_gather_bias_softcap),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
