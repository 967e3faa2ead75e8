/* cpu_matmul.c — the CPU backend's threaded matmul y = W·x (contract in backend.h). The
 * activations are first converted to the weight type's vec_dot_type (Q8_0/Q8_1/Q8_K as ggml
 * does, in parallel over tokens), then threads split the output rows and each weight row is
 * read once for every token of the batch with the quant table's vec_dot kernel. Types without
 * a kernel fall back to dequantize-the-row + f32 dot. */
#include "backend/cpu/cpu_backend.h"

#include <string.h>

#include "rocmforge/quant.h"

typedef struct mm_job {
    float *y;
    const rf_tensor *w;
    const float *x;
    int64_t n_tokens, n_in, n_out;
    rf_type xq_type;     /* vec_dot_type */
    size_t xq_row;       /* bytes per converted activation row */
    char *xq;            /* converted activations [n_tokens][xq_row] */
    rf_vec_dot_fn dot;
    float *scratch;      /* fallback: n_in floats per thread */
} mm_job;

static void mm_quantize(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    int64_t lo, hi;
    rf_pool_range(j->n_tokens, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++)
        rf_quantize_row(j->xq_type, j->x + t * j->n_in, j->xq + (size_t)t * j->xq_row, j->n_in);
}

/* Output rows are split in blocks of 16 so that threads stay on separate cache lines of y. */
static void mm_worker_dot(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    int64_t nblk = (j->n_out + 15) / 16, lo, hi;
    rf_pool_range(nblk, ith, nth, &lo, &hi);
    lo *= 16;
    hi = hi * 16 < j->n_out ? hi * 16 : j->n_out;
    const char *wbase = j->w->data;
    size_t wrow = j->w->nb1;
    for (int64_t o = lo; o < hi; o++) {
        const void *wr = wbase + (size_t)o * wrow;
        for (int64_t t = 0; t < j->n_tokens; t++)
            j->dot(j->n_in, &j->y[t * j->n_out + o], wr, j->xq + (size_t)t * j->xq_row);
    }
}

static void mm_worker_f32(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    int64_t lo, hi;
    rf_pool_range(j->n_out, ith, nth, &lo, &hi);
    float *row = j->scratch + (size_t)ith * ((j->n_in + 15) & ~15);
    for (int64_t o = lo; o < hi; o++) {
        const char *wr = (const char *)j->w->data + (size_t)o * j->w->nb1;
        const float *wf;
        if (j->w->type == RF_TYPE_F32) {
            wf = (const float *)wr;
        } else {
            rf_cpu_row_to_f32(j->w->type, wr, row, j->n_in);
            wf = row;
        }
        for (int64_t t = 0; t < j->n_tokens; t++)
            j->y[t * j->n_out + o] = rf_cpu_dot_f32(wf, j->x + t * j->n_in, j->n_in);
    }
}

rf_status rf_cpu_matmul(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x,
                        int64_t n_tokens) {
    rf_cpu *cpu = be->impl;
    mm_job j = {y->data, w, x->data, n_tokens, w->ne[0], w->ne[1], RF_TYPE_F32, 0, NULL, NULL, NULL};
    const rf_type_traits *tr = rf_type_info(w->type);
    if (tr && tr->vec_dot && w->type != RF_TYPE_F32) {
        j.dot = tr->vec_dot;
        j.xq_type = tr->vec_dot_type;
        if (j.xq_type == RF_TYPE_F32) {
            j.xq_row = (size_t)j.n_in * sizeof(float);
            j.xq = (char *)x->data;
            rf_pool_run(cpu->pool, mm_worker_dot, &j);
            return RF_OK;
        }
        rf_status st = rf_row_size(j.xq_type, j.n_in, &j.xq_row);
        if (st) return st;
        j.xq_row = (j.xq_row + 63) & ~(size_t)63;
        if ((st = rf_cpu_scratch(cpu, j.xq_row * (size_t)n_tokens))) return st;
        j.xq = cpu->scratch;
        if (n_tokens == 1) mm_quantize(&j, 0, 1);
        else rf_pool_run(cpu->pool, mm_quantize, &j);
        rf_pool_run(cpu->pool, mm_worker_dot, &j);
        return RF_OK;
    }
    rf_status st = rf_cpu_scratch(cpu, (size_t)((j.n_in + 15) & ~15) * cpu->n_threads * sizeof(float));
    if (st) return st;
    j.scratch = cpu->scratch;
    rf_pool_run(cpu->pool, mm_worker_f32, &j);
    return RF_OK;
}
