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
} rf_sched;

typedef struct rf_plan_item {
    rf_seq *s;
    int32_t n; /* tokens of s in this step, from s->n_computed */
} rf_plan_item;

/* A step plan. The engine copies each block (copies[i].src into .dst, in order) before the
 * forward, and fails the sequences in failed[] (they are in neither list). */
typedef struct rf_step_plan {
    rf_plan_item *items;          /* the step's sequences with their token counts (n > 0) */
    int32_t n_items, items_cap;
    struct { int32_t dst, src; } *copies; /* copy-on-write of shared partial blocks */
    int32_t n_copies, copies_cap;
    rf_seq **failed;              /* out of memory while admitting or preempting */
    const char **failed_why;
    int32_t n_failed, failed_cap;
    int32_t n_preempted;          /* sequences sent back to the waiting list */
    int64_t prefix_hits;          /* prompt tokens found in the prefix cache by admissions */
} rf_step_plan;

/* Plans one step. With only non-NULL the step holds that sequence alone (a session's eval),
 * whatever else is queued. Returns RF_OK or an error (the KV pool exhausted with nothing left
 * to preempt, or out of memory); the plan is filled either way (on error the engine fails its
 * items). The plan's arrays are reused across calls: free them with rf_step_plan_free. */
rf_status rf_sched_plan(const rf_sched *sc, rf_seq *only, rf_step_plan *plan);
void rf_step_plan_free(rf_step_plan *plan);

#endif
