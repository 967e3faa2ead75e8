/* jinja_parse.h — shared by the lexer and the parser (not an API): tokens, the parser state and
 * the helpers one file calls in another (prefix jp_). */
#ifndef RF_TEMPLATE_JINJA_PARSE_H
#define RF_TEMPLATE_JINJA_PARSE_H

#include "template/jinja_internal.h"

typedef enum tk_type {
    TK_DATA, TK_VBEGIN, TK_VEND, TK_BBEGIN, TK_BEND, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP,
    TK_EOF
} tk_type;

typedef struct tok {
    tk_type t;
    const char *p; /* DATA text, NAME/OP text, STR decoded value (arena) */
    size_t n;
    int64_t i;
    double f;
    int line, col;
} tok;

#define MAX_PARSE_DEPTH 200

typedef struct parser {
    jarena *a;
    jmp_buf jb;
    rf_status st;
    char msg[320];
    /* lexer */
    const char *src;
    size_t len, pos;
    size_t lc_pos;
    int lc_line;
    size_t lc_linestart;
    tok *toks;
    size_t ntok, captok;
    /* parser */
    size_t i;
    int depth;
    const char **macro_names;
    size_t n_macros, cap_macros;
    jnode **calls; /* JE_CALL nodes with a plain-name callee, checked at the end */
    size_t n_calls, cap_calls;
} parser;

/* growable node vector in the arena */
typedef struct nvec {
    jnode **v;
    size_t n, cap;
} nvec;

/* ---- jinja_lex.c ------------------------------------------------------------------------------- */
void jp_pfail(parser *p, rf_status st, int line, int col, const char *fmt, ...) __attribute__((format(printf, 5, 6), noreturn));
void jp_lex(parser *p);

/* ---- jinja_parse_expr.c ------------------------------------------------------------------------ */
extern const char *const JP_FILTERS[];
extern const char *const JP_FUNCS[];
tok *jp_cur(parser *p);
tok *jp_peek(parser *p, size_t k);
bool jp_is_op(tok *t, const char *op);
bool jp_is_name(tok *t, const char *nm);
const char *jp_tok_desc(tok *t);
void jp_expect_op(parser *p, const char *op);
void jp_expect_t(parser *p, tk_type tt, const char *what);
const char *jp_expect_name(parser *p);
jnode *jp_mk(parser *p, jnode_kind k, tok *at);
void jp_nv_push(parser *p, nvec *v, jnode *x);
jlist_nodes jp_nv_done(nvec *v);
void jp_enter(parser *p);
bool jp_in_list(const char *const *l, const char *s);
void jp_p_args(parser *p, jnode *n);
jnode *jp_p_expr(parser *p);
jnode *jp_p_or(parser *p);
jnode *jp_p_tuple_expr(parser *p);

#endif
