/* model.h — the loaded model inside the library: hyper-parameters, the per-architecture
 * variations of the one forward, the bound weights, and the forward's buffers. */
#ifndef RF_MODEL_H
#define RF_MODEL_H

#include "backend/backend.h"
#include "backend/ref/ref_ops.h"
#include "rocmforge/engine.h"

/* What one layer is made of (docs/ARCHITECTURE.md §4.9): a mixer and a feed-forward block, each chosen per
 * layer by the architecture's table (model_arch.c). The forward switches on these. */
typedef enum rf_mixer_kind {
    RF_MIXER_ATTENTION = 0, /* causal grouped-query attention with its variants as data below */
    RF_MIXER_DELTANET       /* gated DeltaNet (qwen35): conv1d + gated delta rule over a state slot
                             * per sequence (forward_deltanet.c) */
} rf_mixer_kind;

typedef enum rf_ffn_kind {
    RF_FFN_DENSE_GLU = 0, /* down(act(gate x) * up x) */
    RF_FFN_MOE            /* mixture of experts: router -> top-k -> each chosen expert's GLU -> weighted
                           * sum (ffn_moe in forward.c; docs/ARCHITECTURE.md §4.9) */
} rf_ffn_kind;

/* Architecture flags: the attention and layer variants a table entry turns on. */
enum {
    RF_AF_QKV_BIAS = 1u << 0,     /* attn_{q,k,v}.bias required (qwen2) */
    RF_AF_QK_NORM = 1u << 1,      /* per-head RMSNorm of Q and K before RoPE (gemma3, qwen3) */
    RF_AF_POST_NORMS = 1u << 2,   /* post_attention_norm / post_ffw_norm (gemma3) */
    RF_AF_FUSED_QKV = 1u << 3,    /* Q, K, V may come as one attn_qkv.weight (phi3) */
    RF_AF_FUSED_GATE_UP = 1u << 4,/* ffn_up.weight holds [gate; up] and there is no ffn_gate (phi3) */
    RF_AF_FULL_ROT = 1u << 5,     /* rope.dimension_count must be the whole head */
    RF_AF_EMBED_SCALE = 1u << 6,  /* embeddings times sqrt(n_embd) (gemma) */
    RF_AF_SINKS = 1u << 8,        /* attn_sinks.weight f32 [n_head] required: softmax sinks (gpt-oss) */
    RF_AF_FFN_NORM_POST_ATTN = 1u << 9, /* the feed-forward's norm is post_attention_norm.weight (gpt-oss) */
    RF_AF_MOE = 1u << 7,          /* every layer's feed-forward is a mixture of experts (qwen3moe):
                                   * expert_count / expert_used_count / expert_feed_forward_length */
    RF_AF_DN_GROUPED = 1u << 11,  /* qwen3next: the DeltaNet's value heads are grouped by key head
                                   * (value head h reads key head h / (value heads / key heads))
                                   * and beta/alpha come joined per key head in ssm_ba:
                                   * regrouped at load (model_weights.c) */
    RF_AF_DELTANET = 1u << 10,    /* hybrid (qwen35): gated DeltaNet layers, and every
                                   * full_attention_interval-th layer gated attention (its Q
                                   * product holds a per-head output gate); the pre-FFN norm is
                                   * named post_attention_norm */
    RF_AF_GEMMA4 = 1u << 12,      /* gemma4: per-layer head sizes and KV heads, shared-KV layers,
                                   * per-layer token embeddings, V RMS-normed, layer output scale
                                   * (forward_gemma4.c) */
};

/* One architecture: its name in general.architecture, the variants it uses, and the hook that
 * reads its own metadata keys (NULL: only the common ones). model_arch.c holds the table. */
typedef struct rf_arch_desc {
    const char *name;
    int rope_mode;          /* RF_ROPE_NORMAL or RF_ROPE_NEOX */
    rf_glu_kind glu;
    unsigned flags;         /* RF_AF_* */
    int32_t nope_every;     /* > 0: layer il has no RoPE when (il + 1) % nope_every == 0 (smollm3) */
    rf_status (*hparams)(struct rf_model *m);
} rf_arch_desc;

/* YaRN RoPE scaling as the rope op's frequency factors and gain (model_yarn.c): ggml's
 * correction dims [lo, hi] for n_dims rotated dims; ff[n_rot / 2] such that the op with
 * freq_scale 1 and these factors turns each pair by YaRN's angle; the gain on cos and sin that
 * llama.cpp and ggml apply together (attn_factor: rope.scaling.attn_factor, 1 by default). */
void rf_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]);
void rf_yarn_freq_factors(int n_rot, int n_ctx_orig, float freq_base, float freq_scale, float ext_factor,
                          float beta_fast, float beta_slow, float *ff);
float rf_yarn_attn_factor(float freq_scale, float ext_factor, float attn_factor);

/* The table entry for general.architecture = name, or NULL; the table by index (tests). */
const rf_arch_desc *rf_arch_find(const char *name);
int rf_arch_count(void);
const rf_arch_desc *rf_arch_at(int i);

#define RF_MAX_LAYERS 512
#define RF_MAX_HEAD_DIM 2048
#define RF_MAX_EXPERTS 512 /* llama.cpp's LLAMA_MAX_EXPERTS */

typedef struct rf_hparams {
    const rf_arch_desc *arch;
    char arch_name[32];
    int32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train, n_rot;
    int32_t n_ctx_orig;        /* rope.scaling.original_context_length (default n_ctx_train) */
    float norm_eps;
    int rope_mode;             /* RF_ROPE_NORMAL (llama) or RF_ROPE_NEOX (qwen2, gemma3) */
    float rope_base, rope_scale;         /* global layers: freq_base, 1/scaling.factor */
    float rope_attn_factor;    /* gain on the rotated dimensions (phi3 longrope); 1 = none */
    float rope_base_swa, rope_scale_swa; /* sliding-window layers (gemma3) */
    bool yarn;                 /* rope.scaling.type = yarn: rope_freqs holds its factors (model_yarn.c) */
    float yarn_ext_factor, yarn_beta_fast, yarn_beta_slow;
    int32_t n_swa;             /* window of local layers; 0 = all layers global */
    int32_t swa_pattern;       /* layer il is local when il % pattern < pattern - 1 */
    float attn_scale;          /* multiplies q.k */
    float final_softcap;       /* > 0: logits = cap * tanh(logits / cap) */
    float embed_scale;         /* token embeddings are multiplied by this (gemma: sqrt(n_embd)) */
    rf_glu_kind glu;
    /* mixture of experts (RF_AF_MOE; 0 experts otherwise): n_expert experts of n_ff_exp, the
     * n_expert_used (k) chosen per token by moe_gating, their weights renormalised over the k
     * when moe_norm_w, then times moe_w_scale; a shared expert of n_ff_shexp where the file has
     * one */
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    rf_moe_gating moe_gating;
    bool moe_norm_w;
    float moe_w_scale;
    /* gated DeltaNet layers (RF_AF_DELTANET): conv kernel, key heads (groups) and value heads of
     * ssm_d_state each (inner size = value heads * d_state), every full_attn_every-th layer
     * attention */
    int32_t ssm_d_conv, ssm_d_state, ssm_n_group, ssm_dt_rank, ssm_d_inner, full_attn_every;
    /* RF_AF_DN_GROUPED: the file's key heads (ssm.group_count); the weights' Q/K heads are then
     * repeated at load to one per value head, so ssm_n_group = ssm_dt_rank once loaded */
    int32_t ssm_n_group_file;
    /* gemma4 (RF_AF_GEMMA4): sliding-window layers' head size and rotated dims (head_dim and
     * n_rot are the largest head and the full-attention layers' rotated dims), the width of the per-layer token embeddings (0:
     * none), the count of trailing layers that read an earlier layer's KV */
    int32_t head_dim_full, head_dim_swa, n_rot_swa, n_embd_ple, n_kv_shared;
} rf_hparams;

typedef struct rf_layer {
    rf_mixer_kind mixer;
    rf_ffn_kind ffn;
    rf_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm, attn_post_norm;
    rf_tensor ffn_norm, ffn_gate, ffn_up, ffn_down, ffn_post_norm;
    /* joined products: [wq; wk; wv] (or [wq; wk], wqkv_qk) and [ffn_gate; ffn_up], stored so in
     * the file (phi3) or joined by the backend (weight_join); the parts are then views into these */
    rf_tensor wqkv, ffn_gu;
    bool wqkv_qk;              /* wqkv joins [wq; wk] alone: wv's type differs (a K-quant mix), V its own product */
    rf_tensor attn_sinks;      /* f32 [n_head]: per-head softmax sink logits (gpt-oss), or unbound */
    /* mixture of experts (ffn == RF_FFN_MOE): the router [n_embd -> n_expert] (+ its bias, gpt-oss;
     * + exp_probs_b, a selection-only bias), the experts as one weight of n_expert * n_ff_exp rows
     * (gate, up) or n_expert * n_embd rows (down) (backend.h), their biases f32 [n_expert, rows]
     * (gpt-oss), and the optional shared expert with its sigmoid gate (qwen2moe style) */
    rf_tensor ffn_gate_inp, ffn_gate_inp_b, exp_probs_b;
    rf_tensor ffn_gate_exps, ffn_up_exps, ffn_down_exps, ffn_gate_exps_b, ffn_up_exps_b, ffn_down_exps_b;
    rf_tensor ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp, ffn_gate_inp_shexp;
    /* gated DeltaNet (RF_MIXER_DELTANET; wqkv is then its joined q/k/v product): the output
     * gate z product, the conv taps (f32 [C rows of K]), dt bias and A (f32 [value heads]), the
     * beta and alpha products, the per-head output norm, the output product */
    rf_tensor ssm_gate, ssm_conv1d, ssm_dt, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out;
    bool attn_gate;            /* qwen35 attention: wq holds [q_h; gate_h] per head; out *= sigmoid(gate) */
    bool is_swa;
    bool rope;                 /* RoPE on Q and K (false: a NoPE layer, smollm3) */
    float rope_base, rope_scale;
    /* gemma4 (head_dim 0 elsewhere: the model's head_dim, n_head_kv, n_rot, own KV): this
     * layer's head size, KV heads, rotated dims; kv_layer: the layer whose paged cache it
     * reads (il itself, or an earlier one for a shared-KV layer, which keeps no KV); out_scale
     * multiplies the layer's output (1: none); the per-layer embedding block's gate, projection
     * and norm */
    int32_t head_dim, n_head_kv, n_rot, kv_layer;
    float out_scale;
    rf_tensor ple_gate, ple_proj, ple_norm;
    /* gemma4 MoE layers (ffn == RF_FFN_MOE there): the router input's gain (f32 [n_embd]), the
     * experts' pre-norm, and the post-norms of the dense branch and of the experts' sum */
    rf_tensor ffn_gate_inp_s, ffn_pre_norm_2, ffn_post_norm_1, ffn_post_norm_2;
} rf_layer;

struct rf_model {
    char *path;
    rf_gguf *g;
    rf_vocab *vocab;
    rf_chat_template *chat; /* parsed at load; NULL when no family is recognised */
    rf_backend *be;
    rf_hparams hp;
    rf_tensor tok_embd, output_norm, output, rope_freqs;
    rf_tensor ple_embd, ple_model_proj, ple_proj_norm; /* gemma4's per-layer token embeddings */
    rf_tensor rope_long; /* phi3 longrope factors past the original context (bound, unused yet) */
    float *yarn_ff;      /* host copy of YaRN's factors behind rope_freqs (the CPU borrows it) */
    bool tied;
    rf_layer *layers;
    uint64_t n_params, weight_bytes;
    void **host_w;    /* weights rebuilt on the host at load (qwen3next's regrouped rows) that a
                       * backend borrows (the CPU); freed with the weights */
    int32_t n_host_w;
    rf_progress_fn progress;        /* weight upload progress (device backends) */
    void *progress_user;
    uint64_t load_total, load_done;
    float load_last;
    char name[128];
    const char *ftype;
    /* tensor parallelism (model_tp.c, docs/tp.md): tp shards (1 = unsplit); with tp > 1 shard
     * s of layer il is shards[s * n_layer + il], views into layers[il]'s weights holding
     * tp_head query heads and tp_head_kv KV heads (replicated when n_head_kv < tp) */
    int32_t tp, tp_head, tp_head_kv;
    rf_layer *shards;
    /* the split over several GPUs (model_tp_gpu.c): tp_be[s] is shard s's GPU backend (tp_be[0]
     * == be), tp_comm the NCCL
     * communicator over them, tp_rope[s] rope_freqs on GPU s. NULL when one backend runs every
     * shard (the CPU, or the tp_one_device test hook). The layers' own tensors are then host views into
     * the mapped file, never uploaded whole: each GPU uploads its shard's slices. */
    rf_backend **tp_be;
    struct rf_tp_comm *tp_comm;
    rf_tensor *tp_rope;
    /* the vocabulary split (with tp_be): GPU s holds rows rf_tp_vocab_rows(s) of the embedding
     * (tp_embd[s]) and of the LM head (tp_lmhead[s]; tied: the same slice); tok_embd and output are
     * then host views, uploaded nowhere whole. tp_gather copies the LM head's logit slices into
     * GPU 0's logits (NULL on CPU ranks: host copies). */
    rf_tensor *tp_embd, *tp_lmhead, *tp_onorm; /* tp_onorm[s]: the final norm on GPU s (0: output_norm) */
    struct rf_tp_gather *tp_gather;
    /* mixture of experts split on the CPU: host copies of each shard's expert rows (every
     * expert's slice gathered: not a view), freed by rf_model_unshard */
    void **tp_bufs;
    int32_t n_tp_bufs;
};

/* True when a tensor slot was bound (optional tensors stay zeroed). */
static inline bool rf_has(const rf_tensor *t) { return t->data != NULL; }

/* The forward's state: the paged KV pool per layer and activation buffers sized for n_batch
 * tokens per step. Which blocks hold what is the engine's business (engine/kv_pool.h). */
typedef struct rf_fwd {
    int32_t n_batch;                     /* tokens per step at most */
    int32_t n_blocks, block_size;        /* KV pool: n_blocks * block_size rows per layer */
    rf_type kv_type;
    rf_tensor *kc, *vc;                  /* [tp * n_layer] pools [n_blocks*block_size, heads*head_dim]:
                                          * shard s's layer il at s * n_layer + il, its KV heads */
    rf_tensor x, h, q, k, v, att, o, g, u; /* activations [n_batch, ...] */
    rf_tensor qkv;                       /* [n_batch, Q + 2 KV] for joined Q/K/V (else unused);
                                          * u is [n_batch, 2 n_ff] where gate/up are joined */
    rf_tensor logits;                    /* [logit_rows, n_vocab] */
    rf_tensor vlogits;                   /* several GPUs: [logit_rows, this GPU's vocabulary rows], its
                                          * LM head slice's logits before they are gathered into GPU
                                          * 0's logits */
    /* mixture of experts (unallocated without one): router logits [n_batch, n_expert], the
     * chosen ids (i32) and weights [n_batch, k], each slot's gate / up / down outputs
     * [n_batch * k, n_ff_exp or n_embd] */
    rf_tensor moe_logits, moe_ids, moe_wts, moe_g, moe_u, moe_d;
    int32_t logit_rows;                  /* >= RF_LOGIT_ROWS: a step's outputs kept on the backend */
    rf_tensor *part;                     /* tp > 1 on one backend: [tp - 1] partial O / down outputs
                                          * [n_batch, n_embd] of shards 1.. (shard 0 writes o), summed by
                                          * the all-reduce */
    struct rf_fwd_rec *rec;              /* gated DeltaNet layers' buffers and state slots (NULL for
                                          * models without; forward_deltanet.c) */
    /* embeddings (set per step by the engine; 0 otherwise): the last n_hidden of the step's
     * outputs are read to hidden_out [n_hidden, n_embd] after the final norm, and get no logits */
    int32_t n_hidden;
    float *hidden_out;
    rf_tensor ple, ple_g;                /* gemma4: the per-layer inputs [n_batch, n_layer * P] (layer
                                          * il's columns il * P ..) and their scratch, same shape */
    struct rf_fwd *dev;                  /* several GPUs: [tp - 1] GPU 1..'s own buffers x .. qkv (this
                                          * struct's are GPU 0's), each sized for one shard's heads */
} rf_fwd;

#define RF_LOGIT_ROWS 32

/* ---- gated DeltaNet layers (forward_deltanet.c) ---- */
/* The recurrent layers' step buffers and the per-sequence state slots (DESIGN: a sequence's
 * cache is its KV pages plus, for recurrent layers, a fixed-size slot): for each DeltaNet layer
 * a conv-window tensor (rows n_slots of (K-1)*C f32) and a delta-rule state tensor (rows n_slots
 * of value heads * d_state^2 f32). Slot i of every layer belongs to one sequence. */
typedef struct rf_fwd_rec {
    int32_t n_slots;
    rf_tensor *conv, *ssm;            /* [n_layer] (attention layers' stay empty) */
    rf_tensor mix, cv, z, a, b, core; /* [n_batch, ...] DeltaNet activations */
    rf_tensor qg, gate;               /* [n_batch, ...] gated attention: Q and gate, the gate */
} rf_fwd_rec;
/* Number of gated DeltaNet layers (0: the model needs no state slots). */
int32_t rf_model_n_recurrent(const rf_model *m);
/* Bytes of one state slot over all layers (the memory plan). */
uint64_t rf_state_slot_bytes(const rf_model *m);
/* What rf_fwd_rec_init allocates for n_slots slots and steps of n_batch tokens (0 without
 * recurrent layers): the device memory plan counts it beside the KV pool. */
uint64_t rf_fwd_rec_bytes(const rf_model *m, int32_t n_batch, int32_t n_slots);
/* Allocates f->rec for n_slots sequences (nothing for a model without recurrent layers);
 * rf_fwd_free releases it. */
rf_status rf_fwd_rec_init(rf_model *m, rf_fwd *f, int32_t n_slots);
void rf_fwd_rec_free(rf_model *m, rf_fwd *f);
/* Copies state slot src to dst in every recurrent layer (forking a sequence's choices). */
rf_status rf_fwd_copy_slot(rf_model *m, rf_fwd *f, int32_t dst, int32_t src);
/* The layer blocks (tp 1, one backend): the DeltaNet mixer and qwen35's gated attention, reading
 * f->h and writing f->o for the n tokens of b. */
rf_status rf_mixer_deltanet(rf_model *m, rf_fwd *f, const rf_batch *b, int il, int64_t n);
rf_status rf_mixer_gated_attention(rf_model *m, rf_fwd *f, const rf_batch *b, int il, int64_t n);

/* ---- gemma4 (model_gemma4.c, forward_gemma4.c) ---- */
/* The architecture table's hook: gemma4's keys (per-layer KV heads and window pattern, the
 * sliding layers' head size / RoPE, shared-KV layers, per-layer embeddings), checked. */
rf_status rf_gemma4_hparams(rf_model *m);
/* Binds layer il's weights and sets its per-layer sizes (replaces the generic attention and
 * feed-forward binding); the model-level per-layer embedding tensors. */
rf_status rf_gemma4_load_layer(rf_model *m, rf_layer *L, int il);
rf_status rf_gemma4_load_top(rf_model *m);
/* Binds tensor `name` of shape [ne0, ne1] (model_bind.c: missing and required is an
 * error naming it; vectors f32). */
rf_status rf_model_bind(rf_model *m, rf_tensor *t, const char *name, int64_t ne0, int64_t ne1, bool required);
/* The per-layer inputs of the batch's n tokens into f->ple (needs f->x = the scaled embeddings);
 * one gemma4 layer over f->x (the residual stream, complete on return: f->o is not pending; f->h
 * = the next layer's attention norm of it, which layer il > 0 expects from layer il - 1). */
rf_status rf_gemma4_ple(rf_model *m, rf_fwd *f, const rf_batch *b, int64_t n);
rf_status rf_gemma4_layer(rf_model *m, rf_fwd *f, const rf_batch *b, int il, int64_t n);

/* Bytes of K and V per position over all layers for a KV type (f32, f16, q8_0). */
rf_status rf_kv_bytes_per_pos(const rf_model *m, rf_type kv_type, uint64_t *out);
/* Device bytes of the step's buffers for n_batch tokens (activations, logits, and the scratch a
 * many-token product may take), for the memory plan. */
uint64_t rf_fwd_buffer_bytes(const rf_model *m, int32_t n_batch, int32_t logit_rows);
rf_status rf_fwd_init(rf_model *m, rf_fwd *f, int32_t n_blocks, int32_t block_size, int32_t n_batch,
                      rf_type kv_type, int32_t logit_rows);
void rf_fwd_free(rf_model *m, rf_fwd *f);

/* Runs one step's batch (backend.h: rf_batch; b->n_tokens <= n_batch) through the model,
 * storing every token's K/V at its slot, and writes the logits of the rows b->out_rows to host
 * memory logits_out [b->n_out, n_vocab]; with logits_out NULL they stay on the backend in
 * f->logits (b->n_out <= f->logit_rows) for a device sampler. Positions, slots and block
 * tables are trusted (the engine built them); token ids are checked (RF_ERR_RANGE). */
rf_status rf_forward(rf_model *m, rf_fwd *f, rf_batch *b, float *logits_out);
/* Copies block src's K/V rows to block dst in every layer (copy-on-write). */
rf_status rf_fwd_copy_block(rf_model *m, rf_fwd *f, int32_t dst, int32_t src);

/* Binds every weight by name from m->g onto m->be (model_weights.c): shapes checked, errors
 * name the tensor; joins Q/K/V and gate/up where the backend offers weight_join. */
rf_status rf_model_load_weights(rf_model *m);
/* Releases what rf_model_load_weights bound (a device backend's uploads; a tied output once). */
void rf_model_free_weights(rf_model *m);

/* Splits every layer over tp shards (model_tp.c): Q/K/V and gate/up by output rows (whole
 * heads; KV heads replicated where n_head_kv < tp), O and down by input columns, as views into
 * the loaded weights. tp <= 1: nothing. Errors (nothing changed): RF_ERR_UNSUPPORTED on a device
 * backend or where a column slice would cut a quantization block; RF_ERR_INVALID_ARG when tp
 * does not divide the heads, the KV heads (or they it) or n_ff. */
rf_status rf_model_shard(rf_model *m, int32_t tp);
/* Releases the shards (the slices a device backend uploaded, then the array); tp stays. */
void rf_model_unshard(rf_model *m);
/* The in-process all-reduce of the shards' partial outputs: o += part[0] + ... + part[tp - 2]
 * over n elements, in shard order (deterministic). */
rf_status rf_tp_allreduce(rf_model *m, rf_tensor *o, rf_tensor *part, int64_t n);

/* The split over several GPUs (model_tp_gpu.c). rf_tp_open, before the weights are bound:
 * opens tp GPU backends (devices first .. first + tp - 1; m->be is the first), checks the heads
 * divide, each GPU's free memory against its shard, peer access and NCCL, and creates the
 * communicator. Errors name the GPU, the bytes, or the missing library. */
struct rf_model_params;
rf_status rf_tp_open(rf_model *m, int32_t tp, int first);
/* The engine's decode-step graphs for a split over several GPUs (RF_TP_GRAPHS=1, opt-in:
 * model_tp_gpu.c): graph_begin on every GPU (the same mode everywhere, else none); after the
 * forward of a recorded step, or in place of the forward of a replayed one, the other GPUs'
 * batch copies and graphs (before GPU 0's sample launches its own); abort on every GPU. One
 * backend: its own graph_begin / abort, and rf_model_graph_others does nothing. */
bool rf_model_graphs_ok(const rf_model *m);
int rf_model_graph_begin(rf_model *m, const void *owner, int key);
rf_status rf_model_graph_others(rf_model *m, const rf_batch *b, int mode);
void rf_model_graph_abort(rf_model *m);

/* The tp_one_device test hook: every shard on the one GPU (a test mode, model_tp.c). */
bool rf_tp_one_device(void);
/* The tp_cpu_ranks test hook with --device cpu (a test mode, model_tp.c): the several-GPU code path with a
 * CPU backend per rank and an in-process collective, so the CPU suite checks the per-rank
 * buffers, KV pools and reduces the GPUs use. rf_tp_open_cpu opens the ranks. */
bool rf_tp_cpu_ranks(void);
rf_status rf_tp_open_cpu(rf_model *m, int32_t tp, int n_threads);
/* The collectives between ranks without NCCL (CPU ranks): t[0] += t[1] + ... in rank order, then
 * copied to every t[s]; the broadcast copies t[0]. */
rf_status rf_tp_host_allreduce(rf_model *m, rf_tensor *const *t, int64_t n);
rf_status rf_tp_host_broadcast(rf_model *m, rf_tensor *const *t, int64_t n);
/* Releases the GPUs 1.. of a split and the communicator (m->be stays). */
void rf_tp_close(rf_model *m);
/* Shard s's backend (m->be when one backend runs every shard). */
static inline rf_backend *rf_model_be(const rf_model *m, int s) { return m->tp_be ? m->tp_be[s] : m->be; }
/* Makes shard s's GPU the current device (nothing without tp_be). */
rf_status rf_model_use(const rf_model *m, int s);
/* The least free device memory over the model's GPUs, and that GPU's total. */
rf_status rf_model_gpu_mem(const rf_model *m, size_t *free_bytes, size_t *total_bytes);
/* GPUs the model runs on: N for a split over N GPUs (shard s on the s-th), 1 for one GPU (the
 * one-device split test mode too), 0 on the CPU (CPU ranks too). */
int rf_model_n_gpus(const rf_model *m);
/* GPU s's backend info, with its memory now when `memory` (op info): from any thread, while
 * another steps; the calling thread's current device is left as it was. RF_ERR_RANGE for s
 * outside. */
rf_status rf_model_gpu_info(const rf_model *m, int s, bool memory, rf_backend_info *out);
/* Several GPUs: the sum all-reduce of t[s] (GPU s's tensor, n floats) over the GPUs, in place;
 * the broadcast of GPU 0's t[0] to every t[s]. */
rf_status rf_tp_dev_allreduce(rf_model *m, rf_tensor *const *t, int64_t n);
rf_status rf_tp_dev_broadcast(rf_model *m, rf_tensor *const *t, int64_t n);
/* Several GPUs: whether a step of rows x n may sum its partial outputs inside the norm that reads
 * them (rf_tp_dev_reduce_norm: the peer-to-peer kernels are in use and take the shape), and GPU
 * d's share of that: x += the GPUs' parts summed, y = rmsnorm(x) * w for next's product, as the
 * all-reduce then rmsnorm_for (the same bits). Every GPU makes the call, in order. */
bool rf_tp_dev_reduce_norm_ok(const rf_model *m, int64_t rows, int64_t n);
rf_status rf_tp_dev_reduce_norm(rf_model *m, int d, rf_tensor *y, rf_tensor *x, const rf_tensor *part,
                                const rf_tensor *w, int64_t rows, int64_t n, float eps, const rf_tensor *next);
/* The vocabulary split (docs/tp.md): shard s's rows [*v0, *v0 + *n) of the embedding and the LM
 * head. Every shard but the last holds V / tp rounded down to a multiple of 16 rows; the last
 * takes the rest. */
void rf_tp_vocab_rows(const rf_model *m, int s, int64_t *v0, int64_t *n);
int64_t rf_tp_vocab_step(int64_t n_vocab, int tp); /* the rows of every shard but the last */
/* Several GPUs (or CPU ranks): rows x width f32 of shard s's src (rows of width) copied into GPU
 * 0's dst (rows of dst->ne[0]) at column col0, ordered after GPU 0's work so far and before
 * GPU 0's later work (the LM head's logit slices gathered for the sampler). */
rf_status rf_tp_dev_gather(rf_model *m, int s, rf_tensor *dst, int64_t col0, const rf_tensor *src, int64_t rows,
                           int64_t width);

/* Library-internal session accessors (session.c) for the generation loop. */
const rf_vocab *rf_session_vocab(const rf_session *s);
int32_t rf_session_n_vocab(const rf_session *s);

#endif
