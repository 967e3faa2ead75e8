/* test_gpu_deltanet.c — the gated DeltaNet mixer (qwen35) on the GPU:
 *  - the ops ssm_conv and gated_delta of the GPU backend against the scalar references
 *    (rf_ref_conv1d_batch, rf_ref_gated_delta_batch) over random shapes (value heads 1..8 of
 *    48/64/128, key heads dividing them, conv 2 and 4), several sequences per step in
 *    permuted state slots holding garbage, chunks of 1..100 tokens over three steps (state
 *    carried in the slots), a padding token (pos -1, a stale slot: graph buckets) that must
 *    leave every slot alone; sigmoid_mul and head_split against theirs;
 *  - invariance: the same sequences in one step, each alone, and each cut into random chunks
 *    give the same bits (outputs and states);
 *  - tiny-qwen35, tiny-qwen35moe, tiny-qwen3next and tiny-gemma4moe (f32, q8_0, q4_k_m) GPU vs CPU logits over
 *    prompts of 1/7/33/100 tokens;
 *  - the engine on the GPU in deterministic mode: 8 sequences together (staggered, chunked
 *    prompts) == each alone, bit for bit; decode steps replayed from graphs == eager; n = 3
 *    choices forked from a state copied on the device == recomputed; the prefix cache's state
 *    checkpoints (saved and restored by device-to-device slot copies): requests sharing a
 *    1990-token prefix compute only their new tokens and equal the cache-off engine.
 * Error model of the op comparisons (u = 2^-24):
 *  conv: each output a sum of K f32 products then SiLU: |dy| <= K u sum|w x| + silu's few ulps,
 *    rel. L2 ~ 1e-7 against the double reference: bound 1e-5 (backend.h's contract). The new
 *    window is a copy of inputs: equal bit for bit.
 *  delta rule: per token each dot product (norms, M k, M q; S terms, a lane's strided partial
 *    sums then the warp's butterfly) errs by ~u sqrt(S) relative (random rounding), a handful
 *    of such roundings per token (c = 8 with the decay, the rank-1 update and the output). The
 *    state carries earlier errors with gain <= 1 (M (I - beta k k^T) with |k| = 1, 0 < beta < 1,
 *    times decay <= 1), so they add as a random walk over the T tokens the sequence has seen:
 *    rel. L2 <= 8 u sqrt(S T) (7.7e-5 at S 128, T 200), not below the CPU twin's 1e-5.
 * Skips (77) without a GPU. */
#include "core/knobs.h"
#include "core/test_hooks.h"
#include "gpu_model_common.h"

#include "backend/backend.h"
#include "backend/ref/ref_deltanet.h"

static rf_backend *g_be;

static int setup(void **state) {
    (void)state;
    gpu_test_init_or_skip("test_gpu_deltanet");
    gpu_model_dirs();
    if (rf_backend_gpu_new(0, &g_be)) fail_msg("GPU backend: %s", rf_last_error());
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (g_be) g_be->ops->destroy(g_be);
    return 0;
}

static double delta_tol(int64_t S, int64_t T) {
    const double t = 8 * 5.9604645e-8 * sqrt((double)S * (double)(T > 0 ? T : 1));
    return t > 1e-5 ? t : 1e-5;
}

/* ---- one mixer core on the GPU and in the reference ----------------------------------------- */

enum { MAXT = 400, XPAD = 5 };

typedef struct dn {
    int64_t HK, HV, S, K, C, n_slots;
    float *w, *dt, *A;            /* host weights */
    float *hconv, *hssm;          /* host (reference) slots */
    rf_tensor tw, tdt, tA, conv, ssm, x, y, a, b, out; /* device */
} dn;

static void up(rf_tensor *t, const void *host, size_t bytes) {
    assert_int_equal(rf_gpu_upload(rf_backend_gpu_ctx(g_be), t->data, host, bytes), RF_OK);
}
static void down(void *host, const rf_tensor *t, size_t bytes) {
    assert_int_equal(rf_backend_gpu_sync(g_be), RF_OK);
    assert_int_equal(rf_gpu_download(rf_backend_gpu_ctx(g_be), host, t->data, bytes), RF_OK);
}

static void fill(rf_rng *r, float *p, size_t n, float s) {
    for (size_t i = 0; i < n; i++) p[i] = s * rf_rng_normal(r);
}

static void dn_new(dn *d, rf_rng *r, int64_t HK, int64_t HV, int64_t S, int64_t K, int64_t n_slots) {
    memset(d, 0, sizeof *d);
    d->HK = HK, d->HV = HV, d->S = S, d->K = K, d->C = 2 * HK * S + HV * S, d->n_slots = n_slots;
    const int64_t C = d->C, W = K - 1;
    const rf_backend_ops *op = g_be->ops;
    d->w = host_f32((size_t)(C * K));
    d->dt = host_f32((size_t)HV);
    d->A = host_f32((size_t)HV);
    fill(r, d->w, (size_t)(C * K), 0.5f);
    fill(r, d->dt, (size_t)HV, 1.0f);
    for (int64_t h = 0; h < HV; h++) d->A[h] = -(0.2f + 2.0f * rf_rng_uniform(r)); /* -exp(A_log) */
    d->hconv = host_f32((size_t)(n_slots * (W > 0 ? W : 1) * C));
    d->hssm = host_f32((size_t)(n_slots * HV * S * S));
    fill(r, d->hconv, (size_t)(n_slots * W * C), 3.0f); /* garbage a fresh sequence must not read */
    fill(r, d->hssm, (size_t)(n_slots * HV * S * S), 3.0f);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, K, C, &d->tw), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, HV, 1, &d->tdt), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, HV, 1, &d->tA), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, W * C, n_slots, &d->conv), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, HV * S * S, n_slots, &d->ssm), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, C + XPAD, MAXT, &d->x), RF_OK); /* a strided x */
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, C, MAXT, &d->y), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, HV, MAXT, &d->a), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, HV, MAXT, &d->b), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, HV * S, MAXT, &d->out), RF_OK);
    up(&d->tw, d->w, (size_t)(C * K) * 4);
    up(&d->tdt, d->dt, (size_t)HV * 4);
    up(&d->tA, d->A, (size_t)HV * 4);
    if (W > 0) up(&d->conv, d->hconv, (size_t)(n_slots * W * C) * 4);
    up(&d->ssm, d->hssm, (size_t)(n_slots * HV * S * S) * 4);
}

static void dn_free(dn *d) {
    rf_tensor *ts[] = {&d->tw, &d->tdt, &d->tA, &d->conv, &d->ssm, &d->x, &d->y, &d->a, &d->b, &d->out};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) g_be->ops->free(g_be, ts[i]);
    free(d->w), free(d->dt), free(d->A), free(d->hconv), free(d->hssm);
}

/* A step's inputs: n tokens (x packed [n, C], a, b [n, HV]) and metadata (n_seqs entries of
 * sslot). */
typedef struct stepin {
    int32_t n, n_seqs;
    int32_t pos[MAXT], seq[MAXT], sslot[MAXT], zero[MAXT];
    float *x, *a, *b;
} stepin;

/* The GPU's conv output y and core output o ([n, C], [n, HV S]) for the step. */
static void gpu_step(dn *d, const stepin *s, float *y, float *o) {
    const int64_t C = d->C, ld = C + XPAD;
    float *xs = host_f32((size_t)(s->n * ld));
    for (int32_t t = 0; t < s->n; t++) memcpy(xs + t * ld, s->x + t * C, (size_t)C * 4);
    up(&d->x, xs, (size_t)(s->n * ld) * 4);
    up(&d->a, s->a, (size_t)(s->n * d->HV) * 4);
    up(&d->b, s->b, (size_t)(s->n * d->HV) * 4);
    free(xs);
    rf_batch b = {.n_tokens = s->n, .ids = s->zero, .pos = s->pos, .seq = s->seq, .slot = s->zero,
                  .n_seqs = s->n_seqs, .max_blocks = 0, .block_size = 16, .state_slot = s->sslot};
    const rf_backend_ops *op = g_be->ops;
    assert_int_equal(op->batch_upload(g_be, &b), RF_OK);
    if (op->ssm_conv(g_be, &d->y, &d->x, &d->tw, &d->conv, &b, C, d->K)) fail_msg("ssm_conv: %s", rf_last_error());
    if (op->gated_delta(g_be, &d->out, &d->y, &d->a, &d->b, &d->tdt, &d->tA, &d->ssm, &b, d->HK, d->HV, d->S, 1e-6f))
        fail_msg("gated_delta: %s", rf_last_error());
    down(y, &d->y, (size_t)(s->n * C) * 4);
    down(o, &d->out, (size_t)(s->n * d->HV * d->S) * 4);
}

/* A step of sequences lens[i] long at positions from at[i] in slots slots[i]; with pad, a padding
 * token at the end whose stale slot is sequence 0's. Random inputs. */
static void make_step(stepin *s, rf_rng *r, const dn *d, int ns, const int *lens, const int *at, const int32_t *slots,
                      bool pad) {
    memset(s->zero, 0, sizeof s->zero);
    int32_t n = 0;
    for (int i = 0; i < ns; i++) {
        for (int k = 0; k < lens[i]; k++, n++) s->pos[n] = at[i] + k, s->seq[n] = i;
        s->sslot[i] = slots[i];
    }
    s->n_seqs = ns;
    if (pad) {
        s->pos[n] = -1, s->seq[n] = ns, s->sslot[ns] = slots[0];
        s->n_seqs = ns + 1;
        n++;
    }
    assert_true(n <= MAXT);
    s->n = n;
    const int64_t KS = d->HK * d->S;
    s->x = host_f32((size_t)(n * d->C));
    s->a = host_f32((size_t)(n * d->HV));
    s->b = host_f32((size_t)(n * d->HV));
    fill(r, s->x, (size_t)(n * d->C), 1.0f);
    for (int32_t t = 0; t < n; t++) /* q, k of unequal sizes: the L2 norm matters */
        for (int64_t i = 0; i < 2 * KS; i++) s->x[t * d->C + i] *= 0.3f + (float)((t + i / d->S) % 5);
    fill(r, s->a, (size_t)(n * d->HV), 1.5f);
    fill(r, s->b, (size_t)(n * d->HV), 1.5f);
}

static void free_step(stepin *s) { free(s->x), free(s->a), free(s->b); }

/* The reference of the step's real tokens (the first n_real) on the host slots: the conv, and
 * the delta rule fed the GPU's conv output (so the two rules see the same inputs). */
static void ref_step(dn *d, const stepin *s, int32_t n_real, const float *y_gpu, float *y, float *o) {
    rf_ref_conv1d_batch(y, s->x, d->C, d->w, d->hconv, n_real, s->pos, s->seq, s->sslot, d->C, d->K, true);
    assert_int_equal(rf_ref_gated_delta_batch(o, y_gpu, d->C, s->a, s->b, d->dt, d->A, d->hssm, n_real, s->pos, s->seq,
                                              s->sslot, d->HK, d->HV, d->S, 1e-6f),
                     RF_OK);
}

static void check_states(dn *d, double tol, const char *what) {
    const int64_t W = d->K - 1, nc = d->n_slots * W * d->C, nm = d->n_slots * d->HV * d->S * d->S;
    float *gc = host_f32((size_t)(nc ? nc : 1)), *gm = host_f32((size_t)nm);
    if (nc) {
        down(gc, &d->conv, (size_t)nc * 4);
        if (memcmp(gc, d->hconv, (size_t)nc * 4)) fail_msg("%s: the conv windows differ from the reference's", what);
    }
    down(gm, &d->ssm, (size_t)nm * 4);
    char label[160];
    snprintf(label, sizeof label, "%s: delta-rule states", what);
    check_rel(label, gm, d->hssm, (size_t)nm, tol);
    free(gc), free(gm);
}

/* Three steps of ns sequences in shuffled slots (of ns + 2), chunk lengths drawn from lens. */
static void ops_case(rf_rng *r, int64_t HK, int64_t HV, int64_t S, int64_t K, int ns, const int *lens, int nl) {
    dn d;
    dn_new(&d, r, HK, HV, S, K, ns + 2);
    int32_t slots[16];
    for (int i = 0; i < ns + 2; i++) slots[i] = i;
    for (int i = ns + 1; i > 0; i--) {
        int j = (int)(rf_rng_u64(r) % (uint64_t)(i + 1));
        int32_t t = slots[i];
        slots[i] = slots[j], slots[j] = t;
    }
    int at[16] = {0}, len[16];
    int64_t seen = 0;
    char what[160];
    for (int step = 0; step < 3; step++) {
        int64_t longest = 0;
        for (int i = 0; i < ns; i++) {
            len[i] = lens[rf_rng_u64(r) % (uint64_t)nl];
            if (at[i] + len[i] > longest) longest = at[i] + len[i];
        }
        seen = longest;
        stepin s;
        make_step(&s, r, &d, ns, len, at, slots, step != 1);
        const int32_t n_real = s.n - (step != 1);
        float *yg = host_f32((size_t)(s.n * d.C)), *og = host_f32((size_t)(s.n * HV * S));
        float *yr = host_f32((size_t)(s.n * d.C)), *orf = host_f32((size_t)(s.n * HV * S));
        gpu_step(&d, &s, yg, og);
        ref_step(&d, &s, n_real, yg, yr, orf);
        snprintf(what, sizeof what, "HK %lld HV %lld S %lld K %lld, %d seqs, step %d (%d tokens)", (long long)HK,
                 (long long)HV, (long long)S, (long long)K, ns, step, n_real);
        char l1[200], l2[200];
        snprintf(l1, sizeof l1, "%s conv", what);
        snprintf(l2, sizeof l2, "%s delta", what);
        check_rel(l1, yg, yr, (size_t)(n_real * d.C), 1e-5);
        check_rel(l2, og, orf, (size_t)(n_real * HV * S), delta_tol(S, seen));
        if (s.n > n_real) /* the padding token's rows: zeros */
            for (int64_t i = 0; i < HV * S; i++)
                if (og[n_real * HV * S + i] != 0.0f) fail_msg("%s: padding output %lld is %g", what, (long long)i,
                                                              og[n_real * HV * S + i]);
        check_states(&d, delta_tol(S, seen), what);
        for (int i = 0; i < ns; i++) at[i] += len[i];
        free(yg), free(og), free(yr), free(orf);
        free_step(&s);
    }
    dn_free(&d);
}

static void test_ops_vs_ref(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    const int decode[] = {1}, mixed[] = {1, 2, 7, 33}, longs[] = {1, 17, 64, 100};
    const struct { int64_t HK, HV, S, K; } shapes[] = {
        {2, 4, 64, 4}, {1, 2, 128, 4}, {4, 8, 64, 4}, {2, 2, 128, 2}, {1, 3, 48, 4}, {2, 4, 128, 4},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        ops_case(&r, shapes[i].HK, shapes[i].HV, shapes[i].S, shapes[i].K, 1, longs, 4);
        ops_case(&r, shapes[i].HK, shapes[i].HV, shapes[i].S, shapes[i].K, 8, decode, 1);
        ops_case(&r, shapes[i].HK, shapes[i].HV, shapes[i].S, shapes[i].K, 5, mixed, 4);
    }
    ops_case(&r, 2, 4, 64, 4, 3, longs, 4);
}

/* ---- invariance: together, alone, chunked ----------------------------------------------------- */

/* Runs the sequences' full inputs (sequence i's tokens at rows off[i]..) as steps: mode 0 all
 * in one step, 1 each alone, 2 each cut into random chunks; outputs o [total,
 * HV S] in full-input row order. Mode 2 takes every unfinished sequence each step. */
static void run_mode(dn *d, rf_rng *r, int mode, int ns, const int *lens, const int *off, const float *x,
                     const float *a, const float *b, float *o) {
    const int64_t C = d->C, HV = d->HV, OD = HV * d->S;
    int done[8] = {0};
    for (;;) {
        stepin s;
        memset(&s, 0, sizeof s);
        int32_t n = 0, k = 0, rows[MAXT];
        for (int i = 0; i < ns; i++) {
            if (done[i] == lens[i]) continue;
            int take = lens[i] - done[i];
            if (mode == 2) take = 1 + (int)(rf_rng_u64(r) % (uint64_t)take);
            for (int j = 0; j < take; j++, n++) {
                s.pos[n] = done[i] + j, s.seq[n] = k, rows[n] = off[i] + done[i] + j;
            }
            s.sslot[k++] = i;
            done[i] += take;
            if (mode == 1) break;
        }
        if (n == 0) break;
        s.n = n, s.n_seqs = k;
        s.x = host_f32((size_t)(n * C));
        s.a = host_f32((size_t)(n * HV));
        s.b = host_f32((size_t)(n * HV));
        for (int32_t t = 0; t < n; t++) {
            memcpy(s.x + t * C, x + rows[t] * C, (size_t)C * 4);
            memcpy(s.a + t * HV, a + rows[t] * HV, (size_t)HV * 4);
            memcpy(s.b + t * HV, b + rows[t] * HV, (size_t)HV * 4);
        }
        float *y = host_f32((size_t)(n * C)), *os = host_f32((size_t)(n * OD));
        gpu_step(d, &s, y, os);
        for (int32_t t = 0; t < n; t++) memcpy(o + rows[t] * OD, os + t * OD, (size_t)OD * 4);
        free(y), free(os);
        free_step(&s);
    }
}

static void test_invariance(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 1);
    const int64_t shapes[][3] = {{2, 4, 64}, {2, 4, 128}};
    for (int sh = 0; sh < 2; sh++) {
        enum { NS = 6 };
        int lens[NS], off[NS], tot = 0;
        for (int i = 0; i < NS; i++) lens[i] = 1 + (int)(rf_rng_u64(&r) % 60), off[i] = tot, tot += lens[i];
        dn d;
        dn_new(&d, &r, shapes[sh][0], shapes[sh][1], shapes[sh][2], 4, NS);
        const int64_t C = d.C, HV = d.HV, OD = HV * d.S, nm = NS * HV * d.S * d.S, nc = NS * 3 * C;
        float *x = host_f32((size_t)(tot * C)), *a = host_f32((size_t)(tot * HV)), *b = host_f32((size_t)(tot * HV));
        fill(&r, x, (size_t)(tot * C), 1.0f);
        fill(&r, a, (size_t)(tot * HV), 1.5f);
        fill(&r, b, (size_t)(tot * HV), 1.5f);
        float *o[3], *ms[3], *cs[3];
        for (int mode = 0; mode < 3; mode++) {
            o[mode] = host_f32((size_t)(tot * OD));
            ms[mode] = host_f32((size_t)nm);
            cs[mode] = host_f32((size_t)nc);
            run_mode(&d, &r, mode, NS, lens, off, x, a, b, o[mode]);
            down(ms[mode], &d.ssm, (size_t)nm * 4);
            down(cs[mode], &d.conv, (size_t)nc * 4);
        }
        const char *names[] = {"together", "alone", "in random chunks"};
        for (int mode = 1; mode < 3; mode++) {
            if (memcmp(o[0], o[mode], (size_t)(tot * OD) * 4)) fail_msg("S %lld: outputs %s differ from together",
                                                                        (long long)d.S, names[mode]);
            if (memcmp(ms[0], ms[mode], (size_t)nm * 4) || memcmp(cs[0], cs[mode], (size_t)nc * 4))
                fail_msg("S %lld: states %s differ from together", (long long)d.S, names[mode]);
        }
        printf("  S %lld: %d sequences (%d tokens) together, alone and in random chunks: the same bits\n",
               (long long)d.S, NS, tot);
        for (int mode = 0; mode < 3; mode++) free(o[mode]), free(ms[mode]), free(cs[mode]);
        free(x), free(a), free(b);
        dn_free(&d);
    }
}

static void test_elementwise(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 2);
    const int64_t rows = 37, n = 64, N = rows * 2 * n;
    float *x = host_f32((size_t)N), *g = host_f32((size_t)N), *y = host_f32((size_t)N), *w = host_f32((size_t)N);
    fill(&r, x, (size_t)N, 2.0f);
    fill(&r, g, (size_t)N, 3.0f);
    rf_tensor tx, tg, t0, t1;
    const rf_backend_ops *op = g_be->ops;
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, 2 * n, rows, &tx), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, 2 * n, rows, &tg), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, n, rows, &t0), RF_OK);
    assert_int_equal(op->alloc(g_be, RF_TYPE_F32, n, rows, &t1), RF_OK);
    up(&tx, x, (size_t)N * 4);
    up(&tg, g, (size_t)N * 4);
    assert_int_equal(op->head_split(g_be, &t0, &t1, &tx, rows, n), RF_OK);
    down(y, &t0, (size_t)(rows * n) * 4);
    down(y + rows * n, &t1, (size_t)(rows * n) * 4);
    for (int64_t q = 0; q < rows; q++)
        if (memcmp(y + q * n, x + q * 2 * n, (size_t)n * 4) || memcmp(y + rows * n + q * n, x + q * 2 * n + n, (size_t)n * 4))
            fail_msg("head_split: row %lld differs", (long long)q);
    assert_int_equal(op->sigmoid_mul(g_be, &tx, &tx, &tg, N), RF_OK); /* in place */
    down(y, &tx, (size_t)N * 4);
    rf_ref_sigmoid_mul(w, x, g, N);
    check_rel("sigmoid_mul (in place)", y, w, (size_t)N, 1e-6); /* one expf (2 ulp) and two roundings */
    op->free(g_be, &tx), op->free(g_be, &tg), op->free(g_be, &t0), op->free(g_be, &t1);
    free(x), free(g), free(y), free(w);
}

/* ---- tiny-qwen35 GPU vs CPU ------------------------------------------------------------------ */

/* The bounds of test_gpu_forward.c (its header states the model): f32 weights 1e-2 against the
 * CPU (f16 operands in the many-token products); quantized weights: the GPU no further from f32
 * activations than TOL_RATIO times the CPU twin that rounds activations as the GPU does, plus the
 * unrounded paths' 1e-2, prompt by prompt (GPU vs twin itself is not bounded tighter: one int8
 * rounding flip cascades, test_gpu_forward's model 2; measured here 1.36e-2 at 33 tokens of q8_0
 * on an H200). The DeltaNet ops add ~1e-5 (above) and the recurrence does not amplify (gain <= 1).
 * What rounding activations to int8 costs this model (twin vs f32), measured on the CPU for
 * tiny-qwen35 q8_0, 2026-11-28: the errors of the 32 products' roundings add in quadrature
 * (each product rounded alone, 40 prompts of 7 tokens: sqrt of the sum of their squared means
 * 3.94e-2, all rounded 3.95e-2); the largest term is layer 0's DeltaNet output product (2.7e-2:
 * its input, the gated norm times silu(z), has the widest blocks), then layer 0's FFN (1-1.6e-2).
 * Means over 100 prompts: 4.7e-2 / 4.0e-2 / 3.7e-2 / 3.8e-2 at 1 / 7 / 33 / 100 tokens, twice
 * tiny llama's 1.5e-2; single prompts reach 1.7e-1 at one token (a heavy tail: with an empty
 * state a head's output is the sign of q.k times v after the gated norm). So the accuracy bound
 * TOL_ACC holds for the mean over the case's N_PER x 4 prompts (spread of that mean ~5e-3), not
 * for each prompt; the per-prompt statement is the ratio to the twin. An argmax may differ only
 * at a top-2 margin below 6 sqrt(2) e rms(logits), e that prompt's allowed distance. */
#define TOL_ACC 1e-1
/* With experts (tiny-qwen35moe, tiny-qwen3next q8_0) int8 activations also flip router choices
 * (a near tie of two experts' logits: test_gpu_tp's router model), each flip a discrete jump of
 * the logits: the CPU twin vs f32 activations, 100 prompts per length, 2026-11-29: mean
 * 0.098-0.118, standard deviation 0.10-0.18 per prompt, single prompts up to 1.35. The mean of
 * the case's 16 prompts then spreads by <= 0.18 / 4 = 0.046; TOL_ACC_MOE = 0.12 + 3 x 0.046 = 0.26
 * bounds it. A flip between the GPU and the twin themselves puts one far from f32 and the other
 * near on that prompt (measured: tiny-qwen3next q4_k_m, GPU 0.56 against an allowed 2 x twin +
 * 1e-2 = 0.1), so with experts the ratio to the twin is stated for the means (GPU mean <= 2 x twin
 * mean + 1e-2) and a single prompt is bounded only at 10 TOL_ACC_MOE (garbage, not rounding). */
#define TOL_ACC_MOE 2.6e-1
/* f32 weights with experts: the GPU's many-token products take f16 operands (rel. ~1e-3 against
 * the CPU, the dense cases' 1.5e-3), which flips a router choice whose k-th and (k+1)-th logits
 * sit within a few 1e-3 RMS (test_gpu_tp's model with 1.5e-3 for TOL_Q8: 8 x 1.5e-3 = 1.2e-2).
 * On the H200 5 of 20 runs of tiny-qwen35moe / tiny-qwen3next f32 parted 1.4-4e-2 from the CPU.
 * Such a prompt is exempt from the 1e-2 bound only when the CPU path met a router gap below this. */
#define ROUTER_TIE_F32 1.2e-2f
#define TOL_RATIO 2.0
/* The gated norm of a DeltaNet head divides its output o = M q by |o|: a relative perturbation e
 * of q, k or the state moves the normed output by ~e / cond, cond = |o| / (|M|_F |q|) (test hook
 * dn_cond_min; with an empty state, a 1-token prompt, cond = |cos(q, k)| and the output is
 * sign(q.k) v / rms(v): a sign turn flips the head whole). Between the GPU and its twin, which
 * differ in float order and the int8 roundings that order flips, a layer's input differs by up to
 * the unrounded paths' own agreement, 1e-2 (above); a prompt whose twin met cond below that may
 * see a head turn on one path and not the other, so its per-prompt ratio is replaced by the
 * garbage bound and the ratio is stated for the means (GPU mean <= 2 x twin mean + 1e-2), as for
 * router near ties. Expected share: 2 key heads x 3 DeltaNet layers of head size 64 (cos ~
 * N(0, 1/64)) put ~1/3 of 1-token prompts and few longer ones below it. */
#define DN_TURN 1e-2f
#define N_PER 4 /* prompts per length with quantized weights */

static bool gpu_rounds(rf_type wtype, int64_t n_tokens, int64_t n_in) {
    return rf_gpu_matmul_rounds_x(g_ctx, wtype, n_tokens, n_in);
}

static void set_cpu_act(int mode, float *dn_cond) {
    if (mode == RF_CPU_ACT_GGML) rf_test_hooks_set(NULL);
    else rf_test_hooks_set(&(rf_test_hooks){.cpu_act = mode, .cpu_act_rounds = gpu_rounds, .dn_cond_min = dn_cond});
}

static double check_logits(const float *want, const float *got, int32_t nv, double tol, const char *what,
                           const char *label, int len) {
    float margin = INFINITY;
    bool same = false;
    double rms = 0;
    const double e = compare_rms(want, got, nv, &margin, &same, &rms);
    if (!(e < tol)) fail_msg("%s prompt of %d, %s: rel. L2 %.3e >= %.0e", label, len, what, e, tol);
    double m = 0, s = 0;
    for (int32_t i = 0; i < nv; i++) m += want[i];
    m /= nv;
    for (int32_t i = 0; i < nv; i++) s += (want[i] - m) * (want[i] - m);
    const double tie = 6 * sqrt(2.0) * tol * sqrt(s / nv);
    if (!same && margin >= tie)
        fail_msg("%s prompt of %d, %s: argmax differs at a top-2 margin %.3f >= near-tie bound %.3f", label, len, what,
                 margin, tie);
    return e;
}

static void logits_case(const char *path, const char *label, bool twin) {
    double tol_acc = TOL_ACC;
    rf_model *mc = load(path, RF_DEVICE_CPU), *mg = load(path, RF_DEVICE_GPU);
    const bool moe = mc->hp.n_expert > 0;
    assert_true(rf_model_n_recurrent(mg) > 0 || moe); /* hybrids, or gemma4's experts (test_logits_tiny_gemma4moe) */
    if (moe) tol_acc = TOL_ACC_MOE;
    const int32_t nv = mc->hp.n_vocab;
    rf_session *sc = session(mc, 256), *sg = session(mg, 256), *sr = twin ? session(mc, 256) : NULL;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    const int lens[] = {1, 7, 33, 100};
    double worst = 0, worst_a = 0, worst_b = 0, sum_a = 0, sum_b = 0;
    int n_acc = 0;
    int32_t ids[128];
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++)
        for (int rep = 0; rep < (twin ? N_PER : 1); rep++) {
            random_prompt(&r, ids, lens[k], nv);
            rf_session_truncate(sc, 0);
            rf_session_truncate(sg, 0);
            float cond = INFINITY; /* the twin's smallest gated-norm conditioning (test hook) */
            if (twin) set_cpu_act(RF_CPU_ACT_GPU, &cond);
            float gap = INFINITY; /* f32 with experts: the CPU path's smallest router gap (test hook) */
            if (!twin && moe) rf_test_hooks_set(&(rf_test_hooks){.moe_gap_min = &gap});
            rf_status st = rf_session_eval(sc, ids, lens[k], false);
            if (!st && twin) {
                rf_session_truncate(sr, 0);
                set_cpu_act(RF_CPU_ACT_F32, NULL);
                st = rf_session_eval(sr, ids, lens[k], false);
            }
            set_cpu_act(RF_CPU_ACT_GGML, NULL);
            if (st) fail_msg("cpu eval: %s", rf_last_error());
            if (rf_session_eval(sg, ids, lens[k], false)) fail_msg("gpu eval: %s", rf_last_error());
            const float *lc = rf_session_logits(sc, lens[k] - 1), *lg = rf_session_logits(sg, lens[k] - 1);
            if (!twin) {
                float mg;
                bool sm;
                const double e0 = compare_rms(lc, lg, nv, &mg, &sm, NULL);
                if (moe && e0 >= 1e-2 && gap < ROUTER_TIE_F32) { /* a router flip: reported, not bounded */
                    printf("  %s prompt of %d: GPU vs CPU %.3e after a router gap of %.3g RMS (< %.3g): a flip\n", label,
                           lens[k], e0, gap, ROUTER_TIE_F32);
                    if (e0 > worst) worst = e0;
                    continue;
                }
                const double e = check_logits(lc, lg, nv, 1e-2, "GPU vs CPU", label, lens[k]);
                if (e > worst) worst = e;
                continue;
            }
            float m;
            bool same;
            double rms;
            const double e = compare_rms(lc, lg, nv, &m, &same, &rms); /* reported, not bounded */
            if (e > worst) worst = e;
            const float *lr = rf_session_logits(sr, lens[k] - 1);
            const double b = compare_rms(lr, lc, nv, &m, &same, &rms); /* the scheme's own cost here */
            /* with experts a router flip between the GPU and the twin makes one of them far from f32
             * and the other near, prompt by prompt: there the ratio holds for the means (below) */
            const bool turn = cond < DN_TURN; /* a head's sign near a turn: the ratio holds for the means */
            const double allowed = moe || turn ? tol_acc * 10 : TOL_RATIO * b + 1e-2;
            const double a = check_logits(lr, lg, nv, allowed, "GPU vs f32 activations (TOL_RATIO x the twin)", label,
                                          lens[k]);
            if (turn && !moe && a > TOL_RATIO * b + 1e-2)
                printf("  %s prompt of %d: GPU %.3e from f32 against the twin's %.3e after a gated-norm conditioning of "
                       "%.3g (< %.3g): a head's sign turned\n", label, lens[k], a, b, cond, DN_TURN);
            sum_a += a, sum_b += b, n_acc++;
            worst_a = fmax(worst_a, a), worst_b = fmax(worst_b, b);
        }
    printf("  %-24s GPU vs CPU%s max rel. L2 %.2e (%s)", label, twin ? " twin" : "", worst, twin ? "not bounded" : "tol 1e-2");
    if (twin)
        printf("; vs f32 activations: GPU mean %.2e max %.2e, twin mean %.2e max %.2e over %d prompts (mean tol %.0e)",
               sum_a / n_acc, worst_a, sum_b / n_acc, worst_b, n_acc, tol_acc);
    printf("\n");
    if (twin) {
        if (!(sum_a / n_acc < tol_acc)) fail_msg("%s: GPU vs f32 activations, mean rel. L2 %.3e >= %.2g", label, sum_a / n_acc, tol_acc);
        if (!(sum_b / n_acc < tol_acc)) fail_msg("%s: CPU twin vs f32 activations, mean rel. L2 %.3e >= %.2g", label, sum_b / n_acc, tol_acc);
        if (!(sum_a <= TOL_RATIO * sum_b + 1e-2 * n_acc))
            fail_msg("%s: the GPU's mean distance from f32 activations %.3e is over %g x the twin's %.3e", label,
                     sum_a / n_acc, TOL_RATIO, sum_b / n_acc);
    }
    if (sr) rf_session_free(sr);
    rf_session_free(sc);
    rf_session_free(sg);
    rf_model_free(mc);
    rf_model_free(mg);
}

static void test_logits_tiny_qwen35(void **state) {
    (void)state;
    const char *types[] = {"f32", "q8_0", "q4_k_m"};
    char path[1200], label[96];
    for (size_t t = 0; t < 3; t++) {
        mkmodel("tiny-qwen35", types[t], path, sizeof path);
        snprintf(label, sizeof label, "tiny-qwen35 %s", types[t]);
        logits_case(path, label, t > 0);
    }
}

/* tiny-qwen35moe and tiny-qwen3next: the same hybrid layers with experts and a sigmoid-gated shared expert in every
 * layer, under the same rules and bounds (the experts' and the shared expert's products are more
 * products of the kind the bounds above model; the router's top-k may flip at a near tie like an
 * argmax, which the twin ratio absorbs prompt by prompt: the twin rounds as the GPU does). */
static void test_logits_tiny_qwen35moe(void **state) {
    (void)state;
    const char *types[] = {"f32", "q8_0", "q4_k_m"}, *presets[] = {"tiny-qwen35moe", "tiny-qwen3next"};
    char path[1200], label[96];
    for (size_t p = 0; p < 2; p++) /* tiny-qwen3next: its DeltaNet rows regrouped at load */
        for (size_t t = 0; t < 3; t++) {
            mkmodel(presets[p], types[t], path, sizeof path);
            snprintf(label, sizeof label, "%s %s", presets[p], types[t]);
            logits_case(path, label, t > 0);
        }
}

/* tiny-gemma4moe (gemma4's layers with 8 experts of 128, top 2, beside the dense GeGLU; no
 * recurrent state) under the same rules and bounds as the hybrids with experts: the router's
 * top-k may flip at a near tie, which these cases already absorb. Its own bounds are not yet
 * measured on the device (added 2026-11-29 beside the CPU goldens). */
static void test_logits_tiny_gemma4moe(void **state) {
    (void)state;
    const char *types[] = {"f32", "q8_0", "q4_k_m"};
    char path[1200], label[96];
    for (size_t t = 0; t < 3; t++) {
        mkmodel("tiny-gemma4moe", types[t], path, sizeof path);
        snprintf(label, sizeof label, "tiny-gemma4moe %s", types[t]);
        logits_case(path, label, t > 0);
    }
}

/* ---- the engine on the GPU ------------------------------------------------------------------- */

enum { NP = 8, GT = 24 };

typedef struct run_out {
    uint64_t id[NP];
    gen_out o[NP];
    uint64_t lhash[NP][GT];
} run_out;

static int32_t g_nv; /* the engine tests' vocabulary */

static void on_logits(void *user, const rf_seq *s, const float *lg) {
    run_out *ro = user;
    uint64_t z = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)lg;
    for (size_t k = 0; k < (size_t)g_nv * sizeof(float); k++) z = (z ^ p[k]) * 1099511628211ull;
    for (int i = 0; i < NP; i++)
        if (ro->id[i] == s->req->id && s->n_gen < GT) ro->lhash[i][s->n_gen] = z;
}

static rf_engine *engine(rf_model *m, int par, int batch, bool graphs) {
    rf_engine_config *c = rf_engine_config_new();
    rf_engine_config_set(c, RF_ENGINE_CTX, 256);
    rf_engine_config_set(c, RF_ENGINE_PARALLEL, par);
    rf_engine_config_set(c, RF_ENGINE_BATCH, batch);
    rf_engine *e = NULL;
    if (rf_engine_new(m, c, &e)) fail_msg("engine: %s", rf_last_error());
    rf_engine_config_free(c);
    if (!graphs) e->graphs = false;
    return e;
}

static void sub(rf_engine *e, const int32_t *ids, int n, gen_out *o, uint64_t *id, bool sample) {
    memset(o, 0, sizeof *o);
    rf_request *q = rf_request_new();
    rf_request_set_prompt_ids(q, ids, (size_t)n);
    rf_request_set(q, RF_REQ_MAX_TOKENS, GT);
    rf_request_set(q, RF_REQ_IGNORE_EOS, 1);
    if (sample) {
        rf_request_set(q, RF_REQ_TEMPERATURE, 0.9);
        rf_request_set(q, RF_REQ_SEED, 1234);
    }
    rf_request_set_callback(q, on_ev, o);
    if (rf_engine_submit(e, q, id)) fail_msg("submit: %s", rf_last_error());
    rf_request_free(q);
}

static void drain(rf_engine *e) {
    while (rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0) {
        if (rf_engine_step(e)) fail_msg("step: %s", rf_last_error());
        if (rf_engine_check(e)) fail_msg("check: %s", rf_last_error());
    }
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    assert_int_equal(rf_state_pool_n_free(e->spool), rf_state_pool_n_slots(e->spool));
}

static void same_runs(const run_out *a, const run_out *b, bool hashes, const char *what) {
    for (int i = 0; i < NP; i++) {
        if (a->o[i].n != GT || b->o[i].n != GT || memcmp(a->o[i].tok, b->o[i].tok, sizeof(int32_t) * GT))
            fail_msg("%s, sequence %d: tokens differ (%d and %d tokens)", what, i, a->o[i].n, b->o[i].n);
        for (int k = 0; hashes && k < GT; k++)
            if (a->lhash[i][k] != b->lhash[i][k]) fail_msg("%s, sequence %d token %d: logits differ", what, i, k);
    }
}

static void test_engine(void **state) {
    (void)state;
    char path[1200];
    mkmodel("tiny-qwen35", "q8_0", path, sizeof path);
    rf_model *m = load(path, RF_DEVICE_GPU);
    assert_int_equal(rf_model_set_deterministic(m, true), RF_OK);
    g_nv = m->hp.n_vocab;
    static int32_t prompts[NP][120];
    int lens[NP];
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 3);
    for (int i = 0; i < NP; i++) {
        lens[i] = 1 + (int)(rf_rng_u64(&r) % 110);
        random_prompt(&r, prompts[i], lens[i], m->hp.n_vocab);
    }
    static run_out alone, together, eager, graphed;
    /* alone: one sequence at a time, its prompt in one step */
    rf_engine *e = engine(m, 1, 512, false);
    e->logits_hook = on_logits;
    e->hook_user = &alone;
    for (int i = 0; i < NP; i++) {
        sub(e, prompts[i], lens[i], &alone.o[i], &alone.id[i], false);
        drain(e);
    }
    rf_engine_free(e);
    /* together: staggered arrivals, prompts cut into chunks by a budget of 24 tokens a step */
    e = engine(m, NP, 24, false);
    e->logits_hook = on_logits;
    e->hook_user = &together;
    for (int i = 0, steps = 0; i < NP || rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING);
         steps++) {
        if (i < NP && steps % 2 == 0) sub(e, prompts[i], lens[i], &together.o[i], &together.id[i], false), i++;
        if (rf_engine_step(e)) fail_msg("step: %s", rf_last_error());
        if (rf_engine_check(e)) fail_msg("check: %s", rf_last_error());
    }
    drain(e);
    rf_engine_free(e);
    same_runs(&alone, &together, true, "deterministic mode, together vs alone");
    printf("  tiny-qwen35 q8_0, deterministic: %d sequences together (staggered, chunked) == alone, %d tokens and "
           "logits bit for bit\n", NP, GT);
    /* decode steps from graphs vs eager: device sampling (no hook), greedy and sampled */
    for (int sample = 0; sample < 2; sample++) {
        int64_t up0, dn0, l0, up1, dn1, l1;
        e = engine(m, NP, 512, false);
        for (int i = 0; i < NP; i++) sub(e, prompts[i], lens[i], &eager.o[i], &eager.id[i], sample);
        drain(e);
        rf_engine_free(e);
        rf_backend_gpu_counters(m->be, &up0, &dn0, &l0);
        e = engine(m, NP, 512, true);
        for (int i = 0; i < NP; i++) sub(e, prompts[i], lens[i], &graphed.o[i], &graphed.id[i], sample);
        drain(e);
        rf_engine_free(e);
        /* the backend keys its recorded steps by the engine's address, which the next engine
         * may reuse: drop them with the engine */
        rf_backend_gpu_drop_graphs(m->be);
        rf_backend_gpu_counters(m->be, &up1, &dn1, &l1);
        printf("  tiny-qwen35 q8_0, %s: %lld graph launches; tokens from graphs vs eager\n", sample ? "sampled" : "greedy",
               (long long)(l1 - l0));
        if (l1 - l0 <= 0) fail_msg("no decode step ran as a graph");
        same_runs(&eager, &graphed, false, sample ? "sampled, graphs vs eager" : "greedy, graphs vs eager");
    }
    rf_model_free(m);
}

/* n = 3 choices: with slots to spare each fork copies the prompt's state on the device
 * (copy_rows); with one slot the forks recompute the prompt. Deterministic mode: the same tokens
 * for each choice (its own seeded generator) either way. */
typedef struct choice_out {
    int32_t n[3], tok[3][GT], done;
} choice_out;

static bool on_choice(const rf_event *ev, void *user) {
    choice_out *o = user;
    const int c = rf_event_choice(ev);
    if (rf_event_get_kind(ev) == RF_EVENT_TOKEN && c >= 0 && c < 3 && o->n[c] < GT) o->tok[c][o->n[c]++] = rf_event_token(ev);
    if (rf_event_get_kind(ev) == RF_EVENT_DONE) o->done++;
    return true;
}

static void run_choices(rf_model *m, int slots, const int32_t *ids, int n, choice_out *o) {
    memset(o, 0, sizeof *o);
    rf_engine *e = engine(m, slots, 512, true);
    rf_request *q = rf_request_new();
    rf_request_set_prompt_ids(q, ids, (size_t)n);
    rf_request_set(q, RF_REQ_MAX_TOKENS, GT);
    rf_request_set(q, RF_REQ_IGNORE_EOS, 1);
    rf_request_set(q, RF_REQ_N, 3);
    rf_request_set(q, RF_REQ_TEMPERATURE, 0.9);
    rf_request_set(q, RF_REQ_SEED, 41);
    rf_request_set_callback(q, on_choice, o);
    if (rf_engine_submit(e, q, NULL)) fail_msg("submit: %s", rf_last_error());
    rf_request_free(q);
    drain(e);
    rf_engine_free(e);
    rf_backend_gpu_drop_graphs(m->be); /* as in test_engine */
}

static void test_forks(void **state) {
    (void)state;
    char path[1200];
    mkmodel("tiny-qwen35", "q8_0", path, sizeof path);
    rf_model *m = load(path, RF_DEVICE_GPU);
    assert_int_equal(rf_model_set_deterministic(m, true), RF_OK);
    int32_t ids[37];
    for (int k = 0; k < 37; k++) ids[k] = 100 + 7 * k;
    static choice_out copied, recomputed;
    run_choices(m, 4, ids, 37, &copied);
    run_choices(m, 1, ids, 37, &recomputed);
    for (int c = 0; c < 3; c++)
        if (copied.n[c] != GT || recomputed.n[c] != GT || memcmp(copied.tok[c], recomputed.tok[c], sizeof(int32_t) * GT))
            fail_msg("choice %d: forked state (%d tokens) and recomputed (%d tokens) differ", c, copied.n[c],
                     recomputed.n[c]);
    printf("  tiny-qwen35 q8_0, deterministic: n = 3 choices from a copied state == recomputed, %d tokens each\n", GT);
    rf_model_free(m);
}

/* The hybrid prefix cache on the GPU (test_qwen35_engine.c's test_prefix_cache, deterministic
 * mode): A (1990 tokens, chunks of 512) leaves state checkpoints at 512/1024/1536/1984; B = A +
 * 30 resumes at 1984 (36 computed), C = A's first 700 + 40 at 512 (228), D = A's first 1985 at
 * 1984 (1 computed: a one-token step, replayed from a graph). Tokens and logits equal the
 * cache-off engine's (deterministic mode is chunking-invariant, test_engine). */
static void test_prefix_cache(void **state) {
    (void)state;
    char path[1200];
    mkmodel("tiny-qwen35", "q8_0", path, sizeof path);
    rf_model *m = load(path, RF_DEVICE_GPU);
    assert_int_equal(rf_model_set_deterministic(m, true), RF_OK);
    g_nv = m->hp.n_vocab;
    enum { L = 1990 };
    static int32_t a[L + 30], c[740];
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 11);
    random_prompt(&r, a, L + 30, g_nv);
    memcpy(c, a, 700 * sizeof(int32_t));
    random_prompt(&r, c + 700, 40, g_nv);
    const int32_t *ids[4] = {a, a, c, a};
    const int len[4] = {L, L + 30, 740, 1985};
    const int64_t want[4] = {L, 36, 228, 1};
    assert_int_equal(rf_knob_override(RF_KNOB_STATE_CHECKPOINTS, "6"), RF_OK);
    /* pass 0: cache on, 1: off (host sampling, every logits row hashed), 2: on with device
     * sampling and decode graphs (no hook) */
    static run_out on, off, dev;
    for (int pass = 0; pass < 3; pass++) {
        run_out *ro = pass == 0 ? &on : pass == 1 ? &off : &dev;
        memset(ro, 0, sizeof *ro);
        rf_engine_config *cf = rf_engine_config_new();
        rf_engine_config_set(cf, RF_ENGINE_CTX, 2048 + 64);
        rf_engine_config_set(cf, RF_ENGINE_PARALLEL, 1);
        rf_engine_config_set(cf, RF_ENGINE_BATCH, 512);
        rf_engine_config_set(cf, RF_ENGINE_KV_BLOCKS, 320);
        rf_engine_config_set(cf, RF_ENGINE_PREFIX_CACHE, pass != 1);
        rf_engine *e = NULL;
        if (rf_engine_new(m, cf, &e)) fail_msg("engine: %s", rf_last_error());
        rf_engine_config_free(cf);
        if (pass < 2) {
            e->logits_hook = on_logits;
            e->hook_user = ro;
        }
        for (int i = 0; i < 4; i++) {
            int64_t p0 = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS);
            sub(e, ids[i], len[i], &ro->o[i], &ro->id[i], false);
            drain(e);
            int64_t got = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS) - p0;
            if (got != (pass != 1 ? want[i] : len[i]))
                fail_msg("pass %d, request %d: %lld prompt tokens computed", pass, i, (long long)got);
        }
        if (pass != 1) assert_int_equal(rf_engine_get_stat(e, RF_STAT_STATE_CKPT_HITS), 3);
        rf_engine_free(e);
        rf_backend_gpu_drop_graphs(m->be); /* as in test_engine */
    }
    rf_knob_override(RF_KNOB_STATE_CHECKPOINTS, NULL);
    for (int i = 0; i < 4; i++) {
        if (on.o[i].n != GT || off.o[i].n != GT || memcmp(on.o[i].tok, off.o[i].tok, sizeof(int32_t) * GT))
            fail_msg("request %d: tokens differ with the prefix cache on and off", i);
        if (dev.o[i].n != GT || memcmp(dev.o[i].tok, off.o[i].tok, sizeof(int32_t) * GT))
            fail_msg("request %d: tokens differ with the prefix cache on (device sampling, graphs) and off", i);
        for (int k = 0; k < GT; k++)
            if (on.lhash[i][k] != off.lhash[i][k]) fail_msg("request %d token %d: logits differ (cache on / off)", i, k);
    }
    printf("  tiny-qwen35 q8_0, deterministic: a 1990-token prefix resumed from device state checkpoints (36, 228 and 1 "
           "prompt tokens computed) == cache off, %d tokens and logits bit for bit (and tokens with device sampling)\n", GT);
    rf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_ops_vs_ref),
        cmocka_unit_test(test_invariance),
        cmocka_unit_test(test_logits_tiny_qwen35),
        cmocka_unit_test(test_logits_tiny_qwen35moe),
        cmocka_unit_test(test_logits_tiny_gemma4moe),
        cmocka_unit_test(test_engine),
        cmocka_unit_test(test_forks),
        cmocka_unit_test(test_prefix_cache),
    };
    const char *f = getenv("RF_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
    return cmocka_run_group_tests(tests, setup, teardown);
}
