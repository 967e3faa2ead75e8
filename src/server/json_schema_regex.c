/* json_schema_regex.c — a regular-expression subset (JSON Schema "pattern", and the regexes that
 * json_schema_kw.c writes for formats and integer ranges) compiled to grammar rules. Full match;
 * anchors are handled by the caller. Constructs outside the subset fail with err naming them. */
#include <string.h>

#include "json_schema_int.h"

#define RX_MAX_REPEAT 64 /* {n,m}: the grammar is unrolled */
#define RX_MAX_DEPTH 32

typedef struct rx {
    jsc *c;
    const char *p, *end;
    int depth;
} rx;

static int32_t rx_fail(rx *r, const char *what) {
    return srv_jsc_fail(r->c, "unsupported regex construct in 'pattern': %s", what);
}

/* Printable ASCII other than '"' and '\\': what '.' and negated classes match, and the only
 * single bytes a pattern may produce (the text is the inside of a JSON string). */
static void safe_set(rf_gclass *k) {
    rf_gclass_set(k, 0x20, 0x7e);
    k->bits['"' >> 3] &= (uint8_t)~(1u << ('"' & 7));
    k->bits['\\' >> 3] &= (uint8_t)~(1u << ('\\' & 7));
}

static bool safe(unsigned b) { return b >= 0x20 && b <= 0x7e && b != '"' && b != '\\'; }

static int32_t class_rule(rx *r, const rf_gclass *k) {
    rf_gseq s = {0};
    rf_gseq_class(r->c->g, &s, k);
    return srv_jsc_def(r->c, &s);
}

/* \d \w \s (and negations) into k; 1 when e was one of them */
static int shorthand(rf_gclass *k, char e) {
    rf_gclass t = {{0}};
    switch (e | 0x20) {
    case 'd': rf_gclass_set(&t, '0', '9'); break;
    case 'w':
        rf_gclass_set(&t, '0', '9');
        rf_gclass_set(&t, 'a', 'z');
        rf_gclass_set(&t, 'A', 'Z');
        rf_gclass_set(&t, '_', '_');
        break;
    case 's': rf_gclass_set(&t, ' ', ' '); break; /* tab/newline would need JSON escapes */
    default: return 0;
    }
    if (e >= 'A' && e <= 'Z') { /* \D \W \S: the safe set minus t */
        rf_gclass all = {{0}};
        safe_set(&all);
        for (int i = 0; i < 32; i++) t.bits[i] = (uint8_t)(all.bits[i] & ~t.bits[i]);
    }
    for (int i = 0; i < 32; i++) k->bits[i] |= t.bits[i];
    return 1;
}

/* an escaped literal: regex punctuation only */
static int escaped_literal(char e) { return e && strchr(".*+?()[]{}|^$-/:,=!<>#&~%@'", e) != NULL; }

static int32_t rx_class(rx *r) {
    rf_gclass k = {{0}};
    bool neg = false;
    if (r->p < r->end && *r->p == '^') neg = true, r->p++;
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        unsigned lo = (unsigned char)*r->p++;
        if (lo == '\\') {
            if (r->p >= r->end) return rx_fail(r, "a trailing '\\'");
            char e = *r->p++;
            if (shorthand(&k, e)) continue;
            if (!escaped_literal(e) && e != ']' && e != '\\') return rx_fail(r, "an escape other than \\d \\w \\s or punctuation");
            lo = (unsigned char)e;
        }
        unsigned hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            hi = (unsigned char)*r->p++;
            if (hi == '\\') {
                if (r->p >= r->end || !escaped_literal(*r->p)) return rx_fail(r, "an escape as a range's end");
                hi = (unsigned char)*r->p++;
            }
            if (hi < lo) return rx_fail(r, "a reversed range in a class");
        }
        if (lo >= 0x80 || hi >= 0x80) return rx_fail(r, "a non-ASCII character in a class");
        rf_gclass_set(&k, lo, hi);
    }
    if (r->p >= r->end) return rx_fail(r, "an unterminated '['");
    r->p++;
    rf_gclass all = {{0}};
    safe_set(&all);
    for (int i = 0; i < 32; i++) k.bits[i] = (uint8_t)(all.bits[i] & (neg ? ~k.bits[i] : k.bits[i]));
    for (int i = 0; i < 32; i++)
        if (k.bits[i]) return class_rule(r, &k);
    return rx_fail(r, "a class that admits no printable character other than '\"' and '\\'");
}

static int32_t rx_alt(rx *r);

static int32_t rx_atom(rx *r) {
    rf_gseq s = {0};
    unsigned b = (unsigned char)*r->p++;
    if (b == '(') {
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
            else return rx_fail(r, "lookaround or a named group '(?'");
        }
        if (++r->depth > RX_MAX_DEPTH) return rx_fail(r, "groups nested too deeply");
        int32_t a = rx_alt(r);
        r->depth--;
        if (a < 0) return -1;
        if (r->p >= r->end || *r->p != ')') return rx_fail(r, "an unbalanced '('");
        r->p++;
        return a;
    }
    if (b == '[') return rx_class(r);
    if (b == '.') {
        rf_gclass k = {{0}};
        safe_set(&k);
        return class_rule(r, &k);
    }
    if (b == '\\') {
        if (r->p >= r->end) return rx_fail(r, "a trailing '\\'");
        char e = *r->p++;
        rf_gclass k = {{0}};
        if (shorthand(&k, e)) return class_rule(r, &k);
        if (e >= '1' && e <= '9') return rx_fail(r, "a backreference");
        if (e == 'b' || e == 'B') return rx_fail(r, "a word boundary");
        if (!escaped_literal(e)) return rx_fail(r, "an escape other than \\d \\w \\s \\D \\W \\S or escaped punctuation");
        b = (unsigned char)e;
    } else if (b == '^' || b == '$') {
        return rx_fail(r, "an anchor other than a leading '^' or a trailing '$'");
    } else if (b == '*' || b == '+' || b == '?' || b == '{') {
        return rx_fail(r, "a quantifier with nothing to repeat");
    }
    if (b >= 0x80) { /* a UTF-8 character as a literal */
        const char *st = r->p - 1;
        while (r->p < r->end && ((unsigned char)*r->p & 0xC0) == 0x80) r->p++;
        rf_gseq_lit(r->c->g, &s, st, (size_t)(r->p - st));
        return srv_jsc_def(r->c, &s);
    }
    if (!safe(b)) return rx_fail(r, "a control character, '\"' or '\\\\' (they need JSON escapes)");
    char ch = (char)b;
    rf_gseq_lit(r->c->g, &s, &ch, 1);
    return srv_jsc_def(r->c, &s);
}

static bool rx_number(rx *r, long *v) {
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return false;
    *v = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        *v = *v * 10 + (*r->p++ - '0');
        if (*v > 100000) return false;
    }
    return true;
}

/* star ::= a star | "" */
static int32_t star_of(rx *r, int32_t a) {
    rf_gseq s = {0};
    int32_t st = rf_grammar_rule(r->c->g);
    rf_gseq_ref(&s, a);
    rf_gseq_ref(&s, st);
    rf_gseq_alt(&s);
    if (st < 0 || rf_grammar_define(r->c->g, st, &s)) {
        rf_gseq_free(&s);
        return srv_jsc_fail(r->c, "%s", "the grammar is too large");
    }
    return st;
}

/* a{lo,hi} (hi < 0: unbounded) appended to s */
static int rx_repeat(rx *r, rf_gseq *s, int32_t a, long lo, long hi) {
    if (lo > RX_MAX_REPEAT || hi > RX_MAX_REPEAT) return rx_fail(r, "a repeat count above 64");
    for (long i = 0; i < lo; i++) rf_gseq_ref(s, a);
    if (hi < 0) {
        int32_t st = star_of(r, a);
        if (st < 0) return -1;
        rf_gseq_ref(s, st);
        return 0;
    }
    int32_t next = -1; /* opt_k ::= a opt_{k+1} | "" built from the end */
    for (long k = hi - lo; k > 0; k--) {
        rf_gseq t = {0};
        rf_gseq_ref(&t, a);
        if (next >= 0) rf_gseq_ref(&t, next);
        rf_gseq_alt(&t);
        if ((next = srv_jsc_def(r->c, &t)) < 0) return -1;
    }
    if (next >= 0) rf_gseq_ref(s, next);
    return 0;
}

/* seq ::= (atom quantifier?)* ; appended to s */
static int rx_seq(rx *r, rf_gseq *s) {
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        int32_t a = rx_atom(r);
        if (a < 0) return -1;
        long lo = 1, hi = 1;
        if (r->p < r->end) {
            char q = *r->p;
            if (q == '*') lo = 0, hi = -1, r->p++;
            else if (q == '+') lo = 1, hi = -1, r->p++;
            else if (q == '?') lo = 0, hi = 1, r->p++;
            else if (q == '{') {
                r->p++;
                if (!rx_number(r, &lo)) return rx_fail(r, "a '{' that is not {n}, {n,} or {n,m}");
                hi = lo;
                if (r->p < r->end && *r->p == ',') {
                    r->p++;
                    if (!rx_number(r, &hi)) hi = -1;
                }
                if (r->p >= r->end || *r->p != '}') return rx_fail(r, "a '{' that is not {n}, {n,} or {n,m}");
                r->p++;
                if (hi >= 0 && hi < lo) return rx_fail(r, "{n,m} with m < n");
            }
            if (r->p < r->end && *r->p == '?' && (lo != 1 || hi != 1)) r->p++; /* lazy: same language */
            if (r->p < r->end && (*r->p == '+' || *r->p == '*' || *r->p == '{') && (lo != 1 || hi != 1))
                return rx_fail(r, "a possessive or doubled quantifier");
        }
        if (rx_repeat(r, s, a, lo, hi)) return -1;
    }
    return 0;
}

static int32_t rx_alt(rx *r) {
    rf_gseq s = {0};
    for (;;) {
        if (rx_seq(r, &s)) {
            rf_gseq_free(&s);
            return -1;
        }
        if (r->p < r->end && *r->p == '|') {
            r->p++;
            rf_gseq_alt(&s);
            continue;
        }
        break;
    }
    return srv_jsc_def(r->c, &s);
}

int32_t srv_jsc_regex(jsc *c, const char *re, size_t n) {
    rx r = {c, re, re + n, 0};
    int32_t a = rx_alt(&r);
    if (a < 0) return -1;
    if (r.p != r.end) return rx_fail(&r, "an unbalanced ')'");
    return a;
}
