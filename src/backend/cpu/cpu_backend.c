/* cpu_backend.c — the CPU backend: the op table of backend.h over host memory, threaded with
 * rf_pool. Row helpers, norms, RoPE, GLU and elementwise ops live here; attention in
 * cpu_attention.c, matmul in cpu_matmul.c.
 * Each op has the contract written in backend.h; the scalar references are in ref_ops.h. */
#include "backend/cpu/cpu_backend.h"
#include "backend/backend_common.h"

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

static int g_have_f16c = -1;
int rf_cpu_have_f16c(void) {
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
#endif

void rf_cpu_row_to_f32(rf_type type, const void *src, float *dst, int64_t n) {
    switch (type) {
    case RF_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case RF_TYPE_F16:
#if RF_X86
        if (rf_cpu_have_f16c()) {
            f16_to_f32_avx(src, dst, n);
            return;
        }
#endif
        for (int64_t i = 0; i < n; i++) dst[i] = rf_cpu_half_to_f32_sw(((const uint16_t *)src)[i]);
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
            float d = rf_cpu_half_to_f32_sw(dh);
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
    if (rf_cpu_have_f16c()) {
        f32_to_f16_avx(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = rf_cpu_f32_to_half_sw(src[i]);
}

float rf_cpu_dot_f32(const float *a, const float *b, int64_t n) {
#if RF_X86
    if (rf_cpu_have_f16c()) return dot_f32_avx(a, b, n);
#endif
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void rf_cpu_axpy_f32(float *y, const float *x, float s, int64_t n) {
#if RF_X86
    if (rf_cpu_have_f16c()) {
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
        uint16_t dh = rf_cpu_f32_to_half_sw(d);
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
    rf_tensor_set(out, type, n, rows, rb, p, true);
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
    rf_tensor_set(out, type, n, rows, rb, (void *)host, false);
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

/* a shard's part of a lookup split by vocabulary rows: w holds rows [r0, r0 + w.ne[1]) of n_all */
static rf_status cpu_get_rows_part(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_batch *b, int64_t r0,
                                   int64_t n_all) {
    const int32_t *ids = b->ids;
    for (int64_t t = 0; t < b->n_tokens; t++)
        if (ids[t] < 0 || ids[t] >= n_all)
            return rf_set_error(RF_ERR_RANGE, "token id %d outside the vocabulary [0, %lld)", ids[t], (long long)n_all);
    for (int64_t t = 0; t < b->n_tokens; t++) {
        float *yt = (float *)y->data + t * w->ne[0];
        if (ids[t] < r0 || ids[t] >= r0 + w->ne[1]) memset(yt, 0, (size_t)w->ne[0] * sizeof(float));
        else rf_cpu_row_to_f32(w->type, (const char *)w->data + (size_t)(ids[t] - r0) * w->nb1, yt, w->ne[0]);
    }
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
    rf_status st = rf_copy_rows_check(t, dst0, src0, n);
    if (st) return st;
    memcpy((char *)t->data + (size_t)dst0 * t->nb1, (const char *)t->data + (size_t)src0 * t->nb1,
           (size_t)n * t->nb1);
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
    for (int i = 0; i < 65536; i++) g_gelu_table[i] = rf_cpu_f32_to_half_sw(gelu_tanh(rf_cpu_half_to_f32_sw((uint16_t)i)));
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
        else yd[i] = rf_cpu_half_to_f32_sw(g_gelu_table[rf_cpu_f32_to_half_sw(x)]) * u[i];
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
    .get_rows_part = cpu_get_rows_part,
    .matmul = rf_cpu_matmul,
    .add_bias = cpu_add_bias,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .copy_rows = cpu_copy_rows,
    .attention = rf_cpu_attention,
    .gather_rows = cpu_gather_rows,
    .glu = cpu_glu,
    .moe_route = rf_cpu_moe_route,
    .matmul_id = rf_cpu_matmul_id,
    .moe_combine = rf_cpu_moe_combine,
    .moe_shared_gate = rf_cpu_moe_shared_gate,
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

/* rf_backend_make's init: the thread pool of *(int *)arg threads */
static rf_status cpu_init(void *impl, void *arg) {
    rf_cpu *cpu = impl;
    cpu->n_threads = *(const int *)arg; /* on failure impl is freed: no state is left half set */
    return rf_pool_new(cpu->n_threads, &cpu->pool);
}

rf_status rf_backend_cpu_new(int n_threads, rf_backend **out) {
    *out = NULL;
    if (n_threads < 0) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", n_threads);
    if (n_threads == 0) n_threads = rf_cpu_count();
    return rf_backend_make(&cpu_ops, sizeof(rf_cpu), cpu_init, &n_threads, "CPU backend", out);
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
