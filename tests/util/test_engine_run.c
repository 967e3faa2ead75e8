/* test_engine_run.c — test_engine_run.h's engine-test scaffolding. */
#include "test_engine_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rf_eng_make_model(const char *preset, const char *name, char *path, size_t cap) {
    const char *cli = getenv("RF_CLI");
    if (!cli) return -1;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/synth-models", RF_BINARY_DIR);
    snprintf(path, cap, "%s/%s-%s.q8_0.gguf", dir, name, preset);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --preset %s --type q8_0 -o '%s' >/dev/null 2>&1", dir, cli,
             preset, path);
    return system(cmd) == 0 ? 0 : -1;
}

rf_model *rf_eng_load(const char *path) {
    rf_model_params mp = rf_model_default_params();
    mp.n_threads = 2;
    rf_model *m = NULL;
    if (rf_model_load(path, &mp, &m)) fail_msg("load %s: %s", path, rf_last_error());
    return m;
}

rf_engine *rf_eng_new(rf_model *m, int par, int batch, int blocks) {
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

bool rf_eng_on_event(const rf_event *ev, void *user) {
    rf_eng_out *o = user;
    int c = rf_event_choice(ev);
    if (rf_event_get_kind(ev) == RF_EVENT_TOKEN) {
        if (o->n[c] < RF_ENG_MAXT) o->tok[c][o->n[c]++] = rf_event_token(ev);
    } else {
        o->done++;
    }
    return true;
}

void rf_eng_on_logits(void *user, const rf_seq *s, const float *lg) {
    rf_eng_hooks *h = user;
    uint64_t z = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)lg;
    for (size_t k = 0; k < (size_t)h->nv * sizeof(float); k++) z = (z ^ p[k]) * 1099511628211ull;
    for (int i = 0; i < h->n; i++)
        if (h->outs[i].id == s->req->id && s->n_gen < RF_ENG_MAXT) h->outs[i].lhash[s->choice][s->n_gen] = z;
}

void rf_eng_submit(rf_engine *e, const int32_t *ids, int n, int max_tokens, rf_eng_out *o, int choices, int seed) {
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
    rf_request_set_callback(q, rf_eng_on_event, o);
    assert_int_equal(rf_engine_submit(e, q, &o->id), RF_OK);
    rf_request_free(q);
}

int rf_eng_run_checked(rf_engine *e) {
    int steps = 0;
    while (rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0) {
        assert_int_equal(rf_engine_step(e), RF_OK);
        if (rf_engine_check(e)) fail_msg("check: %s", rf_last_error());
        steps++;
    }
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    return steps;
}

void rf_eng_make_prompts(int32_t nv, int n, int32_t (*prompt)[RF_ENG_PLEN], int *plen) {
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    for (int i = 0; i < n; i++) {
        plen[i] = i < 4 ? 60 : 5 + (int)(rf_rng_u64(&r) % 60);
        for (int k = 0; k < plen[i]; k++) prompt[i][k] = 5 + (int32_t)(rf_rng_u64(&r) % (uint64_t)(nv - 10));
    }
}

void rf_eng_same(const rf_eng_out *a, const rf_eng_out *b, int choice, const char *what, int i) {
    if (a->n[choice] != b->n[choice] || memcmp(a->tok[choice], b->tok[choice], (size_t)a->n[choice] * 4))
        fail_msg("%s, prompt %d: tokens differ", what, i);
    for (int k = 0; k < a->n[choice]; k++)
        if (a->lhash[choice][k] != b->lhash[choice][k]) fail_msg("%s, prompt %d token %d: logits differ", what, i, k);
}

void rf_eng_chunks_and_crowd(rf_model *m, int np, int32_t (*prompt)[RF_ENG_PLEN], const int *plen,
                             int (*run)(rf_engine *e), void (*idle)(rf_engine *e)) {
    assert_true(np >= 4 && np <= RF_ENG_NP);
    rf_eng_out alone[RF_ENG_NP], other[RF_ENG_NP];
    rf_eng_hooks h = {alone, np, m->hp.n_vocab};
    rf_engine *e = rf_eng_new(m, 1, 512, 0);
    e->logits_hook = rf_eng_on_logits;
    e->hook_user = &h;
    for (int i = 0; i < np; i++) {
        rf_eng_submit(e, prompt[i], plen[i], 24, &alone[i], 1, 0);
        run(e);
    }
    rf_engine_free(e);
    /* one sequence at a time, its prompt in chunks of the step budget */
    const int budgets[] = {1, 3, 7, 16};
    for (int bi = 0; bi < 4; bi++) {
        e = rf_eng_new(m, 1, budgets[bi], 0);
        h.outs = other;
        e->logits_hook = rf_eng_on_logits;
        e->hook_user = &h;
        for (int i = 0; i < np; i += 3) {
            rf_eng_submit(e, prompt[i], plen[i], 24, &other[i], 1, 0);
            run(e);
            rf_eng_same(&alone[i], &other[i], 0, "prompt in chunks", i);
        }
        rf_engine_free(e);
    }
    /* together: staggered arrivals, chunked prompts, 5 running at once */
    e = rf_eng_new(m, 5, 16, 0);
    e->logits_hook = rf_eng_on_logits;
    e->hook_user = &h;
    int submitted = 0, steps = 0;
    while (submitted < np || rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0) {
        if (submitted < np && (steps % 3 == 0 || submitted < 2)) {
            rf_eng_submit(e, prompt[submitted], plen[submitted], 24, &other[submitted], 1, 0);
            submitted++;
        }
        assert_int_equal(rf_engine_step(e), RF_OK);
        if (rf_engine_check(e)) fail_msg("check: %s", rf_last_error());
        steps++;
    }
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    if (idle) idle(e);
    for (int i = 0; i < np; i++) rf_eng_same(&alone[i], &other[i], 0, "together", i);
    rf_engine_free(e);
    /* preemption: 9 blocks of 16 (the least for a context of 128) for sequences of 84 positions
     * (6 blocks each): two are admitted (4 blocks each for the prompt), then outgrow the pool */
    e = rf_eng_new(m, 5, 16, 9);
    e->logits_hook = rf_eng_on_logits;
    e->hook_user = &h;
    for (int i = 0; i < 4; i++) rf_eng_submit(e, prompt[i], plen[i], 24, &other[i], 1, 0);
    run(e);
    int64_t pre = rf_engine_get_stat(e, RF_STAT_PREEMPTIONS);
    assert_true(pre > 0);
    for (int i = 0; i < 4; i++) rf_eng_same(&alone[i], &other[i], 0, "after preemption", i);
    printf("  chunks of 1/3/7/16 == one chunk; %d together == alone; %lld preemptions, same tokens\n", np, (long long)pre);
    rf_engine_free(e);
}
