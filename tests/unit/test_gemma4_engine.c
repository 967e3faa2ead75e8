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
#include "test_engine_run.h"

#define PRESET "tiny-gemma4"

static char g_path[1200];

static int setup(void **state) {
    (void)state;
    return rf_eng_make_model(PRESET, "engine", g_path, sizeof g_path);
}

enum { NP = 8 };
static int32_t g_prompt[NP][RF_ENG_PLEN]; /* prompts 0..3 of 60 tokens force preemption; most cross the sliding window of 16 */
static int g_plen[NP];

static void test_chunks_and_crowd(void **state) {
    (void)state;
    rf_model *m = rf_eng_load(g_path);
    assert_true(rf_model_n_recurrent(m) == 0);
    assert_true(m->layers[6].kv_layer == 4 && m->layers[7].kv_layer == 5); /* shared-KV layers */
    rf_eng_make_prompts(m->hp.n_vocab, NP, g_prompt, g_plen);
    rf_eng_out alone[NP], other[NP];
    rf_eng_hooks h = {alone, NP, m->hp.n_vocab};
    rf_engine *e = rf_eng_new(m, 1, 512, 0);
    e->logits_hook = rf_eng_on_logits;
    e->hook_user = &h;
    for (int i = 0; i < NP; i++) {
        rf_eng_submit(e, g_prompt[i], g_plen[i], 24, &alone[i], 1, 0);
        rf_eng_run_checked(e);
    }
    rf_engine_free(e);
    /* one sequence at a time, its prompt in chunks of the step budget */
    const int budgets[] = {1, 3, 7, 16};
    for (int bi = 0; bi < 4; bi++) {
        e = rf_eng_new(m, 1, budgets[bi], 0);
        h.outs = other;
        e->logits_hook = rf_eng_on_logits;
        e->hook_user = &h;
        for (int i = 0; i < NP; i += 3) {
            rf_eng_submit(e, g_prompt[i], g_plen[i], 24, &other[i], 1, 0);
            rf_eng_run_checked(e);
            rf_eng_same(&alone[i], &other[i], 0, "prompt in chunks", i);
        }
        rf_engine_free(e);
    }
    /* together: staggered arrivals, chunked prompts, 5 running at once */
    e = rf_eng_new(m, 5, 16, 0);
    e->logits_hook = rf_eng_on_logits;
    e->hook_user = &h;
    int submitted = 0, steps = 0;
    while (submitted < NP || rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0) {
        if (submitted < NP && (steps % 3 == 0 || submitted < 2)) {
            rf_eng_submit(e, g_prompt[submitted], g_plen[submitted], 24, &other[submitted], 1, 0);
            submitted++;
        }
        assert_int_equal(rf_engine_step(e), RF_OK);
        if (rf_engine_check(e)) fail_msg("check: %s", rf_last_error());
        steps++;
    }
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    for (int i = 0; i < NP; i++) rf_eng_same(&alone[i], &other[i], 0, "together", i);
    rf_engine_free(e);
    /* preemption: 9 blocks of 16 (the least for a context of 128) for sequences of 84 positions
     * (6 blocks each): two are admitted (4 blocks each for the prompt), then outgrow the pool */
    e = rf_eng_new(m, 5, 16, 9);
    e->logits_hook = rf_eng_on_logits;
    e->hook_user = &h;
    for (int i = 0; i < 4; i++) rf_eng_submit(e, g_prompt[i], g_plen[i], 24, &other[i], 1, 0);
    rf_eng_run_checked(e);
    int64_t pre = rf_engine_get_stat(e, RF_STAT_PREEMPTIONS);
    assert_true(pre > 0);
    for (int i = 0; i < 4; i++) rf_eng_same(&alone[i], &other[i], 0, "after preemption", i);
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
