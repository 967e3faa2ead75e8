/* cpu_backend.h — internals shared by the CPU backend's files: the backend state (thread pool,
 * per-thread scratch) and the fast row helpers (f16 conversion with F16C where present). */
#ifndef RF_CPU_BACKEND_H
#define RF_CPU_BACKEND_H

#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_threads.h"

typedef struct rf_cpu {
    rf_pool *pool;
    int n_threads;
    /* Scratch, grown on demand by the calling thread before a parallel job. */
    void *scratch;
    size_t scratch_size;
} rf_cpu;

/* Makes sure cpu->scratch holds at least `size` bytes (64-byte aligned). */
rf_status rf_cpu_scratch(rf_cpu *cpu, size_t size);

/* The threaded matmul (cpu_matmul.c); contract of rf_backend_ops.matmul. */
rf_status rf_cpu_matmul(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x,
                        int64_t n_tokens);

/* The mixture-of-experts ops (cpu_moe.c); contracts of rf_backend_ops.moe_route, matmul_id,
 * moe_combine. */
rf_status rf_cpu_moe_route(rf_backend *be, rf_tensor *ids, rf_tensor *wts, const rf_tensor *logits,
                           const rf_tensor *sel_bias, int64_t n, int64_t n_expert, int64_t k, rf_moe_gating gating,
                           bool norm, float scale);
rf_status rf_cpu_matmul_id(rf_backend *be, rf_tensor *y, const rf_tensor *w, int64_t n_out, const rf_tensor *x,
                           bool x_per_slot, const rf_tensor *ids, const rf_tensor *bias, int64_t n, int64_t k);
rf_status rf_cpu_moe_combine(rf_backend *be, rf_tensor *y, const rf_tensor *z, const rf_tensor *wts, int64_t n,
                             int64_t k, int64_t m);
rf_status rf_cpu_moe_shared_gate(rf_backend *be, rf_tensor *y, const rf_tensor *z, const rf_tensor *h,
                                 const rf_tensor *w, int64_t n, int64_t m);
/* The gated DeltaNet ops (cpu_deltanet.c); contracts of rf_backend_ops.ssm_conv, gated_delta,
 * sigmoid_mul, head_split. */
rf_status rf_cpu_ssm_conv(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w, rf_tensor *state,
                          const rf_batch *b, int64_t C, int64_t K);
rf_status rf_cpu_gated_delta(rf_backend *be, rf_tensor *out, const rf_tensor *x, const rf_tensor *a,
                             const rf_tensor *bt, const rf_tensor *dt_bias, const rf_tensor *ssm_a, rf_tensor *state,
                             const rf_batch *b, int64_t H_k, int64_t H_v, int64_t S, float eps);
rf_status rf_cpu_sigmoid_mul(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *gate, int64_t n);
rf_status rf_cpu_head_split(rf_backend *be, rf_tensor *y0, rf_tensor *y1, const rf_tensor *x, int64_t rows, int64_t n);

/* f16 <-> f32 of one value in software (round to nearest even); inline: the attention's f16
 * rounding of every probability goes through them. */
static inline float rf_cpu_half_to_f32_sw(uint16_t h) {
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

static inline uint16_t rf_cpu_f32_to_half_sw(float f) {
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

/* True where the AVX2/F16C/FMA helpers may run (rf_quant_simd_level, honours RF_NO_SIMD). */
int rf_cpu_have_f16c(void);
/* Paged attention (cpu_attention.c); contract of rf_backend_ops.attention. */
rf_status rf_cpu_attention(rf_backend *be, rf_tensor *out, const rf_tensor *q, const rf_tensor *k,
                           const rf_tensor *v, const rf_batch *b, int64_t n_head, int64_t n_head_kv,
                           int64_t head_dim, float scale, int64_t window, float softcap, const rf_tensor *sinks);

/* dst[i] = f32 of n elements of a row of `type` (f32, f16, bf16 or any dequantizable type;
 * quantized rows start at a block boundary and n is a multiple of the block). */
void rf_cpu_row_to_f32(rf_type type, const void *src, float *dst, int64_t n);
/* Converts n f32 values to f16 (round to nearest even). */
void rf_cpu_f32_to_f16(const float *src, uint16_t *dst, int64_t n);
/* sum_i a[i] * b[i] over f32. */
float rf_cpu_dot_f32(const float *a, const float *b, int64_t n);
/* y[i] += s * x[i]. */
void rf_cpu_axpy_f32(float *y, const float *x, float s, int64_t n);

/* Quantizes n activations (n % 32 == 0) to Q8_0 blocks (34 bytes) or, with_sum, Q8_1 blocks
 * (36 bytes, s = d * sum q) as ggml's x86 runtime does (cpu_matmul.c). rf_cpu_act_q8 is the fast
 * path (AVX2 where the CPU has it), bit-identical to rf_cpu_act_q8_scalar for every input. */
void rf_cpu_act_q8(const float *x, void *dst, int64_t n, bool with_sum);
void rf_cpu_act_q8_scalar(const float *x, void *dst, int64_t n, bool with_sum);

#endif
