/* jinja_parse.c — the bump arena, the Jinja lexer (whitespace control exactly as Jinja2 with
 * trim_blocks/lstrip_blocks) and the recursive-descent parser producing the syntax tree that
 * jinja_eval.c runs. Unsupported constructs are rejected here, with line:column. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja_internal.h"

/* ---- arena ---------------------------------------------------------------------------------- */

void *ja_alloc(jarena *a, size_t n) {
    if (n > ((size_t)1 << 40) || (a->limit && n > a->limit)) { /* also keeps the rounding below from wrapping */
        a->fail_code = 2;
        longjmp(*a->fail, 1);
    }
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jarena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->limit && a->total + cap > a->limit) {
            a->fail_code = 2;
            longjmp(*a->fail, 1);
        }
        c = malloc(sizeof(*c) + cap);
        if (!c) {
            a->fail_code = 1;
            longjmp(*a->fail, 1);
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *ja_strndup(jarena *a, const char *s, size_t n) {
    char *p = ja_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void ja_free(jarena *a) {
    jarena_chunk *c = a->head;
    while (c) {
        jarena_chunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- tokens --------------------------------------------------------------------------------- */

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

static void pfail(parser *p, rf_status st, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6), noreturn));
static void pfail(parser *p, rf_status st, int line, int col, const char *fmt, ...) {
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(p->msg, sizeof p->msg, "chat template %d:%d: %s", line, col, m);
    p->st = st;
    longjmp(p->jb, 1);
}

/* line and column (1-based, column in bytes) of a source offset; offsets only move forward
 * between calls except for error reports, which rescan. */
static void linecol(parser *p, size_t pos, int *line, int *col) {
    if (pos < p->lc_pos) {
        p->lc_pos = 0;
        p->lc_line = 1;
        p->lc_linestart = 0;
    }
    for (size_t k = p->lc_pos; k < pos && k < p->len; k++)
        if (p->src[k] == '\n') {
            p->lc_line++;
            p->lc_linestart = k + 1;
        }
    p->lc_pos = pos;
    *line = p->lc_line;
    *col = (int)(pos - p->lc_linestart) + 1;
}

static tok *push_tok(parser *p, tk_type t, size_t pos) {
    if (p->ntok == p->captok) {
        size_t nc = p->captok ? p->captok * 2 : 256;
        tok *nt = ja_alloc(p->a, nc * sizeof(tok));
        if (p->ntok) memcpy(nt, p->toks, p->ntok * sizeof(tok));
        p->toks = nt;
        p->captok = nc;
    }
    tok *k = &p->toks[p->ntok++];
    memset(k, 0, sizeof *k);
    k->t = t;
    linecol(p, pos, &k->line, &k->col);
    return k;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Python's \s / str.isspace() set (what Jinja's regexes and rstrip() use): bytes of the
 * whitespace code point starting at s[q], 0 if none. */
static size_t ws_at(const char *s, size_t q, size_t len) {
    unsigned char c = (unsigned char)s[q];
    if (is_ws((char)c) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c < 0xC2) return 0;
    uint32_t cp;
    size_t n;
    if (c < 0xE0) {
        if (q + 1 >= len) return 0;
        cp = ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)s[q + 1] & 0x3F);
        n = 2;
    } else if (c < 0xF0) {
        if (q + 2 >= len) return 0;
        cp = ((uint32_t)(c & 0x0F) << 12) | (((unsigned char)s[q + 1] & 0x3F) << 6) | ((unsigned char)s[q + 2] & 0x3F);
        n = 3;
    } else {
        return 0;
    }
    bool sp = cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
              cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
    return sp ? n : 0;
}
/* bytes of whitespace ending at s[n-1] (one code point), 0 if none */
static size_t ws_before(const char *s, size_t n) {
    for (size_t w = 1; w <= 3 && w <= n; w++) {
        size_t l = ws_at(s, n - w, n);
        if (l == w) return w;
    }
    return 0;
}
static size_t skip_ws(const char *s, size_t q, size_t len, char *last) {
    size_t l;
    while (q < len && (l = ws_at(s, q, len)) > 0) {
        if (last) *last = s[q + l - 1];
        q += l;
    }
    return q;
}

static void push_data(parser *p, size_t pos, const char *s, size_t n) {
    if (!n) return;
    tok *k = push_tok(p, TK_DATA, pos);
    k->p = s;
    k->n = n;
}

/* Decodes a Python string literal body (Jinja runs literals through "unicode-escape"):
 * \n \t \r \\ \' \" \a \b \f \v \0-7 octal, \xHH, \uHHHH, \UHHHHHHHH; unknown escapes stay. */
static void put_utf8(char *o, size_t *k, uint32_t cp) {
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*k)++] = (char)(0xC0 | (cp >> 6));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18));
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static char *decode_str(parser *p, const char *s, size_t n, size_t *out_n, int line, int col) {
    char *o = ja_alloc(p->a, n + 1);
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        char c = s[j];
        if (c != '\\' || j + 1 >= n) {
            o[k++] = c;
            continue;
        }
        char e = s[++j];
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < nd; d++) {
                int h = j + 1 + d < n ? hexv(s[j + 1 + d]) : -1;
                if (h < 0) pfail(p, RF_ERR_FORMAT, line, col, "truncated \\%c escape in string", e);
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF) pfail(p, RF_ERR_FORMAT, line, col, "illegal Unicode escape");
            j += nd;
            put_utf8(o, &k, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && j + 1 < n && s[j + 1] >= '0' && s[j + 1] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(s[++j] - '0');
                put_utf8(o, &k, cp);
            } else {
                o[k++] = '\\';
                o[k++] = e;
            }
        }
    }
    o[k] = 0;
    *out_n = k;
    return o;
}

static const char *const OPS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%",
                                  "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".",
                                  ":", "|", ";"};

/* Lexes expression tokens from p->pos until the closing tag (`%}` for blocks, `}}` for
 * variables), honouring bracket balance like Jinja. Returns after consuming the end tag and
 * the whitespace its control sign asks to drop; *ended_nl says whether the match ended in
 * a newline (Jinja's "line_starting"). */
static void lex_expr(parser *p, bool block, bool *ended_nl) {
    int bal = 0;
    char want[MAX_PARSE_DEPTH + 1]; /* expected closing brackets, innermost last */
    const char *s = p->src;
    for (;;) {
        p->pos = skip_ws(s, p->pos, p->len, NULL);
        size_t at = p->pos;
        if (at >= p->len) {
            int l, c;
            linecol(p, at, &l, &c);
            pfail(p, RF_ERR_FORMAT, l, c, "unexpected end of template, expected '%s'",
                  block ? "%}" : "}}");
        }
        if (bal == 0) {
            const char *end = block ? "%}" : "}}";
            int sign = 0;
            size_t q = at;
            if ((s[q] == '-' || (block && s[q] == '+')) && q + 2 < p->len + 1 &&
                strncmp(s + q + 1, end, 2) == 0) {
                sign = s[q];
                q++;
            }
            if (q + 2 <= p->len && strncmp(s + q, end, 2) == 0) {
                push_tok(p, block ? TK_BEND : TK_VEND, at);
                q += 2;
                char last = '}';
                if (sign == '-') {
                    q = skip_ws(s, q, p->len, &last);
                } else if (block && sign != '+' && q < p->len && s[q] == '\n') {
                    last = s[q++];
                }
                p->pos = q;
                *ended_nl = last == '\n';
                return;
            }
        }
        char c = s[at];
        if (isalpha((unsigned char)c) || c == '_') {
            size_t q = at;
            while (q < p->len && (isalnum((unsigned char)s[q]) || s[q] == '_')) q++;
            tok *k = push_tok(p, TK_NAME, at);
            k->p = ja_strndup(p->a, s + at, q - at);
            k->n = q - at;
            p->pos = q;
        } else if (isdigit((unsigned char)c)) {
            size_t q = at;
            while (q < p->len && (isdigit((unsigned char)s[q]) || s[q] == '_')) q++;
            bool isf = false;
            bool prev_dot = at > 0 && s[at - 1] == '.';
            if (!prev_dot && q + 1 < p->len && s[q] == '.' && isdigit((unsigned char)s[q + 1])) {
                isf = true;
                q++;
                while (q < p->len && (isdigit((unsigned char)s[q]) || s[q] == '_')) q++;
            }
            if (!prev_dot && q < p->len && (s[q] == 'e' || s[q] == 'E')) {
                size_t r = q + 1;
                if (r < p->len && (s[r] == '+' || s[r] == '-')) r++;
                if (r < p->len && isdigit((unsigned char)s[r])) {
                    isf = true;
                    q = r;
                    while (q < p->len && isdigit((unsigned char)s[q])) q++;
                }
            }
            char buf[64];
            size_t bn = 0;
            for (size_t r = at; r < q && bn < sizeof buf - 1; r++)
                if (s[r] != '_') buf[bn++] = s[r];
            buf[bn] = 0;
            tok *k = push_tok(p, isf ? TK_FLOAT : TK_INT, at);
            if (isf) k->f = strtod(buf, NULL);
            else {
                errno = 0;
                char *e;
                unsigned long long v = strtoull(buf, &e, 10);
                if (errno || v > INT64_MAX)
                    pfail(p, RF_ERR_UNSUPPORTED, k->line, k->col, "integer literal too large");
                k->i = (int64_t)v;
            }
            p->pos = q;
        } else if (c == '\'' || c == '"') {
            size_t q = at + 1;
            while (q < p->len && s[q] != c) {
                if (s[q] == '\\' && q + 1 < p->len) q++;
                q++;
            }
            tok *k = push_tok(p, TK_STR, at);
            if (q >= p->len) pfail(p, RF_ERR_FORMAT, k->line, k->col, "unterminated string");
            k->p = decode_str(p, s + at + 1, q - at - 1, &k->n, k->line, k->col);
            p->pos = q + 1;
        } else {
            size_t oi;
            size_t nops = sizeof OPS / sizeof OPS[0];
            for (oi = 0; oi < nops; oi++) {
                size_t ol = strlen(OPS[oi]);
                if (at + ol <= p->len && strncmp(s + at, OPS[oi], ol) == 0) break;
            }
            if (oi == nops) {
                int l, cc;
                linecol(p, at, &l, &cc);
                pfail(p, RF_ERR_FORMAT, l, cc, "unexpected character '%c'", c);
            }
            size_t ol = strlen(OPS[oi]);
            tok *k = push_tok(p, TK_OP, at);
            k->p = OPS[oi];
            k->n = ol;
            char ch = OPS[oi][0];
            if (ol == 1 && strchr("([{", ch)) {
                if (bal == MAX_PARSE_DEPTH)
                    pfail(p, RF_ERR_RANGE, k->line, k->col, "template nested deeper than %d levels", MAX_PARSE_DEPTH);
                want[bal++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
            }
            if (ol == 1 && strchr(")]}", ch)) {
                if (bal == 0) pfail(p, RF_ERR_FORMAT, k->line, k->col, "unexpected '%c'", ch);
                if (want[bal - 1] != ch)
                    pfail(p, RF_ERR_FORMAT, k->line, k->col, "unexpected '%c', expected '%c'", ch, want[bal - 1]);
                bal--;
            }
            p->pos = at + ol;
        }
    }
}

/* `{% raw %}` at s+at (after "{%" and an optional sign): returns the end offset of the tag
 * or 0 when this is not a raw tag. */
static size_t match_word_tag(const char *s, size_t len, size_t q, const char *word, int *end_sign) {
    while (q < len && is_ws(s[q])) q++;
    size_t wl = strlen(word);
    if (q + wl > len || strncmp(s + q, word, wl) != 0) return 0;
    q += wl;
    if (q < len && (isalnum((unsigned char)s[q]) || s[q] == '_')) return 0;
    while (q < len && is_ws(s[q])) q++;
    *end_sign = 0;
    if (q < len && (s[q] == '-' || s[q] == '+')) *end_sign = s[q++];
    if (q + 2 > len || strncmp(s + q, "%}", 2) != 0) return 0;
    return q + 2;
}

/* Jinja's lstrip_blocks / '-' handling of the text before a tag. */
static size_t strip_before(const char *text, size_t n, int sign, bool lstrip, bool line_starting) {
    if (sign == '-') {
        size_t w;
        while (n > 0 && (w = ws_before(text, n)) > 0) n -= w;
        return n;
    }
    if (sign != '+' && lstrip) {
        size_t l = n;
        while (l > 0 && text[l - 1] != '\n') l--;
        if (l > 0 || line_starting) {
            if (l < n && skip_ws(text, l, n, NULL) == n) return l;
        }
    }
    return n;
}

static void lex(parser *p) {
    const char *s = p->src;
    bool line_starting = true;
    while (p->pos < p->len) {
        size_t start = p->pos;
        const char *tag = NULL;
        size_t q = start;
        for (; q + 1 < p->len; q++)
            if (s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#')) {
                tag = s + q;
                break;
            }
        if (!tag) {
            push_data(p, start, s + start, p->len - start);
            p->pos = p->len;
            break;
        }
        char kind = s[q + 1];
        int sign = 0;
        size_t after = q + 2;
        if (after < p->len && (s[after] == '-' || s[after] == '+')) sign = s[after++];
        size_t tn = q - start;
        if (kind == '%') {
            int es = 0;
            size_t rend = match_word_tag(s, p->len, after, "raw", &es);
            if (rend) {
                tn = strip_before(s + start, tn, sign, true, line_starting);
                push_data(p, start, s + start, tn);
                size_t b = rend;
                if (es == '-') b = skip_ws(s, b, p->len, NULL);
                /* find {% endraw %} */
                size_t r = b;
                for (;;) {
                    const char *f = NULL;
                    for (; r + 1 < p->len; r++)
                        if (s[r] == '{' && s[r + 1] == '%') {
                            f = s + r;
                            break;
                        }
                    if (!f) {
                        int l, c;
                        linecol(p, q, &l, &c);
                        pfail(p, RF_ERR_FORMAT, l, c, "missing end of raw directive");
                    }
                    int s2 = 0, e2 = 0;
                    size_t a2 = r + 2;
                    if (a2 < p->len && (s[a2] == '-' || s[a2] == '+')) s2 = s[a2++];
                    size_t eend = match_word_tag(s, p->len, a2, "endraw", &e2);
                    if (!eend) {
                        r++;
                        continue;
                    }
                    size_t dn = strip_before(s + b, r - b, s2, true, false);
                    push_data(p, b, s + b, dn);
                    if (e2 == '-') eend = skip_ws(s, eend, p->len, NULL);
                    else if (e2 != '+' && eend < p->len && s[eend] == '\n') eend++;
                    line_starting = s[eend - 1] == '\n';
                    p->pos = eend;
                    break;
                }
                continue;
            }
        }
        tn = strip_before(s + start, tn, sign, kind != '{', line_starting);
        push_data(p, start, s + start, tn);
        if (kind == '#') {
            size_t r = after;
            for (; r + 1 < p->len; r++)
                if (s[r] == '#' && s[r + 1] == '}') break;
            if (r + 1 >= p->len) {
                int l, c;
                linecol(p, q, &l, &c);
                pfail(p, RF_ERR_FORMAT, l, c, "missing end of comment tag");
            }
            int es = r > after && (s[r - 1] == '-' || s[r - 1] == '+') ? s[r - 1] : 0;
            size_t e = r + 2;
            char last = '}';
            if (es == '-') e = skip_ws(s, e, p->len, &last);
            else if (es != '+' && e < p->len && s[e] == '\n') last = s[e++];
            line_starting = last == '\n';
            p->pos = e;
            continue;
        }
        push_tok(p, kind == '%' ? TK_BBEGIN : TK_VBEGIN, q);
        p->pos = after;
        lex_expr(p, kind == '%', &line_starting);
    }
    push_tok(p, TK_EOF, p->len);
}

/* ---- parser helpers ------------------------------------------------------------------------- */

static tok *cur(parser *p) { return &p->toks[p->i]; }
static tok *peek(parser *p, size_t k) {
    size_t j = p->i + k;
    return &p->toks[j < p->ntok ? j : p->ntok - 1];
}
static bool is_op(tok *t, const char *op) { return t->t == TK_OP && strcmp(t->p, op) == 0; }
static bool is_name(tok *t, const char *nm) { return t->t == TK_NAME && strcmp(t->p, nm) == 0; }

static const char *tok_desc(tok *t) {
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

static void expect_op(parser *p, const char *op) {
    tok *t = cur(p);
    if (!is_op(t, op)) pfail(p, RF_ERR_FORMAT, t->line, t->col, "expected '%s', got '%s'", op, tok_desc(t));
    p->i++;
}
static void expect_t(parser *p, tk_type tt, const char *what) {
    tok *t = cur(p);
    if (t->t != tt) pfail(p, RF_ERR_FORMAT, t->line, t->col, "expected %s, got '%s'", what, tok_desc(t));
    p->i++;
}
static const char *expect_name(parser *p) {
    tok *t = cur(p);
    if (t->t != TK_NAME) pfail(p, RF_ERR_FORMAT, t->line, t->col, "expected a name, got '%s'", tok_desc(t));
    p->i++;
    return t->p;
}

static jnode *mk(parser *p, jnode_kind k, tok *at) {
    jnode *n = ja_alloc(p->a, sizeof *n);
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* growable node vector in the arena */
typedef struct nvec {
    jnode **v;
    size_t n, cap;
} nvec;
static void nv_push(parser *p, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        jnode **nn = ja_alloc(p->a, nc * sizeof *nn);
        if (v->n) memcpy(nn, v->v, v->n * sizeof *nn);
        v->v = nn;
        v->cap = nc;
    }
    v->v[v->n++] = x;
}
static jlist_nodes nv_done(nvec *v) { return (jlist_nodes){v->v, v->n}; }

static void enter(parser *p) {
    if (++p->depth > MAX_PARSE_DEPTH) {
        tok *t = cur(p);
        pfail(p, RF_ERR_RANGE, t->line, t->col, "template nested deeper than %d levels", MAX_PARSE_DEPTH);
    }
}

/* ---- known names ---------------------------------------------------------------------------- */

static const char *const FILTERS[] = {
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
static const char *const FUNCS[] = {"range", "namespace", "raise_exception", "strftime_now",
                                    "dict", NULL};

static bool in_list(const char *const *l, const char *s) {
    for (; *l; l++)
        if (strcmp(*l, s) == 0) return true;
    return false;
}
bool rf_jinja_known_func(const char *s) { return in_list(FUNCS, s); }

/* ---- expressions ---------------------------------------------------------------------------- */

static jnode *p_expr(parser *p);
static jnode *p_or(parser *p);
static jnode *p_unary(parser *p, bool with_filter);
static jnode *p_primary(parser *p);
static jnode *p_postfix(parser *p, jnode *n);

/* '(' already consumed: positional and keyword arguments up to ')' */
static void p_args(parser *p, jnode *n) {
    nvec a = {0}, kv = {0};
    const char *kn[64];
    size_t nk = 0;
    while (!is_op(cur(p), ")")) {
        if (a.n || nk) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        tok *t = cur(p);
        if (t->t == TK_NAME && is_op(peek(p, 1), "=")) {
            if (nk == 64) pfail(p, RF_ERR_UNSUPPORTED, t->line, t->col, "too many keyword arguments");
            kn[nk++] = t->p;
            p->i += 2;
            nv_push(p, &kv, p_expr(p));
        } else {
            if (is_op(t, "*") || is_op(t, "**"))
                pfail(p, RF_ERR_UNSUPPORTED, t->line, t->col, "unsupported construct: *args/**kwargs");
            if (nk) pfail(p, RF_ERR_FORMAT, t->line, t->col, "positional argument after keyword argument");
            nv_push(p, &a, p_expr(p));
        }
    }
    expect_op(p, ")");
    n->args = nv_done(&a);
    n->kwv = nv_done(&kv);
    n->kwn = ja_alloc(p->a, (nk ? nk : 1) * sizeof(char *));
    memcpy(n->kwn, kn, nk * sizeof(char *));
}

static jnode *p_call(parser *p, jnode *callee, tok *at) {
    p->i++; /* ( */
    jnode *n;
    if (callee->kind == JE_ATTR) {
        n = mk(p, JE_METHOD, at);
        n->a = callee->a;
        n->name = callee->name;
        if (!in_list(METHODS, n->name))
            pfail(p, RF_ERR_UNSUPPORTED, callee->line, callee->col, "unsupported method '%s()'", n->name);
    } else if (callee->kind == JE_NAME) {
        n = mk(p, JE_CALL, at);
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
        pfail(p, RF_ERR_UNSUPPORTED, at->line, at->col, "unsupported construct: call of an expression");
    }
    p_args(p, n);
    return n;
}

static jnode *p_filter_expr(parser *p, jnode *n) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(t, "|")) {
            p->i++;
            tok *nt = cur(p);
            const char *name = expect_name(p);
            if (!in_list(FILTERS, name))
                pfail(p, RF_ERR_UNSUPPORTED, nt->line, nt->col, "unsupported filter '%s'", name);
            jnode *f = mk(p, JE_FILTER, nt);
            f->name = name;
            f->a = n;
            if (is_op(cur(p), "(")) {
                p->i++;
                p_args(p, f);
            } else {
                f->kwn = ja_alloc(p->a, sizeof(char *));
            }
            n = f;
        } else if (is_name(t, "is")) {
            p->i++;
            bool neg = false;
            if (is_name(cur(p), "not")) {
                neg = true;
                p->i++;
            }
            tok *nt = cur(p);
            const char *name;
            if (nt->t == TK_NAME) name = nt->p;
            else if (nt->t == TK_OP && in_list(TESTS, nt->p)) name = nt->p;
            else pfail(p, RF_ERR_FORMAT, nt->line, nt->col, "expected a test name after 'is'");
            p->i++;
            if (!in_list(TESTS, name))
                pfail(p, RF_ERR_UNSUPPORTED, nt->line, nt->col, "unsupported test '%s'", name);
            jnode *te = mk(p, JE_TEST, nt);
            te->name = name;
            te->a = n;
            tok *c = cur(p);
            if (is_op(c, "(")) {
                p->i++;
                p_args(p, te);
            } else {
                te->kwn = ja_alloc(p->a, sizeof(char *));
                bool argstart = c->t == TK_NAME || c->t == TK_STR || c->t == TK_INT ||
                                c->t == TK_FLOAT || is_op(c, "[") || is_op(c, "{");
                if (argstart && !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                    if (is_name(c, "is")) pfail(p, RF_ERR_FORMAT, c->line, c->col, "cannot chain tests with 'is'");
                    nvec a = {0};
                    nv_push(p, &a, p_postfix(p, p_primary(p)));
                    te->args = nv_done(&a);
                }
            }
            if (neg) {
                jnode *nn = mk(p, JE_NOT, nt);
                nn->a = te;
                te = nn;
            }
            n = te;
        } else if (is_op(t, "(")) {
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
        if (is_op(cur(p), ":")) {
            slice = true;
            if (np >= 2) pfail(p, RF_ERR_FORMAT, cur(p)->line, cur(p)->col, "bad slice");
            p->i++;
            np++;
            continue;
        }
        if (is_op(cur(p), "]")) break;
        if (parts[np]) pfail(p, RF_ERR_FORMAT, cur(p)->line, cur(p)->col, "expected ']'");
        parts[np] = p_expr(p);
    }
    expect_op(p, "]");
    jnode *n = mk(p, slice ? JE_SLICE : JE_INDEX, at);
    n->a = obj;
    if (slice) {
        n->b = parts[0];
        n->c = parts[1];
        nvec v = {0};
        if (parts[2]) nv_push(p, &v, parts[2]);
        n->args = nv_done(&v);
    } else {
        if (!parts[0]) pfail(p, RF_ERR_FORMAT, at->line, at->col, "empty subscript");
        n->b = parts[0];
    }
    return n;
}

static jnode *p_postfix(parser *p, jnode *n) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(t, ".")) {
            p->i++;
            tok *nt = cur(p);
            if (nt->t == TK_INT) {
                jnode *ix = mk(p, JE_INDEX, nt);
                jnode *lit = mk(p, JE_LIT, nt);
                lit->lit.t = JV_INT;
                lit->lit.u.i = nt->i;
                ix->a = n;
                ix->b = lit;
                p->i++;
                n = ix;
                continue;
            }
            const char *name = expect_name(p);
            jnode *at = mk(p, JE_ATTR, nt);
            at->a = n;
            at->name = name;
            n = at;
        } else if (is_op(t, "[")) {
            p->i++;
            n = p_subscript(p, n, t);
        } else if (is_op(t, "(")) {
            n = p_call(p, n, t);
        } else {
            return n;
        }
    }
}

static jnode *p_primary(parser *p) {
    tok *t = cur(p);
    enter(p);
    jnode *n;
    if (t->t == TK_NAME) {
        p->i++;
        n = mk(p, JE_LIT, t);
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
        while (cur(p)->t == TK_STR) {
            memcpy(buf + o, cur(p)->p, cur(p)->n);
            o += cur(p)->n;
            p->i++;
        }
        n = mk(p, JE_LIT, t);
        n->lit.t = JV_STR;
        n->lit.u.s.p = buf;
        n->lit.u.s.n = total;
    } else if (t->t == TK_INT || t->t == TK_FLOAT) {
        p->i++;
        n = mk(p, JE_LIT, t);
        if (t->t == TK_INT) { n->lit.t = JV_INT; n->lit.u.i = t->i; }
        else { n->lit.t = JV_FLOAT; n->lit.u.f = t->f; }
    } else if (is_op(t, "(")) {
        p->i++;
        if (is_op(cur(p), ")")) {
            p->i++;
            n = mk(p, JE_TUPLE, t);
        } else {
            jnode *first = p_expr(p);
            if (is_op(cur(p), ",")) {
                nvec v = {0};
                nv_push(p, &v, first);
                while (is_op(cur(p), ",")) {
                    p->i++;
                    if (is_op(cur(p), ")")) break;
                    nv_push(p, &v, p_expr(p));
                }
                n = mk(p, JE_TUPLE, t);
                n->args = nv_done(&v);
            } else {
                n = first;
            }
            expect_op(p, ")");
        }
    } else if (is_op(t, "[")) {
        p->i++;
        nvec v = {0};
        while (!is_op(cur(p), "]")) {
            if (v.n) expect_op(p, ",");
            if (is_op(cur(p), "]")) break;
            nv_push(p, &v, p_expr(p));
        }
        p->i++;
        n = mk(p, JE_LIST, t);
        n->args = nv_done(&v);
    } else if (is_op(t, "{")) {
        p->i++;
        nvec k = {0}, v = {0};
        while (!is_op(cur(p), "}")) {
            if (k.n) expect_op(p, ",");
            if (is_op(cur(p), "}")) break;
            nv_push(p, &k, p_expr(p));
            expect_op(p, ":");
            nv_push(p, &v, p_expr(p));
        }
        p->i++;
        n = mk(p, JE_DICT, t);
        n->args = nv_done(&k);
        n->kwv = nv_done(&v);
    } else {
        pfail(p, RF_ERR_FORMAT, t->line, t->col, "unexpected '%s'", tok_desc(t));
    }
    p->depth--;
    return n;
}

static jnode *p_unary(parser *p, bool with_filter) {
    tok *t = cur(p);
    jnode *n;
    enter(p);
    if (is_op(t, "-") || is_op(t, "+")) {
        p->i++;
        n = mk(p, is_op(t, "-") ? JE_NEG : JE_POS, t);
        n->a = p_unary(p, false);
    } else {
        n = p_postfix(p, p_primary(p));
    }
    if (with_filter) n = p_filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *bin(parser *p, tok *t, int op, jnode *a, jnode *b) {
    jnode *n = mk(p, JE_BIN, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *p_pow(parser *p) {
    jnode *l = p_unary(p, true);
    while (is_op(cur(p), "**")) {
        tok *t = cur(p);
        p->i++;
        l = bin(p, t, JOP_POW, l, p_unary(p, true));
    }
    return l;
}
static jnode *p_math2(parser *p) {
    jnode *l = p_pow(p);
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "*") ? JOP_MUL : is_op(t, "/") ? JOP_DIV : is_op(t, "//") ? JOP_FLOORDIV
               : is_op(t, "%") ? JOP_MOD : -1;
        if (op < 0) return l;
        p->i++;
        l = bin(p, t, op, l, p_pow(p));
    }
}
static jnode *p_concat(parser *p) {
    jnode *l = p_math2(p);
    while (is_op(cur(p), "~")) {
        tok *t = cur(p);
        p->i++;
        l = bin(p, t, JOP_CONCAT, l, p_math2(p));
    }
    return l;
}
static jnode *p_math1(parser *p) {
    jnode *l = p_concat(p);
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : -1;
        if (op < 0) return l;
        p->i++;
        l = bin(p, t, op, l, p_concat(p));
    }
}
static jnode *p_compare(parser *p) {
    tok *t0 = cur(p);
    jnode *l = p_math1(p);
    nvec rhs = {0};
    int ops[32];
    for (;;) {
        tok *t = cur(p);
        int op = -1;
        if (is_op(t, "==")) op = JOP_EQ;
        else if (is_op(t, "!=")) op = JOP_NE;
        else if (is_op(t, "<")) op = JOP_LT;
        else if (is_op(t, "<=")) op = JOP_LE;
        else if (is_op(t, ">")) op = JOP_GT;
        else if (is_op(t, ">=")) op = JOP_GE;
        else if (is_name(t, "in")) op = JOP_IN;
        else if (is_name(t, "not") && is_name(peek(p, 1), "in")) op = JOP_NOTIN;
        if (op < 0) break;
        p->i += op == JOP_NOTIN ? 2 : 1;
        if (rhs.n == 32) pfail(p, RF_ERR_UNSUPPORTED, t->line, t->col, "comparison chain too long");
        ops[rhs.n] = op;
        nv_push(p, &rhs, p_math1(p));
    }
    if (!rhs.n) return l;
    jnode *n = mk(p, JE_CMP, t0);
    n->a = l;
    n->args = nv_done(&rhs);
    n->ops = ja_alloc(p->a, rhs.n * sizeof(int));
    memcpy(n->ops, ops, rhs.n * sizeof(int));
    return n;
}
static jnode *p_not(parser *p) {
    tok *t = cur(p);
    if (is_name(t, "not")) {
        p->i++;
        enter(p);
        jnode *n = mk(p, JE_NOT, t);
        n->a = p_not(p);
        p->depth--;
        return n;
    }
    return p_compare(p);
}
static jnode *p_and(parser *p) {
    jnode *l = p_not(p);
    while (is_name(cur(p), "and")) {
        tok *t = cur(p);
        p->i++;
        jnode *n = mk(p, JE_AND, t);
        n->a = l;
        n->b = p_not(p);
        l = n;
    }
    return l;
}
static jnode *p_or(parser *p) {
    jnode *l = p_and(p);
    while (is_name(cur(p), "or")) {
        tok *t = cur(p);
        p->i++;
        jnode *n = mk(p, JE_OR, t);
        n->a = l;
        n->b = p_and(p);
        l = n;
    }
    return l;
}
/* conditional expression: a if cond [else b] */
static jnode *p_expr(parser *p) {
    enter(p);
    jnode *l = p_or(p);
    while (is_name(cur(p), "if")) {
        tok *t = cur(p);
        p->i++;
        jnode *n = mk(p, JE_COND, t);
        n->a = p_or(p);
        n->b = l;
        if (is_name(cur(p), "else")) {
            p->i++;
            n->c = p_expr(p);
        }
        l = n;
    }
    p->depth--;
    return l;
}
/* an expression, or a bare tuple `a, b` (set values, output) */
static jnode *p_tuple_expr(parser *p) {
    tok *t = cur(p);
    jnode *first = p_expr(p);
    if (!is_op(cur(p), ",")) return first;
    nvec v = {0};
    nv_push(p, &v, first);
    while (is_op(cur(p), ",")) {
        p->i++;
        tok *c = cur(p);
        if (c->t == TK_BEND || c->t == TK_VEND) break;
        nv_push(p, &v, p_expr(p));
    }
    jnode *n = mk(p, JE_TUPLE, t);
    n->args = nv_done(&v);
    return n;
}

/* ---- statements ----------------------------------------------------------------------------- */

static jlist_nodes p_stmts(parser *p, const char *const *ends, const char **which);

static void end_tag(parser *p) { expect_t(p, TK_BEND, "'%}'"); }

static bool at_end_word(parser *p, const char *const *ends, const char **which) {
    if (cur(p)->t != TK_BBEGIN) return false;
    tok *n = peek(p, 1);
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
    jnode *n = mk(p, JN_IF, at);
    enter(p); /* elif chains recurse */
    n->a = p_expr(p);
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

static jlist_nodes p_stmts(parser *p, const char *const *ends, const char **which) {
    nvec v = {0};
    enter(p);
    for (;;) {
        tok *t = cur(p);
        if (t->t == TK_EOF) {
            if (ends) pfail(p, RF_ERR_FORMAT, t->line, t->col, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (at_end_word(p, ends, which)) break;
        if (t->t == TK_DATA) {
            jnode *n = mk(p, JN_TEXT, t);
            n->text = t->p;
            n->text_len = t->n;
            nv_push(p, &v, n);
            p->i++;
        } else if (t->t == TK_VBEGIN) {
            p->i++;
            jnode *n = mk(p, JN_OUT, t);
            n->a = p_tuple_expr(p);
            expect_t(p, TK_VEND, "'}}'");
            nv_push(p, &v, n);
        } else if (t->t == TK_BBEGIN) {
            p->i++;
            tok *kw = cur(p);
            const char *w = expect_name(p);
            if (!strcmp(w, "if")) {
                nv_push(p, &v, p_if(p, kw));
            } else if (!strcmp(w, "for")) {
                static const char *const fends[] = {"else", "endfor", NULL};
                static const char *const fends2[] = {"endfor", NULL};
                jnode *n = mk(p, JN_FOR, kw);
                const char *tg[16];
                size_t nt = 0;
                bool paren = is_op(cur(p), "(");
                if (paren) p->i++;
                for (;;) {
                    if (nt == 16) pfail(p, RF_ERR_UNSUPPORTED, kw->line, kw->col, "too many loop targets");
                    tg[nt++] = expect_name(p);
                    if (!is_op(cur(p), ",")) break;
                    p->i++;
                }
                if (paren) expect_op(p, ")");
                n->targets = ja_alloc(p->a, nt * sizeof(char *));
                memcpy(n->targets, tg, nt * sizeof(char *));
                n->n_targets = nt;
                if (!is_name(cur(p), "in")) pfail(p, RF_ERR_FORMAT, cur(p)->line, cur(p)->col, "expected 'in'");
                p->i++;
                n->a = p_or(p); /* no conditional here: `if` filters the loop */
                if (is_name(cur(p), "if")) {
                    p->i++;
                    n->b = p_expr(p);
                }
                if (is_name(cur(p), "recursive"))
                    pfail(p, RF_ERR_UNSUPPORTED, cur(p)->line, cur(p)->col, "unsupported construct: recursive for loop");
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
                nv_push(p, &v, n);
            } else if (!strcmp(w, "set")) {
                static const char *const sends[] = {"endset", NULL};
                tok *nt = cur(p);
                const char *name = expect_name(p);
                jnode *n = mk(p, JN_SET, kw);
                n->name = name;
                if (is_op(cur(p), ".")) {
                    p->i++;
                    n->attr = expect_name(p);
                } else if (is_op(cur(p), ",")) {
                    const char *tg[16];
                    size_t k = 0;
                    tg[k++] = name;
                    while (is_op(cur(p), ",")) {
                        p->i++;
                        if (k == 16) pfail(p, RF_ERR_UNSUPPORTED, nt->line, nt->col, "too many targets");
                        tg[k++] = expect_name(p);
                    }
                    n->targets = ja_alloc(p->a, k * sizeof(char *));
                    memcpy(n->targets, tg, k * sizeof(char *));
                    n->n_targets = k;
                }
                if (is_op(cur(p), "=")) {
                    p->i++;
                    n->a = p_tuple_expr(p);
                    end_tag(p);
                } else if (cur(p)->t == TK_BEND && !n->attr && !n->n_targets) {
                    p->i++;
                    n->kind = JN_SETBLOCK;
                    const char *w2 = NULL;
                    n->body = p_stmts(p, sends, &w2);
                    p->i += 2;
                    end_tag(p);
                } else {
                    pfail(p, RF_ERR_UNSUPPORTED, cur(p)->line, cur(p)->col, "unsupported construct in set: '%s'",
                          tok_desc(cur(p)));
                }
                nv_push(p, &v, n);
            } else if (!strcmp(w, "macro")) {
                static const char *const mends[] = {"endmacro", NULL};
                jnode *n = mk(p, JN_MACRO, kw);
                n->name = expect_name(p);
                add_macro_name(p, n->name);
                expect_op(p, "(");
                const char *pn[64];
                nvec defs = {0};
                size_t np = 0;
                while (!is_op(cur(p), ")")) {
                    if (np) expect_op(p, ",");
                    if (np == 64) pfail(p, RF_ERR_UNSUPPORTED, kw->line, kw->col, "too many macro parameters");
                    pn[np++] = expect_name(p);
                    if (is_op(cur(p), "=")) {
                        p->i++;
                        nv_push(p, &defs, p_expr(p));
                    } else {
                        nv_push(p, &defs, NULL);
                    }
                }
                p->i++;
                n->params = ja_alloc(p->a, (np ? np : 1) * sizeof(char *));
                memcpy(n->params, pn, np * sizeof(char *));
                n->n_params = np;
                n->kwv = nv_done(&defs);
                end_tag(p);
                const char *w2 = NULL;
                n->body = p_stmts(p, mends, &w2);
                p->i += 2;
                if (cur(p)->t == TK_NAME) p->i++; /* {% endmacro name %} */
                end_tag(p);
                nv_push(p, &v, n);
            } else if (!strcmp(w, "break") || !strcmp(w, "continue")) {
                jnode *n = mk(p, w[0] == 'b' ? JN_BREAK : JN_CONTINUE, kw);
                end_tag(p);
                nv_push(p, &v, n);
            } else if (!strcmp(w, "generation")) {
                /* transformers' AssistantTracker tag: renders its body unchanged */
                static const char *const gends[] = {"endgeneration", NULL};
                end_tag(p);
                const char *w2 = NULL;
                jnode *n = mk(p, JN_IF, kw);
                n->a = mk(p, JE_LIT, kw);
                n->a->lit.t = JV_BOOL;
                n->a->lit.u.b = true;
                n->body = p_stmts(p, gends, &w2);
                p->i += 2;
                end_tag(p);
                nv_push(p, &v, n);
            } else if (!strcmp(w, "filter")) {
                static const char *const fends[] = {"endfilter", NULL};
                tok *nt = cur(p);
                jnode *n = mk(p, JN_FILTERBLOCK, kw);
                n->name = expect_name(p);
                if (!in_list(FILTERS, n->name))
                    pfail(p, RF_ERR_UNSUPPORTED, nt->line, nt->col, "unsupported filter '%s'", n->name);
                if (is_op(cur(p), "(")) {
                    p->i++;
                    p_args(p, n);
                } else {
                    n->kwn = ja_alloc(p->a, sizeof(char *));
                }
                end_tag(p);
                const char *w2 = NULL;
                n->body = p_stmts(p, fends, &w2);
                p->i += 2;
                end_tag(p);
                nv_push(p, &v, n);
            } else {
                pfail(p, RF_ERR_UNSUPPORTED, kw->line, kw->col, "unsupported tag '%s'", w);
            }
        } else {
            pfail(p, RF_ERR_FORMAT, t->line, t->col, "unexpected '%s'", tok_desc(t));
        }
    }
    p->depth--;
    return nv_done(&v);
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
    t->arena.limit = (size_t)64 << 20;
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
    lex(p);
    p->i = 0;
    t->body = p_stmts(p, NULL, NULL);
    for (size_t c = 0; c < p->n_calls; c++) {
        jnode *n = p->calls[c];
        bool ok = in_list(FUNCS, n->name);
        for (size_t m = 0; !ok && m < p->n_macros; m++) ok = strcmp(p->macro_names[m], n->name) == 0;
        if (!ok) pfail(p, RF_ERR_UNSUPPORTED, n->line, n->col, "unsupported function '%s()'", n->name);
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
