/* test_gpu_flash_prefill.c — rf_gpu_flash_prefill (tensor-core attention of a prompt chunk) against
 * rf_ref_paged_attention: one sequence's chunk of n tokens at positions p0..p0+n-1 over a paged
 * f16 cache whose blocks are scattered over the pool in a shuffled order, head dims 64/80/96/128
 * and the split heads 256/512 (Gemma 3/4), GQA groups (32/8, 8/8, 14/2, 4/1, 16/8, 16/2), block
 * sizes 1/7/16, sliding window and softcap, chunks of 1..300 tokens at depths 0..5000. Pool rows that hold no position of the sequence are NaN and
 * table entries past its blocks point far outside the pool, so a key the chunk must not read
 * shows as NaN or a fault. Tolerance: the reference runs on the same f16-rounded q, K and V in
 * f32; the kernel rounds each softmax weight to f16 in P.V (relative error <= 2^-11 = 4.9e-4
 * each, so at most that relative error in every output component's weighted sum, with the
 * denominator left in f32) and sums in another order: rel. L2 < 1e-3. The split heads sum each
 * score from D / 128 partial products in a fixed order: one more f32 summation order (relative
 * error ~ 2^-24 per add), far below the f16 terms, so the same bound.
 * q8_0 caches (head dims 64/96/128/256/512): the reference runs on the dequantized K/V (d * q, exact in
 * f32); the kernel rounds each K and V element to f16 for the tensor cores (relative error <=
 * 2^-11 each, like P's rounding: a V element's enters the output as P's does, a K element's moves
 * a score by at most 2^-11 of the sum of |q_i k_i|, which for these inputs is the same order).
 * Three independent rounding sources of that size in place of one: sqrt(3) times the f16 path's
 * tolerance, rounded up: rel. L2 < 2e-3.
 * Chunking: the same tokens in one call and cut into two calls at a random point give
 * bit-identical rows (the kernel's contract). Then the llama3-8b shape's 512-token chunk at depths
 * 0 / 4096 / 16384, and Gemma 4 26B-A4B's 1024-token chunks (sliding layers: head dim 256, 16/8
 * heads, window 1024; full layers: 512, 16/2) at depths to 4096: time per call against
 * rf_gpu_paged_attention (rf_gpu_attention_wide at 512), TFLOP/s.
 * Inputs are fresh each run (seed printed; RF_TEST_SEED=<n> replays). Skips (77) without a GPU. */
#include "gpu_test_common.h"

#include <time.h>

#include "backend/ref/ref_ops.h"

#define FAR_BLOCK (1 << 22)

typedef struct fp_case {
    int64_t D, nh, nhkv, bs, window;
    float softcap;
    int32_t p0, n;
    bool sinks; /* random attention-sink logits per head (gpt-oss) */
} fp_case;

typedef struct fp_pool {
    int64_t rows, maxb, kvd;
    int32_t *tab;
    float *kf, *vf; /* f16-rounded (q8: dequantized) values, as the reference reads them */
    void *dk, *dv, *dtab;
} fp_pool;

/* A pool holding positions 0..len-1 of one sequence in shuffled blocks (other rows NaN). */
static void pool_make(rf_rng *r, fp_pool *p, int64_t len, int64_t bs, int64_t kvd, bool q8) {
    const int64_t nb = (len + bs - 1) / bs + 3;
    p->rows = nb * bs, p->maxb = nb + 8, p->kvd = kvd;
    p->tab = malloc((size_t)p->maxb * 4);
    int32_t *perm = malloc((size_t)nb * 4);
    for (int64_t i = 0; i < nb; i++) perm[i] = (int32_t)i;
    for (int64_t i = nb - 1; i > 0; i--) {
        const int64_t j = (int64_t)(rf_rng_u64(r) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t b = 0; b < p->maxb; b++) p->tab[b] = b < (len + bs - 1) / bs ? perm[b] : FAR_BLOCK;
    const size_t nel = (size_t)p->rows * (size_t)kvd;
    p->kf = host_f32(nel), p->vf = host_f32(nel);
    uint16_t *k16 = malloc(nel * 2), *v16 = malloc(nel * 2);
    assert_non_null(k16), assert_non_null(v16);
    for (size_t i = 0; i < nel; i++) p->kf[i] = p->vf[i] = NAN;
    for (int64_t pos = 0; pos < len; pos++) {
        const int64_t row = (int64_t)p->tab[pos / bs] * bs + pos % bs;
        for (int64_t i = 0; i < kvd; i++) p->kf[row * kvd + i] = rf_rng_normal(r), p->vf[row * kvd + i] = rf_rng_normal(r);
    }
    for (size_t i = 0; i < nel; i++) {
        k16[i] = rf_f32_to_fp16(p->kf[i]), v16[i] = rf_f32_to_fp16(p->vf[i]);
        p->kf[i] = rf_fp16_to_f32(k16[i]), p->vf[i] = rf_fp16_to_f32(v16[i]);
    }
    if (q8) { /* rows of q8_0 blocks; rows nobody owns all 0xFF (a NaN scale) */
        const size_t qrb = (size_t)kvd / 32 * 34;
        uint8_t *kq = malloc((size_t)p->rows * qrb), *vq = malloc((size_t)p->rows * qrb);
        assert_non_null(kq), assert_non_null(vq);
        for (int64_t row = 0; row < p->rows; row++) {
            float *kr = p->kf + row * kvd, *vr = p->vf + row * kvd;
            if (isnan(kr[0])) {
                memset(kq + row * qrb, 0xFF, qrb), memset(vq + row * qrb, 0xFF, qrb);
                continue;
            }
            for (int64_t i = 0; i < kvd; i++) /* the unrounded values were overwritten above: redraw */
                kr[i] = rf_rng_normal(r), vr[i] = rf_rng_normal(r);
            assert_int_equal(rf_quantize_row(RF_TYPE_Q8_0, kr, kq + row * qrb, kvd), RF_OK);
            assert_int_equal(rf_quantize_row(RF_TYPE_Q8_0, vr, vq + row * qrb, kvd), RF_OK);
            assert_int_equal(rf_dequantize_row(RF_TYPE_Q8_0, kq + row * qrb, kr, kvd), RF_OK);
            assert_int_equal(rf_dequantize_row(RF_TYPE_Q8_0, vq + row * qrb, vr, kvd), RF_OK);
        }
        p->dk = dev_from(kq, (size_t)p->rows * qrb);
        p->dv = dev_from(vq, (size_t)p->rows * qrb);
        free(kq), free(vq);
    } else {
        p->dk = dev_from(k16, nel * 2);
        p->dv = dev_from(v16, nel * 2);
    }
    p->dtab = dev_from(p->tab, (size_t)p->maxb * 4);
    free(k16), free(v16), free(perm);
}

static void pool_free(fp_pool *p) {
    rf_gpu_free(g_ctx, p->dk), rf_gpu_free(g_ctx, p->dv), rf_gpu_free(g_ctx, p->dtab);
    free(p->tab), free(p->kf), free(p->vf);
}

static double run_case(rf_rng *r, const fp_case *c, rf_type kt) {
    const int64_t qd = c->nh * c->D, kvd = c->nhkv * c->D, len = c->p0 + c->n;
    fp_pool p;
    pool_make(r, &p, len, c->bs, kvd, kt == RF_TYPE_Q8_0);
    float *q = host_f32((size_t)(c->n * qd)), *want = host_f32((size_t)(c->n * qd));
    float *got = host_f32((size_t)(c->n * qd)), *got2 = host_f32((size_t)(c->n * qd));
    for (int64_t i = 0; i < c->n * qd; i++) q[i] = rf_fp16_to_f32(rf_f32_to_fp16(rf_rng_normal(r) * 0.6f));
    int32_t *pos = malloc((size_t)c->n * 4), *seq = calloc((size_t)c->n, 4);
    for (int32_t i = 0; i < c->n; i++) pos[i] = c->p0 + i;
    const float scale = 1.0f / sqrtf((float)c->D);
    float *sk = NULL, *dsk = NULL;
    if (c->sinks) { /* sink logits as large as the scores, so they move the result */
        sk = host_f32((size_t)c->nh);
        rf_rng_fill_normal(r, sk, (size_t)c->nh, 2.0f);
        dsk = dev_from(sk, (size_t)c->nh * 4);
    }
    assert_int_equal(rf_ref_paged_attention(want, q, p.kf, p.vf, c->n, pos, seq, p.tab, p.maxb, c->bs, c->nh, c->nhkv,
                                            c->D, scale, c->window, c->softcap, sk),
                     RF_OK);
    float *dq = dev_from(q, (size_t)(c->n * qd) * 4), *dout = dev_poison((size_t)(c->n * qd) * 4);
    assert_int_equal(rf_gpu_flash_prefill(g_ctx, dout, dq, p.dk, p.dv, kt, c->n, c->p0, p.dtab, c->bs, c->nh,
                                          c->nhkv, c->D, scale, c->window, c->softcap, dsk),
                     RF_OK);
    dev_to(got, dout, (size_t)(c->n * qd) * 4);
    double num = 0, den = 0;
    for (int64_t i = 0; i < c->n * qd; i++) {
        const double d = (double)got[i] - want[i];
        num += d * d, den += (double)want[i] * want[i];
        if (isnan(got[i])) fail_msg("NaN at %lld", (long long)i);
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    /* the same tokens cut into two calls */
    const int32_t cut = c->n > 1 ? 1 + (int32_t)(rf_rng_u64(r) % (uint64_t)(c->n - 1)) : 1;
    assert_int_equal(rf_gpu_memset(g_ctx, dout, 0xFF, (size_t)(c->n * qd) * 4), RF_OK);
    assert_int_equal(rf_gpu_flash_prefill(g_ctx, dout, dq, p.dk, p.dv, kt, cut, c->p0, p.dtab, c->bs, c->nh,
                                          c->nhkv, c->D, scale, c->window, c->softcap, dsk),
                     RF_OK);
    assert_int_equal(rf_gpu_flash_prefill(g_ctx, dout + cut * qd, dq + cut * qd, p.dk, p.dv, kt, c->n - cut,
                                          c->p0 + cut, p.dtab, c->bs, c->nh, c->nhkv, c->D, scale, c->window,
                                          c->softcap, dsk),
                     RF_OK);
    dev_to(got2, dout, (size_t)(c->n * qd) * 4);
    if (c->n > 1 && memcmp(got, got2, (size_t)(c->n * qd) * 4))
        fail_msg("D%lld n%d p0 %d: cut at %d changes the output", (long long)c->D, c->n, c->p0, cut);
    printf("  %-4s D%-3lld h%2lld/%-2lld bs%-2lld win%-4lld cap%-3g p0 %5d n %3d%s: rel. L2 %.2e\n",
           kt == RF_TYPE_Q8_0 ? "q8_0" : "f16", (long long)c->D, (long long)c->nh, (long long)c->nhkv, (long long)c->bs,
           (long long)c->window, c->softcap, c->p0, c->n, c->sinks ? " sinks" : "", rel);
    rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dout);
    if (dsk) rf_gpu_free(g_ctx, dsk);
    free(q), free(want), free(got), free(got2), free(pos), free(seq), free(sk);
    pool_free(&p);
    return rel;
}

static void test_flash_vs_ref(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    const fp_case cases[] = {
        {128, 32, 8, 16, 0, 0, 0, 1, false}, {128, 32, 8, 16, 0, 0, 0, 64, false}, {128, 32, 8, 16, 0, 0, 0, 300, false},
        {128, 32, 8, 16, 0, 0, 1000, 77, false}, {128, 32, 8, 7, 0, 0, 4500, 129, false}, {128, 8, 8, 1, 0, 0, 63, 65, false},
        {64, 14, 2, 16, 0, 0, 500, 200, false}, {64, 4, 1, 16, 100, 0, 300, 250, false}, {80, 8, 8, 16, 0, 0, 33, 100, false},
        {96, 12, 4, 7, 0, 0, 2000, 17, false}, {128, 8, 4, 16, 128, 30, 900, 200, false}, {128, 32, 8, 16, 0, 50, 5000, 96, false},
        {64, 8, 2, 16, 64, 0, 0, 190, false},
        /* attention sinks (gpt-oss: head dim 64, 64/8 heads, window 128 on half the layers) */
        {64, 64, 8, 16, 0, 0, 0, 100, true}, {64, 64, 8, 16, 128, 0, 700, 200, true},
        {128, 8, 2, 7, 0, 0, 1000, 33, true},
        /* split heads: Gemma 3/4 sliding layers (256, window, softcap on Gemma 2-style files) and
         * Gemma 4's full layers (512, 16/2) */
        {256, 16, 8, 16, 0, 0, 0, 100, false}, {256, 16, 8, 16, 512, 0, 700, 150, false},
        {256, 8, 4, 7, 0, 30, 300, 65, false}, {256, 4, 1, 16, 0, 0, 64, 33, true}, {256, 16, 8, 16, 0, 0, 40, 1, false},
        {512, 16, 2, 16, 0, 0, 0, 70, false}, {512, 8, 2, 7, 0, 0, 500, 100, false},
        {512, 4, 4, 1, 100, 30, 200, 45, true}, {512, 16, 2, 16, 0, 0, 31, 40, false},
    };
    rf_gpu_info info;
    rf_gpu_get_info(g_ctx, &info);
    /* Hopper (227 KiB a block): the split heads must take the kernel */
    if (info.cc_major == 9 && rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_F16, 128))
        assert_true(rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_F16, 256) &&
                    rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_Q8_0, 512));
    double worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (!rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_F16, cases[i].D)) {
            if (cases[i].D > 128) { /* split heads want ~150-170 KB of shared memory a block */
                printf("  D%lld: not available on this device (shared memory): skipped\n", (long long)cases[i].D);
                continue;
            }
            printf("  flash prefill not available on this device: skipped\n");
            skip();
        }
        const double e = run_case(&r, &cases[i], RF_TYPE_F16);
        if (e > worst) worst = e;
        if (!(e < 1e-3)) fail_msg("case %zu: rel. L2 %.3e >= 1e-3", i, e);
    }
    printf("  worst rel. L2 %.2e (tol 1e-3)\n", worst);
    /* q8_0 caches: every case whose head dim is a multiple of 32 */
    double worst8 = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].D % 32) continue;
        assert_true(rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_Q8_0, cases[i].D) ==
                    rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_F16, cases[i].D));
        if (!rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_Q8_0, cases[i].D)) continue;
        const double e = run_case(&r, &cases[i], RF_TYPE_Q8_0);
        if (e > worst8) worst8 = e;
        if (!(e < 2e-3)) fail_msg("q8_0 case %zu: rel. L2 %.3e >= 2e-3", i, e);
    }
    printf("  q8_0: worst rel. L2 %.2e (tol 2e-3)\n", worst8);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One prompt chunk's attention, both kernels (and flash on a q8_0 cache), mean of 20 calls. */
typedef struct fp_shape {
    const char *name;
    int64_t D, nh, nhkv, window;
    int32_t n, p0;
} fp_shape;

static void time_shape(rf_rng *r, const fp_shape *sh) {
    const int64_t D = sh->D, nh = sh->nh, nhkv = sh->nhkv, bs = 16, n = sh->n, qd = nh * D, win = sh->window;
    const int32_t p0 = sh->p0;
    const float scale = 1.0f / sqrtf((float)D);
    fp_pool p;
    pool_make(r, &p, p0 + n, bs, nhkv * D, false);
    fp_pool p8;
    pool_make(r, &p8, p0 + n, bs, nhkv * D, true);
    float *q = host_f32((size_t)(n * qd));
    for (int64_t i = 0; i < n * qd; i++) q[i] = rf_rng_normal(r) * 0.6f;
    int32_t *pos = malloc((size_t)n * 4), *seq = calloc((size_t)n, 4);
    for (int32_t i = 0; i < n; i++) pos[i] = p0 + i;
    float *dq = dev_from(q, (size_t)(n * qd) * 4), *dout = dev_poison((size_t)(n * qd) * 4);
    int32_t *dpos = dev_from(pos, (size_t)n * 4), *dseq = dev_from(seq, (size_t)n * 4);
    double t[3];
    for (int kern = 0; kern < 3; kern++) {
        for (int rep = -3; rep < 20; rep++) {
            if (rep == 0) {
                assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                t[kern] = now_s();
            }
            rf_status st = kern == 0
                ? rf_gpu_paged_attention(g_ctx, dout, dq, p.dk, p.dv, RF_TYPE_F16, n, dpos, dseq, p.dtab, p.maxb, bs, nh,
                                         nhkv, D, scale, win, 0.0f, p0 + n - 1, NULL)
                : kern == 1 ? rf_gpu_flash_prefill(g_ctx, dout, dq, p.dk, p.dv, RF_TYPE_F16, n, p0, p.dtab, bs, nh, nhkv,
                                                   D, scale, win, 0.0f, NULL)
                            : rf_gpu_flash_prefill(g_ctx, dout, dq, p8.dk, p8.dv, RF_TYPE_Q8_0, n, p0, p8.dtab, bs, nh,
                                                   nhkv, D, scale, win, 0.0f, NULL);
            assert_int_equal(st, RF_OK);
        }
        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
        t[kern] = (now_s() - t[kern]) / 20 * 1e6;
    }
    /* keys seen: token i at position p0 + i sees min(p0 + i + 1, window) keys; 4 flops per
     * (query head, key, dim): QK and PV */
    double keys = 0;
    for (int32_t i = 0; i < n; i++) {
        const double k = p0 + i + 1.0;
        keys += win > 0 && k > (double)win ? (double)win : k;
    }
    const double flops = 4.0 * nh * D * keys;
    printf("  %-18s D%-3lld depth %-6d %12.1f %12.1f %10.1f %9.1fx %14.1f\n", sh->name, (long long)D, (int)(p0 + n),
           t[0], t[1], flops / t[1] * 1e-6, t[0] / t[1], t[2]);
    rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dout), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq);
    free(q), free(pos), free(seq);
    pool_free(&p), pool_free(&p8);
}

/* llama3-8b's 512-token chunk at several depths; Gemma 4 26B-A4B's 1024-token chunks (the
 * sliding layers' 256-wide heads, the full layers' 512-wide ones) up to depth 4096 */
static void test_flash_timing(void **state) {
    (void)state;
    if (!rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_F16, 128)) skip();
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 5);
    const fp_shape shapes[] = {
        {"llama3-8b", 128, 32, 8, 0, 512, 0},        {"llama3-8b", 128, 32, 8, 0, 512, 4096 - 512},
        {"llama3-8b", 128, 32, 8, 0, 512, 16384 - 512}, {"gemma4 sliding", 256, 16, 8, 1024, 1024, 0},
        {"gemma4 sliding", 256, 16, 8, 1024, 1024, 3072}, {"gemma4 full", 512, 16, 2, 0, 1024, 0},
        {"gemma4 full", 512, 16, 2, 0, 1024, 3072},
    };
    printf("  %-18s %-4s %-12s %12s %12s %10s %10s %14s\n", "shape", "", "", "paged (us)", "flash (us)", "TFLOP/s",
           "speed-up", "flash q8_0 (us)");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        if (!rf_gpu_flash_prefill_supported(g_ctx, RF_TYPE_F16, shapes[i].D)) continue;
        time_shape(&r, &shapes[i]);
    }
}

static int setup(void **state) {
    (void)state;
    gpu_test_init_or_skip("test_gpu_flash_prefill");
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash_vs_ref),
        cmocka_unit_test(test_flash_timing),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
