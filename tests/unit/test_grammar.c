/* test_grammar.c — constrained decoding: the byte grammar's recognizer on JSON (any object and
 * schemas: nested, anyOf, enum, arrays with bounds), schemas refused with the keyword named,
 * GBNF parsing (classes, repetition, groups, errors), and the token mask over SmolLM2's
 * vocabulary (checked token by token against the recognizer, and the loop-table fast path bit
 * for bit against the whole-vocabulary walk) when the model is present. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/grammar.h"
#include "engine/grammar_internal.h"
#include "rocmforge/gguf.h"
#include "rocmforge/tokenizer.h"
#include "test_util.h"
#ifdef RF_HAVE_SERVER
#include "server/json_schema.h"
#include "server/tool_grammar.h"
#endif

static bool acc(rf_grammar *g, const char *s) { return rf_grammar_accepts(g, s, strlen(s)); }

static void test_gbnf(void **state) {
    (void)state;
    rf_grammar *g = NULL;
    const char *src = "# a comment\nroot ::= greet (\" \" name)* \"!\"?\n"
                      "greet ::= \"hi\" | \"hello\"\n"
                      "name ::= [A-Z] [a-z]{1,3}\n";
    assert_int_equal(rf_grammar_parse_gbnf(src, strlen(src), &g), RF_OK);
    assert_true(acc(g, "hi"));
    assert_true(acc(g, "hello Bob!"));
    assert_true(acc(g, "hi Al Zed"));
    assert_false(acc(g, "hi bob"));
    assert_false(acc(g, "hi Bobby"));
    assert_false(acc(g, "hey"));
    assert_false(acc(g, "hi!!"));
    rf_grammar_unref(g);
    /* negated classes, UTF-8 literals, '.', escapes, multi-line groups */
    const char *s2 = "root ::= ( \"«\" [^\"\\n]* \"»\"\n | \"\\x41\" . )\n";
    assert_int_equal(rf_grammar_parse_gbnf(s2, strlen(s2), &g), RF_OK);
    assert_true(acc(g, "«çà va»"));
    assert_true(acc(g, "Aé"));
    assert_false(acc(g, "«a\"»"));
    assert_false(acc(g, "A\xC3")); /* half a character */
    rf_grammar_unref(g);
    const char *bad[] = {"root ::= x\n", "root ::= root \"a\" | \"b\"\n", "root ::= \"a\n", "root ::= [a-\n",
                         "foo ::= \"a\"\n", "root ::= \"a\"{3,1}\n", "root ::= (\"a\"\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g = NULL;
        assert_int_not_equal(rf_grammar_parse_gbnf(bad[i], strlen(bad[i]), &g), RF_OK);
        assert_null(g);
    }
}

#ifdef RF_HAVE_SERVER
static rf_grammar *schema(const char *js, char *err, size_t n) {
    json_error_t je;
    json_t *sc = js ? json_loads(js, 0, &je) : NULL;
    if (js) assert_non_null(sc);
    rf_grammar *g = NULL;
    int r = srv_json_grammar(sc, &g, err, n);
    json_decref(sc);
    return r ? NULL : g;
}

static void test_json_object(void **state) {
    (void)state;
    char err[256];
    rf_grammar *g = schema(NULL, err, sizeof err);
    assert_non_null(g);
    const char *yes[] = {"{}", "{\"a\":1}", "{ \"a\" : [1, -2.5e+3, \"x\\n\\u00e9\", true, null, {\"b\": {}}] }",
                         "{\"é\":\"日本\"}", "{\"a\": 0.5}\n", "{\"\\u0001\\u0010\\u0100\\u1000\\uFFFF\": \"\\u00A0\"}"};
    /* \u0000 is JSON but not admitted: jansson, which reads the answers, refuses it in a key */
    const char *no[] = {"{\"a\":1,}", "[1]", "{\"a\":01}", "\"x\"", " {}", "{\"a\":1.}", "{\"a\":\"\x01\"}",
                        "{\"a\":\"\xC3\"}", "{\"a\" 1}", "{}}", "{\"a\\u0000\": 1}", "{\"a\": \"\\u0000\"}"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) assert_true(acc(g, yes[i]));
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) assert_false(acc(g, no[i]));
    rf_grammar_unref(g);
}

static void test_json_schema(void **state) {
    (void)state;
    char err[256];
    const char *sc = "{\"type\":\"object\",\"properties\":{"
                     "\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                     "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2},"
                     "\"kind\":{\"enum\":[\"cat\",\"dog\",3]},"
                     "\"u\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"integer\"}]},"
                     "\"pos\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"number\"}},"
                     "\"required\":[\"x\",\"y\"],\"additionalProperties\":false},"
                     "\"v\":{\"const\":\"v1\"},\"ok\":{\"type\":[\"boolean\",\"null\"]}},"
                     "\"required\":[\"name\",\"pos\"],\"additionalProperties\":false}";
    rf_grammar *g = schema(sc, err, sizeof err);
    assert_non_null(g);
    const char *yes[] = {
        "{\"name\":\"x\",\"pos\":{\"x\":1,\"y\":2.5}}",
        "{\"name\": \"x\", \"age\": 3, \"tags\": [\"a\", \"b\"], \"kind\": 3, \"u\": null, \"pos\": {\"x\": -1e2, \"y\": 0}, \"v\": \"v1\", \"ok\": false}",
        "{\n  \"name\": \"x\",\n  \"kind\": \"dog\",\n  \"pos\": {\"x\": 0, \"y\": 0},\n  \"ok\": null\n}",
    };
    const char *no[] = {
        "{\"pos\":{\"x\":1,\"y\":2}}",                              /* name is required */
        "{\"name\":\"x\"}",                                           /* pos is required */
        "{\"pos\":{\"x\":1,\"y\":2},\"name\":\"x\"}",                 /* properties in the schema's order */
        "{\"name\":\"x\",\"tags\":[],\"pos\":{\"x\":1,\"y\":2}}",     /* minItems */
        "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"c\"],\"pos\":{\"x\":1,\"y\":2}}", /* maxItems */
        "{\"name\":\"x\",\"kind\":\"cow\",\"pos\":{\"x\":1,\"y\":2}}", /* enum */
        "{\"name\":\"x\",\"u\":2.5,\"pos\":{\"x\":1,\"y\":2}}",       /* anyOf null|integer */
        "{\"name\":\"x\",\"pos\":{\"x\":1}}",                         /* nested required */
        "{\"name\":\"x\",\"pos\":{\"x\":1,\"y\":2,\"z\":3}}",         /* nested additionalProperties */
        "{\"name\":\"x\",\"pos\":{\"x\":1,\"y\":2},\"extra\":1}",     /* additionalProperties false */
        "{\"name\":\"x\",\"v\":\"v2\",\"pos\":{\"x\":1,\"y\":2}}",    /* const */
        "{\"name\":1,\"pos\":{\"x\":1,\"y\":2}}",                     /* type */
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (!acc(g, yes[i])) fail_msg("rejected %s", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        if (acc(g, no[i])) fail_msg("accepted %s", no[i]);
    }
    rf_grammar_unref(g);
    /* a top-level array with exact bounds, and an empty-properties object */
    g = schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", err, sizeof err);
    assert_non_null(g);
    assert_false(acc(g, "[1]"));
    assert_true(acc(g, "[1,2]"));
    assert_true(acc(g, "[1, 2, 3]"));
    assert_false(acc(g, "[1,2,3,4]"));
    rf_grammar_unref(g);
    g = schema("{\"type\":\"object\",\"additionalProperties\":false}", err, sizeof err);
    assert_non_null(g);
    assert_true(acc(g, "{}"));
    assert_false(acc(g, "{\"a\":1}"));
    rf_grammar_unref(g);
}

static void test_schema_refused(void **state) {
    (void)state;
    struct {
        const char *schema, *word;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", "lookaround"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreference"},
        {"{\"type\":\"string\",\"pattern\":\"a\\\\bc\"}", "word boundary"},
        {"{\"type\":\"string\",\"pattern\":\"a{1,100}\"}", "above 64"},
        {"{\"type\":\"string\",\"pattern\":\"a(b\"}", "'('"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchor"},
        {"{\"type\":\"string\",\"format\":\"hostname\"}", "'hostname'"},
        {"{\"$ref\":\"#/$defs/x\"}", "'$ref'"},
        {"{\"$ref\":\"#/$defs/x\",\"type\":\"object\",\"$defs\":{\"x\":{}}}", "'type'"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "minimum above maximum"},
        {"{\"minimum\":0}", "needs 'type'"},
        {"{\"type\":\"string\",\"minLength\":1000}", "minLength"},
        {"{\"type\":\"string\",\"not\":{}}", "'not'"},
        {"{\"$ref\":\"#\"}", "cycle"},
        {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "left recursion"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/x\"}},\"$defs\":{\"x\":{\"$ref\":\"#/$defs/y\"},\"y\":{\"$ref\":\"#/$defs/x\"}}}", "cycle"},
        {"{\"type\":\"array\",\"maxItems\":1000}", "maxItems"},
        {"{\"type\":\"object\",\"required\":[\"a\"]}", "'a'"},
        {"{\"type\":\"widget\"}", "widget"},
        {"{\"anyOf\":[]}", "anyOf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        rf_grammar *g = schema(cases[i].schema, err, sizeof err);
        if (g) fail_msg("accepted %s", cases[i].schema);
        if (!strstr(err, cases[i].word)) fail_msg("'%s' does not name %s", err, cases[i].word);
    }
}


static void check_set(rf_grammar *g, const char *sc, const char *const *yes, size_t ny, const char *const *no, size_t nn) {
    for (size_t i = 0; i < ny; i++)
        if (!acc(g, yes[i])) fail_msg("%s rejected %s", sc, yes[i]);
    for (size_t i = 0; i < nn; i++)
        if (acc(g, no[i])) fail_msg("%s accepted %s", sc, no[i]);
}
#define CHECK(sc, yes, no)                                                                                             \
    do {                                                                                                               \
        char err_[256];                                                                                                \
        rf_grammar *g_ = schema(sc, err_, sizeof err_);                                                                \
        if (!g_) fail_msg("%s refused: %s", sc, err_);                                                                 \
        check_set(g_, sc, yes, sizeof yes / sizeof yes[0], no, sizeof no / sizeof no[0]);                             \
        rf_grammar_unref(g_);                                                                                          \
    } while (0)

/* pattern, format, min/maxLength, number bounds, $ref: each against texts in and out */
static void test_schema_keywords(void **state) {
    (void)state;
    {
        const char *y[] = {"\"ab-12\"", "\"AB-1234\""}, *n[] = {"\"ab-1\"", "\"ab12\"", "\"a1-12\"", "\"ab-12345\""};
        CHECK("{\"type\":\"string\",\"pattern\":\"^[a-zA-Z]{2}-\\\\d{2,4}$\"}", y, n);
    }
    {   /* unanchored: a search */
        const char *y[] = {"\"xx cat yy\"", "\"cat\"", "\"dog\""}, *n[] = {"\"ca t\"", "\"\""};
        CHECK("{\"type\":\"string\",\"pattern\":\"(cat|dog)\"}", y, n);
    }
    {
        const char *y[] = {"\"a\"", "\"abc\"", "\"\\u00e9x\""}, *n[] = {"\"\"", "\"abcd\""};
        CHECK("{\"type\":\"string\",\"minLength\":1,\"maxLength\":3}", y, n);
    }
    {
        const char *y[] = {"\"2024-02-28\"", "\"1999-12-31\"", "\"2000-04-30\""},
                   *n[] = {"\"2024-02-30\"", "\"2024-04-31\"", "\"2024-13-01\"", "\"24-01-01\"", "\"2024-1-01\""};
        CHECK("{\"type\":\"string\",\"format\":\"date\"}", y, n);
    }
    {
        const char *y[] = {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T23:59:59.123+05:30\""},
                   *n[] = {"\"2024-01-02T24:00:00Z\"", "\"2024-01-02 03:04:05Z\"", "\"2024-01-02T03:04:05\""};
        CHECK("{\"type\":\"string\",\"format\":\"date-time\"}", y, n);
    }
    {
        const char *y[] = {"\"123e4567-e89b-12d3-a456-426614174000\""}, *n[] = {"\"123e4567e89b12d3a456426614174000\"", "\"123E4567-e89b-12d3-a456-426614174000\""};
        CHECK("{\"type\":\"string\",\"format\":\"uuid\"}", y, n);
    }
    {
        const char *y[] = {"\"a.b+c@example.com\"", "\"x@y.co.uk\""}, *n[] = {"\"a@b\"", "\"@b.com\"", "\"a b@c.com\""};
        CHECK("{\"type\":\"string\",\"format\":\"email\"}", y, n);
    }
    {
        const char *y[] = {"\"12:00:00Z\"", "\"00:00:00-08:00\""}, *n[] = {"\"12:00\"", "\"12:60:00Z\""};
        CHECK("{\"type\":\"string\",\"format\":\"time\"}", y, n);
    }
    {
        const char *y[] = {"-17", "0", "5", "99", "100", "250"}, *n[] = {"-18", "251", "1000", "5.5", "-0", "007"};
        CHECK("{\"type\":\"integer\",\"minimum\":-17,\"maximum\":250}", y, n);
    }
    {
        const char *y[] = {"1", "9", "10", "123456"}, *n[] = {"0", "-1"};
        CHECK("{\"type\":\"integer\",\"exclusiveMinimum\":0}", y, n);
    }
    {
        const char *y[] = {"-1000", "-5", "-1"}, *n[] = {"0", "1"};
        CHECK("{\"type\":\"integer\",\"exclusiveMaximum\":0}", y, n);
    }
    {
        const char *y[] = {"0", "0.5", "0.25", "1", "-2", "-1.5", "-0.5"}, *n[] = {"1.5", "-2.5", "2", "-3", "1e0"};
        CHECK("{\"type\":\"number\",\"minimum\":-2,\"maximum\":1}", y, n);
    }
    {
        const char *y[] = {"3", "3.5", "4"}, *n[] = {"2.9", "2", "4.5", "5"};
        CHECK("{\"type\":\"number\",\"minimum\":2.5,\"exclusiveMaximum\":4.9}", y, n);
    }
    {   /* the generated range regex, exhaustively against arithmetic */
        char err[256], t[32];
        rf_grammar *g = schema("{\"type\":\"integer\",\"minimum\":-123,\"maximum\":4567}", err, sizeof err);
        assert_non_null(g);
        for (int v = -1200; v <= 12000; v++) {
            snprintf(t, sizeof t, "%d", v);
            if (acc(g, t) != (v >= -123 && v <= 4567)) fail_msg("%d", v);
        }
        rf_grammar_unref(g);
    }
    {
        const char *y[] = {"{\"a\":{\"x\":1},\"b\":{\"x\":2}}"}, *n[] = {"{\"a\":{\"x\":\"s\"},\"b\":{\"x\":2}}"};
        CHECK("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/p\"},\"b\":{\"$ref\":\"#/definitions/p\"}},"
              "\"required\":[\"a\",\"b\"],\"$defs\":{\"p\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},"
              "\"required\":[\"x\"]}},\"definitions\":{\"p\":{\"$ref\":\"#/$defs/p\"}}}",
              y, n);
    }
    {   /* recursive: a tree */
        const char *y[] = {"{\"v\":1,\"kids\":[]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[]}]}]}"},
                   *n[] = {"{\"v\":1,\"kids\":[{\"v\":2}]}", "{\"v\":1,\"kids\":[{\"v\":\"x\",\"kids\":[]}]}"};
        CHECK("{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
              "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\",\"kids\"],"
              "\"additionalProperties\":false}}}",
              y, n);
    }
}

static void test_tool_call_grammar(void **state) {
    (void)state;
    json_error_t je;
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
                               "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]",
                               0, &je);
    assert_non_null(tools);
    rf_grammar *g = NULL;
    char err[256];
    /* the Hermes form; every syntax's and the round trip through the parser: test_tool_grammar */
    srv_tool_grammar_opts o1 = {SRV_SYNTAX_HERMES, NULL, false, SRV_THINK_NONE, false}, many = o1;
    many.parallel = true;
    assert_int_equal(srv_tool_call_grammar(tools, &o1, &g, err, sizeof err), 0);
    const char *one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    assert_true(acc(g, one));
    assert_true(acc(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
    assert_false(acc(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
    assert_false(acc(g, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
    char two[512];
    snprintf(two, sizeof two, "%s\n%s", one, one);
    assert_false(acc(g, two)); /* parallel_tool_calls false */
    rf_grammar_unref(g);
    assert_int_equal(srv_tool_call_grammar(tools, &many, &g, err, sizeof err), 0);
    assert_true(acc(g, two));
    rf_grammar_unref(g);
    json_decref(tools);
    /* parameters outside the subset, failing after some rules were made: any object instead */
    tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                       "\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":3},\"b\":{\"$ref\":\"#/$defs/x\"}},"
                       "\"$defs\":{\"x\":{\"type\":\"string\",\"not\":{}}}}}}]", 0, NULL);
    assert_non_null(tools);
    assert_int_equal(srv_tool_call_grammar(tools, &o1, &g, err, sizeof err), 0);
    assert_true(acc(g, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"zz\": 1}}\n</tool_call>"));
    rf_grammar_unref(g);
    json_decref(tools);
}
#endif

/* The mask against the recognizer, token by token, along a path through the grammar. */
static void check_mask(const rf_vocab *v, rf_grammar *g, const char *path) {
    rf_gconstraint *c;
    rf_gmatch *m;
    assert_int_equal(rf_gconstraint_new(g, v, &c), RF_OK);
    int32_t nv = rf_vocab_n_tokens(v);
    int32_t *ids = malloc(4096 * sizeof(int32_t));
    size_t n_ids = 0;
    assert_int_equal(rf_tokenize(v, path, strlen(path), false, false, ids, 4096, &n_ids), RF_OK);
    assert_int_equal(rf_gmatch_new(g, &m), RF_OK);
    for (size_t k = 0; k <= n_ids; k++) {
        int32_t n_ok = 0, count = 0;
        const uint8_t *mask = rf_gconstraint_mask(c, &n_ok);
        /* every token: allowed iff the recognizer, from the same prefix, takes its bytes */
        for (int32_t id = 0; id < nv; id++) {
            char buf[256];
            size_t len = 0;
            bool allowed = (mask[id >> 3] >> (id & 7)) & 1;
            bool want;
            if (rf_vocab_is_eog(v, id)) want = rf_gmatch_accepting(m);
            else if (rf_token_to_piece(v, id, false, buf, sizeof buf, &len) || len == 0 || len > 128) want = false;
            else want = rf_gmatch_check(m, buf, len);
            if (allowed != want) fail_msg("step %zu token %d: mask %d, recognizer %d", k, id, allowed, want);
            count += allowed;
        }
        assert_int_equal(count, n_ok);
        assert_true(n_ok > 0);
        (void)count;
        if (k < n_ids) {
            if (!((mask[ids[k] >> 3] >> (ids[k] & 7)) & 1)) fail_msg("step %zu: the path's token %d is masked", k, ids[k]);
            assert_true(rf_gconstraint_accept(c, ids[k]));
            char buf[256];
            size_t len = 0;
            rf_token_to_piece(v, ids[k], false, buf, sizeof buf, &len);
            assert_true(rf_gmatch_feed(m, buf, len));
        }
    }
    assert_true(rf_gmatch_accepting(m)); /* the path is a sentence: EOG was allowed at its end */
    rf_gmatch_free(m);
    free(ids);
    rf_gconstraint_free(c);
}


/* The fast path (loop tables) against the whole-vocabulary walk, bit for bit, with no cache on
 * either side: along `path` (tokenized) when walk_seed is 0, else along a walk that draws each
 * next token from the mask (seeded, favouring long tokens so strings fill with text). */
static void check_fast(const rf_vocab *v, rf_grammar *g, const char *path, uint32_t walk_seed, int steps, int64_t *n_fast) {
    rf_gconstraint *f, *r;
    assert_int_equal(rf_gconstraint_new(g, v, &f), RF_OK);
    assert_int_equal(rf_gconstraint_new(g, v, &r), RF_OK);
    rf_gconstraint_set_mode(f, RF_GMASK_NO_CACHE);
    rf_gconstraint_set_mode(r, RF_GMASK_NO_CACHE | RF_GMASK_NO_FAST);
    int32_t nv = rf_vocab_n_tokens(v), mb = (nv + 7) / 8;
    int32_t *ids = malloc(4096 * sizeof(int32_t));
    uint8_t *fm = malloc((size_t)mb);
    size_t n_ids = 0;
    if (!walk_seed) assert_int_equal(rf_tokenize(v, path, strlen(path), false, false, ids, 4096, &n_ids), RF_OK);
    else n_ids = (size_t)steps;
    uint32_t x = walk_seed;
    for (size_t k = 0; k < n_ids; k++) {
        int32_t nf = 0, nr = 0;
        memcpy(fm, rf_gconstraint_mask(f, &nf), (size_t)mb);
        const uint8_t *rm = rf_gconstraint_mask(r, &nr);
        if (memcmp(fm, rm, (size_t)mb)) {
            int32_t id = 0;
            while (((fm[id >> 3] ^ rm[id >> 3]) >> (id & 7) & 1) == 0) id++;
            fail_msg("step %zu: token %d fast %d, reference %d", k, id, (fm[id >> 3] >> (id & 7)) & 1, (rm[id >> 3] >> (id & 7)) & 1);
        }
        assert_int_equal(nf, nr);
        int32_t id = ids[k];
        if (walk_seed) { /* the longest of 8 drawn allowed tokens that is not end-of-generation */
            if (nr == 0) break;
            id = -1;
            size_t best = 0;
            for (int tries = 0; tries < 4000 && best < 8; tries++) {
                x = x * 1664525u + 1013904223u;
                int32_t t = (int32_t)((x >> 8) % (uint32_t)nv);
                char buf[256];
                size_t len = 0;
                if (!((rm[t >> 3] >> (t & 7)) & 1) || rf_vocab_is_eog(v, t)) continue;
                if (rf_token_to_piece(v, t, false, buf, sizeof buf, &len) || len <= best) continue;
                best = len;
                id = t;
            }
            if (id < 0) break; /* only end-of-generation left (or a rare draw): the walk is over */
        }
        assert_true(rf_gconstraint_accept(f, id));
        assert_true(rf_gconstraint_accept(r, id));
    }
    int64_t walks, fast;
    rf_gconstraint_stats(f, &walks, &fast);
    *n_fast += fast;
    free(fm);
    free(ids);
    rf_gconstraint_free(f);
    rf_gconstraint_free(r);
}

static void test_mask_smollm2(void **state) {
    (void)state;
    char path[1200];
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", RF_SOURCE_DIR);
    if (access(path, R_OK)) skip();
    rf_gguf *gf;
    rf_vocab *v;
    assert_int_equal(rf_gguf_open(path, &gf), RF_OK);
    assert_int_equal(rf_vocab_load(gf, &v), RF_OK);
    rf_grammar *g = NULL;
    const char *src = "root ::= \"{\" ws \"\\\"a\\\"\" ws \":\" ws [0-9]+ ws \"}\"\nws ::= [ \\n]?\n";
    assert_int_equal(rf_grammar_parse_gbnf(src, strlen(src), &g), RF_OK);
    check_mask(v, g, "{\"a\": 123 }");
    rf_grammar_unref(g);
    /* control tokens: never allowed, unless the grammar matches them by their text (tool calls
     * whose markers are control tokens); end-of-generation ones only where the grammar may end */
    int32_t im_start = -1, im_end = -1, nv = rf_vocab_n_tokens(v);
    for (int32_t id = 0; id < nv; id++) {
        const char *t = rf_vocab_token_text(v, id);
        if (t && !strcmp(t, "<|im_start|>")) im_start = id;
        if (t && !strcmp(t, "<|im_end|>")) im_end = id;
    }
    assert_true(im_start >= 0 && im_end >= 0 && rf_vocab_is_eog(v, im_end));
    const char *ctl = "root ::= \"<|im_start|>\" [a-z] | \"<|im_end|>x\"\n";
    for (int on = 0; on < 2; on++) {
        assert_int_equal(rf_grammar_parse_gbnf(ctl, strlen(ctl), &g), RF_OK);
        rf_grammar_set_control_text(g, on);
        rf_gconstraint *c;
        assert_int_equal(rf_gconstraint_new(g, v, &c), RF_OK);
        int32_t n = 0;
        const uint8_t *mk = rf_gconstraint_mask(c, &n);
        assert_int_equal((mk[im_start >> 3] >> (im_start & 7)) & 1, on);
        assert_int_equal((mk[im_end >> 3] >> (im_end & 7)) & 1, 0);
        if (on) assert_true(rf_gconstraint_accept(c, im_start)); /* its text taken: "<|im_start|>" */
        rf_gconstraint_free(c);
        rf_grammar_unref(g);
    }
#ifdef RF_HAVE_SERVER
    char err[256];
    g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},\"required\":[\"name\"]}",
               err, sizeof err);
    assert_non_null(g);
    check_mask(v, g, "{\"name\": \"Zoë said \\\"hi\\\"\", \"n\": -42}");
    int64_t n_fast = 0;
    check_fast(v, g, "{\"name\": \"Zoë said \\\"hi\\\" \\u00e9t\\u00E9 \\\\ \\/ ok\", \"n\": 7}", 0, 0, &n_fast);
    for (uint32_t seed = 1; seed <= 6; seed++) check_fast(v, g, NULL, seed, 40, &n_fast);
    rf_grammar_unref(g);
    /* an object holding an array of strings (the cost measurement's, docs/PERFORMANCE.md) and
     * any JSON object: strings at several depths, numbers, keys */
    g = schema("{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
               "\"required\":[\"items\"]}", err, sizeof err);
    assert_non_null(g);
    check_fast(v, g, "{\"items\": [\"first one\", \"zwei \\\"drei\\\"\", \"\", \"emoji \xf0\x9f\x98\x80 ok\"]}", 0, 0, &n_fast);
    for (uint32_t seed = 7; seed <= 10; seed++) check_fast(v, g, NULL, seed, 40, &n_fast);
    rf_grammar_unref(g);
    g = schema(NULL, err, sizeof err);
    assert_non_null(g);
    for (uint32_t seed = 11; seed <= 14; seed++) check_fast(v, g, NULL, seed, 40, &n_fast);
    rf_grammar_unref(g);
    /* a bounded string (no self-loop: the interned walk of the whole trie) and bounded numbers */
    g = schema("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":6},"
               "\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":300}},\"required\":[\"s\",\"n\"]}", err, sizeof err);
    assert_non_null(g);
    check_fast(v, g, "{\"s\": \"ab\\\"\u00e9z\", \"n\": 299}", 0, 0, &n_fast);
    check_fast(v, g, NULL, 15, 30, &n_fast);
    rf_grammar_unref(g);
    assert_true(n_fast > 20); /* the fast path was taken, not only the reference on both sides */
#endif
    rf_vocab_free(v);
    rf_gguf_close(gf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gbnf),
#ifdef RF_HAVE_SERVER
        cmocka_unit_test(test_json_object),
        cmocka_unit_test(test_json_schema),
        cmocka_unit_test(test_schema_refused),
        cmocka_unit_test(test_schema_keywords),
        cmocka_unit_test(test_tool_call_grammar),
#endif
        cmocka_unit_test(test_mask_smollm2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
