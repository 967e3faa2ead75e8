/* jinja_parse_expr.c — the recursive-descent parser of expressions (precedence as Jinja2:
 * conditional, or/and/not, comparisons, ~, arithmetic, unary, filters and tests, postfix
 * access and calls) and the lists of supported filters, tests, methods and functions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_parse.h"

/* ---- parser helpers ------------------------------------------------------------------------- */

tok *jp_cur(parser *p) { return &p->toks[p->i]; }
tok *jp_peek(parser *p, size_t k) {
    size_t j = p->i + k;
    return &p->toks[j < p->ntok ? j : p->ntok - 1];
}
bool jp_is_op(tok *t, const char *op) { return t->t == TK_OP && strcmp(t->p, op) == 0; }
bool jp_is_name(tok *t, const char *nm) { return t->t == TK_NAME && strcmp(t->p, nm) == 0; }

const char *jp_tok_desc(tok *t) {
    switch (t->t) {
    case TK_DATA: return "template data";
    case TK_VBEGIN: return "'{{'";
    case TK_VEND: return "'}}'";
    case TK_BBEGIN: return "'{%'";
    case TK_BEND: return "'%}'";
    case TK_NAME: return t->p;
    case TK_STR: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_OP: return t->p;
    default: return "end of template";
    }
}

void jp_expect_op(parser *p, const char *op) {
    tok *t = jp_cur(p);
    if (!jp_is_op(t, op)) jp_pfail(p, RF_ERR_FORMAT, t->line, t->col, "expected '%s', got '%s'", op, jp_tok_desc(t));
    p->i++;
}
void jp_expect_t(parser *p, tk_type tt, const char *what) {
    tok *t = jp_cur(p);
    if (t->t != tt) jp_pfail(p, RF_ERR_FORMAT, t->line, t->col, "expected %s, got '%s'", what, jp_tok_desc(t));
    p->i++;
}
const char *jp_expect_name(parser *p) {
    tok *t = jp_cur(p);
    if (t->t != TK_NAME) jp_pfail(p, RF_ERR_FORMAT, t->line, t->col, "expected a name, got '%s'", jp_tok_desc(t));
    p->i++;
    return t->p;
}

jnode *jp_mk(parser *p, jnode_kind k, tok *at) {
    jnode *n = ja_alloc(p->a, sizeof *n);
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* growable node vector in the arena */
void jp_nv_push(parser *p, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        jnode **nn = ja_alloc(p->a, nc * sizeof *nn);
        if (v->n) memcpy(nn, v->v, v->n * sizeof *nn);
        v->v = nn;
        v->cap = nc;
    }
    v->v[v->n++] = x;
}
jlist_nodes jp_nv_done(nvec *v) { return (jlist_nodes){v->v, v->n}; }

void jp_enter(parser *p) {
    if (++p->depth > MAX_PARSE_DEPTH) {
        tok *t = jp_cur(p);
        jp_pfail(p, RF_ERR_RANGE, t->line, t->col, "template nested deeper than %d levels", MAX_PARSE_DEPTH);
    }
}

/* ---- known names ---------------------------------------------------------------------------- */

const char *const JP_FILTERS[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first",
    "from_json",
    "float", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max",
    "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper",
    "wordcount", NULL};
static const char *const TESTS[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "even", "odd", "divisibleby", "eq",
    "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge",
    ">=", "in", "lower", "upper", "sameas", NULL};
static const char *const METHODS[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
    "title", "capitalize", "replace", "find", "count", "join", "splitlines", "items", "keys",
    "values", "get", "cycle", "isdigit", "isalpha", "isspace", "format", "index",
    /* list/dict mutators: accepted here, refused when called (transformers' sandbox is
     * immutable, so a template that calls them fails there too) */
    "append", "extend", "insert", "pop", "remove", "update", "clear", "setdefault", NULL};
const char *const JP_FUNCS[] = {"range", "namespace", "raise_exception", "strftime_now",
                                    "dict", NULL};

bool jp_in_list(const char *const *l, const char *s) {
    for (; *l; l++)
        if (strcmp(*l, s) == 0) return true;
    return false;
}
bool rf_jinja_known_func(const char *s) { return jp_in_list(JP_FUNCS, s); }

/* ---- expressions ---------------------------------------------------------------------------- */

static jnode *p_unary(parser *p, bool with_filter);
static jnode *p_primary(parser *p);
static jnode *p_postfix(parser *p, jnode *n);

/* '(' already consumed: positional and keyword arguments up to ')' */
void jp_p_args(parser *p, jnode *n) {
    nvec a = {0}, kv = {0};
    const char *kn[64];
    size_t nk = 0;
    while (!jp_is_op(jp_cur(p), ")")) {
        if (a.n || nk) jp_expect_op(p, ",");
        if (jp_is_op(jp_cur(p), ")")) break;
        tok *t = jp_cur(p);
        if (t->t == TK_NAME && jp_is_op(jp_peek(p, 1), "=")) {
            if (nk == 64) jp_pfail(p, RF_ERR_UNSUPPORTED, t->line, t->col, "too many keyword arguments");
            kn[nk++] = t->p;
            p->i += 2;
            jp_nv_push(p, &kv, jp_p_expr(p));
        } else {
            if (jp_is_op(t, "*") || jp_is_op(t, "**"))
                jp_pfail(p, RF_ERR_UNSUPPORTED, t->line, t->col, "unsupported construct: *args/**kwargs");
            if (nk) jp_pfail(p, RF_ERR_FORMAT, t->line, t->col, "positional argument after keyword argument");
            jp_nv_push(p, &a, jp_p_expr(p));
        }
    }
    jp_expect_op(p, ")");
    n->args = jp_nv_done(&a);
    n->kwv = jp_nv_done(&kv);
    n->kwn = ja_alloc(p->a, (nk ? nk : 1) * sizeof(char *));
    memcpy(n->kwn, kn, nk * sizeof(char *));
}

static jnode *p_call(parser *p, jnode *callee, tok *at) {
    p->i++; /* ( */
    jnode *n;
    if (callee->kind == JE_ATTR) {
        n = jp_mk(p, JE_METHOD, at);
        n->a = callee->a;
        n->name = callee->name;
        if (!jp_in_list(METHODS, n->name))
            jp_pfail(p, RF_ERR_UNSUPPORTED, callee->line, callee->col, "unsupported method '%s()'", n->name);
    } else if (callee->kind == JE_NAME) {
        n = jp_mk(p, JE_CALL, at);
        n->line = callee->line; /* errors point at the function name */
        n->col = callee->col;
        n->name = callee->name;
        if (p->n_calls == p->cap_calls) {
            size_t nc = p->cap_calls ? p->cap_calls * 2 : 16;
            jnode **nn = ja_alloc(p->a, nc * sizeof *nn);
            if (p->n_calls) memcpy(nn, p->calls, p->n_calls * sizeof *nn);
            p->calls = nn;
            p->cap_calls = nc;
        }
        p->calls[p->n_calls++] = n;
    } else {
        jp_pfail(p, RF_ERR_UNSUPPORTED, at->line, at->col, "unsupported construct: call of an expression");
    }
    jp_p_args(p, n);
    return n;
}

static jnode *p_filter_expr(parser *p, jnode *n) {
    for (;;) {
        tok *t = jp_cur(p);
        if (jp_is_op(t, "|")) {
            p->i++;
            tok *nt = jp_cur(p);
            const char *name = jp_expect_name(p);
            if (!jp_in_list(JP_FILTERS, name))
                jp_pfail(p, RF_ERR_UNSUPPORTED, nt->line, nt->col, "unsupported filter '%s'", name);
            jnode *f = jp_mk(p, JE_FILTER, nt);
            f->name = name;
            f->a = n;
            if (jp_is_op(jp_cur(p), "(")) {
                p->i++;
                jp_p_args(p, f);
            } else {
                f->kwn = ja_alloc(p->a, sizeof(char *));
            }
            n = f;
        } else if (jp_is_name(t, "is")) {
            p->i++;
            bool neg = false;
            if (jp_is_name(jp_cur(p), "not")) {
                neg = true;
                p->i++;
            }
            tok *nt = jp_cur(p);
            const char *name;
            if (nt->t == TK_NAME) name = nt->p;
            else if (nt->t == TK_OP && jp_in_list(TESTS, nt->p)) name = nt->p;
            else jp_pfail(p, RF_ERR_FORMAT, nt->line, nt->col, "expected a test name after 'is'");
            p->i++;
            if (!jp_in_list(TESTS, name))
                jp_pfail(p, RF_ERR_UNSUPPORTED, nt->line, nt->col, "unsupported test '%s'", name);
            jnode *te = jp_mk(p, JE_TEST, nt);
            te->name = name;
            te->a = n;
            tok *c = jp_cur(p);
            if (jp_is_op(c, "(")) {
                p->i++;
                jp_p_args(p, te);
            } else {
                te->kwn = ja_alloc(p->a, sizeof(char *));
                bool argstart = c->t == TK_NAME || c->t == TK_STR || c->t == TK_INT ||
                                c->t == TK_FLOAT || jp_is_op(c, "[") || jp_is_op(c, "{");
                if (argstart && !jp_is_name(c, "else") && !jp_is_name(c, "or") && !jp_is_name(c, "and")) {
                    if (jp_is_name(c, "is")) jp_pfail(p, RF_ERR_FORMAT, c->line, c->col, "cannot chain tests with 'is'");
                    nvec a = {0};
                    jp_nv_push(p, &a, p_postfix(p, p_primary(p)));
                    te->args = jp_nv_done(&a);
                }
            }
            if (neg) {
                jnode *nn = jp_mk(p, JE_NOT, nt);
                nn->a = te;
                te = nn;
            }
            n = te;
        } else if (jp_is_op(t, "(")) {
            n = p_call(p, n, t);
        } else {
            return n;
        }
    }
}

static jnode *p_subscript(parser *p, jnode *obj, tok *at) {
    /* '[' consumed */
    jnode *parts[3] = {0};
    int np = 0;
    bool slice = false;
    for (;;) {
        if (jp_is_op(jp_cur(p), ":")) {
            slice = true;
            if (np >= 2) jp_pfail(p, RF_ERR_FORMAT, jp_cur(p)->line, jp_cur(p)->col, "bad slice");
            p->i++;
            np++;
            continue;
        }
        if (jp_is_op(jp_cur(p), "]")) break;
        if (parts[np]) jp_pfail(p, RF_ERR_FORMAT, jp_cur(p)->line, jp_cur(p)->col, "expected ']'");
        parts[np] = jp_p_expr(p);
    }
    jp_expect_op(p, "]");
    jnode *n = jp_mk(p, slice ? JE_SLICE : JE_INDEX, at);
    n->a = obj;
    if (slice) {
        n->b = parts[0];
        n->c = parts[1];
        nvec v = {0};
        if (parts[2]) jp_nv_push(p, &v, parts[2]);
        n->args = jp_nv_done(&v);
    } else {
        if (!parts[0]) jp_pfail(p, RF_ERR_FORMAT, at->line, at->col, "empty subscript");
        n->b = parts[0];
    }
    return n;
}

static jnode *p_postfix(parser *p, jnode *n) {
    for (;;) {
        tok *t = jp_cur(p);
        if (jp_is_op(t, ".")) {
            p->i++;
            tok *nt = jp_cur(p);
            if (nt->t == TK_INT) {
                jnode *ix = jp_mk(p, JE_INDEX, nt);
                jnode *lit = jp_mk(p, JE_LIT, nt);
                lit->lit.t = JV_INT;
                lit->lit.u.i = nt->i;
                ix->a = n;
                ix->b = lit;
                p->i++;
                n = ix;
                continue;
            }
            const char *name = jp_expect_name(p);
            jnode *at = jp_mk(p, JE_ATTR, nt);
            at->a = n;
            at->name = name;
            n = at;
        } else if (jp_is_op(t, "[")) {
            p->i++;
            n = p_subscript(p, n, t);
        } else if (jp_is_op(t, "(")) {
            n = p_call(p, n, t);
        } else {
            return n;
        }
    }
}

static jnode *p_primary(parser *p) {
    tok *t = jp_cur(p);
    jp_enter(p);
    jnode *n;
    if (t->t == TK_NAME) {
        p->i++;
        n = jp_mk(p, JE_LIT, t);
        if (!strcmp(t->p, "true") || !strcmp(t->p, "True")) { n->lit.t = JV_BOOL; n->lit.u.b = true; }
        else if (!strcmp(t->p, "false") || !strcmp(t->p, "False")) { n->lit.t = JV_BOOL; n->lit.u.b = false; }
        else if (!strcmp(t->p, "none") || !strcmp(t->p, "None")) { n->lit.t = JV_NONE; }
        else {
            n->kind = JE_NAME;
            n->name = t->p;
        }
    } else if (t->t == TK_STR) {
        /* adjacent string literals concatenate */
        size_t total = 0, k = p->i;
        while (p->toks[k].t == TK_STR) total += p->toks[k++].n;
        char *buf = ja_alloc(p->a, total + 1);
        size_t o = 0;
        while (jp_cur(p)->t == TK_STR) {
            memcpy(buf + o, jp_cur(p)->p, jp_cur(p)->n);
            o += jp_cur(p)->n;
            p->i++;
        }
        n = jp_mk(p, JE_LIT, t);
        n->lit.t = JV_STR;
        n->lit.u.s.p = buf;
        n->lit.u.s.n = total;
    } else if (t->t == TK_INT || t->t == TK_FLOAT) {
        p->i++;
        n = jp_mk(p, JE_LIT, t);
        if (t->t == TK_INT) { n->lit.t = JV_INT; n->lit.u.i = t->i; }
        else { n->lit.t = JV_FLOAT; n->lit.u.f = t->f; }
    } else if (jp_is_op(t, "(")) {
        p->i++;
        if (jp_is_op(jp_cur(p), ")")) {
            p->i++;
            n = jp_mk(p, JE_TUPLE, t);
        } else {
            jnode *first = jp_p_expr(p);
            if (jp_is_op(jp_cur(p), ",")) {
                nvec v = {0};
                jp_nv_push(p, &v, first);
                while (jp_is_op(jp_cur(p), ",")) {
                    p->i++;
                    if (jp_is_op(jp_cur(p), ")")) break;
                    jp_nv_push(p, &v, jp_p_expr(p));
                }
                n = jp_mk(p, JE_TUPLE, t);
                n->args = jp_nv_done(&v);
            } else {
                n = first;
            }
            jp_expect_op(p, ")");
        }
    } else if (jp_is_op(t, "[")) {
        p->i++;
        nvec v = {0};
        while (!jp_is_op(jp_cur(p), "]")) {
            if (v.n) jp_expect_op(p, ",");
            if (jp_is_op(jp_cur(p), "]")) break;
            jp_nv_push(p, &v, jp_p_expr(p));
        }
        p->i++;
        n = jp_mk(p, JE_LIST, t);
        n->args = jp_nv_done(&v);
    } else if (jp_is_op(t, "{")) {
        p->i++;
        nvec k = {0}, v = {0};
        while (!jp_is_op(jp_cur(p), "}")) {
            if (k.n) jp_expect_op(p, ",");
            if (jp_is_op(jp_cur(p), "}")) break;
            jp_nv_push(p, &k, jp_p_expr(p));
            jp_expect_op(p, ":");
            jp_nv_push(p, &v, jp_p_expr(p));
        }
        p->i++;
        n = jp_mk(p, JE_DICT, t);
        n->args = jp_nv_done(&k);
        n->kwv = jp_nv_done(&v);
    } else {
        jp_pfail(p, RF_ERR_FORMAT, t->line, t->col, "unexpected '%s'", jp_tok_desc(t));
    }
    p->depth--;
    return n;
}

static jnode *p_unary(parser *p, bool with_filter) {
    tok *t = jp_cur(p);
    jnode *n;
    jp_enter(p);
    if (jp_is_op(t, "-") || jp_is_op(t, "+")) {
        p->i++;
        n = jp_mk(p, jp_is_op(t, "-") ? JE_NEG : JE_POS, t);
        n->a = p_unary(p, false);
    } else {
        n = p_postfix(p, p_primary(p));
    }
    if (with_filter) n = p_filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *bin(parser *p, tok *t, int op, jnode *a, jnode *b) {
    jnode *n = jp_mk(p, JE_BIN, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *p_pow(parser *p) {
    jnode *l = p_unary(p, true);
    while (jp_is_op(jp_cur(p), "**")) {
        tok *t = jp_cur(p);
        p->i++;
        l = bin(p, t, JOP_POW, l, p_unary(p, true));
    }
    return l;
}
static jnode *p_math2(parser *p) {
    jnode *l = p_pow(p);
    for (;;) {
        tok *t = jp_cur(p);
        int op = jp_is_op(t, "*") ? JOP_MUL : jp_is_op(t, "/") ? JOP_DIV : jp_is_op(t, "//") ? JOP_FLOORDIV
               : jp_is_op(t, "%") ? JOP_MOD : -1;
        if (op < 0) return l;
        p->i++;
        l = bin(p, t, op, l, p_pow(p));
    }
}
static jnode *p_concat(parser *p) {
    jnode *l = p_math2(p);
    while (jp_is_op(jp_cur(p), "~")) {
        tok *t = jp_cur(p);
        p->i++;
        l = bin(p, t, JOP_CONCAT, l, p_math2(p));
    }
    return l;
}
static jnode *p_math1(parser *p) {
    jnode *l = p_concat(p);
    for (;;) {
        tok *t = jp_cur(p);
        int op = jp_is_op(t, "+") ? JOP_ADD : jp_is_op(t, "-") ? JOP_SUB : -1;
        if (op < 0) return l;
        p->i++;
        l = bin(p, t, op, l, p_concat(p));
    }
}
static jnode *p_compare(parser *p) {
    tok *t0 = jp_cur(p);
    jnode *l = p_math1(p);
    nvec rhs = {0};
    int ops[32];
    for (;;) {
        tok *t = jp_cur(p);
        int op = -1;
        if (jp_is_op(t, "==")) op = JOP_EQ;
        else if (jp_is_op(t, "!=")) op = JOP_NE;
        else if (jp_is_op(t, "<")) op = JOP_LT;
        else if (jp_is_op(t, "<=")) op = JOP_LE;
        else if (jp_is_op(t, ">")) op = JOP_GT;
        else if (jp_is_op(t, ">=")) op = JOP_GE;
        else if (jp_is_name(t, "in")) op = JOP_IN;
        else if (jp_is_name(t, "not") && jp_is_name(jp_peek(p, 1), "in")) op = JOP_NOTIN;
        if (op < 0) break;
        p->i += op == JOP_NOTIN ? 2 : 1;
        if (rhs.n == 32) jp_pfail(p, RF_ERR_UNSUPPORTED, t->line, t->col, "comparison chain too long");
        ops[rhs.n] = op;
        jp_nv_push(p, &rhs, p_math1(p));
    }
    if (!rhs.n) return l;
    jnode *n = jp_mk(p, JE_CMP, t0);
    n->a = l;
    n->args = jp_nv_done(&rhs);
    n->ops = ja_alloc(p->a, rhs.n * sizeof(int));
    memcpy(n->ops, ops, rhs.n * sizeof(int));
    return n;
}
static jnode *p_not(parser *p) {
    tok *t = jp_cur(p);
    if (jp_is_name(t, "not")) {
        p->i++;
        jp_enter(p);
        jnode *n = jp_mk(p, JE_NOT, t);
        n->a = p_not(p);
        p->depth--;
        return n;
    }
    return p_compare(p);
}
static jnode *p_and(parser *p) {
    jnode *l = p_not(p);
    while (jp_is_name(jp_cur(p), "and")) {
        tok *t = jp_cur(p);
        p->i++;
        jnode *n = jp_mk(p, JE_AND, t);
        n->a = l;
        n->b = p_not(p);
        l = n;
    }
    return l;
}
jnode *jp_p_or(parser *p) {
    jnode *l = p_and(p);
    while (jp_is_name(jp_cur(p), "or")) {
        tok *t = jp_cur(p);
        p->i++;
        jnode *n = jp_mk(p, JE_OR, t);
        n->a = l;
        n->b = p_and(p);
        l = n;
    }
    return l;
}
/* conditional expression: a if cond [else b] */
jnode *jp_p_expr(parser *p) {
    jp_enter(p);
    jnode *l = jp_p_or(p);
    while (jp_is_name(jp_cur(p), "if")) {
        tok *t = jp_cur(p);
        p->i++;
        jnode *n = jp_mk(p, JE_COND, t);
        n->a = jp_p_or(p);
        n->b = l;
        if (jp_is_name(jp_cur(p), "else")) {
            p->i++;
            n->c = jp_p_expr(p);
        }
        l = n;
    }
    p->depth--;
    return l;
}
/* an expression, or a bare tuple `a, b` (set values, output) */
jnode *jp_p_tuple_expr(parser *p) {
    tok *t = jp_cur(p);
    jnode *first = jp_p_expr(p);
    if (!jp_is_op(jp_cur(p), ",")) return first;
    nvec v = {0};
    jp_nv_push(p, &v, first);
    while (jp_is_op(jp_cur(p), ",")) {
        p->i++;
        tok *c = jp_cur(p);
        if (c->t == TK_BEND || c->t == TK_VEND) break;
        jp_nv_push(p, &v, jp_p_expr(p));
    }
    jnode *n = jp_mk(p, JE_TUPLE, t);
    n->args = jp_nv_done(&v);
    return n;
}
