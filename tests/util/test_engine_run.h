/* test_engine_run.h — the scaffolding of the engine tests that compare runs bit for bit
 * (test_qwen35_engine.c and the tests that include it, test_gemma4_engine.c): a synthetic q8_0
 * model written by `rocmforge mkmodel`, an engine of a given shape, requests whose tokens and
 * logits rows (as hashes) are recorded per choice, and a run checked after every step. */
#ifndef RF_TEST_ENGINE_RUN_H
#define RF_TEST_ENGINE_RUN_H

#include "test_util.h"

#include "engine/engine_internal.h"

#define RF_ENG_MAXT 40 /* tokens recorded per choice */
#define RF_ENG_PLEN 70 /* longest prompt of rf_eng_make_prompts */
#define RF_ENG_NP 8    /* most prompts of rf_eng_chunks_and_crowd */

/* What one request produced: its id, DONE events seen, and per choice (up to 3) the tokens and
 * an FNV-1a hash of each logits row's bytes. */
typedef struct rf_eng_out {
    uint64_t id;
    int32_t done, n[3];
    int32_t tok[3][RF_ENG_MAXT];
    uint64_t lhash[3][RF_ENG_MAXT];
} rf_eng_out;

/* The logits hook's user data: the requests whose rows are hashed (by request id). */
typedef struct rf_eng_hooks {
    rf_eng_out *outs;
    int n;
    int32_t nv;
} rf_eng_hooks;

/* Writes `preset` as a q8_0 GGUF under the build's synth-models/ (NAME-PRESET.q8_0.gguf, with
 * $RF_CLI's mkmodel) and its path to path[cap]; 0, or -1 when the CLI is missing or fails. */
int rf_eng_make_model(const char *preset, const char *name, char *path, size_t cap);
/* The model at path on 2 CPU threads; fails the test when it does not load. */
rf_model *rf_eng_load(const char *path);
/* An engine of 128 positions per sequence, `par` sequences, a step budget of `batch` tokens and
 * `blocks` KV blocks (0: the default); fails the test on error. */
rf_engine *rf_eng_new(rf_model *m, int par, int batch, int blocks);
/* The request callback (user: rf_eng_out) and the engine's logits hook (user: rf_eng_hooks). */
bool rf_eng_on_event(const rf_event *ev, void *user);
void rf_eng_on_logits(void *user, const rf_seq *s, const float *lg);
/* Submits ids[0..n) for max_tokens tokens, end of text ignored, recorded in o (cleared); with
 * choices > 1 or a seed, `choices` choices sampled at temperature 0.9 from `seed`. */
void rf_eng_submit(rf_engine *e, const int32_t *ids, int n, int max_tokens, rf_eng_out *o, int choices, int seed);
/* Steps until nothing runs or waits, rf_engine_check after every step, every KV block back at
 * the end; returns the number of steps. */
int rf_eng_run_checked(rf_engine *e);
/* n random prompts of tokens 5..nv-5 from the run's seed: the first 4 of 60 tokens (long enough
 * to force preemption in a small pool), the rest of 5..64. */
void rf_eng_make_prompts(int32_t nv, int n, int32_t (*prompt)[RF_ENG_PLEN], int *plen);
/* Fails the test unless a and b hold the same tokens and logits-row hashes for `choice`
 * (what and i name the case in the message). */
void rf_eng_same(const rf_eng_out *a, const rf_eng_out *b, int choice, const char *what, int i);

/* The invariance cases on m's prompts[0..np) (np of 4..RF_ENG_NP; 24 greedy tokens each, every
 * logits row hashed): each alone in one step; alone in chunks of 1, 3, 7 and 16 tokens; all
 * together with staggered arrival, 5 at once in 16-token steps; the first 4 in a pool of 9 blocks
 * that forces preemption. Every run equals the lone one in tokens and logits bits. run(e) steps
 * an engine until idle with the caller's checks; idle(e), when given, checks the crowd's engine
 * once it is idle (a hybrid model: every state slot back). */
void rf_eng_chunks_and_crowd(rf_model *m, int np, int32_t (*prompt)[RF_ENG_PLEN], const int *plen,
                             int (*run)(rf_engine *e), void (*idle)(rf_engine *e));

#endif
