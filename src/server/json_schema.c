/* json_schema.c — JSON Schema (the common subset: types, objects, arrays, $ref to $defs) and "any
 * JSON object" compiled to a byte grammar (engine/grammar.h) for constrained decoding; the
 * tool-call grammars (tool_grammar.c) build on the same compiler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"
#include "json_schema_int.h"

#define WS_MAX 12      /* whitespace bytes between tokens: small models otherwise loop on "\n" */
#define MAX_ITEMS 64   /* maxItems beyond this (with a bound) is refused: the grammar is unrolled */
#define MAX_SCHEMA_DEPTH 32
#define DIGITS_MAX 15 /* digits after the first of an integer part, a fraction, an exponent */

#define fail srv_jsc_fail
#define def srv_jsc_def

static void lit(jsc *c, rf_gseq *s, const char *t) { rf_gseq_lit(c->g, s, t, strlen(t)); }
static void cls(jsc *c, rf_gseq *s, unsigned lo, unsigned hi) {
    rf_gclass k = {{0}};
    rf_gclass_set(&k, lo, hi);
    rf_gseq_class(c->g, s, &k);
}

static int32_t build_containers(jsc *c);

/* Base rules: whitespace, strings (valid UTF-8, JSON escapes), numbers, any value. */
static int32_t build_base(jsc *c) {
    rf_grammar *g = c->g;
    rf_gseq s = {0};
    /* ws_k ::= "" | [ \t\n] ws_{k-1} */
    int32_t w = def(c, &s);
    rf_gclass sp = {{0}};
    rf_gclass_set(&sp, ' ', ' ');
    rf_gclass_set(&sp, '\t', '\t');
    rf_gclass_set(&sp, '\n', '\n');
    for (int k = 0; k < WS_MAX && w >= 0; k++) {
        rf_gseq_alt(&s);
        rf_gseq_class(g, &s, &sp);
        rf_gseq_ref(&s, w);
        w = def(c, &s);
    }
    c->ws = w;
    /* one string character */
    rf_gclass plain = {{0}};
    rf_gclass_set(&plain, 0x20, 0x7e);
    plain.bits['"' >> 3] &= (uint8_t)~(1u << ('"' & 7));
    plain.bits['\\' >> 3] &= (uint8_t)~(1u << ('\\' & 7));
    rf_gseq_class(g, &s, &plain);
    rf_gseq_alt(&s);
    lit(c, &s, "\\");
    rf_gclass esc = {{0}};
    for (const char *p = "\"\\/bfnrt"; *p; p++) rf_gclass_set(&esc, (unsigned char)*p, (unsigned char)*p);
    rf_gseq_class(g, &s, &esc);
    rf_gseq_alt(&s);
    /* \uXXXX but \u0000: jansson (what the server reads a JSON answer with) keeps no NUL in an
     * object key, so a key holding one would make a call the grammar admitted fail to parse;
     * "\u" then 0 to 3 zeros, a nonzero digit, the rest any */
    rf_gclass hex = {{0}};
    rf_gclass_set(&hex, '0', '9');
    rf_gclass_set(&hex, 'a', 'f');
    rf_gclass_set(&hex, 'A', 'F');
    rf_gclass nz = hex;
    nz.bits['0' >> 3] &= (uint8_t)~(1u << ('0' & 7));
    static const char *const zeros[4] = {"\\u", "\\u0", "\\u00", "\\u000"};
    for (int z = 0; z < 4; z++) {
        if (z) rf_gseq_alt(&s);
        lit(c, &s, zeros[z]);
        rf_gseq_class(g, &s, &nz);
        for (int i = z + 1; i < 4; i++) rf_gseq_class(g, &s, &hex);
    }
    /* UTF-8 sequences of 2-4 bytes (no overlongs, no surrogates) */
    static const unsigned char u8[][4][2] = {
        {{0xC2, 0xDF}, {0x80, 0xBF}, {0, 0}, {0, 0}},       {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}, {0, 0}},
        {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}, {0, 0}}, {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}, {0, 0}},
        {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}, {0, 0}}, {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}}, {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
    };
    for (size_t i = 0; i < sizeof u8 / sizeof u8[0]; i++) {
        rf_gseq_alt(&s);
        for (int j = 0; j < 4 && u8[i][j][0]; j++) cls(c, &s, u8[i][j][0], u8[i][j][1]);
    }
    int32_t ch = def(c, &s);
    c->ch = ch;
    /* chars ::= ch chars | "" ; string ::= "\"" chars "\"" */
    int32_t chars = rf_grammar_rule(g);
    rf_gseq_ref(&s, ch);
    rf_gseq_ref(&s, chars);
    rf_gseq_alt(&s);
    if (chars < 0 || rf_grammar_define(g, chars, &s)) return fail(c, "%s", "out of memory");
    lit(c, &s, "\"");
    rf_gseq_ref(&s, chars);
    lit(c, &s, "\"");
    c->string = def(c, &s);
    /* digits ::= up to DIGITS_MAX more digits (a model may otherwise write digits until
     * max_tokens); int ::= "-"? ("0" | [1-9] digits) */
    rf_gseq_alt(&s);
    int32_t digits = def(c, &s);
    for (int k = 0; k < DIGITS_MAX && digits >= 0; k++) {
        cls(c, &s, '0', '9');
        rf_gseq_ref(&s, digits);
        rf_gseq_alt(&s);
        digits = def(c, &s);
    }
    lit(c, &s, "0");
    rf_gseq_alt(&s);
    cls(c, &s, '1', '9');
    rf_gseq_ref(&s, digits);
    int32_t uint = def(c, &s);
    lit(c, &s, "-");
    rf_gseq_alt(&s);
    int32_t sign = def(c, &s);
    rf_gseq_ref(&s, sign);
    rf_gseq_ref(&s, uint);
    c->integer = def(c, &s);
    /* frac ::= "" | "." [0-9] digits ; exp ::= "" | [eE] [+-]? [0-9] digits */
    rf_gseq_alt(&s);
    lit(c, &s, ".");
    cls(c, &s, '0', '9');
    rf_gseq_ref(&s, digits);
    int32_t frac = def(c, &s);
    lit(c, &s, "+");
    rf_gseq_alt(&s);
    lit(c, &s, "-");
    rf_gseq_alt(&s);
    int32_t esign = def(c, &s);
    rf_gseq_alt(&s);
    rf_gclass e = {{0}};
    rf_gclass_set(&e, 'e', 'e');
    rf_gclass_set(&e, 'E', 'E');
    rf_gseq_class(g, &s, &e);
    rf_gseq_ref(&s, esign);
    cls(c, &s, '0', '9');
    rf_gseq_ref(&s, digits);
    int32_t ex = def(c, &s);
    rf_gseq_ref(&s, c->integer);
    rf_gseq_ref(&s, frac);
    rf_gseq_ref(&s, ex);
    c->number = def(c, &s);
    lit(c, &s, "true");
    rf_gseq_alt(&s);
    lit(c, &s, "false");
    c->boolean = def(c, &s);
    lit(c, &s, "null");
    c->null_ = def(c, &s);
    return c->oom ? -1 : build_containers(c);
}

/* ws string ws ":" ws value ws more: a member and what follows it (members, or the rest of an
 * object) */
static void member_tail(jsc *c, rf_gseq *s, int32_t more) {
    rf_gseq_ref(s, c->ws);
    rf_gseq_ref(s, c->string);
    rf_gseq_ref(s, c->ws);
    lit(c, s, ":");
    rf_gseq_ref(s, c->ws);
    rf_gseq_ref(s, c->value);
    rf_gseq_ref(s, c->ws);
    rf_gseq_ref(s, more);
}

/* ws value ws more: an item and what follows it */
static void item_tail(jsc *c, rf_gseq *s, int32_t more) {
    rf_gseq_ref(s, c->ws);
    rf_gseq_ref(s, c->value);
    rf_gseq_ref(s, c->ws);
    rf_gseq_ref(s, more);
}

/* value, object, array: any JSON (mutually recursive). */
static int32_t build_containers(jsc *c) {
    rf_grammar *g = c->g;
    rf_gseq s = {0};
    c->value = rf_grammar_rule(g);
    c->object = rf_grammar_rule(g);
    c->array = rf_grammar_rule(g);
    int32_t alts[] = {c->object, c->array, c->string, c->number, c->boolean, c->null_};
    for (int i = 0; i < 6; i++) {
        if (i) rf_gseq_alt(&s);
        rf_gseq_ref(&s, alts[i]);
    }
    if (c->value < 0 || rf_grammar_define(g, c->value, &s)) return fail(c, "%s", "out of memory");
    /* members ::= "," ws string ws ":" ws value ws members | "" */
    int32_t more = rf_grammar_rule(g);
    lit(c, &s, ",");
    member_tail(c, &s, more);
    rf_gseq_alt(&s);
    if (more < 0 || rf_grammar_define(g, more, &s)) return fail(c, "%s", "out of memory");
    lit(c, &s, "{");
    member_tail(c, &s, more);
    lit(c, &s, "}");
    rf_gseq_alt(&s);
    lit(c, &s, "{");
    rf_gseq_ref(&s, c->ws);
    lit(c, &s, "}");
    if (c->object < 0 || rf_grammar_define(g, c->object, &s)) return fail(c, "%s", "out of memory");
    int32_t imore = rf_grammar_rule(g);
    lit(c, &s, ",");
    item_tail(c, &s, imore);
    rf_gseq_alt(&s);
    if (imore < 0 || rf_grammar_define(g, imore, &s)) return fail(c, "%s", "out of memory");
    lit(c, &s, "[");
    item_tail(c, &s, imore);
    lit(c, &s, "]");
    rf_gseq_alt(&s);
    lit(c, &s, "[");
    rf_gseq_ref(&s, c->ws);
    lit(c, &s, "]");
    if (c->array < 0 || rf_grammar_define(g, c->array, &s)) return fail(c, "%s", "out of memory");
    return c->oom ? -1 : 0;
}

#define schema srv_jsc_schema
#define literal srv_jsc_literal

void srv_jsc_literal(jsc *c, rf_gseq *s, json_t *v) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) {
        s->oom = true;
        return;
    }
    lit(c, s, t);
    free(t);
}

static const char *const KNOWN[] = {"type", "properties", "required", "enum", "const", "items", "additionalProperties",
                                    "anyOf", "oneOf", "minItems", "maxItems", "title", "description", "$schema",
                                    "default", "examples", "$comment", "strict", "minLength", "maxLength", "pattern",
                                    "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                    "$ref", "$defs", "definitions", NULL};

static int32_t object_schema(jsc *c, json_t *sc, int depth) {
    json_t *props = json_object_get(sc, "properties"), *req = json_object_get(sc, "required");
    json_t *ap = json_object_get(sc, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, "'%s' must be an object", "properties");
    if (req && !json_is_array(req)) return fail(c, "'%s' must be an array", "required");
    if (ap && !json_is_boolean(ap) && !json_is_object(ap)) return fail(c, "'%s' must be a boolean or a schema", "additionalProperties");
    if (ap && json_is_object(ap) && json_object_size(ap) > 0) return fail(c, "unsupported JSON Schema keyword '%s' (a schema for extra properties)", "additionalProperties");
    size_t np = props ? json_object_size(props) : 0;
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) return fail(c, "'%s' must list property names", "required");
        if (!props || !json_object_get(props, json_string_value(r)))
            return fail(c, "'required' names '%.64s', which 'properties' does not define", json_string_value(r));
    }
    rf_gseq s = {0};
    if (np == 0) {
        if (ap && json_is_false(ap)) {
            lit(c, &s, "{");
            rf_gseq_ref(&s, c->ws);
            lit(c, &s, "}");
            return def(c, &s);
        }
        return c->object;
    }
    /* rest[i][k]: properties i.. ; k = 1 when one was written before (a comma is due) */
    int32_t(*rest)[2] = calloc(np + 1, sizeof *rest);
    if (!rest) return fail(c, "%s", "out of memory");
    for (size_t i = 0; i <= np; i++)
        for (int k = 0; k < 2; k++) rest[i][k] = rf_grammar_rule(c->g);
    int32_t ret = 0;
    rf_gseq e = {0};
    for (int k = 0; k < 2; k++) {
        rf_gseq_alt(&e); /* rest[np] ::= "" */
        if (rest[np][k] < 0 || rf_grammar_define(c->g, rest[np][k], &e)) ret = -1;
    }
    const char *key;
    json_t *val;
    size_t i = 0;
    void *it = json_object_iter(props);
    int32_t *kv = calloc(np, sizeof *kv);
    bool *optional = calloc(np, sizeof *optional);
    if (!kv || !optional) ret = -1;
    for (; ret == 0 && it; it = json_object_iter_next(props, it), i++) {
        key = json_object_iter_key(it);
        val = json_object_iter_value(it);
        int32_t v = schema(c, val, depth + 1);
        if (v < 0) {
            ret = -1;
            break;
        }
        json_t *ks = json_string(key);
        literal(c, &s, ks);
        json_decref(ks);
        rf_gseq_ref(&s, c->ws);
        lit(c, &s, ":");
        rf_gseq_ref(&s, c->ws);
        rf_gseq_ref(&s, v);
        rf_gseq_ref(&s, c->ws);
        kv[i] = def(c, &s);
        optional[i] = true;
        for (size_t j = 0; req && j < json_array_size(req); j++)
            if (!strcmp(json_string_value(json_array_get(req, j)), key)) optional[i] = false;
    }
    for (size_t j = np; ret == 0 && j-- > 0;)
        for (int k = 0; k < 2; k++) {
            if (k) {
                lit(c, &s, ",");
                rf_gseq_ref(&s, c->ws);
            }
            rf_gseq_ref(&s, kv[j]);
            rf_gseq_ref(&s, rest[j + 1][1]);
            if (optional[j]) {
                rf_gseq_alt(&s);
                rf_gseq_ref(&s, rest[j + 1][k]);
            }
            if (rf_grammar_define(c->g, rest[j][k], &s)) ret = -1;
        }
    if (ret == 0) {
        lit(c, &s, "{");
        rf_gseq_ref(&s, c->ws);
        rf_gseq_ref(&s, rest[0][0]);
        lit(c, &s, "}");
        ret = def(c, &s);
    }
    rf_gseq_free(&s);
    free(rest);
    free(kv);
    free(optional);
    return ret < 0 ? fail(c, "%s", "the grammar is too large") : ret;
}

static int32_t array_schema(jsc *c, json_t *sc, int depth) {
    json_t *items = json_object_get(sc, "items"), *mn = json_object_get(sc, "minItems"), *mx = json_object_get(sc, "maxItems");
    if (mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) return fail(c, "'%s' must be an integer >= 0", "minItems");
    if (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0)) return fail(c, "'%s' must be an integer >= 0", "maxItems");
    long lo = mn ? (long)json_integer_value(mn) : 0, hi = mx ? (long)json_integer_value(mx) : -1;
    if (lo > MAX_ITEMS || hi > MAX_ITEMS) return fail(c, "'%s' above 64 is not supported", lo > MAX_ITEMS ? "minItems" : "maxItems");
    if (hi >= 0 && hi < lo) return fail(c, "'%s' is below minItems", "maxItems");
    if (items && json_is_array(items)) return fail(c, "unsupported JSON Schema keyword '%s' (tuple form)", "items");
    int32_t it = items ? schema(c, items, depth + 1) : c->value;
    if (it < 0) return -1;
    rf_gseq s = {0};
    /* tail(k): after k items; unbounded: star ::= "," ws item ws star | "" */
    int32_t star = -1;
    if (hi < 0) {
        star = rf_grammar_rule(c->g);
        lit(c, &s, ",");
        rf_gseq_ref(&s, c->ws);
        rf_gseq_ref(&s, it);
        rf_gseq_ref(&s, c->ws);
        rf_gseq_ref(&s, star);
        rf_gseq_alt(&s);
        if (star < 0 || rf_grammar_define(c->g, star, &s)) return fail(c, "%s", "out of memory");
    }
    /* opt_k ::= "" | "," ws item ws opt_{k+1}, unrolled from the end (hi - 1 items written) */
    int32_t next = star;
    long top = hi < 0 ? lo : hi;
    if (top < 1) top = 1;
    if (hi >= 0) {
        rf_gseq_alt(&s);
        next = def(c, &s); /* after hi items: nothing more */
    }
    /* after k items (k from top-1 down to 1): "," item ... optional when k >= lo */
    for (long k = top - 1; k >= 1; k--) {
        lit(c, &s, ",");
        rf_gseq_ref(&s, c->ws);
        rf_gseq_ref(&s, it);
        rf_gseq_ref(&s, c->ws);
        rf_gseq_ref(&s, next);
        if (k >= lo) rf_gseq_alt(&s);
        next = def(c, &s);
        if (next < 0) return -1;
    }
    lit(c, &s, "[");
    rf_gseq_ref(&s, c->ws);
    if (hi != 0) {
        rf_gseq_ref(&s, it);
        rf_gseq_ref(&s, c->ws);
        rf_gseq_ref(&s, next);
        lit(c, &s, "]");
    }
    if (lo == 0 && hi != 0) {
        rf_gseq_alt(&s);
        lit(c, &s, "[");
        rf_gseq_ref(&s, c->ws);
        lit(c, &s, "]");
    } else if (hi == 0) {
        lit(c, &s, "]");
    }
    return def(c, &s);
}

static int32_t typed(jsc *c, json_t *sc, const char *t, int depth) {
    if (!strcmp(t, "object")) return object_schema(c, sc, depth);
    if (!strcmp(t, "array")) return array_schema(c, sc, depth);
    if (!strcmp(t, "string")) return srv_jsc_string(c, sc);
    if (!strcmp(t, "number")) return srv_jsc_number(c, sc, false);
    if (!strcmp(t, "integer")) return srv_jsc_number(c, sc, true);
    if (!strcmp(t, "boolean")) return c->boolean;
    if (!strcmp(t, "null")) return c->null_;
    return fail(c, "unknown type '%.40s'", t);
}

/* ---- $ref ---- */

static json_t *resolve(json_t *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *cur = root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char seg[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~') {
                if (p[1] == '0') ch = '~';
                else if (p[1] == '1') ch = '/';
                else return NULL;
                p++;
            }
            if (n + 1 >= sizeof seg) return NULL;
            seg[n++] = ch;
        }
        seg[n] = 0;
        cur = json_is_object(cur) ? json_object_get(cur, seg) : NULL;
        if (!cur) return NULL;
    }
    return cur;
}

static const char *const REF_SIBLINGS[] = {"$ref", "$defs", "definitions", "title", "description", "$comment",
                                           "$schema", "default", "examples", NULL};

static int32_t ref_schema(jsc *c, json_t *sc, int depth) {
    json_t *rv = json_object_get(sc, "$ref");
    if (!json_is_string(rv)) return srv_jsc_fail(c, "'%s' must be a string", "$ref");
    const char *key;
    json_t *v;
    json_object_foreach(sc, key, v) {
        bool ok = false;
        for (int i = 0; REF_SIBLINGS[i] && !ok; i++) ok = !strcmp(key, REF_SIBLINGS[i]);
        if (!ok) return srv_jsc_fail(c, "unsupported JSON Schema keyword '%.64s' beside '$ref'", key);
    }
    const char *ref = json_string_value(rv);
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].path, ref)) return c->refs[i].rule;
    json_t *target = c->root ? resolve(c->root, ref) : NULL;
    if (!target) return srv_jsc_fail(c, "'$ref' '%.100s' does not name a schema in this document (#/$defs/NAME, #/definitions/NAME, #)", ref);
    /* a chain of bare $refs back to itself would be a rule that is only itself */
    json_t *t2 = target;
    for (int k = 0; json_is_object(t2) && json_is_string(json_object_get(t2, "$ref")); k++) {
        if (k > 32 || !strcmp(json_string_value(json_object_get(t2, "$ref")), ref))
            return srv_jsc_fail(c, "'$ref' '%.100s' refers to itself without any text between (a cycle)", ref);
        t2 = c->root ? resolve(c->root, json_string_value(json_object_get(t2, "$ref"))) : NULL;
    }
    jsc_ref *t = realloc(c->refs, (c->n_refs + 1) * sizeof *t);
    char *path = strdup(ref);
    int32_t r = rf_grammar_rule(c->g);
    if (!t || !path || r < 0) {
        if (t) c->refs = t;
        free(path);
        return srv_jsc_fail(c, "%s", "out of memory");
    }
    c->refs = t;
    c->refs[c->n_refs++] = (jsc_ref){path, r};
    int32_t body = srv_jsc_schema(c, target, depth + 1);
    if (body < 0) return -1;
    rf_gseq s = {0};
    rf_gseq_ref(&s, body);
    if (rf_grammar_define(c->g, r, &s)) {
        rf_gseq_free(&s);
        return srv_jsc_fail(c, "%s", "the grammar is too large");
    }
    return r;
}

int32_t srv_jsc_schema(jsc *c, json_t *sc, int depth) {
    if (depth > MAX_SCHEMA_DEPTH) return fail(c, "%s", "the schema nests too deeply");
    if (json_is_true(sc)) return c->value;
    if (!json_is_object(sc)) return fail(c, "%s", "a schema must be an object");
    if (json_object_size(sc) == 0) return c->value;
    const char *key;
    json_t *v;
    json_object_foreach(sc, key, v) {
        bool ok = false;
        for (int i = 0; KNOWN[i] && !ok; i++) ok = !strcmp(key, KNOWN[i]);
        if (!ok) return fail(c, "unsupported JSON Schema keyword '%.64s'", key);
    }
    if (json_object_get(sc, "$ref")) return ref_schema(c, sc, depth);
    rf_gseq s = {0};
    json_t *en = json_object_get(sc, "enum"), *cn = json_object_get(sc, "const");
    if (cn) {
        literal(c, &s, cn);
        return def(c, &s);
    }
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) return fail(c, "'%s' must be a non-empty array", "enum");
        for (size_t i = 0; i < json_array_size(en); i++) {
            if (i) rf_gseq_alt(&s);
            literal(c, &s, json_array_get(en, i));
        }
        return def(c, &s);
    }
    json_t *any = json_object_get(sc, "anyOf");
    if (!any) any = json_object_get(sc, "oneOf");
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0) return fail(c, "'%s' must be a non-empty array", "anyOf");
        int32_t *sub = calloc(json_array_size(any), sizeof *sub);
        if (!sub) return fail(c, "%s", "out of memory");
        for (size_t i = 0; i < json_array_size(any); i++)
            if ((sub[i] = schema(c, json_array_get(any, i), depth + 1)) < 0) {
                free(sub);
                return -1;
            }
        for (size_t i = 0; i < json_array_size(any); i++) {
            if (i) rf_gseq_alt(&s);
            rf_gseq_ref(&s, sub[i]);
        }
        free(sub);
        return def(c, &s);
    }
    json_t *ty = json_object_get(sc, "type");
    if (json_is_string(ty)) return typed(c, sc, json_string_value(ty), depth);
    if (json_is_array(ty) && json_array_size(ty) > 0) {
        int32_t sub[8];
        size_t n = json_array_size(ty);
        if (n > 8) return fail(c, "%s", "'type' lists too many types");
        for (size_t i = 0; i < n; i++) {
            json_t *ti = json_array_get(ty, i);
            if (!json_is_string(ti)) return fail(c, "%s", "'type' must be a string or an array of strings");
            if ((sub[i] = typed(c, sc, json_string_value(ti), depth)) < 0) return -1;
        }
        for (size_t i = 0; i < n; i++) {
            if (i) rf_gseq_alt(&s);
            rf_gseq_ref(&s, sub[i]);
        }
        return def(c, &s);
    }
    if (ty) return fail(c, "%s", "'type' must be a string or an array of strings");
    if (json_object_get(sc, "properties")) return object_schema(c, sc, depth);
    if (json_object_get(sc, "items")) return array_schema(c, sc, depth);
    if (srv_jsc_has_typed_kw(sc)) return fail(c, "%s", "a string or number keyword (pattern, format, minLength, minimum, ...) needs 'type'");
    return c->value;
}

int srv_jsc_finish(jsc *c, int32_t body, rf_grammar **out) {
    if (body < 0) return -1;
    rf_gseq s = {0};
    rf_gseq_ref(&s, body);
    rf_gseq_ref(&s, c->ws);
    int32_t root = def(c, &s);
    if (root < 0 || rf_grammar_finish(c->g, root)) return fail(c, "%s", "the grammar is invalid");
    rf_gmatch *m = NULL; /* left recursion (a $ref reached before any text) shows at the start */
    if (rf_gmatch_new(c->g, &m)) return fail(c, "%s", "the schema refers to itself before any text ('$ref' left recursion)");
    rf_gmatch_free(m);
    *out = c->g;
    c->g = NULL;
    return 0;
}

bool srv_jsc_begin(jsc *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->err = err;
    c->errlen = errlen;
    if (err && errlen) err[0] = 0;
    c->g = rf_grammar_new();
    if (!c->g) return fail(c, "%s", "out of memory"), false;
    return build_base(c) == 0;
}

void srv_jsc_forget_refs(jsc *c) {
    for (size_t i = 0; i < c->n_refs; i++) free(c->refs[i].path);
    c->n_refs = 0;
}

void srv_jsc_end(jsc *c) {
    rf_grammar_unref(c->g);
    c->g = NULL;
    srv_jsc_forget_refs(c);
    free(c->refs);
    c->refs = NULL;
}

int srv_json_grammar(json_t *sc, rf_grammar **out, char *err, size_t errlen) {
    jsc c;
    *out = NULL;
    int r = -1;
    if (srv_jsc_begin(&c, err, errlen)) {
        c.root = sc;
        r = srv_jsc_finish(&c, sc ? schema(&c, sc, 0) : c.object, out);
    }
    srv_jsc_end(&c);
    return r;
}
