/* test_deltanet.c — the gated DeltaNet references (ref_deltanet.h) against hand-computed values
 * and each other (the chunked delta rule against the recurrent one over several chunk sizes; a
 * prompt in pieces against one piece), and the CPU backend's DeltaNet ops against them. Random
 * inputs use rf_test_seed() (printed).
 *
 * Tolerance of chunked vs recurrent: both accumulate in double and differ only in where the
 * state is rounded to f32 (per token vs per chunk, relative error 2^-24 each time). The decay
 * exp(g) <= 1 and the delta step (I - beta k k^T with |k| = 1, beta in (0, 1)) never amplify a
 * state error, so after T tokens the rounding differences add to at most about T * 2^-24 of the
 * state's size: < 1e-5 relative for T <= 160. The tests use T <= 80 and the f32 bound 1e-5. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ref/ref_deltanet.h"
#include "backend/ref/ref_ops.h"

#define NEAR(a, b, tol) assert_true(fabs((double)(a) - (double)(b)) <= (tol))

static void test_scalars(void **state) {
    (void)state;
    NEAR(rf_ref_softplus(0.0f), log(2.0), 1e-7);
    NEAR(rf_ref_softplus(30.0f), 30.0, 0);
    NEAR(rf_ref_softplus(-30.0f), exp(-30.0), 1e-18);
    NEAR(rf_ref_sigmoid(0.0f), 0.5, 0);
    float x[4] = {3, 4, 0, 0}, y[4];
    rf_ref_l2norm(y, x, 2, 2, 1e-6f);
    NEAR(y[0], 0.6, 1e-7);
    NEAR(y[1], 0.8, 1e-7);
    assert_true(y[2] == 0.0f && y[3] == 0.0f); /* eps keeps a zero row finite */
    float g[2] = {0.0f, 100.0f}, a[2] = {2.0f, 3.0f}, o[2];
    rf_ref_sigmoid_mul(o, a, g, 2);
    NEAR(o[0], 1.0, 1e-7);
    NEAR(o[1], 3.0, 1e-6);
}

/* K = 2, C = 1, taps w = [1 (older), 2 (newer)]: y_t = win[t] + 2 win[t+1] */
static void test_conv_hand(void **state) {
    (void)state;
    const float w[2] = {1, 2}, x[2] = {10, 100};
    float st[1] = {3}, y[2];
    rf_ref_conv1d_state(y, x, 1, w, st, 2, 1, 2, false);
    NEAR(y[0], 3 + 20, 0);
    NEAR(y[1], 10 + 200, 0);
    NEAR(st[0], 100, 0);
    /* K = 4, one token: the window shifts by one */
    const float w4[4] = {1, 10, 100, 1000};
    float st3[3] = {1, 2, 3}, x1 = 4, y1;
    rf_ref_conv1d_state(&y1, &x1, 1, w4, st3, 1, 1, 4, true);
    NEAR(y1, rf_ref_silu(1 + 20 + 300 + 4000), 1e-3);
    assert_true(st3[0] == 2 && st3[1] == 3 && st3[2] == 4);
}

/* A prompt through the conv in pieces of several sizes equals one piece (bit for bit: each output
 * is the same sum in the same order). */
static void test_conv_pieces(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    const int64_t C = 12, K = 4, T = 23, ld = 16;
    float *x = malloc(sizeof(float) * T * ld), *w = malloc(sizeof(float) * C * K);
    float *y1 = malloc(sizeof(float) * T * C), *y2 = malloc(sizeof(float) * T * C);
    float s1[3 * 12] = {0}, s2[3 * 12];
    rf_rng_fill_normal(&r, x, T * ld, 1.0f);
    rf_rng_fill_normal(&r, w, C * K, 0.5f);
    rf_ref_conv1d_state(y1, x, ld, w, s1, T, C, K, true);
    const int64_t sizes[] = {1, 2, 3, 5, 7};
    for (int si = 0; si < 5; si++) {
        memset(s2, 0, sizeof s2);
        rf_poison_f32(y2, T * C);
        for (int64_t t = 0; t < T; t += sizes[si]) {
            int64_t n = T - t < sizes[si] ? T - t : sizes[si];
            rf_ref_conv1d_state(y2 + t * C, x + t * ld, ld, w, s2, n, C, K, true);
        }
        assert_memory_equal(y1, y2, sizeof(float) * T * C);
        assert_memory_equal(s1, s2, sizeof s2);
    }
    free(x), free(w), free(y1), free(y2);
}

/* S = 1, one head: m = e^g m; d = b (v - m k); m += d k; o = scale m q */
static void test_delta_hand(void **state) {
    (void)state;
    const float q[2] = {1, -1}, k[2] = {1, 1}, v[2] = {2, 3}, g[2] = {0, logf(0.5f)}, b[2] = {0.5f, 1.0f};
    float M = 0, o[2];
    rf_ref_gated_delta(o, q, k, 1, v, 1, g, b, &M, 2, 1, 1, 1, 2.0f);
    /* t0: m = 0; d = 0.5 * 2 = 1; m = 1; o = 2 * 1 * 1 = 2
     * t1: m = 0.5; d = 1 * (3 - 0.5) = 2.5; m = 3; o = 2 * 3 * -1 = -6 */
    NEAR(o[0], 2, 1e-6);
    NEAR(o[1], -6, 1e-6);
    NEAR(M, 3, 1e-6);
}

typedef struct dn_case {
    int64_t T, H_k, H_v, S;
    float *q, *k, *v, *g, *b;
} dn_case;

/* random normalised q, k, v, decays g < 0 and betas in (0, 1), as the model makes them */
static void dn_make(dn_case *c, rf_rng *r) {
    const int64_t T = c->T, KS = c->H_k * c->S, VS = c->H_v * c->S;
    c->q = malloc(sizeof(float) * T * KS);
    c->k = malloc(sizeof(float) * T * KS);
    c->v = malloc(sizeof(float) * T * VS);
    c->g = malloc(sizeof(float) * T * c->H_v);
    c->b = malloc(sizeof(float) * T * c->H_v);
    rf_rng_fill_normal(r, c->q, T * KS, 1.0f);
    rf_rng_fill_normal(r, c->k, T * KS, 1.0f);
    rf_rng_fill_normal(r, c->v, T * VS, 1.0f);
    rf_ref_l2norm(c->q, c->q, T * c->H_k, c->S, 1e-6f);
    rf_ref_l2norm(c->k, c->k, T * c->H_k, c->S, 1e-6f);
    for (int64_t i = 0; i < T * c->H_v; i++) {
        c->g[i] = -rf_ref_softplus(rf_rng_normal(r)) * 0.3f;
        c->b[i] = rf_ref_sigmoid(rf_rng_normal(r));
    }
}
static void dn_free(dn_case *c) { free(c->q), free(c->k), free(c->v), free(c->g), free(c->b); }

static void test_delta_chunked(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 1);
    dn_case c = {.T = 80, .H_k = 2, .H_v = 4, .S = 16};
    dn_make(&c, &r);
    const int64_t SS = c.H_v * c.S * c.S, N = c.T * c.H_v * c.S, KS = c.H_k * c.S, VS = c.H_v * c.S;
    float *M0 = malloc(sizeof(float) * SS), *Mr = malloc(sizeof(float) * SS), *Mc = malloc(sizeof(float) * SS);
    float *orr = malloc(sizeof(float) * N), *oc = malloc(sizeof(float) * N);
    rf_rng_fill_normal(&r, M0, SS, 0.3f); /* a state carried in from earlier tokens */
    memcpy(Mr, M0, sizeof(float) * SS);
    rf_ref_gated_delta(orr, c.q, c.k, KS, c.v, VS, c.g, c.b, Mr, c.T, c.H_k, c.H_v, c.S, 0.25f);
    const int64_t chunks[] = {1, 2, 5, 16, 33, 64, 200};
    for (int ci = 0; ci < 7; ci++) {
        memcpy(Mc, M0, sizeof(float) * SS);
        rf_poison_f32(oc, N);
        assert_int_equal(rf_ref_gated_delta_chunked(oc, c.q, c.k, KS, c.v, VS, c.g, c.b, Mc, c.T, c.H_k, c.H_v, c.S,
                                                    0.25f, chunks[ci]),
                         RF_OK);
        double eo = rf_rel_l2(oc, orr, N), es = rf_rel_l2(Mc, Mr, SS);
        printf("chunk %lld: out rel L2 %.3g, state %.3g\n", (long long)chunks[ci], eo, es);
        assert_true(eo < 1e-5);
        assert_true(es < 1e-5);
    }
    /* the recurrent form in pieces equals one piece exactly (same operations in the same order) */
    memcpy(Mc, M0, sizeof(float) * SS);
    for (int64_t t = 0; t < c.T; t += 7) {
        int64_t n = c.T - t < 7 ? c.T - t : 7;
        rf_ref_gated_delta(oc + t * VS, c.q + t * KS, c.k + t * KS, KS, c.v + t * VS, VS, c.g + t * c.H_v,
                           c.b + t * c.H_v, Mc, n, c.H_k, c.H_v, c.S, 0.25f);
    }
    assert_memory_equal(oc, orr, sizeof(float) * N);
    assert_memory_equal(Mc, Mr, sizeof(float) * SS);
    free(M0), free(Mr), free(Mc), free(orr), free(oc);
    dn_free(&c);
}

/* A step's batch: three sequences in slots 2, 0, 1 (of 3), one starting at position 0 over a
 * garbage slot (read as zeros), the others continuing; the CPU ops against the batch references,
 * and the batch references against per-sequence calls. */
static void test_batch_ops(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 2);
    const int64_t H_k = 2, H_v = 4, S = 8, K = 4, KS = H_k * S, VS = H_v * S, C = 2 * KS + VS, NS = 3;
    const int32_t pos[] = {0, 1, 2, 3, 4, 17, 5, 6, 7}; /* seq 0: 5 tokens from 0; seq 1: one decode; seq 2: 3 */
    const int32_t seq[] = {0, 0, 0, 0, 0, 1, 2, 2, 2}, slot[] = {2, 0, 1};
    const int64_t T = 9;
    float *x = malloc(sizeof(float) * T * C), *w = malloc(sizeof(float) * C * K), *a = malloc(sizeof(float) * T * H_v);
    float *bb = malloc(sizeof(float) * T * H_v), dt[4], sa[4];
    float *cs = malloc(sizeof(float) * NS * (K - 1) * C), *cs2 = malloc(sizeof(float) * NS * (K - 1) * C);
    float *ss = malloc(sizeof(float) * NS * H_v * S * S), *ss2 = malloc(sizeof(float) * NS * H_v * S * S);
    float *y = malloc(sizeof(float) * T * C), *y2 = malloc(sizeof(float) * T * C);
    float *o = malloc(sizeof(float) * T * VS), *o2 = malloc(sizeof(float) * T * VS);
    rf_rng_fill_normal(&r, x, T * C, 1.0f);
    rf_rng_fill_normal(&r, w, C * K, 0.5f);
    rf_rng_fill_normal(&r, a, T * H_v, 1.0f);
    rf_rng_fill_normal(&r, bb, T * H_v, 1.0f);
    rf_rng_fill_normal(&r, dt, 4, 1.0f);
    for (int i = 0; i < 4; i++) sa[i] = -expf(rf_rng_normal(&r) * 0.5f);
    rf_rng_fill_normal(&r, cs, NS * (K - 1) * C, 1.0f);
    rf_rng_fill_normal(&r, ss, NS * H_v * S * S, 0.3f);
    memcpy(cs2, cs, sizeof(float) * NS * (K - 1) * C);
    memcpy(ss2, ss, sizeof(float) * NS * H_v * S * S);
    float *cs0 = malloc(sizeof(float) * NS * (K - 1) * C), *ss0 = malloc(sizeof(float) * NS * H_v * S * S);
    memcpy(cs0, cs, sizeof(float) * NS * (K - 1) * C);
    memcpy(ss0, ss, sizeof(float) * NS * H_v * S * S);

    /* references: batch against per-sequence */
    rf_ref_conv1d_batch(y, x, C, w, cs, T, pos, seq, slot, C, K, true);
    assert_int_equal(rf_ref_gated_delta_batch(o, y, C, a, bb, dt, sa, ss, T, pos, seq, slot, H_k, H_v, S, 1e-6f), RF_OK);
    {
        float *c0 = cs2 + 2 * (K - 1) * C;
        memset(c0, 0, sizeof(float) * (K - 1) * C);
        rf_ref_conv1d_state(y2, x, C, w, c0, 5, C, K, true);
        rf_ref_conv1d_state(y2 + 5 * C, x + 5 * C, C, w, cs2, 1, C, K, true);
        rf_ref_conv1d_state(y2 + 6 * C, x + 6 * C, C, w, cs2 + (K - 1) * C, 3, C, K, true);
        assert_memory_equal(y, y2, sizeof(float) * T * C);
        assert_memory_equal(cs, cs2, sizeof(float) * NS * (K - 1) * C);
    }

    /* the CPU ops */
    rf_backend *be;
    assert_int_equal(rf_backend_cpu_new(2, &be), RF_OK);
    const rf_backend_ops *op = be->ops;
    assert_non_null(op->ssm_conv);
    rf_tensor tx, tw, ty, ta, tb, tdt, tsa, tcs, tss, to;
    assert_int_equal(op->alloc(be, RF_TYPE_F32, C, T, &tx), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, K, C, &tw), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, C, T, &ty), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, H_v, T, &ta), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, H_v, T, &tb), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, H_v, 1, &tdt), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, H_v, 1, &tsa), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, (K - 1) * C, NS, &tcs), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, H_v * S * S, NS, &tss), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, VS, T, &to), RF_OK);
    memcpy(tx.data, x, sizeof(float) * T * C);
    memcpy(tw.data, w, sizeof(float) * C * K);
    memcpy(ta.data, a, sizeof(float) * T * H_v);
    memcpy(tb.data, bb, sizeof(float) * T * H_v);
    memcpy(tdt.data, dt, sizeof dt);
    memcpy(tsa.data, sa, sizeof sa);
    /* the slots as they were before the references ran: garbage in slot 2 (read as zeros) */
    memcpy(tcs.data, cs0, sizeof(float) * NS * (K - 1) * C);
    memcpy(tss.data, ss0, sizeof(float) * NS * H_v * S * S);
    rf_batch b = {.n_tokens = (int32_t)T, .pos = pos, .seq = seq, .n_seqs = 3, .state_slot = slot};
    rf_poison_f32(ty.data, T * C);
    rf_poison_f32(to.data, T * VS);
    assert_int_equal(op->ssm_conv(be, &ty, &tx, &tw, &tcs, &b, C, K), RF_OK);
    double ey = rf_rel_l2(ty.data, y, T * C), ec = rf_rel_l2(tcs.data, cs, NS * (K - 1) * C);
    printf("ssm_conv: y rel L2 %.3g, state %.3g\n", ey, ec);
    assert_true(ey < 1e-5 && ec < 1e-5);
    assert_int_equal(op->gated_delta(be, &to, &ty, &ta, &tb, &tdt, &tsa, &tss, &b, H_k, H_v, S, 1e-6f), RF_OK);
    double eo = rf_rel_l2(to.data, o, T * VS), es = rf_rel_l2(tss.data, ss, NS * H_v * S * S);
    printf("gated_delta: out rel L2 %.3g, state %.3g\n", eo, es);
    assert_true(eo < 1e-5 && es < 1e-5);
    /* a slot out of range is an error, not a stray write */
    const int32_t bad[] = {2, 3, 1};
    rf_batch bb2 = b;
    bb2.state_slot = bad;
    assert_int_equal(op->ssm_conv(be, &ty, &tx, &tw, &tcs, &bb2, C, K), RF_ERR_RANGE);

    /* sigmoid_mul and head_split */
    float xs[6] = {1, 2, 3, 4, 5, 6}, gs[6] = {0, 1, -1, 2, -2, 0}, want[6];
    rf_ref_sigmoid_mul(want, xs, gs, 6);
    rf_tensor t1, t2, t3;
    assert_int_equal(op->alloc(be, RF_TYPE_F32, 6, 1, &t1), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, 6, 1, &t2), RF_OK);
    assert_int_equal(op->alloc(be, RF_TYPE_F32, 6, 1, &t3), RF_OK);
    memcpy(t1.data, xs, sizeof xs);
    memcpy(t2.data, gs, sizeof gs);
    assert_int_equal(op->sigmoid_mul(be, &t1, &t1, &t2, 6), RF_OK);
    for (int i = 0; i < 6; i++) NEAR(((float *)t1.data)[i], want[i], 1e-6);
    memcpy(t1.data, xs, sizeof xs);
    assert_int_equal(op->head_split(be, &t2, &t3, &t1, 3, 1), RF_OK); /* rows [1,2], [3,4], [5,6] */
    const float h0[3] = {1, 3, 5}, h1[3] = {2, 4, 6};
    assert_memory_equal(t2.data, h0, sizeof h0);
    assert_memory_equal(t3.data, h1, sizeof h1);
    rf_tensor *all[] = {&tx, &tw, &ty, &ta, &tb, &tdt, &tsa, &tcs, &tss, &to, &t1, &t2, &t3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) op->free(be, all[i]);
    op->destroy(be);
    free(x), free(w), free(a), free(bb), free(cs), free(cs2), free(ss), free(ss2), free(y), free(y2), free(o), free(o2), free(cs0), free(ss0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),      cmocka_unit_test(test_conv_hand),   cmocka_unit_test(test_conv_pieces),
        cmocka_unit_test(test_delta_hand),   cmocka_unit_test(test_delta_chunked), cmocka_unit_test(test_batch_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
