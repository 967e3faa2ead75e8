/* engine_state.c — the engine's hooks for recurrent-state slots (models with gated DeltaNet
 * layers): the pool and the forward's slot memory at creation, a forked choice's copy of its
 * parent's state, the prefix cache's checkpoints (saved after a step at a block boundary,
 * restored before one), and the check of slots and checkpoints against the pool. */
#include <stdlib.h>

#include "engine/engine_internal.h"

/* Copies state row src into row dst (slot or checkpoint rows: checkpoint c is row n_parallel + c). */
static rf_status copy_state(rf_engine *e, int32_t dst, int32_t src) {
    rf_status st = rf_fwd_copy_slot(e->m, &e->f, dst, src);
    if (!st && e->state_copy_hook) e->state_copy_hook(e->hook_user, dst, src);
    return st;
}

rf_status rf_engine_state_init(rf_engine *e) {
    if (rf_model_n_recurrent(e->m) == 0) {
        e->n_ckpt = 0;
        return RF_OK;
    }
    rf_status st = rf_fwd_rec_init(e->m, &e->f, e->n_parallel + e->n_ckpt);
    if (!st) st = rf_state_pool_new(e->n_parallel, e->n_ckpt, &e->spool);
    /* zeroed: a graph bucket's padding entries are sent up too (the device ops skip them) */
    if (!st && !(e->b_state = calloc((size_t)e->n_batch, sizeof(int32_t))))
        st = rf_set_error(RF_ERR_OOM, "engine: out of memory");
    if (!st)
        rf_log(RF_LOG_INFO, "engine: %d recurrent-state slots and %d prefix checkpoints of %.1f MiB (%.1f MiB)",
               e->n_parallel, e->n_ckpt, rf_state_slot_bytes(e->m) / 1048576.0,
               (double)(e->n_parallel + e->n_ckpt) * rf_state_slot_bytes(e->m) / 1048576.0);
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
    if (slot >= 0 && copy_state(e, slot, parent->state_ref - 1) == RF_OK) {
        child->state_ref = slot + 1;
        return;
    }
    if (slot >= 0) rf_state_pool_release(e->spool, slot);
    rf_seq_release_blocks(child, e->pool, e->spool); /* no slot: recomputed from its start when it runs */
}

rf_status rf_engine_state_restore(rf_engine *e, const rf_step_plan *p) {
    rf_status st = RF_OK;
    for (int32_t i = 0; i < p->n_restores; i++) {
        if (!st) st = copy_state(e, p->restores[i].slot, e->n_parallel + p->restores[i].ckpt);
        rf_state_ckpt_unref(e->spool, p->restores[i].ckpt); /* the plan's reference, even on error */
    }
    e->st_ckpt_hits += p->n_restores;
    return st;
}

rf_status rf_engine_state_save(rf_engine *e, const rf_seq *s, int32_t n) {
    if (!e->spool || !e->n_ckpt || !s->state_ref || !rf_kv_pool_prefix_cache(e->pool)) return RF_OK;
    int32_t B = e->block_size, bi = s->n_computed / B;
    /* prompt (or recomputation) chunks, and the boundaries inside the prompt: a decode past the
     * prompt would churn the checkpoints for prefixes no other request has asked for yet */
    if (s->n_computed % B || bi == 0 || s->n_hashed < bi || (n < 2 && s->n_computed > s->n_prompt)) return RF_OK;
    uint64_t key = s->hashes[bi - 1];
    if (rf_state_ckpt_touch(e->spool, key, s->n_computed)) return RF_OK;
    int32_t c = rf_state_ckpt_alloc(e->spool, key, s->n_computed);
    if (c < 0) return RF_OK; /* every checkpoint is being restored: none this time */
    rf_status st = copy_state(e, e->n_parallel + c, s->state_ref - 1);
    if (st) rf_state_ckpt_drop(e->spool, c);
    else rf_state_ckpt_unref(e->spool, c);
    return st;
}

rf_status rf_engine_state_check(rf_engine *e) {
    if (!e->spool) return RF_OK;
    int32_t cap = e->running.n + e->waiting.n, n = 0, nc = rf_state_pool_n_ckpt(e->spool);
    int32_t *held = malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    int32_t *crefs = calloc((size_t)(nc ? nc : 1), sizeof(int32_t));
    rf_status st = held && crefs ? RF_OK : rf_set_error(RF_ERR_OOM, "state check: out of memory");
    for (int32_t i = 0; i < cap && !st; i++) {
        rf_seq *s = i < e->running.n ? e->running.v[i] : e->waiting.v[i - e->running.n];
        if (s->state_ref) held[n++] = s->state_ref - 1;
        if (s->state_ref && i >= e->running.n) /* a waiting sequence holds nothing */
            st = rf_set_error(RF_ERR_INTERNAL, "a waiting sequence holds state slot %d", s->state_ref - 1);
        if (s->ckpt_ref > nc) st = rf_set_error(RF_ERR_INTERNAL, "checkpoint %d outside the pool", s->ckpt_ref - 1);
        else if (s->ckpt_ref) crefs[s->ckpt_ref - 1]++;
    }
    /* a session's idle sequence is in neither list; its slot counts as held (checked by count
     * only: the free list's ids must still be distinct) */
    if (!st) st = rf_state_pool_check(e->spool, n + rf_state_pool_n_free(e->spool) < rf_state_pool_n_slots(e->spool) ? NULL : held,
                                      n, crefs);
    free(held);
    free(crefs);
    return st;
}
