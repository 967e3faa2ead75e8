/* test_gpu_rope.c — the RoPE and KV-cache kernels against their CPU twins (backend/ref) and
 * against their unfused compositions: RoPE, the q8_0 cache store, RoPE + K/V append, the
 * joined-Q/K/V form, the per-head norms folded in, and joined rows read as split-K partial sums.
 * Fresh random inputs (seed printed), outputs poisoned first. Tolerance: f32 rel. L2 < 1e-5, f16
 * cache < 1e-2; the fused forms bit-identical to their compositions. Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_rope: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_test_common.h"

#include "backend/backend.h"
#include "core/test_hooks.h"
#include "backend/ref/ref_ops.h"

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
/* Two runs of a RoPE + cache store the same bits: Q (nq floats at dqa, dqb) and both caches (cb
 * bytes each). qb (NULL: not wanted): host room for nq floats, left holding dqb's Q. */
static void same_q_caches(const float *dqa, const float *dqb, int64_t nq, const void *ka, const void *kb,
                          const void *va, const void *vb, size_t cb, float *qb) {
    float *qa = host_f32(nq), *qo = qb ? qb : host_f32(nq);
    uint8_t *a = malloc(cb), *b = malloc(cb);
    assert_non_null(a), assert_non_null(b);
    dev_to(qa, dqa, (size_t)nq * 4), dev_to(qo, dqb, (size_t)nq * 4);
    assert_memory_equal(qa, qo, (size_t)nq * 4);
    dev_to(a, ka, cb), dev_to(b, kb, cb);
    assert_memory_equal(a, b, cb);
    dev_to(a, va, cb), dev_to(b, vb, cb);
    assert_memory_equal(a, b, cb);
    free(qa), free(a), free(b);
    if (!qb) free(qo);
}

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
            same_q_caches(dq1, dq3, nq, kc1, kc3, vc1, vc3, cb, NULL);
            rf_gpu_free(g_ctx, dj), rf_gpu_free(g_ctx, dq3), rf_gpu_free(g_ctx, kc3), rf_gpu_free(g_ctx, vc3);
            free(joined);
        }
        same_q_caches(dq1, dq2, nq, kc1, kc2, vc1, vc2, cb, NULL);
        rf_gpu_free(g_ctx, dq1), rf_gpu_free(g_ctx, dq2), rf_gpu_free(g_ctx, dk), rf_gpu_free(g_ctx, dv);
        rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dslot);
        rf_gpu_free(g_ctx, kc1), rf_gpu_free(g_ctx, vc1), rf_gpu_free(g_ctx, kc2), rf_gpu_free(g_ctx, vc2);
        free(q), free(k), free(v);
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
    same_q_caches(dq1, dq2, nq, kc1, kc2, vc1, vc2, cb, NULL);
    rf_gpu_free(g_ctx, dp), rf_gpu_free(g_ctx, dsum), rf_gpu_free(g_ctx, dvv), rf_gpu_free(g_ctx, kc1);
    rf_gpu_free(g_ctx, vc1), rf_gpu_free(g_ctx, kc2), rf_gpu_free(g_ctx, vc2), rf_gpu_free(g_ctx, dq1);
    rf_gpu_free(g_ctx, dq2);
    free(pp), free(vv);
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
    float *q2 = host_f32(nq);
    same_q_caches(dq1, dq2, nq, kc1, kc2, vc1, vc2, cb, q2);
    /* and Q against the CPU oracle (rf_ref_rmsnorm then rf_ref_rope; rel. L2 < 1e-5 as each op's
     * own test): a norm that did not run fails here even where both GPU paths agree */
    if (wq && gain == 1.0f) {
        rf_ref_rmsnorm(q, q, qw, T * H, D, eps);
        rf_ref_rope(q, T, H, D, R, H * D, D, pos, 5e5f, 1.0f, ff, mode);
        check_rel("norm_rope_qkv_append Q vs the CPU oracle", q2, q, nq, 1e-5);
    }
    /* joined rows as split-K partial sums: with this case's norms and without any (rope_store's
     * kernel), 2, 3, 5 and 8 parts, V among them or apart */
    const struct { bool normed; int np, v_apart; } parts[] = {{true, 8, 0}, {false, 2, 1}, {true, 3, 1}, {false, 5, 0}};
    for (size_t i = 0; joined && i < sizeof parts / sizeof *parts; i++)
        norm_rope_parts_case(r, T, H, HKV, D, R, mode, ct, parts[i].normed ? wq : NULL, parts[i].normed ? wk : NULL,
                             parts[i].normed && (norms & 4) != 0, dff, dpos, dslot, parts[i].np, parts[i].v_apart);
    rf_gpu_free(g_ctx, dq1), rf_gpu_free(g_ctx, dk1), rf_gpu_free(g_ctx, dv), rf_gpu_free(g_ctx, dqw);
    rf_gpu_free(g_ctx, dkw), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dslot), rf_gpu_free(g_ctx, dq2);
    rf_gpu_free(g_ctx, dsrc), rf_gpu_free(g_ctx, kc1), rf_gpu_free(g_ctx, vc1), rf_gpu_free(g_ctx, kc2);
    rf_gpu_free(g_ctx, vc2), rf_gpu_free(g_ctx, dv2);
    if (dff) rf_gpu_free(g_ctx, dff);
    free(q), free(k), free(v), free(qw), free(kw), free(q2);
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
int main(void) {
    gpu_test_init_or_skip("test_gpu_rope");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope),           cmocka_unit_test(test_rope_kv_append),
        cmocka_unit_test(test_kv_q8),          cmocka_unit_test(test_rope_qkv_fused),
        cmocka_unit_test(test_norm_rope_fused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
