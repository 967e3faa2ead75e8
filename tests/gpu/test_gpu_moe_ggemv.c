/* test_gpu_moe_ggemv.c — the grouped GEMV of the GPU's MoE feed-forward (gpu_moe_ggemv.cu: the
 * slots sorted by expert, each chosen expert's rows read once per tile of 8 slots; batched
 * decode), on random data (seed printed), outputs poisoned.
 * - bit identity with one token alone: moe_ffn over n = 8, 16, 32, 64 tokens on the grouped GEMV
 *   (RF_GPU_MOE_GGEMV_MIN=1 puts it at every count) gives each token's y, g, ids and weights the
 *   bits of moe_ffn called for that token alone (n = 1: the per-slot fused kernels, the decode
 *   step's path), for gpt-oss-20b's shapes (MXFP4 2880 x 2880, 32 experts, top-4, expert and
 *   router biases, the clamped SwiGLU, softmax over the top k) and qwen3-30b-a3b's (Q4_K gate/up
 *   2048 -> 768, Q6_K down, 128 experts, top-8), router logits set so that the experts are chosen
 *   unevenly: a quarter never, one by every token (64 slots at n = 64: 8 tiles of one expert),
 *   one by every other token; then other types and rows of every lane count (2, 4, 8 and 32
 *   units) at 8 and 20 tokens; then matmul_id_glu and matmul_id_combine (gemma4's and --tp's
 *   path: rf_moe_gate_up / rf_moe_down_sum) the same way.
 * - against the existing path at the same count (RF_GPU_MOE_GGEMV=0: the grouped MMQ from 96
 *   slots, below it the per-slot GEMV or the tiled one): ids and weights the same bits (one route
 *   kernel); g within rel. L2 1e-4: both sum the same exact int32 block products scaled in f32
 *   (test_gpu_mmq / gpu_mmq.cu: d_w d_x s, the K-quants' min term on the f32 sum of x), in
 *   another order, so a product moves by at most nu 2^-24 times the sum of its |terms| (nu
 *   units: 90 for 2880-wide MXFP4), ~sqrt(nu) times the product for random data: 5.4e-5, times
 *   the GLU's slope (<= ~1.2); y within 2 x down_bound (test_gpu_moe_fused's model of the int8
 *   rounding of the down input bounds each path's distance from the f32 product of the same h,
 *   so their distance by the triangle inequality).
 * - capture: the grouped GEMV path recorded into a CUDA graph, replayed with other logits,
 *   equals eager.
 * RF_MOE_GGEMV_BENCH=1: us per MoE block (CUDA-graph replays, routing included) on the path the
 * knobs pick with RF_GPU_MOE_GGEMV=0 (old) and 8 (new) at 8, 16, 32, 64 tokens, for
 * qwen3-30b-a3b, gpt-oss-20b, qwen3.6-35b-a3b (moe_ffn) and gemma4-26b-a4b (Q4_K gate/up, Q5_0
 * down, through matmul_id_glu + matmul_id_combine with the route), random weights; the experts'
 * bytes the step reads and that over the time; RF_MOE_GGEMV_BENCH_ONLY=1 runs only that;
 * RF_MOE_GGEMV_BENCH_SHAPE=name / RF_MOE_GGEMV_BENCH_N=n keep one shape / one count (a profiler's
 * run of one kernel).
 * Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_moe_ggemv: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_moe_common.h"

static void knobs(const char *most, const char *least) {
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_MOE_GGEMV, most), RF_OK);
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_MOE_GGEMV_MIN, least), RF_OK);
}
#define KNOBS_NEW() knobs("1024", "1")  /* the grouped GEMV at every count */
#define KNOBS_OLD() knobs("0", "0")     /* the paths before it */
#define KNOBS_DEFAULT() knobs(NULL, NULL)

/* One MoE block's weights and inputs on the device, for up to nmax tokens. */
typedef struct moe {
    rf_type tg, td;
    int64_t ne, k, dim, ff, nmax;
    bool bias, router_b;
    rf_glu_kind glu;
    rf_moe_gating gating;
    size_t gb, db;
    rf_tensor wg, wu, wd, x, lb, bg, bu, bd;
    float *lg; /* host router logits [nmax, ne] */
} moe;

static void moe_make(rf_rng *r, moe *m, rf_type tg, rf_type td, int64_t ne, int64_t k, int64_t dim, int64_t ff,
                     bool bias, rf_glu_kind glu, rf_moe_gating gating, bool router_b, int64_t nmax) {
    memset(m, 0, sizeof *m);
    m->tg = tg, m->td = td, m->ne = ne, m->k = k, m->dim = dim, m->ff = ff, m->nmax = nmax;
    m->bias = bias, m->router_b = router_b, m->glu = glu, m->gating = gating;
    uint8_t *wg = random_weights(r, tg, ne * ff, dim, &m->gb), *wu = random_weights(r, tg, ne * ff, dim, &m->gb);
    uint8_t *wd = random_weights(r, td, ne * dim, ff, &m->db);
    m->wg = dt(tg, dim, ne * ff, dev_from(wg, m->gb));
    m->wu = dt(tg, dim, ne * ff, dev_from(wu, m->gb));
    m->wd = dt(td, ff, ne * dim, dev_from(wd, m->db));
    free(wg), free(wu), free(wd);
    float *x = host_f32(nmax * dim), *b = host_f32(ne * (ff > dim ? ff : dim));
    rf_rng_fill_normal(r, x, nmax * dim, 1.0f);
    m->x = dt(RF_TYPE_F32, dim, nmax, dev_from(x, nmax * dim * 4));
    rf_rng_fill_normal(r, b, ne, 0.5f);
    m->lb = dt(RF_TYPE_F32, ne, 1, dev_from(b, ne * 4));
    rf_rng_fill_normal(r, b, ne * ff, 0.5f);
    m->bg = dt(RF_TYPE_F32, ff, ne, dev_from(b, ne * ff * 4));
    rf_rng_fill_normal(r, b, ne * ff, 0.5f);
    m->bu = dt(RF_TYPE_F32, ff, ne, dev_from(b, ne * ff * 4));
    rf_rng_fill_normal(r, b, ne * dim, 0.5f);
    m->bd = dt(RF_TYPE_F32, dim, ne, dev_from(b, ne * dim * 4));
    free(x), free(b);
    /* uneven routing: experts e % 4 == 3 never chosen, expert 0 by every token, expert 1 by
     * every other one, the rest at random (k <= 3 ne / 4 - 2 keeps every token's k choosable) */
    m->lg = host_f32(nmax * ne);
    rf_rng_fill_normal(r, m->lg, nmax * ne, 1.0f);
    for (int64_t t = 0; t < nmax; t++)
        for (int64_t e = 0; e < ne; e++) {
            float *l = &m->lg[t * ne + e];
            if (e % 4 == 3) *l = -1e4f;
            else if (e == 0 || (e == 1 && t % 2 == 0)) *l += 20.0f;
        }
}

static void moe_free(moe *m) {
    rf_tensor *ts[] = {&m->wg, &m->wu, &m->wd, &m->x, &m->lb, &m->bg, &m->bu, &m->bd};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rf_gpu_free(g_ctx, ts[i]->data);
    free(m->lg);
}

/* device outputs of one MoE block call over tokens [t0, t0 + n) */
typedef struct outs {
    rf_tensor lg, ids, wts, g, u, z, y;
} outs;

static void outs_make(outs *o, const moe *m, int64_t t0, int64_t n) {
    const int64_t nk = n * m->k;
    o->lg = dt(RF_TYPE_F32, m->ne, n, dev_from(m->lg + t0 * m->ne, n * m->ne * 4));
    o->ids = dt(RF_TYPE_I32, m->k, n, dev_poison(nk * 4));
    o->wts = dt(RF_TYPE_F32, m->k, n, dev_poison(nk * 4));
    o->g = dt(RF_TYPE_F32, m->ff, nk, dev_poison(nk * m->ff * 4));
    o->u = dt(RF_TYPE_F32, m->ff, nk, dev_poison(nk * m->ff * 4));
    o->z = dt(RF_TYPE_F32, m->dim, nk, dev_poison(nk * m->dim * 4));
    o->y = dt(RF_TYPE_F32, m->dim, n, dev_poison(n * m->dim * 4));
}

static void outs_free(outs *o) {
    rf_tensor *ts[] = {&o->lg, &o->ids, &o->wts, &o->g, &o->u, &o->z, &o->y};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rf_gpu_free(g_ctx, ts[i]->data);
}

/* One MoE block over tokens [t0, t0 + n): ops 0: moe_ffn (qwen3moe, gpt-oss, qwen35moe); 1: the
 * route, then rf_moe_gate_up and rf_moe_down_sum (matmul_id_glu, matmul_id_combine: gemma4, --tp) */
static rf_status moe_run(const moe *m, outs *o, int64_t t0, int64_t n, int ops) {
    rf_tensor x = dt(RF_TYPE_F32, m->dim, n, (float *)m->x.data + t0 * m->dim);
    const rf_tensor *lb = m->router_b ? &m->lb : NULL;
    if (ops == 0) {
        const rf_moe_ffn_args a = {
            .logits = &o->lg, .logits_b = lb, .sel_bias = NULL, .gating = m->gating, .norm = true, .scale = 1.0f,
            .ids = &o->ids, .wts = &o->wts, .x = &x, .w_gate = &m->wg, .w_up = &m->wu, .w_down = &m->wd,
            .b_gate = m->bias ? &m->bg : NULL, .b_up = m->bias ? &m->bu : NULL, .b_down = m->bias ? &m->bd : NULL,
            .g = &o->g, .u = &o->u, .z = &o->z, .n = n, .k = m->k, .n_expert = m->ne, .n_ff = m->ff,
            .n_out = m->dim, .glu = m->glu};
        return rf_moe_ffn(g_be, &o->y, &a);
    }
    const rf_backend_ops *op = g_be->ops;
    rf_status st = lb ? op->add_bias(g_be, &o->lg, lb, n, m->ne) : RF_OK;
    if (!st) st = op->moe_route(g_be, &o->ids, &o->wts, &o->lg, NULL, n, m->ne, m->k, m->gating, true, 1.0f);
    if (!st)
        st = rf_moe_gate_up(g_be, &o->g, &o->u, &m->wg, &m->wu, m->ff, &x, &o->ids, m->bias ? &m->bg : NULL,
                            m->bias ? &m->bu : NULL, n, m->k, m->glu);
    if (!st)
        st = rf_moe_down_sum(g_be, &o->y, &o->z, &m->wd, m->dim, &o->g, &o->ids, m->bias ? &m->bd : NULL, &o->wts, n,
                             m->k);
    return st;
}

/* the host copies of one call's results */
typedef struct hres {
    int32_t *ids;
    float *wts, *g, *y;
} hres;

static hres run_host(const moe *m, int64_t t0, int64_t n, int ops) {
    outs o;
    outs_make(&o, m, t0, n);
    rf_status st = moe_run(m, &o, t0, n, ops);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    const int64_t nk = n * m->k;
    hres h = {malloc(nk * 4), host_f32(nk), host_f32(nk * m->ff), host_f32(n * m->dim)};
    dev_to(h.ids, o.ids.data, nk * 4), dev_to(h.wts, o.wts.data, nk * 4);
    dev_to(h.g, o.g.data, nk * m->ff * 4), dev_to(h.y, o.y.data, n * m->dim * 4);
    outs_free(&o);
    return h;
}

static void hres_free(hres *h) { free(h->ids), free(h->wts), free(h->g), free(h->y); }

/* n tokens on the grouped GEMV against each token alone (bits) and against the old path (bounds) */
static void ggemv_case(const moe *m, int64_t n, int ops) {
    const int64_t k = m->k, nk = n * k, ff = m->ff, dim = m->dim;
    KNOBS_NEW();
    hres nw = run_host(m, 0, n, ops);
    KNOBS_OLD();
    hres old = run_host(m, 0, n, ops);
    int bad = 0;
    for (int64_t t = 0; t < n; t++) { /* the decode step's path: one token, the per-slot kernels */
        hres one = run_host(m, t, 1, ops);
        bad += memcmp(one.ids, nw.ids + t * k, k * 4) != 0 || memcmp(one.wts, nw.wts + t * k, k * 4) != 0;
        bad += memcmp(one.g, nw.g + t * k * ff, k * ff * 4) != 0 || memcmp(one.y, nw.y + t * dim, dim * 4) != 0;
        hres_free(&one);
    }
    KNOBS_DEFAULT();
    int cnt0 = 0, used = 0;
    int *per = calloc(m->ne, sizeof *per);
    for (int64_t s = 0; s < nk; s++) per[nw.ids[s]]++;
    for (int64_t e = 0; e < m->ne; e++) used += per[e] > 0, cnt0 = per[e] > cnt0 ? per[e] : cnt0;
    free(per);
    const bool route_same = memcmp(nw.ids, old.ids, nk * 4) == 0 && memcmp(nw.wts, old.wts, nk * 4) == 0;
    char what[160];
    snprintf(what, sizeof what, "%s %s/%s ne=%lld k=%lld %lldx%lld n=%lld (%d experts used, most %d slots)",
             ops ? "gate_up+down_sum" : "moe_ffn", rf_type_name(m->tg), rf_type_name(m->td), (long long)m->ne,
             (long long)k, (long long)dim, (long long)ff, (long long)n, used, cnt0);
    fprintf(stderr, "  %s: %s each token alone; route %s the old path's\n", what,
            bad ? "DIFFERS from" : "bit-identical to", route_same ? "equal to" : "DIFFERS from");
    assert_int_equal(bad, 0);
    assert_true(route_same);
    check_rel("  g vs the old path (f32 order)", nw.g, old.g, nk * ff, 1e-4);
    check_rel("  y vs the old path (2 x down_bound)", nw.y, old.y, n * dim, 2.0 * down_bound(nw.g, nw.wts, nk, ff));
    hres_free(&nw), hres_free(&old);
}

static void test_ggemv_real_shapes(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 71);
    const int64_t ns[] = {8, 16, 32, 64};
    moe m;
    moe_make(&r, &m, RF_TYPE_MXFP4, RF_TYPE_MXFP4, 32, 4, 2880, 2880, true, RF_GLU_SWIGLU_OAI, RF_MOE_SOFTMAX_TOPK,
             true, 64);
    for (size_t i = 0; i < 4; i++) ggemv_case(&m, ns[i], 0);
    moe_free(&m);
    moe_make(&r, &m, RF_TYPE_Q4_K, RF_TYPE_Q6_K, 128, 8, 2048, 768, false, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false, 64);
    for (size_t i = 0; i < 4; i++) ggemv_case(&m, ns[i], 0);
    moe_free(&m);
}

static void test_ggemv_types(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 72);
    /* (gate/up type, down type, experts, k, dim, ff): the lanes a row takes (rows of 2, 4, 8, 32
     * units) on both products, every int8-x type, record kinds 0 / 1 / 2 for the down input */
    static const struct {
        rf_type tg, td;
        int64_t ne, k, dim, ff;
        rf_glu_kind glu;
    } cs[] = {
        {RF_TYPE_Q8_0, RF_TYPE_Q8_0, 16, 4, 256, 96, RF_GLU_SWIGLU},
        {RF_TYPE_Q5_0, RF_TYPE_Q4_0, 32, 6, 64, 1024, RF_GLU_GEGLU},
        {RF_TYPE_Q5_K, RF_TYPE_Q4_K, 16, 4, 512, 1024, RF_GLU_SWIGLU},
        {RF_TYPE_Q4_1, RF_TYPE_Q5_1, 8, 2, 2048, 160, RF_GLU_SWIGLU_OAI},
        {RF_TYPE_Q6_K, RF_TYPE_Q8_0, 64, 8, 2304, 64, RF_GLU_SWIGLU},
        {RF_TYPE_MXFP4, RF_TYPE_Q6_K, 16, 4, 128, 512, RF_GLU_GEGLU},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        moe m;
        moe_make(&r, &m, cs[i].tg, cs[i].td, cs[i].ne, cs[i].k, cs[i].dim, cs[i].ff, i % 2 == 0, cs[i].glu,
                 i % 3 == 0 ? RF_MOE_SOFTMAX_TOPK : RF_MOE_SOFTMAX, i % 2 == 1, 20);
        ggemv_case(&m, 8, 0);
        ggemv_case(&m, 20, 0);
        ggemv_case(&m, 20, 1);
        moe_free(&m);
    }
    /* gemma4-26b-a4b's types and widths (Q4_K gate/up of 11 super-blocks, Q5_0 down of 22
     * blocks; 32 of its 128 experts) through matmul_id_glu / matmul_id_combine */
    moe m;
    moe_make(&r, &m, RF_TYPE_Q4_K, RF_TYPE_Q5_0, 32, 8, 2816, 704, false, RF_GLU_GEGLU, RF_MOE_SOFTMAX, false, 32);
    ggemv_case(&m, 32, 1);
    moe_free(&m);
}

static void test_ggemv_capture(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 73);
    moe m;
    const int64_t n = 32;
    moe_make(&r, &m, RF_TYPE_Q4_K, RF_TYPE_Q6_K, 128, 8, 2048, 768, false, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false, n);
    KNOBS_NEW();
    outs o;
    outs_make(&o, &m, 0, n);
    assert_int_equal(moe_run(&m, &o, 0, n, 0), RF_OK); /* eager first: the scratch arena grows */
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    void *exec = NULL;
    assert_int_equal(rf_gpu_capture_begin(g_ctx), RF_OK);
    rf_status st = moe_run(&m, &o, 0, n, 0);
    assert_int_equal(rf_gpu_capture_end(g_ctx, &exec), RF_OK);
    assert_int_equal(st, RF_OK);
    float *lg2 = host_f32(n * m.ne);
    rf_rng_fill_normal(&r, lg2, n * m.ne, 1.0f);
    assert_int_equal(rf_gpu_upload(g_ctx, o.lg.data, lg2, n * m.ne * 4), RF_OK);
    float *yg = host_f32(n * m.dim), *ye = host_f32(n * m.dim);
    assert_int_equal(rf_gpu_memset(g_ctx, o.y.data, 0xFF, n * m.dim * 4), RF_OK);
    assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK);
    dev_to(yg, o.y.data, n * m.dim * 4);
    assert_int_equal(rf_gpu_memset(g_ctx, o.y.data, 0xFF, n * m.dim * 4), RF_OK);
    assert_int_equal(moe_run(&m, &o, 0, n, 0), RF_OK);
    dev_to(ye, o.y.data, n * m.dim * 4);
    for (int64_t i = 0; i < n * m.dim; i++) assert_false(isnan(ye[i]));
    const bool same = memcmp(yg, ye, n * m.dim * 4) == 0;
    fprintf(stderr, "  grouped GEMV capture: replay with new logits %s eager\n", same ? "bit-identical to" : "DIFFERS from");
    assert_true(same);
    KNOBS_DEFAULT();
    rf_gpu_graph_destroy(exec);
    outs_free(&o);
    free(lg2), free(yg), free(ye);
    moe_free(&m);
}

/* ---- timing ------------------------------------------------------------------------------- */

/* median us per MoE block of n tokens (a graph of `per` calls, 7 replays) */
static double bench_block(const moe *m, int64_t n, int ops) {
    const int per = 20;
    outs o;
    outs_make(&o, m, 0, n);
    assert_int_equal(moe_run(m, &o, 0, n, ops), RF_OK);
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    void *exec = NULL;
    assert_int_equal(rf_gpu_capture_begin(g_ctx), RF_OK);
    for (int i = 0; i < per; i++) assert_int_equal(moe_run(m, &o, 0, n, ops), RF_OK);
    assert_int_equal(rf_gpu_capture_end(g_ctx, &exec), RF_OK);
    assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK);
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    double t[7], us;
    for (int rep = 0; rep < 7; rep++) {
        const double t0 = now_s();
        assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK);
        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
        t[rep] = (now_s() - t0) / per * 1e6;
    }
    for (int i = 0; i < 7; i++)
        for (int j = i + 1; j < 7; j++)
            if (t[j] < t[i]) us = t[i], t[i] = t[j], t[j] = us;
    rf_gpu_graph_destroy(exec);
    outs_free(&o);
    return t[3];
}

/* the experts' bytes a step of n tokens reads once per chosen expert (the routing of these logits) */
static double step_mb(const moe *m, int64_t n) {
    bool *hit = calloc(m->ne, 1);
    /* the route: every token takes expert 0, expert 1 every other token, the rest of its k at
     * random among the others (not e % 4 == 3): count the experts actually chosen from the ids */
    hres h = run_host(m, 0, n, 0);
    for (int64_t s = 0; s < n * m->k; s++) hit[h.ids[s]] = true;
    int used = 0;
    for (int64_t e = 0; e < m->ne; e++) used += hit[e];
    hres_free(&h);
    free(hit);
    return (double)used * (2.0 * m->gb + m->db) / (double)m->ne / 1e6;
}

static void bench_shape(const char *name, rf_rng *r, rf_type tg, rf_type td, int64_t ne, int64_t k, int64_t dim,
                        int64_t ff, bool bias, rf_glu_kind glu, rf_moe_gating gating, int ops) {
    const char *only = getenv("RF_MOE_GGEMV_BENCH_SHAPE"), *only_n = getenv("RF_MOE_GGEMV_BENCH_N");
    if (only && strcmp(only, name) != 0) return;
    moe m;
    moe_make(r, &m, tg, td, ne, k, dim, ff, bias, glu, gating, bias, 64);
    /* the bench's routing: random logits (no forced experts), as the synthetic models' routers */
    rf_rng_fill_normal(r, m.lg, 64 * ne, 1.0f);
    printf("%-16s %s/%s %lld experts top-%lld, %lld -> %lld -> %lld%s\n", name, rf_type_name(tg), rf_type_name(td),
           (long long)ne, (long long)k, (long long)dim, (long long)ff, (long long)dim,
           ops ? " (matmul_id_glu + matmul_id_combine)" : " (moe_ffn)");
    const int64_t ns[] = {8, 16, 32, 64};
    for (size_t i = 0; i < 4; i++) {
        if (only_n && atoll(only_n) != ns[i]) continue;
        const double mb = step_mb(&m, ns[i]);
        knobs("0", NULL);
        const double old = bench_block(&m, ns[i], ops);
        knobs("8", NULL); /* the route it was built with (the default is 0: off) */
        const double nw = bench_block(&m, ns[i], ops);
        KNOBS_DEFAULT();
        printf("  n=%-3lld experts' bytes %7.1f MB | old %8.1f us (%5.0f GB/s) | new %8.1f us (%5.0f GB/s) | x%.2f\n",
               (long long)ns[i], mb, old, mb * 1e3 / old, nw, mb * 1e3 / nw, old / nw);
    }
    moe_free(&m);
}

static void test_ggemv_bench(void **state) {
    (void)state;
    if (!getenv("RF_MOE_GGEMV_BENCH")) return;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 74);
    double bw = 0.0;
    if (rf_gpu_bench_read_bw(g_ctx, (size_t)2 << 30, 20, &bw)) bw = 0.0;
    printf("\nMoE block bench (us per block, CUDA-graph replays, route included; old: RF_GPU_MOE_GGEMV=0, new: "
           "8; read bandwidth %.0f GB/s)\n", bw);
    bench_shape("qwen3-30b-a3b", &r, RF_TYPE_Q4_K, RF_TYPE_Q6_K, 128, 8, 2048, 768, false, RF_GLU_SWIGLU,
                RF_MOE_SOFTMAX, 0);
    bench_shape("gpt-oss-20b", &r, RF_TYPE_MXFP4, RF_TYPE_MXFP4, 32, 4, 2880, 2880, true, RF_GLU_SWIGLU_OAI,
                RF_MOE_SOFTMAX_TOPK, 0);
    bench_shape("qwen3.6-35b-a3b", &r, RF_TYPE_Q4_K, RF_TYPE_Q6_K, 256, 8, 2048, 512, false, RF_GLU_SWIGLU,
                RF_MOE_SOFTMAX, 0);
    bench_shape("gemma4-26b-a4b", &r, RF_TYPE_Q4_K, RF_TYPE_Q5_0, 128, 8, 2816, 704, false, RF_GLU_GEGLU,
                RF_MOE_SOFTMAX, 1);
    fflush(stdout);
}

int main(void) {
    if (moe_backend_open("test_gpu_moe_ggemv")) return 1;
    if (!rf_knob_is_set(RF_KNOB_GPU_MOE_FUSE) && rf_knob_override(RF_KNOB_GPU_MOE_FUSE, "3")) return 1;
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_ggemv_real_shapes),
        cmocka_unit_test(test_ggemv_types),
        cmocka_unit_test(test_ggemv_capture),
        cmocka_unit_test(test_ggemv_bench),
    };
    const struct CMUnitTest bench_only[] = {cmocka_unit_test(test_ggemv_bench)};
    const int rc = getenv("RF_MOE_GGEMV_BENCH_ONLY") ? cmocka_run_group_tests(bench_only, NULL, NULL)
                                                     : cmocka_run_group_tests(all, NULL, NULL);
    g_be->ops->destroy(g_be);
    return rc;
}
#endif
