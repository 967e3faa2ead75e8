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
 * same step or before. The cases are test_qwen35_engine.c's (rf_eng_chunks_and_crowd, state
 * slots aside). */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "test_engine_run.h"

#ifndef PRESET /* test_gemma4moe_engine.c includes this file with its own preset */
#define PRESET "tiny-gemma4"
#endif

static char g_path[1200];

static int setup(void **state) {
    (void)state;
    return rf_eng_make_model(PRESET, "engine", g_path, sizeof g_path);
}

enum { NP = 8 };
/* prompts 0..3 of 60 tokens force preemption; most cross the sliding window of 16 */
static int32_t g_prompt[NP][RF_ENG_PLEN];
static int g_plen[NP];

static void test_chunks_and_crowd(void **state) {
    (void)state;
    rf_model *m = rf_eng_load(g_path);
    assert_true(rf_model_n_recurrent(m) == 0);
    if (m->hp.n_expert == 0) /* tiny-gemma4's shared-KV layers; tiny-gemma4moe: experts instead */
        assert_true(m->layers[6].kv_layer == 4 && m->layers[7].kv_layer == 5);
    else
        assert_true(m->layers[0].ffn == RF_FFN_MOE);
    rf_eng_make_prompts(m->hp.n_vocab, NP, g_prompt, g_plen);
    rf_eng_chunks_and_crowd(m, NP, g_prompt, g_plen, rf_eng_run_checked, NULL);
    rf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_and_crowd),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
