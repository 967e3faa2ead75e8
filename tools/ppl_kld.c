/* ppl_kld.c — llama-perplexity's KL-divergence base file (write and read) and the statistics of
 * our logits against it: mean KLD with its standard error, Δp, and the same-top-token rate. */
#include "ppl_kld.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char k_magic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

/* Two f32 in front, the vocabulary rounded up to an even count (the file keeps 4-byte rows). */
size_t rf_kld_record_len(int32_t n_vocab) { return 2 * (((size_t)n_vocab + 1) / 2) + 4; }

int rf_kld_write_header(FILE *f, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens) {
    uint32_t c = (uint32_t)n_ctx;
    if (fwrite(k_magic, 1, 8, f) != 8 || fwrite(&c, 4, 1, f) != 1 || fwrite(&n_vocab, 4, 1, f) != 1 ||
        fwrite(&n_chunk, 4, 1, f) != 1)
        return -1;
    size_t n = (size_t)n_chunk * (size_t)n_ctx;
    return fwrite(tokens, sizeof(int32_t), n, f) == n ? 0 : -1;
}

/* log-sum-exp of logits - max, in double; *imax = the first index of the maximum. */
static double lse_shifted(const float *lg, int32_t n, float *mx_out, int32_t *imax) {
    float mx = lg[0];
    int32_t im = 0;
    for (int32_t i = 1; i < n; i++)
        if (lg[i] > mx) mx = lg[i], im = i;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)lg[i] - mx);
    *mx_out = mx;
    if (imax) *imax = im;
    return log(sum);
}

void rf_kld_encode(const float *lg, int32_t n_vocab, uint16_t *rec) {
    float mx, mn = lg[0];
    double lse = lse_shifted(lg, n_vocab, &mx, NULL);
    for (int32_t i = 1; i < n_vocab; i++) mn = lg[i] < mn ? lg[i] : mn;
    if (mn < mx - 16) mn = mx - 16;
    float d[2] = {(mx - mn) / 65535.f, (float)((double)mn - mx - lse)};
    memcpy(rec, d, sizeof d);
    uint16_t *q = rec + 4;
    if (d[0] == 0) {
        memset(q, 0, (size_t)n_vocab * sizeof(uint16_t));
        return;
    }
    float inv = 1 / d[0];
    for (int32_t i = 0; i < n_vocab; i++) {
        float v = lg[i] > mn ? nearbyintf(inv * (lg[i] - mn)) : 0;
        q[i] = (uint16_t)(v > 65535 ? 65535 : v);
    }
}

int rf_kld_read_header(FILE *f, int32_t *n_ctx, int32_t *n_vocab, int32_t *n_chunk, int32_t **tokens, char *msg,
                       size_t msg_len) {
    char m[8];
    uint32_t c;
    *tokens = NULL;
    if (fread(m, 1, 8, f) != 8 || memcmp(m, k_magic, 8)) {
        snprintf(msg, msg_len, "not a log-probability file (no '_logits_' magic)");
        return -1;
    }
    if (fread(&c, 4, 1, f) != 1 || fread(n_vocab, 4, 1, f) != 1 || fread(n_chunk, 4, 1, f) != 1) {
        snprintf(msg, msg_len, "truncated header");
        return -1;
    }
    if (c < 4 || c > (1u << 24) || *n_vocab < 2 || *n_vocab > (1 << 26) || *n_chunk < 1 || *n_chunk > (1 << 20) ||
        (uint64_t)c * (uint64_t)*n_chunk > (1ull << 30)) {
        snprintf(msg, msg_len, "implausible header: n_ctx %u, n_vocab %d, n_chunk %d", c, *n_vocab, *n_chunk);
        return -1;
    }
    *n_ctx = (int32_t)c;
    size_t n = (size_t)c * (size_t)*n_chunk;
    *tokens = malloc(n * sizeof(int32_t));
    if (!*tokens || fread(*tokens, sizeof(int32_t), n, f) != n) {
        snprintf(msg, msg_len, *tokens ? "truncated token list" : "out of memory");
        free(*tokens);
        *tokens = NULL;
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((*tokens)[i] < 0 || (*tokens)[i] >= *n_vocab) {
            snprintf(msg, msg_len, "token %d at %zu outside the vocabulary of %d", (*tokens)[i], i, *n_vocab);
            free(*tokens);
            *tokens = NULL;
            return -1;
        }
    return 0;
}

int rf_kld_add(rf_kld_stats *st, const float *lg, int32_t n_vocab, const uint16_t *rec, int32_t tok) {
    if (st->count == st->cap) {
        int64_t cap = st->cap ? 2 * st->cap : 4096;
        float *a = realloc(st->kld_values, (size_t)cap * sizeof(float));
        if (a) st->kld_values = a;
        float *b = a ? realloc(st->p_diff_values, (size_t)cap * sizeof(float)) : NULL;
        if (b) st->p_diff_values = b;
        if (!a || !b) return -1;
        st->cap = cap;
    }
    float mx;
    int32_t imax;
    double lse = lse_shifted(lg, n_vocab, &mx, &imax);
    double norm = (double)mx + lse; /* log p_i = lg[i] - norm */
    float d[2];
    memcpy(d, rec, sizeof d);
    const uint16_t *q = rec + 4;
    double nll = norm - lg[tok];
    double nll_base = -((double)d[0] * q[tok] + d[1]);
    double kld = 0, lb_max = 0;
    int32_t imax_base = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        double lb = (double)d[0] * q[i] + d[1];
        if (i == 0 || lb > lb_max) lb_max = lb, imax_base = i;
        /* the base stores nothing below max - 16: those terms are left out, as llama.cpp does */
        if (lb > -16) kld += exp(lb) * (lb - (lg[i] - norm));
    }
    double p_diff = exp(-nll) - exp(-nll_base);
    st->sum_nll += nll;
    st->sum_nll2 += nll * nll;
    st->sum_nll_base += nll_base;
    st->sum_nll_base2 += nll_base * nll_base;
    st->sum_nll_nll_base += nll * nll_base;
    st->sum_kld += kld;
    st->sum_kld2 += kld * kld;
    st->sum_p_diff += p_diff;
    st->sum_p_diff2 += p_diff * p_diff;
    st->sum_p_diff4 += p_diff * p_diff * p_diff * p_diff;
    if (fabs(p_diff) > st->max_p_diff) st->max_p_diff = fabs(p_diff);
    st->n_same_top += imax == imax_base;
    st->kld_values[st->count] = (float)kld;
    st->p_diff_values[st->count] = (float)p_diff;
    st->count++;
    return 0;
}

/* Mean of n samples and the standard error of that mean (0 for fewer than 11 samples). */
static void mean_se(double sum, double sum2, int64_t n, double *mean, double *se) {
    *mean = n ? sum / (double)n : 0;
    double var = n ? sum2 / (double)n - *mean * *mean : 0;
    *se = var > 0 && n > 10 ? sqrt(var / (double)(n - 1)) : 0;
}

static double cov_of_means(const rf_kld_stats *st) {
    double n = (double)st->count;
    if (st->count < 10) return 0;
    return (st->sum_nll_nll_base / n - (st->sum_nll / n) * (st->sum_nll_base / n)) / (n - 1);
}

void rf_kld_print_header(FILE *out) {
    fprintf(out, "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                 "Δp RMS            Same top p\n");
}

void rf_kld_print_chunk(FILE *out, const rf_kld_stats *st, int32_t chunk) {
    double l, le, b, be, k, ke, m2, m2e;
    mean_se(st->sum_nll, st->sum_nll2, st->count, &l, &le);
    mean_se(st->sum_nll_base, st->sum_nll_base2, st->count, &b, &be);
    mean_se(st->sum_kld, st->sum_kld2, st->count, &k, &ke);
    mean_se(st->sum_p_diff2, st->sum_p_diff4, st->count, &m2, &m2e);
    double r = sqrt(le * le + be * be - 2 * cov_of_means(st));
    double rms = sqrt(m2), rms_e = rms > 0 ? 0.5 / rms * m2e : 0;
    double top = (double)st->n_same_top / (double)st->count;
    double top_e = st->count > 1 ? sqrt(top * (1 - top) / (double)(st->count - 1)) : 0;
    fprintf(out, "%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
            chunk, exp(l), exp(l) * le, l - b, isnan(r) ? 0 : r, k, ke, 100 * rms, 100 * rms_e, 100 * top, 100 * top_e);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between the two nearest order statistics of sorted v. */
static double pct(const float *v, int64_t n, double f) {
    double p = f * (double)(n - 1);
    int64_t i = (int64_t)p;
    p -= (double)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

void rf_kld_print_final(FILE *out, rf_kld_stats *st) {
    int64_t n = st->count;
    if (n < 2) return;
    qsort(st->kld_values, (size_t)n, sizeof(float), cmp_float);
    qsort(st->p_diff_values, (size_t)n, sizeof(float), cmp_float);
    double l, le, b, be, k, ke, pd, pde, m2, m2e;
    mean_se(st->sum_nll, st->sum_nll2, n, &l, &le);
    mean_se(st->sum_nll_base, st->sum_nll_base2, n, &b, &be);
    mean_se(st->sum_kld, st->sum_kld2, n, &k, &ke);
    mean_se(st->sum_p_diff, st->sum_p_diff2, n, &pd, &pde);
    mean_se(st->sum_p_diff2, st->sum_p_diff4, n, &m2, &m2e);
    double cov = cov_of_means(st);
    double r = sqrt(fmax(0, le * le + be * be - 2 * cov));
    fprintf(out, "====== Perplexity statistics ======\n");
    fprintf(out, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", exp(l), exp(l) * le);
    fprintf(out, "Mean PPL(base)                : %10.6f ± %10.6f\n", exp(b), exp(b) * be);
    if (le > 0 && be > 0) fprintf(out, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * cov / (le * be));
    fprintf(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", l - b, r);
    fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(l - b), exp(l - b) * r);
    fprintf(out, "\n====== KL divergence statistics ======\n");
    fprintf(out, "Mean    KLD: %10.6f ± %10.6f\n", k, ke);
    const float *kv = st->kld_values, *pv = st->p_diff_values;
    fprintf(out, "Maximum KLD: %10.6f\n", kv[n - 1]);
    fprintf(out, "99.9%%   KLD: %10.6f\n", pct(kv, n, 0.999));
    fprintf(out, "99.0%%   KLD: %10.6f\n", pct(kv, n, 0.99));
    fprintf(out, "95.0%%   KLD: %10.6f\n", pct(kv, n, 0.95));
    fprintf(out, "Median  KLD: %10.6f\n", pct(kv, n, 0.5));
    fprintf(out, "Minimum KLD: %10.6f\n", kv[0]);
    fprintf(out, "\n====== Token probability statistics ======\n");
    fprintf(out, "Mean    Δp: %6.3f ± %5.3f %%\n", 100 * pd, 100 * pde);
    fprintf(out, "Maximum Δp: %6.3f%%\n", 100 * pv[n - 1]);
    fprintf(out, "Median  Δp: %6.3f%%\n", 100 * pct(pv, n, 0.5));
    fprintf(out, "Minimum Δp: %6.3f%%\n", 100 * pv[0]);
    double rms = sqrt(m2);
    fprintf(out, "RMS Δp    : %6.3f ± %5.3f %%\n", 100 * rms, rms > 0 ? 100 * 0.5 / rms * m2e : 0);
    double top = (double)st->n_same_top / (double)n;
    fprintf(out, "Same top p: %6.3f ± %5.3f %%\n", 100 * top, 100 * sqrt(top * (1 - top) / (double)(n - 1)));
}

void rf_kld_free(rf_kld_stats *st) {
    free(st->kld_values);
    free(st->p_diff_values);
    memset(st, 0, sizeof *st);
}
