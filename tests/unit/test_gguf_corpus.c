/* test_gguf_corpus.c — replays every file of the GGUF fuzz seed corpus (tests/fuzz/corpus)
 * through the fuzz target's body, so the corpus and its invariants run under gcc in `make test`
 * (and under ASan in `make test-asan`), not only when libFuzzer is built. Every file that opens
 * and names a general.architecture is also loaded as a model on the CPU: it must load or fail
 * with a one-line message, never crash. The qwen3moe seeds (made by hand: top-k above the
 * expert count, zero experts, no top-k, a router of another expert count, expert tensors 2-D,
 * swapped or with fewer experts) must each fail. */
#define _GNU_SOURCE
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_gguf_body.h"
#include "rocmforge/engine.h"

/* Loads a corpus file as a model: never a crash; a failure says why in one line. Returns the
 * status; *moe tells whether the file claims qwen3moe. */
static rf_status try_model(const char *path, const rf_gguf *g, bool *moe) {
    const char *arch = NULL;
    *moe = false;
    if (rf_gguf_get_str(g, "general.architecture", &arch) != RF_OK) return RF_ERR_NOT_FOUND;
    *moe = !strcmp(arch, "qwen3moe");
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    mp.n_threads = 1;
    rf_model *m = NULL;
    rf_status st = rf_model_load(path, &mp, &m);
    if (st == RF_OK) {
        rf_model_free(m);
        return st;
    }
    assert_null(m);
    assert_true(rf_last_error()[0] != 0);
    assert_null(strchr(rf_last_error(), '\n'));
    if (*moe) printf("  %s: %s\n", strrchr(path, '/') + 1, rf_last_error());
    return st;
}

static void test_corpus_replay(void **state) {
    (void)state;
    rf_test_corpus c;
    rf_test_corpus_open(&c, "corpus");
    int n_files = 0, n_valid = 0, n_moe = 0;
    size_t size;
    uint8_t *copy;
    while ((copy = rf_test_corpus_next(&c, &size))) {
        rf_fuzz_gguf_one(copy, size);
        rf_gguf *g = NULL;
        if (rf_gguf_open_memory(copy, size, &g) == RF_OK) {
            n_valid++;
            bool moe;
            rf_status st = try_model(c.path, g, &moe);
            if (moe) {
                n_moe++;
                assert_int_not_equal(st, RF_OK); /* each qwen3moe seed is inconsistent on purpose */
            }
        }
        rf_gguf_close(g);
        free(copy);
        n_files++;
    }
    printf("replayed %d corpus files (%d open as valid GGUF)\n", n_files, n_valid);
    assert_true(n_files >= 10);
    assert_true(n_valid >= 3);
    assert_true(n_valid < n_files);
    assert_true(n_moe >= 7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
