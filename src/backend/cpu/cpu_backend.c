/* cpu_backend.c — the CPU backend: the op table of backend.h over host memory, threaded with
 * rf_pool. Norms, RoPE, attention, GLU and elementwise ops live here; matmul in cpu_matmul.c.
 * Each op has the contract written in backend.h; the scalar references are in ref_ops.h. */
#include "backend/cpu/cpu_backend.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/ref/ref_ops.h"
#include "rocmforge/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define RF_X86 1
#endif

/* ---- row helpers ------------------------------------------------------------------------ */

static float half_to_f32_sw(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t f32_to_half_sw(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (ax < 0x38800000u) { /* subnormal or zero in half */
        if (ax < 0x33000000u) return (uint16_t)sign;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        int shift = 113 - (int)(ax >> 23) + 13; /* 126 - e + 13 - 13 ... */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax - 0x38000000u) >> 13);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

static int g_have_f16c = -1;
static int have_f16c(void) {
#if RF_X86
    /* The quant table's detection covers AVX2+FMA+F16C (clang 14 rejects "f16c" as a
     * __builtin_cpu_supports name) and honours RF_NO_SIMD. */
    if (g_have_f16c < 0) g_have_f16c = rf_quant_simd_level() == RF_SIMD_AVX2;
    return g_have_f16c;
#else
    return 0;
#endif
}

#if RF_X86
__attribute__((target("avx2,f16c,fma"))) static void f16_to_f32_avx(const uint16_t *s, float *d,
                                                                    int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = _cvtsh_ss(s[i]);
}
__attribute__((target("avx2,f16c,fma"))) static void f32_to_f16_avx(const float *s, uint16_t *d,
                                                                    int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), 0));
    for (; i < n; i++) d[i] = _cvtss_sh(s[i], 0);
}
__attribute__((target("avx2,fma"))) static float dot_f32_avx(const float *a, const float *b,
                                                             int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc0 = _mm256_add_ps(acc0, acc1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}
__attribute__((target("avx2,fma"))) static void axpy_f32_avx(float *y, const float *x, float s,
                                                             int64_t n) {
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vs, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += s * x[i];
}
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

void rf_cpu_row_to_f32(rf_type type, const void *src, float *dst, int64_t n) {
    switch (type) {
    case RF_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case RF_TYPE_F16:
#if RF_X86
        if (have_f16c()) {
            f16_to_f32_avx(src, dst, n);
            return;
        }
#endif
        for (int64_t i = 0; i < n; i++) dst[i] = half_to_f32_sw(((const uint16_t *)src)[i]);
        return;
    case RF_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)((const uint16_t *)src)[i] << 16;
            memcpy(&dst[i], &b, 4);
        }
        return;
    case RF_TYPE_Q8_0: /* hot in the q8_0 KV cache: done here without a table lookup */
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = (const uint8_t *)src + b * 34;
            uint16_t dh;
            memcpy(&dh, blk, 2);
            float d = half_to_f32_sw(dh);
            const int8_t *q = (const int8_t *)(blk + 2);
            for (int j = 0; j < 32; j++) dst[b * 32 + j] = d * q[j];
        }
        return;
    default:
        rf_dequantize_row(type, src, dst, n);
        return;
    }
}

void rf_cpu_f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
#if RF_X86
    if (have_f16c()) {
        f32_to_f16_avx(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = f32_to_half_sw(src[i]);
}

float rf_cpu_dot_f32(const float *a, const float *b, int64_t n) {
#if RF_X86
    if (have_f16c()) return dot_f32_avx(a, b, n);
#endif
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void rf_cpu_axpy_f32(float *y, const float *x, float s, int64_t n) {
#if RF_X86
    if (have_f16c()) {
        axpy_f32_avx(y, x, s, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) y[i] += s * x[i];
}

/* Quantizes one row to q8_0 (ggml's rule: d = amax/127, q = round(x/d)). */
static void row_to_q8_0(const float *x, uint8_t *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        uint8_t *blk = dst + b * 34;
        uint16_t dh = f32_to_half_sw(d);
        memcpy(blk, &dh, 2);
        int8_t *q = (int8_t *)(blk + 2);
        for (int j = 0; j < 32; j++) q[j] = (int8_t)roundf(xb[j] * id);
    }
}

/* ---- memory ----------------------------------------------------------------------------- */

rf_status rf_cpu_scratch(rf_cpu *cpu, size_t size) {
    if (cpu->scratch_size >= size) return RF_OK;
    size = (size + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, size)) return rf_set_error(RF_ERR_OOM, "CPU scratch of %zu bytes", size);
    free(cpu->scratch);
    cpu->scratch = p;
    cpu->scratch_size = size;
    return RF_OK;
}

static rf_status row_bytes(rf_type type, int64_t n, size_t *out) {
    if (type == RF_TYPE_F32 || type == RF_TYPE_I32) { *out = (size_t)n * 4; return RF_OK; } /* i32: expert ids */
    if (type == RF_TYPE_F16 || type == RF_TYPE_BF16) { *out = (size_t)n * 2; return RF_OK; }
    return rf_row_size(type, n, out);
}

/* 64-byte aligned, zeroed memory from calloc: large blocks come from fresh mmap'd pages that
 * the kernel zeroes on first touch, so a KV pool of gigabytes costs nothing until it is used.
 * The pointer calloc returned is kept just below the aligned one. */
static void *zalloc64(size_t bytes) {
    if (bytes > SIZE_MAX - 64 - sizeof(void *)) return NULL;
    char *p = calloc(1, bytes + 64 + sizeof(void *));
    if (!p) return NULL;
    char *a = (char *)(((uintptr_t)p + sizeof(void *) + 63) & ~(uintptr_t)63);
    ((void **)a)[-1] = p;
    return a;
}

static void zfree64(void *a) {
    if (a) free(((void **)a)[-1]);
}

static rf_status cpu_alloc(rf_backend *be, rf_type type, int64_t n, int64_t rows, rf_tensor *out) {
    memset(out, 0, sizeof *out);
    size_t rb;
    rf_status st = row_bytes(type, n, &rb);
    if (st) return st;
    uint64_t total;
    if (rf_mul_overflow_u64(rb, (uint64_t)rows, &total) || total > SIZE_MAX - 128)
        return rf_set_error(RF_ERR_RANGE, "tensor of %lld x %lld elements is too large",
                            (long long)rows, (long long)n);
    size_t sz = total ? (size_t)total : 64;
    void *p = zalloc64(sz);
    if (!p) return rf_set_error(RF_ERR_OOM, "cannot allocate %.1f MiB on the CPU", sz / 1048576.0);
    out->type = type;
    out->ne[0] = n;
    out->ne[1] = rows;
    out->nb1 = rb;
    out->data = p;
    out->owned = true;
    return RF_OK;
}

static void cpu_free(rf_backend *be, rf_tensor *t) {
    if (t && t->owned) zfree64(t->data);
    if (t) memset(t, 0, sizeof *t);
}

static rf_status cpu_weight(rf_backend *be, rf_type type, int64_t n, int64_t rows,
                            const void *host, rf_tensor *out) {
    memset(out, 0, sizeof *out);
    size_t rb;
    rf_status st = row_bytes(type, n, &rb);
    if (st) return st;
    out->type = type;
    out->ne[0] = n;
    out->ne[1] = rows;
    out->nb1 = rb;
    out->data = (void *)host;
    out->owned = false;
    return RF_OK;
}

static rf_status cpu_read_rows(rf_backend *be, const rf_tensor *t, int64_t r0, int64_t n, float *dst) {
    for (int64_t r = 0; r < n; r++)
        rf_cpu_row_to_f32(t->type, (const char *)t->data + (size_t)(r0 + r) * t->nb1,
                          dst + r * t->ne[0], t->ne[0]);
    return RF_OK;
}

/* ---- elementwise and row ops ------------------------------------------------------------ */

static rf_status cpu_get_rows(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_batch *b) {
    const int32_t *ids = b->ids;
    for (int64_t t = 0; t < b->n_tokens; t++)
        if (ids[t] < 0 || ids[t] >= w->ne[1])
            return rf_set_error(RF_ERR_RANGE, "token id %d outside the vocabulary [0, %lld)",
                                ids[t], (long long)w->ne[1]);
    for (int64_t t = 0; t < b->n_tokens; t++)
        rf_cpu_row_to_f32(w->type, (const char *)w->data + (size_t)ids[t] * w->nb1,
                          (float *)y->data + t * w->ne[0], w->ne[0]);
    return RF_OK;
}

static rf_status cpu_gather_rows(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_batch *b,
                                 int64_t n) {
    for (int64_t i = 0; i < b->n_out; i++)
        memcpy((float *)y->data + i * n, (const float *)x->data + (int64_t)b->out_rows[i] * n,
               (size_t)n * sizeof(float));
    return RF_OK;
}

static rf_status cpu_add_bias(rf_backend *be, rf_tensor *y, const rf_tensor *b, int64_t rows, int64_t n) {
    float *yd = y->data;
    const float *bd = b->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) yd[r * n + i] += bd[i];
    return RF_OK;
}

static rf_status cpu_rmsnorm(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w,
                             int64_t rows, int64_t n, float eps) {
    const float *xd = x->data;
    float *yd = y->data;
    const float *wd = w ? w->data : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = xd + r * n;
        float *yr = yd + r * n;
        double ss = 0; /* ggml sums in ggml_float (double) */
        for (int64_t i = 0; i < n; i++) ss += (double)(xr[i] * xr[i]); /* float product, as ggml */
        float scale = (float)(1.0 / sqrt(ss / n + eps));
        if (wd)
            for (int64_t i = 0; i < n; i++) yr[i] = xr[i] * scale * wd[i];
        else
            for (int64_t i = 0; i < n; i++) yr[i] = xr[i] * scale;
    }
    return RF_OK;
}

static rf_status cpu_rope(rf_backend *be, rf_tensor *x, const rf_batch *b, int64_t n_heads,
                          int64_t head_dim, int64_t n_rot, float freq_base, float freq_scale,
                          const rf_tensor *freq_factors, int mode, float attn_factor) {
    const float *ff = freq_factors ? freq_factors->data : NULL;
    float *xd = x->data;
    int64_t half = n_rot / 2;
    /* theta_i computed as ggml does: theta = p * scale, multiplied by base^(-2/n_rot) per pair. */
    float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float cs[1024], sn[1024]; /* head_dim <= 2048 checked at load */
    for (int64_t t = 0; t < b->n_tokens; t++) {
        float theta = (float)b->pos[t];
        for (int64_t i = 0; i < half; i++) {
            float th = theta * freq_scale / (ff ? ff[i] : 1.0f);
            cs[i] = cosf(th) * attn_factor; /* as ggml: cos and sin times the gain (x 1 exact) */
            sn[i] = sinf(th) * attn_factor;
            theta *= theta_scale;
        }
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = xd + (t * n_heads + h) * head_dim;
            for (int64_t i = 0; i < half; i++) {
                int64_t i0 = mode == 2 ? i : 2 * i, i1 = mode == 2 ? i + half : 2 * i + 1;
                float a = v[i0], c = v[i1];
                v[i0] = a * cs[i] - c * sn[i];
                v[i1] = a * sn[i] + c * cs[i];
            }
        }
    }
    return RF_OK;
}

static rf_status cpu_kv_store(rf_backend *be, rf_tensor *cache, const rf_tensor *src, const rf_batch *b) {
    int64_t ne = cache->ne[0];
    for (int64_t r = 0; r < b->n_tokens; r++)
        if (b->slot[r] < 0 || b->slot[r] >= cache->ne[1])
            return rf_set_error(RF_ERR_RANGE, "KV slot %d outside the pool of %lld rows", b->slot[r],
                                (long long)cache->ne[1]);
    for (int64_t r = 0; r < b->n_tokens; r++) {
        const float *s = (const float *)src->data + r * ne;
        char *d = (char *)cache->data + (size_t)b->slot[r] * cache->nb1;
        switch (cache->type) {
        case RF_TYPE_F32: memcpy(d, s, (size_t)ne * 4); break;
        case RF_TYPE_F16: rf_cpu_f32_to_f16(s, (uint16_t *)d, ne); break;
        case RF_TYPE_Q8_0: row_to_q8_0(s, (uint8_t *)d, ne); break;
        default: return rf_set_error(RF_ERR_UNSUPPORTED, "KV cache type %s", rf_type_name(cache->type));
        }
    }
    return RF_OK;
}

static rf_status cpu_copy_rows(rf_backend *be, rf_tensor *t, int64_t dst0, int64_t src0, int64_t n) {
    if (n < 0 || dst0 < 0 || src0 < 0 || dst0 + n > t->ne[1] || src0 + n > t->ne[1] ||
        (dst0 < src0 + n && src0 < dst0 + n))
        return rf_set_error(RF_ERR_RANGE, "copy_rows %lld -> %lld (%lld rows) in a tensor of %lld rows",
                            (long long)src0, (long long)dst0, (long long)n, (long long)t->ne[1]);
    memcpy((char *)t->data + (size_t)dst0 * t->nb1, (const char *)t->data + (size_t)src0 * t->nb1,
           (size_t)n * t->nb1);
    return RF_OK;
}

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
    h16_fast = h16 && have_f16c() && j->v->type == RF_TYPE_F16;
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
            if (h16) pk = half_to_f32_sw(f32_to_half_sw(pk));
            rf_cpu_axpy_f32(o, vv, pk, hd);
        }
    }
}

static rf_status cpu_attention(rf_backend *be, rf_tensor *out, const rf_tensor *q, const rf_tensor *k,
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

static float gelu_tanh(float x) {
    const float c = 0.79788456080286535587989211986876f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x)));
}

/* GeGLU's gelu goes through a table over all f16 inputs, as ggml's CPU backend does (x rounded
 * to f16, result stored as f16): the model then sees the same activations as with llama.cpp.
 * Versus the exact rf_ref_gelu_tanh the error is below 1e-3 relative (f16 rounding). */
static uint16_t g_gelu_table[65536];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;
static void gelu_table_init(void) {
    for (int i = 0; i < 65536; i++) g_gelu_table[i] = f32_to_half_sw(gelu_tanh(half_to_f32_sw((uint16_t)i)));
}

/* y[i] = act(g[i]) * u[i] over [lo, hi). */
static void glu_range(float *yd, const float *g, const float *u, int64_t lo, int64_t hi, rf_glu_kind kind) {
    if (kind == RF_GLU_SWIGLU) {
        for (int64_t i = lo; i < hi; i++) yd[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        return;
    }
    if (kind == RF_GLU_SWIGLU_OAI) { /* ggml's swiglu_oai order of operations, in f32 */
        const float a = RF_OAI_SWIGLU_ALPHA, lim = RF_OAI_SWIGLU_LIMIT;
        for (int64_t i = lo; i < hi; i++) {
            const float x = lim < g[i] ? lim : g[i], y = u[i] < -lim ? -lim : (lim < u[i] ? lim : u[i]);
            yd[i] = x / (1.0f + expf(a * (-x))) * (y + 1.0f);
        }
        return;
    }
    for (int64_t i = lo; i < hi; i++) {
        float x = g[i];
        if (x <= -10.0f) yd[i] = 0.0f;
        else if (x >= 10.0f) yd[i] = x * u[i];
        else yd[i] = half_to_f32_sw(g_gelu_table[f32_to_half_sw(x)]) * u[i];
    }
}

typedef struct glu_job {
    float *y;
    const float *g, *u;
    int64_t n;
    rf_glu_kind kind;
} glu_job;

static void glu_worker(void *ctx, int ith, int nth) {
    glu_job *j = ctx;
    int64_t lo, hi; /* chunks of 16 floats: threads write separate cache lines */
    rf_pool_range((j->n + 15) / 16, ith, nth, &lo, &hi);
    glu_range(j->y, j->g, j->u, lo * 16, hi * 16 < j->n ? hi * 16 : j->n, j->kind);
}

/* Elementwise, so splitting it over threads changes no result. Batches of many tokens (a 64-token
 * decode step: 98k elements, an expf each) run it on the pool: single-threaded it was ~2-3 % of
 * a 64-sequence run with the other thread idle. Small ones stay on the caller (a pool wake costs
 * more than they do). */
static rf_status cpu_glu(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up,
                         int64_t n, rf_glu_kind kind) {
    rf_cpu *cpu = be->impl;
    if (kind == RF_GLU_GEGLU) pthread_once(&g_gelu_once, gelu_table_init);
    glu_job j = {y->data, gate->data, up->data, n, kind};
    if (n >= 16384 && cpu->n_threads > 1) rf_pool_run(cpu->pool, glu_worker, &j);
    else glu_range(j.y, j.g, j.u, 0, n, kind);
    return RF_OK;
}

static rf_status cpu_add(rf_backend *be, rf_tensor *y, const rf_tensor *a, const rf_tensor *b, int64_t n) {
    float *yd = y->data;
    const float *ad = a->data, *bd = b->data;
    for (int64_t i = 0; i < n; i++) yd[i] = ad[i] + bd[i];
    return RF_OK;
}

static rf_status cpu_scale(rf_backend *be, rf_tensor *x, float s, int64_t n) {
    float *xd = x->data;
    for (int64_t i = 0; i < n; i++) xd[i] *= s;
    return RF_OK;
}

static rf_status cpu_softcap(rf_backend *be, rf_tensor *x, float cap, int64_t n) {
    float *xd = x->data;
    for (int64_t i = 0; i < n; i++) xd[i] = cap * tanhf(xd[i] / cap);
    return RF_OK;
}

static void cpu_destroy(rf_backend *be) {
    if (!be) return;
    rf_cpu *cpu = be->impl;
    if (cpu) {
        rf_pool_free(cpu->pool);
        free(cpu->scratch);
        free(cpu);
    }
    free(be);
}

/* The CPU has no device memory and no transfers: only the name. */
static rf_status cpu_info(rf_backend *be, bool memory, rf_backend_info *out) {
    (void)be, (void)memory;
    *out = (rf_backend_info){.name = "cpu", .device = -1};
    return RF_OK;
}

static const rf_backend_ops cpu_ops = {
    .name = "cpu",
    .info = cpu_info,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .weight = cpu_weight,
    .read_rows = cpu_read_rows,
    .batch_upload = NULL,
    .get_rows = cpu_get_rows,
    .matmul = rf_cpu_matmul,
    .add_bias = cpu_add_bias,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .copy_rows = cpu_copy_rows,
    .attention = cpu_attention,
    .gather_rows = cpu_gather_rows,
    .glu = cpu_glu,
    .moe_route = rf_cpu_moe_route,
    .matmul_id = rf_cpu_matmul_id,
    .moe_combine = rf_cpu_moe_combine,
    .add = cpu_add,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .ssm_conv = rf_cpu_ssm_conv,
    .gated_delta = rf_cpu_gated_delta,
    .sigmoid_mul = rf_cpu_sigmoid_mul,
    .head_split = rf_cpu_head_split,
    .destroy = cpu_destroy,
};

int rf_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

rf_status rf_backend_cpu_new(int n_threads, rf_backend **out) {
    *out = NULL;
    if (n_threads < 0) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", n_threads);
    if (n_threads == 0) n_threads = rf_cpu_count();
    rf_backend *be = calloc(1, sizeof *be);
    rf_cpu *cpu = calloc(1, sizeof *cpu);
    if (!be || !cpu) {
        free(be);
        free(cpu);
        return rf_set_error(RF_ERR_OOM, "CPU backend: out of memory");
    }
    rf_status st = rf_pool_new(n_threads, &cpu->pool);
    if (st) {
        free(be);
        free(cpu);
        return st;
    }
    cpu->n_threads = n_threads;
    be->ops = &cpu_ops;
    be->impl = cpu;
    *out = be;
    return RF_OK;
}

int rf_backend_cpu_n_threads(const rf_backend *be) { return ((const rf_cpu *)be->impl)->n_threads; }

rf_status rf_backend_cpu_set_threads(rf_backend *be, int n_threads) {
    rf_cpu *cpu = be->impl;
    if (n_threads < 1) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", n_threads);
    if (n_threads == cpu->n_threads) return RF_OK;
    rf_pool *p;
    rf_status st = rf_pool_new(n_threads, &p);
    if (st) return st;
    rf_pool_free(cpu->pool);
    cpu->pool = p;
    cpu->n_threads = n_threads;
    return RF_OK;
}
