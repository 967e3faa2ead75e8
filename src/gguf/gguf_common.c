/* gguf_common.c — pieces shared by the GGUF reader and writer: metadata type names and sizes,
 * tensor byte sizes (validation), the bump arena and deep copies of metadata values. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_internal.h"

const char *rf_gguf_type_name(rf_gguf_type t) {
    static const char *const names[RF_GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
        "f64"};
    if ((unsigned)t >= RF_GGUF_TYPE_COUNT) return "?";
    return names[t];
}

size_t rf_gguf__scalar_size(rf_gguf_type t) {
    switch (t) {
    case RF_GGUF_UINT8: case RF_GGUF_INT8: case RF_GGUF_BOOL: return 1;
    case RF_GGUF_UINT16: case RF_GGUF_INT16: return 2;
    case RF_GGUF_UINT32: case RF_GGUF_INT32: case RF_GGUF_FLOAT32: return 4;
    case RF_GGUF_UINT64: case RF_GGUF_INT64: case RF_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Block sizes and bytes per block, ggml's numbers (ggml-common.h static_asserts). Kept here,
 * private to validation, so that the GGUF reader does not depend on which converters the quant
 * module implements. */
bool rf_gguf__type_size(int type, int64_t *block_size, uint64_t *type_size) {
    static const struct { int16_t blck; int16_t size; } tab[RF_TYPE_COUNT] = {
        [RF_TYPE_F32] = {1, 4},       [RF_TYPE_F16] = {1, 2},       [RF_TYPE_Q4_0] = {32, 18},
        [RF_TYPE_Q4_1] = {32, 20},    [RF_TYPE_Q5_0] = {32, 22},    [RF_TYPE_Q5_1] = {32, 24},
        [RF_TYPE_Q8_0] = {32, 34},    [RF_TYPE_Q8_1] = {32, 36},    [RF_TYPE_Q2_K] = {256, 84},
        [RF_TYPE_Q3_K] = {256, 110},  [RF_TYPE_Q4_K] = {256, 144},  [RF_TYPE_Q5_K] = {256, 176},
        [RF_TYPE_Q6_K] = {256, 210},  [RF_TYPE_Q8_K] = {256, 292},  [RF_TYPE_IQ2_XXS] = {256, 66},
        [RF_TYPE_IQ2_XS] = {256, 74}, [RF_TYPE_IQ3_XXS] = {256, 98}, [RF_TYPE_IQ1_S] = {256, 50},
        [RF_TYPE_IQ4_NL] = {32, 18},  [RF_TYPE_IQ3_S] = {256, 110}, [RF_TYPE_IQ2_S] = {256, 82},
        [RF_TYPE_IQ4_XS] = {256, 136}, [RF_TYPE_I8] = {1, 1},       [RF_TYPE_I16] = {1, 2},
        [RF_TYPE_I32] = {1, 4},       [RF_TYPE_I64] = {1, 8},       [RF_TYPE_F64] = {1, 8},
        [RF_TYPE_IQ1_M] = {256, 56},  [RF_TYPE_BF16] = {1, 2},      [RF_TYPE_TQ1_0] = {256, 54},
        [RF_TYPE_TQ2_0] = {256, 66},  [RF_TYPE_MXFP4] = {32, 17},   [RF_TYPE_NVFP4] = {64, 36},
    };
    if (type < 0 || type >= RF_TYPE_COUNT || tab[type].blck == 0) return false;
    *block_size = tab[type].blck;
    *type_size = (uint64_t)tab[type].size;
    return true;
}

bool rf_gguf__tensor_bytes(int type, uint32_t n_dims, const int64_t *ne, uint64_t *n_elem,
                           uint64_t *n_bytes) {
    int64_t blck;
    uint64_t tsize;
    if (!rf_gguf__type_size(type, &blck, &tsize)) return false;
    if (n_dims < 1 || n_dims > RF_GGUF_MAX_DIMS) return false;
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) return false;
        if (rf_mul_overflow_u64(n, (uint64_t)ne[d], &n) || n > (uint64_t)INT64_MAX) return false;
    }
    if (ne[0] % blck) return false;
    uint64_t bytes;
    if (rf_mul_overflow_u64(n / (uint64_t)blck, tsize, &bytes) || bytes > (uint64_t)INT64_MAX)
        return false;
    *n_elem = n;
    *n_bytes = bytes;
    return true;
}

/* ---- arena ----------------------------------------------------------------------------- */

struct rf_gguf_arena_chunk {
    rf_gguf_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

void *rf_gguf__arena_alloc(rf_gguf_arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    rf_gguf_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > ((size_t)1 << 16) ? size : ((size_t)1 << 16);
        if (cap > SIZE_MAX - sizeof *c) return NULL;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->used = 0;
        c->cap = cap;
        /* a big one-off block goes behind the current chunk so its free space stays usable */
        if (a->head && size > ((size_t)1 << 16)) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->mem + c->used;
    c->used += size;
    return p;
}

void rf_gguf__arena_free(rf_gguf_arena *a) {
    rf_gguf_arena_chunk *c = a->head;
    while (c) {
        rf_gguf_arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

static bool copy_str(rf_gguf_arena *a, rf_gguf_str *dst, const rf_gguf_str *src) {
    if (src->len >= SIZE_MAX) return false;
    char *p = rf_gguf__arena_alloc(a, (size_t)src->len + 1);
    if (!p) return false;
    if (src->len) memcpy(p, src->ptr, (size_t)src->len);
    p[src->len] = 0;
    dst->ptr = p;
    dst->len = src->len;
    return true;
}

bool rf_gguf__value_copy(rf_gguf_arena *a, rf_gguf_value *dst, const rf_gguf_value *src) {
    *dst = *src;
    if (src->type == RF_GGUF_STRING) return copy_str(a, &dst->v.str, &src->v.str);
    if (src->type != RF_GGUF_ARRAY) return true;
    uint64_t n = src->v.arr.n;
    rf_gguf_type et = src->v.arr.elem_type;
    size_t esz = et == RF_GGUF_STRING ? sizeof(rf_gguf_str)
               : et == RF_GGUF_ARRAY  ? sizeof(rf_gguf_value)
                                      : rf_gguf__scalar_size(et);
    if (esz == 0) return false;
    if (n > SIZE_MAX / esz) return false;
    void *d = rf_gguf__arena_alloc(a, (size_t)n * esz);
    if (!d) return false;
    dst->v.arr.data = d;
    if (et == RF_GGUF_STRING) {
        const rf_gguf_str *s = src->v.arr.data;
        rf_gguf_str *o = d;
        for (uint64_t i = 0; i < n; i++)
            if (!copy_str(a, &o[i], &s[i])) return false;
    } else if (et == RF_GGUF_ARRAY) {
        const rf_gguf_value *s = src->v.arr.data;
        rf_gguf_value *o = d;
        for (uint64_t i = 0; i < n; i++)
            if (!rf_gguf__value_copy(a, &o[i], &s[i])) return false;
    } else if (n) {
        memcpy(d, src->v.arr.data, (size_t)n * esz);
    }
    return true;
}
