/* tool_grammar.c — the grammars that enforce tool_choice "required" or a named function, one
 * per syntax the server's parser reads (tool_grammar.h), built on the JSON Schema compiler
 * (json_schema.c) so that each call's arguments follow its tool's schema. */
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"
#include "json_schema_int.h"
#include "tool_grammar.h"

#define STOP_MAX 16 /* the longest text a free-text rule excludes ("</think>", "<|") */

static void lit(jsc *c, rf_gseq *s, const char *t) { rf_gseq_lit(c->g, s, t, strlen(t)); }

/* The state after byte b in state k of the automaton that tracks the longest prefix of stop[0..m)
 * the text ends with (m: the text now contains stop). */
static size_t stop_next(const char *stop, size_t m, size_t k, unsigned char b) {
    char x[STOP_MAX + 1];
    memcpy(x, stop, k);
    x[k] = (char)b;
    for (size_t len = k + 1 < m ? k + 1 : m; len > 0; len--)
        if (!memcmp(x + k + 1 - len, stop, len)) return len;
    return 0;
}

/* Any text of bytes 1-255 that does not contain `stop` (a reasoning block's text before its
 * closing marker): one rule per automaton state, each final. Deterministic, so the recognizer
 * keeps one stack for it, and right recursion keeps that stack flat however long the text. */
static int32_t text_without(jsc *c, const char *stop) {
    size_t m = strlen(stop);
    int32_t st[STOP_MAX];
    if (m == 0 || m > STOP_MAX) return srv_jsc_fail(c, "%s", "a free-text stop marker is too long");
    for (size_t k = 0; k < m; k++)
        if ((st[k] = rf_grammar_rule(c->g)) < 0) return srv_jsc_fail(c, "%s", "the grammar is too large");
    for (size_t k = 0; k < m; k++) {
        rf_gclass to[STOP_MAX];
        memset(to, 0, sizeof to);
        for (unsigned b = 1; b < 256; b++) {
            size_t j = stop_next(stop, m, k, (unsigned char)b);
            if (j < m) rf_gclass_set(&to[j], b, b);
        }
        rf_gseq s = {0};
        for (size_t j = 0; j < m; j++) {
            bool any = false;
            for (size_t w = 0; w < sizeof to[j].bits && !any; w++) any = to[j].bits[w] != 0;
            if (!any) continue;
            rf_gseq_class(c->g, &s, &to[j]);
            rf_gseq_ref(&s, st[j]);
            rf_gseq_alt(&s); /* the last alternative is empty: the text may end here */
        }
        if (rf_grammar_define(c->g, st[k], &s)) {
            c->oom = true;
            return srv_jsc_fail(c, "%s", "the grammar is too large");
        }
    }
    return st[0];
}

/* first (sep first)*: one item, or several when parallel. */
static int32_t repeat(jsc *c, int32_t item, const char *sep, bool parallel) {
    if (item < 0 || !parallel) return item;
    rf_gseq s = {0};
    int32_t more = rf_grammar_rule(c->g); /* more ::= sep item more | "" */
    lit(c, &s, sep);
    rf_gseq_ref(&s, item);
    rf_gseq_ref(&s, more);
    rf_gseq_alt(&s);
    if (more < 0 || rf_grammar_define(c->g, more, &s)) {
        rf_gseq_free(&s);
        c->oom = true;
        return srv_jsc_fail(c, "%s", "the grammar is too large");
    }
    rf_gseq_ref(&s, item);
    rf_gseq_ref(&s, more);
    return srv_jsc_def(c, &s);
}

/* pre {"name": NAME, "KEY": ARGS} post: a call as a JSON object (Llama 3's "parameters",
 * Hermes' and Mistral's list "arguments"), in the spacing the templates write. */
static void json_call(jsc *c, rf_gseq *s, const char *pre, json_t *nm, const char *key, int32_t args,
                      const char *post) {
    lit(c, s, pre);
    lit(c, s, "{\"name\": ");
    srv_jsc_literal(c, s, nm);
    lit(c, s, ", \"");
    lit(c, s, key);
    lit(c, s, "\": ");
    rf_gseq_ref(s, args);
    lit(c, s, "}");
    lit(c, s, post);
}

/* The alternatives of one call per tool, in the syntax's form (form 1: Mistral's bare
 * name[ARGS]{...}; form 0 everything else), into s. Returns how many tools, or -1. */
static int call_alts(jsc *c, json_t *tools, const srv_tool_grammar_opts *o, int form, rf_gseq *s) {
    int n_alt = 0;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        json_t *nm = json_object_get(f, "name"), *pa = json_object_get(f, "parameters");
        if (!json_is_string(nm) || (o->only && strcmp(o->only, json_string_value(nm)))) continue;
        srv_jsc_forget_refs(c); /* each tool's own "#" */
        c->root = pa;
        /* a schema outside the subset: any object keeps the call well-formed. Probed in a
         * grammar of its own first: a failed compile leaves rules without a body behind. */
        rf_grammar *probe = NULL;
        char perr[8];
        int32_t args = c->object;
        if (pa && srv_json_grammar(pa, &probe, perr, sizeof perr) == 0) {
            rf_grammar_unref(probe);
            if ((args = srv_jsc_schema(c, pa, 0)) < 0) return -1;
        }
        if (n_alt++) rf_gseq_alt(s);
        switch (o->syntax) {
        case SRV_SYNTAX_LLAMA3: json_call(c, s, "", nm, "parameters", args, ""); break;
        case SRV_SYNTAX_MISTRAL:
            if (form == 1) {
                lit(c, s, json_string_value(nm)); /* names are [A-Za-z0-9_.-] (oai_tools.c) */
                lit(c, s, "[ARGS]");
                rf_gseq_ref(s, args);
            } else {
                json_call(c, s, "", nm, "arguments", args, "");
            }
            break;
        case SRV_SYNTAX_HARMONY:
            lit(c, s, "<|channel|>commentary to=functions.");
            lit(c, s, json_string_value(nm));
            lit(c, s, " <|constrain|>json<|message|>");
            rf_gseq_ref(s, args);
            break;
        default: /* Hermes, and no known syntax, which the parser reads as Hermes */
            json_call(c, s, "<tool_call>\n", nm, "arguments", args, "\n</tool_call>");
            break;
        }
    }
    return n_alt;
}

/* One rule whose alternatives are the tools' calls (-1: none, or an error). */
static int32_t call_rule(jsc *c, json_t *tools, const srv_tool_grammar_opts *o, int form) {
    rf_gseq s = {0};
    int n = call_alts(c, tools, o, form, &s);
    if (n <= 0) {
        rf_gseq_free(&s);
        return n == 0 ? srv_jsc_fail(c, "%s", "no tool to call") : -1;
    }
    return srv_jsc_def(c, &s);
}

/* The calls alone, in the syntax's form. */
static int32_t calls_rule(jsc *c, json_t *tools, const srv_tool_grammar_opts *o) {
    rf_gseq s = {0};
    switch (o->syntax) {
    case SRV_SYNTAX_LLAMA3: return repeat(c, call_rule(c, tools, o, 0), "; ", o->parallel);
    case SRV_SYNTAX_MISTRAL: {
        /* both forms the parser reads: the JSON list (Mistral Small 3.x, Nemo) and the bare
         * name[ARGS]{...} of the newer templates; the model takes the one it was taught */
        int32_t list = repeat(c, call_rule(c, tools, o, 0), ", ", o->parallel);
        int32_t bare = call_rule(c, tools, o, 1);
        int32_t more = bare >= 0 && o->parallel ? rf_grammar_rule(c->g) : -1;
        if (list < 0 || bare < 0 || (o->parallel && more < 0)) return srv_jsc_fail(c, "%s", "the grammar is too large");
        if (o->parallel) { /* more ::= "[TOOL_CALLS]" bare more | "" */
            lit(c, &s, "[TOOL_CALLS]");
            rf_gseq_ref(&s, bare);
            rf_gseq_ref(&s, more);
            rf_gseq_alt(&s);
            if (rf_grammar_define(c->g, more, &s)) return srv_jsc_fail(c, "%s", "the grammar is too large");
        }
        lit(c, &s, "[TOOL_CALLS][");
        rf_gseq_ref(&s, list);
        lit(c, &s, "]");
        rf_gseq_alt(&s);
        lit(c, &s, "[TOOL_CALLS]");
        rf_gseq_ref(&s, bare);
        if (o->parallel) rf_gseq_ref(&s, more);
        return srv_jsc_def(c, &s);
    }
    case SRV_SYNTAX_HARMONY: {
        /* one call: its <|call|> ends the turn (an end-of-generation token). An analysis
         * message may come first, as gpt-oss writes one before acting. */
        int32_t call = call_rule(c, tools, o, 0), r = text_without(c, "<|");
        if (call < 0 || r < 0) return -1;
        lit(c, &s, "<|channel|>analysis<|message|>");
        rf_gseq_ref(&s, r);
        lit(c, &s, "<|end|><|start|>assistant");
        rf_gseq_ref(&s, call);
        rf_gseq_alt(&s);
        rf_gseq_ref(&s, call);
        return srv_jsc_def(c, &s);
    }
    default: return repeat(c, call_rule(c, tools, o, 0), "\n", o->parallel);
    }
}

int srv_tool_call_grammar(json_t *tools, const srv_tool_grammar_opts *o, rf_grammar **out, char *err, size_t errlen) {
    jsc c;
    *out = NULL;
    int r = -1;
    if (srv_jsc_begin(&c, err, errlen)) {
        int32_t body = calls_rule(&c, tools, o);
        if (body >= 0 && o->syntax != SRV_SYNTAX_HARMONY && o->think != SRV_THINK_NONE) {
            /* the parser splits the block off (srv_think_split) and reads the calls after it */
            int32_t t = text_without(&c, "</think>");
            rf_gseq s = {0};
            if (o->think == SRV_THINK_OPTIONAL) lit(&c, &s, "<think>");
            rf_gseq_ref(&s, t);
            lit(&c, &s, "</think>");
            rf_gseq_ref(&s, c.ws);
            rf_gseq_ref(&s, body);
            if (o->think == SRV_THINK_OPTIONAL) {
                rf_gseq_alt(&s);
                rf_gseq_ref(&s, body);
            }
            body = srv_jsc_def(&c, &s);
        }
        r = srv_jsc_finish(&c, body, out);
        if (r == 0) rf_grammar_set_control_text(*out, o->control_text);
    }
    srv_jsc_end(&c);
    return r;
}
