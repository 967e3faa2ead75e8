/* gpu_moe_common.h — helpers shared by the GPU MoE tests (test_gpu_moe, test_gpu_moe_fused,
 * test_gpu_moe_ggemv): the GPU backend they drive, tensor views of device buffers, random expert
 * ids, the int8 rounding bound of the down input, a clock. */
#ifndef RF_GPU_MOE_COMMON_H
#define RF_GPU_MOE_COMMON_H

#include "gpu_test_common.h"

#include <time.h>

#include "backend/backend.h"
#include "backend/ref/ref_ops.h"
#include "core/knobs.h"
#include "rocmforge/quant.h"

static rf_backend *g_be;

/* Skip (77) without a GPU; else the GPU backend in g_be, with g_ctx its context (the helpers and
 * the ops on one stream). 1 when the backend cannot be made. */
static inline int moe_backend_open(const char *test) {
    gpu_test_init_or_skip(test);
    rf_gpu_destroy(g_ctx);
    if (rf_backend_gpu_new(0, &g_be)) {
        fprintf(stderr, "%s: GPU backend: %s\n", test, rf_last_error());
        return 1;
    }
    g_ctx = rf_backend_gpu_ctx(g_be); /* the helpers and the ops on one stream */
    return 0;
}

static inline rf_tensor dt(rf_type t, int64_t n, int64_t rows, void *d) {
    rf_tensor v;
    memset(&v, 0, sizeof v);
    v.type = t;
    v.ne[0] = n;
    v.ne[1] = rows;
    size_t rb = 0;
    if (t == RF_TYPE_F32 || t == RF_TYPE_I32) rb = (size_t)n * 4;
    else if (t == RF_TYPE_F16 || t == RF_TYPE_BF16) rb = (size_t)n * 2;
    else assert_int_equal(rf_row_size(t, n, &rb), RF_OK);
    v.nb1 = rb;
    v.data = d;
    return v;
}

/* random distinct-per-token expert ids [n, k] */
static inline void rand_ids(rf_rng *r, int32_t *ids, int64_t n, int64_t k, int64_t ne) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)(rf_rng_u64(r) % (uint64_t)ne);
                dup = false;
                for (int64_t i = 0; i < j; i++) dup |= ids[t * k + i] == e;
            } while (dup);
            ids[t * k + j] = e;
        }
}

/* The down sum's rel. L2 bound for int8-x products: the error is h's rounding to int8 (both sides
 * read the twin's h), element error uniform in +-d/2 with d = max|h| / 127 of its 32-block, so
 * variance d^2 / 12; through random expert rows and the router's weights w the output's expected
 * rel. L2 is sqrt(sum w^2 sum_blocks 32 d^2 / 12 / sum w^2 |h|^2) (biases only add to |o|); the
 * bound is 3x that. h is a GLU output, heavier-tailed than a Gaussian (max / RMS of a block ~4-5
 * where a Gaussian's is ~2.3), so this is ~1%, not the 0.5% of a product of Gaussian x. */
static inline double down_bound(const float *h, const float *wts, int64_t nk, int64_t ff) {
    double num = 0, den = 0;
    for (int64_t s = 0; s < nk; s++) {
        const double w2 = (double)wts[s] * wts[s];
        for (int64_t b = 0; b + 32 <= ff; b += 32) {
            double amax = 0;
            for (int i = 0; i < 32; i++) {
                const double v = h[s * ff + b + i];
                amax = fmax(amax, fabs(v)), den += w2 * v * v;
            }
            num += w2 * 32.0 * (amax / 127.0) * (amax / 127.0) / 12.0;
        }
    }
    return den > 0 ? 3.0 * sqrt(num / den) : 1e-2;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
