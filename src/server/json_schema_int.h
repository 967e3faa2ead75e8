/* json_schema_int.h — the JSON Schema compiler's state and its two primitives (fail, def) shared
 * by its files, called one way: tool_grammar.c (tool calls) -> json_schema.c (types, objects,
 * arrays, $ref) -> json_schema_kw.c (string/number bounds, formats) -> json_schema_regex.c. */
#ifndef RF_SERVER_JSON_SCHEMA_INT_H
#define RF_SERVER_JSON_SCHEMA_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "engine/grammar.h"

typedef struct jsc_ref {
    char *path;   /* "#/$defs/name" as written */
    int32_t rule; /* allocated before the target is compiled, so recursion refers to it */
} jsc_ref;

typedef struct jsc {
    rf_grammar *g;
    int32_t ws, string, number, integer, value, object, array, boolean, null_;
    int32_t ch;   /* one JSON string character: one code point, escaped or UTF-8 */
    json_t *root; /* the schema $ref "#..." resolves against */
    jsc_ref *refs;
    size_t n_refs;
    char *err;
    size_t errlen;
    bool oom;
} jsc;

/* The first error wins (err keeps it); returns -1 so that callers can `return srv_jsc_fail(...)`. */
static inline int32_t srv_jsc_fail(jsc *c, const char *fmt, const char *arg) {
    if (c->err && !c->err[0]) snprintf(c->err, c->errlen, fmt, arg);
    return -1;
}

/* A new rule ::= s (s consumed); -1 with err set when the grammar cannot grow. */
static inline int32_t srv_jsc_def(jsc *c, rf_gseq *s) {
    int32_t r = rf_grammar_rule(c->g);
    if (r < 0 || rf_grammar_define(c->g, r, s)) {
        rf_gseq_free(s);
        c->oom = true;
        return srv_jsc_fail(c, "%s", "the grammar is too large");
    }
    return r;
}

/* json_schema.c: a compile's life (begin: a grammar with the base rules; finish: root ::= body
 * ws, checked, moved to *out; end: whatever is left freed, always called), a schema's rule
 * (c->root set to the document its $refs resolve against; forget_refs before the next
 * document), and a JSON value's compact text as literal bytes. */
bool srv_jsc_begin(jsc *c, char *err, size_t errlen);
int srv_jsc_finish(jsc *c, int32_t body, rf_grammar **out);
void srv_jsc_end(jsc *c);
void srv_jsc_forget_refs(jsc *c);
int32_t srv_jsc_schema(jsc *c, json_t *sc, int depth);
void srv_jsc_literal(jsc *c, rf_gseq *s, json_t *v);

/* json_schema_kw.c: "string" with minLength/maxLength/pattern/format, "number"/"integer" with
 * minimum/maximum/exclusive* (each returns a rule or -1 with err set). */
int32_t srv_jsc_string(jsc *c, json_t *sc);
int32_t srv_jsc_number(jsc *c, json_t *sc, bool integer);
bool srv_jsc_has_typed_kw(json_t *sc); /* a string/number keyword present */

/* json_schema_regex.c: the bytes that fully match a regex of the supported subset (see
 * docs/server.md); every admitted byte is printable ASCII other than '"' and '\\' or part of a
 * UTF-8 literal, so the text is also valid inside a JSON string. */
int32_t srv_jsc_regex(jsc *c, const char *re, size_t n);

#endif
