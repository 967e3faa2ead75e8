/* state_pool.c — recurrent-state slot bookkeeping (state_pool.h): a free stack of slot ids, and
 * the engine's hooks that give each running sequence of a hybrid model its slot. */
#include "engine/state_pool.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

struct rf_state_pool {
    int32_t n, n_free;
    int32_t *free_ids; /* stack */
};

rf_status rf_state_pool_new(int32_t n_slots, rf_state_pool **out) {
    *out = NULL;
    if (n_slots < 1) return rf_set_error(RF_ERR_INVALID_ARG, "state pool: %d slots", n_slots);
    rf_state_pool *p = calloc(1, sizeof *p);
    if (p) p->free_ids = malloc((size_t)n_slots * sizeof(int32_t));
    if (!p || !p->free_ids) {
        rf_state_pool_free(p);
        return rf_set_error(RF_ERR_OOM, "state pool: out of memory");
    }
    p->n = p->n_free = n_slots;
    for (int32_t i = 0; i < n_slots; i++) p->free_ids[i] = n_slots - 1 - i; /* slot 0 on top */
    *out = p;
    return RF_OK;
}

void rf_state_pool_free(rf_state_pool *p) {
    if (!p) return;
    free(p->free_ids);
    free(p);
}

int32_t rf_state_pool_alloc(rf_state_pool *p) { return p->n_free > 0 ? p->free_ids[--p->n_free] : -1; }

void rf_state_pool_release(rf_state_pool *p, int32_t slot) {
    if (slot >= 0 && slot < p->n && p->n_free < p->n) p->free_ids[p->n_free++] = slot;
}

int32_t rf_state_pool_n_slots(const rf_state_pool *p) { return p ? p->n : 0; }
int32_t rf_state_pool_n_free(const rf_state_pool *p) { return p ? p->n_free : 0; }

rf_status rf_state_pool_check(const rf_state_pool *p, const int32_t *held, int32_t n_held) {
    uint8_t *seen = calloc((size_t)p->n, 1);
    if (!seen) return rf_set_error(RF_ERR_OOM, "state pool check: out of memory");
    rf_status st = RF_OK;
    for (int32_t i = 0; i < p->n_free + n_held && !st; i++) {
        int32_t s = i < p->n_free ? p->free_ids[i] : held[i - p->n_free];
        if (s < 0 || s >= p->n) st = rf_set_error(RF_ERR_INTERNAL, "state slot %d outside the pool of %d", s, p->n);
        else if (seen[s]++) st = rf_set_error(RF_ERR_INTERNAL, "state slot %d is held or free twice", s);
    }
    if (!st && p->n_free + n_held != p->n)
        st = rf_set_error(RF_ERR_INTERNAL, "state slots: %d free + %d held of %d", p->n_free, n_held, p->n);
    free(seen);
    return st;
}

/* ---- engine hooks -------------------------------------------------------------------------- */

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
