/* bench_quant_dot.c — micro benchmark of the CPU dot kernels: a [rows x n] matvec per weight type,
 * scalar vs AVX2 vs AVX-VNNI one-row kernels and the table's 4-row kernel (4 weight rows per call,
 * what cpu_matmul uses for decode), single thread; prints ns per row and weight GB/s. Not part of
 * CTest. Build and run:
 *   cc -O2 -Iinclude -Isrc tests/bench/bench_quant_dot.c build/librocmforge.a -lm -lpthread -o /tmp/bench_quant_dot
 *   /tmp/bench_quant_dot [n=4096] [rows=1024] [reps=5]                                              */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rocmforge.h"
#include "quant/quant_impl.h" /* rf_vec_dot4_for, internal levels */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int64_t n = argc > 1 ? atoll(argv[1]) : 4096;
    const int64_t rows = argc > 2 ? atoll(argv[2]) : 1024;
    const int reps = argc > 3 ? atoi(argv[3]) : 5;
    const rf_type types[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_BF16, RF_TYPE_Q8_0, RF_TYPE_Q4_0, RF_TYPE_Q4_1,
                             RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_MXFP4, RF_TYPE_Q2_K, RF_TYPE_Q3_K, RF_TYPE_Q4_K,
                             RF_TYPE_Q5_K, RF_TYPE_Q6_K, RF_TYPE_IQ4_NL, RF_TYPE_IQ4_XS, RF_TYPE_NVFP4};
    float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    srand(1);
    for (int64_t i = 0; i < n; i++) x[i] = (float)rand() / RAND_MAX - 0.5f, w[i] = (float)rand() / RAND_MAX - 0.5f;
    printf("n=%lld rows=%lld reps=%d, table level %s\n", (long long)n, (long long)rows, reps,
           rf_quant_simd_level() == RF_SIMD_AVX2 ? "avx2" : "scalar");
    printf("%-6s %10s %12s %12s %12s %12s %8s %10s %10s %10s\n", "type", "row bytes", "scalar ns/row", "avx2 ns/row",
           "vnni ns/row", "4-row ns/row", "speedup", "avx2 GB/s", "vnni GB/s", "4-row GB/s");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const rf_type t = types[k];
        const rf_type_traits *tr = rf_type_info(t);
        size_t wsz, xsz;
        if (rf_row_size(t, n, &wsz) || rf_row_size(tr->vec_dot_type, n, &xsz)) continue;
        uint8_t *wq = malloc(wsz * rows), *xq = malloc(xsz);
        for (int64_t r = 0; r < rows; r++) rf_quantize_row(t, w, wq + r * wsz, n);
        rf_quantize_row(tr->vec_dot_type, x, xq, n);
        double ns[3] = {0, 0, 0};
        for (int lv = 0; lv < 3; lv++) { /* 2 = AVX-VNNI (internal level) */
            rf_vec_dot_fn f = rf_vec_dot_impl(t, (rf_simd_level)lv);
            if (!f) continue;
            volatile float sink = 0;
            double best = 1e30;
            for (int rep = 0; rep < reps; rep++) {
                double t0 = now();
                for (int64_t r = 0; r < rows; r++) {
                    float o;
                    f(n, &o, wq + r * wsz, xq);
                    sink += o;
                }
                double dt = now() - t0;
                if (dt < best) best = dt;
            }
            ns[lv] = best / rows * 1e9;
        }
        double ns4 = 0; /* the table's 4-row kernel (NULL for most types) */
        rf_vec_dot4_fn f4 = rf_vec_dot4_for(t);
        if (f4) {
            volatile float sink = 0;
            double best = 1e30;
            for (int rep = 0; rep < reps; rep++) {
                double t0 = now();
                for (int64_t r = 0; r + 4 <= rows; r += 4) {
                    float o[4];
                    f4(n, o, wq + r * wsz, wsz, xq);
                    sink += o[0] + o[3];
                }
                double dt = now() - t0;
                if (dt < best) best = dt;
            }
            ns4 = best / (rows & ~(int64_t)3) * 1e9;
        }
        printf("%-6s %10zu %12.0f %12.0f %12.0f %12.0f %7.1fx %10.2f %10.2f %10.2f\n", tr->name, wsz, ns[0], ns[1], ns[2], ns4,
               ns[1] > 0 ? ns[0] / ns[1] : 0, ns[1] > 0 ? wsz / ns[1] : 0, ns[2] > 0 ? wsz / ns[2] : 0,
               ns4 > 0 ? wsz / ns4 : 0);
        free(wq), free(xq);
    }
    free(x), free(w);
    return 0;
}
