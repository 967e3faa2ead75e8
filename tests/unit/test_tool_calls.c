/* test_tool_calls.c — the answer parsers of `rocmforge serve` (src/server/tool_calls.c,
 * reasoning.c) against answers as each family's documentation shows them (Qwen's function-calling
 * guide, Meta's Llama 3.1/3.2 prompt-format page, Mistral's tokenizer docs, OpenAI's harmony
 * guide), plus malformed and truncated ones; and the streaming property: fed byte by byte, the
 * deltas add up to exactly the final parse (what a stream sends is never taken back). */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RF_HAVE_SERVER
#include "server/tool_calls.h"

typedef struct want {
    const char *reasoning; /* NULL: none */
    const char *content;
    int n_calls;
    const char *names[3];
    const char *args[3]; /* compared as JSON values */
} want;

static bool json_text_eq(const char *a, const char *b) {
    json_t *x = json_loads(a, JSON_DECODE_ANY, NULL), *y = json_loads(b, JSON_DECODE_ANY, NULL);
    bool eq = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

/* What a stream of the calls' parts held (check_parts). */
typedef struct seen {
    size_t most;    /* the most argument pieces one call got */
    size_t started; /* calls whose first part went out */
} seen;

/* The random cuts' seed (printed by main): a failure replays with the same cuts. */
static const unsigned CUT_SEED = 20261201u;

/* Streamed in pieces ending at cuts[0..nc) (the last is the text's length): each call's parts
 * add up to a call of the final parse (same name and arguments text, byte for byte) or, for a
 * call whose final parse failed, to what it had sent; the final calls come in order; each
 * streamed call's id is the final call's (a model's own id, Mistral's [CALL_ID]) or, for a call
 * after one that died, the one of its stream index (so no two repeat). */
static seen check_parts_at(const char *what, srv_parse_cfg cfg, const char *text, const srv_chat_out *o,
                           const size_t *cuts, size_t nc) {
    enum { MAXC = 8 };
    srv_buf id[MAXC] = {{0}}, name[MAXC] = {{0}}, args[MAXC] = {{0}};
    size_t pieces[MAXC] = {0}, n_seen = 0;
    seen r = {0};
    srv_chat_stream s = {.ready = true, .cfg = cfg};
    for (size_t c = 0; c < nc; c++) {
        srv_chat_delta d;
        assert_int_equal(srv_chat_stream_feed(&s, text, cuts[c], c + 1 == nc, &d), 0);
        for (size_t k = 0; k < d.n_parts; k++) {
            const srv_call_part *p = &d.parts[k];
            assert_true(p->index < MAXC);
            if (p->name) { /* a call's first part: the next index, once */
                assert_int_equal(p->index, n_seen);
                n_seen++;
                srv_buf_add(&id[p->index], p->id, strlen(p->id));
                srv_buf_add(&name[p->index], p->name, strlen(p->name));
            }
            assert_true(p->index < n_seen);
            if (p->args_len) pieces[p->index]++;
            srv_buf_add(&args[p->index], p->args, p->args_len);
        }
    }
    size_t m = 0; /* the final calls, in order, among the streamed ones */
    for (size_t k = 0; k < n_seen; k++) {
        if (pieces[k] > r.most) r.most = pieces[k];
        bool match = m < o->n_calls && !strcmp(name[k].p, o->calls[m].name) &&
                     args[k].len == strlen(o->calls[m].arguments) &&
                     !memcmp(args[k].p ? args[k].p : "", o->calls[m].arguments, args[k].len);
        char want_id[32];
        srv_chat_call_id(&cfg, k, want_id);
        const char *want = match && k == m ? o->calls[m].id : want_id;
        if (strcmp(id[k].p, want)) fprintf(stderr, "%s: streamed call %zu has id %s, want %s\n", what, k, id[k].p, want);
        assert_string_equal(id[k].p, want);
        if (match)
            m++;
        else if (m < o->n_calls && !strcmp(name[k].p, o->calls[m].name))
            fprintf(stderr, "%s: streamed call %zu has arguments [%.*s], the final parse [%s]\n", what, k, (int)args[k].len,
                    args[k].p ? args[k].p : "", o->calls[m].arguments);
    }
    if (m != o->n_calls) fprintf(stderr, "%s: %zu of %zu final calls streamed (%zu started)\n", what, m, o->n_calls, n_seen);
    assert_int_equal(m, o->n_calls);
    for (size_t k = 0; k < MAXC; k++) {
        srv_buf_free(&id[k]);
        srv_buf_free(&name[k]);
        srv_buf_free(&args[k]);
    }
    srv_chat_stream_free(&s);
    r.started = n_seen;
    return r;
}

/* one byte at a time */
static seen check_parts(const char *what, srv_parse_cfg cfg, const char *text, const srv_chat_out *o) {
    size_t n = strlen(text);
    size_t *cuts = malloc((n + 1) * sizeof *cuts);
    assert_non_null(cuts);
    for (size_t i = 0; i <= n; i++) cuts[i] = i;
    seen r = check_parts_at(what, cfg, text, o, cuts, n + 1);
    free(cuts);
    return r;
}

/* in random pieces of 1 to 12 bytes (an LCG from *seed), several times; a run starts no call the
 * byte-by-byte one did not (a call that dies may go by unseen between two cuts) */
static void check_parts_random(const char *what, srv_parse_cfg cfg, const char *text, const srv_chat_out *o,
                               size_t started, unsigned *seed) {
    size_t n = strlen(text);
    size_t *cuts = malloc((n + 2) * sizeof *cuts);
    assert_non_null(cuts);
    for (int run = 0; run < 8; run++) {
        size_t nc = 0, at = 0;
        cuts[nc++] = 0;
        while (at < n) {
            *seed = *seed * 1103515245u + 12345u;
            size_t step = 1 + (*seed >> 16) % 12;
            at = at + step < n ? at + step : n;
            cuts[nc++] = at;
        }
        seen r = check_parts_at(what, cfg, text, o, cuts, nc);
        if (r.started > started) fprintf(stderr, "%s: random cuts (run %d) started %zu calls, byte by byte %zu\n", what, run, r.started, started);
        assert_true(r.started <= started);
    }
    free(cuts);
}

/* the final parse, and the same text streamed one byte at a time and in random cuts; returns
 * what the byte-by-byte stream held */
static seen check_case(const char *what, srv_parse_cfg cfg, const char *text, const want *w) {
    srv_chat_out o = {0};
    size_t n = strlen(text);
    assert_int_equal(srv_chat_parse(&cfg, text, n, true, &o), 0);
    const char *r = o.reasoning.len ? o.reasoning.p : NULL;
    bool ok = (w->reasoning ? r && !strcmp(r, w->reasoning) : !r) &&
              !strcmp(o.content.p ? o.content.p : "", w->content) && (int)o.n_calls == w->n_calls;
    for (int k = 0; ok && k < w->n_calls; k++)
        ok = !strcmp(o.calls[k].name, w->names[k]) && json_text_eq(o.calls[k].arguments, w->args[k]) &&
             (cfg.syntax == SRV_SYNTAX_MISTRAL ? strlen(o.calls[k].id) == 9 : !strncmp(o.calls[k].id, "call_", 5));
    if (!ok) {
        fprintf(stderr, "%s: got reasoning [%s] content [%s] %zu calls", what, r ? r : "(none)",
                o.content.p ? o.content.p : "", o.n_calls);
        for (size_t k = 0; k < o.n_calls; k++) fprintf(stderr, " %s(%s)", o.calls[k].name, o.calls[k].arguments);
        fprintf(stderr, "\n");
    }
    assert_true(ok);
    /* streamed: the texts here, the calls' parts in check_parts */
    srv_chat_stream s = {.ready = true, .cfg = cfg};
    srv_buf rs = {0}, cs = {0};
    for (size_t i = 0; i <= n; i++) {
        srv_chat_delta d;
        assert_int_equal(srv_chat_stream_feed(&s, text, i, i == n, &d), 0);
        srv_buf_add(&rs, d.reasoning, d.reasoning_len);
        srv_buf_add(&cs, d.content, d.content_len);
    }
    if (rs.len != o.reasoning.len || (rs.len && memcmp(rs.p, o.reasoning.p, rs.len)) || cs.len != o.content.len ||
        (cs.len && memcmp(cs.p, o.content.p, cs.len)))
        fprintf(stderr, "%s: streamed reasoning [%.*s] content [%.*s]\n", what, (int)rs.len, rs.p ? rs.p : "",
                (int)cs.len, cs.p ? cs.p : "");
    assert_int_equal(rs.len, o.reasoning.len);
    assert_int_equal(cs.len, o.content.len);
    srv_buf_free(&rs);
    srv_buf_free(&cs);
    srv_chat_stream_free(&s);
    unsigned seed = CUT_SEED;
    seen st = check_parts(what, cfg, text, &o);
    check_parts_random(what, cfg, text, &o, st.started, &seed);
    srv_chat_out_free(&o);
    return st;
}

static srv_parse_cfg cfg_of(srv_tool_syntax s) {
    srv_parse_cfg c = {.syntax = s, .tools = true, .reasoning = true, .parallel = true, .id_seed = 42};
    return c;
}

/* Argument deltas: a Hermes call's arguments stream as the model writes them, less the
 * whitespace outside strings, a multi-byte character never split; a call that dies after its
 * first part keeps its index and the next call takes the one after it. */
static void test_arg_deltas(void **state) {
    (void)state;
    srv_parse_cfg c = cfg_of(SRV_SYNTAX_HERMES);
    const char *t = "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"caf\xc3\xa9 \\\"ok\\\" \\u00e9\", \"n\": [1, -2.5e3, true, null]}}\n</tool_call>";
    srv_chat_out o = {0};
    assert_int_equal(srv_chat_parse(&c, t, strlen(t), true, &o), 0);
    assert_int_equal(o.n_calls, 1);
    assert_string_equal(o.calls[0].arguments, "{\"text\":\"caf\xc3\xa9 \\\"ok\\\" \\u00e9\",\"n\":[1,-2.5e3,true,null]}");
    assert_true(check_parts("arg deltas", c, t, &o).most > 20); /* byte by byte: a piece per byte */
    srv_chat_out_free(&o);
    /* the streamed bytes never end inside a character */
    srv_chat_stream s = {.ready = true, .cfg = c};
    for (size_t i = 0; i <= strlen(t); i++) {
        srv_chat_delta d;
        assert_int_equal(srv_chat_stream_feed(&s, t, i, i == strlen(t), &d), 0);
        for (size_t k = 0; k < d.n_parts; k++)
            if (d.parts[k].args_len) assert_true((unsigned char)d.parts[k].args[d.parts[k].args_len - 1] != 0xc3);
    }
    srv_chat_stream_free(&s);
    /* a call that dies after it began (bad JSON inside), then a good one */
    const char *dead = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1 2}}</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {\"b\": 2}}</tool_call>";
    want wd = {NULL, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1 2}}</tool_call>", 1, {"g"}, {"{\"b\": 2}"}};
    check_case("dead then good", c, dead, &wd);
    /* the dead call's end and the next call's whole text in one feed: the next is its own call */
    srv_chat_out od = {0};
    assert_int_equal(srv_chat_parse(&c, dead, strlen(dead), true, &od), 0);
    size_t cuts[] = {40, strlen(dead)};
    assert_int_equal(check_parts_at("dead, good in one feed", c, dead, &od, cuts, 2).started, 2);
    srv_chat_out_free(&od);
    /* other keys first or arguments as a string: whole once parsed */
    want wk = {NULL, "", 1, {"f"}, {"{\"a\": 1}"}};
    check_case("arguments first", c, "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>", &wk);
}

/* A family's recorded answer checked as check_case does, and: `started` calls began in the
 * byte-by-byte stream (one more than the final calls for each that died), and some call's
 * arguments came in at least `pieces` pieces (1: whole). */
static void check_pieces(const char *what, srv_parse_cfg cfg, const char *text, const want *w, size_t started,
                         size_t pieces) {
    seen r = check_case(what, cfg, text, w);
    if (r.started != started || (pieces > 1 ? r.most < pieces : r.most != pieces))
        fprintf(stderr, "%s: %zu calls started (want %zu), at most %zu argument pieces (want %s%zu)\n", what, r.started,
                started, r.most, pieces > 1 ? ">= " : "", pieces);
    assert_int_equal(r.started, started);
    if (pieces > 1) assert_true(r.most >= pieces);
    else assert_int_equal(r.most, pieces);
}

/* Argument pieces in every syntax: Llama 3.x JSON calls, Mistral [TOOL_CALLS] (both forms) and
 * harmony calls stream their arguments as the model writes them, as Hermes calls do; calls
 * written in another key order go out whole; a call that dies ends with what was sent. */
static void test_arg_pieces(void **state) {
    (void)state;
    srv_parse_cfg c = cfg_of(SRV_SYNTAX_LLAMA3);
    const char *fl = "{\"origin\": \"San Francisco\", \"destination\": \"Tokyo\", \"date\": \"2024-11-05\", \"passengers\": 2}";
    want w1 = {NULL, "", 1, {"search_flights"}, {fl}};
    check_pieces("llama3 long", c,
                 "{\"name\": \"search_flights\", \"parameters\": {\"origin\": \"San Francisco\", \"destination\": \"Tokyo\", "
                 "\"date\": \"2024-11-05\", \"passengers\": 2}}",
                 &w1, 1, 40);
    want w2 = {NULL, "", 2, {"get_weather", "get_time"}, {"{\"city\": \"Paris\", \"unit\": \"celsius\"}", "{\"timezone\": \"Europe/Paris\"}"}};
    check_pieces("llama3 tag, two", c,
                 "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}; "
                 "{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}\n",
                 &w2, 2, 20);
    want wo = {NULL, "", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}};
    check_pieces("llama3 parameters first", c, "{\"parameters\": {\"city\": \"Paris\"}, \"name\": \"get_weather\"}", &wo, 1, 1);
    const char *dup = "{\"name\": \"f\", \"parameters\": {\"a\": 1}, \"parameters\": {\"a\": 2}}";
    want wd = {NULL, dup, 0, {0}, {0}};
    check_pieces("llama3 repeated key", c, dup, &wd, 1, 2);
    const char *cut = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Fra";
    want wc = {NULL, cut, 0, {0}, {0}};
    check_pieces("llama3 truncated", c, cut, &wc, 1, 10);
    want wt = {NULL, "Let me know.", 1, {"f"}, {"{\"a\": 1}"}};
    check_pieces("llama3 call, then text", c, "{\"name\": \"f\", \"parameters\": {\"a\": 1}} Let me know.", &wt, 1, 2);
    want wb = {NULL, "{\"name\": \"b\", \"parameters\": {\"y\": 1 2}}", 1, {"a"}, {"{\"x\": 1}"}};
    check_pieces("llama3 good, bad", c, "{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {\"y\": 1 2}}",
                 &wb, 2, 2);

    c = cfg_of(SRV_SYNTAX_MISTRAL);
    want m1 = {NULL, "", 1, {"search_flights"}, {fl}};
    const char *withid = "[TOOL_CALLS]search_flights[CALL_ID]a1B2c3D4e[ARGS]{\"origin\": \"San Francisco\", \"destination\": "
                         "\"Tokyo\", \"date\": \"2024-11-05\", \"passengers\": 2}";
    check_pieces("mistral v11 long, model id", c, withid, &m1, 1, 40); /* check_parts: the model's id streamed */
    check_pieces("mistral v11 two", c,
                 "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}[TOOL_CALLS]get_time[ARGS]"
                 "{\"timezone\": \"Europe/Paris\"}",
                 &w2, 2, 20);
    check_pieces("mistral v3 list", c,
                 "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}, "
                 "{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}]",
                 &w2, 2, 20);
    want mb = {NULL, "[TOOL_CALLS]b[ARGS]{\"y\": 1 2}", 1, {"a"}, {"{\"x\": 1}"}};
    check_pieces("mistral good, bad", c, "[TOOL_CALLS]a[ARGS]{\"x\": 1}[TOOL_CALLS]b[ARGS]{\"y\": 1 2}", &mb, 2, 2);
    const char *mcut = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"San Fra";
    want mc = {NULL, mcut, 0, {0}, {0}};
    check_pieces("mistral truncated", c, mcut, &mc, 1, 10);
    want ml = {NULL, "{\"name\": \"b\", \"arguments\": {\"y\": ", 1, {"a"}, {"{\"x\": 1}"}};
    check_pieces("mistral list truncated", c,
                 "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {\"y\": ", &ml, 2, 2);

    c = cfg_of(SRV_SYNTAX_HARMONY);
    want h1 = {"Need flights.", "", 1, {"search_flights"}, {fl}};
    check_pieces("harmony long", c,
                 "<|channel|>analysis<|message|>Need flights.<|end|><|start|>assistant<|channel|>commentary "
                 "to=functions.search_flights <|constrain|>json<|message|>{\"origin\": \"San Francisco\", \"destination\": "
                 "\"Tokyo\", \"date\": \"2024-11-05\", \"passengers\": 2}<|call|>",
                 &h1, 1, 40);
    /* a call that dies, then one whose id follows its stream index (check_parts) */
    want hd = {NULL, "{\"x\": 1 2}", 1, {"b"}, {"{\"y\": \"two\"}"}};
    check_pieces("harmony dead, good", c,
                 "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"x\": 1 2}<|call|><|start|>assistant"
                 "<|channel|>commentary to=functions.b <|constrain|>json<|message|>{\"y\": \"two\"}<|call|>",
                 &hd, 2, 2);
    const char *hcut = "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"x\": \"abcdefgh";
    want hc = {NULL, "{\"x\": \"abcdefgh", 0, {0}, {0}};
    check_pieces("harmony truncated", c, hcut, &hc, 1, 10);
}

static void test_detect(void **state) {
    (void)state;
    bool th;
    assert_int_equal(srv_tool_syntax_detect("{{ '<|channel|>analysis' }}", &th), SRV_SYNTAX_HARMONY);
    assert_int_equal(srv_tool_syntax_detect("[TOOL_CALLS]", &th), SRV_SYNTAX_MISTRAL);
    assert_int_equal(srv_tool_syntax_detect("<|im_start|><tool_call><think>", &th), SRV_SYNTAX_HERMES);
    assert_true(th);
    assert_int_equal(srv_tool_syntax_detect("<|start_header_id|>", &th), SRV_SYNTAX_LLAMA3);
    assert_false(th);
    assert_int_equal(srv_tool_syntax_detect("<|im_start|>", &th), SRV_SYNTAX_HERMES);
    assert_int_equal(srv_tool_syntax_detect("<start_of_turn>", &th), SRV_SYNTAX_NONE);
    assert_int_equal(srv_tool_syntax_detect(NULL, &th), SRV_SYNTAX_NONE);
    /* the real templates */
    static const struct { const char *file; srv_tool_syntax s; bool thinks; } files[] = {
        {"chat/extra/Qwen-Qwen3-0.6B.jinja", SRV_SYNTAX_HERMES, true},
        {"chat/extra/openai-gpt-oss-120b.jinja", SRV_SYNTAX_HARMONY, false},
        {"chat/extra/Mistral-Small-3.2-24B-Instruct-2506.jinja", SRV_SYNTAX_MISTRAL, false},
        {"chat/meta-llama-Llama-3.1-8B-Instruct.jinja", SRV_SYNTAX_LLAMA3, false},
        {"chat/HuggingFaceTB-SmolLM3-3B.jinja", SRV_SYNTAX_HERMES, true},
        {"chat/Qwen-Qwen2.5-7B-Instruct.jinja", SRV_SYNTAX_HERMES, false},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        size_t n;
        char *src = rf_test_read_file(rf_test_data(files[i].file), &n);
        assert_non_null(src);
        assert_int_equal(srv_tool_syntax_detect(src, &th), files[i].s);
        assert_int_equal(th, files[i].thinks);
        free(src);
    }
    assert_true(srv_prompt_opens_think("<|im_start|>assistant\n<think>\n", 29));
    assert_false(srv_prompt_opens_think("<think>\n\n</think>\n\n", 19));
}

static void test_hermes(void **state) {
    (void)state;
    srv_parse_cfg c = cfg_of(SRV_SYNTAX_HERMES);
    /* Qwen's function-calling guide: two parallel calls */
    want w2 = {NULL, "", 2, {"get_current_temperature", "get_temperature_date"},
               {"{\"location\": \"San Francisco, CA, USA\"}", "{\"location\": \"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}"}};
    check_case("qwen parallel", c,
               "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"San Francisco, CA, USA\"}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}}\n</tool_call>",
               &w2);
    /* Qwen3 thinking, then a call */
    want wt = {"The user asks for the weather. I should call get_weather.", "", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}};
    check_case("qwen3 think+call", c,
               "<think>\nThe user asks for the weather. I should call get_weather.\n</think>\n\n"
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
               &wt);
    /* text, then a call; arguments given as a JSON string */
    want ws = {NULL, "Let me look that up.\n", 1, {"f"}, {"{\"a\": 1}"}};
    check_case("text+call", c, "Let me look that up.\n<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", &ws);
    /* a call cut off by the token limit: its text is content */
    const char *cut = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa";
    want wc = {NULL, cut, 0, {0}, {0}};
    check_case("truncated", c, cut, &wc);
    /* the closing tag missing but the JSON whole (EOS right after it): a call */
    want wn = {NULL, "", 1, {"f"}, {"{}"}};
    check_case("no close tag", c, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n", &wn);
    /* malformed JSON, a missing name, a non-object: the text stays */
    const char *bad1 = "<tool_call>{name: f}</tool_call>";
    want wb1 = {NULL, bad1, 0, {0}, {0}};
    check_case("bad json", c, bad1, &wb1);
    const char *bad2 = "a <tool_call>{\"arguments\": {}}</tool_call> b";
    want wb2 = {NULL, bad2, 0, {0}, {0}};
    check_case("no name", c, bad2, &wb2);
    const char *bad3 = "<tool_call>[1, 2]</tool_call>";
    want wb3 = {NULL, bad3, 0, {0}, {0}};
    check_case("array", c, bad3, &wb3);
    /* one good, one bad */
    const char *mix = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>oops</tool_call>";
    want wm = {NULL, "<tool_call>oops</tool_call>", 1, {"f"}, {"{}"}};
    check_case("good+bad", c, mix, &wm);
    /* parallel_tool_calls false: the first only */
    c.parallel = false;
    want w1 = {NULL, "", 1, {"get_current_temperature"}, {"{\"location\": \"x\"}"}};
    check_case("not parallel", c,
               "<tool_call>{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"x\"}}</tool_call>"
               "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>",
               &w1);
    /* no tools: the markup is content; reasoning still split */
    c = cfg_of(SRV_SYNTAX_HERMES);
    c.tools = false;
    want wnt = {"hm", "<tool_call>{\"name\": \"f\"}</tool_call>", 0, {0}, {0}};
    check_case("no tools", c, "<think>hm</think><tool_call>{\"name\": \"f\"}</tool_call>", &wnt);
}

static void test_reasoning(void **state) {
    (void)state;
    srv_parse_cfg c = cfg_of(SRV_SYNTAX_HERMES);
    c.tools = false;
    want w = {"Two plus two is four.", "2 + 2 = 4.", 0, {0}, {0}};
    check_case("think", c, "<think>\nTwo plus two is four.\n</think>\n\n2 + 2 = 4.", &w);
    want wu = {"still going", "", 0, {0}, {0}};
    check_case("unclosed think", c, "<think>still going\n", &wu);
    want wp = {NULL, "<thinking> is a word", 0, {0}, {0}};
    check_case("not a think tag", c, "<thinking> is a word", &wp);
    want we = {NULL, "answer", 0, {0}, {0}};
    check_case("empty think (enable_thinking false)", c, "<think>\n\n</think>\n\nanswer", &we);
    /* the prompt opened the block (DeepSeek-R1 style) */
    c.think_open = true;
    want wo = {"reasoning here", "final", 0, {0}, {0}};
    check_case("open think", c, "reasoning here\n</think>\n\nfinal", &wo);
    /* reasoning off: all content */
    c.think_open = false;
    c.reasoning = false;
    want wf = {NULL, "<think>x</think>y", 0, {0}, {0}};
    check_case("reasoning off", c, "<think>x</think>y", &wf);
}

static void test_llama3(void **state) {
    (void)state;
    srv_parse_cfg c = cfg_of(SRV_SYNTAX_LLAMA3);
    /* Meta's Llama 3.1/3.2 prompt-format page: JSON-based tool calling */
    want w = {NULL, "", 1, {"get_current_conditions"}, {"{\"location\": \"San Francisco\", \"unit\": \"Fahrenheit\"}"}};
    check_case("llama json", c,
               "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco\", \"unit\": \"Fahrenheit\"}}", &w);
    want wt = {NULL, "", 2, {"a", "b"}, {"{\"x\": 1}", "{}"}};
    check_case("python_tag, two calls", c,
               "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}", &wt);
    /* built-in tools as Python calls: not a JSON call, content */
    const char *py = "<|python_tag|>brave_search.call(query=\"Menlo Park weather\")";
    want wp = {NULL, py, 0, {0}, {0}};
    check_case("builtin python call", c, py, &wp);
    want wx = {NULL, "The answer is 4.", 0, {0}, {0}};
    check_case("plain answer", c, "The answer is 4.", &wx);
    const char *cut = "{\"name\": \"a\", \"parameters\": {\"x\": ";
    want wc = {NULL, cut, 0, {0}, {0}};
    check_case("truncated", c, cut, &wc);
    const char *notcall = "{\"answer\": 4}";
    want wn = {NULL, notcall, 0, {0}, {0}};
    check_case("json but no call", c, notcall, &wn);
}

static void test_mistral(void **state) {
    (void)state;
    srv_parse_cfg c = cfg_of(SRV_SYNTAX_MISTRAL);
    /* v3 (Mistral 7B v0.3, Nemo): a JSON list */
    want w = {NULL, "", 1, {"get_current_weather"}, {"{\"location\": \"Paris, France\", \"format\": \"celsius\"}"}};
    check_case("v3 list", c,
               "[TOOL_CALLS] [{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, France\", \"format\": \"celsius\"}}]",
               &w);
    /* v11+ (Mistral Small 3.2, Devstral): name[ARGS]{...}, several */
    want w2 = {NULL, "", 2, {"get_weather", "get_time"}, {"{\"city\": \"Paris\"}", "{}"}};
    check_case("v11", c, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}", &w2);
    /* with the model's call id: kept (the template checks 9 characters) */
    srv_chat_out o = {0};
    const char *withid = "I'll check.[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{\"city\": \"Rome\"}";
    assert_int_equal(srv_chat_parse(&c, withid, strlen(withid), true, &o), 0);
    assert_int_equal(o.n_calls, 1);
    assert_string_equal(o.calls[0].id, "abc123XYZ");
    assert_string_equal(o.content.p, "I'll check.");
    srv_chat_out_free(&o);
    /* generated ids are 9 alphanumerics */
    assert_int_equal(srv_chat_parse(&c, "[TOOL_CALLS]f[ARGS]{}", 21, true, &o), 0);
    assert_int_equal(o.n_calls, 1);
    assert_int_equal(strlen(o.calls[0].id), 9);
    srv_chat_out_free(&o);
    const char *cut = "[TOOL_CALLS]get_weather[ARGS]{\"city\": ";
    want wc = {NULL, cut, 0, {0}, {0}};
    check_case("truncated", c, cut, &wc);
    const char *bad = "[TOOL_CALLS]not a call";
    want wb = {NULL, bad, 0, {0}, {0}};
    check_case("malformed", c, bad, &wb);
}

static void test_harmony(void **state) {
    (void)state;
    srv_parse_cfg c = cfg_of(SRV_SYNTAX_HARMONY);
    /* OpenAI's harmony guide: analysis, then a function call (<|call|> is an end token, so the
     * text may end without it) */
    want w = {"Need to use function get_weather.", "", 1, {"get_weather"}, {"{\"location\":\"San Francisco\"}"}};
    check_case("harmony call", c,
               "<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>",
               &w);
    check_case("harmony call, no <|call|>", c,
               "<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}",
               &w);
    /* the recipient in the role part */
    want wr = {NULL, "", 1, {"lookup"}, {"{\"q\": 1}"}};
    check_case("recipient before channel", c, "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 1}<|call|>", &wr);
    /* the guide's plain answer */
    want wa = {"User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.", "2 + 2 = 4.", 0, {0}, {0}};
    check_case("harmony answer", c,
               "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.<|end|>"
               "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
               &wa);
    /* cut off in the analysis: reasoning only */
    want wcut = {"thinking about", "", 0, {0}, {0}};
    check_case("cut in analysis", c, "<|channel|>analysis<|message|>thinking about", &wcut);
    /* bad arguments: the body is content */
    want wb = {NULL, "{not json", 0, {0}, {0}};
    check_case("bad args", c, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{not json<|call|>", &wb);
    /* no channels at all */
    want wp = {NULL, "plain text", 0, {0}, {0}};
    check_case("plain", c, "plain text", &wp);
    /* reasoning off: the analysis is content */
    c.reasoning = false;
    want wo = {NULL, "abc", 0, {0}, {0}};
    check_case("reasoning off", c, "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>bc", &wo);
}

static void test_json_out(void **state) {
    (void)state;
    srv_parse_cfg c = cfg_of(SRV_SYNTAX_HERMES);
    srv_chat_out o = {0};
    const char *t = "<tool_call>{\"name\": \"f\", \"arguments\": {\"k\": [1, 2]}}</tool_call>";
    assert_int_equal(srv_chat_parse(&c, t, strlen(t), true, &o), 0);
    json_t *j = srv_tool_calls_json(&o);
    assert_non_null(j);
    json_t *c0 = json_array_get(j, 0);
    assert_string_equal(json_string_value(json_object_get(c0, "type")), "function");
    assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "function"), "name")), "f");
    assert_true(json_text_eq(json_string_value(json_object_get(json_object_get(c0, "function"), "arguments")), "{\"k\": [1, 2]}"));
    assert_int_equal(strlen(json_string_value(json_object_get(c0, "id"))), 29);
    json_decref(j);
    srv_chat_out_free(&o);
    assert_null(srv_tool_calls_json(&o));
}
#endif

int main(void) {
#ifdef RF_HAVE_SERVER
    printf("random cuts: seed %u\n", CUT_SEED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect), cmocka_unit_test(test_arg_deltas), cmocka_unit_test(test_arg_pieces),  cmocka_unit_test(test_hermes),  cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_llama3),  cmocka_unit_test(test_mistral), cmocka_unit_test(test_harmony),
        cmocka_unit_test(test_json_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    printf("built without the server; skipping\n");
    return 77;
#endif
}
