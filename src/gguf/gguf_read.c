/* gguf_read.c — the GGUF reader: parses and validates a whole file (versions 2 and 3,
 * little-endian) before anything is handed out, and answers metadata and tensor lookups.
 * Hostile input is the normal case here: every count, length and offset is bounded by the bytes
 * that remain before it is used, so a malformed file gives an error and never a crash or a huge
 * allocation. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapped_file.h"
#include "gguf/gguf_internal.h"
#include "rocmforge/quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host (values are copied as stored)"
#endif

typedef struct rf_gguf_kv {
    const char *key;
    rf_gguf_value value;
} rf_gguf_kv;

struct rf_gguf {
    rf_mapped_file mf;
    bool owns_map;
    const uint8_t *base;
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    rf_gguf_kv *kv;
    int64_t n_tensors;
    rf_gguf_tensor *tensors;
    int64_t *kv_hash; /* open addressing over kv indices, -1 = empty; size hash_cap_kv */
    size_t kv_hash_cap;
    int64_t *t_hash;
    size_t t_hash_cap;
    rf_arena arena;
};

/* ---- byte cursor ------------------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    char ctx[160]; /* what is being read, for error messages: "kv 3 ('general.name')" */
} cursor;

static uint64_t remaining(const cursor *c) { return c->size - c->pos; }

static rf_status truncated(const cursor *c, const char *field, uint64_t need) {
    return rf_set_error(RF_ERR_FORMAT,
                        "gguf: %s: %s needs %" PRIu64 " bytes at byte offset %" PRIu64
                        " but the file ends at %" PRIu64 " (truncated)",
                        c->ctx, field, need, c->pos, c->size);
}

static rf_status rd_bytes(cursor *c, void *dst, uint64_t n, const char *field) {
    if (remaining(c) < n) return truncated(c, field, n);
    memcpy(dst, c->p + c->pos, (size_t)n);
    c->pos += n;
    return RF_OK;
}

static rf_status rd_u32(cursor *c, uint32_t *v, const char *field) {
    return rd_bytes(c, v, 4, field);
}

static rf_status rd_u64(cursor *c, uint64_t *v, const char *field) {
    return rd_bytes(c, v, 8, field);
}

/* ---- metadata values -------------------------------------------------------------------- */

/* Reads a string (u64 length + bytes) into the arena, NUL-terminated. `max_len` bounds it
 * (keys, tensor names); UINT64_MAX for values. */
static rf_status rd_str(cursor *c, rf_arena *a, rf_gguf_str *out, uint64_t max_len,
                        const char *field) {
    uint64_t at = c->pos, len = 0;
    rf_status st = rd_u64(c, &len, field);
    if (st) return st;
    if (len > max_len)
        return rf_set_error(RF_ERR_FORMAT,
                            "gguf: %s: %s length is %" PRIu64 ", expected at most %" PRIu64
                            " (byte offset %" PRIu64 ")",
                            c->ctx, field, len, max_len, at);
    if (remaining(c) < len) return truncated(c, field, len);
    char *s = rf_arena_alloc(a, (size_t)len + 1, NULL);
    if (!s) return rf_set_error(RF_ERR_OOM, "gguf: out of memory reading %s", c->ctx);
    memcpy(s, c->p + c->pos, (size_t)len);
    s[len] = 0;
    c->pos += len;
    out->ptr = s;
    out->len = len;
    return RF_OK;
}

static rf_status bad_bool(const cursor *c, unsigned v, uint64_t at) {
    return rf_set_error(RF_ERR_FORMAT,
                        "gguf: %s: bool value is %u, expected 0 or 1 (byte offset %" PRIu64 ")",
                        c->ctx, v, at);
}

/* Reads one scalar of type t (not STRING/ARRAY) into *out. */
static rf_status rd_scalar(cursor *c, rf_gguf_type t, rf_gguf_value *out) {
    uint8_t b[8];
    size_t n = rf_gguf__scalar_size(t);
    uint64_t at = c->pos;
    rf_status st = rd_bytes(c, b, n, rf_gguf_type_name(t));
    if (st) return st;
    out->type = t;
    switch (t) {
    case RF_GGUF_UINT8: out->v.u64 = b[0]; break;
    case RF_GGUF_INT8: out->v.i64 = (int8_t)b[0]; break;
    case RF_GGUF_UINT16: { uint16_t x; memcpy(&x, b, 2); out->v.u64 = x; } break;
    case RF_GGUF_INT16: { int16_t x; memcpy(&x, b, 2); out->v.i64 = x; } break;
    case RF_GGUF_UINT32: { uint32_t x; memcpy(&x, b, 4); out->v.u64 = x; } break;
    case RF_GGUF_INT32: { int32_t x; memcpy(&x, b, 4); out->v.i64 = x; } break;
    case RF_GGUF_UINT64: memcpy(&out->v.u64, b, 8); break;
    case RF_GGUF_INT64: memcpy(&out->v.i64, b, 8); break;
    case RF_GGUF_FLOAT32: { float x; memcpy(&x, b, 4); out->v.f64 = x; } break;
    case RF_GGUF_FLOAT64: memcpy(&out->v.f64, b, 8); break;
    case RF_GGUF_BOOL:
        if (b[0] > 1) return bad_bool(c, b[0], at);
        out->v.b = b[0] != 0;
        break;
    default: return rf_set_error(RF_ERR_INTERNAL, "gguf: rd_scalar on type %d", (int)t);
    }
    return RF_OK;
}

static rf_status rd_type(cursor *c, rf_gguf_type *t, const char *field) {
    uint64_t at = c->pos;
    uint32_t v = 0;
    rf_status st = rd_u32(c, &v, field);
    if (st) return st;
    if (v >= RF_GGUF_TYPE_COUNT)
        return rf_set_error(RF_ERR_FORMAT,
                            "gguf: %s: %s is %" PRIu32 ", expected a metadata type id 0..%d"
                            " (byte offset %" PRIu64 ")",
                            c->ctx, field, v, RF_GGUF_TYPE_COUNT - 1, at);
    *t = (rf_gguf_type)v;
    return RF_OK;
}

/* Reads an array payload (elem type u32, count u64, items) into out (type ARRAY). */
static rf_status rd_array(cursor *c, rf_arena *a, rf_gguf_value *out, int depth) {
    uint64_t at = c->pos;
    rf_gguf_type et = RF_GGUF_UINT8;
    uint64_t n = 0;
    rf_status st = rd_type(c, &et, "array element type");
    if (st) return st;
    if ((st = rd_u64(c, &n, "array length"))) return st;
    /* the smallest encoding of one element bounds the count before anything is allocated */
    uint64_t min_elem = et == RF_GGUF_STRING ? 8 : et == RF_GGUF_ARRAY ? 12 : rf_gguf__scalar_size(et);
    uint64_t need;
    if (rf_mul_overflow_u64(n, min_elem, &need) || need > remaining(c))
        return rf_set_error(RF_ERR_FORMAT,
                            "gguf: %s: array of %" PRIu64 " %s needs at least %" PRIu64
                            " bytes per element but only %" PRIu64
                            " bytes remain (array header at byte offset %" PRIu64 ")",
                            c->ctx, n, rf_gguf_type_name(et), min_elem, remaining(c), at);
    if (et == RF_GGUF_ARRAY && depth + 1 >= RF_GGUF_MAX_NESTING)
        return rf_set_error(RF_ERR_FORMAT,
                            "gguf: %s: arrays nested more than %d deep (byte offset %" PRIu64 ")",
                            c->ctx, RF_GGUF_MAX_NESTING, at);
    size_t esz = et == RF_GGUF_STRING ? sizeof(rf_gguf_str)
               : et == RF_GGUF_ARRAY  ? sizeof(rf_gguf_value)
                                      : rf_gguf__scalar_size(et);
    if (n > SIZE_MAX / esz) return rf_set_error(RF_ERR_OOM, "gguf: %s: array too large", c->ctx);
    void *data = rf_arena_alloc(a, (size_t)n * esz, NULL);
    if (!data) return rf_set_error(RF_ERR_OOM, "gguf: out of memory reading %s", c->ctx);
    out->type = RF_GGUF_ARRAY;
    out->v.arr.elem_type = et;
    out->v.arr.n = n;
    out->v.arr.data = data;
    if (et == RF_GGUF_STRING) {
        rf_gguf_str *s = data;
        for (uint64_t i = 0; i < n; i++)
            if ((st = rd_str(c, a, &s[i], UINT64_MAX, "array string"))) return st;
    } else if (et == RF_GGUF_ARRAY) {
        rf_gguf_value *v = data;
        for (uint64_t i = 0; i < n; i++)
            if ((st = rd_array(c, a, &v[i], depth + 1))) return st;
    } else {
        memcpy(data, c->p + c->pos, (size_t)(n * esz)); /* bounded above; host is little-endian */
        if (et == RF_GGUF_BOOL) {
            const uint8_t *b = data;
            for (uint64_t i = 0; i < n; i++)
                if (b[i] > 1) return bad_bool(c, b[i], c->pos + i);
        }
        c->pos += n * esz;
    }
    return RF_OK;
}

static rf_status rd_value(cursor *c, rf_arena *a, rf_gguf_type t, rf_gguf_value *out) {
    if (t == RF_GGUF_STRING) {
        out->type = RF_GGUF_STRING;
        return rd_str(c, a, &out->v.str, UINT64_MAX, "string value");
    }
    if (t == RF_GGUF_ARRAY) return rd_array(c, a, out, 0);
    return rd_scalar(c, t, out);
}

/* ---- name hash tables ------------------------------------------------------------------- */

static size_t hash_cap_for(int64_t n) {
    size_t cap = 16;
    while (cap < (size_t)n * 2) cap *= 2;
    return cap;
}

/* Finds `name` among names[] through the table; returns its index or -1 (and, if slot is not
 * NULL, the empty slot where it would go). */
static int64_t hash_find(const int64_t *tab, size_t cap, const char *name,
                         const char *(*name_of)(const rf_gguf *, int64_t), const rf_gguf *g,
                         size_t *slot) {
    size_t mask = cap - 1, i = (size_t)rf_gguf__hash(name, strlen(name)) & mask;
    for (;; i = (i + 1) & mask) {
        if (tab[i] < 0) {
            if (slot) *slot = i;
            return -1;
        }
        if (!strcmp(name_of(g, tab[i]), name)) return tab[i];
    }
}

static const char *kv_name(const rf_gguf *g, int64_t i) { return g->kv[i].key; }
static const char *tensor_name(const rf_gguf *g, int64_t i) { return g->tensors[i].name; }

/* ---- parsing ---------------------------------------------------------------------------- */

static int cmp_by_offset(const void *a, const void *b) {
    const rf_gguf_tensor *x = *(const rf_gguf_tensor *const *)a, *y = *(const rf_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static rf_status parse_header(rf_gguf *g, cursor *c) {
    rf_status st;
    snprintf(c->ctx, sizeof c->ctx, "header");
    char magic[4];
    if ((st = rd_bytes(c, magic, 4, "magic"))) return st;
    if (memcmp(magic, RF_GGUF_MAGIC, 4))
        return rf_set_error(RF_ERR_FORMAT,
                            "gguf: header: magic is %02x %02x %02x %02x, expected 'GGUF' "
                            "(47 47 55 46) at byte offset 0: not a GGUF file",
                            (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2],
                            (uint8_t)magic[3]);
    uint32_t ver = 0;
    if ((st = rd_u32(c, &ver, "version"))) return st;
    uint32_t swapped = __builtin_bswap32(ver);
    if (ver == 0 || ((ver & 0xFFFF) == 0 && swapped >= 1 && swapped <= 0xFFFF))
        return ver != 0 && swapped <= RF_GGUF_VERSION
                   ? rf_set_error(RF_ERR_UNSUPPORTED,
                                  "gguf: header: version reads as 0x%08" PRIx32
                                  " (byte offset 4): this is a big-endian GGUF file (version %" PRIu32
                                  "); only little-endian files are supported",
                                  ver, swapped)
                   : rf_set_error(RF_ERR_FORMAT,
                                  "gguf: header: version is 0x%08" PRIx32
                                  ", expected 2 or 3 (byte offset 4)",
                                  ver);
    if (ver == 1)
        return rf_set_error(RF_ERR_UNSUPPORTED,
                            "gguf: header: GGUF version 1 (byte offset 4) is not supported; "
                            "convert the file to version 3 with a current llama.cpp/gguf-py");
    if (ver > RF_GGUF_VERSION)
        return rf_set_error(RF_ERR_UNSUPPORTED,
                            "gguf: header: version is %" PRIu32
                            ", expected 2 or 3 (byte offset 4): file is newer than this reader",
                            ver);
    g->version = ver;
    uint64_t n_tensors = 0, n_kv = 0;
    if ((st = rd_u64(c, &n_tensors, "tensor count"))) return st;
    if ((st = rd_u64(c, &n_kv, "metadata kv count"))) return st;
    /* smallest encodings: kv = key len 8 + 1-byte key + type 4 + 1-byte value; tensor info =
     * name len 8 + n_dims 4 + one dim 8 + type 4 + offset 8 */
    uint64_t need_kv, need_t, need;
    if (rf_mul_overflow_u64(n_kv, 14, &need_kv) || rf_mul_overflow_u64(n_tensors, 32, &need_t) ||
        rf_add_overflow_u64(need_kv, need_t, &need) || need > remaining(c))
        return rf_set_error(RF_ERR_FORMAT,
                            "gguf: header: %" PRIu64 " tensors and %" PRIu64
                            " metadata entries cannot fit in the %" PRIu64
                            " bytes after the header (counts at byte offsets 8 and 16)",
                            n_tensors, n_kv, remaining(c));
    g->n_tensors = (int64_t)n_tensors;
    g->n_kv = (int64_t)n_kv;
    return RF_OK;
}

static rf_status parse_kvs(rf_gguf *g, cursor *c) {
    rf_status st;
    g->kv = calloc((size_t)g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kv);
    g->kv_hash_cap = hash_cap_for(g->n_kv);
    g->kv_hash = malloc(g->kv_hash_cap * sizeof *g->kv_hash);
    if (!g->kv || !g->kv_hash) return rf_set_error(RF_ERR_OOM, "gguf: out of memory (metadata)");
    memset(g->kv_hash, 0xff, g->kv_hash_cap * sizeof *g->kv_hash);
    for (int64_t i = 0; i < g->n_kv; i++) {
        uint64_t at = c->pos;
        snprintf(c->ctx, sizeof c->ctx, "metadata kv %" PRId64, i);
        rf_gguf_str key;
        if ((st = rd_str(c, &g->arena, &key, RF_GGUF_MAX_KEY, "key"))) return st;
        if (key.len == 0)
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: key is empty, expected a name (byte offset %" PRIu64 ")",
                                c->ctx, at);
        if (memchr(key.ptr, 0, (size_t)key.len))
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: key contains a NUL byte (byte offset %" PRIu64 ")",
                                c->ctx, at);
        snprintf(c->ctx, sizeof c->ctx, "metadata kv %" PRId64 " ('%.100s')", i, key.ptr);
        g->kv[i].key = key.ptr;
        size_t slot;
        if (hash_find(g->kv_hash, g->kv_hash_cap, key.ptr, kv_name, g, &slot) >= 0)
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: duplicate key, expected unique keys (byte offset %" PRIu64
                                ")",
                                c->ctx, at);
        g->kv_hash[slot] = i;
        rf_gguf_type t = RF_GGUF_UINT8;
        if ((st = rd_type(c, &t, "value type"))) return st;
        if ((st = rd_value(c, &g->arena, t, &g->kv[i].value))) return st;
    }
    return RF_OK;
}

static rf_status parse_alignment(rf_gguf *g) {
    g->alignment = RF_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = rf_gguf_find_key(g, "general.alignment");
    if (i < 0) return RF_OK;
    const rf_gguf_value *v = &g->kv[i].value;
    if (v->type != RF_GGUF_UINT32)
        return rf_set_error(RF_ERR_FORMAT, "gguf: key 'general.alignment' is %s, expected u32",
                            rf_gguf_type_name(v->type));
    if (v->v.u64 == 0 || v->v.u64 % 8)
        return rf_set_error(RF_ERR_FORMAT,
                            "gguf: key 'general.alignment' is %" PRIu64
                            ", expected a nonzero multiple of 8",
                            v->v.u64);
    g->alignment = v->v.u64;
    return RF_OK;
}

static rf_status parse_tensor_infos(rf_gguf *g, cursor *c) {
    rf_status st;
    g->tensors = calloc((size_t)g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->tensors);
    g->t_hash_cap = hash_cap_for(g->n_tensors);
    g->t_hash = malloc(g->t_hash_cap * sizeof *g->t_hash);
    if (!g->tensors || !g->t_hash) return rf_set_error(RF_ERR_OOM, "gguf: out of memory (tensors)");
    memset(g->t_hash, 0xff, g->t_hash_cap * sizeof *g->t_hash);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        rf_gguf_tensor *t = &g->tensors[i];
        uint64_t at = c->pos;
        snprintf(c->ctx, sizeof c->ctx, "tensor info %" PRId64, i);
        rf_gguf_str name;
        if ((st = rd_str(c, &g->arena, &name, RF_GGUF_MAX_NAME, "name"))) return st;
        if (memchr(name.ptr, 0, (size_t)name.len))
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: name contains a NUL byte (byte offset %" PRIu64 ")",
                                c->ctx, at);
        t->name = name.ptr;
        snprintf(c->ctx, sizeof c->ctx, "tensor %" PRId64 " ('%s')", i, name.ptr);
        size_t slot;
        if (hash_find(g->t_hash, g->t_hash_cap, t->name, tensor_name, g, &slot) >= 0)
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: duplicate tensor name, expected unique names (byte "
                                "offset %" PRIu64 ")",
                                c->ctx, at);
        g->t_hash[slot] = i;
        at = c->pos;
        uint32_t n_dims = 0;
        if ((st = rd_u32(c, &n_dims, "n_dims"))) return st;
        if (n_dims < 1 || n_dims > RF_GGUF_MAX_DIMS)
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: n_dims is %" PRIu32 ", expected 1..%d (byte offset %" PRIu64
                                ")",
                                c->ctx, n_dims, RF_GGUF_MAX_DIMS, at);
        t->n_dims = n_dims;
        uint64_t n_elem = 1;
        for (int d = 0; d < RF_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            at = c->pos;
            uint64_t ne = 0;
            if ((st = rd_u64(c, &ne, "dimension"))) return st;
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return rf_set_error(RF_ERR_FORMAT,
                                    "gguf: %s: ne[%" PRIu32 "] is %" PRIu64
                                    ", expected 1..2^63-1 (byte offset %" PRIu64 ")",
                                    c->ctx, d, ne, at);
            if (rf_mul_overflow_u64(n_elem, ne, &n_elem) || n_elem > (uint64_t)INT64_MAX)
                return rf_set_error(RF_ERR_FORMAT,
                                    "gguf: %s: element count overflows at ne[%" PRIu32
                                    "] = %" PRIu64 ", expected a product below 2^63 (byte offset %" PRIu64
                                    ")",
                                    c->ctx, d, ne, at);
            t->ne[d] = (int64_t)ne;
        }
        at = c->pos;
        uint32_t type = 0;
        if ((st = rd_u32(c, &type, "type"))) return st;
        int64_t blck;
        uint64_t tsize;
        if (!rf_gguf__type_size((int)type, &blck, &tsize) || type > INT32_MAX)
            return rf_set_error(RF_ERR_UNSUPPORTED,
                                "gguf: %s: type id is %" PRIu32
                                ", expected a known ggml type id (byte offset %" PRIu64 ")",
                                c->ctx, type, at);
        t->type = (rf_type)type;
        if (t->ne[0] % blck)
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: ne[0] is %" PRId64 ", expected a multiple of the block "
                                "size %" PRId64 " of its type %s (byte offset %" PRIu64 ")",
                                c->ctx, t->ne[0], blck, rf_type_name((int)type), at);
        uint64_t bytes;
        if (rf_mul_overflow_u64(n_elem / (uint64_t)blck, tsize, &bytes) || bytes > (uint64_t)INT64_MAX)
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: byte size overflows (%" PRIu64 " elements of type %s)"
                                " (byte offset %" PRIu64 ")",
                                c->ctx, n_elem, rf_type_name((int)type), at);
        t->n_bytes = bytes;
        at = c->pos;
        if ((st = rd_u64(c, &t->offset, "offset"))) return st;
        if (t->offset % g->alignment)
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: %s: data offset is %" PRIu64 ", expected a multiple of the "
                                "alignment %" PRIu64 " (byte offset %" PRIu64 ")",
                                c->ctx, t->offset, g->alignment, at);
    }
    return RF_OK;
}

static rf_status place_tensors(rf_gguf *g, cursor *c) {
    uint64_t a = g->alignment, pos = c->pos, data_off;
    if (rf_add_overflow_u64(pos, a - 1, &data_off))
        return rf_set_error(RF_ERR_FORMAT, "gguf: data section offset overflows");
    data_off -= data_off % a;
    g->data_offset = data_off;
    if (g->n_tensors == 0) return RF_OK;
    if (data_off > g->size)
        return rf_set_error(RF_ERR_FORMAT,
                            "gguf: data section starts at byte offset %" PRIu64
                            " (header end %" PRIu64 " aligned to %" PRIu64
                            "), expected inside the file of %" PRIu64 " bytes (truncated)",
                            data_off, pos, a, g->size);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        rf_gguf_tensor *t = &g->tensors[i];
        uint64_t start, end;
        if (rf_add_overflow_u64(data_off, t->offset, &start) ||
            rf_add_overflow_u64(start, t->n_bytes, &end) || end > g->size)
            return rf_set_error(RF_ERR_FORMAT,
                                "gguf: tensor %" PRId64 " ('%s'): data at offset %" PRIu64
                                " + %" PRIu64 " bytes from the data section at byte offset %" PRIu64
                                ", expected inside the file of %" PRIu64 " bytes",
                                i, t->name, t->offset, t->n_bytes, data_off, g->size);
        t->data = g->base + start;
    }
    /* no two tensors may share bytes (a writer never does this; a hostile file might, to make a
     * later in-place conversion clobber another tensor) */
    const rf_gguf_tensor **order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return rf_set_error(RF_ERR_OOM, "gguf: out of memory (tensor order)");
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset);
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const rf_gguf_tensor *p = order[i - 1], *q = order[i];
        if (p->offset + p->n_bytes > q->offset) {
            rf_status st = rf_set_error(RF_ERR_FORMAT,
                                        "gguf: tensors '%s' (offset %" PRIu64 ", %" PRIu64
                                        " bytes) and '%s' (offset %" PRIu64
                                        ") overlap, expected disjoint data",
                                        p->name, p->offset, p->n_bytes, q->name, q->offset);
            free(order);
            return st;
        }
    }
    free(order);
    return RF_OK;
}

static rf_status parse(rf_gguf *g) {
    cursor c = {.p = g->base, .size = g->size, .pos = 0};
    rf_status st;
    if ((st = parse_header(g, &c))) return st;
    if ((st = parse_kvs(g, &c))) return st;
    if ((st = parse_alignment(g))) return st;
    if ((st = parse_tensor_infos(g, &c))) return st;
    return place_tensors(g, &c);
}

rf_status rf_gguf_open_memory(const void *data, size_t size, rf_gguf **out) {
    if (!out) return rf_set_error(RF_ERR_INVALID_ARG, "gguf: out is NULL");
    *out = NULL;
    if (!data && size) return rf_set_error(RF_ERR_INVALID_ARG, "gguf: data is NULL");
    rf_gguf *g = calloc(1, sizeof *g);
    if (!g) return rf_set_error(RF_ERR_OOM, "gguf: out of memory");
    g->base = data;
    g->size = size;
    rf_status st = parse(g);
    if (st) {
        rf_gguf_close(g);
        return st;
    }
    *out = g;
    return RF_OK;
}

rf_status rf_gguf_open(const char *path, rf_gguf **out) {
    if (!out) return rf_set_error(RF_ERR_INVALID_ARG, "gguf: out is NULL");
    *out = NULL;
    rf_mapped_file mf;
    rf_status st = rf_mapped_file_open(path, &mf);
    if (st) return st;
    rf_gguf *g = NULL;
    st = rf_gguf_open_memory(mf.data, mf.size, &g);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", rf_last_error());
        rf_mapped_file_close(&mf);
        /* "gguf: x" -> "gguf: '<path>': x" so the user sees which file */
        const char *rest = strncmp(msg, "gguf: ", 6) ? msg : msg + 6;
        return rf_set_error(st, "gguf: '%s': %s", path, rest);
    }
    g->mf = mf;
    g->owns_map = true;
    *out = g;
    return RF_OK;
}

void rf_gguf_close(rf_gguf *g) {
    if (!g) return;
    rf_arena_free(&g->arena);
    free(g->kv);
    free(g->kv_hash);
    free(g->tensors);
    free(g->t_hash);
    if (g->owns_map) rf_mapped_file_close(&g->mf);
    free(g);
}

/* ---- accessors -------------------------------------------------------------------------- */

uint32_t rf_gguf_version(const rf_gguf *g) { return g->version; }
uint64_t rf_gguf_alignment(const rf_gguf *g) { return g->alignment; }
uint64_t rf_gguf_data_offset(const rf_gguf *g) { return g->data_offset; }
uint64_t rf_gguf_file_size(const rf_gguf *g) { return g->size; }
int64_t rf_gguf_n_kv(const rf_gguf *g) { return g->n_kv; }

const char *rf_gguf_kv_key(const rf_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

const rf_gguf_value *rf_gguf_kv_value(const rf_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kv[i].value : NULL;
}

int64_t rf_gguf_find_key(const rf_gguf *g, const char *key) {
    if (!g || !key || !g->kv_hash) return -1;
    return hash_find(g->kv_hash, g->kv_hash_cap, key, kv_name, g, NULL);
}

int64_t rf_gguf_n_tensors(const rf_gguf *g) { return g->n_tensors; }

const rf_gguf_tensor *rf_gguf_tensor_at(const rf_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const rf_gguf_tensor *rf_gguf_find_tensor(const rf_gguf *g, const char *name) {
    if (!g || !name || !g->t_hash) return NULL;
    int64_t i = hash_find(g->t_hash, g->t_hash_cap, name, tensor_name, g, NULL);
    return i >= 0 ? &g->tensors[i] : NULL;
}

/* ---- typed getters ---------------------------------------------------------------------- */

static rf_status lookup(const rf_gguf *g, const char *key, const rf_gguf_value **v) {
    if (!g || !key) return rf_set_error(RF_ERR_INVALID_ARG, "gguf: NULL handle or key");
    int64_t i = rf_gguf_find_key(g, key);
    if (i < 0) return rf_set_error(RF_ERR_NOT_FOUND, "gguf: key '%s' not found", key);
    *v = &g->kv[i].value;
    return RF_OK;
}

static bool is_unsigned(rf_gguf_type t) {
    return t == RF_GGUF_UINT8 || t == RF_GGUF_UINT16 || t == RF_GGUF_UINT32 || t == RF_GGUF_UINT64;
}
static bool is_signed(rf_gguf_type t) {
    return t == RF_GGUF_INT8 || t == RF_GGUF_INT16 || t == RF_GGUF_INT32 || t == RF_GGUF_INT64;
}

/* Integer value of `key` checked against [lo, hi] (as signed/unsigned 128-bit-free logic). */
static rf_status get_int(const rf_gguf *g, const char *key, const char *want, bool want_signed,
                         uint64_t umax, int64_t smin, int64_t smax, uint64_t *u, int64_t *s) {
    const rf_gguf_value *v = NULL;
    rf_status st = lookup(g, key, &v);
    if (st) return st;
    if (is_unsigned(v->type)) {
        uint64_t x = v->v.u64;
        if (want_signed ? x > (uint64_t)smax : x > umax)
            return rf_set_error(RF_ERR_RANGE, "gguf: key '%s' is %" PRIu64 ", does not fit in %s",
                                key, x, want);
        if (want_signed) *s = (int64_t)x; else *u = x;
        return RF_OK;
    }
    if (is_signed(v->type)) {
        int64_t x = v->v.i64;
        if (want_signed ? (x < smin || x > smax) : (x < 0 || (uint64_t)x > umax))
            return rf_set_error(RF_ERR_RANGE, "gguf: key '%s' is %" PRId64 ", does not fit in %s",
                                key, x, want);
        if (want_signed) *s = x; else *u = (uint64_t)x;
        return RF_OK;
    }
    return rf_set_error(RF_ERR_TYPE, "gguf: key '%s' is %s, expected an integer (%s)", key,
                        rf_gguf_type_name(v->type), want);
}

rf_status rf_gguf_get_u32(const rf_gguf *g, const char *key, uint32_t *out) {
    uint64_t u = 0;
    rf_status st = get_int(g, key, "u32", false, UINT32_MAX, 0, 0, &u, NULL);
    if (!st) *out = (uint32_t)u;
    return st;
}

rf_status rf_gguf_get_i32(const rf_gguf *g, const char *key, int32_t *out) {
    int64_t s = 0;
    rf_status st = get_int(g, key, "i32", true, 0, INT32_MIN, INT32_MAX, NULL, &s);
    if (!st) *out = (int32_t)s;
    return st;
}

rf_status rf_gguf_get_u64(const rf_gguf *g, const char *key, uint64_t *out) {
    uint64_t u = 0;
    rf_status st = get_int(g, key, "u64", false, UINT64_MAX, 0, 0, &u, NULL);
    if (!st) *out = u;
    return st;
}

rf_status rf_gguf_get_f32(const rf_gguf *g, const char *key, float *out) {
    const rf_gguf_value *v = NULL;
    rf_status st = lookup(g, key, &v);
    if (st) return st;
    if (v->type != RF_GGUF_FLOAT32 && v->type != RF_GGUF_FLOAT64)
        return rf_set_error(RF_ERR_TYPE, "gguf: key '%s' is %s, expected f32 or f64", key,
                            rf_gguf_type_name(v->type));
    double d = v->v.f64;
    if (isfinite(d) && fabs(d) > 3.4028234663852886e38)
        return rf_set_error(RF_ERR_RANGE, "gguf: key '%s' is %g, does not fit in f32", key, d);
    *out = (float)d;
    return RF_OK;
}

rf_status rf_gguf_get_bool(const rf_gguf *g, const char *key, bool *out) {
    const rf_gguf_value *v = NULL;
    rf_status st = lookup(g, key, &v);
    if (st) return st;
    if (v->type != RF_GGUF_BOOL)
        return rf_set_error(RF_ERR_TYPE, "gguf: key '%s' is %s, expected bool", key,
                            rf_gguf_type_name(v->type));
    *out = v->v.b;
    return RF_OK;
}

rf_status rf_gguf_get_str(const rf_gguf *g, const char *key, const char **out) {
    const rf_gguf_value *v = NULL;
    rf_status st = lookup(g, key, &v);
    if (st) return st;
    if (v->type != RF_GGUF_STRING)
        return rf_set_error(RF_ERR_TYPE, "gguf: key '%s' is %s, expected string", key,
                            rf_gguf_type_name(v->type));
    *out = v->v.str.ptr;
    return RF_OK;
}

rf_status rf_gguf_get_arr(const rf_gguf *g, const char *key, int elem_type, uint64_t *n,
                          const void **data) {
    const rf_gguf_value *v = NULL;
    rf_status st = lookup(g, key, &v);
    if (st) return st;
    if (v->type != RF_GGUF_ARRAY)
        return rf_set_error(RF_ERR_TYPE, "gguf: key '%s' is %s, expected array", key,
                            rf_gguf_type_name(v->type));
    if (elem_type >= 0 && (int)v->v.arr.elem_type != elem_type)
        return rf_set_error(RF_ERR_TYPE, "gguf: key '%s' is an array of %s, expected array of %s",
                            key, rf_gguf_type_name(v->v.arr.elem_type),
                            rf_gguf_type_name((rf_gguf_type)elem_type));
    if (n) *n = v->v.arr.n;
    if (data) *data = v->v.arr.data;
    return RF_OK;
}
