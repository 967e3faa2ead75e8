/* test_gpu_ops.c — elementwise, norm, softmax, mask, GLU and RoPE kernels against their CPU twins
 * (backend/ref) on fresh random inputs (seed printed), outputs poisoned first, several shapes
 * including length 1 and sizes that are not a multiple of the block; NaN/inf cases.
 * Tolerance: f32 rel. L2 < 1e-5; f16 cache < 1e-2. Skips (77) without a GPU. */
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

static void test_rope(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 2);
    const int64_t cfg[][4] = {/* n_tokens, n_heads, head_dim, n_rot */
                              {1, 1, 64, 64}, {5, 3, 128, 128}, {7, 4, 80, 64}, {3, 2, 256, 32}, {33, 8, 96, 96}};
    for (size_t c = 0; c < 5; c++)
        for (int mode = 0; mode <= 2; mode += 2)
            for (int layout = 0; layout < 2; layout++)
                for (int variant = 0; variant < 3; variant++) { /* plain, freq factors, + gain */
                    const int use_ff = variant > 0;
                    const float gain = variant == 2 ? 1.19f : 1.0f; /* phi3's longrope attn_factor */
                    const int64_t T = cfg[c][0], H = cfg[c][1], D = cfg[c][2], R = cfg[c][3];
                    const int64_t n = T * H * D;
                    const int64_t st = layout ? D : H * D, sh = layout ? T * D : D;
                    float *x = host_f32(n), *want = host_f32(n), *got = host_f32(n);
                    float *ff = host_f32(R / 2);
                    int32_t *pos = malloc(T * sizeof(int32_t));
                    rf_rng_fill_normal(&r, x, n, 1.0f);
                    for (int64_t i = 0; i < R / 2; i++) ff[i] = 1.0f + 7.0f * rf_rng_uniform(&r);
                    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)(rf_rng_u64(&r) % 8192);
                    memcpy(want, x, n * 4);
                    rf_ref_rope(want, T, H, D, R, st, sh, pos, 500000.0f, 0.5f, use_ff ? ff : NULL, mode);
                    for (int64_t t = 0; t < T; t++) /* the gain: rotated dims only */
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t d = 0; d < R; d++) want[t * st + h * sh + d] *= gain;
                    float *dx = dev_from(x, n * 4), *dff = dev_from(ff, R / 2 * 4);
                    int32_t *dpos = dev_from(pos, T * 4);
                    assert_int_equal(rf_gpu_rope(g_ctx, dx, T, H, D, R, st, sh, dpos, 500000.0f,
                                                 0.5f, use_ff ? dff : NULL, mode, gain),
                                     RF_OK);
                    dev_to(got, dx, n * 4);
                    char what[96];
                    snprintf(what, sizeof what, "rope %s %s%s%s T%lld H%lld D%lld R%lld",
                             mode ? "neox" : "norm", layout ? "[h,t,d]" : "[t,h,d]",
                             use_ff ? " ff" : "", gain != 1.0f ? " gain" : "", (long long)T, (long long)H, (long long)D,
                             (long long)R);
                    check_rel(what, got, want, n, 1e-5);
                    rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dff), rf_gpu_free(g_ctx, dpos);
                    free(x), free(want), free(got), free(ff), free(pos);
                }
    /* contract checks on the host */
    assert_int_equal(rf_gpu_rope(g_ctx, NULL, 1, 1, 4, 3, 4, 4, NULL, 1e4f, 1, NULL, 0, 1.0f),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_rope(g_ctx, NULL, 1, 1, 4, 8, 4, 4, NULL, 1e4f, 1, NULL, 0, 1.0f),
                     RF_ERR_INVALID_ARG);
}

/* Stores rows of x (f32 [T, n]) at slot[t] (< 0: skipped) of a q8_0 cache of rows x n through the
 * CPU backend's kv_store, one token at a time; cache rows start as 0xFF. Returns the cache bytes. */
static uint8_t *cpu_q8_rows(const float *x, const int32_t *slot, int64_t T, int64_t n, int64_t rows) {
    rf_backend *cpu = NULL;
    assert_int_equal(rf_backend_cpu_new(1, &cpu), RF_OK);
    rf_tensor c;
    assert_int_equal(cpu->ops->alloc(cpu, RF_TYPE_Q8_0, n, rows, &c), RF_OK);
    assert_true(c.nb1 == (size_t)n / 32 * 34);
    memset(c.data, 0xFF, (size_t)rows * c.nb1);
    for (int64_t t = 0; t < T; t++) {
        if (slot[t] < 0) continue;
        rf_tensor src = {RF_TYPE_F32, {n, 1}, (size_t)n * 4, (void *)(x + t * n), false};
        rf_batch b = {0};
        b.n_tokens = 1, b.slot = slot + t;
        assert_int_equal(cpu->ops->kv_store(cpu, &c, &src, &b), RF_OK);
    }
    uint8_t *out = malloc((size_t)rows * c.nb1);
    memcpy(out, c.data, (size_t)rows * c.nb1);
    cpu->ops->free(cpu, &c);
    cpu->ops->destroy(cpu);
    return out;
}

/* A q8_0 KV cache: rf_gpu_kv_store and rf_gpu_rope_kv_append (K roped, V as is) write exactly the
 * bytes the CPU backend's kv_store writes for the same f32 rows (ggml's blocks, the CPU's
 * rounding: d = amax / 127 to f16, q = roundf(x / d)); for the roped K the rows are the GPU's own
 * RoPE output (its f32-cache path, which the q8_0 path stages through). Rows no slot points at
 * are never written; a block of zeros stores d = 0. */
static void test_kv_q8(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 9);
    const int64_t T = 7, HKV = 2, D = 64, n = HKV * D, ROWS = 20, R = 64;
    const size_t qb = (size_t)ROWS * (size_t)(n / 32 * 34);
    float *x = host_f32((size_t)(T * n)), *v = host_f32((size_t)(T * n)), *kf = host_f32((size_t)(ROWS * n));
    rf_rng_fill_normal(&r, x, (size_t)(T * n), 1.0f);
    rf_rng_fill_normal(&r, v, (size_t)(T * n), 3.0f);
    for (int i = 0; i < 32; i++) x[1 * n + 32 + i] = 0.0f; /* a block of zeros */
    x[2 * n + 5] = 3000.0f;                                 /* a block with one large value */
    int32_t slot[7] = {3, 0, 19, -1, 7, 8, 12}, pos[7];
    for (int t = 0; t < T; t++) pos[t] = 3 + 11 * t;
    float *dx = dev_from(x, (size_t)(T * n) * 4), *dv = dev_from(v, (size_t)(T * n) * 4);
    int32_t *dslot = dev_from(slot, sizeof slot), *dpos = dev_from(pos, sizeof pos);
    void *dq = dev_poison(qb), *dq2 = dev_poison(qb), *dkf = dev_poison((size_t)(ROWS * n) * 4),
         *dvf = dev_poison((size_t)(ROWS * n) * 4);
    uint8_t *got = malloc(qb), *got2 = malloc(qb);
    /* kv_store */
    assert_int_equal(rf_gpu_kv_store(g_ctx, dq, RF_TYPE_Q8_0, ROWS, dx, T, n, dslot), RF_OK);
    dev_to(got, dq, qb);
    uint8_t *want = cpu_q8_rows(x, slot, T, n, ROWS);
    assert_true(memcmp(got, want, qb) == 0);
    free(want);
    /* rope_kv_append, both RoPE modes: K against the CPU's quantization of the GPU's f32 RoPE */
    for (int mode = 0; mode <= 2; mode += 2) {
        assert_int_equal(rf_gpu_memset(g_ctx, dq, 0xFF, qb), RF_OK);
        assert_int_equal(rf_gpu_rope_kv_append(g_ctx, dx, dv, T, HKV, D, R, dpos, dslot, 10000.0f, 1.0f, NULL, mode,
                                               1.0f, dkf, dvf, RF_TYPE_F32, ROWS),
                         RF_OK);
        assert_int_equal(rf_gpu_rope_kv_append(g_ctx, dx, dv, T, HKV, D, R, dpos, dslot, 10000.0f, 1.0f, NULL, mode,
                                               1.0f, dq, dq2, RF_TYPE_Q8_0, ROWS),
                         RF_OK);
        dev_to(kf, dkf, (size_t)(ROWS * n) * 4);
        float *kt = host_f32((size_t)(T * n));
        for (int t = 0; t < T; t++)
            if (slot[t] >= 0) memcpy(kt + t * n, kf + (int64_t)slot[t] * n, (size_t)n * 4);
        want = cpu_q8_rows(kt, slot, T, n, ROWS);
        dev_to(got, dq, qb);
        assert_true(memcmp(got, want, qb) == 0);
        free(want);
        want = cpu_q8_rows(v, slot, T, n, ROWS);
        dev_to(got2, dq2, qb);
        assert_true(memcmp(got2, want, qb) == 0);
        free(want), free(kt);
    }
    fprintf(stderr, "  q8_0 kv_store / rope_kv_append: the CPU backend's bytes\n");
    rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dv), rf_gpu_free(g_ctx, dslot), rf_gpu_free(g_ctx, dpos);
    rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dq2), rf_gpu_free(g_ctx, dkf), rf_gpu_free(g_ctx, dvf);
    free(x), free(v), free(kf), free(got), free(got2);
}

static void test_rope_kv_append(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 3);
    const int64_t T = 6, HKV = 2, D = 128, R = 128, ROWS = 40;
    for (int ct = 0; ct < 2; ct++)
        for (int mode = 0; mode <= 2; mode += 2) {
            const rf_type cty = ct ? RF_TYPE_F16 : RF_TYPE_F32;
            const size_t es = ct ? 2 : 4;
            const int64_t n = T * HKV * D;
            float *k = host_f32(n), *v = host_f32(n), *kr = host_f32(n);
            int32_t pos[6], slot[6] = {3, 4, 5, 39, -1, 0};
            for (int t = 0; t < T; t++) pos[t] = 100 + 7 * t;
            rf_rng_fill_normal(&r, k, n, 1.0f);
            rf_rng_fill_normal(&r, v, n, 1.0f);
            memcpy(kr, k, n * 4);
            rf_ref_rope(kr, T, HKV, D, R, HKV * D, D, pos, 10000.0f, 1.0f, NULL, mode);
            float *dk = dev_from(k, n * 4), *dv = dev_from(v, n * 4);
            int32_t *dpos = dev_from(pos, sizeof pos), *dslot = dev_from(slot, sizeof slot);
            const size_t cbytes = ROWS * HKV * D * es;
            void *kc = dev_poison(cbytes), *vc = dev_poison(cbytes);
            assert_int_equal(rf_gpu_rope_kv_append(g_ctx, dk, dv, T, HKV, D, R, dpos, dslot, 10000.0f,
                                                   1.0f, NULL, mode, 1.0f, kc, vc, cty, ROWS),
                             RF_OK);
            uint8_t *hk = malloc(cbytes), *hv = malloc(cbytes);
            dev_to(hk, kc, cbytes);
            dev_to(hv, vc, cbytes);
            float *gk = host_f32(n), *gv = host_f32(n), *wk = host_f32(n), *wv = host_f32(n);
            int64_t m = 0;
            for (int t = 0; t < T; t++) {
                if (slot[t] < 0) continue;
                for (int64_t e = 0; e < HKV * D; e++, m++) {
                    const size_t off = ((size_t)slot[t] * HKV * D + e);
                    if (ct) {
                        uint16_t a, b;
                        memcpy(&a, hk + off * 2, 2), memcpy(&b, hv + off * 2, 2);
                        gk[m] = rf_fp16_to_f32(a), gv[m] = rf_fp16_to_f32(b);
                    } else {
                        memcpy(&gk[m], hk + off * 4, 4), memcpy(&gv[m], hv + off * 4, 4);
                    }
                    wk[m] = kr[t * HKV * D + e];
                    wv[m] = v[t * HKV * D + e];
                }
            }
            char what[96];
            snprintf(what, sizeof what, "rope_kv_append K %s %s", ct ? "f16" : "f32", mode ? "neox" : "norm");
            check_rel(what, gk, wk, m, ct ? 1e-2 : 1e-5);
            snprintf(what, sizeof what, "rope_kv_append V %s", ct ? "f16" : "f32");
            check_rel(what, gv, wv, m, ct ? 1e-2 : 1e-5);
            /* rows no slot pointed at stay poisoned (never written) */
            for (size_t i = 10 * HKV * D * es; i < 11 * HKV * D * es; i++) assert_int_equal(hk[i], 0xFF);
            rf_gpu_free(g_ctx, dk), rf_gpu_free(g_ctx, dv), rf_gpu_free(g_ctx, dpos);
            rf_gpu_free(g_ctx, dslot), rf_gpu_free(g_ctx, kc), rf_gpu_free(g_ctx, vc);
            free(k), free(v), free(kr), free(hk), free(hv), free(gk), free(gv), free(wk), free(wv);
        }
}

/* The fused RoPE + KV append with the query (one kernel) against its unfused composition:
 * rf_gpu_rope over Q, then rf_gpu_rope_kv_append for K and V. Q, K and V must be bit-identical
 * (same per-element arithmetic), for GQA 8/2 and head dim 64 with a partial rotation. */
static void test_rope_qkv_fused(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 5);
    const int64_t T = 5, H = 8, HKV = 2, D = 64, R = 32, ROWS = 24;
    int32_t pos[5] = {0, 1, 17, 300, 4095}, slot[5] = {2, 3, 23, -1, 7};
    for (int mode = 0; mode <= 2; mode += 2) {
        const float gain = mode ? 1.19f : 1.0f; /* with and without phi3's longrope gain */
        const int64_t nq = T * H * D, nk = T * HKV * D;
        float *q = host_f32(nq), *k = host_f32(nk), *v = host_f32(nk);
        rf_rng_fill_normal(&r, q, nq, 1.0f);
        rf_rng_fill_normal(&r, k, nk, 1.0f);
        rf_rng_fill_normal(&r, v, nk, 1.0f);
        float *dq1 = dev_from(q, nq * 4), *dq2 = dev_from(q, nq * 4);
        float *dk = dev_from(k, nk * 4), *dv = dev_from(v, nk * 4);
        int32_t *dpos = dev_from(pos, sizeof pos), *dslot = dev_from(slot, sizeof slot);
        const size_t cb = ROWS * HKV * D * 2;
        void *kc1 = dev_poison(cb), *vc1 = dev_poison(cb), *kc2 = dev_poison(cb), *vc2 = dev_poison(cb);
        assert_int_equal(rf_gpu_rope(g_ctx, dq1, T, H, D, R, H * D, D, dpos, 5e5f, 1.0f, NULL, mode, gain), RF_OK);
        assert_int_equal(rf_gpu_rope_kv_append(g_ctx, dk, dv, T, HKV, D, R, dpos, dslot, 5e5f, 1.0f, NULL, mode, gain,
                                               kc1, vc1, RF_TYPE_F16, ROWS),
                         RF_OK);
        assert_int_equal(rf_gpu_rope_qkv_append(g_ctx, dq2, dq2, H * D, H, dk, HKV * D, dv, HKV * D, T, HKV, D, R, dpos,
                                                dslot, 5e5f, 1.0f, NULL, mode, gain, kc2, vc2, RF_TYPE_F16, ROWS),
                         RF_OK);
        /* the same from the strided columns of one joined [q | k | v] row, q out of place */
        {
            const int64_t W = (H + 2 * HKV) * D;
            float *joined = host_f32(T * W);
            for (int64_t t = 0; t < T; t++) {
                memcpy(joined + t * W, q + t * H * D, H * D * 4);
                memcpy(joined + t * W + H * D, k + t * HKV * D, HKV * D * 4);
                memcpy(joined + t * W + (H + HKV) * D, v + t * HKV * D, HKV * D * 4);
            }
            float *dj = dev_from(joined, T * W * 4), *dq3 = dev_poison(nq * 4);
            void *kc3 = dev_poison(cb), *vc3 = dev_poison(cb);
            assert_int_equal(rf_gpu_rope_qkv_append(g_ctx, dq3, dj, W, H, dj + H * D, W, dj + (H + HKV) * D, W, T, HKV, D,
                                                    R, dpos, dslot, 5e5f, 1.0f, NULL, mode, gain, kc3, vc3, RF_TYPE_F16, ROWS),
                             RF_OK);
            float *q3 = host_f32(nq);
            uint8_t *c3 = malloc(cb), *c1 = malloc(cb);
            dev_to(q3, dq3, nq * 4);
            float *q1h = host_f32(nq);
            dev_to(q1h, dq1, nq * 4);
            assert_memory_equal(q1h, q3, nq * 4);
            dev_to(c1, kc1, cb), dev_to(c3, kc3, cb);
            assert_memory_equal(c1, c3, cb);
            dev_to(c1, vc1, cb), dev_to(c3, vc3, cb);
            assert_memory_equal(c1, c3, cb);
            rf_gpu_free(g_ctx, dj), rf_gpu_free(g_ctx, dq3), rf_gpu_free(g_ctx, kc3), rf_gpu_free(g_ctx, vc3);
            free(joined), free(q3), free(q1h), free(c3), free(c1);
        }
        float *q1 = host_f32(nq), *q2 = host_f32(nq);
        uint8_t *a = malloc(cb), *b = malloc(cb);
        dev_to(q1, dq1, nq * 4);
        dev_to(q2, dq2, nq * 4);
        assert_memory_equal(q1, q2, nq * 4);
        dev_to(a, kc1, cb), dev_to(b, kc2, cb);
        assert_memory_equal(a, b, cb);
        dev_to(a, vc1, cb), dev_to(b, vc2, cb);
        assert_memory_equal(a, b, cb);
        rf_gpu_free(g_ctx, dq1), rf_gpu_free(g_ctx, dq2), rf_gpu_free(g_ctx, dk), rf_gpu_free(g_ctx, dv);
        rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dslot);
        rf_gpu_free(g_ctx, kc1), rf_gpu_free(g_ctx, vc1), rf_gpu_free(g_ctx, kc2), rf_gpu_free(g_ctx, vc2);
        free(q), free(k), free(v), free(q1), free(q2), free(a), free(b);
    }
}

/* Bytes of a KV cache of `rows` rows of n_kv values of type ct (f32, f16 or q8_0). */
static size_t cache_bytes(rf_type ct, int64_t rows, int64_t n_kv) {
    return (size_t)rows * (size_t)(ct == RF_TYPE_Q8_0 ? n_kv / 32 * 34 : n_kv * (ct == RF_TYPE_F16 ? 2 : 4));
}

/* The per-head Q/K(/V) RMSNorms folded into the RoPE + KV append (rf_gpu_norm_rope_qkv_append, one
 * kernel) against their unfused composition: rf_gpu_rmsnorm over the Q rows, over the K rows (and
 * over the V rows without a gain), then rf_gpu_rope_qkv_append. Q, the K cache and the V cache must
 * be bit-identical (the same sum-of-squares order as rf_k_rmsnorm_v, the same rounding steps), for
 * head dims 64, 128 and 256 with GQA (and gemma4's 512 with the V norm and frequency factors),
 * decode (1 token) and prompt (7 tokens, one slot outside the cache), both RoPE modes (one partial
 * rotation), f32, f16 and q8_0 caches, Q normed only, K normed only, both; Q in place from packed
 * rows, or out of place from the strided columns of one joined Q/K/V row. norms: bit 0 Q, bit 1 K,
 * bit 2 V. */
/* The joined Q/K/V rows [T, W] as a product's split-K partial sums (np random arrays T * W apart,
 * rf_gpu_mmq_xq_parts' layout), read by rf_gpu_norm_rope_qkv_append_parts with q and k (and v,
 * unless v_apart) views of the parts, against rf_gpu_sum_parts then rf_gpu_norm_rope_qkv_append
 * on the sum: Q and both caches bit-identical. v_apart: V is a packed array of its own (qwen3's
 * Q|K joined beside a V of another type), read as it is (npv 1). */
static void norm_rope_parts_case(rf_rng *r, int64_t T, int64_t H, int64_t HKV, int64_t D, int64_t R, int mode,
                                 rf_type ct, const float *wq, const float *wk, int vnorm, const float *dff,
                                 const int32_t *dpos, const int32_t *dslot, int np, int v_apart) {
    const int64_t ROWS = 24, nq = T * H * D, nk = T * HKV * D, W = (H + 2 * HKV) * D, n = T * W;
    const float eps = 1e-6f, gain = mode ? 1.19f : 1.0f;
    float *pp = host_f32(n * np), *vv = host_f32(nk);
    rf_rng_fill_normal(r, pp, n * np, 1.0f);
    rf_rng_fill_normal(r, vv, nk, 1.0f);
    float *dp = dev_from(pp, n * np * 4), *dsum = dev_poison(n * 4), *dvv = dev_from(vv, nk * 4);
    const size_t cb = cache_bytes(ct, ROWS, HKV * D);
    void *kc1 = dev_poison(cb), *vc1 = dev_poison(cb), *kc2 = dev_poison(cb), *vc2 = dev_poison(cb);
    float *dq1 = dev_poison(nq * 4), *dq2 = dev_poison(nq * 4);
    assert_int_equal(rf_gpu_sum_parts(g_ctx, dsum, dp, n, np), RF_OK);
    assert_int_equal(rf_gpu_norm_rope_qkv_append(g_ctx, dq1, dsum, W, H, dsum + H * D, W,
                                                 v_apart ? dvv : dsum + (H + HKV) * D, v_apart ? HKV * D : W, T, HKV,
                                                 D, R, dpos, dslot, 5e5f, 1.0f, dff, mode, gain, kc1, vc1, ct, ROWS, wq,
                                                 wk, vnorm, eps),
                     RF_OK);
    assert_int_equal(rf_gpu_norm_rope_qkv_append_parts(g_ctx, dq2, dp, W, H, dp + H * D, W,
                                                       v_apart ? dvv : dp + (H + HKV) * D, v_apart ? HKV * D : W, T,
                                                       HKV, D, R, dpos, dslot, 5e5f, 1.0f, dff, mode, gain, kc2, vc2,
                                                       ct, ROWS, wq, wk, vnorm, eps, np, v_apart ? 1 : np, n),
                     RF_OK);
    float *q1 = host_f32(nq), *q2 = host_f32(nq);
    uint8_t *a = malloc(cb), *b = malloc(cb);
    dev_to(q1, dq1, nq * 4), dev_to(q2, dq2, nq * 4);
    assert_memory_equal(q1, q2, nq * 4);
    dev_to(a, kc1, cb), dev_to(b, kc2, cb);
    assert_memory_equal(a, b, cb);
    dev_to(a, vc1, cb), dev_to(b, vc2, cb);
    assert_memory_equal(a, b, cb);
    rf_gpu_free(g_ctx, dp), rf_gpu_free(g_ctx, dsum), rf_gpu_free(g_ctx, dvv), rf_gpu_free(g_ctx, kc1);
    rf_gpu_free(g_ctx, vc1), rf_gpu_free(g_ctx, kc2), rf_gpu_free(g_ctx, vc2), rf_gpu_free(g_ctx, dq1);
    rf_gpu_free(g_ctx, dq2);
    free(pp), free(vv), free(q1), free(q2), free(a), free(b);
}

static void norm_rope_case(rf_rng *r, int64_t T, int64_t H, int64_t HKV, int64_t D, int64_t R, int mode,
                           rf_type ct, int norms, int joined, const float *ff) {
    const int64_t ROWS = 24, nq = T * H * D, nk = T * HKV * D, W = (H + 2 * HKV) * D;
    int32_t pos[7] = {0, 1, 17, 300, 4095, 5, 9}, slot[7] = {2, 3, 23, -1, 7, 11, 0};
    if (T == 1) pos[0] = 1234, slot[0] = 5;
    float *q = host_f32(nq), *k = host_f32(nk), *v = host_f32(nk), *qw = host_f32(D), *kw = host_f32(D);
    rf_rng_fill_normal(r, q, nq, 2.0f);
    rf_rng_fill_normal(r, k, nk, 0.5f);
    rf_rng_fill_normal(r, v, nk, 1.0f);
    rf_rng_fill_normal(r, qw, D, 1.0f);
    rf_rng_fill_normal(r, kw, D, 1.0f);
    float *dq1 = dev_from(q, nq * 4), *dk1 = dev_from(k, nk * 4), *dv = dev_from(v, nk * 4), *dv2 = dev_from(v, nk * 4);
    float *dff = ff ? dev_from(ff, R / 2 * 4) : NULL;
    float *dqw = dev_from(qw, D * 4), *dkw = dev_from(kw, D * 4);
    const float *wq = norms & 1 ? dqw : NULL, *wk = norms & 2 ? dkw : NULL;
    int32_t *dpos = dev_from(pos, sizeof pos), *dslot = dev_from(slot, sizeof slot);
    const size_t cb = cache_bytes(ct, ROWS, HKV * D);
    void *kc1 = dev_poison(cb), *vc1 = dev_poison(cb), *kc2 = dev_poison(cb), *vc2 = dev_poison(cb);
    const float eps = 1e-6f, gain = mode ? 1.19f : 1.0f;
    /* unfused: the two norms in place, then the RoPE + append */
    if (wq) assert_int_equal(rf_gpu_rmsnorm(g_ctx, dq1, dq1, wq, T * H, D, eps), RF_OK);
    if (wk) assert_int_equal(rf_gpu_rmsnorm(g_ctx, dk1, dk1, wk, T * HKV, D, eps), RF_OK);
    if (norms & 4) assert_int_equal(rf_gpu_rmsnorm(g_ctx, dv, dv, NULL, T * HKV, D, eps), RF_OK);
    assert_int_equal(rf_gpu_rope_qkv_append(g_ctx, dq1, dq1, H * D, H, dk1, HKV * D, dv, HKV * D, T, HKV, D, R, dpos,
                                            dslot, 5e5f, 1.0f, dff, mode, gain, kc1, vc1, ct, ROWS),
                     RF_OK);
    /* fused */
    float *dq2, *dsrc = NULL;
    if (joined) {
        float *jr = host_f32(T * W);
        for (int64_t t = 0; t < T; t++) {
            memcpy(jr + t * W, q + t * H * D, H * D * 4);
            memcpy(jr + t * W + H * D, k + t * HKV * D, HKV * D * 4);
            memcpy(jr + t * W + (H + HKV) * D, v + t * HKV * D, HKV * D * 4);
        }
        dsrc = dev_from(jr, T * W * 4), dq2 = dev_poison(nq * 4);
        free(jr);
        assert_int_equal(rf_gpu_norm_rope_qkv_append(g_ctx, dq2, dsrc, W, H, dsrc + H * D, W, dsrc + (H + HKV) * D, W,
                                                     T, HKV, D, R, dpos, dslot, 5e5f, 1.0f, dff, mode, gain, kc2,
                                                     vc2, ct, ROWS, wq, wk, (norms & 4) != 0, eps),
                         RF_OK);
    } else {
        float *dk2 = dev_from(k, nk * 4);
        dq2 = dev_from(q, nq * 4);
        assert_int_equal(rf_gpu_norm_rope_qkv_append(g_ctx, dq2, dq2, H * D, H, dk2, HKV * D, dv2, HKV * D, T, HKV, D,
                                                     R, dpos, dslot, 5e5f, 1.0f, dff, mode, gain, kc2, vc2, ct, ROWS,
                                                     wq, wk, (norms & 4) != 0, eps),
                         RF_OK);
        dsrc = dk2;
    }
    float *q1 = host_f32(nq), *q2 = host_f32(nq);
    uint8_t *a = malloc(cb), *b = malloc(cb);
    dev_to(q1, dq1, nq * 4), dev_to(q2, dq2, nq * 4);
    assert_memory_equal(q1, q2, nq * 4);
    dev_to(a, kc1, cb), dev_to(b, kc2, cb);
    assert_memory_equal(a, b, cb);
    dev_to(a, vc1, cb), dev_to(b, vc2, cb);
    assert_memory_equal(a, b, cb);
    /* and Q against the CPU oracle (rf_ref_rmsnorm then rf_ref_rope; rel. L2 < 1e-5 as each op's
     * own test): a norm that did not run fails here even where both GPU paths agree */
    if (wq && gain == 1.0f) {
        rf_ref_rmsnorm(q, q, qw, T * H, D, eps);
        rf_ref_rope(q, T, H, D, R, H * D, D, pos, 5e5f, 1.0f, ff, mode);
        check_rel("norm_rope_qkv_append Q vs the CPU oracle", q2, q, nq, 1e-5);
    }
    /* joined rows as split-K partial sums: with this case's norms and without any (rope_store's
     * kernel), 2, 3, 5 and 8 parts, V among them or apart */
    if (joined) {
        norm_rope_parts_case(r, T, H, HKV, D, R, mode, ct, wq, wk, (norms & 4) != 0, dff, dpos, dslot, 8, 0);
        norm_rope_parts_case(r, T, H, HKV, D, R, mode, ct, NULL, NULL, 0, dff, dpos, dslot, 2, 1);
        norm_rope_parts_case(r, T, H, HKV, D, R, mode, ct, wq, wk, (norms & 4) != 0, dff, dpos, dslot, 3, 1);
        norm_rope_parts_case(r, T, H, HKV, D, R, mode, ct, NULL, NULL, 0, dff, dpos, dslot, 5, 0);
    }
    rf_gpu_free(g_ctx, dq1), rf_gpu_free(g_ctx, dk1), rf_gpu_free(g_ctx, dv), rf_gpu_free(g_ctx, dqw);
    rf_gpu_free(g_ctx, dkw), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dslot), rf_gpu_free(g_ctx, dq2);
    rf_gpu_free(g_ctx, dsrc), rf_gpu_free(g_ctx, kc1), rf_gpu_free(g_ctx, vc1), rf_gpu_free(g_ctx, kc2);
    rf_gpu_free(g_ctx, vc2), rf_gpu_free(g_ctx, dv2);
    if (dff) rf_gpu_free(g_ctx, dff);
    free(q), free(k), free(v), free(qw), free(kw), free(q1), free(q2), free(a), free(b);
}

static void test_norm_rope_fused(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 13);
    static const int64_t dims[3][3] = {{64, 8, 2}, {128, 32, 4}, {256, 8, 4}}; /* head dim, heads, KV heads */
    static const rf_type cts[3] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0};
    int n = 0;
    for (int di = 0; di < 3; di++)
        for (int ci = 0; ci < 3; ci++)
            for (int mode = 0; mode <= 2; mode += 2)
                for (int T = 1; T <= 7; T += 6) {
                    const int64_t D = dims[di][0], R = di == 0 && mode ? 32 : D; /* one partial rotation */
                    const int norms = T == 1 ? 3 : 1 + (n % 3); /* prompt: K, Q, both in turn */
                    /* joined Q/K/V rows (Q out of place) on every other mode: decode and prompt */
                    norm_rope_case(&r, T, dims[di][1], dims[di][2], D, R, mode, cts[ci], norms, ((n >> 1) & 1) != 0,
                                   NULL);
                    n++;
                }
    /* gemma4's own-KV layers: Q, K and V normed; a 512 head (full layers) with frequency factors
     * whose huge values past the first pairs leave those pairs still, and a 256 head (sliding) */
    float ff[256];
    for (int i = 0; i < 256; i++) ff[i] = i < 32 ? 1.0f + 0.01f * (float)i : 1e30f;
    for (int ci = 0; ci < 3; ci++)
        for (int T = 1; T <= 7; T += 6) {
            norm_rope_case(&r, T, 8, 2, 512, 512, RF_ROPE_NEOX, cts[ci], 7, T == 7, ff);
            norm_rope_case(&r, T, 16, 8, 256, 256, RF_ROPE_NEOX, cts[ci], 7, T == 1, NULL);
            n += 2;
        }
    fprintf(stderr, "  norm_rope_qkv_append: %d cases bit-identical to rmsnorm, rmsnorm, rope_qkv_append (joined rows "
                    "also from split-K parts)\n", n);
}

/* RMSNorm + activation quantization in one kernel against rf_gpu_rmsnorm then
 * rf_gpu_quantize_x: h and the quantized x byte-identical, for the x orders and record kinds the
 * products take (Q4_0 and Q8_0: groups of 8 blocks, Q4_1 and Q4_K: with sums, Q5_0 wide rows),
 * 1 and 3 tokens (the GEMV's layouts) and 32 (MMQ's: in order; the K-quants per 256, rows of 2560
 * ending inside a round of 1024, 8192 on a cluster, 12288), with and without a norm weight. */
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
                dev_to(a, h1, tot * 4);
                dev_to(b, h2, tot * 4);
                assert_memory_equal(a, b, tot * 4);
                uint8_t *qa = malloc(xb), *qb = malloc(xb);
                dev_to(qa, q1, xb);
                dev_to(qb, q2, xb);
                /* the used bytes: int8 x, then the records after the 256-byte-aligned int8 part
                 * (padding between them is never written by either) */
                const size_t nq = (size_t)tot, rec = ((nq + 255) & ~(size_t)255);
                assert_memory_equal(qa, qb, nq);
                assert_memory_equal(qa + rec, qb + rec, xb - rec);
                /* h written over x (no residual): no block of a row may still read x while
                 * another writes its slice */
                {
                    float *dxs = dev_from(x, tot * 4);
                    assert_int_equal(rf_gpu_rmsnorm_quantize_x(g_ctx, dxs, q2, cases[c].t, dxs, NULL, dw, nt, n, 1e-5f), RF_OK);
                    dev_to(b, dxs, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    dev_to(qb, q2, xb);
                    assert_memory_equal(qa, qb, nq);
                    assert_memory_equal(qa + rec, qb + rec, xb - rec);
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
                    dev_to(a, h1, tot * 4);
                    dev_to(b, h2, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    dev_to(qa, q1, xb);
                    dev_to(qb, q2, xb);
                    assert_memory_equal(qa, qb, nq);
                    assert_memory_equal(qa + rec, qb + rec, xb - rec);
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
                    dev_to(a, h1, tot * 4);
                    dev_to(b, h2, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    dev_to(qa, q1, xb);
                    dev_to(qb, q2, xb);
                    assert_memory_equal(qa, qb, nq);
                    assert_memory_equal(qa + rec, qb + rec, xb - rec);
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
                    dev_to(a, h1, tot * 4);
                    dev_to(b, h2, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    dev_to(qa, q1, xb);
                    dev_to(qb, q2, xb);
                    assert_memory_equal(qa, qb, nq);
                    assert_memory_equal(qa + rec, qb + rec, xb - rec);
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
                    dev_to(b, h2, tot * 4);
                    assert_memory_equal(a, b, tot * 4);
                    dev_to(qb, q2, xb);
                    assert_memory_equal(qa, qb, nq);
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
        cmocka_unit_test(test_rope),          cmocka_unit_test(test_rope_kv_append),
        cmocka_unit_test(test_kv_q8),
        cmocka_unit_test(test_rope_qkv_fused), cmocka_unit_test(test_norm_rope_fused),
        cmocka_unit_test(test_rmsnorm_quantize_fused), cmocka_unit_test(test_quantize_x256_nan),
        cmocka_unit_test(test_add_norm_fused),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_backend_info),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
