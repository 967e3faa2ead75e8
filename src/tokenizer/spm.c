/* spm.c — SentencePiece-style tokenization ("llama" vocabularies): optional leading space,
 * spaces escaped to U+2581, then repeatedly merge the adjacent pair whose concatenation is the
 * highest-scoring token (heap over a linked list, O(n log n)); symbols that are not tokens
 * fall back to <0xNN> byte tokens. Tie-breaks follow llama.cpp's llm_tokenizer_spm_session. */
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

typedef struct sym {
    int32_t prev, next;
    size_t start, n;
} sym;

typedef struct bigram {
    int32_t left, right;
    float score;
    size_t size;
} bigram;

typedef struct heap {
    bigram *a;
    size_t n, cap;
} heap;

/* Higher score first; equal score -> leftmost first. */
static inline bool before(const bigram *x, const bigram *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

static bool push(heap *h, bigram b) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 256;
        bigram *na = realloc(h->a, nc * sizeof *na);
        if (!na) return false;
        h->a = na;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&b, &h->a[p])) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = b;
    return true;
}

static bigram pop(heap *h) {
    bigram top = h->a[0], last = h->a[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const bigram *best = &last;
        if (l < n && before(&h->a[l], best)) m = l, best = &h->a[l];
        if (r < n && before(&h->a[r], best)) m = r;
        if (m == i) break;
        h->a[i] = h->a[m];
        i = m;
    }
    if (n) h->a[i] = last;
    return top;
}

static bool try_add(const rf_vocab *v, const char *t, sym *syms, heap *h, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    size_t n = syms[l].n + syms[r].n;
    if (n > v->max_token_len) return true;
    int32_t id = rf_text_to_token(v, t + syms[l].start, n);
    if (id < 0) return true;
    return push(h, (bigram){l, r, v->scores[id], n});
}

int32_t rf_vocab_byte_to_token(const rf_vocab *v, unsigned char c) {
    static const char hex[] = "0123456789ABCDEF";
    char buf[6] = {'<', '0', 'x', hex[c >> 4], hex[c & 15], '>'};
    int32_t id = rf_text_to_token(v, buf, 6);
    if (id >= 0) return id;
    return rf_text_to_token(v, (const char *)&c, 1);
}

/* Merges t[0..tlen) (escaped text) and appends its ids; syms has room for tlen symbols. */
static rf_status spm_piece(const rf_vocab *v, const char *t, size_t tlen, sym *syms, heap *hp,
                           rf_idvec *out) {
    heap h = *hp;
    h.n = 0;
    rf_status st = RF_OK;
    size_t ns = 0;
    for (size_t off = 0; off < tlen;) {
        size_t l = rf_utf8_len((unsigned char)t[off]);
        if (l > tlen - off) l = tlen - off;
        syms[ns] = (sym){(int32_t)ns - 1, off + l == tlen ? -1 : (int32_t)ns + 1, off, l};
        ns++;
        off += l;
    }
    for (size_t i = 1; i < ns; i++)
        if (!try_add(v, t, syms, &h, (int32_t)i - 1, (int32_t)i)) goto oom;
    while (h.n) {
        bigram b = pop(&h);
        sym *L = &syms[b.left], *R = &syms[b.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != b.size) continue; /* stale */
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) syms[R->next].prev = b.left;
        if (!try_add(v, t, syms, &h, L->prev, b.left) || !try_add(v, t, syms, &h, b.left, L->next))
            goto oom;
    }
    for (int32_t i = ns ? 0 : -1; i != -1; i = syms[i].next) {
        const sym *y = &syms[i];
        int32_t id = rf_text_to_token(v, t + y->start, y->n);
        if (id >= 0) {
            if ((st = rf_idvec_push(out, id))) goto done;
            continue;
        }
        /* Not a token (merged symbols always are): byte fallback, <unk> if the vocabulary has
         * no byte token for it. */
        for (size_t j = 0; j < y->n; j++) {
            int32_t bid = rf_vocab_byte_to_token(v, (unsigned char)t[y->start + j]);
            if (bid < 0) bid = v->unk;
            if (bid >= 0 && (st = rf_idvec_push(out, bid))) goto done;
        }
    }
    goto done;
oom:
    st = rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (SPM text of %zu bytes)", tlen);
done:
    *hp = h;
    return st;
}

rf_status rf_spm_tokenize(const rf_vocab *v, const char *text, size_t len, bool space_prefix,
                          rf_pcache *cache, rf_idvec *out) {
    /* escaped text: each ' ' becomes U+2581 (3 bytes) */
    size_t nsp = space_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) nsp += text[i] == ' ';
    size_t tlen = len + (space_prefix ? 1 : 0) + 2 * nsp;
    char *t = malloc(tlen + 1);
    sym *syms = malloc((tlen ? tlen : 1) * sizeof *syms);
    heap h = {0};
    rf_status st = RF_OK;
    if (!t || !syms) goto oom;
    size_t o = 0;
    if (space_prefix) memcpy(t, "\xE2\x96\x81", 3), o = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') memcpy(t + o, "\xE2\x96\x81", 3), o += 3;
        else t[o++] = text[i];
    }
    tlen = o;

    /* Cut the text where no token contains the two bytes on either side of the cut: no merge
     * can cross such a point, so each piece merges on its own with the same result (and the
     * heap stays small and in cache). */
    for (size_t start = 0; start < tlen;) {
        size_t end = start + rf_utf8_len((unsigned char)t[start]);
        if (end > tlen) end = tlen;
        while (end < tlen) {
            unsigned pr = (unsigned)(unsigned char)t[end - 1] << 8 | (unsigned char)t[end];
            if (!(v->pair_bits[pr >> 3] & (1u << (pr & 7)))) break;
            size_t l = rf_utf8_len((unsigned char)t[end]);
            end = end + l > tlen ? tlen : end + l;
        }
        /* pieces repeat (words): reuse the ids of one already merged */
        size_t pl = end - start;
        if (!(pl <= 256 && rf_pcache_get(cache, t + start, pl, out, &st))) {
            size_t before = out->n;
            if ((st = rf_idvec_room(out, pl, v->max_token_len))) goto done;
            if ((st = spm_piece(v, t + start, pl, syms, &h, out))) goto done;
            if (pl <= 256 && (st = rf_pcache_put(cache, t + start, pl, out->v + before, out->n - before)))
                goto done;
        } else if (st) {
            goto done;
        }
        start = end;
    }
    goto done;
oom:
    st = rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (SPM text of %zu bytes)", len);
done:
    free(t);
    free(syms);
    free(h.a);
    return st;
}
