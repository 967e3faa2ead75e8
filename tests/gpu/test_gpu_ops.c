/* test_gpu_ops.c — elementwise, norm, softmax, mask and GLU kernels against their CPU twins
 * (backend/ref) on fresh random inputs (seed printed), outputs poisoned first, several shapes
 * including length 1 and sizes that are not a multiple of the block; NaN/inf cases.
 * Tolerance: f32 rel. L2 < 1e-5. The RoPE and KV-cache kernels: test_gpu_rope.c. Skips (77)
 * without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_ops: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_test_common.h"

#include "backend/backend.h"
#include "core/test_hooks.h"
#include "backend/ref/ref_ops.h"

static const int64_t k_sizes[] = {1, 7, 31, 256, 1000, 4097, 6144, 16384};
#define N_SIZES (sizeof k_sizes / sizeof k_sizes[0])

static void test_elementwise(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    for (size_t si = 0; si < N_SIZES; si++) {
        const int64_t n = k_sizes[si] * 3;
        float *a = host_f32(n), *b = host_f32(n), *want = host_f32(n), *got = host_f32(n);
        rf_rng_fill_normal(&r, a, n, 2.0f);
        rf_rng_fill_normal(&r, b, n, 2.0f);
        float *da = dev_from(a, n * 4), *db = dev_from(b, n * 4), *dy = dev_poison(n * 4);
        char what[96];
#define EW(name, gpu_call, ref_call)                                                           \
    do {                                                                                       \
        assert_int_equal(rf_gpu_memset(g_ctx, dy, 0xFF, n * 4), RF_OK);                        \
        assert_int_equal(gpu_call, RF_OK);                                                     \
        ref_call;                                                                              \
        dev_to(got, dy, n * 4);                                                                \
        snprintf(what, sizeof what, "%s n=%lld", name, (long long)n);                          \
        check_rel(what, got, want, n, 1e-5);                                                   \
    } while (0)
        EW("scale", rf_gpu_scale(g_ctx, dy, da, 0.37f, n), rf_ref_scale(want, a, 0.37f, n));
        EW("add", rf_gpu_add(g_ctx, dy, da, db, n), rf_ref_add(want, a, b, n));
        EW("mul", rf_gpu_mul(g_ctx, dy, da, db, n), rf_ref_mul(want, a, b, n));
        EW("swiglu", rf_gpu_swiglu(g_ctx, dy, da, db, n), rf_ref_swiglu(want, a, b, n));
        EW("geglu", rf_gpu_geglu(g_ctx, dy, da, db, n), rf_ref_geglu(want, a, b, n));
        EW("swiglu_oai", rf_gpu_swiglu_oai(g_ctx, dy, da, n, db, n, 1, n), rf_ref_swiglu_oai(want, a, b, n));
#undef EW
        { /* swiglu_oai over 3 rows of m / 2 + 1 elements read at row stride m (a joined gate/up's halves) */
            const int64_t m = k_sizes[si], w = m / 2 + 1;
            assert_int_equal(rf_gpu_swiglu_oai(g_ctx, dy, da, m, db, m, 3, w), RF_OK);
            for (int64_t rr = 0; rr < 3; rr++) rf_ref_swiglu_oai(want + rr * w, a + rr * m, b + rr * m, w);
            dev_to(got, dy, (size_t)(3 * w) * 4);
            snprintf(what, sizeof what, "swiglu_oai rows 3 x %lld stride %lld", (long long)w, (long long)m);
            check_rel(what, got, want, (size_t)(3 * w), 1e-5);
        }
        /* in place (y aliases a) */
        assert_int_equal(rf_gpu_add(g_ctx, da, da, db, n), RF_OK);
        rf_ref_add(want, a, b, n);
        dev_to(got, da, n * 4);
        check_rel("add in place", got, want, n, 1e-5);
        rf_gpu_free(g_ctx, da), rf_gpu_free(g_ctx, db), rf_gpu_free(g_ctx, dy);
        free(a), free(b), free(want), free(got);
    }
}

static void test_norms_softmax(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 1);
    const int64_t rows_list[] = {1, 3, 17};
    for (size_t si = 0; si < N_SIZES; si++)
        for (size_t ri = 0; ri < 3; ri++) {
            const int64_t n = k_sizes[si], rows = rows_list[ri], tot = n * rows;
            float *x = host_f32(tot), *w = host_f32(n), *b = host_f32(n), *want = host_f32(tot),
                  *got = host_f32(tot);
            rf_rng_fill_normal(&r, x, tot, 3.0f);
            rf_rng_fill_normal(&r, w, n, 1.0f);
            rf_rng_fill_normal(&r, b, n, 1.0f);
            float *dx = dev_from(x, tot * 4), *dw = dev_from(w, n * 4), *db = dev_from(b, n * 4);
            float *dy = dev_poison(tot * 4);
            char what[96];
            snprintf(what, sizeof what, "rmsnorm %lldx%lld", (long long)rows, (long long)n);
            assert_int_equal(rf_gpu_rmsnorm(g_ctx, dy, dx, dw, rows, n, 1e-6f), RF_OK);
            rf_ref_rmsnorm(want, x, w, rows, n, 1e-6f);
            dev_to(got, dy, tot * 4);
            check_rel(what, got, want, tot, 1e-5);
            snprintf(what, sizeof what, "rmsnorm no-w %lldx%lld", (long long)rows, (long long)n);
            assert_int_equal(rf_gpu_rmsnorm(g_ctx, dy, dx, NULL, rows, n, 1e-6f), RF_OK);
            rf_ref_rmsnorm(want, x, NULL, rows, n, 1e-6f);
            dev_to(got, dy, tot * 4);
            check_rel(what, got, want, tot, 1e-5);
            for (int variant = 0; variant < 3; variant++) {
                const float *ww = variant == 2 ? NULL : w, *bb = variant >= 1 ? NULL : b;
                snprintf(what, sizeof what, "layernorm%s %lldx%lld",
                         variant == 0 ? " w+b" : variant == 1 ? " w" : "", (long long)rows,
                         (long long)n);
                assert_int_equal(rf_gpu_memset(g_ctx, dy, 0xFF, tot * 4), RF_OK);
                assert_int_equal(rf_gpu_layernorm(g_ctx, dy, dx, ww ? dw : NULL, bb ? db : NULL,
                                                  rows, n, 1e-5f),
                                 RF_OK);
                rf_ref_layernorm(want, x, ww, bb, rows, n, 1e-5f);
                dev_to(got, dy, tot * 4);
                check_rel(what, got, want, tot, 1e-5);
            }
            snprintf(what, sizeof what, "softmax %lldx%lld", (long long)rows, (long long)n);
            assert_int_equal(rf_gpu_softmax(g_ctx, dy, dx, rows, n, 0.8f), RF_OK);
            rf_ref_softmax(want, x, rows, n, 0.8f);
            dev_to(got, dy, tot * 4);
            check_rel(what, got, want, tot, 1e-5);
            /* in place */
            assert_int_equal(rf_gpu_softmax(g_ctx, dx, dx, rows, n, 0.8f), RF_OK);
            dev_to(got, dx, tot * 4);
            check_rel("softmax in place", got, want, tot, 1e-5);
            rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, db);
            rf_gpu_free(g_ctx, dy);
            free(x), free(w), free(b), free(want), free(got);
        }
}

static void test_softmax_special(void **state) {
    (void)state;
    /* rows: all -inf -> zeros; one NaN -> NaN row; +inf -> mass on the infs; masked entries */
    enum { N = 5 };
    float x[4 * N] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                      1, 2, NAN, 3, 4,
                      INFINITY, 1, INFINITY, -INFINITY, 0,
                      1000, -INFINITY, 1000, 999, -1000};
    float want[4 * N], got[4 * N];
    rf_ref_softmax(want, x, 4, N, 1.0f);
    float *dx = dev_from(x, sizeof x), *dy = dev_poison(sizeof x);
    assert_int_equal(rf_gpu_softmax(g_ctx, dy, dx, 4, N, 1.0f), RF_OK);
    dev_to(got, dy, sizeof got);
    for (int i = 0; i < N; i++) assert_true(got[i] == 0.0f);
    for (int i = N; i < 2 * N; i++) assert_true(isnan(got[i]));
    for (int i = 2 * N; i < 4 * N; i++) {
        fprintf(stderr, "  softmax special [%d] got %g want %g\n", i, got[i], want[i]);
        assert_true(fabsf(got[i] - want[i]) < 1e-6f);
    }
    rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy);
}

static void test_causal_mask(void **state) {
    (void)state;
    const int64_t shapes[][4] = {{1, 1, 0, 0}, {3, 5, 2, 0}, {7, 40, 30, 4}, {33, 33, 0, 0}, {5, 300, 290, 17}};
    for (size_t s = 0; s < 5; s++) {
        const int64_t nq = shapes[s][0], nkv = shapes[s][1], pos0 = shapes[s][2], win = shapes[s][3];
        float *x = host_f32(nq * nkv), *want = host_f32(nq * nkv), *got = host_f32(nq * nkv);
        for (int64_t i = 0; i < nq * nkv; i++) x[i] = want[i] = (float)i;
        rf_ref_causal_mask(want, nq, nkv, pos0, win);
        float *dx = dev_from(x, nq * nkv * 4);
        assert_int_equal(rf_gpu_causal_mask(g_ctx, dx, nq, nkv, pos0, win), RF_OK);
        dev_to(got, dx, nq * nkv * 4);
        assert_memory_equal(got, want, nq * nkv * 4);
        rf_gpu_free(g_ctx, dx);
        free(x), free(want), free(got);
    }
}

/* the outputs of two ways of making a product's input the same bits: h (tot floats) and the used
 * bytes of xq (int8 x, then the records after the 256-byte-aligned int8 part: the padding between
 * them is never written by either). Leaves h1 in a, h2 in b, q1 in qa, q2 in qb (xb bytes). */
static void same_h_xq(const float *h1, const float *h2, const void *q1, const void *q2, int64_t tot, size_t xb,
                      float *a, float *b, uint8_t *qa, uint8_t *qb) {
    const size_t nq = (size_t)tot, rec = (nq + 255) & ~(size_t)255;
    dev_to(a, h1, nq * 4);
    dev_to(b, h2, nq * 4);
    assert_memory_equal(a, b, nq * 4);
    dev_to(qa, q1, xb);
    dev_to(qb, q2, xb);
    assert_memory_equal(qa, qb, nq);
    assert_memory_equal(qa + rec, qb + rec, xb - rec);
}

static void rmsnorm_quantize_cases(void);
static void test_rmsnorm_quantize_fused(void **state) {
    (void)state;
    rmsnorm_quantize_cases();
    /* the norm on one block a row where a cluster of blocks would run (the test hook): the same bits */
    rf_test_hooks h = {0};
    h.gpu_norm_nocl = true;
    rf_test_hooks_set(&h);
    rmsnorm_quantize_cases();
    rf_test_hooks_set(NULL);
}
static void rmsnorm_quantize_cases(void) {
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 7);
    const struct { rf_type t; int64_t n; } cases[] = {
        {RF_TYPE_Q4_0, 4096}, {RF_TYPE_Q8_0, 2048}, {RF_TYPE_Q4_1, 4096}, {RF_TYPE_Q4_K, 4096},
        {RF_TYPE_Q5_0, 14336}, {RF_TYPE_Q4_0, 576}, {RF_TYPE_Q8_0, 16384},
        /* a 70B's width (a cluster of 8 blocks a row on sm_90) and gpt-oss's (3 blocks, the last
         * one partly past the row) */
        {RF_TYPE_Q4_0, 8192}, {RF_TYPE_Q8_0, 2880},
        {RF_TYPE_Q6_K, 12288}, {RF_TYPE_Q5_K, 2560}, {RF_TYPE_Q4_K, 8192},
    };
    const int nts[] = {1, 3, 32};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t ni = 0; ni < sizeof nts / sizeof *nts; ni++)
            for (int withw = 0; withw < 2; withw++) {
                const int nt = nts[ni];
                const int64_t n = cases[c].n, tot = n * nt;
                if (!rf_gpu_gemv_has_xq(g_ctx, cases[c].t, nt, n)) continue;
                float *x = host_f32(tot), *w = host_f32(n);
                rf_rng_fill_normal(&r, x, tot, 2.0f);
                rf_rng_fill_normal(&r, w, n, 1.0f);
                float *dx = dev_from(x, tot * 4), *dw = withw ? dev_from(w, n * 4) : NULL;
                float *h1 = dev_poison(tot * 4), *h2 = dev_poison(tot * 4);
                const size_t xb = rf_gpu_xq_bytes(nt, n);
                void *q1 = dev_poison(xb), *q2 = dev_poison(xb);
                assert_int_equal(rf_gpu_rmsnorm(g_ctx, h1, dx, dw, nt, n, 1e-5f), RF_OK);
                assert_int_equal(rf_gpu_quantize_x(g_ctx, q1, cases[c].t, h1, nt, n), RF_OK);
                assert_int_equal(rf_gpu_rmsnorm_quantize_x(g_ctx, h2, q2, cases[c].t, dx, NULL, dw, nt, n, 1e-5f), RF_OK);
                float *a = host_f32(tot), *b = host_f32(tot);
                uint8_t *qa = malloc(xb), *qb = malloc(xb);
                same_h_xq(h1, h2, q1, q2, tot, xb, a, b, qa, qb);
                /* h written over x (no residual): no block of a row may still read x while
                 * another writes its slice */
                {
                    float *dxs = dev_from(x, tot * 4);
                    assert_int_equal(rf_gpu_rmsnorm_quantize_x(g_ctx, dxs, q2, cases[c].t, dxs, NULL, dw, nt, n, 1e-5f), RF_OK);
                    same_h_xq(h1, dxs, q1, q2, tot, xb, a, b, qa, qb);
                    rf_gpu_free(g_ctx, dxs);
                }
                /* with the residual add: x + r formed in the norm's kernel and written back,
                 * against rf_gpu_add then the norm (and rf_gpu_add_rmsnorm without quantizing) */
                {
                    float *dxa = dev_from(x, tot * 4), *dxb = dev_from(x, tot * 4), *dxc = dev_from(x, tot * 4);
                    float *rr = host_f32(tot);
                    rf_rng_fill_normal(&r, rr, tot, 1.0f);
                    float *dr = dev_from(rr, tot * 4);
                    assert_int_equal(rf_gpu_add(g_ctx, dxa, dxa, dr, tot), RF_OK);
                    assert_int_equal(rf_gpu_rmsnorm(g_ctx, h1, dxa, dw, nt, n, 1e-5f), RF_OK);
                    assert_int_equal(rf_gpu_quantize_x(g_ctx, q1, cases[c].t, h1, nt, n), RF_OK);
                    assert_int_equal(rf_gpu_rmsnorm_quantize_x(g_ctx, h2, q2, cases[c].t, dxb, dr, dw, nt, n, 1e-5f), RF_OK);
                    same_h_xq(h1, h2, q1, q2, tot, xb, a, b, qa, qb);
                    dev_to(a, dxa, tot * 4);
                    dev_to(b, dxb, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    assert_int_equal(rf_gpu_add_rmsnorm(g_ctx, h2, dxc, dr, dw, nt, n, 1e-5f), RF_OK);
                    dev_to(b, dxc, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    dev_to(a, h1, tot * 4);
                    dev_to(b, h2, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    rf_gpu_free(g_ctx, dxa), rf_gpu_free(g_ctx, dxb), rf_gpu_free(g_ctx, dxc), rf_gpu_free(g_ctx, dr);
                    free(rr);
                }
                /* the residual as a product's split-K partial sums (2, 5, 8 of them), added in the
                 * norm's kernel: against rf_gpu_sum_parts (itself against the host's sum in the
                 * same order) then the norm with that residual; h, xq and x the same bits */
                for (int np = 2; np <= 8; np += 3) {
                    float *pp = host_f32(tot * np), *sum = host_f32(tot), *got = host_f32(tot);
                    rf_rng_fill_normal(&r, pp, tot * np, 1.0f);
                    for (int64_t i = 0; i < tot; i++) {
                        float acc = pp[i];
                        for (int j = 1; j < np; j++) acc += pp[(int64_t)j * tot + i];
                        sum[i] = acc;
                    }
                    float *dp = dev_from(pp, tot * np * 4), *dr = dev_poison(tot * 4);
                    float *dxa = dev_from(x, tot * 4), *dxb = dev_from(x, tot * 4);
                    assert_int_equal(rf_gpu_sum_parts(g_ctx, dr, dp, tot, np), RF_OK);
                    dev_to(got, dr, tot * 4);
                    assert_memory_equal(got, sum, tot * 4);
                    assert_int_equal(rf_gpu_rmsnorm_quantize_x(g_ctx, h1, q1, cases[c].t, dxa, dr, dw, nt, n, 1e-5f), RF_OK);
                    assert_int_equal(rf_gpu_rmsnorm_quantize_x_parts(g_ctx, h2, q2, cases[c].t, dxb, dp, np, dw, nt, n,
                                                                     1e-5f), RF_OK);
                    same_h_xq(h1, h2, q1, q2, tot, xb, a, b, qa, qb);
                    dev_to(a, dxa, tot * 4);
                    dev_to(b, dxb, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    rf_gpu_free(g_ctx, dp), rf_gpu_free(g_ctx, dr), rf_gpu_free(g_ctx, dxa), rf_gpu_free(g_ctx, dxb);
                    free(pp), free(sum), free(got);
                }
                /* the GLU fused with the quantization, against rf_gpu_swiglu / geglu then
                 * rf_gpu_quantize_x: x as gate, w's row repeated as up */
                for (int geglu = 0; geglu < 2; geglu++) {
                    float *dup = dev_from(x, tot * 4);
                    assert_int_equal((geglu ? rf_gpu_geglu : rf_gpu_swiglu)(g_ctx, h1, dx, dup, tot), RF_OK);
                    assert_int_equal(rf_gpu_quantize_x(g_ctx, q1, cases[c].t, h1, nt, n), RF_OK);
                    assert_int_equal(rf_gpu_glu_quantize_x(g_ctx, h2, q2, cases[c].t, geglu, dx, n, dup, n, nt, n), RF_OK);
                    same_h_xq(h1, h2, q1, q2, tot, xb, a, b, qa, qb);
                    /* gate and up as the halves of joined [gate | up] rows (stride 2n): the
                     * fused kernel and rf_gpu_glu_rows give the packed results above */
                    float *jh = host_f32(2 * tot);
                    for (int t = 0; t < nt; t++) {
                        memcpy(jh + (size_t)t * 2 * n, x + (size_t)t * n, n * 4);
                        memcpy(jh + (size_t)t * 2 * n + n, x + (size_t)t * n, n * 4);
                    }
                    float *dj = dev_from(jh, 2 * tot * 4);
                    assert_int_equal(rf_gpu_glu_quantize_x(g_ctx, h2, q2, cases[c].t, geglu, dj, 2 * n, dj + n, 2 * n, nt, n),
                                     RF_OK);
                    same_h_xq(h1, h2, q1, q2, tot, xb, a, b, qa, qb);
                    assert_int_equal(rf_gpu_glu_rows(g_ctx, h2, dj, 2 * n, dj + n, 2 * n, nt, n, geglu), RF_OK);
                    dev_to(b, h2, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    rf_gpu_free(g_ctx, dj);
                    free(jh);
                    rf_gpu_free(g_ctx, dup);
                }
                rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, h1), rf_gpu_free(g_ctx, h2);
                rf_gpu_free(g_ctx, q1), rf_gpu_free(g_ctx, q2);
                free(x), free(w), free(a), free(b), free(qa), free(qb);
            }
}

/* x per 256 (the MMQ's x for K-quant weights, 32 tokens): a NaN in one super-block makes that
 * super-block's scale NaN in all 8 of its records (it must reach y) and no other's. */
static void test_quantize_x256_nan(void **state) {
    (void)state;
    const int nt = 32;
    const int64_t n = 512;
    int gb, rk;
    if (rf_gpu_xq_layout(g_ctx, RF_TYPE_Q4_K, nt, n, &gb, &rk) != RF_OK || rk != 3) {
        fprintf(stderr, "  skipped: Q4_K at %d tokens does not take x per 256 here\n", nt);
        return;
    }
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 41);
    float *x = host_f32(nt * n);
    rf_rng_fill_normal(&r, x, nt * n, 1.0f);
    x[5 * n + 300] = NAN;
    float *dx = dev_from(x, nt * n * 4);
    const size_t xb = rf_gpu_xq_bytes(nt, n), rec = ((size_t)nt * n + 255) & ~(size_t)255;
    void *xq = dev_poison(xb);
    assert_int_equal(rf_gpu_quantize_x(g_ctx, xq, RF_TYPE_Q4_K, dx, nt, n), RF_OK);
    uint8_t *h = malloc(xb);
    dev_to(h, xq, xb);
    const float *d = (const float *)(h + rec); /* float4 records: d first */
    for (int64_t b = 0; b < nt * n / 32; b++) {
        const bool poisoned = b >= (5 * n + 256) / 32 && b < (6 * n) / 32;
        assert_int_equal(isnan(d[4 * b]) != 0, poisoned);
    }
    rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, xq);
    free(x), free(h);
}

/* rf_gpu_add_norm (gemma4's post-norm, residual add, layer scale and next norm in one kernel)
 * against the ops it replaces, run one by one (rf_gpu_rmsnorm, rf_gpu_add, rf_gpu_scale,
 * rf_gpu_rmsnorm, rf_gpu_scale): x, o and y bit for bit (its kernel rounds each step apart, as
 * they do), with and without o, y, the gains and the scales; rows of 1 .. 16384, 1 and 3 rows.
 * Each of those ops is checked against its CPU twin above. */
static void test_add_norm_fused(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 11);
    const int64_t ns[] = {1, 7, 1000, 2816, 4097, 16384};
    const struct { bool o, wo, y, wy; float s, sy; } cs[] = {
        {true, true, true, true, 1.0f, 1.0f},      /* attention post-norm + add + FFN norm */
        {true, true, true, true, 0.71f, 1.0f},     /* the layer's last add, its scale, the next norm */
        {true, true, false, false, 1.0f, 1.0f},    /* o += post_norm_2(h) */
        {true, true, false, false, 1.7f, 1.0f},    /* the last layer: no next norm */
        {false, false, true, true, 1.0f, 0.0189f}, /* the router's input: norm and 1/sqrt(n) */
        {true, false, true, false, 1.3f, 2.0f},    /* no gains */
    };
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
        for (int64_t rows = 1; rows <= 3; rows += 2)
            for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
                const int64_t n = ns[ni], tot = rows * n;
                float *x = host_f32(tot), *o = host_f32(tot), *wo = host_f32(n), *wy = host_f32(n);
                rf_rng_fill_normal(&r, x, tot, 2.0f);
                rf_rng_fill_normal(&r, o, tot, 1.0f);
                rf_rng_fill_normal(&r, wo, n, 1.0f);
                rf_rng_fill_normal(&r, wy, n, 1.0f);
                float *dx1 = dev_from(x, tot * 4), *dx2 = dev_from(x, tot * 4);
                float *do1 = dev_from(o, tot * 4), *do2 = dev_from(o, tot * 4);
                float *dwo = cs[c].wo ? dev_from(wo, n * 4) : NULL, *dwy = cs[c].wy ? dev_from(wy, n * 4) : NULL;
                float *dy1 = dev_poison(tot * 4), *dy2 = dev_poison(tot * 4);
                if (cs[c].o) { /* the ops one by one */
                    assert_int_equal(rf_gpu_rmsnorm(g_ctx, do1, do1, dwo, rows, n, 1e-6f), RF_OK);
                    assert_int_equal(rf_gpu_add(g_ctx, dx1, dx1, do1, tot), RF_OK);
                    if (cs[c].s != 1.0f) assert_int_equal(rf_gpu_scale(g_ctx, dx1, dx1, cs[c].s, tot), RF_OK);
                }
                if (cs[c].y) {
                    assert_int_equal(rf_gpu_rmsnorm(g_ctx, dy1, dx1, dwy, rows, n, 1e-6f), RF_OK);
                    if (cs[c].sy != 1.0f) assert_int_equal(rf_gpu_scale(g_ctx, dy1, dy1, cs[c].sy, tot), RF_OK);
                }
                assert_int_equal(rf_gpu_add_norm(g_ctx, dx2, cs[c].o ? do2 : NULL, dwo, cs[c].s, cs[c].y ? dy2 : NULL,
                                                 dwy, cs[c].sy, rows, n, 1e-6f),
                                 RF_OK);
                float *a = host_f32(tot), *b = host_f32(tot);
                float *pairs[3][2] = {{dx1, dx2}, {do1, do2}, {dy1, dy2}};
                for (int k = 0; k < 3; k++) {
                    if (k == 2 && !cs[c].y) continue;
                    dev_to(a, pairs[k][0], tot * 4);
                    dev_to(b, pairs[k][1], tot * 4);
                    if (memcmp(a, b, tot * 4))
                        fprintf(stderr, "  add_norm n=%lld rows=%lld case %zu: %s differs\n", (long long)n,
                                (long long)rows, c, k == 0 ? "x" : k == 1 ? "o" : "y");
                    assert_memory_equal(a, b, tot * 4);
                }
                rf_gpu_free(g_ctx, dx1), rf_gpu_free(g_ctx, dx2), rf_gpu_free(g_ctx, do1), rf_gpu_free(g_ctx, do2);
                rf_gpu_free(g_ctx, dwo), rf_gpu_free(g_ctx, dwy), rf_gpu_free(g_ctx, dy1), rf_gpu_free(g_ctx, dy2);
                free(x), free(o), free(wo), free(wy), free(a), free(b);
            }
    /* y aliasing x or o, a scale without o: refused */
    assert_int_equal(rf_gpu_add_norm(g_ctx, (float *)16, (float *)32, NULL, 1.0f, (float *)16, NULL, 1.0f, 1, 8, 1e-6f),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_add_norm(g_ctx, (float *)16, NULL, NULL, 2.0f, (float *)48, NULL, 1.0f, 1, 8, 1e-6f),
                     RF_ERR_INVALID_ARG);
}

static void test_errors(void **state) {
    (void)state;
    assert_int_equal(rf_gpu_softmax(g_ctx, NULL, NULL, 1, 0, 1.0f), RF_ERR_INVALID_ARG);
    assert_non_null(strstr(rf_last_error(), "rf_gpu_softmax"));
    void *p = NULL;
    if (getenv("RF_TEST_NO_OOM")) return; /* compute-sanitizer counts the deliberate OOM */
    assert_int_equal(rf_gpu_alloc(g_ctx, (size_t)1 << 50, &p), RF_ERR_OOM);
    fprintf(stderr, "  OOM message: %s\n", rf_last_error());
    assert_non_null(strstr(rf_last_error(), "free"));
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK); /* the failed allocation left no sticky error */
}

/* op info: the device's name and ordinal, memory that adds up, and a download counted once */
static void test_backend_info(void **state) {
    (void)state;
    assert_true(rf_gpu_built());
    assert_true(rf_gpu_device_count() >= 1);
    rf_backend *be = NULL;
    assert_int_equal(rf_backend_gpu_new(0, &be), RF_OK);
    rf_backend_info a = {0}, b = {0};
    assert_int_equal(be->ops->info(be, true, &a), RF_OK);
    fprintf(stderr, "  info: %s (GPU %d), %.0f of %.0f MiB free\n", a.name, a.device, a.mem_free / 1048576.0,
            a.mem_total / 1048576.0);
    assert_non_null(a.name);
    assert_true(a.name[0] != 0);
    assert_string_equal(a.name, rf_backend_gpu_name(be));
    assert_int_equal(a.device, 0);
    assert_true(a.mem_total > 0 && a.mem_free <= a.mem_total);
    assert_true(a.mem_used == a.mem_total - a.mem_free);
    rf_tensor t;
    float host[64];
    assert_int_equal(be->ops->alloc(be, RF_TYPE_F32, 64, 1, &t), RF_OK);
    assert_int_equal(be->ops->read_rows(be, &t, 0, 1, host), RF_OK);
    assert_int_equal(be->ops->info(be, false, &b), RF_OK);
    assert_true(b.downloads == a.downloads + 1 && b.uploads == a.uploads && b.launches == a.launches);
    assert_true(b.mem_total == 0 && b.mem_free == 0); /* not asked for */
    be->ops->free(be, &t);
    be->ops->destroy(be);
}

int main(void) {
    gpu_test_init_or_skip("test_gpu_ops");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise),   cmocka_unit_test(test_norms_softmax),
        cmocka_unit_test(test_softmax_special), cmocka_unit_test(test_causal_mask),
        cmocka_unit_test(test_rmsnorm_quantize_fused), cmocka_unit_test(test_quantize_x256_nan),
        cmocka_unit_test(test_add_norm_fused),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_backend_info),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
