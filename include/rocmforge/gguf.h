/* rocmforge/gguf.h — GGUF reader (mmap, fully validated before use) and writer (streaming).
 * The format: docs/gguf.md. Versions 2 and 3, little-endian only.
 * User documentation (what is accepted, error messages, inspect, fuzzing): docs/gguf.md. */
#ifndef ROCMFORGE_GGUF_H
#define ROCMFORGE_GGUF_H

#include <stdio.h>

#include "rocmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_GGUF_DEFAULT_ALIGNMENT 32
#define RF_GGUF_MAX_DIMS 4

/* Metadata value types, with the ids stored in the file. */
typedef enum rf_gguf_type {
    RF_GGUF_UINT8 = 0,
    RF_GGUF_INT8 = 1,
    RF_GGUF_UINT16 = 2,
    RF_GGUF_INT16 = 3,
    RF_GGUF_UINT32 = 4,
    RF_GGUF_INT32 = 5,
    RF_GGUF_FLOAT32 = 6,
    RF_GGUF_BOOL = 7,
    RF_GGUF_STRING = 8,
    RF_GGUF_ARRAY = 9,
    RF_GGUF_UINT64 = 10,
    RF_GGUF_INT64 = 11,
    RF_GGUF_FLOAT64 = 12,
    RF_GGUF_TYPE_COUNT = 13
} rf_gguf_type;

const char *rf_gguf_type_name(rf_gguf_type t); /* "u32", "string", "array", ... */

/* A string as stored: `len` bytes, plus a NUL the reader appends (strings may contain NUL). */
typedef struct rf_gguf_str {
    const char *ptr;
    uint64_t len;
} rf_gguf_str;

/* A metadata value. For arrays: elem_type says what `data` points to:
 *   numeric/bool  -> packed host-order values of that type (bool as uint8 0/1),
 *   STRING        -> rf_gguf_str[n],
 *   ARRAY         -> rf_gguf_value[n] (nested arrays; each element is itself an ARRAY value). */
typedef struct rf_gguf_value {
    rf_gguf_type type;
    union {
        uint64_t u64; /* UINT8..UINT64 */
        int64_t i64;  /* INT8..INT64 */
        double f64;   /* FLOAT32, FLOAT64 */
        bool b;       /* BOOL */
        rf_gguf_str str;
        struct {
            rf_gguf_type elem_type;
            uint64_t n;
            const void *data;
        } arr;
    } v;
} rf_gguf_value;

typedef struct rf_gguf_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne[RF_GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    rf_type type;
    uint64_t offset;   /* relative to the start of the data section */
    uint64_t n_bytes;  /* validated: offset + n_bytes inside the file */
    const void *data;  /* points into the mapped file (or the open_memory buffer) */
} rf_gguf_tensor;

typedef struct rf_gguf rf_gguf; /* an open, validated file */

/* Opens and validates a GGUF file (mmap, read() fallback). Every offset and size is checked
 * before use; a malformed file gives RF_ERR_FORMAT naming the field, what was expected and the
 * byte offset; version 1, a newer version, a big-endian file or a tensor type id the type table
 * does not know give RF_ERR_UNSUPPORTED; a missing file RF_ERR_IO. Messages from rf_gguf_open
 * name the path. Never aborts, never allocates more than a small multiple of the file size.
 * Checked: keys non-empty and unique; bools 0/1; arrays nested at most 8 deep;
 * general.alignment a u32, nonzero multiple of 8; tensor names <= 64 bytes and unique, n_dims
 * 1..4, dims > 0, element count < 2^63, byte size overflow-free, ne[0] a multiple of the block
 * size, offsets aligned, data inside the file, tensors not overlapping. */
rf_status rf_gguf_open(const char *path, rf_gguf **out);

/* Same, over a caller-owned buffer that must outlive the handle (fuzzing, tests). */
rf_status rf_gguf_open_memory(const void *data, size_t size, rf_gguf **out);

void rf_gguf_close(rf_gguf *g);

uint32_t rf_gguf_version(const rf_gguf *g);
uint64_t rf_gguf_alignment(const rf_gguf *g);
uint64_t rf_gguf_data_offset(const rf_gguf *g); /* file offset of the tensor data section */
uint64_t rf_gguf_file_size(const rf_gguf *g);

/* Metadata, in file order. */
int64_t rf_gguf_n_kv(const rf_gguf *g);
const char *rf_gguf_kv_key(const rf_gguf *g, int64_t i);
const rf_gguf_value *rf_gguf_kv_value(const rf_gguf *g, int64_t i);
/* Index of a key or -1. */
int64_t rf_gguf_find_key(const rf_gguf *g, const char *key);

/* Typed getters. RF_ERR_NOT_FOUND names a missing key; RF_ERR_TYPE names the key, the expected
 * and the actual type. Integer getters accept any integer type whose value fits (else
 * RF_ERR_RANGE); get_f32 accepts FLOAT32/FLOAT64. */
rf_status rf_gguf_get_u32(const rf_gguf *g, const char *key, uint32_t *out);
rf_status rf_gguf_get_i32(const rf_gguf *g, const char *key, int32_t *out);
rf_status rf_gguf_get_u64(const rf_gguf *g, const char *key, uint64_t *out);
rf_status rf_gguf_get_f32(const rf_gguf *g, const char *key, float *out);
rf_status rf_gguf_get_bool(const rf_gguf *g, const char *key, bool *out);
/* NUL-terminated; valid while g is open. */
rf_status rf_gguf_get_str(const rf_gguf *g, const char *key, const char **out);
/* Any array; RF_ERR_TYPE if `key` is not an array or (elem_type >= 0) its elements differ. */
rf_status rf_gguf_get_arr(const rf_gguf *g, const char *key, int elem_type, uint64_t *n,
                          const void **data);

/* Tensors, in file order. */
int64_t rf_gguf_n_tensors(const rf_gguf *g);
const rf_gguf_tensor *rf_gguf_tensor_at(const rf_gguf *g, int64_t i);
const rf_gguf_tensor *rf_gguf_find_tensor(const rf_gguf *g, const char *name); /* NULL if absent */

/* ---- writer ---------------------------------------------------------------------------- */

typedef struct rf_gguf_writer rf_gguf_writer;

/* Produces the bytes of tensor `index` on demand so large models stream to disk:
 * fill `size` bytes at `dst`, starting `offset` bytes into the tensor. */
typedef rf_status (*rf_gguf_fill_fn)(void *user, int64_t index, uint64_t offset, void *dst,
                                     uint64_t size);

rf_gguf_writer *rf_gguf_writer_new(void); /* NULL on OOM */
void rf_gguf_writer_free(rf_gguf_writer *w);

/* Metadata setters append in call order; setting an existing key replaces its value (keeping
 * its position). Values are copied. RF_ERR_INVALID_ARG for an empty key, a NULL string, a bool
 * other than 0/1, or a general.alignment that is not a u32 nonzero multiple of 8. */
rf_status rf_gguf_set_u8(rf_gguf_writer *w, const char *key, uint8_t v);
rf_status rf_gguf_set_i8(rf_gguf_writer *w, const char *key, int8_t v);
rf_status rf_gguf_set_u16(rf_gguf_writer *w, const char *key, uint16_t v);
rf_status rf_gguf_set_i16(rf_gguf_writer *w, const char *key, int16_t v);
rf_status rf_gguf_set_u32(rf_gguf_writer *w, const char *key, uint32_t v);
rf_status rf_gguf_set_i32(rf_gguf_writer *w, const char *key, int32_t v);
rf_status rf_gguf_set_u64(rf_gguf_writer *w, const char *key, uint64_t v);
rf_status rf_gguf_set_i64(rf_gguf_writer *w, const char *key, int64_t v);
rf_status rf_gguf_set_f32(rf_gguf_writer *w, const char *key, float v);
rf_status rf_gguf_set_f64(rf_gguf_writer *w, const char *key, double v);
rf_status rf_gguf_set_bool(rf_gguf_writer *w, const char *key, bool v);
rf_status rf_gguf_set_str(rf_gguf_writer *w, const char *key, const char *v);
/* Numeric/bool arrays: `data` holds n packed values of elem_type (copied). */
rf_status rf_gguf_set_arr(rf_gguf_writer *w, const char *key, rf_gguf_type elem_type,
                          const void *data, uint64_t n);
rf_status rf_gguf_set_arr_str(rf_gguf_writer *w, const char *key, const char *const *strs,
                              uint64_t n);
/* Any value, nested arrays included (deep-copied). */
rf_status rf_gguf_set_value(rf_gguf_writer *w, const char *key, const rf_gguf_value *v);

/* Adds a tensor. Exactly one of `data` (borrowed until write) or `fill` supplies the bytes;
 * `fill` is called in order, in chunks of at most 1 MiB, during the write. RF_ERR_INVALID_ARG
 * for a name of 64+ bytes (ggml's limit incl. NUL) or a duplicate name, n_dims outside 1..4,
 * a dim <= 0, an unknown type, ne[0] not a multiple of the block size or a size >= 2^63. */
rf_status rf_gguf_add_tensor(rf_gguf_writer *w, const char *name, rf_type type, uint32_t n_dims,
                             const int64_t *ne, const void *data, rf_gguf_fill_fn fill,
                             void *user);

/* Writes version 3 in one pass (no seeking): header, metadata in order, tensor infos, then
 * the data with each tensor at an offset aligned to `general.alignment` (default 32), zero
 * padding after the header and after every tensor (as ggml writes it). Deterministic; writing
 * what the reader returns gives the same bytes. write_file writes `<path>.part<pid>` and renames
 * it to path when complete: readers never see a partial file, and on failure the partial file
 * is removed and an existing file at path is left as it was. */
rf_status rf_gguf_write_file(rf_gguf_writer *w, const char *path);
rf_status rf_gguf_write_stream(rf_gguf_writer *w, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
