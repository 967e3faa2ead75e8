/* test_gpu_w4a16.c — W4A16 (rf_gpu_w4a16: quantized products on the f16 tensor cores, weights
 * dequantized in registers) for Q4_0, Q4_K, Q5_K, Q8_0 on random blocks (seed printed), outputs
 * poisoned first, at 64..512 tokens, real widths and odd shapes (rows and tokens past a tile, one
 * chunk, split rows). Two checks on sampled tokens (all rows):
 *  - against a CPU twin with the kernel's own f16 operands (x rounded as rf_gpu_gemm rounds it,
 *    each weight the f16 the kernel forms: gpu_w4a16.cu's error model), summed in double: per
 *    output |got - want| <= 8 2^-24 (n_in / 16 + 8) sum_i |w_i x_i| (the f32 accumulation of
 *    the tensor cores: truncated alignment per k16 step, up to 8 splits); a wrong index, nibble,
 *    scale or min of one 32-element sub-block moves an output by ~32 / n_in of that sum, 5x
 *    (n_in 14336) to 60x (4096) above it;
 *  - against rf_ref_matmul (f32 x, exact weights): printed, not asserted, beside the rounded x's
 *    own distance to it (the twin's): the twin pins every output within its float-order bound of
 *    the exact value for the rounded x and W, so the f32-x distance is the data's own rounding
 *    error (~0.5% for Gaussian x), which a fixed 1e-2 does not bound: it failed at random on 77
 *    outputs of 512-wide Q5_K rows (rel. L2 0.0101, twin check passed), as test_gpu_gemvn's did.
 * On a mismatch it prints the first bad outputs and a map of the bad ones over the 128 x 128
 * tile (rows / 8 by tokens / 8). Each case runs in every tile configuration (RF_W4A16_CFG 0..3), its stages filled by the tensor copies and by the copy loops (RF_GPU_W4A16_TMA).
 * RF_W4A16_BENCH=1 also times each type x llama3-8b shape x 64/128/256/512 tokens: W4A16 (auto,
 * tiles of 64, of 128, of 64 with the warps split along the chunk) beside MMQ tiles of 64
 * (RF_MMQ_CFG=2) and dequantize + cuBLAS.
 * Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_w4a16: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "core/knobs.h"
#include "gpu_test_common.h"

#include <time.h>

#include "backend/gpu/gpu_route.h"
#include "backend/ref/ref_ops.h"
#include "rocmforge/quant.h"

static const rf_type k_types[] = {RF_TYPE_Q4_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q8_0};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

/* v rounded to the nearest f16 (ties to even), from double (exact: no double rounding) */
static double f16_round(double v) {
    if (v == 0.0 || !isfinite(v)) return v;
    int e;
    frexp(fabs(v), &e);          /* |v| in [2^(e-1), 2^e): 11 significant bits -> ulp 2^(e-11) */
    int ue = e - 11 < -24 ? -24 : e - 11; /* subnormal halves: ulp 2^-24 */
    return ldexp(nearbyint(ldexp(v, -ue)), ue);
}
static double h2d(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return rf_fp16_to_f32(h);
}
static void k4_sm(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
/* one row of W as the kernel's f16 weights */
static void twin_row(rf_type t, const uint8_t *row, int64_t n_in, double *w) {
    if (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q8_0) {
        const int bb = t == RF_TYPE_Q4_0 ? 18 : 34;
        for (int64_t b = 0; b < n_in / 32; b++) {
            const uint8_t *p = row + b * bb;
            const double d = h2d(p);
            for (int i = 0; i < 32; i++) {
                const int q = t == RF_TYPE_Q4_0 ? (i < 16 ? (p[2 + i] & 15) : (p[2 + i - 16] >> 4)) - 8 : (int8_t)p[2 + i];
                w[b * 32 + i] = f16_round(d * q);
            }
        }
        return;
    }
    const bool k5 = t == RF_TYPE_Q5_K; /* else Q4_K */
    for (int64_t s = 0; s < n_in / 256; s++) {
        const uint8_t *p = row + s * (k5 ? 176 : 144);
        const double d = h2d(p), dm = h2d(p + 2);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            k4_sm(j, p + 4, &sc, &m);
            const double fs = f16_round((double)(float)(d * sc)), fm = f16_round((double)(float)(dm * m));
            for (int l = 0; l < 32; l++) {
                const int q = ((p[(k5 ? 48 : 16) + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15) |
                              (k5 ? ((p[16 + l] >> j) & 1) << 4 : 0);
                w[s * 256 + 32 * j + l] = f16_round(q * fs - fm);
            }
        }
    }
}
/* x of one token as the kernel's f16 (rf_gpu_gemm's rounding: int8 per 32, f16 scale) */
static void twin_x(const float *x, int64_t n_in, double *out) {
    for (int64_t g = 0; g < n_in; g += 32) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fabsf(x[g + i]) > amax ? fabsf(x[g + i]) : amax;
        const float d32 = amax / 127.0f, d16 = rf_fp16_to_f32(rf_f32_to_fp16(d32));
        const float d = d16 <= 65504.0f ? d16 : d32;
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int i = 0; i < 32; i++) {
            const float q = rintf(x[g + i] * id);
            out[g + i] = f16_round((double)(q * d));
        }
    }
}

/* the twin's outputs and bounds for the sampled tokens (all rows) */
typedef struct twin {
    int64_t nt, n_in, n_out, samp[16];
    int ns;
    double *want, *bound;
} twin;

static void twin_make(twin *tw, rf_type t, const uint8_t *w, size_t rb, const float *x) {
    const int64_t nt = tw->nt, n_in = tw->n_in, n_out = tw->n_out;
    const int64_t cand[] = {0, 1, 7, 8, 63, 64, 65, 127, 128, nt / 2, nt - 2, nt - 1};
    tw->ns = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        bool dup = cand[i] < 0 || cand[i] >= nt;
        for (int k = 0; k < tw->ns && !dup; k++) dup = tw->samp[k] == cand[i];
        if (!dup) tw->samp[tw->ns++] = cand[i];
    }
    const int ns = tw->ns;
    double *wd = malloc((size_t)n_in * sizeof *wd), *xd = malloc((size_t)ns * n_in * sizeof *xd);
    tw->want = malloc((size_t)ns * n_out * sizeof *tw->want), tw->bound = malloc((size_t)ns * n_out * sizeof *tw->bound);
    assert_non_null(wd), assert_non_null(xd), assert_non_null(tw->want), assert_non_null(tw->bound);
    for (int k = 0; k < ns; k++) twin_x(x + tw->samp[k] * n_in, n_in, xd + (size_t)k * n_in);
    const double ub = 8.0 * ldexp(1.0, -24) * (double)(n_in / 16 + 8);
    for (int64_t o = 0; o < n_out; o++) {
        twin_row(t, w + (size_t)o * rb, n_in, wd);
        for (int k = 0; k < ns; k++) {
            double s = 0, a = 0;
            const double *xk = xd + (size_t)k * n_in;
            for (int64_t i = 0; i < n_in; i++) s += wd[i] * xk[i], a += fabs(wd[i] * xk[i]);
            tw->want[(size_t)k * n_out + o] = s, tw->bound[(size_t)k * n_out + o] = ub * a;
        }
    }
    free(wd), free(xd);
}

/* got (all nt x n_out outputs) against the twin: the count outside the bound, the first ones
 * and a map of them over the 128 x 128 tile printed */
static int twin_check(const twin *tw, const float *got, const char *what) {
    const int64_t n_out = tw->n_out;
    int bad = 0;
    char map[16][17];
    memset(map, '.', sizeof map);
    for (int i = 0; i < 16; i++) map[i][16] = 0;
    double worst = 0;
    for (int k = 0; k < tw->ns; k++)
        for (int64_t o = 0; o < n_out; o++) {
            const size_t i = (size_t)k * n_out + o;
            const double g = got[tw->samp[k] * n_out + o], e = fabs(g - tw->want[i]);
            if (tw->bound[i] > 0 && e / tw->bound[i] > worst) worst = e / tw->bound[i];
            if (!(e <= tw->bound[i])) {
                if (bad < 8)
                    fprintf(stderr, "  bad: token %lld row %lld: got %.9g want %.9g (|err| %.3g > bound %.3g)\n",
                            (long long)tw->samp[k], (long long)o, g, tw->want[i], e, tw->bound[i]);
                map[(o % 128) / 8][(tw->samp[k] % 128) / 8] = 'X';
                bad++;
            }
        }
    fprintf(stderr, "  %-44s vs twin: %d of %lld outside the bound, worst |err|/bound %.3g\n", what, bad,
            (long long)tw->ns * n_out, worst);
    if (bad) {
        fprintf(stderr, "  bad outputs over the 128-row x 128-token tile (rows / 8 down, tokens / 8 across, "
                        "sampled tokens only):\n");
        for (int i = 0; i < 16; i++) fprintf(stderr, "    %3d %s\n", i * 8, map[i]);
    }
    return bad;
}

/* y = W x by W4A16 for nt tokens, in each tile configuration (RF_W4A16_CFG 0..3 unless the
 * knob is set), against the twin and rf_ref_matmul on sampled tokens; every output written;
 * a second call the same bits */
static void run_case(rf_rng *r, rf_type t, int64_t nt, int64_t n_in, int64_t n_out) {
    if (!rf_gpu_w4a16_supported(t, n_in)) return;
    size_t bytes;
    uint8_t *w = random_weights(r, t, n_out, n_in, &bytes);
    float *x = host_f32(nt * n_in), *got = host_f32(nt * n_out), *got2 = host_f32(nt * n_out);
    rf_rng_fill_normal(r, x, nt * n_in, 1.0f);
    twin tw = {.nt = nt, .n_in = n_in, .n_out = n_out};
    twin_make(&tw, t, w, bytes / (size_t)n_out, x);
    const int ns = tw.ns;
    float *xs = host_f32(ns * n_in), *ref = host_f32(ns * n_out), *gs = host_f32(ns * n_out);
    for (int k = 0; k < ns; k++) memcpy(xs + k * n_in, x + tw.samp[k] * n_in, n_in * 4);
    assert_int_equal(rf_ref_matmul(ref, w, t, xs, ns, n_in, n_out), RF_OK);
    void *dw = dev_from(w, bytes);
    float *dx = dev_from(x, nt * n_in * 4), *dy = dev_poison(nt * n_out * 4);
    float *tws = host_f32(ns * n_out);
    for (int64_t i = 0; i < ns * n_out; i++) tws[i] = (float)tw.want[i];
    const double rr = rf_rel_l2(tws, ref, (size_t)(ns * n_out));
    free(tws);
    const bool user_cfg = rf_knob_is_set(RF_KNOB_W4A16_CFG), user_tma = rf_knob_is_set(RF_KNOB_GPU_W4A16_TMA);
    /* each tile configuration with the stages filled by the tensor copies (sm_90) and by the
     * copy loops */
    for (int ci = 0; ci < (user_cfg ? 1 : 4) * (user_tma ? 1 : 2); ci++) {
        const int cfg = user_cfg ? 0 : ci % 4, tma = user_tma ? -1 : ci / 4;
        char v[4];
        snprintf(v, sizeof v, "%d", cfg);
        if (!user_cfg) assert_int_equal(rf_knob_override(RF_KNOB_W4A16_CFG, v), RF_OK);
        if (!user_tma) assert_int_equal(rf_knob_override(RF_KNOB_GPU_W4A16_TMA, tma ? "1" : "0"), RF_OK);
        assert_int_equal(rf_gpu_memset(g_ctx, dy, 0xFF, nt * n_out * 4), RF_OK);
        rf_status st = rf_gpu_w4a16(g_ctx, dy, dw, t, dx, nt, n_in, n_out);
        if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
        assert_int_equal(st, RF_OK);
        dev_to(got, dy, nt * n_out * 4);
        int nan = 0;
        for (int64_t i = 0; i < nt * n_out; i++) nan += isnan(got[i]) != 0;
        if (nan) fprintf(stderr, "  %d outputs not written (NaN poison left)\n", nan);
        char what[96];
        snprintf(what, sizeof what, "w4a16 cfg %d tma %d %s nt=%lld %lldx%lld", user_cfg ? -1 : cfg, tma, rf_type_name(t),
                 (long long)nt, (long long)n_out, (long long)n_in);
        const int bad = twin_check(&tw, got, what);
        for (int k = 0; k < ns; k++) memcpy(gs + k * n_out, got + tw.samp[k] * n_out, n_out * 4);
        /* against the f32 oracle: x's int8 rounding, reported (header) beside the twin's own */
        fprintf(stderr, "  %-44s rel_l2=%.3g from f32 x, the rounded x's own %.3g\n", what,
                rf_rel_l2(gs, ref, (size_t)(ns * n_out)), rr);
        assert_int_equal(nan, 0);
        assert_int_equal(bad, 0);
        assert_int_equal(rf_gpu_memset(g_ctx, dy, 0xFF, nt * n_out * 4), RF_OK);
        assert_int_equal(rf_gpu_w4a16(g_ctx, dy, dw, t, dx, nt, n_in, n_out), RF_OK);
        dev_to(got2, dy, nt * n_out * 4);
        assert_memory_equal(got, got2, nt * n_out * 4);
    }
    if (!user_cfg) assert_int_equal(rf_knob_override(RF_KNOB_W4A16_CFG, NULL), RF_OK);
    if (!user_tma) assert_int_equal(rf_knob_override(RF_KNOB_GPU_W4A16_TMA, NULL), RF_OK);
    rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
    free(w), free(x), free(got), free(got2), free(tw.want), free(tw.bound), free(xs), free(ref), free(gs);
}

static void test_w4a16_vs_twin(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 31);
    /* n_out, n_in, tokens: real widths at 64 / 256 tokens (tiles of 64, of 128, splits), rows and
     * tokens past a tile, one chunk of 256, a long row split 8 ways, 512 tokens */
    const int64_t cases[][3] = {{4096, 4096, 64}, {4096, 4096, 256}, {300, 1024, 129}, {131, 256, 65},
                                {1000, 14336, 96}, {200, 4096, 512}, {6144, 4096, 100}, {77, 512, 1}};
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            run_case(&r, k_types[ti], cases[c][2], cases[c][1], cases[c][0]);
}

/* what the router does with the knob: by default (auto) 97..192 tokens, so not 256;
 * RF_GPU_W4A16=1 sends the products past RF_GPU_W4A16_MIN tokens of the types it takes to W4A16,
 * and rf_gpu_matmul gives its bits */
static void test_w4a16_route(void **state) {
    (void)state;
    if (rf_knob_is_set(RF_KNOB_GPU_W4A16)) {
        fprintf(stderr, "  test_w4a16_route: skipped, RF_GPU_W4A16 is set\n");
        return;
    }
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 32);
    const int64_t n_in = 4096, n_out = 512, nt = 256;
    size_t bytes;
    uint8_t *w = random_weights(&r, RF_TYPE_Q4_0, n_out, n_in, &bytes);
    float *x = host_f32(nt * n_in), *a = host_f32(nt * n_out), *b = host_f32(nt * n_out);
    rf_rng_fill_normal(&r, x, nt * n_in, 1.0f);
    void *dw = dev_from(w, bytes);
    float *dx = dev_from(x, nt * n_in * 4), *dy = dev_poison(nt * n_out * 4);
    fprintf(stderr, "  route of q4_0 128 tokens, knob unset: %s\n",
            rf_gpu_route_name(rf_gpu_route_for(g_ctx, RF_TYPE_Q4_0, 128, n_in, n_out)));
    assert_int_equal(rf_gpu_route_for(g_ctx, RF_TYPE_Q4_0, 128, n_in, n_out), RF_ROUTE_W4A16);
    fprintf(stderr, "  route of q4_0 %lld tokens, knob unset: %s\n", (long long)nt,
            rf_gpu_route_name(rf_gpu_route_for(g_ctx, RF_TYPE_Q4_0, nt, n_in, n_out)));
    assert_int_not_equal(rf_gpu_route_for(g_ctx, RF_TYPE_Q4_0, nt, n_in, n_out), RF_ROUTE_W4A16);
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_W4A16, "1"), RF_OK);
    const rf_gpu_route_kind k = rf_gpu_route_for(g_ctx, RF_TYPE_Q4_0, nt, n_in, n_out);
    fprintf(stderr, "  route with RF_GPU_W4A16=1: %s\n", rf_gpu_route_name(k));
    assert_int_equal(k, RF_ROUTE_W4A16);
    assert_true(rf_gpu_matmul_rounds_x(g_ctx, RF_TYPE_Q4_0, nt, n_in));
    assert_int_equal(rf_gpu_matmul(g_ctx, dy, dw, RF_TYPE_Q4_0, dx, nt, n_in, n_out), RF_OK);
    dev_to(a, dy, nt * n_out * 4);
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_W4A16, NULL), RF_OK);
    assert_int_equal(rf_gpu_w4a16(g_ctx, dy, dw, RF_TYPE_Q4_0, dx, nt, n_in, n_out), RF_OK);
    dev_to(b, dy, nt * n_out * 4);
    assert_memory_equal(a, b, nt * n_out * 4);
    rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
    free(w), free(x), free(a), free(b);
}

/* ---- RF_W4A16_BENCH=1: us per call (host clock over synchronized runs, the weights rotating
 * among copies of > 200 MB so each call reads them from device memory), TOPS = 2 nt n_in n_out / t */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* path 0: W4A16; 1: MMQ (tiles of 64: RF_MMQ_CFG=2, set by the caller); 2: dequantize + cuBLAS */
static rf_status bench_call(int path, float *y, void *w, rf_type t, const float *x, int64_t nt, int64_t n_in,
                            int64_t n_out) {
    if (path == 0) return rf_gpu_w4a16(g_ctx, y, w, t, x, nt, n_in, n_out);
    if (path == 1) return rf_gpu_mmq(g_ctx, y, w, t, x, nt, n_in, n_out);
    return rf_gpu_gemm(g_ctx, y, w, t, x, nt, n_in, n_out);
}
static void bench(void) {
    const bool cfg_set = rf_knob_is_set(RF_KNOB_W4A16_CFG); /* a measurement's own choice: kept */
    const int64_t shapes[][2] = {{4096, 4096}, {4096, 6144}, {4096, 28672}, {14336, 4096}}; /* n_in, n_out */
    const int64_t nts[] = {64, 128, 256, 512};
    fprintf(stderr, "  %-6s %-12s %4s  %9s %5s  %9s %5s  %9s %5s  %9s %5s  %9s %5s  %9s %5s\n", "type", "n_out x n_in",
            "tok", "w4a16 us", "TOPS", "w4a-64 us", "TOPS", "w4a-128", "TOPS", "w4a-64k", "TOPS", "mmq2 us", "TOPS",
            "gemm us", "TOPS");
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const rf_type t = k_types[ti];
            const int64_t n_in = shapes[si][0], n_out = shapes[si][1];
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
                for (int c = 0; c < 6; c++) { /* W4A16 auto, tiles of 64, 128, 64 split; MMQ; dequantize + cuBLAS */
                    const int p = c < 4 ? 0 : c - 3;
                    if (!cfg_set && c < 4) {
                        char v[4];
                        snprintf(v, sizeof v, "%d", c);
                        assert_int_equal(rf_knob_override(RF_KNOB_W4A16_CFG, v), RF_OK);
                    }
                    if (p == 1 && !rf_gpu_mmq_supported(t, n_in)) {
                        fprintf(stderr, "  %9s %5s", "-", "-");
                        continue;
                    }
                    const int reps = nmat * (8 > 64 / nmat ? 8 : 64 / nmat);
                    for (int i = 0; i < nmat; i++) assert_int_equal(bench_call(p, y, w[i], t, x, nt, n_in, n_out), RF_OK);
                    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                    const double t0 = now_s();
                    for (int i = 0; i < reps; i++) assert_int_equal(bench_call(p, y, w[i % nmat], t, x, nt, n_in, n_out), RF_OK);
                    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                    const double us = (now_s() - t0) / reps * 1e6;
                    fprintf(stderr, "  %9.1f %5.0f", us, 2.0 * nt * n_in * n_out / us * 1e-6);
                }
                fprintf(stderr, "\n");
            }
            for (int i = 0; i < nmat; i++) rf_gpu_free(g_ctx, w[i]);
            rf_gpu_free(g_ctx, x), rf_gpu_free(g_ctx, y);
        }
    if (!cfg_set) assert_int_equal(rf_knob_override(RF_KNOB_W4A16_CFG, NULL), RF_OK);
}

static void test_w4a16_bench(void **state) {
    (void)state;
    if (!getenv("RF_W4A16_BENCH")) return;
    const bool cfg_set = rf_knob_is_set(RF_KNOB_MMQ_CFG);
    if (!cfg_set) assert_int_equal(rf_knob_override(RF_KNOB_MMQ_CFG, "2"), RF_OK);
    bench();
    if (!cfg_set) assert_int_equal(rf_knob_override(RF_KNOB_MMQ_CFG, NULL), RF_OK);
}

int main(void) {
    gpu_test_init_or_skip("test_gpu_w4a16");
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_w4a16_vs_twin),
        cmocka_unit_test(test_w4a16_route),
        cmocka_unit_test(test_w4a16_bench),
    };
    const struct CMUnitTest just_bench[] = {cmocka_unit_test(test_w4a16_bench)};
    const int rc = getenv("RF_W4A16_BENCH_ONLY") ? cmocka_run_group_tests(just_bench, NULL, NULL)
                                                 : cmocka_run_group_tests(all, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
