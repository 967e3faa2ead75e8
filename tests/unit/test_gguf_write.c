/* test_gguf_write.c — the GGUF writer: every value type incl. nested arrays, tensors from
 * buffers and fill callbacks (chunked streaming), alignment and zero padding, argument errors,
 * and the bit-identical round trip write -> read -> write.
 * Also a small generator used by other tests:
 *   test_gguf_write --emit FILE.gguf MANIFEST.json   file + what was written (Python oracle)
 *   test_gguf_write --corpus DIR                      seed corpus for the GGUF fuzzer
 *   test_gguf_write --fixture FILE.gguf               tests/data/gguf/tiny_llama.gguf */
#define _GNU_SOURCE
#include "test_util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf_internal.h"

/* ---- a model-like file covering everything, with an optional manifest ------------------- */

typedef struct everything {
    uint8_t *bufs[8]; /* tensor bytes given as data (freed by done_everything) */
    uint64_t seed;
} everything;

static json_t *jkv(json_t *m, const char *key, const char *type, json_t *value) {
    if (!m) {
        json_decref(value);
        return NULL;
    }
    json_t *o = json_pack("{s:s, s:o}", "type", type, "value", value);
    json_object_set_new(json_object_get(m, "kv"), key, o);
    return o;
}

static json_t *jarr_of(const char *elem_type, json_t *values) {
    return json_pack("{s:s, s:o}", "elem_type", elem_type, "items", values);
}

static void hex_into(char *dst, const uint8_t *p, uint64_t n) {
    static const char hx[] = "0123456789abcdef";
    for (uint64_t i = 0; i < n; i++) {
        dst[2 * i] = hx[p[i] >> 4];
        dst[2 * i + 1] = hx[p[i] & 15];
    }
    dst[2 * n] = 0;
}

/* Fill callback: byte k of tensor `index` is a hash of (seed, index, k). */
static uint8_t pattern_byte(uint64_t seed, int64_t index, uint64_t k) {
    uint64_t x = seed ^ ((uint64_t)index << 48) ^ (k * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)x;
}

typedef struct fill_log {
    uint64_t seed;
    uint64_t calls, max_chunk, next_offset;
    int fail_at_call; /* 0 = never */
} fill_log;

static rf_status fill_pattern(void *user, int64_t index, uint64_t offset, void *dst, uint64_t size) {
    fill_log *l = user;
    l->calls++;
    if (l->fail_at_call && (int)l->calls == l->fail_at_call)
        return rf_set_error(RF_ERR_IO, "source file vanished");
    if (offset != l->next_offset) return rf_set_error(RF_ERR_INTERNAL, "fill out of order");
    if (size > l->max_chunk) l->max_chunk = size;
    for (uint64_t k = 0; k < size; k++) ((uint8_t *)dst)[k] = pattern_byte(l->seed, index, offset + k);
    l->next_offset = offset + size;
    return RF_OK;
}

/* fill callback that resets next_offset at each new tensor */
static rf_status fill_pattern_multi(void *user, int64_t index, uint64_t offset, void *dst,
                                    uint64_t size) {
    fill_log *l = user;
    if (offset == 0) l->next_offset = 0;
    return fill_pattern(user, index, offset, dst, size);
}

/* Adds every metadata type and 7 tensors (4 from buffers, 3 from a fill callback). `m`, if not
 * NULL, receives the manifest {kv: {key: {type, value}}, tensors: [{name,type,shape,hex}]}. */
static void build_everything(rf_gguf_writer *w, everything *e, fill_log *fl, json_t *m,
                             uint32_t alignment) {
    memset(e, 0, sizeof *e);
    e->seed = fl->seed;
    if (m) {
        json_object_set_new(m, "kv", json_object());
        json_object_set_new(m, "tensors", json_array());
    }
    assert_int_equal(rf_gguf_set_str(w, "general.architecture", "llama"), RF_OK);
    jkv(m, "general.architecture", "string", json_string("llama"));
    if (alignment) {
        assert_int_equal(rf_gguf_set_u32(w, "general.alignment", alignment), RF_OK);
        jkv(m, "general.alignment", "u32", json_integer(alignment));
    }
    assert_int_equal(rf_gguf_set_u8(w, "t.u8", 250), RF_OK);
    jkv(m, "t.u8", "u8", json_integer(250));
    assert_int_equal(rf_gguf_set_i8(w, "t.i8", -7), RF_OK);
    jkv(m, "t.i8", "i8", json_integer(-7));
    assert_int_equal(rf_gguf_set_u16(w, "t.u16", 60000), RF_OK);
    jkv(m, "t.u16", "u16", json_integer(60000));
    assert_int_equal(rf_gguf_set_i16(w, "t.i16", -1234), RF_OK);
    jkv(m, "t.i16", "i16", json_integer(-1234));
    assert_int_equal(rf_gguf_set_u32(w, "t.u32", 3000000000u), RF_OK);
    jkv(m, "t.u32", "u32", json_integer(3000000000ll));
    assert_int_equal(rf_gguf_set_i32(w, "t.i32", -2000000000), RF_OK);
    jkv(m, "t.i32", "i32", json_integer(-2000000000));
    assert_int_equal(rf_gguf_set_u64(w, "t.u64", (1ull << 60) + 3), RF_OK);
    jkv(m, "t.u64", "u64", json_integer((json_int_t)((1ull << 60) + 3)));
    assert_int_equal(rf_gguf_set_i64(w, "t.i64", -(1ll << 50)), RF_OK);
    jkv(m, "t.i64", "i64", json_integer(-(1ll << 50)));
    assert_int_equal(rf_gguf_set_f32(w, "t.f32", 0.1f), RF_OK);
    jkv(m, "t.f32", "f32", json_real((double)0.1f));
    assert_int_equal(rf_gguf_set_f64(w, "t.f64", 1.0 / 3.0), RF_OK);
    jkv(m, "t.f64", "f64", json_real(1.0 / 3.0));
    assert_int_equal(rf_gguf_set_bool(w, "t.bool", true), RF_OK);
    jkv(m, "t.bool", "bool", json_true());
    assert_int_equal(rf_gguf_set_str(w, "t.str", "h\xc3\xa9llo \xe2\x98\x83 \"q\"\n"), RF_OK);
    jkv(m, "t.str", "string", json_string("h\xc3\xa9llo \xe2\x98\x83 \"q\"\n"));
    assert_int_equal(rf_gguf_set_str(w, "t.str_empty", ""), RF_OK);
    jkv(m, "t.str_empty", "string", json_string(""));

    const uint8_t au8[] = {0, 1, 255};
    const int8_t ai8[] = {-128, 127};
    const uint16_t au16[] = {65535, 7};
    const int16_t ai16[] = {-32768, 5};
    const uint32_t au32[] = {4294967295u, 0, 1};
    const int32_t ai32[] = {-2147483647 - 1, 2147483647};
    const float af32[] = {1.5f, -0.125f, 3.0e-8f};
    const uint8_t abool[] = {1, 0, 1};
    const uint64_t au64[] = {UINT64_MAX / 3, 9};
    const int64_t ai64[] = {INT64_MIN + 1, -1};
    const double af64[] = {2.5, -1e-300};
    assert_int_equal(rf_gguf_set_arr(w, "a.u8", RF_GGUF_UINT8, au8, 3), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.i8", RF_GGUF_INT8, ai8, 2), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.u16", RF_GGUF_UINT16, au16, 2), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.i16", RF_GGUF_INT16, ai16, 2), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.u32", RF_GGUF_UINT32, au32, 3), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.i32", RF_GGUF_INT32, ai32, 2), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.f32", RF_GGUF_FLOAT32, af32, 3), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.bool", RF_GGUF_BOOL, abool, 3), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.u64", RF_GGUF_UINT64, au64, 2), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.i64", RF_GGUF_INT64, ai64, 2), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.f64", RF_GGUF_FLOAT64, af64, 2), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "a.f64_empty", RF_GGUF_FLOAT64, NULL, 0), RF_OK);
    if (m) {
        jkv(m, "a.u8", "array", jarr_of("u8", json_pack("[iii]", 0, 1, 255)));
        jkv(m, "a.i8", "array", jarr_of("i8", json_pack("[ii]", -128, 127)));
        jkv(m, "a.u16", "array", jarr_of("u16", json_pack("[ii]", 65535, 7)));
        jkv(m, "a.i16", "array", jarr_of("i16", json_pack("[ii]", -32768, 5)));
        jkv(m, "a.u32", "array", jarr_of("u32", json_pack("[III]", (json_int_t)4294967295ll, (json_int_t)0, (json_int_t)1)));
        jkv(m, "a.i32", "array", jarr_of("i32", json_pack("[II]", (json_int_t)(-2147483647 - 1), (json_int_t)2147483647)));
        jkv(m, "a.f32", "array", jarr_of("f32", json_pack("[fff]", 1.5, -0.125, (double)3.0e-8f)));
        jkv(m, "a.bool", "array", jarr_of("bool", json_pack("[bbb]", 1, 0, 1)));
        /* u64 beyond json_int_t range is written as a decimal string */
        char big[32];
        snprintf(big, sizeof big, "%llu", (unsigned long long)(UINT64_MAX / 3));
        jkv(m, "a.u64", "array", jarr_of("u64", json_pack("[sI]", big, (json_int_t)9)));
        jkv(m, "a.i64", "array", jarr_of("i64", json_pack("[II]", (json_int_t)(INT64_MIN + 1), (json_int_t)-1)));
        jkv(m, "a.f64", "array", jarr_of("f64", json_pack("[ff]", 2.5, -1e-300)));
        jkv(m, "a.f64_empty", "array", jarr_of("f64", json_array()));
    }
    const char *strs[] = {"a", "", "\xc3\xbc", "<|im_start|>"};
    assert_int_equal(rf_gguf_set_arr_str(w, "a.str", strs, 4), RF_OK);
    jkv(m, "a.str", "array", jarr_of("string", json_pack("[ssss]", strs[0], strs[1], strs[2], strs[3])));
    assert_int_equal(rf_gguf_set_arr_str(w, "a.str_empty", NULL, 0), RF_OK);
    jkv(m, "a.str_empty", "array", jarr_of("string", json_array()));

    /* nested: [[1, 2], [3]] of u32, and [["x", "y"], [], [[-1.5]]] mixing element types */
    const uint32_t n1[] = {1, 2}, n2[] = {3};
    rf_gguf_value inner[2] = {0};
    inner[0].type = RF_GGUF_ARRAY;
    inner[0].v.arr.elem_type = RF_GGUF_UINT32;
    inner[0].v.arr.n = 2;
    inner[0].v.arr.data = n1;
    inner[1] = inner[0];
    inner[1].v.arr.n = 1;
    inner[1].v.arr.data = n2;
    rf_gguf_value outer = {.type = RF_GGUF_ARRAY};
    outer.v.arr.elem_type = RF_GGUF_ARRAY;
    outer.v.arr.n = 2;
    outer.v.arr.data = inner;
    assert_int_equal(rf_gguf_set_value(w, "a.nested", &outer), RF_OK);
    if (m)
        jkv(m, "a.nested", "array",
            jarr_of("array", json_pack("[oo]", jarr_of("u32", json_pack("[ii]", 1, 2)),
                                       jarr_of("u32", json_pack("[i]", 3)))));
    rf_gguf_str xs[2] = {{"x", 1}, {"y", 1}};
    const double dd[] = {-1.5};
    rf_gguf_value deep_leaf = {.type = RF_GGUF_ARRAY};
    deep_leaf.v.arr.elem_type = RF_GGUF_FLOAT64;
    deep_leaf.v.arr.n = 1;
    deep_leaf.v.arr.data = dd;
    rf_gguf_value mix[3] = {0};
    mix[0].type = RF_GGUF_ARRAY;
    mix[0].v.arr.elem_type = RF_GGUF_STRING;
    mix[0].v.arr.n = 2;
    mix[0].v.arr.data = xs;
    mix[1].type = RF_GGUF_ARRAY;
    mix[1].v.arr.elem_type = RF_GGUF_INT8;
    mix[1].v.arr.n = 0;
    mix[2].type = RF_GGUF_ARRAY;
    mix[2].v.arr.elem_type = RF_GGUF_ARRAY;
    mix[2].v.arr.n = 1;
    mix[2].v.arr.data = &deep_leaf;
    outer.v.arr.n = 3;
    outer.v.arr.data = mix;
    assert_int_equal(rf_gguf_set_value(w, "a.nested_mixed", &outer), RF_OK);
    if (m)
        jkv(m, "a.nested_mixed", "array",
            jarr_of("array",
                    json_pack("[ooo]", jarr_of("string", json_pack("[ss]", "x", "y")),
                              jarr_of("i8", json_array()),
                              jarr_of("array", json_pack("[o]", jarr_of("f64", json_pack("[f]", -1.5)))))));

    /* tensors: name, type, n_dims, shape; the first 4 from buffers, the rest from fill */
    static const struct { const char *name; rf_type type; uint32_t n_dims; int64_t ne[4]; } T[] = {
        {"token_embd.weight", RF_TYPE_F32, 2, {8, 3, 1, 1}},
        {"blk.0.attn_q.weight", RF_TYPE_F16, 2, {16, 2, 1, 1}},
        {"blk.0.ffn_up.weight", RF_TYPE_Q4_0, 2, {64, 2, 1, 1}},
        {"blk.0.bias", RF_TYPE_I32, 1, {5, 1, 1, 1}},
        {"blk.0.ffn_down.weight", RF_TYPE_Q8_0, 3, {32, 1, 2, 1}},
        {"blk.0.attn_v.weight", RF_TYPE_Q4_K, 2, {256, 1, 1, 1}},
        {"output.weight", RF_TYPE_BF16, 4, {4, 1, 1, 2}},
    };
    for (int i = 0; i < 7; i++) {
        uint64_t n_elem, n_bytes;
        assert_true(rf_gguf__tensor_bytes(T[i].type, T[i].n_dims, T[i].ne, &n_elem, &n_bytes));
        uint8_t *bytes = malloc(n_bytes);
        for (uint64_t k = 0; k < n_bytes; k++) bytes[k] = pattern_byte(fl->seed, i, k);
        if (i < 4) {
            e->bufs[i] = bytes;
            assert_int_equal(rf_gguf_add_tensor(w, T[i].name, T[i].type, T[i].n_dims, T[i].ne,
                                                bytes, NULL, NULL),
                             RF_OK);
        } else {
            e->bufs[i] = bytes; /* kept for checking only */
            assert_int_equal(rf_gguf_add_tensor(w, T[i].name, T[i].type, T[i].n_dims, T[i].ne,
                                                NULL, fill_pattern_multi, fl),
                             RF_OK);
        }
        if (m) {
            char *hex = malloc(2 * n_bytes + 1);
            hex_into(hex, bytes, n_bytes);
            json_t *shape = json_array();
            for (uint32_t d = 0; d < T[i].n_dims; d++) json_array_append_new(shape, json_integer(T[i].ne[d]));
            json_array_append_new(json_object_get(m, "tensors"),
                                  json_pack("{s:s, s:i, s:o, s:s}", "name", T[i].name, "type",
                                            (int)T[i].type, "shape", shape, "hex", hex));
            free(hex);
        }
    }
}

static void done_everything(everything *e) {
    for (int i = 0; i < 8; i++) free(e->bufs[i]);
}

/* Writes w into a malloc'd buffer. */
static uint8_t *write_mem(rf_gguf_writer *w, size_t *n) {
    char *p = NULL;
    FILE *f = open_memstream(&p, n);
    assert_non_null(f);
    rf_status st = rf_gguf_write_stream(w, f);
    if (st) print_error("write: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    fclose(f);
    return (uint8_t *)p;
}

/* A writer holding everything the reader found (keys in order, tensors by pointer). */
static rf_gguf_writer *writer_from(const rf_gguf *g) {
    rf_gguf_writer *w = rf_gguf_writer_new();
    for (int64_t i = 0; i < rf_gguf_n_kv(g); i++)
        assert_int_equal(rf_gguf_set_value(w, rf_gguf_kv_key(g, i), rf_gguf_kv_value(g, i)), RF_OK);
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        assert_int_equal(rf_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL),
                         RF_OK);
    }
    return w;
}

static void round_trip(uint32_t alignment) {
    uint64_t seed = rf_test_seed();
    fill_log fl = {.seed = seed, .max_chunk = 0};
    everything e;
    rf_gguf_writer *w = rf_gguf_writer_new();
    build_everything(w, &e, &fl, NULL, alignment);
    size_t n1, n2;
    uint8_t *a = write_mem(w, &n1);
    rf_gguf_writer_free(w);
    rf_gguf *g;
    rf_status st = rf_gguf_open_memory(a, n1, &g);
    if (st) print_error("%s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    uint32_t al = alignment ? alignment : 32;
    assert_int_equal(rf_gguf_version(g), 3);
    assert_int_equal(rf_gguf_alignment(g), al);
    assert_int_equal(n1 % al, 0); /* padded after the last tensor too */
    /* everything between the end of the header and the data, and between tensors, is zero */
    uint64_t d0 = rf_gguf_data_offset(g);
    uint64_t prev_end = d0;
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        assert_int_equal(t->offset % al, 0);
        assert_memory_equal(t->data, e.bufs[i], t->n_bytes);
        for (uint64_t k = prev_end; k < d0 + t->offset; k++) assert_int_equal(a[k], 0);
        prev_end = d0 + t->offset + t->n_bytes;
    }
    for (uint64_t k = prev_end; k < n1; k++) assert_int_equal(a[k], 0);
    /* values */
    float f;
    assert_int_equal(rf_gguf_get_f32(g, "t.f32", &f), RF_OK);
    assert_true(f == 0.1f);
    const char *s;
    assert_int_equal(rf_gguf_get_str(g, "t.str_empty", &s), RF_OK);
    assert_string_equal(s, "");
    const rf_gguf_value *v = rf_gguf_kv_value(g, rf_gguf_find_key(g, "a.nested_mixed"));
    const rf_gguf_value *mix = v->v.arr.data;
    assert_int_equal(mix[2].v.arr.elem_type, RF_GGUF_ARRAY);
    assert_true(((const double *)((const rf_gguf_value *)mix[2].v.arr.data)[0].v.arr.data)[0] == -1.5);
    /* and the same bytes again */
    w = writer_from(g);
    uint8_t *b = write_mem(w, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    rf_gguf_writer_free(w);
    rf_gguf_close(g);
    free(a);
    free(b);
    done_everything(&e);
}

static void test_round_trip_default_alignment(void **state) { (void)state; round_trip(0); }
static void test_round_trip_alignment_64(void **state) { (void)state; round_trip(64); }
static void test_round_trip_alignment_8(void **state) { (void)state; round_trip(8); }

/* A tensor larger than the fill chunk streams in <= 1 MiB pieces, in order. */
static void test_fill_streaming(void **state) {
    (void)state;
    fill_log fl = {.seed = rf_test_seed()};
    rf_gguf_writer *w = rf_gguf_writer_new();
    int64_t ne[2] = {(3 << 20) / 4 + 5, 1}; /* 3 MiB + 20 bytes of f32 */
    assert_int_equal(rf_gguf_add_tensor(w, "big", RF_TYPE_F32, 2, ne, NULL, fill_pattern, &fl), RF_OK);
    size_t n;
    uint8_t *a = write_mem(w, &n);
    assert_int_equal(fl.calls, 4);
    assert_int_equal(fl.max_chunk, 1 << 20);
    rf_gguf *g;
    assert_int_equal(rf_gguf_open_memory(a, n, &g), RF_OK);
    const rf_gguf_tensor *t = rf_gguf_find_tensor(g, "big");
    assert_int_equal(t->n_bytes, (3 << 20) + 20);
    for (uint64_t k = 0; k < t->n_bytes; k += 4093)
        assert_int_equal(((const uint8_t *)t->data)[k], pattern_byte(fl.seed, 0, k));
    assert_int_equal(((const uint8_t *)t->data)[t->n_bytes - 1], pattern_byte(fl.seed, 0, t->n_bytes - 1));
    rf_gguf_close(g);
    free(a);
    /* a failing fill fails the write, names the tensor, removes its partial file and leaves the
     * existing target (here the empty file mkstemp made) as it was */
    char path[] = "/tmp/rf_test_gguf_wXXXXXX";
    int fd = mkstemp(path);
    close(fd);
    fl = (fill_log){.seed = 1, .fail_at_call = 2};
    rf_status st = rf_gguf_write_file(w, path);
    assert_int_equal(st, RF_ERR_IO);
    assert_non_null(strstr(rf_last_error(), "'big'"));
    assert_non_null(strstr(rf_last_error(), "source file vanished"));
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 0);
    char part[64];
    snprintf(part, sizeof part, "%s.part%ld", path, (long)getpid());
    assert_int_equal(stat(part, &sb), -1);
    /* and a good write_file produces a file that opens */
    fl = (fill_log){.seed = 1};
    assert_int_equal(rf_gguf_write_file(w, path), RF_OK);
    assert_int_equal(rf_gguf_open(path, &g), RF_OK);
    assert_int_equal(rf_gguf_n_tensors(g), 1);
    rf_gguf_close(g);
    unlink(path);
    assert_int_equal(rf_gguf_write_file(w, "/nonexistent/dir/x.gguf"), RF_ERR_IO);
    rf_gguf_writer_free(w);
}

static void test_writer_errors(void **state) {
    (void)state;
    rf_gguf_writer *w = rf_gguf_writer_new();
    float x[64] = {0};
    int64_t ne[5] = {4, 2, 1, 1, 1};
    assert_int_equal(rf_gguf_add_tensor(w, "a", RF_TYPE_F32, 2, ne, x, NULL, NULL), RF_OK);
    assert_int_equal(rf_gguf_add_tensor(w, "a", RF_TYPE_F32, 2, ne, x, NULL, NULL), RF_ERR_INVALID_ARG);
    assert_non_null(strstr(rf_last_error(), "duplicate tensor name 'a'"));
    assert_int_equal(rf_gguf_add_tensor(w, "b", RF_TYPE_F32, 0, ne, x, NULL, NULL), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_add_tensor(w, "b", RF_TYPE_F32, 5, ne, x, NULL, NULL), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_add_tensor(w, "b", RF_TYPE_F32, 2, ne, NULL, NULL, NULL), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_add_tensor(w, "b", RF_TYPE_F32, 2, ne, x, fill_pattern, NULL), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_add_tensor(w, "b", (rf_type)4, 2, ne, x, NULL, NULL), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_add_tensor(w, "b", RF_TYPE_Q8_0, 2, ne, x, NULL, NULL), RF_ERR_INVALID_ARG);
    int64_t ne0[2] = {4, 0};
    assert_int_equal(rf_gguf_add_tensor(w, "b", RF_TYPE_F32, 2, ne0, x, NULL, NULL), RF_ERR_INVALID_ARG);
    char name[65];
    memset(name, 'n', 64);
    name[64] = 0;
    assert_int_equal(rf_gguf_add_tensor(w, name, RF_TYPE_F32, 2, ne, x, NULL, NULL), RF_ERR_INVALID_ARG);
    name[63] = 0;
    assert_int_equal(rf_gguf_add_tensor(w, name, RF_TYPE_F32, 2, ne, x, NULL, NULL), RF_OK);
    assert_int_equal(rf_gguf_set_u32(w, "general.alignment", 12), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_set_u64(w, "general.alignment", 32), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_set_u32(w, "", 1), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_set_str(w, "s", NULL), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gguf_set_arr(w, "s", RF_GGUF_STRING, x, 1), RF_ERR_INVALID_ARG);
    const uint8_t badbool[] = {0, 2};
    assert_int_equal(rf_gguf_set_arr(w, "b", RF_GGUF_BOOL, badbool, 2), RF_ERR_INVALID_ARG);
    /* setting a key again replaces the value and keeps its position */
    assert_int_equal(rf_gguf_set_u32(w, "k1", 1), RF_OK);
    assert_int_equal(rf_gguf_set_str(w, "k2", "two"), RF_OK);
    assert_int_equal(rf_gguf_set_str(w, "k1", "one"), RF_OK);
    size_t n;
    uint8_t *a = write_mem(w, &n);
    rf_gguf *g;
    assert_int_equal(rf_gguf_open_memory(a, n, &g), RF_OK);
    assert_int_equal(rf_gguf_n_kv(g), 2);
    assert_string_equal(rf_gguf_kv_key(g, 0), "k1");
    const char *s;
    assert_int_equal(rf_gguf_get_str(g, "k1", &s), RF_OK);
    assert_string_equal(s, "one");
    assert_int_equal(rf_gguf_n_tensors(g), 2);
    rf_gguf_close(g);
    free(a);
    rf_gguf_writer_free(w);
    /* an empty file (no kv, no tensor) is valid; the header is padded like ggml pads it */
    w = rf_gguf_writer_new();
    a = write_mem(w, &n);
    assert_int_equal(n, 32); /* 24-byte header padded to the alignment, as ggml does */
    assert_int_equal(rf_gguf_open_memory(a, n, &g), RF_OK);
    rf_gguf_close(g);
    free(a);
    rf_gguf_writer_free(w);
}

/* ---- generators ------------------------------------------------------------------------- */

static int emit(const char *path, const char *manifest) {
    fill_log fl = {.seed = rf_test_seed()};
    everything e;
    json_t *m = json_object();
    rf_gguf_writer *w = rf_gguf_writer_new();
    build_everything(w, &e, &fl, m, 64);
    if (rf_gguf_write_file(w, path)) {
        fprintf(stderr, "error: %s\n", rf_last_error());
        return 1;
    }
    if (json_dump_file(m, manifest, JSON_INDENT(1) | JSON_REAL_PRECISION(17))) {
        fprintf(stderr, "error: cannot write %s\n", manifest);
        return 1;
    }
    json_decref(m);
    rf_gguf_writer_free(w);
    done_everything(&e);
    return 0;
}

static void put_file(const char *dir, const char *name, const uint8_t *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "error: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* Seed corpus: small valid files from the writer, then truncated and corrupted variants. */
static int corpus(const char *dir) {
    fill_log fl = {.seed = 12345};
    everything e;
    rf_gguf_writer *w = rf_gguf_writer_new();
    build_everything(w, &e, &fl, NULL, 0);
    size_t n;
    uint8_t *a = write_mem(w, &n);
    rf_gguf_writer_free(w);
    done_everything(&e);
    put_file(dir, "valid_all_types.gguf", a, n);
    uint8_t *c = malloc(n);
    memcpy(c, a, n);
    c[4] = 2; /* version 2: same layout */
    put_file(dir, "valid_v2.gguf", c, n);

    w = rf_gguf_writer_new();
    rf_gguf_set_str(w, "general.architecture", "llama");
    rf_gguf_set_u32(w, "general.alignment", 8);
    rf_gguf_set_u32(w, "llama.block_count", 1);
    const char *toks[] = {"<s>", "</s>", "a"};
    rf_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t ne[2] = {4, 2}, ne1[1] = {2};
    rf_gguf_add_tensor(w, "a", RF_TYPE_F32, 2, ne, x, NULL, NULL);
    rf_gguf_add_tensor(w, "b", RF_TYPE_F32, 1, ne1, x, NULL, NULL);
    size_t n2;
    uint8_t *s = write_mem(w, &n2);
    rf_gguf_writer_free(w);
    put_file(dir, "valid_small_align8.gguf", s, n2);
    w = rf_gguf_writer_new();
    rf_gguf_set_str(w, "general.name", "meta only");
    size_t n3;
    uint8_t *mo = write_mem(w, &n3);
    rf_gguf_writer_free(w);
    put_file(dir, "valid_meta_only.gguf", mo, n3);

    /* truncations of the full file at the header, inside kvs, tensor infos and data */
    const size_t cuts[] = {3, 10, 23, 60, n / 4, n / 2, n - 100, n - 1};
    for (int i = 0; i < 8; i++) {
        char name[64];
        snprintf(name, sizeof name, "trunc_%zu.gguf", cuts[i]);
        put_file(dir, name, a, cuts[i]);
    }
    /* header corruptions */
    memcpy(c, s, n2);
    c[0] = 'X';
    put_file(dir, "bad_magic.gguf", c, n2);
    memcpy(c, s, n2);
    c[4] = 0; c[7] = 3;
    put_file(dir, "big_endian.gguf", c, n2);
    memcpy(c, s, n2);
    memset(c + 16, 0xff, 8);
    put_file(dir, "huge_n_kv.gguf", c, n2);
    memcpy(c, s, n2);
    memset(c + 8, 0x7f, 8);
    put_file(dir, "huge_n_tensors.gguf", c, n2);
    /* every 7th byte of the small file flipped, one file per 5 positions */
    for (size_t p = 24; p < n2; p += 35) {
        memcpy(c, s, n2);
        for (size_t q = p; q < p + 35 && q < n2; q += 7) c[q] ^= 0x5a;
        char name[64];
        snprintf(name, sizeof name, "flip_%zu.gguf", p);
        put_file(dir, name, c, n2);
    }
    free(a);
    free(s);
    free(mo);
    free(c);
    return 0;
}

/* A tiny llama-shaped file with the keys `inspect` summarises (tests/data/gguf/tiny_llama.gguf). */
static int fixture(const char *path) {
    rf_gguf_writer *w = rf_gguf_writer_new();
    rf_gguf_set_str(w, "general.architecture", "llama");
    rf_gguf_set_str(w, "general.name", "tiny llama fixture");
    rf_gguf_set_u32(w, "llama.block_count", 2);
    rf_gguf_set_u32(w, "llama.embedding_length", 64);
    rf_gguf_set_u32(w, "llama.attention.head_count", 4);
    rf_gguf_set_u32(w, "llama.attention.head_count_kv", 2);
    rf_gguf_set_u32(w, "llama.feed_forward_length", 128);
    rf_gguf_set_u32(w, "llama.context_length", 256);
    rf_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    rf_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    const char *toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81hello", "world"};
    rf_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 5);
    const float scores[] = {0, 0, 0, -1, -2};
    rf_gguf_set_arr(w, "tokenizer.ggml.scores", RF_GGUF_FLOAT32, scores, 5);
    rf_gguf_set_u32(w, "general.quantization_version", 2);
    static uint8_t zeros[64 * 128 * 4];
    int64_t emb[2] = {64, 5}, q[2] = {64, 64}, kv[2] = {64, 32}, up[2] = {64, 128},
            down[2] = {128, 64}, norm[1] = {64};
    rf_status st = rf_gguf_add_tensor(w, "token_embd.weight", RF_TYPE_F16, 2, emb, zeros, NULL, NULL);
    for (int l = 0; l < 2 && !st; l++) {
        char n[64];
#define ADD(suffix, type, nd, ne)                                                   \
        snprintf(n, sizeof n, "blk.%d." suffix, l);                                \
        if (!st) st = rf_gguf_add_tensor(w, n, type, nd, ne, zeros, NULL, NULL);
        ADD("attn_norm.weight", RF_TYPE_F32, 1, norm)
        ADD("attn_q.weight", RF_TYPE_Q8_0, 2, q)
        ADD("attn_k.weight", RF_TYPE_Q8_0, 2, kv)
        ADD("attn_v.weight", RF_TYPE_Q8_0, 2, kv)
        ADD("attn_output.weight", RF_TYPE_Q4_0, 2, q)
        ADD("ffn_norm.weight", RF_TYPE_F32, 1, norm)
        ADD("ffn_gate.weight", RF_TYPE_Q4_0, 2, up)
        ADD("ffn_up.weight", RF_TYPE_Q4_0, 2, up)
        ADD("ffn_down.weight", RF_TYPE_Q8_0, 2, down)
#undef ADD
    }
    if (!st) st = rf_gguf_add_tensor(w, "output_norm.weight", RF_TYPE_F32, 1, norm, zeros, NULL, NULL);
    if (!st) st = rf_gguf_write_file(w, path);
    rf_gguf_writer_free(w);
    if (st) fprintf(stderr, "error: %s\n", rf_last_error());
    return st ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--emit")) return emit(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "--fixture")) return fixture(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--corpus")) return corpus(argv[2]);
    printf("test_gguf_write: seed %llu\n", (unsigned long long)rf_test_seed());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_default_alignment),
        cmocka_unit_test(test_round_trip_alignment_64),
        cmocka_unit_test(test_round_trip_alignment_8),
        cmocka_unit_test(test_fill_streaming),
        cmocka_unit_test(test_writer_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
