/* test_knobs.c — the knob registry (src/core/knobs.h): every entry well formed (RF_ name, unique,
 * its default parses under its own rule), the boolean and integer rules, errors naming the knob,
 * overrides for tests. The CLI side (--help-env, docs/knobs.md) is tests/cli/knobs.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "test_util.h"

static void test_registry_well_formed(void **state) {
    (void)state;
    assert_null(rf_knob_describe(RF_KNOB_COUNT));
    for (int k = 0; k < RF_KNOB_COUNT; k++) {
        const rf_knob_info *in = rf_knob_describe((rf_knob)k);
        assert_non_null(in);
        assert_int_equal(strncmp(in->name, "RF_", 3), 0);
        assert_true(strlen(in->meaning) > 10 && !strchr(in->meaning, '\n') && !strchr(in->meaning, '|'));
        for (int j = 0; j < k; j++) assert_string_not_equal(in->name, rf_knob_describe((rf_knob)j)->name);
        /* the default obeys the knob's own rule */
        if (in->type == RF_KNOB_BOOL) {
            bool b;
            assert_int_equal(rf_knob_parse_bool((rf_knob)k, in->def, &b), RF_OK);
        } else if (in->type == RF_KNOB_INT) {
            int64_t v;
            assert_true(in->lo <= in->hi);
            assert_int_equal(rf_knob_parse_int((rf_knob)k, in->def, &v), RF_OK);
        }
    }
    assert_string_equal(rf_knob_describe(RF_KNOB_CPU_F32_MATMUL)->name, "RF_CPU_F32_MATMUL");
}

static void test_bool_rule(void **state) {
    (void)state;
    const char *yes[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"};
    const char *no[] = {"0", "false", "False", "no", "NO", "off", "Off"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        assert_int_equal(rf_knob_override(RF_KNOB_CPU_F32_MATMUL, yes[i]), RF_OK);
        assert_true(rf_knob_bool(RF_KNOB_CPU_F32_MATMUL));
        assert_true(rf_knob_is_set(RF_KNOB_CPU_F32_MATMUL));
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        assert_int_equal(rf_knob_override(RF_KNOB_CPU_F32_MATMUL, no[i]), RF_OK);
        assert_false(rf_knob_bool(RF_KNOB_CPU_F32_MATMUL)); /* "0" used to turn this one on */
    }
    /* unset and empty: the default (on for RF_GPU_GRAPHS, off for RF_CPU_F32_MATMUL) */
    assert_int_equal(rf_knob_override(RF_KNOB_CPU_F32_MATMUL, ""), RF_OK);
    assert_false(rf_knob_bool(RF_KNOB_CPU_F32_MATMUL));
    assert_false(rf_knob_is_set(RF_KNOB_CPU_F32_MATMUL));
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_GRAPHS, NULL), RF_OK);
    assert_true(rf_knob_bool(RF_KNOB_GPU_GRAPHS));
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_GRAPHS, "off"), RF_OK);
    assert_false(rf_knob_bool(RF_KNOB_GPU_GRAPHS));
    /* what does not parse is an error naming the knob, and the knob keeps its default */
    const char *bad[] = {"2", "maybe", "y", "enable", " 1", "1 ", "00"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(rf_knob_override(RF_KNOB_GPU_GRAPHS, bad[i]), RF_ERR_INVALID_ARG);
        assert_non_null(strstr(rf_last_error(), "RF_GPU_GRAPHS="));
        assert_non_null(strstr(rf_last_error(), "expected a boolean"));
        assert_true(rf_knob_bool(RF_KNOB_GPU_GRAPHS));
    }
    rf_knob_override(RF_KNOB_GPU_GRAPHS, NULL);
    rf_knob_override(RF_KNOB_CPU_F32_MATMUL, NULL);
}

static void test_int_rule(void **state) {
    (void)state;
    assert_int_equal(rf_knob_override(RF_KNOB_TP, NULL), RF_OK);
    assert_int_equal(rf_knob_int(RF_KNOB_TP), 0);
    assert_int_equal(rf_knob_override(RF_KNOB_TP, "64"), RF_OK);
    assert_int_equal(rf_knob_int(RF_KNOB_TP), 64);
    const char *bad[] = {"65", "-1", "2x", "x", "1.5", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(rf_knob_override(RF_KNOB_TP, bad[i]), RF_ERR_INVALID_ARG);
        assert_non_null(strstr(rf_last_error(), "RF_TP="));
        assert_non_null(strstr(rf_last_error(), "from 0 to 64"));
        assert_int_equal(rf_knob_int(RF_KNOB_TP), 0); /* the default again */
    }
    assert_int_equal(rf_knob_int(RF_KNOB_GPU_MMQ_MIN), 17);
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_MMQ_MIN, "0"), RF_ERR_INVALID_ARG); /* range 1.. */
    rf_knob_override(RF_KNOB_TP, NULL);
}

static void test_strings(void **state) {
    (void)state;
    assert_int_equal(rf_knob_override(RF_KNOB_API_KEY, NULL), RF_OK);
    assert_null(rf_knob_str(RF_KNOB_API_KEY));
    assert_int_equal(rf_knob_override(RF_KNOB_API_KEY, "k-123"), RF_OK);
    assert_string_equal(rf_knob_str(RF_KNOB_API_KEY), "k-123");
    rf_knob_override(RF_KNOB_API_KEY, NULL);
    assert_int_equal(rf_knob_override(RF_KNOB_LOG, "debug"), RF_OK);
    assert_int_equal(rf_knob_override(RF_KNOB_LOG, "loud"), RF_ERR_INVALID_ARG);
    assert_string_equal(rf_knob_str(RF_KNOB_LOG), "warn");
    rf_knob_override(RF_KNOB_LOG, NULL);
}

static void test_print(void **state) {
    (void)state;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    rf_knobs_print(f);
    fclose(f);
    for (int k = 0; k < RF_KNOB_COUNT; k++) {
        char line[64];
        snprintf(line, sizeof line, "\n%s ", rf_knob_describe((rf_knob)k)->name);
        assert_non_null(strstr(buf, line));
    }
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_well_formed), cmocka_unit_test(test_bool_rule),
        cmocka_unit_test(test_int_rule),             cmocka_unit_test(test_strings),
        cmocka_unit_test(test_print),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
