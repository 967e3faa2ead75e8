/* test_gpu_attention.c — flash attention and split-K decode attention against rf_ref_attention:
 * head dims 64/80/96/128/256, GQA groups, causal / non-causal / sliding window / softcap, K/V in
 * f32 and f16, forced split counts and the automatic choice; random inputs (seed printed),
 * outputs poisoned. The reference runs on the same (f16-rounded) K/V values, so the tolerance
 * is the f32 one, rel. L2 < 1e-5, for both cache types. test_sinks repeats cases with attention
 * sinks (a logit per head in the softmax's denominator, gpt-oss) in the one-pass and the split
 * paths. Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_attention: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_test_common.h"

#include "backend/ref/ref_ops.h"

static bool g_sinks; /* run_case adds random sink logits (test_sinks) */

static void run_case(rf_rng *r, int64_t D, int64_t nq, int64_t nkv, int64_t nh, int64_t nhkv,
                     bool causal, int64_t pos0, int64_t window, float softcap, bool f16, int splits) {
    const int64_t nqe = nq * nh * D, nke = nkv * nhkv * D;
    float *q = host_f32(nqe), *k = host_f32(nke ? nke : 1), *v = host_f32(nke ? nke : 1);
    float *want = host_f32(nqe), *got = host_f32(nqe);
    rf_rng_fill_normal(r, q, nqe, 1.0f);
    rf_rng_fill_normal(r, k, nke, 1.0f);
    rf_rng_fill_normal(r, v, nke, 1.0f);
    uint16_t *k16 = malloc((nke ? nke : 1) * 2), *v16 = malloc((nke ? nke : 1) * 2);
    for (int64_t i = 0; i < nke; i++) {
        k16[i] = rf_f32_to_fp16(k[i]), v16[i] = rf_f32_to_fp16(v[i]);
        if (f16) k[i] = rf_fp16_to_f32(k16[i]), v[i] = rf_fp16_to_f32(v16[i]);
    }
    const float scale = 1.0f / sqrtf((float)D);
    float *sk = NULL, *dsk = NULL;
    if (g_sinks) { /* sinks as large as the scores, so they move the result */
        sk = host_f32(nh);
        rf_rng_fill_normal(r, sk, nh, 2.0f);
        dsk = dev_from(sk, nh * 4);
    }
    rf_ref_attention(want, q, k, v, nq, nkv, nh, nhkv, D, scale, causal, pos0, window, softcap, sk);
    float *dq = dev_from(q, nqe * 4), *dy = dev_poison(nqe * 4);
    void *dk = f16 ? dev_from(k16, nke * 2) : dev_from(k, nke * 4);
    void *dv = f16 ? dev_from(v16, nke * 2) : dev_from(v, nke * 4);
    const rf_type kt = f16 ? RF_TYPE_F16 : RF_TYPE_F32;
    rf_status st = splits > 0 ? rf_gpu_attention_splits(g_ctx, dy, dq, dk, dv, kt, nq, nkv, nh, nhkv, D,
                                                         scale, causal, pos0, window, softcap, splits, dsk)
                              : rf_gpu_attention(g_ctx, dy, dq, dk, dv, kt, nq, nkv, nh, nhkv, D, scale,
                                                 causal, pos0, window, softcap, dsk);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    dev_to(got, dy, nqe * 4);
    char what[160];
    snprintf(what, sizeof what, "attn D%lld q%lld kv%lld h%lld/%lld %s%s%s%s %s split%d",
             (long long)D, (long long)nq, (long long)nkv, (long long)nh, (long long)nhkv,
             causal ? "causal" : "full", window ? " win" : "", softcap > 0 ? " cap" : "",
             sk ? " sinks" : "", f16 ? "f16" : "f32", splits);
    check_rel(what, got, want, nqe, 1e-5);
    rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dy), rf_gpu_free(g_ctx, dk), rf_gpu_free(g_ctx, dv);
    if (dsk) rf_gpu_free(g_ctx, dsk);
    free(q), free(k), free(v), free(want), free(got), free(k16), free(v16), free(sk);
}

static void test_prefill(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    const int64_t dims[] = {64, 80, 96, 128, 256};
    for (int di = 0; di < 5; di++) {
        const int64_t D = dims[di];
        run_case(&r, D, 1, 1, 1, 1, false, 0, 0, 0, false, 1);     /* length 1 */
        run_case(&r, D, 7, 7, 4, 2, true, 0, 0, 0, false, 1);      /* causal prefill, GQA 2 */
        run_case(&r, D, 33, 45, 8, 1, true, 12, 0, 0, true, 1);    /* MQA, offset, f16 */
        run_case(&r, D, 20, 50, 4, 4, false, 0, 0, 0, true, 1);    /* non-causal */
        run_case(&r, D, 16, 40, 4, 2, true, 24, 9, 0, false, 1);   /* sliding window */
        run_case(&r, D, 5, 37, 2, 1, true, 32, 0, 30.0f, false, 1); /* softcap */
    }
    /* every key masked (query at position -1): zeros */
    run_case(&r, 64, 1, 5, 2, 1, true, -1, 0, 0, false, 1);
}

static void test_decode_split(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 1);
    const int64_t dims[] = {64, 128, 256};
    for (int di = 0; di < 3; di++) {
        const int64_t D = dims[di];
        for (int s = 1; s <= 16; s *= 4) {
            run_case(&r, D, 1, 1000, 8, 2, true, 999, 0, 0, true, s);
            run_case(&r, D, 2, 777, 4, 4, true, 775, 0, 0, false, s);
            run_case(&r, D, 1, 600, 4, 1, true, 599, 100, 0, false, s); /* window: most splits empty */
        }
        run_case(&r, D, 1, 4099, 32, 8, true, 4098, 0, 0, true, 0); /* automatic split choice */
    }
    assert_int_equal(rf_gpu_attention(g_ctx, NULL, NULL, NULL, NULL, RF_TYPE_F32, 1, 1, 1, 1, 72,
                                      1.0f, false, 0, 0, 0, NULL),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_attention(g_ctx, NULL, NULL, NULL, NULL, RF_TYPE_F32, 1, 1, 3, 2, 64,
                                      1.0f, false, 0, 0, 0, NULL),
                     RF_ERR_INVALID_ARG);
}

/* Attention sinks: prefill and decode cases (one pass, forced splits, the automatic choice),
 * sliding window and a query with every key masked (the sink alone: zeros). */
static void test_sinks(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 2);
    g_sinks = true;
    run_case(&r, 64, 7, 7, 4, 2, true, 0, 0, 0, false, 1);
    run_case(&r, 64, 16, 40, 8, 2, true, 24, 9, 0, true, 1);
    run_case(&r, 128, 33, 45, 8, 1, true, 12, 0, 0, true, 1);
    for (int s = 1; s <= 16; s *= 4) {
        run_case(&r, 64, 1, 1000, 64, 8, true, 999, 0, 0, true, s);
        run_case(&r, 64, 1, 600, 8, 1, true, 599, 128, 0, false, s);
    }
    run_case(&r, 64, 1, 4099, 64, 8, true, 4098, 0, 0, true, 0);
    run_case(&r, 64, 1, 5, 2, 1, true, -1, 0, 0, false, 1);
    g_sinks = false;
}

int main(void) {
    gpu_test_init_or_skip("test_gpu_attention");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill),
        cmocka_unit_test(test_decode_split),
        cmocka_unit_test(test_sinks),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
