/* test_util.c — see test_util.h. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dirent.h>

uint64_t rf_test_seed(void) {
    static uint64_t seed;
    static int done;
    if (!done) {
        const char *s = getenv("RF_TEST_SEED");
        if (s && *s) seed = strtoull(s, NULL, 0);
        else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
        }
        fprintf(stderr, "RF_TEST_SEED=%llu\n", (unsigned long long)seed);
        done = 1;
    }
    return seed;
}

void rf_rng_init(rf_rng *r, uint64_t seed) {
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    if (!r->s) r->s = 1;
}

uint64_t rf_rng_u64(rf_rng *r) {
    /* splitmix64: good enough statistics, trivially reproducible */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float rf_rng_uniform(rf_rng *r) { return (float)((rf_rng_u64(r) >> 40) * (1.0 / 16777216.0)); }

float rf_rng_normal(rf_rng *r) {
    double u1 = ((rf_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (rf_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void rf_rng_fill_normal(rf_rng *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * rf_rng_normal(r);
}

float *rf_test_randn(rf_rng *r, size_t n, float scale) {
    float *x = malloc(n * sizeof(float));
    if (!x) fail_msg("out of memory (%zu floats)", n);
    rf_rng_fill_normal(r, x, n, scale);
    return x;
}

void rf_test_check_l2(const char *what, const float *got, const float *want, size_t n, double tol) {
    double e = rf_rel_l2(got, want, n);
    printf("  %-44s rel_l2 %.2e (tol %.2e)\n", what, e, tol);
    if (!(e < tol)) fail_msg("%s: rel_l2 %g >= %g", what, e, tol);
}

double rf_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) {
            /* identical infinities are fine; NaN never is */
            if (isnan(a[i]) || isnan(b[i]) || a[i] != b[i]) return INFINITY;
            continue;
        }
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

double rf_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m) m = d;
    }
    return m;
}

void rf_poison_f32(float *x, size_t n) {
    uint32_t bits = 0x7FC0DEADu;
    for (size_t i = 0; i < n; i++) memcpy(&x[i], &bits, 4);
}

const char *rf_test_data(const char *rel) {
    static _Thread_local char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", RF_TEST_DATA_DIR, rel);
    return buf;
}

char *rf_test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = 0;
    fclose(f);
    if (size) *size = (size_t)n;
    return buf;
}

void rf_test_corpus_open(rf_test_corpus *c, const char *name) {
    snprintf(c->root, sizeof c->root, "%s/tests/fuzz/%s", RF_SOURCE_DIR, name);
    c->dir = opendir(c->root);
    if (!c->dir) fail_msg("cannot open the corpus %s", c->root);
}

uint8_t *rf_test_corpus_next(rf_test_corpus *c, size_t *size) {
    struct dirent *de;
    while ((de = readdir(c->dir))) {
        if (de->d_name[0] == '.') continue;
        snprintf(c->path, sizeof c->path, "%s/%s", c->root, de->d_name);
        char *text = rf_test_read_file(c->path, size);
        if (!text) fail_msg("cannot read %s", c->path);
        uint8_t *copy = malloc(*size ? *size : 1); /* exact size: an over-read shows under ASan */
        if (!copy) fail_msg("out of memory");
        memcpy(copy, text, *size);
        free(text);
        return copy;
    }
    closedir(c->dir);
    c->dir = NULL;
    return NULL;
}
