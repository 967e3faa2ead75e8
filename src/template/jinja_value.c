/* jinja_value.c — the evaluator's values: errors and the step limit, string buffers and the data
 * ranges they carry (jspans), Python str()/repr(), truthiness, equality and ordering, dicts. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "template/jinja_eval.h"

/* ---- errors --------------------------------------------------------------------------------- */

void jx_jfail(ctx *c, const jnode *at, rf_status st, const char *fmt, ...) {
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

void jx_step(ctx *c, const jnode *at) {
    if (++c->steps > c->lim.max_steps)
        jx_jfail(c, at, RF_ERR_RANGE, "render exceeded %llu steps (loop or recursion limit)",
              (unsigned long long)c->lim.max_steps);
}

/* ---- values --------------------------------------------------------------------------------- */

const char *jx_type_name(jv v) {
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

void jx_undef_fail(ctx *c, const jnode *at, jv v) {
    jx_jfail(c, at, RF_ERR_FORMAT, "%s", v.u.undef_name ? v.u.undef_name : "value is undefined");
}

/* ---- string buffers (arena-backed) ----------------------------------------------------------- */

void jx_sb_reserve(ctx *c, sbuf *b, size_t extra) {
    if (b->cap - b->n >= extra + 1) return;
    if (extra > ((size_t)1 << 40)) jx_jfail(c, NULL, RF_ERR_RANGE, "string too long");
    size_t nc = b->cap ? b->cap * 2 : 64;
    while (nc - b->n < extra + 1) nc *= 2;
    char *np = ja_alloc(&c->a, nc);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = nc;
}
void jx_sb_put(ctx *c, sbuf *b, const char *s, size_t n) {
    if (!n) return;
    jx_sb_reserve(c, b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void jx_sb_puts(ctx *c, sbuf *b, const char *s) { jx_sb_put(c, b, s, strlen(s)); }
void jx_sb_putc(ctx *c, sbuf *b, char ch) { jx_sb_put(c, b, &ch, 1); }

/* ---- data ranges (jspans, jinja_internal.h) -------------------------------------------------- */

/* Marks b's bytes [from, to) as data, merging with the last range when they touch. */
void jx_sb_mark(ctx *c, sbuf *b, size_t from, size_t to) {
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
void jx_sb_putv(ctx *c, sbuf *b, jv s) {
    size_t base = b->n;
    jx_sb_put(c, b, s.u.s.p, s.u.s.n);
    const jspans *d = s.u.s.d;
    for (size_t k = 0; d && k < d->n; k++) jx_sb_mark(c, b, base + d->r[k][0], base + d->r[k][1]);
}
/* The string marked as data from end to end. */
jv jx_all_data(ctx *c, jv s) {
    if (s.t != JV_STR || !s.u.s.n) return s;
    jspans *d = ja_alloc(&c->a, sizeof(jspans) + sizeof d->r[0]);
    d->n = 1;
    d->r[0][0] = 0;
    d->r[0][1] = s.u.s.n;
    s.u.s.d = d;
    return s;
}
/* s[off, off + n) with its data ranges clipped and shifted */
jv jx_str_sub(ctx *c, jv s, size_t off, size_t n) {
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
bool jx_has_data(jv v) {
    size_t budget = 100000;
    return has_data_n(v, &budget);
}

void jx_emit(ctx *c, const jnode *at, jv s) {
    c->out_total += s.u.s.n;
    if (c->out_total > c->lim.max_output)
        jx_jfail(c, at, RF_ERR_RANGE, "render output exceeded %zu bytes", c->lim.max_output);
    jx_sb_putv(c, c->out, s);
}

/* ---- UTF-8 and Python string helpers --------------------------------------------------------- */

uint32_t jx_u8dec(const char *s, size_t n, size_t *adv) {
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
    jx_u8dec(s + k, n - k, &adv);
    return k + adv == n ? k : n - 1;
}
bool jx_py_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == 32 || (cp >= 0x1c && cp <= 0x1f) || cp == 0x85 ||
           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}
static bool cp_in(uint32_t cp, const char *set, size_t n) {
    for (size_t k = 0; k < n;) {
        size_t adv;
        uint32_t x = jx_u8dec(set + k, n - k, &adv);
        if (x == cp) return true;
        k += adv;
    }
    return false;
}
/* Python str.strip/lstrip/rstrip; chars NULL = whitespace */
jv jx_py_strip(ctx *c, jv s, const char *chars, size_t nch, bool left, bool right) {
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n;
    while (left && b < e) {
        size_t adv;
        uint32_t cp = jx_u8dec(p + b, e - b, &adv);
        if (chars ? !cp_in(cp, chars, nch) : !jx_py_space(cp)) break;
        b += adv;
    }
    while (right && e > b) {
        size_t k = u8prev(p + b, e - b) + b;
        size_t adv;
        uint32_t cp = jx_u8dec(p + k, e - k, &adv);
        if (chars ? !cp_in(cp, chars, nch) : !jx_py_space(cp)) break;
        e = k;
    }
    return jx_str_sub(c, s, b, e - b);
}
size_t jx_cp_count(const char *s, size_t n) {
    size_t cnt = 0;
    for (size_t k = 0; k < n; k++)
        if (((unsigned char)s[k] & 0xC0) != 0x80) cnt++;
    return cnt;
}
/* byte offsets of each code point start, plus n at the end (array of cnt+1) */
size_t *jx_cp_offsets(ctx *c, const char *s, size_t n, size_t *cnt) {
    size_t m = jx_cp_count(s, n);
    size_t *o = ja_alloc(&c->a, (m + 1) * sizeof(size_t));
    size_t j = 0;
    for (size_t k = 0; k < n; k++)
        if (((unsigned char)s[k] & 0xC0) != 0x80) o[j++] = k;
    o[m] = n;
    *cnt = m;
    return o;
}
char *jx_ascii_case(ctx *c, jv s, int mode) { /* 0 lower 1 upper 2 capitalize 3 title */
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
void jx_fmt_float(char *buf, size_t cap, double x, bool json) {
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

static void repr_str(ctx *c, sbuf *b, jv s) {
    size_t base = b->n;
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jx_sb_putc(c, b, q);
    for (size_t k = 0; k < n;) {
        size_t adv;
        uint32_t cp = jx_u8dec(p + k, n - k, &adv);
        char e[16];
        if (cp == (uint32_t)q || cp == '\\') { jx_sb_putc(c, b, '\\'); jx_sb_putc(c, b, (char)cp); }
        else if (cp == '\n') jx_sb_puts(c, b, "\\n");
        else if (cp == '\r') jx_sb_puts(c, b, "\\r");
        else if (cp == '\t') jx_sb_puts(c, b, "\\t");
        else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0xa0) || cp == 0xad) {
            snprintf(e, sizeof e, "\\x%02x", cp);
            jx_sb_puts(c, b, e);
        } else if (cp == 0x2028 || cp == 0x2029 || (cp >= 0x200b && cp <= 0x200f) || cp == 0xfeff) {
            snprintf(e, sizeof e, "\\u%04x", cp);
            jx_sb_puts(c, b, e);
        } else jx_sb_put(c, b, p + k, adv);
        k += adv;
    }
    jx_sb_putc(c, b, q);
    if (str_has_data(s)) jx_sb_mark(c, b, base, b->n);
}

static void repr(ctx *c, sbuf *b, jv v) {
    if (v.t == JV_STR) repr_str(c, b, v);
    else jx_to_str(c, b, v);
}

static void to_str_inner(ctx *c, sbuf *b, jv v);
void jx_to_str(ctx *c, sbuf *b, jv v) {
    if (v.t == JV_LIST || v.t == JV_DICT || v.t == JV_NS) {
        if (++c->rdepth > MAX_VALUE_DEPTH) jx_jfail(c, NULL, RF_ERR_RANGE, "value nested too deeply to print");
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
    case JV_NONE: jx_sb_puts(c, b, "None"); return;
    case JV_BOOL: jx_sb_puts(c, b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jx_sb_puts(c, b, tmp); return;
    case JV_FLOAT: jx_fmt_float(tmp, sizeof tmp, v.u.f, false); jx_sb_puts(c, b, tmp); return;
    case JV_STR: jx_sb_putv(c, b, v); return;
    case JV_LIST:
        if (v.u.l->kind == JL_GEN) { jx_sb_puts(c, b, "<generator object>"); return; }
        jx_sb_putc(c, b, v.u.l->tuple ? '(' : '[');
        for (size_t k = 0; k < v.u.l->n; k++) {
            if (k) jx_sb_puts(c, b, ", ");
            repr(c, b, v.u.l->v[k]);
        }
        if (v.u.l->tuple && v.u.l->n == 1) jx_sb_putc(c, b, ',');
        jx_sb_putc(c, b, v.u.l->tuple ? ')' : ']');
        return;
    case JV_NS:
        jx_sb_puts(c, b, "<Namespace ");
        /* fallthrough */
    case JV_DICT:
        jx_sb_putc(c, b, '{');
        for (size_t k = 0; k < v.u.d->n; k++) {
            if (k) jx_sb_puts(c, b, ", ");
            repr(c, b, v.u.d->k[k]);
            jx_sb_puts(c, b, ": ");
            repr(c, b, v.u.d->v[k]);
        }
        jx_sb_putc(c, b, '}');
        if (v.t == JV_NS) jx_sb_putc(c, b, '>');
        return;
    case JV_MACRO: jx_sb_puts(c, b, "<Macro>"); return;
    case JV_FUNC: jx_sb_puts(c, b, "<function>"); return;
    case JV_LOOP: jx_sb_puts(c, b, "<LoopContext>"); return;
    }
}

jv jx_str_of(ctx *c, jv v) {
    if (v.t == JV_STR) return v;
    sbuf b = {0};
    jx_to_str(c, &b, v);
    return sb_val(&b);
}

bool jx_truthy(jv v) {
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

static bool veq_d(jv a, jv b, int d);
bool jx_veq(jv a, jv b) { return veq_d(a, b, 0); }
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
int jx_vcmp(ctx *c, const jnode *at, jv a, jv b, const char *op) {
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
            if (!jx_veq(a.u.l->v[k], b.u.l->v[k])) {
                if (++c->rdepth > MAX_VALUE_DEPTH) jx_jfail(c, at, RF_ERR_RANGE, "values nested too deeply to compare");
                int r = jx_vcmp(c, at, a.u.l->v[k], b.u.l->v[k], op);
                c->rdepth--;
                return r;
            }
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == JV_UNDEF) jx_undef_fail(c, at, a);
    if (b.t == JV_UNDEF) jx_undef_fail(c, at, b);
    jx_jfail(c, at, RF_ERR_TYPE, "'%s' not supported between instances of '%s' and '%s'", op,
          jx_type_name(a), jx_type_name(b));
}

/* ---- dicts and scopes ----------------------------------------------------------------------- */

jv *jx_dict_find(jdict *d, jv key) {
    for (size_t k = 0; k < d->n; k++)
        if (jx_veq(d->k[k], key)) return &d->v[k];
    return NULL;
}
jv *jx_dict_find_s(jdict *d, const char *key, size_t n) {
    for (size_t k = 0; k < d->n; k++)
        if (d->k[k].t == JV_STR && d->k[k].u.s.n == n && memcmp(d->k[k].u.s.p, key, n) == 0) return &d->v[k];
    return NULL;
}
void jx_dict_set(ctx *c, jdict *d, jv key, jv val) {
    jv *f = jx_dict_find(d, key);
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
