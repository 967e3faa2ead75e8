/* state_pool.c — recurrent-state slot bookkeeping (state_pool.h): a free stack of slot ids (the
 * engine's hooks that give each running sequence of a hybrid model its slot: engine_state.c). */
#include "engine/state_pool.h"

#include <stdlib.h>
#include <string.h>

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
