/* synth_model.h — internals of `rocmforge mkmodel`: the preset table (real hyper-parameters),
 * per-architecture metadata and tensor lists, and the llama-quantize type recipes.
 * To add an architecture: a synth_arch value, an entry in synth_arch_table (synth_presets.c) with
 * its metadata writer and tensor-list builder, and presets that use it. */
#ifndef RF_SYNTH_MODEL_H
#define RF_SYNTH_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "rocmforge/gguf.h"
#include "rocmforge/mkmodel.h"
#include "synth_vocab.h"

typedef enum synth_arch {
    SYNTH_ARCH_LLAMA,
    SYNTH_ARCH_QWEN2,
    SYNTH_ARCH_GEMMA3,
    SYNTH_ARCH_QWEN3,
    SYNTH_ARCH_SMOLLM3,
    SYNTH_ARCH_MISTRAL3,
    SYNTH_ARCH_PHI3,
    SYNTH_ARCH_QWEN3MOE,
    SYNTH_ARCH_GPT_OSS,
    SYNTH_ARCH_QWEN35,
    SYNTH_ARCH_QWEN35MOE,
    SYNTH_ARCH_QWEN3NEXT,
    SYNTH_ARCH_GEMMA4,
    SYNTH_ARCH_COUNT
} synth_arch;

typedef struct synth_preset {
    const char *name;
    const char *description; /* the real model it copies */
    const char *model_name;  /* general.name */
    const char *size_label;  /* general.size_label */
    synth_arch arch;
    int32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim;
    uint32_t n_ctx;
    float rope_base, rms_eps;
    bool tied; /* no output.weight: the LM head is token_embd */
    /* llama3-style rope scaling (rope_freqs.weight); factor 0 = none */
    float rope_factor, rope_low_freq, rope_high_freq;
    uint32_t rope_orig_ctx;
    synth_vocab_spec vocab;
    const char *pre; /* tokenizer.ggml.pre for BPE vocabularies */
    int32_t n_swa;   /* gemma3: attention.sliding_window (every 6th layer is global); phi3: the
                        value its converter writes (llama.cpp ignores it); 0 = none */
    int32_t n_rot;   /* rope.dimension_count when RoPE covers part of the head (phi3); 0 = head_dim */
    /* phi3 longrope: rope_factors_short/long of n_rot/2 entries (synthetic ramps, see
     * synth_longrope_factors) and rope.scaling.attn_factor from n_ctx / rope_orig_ctx */
    bool longrope;
} synth_preset;

/* A mixture-of-experts preset's expert shapes (a side table in synth_presets.c, so the dense
 * presets' rows stay as they are): n_expert experts of n_ff_exp, the top n_expert_used per token. */
typedef struct synth_moe {
    const char *preset;
    int32_t n_expert, n_expert_used, n_ff_exp;
    int32_t n_ff_shexp; /* > 0: a shared expert of this width behind a sigmoid gate (qwen35moe) */
} synth_moe;
/* The expert shapes of preset p, or NULL for a dense one. */
const synth_moe *synth_moe_of(const synth_preset *p);

extern const synth_preset synth_presets[];
extern const int32_t synth_n_presets;
const synth_preset *synth_preset_find(const char *name);

/* How a tensor's values are made. */
typedef enum synth_gen {
    SYNTH_GEN_RANDOM, /* uniform, zero mean, std `std` */
    SYNTH_GEN_ONES,   /* norm weights */
    SYNTH_GEN_CONST,  /* every value = `std` (gemma3 post-norm gains) */
    SYNTH_GEN_ROPE_FREQS,
    SYNTH_GEN_NEAR_ONE,       /* 1 + uniform noise of std `std` (norm gains that matter) */
    SYNTH_GEN_LONGROPE_SHORT, /* phi3 rope_factors_short */
    SYNTH_GEN_LONGROPE_LONG,  /* phi3 rope_factors_long */
    SYNTH_GEN_PROP_ROPE,      /* gemma4's full-layer rope_freqs: 1 for the first `std` entries,
                               * 1e30 (a pair that does not turn) after */
} synth_gen;

typedef struct synth_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[4];
    synth_gen gen;
    float std;
    rf_type type; /* filled by the recipe */
} synth_tensor;

typedef struct synth_tensor_list {
    synth_tensor *t;
    int64_t n, cap;
} synth_tensor_list;

/* Appends a tensor (F32 until the recipe runs). Returns false on OOM. */
bool synth_list_add(synth_tensor_list *l, const char *name, uint32_t n_dims, int64_t ne0,
                    int64_t ne1, synth_gen gen, float std);
/* Appends a 3-D tensor [ne0, ne1, ne2] (the experts of a mixture: ne2 = n_expert). */
bool synth_list_add3(synth_tensor_list *l, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                     synth_gen gen, float std);

typedef struct synth_arch_info {
    const char *name; /* general.architecture */
    /* writes the {arch}.* hyper-parameter keys */
    rf_status (*write_kv)(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer);
    /* appends every tensor llama.cpp loads for this architecture (any order) */
    bool (*tensors)(synth_tensor_list *l, const synth_preset *p, int32_t n_layer, uint32_t n_vocab);
    /* llama.cpp's LLM_TYPE_70B test (it changes the attn_v recipe) */
    bool (*is_70b)(const synth_preset *p, int32_t n_layer);
} synth_arch_info;

const synth_arch_info *synth_arch_get(synth_arch a);

/* The llama-family tensors (llama, qwen2 with biases) and the common {arch}.* keys
 * (synth_presets.c), which the other families' writers build on; flags: */
enum { KV_VOCAB_SIZE = 1, KV_ROPE_DIM = 2, KV_HEAD_LEN = 4 };
bool synth_tensors_llama_like(synth_tensor_list *l, const synth_preset *p, int32_t n_layer, uint32_t n_vocab, bool qkv_bias);
rf_status synth_write_kv_common(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer, const char *arch, unsigned flags);

/* The Gemma family (synth_presets_gemma.c): gemma3's and gemma4's keys and tensors. */
rf_status synth_write_kv_gemma3(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer);
bool synth_tensors_gemma3(synth_tensor_list *l, const synth_preset *p, int32_t n_layer, uint32_t n_vocab);
rf_status synth_write_kv_gemma4(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer);
bool synth_tensors_gemma4(synth_tensor_list *l, const synth_preset *p, int32_t n_layer, uint32_t n_vocab);

/* rope_freqs.weight as llama.cpp's converter computes it for rope_type "llama3". out has
 * head_dim/2 entries. */
void synth_llama3_rope_factors(const synth_preset *p, float *out);

/* phi3 longrope factors (n_rot/2 entries): short ramps 1 -> 1.5 and long 1 -> n_ctx /
 * rope_orig_ctx over the dimensions, growing with the wavelength like the real ones (the real
 * values are learned per model; these only have to be non-trivial so that a forward ignoring
 * them fails the goldens). */
void synth_longrope_factors(const synth_preset *p, bool long_factors, float *out);
/* The converter's rope.scaling.attn_factor: sqrt(1 + ln(s) / ln(orig)) with s = n_ctx / orig
 * (1 when s <= 1). */
float synth_longrope_attn_factor(const synth_preset *p);

/* ---- recipes (llama-quantize) --------------------------------------------------------------- */

typedef struct synth_ftype {
    const char *name;     /* lowercase: "q4_k_m" */
    int32_t llama_ftype;  /* general.file_type value */
    rf_type base;         /* llama_ftype_get_default_type */
    const char *alias_of; /* "q4_k" -> "q4_k_m" */
} synth_ftype;

extern const synth_ftype synth_ftypes[];
extern const int32_t synth_n_ftypes;
const synth_ftype *synth_ftype_find(const char *name); /* case-insensitive, NULL if unknown */

/* Mirrors llama-quantize's quantize_state_impl: counters advance as tensors are visited in file
 * order, exactly as llama_tensor_get_type sees them. */
typedef struct synth_qstate {
    const synth_ftype *ft;
    bool pure;
    bool tied;  /* no output.weight in the file */
    bool is_70b;
    int32_t n_gqa; /* n_head / n_head_kv */
    int32_t n_attention_wv, i_attention_wv;
    int32_t n_ffn_down, i_ffn_down;
    int32_t n_ffn_gate, i_ffn_gate;
    int32_t n_ffn_up, i_ffn_up;
    int32_t n_fallback;
    int32_t n_expert; /* hparams.n_expert: the largest ne[2] of the list's tensors (1: dense) */
} synth_qstate;

/* Initialises the state for a tensor list (counts attn_v tensors and output.weight). */
void synth_qstate_init(synth_qstate *qs, const synth_ftype *ft, bool pure, bool is_70b,
                       int32_t n_gqa, int32_t n_layer, const synth_tensor_list *l);

/* The type llama-quantize would give tensor `t` (call in file order). RF_ERR_UNSUPPORTED when no
 * fallback fits the row length. */
rf_status synth_tensor_type(synth_qstate *qs, const synth_tensor *t, rf_type *out);

/* Sorts like llama_model_loader's weights_map: non-layer tensors first, layers ascending, then
 * by name (strcmp). */
void synth_list_sort(synth_tensor_list *l);

#endif
