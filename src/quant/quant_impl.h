/* quant/quant_impl.h — internal declarations shared by the files of src/quant: per-type row
 * converters (dequant.c, quantize.c), dot kernels (vec_dot.c, vec_dot_avx2.c) and unpack helpers.
 * Contracts: n is a multiple of the type's block size (the public wrappers check it). */
#ifndef RF_QUANT_IMPL_H
#define RF_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>

#include "rocmforge/quant.h"
#include "quant/blocks.h"

/* ---- small shared helpers ---- */
static inline float rf_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t rf_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* 2^(e-128): E8M0 exponent times 0.5, because the FP4 tables hold doubled values.
 * e = 0 and 1 give the subnormals 2^-128 and 2^-127; e = 255 (NaN in the spec) gives 2^127. */
static inline float rf_e8m0_to_f32_half(uint8_t e) {
    return rf_bits_to_f32(e < 2 ? (0x00200000u << e) : ((uint32_t)(e - 1) << 23));
}
/* UE4M3 scale (bias 7) times 0.5; 0 and 0x7F decode to 0 (ggml's convention). */
float rf_ue4m3_to_f32_half(uint8_t x);
uint8_t rf_f32_to_ue4m3(float x);

/* Unpacks a 6-bit scale/min pair j (0..7) of Q4_K/Q5_K's 12-byte scales field. */
static inline void rf_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* Unpacks Q3_K's 16 signed 6-bit scales (already minus 32). */
void rf_q3_K_scales(const uint8_t packed[12], int8_t out[16]);

/* Per-element quant values of one K-quant super-block, in element order (index e = 0..255). */
void rf_q2_K_unpack(const rf_block_q2_K *b, uint8_t q[256]);          /* 0..3 */
void rf_q3_K_unpack(const rf_block_q3_K *b, int8_t q[256]);           /* -4..3 */
void rf_q4_K_unpack(const rf_block_q4_K *b, uint8_t q[256]);          /* 0..15 */
void rf_q5_K_unpack(const rf_block_q5_K *b, uint8_t q[256]);          /* 0..31 */
void rf_q6_K_unpack(const rf_block_q6_K *b, int8_t q[256]);           /* -32..31 */

/* ---- row converters: rf_dq_<type> to f32 (dequant.c) ---- */
#define RF_DECL_TO(name) void rf_dq_##name(const void *src, float *dst, int64_t n)
RF_DECL_TO(f32); RF_DECL_TO(f16); RF_DECL_TO(bf16); RF_DECL_TO(f64);
RF_DECL_TO(i8); RF_DECL_TO(i16); RF_DECL_TO(i32); RF_DECL_TO(i64);
RF_DECL_TO(q4_0); RF_DECL_TO(q4_1); RF_DECL_TO(q5_0); RF_DECL_TO(q5_1);
RF_DECL_TO(q8_0); RF_DECL_TO(q8_1); RF_DECL_TO(mxfp4); RF_DECL_TO(nvfp4);
RF_DECL_TO(iq4_nl); RF_DECL_TO(iq4_xs); RF_DECL_TO(tq1_0); RF_DECL_TO(tq2_0);
RF_DECL_TO(q1_0); RF_DECL_TO(q2_0);
RF_DECL_TO(q2_K); RF_DECL_TO(q3_K); RF_DECL_TO(q4_K); RF_DECL_TO(q5_K); RF_DECL_TO(q6_K);
RF_DECL_TO(q8_K);
#undef RF_DECL_TO

/* ---- row converters: rf_qz_<type> from f32 (quantize.c), ggml's reference algorithms ---- */
#define RF_DECL_FROM(name) void rf_qz_##name(const float *src, void *dst, int64_t n)
RF_DECL_FROM(f32); RF_DECL_FROM(f16); RF_DECL_FROM(bf16);
RF_DECL_FROM(q4_0); RF_DECL_FROM(q4_1); RF_DECL_FROM(q5_0); RF_DECL_FROM(q5_1);
RF_DECL_FROM(q8_0); RF_DECL_FROM(q8_1); RF_DECL_FROM(mxfp4);
RF_DECL_FROM(q2_K); RF_DECL_FROM(q3_K); RF_DECL_FROM(q4_K); RF_DECL_FROM(q5_K); RF_DECL_FROM(q6_K);
RF_DECL_FROM(q8_K); RF_DECL_FROM(tq1_0); RF_DECL_FROM(tq2_0);
RF_DECL_FROM(iq4_nl); RF_DECL_FROM(iq4_xs); RF_DECL_FROM(nvfp4); RF_DECL_FROM(q1_0); RF_DECL_FROM(q2_0);
#undef RF_DECL_FROM

/* ---- dot kernels: scalar reference (vec_dot.c) and AVX2 (vec_dot_avx2.c) ---- */
#define RF_DECL_DOT(name) \
    void rf_vec_dot_##name(int64_t n, float *out, const void *w, const void *x); \
    void rf_vec_dot_##name##_avx2(int64_t n, float *out, const void *w, const void *x)
RF_DECL_DOT(f32); RF_DECL_DOT(f16); RF_DECL_DOT(bf16);
RF_DECL_DOT(q4_0); RF_DECL_DOT(q4_1); RF_DECL_DOT(q5_0); RF_DECL_DOT(q5_1); RF_DECL_DOT(q8_0);
RF_DECL_DOT(mxfp4); RF_DECL_DOT(iq4_nl);
RF_DECL_DOT(q2_K); RF_DECL_DOT(q3_K); RF_DECL_DOT(q4_K); RF_DECL_DOT(q5_K); RF_DECL_DOT(q6_K);
RF_DECL_DOT(iq4_xs); RF_DECL_DOT(nvfp4); RF_DECL_DOT(q1_0); RF_DECL_DOT(q2_0); RF_DECL_DOT(tq1_0); RF_DECL_DOT(tq2_0);
#undef RF_DECL_DOT

/* s + d8*d*isum - d8*dmin*summs in plain f32 (no FMA contraction: defined in vec_dot.c, which is
 * compiled for the baseline ISA), so the scalar and AVX2 K-quant kernels round identically. */
float rf_kq_accum(float s, float d8, float d, int32_t isum, float dmin, int32_t summs);

/* True when the CPU can run the *_avx2 kernels (AVX2, FMA and F16C). */
bool rf_cpu_has_avx2(void);

/* AVX-VNNI kernels (vec_dot_vnni.c); only run where rf_cpu_has_avx2() and rf_cpu_has_avxvnni().
 * The *_vnni512 twins (vec_dot_vnni512.c, same bits) run where rf_cpu_has_avx512vnni() instead. */
bool rf_cpu_has_avxvnni(void);
bool rf_cpu_has_avx512vnni(void);
void rf_vec_dot_q4_0_vnni512(int64_t n, float *out, const void *w, const void *x);
void rf_vec_dot_q4_1_vnni512(int64_t n, float *out, const void *w, const void *x);
void rf_vec_dot_q8_0_vnni512(int64_t n, float *out, const void *w, const void *x);
void rf_vec_dot4_q4_1_vnni512(int64_t n, float *out, const void *w, size_t ws, const void *x);
void rf_vec_dot4_q8_0_vnni512(int64_t n, float *out, const void *w, size_t ws, const void *x);
void rf_vec_dot4_q5_0_vnni512(int64_t n, float *out, const void *w, size_t ws, const void *x);
void rf_vec_dot4x2_q4_1_vnni512(int64_t n, float *out0, float *out1, const void *w, size_t ws, const void *x0,
                                const void *x1);
void rf_vec_dot_q4_0_vnni(int64_t n, float *out, const void *w, const void *x);
void rf_vec_dot_q4_1_vnni(int64_t n, float *out, const void *w, const void *x);
void rf_vec_dot_q8_0_vnni(int64_t n, float *out, const void *w, const void *x);

/* Four-row dot kernels: out[r] = dot(row r, x) for the rows at w + r*ws bytes, r = 0..3, each
 * bit-identical to the same level's one-row kernel (decode: the activation row is read once per
 * four weight rows and the four accumulation chains run side by side). */
typedef void (*rf_vec_dot4_fn)(int64_t n, float *out, const void *w, size_t ws, const void *x);

/* Software prefetch for the 4-row kernels, called once per block iteration i (block of bb bytes):
 * fetches bytes [4 bb i, 4 bb (i+1)) of the row group RF_DOT4_PF_AHEAD groups further on, i.e. the
 * rows a caller that walks its row groups in order reads next-but-one (past the matrix it is only
 * a hint: prefetches do not fault). Why: four rows read side by side, 4 x 34 bytes a step, defeat
 * the hardware prefetcher of Zen 4: the Q8_0 4-row kernel ran at 5.5 GB/s over a 28 MB matrix
 * (SmolLM2's LM head) against 17-19 GB/s for the one-row kernel, and at 21-23 GB/s with this. */
#define RF_DOT4_PF_AHEAD 2
static inline void rf_dot4_prefetch(const void *w, size_t ws, int64_t i, size_t bb) {
    uintptr_t p = (uintptr_t)w + RF_DOT4_PF_AHEAD * 4 * ws;
    uintptr_t a = (p + (uintptr_t)i * 4 * bb) & ~(uintptr_t)63, e = p + (uintptr_t)(i + 1) * 4 * bb;
    for (; a < e; a += 64) __builtin_prefetch((const void *)a, 0, 3);
}
void rf_vec_dot4_q4_1_vnni(int64_t n, float *out, const void *w, size_t ws, const void *x);
void rf_vec_dot4_q8_0_vnni(int64_t n, float *out, const void *w, size_t ws, const void *x);
void rf_vec_dot4_q8_0_avx2(int64_t n, float *out, const void *w, size_t ws, const void *x);
void rf_vec_dot4_q5_0_vnni(int64_t n, float *out, const void *w, size_t ws, const void *x);

/* Four weight rows x two activation rows (prompt tokens): out0[r] = dot(row r, x0), out1[r] =
 * dot(row r, x1), each bit-identical to the table's one-row kernel; each weight block is unpacked
 * once for both tokens. */
typedef void (*rf_vec_dot4x2_fn)(int64_t n, float *out0, float *out1, const void *w, size_t ws, const void *x0,
                                 const void *x1);
void rf_vec_dot4x2_q4_1_vnni(int64_t n, float *out0, float *out1, const void *w, size_t ws, const void *x0,
                             const void *x1);
/* The 4x2 kernel matching the table's current vec_dot of `type`, or NULL. */
rf_vec_dot4x2_fn rf_vec_dot4x2_for(rf_type type);

/* Four weight rows x four activation rows: out[t*os + r] = dot(row r at w + r*ws, token t at
 * x + t*xs), each bit-identical to the table's one-row kernel; pf != 0 also prefetches the row
 * group two ahead (rf_dot4_prefetch), meant for the first token tile of a row group. */
typedef void (*rf_vec_dot4x4_fn)(int64_t n, float *out, size_t os, const void *w, size_t ws, const void *x, size_t xs,
                                 int pf);
void rf_vec_dot4x4_q4_1_vnni512(int64_t n, float *out, size_t os, const void *w, size_t ws, const void *x, size_t xs,
                                int pf);
void rf_vec_dot4x4_q8_0_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, const void *x, size_t xs,
                               int pf);
/* The 4x4 kernel matching the table's current vec_dot of `type`, or NULL (Q4_1 VNNI and Q8_0
 * AVX2, in the AVX512-VNNI build only). */
rf_vec_dot4x4_fn rf_vec_dot4x4_for(rf_type type);

/* The 4-row kernel matching the table's current vec_dot of `type` (same numerics), or NULL when
 * that type/level has none (callers then loop over the one-row kernel). */
rf_vec_dot4_fn rf_vec_dot4_for(rf_type type);

/* rf_simd_level value (not in the public enum yet) that rf_vec_dot_impl accepts for the AVX-VNNI
 * kernel of a type: NULL when the CPU lacks AVX-VNNI or the type has no VNNI kernel. */
#define RF_SIMD_AVXVNNI_INTERNAL ((rf_simd_level)2)

/* Q4_K / Q6_K AVX2 kernels in ggml's x86 float order (vec_dot_avx2.c), bit-identical to
 * llama.cpp's AVX2 ggml_vec_dot_q4_K_q8_K / q6_K_q8_K. */
void rf_vec_dot_q4_K_ggml(int64_t n, float *out, const void *w, const void *x);
void rf_vec_dot_q6_K_ggml(int64_t n, float *out, const void *w, const void *x);

/* rf_vec_dot_impl level of the kernels in ggml's exact x86 float order where they differ from the
 * default pick: Q4_K, Q6_K (AVX2) and Q8_0 (the VNNI kernel); NULL for other types or when the CPU
 * cannot run them. The table uses them with RF_GGML_ORDER=1 (or its older name RF_VNNI=1). */
#define RF_SIMD_GGML_ORDER_INTERNAL ((rf_simd_level)3)

#endif
