/* scheduler.h — the step planner (scheduler.c): from the running and waiting sequences and the
 * KV pool it decides one step (which sequences, how many tokens each, admissions, preemptions,
 * copy-on-write copies) and books their blocks (and a hybrid model's state slots); the engine
 * executes the plan. It calls only sequence.c, kv_pool.c and state_pool.c, never the engine. */
#ifndef RF_SCHEDULER_H
#define RF_SCHEDULER_H

#include "engine/sequence.h"

/* What the planner reads and books. */
typedef struct rf_sched {
    rf_kv_pool *pool;
    rf_state_pool *spool;           /* recurrent-state slots (hybrid models), or NULL */
    rf_seq_list *running, *waiting; /* the engine's lists, in arrival order */
    int32_t block_size, n_batch, n_parallel;
    /* the step's token budget (rf_sched_prompt_room): n_step caps a step that carries decode
     * tokens (0 = n_batch), n_prompt_min is the prompt room such a step keeps while n_batch has
     * it, so prompts stream in even when decodes fill n_step */
    int32_t n_step, n_prompt_min;
} rf_sched;

/* A hybrid model's prefix cache (state checkpoints: sc->spool has some and the KV pool a prefix
 * cache) cuts prompt chunks at block boundaries so the state after each can be checkpointed:
 * a chunk that does not finish the prompt ends at the last boundary inside it (when one is past
 * the chunk's start), and a chunk that would finish it stops at the prompt's last boundary first
 * (the tail follows the next step). So a plan's prompt tokens may fall short of the room below
 * by up to block_size - 1 per prompt chunk.
 *
 * The rule of a step's budget. Every decoding sequence (one token left to compute) gets its
 * token first, oldest first, up to n_batch: a decode is never deferred for a prompt. Prompt
 * chunks (running prompts oldest first, then admissions first come first served) fill
 *   room(d) = n_batch                                          when d = 0 (no decode waits)
 *   room(d) = min(n_batch - d, max(n_step - d, n_prompt_min))  when d > 0
 * where d is the step's decode tokens and n_step = 0 means n_batch; with the defaults (n_step =
 * n_batch) room(d) = n_batch - d, the engine's rule before n_step existed. Pure: for tests. */
int32_t rf_sched_prompt_room(int32_t n_batch, int32_t n_step, int32_t n_prompt_min, int32_t d);

typedef struct rf_plan_item {
    rf_seq *s;
    int32_t n; /* tokens of s in this step, from s->n_computed */
} rf_plan_item;

/* A step plan. The engine copies each block (copies[i].src into .dst, in order) and restores
 * each state checkpoint (restores[i].ckpt into state slot .slot, then drops the plan's reference
 * to the checkpoint) before the forward, and fails the sequences in failed[] (they are in
 * neither list). */
typedef struct rf_step_plan {
    rf_plan_item *items;          /* the step's sequences with their token counts (n > 0) */
    int32_t n_items, items_cap;
    struct { int32_t dst, src; } *copies; /* copy-on-write of shared partial blocks */
    int32_t n_copies, copies_cap;
    struct { int32_t slot, ckpt; } *restores; /* hybrid prefix hits: checkpoint into slot */
    int32_t n_restores, restores_cap;
    rf_seq **failed;              /* out of memory while admitting or preempting */
    const char **failed_why;
    int32_t n_failed, failed_cap;
    int32_t n_preempted;          /* sequences sent back to the waiting list */
    int64_t prefix_hits;          /* prompt tokens found in the prefix cache by admissions */
    int64_t ckpt_hits;            /* admissions that resume from a state checkpoint */
} rf_step_plan;

/* Plans one step. With only non-NULL the step holds that sequence alone (a session's eval),
 * whatever else is queued. Returns RF_OK or an error (the KV pool exhausted with nothing left
 * to preempt, or out of memory); the plan is filled either way (on error the engine fails its
 * items). The plan's arrays are reused across calls: free them with rf_step_plan_free. */
rf_status rf_sched_plan(const rf_sched *sc, rf_seq *only, rf_step_plan *plan);
void rf_step_plan_free(rf_step_plan *plan);

#endif
