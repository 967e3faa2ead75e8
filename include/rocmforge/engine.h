/* rocmforge/engine.h — models, the batching engine, sessions and generation: load a GGUF model;
 * serve many requests at once through rf_engine (paged KV cache, continuous batching, prefix
 * cache); or open a session (one sequence: feed tokens, read logits, generate). Sessions and
 * rf_generate are a thin layer over the same engine. docs/engine.md describes the behaviour. */
#ifndef ROCMFORGE_ENGINE_H
#define ROCMFORGE_ENGINE_H

#include "rocmforge/core.h"
#include "rocmforge/gguf.h"
#include "rocmforge/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_model rf_model;
typedef struct rf_session rf_session;
typedef struct rf_sampler rf_sampler;

/* ---- models ---------------------------------------------------------------------------- */

typedef enum rf_device {
    RF_DEVICE_CPU = 0,
    RF_DEVICE_GPU = 1,
    RF_DEVICE_AUTO = 2 /* the GPU when one is present and the model fits, else the CPU (a note says why) */
} rf_device;

/* Called while a model loads with the fraction done in [0, 1]. */
typedef void (*rf_progress_fn)(float fraction, void *user);

typedef struct rf_model_params {
    rf_device device;        /* RF_DEVICE_CPU (default) */
    int32_t n_threads;       /* CPU worker threads; 0 = number of cores */
    rf_progress_fn progress; /* may be NULL */
    void *progress_user;
    int32_t device_index;    /* which GPU (--device gpu:N) */
    int32_t tp;              /* tensor-parallel shards (--tp N; 1 = unsplit; 0 = $RF_TP or 1). The CPU backend
                              * only for now: each layer's heads and FFN split over N shards
                              * with an in-process all-reduce (docs/tp.md) */
} rf_model_params;

/* Defaults: CPU, threads = cores, no progress callback, GPU 0. */
rf_model_params rf_model_default_params(void);

/* Loads a GGUF model: hyper-parameters from metadata (validated, errors name the key), weights
 * bound by name per architecture (a missing tensor or a wrong shape names the tensor), the
 * vocabulary. Unsupported architecture: RF_ERR_UNSUPPORTED listing rf_supported_archs().
 * Weights stay memory-mapped on the CPU. */
rf_status rf_model_load(const char *path, const rf_model_params *params, rf_model **out);
void rf_model_free(rf_model *m);

/* Deterministic (batch-invariant) decoding on the model's backend: a sequence's tokens and
 * logits are the same bits whether it runs alone or among any others, however its prompt is
 * chunked, at some cost in speed (docs/engine.md, "Deterministic mode"). The CPU backend always
 * is. On the GPU every product takes the int8 tensor-core kernel (q4_0, q8_0, q4_K, q5_K, q6_K
 * weights on sm_80 and newer; another weight type fails its first product with
 * RF_ERR_UNSUPPORTED naming it) and attention the paged kernel. RF_ERR_UNSUPPORTED with tp > 1. */
rf_status rf_model_set_deterministic(rf_model *m, bool on);

/* Comma-separated list of the architectures rf_model_load accepts ("llama, qwen2, gemma3"). */
const char *rf_supported_archs(void);

typedef struct rf_model_info {
    const char *arch;     /* general.architecture */
    const char *name;     /* general.name or "" */
    int32_t n_layer;
    int32_t n_embd;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_ff;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_swa;         /* sliding window of local layers, 0 = none */
    float rope_freq_base;
    bool tied_embeddings;  /* LM head reuses token_embd */
    uint64_t n_params;     /* elements over all weights */
    uint64_t weight_bytes; /* bytes of all weights */
    const char *ftype;     /* the type most weights have ("q4_K", "f16", ...) */
    const char *device;    /* "cpu" or the GPU's name */
} rf_model_info;

/* Fills *out; strings stay valid while the model lives. */
rf_status rf_model_get_info(const rf_model *m, rf_model_info *out);
const rf_vocab *rf_model_vocab(const rf_model *m);
const rf_gguf *rf_model_gguf(const rf_model *m);
/* The chat template parsed at load (the model's own, or its family's built-in one with a
 * warning logged); NULL when neither exists. Valid while the model lives. */
const rf_chat_template *rf_model_chat_template(const rf_model *m);

/* ---- sessions: KV cache and forward ---------------------------------------------------- */

typedef struct rf_session_params {
    int32_t n_ctx;    /* context length; 0 = the trained context capped to 4096 and to memory */
    int32_t n_batch;  /* tokens per forward chunk during prompt processing; 0 = 512 */
    rf_type kv_type;  /* RF_TYPE_F16 (default), RF_TYPE_F32 or RF_TYPE_Q8_0 */
    int32_t n_threads; /* 0 = the model's */
} rf_session_params;

rf_session_params rf_session_default_params(void);

/* Allocates the KV cache and scratch buffers. RF_ERR_OOM if they do not fit, RF_ERR_INVALID_ARG
 * for a bad kv_type / n_ctx (message names the value). */
rf_status rf_session_new(rf_model *m, const rf_session_params *params, rf_session **out);
void rf_session_free(rf_session *s);

int32_t rf_session_n_ctx(const rf_session *s);
/* Number of tokens held in the KV cache. */
int32_t rf_session_n_past(const rf_session *s);
/* The tokens held in the KV cache (rf_session_n_past of them). */
const int32_t *rf_session_tokens(const rf_session *s);
/* Forgets positions >= n (n <= n_past), so the next eval continues at position n. */
rf_status rf_session_truncate(rf_session *s, int32_t n);

/* Runs the forward over `n` tokens at positions n_past .. n_past+n-1 (in chunks of n_batch),
 * appending them to the KV cache. With all_logits, logits of every position are kept
 * (rf_session_logits(s, i), i in [0, n)); otherwise only of the last one (i = n-1).
 * RF_ERR_RANGE if n_past + n exceeds n_ctx (message gives both numbers), RF_ERR_RANGE for a
 * token id outside the vocabulary. On failure the cache holds the tokens before the call. */
rf_status rf_session_eval(rf_session *s, const int32_t *ids, int32_t n, bool all_logits);

/* Logits [n_vocab] of position i of the last eval (see rf_session_eval), NULL if not kept. */
const float *rf_session_logits(const rf_session *s, int32_t i);

/* ---- sampling -------------------------------------------------------------------------- */

typedef struct rf_sampler_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off; llama.cpp's rule: logit > 0 ? logit / r : logit * r */
    int32_t repeat_last_n;   /* how many recent tokens the penalties look at; -1 = all */
    float presence_penalty;  /* 0: off; subtracted once per token seen */
    float frequency_penalty; /* 0: off; subtracted per occurrence */
    uint64_t seed;           /* the draw's generator; same seed, same logits -> same token */
} rf_sampler_params;

/* Greedy defaults (temperature 0, top_k 40, top_p 0.95, min_p 0.05, no penalties,
 * repeat_last_n 64, seed 0). */
rf_sampler_params rf_sampler_default_params(void);

rf_status rf_sampler_new(const rf_sampler_params *p, int32_t n_vocab, rf_sampler **out);
void rf_sampler_free(rf_sampler *s);
/* Records a token as part of the history the penalties see (prompt and generated). */
void rf_sampler_accept(rf_sampler *s, int32_t id);
void rf_sampler_reset(rf_sampler *s); /* forgets the history (the generator continues) */
/* Applies penalties to a copy of the logits and draws with rf_ref_sample's rule (ref_ops.h).
 * Returns the token id, or -1 if every logit is NaN. */
int32_t rf_sampler_sample(rf_sampler *s, const float *logits);

/* ---- generation ------------------------------------------------------------------------ */

/* Receives each completed piece of text (UTF-8 complete). Return false to stop generating. */
typedef bool (*rf_piece_fn)(const char *piece, size_t len, void *user);

typedef enum rf_finish_reason {
    RF_FINISH_NONE = 0,
    RF_FINISH_EOS,      /* the model produced an end-of-generation token */
    RF_FINISH_LENGTH,   /* max_tokens reached */
    RF_FINISH_STOP,     /* a stop string appeared */
    RF_FINISH_CONTEXT,  /* the context is full */
    RF_FINISH_CANCELLED, /* the callback, *cancel or rf_engine_cancel asked to stop */
    RF_FINISH_ERROR      /* the engine failed this request (rf_event_error says why) */
} rf_finish_reason;

/* "stop", "length", "eos", "context", "cancelled", "error" or "none". */
const char *rf_finish_reason_str(rf_finish_reason r);

typedef struct rf_grammar rf_grammar; /* a compiled grammar (rf_request_set_grammar) */

typedef struct rf_gen_params {
    rf_sampler_params sampling;
    int32_t max_tokens;          /* < 0: until EOS or the context is full */
    const char *const *stop;     /* stop strings (not emitted); may be NULL */
    size_t n_stop;
    bool ignore_eos;
    bool render_special;         /* emit control tokens' text */
    volatile int *cancel;        /* checked between tokens when non-NULL: != 0 stops */
    rf_grammar *grammar;         /* NULL: free text; else the output follows it (not taken over) */
} rf_gen_params;

rf_gen_params rf_gen_default_params(void);

typedef struct rf_gen_stats {
    int32_t n_prompt;     /* tokens of the prompt evaluated (after reuse of the cached prefix) */
    int32_t n_reused;     /* prompt tokens found already in the cache */
    int32_t n_gen;        /* tokens generated (EOS included) */
    double prompt_ms;
    double gen_ms;
    rf_finish_reason finish;
    int32_t *tokens;      /* generated ids (malloc'd, caller frees) or NULL */
} rf_gen_stats;

/* Generates after `prompt` ids: reuses the longest prefix already in the session's cache,
 * evaluates the rest, then samples until EOS / max_tokens / stop string / full context /
 * cancel, streaming text through `cb` (may be NULL). The session keeps prompt + output.
 * RF_ERR_RANGE if the prompt does not fit the context (message gives both numbers). */
rf_status rf_generate(rf_session *s, const int32_t *prompt, int32_t n_prompt,
                      const rf_gen_params *p, rf_piece_fn cb, void *user, rf_gen_stats *stats);

/* ---- the batching engine --------------------------------------------------------------
 * Many sequences in one forward per step (docs/ARCHITECTURE.md §4.4). Requests are submitted from any
 * thread; one thread calls rf_engine_step (or rf_engine_run, or rf_engine_serve) over and over,
 * and each step runs every running sequence's next token together with chunks of waiting
 * prompts, within a token budget. Results come back as events through each request's callback,
 * on the stepping thread.
 * Everything here is opaque handles, enums and scalars, so other languages can bind it without
 * matching struct layouts. */

typedef struct rf_engine rf_engine;
typedef struct rf_engine_config rf_engine_config;
typedef struct rf_request rf_request;
typedef struct rf_event rf_event;

typedef enum rf_engine_opt {
    RF_ENGINE_CTX = 0,      /* positions per sequence; 0 (default) = trained length capped to 4096 */
    RF_ENGINE_PARALLEL,     /* sequences running at once (default 4); more wait, first come first served */
    RF_ENGINE_BATCH,        /* token budget of a step (0 = default: 512, twice PARALLEL past 256; raised to PARALLEL if smaller) */
    RF_ENGINE_KV_BLOCKS,    /* pool size in blocks; 0 (default) = blocks for CTX x PARALLEL positions */
    RF_ENGINE_BLOCK_SIZE,   /* positions per KV block (default 16, docs/engine.md says why) */
    RF_ENGINE_KV_TYPE,      /* an rf_type: RF_TYPE_F16 (default), RF_TYPE_F32 or RF_TYPE_Q8_0 */
    RF_ENGINE_PREFIX_CACHE, /* 1 (default): reuse the KV blocks of shared prompt prefixes; 0: off */
    RF_ENGINE_THREADS       /* CPU worker threads; 0 (default) = the model's */
} rf_engine_opt;

/* A configuration with the defaults above; NULL when out of memory. */
rf_engine_config *rf_engine_config_new(void);
void rf_engine_config_free(rf_engine_config *c);
/* RF_ERR_INVALID_ARG naming the option for an unknown option or a value out of range. */
rf_status rf_engine_config_set(rf_engine_config *c, rf_engine_opt opt, int64_t value);

/* Allocates the KV pool (every layer, all blocks) and the step's buffers up front; the memory
 * plan is logged. RF_ERR_INVALID_ARG when the pool cannot hold one sequence of CTX positions
 * (the message gives both sizes), RF_ERR_OOM naming the size that failed. c may be NULL. */
rf_status rf_engine_new(rf_model *m, const rf_engine_config *c, rf_engine **out);
/* Frees the engine; requests still queued or running are dropped without further events. */
void rf_engine_free(rf_engine *e);

typedef enum rf_req_opt {
    RF_REQ_MAX_TOKENS = 0,   /* tokens to generate; < 0 (default) = until EOS or the context is full */
    RF_REQ_TEMPERATURE,      /* the rf_sampler_params fields; defaults as rf_sampler_default_params */
    RF_REQ_TOP_K,
    RF_REQ_TOP_P,
    RF_REQ_MIN_P,
    RF_REQ_REPEAT_PENALTY,
    RF_REQ_REPEAT_LAST_N,
    RF_REQ_PRESENCE_PENALTY,
    RF_REQ_FREQUENCY_PENALTY,
    RF_REQ_SEED,             /* integer in [0, 2^53] (a double's exact integers; the full 64 bits
                              * through rf_request_set_sampling) */
    RF_REQ_IGNORE_EOS,       /* 0 / 1 */
    RF_REQ_RENDER_SPECIAL,   /* 0 / 1: emit control tokens' text */
    RF_REQ_N,                /* choices, 1..64 (default 1): the prompt is computed once and its KV
                              * blocks shared (copy-on-write); choice i samples with seed + i */
    RF_REQ_LOGPROBS,         /* -1 (default) none; 0: the chosen token's log-probability; k in 1..20:
                              * also the k most likely tokens (log-softmax of the raw logits) */
    RF_REQ_ADD_SPECIAL,      /* text prompts: 1 (default) adds BOS where the model wants one */
    RF_REQ_PARSE_SPECIAL,    /* text prompts: 1 (default) parses control-token texts in the prompt
                              * as those tokens; 0 tokenizes the prompt as plain text. Chat
                              * messages never: only the template's own markup gives them */
    RF_REQ_EMBED             /* 0 (default): generate; an rf_pooling (1..3): compute the prompt's
                              * embedding instead (no tokens generated, no KV kept after): the
                              * final-norm hidden rows pooled, L2-normalized, delivered by the
                              * DONE event (rf_event_embedding). One choice; sampling ignored */
} rf_req_opt;

/* How an embedding pools a prompt's final-norm hidden rows (the values of the GGUF key
 * <arch>.pooling_type): the mean over every position, the first position's row, or the last's. */
typedef enum rf_pooling {
    RF_POOLING_NONE = 0,
    RF_POOLING_MEAN = 1,
    RF_POOLING_CLS = 2,
    RF_POOLING_LAST = 3
} rf_pooling;

/* The model's pooling: <arch>.pooling_type when it says mean, cls or last; RF_POOLING_LAST when
 * the key is absent or says none (a causal decoder's last row is the only one that saw the whole
 * input); RF_POOLING_NONE for a kind it cannot pool (rank: a reranker's head). */
rf_pooling rf_model_pooling(const rf_model *m);
/* "mean", "cls", "last" or "none". */
const char *rf_pooling_str(rf_pooling p);

/* A request under construction (defaults: greedy, no limit, one choice); NULL when out of
 * memory. The engine copies what it needs at submit: the request may be freed or reused after. */
rf_request *rf_request_new(void);
void rf_request_free(rf_request *r);
/* RF_ERR_INVALID_ARG naming the option for an unknown option or a value out of range. */
rf_status rf_request_set(rf_request *r, rf_req_opt opt, double value);
/* All the sampling parameters at once, checked as rf_request_set checks each (an error names
 * the field); the seed takes all 64 bits. What the CLI and the server build once from their
 * flags or JSON and hand over by pointer. */
rf_status rf_request_set_sampling(rf_request *r, const rf_sampler_params *p);
/* The request's sampling parameters (rf_sampler_default_params until set); NULL for NULL. */
const rf_sampler_params *rf_request_sampling(const rf_request *r);
/* Stop strings: text that ends the choice when generated (not emitted). At most 16. */
rf_status rf_request_add_stop(rf_request *r, const char *text, size_t len);
/* The prompt, one of three forms (the last one set wins): token ids; text, tokenized at submit
 * (special tokens parsed unless RF_REQ_PARSE_SPECIAL is 0); or chat messages, rendered at
 * submit by the model's chat template with the assistant's turn opened, the messages' text
 * tokenized as plain text and only the template's markup as special tokens. */
rf_status rf_request_set_prompt_ids(rf_request *r, const int32_t *ids, size_t n);
rf_status rf_request_set_prompt_text(rf_request *r, const char *text, size_t len);
rf_status rf_request_add_message(rf_request *r, const char *role, const char *content);

typedef enum rf_event_kind {
    RF_EVENT_TOKEN = 1, /* a generated token (EOS excepted) and the text it completes */
    RF_EVENT_DONE = 2   /* a choice finished: the last text, the reason and the counts */
} rf_event_kind;

/* Receives the events of a request on the stepping thread. Return false to cancel the request
 * (its choices finish as cancelled at the next step). Must not call rf_engine_step. */
typedef bool (*rf_event_fn)(const rf_event *ev, void *user);
void rf_request_set_callback(rf_request *r, rf_event_fn fn, void *user);
/* Constrained decoding: every choice's output follows grammar g (src/engine/grammar.h; the
 * request takes a reference, NULL clears). Such a request is sampled on the host. */
void rf_request_set_grammar(rf_request *r, rf_grammar *g);

/* Queues a request; *id (may be NULL) identifies it in events and rf_engine_cancel. The prompt
 * is tokenized / rendered here. RF_ERR_INVALID_ARG for an empty prompt or a chat request to a
 * model without a template, RF_ERR_RANGE when the prompt has more tokens than a sequence's
 * context (the message gives both numbers) or an id is outside the vocabulary. Thread-safe. */
rf_status rf_engine_submit(rf_engine *e, const rf_request *r, uint64_t *id);
/* The prompt length in tokens that submit would compute for r (text tokenized, messages
 * rendered through the chat template), for checks such as prompt + max_tokens against the
 * context before submitting. Tokenizing stops once the count passes the context: then
 * RF_ERR_RANGE with *n = n_ctx + 1 ("more than n_ctx"). Other errors as submit's.
 * Thread-safe. */
rf_status rf_engine_prompt_tokens(rf_engine *e, const rf_request *r, int32_t *n);
/* Vocabulary size (logit_bias ids, token checks). */
int32_t rf_engine_n_vocab(const rf_engine *e);
/* Cancels a queued or running request: its choices finish with RF_FINISH_CANCELLED at the next
 * step and return their blocks. RF_ERR_NOT_FOUND if no such request is active. Thread-safe. */
rf_status rf_engine_cancel(rf_engine *e, uint64_t id);
/* One step: admit, schedule, run the forward, sample, deliver events, retire finished
 * sequences. RF_OK with nothing to do when idle. A failure of the step (a device fault, out of
 * memory) finishes the step's requests with RF_FINISH_ERROR and is returned; the engine stays
 * usable. */
rf_status rf_engine_step(rf_engine *e);
/* Steps until no request is queued or running. */
rf_status rf_engine_run(rf_engine *e);
/* Blocks until a request is queued or running, or timeout_ms passes (< 0: no limit); returns
 * whether there is work. For an engine thread's loop. Thread-safe. */
bool rf_engine_wait(rf_engine *e, int timeout_ms);
/* Wakes a thread blocked in rf_engine_wait (to shut it down). Thread-safe. */
void rf_engine_wake(rf_engine *e);
/* An engine thread's loop: steps while a request is queued or running, waits (rf_engine_wait,
 * 200 ms at a time) while none is, and does not spin on steps that ran nothing (only
 * cancellations), until rf_engine_stop_serving. A failed step (its requests already got an error
 * event) is handed to on_error (NULL: none) and the loop goes on. */
void rf_engine_serve(rf_engine *e, void (*on_error)(void *user, rf_status st), void *user);
/* Ends rf_engine_serve after the step it is in (its thread is woken). Thread-safe. */
void rf_engine_stop_serving(rf_engine *e);

typedef enum rf_engine_stat {
    RF_STAT_RUNNING = 0,      /* sequences running (prompt or generation) */
    RF_STAT_WAITING,          /* sequences queued, preempted ones included */
    RF_STAT_BLOCKS_TOTAL,
    RF_STAT_BLOCKS_USED,      /* referenced by a sequence */
    RF_STAT_BLOCKS_FREE,
    RF_STAT_BLOCKS_CACHED,    /* prefix-cache blocks nobody references (evictable) */
    RF_STAT_BLOCK_SIZE,
    RF_STAT_CTX,              /* positions per sequence */
    RF_STAT_PARALLEL,
    RF_STAT_BATCH,            /* token budget of a step */
    RF_STAT_PROMPT_TOKENS,    /* prompt tokens computed, over the engine's life */
    RF_STAT_PREFIX_HIT_TOKENS,/* prompt tokens served from the prefix cache instead */
    RF_STAT_GEN_TOKENS,       /* tokens sampled */
    RF_STAT_PREEMPTIONS,      /* sequences preempted because the pool ran out */
    RF_STAT_STEPS,            /* steps that ran a forward */
    RF_STAT_REQUESTS_DONE,    /* requests finished (every choice done) */
    /* hybrid models (gated DeltaNet layers; 0 otherwise): recurrent-state slots, one per
     * running sequence, and the prefix cache's state checkpoints (RF_STATE_CHECKPOINTS) */
    RF_STAT_STATE_SLOTS,
    RF_STAT_STATE_SLOTS_USED,
    RF_STAT_STATE_CKPT_TOTAL,
    RF_STAT_STATE_CKPT_USED,  /* checkpoints holding a state */
    RF_STAT_STATE_CKPT_HITS,  /* admissions resumed from a checkpoint, over the engine's life */
    RF_STAT_STATE_BYTES,      /* memory of the slots and checkpoints together */
    RF_STAT_KV_BYTES,         /* memory of the KV pool (every layer's K and V; a split over GPUs:
                               * every GPU's pool together) */
    RF_STAT_TP_SIZE           /* shards the model is split into (--tp; 1 = not split) */
} rf_engine_stat;

/* A counter or state; -1 for an unknown stat. Thread-safe. */
int64_t rf_engine_get_stat(rf_engine *e, rf_engine_stat s);

/* GPUs the engine's model runs on: N for a split over N GPUs, 1 for one GPU, 0 on the CPU (the
 * CPU split too). Thread-safe. */
int32_t rf_engine_n_devices(rf_engine *e);

typedef enum rf_engine_device_stat {
    RF_DEVSTAT_ORDINAL = 0, /* the GPU's ordinal (--device gpu:I --tp N: I .. I+N-1) */
    RF_DEVSTAT_MEM_TOTAL,   /* the device's memory, bytes */
    RF_DEVSTAT_MEM_FREE,    /* free on it now (the driver's count: every process's use), bytes */
    RF_DEVSTAT_KV_BYTES     /* its KV pool: K and V of its shard's KV heads, every attention layer,
                             * allocated when the engine is made (a split: one pool per GPU) */
} rf_engine_device_stat;

/* A stat of GPU i (0 <= i < rf_engine_n_devices: shard i's); -1 for i or s out of range, or
 * when the driver does not answer (rf_last_error says why). The memory is asked of the driver
 * now, from any thread while another steps the engine: the device is made current for the query
 * alone and the calling thread's current device is left as it was. */
int64_t rf_engine_get_device_stat(rf_engine *e, int32_t i, rf_engine_device_stat s);

/* Event accessors; pointers stay valid until the callback returns. */
rf_event_kind rf_event_get_kind(const rf_event *ev);
uint64_t rf_event_request(const rf_event *ev);
int32_t rf_event_choice(const rf_event *ev);
/* UTF-8-complete text released by this event (may be empty: held back while it could begin a
 * stop string, or an incomplete UTF-8 sequence). The texts of a choice's events, in order,
 * are its whole output. */
const char *rf_event_text(const rf_event *ev, size_t *len);
int32_t rf_event_token(const rf_event *ev);          /* TOKEN: the id; DONE: -1 */
float rf_event_logprob(const rf_event *ev);          /* TOKEN with RF_REQ_LOGPROBS >= 0; else NAN */
int32_t rf_event_n_top(const rf_event *ev);          /* entries of rf_event_top */
bool rf_event_top(const rf_event *ev, int32_t i, int32_t *id, float *logprob);
rf_finish_reason rf_event_finish(const rf_event *ev); /* DONE: why; TOKEN: RF_FINISH_NONE */
int32_t rf_event_n_prompt(const rf_event *ev);       /* prompt tokens */
int32_t rf_event_n_cached(const rf_event *ev);       /* of which found in the prefix cache */
int32_t rf_event_n_gen(const rf_event *ev);          /* tokens generated so far (EOS included) */
const char *rf_event_error(const rf_event *ev);      /* DONE with RF_FINISH_ERROR: why; else "" */
/* DONE of an embedding request (RF_REQ_EMBED) that finished (RF_FINISH_EOS): its vector, *n
 * floats (the model's n_embd), L2-normalized; NULL (and *n 0) otherwise. */
const float *rf_event_embedding(const rf_event *ev, int32_t *n);

#ifdef __cplusplus
}
#endif
#endif
