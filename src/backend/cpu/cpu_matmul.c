/* cpu_matmul.c — the CPU backend's threaded matmul y = W·x (contract in backend.h). The
 * activations are first converted to the weight type's vec_dot_type (Q8_0/Q8_1/Q8_K as ggml
 * does, in parallel over tokens), then threads split the output rows and each weight row is
 * read once for every token of the batch with the quant table's vec_dot kernel (4 rows per call
 * where the table has a 4-row kernel of the same numerics). Types without
 * a kernel fall back to dequantize-the-row + f32 dot. */
#include "backend/cpu/cpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_impl.h" /* rf_vec_dot4_for: the table's 4-row kernels */
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
    rf_vec_dot4_fn dot4; /* 4 weight rows x 1 activation row, same numerics as dot; or NULL */
    rf_vec_dot4x2_fn dot4x2; /* 4 weight rows x 2 activation rows (prompts), same numerics; or NULL */
    float *scratch;      /* fallback: n_in floats per thread */
} mm_job;

/* Q8_0 / Q8_1 activations exactly as ggml's x86 runtime converts them (its AVX2 path, which
 * is what llama.cpp runs): id = 127/amax (not 1/d) and round-half-to-even. The reference
 * quantizer (roundf, 1/d) differs in the last bit on some elements, and over 30 layers that
 * shows as ~1e-2 in the logits. q8_1 also stores s = d * sum(q). */
static void act_q8(const float *x, uint8_t *dst, int64_t n, bool with_sum) {
    size_t bs = with_sum ? 36 : 34;
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        uint8_t *blk = dst + (size_t)b * bs;
        float amax = 0;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(xb[k]));
        float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
        int8_t *q = (int8_t *)(blk + (with_sum ? 4 : 2));
        int sum = 0;
        for (int k = 0; k < 32; k++) {
            q[k] = (int8_t)nearbyintf(xb[k] * id);
            sum += q[k];
        }
        uint16_t h = rf_f32_to_fp16(d);
        memcpy(blk, &h, 2);
        if (with_sum) {
            h = rf_f32_to_fp16(d * (float)sum);
            memcpy(blk + 2, &h, 2);
        }
    }
}

static void mm_quantize(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    int64_t lo, hi;
    rf_pool_range(j->n_tokens, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        const float *x = j->x + t * j->n_in;
        void *dst = j->xq + (size_t)t * j->xq_row;
        if (j->xq_type == RF_TYPE_Q8_0) act_q8(x, dst, j->n_in, false);
        else if (j->xq_type == RF_TYPE_Q8_1) act_q8(x, dst, j->n_in, true);
        else rf_quantize_row(j->xq_type, x, dst, j->n_in);
    }
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
    int64_t o = lo;
    if (j->dot4) /* groups of 4 rows: y[t][o..o+3] are adjacent */
        for (; o + 4 <= hi; o += 4) {
            const void *wr = wbase + (size_t)o * wrow;
            int64_t t = 0;
            if (j->dot4x2)
                for (; t + 2 <= j->n_tokens; t += 2)
                    j->dot4x2(j->n_in, &j->y[t * j->n_out + o], &j->y[(t + 1) * j->n_out + o], wr, wrow,
                              j->xq + (size_t)t * j->xq_row, j->xq + (size_t)(t + 1) * j->xq_row);
            for (; t < j->n_tokens; t++)
                j->dot4(j->n_in, &j->y[t * j->n_out + o], wr, wrow, j->xq + (size_t)t * j->xq_row);
        }
    for (; o < hi; o++) {
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
    mm_job j = {y->data, w, x->data, n_tokens, w->ne[0], w->ne[1], RF_TYPE_F32, 0, NULL, NULL, NULL, NULL, NULL};
    const rf_type_traits *tr = rf_type_info(w->type);
    static int no_vd = -1;
    if (no_vd < 0) no_vd = getenv("RF_CPU_F32_MATMUL") != NULL; /* debugging: exact f32 path */
    if (!no_vd && tr && tr->vec_dot && w->type != RF_TYPE_F32) {
        j.dot = tr->vec_dot;
        j.dot4 = rf_vec_dot4_for(w->type);
        j.dot4x2 = j.dot4 && n_tokens > 1 ? rf_vec_dot4x2_for(w->type) : NULL;
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
