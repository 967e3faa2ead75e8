/* test_engine_backend.c — the CPU backend's ops against the scalar references of ref_ops.h on
 * fresh random inputs (seed printed), outputs poisoned first: matmul (f32/f16/q8_0/q4_1/q4_K/
 * q6_K weights; tolerance rel. L2 < 1e-2 for quantized activations, 1e-5 for f32), rmsnorm,
 * rope (normal and neox, with freq factors), paged attention (f32/f16/q8_0 pools, GQA, causal,
 * sliding window, shuffled block tables, several sequences in one batch, batch invariance),
 * glu (swiglu exact, geglu through ggml's f16 table < 2e-3), get_rows, kv_store, copy_rows and
 * gather_rows. Thread counts 1 and 3. The matmul's activation quantizer (AVX2) against its scalar
 * definition, byte for byte, on random rows and on ties, zeros, subnormals, huge values, inf, NaN. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_ops.h"

static rf_rng g_rng;

static int setup(void **state) {
    (void)state;
    rf_rng_init(&g_rng, rf_test_seed());
    return 0;
}

static rf_tensor host_f32(float *p, int64_t n, int64_t rows) {
    rf_tensor t = {RF_TYPE_F32, {n, rows}, (size_t)n * 4, p, false};
    return t;
}

static void test_matmul(void **state) {
    (void)state;
    const rf_type types[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0, RF_TYPE_Q4_1, RF_TYPE_Q4_K, RF_TYPE_Q6_K};
    for (int th = 1; th <= 3; th += 2) {
        rf_backend *be;
        assert_int_equal(rf_backend_cpu_new(th, &be), RF_OK);
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            int64_t n_in = 512, n_out = 37, nt = 5;
            float *wf = rf_test_randn(&g_rng, (size_t)(n_in * n_out), 0.5f), *x = rf_test_randn(&g_rng, (size_t)(n_in * nt), 1.0f);
            size_t rs;
            assert_int_equal(rf_row_size(types[ti], n_in, &rs), RF_OK);
            void *wq = malloc(rs * (size_t)n_out);
            for (int64_t o = 0; o < n_out; o++)
                assert_int_equal(rf_quantize_row(types[ti], wf + o * n_in, (char *)wq + o * rs, n_in), RF_OK);
            float *want = malloc((size_t)(nt * n_out) * 4), *got = malloc((size_t)(nt * n_out) * 4);
            assert_int_equal(rf_ref_matmul(want, wq, types[ti], x, nt, n_in, n_out), RF_OK);
            rf_poison_f32(got, (size_t)(nt * n_out));
            rf_tensor w, xt = host_f32(x, n_in, nt), yt = host_f32(got, n_out, nt);
            assert_int_equal(be->ops->weight(be, types[ti], n_in, n_out, wq, &w), RF_OK);
            assert_int_equal(be->ops->matmul(be, &yt, &w, &xt, nt), RF_OK);
            char name[64];
            snprintf(name, sizeof name, "matmul %s t=%d", rf_type_name(types[ti]), th);
            rf_test_check_l2(name, got, want, (size_t)(nt * n_out), types[ti] == RF_TYPE_F32 ? 1e-5 : 1e-2);
            free(wf), free(x), free(wq), free(want), free(got);
        }
        be->ops->destroy(be);
    }
}

static void test_norm_rope_glu(void **state) {
    (void)state;
    rf_backend *be;
    assert_int_equal(rf_backend_cpu_new(2, &be), RF_OK);
    int64_t rows = 7, n = 96;
    float *x = rf_test_randn(&g_rng, (size_t)(rows * n), 2.0f), *w = rf_test_randn(&g_rng, (size_t)n, 1.0f);
    float *want = malloc((size_t)(rows * n) * 4), *got = malloc((size_t)(rows * n) * 4);
    rf_ref_rmsnorm(want, x, w, rows, n, 1e-6f);
    rf_poison_f32(got, (size_t)(rows * n));
    rf_tensor xt = host_f32(x, n, rows), yt = host_f32(got, n, rows), wt = host_f32(w, n, 1);
    assert_int_equal(be->ops->rmsnorm(be, &yt, &xt, &wt, rows, n, 1e-6f), RF_OK);
    rf_test_check_l2("rmsnorm", got, want, (size_t)(rows * n), 1e-5);

    /* rope: 5 tokens x 3 heads x 64, positions 11.., both modes, partial rotation, factors */
    int64_t nt = 5, nh = 3, hd = 64;
    float ff[16];
    for (int i = 0; i < 16; i++) ff[i] = 1.0f + 0.25f * (float)i;
    for (int mode = 0; mode <= 2; mode += 2) {
        for (int use_ff = 0; use_ff < 2; use_ff++) {
            int64_t n_rot = use_ff ? 32 : 64;
            float *q = rf_test_randn(&g_rng, (size_t)(nt * nh * hd), 1.0f), *r = malloc((size_t)(nt * nh * hd) * 4);
            memcpy(r, q, (size_t)(nt * nh * hd) * 4);
            int32_t pos[5] = {11, 12, 13, 14, 15};
            rf_ref_rope(r, nt, nh, hd, n_rot, nh * hd, hd, pos, 10000.0f, 0.5f, use_ff ? ff : NULL, mode);
            /* with factors, also a gain (phi3's longrope attn_factor): rotated dims times it */
            const float gain = use_ff ? 1.19f : 1.0f;
            for (int64_t t = 0; t < nt * nh; t++)
                for (int64_t d = 0; d < n_rot; d++) r[t * hd + d] *= gain;
            rf_tensor qt = host_f32(q, nh * hd, nt), fft = host_f32(ff, 16, 1);
            rf_batch bt = {0};
            bt.n_tokens = (int32_t)nt;
            bt.pos = pos;
            assert_int_equal(be->ops->rope(be, &qt, &bt, nh, hd, n_rot, 10000.0f, 0.5f, use_ff ? &fft : NULL, mode, gain),
                             RF_OK);
            rf_test_check_l2(mode ? "rope neox" : "rope normal", q, r, (size_t)(nt * nh * hd), 1e-5);
            free(q), free(r);
        }
    }
    /* glu */
    size_t m = 1000;
    float *g = rf_test_randn(&g_rng, m, 3.0f), *u = rf_test_randn(&g_rng, m, 1.0f), *gw = malloc(m * 4), *gg = malloc(m * 4);
    rf_tensor gt = host_f32(g, (int64_t)m, 1), ut = host_f32(u, (int64_t)m, 1), ot = host_f32(gg, (int64_t)m, 1);
    rf_ref_swiglu(gw, g, u, (int64_t)m);
    rf_poison_f32(gg, m);
    assert_int_equal(be->ops->glu(be, &ot, &gt, &ut, (int64_t)m, RF_GLU_SWIGLU), RF_OK);
    rf_test_check_l2("swiglu", gg, gw, m, 1e-6);
    rf_ref_geglu(gw, g, u, (int64_t)m);
    rf_poison_f32(gg, m);
    assert_int_equal(be->ops->glu(be, &ot, &gt, &ut, (int64_t)m, RF_GLU_GEGLU), RF_OK);
    rf_test_check_l2("geglu (ggml f16 table)", gg, gw, m, 2e-3);
    for (size_t i = 0; i < m; i += 7) g[i] *= 4, u[i] *= 12; /* past the clamps at +-7 */
    rf_ref_swiglu_oai(gw, g, u, (int64_t)m);
    rf_poison_f32(gg, m);
    assert_int_equal(be->ops->glu(be, &ot, &gt, &ut, (int64_t)m, RF_GLU_SWIGLU_OAI), RF_OK);
    rf_test_check_l2("swiglu_oai", gg, gw, m, 1e-6);
    free(g), free(u), free(gw), free(gg);
    free(x), free(w), free(want), free(got);
    be->ops->destroy(be);
}

/* Paged attention: S sequences of different lengths whose blocks are scattered over the pool
 * in a shuffled order; one batch holds a prompt chunk of one sequence and single tokens of the
 * others. Checked against rf_ref_paged_attention (f32 cache 1e-5; f16 5e-3 and q8_0 2e-2, the
 * caches' rounding), and every token's output computed alone must be bit-identical to its
 * output inside the batch (batch invariance). Block size 16 runs with attention sinks (one
 * logit per head in the softmax's denominator, gpt-oss), 4 without. */
static void test_paged_attention(void **state) {
    (void)state;
    const int64_t H = 6, HKV = 2, D = 64, KVD = HKV * D;
    for (int th = 1; th <= 3; th += 2) {
        rf_backend *be;
        assert_int_equal(rf_backend_cpu_new(th, &be), RF_OK);
        for (int32_t bs = 4; bs <= 16; bs *= 4) {
            for (int64_t window = 0; window <= 8; window += 8) {
                enum { S = 4 };
                int32_t len[S] = {37, 5, 20, 1}; /* positions held after the step */
                int32_t newt[S] = {9, 1, 1, 1};  /* tokens of each sequence in the step */
                int32_t maxb = (37 + bs - 1) / bs, nblk = S * maxb + 3;
                int32_t *table = calloc((size_t)(S * maxb), sizeof(int32_t));
                int32_t *perm = malloc((size_t)nblk * sizeof(int32_t));
                for (int32_t i = 0; i < nblk; i++) perm[i] = i;
                for (int32_t i = nblk - 1; i > 0; i--) { /* shuffled physical blocks */
                    int32_t j = (int32_t)(rf_rng_u64(&g_rng) % (uint64_t)(i + 1)), t = perm[i];
                    perm[i] = perm[j];
                    perm[j] = t;
                }
                for (int32_t i = 0, u = 0; i < S; i++)
                    for (int32_t k = 0; k < (len[i] + bs - 1) / bs; k++) table[i * maxb + k] = perm[u++];
                int64_t rows = (int64_t)nblk * bs;
                float *kp = rf_test_randn(&g_rng, (size_t)(rows * KVD), 1.0f), *vp = rf_test_randn(&g_rng, (size_t)(rows * KVD), 1.0f);
                int32_t pos[16], seq[16], slot[16], nt = 0;
                for (int32_t i = 0; i < S; i++)
                    for (int32_t t = len[i] - newt[i]; t < len[i]; t++) {
                        pos[nt] = t;
                        seq[nt] = i;
                        slot[nt] = table[i * maxb + t / bs] * bs + t % bs;
                        nt++;
                    }
                float *q = rf_test_randn(&g_rng, (size_t)(nt * H * D), 1.0f), *want = malloc((size_t)(nt * H * D) * 4),
                      *got = malloc((size_t)(nt * H * D) * 4), *one = malloc((size_t)(H * D) * 4);
                float *sk = bs == 16 ? rf_test_randn(&g_rng, (size_t)H, 3.0f) : NULL; /* sink logits as large as the scores */
                rf_tensor skt = sk ? host_f32(sk, H, 1) : (rf_tensor){0}, *skp = sk ? &skt : NULL;
                assert_int_equal(rf_ref_paged_attention(want, q, kp, vp, nt, pos, seq, table, maxb, bs, H, HKV, D,
                                                        0.125f, window, 0.0f, sk), RF_OK);
                rf_batch b = {0};
                b.n_tokens = nt;
                b.pos = pos;
                b.seq = seq;
                b.slot = slot;
                b.n_seqs = S;
                b.max_blocks = maxb;
                b.block_size = bs;
                b.block_table = table;
                const rf_type kts[3] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_Q8_0};
                const double tol[3] = {1e-5, 5e-3, 2e-2};
                for (int ki = 0; ki < 3; ki++) {
                    rf_tensor kc, vc, src;
                    assert_int_equal(be->ops->alloc(be, kts[ki], KVD, rows, &kc), RF_OK);
                    assert_int_equal(be->ops->alloc(be, kts[ki], KVD, rows, &vc), RF_OK);
                    /* fill the whole pool row by row through kv_store (one-token batches) */
                    for (int64_t r = 0; r < rows; r++) {
                        int32_t sl = (int32_t)r;
                        rf_batch one_b = {0};
                        one_b.n_tokens = 1;
                        one_b.slot = &sl;
                        src = host_f32(kp + r * KVD, KVD, 1);
                        assert_int_equal(be->ops->kv_store(be, &kc, &src, &one_b), RF_OK);
                        src = host_f32(vp + r * KVD, KVD, 1);
                        assert_int_equal(be->ops->kv_store(be, &vc, &src, &one_b), RF_OK);
                    }
                    rf_tensor qt = host_f32(q, H * D, nt), ot = host_f32(got, H * D, nt);
                    rf_poison_f32(got, (size_t)(nt * H * D));
                    assert_int_equal(be->ops->attention(be, &ot, &qt, &kc, &vc, &b, H, HKV, D, 0.125f, window, 0.0f, skp), RF_OK);
                    char name[96];
                    snprintf(name, sizeof name, "paged attention %s bs %d win %d t=%d%s", rf_type_name(kts[ki]), bs,
                             (int)window, th, sk ? " sinks" : "");
                    rf_test_check_l2(name, got, want, (size_t)(nt * H * D), tol[ki]);
                    for (int32_t t = 0; t < nt; t++) { /* the same token alone in a batch */
                        rf_batch b1 = b;
                        b1.n_tokens = 1;
                        b1.pos = &pos[t];
                        b1.seq = &seq[t];
                        b1.slot = &slot[t];
                        rf_tensor q1 = host_f32(q + (size_t)t * H * D, H * D, 1), o1 = host_f32(one, H * D, 1);
                        assert_int_equal(be->ops->attention(be, &o1, &q1, &kc, &vc, &b1, H, HKV, D, 0.125f, window, 0.0f, skp), RF_OK);
                        if (memcmp(one, got + (size_t)t * H * D, (size_t)(H * D) * 4))
                            fail_msg("%s: token %d alone differs from the batch", name, t);
                    }
                    be->ops->free(be, &kc);
                    be->ops->free(be, &vc);
                }
                free(table), free(perm), free(kp), free(vp), free(q), free(want), free(got), free(one), free(sk);
            }
        }
        be->ops->destroy(be);
    }
}

/* kv_store to slots, copy_rows (copy-on-write of a block) and gather_rows. */
static void test_kv_rows(void **state) {
    (void)state;
    rf_backend *be;
    assert_int_equal(rf_backend_cpu_new(2, &be), RF_OK);
    int64_t n = 64, rows = 12;
    rf_tensor c;
    assert_int_equal(be->ops->alloc(be, RF_TYPE_F32, n, rows, &c), RF_OK);
    float *x = rf_test_randn(&g_rng, (size_t)(3 * n), 1.0f), out[3 * 64];
    int32_t slots[3] = {7, 2, 11}, outr[2] = {0, 2};
    rf_batch b = {0};
    b.n_tokens = 3;
    b.slot = slots;
    b.n_out = 2;
    b.out_rows = outr;
    rf_tensor xt = host_f32(x, n, 3);
    assert_int_equal(be->ops->kv_store(be, &c, &xt, &b), RF_OK);
    for (int i = 0; i < 3; i++) assert_memory_equal((float *)c.data + slots[i] * n, x + i * n, (size_t)n * 4);
    assert_int_equal(be->ops->copy_rows(be, &c, 0, 7, 4), RF_OK); /* rows 7..10 -> 0..3 */
    assert_memory_equal(c.data, (float *)c.data + 7 * n, (size_t)(4 * n) * 4);
    assert_int_equal(be->ops->copy_rows(be, &c, 2, 4, 4), RF_ERR_RANGE); /* overlap */
    assert_int_equal(be->ops->copy_rows(be, &c, 10, 0, 4), RF_ERR_RANGE); /* past the end */
    rf_tensor ot = host_f32(out, n, 2);
    assert_int_equal(be->ops->gather_rows(be, &ot, &xt, &b, n), RF_OK);
    assert_memory_equal(out, x, (size_t)n * 4);
    assert_memory_equal(out + n, x + 2 * n, (size_t)n * 4);
    slots[1] = 12;
    assert_int_equal(be->ops->kv_store(be, &c, &xt, &b), RF_ERR_RANGE);
    be->ops->free(be, &c);
    free(x);
    be->ops->destroy(be);
}

static void test_get_rows(void **state) {
    (void)state;
    rf_backend *be;
    assert_int_equal(rf_backend_cpu_new(1, &be), RF_OK);
    int64_t n = 64, rows = 10;
    float *wf = rf_test_randn(&g_rng, (size_t)(n * rows), 1.0f);
    size_t rs;
    assert_int_equal(rf_row_size(RF_TYPE_Q8_0, n, &rs), RF_OK);
    void *wq = malloc(rs * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) rf_quantize_row(RF_TYPE_Q8_0, wf + r * n, (char *)wq + r * rs, n);
    int32_t ids[3] = {9, 0, 4};
    float want[3 * 64], got[3 * 64];
    assert_int_equal(rf_ref_get_rows(want, wq, RF_TYPE_Q8_0, ids, 3, n, rows), RF_OK);
    rf_tensor w, yt = host_f32(got, n, 3);
    be->ops->weight(be, RF_TYPE_Q8_0, n, rows, wq, &w);
    rf_poison_f32(got, 3 * 64);
    rf_batch b = {0};
    b.n_tokens = 3;
    b.ids = ids;
    assert_int_equal(be->ops->get_rows(be, &yt, &w, &b), RF_OK);
    rf_test_check_l2("get_rows q8_0", got, want, 3 * 64, 1e-6);
    int32_t bad = 10;
    b.n_tokens = 1;
    b.ids = &bad;
    assert_int_equal(be->ops->get_rows(be, &yt, &w, &b), RF_ERR_RANGE);
    free(wf), free(wq);
    be->ops->destroy(be);
}

static void test_act_q8_exact(void **state) {
    (void)state;
    enum { N = 32 * 64 };
    float *x = malloc(N * sizeof(float));
    uint8_t *a = malloc(N / 32 * 36), *b = malloc(N / 32 * 36);
    for (int round = 0; round < 200; round++) {
        rf_rng_fill_normal(&g_rng, x, N, round < 100 ? 1.0f : 1e-3f * (float)round);
        if (round % 4 == 1) /* ties: amax 127 makes id exactly 1, then k + 0.5 */
            for (int i = 0; i < N; i++) x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(x[i] * 40) % 126) + 0.5f;
        if (round % 4 == 2) /* specials, a few per block */
            for (int i = 0; i < N; i += 7) {
                static const float sp[] = {0.0f, -0.0f, 1e-40f, -1e-45f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN, 65504.0f, 1e-8f};
                x[i] = sp[(unsigned)(i / 7 + round) % (sizeof sp / sizeof *sp)];
            }
        if (round % 4 == 3) memset(x + 64, 0, 32 * sizeof(float)); /* an all-zero block */
        for (int ws = 0; ws < 2; ws++) {
            size_t nb = (size_t)N / 32 * (ws ? 36 : 34);
            memset(a, 0xAA, nb), memset(b, 0x55, nb);
            rf_cpu_act_q8_scalar(x, a, N, ws);
            rf_cpu_act_q8(x, b, N, ws);
            if (memcmp(a, b, nb)) {
                size_t k = 0;
                while (a[k] == b[k]) k++;
                fail_msg("act_q8 (with_sum %d, round %d): byte %zu differs (%02x vs %02x)", ws, round, k, a[k], b[k]);
            }
        }
    }
    free(x), free(a), free(b);
}

/* op info on the CPU: its name, no device, no memory or transfers; the GPU entry points answer
 * for the build (a build without the GPU backend: none, and a clear error) */
static void test_backend_info(void **state) {
    (void)state;
    rf_backend *be;
    assert_int_equal(rf_backend_cpu_new(1, &be), RF_OK);
    rf_backend_info bi;
    memset(&bi, 0x5a, sizeof bi);
    assert_int_equal(be->ops->info(be, true, &bi), RF_OK);
    assert_string_equal(bi.name, "cpu");
    assert_int_equal(bi.device, -1);
    assert_true(bi.mem_total == 0 && bi.mem_free == 0 && bi.mem_used == 0);
    assert_true(bi.uploads == 0 && bi.downloads == 0 && bi.launches == 0);
    be->ops->destroy(be);
    if (!rf_gpu_built()) {
        rf_backend *g = (rf_backend *)1;
        assert_int_equal(rf_gpu_device_count(), 0);
        assert_int_equal(rf_backend_gpu_new(0, &g), RF_ERR_UNSUPPORTED);
        assert_null(g);
        assert_non_null(strstr(rf_last_error(), "no GPU backend"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul), cmocka_unit_test(test_norm_rope_glu),
        cmocka_unit_test(test_paged_attention), cmocka_unit_test(test_kv_rows), cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_act_q8_exact), cmocka_unit_test(test_backend_info),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
