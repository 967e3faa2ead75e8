/* fuzz_tool_walk_body.h — texts the tool-call grammars admit (src/server/tool_grammar.c), walked
 * byte by byte from a byte source, and the contract they must keep with the answer parser
 * (tool_calls.h): whatever the grammar admits parses into calls only (no content), of offered
 * functions, with JSON-object arguments, one call unless parallel, and streams in pieces that add
 * up to exactly the final parse. Shared by fuzz_tool_grammar.c (bytes from libFuzzer) and
 * test_tool_grammar.c (bytes from a seeded generator). A violation traps (fuzz_check.h). */
#ifndef RF_FUZZ_TOOL_WALK_BODY_H
#define RF_FUZZ_TOOL_WALK_BODY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "server/tool_calls.h"
#include "server/tool_grammar.h"

/* The bytes that steer a walk: p[0..n) in order (libFuzzer's input), then none; or, with next
 * set, as many as asked for (a seeded generator). */
typedef struct rf_tw_src {
    const uint8_t *p;
    size_t n, at;
    uint8_t (*next)(void *user);
    void *user;
} rf_tw_src;

static bool rf_tw_byte(rf_tw_src *s, uint8_t *b) {
    if (s->next) {
        *b = s->next(s->user);
        return true;
    }
    if (s->at >= s->n) return false;
    *b = s->p[s->at++];
    return true;
}

/* What closes the constructs of the tool-call grammars (a <think> block, harmony's analysis
 * message, JSON strings, objects, arrays, a Hermes block): a walk that has run long enough tries
 * these first, since a byte-wise random walk almost never spells "</think>" by chance. */
static const char *const rf_tw_closers[] = {"</think>", "<|end|>", "\"", "}", "]", "\n</tool_call>"};

/* Every syntax's markers: a free step whose byte is 240 or more tries one of these first (where
 * the grammar takes it, e.g. inside a JSON string or a reasoning block), since a marker's text in
 * data must not end a call early or start one. */
static const char *const rf_tw_markers[] = {"</tool_call>", "<tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
                                           "<|end|>", "<|call|>", "<|return|>", "<|start|>", "<|channel|>",
                                           "<|message|>", "<|constrain|>", "</think>", "<think>", "<|python_tag|>",
                                           "{\"name\": \"get_time\", \"parameters\": {}}"};

/* How long a walk can be. Free steps: at most 8 + 255; each appends one byte or one marker (41
 * bytes at the most). Then the finish closes what is open, one construct at a time: a closer
 * comes round within 6 steps (13 bytes each at the most), whitespace runs are at most 12 bytes
 * (the JSON grammar's cap), and closers never open an object or array, so the finish meets no
 * level the free steps or the schema's required members did not open: ~150 bytes a level, at
 * most 263 + the schema's depth levels. Together under 263 x 41 + 300 x 150 = 56 KB: a walk that
 * reaches RF_TW_CAP is not a long text but a finish that does not converge (a fault). */
#define RF_TW_CAP (64u << 10)

/* A text g admits, into out[0..cap) (NUL-terminated): the first byte from src sets how many steps
 * walk freely (8 + it); each free step takes a byte c from src and appends a marker (c >= 240,
 * above) where the grammar takes it, else the first of c, c + 1, ... (1..255, wrapping) that g
 * takes next, and once the text is a whole sentence a byte below 64 ends it. Past the free steps,
 * or when src runs out, the walk finishes: it ends at the first whole sentence, trying the
 * closers above (in turn) before the byte scan. Returns the length, or -1 when the text would
 * reach cap. A text that is not whole and takes no byte is the grammar's fault (a forced call
 * must always be completable): it traps. */
static long rf_tw_walk(rf_grammar *g, rf_tw_src *src, char *out, size_t cap) {
    rf_gmatch *m = NULL;
    if (rf_gmatch_new(g, &m) != RF_OK) return -1;
    uint8_t lb = 0;
    (void)rf_tw_byte(src, &lb);
    const size_t free_steps = 8 + (size_t)lb;
    size_t n = 0, steps = 0;
    long r = -1;
    for (;; steps++) {
        uint8_t c = 1;
        const bool have = steps < free_steps && rf_tw_byte(src, &c), finish = !have;
        if (rf_gmatch_accepting(m) && (finish || c < 64 || rf_gmatch_done(m))) {
            r = (long)n;
            break;
        }
        if (n + 16 >= cap) break;
        bool fed = false;
        const size_t nm = sizeof rf_tw_markers / sizeof rf_tw_markers[0];
        if (!finish && c >= 240) {
            const char *mk = rf_tw_markers[(c - 240) % nm];
            const size_t len = strlen(mk);
            if (n + len + 16 < cap && rf_gmatch_feed(m, mk, len)) memcpy(out + n, mk, len), n += len, fed = true;
        }
        /* the closers in turn, from a step's own: in a string "</think>" is text, and the one
         * that closes comes round within a turn */
        const size_t nc = sizeof rf_tw_closers / sizeof rf_tw_closers[0];
        for (size_t i = 0; finish && !fed && i < nc; i++) {
            const char *cl = rf_tw_closers[(steps + i) % nc];
            const size_t len = strlen(cl);
            if (rf_gmatch_feed(m, cl, len)) memcpy(out + n, cl, len), n += len, fed = true;
        }
        for (int k = 0; k < 255 && !fed; k++) {
            char b = (char)(1 + (c + k) % 255);
            if (rf_gmatch_feed(m, &b, 1)) out[n++] = b, fed = true;
        }
        RF_FUZZ_CHECK(fed); /* not whole, yet nothing may follow: a dead end in the grammar */
    }
    rf_gmatch_free(m);
    if (r >= 0) out[r] = 0;
    return r;
}

/* The parser's reading of t[0..n), a text the grammar built with (tools, o) admits: calls only,
 * each of an offered function (o->only's when set) with an object of arguments, one unless
 * parallel (harmony: always one); and the same bytes streamed in pieces whose lengths come from
 * src (1..16; the rest in one when src runs out): names in call order, the pieces of each call's
 * arguments adding up to exactly the final parse's text, nothing else sent. */
static void rf_tw_check(json_t *tools, const srv_tool_grammar_opts *o, const char *t, size_t n, rf_tw_src *src) {
    /* the parser as the server sets it up (srv_parse_cfg_for): the reasoning split on where the
     * grammar lets reasoning come first (harmony: its analysis message, always) */
    srv_parse_cfg cfg = {.syntax = o->syntax, .tools = true,
                         .reasoning = o->think != SRV_THINK_NONE || o->syntax == SRV_SYNTAX_HARMONY,
                         .think_open = o->think == SRV_THINK_OPEN, .parallel = o->parallel, .id_seed = 7};
    srv_chat_out out = {0};
    RF_FUZZ_CHECK(srv_chat_parse(&cfg, t, n, true, &out) == 0);
    if (out.n_calls < 1 || out.content.len) {
        fprintf(stderr, "tool walk: syntax %d think %d parallel %d: %zu calls, content '%.*s' from:\n%.*s\n",
                (int)o->syntax, (int)o->think, (int)o->parallel, out.n_calls, (int)out.content.len,
                out.content.p ? out.content.p : "", (int)n, t);
        RF_FUZZ_CHECK(out.n_calls >= 1 && out.content.len == 0);
    }
    RF_FUZZ_CHECK(out.n_calls == 1 || (o->parallel && o->syntax != SRV_SYNTAX_HARMONY));
    for (size_t k = 0; k < out.n_calls; k++) {
        bool offered = false;
        for (size_t i = 0; i < json_array_size(tools) && !offered; i++) {
            const char *nm = json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
            offered = nm && !strcmp(nm, out.calls[k].name) && (!o->only || !strcmp(o->only, nm));
        }
        RF_FUZZ_CHECK(offered);
        json_t *a = json_loads(out.calls[k].arguments, JSON_ALLOW_NUL, NULL); /* \u0000 is JSON */
        RF_FUZZ_CHECK(json_is_object(a));
        json_decref(a);
    }

    enum { MAXC = 64 };
    srv_buf args[MAXC] = {{0}};
    srv_chat_stream s = {.ready = true, .cfg = cfg};
    size_t at = 0, started = 0, content = 0;
    for (bool fin = false; !fin;) {
        uint8_t b;
        at = rf_tw_byte(src, &b) ? at + 1 + b % 16 : n;
        if (at >= n) at = n, fin = true;
        srv_chat_delta d;
        RF_FUZZ_CHECK(srv_chat_stream_feed(&s, t, at, fin, &d) == 0);
        content += d.content_len;
        for (size_t k = 0; k < d.n_parts; k++) {
            const srv_call_part *p = &d.parts[k];
            if (p->name) {
                RF_FUZZ_CHECK(p->index == started && started < MAXC);
                started++;
                RF_FUZZ_CHECK(!strcmp(p->name, out.calls[p->index].name));
            }
            RF_FUZZ_CHECK(p->index < started);
            srv_buf_add(&args[p->index], p->args ? p->args : "", p->args_len);
        }
    }
    RF_FUZZ_CHECK(content == 0 && started == out.n_calls);
    for (size_t k = 0; k < started; k++) {
        RF_FUZZ_CHECK(args[k].len == strlen(out.calls[k].arguments) &&
                      !memcmp(args[k].p ? args[k].p : "", out.calls[k].arguments, args[k].len));
        srv_buf_free(&args[k]);
    }
    srv_chat_stream_free(&s);
    srv_chat_out_free(&out);
}

/* One walk of the grammar of (tools, o) steered by src, and its check. Returns the text's length
 * (-1: it reached RF_TW_CAP, which the bound above says a finishing walk does not). */
static long rf_tw_one(json_t *tools, const srv_tool_grammar_opts *o, rf_tw_src *src) {
    rf_grammar *g = NULL;
    char err[256];
    RF_FUZZ_CHECK(srv_tool_call_grammar(tools, o, &g, err, sizeof err) == 0);
    char *t = malloc(RF_TW_CAP);
    long n = t ? rf_tw_walk(g, src, t, RF_TW_CAP) : -1;
    if (n >= 0) rf_tw_check(tools, o, t, (size_t)n, src);
    free(t);
    rf_grammar_unref(g);
    return n;
}

/* Tools whose schemas reach every part of the JSON grammar: strings (escapes, UTF-8, formats,
 * lengths), enums, bounded numbers, nested objects, arrays, optional members, no parameters,
 * and a schema outside the supported subset (any object then). */
static const char *const rf_tw_tool_sets[] = {
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]",
    "[{\"type\":\"function\",\"function\":{\"name\":\"plan\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"steps\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
    "\"minimum\":1,\"maximum\":99},\"what\":{\"type\":\"string\",\"maxLength\":12}},\"required\":[\"n\",\"what\"]},"
    "\"maxItems\":3},\"at\":{\"type\":\"string\",\"format\":\"date\"},\"weight\":{\"type\":\"number\"},"
    "\"ok\":{\"type\":\"boolean\"},\"note\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\"}]}},"
    "\"required\":[\"steps\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"odd\",\"parameters\":{\"type\":\"object\",\"not\":{}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"bare\"}}]",
};

/* One case from its byte b: bits 0-1 the syntax (Hermes, Llama 3, Mistral, harmony), 2 parallel
 * calls, 3-4 the reasoning shape (none, optional, opened; harmony: none, its analysis message is
 * always optional), 5 a named function, 7 the tool list; then a walk steered by src (rf_tw_one). */
static inline long rf_tw_case(uint8_t b, rf_tw_src *src) { /* inline: unused where only walks are wanted */
    static json_t *sets[2];
    if (!sets[0])
        for (int i = 0; i < 2; i++) RF_FUZZ_CHECK((sets[i] = json_loads(rf_tw_tool_sets[i], 0, NULL)) != NULL);
    static const srv_tool_syntax syn[4] = {SRV_SYNTAX_HERMES, SRV_SYNTAX_LLAMA3, SRV_SYNTAX_MISTRAL, SRV_SYNTAX_HARMONY};
    srv_tool_grammar_opts o = {.syntax = syn[b & 3], .parallel = (b >> 2) & 1, .control_text = true};
    o.think = (srv_think_shape)(((b >> 3) & 3) % 3);
    if (o.syntax == SRV_SYNTAX_HARMONY) o.think = SRV_THINK_NONE;
    if ((b >> 5) & 1) o.only = (b >> 7) & 1 ? "plan" : "get_weather";
    return rf_tw_one(sets[(b >> 7) & 1], &o, src);
}

#endif
