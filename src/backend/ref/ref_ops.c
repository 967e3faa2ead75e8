/* ref_ops.c — the scalar reference ops declared in ref_ops.h: plain loops, double accumulators,
 * no SIMD, no threads. They are the oracle for the CPU fast paths and every GPU kernel, so they
 * favour obviousness over speed. */
#include "backend/ref/ref_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rocmforge/quant.h"

/* ---- norms ------------------------------------------------------------------------------- */

void rf_ref_rmsnorm(float *y, const float *x, const float *w, int64_t rows, int64_t n, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        /* the scale is computed before any write, so y may alias x */
        double inv = 1.0 / sqrt(ss / (double)n + (double)eps);
        for (int64_t i = 0; i < n; i++) yr[i] = (float)(xr[i] * inv * (w ? w[i] : 1.0f));
    }
}

void rf_ref_layernorm(float *y, const float *x, const float *w, const float *b, int64_t rows,
                      int64_t n, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        double mean = 0;
        for (int64_t i = 0; i < n; i++) mean += xr[i];
        mean /= (double)n;
        double var = 0;
        for (int64_t i = 0; i < n; i++) var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        var /= (double)n;
        double inv = 1.0 / sqrt(var + (double)eps);
        for (int64_t i = 0; i < n; i++)
            yr[i] = (float)(((double)xr[i] - mean) * inv * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f));
    }
}

/* ---- softmax ----------------------------------------------------------------------------- */

void rf_ref_softmax(float *y, const float *x, int64_t rows, int64_t n, float scale) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        bool has_nan = false;
        double mx = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            if (isnan(xr[i])) has_nan = true;
            else if (xr[i] != -INFINITY && (double)scale * xr[i] > mx) mx = (double)scale * xr[i];
        }
        if (has_nan) {
            for (int64_t i = 0; i < n; i++) yr[i] = NAN;
            continue;
        }
        if (mx == -INFINITY) { /* every entry masked: zeros, not 0/0 */
            for (int64_t i = 0; i < n; i++) yr[i] = 0.0f;
            continue;
        }
        /* A -inf entry is masked (probability 0) whatever the scale. If the max is +inf, the
         * limit puts equal mass on the +inf entries and none elsewhere. */
        bool inf_max = isinf(mx);
        double sum = 0;
        for (int64_t i = 0; i < n; i++) {
            double e;
            if (xr[i] == -INFINITY) e = 0;
            else if (inf_max) e = ((double)scale * xr[i] == mx) ? 1.0 : 0.0;
            else e = exp((double)scale * xr[i] - mx);
            yr[i] = (float)e; /* store then rescale: y may alias x, x[i] is not read again */
            sum += e;
        }
        for (int64_t i = 0; i < n; i++) yr[i] = (float)(yr[i] / sum);
    }
}

/* ---- elementwise ------------------------------------------------------------------------- */

void rf_ref_scale(float *y, const float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}
void rf_ref_add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
void rf_ref_mul(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

void rf_ref_causal_mask(float *x, int64_t n_q, int64_t n_kv, int64_t pos0, int64_t window) {
    for (int64_t i = 0; i < n_q; i++) {
        int64_t p = pos0 + i;
        for (int64_t j = 0; j < n_kv; j++) {
            if (j > p || (window > 0 && j <= p - window)) x[i * n_kv + j] = -INFINITY;
        }
    }
}

float rf_ref_silu(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }

float rf_ref_gelu_tanh(float x) {
    double d = x;
    const double c = 0.79788456080286535588; /* sqrt(2/pi) */
    return (float)(0.5 * d * (1.0 + tanh(c * (d + 0.044715 * d * d * d))));
}

void rf_ref_swiglu(float *y, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)((double)rf_ref_silu(gate[i]) * up[i]);
}
void rf_ref_geglu(float *y, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)((double)rf_ref_gelu_tanh(gate[i]) * up[i]);
}
void rf_ref_swiglu_oai(float *y, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float lim = RF_OAI_SWIGLU_LIMIT; /* NaN passes through the clamps, as in ggml */
        const double g = lim < gate[i] ? lim : gate[i];
        const double u = up[i] < -lim ? -lim : (lim < up[i] ? lim : up[i]);
        y[i] = (float)(g / (1.0 + exp(-(double)RF_OAI_SWIGLU_ALPHA * g)) * (u + 1.0));
    }
}

/* ---- RoPE -------------------------------------------------------------------------------- */

void rf_ref_rope(float *x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                 int64_t stride_t, int64_t stride_h, const int32_t *pos, float freq_base,
                 float freq_scale, const float *freq_factors, int mode) {
    (void)head_dim; /* dims >= n_rot pass through untouched */
    int64_t half = n_rot / 2;
    for (int64_t t = 0; t < n_tokens; t++) {
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = x + t * stride_t + h * stride_h;
            for (int64_t i = 0; i < half; i++) {
                double theta = (double)pos[t] * (double)freq_scale *
                               pow((double)freq_base, -2.0 * (double)i / (double)n_rot);
                if (freq_factors) theta /= (double)freq_factors[i];
                double c = cos(theta), s = sin(theta);
                int64_t i0 = mode == RF_ROPE_NEOX ? i : 2 * i;
                int64_t i1 = mode == RF_ROPE_NEOX ? i + half : 2 * i + 1;
                double a = v[i0], b = v[i1];
                v[i0] = (float)(a * c - b * s);
                v[i1] = (float)(a * s + b * c);
            }
        }
    }
}

/* ---- matmul / get_rows ------------------------------------------------------------------- */

/* One row of n elements of type t at `src` -> f32. F32 is copied here so that the op works on
 * plain floats without the type table. */
static rf_status ref_row_to_f32(rf_type t, const void *src, float *dst, int64_t n) {
    if (t == RF_TYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return RF_OK;
    }
    return rf_dequantize_row(t, src, dst, n);
}

static rf_status ref_row_bytes(rf_type t, int64_t n, size_t *out) {
    if (t == RF_TYPE_F32) {
        *out = (size_t)n * sizeof(float);
        return RF_OK;
    }
    return rf_row_size(t, n, out);
}

rf_status rf_ref_matmul(float *y, const void *w, rf_type wtype, const float *x, int64_t n_tokens,
                        int64_t n_in, int64_t n_out) {
    if (n_in <= 0 || n_out < 0 || n_tokens < 0)
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_ref_matmul: bad shape n_in=%lld n_out=%lld",
                            (long long)n_in, (long long)n_out);
    size_t rb;
    rf_status st = ref_row_bytes(wtype, n_in, &rb);
    if (st) return st;
    float *row = malloc((size_t)n_in * sizeof(float));
    if (!row) return rf_set_error(RF_ERR_OOM, "rf_ref_matmul: out of memory for a row of %lld",
                                  (long long)n_in);
    for (int64_t o = 0; o < n_out; o++) {
        st = ref_row_to_f32(wtype, (const uint8_t *)w + (size_t)o * rb, row, n_in);
        if (st) break;
        for (int64_t t = 0; t < n_tokens; t++) {
            const float *xt = x + t * n_in;
            double acc = 0;
            for (int64_t i = 0; i < n_in; i++) acc += (double)row[i] * xt[i];
            y[t * n_out + o] = (float)acc;
        }
    }
    free(row);
    return st;
}

rf_status rf_ref_get_rows(float *y, const void *w, rf_type wtype, const int32_t *ids,
                          int64_t n_ids, int64_t n_in, int64_t n_rows) {
    size_t rb;
    rf_status st = ref_row_bytes(wtype, n_in, &rb);
    if (st) return st;
    for (int64_t t = 0; t < n_ids; t++) {
        if (ids[t] < 0 || ids[t] >= n_rows)
            return rf_set_error(RF_ERR_RANGE, "rf_ref_get_rows: id %d at %lld outside [0, %lld)",
                                ids[t], (long long)t, (long long)n_rows);
        st = ref_row_to_f32(wtype, (const uint8_t *)w + (size_t)ids[t] * rb, y + t * n_in, n_in);
        if (st) return st;
    }
    return RF_OK;
}

rf_status rf_ref_get_rows_part(float *y, const void *w, rf_type wtype, const int32_t *ids, int64_t n_ids,
                               int64_t n_in, int64_t r0, int64_t n_rows, int64_t n_all) {
    for (int64_t t = 0; t < n_ids; t++) {
        if (ids[t] < 0 || ids[t] >= n_all)
            return rf_set_error(RF_ERR_RANGE, "rf_ref_get_rows_part: id %d at %lld outside [0, %lld)", ids[t],
                                (long long)t, (long long)n_all);
        const int32_t local = (int32_t)(ids[t] - r0);
        if (ids[t] < r0 || ids[t] >= r0 + n_rows) {
            memset(y + t * n_in, 0, (size_t)n_in * sizeof(float));
            continue;
        }
        rf_status st = rf_ref_get_rows(y + t * n_in, w, wtype, &local, 1, n_in, n_rows);
        if (st) return st;
    }
    return RF_OK;
}

/* ---- attention --------------------------------------------------------------------------- */

/* Softmax of n scores in place with one more logit `sink` that has no value row (attention
 * sinks): the sink joins the max and the denominator only. Masked (-inf) scores get 0. */
static void ref_softmax_sink(float *s, int64_t n, float sink) {
    double mx = sink;
    for (int64_t j = 0; j < n; j++)
        if (s[j] > mx) mx = s[j];
    double sum = exp((double)sink - mx);
    for (int64_t j = 0; j < n; j++) sum += s[j] == -INFINITY ? 0.0 : exp((double)s[j] - mx);
    for (int64_t j = 0; j < n; j++) s[j] = s[j] == -INFINITY ? 0.0f : (float)(exp((double)s[j] - mx) / sum);
}

void rf_ref_attention(float *out, const float *q, const float *k, const float *v, int64_t n_q,
                      int64_t n_kv, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                      float scale, bool causal, int64_t pos0, int64_t window, float softcap,
                      const float *sinks) {
    int64_t group = n_head / n_head_kv;
    float *s = malloc((size_t)(n_kv > 0 ? n_kv : 1) * sizeof(float));
    if (!s) { /* no status to return: leave a NaN-free but recognisable result */
        for (int64_t i = 0; i < n_q * n_head * head_dim; i++) out[i] = NAN;
        return;
    }
    for (int64_t i = 0; i < n_q; i++) {
        for (int64_t h = 0; h < n_head; h++) {
            int64_t hk = h / group;
            const float *qi = q + (i * n_head + h) * head_dim;
            for (int64_t j = 0; j < n_kv; j++) {
                const float *kj = k + (j * n_head_kv + hk) * head_dim;
                double d = 0;
                for (int64_t c = 0; c < head_dim; c++) d += (double)qi[c] * kj[c];
                d *= scale;
                if (softcap > 0) d = softcap * tanh(d / softcap);
                s[j] = (float)d;
                if (causal) {
                    int64_t p = pos0 + i;
                    if (j > p || (window > 0 && j <= p - window)) s[j] = -INFINITY;
                }
            }
            if (sinks) ref_softmax_sink(s, n_kv, sinks[h]);
            else rf_ref_softmax(s, s, 1, n_kv, 1.0f);
            float *o = out + (i * n_head + h) * head_dim;
            for (int64_t c = 0; c < head_dim; c++) {
                double acc = 0;
                for (int64_t j = 0; j < n_kv; j++)
                    if (s[j] != 0.0f) acc += (double)s[j] * v[(j * n_head_kv + hk) * head_dim + c];
                o[c] = (float)acc;
            }
        }
    }
    free(s);
}

rf_status rf_ref_paged_attention(float *out, const float *q, const float *k, const float *v,
                                 int64_t n_tokens, const int32_t *pos, const int32_t *seq,
                                 const int32_t *block_table, int64_t max_blocks, int64_t block_size,
                                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                                 int64_t window, float softcap, const float *sinks) {
    int64_t kvd = n_head_kv * head_dim;
    for (int64_t t = 0; t < n_tokens; t++) {
        int64_t p = pos[t], n_kv = p + 1;
        float *kg = malloc((size_t)(n_kv * kvd) * sizeof(float)), *vg = malloc((size_t)(n_kv * kvd) * sizeof(float));
        if (!kg || !vg) {
            free(kg);
            free(vg);
            return rf_set_error(RF_ERR_OOM, "rf_ref_paged_attention: out of memory");
        }
        for (int64_t j = 0; j < n_kv; j++) { /* gather the sequence's keys 0..p in order */
            int64_t row = (int64_t)block_table[seq[t] * max_blocks + j / block_size] * block_size + j % block_size;
            memcpy(kg + j * kvd, k + row * kvd, (size_t)kvd * sizeof(float));
            memcpy(vg + j * kvd, v + row * kvd, (size_t)kvd * sizeof(float));
        }
        rf_ref_attention(out + t * n_head * head_dim, q + t * n_head * head_dim, kg, vg, 1, n_kv, n_head,
                         n_head_kv, head_dim, scale, true, p, window, softcap, sinks);
        free(kg);
        free(vg);
    }
    return RF_OK;
}

/* ---- sampling ---------------------------------------------------------------------------- */

int32_t rf_ref_argmax(const float *logits, int64_t n) {
    int32_t best = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(logits[i])) continue;
        if (best < 0 || logits[i] > logits[best]) best = (int32_t)i;
    }
    return best;
}

typedef struct { float v; int32_t id; } ref_cand;

/* descending value, ties by lower id */
static int ref_cand_cmp(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->v > b->v) return -1;
    if (a->v < b->v) return 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* The distribution rf_ref_sample draws from: candidates *pc sorted (descending, ties by id),
 * the first m kept after top-k / min-p / top-p, with unnormalised probabilities *ppr (double)
 * whose sum over the kept ones is *ptotal. Returns m, 0 when nothing is valid (all NaN), -1 on
 * allocation failure; a degenerate distribution (+-inf leading value) returns 1 with pr[0] = 1.
 * The caller frees *pc and *ppr. */
static int64_t ref_sample_dist(const float *logits, int64_t n, const rf_sample_params *p,
                               ref_cand **pc, double **ppr, double *ptotal) {
    ref_cand *c = malloc((size_t)(n > 0 ? n : 1) * sizeof(ref_cand));
    double *pr = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    *pc = c, *ppr = pr, *ptotal = 0;
    if (!c || !pr) return -1;
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(logits[i])) continue; /* NaN is never chosen */
        c[m].v = logits[i] / p->temperature;
        c[m].id = (int32_t)i;
        m++;
    }
    if (m == 0) return 0;
    qsort(c, (size_t)m, sizeof(ref_cand), ref_cand_cmp);
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    if (c[0].v == -INFINITY || c[0].v == INFINITY) { /* degenerate: mass on the first */
        pr[0] = *ptotal = 1;
        return 1;
    }
    double total = 0;
    for (int64_t i = 0; i < m; i++) total += pr[i] = exp((double)c[i].v - (double)c[0].v);
    for (int64_t i = 0; i < m; i++) pr[i] /= total;
    if (p->min_p > 0) { /* sorted descending: cut at the first p < min_p * p_max */
        double thr = (double)p->min_p * pr[0];
        int64_t keep = 1;
        while (keep < m && pr[keep] >= thr) keep++;
        m = keep;
    }
    if (p->top_p < 1) {
        double cum = 0;
        int64_t keep = 0;
        while (keep < m) {
            cum += pr[keep++];
            if (cum >= (double)p->top_p) break;
        }
        m = keep;
    }
    total = 0;
    for (int64_t i = 0; i < m; i++) total += pr[i];
    *ptotal = total;
    return m;
}

int32_t rf_ref_sample(const float *logits, int64_t n, const rf_sample_params *p, float u) {
    if (!p || p->temperature <= 0) return rf_ref_argmax(logits, n);
    ref_cand *c;
    double *pr, total;
    const int64_t m = ref_sample_dist(logits, n, p, &c, &pr, &total);
    int32_t pick = -1;
    if (m < 0) pick = rf_ref_argmax(logits, n);
    else if (m > 0) {
        double target = (double)u * total, cum = 0;
        pick = c[m - 1].id; /* rounding fallback: u close to 1 */
        for (int64_t i = 0; i < m; i++) {
            cum += pr[i];
            if (cum > target) {
                pick = c[i].id;
                break;
            }
        }
    }
    free(c);
    free(pr);
    return pick;
}

bool rf_ref_sample_interval(const float *logits, int64_t n, const rf_sample_params *p,
                            int32_t id, double *lo, double *hi) {
    if (!p || p->temperature <= 0) {
        *lo = 0, *hi = 1;
        return id == rf_ref_argmax(logits, n);
    }
    ref_cand *c;
    double *pr, total;
    const int64_t m = ref_sample_dist(logits, n, p, &c, &pr, &total);
    bool kept = false;
    double cum = 0;
    for (int64_t i = 0; i < m && !kept; i++) {
        if (c[i].id == id) {
            *lo = cum / total, *hi = (cum + pr[i]) / total;
            kept = true;
        }
        cum += pr[i];
    }
    free(c);
    free(pr);
    return kept;
}

/* ---- mixture of experts ------------------------------------------------------------------ */

rf_status rf_ref_moe_route(int32_t *ids, float *wts, const float *logits, const float *sel_bias, int64_t n,
                           int64_t n_expert, int64_t k, rf_moe_gating gating, bool norm, float scale) {
    if (n_expert < 1 || k < 1 || k > n_expert)
        return rf_set_error(RF_ERR_INVALID_ARG, "moe_route: top-%lld of %lld experts (1 <= k <= n_expert)",
                            (long long)k, (long long)n_expert);
    if (gating != RF_MOE_SOFTMAX && gating != RF_MOE_SIGMOID && gating != RF_MOE_SOFTMAX_TOPK)
        return rf_set_error(RF_ERR_INVALID_ARG, "moe_route: unknown gating %d", (int)gating);
    float *p = malloc((size_t)n_expert * sizeof(float));
    bool *taken = malloc((size_t)n_expert);
    if (!p || !taken) {
        free(p);
        free(taken);
        return rf_set_error(RF_ERR_OOM, "moe_route: out of memory for %lld experts", (long long)n_expert);
    }
    for (int64_t t = 0; t < n; t++) {
        const float *lg = logits + t * n_expert;
        if (gating == RF_MOE_SOFTMAX) rf_ref_softmax(p, lg, 1, n_expert, 1.0f);
        else if (gating == RF_MOE_SIGMOID)
            for (int64_t e = 0; e < n_expert; e++) p[e] = (float)(1.0 / (1.0 + exp(-(double)lg[e])));
        else memcpy(p, lg, (size_t)n_expert * sizeof(float));
        memset(taken, 0, (size_t)n_expert);
        int32_t *it = ids + t * k;
        float *wt = wts + t * k;
        /* k passes of "the largest not yet taken": strict > keeps the lower id on ties */
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            float bv = 0;
            for (int64_t e = 0; e < n_expert; e++) {
                if (taken[e]) continue;
                float v = p[e] + (sel_bias ? sel_bias[e] : 0.0f);
                if (best < 0 || v > bv) best = e, bv = v;
            }
            taken[best] = true;
            it[j] = (int32_t)best;
            wt[j] = p[best];
        }
        if (gating == RF_MOE_SOFTMAX_TOPK) rf_ref_softmax(wt, wt, 1, k, 1.0f);
        if (norm) {
            double sum = 0;
            for (int64_t j = 0; j < k; j++) sum += wt[j];
            if (sum < 6.103515625e-5) sum = 6.103515625e-5;
            for (int64_t j = 0; j < k; j++) wt[j] = (float)(wt[j] / sum);
        }
        for (int64_t j = 0; j < k; j++) wt[j] *= scale;
    }
    free(p);
    free(taken);
    return RF_OK;
}

rf_status rf_ref_matmul_id(float *y, const void *w, rf_type wtype, int64_t n_in, int64_t n_out, int64_t n_expert,
                           const float *x, bool x_per_slot, const int32_t *ids, const float *bias, int64_t n,
                           int64_t k) {
    size_t rb;
    rf_status st = ref_row_bytes(wtype, n_in, &rb);
    if (st) return st;
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e = ids[t * k + j];
            if (e < 0 || e >= n_expert)
                return rf_set_error(RF_ERR_RANGE, "matmul_id: expert id %d of token %lld outside [0, %lld)", e,
                                    (long long)t, (long long)n_expert);
            const float *xr = x + (x_per_slot ? t * k + j : t) * n_in;
            float *yr = y + (t * k + j) * n_out;
            st = rf_ref_matmul(yr, (const uint8_t *)w + (size_t)e * n_out * rb, wtype, xr, 1, n_in, n_out);
            if (st) return st;
            if (bias)
                for (int64_t o = 0; o < n_out; o++) yr[o] += bias[(int64_t)e * n_out + o];
        }
    return RF_OK;
}

void rf_ref_moe_shared_gate(float *y, const float *z, const float *h, const float *w, int64_t n, int64_t m) {
    for (int64_t t = 0; t < n; t++) {
        float g = 0;
        for (int64_t i = 0; i < m; i++) g += w[i] * h[t * m + i];
        const float s = 1.0f / (1.0f + expf(-g)); /* ggml's sigmoid */
        for (int64_t i = 0; i < m; i++) y[t * m + i] += z[t * m + i] * s;
    }
}

void rf_ref_moe_combine(float *y, const float *z, const float *wts, int64_t n, int64_t k, int64_t m) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < m; i++) {
            float acc = 0; /* f32 in slot order, as the contract fixes the order */
            for (int64_t j = 0; j < k; j++) acc += wts[t * k + j] * z[(t * k + j) * m + i];
            y[t * m + i] = acc;
        }
}
