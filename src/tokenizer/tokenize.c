/* tokenize.c — rf_tokenize: special tokens split out of the text (only outside the caller's
 * plain-text ranges for control tokens), the rest dispatched to the SPM or BPE tokenizer, and
 * the token limit that stops a huge text early. */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* ---- tokenize ---------------------------------------------------------------------------- */

typedef struct tok_ctx {
    const rf_vocab *v;
    rf_idvec out;
    bool prev_special; /* SPM: a raw fragment after a token (or at the start) gets the space */
    rf_bpe_session *bpe;
    rf_pcache spm_cache;
} tok_ctx;

static rf_status raw_fragment(tok_ctx *c, const char *s, size_t n) {
    if (n == 0) return RF_OK;
    rf_status st;
    /* a fragment that must pass the limit is refused before any work on it */
    if ((st = rf_idvec_room(&c->out, n, c->v->max_token_len))) return st;
    if (c->v->type == RF_VOCAB_SPM) {
        st = rf_spm_tokenize(c->v, s, n, c->v->add_space_prefix && c->prev_special, &c->spm_cache, &c->out);
        c->prev_special = false;
        return st;
    }
    return rf_bpe_tokenize(c->bpe, s, n, &c->out);
}

/* Whether token t may be split out as a token of d bytes at a position from which `room`
 * bytes lie before the next plain-text range: control/unknown tokens need parse_special and
 * all of their bytes outside plain text; user-defined tokens are taken everywhere. */
static inline bool special_ok(const rf_vocab *v, int32_t t, bool parse_special, size_t d, size_t room) {
    return t >= 0 && (!(v->attr[t] & (RF_TOK_CONTROL | RF_TOK_UNKNOWN)) || (parse_special && d <= room));
}

typedef struct sp_cand {
    size_t pos;
    size_t maxd; /* longest allowed special token starting here */
    size_t room; /* bytes from pos to the next plain-text range */
} sp_cand;

/* Walks the sorted plain ranges along increasing positions. */
typedef struct plain_cursor {
    const rf_text_span *r;
    size_t n, k;
} plain_cursor;

/* bytes from p to the start of the next plain range (0 inside one; SIZE_MAX when none) */
static size_t room_at(plain_cursor *pc, size_t p) {
    while (pc->k < pc->n && pc->r[pc->k].end <= p) pc->k++;
    if (pc->k == pc->n) return SIZE_MAX;
    return pc->r[pc->k].begin <= p ? 0 : pc->r[pc->k].begin - p;
}

typedef struct sp_hit {
    size_t pos;
    int32_t id;
} sp_hit;

static int cmp_hit(const void *a, const void *b) {
    const sp_hit *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Splits special-token texts out of the text the way llama.cpp does: longer special tokens
 * first, each taking its non-overlapping occurrences from left to right inside the text not
 * yet taken (lstrip/rstrip tokens also take the whitespace beside them); the rest goes to the
 * tokenizer as raw fragments. Control/unknown tokens only with parse_special; user-defined ones
 * always. Done as one pass per token length that occurs, over the positions where a special
 * token starts, so the cost is linear in the text. */
static rf_status partition(tok_ctx *c, const char *text, size_t len, bool parse_special,
                           const rf_text_span *plain, size_t n_plain) {
    const rf_vocab *v = c->v;
    plain_cursor pc = {plain, n_plain, 0};
    const unsigned char *u = (const unsigned char *)text;
    sp_cand *cand = NULL;
    sp_hit *hits = NULL;
    uint8_t *claim = NULL, *lens = NULL; /* claim: 0 raw, 1 special token, 2 stripped */
    size_t nc = 0, capc = 0, nh = 0, caph = 0, maxl = 0;
    rf_status st = RF_OK;
    for (size_t p = 0; p < len; p++) {
        int32_t node = v->trie_root[u[p]];
        size_t d = 1, best = 0, room = room_at(&pc, p);
        while (node >= 0) {
            if (special_ok(v, v->trie[node].token, parse_special, d, room)) best = d;
            if (p + d >= len) break;
            int32_t ch = v->trie[node].first_child;
            while (ch >= 0 && v->trie[ch].byte != u[p + d]) ch = v->trie[ch].next_sibling;
            node = ch;
            d++;
        }
        if (!best) continue;
        if (nc == capc) {
            capc = capc ? 2 * capc : 256;
            sp_cand *nn = realloc(cand, capc * sizeof *nn);
            if (!nn) goto oom;
            cand = nn;
        }
        cand[nc++] = (sp_cand){p, best, room};
        if (best > maxl) maxl = best;
    }
    if (!nc) return raw_fragment(c, text, len);
    claim = calloc(len, 1);
    lens = calloc(maxl + 1, 1);
    if (!claim || !lens) goto oom;
    /* lengths that can occur: any token length on a candidate's trie path */
    for (size_t i = 0; i < nc; i++) {
        int32_t node = v->trie_root[u[cand[i].pos]];
        for (size_t d = 1; node >= 0 && d <= cand[i].maxd; d++) {
            if (special_ok(v, v->trie[node].token, parse_special, d, cand[i].room)) lens[d] = 1;
            if (d == cand[i].maxd) break;
            int32_t ch = v->trie[node].first_child;
            while (ch >= 0 && v->trie[ch].byte != u[cand[i].pos + d]) ch = v->trie[ch].next_sibling;
            node = ch;
        }
    }
    for (size_t L = maxl; L >= 1; L--) {
        if (!lens[L]) continue;
        size_t next_free = 0; /* occurrences of one length do not overlap */
        for (size_t i = 0; i < nc; i++) {
            size_t p = cand[i].pos;
            if (cand[i].maxd < L || p < next_free || claim[p]) continue;
            int32_t node = v->trie_root[u[p]];
            for (size_t d = 1; node >= 0 && d < L; d++) {
                if (claim[p + d]) {
                    node = -1;
                    break;
                }
                int32_t ch = v->trie[node].first_child;
                while (ch >= 0 && v->trie[ch].byte != u[p + d]) ch = v->trie[ch].next_sibling;
                node = ch;
            }
            int32_t t = node >= 0 ? v->trie[node].token : -1;
            if (!special_ok(v, t, parse_special, L, cand[i].room)) continue;
            if (nh == caph) {
                caph = caph ? 2 * caph : 64;
                sp_hit *nn = realloc(hits, caph * sizeof *nn);
                if (!nn) goto oom;
                hits = nn;
            }
            hits[nh++] = (sp_hit){p, t};
            memset(claim + p, 1, L);
            if (v->attr[t] & RF_TOK_LSTRIP)
                for (size_t q = p; q > 0 && !claim[q - 1] && isspace(u[q - 1]); q--) claim[q - 1] = 2;
            size_t e = p + L;
            if (v->attr[t] & RF_TOK_RSTRIP)
                while (e < len && !claim[e] && isspace(u[e])) claim[e++] = 2;
            next_free = e;
        }
    }
    qsort(hits, nh, sizeof *hits, cmp_hit);
    size_t h = 0;
    for (size_t p = 0; p < len;) {
        if (claim[p] == 0) {
            size_t q = p;
            while (q < len && !claim[q]) q++;
            if ((st = raw_fragment(c, text + p, q - p))) goto done;
            p = q;
        } else if (claim[p] == 2) {
            p++;
        } else {
            if ((st = rf_idvec_push(&c->out, hits[h].id))) goto done;
            c->prev_special = true;
            p += v->len[hits[h].id];
            h++;
        }
    }
    goto done;
oom:
    st = rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (special tokens in %zu bytes)", len);
done:
    free(cand);
    free(hits);
    free(claim);
    free(lens);
    return st;
}

/* A lower bound on the tokens of a text: no token covers more than max_token_len bytes, except
 * that lstrip/rstrip tokens also swallow the whitespace beside them, so with such tokens only
 * the other bytes count. Lets a text far over the limit be refused before the special-token
 * pass (whose cost grows with the candidates in the text, e.g. runs of spaces). */
static size_t min_tokens(const rf_vocab *v, const char *text, size_t len) {
    if (!v->max_token_len) return 0;
    bool strip = false;
    for (size_t i = 0; i < v->n_special && !strip; i++)
        strip = v->attr[v->special[i]] & (RF_TOK_LSTRIP | RF_TOK_RSTRIP);
    size_t bytes = len;
    if (strip)
        for (size_t k = 0; k < len; k++) bytes -= isspace((unsigned char)text[k]) != 0;
    return bytes / v->max_token_len;
}

rf_status rf_tokenize_ex(const rf_vocab *v, const char *text, size_t len, const rf_tokenize_opts *opts,
                         int32_t *ids, size_t cap, size_t *n_out) {
    static const rf_tokenize_opts defaults = {0};
    const rf_tokenize_opts *o = opts ? opts : &defaults;
    if (!v || !n_out || (!text && len) || (!ids && cap) || (o->n_plain && !o->plain))
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_tokenize: NULL argument");
    *n_out = 0;
    /* symbol indices are int32 and SPM/BPE buffers hold ~3 bytes per input byte */
    if (len > ((size_t)1 << 30))
        return rf_set_error(RF_ERR_RANGE, "rf_tokenize: text of %zu bytes exceeds the 1 GiB limit", len);
    for (size_t k = 0; k < o->n_plain; k++)
        if (o->plain[k].begin > o->plain[k].end || o->plain[k].end > len || (k && o->plain[k].begin < o->plain[k - 1].end))
            return rf_set_error(RF_ERR_INVALID_ARG, "rf_tokenize: plain range %zu [%zu, %zu) is out of order or "
                                                    "outside the text of %zu bytes", k, o->plain[k].begin, o->plain[k].end, len);
    bool add_special = o->add_special;
    tok_ctx c = {.v = v, .prev_special = true};
    c.out.limit = o->max_tokens;
    rf_status st = RF_OK;
    if (o->max_tokens && min_tokens(v, text, len) > o->max_tokens) {
        c.out.over = true;
        goto done;
    }
    if (v->type == RF_VOCAB_BPE && (st = rf_bpe_session_new(v, &c.bpe))) return st;
    if (add_special && v->add_bos) {
        if (v->bos < 0) {
            st = rf_set_error(RF_ERR_FORMAT, "tokenizer: the model asks for BOS but has no bos token id");
            goto done;
        }
        if ((st = rf_idvec_push(&c.out, v->bos))) goto done;
    }
    if (len && (st = partition(&c, text, len, o->parse_special, o->plain, o->n_plain))) goto done;
    if (add_special && v->add_bos && c.out.n >= 2 && c.out.v[1] == v->bos)
        RF_LOGW("tokenizer: the prompt starts with BOS and the model adds one: now it has two");
    if (add_special && v->add_eos) {
        if (v->eos < 0) {
            st = rf_set_error(RF_ERR_FORMAT, "tokenizer: the model asks for EOS but has no eos token id");
            goto done;
        }
        if ((st = rf_idvec_push(&c.out, v->eos))) goto done;
    }
    *n_out = c.out.n;
    if (cap && c.out.n) memcpy(ids, c.out.v, (c.out.n < cap ? c.out.n : cap) * sizeof *ids);
    if (c.out.n > cap)
        st = rf_set_error(RF_ERR_RANGE, "rf_tokenize: %zu ids do not fit in %zu", c.out.n, cap);
done:
    if (c.out.over) {
        *n_out = o->max_tokens + 1;
        st = rf_set_error(RF_ERR_RANGE, "the text has more than %zu tokens (tokenizing stopped there)", o->max_tokens);
    }
    rf_bpe_session_free(c.bpe);
    rf_pcache_free(&c.spm_cache);
    free(c.out.v);
    return st;
}

rf_status rf_tokenize(const rf_vocab *v, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *ids, size_t cap, size_t *n_out) {
    rf_tokenize_opts o = {.add_special = add_special, .parse_special = parse_special};
    return rf_tokenize_ex(v, text, len, &o, ids, cap, n_out);
}
