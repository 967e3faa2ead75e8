/* jinja_eval.c — runs a parsed Jinja template: Python-like values, scopes as Jinja2 has them
 * (for-loop bodies and macros get their own scope, `if` does not), filters, tests, string and
 * dict methods, HF's tojson, and the resource limits that keep hostile templates finite. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_internal.h"

typedef struct scope {
    struct scope *parent;
    size_t n, cap;
    const char **k;
    jv *v;
} scope;

typedef struct jmacro {
    jnode *node;
    scope *def;
} jmacro;

typedef struct jloop {
    jlist *items;
    size_t i;
} jloop;

typedef struct sbuf {
    char *p;
    size_t n, cap;
    jspans *sp; /* data ranges of p[0..n) (NULL = none) */
    size_t sp_cap;
} sbuf;

typedef struct ctx {
    jarena a;
    jmp_buf jb;
    rf_status st;
    char msg[1024];
    bool raised;
    sbuf *out;
    size_t out_total;
    rf_jinja_limits lim;
    uint64_t steps;
    int depth;
    time_t now;
    int loopctl; /* 0, 1 = break, 2 = continue */
    int edepth;  /* expression evaluation depth */
    int rdepth;  /* value recursion depth (printing, comparing) */
    json_t *pending_json; /* a from_json tree being converted (freed on error) */
    const char *const *trusted; /* variables whose strings are template text, not data */
} ctx;

/* Guards against stack exhaustion: expression trees and values built by a template can nest
 * arbitrarily deep (a left-deep `a ~ b ~ ...` chain, `{% set ns.x = [ns.x] %}` in a loop). */
#define MAX_EVAL_DEPTH 1000
#define MAX_VALUE_DEPTH 512

static _Thread_local int g_last_raise;
int rf_jinja_last_error_was_raise(void) { return g_last_raise; }

enum { F_RANGE, F_NAMESPACE, F_RAISE, F_STRFTIME, F_DICT };
static const char *const FUNC_NAMES[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};

/* ---- errors --------------------------------------------------------------------------------- */

static void jfail(ctx *c, const jnode *at, rf_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
static void jfail(ctx *c, const jnode *at, rf_status st, const char *fmt, ...) {
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (at) snprintf(c->msg, sizeof c->msg, "chat template %d:%d: %s", at->line, at->col, m);
    else snprintf(c->msg, sizeof c->msg, "chat template: %s", m);
    c->st = st;
    longjmp(c->jb, 1);
}

static void step(ctx *c, const jnode *at) {
    if (++c->steps > c->lim.max_steps)
        jfail(c, at, RF_ERR_RANGE, "render exceeded %llu steps (loop or recursion limit)",
              (unsigned long long)c->lim.max_steps);
}

/* ---- values --------------------------------------------------------------------------------- */

static jv V_UNDEF(const char *why) { jv v = {.t = JV_UNDEF}; v.u.undef_name = why; return v; }
static jv V_NONE(void) { jv v = {.t = JV_NONE}; return v; }
static jv V_BOOL(bool b) { jv v = {.t = JV_BOOL}; v.u.b = b; return v; }
static jv V_INT(int64_t i) { jv v = {.t = JV_INT}; v.u.i = i; return v; }
static jv V_FLOAT(double f) { jv v = {.t = JV_FLOAT}; v.u.f = f; return v; }
static jv V_STR(const char *p, size_t n) { jv v = {.t = JV_STR}; v.u.s.p = p; v.u.s.n = n; return v; }
static jv V_CSTR(const char *p) { return V_STR(p, strlen(p)); }

static jlist *new_list(ctx *c, size_t n) {
    jlist *l = ja_alloc(&c->a, sizeof *l);
    l->n = n;
    l->v = ja_alloc(&c->a, (n ? n : 1) * sizeof(jv));
    return l;
}
static jv V_LIST(jlist *l) { jv v = {.t = JV_LIST}; v.u.l = l; return v; }
static jv V_GEN(jlist *l) { l->kind = JL_GEN; return V_LIST(l); }
static jv V_VIEW(jlist *l) { l->kind = JL_VIEW; return V_LIST(l); }
static jdict *new_dict(ctx *c) { return ja_alloc(&c->a, sizeof(jdict)); }
static jv V_DICT(jdict *d) { jv v = {.t = JV_DICT}; v.u.d = d; return v; }

static const char *type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->kind == JL_GEN ? "generator" : v.u.l->kind == JL_VIEW ? "view" : v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    }
    return "?";
}

static void undef_fail(ctx *c, const jnode *at, jv v) __attribute__((noreturn));
static void undef_fail(ctx *c, const jnode *at, jv v) {
    jfail(c, at, RF_ERR_FORMAT, "%s", v.u.undef_name ? v.u.undef_name : "value is undefined");
}

/* ---- string buffers (arena-backed) ----------------------------------------------------------- */

static void sb_reserve(ctx *c, sbuf *b, size_t extra) {
    if (b->cap - b->n >= extra + 1) return;
    if (extra > ((size_t)1 << 40)) jfail(c, NULL, RF_ERR_RANGE, "string too long");
    size_t nc = b->cap ? b->cap * 2 : 64;
    while (nc - b->n < extra + 1) nc *= 2;
    char *np = ja_alloc(&c->a, nc);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = nc;
}
static void sb_put(ctx *c, sbuf *b, const char *s, size_t n) {
    if (!n) return;
    sb_reserve(c, b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_puts(ctx *c, sbuf *b, const char *s) { sb_put(c, b, s, strlen(s)); }
static void sb_putc(ctx *c, sbuf *b, char ch) { sb_put(c, b, &ch, 1); }
static jv sb_val(sbuf *b) {
    jv v = V_STR(b->p ? b->p : "", b->n);
    v.u.s.d = b->sp;
    return v;
}

/* ---- data ranges (jspans, jinja_internal.h) -------------------------------------------------- */

/* Marks b's bytes [from, to) as data, merging with the last range when they touch. */
static void sb_mark(ctx *c, sbuf *b, size_t from, size_t to) {
    if (from >= to) return;
    jspans *d = b->sp;
    if (d && d->n && d->r[d->n - 1][1] >= from) {
        if (to > d->r[d->n - 1][1]) d->r[d->n - 1][1] = to;
        return;
    }
    if (!d || d->n == b->sp_cap) {
        size_t nc = b->sp_cap ? b->sp_cap * 2 : 4;
        jspans *nd = ja_alloc(&c->a, sizeof(jspans) + nc * sizeof d->r[0]);
        if (d) memcpy(nd, d, sizeof(jspans) + d->n * sizeof d->r[0]);
        b->sp = d = nd;
        b->sp_cap = nc;
    }
    d->r[d->n][0] = from;
    d->r[d->n][1] = to;
    d->n++;
}
/* Appends a string with its data ranges. */
static void sb_putv(ctx *c, sbuf *b, jv s) {
    size_t base = b->n;
    sb_put(c, b, s.u.s.p, s.u.s.n);
    const jspans *d = s.u.s.d;
    for (size_t k = 0; d && k < d->n; k++) sb_mark(c, b, base + d->r[k][0], base + d->r[k][1]);
}
static bool str_has_data(jv v) { return v.t == JV_STR && v.u.s.d && v.u.s.d->n; }
/* The string marked as data from end to end. */
static jv all_data(ctx *c, jv s) {
    if (s.t != JV_STR || !s.u.s.n) return s;
    jspans *d = ja_alloc(&c->a, sizeof(jspans) + sizeof d->r[0]);
    d->n = 1;
    d->r[0][0] = 0;
    d->r[0][1] = s.u.s.n;
    s.u.s.d = d;
    return s;
}
/* s[off, off + n) with its data ranges clipped and shifted */
static jv str_sub(ctx *c, jv s, size_t off, size_t n) {
    jv r = V_STR(s.u.s.p + off, n);
    const jspans *d = s.u.s.d;
    if (!d || !n) return r;
    size_t cnt = 0;
    for (size_t k = 0; k < d->n; k++) cnt += d->r[k][1] > off && d->r[k][0] < off + n;
    if (!cnt) return r;
    jspans *o = ja_alloc(&c->a, sizeof(jspans) + cnt * sizeof o->r[0]);
    for (size_t k = 0; k < d->n; k++) {
        if (d->r[k][1] <= off || d->r[k][0] >= off + n) continue;
        o->r[o->n][0] = (d->r[k][0] > off ? d->r[k][0] : off) - off;
        o->r[o->n][1] = (d->r[k][1] < off + n ? d->r[k][1] : off + n) - off;
        o->n++;
    }
    r.u.s.d = o;
    return r;
}
/* Whether a value holds data anywhere (lists and dicts searched; a very large value counts as
 * data without a full search: the answer only ever errs toward data). */
static bool has_data_n(jv v, size_t *budget) {
    if (!*budget) return true;
    --*budget;
    switch (v.t) {
    case JV_STR: return str_has_data(v);
    case JV_LIST:
        for (size_t k = 0; k < v.u.l->n; k++)
            if (has_data_n(v.u.l->v[k], budget)) return true;
        return false;
    case JV_DICT: case JV_NS:
        for (size_t k = 0; k < v.u.d->n; k++)
            if (has_data_n(v.u.d->k[k], budget) || has_data_n(v.u.d->v[k], budget)) return true;
        return false;
    default: return false;
    }
}
static bool has_data(jv v) {
    size_t budget = 100000;
    return has_data_n(v, &budget);
}

static void emit(ctx *c, const jnode *at, jv s) {
    c->out_total += s.u.s.n;
    if (c->out_total > c->lim.max_output)
        jfail(c, at, RF_ERR_RANGE, "render output exceeded %zu bytes", c->lim.max_output);
    sb_putv(c, c->out, s);
}

/* ---- UTF-8 and Python string helpers --------------------------------------------------------- */

static uint32_t u8dec(const char *s, size_t n, size_t *adv) {
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) { *adv = 0; return 0; }
    if (u[0] < 0x80) { *adv = 1; return u[0]; }
    int len = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 1;
    if ((size_t)len > n || len == 1) { *adv = 1; return u[0]; }
    uint32_t cp = u[0] & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) { *adv = 1; return u[0]; }
        cp = (cp << 6) | (u[k] & 0x3F);
    }
    *adv = (size_t)len;
    return cp;
}
/* start of the code point that ends at s[n-1] */
static size_t u8prev(const char *s, size_t n) {
    size_t k = n - 1;
    int back = 0;
    while (k > 0 && back < 3 && ((unsigned char)s[k] & 0xC0) == 0x80) { k--; back++; }
    size_t adv;
    u8dec(s + k, n - k, &adv);
    return k + adv == n ? k : n - 1;
}
static bool py_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == 32 || (cp >= 0x1c && cp <= 0x1f) || cp == 0x85 ||
           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}
static bool cp_in(uint32_t cp, const char *set, size_t n) {
    for (size_t k = 0; k < n;) {
        size_t adv;
        uint32_t x = u8dec(set + k, n - k, &adv);
        if (x == cp) return true;
        k += adv;
    }
    return false;
}
/* Python str.strip/lstrip/rstrip; chars NULL = whitespace */
static jv py_strip(ctx *c, jv s, const char *chars, size_t nch, bool left, bool right) {
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n;
    while (left && b < e) {
        size_t adv;
        uint32_t cp = u8dec(p + b, e - b, &adv);
        if (chars ? !cp_in(cp, chars, nch) : !py_space(cp)) break;
        b += adv;
    }
    while (right && e > b) {
        size_t k = u8prev(p + b, e - b) + b;
        size_t adv;
        uint32_t cp = u8dec(p + k, e - k, &adv);
        if (chars ? !cp_in(cp, chars, nch) : !py_space(cp)) break;
        e = k;
    }
    return str_sub(c, s, b, e - b);
}
static size_t cp_count(const char *s, size_t n) {
    size_t cnt = 0;
    for (size_t k = 0; k < n; k++)
        if (((unsigned char)s[k] & 0xC0) != 0x80) cnt++;
    return cnt;
}
/* byte offsets of each code point start, plus n at the end (array of cnt+1) */
static size_t *cp_offsets(ctx *c, const char *s, size_t n, size_t *cnt) {
    size_t m = cp_count(s, n);
    size_t *o = ja_alloc(&c->a, (m + 1) * sizeof(size_t));
    size_t j = 0;
    for (size_t k = 0; k < n; k++)
        if (((unsigned char)s[k] & 0xC0) != 0x80) o[j++] = k;
    o[m] = n;
    *cnt = m;
    return o;
}
static char *ascii_case(ctx *c, jv s, int mode) { /* 0 lower 1 upper 2 capitalize 3 title */
    char *o = ja_strndup(&c->a, s.u.s.p, s.u.s.n);
    bool start = true;
    for (size_t k = 0; k < s.u.s.n; k++) {
        unsigned char ch = (unsigned char)o[k];
        if (mode == 0) o[k] = (char)tolower(ch);
        else if (mode == 1) o[k] = (char)toupper(ch);
        else if (mode == 2) o[k] = (char)(k == 0 ? toupper(ch) : tolower(ch));
        else {
            bool alpha = isalpha(ch) || ch >= 0x80;
            if (isalpha(ch)) o[k] = (char)(start ? toupper(ch) : tolower(ch));
            start = !alpha;
        }
    }
    return o;
}

/* ---- conversions: Python str() and repr() ---------------------------------------------------- */

/* Python float repr: the shortest digits that round-trip, scientific outside 1e-4..1e16. */
static void fmt_float(char *buf, size_t cap, double x, bool json) {
    if (isnan(x)) { snprintf(buf, cap, json ? "NaN" : "nan"); return; }
    if (isinf(x)) { snprintf(buf, cap, x > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf")); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp = [-]d.ddde[+-]XX */
    bool neg = tmp[0] == '-';
    const char *m = tmp + (neg ? 1 : 0);
    char digits[32];
    int nd = 0;
    const char *q = m;
    for (; *q && *q != 'e'; q++)
        if (isdigit((unsigned char)*q)) digits[nd++] = *q;
    digits[nd] = 0;
    int ex = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    char out[80];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int z = 0; z < -ex - 1; z++) out[o++] = '0';
            for (int d = 0; d < nd; d++) out[o++] = digits[d];
        } else {
            for (int d = 0; d <= ex; d++) out[o++] = d < nd ? digits[d] : '0';
            out[o++] = '.';
            if (nd > ex + 1) for (int d = ex + 1; d < nd; d++) out[o++] = digits[d];
            else out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int d = 1; d < nd; d++) out[o++] = digits[d];
        }
        out[o] = 0;
        snprintf(out + o, sizeof out - o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(buf, cap, "%s", out);
}

static void to_str(ctx *c, sbuf *b, jv v);

static void repr_str(ctx *c, sbuf *b, jv s) {
    size_t base = b->n;
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sb_putc(c, b, q);
    for (size_t k = 0; k < n;) {
        size_t adv;
        uint32_t cp = u8dec(p + k, n - k, &adv);
        char e[16];
        if (cp == (uint32_t)q || cp == '\\') { sb_putc(c, b, '\\'); sb_putc(c, b, (char)cp); }
        else if (cp == '\n') sb_puts(c, b, "\\n");
        else if (cp == '\r') sb_puts(c, b, "\\r");
        else if (cp == '\t') sb_puts(c, b, "\\t");
        else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0xa0) || cp == 0xad) {
            snprintf(e, sizeof e, "\\x%02x", cp);
            sb_puts(c, b, e);
        } else if (cp == 0x2028 || cp == 0x2029 || (cp >= 0x200b && cp <= 0x200f) || cp == 0xfeff) {
            snprintf(e, sizeof e, "\\u%04x", cp);
            sb_puts(c, b, e);
        } else sb_put(c, b, p + k, adv);
        k += adv;
    }
    sb_putc(c, b, q);
    if (str_has_data(s)) sb_mark(c, b, base, b->n);
}

static void repr(ctx *c, sbuf *b, jv v) {
    if (v.t == JV_STR) repr_str(c, b, v);
    else to_str(c, b, v);
}

static void to_str_inner(ctx *c, sbuf *b, jv v);
static void to_str(ctx *c, sbuf *b, jv v) {
    if (v.t == JV_LIST || v.t == JV_DICT || v.t == JV_NS) {
        if (++c->rdepth > MAX_VALUE_DEPTH) jfail(c, NULL, RF_ERR_RANGE, "value nested too deeply to print");
        to_str_inner(c, b, v);
        c->rdepth--;
        return;
    }
    to_str_inner(c, b, v);
}
static void to_str_inner(ctx *c, sbuf *b, jv v) {
    char tmp[80];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: sb_puts(c, b, "None"); return;
    case JV_BOOL: sb_puts(c, b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); sb_puts(c, b, tmp); return;
    case JV_FLOAT: fmt_float(tmp, sizeof tmp, v.u.f, false); sb_puts(c, b, tmp); return;
    case JV_STR: sb_putv(c, b, v); return;
    case JV_LIST:
        if (v.u.l->kind == JL_GEN) { sb_puts(c, b, "<generator object>"); return; }
        sb_putc(c, b, v.u.l->tuple ? '(' : '[');
        for (size_t k = 0; k < v.u.l->n; k++) {
            if (k) sb_puts(c, b, ", ");
            repr(c, b, v.u.l->v[k]);
        }
        if (v.u.l->tuple && v.u.l->n == 1) sb_putc(c, b, ',');
        sb_putc(c, b, v.u.l->tuple ? ')' : ']');
        return;
    case JV_NS:
        sb_puts(c, b, "<Namespace ");
        /* fallthrough */
    case JV_DICT:
        sb_putc(c, b, '{');
        for (size_t k = 0; k < v.u.d->n; k++) {
            if (k) sb_puts(c, b, ", ");
            repr(c, b, v.u.d->k[k]);
            sb_puts(c, b, ": ");
            repr(c, b, v.u.d->v[k]);
        }
        sb_putc(c, b, '}');
        if (v.t == JV_NS) sb_putc(c, b, '>');
        return;
    case JV_MACRO: sb_puts(c, b, "<Macro>"); return;
    case JV_FUNC: sb_puts(c, b, "<function>"); return;
    case JV_LOOP: sb_puts(c, b, "<LoopContext>"); return;
    }
}

static jv str_of(ctx *c, jv v) {
    if (v.t == JV_STR) return v;
    sbuf b = {0};
    to_str(c, &b, v);
    return sb_val(&b);
}

static bool truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->kind == JL_GEN || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static bool is_intlike(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t num_i(jv v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

static bool veq_d(jv a, jv b, int d);
static bool veq(jv a, jv b) { return veq_d(a, b, 0); }
static bool veq_d(jv a, jv b, int d) {
    if (d > MAX_VALUE_DEPTH) return false;
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case JV_LIST:
        if (a.u.l->kind == JL_GEN || b.u.l->kind == JL_GEN) return a.u.l == b.u.l;
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple || a.u.l->kind != b.u.l->kind) return false;
        for (size_t k = 0; k < a.u.l->n; k++)
            if (!veq_d(a.u.l->v[k], b.u.l->v[k], d + 1)) return false;
        return true;
    case JV_DICT: {
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t k = 0; k < a.u.d->n; k++) {
            size_t j;
            for (j = 0; j < b.u.d->n; j++)
                if (veq_d(a.u.d->k[k], b.u.d->k[j], d + 1)) break;
            if (j == b.u.d->n || !veq_d(a.u.d->v[k], b.u.d->v[j], d + 1)) return false;
        }
        return true;
    }
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

/* Python ordering; TypeError for unorderable pairs */
static int vcmp(ctx *c, const jnode *at, jv a, jv b, const char *op) {
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b);
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = memcmp(a.u.s.p, b.u.s.p, m);
        if (r) return r < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        for (size_t k = 0; k < a.u.l->n && k < b.u.l->n; k++) {
            if (!veq(a.u.l->v[k], b.u.l->v[k])) {
                if (++c->rdepth > MAX_VALUE_DEPTH) jfail(c, at, RF_ERR_RANGE, "values nested too deeply to compare");
                int r = vcmp(c, at, a.u.l->v[k], b.u.l->v[k], op);
                c->rdepth--;
                return r;
            }
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == JV_UNDEF) undef_fail(c, at, a);
    if (b.t == JV_UNDEF) undef_fail(c, at, b);
    jfail(c, at, RF_ERR_TYPE, "'%s' not supported between instances of '%s' and '%s'", op,
          type_name(a), type_name(b));
}

/* ---- dicts and scopes ----------------------------------------------------------------------- */

static jv *dict_find(jdict *d, jv key) {
    for (size_t k = 0; k < d->n; k++)
        if (veq(d->k[k], key)) return &d->v[k];
    return NULL;
}
static jv *dict_find_s(jdict *d, const char *key, size_t n) {
    for (size_t k = 0; k < d->n; k++)
        if (d->k[k].t == JV_STR && d->k[k].u.s.n == n && memcmp(d->k[k].u.s.p, key, n) == 0) return &d->v[k];
    return NULL;
}
static void dict_set(ctx *c, jdict *d, jv key, jv val) {
    jv *f = dict_find(d, key);
    if (f) { *f = val; return; }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        jv *nk = ja_alloc(&c->a, nc * sizeof(jv)), *nv = ja_alloc(&c->a, nc * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
}

static scope *new_scope(ctx *c, scope *parent) {
    scope *s = ja_alloc(&c->a, sizeof *s);
    s->parent = parent;
    return s;
}
static void scope_set(ctx *c, scope *s, const char *k, jv v) {
    for (size_t j = 0; j < s->n; j++)
        if (strcmp(s->k[j], k) == 0) { s->v[j] = v; return; }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        const char **nk = ja_alloc(&c->a, nc * sizeof(char *));
        jv *nv = ja_alloc(&c->a, nc * sizeof(jv));
        if (s->n) {
            memcpy(nk, s->k, s->n * sizeof(char *));
            memcpy(nv, s->v, s->n * sizeof(jv));
        }
        s->k = nk;
        s->v = nv;
        s->cap = nc;
    }
    s->k[s->n] = k;
    s->v[s->n] = v;
    s->n++;
}
static jv lookup(ctx *c, scope *s, const char *k) {
    for (; s; s = s->parent)
        for (size_t j = 0; j < s->n; j++)
            if (strcmp(s->k[j], k) == 0) return s->v[j];
    for (int f = 0; f < (int)(sizeof FUNC_NAMES / sizeof FUNC_NAMES[0]); f++)
        if (strcmp(FUNC_NAMES[f], k) == 0) {
            jv v = {.t = JV_FUNC};
            v.u.fn = f;
            return v;
        }
    char *m = ja_alloc(&c->a, strlen(k) + 20);
    sprintf(m, "'%s' is undefined", k);
    return V_UNDEF(m);
}

/* ---- JSON in and out ------------------------------------------------------------------------ */

static jv from_json(ctx *c, const json_t *j, int depth, bool data) {
    if (depth > 200) jfail(c, NULL, RF_ERR_RANGE, "input JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = new_dict(c);
        const char *k;
        json_t *v;
        /* keys of a JSON object are unique: append without the linear search */
        size_t nk = json_object_size(j);
        d->k = ja_alloc(&c->a, (nk ? nk : 1) * sizeof(jv));
        d->v = ja_alloc(&c->a, (nk ? nk : 1) * sizeof(jv));
        d->cap = nk ? nk : 1;
        json_object_foreach((json_t *)j, k, v) {
            if (d->n == d->cap) break;
            d->k[d->n] = V_STR(ja_strndup(&c->a, k, strlen(k)), strlen(k));
            if (data) d->k[d->n] = all_data(c, d->k[d->n]);
            d->v[d->n] = from_json(c, v, depth + 1, data);
            d->n++;
        }
        return V_DICT(d);
    }
    case JSON_ARRAY: {
        jlist *l = new_list(c, json_array_size(j));
        for (size_t k = 0; k < l->n; k++) l->v[k] = from_json(c, json_array_get(j, k), depth + 1, data);
        return V_LIST(l);
    }
    case JSON_STRING: {
        size_t n = json_string_length(j);
        jv r = V_STR(ja_strndup(&c->a, json_string_value(j), n), n);
        return data ? all_data(c, r) : r;
    }
    case JSON_INTEGER: return V_INT((int64_t)json_integer_value(j));
    case JSON_REAL: return V_FLOAT(json_real_value(j));
    case JSON_TRUE: return V_BOOL(true);
    case JSON_FALSE: return V_BOOL(false);
    default: return V_NONE();
    }
}

typedef struct json_opts {
    int indent; /* -1 = none */
    const char *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} json_opts;

static void json_str(ctx *c, sbuf *b, const char *p, size_t n, bool ensure_ascii) {
    sb_putc(c, b, '"');
    for (size_t k = 0; k < n;) {
        unsigned char ch = (unsigned char)p[k];
        char e[16];
        if (ch == '"') { sb_puts(c, b, "\\\""); k++; }
        else if (ch == '\\') { sb_puts(c, b, "\\\\"); k++; }
        else if (ch == '\n') { sb_puts(c, b, "\\n"); k++; }
        else if (ch == '\r') { sb_puts(c, b, "\\r"); k++; }
        else if (ch == '\t') { sb_puts(c, b, "\\t"); k++; }
        else if (ch == '\b') { sb_puts(c, b, "\\b"); k++; }
        else if (ch == '\f') { sb_puts(c, b, "\\f"); k++; }
        else if (ch < 0x20) { snprintf(e, sizeof e, "\\u%04x", ch); sb_puts(c, b, e); k++; }
        else if (ch >= 0x80 && ensure_ascii) {
            size_t adv;
            uint32_t cp = u8dec(p + k, n - k, &adv);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else snprintf(e, sizeof e, "\\u%04x", cp);
            sb_puts(c, b, e);
            k += adv;
        } else { sb_putc(c, b, (char)ch); k++; }
    }
    sb_putc(c, b, '"');
}

static void json_nl(ctx *c, sbuf *b, const json_opts *o, int level) {
    sb_putc(c, b, '\n');
    for (int k = 0; k < o->indent * level; k++) sb_putc(c, b, ' ');
}

static void to_json(ctx *c, const jnode *at, sbuf *b, jv v, const json_opts *o, int level) {
    if (level > 200) jfail(c, at, RF_ERR_RANGE, "tojson: value nested too deeply");
    char tmp[80];
    switch (v.t) {
    case JV_NONE: sb_puts(c, b, "null"); return;
    case JV_BOOL: sb_puts(c, b, v.u.b ? "true" : "false"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); sb_puts(c, b, tmp); return;
    case JV_FLOAT: fmt_float(tmp, sizeof tmp, v.u.f, true); sb_puts(c, b, tmp); return;
    case JV_STR: {
        size_t base = b->n;
        json_str(c, b, v.u.s.p, v.u.s.n, o->ensure_ascii);
        if (str_has_data(v)) sb_mark(c, b, base, b->n);
        return;
    }
    case JV_LIST:
        if (v.u.l->kind != JL_LIST)
            jfail(c, at, RF_ERR_TYPE, "Object of type %s is not JSON serializable", type_name(v));
        if (!v.u.l->n) { sb_puts(c, b, "[]"); return; }
        sb_putc(c, b, '[');
        for (size_t k = 0; k < v.u.l->n; k++) {
            if (k) sb_puts(c, b, o->item_sep);
            if (o->indent >= 0) json_nl(c, b, o, level + 1);
            to_json(c, at, b, v.u.l->v[k], o, level + 1);
        }
        if (o->indent >= 0) json_nl(c, b, o, level);
        sb_putc(c, b, ']');
        return;
    case JV_DICT: {
        jdict *d = v.u.d;
        if (!d->n) { sb_puts(c, b, "{}"); return; }
        size_t *ord = ja_alloc(&c->a, d->n * sizeof(size_t));
        for (size_t k = 0; k < d->n; k++) ord[k] = k;
        if (o->sort_keys)
            for (size_t k = 1; k < d->n; k++)
                for (size_t j = k; j > 0 && vcmp(c, at, d->k[ord[j - 1]], d->k[ord[j]], "<") > 0; j--) {
                    size_t t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t;
                }
        sb_putc(c, b, '{');
        for (size_t k = 0; k < d->n; k++) {
            jv key = d->k[ord[k]];
            if (k) sb_puts(c, b, o->item_sep);
            if (o->indent >= 0) json_nl(c, b, o, level + 1);
            if (key.t == JV_STR) to_json(c, at, b, key, o, level + 1);
            else if (key.t == JV_BOOL || key.t == JV_NONE) {
                sb_putc(c, b, '"');
                sb_puts(c, b, key.t == JV_NONE ? "null" : key.u.b ? "true" : "false");
                sb_putc(c, b, '"');
            } else if (key.t == JV_INT || key.t == JV_FLOAT) {
                sb_putc(c, b, '"');
                to_json(c, at, b, key, o, level + 1);
                sb_putc(c, b, '"');
            } else jfail(c, at, RF_ERR_TYPE, "tojson: keys must be str, int, float, bool or None, not %s", type_name(key));
            sb_puts(c, b, o->key_sep);
            to_json(c, at, b, d->v[ord[k]], o, level + 1);
        }
        if (o->indent >= 0) json_nl(c, b, o, level);
        sb_putc(c, b, '}');
        return;
    }
    default:
        jfail(c, at, RF_ERR_TYPE, "Object of type %s is not JSON serializable", type_name(v));
    }
}

/* ---- attribute and item access -------------------------------------------------------------- */

static jv mkundef_attr(ctx *c, jv obj, const char *name) {
    char *m = ja_alloc(&c->a, strlen(name) + 64);
    sprintf(m, "'%s object' has no attribute '%s'", type_name(obj), name);
    return V_UNDEF(m);
}

static jv loop_attr(ctx *c, jloop *l, const char *name) {
    size_t n = l->items->n, i = l->i;
    if (!strcmp(name, "index")) return V_INT((int64_t)i + 1);
    if (!strcmp(name, "index0")) return V_INT((int64_t)i);
    if (!strcmp(name, "revindex")) return V_INT((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return V_INT((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return V_BOOL(i == 0);
    if (!strcmp(name, "last")) return V_BOOL(i + 1 == n);
    if (!strcmp(name, "length")) return V_INT((int64_t)n);
    if (!strcmp(name, "depth")) return V_INT(1);
    if (!strcmp(name, "depth0")) return V_INT(0);
    if (!strcmp(name, "previtem")) return i > 0 ? l->items->v[i - 1] : V_UNDEF("there is no previous item");
    if (!strcmp(name, "nextitem")) return i + 1 < n ? l->items->v[i + 1] : V_UNDEF("there is no next item");
    jv lv = {.t = JV_LOOP};
    return mkundef_attr(c, lv, name);
}

static jv index_str(ctx *c, const jnode *at, jv s, int64_t i) {
    size_t cnt;
    size_t *o = cp_offsets(c, s.u.s.p, s.u.s.n, &cnt);
    if (i < 0) i += (int64_t)cnt;
    if (i < 0 || i >= (int64_t)cnt) return V_UNDEF("string index out of range");
    return str_sub(c, s, o[i], o[i + 1] - o[i]);
}

static jv getattr_v(ctx *c, const jnode *at, jv obj, const char *name) {
    switch (obj.t) {
    case JV_UNDEF: undef_fail(c, at, obj);
    case JV_DICT: case JV_NS: {
        jv *f = dict_find_s(obj.u.d, name, strlen(name));
        return f ? *f : mkundef_attr(c, obj, name);
    }
    case JV_LOOP: return loop_attr(c, obj.u.loop, name);
    default: return mkundef_attr(c, obj, name);
    }
}

static jv getitem_v(ctx *c, const jnode *at, jv obj, jv key) {
    switch (obj.t) {
    case JV_UNDEF: undef_fail(c, at, obj);
    case JV_DICT: case JV_NS: {
        jv *f = dict_find(obj.u.d, key);
        if (f) return *f;
        if (key.t == JV_STR) return mkundef_attr(c, obj, ja_strndup(&c->a, key.u.s.p, key.u.s.n));
        return V_UNDEF("key not found");
    }
    case JV_LIST:
        if (obj.u.l->kind == JL_GEN) return V_UNDEF("'generator object' is not subscriptable");
        if (is_intlike(key)) {
            int64_t i = num_i(key), n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            if (i < 0 || i >= n) return V_UNDEF("list index out of range");
            return obj.u.l->v[i];
        }
        break;
    case JV_STR:
        if (is_intlike(key)) return index_str(c, at, obj, num_i(key));
        break;
    case JV_LOOP:
        if (key.t == JV_STR) return loop_attr(c, obj.u.loop, ja_strndup(&c->a, key.u.s.p, key.u.s.n));
        break;
    default: break;
    }
    if (key.t == JV_STR) return mkundef_attr(c, obj, ja_strndup(&c->a, key.u.s.p, key.u.s.n));
    return V_UNDEF("item not found");
}

/* Python slice index adjustment */
static void slice_adjust(int64_t len, bool has_a, int64_t a, bool has_b, int64_t b, int64_t st,
                         int64_t *start, int64_t *stop) {
    if (st > 0) {
        *start = has_a ? a : 0;
        *stop = has_b ? b : len;
        if (*start < 0) { *start += len; if (*start < 0) *start = 0; }
        else if (*start > len) *start = len;
        if (*stop < 0) { *stop += len; if (*stop < 0) *stop = 0; }
        else if (*stop > len) *stop = len;
    } else {
        *start = has_a ? a : len - 1;
        *stop = has_b ? b : -1;
        if (has_a) { if (*start < 0) { *start += len; if (*start < 0) *start = -1; } else if (*start >= len) *start = len - 1; }
        if (has_b) { if (*stop < 0) { *stop += len; if (*stop < 0) *stop = -1; } else if (*stop >= len) *stop = len - 1; }
    }
}

static jv do_slice(ctx *c, const jnode *at, jv obj, jv va, jv vb, jv vs) {
    bool ha = va.t != JV_NONE && va.t != JV_UNDEF, hb = vb.t != JV_NONE && vb.t != JV_UNDEF;
    int64_t st = 1;
    if (vs.t != JV_NONE && vs.t != JV_UNDEF) {
        if (!is_intlike(vs)) jfail(c, at, RF_ERR_TYPE, "slice indices must be integers");
        st = num_i(vs);
        if (st == 0) jfail(c, at, RF_ERR_FORMAT, "slice step cannot be zero");
    }
    if ((ha && !is_intlike(va)) || (hb && !is_intlike(vb))) jfail(c, at, RF_ERR_TYPE, "slice indices must be integers");
    int64_t a = ha ? num_i(va) : 0, b = hb ? num_i(vb) : 0;
    if (obj.t == JV_UNDEF) undef_fail(c, at, obj);
    if (obj.t == JV_LIST) {
        int64_t len = (int64_t)obj.u.l->n, s0, s1;
        slice_adjust(len, ha, a, hb, b, st, &s0, &s1);
        size_t cnt = 0;
        for (int64_t i = s0; st > 0 ? i < s1 : i > s1; i += st) cnt++;
        jlist *l = new_list(c, cnt);
        l->tuple = obj.u.l->tuple;
        size_t k = 0;
        for (int64_t i = s0; st > 0 ? i < s1 : i > s1; i += st) l->v[k++] = obj.u.l->v[i];
        return V_LIST(l);
    }
    if (obj.t == JV_STR) {
        size_t cnt;
        size_t *o = cp_offsets(c, obj.u.s.p, obj.u.s.n, &cnt);
        int64_t s0, s1;
        slice_adjust((int64_t)cnt, ha, a, hb, b, st, &s0, &s1);
        if (st == 1) return s0 < s1 ? str_sub(c, obj, o[s0], o[s1] - o[s0]) : V_STR(obj.u.s.p, 0);
        sbuf sb = {0};
        for (int64_t i = s0; st > 0 ? i < s1 : i > s1; i += st) sb_putv(c, &sb, str_sub(c, obj, o[i], o[i + 1] - o[i]));
        return sb_val(&sb);
    }
    /* Jinja's getitem falls back to getattr and yields undefined for the rest */
    char *m = ja_alloc(&c->a, 64);
    snprintf(m, 64, "'%s object' is not subscriptable", type_name(obj));
    return V_UNDEF(m);
}

/* items of an iterable as a list (dict -> keys, string -> characters) */
static jlist *iter_list(ctx *c, const jnode *at, jv v) {
    switch (v.t) {
    case JV_UNDEF: return new_list(c, 0);
    case JV_LIST: return v.u.l;
    case JV_DICT: {
        jlist *l = new_list(c, v.u.d->n);
        for (size_t k = 0; k < v.u.d->n; k++) l->v[k] = v.u.d->k[k];
        return l;
    }
    case JV_STR: {
        size_t cnt;
        size_t *o = cp_offsets(c, v.u.s.p, v.u.s.n, &cnt);
        jlist *l = new_list(c, cnt);
        for (size_t k = 0; k < cnt; k++) l->v[k] = str_sub(c, v, o[k], o[k + 1] - o[k]);
        return l;
    }
    default:
        jfail(c, at, RF_ERR_TYPE, "'%s' object is not iterable", type_name(v));
    }
}

static jv dict_items(ctx *c, jdict *d) {
    jlist *l = new_list(c, d->n);
    for (size_t k = 0; k < d->n; k++) {
        jlist *p = new_list(c, 2);
        p->tuple = true;
        p->v[0] = d->k[k];
        p->v[1] = d->v[k];
        l->v[k] = V_LIST(p);
    }
    return V_LIST(l);
}

static bool contains(ctx *c, const jnode *at, jv hay, jv needle) {
    switch (hay.t) {
    case JV_STR:
        if (needle.t != JV_STR) jfail(c, at, RF_ERR_TYPE, "'in <string>' requires string as left operand, not %s", type_name(needle));
        if (!needle.u.s.n) return true;
        if (needle.u.s.n > hay.u.s.n) return false;
        for (size_t k = 0; k + needle.u.s.n <= hay.u.s.n; k++)
            if (memcmp(hay.u.s.p + k, needle.u.s.p, needle.u.s.n) == 0) return true;
        return false;
    case JV_LIST:
        for (size_t k = 0; k < hay.u.l->n; k++)
            if (veq(hay.u.l->v[k], needle)) return true;
        return false;
    case JV_DICT: case JV_NS: return dict_find(hay.u.d, needle) != NULL;
    case JV_UNDEF: return false; /* Undefined iterates as empty */
    default: jfail(c, at, RF_ERR_TYPE, "argument of type '%s' is not iterable", type_name(hay));
    }
}

/* ---- arithmetic ----------------------------------------------------------------------------- */

static jv html_escape(ctx *c, jv s) {
    sbuf b = {0};
    sb_put(c, &b, "", 0);
    for (size_t k = 0; k < s.u.s.n; k++) {
        char ch = s.u.s.p[k];
        if (ch == '&') sb_puts(c, &b, "&amp;");
        else if (ch == '<') sb_puts(c, &b, "&lt;");
        else if (ch == '>') sb_puts(c, &b, "&gt;");
        else if (ch == '"') sb_puts(c, &b, "&#34;");
        else if (ch == '\'') sb_puts(c, &b, "&#39;");
        else sb_putc(c, &b, ch);
    }
    jv r = sb_val(&b);
    if (str_has_data(s)) r = all_data(c, r);
    r.markup = true;
    return r;
}

static jv binop(ctx *c, const jnode *at, int op, jv a, jv b) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    if (op == JOP_CONCAT) {
        sbuf sb = {0};
        to_str(c, &sb, a);
        to_str(c, &sb, b);
        return sb_val(&sb);
    }
    if (a.t == JV_UNDEF) undef_fail(c, at, a);
    if (b.t == JV_UNDEF) undef_fail(c, at, b);
    if (op == JOP_ADD && a.t == JV_STR && b.t == JV_STR) {
        bool mk = a.markup || b.markup; /* Markup + str escapes the plain side */
        if (mk && !a.markup) a = html_escape(c, a);
        if (mk && !b.markup) b = html_escape(c, b);
        if (c->out_total + a.u.s.n + b.u.s.n > c->lim.max_output * 4)
            jfail(c, at, RF_ERR_RANGE, "string too long");
        sbuf sb = {0};
        sb_reserve(c, &sb, a.u.s.n + b.u.s.n);
        sb_putv(c, &sb, a);
        sb_putv(c, &sb, b);
        jv r = sb_val(&sb);
        r.markup = mk;
        return r;
    }
    if (op == JOP_ADD && a.t == JV_LIST && b.t == JV_LIST && !a.u.l->kind && !b.u.l->kind) {
        jlist *l = new_list(c, a.u.l->n + b.u.l->n);
        l->tuple = a.u.l->tuple;
        memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(jv));
        memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
        return V_LIST(l);
    }
    if (op == JOP_MUL && ((a.t == JV_STR || (a.t == JV_LIST && !a.u.l->kind)) && is_intlike(b))) {
        int64_t n = num_i(b);
        if (n < 0) n = 0;
        size_t unit = a.t == JV_STR ? a.u.s.n : a.u.l->n * sizeof(jv);
        if (unit && (uint64_t)n > (uint64_t)c->lim.max_output / unit)
            jfail(c, at, RF_ERR_RANGE, "repetition result too large");
        if (a.t == JV_STR) {
            char *p = ja_alloc(&c->a, unit * (size_t)n + 1);
            for (int64_t k = 0; k < n; k++) memcpy(p + k * unit, a.u.s.p, unit);
            jv r = V_STR(p, unit * (size_t)n);
            return str_has_data(a) ? all_data(c, r) : r;
        }
        jlist *l = new_list(c, a.u.l->n * (size_t)n);
        for (int64_t k = 0; k < n; k++) memcpy(l->v + k * a.u.l->n, a.u.l->v, unit);
        return V_LIST(l);
    }
    if (op == JOP_MUL && is_intlike(a) && (b.t == JV_STR || (b.t == JV_LIST && !b.u.l->kind))) return binop(c, at, op, b, a);
    if (!is_num(a) || !is_num(b))
        jfail(c, at, RF_ERR_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", names[op],
              type_name(a), type_name(b));
    if (is_intlike(a) && is_intlike(b) && op != JOP_DIV) {
        int64_t x = num_i(a), y = num_i(b), r;
        switch (op) {
        case JOP_ADD: if (__builtin_add_overflow(x, y, &r)) goto ovf; return V_INT(r);
        case JOP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto ovf; return V_INT(r);
        case JOP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto ovf; return V_INT(r);
        case JOP_FLOORDIV: case JOP_MOD: {
            if (y == 0) jfail(c, at, RF_ERR_FORMAT, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) goto ovf;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
            return V_INT(op == JOP_MOD ? m : q);
        }
        case JOP_POW: {
            if (y < 0) return V_FLOAT(pow((double)x, (double)y));
            int64_t acc = 1;
            for (int64_t k = 0; k < y; k++) {
                if (__builtin_mul_overflow(acc, x, &acc)) goto ovf;
                if (acc == 0 || acc == 1) break;
            }
            if (acc == 1 && x == -1 && (y & 1)) acc = -1;
            return V_INT(acc);
        }
        }
    }
    {
        double x = num_f(a), y = num_f(b);
        switch (op) {
        case JOP_ADD: return V_FLOAT(x + y);
        case JOP_SUB: return V_FLOAT(x - y);
        case JOP_MUL: return V_FLOAT(x * y);
        case JOP_DIV:
            if (y == 0) jfail(c, at, RF_ERR_FORMAT, "division by zero");
            return V_FLOAT(x / y);
        case JOP_FLOORDIV:
            if (y == 0) jfail(c, at, RF_ERR_FORMAT, "float floor division by zero");
            return V_FLOAT(floor(x / y));
        case JOP_MOD: {
            if (y == 0) jfail(c, at, RF_ERR_FORMAT, "float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return V_FLOAT(m);
        }
        case JOP_POW: return V_FLOAT(pow(x, y));
        }
    }
ovf:
    jfail(c, at, RF_ERR_RANGE, "integer overflow in '%s'", names[op]);
}

/* ---- evaluation ----------------------------------------------------------------------------- */

static jv eval(ctx *c, scope *s, jnode *n);
static void exec_list(ctx *c, scope *s, jlist_nodes body);

typedef struct argv_t {
    jv *pos;
    size_t np;
    const char **kn;
    jv *kv;
    size_t nk;
} argv_t;

static argv_t eval_args(ctx *c, scope *s, jnode *n) {
    argv_t a;
    a.np = n->args.n;
    a.pos = ja_alloc(&c->a, (a.np ? a.np : 1) * sizeof(jv));
    for (size_t k = 0; k < a.np; k++) a.pos[k] = eval(c, s, n->args.v[k]);
    a.nk = n->kwv.n;
    a.kn = n->kwn;
    a.kv = ja_alloc(&c->a, (a.nk ? a.nk : 1) * sizeof(jv));
    for (size_t k = 0; k < a.nk; k++) a.kv[k] = eval(c, s, n->kwv.v[k]);
    return a;
}

/* argument `idx` (positional) or keyword `name`; `def` when absent */
static jv arg(const argv_t *a, size_t idx, const char *name, jv def) {
    if (idx < a->np) return a->pos[idx];
    for (size_t k = 0; k < a->nk; k++)
        if (name && strcmp(a->kn[k], name) == 0) return a->kv[k];
    return def;
}

static jv need_str(ctx *c, const jnode *at, jv v, const char *what) {
    if (v.t == JV_UNDEF) undef_fail(c, at, v);
    if (v.t != JV_STR) jfail(c, at, RF_ERR_TYPE, "%s expects a string, got %s", what, type_name(v));
    return v;
}

static jv call_macro(ctx *c, const jnode *at, jmacro *m, const argv_t *a) {
    jnode *def = m->node;
    if (++c->depth > c->lim.max_depth)
        jfail(c, at, RF_ERR_RANGE, "macro recursion deeper than %d", c->lim.max_depth);
    step(c, at);
    scope *ms = new_scope(c, m->def);
    if (a->np > def->n_params) jfail(c, at, RF_ERR_FORMAT, "macro '%s' takes %zu arguments, %zu given", def->name, def->n_params, a->np);
    for (size_t k = 0; k < def->n_params; k++) {
        jv v;
        bool have = false;
        if (k < a->np) { v = a->pos[k]; have = true; }
        for (size_t j = 0; j < a->nk; j++)
            if (!strcmp(a->kn[j], def->params[k])) { v = a->kv[j]; have = true; }
        if (!have) {
            jnode *d = def->kwv.v[k];
            v = d ? eval(c, ms, d) : V_UNDEF("macro parameter is undefined");
        }
        scope_set(c, ms, def->params[k], v);
    }
    for (size_t j = 0; j < a->nk; j++) {
        size_t k;
        for (k = 0; k < def->n_params; k++)
            if (!strcmp(a->kn[j], def->params[k])) break;
        if (k == def->n_params) jfail(c, at, RF_ERR_FORMAT, "macro '%s' has no parameter '%s'", def->name, a->kn[j]);
    }
    sbuf *saved = c->out;
    sbuf buf = {0};
    c->out = &buf;
    int savedctl = c->loopctl;
    exec_list(c, ms, def->body);
    c->loopctl = savedctl;
    c->out = saved;
    c->depth--;
    return sb_val(&buf);
}

static jv call_func(ctx *c, const jnode *at, int fn, const argv_t *a) {
    switch (fn) {
    case F_RANGE: {
        int64_t start = 0, stop, st = 1;
        for (size_t k = 0; k < a->np; k++)
            if (!is_intlike(a->pos[k])) jfail(c, at, RF_ERR_TYPE, "range() arguments must be integers");
        if (a->np == 1) stop = num_i(a->pos[0]);
        else if (a->np == 2 || a->np == 3) {
            start = num_i(a->pos[0]);
            stop = num_i(a->pos[1]);
            if (a->np == 3) st = num_i(a->pos[2]);
        } else jfail(c, at, RF_ERR_FORMAT, "range() takes 1 to 3 arguments");
        if (st == 0) jfail(c, at, RF_ERR_FORMAT, "range() arg 3 must not be zero");
        /* exact in unsigned 64-bit arithmetic: the distance between two int64 values and the
         * magnitude of any step fit, and every element lies between start and stop, so the
         * wrapped sum start + k*step is the element itself (no signed overflow, no rounding) */
        uint64_t dist = st > 0 ? (stop > start ? (uint64_t)stop - (uint64_t)start : 0)
                               : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
        uint64_t mag = st > 0 ? (uint64_t)st : 0 - (uint64_t)st;
        uint64_t cnt = dist ? (dist - 1) / mag + 1 : 0;
        if (cnt > c->lim.max_steps) jfail(c, at, RF_ERR_RANGE, "range() too long");
        jlist *l = new_list(c, (size_t)cnt);
        for (size_t k = 0; k < l->n; k++) l->v[k] = V_INT((int64_t)((uint64_t)start + (uint64_t)k * (uint64_t)st));
        return V_VIEW(l);
    }
    case F_NAMESPACE: case F_DICT: {
        jdict *d = new_dict(c);
        for (size_t k = 0; k < a->np; k++) {
            if (a->pos[k].t != JV_DICT && a->pos[k].t != JV_NS)
                jfail(c, at, RF_ERR_TYPE, "%s() positional argument must be a mapping", fn == F_DICT ? "dict" : "namespace");
            for (size_t j = 0; j < a->pos[k].u.d->n; j++) dict_set(c, d, a->pos[k].u.d->k[j], a->pos[k].u.d->v[j]);
        }
        for (size_t k = 0; k < a->nk; k++) dict_set(c, d, V_CSTR(a->kn[k]), a->kv[k]);
        jv v = V_DICT(d);
        if (fn == F_NAMESPACE) v.t = JV_NS;
        return v;
    }
    case F_RAISE: {
        jv m = a->np ? str_of(c, a->pos[0]) : V_CSTR("");
        snprintf(c->msg, sizeof c->msg, "%.*s", (int)m.u.s.n, m.u.s.p);
        c->st = RF_ERR_FORMAT;
        c->raised = true;
        longjmp(c->jb, 1);
    }
    case F_STRFTIME: {
        jv f = need_str(c, at, arg(a, 0, "format", V_UNDEF("'format' is undefined")), "strftime_now");
        time_t t = c->now ? c->now : time(NULL);
        struct tm tm;
        if (c->now) gmtime_r(&t, &tm);
        else localtime_r(&t, &tm);
        char *fmt = ja_strndup(&c->a, f.u.s.p, f.u.s.n);
        char out[512];
        size_t n = strftime(out, sizeof out, fmt, &tm);
        return V_STR(ja_strndup(&c->a, out, n), n);
    }
    }
    jfail(c, at, RF_ERR_INTERNAL, "unknown builtin");
}

/* The safety net for filters and methods: a string result with no data ranges, computed from
 * an input that holds data, is data as a whole (the filters that know where each byte came
 * from have already set precise ranges). */
static jv taint(ctx *c, jv r, jv in, const argv_t *a) {
    if (r.t != JV_STR || !r.u.s.n || str_has_data(r)) return r;
    bool d = has_data(in);
    for (size_t k = 0; !d && k < a->np; k++) d = has_data(a->pos[k]);
    for (size_t k = 0; !d && k < a->nk; k++) d = has_data(a->kv[k]);
    return d ? all_data(c, r) : r;
}

static jv apply_filter(ctx *c, const jnode *at, const char *name, jv v, const argv_t *a);
static bool apply_test(ctx *c, const jnode *at, const char *name, jv v, const argv_t *a);

static argv_t shift_args(ctx *c, const argv_t *a, size_t skip) {
    argv_t r = *a;
    r.np = a->np > skip ? a->np - skip : 0;
    r.pos = a->pos + (a->np > skip ? skip : a->np);
    (void)c;
    return r;
}

/* select/reject/selectattr/rejectattr */
static jv do_select(ctx *c, const jnode *at, jv v, const argv_t *a, bool attr, bool want) {
    if (!truthy(v)) return V_GEN(new_list(c, 0)); /* Jinja: `if value:` before iterating */
    jlist *in = iter_list(c, at, v);
    jlist *out = new_list(c, in->n);
    out->n = 0;
    size_t base = 0;
    jv aname = {0};
    if (attr) {
        aname = need_str(c, at, arg(a, 0, NULL, V_UNDEF("selectattr needs an attribute")), "selectattr");
        base = 1;
    }
    jv tname = arg(a, base, NULL, V_NONE());
    argv_t rest = shift_args(c, a, base + 1);
    rest.nk = 0;
    for (size_t k = 0; k < in->n; k++) {
        jv item = in->v[k];
        if (attr) item = getattr_v(c, at, item, ja_strndup(&c->a, aname.u.s.p, aname.u.s.n));
        bool ok;
        if (tname.t == JV_NONE) ok = truthy(item);
        else ok = apply_test(c, at, ja_strndup(&c->a, need_str(c, at, tname, "select").u.s.p, tname.u.s.n), item, &rest);
        if (ok == want) out->v[out->n++] = in->v[k];
    }
    return V_GEN(out);
}

static jv str_method(ctx *c, const jnode *at, jv s, const char *m, const argv_t *a);

static jv apply_filter(ctx *c, const jnode *at, const char *f, jv v, const argv_t *a) {
    if (!strcmp(f, "safe")) {
        if (v.t != JV_STR) v = str_of(c, v);
        v.markup = true;
        return v;
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        jv def = arg(a, 0, "default_value", V_CSTR(""));
        bool boolean = truthy(arg(a, 1, "boolean", V_BOOL(false)));
        if (v.t == JV_UNDEF || (boolean && !truthy(v))) return def;
        return v;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        switch (v.t) {
        case JV_UNDEF: return V_INT(0);
        case JV_STR: return V_INT((int64_t)cp_count(v.u.s.p, v.u.s.n));
        case JV_LIST:
            if (v.u.l->kind == JL_GEN) jfail(c, at, RF_ERR_TYPE, "object of type 'generator' has no len()");
            return V_INT((int64_t)v.u.l->n);
        case JV_DICT: case JV_NS: return V_INT((int64_t)v.u.d->n);
        default: jfail(c, at, RF_ERR_TYPE, "object of type '%s' has no len()", type_name(v));
        }
    }
    if (!strcmp(f, "tojson")) {
        json_opts o = {-1, ", ", ": ", false, false};
        o.ensure_ascii = truthy(arg(a, 0, "ensure_ascii", V_BOOL(false)));
        jv ind = arg(a, 1, "indent", V_NONE());
        if (ind.t != JV_NONE) {
            if (!is_intlike(ind)) jfail(c, at, RF_ERR_UNSUPPORTED, "tojson: indent must be an integer");
            o.indent = (int)(num_i(ind) < 0 ? 0 : num_i(ind) > 64 ? 64 : num_i(ind));
            o.item_sep = ",";
        }
        jv seps = arg(a, 2, "separators", V_NONE());
        if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR && seps.u.l->v[1].t == JV_STR) {
            o.item_sep = ja_strndup(&c->a, seps.u.l->v[0].u.s.p, seps.u.l->v[0].u.s.n);
            o.key_sep = ja_strndup(&c->a, seps.u.l->v[1].u.s.p, seps.u.l->v[1].u.s.n);
        }
        o.sort_keys = truthy(arg(a, 3, "sort_keys", V_BOOL(false)));
        sbuf b = {0};
        to_json(c, at, &b, v, &o, 0);
        return sb_val(&b);
    }
    if (!strcmp(f, "from_json")) {
        /* llama.cpp's extension (not in transformers): json.loads of a string */
        jv sv = need_str(c, at, v, "from_json");
        json_error_t e;
        json_t *j = json_loadb(sv.u.s.p, sv.u.s.n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
        if (!j) jfail(c, at, RF_ERR_FORMAT, "from_json: %s", e.text);
        c->pending_json = j; /* released by the error path if the conversion fails */
        jv r = from_json(c, j, 0, str_has_data(sv));
        c->pending_json = NULL;
        json_decref(j);
        return r;
    }
    if (!strcmp(f, "items")) {
        if (v.t == JV_UNDEF) return V_GEN(new_list(c, 0));
        if (v.t != JV_DICT && v.t != JV_NS) jfail(c, at, RF_ERR_TYPE, "items: can only iterate over a mapping, got %s", type_name(v));
        return V_GEN(dict_items(c, v.u.d).u.l);
    }
    if (!strcmp(f, "string")) return str_of(c, v);
    if (!strcmp(f, "trim")) {
        jv s = str_of(c, v);
        argv_t r = *a;
        return str_method(c, at, s, "strip", &r);
    }
    if (!strcmp(f, "lower") || !strcmp(f, "upper") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        jv s = str_of(c, v);
        int mode = f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 'c' ? 2 : 3;
        jv r = V_STR(ascii_case(c, s, mode), s.u.s.n);
        r.u.s.d = s.u.s.d; /* byte for byte: the ranges stay */
        return r;
    }
    if (!strcmp(f, "replace")) {
        jv s = str_of(c, v);
        argv_t r = *a;
        return str_method(c, at, s, "replace", &r);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        if (f[0] == 'l' && v.t == JV_LIST && v.u.l->kind == JL_GEN)
            jfail(c, at, RF_ERR_TYPE, "'generator' object is not reversible");
        jlist *l = iter_list(c, at, v);
        if (!l->n) return V_UNDEF("No first item, sequence was empty.");
        return l->v[f[0] == 'f' ? 0 : l->n - 1];
    }
    if (!strcmp(f, "join")) {
        jv sep = str_of(c, arg(a, 0, "d", V_CSTR("")));
        jv attr = arg(a, 1, "attribute", V_NONE());
        jlist *l = iter_list(c, at, v);
        sbuf b = {0};
        sb_put(c, &b, "", 0);
        for (size_t k = 0; k < l->n; k++) {
            if (k) sb_putv(c, &b, sep);
            jv it = l->v[k];
            if (attr.t == JV_STR) it = getattr_v(c, at, it, ja_strndup(&c->a, attr.u.s.p, attr.u.s.n));
            to_str(c, &b, it);
        }
        return sb_val(&b);
    }
    if (!strcmp(f, "list")) {
        jlist *l = iter_list(c, at, v), *o = new_list(c, l->n);
        memcpy(o->v, l->v, l->n * sizeof(jv));
        return V_LIST(o);
    }
    if (!strcmp(f, "reverse")) {
        if (v.t == JV_STR) {
            argv_t r = {0};
            (void)r;
            return do_slice(c, at, v, V_NONE(), V_NONE(), V_INT(-1));
        }
        jlist *l = iter_list(c, at, v);
        jlist *o = new_list(c, l->n);
        for (size_t k = 0; k < l->n; k++) o->v[k] = l->v[l->n - 1 - k];
        return V_GEN(o); /* reversed() iterator */
    }
    if ((!strcmp(f, "int") || !strcmp(f, "float")) && v.t == JV_UNDEF) undef_fail(c, at, v);
    if (!strcmp(f, "int")) {
        jv def = arg(a, 0, "default", V_INT(0));
        if (v.t == JV_INT) return v;
        if (v.t == JV_BOOL) return V_INT(v.u.b);
        if (v.t == JV_FLOAT) return isfinite(v.u.f) ? V_INT((int64_t)v.u.f) : def;
        if (v.t == JV_STR) {
            jv s = py_strip(c, v, NULL, 0, true, true);
            char *z = ja_strndup(&c->a, s.u.s.p, s.u.s.n), *e;
            long long i = strtoll(z, &e, 10);
            if (*z && !*e) return V_INT(i);
            double d = strtod(z, &e);
            if (*z && !*e && isfinite(d)) return V_INT((int64_t)d);
        }
        return def;
    }
    if (!strcmp(f, "float")) {
        jv def = arg(a, 0, "default", V_FLOAT(0.0));
        if (is_num(v)) return V_FLOAT(num_f(v));
        if (v.t == JV_STR) {
            jv s = py_strip(c, v, NULL, 0, true, true);
            char *z = ja_strndup(&c->a, s.u.s.p, s.u.s.n), *e;
            double d = strtod(z, &e);
            if (*z && !*e) return V_FLOAT(d);
        }
        return def;
    }
    if (!strcmp(f, "abs")) {
        if (is_intlike(v)) {
            if (num_i(v) == INT64_MIN) jfail(c, at, RF_ERR_RANGE, "integer overflow in abs()");
            return V_INT(num_i(v) < 0 ? -num_i(v) : num_i(v));
        }
        if (is_num(v)) return V_FLOAT(fabs(num_f(v)));
        jfail(c, at, RF_ERR_TYPE, "bad operand type for abs(): '%s'", type_name(v));
    }
    if (!strcmp(f, "round")) {
        jv p = arg(a, 0, "precision", V_INT(0));
        if (!is_num(v)) jfail(c, at, RF_ERR_TYPE, "round: expects a number");
        if (is_intlike(v) && num_i(p) >= 0) return V_INT(num_i(v)); /* round(int, n) is an int */
        double m = pow(10.0, (double)num_i(p));
        return V_FLOAT(nearbyint(num_f(v) * m) / m); /* Python round(): half to even */
    }
    if (!strcmp(f, "attr")) {
        jv n = need_str(c, at, arg(a, 0, "name", V_UNDEF("attr needs a name")), "attr");
        return getattr_v(c, at, v, ja_strndup(&c->a, n.u.s.p, n.u.s.n));
    }
    if (!strcmp(f, "escape") || !strcmp(f, "e")) {
        if (v.t == JV_STR && v.markup) return v;
        return html_escape(c, str_of(c, v));
    }
    if (!strcmp(f, "indent")) {
        if (v.t != JV_STR) jfail(c, at, RF_ERR_TYPE, "indent expects a string, got %s", type_name(v));
        jv s = v;
        jv w = arg(a, 0, "width", V_INT(4));
        bool first = truthy(arg(a, 1, "first", V_BOOL(false)));
        bool blank = truthy(arg(a, 2, "blank", V_BOOL(false)));
        sbuf ind = {0};
        sb_put(c, &ind, "", 0);
        if (w.t == JV_STR) sb_putv(c, &ind, w);
        else for (int64_t k = 0; k < (is_intlike(w) ? num_i(w) : 4) && k < 256; k++) sb_putc(c, &ind, ' ');
        /* as Jinja: s + "\n", splitlines(), the first line as is, later non-empty lines (all
         * with blank=True) prefixed */
        sbuf b = {0};
        sb_put(c, &b, "", 0);
        if (first) sb_putv(c, &b, sb_val(&ind));
        size_t k = 0, line = 0, n = s.u.s.n;
        while (k <= n) {
            size_t e = k;
            while (e < n && s.u.s.p[e] != '\n') e++;
            /* the piece after the appended newline is empty and not a line */
            if (line > 0) {
                sb_putc(c, &b, '\n');
                if (blank || e > k) sb_putv(c, &b, sb_val(&ind));
            }
            sb_putv(c, &b, str_sub(c, s, k, e - k));
            line++;
            k = e + 1;
        }
        return sb_val(&b);
    }
    if (!strcmp(f, "map")) {
        if (!truthy(v)) return V_GEN(new_list(c, 0));
        jlist *l = iter_list(c, at, v);
        jlist *o = new_list(c, l->n);
        jv attr = arg(a, 99, "attribute", V_NONE());
        if (attr.t == JV_STR) {
            jv def = arg(a, 99, "default", V_UNDEF(NULL));
            const char *an = ja_strndup(&c->a, attr.u.s.p, attr.u.s.n);
            for (size_t k = 0; k < l->n; k++) {
                jv x = getattr_v(c, at, l->v[k], an);
                o->v[k] = x.t == JV_UNDEF && def.t != JV_UNDEF ? def : x;
            }
            return V_GEN(o);
        }
        jv fname = need_str(c, at, arg(a, 0, NULL, V_UNDEF("map needs a filter name")), "map");
        const char *fn = ja_strndup(&c->a, fname.u.s.p, fname.u.s.n);
        static const char *const ok[] = {"trim", "lower", "upper", "string", "int", "float", "length", "tojson", "capitalize", "title", "first", "last", "abs", "list", "items", "default", "d", "replace", "join", "reverse", "safe", NULL};
        bool known = false;
        for (const char *const *q = ok; *q; q++) known |= !strcmp(*q, fn);
        if (!known) jfail(c, at, RF_ERR_UNSUPPORTED, "map: unsupported filter '%s'", fn);
        argv_t rest = shift_args(c, a, 1);
        for (size_t k = 0; k < l->n; k++) o->v[k] = apply_filter(c, at, fn, l->v[k], &rest);
        return V_GEN(o);
    }
    if (!strcmp(f, "select")) return do_select(c, at, v, a, false, true);
    if (!strcmp(f, "reject")) return do_select(c, at, v, a, false, false);
    if (!strcmp(f, "selectattr")) return do_select(c, at, v, a, true, true);
    if (!strcmp(f, "rejectattr")) return do_select(c, at, v, a, true, false);
    if (!strcmp(f, "unique") || !strcmp(f, "sort") || !strcmp(f, "dictsort") || !strcmp(f, "min") ||
        !strcmp(f, "max") || !strcmp(f, "sum")) {
        bool dictsort = !strcmp(f, "dictsort");
        jlist *l = dictsort ? (v.t == JV_DICT ? dict_items(c, v.u.d).u.l : (jfail(c, at, RF_ERR_TYPE, "dictsort needs a mapping"), NULL))
                            : iter_list(c, at, v);
        jv attr = arg(a, 99, "attribute", V_NONE());
        bool rev = truthy(arg(a, 0, "reverse", V_BOOL(false)));
        if (!strcmp(f, "sum")) {
            jv acc = arg(a, 99, "start", V_INT(0));
            for (size_t k = 0; k < l->n; k++) {
                jv x = l->v[k];
                if (attr.t == JV_STR) x = getattr_v(c, at, x, ja_strndup(&c->a, attr.u.s.p, attr.u.s.n));
                acc = binop(c, at, JOP_ADD, acc, x);
            }
            return acc;
        }
        jlist *o = new_list(c, l->n);
        memcpy(o->v, l->v, l->n * sizeof(jv));
        if (strcmp(f, "unique")) {
            for (size_t k = 1; k < o->n; k++)
                for (size_t j = k; j > 0; j--) {
                    step(c, at);
                    jv x = o->v[j - 1], y = o->v[j];
                    if (dictsort) { x = x.u.l->v[0]; y = y.u.l->v[0]; }
                    if (attr.t == JV_STR) {
                        const char *an = ja_strndup(&c->a, attr.u.s.p, attr.u.s.n);
                        x = getattr_v(c, at, x, an);
                        y = getattr_v(c, at, y, an);
                    }
                    if (x.t == JV_STR) x = V_STR(ascii_case(c, x, 0), x.u.s.n);
                    if (y.t == JV_STR) y = V_STR(ascii_case(c, y, 0), y.u.s.n);
                    int r = vcmp(c, at, x, y, "<");
                    if (rev ? r >= 0 : r <= 0) break;
                    jv t = o->v[j]; o->v[j] = o->v[j - 1]; o->v[j - 1] = t;
                }
            if (!strcmp(f, "min") || !strcmp(f, "max"))
                return o->n ? o->v[f[1] == 'i' ? 0 : o->n - 1] : V_UNDEF("No aggregated item, sequence was empty.");
            return V_LIST(o);
        }
        size_t m = 0;
        for (size_t k = 0; k < o->n; k++) {
            bool dup = false;
            for (size_t j = 0; j < m && !dup; j++) {
                step(c, at);
                dup = veq(o->v[j], l->v[k]);
            }
            if (!dup) o->v[m++] = l->v[k];
        }
        o->n = m;
        return V_GEN(o);
    }
    if (!strcmp(f, "wordcount")) {
        jv s = str_of(c, v);
        int64_t n = 0;
        bool in = false;
        for (size_t k = 0; k < s.u.s.n; k++) {
            unsigned char ch = (unsigned char)s.u.s.p[k];
            bool w = isalnum(ch) || ch == '_' || ch >= 0x80;
            if (w && !in) n++;
            in = w;
        }
        return V_INT(n);
    }
    jfail(c, at, RF_ERR_UNSUPPORTED, "unsupported filter '%s'", f);
}

static bool apply_test(ctx *c, const jnode *at, const char *t, jv v, const argv_t *a) {
    jv x = arg(a, 0, NULL, V_UNDEF("test argument is undefined"));
    if (!strcmp(t, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(t, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(t, "none")) return v.t == JV_NONE;
    if (!strcmp(t, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(t, "true")) return v.t == JV_BOOL && v.u.b;
    if (!strcmp(t, "false")) return v.t == JV_BOOL && !v.u.b;
    if (!strcmp(t, "integer")) return v.t == JV_INT;
    if (!strcmp(t, "float")) return v.t == JV_FLOAT;
    if (!strcmp(t, "number")) return is_num(v);
    if (!strcmp(t, "string")) return v.t == JV_STR;
    if (!strcmp(t, "mapping")) return v.t == JV_DICT;
    if (!strcmp(t, "iterable") || !strcmp(t, "sequence"))
        return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    if (!strcmp(t, "callable")) return v.t == JV_MACRO || v.t == JV_FUNC;
    if (!strcmp(t, "even") || !strcmp(t, "odd")) {
        if (v.t == JV_UNDEF) undef_fail(c, at, v);
        if (!is_num(v)) jfail(c, at, RF_ERR_TYPE, "test '%s' expects a number, got %s", t, type_name(v));
        jv r = binop(c, at, JOP_MOD, v, V_INT(2));
        return t[0] == 'e' ? num_f(r) == 0 : num_f(r) == 1;
    }
    if (!strcmp(t, "divisibleby")) {
        if (!is_intlike(v) || !is_intlike(x) || num_i(x) == 0) jfail(c, at, RF_ERR_TYPE, "divisibleby expects non-zero integers");
        return num_i(v) % num_i(x) == 0;
    }
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==")) return veq(v, x);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !veq(v, x);
    if (!strcmp(t, "lt") || !strcmp(t, "lessthan") || !strcmp(t, "<")) return vcmp(c, at, v, x, "<") < 0;
    if (!strcmp(t, "le") || !strcmp(t, "<=")) return vcmp(c, at, v, x, "<=") <= 0;
    if (!strcmp(t, "gt") || !strcmp(t, "greaterthan") || !strcmp(t, ">")) return vcmp(c, at, v, x, ">") > 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">=")) return vcmp(c, at, v, x, ">=") >= 0;
    if (!strcmp(t, "in")) return contains(c, at, x, v);
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        v = str_of(c, v); /* Jinja: str(value).islower() */
        bool any = false;
        for (size_t k = 0; k < v.u.s.n; k++) {
            unsigned char ch = (unsigned char)v.u.s.p[k];
            if (isalpha(ch)) {
                any = true;
                if (t[0] == 'l' ? isupper(ch) : islower(ch)) return false;
            }
        }
        return any;
    }
    if (!strcmp(t, "sameas")) {
        if (v.t != x.t) return false;
        if (v.t == JV_NONE || v.t == JV_UNDEF) return true;
        if (v.t == JV_BOOL) return v.u.b == x.u.b;
        if (v.t == JV_LIST) return v.u.l == x.u.l;
        if (v.t == JV_DICT || v.t == JV_NS) return v.u.d == x.u.d;
        return veq(v, x);
    }
    jfail(c, at, RF_ERR_UNSUPPORTED, "unsupported test '%s'", t);
}

static jv split_ws(ctx *c, jv s, int64_t maxsplit) {
    jlist *l = new_list(c, s.u.s.n / 2 + 1);
    l->n = 0;
    size_t k = 0, n = s.u.s.n;
    const char *p = s.u.s.p;
    for (;;) {
        while (k < n) {
            size_t adv;
            uint32_t cp = u8dec(p + k, n - k, &adv);
            if (!py_space(cp)) break;
            k += adv;
        }
        if (k >= n) break;
        if (maxsplit >= 0 && (int64_t)l->n == maxsplit) {
            jv rest = py_strip(c, str_sub(c, s, k, n - k), NULL, 0, false, true);
            l->v[l->n++] = rest;
            break;
        }
        size_t b = k;
        while (k < n) {
            size_t adv;
            uint32_t cp = u8dec(p + k, n - k, &adv);
            if (py_space(cp)) break;
            k += adv;
        }
        l->v[l->n++] = str_sub(c, s, b, k - b);
    }
    return V_LIST(l);
}

static bool has_prefix(jv s, jv pre, bool suffix) {
    if (pre.u.s.n > s.u.s.n) return false;
    const char *p = suffix ? s.u.s.p + s.u.s.n - pre.u.s.n : s.u.s.p;
    return memcmp(p, pre.u.s.p, pre.u.s.n) == 0;
}

static jv str_method(ctx *c, const jnode *at, jv s, const char *m, const argv_t *a) {
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        jv ch = arg(a, 0, "chars", V_NONE());
        bool l = m[0] != 'r', r = m[0] != 'l';
        if (ch.t == JV_NONE || ch.t == JV_UNDEF) return py_strip(c, s, NULL, 0, l, r);
        ch = need_str(c, at, ch, m);
        return py_strip(c, s, ch.u.s.p, ch.u.s.n, l, r);
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "capitalize") || !strcmp(m, "title")) {
        int mode = m[0] == 'l' ? 0 : m[0] == 'u' ? 1 : m[0] == 'c' ? 2 : 3;
        jv r = V_STR(ascii_case(c, s, mode), s.u.s.n);
        r.u.s.d = s.u.s.d; /* byte for byte: the ranges stay */
        return r;
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        jv pre = arg(a, 0, NULL, V_UNDEF("startswith needs an argument"));
        bool suf = m[0] == 'e';
        if (pre.t == JV_LIST) {
            for (size_t k = 0; k < pre.u.l->n; k++)
                if (has_prefix(s, need_str(c, at, pre.u.l->v[k], m), suf)) return V_BOOL(true);
            return V_BOOL(false);
        }
        return V_BOOL(has_prefix(s, need_str(c, at, pre, m), suf));
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        jv sep = arg(a, 0, "sep", V_NONE());
        jv ms = arg(a, 1, "maxsplit", V_INT(-1));
        int64_t maxsplit = is_intlike(ms) ? num_i(ms) : -1;
        if (m[0] == 'r' && maxsplit >= 0)
            jfail(c, at, RF_ERR_UNSUPPORTED, "rsplit with maxsplit is not supported");
        if (sep.t == JV_NONE || sep.t == JV_UNDEF) return split_ws(c, s, maxsplit);
        sep = need_str(c, at, sep, m);
        if (!sep.u.s.n) jfail(c, at, RF_ERR_FORMAT, "empty separator");
        jlist *l = new_list(c, s.u.s.n / sep.u.s.n + 2);
        l->n = 0;
        size_t b = 0;
        for (size_t k = 0; k + sep.u.s.n <= s.u.s.n;) {
            if ((maxsplit < 0 || (int64_t)l->n < maxsplit) && memcmp(s.u.s.p + k, sep.u.s.p, sep.u.s.n) == 0) {
                l->v[l->n++] = str_sub(c, s, b, k - b);
                k += sep.u.s.n;
                b = k;
            } else k++;
        }
        l->v[l->n++] = str_sub(c, s, b, s.u.s.n - b);
        return V_LIST(l);
    }
    if (!strcmp(m, "splitlines")) {
        jlist *l = new_list(c, s.u.s.n + 1);
        l->n = 0;
        size_t b = 0;
        for (size_t k = 0; k < s.u.s.n; k++)
            if (s.u.s.p[k] == '\n' || s.u.s.p[k] == '\r') {
                l->v[l->n++] = str_sub(c, s, b, k - b);
                if (s.u.s.p[k] == '\r' && k + 1 < s.u.s.n && s.u.s.p[k + 1] == '\n') k++;
                b = k + 1;
            }
        if (b < s.u.s.n) l->v[l->n++] = str_sub(c, s, b, s.u.s.n - b);
        return V_LIST(l);
    }
    if (!strcmp(m, "replace")) {
        jv old = need_str(c, at, arg(a, 0, "old", V_UNDEF("replace needs 'old'")), "replace");
        jv nw = need_str(c, at, arg(a, 1, "new", V_UNDEF("replace needs 'new'")), "replace");
        jv cnt = arg(a, 2, "count", V_INT(-1));
        int64_t left = is_intlike(cnt) ? num_i(cnt) : -1;
        sbuf b = {0};
        sb_put(c, &b, "", 0);
        if (!old.u.s.n) {
            /* Python inserts `new` between characters and at both ends */
            size_t cnt2;
            size_t *o = cp_offsets(c, s.u.s.p, s.u.s.n, &cnt2);
            for (size_t k = 0; k <= cnt2; k++) {
                if (b.n > c->lim.max_output) jfail(c, at, RF_ERR_RANGE, "replace result too large");
                if (left != 0) { sb_putv(c, &b, nw); if (left > 0) left--; }
                if (k < cnt2) sb_putv(c, &b, str_sub(c, s, o[k], o[k + 1] - o[k]));
            }
            return sb_val(&b);
        }
        size_t k = 0, seg = 0; /* s[seg, k) not yet copied */
        while (k < s.u.s.n) {
            if (left != 0 && k + old.u.s.n <= s.u.s.n && memcmp(s.u.s.p + k, old.u.s.p, old.u.s.n) == 0) {
                sb_putv(c, &b, str_sub(c, s, seg, k - seg));
                sb_putv(c, &b, nw);
                if (b.n > c->lim.max_output) jfail(c, at, RF_ERR_RANGE, "replace result too large");
                k += old.u.s.n;
                seg = k;
                if (left > 0) left--;
            } else k++;
        }
        sb_putv(c, &b, str_sub(c, s, seg, s.u.s.n - seg));
        return sb_val(&b);
    }
    if (!strcmp(m, "find") || !strcmp(m, "count")) {
        jv sub = need_str(c, at, arg(a, 0, "sub", V_UNDEF("needs a substring")), m);
        int64_t cnt = 0;
        for (size_t k = 0; k + sub.u.s.n <= s.u.s.n;) {
            if (memcmp(s.u.s.p + k, sub.u.s.p, sub.u.s.n) == 0) {
                if (m[0] == 'f') return V_INT((int64_t)cp_count(s.u.s.p, k));
                cnt++;
                k += sub.u.s.n ? sub.u.s.n : 1;
            } else k++;
        }
        return V_INT(m[0] == 'f' ? -1 : cnt);
    }
    if (!strcmp(m, "join")) {
        jlist *l = iter_list(c, at, arg(a, 0, NULL, V_UNDEF("join needs an iterable")));
        sbuf b = {0};
        sb_put(c, &b, "", 0);
        for (size_t k = 0; k < l->n; k++) {
            if (k) sb_putv(c, &b, s);
            sb_putv(c, &b, need_str(c, at, l->v[k], "join"));
        }
        return sb_val(&b);
    }
    if (!strcmp(m, "format")) {
        /* str.format with {}, {0}, {name} and {{ }} escapes; format specs are not supported */
        sbuf b = {0};
        sb_put(c, &b, "", 0);
        size_t auto_i = 0;
        for (size_t k = 0; k < s.u.s.n; k++) {
            char ch = s.u.s.p[k];
            if (ch == '{' && k + 1 < s.u.s.n && s.u.s.p[k + 1] == '{') { sb_putc(c, &b, '{'); k++; continue; }
            if (ch == '}' && k + 1 < s.u.s.n && s.u.s.p[k + 1] == '}') { sb_putc(c, &b, '}'); k++; continue; }
            if (ch == '}') jfail(c, at, RF_ERR_FORMAT, "Single '}' encountered in format string");
            if (ch != '{') { sb_putc(c, &b, ch); continue; }
            size_t e = k + 1;
            while (e < s.u.s.n && s.u.s.p[e] != '}') e++;
            if (e >= s.u.s.n) jfail(c, at, RF_ERR_FORMAT, "Single '{' encountered in format string");
            const char *f0 = s.u.s.p + k + 1;
            size_t fl = e - k - 1;
            if (memchr(f0, ':', fl) || memchr(f0, '!', fl) || memchr(f0, '.', fl) || memchr(f0, '[', fl))
                jfail(c, at, RF_ERR_UNSUPPORTED, "str.format: only {}, {N} and {name} fields are supported");
            jv v;
            if (fl == 0) v = arg(a, auto_i++, NULL, V_UNDEF(NULL));
            else if (isdigit((unsigned char)f0[0])) v = arg(a, (size_t)atoi(f0), NULL, V_UNDEF(NULL));
            else v = arg(a, SIZE_MAX, ja_strndup(&c->a, f0, fl), V_UNDEF(NULL));
            if (v.t == JV_UNDEF) jfail(c, at, RF_ERR_FORMAT, "str.format: missing argument for {%.*s}", (int)fl, f0);
            to_str(c, &b, v);
            k = e;
        }
        if (str_has_data(s)) sb_mark(c, &b, 0, b.n); /* a format string from data */
        return sb_val(&b);
    }
    if (!strcmp(m, "isdigit") || !strcmp(m, "isalpha") || !strcmp(m, "isspace")) {
        if (!s.u.s.n) return V_BOOL(false);
        for (size_t k = 0; k < s.u.s.n; k++) {
            unsigned char ch = (unsigned char)s.u.s.p[k];
            if (m[2] == 'd' ? !isdigit(ch) : m[2] == 'a' ? !isalpha(ch) : !isspace(ch)) return V_BOOL(false);
        }
        return V_BOOL(true);
    }
    jfail(c, at, RF_ERR_TYPE, "'str' object has no attribute '%s'", m);
}

static jv eval_method(ctx *c, scope *s, jnode *n) {
    jv obj = eval(c, s, n->a);
    argv_t a = eval_args(c, s, n);
    const char *m = n->name;
    if (obj.t == JV_UNDEF) undef_fail(c, n, obj);
    static const char *const mut[] = {"append", "extend", "insert", "pop", "remove", "update", "clear", "setdefault"};
    for (size_t k = 0; k < sizeof mut / sizeof mut[0]; k++)
        if (!strcmp(m, mut[k]) && (obj.t == JV_LIST || obj.t == JV_DICT || obj.t == JV_NS))
            jfail(c, n, RF_ERR_UNSUPPORTED, "access to attribute '%s' of '%s' object is unsafe.", m, type_name(obj));
    if (obj.t == JV_STR) return taint(c, str_method(c, n, obj, m, &a), obj, &a);
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jdict *d = obj.u.d;
        if (!strcmp(m, "items")) return V_VIEW(dict_items(c, d).u.l);
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            jlist *l = new_list(c, d->n);
            for (size_t k = 0; k < d->n; k++) l->v[k] = m[0] == 'k' ? d->k[k] : d->v[k];
            return V_VIEW(l);
        }
        if (!strcmp(m, "get")) {
            jv *f = dict_find(d, arg(&a, 0, "key", V_NONE()));
            return f ? *f : arg(&a, 1, "default", V_NONE());
        }
    }
    if (obj.t == JV_LIST && (!strcmp(m, "count") || !strcmp(m, "index")) && obj.u.l->kind != JL_GEN) {
        jv x = arg(&a, 0, NULL, V_UNDEF("list.count needs an argument"));
        int64_t cnt = 0;
        for (size_t k = 0; k < obj.u.l->n; k++)
            if (veq(obj.u.l->v[k], x)) {
                if (m[0] == 'i') return V_INT((int64_t)k);
                cnt++;
            }
        if (m[0] == 'i') jfail(c, n, RF_ERR_FORMAT, "list.index(x): x not in list");
        return V_INT(cnt);
    }
    if (obj.t == JV_LOOP && !strcmp(m, "cycle")) {
        if (!a.np) jfail(c, n, RF_ERR_FORMAT, "no items for cycling given");
        return a.pos[obj.u.loop->i % a.np];
    }
    jfail(c, n, RF_ERR_TYPE, "'%s' object has no attribute '%s'", type_name(obj), m);
}

static jv eval_inner(ctx *c, scope *s, jnode *n);
static jv eval(ctx *c, scope *s, jnode *n) {
    if (++c->edepth > MAX_EVAL_DEPTH) jfail(c, n, RF_ERR_RANGE, "expression nested deeper than %d", MAX_EVAL_DEPTH);
    jv r = eval_inner(c, s, n);
    c->edepth--;
    return r;
}
static jv eval_inner(ctx *c, scope *s, jnode *n) {
    switch (n->kind) {
    case JE_LIT: return n->lit;
    case JE_NAME: return lookup(c, s, n->name);
    case JE_ATTR: return getattr_v(c, n, eval(c, s, n->a), n->name);
    case JE_INDEX: {
        jv o = eval(c, s, n->a);
        return getitem_v(c, n, o, eval(c, s, n->b));
    }
    case JE_SLICE: {
        jv o = eval(c, s, n->a);
        jv a = n->b ? eval(c, s, n->b) : V_NONE();
        jv b = n->c ? eval(c, s, n->c) : V_NONE();
        jv st = n->args.n ? eval(c, s, n->args.v[0]) : V_NONE();
        return do_slice(c, n, o, a, b, st);
    }
    case JE_CALL: {
        jv f = lookup(c, s, n->name);
        argv_t a = eval_args(c, s, n);
        if (f.t == JV_MACRO) return call_macro(c, n, f.u.m, &a);
        if (f.t == JV_FUNC) return call_func(c, n, f.u.fn, &a);
        if (f.t == JV_UNDEF) undef_fail(c, n, f);
        jfail(c, n, RF_ERR_TYPE, "'%s' object is not callable", type_name(f));
    }
    case JE_METHOD: return eval_method(c, s, n);
    case JE_FILTER: {
        jv v = eval(c, s, n->a);
        argv_t a = eval_args(c, s, n);
        return taint(c, apply_filter(c, n, n->name, v, &a), v, &a);
    }
    case JE_TEST: {
        jv v = eval(c, s, n->a);
        argv_t a = eval_args(c, s, n);
        return V_BOOL(apply_test(c, n, n->name, v, &a));
    }
    case JE_BIN: {
        jv a = eval(c, s, n->a);
        jv b = eval(c, s, n->b);
        return binop(c, n, n->op, a, b);
    }
    case JE_NEG: case JE_POS: {
        jv v = eval(c, s, n->a);
        if (v.t == JV_UNDEF) undef_fail(c, n, v);
        if (!is_num(v)) jfail(c, n, RF_ERR_TYPE, "bad operand type for unary %c: '%s'", n->kind == JE_NEG ? '-' : '+', type_name(v));
        if (n->kind == JE_POS) return is_intlike(v) ? V_INT(num_i(v)) : v;
        if (is_intlike(v)) {
            if (num_i(v) == INT64_MIN) jfail(c, n, RF_ERR_RANGE, "integer overflow");
            return V_INT(-num_i(v));
        }
        return V_FLOAT(-v.u.f);
    }
    case JE_NOT: return V_BOOL(!truthy(eval(c, s, n->a)));
    case JE_AND: {
        jv a = eval(c, s, n->a);
        return truthy(a) ? eval(c, s, n->b) : a;
    }
    case JE_OR: {
        jv a = eval(c, s, n->a);
        return truthy(a) ? a : eval(c, s, n->b);
    }
    case JE_COND:
        if (truthy(eval(c, s, n->a))) return eval(c, s, n->b);
        return n->c ? eval(c, s, n->c) : V_UNDEF("the inline if-expression evaluated to false and no else section was defined");
    case JE_LIST: case JE_TUPLE: {
        jlist *l = new_list(c, n->args.n);
        l->tuple = n->kind == JE_TUPLE;
        for (size_t k = 0; k < n->args.n; k++) l->v[k] = eval(c, s, n->args.v[k]);
        return V_LIST(l);
    }
    case JE_DICT: {
        jdict *d = new_dict(c);
        for (size_t k = 0; k < n->args.n; k++) dict_set(c, d, eval(c, s, n->args.v[k]), eval(c, s, n->kwv.v[k]));
        return V_DICT(d);
    }
    case JE_CMP: {
        jv l = eval(c, s, n->a);
        for (size_t k = 0; k < n->args.n; k++) {
            jv r = eval(c, s, n->args.v[k]);
            bool ok;
            switch (n->ops[k]) {
            case JOP_EQ: ok = veq(l, r); break;
            case JOP_NE: ok = !veq(l, r); break;
            case JOP_LT: ok = vcmp(c, n, l, r, "<") < 0; break;
            case JOP_LE: ok = vcmp(c, n, l, r, "<=") <= 0; break;
            case JOP_GT: ok = vcmp(c, n, l, r, ">") > 0; break;
            case JOP_GE: ok = vcmp(c, n, l, r, ">=") >= 0; break;
            case JOP_IN: ok = contains(c, n, r, l); break;
            default: ok = !contains(c, n, r, l); break;
            }
            if (!ok) return V_BOOL(false);
            l = r;
        }
        return V_BOOL(true);
    }
    default:
        jfail(c, n, RF_ERR_INTERNAL, "bad expression node %d", n->kind);
    }
}

static void bind_targets(ctx *c, scope *s, const jnode *at, const char **targets, size_t nt, jv item) {
    if (nt == 1) {
        scope_set(c, s, targets[0], item);
        return;
    }
    jlist *l = iter_list(c, at, item);
    if (l->n != nt) jfail(c, at, RF_ERR_FORMAT, "cannot unpack %zu values into %zu targets", l->n, nt);
    for (size_t k = 0; k < nt; k++) scope_set(c, s, targets[k], l->v[k]);
}

static void exec_stmt(ctx *c, scope *s, jnode *n) {
    step(c, n);
    switch (n->kind) {
    case JN_TEXT: emit(c, n, V_STR(n->text, n->text_len)); return;
    case JN_OUT: {
        jv v = eval(c, s, n->a);
        if (v.t == JV_STR) emit(c, n, v);
        else {
            sbuf b = {0};
            to_str(c, &b, v);
            emit(c, n, sb_val(&b));
        }
        return;
    }
    case JN_IF:
        if (truthy(eval(c, s, n->a))) exec_list(c, s, n->body);
        else exec_list(c, s, n->els);
        return;
    case JN_FOR: {
        jv it = eval(c, s, n->a);
        if (it.t == JV_NONE || it.t == JV_INT || it.t == JV_FLOAT || it.t == JV_BOOL)
            jfail(c, n, RF_ERR_TYPE, "'%s' object is not iterable", type_name(it));
        jlist *items = iter_list(c, n, it);
        if (n->b) { /* loop filter: loop.* counts only the kept items */
            jlist *kept = new_list(c, items->n);
            kept->n = 0;
            for (size_t k = 0; k < items->n; k++) {
                scope *fs = new_scope(c, s);
                bind_targets(c, fs, n, n->targets, n->n_targets, items->v[k]);
                if (truthy(eval(c, fs, n->b))) kept->v[kept->n++] = items->v[k];
            }
            items = kept;
        }
        if (!items->n) {
            exec_list(c, s, n->els);
            return;
        }
        if (++c->depth > c->lim.max_depth) jfail(c, n, RF_ERR_RANGE, "statements nested deeper than %d", c->lim.max_depth);
        jloop *lp = ja_alloc(&c->a, sizeof *lp);
        lp->items = items;
        for (size_t k = 0; k < items->n; k++) {
            step(c, n);
            lp->i = k;
            scope *is = new_scope(c, s);
            bind_targets(c, is, n, n->targets, n->n_targets, items->v[k]);
            jv lv = {.t = JV_LOOP};
            lv.u.loop = lp;
            scope_set(c, is, "loop", lv);
            exec_list(c, is, n->body);
            if (c->loopctl == 1) { c->loopctl = 0; break; }
            c->loopctl = 0;
        }
        c->depth--;
        return;
    }
    case JN_SET: {
        jv v = eval(c, s, n->a);
        if (n->attr) {
            jv ns = lookup(c, s, n->name);
            if (ns.t != JV_NS) jfail(c, n, RF_ERR_TYPE, "cannot assign attribute on non-namespace object");
            dict_set(c, ns.u.d, V_CSTR(n->attr), v);
        } else if (n->n_targets) {
            bind_targets(c, s, n, n->targets, n->n_targets, v);
        } else {
            scope_set(c, s, n->name, v);
        }
        return;
    }
    case JN_SETBLOCK: case JN_FILTERBLOCK: {
        sbuf *saved = c->out;
        sbuf buf = {0};
        sb_put(c, &buf, "", 0);
        c->out = &buf;
        exec_list(c, s, n->body);
        c->out = saved;
        if (n->kind == JN_SETBLOCK) scope_set(c, s, n->name, sb_val(&buf));
        else {
            argv_t a = eval_args(c, s, n);
            jv in = sb_val(&buf);
            jv r = str_of(c, apply_filter(c, n, n->name, in, &a));
            emit(c, n, taint(c, r, in, &a));
        }
        return;
    }
    case JN_MACRO: {
        jmacro *m = ja_alloc(&c->a, sizeof *m);
        m->node = n;
        m->def = s;
        jv v = {.t = JV_MACRO};
        v.u.m = m;
        scope_set(c, s, n->name, v);
        return;
    }
    case JN_BREAK: c->loopctl = 1; return;
    case JN_CONTINUE: c->loopctl = 2; return;
    default: jfail(c, n, RF_ERR_INTERNAL, "bad statement node %d", n->kind);
    }
}

static void exec_list(ctx *c, scope *s, jlist_nodes body) {
    for (size_t k = 0; k < body.n; k++) {
        exec_stmt(c, s, body.v[k]);
        if (c->loopctl) return;
    }
}

static bool is_trusted(const char *const *trusted, const char *name) {
    for (; trusted && *trusted; trusted++)
        if (!strcmp(*trusted, name)) return true;
    return false;
}

rf_status rf_jinja_render(const rf_jinja *t, const json_t *vars, const rf_jinja_limits *lim,
                          time_t now, char **out, size_t *out_len) {
    rf_jinja_output o;
    rf_status st = rf_jinja_render_data(t, vars, NULL, lim, now, &o);
    if (out) *out = o.text;
    else free(o.text);
    if (out_len) *out_len = o.len;
    free(o.data);
    return st;
}

rf_status rf_jinja_render_data(const rf_jinja *t, const json_t *vars, const char *const *trusted,
                               const rf_jinja_limits *lim, time_t now, rf_jinja_output *o) {
    if (o) memset(o, 0, sizeof *o);
    if (!t || !o) return rf_set_error(RF_ERR_INVALID_ARG, "rf_jinja_render: NULL argument");
    g_last_raise = 0;
    if (vars && !json_is_object(vars)) return rf_set_error(RF_ERR_INVALID_ARG, "rf_jinja_render: vars must be a JSON object");
    ctx *c = calloc(1, sizeof *c);
    if (!c) return rf_set_error(RF_ERR_OOM, "chat template: out of memory");
    c->lim.max_output = lim && lim->max_output ? lim->max_output : RF_JINJA_DEFAULT_MAX_OUTPUT;
    c->lim.max_memory = lim && lim->max_memory ? lim->max_memory : RF_JINJA_DEFAULT_MAX_MEMORY;
    c->lim.max_steps = lim && lim->max_steps ? lim->max_steps : RF_JINJA_DEFAULT_MAX_STEPS;
    c->lim.max_depth = lim && lim->max_depth ? lim->max_depth : RF_JINJA_DEFAULT_MAX_DEPTH;
    c->now = now;
    c->trusted = trusted;
    c->a.fail = &c->jb;
    c->a.limit = c->lim.max_memory;
    if (setjmp(c->jb)) {
        rf_status st = c->st;
        if (c->a.fail_code == 1) { st = RF_ERR_OOM; snprintf(c->msg, sizeof c->msg, "chat template: out of memory while rendering"); }
        else if (c->a.fail_code == 2) { st = RF_ERR_RANGE; snprintf(c->msg, sizeof c->msg, "chat template: render exceeded the memory limit of %zu bytes", c->lim.max_memory); }
        g_last_raise = c->raised && !c->a.fail_code;
        json_decref(c->pending_json);
        rf_set_error(st, "%s", c->msg);
        ja_free(&c->a);
        free(c);
        return st;
    }
    scope *globals = new_scope(c, NULL);
    if (vars && json_object_size(vars) > 4096) jfail(c, NULL, RF_ERR_RANGE, "more than 4096 template variables");
    if (vars) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)vars, k, v) {
            scope_set(c, globals, ja_strndup(&c->a, k, strlen(k)), from_json(c, v, 0, !is_trusted(trusted, k)));
        }
    }
    scope *root = new_scope(c, globals);
    sbuf buf = {0};
    sb_put(c, &buf, "", 0);
    c->out = &buf;
    exec_list(c, root, t->body);
    size_t nd = buf.sp ? buf.sp->n : 0;
    char *res = malloc(buf.n + 1);
    rf_text_span *data = nd ? malloc(nd * sizeof *data) : NULL;
    if (!res || (nd && !data)) {
        free(res);
        free(data);
        ja_free(&c->a);
        free(c);
        return rf_set_error(RF_ERR_OOM, "chat template: out of memory");
    }
    if (buf.n) memcpy(res, buf.p, buf.n); /* an empty render leaves buf.p NULL */
    res[buf.n] = 0;
    for (size_t k = 0; k < nd; k++) data[k] = (rf_text_span){buf.sp->r[k][0], buf.sp->r[k][1]};
    o->text = res;
    o->len = buf.n;
    o->data = data;
    o->n_data = nd;
    ja_free(&c->a);
    free(c);
    return RF_OK;
}
