/* op_test_common.h — what the CPU backend's op tests (test_engine_backend.c, test_cpu_moe.c)
 * share: the seeded generator and its setup, random f32 inputs, host f32 tensors, and the rel. L2
 * check that prints each case. */
#ifndef RF_OP_TEST_COMMON_H
#define RF_OP_TEST_COMMON_H

#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"

static rf_rng g_rng;

static int setup(void **state) {
    (void)state;
    rf_rng_init(&g_rng, rf_test_seed());
    return 0;
}

static inline float *rnd(size_t n, float scale) {
    float *x = malloc(n * sizeof(float));
    rf_rng_fill_normal(&g_rng, x, n, scale);
    return x;
}

static inline rf_tensor host_f32(float *p, int64_t n, int64_t rows) {
    rf_tensor t = {RF_TYPE_F32, {n, rows}, (size_t)n * 4, p, false};
    return t;
}

static inline void check(const char *what, const float *got, const float *want, size_t n, double tol) {
    double e = rf_rel_l2(got, want, n);
    printf("  %-44s rel_l2 %.2e (tol %.0e)\n", what, e, tol);
    if (!(e < tol)) fail_msg("%s: rel_l2 %g >= %g", what, e, tol);
}

#endif
