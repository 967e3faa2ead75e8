/* jinja_expr.c — expression evaluation: scopes and builtins (range, namespace, dict,
 * raise_exception, strftime_now), calls, macros, dict/list methods, and the data-mark safety net
 * for filters and methods; attribute/item access, slices and arithmetic are in jinja_access.c. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "template/jinja_eval.h"

/* ---- scopes ----------------------------------------------------------------------------------- */

enum { F_RANGE, F_NAMESPACE, F_RAISE, F_STRFTIME, F_DICT };
static const char *const FUNC_NAMES[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};

scope *jx_new_scope(ctx *c, scope *parent) {
    scope *s = ja_alloc(&c->a, sizeof *s);
    s->parent = parent;
    return s;
}
void jx_scope_set(ctx *c, scope *s, const char *k, jv v) {
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
jv jx_lookup(ctx *c, scope *s, const char *k) {
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

/* ---- evaluation ----------------------------------------------------------------------------- */

argv_t jx_eval_args(ctx *c, scope *s, jnode *n) {
    argv_t a;
    a.np = n->args.n;
    a.pos = ja_alloc(&c->a, (a.np ? a.np : 1) * sizeof(jv));
    for (size_t k = 0; k < a.np; k++) a.pos[k] = jx_eval(c, s, n->args.v[k]);
    a.nk = n->kwv.n;
    a.kn = n->kwn;
    a.kv = ja_alloc(&c->a, (a.nk ? a.nk : 1) * sizeof(jv));
    for (size_t k = 0; k < a.nk; k++) a.kv[k] = jx_eval(c, s, n->kwv.v[k]);
    return a;
}

static jv call_macro(ctx *c, const jnode *at, jmacro *m, const argv_t *a) {
    jnode *def = m->node;
    if (++c->depth > c->lim.max_depth)
        jx_jfail(c, at, RF_ERR_RANGE, "macro recursion deeper than %d", c->lim.max_depth);
    jx_step(c, at);
    scope *ms = jx_new_scope(c, m->def);
    if (a->np > def->n_params) jx_jfail(c, at, RF_ERR_FORMAT, "macro '%s' takes %zu arguments, %zu given", def->name, def->n_params, a->np);
    for (size_t k = 0; k < def->n_params; k++) {
        jv v;
        bool have = false;
        if (k < a->np) { v = a->pos[k]; have = true; }
        for (size_t j = 0; j < a->nk; j++)
            if (!strcmp(a->kn[j], def->params[k])) { v = a->kv[j]; have = true; }
        if (!have) {
            jnode *d = def->kwv.v[k];
            v = d ? jx_eval(c, ms, d) : V_UNDEF("macro parameter is undefined");
        }
        jx_scope_set(c, ms, def->params[k], v);
    }
    for (size_t j = 0; j < a->nk; j++) {
        size_t k;
        for (k = 0; k < def->n_params; k++)
            if (!strcmp(a->kn[j], def->params[k])) break;
        if (k == def->n_params) jx_jfail(c, at, RF_ERR_FORMAT, "macro '%s' has no parameter '%s'", def->name, a->kn[j]);
    }
    sbuf *saved = c->out;
    sbuf buf = {0};
    c->out = &buf;
    int savedctl = c->loopctl;
    c->exec_list(c, ms, def->body); /* the renderer's (jinja_render.c sets it) */
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
            if (!is_intlike(a->pos[k])) jx_jfail(c, at, RF_ERR_TYPE, "range() arguments must be integers");
        if (a->np == 1) stop = num_i(a->pos[0]);
        else if (a->np == 2 || a->np == 3) {
            start = num_i(a->pos[0]);
            stop = num_i(a->pos[1]);
            if (a->np == 3) st = num_i(a->pos[2]);
        } else jx_jfail(c, at, RF_ERR_FORMAT, "range() takes 1 to 3 arguments");
        if (st == 0) jx_jfail(c, at, RF_ERR_FORMAT, "range() arg 3 must not be zero");
        /* exact in unsigned 64-bit arithmetic: the distance between two int64 values and the
         * magnitude of any step fit, and every element lies between start and stop, so the
         * wrapped sum start + k*step is the element itself (no signed overflow, no rounding) */
        uint64_t dist = st > 0 ? (stop > start ? (uint64_t)stop - (uint64_t)start : 0)
                               : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
        uint64_t mag = st > 0 ? (uint64_t)st : 0 - (uint64_t)st;
        uint64_t cnt = dist ? (dist - 1) / mag + 1 : 0;
        if (cnt > c->lim.max_steps) jx_jfail(c, at, RF_ERR_RANGE, "range() too long");
        jlist *l = new_list(c, (size_t)cnt);
        for (size_t k = 0; k < l->n; k++) l->v[k] = V_INT((int64_t)((uint64_t)start + (uint64_t)k * (uint64_t)st));
        return V_VIEW(l);
    }
    case F_NAMESPACE: case F_DICT: {
        jdict *d = new_dict(c);
        for (size_t k = 0; k < a->np; k++) {
            if (a->pos[k].t != JV_DICT && a->pos[k].t != JV_NS)
                jx_jfail(c, at, RF_ERR_TYPE, "%s() positional argument must be a mapping", fn == F_DICT ? "dict" : "namespace");
            for (size_t j = 0; j < a->pos[k].u.d->n; j++) jx_dict_set(c, d, a->pos[k].u.d->k[j], a->pos[k].u.d->v[j]);
        }
        for (size_t k = 0; k < a->nk; k++) jx_dict_set(c, d, V_CSTR(a->kn[k]), a->kv[k]);
        jv v = V_DICT(d);
        if (fn == F_NAMESPACE) v.t = JV_NS;
        return v;
    }
    case F_RAISE: {
        jv m = a->np ? jx_str_of(c, a->pos[0]) : V_CSTR("");
        snprintf(c->msg, sizeof c->msg, "%.*s", (int)m.u.s.n, m.u.s.p);
        c->st = RF_ERR_FORMAT;
        c->raised = true;
        longjmp(c->jb, 1);
    }
    case F_STRFTIME: {
        jv f = jx_need_str(c, at, jx_arg(a, 0, "format", V_UNDEF("'format' is undefined")), "strftime_now");
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
    jx_jfail(c, at, RF_ERR_INTERNAL, "unknown builtin");
}

/* The safety net for filters and methods: a string result with no data ranges, computed from
 * an input that holds data, is data as a whole (the filters that know where each byte came
 * from have already set precise ranges). */
jv jx_taint(ctx *c, jv r, jv in, const argv_t *a) {
    if (r.t != JV_STR || !r.u.s.n || str_has_data(r)) return r;
    bool d = jx_has_data(in);
    for (size_t k = 0; !d && k < a->np; k++) d = jx_has_data(a->pos[k]);
    for (size_t k = 0; !d && k < a->nk; k++) d = jx_has_data(a->kv[k]);
    return d ? jx_all_data(c, r) : r;
}

static jv eval_method(ctx *c, scope *s, jnode *n) {
    jv obj = jx_eval(c, s, n->a);
    argv_t a = jx_eval_args(c, s, n);
    const char *m = n->name;
    if (obj.t == JV_UNDEF) jx_undef_fail(c, n, obj);
    static const char *const mut[] = {"append", "extend", "insert", "pop", "remove", "update", "clear", "setdefault"};
    for (size_t k = 0; k < sizeof mut / sizeof mut[0]; k++)
        if (!strcmp(m, mut[k]) && (obj.t == JV_LIST || obj.t == JV_DICT || obj.t == JV_NS))
            jx_jfail(c, n, RF_ERR_UNSUPPORTED, "access to attribute '%s' of '%s' object is unsafe.", m, jx_type_name(obj));
    if (obj.t == JV_STR) return jx_taint(c, jx_str_method(c, n, obj, m, &a), obj, &a);
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jdict *d = obj.u.d;
        if (!strcmp(m, "items")) return V_VIEW(jx_dict_items(c, d).u.l);
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            jlist *l = new_list(c, d->n);
            for (size_t k = 0; k < d->n; k++) l->v[k] = m[0] == 'k' ? d->k[k] : d->v[k];
            return V_VIEW(l);
        }
        if (!strcmp(m, "get")) {
            jv *f = jx_dict_find(d, jx_arg(&a, 0, "key", V_NONE()));
            return f ? *f : jx_arg(&a, 1, "default", V_NONE());
        }
    }
    if (obj.t == JV_LIST && (!strcmp(m, "count") || !strcmp(m, "index")) && obj.u.l->kind != JL_GEN) {
        jv x = jx_arg(&a, 0, NULL, V_UNDEF("list.count needs an argument"));
        int64_t cnt = 0;
        for (size_t k = 0; k < obj.u.l->n; k++)
            if (jx_veq(obj.u.l->v[k], x)) {
                if (m[0] == 'i') return V_INT((int64_t)k);
                cnt++;
            }
        if (m[0] == 'i') jx_jfail(c, n, RF_ERR_FORMAT, "list.index(x): x not in list");
        return V_INT(cnt);
    }
    if (obj.t == JV_LOOP && !strcmp(m, "cycle")) {
        if (!a.np) jx_jfail(c, n, RF_ERR_FORMAT, "no items for cycling given");
        return a.pos[obj.u.loop->i % a.np];
    }
    jx_jfail(c, n, RF_ERR_TYPE, "'%s' object has no attribute '%s'", jx_type_name(obj), m);
}

static jv eval_inner(ctx *c, scope *s, jnode *n);
jv jx_eval(ctx *c, scope *s, jnode *n) {
    if (++c->edepth > MAX_EVAL_DEPTH) jx_jfail(c, n, RF_ERR_RANGE, "expression nested deeper than %d", MAX_EVAL_DEPTH);
    jv r = eval_inner(c, s, n);
    c->edepth--;
    return r;
}
static jv eval_inner(ctx *c, scope *s, jnode *n) {
    switch (n->kind) {
    case JE_LIT: return n->lit;
    case JE_NAME: return jx_lookup(c, s, n->name);
    case JE_ATTR: return jx_getattr_v(c, n, jx_eval(c, s, n->a), n->name);
    case JE_INDEX: {
        jv o = jx_eval(c, s, n->a);
        return jx_getitem_v(c, n, o, jx_eval(c, s, n->b));
    }
    case JE_SLICE: {
        jv o = jx_eval(c, s, n->a);
        jv a = n->b ? jx_eval(c, s, n->b) : V_NONE();
        jv b = n->c ? jx_eval(c, s, n->c) : V_NONE();
        jv st = n->args.n ? jx_eval(c, s, n->args.v[0]) : V_NONE();
        return jx_do_slice(c, n, o, a, b, st);
    }
    case JE_CALL: {
        jv f = jx_lookup(c, s, n->name);
        argv_t a = jx_eval_args(c, s, n);
        if (f.t == JV_MACRO) return call_macro(c, n, f.u.m, &a);
        if (f.t == JV_FUNC) return call_func(c, n, f.u.fn, &a);
        if (f.t == JV_UNDEF) jx_undef_fail(c, n, f);
        jx_jfail(c, n, RF_ERR_TYPE, "'%s' object is not callable", jx_type_name(f));
    }
    case JE_METHOD: return eval_method(c, s, n);
    case JE_FILTER: {
        jv v = jx_eval(c, s, n->a);
        argv_t a = jx_eval_args(c, s, n);
        return jx_taint(c, jx_apply_filter(c, n, n->name, v, &a), v, &a);
    }
    case JE_TEST: {
        jv v = jx_eval(c, s, n->a);
        argv_t a = jx_eval_args(c, s, n);
        return V_BOOL(jx_apply_test(c, n, n->name, v, &a));
    }
    case JE_BIN: {
        jv a = jx_eval(c, s, n->a);
        jv b = jx_eval(c, s, n->b);
        return jx_binop(c, n, n->op, a, b);
    }
    case JE_NEG: case JE_POS: {
        jv v = jx_eval(c, s, n->a);
        if (v.t == JV_UNDEF) jx_undef_fail(c, n, v);
        if (!is_num(v)) jx_jfail(c, n, RF_ERR_TYPE, "bad operand type for unary %c: '%s'", n->kind == JE_NEG ? '-' : '+', jx_type_name(v));
        if (n->kind == JE_POS) return is_intlike(v) ? V_INT(num_i(v)) : v;
        if (is_intlike(v)) {
            if (num_i(v) == INT64_MIN) jx_jfail(c, n, RF_ERR_RANGE, "integer overflow");
            return V_INT(-num_i(v));
        }
        return V_FLOAT(-v.u.f);
    }
    case JE_NOT: return V_BOOL(!jx_truthy(jx_eval(c, s, n->a)));
    case JE_AND: {
        jv a = jx_eval(c, s, n->a);
        return jx_truthy(a) ? jx_eval(c, s, n->b) : a;
    }
    case JE_OR: {
        jv a = jx_eval(c, s, n->a);
        return jx_truthy(a) ? a : jx_eval(c, s, n->b);
    }
    case JE_COND:
        if (jx_truthy(jx_eval(c, s, n->a))) return jx_eval(c, s, n->b);
        return n->c ? jx_eval(c, s, n->c) : V_UNDEF("the inline if-expression evaluated to false and no else section was defined");
    case JE_LIST: case JE_TUPLE: {
        jlist *l = new_list(c, n->args.n);
        l->tuple = n->kind == JE_TUPLE;
        for (size_t k = 0; k < n->args.n; k++) l->v[k] = jx_eval(c, s, n->args.v[k]);
        return V_LIST(l);
    }
    case JE_DICT: {
        jdict *d = new_dict(c);
        for (size_t k = 0; k < n->args.n; k++) jx_dict_set(c, d, jx_eval(c, s, n->args.v[k]), jx_eval(c, s, n->kwv.v[k]));
        return V_DICT(d);
    }
    case JE_CMP: {
        jv l = jx_eval(c, s, n->a);
        for (size_t k = 0; k < n->args.n; k++) {
            jv r = jx_eval(c, s, n->args.v[k]);
            bool ok;
            switch (n->ops[k]) {
            case JOP_EQ: ok = jx_veq(l, r); break;
            case JOP_NE: ok = !jx_veq(l, r); break;
            case JOP_LT: ok = jx_vcmp(c, n, l, r, "<") < 0; break;
            case JOP_LE: ok = jx_vcmp(c, n, l, r, "<=") <= 0; break;
            case JOP_GT: ok = jx_vcmp(c, n, l, r, ">") > 0; break;
            case JOP_GE: ok = jx_vcmp(c, n, l, r, ">=") >= 0; break;
            case JOP_IN: ok = jx_contains(c, n, r, l); break;
            default: ok = !jx_contains(c, n, r, l); break;
            }
            if (!ok) return V_BOOL(false);
            l = r;
        }
        return V_BOOL(true);
    }
    default:
        jx_jfail(c, n, RF_ERR_INTERNAL, "bad expression node %d", n->kind);
    }
}
