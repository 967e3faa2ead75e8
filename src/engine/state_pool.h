/* state_pool.h — the recurrent-state slots beside the paged KV pool (docs/ARCHITECTURE.md §4.4;
 * models with gated DeltaNet layers): a fixed number of slots sized at start, one per running
 * sequence, taken when the sequence first enters a step and given back at once when it releases
 * its KV blocks (finished, cancelled, preempted). The slot memory is the forward's
 * (rf_fwd_rec, forward_deltanet.c); this file keeps the bookkeeping, engine_state.c the engine's
 * hooks. */
#ifndef RF_STATE_POOL_H
#define RF_STATE_POOL_H

#include "rocmforge/core.h"

typedef struct rf_state_pool rf_state_pool;

rf_status rf_state_pool_new(int32_t n_slots, rf_state_pool **out);
void rf_state_pool_free(rf_state_pool *p);
/* A free slot, or -1 when none is left. */
int32_t rf_state_pool_alloc(rf_state_pool *p);
void rf_state_pool_release(rf_state_pool *p, int32_t slot);
int32_t rf_state_pool_n_slots(const rf_state_pool *p);
int32_t rf_state_pool_n_free(const rf_state_pool *p);
/* RF_ERR_INTERNAL unless held[0..n_held) (the slots the sequences hold) and the free list
 * together name every slot exactly once. */
rf_status rf_state_pool_check(const rf_state_pool *p, const int32_t *held, int32_t n_held);

#endif
