/* test_qwen35_engine.c — a hybrid model (tiny-qwen35: gated DeltaNet layers with state slots,
 * one gated attention layer) through the batching engine:
 *  - a prompt fed in chunks of 1, 3, 7 and 16 tokens gives the same logits as one chunk, and
 *    the same greedy tokens (every logits row compared by a hash of its bytes);
 *  - batch invariance with recurrent state: 8 sequences generated alone, then together with
 *    staggered arrival and chunked prompts: identical tokens and logits rows;
 *  - n = 3 choices fork the prompt's state (computed once) and equal three lone requests with
 *    seeds s, s+1, s+2;
 *  - a forced preemption (a KV pool too small for all): identical tokens after recomputation;
 *  - cancellation mid-prompt and mid-decode, and every step's rf_engine_check (state slots held
 *    by running sequences only, none twice), every slot and block back at the end;
 *  - the prefix cache with state checkpoints: a request sharing a long prefix with an earlier
 *    one resumes from the checkpoint at the last shared block boundary (at a prompt chunk's end
 *    or the earlier prompt's last boundary) and computes only the rest, with the same tokens
 *    and logits as with the cache off.
 * Why bit identity is expected, not luck: every CPU op is row-independent with a fixed order
 * per row, the conv sums each output's taps in the same order however the prompt is cut, and
 * the delta rule runs token by token (the recurrent form) whatever the chunk, so a chunk
 * boundary only moves where the state is stored and reloaded, exactly (f32 in, f32 out). */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "engine/engine_internal.h"
#include "test_engine_run.h"

/* test_qwen35moe_engine.c runs these same cases on tiny-qwen35moe (experts + shared expert) */
#ifndef HYBRID_PRESET
#define HYBRID_PRESET "tiny-qwen35"
#endif

static char g_path[1200];

static int setup(void **state) {
    (void)state;
    return rf_eng_make_model(HYBRID_PRESET, "hybrid", g_path, sizeof g_path);
}

/* rf_eng_run_checked, and every state slot back at the end */
static int run_checked(rf_engine *e) {
    int steps = rf_eng_run_checked(e);
    assert_int_equal(rf_state_pool_n_free(e->spool), rf_state_pool_n_slots(e->spool));
    return steps;
}

enum { NP = 8 };
static int32_t g_prompt[NP][RF_ENG_PLEN]; /* prompts 0..3 of 60 tokens force preemption */
static int g_plen[NP];

/* the crowd's engine idle: its 5 state slots back */
static void slots_back(rf_engine *e) { assert_int_equal(rf_state_pool_n_free(e->spool), 5); }

static void test_chunks_and_crowd(void **state) {
    (void)state;
    rf_model *m = rf_eng_load(g_path);
    assert_true(rf_model_n_recurrent(m) == 3);
    rf_eng_make_prompts(m->hp.n_vocab, NP, g_prompt, g_plen);
    rf_eng_chunks_and_crowd(m, NP, g_prompt, g_plen, run_checked, slots_back);
    rf_model_free(m);
}

static void test_choices(void **state) {
    (void)state;
    rf_model *m = rf_eng_load(g_path);
    int32_t ids[37];
    for (int k = 0; k < 37; k++) ids[k] = 100 + 7 * k;
    rf_eng_out all, one[3];
    rf_eng_hooks h = {&all, 1, m->hp.n_vocab};
    rf_engine *e = rf_eng_new(m, 4, 512, 0);
    e->logits_hook = rf_eng_on_logits;
    e->hook_user = &h;
    rf_eng_submit(e, ids, 37, 20, &all, 3, 41);
    run_checked(e);
    assert_int_equal(all.done, 3);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS), 37); /* the prompt's state computed once */
    rf_engine_free(e);
    /* with one slot the forks cannot copy the state: they recompute, same tokens */
    rf_eng_out few;
    e = rf_eng_new(m, 1, 512, 0);
    h.outs = &few;
    e->logits_hook = rf_eng_on_logits;
    e->hook_user = &h;
    rf_eng_submit(e, ids, 37, 20, &few, 3, 41);
    run_checked(e);
    for (int c = 0; c < 3; c++) rf_eng_same(&all, &few, c, "forks recomputed", c);
    rf_engine_free(e);
    e = rf_eng_new(m, 1, 512, 0);
    int differ = 0;
    for (int c = 0; c < 3; c++) {
        h.outs = &one[c];
        e->logits_hook = rf_eng_on_logits;
        e->hook_user = &h;
        rf_eng_submit(e, ids, 37, 20, &one[c], 1, 41 + c);
        run_checked(e);
        assert_int_equal(one[c].n[0], all.n[c]);
        assert_memory_equal(one[c].tok[0], all.tok[c], (size_t)all.n[c] * 4);
        if (c && memcmp(all.tok[c], all.tok[0], (size_t)all.n[0] * 4)) differ++;
    }
    assert_true(differ > 0);
    printf("  n=3: the prompt's state computed once and copied; each choice equals a lone request\n");
    rf_engine_free(e);
    rf_model_free(m);
}

static void test_cancel(void **state) {
    (void)state;
    rf_model *m = rf_eng_load(g_path);
    rf_engine *e = rf_eng_new(m, 4, 8, 0);
    rf_eng_out o[3];
    for (int i = 0; i < 3; i++) rf_eng_submit(e, g_prompt[i], 40, 30, &o[i], 1, 0);
    for (int s = 0; s < 3; s++) assert_int_equal(rf_engine_step(e), RF_OK); /* mid-prompt */
    assert_int_equal(rf_engine_cancel(e, o[0].id), RF_OK);
    for (int s = 0; s < 12; s++) assert_int_equal(rf_engine_step(e), RF_OK); /* decoding */
    assert_int_equal(rf_engine_cancel(e, o[1].id), RF_OK);
    run_checked(e);
    rf_engine_free(e);
    rf_model_free(m);
}

/* A randomized workload (random arrivals and prompt lengths, 1-3 choices, greedy or seeded
 * sampling, cancellations) on a KV pool and a slot count small enough to run out: every step
 * rf_engine_check (the state slots included); at the end every slot and block back; each
 * finished, uncancelled request re-run alone gives the same tokens. */
static void test_random(void **state) {
    (void)state;
    rf_model *m = rf_eng_load(g_path);
    rf_rng rng;
    rf_rng_init(&rng, rf_test_seed() + 7);
    enum { NR = 40, STEPS = 260 };
    static int32_t prompt[NR][50];
    static rf_eng_out res[NR];
    int plen[NR], nch[NR], seed[NR], maxt[NR], n_req = 0;
    bool cancelled[NR] = {false};
    rf_engine *e = rf_eng_new(m, 4, 24, 9);
    for (int step = 0; step < STEPS || rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0;
         step++) {
        if (step < STEPS - 40 && n_req < NR && rf_rng_u64(&rng) % 100 < 30) {
            int i = n_req++;
            plen[i] = 1 + (int)(rf_rng_u64(&rng) % 50);
            for (int k = 0; k < plen[i]; k++) prompt[i][k] = 10 + (int32_t)(rf_rng_u64(&rng) % 3000);
            nch[i] = rf_rng_u64(&rng) % 4 == 0 ? 2 + (int)(rf_rng_u64(&rng) % 2) : 1;
            seed[i] = nch[i] > 1 || rf_rng_u64(&rng) % 2 ? 1 + (int)(rf_rng_u64(&rng) % 100) : 0;
            maxt[i] = 1 + (int)(rf_rng_u64(&rng) % 40);
            rf_eng_submit(e, prompt[i], plen[i], maxt[i], &res[i], nch[i], seed[i]);
        }
        if (n_req > 0 && rf_rng_u64(&rng) % 100 < 3) {
            int i = (int)(rf_rng_u64(&rng) % (uint64_t)n_req);
            if (res[i].done < nch[i] && rf_engine_cancel(e, res[i].id) == RF_OK) cancelled[i] = true;
        }
        if (rf_engine_step(e)) fail_msg("step %d: %s", step, rf_last_error());
        if (rf_engine_check(e)) fail_msg("step %d: %s", step, rf_last_error());
        assert_true(step < 20000);
    }
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    assert_int_equal(rf_state_pool_n_free(e->spool), 4);
    int64_t pre = rf_engine_get_stat(e, RF_STAT_PREEMPTIONS);
    rf_engine_free(e);
    e = rf_eng_new(m, 1, 512, 0);
    int compared = 0;
    for (int i = 0; i < n_req; i++) {
        assert_int_equal(res[i].done, nch[i]);
        if (cancelled[i]) continue;
        rf_eng_out alone;
        rf_eng_submit(e, prompt[i], plen[i], maxt[i], &alone, nch[i], seed[i]);
        run_checked(e);
        for (int c = 0; c < nch[i]; c++)
            if (alone.n[c] != res[i].n[c] || memcmp(alone.tok[c], res[i].tok[c], (size_t)alone.n[c] * 4))
                fail_msg("request %d choice %d: tokens differ in the crowd and alone", i, c);
        compared++;
    }
    printf("  random: %d requests, %lld preemptions, %d re-run alone with identical tokens\n", n_req, (long long)pre, compared);
    rf_engine_free(e);
    rf_model_free(m);
}

/* The hybrid prefix cache: prompt A (PFX_LEN tokens, in chunks of 512) leaves checkpoints at
 * 512, 1024, 1536 (chunk ends) and 1984 (A's last block boundary); B = A + 30 new tokens
 * resumes at 1984 and computes 36 tokens; C = A's first 700 + 40 new resumes at 512 (the last
 * checkpoint inside the shared 43 blocks) and computes 228; D = A's first 1985 resumes at 1984
 * and computes its last token alone (a one-token step). Each equals the same request on an
 * engine with the cache off: tokens and every logits row bit for bit (the CPU's ops are
 * row-independent and the delta rule recurrent, so a restored state is the state). */
#define PFX_LEN 1990
static void test_prefix_cache(void **state) {
    (void)state;
    rf_model *m = rf_eng_load(g_path);
    int32_t nv = m->hp.n_vocab;
    static int32_t a[PFX_LEN + 40], b[PFX_LEN + 30], c[740];
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 11);
    for (int k = 0; k < PFX_LEN + 40; k++) a[k] = 5 + (int32_t)(rf_rng_u64(&r) % (uint64_t)(nv - 10));
    memcpy(b, a, PFX_LEN * sizeof(int32_t));
    for (int k = PFX_LEN; k < PFX_LEN + 30; k++) b[k] = 5 + (int32_t)(rf_rng_u64(&r) % (uint64_t)(nv - 10));
    memcpy(c, a, 700 * sizeof(int32_t));
    for (int k = 700; k < 740; k++) c[k] = 5 + (int32_t)(rf_rng_u64(&r) % (uint64_t)(nv - 10));
    assert_int_equal(rf_knob_override(RF_KNOB_STATE_CHECKPOINTS, "6"), RF_OK);
    rf_eng_out on[4], off[4];
    rf_eng_hooks h = {on, 4, nv};
    for (int pass = 0; pass < 2; pass++) {
        rf_engine_config *cf = rf_engine_config_new();
        rf_engine_config_set(cf, RF_ENGINE_CTX, 2048 + 64);
        rf_engine_config_set(cf, RF_ENGINE_PARALLEL, 1);
        rf_engine_config_set(cf, RF_ENGINE_BATCH, 512);
        rf_engine_config_set(cf, RF_ENGINE_KV_BLOCKS, 320); /* room for every prefix: no KV block evicted */
        rf_engine_config_set(cf, RF_ENGINE_PREFIX_CACHE, pass == 0);
        rf_engine *e = NULL;
        if (rf_engine_new(m, cf, &e)) fail_msg("engine: %s", rf_last_error());
        rf_engine_config_free(cf);
        assert_int_equal(rf_engine_get_stat(e, RF_STAT_STATE_CKPT_TOTAL), pass == 0 ? 6 : 0);
        rf_eng_out *o = pass == 0 ? on : off;
        h.outs = o;
        e->logits_hook = rf_eng_on_logits;
        e->hook_user = &h;
        const int32_t *ids[4] = {a, b, c, a};
        const int len[4] = {PFX_LEN, PFX_LEN + 30, 740, 1985};
        const int64_t want[4] = {PFX_LEN, 36, 228, 1}; /* prompt tokens computed with the cache on */
        for (int i = 0; i < 4; i++) {
            int64_t p0 = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS), h0 = rf_engine_get_stat(e, RF_STAT_STATE_CKPT_HITS);
            rf_eng_submit(e, ids[i], len[i], 8, &o[i], 1, 0);
            run_checked(e);
            int64_t got = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS) - p0;
            if (pass == 0 && got != want[i]) fail_msg("request %d: %lld prompt tokens computed, want %lld", i, (long long)got, (long long)want[i]);
            if (pass == 1 && got != len[i]) fail_msg("cache off, request %d: %lld prompt tokens computed", i, (long long)got);
            assert_int_equal(rf_engine_get_stat(e, RF_STAT_STATE_CKPT_HITS) - h0, pass == 0 && i > 0 ? 1 : 0);
        }
        if (pass == 0) {
            assert_int_equal(rf_engine_get_stat(e, RF_STAT_PREFIX_HIT_TOKENS), 1984 + 512 + 1984);
            assert_true(rf_engine_get_stat(e, RF_STAT_STATE_CKPT_USED) >= 4);
            assert_int_equal(rf_engine_get_stat(e, RF_STAT_STATE_SLOTS_USED), 0);
        }
        rf_engine_free(e);
    }
    for (int i = 0; i < 4; i++) rf_eng_same(&off[i], &on[i], 0, "prefix cache on vs off", i);
    printf("  prefix cache: %d-token prompt, then +30 new tokens (36 computed), its first 700 + 40 (228 computed) and "
           "its first 1985 (1 computed): same tokens and logits as with the cache off\n", PFX_LEN);
    rf_knob_override(RF_KNOB_STATE_CHECKPOINTS, NULL);
    rf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_and_crowd),
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_prefix_cache),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
