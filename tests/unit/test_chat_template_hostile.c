/* test_chat_template_hostile.c — malformed and hostile chat templates: every one must end in
 * an rf_status with a message (line:column for parse errors), never a crash, a hang or an
 * unbounded allocation. Includes seeded random mutations of the official templates. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja.h"

/* renders src with small limits; returns the status, *out freed */
static rf_status render_small(const char *src, const char *vars_json) {
    rf_jinja *j = NULL;
    rf_status st = rf_jinja_parse(src, strlen(src), &j);
    if (st) return st;
    json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : json_object();
    rf_jinja_limits lim = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .max_depth = 32};
    char *out = NULL;
    size_t n;
    st = rf_jinja_render(j, vars, &lim, 1, &out, &n);
    if (st) assert_null(out);
    free(out);
    json_decref(vars);
    rf_jinja_free(j);
    return st;
}

static void expect_parse_error(const char *src, rf_status want, const char *pos, const char *what) {
    rf_chat_template *t = (rf_chat_template *)0x1;
    rf_status st = rf_chat_template_parse(src, &t);
    if (st != want || !strstr(rf_last_error(), pos) || !strstr(rf_last_error(), what))
        fprintf(stderr, "template %s\n  got %s: %s\n  want %s with '%s' and '%s'\n", src, rf_status_str(st),
                rf_last_error(), rf_status_str(want), pos, what);
    assert_int_equal(st, want);
    assert_null(t);
    assert_non_null(strstr(rf_last_error(), pos));
    assert_non_null(strstr(rf_last_error(), what));
}

static void test_parse_errors_name_position(void **state) {
    (void)state;
    expect_parse_error("ok\n  {{ x | frobnicate }}", RF_ERR_UNSUPPORTED, "2:10", "unsupported filter 'frobnicate'");
    expect_parse_error("{% if x is weird %}{% endif %}", RF_ERR_UNSUPPORTED, "1:12", "unsupported test 'weird'");
    expect_parse_error("{{ 'a'.zfill(3) }}", RF_ERR_UNSUPPORTED, "1:8", "unsupported method 'zfill()'");
    expect_parse_error("\n\n{{ lipsum(2) }}", RF_ERR_UNSUPPORTED, "3:4", "unsupported function 'lipsum()'");
    expect_parse_error("{% extends 'base' %}", RF_ERR_UNSUPPORTED, "1:4", "unsupported tag 'extends'");
    expect_parse_error("{% for x in y recursive %}{% endfor %}", RF_ERR_UNSUPPORTED, "1:15", "recursive");
    expect_parse_error("{% if x %}never closed", RF_ERR_FORMAT, "1:", "expected 'elif'");
    expect_parse_error("{{ 'unterminated }}", RF_ERR_FORMAT, "1:4", "unterminated string");
    expect_parse_error("{{ x ", RF_ERR_FORMAT, "1:", "unexpected end of template");
    expect_parse_error("{% endif %}", RF_ERR_UNSUPPORTED, "1:4", "unsupported tag 'endif'");
    expect_parse_error("{{ (1 + 2 }}", RF_ERR_FORMAT, "1:", "expected ')'");
    expect_parse_error("{{ a ]] }}", RF_ERR_FORMAT, "1:6", "unexpected ']'");
    expect_parse_error("{# never closed", RF_ERR_FORMAT, "1:1", "missing end of comment");
    expect_parse_error("{{ f(*args) }}", RF_ERR_UNSUPPORTED, "1:", "*args");
    expect_parse_error("{% macro m() %}{% endmacro %}{{ m()() }}", RF_ERR_UNSUPPORTED, "1:", "call of an expression");
}

static void test_raise_exception_status(void **state) {
    (void)state;
    rf_chat_template *t;
    assert_int_equal(rf_chat_template_parse("a{{ raise_exception('Bad \"role\" ' ~ messages[0].role) }}b", &t), RF_OK);
    rf_chat_msg m[1] = {{"robot", "x"}};
    char *out = (char *)"poison";
    assert_int_equal(rf_chat_template_render(t, m, 1, false, NULL, NULL, &out), RF_ERR_FORMAT);
    assert_null(out);
    assert_string_equal(rf_last_error(), "Bad \"role\" robot");
    assert_true(rf_chat_last_error_raised());
    rf_chat_template_free(t);
    /* other render errors are not "raised" and name the position */
    assert_int_equal(rf_chat_template_parse("\n  {{ 'a' + 1 }}", &t), RF_OK);
    assert_int_equal(rf_chat_template_render(t, m, 1, false, NULL, NULL, &out), RF_ERR_TYPE);
    assert_false(rf_chat_last_error_raised());
    assert_non_null(strstr(rf_last_error(), "2:10"));
    rf_chat_template_free(t);
    /* bad JSON in the extended API names the field */
    assert_int_equal(rf_chat_template_parse("no content here", &t), RF_OK);
    rf_chat_render_opts o = {0};
    o.tools_json = "[{\"a\": }]";
    assert_int_equal(rf_chat_template_render_ex(t, m, 1, &o, &out), RF_ERR_INVALID_ARG);
    assert_non_null(strstr(rf_last_error(), "tools"));
    o.tools_json = NULL;
    o.add_generation_prompt = o.continue_final_message = true;
    assert_int_equal(rf_chat_template_render_ex(t, m, 1, &o, &out), RF_ERR_INVALID_ARG);
    assert_non_null(strstr(rf_last_error(), "continue_final_message"));
    o.add_generation_prompt = false; /* the rendered text does not contain the content "x" */
    assert_int_equal(rf_chat_template_render_ex(t, m, 1, &o, &out), RF_ERR_FORMAT);
    assert_null(out);
    o.continue_final_message = false;
    o.messages_json = "{\"role\": \"user\"}";
    assert_int_equal(rf_chat_template_render_ex(t, NULL, 0, &o, &out), RF_ERR_INVALID_ARG);
    assert_non_null(strstr(rf_last_error(), "messages"));
    rf_chat_template_free(t);
}

static void test_limits(void **state) {
    (void)state;
    struct { const char *name, *src; } cases[] = {
        {"macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"},
        {"huge range", "{% for i in range(1000000000000) %}x{% endfor %}"},
        {"nested loops", "{% for a in range(5000) %}{% for b in range(5000) %}{% endfor %}{% endfor %}"},
        {"output size", "{% for i in range(100000) %}0123456789abcdefghij{% endfor %}"},
        {"string doubling", "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}"},
        {"repetition", "{{ 'x' * 100000000000 }}"},
        {"list repetition", "{{ ([1, 2] * 100000000000) | length }}"},
        {"self-referencing namespace", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"},
        {"deep value", "{% set ns = namespace(x=1) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"},
        {"deep value compare", "{% set ns = namespace(x=1, y=2) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% set ns.y = [ns.y] %}{% endfor %}{{ ns.x < ns.y }}"},
        {"sort bomb", "{{ range(100000) | reverse | sort | first }}"},
        {"integer overflow", "{{ 9223372036854775807 + 1 }}"},
        {"power overflow", "{{ 3 ** 1000 }}"},
        {"division by zero", "{{ 1 // 0 }}"},
        {"from_json invalid", "{{ ('[' * 5000) | from_json }}"},
        {"from_json deep", "{{ (('[' * 300) ~ (']' * 300)) | from_json }}"},
        {"replace bomb", "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s.replace('', ns.s) %}{% endfor %}"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        clock_t t0 = clock();
        rf_status st = render_small(cases[k].src, NULL);
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        printf("  %-28s -> %s (%.2fs): %s\n", cases[k].name, rf_status_str(st), secs, rf_last_error());
        assert_int_not_equal(st, RF_OK);
        assert_true(secs < 10.0);
    }
    /* a long left-deep expression chain: parses, then the evaluation depth guard stops it */
    size_t n = 20000;
    char *chain = malloc(n * 4 + 32);
    size_t cl = (size_t)sprintf(chain, "{{ 'a'");
    for (size_t k = 0; k < n; k++) cl += (size_t)sprintf(chain + cl, " ~ 1");
    sprintf(chain + cl, " }}");
    rf_status st = render_small(chain, NULL);
    printf("  %-28s -> %s: %s\n", "20000-term chain", rf_status_str(st), rf_last_error());
    assert_int_equal(st, RF_ERR_RANGE);
    free(chain);
    /* deep nesting of parentheses, lists, ifs and nots: parse-time depth limit */
    const char *open[] = {"(", "[", "{% if 1 %}", "not "};
    const char *close[] = {")", "]", "{% endif %}", ""};
    for (int kind = 0; kind < 4; kind++) {
        size_t depth = 5000;
        size_t cap = depth * (strlen(open[kind]) + strlen(close[kind])) + 64;
        char *s = malloc(cap);
        s[0] = 0;
        size_t o = 0;
        if (kind != 2) o += (size_t)sprintf(s + o, "{{ ");
        for (size_t k = 0; k < depth; k++) o += (size_t)sprintf(s + o, "%s", open[kind]);
        o += (size_t)sprintf(s + o, "%s", kind == 2 ? "x" : "1");
        for (size_t k = 0; k < depth; k++) o += (size_t)sprintf(s + o, "%s", close[kind]);
        if (kind != 2) sprintf(s + o, " }}");
        rf_chat_template *t = NULL;
        st = rf_chat_template_parse(s, &t);
        printf("  depth 5000 of %-14s -> %s: %s\n", open[kind], rf_status_str(st), rf_last_error());
        assert_int_equal(st, RF_ERR_RANGE);
        assert_null(t);
        free(s);
    }
    /* deeply nested input JSON */
    size_t d = 1000;
    char *js = malloc(d * 2 + 64);
    size_t o = (size_t)sprintf(js, "{\"x\": ");
    for (size_t k = 0; k < d; k++) js[o++] = '[';
    for (size_t k = 0; k < d; k++) js[o++] = ']';
    sprintf(js + o, "}");
    st = render_small("{{ x | length }}", js);
    printf("  %-28s -> %s: %s\n", "1000-deep input JSON", rf_status_str(st), rf_last_error());
    assert_int_not_equal(st, RF_OK);
    free(js);
}

/* Random byte-level mutations of the official templates: parse and render must return
 * (any status) without crashing; run under ASan via `make test-asan`. */
static void test_mutations(void **state) {
    (void)state;
    static const char *const names[] = {
        "meta-llama-Llama-3.1-8B-Instruct.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja", "google-gemma-3-it.jinja",
        "HuggingFaceTB-SmolLM3-3B.jinja", "microsoft-Phi-3.5-mini-instruct.jinja"};
    static const char *const frags[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[", "]",
                                        "'", "\"", "|", ".", ",", ":", "~", " if ", " else ", "\\",
                                        "{% endfor %}", "{% endif %}", "loop.", "ns.", "\n"};
    const char *vars = "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
                       "\"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": "
                       "[{\"id\": \"abcdefghi\", \"function\": {\"name\": \"f\", \"arguments\": {\"k\": 1}}}]}], "
                       "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
                       "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";
    rf_rng rng;
    uint64_t seed = rf_test_seed();
    rf_rng_init(&rng, seed);
    int parsed = 0, rendered = 0, total = 0;
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        char rel[256];
        snprintf(rel, sizeof rel, "chat/%s", names[t]);
        size_t len;
        char *src = rf_test_read_file(rf_test_data(rel), &len);
        assert_non_null(src);
        for (int it = 0; it < 150; it++) {
            char *m = malloc(len + 64 * 16 + 1);
            memcpy(m, src, len + 1);
            size_t ml = len;
            int edits = 1 + (int)(rf_rng_u64(&rng) % 4);
            for (int e = 0; e < edits; e++) {
                size_t at = ml ? (size_t)(rf_rng_u64(&rng) % ml) : 0;
                int op = (int)(rf_rng_u64(&rng) % 3);
                if (op == 0 && ml > 0) { /* delete a run */
                    size_t dl = 1 + (size_t)(rf_rng_u64(&rng) % 8);
                    if (at + dl > ml) dl = ml - at;
                    memmove(m + at, m + at + dl, ml - at - dl + 1);
                    ml -= dl;
                } else if (op == 1) { /* insert a fragment */
                    const char *f = frags[rf_rng_u64(&rng) % (sizeof frags / sizeof frags[0])];
                    size_t fl = strlen(f);
                    memmove(m + at + fl, m + at, ml - at + 1);
                    memcpy(m + at, f, fl);
                    ml += fl;
                } else if (ml > 0) { /* replace a byte */
                    m[at] = (char)(rf_rng_u64(&rng) % 255 + 1);
                }
            }
            rf_jinja *j = NULL;
            total++;
            if (rf_jinja_parse(m, ml, &j) == RF_OK) {
                parsed++;
                json_t *v = json_loads(vars, 0, NULL);
                rf_jinja_limits lim = {.max_steps = 100000, .max_output = 1 << 20, .max_memory = 32 << 20};
                char *out = NULL;
                size_t n;
                if (rf_jinja_render(j, v, &lim, 1, &out, &n) == RF_OK) rendered++;
                free(out);
                json_decref(v);
                rf_jinja_free(j);
            }
            free(m);
        }
        free(src);
    }
    printf("mutations (seed %llu): %d total, %d parsed, %d rendered; none crashed\n",
           (unsigned long long)seed, total, parsed, rendered);
    assert_true(parsed > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors_name_position),
        cmocka_unit_test(test_raise_exception_status),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
