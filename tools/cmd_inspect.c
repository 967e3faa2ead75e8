/* cmd_inspect.c — `rocmforge inspect FILE.gguf [--full] [--json]`: a GGUF file's version,
 * metadata, tensor table, totals and a one-line architecture summary, as text or JSON. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rocmforge/quant.h"

#define ABBREV_STRINGS 3 /* array items shown without --full */
#define ABBREV_NUMBERS 8
#define ABBREV_CHARS 80 /* string characters shown without --full */

static void usage(FILE *f) {
    fputs("usage: rocmforge inspect FILE.gguf [--full] [--json]\n\n"
          "Shows a GGUF file: version, metadata, tensors (name, type, shape, bytes, offset),\n"
          "totals (parameters, bytes per type, bits per weight) and an architecture summary.\n"
          "Shapes are in GGUF order: ne[0] (the contiguous dimension) first.\n\n"
          "options:\n"
          "  --full    print every array element and whole strings (default: abbreviated)\n"
          "  --json    print the same information as one JSON object\n"
          "  -h, --help  this help\n",
          f);
}

/* ---- text ------------------------------------------------------------------------------- */

/* Prints a string quoted, with control characters, quotes and backslashes escaped; at most
 * `max` bytes unless max == 0 (then a "...(N bytes)" marker). */
static void print_str(FILE *f, const char *s, uint64_t len, uint64_t max) {
    uint64_t n = max && len > max ? max : len;
    fputc('"', f);
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('"', f);
    if (n < len) fprintf(f, "...(%" PRIu64 " bytes)", len);
}

static void print_scalar_at(FILE *f, rf_gguf_type t, const void *data, uint64_t i) {
    switch (t) {
    case RF_GGUF_UINT8: fprintf(f, "%u", ((const uint8_t *)data)[i]); break;
    case RF_GGUF_INT8: fprintf(f, "%d", ((const int8_t *)data)[i]); break;
    case RF_GGUF_UINT16: fprintf(f, "%u", ((const uint16_t *)data)[i]); break;
    case RF_GGUF_INT16: fprintf(f, "%d", ((const int16_t *)data)[i]); break;
    case RF_GGUF_UINT32: fprintf(f, "%" PRIu32, ((const uint32_t *)data)[i]); break;
    case RF_GGUF_INT32: fprintf(f, "%" PRId32, ((const int32_t *)data)[i]); break;
    case RF_GGUF_UINT64: fprintf(f, "%" PRIu64, ((const uint64_t *)data)[i]); break;
    case RF_GGUF_INT64: fprintf(f, "%" PRId64, ((const int64_t *)data)[i]); break;
    case RF_GGUF_FLOAT32: fprintf(f, "%.9g", ((const float *)data)[i]); break;
    case RF_GGUF_FLOAT64: fprintf(f, "%.17g", ((const double *)data)[i]); break;
    case RF_GGUF_BOOL: fputs(((const uint8_t *)data)[i] ? "true" : "false", f); break;
    default: fputc('?', f); break;
    }
}

static const char *plural(rf_gguf_type t) {
    switch (t) {
    case RF_GGUF_STRING: return "strings";
    case RF_GGUF_ARRAY: return "arrays";
    default: return rf_gguf_type_name(t);
    }
}

static void print_value(FILE *f, const rf_gguf_value *v, bool full) {
    switch (v->type) {
    case RF_GGUF_STRING: print_str(f, v->v.str.ptr, v->v.str.len, full ? 0 : ABBREV_CHARS); break;
    case RF_GGUF_ARRAY: {
        rf_gguf_type et = v->v.arr.elem_type;
        uint64_t n = v->v.arr.n;
        uint64_t show = full ? n : et == RF_GGUF_STRING || et == RF_GGUF_ARRAY ? ABBREV_STRINGS
                                                                              : ABBREV_NUMBERS;
        if (show > n) show = n;
        fprintf(f, "[%" PRIu64 " %s:", n, plural(et));
        for (uint64_t i = 0; i < show; i++) {
            fputs(i ? ", " : " ", f);
            if (et == RF_GGUF_STRING) {
                const rf_gguf_str *s = &((const rf_gguf_str *)v->v.arr.data)[i];
                print_str(f, s->ptr, s->len, full ? 0 : ABBREV_CHARS);
            } else if (et == RF_GGUF_ARRAY) {
                print_value(f, &((const rf_gguf_value *)v->v.arr.data)[i], full);
            } else {
                print_scalar_at(f, et, v->v.arr.data, i);
            }
        }
        fputs(show < n ? ", ... ]" : " ]", f);
        break;
    }
    case RF_GGUF_FLOAT32: fprintf(f, "%.9g", v->v.f64); break;
    case RF_GGUF_FLOAT64: fprintf(f, "%.17g", v->v.f64); break;
    case RF_GGUF_BOOL: fputs(v->v.b ? "true" : "false", f); break;
    case RF_GGUF_INT8: case RF_GGUF_INT16: case RF_GGUF_INT32: case RF_GGUF_INT64:
        fprintf(f, "%" PRId64, v->v.i64);
        break;
    default: fprintf(f, "%" PRIu64, v->v.u64); break;
    }
}

static void fmt_bytes(char *buf, size_t n, uint64_t b) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)b;
    int i = 0;
    while (x >= 1024 && i < 4) { x /= 1024; i++; }
    if (i == 0) snprintf(buf, n, "%" PRIu64 " B", b);
    else snprintf(buf, n, "%.2f %s", x, u[i]);
}

/* ---- architecture summary --------------------------------------------------------------- */

typedef struct summary {
    const char *arch;
    int64_t layers, dim, heads, kv_heads, ffn, vocab, context; /* -1 = absent */
} summary;

static int64_t arch_u32(const rf_gguf *g, const char *arch, const char *suffix) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    if (rf_gguf_get_u32(g, key, &v) == RF_OK) return v;
    /* some files store per-layer arrays (e.g. head counts): show the first */
    uint64_t n;
    const void *d;
    if (rf_gguf_get_arr(g, key, RF_GGUF_UINT32, &n, &d) == RF_OK && n) return ((const uint32_t *)d)[0];
    if (rf_gguf_get_arr(g, key, RF_GGUF_INT32, &n, &d) == RF_OK && n) return ((const int32_t *)d)[0];
    return -1;
}

static void get_summary(const rf_gguf *g, summary *s) {
    s->arch = NULL;
    if (rf_gguf_get_str(g, "general.architecture", &s->arch) != RF_OK) s->arch = NULL;
    const char *a = s->arch ? s->arch : "?";
    s->layers = arch_u32(g, a, "block_count");
    s->dim = arch_u32(g, a, "embedding_length");
    s->heads = arch_u32(g, a, "attention.head_count");
    s->kv_heads = arch_u32(g, a, "attention.head_count_kv");
    s->ffn = arch_u32(g, a, "feed_forward_length");
    s->context = arch_u32(g, a, "context_length");
    s->vocab = arch_u32(g, a, "vocab_size");
    uint64_t n;
    if (s->vocab < 0 && rf_gguf_get_arr(g, "tokenizer.ggml.tokens", -1, &n, NULL) == RF_OK)
        s->vocab = (int64_t)n;
    rf_clear_error();
}

static void print_field(FILE *f, const char *label, int64_t v, bool *first) {
    fprintf(f, "%s%s ", *first ? "" : ", ", label);
    if (v >= 0) fprintf(f, "%" PRId64, v);
    else fputc('?', f);
    *first = false;
}

/* ---- totals ----------------------------------------------------------------------------- */

typedef struct type_total {
    int64_t tensors;
    uint64_t params, bytes;
} type_total;

typedef struct totals {
    uint64_t params, bytes;
    type_total by_type[RF_TYPE_COUNT + 64];
} totals;

static uint64_t n_elements(const rf_gguf_tensor *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= (uint64_t)t->ne[d]; /* validated: < 2^63 */
    return n;
}

static void get_totals(const rf_gguf *g, totals *tt) {
    memset(tt, 0, sizeof *tt);
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        uint64_t n = n_elements(t);
        tt->params += n;
        tt->bytes += t->n_bytes;
        if ((unsigned)t->type < sizeof tt->by_type / sizeof tt->by_type[0]) {
            type_total *x = &tt->by_type[t->type];
            x->tensors++;
            x->params += n;
            x->bytes += t->n_bytes;
        }
    }
}

static void print_text(const char *path, const rf_gguf *g, bool full) {
    FILE *f = stdout;
    char b1[32], b2[32];
    fmt_bytes(b1, sizeof b1, rf_gguf_file_size(g));
    printf("file:      %s (%" PRIu64 " bytes, %s)\n", path, rf_gguf_file_size(g), b1);
    printf("gguf:      version %" PRIu32 ", alignment %" PRIu64 ", %" PRId64 " metadata keys, %" PRId64
           " tensors, data at byte offset %" PRIu64 "\n",
           rf_gguf_version(g), rf_gguf_alignment(g), rf_gguf_n_kv(g), rf_gguf_n_tensors(g),
           rf_gguf_data_offset(g));
    summary s;
    get_summary(g, &s);
    printf("summary:   %s: ", s.arch ? s.arch : "?");
    bool first = true;
    print_field(f, "layers", s.layers, &first);
    print_field(f, "dim", s.dim, &first);
    print_field(f, "heads", s.heads, &first);
    print_field(f, "kv heads", s.kv_heads, &first);
    print_field(f, "ffn", s.ffn, &first);
    print_field(f, "vocab", s.vocab, &first);
    print_field(f, "context", s.context, &first);
    fputc('\n', f);

    printf("\nmetadata (%" PRId64 "):\n", rf_gguf_n_kv(g));
    size_t kw = 0;
    for (int64_t i = 0; i < rf_gguf_n_kv(g); i++) {
        size_t l = strlen(rf_gguf_kv_key(g, i));
        if (l > kw) kw = l;
    }
    if (kw > 48) kw = 48;
    for (int64_t i = 0; i < rf_gguf_n_kv(g); i++) {
        const rf_gguf_value *v = rf_gguf_kv_value(g, i);
        char ty[32];
        if (v->type == RF_GGUF_ARRAY)
            snprintf(ty, sizeof ty, "%s[]", rf_gguf_type_name(v->v.arr.elem_type));
        else
            snprintf(ty, sizeof ty, "%s", rf_gguf_type_name(v->type));
        printf("  %-*s %-9s ", (int)kw, rf_gguf_kv_key(g, i), ty);
        print_value(f, v, full);
        fputc('\n', f);
    }

    printf("\ntensors (%" PRId64 "):\n", rf_gguf_n_tensors(g));
    size_t nw = 4;
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        size_t l = strlen(rf_gguf_tensor_at(g, i)->name);
        if (l > nw) nw = l;
    }
    printf("  %-*s %-8s %-26s %14s %14s\n", (int)nw, "name", "type", "shape", "bytes", "offset");
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        char shape[128];
        int p = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++)
            p += snprintf(shape + p, sizeof shape - p, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        snprintf(shape + p, sizeof shape - p, "]");
        printf("  %-*s %-8s %-26s %14" PRIu64 " %14" PRIu64 "\n", (int)nw, t->name,
               rf_type_name(t->type), shape, t->n_bytes, t->offset);
    }

    totals tt;
    get_totals(g, &tt);
    fmt_bytes(b1, sizeof b1, tt.bytes);
    printf("\ntotals:\n  parameters:      %" PRIu64 " (%.2fM)\n  tensor bytes:    %" PRIu64
           " (%s)\n",
           tt.params, (double)tt.params / 1e6, tt.bytes, b1);
    if (tt.params)
        printf("  bits per weight: %.4f\n", 8.0 * (double)tt.bytes / (double)tt.params);
    for (size_t t = 0; t < sizeof tt.by_type / sizeof tt.by_type[0]; t++) {
        const type_total *x = &tt.by_type[t];
        if (!x->tensors) continue;
        fmt_bytes(b2, sizeof b2, x->bytes);
        printf("  %-8s %5" PRId64 " tensors %14" PRIu64 " params %14" PRIu64 " bytes (%s), %.4f bpw\n",
               rf_type_name((int)t), x->tensors, x->params, x->bytes, b2,
               8.0 * (double)x->bytes / (double)x->params);
    }
}

/* ---- JSON ------------------------------------------------------------------------------- */

/* A JSON string from bytes that may hold invalid UTF-8 or NULs: invalid bytes become U+FFFD. */
static json_t *jstr(const char *s, uint64_t len) {
    json_t *j = json_stringn(s, (size_t)len);
    if (j) return j;
    char *o = malloc((size_t)len * 3 + 1);
    if (!o) return json_null();
    size_t n = 0;
    for (uint64_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = k > 0 && i + k <= len;
        uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
        for (int q = 1; ok && q < k; q++) {
            unsigned char cc = (unsigned char)s[i + q];
            ok = (cc >> 6) == 2;
            cp = (cp << 6) | (cc & 0x3f);
        }
        /* no overlong forms, surrogates or code points past U+10FFFF */
        if (ok && ((k == 2 && cp < 0x80) || (k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
                   (k == 4 && (cp < 0x10000 || cp > 0x10FFFF))))
            ok = false;
        if (ok) {
            memcpy(o + n, s + i, (size_t)k);
            n += (size_t)k;
            i += (uint64_t)k;
        } else {
            memcpy(o + n, "\xef\xbf\xbd", 3);
            n += 3;
            i++;
        }
    }
    j = json_stringn(o, n);
    free(o);
    return j ? j : json_null();
}

static json_t *jreal(double d) {
    if (isnan(d)) return json_string("nan");
    if (isinf(d)) return json_string(d > 0 ? "inf" : "-inf");
    return json_real(d);
}

static json_t *ju64(uint64_t u) {
    if (u <= (uint64_t)INT64_MAX) return json_integer((json_int_t)u);
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, u);
    return json_string(b); /* beyond JSON integers that parsers keep exact */
}

static json_t *jscalar_at(rf_gguf_type t, const void *data, uint64_t i) {
    switch (t) {
    case RF_GGUF_UINT8: return json_integer(((const uint8_t *)data)[i]);
    case RF_GGUF_INT8: return json_integer(((const int8_t *)data)[i]);
    case RF_GGUF_UINT16: return json_integer(((const uint16_t *)data)[i]);
    case RF_GGUF_INT16: return json_integer(((const int16_t *)data)[i]);
    case RF_GGUF_UINT32: return json_integer(((const uint32_t *)data)[i]);
    case RF_GGUF_INT32: return json_integer(((const int32_t *)data)[i]);
    case RF_GGUF_UINT64: return ju64(((const uint64_t *)data)[i]);
    case RF_GGUF_INT64: return json_integer(((const int64_t *)data)[i]);
    case RF_GGUF_FLOAT32: return jreal(((const float *)data)[i]);
    case RF_GGUF_FLOAT64: return jreal(((const double *)data)[i]);
    case RF_GGUF_BOOL: return json_boolean(((const uint8_t *)data)[i]);
    default: return json_null();
    }
}

/* A value as JSON. Arrays: {"elem_type", "n", "items": [...], "truncated"?}. */
static json_t *jvalue(const rf_gguf_value *v, bool full) {
    switch (v->type) {
    case RF_GGUF_STRING:
        if (!full && v->v.str.len > 4 * ABBREV_CHARS) return jstr(v->v.str.ptr, 4 * ABBREV_CHARS);
        return jstr(v->v.str.ptr, v->v.str.len);
    case RF_GGUF_ARRAY: {
        rf_gguf_type et = v->v.arr.elem_type;
        uint64_t n = v->v.arr.n;
        uint64_t show = full ? n : et == RF_GGUF_STRING || et == RF_GGUF_ARRAY ? ABBREV_STRINGS
                                                                              : ABBREV_NUMBERS;
        if (show > n) show = n;
        json_t *items = json_array();
        for (uint64_t i = 0; i < show; i++) {
            json_t *e;
            if (et == RF_GGUF_STRING) {
                const rf_gguf_str *s = &((const rf_gguf_str *)v->v.arr.data)[i];
                e = jstr(s->ptr, s->len);
            } else if (et == RF_GGUF_ARRAY) {
                e = jvalue(&((const rf_gguf_value *)v->v.arr.data)[i], full);
            } else {
                e = jscalar_at(et, v->v.arr.data, i);
            }
            json_array_append_new(items, e);
        }
        json_t *o = json_pack("{s:s, s:o, s:o}", "elem_type", rf_gguf_type_name(et), "n", ju64(n),
                              "items", items);
        if (show < n) json_object_set_new(o, "truncated", json_true());
        return o;
    }
    case RF_GGUF_FLOAT32: case RF_GGUF_FLOAT64: return jreal(v->v.f64);
    case RF_GGUF_BOOL: return json_boolean(v->v.b);
    case RF_GGUF_INT8: case RF_GGUF_INT16: case RF_GGUF_INT32: case RF_GGUF_INT64:
        return json_integer(v->v.i64);
    default: return ju64(v->v.u64);
    }
}

static json_t *jopt(int64_t v) { return v >= 0 ? json_integer(v) : json_null(); }

static int print_json(const char *path, const rf_gguf *g, bool full) {
    json_t *root = json_object();
    json_object_set_new(root, "file", jstr(path, strlen(path)));
    json_object_set_new(root, "file_size", ju64(rf_gguf_file_size(g)));
    json_object_set_new(root, "version", json_integer(rf_gguf_version(g)));
    json_object_set_new(root, "alignment", ju64(rf_gguf_alignment(g)));
    json_object_set_new(root, "data_offset", ju64(rf_gguf_data_offset(g)));
    summary s;
    get_summary(g, &s);
    json_object_set_new(root, "summary",
                        json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "arch",
                                  s.arch ? jstr(s.arch, strlen(s.arch)) : json_null(), "layers",
                                  jopt(s.layers), "dim", jopt(s.dim), "heads", jopt(s.heads),
                                  "kv_heads", jopt(s.kv_heads), "ffn", jopt(s.ffn), "vocab",
                                  jopt(s.vocab), "context", jopt(s.context)));
    json_t *md = json_array();
    for (int64_t i = 0; i < rf_gguf_n_kv(g); i++) {
        const rf_gguf_value *v = rf_gguf_kv_value(g, i);
        const char *k = rf_gguf_kv_key(g, i);
        json_array_append_new(md, json_pack("{s:o, s:s, s:o}", "key", jstr(k, strlen(k)), "type",
                                            rf_gguf_type_name(v->type), "value", jvalue(v, full)));
    }
    json_object_set_new(root, "metadata", md);
    json_t *ts = json_array();
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->ne[d]));
        json_array_append_new(ts, json_pack("{s:o, s:s, s:i, s:o, s:o, s:o, s:o}", "name",
                                            jstr(t->name, strlen(t->name)), "type",
                                            rf_type_name(t->type), "type_id", (int)t->type,
                                            "shape", shape, "n_elements", ju64(n_elements(t)),
                                            "bytes", ju64(t->n_bytes), "offset", ju64(t->offset)));
    }
    json_object_set_new(root, "tensors", ts);
    totals tt;
    get_totals(g, &tt);
    json_t *by = json_object();
    for (size_t t = 0; t < sizeof tt.by_type / sizeof tt.by_type[0]; t++) {
        const type_total *x = &tt.by_type[t];
        if (!x->tensors) continue;
        json_object_set_new(by, rf_type_name((int)t),
                            json_pack("{s:I, s:o, s:o, s:o}", "tensors", (json_int_t)x->tensors,
                                      "parameters", ju64(x->params), "bytes", ju64(x->bytes),
                                      "bits_per_weight",
                                      jreal(8.0 * (double)x->bytes / (double)x->params)));
    }
    json_object_set_new(root, "totals",
                        json_pack("{s:o, s:o, s:o, s:o}", "parameters", ju64(tt.params), "bytes",
                                  ju64(tt.bytes), "bits_per_weight",
                                  tt.params ? jreal(8.0 * (double)tt.bytes / (double)tt.params)
                                            : json_null(),
                                  "by_type", by));
    int rc = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    fputc('\n', stdout);
    json_decref(root);
    return rc ? rf_cli_fail(1, "inspect: cannot write JSON") : 0;
}

int rf_cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool full = false, json = false;
    for (int i = 1; i < argc; i++) {
        if (rf_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--full")) {
            full = true;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            usage(stderr);
            return rf_cli_fail(2, "inspect: unknown option '%s'", argv[i]);
        } else if (path) {
            return rf_cli_fail(2, "inspect: one file at a time ('%s' and '%s')", path, argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return rf_cli_fail(2, "inspect: no GGUF file given");
    }
    rf_gguf *g;
    if (rf_gguf_open(path, &g)) return rf_cli_fail(1, "%s", rf_last_error());
    int rc = 0;
    if (json) rc = print_json(path, g, full);
    else print_text(path, g, full);
    rf_gguf_close(g);
    if (fflush(stdout)) return rf_cli_fail(1, "inspect: cannot write output");
    return rc;
}
