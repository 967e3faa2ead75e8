/* rocmforge/tokenizer.h — vocabulary from GGUF metadata, tokenize / detokenize (SPM and
 * byte-level BPE), streaming-safe detokenizer, and chat templates (a Jinja subset). */
#ifndef ROCMFORGE_TOKENIZER_H
#define ROCMFORGE_TOKENIZER_H

#include "rocmforge/core.h"
#include "rocmforge/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded vocabulary is immutable: every call below may run concurrently on one rf_vocab
 * (per-call state is allocated per call); an rf_detok belongs to one thread at a time. */
typedef struct rf_vocab rf_vocab;

/* Builds the vocabulary from `tokenizer.ggml.*` metadata (the gguf handle may be closed
 * afterwards: everything is copied). Errors name the key: missing tokens, an unknown
 * `tokenizer.ggml.model` or `tokenizer.ggml.pre`, arrays of different lengths. */
rf_status rf_vocab_load(const rf_gguf *g, rf_vocab **out);
void rf_vocab_free(rf_vocab *v);

int32_t rf_vocab_n_tokens(const rf_vocab *v);
int32_t rf_vocab_bos(const rf_vocab *v); /* -1 when the model has none */
int32_t rf_vocab_eos(const rf_vocab *v);
int32_t rf_vocab_eot(const rf_vocab *v);
bool rf_vocab_add_bos(const rf_vocab *v); /* whether tokenize(add_special) prepends BOS */
/* End of generation: EOS, EOT or any other token the vocabulary marks as ending a turn. */
bool rf_vocab_is_eog(const rf_vocab *v, int32_t id);
/* The token's text as stored ("▁the", "<0x0A>", "<|im_end|>"); NULL for an id out of range. */
const char *rf_vocab_token_text(const rf_vocab *v, int32_t id);

/* Text -> ids. add_special: BOS/EOS as the model's add_bos/add_eos say. parse_special:
 * control/user-defined token strings in the text map to their ids (else they are plain text).
 * Writes up to `cap` ids and sets *n_out to the number the text needs (call with cap 0 to
 * size); RF_ERR_RANGE if cap was too small (ids[0..cap) is then filled) or the text is over
 * 1 GiB. Invalid UTF-8 is not an error (see docs/tokenizer.md). */
rf_status rf_tokenize(const rf_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *ids, size_t cap, size_t *n_out);

/* Bytes [begin, end) of a text. */
typedef struct rf_text_span {
    size_t begin, end;
} rf_text_span;

/* Everything rf_tokenize_ex may be told. Zero-initialise, then set. */
typedef struct rf_tokenize_opts {
    bool add_special;            /* as rf_tokenize */
    bool parse_special;          /* as rf_tokenize, but never inside `plain` below */
    /* Byte ranges that are plain text whatever parse_special says (sorted, disjoint): a
     * control token is taken only when all of its bytes lie outside them, so text that came
     * from a user (chat message content, a rendered template's data) cannot become a control
     * token, not even by completing the template's text beside it. User-defined tokens are
     * taken everywhere, as rf_tokenize does without parse_special. */
    const rf_text_span *plain;
    size_t n_plain;
    /* 0 = no limit. Else tokenizing stops as soon as the count passes max_tokens: RF_ERR_RANGE
     * with *n_out = max_tokens + 1 ("more than max_tokens"), so a huge text costs about as much
     * as max_tokens tokens' worth of it. */
    size_t max_tokens;
} rf_tokenize_opts;

/* rf_tokenize with plain-text ranges and a token limit (opts NULL = all defaults). Writes up
 * to `cap` ids and sets *n_out as rf_tokenize does; RF_ERR_RANGE when cap was too small
 * (*n_out <= max_tokens or no limit) or when the limit was passed (*n_out == max_tokens + 1). */
rf_status rf_tokenize_ex(const rf_vocab *v, const char *text, size_t len, const rf_tokenize_opts *opts,
                         int32_t *ids, size_t cap, size_t *n_out);

/* The bytes one token stands for, as generation output shows it (byte tokens decoded, SPM
 * "▁" as space, BPE byte-level mapping undone). Control tokens give "" unless render_special.
 * Writes up to cap bytes (no NUL) and sets *n_out to the full length. */
rf_status rf_token_to_piece(const rf_vocab *v, int32_t id, bool render_special, char *buf,
                            size_t cap, size_t *n_out);

/* ids -> text, malloc'd and NUL-terminated in *out (caller frees). Matches the reference
 * detokenizer: SPM strips the leading space of the first piece where the reference does. */
rf_status rf_detokenize(const rf_vocab *v, const int32_t *ids, size_t n, bool render_special,
                        char **out, size_t *out_len);

/* Streaming detokenizer: never emits half of a UTF-8 character; holds bytes until the
 * character completes. */
typedef struct rf_detok rf_detok;
rf_status rf_detok_new(const rf_vocab *v, bool render_special, rf_detok **out);
void rf_detok_free(rf_detok *d);
/* Appends token `id`; writes the newly completed text (up to cap bytes) and its length. Text
 * that does not fit stays held (cut at a character boundary) and comes out with the next push
 * or flush (RF_ERR_RANGE only when cap < the next character, at most 4 bytes). The
 * concatenated output equals rf_detokenize of the same ids, except that invalid UTF-8 comes out
 * as U+FFFD. */
rf_status rf_detok_push(rf_detok *d, int32_t id, char *buf, size_t cap, size_t *n_out);
/* Emits whatever is held (incomplete UTF-8 as U+FFFD); call until *n_out is 0 when cap may be
 * smaller than what is held. */
rf_status rf_detok_flush(rf_detok *d, char *buf, size_t cap, size_t *n_out);

/* ---- chat templates -------------------------------------------------------------------- */

typedef struct rf_chat_msg {
    const char *role;    /* "system", "user", "assistant", ... */
    const char *content;
} rf_chat_msg;

typedef struct rf_chat_template rf_chat_template;

/* Parses a Jinja chat template (done at model load so an unsupported template is reported
 * then). RF_ERR_UNSUPPORTED / RF_ERR_FORMAT with line:column and the construct. */
rf_status rf_chat_template_parse(const char *source, rf_chat_template **out);
void rf_chat_template_free(rf_chat_template *t);

/* At model load: the model's `tokenizer.chat_template` parsed once; if it is missing or the
 * subset cannot parse it, the recognised family's built-in template (warning logged with the
 * parse error's line:column). The template remembers the model's BOS/EOS token texts, used
 * when render is given NULL for them. RF_ERR_UNSUPPORTED (with the parse error, if any) when
 * no family is recognised. */
rf_status rf_chat_template_from_gguf(const rf_gguf *g, rf_chat_template **out);
/* A named variant stored as `tokenizer.chat_template.<name>` (e.g. "tool_use", which
 * transformers picks when tools are given). RF_ERR_NOT_FOUND when the file has no such key;
 * parse errors as rf_chat_template_parse (no fallback). BOS/EOS remembered as above. */
rf_status rf_chat_template_from_gguf_named(const rf_gguf *g, const char *name, rf_chat_template **out);
/* Whether the template is a built-in fallback rather than the model's own. */
bool rf_chat_template_is_fallback(const rf_chat_template *t);

/* Renders messages; *out is malloc'd, NUL-terminated. bos/eos NULL = the texts remembered by
 * rf_chat_template_from_gguf, else empty. */
rf_status rf_chat_template_render(const rf_chat_template *t, const rf_chat_msg *msgs, size_t n,
                                  bool add_generation_prompt, const char *bos_token,
                                  const char *eos_token, char **out);

/* Convenience: the model's own `tokenizer.chat_template`, or (if absent or unparseable, with a
 * logged warning) the recognised family's built-in template. `tmpl` NULL = the model's.
 * bos_token/eos_token are the texts of the model's BOS/EOS tokens. A template that parses but
 * fails while rendering (e.g. raise_exception on a bad role order) is an error, not a
 * fallback. RF_ERR_UNSUPPORTED when no template is usable and no family is recognised. */
rf_status rf_chat_apply_template(const rf_gguf *g, const char *tmpl, const rf_chat_msg *msgs,
                                 size_t n, bool add_generation_prompt, char **out);

/* Everything a template may see beyond role/content messages. Zero-initialise, then set. */
typedef struct rf_chat_render_opts {
    bool add_generation_prompt;
    const char *bos_token;     /* NULL = the template's remembered BOS text, else "" */
    const char *eos_token;     /* NULL = the template's remembered EOS text, else "" */
    /* JSON array of message objects (tool_calls, tool_call_id, list content, ...); when
     * non-NULL it replaces msgs/n. */
    const char *messages_json;
    const char *tools_json;    /* JSON array of tool schemas; NULL = `tools` is none */
    /* JSON object of extra variables (date_string, enable_thinking, builtin_tools, ...);
     * they override the variables above. */
    const char *extra_json;
    int64_t now;               /* unix time for strftime_now (formatted in UTC); 0 = the
                                  clock (local time), as transformers does */
    /* transformers' continue_final_message: render without the generation prompt and cut
     * the text right after the last message's content, so the model continues that message
     * (prefill). Incompatible with add_generation_prompt (RF_ERR_INVALID_ARG). */
    bool continue_final_message;
} rf_chat_render_opts;

/* Renders with the full variable set. Malformed JSON in opts: RF_ERR_INVALID_ARG naming the
 * field. Template errors as rf_chat_template_render; raise_exception(msg) gives RF_ERR_FORMAT
 * with rf_last_error() == msg and rf_chat_last_error_raised() true. */
rf_status rf_chat_template_render_ex(const rf_chat_template *t, const rf_chat_msg *msgs,
                                     size_t n, const rf_chat_render_opts *opts, char **out);
/* rf_chat_template_render_ex that also says which bytes of *out came from the caller's data:
 * *data (malloc'd, may be NULL when *n_data is 0) gets the byte ranges of message content,
 * roles, names, tool definitions and results and extra variables, sorted and disjoint;
 * everything else is the template's own text (and the BOS/EOS token texts). Tokenize the
 * result with rf_tokenize_ex(parse_special = true, plain = *data) so that special tokens come
 * only from the template's markup, never from what a user wrote (docs/chat-templates.md). */
rf_status rf_chat_template_render_data(const rf_chat_template *t, const rf_chat_msg *msgs, size_t n,
                                       const rf_chat_render_opts *opts, char **out,
                                       rf_text_span **data, size_t *n_data);
/* Whether the last failed render on this thread failed in the template's raise_exception(). */
bool rf_chat_last_error_raised(void);

/* Chat-template families with a built-in fallback template. */
typedef enum rf_chat_family {
    RF_CHAT_FAMILY_UNKNOWN = 0,
    RF_CHAT_FAMILY_CHATML,  /* <|im_start|>role ... <|im_end|> (SmolLM2, Qwen2.5) */
    RF_CHAT_FAMILY_LLAMA3,  /* <|start_header_id|>role<|end_header_id|> ... <|eot_id|> */
    RF_CHAT_FAMILY_LLAMA2,  /* [INST] <<SYS>> ... <</SYS>> ... [/INST] */
    RF_CHAT_FAMILY_MISTRAL, /* [INST] system\n\nuser [/INST] answer</s> */
    RF_CHAT_FAMILY_GEMMA,   /* <start_of_turn>user ... <end_of_turn> */
    RF_CHAT_FAMILY_PHI3     /* <|user|> ... <|end|> */
} rf_chat_family;

const char *rf_chat_family_name(rf_chat_family f); /* "chatml", "llama3", ...; never NULL */
/* Family from a template's text (may be NULL), else from `arch` (general.architecture, may be
 * NULL) and whether the vocabulary has <|start_header_id|> / <|im_start|>. */
rf_chat_family rf_chat_family_detect(const char *tmpl_text, const char *arch, const rf_gguf *g);
/* The built-in Jinja source of a family (static storage); NULL for UNKNOWN. */
const char *rf_chat_family_template(rf_chat_family f);

#ifdef __cplusplus
}
#endif
#endif
