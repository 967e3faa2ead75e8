/* test_quant_golden.c — our dequantizers and quantizers against goldens made by an independent
 * oracle: gguf-py's numpy code (tests/data/quant/NOTE.md, scripts/gen-quant-goldens.py) for
 * dequantization and the simple quantizers, and ggml's C reference quantizers for the K-quants,
 * Q8_1 and Q8_K, which gguf-py lacks (tests/data/quant/ggml/NOTE.md).
 * Tolerance: bit-exact. gguf-py evaluates the same per-element expression as ggml (e.g.
 * (d*sc)*q - (dmin*m)) in f32 without FMA, and so do we, so there is no reordering to excuse;
 * NaN never appears in the goldens and never passes. */
#include "test_util.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct golden {
    uint32_t kind, type, n_blocks, block_size, type_size;
    const uint8_t *blocks; /* n_blocks * type_size */
    const float *values;   /* n_blocks * block_size (aligned copy) */
    char *raw;
    float *vals_copy;
} golden;

static int load_golden(const char *path, golden *g) {
    size_t size;
    memset(g, 0, sizeof *g);
    g->raw = rf_test_read_file(path, &size);
    if (!g->raw || size < 28 || memcmp(g->raw, "RFQG", 4) != 0) return -1;
    uint32_t h[6];
    memcpy(h, g->raw + 4, sizeof h);
    if (h[0] != 1) return -1;
    g->kind = h[1], g->type = h[2], g->n_blocks = h[3], g->block_size = h[4], g->type_size = h[5];
    size_t nb = (size_t)g->n_blocks * g->type_size, nv = (size_t)g->n_blocks * g->block_size;
    if (size != 28 + nb + 4 * nv) return -1;
    g->vals_copy = malloc(4 * nv);
    if (g->kind == 0) {
        g->blocks = (const uint8_t *)g->raw + 28;
        memcpy(g->vals_copy, g->raw + 28 + nb, 4 * nv);
    } else {
        memcpy(g->vals_copy, g->raw + 28, 4 * nv);
        g->blocks = (const uint8_t *)g->raw + 28 + 4 * nv;
    }
    g->values = g->vals_copy;
    return 0;
}

static void free_golden(golden *g) {
    free(g->raw);
    free(g->vals_copy);
}

/* Lists the .bin files of tests/data/quant (gguf-py goldens) and tests/data/quant/ggml (goldens
 * from ggml's reference quantizers, see the NOTE.md there) as paths relative to tests/data/quant. */
static int list_goldens(char names[][256], int max) {
    static const char *dirs[] = {"", "ggml/"};
    int n = 0;
    for (int k = 0; k < 2; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "quant/%s", dirs[k]);
        DIR *d = opendir(rf_test_data(rel));
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d)) && n < max) {
            size_t l = strlen(e->d_name);
            if (l > 4 && l < 200 && strcmp(e->d_name + l - 4, ".bin") == 0)
                snprintf(names[n++], 256, "%s%s", dirs[k], e->d_name);
        }
        closedir(d);
    }
    return n;
}

static void test_dequant_goldens(void **state) {
    (void)state;
    char names[64][256];
    int n = list_goldens(names, 64), checked = 0;
    for (int f = 0; f < n; f++) {
        char rel[300];
        snprintf(rel, sizeof rel, "quant/%.200s", names[f]);
        golden g;
        assert_int_equal(load_golden(rf_test_data(rel), &g), 0);
        if (g.kind != 0) { free_golden(&g); continue; }
        const rf_type_traits *t = rf_type_info((int)g.type);
        assert_non_null(t);
        assert_int_equal(t->block_size, g.block_size);
        assert_int_equal(t->type_size, g.type_size);
        int64_t nv = (int64_t)g.n_blocks * g.block_size;
        float *out = malloc(sizeof(float) * (size_t)nv);
        rf_poison_f32(out, (size_t)nv);
        rf_status st = rf_dequantize_row((rf_type)g.type, g.blocks, out, nv);
        if (st) fail_msg("%s: %s", names[f], rf_last_error());
        int bad = 0;
        for (int64_t i = 0; i < nv; i++) {
            uint32_t a, b;
            memcpy(&a, &out[i], 4);
            memcpy(&b, &g.values[i], 4);
            if (a != b || isnan(out[i])) {
                if (bad++ < 5)
                    print_error("%s: element %lld (block %lld): ours %.9g (0x%08x) gguf %.9g (0x%08x)\n", names[f],
                                (long long)i, (long long)(i / g.block_size), out[i], a, g.values[i], b);
            }
        }
        if (bad) fail_msg("%s: %d of %lld values differ", names[f], bad, (long long)nv);
        print_message("dequant %-8s %4u blocks bit-exact\n", t->name, g.n_blocks);
        free(out);
        free_golden(&g);
        checked++;
    }
    /* every type gguf-py can dequantize that we claim to support has a golden */
    assert_true(checked >= 20);
}

static void test_quant_goldens(void **state) {
    (void)state;
    char names[64][256];
    int n = list_goldens(names, 64), checked = 0;
    for (int f = 0; f < n; f++) {
        char rel[300];
        snprintf(rel, sizeof rel, "quant/%.200s", names[f]);
        golden g;
        assert_int_equal(load_golden(rf_test_data(rel), &g), 0);
        if (g.kind != 1) { free_golden(&g); continue; }
        const rf_type_traits *t = rf_type_info((int)g.type);
        assert_non_null(t);
        int64_t nv = (int64_t)g.n_blocks * g.block_size;
        size_t nbytes = (size_t)g.n_blocks * g.type_size;
        uint8_t *out = malloc(nbytes);
        memset(out, 0xA5, nbytes);
        rf_status st = rf_quantize_row((rf_type)g.type, g.values, out, nv);
        if (st) fail_msg("%s: %s", names[f], rf_last_error());
        int bad = 0;
        for (size_t i = 0; i < nbytes; i++) {
            if (out[i] != g.blocks[i] && bad++ < 5)
                print_error("%s: byte %zu (block %zu, offset %zu): ours 0x%02x gguf 0x%02x\n", names[f], i,
                            i / g.type_size, i % g.type_size, out[i], g.blocks[i]);
        }
        if (bad) fail_msg("%s: %d of %zu bytes differ", names[f], bad, nbytes);
        print_message("quant   %-8s %4u blocks byte-identical to %s\n", t->name, g.n_blocks,
                      strncmp(names[f], "ggml/", 5) == 0 ? "ggml quantize_row_*_ref" : "gguf.quants.quantize");
        free(out);
        free_golden(&g);
        checked++;
    }
    assert_true(checked >= 22);
}

/* --check-raw <dir>: compares tensors dumped by tests/cli/quant_models_dump.py (real model
 * weights, gguf-py dequantization) with ours, bit for bit, and checks a matvec with the table's
 * vec_dot against double precision (rel. L2 < 1.5e-2). Returns 0 when all agree. */
static int check_raw(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/list.txt", dir);
    FILE *l = fopen(path, "r");
    if (!l) { fprintf(stderr, "error: cannot open %s\n", path); return 1; }
    int type, k, failures = 0, count = 0;
    long n, rows;
    char name[512];
    while (fscanf(l, "%d %ld %ld %d %511s", &type, &n, &rows, &k, name) == 5) {
        size_t nraw, nf, rb, xb;
        snprintf(path, sizeof path, "%s/%d.raw", dir, k);
        uint8_t *raw = (uint8_t *)rf_test_read_file(path, &nraw);
        snprintf(path, sizeof path, "%s/%d.f32", dir, k);
        float *ref = (float *)rf_test_read_file(path, &nf);
        const rf_type_traits *tr = rf_type_info(type);
        if (!raw || !ref || !tr || rf_row_size((rf_type)type, n, &rb) || nraw != rb * rows || nf != 4 * (size_t)(n * rows)) {
            fprintf(stderr, "FAIL %s: bad dump (type %d, n %ld, rows %ld)\n", name, type, n, rows);
            failures++, free(raw), free(ref);
            continue;
        }
        float *out = malloc(nf);
        rf_poison_f32(out, (size_t)(n * rows));
        long bad = 0;
        for (long r = 0; r < rows; r++)
            if (rf_dequantize_row((rf_type)type, raw + r * rb, out + r * n, n)) bad = n * rows;
        for (long i = 0; i < n * rows; i++) bad += memcmp(&out[i], &ref[i], 4) != 0 || isnan(out[i]);
        /* matvec: x ~ U(-1, 1) fixed, weights as stored */
        float *x = malloc(sizeof(float) * n);
        for (long i = 0; i < n; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
        rf_row_size(tr->vec_dot_type, n, &xb);
        void *xq = malloc(xb);
        rf_quantize_row(tr->vec_dot_type, x, xq, n);
        double e2 = 0, r2 = 0;
        for (long r = 0; r < rows; r++) {
            float y = NAN;
            tr->vec_dot(n, &y, raw + r * rb, xq);
            double yr = 0;
            for (long i = 0; i < n; i++) yr += (double)ref[r * n + i] * x[i];
            e2 += (y - yr) * (y - yr), r2 += yr * yr;
        }
        double rel = sqrt(e2 / r2);
        bool ok = bad == 0 && rel < 1.5e-2;
        printf("%s %-48s %-5s %4ld x %-5ld dequant mismatches %ld, vec_dot matvec rel.L2 %.2e\n", ok ? "ok  " : "FAIL",
               name, tr->name, rows, n, bad, rel);
        failures += !ok;
        count++;
        free(raw), free(ref), free(out), free(x), free(xq);
    }
    fclose(l);
    if (count == 0) { fprintf(stderr, "error: no tensors listed\n"); return 1; }
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--check-raw") == 0) return check_raw(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_goldens),
        cmocka_unit_test(test_quant_goldens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
