/* gguf_internal.h — what the GGUF reader, writer and their tests share but users do not:
 * limits from the spec, the tensor-type size lookup used for validation, and deep copies of
 * values into an arena (core/arena.h). */
#ifndef RF_GGUF_INTERNAL_H
#define RF_GGUF_INTERNAL_H

#include "core/arena.h"
#include "rocmforge/gguf.h"

#define RF_GGUF_MAGIC "GGUF"
#define RF_GGUF_VERSION 3
/* Tensor names: the spec allows at most 64 bytes; ggml stores names in char[64] with a NUL,
 * so the writer refuses 64 (a file ROCmForge writes must load in llama.cpp). */
#define RF_GGUF_MAX_NAME 64
#define RF_GGUF_MAX_KEY 65535 /* spec: keys are at most 2^16-1 bytes */
/* Nested arrays deeper than this are refused: recursion depth must not depend on the file. */
#define RF_GGUF_MAX_NESTING 8

/* Block size (elements) and bytes per block of a ggml type; false for an invalid/removed id. */
bool rf_gguf__type_size(int type, int64_t *block_size, uint64_t *type_size);

/* Bytes of a tensor of this type and shape, overflow-checked; false when it does not fit in
 * uint64 / int64 element counts or ne[0] is not a multiple of the block size. */
bool rf_gguf__tensor_bytes(int type, uint32_t n_dims, const int64_t *ne, uint64_t *n_elem,
                           uint64_t *n_bytes);

/* Size in bytes of one scalar of a metadata type (0 for STRING/ARRAY/invalid). */
size_t rf_gguf__scalar_size(rf_gguf_type t);

/* Deep copy of a value into an arena (strings get a NUL); false on OOM. */
bool rf_gguf__value_copy(rf_arena *a, rf_gguf_value *dst, const rf_gguf_value *src);

/* FNV-1a hash of a byte string (hash tables for keys and tensor names). */
static inline uint64_t rf_gguf__hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

#endif
