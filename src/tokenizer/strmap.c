/* strmap.c — the tokenizer's string -> int32 hash map (open addressing, linear probing).
 * Keys are borrowed byte ranges plus a small integer (the BPE merge split position). */
#include <string.h>

#include "tokenizer/vocab_internal.h"

/* 64-bit FNV-1a over the bytes, then mixed with aux and finalised (splitmix) so that the low
 * bits used for the slot index are well spread. */
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

static rf_status grow(rf_strmap *m) {
    size_t ncap = m->cap ? m->cap * 2 : 64;
    rf_strmap_slot *ns = calloc(ncap, sizeof *ns);
    if (!ns) return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (hash map of %zu)", ncap);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = m->slots[i].hash & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return RF_OK;
}

rf_status rf_strmap_put(rf_strmap *m, const char *key, size_t len, uint32_t aux, int32_t value) {
    if ((m->n + 1) * 2 > m->cap) {
        rf_status st = grow(m);
        if (st) return st;
    }
    uint64_t h = rf_tok_hash(key, len, aux);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        rf_strmap_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && s->aux == aux && !memcmp(s->key, key, len)) {
            s->value = value;
            s->key = key;
            return RF_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (rf_strmap_slot){key, (uint32_t)len, aux, h, value};
    m->n++;
    return RF_OK;
}

int32_t rf_strmap_get(const rf_strmap *m, const char *key, size_t len, uint32_t aux) {
    if (!m->cap) return -1;
    uint64_t h = rf_tok_hash(key, len, aux);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].key) {
        const rf_strmap_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && s->aux == aux && !memcmp(s->key, key, len))
            return s->value;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void rf_strmap_free(rf_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

rf_status rf_idvec_push(rf_idvec *iv, int32_t id) {
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
