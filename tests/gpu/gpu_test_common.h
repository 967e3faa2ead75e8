/* gpu_test_common.h — helpers shared by the GPU tests: skip without a device (exit 77, naming
 * the test), a per-process context, device buffers filled from host arrays, random quantized
 * blocks (random bytes with sane scale fields, so every bit pattern of the quants is exercised). */
#ifndef RF_GPU_TEST_COMMON_H
#define RF_GPU_TEST_COMMON_H

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gpu/gpu.h"

static rf_gpu_ctx *g_ctx;

/* Exit 77 (skipped) when no GPU is usable; else open device 0 for the whole test program.
 * stdout is line-buffered from here: under a sanitizer's timeout (a pipe or a file, not a
 * terminal) the cases finished so far still reach the log when the run is killed.
 * RF_TEST_FILTER=PATTERN (cmocka's, * and ?): only the cases it matches, e.g. one case under a
 * sanitizer. */
static inline void gpu_test_init_or_skip(const char *test) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *filter = getenv("RF_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    if (rf_gpu_device_count() <= 0) {
        fprintf(stderr, "%s: skipped, no GPU present (device count 0)\n", test);
        exit(RF_TEST_SKIP);
    }
    if (rf_gpu_init(0, &g_ctx)) {
        fprintf(stderr, "%s: skipped, GPU init failed: %s\n", test, rf_last_error());
        exit(RF_TEST_SKIP);
    }
    rf_gpu_info info;
    rf_gpu_get_info(g_ctx, &info);
    fprintf(stderr, "%s: device %s (cc %d.%d, %d SMs, warp %d)\n", test, info.name, info.cc_major,
            info.cc_minor, info.sm_count, info.warp_size);
}

static inline void *dev_from(const void *host, size_t bytes) {
    void *d = NULL;
    assert_int_equal(rf_gpu_alloc(g_ctx, bytes ? bytes : 1, &d), RF_OK);
    if (bytes) assert_int_equal(rf_gpu_upload(g_ctx, d, host, bytes), RF_OK);
    return d;
}

/* device buffer poisoned with NaN bytes (0xFF) */
static inline void *dev_poison(size_t bytes) {
    void *d = NULL;
    assert_int_equal(rf_gpu_alloc(g_ctx, bytes ? bytes : 1, &d), RF_OK);
    assert_int_equal(rf_gpu_memset(g_ctx, d, 0xFF, bytes), RF_OK);
    return d;
}

static inline void dev_to(void *host, const void *d, size_t bytes) {
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    assert_int_equal(rf_gpu_download(g_ctx, host, d, bytes), RF_OK);
}

static inline float *host_f32(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

/* Prints and checks a relative L2 error against its tolerance (NaN never passes). */
static inline void check_rel(const char *what, const float *got, const float *want, size_t n, double tol) {
    double e = rf_rel_l2(got, want, n);
    fprintf(stderr, "  %-48s n=%-8zu rel_l2=%.3g (tol %.0e)\n", what, n, e, tol);
    if (!(e < tol)) {
        for (size_t i = 0; i < n; i++)
            if (!(fabs((double)got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
                fprintf(stderr, "  first bad element %zu: got %g want %g\n", i, got[i], want[i]);
                break;
            }
    }
    assert_true(e < tol);
}

static inline uint16_t f16_bits(float f) { return rf_f32_to_fp16(f); }

/* Random blocks of `type` for n_rows rows of n_in elements; returns the byte count in *bytes.
 * Quant bytes are uniform random; f16 scale fields are small positive/negative values. */
static inline uint8_t *random_weights(rf_rng *r, rf_type type, int64_t n_rows, int64_t n_in, size_t *bytes) {
    size_t rb;
    assert_int_equal(rf_row_size(type, n_in, &rb), RF_OK);
    *bytes = rb * (size_t)n_rows;
    uint8_t *w = malloc(*bytes + 16);
    assert_non_null(w);
    for (size_t i = 0; i < *bytes; i++) w[i] = (uint8_t)rf_rng_u64(r);
    const rf_type_traits *tr = rf_type_info(type);
    const size_t bb = tr->type_size;
    const size_t nblk = *bytes / bb;
    for (size_t b = 0; b < nblk; b++) {
        uint8_t *p = w + b * bb;
        uint16_t h;
#define SETH(off, scale)                                                                     \
    do {                                                                                     \
        h = f16_bits((rf_rng_uniform(r) * 2 - 1) * (scale));                                 \
        memcpy(p + (off), &h, 2);                                                            \
    } while (0)
        switch (type) {
        case RF_TYPE_F16: {
            h = f16_bits(rf_rng_normal(r));
            memcpy(p, &h, 2);
            break;
        }
        case RF_TYPE_BF16: {
            h = rf_f32_to_bf16(rf_rng_normal(r));
            memcpy(p, &h, 2);
            break;
        }
        case RF_TYPE_F32: {
            float f = rf_rng_normal(r);
            memcpy(p, &f, 4);
            break;
        }
        case RF_TYPE_Q4_0: case RF_TYPE_Q5_0: case RF_TYPE_Q8_0: case RF_TYPE_IQ4_NL:
        case RF_TYPE_IQ4_XS:
            SETH(0, 0.05f);
            break;
        case RF_TYPE_Q4_1: case RF_TYPE_Q5_1: case RF_TYPE_Q4_K: case RF_TYPE_Q5_K:
            SETH(0, 0.05f);
            SETH(2, 0.05f);
            break;
        case RF_TYPE_Q6_K: SETH(208, 0.01f); break;
        case RF_TYPE_Q2_K: SETH(80, 0.05f); SETH(82, 0.05f); break;
        case RF_TYPE_Q3_K: SETH(108, 0.05f); break;
        case RF_TYPE_MXFP4: p[0] = (uint8_t)(120 + rf_rng_u64(r) % 10); break;
        default: break;
        }
#undef SETH
    }
    return w;
}

#endif
