/* test_tool_grammar.c — the grammars that enforce tool_choice "required" / a named function
 * (src/server/tool_grammar.c, srv_tool_grammar) against the parser (srv_chat_parse), per syntax
 * (Hermes, Llama 3.x JSON, Mistral's two forms, harmony) and reasoning shape (none, an optional
 * <think> block, a block the prompt opened): every text the grammar admits here parses into
 * exactly the calls written (the round trip), and calls to other functions, plain answers,
 * arguments outside the schema, a second call without parallel_tool_calls are refused. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RF_HAVE_SERVER
#include "server/oai.h"
#include "server/tool_calls.h"
#include "server/tool_grammar.h"

#include "../fuzz/fuzz_tool_walk_body.h"

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]";

/* One call of each syntax: [0] get_weather(Paris), [1] get_time(), [2] nope() (not offered),
 * [3] get_weather() (its required city missing); sep joins parallel calls. */
typedef struct form {
    srv_tool_syntax syn;
    const char *name;
    const char *call[4];
    const char *sep;
} form;

static const form FORMS[] = {
    {SRV_SYNTAX_HERMES, "hermes",
     {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"},
     "\n"},
    {SRV_SYNTAX_NONE, "none (read as hermes)",
     {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"},
     "\n"},
    {SRV_SYNTAX_LLAMA3, "llama3",
     {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "{\"name\": \"get_time\", \"parameters\": {}}",
      "{\"name\": \"nope\", \"parameters\": {}}", "{\"name\": \"get_weather\", \"parameters\": {}}"},
     "; "},
    {SRV_SYNTAX_MISTRAL, "mistral (list)",
     {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
      "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]", "[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}}]",
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]"},
     NULL},
    {SRV_SYNTAX_MISTRAL, "mistral (bare)",
     {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "[TOOL_CALLS]get_time[ARGS]{}", "[TOOL_CALLS]nope[ARGS]{}",
      "[TOOL_CALLS]get_weather[ARGS]{}"},
     ""},
    {SRV_SYNTAX_HARMONY, "harmony",
     {"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
      "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}",
      "<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}",
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}"},
     NULL},
};

static rf_grammar *build(const form *f, const char *only, bool parallel, srv_think_shape think) {
    json_t *tools = json_loads(TOOLS, 0, NULL);
    assert_non_null(tools);
    srv_tool_grammar_opts o = {f->syn, only, parallel, think, false};
    rf_grammar *g = NULL;
    char err[256];
    int r = srv_tool_call_grammar(tools, &o, &g, err, sizeof err);
    json_decref(tools);
    if (r) fail_msg("%s: %s", f->name, err);
    return g;
}

static bool acc(rf_grammar *g, const char *s) { return rf_grammar_accepts(g, s, strlen(s)); }

static bool json_text_eq(const char *a, const char *b) {
    json_t *x = json_loads(a, 0, NULL), *y = json_loads(b, 0, NULL);
    bool eq = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

/* The parser's reading of text: exactly these calls (names, arguments as JSON), no content, and
 * the reasoning (NULL: none). */
static void parses_to(const form *f, const char *text, bool think_open, bool parallel, int n, const char *const *names,
                      const char *const *args, const char *reasoning) {
    srv_parse_cfg cfg = {0};
    cfg.syntax = f->syn;
    cfg.tools = true;
    cfg.reasoning = true;
    cfg.think_open = think_open;
    cfg.parallel = parallel;
    srv_chat_out o = {0};
    assert_int_equal(srv_chat_parse(&cfg, text, strlen(text), true, &o), 0);
    if ((int)o.n_calls != n || o.content.len)
        fail_msg("%s: %zu calls (want %d), content '%s' from:\n%s", f->name, o.n_calls, n, o.content.p ? o.content.p : "", text);
    for (int i = 0; i < n; i++) {
        assert_string_equal(o.calls[i].name, names[i]);
        if (!json_text_eq(o.calls[i].arguments, args[i])) fail_msg("%s: arguments %s, want %s", f->name, o.calls[i].arguments, args[i]);
    }
    if (reasoning) assert_string_equal(o.reasoning.p ? o.reasoning.p : "", reasoning);
    else assert_int_equal(o.reasoning.len, 0);
    srv_chat_out_free(&o);
}

static const char *const W[] = {"get_weather", "get_time"}, *const WA[] = {"{\"city\":\"Paris\"}", "{}"};

/* One call, per syntax: accepted and parsed back (with and without parallel); the refusals. */
static void test_one_call(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof FORMS / sizeof FORMS[0]; i++) {
        const form *f = &FORMS[i];
        for (int par = 0; par < 2; par++) {
            rf_grammar *g = build(f, NULL, par, SRV_THINK_NONE);
            for (int k = 0; k < 2; k++) {
                if (!acc(g, f->call[k])) fail_msg("%s refused %s", f->name, f->call[k]);
                parses_to(f, f->call[k], false, par, 1, W + k, WA + k, NULL);
                char tail[512];
                snprintf(tail, sizeof tail, "%s\n", f->call[k]); /* trailing whitespace: still the call */
                assert_true(acc(g, tail));
                parses_to(f, tail, false, par, 1, W + k, WA + k, NULL);
            }
            assert_false(acc(g, f->call[2]));  /* a function not offered */
            assert_false(acc(g, f->call[3]));  /* arguments outside the schema */
            assert_false(acc(g, "It is sunny in Paris."));
            assert_false(acc(g, ""));
            char pre[512];
            snprintf(pre, sizeof pre, "Sure. %s", f->call[0]); /* text before the call */
            assert_false(acc(g, pre));
            snprintf(pre, sizeof pre, "<think>hm</think>%s", f->call[0]); /* no think block asked for */
            assert_false(acc(g, pre));
            rf_grammar_unref(g);
        }
    }
}

/* A named tool_choice: only that function. */
static void test_named(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof FORMS / sizeof FORMS[0]; i++) {
        const form *f = &FORMS[i];
        rf_grammar *g = build(f, "get_time", true, SRV_THINK_NONE);
        assert_true(acc(g, f->call[1]));
        assert_false(acc(g, f->call[0]));
        assert_false(acc(g, f->call[2]));
        rf_grammar_unref(g);
    }
    json_t *tools = json_loads(TOOLS, 0, NULL);
    srv_tool_grammar_opts o = {SRV_SYNTAX_LLAMA3, "nope", false, SRV_THINK_NONE, false};
    rf_grammar *g = NULL;
    char err[256];
    assert_int_equal(srv_tool_call_grammar(tools, &o, &g, err, sizeof err), -1);
    assert_null(g);
    assert_non_null(strstr(err, "no tool"));
    json_decref(tools);
}

/* Two calls: admitted only with parallel_tool_calls, parsed back as two (harmony: one call a turn). */
static void test_parallel(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof FORMS / sizeof FORMS[0]; i++) {
        const form *f = &FORMS[i];
        char two[1024];
        if (f->sep) snprintf(two, sizeof two, "%s%s%s", f->call[0], f->sep, f->call[1]);
        else if (f->syn == SRV_SYNTAX_MISTRAL)
            snprintf(two, sizeof two, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                                      "{\"name\": \"get_time\", \"arguments\": {}}]");
        else snprintf(two, sizeof two, "%s%s", f->call[0], f->call[1]);
        rf_grammar *one = build(f, NULL, false, SRV_THINK_NONE), *many = build(f, NULL, true, SRV_THINK_NONE);
        assert_false(acc(one, two));
        if (f->syn == SRV_SYNTAX_HARMONY) {
            assert_false(acc(many, two));
        } else {
            if (!acc(many, two)) fail_msg("%s refused two calls:\n%s", f->name, two);
            parses_to(f, two, false, true, 2, W, WA, NULL);
        }
        rf_grammar_unref(one);
        rf_grammar_unref(many);
    }
}

/* Reasoning first: a <think> block (optional, or opened by the prompt) whose text may hold
 * anything but its closing marker; harmony's analysis message. */
static void test_think(void **state) {
    (void)state;
    static const char *const TEXTS[] = {"Let me check.", "a < b, </thin k>, <think> [TOOL_CALLS] <tool_call> {\"name\": 1}",
                                        "caf\xc3\xa9 \xe2\x9c\x93\n\nmore"};
    for (size_t i = 0; i < sizeof FORMS / sizeof FORMS[0]; i++) {
        const form *f = &FORMS[i];
        char t[1024];
        if (f->syn == SRV_SYNTAX_HARMONY) {
            rf_grammar *g = build(f, NULL, true, SRV_THINK_NONE);
            for (size_t k = 0; k < 2; k++) {
                snprintf(t, sizeof t, "<|channel|>analysis<|message|>%s<|end|><|start|>assistant%s", TEXTS[k == 0 ? 0 : 2], f->call[0]);
                if (!acc(g, t)) fail_msg("harmony refused:\n%s", t);
                parses_to(f, t, false, true, 1, W, WA, TEXTS[k == 0 ? 0 : 2]);
            }
            snprintf(t, sizeof t, "<|channel|>analysis<|message|>a <|end|> b<|end|><|start|>assistant%s", f->call[0]);
            assert_false(acc(g, t));
            snprintf(t, sizeof t, "<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|channel|>final<|message|>Hi");
            assert_false(acc(g, t));
            rf_grammar_unref(g);
            continue;
        }
        rf_grammar *opt = build(f, NULL, true, SRV_THINK_OPTIONAL), *open = build(f, NULL, true, SRV_THINK_OPEN);
        assert_true(acc(opt, f->call[0])); /* optional */
        parses_to(f, f->call[0], false, true, 1, W, WA, NULL);
        assert_false(acc(open, f->call[0])); /* the prompt opened it: it must close */
        for (size_t k = 0; k < sizeof TEXTS / sizeof TEXTS[0]; k++) {
            snprintf(t, sizeof t, "<think>\n%s\n</think>\n\n%s", TEXTS[k], f->call[0]);
            if (!acc(opt, t)) fail_msg("%s refused:\n%s", f->name, t);
            parses_to(f, t, false, true, 1, W, WA, TEXTS[k]);
            snprintf(t, sizeof t, "%s\n</think>\n\n%s", TEXTS[k], f->call[1]);
            if (!acc(open, t)) fail_msg("%s refused (open):\n%s", f->name, t);
            parses_to(f, t, true, true, 1, W + 1, WA + 1, TEXTS[k]);
        }
        snprintf(t, sizeof t, "<think>a</think>b</think>%s", f->call[0]); /* text after the block */
        assert_false(acc(opt, t));
        snprintf(t, sizeof t, "<think>a</think>%s", f->call[2]);
        assert_false(acc(opt, t));
        assert_false(acc(opt, "<think>a</think>It is sunny."));
        assert_false(acc(open, "a</think>It is sunny."));
        rf_grammar_unref(opt);
        rf_grammar_unref(open);
    }
}

/* srv_tool_grammar: which requests get a grammar, and that it is the syntax's. */
static void test_request(void **state) {
    (void)state;
    srv_params p;
    memset(&p, 0, sizeof p);
    p.tools_json = (char *)TOOLS;
    p.parse_output = true;
    p.parallel_tool_calls = true;
    p.reasoning_split = true;
    srv_error e = {0};
    rf_grammar *g = NULL;
    for (size_t i = 0; i < sizeof FORMS / sizeof FORMS[0]; i++) {
        p.syntax = FORMS[i].syn;
        p.tool_choice = SRV_TOOL_CHOICE_AUTO;
        assert_int_equal(srv_tool_grammar(&p, &g, &e), 0);
        assert_null(g);
        p.tool_choice = SRV_TOOL_CHOICE_REQUIRED;
        assert_int_equal(srv_tool_grammar(&p, &g, &e), 0);
        if (!g) fail_msg("%s: tool_choice required not enforced", FORMS[i].name);
        assert_true(acc(g, FORMS[i].call[0]));
        assert_false(acc(g, "It is sunny."));
        rf_grammar_unref(g);
        /* a prompt that opened <think> */
        p.think_open = true;
        assert_int_equal(srv_tool_grammar(&p, &g, &e), 0);
        assert_non_null(g);
        char t[512];
        snprintf(t, sizeof t, "hm</think>\n%s", FORMS[i].call[0]);
        assert_true(acc(g, FORMS[i].syn == SRV_SYNTAX_HARMONY ? FORMS[i].call[0] : t));
        rf_grammar_unref(g);
        p.think_open = false;
        /* a template whose answers may open with <think> */
        p.thinks = true;
        assert_int_equal(srv_tool_grammar(&p, &g, &e), 0);
        snprintf(t, sizeof t, "<think>hm</think>\n%s", FORMS[i].call[0]);
        assert_true(acc(g, FORMS[i].syn == SRV_SYNTAX_HARMONY ? FORMS[i].call[0] : t));
        assert_true(acc(g, FORMS[i].call[0]));
        rf_grammar_unref(g);
        p.thinks = false;
    }
    /* not parsed (a model without a template): nothing to enforce it against */
    p.parse_output = false;
    assert_int_equal(srv_tool_grammar(&p, &g, &e), 0);
    assert_null(g);
}

/* The round trip beyond the written examples: for every case of fuzz_tool_walk_body.h (syntax,
 * reasoning shape, parallel, named, tool list) random texts the grammar admits, walked from a
 * seeded generator (rf_test_seed: a failure replays with RF_TEST_SEED), each parsed into calls
 * only and streamed in random pieces that add up to the final parse (rf_tw_check). */
static uint8_t rng_byte(void *user) { return (uint8_t)(rf_rng_u64((rf_rng *)user) >> 56); }

static void test_walks(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    rf_tw_src src = {.next = rng_byte, .user = &r};
    int whole = 0, tried = 0;
    long longest = 0;
    for (int b = 0; b < 256; b++) {
        if ((b >> 6) & 1) continue; /* bit 6 is unused: the same cases again */
        for (int w = 0; w < 6; w++, tried++) {
            const long n = rf_tw_case((uint8_t)b, &src);
            whole += n >= 0;
            if (n > longest) longest = n;
        }
    }
    printf("  %d of %d walks whole (longest %ld bytes; RF_TW_CAP %u), each parsed and streamed back\n", whole, tried,
           longest, RF_TW_CAP);
    assert_int_equal(whole, tried); /* every walk finishes within RF_TW_CAP (the bound's model) */
}
#endif

int main(void) {
#ifdef RF_HAVE_SERVER
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_call), cmocka_unit_test(test_named), cmocka_unit_test(test_parallel),
        cmocka_unit_test(test_think), cmocka_unit_test(test_request), cmocka_unit_test(test_walks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    printf("built without the server; skipping\n");
    return 77;
#endif
}
