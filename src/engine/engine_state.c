/* engine_state.c — the engine's hooks for recurrent-state slots (models with gated DeltaNet
 * layers): the pool and the forward's slot memory at creation, a forked choice's copy of its
 * parent's state, and the check of the slots the sequences hold against the pool. */
#include <stdlib.h>

#include "engine/engine_internal.h"

rf_status rf_engine_state_init(rf_engine *e) {
    if (rf_model_n_recurrent(e->m) == 0) return RF_OK;
    rf_status st = rf_fwd_rec_init(e->m, &e->f, e->n_parallel);
    if (!st) st = rf_state_pool_new(e->n_parallel, &e->spool);
    /* zeroed: a graph bucket's padding entries are sent up too (the device ops skip them) */
    if (!st && !(e->b_state = calloc((size_t)e->n_batch, sizeof(int32_t))))
        st = rf_set_error(RF_ERR_OOM, "engine: out of memory");
    if (!st)
        rf_log(RF_LOG_INFO, "engine: %d recurrent-state slots of %.1f MiB", e->n_parallel,
               rf_state_slot_bytes(e->m) / 1048576.0);
    return st;
}

void rf_engine_state_free(rf_engine *e) {
    rf_state_pool_free(e->spool);
    e->spool = NULL;
    free(e->b_state);
    e->b_state = NULL;
}

void rf_seq_state_fork(rf_engine *e, rf_seq *parent, rf_seq *child) {
    if (!e->spool || parent->state_ref == 0) return;
    int32_t slot = rf_state_pool_alloc(e->spool);
    if (slot >= 0 && rf_fwd_copy_slot(e->m, &e->f, slot, parent->state_ref - 1) == RF_OK) {
        child->state_ref = slot + 1;
        return;
    }
    if (slot >= 0) rf_state_pool_release(e->spool, slot);
    rf_seq_release_blocks(child, e->pool, e->spool); /* no slot: recomputed from its start when it runs */
}

rf_status rf_engine_state_check(rf_engine *e) {
    if (!e->spool) return RF_OK;
    int32_t cap = e->running.n + e->waiting.n, n = 0;
    int32_t *held = malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    if (!held) return rf_set_error(RF_ERR_OOM, "state check: out of memory");
    rf_status st = RF_OK;
    for (int32_t i = 0; i < cap && !st; i++) {
        rf_seq *s = i < e->running.n ? e->running.v[i] : e->waiting.v[i - e->running.n];
        if (s->state_ref) held[n++] = s->state_ref - 1;
        if (s->state_ref && i >= e->running.n) /* a waiting sequence holds nothing */
            st = rf_set_error(RF_ERR_INTERNAL, "a waiting sequence holds state slot %d", s->state_ref - 1);
    }
    /* a session's idle sequence is in neither list; its slot counts as held */
    if (!st && n + rf_state_pool_n_free(e->spool) < rf_state_pool_n_slots(e->spool))
        st = RF_OK; /* held outside the lists (idle sessions): checked by count only */
    else if (!st)
        st = rf_state_pool_check(e->spool, held, n);
    free(held);
    return st;
}
