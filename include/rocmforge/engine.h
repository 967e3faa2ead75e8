/* rocmforge/engine.h — models, sessions and generation: load a GGUF model, open a session (KV
 * cache + scratch), feed tokens, sample, and stream text pieces through a callback.
 * Owned by the CPU-engine work; docs/engine.md describes the behaviour for users. */
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
    RF_DEVICE_GPU = 1
} rf_device;

/* Called while a model loads with the fraction done in [0, 1]. */
typedef void (*rf_progress_fn)(float fraction, void *user);

typedef struct rf_model_params {
    rf_device device;        /* RF_DEVICE_CPU (default) */
    int32_t n_threads;       /* CPU worker threads; 0 = number of cores */
    rf_progress_fn progress; /* may be NULL */
    void *progress_user;
} rf_model_params;

/* Defaults: CPU, threads = cores, no progress callback. */
rf_model_params rf_model_default_params(void);

/* Loads a GGUF model: hyper-parameters from metadata (validated, errors name the key), weights
 * bound by name per architecture (a missing tensor or a wrong shape names the tensor), the
 * vocabulary. Unsupported architecture: RF_ERR_UNSUPPORTED listing rf_supported_archs().
 * Weights stay memory-mapped on the CPU. */
rf_status rf_model_load(const char *path, const rf_model_params *params, rf_model **out);
void rf_model_free(rf_model *m);

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
    RF_FINISH_CANCELLED /* the callback or *cancel asked to stop */
} rf_finish_reason;

typedef struct rf_gen_params {
    rf_sampler_params sampling;
    int32_t max_tokens;          /* < 0: until EOS or the context is full */
    const char *const *stop;     /* stop strings (not emitted); may be NULL */
    size_t n_stop;
    bool ignore_eos;
    bool render_special;         /* emit control tokens' text */
    volatile int *cancel;        /* checked between tokens when non-NULL: != 0 stops */
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

#ifdef __cplusplus
}
#endif
#endif
