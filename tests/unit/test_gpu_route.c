/* test_gpu_route.c — the GPU product router (src/backend/gpu/gpu_route.c), a pure function of its
 * facts, checked on the host in every build: the route of each token count under the default
 * knobs (one GEMV call up to 16 tokens where gemv_mt takes the type, else 8), deterministic mode
 * (MMQ for every count or an error, never a count-dependent kernel), types without MMQ, builds
 * without BLAS and the knobs' edges; and the decode attention's kernel by depth bucket, cache type,
 * window, mode and knobs (rf_gpu_attn_decode_mma). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* the router is plain C with no device code: compiled in here so CPU-only builds test it too */
#include "backend/gpu/gpu_route.c"

static rf_gpu_route_facts facts(rf_type t, int64_t n, bool mmq) {
    rf_gpu_route_facts f;
    memset(&f, 0, sizeof f);
    f.type = t, f.n_tokens = n, f.n_in = 4096, f.n_out = 4096;
    f.mmq = mmq, f.gemv = true, f.blas = true;
    f.gemv_n = mmq ? 16 : 8; /* gemv_mt takes what MMQ takes (Q4_0 .. Q6_K, CUDA sm_80+) */
    f.mmq_min = 17, f.mmq_max = 96, f.gemv_max = 64; /* the knobs' defaults (docs/knobs.md) */
    return f;
}

static rf_gpu_route_kind route(rf_type t, int64_t n, bool mmq) {
    const rf_gpu_route_facts f = facts(t, n, mmq);
    return rf_gpu_route(&f);
}

static void test_defaults(void **state) {
    (void)state;
    for (int64_t n = 1; n <= 600; n++) {
        /* 1..16 tokens one GEMV call (gemv_mt from 2), MMQ up to 96, BLAS past it */
        const rf_gpu_route_kind want = n <= 16 ? RF_ROUTE_GEMV : n <= 96 ? RF_ROUTE_MMQ : RF_ROUTE_BLAS;
        if (route(RF_TYPE_Q4_0, n, true) != want) fail_msg("q4_0 n=%lld: %s", (long long)n, rf_gpu_route_name(route(RF_TYPE_Q4_0, n, true)));
        /* MMQ's types where gemv_mt does not take the rows (one GEMV call takes 8): MMQ from 5,
         * as before gemv_mt */
        rf_gpu_route_facts f8 = facts(RF_TYPE_Q4_K, n, true);
        f8.gemv_n = 8;
        assert_int_equal(rf_gpu_route(&f8), n <= 4 ? RF_ROUTE_GEMV : n <= 96 ? RF_ROUTE_MMQ : RF_ROUTE_BLAS);
        /* no MMQ kernel nor gemv_mt (a device older than sm_80): GEMV, groups of 8 up to 64, BLAS */
        const rf_gpu_route_kind w2 = n <= 8 ? RF_ROUTE_GEMV : n <= 64 ? RF_ROUTE_GEMV_GROUPS : RF_ROUTE_BLAS;
        assert_int_equal(route(RF_TYPE_Q4_1, n, false), w2);
        /* gemv_mt without MMQ (Q4_1, Q5_0, Q5_1): one call up to 16, then groups of 16 up to 64 */
        rf_gpu_route_facts f41 = facts(RF_TYPE_Q4_1, n, false);
        f41.gemv_n = 16;
        assert_int_equal(rf_gpu_route(&f41), n <= 16 ? RF_ROUTE_GEMV : n <= 64 ? RF_ROUTE_GEMV_GROUPS : RF_ROUTE_BLAS);
        /* unquantized weights never take GEMV groups */
        assert_int_equal(route(RF_TYPE_F16, n, false), n <= 8 ? RF_ROUTE_GEMV : RF_ROUTE_BLAS);
    }
}

static void test_deterministic(void **state) {
    (void)state;
    for (int64_t n = 1; n <= 600; n += 7) {
        rf_gpu_route_facts f = facts(RF_TYPE_Q4_K, n, true);
        f.invariant = true;
        assert_int_equal(rf_gpu_route(&f), RF_ROUTE_MMQ); /* one kernel whatever the count */
        f.mmq = false;
        assert_int_equal(rf_gpu_route(&f), RF_ROUTE_NONE); /* an error, not a count-dependent path */
    }
    assert_string_equal(rf_gpu_route_name(RF_ROUTE_NONE), "none");
}

static void test_knobs_and_builds(void **state) {
    (void)state;
    rf_gpu_route_facts f = facts(RF_TYPE_Q8_0, 24, true);
    f.mmq_max = 0; /* never MMQ: past one GEMV call, groups */
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_GEMV_GROUPS);
    f.mmq_max = 128, f.mmq_min = 0; /* below 1: from one token */
    f.n_tokens = 1;
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_MMQ);
    f.mmq_min = 5, f.n_tokens = 5; /* the knob brings MMQ into the GEMV's range */
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_MMQ);
    f.n_tokens = 4;
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_GEMV);
    f.gemv_n = 0, f.mmq = false; /* below 8: one GEMV call takes 8 at least */
    f.n_tokens = 8, f.mmq_min = 17;
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_GEMV);
    f.n_tokens = 9;
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_GEMV_GROUPS);
    f.mmq = true, f.gemv_n = 8, f.mmq_min = 7; /* no gemv_mt: MMQ from 5 whatever the knob says above */
    f.n_tokens = 6;
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_MMQ);
    f.gemv_n = 16, f.n_tokens = 200, f.blas = false; /* HIP without hipBLAS: groups past MMQ */
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_GEMV_GROUPS);
    f.type = RF_TYPE_F16, f.mmq = false;
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_GEMV_GROUPS);
    f.blas = true, f.type = RF_TYPE_Q6_K, f.mmq = true, f.gemv_max = 256;
    assert_int_equal(rf_gpu_route(&f), RF_ROUTE_GEMV_GROUPS); /* past MMQ's 128, within 256 */
}

/* RF_GPU_MMQ_WIDE: rows of at least mmq_wide elements of Q5_0 / Q5_K take MMQ at 4..8
 * tokens where gemv_mt would (gemv_n 16); narrower rows, other types (Q4_0, Q4_K among them), other
 * token counts, the knob at 0 and devices without gemv_mt keep their routes */
static void test_wide_rows(void **state) {
    (void)state;
    const rf_type wide_types[] = {RF_TYPE_Q5_0, RF_TYPE_Q5_K};
    for (int64_t n = 1; n <= 120; n++) {
        for (int i = 0; i < 2; i++) {
            rf_gpu_route_facts f = facts(wide_types[i], n, true);
            f.n_in = 14336, f.mmq_wide = 12288;
            const rf_gpu_route_kind want = n >= 4 && n <= 8 ? RF_ROUTE_MMQ : n <= 16 ? RF_ROUTE_GEMV : n <= 96 ? RF_ROUTE_MMQ : RF_ROUTE_BLAS;
            if (rf_gpu_route(&f) != want) fail_msg("type %d n=%lld: %s", (int)wide_types[i], (long long)n, rf_gpu_route_name(rf_gpu_route(&f)));
            f.n_in = 8192; /* narrower than the knob: as before */
            assert_int_equal(rf_gpu_route(&f), n <= 16 ? RF_ROUTE_GEMV : n <= 96 ? RF_ROUTE_MMQ : RF_ROUTE_BLAS);
            f.n_in = 14336, f.mmq_wide = 0; /* the knob at 0: never */
            assert_int_equal(rf_gpu_route(&f), n <= 16 ? RF_ROUTE_GEMV : n <= 96 ? RF_ROUTE_MMQ : RF_ROUTE_BLAS);
            f.mmq_wide = 12288, f.gemv_n = 8; /* no gemv_mt: MMQ from 5, as before */
            assert_int_equal(rf_gpu_route(&f), n <= 4 ? RF_ROUTE_GEMV : n <= 96 ? RF_ROUTE_MMQ : RF_ROUTE_BLAS);
        }
        /* Q4_0, Q8_0, Q6_K and Q4_K rows keep gemv_mt (MMQ was slower there) */
        rf_gpu_route_facts f8 = facts(RF_TYPE_Q8_0, n, true), f6 = facts(RF_TYPE_Q6_K, n, true), f4 = facts(RF_TYPE_Q4_0, n, true);
        rf_gpu_route_facts fk = facts(RF_TYPE_Q4_K, n, true);
        f8.n_in = f6.n_in = f4.n_in = fk.n_in = 14336, f8.mmq_wide = f6.mmq_wide = f4.mmq_wide = fk.mmq_wide = 12288;
        const rf_gpu_route_kind was = n <= 16 ? RF_ROUTE_GEMV : n <= 96 ? RF_ROUTE_MMQ : RF_ROUTE_BLAS;
        assert_int_equal(rf_gpu_route(&f8), was);
        assert_int_equal(rf_gpu_route(&f6), was);
        assert_int_equal(rf_gpu_route(&f4), was);
        assert_int_equal(rf_gpu_route(&fk), was);
    }
}

/* RF_GPU_W4A16=1: W4A16 from w4a16_min tokens, ahead of MMQ and BLAS (auto: up to w4a16_max);
 * never in deterministic mode */
static void test_w4a16(void **state) {
    (void)state;
    for (int64_t n = 1; n <= 600; n += 7) {
        rf_gpu_route_facts f = facts(RF_TYPE_Q4_0, n, true);
        const rf_gpu_route_kind off = rf_gpu_route(&f);
        f.w4a16 = true, f.w4a16_min = 97;
        assert_int_equal(rf_gpu_route(&f), n >= 97 ? RF_ROUTE_W4A16 : off);
        f.w4a16_min = 64; /* below MMQ's top: it takes them from MMQ */
        assert_int_equal(rf_gpu_route(&f), n >= 64 ? RF_ROUTE_W4A16 : off);
        f.w4a16_max = 192; /* auto: an upper limit too, past it the route without W4A16 */
        assert_int_equal(rf_gpu_route(&f), n >= 64 && n <= 192 ? RF_ROUTE_W4A16 : off);
        f.w4a16_max = 0;
        f.invariant = true;
        assert_int_equal(rf_gpu_route(&f), RF_ROUTE_MMQ);
    }
    assert_string_equal(rf_gpu_route_name(RF_ROUTE_W4A16), "w4a16");
}

static bool attn(int64_t bucket, rf_type kv) {
    const rf_gpu_attn_facts f = {.decode = true, .bucket_keys = bucket, .kv_type = kv, .mma_min = 16384,
                                 .mma_short = 4096}; /* the knobs' defaults (docs/knobs.md) */
    return rf_gpu_attn_decode_mma(&f);
}

static void test_attention(void **state) {
    (void)state;
    for (int64_t b = 256; b <= (1 << 20); b *= 2) {
        /* f16: the decode kernel up to 4,096 keys and from 16,384; the 8,192-key bucket paged */
        if (attn(b, RF_TYPE_F16) != (b != 8192)) fail_msg("f16 bucket %lld", (long long)b);
        /* q8_0 (and f32, which the decode kernel does not read): from 16,384 only */
        if (attn(b, RF_TYPE_Q8_0) != (b >= 16384)) fail_msg("q8_0 bucket %lld", (long long)b);
        if (attn(b, RF_TYPE_F32) != (b >= 16384)) fail_msg("f32 bucket %lld", (long long)b);
        rf_gpu_attn_facts f = {.decode = true, .bucket_keys = b, .kv_type = RF_TYPE_F16, .mma_min = 16384,
                               .mma_short = 4096};
        f.invariant = true; /* --deterministic: the paged kernel's bits at every depth */
        assert_false(rf_gpu_attn_decode_mma(&f));
        f.invariant = false, f.decode = false; /* prompt chunks: never */
        assert_false(rf_gpu_attn_decode_mma(&f));
        f.decode = true, f.mma_short = 0; /* the short rule off: the deep one alone */
        assert_int_equal(rf_gpu_attn_decode_mma(&f), b >= 16384);
        f.mma_min = 0, f.mma_short = 4096; /* the deep rule off: the short one alone */
        assert_int_equal(rf_gpu_attn_decode_mma(&f), b <= 4096);
        f.mma_short = 0; /* both off: never */
        assert_false(rf_gpu_attn_decode_mma(&f));
        f.mma_min = 1; /* 1: every decode call */
        assert_true(rf_gpu_attn_decode_mma(&f));
        /* a window smaller than the bucket decides instead: 4,096 keys of window at any depth is
         * short; 8,192 keeps deep rows in the paged kernel's bucket */
        f.mma_min = 16384, f.mma_short = 4096, f.window = 4096;
        assert_true(rf_gpu_attn_decode_mma(&f));
        f.window = 8192;
        assert_int_equal(rf_gpu_attn_decode_mma(&f), b <= 4096);
    }
    assert_false(attn(0, RF_TYPE_F16)); /* no row with a position */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_w4a16),
        cmocka_unit_test(test_wide_rows),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_knobs_and_builds),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
