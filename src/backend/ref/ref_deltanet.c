/* ref_deltanet.c — the scalar references of ref_deltanet.h: the gated DeltaNet mixer's conv1d,
 * its delta rule (recurrent and chunked), and the batch forms with state slots. Plain loops,
 * double accumulators. Facts (the gate's softplus, the L2 norm's eps, the key-head broadcast)
 * follow llama.cpp's qwen35 graph and ggml's ssm_conv / gated_delta_net ops. */
#include "backend/ref/ref_deltanet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ref/ref_ops.h"

float rf_ref_softplus(float x) { return x > 20.0f ? x : (float)log1p(exp((double)x)); }
float rf_ref_sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

void rf_ref_l2norm(float *y, const float *x, int64_t rows, int64_t n, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[r * n + i] * x[r * n + i];
        double nrm = sqrt(ss);
        double inv = 1.0 / (nrm > eps ? nrm : (double)eps);
        for (int64_t i = 0; i < n; i++) y[r * n + i] = (float)(x[r * n + i] * inv);
    }
}

void rf_ref_sigmoid_mul(float *y, const float *x, const float *gate, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] * rf_ref_sigmoid(gate[i]));
}

void rf_ref_conv1d_state(float *y, const float *x, int64_t ldx, const float *w, float *state, int64_t n_t,
                         int64_t C, int64_t K, bool silu) {
    const int64_t W = K - 1;
    /* win row r: state row r for r < W, else x row r - W */
#define WIN(r, c) ((r) < W ? state[(r) * C + (c)] : x[((r) - W) * ldx + (c)])
    for (int64_t t = 0; t < n_t; t++)
        for (int64_t c = 0; c < C; c++) {
            double acc = 0;
            for (int64_t i = 0; i < K; i++) acc += (double)WIN(t + i, c) * w[c * K + i];
            y[t * C + c] = silu ? rf_ref_silu((float)acc) : (float)acc;
        }
    /* the new window: the last W rows of [state; x] (rows of state are overwritten in order,
     * each read before it is written when n_t < W shifts the old rows down) */
    for (int64_t r = 0; r < W; r++) {
        int64_t src = n_t + r; /* row of win */
        for (int64_t c = 0; c < C; c++) state[r * C + c] = WIN(src, c);
    }
#undef WIN
}

void rf_ref_gated_delta(float *out, const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv,
                        const float *g, const float *beta, float *state, int64_t n_t, int64_t H_k, int64_t H_v,
                        int64_t S, float scale) {
    for (int64_t h = 0; h < H_v; h++) {
        const int64_t kh = h % H_k;
        float *M = state + h * S * S;
        for (int64_t t = 0; t < n_t; t++) {
            const float *qt = q + t * ldqk + kh * S, *kt = k + t * ldqk + kh * S, *vt = v + t * ldv + h * S;
            const double decay = exp((double)g[t * H_v + h]), bt = beta[t * H_v + h];
            for (int64_t e = 0; e < S * S; e++) M[e] = (float)(M[e] * decay);
            for (int64_t j = 0; j < S; j++) {
                double mk = 0;
                for (int64_t i = 0; i < S; i++) mk += (double)M[j * S + i] * kt[i];
                double d = bt * ((double)vt[j] - mk);
                for (int64_t i = 0; i < S; i++) M[j * S + i] = (float)(M[j * S + i] + d * kt[i]);
            }
            for (int64_t j = 0; j < S; j++) {
                double o = 0;
                for (int64_t i = 0; i < S; i++) o += (double)M[j * S + i] * qt[i];
                out[(t * H_v + h) * S + j] = (float)(o * scale);
            }
        }
    }
}

static double dotd(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

rf_status rf_ref_gated_delta_chunked(float *out, const float *q, const float *k, int64_t ldqk, const float *v,
                                     int64_t ldv, const float *g, const float *beta, float *state, int64_t n_t,
                                     int64_t H_k, int64_t H_v, int64_t S, float scale, int64_t chunk) {
    if (chunk < 1) return rf_set_error(RF_ERR_INVALID_ARG, "chunked delta rule: chunk %lld", (long long)chunk);
    const int64_t L = chunk < n_t ? chunk : (n_t > 0 ? n_t : 1);
    double *G = malloc((size_t)L * sizeof(double));
    double *U = malloc((size_t)(L * S) * sizeof(double));
    double *Mn = malloc((size_t)(S * S) * sizeof(double));
    if (!G || !U || !Mn) {
        free(G), free(U), free(Mn);
        return rf_set_error(RF_ERR_OOM, "chunked delta rule: out of memory");
    }
    for (int64_t h = 0; h < H_v; h++) {
        const int64_t kh = h % H_k;
        float *M = state + h * S * S;
        for (int64_t c0 = 0; c0 < n_t; c0 += L) {
            const int64_t n = n_t - c0 < L ? n_t - c0 : L;
#define QT(t) (q + (c0 + (t)) * ldqk + kh * S)
#define KT(t) (k + (c0 + (t)) * ldqk + kh * S)
#define VT(t) (v + (c0 + (t)) * ldv + h * S)
            double acc = 0;
            for (int64_t t = 0; t < n; t++) G[t] = acc += g[(c0 + t) * H_v + h];
            /* U by forward substitution: u_t = B_t (v_t - e^{G_t} M0 k_t) - B_t sum_{s<t} e^{G_t-G_s} (k_t.k_s) u_s */
            for (int64_t t = 0; t < n; t++) {
                const double bt = beta[(c0 + t) * H_v + h], et = exp(G[t]);
                for (int64_t j = 0; j < S; j++) U[t * S + j] = bt * ((double)VT(t)[j] - et * dotd(M + j * S, KT(t), S));
                for (int64_t s = 0; s < t; s++) {
                    const double a = bt * exp(G[t] - G[s]) * dotd(KT(t), KT(s), S);
                    for (int64_t j = 0; j < S; j++) U[t * S + j] -= a * U[s * S + j];
                }
            }
            /* outputs from the chunk's start state and the chunk's own updates */
            for (int64_t t = 0; t < n; t++) {
                const double et = exp(G[t]);
                for (int64_t j = 0; j < S; j++) {
                    double o = et * dotd(M + j * S, QT(t), S);
                    for (int64_t s = 0; s <= t; s++) o += exp(G[t] - G[s]) * dotd(KT(s), QT(t), S) * U[s * S + j];
                    out[((c0 + t) * H_v + h) * S + j] = (float)(o * scale);
                }
            }
            /* the state at the chunk's end, rounded to f32 once */
            const double el = exp(G[n - 1]);
            for (int64_t j = 0; j < S; j++)
                for (int64_t i = 0; i < S; i++) {
                    double m = el * M[j * S + i];
                    for (int64_t s = 0; s < n; s++) m += exp(G[n - 1] - G[s]) * U[s * S + j] * KT(s)[i];
                    Mn[j * S + i] = m;
                }
            for (int64_t e = 0; e < S * S; e++) M[e] = (float)Mn[e];
#undef QT
#undef KT
#undef VT
        }
    }
    free(G), free(U), free(Mn);
    return RF_OK;
}

/* The first token index past sequence seq[t0]'s contiguous run from t0. */
static int64_t run_end(const int32_t *seq, int64_t t0, int64_t n) {
    int64_t t1 = t0 + 1;
    while (t1 < n && seq[t1] == seq[t0]) t1++;
    return t1;
}

void rf_ref_conv1d_batch(float *y, const float *x, int64_t ldx, const float *w, float *state, int64_t n_tokens,
                         const int32_t *pos, const int32_t *seq, const int32_t *slot, int64_t C, int64_t K,
                         bool silu) {
    const int64_t row = (K - 1) * C;
    for (int64_t t0 = 0; t0 < n_tokens;) {
        const int64_t t1 = run_end(seq, t0, n_tokens);
        float *st = state + (size_t)slot[seq[t0]] * row;
        if (pos[t0] == 0) memset(st, 0, (size_t)row * sizeof(float));
        rf_ref_conv1d_state(y + t0 * C, x + t0 * ldx, ldx, w, st, t1 - t0, C, K, silu);
        t0 = t1;
    }
}

rf_status rf_ref_gated_delta_batch(float *out, const float *x, int64_t ldx, const float *a, const float *b,
                                   const float *dt_bias, const float *ssm_a, float *state, int64_t n_tokens,
                                   const int32_t *pos, const int32_t *seq, const int32_t *slot, int64_t H_k,
                                   int64_t H_v, int64_t S, float eps) {
    const int64_t KS = H_k * S, row = H_v * S * S;
    float *qk = malloc((size_t)(n_tokens * 2 * KS) * sizeof(float));
    float *gb = malloc((size_t)(n_tokens * 2 * H_v) * sizeof(float));
    if (!qk || !gb) {
        free(qk), free(gb);
        return rf_set_error(RF_ERR_OOM, "gated delta rule: out of memory");
    }
    /* per token: normalised q (first KS) and k (next KS); the gate and beta */
    for (int64_t t = 0; t < n_tokens; t++) {
        rf_ref_l2norm(qk + t * 2 * KS, x + t * ldx, H_k, S, eps);
        rf_ref_l2norm(qk + t * 2 * KS + KS, x + t * ldx + KS, H_k, S, eps);
        for (int64_t h = 0; h < H_v; h++) {
            gb[t * H_v + h] = (float)((double)rf_ref_softplus(a[t * H_v + h] + dt_bias[h]) * ssm_a[h]);
            gb[n_tokens * H_v + t * H_v + h] = rf_ref_sigmoid(b[t * H_v + h]);
        }
    }
    for (int64_t t0 = 0; t0 < n_tokens;) {
        const int64_t t1 = run_end(seq, t0, n_tokens);
        float *st = state + (size_t)slot[seq[t0]] * row;
        if (pos[t0] == 0) memset(st, 0, (size_t)row * sizeof(float));
        rf_ref_gated_delta(out + t0 * H_v * S, qk + t0 * 2 * KS, qk + t0 * 2 * KS + KS, 2 * KS,
                           x + t0 * ldx + 2 * KS, ldx, gb + t0 * H_v, gb + n_tokens * H_v + t0 * H_v, st, t1 - t0,
                           H_k, H_v, S, (float)(1.0 / sqrt((double)S)));
        t0 = t1;
    }
    free(qk), free(gb);
    return RF_OK;
}
