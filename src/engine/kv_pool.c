/* kv_pool.c — block bookkeeping of the paged KV cache: reference counts, a free stack, the
 * prefix cache (hash buckets chained through the blocks) and its least-recently-used eviction
 * list. Every operation is O(1) but lookup (a bucket walk) and check (O(n_blocks)). */
#include "engine/kv_pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_block {
    int32_t ref;
    bool published;
    bool on_free;        /* on the free stack */
    uint64_t hash, parent;
    int32_t hnext;       /* next block in the same hash bucket, -1 at the end */
    int32_t lprev, lnext; /* eviction list links, -1 at the ends */
} kv_block;

struct rf_kv_pool {
    int32_t n_blocks, block_size;
    bool prefix_cache;
    kv_block *b;
    int32_t *tokens;      /* [n_blocks, block_size]: what a published block holds */
    int32_t *free_stack, n_free;
    int32_t lru_head, lru_tail, n_cached; /* head = least recently used */
    int32_t *bucket;      /* [n_buckets] first block of each chain, -1 = empty */
    uint32_t n_buckets;
    int32_t n_used;
};

rf_status rf_kv_pool_new(int32_t n_blocks, int32_t block_size, bool prefix_cache, rf_kv_pool **out) {
    *out = NULL;
    if (n_blocks < 1 || block_size < 1)
        return rf_set_error(RF_ERR_INVALID_ARG, "KV pool of %d blocks of %d positions", n_blocks, block_size);
    rf_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return rf_set_error(RF_ERR_OOM, "KV pool: out of memory");
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->prefix_cache = prefix_cache;
    p->n_buckets = 1;
    while (p->n_buckets < (uint32_t)n_blocks && p->n_buckets < (1u << 30)) p->n_buckets <<= 1;
    p->b = calloc((size_t)n_blocks, sizeof *p->b);
    p->free_stack = malloc((size_t)n_blocks * sizeof(int32_t));
    p->bucket = malloc((size_t)p->n_buckets * sizeof(int32_t));
    p->tokens = prefix_cache ? malloc((size_t)n_blocks * (size_t)block_size * sizeof(int32_t)) : NULL;
    if (!p->b || !p->free_stack || !p->bucket || (prefix_cache && !p->tokens)) {
        rf_kv_pool_free(p);
        return rf_set_error(RF_ERR_OOM, "KV pool bookkeeping for %d blocks: out of memory", n_blocks);
    }
    for (uint32_t i = 0; i < p->n_buckets; i++) p->bucket[i] = -1;
    /* stack top = block 0, so a fresh pool hands out blocks in order (readable tests) */
    for (int32_t i = 0; i < n_blocks; i++) {
        p->free_stack[i] = n_blocks - 1 - i;
        p->b[i].on_free = true;
        p->b[i].hnext = p->b[i].lprev = p->b[i].lnext = -1;
    }
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    *out = p;
    return RF_OK;
}

void rf_kv_pool_free(rf_kv_pool *p) {
    if (!p) return;
    free(p->b);
    free(p->tokens);
    free(p->free_stack);
    free(p->bucket);
    free(p);
}

int32_t rf_kv_pool_n_blocks(const rf_kv_pool *p) { return p->n_blocks; }
int32_t rf_kv_pool_block_size(const rf_kv_pool *p) { return p->block_size; }
bool rf_kv_pool_prefix_cache(const rf_kv_pool *p) { return p->prefix_cache; }
int32_t rf_kv_pool_n_free(const rf_kv_pool *p) { return p->n_free; }
int32_t rf_kv_pool_n_cached(const rf_kv_pool *p) { return p->n_cached; }
int32_t rf_kv_pool_n_used(const rf_kv_pool *p) { return p->n_used; }
int32_t rf_kv_pool_available(const rf_kv_pool *p) { return p->n_free + p->n_cached; }
int32_t rf_kv_pool_refcount(const rf_kv_pool *p, int32_t blk) { return p->b[blk].ref; }

bool rf_kv_pool_writable(const rf_kv_pool *p, int32_t blk) {
    return p->b[blk].ref == 1 && !p->b[blk].published;
}

static void lru_remove(rf_kv_pool *p, int32_t i) {
    kv_block *k = &p->b[i];
    if (k->lprev >= 0) p->b[k->lprev].lnext = k->lnext;
    else p->lru_head = k->lnext;
    if (k->lnext >= 0) p->b[k->lnext].lprev = k->lprev;
    else p->lru_tail = k->lprev;
    k->lprev = k->lnext = -1;
    p->n_cached--;
}

static void lru_append(rf_kv_pool *p, int32_t i) {
    kv_block *k = &p->b[i];
    k->lprev = p->lru_tail;
    k->lnext = -1;
    if (p->lru_tail >= 0) p->b[p->lru_tail].lnext = i;
    else p->lru_head = i;
    p->lru_tail = i;
    p->n_cached++;
}

static uint32_t bucket_of(const rf_kv_pool *p, uint64_t h) { return (uint32_t)(h ^ (h >> 32)) & (p->n_buckets - 1); }

static void unpublish(rf_kv_pool *p, int32_t i) {
    kv_block *k = &p->b[i];
    int32_t *link = &p->bucket[bucket_of(p, k->hash)];
    while (*link != i) link = &p->b[*link].hnext;
    *link = k->hnext;
    k->hnext = -1;
    k->published = false;
}

int32_t rf_kv_pool_alloc(rf_kv_pool *p) {
    int32_t i;
    if (p->n_free > 0) {
        i = p->free_stack[--p->n_free];
        p->b[i].on_free = false;
    } else if (p->lru_head >= 0) {
        i = p->lru_head;
        lru_remove(p, i);
        unpublish(p, i);
    } else {
        return -1;
    }
    p->b[i].ref = 1;
    p->n_used++;
    return i;
}

void rf_kv_pool_ref(rf_kv_pool *p, int32_t i) {
    kv_block *k = &p->b[i];
    if (k->ref == 0) { /* only published blocks sit at zero outside the free stack */
        if (!k->published) return; /* a free block: a caller bug that check() would name */
        lru_remove(p, i);
        p->n_used++;
    }
    k->ref++;
}

void rf_kv_pool_unref(rf_kv_pool *p, int32_t i) {
    kv_block *k = &p->b[i];
    if (k->ref <= 0) return; /* a caller bug; rf_kv_pool_check reports the state */
    if (--k->ref > 0) return;
    p->n_used--;
    if (k->published) {
        lru_append(p, i);
    } else {
        k->on_free = true;
        p->free_stack[p->n_free++] = i;
    }
}

uint64_t rf_kv_block_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    /* FNV-1a over the parent hash and the token ids, then a splitmix finaliser */
    uint64_t h = 0xcbf29ce484222325ull ^ parent;
    for (int32_t i = 0; i < n; i++) {
        uint32_t t = (uint32_t)tokens[i];
        for (int k = 0; k < 4; k++) {
            h ^= (t >> (8 * k)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

static int32_t find(const rf_kv_pool *p, uint64_t h, uint64_t parent, const int32_t *tokens) {
    for (int32_t i = p->bucket[bucket_of(p, h)]; i >= 0; i = p->b[i].hnext)
        if (p->b[i].hash == h && p->b[i].parent == parent &&
            !memcmp(p->tokens + (size_t)i * p->block_size, tokens, (size_t)p->block_size * sizeof(int32_t)))
            return i;
    return -1;
}

int32_t rf_kv_pool_lookup(rf_kv_pool *p, uint64_t parent, const int32_t *tokens) {
    if (!p->prefix_cache) return -1;
    int32_t i = find(p, rf_kv_block_hash(parent, tokens, p->block_size), parent, tokens);
    if (i >= 0) rf_kv_pool_ref(p, i);
    return i;
}

bool rf_kv_pool_publish(rf_kv_pool *p, int32_t i, uint64_t parent, const int32_t *tokens) {
    kv_block *k = &p->b[i];
    if (!p->prefix_cache || k->published || k->ref <= 0) return false;
    uint64_t h = rf_kv_block_hash(parent, tokens, p->block_size);
    if (find(p, h, parent, tokens) >= 0) return false;
    k->hash = h;
    k->parent = parent;
    k->published = true;
    memcpy(p->tokens + (size_t)i * p->block_size, tokens, (size_t)p->block_size * sizeof(int32_t));
    uint32_t bk = bucket_of(p, h);
    k->hnext = p->bucket[bk];
    p->bucket[bk] = i;
    return true;
}

rf_status rf_kv_pool_check(const rf_kv_pool *p, const int32_t *refs) {
    int32_t used = 0, cached = 0, on_free = 0, published = 0;
    for (int32_t i = 0; i < p->n_blocks; i++) {
        const kv_block *k = &p->b[i];
        if (k->ref < 0) return rf_set_error(RF_ERR_INTERNAL, "block %d has reference count %d", i, k->ref);
        if (refs && refs[i] != k->ref)
            return rf_set_error(RF_ERR_INTERNAL, "block %d has %d references, its owners hold %d", i, k->ref, refs[i]);
        if (k->ref > 0) used++;
        if (k->on_free) {
            on_free++;
            if (k->ref || k->published) return rf_set_error(RF_ERR_INTERNAL, "free block %d is referenced or published", i);
        }
        if (k->published) {
            published++;
            if (find(p, k->hash, k->parent, p->tokens + (size_t)i * p->block_size) != i)
                return rf_set_error(RF_ERR_INTERNAL, "published block %d is not found by its hash", i);
        }
        if (!k->ref && !k->on_free && !k->published)
            return rf_set_error(RF_ERR_INTERNAL, "block %d is lost: unreferenced, unpublished, not free", i);
    }
    for (int32_t i = p->lru_head, prev = -1; i >= 0; prev = i, i = p->b[i].lnext) {
        if (++cached > p->n_blocks) return rf_set_error(RF_ERR_INTERNAL, "eviction list has a cycle");
        if (p->b[i].lprev != prev) return rf_set_error(RF_ERR_INTERNAL, "eviction list broken at block %d", i);
        if (p->b[i].ref || !p->b[i].published)
            return rf_set_error(RF_ERR_INTERNAL, "block %d on the eviction list is referenced or unpublished", i);
    }
    int32_t chained = 0;
    for (uint32_t bk = 0; bk < p->n_buckets; bk++)
        for (int32_t i = p->bucket[bk]; i >= 0; i = p->b[i].hnext) {
            if (++chained > p->n_blocks) return rf_set_error(RF_ERR_INTERNAL, "hash chain has a cycle");
            if (!p->b[i].published || bucket_of(p, p->b[i].hash) != bk)
                return rf_set_error(RF_ERR_INTERNAL, "block %d sits in the wrong hash bucket", i);
        }
    if (used != p->n_used || cached != p->n_cached || on_free != p->n_free || chained != published ||
        used + cached + on_free != p->n_blocks)
        return rf_set_error(RF_ERR_INTERNAL, "pool counts: used %d/%d cached %d/%d free %d/%d published %d chained %d of %d",
                            used, p->n_used, cached, p->n_cached, on_free, p->n_free, published, chained, p->n_blocks);
    return RF_OK;
}
