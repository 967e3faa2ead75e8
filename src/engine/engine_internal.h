/* engine_internal.h — the batching engine's inside, shared by its files (engine_create.c,
 * engine_request.c, engine_step.c, engine_events.c, engine_stats.c) and the
 * session layer (session.c, generate.c), which drives one persistent sequence through the same
 * step. The planner (scheduler.h) and sequences (sequence.h) sit below and never call back. */
#ifndef RF_ENGINE_INTERNAL_H
#define RF_ENGINE_INTERNAL_H

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "engine/scheduler.h"
#include "model/model.h"
#define RF_MAX_TOP_LOGPROBS 20
#define RF_MAX_CHOICES 64

/* A submitted request: parameters copied at submit, and its choices. */
struct rf_req {
    uint64_t id;
    int32_t *prompt, n_prompt;
    rf_sampler_params sp;
    int32_t max_tokens, n, logprobs;
    bool ignore_eos, render_special;
    int32_t pooling;         /* an embedding request's rf_pooling (pooling.c); 0: generation */
    rf_grammar *grammar;     /* constrained decoding (grammar.h), or NULL */
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
    int32_t pooling;         /* RF_REQ_EMBED */
    rf_grammar *grammar;
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
    const float *embd;       /* an embedding request's DONE: the vector [n_embd] */
    int32_t n_embd;
};

/* The engine's configuration, typed: what rf_engine_config_set checks and rf_engine_create reads
 * (the session layer fills one directly). */
struct rf_engine_config {
    int32_t n_ctx;       /* 0: the trained length capped to 4096 and memory */
    int32_t n_parallel, n_batch;
    int32_t n_blocks;    /* 0: n_ctx x n_parallel positions, capped to memory */
    int32_t block_size;
    rf_type kv_type;
    bool prefix_cache;
    int32_t n_threads;   /* 0: the model's */
};

struct rf_engine {
    rf_model *m;
    rf_fwd f;
    rf_kv_pool *pool;
    struct rf_state_pool *spool; /* recurrent-state slots (hybrid models; NULL otherwise) */
    int32_t *b_state;            /* [n_batch] the step's per-sequence slots (with spool) */
    int32_t n_ckpt;              /* prefix-cache state checkpoints (rows n_parallel.. of the slots) */
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
    bool serve_stop;         /* rf_engine_stop_serving was called */
    /* sequences (step thread) */
    rf_seq_list running;     /* in arrival order */
    rf_seq_list waiting;     /* in arrival order */
    rf_step_plan plan;       /* the last step's plan (arrays reused) */
    /* step scratch */
    int32_t *b_ids, *b_pos, *b_seq, *b_slot, *b_out, *b_table;
    int32_t b_table_cap;
    float *logits;           /* [n_out, n_vocab] of the last step */
    size_t logits_cap;
    float *lp_work;          /* [n_vocab] log-softmax for logprobs */
    rf_sample_row *s_rows;   /* device sampling: a row per output, penalties, the ids */
    int32_t *s_ids, *pen_ids, *pen_counts, pen_cap;
    /* a masked step's grammar rows, mask k for sample row s_mask_row[k] of sequence
     * s_mask_seq[k] (k < s_n_mask), written when the backend asks (mask_fill in engine_step.c) */
    rf_seq **s_mask_seq;     /* [n_batch] */
    int32_t *s_mask_row;     /* [n_batch] */
    int32_t s_n_mask;
    int32_t s_mask_words;    /* (n_vocab + 31) / 32 */
    bool *s_none;            /* [n_batch] per sample row: its grammar admitted no token */
    rf_seq **b_seqs;         /* [n_batch] the step's sequences, by batch sequence index */
    float *hid;              /* embedding requests' hidden rows of the step [rows, n_embd] (pooling.c) */
    size_t hid_cap;          /* floats held */
    int32_t hid_row;         /* the next row of hid outputs() hands out */
    /* test hooks: replace the forward (scheduler tests) and see block copies */
    rf_status (*fwd_hook)(void *user, rf_engine *e, rf_batch *b, rf_seq *const *seqs, float *logits);
    void (*copy_hook)(void *user, int32_t dst, int32_t src);
    void (*logits_hook)(void *user, const rf_seq *s, const float *logits); /* before each sample */
    void (*state_copy_hook)(void *user, int32_t dst, int32_t src); /* state rows (slots, checkpoints) */
    void *hook_user;
    /* counters (read under mu by rf_engine_get_stat) */
    int64_t st_prompt, st_hits, st_gen, st_preempt, st_steps, st_done, st_ckpt_hits;
    int64_t snap_slots_used, snap_ckpt_used;
    int64_t snap_running, snap_waiting, snap_used, snap_free, snap_cached;
};

/* rf_engine_config_new's defaults, and an engine from a configuration (rf_engine_new, sessions). */
rf_engine_config rf_engine_config_default(void);
rf_status rf_engine_create(rf_model *m, const rf_engine_config *c, rf_engine **out);

/* engine_step.c: one step over the running sequences and the waiting queue (rf_engine_step is
 * rf_engine_exec_step(e, NULL)). With only non-NULL, the step runs that sequence alone (the
 * session's eval), whatever else is queued. */
rf_status rf_engine_exec_step(rf_engine *e, rf_seq *only);

/* engine_step.c: the step's batch from a plan. rf_step_batch lays the plan's tokens out in the
 * engine's scratch (b_ids ...) and says which rows come out; rf_step_dev_sample says whether every
 * output is a plain generation step the backend samples itself; rf_step_graph_pad pads a decode
 * step to its graph bucket (0: runs eagerly); rf_step_sample_rows writes the device's sampling
 * records. */
typedef struct rf_step_batch {
    int32_t n_tok, n_out, max_blocks;
    int32_t bucket, gmode, n_rows, n_pen;
    int32_t max_pos; /* a graph step's position bound: its depth bucket's last position */
    bool dev_sample;
    bool masked;    /* a sampled sequence has a grammar: the device applies its mask (n_mask rows) */
    int32_t n_mask;
} rf_step_batch;
rf_status rf_step_build(rf_engine *e, const rf_step_plan *p, rf_step_batch *sb);
rf_status rf_step_graph_pad(rf_engine *e, const rf_step_plan *p, rf_step_batch *sb);
/* The graph bucket of a decode step of n tokens: the smallest of 1, 2, 3, 4, 6, 8, 12, ... (2^k
 * and 3 * 2^k) at least n, so the padding is under a third of the step; 0 when it passes cap. */
int32_t rf_step_graph_bucket(int32_t n, int32_t cap);
rf_status rf_step_sample_rows(rf_engine *e, const rf_step_plan *p, rf_step_batch *sb);
/* A masked step's recorded graph is kept apart from its bucket's unmasked one (its upload holds
 * every row's mask): graph key bucket + RF_STEP_MASKED_KEY. */
#define RF_STEP_MASKED_KEY (1 << 24)
/* A graph step's depth bucket: its position bound is the last position of the backend's depth
 * bucket of its deepest row (rf_depth_bucket_keys, backend.h; at most n_ctx), so a step of short
 * rows never runs kernels sized for n_ctx (the decode attention's split count, its choice of
 * kernel); key + log2(bucket / RF_DEPTH_BUCKET_MIN) * RF_STEP_DEPTH_KEY. */
#define RF_STEP_DEPTH_KEY (1 << 25)
/* The depth bucket of a step whose deepest row is at position max_p: the keys its bound allows
 * (rf_depth_bucket_keys(max_p); n_ctx where that is fewer) and its index. */
int32_t rf_step_depth_bucket(int32_t max_p, int32_t n_ctx, int32_t *index);

/* sampler.c, for sampling on a device: the generator's next draw in [0, 1) (what
 * rf_sampler_sample would use), the parameters, and the distinct ids of the penalty window with
 * their counts (0 when no penalty is on; returns how many, writing at most cap). */
float rf_sampler_draw(rf_sampler *s);
const rf_sampler_params *rf_sampler_get_params(const rf_sampler *s);
int32_t rf_sampler_penalties(rf_sampler *s, int32_t *ids, int32_t *counts, int32_t cap);

/* engine_step.c: a sequence's output turned into its token's event. on_output samples from host
 * logits; the device path asks pre_sample first (true: the sequence finished before sampling,
 * e.g. max_tokens) and then hands the device's id to on_token (logits NULL: no logprobs). */
rf_status rf_engine_on_output(rf_engine *e, rf_seq *s, const float *logits);
bool rf_engine_pre_sample(rf_engine *e, rf_seq *s);
void rf_engine_on_token(rf_engine *e, rf_seq *s, int32_t id, const float *logits);
/* engine_events.c: a sequence finished (why; error for RF_FINISH_ERROR), with its DONE event. */
void rf_engine_finish_seq(rf_engine *e, rf_seq *s, rf_finish_reason why, const char *error);
/* The DONE event of choice `choice` of q (text empty); a TOKEN event starts from it. Here, beside
 * rf_engine_emit, so that whoever follows a token sees its event made and handed on. */
static inline rf_event rf_engine_done_event(const rf_req *q, int32_t choice, int32_t n_prompt, int32_t n_cached,
                                            int32_t n_gen, rf_finish_reason why, const char *error) {
    rf_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = RF_EVENT_DONE;
    ev.req = q->id;
    ev.choice = choice;
    ev.token = -1;
    ev.n_prompt = n_prompt;
    ev.n_cached = n_cached;
    ev.n_gen = n_gen;
    ev.text = "";
    ev.logprob = NAN;
    ev.finish = why;
    ev.error = error ? error : "";
    return ev;
}
/* An event handed to q's callback (false: the callback asked to stop; the request is then
 * cancelled). */
static inline bool rf_engine_emit(rf_req *q, rf_event *ev) {
    if (!q->cb) return true;
    bool go = q->cb(ev, q->user);
    if (!go) q->cancel = 1;
    return go;
}
/* Sets a sequence up to generate for request q as choice `choice`. */
rf_status rf_engine_seq_setup_gen(rf_engine *e, rf_seq *s, rf_req *q, int32_t choice);

/* pooling.c: embedding requests in the step. rf_step_embed_rows appends the rows the step's
 * embedding sequences need to the batch's outputs, after the logit rows (the forward hands them
 * back as final-norm hidden rows, f->n_hidden); a step with any samples on the host.
 * rf_embed_take folds a sequence's rows of the step just run (the positions [n_computed - n,
 * n_computed)) into its pooling and, once its prompt is done, finishes it with its vector. */
rf_status rf_step_embed_rows(rf_engine *e, const rf_step_plan *p, rf_step_batch *sb);
void rf_embed_take(rf_engine *e, rf_seq *s, int32_t n);
/* Makes a queued sequence of an embedding request pool instead of generating. */
rf_status rf_embed_seq_setup(rf_engine *e, rf_seq *s);

/* engine_request.c: moves submitted requests into the waiting queue; frees a request whose
 * choices are all done (only listed ones: a session owns its own). */
void rf_engine_intake(rf_engine *e);
void rf_engine_release_req(rf_engine *e, rf_req *q);
void rf_engine_req_free(rf_req *r);
/* Inserts a sequence into the waiting / running list in arrival order (false: out of memory). */
static inline bool rf_engine_queue_waiting(rf_engine *e, rf_seq *s) {
    s->state = RF_SEQ_WAITING;
    return rf_seq_list_insert(&e->waiting, s);
}
static inline bool rf_engine_queue_running(rf_engine *e, rf_seq *s) {
    s->state = RF_SEQ_RUNNING;
    return rf_seq_list_insert(&e->running, s);
}

/* engine_state.c: the recurrent-state slots' hooks (rf_seq.state_ref holds slot + 1; 0: none).
 * At engine creation: slots for n_parallel sequences when the model has recurrent layers
 * (nothing otherwise); the forward's slot memory is allocated here too. (A sequence takes its
 * slot in the step planner, rf_seq_take_state, and gives it back with its KV blocks,
 * rf_seq_release_blocks: sequence.c.) */
rf_status rf_engine_state_init(rf_engine *e);
void rf_engine_state_free(rf_engine *e);
/* A choice forked off parent after its prompt: a slot with a copy of the parent's state; when
 * none is free the child recomputes from the start (its blocks given back, like a preemption). */
void rf_seq_state_fork(rf_engine *e, rf_seq *parent, rf_seq *child);
/* The plan's checkpoint restores (each checkpoint's state into the sequence's slot, before the
 * forward; the plan's references dropped even on error), counted as checkpoint hits. */
rf_status rf_engine_state_restore(rf_engine *e, const rf_step_plan *p);
/* After a step that computed n tokens of s: a checkpoint of its state when it ends on a block
 * boundary of a prompt chunk or inside the prompt (none when one exists already, or when every
 * checkpoint is being restored). */
rf_status rf_engine_state_save(rf_engine *e, const rf_seq *s, int32_t n);
/* rf_engine_check's part: the slots held by the engine's sequences against the pool. */
rf_status rf_engine_state_check(rf_engine *e);

/* engine_stats.c: the counters' snapshot taken after each step (read by rf_engine_get_stat). */
void rf_engine_snapshot(rf_engine *e);

/* Checks the engine's bookkeeping against the pool (tests): every running or waiting sequence's
 * blocks are distinct and cover what it computed, waiting ones hold none, and each block's
 * reference count equals the number of sequences holding it (rf_kv_pool_check). */
rf_status rf_engine_check(rf_engine *e);

/* Sequences of the session layer (session.c) that live outside requests. */
rf_engine *rf_session_engine(rf_session *s);
rf_seq *rf_session_seq(rf_session *s);
double rf_now_ms(void);

#endif
