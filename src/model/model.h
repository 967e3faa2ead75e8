/* model.h — the loaded model inside the library: hyper-parameters, the per-architecture
 * variations of the one forward, the bound weights, and the forward's buffers. */
#ifndef RF_MODEL_H
#define RF_MODEL_H

#include "backend/backend.h"
#include "backend/ref/ref_ops.h"
#include "rocmforge/engine.h"

typedef enum rf_arch {
    RF_ARCH_LLAMA = 0,
    RF_ARCH_QWEN2,
    RF_ARCH_GEMMA3,
    RF_ARCH_COUNT
} rf_arch;

#define RF_MAX_LAYERS 512
#define RF_MAX_HEAD_DIM 2048

typedef struct rf_hparams {
    rf_arch arch;
    char arch_name[32];
    int32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train, n_rot;
    float norm_eps;
    int rope_mode;             /* RF_ROPE_NORMAL (llama) or RF_ROPE_NEOX (qwen2, gemma3) */
    float rope_base, rope_scale;         /* global layers: freq_base, 1/scaling.factor */
    float rope_base_swa, rope_scale_swa; /* sliding-window layers (gemma3) */
    int32_t n_swa;             /* window of local layers; 0 = all layers global */
    int32_t swa_pattern;       /* layer il is local when il % pattern < pattern - 1 */
    float attn_scale;          /* multiplies q.k */
    float final_softcap;       /* > 0: logits = cap * tanh(logits / cap) */
    float embed_scale;         /* token embeddings are multiplied by this (gemma: sqrt(n_embd)) */
    rf_glu_kind glu;
} rf_hparams;

typedef struct rf_layer {
    rf_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm, attn_post_norm;
    rf_tensor ffn_norm, ffn_gate, ffn_up, ffn_down, ffn_post_norm;
    bool is_swa;
    float rope_base, rope_scale;
} rf_layer;

struct rf_model {
    char *path;
    rf_gguf *g;
    rf_vocab *vocab;
    rf_chat_template *chat; /* parsed at load; NULL when no family is recognised */
    rf_backend *be;
    rf_hparams hp;
    rf_tensor tok_embd, output_norm, output, rope_freqs;
    bool tied;
    rf_layer *layers;
    uint64_t n_params, weight_bytes;
    char name[128];
    const char *ftype;
};

/* True when a tensor slot was bound (optional tensors stay zeroed). */
static inline bool rf_has(const rf_tensor *t) { return t->data != NULL; }

/* The forward's per-session state: KV cache per layer and activation buffers sized for
 * n_batch tokens. */
typedef struct rf_fwd {
    int32_t n_ctx, n_batch;
    rf_type kv_type;
    rf_tensor *kc, *vc;                  /* [n_layer] caches [n_ctx, n_head_kv*head_dim] */
    rf_tensor x, h, q, k, v, att, o, g, u; /* activations [n_batch, ...] */
    rf_tensor logits;                    /* [RF_LOGIT_ROWS, n_vocab] */
} rf_fwd;

#define RF_LOGIT_ROWS 32

rf_status rf_fwd_init(rf_model *m, rf_fwd *f, int32_t n_ctx, int32_t n_batch, rf_type kv_type);
void rf_fwd_free(rf_model *m, rf_fwd *f);

/* Runs n (<= n_batch) tokens at positions pos0.. through the model, writing their K/V into the
 * cache. Logits of positions [out0, n) go to host memory logits_out [(n - out0), n_vocab]
 * (out0 = n - 1 for the last position only). */
rf_status rf_forward(rf_model *m, rf_fwd *f, const int32_t *ids, int32_t n, int32_t pos0,
                     int32_t out0, float *logits_out);

/* Library-internal session accessors (session.c) for the generation loop. */
const rf_vocab *rf_session_vocab(const rf_session *s);
int32_t rf_session_n_vocab(const rf_session *s);

#endif
