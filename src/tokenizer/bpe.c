/* bpe.c — BPE: byte-level ("gpt2" vocabularies) and SPM-style ("gemma4": spaces escaped to
 * U+2581, raw UTF-8, <0xXX> byte fallback): invalid UTF-8 -> U+FFFD, pre-tokenizer split, GPT-2
 * byte encoding or the escape, then ranked merges per word with a binary heap over a linked list
 * of symbols (O(L log L) per word) and a per-call cache of words already seen. Tie-breaks and
 * the byte fallback follow llama.cpp's llm_tokenizer_bpe_session. */
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

typedef struct sym {
    int32_t prev, next;
    uint32_t start, n; /* bytes of the encoded word */
} sym;

typedef struct bigram {
    int32_t left, right;
    int32_t rank;
    uint32_t size;
} bigram;

struct rf_bpe_session {
    const rf_vocab *v;
    const rf_bytemap *bm;
    char *enc;
    size_t enc_cap;
    sym *syms;
    size_t syms_cap;
    bigram *heap;
    size_t heap_n, heap_cap;
    rf_pcache cache;  /* encoded word -> ids */
    rf_idvec *out;    /* current output */
};

rf_status rf_bpe_session_new(const rf_vocab *v, rf_bpe_session **out) {
    rf_bpe_session *s = calloc(1, sizeof *s);
    if (!s) return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory");
    s->v = v;
    s->bm = rf_gpt2_bytemap();
    *out = s;
    return RF_OK;
}

void rf_bpe_session_free(rf_bpe_session *s) {
    if (!s) return;
    free(s->enc);
    free(s->syms);
    free(s->heap);
    rf_pcache_free(&s->cache);
    free(s);
}

static bool reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return false;
    *p = np;
    *cap = nc;
    return true;
}

/* Heap order: lower rank first; equal rank -> leftmost first. */
static inline bool before(const bigram *a, const bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static bool heap_push(rf_bpe_session *s, bigram b) {
    if (!reserve((void **)&s->heap, &s->heap_cap, s->heap_n + 1, sizeof *s->heap)) return false;
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&b, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = b;
    return true;
}

static bigram heap_pop(rf_bpe_session *s) {
    bigram top = s->heap[0];
    bigram last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bigram *best = &last;
        if (l < n && before(&s->heap[l], best)) m = l, best = &s->heap[l];
        if (r < n && before(&s->heap[r], best)) m = r;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n) s->heap[i] = last;
    return top;
}

static bool add_bigram(rf_bpe_session *s, const char *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    const sym *L = &s->syms[left], *R = &s->syms[right];
    int32_t rank = rf_strmap_get(&s->v->merges, w + L->start, L->n + R->n, L->n);
    if (rank < 0) return true;
    return heap_push(s, (bigram){left, right, rank, L->n + R->n});
}

static rf_status emit(rf_bpe_session *s, rf_idvec *out, int32_t id) { return rf_idvec_push(out, id); }

/* The <0xXX> token of a raw byte, or -1 (gemma4 has no one-byte-text fallback). */
static int32_t spm_byte_token(const rf_vocab *v, unsigned char c) {
    static const char hex[] = "0123456789ABCDEF";
    char buf[6] = {'<', '0', 'x', hex[c >> 4], hex[c & 15], '>'};
    return rf_text_to_token(v, buf, 6);
}

/* Merges one encoded word w[0..n) and appends its ids to out. */
static rf_status merge_word(rf_bpe_session *s, const char *w, size_t n, rf_idvec *out) {
    const rf_vocab *v = s->v;
    rf_status st;
    if (v->ignore_merges) {
        int32_t id = rf_text_to_token(v, w, n);
        if (id >= 0) return emit(s, out, id);
    } else if (v->bpe_spm_style && n && strspn(w, "\n") >= n) {
        /* gemma4: a run of newlines is one token when the vocabulary has it (its merges would
         * pair them differently) */
        int32_t id = rf_text_to_token(v, w, n);
        if (id >= 0) return emit(s, out, id);
    }
    size_t ns = 0;
    if (!reserve((void **)&s->syms, &s->syms_cap, n, sizeof *s->syms))
        return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (word of %zu bytes)", n);
    for (size_t off = 0; off < n;) {
        size_t l = rf_utf8_len((unsigned char)w[off]);
        if (l > n - off) l = n - off;
        s->syms[ns] = (sym){(int32_t)ns - 1, off + l == n ? -1 : (int32_t)ns + 1, (uint32_t)off, (uint32_t)l};
        ns++;
        off += l;
    }
    s->heap_n = 0;
    for (size_t i = 1; i < ns; i++)
        if (!add_bigram(s, w, (int32_t)i - 1, (int32_t)i)) goto oom;
    while (s->heap_n) {
        bigram b = heap_pop(s);
        sym *L = &s->syms[b.left], *R = &s->syms[b.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != b.size) continue; /* stale */
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) s->syms[R->next].prev = b.left;
        if (!add_bigram(s, w, L->prev, b.left) || !add_bigram(s, w, b.left, L->next)) goto oom;
    }
    for (size_t i = 0; i < ns; i++) {
        const sym *y = &s->syms[i];
        if (!y->n) continue;
        int32_t id = rf_text_to_token(v, w + y->start, y->n);
        if (id >= 0) {
            if ((st = emit(s, out, id))) return st;
            continue;
        }
        /* No token for the symbol: each byte of the (encoded) text on its own, if it is one
         * (SPM-style vocabularies spell a byte <0xXX>). */
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t bid = v->bpe_spm_style ? spm_byte_token(v, (unsigned char)w[y->start + j])
                                           : rf_text_to_token(v, w + y->start + j, 1);
            if (bid >= 0 && (st = emit(s, out, bid))) return st;
        }
    }
    return RF_OK;
oom:
    return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (BPE merge queue)");
}

/* Pre-tokenizer callback: one word of sanitized UTF-8. */
static rf_status on_word(void *user, const char *word, size_t len) {
    rf_bpe_session *s = user;
    rf_status st;
    /* byte-level encoding: every byte becomes its printable stand-in; SPM-style (gemma4):
     * the raw text with each space escaped to U+2581 */
    if (!reserve((void **)&s->enc, &s->enc_cap, 3 * len + 1, 1))
        return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (word of %zu bytes)", len);
    size_t n = 0;
    const bool spm = s->v->bpe_spm_style;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)word[i];
        if (spm) {
            if (c == ' ') memcpy(s->enc + n, "\xE2\x96\x81", 3), n += 3;
            else s->enc[n++] = (char)c;
            continue;
        }
        memcpy(s->enc + n, s->bm->enc[c], s->bm->enc_len[c]);
        n += s->bm->enc_len[c];
    }
    s->enc[n] = 0; /* strspn in merge_word */
    if (rf_pcache_get(&s->cache, s->enc, n, s->out, &st)) return st;
    if ((st = rf_idvec_room(s->out, n, s->v->max_token_len))) return st;
    size_t before = s->out->n;
    if ((st = merge_word(s, s->enc, n, s->out))) return st;
    /* Cache words of ordinary length; a giant word is not worth a copy. */
    if (n <= 256) return rf_pcache_put(&s->cache, s->enc, n, s->out->v + before, s->out->n - before);
    return RF_OK;
}

rf_status rf_bpe_tokenize(rf_bpe_session *s, const char *text, size_t len, rf_idvec *out) {
    char *clean;
    size_t clen;
    rf_status st = rf_utf8_sanitize(text, len, &clean, &clen);
    if (st) return st;
    s->out = out;
    st = rf_pretok_split(s->v->pre, clean, clen, on_word, s);
    free(clean);
    return st;
}
