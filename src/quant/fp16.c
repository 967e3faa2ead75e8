/* quant/fp16.c — IEEE binary16 and bfloat16 <-> f32 conversions (scalar, bit-exact,
 * round-to-nearest-even, NaN stays NaN), and the small-float scale decoders of the FP4 formats. */
#include <math.h>

#include "quant/quant_impl.h"

/* Exact: every half is representable as a float. NaN payload bits are kept (shifted up). */
float rf_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in f32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return rf_bits_to_f32(sign | 0x7F800000u | (mant << 13));
    return rf_bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Round to nearest, ties to even (what F16C's vcvtps2ph with imm 0 and ggml's reference do).
 * |f| >= 65520 (including inf) becomes inf; NaN becomes a quiet NaN keeping the top payload bits. */
uint16_t rf_f32_to_fp16(float f) {
    uint32_t x = rf_f32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return (uint16_t)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
    if (ax >= 0x477FF000u) return (uint16_t)(sign | 0x7C00);
    if (ax >= 0x38800000u) { /* result is a normal half (rounding may carry into the exponent) */
        uint32_t r = ax + 0xFFFu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    if (ax <= 0x33000000u) return sign; /* <= 2^-25: rounds to (signed) zero, the tie goes to even 0 */
    /* subnormal half: q = round_even(|f| * 2^24) */
    uint32_t e = ax >> 23;
    uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t s = 126 - e; /* 14..24 */
    uint32_t q = mant >> s;
    uint32_t rem = mant & ((1u << s) - 1);
    uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float rf_bf16_to_f32(uint16_t h) { return rf_bits_to_f32((uint32_t)h << 16); }

/* RNE on the top 16 bits; NaN is kept and forced quiet (bit 6 of the bf16), like ggml. */
uint16_t rf_f32_to_bf16(float f) {
    uint32_t x = rf_f32_to_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float rf_ue4m3_to_f32_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    int exp = (x >> 3) & 0xF;
    int man = x & 0x7;
    float raw = exp == 0 ? ldexpf((float)man, -9) : ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return raw * 0.5f;
}

/* f32 -> UE4M3 (bias 7, no sign), ggml's rounding: the 4th mantissa bit rounds half up,
 * values above 448 saturate to 0x7E (448), subnormals are round(x * 2^9) in 1..7, x <= 0 -> 0. */
uint8_t rf_f32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    uint32_t bits = rf_f32_to_bits(x);
    int e = (int)((bits >> 23) & 0xFF) - 127 + 7;
    if (e <= 0) {
        int man = (int)(x * 512.0f + 0.5f);
        if (man > 7) man = 7;
        return man < 1 ? 0 : (uint8_t)man;
    }
    if (e >= 15) return 0x7E;
    int man = (int)((bits >> 20) & 7) + (int)((bits >> 19) & 1);
    if (man > 7) {
        man = 0;
        if (++e >= 15) return 0x7E;
    }
    return (uint8_t)((e << 3) | man);
}
