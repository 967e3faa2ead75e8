/* test_seq.h — one sequence driven through rf_forward step by step (the prompt in one step, then
 * greedy tokens one step each, through a reversed block table so paging is read): what the
 * tensor-parallel tests compare between a split and an unsplit model, on the CPU and the GPU. */
#ifndef RF_TEST_SEQ_H
#define RF_TEST_SEQ_H

#include "test_util.h"

#include "model/model.h"

/* The greedy token of lg[0..nv) and its margin over the runner-up (logit units). */
int32_t rf_seq_argmax(const float *lg, int32_t nv, float *margin);
/* The prompt (n_prompt <= 256 tokens) in one step, its last position's logits to lg0, then
 * n_gen greedy tokens (gen, each with its margin), pages of `block` positions, a KV cache of
 * kv_type. Fails the test (cmocka) on any library error. */
void rf_seq_run(rf_model *m, rf_type kv_type, int32_t block, const int32_t *prompt, int n_prompt, int n_gen,
                float *lg0, int32_t *gen, float *margin);

/* The prompt in one step, then tokens[0..n_tokens) one step each (teacher forced), on a fresh
 * cache: replays a path another run took (e.g. to measure its router margins through a test
 * hook). Fails the test on any library error. */
void rf_seq_replay(rf_model *m, rf_type kv_type, int32_t block, const int32_t *prompt, int n_prompt,
                   const int32_t *tokens, int n_tokens);

#endif
