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

#include "core/knobs.h"
#include "core/test_hooks.h"
#include "quant/quant_impl.h" /* rf_vec_dot4_for: the table's 4-row kernels */
#include "rocmforge/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
    rf_vec_dot4x4_fn dot4x4; /* 4 weight rows x 4 activation rows, same numerics; or NULL */
    float *scratch;      /* fallback: n_in floats per thread */
} mm_job;

/* Q8_0 / Q8_1 activations exactly as ggml's x86 runtime converts them (its AVX2 path, which
 * is what llama.cpp runs): id = 127/amax (not 1/d) and round-half-to-even. The reference
 * quantizer (roundf, 1/d) differs in the last bit on some elements, and over 30 layers that
 * shows as ~1e-2 in the logits. q8_1 also stores s = d * sum(q). This scalar form is the
 * definition; act_q8_avx2 below must give the same bytes. */
void rf_cpu_act_q8_scalar(const float *x, void *dst_, int64_t n, bool with_sum) {
    uint8_t *dst = dst_;
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

#if defined(__x86_64__)
/* The same bytes as rf_cpu_act_q8_scalar, 32 elements at a time in AVX2 (the scalar loop was 10 %
 * of a 64-sequence run: at the baseline ISA fmaxf and nearbyintf are libm calls). Why each step
 * matches: max is exact in any order, and vmaxps(|x|, acc) keeps acc when |x| is NaN, as fmaxf
 * does; x*id is the same IEEE product; vroundps in nearest mode is nearbyintf under the default
 * rounding mode; (int8_t) of the scalar path keeps the low byte of cvttss2si's int32 (NaN ->
 * 0x80000000 -> 0), so the vector path truncates to the low byte too (mask + unsigned packs)
 * rather than saturating; the integer sum is exact in any order; the f16 scales use the same
 * rf_f32_to_fp16. */
__attribute__((target("avx2,fma,f16c"))) static void act_q8_avx2(const float *x, uint8_t *dst, int64_t n,
                                                                 bool with_sum) {
    const size_t bs = with_sum ? 36 : 34;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i lo8 = _mm256_set1_epi32(0xFF);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        uint8_t *blk = dst + (size_t)b * bs;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8), v2 = _mm256_loadu_ps(xb + 16),
               v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_setzero_ps();
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v0), m);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v1), m);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v2), m);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v3), m);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
#define RQ(v) _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps((v), vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
        __m256i i0 = RQ(v0), i1 = RQ(v1), i2 = RQ(v2), i3 = RQ(v3);
#undef RQ
        /* low bytes, sign-extended back, for the sum */
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_srai_epi32(_mm256_slli_epi32(i0, 24), 24),
                                                      _mm256_srai_epi32(_mm256_slli_epi32(i1, 24), 24)),
                                     _mm256_add_epi32(_mm256_srai_epi32(_mm256_slli_epi32(i2, 24), 24),
                                                      _mm256_srai_epi32(_mm256_slli_epi32(i3, 24), 24)));
        /* low bytes in element order: packus works per 128-bit half, the permute undoes it */
        __m256i p01 = _mm256_packus_epi32(_mm256_and_si256(i0, lo8), _mm256_and_si256(i1, lo8));
        __m256i p23 = _mm256_packus_epi32(_mm256_and_si256(i2, lo8), _mm256_and_si256(i3, lo8));
        __m256i q = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), perm);
        _mm256_storeu_si256((__m256i *)(blk + (with_sum ? 4 : 2)), q);
        uint16_t h = rf_f32_to_fp16(d);
        memcpy(blk, &h, 2);
        if (with_sum) {
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
            h = rf_f32_to_fp16(d * (float)_mm_cvtsi128_si32(s4));
            memcpy(blk + 2, &h, 2);
        }
    }
}
#endif

void rf_cpu_act_q8(const float *x, void *dst, int64_t n, bool with_sum) {
#if defined(__x86_64__)
    static int avx2 = -1; /* the quant table's AVX2+FMA+F16C detection, RF_NO_SIMD honoured */
    if (avx2 < 0) avx2 = rf_quant_simd_level() == RF_SIMD_AVX2;
    if (avx2) {
        act_q8_avx2(x, dst, n, with_sum);
        return;
    }
#endif
    rf_cpu_act_q8_scalar(x, dst, n, with_sum);
}

static void mm_quantize(void *ctx, int ith, int nth) {
    mm_job *j = ctx;
    int64_t lo, hi;
    rf_pool_range(j->n_tokens, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        const float *x = j->x + t * j->n_in;
        void *dst = j->xq + (size_t)t * j->xq_row;
        if (j->xq_type == RF_TYPE_Q8_0) rf_cpu_act_q8(x, dst, j->n_in, false);
        else if (j->xq_type == RF_TYPE_Q8_1) rf_cpu_act_q8(x, dst, j->n_in, true);
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
            if (j->dot4x4) /* the first tile of a row group prefetches the group two ahead */
                for (; t + 4 <= j->n_tokens; t += 4)
                    j->dot4x4(j->n_in, &j->y[t * j->n_out + o], (size_t)j->n_out, wr, wrow,
                              j->xq + (size_t)t * j->xq_row, j->xq_row, t == 0);
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

/* x rounded as the GPU's int8-x products round it (rf_quantize_elem in gpu_gemv_xq.cu): per 32,
 * d = f16(amax / 127) (f32 where f16 would overflow), q = rint(x * 127 / amax), x' = d * q (exact
 * in f32). The same bytes as rf_cpu_act_q8_scalar's blocks, for every weight type. */
static void act_gpu_round(const float *x, float *out, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(xb[k]));
        const float d32 = amax / 127.f, d16 = rf_fp16_to_f32(rf_f32_to_fp16(d32));
        const float d = d16 <= 65504.0f ? d16 : d32, id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int k = 0; k < 32; k++) out[b * 32 + k] = d * nearbyintf(xb[k] * id);
    }
}

/* The test hooks' activation modes (core/test_hooks.h): the f32 path on x as is or rounded as
 * the GPU rounds it; RF_ERR_UNSUPPORTED (not handled) for unquantized weights or mode 0. */
static rf_status mm_test_mode(rf_cpu *cpu, mm_job *j) {
    const rf_test_hooks *th = rf_test_hooks_get();
    const rf_type t = j->w->type;
    if (!th || th->cpu_act == RF_CPU_ACT_GGML || t == RF_TYPE_F32 || t == RF_TYPE_F16 || t == RF_TYPE_BF16)
        return RF_ERR_UNSUPPORTED;
    float *xr = NULL;
    if (th->cpu_act == RF_CPU_ACT_GPU && (!th->cpu_act_rounds || th->cpu_act_rounds(t, j->n_tokens, j->n_in))) {
        if (j->n_in % 32) return rf_set_error(RF_ERR_INVALID_ARG, "GPU-rounded activations need n_in %% 32 == 0");
        xr = malloc((size_t)(j->n_tokens * j->n_in) * sizeof(float));
        if (!xr) return rf_set_error(RF_ERR_OOM, "test activations");
        for (int64_t k = 0; k < j->n_tokens; k++) act_gpu_round(j->x + k * j->n_in, xr + k * j->n_in, j->n_in);
        j->x = xr;
    }
    rf_status st = rf_cpu_scratch(cpu, (size_t)((j->n_in + 15) & ~15) * cpu->n_threads * sizeof(float));
    if (!st) {
        j->scratch = cpu->scratch;
        rf_pool_run(cpu->pool, mm_worker_f32, j);
    }
    free(xr);
    return st;
}

rf_status rf_cpu_matmul(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x,
                        int64_t n_tokens) {
    rf_cpu *cpu = be->impl;
    mm_job j = {y->data, w, x->data, n_tokens, w->ne[0], w->ne[1], RF_TYPE_F32, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    const rf_type_traits *tr = rf_type_info(w->type);
    if (rf_test_hooks_get()) { /* tests only */
        rf_status st = mm_test_mode(cpu, &j);
        if (st != RF_ERR_UNSUPPORTED) return st;
    }
    static int no_vd = -1;
    if (no_vd < 0) no_vd = rf_knob_bool(RF_KNOB_CPU_F32_MATMUL); /* debugging: exact f32 path */
    if (!no_vd && tr && tr->vec_dot && w->type != RF_TYPE_F32) {
        j.dot = tr->vec_dot;
        j.dot4 = rf_vec_dot4_for(w->type);
        j.dot4x2 = j.dot4 && n_tokens > 1 ? rf_vec_dot4x2_for(w->type) : NULL;
        j.dot4x4 = j.dot4 && n_tokens > 3 ? rf_vec_dot4x4_for(w->type) : NULL;
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
