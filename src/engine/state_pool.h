/* state_pool.h — the recurrent-state slots beside the paged KV pool (docs/ARCHITECTURE.md §4.4;
 * models with gated DeltaNet layers): a fixed number of slots sized at start, one per running
 * sequence, taken when the sequence first enters a step and given back at once when it releases
 * its KV blocks (finished, cancelled, preempted). The slot memory is the forward's
 * (rf_fwd_rec, forward_deltanet.c); this file keeps the bookkeeping. */
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

/* ---- the engine's hooks (rf_seq.state_ref holds slot + 1; 0: none) ---- */
struct rf_engine;
struct rf_seq;
/* At engine creation: slots for n_parallel sequences when the model has recurrent layers
 * (nothing otherwise); the forward's slot memory is allocated here too. */
rf_status rf_engine_state_init(struct rf_engine *e);
void rf_engine_state_free(struct rf_engine *e);
/* (A sequence takes its slot in the step planner, rf_seq_take_state, and gives it back with its
 * KV blocks, rf_seq_release_blocks: sequence.c.) */
/* A choice forked off parent after its prompt: a slot with a copy of the parent's state; when
 * none is free the child recomputes from the start (its blocks given back, like a preemption). */
void rf_seq_state_fork(struct rf_engine *e, struct rf_seq *parent, struct rf_seq *child);
/* rf_engine_check's part: the slots held by the engine's sequences against the pool. */
rf_status rf_engine_state_check(struct rf_engine *e);

#endif
