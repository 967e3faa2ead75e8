/* fuzz_gguf_body.h — one fuzz iteration over the GGUF reader, shared by the libFuzzer target
 * (fuzz_gguf.c) and the corpus replay unit test (tests/unit/test_gguf_corpus.c), so the corpus
 * also runs under gcc in `make test`. Include after defining _GNU_SOURCE (open_memstream).
 *
 * For any input: opening either fails with a message, or succeeds and then every kv and tensor
 * is walked (every byte of every string and array touched, every getter called), the reader's
 * invariants are checked, and the file is re-written with the writer: that output must open,
 * and writing it again must give the same bytes. A violated invariant traps (a crash = a bug). */
#ifndef RF_FUZZ_GGUF_BODY_H
#define RF_FUZZ_GGUF_BODY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rocmforge/gguf.h"

#include "fuzz_check.h"

static unsigned rf_fuzz_touch_value(const rf_gguf_value *v, int depth) {
    unsigned acc = 0;
    RF_FUZZ_CHECK(depth < 16);
    switch (v->type) {
    case RF_GGUF_STRING:
        for (uint64_t i = 0; i < v->v.str.len; i++) acc += (unsigned char)v->v.str.ptr[i];
        RF_FUZZ_CHECK(v->v.str.ptr[v->v.str.len] == 0);
        break;
    case RF_GGUF_ARRAY: {
        uint64_t n = v->v.arr.n;
        rf_gguf_type et = v->v.arr.elem_type;
        if (et == RF_GGUF_STRING) {
            const rf_gguf_str *s = v->v.arr.data;
            for (uint64_t i = 0; i < n; i++) {
                for (uint64_t j = 0; j < s[i].len; j++) acc += (unsigned char)s[i].ptr[j];
                RF_FUZZ_CHECK(s[i].ptr[s[i].len] == 0);
            }
        } else if (et == RF_GGUF_ARRAY) {
            const rf_gguf_value *e = v->v.arr.data;
            for (uint64_t i = 0; i < n; i++) {
                RF_FUZZ_CHECK(e[i].type == RF_GGUF_ARRAY);
                acc += rf_fuzz_touch_value(&e[i], depth + 1);
            }
        } else {
            size_t esz = et == RF_GGUF_UINT8 || et == RF_GGUF_INT8 || et == RF_GGUF_BOOL ? 1
                       : et == RF_GGUF_UINT16 || et == RF_GGUF_INT16                    ? 2
                       : et == RF_GGUF_UINT32 || et == RF_GGUF_INT32 || et == RF_GGUF_FLOAT32 ? 4
                                                                                        : 8;
            RF_FUZZ_CHECK((unsigned)et < RF_GGUF_TYPE_COUNT);
            const unsigned char *b = v->v.arr.data;
            for (uint64_t i = 0; i < n * esz; i++) acc += b[i];
            if (et == RF_GGUF_BOOL)
                for (uint64_t i = 0; i < n; i++) RF_FUZZ_CHECK(b[i] <= 1);
        }
        break;
    }
    default:
        RF_FUZZ_CHECK((unsigned)v->type < RF_GGUF_TYPE_COUNT);
        acc += (unsigned)v->v.u64;
        break;
    }
    return acc;
}

/* Writes everything g holds with the writer into a malloc'd buffer; NULL if the writer refuses
 * (the writer is stricter on tensor names: 63 bytes, not 64). */
static unsigned char *rf_fuzz_rewrite(const rf_gguf *g, size_t *len) {
    rf_gguf_writer *w = rf_gguf_writer_new();
    RF_FUZZ_CHECK(w != NULL);
    bool ok = true;
    for (int64_t i = 0; ok && i < rf_gguf_n_kv(g); i++)
        ok = rf_gguf_set_value(w, rf_gguf_kv_key(g, i), rf_gguf_kv_value(g, i)) == RF_OK;
    for (int64_t i = 0; ok && i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        ok = rf_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL) ==
             RF_OK;
        if (!ok) RF_FUZZ_CHECK(strlen(t->name) == 64);
    }
    unsigned char *out = NULL;
    if (ok) {
        char *p = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&p, &n);
        RF_FUZZ_CHECK(f != NULL);
        RF_FUZZ_CHECK(rf_gguf_write_stream(w, f) == RF_OK);
        fclose(f);
        out = (unsigned char *)p;
        *len = n;
    }
    rf_gguf_writer_free(w);
    return out;
}

static int rf_fuzz_gguf_one(const uint8_t *data, size_t size) {
    rf_gguf *g = NULL;
    rf_status st = rf_gguf_open_memory(data, size, &g);
    if (st != RF_OK) {
        RF_FUZZ_CHECK(g == NULL);
        RF_FUZZ_CHECK(rf_last_error()[0] != 0);
        return 0;
    }
    volatile unsigned acc = 0;
    uint64_t fsize = rf_gguf_file_size(g), data_off = rf_gguf_data_offset(g);
    uint64_t align = rf_gguf_alignment(g);
    RF_FUZZ_CHECK(fsize == size);
    RF_FUZZ_CHECK(align && align % 8 == 0);
    RF_FUZZ_CHECK(rf_gguf_version(g) == 2 || rf_gguf_version(g) == 3);
    for (int64_t i = 0; i < rf_gguf_n_kv(g); i++) {
        const char *key = rf_gguf_kv_key(g, i);
        RF_FUZZ_CHECK(key && key[0]);
        RF_FUZZ_CHECK(rf_gguf_find_key(g, key) == i);
        acc += rf_fuzz_touch_value(rf_gguf_kv_value(g, i), 0);
        uint32_t u32; int32_t i32; uint64_t u64, n; float f; bool b; const char *s; const void *d;
        if (!rf_gguf_get_u32(g, key, &u32)) acc += u32;
        if (!rf_gguf_get_i32(g, key, &i32)) acc += (unsigned)i32;
        if (!rf_gguf_get_u64(g, key, &u64)) acc += (unsigned)u64;
        if (!rf_gguf_get_f32(g, key, &f)) acc += (unsigned)(f == f);
        if (!rf_gguf_get_bool(g, key, &b)) acc += b;
        if (!rf_gguf_get_str(g, key, &s)) acc += (unsigned char)s[0];
        if (!rf_gguf_get_arr(g, key, -1, &n, &d)) acc += (unsigned)n;
    }
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        RF_FUZZ_CHECK(rf_gguf_find_tensor(g, t->name) == t);
        RF_FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= RF_GGUF_MAX_DIMS);
        for (int d = 0; d < RF_GGUF_MAX_DIMS; d++) RF_FUZZ_CHECK(t->ne[d] >= 1);
        RF_FUZZ_CHECK(t->offset % align == 0);
        RF_FUZZ_CHECK(t->n_bytes > 0);
        RF_FUZZ_CHECK(data_off <= fsize && t->offset <= fsize - data_off &&
                      t->n_bytes <= fsize - data_off - t->offset);
        RF_FUZZ_CHECK((const uint8_t *)t->data == data + data_off + t->offset);
        const unsigned char *b = t->data;
        acc += b[0] + b[t->n_bytes - 1];
    }
    size_t n1 = 0, n2 = 0;
    /* A legal but huge general.alignment makes the rewrite pad to it (gigabytes); the output
     * is at most input + alignment bytes, so bound the alignment to keep iterations small. */
    unsigned char *w1 = align <= 65536 ? rf_fuzz_rewrite(g, &n1) : NULL;
    rf_gguf_close(g);
    if (w1) {
        rf_gguf *g2 = NULL;
        RF_FUZZ_CHECK(rf_gguf_open_memory(w1, n1, &g2) == RF_OK);
        RF_FUZZ_CHECK(rf_gguf_version(g2) == 3);
        unsigned char *w2 = rf_fuzz_rewrite(g2, &n2);
        RF_FUZZ_CHECK(w2 != NULL);
        RF_FUZZ_CHECK(n1 == n2 && memcmp(w1, w2, n1) == 0);
        rf_gguf_close(g2);
        free(w2);
        free(w1);
    }
    (void)acc;
    return 0;
}

#endif
