/* detok.c — ids back to text: per-token pieces (byte tokens decoded, SPM U+2581 -> space,
 * GPT-2 byte mapping undone), batch detokenization with llama.cpp's leading-space and
 * clean-up rules, a streaming detokenizer that emits exactly the batch text, never half a
 * UTF-8 character (invalid bytes come out as U+FFFD), and on top of it a generated choice's text
 * output (detok.h), which also holds back a tail that could still become a stop string. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <string.h>

#include "tokenizer/detok.h"
#include "tokenizer/tokenizer_internal.h"

/* ---- pieces ------------------------------------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static bool sb_put(sbuf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return false;
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The piece of one token with render_special = true (the cache llama.cpp keeps). */
static bool piece_of(const rf_vocab *v, int32_t id, sbuf *b) {
    const char *t = rf_tok_text(v, id);
    size_t n = v->len[id];
    uint16_t a = v->attr[id];
    if (a & (RF_TOK_UNKNOWN | RF_TOK_CONTROL | RF_TOK_USER_DEFINED)) return sb_put(b, t, n);
    if (a & RF_TOK_NORMAL) {
        if (v->type == RF_VOCAB_SPM || v->escape_whitespaces) {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && !memcmp(t + i, "\xE2\x96\x81", 3)) {
                    if (!sb_put(b, " ", 1)) return false;
                    i += 3;
                } else {
                    if (!sb_put(b, t + i, 1)) return false;
                    i++;
                }
            }
            return true;
        }
        /* byte-level BPE: each codepoint stands for one byte */
        const unsigned char *u = (const unsigned char *)t;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t l = rf_utf8_decode(u + i, n - i, &cp);
            int byte = l ? rf_gpt2_byte_of_cp(cp) : -1;
            if (byte >= 0) {
                unsigned char c = (unsigned char)byte;
                if (!sb_put(b, &c, 1)) return false;
                i += l;
                continue;
            }
            /* not a byte stand-in: llama.cpp writes [UNK_BYTE_0x<hex of the char><text>] */
            if (!l) l = 1;
            char tmp[32];
            if (!sb_put(b, "[UNK_BYTE_0x", 12)) return false;
            for (size_t j = 0; j < l; j++) {
                snprintf(tmp, sizeof tmp, "%02x", u[i + j]);
                if (!sb_put(b, tmp, 2)) return false;
            }
            if (!sb_put(b, t, n) || !sb_put(b, "]", 1)) return false;
            i += l;
        }
        return true;
    }
    if (a & RF_TOK_BYTE) {
        if (n >= 6 && hexval(t[3]) >= 0 && hexval(t[4]) >= 0) {
            unsigned char c = (unsigned char)(hexval(t[3]) * 16 + hexval(t[4]));
            return sb_put(b, &c, 1);
        }
        return sb_put(b, t, n);
    }
    return true; /* unused / undefined: nothing */
}

rf_status rf_detok_build_cache(rf_vocab *v) {
    sbuf b = {0};
    v->piece_off = malloc((size_t)v->n_tokens * sizeof *v->piece_off);
    v->piece_len = malloc((size_t)v->n_tokens * sizeof *v->piece_len);
    if (!v->piece_off || !v->piece_len) goto oom;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        size_t start = b.n;
        if (!piece_of(v, i, &b) || !sb_put(&b, "", 0)) goto oom;
        v->piece_off[i] = start;
        v->piece_len[i] = (uint32_t)(b.n - start);
        if (!sb_put(&b, "\0", 1)) goto oom;
    }
    v->piece_pool = b.p;
    return RF_OK;
oom:
    free(b.p);
    return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (piece cache)");
}

/* Piece of id (empty for control/unknown unless render_special); NULL for an invalid id. */
static const char *piece(const rf_vocab *v, int32_t id, bool render_special, size_t *n) {
    if (id < 0 || id >= v->n_tokens) return NULL;
    if (!render_special && (v->attr[id] & (RF_TOK_UNKNOWN | RF_TOK_CONTROL))) {
        *n = 0;
        return "";
    }
    *n = v->piece_len[id];
    return v->piece_pool + v->piece_off[id];
}

rf_status rf_token_to_piece(const rf_vocab *v, int32_t id, bool render_special, char *buf,
                            size_t cap, size_t *n_out) {
    if (!v || !n_out || (!buf && cap)) return rf_set_error(RF_ERR_INVALID_ARG, "rf_token_to_piece: NULL argument");
    size_t n;
    const char *p = piece(v, id, render_special, &n);
    if (!p) return rf_set_error(RF_ERR_RANGE, "token id %d is outside the vocabulary (%d tokens)", id, v->n_tokens);
    *n_out = n;
    if (cap) memcpy(buf, p, n < cap ? n : cap);
    if (n > cap) return rf_set_error(RF_ERR_RANGE, "token %d: piece of %zu bytes does not fit in %zu", id, n, cap);
    return RF_OK;
}

/* llama.cpp's clean_up_tokenization_spaces, in place (three passes, exactly as the reference
 * composes them): " ?" " !" " ." " ," lose the space; " ' " loses both spaces; " 's" " 'm"
 * " 're" " 've" lose the space. Returns the new length. */
static size_t clean_spaces(char *text, size_t total) {
    if (!total) return 0;
    size_t t1 = total, n = 1;
    for (size_t i = 1; i < t1; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) n--;
        text[n++] = x;
    }
    size_t t2 = n;
    n = 1;
    for (size_t i = 1; i < t2; i++) {
        char x = text[i];
        if (x == '\'' && i + 1 < t2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            n--;
            text[++i] = '\0';
        }
        text[n++] = x;
    }
    size_t t3 = n;
    n = 1;
    for (size_t i = 1; i < t3; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < t3) {
            char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm') n--;
            else if (i + 2 < t3) {
                char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) n--;
            }
        }
        text[n++] = x;
    }
    return n;
}

rf_status rf_detokenize(const rf_vocab *v, const int32_t *ids, size_t n, bool render_special,
                        char **out, size_t *out_len) {
    if (!v || !out || (!ids && n)) return rf_set_error(RF_ERR_INVALID_ARG, "rf_detokenize: NULL argument");
    *out = NULL;
    sbuf b = {0};
    if (!sb_put(&b, "", 0)) goto oom;
    /* The SPM space prefix comes off the first piece (whatever token it is: a leading BOS
     * takes it, as in llama.cpp with remove_special = false). */
    bool remove_space = v->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = piece(v, ids[i], render_special, &pl);
        if (!p) {
            free(b.p);
            return rf_set_error(RF_ERR_RANGE, "rf_detokenize: id %d (position %zu) is outside the vocabulary (%d tokens)",
                                ids[i], i, v->n_tokens);
        }
        if (remove_space && pl && p[0] == ' ') p++, pl--;
        remove_space = false;
        if (!sb_put(&b, p, pl)) goto oom;
    }
    if (v->clean_spaces) {
        b.n = clean_spaces(b.p, b.n);
        b.p[b.n] = 0;
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return RF_OK;
oom:
    free(b.p);
    return rf_set_error(RF_ERR_OOM, "rf_detokenize: out of memory");
}

/* ---- streaming --------------------------------------------------------------------------- */

struct rf_detok {
    const rf_vocab *v;
    bool render_special;
    bool first;
    sbuf raw;  /* pieces not yet cleaned (clean_spaces vocabularies) */
    sbuf utf;  /* cleaned bytes not yet emitted (an incomplete UTF-8 tail) */
};

rf_status rf_detok_new(const rf_vocab *v, bool render_special, rf_detok **out) {
    if (!v || !out) return rf_set_error(RF_ERR_INVALID_ARG, "rf_detok_new: NULL argument");
    rf_detok *d = calloc(1, sizeof *d);
    if (!d) return rf_set_error(RF_ERR_OOM, "rf_detok_new: out of memory");
    d->v = v;
    d->render_special = render_special;
    d->first = true;
    *out = d;
    return RF_OK;
}

void rf_detok_free(rf_detok *d) {
    if (!d) return;
    free(d->raw.p);
    free(d->utf.p);
    free(d);
}

/* Moves the UTF-8-complete prefix of d->utf (all of it when `all`) into buf as valid UTF-8
 * (invalid bytes as U+FFFD). What does not fit in cap stays held, cut at a character boundary,
 * and comes out with the next push or flush. */
static rf_status drain(rf_detok *d, bool all, char *buf, size_t cap, size_t *n_out) {
    size_t k = all ? d->utf.n : rf_utf8_complete_prefix((const unsigned char *)d->utf.p, d->utf.n);
    char *clean = NULL;
    size_t cl = 0;
    rf_status st = rf_utf8_sanitize(d->utf.p ? d->utf.p : "", k, &clean, &cl);
    if (st) return st;
    size_t m = cl;
    if (m > cap) {
        m = cap;
        while (m > 0 && ((unsigned char)clean[m] & 0xC0) == 0x80) m--;
        if (m == 0) { /* not even one character fits: say how much the next one needs */
            size_t need = rf_utf8_len((unsigned char)clean[0]);
            free(clean);
            *n_out = need;
            return rf_set_error(RF_ERR_RANGE, "rf_detok: a %zu-byte character does not fit in %zu bytes", need, cap);
        }
    }
    if (m) memcpy(buf, clean, m);
    /* keep clean[m..cl) followed by the unsanitized tail d->utf[k..n) */
    sbuf rest = {0};
    if (!sb_put(&rest, clean + m, cl - m) || !sb_put(&rest, d->utf.p + k, d->utf.n - k)) {
        free(clean);
        free(rest.p);
        return rf_set_error(RF_ERR_OOM, "rf_detok: out of memory");
    }
    free(clean);
    free(d->utf.p);
    d->utf = rest;
    *n_out = m;
    return RF_OK;
}

/* For clean_spaces vocabularies: raw text can be cleaned up to a cut c where the two bytes
 * before c are neither ' ' nor '\'' — no rule looks across such a cut, so cleaning the pieces
 * separately gives the same bytes as cleaning the whole text. */
static size_t safe_cut(const sbuf *r) {
    for (size_t c = r->n; c >= 2; c--) {
        char a = r->p[c - 2], b = r->p[c - 1];
        if (a != ' ' && a != '\'' && b != ' ' && b != '\'') return c;
    }
    return 0;
}

static rf_status move_clean(rf_detok *d, bool all) {
    size_t c = all ? d->raw.n : safe_cut(&d->raw);
    if (!c) return RF_OK;
    size_t n = clean_spaces(d->raw.p, c);
    if (!sb_put(&d->utf, d->raw.p, n)) return rf_set_error(RF_ERR_OOM, "rf_detok: out of memory");
    memmove(d->raw.p, d->raw.p + c, d->raw.n - c);
    d->raw.n -= c;
    return RF_OK;
}

rf_status rf_detok_push(rf_detok *d, int32_t id, char *buf, size_t cap, size_t *n_out) {
    if (!d || !n_out || (!buf && cap)) return rf_set_error(RF_ERR_INVALID_ARG, "rf_detok_push: NULL argument");
    *n_out = 0;
    size_t pl;
    const char *p = piece(d->v, id, d->render_special, &pl);
    if (!p) return rf_set_error(RF_ERR_RANGE, "token id %d is outside the vocabulary (%d tokens)", id, d->v->n_tokens);
    if (d->first && d->v->add_space_prefix && pl && p[0] == ' ') p++, pl--;
    d->first = false;
    rf_status st;
    if (d->v->clean_spaces) {
        if (!sb_put(&d->raw, p, pl)) return rf_set_error(RF_ERR_OOM, "rf_detok: out of memory");
        if ((st = move_clean(d, false))) return st;
    } else if (!sb_put(&d->utf, p, pl)) {
        return rf_set_error(RF_ERR_OOM, "rf_detok: out of memory");
    }
    return drain(d, false, buf, cap, n_out);
}

rf_status rf_detok_flush(rf_detok *d, char *buf, size_t cap, size_t *n_out) {
    if (!d || !n_out || (!buf && cap)) return rf_set_error(RF_ERR_INVALID_ARG, "rf_detok_flush: NULL argument");
    *n_out = 0;
    rf_status st;
    if (d->v->clean_spaces && (st = move_clean(d, true))) return st;
    return drain(d, true, buf, cap, n_out);
}

/* ---- a choice's text output ----------------------------------------------------------------
 * The streaming detokenizer's text, then held back while the tail could be the start of a stop
 * string, released once it cannot: the second hold-back of a generated token's text, beside
 * the first (an incomplete UTF-8 character) above. A stop string found anywhere cuts the text
 * before it. Generated text may hold NUL bytes (a byte token <0x00>), so everything is by
 * length, never strstr. */

rf_status rf_textout_init(rf_textout *t, const rf_vocab *v, bool render_special, char *const *stops,
                          const size_t *stop_len, int n_stop) {
    memset(t, 0, sizeof *t);
    rf_status st = rf_detok_new(v, render_special, &t->dt);
    if (st) return st;
    if (n_stop > 0) {
        t->stops = calloc((size_t)n_stop, sizeof *t->stops);
        t->stop_len = calloc((size_t)n_stop, sizeof *t->stop_len);
        if (!t->stops || !t->stop_len) goto oom;
        for (int i = 0; i < n_stop; i++) {
            if (!stop_len[i]) continue; /* an empty stop string matches nothing */
            t->stops[t->n_stop] = malloc(stop_len[i]);
            if (!t->stops[t->n_stop]) goto oom;
            memcpy(t->stops[t->n_stop], stops[i], stop_len[i]);
            t->stop_len[t->n_stop++] = stop_len[i];
        }
    }
    return RF_OK;
oom:
    rf_textout_free(t);
    return rf_set_error(RF_ERR_OOM, "text output: out of memory");
}

void rf_textout_free(rf_textout *t) {
    rf_detok_free(t->dt);
    free(t->buf);
    if (t->stops)
        for (int i = 0; i < t->n_stop; i++) free(t->stops[i]);
    free(t->stops);
    free(t->stop_len);
    memset(t, 0, sizeof *t);
}

static rf_status add(rf_textout *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *b = realloc(t->buf, cap);
        if (!b) return rf_set_error(RF_ERR_OOM, "text output: out of memory");
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = 0;
    return RF_OK;
}

/* Length of the longest suffix of the buffer that is a proper prefix of some stop string. */
static size_t holdback(const rf_textout *t) {
    size_t best = 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = t->stop_len[i];
        for (size_t k = sl > 1 ? sl - 1 : 0; k > best; k--)
            if (k <= t->len && !memcmp(t->buf + t->len - k, t->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Drops the bytes handed out by the previous call (the caller has read them by now). */
static void compact(rf_textout *t) {
    if (!t->rel) return;
    memmove(t->buf, t->buf + t->rel, t->len - t->rel);
    t->len -= t->rel;
    t->buf[t->len] = 0;
    t->rel = 0;
}

/* Hands out what is safe, [0, emit) of buf: the text before a stop string (setting *hit; the
 * rest is dropped, and nothing is released after), or all but the hold-back. */
static void release(rf_textout *t, bool final, const char **out, size_t *out_len, bool *hit) {
    *hit = false;
    size_t cut = t->len;
    for (int i = 0; i < t->n_stop; i++) {
        const char *f = t->len ? memmem(t->buf, t->len, t->stops[i], t->stop_len[i]) : NULL;
        if (f && (size_t)(f - t->buf) < cut) {
            cut = (size_t)(f - t->buf);
            *hit = true;
        }
    }
    size_t emit = cut;
    if (!*hit && !final) emit = t->len - holdback(t);
    if (*hit) t->len = emit;
    *out = t->buf ? t->buf : "";
    *out_len = emit;
    t->rel = emit;
}

rf_status rf_textout_push(rf_textout *t, int32_t id, const char **out, size_t *out_len, bool *hit) {
    char chunk[512];
    size_t np = 0;
    compact(t);
    rf_status st = rf_detok_push(t->dt, id, chunk, sizeof chunk, &np);
    if (st) return st;
    if ((st = add(t, chunk, np < sizeof chunk ? np : sizeof chunk))) return st;
    release(t, false, out, out_len, hit);
    return RF_OK;
}

rf_status rf_textout_finish(rf_textout *t, const char **out, size_t *out_len, bool *hit) {
    char chunk[512];
    size_t np = 0;
    compact(t);
    if (rf_detok_flush(t->dt, chunk, sizeof chunk, &np) == RF_OK && np) {
        rf_status st = add(t, chunk, np < sizeof chunk ? np : sizeof chunk);
        if (st) return st;
    }
    release(t, true, out, out_len, hit);
    return RF_OK;
}
