/* cpu_deltanet.c — the CPU backend's gated DeltaNet ops (backend.h: ssm_conv, gated_delta,
 * sigmoid_mul, head_split): plain f32 loops in ggml's order of operations, threaded over
 * channels (conv) and (sequence, head) pairs (delta rule). Twins: ref_deltanet.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "core/test_hooks.h"
#include "backend/ref/ref_deltanet.h"

/* The sequences of a batch as runs of contiguous tokens: starts[i]..starts[i+1]. */
typedef struct runs {
    int64_t n;
    int64_t *start; /* [n + 1] */
} runs;

static rf_status batch_runs(rf_cpu *cpu, const rf_batch *b, size_t extra, runs *r, void **extra_out) {
    size_t need = (size_t)(b->n_tokens + 1) * sizeof(int64_t);
    rf_status st = rf_cpu_scratch(cpu, need + extra);
    if (st) return st;
    r->start = cpu->scratch;
    r->n = 0;
    for (int64_t t = 0; t < b->n_tokens; t++)
        if (t == 0 || b->seq[t] != b->seq[t - 1]) r->start[r->n++] = t;
    r->start[r->n] = b->n_tokens;
    if (extra_out) *extra_out = (char *)cpu->scratch + ((need + 63) & ~(size_t)63);
    return RF_OK;
}

static rf_status check_slots(const rf_batch *b, const runs *r, const rf_tensor *state, const char *op) {
    if (!b->state_slot) return rf_set_error(RF_ERR_INVALID_ARG, "%s: the batch has no state slots", op);
    for (int64_t i = 0; i < r->n; i++) {
        int32_t s = b->seq[r->start[i]];
        if (s < 0 || s >= b->n_seqs || b->state_slot[s] < 0 || b->state_slot[s] >= state->ne[1])
            return rf_set_error(RF_ERR_RANGE, "%s: sequence %d's state slot is outside the %lld slots", op, s,
                                (long long)state->ne[1]);
    }
    return RF_OK;
}

/* ---- conv1d ------------------------------------------------------------------------------ */

typedef struct conv_job {
    float *y;
    const char *x;
    size_t ldx;
    const float *w;
    float *st;
    int64_t n, C, K;
    float *win; /* per thread: [K] */
} conv_job;

/* one sequence's tokens, channels [lo, hi) on this thread; the window kept per channel in
 * registers-to-be (win), the state rows updated at the end */
static void conv_worker(void *ctx, int ith, int nth) {
    conv_job *j = ctx;
    int64_t lo, hi;
    rf_pool_range(j->C, ith, nth, &lo, &hi);
    const int64_t K = j->K, W = K - 1, C = j->C;
    float win[64];
    for (int64_t c = lo; c < hi; c++) {
        const float *wc = j->w + c * K;
        for (int64_t i = 0; i < W; i++) win[i] = j->st[i * C + c];
        for (int64_t t = 0; t < j->n; t++) {
            win[W] = ((const float *)(j->x + (size_t)t * j->ldx))[c];
            float s = 0.0f; /* float, taps in order (ggml's ssm_conv) */
            for (int64_t i = 0; i < K; i++) s += win[i] * wc[i];
            j->y[t * C + c] = s / (1.0f + expf(-s));
            for (int64_t i = 0; i < W; i++) win[i] = win[i + 1];
        }
        for (int64_t i = 0; i < W; i++) j->st[i * C + c] = win[i];
    }
}

rf_status rf_cpu_ssm_conv(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w, rf_tensor *state,
                              const rf_batch *b, int64_t C, int64_t K) {
    rf_cpu *cpu = be->impl;
    if (K < 1 || K > 64 || w->type != RF_TYPE_F32 || w->ne[0] != K || w->ne[1] != C || state->ne[0] != (K - 1) * C)
        return rf_set_error(RF_ERR_INVALID_ARG, "ssm_conv: kernel %lld x %lld channels (f32, K <= 64) against weight "
                            "[%lld, %lld] and state rows of %lld", (long long)K, (long long)C, (long long)w->ne[0],
                            (long long)w->ne[1], (long long)state->ne[0]);
    runs r;
    rf_status st = batch_runs(cpu, b, 0, &r, NULL);
    if (st || (st = check_slots(b, &r, state, "ssm_conv"))) return st;
    for (int64_t i = 0; i < r.n; i++) {
        const int64_t t0 = r.start[i];
        float *sl = (float *)((char *)state->data + (size_t)b->state_slot[b->seq[t0]] * state->nb1);
        if (b->pos[t0] == 0) memset(sl, 0, (size_t)(K - 1) * C * sizeof(float));
        conv_job j = {.y = (float *)y->data + t0 * C, .x = (const char *)x->data + (size_t)t0 * x->nb1, .ldx = x->nb1,
                      .w = w->data, .st = sl, .n = r.start[i + 1] - t0, .C = C, .K = K};
        rf_pool_run(cpu->pool, conv_worker, &j);
    }
    return RF_OK;
}

/* ---- gated delta rule -------------------------------------------------------------------- */

typedef struct delta_job {
    const rf_batch *b;
    const runs *r;
    float *out;
    const char *x;
    size_t ldx;
    const float *a, *bt, *dt, *sa;
    char *state;
    size_t ldst;
    int64_t H_k, H_v, S;
    float eps;
    float *scratch; /* per thread: 3 S */
    float *cond;    /* test hook dn_cond_min: per thread, or NULL */
} delta_job;

static void l2n(float *y, const float *x, int64_t n, float eps) {
    double s = 0; /* ggml_float */
    for (int64_t i = 0; i < n; i++) s += (double)(x[i] * x[i]);
    const float sc = 1.0f / fmaxf(sqrtf((float)s), eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * sc;
}

/* the test hook's conditioning of one head's output (test_hooks.h dn_cond_min); q is unit */
static float head_cond(const float *o, const float *M, int64_t S, float scale) {
    double oo = 0, mm = 0;
    for (int64_t i = 0; i < S; i++) oo += (double)o[i] * o[i];
    for (int64_t i = 0; i < S * S; i++) mm += (double)M[i] * M[i];
    return mm > 0 ? (float)(sqrt(oo) / (sqrt(mm) * scale)) : INFINITY;
}

static void delta_worker(void *ctx, int ith, int nth) {
    delta_job *j = ctx;
    const int64_t S = j->S, H_v = j->H_v, H_k = j->H_k, KS = H_k * S;
    const int64_t n_pairs = j->r->n * H_v;
    int64_t lo, hi;
    rf_pool_range(n_pairs, ith, nth, &lo, &hi);
    float *q = j->scratch + (size_t)ith * 3 * S, *k = q + S, *d = k + S;
    const float scale = 1.0f / sqrtf((float)S);
    for (int64_t p = lo; p < hi; p++) {
        const int64_t ri = p / H_v, h = p % H_v, kh = h % H_k;
        const int64_t t0 = j->r->start[ri], t1 = j->r->start[ri + 1];
        float *M = (float *)(j->state + (size_t)j->b->state_slot[j->b->seq[t0]] * j->ldst) + h * S * S;
        if (j->b->pos[t0] == 0) memset(M, 0, (size_t)(S * S) * sizeof(float));
        for (int64_t t = t0; t < t1; t++) {
            const float *xr = (const float *)(j->x + (size_t)t * j->ldx);
            l2n(q, xr + kh * S, S, j->eps);
            l2n(k, xr + KS + kh * S, S, j->eps);
            const float *v = xr + 2 * KS + h * S;
            const float ab = j->a[t * H_v + h] + j->dt[h];
            const float sp = ab > 20.0f ? ab : logf(1.0f + expf(ab));
            const float g = sp * j->sa[h], beta = 1.0f / (1.0f + expf(-j->bt[t * H_v + h]));
            const float decay = expf(g);
            for (int64_t e = 0; e < S * S; e++) M[e] *= decay;
            for (int64_t jj = 0; jj < S; jj++) d[jj] = (v[jj] - rf_cpu_dot_f32(M + jj * S, k, S)) * beta;
            for (int64_t jj = 0; jj < S; jj++) rf_cpu_axpy_f32(M + jj * S, k, d[jj], S);
            float *o = j->out + t * H_v * S + h * S;
            for (int64_t jj = 0; jj < S; jj++) o[jj] = rf_cpu_dot_f32(M + jj * S, q, S) * scale;
            if (j->cond) j->cond[ith] = fminf(j->cond[ith], head_cond(o, M, S, scale));
        }
    }
}

rf_status rf_cpu_gated_delta(rf_backend *be, rf_tensor *out, const rf_tensor *x, const rf_tensor *a,
                                 const rf_tensor *bt, const rf_tensor *dt_bias, const rf_tensor *ssm_a, rf_tensor *state,
                                 const rf_batch *b, int64_t H_k, int64_t H_v, int64_t S, float eps) {
    rf_cpu *cpu = be->impl;
    if (H_k < 1 || H_v < 1 || H_v % H_k || S < 1 || state->ne[0] != H_v * S * S)
        return rf_set_error(RF_ERR_INVALID_ARG, "gated_delta: %lld key heads, %lld value heads of %lld, state rows of %lld",
                            (long long)H_k, (long long)H_v, (long long)S, (long long)state->ne[0]);
    runs r;
    void *scr;
    rf_status st = batch_runs(cpu, b, (size_t)cpu->n_threads * 3 * S * sizeof(float), &r, &scr);
    if (st || (st = check_slots(b, &r, state, "gated_delta"))) return st;
    delta_job j = {.b = b, .r = &r, .out = out->data, .x = x->data, .ldx = x->nb1, .a = a->data, .bt = bt->data,
                   .dt = dt_bias->data, .sa = ssm_a->data, .state = state->data, .ldst = state->nb1, .H_k = H_k,
                   .H_v = H_v, .S = S, .eps = eps, .scratch = scr};
    const rf_test_hooks *h = rf_test_hooks_get(); /* tests only: one minimum per thread */
    if (h && h->dn_cond_min && !(j.cond = malloc((size_t)cpu->n_threads * sizeof(float))))
        return rf_set_error(RF_ERR_OOM, "gated_delta: test hook buffer");
    for (int i = 0; j.cond && i < cpu->n_threads; i++) j.cond[i] = INFINITY;
    rf_pool_run(cpu->pool, delta_worker, &j);
    for (int i = 0; j.cond && i < cpu->n_threads; i++) *h->dn_cond_min = fminf(*h->dn_cond_min, j.cond[i]);
    free(j.cond);
    return RF_OK;
}

/* ---- elementwise -------------------------------------------------------------------------- */

rf_status rf_cpu_sigmoid_mul(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *gate, int64_t n) {
    (void)be;
    float *yd = y->data;
    const float *xd = x->data, *gd = gate->data;
    for (int64_t i = 0; i < n; i++) yd[i] = xd[i] * (1.0f / (1.0f + expf(-gd[i])));
    return RF_OK;
}

rf_status rf_cpu_head_split(rf_backend *be, rf_tensor *y0, rf_tensor *y1, const rf_tensor *x, int64_t rows,
                                int64_t n) {
    (void)be;
    const float *xd = x->data;
    for (int64_t r = 0; r < rows; r++) {
        memcpy((float *)y0->data + r * n, xd + r * 2 * n, (size_t)n * sizeof(float));
        memcpy((float *)y1->data + r * n, xd + r * 2 * n + n, (size_t)n * sizeof(float));
    }
    return RF_OK;
}
