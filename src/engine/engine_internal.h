/* engine_internal.h — the batching engine's inside, shared by engine.c (requests, events,
 * state), scheduler.c (the step), textout.c (detokenizing with stop strings) and the session
 * layer (session.c, generate.c), which drives one persistent sequence through the same step. */
#ifndef RF_ENGINE_INTERNAL_H
#define RF_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/kv_pool.h"
#include "engine/state_pool.h"
#include "model/model.h"

#define RF_MAX_STOPS 16
#define RF_MAX_TOP_LOGPROBS 20
#define RF_MAX_CHOICES 64

/* ---- text output: detokenizer + stop strings with hold-back (textout.c) ---------------- */

typedef struct rf_textout {
    rf_detok *dt;
    char *buf;       /* produced, not yet released (may begin a stop string) */
    size_t len, cap;
    size_t rel;      /* leading bytes handed out by the last call, dropped at the next */
    char **stops;    /* owned copies */
    size_t *stop_len;
    int n_stop;
} rf_textout;

rf_status rf_textout_init(rf_textout *t, const rf_vocab *v, bool render_special, char *const *stops,
                          const size_t *stop_len, int n_stop);
void rf_textout_free(rf_textout *t);
/* Feeds a token; *out / *out_len receive the text now safe to release (pointer into t, valid
 * until the next call); *hit is set when a stop string appeared (text before it is released,
 * the rest dropped). */
rf_status rf_textout_push(rf_textout *t, int32_t id, const char **out, size_t *out_len, bool *hit);
/* End of generation: releases what was held back (the detokenizer's tail too). */
rf_status rf_textout_finish(rf_textout *t, const char **out, size_t *out_len, bool *hit);

/* ---- sequences --------------------------------------------------------------------------- */

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
    /* rf_generate's bookkeeping */
    double t_start, t_first;
} rf_seq;

/* A submitted request: parameters copied at submit, and its choices. */
struct rf_req {
    uint64_t id;
    int32_t *prompt, n_prompt;
    rf_sampler_params sp;
    int32_t max_tokens, n, logprobs;
    bool ignore_eos, render_special;
    char *stops[RF_MAX_STOPS];
    size_t stop_len[RF_MAX_STOPS];
    int n_stop;
    rf_event_fn cb;
    void *user;
    volatile int cancel;     /* set by rf_engine_cancel or a callback returning false */
    bool listed;             /* submitted through rf_engine_submit (in the active list) */
    volatile int *ext_cancel; /* rf_generate's cancel flag */
    int32_t n_done;          /* choices finished */
    int32_t n_seqs;          /* sequence objects alive (freed at retirement) */
    rf_req *next;            /* engine's active list */
};

struct rf_request { /* the public builder */
    rf_sampler_params sp;
    int32_t max_tokens, n, logprobs;
    bool ignore_eos, render_special, add_special, parse_special;
    char *stops[RF_MAX_STOPS];
    size_t stop_len[RF_MAX_STOPS];
    int n_stop;
    int kind; /* 0 none, 1 ids, 2 text, 3 messages */
    int32_t *ids;
    size_t n_ids;
    char *text;
    size_t text_len;
    char **roles, **contents;
    size_t n_msgs, msgs_cap;
    rf_event_fn cb;
    void *user;
};

struct rf_event {
    rf_event_kind kind;
    uint64_t req;
    int32_t choice, token, n_top, n_prompt, n_cached, n_gen;
    const char *text;
    size_t len;
    float logprob;
    int32_t top_id[RF_MAX_TOP_LOGPROBS];
    float top_lp[RF_MAX_TOP_LOGPROBS];
    rf_finish_reason finish;
    const char *error;
};

struct rf_engine_config {
    int64_t v[RF_ENGINE_THREADS + 1];
};

struct rf_engine {
    rf_model *m;
    rf_fwd f;
    rf_kv_pool *pool;
    struct rf_state_pool *spool; /* recurrent-state slots (hybrid models; NULL otherwise) */
    int32_t *b_state;            /* [n_batch] the step's per-sequence slots (with spool) */
    int32_t n_ctx, n_parallel, n_batch, block_size, max_blocks; /* max_blocks: per sequence */
    rf_type kv_type;
    bool graphs;             /* decode steps as device graphs (RF_GPU_GRAPHS=0 turns them off) */
    bool trace;              /* RF_GPU_STEP_TRACE=1: print each step's transfers */
    int64_t tr_up, tr_down, tr_launch;
    /* queue shared with submitting threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rf_req *incoming;        /* submitted, not yet seen by the step (FIFO via tail) */
    rf_req **incoming_tail;
    rf_req *active;          /* requests with choices waiting or running (step thread) */
    uint64_t next_id, next_order;
    int64_t n_active_reqs;   /* incoming + active, for rf_engine_wait */
    bool wake;
    /* sequences (step thread) */
    rf_seq **running;        /* in arrival order */
    int32_t n_running, running_cap;
    rf_seq **waiting;        /* in arrival order */
    int32_t n_waiting, waiting_cap;
    /* step scratch */
    int32_t *b_ids, *b_pos, *b_seq, *b_slot, *b_out, *b_table;
    int32_t b_table_cap;
    float *logits;           /* [n_out, n_vocab] of the last step */
    size_t logits_cap;
    float *lp_work;          /* [n_vocab] log-softmax for logprobs */
    rf_sample_row *s_rows;   /* device sampling: a row per output, penalties, the ids */
    int32_t *s_ids, *pen_ids, *pen_counts, pen_cap;
    rf_seq **b_seqs;         /* [n_batch] the step's sequences, by batch sequence index */
    /* test hooks: replace the forward (scheduler tests) and see block copies */
    rf_status (*fwd_hook)(void *user, rf_engine *e, rf_batch *b, rf_seq *const *seqs, float *logits);
    void (*copy_hook)(void *user, int32_t dst, int32_t src);
    void (*logits_hook)(void *user, const rf_seq *s, const float *logits); /* before each sample */
    void *hook_user;
    /* counters (read under mu by rf_engine_get_stat) */
    int64_t st_prompt, st_hits, st_gen, st_preempt, st_steps, st_done;
    int64_t snap_running, snap_waiting, snap_used, snap_free, snap_cached;
};

/* Engine with explicit sizes (session layer and rf_engine_new). */
rf_status rf_engine_create(rf_model *m, int32_t n_ctx, int32_t n_parallel, int32_t n_batch,
                           int32_t n_blocks, int32_t block_size, rf_type kv_type, bool prefix_cache,
                           int32_t n_threads, rf_engine **out);

/* scheduler.c: one step over the running sequences and the waiting queue. With only non-NULL,
 * the step runs that sequence alone (the session's eval), whatever else is queued. */
rf_status rf_sched_step(rf_engine *e, rf_seq *only);
/* Frees a sequence's blocks (last first, so a prefix's tail is evicted before its head). */
void rf_seq_release_blocks(rf_engine *e, rf_seq *s);
/* Appends ids to a sequence's tokens. */
rf_status rf_seq_append(rf_seq *s, const int32_t *ids, int32_t n);
void rf_seq_free(rf_seq *s);

/* sampler.c, for sampling on a device: the generator's next draw in [0, 1) (what
 * rf_sampler_sample would use), the parameters, and the distinct ids of the penalty window with
 * their counts (0 when no penalty is on; returns how many, writing at most cap). */
float rf_sampler_draw(rf_sampler *s);
const rf_sampler_params *rf_sampler_get_params(const rf_sampler *s);
int32_t rf_sampler_penalties(rf_sampler *s, int32_t *ids, int32_t *counts, int32_t cap);

/* engine.c: events and retirement, called by the scheduler. on_output samples from host logits;
 * the device path asks pre_sample first (true: the sequence finished before sampling, e.g.
 * max_tokens) and then hands the device's id to on_token (logits NULL: no logprobs). */
rf_status rf_engine_on_output(rf_engine *e, rf_seq *s, const float *logits);
bool rf_engine_pre_sample(rf_engine *e, rf_seq *s);
void rf_engine_on_token(rf_engine *e, rf_seq *s, int32_t id, const float *logits);
void rf_engine_finish_seq(rf_engine *e, rf_seq *s, rf_finish_reason why, const char *error);
/* Moves submitted requests into the waiting queue and applies cancellations. */
void rf_engine_intake(rf_engine *e);
/* Frees a request whose choices are all done (only listed ones: a session owns its own). */
void rf_engine_release_req(rf_engine *e, rf_req *q);
/* Inserts a sequence into the waiting / running list in arrival order (false: out of memory). */
bool rf_engine_queue_waiting(rf_engine *e, rf_seq *s);
bool rf_engine_queue_running(rf_engine *e, rf_seq *s);
void rf_engine_snapshot(rf_engine *e);

/* Checks the engine's bookkeeping against the pool (tests): every running or waiting sequence's
 * blocks are distinct and cover what it computed, waiting ones hold none, and each block's
 * reference count equals the number of sequences holding it (rf_kv_pool_check). */
rf_status rf_engine_check(rf_engine *e);

/* Sequences of the session layer (session.c) that live outside requests. */
rf_seq *rf_seq_new(rf_engine *e);
rf_engine *rf_session_engine(rf_session *s);
rf_seq *rf_session_seq(rf_session *s);
double rf_now_ms(void);

#endif
