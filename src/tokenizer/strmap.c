/* strmap.c — the tokenizer's string -> int32 hash map (open addressing, linear probing).
 * Keys are borrowed byte ranges plus a small integer (the BPE merge split position). The probe
 * array holds only 8-byte (tag, value) slots: lookups are dominated by cache misses, and this
 * keeps a 128 Ki-slot table at 1 MiB. */
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* 64-bit FNV-1a over the bytes, then mixed with aux and finalised (splitmix) so that both the
 * low bits (slot index) and the high bits (tag) are well spread. */
uint64_t rf_tok_hash(const char *s, size_t len, uint32_t aux) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= (uint64_t)aux * 0x9E3779B97F4A7C15ull;
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return h;
}

static inline uint32_t tag_of(uint64_t h) {
    uint32_t t = (uint32_t)(h >> 32);
    return t ? t : 1;
}

static rf_status grow(rf_strmap *m) {
    size_t ncap = m->cap ? m->cap * 2 : 64;
    rf_strmap_slot *ns = calloc(ncap, sizeof *ns);
    rf_strmap_key *nk = malloc(ncap * sizeof *nk);
    if (!ns || !nk) {
        free(ns), free(nk);
        return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (hash map of %zu)", ncap);
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].tag) continue;
        uint64_t h = rf_tok_hash(m->keys[i].ptr, m->keys[i].len, m->keys[i].aux);
        size_t j = h & (ncap - 1);
        while (ns[j].tag) j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
        nk[j] = m->keys[i];
    }
    free(m->slots), free(m->keys);
    m->slots = ns, m->keys = nk;
    m->cap = ncap;
    return RF_OK;
}

rf_status rf_strmap_put(rf_strmap *m, const char *key, size_t len, uint32_t aux, int32_t value) {
    if ((m->n + 1) * 2 > m->cap) {
        rf_status st = grow(m);
        if (st) return st;
    }
    uint64_t h = rf_tok_hash(key, len, aux);
    uint32_t tag = tag_of(h);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].tag) {
        const rf_strmap_key *k = &m->keys[j];
        if (m->slots[j].tag == tag && k->len == len && k->aux == aux && !memcmp(k->ptr, key, len)) {
            m->slots[j].value = value;
            m->keys[j].ptr = key;
            return RF_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (rf_strmap_slot){tag, value};
    m->keys[j] = (rf_strmap_key){key, (uint32_t)len, aux};
    m->n++;
    return RF_OK;
}

int32_t rf_strmap_get(const rf_strmap *m, const char *key, size_t len, uint32_t aux) {
    if (!m->cap) return -1;
    uint64_t h = rf_tok_hash(key, len, aux);
    uint32_t tag = tag_of(h);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].tag) {
        if (m->slots[j].tag == tag) {
            const rf_strmap_key *k = &m->keys[j];
            if (k->len == len && k->aux == aux && !memcmp(k->ptr, key, len)) return m->slots[j].value;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void rf_strmap_free(rf_strmap *m) {
    free(m->slots), free(m->keys);
    memset(m, 0, sizeof *m);
}

rf_status rf_idvec_push(rf_idvec *iv, int32_t id) {
    if (iv->limit && iv->n >= iv->limit) {
        iv->over = true;
        return rf_set_error(RF_ERR_RANGE, "tokenizer: more than %zu tokens", iv->limit);
    }
    if (iv->n == iv->cap) {
        size_t ncap = iv->cap ? iv->cap * 2 : 64;
        int32_t *nv = realloc(iv->v, ncap * sizeof *nv);
        if (!nv) return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (%zu ids)", ncap);
        iv->v = nv;
        iv->cap = ncap;
    }
    iv->v[iv->n++] = id;
    return RF_OK;
}

rf_status rf_idvec_room(rf_idvec *iv, size_t bytes, size_t max_token_len) {
    if (!iv->limit || !max_token_len) return RF_OK;
    size_t need = bytes / max_token_len; /* a lower bound on the tokens of these bytes */
    if (iv->n <= iv->limit && need <= iv->limit - iv->n) return RF_OK;
    iv->over = true;
    return rf_set_error(RF_ERR_RANGE, "tokenizer: more than %zu tokens", iv->limit);
}

/* ---- piece cache ------------------------------------------------------------------------- */

struct rf_pcache_blk {
    rf_pcache_blk *next;
    size_t used, cap;
    char data[];
};

bool rf_pcache_get(const rf_pcache *c, const char *key, size_t len, rf_idvec *out, rf_status *st) {
    int32_t at = rf_strmap_get(&c->map, key, len, 0);
    if (at < 0) return false;
    int32_t cnt = c->ids.v[at];
    for (int32_t i = 0; i < cnt; i++)
        if ((*st = rf_idvec_push(out, c->ids.v[at + 1 + i]))) return true;
    *st = RF_OK;
    return true;
}

rf_status rf_pcache_put(rf_pcache *c, const char *key, size_t len, const int32_t *ids, size_t n) {
    if (c->ids.n + n + 1 > (size_t)INT32_MAX) return RF_OK; /* full: just stop caching */
    if (!c->blk || c->blk->cap - c->blk->used < len) {
        size_t cap = len > 65536 ? len : 65536;
        rf_pcache_blk *b = malloc(sizeof *b + cap);
        if (!b) return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (piece cache)");
        b->next = c->blk, b->used = 0, b->cap = cap;
        c->blk = b;
    }
    char *k = c->blk->data + c->blk->used;
    memcpy(k, key, len);
    c->blk->used += len;
    if (c->ids.n + n + 1 > c->ids.cap) {
        size_t nc = c->ids.cap ? c->ids.cap : 1024;
        while (nc < c->ids.n + n + 1) nc *= 2;
        int32_t *nv = realloc(c->ids.v, nc * sizeof *nv);
        if (!nv) return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (piece cache)");
        c->ids.v = nv, c->ids.cap = nc;
    }
    int32_t pos = (int32_t)c->ids.n;
    c->ids.v[c->ids.n++] = (int32_t)n;
    if (n) memcpy(c->ids.v + c->ids.n, ids, n * sizeof *ids);
    c->ids.n += n;
    return rf_strmap_put(&c->map, k, len, 0, pos);
}

void rf_pcache_free(rf_pcache *c) {
    rf_strmap_free(&c->map);
    free(c->ids.v);
    while (c->blk) {
        rf_pcache_blk *n = c->blk->next;
        free(c->blk);
        c->blk = n;
    }
    memset(c, 0, sizeof *c);
}
