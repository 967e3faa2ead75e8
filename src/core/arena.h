/* arena.h — the bump allocator that GGUF metadata and Jinja parses and renders allocate from:
 * 16-byte aligned blocks carved from 64 KiB chunks, freed all at once, with an optional limit on
 * the bytes of chunks held. */
#ifndef RF_CORE_ARENA_H
#define RF_CORE_ARENA_H

#include <stddef.h>

typedef struct rf_arena_chunk rf_arena_chunk;

typedef struct rf_arena {
    rf_arena_chunk *head; /* the chunk carved from; a one-off chunk of a big block sits behind it */
    size_t total;         /* bytes of chunks held */
    size_t limit;         /* 0: none; else total never exceeds it */
} rf_arena;

typedef enum rf_arena_fail {
    RF_ARENA_OOM = 1,   /* malloc failed */
    RF_ARENA_LIMIT = 2, /* past the arena's limit, or a block past 2^40 bytes */
} rf_arena_fail;

/* A block of n bytes (n 0: 16), 16-byte aligned, not zeroed, valid until rf_arena_free. NULL on
 * failure, the reason in *why where why is not NULL. A zeroed rf_arena is an empty arena. */
void *rf_arena_alloc(rf_arena *a, size_t n, rf_arena_fail *why);

/* Every block back at once; the arena is empty again (its limit kept). */
void rf_arena_free(rf_arena *a);

#endif
