/* test_gpu_deterministic.c — deterministic (batch-invariant) mode on the GPU
 * (rf_model_set_deterministic): a greedy sequence alone, and the same sequence arriving while 63
 * others run (staggered submissions, prompts of 40..300 tokens cut into chunks by a small step
 * budget that decode tokens share), must give bit-identical logits at every generated position
 * and the same tokens; tiny models with q8_0, q4_0 and q4_k_m weights (every product on MMQ).
 * Without the mode the same comparison differs (the products change kernel with the step's
 * token count), which the test prints as a control. A weight type without a batch-invariant
 * product (q5_1) fails its first step with a message naming it.
 * Skips (77) without a GPU. */
#include "gpu_model_common.h"

enum { T = 24, N_CROWD = 63 };

typedef struct rec {
    uint64_t id;
    int32_t nv, n;
    float *rows; /* [T, nv] */
} rec;

static void on_logits(void *user, const rf_seq *s, const float *lg) {
    rec *r = user;
    if (s->req->id != r->id || s->n_gen >= T) return;
    memcpy(r->rows + (size_t)s->n_gen * r->nv, lg, (size_t)r->nv * sizeof(float));
    if (s->n_gen + 1 > r->n) r->n = s->n_gen + 1;
}

static rf_engine *engine(rf_model *m) {
    rf_engine_config *c = rf_engine_config_new();
    rf_engine_config_set(c, RF_ENGINE_CTX, 512);
    rf_engine_config_set(c, RF_ENGINE_PARALLEL, 64);
    rf_engine_config_set(c, RF_ENGINE_BATCH, 160); /* prompts chunked beside the decode tokens */
    rf_engine *e = NULL;
    if (rf_engine_new(m, c, &e)) fail_msg("engine: %s", rf_last_error());
    rf_engine_config_free(c);
    return e;
}

/* Logits of the target sequence alone and among the crowd; returns the number of generated
 * positions whose logits differ in any bit (and *tok_same: tokens identical). */
static int compare_runs(rf_model *m, int32_t (*prompts)[300], const int *lens, bool *tok_same) {
    const int32_t nv = m->hp.n_vocab;
    rec ra = {0, nv, 0, malloc((size_t)T * nv * sizeof(float))}, rc = {0, nv, 0, malloc((size_t)T * nv * sizeof(float))};
    assert_non_null(ra.rows), assert_non_null(rc.rows);
    gen_out alone, crowd[N_CROWD + 1];
    rf_engine *e = engine(m);
    e->logits_hook = on_logits;
    e->hook_user = &ra;
    submit(e, prompts[0], lens[0], T, &alone);
    ra.id = 1; /* the engine's first request id */
    if (rf_engine_run(e)) fail_msg("run alone: %s", rf_last_error());
    rf_engine_free(e);

    e = engine(m);
    e->logits_hook = on_logits;
    e->hook_user = &rc;
    /* 20 others first, a few steps, then the target, then the rest a few at a time */
    for (int i = 1; i <= 20; i++) submit(e, prompts[i], lens[i], T, &crowd[i]);
    for (int k = 0; k < 3; k++)
        if (rf_engine_step(e)) fail_msg("step: %s", rf_last_error());
    submit(e, prompts[0], lens[0], T, &crowd[0]);
    rc.id = 21;
    for (int i = 21; i <= N_CROWD; i++) {
        submit(e, prompts[i], lens[i], T, &crowd[i]);
        if (i % 7 == 0 && rf_engine_step(e)) fail_msg("step: %s", rf_last_error());
    }
    if (rf_engine_run(e)) fail_msg("run among others: %s", rf_last_error());
    for (int i = 0; i <= N_CROWD; i++)
        if (!crowd[i].done || crowd[i].n != T) fail_msg("sequence %d: %d tokens, done %d", i, crowd[i].n, crowd[i].done);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    rf_engine_free(e);
    int differ = 0;
    for (int t = 0; t < T; t++)
        if (t >= ra.n || t >= rc.n || memcmp(ra.rows + (size_t)t * nv, rc.rows + (size_t)t * nv, (size_t)nv * sizeof(float)))
            differ++;
    *tok_same = alone.n == T && !memcmp(alone.tok, crowd[0].tok, sizeof(int32_t) * T);
    free(ra.rows), free(rc.rows);
    return differ;
}

static void test_deterministic(void **state) {
    (void)state;
    const char *types[] = {"q8_0", "q4_0", "q4_k_m"};
    static int32_t prompts[N_CROWD + 1][300];
    int lens[N_CROWD + 1];
    for (size_t t = 0; t < 3; t++) {
        char path[1200];
        mkmodel("tiny", types[t], path, sizeof path);
        rf_model *m = load(path, RF_DEVICE_GPU);
        rf_rng r;
        rf_rng_init(&r, rf_test_seed() + t);
        for (int i = 0; i <= N_CROWD; i++) {
            lens[i] = 40 + (int)(rf_rng_u64(&r) % 261);
            random_prompt(&r, prompts[i], lens[i], m->hp.n_vocab);
        }
        bool same = false;
        const int ctrl = compare_runs(m, prompts, lens, &same); /* mode off: the control */
        assert_int_equal(rf_model_set_deterministic(m, true), RF_OK);
        bool dsame = false;
        const int differ = compare_runs(m, prompts, lens, &dsame);
        printf("  tiny %-6s %d-token prompt among %d others: deterministic %d of %d positions' logits differ, tokens "
               "%s; mode off: %d differ, tokens %s\n",
               types[t], lens[0], N_CROWD, differ, T, dsame ? "identical" : "DIFFER", ctrl, same ? "identical" : "differ");
        if (differ || !dsame) fail_msg("tiny %s: deterministic mode is not batch-invariant", types[t]);
        rf_model_free(m);
    }
}

static void test_unsupported_type(void **state) {
    (void)state;
    char path[1200];
    mkmodel("tiny", "q5_1", path, sizeof path);
    rf_model *m = load(path, RF_DEVICE_GPU);
    assert_int_equal(rf_model_set_deterministic(m, true), RF_OK);
    rf_session *s = session(m, 64);
    int32_t ids[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    const rf_status st = rf_session_eval(s, ids, 8, false);
    printf("  tiny q5_1 in deterministic mode: %s\n", st ? rf_last_error() : "(no error)");
    assert_int_equal(st, RF_ERR_UNSUPPORTED);
    assert_non_null(strstr(rf_last_error(), "q5_1"));
    rf_session_free(s);
    rf_model_free(m);
}

static int setup(void **state) {
    (void)state;
    gpu_test_init_or_skip("test_gpu_deterministic");
    gpu_model_dirs();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_unsupported_type),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
