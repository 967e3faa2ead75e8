/* test_core.c — error messages, status names, logging level, file mapping. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/mapped_file.h"

static void test_set_error_returns_status(void **state) {
    (void)state;
    rf_clear_error();
    assert_string_equal(rf_last_error(), "");
    rf_status st = rf_set_error(RF_ERR_FORMAT, "tensor '%s' is %d bytes short", "blk.0", 7);
    assert_int_equal(st, RF_ERR_FORMAT);
    assert_string_equal(rf_last_error(), "tensor 'blk.0' is 7 bytes short");
    assert_string_equal(rf_status_str(RF_ERR_OOM), "RF_ERR_OOM");
}

/* wrapping the previous message, the common idiom: the context then the cause, once each */
static void test_set_error_wraps_last(void **state) {
    (void)state;
    rf_set_error(RF_ERR_NOT_FOUND, "gguf: key '%s' not found", "tokenizer.ggml.model");
    rf_status st = rf_set_error(RF_ERR_NOT_FOUND, "tokenizer.ggml.model: %s", rf_last_error());
    assert_int_equal(st, RF_ERR_NOT_FOUND);
    assert_string_equal(rf_last_error(), "tokenizer.ggml.model: gguf: key 'tokenizer.ggml.model' not found");
}

static void test_overflow_helpers(void **state) {
    (void)state;
    uint64_t r;
    assert_false(rf_mul_overflow_u64(1u << 20, 1u << 20, &r));
    assert_true(r == (1ull << 40));
    assert_true(rf_mul_overflow_u64(UINT64_MAX / 2, 3, &r));
    assert_true(rf_add_overflow_u64(UINT64_MAX, 1, &r));
}

static void test_log_level(void **state) {
    (void)state;
    rf_log_set_level(RF_LOG_DEBUG);
    assert_int_equal(rf_log_get_level(), RF_LOG_DEBUG);
    rf_log_set_level(RF_LOG_WARN);
    assert_int_equal(rf_log_get_level(), RF_LOG_WARN);
}

static void test_mapped_file(void **state) {
    (void)state;
    char path[] = "/tmp/rf_test_mapXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello", 5), 5);
    close(fd);
    rf_mapped_file f;
    assert_int_equal(rf_mapped_file_open(path, &f), RF_OK);
    assert_int_equal(f.size, 5);
    assert_memory_equal(f.data, "hello", 5);
    rf_mapped_file_close(&f);
    unlink(path);
    assert_int_equal(rf_mapped_file_open("/nonexistent/rf.gguf", &f), RF_ERR_IO);
    assert_non_null(strstr(rf_last_error(), "/nonexistent/rf.gguf"));
    assert_int_equal(rf_mapped_file_open("/tmp", &f), RF_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_error_returns_status),
        cmocka_unit_test(test_set_error_wraps_last),
        cmocka_unit_test(test_overflow_helpers),
        cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_mapped_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
