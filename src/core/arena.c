/* arena.c — the bump allocator (arena.h): chunks of 64 KiB, a block larger than that in a chunk
 * of its own. */
#include "core/arena.h"

#include <stdint.h>
#include <stdlib.h>

#define RF_ARENA_CHUNK ((size_t)1 << 16)

struct rf_arena_chunk {
    rf_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

void *rf_arena_alloc(rf_arena *a, size_t n, rf_arena_fail *why) {
    rf_arena_fail w = RF_ARENA_LIMIT;
    if (n > ((size_t)1 << 40) || (a->limit && n > a->limit)) goto fail; /* also keeps the rounding from wrapping */
    n = n == 0 ? 16 : (n + 15) & ~(size_t)15;
    rf_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        const size_t cap = n > RF_ARENA_CHUNK ? n : RF_ARENA_CHUNK;
        if (a->limit && a->total + cap > a->limit) goto fail;
        w = RF_ARENA_OOM;
        c = malloc(sizeof *c + cap);
        if (!c) goto fail;
        c->used = 0;
        c->cap = cap;
        a->total += cap;
        /* a big one-off block goes behind the current chunk so that its free space stays usable */
        if (a->head && n > RF_ARENA_CHUNK) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->mem + c->used;
    c->used += n;
    return p;
fail:
    if (why) *why = w;
    return NULL;
}

void rf_arena_free(rf_arena *a) {
    rf_arena_chunk *c = a->head;
    while (c) {
        rf_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}
