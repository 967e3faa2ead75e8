/* test_gguf_corpus.c — replays every file of the GGUF fuzz seed corpus (tests/fuzz/corpus)
 * through the fuzz target's body, so the corpus and its invariants run under gcc in `make test`
 * (and under ASan in `make test-asan`), not only when libFuzzer is built. */
#define _GNU_SOURCE
#include "test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_gguf_body.h"

static void test_corpus_replay(void **state) {
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus", RF_SOURCE_DIR);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n_files = 0, n_valid = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t size;
        char *text = rf_test_read_file(path, &size);
        assert_non_null(text);
        /* an exact-size copy, so an over-read shows under ASan */
        uint8_t *copy = malloc(size ? size : 1);
        memcpy(copy, text, size);
        free(text);
        rf_fuzz_gguf_one(copy, size);
        rf_gguf *g = NULL;
        if (rf_gguf_open_memory(copy, size, &g) == RF_OK) n_valid++;
        rf_gguf_close(g);
        free(copy);
        n_files++;
    }
    closedir(d);
    printf("replayed %d corpus files (%d open as valid GGUF)\n", n_files, n_valid);
    assert_true(n_files >= 10);
    assert_true(n_valid >= 3);
    assert_true(n_valid < n_files);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
