/* test_arena.c — core/arena.h: alignment, zero-size blocks, blocks larger than a chunk (kept
 * behind the chunk carved from, whose space stays usable), the limit and its reason, reuse after
 * rf_arena_free. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/arena.h"

static void test_alignment_and_sizes(void **state) {
    (void)state;
    rf_arena a = {0};
    uintptr_t end = 0; /* the end of the block before, rounded up to 16 (a 0-byte block takes 16) */
    for (size_t n = 0; n < 100; n++) {
        unsigned char *p = rf_arena_alloc(&a, n, NULL);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
        if (end) assert_int_equal((uintptr_t)p, end); /* bumped: next to the one before, no overlap */
        memset(p, 0xA5, n);
        end = (uintptr_t)p + (n == 0 ? 16 : (n + 15) / 16 * 16);
    }
    assert_int_equal(a.total, (size_t)1 << 16); /* ~5 KB of blocks: one chunk */
    rf_arena_free(&a);
    assert_null(a.head);
    assert_int_equal(a.total, 0);
}

static void test_big_block_keeps_chunk(void **state) {
    (void)state;
    rf_arena a = {0};
    char *small = rf_arena_alloc(&a, 100, NULL);
    char *big = rf_arena_alloc(&a, (size_t)1 << 20, NULL); /* a chunk of its own */
    char *next = rf_arena_alloc(&a, 100, NULL);             /* still from the first chunk */
    assert_non_null(small);
    assert_non_null(big);
    assert_non_null(next);
    assert_ptr_equal(next, small + 112);
    memset(big, 1, (size_t)1 << 20);
    assert_int_equal(a.total, ((size_t)1 << 16) + ((size_t)1 << 20));
    rf_arena_free(&a);
}

static void test_limit(void **state) {
    (void)state;
    rf_arena a = {0};
    a.limit = (size_t)1 << 17; /* two chunks */
    rf_arena_fail why = 0;
    assert_non_null(rf_arena_alloc(&a, 60000, &why));
    assert_non_null(rf_arena_alloc(&a, 60000, &why)); /* the second chunk */
    assert_null(rf_arena_alloc(&a, 60000, &why));     /* a third would pass the limit */
    assert_int_equal(why, RF_ARENA_LIMIT);
    why = 0;
    assert_null(rf_arena_alloc(&a, ((size_t)1 << 17) + 1, &why)); /* larger than the limit alone */
    assert_int_equal(why, RF_ARENA_LIMIT);
    rf_arena_free(&a);
    assert_int_equal(a.limit, (size_t)1 << 17); /* kept: the arena is reusable under it */
    assert_non_null(rf_arena_alloc(&a, 60000, &why));
    rf_arena_free(&a);
    rf_arena b = {0};
    why = 0;
    assert_null(rf_arena_alloc(&b, ((size_t)1 << 40) + 1, &why)); /* no limit, yet past 2^40 */
    assert_int_equal(why, RF_ARENA_LIMIT);
    assert_null(rf_arena_alloc(&b, SIZE_MAX, NULL)); /* no reason asked: still NULL, no wrap */
    rf_arena_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignment_and_sizes),
        cmocka_unit_test(test_big_block_keeps_chunk),
        cmocka_unit_test(test_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
