/* gpu_bench.c — GPU micro-benchmark: measures the device's read bandwidth, then the quantized
 * GEMV at decode shapes (4096x4096, 4096->14336, 14336->4096; 1 token unless -t), rotating among
 * weight matrices that together exceed L2 several times, and prints achieved GB/s and the
 * fraction of the measured bandwidth; then one prefill GEMM. Usage: rf_gpu_bench [-t tokens]
 * [-r reps] [-q] (quick: fewer reps) [-s] (sweep only: the Q4_0/Q8_0/F16 variants, no defaults
 * table, no GEMM). Exit 77 without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gpu/gpu.h"
#include "rocmforge/quant.h"

int main(int argc, char **argv) {
    int ntok = 1, reps = 50, sweep_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) ntok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-q")) reps = 15;
        else if (!strcmp(argv[i], "-s")) sweep_only = 1;
    }
    if (rf_gpu_device_count() <= 0) {
        fprintf(stderr, "rf_gpu_bench: skipped, no GPU\n");
        return 77;
    }
    rf_gpu_ctx *ctx;
    if (rf_gpu_init(0, &ctx)) {
        fprintf(stderr, "error: %s\n", rf_last_error());
        return 1;
    }
    rf_gpu_info info;
    rf_gpu_get_info(ctx, &info);
    printf("device: %s, %d SMs, L2 %.1f MB, %.1f GiB\n", info.name, info.sm_count,
           info.l2_bytes / 1e6, info.total_mem / 1073741824.0);
    double bw = 0;
    if (rf_gpu_bench_read_bw(ctx, (size_t)4 << 30, reps, &bw)) {
        fprintf(stderr, "error: %s\n", rf_last_error());
        return 1;
    }
    printf("read bandwidth (16-byte loads, 4 GiB buffer, median of %d): %.0f GB/s\n", reps, bw);
    const rf_type types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_F16, RF_TYPE_BF16, RF_TYPE_Q4_1,
                             RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K};
    const int64_t shapes[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}}; /* n_in, n_out */
    const size_t min_bytes = info.l2_bytes * 8 > ((size_t)400 << 20) ? info.l2_bytes * 8 : ((size_t)400 << 20);
    printf("\n%-6s %-18s %4s %4s %10s %10s %8s %8s\n", "type", "n_in->n_out var", "tok", "pdl", "MB", "us/call", "GB/s", "of_bw");
    /* pass 0: the variant sweep (programmatic dependent launch on where the device has it) for
     * the three formats with a bandwidth target, and their default without it; pass 1: every
     * format at the default variant (v0) */
    for (int pass = 0; pass < (sweep_only ? 1 : 2); pass++)
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int var = (pass == 0 ? 0 : 0); var <= (pass == 0 ? 4 : 0); var++)
        for (int s = 0; s < 3; s++) {
            if (pass == 0 && (var == 0 || t > 2)) continue;
            /* var 4 in the sweep = the default variant with programmatic dependent launch off */
            const int v = var == 4 ? 0 : var;
            const bool pdl = rf_gpu_set_pdl(ctx, var != 4);
            rf_gpu_set_gemv_variant(ctx, v);
            double us = 0;
            size_t wb = 0;
            rf_status st = rf_gpu_bench_gemv(ctx, types[t], ntok, shapes[s][0], shapes[s][1],
                                             min_bytes, reps, &us, &wb);
            char shp[40];
            snprintf(shp, sizeof shp, "%lld->%lld v%d", (long long)shapes[s][0], (long long)shapes[s][1], v);
            if (st) {
                printf("%-6s %-18s error: %s\n", rf_type_name(types[t]), shp, rf_last_error());
                continue;
            }
            const double gbs = wb / (us * 1e-6) / 1e9;
            printf("%-6s %-18s %4d %4s %10.2f %10.2f %8.0f %7.1f%%\n", rf_type_name(types[t]), shp,
                   ntok, pdl ? "on" : "off", wb / 1e6, us, gbs, 100.0 * gbs / bw);
            fflush(stdout);
        }
    rf_gpu_set_pdl(ctx, true);
    rf_gpu_set_gemv_variant(ctx, 0);
    double ms = 0;
    if (sweep_only) {
        rf_gpu_destroy(ctx);
        return 0;
    }
    if (!rf_gpu_bench_gemm(ctx, RF_TYPE_Q4_0, 512, 4096, 4096, reps > 20 ? 20 : reps, &ms))
        printf("\ngemm q4_0 512x4096x4096 (dequant + cuBLAS f16, f32 acc): %.3f ms, %.1f TFLOP/s\n",
               ms, 2.0 * 512 * 4096 * 4096 / (ms * 1e-3) / 1e12);
    else
        printf("\ngemm: %s\n", rf_last_error());
    rf_gpu_destroy(ctx);
    return 0;
}
