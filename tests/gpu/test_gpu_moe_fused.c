/* test_gpu_moe_fused.c — the GPU backend's MoE decode fusions (matmul_id_glu: gate and up with
 * the GLU; matmul_id_combine: down with the router-weighted sum), through rf_moe_gate_up /
 * rf_moe_down_sum as the forward calls them, on random data (seed printed), outputs poisoned.
 * - against the reference ops (rf_ref_matmul_id, rf_ref_swiglu / geglu / swiglu_oai,
 *   rf_ref_moe_combine: the CPU twin), every expert type the GEMV path takes (Q4_0, Q4_1, Q8_0,
 *   Q4_K, Q5_K, Q6_K, MXFP4 on int8 x; F16, F32 on f32 x), each GLU kind, widths 96 and 2880
 *   (the 32-element types) or 256 .. 2048 (the K-quants), k 1 / 4 / 8, with and without biases;
 *   then Q5_0, Q5_1 (int8 x), BF16, Q2_K, Q3_K, IQ4_NL (f32 x), and k = 2, 3, 6, 32 (the down+sum
 *   kernel's uneven layouts of slots over its lane groups).
 *   Bounds (test_gpu_moe's model): an int8-x product is off by ~0.5% of its RMS per output
 *   (rel. L2 < 1e-2 there); the GLU y = f(g, u) moves that by df/dg dg + df/du du. For silu /
 *   gelu with g, u of one scale that is ~2.1x a product's error (|a'| <= 1.13, E a(g)^2 ~
 *   E g^2 / 2): ~1.1%, bound 3e-2. gpt-oss's clamped swiglu (f = min(g, 7) sigmoid(1.702
 *   min(g, 7)) (clamp(u, -7, 7) + 1)) is not of that kind: where the products are wide against
 *   the clamp, most outputs saturate (no error) while the unclamped ones keep an error of the
 *   products' scale (H200: 0.65-3.25% where silu / gelu gave 0.29-1.4%). So its bound is the same
 *   model taken element by element: 3x the L2 of |df/dg| 0.5% rms(g) + |df/du| 0.5% rms(u)
 *   (central differences of the reference GLU), relative to |y| (for silu with Gaussian g, u
 *   this gives 2.7%, near the 3e-2 above; Gaussian product errors of that size give 0.7%, and
 *   for the clamped one 1.4% / 4.0% at products of RMS 30 / 300 against bounds of 4.3% /
 *   12.5%); the down sum of k products with positive weights keeps a product's relative error,
 *   but its x is a GLU output h, heavier-tailed than a Gaussian: its bound is the int8 rounding
 *   of the actual h (down_bound in gpu_moe_common.h, ~1%, bound ~3%; H200 2026-11-29: a fixed
 *   1e-2 failed at rel. L2 1.0-1.1% on 96- and 2880-wide h). f32-x types: f32 sums (~1e-6),
 *   bound 1e-4 for both.
 * - against the GPU's unfused ops (matmul_id twice and glu; matmul_id per slot and
 *   moe_combine): the same bits (the fused kernels take the unfused ones' operations in their
 *   order: backend.h's promise, docs/ARCHITECTURE.md).
 * - batch invariance: a token's fused outputs are the same bits alone (n = 1) and in a call of
 *   9 tokens; in batch-invariant mode, MXFP4's 300 tokens (tiled GEMV, unfused) equal 1-token
 *   calls (fused).
 * - capture: the fused pair recorded into a CUDA graph, replayed with other ids, equals eager.
 * Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_moe_fused: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_moe_common.h"

/* the types the expert GEMV takes on f32 x (F16 / BF16 loads; the rest element by element) */
static bool f32_x(rf_type t) {
    return t == RF_TYPE_F16 || t == RF_TYPE_F32 || t == RF_TYPE_BF16 || t == RF_TYPE_Q2_K || t == RF_TYPE_Q3_K ||
           t == RF_TYPE_IQ4_NL;
}

static void ref_glu(float *y, const float *g, const float *u, int64_t n, rf_glu_kind kind) {
    if (kind == RF_GLU_SWIGLU) rf_ref_swiglu(y, g, u, n);
    else if (kind == RF_GLU_GEGLU) rf_ref_geglu(y, g, u, n);
    else rf_ref_swiglu_oai(y, g, u, n);
}

/* The GLU's rel. L2 bound for int8-x products (the header's model, element by element): 3 x
 * || |df/dg| eg + |df/du| eu || / ||f|| with eg, eu = 0.5% of the products' RMS. */
static double glu_bound(const float *g, const float *u, int64_t n, rf_glu_kind kind) {
    double sg = 0, su = 0, num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) sg += (double)g[i] * g[i], su += (double)u[i] * u[i];
    const double eg = 5e-3 * sqrt(sg / (double)n), eu = 5e-3 * sqrt(su / (double)n);
    for (int64_t i = 0; i < n; i++) {
        float p[2][2], y0, hg = 1e-2f * (1.0f + fabsf(g[i])), hu = 1e-2f * (1.0f + fabsf(u[i]));
        const float gg[2] = {g[i] - hg, g[i] + hg}, uu[2] = {u[i] - hu, u[i] + hu};
        for (int j = 0; j < 2; j++) ref_glu(&p[0][j], &gg[j], &u[i], 1, kind), ref_glu(&p[1][j], &g[i], &uu[j], 1, kind);
        ref_glu(&y0, &g[i], &u[i], 1, kind);
        const double e = fabs((double)(p[0][1] - p[0][0]) / (2.0 * hg)) * eg + fabs((double)(p[1][1] - p[1][0]) / (2.0 * hu)) * eu;
        num += e * e, den += (double)y0 * y0;
    }
    return den > 0 ? 3.0 * sqrt(num / den) : 3e-2;
}

/* One MoE feed-forward's experts on the host and the device: weights, biases, x, ids, wts. */
typedef struct ffn {
    rf_type t;
    int64_t ne, k, n, dim, ff;
    bool bias;
    uint8_t *wg, *wu, *wd;
    size_t bg_bytes, bd_bytes;
    float *x, *bg, *bu, *bd, *wts;
    int32_t *ids;
    rf_tensor dwg, dwu, dwd, dx, dbg, dbu, dbd, dids, dwts;
} ffn;

static void ffn_make(rf_rng *r, ffn *f, rf_type t, int64_t ne, int64_t k, int64_t n, int64_t dim, int64_t ff, bool bias) {
    memset(f, 0, sizeof *f);
    f->t = t, f->ne = ne, f->k = k, f->n = n, f->dim = dim, f->ff = ff, f->bias = bias;
    const int64_t nk = n * k;
    f->wg = random_weights(r, t, ne * ff, dim, &f->bg_bytes);
    f->wu = random_weights(r, t, ne * ff, dim, &f->bg_bytes);
    f->wd = random_weights(r, t, ne * dim, ff, &f->bd_bytes);
    f->x = host_f32(n * dim), f->bg = host_f32(ne * ff), f->bu = host_f32(ne * ff), f->bd = host_f32(ne * dim);
    f->wts = host_f32(nk);
    f->ids = malloc(nk * 4);
    rf_rng_fill_normal(r, f->x, n * dim, 1.0f);
    rf_rng_fill_normal(r, f->bg, ne * ff, 0.5f);
    rf_rng_fill_normal(r, f->bu, ne * ff, 0.5f);
    rf_rng_fill_normal(r, f->bd, ne * dim, 0.5f);
    for (int64_t i = 0; i < nk; i++) f->wts[i] = 0.05f + rf_rng_uniform(r);
    rand_ids(r, f->ids, n, k, ne);
    f->dwg = dt(t, dim, ne * ff, dev_from(f->wg, f->bg_bytes));
    f->dwu = dt(t, dim, ne * ff, dev_from(f->wu, f->bg_bytes));
    f->dwd = dt(t, ff, ne * dim, dev_from(f->wd, f->bd_bytes));
    f->dx = dt(RF_TYPE_F32, dim, n, dev_from(f->x, n * dim * 4));
    f->dbg = dt(RF_TYPE_F32, ff, ne, dev_from(f->bg, ne * ff * 4));
    f->dbu = dt(RF_TYPE_F32, ff, ne, dev_from(f->bu, ne * ff * 4));
    f->dbd = dt(RF_TYPE_F32, dim, ne, dev_from(f->bd, ne * dim * 4));
    f->dids = dt(RF_TYPE_I32, k, n, dev_from(f->ids, nk * 4));
    f->dwts = dt(RF_TYPE_F32, k, n, dev_from(f->wts, nk * 4));
}

static void ffn_free(ffn *f) {
    rf_tensor *ts[] = {&f->dwg, &f->dwu, &f->dwd, &f->dx, &f->dbg, &f->dbu, &f->dbd, &f->dids, &f->dwts};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rf_gpu_free(g_ctx, ts[i]->data);
    free(f->wg), free(f->wu), free(f->wd), free(f->x), free(f->bg), free(f->bu), free(f->bd), free(f->wts);
    free(f->ids);
}

/* the fused pair on the device over tokens [t0, t0 + m): y [m k, ff] (gate/up), o [m, dim] (down
 * of the host's h rows, uploaded to dh) */
static void fused_run(ffn *f, int64_t t0, int64_t m, rf_glu_kind kind, float *dh, float *y, float *o) {
    const int64_t k = f->k, mk = m * k;
    float *dy = dev_poison(mk * f->ff * 4), *du = dev_poison(mk * f->ff * 4), *dz = dev_poison(mk * f->dim * 4);
    float *dout = dev_poison(m * f->dim * 4);
    rf_tensor ty = dt(RF_TYPE_F32, f->ff, mk, dy), tu = dt(RF_TYPE_F32, f->ff, mk, du),
              tz = dt(RF_TYPE_F32, f->dim, mk, dz), to = dt(RF_TYPE_F32, f->dim, m, dout);
    rf_tensor tx = dt(RF_TYPE_F32, f->dim, m, (float *)f->dx.data + t0 * f->dim),
              th = dt(RF_TYPE_F32, f->ff, mk, dh + t0 * k * f->ff),
              ti = dt(RF_TYPE_I32, k, m, (int32_t *)f->dids.data + t0 * k),
              tw = dt(RF_TYPE_F32, k, m, (float *)f->dwts.data + t0 * k);
    assert_non_null(g_be->ops->matmul_id_glu);
    assert_non_null(g_be->ops->matmul_id_combine);
    rf_status st = rf_moe_gate_up(g_be, &ty, &tu, &f->dwg, &f->dwu, f->ff, &tx, &ti, f->bias ? &f->dbg : NULL,
                                  f->bias ? &f->dbu : NULL, m, k, kind);
    if (!st) st = rf_moe_down_sum(g_be, &to, &tz, &f->dwd, f->dim, &th, &ti, f->bias ? &f->dbd : NULL, &tw, m, k);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    assert_int_equal(st, RF_OK);
    dev_to(y, dy, mk * f->ff * 4);
    dev_to(o, dout, m * f->dim * 4);
    rf_gpu_free(g_ctx, dy), rf_gpu_free(g_ctx, du), rf_gpu_free(g_ctx, dz), rf_gpu_free(g_ctx, dout);
}

/* the same through the GPU's unfused ops */
static void unfused_run(ffn *f, rf_glu_kind kind, float *dh, float *y, float *o) {
    const int64_t n = f->n, k = f->k, nk = n * k;
    float *dy = dev_poison(nk * f->ff * 4), *du = dev_poison(nk * f->ff * 4), *dz = dev_poison(nk * f->dim * 4);
    float *dout = dev_poison(n * f->dim * 4);
    rf_tensor ty = dt(RF_TYPE_F32, f->ff, nk, dy), tu = dt(RF_TYPE_F32, f->ff, nk, du),
              tz = dt(RF_TYPE_F32, f->dim, nk, dz), to = dt(RF_TYPE_F32, f->dim, n, dout),
              th = dt(RF_TYPE_F32, f->ff, nk, dh);
    const rf_backend_ops *op = g_be->ops;
    rf_status st = op->matmul_id(g_be, &ty, &f->dwg, f->ff, &f->dx, false, &f->dids, f->bias ? &f->dbg : NULL, n, k);
    if (!st) st = op->matmul_id(g_be, &tu, &f->dwu, f->ff, &f->dx, false, &f->dids, f->bias ? &f->dbu : NULL, n, k);
    if (!st) st = op->glu(g_be, &ty, &ty, &tu, nk * f->ff, kind);
    if (!st) st = op->matmul_id(g_be, &tz, &f->dwd, f->dim, &th, true, &f->dids, f->bias ? &f->dbd : NULL, n, k);
    if (!st) st = op->moe_combine(g_be, &to, &tz, &f->dwts, n, k, f->dim);
    assert_int_equal(st, RF_OK);
    dev_to(y, dy, nk * f->ff * 4);
    dev_to(o, dout, n * f->dim * 4);
    rf_gpu_free(g_ctx, dy), rf_gpu_free(g_ctx, du), rf_gpu_free(g_ctx, dz), rf_gpu_free(g_ctx, dout);
}

/* ---- against the reference ops, and the unfused GPU ops ------------------------------------ */

static void ref_case(rf_rng *r, rf_type t, int64_t ne, int64_t k, int64_t n, int64_t dim, int64_t ff, bool bias,
                     rf_glu_kind kind) {
    ffn f;
    ffn_make(r, &f, t, ne, k, n, dim, ff, bias);
    const int64_t nk = n * k;
    float *g = host_f32(nk * ff), *u = host_f32(nk * ff), *h = host_f32(nk * ff), *z = host_f32(nk * dim);
    float *o = host_f32(n * dim), *yg = host_f32(nk * ff), *og = host_f32(n * dim), *yu = host_f32(nk * ff),
          *ou = host_f32(n * dim);
    /* the twin: h = glu(gate, up) of f32 x; o = the weighted sum of the down products of h */
    assert_int_equal(rf_ref_matmul_id(g, f.wg, t, dim, ff, ne, f.x, false, f.ids, bias ? f.bg : NULL, n, k), RF_OK);
    assert_int_equal(rf_ref_matmul_id(u, f.wu, t, dim, ff, ne, f.x, false, f.ids, bias ? f.bu : NULL, n, k), RF_OK);
    ref_glu(h, g, u, nk * ff, kind);
    assert_int_equal(rf_ref_matmul_id(z, f.wd, t, ff, dim, ne, h, true, f.ids, bias ? f.bd : NULL, n, k), RF_OK);
    rf_ref_moe_combine(o, z, f.wts, n, k, dim);
    float *dh = dev_from(h, nk * ff * 4); /* the down product reads the twin's h on both sides */
    fused_run(&f, 0, n, kind, dh, yg, og);
    const bool grouped = rf_gpu_moe_grouped_takes(g_ctx, t, dim, n, k);
    char what[128];
    snprintf(what, sizeof what, "gate_up %s glu=%d ne=%lld k=%lld n=%lld %lldx%lld%s (%s)", rf_type_name(t), (int)kind,
             (long long)ne, (long long)k, (long long)n, (long long)ff, (long long)dim, bias ? " bias" : "",
             grouped ? "grouped" : "gemv");
    check_rel(what, yg, h, nk * ff, f32_x(t) ? 1e-4 : kind == RF_GLU_SWIGLU_OAI ? glu_bound(g, u, nk * ff, kind) : 3e-2);
    snprintf(what, sizeof what, "down_sum %s ne=%lld k=%lld n=%lld %lldx%lld%s", rf_type_name(t), (long long)ne,
             (long long)k, (long long)n, (long long)dim, (long long)ff, bias ? " bias" : "");
    check_rel(what, og, o, n * dim, f32_x(t) ? 1e-4 : down_bound(h, f.wts, nk, ff));
    unfused_run(&f, kind, dh, yu, ou);
    const bool same = memcmp(yg, yu, nk * ff * 4) == 0 && memcmp(og, ou, n * dim * 4) == 0;
    if (!same) fprintf(stderr, "  %s: fused DIFFERS from the unfused ops\n", what);
    assert_true(same);
    rf_gpu_free(g_ctx, dh);
    free(g), free(u), free(h), free(z), free(o), free(yg), free(og), free(yu), free(ou);
    ffn_free(&f);
}

static void test_fused_ref(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 41);
    const rf_type ts[] = {RF_TYPE_Q4_0, RF_TYPE_Q4_1, RF_TYPE_Q8_0, RF_TYPE_Q4_K, RF_TYPE_Q5_K,
                          RF_TYPE_Q6_K, RF_TYPE_MXFP4, RF_TYPE_F16, RF_TYPE_F32};
    const int64_t ks[] = {1, 4, 8}, ns[] = {1, 3, 2};
    int c = 0;
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        const bool kq = rf_type_info(ts[ti])->block_size == 256;
        /* (dim, ff): gpt-oss's 2880 and a narrow 96 (three 32-element blocks) both ways, or the
         * K-quants' multiples of 256 */
        const int64_t shp[3][2] = {{2880, 96}, {96, 2880}, {512, 256}}, shk[3][2] = {{2048, 768}, {512, 256}, {1024, 512}};
        for (int g = 0; g < 3; g++)
            for (int s = 0; s < 3; s++, c++) {
                const int64_t dim = kq ? shk[s][0] : shp[s][0], ff = kq ? shk[s][1] : shp[s][1];
                ref_case(&r, ts[ti], 16, ks[(s + g) % 3], ns[(c / 3) % 3], dim, ff, (c + g) % 2 == 0, (rf_glu_kind)g);
            }
    }
}

/* The rest of the types the per-slot GEMV takes (Q5_0 / Q5_1 on int8 x; BF16, Q2_K, Q3_K, IQ4_NL
 * on f32 x), and the slot counts the down+sum kernel lays out unevenly: k = 6 (the block's groups
 * not a multiple of k: 128 / LPR = 32 groups over 5 rows of 6 slots, 2 idle) and k = 32 (more
 * slots than groups: the 4 groups of LPR 32 take 8 rounds), and k = 2 / 3 on wide rows. */
static void test_fused_more(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 44);
    const rf_type ts[] = {RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_BF16, RF_TYPE_Q2_K, RF_TYPE_Q3_K, RF_TYPE_IQ4_NL};
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        const bool kq = rf_type_info(ts[ti])->block_size == 256;
        ref_case(&r, ts[ti], 16, 4, 2, kq ? 512 : 2880, kq ? 256 : 96, ti % 2 == 0, (rf_glu_kind)(ti % 3));
        ref_case(&r, ts[ti], 16, 8, 1, kq ? 256 : 96, kq ? 512 : 2880, ti % 2 == 1, RF_GLU_SWIGLU);
    }
    const rf_type tk[] = {RF_TYPE_Q4_K, RF_TYPE_Q6_K, RF_TYPE_Q8_0, RF_TYPE_MXFP4, RF_TYPE_F16};
    for (size_t ti = 0; ti < sizeof tk / sizeof tk[0]; ti++) {
        const bool kq = rf_type_info(tk[ti])->block_size == 256;
        /* down rows of 3 units (LPR 4: 32 groups) and of 90 / 8 units (LPR 32 / 8) */
        ref_case(&r, tk[ti], 64, 6, 2, kq ? 1024 : 512, kq ? 768 : 96, true, RF_GLU_SWIGLU);
        ref_case(&r, tk[ti], 64, 32, 1, kq ? 512 : 256, kq ? 2048 : 2880, false, RF_GLU_GEGLU);
        ref_case(&r, tk[ti], 32, 3, 3, kq ? 256 : 96, kq ? 1024 : 2880, true, RF_GLU_SWIGLU_OAI);
        ref_case(&r, tk[ti], 32, 2, 1, kq ? 768 : 2880, kq ? 256 : 64, false, RF_GLU_SWIGLU);
    }
}

/* ---- the whole experts' half (moe_ffn) ------------------------------------------------------
 * rf_moe_ffn (RF_GPU_MOE_FUSE 3: route with the router's bias and h's quantization, gate+up+GLU
 * with the down input's quantization, down+sum) against the GPU's unfused ops on the same logits
 * (add_bias, moe_route, matmul_id x 2, glu, matmul_id, moe_combine): ids, wts, the GLU output g
 * and y the same bits (the folded quantizations are rf_k_quantize_x's operations; the route
 * kernel adds the bias as add_bias does); whether the ids equal rf_ref_moe_route's on the host is
 * printed (test_gpu_moe tests the router). Gate/up and down of one type or of Q4_K_M's
 * pair (Q4_K, Q6_K); rows of 8 units or fewer (the GLU kernel's quantizing form) and of more
 * (gpt-oss's 2880: GLU kernel, then quantize_x); F16 (not fused: the ops it stands for); slot
 * counts on the grouped GEMV and (RF_GPU_MOE_GGEMV=0) the grouped MMQ (their fused forms), also
 * in batch-invariant mode. */
static void ffn_case(rf_rng *r, rf_type tg, rf_type td, int64_t ne, int64_t k, int64_t n, int64_t dim, int64_t ff,
                     bool bias, rf_glu_kind kind, rf_moe_gating gating, bool router_b) {
    const int64_t nk = n * k;
    size_t bgb, bdb;
    uint8_t *wg = random_weights(r, tg, ne * ff, dim, &bgb), *wu = random_weights(r, tg, ne * ff, dim, &bgb);
    uint8_t *wd = random_weights(r, td, ne * dim, ff, &bdb);
    float *x = host_f32(n * dim), *lg = host_f32(n * ne), *lb = host_f32(ne), *sb = host_f32(ne);
    float *bg = host_f32(ne * ff), *bu = host_f32(ne * ff), *bd = host_f32(ne * dim);
    rf_rng_fill_normal(r, x, n * dim, 1.0f);
    rf_rng_fill_normal(r, lg, n * ne, 2.0f);
    rf_rng_fill_normal(r, lb, ne, 0.5f);
    rf_rng_fill_normal(r, sb, ne, 0.3f);
    rf_rng_fill_normal(r, bg, ne * ff, 0.5f), rf_rng_fill_normal(r, bu, ne * ff, 0.5f);
    rf_rng_fill_normal(r, bd, ne * dim, 0.5f);
    rf_tensor dwg = dt(tg, dim, ne * ff, dev_from(wg, bgb)), dwu = dt(tg, dim, ne * ff, dev_from(wu, bgb)),
              dwd = dt(td, ff, ne * dim, dev_from(wd, bdb)), dx = dt(RF_TYPE_F32, dim, n, dev_from(x, n * dim * 4)),
              dlb = dt(RF_TYPE_F32, ne, 1, dev_from(lb, ne * 4)), dsb = dt(RF_TYPE_F32, ne, 1, dev_from(sb, ne * 4)),
              dbg = dt(RF_TYPE_F32, ff, ne, dev_from(bg, ne * ff * 4)), dbu = dt(RF_TYPE_F32, ff, ne, dev_from(bu, ne * ff * 4)),
              dbd = dt(RF_TYPE_F32, dim, ne, dev_from(bd, ne * dim * 4));
    const rf_tensor *sel = gating == RF_MOE_SIGMOID ? &dsb : NULL;
    int32_t *ids[2];
    float *wts[2], *g[2], *y[2];
    for (int side = 0; side < 2; side++) { /* 0: rf_moe_ffn, 1: the unfused ops */
        rf_tensor tl = dt(RF_TYPE_F32, ne, n, dev_from(lg, n * ne * 4)), ti = dt(RF_TYPE_I32, k, n, dev_poison(nk * 4)),
                  tw = dt(RF_TYPE_F32, k, n, dev_poison(nk * 4)), tg_ = dt(RF_TYPE_F32, ff, nk, dev_poison(nk * ff * 4)),
                  tu = dt(RF_TYPE_F32, ff, nk, dev_poison(nk * ff * 4)), tz = dt(RF_TYPE_F32, dim, nk, dev_poison(nk * dim * 4)),
                  ty = dt(RF_TYPE_F32, dim, n, dev_poison(n * dim * 4));
        const rf_backend_ops *op = g_be->ops;
        rf_status st;
        if (side == 0) {
            const rf_moe_ffn_args a = {
                .logits = &tl, .logits_b = router_b ? &dlb : NULL, .sel_bias = sel, .gating = gating, .norm = true,
                .scale = 1.5f, .ids = &ti, .wts = &tw, .x = &dx, .w_gate = &dwg, .w_up = &dwu, .w_down = &dwd,
                .b_gate = bias ? &dbg : NULL, .b_up = bias ? &dbu : NULL, .b_down = bias ? &dbd : NULL, .g = &tg_,
                .u = &tu, .z = &tz, .n = n, .k = k, .n_expert = ne, .n_ff = ff, .n_out = dim, .glu = kind};
            assert_non_null(op->moe_ffn);
            st = rf_moe_ffn(g_be, &ty, &a);
        } else {
            st = router_b ? op->add_bias(g_be, &tl, &dlb, n, ne) : RF_OK;
            if (!st) st = op->moe_route(g_be, &ti, &tw, &tl, sel, n, ne, k, gating, true, 1.5f);
            if (!st) st = op->matmul_id(g_be, &tg_, &dwg, ff, &dx, false, &ti, bias ? &dbg : NULL, n, k);
            if (!st) st = op->matmul_id(g_be, &tu, &dwu, ff, &dx, false, &ti, bias ? &dbu : NULL, n, k);
            if (!st) st = op->glu(g_be, &tg_, &tg_, &tu, nk * ff, kind);
            if (!st) st = op->matmul_id(g_be, &tz, &dwd, dim, &tg_, true, &ti, bias ? &dbd : NULL, n, k);
            if (!st) st = op->moe_combine(g_be, &ty, &tz, &tw, n, k, dim);
        }
        if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
        assert_int_equal(st, RF_OK);
        ids[side] = malloc(nk * 4), wts[side] = host_f32(nk), g[side] = host_f32(nk * ff), y[side] = host_f32(n * dim);
        dev_to(ids[side], ti.data, nk * 4), dev_to(wts[side], tw.data, nk * 4);
        dev_to(g[side], tg_.data, nk * ff * 4), dev_to(y[side], ty.data, n * dim * 4);
        rf_tensor *ts[] = {&tl, &ti, &tw, &tg_, &tu, &tz, &ty};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rf_gpu_free(g_ctx, ts[i]->data);
    }
    /* the host's route of the same logits (+ bias) */
    int32_t *rid = malloc(nk * 4);
    float *rw = host_f32(nk), *lgb = host_f32(n * ne);
    for (int64_t i = 0; i < n * ne; i++) lgb[i] = router_b ? lg[i] + lb[i % ne] : lg[i];
    assert_int_equal(rf_ref_moe_route(rid, rw, lgb, gating == RF_MOE_SIGMOID ? sb : NULL, n, ne, k, gating, true, 1.5f),
                     RF_OK);
    const bool same = memcmp(ids[0], ids[1], nk * 4) == 0 && memcmp(wts[0], wts[1], nk * 4) == 0 &&
                      memcmp(g[0], g[1], nk * ff * 4) == 0 && memcmp(y[0], y[1], n * dim * 4) == 0;
    const bool ref_ids = memcmp(ids[0], rid, nk * 4) == 0;
    fprintf(stderr, "  moe_ffn %s/%s ne=%lld k=%lld n=%lld %lldx%lld glu=%d gating=%d%s%s: %s the unfused ops, ids %s "
            "the reference's\n", rf_type_name(tg), rf_type_name(td), (long long)ne, (long long)k, (long long)n,
            (long long)dim, (long long)ff, (int)kind, (int)gating, bias ? " bias" : "", router_b ? " router-bias" : "",
            same ? "bit-identical to" : "DIFFERS from", ref_ids ? "equal" : "DIFFER from");
    assert_true(same); /* (the ids against the reference: printed only, test_gpu_moe checks the router) */
    for (int side = 0; side < 2; side++) free(ids[side]), free(wts[side]), free(g[side]), free(y[side]);
    free(rid), free(rw), free(lgb);
    rf_tensor *ds[] = {&dwg, &dwu, &dwd, &dx, &dlb, &dsb, &dbg, &dbu, &dbd};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) rf_gpu_free(g_ctx, ds[i]->data);
    free(wg), free(wu), free(wd), free(x), free(lg), free(lb), free(sb), free(bg), free(bu), free(bd);
}

static void test_fused_ffn(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 45);
    /* qwen3-30b-a3b's shapes (narrowed: 2048 x 768, 128 experts, top-8), Q4_K_M's pair and one type */
    ffn_case(&r, RF_TYPE_Q4_K, RF_TYPE_Q6_K, 128, 8, 1, 2048, 768, false, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false);
    ffn_case(&r, RF_TYPE_Q4_K, RF_TYPE_Q4_K, 64, 8, 3, 2048, 768, false, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false);
    ffn_case(&r, RF_TYPE_Q5_K, RF_TYPE_Q6_K, 64, 6, 2, 1024, 512, true, RF_GLU_GEGLU, RF_MOE_SIGMOID, true);
    /* the K-quant kernels' plain forms (RF_GPU_MOE_STAGE off: each lane reads its super-block
     * from global memory) give the same bits as the staged ones above */
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_MOE_STAGE, "off"), RF_OK);
    ffn_case(&r, RF_TYPE_Q4_K, RF_TYPE_Q6_K, 128, 8, 1, 2048, 768, false, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false);
    ffn_case(&r, RF_TYPE_Q5_K, RF_TYPE_Q4_K, 64, 6, 2, 1024, 512, true, RF_GLU_GEGLU, RF_MOE_SIGMOID, true);
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_MOE_STAGE, NULL), RF_OK);
    /* gpt-oss's: 2880 wide, 32 experts, top-4, biases, the router's bias, its GLU and gating */
    ffn_case(&r, RF_TYPE_MXFP4, RF_TYPE_MXFP4, 32, 4, 1, 2880, 2880, true, RF_GLU_SWIGLU_OAI, RF_MOE_SOFTMAX_TOPK, true);
    ffn_case(&r, RF_TYPE_MXFP4, RF_TYPE_MXFP4, 32, 4, 2, 256, 2880, true, RF_GLU_SWIGLU_OAI, RF_MOE_SOFTMAX_TOPK, true);
    /* the 32-element types with rows of <= 8 units (GLU kernel quantizes) and the rest */
    ffn_case(&r, RF_TYPE_Q8_0, RF_TYPE_Q8_0, 64, 8, 2, 256, 96, true, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false);
    ffn_case(&r, RF_TYPE_Q4_0, RF_TYPE_Q4_1, 64, 8, 1, 128, 64, false, RF_GLU_GEGLU, RF_MOE_SOFTMAX, true);
    ffn_case(&r, RF_TYPE_Q5_1, RF_TYPE_Q5_0, 16, 2, 3, 96, 320, true, RF_GLU_SWIGLU, RF_MOE_SIGMOID, false);
    /* not fused: f32 x */
    ffn_case(&r, RF_TYPE_F16, RF_TYPE_F16, 16, 4, 2, 256, 128, true, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, true);
    /* slot counts past the per-slot GEMV (>= 96): the grouped paths, with few slots an expert
     * (RF_GPU_MOE_GGEMV 8; its default, -1, takes it for MXFP4 only) the grouped GEMV (the unfused matmul_id its tiled GEMV), with
     * the knob off the grouped MMQ (CUDA sm_80+: one grouping, the GLU quantizing in sorted
     * order, scatter+sum; elsewhere the unfused ops) */
    for (int gg = 0; gg < 2; gg++) {
        assert_int_equal(rf_knob_override(RF_KNOB_GPU_MOE_GGEMV, gg ? "8" : "0"), RF_OK);
        ffn_case(&r, RF_TYPE_Q4_K, RF_TYPE_Q6_K, 64, 8, 24, 2048, 768, false, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false);
        ffn_case(&r, RF_TYPE_MXFP4, RF_TYPE_MXFP4, 16, 4, 32, 2880, 2880, true, RF_GLU_SWIGLU_OAI, RF_MOE_SOFTMAX_TOPK,
                 true);
        ffn_case(&r, RF_TYPE_Q8_0, RF_TYPE_Q4_0, 16, 6, 17, 512, 320, true, RF_GLU_GEGLU, RF_MOE_SIGMOID, true);
        ffn_case(&r, RF_TYPE_Q5_K, RF_TYPE_Q4_K, 64, 8, 40, 512, 256, true, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false);
    }
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_MOE_GGEMV, NULL), RF_OK);
    /* batch-invariant mode: the grouped path at every slot count where MMQ takes the types */
    assert_int_equal(g_be->ops->set_batch_invariant(g_be, true), RF_OK);
    ffn_case(&r, RF_TYPE_Q4_K, RF_TYPE_Q6_K, 64, 8, 1, 2048, 768, false, RF_GLU_SWIGLU, RF_MOE_SOFTMAX, false);
    ffn_case(&r, RF_TYPE_MXFP4, RF_TYPE_MXFP4, 16, 4, 3, 2880, 2880, true, RF_GLU_SWIGLU_OAI, RF_MOE_SOFTMAX_TOPK, true);
    assert_int_equal(g_be->ops->set_batch_invariant(g_be, false), RF_OK);
}

/* ---- batch invariance ---------------------------------------------------------------------- */

/* tokens of an n-token call against calls of m tokens at t0 (the same bits) */
static int sub_calls_differ(ffn *f, rf_glu_kind kind, float *dh, const float *yall, const float *oall,
                            const int64_t (*sub)[2], size_t n_sub) {
    int bad = 0;
    for (size_t i = 0; i < n_sub; i++) {
        const int64_t t0 = sub[i][0], m = sub[i][1];
        float *y = host_f32(m * f->k * f->ff), *o = host_f32(m * f->dim);
        fused_run(f, t0, m, kind, dh, y, o);
        bad += memcmp(y, yall + t0 * f->k * f->ff, m * f->k * f->ff * 4) != 0;
        bad += memcmp(o, oall + t0 * f->dim, m * f->dim * 4) != 0;
        free(y), free(o);
    }
    return bad;
}

static void invariant_case(rf_rng *r, rf_type t, int64_t n, int64_t ne, int64_t k, int64_t dim, int64_t ff,
                           rf_glu_kind kind, const int64_t (*sub)[2], size_t n_sub) {
    ffn f;
    ffn_make(r, &f, t, ne, k, n, dim, ff, kind == RF_GLU_SWIGLU_OAI);
    const int64_t nk = n * k;
    float *h = host_f32(nk * ff), *y = host_f32(nk * ff), *o = host_f32(n * dim);
    rf_rng_fill_normal(r, h, nk * ff, 1.0f);
    float *dh = dev_from(h, nk * ff * 4);
    fused_run(&f, 0, n, kind, dh, y, o);
    const int bad = sub_calls_differ(&f, kind, dh, y, o, sub, n_sub);
    fprintf(stderr, "  fused batch invariance %s glu=%d n=%lld: %s\n", rf_type_name(t), (int)kind, (long long)n,
            bad ? "FAILED" : "bit-identical");
    assert_int_equal(bad, 0);
    rf_gpu_free(g_ctx, dh);
    free(h), free(y), free(o);
    ffn_free(&f);
}

static void test_fused_invariant(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 42);
    /* the decode GEMV path: 9 tokens of 4 slots (36 < the grouped crossover) against 1 and 2 */
    const int64_t sub9[][2] = {{0, 1}, {4, 1}, {8, 1}, {2, 2}};
    const rf_type ts[] = {RF_TYPE_Q4_K, RF_TYPE_Q8_0, RF_TYPE_Q6_K, RF_TYPE_MXFP4, RF_TYPE_F16};
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++)
        for (int g = 0; g < 3; g++)
            invariant_case(&r, ts[ti], 9, 64, 4, 512, 256, (rf_glu_kind)g, sub9, 4);
    /* batch-invariant mode: MXFP4's 300 tokens take the tiled GEMV and the unfused ops, a few
     * tokens the fused kernels: the same bits */
    assert_int_equal(g_be->ops->set_batch_invariant(g_be, true), RF_OK);
    const int64_t sub300[][2] = {{0, 1}, {7, 2}, {299, 1}};
    for (int g = 0; g < 3; g++) invariant_case(&r, RF_TYPE_MXFP4, 300, 32, 4, 512, 96, (rf_glu_kind)g, sub300, 3);
    assert_int_equal(g_be->ops->set_batch_invariant(g_be, false), RF_OK);
}

/* ---- capture ------------------------------------------------------------------------------- */

static rf_status fused_block(ffn *f, rf_tensor *y, rf_tensor *u, rf_tensor *z, rf_tensor *o) {
    rf_status st = rf_moe_gate_up(g_be, y, u, &f->dwg, &f->dwu, f->ff, &f->dx, &f->dids, NULL, NULL, f->n, f->k,
                                  RF_GLU_SWIGLU);
    return st ? st : rf_moe_down_sum(g_be, o, z, &f->dwd, f->dim, y, &f->dids, NULL, &f->dwts, f->n, f->k);
}

static void test_fused_capture(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 43);
    ffn f;
    const int64_t n = 2, k = 8, ne = 64, dim = 1024, ff = 512, nk = n * k;
    ffn_make(&r, &f, RF_TYPE_Q4_K, ne, k, n, dim, ff, false);
    rf_tensor y = dt(RF_TYPE_F32, ff, nk, dev_poison(nk * ff * 4)), u = dt(RF_TYPE_F32, ff, nk, dev_poison(nk * ff * 4)),
              z = dt(RF_TYPE_F32, dim, nk, dev_poison(nk * dim * 4)), o = dt(RF_TYPE_F32, dim, n, dev_poison(n * dim * 4));
    assert_int_equal(fused_block(&f, &y, &u, &z, &o), RF_OK); /* eager first: the scratch arena grows */
    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
    void *exec = NULL;
    assert_int_equal(rf_gpu_capture_begin(g_ctx), RF_OK);
    rf_status st = fused_block(&f, &y, &u, &z, &o);
    assert_int_equal(rf_gpu_capture_end(g_ctx, &exec), RF_OK);
    assert_int_equal(st, RF_OK);
    int32_t *ids2 = malloc(nk * 4);
    rand_ids(&r, ids2, n, k, ne);
    assert_int_equal(rf_gpu_upload(g_ctx, f.dids.data, ids2, nk * 4), RF_OK);
    float *og = host_f32(n * dim), *oe = host_f32(n * dim);
    assert_int_equal(rf_gpu_memset(g_ctx, o.data, 0xFF, n * dim * 4), RF_OK);
    assert_int_equal(rf_gpu_graph_launch(g_ctx, exec), RF_OK);
    dev_to(og, o.data, n * dim * 4);
    assert_int_equal(rf_gpu_memset(g_ctx, o.data, 0xFF, n * dim * 4), RF_OK);
    assert_int_equal(fused_block(&f, &y, &u, &z, &o), RF_OK);
    dev_to(oe, o.data, n * dim * 4);
    for (int64_t i = 0; i < n * dim; i++) assert_false(isnan(oe[i]));
    const bool same = memcmp(og, oe, n * dim * 4) == 0;
    fprintf(stderr, "  fused capture: replay with new ids %s eager\n", same ? "bit-identical to" : "DIFFERS from");
    assert_true(same);
    rf_gpu_graph_destroy(exec);
    rf_gpu_free(g_ctx, y.data), rf_gpu_free(g_ctx, u.data), rf_gpu_free(g_ctx, z.data), rf_gpu_free(g_ctx, o.data);
    free(ids2), free(og), free(oe);
    ffn_free(&f);
}

int main(void) {
    if (moe_backend_open("test_gpu_moe_fused")) return 1;
    /* every fusion, whatever RF_GPU_MOE_FUSE's default (1: gate+up only), unless the caller set it */
    if (!rf_knob_is_set(RF_KNOB_GPU_MOE_FUSE) && rf_knob_override(RF_KNOB_GPU_MOE_FUSE, "3")) return 1;
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_fused_ref),
        cmocka_unit_test(test_fused_more),
        cmocka_unit_test(test_fused_ffn),
        cmocka_unit_test(test_fused_invariant),
        cmocka_unit_test(test_fused_capture),
    };
    const int rc = cmocka_run_group_tests(all, NULL, NULL);
    g_be->ops->destroy(g_be);
    return rc;
}
#endif
