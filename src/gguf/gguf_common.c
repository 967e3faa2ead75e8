/* gguf_common.c — pieces shared by the GGUF reader and writer: metadata type names and sizes,
 * tensor byte sizes (validation) and deep copies of metadata values into an arena. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_internal.h"
#include "rocmforge/quant.h"

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

/* Block size and bytes per block come from the type table (src/quant), the one place that
 * knows the formats; ids it does not know (removed, newer than us) are refused. */
bool rf_gguf__type_size(int type, int64_t *block_size, uint64_t *type_size) {
    const rf_type_traits *tt = rf_type_info(type);
    if (!tt || tt->block_size <= 0 || tt->type_size == 0) return false;
    *block_size = tt->block_size;
    *type_size = (uint64_t)tt->type_size;
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

static bool copy_str(rf_arena *a, rf_gguf_str *dst, const rf_gguf_str *src) {
    if (src->len >= SIZE_MAX) return false;
    char *p = rf_arena_alloc(a, (size_t)src->len + 1, NULL);
    if (!p) return false;
    if (src->len) memcpy(p, src->ptr, (size_t)src->len);
    p[src->len] = 0;
    dst->ptr = p;
    dst->len = src->len;
    return true;
}

bool rf_gguf__value_copy(rf_arena *a, rf_gguf_value *dst, const rf_gguf_value *src) {
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
    void *d = rf_arena_alloc(a, (size_t)n * esz, NULL);
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
