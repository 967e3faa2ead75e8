/* test_quant_mxfp4.c — MXFP4 (GGUF type 39, gpt-oss's experts) by hand: blocks written byte by
 * byte with known E8M0 scales and E2M1 nibbles, their values worked out from the OCP MX rule
 * x = 2^(e - 127) * fp4(q), fp4 = 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives (element j in
 * the low nibble of qs[j], element j + 16 in the high one); the dot kernels (scalar and the
 * table's SIMD pick) against Q8_0 activations with values chosen so every product is exact;
 * quantize of exactly representable values is lossless. */
#include "test_util.h"

#include <math.h>
#include <string.h>

#include "quant/blocks.h"
#include "rocmforge/quant.h"

static const double k_e2m1[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6};

static void test_dequant_by_hand(void **state) {
    (void)state;
    rf_block_mxfp4 b[4];
    /* block 0: e = 127 (scale 1), nibbles j and 15 - j */
    b[0].e = 127;
    for (int j = 0; j < 16; j++) b[0].qs[j] = (uint8_t)(j | (15 - j) << 4);
    /* block 1: e = 130 (scale 8), every low nibble 7 (6 -> 48), every high nibble 9 (-.5 -> -4) */
    b[1].e = 130;
    memset(b[1].qs, 0x97, 16);
    /* block 2: e = 1, scale 2^-126: its values 2^-127 and 2^-126 are f32 subnormal / minimum normal */
    b[2].e = 1;
    memset(b[2].qs, 0x21, 16); /* low 1 (.5), high 2 (1) */
    /* block 3: e = 254 (2^127): 0.5 * 2^127 = 2^126; 0 stays 0 */
    b[3].e = 254;
    memset(b[3].qs, 0x01, 16); /* low .5, high 0 */
    float y[128];
    assert_int_equal(rf_dequantize_row(RF_TYPE_MXFP4, b, y, 128), RF_OK);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)k_e2m1[j]);
        assert_true(y[16 + j] == (float)k_e2m1[15 - j]);
        assert_true(y[32 + j] == 48.0f && y[48 + j] == -4.0f);
        assert_true(y[64 + j] == ldexpf(1.0f, -127) && y[80 + j] == ldexpf(1.0f, -126));
        assert_true(y[96 + j] == ldexpf(1.0f, 126) && y[112 + j] == 0.0f);
    }
    /* e = 0: 0.5 * 2^-127 = 2^-128 (ggml's subnormal, not zero) */
    b[0].e = 0;
    memset(b[0].qs, 0x11, 16);
    assert_int_equal(rf_dequantize_row(RF_TYPE_MXFP4, b, y, 32), RF_OK);
    for (int j = 0; j < 32; j++) assert_true(y[j] == ldexpf(1.0f, -128));
    size_t rs = 0;
    assert_int_equal(rf_row_size(RF_TYPE_MXFP4, 2880, &rs), RF_OK);
    assert_int_equal(rs, 2880 / 32 * 17);
}

/* Q8_0 activation block with d = 1/2 and int8 values v: x = v / 2 (exact in f16). */
static void q8_block(rf_block_q8_0 *x, const int8_t *v) {
    x->d = 0x3800; /* f16 0.5 */
    memcpy(x->qs, v, 32);
}

static void test_dot_by_hand(void **state) {
    (void)state;
    rf_block_mxfp4 w[2];
    rf_block_q8_0 x[2];
    int8_t v[32];
    /* block 0: e = 128 (scale 2): weights 2 fp4(q); x = v / 2 */
    w[0].e = 128;
    for (int j = 0; j < 16; j++) w[0].qs[j] = (uint8_t)(j | (15 - j) << 4);
    for (int j = 0; j < 32; j++) v[j] = (int8_t)(j - 16);
    q8_block(&x[0], v);
    double want = 0;
    for (int j = 0; j < 16; j++) want += 2 * k_e2m1[j] * (j - 16) / 2.0 + 2 * k_e2m1[15 - j] * (j + 16 - 16) / 2.0;
    /* block 1: e = 125 (scale 1/4), every nibble 7 (6): 1.5 * sum(x) */
    w[1].e = 125;
    memset(w[1].qs, 0x77, 16);
    for (int j = 0; j < 32; j++) v[j] = (int8_t)(3 * j - 40);
    q8_block(&x[1], v);
    for (int j = 0; j < 32; j++) want += 1.5 * (3 * j - 40) / 2.0;
    const rf_simd_level lv[2] = {RF_SIMD_SCALAR, RF_SIMD_AVX2};
    for (int i = 0; i < 2; i++) {
        rf_vec_dot_fn f = rf_vec_dot_impl(RF_TYPE_MXFP4, lv[i]);
        if (!f) continue;
        float got = NAN;
        f(64, &got, w, x);
        if (got != (float)want) fail_msg("mxfp4 dot level %d: %.9g, by hand %.9g", (int)lv[i], got, want);
    }
    const rf_type_traits *tr = rf_type_info(RF_TYPE_MXFP4);
    assert_non_null(tr);
    assert_int_equal(tr->vec_dot_type, RF_TYPE_Q8_0);
}

/* values on the grid of one block scale come back exactly */
static void test_quantize_exact(void **state) {
    (void)state;
    float x[64], y[64];
    for (int j = 0; j < 32; j++) x[j] = (float)(k_e2m1[(j * 7) % 16] * 4.0); /* amax 24: e = 4 - 2 */
    x[5] = 24.0f;
    for (int j = 0; j < 32; j++) x[32 + j] = (float)(k_e2m1[(j * 5 + 3) % 16] / 64.0);
    x[40] = -6.0f / 64.0f;
    rf_block_mxfp4 b[2];
    assert_int_equal(rf_quantize_row(RF_TYPE_MXFP4, x, b, 64), RF_OK);
    assert_int_equal(b[0].e, 127 + 2);
    assert_int_equal(b[1].e, 127 - 6);
    assert_int_equal(rf_dequantize_row(RF_TYPE_MXFP4, b, y, 64), RF_OK);
    for (int j = 0; j < 64; j++)
        if (y[j] != x[j] && !(x[j] == 0 && y[j] == 0)) fail_msg("element %d: %g -> %g", j, x[j], y[j]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_by_hand),
        cmocka_unit_test(test_dot_by_hand),
        cmocka_unit_test(test_quantize_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
