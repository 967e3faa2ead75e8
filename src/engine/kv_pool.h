/* kv_pool.h — the paged KV cache's bookkeeping (docs/ARCHITECTURE.md §4.4): which of the pool's fixed-size
 * blocks are free, who references each one, and the prefix cache that finds full blocks by the
 * tokens they and their predecessors hold. Host-only; the K/V rows themselves live in the
 * backend tensors of the forward (rf_fwd), indexed by the block ids handed out here. */
#ifndef RF_KV_POOL_H
#define RF_KV_POOL_H

#include "rocmforge/core.h"

typedef struct rf_kv_pool rf_kv_pool;

/* A pool of n_blocks blocks of block_size positions. With prefix_cache, full blocks can be
 * published and found again by their hash chain. RF_ERR_INVALID_ARG for sizes < 1,
 * RF_ERR_OOM if the bookkeeping cannot be allocated. */
rf_status rf_kv_pool_new(int32_t n_blocks, int32_t block_size, bool prefix_cache, rf_kv_pool **out);
void rf_kv_pool_free(rf_kv_pool *p);

int32_t rf_kv_pool_n_blocks(const rf_kv_pool *p);
int32_t rf_kv_pool_block_size(const rf_kv_pool *p);
bool rf_kv_pool_prefix_cache(const rf_kv_pool *p);
/* Blocks on the free list (never used, or released without being published). */
int32_t rf_kv_pool_n_free(const rf_kv_pool *p);
/* Published blocks nobody references: kept for prefix hits, evicted least-recently-used. */
int32_t rf_kv_pool_n_cached(const rf_kv_pool *p);
/* Blocks with a reference count > 0. n_free + n_cached + n_used == n_blocks. */
int32_t rf_kv_pool_n_used(const rf_kv_pool *p);
/* Blocks an allocation can still get: n_free + n_cached. */
int32_t rf_kv_pool_available(const rf_kv_pool *p);

/* Takes a block with reference count 1, not published: from the free list, else by evicting
 * the least-recently-used cached block (which leaves the prefix cache). -1 when none is left. */
int32_t rf_kv_pool_alloc(rf_kv_pool *p);
/* Adds a reference (a cached block with none leaves the eviction list). */
void rf_kv_pool_ref(rf_kv_pool *p, int32_t block);
/* Drops a reference. At zero a published block joins the eviction list as most recently used;
 * any other block returns to the free list. */
void rf_kv_pool_unref(rf_kv_pool *p, int32_t block);
int32_t rf_kv_pool_refcount(const rf_kv_pool *p, int32_t block);
/* True when the caller (holding one reference) may write into the block: nobody else
 * references it and it is not published. Otherwise a write needs copy-on-write. */
bool rf_kv_pool_writable(const rf_kv_pool *p, int32_t block);

/* The hash of a full block: parent = hash of the previous block (0 for the first). */
uint64_t rf_kv_block_hash(uint64_t parent, const int32_t *tokens, int32_t n);
/* Finds a published block holding exactly `tokens` (block_size of them) after the block whose
 * hash is `parent`; takes a reference to it and returns its id, or -1 (and counts the miss). */
int32_t rf_kv_pool_lookup(rf_kv_pool *p, uint64_t parent, const int32_t *tokens);
/* Publishes a full block the caller references, holding `tokens` after `parent`, so later
 * lookups find it. Does nothing without a prefix cache or when an equal block is already
 * published (the first stays; this one remains a private block). Returns whether it was. */
bool rf_kv_pool_publish(rf_kv_pool *p, int32_t block, uint64_t parent, const int32_t *tokens);

/* Checks every invariant (counts add up, lists and hash chains consistent, no block both free
 * and referenced); when refs is non-NULL, also that block b's count equals refs[b].
 * RF_ERR_INTERNAL naming the first broken one. For tests. */
rf_status rf_kv_pool_check(const rf_kv_pool *p, const int32_t *refs);

#endif
