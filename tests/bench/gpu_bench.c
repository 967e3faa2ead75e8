/* gpu_bench.c — GPU micro-benchmark: measures the device's read bandwidth, then the quantized
 * GEMV at decode shapes (4096x4096, 4096->14336, 14336->4096; 1 token unless -t), rotating among
 * weight matrices that together exceed L2 several times, and prints achieved GB/s and the
 * fraction of the measured bandwidth; then one prefill GEMM. Usage: rf_gpu_bench [-t tokens]
 * [-r reps] [-q] (quick: fewer reps) [-s] (sweep only: the Q4_0/Q8_0/F16 variants, no defaults
 * table, no GEMM) [-1 TYPE N_IN N_OUT VARIANT [xq]] (one configuration only, for a profiler;
 * xq: the product kernel on an x quantized beforehand) [-w RPW] (with -1: rows per warp
 * forced, as rf_gpu_set_gemv_rpw) [-o [TYPE]] (occupancy sweep only: products of the int8-x
 * formats, or of TYPE, variants 7, 9, 11, 13, 15, 17, 20, 21, rows per warp forced to 1..16,
 * then exit) [-O] (the same for the whole call, Q4_0 and Q8_0) [-P] (shared-memory pad sweep of
 * the Q4_0 / Q4_K products at 4096x4096: the blocks resident per SM capped, then exit).
 * Column x: f32 = the whole rf_gpu_gemv (for the int8-x formats: x quantization kernel + product
 * kernel), int8 = rf_gpu_gemv_xq, the product alone on an x quantized once beforehand (as a
 * decode step does when the op that produces x quantizes it for all the products reading it).
 * [-T] (with -1, in a -DRF_GEMV_TRACE=ON build: a timeline of the last 64 calls from per-block
 * timestamps of the q32s kernel: period, how the blocks of a call start, wait and end).
 * RF_BENCH_CALLS: the least calls per timed graph (64). Exit 77 without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gpu/gpu.h"
#include "rocmforge/quant.h"

/* the formats with an int8-x product at the benchmark's widths */
static bool has_xq(rf_type t) {
    return t == RF_TYPE_Q4_0 || t == RF_TYPE_Q8_0 || t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_0 ||
           t == RF_TYPE_Q5_1 || t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K;
}

/* share of the measured read bandwidth bw (GB/s), in percent, of wb bytes in us microseconds */
static double pct_bw(size_t wb, double us, double bw) { return 100.0 * wb / (us * 1e-6) / 1e9 / bw; }

/* one cell of a sweep: the share of bandwidth of type t at n_in -> n_out with the context's
 * current knobs (xq: the product kernel alone), printed as " 85.3%" or "   error" */
static void sweep_cell(rf_gpu_ctx *ctx, rf_type t, int ntok, int64_t n_in, int64_t n_out,
                       size_t min_bytes, int reps, bool xq, double bw) {
    double us = 0;
    size_t wb = 0;
    if (rf_gpu_bench_gemv(ctx, t, ntok, n_in, n_out, min_bytes, reps, xq, &us, &wb))
        printf("   error");
    else
        printf(" %7.1f%%", pct_bw(wb, us, bw));
    fflush(stdout);
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static double med_u64(uint64_t *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_u64);
    return n ? (double)v[n / 2] : 0.0;
}
static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double med_d(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_d);
    return n ? v[n / 2] : 0.0;
}
/* the timeline of nc consecutive calls in r[call][2048][4] (rf_gpu_trace_read), grid blocks
 * each: per call the first and last block start, dependency release and end; medians over the
 * calls, in microseconds */
#define TRACE_BLOCKS 2048
static void trace_summary(const uint64_t (*r)[TRACE_BLOCKS][4], int nc, int grid) {
    if (nc < 3 || grid < 1 || grid > TRACE_BLOCKS) {
        printf("trace: %d calls of %d blocks, too few\n", nc, grid);
        return;
    }
    const int m = nc - 1; /* calls 1..nc-1, each against the one before */
    double *per = calloc(m, sizeof(double)), *spread = calloc(m, sizeof(double)),
           *lag = calloc(m, sizeof(double)), *wspread = calloc(m, sizeof(double)),
           *tail = calloc(m, sizeof(double)), *run = calloc(m, sizeof(double)),
           *early = calloc(m, sizeof(double)), *busy = calloc(m, sizeof(double)),
           *after = calloc(m, sizeof(double));
    uint64_t *e = malloc(grid * sizeof(uint64_t)), *bz = malloc(grid * sizeof(uint64_t));
    uint64_t gran = UINT64_MAX;
    for (int k = 0; k < m; k++) {
        const uint64_t(*b)[4] = r[k + 1], (*p)[4] = r[k];
        uint64_t s0 = UINT64_MAX, s1 = 0, w0 = UINT64_MAX, w1 = 0, e1 = 0, pe1 = 0, pw0 = UINT64_MAX;
        for (int i = 0; i < grid; i++) {
            s0 = b[i][0] < s0 ? b[i][0] : s0, s1 = b[i][0] > s1 ? b[i][0] : s1;
            w0 = b[i][1] < w0 ? b[i][1] : w0, w1 = b[i][1] > w1 ? b[i][1] : w1;
            e1 = b[i][2] > e1 ? b[i][2] : e1, pe1 = p[i][2] > pe1 ? p[i][2] : pe1;
            pw0 = p[i][1] < pw0 ? p[i][1] : pw0;
            e[i] = b[i][2], bz[i] = b[i][2] - b[i][1];
        }
        int ne = 0, na = 0;
        for (int i = 0; i < grid; i++) ne += b[i][0] < pe1, na += b[i][0] > w0;
        per[k] = ((double)w0 - (double)pw0) / 1e3, spread[k] = (s1 - s0) / 1e3;
        lag[k] = ((double)w0 - (double)pe1) / 1e3, wspread[k] = (w1 - w0) / 1e3;
        run[k] = (e1 - w0) / 1e3, early[k] = 100.0 * ne / grid, after[k] = 100.0 * na / grid;
        busy[k] = med_u64(bz, grid) / 1e3;
        tail[k] = (e1 - med_u64(e, grid)) / 1e3; /* e sorted now */
        for (int i = 1; i < grid; i++)
            if (e[i] > e[i - 1] && e[i] - e[i - 1] < gran) gran = e[i] - e[i - 1];
    }
    printf("trace: %d blocks per call, %d calls (medians, us; timer step >= %llu ns)\n", grid, m,
           (unsigned long long)gran);
    printf("  period (release to release)                  %7.2f\n", med_d(per, m));
    printf("  blocks started before the previous call ended: %.0f%%, after this one's release: %.0f%%\n",
           med_d(early, m), med_d(after, m));
    printf("  start spread (first to last block start)     %7.2f\n", med_d(spread, m));
    printf("  release lag (previous end -> first release)  %7.2f\n", med_d(lag, m));
    printf("  release spread (first to last release)       %7.2f\n", med_d(wspread, m));
    printf("  run (first release -> last end)              %7.2f\n", med_d(run, m));
    printf("  tail (median block end -> last end)          %7.2f\n", med_d(tail, m));
    printf("  block busy (release -> end, median block)    %7.2f\n", med_d(busy, m));
    free(per), free(spread), free(lag), free(wspread), free(tail), free(run), free(early), free(busy);
    free(after), free(e), free(bz);
}

int main(int argc, char **argv) {
    int ntok = 1, reps = 50, sweep_only = 0, one_var = -1, occ = 0, one_rpw = 0;
    const char *occ_type = NULL;
    const char *one_type = NULL;
    long long one_in = 0, one_out = 0;
    bool one_xq = false, trace = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-1") && i + 4 < argc) {
            one_type = argv[i + 1], one_in = atoll(argv[i + 2]), one_out = atoll(argv[i + 3]);
            one_var = atoi(argv[i + 4]);
            i += 4;
            if (i + 1 < argc && !strcmp(argv[i + 1], "xq")) one_xq = true, i++;
            continue;
        }
        if (!strcmp(argv[i], "-t") && i + 1 < argc) ntok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-q")) reps = 15;
        else if (!strcmp(argv[i], "-s")) sweep_only = 1;
        else if (!strcmp(argv[i], "-o")) {
            occ = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-') occ_type = argv[++i];
        }
        else if (!strcmp(argv[i], "-O")) occ = 2;
        else if (!strcmp(argv[i], "-P")) occ = 3;
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) one_rpw = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-T")) trace = true;
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
    if (one_type) {
        rf_type t = RF_TYPE_COUNT;
        for (int k = 0; k < RF_TYPE_COUNT; k++)
            if (rf_type_info((rf_type)k) && !strcmp(rf_type_name((rf_type)k), one_type)) t = (rf_type)k;
        if (t == RF_TYPE_COUNT) {
            fprintf(stderr, "unknown type %s\n", one_type);
            return 2;
        }
        rf_gpu_set_gemv_variant(ctx, one_var);
        rf_gpu_set_gemv_rpw(ctx, one_rpw);
        double us = 0;
        size_t wb = 0;
        if (rf_gpu_bench_gemv(ctx, t, ntok, one_in, one_out, (size_t)400 << 20, reps, one_xq, &us, &wb)) {
            fprintf(stderr, "error: %s\n", rf_last_error());
            return 1;
        }
        printf("%s %lld->%lld v%d x %s: %.2f us, %.1f%% of bw\n", one_type, one_in, one_out, one_var, one_xq ? "int8" : "f32", us,
               pct_bw(wb, us, bw));
        if (trace) { /* one more graph (3 replays) with the trace on, then its last calls: the
                      * q32s kernel's timeline (1 token) */
            const int want = 65;
            const size_t per = sizeof(uint64_t[TRACE_BLOCKS][4]);
            uint64_t *tr = malloc(want * per);
            int nc = 0, grid = 0;
            rf_status st = tr ? rf_gpu_trace_reset(ctx) : rf_set_error(RF_ERR_OOM, "trace buffer");
            if (!st) st = rf_gpu_bench_gemv(ctx, t, ntok, one_in, one_out, (size_t)400 << 20, 1, one_xq, &us, &wb);
            if (!st) st = rf_gpu_trace_read(ctx, tr, want, &nc, &grid);
            if (st) fprintf(stderr, "trace: %s\n", rf_last_error());
            else {
                const uint64_t(*t4)[TRACE_BLOCKS][4] = (const uint64_t(*)[TRACE_BLOCKS][4])tr;
                trace_summary(t4, nc, grid);
                const char *dump = getenv("RF_TRACE_DUMP"); /* the last 4 calls as CSV */
                FILE *f = dump ? fopen(dump, "w") : NULL;
                if (f) {
                    fprintf(f, "call,block,t0,t1,t2,sm\n");
                    for (int c = nc > 4 ? nc - 4 : 0; c < nc; c++)
                        for (int i = 0; i < grid; i++)
                            fprintf(f, "%d,%d,%llu,%llu,%llu,%llu\n", c, i, (unsigned long long)t4[c][i][0],
                                    (unsigned long long)t4[c][i][1], (unsigned long long)t4[c][i][2],
                                    (unsigned long long)(t4[c][i][3] >> 32));
                    fclose(f);
                }
            }
            free(tr);
        }
        rf_gpu_destroy(ctx);
        return 0;
    }
    const int64_t shapes[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}}; /* n_in, n_out */
    const rf_type types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_F16, RF_TYPE_BF16, RF_TYPE_Q4_1,
                             RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K};
    const int ntypes = (int)(sizeof types / sizeof types[0]);
    const size_t min_bytes = info.l2_bytes * 8 > ((size_t)400 << 20) ? info.l2_bytes * 8 : ((size_t)400 << 20);
    if (occ == 3) { /* unused shared memory per block (caps the resident blocks) against the
                     * share of bandwidth, Q4_0 / Q4_K products at 4096x4096; v0 three times
                     * over, to see the spread */
        const int pads[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16};
        const int vars[][2] = {{0, 0}, {0, 0}, {0, 0}, {17, 0}, {17, 4}, {20, 0}, {20, 4}, {15, 0}, {13, 0}, {7, 0}};
        const rf_type pt[] = {RF_TYPE_Q4_0, RF_TYPE_Q4_K};
        printf("\nshared-memory pad sweep: product kernel (x int8), 1 token, pdl on; %% of bw by KB of pad\n");
        printf("%-6s %-13s %3s %4s", "type", "n_in->n_out", "var", "rpw");
        for (size_t k = 0; k < sizeof pads / sizeof pads[0]; k++) printf("   pad=%-2d", pads[k]);
        printf("\n");
        for (size_t ti = 0; ti < sizeof pt / sizeof pt[0]; ti++)
            for (size_t vi = 0; vi < sizeof vars / sizeof vars[0]; vi++) {
                printf("%-6s %5lld->%-6lld v%-2d %4d", rf_type_name(pt[ti]), (long long)shapes[0][0],
                       (long long)shapes[0][1], vars[vi][0], vars[vi][1]);
                for (size_t k = 0; k < sizeof pads / sizeof pads[0]; k++) {
                    rf_gpu_set_gemv_variant(ctx, vars[vi][0]);
                    rf_gpu_set_gemv_rpw(ctx, vars[vi][1]);
                    rf_gpu_set_gemv_pad(ctx, pads[k]);
                    sweep_cell(ctx, pt[ti], ntok, shapes[0][0], shapes[0][1], min_bytes, reps, true, bw);
                }
                printf("\n");
            }
        rf_gpu_set_gemv_pad(ctx, 0);
        rf_gpu_set_gemv_rpw(ctx, 0);
        rf_gpu_set_gemv_variant(ctx, 0);
        rf_gpu_destroy(ctx);
        return 0;
    }
    if (occ) { /* rows per warp (0: the default) against the share of bandwidth, per shape */
        const int occ_vars[] = {7, 9, 11, 13, 15, 17, 20, 21};
        const int rpws[] = {0, 1, 2, 4, 6, 8, 12, 16};
        printf("\noccupancy sweep: %s, 1 token, pdl on; %% of bw by rows per warp\n",
               occ == 1 ? "product kernel (x int8)" : "whole call (x f32)");
        printf("%-6s %-13s %3s", "type", "n_in->n_out", "var");
        for (size_t k = 0; k < sizeof rpws / sizeof rpws[0]; k++) printf("   rpw=%d", rpws[k]);
        printf("\n");
        for (int ti = 0; ti < ntypes; ti++) {
            const rf_type t = types[ti];
            /* -o: the int8-x formats (or TYPE); -O: Q4_0 and Q8_0 */
            if (!has_xq(t) || (occ == 2 && t != RF_TYPE_Q4_0 && t != RF_TYPE_Q8_0) ||
                (occ_type && strcmp(occ_type, rf_type_name(t))))
                continue;
            for (int s = 0; s < 3; s++)
                for (size_t vi = 0; vi < sizeof occ_vars / sizeof occ_vars[0]; vi++) {
                    const int v = occ_vars[vi];
                    printf("%-6s %5lld->%-6lld v%-2d", rf_type_name(t), (long long)shapes[s][0], (long long)shapes[s][1], v);
                    for (size_t k = 0; k < sizeof rpws / sizeof rpws[0]; k++) {
                        rf_gpu_set_gemv_variant(ctx, v);
                        rf_gpu_set_gemv_rpw(ctx, rpws[k]);
                        sweep_cell(ctx, t, ntok, shapes[s][0], shapes[s][1], min_bytes, reps, occ == 1, bw);
                    }
                    printf("\n");
                }
        }
        rf_gpu_set_gemv_rpw(ctx, 0);
        rf_gpu_set_gemv_variant(ctx, 0);
        rf_gpu_destroy(ctx);
        return 0;
    }
    printf("\n%-6s %-18s %4s %4s %4s %10s %10s %8s %8s\n", "type", "n_in->n_out var", "tok", "x", "pdl", "MB", "us/call", "GB/s", "of_bw");
    /* pass 0: the variant sweep (programmatic dependent launch on) for the three formats with a
     * bandwidth target: Q4_0 / Q8_0 product kernels 1..12 on quantized x, F16 1..3;
     * pass 1: every format at the default variant (v0), the whole call; the 32-element formats
     * also the product alone; Q4_0 / Q8_0 / F16 also with programmatic dependent launch off */
    for (int pass = 0; pass < (sweep_only ? 1 : 2); pass++)
        for (int t = 0; t < ntypes; t++) {
            if (pass == 0 && t > 2) continue;
            const bool q32 = has_xq(types[t]);
            /* runs: {variant, x quantized beforehand, pdl} */
            int runs[12][3], nr = 0;
            if (pass == 0)
                for (int v = 1; v <= (q32 ? 12 : 3); v++) runs[nr][0] = v, runs[nr][1] = q32, runs[nr++][2] = 1;
            else {
                runs[nr][0] = 0, runs[nr][1] = 0, runs[nr++][2] = 1;
                if (q32) runs[nr][0] = 0, runs[nr][1] = 1, runs[nr++][2] = 1;
                if (t <= 2) runs[nr][0] = 0, runs[nr][1] = 0, runs[nr++][2] = 0;
            }
            for (int ri = 0; ri < nr; ri++)
                for (int s = 0; s < 3; s++) {
                    const int v = runs[ri][0];
                    const bool xq = runs[ri][1], pdl = rf_gpu_set_pdl(ctx, runs[ri][2]);
                    rf_gpu_set_gemv_variant(ctx, v);
                    double us = 0;
                    size_t wb = 0;
                    rf_status st = rf_gpu_bench_gemv(ctx, types[t], ntok, shapes[s][0], shapes[s][1],
                                                     min_bytes, reps, xq, &us, &wb);
                    char shp[40];
                    snprintf(shp, sizeof shp, "%lld->%lld v%d", (long long)shapes[s][0], (long long)shapes[s][1], v);
                    if (st) {
                        printf("%-6s %-18s error: %s\n", rf_type_name(types[t]), shp, rf_last_error());
                        continue;
                    }
                    const double gbs = wb / (us * 1e-6) / 1e9;
                    printf("%-6s %-18s %4d %4s %4s %10.2f %10.2f %8.0f %7.1f%%\n", rf_type_name(types[t]), shp,
                           ntok, xq ? "int8" : "f32", pdl ? "on" : "off", wb / 1e6, us, gbs, 100.0 * gbs / bw);
                    fflush(stdout);
                }
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
