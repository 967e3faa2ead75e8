/* jinja_parse.c — statements (if/for/set/macro/filter/break/continue) and rf_jinja_parse:
 * the syntax tree jinja_render.c runs. Unsupported constructs are rejected with line:column. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_parse.h"

/* ---- statements ----------------------------------------------------------------------------- */

static jlist_nodes p_stmts(parser *p, const char *const *ends, const char **which);

static void end_tag(parser *p) { jp_expect_t(p, TK_BEND, "'%}'"); }

static bool at_end_word(parser *p, const char *const *ends, const char **which) {
    if (jp_cur(p)->t != TK_BBEGIN) return false;
    tok *n = jp_peek(p, 1);
    if (n->t != TK_NAME || !ends) return false;
    for (const char *const *e = ends; *e; e++)
        if (strcmp(n->p, *e) == 0) {
            *which = *e;
            return true;
        }
    return false;
}

static void add_macro_name(parser *p, const char *name) {
    if (p->n_macros == p->cap_macros) {
        size_t nc = p->cap_macros ? p->cap_macros * 2 : 8;
        const char **nn = ja_alloc(p->a, nc * sizeof *nn);
        if (p->n_macros) memcpy(nn, p->macro_names, p->n_macros * sizeof *nn);
        p->macro_names = nn;
        p->cap_macros = nc;
    }
    p->macro_names[p->n_macros++] = name;
}

static jnode *p_if(parser *p, tok *at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    jnode *n = jp_mk(p, JN_IF, at);
    jp_enter(p); /* elif chains recurse */
    n->a = jp_p_expr(p);
    end_tag(p);
    const char *w = NULL;
    n->body = p_stmts(p, ends, &w);
    p->i += 2; /* {% word */
    if (!strcmp(w, "elif")) {
        jnode *e = p_if(p, &p->toks[p->i - 1]);
        n->els.v = ja_alloc(p->a, sizeof(jnode *));
        n->els.v[0] = e;
        n->els.n = 1;
        p->depth--;
        return n; /* the nested if consumed endif */
    }
    if (!strcmp(w, "else")) {
        end_tag(p);
        n->els = p_stmts(p, ends2, &w);
        p->i += 2;
    }
    end_tag(p);
    p->depth--;
    return n;
}

/* {% for targets in expr [if cond] %} ... [{% else %} ...] {% endfor %} */
static jnode *p_for(parser *p, tok *kw) {
    static const char *const fends[] = {"else", "endfor", NULL};
    static const char *const fends2[] = {"endfor", NULL};
    jnode *n = jp_mk(p, JN_FOR, kw);
    const char *tg[16];
    size_t nt = 0;
    bool paren = jp_is_op(jp_cur(p), "(");
    if (paren) p->i++;
    for (;;) {
        if (nt == 16) jp_pfail(p, RF_ERR_UNSUPPORTED, kw->line, kw->col, "too many loop targets");
        tg[nt++] = jp_expect_name(p);
        if (!jp_is_op(jp_cur(p), ",")) break;
        p->i++;
    }
    if (paren) jp_expect_op(p, ")");
    n->targets = ja_alloc(p->a, nt * sizeof(char *));
    memcpy(n->targets, tg, nt * sizeof(char *));
    n->n_targets = nt;
    if (!jp_is_name(jp_cur(p), "in")) jp_pfail(p, RF_ERR_FORMAT, jp_cur(p)->line, jp_cur(p)->col, "expected 'in'");
    p->i++;
    n->a = jp_p_or(p); /* no conditional here: `if` filters the loop */
    if (jp_is_name(jp_cur(p), "if")) {
        p->i++;
        n->b = jp_p_expr(p);
    }
    if (jp_is_name(jp_cur(p), "recursive"))
        jp_pfail(p, RF_ERR_UNSUPPORTED, jp_cur(p)->line, jp_cur(p)->col, "unsupported construct: recursive for loop");
    end_tag(p);
    const char *which2 = NULL;
    n->body = p_stmts(p, fends, &which2);
    p->i += 2;
    if (!strcmp(which2, "else")) {
        end_tag(p);
        n->els = p_stmts(p, fends2, &which2);
        p->i += 2;
    }
    end_tag(p);
    return n;
}

/* {% set x = expr %}, {% set ns.attr = expr %}, {% set a, b = expr %}, {% set x %}...{% endset %} */
static jnode *p_set(parser *p, tok *kw) {
    static const char *const sends[] = {"endset", NULL};
    tok *nt = jp_cur(p);
    const char *name = jp_expect_name(p);
    jnode *n = jp_mk(p, JN_SET, kw);
    n->name = name;
    if (jp_is_op(jp_cur(p), ".")) {
        p->i++;
        n->attr = jp_expect_name(p);
    } else if (jp_is_op(jp_cur(p), ",")) {
        const char *tg[16];
        size_t k = 0;
        tg[k++] = name;
        while (jp_is_op(jp_cur(p), ",")) {
            p->i++;
            if (k == 16) jp_pfail(p, RF_ERR_UNSUPPORTED, nt->line, nt->col, "too many targets");
            tg[k++] = jp_expect_name(p);
        }
        n->targets = ja_alloc(p->a, k * sizeof(char *));
        memcpy(n->targets, tg, k * sizeof(char *));
        n->n_targets = k;
    }
    if (jp_is_op(jp_cur(p), "=")) {
        p->i++;
        n->a = jp_p_tuple_expr(p);
        end_tag(p);
    } else if (jp_cur(p)->t == TK_BEND && !n->attr && !n->n_targets) {
        p->i++;
        n->kind = JN_SETBLOCK;
        const char *w2 = NULL;
        n->body = p_stmts(p, sends, &w2);
        p->i += 2;
        end_tag(p);
    } else {
        jp_pfail(p, RF_ERR_UNSUPPORTED, jp_cur(p)->line, jp_cur(p)->col, "unsupported construct in set: '%s'",
              jp_tok_desc(jp_cur(p)));
    }
    return n;
}

/* {% macro name(params, with=defaults) %} ... {% endmacro %} */
static jnode *p_macro(parser *p, tok *kw) {
    static const char *const mends[] = {"endmacro", NULL};
    jnode *n = jp_mk(p, JN_MACRO, kw);
    n->name = jp_expect_name(p);
    add_macro_name(p, n->name);
    jp_expect_op(p, "(");
    const char *pn[64];
    nvec defs = {0};
    size_t np = 0;
    while (!jp_is_op(jp_cur(p), ")")) {
        if (np) jp_expect_op(p, ",");
        if (np == 64) jp_pfail(p, RF_ERR_UNSUPPORTED, kw->line, kw->col, "too many macro parameters");
        pn[np++] = jp_expect_name(p);
        if (jp_is_op(jp_cur(p), "=")) {
            p->i++;
            jp_nv_push(p, &defs, jp_p_expr(p));
        } else {
            jp_nv_push(p, &defs, NULL);
        }
    }
    p->i++;
    n->params = ja_alloc(p->a, (np ? np : 1) * sizeof(char *));
    memcpy(n->params, pn, np * sizeof(char *));
    n->n_params = np;
    n->kwv = jp_nv_done(&defs);
    end_tag(p);
    const char *w2 = NULL;
    n->body = p_stmts(p, mends, &w2);
    p->i += 2;
    if (jp_cur(p)->t == TK_NAME) p->i++; /* {% endmacro name %} */
    end_tag(p);
    return n;
}

static jlist_nodes p_stmts(parser *p, const char *const *ends, const char **which) {
    nvec v = {0};
    jp_enter(p);
    for (;;) {
        tok *t = jp_cur(p);
        if (t->t == TK_EOF) {
            if (ends) jp_pfail(p, RF_ERR_FORMAT, t->line, t->col, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (at_end_word(p, ends, which)) break;
        if (t->t == TK_DATA) {
            jnode *n = jp_mk(p, JN_TEXT, t);
            n->text = t->p;
            n->text_len = t->n;
            jp_nv_push(p, &v, n);
            p->i++;
        } else if (t->t == TK_VBEGIN) {
            p->i++;
            jnode *n = jp_mk(p, JN_OUT, t);
            n->a = jp_p_tuple_expr(p);
            jp_expect_t(p, TK_VEND, "'}}'");
            jp_nv_push(p, &v, n);
        } else if (t->t == TK_BBEGIN) {
            p->i++;
            tok *kw = jp_cur(p);
            const char *w = jp_expect_name(p);
            if (!strcmp(w, "if")) {
                jp_nv_push(p, &v, p_if(p, kw));
            } else if (!strcmp(w, "for")) {
                jp_nv_push(p, &v, p_for(p, kw));
            } else if (!strcmp(w, "set")) {
                jp_nv_push(p, &v, p_set(p, kw));
            } else if (!strcmp(w, "macro")) {
                jp_nv_push(p, &v, p_macro(p, kw));
            } else if (!strcmp(w, "break") || !strcmp(w, "continue")) {
                jnode *n = jp_mk(p, w[0] == 'b' ? JN_BREAK : JN_CONTINUE, kw);
                end_tag(p);
                jp_nv_push(p, &v, n);
            } else if (!strcmp(w, "generation")) {
                /* transformers' AssistantTracker tag: renders its body unchanged */
                static const char *const gends[] = {"endgeneration", NULL};
                end_tag(p);
                const char *w2 = NULL;
                jnode *n = jp_mk(p, JN_IF, kw);
                n->a = jp_mk(p, JE_LIT, kw);
                n->a->lit.t = JV_BOOL;
                n->a->lit.u.b = true;
                n->body = p_stmts(p, gends, &w2);
                p->i += 2;
                end_tag(p);
                jp_nv_push(p, &v, n);
            } else if (!strcmp(w, "filter")) {
                static const char *const fends[] = {"endfilter", NULL};
                tok *nt = jp_cur(p);
                jnode *n = jp_mk(p, JN_FILTERBLOCK, kw);
                n->name = jp_expect_name(p);
                if (!jp_in_list(JP_FILTERS, n->name))
                    jp_pfail(p, RF_ERR_UNSUPPORTED, nt->line, nt->col, "unsupported filter '%s'", n->name);
                if (jp_is_op(jp_cur(p), "(")) {
                    p->i++;
                    jp_p_args(p, n);
                } else {
                    n->kwn = ja_alloc(p->a, sizeof(char *));
                }
                end_tag(p);
                const char *w2 = NULL;
                n->body = p_stmts(p, fends, &w2);
                p->i += 2;
                end_tag(p);
                jp_nv_push(p, &v, n);
            } else {
                jp_pfail(p, RF_ERR_UNSUPPORTED, kw->line, kw->col, "unsupported tag '%s'", w);
            }
        } else {
            jp_pfail(p, RF_ERR_FORMAT, t->line, t->col, "unexpected '%s'", jp_tok_desc(t));
        }
    }
    p->depth--;
    return jp_nv_done(&v);
}

rf_status rf_jinja_parse(const char *src, size_t len, rf_jinja **out) {
    if (!src || !out) return rf_set_error(RF_ERR_INVALID_ARG, "rf_jinja_parse: NULL argument");
    *out = NULL;
    rf_jinja *t = calloc(1, sizeof *t);
    if (!t) return rf_set_error(RF_ERR_OOM, "chat template: out of memory");
    parser *p = calloc(1, sizeof *p);
    if (!p) {
        free(t);
        return rf_set_error(RF_ERR_OOM, "chat template: out of memory");
    }
    p->a = &t->arena;
    t->arena.fail = &p->jb;
    t->arena.ar.limit = (size_t)64 << 20;
    if (setjmp(p->jb)) {
        rf_status st = p->st;
        if (t->arena.fail_code) {
            st = t->arena.fail_code == 1 ? RF_ERR_OOM : RF_ERR_RANGE;
            snprintf(p->msg, sizeof p->msg, "chat template: %s while parsing",
                     st == RF_ERR_OOM ? "out of memory" : "too large");
        }
        rf_set_error(st, "%s", p->msg);
        ja_free(&t->arena);
        free(t);
        free(p);
        return st;
    }
    /* Jinja normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline
     * is off in transformers). */
    char *norm = ja_alloc(p->a, len + 1);
    size_t k = 0;
    for (size_t j = 0; j < len; j++) {
        if (src[j] == '\r') {
            norm[k++] = '\n';
            if (j + 1 < len && src[j + 1] == '\n') j++;
        } else {
            norm[k++] = src[j];
        }
    }
    if (k > 0 && norm[k - 1] == '\n') k--;
    norm[k] = 0;
    p->src = norm;
    p->len = k;
    p->lc_line = 1;
    jp_lex(p);
    p->i = 0;
    t->body = p_stmts(p, NULL, NULL);
    for (size_t c = 0; c < p->n_calls; c++) {
        jnode *n = p->calls[c];
        bool ok = jp_in_list(JP_FUNCS, n->name);
        for (size_t m = 0; !ok && m < p->n_macros; m++) ok = strcmp(p->macro_names[m], n->name) == 0;
        if (!ok) jp_pfail(p, RF_ERR_UNSUPPORTED, n->line, n->col, "unsupported function '%s()'", n->name);
    }
    free(p);
    t->arena.fail = NULL;
    *out = t;
    return RF_OK;
}

void rf_jinja_free(rf_jinja *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}
