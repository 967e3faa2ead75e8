/* sequence.h — a sequence: its tokens, block table and generation state, and the lists the
 * engine keeps them in (sequence.c). Below the scheduler and the engine: it calls neither. */
#ifndef RF_SEQUENCE_H
#define RF_SEQUENCE_H

#include "engine/kv_pool.h"
#include "engine/state_pool.h"
#include "rocmforge/engine.h"
#include "tokenizer/detok.h"

typedef enum rf_seq_state {
    RF_SEQ_WAITING = 0, /* queued or preempted: holds no blocks */
    RF_SEQ_RUNNING,     /* scheduled each step until all its tokens are computed and sampled */
    RF_SEQ_IDLE,        /* a session's sequence between calls: holds blocks, not scheduled */
    RF_SEQ_DONE
} rf_seq_state;

typedef struct rf_req rf_req;

typedef struct rf_seq {
    rf_req *req;             /* the request (NULL for a session's sequence outside rf_generate) */
    int32_t choice;
    uint64_t order;          /* arrival order: FCFS admission, the newest is preempted first */
    rf_seq_state state;
    bool persistent;         /* a session's: keeps its blocks when generation ends */
    int32_t *tokens, n_tokens, tokens_cap; /* prompt + generated */
    int32_t n_prompt;        /* tokens before generation began */
    int32_t n_computed;      /* leading tokens whose K/V are in the pool */
    int32_t *blocks, n_blocks, blocks_cap; /* block table */
    int32_t state_ref;       /* recurrent-state slot + 1 (0: none; state_pool.h) */
    int32_t ckpt_ref;        /* a checkpoint to restore into the slot before the next step, + 1
                              * (0: none); the sequence holds a reference to it */
    uint64_t *hashes;        /* [blocks_cap] hash chain of the leading full blocks */
    int32_t n_hashed;        /* leading blocks whose hash is known (published or found) */
    bool lookup_done;        /* prefix cache consulted since the last preemption */
    bool admitted;           /* admitted once (later admissions follow a preemption) */
    /* generation (state RUNNING with gen = true: sample when every token is computed) */
    bool gen;
    rf_sampler *smp;
    rf_textout out;
    int32_t n_gen, n_cached;
    int32_t fork_left;       /* choices still to fork off after the prompt (choice 0 only) */
    rf_finish_reason finish;
    /* what the step wants back: outputs for all new tokens (session logits) or the last */
    bool want_all;
    float *logits_dst;       /* session: where this step's rows go, NULL = engine's buffer */
    /* an embedding request (pooling.c): its rf_pooling (0: none), the pooled sum of the rows
     * seen (double, [n_embd]), and how many leading positions it holds (a recomputation after a
     * preemption skips them) */
    int32_t pooling;
    double *pool_acc;
    int32_t pool_upto;
    /* rf_generate's bookkeeping */
    double t_start, t_first;
} rf_seq;

/* A list of sequences kept in arrival order (the engine's running and waiting lists). */
typedef struct rf_seq_list {
    rf_seq **v;
    int32_t n, cap;
} rf_seq_list;

/* A sequence with room for max_blocks blocks (NULL: out of memory). */
rf_seq *rf_seq_new(int32_t max_blocks);
void rf_seq_free(rf_seq *s);
/* Appends ids to a sequence's tokens. */
rf_status rf_seq_append(rf_seq *s, const int32_t *ids, int32_t n);
/* Frees a sequence's blocks (last first, so a prefix's tail is evicted before its head) and
 * gives its recurrent-state slot (and a checkpoint it was to restore) back to spool (NULL: the
 * model has no recurrent layers). */
void rf_seq_release_blocks(rf_seq *s, rf_kv_pool *pool, rf_state_pool *spool);
/* A hybrid model's sequence about to enter a step: its state slot, taken from spool now if it
 * has none; false when every slot is taken (it sits the step out). */
bool rf_seq_take_state(rf_seq *s, rf_state_pool *spool);
/* Publishes the full blocks s has computed, so later prompts can share them. */
void rf_seq_publish_blocks(rf_seq *s, rf_kv_pool *pool, int32_t block_size);
/* Inserts s in arrival order (false: out of memory); removes s (no-op when absent). */
bool rf_seq_list_insert(rf_seq_list *l, rf_seq *s);
void rf_seq_list_remove(rf_seq_list *l, rf_seq *s);
void rf_seq_list_free(rf_seq_list *l);

#endif
