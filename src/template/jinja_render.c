/* jinja_render.c — statements (output, if, for with loop, set, set/filter blocks, macros) and
 * the render entry points with their limits and the data ranges of the output. */
#include <stdio.h>
#include <stdlib.h>

#include "template/jinja_eval.h"

static _Thread_local int g_last_raise;
int rf_jinja_last_error_was_raise(void) { return g_last_raise; }

static void bind_targets(ctx *c, scope *s, const jnode *at, const char **targets, size_t nt, jv item) {
    if (nt == 1) {
        jx_scope_set(c, s, targets[0], item);
        return;
    }
    jlist *l = jx_iter_list(c, at, item);
    if (l->n != nt) jx_jfail(c, at, RF_ERR_FORMAT, "cannot unpack %zu values into %zu targets", l->n, nt);
    for (size_t k = 0; k < nt; k++) jx_scope_set(c, s, targets[k], l->v[k]);
}

static void exec_stmt(ctx *c, scope *s, jnode *n) {
    jx_step(c, n);
    switch (n->kind) {
    case JN_TEXT: jx_emit(c, n, V_STR(n->text, n->text_len)); return;
    case JN_OUT: {
        jv v = jx_eval(c, s, n->a);
        if (v.t == JV_STR) jx_emit(c, n, v);
        else {
            sbuf b = {0};
            jx_to_str(c, &b, v);
            jx_emit(c, n, sb_val(&b));
        }
        return;
    }
    case JN_IF:
        if (jx_truthy(jx_eval(c, s, n->a))) jx_exec_list(c, s, n->body);
        else jx_exec_list(c, s, n->els);
        return;
    case JN_FOR: {
        jv it = jx_eval(c, s, n->a);
        if (it.t == JV_NONE || it.t == JV_INT || it.t == JV_FLOAT || it.t == JV_BOOL)
            jx_jfail(c, n, RF_ERR_TYPE, "'%s' object is not iterable", jx_type_name(it));
        jlist *items = jx_iter_list(c, n, it);
        if (n->b) { /* loop filter: loop.* counts only the kept items */
            jlist *kept = new_list(c, items->n);
            kept->n = 0;
            for (size_t k = 0; k < items->n; k++) {
                scope *fs = jx_new_scope(c, s);
                bind_targets(c, fs, n, n->targets, n->n_targets, items->v[k]);
                if (jx_truthy(jx_eval(c, fs, n->b))) kept->v[kept->n++] = items->v[k];
            }
            items = kept;
        }
        if (!items->n) {
            jx_exec_list(c, s, n->els);
            return;
        }
        if (++c->depth > c->lim.max_depth) jx_jfail(c, n, RF_ERR_RANGE, "statements nested deeper than %d", c->lim.max_depth);
        jloop *lp = ja_alloc(&c->a, sizeof *lp);
        lp->items = items;
        for (size_t k = 0; k < items->n; k++) {
            jx_step(c, n);
            lp->i = k;
            scope *is = jx_new_scope(c, s);
            bind_targets(c, is, n, n->targets, n->n_targets, items->v[k]);
            jv lv = {.t = JV_LOOP};
            lv.u.loop = lp;
            jx_scope_set(c, is, "loop", lv);
            jx_exec_list(c, is, n->body);
            if (c->loopctl == 1) { c->loopctl = 0; break; }
            c->loopctl = 0;
        }
        c->depth--;
        return;
    }
    case JN_SET: {
        jv v = jx_eval(c, s, n->a);
        if (n->attr) {
            jv ns = jx_lookup(c, s, n->name);
            if (ns.t != JV_NS) jx_jfail(c, n, RF_ERR_TYPE, "cannot assign attribute on non-namespace object");
            jx_dict_set(c, ns.u.d, V_CSTR(n->attr), v);
        } else if (n->n_targets) {
            bind_targets(c, s, n, n->targets, n->n_targets, v);
        } else {
            jx_scope_set(c, s, n->name, v);
        }
        return;
    }
    case JN_SETBLOCK: case JN_FILTERBLOCK: {
        sbuf *saved = c->out;
        sbuf buf = {0};
        jx_sb_put(c, &buf, "", 0);
        c->out = &buf;
        jx_exec_list(c, s, n->body);
        c->out = saved;
        if (n->kind == JN_SETBLOCK) jx_scope_set(c, s, n->name, sb_val(&buf));
        else {
            argv_t a = jx_eval_args(c, s, n);
            jv in = sb_val(&buf);
            jv r = jx_str_of(c, jx_apply_filter(c, n, n->name, in, &a));
            jx_emit(c, n, jx_taint(c, r, in, &a));
        }
        return;
    }
    case JN_MACRO: {
        jmacro *m = ja_alloc(&c->a, sizeof *m);
        m->node = n;
        m->def = s;
        jv v = {.t = JV_MACRO};
        v.u.m = m;
        jx_scope_set(c, s, n->name, v);
        return;
    }
    case JN_BREAK: c->loopctl = 1; return;
    case JN_CONTINUE: c->loopctl = 2; return;
    default: jx_jfail(c, n, RF_ERR_INTERNAL, "bad statement node %d", n->kind);
    }
}

void jx_exec_list(ctx *c, scope *s, jlist_nodes body) {
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
    c->a.ar.limit = c->lim.max_memory;
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
    scope *globals = jx_new_scope(c, NULL);
    if (vars && json_object_size(vars) > 4096) jx_jfail(c, NULL, RF_ERR_RANGE, "more than 4096 template variables");
    if (vars) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)vars, k, v) {
            jx_scope_set(c, globals, ja_strndup(&c->a, k, strlen(k)), jx_from_json(c, v, 0, !is_trusted(trusted, k)));
        }
    }
    scope *root = jx_new_scope(c, globals);
    sbuf buf = {0};
    jx_sb_put(c, &buf, "", 0);
    c->out = &buf;
    c->exec_list = jx_exec_list;
    jx_exec_list(c, root, t->body);
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
