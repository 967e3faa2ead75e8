/* test_mkmodel_vocab.c — the synthetic vocabularies of `rocmforge mkmodel`: sizes, uniqueness,
 * byte tokens (GPT-2 bytes_to_unicode, checked against its definition), merge consistency,
 * special-token ids, SPM byte tokens and scores, determinism and speed at 152k tokens. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mkmodel/synth_vocab.h"

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Binary search in a sorted copy. */
static bool in_sorted(const char **sorted, uint32_t n, const char *s) {
    return bsearch(&s, sorted, n, sizeof *sorted, cmp_str) != NULL;
}

static const char **sorted_copy(const synth_vocab *v) {
    const char **s = malloc(v->n_tokens * sizeof *s);
    assert_non_null(s);
    memcpy(s, v->tokens, v->n_tokens * sizeof *s);
    qsort(s, v->n_tokens, sizeof *s, cmp_str);
    return s;
}

static void check_unique(const char **sorted, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) {
        if (!strcmp(sorted[i - 1], sorted[i])) fail_msg("duplicate token '%s'", sorted[i]);
        assert_true(sorted[i][0] != 0);
    }
}

/* Definition of GPT-2's bytes_to_unicode, written out independently of the code under test. */
static void gpt2_byte_table(uint32_t cp[256]) {
    int bs[256], n = 0;
    bool have[256] = {0};
    for (int b = '!'; b <= '~'; b++) bs[n++] = b, have[b] = true;
    for (int b = 0xA1; b <= 0xAC; b++) bs[n++] = b, have[b] = true;
    for (int b = 0xAE; b <= 0xFF; b++) bs[n++] = b, have[b] = true;
    for (int b = 0; b < 256; b++) cp[b] = b;
    int extra = 0;
    for (int b = 0; b < 256; b++)
        if (!have[b]) cp[b] = 256 + extra++;
    (void)bs;
}

static void encode_cp(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static void check_bpe(const synth_vocab_spec *spec, const char *pre, uint32_t first_byte) {
    synth_vocab v;
    clock_t t0 = clock();
    assert_int_equal(synth_vocab_build(spec, pre, &v), RF_OK);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    print_message("family %d n_vocab %u: %u merges, %.3f s\n", spec->family, spec->n_vocab,
                  v.n_merges, secs);
    assert_true(secs < 10.0);
    assert_false(v.is_spm);
    assert_int_equal(v.n_tokens, spec->n_vocab);
    assert_string_equal(v.pre, pre);
    assert_non_null(v.chat_template);
    assert_null(v.scores);
    const char **sorted = sorted_copy(&v);
    check_unique(sorted, v.n_tokens);

    /* the 256 byte tokens, printable bytes first, exactly as bytes_to_unicode lists them */
    uint32_t cp[256];
    gpt2_byte_table(cp);
    uint32_t k = first_byte;
    for (int pass = 0; pass < 2; pass++) {
        for (int b = 0; b < 256; b++) {
            bool printable = cp[b] == (uint32_t)b;
            if (printable != (pass == 0)) continue;
            char s[4];
            encode_cp(cp[b], s);
            assert_string_equal(v.tokens[k], s);
            k++;
        }
    }
    assert_string_equal(v.tokens[first_byte + ('A' - '!')], "A");

    /* merges: split at the first space after position 0; a, b, ab all tokens; distinct */
    assert_true(v.n_merges >= v.n_tokens / 2);
    const char **ms = malloc(v.n_merges * sizeof *ms);
    assert_non_null(ms);
    memcpy(ms, v.merges, v.n_merges * sizeof *ms);
    qsort(ms, v.n_merges, sizeof *ms, cmp_str);
    for (uint32_t i = 1; i < v.n_merges; i++)
        if (!strcmp(ms[i - 1], ms[i])) fail_msg("duplicate merge '%s'", ms[i]);
    free(ms);
    char buf[512];
    for (uint32_t i = 0; i < v.n_merges; i++) {
        const char *m = v.merges[i];
        const char *sp = strchr(m + 1, ' ');
        assert_non_null(sp);
        assert_null(strchr(sp + 1, ' '));
        size_t la = (size_t)(sp - m);
        assert_true(la + strlen(sp + 1) < sizeof buf);
        memcpy(buf, m, la);
        buf[la] = 0;
        if (!in_sorted(sorted, v.n_tokens, buf)) fail_msg("merge %u '%s': left not a token", i, m);
        if (!in_sorted(sorted, v.n_tokens, sp + 1)) fail_msg("merge %u '%s': right not a token", i, m);
        strcpy(buf + la, sp + 1);
        if (!in_sorted(sorted, v.n_tokens, buf)) fail_msg("merge %u '%s': result not a token", i, m);
    }
    /* learned from English: the frequent pieces exist */
    assert_true(in_sorted(sorted, v.n_tokens, "\xC4\xA0the"));
    assert_true(in_sorted(sorted, v.n_tokens, "\xC4\xA0" "and"));
    free(sorted);

    /* determinism */
    synth_vocab w;
    assert_int_equal(synth_vocab_build(spec, pre, &w), RF_OK);
    assert_int_equal(w.n_tokens, v.n_tokens);
    assert_int_equal(w.n_merges, v.n_merges);
    for (uint32_t i = 0; i < v.n_tokens; i++) assert_string_equal(w.tokens[i], v.tokens[i]);
    for (uint32_t i = 0; i < v.n_merges; i++) assert_string_equal(w.merges[i], v.merges[i]);
    synth_vocab_free(&w);

    /* specials */
    switch (spec->family) {
    case SYNTH_VOCAB_LLAMA3: {
        uint32_t r = spec->n_vocab - spec->n_special;
        assert_string_equal(v.tokens[r], "<|begin_of_text|>");
        assert_string_equal(v.tokens[r + 1], "<|end_of_text|>");
        assert_string_equal(v.tokens[r + 9], "<|eot_id|>");
        assert_int_equal(v.bos, r);
        assert_int_equal(v.eos, r + 9);
        assert_true(v.add_bos);
        for (uint32_t i = 0; i < v.n_tokens; i++)
            assert_int_equal(v.types[i], i >= r ? SYNTH_TOK_CONTROL : SYNTH_TOK_NORMAL);
        if (spec->n_special == 256)
            assert_string_equal(v.tokens[spec->n_vocab - 1], "<|reserved_special_token_247|>");
        break;
    }
    case SYNTH_VOCAB_QWEN2: {
        uint32_t r = spec->n_special;
        assert_string_equal(v.tokens[r], "<|endoftext|>");
        assert_string_equal(v.tokens[r + 1], "<|im_start|>");
        assert_string_equal(v.tokens[r + 2], "<|im_end|>");
        assert_string_equal(v.tokens[r + 21], "<|file_sep|>");
        assert_int_equal(v.types[r + 2], SYNTH_TOK_CONTROL);
        assert_int_equal(v.types[r + 14], SYNTH_TOK_USER_DEFINED);
        assert_int_equal(v.eos, r + 2);
        assert_false(v.add_bos);
        if (r + 22 < spec->n_vocab) {
            snprintf(buf, sizeof buf, "[PAD%u]", r + 22);
            assert_string_equal(v.tokens[r + 22], buf);
            assert_int_equal(v.types[spec->n_vocab - 1], SYNTH_TOK_UNUSED);
        }
        break;
    }
    case SYNTH_VOCAB_SMOLLM:
        assert_string_equal(v.tokens[0], "<|endoftext|>");
        assert_string_equal(v.tokens[1], "<|im_start|>");
        assert_string_equal(v.tokens[2], "<|im_end|>");
        assert_int_equal(v.bos, 1);
        assert_int_equal(v.eos, 2);
        assert_int_equal(v.types[16], SYNTH_TOK_CONTROL);
        assert_int_equal(v.types[17], SYNTH_TOK_NORMAL);
        break;
    default:
        fail();
    }
    synth_vocab_free(&v);
}

static void test_llama3_tiny(void **s) {
    (void)s;
    synth_vocab_spec spec = {SYNTH_VOCAB_LLAMA3, 2048, 16};
    check_bpe(&spec, "llama-bpe", 0);
}

static void test_llama3_full(void **s) {
    (void)s;
    synth_vocab_spec spec = {SYNTH_VOCAB_LLAMA3, 128256, 256};
    check_bpe(&spec, "llama-bpe", 0);
}

static void test_qwen2_full(void **s) {
    (void)s;
    synth_vocab_spec spec = {SYNTH_VOCAB_QWEN2, 152064, 151643};
    check_bpe(&spec, "qwen2", 0);
}

static void test_qwen2_tiny(void **s) {
    (void)s;
    synth_vocab_spec spec = {SYNTH_VOCAB_QWEN2, 3072, 3000};
    check_bpe(&spec, "qwen2", 0);
}

static void test_smollm(void **s) {
    (void)s;
    synth_vocab_spec spec = {SYNTH_VOCAB_SMOLLM, 49152, 0};
    check_bpe(&spec, "smollm", 17);
}

static void test_spm(void **s) {
    (void)s;
    synth_vocab_spec spec = {SYNTH_VOCAB_LLAMA2, 32000, 0};
    synth_vocab v;
    assert_int_equal(synth_vocab_build(&spec, NULL, &v), RF_OK);
    assert_true(v.is_spm);
    assert_null(v.pre);
    assert_int_equal(v.n_tokens, 32000);
    assert_int_equal(v.n_merges, 0);
    assert_non_null(v.scores);
    assert_string_equal(v.tokens[0], "<unk>");
    assert_string_equal(v.tokens[1], "<s>");
    assert_string_equal(v.tokens[2], "</s>");
    assert_int_equal(v.types[0], SYNTH_TOK_UNKNOWN);
    assert_int_equal(v.types[1], SYNTH_TOK_CONTROL);
    char buf[64];
    for (int b = 0; b < 256; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        assert_string_equal(v.tokens[3 + b], buf);
        assert_int_equal(v.types[3 + b], SYNTH_TOK_BYTE);
    }
    const char **sorted = sorted_copy(&v);
    check_unique(sorted, v.n_tokens);
    assert_true(in_sorted(sorted, v.n_tokens, "\xE2\x96\x81the"));
    assert_true(in_sorted(sorted, v.n_tokens, "\xE2\x96\x81"));
    assert_true(in_sorted(sorted, v.n_tokens, "e"));
    /* scores strictly fall after the fixed tokens; every multi-character piece splits into two
     * pieces (so the SPM bigram merge can reach it) */
    for (uint32_t i = 260; i < v.n_tokens; i++) assert_true(v.scores[i] < v.scores[i - 1]);
    for (uint32_t i = 259; i < v.n_tokens; i++) {
        const char *t = v.tokens[i];
        assert_int_equal(v.types[i], SYNTH_TOK_NORMAL);
        size_t n = strlen(t);
        bool single = n == 1 || (n == 3 && (uint8_t)t[0] == 0xE2);
        if (single) continue;
        bool ok = false;
        for (size_t k = 1; k < n && !ok; k++) {
            if (((uint8_t)t[k] & 0xC0) == 0x80) continue;
            memcpy(buf, t, k);
            buf[k] = 0;
            ok = in_sorted(sorted, v.n_tokens, buf) && in_sorted(sorted, v.n_tokens, t + k);
        }
        if (!ok) fail_msg("piece %u '%s' is not the concatenation of two pieces", i, t);
    }
    free(sorted);
    synth_vocab_free(&v);
}

static void test_too_small(void **s) {
    (void)s;
    synth_vocab v;
    synth_vocab_spec spec = {SYNTH_VOCAB_LLAMA3, 200, 16};
    assert_int_equal(synth_vocab_build(&spec, "llama-bpe", &v), RF_ERR_INVALID_ARG);
    assert_null(v.tokens);
    synth_vocab_spec q = {SYNTH_VOCAB_QWEN2, 1000, 990};
    assert_int_equal(synth_vocab_build(&q, "qwen2", &v), RF_ERR_INVALID_ARG);
    synth_vocab_spec p = {SYNTH_VOCAB_LLAMA2, 300, 0};
    assert_int_equal(synth_vocab_build(&p, NULL, &v), RF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3_tiny), cmocka_unit_test(test_llama3_full),
        cmocka_unit_test(test_qwen2_full),  cmocka_unit_test(test_qwen2_tiny),
        cmocka_unit_test(test_smollm),      cmocka_unit_test(test_spm),
        cmocka_unit_test(test_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
