/* test_quant_props.c — properties of the type table and the converters, on fresh random data
 * (seed printed): quantize -> dequantize error bounds per type, never NaN, exactness of the
 * float conversions (all 2^16 halves/bfloat16s round-trip; f32 -> f16 matches the CPU's F16C
 * instruction on random inputs), Q8_K bsums, the size table against ggml's numbers, and the
 * error paths of the row helpers. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Bounds on rel. L2 of dequant(quant(x)) vs x for N(0,1) and U(-1,1) rows (and the same rows
 * scaled by 1e-3, and a row with one 1e4 outlier). Chosen as ~1.25x the worst of 50 rows of 4096
 * measured on 2026-11-21 (docs/quant.md lists the measurements); rows of only 1-3 blocks get
 * 1.5x (their error is an average over few scales; worst seen over 300 seeds: 1.1x the bound):
 *   q4_0 .090  q4_1 .080  q5_0 .044  q5_1 .039  q8_0 .0056  q8_1 .0056  q2_K .304  q3_K .156
 *   q4_K .074  q5_K .038  q6_K .022  q8_K .0075  mxfp4 .148 (.181 with the outlier)
 *   iq4_nl .078  iq4_xs .083  nvfp4 .105 (normal/uniform only: its UE4M3 scales span ~1e-3..448,
 *   so 1e-3 rows underflow (error 1.0) and the 1e4 outlier saturates (0.73); finite is required)
 * f16/bf16 use the format's own bound: half an ulp, 2^-11 resp. 2^-8 relative. */
typedef struct { rf_type t; double bound; } type_bound;
static const type_bound k_bounds[] = {
    {RF_TYPE_F16, 0x1p-11}, {RF_TYPE_BF16, 0x1p-8}, {RF_TYPE_Q4_0, 0.11}, {RF_TYPE_Q4_1, 0.10},
    {RF_TYPE_Q5_0, 0.055}, {RF_TYPE_Q5_1, 0.05}, {RF_TYPE_Q8_0, 0.007}, {RF_TYPE_Q8_1, 0.007},
    {RF_TYPE_Q2_K, 0.37}, {RF_TYPE_Q3_K, 0.19}, {RF_TYPE_Q4_K, 0.09}, {RF_TYPE_Q5_K, 0.047},
    {RF_TYPE_Q6_K, 0.027}, {RF_TYPE_Q8_K, 0.0095}, {RF_TYPE_MXFP4, 0.23},
    {RF_TYPE_IQ4_NL, 0.097}, {RF_TYPE_IQ4_XS, 0.10}, {RF_TYPE_NVFP4, 0.13},
};
#define N_BOUNDS (sizeof k_bounds / sizeof k_bounds[0])

static void all_finite(const float *y, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(y[i])) fail_msg("%s: element %lld is %g", what, (long long)i, y[i]);
}

static double round_trip(rf_type t, const float *x, float *y, void *buf, int64_t n) {
    rf_poison_f32(y, (size_t)n);
    assert_int_equal(rf_quantize_row(t, x, buf, n), RF_OK);
    assert_int_equal(rf_dequantize_row(t, buf, y, n), RF_OK);
    all_finite(y, n, rf_type_name(t));
    return rf_rel_l2(y, x, (size_t)n);
}

static void test_round_trip_bounds(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0x51);
    const int64_t nmax = 4096;
    float *x = malloc(sizeof(float) * nmax), *y = malloc(sizeof(float) * nmax);
    uint8_t *buf = malloc(8 * nmax);
    for (size_t k = 0; k < N_BOUNDS; k++) {
        const rf_type t = k_bounds[k].t;
        const rf_type_traits *tr = rf_type_info(t);
        const int64_t bs = tr->block_size < 32 ? 32 : tr->block_size;
        const int64_t lens[] = {bs, 3 * bs, nmax};
        double worst[4] = {0};
        for (int li = 0; li < 3; li++) {
            const int64_t n = lens[li];
            for (int dist = 0; dist < 4; dist++) {
                for (int64_t i = 0; i < n; i++) x[i] = dist == 1 ? 2 * rf_rng_uniform(&r) - 1 : rf_rng_normal(&r);
                if (dist == 2) for (int64_t i = 0; i < n; i++) x[i] *= 1e-3f;
                if (dist == 3) x[rf_rng_u64(&r) % n] = 1e4f;
                double e = round_trip(t, x, y, buf, n);
                /* rows of 1-3 blocks average over few scales: their error spreads wider */
                const double bound = k_bounds[k].bound * (n < 1024 ? 1.5 : 1.0);
                if (t == RF_TYPE_NVFP4 && dist >= 2) continue; /* out of the format's scale range */
                if (!(e < bound))
                    fail_msg("%s n=%lld dist %d: rel.L2 %.4g >= bound %.4g", tr->name, (long long)n, dist, e, bound);
                if (n == nmax && e > worst[dist]) worst[dist] = e;
            }
        }
        print_message("%-6s n=4096 worst rel.L2: normal %.4f uniform %.4f x1e-3 %.4f outlier %.4f (bound %.4g)\n", tr->name,
                      worst[0], worst[1], worst[2], worst[3], k_bounds[k].bound);
    }
    free(x), free(y), free(buf);
}

/* All-zero rows give exactly zero; tiny rows (1e-6, where the f16 block scales underflow — a
 * property of the formats, identical in ggml) still give finite values; Q8_K (f32 scale) keeps
 * its bound there. F32 is exact. */
static void test_zero_tiny_rows(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0x52);
    const int64_t n = 1024;
    float x[1024], y[1024];
    uint8_t buf[8192];
    for (size_t k = 0; k < N_BOUNDS; k++) {
        const rf_type t = k_bounds[k].t;
        memset(x, 0, sizeof x);
        round_trip(t, x, y, buf, n);
        for (int i = 0; i < n; i++)
            if (y[i] != 0.0f) fail_msg("%s: zero row gives %g at %d", rf_type_name(t), y[i], i);
        rf_rng_fill_normal(&r, x, n, 1e-6f);
        double e = round_trip(t, x, y, buf, n);
        if (t == RF_TYPE_Q8_K && !(e < k_bounds[k].bound)) fail_msg("q8_K tiny row: rel.L2 %g", e);
    }
    rf_rng_fill_normal(&r, x, n, 1.0f);
    assert_true(round_trip(RF_TYPE_F32, x, y, buf, n) == 0.0);
}

/* Ternary formats are exact on ternary data up to the f16 rounding of the scale. */
static void test_ternary_exact(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0x53);
    float x[512], y[512];
    uint8_t buf[512];
    const rf_type ts[] = {RF_TYPE_TQ1_0, RF_TYPE_TQ2_0};
    for (int k = 0; k < 2; k++) {
        const float a = 0.37f;
        for (int i = 0; i < 512; i++) x[i] = a * (float)((int)(rf_rng_u64(&r) % 3) - 1);
        x[7] = a;
        x[300] = -a; /* amax = a in both super-blocks */
        double e = round_trip(ts[k], x, y, buf, 512);
        if (!(e <= 0x1p-11)) fail_msg("%s: ternary row rel.L2 %g", rf_type_name(ts[k]), e);
    }
}

/* Every half and every bfloat16 converts to f32 and back to the same bits (NaNs: still NaN). */
static void test_f16_bf16_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = rf_fp16_to_f32((uint16_t)h);
        bool nan16 = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
        if (nan16) {
            assert_true(isnan(f));
            assert_true(((rf_f32_to_fp16(f) & 0x7C00) == 0x7C00) && (rf_f32_to_fp16(f) & 0x3FF));
        } else if (rf_f32_to_fp16(f) != h) {
            fail_msg("f16 0x%04x -> %g -> 0x%04x", h, f, rf_f32_to_fp16(f));
        }
        float b = rf_bf16_to_f32((uint16_t)h);
        bool nanb = (h & 0x7F80) == 0x7F80 && (h & 0x7F);
        if (nanb) assert_true(isnan(b) && isnan(rf_bf16_to_f32(rf_f32_to_bf16(b))));
        else if (rf_f32_to_bf16(b) != h) fail_msg("bf16 0x%04x -> %g -> 0x%04x", h, b, rf_f32_to_bf16(b));
    }
    /* a few fixed points of the definitions */
    assert_true(rf_fp16_to_f32(0x3C00) == 1.0f);
    assert_true(rf_fp16_to_f32(0x0001) == 0x1p-24f);
    assert_true(rf_fp16_to_f32(0x7BFF) == 65504.0f);
    assert_int_equal(rf_f32_to_fp16(65519.0f), 0x7BFF);
    assert_int_equal(rf_f32_to_fp16(65520.0f), 0x7C00);       /* tie at max -> even -> inf */
    assert_int_equal(rf_f32_to_fp16(0x1p-25f), 0x0000);       /* tie -> even (0) */
    assert_int_equal(rf_f32_to_fp16(0x1.8p-25f), 0x0001);
    assert_int_equal(rf_f32_to_fp16(1.0f + 0x1p-11f), 0x3C00); /* tie -> even */
    assert_int_equal(rf_f32_to_fp16(1.0f + 0x3p-11f), 0x3C02); /* tie -> even (up) */
    assert_int_equal(rf_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);
    assert_int_equal(rf_f32_to_bf16(1.0f + 0x3p-8f), 0x3F82);
    assert_true(isnan(rf_fp16_to_f32(rf_f32_to_fp16(NAN))));
    assert_true(isnan(rf_bf16_to_f32(rf_f32_to_bf16(NAN))));
}

/* f32 -> f16 against the CPU's own conversion (vcvtps2ph, round to nearest even) on random bit
 * patterns of every exponent: an oracle independent of our code. */
#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#endif
static void test_f16_vs_f16c(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (!rf_vec_dot_impl(RF_TYPE_F16, RF_SIMD_AVX2)) { /* the table's own F16C probe */
        print_message("no F16C on this CPU: skipped\n");
        return;
    }
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0x54);
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = (uint32_t)rf_rng_u64(&r);
        if (i & 1) bits = (bits & 0x807FFFFFu) | ((uint32_t)(100 + (bits >> 27) % 45) << 23); /* f16 range */
        float f;
        memcpy(&f, &bits, 4);
        uint16_t a = rf_f32_to_fp16(f), b = hw_f32_to_f16(f);
        if (isnan(f)) {
            assert_true((a & 0x7C00) == 0x7C00 && (a & 0x3FF));
            continue;
        }
        if (a != b) fail_msg("f32 0x%08x (%g): ours 0x%04x, F16C 0x%04x", bits, f, a, b);
    }
#else
    print_message("not x86-64: skipped\n");
#endif
}

static void test_q8_K_bsums(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0x55);
    float x[1024];
    uint8_t buf[4 * 292];
    for (int rep = 0; rep < 50; rep++) {
        rf_rng_fill_normal(&r, x, 1024, (float)(1 + rep));
        if (rep % 5 == 0) memset(x + 256, 0, 256 * sizeof(float)); /* an all-zero super-block */
        assert_int_equal(rf_quantize_row(RF_TYPE_Q8_K, x, buf, 1024), RF_OK);
        for (int b = 0; b < 4; b++) {
            const uint8_t *blk = buf + 292 * b;
            for (int j = 0; j < 16; j++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += (int8_t)blk[4 + 16 * j + l];
                int16_t bs;
                memcpy(&bs, blk + 4 + 256 + 2 * j, 2);
                if (bs != sum) fail_msg("block %d group %d: bsum %d, sum of quants %d", b, j, bs, sum);
            }
            for (int l = 0; l < 256; l++) assert_true((int8_t)blk[4 + l] >= -127);
        }
    }
}

/* The size table, restated from ggml (ggml.c type_traits, ggml-common.h static_asserts). */
static void test_type_table(void **state) {
    (void)state;
    static const struct { int id; const char *name; int bs, size; } k[] = {
        {0, "f32", 1, 4},        {1, "f16", 1, 2},         {2, "q4_0", 32, 18},     {3, "q4_1", 32, 20},
        {6, "q5_0", 32, 22},     {7, "q5_1", 32, 24},      {8, "q8_0", 32, 34},     {9, "q8_1", 32, 36},
        {10, "q2_K", 256, 84},   {11, "q3_K", 256, 110},   {12, "q4_K", 256, 144},  {13, "q5_K", 256, 176},
        {14, "q6_K", 256, 210},  {15, "q8_K", 256, 292},   {16, "iq2_xxs", 256, 66}, {17, "iq2_xs", 256, 74},
        {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},  {20, "iq4_nl", 32, 18},  {21, "iq3_s", 256, 110},
        {22, "iq2_s", 256, 82},  {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},        {25, "i16", 1, 2},
        {26, "i32", 1, 4},       {27, "i64", 1, 8},        {28, "f64", 1, 8},       {29, "iq1_m", 256, 56},
        {30, "bf16", 1, 2},      {34, "tq1_0", 256, 54},   {35, "tq2_0", 256, 66},  {39, "mxfp4", 32, 17},
        {40, "nvfp4", 64, 36},   {41, "q1_0", 128, 18},    {42, "q2_0", 64, 18},
    };
    int valid = 0;
    for (int id = -3; id < 50; id++) {
        const rf_type_traits *t = rf_type_info(id);
        int found = -1;
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
            if (k[i].id == id) found = (int)i;
        if (found < 0) {
            if (t) fail_msg("id %d should be invalid", id);
            assert_string_equal(rf_type_name(id), "?");
            continue;
        }
        valid++;
        assert_non_null(t);
        assert_string_equal(t->name, k[found].name);
        assert_int_equal(t->block_size, k[found].bs);
        assert_int_equal(t->type_size, k[found].size);
        rf_type back;
        assert_true(rf_type_from_name(k[found].name, &back));
        assert_int_equal((int)back, id);
        /* every quantized type with a converter is also is_quantized; vec_dot_type has a quantizer */
        if (t->vec_dot) assert_non_null(rf_type_info(t->vec_dot_type)->from_f32);
    }
    assert_int_equal(valid, 35);
    rf_type out;
    assert_true(rf_type_from_name("Q4_K", &out) && out == RF_TYPE_Q4_K);
    assert_true(rf_type_from_name("BF16", &out) && out == RF_TYPE_BF16);
    assert_false(rf_type_from_name("q4_k_m", &out));
    assert_false(rf_type_from_name("", &out));
    assert_false(rf_type_from_name(NULL, &out));
    /* what the tasks need: dequantizers and quantizers for these */
    const rf_type need_both[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_BF16, RF_TYPE_Q8_0, RF_TYPE_Q8_1, RF_TYPE_Q4_0,
                                 RF_TYPE_Q4_1, RF_TYPE_Q5_0, RF_TYPE_Q5_1, RF_TYPE_Q2_K, RF_TYPE_Q3_K, RF_TYPE_Q4_K,
                                 RF_TYPE_Q5_K, RF_TYPE_Q6_K, RF_TYPE_Q8_K, RF_TYPE_MXFP4};
    for (size_t i = 0; i < sizeof need_both / sizeof need_both[0]; i++) {
        assert_non_null(rf_type_info(need_both[i])->to_f32);
        assert_non_null(rf_type_info(need_both[i])->from_f32);
    }
}

static void test_row_helper_errors(void **state) {
    (void)state;
    size_t sz = 0;
    assert_int_equal(rf_row_size(RF_TYPE_Q4_K, 512, &sz), RF_OK);
    assert_int_equal(sz, 288);
    assert_int_equal(rf_row_size(RF_TYPE_F32, 0, &sz), RF_OK);
    assert_int_equal(sz, 0);
    assert_int_equal(rf_row_size((rf_type)4, 32, &sz), RF_ERR_INVALID_ARG);
    assert_non_null(strstr(rf_last_error(), "4"));
    assert_int_equal(rf_row_size((rf_type)99, 32, &sz), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_row_size(RF_TYPE_Q4_0, 33, &sz), RF_ERR_INVALID_ARG);
    assert_non_null(strstr(rf_last_error(), "q4_0"));
    assert_int_equal(rf_row_size(RF_TYPE_Q4_0, -32, &sz), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_row_size(RF_TYPE_F64, INT64_MAX - 7, &sz), RF_ERR_RANGE);
    float f[256];
    uint8_t b[512] = {0};
    assert_int_equal(rf_dequantize_row(RF_TYPE_IQ2_XXS, b, f, 256), RF_ERR_UNSUPPORTED);
    assert_non_null(strstr(rf_last_error(), "iq2_xxs"));
    assert_int_equal(rf_quantize_row(RF_TYPE_IQ3_S, f, b, 256), RF_ERR_UNSUPPORTED);
    assert_int_equal(rf_quantize_row(RF_TYPE_I32, f, b, 32), RF_ERR_UNSUPPORTED);
    assert_int_equal(rf_dequantize_row(RF_TYPE_Q6_K, b, f, 255), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_quantize_row(RF_TYPE_Q8_0, f, b, 31), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_dequantize_row(RF_TYPE_Q8_0, NULL, f, 32), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_dequantize_row((rf_type)31, b, f, 32), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_dequantize_row(RF_TYPE_Q8_0, b, f, 0), RF_OK);
}

int main(void) {
    rf_test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_row_helper_errors),
        cmocka_unit_test(test_f16_bf16_exhaustive),
        cmocka_unit_test(test_f16_vs_f16c),
        cmocka_unit_test(test_round_trip_bounds),
        cmocka_unit_test(test_zero_tiny_rows),
        cmocka_unit_test(test_ternary_exact),
        cmocka_unit_test(test_q8_K_bsums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
