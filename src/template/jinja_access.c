/* jinja_access.c — what expressions, filters and methods do to values: attribute and item
 * access, slices, iteration, membership, arithmetic and concatenation, HTML escaping, and the
 * argument helpers (jx_arg, jx_need_str). Nothing here evaluates a node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_eval.h"

/* ---- attribute and item access -------------------------------------------------------------- */

static jv mkundef_attr(ctx *c, jv obj, const char *name) {
    char *m = ja_alloc(&c->a, strlen(name) + 64);
    sprintf(m, "'%s object' has no attribute '%s'", jx_type_name(obj), name);
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
    size_t *o = jx_cp_offsets(c, s.u.s.p, s.u.s.n, &cnt);
    if (i < 0) i += (int64_t)cnt;
    if (i < 0 || i >= (int64_t)cnt) return V_UNDEF("string index out of range");
    return jx_str_sub(c, s, o[i], o[i + 1] - o[i]);
}

jv jx_getattr_v(ctx *c, const jnode *at, jv obj, const char *name) {
    switch (obj.t) {
    case JV_UNDEF: jx_undef_fail(c, at, obj);
    case JV_DICT: case JV_NS: {
        jv *f = jx_dict_find_s(obj.u.d, name, strlen(name));
        return f ? *f : mkundef_attr(c, obj, name);
    }
    case JV_LOOP: return loop_attr(c, obj.u.loop, name);
    default: return mkundef_attr(c, obj, name);
    }
}

jv jx_getitem_v(ctx *c, const jnode *at, jv obj, jv key) {
    switch (obj.t) {
    case JV_UNDEF: jx_undef_fail(c, at, obj);
    case JV_DICT: case JV_NS: {
        jv *f = jx_dict_find(obj.u.d, key);
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

jv jx_do_slice(ctx *c, const jnode *at, jv obj, jv va, jv vb, jv vs) {
    bool ha = va.t != JV_NONE && va.t != JV_UNDEF, hb = vb.t != JV_NONE && vb.t != JV_UNDEF;
    int64_t st = 1;
    if (vs.t != JV_NONE && vs.t != JV_UNDEF) {
        if (!is_intlike(vs)) jx_jfail(c, at, RF_ERR_TYPE, "slice indices must be integers");
        st = num_i(vs);
        if (st == 0) jx_jfail(c, at, RF_ERR_FORMAT, "slice step cannot be zero");
    }
    if ((ha && !is_intlike(va)) || (hb && !is_intlike(vb))) jx_jfail(c, at, RF_ERR_TYPE, "slice indices must be integers");
    int64_t a = ha ? num_i(va) : 0, b = hb ? num_i(vb) : 0;
    if (obj.t == JV_UNDEF) jx_undef_fail(c, at, obj);
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
        size_t *o = jx_cp_offsets(c, obj.u.s.p, obj.u.s.n, &cnt);
        int64_t s0, s1;
        slice_adjust((int64_t)cnt, ha, a, hb, b, st, &s0, &s1);
        if (st == 1) return s0 < s1 ? jx_str_sub(c, obj, o[s0], o[s1] - o[s0]) : V_STR(obj.u.s.p, 0);
        sbuf sb = {0};
        for (int64_t i = s0; st > 0 ? i < s1 : i > s1; i += st) jx_sb_putv(c, &sb, jx_str_sub(c, obj, o[i], o[i + 1] - o[i]));
        return sb_val(&sb);
    }
    /* Jinja's getitem falls back to getattr and yields undefined for the rest */
    char *m = ja_alloc(&c->a, 64);
    snprintf(m, 64, "'%s object' is not subscriptable", jx_type_name(obj));
    return V_UNDEF(m);
}

/* items of an iterable as a list (dict -> keys, string -> characters) */
jlist *jx_iter_list(ctx *c, const jnode *at, jv v) {
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
        size_t *o = jx_cp_offsets(c, v.u.s.p, v.u.s.n, &cnt);
        jlist *l = new_list(c, cnt);
        for (size_t k = 0; k < cnt; k++) l->v[k] = jx_str_sub(c, v, o[k], o[k + 1] - o[k]);
        return l;
    }
    default:
        jx_jfail(c, at, RF_ERR_TYPE, "'%s' object is not iterable", jx_type_name(v));
    }
}

jv jx_dict_items(ctx *c, jdict *d) {
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

bool jx_contains(ctx *c, const jnode *at, jv hay, jv needle) {
    switch (hay.t) {
    case JV_STR:
        if (needle.t != JV_STR) jx_jfail(c, at, RF_ERR_TYPE, "'in <string>' requires string as left operand, not %s", jx_type_name(needle));
        if (!needle.u.s.n) return true;
        if (needle.u.s.n > hay.u.s.n) return false;
        for (size_t k = 0; k + needle.u.s.n <= hay.u.s.n; k++)
            if (memcmp(hay.u.s.p + k, needle.u.s.p, needle.u.s.n) == 0) return true;
        return false;
    case JV_LIST:
        for (size_t k = 0; k < hay.u.l->n; k++)
            if (jx_veq(hay.u.l->v[k], needle)) return true;
        return false;
    case JV_DICT: case JV_NS: return jx_dict_find(hay.u.d, needle) != NULL;
    case JV_UNDEF: return false; /* Undefined iterates as empty */
    default: jx_jfail(c, at, RF_ERR_TYPE, "argument of type '%s' is not iterable", jx_type_name(hay));
    }
}

/* ---- arithmetic ----------------------------------------------------------------------------- */

jv jx_html_escape(ctx *c, jv s) {
    sbuf b = {0};
    jx_sb_put(c, &b, "", 0);
    for (size_t k = 0; k < s.u.s.n; k++) {
        char ch = s.u.s.p[k];
        if (ch == '&') jx_sb_puts(c, &b, "&amp;");
        else if (ch == '<') jx_sb_puts(c, &b, "&lt;");
        else if (ch == '>') jx_sb_puts(c, &b, "&gt;");
        else if (ch == '"') jx_sb_puts(c, &b, "&#34;");
        else if (ch == '\'') jx_sb_puts(c, &b, "&#39;");
        else jx_sb_putc(c, &b, ch);
    }
    jv r = sb_val(&b);
    if (str_has_data(s)) r = jx_all_data(c, r);
    r.markup = true;
    return r;
}

jv jx_binop(ctx *c, const jnode *at, int op, jv a, jv b) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    if (op == JOP_CONCAT) {
        sbuf sb = {0};
        jx_to_str(c, &sb, a);
        jx_to_str(c, &sb, b);
        return sb_val(&sb);
    }
    if (a.t == JV_UNDEF) jx_undef_fail(c, at, a);
    if (b.t == JV_UNDEF) jx_undef_fail(c, at, b);
    if (op == JOP_ADD && a.t == JV_STR && b.t == JV_STR) {
        bool mk = a.markup || b.markup; /* Markup + str escapes the plain side */
        if (mk && !a.markup) a = jx_html_escape(c, a);
        if (mk && !b.markup) b = jx_html_escape(c, b);
        if (c->out_total + a.u.s.n + b.u.s.n > c->lim.max_output * 4)
            jx_jfail(c, at, RF_ERR_RANGE, "string too long");
        sbuf sb = {0};
        jx_sb_reserve(c, &sb, a.u.s.n + b.u.s.n);
        jx_sb_putv(c, &sb, a);
        jx_sb_putv(c, &sb, b);
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
            jx_jfail(c, at, RF_ERR_RANGE, "repetition result too large");
        if (a.t == JV_STR) {
            char *p = ja_alloc(&c->a, unit * (size_t)n + 1);
            for (int64_t k = 0; k < n; k++) memcpy(p + k * unit, a.u.s.p, unit);
            jv r = V_STR(p, unit * (size_t)n);
            return str_has_data(a) ? jx_all_data(c, r) : r;
        }
        jlist *l = new_list(c, a.u.l->n * (size_t)n);
        for (int64_t k = 0; k < n; k++) memcpy(l->v + k * a.u.l->n, a.u.l->v, unit);
        return V_LIST(l);
    }
    if (op == JOP_MUL && is_intlike(a) && (b.t == JV_STR || (b.t == JV_LIST && !b.u.l->kind))) return jx_binop(c, at, op, b, a);
    if (!is_num(a) || !is_num(b))
        jx_jfail(c, at, RF_ERR_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", names[op],
              jx_type_name(a), jx_type_name(b));
    if (is_intlike(a) && is_intlike(b) && op != JOP_DIV) {
        int64_t x = num_i(a), y = num_i(b), r;
        switch (op) {
        case JOP_ADD: if (__builtin_add_overflow(x, y, &r)) goto ovf; return V_INT(r);
        case JOP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto ovf; return V_INT(r);
        case JOP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto ovf; return V_INT(r);
        case JOP_FLOORDIV: case JOP_MOD: {
            if (y == 0) jx_jfail(c, at, RF_ERR_FORMAT, "integer division or modulo by zero");
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
            if (y == 0) jx_jfail(c, at, RF_ERR_FORMAT, "division by zero");
            return V_FLOAT(x / y);
        case JOP_FLOORDIV:
            if (y == 0) jx_jfail(c, at, RF_ERR_FORMAT, "float floor division by zero");
            return V_FLOAT(floor(x / y));
        case JOP_MOD: {
            if (y == 0) jx_jfail(c, at, RF_ERR_FORMAT, "float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return V_FLOAT(m);
        }
        case JOP_POW: return V_FLOAT(pow(x, y));
        }
    }
ovf:
    jx_jfail(c, at, RF_ERR_RANGE, "integer overflow in '%s'", names[op]);
}

/* argument `idx` (positional) or keyword `name`; `def` when absent */
jv jx_arg(const argv_t *a, size_t idx, const char *name, jv def) {
    if (idx < a->np) return a->pos[idx];
    for (size_t k = 0; k < a->nk; k++)
        if (name && strcmp(a->kn[k], name) == 0) return a->kv[k];
    return def;
}

jv jx_need_str(ctx *c, const jnode *at, jv v, const char *what) {
    if (v.t == JV_UNDEF) jx_undef_fail(c, at, v);
    if (v.t != JV_STR) jx_jfail(c, at, RF_ERR_TYPE, "%s expects a string, got %s", what, jx_type_name(v));
    return v;
}
