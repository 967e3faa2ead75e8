/* json_schema_int.h — the JSON Schema compiler's state shared by its files (json_schema.c: types,
 * objects, arrays; json_schema_kw.c: string/number bounds, formats, $ref; json_schema_regex.c). */
#ifndef RF_SERVER_JSON_SCHEMA_INT_H
#define RF_SERVER_JSON_SCHEMA_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

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

int32_t srv_jsc_fail(jsc *c, const char *fmt, const char *arg);
int32_t srv_jsc_def(jsc *c, rf_gseq *s); /* a new rule ::= s (s consumed) */
int32_t srv_jsc_schema(jsc *c, json_t *sc, int depth);

/* json_schema_kw.c: "string" with minLength/maxLength/pattern/format, "number"/"integer" with
 * minimum/maximum/exclusive*, and $ref (NULL-free: each returns a rule or -1 with err set). */
int32_t srv_jsc_string(jsc *c, json_t *sc);
int32_t srv_jsc_number(jsc *c, json_t *sc, bool integer);
int32_t srv_jsc_ref(jsc *c, json_t *sc, int depth);
bool srv_jsc_has_typed_kw(json_t *sc); /* a string/number keyword present */

/* json_schema_regex.c: the bytes that fully match a regex of the supported subset (see
 * docs/server.md); every admitted byte is printable ASCII other than '"' and '\\' or part of a
 * UTF-8 literal, so the text is also valid inside a JSON string. */
int32_t srv_jsc_regex(jsc *c, const char *re, size_t n);

#endif
