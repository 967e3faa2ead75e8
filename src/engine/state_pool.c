/* state_pool.c — recurrent-state slot bookkeeping (state_pool.h): a free stack of slot ids, and
 * the checkpoints of the hybrid prefix cache (a free stack, keys, reference counts and a
 * least-recently-used list of the cached ones). The engine's hooks: engine_state.c. */
#include "engine/state_pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct ckpt {
    uint64_t key;
    int32_t pos;          /* 0: holds no state (free) */
    int32_t ref;
    int32_t lprev, lnext; /* eviction list (cached: pos > 0, ref 0), -1 at the ends */
} ckpt;

struct rf_state_pool {
    int32_t n, n_free;
    int32_t *free_ids; /* stack */
    int32_t nc, nc_free, nc_used;
    ckpt *c;
    int32_t *cfree;    /* stack of free checkpoints */
    int32_t lru_head, lru_tail; /* head = least recently used */
};

rf_status rf_state_pool_new(int32_t n_slots, int32_t n_ckpt, rf_state_pool **out) {
    *out = NULL;
    if (n_slots < 1 || n_ckpt < 0)
        return rf_set_error(RF_ERR_INVALID_ARG, "state pool: %d slots, %d checkpoints", n_slots, n_ckpt);
    rf_state_pool *p = calloc(1, sizeof *p);
    if (p) {
        p->free_ids = malloc((size_t)n_slots * sizeof(int32_t));
        p->c = calloc((size_t)(n_ckpt ? n_ckpt : 1), sizeof(ckpt));
        p->cfree = malloc((size_t)(n_ckpt ? n_ckpt : 1) * sizeof(int32_t));
    }
    if (!p || !p->free_ids || !p->c || !p->cfree) {
        rf_state_pool_free(p);
        return rf_set_error(RF_ERR_OOM, "state pool: out of memory");
    }
    p->n = p->n_free = n_slots;
    for (int32_t i = 0; i < n_slots; i++) p->free_ids[i] = n_slots - 1 - i; /* slot 0 on top */
    p->nc = p->nc_free = n_ckpt;
    for (int32_t i = 0; i < n_ckpt; i++) {
        p->cfree[i] = n_ckpt - 1 - i;
        p->c[i].lprev = p->c[i].lnext = -1;
    }
    p->lru_head = p->lru_tail = -1;
    *out = p;
    return RF_OK;
}

void rf_state_pool_free(rf_state_pool *p) {
    if (!p) return;
    free(p->free_ids);
    free(p->c);
    free(p->cfree);
    free(p);
}

int32_t rf_state_pool_alloc(rf_state_pool *p) { return p->n_free > 0 ? p->free_ids[--p->n_free] : -1; }

void rf_state_pool_release(rf_state_pool *p, int32_t slot) {
    if (slot >= 0 && slot < p->n && p->n_free < p->n) p->free_ids[p->n_free++] = slot;
}

int32_t rf_state_pool_n_slots(const rf_state_pool *p) { return p ? p->n : 0; }
int32_t rf_state_pool_n_free(const rf_state_pool *p) { return p ? p->n_free : 0; }
int32_t rf_state_pool_n_ckpt(const rf_state_pool *p) { return p ? p->nc : 0; }
int32_t rf_state_pool_n_ckpt_used(const rf_state_pool *p) { return p ? p->nc_used : 0; }

static void lru_remove(rf_state_pool *p, int32_t i) {
    ckpt *k = &p->c[i];
    if (k->lprev >= 0) p->c[k->lprev].lnext = k->lnext;
    else p->lru_head = k->lnext;
    if (k->lnext >= 0) p->c[k->lnext].lprev = k->lprev;
    else p->lru_tail = k->lprev;
    k->lprev = k->lnext = -1;
}

static void lru_append(rf_state_pool *p, int32_t i) {
    ckpt *k = &p->c[i];
    k->lprev = p->lru_tail;
    k->lnext = -1;
    if (p->lru_tail >= 0) p->c[p->lru_tail].lnext = i;
    else p->lru_head = i;
    p->lru_tail = i;
}

static int32_t ckpt_find(const rf_state_pool *p, uint64_t key, int32_t pos) {
    if (pos <= 0) return -1;
    for (int32_t i = 0; i < p->nc; i++)
        if (p->c[i].pos == pos && p->c[i].key == key) return i;
    return -1;
}

int32_t rf_state_ckpt_lookup(rf_state_pool *p, uint64_t key, int32_t pos) {
    int32_t i = ckpt_find(p, key, pos);
    if (i < 0) return -1;
    if (p->c[i].ref++ == 0) lru_remove(p, i);
    return i;
}

bool rf_state_ckpt_touch(rf_state_pool *p, uint64_t key, int32_t pos) {
    int32_t i = ckpt_find(p, key, pos);
    if (i < 0) return false;
    if (p->c[i].ref == 0) { /* most recently used: to the tail */
        lru_remove(p, i);
        lru_append(p, i);
    }
    return true;
}

int32_t rf_state_ckpt_alloc(rf_state_pool *p, uint64_t key, int32_t pos) {
    int32_t i;
    if (pos <= 0) return -1;
    if (p->nc_free > 0) {
        i = p->cfree[--p->nc_free];
        p->nc_used++;
    } else if (p->lru_head >= 0) {
        i = p->lru_head; /* evicted: its key is overwritten below */
        lru_remove(p, i);
    } else {
        return -1;
    }
    p->c[i].key = key;
    p->c[i].pos = pos;
    p->c[i].ref = 1;
    return i;
}

void rf_state_ckpt_unref(rf_state_pool *p, int32_t i) {
    if (i < 0 || i >= p->nc || p->c[i].ref <= 0) return; /* a caller bug; check() reports the state */
    if (--p->c[i].ref == 0) lru_append(p, i);
}

void rf_state_ckpt_drop(rf_state_pool *p, int32_t i) {
    if (i < 0 || i >= p->nc || p->c[i].ref != 1) return;
    p->c[i].ref = 0;
    p->c[i].pos = 0;
    p->nc_used--;
    p->cfree[p->nc_free++] = i;
}

static rf_status check_ckpts(const rf_state_pool *p, const int32_t *refs) {
    int32_t used = 0, cached = 0, listed = 0;
    for (int32_t i = 0; i < p->nc; i++) {
        const ckpt *k = &p->c[i];
        if (k->ref != refs[i])
            return rf_set_error(RF_ERR_INTERNAL, "checkpoint %d has %d references, its holders %d", i, k->ref, refs[i]);
        if (k->pos > 0) used++;
        if (k->pos > 0 && k->ref == 0) cached++;
        if (k->pos <= 0 && k->ref) return rf_set_error(RF_ERR_INTERNAL, "free checkpoint %d is referenced", i);
    }
    for (int32_t i = p->lru_head, prev = -1; i >= 0; prev = i, i = p->c[i].lnext) {
        if (++listed > p->nc) return rf_set_error(RF_ERR_INTERNAL, "checkpoint eviction list has a cycle");
        if (p->c[i].lprev != prev) return rf_set_error(RF_ERR_INTERNAL, "checkpoint eviction list broken at %d", i);
        if (p->c[i].ref || p->c[i].pos <= 0)
            return rf_set_error(RF_ERR_INTERNAL, "checkpoint %d on the eviction list is referenced or free", i);
    }
    uint8_t *seen = calloc((size_t)(p->nc ? p->nc : 1), 1);
    if (!seen) return rf_set_error(RF_ERR_OOM, "state pool check: out of memory");
    rf_status st = RF_OK;
    for (int32_t i = 0; i < p->nc_free && !st; i++) {
        int32_t c = p->cfree[i];
        if (c < 0 || c >= p->nc || seen[c]++ || p->c[c].pos > 0)
            st = rf_set_error(RF_ERR_INTERNAL, "checkpoint %d on the free list twice, outside or holding a state", c);
    }
    free(seen);
    if (!st && (used != p->nc_used || listed != cached || used + p->nc_free != p->nc))
        st = rf_set_error(RF_ERR_INTERNAL, "checkpoints: used %d/%d, cached %d listed %d, free %d of %d", used, p->nc_used,
                          cached, listed, p->nc_free, p->nc);
    return st;
}

rf_status rf_state_pool_check(const rf_state_pool *p, const int32_t *held, int32_t n_held, const int32_t *ckpt_refs) {
    uint8_t *seen = calloc((size_t)p->n, 1);
    if (!seen) return rf_set_error(RF_ERR_OOM, "state pool check: out of memory");
    rf_status st = RF_OK;
    for (int32_t i = 0; i < p->n_free + (held ? n_held : 0) && !st; i++) {
        int32_t s = i < p->n_free ? p->free_ids[i] : held[i - p->n_free];
        if (s < 0 || s >= p->n) st = rf_set_error(RF_ERR_INTERNAL, "state slot %d outside the pool of %d", s, p->n);
        else if (seen[s]++) st = rf_set_error(RF_ERR_INTERNAL, "state slot %d is held or free twice", s);
    }
    if (!st && held && p->n_free + n_held != p->n)
        st = rf_set_error(RF_ERR_INTERNAL, "state slots: %d free + %d held of %d", p->n_free, n_held, p->n);
    free(seen);
    if (!st && ckpt_refs) st = check_ckpts(p, ckpt_refs);
    return st;
}
