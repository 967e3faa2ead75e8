/* synth_vocab.h — synthetic but valid tokenizer vocabularies for `rocmforge mkmodel`:
 * byte-level BPE ("gpt2") with a consistent merge list, and SentencePiece-style ("llama") with
 * byte-fallback tokens and scores. Deterministic: the same spec always gives the same vocab. */
#ifndef RF_SYNTH_VOCAB_H
#define RF_SYNTH_VOCAB_H

#include <stdbool.h>
#include <stdint.h>

#include "rocmforge/core.h"

/* Which real tokenizer family a vocabulary imitates (special tokens, their ids, templates). */
typedef enum synth_vocab_family {
    SYNTH_VOCAB_LLAMA3, /* gpt2 BPE, 256-ish specials at the end, <|eot_id|> */
    SYNTH_VOCAB_QWEN2,  /* gpt2 BPE, ChatML specials at the end, then [PADn] up to the size */
    SYNTH_VOCAB_SMOLLM, /* gpt2 BPE, ChatML + code specials at ids 0..16 */
    SYNTH_VOCAB_LLAMA2, /* SentencePiece: <unk>, <s>, </s>, <0x00>..<0xFF>, pieces with scores */
    SYNTH_VOCAB_GEMMA4, /* "gemma4": the LLAMA2 pieces as BPE merges over SPM-style text; <pad>,
                           <eos>, <bos>, <unk>, <mask>, turn/tool markers, </s>, <0x00>..<0xFF>,
                           newline and space runs */
} synth_vocab_family;

/* Token types as stored in tokenizer.ggml.token_type. */
enum {
    SYNTH_TOK_NORMAL = 1,
    SYNTH_TOK_UNKNOWN = 2,
    SYNTH_TOK_CONTROL = 3,
    SYNTH_TOK_USER_DEFINED = 4,
    SYNTH_TOK_UNUSED = 5,
    SYNTH_TOK_BYTE = 6,
};

typedef struct synth_vocab_spec {
    synth_vocab_family family;
    uint32_t n_vocab;   /* total tokens == embedding rows */
    uint32_t n_special; /* LLAMA3: how many of the 256 special slots to use (>= 11);
                           QWEN2: number of regular (BPE) tokens before the specials;
                           otherwise ignored (0) */
} synth_vocab_spec;

typedef struct synth_vocab {
    bool is_spm;          /* "llama" (true) or a BPE model (false: merges written) */
    const char *model;    /* tokenizer.ggml.model: "llama", "gpt2" or "gemma4" */
    uint32_t n_tokens;
    const char **tokens;  /* n_tokens NUL-terminated strings, unique */
    int32_t *types;       /* n_tokens token types */
    float *scores;        /* n_tokens scores (SPM only; NULL for BPE) */
    uint32_t n_merges;
    const char **merges;  /* "a b" with a, b and ab all in tokens (BPE only) */
    int32_t bos, eos, eot, unk, pad; /* -1 when absent */
    bool add_bos, add_eos;
    const char *pre;           /* tokenizer.ggml.pre, NULL for SPM */
    const char *chat_template; /* static string */
    /* storage */
    char *arena;
    char *merge_arena;
} synth_vocab;

/* Builds the vocabulary of `spec` with tokenizer.ggml.pre = `pre` (BPE families).
 * Fails with RF_ERR_INVALID_ARG when n_vocab is too small for the family's fixed tokens
 * (bytes + specials), RF_ERR_OOM on allocation failure. On failure *out is zeroed. */
rf_status synth_vocab_build(const synth_vocab_spec *spec, const char *pre, synth_vocab *out);
void synth_vocab_free(synth_vocab *v);

/* GPT-2's bytes_to_unicode: the code point that stands for byte b in byte-level BPE tokens. */
uint32_t synth_byte_to_cp(uint8_t b);

/* The embedded English sample text the merges are learned from (NUL-terminated). */
extern const char synth_sample_text[];

/* The chat templates of the families (synth_templates.c). */
extern const char synth_template_llama3[], synth_template_qwen2[], synth_template_smollm[], synth_template_llama2[],
    synth_template_gemma4[];

#endif
