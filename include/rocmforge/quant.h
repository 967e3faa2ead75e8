/* rocmforge/quant.h — the type table: block size, bytes per block, (de)quantize per format.
 * The one place that knows about a block format (docs/ARCHITECTURE.md §4.2); layouts are ggml's,
 * byte for byte. */
#ifndef ROCMFORGE_QUANT_H
#define ROCMFORGE_QUANT_H

#include "rocmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_QK_K 256 /* elements per K-quant super-block */

/* Converts n contiguous elements of a row (n a multiple of block_size) to/from f32. */
typedef void (*rf_to_f32_fn)(const void *src, float *dst, int64_t n);
typedef void (*rf_from_f32_fn)(const float *src, void *dst, int64_t n);

/* Dot product of one weight row with one activation row:
 *   *out = sum_i w[i] * x[i], i < n
 * w: n elements of the weight type (n a multiple of its block size);
 * x: n elements already converted to the traits' vec_dot_type (rf_quantize_row(vec_dot_type, ...)).
 * Computed in int32 per block and f32 across blocks (like ggml): vs a double dot of the
 * dequantized operands the error is <= 1e-5 * sum|w_i*x_i|; a matvec vs f32 activations is within
 * rel. L2 1e-2 (Q8_0/Q8_1 activations) or 1.5e-2 (Q8_K), the activation rounding included
 * (tests/unit/test_quant_dot.c). No allocation, never fails. */
typedef void (*rf_vec_dot_fn)(int64_t n, float *out, const void *w, const void *x);

typedef struct rf_type_traits {
    const char *name;        /* ggml's name: "f32", "q4_0", "q4_K", "bf16", "mxfp4", ... */
    int64_t block_size;      /* elements per block (1 for plain floats) */
    size_t type_size;        /* bytes per block */
    bool is_quantized;
    rf_to_f32_fn to_f32;     /* NULL where ROCmForge cannot dequantize this type */
    rf_from_f32_fn from_f32; /* NULL where there is no reference quantizer */
    rf_type vec_dot_type;    /* activation format vec_dot expects (F32 for float weights) */
    rf_vec_dot_fn vec_dot;   /* NULL where there is no dot kernel; SIMD chosen at first use */
} rf_type_traits;

/* Number of ids the type table covers (ggml's GGML_TYPE_COUNT). rf_type_info(id) is NULL for
 * id >= RF_TYPE_TABLE_SIZE. */
#define RF_TYPE_TABLE_SIZE RF_TYPE_COUNT

/* Traits of a type id, or NULL for an id that is not a valid ggml type (removed or >= COUNT).
 * Types we can only size (IQ*, TQ*) have a row with to_f32/from_f32 NULL. */
const rf_type_traits *rf_type_info(int type);

/* "q4_K" etc.; "?" for an invalid id. */
const char *rf_type_name(int type);

/* Parses a type name, case-insensitive ("Q4_K", "q8_0", "F16", "bf16"). Returns false if unknown. */
bool rf_type_from_name(const char *name, rf_type *out);

/* Bytes of a row of n elements. Fails (RF_ERR_INVALID_ARG) if the type is invalid or n is not a
 * multiple of its block size, and RF_ERR_RANGE on overflow. */
rf_status rf_row_size(rf_type type, int64_t n, size_t *out);

/* Dequantize / quantize one row of n elements (n a multiple of the block size).
 * Errors: invalid type, n not a multiple of the block, no converter for this type. */
rf_status rf_dequantize_row(rf_type type, const void *src, float *dst, int64_t n);
rf_status rf_quantize_row(rf_type type, const float *src, void *dst, int64_t n);

/* Which implementation of the dot kernels a table entry uses. The table picks
 * RF_SIMD_AVX2 when the CPU has AVX2+FMA+F16C and RF_NO_SIMD is not set to a non-empty value
 * other than "0"; otherwise RF_SIMD_SCALAR. */
typedef enum rf_simd_level { RF_SIMD_SCALAR = 0, RF_SIMD_AVX2 = 1 } rf_simd_level;

/* The level the table uses (decided once, at the first call of any table function). */
rf_simd_level rf_quant_simd_level(void);

/* The dot kernel of `type` at a given level, for tests and benchmarks: NULL if the type has no
 * kernel at that level or the CPU cannot run it (RF_SIMD_AVX2 without AVX2/FMA/F16C). A type
 * without a hand-written AVX2 kernel returns its scalar kernel for RF_SIMD_AVX2. */
rf_vec_dot_fn rf_vec_dot_impl(rf_type type, rf_simd_level level);

/* IEEE half and bfloat16 conversions (round-to-nearest-even on the way down; NaN stays NaN). */
float rf_fp16_to_f32(uint16_t h);
uint16_t rf_f32_to_fp16(float f);
float rf_bf16_to_f32(uint16_t h);
uint16_t rf_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif
#endif
