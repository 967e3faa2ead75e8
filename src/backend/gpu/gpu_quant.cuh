/* gpu_quant.cuh — device-side decoding of ggml block formats, byte-exact with
 * src/quant (rf_dequantize_row is the CPU twin of everything here). Byte offsets are written out
 * rather than taken from quant/blocks.h structs so that no alignment is assumed: blocks of 18,
 * 22, 34 or 210 bytes sit at 2-byte boundaries. */
#ifndef RF_GPU_QUANT_CUH
#define RF_GPU_QUANT_CUH

#include "backend/gpu/gpu_compat.h"
#include "rocmforge/core.h"

static __device__ __forceinline__ float rf_h2f_bits(uint16_t h) {
    return rf_half2float(*(const rf_half *)&h);
}
static __device__ __forceinline__ uint16_t rf_ld_u16(const uint8_t *p) {
    return *(const uint16_t *)p; /* p is 2-byte aligned in every format we read this way */
}
static __device__ __forceinline__ uint32_t rf_ld_u32_a2(const uint8_t *p) {
    return (uint32_t)rf_ld_u16(p) | ((uint32_t)rf_ld_u16(p + 2) << 16);
}
static __device__ __forceinline__ float rf_ld_half(const uint8_t *p) { return rf_h2f_bits(rf_ld_u16(p)); }

__device__ static const int8_t rf_k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};
__device__ static const int8_t rf_k_fp4x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* block size (elements) and bytes per block of the types the GPU decodes; 0 = unsupported */
static __host__ __device__ __forceinline__ int rf_gq_block(int t) {
    switch (t) {
    case RF_TYPE_F32: case RF_TYPE_F16: case RF_TYPE_BF16: return 1;
    case RF_TYPE_Q4_0: case RF_TYPE_Q4_1: case RF_TYPE_Q5_0: case RF_TYPE_Q5_1:
    case RF_TYPE_Q8_0: case RF_TYPE_IQ4_NL: case RF_TYPE_MXFP4: return 32;
    case RF_TYPE_Q2_K: case RF_TYPE_Q3_K: case RF_TYPE_Q4_K: case RF_TYPE_Q5_K:
    case RF_TYPE_Q6_K: case RF_TYPE_IQ4_XS: return 256;
    default: return 0;
    }
}
static __host__ __device__ __forceinline__ int rf_gq_bytes(int t) {
    switch (t) {
    case RF_TYPE_F32: return 4;
    case RF_TYPE_F16: case RF_TYPE_BF16: return 2;
    case RF_TYPE_Q4_0: return 18;
    case RF_TYPE_Q4_1: return 20;
    case RF_TYPE_Q5_0: return 22;
    case RF_TYPE_Q5_1: return 24;
    case RF_TYPE_Q8_0: return 34;
    case RF_TYPE_IQ4_NL: return 18;
    case RF_TYPE_MXFP4: return 17;
    case RF_TYPE_Q2_K: return 84;
    case RF_TYPE_Q3_K: return 110;
    case RF_TYPE_Q4_K: return 144;
    case RF_TYPE_Q5_K: return 176;
    case RF_TYPE_Q6_K: return 210;
    case RF_TYPE_IQ4_XS: return 136;
    default: return 0;
    }
}

/* 6-bit scale and min of sub-block j (0..7) from Q4_K/Q5_K's 12-byte field */
static __device__ __forceinline__ void rf_k4_sm(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element e (0 <= e < block size) of the block at b, as f32. Obviously-right per-element
 * decoding used by dequantize / get_rows; the GEMV kernels have their own vectorised paths. */
static __device__ __forceinline__ float rf_dq_elem(int t, const uint8_t *b, int e) {
    switch (t) {
    case RF_TYPE_F32: return *(const float *)b;
    case RF_TYPE_F16: return rf_ld_half(b);
    case RF_TYPE_BF16: return rf_bf16_to_float_dev(rf_ld_u16(b));
    case RF_TYPE_Q4_0: {
        int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
        return (float)(q - 8) * rf_ld_half(b);
    }
    case RF_TYPE_Q4_1: {
        int q = e < 16 ? (b[4 + e] & 0xF) : (b[4 + e - 16] >> 4);
        return (float)q * rf_ld_half(b) + rf_ld_half(b + 2);
    }
    case RF_TYPE_Q5_0: case RF_TYPE_Q5_1: {
        const int o = t == RF_TYPE_Q5_0 ? 2 : 4;
        uint32_t qh = rf_ld_u32_a2(b + o);
        int q = e < 16 ? (b[o + 4 + e] & 0xF) : (b[o + 4 + e - 16] >> 4);
        q |= ((qh >> e) & 1u) << 4;
        return t == RF_TYPE_Q5_0 ? (float)(q - 16) * rf_ld_half(b)
                                 : (float)q * rf_ld_half(b) + rf_ld_half(b + 2);
    }
    case RF_TYPE_Q8_0: return (float)(int8_t)b[2 + e] * rf_ld_half(b);
    case RF_TYPE_IQ4_NL: {
        int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
        return (float)rf_k_iq4nl[q] * rf_ld_half(b);
    }
    case RF_TYPE_MXFP4: {
        const uint8_t ex = b[0];
        /* e8m0 scale times 0.5 (the table holds doubled values) */
        float d = __uint_as_float(ex < 2 ? (0x00200000u << ex) : ((uint32_t)(ex - 1) << 23));
        int q = e < 16 ? (b[1 + e] & 0xF) : (b[1 + e - 16] >> 4);
        return (float)rf_k_fp4x2[q] * d;
    }
    case RF_TYPE_Q2_K: { /* scales[16] qs[64] d dmin */
        const uint8_t sc = b[e / 16];
        int q = (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        return rf_ld_half(b + 80) * (float)(sc & 0xF) * (float)q - rf_ld_half(b + 82) * (float)(sc >> 4);
    }
    case RF_TYPE_Q3_K: { /* hmask[32] qs[64] scales[12] d */
        const uint8_t *p = b + 96;
        const int j = e / 16;
        int lo = j < 8 ? (p[j] & 0xF) : (p[j - 8] >> 4);
        int hi = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        int sc = (lo | (hi << 4)) - 32;
        int q = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        int hb = (b[e % 32] >> (e / 32)) & 1;
        return rf_ld_half(b + 108) * (float)sc * (float)(q - (hb ? 0 : 4));
    }
    case RF_TYPE_Q4_K: case RF_TYPE_Q5_K: { /* d dmin scales[12] [qh[32]] qs[128] */
        const int j = e / 32;
        int sc, m;
        rf_k4_sm(j, b + 4, &sc, &m);
        const int qo = t == RF_TYPE_Q4_K ? 16 : 48;
        uint8_t byte = b[qo + 32 * (e / 64) + e % 32];
        int q = (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
        if (t == RF_TYPE_Q5_K) q |= ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
        return rf_ld_half(b) * (float)sc * (float)q - rf_ld_half(b + 2) * (float)m;
    }
    case RF_TYPE_Q6_K: { /* ql[128] qh[64] scales[16] d */
        const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
        uint8_t byte = b[64 * h + l + 32 * (k & 1)];
        int lo = k < 2 ? (byte & 0xF) : (byte >> 4);
        int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
        int q = (lo | (hi << 4)) - 32;
        return rf_ld_half(b + 208) * (float)(int8_t)b[192 + e / 16] * (float)q;
    }
    case RF_TYPE_IQ4_XS: { /* d scales_h(u16) scales_l[4] qs[128] */
        const int ib = e / 32, j = e % 32;
        int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((rf_ld_u16(b + 2) >> (2 * ib)) & 3) << 4);
        const uint8_t *qs = b + 8 + 16 * ib;
        int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        return rf_ld_half(b) * (float)(ls - 32) * (float)rf_k_iq4nl[q];
    }
    default: return __int_as_float(0x7fc00000);
    }
}

/* ggml's activation rounding (as rf_k_quantize_x and the CPU's act_q8) taken to f16, for the
 * f16 tensor-core products of quantized weights (dequantize + BLAS in gpu_gemm.cu, W4A16): v is
 * this lane's element of a group of 32 consecutive lanes; per group q = rint(v 127 / amax),
 * result f16(q d) with d = f16(amax / 127) (f32 where f16 would overflow). Every lane of the
 * group must call it (a shuffle; m < 32 stays within the group on wave32 and wave64). */
static __device__ __forceinline__ rf_half rf_act_q8_half(float v) {
    float amax = fabsf(v);
    for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, RF_SHFL_XOR(amax, m));
    const float d32 = amax / 127.0f, d16 = rf_half2float(rf_float2half(d32));
    const float d = d16 <= 65504.0f ? d16 : d32;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    return rf_float2half((float)__float2int_rn(v * id) * d);
}

#endif
