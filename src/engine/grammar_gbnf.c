/* grammar_gbnf.c — GBNF text (llama.cpp's grammar notation: `name ::= ...`, "literals",
 * [classes], ., groups, | and the postfixes * + ? {m} {m,} {m,n}) parsed into a byte grammar.
 * Characters are UTF-8; a class with non-ASCII ranges is expanded into byte sequences. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_internal.h"

#define GBNF_MAX_NAMES 4096
#define GBNF_MAX_REPEAT 256
#define GBNF_MAX_CLASS_EXPAND 2048 /* non-ASCII code points one class may list */

typedef struct gp {
    rf_grammar *g;
    const char *s, *end;
    char *names[GBNF_MAX_NAMES];
    int32_t ids[GBNF_MAX_NAMES];
    bool defined[GBNF_MAX_NAMES];
    int n_names, line;
    char err[200];
    int32_t any_char; /* the rule for '.', built on first use */
} gp;

static bool perr(gp *p, const char *msg) {
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "grammar line %d: %s", p->line, msg);
    return false;
}

static void skip(gp *p, bool newlines) {
    while (p->s < p->end) {
        char c = *p->s;
        if (c == '#') {
            while (p->s < p->end && *p->s != '\n') p->s++;
        } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
            if (c == '\n') p->line++;
            p->s++;
        } else {
            break;
        }
    }
}

static bool is_name(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

static int32_t name_rule(gp *p, const char *n, size_t len, bool define) {
    for (int i = 0; i < p->n_names; i++)
        if (strlen(p->names[i]) == len && !memcmp(p->names[i], n, len)) {
            if (define && p->defined[i]) return perr(p, "a rule is defined twice"), -1;
            if (define) p->defined[i] = true;
            return p->ids[i];
        }
    if (p->n_names >= GBNF_MAX_NAMES) return perr(p, "too many rules"), -1;
    char *c = malloc(len + 1);
    int32_t id = c ? rf_grammar_rule(p->g) : -1;
    if (id < 0) {
        free(c);
        return perr(p, "out of memory"), -1;
    }
    memcpy(c, n, len);
    c[len] = 0;
    p->names[p->n_names] = c;
    p->ids[p->n_names] = id;
    p->defined[p->n_names++] = define;
    return id;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (escapes decoded): its code point, or -1. */
static long read_char(gp *p) {
    if (p->s >= p->end) return -1;
    unsigned char c = (unsigned char)*p->s++;
    if (c == '\\') {
        if (p->s >= p->end) return -1;
        char e = *p->s++;
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            long v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = p->s < p->end ? hexval(*p->s) : -1;
                if (h < 0) return -1;
                v = v * 16 + h;
                p->s++;
            }
            return v;
        }
        switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': return '\\';
        case '"': return '"';
        case '[': return '[';
        case ']': return ']';
        case '-': return '-';
        case '^': return '^';
        default: return -1;
        }
    }
    if (c < 0x80) return c;
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0 || p->end - p->s < n) return -1;
    long v = c & (0x3F >> n);
    for (int i = 0; i < n; i++) v = v << 6 | ((unsigned char)*p->s++ & 0x3F);
    return v;
}

static size_t utf8(long cp, char *b) {
    if (cp < 0x80) return b[0] = (char)cp, 1;
    if (cp < 0x800) return b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) return b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | (cp >> 6 & 0x3F)), b[2] = (char)(0x80 | (cp & 0x3F)), 3;
    b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | (cp >> 12 & 0x3F)), b[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Alternatives for any UTF-8 character of 2-4 bytes (appended to s after an alt). */
static void multibyte(rf_grammar *g, rf_gseq *s) {
    static const unsigned char u8[][4][2] = {
        {{0xC2, 0xDF}, {0x80, 0xBF}, {0, 0}, {0, 0}},          {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}, {0, 0}},
        {{0xE1, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}, {0, 0}},    {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
        {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}}, {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
    };
    for (size_t i = 0; i < sizeof u8 / sizeof u8[0]; i++) {
        rf_gseq_alt(s);
        for (int j = 0; j < 4 && u8[i][j][0]; j++) {
            rf_gclass k = {{0}};
            rf_gclass_set(&k, u8[i][j][0], u8[i][j][1]);
            rf_gseq_class(g, s, &k);
        }
    }
}

static int32_t define(gp *p, rf_gseq *s) {
    int32_t r = rf_grammar_rule(p->g);
    if (r < 0 || rf_grammar_define(p->g, r, s)) {
        rf_gseq_free(s);
        return perr(p, "out of memory or too large"), -1;
    }
    return r;
}

/* [class] after the '[': a rule of its characters. */
static int32_t parse_class(gp *p) {
    bool neg = p->s < p->end && *p->s == '^';
    if (neg) p->s++;
    rf_gclass ascii = {{0}};
    long ranges[64][2];
    int n_wide = 0;
    while (p->s < p->end && *p->s != ']') {
        long lo = read_char(p), hi = lo;
        if (lo < 0) return perr(p, "bad character in a class"), -1;
        if (p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
            p->s++;
            if ((hi = read_char(p)) < lo) return perr(p, "bad range in a class"), -1;
        }
        if (lo < 0x80) rf_gclass_set(&ascii, (unsigned)lo, (unsigned)(hi < 0x80 ? hi : 0x7F));
        if (hi >= 0x80) {
            if (n_wide == 64) return perr(p, "too many ranges in a class"), -1;
            ranges[n_wide][0] = lo < 0x80 ? 0x80 : lo;
            ranges[n_wide++][1] = hi;
        }
    }
    if (p->s >= p->end) return perr(p, "unterminated class"), -1;
    p->s++;
    rf_gseq s = {0};
    if (neg) {
        if (n_wide) return perr(p, "a negated class with non-ASCII characters is not supported"), -1;
        for (int b = 0; b < 32; b++) ascii.bits[b] = (uint8_t)~ascii.bits[b];
        for (int b = 16; b < 32; b++) ascii.bits[b] = 0; /* bytes >= 0x80: whole characters below */
        rf_gseq_class(p->g, &s, &ascii);
        multibyte(p->g, &s);
        return define(p, &s);
    }
    bool first = true;
    bool any_ascii = false;
    for (int b = 0; b < 16; b++) any_ascii |= ascii.bits[b] != 0;
    if (any_ascii) {
        rf_gseq_class(p->g, &s, &ascii);
        first = false;
    }
    long total = 0;
    for (int i = 0; i < n_wide; i++) {
        total += ranges[i][1] - ranges[i][0] + 1;
        if (total > GBNF_MAX_CLASS_EXPAND) {
            rf_gseq_free(&s);
            return perr(p, "a class with more than 2048 non-ASCII characters is not supported"), -1;
        }
        for (long cp = ranges[i][0]; cp <= ranges[i][1]; cp++) {
            char b[4];
            size_t n = utf8(cp, b);
            if (!first) rf_gseq_alt(&s);
            rf_gseq_lit(p->g, &s, b, n);
            first = false;
        }
    }
    if (first) return perr(p, "empty class"), -1;
    return define(p, &s);
}

static bool parse_alts(gp *p, rf_gseq *out, bool nested);

/* A decimal count within the text's bounds (the text need not end in a NUL): -1 when none. */
static long read_count(gp *p) {
    long v = -1;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (*p->s++ - '0');
        if (v > 1000000) v = 1000000;
    }
    return v;
}

/* A repetition of rule r from lo to hi (-1: unbounded) times, appended to s. */
static bool repeat(gp *p, rf_gseq *s, int32_t r, long lo, long hi) {
    if (lo > GBNF_MAX_REPEAT || hi > GBNF_MAX_REPEAT) return perr(p, "a repetition count above 256");
    for (long i = 0; i < lo; i++) rf_gseq_ref(s, r);
    if (hi < 0) { /* star ::= r star | "" */
        int32_t star = rf_grammar_rule(p->g);
        rf_gseq t = {0};
        rf_gseq_ref(&t, r);
        rf_gseq_ref(&t, star);
        rf_gseq_alt(&t);
        if (star < 0 || rf_grammar_define(p->g, star, &t)) return perr(p, "out of memory");
        rf_gseq_ref(s, star);
        return true;
    }
    int32_t next = -1; /* opt_k ::= r opt_{k-1} | "" */
    for (long i = lo; i < hi; i++) {
        rf_gseq t = {0};
        rf_gseq_ref(&t, r);
        if (next >= 0) rf_gseq_ref(&t, next);
        rf_gseq_alt(&t);
        if ((next = define(p, &t)) < 0) return false;
    }
    if (next >= 0) rf_gseq_ref(s, next);
    return true;
}

static bool parse_seq(gp *p, rf_gseq *s, bool nested) {
    for (;;) {
        skip(p, nested);
        if (p->s >= p->end) return true;
        char c = *p->s;
        rf_gseq frag = {0};
        if (c == '"') {
            p->s++;
            while (p->s < p->end && *p->s != '"') {
                long cp = read_char(p);
                if (cp < 0) return rf_gseq_free(&frag), perr(p, "bad character in a literal");
                char b[4];
                rf_gseq_lit(p->g, &frag, b, utf8(cp, b));
            }
            if (p->s >= p->end) return rf_gseq_free(&frag), perr(p, "unterminated literal");
            p->s++;
        } else if (c == '[') {
            p->s++;
            int32_t r = parse_class(p);
            if (r < 0) return false;
            rf_gseq_ref(&frag, r);
        } else if (c == '.') {
            p->s++;
            if (p->any_char < 0) {
                rf_gseq t = {0};
                rf_gclass k = {{0}};
                rf_gclass_set(&k, 0, 0x7F);
                rf_gseq_class(p->g, &t, &k);
                multibyte(p->g, &t);
                if ((p->any_char = define(p, &t)) < 0) return false;
            }
            rf_gseq_ref(&frag, p->any_char);
        } else if (c == '(') {
            p->s++;
            rf_gseq t = {0};
            if (!parse_alts(p, &t, true)) return rf_gseq_free(&t), false;
            skip(p, true);
            if (p->s >= p->end || *p->s != ')') return rf_gseq_free(&t), perr(p, "missing )");
            p->s++;
            int32_t r = define(p, &t);
            if (r < 0) return false;
            rf_gseq_ref(&frag, r);
        } else if (is_name(c)) {
            const char *n = p->s;
            while (p->s < p->end && is_name(*p->s)) p->s++;
            const char *save = p->s;
            skip(p, false);
            if (p->end - p->s >= 3 && !memcmp(p->s, "::=", 3)) { /* the next rule begins */
                p->s = n;
                return nested ? perr(p, "missing )") : true;
            }
            p->s = save;
            int32_t r = name_rule(p, n, (size_t)(save - n), false);
            if (r < 0) return false;
            rf_gseq_ref(&frag, r);
        } else {
            return true; /* '|', ')', newline: the caller decides */
        }
        /* postfix */
        long lo = 1, hi = 1;
        if (p->s < p->end && (*p->s == '*' || *p->s == '+' || *p->s == '?')) {
            lo = *p->s == '+' ? 1 : 0;
            hi = *p->s == '?' ? 1 : -1;
            p->s++;
        } else if (p->s < p->end && *p->s == '{') {
            p->s++;
            lo = read_count(p);
            if (lo < 0) return rf_gseq_free(&frag), perr(p, "bad {m,n}");
            hi = lo;
            if (p->s < p->end && *p->s == ',') {
                p->s++;
                hi = -1;
                if (p->s < p->end && *p->s != '}') {
                    hi = read_count(p);
                    if (hi < lo) return rf_gseq_free(&frag), perr(p, "bad {m,n}");
                }
            }
            if (p->s >= p->end || *p->s != '}') return rf_gseq_free(&frag), perr(p, "bad {m,n}");
            p->s++;
        }
        if (lo == 1 && hi == 1) {
            rf_gseq_append(s, &frag);
            rf_gseq_free(&frag);
        } else {
            int32_t r = define(p, &frag);
            if (r < 0 || !repeat(p, s, r, lo, hi)) return false;
        }
        if (s->oom) return perr(p, "out of memory");
    }
}

static bool parse_alts(gp *p, rf_gseq *out, bool nested) {
    for (;;) {
        if (!parse_seq(p, out, nested)) return false;
        skip(p, nested);
        if (p->s < p->end && *p->s == '|') {
            p->s++;
            rf_gseq_alt(out);
            continue;
        }
        return true;
    }
}

rf_status rf_grammar_parse_gbnf(const char *text, size_t len, rf_grammar **out) {
    *out = NULL;
    gp *p = calloc(1, sizeof *p);
    if (!p || !(p->g = rf_grammar_new())) {
        free(p);
        return rf_set_error(RF_ERR_OOM, "grammar: out of memory");
    }
    p->s = text;
    p->end = text + len;
    p->line = 1;
    p->any_char = -1;
    bool ok = true;
    for (;;) {
        skip(p, true);
        if (p->s >= p->end) break;
        const char *n = p->s;
        while (p->s < p->end && is_name(*p->s)) p->s++;
        size_t nl = (size_t)(p->s - n);
        skip(p, false);
        if (!nl || p->end - p->s < 3 || memcmp(p->s, "::=", 3)) {
            ok = perr(p, "expected 'name ::= ...'");
            break;
        }
        p->s += 3;
        skip(p, true);
        int32_t r = name_rule(p, n, nl, true);
        rf_gseq body = {0};
        if (r < 0 || !parse_alts(p, &body, false)) {
            rf_gseq_free(&body);
            ok = false;
            break;
        }
        skip(p, false);
        if (p->s < p->end && *p->s != '\n') {
            rf_gseq_free(&body);
            ok = perr(p, "unexpected character");
            break;
        }
        if (rf_grammar_define(p->g, r, &body)) {
            ok = perr(p, "out of memory");
            break;
        }
    }
    int32_t root = -1;
    for (int i = 0; ok && i < p->n_names; i++) {
        if (!p->defined[i]) {
            snprintf(p->err, sizeof p->err, "grammar: rule '%.64s' is used but not defined", p->names[i]);
            ok = false;
        }
        if (!strcmp(p->names[i], "root")) root = p->ids[i];
    }
    if (ok && root < 0) ok = perr(p, "no 'root' rule");
    rf_status st = RF_OK;
    if (ok && rf_grammar_finish(p->g, root)) ok = perr(p, rf_last_error());
    if (ok) { /* left recursion shows at the start */
        rf_gmatch *m;
        if (rf_gmatch_new(p->g, &m)) ok = perr(p, "the grammar is left-recursive or too ambiguous at its start");
        rf_gmatch_free(m);
    }
    if (ok) {
        *out = p->g;
    } else {
        st = rf_set_error(RF_ERR_INVALID_ARG, "%s", p->err[0] ? p->err : "grammar: invalid");
        rf_grammar_unref(p->g);
    }
    for (int i = 0; i < p->n_names; i++) free(p->names[i]);
    free(p);
    return st;
}
