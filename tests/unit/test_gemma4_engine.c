/* test_gemma4_engine.c — tiny-gemma4 (sliding-window and full layers of different head sizes,
 * shared-KV layers, per-layer embeddings) through the batching engine:
 *  - a prompt fed in chunks of 1, 3, 7 and 16 tokens gives the same logits bits as one chunk,
 *    and the same greedy tokens (every logits row compared by a hash of its bytes);
 *  - batch invariance: 8 sequences generated alone, then together with staggered arrival and
 *    chunked prompts: identical tokens and logits rows;
 *  - a forced preemption (a KV pool too small for all): identical tokens after recomputation;
 *  - every step's rf_engine_check, every block back at the end.
 * Why bit identity is expected: every CPU op gemma4 uses is row-independent with a fixed order
 * per row (per-layer inputs, norms, products, GeGLU) or per (token, head) (attention over the
 * paged cache, the window cut by position), so a chunk boundary or a neighbour in the batch
 * changes no arithmetic; shared-KV layers read rows their source layer wrote earlier in the
 * same step or before. The cases follow test_qwen35_engine.c (state slots aside). */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

#ifndef PRESET /* test_gemma4moe_engine.c includes this file with its own preset */
#define PRESET "tiny-gemma4"
#endif

static char g_path[1200];

static int setup(void **state) {
    (void)state;
    const char *cli = getenv("RF_CLI");
    if (!cli) return -1;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/synth-models", RF_BINARY_DIR);
    snprintf(g_path, sizeof g_path, "%s/engine-" PRESET ".q8_0.gguf", dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --preset " PRESET " --type q8_0 -o '%s' >/dev/null 2>&1", dir,
             cli, g_path);
    return system(cmd) == 0 ? 0 : -1;
}

static rf_model *load(void) {
    rf_model_params mp = rf_model_default_params();
    mp.n_threads = 2;
    rf_model *m = NULL;
    if (rf_model_load(g_path, &mp, &m)) fail_msg("load %s: %s", g_path, rf_last_error());
    return m;
}

static rf_engine *engine(rf_model *m, int par, int batch, int blocks) {
    rf_engine_config *c = rf_engine_config_new();
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_CTX, 128), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_PARALLEL, par), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_BATCH, batch), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_KV_BLOCKS, blocks), RF_OK);
    rf_engine *e = NULL;
    if (rf_engine_new(m, c, &e)) fail_msg("engine: %s", rf_last_error());
    rf_engine_config_free(c);
    return e;
}

#define MAXT 40
typedef struct out {
    uint64_t id;
    int32_t done, n[3];
    int32_t tok[3][MAXT];
    uint64_t lhash[3][MAXT];
} out;

static bool on_ev(const rf_event *ev, void *user) {
    out *o = user;
    int c = rf_event_choice(ev);
    if (rf_event_get_kind(ev) == RF_EVENT_TOKEN) {
        if (o->n[c] < MAXT) o->tok[c][o->n[c]++] = rf_event_token(ev);
    } else {
        o->done++;
    }
    return true;
}

typedef struct hooks {
    out *outs;
    int n;
    int32_t nv;
} hooks;

static void on_logits(void *user, const rf_seq *s, const float *lg) {
    hooks *h = user;
    uint64_t z = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)lg;
    for (size_t k = 0; k < (size_t)h->nv * sizeof(float); k++) z = (z ^ p[k]) * 1099511628211ull;
    for (int i = 0; i < h->n; i++)
        if (h->outs[i].id == s->req->id && s->n_gen < MAXT) h->outs[i].lhash[s->choice][s->n_gen] = z;
}

static void submit(rf_engine *e, const int32_t *ids, int n, int max_tokens, out *o, int choices, int seed) {
    rf_request *q = rf_request_new();
    assert_int_equal(rf_request_set_prompt_ids(q, ids, (size_t)n), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_MAX_TOKENS, max_tokens), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_IGNORE_EOS, 1), RF_OK);
    if (choices > 1 || seed) {
        assert_int_equal(rf_request_set(q, RF_REQ_N, choices), RF_OK);
        assert_int_equal(rf_request_set(q, RF_REQ_TEMPERATURE, 0.9), RF_OK);
        assert_int_equal(rf_request_set(q, RF_REQ_SEED, seed), RF_OK);
    }
    memset(o, 0, sizeof *o);
    rf_request_set_callback(q, on_ev, o);
    assert_int_equal(rf_engine_submit(e, q, &o->id), RF_OK);
    rf_request_free(q);
}

/* steps until idle, checking the bookkeeping every step; every slot and block back at the end */
static int run_checked(rf_engine *e) {
    int steps = 0;
    while (rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0) {
        assert_int_equal(rf_engine_step(e), RF_OK);
        if (rf_engine_check(e)) fail_msg("check: %s", rf_last_error());
        steps++;
    }
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    return steps;
}

enum { NP = 8 };
static int32_t g_prompt[NP][70];
static int g_plen[NP];

static void make_prompts(int32_t nv) {
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    for (int i = 0; i < NP; i++) {
        g_plen[i] = i < 4 ? 60 : 5 + (int)(rf_rng_u64(&r) % 60); /* 0..3: long enough to force preemption; */
        /* most cross the sliding window of 16 */
        for (int k = 0; k < g_plen[i]; k++) g_prompt[i][k] = 5 + (int32_t)(rf_rng_u64(&r) % (uint64_t)(nv - 10));
    }
}

static void same(const out *a, const out *b, int choice, const char *what, int i) {
    if (a->n[choice] != b->n[choice] || memcmp(a->tok[choice], b->tok[choice], (size_t)a->n[choice] * 4))
        fail_msg("%s, prompt %d: tokens differ", what, i);
    for (int k = 0; k < a->n[choice]; k++)
        if (a->lhash[choice][k] != b->lhash[choice][k]) fail_msg("%s, prompt %d token %d: logits differ", what, i, k);
}

static void test_chunks_and_crowd(void **state) {
    (void)state;
    rf_model *m = load();
    assert_true(rf_model_n_recurrent(m) == 0);
    if (m->hp.n_expert == 0) /* tiny-gemma4's shared-KV layers; tiny-gemma4moe: experts instead */
        assert_true(m->layers[6].kv_layer == 4 && m->layers[7].kv_layer == 5);
    else
        assert_true(m->layers[0].ffn == RF_FFN_MOE);
    make_prompts(m->hp.n_vocab);
    out alone[NP], other[NP];
    hooks h = {alone, NP, m->hp.n_vocab};
    rf_engine *e = engine(m, 1, 512, 0);
    e->logits_hook = on_logits;
    e->hook_user = &h;
    for (int i = 0; i < NP; i++) {
        submit(e, g_prompt[i], g_plen[i], 24, &alone[i], 1, 0);
        run_checked(e);
    }
    rf_engine_free(e);
    /* one sequence at a time, its prompt in chunks of the step budget */
    const int budgets[] = {1, 3, 7, 16};
    for (int bi = 0; bi < 4; bi++) {
        e = engine(m, 1, budgets[bi], 0);
        h.outs = other;
        e->logits_hook = on_logits;
        e->hook_user = &h;
        for (int i = 0; i < NP; i += 3) {
            submit(e, g_prompt[i], g_plen[i], 24, &other[i], 1, 0);
            run_checked(e);
            same(&alone[i], &other[i], 0, "prompt in chunks", i);
        }
        rf_engine_free(e);
    }
    /* together: staggered arrivals, chunked prompts, 5 running at once */
    e = engine(m, 5, 16, 0);
    e->logits_hook = on_logits;
    e->hook_user = &h;
    int submitted = 0, steps = 0;
    while (submitted < NP || rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0) {
        if (submitted < NP && (steps % 3 == 0 || submitted < 2)) {
            submit(e, g_prompt[submitted], g_plen[submitted], 24, &other[submitted], 1, 0);
            submitted++;
        }
        assert_int_equal(rf_engine_step(e), RF_OK);
        if (rf_engine_check(e)) fail_msg("check: %s", rf_last_error());
        steps++;
    }
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    for (int i = 0; i < NP; i++) same(&alone[i], &other[i], 0, "together", i);
    rf_engine_free(e);
    /* preemption: 9 blocks of 16 (the least for a context of 128) for sequences of 84 positions
     * (6 blocks each): two are admitted (4 blocks each for the prompt), then outgrow the pool */
    e = engine(m, 5, 16, 9);
    e->logits_hook = on_logits;
    e->hook_user = &h;
    for (int i = 0; i < 4; i++) submit(e, g_prompt[i], g_plen[i], 24, &other[i], 1, 0);
    run_checked(e);
    int64_t pre = rf_engine_get_stat(e, RF_STAT_PREEMPTIONS);
    assert_true(pre > 0);
    for (int i = 0; i < 4; i++) same(&alone[i], &other[i], 0, "after preemption", i);
    printf("  chunks of 1/3/7/16 == one chunk; %d together == alone; %lld preemptions, same tokens\n", NP, (long long)pre);
    rf_engine_free(e);
    rf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_and_crowd),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
