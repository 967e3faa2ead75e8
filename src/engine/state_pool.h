/* state_pool.h — the recurrent-state slots beside the paged KV pool (docs/ARCHITECTURE.md §4.4;
 * models with gated DeltaNet layers): a fixed number of slots sized at start, one per running
 * sequence, taken when the sequence first enters a step and given back at once when it releases
 * its KV blocks (finished, cancelled, preempted); and the prefix cache's checkpoints: copies of a
 * sequence's state at a block boundary, keyed by the KV hash chain of the prefix up to it,
 * reference-counted and evicted least-recently-used like cached KV blocks. The slot memory is
 * the forward's (rf_fwd_rec, forward_deltanet.c: checkpoint c is row n_slots + c of the state
 * tensors); this file keeps the bookkeeping, engine_state.c the engine's hooks. */
#ifndef RF_STATE_POOL_H
#define RF_STATE_POOL_H

#include "rocmforge/core.h"

typedef struct rf_state_pool rf_state_pool;

/* n_slots >= 1 sequence slots and n_ckpt >= 0 checkpoints. */
rf_status rf_state_pool_new(int32_t n_slots, int32_t n_ckpt, rf_state_pool **out);
void rf_state_pool_free(rf_state_pool *p);
/* A free slot, or -1 when none is left. */
int32_t rf_state_pool_alloc(rf_state_pool *p);
void rf_state_pool_release(rf_state_pool *p, int32_t slot);
int32_t rf_state_pool_n_slots(const rf_state_pool *p);
int32_t rf_state_pool_n_free(const rf_state_pool *p);

/* ---- checkpoints: a state at position pos (a block boundary) of the prefix whose KV hash chain
 * ends in key. A checkpoint is free, cached (holds a state, nobody references it: evictable) or
 * referenced (a restore in flight). Lookups walk the checkpoints (tens of them: O(n)). ---- */
int32_t rf_state_pool_n_ckpt(const rf_state_pool *p);
/* Checkpoints holding a state (cached or referenced). */
int32_t rf_state_pool_n_ckpt_used(const rf_state_pool *p);
/* The checkpoint of (key, pos) with a reference taken, or -1. */
int32_t rf_state_ckpt_lookup(rf_state_pool *p, uint64_t key, int32_t pos);
/* True when (key, pos) is checkpointed already (it becomes the most recently used). */
bool rf_state_ckpt_touch(rf_state_pool *p, uint64_t key, int32_t pos);
/* A checkpoint for (key, pos), referenced once, for the caller to write: a free one, else the
 * least recently used cached one (evicted). -1 when every checkpoint is referenced or none exist. */
int32_t rf_state_ckpt_alloc(rf_state_pool *p, uint64_t key, int32_t pos);
/* Drops a reference; at zero the checkpoint joins the eviction list as most recently used. */
void rf_state_ckpt_unref(rf_state_pool *p, int32_t c);
/* Forgets a checkpoint the caller references once (its write failed): back to the free list. */
void rf_state_ckpt_drop(rf_state_pool *p, int32_t c);

/* RF_ERR_INTERNAL unless held[0..n_held) (the slots the sequences hold) and the free list
 * together name every slot exactly once, and, when ckpt_refs is non-NULL, every checkpoint's
 * reference count equals ckpt_refs[c] with the free and eviction lists consistent. */
rf_status rf_state_pool_check(const rf_state_pool *p, const int32_t *held, int32_t n_held, const int32_t *ckpt_refs);

#endif
