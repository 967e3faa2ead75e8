/* jinja_eval.h — shared by the evaluator's files (not an API): the render context, scopes,
 * string buffers with data ranges, value constructors, and the functions one file of the
 * evaluator calls in another (prefix jx_). */
#ifndef RF_TEMPLATE_JINJA_EVAL_H
#define RF_TEMPLATE_JINJA_EVAL_H

#include <string.h>
#include <time.h>

#include "template/jinja_internal.h"

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
    /* the statements' executor (jx_exec_list, set by the renderer): a macro call in an
     * expression runs the macro's body through it, so expressions need not know statements */
    void (*exec_list)(struct ctx *c, scope *s, jlist_nodes body);
} ctx;

/* Guards against stack exhaustion: expression trees and values built by a template can nest
 * arbitrarily deep (a left-deep `a ~ b ~ ...` chain, `{% set ns.x = [ns.x] %}` in a loop). */
#define MAX_EVAL_DEPTH 1000
#define MAX_VALUE_DEPTH 512

typedef struct argv_t {
    jv *pos;
    size_t np;
    const char **kn;
    jv *kv;
    size_t nk;
} argv_t;

typedef struct json_opts {
    int indent; /* -1 = none */
    const char *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} json_opts;

/* ---- values (constructors and numeric views) ----------------------------------------------- */

static inline jv V_UNDEF(const char *why) { jv v = {.t = JV_UNDEF}; v.u.undef_name = why; return v; }
static inline jv V_NONE(void) { jv v = {.t = JV_NONE}; return v; }
static inline jv V_BOOL(bool b) { jv v = {.t = JV_BOOL}; v.u.b = b; return v; }
static inline jv V_INT(int64_t i) { jv v = {.t = JV_INT}; v.u.i = i; return v; }
static inline jv V_FLOAT(double f) { jv v = {.t = JV_FLOAT}; v.u.f = f; return v; }
static inline jv V_STR(const char *p, size_t n) { jv v = {.t = JV_STR}; v.u.s.p = p; v.u.s.n = n; return v; }
static inline jv V_CSTR(const char *p) { return V_STR(p, strlen(p)); }

static inline jlist *new_list(ctx *c, size_t n) {
    jlist *l = ja_alloc(&c->a, sizeof *l);
    l->n = n;
    l->v = ja_alloc(&c->a, (n ? n : 1) * sizeof(jv));
    return l;
}
static inline jv V_LIST(jlist *l) { jv v = {.t = JV_LIST}; v.u.l = l; return v; }
static inline jv V_GEN(jlist *l) { l->kind = JL_GEN; return V_LIST(l); }
static inline jv V_VIEW(jlist *l) { l->kind = JL_VIEW; return V_LIST(l); }
static inline jdict *new_dict(ctx *c) { return ja_alloc(&c->a, sizeof(jdict)); }
static inline jv V_DICT(jdict *d) { jv v = {.t = JV_DICT}; v.u.d = d; return v; }

static inline bool is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static inline double num_f(jv v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static inline bool is_intlike(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static inline int64_t num_i(jv v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }
static inline jv sb_val(sbuf *b) {
    jv v = V_STR(b->p ? b->p : "", b->n);
    v.u.s.d = b->sp;
    return v;
}
static inline bool str_has_data(jv v) { return v.t == JV_STR && v.u.s.d && v.u.s.d->n; }

/* ---- jinja_value.c ----------------------------------------------------------------------------- */
void jx_jfail(ctx *c, const jnode *at, rf_status st, const char *fmt, ...) __attribute__((format(printf, 4, 5), noreturn));
void jx_step(ctx *c, const jnode *at);
const char *jx_type_name(jv v);
void jx_undef_fail(ctx *c, const jnode *at, jv v) __attribute__((noreturn));
void jx_sb_reserve(ctx *c, sbuf *b, size_t extra);
void jx_sb_put(ctx *c, sbuf *b, const char *s, size_t n);
void jx_sb_puts(ctx *c, sbuf *b, const char *s);
void jx_sb_putc(ctx *c, sbuf *b, char ch);
void jx_sb_mark(ctx *c, sbuf *b, size_t from, size_t to);
void jx_sb_putv(ctx *c, sbuf *b, jv s);
jv jx_all_data(ctx *c, jv s);
jv jx_str_sub(ctx *c, jv s, size_t off, size_t n);
bool jx_has_data(jv v);
void jx_emit(ctx *c, const jnode *at, jv s);
uint32_t jx_u8dec(const char *s, size_t n, size_t *adv);
bool jx_py_space(uint32_t cp);
jv jx_py_strip(ctx *c, jv s, const char *chars, size_t nch, bool left, bool right);
size_t jx_cp_count(const char *s, size_t n);
size_t *jx_cp_offsets(ctx *c, const char *s, size_t n, size_t *cnt);
char *jx_ascii_case(ctx *c, jv s, int mode);
void jx_fmt_float(char *buf, size_t cap, double x, bool json);
void jx_to_str(ctx *c, sbuf *b, jv v);
jv jx_str_of(ctx *c, jv v);
bool jx_truthy(jv v);
bool jx_veq(jv a, jv b);
int jx_vcmp(ctx *c, const jnode *at, jv a, jv b, const char *op);
jv *jx_dict_find(jdict *d, jv key);
jv *jx_dict_find_s(jdict *d, const char *key, size_t n);
void jx_dict_set(ctx *c, jdict *d, jv key, jv val);

/* ---- jinja_json.c ------------------------------------------------------------------------------ */
jv jx_from_json(ctx *c, const json_t *j, int depth, bool data);
void jx_to_json(ctx *c, const jnode *at, sbuf *b, jv v, const json_opts *o, int level);

/* ---- jinja_access.c------------------------------------------------------------------------------ */
jv jx_getattr_v(ctx *c, const jnode *at, jv obj, const char *name);
jv jx_getitem_v(ctx *c, const jnode *at, jv obj, jv key);
jv jx_do_slice(ctx *c, const jnode *at, jv obj, jv va, jv vb, jv vs);
jlist *jx_iter_list(ctx *c, const jnode *at, jv v);
jv jx_dict_items(ctx *c, jdict *d);
bool jx_contains(ctx *c, const jnode *at, jv hay, jv needle);
jv jx_html_escape(ctx *c, jv s);
jv jx_binop(ctx *c, const jnode *at, int op, jv a, jv b);
jv jx_arg(const argv_t *a, size_t idx, const char *name, jv def);
jv jx_need_str(ctx *c, const jnode *at, jv v, const char *what);

/* ---- jinja_expr.c ------------------------------------------------------------------------------ */
scope *jx_new_scope(ctx *c, scope *parent);
void jx_scope_set(ctx *c, scope *s, const char *k, jv v);
jv jx_lookup(ctx *c, scope *s, const char *k);
argv_t jx_eval_args(ctx *c, scope *s, jnode *n);
jv jx_eval(ctx *c, scope *s, jnode *n);
jv jx_taint(ctx *c, jv r, jv in, const argv_t *a);

/* ---- jinja_filters.c --------------------------------------------------------------------------- */
bool jx_apply_test(ctx *c, const jnode *at, const char *t, jv v, const argv_t *a);
jv jx_apply_filter(ctx *c, const jnode *at, const char *f, jv v, const argv_t *a);

/* ---- jinja_str.c ------------------------------------------------------------------------------- */
jv jx_str_method(ctx *c, const jnode *at, jv s, const char *m, const argv_t *a);

/* ---- jinja_render.c ---------------------------------------------------------------------------- */
void jx_exec_list(ctx *c, scope *s, jlist_nodes body);

#endif
