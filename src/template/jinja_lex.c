/* jinja_lex.c — the Jinja lexer: text, {{ }}, {% %} and {# #}, whitespace control exactly as
 * Jinja2 with trim_blocks/lstrip_blocks, string literals decoded, line:column for errors. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_parse.h"

void jp_pfail(parser *p, rf_status st, int line, int col, const char *fmt, ...) {
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
                if (h < 0) jp_pfail(p, RF_ERR_FORMAT, line, col, "truncated \\%c escape in string", e);
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF) jp_pfail(p, RF_ERR_FORMAT, line, col, "illegal Unicode escape");
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
            jp_pfail(p, RF_ERR_FORMAT, l, c, "unexpected end of template, expected '%s'",
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
                    jp_pfail(p, RF_ERR_UNSUPPORTED, k->line, k->col, "integer literal too large");
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
            if (q >= p->len) jp_pfail(p, RF_ERR_FORMAT, k->line, k->col, "unterminated string");
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
                jp_pfail(p, RF_ERR_FORMAT, l, cc, "unexpected character '%c'", c);
            }
            size_t ol = strlen(OPS[oi]);
            tok *k = push_tok(p, TK_OP, at);
            k->p = OPS[oi];
            k->n = ol;
            char ch = OPS[oi][0];
            if (ol == 1 && strchr("([{", ch)) {
                if (bal == MAX_PARSE_DEPTH)
                    jp_pfail(p, RF_ERR_RANGE, k->line, k->col, "template nested deeper than %d levels", MAX_PARSE_DEPTH);
                want[bal++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
            }
            if (ol == 1 && strchr(")]}", ch)) {
                if (bal == 0) jp_pfail(p, RF_ERR_FORMAT, k->line, k->col, "unexpected '%c'", ch);
                if (want[bal - 1] != ch)
                    jp_pfail(p, RF_ERR_FORMAT, k->line, k->col, "unexpected '%c', expected '%c'", ch, want[bal - 1]);
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

void jp_lex(parser *p) {
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
                        jp_pfail(p, RF_ERR_FORMAT, l, c, "missing end of raw directive");
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
                jp_pfail(p, RF_ERR_FORMAT, l, c, "missing end of comment tag");
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
