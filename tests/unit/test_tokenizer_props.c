/* test_tokenizer_props.c — properties on the real vocabularies, with fresh random inputs each
 * run (seed printed; RF_TEST_SEED replays):
 *  - SmolLM2 (byte-level BPE): detokenize(tokenize(s)) == s for random valid UTF-8 s.
 *  - Gemma 3 (SPM, no space prefix): the same holds for s without U+2581 ("▁" is the escaped
 *    space, so a literal one comes back as ' ', as in the reference).
 *  - both: the streaming detokenizer (one id at a time, small buffers) gives exactly the batch
 *    text with invalid UTF-8 as U+FFFD, and every chunk is valid UTF-8 on its own.
 * Skips (77) naming the model files when both are absent. */
#include "test_tokenizer_common.h"

#define N_STRINGS 3000
#define N_SEQS 2000

/* A random valid UTF-8 string of up to ~60 characters drawn from classes that stress the
 * pre-tokenizers (letters, digits, punctuation, whitespace runs, contractions, CJK, emoji,
 * combining marks, any scalar value). */
static size_t random_text(rf_rng *r, char *buf, bool allow_2581) {
    size_t n = 0, len = rf_rng_u64(r) % 60;
    static const char *frags[] = {"'s", "'LL", " the", "  ", "\n\n", "\r\n", "\t", "...", "<|im_end|>",
                                  "<end_of_turn>", "<s>", "123", "  \n ", "é", "e\xCC\x81", "\xC2\xA0"};
    for (size_t i = 0; i < len; i++) {
        uint64_t k = rf_rng_u64(r);
        uint32_t cp;
        switch (k % 10) {
        case 0: case 1: case 2: cp = 'a' + (uint32_t)((k >> 8) % 26) - ((k >> 16) & 1 ? 32 : 0); break;
        case 3: cp = " \t\n\r"[(k >> 8) % 4]; break;
        case 4: cp = "0123456789.,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`"[(k >> 8) % 43]; break;
        case 5: {
            const char *f = frags[(k >> 8) % (sizeof frags / sizeof frags[0])];
            size_t l = strlen(f);
            memcpy(buf + n, f, l);
            n += l;
            continue;
        }
        case 6: cp = 0x4E00 + (uint32_t)((k >> 8) % 0x5000); break;        /* CJK */
        case 7: cp = 0x1F300 + (uint32_t)((k >> 8) % 0x300); break;        /* emoji */
        case 8: cp = 0x0300 + (uint32_t)((k >> 8) % 0x70); break;          /* combining */
        default:
            do cp = (uint32_t)((k >> 8) % 0x110000), k = rf_rng_u64(r);
            while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0);
        }
        if (cp == 0x2581 && !allow_2581) cp = 0x2582;
        tk_put_cp(buf, &n, cp);
    }
    buf[n] = 0;
    return n;
}

/* Byte-level BPE: which bytes have a token of their own. A vocabulary may lack some (SmolLM2
 * has no token for bytes that never occurred in its training text); llama.cpp then drops the
 * byte, so text containing it cannot round-trip. Returns the number of bytes present. */
static int byte_tokens(const rf_vocab *v, bool present[256]) {
    int cnt = 0;
    for (int b = 0; b < 256; b++) {
        char ch[8];
        gpt2_char(b, ch);
        present[b] = false;
        for (int32_t i = 0; i < rf_vocab_n_tokens(v) && !present[b]; i++)
            if (!strcmp(rf_vocab_token_text(v, i), ch)) present[b] = true;
        cnt += present[b];
    }
    return cnt;
}

/* Replaces every character that has a byte without a token by 'x'. */
static size_t keep_representable(char *s, size_t n, const bool present[256]) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = 1;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0xF0) l = 4;
        else if (c >= 0xE0) l = 3;
        else if (c >= 0xC0) l = 2;
        bool ok = true;
        for (size_t k = 0; k < l; k++) ok = ok && present[(unsigned char)s[i + k]];
        if (ok) memmove(s + o, s + i, l), o += l;
        else s[o++] = 'x';
        i += l;
    }
    s[o] = 0;
    return o;
}

static void roundtrip(const char *path, const char *label) {
    if (!tk_file_exists(path)) {
        fprintf(stderr, "SKIP %s: %s is absent\n", label, path);
        skip();
    }
    rf_vocab *v = tk_load(path);
    assert_non_null(v);
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0xA11CE);
    int fails = 0;
    bool present[256];
    bool bpe = !strcmp(label, "smollm2");
    if (bpe) {
        int np = byte_tokens(v, present);
        fprintf(stderr, "%s: %d/256 bytes have a byte token; missing:", label, np);
        for (int b = 0; b < 256; b++)
            if (!present[b]) fprintf(stderr, " %02x", b);
        fprintf(stderr, " (characters using them are replaced by 'x' here)\n");
    }
    for (int it = 0; it < N_STRINGS; it++) {
        char s[1024];
        size_t sl = random_text(&r, s, false);
        if (bpe) sl = keep_representable(s, sl, present);
        assert_true(tk_valid_utf8((unsigned char *)s, sl));
        size_t n = 0;
        int32_t *ids = tk_tokenize(v, s, sl, false, false, &n);
        assert_non_null(ids);
        char *out = NULL;
        size_t ol = 0;
        assert_int_equal(rf_detokenize(v, ids, n, true, &out, &ol), RF_OK);
        if (ol != sl || memcmp(out, s, sl)) {
            if (fails++ < 10)
                fprintf(stderr, "%s round trip #%d failed:\n  in  \"%s\"\n  out \"%.*s\"\n", label, it, s, (int)ol, out);
        }
        free(out);
        free(ids);
    }
    fprintf(stderr, "%s: detokenize(tokenize(s)) == s for %d/%d random strings\n", label, N_STRINGS - fails, N_STRINGS);
    rf_vocab_free(v);
    assert_int_equal(fails, 0);
}

static void stream_vs_batch(const char *path, const char *label) {
    if (!tk_file_exists(path)) {
        fprintf(stderr, "SKIP %s: %s is absent\n", label, path);
        skip();
    }
    rf_vocab *v = tk_load(path);
    assert_non_null(v);
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0x57EA);
    int32_t nv = rf_vocab_n_tokens(v);
    for (int it = 0; it < N_SEQS; it++) {
        int32_t ids[64];
        size_t n;
        if (it & 1) {
            /* random ids: byte tokens and pieces cut in the middle of characters */
            n = 1 + rf_rng_u64(&r) % 40;
            for (size_t i = 0; i < n; i++) {
                uint64_t k = rf_rng_u64(&r);
                ids[i] = (k & 1) ? (int32_t)((k >> 8) % 512) : (int32_t)((k >> 8) % (uint64_t)nv);
            }
        } else {
            /* ids of real text */
            char s[1024];
            size_t sl = random_text(&r, s, true), m = 0;
            int32_t *t = tk_tokenize(v, s, sl, true, true, &m);
            assert_non_null(t);
            n = m < 64 ? m : 64;
            memcpy(ids, t, n * sizeof *ids);
            free(t);
        }
        bool special = (it >> 1) & 1;
        char *batch = NULL;
        size_t bl;
        assert_int_equal(rf_detokenize(v, ids, n, special, &batch, &bl), RF_OK);
        size_t el;
        char *expect = tk_sanitize(batch, bl, &el);
        rf_detok *d = NULL;
        assert_int_equal(rf_detok_new(v, special, &d), RF_OK);
        size_t cap = 4 + rf_rng_u64(&r) % 13, gl = 0, gcap = el + 64;
        char *got = malloc(gcap);
        for (size_t i = 0; i <= n; i++) {
            char chunk[32];
            size_t cl = 0;
            if (i < n) assert_int_equal(rf_detok_push(d, ids[i], chunk, cap, &cl), RF_OK);
            else assert_int_equal(rf_detok_flush(d, chunk, cap, &cl), RF_OK);
            assert_true(cl <= cap);
            if (!tk_valid_utf8((unsigned char *)chunk, cl)) {
                fprintf(stderr, "%s: chunk is not valid UTF-8 (seq %d, token %zu)\n", label, it, i);
                fail();
            }
            assert_true(gl + cl <= gcap);
            memcpy(got + gl, chunk, cl);
            gl += cl;
            if (i == n && cl) i--; /* flush until empty */
        }
        if (gl != el || memcmp(got, expect, el)) {
            fprintf(stderr, "%s seq %d: batch \"%.*s\"\n  stream \"%.*s\"\n", label, it, (int)el, expect, (int)gl, got);
            fail();
        }
        free(got);
        rf_detok_free(d);
        free(expect);
        free(batch);
    }
    fprintf(stderr, "%s: stream == batch and valid UTF-8 chunks on %d id sequences\n", label, N_SEQS);
    rf_vocab_free(v);
}

static void test_bpe_roundtrip(void **s) { (void)s; roundtrip(RF_SMOLLM2_PATH, "smollm2"); }
static void test_spm_roundtrip(void **s) { (void)s; roundtrip(RF_GEMMA3_PATH, "gemma3"); }
static void test_bpe_stream(void **s) { (void)s; stream_vs_batch(RF_SMOLLM2_PATH, "smollm2"); }
static void test_spm_stream(void **s) { (void)s; stream_vs_batch(RF_GEMMA3_PATH, "gemma3"); }

/* Gemma: a literal U+2581 is the escaped space, so it comes back as ' ' (reference behaviour). */
static void test_spm_literal_2581(void **s) {
    (void)s;
    if (!tk_file_exists(RF_GEMMA3_PATH)) skip();
    rf_vocab *v = tk_load(RF_GEMMA3_PATH);
    assert_non_null(v);
    size_t n;
    int32_t *ids = tk_tokenize(v, "a\xE2\x96\x81" "b", 5, false, false, &n);
    char *out;
    size_t ol;
    assert_int_equal(rf_detokenize(v, ids, n, false, &out, &ol), RF_OK);
    assert_string_equal(out, "a b");
    free(out);
    free(ids);
    rf_vocab_free(v);
}

/* Arbitrary bytes never fail and give in-range ids. BPE: each byte that does not start a valid
 * character is read as U+FFFD (the reference's rule), so tokenize(raw) == tokenize(sanitized).
 * SPM: byte fallback keeps the bytes, so they come back unless an incomplete sequence swallows
 * the first bytes of an escaped space (checked on text without spaces or U+2581). */
static void invalid_bytes(const char *path, const char *label, bool bpe) {
    if (!tk_file_exists(path)) skip();
    rf_vocab *v = tk_load(path);
    assert_non_null(v);
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0xBADB17E5);
    int32_t nv = rf_vocab_n_tokens(v);
    for (int it = 0; it < N_STRINGS; it++) {
        char raw[128];
        size_t n = rf_rng_u64(&r) % sizeof raw;
        for (size_t i = 0; i < n; i++) {
            uint64_t k = rf_rng_u64(&r);
            raw[i] = (char)((k & 3) ? 0x80 + (k >> 8) % 0x80 : (k >> 8) % 256);
            /* A space, or a U+2581 the random bytes happened to spell, comes back as ' '. */
            if (!bpe && (raw[i] == ' ' || (i >= 2 && !memcmp(raw + i - 2, "\xE2\x96\x81", 3))))
                raw[i] = 'x';
        }
        size_t m = 0;
        int32_t *ids = tk_tokenize(v, raw, n, true, it & 1, &m);
        assert_non_null(ids);
        for (size_t i = 0; i < m; i++) assert_true(ids[i] >= 0 && ids[i] < nv);
        if (bpe) {
            size_t sl, m2 = 0;
            char *san = tk_sanitize(raw, n, &sl);
            int32_t *ids2 = tk_tokenize(v, san, sl, true, it & 1, &m2);
            assert_non_null(ids2);
            assert_int_equal(m, m2);
            assert_memory_equal(ids, ids2, m * sizeof *ids);
            free(ids2);
            free(san);
        } else {
            char *out = NULL;
            size_t ol;
            size_t m0 = 0;
            int32_t *plain = tk_tokenize(v, raw, n, false, false, &m0);
            assert_int_equal(rf_detokenize(v, plain, m0, false, &out, &ol), RF_OK);
            assert_int_equal(ol, n);
            assert_memory_equal(out, raw, n);
            free(out);
            free(plain);
        }
        free(ids);
    }
    fprintf(stderr, "%s: %d random byte strings (mostly invalid UTF-8) tokenized as specified\n", label, N_STRINGS);
    rf_vocab_free(v);
}

static void test_bpe_invalid_bytes(void **s) { (void)s; invalid_bytes(RF_SMOLLM2_PATH, "smollm2", true); }
static void test_spm_invalid_bytes(void **s) { (void)s; invalid_bytes(RF_GEMMA3_PATH, "gemma3", false); }

/* 10 MB of mixed text in one call: completes, round-trips, and the ids look like text. */
static void test_bpe_10mb(void **s) {
    (void)s;
    if (!tk_file_exists(RF_SMOLLM2_PATH)) skip();
    rf_vocab *v = tk_load(RF_SMOLLM2_PATH);
    assert_non_null(v);
    bool present[256];
    byte_tokens(v, present);
    size_t cap = 10u << 20, n = 0;
    char *big = malloc(cap + 1024);
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0x10);
    while (n < cap) {
        size_t l = random_text(&r, big + n, true);
        n += keep_representable(big + n, l, present);
    }
    size_t m = 0;
    int32_t *ids = tk_tokenize(v, big, n, false, false, &m);
    assert_non_null(ids);
    assert_true(m > n / 8 && m <= n);
    char *out = NULL;
    size_t ol;
    assert_int_equal(rf_detokenize(v, ids, m, true, &out, &ol), RF_OK);
    assert_int_equal(ol, n);
    assert_memory_equal(out, big, n);
    fprintf(stderr, "smollm2: %zu bytes -> %zu tokens -> the same %zu bytes\n", n, m, ol);
    free(out);
    free(ids);
    free(big);
    rf_vocab_free(v);
}

int main(void) {
    if (!tk_file_exists(RF_SMOLLM2_PATH) && !tk_file_exists(RF_GEMMA3_PATH)) {
        fprintf(stderr, "SKIP test_tokenizer_props: %s and %s are absent (run scripts/fetch-models.sh)\n",
                RF_SMOLLM2_PATH, RF_GEMMA3_PATH);
        return RF_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_roundtrip), cmocka_unit_test(test_spm_roundtrip),
        cmocka_unit_test(test_bpe_stream),    cmocka_unit_test(test_spm_stream),
        cmocka_unit_test(test_spm_literal_2581), cmocka_unit_test(test_bpe_invalid_bytes),
        cmocka_unit_test(test_spm_invalid_bytes), cmocka_unit_test(test_bpe_10mb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
