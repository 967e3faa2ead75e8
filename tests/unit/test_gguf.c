/* test_gguf.c — the GGUF reader against hand-built byte buffers: every value type, versions 2
 * and 3, nested arrays, alignment variants, typed-getter errors, and malformed files (truncated
 * at every byte, bad magic, big-endian, huge counts, bad tensor infos). The buffers are written
 * byte by byte here from the spec, independently of our writer. */
#include "test_util.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a little-endian byte builder ------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void b_raw(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u8(buf *b, uint8_t v) { b_raw(b, &v, 1); }
static void b_u16(buf *b, uint16_t v) { uint8_t x[2] = {v, v >> 8}; b_raw(b, x, 2); }
static void b_u32(buf *b, uint32_t v) {
    uint8_t x[4] = {v, v >> 8, v >> 16, v >> 24};
    b_raw(b, x, 4);
}
static void b_u64(buf *b, uint64_t v) {
    b_u32(b, (uint32_t)v);
    b_u32(b, (uint32_t)(v >> 32));
}
static void b_f32(buf *b, float f) { uint32_t u; memcpy(&u, &f, 4); b_u32(b, u); }
static void b_f64(buf *b, double f) { uint64_t u; memcpy(&u, &f, 8); b_u64(b, u); }
static void b_str(buf *b, const char *s) {
    b_u64(b, strlen(s));
    b_raw(b, s, strlen(s));
}
static void b_pad(buf *b, size_t align) {
    while (b->n % align) b_u8(b, 0);
}
static void b_header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_raw(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
/* kv with a scalar/string type tag */
static void b_key(buf *b, const char *key, uint32_t type) {
    b_str(b, key);
    b_u32(b, type);
}
static void b_tensor_info(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                          uint32_t type, uint64_t offset) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) b_u64(b, ne[i]);
    b_u32(b, type);
    b_u64(b, offset);
}

/* Opens a copy of exactly b->n bytes (so ASan sees any over-read). */
static rf_status open_buf(const buf *b, rf_gguf **g, uint8_t **copy) {
    *copy = malloc(b->n ? b->n : 1);
    memcpy(*copy, b->p, b->n);
    return rf_gguf_open_memory(*copy, b->n, g);
}

static void expect_fail(const buf *b, rf_status want, const char *needle) {
    rf_gguf *g = NULL;
    uint8_t *copy;
    rf_status st = open_buf(b, &g, &copy);
    if (st != want || (needle && !strstr(rf_last_error(), needle)))
        print_error("got %s '%s', want %s with '%s'\n", rf_status_str(st), rf_last_error(),
                    rf_status_str(want), needle ? needle : "");
    assert_int_equal(st, want);
    assert_null(g);
    if (needle) assert_non_null(strstr(rf_last_error(), needle));
    free(copy);
}

/* ---- every value type ------------------------------------------------------------------- */

/* One kv of each of the 13 types, arrays of every scalar type and of strings, and nested
 * arrays (array of arrays of u16, array of arrays of strings, one level deeper). */
static void build_all_types(buf *b, uint32_t version) {
    b_header(b, version, 0, 21);
    b_key(b, "t.u8", 0); b_u8(b, 200);
    b_key(b, "t.i8", 1); b_u8(b, (uint8_t)-100);
    b_key(b, "t.u16", 2); b_u16(b, 65000);
    b_key(b, "t.i16", 3); b_u16(b, (uint16_t)-30000);
    b_key(b, "t.u32", 4); b_u32(b, 4000000000u);
    b_key(b, "t.i32", 5); b_u32(b, (uint32_t)-2000000000);
    b_key(b, "t.f32", 6); b_f32(b, 0.15625f);
    b_key(b, "t.bool", 7); b_u8(b, 1);
    b_key(b, "t.str", 8); b_str(b, "héllo");
    b_key(b, "t.u64", 10); b_u64(b, 0xFEDCBA9876543210ull);
    b_key(b, "t.i64", 11); b_u64(b, (uint64_t)INT64_MIN);
    b_key(b, "t.f64", 12); b_f64(b, -1.0e300);
    /* arrays */
    b_key(b, "a.u8", 9); b_u32(b, 0); b_u64(b, 3); b_u8(b, 1); b_u8(b, 2); b_u8(b, 255);
    b_key(b, "a.i32", 9); b_u32(b, 5); b_u64(b, 2); b_u32(b, (uint32_t)-7); b_u32(b, 7);
    b_key(b, "a.f32", 9); b_u32(b, 6); b_u64(b, 2); b_f32(b, 1.5f); b_f32(b, -2.25f);
    b_key(b, "a.bool", 9); b_u32(b, 7); b_u64(b, 3); b_u8(b, 1); b_u8(b, 0); b_u8(b, 1);
    b_key(b, "a.str", 9); b_u32(b, 8); b_u64(b, 3); b_str(b, "a"); b_str(b, ""); b_str(b, "ccc");
    b_key(b, "a.empty", 9); b_u32(b, 12); b_u64(b, 0);
    /* [[1, 2], [3]] of u16 */
    b_key(b, "a.nested", 9); b_u32(b, 9); b_u64(b, 2);
    b_u32(b, 2); b_u64(b, 2); b_u16(b, 1); b_u16(b, 2);
    b_u32(b, 2); b_u64(b, 1); b_u16(b, 3);
    /* [["x"], [[-1.5 f64]]]: elements of one outer array may differ in element type */
    b_key(b, "a.deep", 9); b_u32(b, 9); b_u64(b, 2);
    b_u32(b, 8); b_u64(b, 1); b_str(b, "x");
    b_u32(b, 9); b_u64(b, 1);
    b_u32(b, 12); b_u64(b, 1); b_f64(b, -1.5);
    b_key(b, "a.i64", 9); b_u32(b, 11); b_u64(b, 1); b_u64(b, (uint64_t)-5);
}

static void check_all_types(rf_gguf *g, uint32_t version) {
    assert_int_equal(rf_gguf_version(g), version);
    assert_int_equal(rf_gguf_n_kv(g), 21);
    assert_int_equal(rf_gguf_n_tensors(g), 0);
    assert_int_equal(rf_gguf_alignment(g), 32);
    const rf_gguf_value *v;
    v = rf_gguf_kv_value(g, rf_gguf_find_key(g, "t.u8"));
    assert_int_equal(v->type, RF_GGUF_UINT8); assert_int_equal(v->v.u64, 200);
    v = rf_gguf_kv_value(g, rf_gguf_find_key(g, "t.i8"));
    assert_int_equal(v->type, RF_GGUF_INT8); assert_int_equal(v->v.i64, -100);
    v = rf_gguf_kv_value(g, rf_gguf_find_key(g, "t.u16"));
    assert_int_equal(v->type, RF_GGUF_UINT16); assert_int_equal(v->v.u64, 65000);
    v = rf_gguf_kv_value(g, rf_gguf_find_key(g, "t.i16"));
    assert_int_equal(v->type, RF_GGUF_INT16); assert_int_equal(v->v.i64, -30000);
    v = rf_gguf_kv_value(g, rf_gguf_find_key(g, "t.u64"));
    assert_int_equal(v->type, RF_GGUF_UINT64); assert_true(v->v.u64 == 0xFEDCBA9876543210ull);
    v = rf_gguf_kv_value(g, rf_gguf_find_key(g, "t.i64"));
    assert_int_equal(v->type, RF_GGUF_INT64); assert_true(v->v.i64 == INT64_MIN);
    v = rf_gguf_kv_value(g, rf_gguf_find_key(g, "t.f64"));
    assert_int_equal(v->type, RF_GGUF_FLOAT64); assert_true(v->v.f64 == -1.0e300);

    uint32_t u32; int32_t i32; uint64_t u64; float f; bool bl; const char *s;
    assert_int_equal(rf_gguf_get_u32(g, "t.u32", &u32), RF_OK); assert_true(u32 == 4000000000u);
    assert_int_equal(rf_gguf_get_i32(g, "t.i32", &i32), RF_OK); assert_int_equal(i32, -2000000000);
    assert_int_equal(rf_gguf_get_u32(g, "t.u8", &u32), RF_OK); assert_int_equal(u32, 200);
    assert_int_equal(rf_gguf_get_i32(g, "t.i16", &i32), RF_OK); assert_int_equal(i32, -30000);
    assert_int_equal(rf_gguf_get_u64(g, "t.u64", &u64), RF_OK); assert_true(u64 == 0xFEDCBA9876543210ull);
    assert_int_equal(rf_gguf_get_f32(g, "t.f32", &f), RF_OK); assert_true(f == 0.15625f);
    assert_int_equal(rf_gguf_get_bool(g, "t.bool", &bl), RF_OK); assert_true(bl);
    assert_int_equal(rf_gguf_get_str(g, "t.str", &s), RF_OK); assert_string_equal(s, "héllo");

    uint64_t n; const void *d;
    assert_int_equal(rf_gguf_get_arr(g, "a.u8", RF_GGUF_UINT8, &n, &d), RF_OK);
    assert_int_equal(n, 3); assert_int_equal(((const uint8_t *)d)[2], 255);
    assert_int_equal(rf_gguf_get_arr(g, "a.i32", RF_GGUF_INT32, &n, &d), RF_OK);
    assert_int_equal(((const int32_t *)d)[0], -7);
    assert_int_equal(rf_gguf_get_arr(g, "a.f32", RF_GGUF_FLOAT32, &n, &d), RF_OK);
    assert_true(((const float *)d)[1] == -2.25f);
    assert_int_equal(rf_gguf_get_arr(g, "a.bool", RF_GGUF_BOOL, &n, &d), RF_OK);
    assert_memory_equal(d, "\1\0\1", 3);
    assert_int_equal(rf_gguf_get_arr(g, "a.str", RF_GGUF_STRING, &n, &d), RF_OK);
    const rf_gguf_str *ss = d;
    assert_int_equal(n, 3);
    assert_string_equal(ss[0].ptr, "a"); assert_int_equal(ss[1].len, 0);
    assert_string_equal(ss[1].ptr, ""); assert_string_equal(ss[2].ptr, "ccc");
    assert_int_equal(rf_gguf_get_arr(g, "a.empty", RF_GGUF_FLOAT64, &n, &d), RF_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rf_gguf_get_arr(g, "a.i64", -1, &n, &d), RF_OK);
    assert_true(((const int64_t *)d)[0] == -5);

    assert_int_equal(rf_gguf_get_arr(g, "a.nested", RF_GGUF_ARRAY, &n, &d), RF_OK);
    const rf_gguf_value *e = d;
    assert_int_equal(n, 2);
    assert_int_equal(e[0].type, RF_GGUF_ARRAY);
    assert_int_equal(e[0].v.arr.elem_type, RF_GGUF_UINT16);
    assert_int_equal(e[0].v.arr.n, 2);
    assert_int_equal(((const uint16_t *)e[0].v.arr.data)[1], 2);
    assert_int_equal(e[1].v.arr.n, 1);
    assert_int_equal(((const uint16_t *)e[1].v.arr.data)[0], 3);

    assert_int_equal(rf_gguf_get_arr(g, "a.deep", RF_GGUF_ARRAY, &n, &d), RF_OK);
    e = d;
    assert_int_equal(e[0].v.arr.elem_type, RF_GGUF_STRING);
    assert_string_equal(((const rf_gguf_str *)e[0].v.arr.data)[0].ptr, "x");
    assert_int_equal(e[1].v.arr.elem_type, RF_GGUF_ARRAY);
    const rf_gguf_value *inner = e[1].v.arr.data;
    assert_int_equal(inner[0].v.arr.elem_type, RF_GGUF_FLOAT64);
    assert_true(((const double *)inner[0].v.arr.data)[0] == -1.5);

    /* kv order is file order */
    assert_string_equal(rf_gguf_kv_key(g, 0), "t.u8");
    assert_string_equal(rf_gguf_kv_key(g, 20), "a.i64");
    assert_null(rf_gguf_kv_key(g, 21));
    assert_null(rf_gguf_kv_value(g, -1));
    assert_int_equal(rf_gguf_find_key(g, "nope"), -1);
}

static void test_all_types_v3(void **state) {
    (void)state;
    buf b = {0};
    build_all_types(&b, 3);
    rf_gguf *g; uint8_t *copy;
    assert_int_equal(open_buf(&b, &g, &copy), RF_OK);
    check_all_types(g, 3);
    rf_gguf_close(g);
    free(copy);
    free(b.p);
}

/* v2 has the same layout as v3 (u64 counts and lengths; v1 had u32). */
static void test_all_types_v2(void **state) {
    (void)state;
    buf b = {0};
    build_all_types(&b, 2);
    rf_gguf *g; uint8_t *copy;
    assert_int_equal(open_buf(&b, &g, &copy), RF_OK);
    check_all_types(g, 2);
    rf_gguf_close(g);
    free(copy);
    free(b.p);
}

/* Every strict prefix of a valid file must fail cleanly (ASan catches any over-read). */
static void test_truncated_everywhere(void **state) {
    (void)state;
    buf b = {0};
    build_all_types(&b, 3);
    /* and a tensor whose data ends exactly at the end of the file */
    buf t = {0};
    b_header(&t, 3, 1, 2);
    b_key(&t, "general.alignment", 4); b_u32(&t, 16);
    b_key(&t, "a.str", 9); b_u32(&t, 8); b_u64(&t, 2); b_str(&t, "ab"); b_str(&t, "c");
    uint64_t ne[2] = {2, 3};
    b_tensor_info(&t, "w", 2, ne, 0, 0);
    b_pad(&t, 16);
    for (int i = 0; i < 6; i++) b_f32(&t, (float)i);
    const buf *files[2] = {&b, &t};
    for (int k = 0; k < 2; k++) {
        const buf *f = files[k];
        rf_gguf *g; uint8_t *copy;
        assert_int_equal(open_buf(f, &g, &copy), RF_OK);
        rf_gguf_close(g);
        free(copy);
        for (size_t n = 0; n < f->n; n++) {
            buf p = {.p = f->p, .n = n, .cap = n};
            g = NULL;
            rf_status st = open_buf(&p, &g, &copy);
            if (st == RF_OK) fail_msg("prefix of %zu/%zu bytes opened", n, f->n);
            assert_int_equal(st, RF_ERR_FORMAT);
            assert_true(strlen(rf_last_error()) > 0);
            free(copy);
        }
    }
    free(b.p);
    free(t.p);
}

/* ---- header errors ---------------------------------------------------------------------- */

static void test_bad_magic_and_versions(void **state) {
    (void)state;
    buf b = {0};
    b_raw(&b, "GGUE", 4); b_u32(&b, 3); b_u64(&b, 0); b_u64(&b, 0);
    expect_fail(&b, RF_ERR_FORMAT, "magic");
    b.n = 0;
    b_header(&b, 1, 0, 0);
    expect_fail(&b, RF_ERR_UNSUPPORTED, "version 1");
    b.n = 0;
    b_header(&b, 4, 0, 0);
    expect_fail(&b, RF_ERR_UNSUPPORTED, "version is 4");
    b.n = 0;
    b_header(&b, 0, 0, 0);
    expect_fail(&b, RF_ERR_FORMAT, "version");
    /* big-endian v3: version bytes 00 00 00 03 read as 0x03000000 */
    b.n = 0;
    b_raw(&b, "GGUF", 4); b_u8(&b, 0); b_u8(&b, 0); b_u8(&b, 0); b_u8(&b, 3);
    b_u64(&b, 0); b_u64(&b, 0);
    expect_fail(&b, RF_ERR_UNSUPPORTED, "big-endian");
    b.n = 0;
    b_raw(&b, "GGUF", 4); b_u8(&b, 0); b_u8(&b, 0); b_u8(&b, 0); b_u8(&b, 2);
    b_u64(&b, 0); b_u64(&b, 0);
    expect_fail(&b, RF_ERR_UNSUPPORTED, "big-endian");
    /* empty buffer */
    b.n = 0;
    expect_fail(&b, RF_ERR_FORMAT, "magic");
    free(b.p);
}

static void test_huge_counts(void **state) {
    (void)state;
    buf b = {0};
    b_header(&b, 3, 0, UINT64_MAX);
    expect_fail(&b, RF_ERR_FORMAT, "cannot fit");
    b.n = 0;
    b_header(&b, 3, 1ull << 60, 0);
    expect_fail(&b, RF_ERR_FORMAT, "cannot fit");
    b.n = 0;
    b_header(&b, 3, 1ull << 59, 1ull << 59);
    expect_fail(&b, RF_ERR_FORMAT, "cannot fit");
    /* array length: 2^61 u64 elements overflow the byte count */
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "a", 9); b_u32(&b, 10); b_u64(&b, 1ull << 61);
    for (int i = 0; i < 8; i++) b_u64(&b, 0);
    expect_fail(&b, RF_ERR_FORMAT, "array of");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "a", 9); b_u32(&b, 8); b_u64(&b, 1000000);
    b_str(&b, "x");
    expect_fail(&b, RF_ERR_FORMAT, "array of 1000000 string");
    /* string length larger than the file */
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "s", 8); b_u64(&b, UINT64_MAX); b_raw(&b, "abc", 3);
    expect_fail(&b, RF_ERR_FORMAT, "truncated");
    /* key length beyond the spec's 65535 */
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_u64(&b, 70000); for (int i = 0; i < 70000; i++) b_u8(&b, 'k');
    b_u32(&b, 0); b_u8(&b, 0);
    expect_fail(&b, RF_ERR_FORMAT, "key length is 70000");
    free(b.p);
}

static void test_bad_kvs(void **state) {
    (void)state;
    buf b = {0};
    b_header(&b, 3, 0, 2);
    b_key(&b, "k", 4); b_u32(&b, 1);
    b_key(&b, "k", 4); b_u32(&b, 2);
    expect_fail(&b, RF_ERR_FORMAT, "duplicate key");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "", 4); b_u32(&b, 1);
    expect_fail(&b, RF_ERR_FORMAT, "key is empty");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "k", 13); b_u32(&b, 1);
    expect_fail(&b, RF_ERR_FORMAT, "value type is 13");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "k", 9); b_u32(&b, 77); b_u64(&b, 0);
    expect_fail(&b, RF_ERR_FORMAT, "array element type is 77");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "k", 7); b_u8(&b, 2);
    expect_fail(&b, RF_ERR_FORMAT, "bool value is 2");
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "k", 9); b_u32(&b, 7); b_u64(&b, 2); b_u8(&b, 0); b_u8(&b, 9);
    expect_fail(&b, RF_ERR_FORMAT, "bool value is 9");
    /* arrays nested 9 deep */
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "deep", 9);
    for (int i = 0; i < 9; i++) { b_u32(&b, 9); b_u64(&b, 1); }
    b_u32(&b, 0); b_u64(&b, 0);
    expect_fail(&b, RF_ERR_FORMAT, "nested");
    free(b.p);
}

/* ---- typed getters ---------------------------------------------------------------------- */

static void test_getter_errors(void **state) {
    (void)state;
    buf b = {0};
    b_header(&b, 3, 0, 6);
    b_key(&b, "s", 8); b_str(&b, "text");
    b_key(&b, "neg", 5); b_u32(&b, (uint32_t)-1);
    b_key(&b, "big", 10); b_u64(&b, 1ull << 40);
    b_key(&b, "f", 12); b_f64(&b, 1e300);
    b_key(&b, "arr", 9); b_u32(&b, 4); b_u64(&b, 0);
    b_key(&b, "b", 7); b_u8(&b, 0);
    rf_gguf *g; uint8_t *copy;
    assert_int_equal(open_buf(&b, &g, &copy), RF_OK);
    uint32_t u32; int32_t i32; uint64_t u64; float f; bool bl; const char *s; uint64_t n;
    const void *d;
    assert_int_equal(rf_gguf_get_u32(g, "missing.key", &u32), RF_ERR_NOT_FOUND);
    assert_non_null(strstr(rf_last_error(), "'missing.key'"));
    assert_int_equal(rf_gguf_get_u32(g, "s", &u32), RF_ERR_TYPE);
    assert_non_null(strstr(rf_last_error(), "key 's' is string"));
    assert_int_equal(rf_gguf_get_u32(g, "neg", &u32), RF_ERR_RANGE);
    assert_non_null(strstr(rf_last_error(), "'neg'"));
    assert_int_equal(rf_gguf_get_u64(g, "neg", &u64), RF_ERR_RANGE);
    assert_int_equal(rf_gguf_get_i32(g, "neg", &i32), RF_OK);
    assert_int_equal(i32, -1);
    assert_int_equal(rf_gguf_get_i32(g, "big", &i32), RF_ERR_RANGE);
    assert_non_null(strstr(rf_last_error(), "'big'"));
    assert_int_equal(rf_gguf_get_u32(g, "big", &u32), RF_ERR_RANGE);
    assert_int_equal(rf_gguf_get_u64(g, "big", &u64), RF_OK);
    assert_int_equal(rf_gguf_get_f32(g, "f", &f), RF_ERR_RANGE);
    assert_int_equal(rf_gguf_get_f32(g, "neg", &f), RF_ERR_TYPE);
    assert_non_null(strstr(rf_last_error(), "'neg'"));
    assert_int_equal(rf_gguf_get_bool(g, "neg", &bl), RF_ERR_TYPE);
    assert_int_equal(rf_gguf_get_bool(g, "b", &bl), RF_OK);
    assert_false(bl);
    assert_int_equal(rf_gguf_get_str(g, "arr", &s), RF_ERR_TYPE);
    assert_non_null(strstr(rf_last_error(), "key 'arr' is array, expected string"));
    assert_int_equal(rf_gguf_get_arr(g, "arr", RF_GGUF_STRING, &n, &d), RF_ERR_TYPE);
    assert_non_null(strstr(rf_last_error(), "array of u32, expected array of string"));
    assert_int_equal(rf_gguf_get_arr(g, "s", -1, &n, &d), RF_ERR_TYPE);
    assert_int_equal(rf_gguf_get_u32(g, "b", &u32), RF_ERR_TYPE);
    rf_gguf_close(g);
    free(copy);
    free(b.p);
}

/* ---- tensors ---------------------------------------------------------------------------- */

/* A file with two tensors: w1 f32 [4,2] and w2 q8_0 [64] (2 blocks, 68 bytes). */
static void build_tensors(buf *b, uint32_t align, bool set_align) {
    b_header(b, 3, 2, set_align ? 2 : 1);
    b_key(b, "general.architecture", 8); b_str(b, "llama");
    if (set_align) { b_key(b, "general.alignment", 4); b_u32(b, align); }
    uint64_t ne1[2] = {4, 2}, ne2[1] = {64};
    uint64_t off2 = (32 + align - 1) / align * align;
    b_tensor_info(b, "w1", 2, ne1, 0, 0);
    b_tensor_info(b, "w2", 1, ne2, 8, off2);
    b_pad(b, align);
    size_t data0 = b->n;
    for (int i = 0; i < 8; i++) b_f32(b, (float)i + 0.5f);
    while (b->n < data0 + off2) b_u8(b, 0);
    for (int i = 0; i < 68; i++) b_u8(b, (uint8_t)(i * 7));
}

static void test_tensors_alignments(void **state) {
    (void)state;
    const uint32_t aligns[] = {8, 16, 32, 64, 96, 256};
    for (int k = 0; k < 7; k++) {
        bool set = k < 6;
        uint32_t a = set ? aligns[k] : 32;
        buf b = {0};
        build_tensors(&b, a, set);
        rf_gguf *g; uint8_t *copy;
        assert_int_equal(open_buf(&b, &g, &copy), RF_OK);
        assert_int_equal(rf_gguf_alignment(g), a);
        assert_int_equal(rf_gguf_data_offset(g) % a, 0);
        assert_int_equal(rf_gguf_n_tensors(g), 2);
        const rf_gguf_tensor *t1 = rf_gguf_find_tensor(g, "w1"), *t2 = rf_gguf_find_tensor(g, "w2");
        assert_ptr_equal(t1, rf_gguf_tensor_at(g, 0));
        assert_ptr_equal(t2, rf_gguf_tensor_at(g, 1));
        assert_null(rf_gguf_find_tensor(g, "w3"));
        assert_null(rf_gguf_tensor_at(g, 2));
        assert_int_equal(t1->n_dims, 2);
        assert_int_equal(t1->ne[0], 4); assert_int_equal(t1->ne[1], 2);
        assert_int_equal(t1->ne[2], 1); assert_int_equal(t1->ne[3], 1);
        assert_int_equal(t1->type, RF_TYPE_F32);
        assert_int_equal(t1->n_bytes, 32);
        assert_true(((const float *)t1->data)[7] == 7.5f);
        assert_int_equal(t2->type, RF_TYPE_Q8_0);
        assert_int_equal(t2->n_bytes, 68);
        assert_int_equal(t2->offset % a, 0);
        assert_int_equal(((const uint8_t *)t2->data)[67], (uint8_t)(67 * 7));
        assert_ptr_equal(t2->data, copy + rf_gguf_data_offset(g) + t2->offset);
        rf_gguf_close(g);
        free(copy);
        free(b.p);
    }
}

static void test_bad_alignment(void **state) {
    (void)state;
    buf b = {0};
    const uint32_t bad[] = {0, 4, 12, 33};
    for (int k = 0; k < 4; k++) {
        b.n = 0;
        b_header(&b, 3, 0, 1);
        b_key(&b, "general.alignment", 4); b_u32(&b, bad[k]);
        expect_fail(&b, RF_ERR_FORMAT, "nonzero multiple of 8");
    }
    b.n = 0;
    b_header(&b, 3, 0, 1);
    b_key(&b, "general.alignment", 10); b_u64(&b, 32);
    expect_fail(&b, RF_ERR_FORMAT, "'general.alignment' is u64, expected u32");
    free(b.p);
}

/* One tensor with the given info; data section of `data_bytes` zero bytes after the header. */
static void one_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes) {
    b->n = 0;
    b_header(b, 3, 1, 0);
    b_tensor_info(b, name, n_dims, ne, type, offset);
    b_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++) b_u8(b, 0);
}

static void test_bad_tensor_infos(void **state) {
    (void)state;
    buf b = {0};
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    one_tensor(&b, "ok", 2, ne, 0, 0, 256);
    rf_gguf *g; uint8_t *copy;
    assert_int_equal(open_buf(&b, &g, &copy), RF_OK);
    rf_gguf_close(g);
    free(copy);

    one_tensor(&b, "t", 0, ne, 0, 0, 256);
    expect_fail(&b, RF_ERR_FORMAT, "n_dims is 0, expected 1..4");
    one_tensor(&b, "t", 5, ne, 0, 0, 256);
    expect_fail(&b, RF_ERR_FORMAT, "n_dims is 5");
    uint64_t ne0[2] = {32, 0};
    one_tensor(&b, "t", 2, ne0, 0, 0, 256);
    expect_fail(&b, RF_ERR_FORMAT, "ne[1] is 0");
    uint64_t neneg[1] = {1ull << 63};
    one_tensor(&b, "t", 1, neneg, 0, 0, 256);
    expect_fail(&b, RF_ERR_FORMAT, "ne[0] is 9223372036854775808");
    uint64_t nebig[3] = {1ull << 32, 1ull << 30, 4};
    one_tensor(&b, "t", 3, nebig, 0, 0, 256);
    expect_fail(&b, RF_ERR_FORMAT, "element count overflows at ne[2]");
    /* 2^62 f32 elements: the count fits, the byte size (2^64) does not */
    uint64_t nebytes[2] = {1ull << 31, 1ull << 31};
    one_tensor(&b, "t", 2, nebytes, 0, 0, 256);
    expect_fail(&b, RF_ERR_FORMAT, "byte size overflows");
    one_tensor(&b, "t", 2, ne, 4, 0, 256);
    expect_fail(&b, RF_ERR_UNSUPPORTED, "type id is 4");
    one_tensor(&b, "t", 2, ne, 31, 0, 256); /* removed from ggml */
    expect_fail(&b, RF_ERR_UNSUPPORTED, "type id is 31");
    one_tensor(&b, "t", 2, ne, 1000, 0, 256);
    expect_fail(&b, RF_ERR_UNSUPPORTED, "type id is 1000");
    one_tensor(&b, "t", 2, ne, 0xFFFFFFFFu, 0, 256);
    expect_fail(&b, RF_ERR_UNSUPPORTED, "type id");
    uint64_t ne33[1] = {33};
    one_tensor(&b, "t", 1, ne33, RF_TYPE_Q8_0, 0, 256);
    expect_fail(&b, RF_ERR_FORMAT, "ne[0] is 33, expected a multiple of the block size 32 of its type q8_0");
    one_tensor(&b, "t", 2, ne, 0, 8, 256);
    expect_fail(&b, RF_ERR_FORMAT, "expected a multiple of the alignment 32");
    one_tensor(&b, "t", 2, ne, 0, 32, 256); /* 256 bytes from 32: one past the end */
    expect_fail(&b, RF_ERR_FORMAT, "expected inside the file");
    one_tensor(&b, "t", 2, ne, 0, UINT64_MAX - 31, 256);
    expect_fail(&b, RF_ERR_FORMAT, "expected inside the file");
    one_tensor(&b, "t", 2, ne, 0, 0, 255);
    expect_fail(&b, RF_ERR_FORMAT, "expected inside the file");
    char longname[66];
    memset(longname, 'n', 65);
    longname[65] = 0;
    one_tensor(&b, longname, 2, ne, 0, 0, 256);
    expect_fail(&b, RF_ERR_FORMAT, "name length is 65, expected at most 64");
    longname[64] = 0;
    one_tensor(&b, longname, 2, ne, 0, 0, 256);
    assert_int_equal(open_buf(&b, &g, &copy), RF_OK); /* 64 is allowed by the spec */
    rf_gguf_close(g);
    free(copy);

    /* duplicate names and overlapping data */
    uint64_t ne1[1] = {8};
    for (int k = 0; k < 2; k++) {
        b.n = 0;
        b_header(&b, 3, 2, 0);
        b_tensor_info(&b, "a", 1, ne1, 0, 0);
        b_tensor_info(&b, k ? "b" : "a", 1, ne1, 0, k ? 0 : 32);
        b_pad(&b, 32);
        for (int i = 0; i < 64; i++) b_u8(&b, 0);
        expect_fail(&b, RF_ERR_FORMAT, k ? "overlap" : "duplicate tensor name");
    }
    /* data section start beyond the end */
    b.n = 0;
    b_header(&b, 3, 1, 0);
    b_tensor_info(&b, "a", 1, ne1, 0, 0);
    expect_fail(&b, RF_ERR_FORMAT, "data section starts");
    free(b.p);
}

/* rf_gguf_open on a path: success, and errors that name the file. */
static void test_open_path(void **state) {
    (void)state;
    buf b = {0};
    build_tensors(&b, 32, false);
    char path[] = "/tmp/rf_test_ggufXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    rf_gguf *g;
    assert_int_equal(rf_gguf_open(path, &g), RF_OK);
    assert_int_equal(rf_gguf_file_size(g), b.n);
    assert_true(((const float *)rf_gguf_find_tensor(g, "w1")->data)[1] == 1.5f);
    rf_gguf_close(g);
    /* corrupt the magic: the message names the path */
    fd = open(path, O_WRONLY);
    assert_int_equal(write(fd, "XXXX", 4), 4);
    close(fd);
    assert_int_equal(rf_gguf_open(path, &g), RF_ERR_FORMAT);
    assert_non_null(strstr(rf_last_error(), path));
    assert_non_null(strstr(rf_last_error(), "magic"));
    unlink(path);
    assert_int_equal(rf_gguf_open("/nonexistent/x.gguf", &g), RF_ERR_IO);
    assert_null(g);
    free(b.p);
}

int main(void) {
    printf("test_gguf: deterministic byte-level fixtures (no random seed)\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_types_v3),
        cmocka_unit_test(test_all_types_v2),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_bad_magic_and_versions),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_bad_kvs),
        cmocka_unit_test(test_getter_errors),
        cmocka_unit_test(test_tensors_alignments),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_tensor_infos),
        cmocka_unit_test(test_open_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
