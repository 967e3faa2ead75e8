/* test_gpu_gemvn.c — products of 1..16 tokens through rf_gpu_matmul (whatever kernel the router,
 * gpu_route.c, sends them to: one GEMV call, gemv_mt for 2..16 tokens, MMQ, GEMV groups) for every
 * type with a fast path (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, F16; Q4_1, Q5_0, Q5_1) and MXFP4, Q2_K, Q3_K,
 * at real and odd widths and odd heights, outputs poisoned first:
 * - against rf_ref_matmul (accuracy): rel. L2 < 1e-2 where the route rounds x to int8 per 32 (the
 *   uniform rounding error of a Gaussian x, step amax / 127 with amax ~2.2 sigma, is ~0.5% of an
 *   output's rms, as in test_gpu_mmq), 2e-3 where it does not (tf32 / f32 float order); for the
 *   nine types with a twin (gpu_twin.h: the fast-path ones and MXFP4) that rounded-x figure is
 *   printed, not asserted: the twin pins every output within its float-order bound of the exact
 *   value for this x and W, so the distance to the f32 reference is then the data's own rounding
 *   error, which a fixed 1e-2 does not bound
 *   (it failed at random, 0.0109 on 45 outputs of 96-wide Q4_1 rows: three blocks of x, where
 *   the Gaussian figure is no bound);
 * - where x is rounded (those nine), element by element against the GPU's twin computed here in
 *   double: the same rounded x, the dequantized weights, and the one term the kernels take from
 *   elsewhere (Q4_K / Q5_K: the minimum's factor cm = c d sc - dmin m times the f32 sum of the
 *   unrounded x; Q4_1 / Q5_1: m times ggml's q8_1 s = f16(amax / 127 sum q), as the CPU's own
 *   q8_1 path); the two then differ by float order alone, bounded by gamma(nb + 16) times
 *   the sum of the absolute values of the terms (nb blocks of 32 summed one after another, a few
 *   roundings per term: the scale products, the f32 sum of x, the split sums);
 * - where the route is BLAS (narrow rows past the GEMVs' tokens, any type: x rounded to int8, then
 *   W and x as f16 operands), against the twin of those operands (gpu_twin.h, check_twin_blas);
 * - every gemv_mt variant (its warps along the row forced to 1, 2, 4, 8) and the q32s loop it
 *   replaced, against the same twin;
 * - gemv_mt's batch invariance: a token's outputs have the same bits in calls of 4..16 tokens.
 * RF_GEMVN_BENCH=1 then times each type on the 8B decode shapes at 1, 2, 4, 8, 12, 16 tokens,
 * every path side by side (us per call from CUDA-graph replays, GB/s of the weight read), the
 * table printed last. Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_gemvn: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_test_common.h"
#include "gpu_twin.h"

#include <time.h>

#include "backend/gpu/gpu_route.h"
#include "backend/ref/ref_ops.h"
#include "rocmforge/quant.h"

static const rf_type k_types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K, RF_TYPE_F16,
                                  RF_TYPE_Q4_1, RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_MXFP4, RF_TYPE_Q2_K, RF_TYPE_Q3_K};
#define N_TYPES (sizeof k_types / sizeof k_types[0])
static const rf_type k_mt_types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K,
                                     RF_TYPE_Q4_1, RF_TYPE_Q5_0, RF_TYPE_Q5_1};
#define N_MT (sizeof k_mt_types / sizeof k_mt_types[0])

/* y = W x through rf_gpu_matmul (under the context's variant) for random W, x; checked against
 * the reference and, where x is rounded, the twin; *yout (if not NULL) keeps the outputs */
static void run_case_v(rf_rng *r, rf_type t, int64_t nt, int64_t n_in, int64_t n_out, const char *tag, float **yout,
                       uint8_t **wkeep, float **xkeep) {
    size_t bytes;
    uint8_t *w;
    if (wkeep && *wkeep) {
        w = *wkeep;
        assert_int_equal(rf_row_size(t, n_in, &bytes), RF_OK);
        bytes *= (size_t)n_out;
    } else {
        w = random_weights(r, t, n_out, n_in, &bytes);
    }
    float *x = xkeep && *xkeep ? *xkeep : host_f32(16 * n_in);
    if (!(xkeep && *xkeep)) rf_rng_fill_normal(r, x, 16 * n_in, 1.0f);
    float *got = host_f32(nt * n_out), *want = host_f32(nt * n_out);
    assert_int_equal(rf_ref_matmul(want, w, t, x, nt, n_in, n_out), RF_OK);
    void *dw = dev_from(w, bytes);
    float *dx = dev_from(x, nt * n_in * 4), *dy = dev_poison(nt * n_out * 4);
    const rf_status st = rf_gpu_matmul(g_ctx, dy, dw, t, dx, nt, n_in, n_out);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    dev_to(got, dy, nt * n_out * 4);
    for (int64_t i = 0; i < nt * n_out; i++) assert_false(isnan(got[i])); /* every output written */
    const bool rounds = rf_gpu_matmul_rounds_x(g_ctx, t, nt, n_in);
    const rf_gpu_route_kind rk = rf_gpu_route_for(g_ctx, t, nt, n_in, n_out);
    char what[128];
    snprintf(what, sizeof what, "%s%s nt=%lld %lldx%lld %s (%s x)", tag, rf_type_name(t), (long long)nt, (long long)n_out,
             (long long)n_in, rf_gpu_route_name(rk), rounds ? "int8" : "f32");
    const bool ints = rk == RF_ROUTE_GEMV || rk == RF_ROUTE_GEMV_GROUPS || rk == RF_ROUTE_MMQ;
    if (rounds && twin_has(t) && ints) { /* the twin is the check; the f32-x distance is reported (header) */
        double rr;
        if (rk == RF_ROUTE_MMQ) check_twin_mmq(what, t, got, w, x, want, nt, n_in, n_out, &rr);
        else check_twin(what, t, got, w, x, want, nt, n_in, n_out, &rr);
        fprintf(stderr, "  %-48s rel_l2=%.3g from f32 x, the rounded x's own %.3g\n", what,
                rf_rel_l2(got, want, (size_t)(nt * n_out)), rr);
    } else if (rounds && rk == RF_ROUTE_BLAS && n_in % 32 == 0) { /* f16 operands: their own twin */
        check_twin_blas(what, t, got, w, x, nt, n_in, n_out);
        fprintf(stderr, "  %-48s rel_l2=%.3g from f32 x\n", what, rf_rel_l2(got, want, (size_t)(nt * n_out)));
    } else {
        check_rel(what, got, want, nt * n_out, rounds ? 1e-2 : 2e-3);
    }
    if (t == RF_TYPE_F16) assert_false(rounds); /* unquantized weights never round x */
    rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
    if (yout) *yout = got;
    else free(got);
    if (wkeep) *wkeep = w;
    else free(w);
    if (xkeep) *xkeep = x;
    else free(x);
    free(want);
}
static void run_case(rf_rng *r, rf_type t, int64_t nt, int64_t n_in, int64_t n_out) {
    run_case_v(r, t, nt, n_in, n_out, "", NULL, NULL, NULL);
}

static void test_gemvn_vs_ref(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 13);
    /* widths: 512 (every type's fast kernels and MMQ), 1536 (Q6_K MMQ needs 512s: 3 of them),
     * 2048 (Q6_K's int8-x GEMVs: rows of 8 super-blocks), 96 (32-element formats and F16 only:
     * the generic / f32-x paths); heights odd */
    const struct { int64_t n_in, n_out; } shapes[] = {{512, 131}, {1536, 67}, {2048, 45}, {96, 45}};
    for (size_t k = 0; k < N_TYPES; k++) {
        const rf_type t = k_types[k];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (shapes[s].n_in % rf_type_info(t)->block_size) continue;
            for (int64_t nt = 1; nt <= 16; nt++) run_case(&r, t, nt, shapes[s].n_in, shapes[s].n_out);
        }
    }
}

/* gemv_mt's variants (27..30: 1, 2, 4, 8 warps along a row) and the q32s loop it replaced
 * (variant 7, 2..8 tokens) against the twin, on rows of one chunk per warp or more (the last
 * stage part-filled: 2304 = 9 chunks) and heights that end mid-tile */
static void test_gemvn_variants(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 29);
    const int vars[] = {27, 28, 29, 30, 7};
    const int64_t nts[] = {2, 7, 8, 9, 16};
    for (size_t k = 0; k < N_MT; k++) {
        const rf_type t = k_mt_types[k];
        const int64_t n_in = t == RF_TYPE_Q6_K ? 2048 : 2304;
        for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++) {
            rf_gpu_set_gemv_variant(g_ctx, vars[v]);
            char tag[16];
            snprintf(tag, sizeof tag, "v%d ", vars[v]);
            for (size_t i = 0; i < sizeof nts / sizeof nts[0]; i++) {
                if (vars[v] == 7 && nts[i] > 8) continue; /* the loop takes 8 at most (9..: MMQ) */
                run_case_v(&r, t, nts[i], n_in, vars[v] == 30 ? 37 : 211, tag, NULL, NULL, NULL);
            }
        }
        rf_gpu_set_gemv_variant(g_ctx, 0);
    }
}

/* gemv_mt's outputs for a token do not depend on the call's token count (4..16 under the default
 * variant: 2 and 3 tokens take the q32s loop, faster there) */
static void test_gemvn_invariant(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 31);
    for (size_t k = 0; k < N_MT; k++) {
        const rf_type t = k_mt_types[k];
        const int64_t n_in = 2048, n_out = 150;
        if (rf_gpu_gemv_max_tokens(g_ctx, t, n_in) < 16) {
            fprintf(stderr, "  %s: gemv_mt does not take %lld-wide rows here; skipped\n", rf_type_name(t), (long long)n_in);
            continue;
        }
        uint8_t *w = NULL;
        float *x = NULL, *y16 = NULL;
        run_case_v(&r, t, 16, n_in, n_out, "inv ", &y16, &w, &x);
        for (int64_t nt = 4; nt < 16; nt++) {
            assert_int_equal(rf_gpu_route_for(g_ctx, t, nt, n_in, n_out), RF_ROUTE_GEMV);
            float *y = NULL;
            run_case_v(&r, t, nt, n_in, n_out, "inv ", &y, &w, &x);
            assert_memory_equal(y, y16, (size_t)(nt * n_out) * sizeof(float));
            free(y);
        }
        free(w), free(x), free(y16);
    }
}

/* ---- RF_GEMVN_BENCH=1: us per call from CUDA-graph replays (>= 64 calls a graph, the weights
 * rotating among copies of >= 400 MB so that every call reads them from device memory; the x
 * quantization counted in, as rf_gpu_matmul runs it), for each path ----------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { P_ROUTE, P_MT1, P_MT2, P_MT4, P_MT8, P_Q32S, P_MMQ, P_EAGER, N_PATHS };
static const char *k_path_name[N_PATHS] = {"route", "mt ks1", "mt ks2", "mt ks4", "mt ks8", "q32s loop", "mmq", "route, eager"};
static const int64_t k_bench_nt[] = {1, 2, 4, 8, 12, 16};
#define N_BNT (sizeof k_bench_nt / sizeof k_bench_nt[0])
#define N_BSHAPES 4
static double g_us[N_MT][N_BSHAPES][N_PATHS][N_BNT]; /* 0: not run */

typedef struct {
    rf_type t;
    int64_t n_in, n_out, nt;
    int path, nmat;
    void **w;
    float *x, *y;
} bench_call;

static rf_status bench_one(const bench_call *b, int i) {
    if (b->path == P_MMQ) return rf_gpu_mmq(g_ctx, b->y, b->w[i % b->nmat], b->t, b->x, b->nt, b->n_in, b->n_out);
    return rf_gpu_matmul(g_ctx, b->y, b->w[i % b->nmat], b->t, b->x, b->nt, b->n_in, b->n_out);
}

/* median us per call of the path, 0 where the path does not take the product */
static double bench_path(bench_call *b) {
    const int var[N_PATHS] = {0, 27, 28, 29, 30, 7, 0, 0};
    rf_gpu_set_gemv_variant(g_ctx, var[b->path]);
    double us = 0.0;
    const bool mt = b->path >= P_MT1 && b->path <= P_MT8;
    if ((mt && (b->nt < 2 || rf_gpu_gemv_max_tokens(g_ctx, b->t, b->n_in) < 16)) || (b->path == P_Q32S && (b->nt < 2 || b->nt > 8)) ||
        (b->path == P_MMQ && !rf_gpu_mmq_supported(b->t, b->n_in))) {
        rf_gpu_set_gemv_variant(g_ctx, 0);
        return 0.0;
    }
    const int per = b->nmat >= 64 ? b->nmat : (64 + b->nmat - 1) / b->nmat * b->nmat;
    for (int i = 0; i < b->nmat; i++) assert_int_equal(bench_one(b, i), RF_OK); /* warm-up, scratch grown */
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    double t[7];
    if (b->path == P_EAGER) { /* launched from the host one by one: what the old table measured */
        for (int rep = 0; rep < 7; rep++) {
            const double t0 = now_s();
            for (int i = 0; i < per; i++) assert_int_equal(bench_one(b, i), RF_OK);
            assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
            t[rep] = (now_s() - t0) / per * 1e6;
        }
    } else {
        void *exec = NULL;
        assert_int_equal(rf_gpu_capture_begin(g_ctx), RF_OK);
        for (int i = 0; i < per; i++) assert_int_equal(bench_one(b, i), RF_OK);
        assert_int_equal(rf_gpu_capture_end(g_ctx, &exec), RF_OK);
        assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK); /* warm-up replay */
        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
        for (int rep = 0; rep < 7; rep++) {
            const double t0 = now_s();
            assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK);
            assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
            t[rep] = (now_s() - t0) / per * 1e6;
        }
        rf_gpu_graph_destroy(exec);
    }
    for (int i = 0; i < 7; i++) /* median of 7 */
        for (int j = i + 1; j < 7; j++)
            if (t[j] < t[i]) us = t[i], t[i] = t[j], t[j] = us;
    us = t[3];
    rf_gpu_set_gemv_variant(g_ctx, 0);
    return us;
}

static void bench_shape(size_t ti, size_t si, int64_t n_in, int64_t n_out) {
    const rf_type t = k_mt_types[ti];
    size_t rb;
    assert_int_equal(rf_row_size(t, n_in, &rb), RF_OK);
    const size_t wb = rb * (size_t)n_out;
    int nmat = (int)(((size_t)400 << 20) / wb) + 1;
    if (nmat < 2) nmat = 2;
    if (nmat > 64) nmat = 64;
    void *w[64];
    for (int i = 0; i < nmat; i++) {
        assert_int_equal(rf_gpu_alloc(g_ctx, wb, &w[i]), RF_OK);
        assert_int_equal(rf_gpu_memset(g_ctx, w[i], 0x11 + i, wb), RF_OK); /* finite f16 scales */
    }
    float *x, *y;
    assert_int_equal(rf_gpu_alloc(g_ctx, 16 * n_in * 4, (void **)&x), RF_OK);
    assert_int_equal(rf_gpu_alloc(g_ctx, 16 * n_out * 4, (void **)&y), RF_OK);
    assert_int_equal(rf_gpu_memset(g_ctx, x, 0x3c, 16 * n_in * 4), RF_OK);
    for (int p = 0; p < N_PATHS; p++)
        for (size_t k = 0; k < N_BNT; k++) {
            bench_call b = {t, n_in, n_out, k_bench_nt[k], p, nmat, w, x, y};
            g_us[ti][si][p][k] = bench_path(&b);
        }
    for (int i = 0; i < nmat; i++) rf_gpu_free(g_ctx, w[i]);
    rf_gpu_free(g_ctx, x), rf_gpu_free(g_ctx, y);
}

static void test_gemvn_bench(void **state) {
    (void)state;
    if (!getenv("RF_GEMVN_BENCH")) return;
    /* the 8B decode step's products: n_in -> n_out (gate and up joined, Q/K/V joined) */
    const int64_t shapes[N_BSHAPES][2] = {{4096, 14336}, {14336, 4096}, {4096, 28672}, {4096, 6144}};
    double bw = 0.0;
    if (rf_gpu_bench_read_bw(g_ctx, (size_t)2 << 30, 20, &bw)) bw = 0.0;
    for (size_t ti = 0; ti < N_MT; ti++)
        for (size_t si = 0; si < N_BSHAPES; si++) bench_shape(ti, si, shapes[si][0], shapes[si][1]);
    printf("\ngemvn bench: us per call (CUDA-graph replays, x quantization included; 'eager': host launches), GB/s of "
           "the weights, read bandwidth %.0f GB/s; 'x1': the route's time over its 1-token time; KS of the route: "
           "warps along a row gemv_mt takes by default\n", bw);
    for (size_t ti = 0; ti < N_MT; ti++)
        for (size_t si = 0; si < N_BSHAPES; si++) {
            const rf_type t = k_mt_types[ti];
            size_t rb;
            assert_int_equal(rf_row_size(t, shapes[si][0], &rb), RF_OK);
            const double mb = (double)rb * shapes[si][1] / 1e6;
            printf("%-5s %5lld -> %-5lld (%.1f MB, route KS %d)\n", rf_type_name(t), (long long)shapes[si][0],
                   (long long)shapes[si][1], mb, rf_gpu_gemv_max_tokens(g_ctx, t, shapes[si][0]) >= 16 ? rf_gpu_gemv_mt_ks(g_ctx, t, shapes[si][0], shapes[si][1]) : 0);
            printf("  %-13s", "tokens");
            for (size_t k = 0; k < N_BNT; k++) printf(" %18lld", (long long)k_bench_nt[k]);
            printf("\n");
            for (int p = 0; p < N_PATHS; p++) {
                printf("  %-13s", k_path_name[p]);
                for (size_t k = 0; k < N_BNT; k++) {
                    const double us = g_us[ti][si][p][k];
                    if (us <= 0) printf(" %18s", "-");
                    else printf(" %7.1f us %5.0f GB", us, mb * 1e3 / us);
                }
                printf("\n");
            }
            printf("  %-13s", "route x1");
            for (size_t k = 0; k < N_BNT; k++)
                printf(" %18.2f", g_us[ti][si][P_ROUTE][0] > 0 ? g_us[ti][si][P_ROUTE][k] / g_us[ti][si][P_ROUTE][0] : 0.0);
            printf("\n");
        }
}

int main(void) {
    gpu_test_init_or_skip("test_gpu_gemvn");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemvn_vs_ref),
        cmocka_unit_test(test_gemvn_variants),
        cmocka_unit_test(test_gemvn_invariant),
        cmocka_unit_test(test_gemvn_bench),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
