/* test_embed.h — an embedding request (RF_REQ_EMBED) submitted and its pooled vector recorded:
 * the scaffolding that test_engine_embed.c (CPU) and test_gpu_embed.c (GPU against CPU) share. */
#ifndef RF_TEST_EMBED_H
#define RF_TEST_EMBED_H

#include "test_util.h"

#define RF_EMB_MAX 4096 /* widest vector recorded */

/* What one request gave: its vector (n values; 0 when none came or it was wider than
 * RF_EMB_MAX), prompt length, DONE events, TOKEN events, finish reason. */
typedef struct rf_emb_vec {
    float v[RF_EMB_MAX];
    int32_t n, n_prompt, done, tokens;
    rf_finish_reason fin;
} rf_emb_vec;

/* The request callback (user: rf_emb_vec): counts TOKEN events, keeps the DONE event's vector. */
bool rf_emb_on_event(const rf_event *ev, void *user);
/* Submits ids[0..n) as an embedding request pooled by `pool`, recorded in o (cleared); returns
 * the request id; fails the test on any error. */
uint64_t rf_emb_submit(rf_engine *e, const int32_t *ids, int n, rf_pooling pool, rf_emb_vec *o);

#endif
