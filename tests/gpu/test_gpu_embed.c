/* test_gpu_embed.c — embedding requests (RF_REQ_EMBED) on the GPU against the CPU, the oracle:
 *  - prompts of 1, 7, 100 and 700 tokens (the last in two 512-token steps: mean pooling summed
 *    across chunks) pooled mean, cls and last, all submitted at once beside two generation
 *    requests, on synthetic tiny models (f16 and q4_0 weights) and SmolLM2 from models/ when
 *    present: every GPU vector within an L2 distance tol of the CPU's. Both are unit vectors, so
 *    the distance is the relative L2 error of the pooled final-norm hidden state. Error model
 *    (test_gpu_forward's, and test_gpu_long_prompt's bounds on the same models' logits): the
 *    final-norm hidden rows carry the forward's relative error before the output head adds its
 *    own, so the logits' bounds hold for them: f16 weights (f16 operands in the products, an
 *    f16 cache on both sides) 1e-2; q4_0, where both devices round activations to int8 per 32
 *    but one flipped element makes the two sides two draws of the rounding noise (each within
 *    1e-1 of f32 activations), 2e-1. Mean pooling averages rows, which only shrinks the error;
 *  - deterministic mode (rf_model_set_deterministic, q4_0): the same embeddings alone and in the
 *    crowd are identical bits on the GPU;
 *  - no KV kept: after the run every block is free and none cached by the embeddings; a cancelled
 *    embedding request mid-prompt returns its blocks.
 * Skips (77) without a GPU. */
#include "gpu_model_common.h"
#include "test_embed.h"

static int setup(void **state) {
    (void)state;
    gpu_test_init_or_skip("test_gpu_embed");
    gpu_model_dirs();
    return 0;
}

static rf_engine *engine_for(rf_model *m, int ctx, int par) {
    rf_engine_config *c = rf_engine_config_new();
    rf_engine_config_set(c, RF_ENGINE_CTX, ctx);
    rf_engine_config_set(c, RF_ENGINE_PARALLEL, par);
    rf_engine *e = NULL;
    if (rf_engine_new(m, c, &e)) fail_msg("engine: %s", rf_last_error());
    rf_engine_config_free(c);
    return e;
}

#define NCASE 12
static const int k_len[4] = {1, 7, 100, 700};
static const rf_pooling k_pool[3] = {RF_POOLING_MEAN, RF_POOLING_CLS, RF_POOLING_LAST};

/* Every case at once (beside two generation requests) on m; out[NCASE]. */
static void run_cases(rf_model *m, int32_t (*ids)[700], rf_emb_vec *out) {
    rf_engine *e = engine_for(m, 1024, 4);
    gen_out g[2];
    for (int c = 0; c < NCASE; c++) {
        rf_emb_submit(e, ids[c / 3], k_len[c / 3], k_pool[c % 3], &out[c]);
        if (c == 4)
            for (int k = 0; k < 2; k++) submit(e, ids[2] + k, 40, 16, &g[k]);
    }
    if (rf_engine_run(e)) fail_msg("run: %s", rf_last_error());
    for (int c = 0; c < NCASE; c++)
        if (out[c].fin != RF_FINISH_EOS || out[c].n != m->hp.n_embd || out[c].tokens)
            fail_msg("case %d: finish %d, %d floats, %d tokens", c, out[c].fin, out[c].n, out[c].tokens);
    for (int k = 0; k < 2; k++)
        if (!g[k].done || g[k].n != 16) fail_msg("generation beside embeddings: %d tokens", g[k].n);
    if (rf_engine_get_stat(e, RF_STAT_BLOCKS_USED) != 0) fail_msg("blocks still used after the run");
    if (rf_engine_check(e)) fail_msg("engine check: %s", rf_last_error());
    rf_engine_free(e);
}

static double dist(const rf_emb_vec *a, const rf_emb_vec *b) {
    double s = 0;
    for (int32_t j = 0; j < a->n; j++) s += ((double)a->v[j] - b->v[j]) * ((double)a->v[j] - b->v[j]);
    return sqrt(s);
}

static void gpu_vs_cpu(const char *path, double tol, const char *label) {
    static int32_t ids[4][700];
    static rf_emb_vec cpu[NCASE], gpu[NCASE];
    rf_model *mc = load(path, RF_DEVICE_CPU);
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 17);
    for (int i = 0; i < 4; i++) random_prompt(&r, ids[i], 700, mc->hp.n_vocab);
    run_cases(mc, ids, cpu);
    rf_model_free(mc);
    rf_model *mg = load(path, RF_DEVICE_GPU);
    run_cases(mg, ids, gpu);
    double worst = 0;
    for (int c = 0; c < NCASE; c++) {
        double d = dist(&cpu[c], &gpu[c]);
        printf("  %s %4d tokens %-4s: L2 distance GPU vs CPU %.3e\n", label, k_len[c / 3], rf_pooling_str(k_pool[c % 3]), d);
        if (!(d < tol)) fail_msg("%s, %d tokens, %s pooling: GPU vs CPU %.3e >= %.0e", label, k_len[c / 3],
                                 rf_pooling_str(k_pool[c % 3]), d, tol);
        worst = d > worst ? d : worst;
    }
    printf("  %s: worst %.3e (bound %.0e)\n", label, worst, tol);
    rf_model_free(mg);
}

static void test_tiny(void **state) {
    (void)state;
    char path[1200];
    mkmodel("tiny", "f16", path, sizeof path);
    gpu_vs_cpu(path, 1e-2, "tiny f16");
    mkmodel("tiny", "q4_0", path, sizeof path);
    gpu_vs_cpu(path, 2e-1, "tiny q4_0");
}

static void test_smollm2(void **state) {
    (void)state;
    char path[1200];
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", RF_SOURCE_DIR);
    if (access(path, R_OK)) skip();
    gpu_vs_cpu(path, 2e-1, "SmolLM2 q4_1");
}

/* Deterministic mode: alone and in the crowd, the same bits; a cancelled one returns its blocks. */
static void test_deterministic_and_cancel(void **state) {
    (void)state;
    char path[1200];
    mkmodel("tiny", "q4_0", path, sizeof path);
    rf_model *m = load(path, RF_DEVICE_GPU);
    assert_int_equal(rf_model_set_deterministic(m, true), RF_OK);
    static int32_t ids[4][700];
    static rf_emb_vec crowd[NCASE], alone;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 29);
    for (int i = 0; i < 4; i++) random_prompt(&r, ids[i], 700, m->hp.n_vocab);
    run_cases(m, ids, crowd);
    for (int c = 0; c < NCASE; c++) {
        rf_engine *e = engine_for(m, 1024, 1);
        rf_emb_submit(e, ids[c / 3], k_len[c / 3], k_pool[c % 3], &alone);
        if (rf_engine_run(e)) fail_msg("run: %s", rf_last_error());
        if (memcmp(alone.v, crowd[c].v, (size_t)alone.n * sizeof(float)))
            fail_msg("deterministic mode: %d tokens %s differs alone vs in the crowd (L2 %.3e)", k_len[c / 3],
                     rf_pooling_str(k_pool[c % 3]), dist(&alone, &crowd[c]));
        rf_engine_free(e);
    }
    rf_engine *e = engine_for(m, 1024, 2);
    uint64_t id = rf_emb_submit(e, ids[3], 700, RF_POOLING_MEAN, &alone);
    assert_int_equal(rf_engine_step(e), RF_OK); /* its first 512 tokens */
    assert_int_equal(rf_engine_cancel(e, id), RF_OK);
    assert_int_equal(rf_engine_run(e), RF_OK);
    assert_int_equal(alone.fin, RF_FINISH_CANCELLED);
    assert_int_equal(alone.n, 0);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_CACHED), 0);
    assert_int_equal(rf_engine_check(e), RF_OK);
    rf_engine_free(e);
    rf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_deterministic_and_cancel),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
