/* test_embed.c — test_embed.h's embedding-request helpers. */
#include "test_embed.h"

#include <string.h>

bool rf_emb_on_event(const rf_event *ev, void *user) {
    rf_emb_vec *o = user;
    if (rf_event_get_kind(ev) == RF_EVENT_TOKEN) {
        o->tokens++;
        return true;
    }
    int32_t n = 0;
    const float *v = rf_event_embedding(ev, &n);
    o->fin = rf_event_finish(ev);
    o->n_prompt = rf_event_n_prompt(ev);
    o->done++;
    if (v && n <= RF_EMB_MAX) {
        memcpy(o->v, v, (size_t)n * sizeof(float));
        o->n = n;
    }
    return true;
}

uint64_t rf_emb_submit(rf_engine *e, const int32_t *ids, int n, rf_pooling pool, rf_emb_vec *o) {
    memset(o, 0, sizeof *o);
    rf_request *q = rf_request_new();
    if (rf_request_set_prompt_ids(q, ids, (size_t)n)) fail_msg("prompt ids: %s", rf_last_error());
    if (rf_request_set(q, RF_REQ_EMBED, pool)) fail_msg("RF_REQ_EMBED: %s", rf_last_error());
    rf_request_set_callback(q, rf_emb_on_event, o);
    uint64_t id = 0;
    if (rf_engine_submit(e, q, &id)) fail_msg("submit: %s", rf_last_error());
    rf_request_free(q);
    return id;
}
