/* synth_vocab.c — builds the synthetic tokenizer vocabularies of `rocmforge mkmodel`.
 * Merges are first learned (real BPE training) from an embedded English sample, then extended with
 * deterministic synthetic merges of alphabetic pieces until the family's vocabulary size is reached.
 * Every merge "a b" has a, b and ab in the vocabulary; every token string is unique. */
#include "synth_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth_rng.h"

/* ---- GPT-2 byte <-> unicode mapping ------------------------------------------------------- */

static bool byte_is_printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t synth_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    /* the non-printable bytes, in increasing order, map to 256, 257, ... */
    uint32_t n = 0;
    for (int x = 0; x < b; x++)
        if (!byte_is_printable(x)) n++;
    return 256 + n;
}

static size_t utf8_put(char *dst, uint32_t cp) {
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    dst[0] = (char)(0xE0 | (cp >> 12));
    dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

static size_t utf8_len(uint8_t c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    return 4;
}

/* ---- builder: token arena + hash set ------------------------------------------------------ */

typedef struct vbuild {
    char *buf;
    size_t len, cap;
    size_t *off; /* token i text at buf + off[i] */
    uint32_t *tlen;
    uint8_t *alpha; /* 1: letters only, 2: marker + letters, 0: other */
    uint32_t n, max;
    uint32_t *ht; /* id + 1, 0 = empty */
    uint32_t ht_mask;
    char *mbuf; /* merges "a b\0" */
    size_t mlen, mcap;
    size_t *moff;
    uint32_t nm, mmax;
    const char *marker; /* "Ġ" (BPE) or "▁" (SPM) */
    size_t marker_len;
} vbuild;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return synth_mix64(h);
}

static bool vb_init(vbuild *b, uint32_t max_tokens, uint32_t max_merges, const char *marker) {
    memset(b, 0, sizeof *b);
    b->max = max_tokens;
    b->mmax = max_merges;
    b->marker = marker;
    b->marker_len = strlen(marker);
    uint32_t cap = 64;
    while (cap < 2u * max_tokens + 16) cap *= 2;
    b->ht_mask = cap - 1;
    b->ht = calloc(cap, sizeof *b->ht);
    b->off = malloc((size_t)max_tokens * sizeof *b->off);
    b->tlen = malloc((size_t)max_tokens * sizeof *b->tlen);
    b->alpha = malloc(max_tokens);
    b->moff = malloc(((size_t)max_merges + 1) * sizeof *b->moff);
    b->cap = (size_t)max_tokens * 8 + 4096;
    b->buf = malloc(b->cap);
    b->mcap = (size_t)max_merges * 12 + 4096;
    b->mbuf = malloc(b->mcap);
    return b->ht && b->off && b->tlen && b->alpha && b->moff && b->buf && b->mbuf;
}

static void vb_free(vbuild *b) {
    free(b->buf);
    free(b->off);
    free(b->tlen);
    free(b->alpha);
    free(b->ht);
    free(b->mbuf);
    free(b->moff);
    memset(b, 0, sizeof *b);
}

static const char *vb_str(const vbuild *b, uint32_t id) { return b->buf + b->off[id]; }

static int64_t vb_find(const vbuild *b, const char *s, size_t n) {
    uint32_t i = (uint32_t)hash_bytes(s, n) & b->ht_mask;
    for (;;) {
        uint32_t e = b->ht[i];
        if (!e) return -1;
        uint32_t id = e - 1;
        if (b->tlen[id] == n && !memcmp(vb_str(b, id), s, n)) return id;
        i = (i + 1) & b->ht_mask;
    }
}

static bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* 1: lowercase letters; 2: marker + letters (first may be capital); 3: Capitalised word;
 * 0: anything else. Synthetic merges only combine these, so they look like word pieces. */
static uint8_t classify(const vbuild *b, const char *s, size_t n) {
    size_t i = 0;
    uint8_t kind = 1;
    if (n >= b->marker_len && !memcmp(s, b->marker, b->marker_len)) {
        i = b->marker_len;
        kind = 2;
    }
    if (i == n) return 0;
    if (s[i] >= 'A' && s[i] <= 'Z') {
        if (kind == 1) kind = 3;
        i++;
    }
    for (; i < n; i++)
        if (!(s[i] >= 'a' && s[i] <= 'z')) return 0;
    return kind;
}

/* Appends a token; returns its id, or -1 on OOM / full. Duplicates must be checked by the caller. */
static int64_t vb_add(vbuild *b, const char *s, size_t n) {
    if (b->n >= b->max) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap * 2 + n + 1;
        char *nb = realloc(b->buf, nc);
        if (!nb) return -1;
        b->buf = nb;
        b->cap = nc;
    }
    uint32_t id = b->n++;
    b->off[id] = b->len;
    b->tlen[id] = (uint32_t)n;
    memcpy(b->buf + b->len, s, n);
    b->buf[b->len + n] = 0;
    b->len += n + 1;
    b->alpha[id] = classify(b, s, n);
    uint32_t i = (uint32_t)hash_bytes(s, n) & b->ht_mask;
    while (b->ht[i]) i = (i + 1) & b->ht_mask;
    b->ht[i] = id + 1;
    return id;
}

static int64_t vb_add_cstr(vbuild *b, const char *s) { return vb_add(b, s, strlen(s)); }

/* Records merge "a b" (ids of existing tokens). */
static bool vb_merge(vbuild *b, uint32_t a, uint32_t c) {
    if (b->nm >= b->mmax) return false;
    size_t need = b->tlen[a] + 1 + b->tlen[c] + 1;
    if (b->mlen + need > b->mcap) {
        size_t nc = b->mcap * 2 + need;
        char *nb = realloc(b->mbuf, nc);
        if (!nb) return false;
        b->mbuf = nb;
        b->mcap = nc;
    }
    char *d = b->mbuf + b->mlen;
    memcpy(d, vb_str(b, a), b->tlen[a]);
    d[b->tlen[a]] = ' ';
    memcpy(d + b->tlen[a] + 1, vb_str(b, c), b->tlen[c]);
    d[need - 1] = 0;
    b->moff[b->nm++] = b->mlen;
    b->mlen += need;
    return true;
}

/* Creates (or finds) token a+c and records the merge. Returns the id or -1 on failure. */
static int64_t vb_concat(vbuild *b, uint32_t a, uint32_t c, bool record_merge) {
    char tmp[256];
    size_t n = (size_t)b->tlen[a] + b->tlen[c];
    if (n >= sizeof tmp) return -1;
    memcpy(tmp, vb_str(b, a), b->tlen[a]);
    memcpy(tmp + b->tlen[a], vb_str(b, c), b->tlen[c]);
    int64_t id = vb_find(b, tmp, n);
    if (id < 0) id = vb_add(b, tmp, n);
    if (id < 0) return -1;
    if (record_merge && !vb_merge(b, a, c)) return -1;
    return id;
}

/* ---- pre-tokenizing the sample into word types -------------------------------------------- */

typedef struct word {
    uint32_t *sym; /* symbol (token) ids */
    uint32_t n;
    uint32_t count;
} word;

typedef struct words {
    word *w;
    uint32_t n, cap;
    uint32_t *pool; /* all symbols */
    size_t pool_len, pool_cap;
} words;

static bool words_add(words *ws, const uint32_t *sym, uint32_t n) {
    for (uint32_t i = 0; i < ws->n; i++) {
        if (ws->w[i].n == n && !memcmp(ws->w[i].sym, sym, n * sizeof *sym)) {
            ws->w[i].count++;
            return true;
        }
    }
    if (ws->n == ws->cap) {
        uint32_t nc = ws->cap ? ws->cap * 2 : 256;
        word *nw = realloc(ws->w, nc * sizeof *nw);
        if (!nw) return false;
        ws->w = nw;
        ws->cap = nc;
    }
    /* the pool is sized up front (sample length), so pointers into it stay valid */
    if (ws->pool_len + n > ws->pool_cap) return false;
    uint32_t *dst = ws->pool + ws->pool_len;
    memcpy(dst, sym, n * sizeof *sym);
    ws->pool_len += n;
    ws->w[ws->n++] = (word){dst, n, 1};
    return true;
}

static void words_free(words *ws) {
    free(ws->w);
    free(ws->pool);
    memset(ws, 0, sizeof *ws);
}

typedef enum { CH_SPACE, CH_ALPHA, CH_DIGIT, CH_NEWLINE, CH_PUNCT } chclass;

static chclass char_class(uint8_t c) {
    if (c == ' ') return CH_SPACE;
    if (c == '\n' || c == '\t' || c == '\r') return CH_NEWLINE;
    if (is_ascii_alpha((char)c) || c >= 0x80) return CH_ALPHA;
    if (c >= '0' && c <= '9') return CH_DIGIT;
    return CH_PUNCT;
}

/* Splits the sample into chunks the way GPT-2-style regexes do (" word", " 123", " ...", "\n\n",
 * runs of spaces) and calls `emit` with each chunk. Digit runs are cut to `max_digits`. */
typedef bool (*chunk_fn)(void *u, const char *s, size_t n);

static bool split_sample(const char *t, int max_digits, chunk_fn emit, void *u) {
    size_t n = strlen(t), i = 0;
    while (i < n) {
        size_t s = i;
        chclass c = char_class((uint8_t)t[i]);
        if (c == CH_SPACE) {
            size_t j = i;
            while (j < n && t[j] == ' ') j++;
            if (j < n && j - i == 1 && char_class((uint8_t)t[j]) != CH_NEWLINE) {
                i = j; /* a single space prefixes the following chunk */
                c = char_class((uint8_t)t[i]);
            } else {
                /* a run of spaces: all but the last belong together (the last prefixes the next) */
                size_t e = (j < n && char_class((uint8_t)t[j]) != CH_NEWLINE) ? j - 1 : j;
                if (!emit(u, t + s, e - s)) return false;
                i = e;
                continue;
            }
        }
        size_t j = i;
        if (c == CH_NEWLINE) {
            while (j < n && char_class((uint8_t)t[j]) == CH_NEWLINE) j++;
        } else if (c == CH_DIGIT) {
            while (j < n && char_class((uint8_t)t[j]) == CH_DIGIT && (int)(j - i) < max_digits) j++;
        } else {
            while (j < n && char_class((uint8_t)t[j]) == c) j++;
        }
        if (!emit(u, t + s, j - s)) return false;
        i = j;
    }
    return true;
}

typedef struct bpe_ctx {
    vbuild *b;
    words *ws;
    uint32_t byte_id[256];
} bpe_ctx;

static bool bpe_chunk(void *u, const char *s, size_t n) {
    bpe_ctx *c = u;
    uint32_t sym[512];
    if (n > 512) n = 512;
    for (size_t i = 0; i < n; i++) sym[i] = c->byte_id[(uint8_t)s[i]];
    return words_add(c->ws, sym, (uint32_t)n);
}

typedef struct spm_ctx {
    vbuild *b;
    words *ws;
    bool oom;
} spm_ctx;

/* SPM: a leading space becomes "▁"; each UTF-8 character is one initial piece (added on first
 * sight). Newlines and tabs are not pieces (byte fallback covers them). */
static bool spm_chunk(void *u, const char *s, size_t n) {
    spm_ctx *c = u;
    uint32_t sym[512];
    uint32_t k = 0;
    size_t i = 0;
    if (char_class((uint8_t)s[0]) == CH_NEWLINE) return true;
    while (i < n && k < 512) {
        const char *p = s + i;
        size_t l = 1;
        if (s[i] == ' ') {
            p = "\xE2\x96\x81";
            l = 3;
            i += 1;
        } else {
            l = utf8_len((uint8_t)s[i]);
            if (i + l > n) l = n - i;
            i += l;
        }
        int64_t id = vb_find(c->b, p, l);
        if (id < 0) id = vb_add(c->b, p, l);
        if (id < 0) {
            c->oom = true;
            return false;
        }
        sym[k++] = (uint32_t)id;
    }
    return words_add(c->ws, sym, k);
}

/* ---- BPE training on the word types ------------------------------------------------------- */

typedef struct pair_ent {
    uint64_t key; /* (a << 32 | b) + 1, 0 = empty */
    uint32_t count;
} pair_ent;

/* Learns merges until `limit` tokens exist or no pair occurs twice. */
static bool train_merges(vbuild *b, words *ws, uint32_t limit) {
    uint32_t cap = 1;
    while (cap < 4 * (uint32_t)ws->pool_len + 64) cap *= 2;
    pair_ent *tab = malloc(cap * sizeof *tab);
    if (!tab) return false;
    bool ok = true;
    while (b->n < limit) {
        memset(tab, 0, cap * sizeof *tab);
        uint64_t best_key = 0;
        uint32_t best = 0;
        for (uint32_t w = 0; w < ws->n; w++) {
            const word *wd = &ws->w[w];
            for (uint32_t i = 0; i + 1 < wd->n; i++) {
                uint64_t key = ((uint64_t)wd->sym[i] << 32 | wd->sym[i + 1]) + 1;
                uint32_t h = (uint32_t)synth_mix64(key) & (cap - 1);
                while (tab[h].key && tab[h].key != key) h = (h + 1) & (cap - 1);
                tab[h].key = key;
                tab[h].count += wd->count;
                /* deterministic tie-break: the smaller key wins */
                if (tab[h].count > best || (tab[h].count == best && key < best_key)) {
                    best = tab[h].count;
                    best_key = key;
                }
            }
        }
        if (best < 2) break;
        uint32_t a = (uint32_t)((best_key - 1) >> 32), c = (uint32_t)((best_key - 1) & 0xffffffffu);
        int64_t id = vb_concat(b, a, c, true);
        if (id < 0) {
            ok = false;
            break;
        }
        for (uint32_t w = 0; w < ws->n; w++) {
            word *wd = &ws->w[w];
            uint32_t k = 0;
            for (uint32_t i = 0; i < wd->n; i++) {
                if (i + 1 < wd->n && wd->sym[i] == a && wd->sym[i + 1] == c) {
                    wd->sym[k++] = (uint32_t)id;
                    i++;
                } else {
                    wd->sym[k++] = wd->sym[i];
                }
            }
            wd->n = k;
        }
    }
    free(tab);
    return ok;
}

/* Synthetic merges: word piece + lowercase continuation (no marker), at most 14 bytes,
 * new strings only, drawn from a fixed-seed stream so the vocabulary never depends on --seed. */
static bool synth_merges(vbuild *b, uint32_t limit, uint64_t stream) {
    uint32_t *pa = malloc((size_t)limit * sizeof *pa), *pb = malloc((size_t)limit * sizeof *pb);
    if (!pa || !pb) {
        free(pa);
        free(pb);
        return false;
    }
    uint32_t na = 0, nb = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        if (b->alpha[i]) pa[na++] = i;
        if (b->alpha[i] == 1) pb[nb++] = i;
    }
    synth_rng r = {stream};
    bool ok = na > 0 && nb > 0;
    while (ok && b->n < limit) {
        uint32_t a = 0, c = 0;
        int tries = 0;
        for (;; tries++) {
            if (tries > 100000) {
                ok = false;
                break;
            }
            /* the shorter of two draws: short pieces combine into plausible words */
            uint32_t a1 = pa[synth_rng_below(&r, na)], a2 = pa[synth_rng_below(&r, na)];
            uint32_t c1 = pb[synth_rng_below(&r, nb)], c2 = pb[synth_rng_below(&r, nb)];
            a = b->tlen[a2] < b->tlen[a1] ? a2 : a1;
            c = b->tlen[c2] < b->tlen[c1] ? c2 : c1;
            uint32_t n = b->tlen[a] + b->tlen[c];
            if (n > 14) continue;
            char tmp[32];
            memcpy(tmp, vb_str(b, a), b->tlen[a]);
            memcpy(tmp + b->tlen[a], vb_str(b, c), b->tlen[c]);
            if (vb_find(b, tmp, n) < 0) break;
        }
        if (!ok) break;
        int64_t id = vb_concat(b, a, c, true);
        if (id < 0) {
            ok = false;
            break;
        }
        pa[na++] = (uint32_t)id;
        if (b->alpha[id] == 1) pb[nb++] = (uint32_t)id;
    }
    free(pa);
    free(pb);
    return ok;
}

/* ---- families ----------------------------------------------------------------------------- */

static const char *const LLAMA3_SPECIAL_HEAD[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
};

static const char *const QWEN2_SPECIALS[] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
};
#define QWEN2_N_SPECIAL 22
#define QWEN2_FIRST_USER_DEFINED 14 /* <tool_call> onwards are added, non-special tokens */

static const char *const SMOLLM_SPECIALS[] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
    "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>",
    "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<jupyter_script>",
    "<empty_output>",
};
#define SMOLLM_N_SPECIAL 17

/* Moves builder storage into the output vocabulary (pointer arrays over the arenas). */
static rf_status finish(vbuild *b, synth_vocab *v) {
    v->n_tokens = b->n;
    v->tokens = malloc((size_t)b->n * sizeof *v->tokens);
    v->merges = malloc(((size_t)b->nm + 1) * sizeof *v->merges);
    if (!v->tokens || !v->merges) return rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
    for (uint32_t i = 0; i < b->n; i++) v->tokens[i] = b->buf + b->off[i];
    for (uint32_t i = 0; i < b->nm; i++) v->merges[i] = b->mbuf + b->moff[i];
    v->n_merges = b->nm;
    v->arena = b->buf;
    v->merge_arena = b->mbuf;
    b->buf = NULL;
    b->mbuf = NULL;
    return RF_OK;
}

static rf_status build_bpe(const synth_vocab_spec *spec, synth_vocab *v) {
    uint32_t n_vocab = spec->n_vocab, n_regular, n_before = 0;
    switch (spec->family) {
    case SYNTH_VOCAB_LLAMA3:
        if (spec->n_special < 11 || spec->n_special > 256 || n_vocab < spec->n_special + 300)
            return rf_set_error(RF_ERR_INVALID_ARG,
                                "mkmodel: llama3 vocabulary needs 11..256 specials and >= 300 "
                                "regular tokens (n_vocab %u, n_special %u)",
                                n_vocab, spec->n_special);
        n_regular = n_vocab - spec->n_special;
        break;
    case SYNTH_VOCAB_QWEN2:
        n_regular = spec->n_special;
        if (n_regular < 300 || (uint64_t)n_regular + QWEN2_N_SPECIAL > n_vocab)
            return rf_set_error(RF_ERR_INVALID_ARG,
                                "mkmodel: qwen2 vocabulary: %u regular + %d special tokens do not "
                                "fit in %u",
                                n_regular, QWEN2_N_SPECIAL, n_vocab);
        break;
    case SYNTH_VOCAB_SMOLLM:
        if (n_vocab < SMOLLM_N_SPECIAL + 300)
            return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: smollm vocabulary too small (%u)",
                                n_vocab);
        n_before = SMOLLM_N_SPECIAL;
        n_regular = n_vocab - n_before;
        break;
    default:
        return rf_set_error(RF_ERR_INTERNAL, "mkmodel: not a BPE family");
    }

    vbuild b;
    words ws = {0};
    bpe_ctx bc;
    rf_status st = RF_OK;
    if (!vb_init(&b, n_vocab, n_vocab, "\xC4\xA0" /* Ġ */)) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < n_before; i++) vb_add_cstr(&b, SMOLLM_SPECIALS[i]);
    /* the 256 byte tokens in bytes_to_unicode order: printable bytes first, then the rest */
    for (int pass = 0; pass < 2; pass++) {
        for (int x = 0; x < 256; x++) {
            if (byte_is_printable(x) != (pass == 0)) continue;
            char s[4];
            size_t l = utf8_put(s, synth_byte_to_cp((uint8_t)x));
            int64_t id = vb_add(&b, s, l);
            if (id < 0) {
                st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
                goto done;
            }
            bc.byte_id[x] = (uint32_t)id;
        }
    }
    /* training text in byte-level form */
    ws.pool_cap = strlen(synth_sample_text) + 16;
    ws.pool = malloc(ws.pool_cap * sizeof *ws.pool);
    if (!ws.pool) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    bc.b = &b;
    bc.ws = &ws;
    int max_digits = spec->family == SYNTH_VOCAB_QWEN2 ? 1 : 3;
    if (!split_sample(synth_sample_text, max_digits, bpe_chunk, &bc) ||
        !train_merges(&b, &ws, n_before + n_regular) ||
        !synth_merges(&b, n_before + n_regular, 0x6d6b6d6f64656cull ^ n_vocab)) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: could not build %u tokens", n_vocab);
        goto done;
    }
    uint32_t first_special = b.n;
    if (spec->family == SYNTH_VOCAB_LLAMA3) {
        for (uint32_t i = 0; i < spec->n_special; i++) {
            char name[64];
            if (i < 11)
                snprintf(name, sizeof name, "%s", LLAMA3_SPECIAL_HEAD[i]);
            else
                snprintf(name, sizeof name, "<|reserved_special_token_%u|>", i - 8);
            vb_add_cstr(&b, name);
        }
    } else if (spec->family == SYNTH_VOCAB_QWEN2) {
        for (uint32_t i = 0; i < QWEN2_N_SPECIAL; i++) vb_add_cstr(&b, QWEN2_SPECIALS[i]);
        while (b.n < n_vocab) {
            char name[32];
            snprintf(name, sizeof name, "[PAD%u]", b.n);
            vb_add_cstr(&b, name);
        }
    }
    if (b.n != n_vocab) {
        st = rf_set_error(RF_ERR_INTERNAL, "mkmodel: vocabulary has %u tokens, want %u", b.n,
                          n_vocab);
        goto done;
    }
    v->types = malloc((size_t)n_vocab * sizeof *v->types);
    if (!v->types) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < n_vocab; i++) v->types[i] = SYNTH_TOK_NORMAL;
    v->bos = v->eos = v->eot = v->unk = v->pad = -1;
    v->add_bos = v->add_eos = false;
    switch (spec->family) {
    case SYNTH_VOCAB_LLAMA3:
        for (uint32_t i = first_special; i < n_vocab; i++) v->types[i] = SYNTH_TOK_CONTROL;
        v->bos = (int32_t)first_special;
        v->eos = v->eot = (int32_t)first_special + 9; /* <|eot_id|>, as the Instruct models */
        v->add_bos = true;
        v->chat_template = synth_template_llama3;
        break;
    case SYNTH_VOCAB_QWEN2:
        for (uint32_t i = 0; i < QWEN2_N_SPECIAL; i++)
            v->types[first_special + i] =
                i < QWEN2_FIRST_USER_DEFINED ? SYNTH_TOK_CONTROL : SYNTH_TOK_USER_DEFINED;
        for (uint32_t i = first_special + QWEN2_N_SPECIAL; i < n_vocab; i++)
            v->types[i] = SYNTH_TOK_UNUSED;
        v->bos = v->pad = (int32_t)first_special; /* <|endoftext|> */
        v->eos = (int32_t)first_special + 2;       /* <|im_end|> */
        v->chat_template = synth_template_qwen2;
        break;
    case SYNTH_VOCAB_SMOLLM:
        for (uint32_t i = 0; i < SMOLLM_N_SPECIAL; i++) v->types[i] = SYNTH_TOK_CONTROL;
        v->unk = 0;
        v->bos = 1;
        v->eos = v->pad = 2;
        v->chat_template = synth_template_smollm;
        break;
    default:
        break;
    }
    st = finish(&b, v);
done:
    vb_free(&b);
    words_free(&ws);
    return st;
}

/* Gemma 4's fixed tokens: pad, eos, bos, unk, mask, the chat-turn and tool markers and </s>
 * (an ordinary token there: llama.cpp drops it from the end-of-generation set when
 * <|tool_response> exists), then the bytes. */
static const char *const k_gemma4_fixed[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>",
                                             "<|tool_response>", "<tool_response|>", "<|channel>", "<channel|>", "</s>"};
#define N_GEMMA4_FIXED (sizeof k_gemma4_fixed / sizeof k_gemma4_fixed[0])

/* gemma4 extras: newline-run tokens (taken whole by the tokenizer's newline rule) and space-run
 * tokens with their merges (ranked first), as Gemma's real vocabulary has. */
static bool add_gemma4_runs(vbuild *b) {
    static const char *const nl[] = {"\n", "\n\n", "\n\n\n"};
    for (int i = 0; i < 3; i++)
        if (vb_find(b, nl[i], strlen(nl[i])) < 0 && vb_add_cstr(b, nl[i]) < 0) return false;
    int64_t sp = vb_find(b, "\xE2\x96\x81", 3);
    if (sp < 0) return false;
    int64_t sp2 = vb_concat(b, (uint32_t)sp, (uint32_t)sp, true);
    return sp2 >= 0 && vb_concat(b, (uint32_t)sp2, (uint32_t)sp2, true) >= 0;
}

/* SentencePiece vocabulary; gemma4: the same pieces with Gemma 4's fixed tokens, newline and
 * space runs, and the merge list kept (its tokenizer is BPE over SPM-style text). */
static rf_status build_spm(const synth_vocab_spec *spec, synth_vocab *v) {
    const bool g4 = spec->family == SYNTH_VOCAB_GEMMA4;
    const uint32_t n_vocab = spec->n_vocab, n_named = g4 ? (uint32_t)N_GEMMA4_FIXED : 3, n_fixed = n_named + 256;
    if (n_vocab < n_fixed + 300)
        return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: SPM vocabulary too small (%u)", n_vocab);
    const uint32_t n_pieces = n_vocab - n_fixed;
    vbuild b;
    words ws = {0};
    rf_status st = RF_OK;
    uint32_t *order = NULL;
    if (!vb_init(&b, n_vocab, n_vocab, "\xE2\x96\x81" /* ▁ */)) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    /* fixed tokens first, so pieces can never collide with them */
    if (g4) {
        for (size_t i = 0; i < N_GEMMA4_FIXED; i++) vb_add_cstr(&b, k_gemma4_fixed[i]);
    } else {
        vb_add_cstr(&b, "<unk>");
        vb_add_cstr(&b, "<s>");
        vb_add_cstr(&b, "</s>");
    }
    for (int x = 0; x < 256; x++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", x);
        vb_add_cstr(&b, s);
    }
    ws.pool_cap = strlen(synth_sample_text) + 16;
    ws.pool = malloc(ws.pool_cap * sizeof *ws.pool);
    if (!ws.pool) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    spm_ctx sc = {&b, &ws, false};
    if (!split_sample(synth_sample_text, 1, spm_chunk, &sc)) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    /* every ASCII letter is a piece even if the sample lacks it */
    for (char c = 'A'; c <= 'z'; c++) {
        if (!is_ascii_alpha(c)) continue;
        if (vb_find(&b, &c, 1) < 0 && vb_add(&b, &c, 1) < 0) {
            st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
            goto done;
        }
    }
    const uint32_t first_merged = b.n;
    if (g4 && !add_gemma4_runs(&b)) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    if (!train_merges(&b, &ws, n_vocab) || !synth_merges(&b, n_vocab, 0x73706d766f636162ull ^ n_vocab)) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: could not build %u tokens", n_vocab);
        goto done;
    }
    if (b.n != n_vocab) {
        st = rf_set_error(RF_ERR_INTERNAL, "mkmodel: vocabulary has %u tokens, want %u", b.n, n_vocab);
        goto done;
    }
    /* final order as in Llama's tokenizer.model: fixed tokens, merged pieces by rank, then the
     * single characters; scores fall with the id so earlier merges win in the SPM tokenizer */
    order = malloc((size_t)n_vocab * sizeof *order);
    v->types = malloc((size_t)n_vocab * sizeof *v->types);
    v->scores = malloc((size_t)n_vocab * sizeof *v->scores);
    if (!order || !v->types || !v->scores) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_fixed; i++) order[k++] = i;
    for (uint32_t i = first_merged; i < n_vocab; i++) order[k++] = i;
    for (uint32_t i = n_fixed; i < first_merged; i++) order[k++] = i;
    (void)n_pieces;
    st = finish(&b, v);
    if (st) goto done;
    const char **sorted = malloc((size_t)n_vocab * sizeof *sorted);
    if (!sorted) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: vocabulary: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < n_vocab; i++) sorted[i] = v->tokens[order[i]];
    free(v->tokens);
    v->tokens = sorted;
    if (!g4) {
        free(v->merges); /* SPM files carry no merge list */
        v->merges = NULL;
        v->n_merges = 0;
    }
    const uint32_t unk_id = g4 ? 3 : 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        v->types[i] = i == unk_id ? SYNTH_TOK_UNKNOWN : i < n_named ? SYNTH_TOK_CONTROL
                    : i < n_fixed ? SYNTH_TOK_BYTE : SYNTH_TOK_NORMAL;
        v->scores[i] = i < n_fixed ? 0.0f : (float)n_fixed - (float)i;
    }
    v->is_spm = !g4;
    v->model = g4 ? "gemma4" : "llama";
    v->unk = (int32_t)unk_id;
    v->bos = g4 ? 2 : 1;
    v->eos = g4 ? 1 : 2;
    v->eot = -1;
    v->pad = g4 ? 0 : -1;
    v->add_bos = true;
    v->add_eos = false;
    v->chat_template = g4 ? synth_template_gemma4 : synth_template_llama2;
done:
    free(order);
    vb_free(&b);
    words_free(&ws);
    return st;
}

rf_status synth_vocab_build(const synth_vocab_spec *spec, const char *pre, synth_vocab *out) {
    memset(out, 0, sizeof *out);
    const bool spm_text = spec->family == SYNTH_VOCAB_LLAMA2 || spec->family == SYNTH_VOCAB_GEMMA4;
    rf_status st = spm_text ? build_spm(spec, out) : build_bpe(spec, out);
    if (st) {
        synth_vocab_free(out);
        return st;
    }
    if (!out->model) out->model = "gpt2";
    out->pre = out->is_spm ? NULL : spec->family == SYNTH_VOCAB_GEMMA4 ? "gemma4" : pre;
    return RF_OK;
}

void synth_vocab_free(synth_vocab *v) {
    if (!v) return;
    free((void *)v->tokens);
    free(v->types);
    free(v->scores);
    free((void *)v->merges);
    free(v->arena);
    free(v->merge_arena);
    memset(v, 0, sizeof *v);
}
