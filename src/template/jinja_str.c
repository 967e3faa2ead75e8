/* jinja_str.c — Python str methods on template strings (strip, split, replace, join, format, ...),
 * keeping byte-exact data marks. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "template/jinja_eval.h"

static jv split_ws(ctx *c, jv s, int64_t maxsplit) {
    jlist *l = new_list(c, s.u.s.n / 2 + 1);
    l->n = 0;
    size_t k = 0, n = s.u.s.n;
    const char *p = s.u.s.p;
    for (;;) {
        while (k < n) {
            size_t adv;
            uint32_t cp = jx_u8dec(p + k, n - k, &adv);
            if (!jx_py_space(cp)) break;
            k += adv;
        }
        if (k >= n) break;
        if (maxsplit >= 0 && (int64_t)l->n == maxsplit) {
            jv rest = jx_py_strip(c, jx_str_sub(c, s, k, n - k), NULL, 0, false, true);
            l->v[l->n++] = rest;
            break;
        }
        size_t b = k;
        while (k < n) {
            size_t adv;
            uint32_t cp = jx_u8dec(p + k, n - k, &adv);
            if (jx_py_space(cp)) break;
            k += adv;
        }
        l->v[l->n++] = jx_str_sub(c, s, b, k - b);
    }
    return V_LIST(l);
}

static bool has_prefix(jv s, jv pre, bool suffix) {
    if (pre.u.s.n > s.u.s.n) return false;
    const char *p = suffix ? s.u.s.p + s.u.s.n - pre.u.s.n : s.u.s.p;
    return memcmp(p, pre.u.s.p, pre.u.s.n) == 0;
}

/* str.split / str.rsplit (rsplit without maxsplit only) */
static jv str_split(ctx *c, const jnode *at, jv s, const char *m, const argv_t *a) {
    jv sep = jx_arg(a, 0, "sep", V_NONE());
    jv ms = jx_arg(a, 1, "maxsplit", V_INT(-1));
    int64_t maxsplit = is_intlike(ms) ? num_i(ms) : -1;
    if (m[0] == 'r' && maxsplit >= 0)
        jx_jfail(c, at, RF_ERR_UNSUPPORTED, "rsplit with maxsplit is not supported");
    if (sep.t == JV_NONE || sep.t == JV_UNDEF) return split_ws(c, s, maxsplit);
    sep = jx_need_str(c, at, sep, m);
    if (!sep.u.s.n) jx_jfail(c, at, RF_ERR_FORMAT, "empty separator");
    jlist *l = new_list(c, s.u.s.n / sep.u.s.n + 2);
    l->n = 0;
    size_t b = 0;
    for (size_t k = 0; k + sep.u.s.n <= s.u.s.n;) {
        if ((maxsplit < 0 || (int64_t)l->n < maxsplit) && memcmp(s.u.s.p + k, sep.u.s.p, sep.u.s.n) == 0) {
            l->v[l->n++] = jx_str_sub(c, s, b, k - b);
            k += sep.u.s.n;
            b = k;
        } else k++;
    }
    l->v[l->n++] = jx_str_sub(c, s, b, s.u.s.n - b);
    return V_LIST(l);
}

/* str.replace with Python's rules (an empty `old` inserts between characters) */
static jv str_replace(ctx *c, const jnode *at, jv s, const argv_t *a) {
    jv old = jx_need_str(c, at, jx_arg(a, 0, "old", V_UNDEF("replace needs 'old'")), "replace");
    jv nw = jx_need_str(c, at, jx_arg(a, 1, "new", V_UNDEF("replace needs 'new'")), "replace");
    jv cnt = jx_arg(a, 2, "count", V_INT(-1));
    int64_t left = is_intlike(cnt) ? num_i(cnt) : -1;
    sbuf b = {0};
    jx_sb_put(c, &b, "", 0);
    if (!old.u.s.n) {
        /* Python inserts `new` between characters and at both ends */
        size_t cnt2;
        size_t *o = jx_cp_offsets(c, s.u.s.p, s.u.s.n, &cnt2);
        for (size_t k = 0; k <= cnt2; k++) {
            if (b.n > c->lim.max_output) jx_jfail(c, at, RF_ERR_RANGE, "replace result too large");
            if (left != 0) { jx_sb_putv(c, &b, nw); if (left > 0) left--; }
            if (k < cnt2) jx_sb_putv(c, &b, jx_str_sub(c, s, o[k], o[k + 1] - o[k]));
        }
        return sb_val(&b);
    }
    size_t k = 0, seg = 0; /* s[seg, k) not yet copied */
    while (k < s.u.s.n) {
        if (left != 0 && k + old.u.s.n <= s.u.s.n && memcmp(s.u.s.p + k, old.u.s.p, old.u.s.n) == 0) {
            jx_sb_putv(c, &b, jx_str_sub(c, s, seg, k - seg));
            jx_sb_putv(c, &b, nw);
            if (b.n > c->lim.max_output) jx_jfail(c, at, RF_ERR_RANGE, "replace result too large");
            k += old.u.s.n;
            seg = k;
            if (left > 0) left--;
        } else k++;
    }
    jx_sb_putv(c, &b, jx_str_sub(c, s, seg, s.u.s.n - seg));
    return sb_val(&b);
}

/* str.format with {}, {0}, {name} and {{ }} escapes; format specs are not supported */
static jv str_format(ctx *c, const jnode *at, jv s, const argv_t *a) {
    sbuf b = {0};
    jx_sb_put(c, &b, "", 0);
    size_t auto_i = 0;
    for (size_t k = 0; k < s.u.s.n; k++) {
        char ch = s.u.s.p[k];
        if (ch == '{' && k + 1 < s.u.s.n && s.u.s.p[k + 1] == '{') { jx_sb_putc(c, &b, '{'); k++; continue; }
        if (ch == '}' && k + 1 < s.u.s.n && s.u.s.p[k + 1] == '}') { jx_sb_putc(c, &b, '}'); k++; continue; }
        if (ch == '}') jx_jfail(c, at, RF_ERR_FORMAT, "Single '}' encountered in format string");
        if (ch != '{') { jx_sb_putc(c, &b, ch); continue; }
        size_t e = k + 1;
        while (e < s.u.s.n && s.u.s.p[e] != '}') e++;
        if (e >= s.u.s.n) jx_jfail(c, at, RF_ERR_FORMAT, "Single '{' encountered in format string");
        const char *f0 = s.u.s.p + k + 1;
        size_t fl = e - k - 1;
        if (memchr(f0, ':', fl) || memchr(f0, '!', fl) || memchr(f0, '.', fl) || memchr(f0, '[', fl))
            jx_jfail(c, at, RF_ERR_UNSUPPORTED, "str.format: only {}, {N} and {name} fields are supported");
        jv v;
        if (fl == 0) v = jx_arg(a, auto_i++, NULL, V_UNDEF(NULL));
        else if (isdigit((unsigned char)f0[0])) v = jx_arg(a, (size_t)atoi(f0), NULL, V_UNDEF(NULL));
        else v = jx_arg(a, SIZE_MAX, ja_strndup(&c->a, f0, fl), V_UNDEF(NULL));
        if (v.t == JV_UNDEF) jx_jfail(c, at, RF_ERR_FORMAT, "str.format: missing argument for {%.*s}", (int)fl, f0);
        jx_to_str(c, &b, v);
        k = e;
    }
    if (str_has_data(s)) jx_sb_mark(c, &b, 0, b.n); /* a format string from data */
    return sb_val(&b);
}

jv jx_str_method(ctx *c, const jnode *at, jv s, const char *m, const argv_t *a) {
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        jv ch = jx_arg(a, 0, "chars", V_NONE());
        bool l = m[0] != 'r', r = m[0] != 'l';
        if (ch.t == JV_NONE || ch.t == JV_UNDEF) return jx_py_strip(c, s, NULL, 0, l, r);
        ch = jx_need_str(c, at, ch, m);
        return jx_py_strip(c, s, ch.u.s.p, ch.u.s.n, l, r);
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "capitalize") || !strcmp(m, "title")) {
        int mode = m[0] == 'l' ? 0 : m[0] == 'u' ? 1 : m[0] == 'c' ? 2 : 3;
        jv r = V_STR(jx_ascii_case(c, s, mode), s.u.s.n);
        r.u.s.d = s.u.s.d; /* byte for byte: the ranges stay */
        return r;
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        jv pre = jx_arg(a, 0, NULL, V_UNDEF("startswith needs an argument"));
        bool suf = m[0] == 'e';
        if (pre.t == JV_LIST) {
            for (size_t k = 0; k < pre.u.l->n; k++)
                if (has_prefix(s, jx_need_str(c, at, pre.u.l->v[k], m), suf)) return V_BOOL(true);
            return V_BOOL(false);
        }
        return V_BOOL(has_prefix(s, jx_need_str(c, at, pre, m), suf));
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) return str_split(c, at, s, m, a);
    if (!strcmp(m, "splitlines")) {
        jlist *l = new_list(c, s.u.s.n + 1);
        l->n = 0;
        size_t b = 0;
        for (size_t k = 0; k < s.u.s.n; k++)
            if (s.u.s.p[k] == '\n' || s.u.s.p[k] == '\r') {
                l->v[l->n++] = jx_str_sub(c, s, b, k - b);
                if (s.u.s.p[k] == '\r' && k + 1 < s.u.s.n && s.u.s.p[k + 1] == '\n') k++;
                b = k + 1;
            }
        if (b < s.u.s.n) l->v[l->n++] = jx_str_sub(c, s, b, s.u.s.n - b);
        return V_LIST(l);
    }
    if (!strcmp(m, "replace")) return str_replace(c, at, s, a);
    if (!strcmp(m, "find") || !strcmp(m, "count")) {
        jv sub = jx_need_str(c, at, jx_arg(a, 0, "sub", V_UNDEF("needs a substring")), m);
        int64_t cnt = 0;
        for (size_t k = 0; k + sub.u.s.n <= s.u.s.n;) {
            if (memcmp(s.u.s.p + k, sub.u.s.p, sub.u.s.n) == 0) {
                if (m[0] == 'f') return V_INT((int64_t)jx_cp_count(s.u.s.p, k));
                cnt++;
                k += sub.u.s.n ? sub.u.s.n : 1;
            } else k++;
        }
        return V_INT(m[0] == 'f' ? -1 : cnt);
    }
    if (!strcmp(m, "join")) {
        jlist *l = jx_iter_list(c, at, jx_arg(a, 0, NULL, V_UNDEF("join needs an iterable")));
        sbuf b = {0};
        jx_sb_put(c, &b, "", 0);
        for (size_t k = 0; k < l->n; k++) {
            if (k) jx_sb_putv(c, &b, s);
            jx_sb_putv(c, &b, jx_need_str(c, at, l->v[k], "join"));
        }
        return sb_val(&b);
    }
    if (!strcmp(m, "format")) return str_format(c, at, s, a);
    if (!strcmp(m, "isdigit") || !strcmp(m, "isalpha") || !strcmp(m, "isspace")) {
        if (!s.u.s.n) return V_BOOL(false);
        for (size_t k = 0; k < s.u.s.n; k++) {
            unsigned char ch = (unsigned char)s.u.s.p[k];
            if (m[2] == 'd' ? !isdigit(ch) : m[2] == 'a' ? !isalpha(ch) : !isspace(ch)) return V_BOOL(false);
        }
        return V_BOOL(true);
    }
    jx_jfail(c, at, RF_ERR_TYPE, "'str' object has no attribute '%s'", m);
}
