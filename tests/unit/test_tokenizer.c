/* test_tokenizer.c — vocabulary loading, errors, special tokens, SPM/BPE edge cases and the
 * llama.cpp test vectors in tests/data/vocab (ggml-vocab-*.gguf + .inp/.out), on small
 * vocabularies written here or vocab-only files (no model needed). */
#include <time.h>

#include "test_tokenizer_common.h"
#include "tokenizer/tokenizer_internal.h"

/* ---- a synthetic byte-level BPE vocabulary ----------------------------------------------- */

enum { SYN_HE = 256, SYN_GT, SYN_GTHE, SYN_APOS_S, SYN_EOT, SYN_UD, SYN_IMEND, SYN_XY, SYN_YZW, SYN_N };

/* pre == NULL: no tokenizer.ggml.pre key. model == NULL: "gpt2". */
static rf_status synth_bpe(const char *model, const char *pre, bool with_tokens, rf_vocab **out) {
    static char chars[256][8];
    const char *toks[SYN_N];
    int32_t types[SYN_N];
    for (int b = 0; b < 256; b++) {
        gpt2_char(b, chars[b]);
        toks[b] = chars[b];
        types[b] = 1;
    }
    toks[SYN_HE] = "he", toks[SYN_GT] = "\xC4\xA0t", toks[SYN_GTHE] = "\xC4\xA0the";
    toks[SYN_APOS_S] = "'s", toks[SYN_EOT] = "<|endoftext|>", toks[SYN_UD] = "<UD>";
    toks[SYN_IMEND] = "<|im_end|>", toks[SYN_XY] = "xy", toks[SYN_YZW] = "yzw";
    for (int i = 256; i < SYN_N; i++) types[i] = 1;
    types[SYN_EOT] = 3, types[SYN_UD] = 4, types[SYN_IMEND] = 3, types[SYN_XY] = 4, types[SYN_YZW] = 4;
    const char *merges[] = {"h e", "\xC4\xA0 t", "\xC4\xA0t he", "' s"};
    rf_gguf_writer *w = rf_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(rf_gguf_set_str(w, "general.architecture", "llama"), RF_OK);
    assert_int_equal(rf_gguf_set_str(w, "tokenizer.ggml.model", model ? model : "gpt2"), RF_OK);
    if (pre) assert_int_equal(rf_gguf_set_str(w, "tokenizer.ggml.pre", pre), RF_OK);
    if (with_tokens) assert_int_equal(rf_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, SYN_N), RF_OK);
    assert_int_equal(rf_gguf_set_arr(w, "tokenizer.ggml.token_type", RF_GGUF_INT32, types, SYN_N), RF_OK);
    assert_int_equal(rf_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 4), RF_OK);
    assert_int_equal(rf_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", SYN_EOT), RF_OK);
    assert_int_equal(rf_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", SYN_EOT), RF_OK);
    rf_status st = tk_load_writer(w, out);
    rf_gguf_writer_free(w);
    return st;
}

static void expect_ids(const rf_vocab *v, const char *text, bool add_special, bool parse_special,
                       const int32_t *exp, size_t n_exp) {
    size_t n = 0;
    int32_t *ids = tk_tokenize(v, text, strlen(text), add_special, parse_special, &n);
    assert_non_null(ids);
    if (n != n_exp || memcmp(ids, exp, n * sizeof *ids)) {
        fprintf(stderr, "text '%s': expected", text);
        for (size_t i = 0; i < n_exp; i++) fprintf(stderr, " %d", exp[i]);
        fprintf(stderr, ", got");
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
        fail();
    }
    free(ids);
}

static void test_bpe_merges_and_specials(void **state) {
    (void)state;
    rf_vocab *v = NULL;
    assert_int_equal(synth_bpe(NULL, "gpt-2", true, &v), RF_OK);
    /* " the": Ġ t h e -> "he" (rank 0) -> "Ġt" (1) -> "Ġthe" (2) */
    expect_ids(v, " the", false, false, (int32_t[]){SYN_GTHE}, 1);
    expect_ids(v, "the", false, false, (int32_t[]){'t', SYN_HE}, 2);
    /* contractions are their own word; "'s" merges */
    expect_ids(v, "he's", false, false, (int32_t[]){SYN_HE, SYN_APOS_S}, 2);
    /* control tokens only with parse_special; user-defined always */
    expect_ids(v, "<|endoftext|>", false, true, (int32_t[]){SYN_EOT}, 1);
    size_t n = 0;
    int32_t *ids = tk_tokenize(v, "<|endoftext|>", 13, false, false, &n);
    assert_non_null(ids);
    assert_true(n > 1);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], SYN_EOT);
    free(ids);
    expect_ids(v, "a<UD>b", false, false, (int32_t[]){'a', SYN_UD, 'b'}, 3);
    /* overlapping special tokens: the longer one is split out first (llama.cpp's order), so
     * "xyzw" is x + "yzw", not "xy" + zw; "xyxy" is two "xy" */
    expect_ids(v, "xyzw", false, false, (int32_t[]){'x', SYN_YZW}, 2);
    expect_ids(v, "xyxyzw", false, false, (int32_t[]){SYN_XY, 'x', SYN_YZW}, 3);
    /* the model's add_bos is false for gpt-2: add_special adds nothing */
    expect_ids(v, "a", true, false, (int32_t[]){'a'}, 1);
    /* end of generation: eos and the recognised <|im_end|> */
    assert_true(rf_vocab_is_eog(v, SYN_EOT));
    assert_true(rf_vocab_is_eog(v, SYN_IMEND));
    assert_false(rf_vocab_is_eog(v, 'a'));
    assert_false(rf_vocab_is_eog(v, -1));
    assert_false(rf_vocab_is_eog(v, SYN_N));
    assert_int_equal(rf_vocab_eot(v), SYN_IMEND); /* "<|im_end|>" ranks before "<|endoftext|>" */
    assert_string_equal(rf_vocab_token_text(v, SYN_GTHE), "\xC4\xA0the");
    assert_null(rf_vocab_token_text(v, SYN_N));
    /* pieces: byte-level mapping undone; control tokens empty unless rendered */
    char buf[32];
    assert_int_equal(rf_token_to_piece(v, SYN_GTHE, false, buf, sizeof buf, &n), RF_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, " the", 4);
    assert_int_equal(rf_token_to_piece(v, SYN_EOT, false, buf, sizeof buf, &n), RF_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rf_token_to_piece(v, SYN_EOT, true, buf, sizeof buf, &n), RF_OK);
    assert_int_equal(n, 13);
    assert_int_equal(rf_token_to_piece(v, SYN_EOT, true, buf, 4, &n), RF_ERR_RANGE);
    assert_int_equal(n, 13);
    assert_int_equal(rf_token_to_piece(v, SYN_N, true, buf, sizeof buf, &n), RF_ERR_RANGE);
    /* cap too small: RANGE, *n_out says how many */
    int32_t small[1];
    assert_int_equal(rf_tokenize(v, "a b c", 5, false, false, small, 1, &n), RF_ERR_RANGE);
    assert_int_equal(n, 5); /* a Ġ b Ġ c: no merge for "Ġb" here */
    assert_int_equal(small[0], 'a');
    rf_vocab_free(v);
}

static void test_load_errors(void **state) {
    (void)state;
    rf_vocab *v = NULL;
    assert_int_equal(synth_bpe(NULL, "no-such-pre", true, &v), RF_ERR_UNSUPPORTED);
    assert_null(v);
    assert_non_null(strstr(rf_last_error(), "no-such-pre"));
    assert_non_null(strstr(rf_last_error(), "tokenizer.ggml.pre"));
    assert_int_equal(synth_bpe("wordpiece-x", "gpt-2", true, &v), RF_ERR_UNSUPPORTED);
    assert_non_null(strstr(rf_last_error(), "wordpiece-x"));
    assert_int_equal(synth_bpe(NULL, "gpt-2", false, &v), RF_ERR_NOT_FOUND);
    assert_non_null(strstr(rf_last_error(), "tokenizer.ggml.tokens"));
    /* a missing pre key is a warning and the default pre-tokenizer */
    assert_int_equal(synth_bpe(NULL, NULL, true, &v), RF_OK);
    expect_ids(v, " the", false, false, (int32_t[]){SYN_GTHE}, 1);
    rf_vocab_free(v);
    /* llama3 family: ignore_merges and add_bos */
    assert_int_equal(synth_bpe(NULL, "llama-bpe", true, &v), RF_OK);
    assert_true(rf_vocab_add_bos(v));
    expect_ids(v, " the", true, false, (int32_t[]){SYN_EOT, SYN_GTHE}, 2);
    rf_vocab_free(v);
    assert_int_equal(rf_vocab_load(NULL, &v), RF_ERR_INVALID_ARG);
    /* every pre-tokenizer family compiles and splits a mixed text without error */
    const char *pres[] = {"default", "llama3", "dbrx", "gpt-2", "trillion", "starcoder", "smollm",
                          "qwen2", "stablelm2", "qwen35", "grok-2", "gpt-4o", "tekken", "falcon",
                          "deepseek-coder", "deepseek-llm", "deepseek-v3", "poro-chat", "bloom",
                          "viking", "seed-coder", "bailingmoe", "command-r", "mpt", "olmo"};
    const char *mixed = "Hello WORLD it's 12345 \t\n\n  x\xC2\x85y  \xE4\xB8\x96\xE7\x95\x8C "
                        "caf\xC3\xA9 \xF0\x9F\x9A\x80!!! \xff\xfe end  ";
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++) {
        if (synth_bpe(NULL, pres[i], true, &v) != RF_OK) {
            fprintf(stderr, "pre '%s': %s\n", pres[i], rf_last_error());
            fail();
        }
        size_t n = 0;
        int32_t *ids = tk_tokenize(v, mixed, strlen(mixed), true, true, &n);
        assert_non_null(ids);
        assert_true(n > 10);
        for (size_t k = 0; k < n; k++) assert_true(ids[k] >= 0 && ids[k] < SYN_N);
        free(ids);
        rf_vocab_free(v);
    }
}

/* Random ids over a clean_spaces vocabulary (gpt-2 pre): the streaming detokenizer, fed one
 * id at a time with a small output buffer, must give exactly the batch text (here all valid
 * UTF-8 pieces are bytes, so invalid sequences appear and must come out as U+FFFD). */
static void test_stream_equals_batch_clean_spaces(void **state) {
    (void)state;
    rf_vocab *v = NULL;
    assert_int_equal(synth_bpe(NULL, "gpt-2", true, &v), RF_OK);
    rf_rng rng;
    rf_rng_init(&rng, rf_test_seed() ^ 0x5eed);
    /* favour the bytes the clean-up rules look at */
    const int hot[] = {' ', '\'', '.', ',', '?', '!', 's', 'm', 'r', 'e', 'v', 't', 'd', 'l', 0xC3, 0xA9, 0xE2};
    int cases = 0;
    for (int it = 0; it < 3000; it++, cases++) {
        size_t n = 1 + rf_rng_u64(&rng) % 24;
        int32_t ids[32];
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rf_rng_u64(&rng);
            ids[i] = (r & 3) ? hot[(r >> 8) % (sizeof hot / sizeof hot[0])] : (int32_t)((r >> 8) % SYN_N);
        }
        bool special = it & 1;
        char *batch = NULL;
        size_t bl = 0;
        assert_int_equal(rf_detokenize(v, ids, n, special, &batch, &bl), RF_OK);
        size_t el;
        char *expect = tk_sanitize(batch, bl, &el);
        rf_detok *d = NULL;
        assert_int_equal(rf_detok_new(v, special, &d), RF_OK);
        char got[1024];
        size_t gl = 0;
        size_t cap = 4 + rf_rng_u64(&rng) % 8; /* >= one character */
        for (size_t i = 0; i <= n; i++) {
            char chunk[16];
            size_t cl = 0;
            if (i < n) assert_int_equal(rf_detok_push(d, ids[i], chunk, cap, &cl), RF_OK);
            else assert_int_equal(rf_detok_flush(d, chunk, cap, &cl), RF_OK);
            assert_true(cl <= cap);
            assert_true(tk_valid_utf8((unsigned char *)chunk, cl)); /* never half a character */
            memcpy(got + gl, chunk, cl);
            gl += cl;
            if (i == n && cl) i--; /* flush until empty */
        }
        if (gl != el || memcmp(got, expect, el)) {
            fprintf(stderr, "case %d: batch '%.*s' stream '%.*s'\n", it, (int)el, expect, (int)gl, got);
            fail();
        }
        rf_detok_free(d);
        free(expect);
        free(batch);
    }
    fprintf(stderr, "stream == batch on %d random id sequences (clean_spaces vocabulary)\n", cases);
    rf_vocab_free(v);
}

/* The clean-up rules themselves, on a gpt-2 (clean_spaces) vocabulary. */
static void test_clean_spaces(void **state) {
    (void)state;
    rf_vocab *v = NULL;
    assert_int_equal(synth_bpe(NULL, "gpt-2", true, &v), RF_OK);
    struct {
        const char *in, *out;
    } cases[] = {
        {"a , b .", "a, b."}, {"x ' y", "x'y"}, {"it 's he 'm we 're 've", "it's he'm we're've"},
        {"don 't  'd 'll", "don 't  'd 'll"}, {" ?", "?"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = strlen(cases[c].in);
        int32_t ids[64];
        for (size_t i = 0; i < n; i++) ids[i] = (unsigned char)cases[c].in[i];
        char *out = NULL;
        size_t ol;
        assert_int_equal(rf_detokenize(v, ids, n, false, &out, &ol), RF_OK);
        assert_string_equal(out, cases[c].out);
        free(out);
    }
    rf_vocab_free(v);
}

/* ---- pre-tokenizer splits, derived by hand from the regex definitions ------------------ */

typedef struct split_out {
    char words[64][64];
    int n;
} split_out;

static rf_status collect(void *user, const char *w, size_t len) {
    split_out *o = user;
    if (o->n < 64 && len < 64) {
        memcpy(o->words[o->n], w, len);
        o->words[o->n][len] = 0;
    }
    o->n++;
    return RF_OK;
}

static void expect_split(const char *pre, const char *text, const char *const *exp) {
    rf_pretok *p = NULL;
    assert_int_equal(rf_pretok_new(pre, &p, NULL), RF_OK);
    split_out o = {.n = 0};
    assert_int_equal(rf_pretok_split(p, text, strlen(text), collect, &o), RF_OK);
    int ne = 0;
    while (exp[ne]) ne++;
    bool ok = o.n == ne;
    for (int i = 0; ok && i < ne; i++) ok = !strcmp(o.words[i], exp[i]);
    if (!ok) {
        fprintf(stderr, "pre '%s' text \"%s\":\n  expected", pre, text);
        for (int i = 0; i < ne; i++) fprintf(stderr, " [%s]", exp[i]);
        fprintf(stderr, "\n  got     ");
        for (int i = 0; i < o.n && i < 64; i++) fprintf(stderr, " [%s]", o.words[i]);
        fprintf(stderr, "\n");
        fail();
    }
    rf_pretok_free(p);
}

static void test_pretok_splits(void **state) {
    (void)state;
    /* llama3: case-insensitive contractions, digits in threes, \s*[\r\n]+ and \s+(?!\S) */
    expect_split("llama-bpe", "Hello world's 1234567  \n\n x",
                 (const char *[]){"Hello", " world", "'s", " ", "123", "456", "7", "  \n\n", " x", NULL});
    expect_split("llama3", "I'LL a   b  ",
                 (const char *[]){"I", "'LL", " a", "  ", " b", "  ", NULL});
    expect_split("llama3", "x!!\n\ny", (const char *[]){"x", "!!\n\n", "y", NULL});
    /* qwen2: digits one by one */
    expect_split("qwen2", "v1234", (const char *[]){"v", "1", "2", "3", "4", NULL});
    /* gpt-2: case-sensitive contractions, " ?\p{N}+", lone tab is a gap of its own */
    expect_split("gpt-2", "I'LL it's 2024\tx", (const char *[]){"I", "'", "LL", " it", "'s", " 2024", "\t", "x", NULL});
    /* smollm: digits isolated first, then gpt-2 */
    expect_split("smollm", "ab 12", (const char *[]){"ab", " ", "1", "2", NULL});
    /* U+0085 (NEL) is whitespace as in llama.cpp's tables */
    expect_split("gpt-2", "a\xC2\x85\xC2\x85" "b", (const char *[]){"a", "\xC2\x85", "\xC2\x85", "b", NULL});
}

/* ---- llama.cpp test vectors -------------------------------------------------------------- */

/* Runs every ggml-vocab-*.gguf in tests/data/vocab that has .inp/.out files. */
static void test_vocab_vectors(void **state) {
    (void)state;
    const char *names[] = {"llama-spm", "gpt-2", "starcoder", "falcon", "deepseek-llm",
                           "deepseek-coder", "mpt", "refact", "phi-3", "llama-bpe", "qwen2", "command-r"};
    int files = 0, total = 0, bad = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[512], inp[600], outp[600];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", RF_TEST_DATA_DIR, names[k]);
        snprintf(inp, sizeof inp, "%s.inp", path);
        snprintf(outp, sizeof outp, "%s.out", path);
        if (!tk_file_exists(path) || !tk_file_exists(inp) || !tk_file_exists(outp)) continue;
        rf_vocab *v = tk_load(path);
        assert_non_null(v);
        size_t isz, osz;
        char *in = rf_test_read_file(inp, &isz), *out = rf_test_read_file(outp, &osz);
        assert_non_null(in);
        assert_non_null(out);
        files++;
        const char *sep = "\n__ggml_vocab_test__\n";
        char *p = in, *line = out;
        int ok = 0, cnt = 0;
        while (p < in + isz) {
            char *e = strstr(p, sep);
            size_t tl = e ? (size_t)(e - p) : (size_t)(in + isz - p);
            char *nl = strchr(line, '\n');
            if (!nl) break;
            *nl = 0;
            int32_t exp[4096];
            size_t ne = 0;
            for (char *t = strtok(line, " "); t && ne < 4096; t = strtok(NULL, " ")) exp[ne++] = atoi(t);
            size_t n = 0;
            int32_t *ids = tk_tokenize(v, p, tl, false, false, &n);
            assert_non_null(ids);
            cnt++;
            if (n == ne && !memcmp(ids, exp, n * sizeof *ids)) ok++;
            else {
                fprintf(stderr, "MISMATCH %s text '%.*s'\n  expected:", names[k], (int)tl, p);
                for (size_t i = 0; i < ne; i++) fprintf(stderr, " %d", exp[i]);
                fprintf(stderr, "\n  got:     ");
                for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "\n");
            }
            free(ids);
            line = nl + 1;
            if (!e) break;
            p = e + strlen(sep);
        }
        fprintf(stderr, "%s: %d/%d texts match llama.cpp\n", names[k], ok, cnt);
        total += cnt;
        bad += cnt - ok;
        free(in);
        free(out);
        rf_vocab_free(v);
    }
    if (!files) skip();
    assert_int_equal(bad, 0);
    assert_true(total > 0);
}

/* ---- SPM edge cases on the llama-spm vocab-only file ------------------------------------- */

static rf_vocab *spm_vocab(void) {
    const char *p = rf_test_data("vocab/ggml-vocab-llama-spm.gguf");
    if (!tk_file_exists(p)) return NULL;
    return tk_load(p);
}

static void test_spm_edges(void **state) {
    (void)state;
    rf_vocab *v = spm_vocab();
    if (!v) skip();
    size_t n = 99;
    /* empty text: nothing, or BOS alone */
    int32_t *ids = tk_tokenize(v, "", 0, false, false, &n);
    assert_non_null(ids);
    assert_int_equal(n, 0);
    free(ids);
    ids = tk_tokenize(v, "", 0, true, false, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], rf_vocab_bos(v));
    free(ids);
    /* leading space: "Hello" -> "▁Hello"; detokenize strips it again, BOS keeps it */
    ids = tk_tokenize(v, "Hello world", 11, true, false, &n);
    assert_non_null(ids);
    char *s = NULL;
    size_t sl;
    assert_int_equal(rf_detokenize(v, ids + 1, n - 1, false, &s, &sl), RF_OK);
    assert_string_equal(s, "Hello world");
    free(s);
    assert_int_equal(rf_detokenize(v, ids, n, false, &s, &sl), RF_OK);
    assert_string_equal(s, " Hello world"); /* as llama.cpp: the BOS consumed the strip */
    free(s);
    free(ids);
    /* invalid UTF-8 and raw bytes: byte fallback, never a crash, bytes come back */
    /* (an incomplete sequence right before a space would swallow the escaped U+2581 into its
     * byte fallback and come back as "\xe2\x96\x81", exactly as in llama.cpp) */
    const char bad[] = "a\xff\xfe\xc3(\xe2\x82z \xf0\x9f\x98\x80z\x80";
    ids = tk_tokenize(v, bad, sizeof bad - 1, false, false, &n);
    assert_non_null(ids);
    assert_int_equal(rf_detokenize(v, ids, n, false, &s, &sl), RF_OK);
    assert_int_equal(sl, sizeof bad - 1);
    assert_memory_equal(s, bad, sl);
    free(s);
    free(ids);
    /* byte token piece */
    int32_t nl = -1;
    for (int32_t i = 0; i < rf_vocab_n_tokens(v); i++)
        if (!strcmp(rf_vocab_token_text(v, i), "<0x0A>")) nl = i;
    assert_true(nl >= 0);
    char buf[8];
    assert_int_equal(rf_token_to_piece(v, nl, false, buf, sizeof buf, &n), RF_OK);
    assert_int_equal(n, 1);
    assert_int_equal(buf[0], '\n');
    /* out-of-range id */
    int32_t badid = rf_vocab_n_tokens(v);
    assert_int_equal(rf_detokenize(v, &badid, 1, false, &s, &sl), RF_ERR_RANGE);
    rf_vocab_free(v);
}

/* Streaming == batch on a vocabulary that strips the SPM leading space (llama-spm adds one):
 * the first piece loses its space in both, whatever the first token is. */
static void test_spm_stream_leading_space(void **state) {
    (void)state;
    rf_vocab *v = spm_vocab();
    if (!v) skip();
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() ^ 0x1EAD);
    const char *texts[] = {"Hello world", " two  spaces", "\xE4\xB8\x96\xE7\x95\x8C!", "<s>x", "a\xff" "b", ""};
    for (int it = 0; it < 2000; it++) {
        int32_t ids[48];
        size_t n;
        if (it < 12) {
            size_t m = 0;
            const char *t = texts[it % 6];
            int32_t *tt = tk_tokenize(v, t, strlen(t), it >= 6, true, &m);
            assert_non_null(tt);
            n = m < 48 ? m : 48;
            memcpy(ids, tt, n * sizeof *ids);
            free(tt);
        } else {
            n = 1 + rf_rng_u64(&r) % 40;
            for (size_t i = 0; i < n; i++) {
                uint64_t k = rf_rng_u64(&r);
                ids[i] = (int32_t)((k & 1) ? (k >> 8) % 300 : (k >> 8) % (uint64_t)rf_vocab_n_tokens(v));
            }
        }
        bool special = it & 1;
        char *batch;
        size_t bl, el, gl = 0;
        assert_int_equal(rf_detokenize(v, ids, n, special, &batch, &bl), RF_OK);
        char *expect = tk_sanitize(batch, bl, &el);
        rf_detok *d;
        assert_int_equal(rf_detok_new(v, special, &d), RF_OK);
        char *got = malloc(el + 64);
        for (size_t i = 0; i <= n; i++) {
            char chunk[64];
            size_t cl = 0;
            if (i < n) assert_int_equal(rf_detok_push(d, ids[i], chunk, sizeof chunk, &cl), RF_OK);
            else assert_int_equal(rf_detok_flush(d, chunk, sizeof chunk, &cl), RF_OK);
            assert_true(tk_valid_utf8((unsigned char *)chunk, cl));
            assert_true(gl + cl <= el + 64);
            memcpy(got + gl, chunk, cl);
            gl += cl;
            if (i == n && cl) i--;
        }
        if (gl != el || memcmp(got, expect, el)) {
            fprintf(stderr, "seq %d: batch \"%.*s\" stream \"%.*s\"\n", it, (int)el, expect, (int)gl, got);
            fail();
        }
        free(got);
        rf_detok_free(d);
        free(expect);
        free(batch);
    }
    rf_vocab_free(v);
}

/* Linear time: 4x the text must not cost 16x (a quadratic merge would). Inputs: English-like
 * text, and a single 2 MB word with no spaces (the worst case for per-word merging). */
/* The thread's CPU time, not the wall clock: the property is the work's growth, and wall time
 * also counts the time other processes take the core (under a parallel ctest, or beside a
 * sanitizer build, the wall-clock ratio failed while the work's ratio was 6x). Tokenizing runs
 * on the calling thread. */
static double tok_seconds(const rf_vocab *v, const char *s, size_t n) {
    struct timespec a, b;
    size_t m = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    int32_t *ids = tk_tokenize(v, s, n, false, false, &m);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    assert_non_null(ids);
    assert_true(m > 0);
    free(ids);
    return (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
}

static void test_spm_long_inputs_linear(void **state) {
    (void)state;
    rf_vocab *v = spm_vocab();
    if (!v) skip();
    const size_t big = 2 << 20;
    char *s = malloc(big);
    const char *words[] = {"the ", "tokenizer ", "of ", "ROCmForge ", "splits ", "text, ", "ünïcode ", "42 "};
    size_t o = 0;
    rf_rng r;
    rf_rng_init(&r, 7);
    while (o < big) {
        const char *w = words[rf_rng_u64(&r) % 8];
        size_t l = strlen(w);
        if (o + l > big) l = big - o;
        memcpy(s + o, w, l);
        o += l;
    }
    double t1 = tok_seconds(v, s, big / 4), t4 = tok_seconds(v, s, big);
    fprintf(stderr, "SPM text: %zu bytes %.3f s, %zu bytes %.3f s\n", big / 4, t1, big, t4);
    assert_true(t4 < 10 * t1 + 0.05);
    memset(s, 'a', big);
    t1 = tok_seconds(v, s, big / 8), t4 = tok_seconds(v, s, big / 2);
    fprintf(stderr, "SPM one word: %zu bytes %.3f s, %zu bytes %.3f s\n", big / 8, t1, big / 2, t4);
    /* n log n with a heap that outgrows the caches: allow 12x (quadratic would be 16x+) */
    assert_true(t4 < 12 * t1 + 0.05);
    free(s);
    rf_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_merges_and_specials),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_clean_spaces),
        cmocka_unit_test(test_pretok_splits),
        cmocka_unit_test(test_stream_equals_batch_clean_spaces),
        cmocka_unit_test(test_vocab_vectors),
        cmocka_unit_test(test_spm_edges),
        cmocka_unit_test(test_spm_stream_leading_space),
        cmocka_unit_test(test_spm_long_inputs_linear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
