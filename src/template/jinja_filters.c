/* jinja_filters.c — Jinja filters and tests (trim, tojson, join, map, select, sort, indent, ...)
 * with the data marks each one keeps. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "template/jinja_eval.h"

static argv_t shift_args(ctx *c, const argv_t *a, size_t skip) {
    argv_t r = *a;
    r.np = a->np > skip ? a->np - skip : 0;
    r.pos = a->pos + (a->np > skip ? skip : a->np);
    (void)c;
    return r;
}

/* select/reject/selectattr/rejectattr */
static jv do_select(ctx *c, const jnode *at, jv v, const argv_t *a, bool attr, bool want) {
    if (!jx_truthy(v)) return V_GEN(new_list(c, 0)); /* Jinja: `if value:` before iterating */
    jlist *in = jx_iter_list(c, at, v);
    jlist *out = new_list(c, in->n);
    out->n = 0;
    size_t base = 0;
    jv aname = {0};
    if (attr) {
        aname = jx_need_str(c, at, jx_arg(a, 0, NULL, V_UNDEF("selectattr needs an attribute")), "selectattr");
        base = 1;
    }
    jv tname = jx_arg(a, base, NULL, V_NONE());
    argv_t rest = shift_args(c, a, base + 1);
    rest.nk = 0;
    for (size_t k = 0; k < in->n; k++) {
        jv item = in->v[k];
        if (attr) item = jx_getattr_v(c, at, item, ja_strndup(&c->a, aname.u.s.p, aname.u.s.n));
        bool ok;
        if (tname.t == JV_NONE) ok = jx_truthy(item);
        else ok = jx_apply_test(c, at, ja_strndup(&c->a, jx_need_str(c, at, tname, "select").u.s.p, tname.u.s.n), item, &rest);
        if (ok == want) out->v[out->n++] = in->v[k];
    }
    return V_GEN(out);
}

/* Filters that make a string (and from_json, which reads one). */
static bool filter_text(ctx *c, const jnode *at, const char *f, jv v, const argv_t *a, jv *res) {
    if (!strcmp(f, "safe")) {
        if (v.t != JV_STR) v = jx_str_of(c, v);
        v.markup = true;
        return *res = v, true;
    }
    if (!strcmp(f, "tojson")) {
        json_opts o = {-1, ", ", ": ", false, false};
        o.ensure_ascii = jx_truthy(jx_arg(a, 0, "ensure_ascii", V_BOOL(false)));
        jv ind = jx_arg(a, 1, "indent", V_NONE());
        if (ind.t != JV_NONE) {
            if (!is_intlike(ind)) jx_jfail(c, at, RF_ERR_UNSUPPORTED, "tojson: indent must be an integer");
            o.indent = (int)(num_i(ind) < 0 ? 0 : num_i(ind) > 64 ? 64 : num_i(ind));
            o.item_sep = ",";
        }
        jv seps = jx_arg(a, 2, "separators", V_NONE());
        if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR && seps.u.l->v[1].t == JV_STR) {
            o.item_sep = ja_strndup(&c->a, seps.u.l->v[0].u.s.p, seps.u.l->v[0].u.s.n);
            o.key_sep = ja_strndup(&c->a, seps.u.l->v[1].u.s.p, seps.u.l->v[1].u.s.n);
        }
        o.sort_keys = jx_truthy(jx_arg(a, 3, "sort_keys", V_BOOL(false)));
        sbuf b = {0};
        jx_to_json(c, at, &b, v, &o, 0);
        return *res = sb_val(&b), true;
    }
    if (!strcmp(f, "from_json")) {
        /* llama.cpp's extension (not in transformers): json.loads of a string */
        jv sv = jx_need_str(c, at, v, "from_json");
        json_error_t e;
        json_t *j = json_loadb(sv.u.s.p, sv.u.s.n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
        if (!j) jx_jfail(c, at, RF_ERR_FORMAT, "from_json: %s", e.text);
        c->pending_json = j; /* released by the error path if the conversion fails */
        jv r = jx_from_json(c, j, 0, str_has_data(sv));
        c->pending_json = NULL;
        json_decref(j);
        return *res = r, true;
    }
    if (!strcmp(f, "string")) return *res = jx_str_of(c, v), true;
    if (!strcmp(f, "trim")) {
        jv s = jx_str_of(c, v);
        argv_t r = *a;
        return *res = jx_str_method(c, at, s, "strip", &r), true;
    }
    if (!strcmp(f, "lower") || !strcmp(f, "upper") || !strcmp(f, "capitalize") || !strcmp(f, "title")) {
        jv s = jx_str_of(c, v);
        int mode = f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 'c' ? 2 : 3;
        jv r = V_STR(jx_ascii_case(c, s, mode), s.u.s.n);
        r.u.s.d = s.u.s.d; /* byte for byte: the ranges stay */
        return *res = r, true;
    }
    if (!strcmp(f, "replace")) {
        jv s = jx_str_of(c, v);
        argv_t r = *a;
        return *res = jx_str_method(c, at, s, "replace", &r), true;
    }
    if (!strcmp(f, "escape") || !strcmp(f, "e")) {
        if (v.t == JV_STR && v.markup) return *res = v, true;
        return *res = jx_html_escape(c, jx_str_of(c, v)), true;
    }
    if (!strcmp(f, "indent")) {
        if (v.t != JV_STR) jx_jfail(c, at, RF_ERR_TYPE, "indent expects a string, got %s", jx_type_name(v));
        jv s = v;
        jv w = jx_arg(a, 0, "width", V_INT(4));
        bool first = jx_truthy(jx_arg(a, 1, "first", V_BOOL(false)));
        bool blank = jx_truthy(jx_arg(a, 2, "blank", V_BOOL(false)));
        sbuf ind = {0};
        jx_sb_put(c, &ind, "", 0);
        if (w.t == JV_STR) jx_sb_putv(c, &ind, w);
        else for (int64_t k = 0; k < (is_intlike(w) ? num_i(w) : 4) && k < 256; k++) jx_sb_putc(c, &ind, ' ');
        /* as Jinja: s + "\n", splitlines(), the first line as is, later non-empty lines (all
         * with blank=True) prefixed */
        sbuf b = {0};
        jx_sb_put(c, &b, "", 0);
        if (first) jx_sb_putv(c, &b, sb_val(&ind));
        size_t k = 0, line = 0, n = s.u.s.n;
        while (k <= n) {
            size_t e = k;
            while (e < n && s.u.s.p[e] != '\n') e++;
            /* the piece after the appended newline is empty and not a line */
            if (line > 0) {
                jx_sb_putc(c, &b, '\n');
                if (blank || e > k) jx_sb_putv(c, &b, sb_val(&ind));
            }
            jx_sb_putv(c, &b, jx_str_sub(c, s, k, e - k));
            line++;
            k = e + 1;
        }
        return *res = sb_val(&b), true;
    }
    if (!strcmp(f, "wordcount")) {
        jv s = jx_str_of(c, v);
        int64_t n = 0;
        bool in = false;
        for (size_t k = 0; k < s.u.s.n; k++) {
            unsigned char ch = (unsigned char)s.u.s.p[k];
            bool w = isalnum(ch) || ch == '_' || ch >= 0x80;
            if (w && !in) n++;
            in = w;
        }
        return *res = V_INT(n), true;
    }
    return false;
}

/* Filters of numbers. */
static bool filter_number(ctx *c, const jnode *at, const char *f, jv v, const argv_t *a, jv *res) {
    if ((!strcmp(f, "int") || !strcmp(f, "float")) && v.t == JV_UNDEF) jx_undef_fail(c, at, v);
    if (!strcmp(f, "int")) {
        jv def = jx_arg(a, 0, "default", V_INT(0));
        if (v.t == JV_INT) return *res = v, true;
        if (v.t == JV_BOOL) return *res = V_INT(v.u.b), true;
        if (v.t == JV_FLOAT) return *res = isfinite(v.u.f) ? V_INT((int64_t)v.u.f) : def, true;
        if (v.t == JV_STR) {
            jv s = jx_py_strip(c, v, NULL, 0, true, true);
            char *z = ja_strndup(&c->a, s.u.s.p, s.u.s.n), *e;
            long long i = strtoll(z, &e, 10);
            if (*z && !*e) return *res = V_INT(i), true;
            double d = strtod(z, &e);
            if (*z && !*e && isfinite(d)) return *res = V_INT((int64_t)d), true;
        }
        return *res = def, true;
    }
    if (!strcmp(f, "float")) {
        jv def = jx_arg(a, 0, "default", V_FLOAT(0.0));
        if (is_num(v)) return *res = V_FLOAT(num_f(v)), true;
        if (v.t == JV_STR) {
            jv s = jx_py_strip(c, v, NULL, 0, true, true);
            char *z = ja_strndup(&c->a, s.u.s.p, s.u.s.n), *e;
            double d = strtod(z, &e);
            if (*z && !*e) return *res = V_FLOAT(d), true;
        }
        return *res = def, true;
    }
    if (!strcmp(f, "abs")) {
        if (is_intlike(v)) {
            if (num_i(v) == INT64_MIN) jx_jfail(c, at, RF_ERR_RANGE, "integer overflow in abs()");
            return *res = V_INT(num_i(v) < 0 ? -num_i(v) : num_i(v)), true;
        }
        if (is_num(v)) return *res = V_FLOAT(fabs(num_f(v))), true;
        jx_jfail(c, at, RF_ERR_TYPE, "bad operand type for abs(): '%s'", jx_type_name(v));
    }
    if (!strcmp(f, "round")) {
        jv p = jx_arg(a, 0, "precision", V_INT(0));
        if (!is_num(v)) jx_jfail(c, at, RF_ERR_TYPE, "round: expects a number");
        if (is_intlike(v) && num_i(p) >= 0) return *res = V_INT(num_i(v)), true; /* round(int, n) is an int */
        double m = pow(10.0, (double)num_i(p));
        return *res = V_FLOAT(nearbyint(num_f(v) * m) / m), true; /* Python round(): half to even */
    }
    return false;
}

/* Filters of sequences and mappings, default and attr. */
static bool filter_seq(ctx *c, const jnode *at, const char *f, jv v, const argv_t *a, jv *res) {
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        jv def = jx_arg(a, 0, "default_value", V_CSTR(""));
        bool boolean = jx_truthy(jx_arg(a, 1, "boolean", V_BOOL(false)));
        if (v.t == JV_UNDEF || (boolean && !jx_truthy(v))) return *res = def, true;
        return *res = v, true;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        switch (v.t) {
        case JV_UNDEF: return *res = V_INT(0), true;
        case JV_STR: return *res = V_INT((int64_t)jx_cp_count(v.u.s.p, v.u.s.n)), true;
        case JV_LIST:
            if (v.u.l->kind == JL_GEN) jx_jfail(c, at, RF_ERR_TYPE, "object of type 'generator' has no len()");
            return *res = V_INT((int64_t)v.u.l->n), true;
        case JV_DICT: case JV_NS: return *res = V_INT((int64_t)v.u.d->n), true;
        default: jx_jfail(c, at, RF_ERR_TYPE, "object of type '%s' has no len()", jx_type_name(v));
        }
    }
    if (!strcmp(f, "items")) {
        if (v.t == JV_UNDEF) return *res = V_GEN(new_list(c, 0)), true;
        if (v.t != JV_DICT && v.t != JV_NS) jx_jfail(c, at, RF_ERR_TYPE, "items: can only iterate over a mapping, got %s", jx_type_name(v));
        return *res = V_GEN(jx_dict_items(c, v.u.d).u.l), true;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        if (f[0] == 'l' && v.t == JV_LIST && v.u.l->kind == JL_GEN)
            jx_jfail(c, at, RF_ERR_TYPE, "'generator' object is not reversible");
        jlist *l = jx_iter_list(c, at, v);
        if (!l->n) return *res = V_UNDEF("No first item, sequence was empty."), true;
        return *res = l->v[f[0] == 'f' ? 0 : l->n - 1], true;
    }
    if (!strcmp(f, "join")) {
        jv sep = jx_str_of(c, jx_arg(a, 0, "d", V_CSTR("")));
        jv attr = jx_arg(a, 1, "attribute", V_NONE());
        jlist *l = jx_iter_list(c, at, v);
        sbuf b = {0};
        jx_sb_put(c, &b, "", 0);
        for (size_t k = 0; k < l->n; k++) {
            if (k) jx_sb_putv(c, &b, sep);
            jv it = l->v[k];
            if (attr.t == JV_STR) it = jx_getattr_v(c, at, it, ja_strndup(&c->a, attr.u.s.p, attr.u.s.n));
            jx_to_str(c, &b, it);
        }
        return *res = sb_val(&b), true;
    }
    if (!strcmp(f, "list")) {
        jlist *l = jx_iter_list(c, at, v), *o = new_list(c, l->n);
        memcpy(o->v, l->v, l->n * sizeof(jv));
        return *res = V_LIST(o), true;
    }
    if (!strcmp(f, "reverse")) {
        if (v.t == JV_STR) {
            argv_t r = {0};
            (void)r;
            return *res = jx_do_slice(c, at, v, V_NONE(), V_NONE(), V_INT(-1)), true;
        }
        jlist *l = jx_iter_list(c, at, v);
        jlist *o = new_list(c, l->n);
        for (size_t k = 0; k < l->n; k++) o->v[k] = l->v[l->n - 1 - k];
        return *res = V_GEN(o), true; /* reversed() iterator */
    }
    if (!strcmp(f, "attr")) {
        jv n = jx_need_str(c, at, jx_arg(a, 0, "name", V_UNDEF("attr needs a name")), "attr");
        return *res = jx_getattr_v(c, at, v, ja_strndup(&c->a, n.u.s.p, n.u.s.n)), true;
    }
    if (!strcmp(f, "map")) {
        if (!jx_truthy(v)) return *res = V_GEN(new_list(c, 0)), true;
        jlist *l = jx_iter_list(c, at, v);
        jlist *o = new_list(c, l->n);
        jv attr = jx_arg(a, 99, "attribute", V_NONE());
        if (attr.t == JV_STR) {
            jv def = jx_arg(a, 99, "default", V_UNDEF(NULL));
            const char *an = ja_strndup(&c->a, attr.u.s.p, attr.u.s.n);
            for (size_t k = 0; k < l->n; k++) {
                jv x = jx_getattr_v(c, at, l->v[k], an);
                o->v[k] = x.t == JV_UNDEF && def.t != JV_UNDEF ? def : x;
            }
            return *res = V_GEN(o), true;
        }
        jv fname = jx_need_str(c, at, jx_arg(a, 0, NULL, V_UNDEF("map needs a filter name")), "map");
        const char *fn = ja_strndup(&c->a, fname.u.s.p, fname.u.s.n);
        static const char *const ok[] = {"trim", "lower", "upper", "string", "int", "float", "length", "tojson", "capitalize", "title", "first", "last", "abs", "list", "items", "default", "d", "replace", "join", "reverse", "safe", NULL};
        bool known = false;
        for (const char *const *q = ok; *q; q++) known |= !strcmp(*q, fn);
        if (!known) jx_jfail(c, at, RF_ERR_UNSUPPORTED, "map: unsupported filter '%s'", fn);
        argv_t rest = shift_args(c, a, 1);
        for (size_t k = 0; k < l->n; k++) o->v[k] = jx_apply_filter(c, at, fn, l->v[k], &rest);
        return *res = V_GEN(o), true;
    }
    if (!strcmp(f, "select")) return *res = do_select(c, at, v, a, false, true), true;
    if (!strcmp(f, "reject")) return *res = do_select(c, at, v, a, false, false), true;
    if (!strcmp(f, "selectattr")) return *res = do_select(c, at, v, a, true, true), true;
    if (!strcmp(f, "rejectattr")) return *res = do_select(c, at, v, a, true, false), true;
    if (!strcmp(f, "unique") || !strcmp(f, "sort") || !strcmp(f, "dictsort") || !strcmp(f, "min") ||
        !strcmp(f, "max") || !strcmp(f, "sum")) {
        bool dictsort = !strcmp(f, "dictsort");
        jlist *l = dictsort ? (v.t == JV_DICT ? jx_dict_items(c, v.u.d).u.l : (jx_jfail(c, at, RF_ERR_TYPE, "dictsort needs a mapping"), NULL))
                            : jx_iter_list(c, at, v);
        jv attr = jx_arg(a, 99, "attribute", V_NONE());
        bool rev = jx_truthy(jx_arg(a, 0, "reverse", V_BOOL(false)));
        if (!strcmp(f, "sum")) {
            jv acc = jx_arg(a, 99, "start", V_INT(0));
            for (size_t k = 0; k < l->n; k++) {
                jv x = l->v[k];
                if (attr.t == JV_STR) x = jx_getattr_v(c, at, x, ja_strndup(&c->a, attr.u.s.p, attr.u.s.n));
                acc = jx_binop(c, at, JOP_ADD, acc, x);
            }
            return *res = acc, true;
        }
        jlist *o = new_list(c, l->n);
        memcpy(o->v, l->v, l->n * sizeof(jv));
        if (strcmp(f, "unique")) {
            for (size_t k = 1; k < o->n; k++)
                for (size_t j = k; j > 0; j--) {
                    jx_step(c, at);
                    jv x = o->v[j - 1], y = o->v[j];
                    if (dictsort) { x = x.u.l->v[0]; y = y.u.l->v[0]; }
                    if (attr.t == JV_STR) {
                        const char *an = ja_strndup(&c->a, attr.u.s.p, attr.u.s.n);
                        x = jx_getattr_v(c, at, x, an);
                        y = jx_getattr_v(c, at, y, an);
                    }
                    if (x.t == JV_STR) x = V_STR(jx_ascii_case(c, x, 0), x.u.s.n);
                    if (y.t == JV_STR) y = V_STR(jx_ascii_case(c, y, 0), y.u.s.n);
                    int r = jx_vcmp(c, at, x, y, "<");
                    if (rev ? r >= 0 : r <= 0) break;
                    jv t = o->v[j]; o->v[j] = o->v[j - 1]; o->v[j - 1] = t;
                }
            if (!strcmp(f, "min") || !strcmp(f, "max"))
                return *res = o->n ? o->v[f[1] == 'i' ? 0 : o->n - 1] : V_UNDEF("No aggregated item, sequence was empty."), true;
            return *res = V_LIST(o), true;
        }
        size_t m = 0;
        for (size_t k = 0; k < o->n; k++) {
            bool dup = false;
            for (size_t j = 0; j < m && !dup; j++) {
                jx_step(c, at);
                dup = jx_veq(o->v[j], l->v[k]);
            }
            if (!dup) o->v[m++] = l->v[k];
        }
        o->n = m;
        return *res = V_GEN(o), true;
    }
    return false;
}

jv jx_apply_filter(ctx *c, const jnode *at, const char *f, jv v, const argv_t *a) {
    jv r;
    if (filter_text(c, at, f, v, a, &r) || filter_number(c, at, f, v, a, &r) || filter_seq(c, at, f, v, a, &r)) return r;
    jx_jfail(c, at, RF_ERR_UNSUPPORTED, "unsupported filter '%s'", f);
}

bool jx_apply_test(ctx *c, const jnode *at, const char *t, jv v, const argv_t *a) {
    jv x = jx_arg(a, 0, NULL, V_UNDEF("test argument is undefined"));
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
        if (v.t == JV_UNDEF) jx_undef_fail(c, at, v);
        if (!is_num(v)) jx_jfail(c, at, RF_ERR_TYPE, "test '%s' expects a number, got %s", t, jx_type_name(v));
        jv r = jx_binop(c, at, JOP_MOD, v, V_INT(2));
        return t[0] == 'e' ? num_f(r) == 0 : num_f(r) == 1;
    }
    if (!strcmp(t, "divisibleby")) {
        if (!is_intlike(v) || !is_intlike(x) || num_i(x) == 0) jx_jfail(c, at, RF_ERR_TYPE, "divisibleby expects non-zero integers");
        return num_i(v) % num_i(x) == 0;
    }
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==")) return jx_veq(v, x);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !jx_veq(v, x);
    if (!strcmp(t, "lt") || !strcmp(t, "lessthan") || !strcmp(t, "<")) return jx_vcmp(c, at, v, x, "<") < 0;
    if (!strcmp(t, "le") || !strcmp(t, "<=")) return jx_vcmp(c, at, v, x, "<=") <= 0;
    if (!strcmp(t, "gt") || !strcmp(t, "greaterthan") || !strcmp(t, ">")) return jx_vcmp(c, at, v, x, ">") > 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">=")) return jx_vcmp(c, at, v, x, ">=") >= 0;
    if (!strcmp(t, "in")) return jx_contains(c, at, x, v);
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        v = jx_str_of(c, v); /* Jinja: str(value).islower() */
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
        return jx_veq(v, x);
    }
    jx_jfail(c, at, RF_ERR_UNSUPPORTED, "unsupported test '%s'", t);
}
