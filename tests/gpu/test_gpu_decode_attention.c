/* test_gpu_decode_attention.c — rf_gpu_decode_attention (decode attention on the tensor cores)
 * against rf_ref_paged_attention: several sequences of different lengths (1,000 .. 20,000 keys) in
 * one call, one decode token each at its last position, over a paged f16 or q8_0 cache whose
 * blocks are shuffled over the pool; GQA 1 / 4 / 7 / 8, head dims 64 / 128, block sizes 7 / 16,
 * sliding windows, softcap, attention sinks. Pool rows no sequence owns are NaN and table entries
 * past a sequence's blocks point far outside the pool, so a key the kernel must not read shows.
 *
 * Tolerance, from the kernel's roundings (the reference runs in f32 on the same f16 q and the same
 * K/V values: the f16 cache's, or q8_0's d * q, exact in f32):
 *   f16 cache: each softmax weight p enters P.V rounded to f16, a relative error <= 2^-11 =
 *   4.9e-4 per term. The terms p_j v_j of a component have random signs, so the rounding errors
 *   add like independent variables: the error's standard deviation is <= 2^-11 / sqrt(3) times
 *   sqrt(sum_j (p_j v_j)^2), the output's size is that root sum of squares too (random v), so the
 *   relative error is ~2.8e-4 whatever the depth (the worst case, all errors of one sign, would
 *   grow with sqrt(keys); independence is the model). The f32 sums (scores, denominators, the
 *   split merge) add ~1e-7 * log2(keys). Bound: rel. L2 < 1e-3.
 *   q8_0 cache: also every K and V element rounded to f16 (2^-11 each, independent): a V element's
 *   error enters like p's; a K element's moves a score by ~2^-11 / sqrt(3) of
 *   sqrt(sum_i (q_i k_i)^2) * scale ~ 1.7e-4 here (q ~ 0.6, k ~ 1, D = 128, scale 1/sqrt(D)),
 *   which moves p by that relative amount: three sources of that size, sqrt(3) times the f16
 *   model, rounded up: rel. L2 < 2e-3 (rf_gpu_flash_prefill's bounds, the same roundings).
 * Bits: a token alone and among the others (also in reversed order) gives the same bits (splits
 * fixed by the row's own key count); rf_gpu_paged_attention_route gives rows below min_keys - 1
 * the paged kernel's bits and the others this kernel's; padding rows zeros, invalid rows NaN, also
 * in calls of at most 256 keys (one split a row), whose rows the attention kernel writes without
 * the merge kernel: every case's bits the same through the merge (RF_GPU_DECODE_MMA_DIRECT off).
 * Timing (printed, nothing checked): llama3-8b's shape (32 / 8 heads, head dim 128, blocks of 16),
 * 1 and 8 sequences at depths 1,024 .. 32,768, f16 and q8_0: us per call of the paged kernel
 * (rf_gpu_paged_attention_hint, decode), this kernel, and the route at threshold 2048, for the
 * token at position depth - 1; then this kernel and the route for the token at depth + 15, where
 * `rocmforge bench -d DEPTH -n 16` decodes (its tokens sit at depth .. depth + 15: one key past a
 * power of two changes a row's splits, which the engine's op times showed and this test missed).
 * RF_TEST_QUICK (sanitizer runs): the cases of <= 6,000 keys, no timing.
 * Inputs are fresh each run (seed printed; RF_TEST_SEED=<n> replays). Skips (77) without a GPU
 * or where the kernel is not built (HIP, sm < 80). */
#include "core/knobs.h"
#include "gpu_test_common.h"

#include <time.h>

#include "backend/ref/ref_ops.h"

#define FAR_BLOCK (1 << 22)
#define MAXSEQ 8

typedef struct da_case {
    int64_t D, nh, nhkv, bs, window;
    float softcap;
    bool sinks;
    int nseq;
    int32_t len[MAXSEQ]; /* keys of each sequence: its token sits at position len - 1 */
} da_case;

typedef struct da_pool {
    int64_t rows, maxb, kvd;
    int32_t *tab; /* [nseq][maxb] */
    float *kf, *vf; /* the values the kernel reads (f16-rounded, or q8_0's d * q) */
    void *dk, *dv, *dtab;
} da_pool;

/* A pool holding positions 0..len[s]-1 of each sequence s in shuffled blocks (other rows NaN). */
static void pool_make(rf_rng *r, da_pool *p, const int32_t *len, int nseq, int64_t bs, int64_t kvd, bool q8) {
    int64_t nb = 0, mb = 0;
    for (int s = 0; s < nseq; s++) {
        const int64_t b = (len[s] + bs - 1) / bs;
        nb += b, mb = b > mb ? b : mb;
    }
    nb += 3;
    p->rows = nb * bs, p->maxb = mb + 8, p->kvd = kvd;
    p->tab = malloc((size_t)(p->maxb * nseq) * 4);
    int32_t *perm = malloc((size_t)nb * 4);
    assert_non_null(p->tab), assert_non_null(perm);
    for (int64_t i = 0; i < nb; i++) perm[i] = (int32_t)i;
    for (int64_t i = nb - 1; i > 0; i--) {
        const int64_t j = (int64_t)(rf_rng_u64(r) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int64_t used = 0;
    for (int s = 0; s < nseq; s++) {
        const int64_t b = (len[s] + bs - 1) / bs;
        for (int64_t i = 0; i < p->maxb; i++) p->tab[s * p->maxb + i] = i < b ? perm[used + i] : FAR_BLOCK;
        used += b;
    }
    const size_t nel = (size_t)p->rows * (size_t)kvd;
    p->kf = host_f32(nel), p->vf = host_f32(nel);
    for (size_t i = 0; i < nel; i++) p->kf[i] = p->vf[i] = NAN;
    uint8_t *own = calloc((size_t)p->rows, 1);
    assert_non_null(own);
    for (int s = 0; s < nseq; s++)
        for (int64_t pos = 0; pos < len[s]; pos++) {
            const int64_t row = (int64_t)p->tab[s * p->maxb + pos / bs] * bs + pos % bs;
            own[row] = 1;
            for (int64_t i = 0; i < kvd; i++) p->kf[row * kvd + i] = rf_rng_normal(r), p->vf[row * kvd + i] = rf_rng_normal(r);
        }
    if (q8) { /* rows of q8_0 blocks; rows nobody owns all 0xFF (a NaN scale) */
        const size_t qrb = (size_t)kvd / 32 * 34;
        uint8_t *kq = malloc((size_t)p->rows * qrb), *vq = malloc((size_t)p->rows * qrb);
        assert_non_null(kq), assert_non_null(vq);
        for (int64_t row = 0; row < p->rows; row++) {
            float *kr = p->kf + row * kvd, *vr = p->vf + row * kvd;
            if (!own[row]) {
                memset(kq + row * qrb, 0xFF, qrb), memset(vq + row * qrb, 0xFF, qrb);
                continue;
            }
            assert_int_equal(rf_quantize_row(RF_TYPE_Q8_0, kr, kq + row * qrb, kvd), RF_OK);
            assert_int_equal(rf_quantize_row(RF_TYPE_Q8_0, vr, vq + row * qrb, kvd), RF_OK);
            assert_int_equal(rf_dequantize_row(RF_TYPE_Q8_0, kq + row * qrb, kr, kvd), RF_OK);
            assert_int_equal(rf_dequantize_row(RF_TYPE_Q8_0, vq + row * qrb, vr, kvd), RF_OK);
        }
        p->dk = dev_from(kq, (size_t)p->rows * qrb);
        p->dv = dev_from(vq, (size_t)p->rows * qrb);
        free(kq), free(vq);
    } else {
        uint16_t *k16 = malloc(nel * 2), *v16 = malloc(nel * 2);
        assert_non_null(k16), assert_non_null(v16);
        for (size_t i = 0; i < nel; i++) {
            k16[i] = rf_f32_to_fp16(p->kf[i]), v16[i] = rf_f32_to_fp16(p->vf[i]);
            p->kf[i] = rf_fp16_to_f32(k16[i]), p->vf[i] = rf_fp16_to_f32(v16[i]);
        }
        p->dk = dev_from(k16, nel * 2);
        p->dv = dev_from(v16, nel * 2);
        free(k16), free(v16);
    }
    p->dtab = dev_from(p->tab, (size_t)(p->maxb * nseq) * 4);
    free(perm), free(own);
}

static void pool_free(da_pool *p) {
    rf_gpu_free(g_ctx, p->dk), rf_gpu_free(g_ctx, p->dv), rf_gpu_free(g_ctx, p->dtab);
    free(p->tab), free(p->kf), free(p->vf);
}

static double rel_l2(const float *got, const float *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - want[i];
        num += d * d, den += (double)want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One case: the batch against the reference, the bit checks; returns the rel. L2 error. */
static double run_case(rf_rng *r, const da_case *c, rf_type kt) {
    const int ns = c->nseq;
    const int64_t D = c->D, qd = c->nh * D, kvd = c->nhkv * D;
    if (!rf_gpu_decode_attention_supported(g_ctx, kt, D, c->nh, c->nhkv)) return 0;
    da_pool p;
    pool_make(r, &p, c->len, ns, c->bs, kvd, kt == RF_TYPE_Q8_0);
    int32_t pos[MAXSEQ], seq[MAXSEQ], maxp = 0;
    for (int s = 0; s < ns; s++) {
        pos[s] = c->len[s] - 1, seq[s] = s;
        if (pos[s] > maxp) maxp = pos[s];
    }
    float *q = host_f32((size_t)(ns * qd)), *want = host_f32((size_t)(ns * qd)), *got = host_f32((size_t)(ns * qd));
    float *one = host_f32((size_t)qd);
    for (int64_t i = 0; i < ns * qd; i++) q[i] = rf_fp16_to_f32(rf_f32_to_fp16(rf_rng_normal(r) * 0.6f));
    const float scale = 1.0f / sqrtf((float)D);
    float *sk = NULL, *dsk = NULL;
    if (c->sinks) { /* sink logits as large as the scores, so they move the result */
        sk = host_f32((size_t)c->nh);
        rf_rng_fill_normal(r, sk, (size_t)c->nh, 2.0f);
        dsk = dev_from(sk, (size_t)c->nh * 4);
    }
    assert_int_equal(rf_ref_paged_attention(want, q, p.kf, p.vf, ns, pos, seq, p.tab, p.maxb, c->bs, c->nh, c->nhkv, D,
                                            scale, c->window, c->softcap, sk),
                     RF_OK);
    float *dq = dev_from(q, (size_t)(ns * qd) * 4), *dout = dev_poison((size_t)(ns * qd) * 4);
    int32_t *dpos = dev_from(pos, sizeof pos), *dseq = dev_from(seq, sizeof seq);
    assert_int_equal(rf_gpu_decode_attention(g_ctx, dout, dq, p.dk, p.dv, kt, ns, dpos, dseq, p.dtab, p.maxb, c->bs,
                                             c->nh, c->nhkv, D, scale, c->window, c->softcap, maxp, dsk, 1),
                     RF_OK);
    dev_to(got, dout, (size_t)(ns * qd) * 4);
    for (int64_t i = 0; i < ns * qd; i++)
        if (isnan(got[i])) fail_msg("NaN at %lld", (long long)i);
    const double rel = rel_l2(got, want, (size_t)(ns * qd));
    /* through the merge kernel (RF_GPU_DECODE_MMA_DIRECT off; a call of one split a row skips it by
     * default): the same bits */
    if (!rf_knob_is_set(RF_KNOB_GPU_DECODE_MMA_DIRECT)) {
        float *merged = host_f32((size_t)(ns * qd));
        assert_int_equal(rf_knob_override(RF_KNOB_GPU_DECODE_MMA_DIRECT, "off"), RF_OK);
        assert_int_equal(rf_gpu_memset(g_ctx, dout, 0xFF, (size_t)(ns * qd) * 4), RF_OK);
        assert_int_equal(rf_gpu_decode_attention(g_ctx, dout, dq, p.dk, p.dv, kt, ns, dpos, dseq, p.dtab, p.maxb,
                                                 c->bs, c->nh, c->nhkv, D, scale, c->window, c->softcap, maxp, dsk, 1),
                         RF_OK);
        assert_int_equal(rf_knob_override(RF_KNOB_GPU_DECODE_MMA_DIRECT, NULL), RF_OK);
        dev_to(merged, dout, (size_t)(ns * qd) * 4);
        if (memcmp(merged, got, (size_t)(ns * qd) * 4)) fail_msg("through the merge kernel: other bits");
        free(merged);
    }

    /* each token alone (its own max_pos), from the last to the first: the same bits */
    for (int s = ns - 1; s >= 0; s--) {
        assert_int_equal(rf_gpu_memset(g_ctx, dout, 0xFF, (size_t)qd * 4), RF_OK);
        assert_int_equal(rf_gpu_decode_attention(g_ctx, dout, dq + s * qd, p.dk, p.dv, kt, 1, dpos + s, dseq + s,
                                                 p.dtab, p.maxb, c->bs, c->nh, c->nhkv, D, scale, c->window,
                                                 c->softcap, pos[s], dsk, 1),
                         RF_OK);
        dev_to(one, dout, (size_t)qd * 4);
        if (memcmp(one, got + s * qd, (size_t)qd * 4))
            fail_msg("sequence %d (len %d) alone differs from the batch", s, c->len[s]);
    }
    printf("  %-4s D%-3lld h%2lld/%-2lld bs%-2lld win%-5lld cap%-3g%s lens", kt == RF_TYPE_Q8_0 ? "q8_0" : "f16",
           (long long)D, (long long)c->nh, (long long)c->nhkv, (long long)c->bs, (long long)c->window, c->softcap,
           c->sinks ? " sinks" : "");
    for (int s = 0; s < ns; s++) printf(" %d", c->len[s]);
    printf(": rel. L2 %.2e\n", rel);
    rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dout), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq);
    if (dsk) rf_gpu_free(g_ctx, dsk);
    free(q), free(want), free(got), free(one), free(sk);
    pool_free(&p);
    return rel;
}

static const da_case g_cases[] = {
    /* llama3-8b (32 / 8 heads, GQA 4) */
    {128, 32, 8, 16, 0, 0, false, 4, {1000, 4096, 16384, 20000}},
    {128, 32, 8, 16, 0, 0, false, 3, {2049, 2048, 7777}},
    /* GQA 1 and 8, blocks of 7 */
    {128, 8, 8, 7, 0, 0, false, 3, {1000, 2500, 9001}},
    {128, 16, 2, 7, 0, 0, false, 3, {1500, 12000, 20000}},
    /* head dim 64, GQA 7; gpt-oss-like sinks and a window; softcap; a long window */
    {64, 14, 2, 16, 0, 0, false, 2, {3000, 1000}},
    {64, 64, 8, 16, 128, 0, true, 2, {5000, 1200}},
    {128, 8, 4, 16, 0, 30, false, 2, {2000, 6000}},
    {128, 32, 8, 16, 4096, 0, false, 3, {16384, 5000, 3000}},
    /* one split a row (at most 256 keys: no merge kernel), with sinks and a window, softcap */
    {128, 32, 8, 16, 0, 0, false, 5, {1, 17, 200, 255, 256}},
    {64, 64, 8, 16, 128, 0, true, 2, {250, 100}},
    {128, 8, 4, 7, 0, 30, false, 2, {5, 129}},
};

static void test_decode_vs_ref(void **state) {
    (void)state;
    if (!rf_gpu_decode_attention_supported(g_ctx, RF_TYPE_F16, 128, 32, 8)) {
        printf("  decode attention not available on this device: skipped\n");
        skip();
    }
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    double worst = 0, worst8 = 0;
    const bool quick = getenv("RF_TEST_QUICK") != NULL; /* sanitizer runs: the shorter cases */
    for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; i++) {
        int32_t longest = 0;
        for (int j = 0; j < g_cases[i].nseq; j++) longest = g_cases[i].len[j] > longest ? g_cases[i].len[j] : longest;
        if (quick && longest > 6000) continue;
        const double e = run_case(&r, &g_cases[i], RF_TYPE_F16);
        if (e > worst) worst = e;
        if (!(e < 1e-3)) fail_msg("f16 case %zu: rel. L2 %.3e >= 1e-3", i, e);
        const double e8 = run_case(&r, &g_cases[i], RF_TYPE_Q8_0);
        if (e8 > worst8) worst8 = e8;
        if (!(e8 < 2e-3)) fail_msg("q8_0 case %zu: rel. L2 %.3e >= 2e-3", i, e8);
    }
    printf("  worst rel. L2: f16 %.2e (tol 1e-3), q8_0 %.2e (tol 2e-3)\n", worst, worst8);
}

/* rf_gpu_paged_attention_route: a decode call mixing rows below and above the threshold, a
 * padding row and an invalid one; each row takes its kernel's bits. Threshold 2048, then 1: every
 * row the decode kernel's and the paged kernel not launched, so the merge writes the padding row's
 * zeros itself. */
static void route_case(const int32_t *len, int32_t maxp, int64_t kmin_hi, int32_t bad_pos) {
    for (int q8 = 0; q8 < 2; q8++) {
        const rf_type kt = q8 ? RF_TYPE_Q8_0 : RF_TYPE_F16;
        if (!rf_gpu_decode_attention_supported(g_ctx, kt, 128, 32, 8)) skip();
        rf_rng r;
        rf_rng_init(&r, rf_test_seed() + 3 + (uint64_t)q8 + (uint64_t)maxp);
        const int64_t D = 128, nh = 32, nhkv = 8, bs = 16, qd = nh * D;
        da_pool p;
        pool_make(&r, &p, len, 5, bs, nhkv * D, q8);
        /* tokens: the 5 sequences' last positions, then a padding row and an invalid one */
        const int nt = 7;
        int32_t pos[7], seq[7];
        for (int s = 0; s < 5; s++) pos[s] = len[s] - 1, seq[s] = s;
        pos[5] = -1, seq[5] = 0, pos[6] = bad_pos, seq[6] = -1;
        float *q = host_f32((size_t)(nt * qd)), *got = host_f32((size_t)(nt * qd)), *pa = host_f32((size_t)(nt * qd));
        float *da = host_f32((size_t)(nt * qd)), *want = host_f32((size_t)(nt * qd));
        for (int64_t i = 0; i < nt * qd; i++) q[i] = rf_fp16_to_f32(rf_f32_to_fp16(rf_rng_normal(&r) * 0.6f));
        const float scale = 1.0f / sqrtf((float)D);
        float *dq = dev_from(q, (size_t)(nt * qd) * 4), *dout = dev_poison((size_t)(nt * qd) * 4);
        int32_t *dpos = dev_from(pos, sizeof pos), *dseq = dev_from(seq, sizeof seq);
        assert_int_equal(rf_gpu_paged_attention_hint(g_ctx, dout, dq, p.dk, p.dv, kt, nt, dpos, dseq, p.dtab, p.maxb,
                                                     bs, nh, nhkv, D, scale, 0, 0.0f, maxp, NULL, true),
                         RF_OK);
        dev_to(pa, dout, (size_t)(nt * qd) * 4);
        assert_int_equal(rf_ref_paged_attention(want, q, p.kf, p.vf, 5, pos, seq, p.tab, p.maxb, bs, nh, nhkv, D, scale,
                                                0, 0.0f, NULL),
                         RF_OK);
        for (int km = 0; km < 2; km++) {
            const int64_t kmin = km ? 1 : kmin_hi;
            assert_int_equal(rf_gpu_memset(g_ctx, dout, 0xFF, (size_t)(nt * qd) * 4), RF_OK);
            assert_int_equal(rf_gpu_paged_attention_route(g_ctx, dout, dq, p.dk, p.dv, kt, nt, dpos, dseq, p.dtab,
                                                          p.maxb, bs, nh, nhkv, D, scale, 0, 0.0f, maxp, NULL, true,
                                                          kmin),
                             RF_OK);
            dev_to(got, dout, (size_t)(nt * qd) * 4);
            assert_int_equal(rf_gpu_memset(g_ctx, dout, 0xFF, (size_t)(nt * qd) * 4), RF_OK);
            assert_int_equal(rf_gpu_decode_attention(g_ctx, dout, dq, p.dk, p.dv, kt, nt, dpos, dseq, p.dtab, p.maxb,
                                                     bs, nh, nhkv, D, scale, 0, 0.0f, maxp, NULL, kmin),
                             RF_OK);
            dev_to(da, dout, (size_t)(nt * qd) * 4);
            for (int t = 0; t < nt; t++) {
                const float *g = got + t * qd;
                if (t == 5) {
                    for (int64_t i = 0; i < qd; i++)
                        if (g[i] != 0.0f) fail_msg("kmin %lld, padding row: %g at %lld", (long long)kmin, g[i],
                                                   (long long)i);
                } else if (t == 6) {
                    for (int64_t i = 0; i < qd; i++)
                        if (!isnan(g[i])) fail_msg("kmin %lld, invalid row: %g at %lld", (long long)kmin, g[i],
                                                   (long long)i);
                } else {
                    const bool deep = pos[t] + 1 >= kmin;
                    if (memcmp(g, (deep ? da : pa) + t * qd, (size_t)qd * 4))
                        fail_msg("kmin %lld, row %d (pos %d): not the %s kernel's bits", (long long)kmin, t, pos[t],
                                 deep ? "decode" : "paged");
                }
            }
            /* and against the reference (the 5 valid rows) */
            const double e = rel_l2(got, want, (size_t)(5 * qd));
            printf("  route %s kmin %4lld: rows %lld+ keys on the decode kernel, the rest paged; rel. L2 %.2e\n",
                   q8 ? "q8_0" : "f16", (long long)kmin, (long long)kmin, e);
            if (!(e < (q8 ? 2e-3 : 1e-3))) fail_msg("route kmin %lld: rel. L2 %.3e", (long long)kmin, e);
        }
        rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dout), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq);
        free(q), free(got), free(pa), free(da), free(want);
        pool_free(&p);
    }
}

static void test_route(void **state) {
    (void)state;
    const int32_t deep[5] = {3000, 100, 2048, 2047, 6000}, shallow[5] = {200, 100, 256, 255, 17};
    route_case(deep, 5999, 2048, 2500);
    /* at most 256 keys: one split a row, the rows (padding zeros, invalid NaN) written without the merge */
    route_case(shallow, 255, 100, 150);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A device pool for timing only: ns sequences of len keys, random values (f16: normal; q8_0:
 * random quants with scale 1/64), blocks in a shuffled order. */
static void time_pool(rf_rng *r, int ns, int32_t len, int64_t bs, int64_t kvd, bool q8, void **dk, void **dv,
                      int32_t **dtab, int64_t *maxb) {
    const int64_t per = (len + bs - 1) / bs, nb = per * ns, rows = nb * bs;
    const size_t rb = q8 ? (size_t)kvd / 32 * 34 : (size_t)kvd * 2, bytes = (size_t)rows * rb;
    uint8_t *h = malloc(bytes);
    assert_non_null(h);
    /* a random pattern of 34 * 2^15 bytes (whole q8_0 blocks, whole f16 values) repeated: the
     * values do not matter here, the time to draw 10^8 of them would */
    const size_t pat = (size_t)34 << 15;
    for (size_t i = 0; i < bytes; i++) {
        if (i < pat) {
            if (q8) h[i] = (uint8_t)rf_rng_u64(r);
            else if (i % 2 == 0) {
                const uint16_t x = rf_f32_to_fp16(rf_rng_normal(r));
                memcpy(h + i, &x, i + 1 < bytes ? 2 : 1);
            }
        } else {
            h[i] = h[i % pat];
        }
    }
    if (q8) {
        const uint16_t d = rf_f32_to_fp16(1.0f / 64);
        for (size_t b = 0; b < bytes / 34; b++) memcpy(h + b * 34, &d, 2);
    }
    *dk = dev_from(h, bytes), *dv = dev_from(h, bytes);
    int32_t *perm = malloc((size_t)nb * 4);
    assert_non_null(perm);
    for (int64_t i = 0; i < nb; i++) perm[i] = (int32_t)i;
    for (int64_t i = nb - 1; i > 0; i--) {
        const int64_t j = (int64_t)(rf_rng_u64(r) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    *maxb = per;
    *dtab = dev_from(perm, (size_t)nb * 4);
    free(h), free(perm);
}

static void test_decode_timing(void **state) {
    (void)state;
    if (!rf_gpu_decode_attention_supported(g_ctx, RF_TYPE_F16, 128, 32, 8)) skip();
    if (getenv("RF_TEST_QUICK")) skip(); /* timing means nothing under a sanitizer */
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 9);
    const int64_t D = 128, nh = 32, nhkv = 8, bs = 16, qd = nh * D, kmin = 2048;
    const int32_t depths[] = {1024, 2048, 4096, 8192, 16384, 32768};
    const int nss[] = {1, 8};
    const float scale = 1.0f / sqrtf((float)D);
    printf("  llama3-8b shape (32/8 heads, D 128, blocks of 16), us per call (mean of 50):\n");
    printf("  %-5s %4s %7s %11s %11s %11s %9s %11s %11s\n", "cache", "seqs", "depth", "paged", "decode", "route@2048",
           "speed-up", "decode+15", "route+15");
    for (int q8 = 0; q8 < 2; q8++)
        for (size_t ni = 0; ni < sizeof nss / sizeof *nss; ni++)
            for (size_t di = 0; di < sizeof depths / sizeof *depths; di++) {
                const int ns = nss[ni];
                const int32_t len = depths[di];
                const rf_type kt = q8 ? RF_TYPE_Q8_0 : RF_TYPE_F16;
                void *dk, *dv;
                int32_t *dtab;
                int64_t maxb;
                time_pool(&r, ns, len + 16, bs, nhkv * D, q8, &dk, &dv, &dtab, &maxb);
                int32_t pos[8], seq[8];
                for (int s = 0; s < ns; s++) pos[s] = len - 1, seq[s] = s;
                float *q = host_f32((size_t)(ns * qd));
                for (int64_t i = 0; i < ns * qd; i++) q[i] = rf_rng_normal(&r) * 0.6f;
                float *dq = dev_from(q, (size_t)(ns * qd) * 4), *dout = dev_poison((size_t)(ns * qd) * 4);
                int32_t *dpos = dev_from(pos, (size_t)ns * 4), *dseq = dev_from(seq, (size_t)ns * 4);
                for (int s = 0; s < ns; s++) pos[s] = len + 15; /* the bench's last decode token */
                int32_t *dpos2 = dev_from(pos, (size_t)ns * 4);
                double t[5];
                for (int kern = 0; kern < 5; kern++) {
                    const int32_t *tp = kern < 3 ? dpos : dpos2;
                    const int64_t mp = kern < 3 ? len - 1 : len + 15;
                    for (int rep = -5; rep < 50; rep++) {
                        if (rep == 0) {
                            assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                            t[kern] = now_s();
                        }
                        const rf_status st =
                            kern == 0 ? rf_gpu_paged_attention_hint(g_ctx, dout, dq, dk, dv, kt, ns, tp, dseq, dtab,
                                                                    maxb, bs, nh, nhkv, D, scale, 0, 0.0f, mp,
                                                                    NULL, true)
                            : kern == 1 || kern == 3
                                ? rf_gpu_decode_attention(g_ctx, dout, dq, dk, dv, kt, ns, tp, dseq, dtab, maxb, bs, nh,
                                                          nhkv, D, scale, 0, 0.0f, mp, NULL, 1)
                                : rf_gpu_paged_attention_route(g_ctx, dout, dq, dk, dv, kt, ns, tp, dseq, dtab, maxb,
                                                               bs, nh, nhkv, D, scale, 0, 0.0f, mp, NULL, true, kmin);
                        assert_int_equal(st, RF_OK);
                    }
                    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                    t[kern] = (now_s() - t[kern]) / 50 * 1e6;
                }
                printf("  %-5s %4d %7d %11.1f %11.1f %11.1f %8.2fx %11.1f %11.1f\n", q8 ? "q8_0" : "f16", ns, len,
                       t[0], t[1], t[2], t[0] / t[1], t[3], t[4]);
                rf_gpu_free(g_ctx, dk), rf_gpu_free(g_ctx, dv), rf_gpu_free(g_ctx, dtab), rf_gpu_free(g_ctx, dq);
                rf_gpu_free(g_ctx, dout), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq);
                rf_gpu_free(g_ctx, dpos2);
                free(q);
            }
}

static int setup(void **state) {
    (void)state;
    gpu_test_init_or_skip("test_gpu_decode_attention");
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_vs_ref),
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_decode_timing),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
