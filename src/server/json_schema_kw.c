/* json_schema_kw.c — the JSON Schema keywords that bound a string or a number (minLength,
 * maxLength, pattern, format, minimum, maximum, exclusiveMinimum, exclusiveMaximum), compiled to
 * grammar rules for json_schema.c (formats and integer ranges through json_schema_regex.c). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema_int.h"

#define MAX_LEN 256                  /* minLength/maxLength: the grammar is unrolled */
#define INT_LIM 9999999999999999LL   /* 16 digits: the unbounded side of an integer range */
#define RE_MAX 65536

static const char *const STRING_KW[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const NUMBER_KW[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

bool srv_jsc_has_typed_kw(json_t *sc) {
    for (int i = 0; STRING_KW[i]; i++)
        if (json_object_get(sc, STRING_KW[i])) return true;
    for (int i = 0; NUMBER_KW[i]; i++)
        if (json_object_get(sc, NUMBER_KW[i])) return true;
    return false;
}

/* Formats as regexes of the subset. Dates admit days 29-31 only in the months that have them
 * at all (February stops at 28: every leap year needs no arithmetic that way); years 1000-2999. */
#define RE_DATE "[12][0-9]{3}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)"
#define RE_TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define RE_OCTET "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
static const struct {
    const char *name, *re;
} FORMATS[] = {
    {"date", RE_DATE},
    {"time", RE_TIME},
    {"date-time", RE_DATE "T" RE_TIME},
    {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
    {"email", "[A-Za-z0-9._+-]{1,32}@[A-Za-z0-9-]{1,32}(\\.[A-Za-z0-9-]{1,32}){1,3}"},
    {"ipv4", RE_OCTET "\\." RE_OCTET "\\." RE_OCTET "\\." RE_OCTET},
    {NULL, NULL},
};

static int32_t quoted(jsc *c, int32_t body) {
    if (body < 0) return -1;
    rf_gseq s = {0};
    rf_gseq_lit(c->g, &s, "\"", 1);
    rf_gseq_ref(&s, body);
    rf_gseq_lit(c->g, &s, "\"", 1);
    return srv_jsc_def(c, &s);
}

/* pattern: a search, so an unanchored side admits any characters there */
static int32_t pattern(jsc *c, const char *re) {
    size_t n = strlen(re);
    bool head = n && re[0] == '^', tail = n > (size_t)head && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    int32_t core = srv_jsc_regex(c, re + head, n - head - tail);
    if (core < 0) return -1;
    rf_gseq s = {0};
    int32_t any = -1;
    if (!head || !tail) { /* any ::= ch any | "" */
        any = rf_grammar_rule(c->g);
        rf_gseq_ref(&s, c->ch);
        rf_gseq_ref(&s, any);
        rf_gseq_alt(&s);
        if (any < 0 || rf_grammar_define(c->g, any, &s)) return srv_jsc_fail(c, "%s", "the grammar is too large");
    }
    if (!head) rf_gseq_ref(&s, any);
    rf_gseq_ref(&s, core);
    if (!tail) rf_gseq_ref(&s, any);
    return quoted(c, srv_jsc_def(c, &s));
}

static int32_t length_bounded(jsc *c, long lo, long hi) {
    rf_gseq s = {0};
    int32_t next = -1;
    if (hi < 0) { /* after lo characters, any number more */
        next = rf_grammar_rule(c->g);
        rf_gseq_ref(&s, c->ch);
        rf_gseq_ref(&s, next);
        rf_gseq_alt(&s);
        if (next < 0 || rf_grammar_define(c->g, next, &s)) return srv_jsc_fail(c, "%s", "the grammar is too large");
    }
    for (long k = hi - lo; hi >= 0 && k > 0; k--) {
        rf_gseq_ref(&s, c->ch);
        if (next >= 0) rf_gseq_ref(&s, next);
        rf_gseq_alt(&s);
        if ((next = srv_jsc_def(c, &s)) < 0) return -1;
    }
    for (long i = 0; i < lo; i++) rf_gseq_ref(&s, c->ch);
    if (next >= 0) rf_gseq_ref(&s, next);
    return quoted(c, srv_jsc_def(c, &s));
}

int32_t srv_jsc_string(jsc *c, json_t *sc) {
    json_t *mn = json_object_get(sc, "minLength"), *mx = json_object_get(sc, "maxLength");
    json_t *pt = json_object_get(sc, "pattern"), *fm = json_object_get(sc, "format");
    if (mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) return srv_jsc_fail(c, "'%s' must be an integer >= 0", "minLength");
    if (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0)) return srv_jsc_fail(c, "'%s' must be an integer >= 0", "maxLength");
    if (pt && !json_is_string(pt)) return srv_jsc_fail(c, "'%s' must be a string", "pattern");
    if (fm && !json_is_string(fm)) return srv_jsc_fail(c, "'%s' must be a string", "format");
    if ((pt || fm) && (mn || mx)) return srv_jsc_fail(c, "%s", "minLength/maxLength together with 'pattern' or 'format' is not supported");
    if (pt && fm) return srv_jsc_fail(c, "%s", "'pattern' together with 'format' is not supported");
    if (pt) return pattern(c, json_string_value(pt));
    if (fm) {
        const char *f = json_string_value(fm);
        for (int i = 0; FORMATS[i].name; i++)
            if (!strcmp(f, FORMATS[i].name)) return quoted(c, srv_jsc_regex(c, FORMATS[i].re, strlen(FORMATS[i].re)));
        return srv_jsc_fail(c, "unsupported JSON Schema 'format' '%.40s' (date, time, date-time, uuid, email, ipv4 are)", f);
    }
    if (!mn && !mx) return c->string;
    long lo = mn ? (long)json_integer_value(mn) : 0, hi = mx ? (long)json_integer_value(mx) : -1;
    if (lo > MAX_LEN || hi > MAX_LEN) return srv_jsc_fail(c, "'%s' above 256 is not supported", lo > MAX_LEN ? "minLength" : "maxLength");
    if (hi >= 0 && hi < lo) return srv_jsc_fail(c, "'%s' is below minLength", "maxLength");
    return length_bounded(c, lo, hi);
}

/* ---- integer ranges as regexes ---- */

typedef struct rbuf {
    char *p;
    size_t n, cap;
    bool bad;
} rbuf;

static void put(rbuf *b, const char *s) {
    size_t k = strlen(s);
    if (b->bad || b->n + k + 1 > RE_MAX) {
        b->bad = true;
        return;
    }
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + k + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->bad = true;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
}

static void putc_(rbuf *b, char ch) {
    char t[2] = {ch, 0};
    put(b, t);
}

static void any_digits(rbuf *b, size_t n) {
    if (!n) return;
    char t[40];
    snprintf(t, sizeof t, "[0-9]{%zu}", n);
    put(b, t);
}

/* the n-digit strings from a to b (same length, a <= b; leading zeros allowed here) */
static void range_same(rbuf *b, const char *a, const char *z, size_t n) {
    if (!n) return;
    if (a[0] == z[0]) {
        putc_(b, a[0]);
        range_same(b, a + 1, z + 1, n - 1);
        return;
    }
    bool a_low = strspn(a + 1, "0") == n - 1, z_high = strspn(z + 1, "9") == n - 1;
    char t[16];
    char lo = a_low ? a[0] : (char)(a[0] + 1), hi = z_high ? z[0] : (char)(z[0] - 1);
    put(b, "(");
    bool alt = false;
    if (!a_low) {
        char nines[24];
        memset(nines, '9', n - 1), nines[n - 1] = 0;
        putc_(b, a[0]);
        range_same(b, a + 1, nines, n - 1);
        alt = true;
    }
    if (lo <= hi) {
        if (alt) put(b, "|");
        snprintf(t, sizeof t, "[%c-%c]", lo, hi);
        put(b, t);
        any_digits(b, n - 1);
        alt = true;
    }
    if (!z_high) {
        char zeros[24];
        memset(zeros, '0', n - 1), zeros[n - 1] = 0;
        if (alt) put(b, "|");
        putc_(b, z[0]);
        range_same(b, zeros, z + 1, n - 1);
    }
    put(b, ")");
}

/* the decimal texts (no leading zeros) of the integers a..b, 0 <= a <= b */
static void uint_range(rbuf *b, long long a, long long z) {
    put(b, "(");
    bool alt = false;
    if (a == 0) {
        put(b, "0");
        alt = true;
        a = 1;
    }
    long long p = 1; /* 10^(L-1) */
    for (int len = 1; len <= 17 && a <= z; len++, p *= 10) {
        long long top = p * 10 - 1;
        if (a > top) continue;
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%lld", a < p ? p : a);
        snprintf(sz, sizeof sz, "%lld", z < top ? z : top);
        if (alt) put(b, "|");
        range_same(b, sa, sz, strlen(sa));
        alt = true;
        a = top + 1;
    }
    put(b, ")");
}

static void int_range(rbuf *b, long long lo, long long hi) {
    bool alt = false;
    put(b, "(");
    if (lo < 0) {
        put(b, "-");
        uint_range(b, hi < 0 ? -hi : 1, -lo);
        alt = true;
    }
    if (hi >= 0) {
        if (alt) put(b, "|");
        uint_range(b, lo > 0 ? lo : 0, hi);
    }
    put(b, ")");
}

static bool bound(jsc *c, json_t *sc, const char *kw, double *out) {
    json_t *v = json_object_get(sc, kw);
    if (!v) return true;
    if (!json_is_number(v)) return srv_jsc_fail(c, "'%s' must be a number", kw), false;
    *out = json_number_value(v);
    if (!isfinite(*out)) return srv_jsc_fail(c, "'%s' must be finite", kw), false;
    return true;
}

static long long clamp(double x) { return x < (double)-INT_LIM ? -INT_LIM : x > (double)INT_LIM ? INT_LIM : (long long)x; }

/* Integers: exactly the range. Numbers: the integers of [ceil(lower), floor(upper)] (exclusive
 * bounds likewise rounded inward) and fractions k.ddd only where all of [k, k+1) lies in that
 * range; no exponent. Every admitted number is valid; some valid non-integers are not admitted. */
int32_t srv_jsc_number(jsc *c, json_t *sc, bool integer) {
    double mn = -HUGE_VAL, mx = HUGE_VAL, emn = -HUGE_VAL, emx = HUGE_VAL;
    if (!bound(c, sc, "minimum", &mn) || !bound(c, sc, "maximum", &mx) || !bound(c, sc, "exclusiveMinimum", &emn) ||
        !bound(c, sc, "exclusiveMaximum", &emx))
        return -1;
    bool any = false;
    for (int i = 0; NUMBER_KW[i]; i++) any |= json_object_get(sc, NUMBER_KW[i]) != NULL;
    if (!any) return integer ? c->integer : c->number;
    long long lo = -INT_LIM, hi = INT_LIM;
    if (mn > -HUGE_VAL && clamp(ceil(mn)) > lo) lo = clamp(ceil(mn));
    if (emn > -HUGE_VAL && clamp(floor(emn) + 1) > lo) lo = clamp(floor(emn) + 1);
    if (mx < HUGE_VAL && clamp(floor(mx)) < hi) hi = clamp(floor(mx));
    if (emx < HUGE_VAL && clamp(ceil(emx) - 1) < hi) hi = clamp(ceil(emx) - 1);
    if (lo > hi) return srv_jsc_fail(c, "%s", "the number bounds admit no integer (minimum above maximum?)");
    rbuf b = {0};
    put(&b, "(");
    int_range(&b, lo, hi);
    if (!integer) {
        long long a = lo > 0 ? lo : 0;
        if (a <= hi - 1) { /* k.ddd for 0 <= k, [k, k+1) inside */
            put(&b, "|");
            uint_range(&b, a, hi - 1);
            put(&b, "\\.[0-9]{1,15}");
        }
        long long na = hi < 0 ? -hi : 0;
        if (lo <= -1 && na <= -lo - 1) { /* -m.ddd, (-(m+1), -m] inside */
            put(&b, "|-");
            uint_range(&b, na, -lo - 1);
            put(&b, "\\.[0-9]{1,15}");
        }
    }
    put(&b, ")");
    int32_t r = b.bad ? srv_jsc_fail(c, "%s", "the number bounds make the grammar too large")
                      : srv_jsc_regex(c, b.p, b.n);
    free(b.p);
    return r;
}
