/* cpu_moe.c — the CPU backend's mixture-of-experts ops (contracts in backend.h): the router is
 * the reference itself (a few hundred floats per token), the indirect product reuses the
 * matmul's activation quantization and row-dot kernels threaded over (slot, block of output
 * rows), the combine is a weighted sum in slot order. Plain on purpose: the GPU's oracle. */
#include "backend/cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

#include "backend/ref/ref_ops.h"
#include "core/knobs.h"
#include "core/test_hooks.h"
#include "quant/quant_impl.h" /* rf_vec_dot4_for */
#include "rocmforge/quant.h"

/* Test hook (test_hooks.h moe_gap_min): the gap between each token's k-th and (k+1)-th largest
 * logit over its RMS logit, the smallest into *gap. */
static void router_gap(float *gap, const float *logits, int64_t n, int64_t n_expert, int64_t k) {
    for (int64_t t = 0; t < n; t++) {
        const float *lg = logits + t * n_expert;
        float top[65];
        int64_t kk = k + 1 < 65 ? k + 1 : 65, have = 0;
        double ss = 0;
        for (int64_t e = 0; e < n_expert; e++) {
            ss += (double)lg[e] * lg[e];
            int64_t i = have < kk ? have++ : kk; /* insertion into the kk largest, descending */
            if (i == kk && lg[e] <= top[kk - 1]) continue;
            if (i == kk) i = kk - 1;
            while (i > 0 && top[i - 1] < lg[e]) top[i] = top[i - 1], i--;
            top[i] = lg[e];
        }
        const double rms = sqrt(ss / (double)n_expert);
        if (kk == k + 1 && rms > 0) {
            const float g = (float)((top[k - 1] - top[k]) / rms);
            if (g < *gap) *gap = g;
        }
    }
}

rf_status rf_cpu_moe_route(rf_backend *be, rf_tensor *ids, rf_tensor *wts, const rf_tensor *logits,
                               const rf_tensor *sel_bias, int64_t n, int64_t n_expert, int64_t k,
                               rf_moe_gating gating, bool norm, float scale) {
    (void)be;
    if (ids->type != RF_TYPE_I32 || wts->type != RF_TYPE_F32)
        return rf_set_error(RF_ERR_INVALID_ARG, "moe_route: ids must be i32 and weights f32 (got %s, %s)",
                            rf_type_name(ids->type), rf_type_name(wts->type));
    const rf_test_hooks *h = rf_test_hooks_get();
    if (h && h->moe_gap_min && gating != RF_MOE_SIGMOID && k < n_expert) router_gap(h->moe_gap_min, logits->data, n, n_expert, k);
    return rf_ref_moe_route(ids->data, wts->data, logits->data, sel_bias ? sel_bias->data : NULL, n, n_expert, k,
                            gating, norm, scale);
}

typedef struct mid_job {
    float *y;
    const rf_tensor *w;
    int64_t n_in, n_out, k, n_slots, nblk;
    bool x_per_slot;
    const int32_t *ids;
    const float *bias;
    const float *x;       /* f32 activations (fallback path, or vec_dot_type f32) */
    rf_type xq_type;
    size_t xq_row;
    char *xq;             /* converted activations, one row per x row */
    int64_t nx;           /* rows of x */
    rf_vec_dot_fn dot;
    rf_vec_dot4_fn dot4;
    float *scratch;       /* fallback: a dequantized row per thread */
} mid_job;

static void mid_quantize(void *ctx, int ith, int nth) {
    mid_job *j = ctx;
    int64_t lo, hi;
    rf_pool_range(j->nx, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + r * j->n_in;
        void *dst = j->xq + (size_t)r * j->xq_row;
        if (j->xq_type == RF_TYPE_Q8_0) rf_cpu_act_q8(x, dst, j->n_in, false);
        else if (j->xq_type == RF_TYPE_Q8_1) rf_cpu_act_q8(x, dst, j->n_in, true);
        else rf_quantize_row(j->xq_type, x, dst, j->n_in);
    }
}

/* Work item i: slot i / nblk (token t = slot / k, its j-th expert), output rows of block
 * i % nblk (16 rows, so threads write separate cache lines of y). */
static void mid_worker(void *ctx, int ith, int nth) {
    mid_job *j = ctx;
    int64_t lo, hi;
    rf_pool_range(j->n_slots * j->nblk, ith, nth, &lo, &hi);
    const size_t wrow = j->w->nb1;
    float *row = j->scratch ? j->scratch + (size_t)ith * ((j->n_in + 15) & ~15) : NULL;
    for (int64_t i = lo; i < hi; i++) {
        const int64_t slot = i / j->nblk, o0 = (i % j->nblk) * 16;
        const int64_t o1 = o0 + 16 < j->n_out ? o0 + 16 : j->n_out;
        const int64_t e = j->ids[slot], xr = j->x_per_slot ? slot : slot / j->k;
        const char *wbase = (const char *)j->w->data + (size_t)(e * j->n_out) * wrow;
        float *y = j->y + slot * j->n_out;
        int64_t o = o0;
        if (j->dot) {
            const void *xq = j->xq + (size_t)xr * j->xq_row;
            if (j->dot4)
                for (; o + 4 <= o1; o += 4) j->dot4(j->n_in, &y[o], wbase + (size_t)o * wrow, wrow, xq);
            for (; o < o1; o++) j->dot(j->n_in, &y[o], wbase + (size_t)o * wrow, xq);
        } else {
            const float *x = j->x + xr * j->n_in;
            for (; o < o1; o++) {
                const char *wr = wbase + (size_t)o * wrow;
                const float *wf = (const float *)wr;
                if (j->w->type != RF_TYPE_F32) {
                    rf_cpu_row_to_f32(j->w->type, wr, row, j->n_in);
                    wf = row;
                }
                y[o] = rf_cpu_dot_f32(wf, x, j->n_in);
            }
        }
        if (j->bias)
            for (o = o0; o < o1; o++) y[o] += j->bias[e * j->n_out + o];
    }
}

rf_status rf_cpu_matmul_id(rf_backend *be, rf_tensor *y, const rf_tensor *w, int64_t n_out, const rf_tensor *x,
                               bool x_per_slot, const rf_tensor *ids, const rf_tensor *bias, int64_t n, int64_t k) {
    rf_cpu *cpu = be->impl;
    if (ids->type != RF_TYPE_I32)
        return rf_set_error(RF_ERR_INVALID_ARG, "matmul_id: ids must be i32 (got %s)", rf_type_name(ids->type));
    if (n_out <= 0 || k <= 0 || w->ne[1] % n_out)
        return rf_set_error(RF_ERR_INVALID_ARG, "matmul_id: %lld weight rows are not experts of %lld rows (k %lld)",
                            (long long)w->ne[1], (long long)n_out, (long long)k);
    const int64_t n_expert = w->ne[1] / n_out;
    const int32_t *id = ids->data;
    for (int64_t s = 0; s < n * k; s++)
        if (id[s] < 0 || id[s] >= n_expert)
            return rf_set_error(RF_ERR_RANGE, "matmul_id: expert id %d of token %lld outside [0, %lld)", id[s],
                                (long long)(s / k), (long long)n_expert);
    mid_job j = {.y = y->data, .w = w, .n_in = w->ne[0], .n_out = n_out, .k = k, .n_slots = n * k,
                 .nblk = (n_out + 15) / 16, .x_per_slot = x_per_slot, .ids = id, .bias = bias ? bias->data : NULL,
                 .x = x->data, .nx = x_per_slot ? n * k : n};
    const rf_type_traits *tr = rf_type_info(w->type);
    static int no_vd = -1;
    if (no_vd < 0) no_vd = rf_knob_bool(RF_KNOB_CPU_F32_MATMUL); /* as matmul: the exact f32 path */
    rf_status st;
    if (!no_vd && tr && tr->vec_dot && w->type != RF_TYPE_F32) {
        j.dot = tr->vec_dot;
        j.dot4 = rf_vec_dot4_for(w->type);
        j.xq_type = tr->vec_dot_type;
        if (j.xq_type == RF_TYPE_F32) {
            j.xq_row = (size_t)j.n_in * sizeof(float);
            j.xq = (char *)x->data;
        } else {
            if ((st = rf_row_size(j.xq_type, j.n_in, &j.xq_row))) return st;
            j.xq_row = (j.xq_row + 63) & ~(size_t)63;
            if ((st = rf_cpu_scratch(cpu, j.xq_row * (size_t)j.nx))) return st;
            j.xq = cpu->scratch;
            if (j.nx == 1) mid_quantize(&j, 0, 1);
            else rf_pool_run(cpu->pool, mid_quantize, &j);
        }
    } else {
        if ((st = rf_cpu_scratch(cpu, (size_t)((j.n_in + 15) & ~15) * cpu->n_threads * sizeof(float)))) return st;
        j.scratch = cpu->scratch;
    }
    rf_pool_run(cpu->pool, mid_worker, &j);
    return RF_OK;
}

typedef struct comb_job {
    float *y;
    const float *z, *w;
    int64_t k, m, n;
} comb_job;

static void comb_worker(void *ctx, int ith, int nth) {
    comb_job *j = ctx;
    int64_t lo, hi;
    rf_pool_range(j->n, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++)
        for (int64_t i = 0; i < j->m; i++) {
            float acc = 0; /* slot order 0..k-1, as the contract fixes it */
            for (int64_t s = 0; s < j->k; s++) acc += j->w[t * j->k + s] * j->z[(t * j->k + s) * j->m + i];
            j->y[t * j->m + i] = acc;
        }
}

rf_status rf_cpu_moe_combine(rf_backend *be, rf_tensor *y, const rf_tensor *z, const rf_tensor *wts, int64_t n,
                                 int64_t k, int64_t m) {
    rf_cpu *cpu = be->impl;
    comb_job j = {y->data, z->data, wts->data, k, m, n};
    if (n > 1 && cpu->n_threads > 1) rf_pool_run(cpu->pool, comb_worker, &j);
    else comb_worker(&j, 0, 1);
    return RF_OK;
}

/* The shared expert's gate: the reference itself (n dot products of n_embd), row by row so a
 * row's value never depends on the batch. h may be a strided view. */
rf_status rf_cpu_moe_shared_gate(rf_backend *be, rf_tensor *y, const rf_tensor *z, const rf_tensor *h,
                                 const rf_tensor *w, int64_t n, int64_t m) {
    (void)be;
    if (w->type != RF_TYPE_F32 || w->ne[0] != m)
        return rf_set_error(RF_ERR_INVALID_ARG, "moe_shared_gate: the gate must be f32 [%lld]", (long long)m);
    const size_t hs = h->nb1 ? h->nb1 : (size_t)m * 4;
    for (int64_t t = 0; t < n; t++)
        rf_ref_moe_shared_gate((float *)y->data + t * m, (const float *)z->data + t * m,
                               (const float *)((const char *)h->data + (size_t)t * hs), w->data, 1, m);
    return RF_OK;
}
