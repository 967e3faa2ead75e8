/* test_gpu_moe.c — the GPU backend's mixture-of-experts ops (moe_route, matmul_id, moe_combine,
 * through the op table) against plain-C references written here from backend.h's contract, on
 * random data (seed printed), outputs poisoned first.
 * - moe_route: softmax / sigmoid / top-k-then-softmax, a selection bias (added to the choosing
 *   score whatever the gating, as rf_ref_moe_route), norm on and off (its guard too), scale,
 *   n_expert 8..1024, k 1..32; ids exactly (logits drawn without near ties: a row whose sorted
 *   choosing scores come within 1e-5 is drawn again, see row_gap), ties to the lower id on equal
 *   logits; weights rel. L2 < 1e-5 (a few f32 roundings of exp and one sum of <= 32 terms:
 *   ~1e-7 expected); k or n_expert out of range: RF_ERR_INVALID_ARG.
 * - matmul_id: n_expert 8/32/128, k 1/2/4/8, 1..300 tokens (crossing RF_GPU_MOE_GROUPED_MIN: the
 *   GEMV per slot below, the grouped MMQ above; the types MMQ does not take: the tiled GEMV
 *   from two slots per expert), each weight type, with and without bias; the grouped MMQ at
 *   widths of a partial last chunk (gpt-oss's MXFP4 / Q8_0 2880, qwen3-30b-a3b's Q6_K 768, an
 *   odd count of blocks) with experts chosen unevenly (one takes 3 tokens in 4, some none),
 *   x_per_slot both ways, on a sample of slots: for the types with a twin (gpu_twin.h) every
 *   output within its float-order bound of the exact product for x rounded as the GPU rounds it
 *   (and the expert's bias added in f32), the f32-x distance printed (MXFP4 too); < 1e-4 for
 *   the f32-x ones (F16 and the types decoded element by element: f32 sums of <= 1024 products,
 *   ~1e-6 expected).
 * - moe_combine: rel. L2 < 1e-6 (k <= 8 f32 products summed in order, ~1e-7).
 * - moe_shared_gate: rel. L2 < 1e-5 (its model above test_shared_gate).
 * - batch invariance (set_batch_invariant on): a token's matmul_id outputs are the same bits in a
 *   call of 300 tokens and of a few (MXFP4: the tiled GEMV against the per-slot one); again with
 *   8 experts, where the 300-token call takes the grouped MMQ's tiles of 64 rows and the few
 *   tokens' calls tiles of 32.
 * - capture: route + matmul_id + combine recorded into a CUDA graph, replayed with other router
 *   logits, equals the eager ops bit for bit (few and many slots).
 * RF_GPU_MOE_GGEMV is 0 here unless set (the grouped MMQ at its counts; the grouped GEMV of few
 * slots per expert: test_gpu_moe_ggemv). RF_MOE_BENCH=1: bytes read per MoE decode token and bandwidth for qwen3-30b-a3b's experts
 * (dim 2048, 128 experts, top-8, ff 768; Q4_K and Q8_0), gpt-oss-20b's (MXFP4, dim 2880, 32
 * experts of 2880, top-4) and gemma4-26b-a4b's shape in Q5_0 (dim 2816, 128 of 704, top-8) at
 * 1..512 tokens, on the path the
 * crossover picks and, below it, on the grouped path too (RF_GPU_MOE_GROUPED_MIN=1000000 shows
 * the GEMV above it); RF_MOE_BENCH_ONLY=1 runs only that. Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_moe: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_moe_common.h"
#include "gpu_twin.h"

/* ---- references (backend.h's contract, double where it sums) ------------------------------ */

static void ref_route(int32_t *ids, float *wts, const float *logits, const float *bias, int64_t n, int64_t ne,
                      int64_t k, rf_moe_gating g, bool norm, float scale) {
    double *p = malloc(ne * sizeof *p), *c = malloc(ne * sizeof *c);
    char *taken = malloc(ne);
    for (int64_t t = 0; t < n; t++) {
        const float *l = logits + t * ne;
        double mx = -INFINITY, s = 0;
        for (int64_t e = 0; e < ne; e++) mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < ne; e++) {
            if (g == RF_MOE_SOFTMAX) p[e] = exp(l[e] - mx), s += p[e];
            else if (g == RF_MOE_SIGMOID) p[e] = 1.0 / (1.0 + exp(-(double)l[e]));
            else p[e] = l[e];
        }
        for (int64_t e = 0; e < ne; e++) {
            if (g == RF_MOE_SOFTMAX) p[e] /= s;
            c[e] = (float)p[e] + (bias ? bias[e] : 0.0f); /* as rf_ref_moe_route: in f32, any gating */
            taken[e] = 0;
        }
        double w[64], sum = 0;
        for (int64_t j = 0; j < k; j++) {
            int64_t b = -1;
            for (int64_t e = 0; e < ne; e++)
                if (!taken[e] && (b < 0 || c[e] > c[b])) b = e; /* ties: the lower id stays */
            taken[b] = 1;
            ids[t * k + j] = (int32_t)b;
            w[j] = p[b];
        }
        if (g == RF_MOE_SOFTMAX_TOPK) {
            double m0 = w[0], z = 0;
            for (int64_t j = 0; j < k; j++) w[j] = exp(w[j] - m0), z += w[j];
            for (int64_t j = 0; j < k; j++) w[j] /= z;
        }
        for (int64_t j = 0; j < k; j++) sum += w[j];
        if (sum < 6.103515625e-5) sum = 6.103515625e-5; /* llama.cpp's guard (backend.h) */
        for (int64_t j = 0; j < k; j++) wts[t * k + j] = (float)((norm ? w[j] / sum : w[j]) * scale);
    }
    free(p), free(c), free(taken);
}

/* The smallest gap between consecutive sorted choosing scores among the top k + 1 of row l, in
 * the order the router compares: without a bias, logits for SOFTMAX (monotone in p: a gap of
 * 1e-5 there is a p ratio of 1 + 1e-5, far above the few ulps of the device's expf) and
 * SOFTMAX_TOPK (the same floats compared on both sides: any gap > 0); else p + bias (absolute;
 * p's f32 error ~1e-7). */
static double row_gap(const float *l, const float *bias, int64_t ne, int64_t k, rf_moe_gating g) {
    double *c = malloc(ne * sizeof *c), gap = INFINITY, prev = INFINITY, mx = -INFINITY, s = 0;
    for (int64_t e = 0; e < ne; e++) mx = l[e] > mx ? l[e] : mx;
    for (int64_t e = 0; e < ne; e++) s += exp(l[e] - mx);
    for (int64_t e = 0; e < ne; e++) {
        const double p = g == RF_MOE_SIGMOID ? 1.0 / (1.0 + exp(-(double)l[e])) : g == RF_MOE_SOFTMAX && bias ? exp(l[e] - mx) / s : l[e];
        c[e] = p + (bias ? bias[e] : 0.0);
    }
    for (int64_t j = 0; j <= k && j < ne; j++) { /* selection of the next largest */
        int64_t b = -1;
        for (int64_t e = 0; e < ne; e++)
            if (c[e] < prev && (b < 0 || c[e] > c[b])) b = e;
        if (b < 0) { gap = 0; break; } /* equal scores */
        if (prev < INFINITY && prev - c[b] < gap) gap = prev - c[b];
        prev = c[b];
    }
    free(c);
    return gap;
}

/* ---- moe_route ---------------------------------------------------------------------------- */

static void route_case(rf_rng *r, int64_t n, int64_t ne, int64_t k, rf_moe_gating g, bool norm, float scale,
                       bool with_bias) {
    float *l = host_f32(n * ne), *bias = host_f32(ne), *wg = host_f32(n * k), *ww = host_f32(n * k);
    int32_t *ig = malloc(n * k * 4), *iw = malloc(n * k * 4);
    for (int64_t e = 0; e < ne; e++) bias[e] = (rf_rng_uniform(r) - 0.5f) * 0.2f;
    for (int64_t t = 0; t < n; t++)
        for (int tries = 0; tries < 100; tries++) {
            rf_rng_fill_normal(r, l + t * ne, ne, g == RF_MOE_SIGMOID ? 0.5f : 2.0f);
            if (row_gap(l + t * ne, with_bias ? bias : NULL, ne, k, g) > (g == RF_MOE_SOFTMAX_TOPK && !with_bias ? 0.0 : 1e-5)) break;
        }
    ref_route(iw, ww, l, with_bias ? bias : NULL, n, ne, k, g, norm, scale);
    float *dl = dev_from(l, n * ne * 4), *db = dev_from(bias, ne * 4), *dw = dev_poison(n * k * 4);
    int32_t *di = dev_poison(n * k * 4);
    rf_tensor ti = dt(RF_TYPE_I32, k, n, di), tw = dt(RF_TYPE_F32, k, n, dw), tl = dt(RF_TYPE_F32, ne, n, dl),
              tb = dt(RF_TYPE_F32, ne, 1, db);
    rf_status st = g_be->ops->moe_route(g_be, &ti, &tw, &tl, with_bias ? &tb : NULL, n, ne, k, g, norm, scale);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    dev_to(ig, di, n * k * 4);
    dev_to(wg, dw, n * k * 4);
    for (int64_t i = 0; i < n * k; i++)
        if (ig[i] != iw[i]) fail_msg("route g=%d n_expert=%lld k=%lld: token %lld choice %lld: id %d, want %d", (int)g,
                                     (long long)ne, (long long)k, (long long)(i / k), (long long)(i % k), ig[i], iw[i]);
    char what[96];
    snprintf(what, sizeof what, "route g=%d ne=%lld k=%lld norm=%d bias=%d n=%lld", (int)g, (long long)ne,
             (long long)k, (int)norm, (int)with_bias, (long long)n);
    check_rel(what, wg, ww, n * k, 1e-5);
    rf_gpu_free(g_ctx, dl), rf_gpu_free(g_ctx, db), rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, di);
    free(l), free(bias), free(wg), free(ww), free(ig), free(iw);
}

static void test_route(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 31);
    const int64_t nes[] = {8, 32, 128, 512, 1024}, ks[] = {1, 2, 4, 8, 32};
    const int64_t ns[] = {1, 3, 37, 300};
    for (int g = 0; g < 3; g++)
        for (size_t a = 0; a < 5; a++)
            for (size_t b = 0; b < 5; b++) {
                if (ks[b] > nes[a]) continue;
                const size_t ni = (a + b + g) % 4;
                route_case(&r, ns[ni], nes[a], ks[b], (rf_moe_gating)g, (a + b) % 2 == 0, b % 2 ? 2.5f : 1.0f,
                           (g == 1 && b % 2 == 0) || (g == 0 && a == 2 && b == 2));
            }
    /* exact ties: equal logits choose the lower ids, in order */
    const int64_t ne = 64, k = 8;
    float l[2 * 64];
    for (int e = 0; e < ne; e++) l[e] = 0.25f, l[ne + e] = (float)(e % 4 == 3); /* row 1: 3, 7, 11, ... */
    float *dl = dev_from(l, sizeof l), *dw = dev_poison(2 * k * 4);
    int32_t *di = dev_poison(2 * k * 4), ids[16];
    rf_tensor ti = dt(RF_TYPE_I32, k, 2, di), tw = dt(RF_TYPE_F32, k, 2, dw), tl = dt(RF_TYPE_F32, ne, 2, dl);
    for (int g = 0; g < 3; g++) {
        assert_int_equal(g_be->ops->moe_route(g_be, &ti, &tw, &tl, NULL, 2, ne, k, (rf_moe_gating)g, true, 1.0f), RF_OK);
        dev_to(ids, di, sizeof ids);
        for (int j = 0; j < k; j++) assert_int_equal(ids[j], j), assert_int_equal(ids[k + j], 4 * j + 3);
    }
    /* norm's guard: sigmoids of ~1e-9 sum below 6.1e-5, which divides instead */
    {
        float lg[8], want[2], got[2];
        int32_t wi[2];
        for (int e = 0; e < 8; e++) lg[e] = -20.0f - 0.5f * e;
        ref_route(wi, want, lg, NULL, 1, 8, 2, RF_MOE_SIGMOID, true, 1.0f);
        rf_tensor tl1 = dt(RF_TYPE_F32, 8, 1, dl);
        assert_int_equal(rf_gpu_upload(g_ctx, dl, lg, sizeof lg), RF_OK);
        assert_int_equal(g_be->ops->moe_route(g_be, &ti, &tw, &tl1, NULL, 1, 8, 2, RF_MOE_SIGMOID, true, 1.0f), RF_OK);
        dev_to(got, dw, sizeof got);
        dev_to(ids, di, 2 * 4);
        assert_int_equal(ids[0], 0), assert_int_equal(ids[1], 1);
        check_rel("route sigmoid norm below the guard", got, want, 2, 1e-5);
    }
    /* out of range */
    assert_int_equal(g_be->ops->moe_route(g_be, &ti, &tw, &tl, NULL, 2, ne, 0, RF_MOE_SOFTMAX, true, 1.0f), RF_ERR_INVALID_ARG);
    assert_int_equal(g_be->ops->moe_route(g_be, &ti, &tw, &tl, NULL, 2, 4, 8, RF_MOE_SOFTMAX, true, 1.0f), RF_ERR_INVALID_ARG);
    assert_int_equal(g_be->ops->moe_route(g_be, &ti, &tw, &tl, NULL, 2, ne, 33, RF_MOE_SOFTMAX, true, 1.0f), RF_ERR_INVALID_ARG);
    assert_int_equal(g_be->ops->moe_route(g_be, &ti, &tw, &tl, NULL, 2, 2048, 8, RF_MOE_SOFTMAX, true, 1.0f), RF_ERR_INVALID_ARG);
    fprintf(stderr, "  route: ties to the lower id, range checks: ok\n");
    rf_gpu_free(g_ctx, dl), rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, di);
}

/* ---- matmul_id ---------------------------------------------------------------------------- */

static bool int8_x(rf_type t) {
    return t != RF_TYPE_F16 && t != RF_TYPE_BF16 && t != RF_TYPE_F32 && t != RF_TYPE_Q2_K && t != RF_TYPE_Q3_K &&
           t != RF_TYPE_IQ4_NL && t != RF_TYPE_IQ4_XS; /* MXFP4: int8 x (Q8_0-style), as the CPU's dot */
}

typedef struct mid_case {
    rf_type t;
    int64_t ne, k, n, n_in, n_out;
    bool bias, xps;
} mid_case;

static bool g_skew; /* mid_run: expert 0 in 3 tokens of 4 (uneven tiles, experts without rows) */

static void mid_run(rf_rng *r, const mid_case *c) {
    const int64_t nk = c->n * c->k, nx = c->xps ? nk : c->n;
    size_t bytes, rb;
    assert_int_equal(rf_row_size(c->t, c->n_in, &rb), RF_OK);
    uint8_t *w = random_weights(r, c->t, c->ne * c->n_out, c->n_in, &bytes);
    float *x = host_f32(nx * c->n_in), *bias = host_f32(c->ne * c->n_out), *got = host_f32(nk * c->n_out);
    int32_t *ids = malloc(nk * 4);
    rf_rng_fill_normal(r, x, nx * c->n_in, 1.0f);
    rf_rng_fill_normal(r, bias, c->ne * c->n_out, 1.0f);
    rand_ids(r, ids, c->n, c->k, c->ne);
    for (int64_t t = 0; g_skew && t < c->n; t++) {
        bool has0 = false;
        for (int64_t j = 0; j < c->k; j++) has0 |= ids[t * c->k + j] == 0;
        if (!has0 && t % 4 != 0) ids[t * c->k] = 0; /* still distinct within the token */
    }
    void *dw = dev_from(w, bytes);
    float *dx = dev_from(x, nx * c->n_in * 4), *db = dev_from(bias, c->ne * c->n_out * 4), *dy = dev_poison(nk * c->n_out * 4);
    int32_t *di = dev_from(ids, nk * 4);
    rf_tensor ty = dt(RF_TYPE_F32, c->n_out, nk, dy), tw = dt(c->t, c->n_in, c->ne * c->n_out, dw),
              tx = dt(RF_TYPE_F32, c->n_in, nx, dx), ti = dt(RF_TYPE_I32, c->k, c->n, di),
              tb = dt(RF_TYPE_F32, c->n_out, c->ne, db);
    rf_status st = g_be->ops->matmul_id(g_be, &ty, &tw, c->n_out, &tx, c->xps, &ti, c->bias ? &tb : NULL, c->n, c->k);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    dev_to(got, dy, nk * c->n_out * 4);
    for (int64_t i = 0; i < nk * c->n_out; i++) assert_false(isnan(got[i])); /* every output written */
    /* the sampled slots: all up to 48, else the first and last 8 and 32 spread between */
    int64_t samp[48];
    int ns = 0;
    if (nk <= 48)
        for (int64_t s = 0; s < nk; s++) samp[ns++] = s;
    else {
        for (int64_t s = 0; s < 8; s++) samp[ns++] = s, samp[ns++] = nk - 1 - s;
        for (int i = 0; i < 32; i++) samp[ns++] = 8 + (int64_t)(rf_rng_u64(r) % (uint64_t)(nk - 16));
    }
    float *want = host_f32(ns * c->n_out), *gs = host_f32(ns * c->n_out);
    for (int i = 0; i < ns; i++) {
        const int64_t s = samp[i], e = ids[s], xr = c->xps ? s : s / c->k;
        assert_int_equal(rf_ref_matmul(want + i * c->n_out, w + (size_t)e * c->n_out * rb, c->t, x + xr * c->n_in, 1,
                                       c->n_in, c->n_out), RF_OK);
        for (int64_t o = 0; o < c->n_out && c->bias; o++) want[i * c->n_out + o] += bias[e * c->n_out + o];
        memcpy(gs + i * c->n_out, got + s * c->n_out, c->n_out * 4);
    }
    char what[128];
    snprintf(what, sizeof what, "matmul_id %s ne=%lld k=%lld n=%lld %lldx%lld%s%s (%s)", rf_type_name(c->t),
             (long long)c->ne, (long long)c->k, (long long)c->n, (long long)c->n_out, (long long)c->n_in,
             c->bias ? " bias" : "", c->xps ? " per-slot" : "",
             rf_gpu_moe_grouped_takes(g_ctx, c->t, c->n_in, c->n, c->k) ? "grouped" : "gemv");
    if (twin_has(c->t)) { /* each sampled slot against the twin of its expert's rows and x row */
        double rr2 = 0.0;
        for (int i = 0; i < ns; i++) {
            const int64_t s = samp[i], e = ids[s], xr = c->xps ? s : s / c->k;
            double rr;
            check_twin_b(what, c->t, gs + i * c->n_out, w + (size_t)e * c->n_out * rb, x + xr * c->n_in,
                         want + i * c->n_out, c->bias ? bias + e * c->n_out : NULL, 1, c->n_in, c->n_out, &rr);
            rr2 += rr * rr;
        }
        fprintf(stderr, "  %-48s rel_l2=%.3g from f32 x, the rounded x's own ~%.3g\n", what,
                rf_rel_l2(gs, want, (size_t)ns * c->n_out), sqrt(rr2 / ns));
    } else {
        check_rel(what, gs, want, ns * c->n_out, int8_x(c->t) ? 1e-2 : 1e-4);
    }
    rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, db), rf_gpu_free(g_ctx, dy), rf_gpu_free(g_ctx, di);
    free(w), free(x), free(bias), free(got), free(ids), free(want), free(gs);
}

static const rf_type k_types[] = {RF_TYPE_Q4_0, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K, RF_TYPE_Q6_K,
                                  RF_TYPE_F16,  RF_TYPE_Q4_1, RF_TYPE_Q5_0, RF_TYPE_Q2_K, RF_TYPE_Q3_K,
                                  RF_TYPE_MXFP4};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static void test_matmul_id(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 32);
    const int64_t nes[] = {8, 32, 128}, ks[] = {1, 2, 4, 8}, ns[] = {1, 2, 3, 5, 8, 9, 17, 40, 100, 300};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const rf_type t = k_types[ti];
        for (size_t i = 0; i < 10; i++) {
            mid_case c;
            c.t = t;
            c.ne = nes[(i + ti) % 3];
            c.k = ks[(i * 3 + ti) % 4];
            c.n = ns[i];
            /* 96: three 32-element blocks, 8-byte records of an odd count (the tiled GEMV's
             * gather; tensor parallelism's shards of a small expert are that narrow) */
            c.n_in = (i + ti) % 3 == 0 ? 1024 : i == 9 && rf_type_info(t)->block_size == 32 ? 96 : 512;
            c.n_out = (i % 4 == 0) ? 131 : 64 + 32 * (int64_t)(rf_rng_u64(&r) % 6);
            c.bias = (i + ti) % 2 == 0;
            c.xps = i % 3 == 1;
            mid_run(&r, &c);
        }
    }
    /* the slot-count crossover from both sides, one type of each path */
    const rf_type both[] = {RF_TYPE_Q4_K, RF_TYPE_Q8_0};
    for (int b = 0; b < 2; b++)
        for (int64_t n = 11; n <= 13; n++) { /* 88, 96, 104 slots: the default crossover is 96 */
            mid_case c = {both[b], 128, 8, n, 2048, 96, true, false};
            mid_run(&r, &c);
        }
    /* the grouped MMQ's partial last chunks, experts chosen unevenly (slots >= 96: grouped) */
    const mid_case part[] = {
        {RF_TYPE_MXFP4, 32, 4, 40, 2880, 200, true, false}, /* gpt-oss-20b's experts */
        {RF_TYPE_MXFP4, 8, 2, 100, 1440, 131, false, true}, /* 45 blocks: rows of an odd length */
        {RF_TYPE_Q8_0, 32, 4, 40, 2880, 200, false, false},
        {RF_TYPE_Q4_0, 8, 2, 100, 1440, 131, true, false},
        {RF_TYPE_Q6_K, 128, 8, 16, 768, 256, false, false}, /* qwen3-30b-a3b's down experts */
        {RF_TYPE_Q6_K, 128, 8, 16, 768, 256, false, true},
        {RF_TYPE_Q5_0, 128, 8, 40, 704, 256, false, false}, /* gemma4-26b-a4b's down experts */
        /* >= 48 slots per expert: the grouped MMQ's tiles of 64 rows (rf_gpu_mmq_grouped_rows) */
        {RF_TYPE_Q5_0, 8, 4, 200, 704, 131, true, true},
        {RF_TYPE_MXFP4, 8, 4, 200, 2880, 131, false, false},
        {RF_TYPE_Q4_K, 8, 4, 200, 512, 200, true, false},
    };
    g_skew = true;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) mid_run(&r, &part[i]); /* prints the path taken */
    g_skew = false;
}

/* invariant mode: a token's outputs in a call of 300 tokens equal those in calls of a few */
static void test_matmul_id_invariant(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 33);
    assert_int_equal(g_be->ops->set_batch_invariant(g_be, true), RF_OK);
    /* MXFP4: the grouped MMQ at every count in this mode (as the other types MMQ takes), the
     * same bits required across counts */
    const rf_type ts[] = {RF_TYPE_Q4_K, RF_TYPE_Q8_0, RF_TYPE_Q6_K, RF_TYPE_F16, RF_TYPE_Q3_K, RF_TYPE_MXFP4};
    const size_t nts = sizeof ts / sizeof ts[0];
    for (size_t tj = 0; tj < 2 * nts; tj++) {
        const rf_type t = ts[tj % nts];
        /* second pass, 8 experts: 150 slots per expert, the 300-token call on the grouped MMQ's
         * tiles of 64 rows and the few-token calls on tiles of 32 (rf_gpu_mmq_grouped_rows) */
        const int64_t ne = tj < nts ? 32 : 8, k = 4, n = 300, n_in = 512, n_out = 96, nk = n * k;
        size_t bytes;
        uint8_t *w = random_weights(&r, t, ne * n_out, n_in, &bytes);
        float *x = host_f32(n * n_in), *big = host_f32(nk * n_out), *part = host_f32(nk * n_out);
        int32_t *ids = malloc(nk * 4);
        rf_rng_fill_normal(&r, x, n * n_in, 1.0f);
        rand_ids(&r, ids, n, k, ne);
        void *dw = dev_from(w, bytes);
        float *dx = dev_from(x, n * n_in * 4), *dy = dev_poison(nk * n_out * 4);
        int32_t *di = dev_from(ids, nk * 4);
        rf_tensor tw = dt(t, n_in, ne * n_out, dw);
        rf_tensor ty = dt(RF_TYPE_F32, n_out, nk, dy), tx = dt(RF_TYPE_F32, n_in, n, dx), tid = dt(RF_TYPE_I32, k, n, di);
        assert_int_equal(g_be->ops->matmul_id(g_be, &ty, &tw, n_out, &tx, false, &tid, NULL, n, k), RF_OK);
        dev_to(big, dy, nk * n_out * 4);
        const int64_t sub[][2] = {{0, 1}, {7, 2}, {100, 9}, {250, 50}, {299, 1}, {17, 64}};
        int bad = 0;
        for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
            const int64_t s0 = sub[i][0], m = sub[i][1];
            rf_tensor tx2 = dt(RF_TYPE_F32, n_in, m, dx + s0 * n_in), ti2 = dt(RF_TYPE_I32, k, m, di + s0 * k);
            /* x views must stay 16-byte aligned: n_in * 4 bytes a row is */
            assert_int_equal(g_be->ops->matmul_id(g_be, &ty, &tw, n_out, &tx2, false, &ti2, NULL, m, k), RF_OK);
            dev_to(part, dy, m * k * n_out * 4);
            bad += memcmp(part, big + s0 * k * n_out, m * k * n_out * 4) != 0;
        }
        fprintf(stderr, "  matmul_id batch invariance %s ne=%lld: %s\n", rf_type_name(t), (long long)ne,
                bad ? "FAILED" : "bit-identical");
        assert_int_equal(bad, 0);
        rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dx), rf_gpu_free(g_ctx, dy), rf_gpu_free(g_ctx, di);
        free(w), free(x), free(big), free(part), free(ids);
    }
    assert_int_equal(g_be->ops->set_batch_invariant(g_be, false), RF_OK);
}

/* ---- moe_combine -------------------------------------------------------------------------- */

static void test_combine(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 34);
    const int64_t cases[][3] = {{1, 1, 64}, {1, 8, 2048}, {37, 4, 300}, {300, 8, 96}, {5, 2, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t n = cases[c][0], k = cases[c][1], m = cases[c][2];
        float *z = host_f32(n * k * m), *wt = host_f32(n * k), *got = host_f32(n * m), *want = host_f32(n * m);
        rf_rng_fill_normal(&r, z, n * k * m, 1.0f);
        rf_rng_fill_normal(&r, wt, n * k, 1.0f);
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < m; i++) {
                double s = 0;
                for (int64_t j = 0; j < k; j++) s += (double)wt[t * k + j] * z[(t * k + j) * m + i];
                want[t * m + i] = (float)s;
            }
        float *dz = dev_from(z, n * k * m * 4), *dw = dev_from(wt, n * k * 4), *dy = dev_poison(n * m * 4);
        rf_tensor ty = dt(RF_TYPE_F32, m, n, dy), tz = dt(RF_TYPE_F32, m, n * k, dz), tw = dt(RF_TYPE_F32, k, n, dw);
        assert_int_equal(g_be->ops->moe_combine(g_be, &ty, &tz, &tw, n, k, m), RF_OK);
        dev_to(got, dy, n * m * 4);
        char what[64];
        snprintf(what, sizeof what, "combine n=%lld k=%lld m=%lld", (long long)n, (long long)k, (long long)m);
        check_rel(what, got, want, n * m, 1e-6);
        rf_gpu_free(g_ctx, dz), rf_gpu_free(g_ctx, dw), rf_gpu_free(g_ctx, dy);
        free(z), free(wt), free(got), free(want);
    }
}

/* ---- moe_shared_gate (qwen35moe's shared expert) -------------------------------------------
 * y[t] += z[t] sigmoid(w . h[t]) with h rows strided: against a double reference. The gate is a
 * sum of m f32 products (block tree: ~u sqrt(m) sum|w h| relative), sigmoid's slope <= 1/4, then
 * one product and one add per output: rel. L2 of y ~1e-7, bound 1e-5. */
static void test_shared_gate(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 35);
    const int64_t cases[][2] = {{1, 256}, {1, 2048}, {37, 300}, {300, 96}, {5, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t n = cases[c][0], m = cases[c][1], hs = m + 7;
        float *z = host_f32(n * m), *y = host_f32(n * m), *h = host_f32(n * hs), *w = host_f32(m), *got = host_f32(n * m),
              *want = host_f32(n * m);
        rf_rng_fill_normal(&r, z, n * m, 1.0f);
        rf_rng_fill_normal(&r, y, n * m, 1.0f);
        rf_rng_fill_normal(&r, h, n * hs, 1.0f);
        rf_rng_fill_normal(&r, w, m, 1.0f / sqrtf((float)m));
        for (int64_t t = 0; t < n; t++) {
            double g = 0;
            for (int64_t i = 0; i < m; i++) g += (double)w[i] * h[t * hs + i];
            const double sg = 1.0 / (1.0 + exp(-g));
            for (int64_t i = 0; i < m; i++) want[t * m + i] = (float)(y[t * m + i] + z[t * m + i] * sg);
        }
        float *dz = dev_from(z, n * m * 4), *dy = dev_from(y, n * m * 4), *dh = dev_from(h, n * hs * 4), *dw = dev_from(w, m * 4);
        rf_tensor ty = dt(RF_TYPE_F32, m, n, dy), tz = dt(RF_TYPE_F32, m, n, dz), th = dt(RF_TYPE_F32, m, n, dh),
                  tw = dt(RF_TYPE_F32, m, 1, dw);
        th.nb1 = (size_t)hs * 4;
        assert_non_null(g_be->ops->moe_shared_gate);
        assert_int_equal(g_be->ops->moe_shared_gate(g_be, &ty, &tz, &th, &tw, n, m), RF_OK);
        dev_to(got, dy, n * m * 4);
        char what[64];
        snprintf(what, sizeof what, "shared gate n=%lld m=%lld", (long long)n, (long long)m);
        check_rel(what, got, want, n * m, 1e-5);
        rf_gpu_free(g_ctx, dz), rf_gpu_free(g_ctx, dy), rf_gpu_free(g_ctx, dh), rf_gpu_free(g_ctx, dw);
        free(z), free(y), free(h), free(w), free(got), free(want);
    }
}

/* ---- a MoE block recorded into a graph ------------------------------------------------------ */

typedef struct moe_bufs {
    int64_t n, ne, k, dim, ff;
    rf_tensor logits, ids, wts, x, wg, wd, h, z, y;
} moe_bufs;

/* route, gate product (x shared by the slots), down product per slot, combine */
static rf_status moe_block(moe_bufs *b) {
    const rf_backend_ops *o = g_be->ops;
    rf_status st = o->moe_route(g_be, &b->ids, &b->wts, &b->logits, NULL, b->n, b->ne, b->k, RF_MOE_SOFTMAX, true, 1.0f);
    if (!st) st = o->matmul_id(g_be, &b->h, &b->wg, b->ff, &b->x, false, &b->ids, NULL, b->n, b->k);
    if (!st) st = o->matmul_id(g_be, &b->z, &b->wd, b->dim, &b->h, true, &b->ids, NULL, b->n, b->k);
    if (!st) st = o->moe_combine(g_be, &b->y, &b->z, &b->wts, b->n, b->k, b->dim);
    return st;
}

static void test_capture(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 35);
    const int64_t ns[] = {1, 40};
    for (int c = 0; c < 2; c++) {
        moe_bufs b;
        memset(&b, 0, sizeof b);
        b.n = ns[c], b.ne = 32, b.k = 4, b.dim = 512, b.ff = 256;
        const int64_t n = b.n, nk = n * b.k;
        size_t bg, bd;
        uint8_t *wg = random_weights(&r, RF_TYPE_Q4_K, b.ne * b.ff, b.dim, &bg);
        uint8_t *wd = random_weights(&r, RF_TYPE_Q4_K, b.ne * b.dim, b.ff, &bd);
        float *l0 = host_f32(n * b.ne), *l1 = host_f32(n * b.ne), *x = host_f32(n * b.dim);
        float *ye = host_f32(n * b.dim), *yg = host_f32(n * b.dim);
        rf_rng_fill_normal(&r, l0, n * b.ne, 2.0f);
        rf_rng_fill_normal(&r, l1, n * b.ne, 2.0f);
        rf_rng_fill_normal(&r, x, n * b.dim, 1.0f);
        b.logits = dt(RF_TYPE_F32, b.ne, n, dev_from(l0, n * b.ne * 4));
        b.ids = dt(RF_TYPE_I32, b.k, n, dev_poison(nk * 4));
        b.wts = dt(RF_TYPE_F32, b.k, n, dev_poison(nk * 4));
        b.x = dt(RF_TYPE_F32, b.dim, n, dev_from(x, n * b.dim * 4));
        b.wg = dt(RF_TYPE_Q4_K, b.dim, b.ne * b.ff, dev_from(wg, bg));
        b.wd = dt(RF_TYPE_Q4_K, b.ff, b.ne * b.dim, dev_from(wd, bd));
        b.h = dt(RF_TYPE_F32, b.ff, nk, dev_poison(nk * b.ff * 4));
        b.z = dt(RF_TYPE_F32, b.dim, nk, dev_poison(nk * b.dim * 4));
        b.y = dt(RF_TYPE_F32, b.dim, n, dev_poison(n * b.dim * 4));
        assert_int_equal(moe_block(&b), RF_OK); /* eager first: the scratch arena grows outside the capture */
        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
        void *exec = NULL;
        assert_int_equal(rf_gpu_capture_begin(g_ctx), RF_OK);
        rf_status st = moe_block(&b);
        assert_int_equal(rf_gpu_capture_end(g_ctx, &exec), RF_OK);
        assert_int_equal(st, RF_OK);
        /* the graph on logits l1, then eager on l1: the same bits */
        assert_int_equal(rf_gpu_upload(g_ctx, b.logits.data, l1, n * b.ne * 4), RF_OK);
        assert_int_equal(rf_gpu_memset(g_ctx, b.y.data, 0xFF, n * b.dim * 4), RF_OK);
        assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK);
        dev_to(yg, b.y.data, n * b.dim * 4);
        assert_int_equal(rf_gpu_memset(g_ctx, b.y.data, 0xFF, n * b.dim * 4), RF_OK);
        assert_int_equal(moe_block(&b), RF_OK);
        dev_to(ye, b.y.data, n * b.dim * 4);
        for (int64_t i = 0; i < n * b.dim; i++) assert_false(isnan(ye[i]));
        const bool same = memcmp(ye, yg, n * b.dim * 4) == 0;
        fprintf(stderr, "  capture n=%lld (%s): replay with new logits %s eager\n", (long long)n,
                rf_gpu_moe_grouped_takes(g_ctx, RF_TYPE_Q4_K, b.dim, n, b.k) ? "grouped" : "gemv",
                same ? "bit-identical to" : "DIFFERS from");
        assert_true(same);
        rf_gpu_graph_destroy(exec);
        rf_tensor *ts[] = {&b.logits, &b.ids, &b.wts, &b.x, &b.wg, &b.wd, &b.h, &b.z, &b.y};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rf_gpu_free(g_ctx, ts[i]->data);
        free(wg), free(wd), free(l0), free(l1), free(x), free(ye), free(yg);
    }
}

/* ---- bench: qwen3-30b-a3b's and gpt-oss-20b's experts ---------------------------------------- */

/* One MoE feed-forward of n tokens, replayed from a graph of NS steps over NS router-logit sets:
 * route, gate and up with SwiGLU, down with the weighted sum, as rf_moe_ffn runs them (the fusions
 * RF_GPU_MOE_FUSE turns on; 0: route, matmul_id, glu, matmul_id, combine). Bytes: the distinct
 * experts each step's ids choose times an expert's three matrices. */
static void bench_one(rf_rng *r, rf_type t, int64_t n, int64_t dim, int64_t ne, int64_t k, int64_t ff) {
    enum { NS = 16, REPS = 20 };
    const int64_t nk = n * k;
    size_t rbg, rbd;
    assert_int_equal(rf_row_size(t, dim, &rbg), RF_OK);
    assert_int_equal(rf_row_size(t, ff, &rbd), RF_OK);
    const size_t bg = rbg * ne * ff, bd = rbd * ne * dim;
    void *dwg, *dwu, *dwd; /* random bytes (timing only; f16 scales as they fall) */
    assert_int_equal(rf_gpu_alloc(g_ctx, bg, &dwg), RF_OK);
    assert_int_equal(rf_gpu_alloc(g_ctx, bg, &dwu), RF_OK);
    assert_int_equal(rf_gpu_alloc(g_ctx, bd, &dwd), RF_OK);
    assert_int_equal(rf_gpu_memset(g_ctx, dwg, 0x11, bg), RF_OK);
    assert_int_equal(rf_gpu_memset(g_ctx, dwu, 0x22, bg), RF_OK);
    assert_int_equal(rf_gpu_memset(g_ctx, dwd, 0x33, bd), RF_OK);
    float *l = host_f32(NS * n * ne), *x = host_f32(n * dim);
    rf_rng_fill_normal(r, l, NS * n * ne, 2.0f);
    rf_rng_fill_normal(r, x, n * dim, 1.0f);
    float *dl = dev_from(l, NS * n * ne * 4), *dx = dev_from(x, n * dim * 4);
    int32_t *di = dev_poison(NS * nk * 4);
    float *dw = dev_poison(nk * 4), *dg = dev_poison(nk * ff * 4), *du = dev_poison(nk * ff * 4);
    float *dz = dev_poison(nk * dim * 4), *dy = dev_poison(n * dim * 4);
    rf_tensor twg = dt(t, dim, ne * ff, dwg), twu = dt(t, dim, ne * ff, dwu), twd = dt(t, ff, ne * dim, dwd);
    rf_tensor tx = dt(RF_TYPE_F32, dim, n, dx), tw = dt(RF_TYPE_F32, k, n, dw), tg = dt(RF_TYPE_F32, ff, nk, dg),
              tu = dt(RF_TYPE_F32, ff, nk, du), tz = dt(RF_TYPE_F32, dim, nk, dz), ty = dt(RF_TYPE_F32, dim, n, dy);
    void *exec = NULL;
    for (int pass = 0; pass < 2; pass++) { /* eager (scratch grows), then recorded */
        if (pass == 1) assert_int_equal(rf_gpu_capture_begin(g_ctx), RF_OK);
        for (int s = 0; s < NS; s++) {
            rf_tensor tl = dt(RF_TYPE_F32, ne, n, dl + s * n * ne), ti = dt(RF_TYPE_I32, k, n, di + s * nk);
            /* as the forward: route and the experts through rf_moe_ffn (backend_moe.c; its fusions
             * as RF_GPU_MOE_FUSE says) */
            const rf_moe_ffn_args a = {.logits = &tl, .gating = RF_MOE_SOFTMAX, .norm = true, .scale = 1.0f, .ids = &ti,
                                       .wts = &tw, .x = &tx, .w_gate = &twg, .w_up = &twu, .w_down = &twd, .g = &tg,
                                       .u = &tu, .z = &tz, .n = n, .k = k, .n_expert = ne, .n_ff = ff, .n_out = dim,
                                       .glu = RF_GLU_SWIGLU};
            rf_status st = rf_moe_ffn(g_be, &ty, &a);
            if (st) fail_msg("bench step: %s", rf_last_error());
        }
        if (pass == 1) assert_int_equal(rf_gpu_capture_end(g_ctx, &exec), RF_OK);
        else assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    }
    /* the distinct experts of each step */
    int32_t *ids = malloc(NS * nk * 4);
    dev_to(ids, di, NS * nk * 4);
    double distinct = 0;
    for (int s = 0; s < NS; s++) {
        char seen[1024] = {0};
        for (int64_t i = 0; i < nk; i++) seen[ids[s * nk + i]] = 1;
        for (int e = 0; e < ne; e++) distinct += seen[e];
    }
    distinct /= NS;
    assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK); /* warm */
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    const double t0 = now_s();
    for (int i = 0; i < REPS; i++) assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK);
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    const double us = (now_s() - t0) / (REPS * NS) * 1e6;
    const double per_expert = (double)(2 * rbg * ff + rbd * dim);
    const double bytes = distinct * per_expert;
    fprintf(stderr, "  moe bench %-5s %lldx%lld/%lld n=%-4lld %-7s %8.1f us/layer  %6.1f experts  %7.2f MB read  %7.1f GB/s"
            "  (%.2f MB per token)\n", rf_type_name(t), (long long)dim, (long long)ff, (long long)ne, (long long)n,
            rf_gpu_moe_grouped_takes(g_ctx, t, dim, n, k) ? "grouped" : "gemv", us, distinct, bytes * 1e-6,
            bytes / us * 1e-3, bytes / n * 1e-6);
    rf_gpu_graph_destroy(exec);
    void *ps[] = {dwg, dwu, dwd, dl, dx, di, dw, dg, du, dz, dy};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) rf_gpu_free(g_ctx, ps[i]);
    free(l), free(x), free(ids);
}

static void test_bench(void **state) {
    (void)state;
    if (!getenv("RF_MOE_BENCH")) return;
    rf_rng r;
    rf_rng_init(&r, 7);
    double bw = 0;
    assert_int_equal(rf_gpu_bench_read_bw(g_ctx, (size_t)2 << 30, 5, &bw), RF_OK);
    fprintf(stderr, "  device read bandwidth %.0f GB/s (16-byte loads over 2 GiB)\n", bw);
    const rf_type ts[] = {RF_TYPE_Q4_K, RF_TYPE_Q8_0};
    const int64_t ns[] = {1, 2, 4, 8, 16, 32, 64, 128, 512};
    for (int ti = 0; ti < 4; ti++) /* qwen3-30b-a3b (dim 2048, 128 experts of 768, top-8), then
                                    * gpt-oss-20b (MXFP4, dim 2880, 32 experts of 2880, top-4), then
                                    * gemma4-26b-a4b's shape in Q5_0 (its down experts' type; dim
                                    * 2816, 128 experts of 704, top-8: down rows of a partial chunk) */
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            const rf_type t = ti < 2 ? ts[ti] : ti == 2 ? RF_TYPE_MXFP4 : RF_TYPE_Q5_0;
            const int64_t dim = ti < 2 ? 2048 : ti == 2 ? 2880 : 2816, ne = ti == 2 ? 32 : 128, k = ti == 2 ? 4 : 8;
            const int64_t ff = ti < 2 ? 768 : ti == 2 ? 2880 : 704;
            bench_one(&r, t, ns[i], dim, ne, k, ff);
            if (!rf_gpu_moe_grouped_takes(g_ctx, t, dim, ns[i], k)) { /* the other side of the crossover */
                assert_int_equal(g_be->ops->set_batch_invariant(g_be, true), RF_OK); /* grouped for every n */
                bench_one(&r, t, ns[i], dim, ne, k, ff);
                assert_int_equal(g_be->ops->set_batch_invariant(g_be, false), RF_OK);
            }
        }
}

int main(void) {
    if (moe_backend_open("test_gpu_moe")) return 1;
    /* the grouped MMQ wherever it takes the slots (the crossovers and partial chunks above),
     * not the grouped GEMV of few slots per expert (test_gpu_moe_ggemv), unless the caller set it */
    if (!rf_knob_is_set(RF_KNOB_GPU_MOE_GGEMV) && rf_knob_override(RF_KNOB_GPU_MOE_GGEMV, "0")) return 1;
    const bool only = getenv("RF_MOE_BENCH_ONLY") != NULL;
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_route),   cmocka_unit_test(test_matmul_id), cmocka_unit_test(test_matmul_id_invariant),
        cmocka_unit_test(test_combine), cmocka_unit_test(test_shared_gate), cmocka_unit_test(test_capture),
        cmocka_unit_test(test_bench),
    };
    const struct CMUnitTest just_bench[] = {cmocka_unit_test(test_bench)};
    int rc = only ? cmocka_run_group_tests(just_bench, NULL, NULL) : cmocka_run_group_tests(all, NULL, NULL);
    g_be->ops->destroy(g_be);
    return rc;
}
#endif
