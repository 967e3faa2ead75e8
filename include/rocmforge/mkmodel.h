/* rocmforge/mkmodel.h — synthetic GGUF models: real architectures and shapes, seeded random
 * weights, a synthetic but valid tokenizer, llama-quantize's per-tensor type mixes. For tests and
 * benchmarks without downloading real weights (`rocmforge mkmodel`, docs/mkmodel.md). */
#ifndef ROCMFORGE_MKMODEL_H
#define ROCMFORGE_MKMODEL_H

#include "rocmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_mkmodel_opts {
    const char *preset; /* "tiny", "llama3-8b", ... (rf_mkmodel_preset_at lists them) */
    const char *type;   /* llama-quantize file type: "f16", "q4_0", "q4_k_m", ... NULL = "f16" */
    uint64_t seed;      /* same options -> byte-identical file */
    int32_t n_layers;   /* 0 = the preset's layer count, else 1..1024 */
    bool pure;          /* like llama-quantize --pure: every 2-D weight gets the base type */
    int32_t n_threads;  /* rows are generated and quantized in parallel; 0 = all online CPUs.
                           The bytes do not depend on it. */
    /* Optional: called before each tensor is written (i of n, name). */
    void (*progress)(void *user, int64_t i, int64_t n, const char *name);
    void *progress_user;
    uint32_t n_vocab;   /* 0 = the preset's vocabulary size, else this many tokens (the family's
                           fixed tokens at least; tests: a size a tensor-parallel split cannot
                           divide evenly) */
} rf_mkmodel_opts;

typedef struct rf_mkmodel_preset_info {
    const char *name;
    const char *arch;        /* general.architecture */
    const char *description; /* which real model it copies */
    int32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim;
    uint32_t n_vocab, n_ctx;
    bool tied_embeddings;
    const char *tokenizer; /* "gpt2", "llama" or "gemma4" */
    const char *pre;       /* tokenizer.ggml.pre or NULL */
} rf_mkmodel_preset_info;

/* Presets in table order; false when i is out of range. */
int32_t rf_mkmodel_preset_count(void);
bool rf_mkmodel_preset_at(int32_t i, rf_mkmodel_preset_info *out);

/* Accepted --type names in table order ("f32", ..., "q4_k_m", ...); NULL past the end.
 * *alias_of is set to the canonical name for aliases (q4_k -> q4_k_m), else NULL. */
const char *rf_mkmodel_type_at(int32_t i, const char **alias_of);

/* One tensor of the file, as it will be written. */
typedef struct rf_mkmodel_tensor {
    char name[64];
    rf_type type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t n_bytes;
} rf_mkmodel_tensor;

/* The tensors the file will hold, in file order (llama-quantize's order: non-layer tensors by
 * name, then layer by layer, by name), with the type the recipe picks for each. *out is malloc'd
 * (free with free()). Errors: unknown preset or type (RF_ERR_NOT_FOUND, message lists the valid
 * names), a type mkmodel cannot produce or a shape no fallback fits (RF_ERR_UNSUPPORTED),
 * bad layer count (RF_ERR_INVALID_ARG). */
rf_status rf_mkmodel_plan(const rf_mkmodel_opts *o, rf_mkmodel_tensor **out, int64_t *n_out);

/* Writes the model to `path` (streaming: memory stays O(largest row), whatever the model size).
 * Errors as rf_mkmodel_plan, plus RF_ERR_IO/RF_ERR_OOM; a failed write leaves no file behind. */
rf_status rf_mkmodel_write(const rf_mkmodel_opts *o, const char *path);

#ifdef __cplusplus
}
#endif
#endif
