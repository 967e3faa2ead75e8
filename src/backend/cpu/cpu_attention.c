/* cpu_attention.c — the CPU backend's paged attention (op attention): one task per (token, head)
 * over the KV pool's block tables, with the f16 cache's helpers that read rows in registers. */
#include "backend/cpu/cpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define RF_X86 1
#endif

#if RF_X86
/* The f16 KV cache's attention helpers: dot_f32_avx(a, f32(h)) and axpy_f32_avx(y, f32(h), s) with
 * the f16 row converted in registers instead of through a scratch row (the conversion pass was 8 %
 * of a 64-sequence batch). Same operations in the same order as the f32 helpers on the converted
 * row, so the results are bit-identical to converting first. */
__attribute__((target("avx2,f16c,fma"))) static float dot_f32_f16_avx(const float *a, const uint16_t *h,
                                                                     int64_t n) {
#define LDH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LDH(h + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), LDH(h + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LDH(h + i), acc0);
    acc0 = _mm256_add_ps(acc0, acc1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
    /* (s0 + s1) + (s2 + s3), the two hadds of dot_f32_avx, with cheaper shuffles (same sums) */
    s = _mm_add_ps(s, _mm_movehdup_ps(s));
    s = _mm_add_ss(s, _mm_movehl_ps(s, s));
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++) r += a[i] * _cvtsh_ss(h[i]);
    return r;
}
__attribute__((target("avx2,f16c,fma"))) static void axpy_f16_avx(float *y, const uint16_t *h, float s,
                                                                 int64_t n) {
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(LDH(h + i), vs, _mm256_loadu_ps(y + i)));
#undef LDH
    for (; i < n; i++) y[i] += s * _cvtsh_ss(h[i]);
}
/* f32 -> f16 -> f32 (round to nearest even), F16C: equal to half_to_f32_sw(f32_to_half_sw(x)) for
 * every non-NaN float (checked exhaustively over all 2^32 inputs). */
__attribute__((target("f16c"))) static float round_f16_hw(float x) { return _cvtsh_ss(_cvtss_sh(x, 0)); }
#endif

#define RF_ATTN_MAX_HD 2048

/* Paged attention: one task per (token, head), so a token's result never depends on which
 * other tokens share the step (batch-invariant bit for bit). Each thread owns a scratch slice
 * of max_kv scores plus head_dim floats for a converted K/V row and the rounded query. */
typedef struct attn_job {
    float *out;
    const float *q;
    const rf_tensor *k, *v;
    const rf_batch *b;
    int64_t n_head, n_head_kv, head_dim, window;
    float scale, softcap;
    const float *sinks;   /* f32 [n_head] or NULL (attention sinks, gpt-oss) */
    float *scratch;
    int64_t per_thread;
    float *qscratch;      /* f16 fast path: 4 rounded query rows per thread */
    int64_t q_per_thread; /* floats */
} attn_job;

/* Walks the K/V rows of positions p0.. of one batch sequence through its block table without a
 * division per key: the row pointer advances by the row stride inside a block and jumps at block
 * boundaries. `off` is head hk's byte offset inside a row. */
typedef struct kv_walk {
    const char *base, *row;
    size_t nb1, off;
    const int32_t *table;
    int64_t bs, blk, in_blk;
} kv_walk;

static inline void kv_walk_start(kv_walk *w, const rf_tensor *c, const rf_batch *b, int32_t s, int64_t p0, size_t off) {
    w->base = c->data;
    w->nb1 = c->nb1;
    w->off = off;
    w->table = b->block_table + (int64_t)s * b->max_blocks;
    w->bs = b->block_size;
    w->blk = p0 / w->bs;
    w->in_blk = p0 % w->bs;
    w->row = w->base + (size_t)(w->table[w->blk] * w->bs + w->in_blk) * w->nb1 + off;
}

static inline const char *kv_walk_next(kv_walk *w) { /* the current row, then step to the next position */
    const char *r = w->row;
    if (++w->in_blk == w->bs) {
        w->in_blk = 0;
        w->blk++;
        w->row = NULL; /* the next block is looked up only if there is a next position */
    } else {
        w->row += w->nb1;
    }
    return r;
}

static inline const char *kv_walk_row(kv_walk *w) {
    if (!w->row) w->row = w->base + (size_t)(w->table[w->blk] * w->bs) * w->nb1 + w->off;
    return kv_walk_next(w);
}

#if RF_X86
/* P.V over an f16 cache for 64 output elements: o[e] = sum over the nk rows the walker yields of
 * p[k] * f16(row[e]), accumulated in key order with one fma per key from +0 -- exactly what
 * axpy_f16_avx does on a zeroed o, key after key, but with o in 8 registers instead of a
 * load-fma-store chain through memory per key. */
__attribute__((target("avx2,f16c,fma"))) static void pv64_f16_avx(float *o, kv_walk *w, const float *p, int64_t nk) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
#define LDH(r, e) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)(r) + (e))))
    for (int64_t k = 0; k < nk; k++) {
        const char *r = kv_walk_row(w);
        const __m256 pk = _mm256_set1_ps(p[k]);
        a0 = _mm256_fmadd_ps(LDH(r, 0), pk, a0);
        a1 = _mm256_fmadd_ps(LDH(r, 8), pk, a1);
        a2 = _mm256_fmadd_ps(LDH(r, 16), pk, a2);
        a3 = _mm256_fmadd_ps(LDH(r, 24), pk, a3);
        a4 = _mm256_fmadd_ps(LDH(r, 32), pk, a4);
        a5 = _mm256_fmadd_ps(LDH(r, 40), pk, a5);
        a6 = _mm256_fmadd_ps(LDH(r, 48), pk, a6);
        a7 = _mm256_fmadd_ps(LDH(r, 56), pk, a7);
    }
#undef LDH
    _mm256_storeu_ps(o, a0), _mm256_storeu_ps(o + 8, a1), _mm256_storeu_ps(o + 16, a2), _mm256_storeu_ps(o + 24, a3);
    _mm256_storeu_ps(o + 32, a4), _mm256_storeu_ps(o + 40, a5), _mm256_storeu_ps(o + 48, a6), _mm256_storeu_ps(o + 56, a7);
}

/* Scores of g <= 4 query heads that share one KV head, over an f16 cache with hd % 16 == 0:
 * sc[h * ld + k] = dot_f32_f16_avx(q[h], K row k) * scale (then the softcap, as attn_worker
 * applies it), and mx[h] = their maximum. Each K chunk is converted once for the g heads (GQA:
 * SmolLM2 has 3 query heads per KV head), and every head's sum runs through the same fmas and the
 * same reduction as dot_f32_f16_avx, so each score is bit-identical to it. */
__attribute__((target("avx2,f16c,fma"))) static void scores_f16_avx(const float *const *q, int g, kv_walk *w,
                                                                    int64_t nk, int64_t hd, float scale,
                                                                    float softcap, float *sc, int64_t ld,
                                                                    float *mx) {
    for (int h = 0; h < g; h++) mx[h] = -INFINITY;
    for (int64_t k = 0; k < nk; k++) {
        const uint16_t *kr = (const uint16_t *)kv_walk_row(w);
        __m256 a0[4], a1[4];
        for (int h = 0; h < 4; h++) a0[h] = a1[h] = _mm256_setzero_ps();
        for (int64_t i = 0; i < hd; i += 16) {
            const __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + i)));
            const __m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + i + 8)));
            for (int h = 0; h < g; h++) {
                a0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + i), k0, a0[h]);
                a1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + i + 8), k1, a1[h]);
            }
        }
        for (int h = 0; h < g; h++) {
            const __m256 a = _mm256_add_ps(a0[h], a1[h]);
            __m128 r = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            r = _mm_add_ps(r, _mm_movehdup_ps(r));
            r = _mm_add_ss(r, _mm_movehl_ps(r, r));
            float sco = _mm_cvtss_f32(r) * scale;
            if (softcap > 0) sco = softcap * tanhf(sco / softcap);
            sc[h * ld + k] = sco;
            if (sco > mx[h]) mx[h] = sco;
        }
    }
}

/* sc[k] = f32(f16(sc[k] * inv)) for k < n: the probabilities rounded to f16 as llama.cpp does,
 * the same multiply and F16C rounding as round_f16_hw(sc[k] * inv), 8 at a time. */
__attribute__((target("avx2,f16c"))) static void scale_round_f16_avx(float *sc, float inv, int64_t n) {
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(sc + k, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(sc + k), vi), 0)));
    for (; k < n; k++) sc[k] = _cvtsh_ss(_cvtss_sh(sc[k] * inv, 0));
}
#endif

/* Byte offset of head hk inside a K/V row of type t. */
static inline size_t kv_head_off(rf_type t, int64_t hk, int64_t hd) {
    switch (t) {
    case RF_TYPE_F32: return (size_t)hk * hd * 4;
    case RF_TYPE_F16: return (size_t)hk * hd * 2;
    default: return (size_t)hk * hd / 32 * 34; /* q8_0 */
    }
}

static void attn_worker(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const rf_batch *b = j->b;
    int64_t lo, hi;
    rf_pool_range((int64_t)b->n_tokens * j->n_head, ith, nth, &lo, &hi);
    int64_t hd = j->head_dim, group = j->n_head / j->n_head_kv;
    float *sc = j->scratch + ith * j->per_thread;
    float *row = sc + (j->per_thread - 2 * ((hd + 15) & ~15));
    float *qr = row + ((hd + 15) & ~15);
    bool is_f32 = j->k->type == RF_TYPE_F32;
    /* f16 cache: llama.cpp (non-flash path) rounds q to f16 for q.k and the probabilities to f16
     * for P.v; doing the same keeps the two within float rounding. */
    bool h16 = j->k->type == RF_TYPE_F16;
    bool h16_fast = false; /* f16 rows read in registers (bit-identical to converting first) */
#if RF_X86
    h16_fast = h16 && rf_cpu_have_f16c() && j->v->type == RF_TYPE_F16;
#endif
#if RF_X86
    /* f16 fast path: the thread's consecutive tasks of one token whose heads share a KV head go
     * together (up to 4), the K rows converted once for them; per head the same operations as
     * the generic loop below (bit-identical). */
    if (h16_fast && hd % 64 == 0) {
        for (int64_t task = lo; task < hi;) {
            int64_t it = task / j->n_head, h0 = task % j->n_head, hk = h0 / group;
            int g = 1;
            while (g < 4 && task + g < hi && (h0 + g) % j->n_head != 0 && (h0 + g) / group == hk) g++;
            int32_t s = b->seq[it];
            int64_t p = b->pos[it], kmin = 0;
            if (j->window > 0 && p - j->window + 1 > 0) kmin = p - j->window + 1;
            const int64_t nk = p - kmin + 1, ld = (nk + 15) & ~(int64_t)15;
            const float *qs[4];
            float mx[4];
            for (int x = 0; x < g; x++) {
                uint16_t tmp[RF_ATTN_MAX_HD];
                float *qx = j->qscratch + ith * j->q_per_thread + x * hd;
                rf_cpu_f32_to_f16(j->q + (it * j->n_head + h0 + x) * hd, tmp, hd);
                rf_cpu_row_to_f32(RF_TYPE_F16, tmp, qx, hd);
                qs[x] = qx;
            }
            kv_walk wk, wv;
            const size_t koff = kv_head_off(j->k->type, hk, hd), voff = kv_head_off(j->v->type, hk, hd);
            kv_walk_start(&wk, j->k, b, s, kmin, koff);
            scores_f16_avx(qs, g, &wk, nk, hd, j->scale, j->softcap, sc, ld, mx);
            for (int x = 0; x < g; x++) {
                float *o = j->out + (it * j->n_head + h0 + x) * hd, *scx = sc + x * ld;
                const float sink = j->sinks ? j->sinks[h0 + x] : -INFINITY;
                if (sink > mx[x]) mx[x] = sink;
                if (mx[x] == -INFINITY) {
                    memset(o, 0, (size_t)hd * sizeof(float));
                    continue;
                }
                double sum = 0;
                for (int64_t kk = 0; kk < nk; kk++) {
                    float e = expf(scx[kk] - mx[x]);
                    scx[kk] = e;
                    sum += e;
                }
                if (j->sinks) sum += expf(sink - mx[x]); /* the sink: denominator only */
                scale_round_f16_avx(scx, (float)(1.0 / sum), nk);
                for (int64_t c = 0; c < hd; c += 64) {
                    kv_walk_start(&wv, j->v, b, s, kmin, voff + (size_t)c * 2);
                    pv64_f16_avx(o + c, &wv, scx, nk);
                }
            }
            task += g;
        }
        return;
    }
#endif
    for (int64_t task = lo; task < hi; task++) {
        int64_t it = task / j->n_head, h = task % j->n_head, hk = h / group;
        int32_t s = b->seq[it];
        const float *q = j->q + (it * j->n_head + h) * hd;
        if (h16) {
            uint16_t tmp[RF_ATTN_MAX_HD];
            rf_cpu_f32_to_f16(q, tmp, hd);
            rf_cpu_row_to_f32(RF_TYPE_F16, tmp, qr, hd);
            q = qr;
        }
        float *o = j->out + (it * j->n_head + h) * hd;
        int64_t p = b->pos[it], kmin = 0;
        if (j->window > 0 && p - j->window + 1 > 0) kmin = p - j->window + 1;
        float mx = -INFINITY;
        kv_walk wk, wv;
        kv_walk_start(&wk, j->k, b, s, kmin, kv_head_off(j->k->type, hk, hd));
        for (int64_t kk = kmin; kk <= p; kk++) {
            const char *kr = kv_walk_row(&wk);
            float sco;
#if RF_X86
            if (h16_fast) {
                sco = dot_f32_f16_avx(q, (const uint16_t *)kr, hd) * j->scale;
            } else
#endif
            {
                const float *kv = (const float *)kr;
                if (!is_f32) {
                    rf_cpu_row_to_f32(j->k->type, kr, row, hd);
                    kv = row;
                }
                sco = rf_cpu_dot_f32(q, kv, hd) * j->scale;
            }
            if (j->softcap > 0) sco = j->softcap * tanhf(sco / j->softcap);
            sc[kk - kmin] = sco;
            if (sco > mx) mx = sco;
        }
        memset(o, 0, (size_t)hd * sizeof(float));
        const float sink = j->sinks ? j->sinks[h] : -INFINITY;
        if (sink > mx) mx = sink;
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (int64_t kk = 0; kk <= p - kmin; kk++) {
            float e = expf(sc[kk] - mx);
            sc[kk] = e;
            sum += e;
        }
        if (j->sinks) sum += expf(sink - mx); /* the sink: denominator only */
        float inv = (float)(1.0 / sum);
        kv_walk_start(&wv, j->v, b, s, kmin, kv_head_off(j->v->type, hk, hd));
#if RF_X86
        if (h16_fast) {
            for (int64_t kk = kmin; kk <= p; kk++) {
                const char *vr = kv_walk_row(&wv);
                axpy_f16_avx(o, (const uint16_t *)vr, round_f16_hw(sc[kk - kmin] * inv), hd);
            }
            continue;
        }
#endif
        for (int64_t kk = kmin; kk <= p; kk++) {
            const char *vr = kv_walk_row(&wv);
            const float *vv = (const float *)vr;
            if (!is_f32) {
                rf_cpu_row_to_f32(j->v->type, vr, row, hd);
                vv = row;
            }
            float pk = sc[kk - kmin] * inv;
            if (h16) pk = rf_cpu_half_to_f32_sw(rf_cpu_f32_to_half_sw(pk));
            rf_cpu_axpy_f32(o, vv, pk, hd);
        }
    }
}

rf_status rf_cpu_attention(rf_backend *be, rf_tensor *out, const rf_tensor *q, const rf_tensor *k,
                               const rf_tensor *v, const rf_batch *b, int64_t n_head,
                               int64_t n_head_kv, int64_t head_dim, float scale, int64_t window,
                               float softcap, const rf_tensor *sinks) {
    rf_cpu *cpu = be->impl;
    if (n_head_kv <= 0 || n_head % n_head_kv)
        return rf_set_error(RF_ERR_INVALID_ARG, "attention: n_head %lld not a multiple of n_head_kv %lld",
                            (long long)n_head, (long long)n_head_kv);
    if (k->type == RF_TYPE_Q8_0 && head_dim % 32)
        return rf_set_error(RF_ERR_UNSUPPORTED, "q8_0 KV cache needs head_dim %% 32 == 0 (head_dim %lld)",
                            (long long)head_dim);
    if (head_dim > RF_ATTN_MAX_HD)
        return rf_set_error(RF_ERR_UNSUPPORTED, "attention: head size %lld > %d", (long long)head_dim, RF_ATTN_MAX_HD);
    int64_t max_kv = 1;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t s = b->seq[t], p = b->pos[t];
        if (s < 0 || s >= b->n_seqs || p < 0 || p / b->block_size >= b->max_blocks)
            return rf_set_error(RF_ERR_RANGE, "attention: token %d has sequence %d / position %d outside the batch's "
                                "%d sequences / %d blocks of %d", t, s, p, b->n_seqs, b->max_blocks, b->block_size);
        if (p + 1 > max_kv) max_kv = p + 1;
    }
    if (window > 0 && window < max_kv) max_kv = window;
    if (sinks && (sinks->type != RF_TYPE_F32 || sinks->ne[0] * sinks->ne[1] < n_head))
        return rf_set_error(RF_ERR_INVALID_ARG, "attention: sinks must be f32 [%lld]", (long long)n_head);
    attn_job j = {out->data, q->data, k, v, b, n_head, n_head_kv, head_dim, window, scale, softcap,
                  sinks ? sinks->data : NULL, NULL, 0, NULL, 0};
    /* scores of up to 4 heads (the f16 path groups heads of a KV head), a converted K/V row and the
     * rounded query; then 4 query rows for the grouped path */
    j.per_thread = 4 * ((max_kv + 15) & ~15) + 2 * ((head_dim + 15) & ~15);
    j.q_per_thread = 4 * ((head_dim + 15) & ~15);
    rf_status st = rf_cpu_scratch(cpu, (size_t)(j.per_thread + j.q_per_thread) * cpu->n_threads * sizeof(float));
    if (st) return st;
    j.scratch = cpu->scratch;
    j.qscratch = j.scratch + j.per_thread * cpu->n_threads;
    rf_pool_run(cpu->pool, attn_worker, &j);
    return RF_OK;
}
