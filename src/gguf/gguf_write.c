/* gguf_write.c — the GGUF writer: collects metadata and tensor descriptions, then streams a
 * version-3 file in one pass (no seeking, so it can write to a pipe). Tensor bytes come from a
 * borrowed buffer or a fill callback in bounded chunks, so a model larger than memory can be
 * written. Output is deterministic: the same calls give the same bytes. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf_internal.h"

#define RF_GGUF_FILL_CHUNK ((uint64_t)1 << 20) /* bytes per fill callback call */

typedef struct wkv {
    char *key;
    rf_gguf_value value;
} wkv;

typedef struct wtensor {
    char *name;
    rf_type type;
    uint32_t n_dims;
    int64_t ne[RF_GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset; /* assigned at write time */
    const void *data;
    rf_gguf_fill_fn fill;
    void *user;
} wtensor;

struct rf_gguf_writer {
    wkv *kv;
    int64_t n_kv, cap_kv;
    wtensor *t;
    int64_t n_t, cap_t;
    rf_arena arena;
};

rf_gguf_writer *rf_gguf_writer_new(void) { return calloc(1, sizeof(rf_gguf_writer)); }

void rf_gguf_writer_free(rf_gguf_writer *w) {
    if (!w) return;
    free(w->kv);
    free(w->t);
    rf_arena_free(&w->arena);
    free(w);
}

/* ---- metadata --------------------------------------------------------------------------- */

/* Checks that a value is well-formed (valid types, nesting depth, 0/1 bools, non-NULL data). */
static rf_status check_value(const char *key, const rf_gguf_value *v, int depth) {
    if ((unsigned)v->type >= RF_GGUF_TYPE_COUNT)
        return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: key '%s': invalid value type %d",
                            key, (int)v->type);
    if (v->type == RF_GGUF_STRING) {
        if (!v->v.str.ptr && v->v.str.len)
            return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string", key);
        return RF_OK;
    }
    if (v->type != RF_GGUF_ARRAY) return RF_OK;
    rf_gguf_type et = v->v.arr.elem_type;
    uint64_t n = v->v.arr.n;
    if ((unsigned)et >= RF_GGUF_TYPE_COUNT)
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "gguf writer: key '%s': invalid array element type %d", key, (int)et);
    if (n && !v->v.arr.data)
        return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: key '%s': NULL array data", key);
    if (et == RF_GGUF_ARRAY) {
        if (depth + 1 >= RF_GGUF_MAX_NESTING)
            return rf_set_error(RF_ERR_INVALID_ARG,
                                "gguf writer: key '%s': arrays nested more than %d deep", key,
                                RF_GGUF_MAX_NESTING);
        const rf_gguf_value *e = v->v.arr.data;
        for (uint64_t i = 0; i < n; i++) {
            if (e[i].type != RF_GGUF_ARRAY)
                return rf_set_error(RF_ERR_INVALID_ARG,
                                    "gguf writer: key '%s': element %" PRIu64
                                    " of an array of arrays is %s",
                                    key, i, rf_gguf_type_name(e[i].type));
            rf_status st = check_value(key, &e[i], depth + 1);
            if (st) return st;
        }
    } else if (et == RF_GGUF_STRING) {
        const rf_gguf_str *s = v->v.arr.data;
        for (uint64_t i = 0; i < n; i++)
            if (!s[i].ptr && s[i].len)
                return rf_set_error(RF_ERR_INVALID_ARG,
                                    "gguf writer: key '%s': NULL string at index %" PRIu64, key, i);
    } else if (et == RF_GGUF_BOOL) {
        const uint8_t *b = v->v.arr.data;
        for (uint64_t i = 0; i < n; i++)
            if (b[i] > 1)
                return rf_set_error(RF_ERR_INVALID_ARG,
                                    "gguf writer: key '%s': bool at index %" PRIu64 " is %u", key,
                                    i, b[i]);
    }
    return RF_OK;
}

rf_status rf_gguf_set_value(rf_gguf_writer *w, const char *key, const rf_gguf_value *v) {
    if (!w || !key || !v) return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: NULL argument");
    size_t klen = strlen(key);
    if (klen == 0 || klen > RF_GGUF_MAX_KEY)
        return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: key length %zu, expected 1..%d",
                            klen, RF_GGUF_MAX_KEY);
    rf_status st = check_value(key, v, 0);
    if (st) return st;
    if (!strcmp(key, "general.alignment") &&
        (v->type != RF_GGUF_UINT32 || v->v.u64 == 0 || v->v.u64 % 8 || v->v.u64 > UINT32_MAX))
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "gguf writer: 'general.alignment' must be a u32, a nonzero multiple of 8");
    rf_gguf_value copy;
    if (!rf_gguf__value_copy(&w->arena, &copy, v))
        return rf_set_error(RF_ERR_OOM, "gguf writer: out of memory (key '%s')", key);
    for (int64_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            w->kv[i].value = copy; /* the old copy stays in the arena until free */
            return RF_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *n = realloc(w->kv, (size_t)cap * sizeof *n);
        if (!n) return rf_set_error(RF_ERR_OOM, "gguf writer: out of memory");
        w->kv = n;
        w->cap_kv = cap;
    }
    char *k = rf_arena_alloc(&w->arena, klen + 1, NULL);
    if (!k) return rf_set_error(RF_ERR_OOM, "gguf writer: out of memory");
    memcpy(k, key, klen + 1);
    w->kv[w->n_kv].key = k;
    w->kv[w->n_kv].value = copy;
    w->n_kv++;
    return RF_OK;
}

#define SET_SCALAR(fn, ctype, T, field)                                                     \
    rf_status fn(rf_gguf_writer *w, const char *key, ctype x) {                             \
        rf_gguf_value v;                                                                    \
        memset(&v, 0, sizeof v);                                                            \
        v.type = T;                                                                         \
        v.v.field = x;                                                                      \
        return rf_gguf_set_value(w, key, &v);                                               \
    }

SET_SCALAR(rf_gguf_set_u8, uint8_t, RF_GGUF_UINT8, u64)
SET_SCALAR(rf_gguf_set_i8, int8_t, RF_GGUF_INT8, i64)
SET_SCALAR(rf_gguf_set_u16, uint16_t, RF_GGUF_UINT16, u64)
SET_SCALAR(rf_gguf_set_i16, int16_t, RF_GGUF_INT16, i64)
SET_SCALAR(rf_gguf_set_u32, uint32_t, RF_GGUF_UINT32, u64)
SET_SCALAR(rf_gguf_set_i32, int32_t, RF_GGUF_INT32, i64)
SET_SCALAR(rf_gguf_set_u64, uint64_t, RF_GGUF_UINT64, u64)
SET_SCALAR(rf_gguf_set_i64, int64_t, RF_GGUF_INT64, i64)
SET_SCALAR(rf_gguf_set_f32, float, RF_GGUF_FLOAT32, f64)
SET_SCALAR(rf_gguf_set_f64, double, RF_GGUF_FLOAT64, f64)
SET_SCALAR(rf_gguf_set_bool, bool, RF_GGUF_BOOL, b)

rf_status rf_gguf_set_str(rf_gguf_writer *w, const char *key, const char *s) {
    if (!s) return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string", key ? key : "?");
    rf_gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = RF_GGUF_STRING;
    v.v.str.ptr = s;
    v.v.str.len = strlen(s);
    return rf_gguf_set_value(w, key, &v);
}

rf_status rf_gguf_set_arr(rf_gguf_writer *w, const char *key, rf_gguf_type elem_type,
                          const void *data, uint64_t n) {
    if (rf_gguf__scalar_size(elem_type) == 0)
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "gguf writer: key '%s': rf_gguf_set_arr takes numeric/bool elements, "
                            "not %s",
                            key ? key : "?", rf_gguf_type_name(elem_type));
    rf_gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = RF_GGUF_ARRAY;
    v.v.arr.elem_type = elem_type;
    v.v.arr.n = n;
    v.v.arr.data = data;
    return rf_gguf_set_value(w, key, &v);
}

rf_status rf_gguf_set_arr_str(rf_gguf_writer *w, const char *key, const char *const *strs,
                              uint64_t n) {
    if (n && !strs) return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: NULL string array");
    if (n > SIZE_MAX / sizeof(rf_gguf_str))
        return rf_set_error(RF_ERR_RANGE, "gguf writer: array too long");
    rf_gguf_str *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp) return rf_set_error(RF_ERR_OOM, "gguf writer: out of memory");
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) {
            free(tmp);
            return rf_set_error(RF_ERR_INVALID_ARG,
                                "gguf writer: key '%s': NULL string at index %" PRIu64,
                                key ? key : "?", i);
        }
        tmp[i].ptr = strs[i];
        tmp[i].len = strlen(strs[i]);
    }
    rf_gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = RF_GGUF_ARRAY;
    v.v.arr.elem_type = RF_GGUF_STRING;
    v.v.arr.n = n;
    v.v.arr.data = tmp;
    rf_status st = rf_gguf_set_value(w, key, &v);
    free(tmp);
    return st;
}

/* ---- tensors ---------------------------------------------------------------------------- */

rf_status rf_gguf_add_tensor(rf_gguf_writer *w, const char *name, rf_type type, uint32_t n_dims,
                             const int64_t *ne, const void *data, rf_gguf_fill_fn fill,
                             void *user) {
    if (!w || !name || !ne) return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: NULL argument");
    size_t nlen = strlen(name);
    if (nlen >= RF_GGUF_MAX_NAME)
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "gguf writer: tensor name '%s' is %zu bytes, expected at most %d",
                            name, nlen, RF_GGUF_MAX_NAME - 1);
    if (!data == !fill)
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "gguf writer: tensor '%s': give exactly one of data and fill", name);
    if (n_dims < 1 || n_dims > RF_GGUF_MAX_DIMS)
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "gguf writer: tensor '%s': n_dims %" PRIu32 ", expected 1..%d", name,
                            n_dims, RF_GGUF_MAX_DIMS);
    uint64_t n_elem, n_bytes;
    if (!rf_gguf__tensor_bytes((int)type, n_dims, ne, &n_elem, &n_bytes))
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "gguf writer: tensor '%s': invalid type %d or shape (dims must be > 0, "
                            "ne[0] a multiple of the block size, size below 2^63)",
                            name, (int)type);
    for (int64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *n = realloc(w->t, (size_t)cap * sizeof *n);
        if (!n) return rf_set_error(RF_ERR_OOM, "gguf writer: out of memory");
        w->t = n;
        w->cap_t = cap;
    }
    char *nm = rf_arena_alloc(&w->arena, nlen + 1, NULL);
    if (!nm) return rf_set_error(RF_ERR_OOM, "gguf writer: out of memory");
    memcpy(nm, name, nlen + 1);
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < RF_GGUF_MAX_DIMS; d++) t->ne[d] = d < (int)n_dims ? ne[d] : 1;
    t->n_bytes = n_bytes;
    t->data = data;
    t->fill = fill;
    t->user = user;
    return RF_OK;
}

/* ---- serialisation ---------------------------------------------------------------------- */

typedef struct out {
    FILE *f;
    uint64_t pos;
    rf_status st;
} out;

static void put(out *o, const void *p, size_t n) {
    if (o->st || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n)
        o->st = rf_set_error(RF_ERR_IO, "gguf writer: write failed at byte offset %" PRIu64 ": %s",
                             o->pos, strerror(errno));
    o->pos += n;
}
static void put_u32(out *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(out *o, uint64_t v) { put(o, &v, 8); }
static void put_str(out *o, const char *s, uint64_t n) {
    put_u64(o, n);
    put(o, s, (size_t)n);
}
static void pad_to(out *o, uint64_t align) {
    static const uint8_t zeros[256];
    while (!o->st && o->pos % align) {
        uint64_t n = align - o->pos % align;
        put(o, zeros, (size_t)(n < sizeof zeros ? n : sizeof zeros));
    }
}

static void put_scalar(out *o, const rf_gguf_value *v) {
    switch (v->type) {
    case RF_GGUF_UINT8: { uint8_t x = (uint8_t)v->v.u64; put(o, &x, 1); } break;
    case RF_GGUF_INT8: { int8_t x = (int8_t)v->v.i64; put(o, &x, 1); } break;
    case RF_GGUF_UINT16: { uint16_t x = (uint16_t)v->v.u64; put(o, &x, 2); } break;
    case RF_GGUF_INT16: { int16_t x = (int16_t)v->v.i64; put(o, &x, 2); } break;
    case RF_GGUF_UINT32: { uint32_t x = (uint32_t)v->v.u64; put(o, &x, 4); } break;
    case RF_GGUF_INT32: { int32_t x = (int32_t)v->v.i64; put(o, &x, 4); } break;
    case RF_GGUF_UINT64: put(o, &v->v.u64, 8); break;
    case RF_GGUF_INT64: put(o, &v->v.i64, 8); break;
    case RF_GGUF_FLOAT32: { float x = (float)v->v.f64; put(o, &x, 4); } break;
    case RF_GGUF_FLOAT64: put(o, &v->v.f64, 8); break;
    case RF_GGUF_BOOL: { uint8_t x = v->v.b ? 1 : 0; put(o, &x, 1); } break;
    default: break;
    }
}

/* Array payload: element type, count, items (nested arrays repeat this without a value type). */
static void put_array(out *o, const rf_gguf_value *v) {
    rf_gguf_type et = v->v.arr.elem_type;
    uint64_t n = v->v.arr.n;
    put_u32(o, (uint32_t)et);
    put_u64(o, n);
    if (et == RF_GGUF_STRING) {
        const rf_gguf_str *s = v->v.arr.data;
        for (uint64_t i = 0; i < n && !o->st; i++) put_str(o, s[i].ptr, s[i].len);
    } else if (et == RF_GGUF_ARRAY) {
        const rf_gguf_value *e = v->v.arr.data;
        for (uint64_t i = 0; i < n && !o->st; i++) put_array(o, &e[i]);
    } else if (n) {
        put(o, v->v.arr.data, (size_t)(n * rf_gguf__scalar_size(et)));
    }
}

static void put_value(out *o, const rf_gguf_value *v) {
    if (v->type == RF_GGUF_STRING) put_str(o, v->v.str.ptr, v->v.str.len);
    else if (v->type == RF_GGUF_ARRAY) put_array(o, v);
    else put_scalar(o, v);
}

static uint64_t writer_alignment(const rf_gguf_writer *w) {
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, "general.alignment")) return w->kv[i].value.v.u64;
    return RF_GGUF_DEFAULT_ALIGNMENT;
}

rf_status rf_gguf_write_stream(rf_gguf_writer *w, FILE *f) {
    if (!w || !f) return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: NULL argument");
    const uint64_t align = writer_alignment(w);
    /* assign offsets first: the tensor infos precede the data */
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t end;
        if (rf_add_overflow_u64(off, w->t[i].n_bytes, &end) ||
            rf_add_overflow_u64(end, align - 1, &end))
            return rf_set_error(RF_ERR_RANGE, "gguf writer: data section larger than 2^64 bytes");
        off = end - end % align;
    }
    out o = {.f = f};
    put(&o, RF_GGUF_MAGIC, 4);
    put_u32(&o, RF_GGUF_VERSION);
    put_u64(&o, (uint64_t)w->n_t);
    put_u64(&o, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv && !o.st; i++) {
        put_str(&o, w->kv[i].key, strlen(w->kv[i].key));
        put_u32(&o, (uint32_t)w->kv[i].value.type);
        put_value(&o, &w->kv[i].value);
    }
    for (int64_t i = 0; i < w->n_t && !o.st; i++) {
        const wtensor *t = &w->t[i];
        put_str(&o, t->name, strlen(t->name));
        put_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, (uint64_t)t->ne[d]);
        put_u32(&o, (uint32_t)t->type);
        put_u64(&o, t->offset);
    }
    pad_to(&o, align);
    if (o.st) return o.st;
    void *buf = NULL;
    for (int64_t i = 0; i < w->n_t && !o.st; i++) {
        const wtensor *t = &w->t[i];
        if (t->data) {
            put(&o, t->data, (size_t)t->n_bytes);
        } else {
            if (!buf && !(buf = malloc((size_t)RF_GGUF_FILL_CHUNK))) {
                o.st = rf_set_error(RF_ERR_OOM, "gguf writer: out of memory (fill buffer)");
                break;
            }
            for (uint64_t done = 0; done < t->n_bytes && !o.st;) {
                uint64_t n = t->n_bytes - done;
                if (n > RF_GGUF_FILL_CHUNK) n = RF_GGUF_FILL_CHUNK;
                rf_status st = t->fill(t->user, i, done, buf, n);
                if (st) {
                    char msg[512];
                    snprintf(msg, sizeof msg, "%s", rf_last_error());
                    o.st = rf_set_error(st, "gguf writer: tensor '%s': fill failed at byte %" PRIu64
                                            ": %s", t->name, done, msg);
                    break;
                }
                put(&o, buf, (size_t)n);
                done += n;
            }
        }
        pad_to(&o, align);
    }
    free(buf);
    if (!o.st && fflush(f))
        o.st = rf_set_error(RF_ERR_IO, "gguf writer: flush failed: %s", strerror(errno));
    return o.st;
}

rf_status rf_gguf_write_file(rf_gguf_writer *w, const char *path) {
    if (!w || !path) return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: NULL argument");
    /* written beside the target and renamed when complete, so a reader (another process
     * checking for the file) never sees half a model, and a failure leaves nothing behind */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.part%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return rf_set_error(RF_ERR_INVALID_ARG, "gguf writer: path too long: '%s'", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return rf_set_error(RF_ERR_IO, "gguf writer: cannot create '%s': %s", tmp, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    rf_status st = rf_gguf_write_stream(w, f);
    if (fclose(f) && !st)
        st = rf_set_error(RF_ERR_IO, "gguf writer: cannot write '%s': %s", tmp, strerror(errno));
    if (!st && rename(tmp, path))
        st = rf_set_error(RF_ERR_IO, "gguf writer: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", rf_last_error());
        unlink(tmp); /* never leave a half-written model behind */
        return rf_set_error(st, "%s (file '%s' removed)", msg, tmp);
    }
    return RF_OK;
}
