/* test_util.h — shared helpers for the cmocka tests: seeded randomness (fresh each run, seed
 * printed so a failure can be replayed), relative L2 error, poison values, data-file paths. */
#ifndef RF_TEST_UTIL_H
#define RF_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rocmforge.h"

/* Exit code CTest treats as "skipped" (SKIP_RETURN_CODE). */
#define RF_TEST_SKIP 77

/* Seed for this run: $RF_TEST_SEED if set, else from the clock; printed once. */
uint64_t rf_test_seed(void);
/* xorshift-based generator, deterministic for a given state. */
typedef struct rf_rng { uint64_t s; } rf_rng;
void rf_rng_init(rf_rng *r, uint64_t seed);
uint64_t rf_rng_u64(rf_rng *r);
float rf_rng_uniform(rf_rng *r);            /* [0, 1) */
float rf_rng_normal(rf_rng *r);             /* N(0, 1) */
void rf_rng_fill_normal(rf_rng *r, float *x, size_t n, float scale);

/* ||a - b|| / ||b|| in double; returns +inf if either holds a NaN or inf where the other does
 * not, so NaN never passes. ||b|| == 0 gives ||a||. */
double rf_rel_l2(const float *a, const float *b, size_t n);
double rf_max_abs_diff(const float *a, const float *b, size_t n);

/* n values of N(0, scale^2) from r in a malloc'd buffer (free it). */
float *rf_test_randn(rf_rng *r, size_t n, float scale);
/* Prints `what` with got's relative L2 error against want; fails the test unless it is below tol. */
void rf_test_check_l2(const char *what, const float *got, const float *want, size_t n, double tol);

/* Fill with a NaN bit pattern so unwritten outputs show. */
void rf_poison_f32(float *x, size_t n);

/* Path of a file under tests/data (static buffer). */
const char *rf_test_data(const char *rel);

/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL on failure. */
char *rf_test_read_file(const char *path, size_t *size);

/* A fuzz corpus replayed file by file (the corpus tests): rf_test_corpus_open(c, "corpus") opens
 * tests/fuzz/corpus (fails the test when it cannot); each rf_test_corpus_next gives a malloc'd copy
 * of exactly the next file's size (an over-read shows under ASan; free it), its path in c->path;
 * NULL at the end, when the directory is closed. */
typedef struct rf_test_corpus {
    void *dir;
    char root[4096], path[8192];
} rf_test_corpus;
void rf_test_corpus_open(rf_test_corpus *c, const char *name);
uint8_t *rf_test_corpus_next(rf_test_corpus *c, size_t *size);

#endif
