/* test_template_corpus.c — replays every file of the template fuzz seed corpus
 * (tests/fuzz/corpus-template) through the fuzz target's body, so the corpus and its invariants
 * (data ranges well formed, tracking changes no byte, trusted text never data) run under gcc in
 * `make test` and under ASan+UBSan in the sanitizer build, not only when libFuzzer is built. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_template_body.h"

static void test_corpus_replay(void **state) {
    (void)state;
    rf_test_corpus c;
    rf_test_corpus_open(&c, "corpus-template");
    int n_files = 0, n_parsed = 0;
    size_t size;
    uint8_t *copy;
    while ((copy = rf_test_corpus_next(&c, &size))) {
        rf_fuzz_template_one(copy, size);
        const char *nul = memchr(copy, 0, size);
        rf_jinja *t = NULL;
        if (rf_jinja_parse((const char *)copy, nul ? (size_t)(nul - (const char *)copy) : size, &t) == RF_OK) n_parsed++;
        rf_jinja_free(t);
        free(copy);
        n_files++;
    }
    printf("replayed %d template corpus files (%d parse)\n", n_files, n_parsed);
    assert_true(n_files >= 20);
    assert_true(n_parsed >= 17);
    assert_true(n_parsed < n_files);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
