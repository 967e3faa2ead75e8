/* vocab.c — the vocabulary built from `tokenizer.ggml.*` GGUF metadata (tokens, scores, types,
 * merges, special ids and the defaults llama.cpp applies per tokenizer model) and the end-of-
 * generation set: data only; tokenizing text is tokenize.c. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* ---- small helpers ----------------------------------------------------------------------- */

static bool get_opt_u32(const rf_gguf *g, const char *key, uint32_t *out) {
    if (rf_gguf_find_key(g, key) < 0) return false;
    if (rf_gguf_get_u32(g, key, out)) {
        RF_LOGW("tokenizer: ignoring %s: %s", key, rf_last_error());
        return false;
    }
    return true;
}

static bool get_opt_bool(const rf_gguf *g, const char *key, bool *out) {
    if (rf_gguf_find_key(g, key) < 0) return false;
    if (rf_gguf_get_bool(g, key, out)) {
        RF_LOGW("tokenizer: ignoring %s: %s", key, rf_last_error());
        return false;
    }
    return true;
}

static bool text_is(const rf_vocab *v, int32_t id, const char *s) {
    size_t l = strlen(s);
    return v->len[id] == l && !memcmp(rf_tok_text(v, id), s, l);
}

void rf_vocab_free(rf_vocab *v) {
    if (!v) return;
    free(v->pool);
    free(v->off);
    free(v->len);
    free(v->scores);
    free(v->attr);
    free(v->is_eog);
    rf_strmap_free(&v->tok);
    rf_strmap_free(&v->merges);
    free(v->merge_pool);
    free(v->special);
    free(v->trie);
    free(v->piece_pool);
    free(v->piece_off);
    free(v->piece_len);
    rf_pretok_free(v->pre);
    free(v);
}

/* ---- special-token lists (the texts llama.cpp recognises; data) ------------------------- */

static const char *const k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>", NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                        "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                                        "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const k_fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                        "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>",
                                        "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const k_fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                        "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                                        "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const k_fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const k_fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                        "<reponame>", NULL};
static const char *const k_fim_sep[] = {"<|file_sep|>", NULL};
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[", NULL};

/* When *id is unset: the token of the first text in `list` the vocabulary has (list order is
 * the priority, so "<|im_end|>" wins over "<|endoftext|>" as end-of-turn); marks it CONTROL.
 * (llama.cpp takes whichever its hash map yields first.) */
static void detect(rf_vocab *v, int32_t *id, const char *const *list) {
    if (*id >= 0) return;
    for (; *list; list++) {
        int32_t t = rf_text_to_token(v, *list, strlen(*list));
        if (t >= 0) {
            *id = t;
            v->attr[t] |= RF_TOK_CONTROL;
            return;
        }
    }
}

/* ---- special-token trie ------------------------------------------------------------------ */

typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_len_id(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static rf_status build_special(rf_vocab *v) {
    size_t n = 0, nodes = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (RF_TOK_CONTROL | RF_TOK_USER_DEFINED | RF_TOK_UNKNOWN)) n++, nodes += v->len[i];
    len_id *tmp = malloc((n ? n : 1) * sizeof *tmp);
    v->special = malloc((n ? n : 1) * sizeof *v->special);
    v->trie = malloc((nodes ? nodes : 1) * sizeof *v->trie);
    if (!tmp || !v->special || !v->trie) {
        free(tmp);
        return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (special tokens)");
    }
    n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (RF_TOK_CONTROL | RF_TOK_USER_DEFINED | RF_TOK_UNKNOWN))
            tmp[n++] = (len_id){v->len[i], i};
    qsort(tmp, n, sizeof *tmp, cmp_len_id);
    for (size_t i = 0; i < n; i++) v->special[i] = tmp[i].id;
    free(tmp);
    v->n_special = n;
    for (int i = 0; i < 256; i++) v->trie_root[i] = -1;
    v->trie_n = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t id = v->special[k];
        const unsigned char *t = (const unsigned char *)rf_tok_text(v, id);
        int32_t parent = -1;
        for (uint32_t j = 0; j < v->len[id]; j++) {
            int32_t c;
            if (j == 0) {
                c = v->trie_root[t[0]];
                if (c < 0) {
                    c = (int32_t)v->trie_n++;
                    v->trie[c] = (rf_trie_node){-1, -1, -1, t[0]};
                    v->trie_root[t[0]] = c;
                }
            } else {
                c = v->trie[parent].first_child;
                while (c >= 0 && v->trie[c].byte != t[j]) c = v->trie[c].next_sibling;
                if (c < 0) {
                    c = (int32_t)v->trie_n++;
                    v->trie[c] = (rf_trie_node){-1, v->trie[parent].first_child, -1, t[j]};
                    v->trie[parent].first_child = c;
                }
            }
            parent = c;
        }
        /* Longest-first order means the first token stored at a node is the one kept. */
        if (parent >= 0 && v->trie[parent].token < 0) v->trie[parent].token = id;
    }
    return RF_OK;
}

/* ---- load -------------------------------------------------------------------------------- */

/* The tokenizer kind from tokenizer.ggml.model (llama = SentencePiece, gpt2 = byte-level BPE,
 * gemma4 = BPE on SPM-style text) with its defaults; gpt2's pre-tokenizer from
 * tokenizer.ggml.pre. */
static rf_status load_kind(rf_vocab *v, const char *model, const char *pre) {
    rf_status st;
    if (!strcmp(model, "llama")) {
        v->type = RF_VOCAB_SPM;
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_space_prefix = true;
        v->clean_spaces = false;
        v->add_bos = true;
        v->add_eos = false;
        v->escape_whitespaces = true;
        snprintf(v->pre_name, sizeof v->pre_name, "default");
    } else if (!strcmp(model, "gpt2") || !strcmp(model, "gemma4")) {
        v->type = RF_VOCAB_BPE;
        v->bos = 11, v->eos = 11, v->unk = -1;
        v->add_space_prefix = false;
        v->escape_whitespaces = false;
        if (!strcmp(model, "gemma4")) {
            /* Gemma 4: BPE merges over SPM-style text; its special ids come only from the
             * file, and the pre-tokenizer is gemma4's whatever tokenizer.ggml.pre says */
            v->bos = v->eos = -1;
            pre = "gemma4";
        } else if (!pre || !*pre) {
            RF_LOGW("tokenizer: tokenizer.ggml.pre is missing, using the 'default' pre-tokenizer; "
                    "GENERATION QUALITY WILL BE DEGRADED (consider regenerating the model)");
            pre = NULL;
        }
        rf_pre_flags fl = {0};
        if ((st = rf_pretok_new(pre, &v->pre, &fl))) return st;
        v->ignore_merges = fl.ignore_merges;
        v->clean_spaces = fl.clean_spaces;
        v->add_bos = fl.add_bos;
        v->bpe_spm_style = v->escape_whitespaces = fl.spm_style;
        snprintf(v->pre_name, sizeof v->pre_name, "%s", rf_pretok_name(v->pre));
    } else {
        return rf_set_error(RF_ERR_UNSUPPORTED,
                          "tokenizer.ggml.model: '%s' is not supported (supported: llama = "
                          "SentencePiece, gpt2 = byte-level BPE, gemma4 = BPE on SPM-style text)",
                          model);
    }
    return RF_OK;
}

/* tokenizer.ggml.tokens: the text pool, the text -> id map, the byte pairs seen in tokens. */
static rf_status load_tokens(const rf_gguf *g, rf_vocab *v) {
    uint64_t n;
    const void *data;
    rf_status st;
    if ((st = rf_gguf_get_arr(g, "tokenizer.ggml.tokens", RF_GGUF_STRING, &n, &data))) {
        return rf_set_error(st, "tokenizer.ggml.tokens: %s", rf_last_error());
    }
    if (n == 0 || n > INT32_MAX - 1) {
        return rf_set_error(RF_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens (need 1..2^31-2)",
                          (unsigned long long)n);
    }
    const rf_gguf_str *toks = data;
    v->n_tokens = (int32_t)n;
    uint64_t pool = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = toks[i].len ? toks[i].len : 32; /* "[EMPTY_<i>]" */
        if (l > UINT32_MAX || rf_add_overflow_u64(pool, l + 1, &pool)) {
            return rf_set_error(RF_ERR_FORMAT, "tokenizer.ggml.tokens: token %llu too long",
                              (unsigned long long)i);
        }
    }
    v->pool = malloc(pool);
    v->off = malloc(n * sizeof *v->off);
    v->len = malloc(n * sizeof *v->len);
    v->scores = calloc(n, sizeof *v->scores);
    v->attr = malloc(n * sizeof *v->attr);
    v->is_eog = calloc(n, 1);
    if (!v->pool || !v->off || !v->len || !v->scores || !v->attr || !v->is_eog) {
        return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (%llu tokens)", (unsigned long long)n);
    }
    uint64_t o = 0;
    for (uint64_t i = 0; i < n; i++) {
        v->off[i] = o;
        if (toks[i].len) {
            memcpy(v->pool + o, toks[i].ptr, toks[i].len);
            v->len[i] = (uint32_t)toks[i].len;
        } else {
            RF_LOGW("tokenizer: empty token at index %llu", (unsigned long long)i);
            v->len[i] = (uint32_t)snprintf(v->pool + o, 32, "[EMPTY_%llu]", (unsigned long long)i);
        }
        v->pool[o + v->len[i]] = 0;
        o += v->len[i] + 1;
        if (v->len[i] > v->max_token_len) v->max_token_len = v->len[i];
        v->attr[i] = RF_TOK_NORMAL;
    }
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if ((st = rf_strmap_put(&v->tok, rf_tok_text(v, i), v->len[i], 0, i))) return st;
        const unsigned char *t = (const unsigned char *)rf_tok_text(v, i);
        for (uint32_t j = 1; j < v->len[i]; j++) {
            unsigned pr = (unsigned)t[j - 1] << 8 | t[j];
            v->pair_bits[pr >> 3] |= (uint8_t)(1u << (pr & 7));
        }
    }
    return RF_OK;
}

/* tokenizer.ggml.scores and tokenizer.ggml.token_type (optional) for the n tokens. */
static rf_status load_scores_types(const rf_gguf *g, rf_vocab *v) {
    const uint64_t n = (uint64_t)v->n_tokens;
    const void *data;
    rf_status st;
    if (rf_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        uint64_t ns;
        if ((st = rf_gguf_get_arr(g, "tokenizer.ggml.scores", RF_GGUF_FLOAT32, &ns, &data))) return st;
        if (ns < n) {
            return rf_set_error(RF_ERR_FORMAT, "tokenizer.ggml.scores: %llu scores for %llu tokens",
                              (unsigned long long)ns, (unsigned long long)n);
        }
        memcpy(v->scores, data, n * sizeof(float));
    }
    if (rf_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        uint64_t nt;
        if ((st = rf_gguf_get_arr(g, "tokenizer.ggml.token_type", -1, &nt, &data))) return st;
        const rf_gguf_value *tv = rf_gguf_kv_value(g, rf_gguf_find_key(g, "tokenizer.ggml.token_type"));
        if (tv->v.arr.elem_type != RF_GGUF_INT32 && tv->v.arr.elem_type != RF_GGUF_UINT32) {
            return rf_set_error(RF_ERR_TYPE, "tokenizer.ggml.token_type: expected an array of i32, got %s",
                              rf_gguf_type_name(tv->v.arr.elem_type));
        }
        if (nt < n) {
            return rf_set_error(RF_ERR_FORMAT, "tokenizer.ggml.token_type: %llu types for %llu tokens",
                              (unsigned long long)nt, (unsigned long long)n);
        }
        const int32_t *tt = data;
        for (uint64_t i = 0; i < n; i++) {
            switch (tt[i]) {
            case 1: v->attr[i] = RF_TOK_NORMAL; break;
            case 2: v->attr[i] = RF_TOK_UNKNOWN; break;
            case 3: v->attr[i] = RF_TOK_CONTROL; break;
            case 4: v->attr[i] = RF_TOK_USER_DEFINED; break;
            case 5: v->attr[i] = RF_TOK_UNUSED; break;
            case 6: v->attr[i] = RF_TOK_BYTE; break;
            default: v->attr[i] = RF_TOK_UNDEFINED; break;
            }
        }
    }
    return RF_OK;
}

static rf_status load_merges(const rf_gguf *g, rf_vocab *v) {
    const void *data;
    rf_status st;
    /* merges: "left right", split at the first space after position 0; the first occurrence of
     * a pair keeps its rank */
    if (v->type == RF_VOCAB_BPE) {
        uint64_t nm;
        if ((st = rf_gguf_get_arr(g, "tokenizer.ggml.merges", RF_GGUF_STRING, &nm, &data))) {
            return rf_set_error(st, "tokenizer.ggml.merges (required for a gpt2 vocabulary): %s",
                              rf_last_error());
        }
        if (nm > INT32_MAX) {
            return rf_set_error(RF_ERR_FORMAT, "tokenizer.ggml.merges: too many merges");
        }
        const rf_gguf_str *ms = data;
        uint64_t mp = 0;
        for (uint64_t i = 0; i < nm; i++)
            if (ms[i].len > UINT32_MAX || rf_add_overflow_u64(mp, ms[i].len + 1, &mp)) {
                return rf_set_error(RF_ERR_FORMAT, "tokenizer.ggml.merges: merge %llu too long",
                                  (unsigned long long)i);
            }
        v->merge_pool = malloc(mp ? mp : 1);
        if (!v->merge_pool) {
            return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (merges)");
        }
        uint64_t mo = 0;
        for (uint64_t i = 0; i < nm; i++) {
            const char *w = ms[i].ptr;
            size_t wl = ms[i].len;
            const char *sp = wl > 1 ? memchr(w + 1, ' ', wl - 1) : NULL;
            if (!sp) continue; /* malformed: llama.cpp keeps an ("", "") pair that never matches */
            size_t ll = (size_t)(sp - w), rl = wl - ll - 1;
            char *k = v->merge_pool + mo;
            memcpy(k, w, ll);
            memcpy(k + ll, sp + 1, rl);
            mo += ll + rl;
            if (rf_strmap_get(&v->merges, k, ll + rl, (uint32_t)ll) >= 0) continue;
            if ((st = rf_strmap_put(&v->merges, k, ll + rl, (uint32_t)ll, (int32_t)i))) return st;
        }
    }
    return RF_OK;
}

static void load_special_ids(const rf_gguf *g, rf_vocab *v) {
    /* special ids: defaults out of range are disabled; keys in range override */
    struct {
        const char *key;
        int32_t *id;
    } sp[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},         {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.eot_token_id", &v->eot},         {"tokenizer.ggml.eom_token_id", &v->eom},
        {"tokenizer.ggml.unknown_token_id", &v->unk},     {"tokenizer.ggml.seperator_token_id", &v->sep},
        {"tokenizer.ggml.padding_token_id", &v->pad},     {"tokenizer.ggml.mask_token_id", &v->mask},
        {"tokenizer.ggml.fim_pre_token_id", &v->fim_pre}, {"tokenizer.ggml.fim_suf_token_id", &v->fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &v->fim_mid}, {"tokenizer.ggml.fim_pad_token_id", &v->fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &v->fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &v->fim_sep},
        {"tokenizer.ggml.prefix_token_id", &v->fim_pre},  {"tokenizer.ggml.suffix_token_id", &v->fim_suf},
        {"tokenizer.ggml.middle_token_id", &v->fim_mid},
    };
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        if (*sp[i].id >= v->n_tokens) {
            RF_LOGW("tokenizer: default %s = %d is out of the vocabulary, disabling", sp[i].key, *sp[i].id);
            *sp[i].id = -1;
        }
        uint32_t nid;
        if (!get_opt_u32(g, sp[i].key, &nid)) continue;
        if (nid >= (uint32_t)v->n_tokens)
            RF_LOGW("tokenizer: %s = %u is out of the vocabulary (%d tokens), keeping %d", sp[i].key,
                    nid, v->n_tokens, *sp[i].id);
        else
            *sp[i].id = (int32_t)nid;
    }
    get_opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos);
    get_opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos);
    /* Gemma 4 files that say add_bos = false were converted wrongly (llama.cpp overrides it) */
    if (v->bpe_spm_style && !v->add_bos) {
        RF_LOGW("tokenizer: tokenizer.ggml.add_bos_token = false overridden to true for the gemma4 tokenizer");
        v->add_bos = true;
    }
}

/* Control tokens and the end-of-generation set: by id, by text, and the per-family rules. */
static void mark_eog(rf_vocab *v) {
    /* Tokens recognised by their text (the converters do not always mark them). */
    detect(v, &v->eot, k_eot_texts);
    detect(v, &v->eom, k_eom_texts);
    detect(v, &v->fim_pre, k_fim_pre);
    detect(v, &v->fim_suf, k_fim_suf);
    detect(v, &v->fim_mid, k_fim_mid);
    detect(v, &v->fim_pad, k_fim_pad);
    detect(v, &v->fim_rep, k_fim_rep);
    detect(v, &v->fim_sep, k_fim_sep);
    for (int32_t i = 0; i < v->n_tokens; i++)
        if ((v->attr[i] & RF_TOK_CONTROL) && strstr(rf_tok_text(v, i), "unused")) v->attr[i] |= RF_TOK_UNUSED;

    /* end-of-generation set */
    int32_t fims[] = {v->fim_pad, v->fim_rep, v->fim_sep, v->eos, v->eot, v->eom};
    for (size_t i = 0; i < sizeof fims / sizeof fims[0]; i++)
        if (fims[i] >= 0) v->is_eog[fims[i]] = 1;
    static const char *const k_render[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    int32_t end_id = -1, s_id = -1;
    bool has_return = false, has_call = false, has_flush = false, has_tool_resp = false;
    /* by text, through the text -> id map (one id per text, as llama.cpp's token_to_id) */
    for (const char *const *t = k_eog_texts; *t; t++) {
        int32_t i = rf_text_to_token(v, *t, strlen(*t));
        if (i < 0) continue;
        v->is_eog[i] = 1;
        v->attr[i] |= RF_TOK_CONTROL;
    }
    for (const char *const *t = k_render; *t; t++) {
        int32_t i = rf_text_to_token(v, *t, strlen(*t));
        if (i >= 0) v->attr[i] = RF_TOK_USER_DEFINED;
    }
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (!v->is_eog[i]) continue;
        if (text_is(v, i, "<|return|>")) has_return = true;
        else if (text_is(v, i, "<|call|>") || text_is(v, i, "<|calls|>")) has_call = true;
        else if (text_is(v, i, "<|flush|>")) has_flush = true;
        else if (text_is(v, i, "<|end|>")) end_id = i;
        else if (text_is(v, i, "<|tool_response>")) has_tool_resp = true;
        else if (text_is(v, i, "</s>")) s_id = i;
    }
    /* gpt-oss / solar-open: <|end|> ends a message, not the generation */
    if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
        v->is_eog[end_id] = 0;
        v->attr[end_id] = RF_TOK_USER_DEFINED;
    }
    /* gemma4: </s> is ordinary text there */
    if (has_tool_resp && s_id >= 0) {
        v->is_eog[s_id] = 0;
        v->attr[s_id] = RF_TOK_NORMAL;
    }
}

static void strip_attrs(const rf_gguf *g, rf_vocab *v) {
    /* Per-model strip attributes llama.cpp sets by name (Phi-3: special tokens eat the
     * whitespace after them; jina-v2 / modern-bert: the mask token eats the whitespace before
     * it). */
    char low[256] = "";
    const char *gname = NULL;
    if (rf_gguf_find_key(g, "general.name") >= 0 && !rf_gguf_get_str(g, "general.name", &gname) && gname) {
        size_t k = 0;
        for (; gname[k] && k < sizeof low - 1; k++) low[k] = (char)tolower((unsigned char)gname[k]);
        low[k] = 0;
    }
    if (strstr(v->pre_name, "jina-v2-de") || strstr(v->pre_name, "jina-v2-es") ||
        strstr(v->pre_name, "jina-v2-code")) {
        int32_t id = rf_text_to_token(v, "<mask>", 6);
        if (id >= 0) v->attr[id] |= RF_TOK_LSTRIP;
    } else if (strstr(low, "phi-3") || strstr(low, "phi3")) {
        for (size_t i = 0; i < v->n_special; i++) v->attr[v->special[i]] |= RF_TOK_RSTRIP;
        int32_t id = rf_text_to_token(v, "</s>", 4);
        if (id >= 0) v->attr[id] |= RF_TOK_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (int i = 0; i < 3; i++) {
            id = rf_text_to_token(v, keep[i], strlen(keep[i]));
            if (id >= 0) v->attr[id] &= (uint16_t)~RF_TOK_RSTRIP;
        }
    } else if (strstr(low, "modern-bert")) {
        int32_t id = rf_text_to_token(v, "[MASK]", 6);
        if (id >= 0) v->attr[id] |= RF_TOK_LSTRIP;
    }
}

rf_status rf_vocab_load(const rf_gguf *g, rf_vocab **out) {
    if (!g || !out) return rf_set_error(RF_ERR_INVALID_ARG, "rf_vocab_load: NULL argument");
    *out = NULL;
    rf_status st;
    const char *model = NULL;
    if ((st = rf_gguf_get_str(g, "tokenizer.ggml.model", &model)))
        return rf_set_error(st, "tokenizer.ggml.model: %s", rf_last_error());
    rf_vocab *v = calloc(1, sizeof *v);
    if (!v) return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory");
    snprintf(v->model_name, sizeof v->model_name, "%s", model);
    const char *pre = NULL;
    if (rf_gguf_find_key(g, "tokenizer.ggml.pre") >= 0 &&
        (st = rf_gguf_get_str(g, "tokenizer.ggml.pre", &pre)))
        goto fail;
    v->eot = v->eom = v->sep = v->pad = v->mask = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;

    if ((st = load_kind(v, model, pre))) goto fail;
    get_opt_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix);
    get_opt_bool(g, "tokenizer.ggml.remove_extra_whitespaces", &v->remove_extra_ws);

    if ((st = load_tokens(g, v))) goto fail;
    if ((st = load_scores_types(g, v))) goto fail;
    if ((st = load_merges(g, v))) goto fail;
    load_special_ids(g, v);
    mark_eog(v);
    if ((st = build_special(v))) goto fail;
    if ((st = rf_detok_build_cache(v))) goto fail;

    strip_attrs(g, v);
    RF_LOGI("tokenizer: %s vocabulary, %d tokens, pre '%s', bos %d eos %d eot %d, add_bos %d",
            model, v->n_tokens, v->pre_name, v->bos, v->eos, v->eot, v->add_bos);
    *out = v;
    return RF_OK;
fail:
    rf_vocab_free(v);
    return st;
}

/* ---- accessors --------------------------------------------------------------------------- */

int32_t rf_vocab_n_tokens(const rf_vocab *v) { return v ? v->n_tokens : 0; }
int32_t rf_vocab_bos(const rf_vocab *v) { return v ? v->bos : -1; }
int32_t rf_vocab_eos(const rf_vocab *v) { return v ? v->eos : -1; }
int32_t rf_vocab_eot(const rf_vocab *v) { return v ? v->eot : -1; }
bool rf_vocab_add_bos(const rf_vocab *v) { return v && v->add_bos; }
bool rf_vocab_is_eog(const rf_vocab *v, int32_t id) {
    return v && id >= 0 && id < v->n_tokens && v->is_eog[id];
}
const char *rf_vocab_token_text(const rf_vocab *v, int32_t id) {
    if (!v || id < 0 || id >= v->n_tokens) return NULL;
    return rf_tok_text(v, id);
}
