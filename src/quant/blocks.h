/* quant/blocks.h — byte-exact C structs of the ggml/GGUF block formats (docs/ARCHITECTURE.md §4.2), with
 * size assertions. Field order and sizes follow ggml's ggml-common.h; every struct is made of
 * 1- and 2-byte members (Q8_K: 4-byte float first) so no padding can appear.
 * Plain C; also usable from CUDA/HIP device code (no C-only constructs besides the asserts). */
#ifndef RF_QUANT_BLOCKS_H
#define RF_QUANT_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#define RF_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define RF_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define RF_QK4_0 32
#define RF_QK4_1 32
#define RF_QK5_0 32
#define RF_QK5_1 32
#define RF_QK8_0 32
#define RF_QK8_1 32
#define RF_QK_MXFP4 32
#define RF_QK_NVFP4 64
#define RF_QK_NVFP4_SUB 16
#define RF_QK4_NL 32
#define RF_QK1_0 128
#define RF_QK2_0 64
#define RF_QKK 256          /* == RF_QK_K (quant.h) */
#define RF_K_SCALE_SIZE 12

typedef uint16_t rf_half; /* IEEE binary16 bits */

/* x = d * (q - 8), q 4-bit; element j in low nibble of qs[j], element j+16 in high nibble. */
typedef struct { rf_half d; uint8_t qs[16]; } rf_block_q4_0;
/* x = d * q + m */
typedef struct { rf_half d; rf_half m; uint8_t qs[16]; } rf_block_q4_1;
/* x = d * (q - 16), q 5-bit: low 4 bits as Q4_0, bit 4 of element j in bit j of qh (LE u32). */
typedef struct { rf_half d; uint8_t qh[4]; uint8_t qs[16]; } rf_block_q5_0;
typedef struct { rf_half d; rf_half m; uint8_t qh[4]; uint8_t qs[16]; } rf_block_q5_1;
/* x = d * q, q int8 */
typedef struct { rf_half d; int8_t qs[32]; } rf_block_q8_0;
/* activation format: s = d * sum(qs) */
typedef struct { rf_half d; rf_half s; int8_t qs[32]; } rf_block_q8_1;
/* x = 2^(e-128) * kvalues_fp4[q] (kvalues are doubled E2M1 values) */
typedef struct { uint8_t e; uint8_t qs[16]; } rf_block_mxfp4;
/* 4 sub-blocks of 16 with UE4M3 scales */
typedef struct { uint8_t d[4]; uint8_t qs[32]; } rf_block_nvfp4;
/* x = d * kvalues_iq4nl[q] */
typedef struct { rf_half d; uint8_t qs[16]; } rf_block_iq4_nl;
/* 1-bit: x = q ? d : -d, bit j of qs (LSB first) */
typedef struct { rf_half d; uint8_t qs[16]; } rf_block_q1_0;
/* 2-bit: x = (q - 1) * d, 4 per byte LSB first */
typedef struct { rf_half d; uint8_t qs[16]; } rf_block_q2_0;

/* ---- K-quants: super-blocks of 256 ---- */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; rf_half d; rf_half dmin; } rf_block_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; rf_half d; } rf_block_q3_K;
typedef struct { rf_half d; rf_half dmin; uint8_t scales[12]; uint8_t qs[128]; } rf_block_q4_K;
typedef struct { rf_half d; rf_half dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } rf_block_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; rf_half d; } rf_block_q6_K;
/* activation format for K-quant dots: bsums[j] = sum of qs[16j .. 16j+15] */
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } rf_block_q8_K;

/* ---- formats we only size (no converter yet) ---- */
typedef struct { rf_half d; uint16_t qs[32]; } rf_block_iq2_xxs;
typedef struct { rf_half d; uint16_t qs[32]; uint8_t scales[8]; } rf_block_iq2_xs;
typedef struct { rf_half d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } rf_block_iq2_s;
typedef struct { rf_half d; uint8_t qs[96]; } rf_block_iq3_xxs;
typedef struct { rf_half d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; } rf_block_iq3_s;
typedef struct { rf_half d; uint8_t qs[32]; uint16_t qh[8]; } rf_block_iq1_s;
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } rf_block_iq1_m;
typedef struct { rf_half d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } rf_block_iq4_xs;
typedef struct { uint8_t qs[48]; uint8_t qh[4]; rf_half d; } rf_block_tq1_0;
typedef struct { uint8_t qs[64]; rf_half d; } rf_block_tq2_0;

RF_STATIC_ASSERT(sizeof(rf_block_q4_0) == 18, "q4_0 size");
RF_STATIC_ASSERT(sizeof(rf_block_q4_1) == 20, "q4_1 size");
RF_STATIC_ASSERT(sizeof(rf_block_q5_0) == 22, "q5_0 size");
RF_STATIC_ASSERT(sizeof(rf_block_q5_1) == 24, "q5_1 size");
RF_STATIC_ASSERT(sizeof(rf_block_q8_0) == 34, "q8_0 size");
RF_STATIC_ASSERT(sizeof(rf_block_q8_1) == 36, "q8_1 size");
RF_STATIC_ASSERT(sizeof(rf_block_mxfp4) == 17, "mxfp4 size");
RF_STATIC_ASSERT(sizeof(rf_block_nvfp4) == 36, "nvfp4 size");
RF_STATIC_ASSERT(sizeof(rf_block_iq4_nl) == 18, "iq4_nl size");
RF_STATIC_ASSERT(sizeof(rf_block_q1_0) == 18, "q1_0 size");
RF_STATIC_ASSERT(sizeof(rf_block_q2_0) == 18, "q2_0 size");
RF_STATIC_ASSERT(sizeof(rf_block_q2_K) == 84, "q2_K size");
RF_STATIC_ASSERT(sizeof(rf_block_q3_K) == 110, "q3_K size");
RF_STATIC_ASSERT(sizeof(rf_block_q4_K) == 144, "q4_K size");
RF_STATIC_ASSERT(sizeof(rf_block_q5_K) == 176, "q5_K size");
RF_STATIC_ASSERT(sizeof(rf_block_q6_K) == 210, "q6_K size");
RF_STATIC_ASSERT(sizeof(rf_block_q8_K) == 292, "q8_K size");
RF_STATIC_ASSERT(sizeof(rf_block_iq2_xxs) == 66, "iq2_xxs size");
RF_STATIC_ASSERT(sizeof(rf_block_iq2_xs) == 74, "iq2_xs size");
RF_STATIC_ASSERT(sizeof(rf_block_iq2_s) == 82, "iq2_s size");
RF_STATIC_ASSERT(sizeof(rf_block_iq3_xxs) == 98, "iq3_xxs size");
RF_STATIC_ASSERT(sizeof(rf_block_iq3_s) == 110, "iq3_s size");
RF_STATIC_ASSERT(sizeof(rf_block_iq1_s) == 50, "iq1_s size");
RF_STATIC_ASSERT(sizeof(rf_block_iq1_m) == 56, "iq1_m size");
RF_STATIC_ASSERT(sizeof(rf_block_iq4_xs) == 136, "iq4_xs size");
RF_STATIC_ASSERT(sizeof(rf_block_tq1_0) == 54, "tq1_0 size");
RF_STATIC_ASSERT(sizeof(rf_block_tq2_0) == 66, "tq2_0 size");

/* Doubled E2M1 values shared by MXFP4 and NVFP4 (OCP MX spec v1.0). */
#define RF_KVALUES_FP4_INIT {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
/* IQ4_NL / IQ4_XS non-linear levels. */
#define RF_KVALUES_IQ4NL_INIT {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

#endif
