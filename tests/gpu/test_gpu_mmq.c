/* test_gpu_mmq.c — MMQ (rf_gpu_mmq: many-token quantized products on the int8 tensor cores)
 * against rf_ref_matmul on random blocks (seed printed), outputs poisoned first, for each
 * format it takes (Q4_0, Q8_0, Q6_K, Q4_K, Q5_K, MXFP4, Q5_0) at 1..512 tokens, real widths and an
 * odd height; rows of a partial last chunk (test_mmq_partial: gpt-oss's 2880 for Q4_0 / Q8_0 /
 * MXFP4, qwen3-30b-a3b's 768 and 1280 for Q6_K, an odd count of blocks: 1440, rows of an odd
 * byte length in MXFP4, gemma4-26b-a4b's 704-wide Q5_0 down experts) at 9, 33, 128 and 512
 * tokens. The reference is computed for a sample of the tokens (first, last, a few between:
 * the double-precision oracle over all of 512 would take minutes; below 128 rows all of them).
 * Accuracy: for the types with a twin (gpu_twin.h: every type here) every sampled output within
 * its float-order bound of the exact product for x rounded as the GPU rounds it (per 32; the
 * K-quants per 256, gpu_twin.h's check_twin_mmq states that bound) (the rel. L2
 * against f32 x printed beside the rounded x's own: x's int8 rounding, ~0.5% for Gaussian x, a
 * property of the data that a fixed 1e-2 does not bound; it failed at random in test_gpu_gemvn
 * and test_gpu_w4a16). Batch invariance:
 * a token's outputs are bit-identical in calls of 512, 100, 64, 33, 9, 8 and 5 tokens wherever it sits in them; determinism: two calls
 * identical; rf_gpu_matmul's products that the router sends here (17..96 tokens by default) too, and there
 * x quantized beforehand (rf_gpu_quantize_x + rf_gpu_gemv_xq[_bias]) the same bits. Every tile
 * configuration (RF_MMQ_CFG 0..5, set per call with rf_knob_override) against the reference at
 * 65..512 tokens and odd shapes, and bit-identical to the others; RF_MMQ_X256=off (the K-quants on
 * the per-32 kernels) against the per-32 twin. RF_MMQ_BENCH=1 also times
 * MMQ against the earlier paths (GEMV in groups of 8, dequantize + cuBLAS); RF_MMQ_BENCH_CFG=1
 * times every configuration at 64..512 tokens beside dequantize + cuBLAS (us and int8 TOPS);
 * its cases 10.. are gpt-oss-20b's products (MXFP4 experts 2880 -> 2880 / 5760, Q8_0 attention
 * 2880 -> 4096 / 512) and qwen3-30b-a3b's Q6_K down expert (768 -> 2048), 15.. gemma4-26b-a4b's
 * Q5_0 down expert (704 -> 2816) and an aligned Q5_0 4096 x 4096.
 * test_mmq_mins_exact: the K-quants' mins term alone (d = 0) to the exact integer;
 * test_mmq_q6k_centre_exact: Q6_K's centre term cancels q = 32 exactly. Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_mmq: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "core/knobs.h"
#include "gpu_test_common.h"
#include "gpu_twin.h"

#include <time.h>

#include "backend/ref/ref_ops.h"
#include "rocmforge/quant.h"

static const rf_type k_types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q6_K, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_MXFP4,
                                  RF_TYPE_Q5_0};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

/* the sampled outputs gs (ns tokens xs) against the twin (the f32-x distance printed); a type
 * without one (none today) against want (rf_ref_matmul of xs) by rel. L2 < 1e-2 */
static void mmq_check(const char *what, rf_type t, const float *gs, const uint8_t *w, const float *xs, const float *want,
                      int ns, int64_t n_in, int64_t n_out) {
    if (!twin_has(t)) {
        check_rel(what, gs, want, (size_t)ns * n_out, 1e-2);
        return;
    }
    double rr;
    check_twin_mmq(what, t, gs, w, xs, want, ns, n_in, n_out, &rr);
    fprintf(stderr, "  %-48s rel_l2=%.3g from f32 x, the rounded x's own %.3g\n", what,
            rf_rel_l2(gs, want, (size_t)ns * n_out), rr);
}

/* y = W x by MMQ for nt tokens vs rf_ref_matmul on the sampled tokens */
static void run_case(rf_rng *r, rf_type t, int64_t nt, int64_t n_in, int64_t n_out) {
    if (!rf_gpu_mmq_supported(t, n_in)) return;
    size_t bytes;
    uint8_t *w = random_weights(r, t, n_out, n_in, &bytes);
    float *x = host_f32(nt * n_in), *got = host_f32(nt * n_out);
    rf_rng_fill_normal(r, x, nt * n_in, 1.0f);
    /* the sampled tokens: 0, 1, nt / 2, nt - 2, nt - 1, and 63 / 64 where present (tile edges) */
    /* fewer than 128 rows: every token (the rel. L2 of a handful of outputs is noisy) */
    int64_t *samp = malloc((n_out < 128 ? nt : 8) * sizeof *samp);
    int ns = 0;
    if (n_out < 128)
        for (int64_t i = 0; i < nt; i++) samp[ns++] = i;
    const int64_t cand[] = {0, 1, nt / 2, 63, 64, nt - 2, nt - 1};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0] && n_out >= 128; i++) {
        bool dup = cand[i] < 0 || cand[i] >= nt; /* nt - 2 < 0 for one token */
        for (int k = 0; k < ns && !dup; k++) dup = samp[k] == cand[i];
        if (!dup) samp[ns++] = cand[i];
    }
    float *xs = host_f32(ns * n_in), *want = host_f32(ns * n_out), *gs = host_f32(ns * n_out);
    for (int k = 0; k < ns; k++) memcpy(xs + k * n_in, x + samp[k] * n_in, n_in * 4);
    assert_int_equal(rf_ref_matmul(want, w, t, xs, ns, n_in, n_out), RF_OK);
    void *dw = dev_from(w, bytes);
    float *dx = dev_from(x, nt * n_in * 4), *dy = dev_poison(nt * n_out * 4);
    rf_status st = rf_gpu_mmq(g_ctx, dy, dw, t, dx, nt, n_in, n_out);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    dev_to(got, dy, nt * n_out * 4);
    for (int k = 0; k < ns; k++) memcpy(gs + k * n_out, got + samp[k] * n_out, n_out * 4);
    char what[96];
    snprintf(what, sizeof what, "mmq %s nt=%lld %lldx%lld (%d tokens)", rf_type_name(t), (long long)nt,
             (long long)n_out, (long long)n_in, ns);
    mmq_check(what, t, gs, w, xs, want, ns, n_in, n_out);
    for (int64_t i = 0; i < nt * n_out; i++) assert_false(isnan(got[i])); /* every output written */
    /* determinism: a second call gives the same bits */
    float *got2 = host_f32(nt * n_out);
    assert_int_equal(rf_gpu_memset(g_ctx, dy, 0xFF, nt * n_out * 4), RF_OK);
    assert_int_equal(rf_gpu_mmq(g_ctx, dy, dw, t, dx, nt, n_in, n_out), RF_OK);
    dev_to(got2, dy, nt * n_out * 4);
    assert_memory_equal(got, got2, nt * n_out * 4);
    /* where the router sends rf_gpu_matmul to MMQ (by default 17..96 tokens; 2..16 take gemv_mt) */
    if (rf_gpu_mmq_takes(g_ctx, t, nt, n_in)) {
        assert_int_equal(rf_gpu_memset(g_ctx, dy, 0xFF, nt * n_out * 4), RF_OK);
        assert_int_equal(rf_gpu_matmul(g_ctx, dy, dw, t, dx, nt, n_in, n_out), RF_OK);
        dev_to(got2, dy, nt * n_out * 4);
        assert_memory_equal(got, got2, nt * n_out * 4);
        /* x quantized beforehand, as the norm's and the GLU's fused quantizers write it
         * (rf_gpu_quantize_x in the layout rf_gpu_xq_layout names), then rf_gpu_gemv_xq: the same
         * bits; with a bias, each output plus its row's bias (one f32 add) */
        if (rf_gpu_gemv_has_xq(g_ctx, t, nt, n_in)) {
            int gb, rk;
            assert_int_equal(rf_gpu_xq_layout(g_ctx, t, nt, n_in, &gb, &rk), RF_OK);
            assert_int_equal(gb, 1);
            assert_int_equal(rk, rf_gpu_mmq_rk(t));
            void *xq = dev_poison(rf_gpu_xq_bytes(nt, n_in));
            assert_int_equal(rf_gpu_quantize_x(g_ctx, xq, t, dx, nt, n_in), RF_OK);
            assert_int_equal(rf_gpu_memset(g_ctx, dy, 0xFF, nt * n_out * 4), RF_OK);
            assert_int_equal(rf_gpu_gemv_xq(g_ctx, dy, dw, t, xq, nt, n_in, n_out), RF_OK);
            dev_to(got2, dy, nt * n_out * 4);
            assert_memory_equal(got, got2, nt * n_out * 4);
            float *bias = host_f32(n_out);
            rf_rng_fill_normal(r, bias, n_out, 1.0f);
            float *db = dev_from(bias, n_out * 4);
            assert_int_equal(rf_gpu_gemv_xq_bias(g_ctx, dy, dw, t, xq, db, nt, n_in, n_out), RF_OK);
            dev_to(got2, dy, nt * n_out * 4);
            for (int64_t i = 0; i < nt * n_out; i++) {
                const float e = got[i] + bias[i % n_out];
                assert_memory_equal(&got2[i], &e, 4);
            }
            /* records another than the type's */
            assert_int_equal(rf_gpu_mmq_xq(g_ctx, dy, dw, t, xq, 2, nt, n_in, n_out), RF_ERR_INVALID_ARG);
            rf_gpu_free(g_ctx, xq), rf_gpu_free(g_ctx, db);
            free(bias);
        }
    }
    rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
    free(w), free(x), free(got), free(got2), free(xs), free(want), free(gs), free(samp);
}

static void test_mmq_vs_ref(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 11);
    const int64_t nts[] = {1, 5, 8, 9, 16, 33, 64, 100, 512};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const rf_type t = k_types[ti];
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) run_case(&r, t, nts[k], 4096, 4096);
        run_case(&r, t, 64, 4096, 14336);
        run_case(&r, t, 33, 14336, 4096);
        run_case(&r, t, 100, 4096, 131); /* not a multiple of the 128-row tile */
        run_case(&r, t, 9, 1024, 300);
        run_case(&r, t, 130, 512, 1); /* one row, one or two chunks, three tiles of tokens */
    }
    /* the widths MMQ takes (a partial last chunk: test_mmq_partial), and those it refuses */
    assert_true(rf_gpu_mmq_supported(RF_TYPE_Q4_0, 4096 + 32));
    assert_true(rf_gpu_mmq_supported(RF_TYPE_Q6_K, 256 * 3));
    assert_true(rf_gpu_mmq_supported(RF_TYPE_MXFP4, 2880));
    assert_true(rf_gpu_mmq_supported(RF_TYPE_Q5_0, 704)); /* 22 blocks: two chunks and 6 blocks */
    assert_false(rf_gpu_mmq_supported(RF_TYPE_Q5_1, 4096)); /* Q4_1 / Q5_1: no MMQ tile */
    assert_false(rf_gpu_mmq_supported(RF_TYPE_Q4_K, 2880)); /* not a whole super-block */
    assert_false(rf_gpu_mmq_supported(RF_TYPE_Q8_0, 224));  /* below one chunk of 8 blocks */
    assert_false(rf_gpu_mmq_supported(RF_TYPE_F16, 4096));
}

/* Rows that end in a partial chunk (8 blocks of 32 per chunk; Q6_K: one or two super-blocks):
 * the checks of test_mmq_vs_ref (run_case: the twin, every output
 * written, two calls identical, rf_gpu_matmul's MMQ route identical), heights
 * of a partial 128-row tile so the last row of the tensor ends the last chunk */
static void test_mmq_partial(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 14);
    const int64_t nts[] = {9, 33, 128, 512};
    const struct { rf_type t; int64_t n_in, n_out; } cases[] = {
        {RF_TYPE_MXFP4, 2880, 2880}, {RF_TYPE_MXFP4, 2880, 131}, {RF_TYPE_MXFP4, 1440, 131}, /* 45 blocks: odd rows */
        {RF_TYPE_MXFP4, 4096, 300},  {RF_TYPE_Q8_0, 2880, 512},  {RF_TYPE_Q8_0, 2880, 131},
        {RF_TYPE_Q8_0, 1440, 131},   {RF_TYPE_Q4_0, 2880, 4096}, {RF_TYPE_Q4_0, 1440, 131},
        {RF_TYPE_Q4_0, 288, 131},    /* 9 blocks: one chunk and one block */
        {RF_TYPE_Q6_K, 768, 2048},   {RF_TYPE_Q6_K, 768, 131},   {RF_TYPE_Q6_K, 1280, 131},
        {RF_TYPE_Q4_K, 2816, 131},   {RF_TYPE_Q5_K, 2816, 131},
        {RF_TYPE_Q5_0, 704, 2816},   {RF_TYPE_Q5_0, 704, 131},   {RF_TYPE_Q5_0, 2880, 131}, /* gemma4's down */
        {RF_TYPE_Q5_0, 288, 131},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        assert_true(rf_gpu_mmq_supported(cases[c].t, cases[c].n_in));
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++)
            run_case(&r, cases[c].t, nts[k], cases[c].n_in, cases[c].n_out);
    }
}

/* token s + i of a 512-token call against token i of calls of n tokens on x + s */
static void test_mmq_batch_invariance(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 12);
    const int64_t shapes[][2] = {{4096, 4096}, {4096, 131}, {14336, 1000}, {2880, 2880}, {768, 131}, {1440, 300}};
    const int64_t sub[][2] = {{0, 9}, {70, 9}, {5, 64}, {100, 100}, {448, 33}, {503, 9}, {1, 511}, {3, 5}, {200, 8}, {507, 5}};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const rf_type t = k_types[ti];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t n_in = shapes[s][0], n_out = shapes[s][1], nt = 512;
            if (!rf_gpu_mmq_supported(t, n_in)) continue;
            size_t bytes;
            uint8_t *w = random_weights(&r, t, n_out, n_in, &bytes);
            float *x = host_f32(nt * n_in), *big = host_f32(nt * n_out), *part = host_f32(nt * n_out);
            rf_rng_fill_normal(&r, x, nt * n_in, 1.0f);
            void *dw = dev_from(w, bytes);
            float *dx = dev_from(x, nt * n_in * 4), *dy = dev_poison(nt * n_out * 4);
            assert_int_equal(rf_gpu_mmq(g_ctx, dy, dw, t, dx, nt, n_in, n_out), RF_OK);
            dev_to(big, dy, nt * n_out * 4);
            int bad = 0;
            for (size_t k = 0; k < sizeof sub / sizeof sub[0]; k++) {
                const int64_t s0 = sub[k][0], n = sub[k][1];
                assert_int_equal(rf_gpu_mmq(g_ctx, dy, dw, t, dx + s0 * n_in, n, n_in, n_out), RF_OK);
                dev_to(part, dy, n * n_out * 4);
                if (memcmp(part, big + s0 * n_out, n * n_out * 4)) {
                    fprintf(stderr, "  %s %lldx%lld: tokens %lld..+%lld differ from the 512-token call\n",
                            rf_type_name(t), (long long)n_out, (long long)n_in, (long long)s0, (long long)n);
                    bad++;
                }
            }
            fprintf(stderr, "  batch invariance %s %lldx%lld: %s\n", rf_type_name(t), (long long)n_out,
                    (long long)n_in, bad ? "FAILED" : "bit-identical");
            assert_int_equal(bad, 0);
            rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
            free(w), free(x), free(big), free(part);
        }
    }
}

/* Every RF_MMQ_CFG (0 auto, 1..5: gpu_mmq.cu's rf_launch_mmq) at 65..512 tokens and odd shapes:
 * within the checks of test_mmq_vs_ref on the sampled tokens (the twin at configuration 1), and every
 * output bit-identical to configuration 1's (each output's arithmetic is the same in all tiles) */
#define N_CFG 6
static void config_case(rf_rng *r, rf_type t, int64_t n_in, int64_t n_out, const int64_t *nts, int n_nts) {
    if (!rf_gpu_mmq_supported(t, n_in)) return;
    int64_t ntmax = 0;
    for (int k = 0; k < n_nts; k++) ntmax = nts[k] > ntmax ? nts[k] : ntmax;
    size_t bytes;
    uint8_t *w = random_weights(r, t, n_out, n_in, &bytes);
    float *x = host_f32(ntmax * n_in), *got = host_f32(ntmax * n_out), *first = host_f32(ntmax * n_out);
    rf_rng_fill_normal(r, x, ntmax * n_in, 1.0f);
    void *dw = dev_from(w, bytes);
    float *dx = dev_from(x, ntmax * n_in * 4), *dy = dev_poison(ntmax * n_out * 4);
    for (int k = 0; k < n_nts; k++) {
        const int64_t nt = nts[k];
        /* sampled tokens: tile edges of 32, 64 and 128 tokens, the last ones, all below 128 rows */
        const int64_t cand[] = {0, 1, 31, 32, 63, 64, 127, 128, nt / 2, nt - 2, nt - 1};
        int64_t samp[16];
        int ns = 0;
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
            bool dup = cand[i] < 0 || cand[i] >= nt;
            for (int j = 0; j < ns && !dup; j++) dup = samp[j] == cand[i];
            if (!dup) samp[ns++] = cand[i];
        }
        float *xs = host_f32(ns * n_in), *want = host_f32(ns * n_out), *gs = host_f32(ns * n_out);
        for (int j = 0; j < ns; j++) memcpy(xs + j * n_in, x + samp[j] * n_in, n_in * 4);
        assert_int_equal(rf_ref_matmul(want, w, t, xs, ns, n_in, n_out), RF_OK);
        for (int cfg = 1; cfg <= N_CFG; cfg++) {
            char v[4];
            snprintf(v, sizeof v, "%d", cfg % N_CFG); /* 1..5, then 0 (auto) */
            assert_int_equal(rf_knob_override(RF_KNOB_MMQ_CFG, v), RF_OK);
            assert_int_equal(rf_gpu_memset(g_ctx, dy, 0xFF, nt * n_out * 4), RF_OK);
            rf_status st = rf_gpu_mmq(g_ctx, dy, dw, t, dx, nt, n_in, n_out);
            if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
            assert_int_equal(st, RF_OK);
            dev_to(got, dy, nt * n_out * 4);
            for (int j = 0; j < ns; j++) memcpy(gs + j * n_out, got + samp[j] * n_out, n_out * 4);
            char what[96];
            snprintf(what, sizeof what, "mmq cfg %d %s nt=%lld %lldx%lld", cfg % N_CFG, rf_type_name(t), (long long)nt,
                     (long long)n_out, (long long)n_in);
            /* the twin once (cfg 1: the others are bit-identical to it, checked below) */
            if (cfg == 1 || !twin_has(t)) mmq_check(what, t, gs, w, xs, want, ns, n_in, n_out);
            for (int64_t i = 0; i < nt * n_out; i++) assert_false(isnan(got[i]));
            if (cfg == 1) memcpy(first, got, nt * n_out * 4);
            else if (memcmp(first, got, nt * n_out * 4)) {
                fprintf(stderr, "  %s: not bit-identical to cfg 1\n", what);
                fail();
            }
        }
        free(xs), free(want), free(gs);
    }
    assert_int_equal(rf_knob_override(RF_KNOB_MMQ_CFG, NULL), RF_OK); /* unset again */
    rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
    free(w), free(x), free(got), free(first);
}

static void test_mmq_configs(void **state) {
    (void)state;
    if (rf_knob_is_set(RF_KNOB_MMQ_CFG)) { /* the knob the test turns; leave a measurement alone */
        fprintf(stderr, "  test_mmq_configs: skipped, RF_MMQ_CFG is set\n");
        return;
    }
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 13);
    const int64_t big[] = {65, 96, 128, 200, 256, 512}, odd1[] = {200, 33}, odd2[] = {129}, odd3[] = {96, 161};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const rf_type t = k_types[ti];
        config_case(&r, t, 4096, 4096, big, 6);
        config_case(&r, t, 4096, 131, odd1, 2);   /* rows past the 128-row tile */
        config_case(&r, t, 1024, 300, odd2, 1);   /* a short row: few chunks per split */
        config_case(&r, t, 14336, 1000, odd3, 2); /* a long row, tokens past a 128-token tile */
        config_case(&r, t, 2880, 300, odd1, 2);   /* a partial last chunk (Q4_0, Q8_0, MXFP4) */
        config_case(&r, t, 768, 131, odd2, 1);    /* Q6_K: an odd count of super-blocks */
        config_case(&r, t, 704, 300, odd1, 2);    /* Q5_0 (Q4_0, Q8_0, MXFP4): 22 blocks, gemma4's down */
    }
}

/* ---- RF_MMQ_BENCH=1: time per call (host clock over synchronized runs of calls, the weights
 * rotating among copies of > 200 MB so that each call reads them from device memory) ---------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* path 0: MMQ; 1: GEMV in groups of 8 tokens; 2: dequantize + cuBLAS (rf_gpu_gemm) */
static rf_status bench_call(int path, float *y, void *w, rf_type t, const float *x, int64_t nt, int64_t n_in,
                            int64_t n_out) {
    if (path == 0) return rf_gpu_mmq(g_ctx, y, w, t, x, nt, n_in, n_out);
    if (path == 2) return rf_gpu_gemm(g_ctx, y, w, t, x, nt, n_in, n_out);
    for (int64_t k = 0; k < nt; k += 8) {
        const rf_status st = rf_gpu_gemv(g_ctx, y + k * n_out, w, t, x + k * n_in, nt - k < 8 ? nt - k : 8, n_in, n_out);
        if (st) return st;
    }
    return RF_OK;
}
static void bench(void) {
    const struct { rf_type t; int64_t n_in, n_out; } cases[] = {
        {RF_TYPE_Q4_0, 4096, 4096}, {RF_TYPE_Q4_0, 4096, 6144}, {RF_TYPE_Q4_0, 4096, 28672},
        {RF_TYPE_Q4_0, 14336, 4096}, {RF_TYPE_Q8_0, 4096, 4096}, {RF_TYPE_Q8_0, 4096, 28672},
        {RF_TYPE_Q6_K, 4096, 128256}, {RF_TYPE_Q4_K, 4096, 28672}, {RF_TYPE_Q5_K, 14336, 4096},
        {RF_TYPE_Q6_K, 14336, 4096},
        /* 10..: gpt-oss-20b (experts gate / up / down, fused gate+up, attention q, k / v; o is
         * 4096 wide, aligned) and qwen3-30b-a3b's down expert */
        {RF_TYPE_MXFP4, 2880, 2880}, {RF_TYPE_MXFP4, 2880, 5760}, {RF_TYPE_Q8_0, 2880, 4096},
        {RF_TYPE_Q8_0, 2880, 512}, {RF_TYPE_Q6_K, 768, 2048},
        {RF_TYPE_Q5_0, 704, 2816}, {RF_TYPE_Q5_0, 4096, 4096},
    };
    const int64_t nts[] = {16, 32, 64, 128, 512};
    const char *names[] = {"mmq", "gemv8", "gemm"};
    const char *only = getenv("RF_MMQ_BENCH_CASES"); /* e.g. "0,2": the cases to time */
    fprintf(stderr, "  %-6s %-14s %5s  %10s %8s  %10s %8s  %10s %8s\n", "type", "n_out x n_in", "tok", "mmq us",
            "GB/s", "gemv8 us", "GB/s", "gemm us", "GB/s");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (only) {
            char key[8];
            snprintf(key, sizeof key, "%zu", c);
            bool in = false;
            for (const char *p = only; *p;) {
                size_t l = strcspn(p, ",");
                if (l == strlen(key) && !strncmp(p, key, l)) in = true;
                p += l + (p[l] == ',');
            }
            if (!in) continue;
        }
        const rf_type t = cases[c].t;
        const int64_t n_in = cases[c].n_in, n_out = cases[c].n_out;
        size_t rb;
        assert_int_equal(rf_row_size(t, n_in, &rb), RF_OK);
        const size_t wb = rb * (size_t)n_out;
        int nmat = (int)(((size_t)200 << 20) / wb) + 1;
        if (nmat < 2) nmat = 2;
        void *w[64];
        if (nmat > 64) nmat = 64;
        for (int i = 0; i < nmat; i++) {
            assert_int_equal(rf_gpu_alloc(g_ctx, wb, &w[i]), RF_OK);
            assert_int_equal(rf_gpu_memset(g_ctx, w[i], 0x11 + i, wb), RF_OK); /* finite f16 scales */
        }
        float *x, *y;
        assert_int_equal(rf_gpu_alloc(g_ctx, 512 * n_in * 4, (void **)&x), RF_OK);
        assert_int_equal(rf_gpu_alloc(g_ctx, 512 * n_out * 4, (void **)&y), RF_OK);
        assert_int_equal(rf_gpu_memset(g_ctx, x, 0x3c, 512 * n_in * 4), RF_OK);
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
            const int64_t nt = nts[k];
            const char *one = getenv("RF_MMQ_BENCH_NT"); /* one token count only */
            if (one && atoll(one) != nt) continue;
            double us[3] = {0, 0, 0};
            for (int p = 0; p < 3; p++) {
                if (p == 1 && nt > 64) continue; /* the GEMV groups served 9..64 */
                const int reps = nmat * (p == 2 ? 2 : 8 > 64 / nmat ? 8 : 64 / nmat);
                for (int i = 0; i < nmat; i++) assert_int_equal(bench_call(p, y, w[i], t, x, nt, n_in, n_out), RF_OK);
                assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                const double t0 = now_s();
                for (int i = 0; i < reps; i++) assert_int_equal(bench_call(p, y, w[i % nmat], t, x, nt, n_in, n_out), RF_OK);
                assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                us[p] = (now_s() - t0) / reps * 1e6;
            }
            char sh[32];
            snprintf(sh, sizeof sh, "%lldx%lld", (long long)n_out, (long long)n_in);
            fprintf(stderr, "  %-6s %-14s %5lld ", rf_type_name(t), sh, (long long)nt);
            for (int p = 0; p < 3; p++) {
                if (us[p] > 0) fprintf(stderr, " %10.1f %8.0f ", us[p], wb / us[p] * 1e-3);
                else fprintf(stderr, " %10s %8s ", "-", "-");
            }
            fprintf(stderr, "\n");
        }
        (void)names;
        for (int i = 0; i < nmat; i++) rf_gpu_free(g_ctx, w[i]);
        rf_gpu_free(g_ctx, x), rf_gpu_free(g_ctx, y);
    }
}

/* RF_MMQ_BENCH_CFG=1: every configuration per (type, shape, tokens), timed as bench() times
 * (weights rotating through > 200 MB), beside dequantize + cuBLAS; TOPS = 2 nt n_in n_out / time */
static void bench_cfg(void) {
    const rf_type types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K};
    const int64_t shapes[][2] = {{4096, 4096}, {4096, 6144}, {4096, 28672}, {14336, 4096}}; /* n_in, n_out */
    const int64_t nts[] = {64, 128, 256, 512};
    fprintf(stderr, "  %-6s %-12s %4s", "type", "n_out x n_in", "tok");
    for (int c = 1; c <= 5; c++) fprintf(stderr, "   cfg%d us  TOPS", c);
    fprintf(stderr, "    gemm us  TOPS  auto us\n");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const rf_type t = types[ti];
            const int64_t n_in = shapes[si][0], n_out = shapes[si][1];
            if (!rf_gpu_mmq_supported(t, n_in)) continue;
            size_t rb;
            assert_int_equal(rf_row_size(t, n_in, &rb), RF_OK);
            const size_t wb = rb * (size_t)n_out;
            int nmat = (int)(((size_t)200 << 20) / wb) + 1;
            nmat = nmat < 2 ? 2 : nmat > 64 ? 64 : nmat;
            void *w[64];
            for (int i = 0; i < nmat; i++) {
                assert_int_equal(rf_gpu_alloc(g_ctx, wb, &w[i]), RF_OK);
                assert_int_equal(rf_gpu_memset(g_ctx, w[i], 0x11 + i, wb), RF_OK); /* finite f16 scales */
            }
            float *x, *y;
            assert_int_equal(rf_gpu_alloc(g_ctx, 512 * n_in * 4, (void **)&x), RF_OK);
            assert_int_equal(rf_gpu_alloc(g_ctx, 512 * n_out * 4, (void **)&y), RF_OK);
            assert_int_equal(rf_gpu_memset(g_ctx, x, 0x3c, 512 * n_in * 4), RF_OK);
            for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
                const int64_t nt = nts[k];
                char sh[32];
                snprintf(sh, sizeof sh, "%lldx%lld", (long long)n_out, (long long)n_in);
                fprintf(stderr, "  %-6s %-12s %4lld", rf_type_name(t), sh, (long long)nt);
                for (int c = 1; c <= 7; c++) { /* 1..5, 6: gemm, 7: auto (cfg 0) */
                    char v[4];
                    snprintf(v, sizeof v, "%d", c == 7 ? 0 : c <= 5 ? c : 0);
                    assert_int_equal(rf_knob_override(RF_KNOB_MMQ_CFG, v), RF_OK);
                    const int p = c == 6 ? 2 : 0;
                    const int reps = nmat * (8 > 64 / nmat ? 8 : 64 / nmat);
                    for (int i = 0; i < nmat; i++) assert_int_equal(bench_call(p, y, w[i], t, x, nt, n_in, n_out), RF_OK);
                    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                    const double t0 = now_s();
                    for (int i = 0; i < reps; i++) assert_int_equal(bench_call(p, y, w[i % nmat], t, x, nt, n_in, n_out), RF_OK);
                    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                    const double us = (now_s() - t0) / reps * 1e6;
                    if (c == 7) fprintf(stderr, " %8.1f", us);
                    else fprintf(stderr, " %9.1f %5.0f", us, 2.0 * nt * n_in * n_out / us * 1e-6);
                }
                fprintf(stderr, "\n");
            }
            assert_int_equal(rf_knob_override(RF_KNOB_MMQ_CFG, NULL), RF_OK); /* unset again */
            for (int i = 0; i < nmat; i++) rf_gpu_free(g_ctx, w[i]);
            rf_gpu_free(g_ctx, x), rf_gpu_free(g_ctx, y);
        }
}

/* RF_MMQ_X256=off (a measurement knob: the K-quants' dense products on the per-32 kernels, the
 * grouped products' own): the checks of test_mmq_vs_ref against the per-32 twin */
static void test_mmq_x256_off(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 31);
    assert_int_equal(rf_knob_override(RF_KNOB_MMQ_X256, "off"), RF_OK);
    const rf_type ts[] = {RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K};
    const int64_t nts[] = {9, 33, 100};
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++)
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) run_case(&r, ts[ti], nts[k], 4096, 300);
    run_case(&r, RF_TYPE_Q6_K, 33, 768, 2048); /* the unaligned Q6_K rows */
    assert_int_equal(rf_knob_override(RF_KNOB_MMQ_X256, NULL), RF_OK); /* unset again */
}

/* w (wb bytes of type t, n_out rows of n_in) times x [nt, n_in] on MMQ against want [nt, n_out]
 * exactly: the outputs that differ counted (the first three printed, named by what) and none
 * allowed. The exactness tests below pick inputs whose every output is an integer the kernel's
 * sums must reach without rounding. */
static void mmq_expect_exact(rf_type t, const uint8_t *w, size_t wb, const float *x, int64_t nt, int64_t n_in,
                             int64_t n_out, const float *want, const char *what) {
    float *got = host_f32(nt * n_out);
    void *dw = dev_from(w, wb);
    float *dx = dev_from(x, nt * n_in * 4), *dy = dev_poison(nt * n_out * 4);
    assert_int_equal(rf_gpu_mmq(g_ctx, dy, dw, t, dx, nt, n_in, n_out), RF_OK);
    dev_to(got, dy, nt * n_out * 4);
    int64_t bad = 0;
    for (int64_t i = 0; i < nt * n_out; i++)
        if (got[i] != want[i] && bad++ < 3)
            fprintf(stderr, "  %s n_in=%lld nt=%lld token %lld row %lld: %.1f, exact %.1f\n", what, (long long)n_in,
                    (long long)nt, (long long)(i / n_out), (long long)(i % n_out), got[i], want[i]);
    fprintf(stderr, "  %s n_in=%lld nt=%lld: %lld of %lld outputs differ\n", what, (long long)n_in, (long long)nt,
            (long long)bad, (long long)(nt * n_out));
    assert_int_equal(bad, 0);
    rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
    free(got);
}

/* The K-quants' mins term alone, exactly: Q4_K / Q5_K rows with d = 0 and dmin = 1 (each weight
 * -m_j, its block's min) against x of integers in [-127, 127] with 127 first in every 256 (so x's
 * scale is 1 and its int8 values are x): y[t, o] = -sum_j m_j(o) s_j(t) over the row's blocks,
 * an integer below 2^24 (4 super-blocks: |y| <= 4 * 8 * 63 * 4064), which the kernel's sums
 * (the flush's f16 mma of rf_mmq_mins, the splits' adds) must give exactly, at tiles of 32 and
 * 64 tokens */
static void test_mmq_mins_exact(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 47);
    const int64_t n_in = 1024, n_out = 300, nts[] = {20, 32, 64, 96};
    const rf_type ts[] = {RF_TYPE_Q4_K, RF_TYPE_Q5_K};
    for (size_t ti = 0; ti < 2; ti++) {
        const rf_type t = ts[ti];
        const int bb = t == RF_TYPE_Q4_K ? 144 : 176, nsb = (int)(n_in / 256);
        uint8_t *w = malloc((size_t)n_out * nsb * bb);
        for (size_t i = 0; i < (size_t)n_out * nsb * bb; i++) w[i] = (uint8_t)(rf_rng_u64(&r) >> 24);
        for (int64_t b = 0; b < n_out * nsb; b++) { /* d = +0, dmin = 1; a block with every min 63 */
            uint8_t *blk = w + b * bb;
            blk[0] = blk[1] = 0, blk[2] = 0x00, blk[3] = 0x3C;
            if (b == 5) memset(blk + 4, 0xFF, 12);
        }
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
            const int64_t nt = nts[k];
            float *x = host_f32(nt * n_in), *want = host_f32(nt * n_out);
            for (int64_t i = 0; i < nt * n_in; i++)
                x[i] = i % 256 == 0 ? 127.0f : (float)((int)(rf_rng_u64(&r) % 255u) - 127);
            if (k == 1) /* every x 127 or -127 in token 3: the block sums at their bound */
                for (int64_t i = 1; i < n_in; i++) x[3 * n_in + i] = i / 32 % 2 ? -127.0f : 127.0f;
            for (int64_t tk = 0; tk < nt; tk++)
                for (int64_t o = 0; o < n_out; o++) {
                    int64_t y = 0;
                    for (int sb = 0; sb < nsb; sb++) {
                        const uint8_t *q = w + (o * nsb + sb) * bb + 4;
                        for (int j = 0; j < 8; j++) {
                            const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
                            int64_t sj = 0;
                            for (int e = 0; e < 32; e++) sj += (int64_t)x[tk * n_in + sb * 256 + j * 32 + e];
                            y -= m * sj;
                        }
                    }
                    want[tk * n_out + o] = (float)y; /* |y| < 2^24: exact in f32 */
                }
            mmq_expect_exact(t, w, (size_t)n_out * nsb * bb, x, nt, n_in, n_out, want,
                             t == RF_TYPE_Q4_K ? "mins exact q4_K" : "mins exact q5_K");
            free(x), free(want);
        }
        free(w);
    }
}

/* Q6_K's centre term exactly: every q = 32 (ql 0, qh 0b10 each), random int8 scales, d = 1, so
 * each half-block's mma sum is 32 times its x sum and the centre (rf_mmq_flush's f16 mma) must
 * take off exactly that: every output 0, at tiles of 32 and 64 tokens, aligned (4096) and
 * unaligned (768) rows */
static void test_mmq_q6k_centre_exact(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 53);
    const int64_t n_out = 300, n_ins[] = {4096, 768}, nts[] = {20, 32, 64, 96};
    for (size_t ii = 0; ii < 2; ii++) {
        const int64_t n_in = n_ins[ii], nsb = n_in / 256;
        uint8_t *w = malloc((size_t)(n_out * nsb * 210));
        for (int64_t b = 0; b < n_out * nsb; b++) {
            uint8_t *blk = w + b * 210;
            memset(blk, 0x00, 128), memset(blk + 128, 0xAA, 64);
            for (int k = 0; k < 16; k++) blk[192 + k] = (uint8_t)(rf_rng_u64(&r) >> 24);
            if (b == 7) blk[192] = 0x80, blk[193] = 0x7F; /* -128, 127 */
            blk[208] = 0x00, blk[209] = 0x3C;
        }
        for (size_t k = 0; k < sizeof nts / sizeof nts[0]; k++) {
            const int64_t nt = nts[k];
            float *x = host_f32(nt * n_in), *want = host_f32(nt * n_out);
            rf_rng_fill_normal(&r, x, nt * n_in, 1.0f);
            memset(want, 0, (size_t)(nt * n_out) * sizeof(float));
            mmq_expect_exact(RF_TYPE_Q6_K, w, (size_t)(n_out * nsb * 210), x, nt, n_in, n_out, want, "q6_K centre exact");
            free(x), free(want);
        }
        free(w);
    }
}

static void test_mmq_bench(void **state) {
    (void)state;
    if (getenv("RF_MMQ_BENCH")) bench();
    if (getenv("RF_MMQ_BENCH_CFG")) bench_cfg();
}

int main(void) {
    gpu_test_init_or_skip("test_gpu_mmq");
    const char *only = getenv("RF_MMQ_BENCH_ONLY");
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_mmq_vs_ref),
        cmocka_unit_test(test_mmq_partial),
        cmocka_unit_test(test_mmq_batch_invariance),
        cmocka_unit_test(test_mmq_configs),
        cmocka_unit_test(test_mmq_x256_off),
        cmocka_unit_test(test_mmq_mins_exact),
        cmocka_unit_test(test_mmq_q6k_centre_exact),
        cmocka_unit_test(test_mmq_bench),
    };
    const struct CMUnitTest just_bench[] = {cmocka_unit_test(test_mmq_bench)};
    int rc = only ? cmocka_run_group_tests(just_bench, NULL, NULL) : cmocka_run_group_tests(all, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
