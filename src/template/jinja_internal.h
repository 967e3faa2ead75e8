/* jinja_internal.h — shared between the Jinja parser and evaluator: the bump arena, the
 * syntax tree and the value representation. Not part of any public API. */
#ifndef RF_TEMPLATE_JINJA_INTERNAL_H
#define RF_TEMPLATE_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "template/jinja.h"

/* ---- arena: everything a parse or a render allocates lives here and dies with it ---------- */

typedef struct jarena {
    rf_arena ar;   /* ar.limit: the bytes a parse or render may hold (0 = none) */
    jmp_buf *fail; /* longjmp target when malloc fails or the limit is hit */
    int fail_code; /* 1 = OOM, 2 = limit (rf_arena_fail); set before the jump */
} jarena;

void *ja_alloc(jarena *a, size_t n);              /* zeroed; jumps to a->fail on failure */
char *ja_strndup(jarena *a, const char *s, size_t n);
void ja_free(jarena *a);

/* ---- syntax tree ---------------------------------------------------------------------------- */

typedef enum jnode_kind {
    /* statements */
    JN_TEXT, JN_OUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_BREAK, JN_CONTINUE,
    JN_FILTERBLOCK,
    /* expressions */
    JE_LIT, JE_NAME, JE_ATTR, JE_INDEX, JE_SLICE, JE_CALL, JE_FILTER, JE_TEST, JE_BIN, JE_NEG,
    JE_POS, JE_NOT, JE_AND, JE_OR, JE_COND, JE_LIST, JE_TUPLE, JE_DICT, JE_CMP, JE_METHOD
} jnode_kind;

typedef enum jop {
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN
} jop;

typedef struct jnode jnode;

typedef struct jlist_nodes {
    jnode **v;
    size_t n;
} jlist_nodes;

/* Value types. Strings are UTF-8 (ptr, len); lists/dicts are arena objects. */
typedef enum jv_type {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_MACRO,
    JV_FUNC, JV_LOOP
} jv_type;

/* Byte ranges of a string that came from the caller's data (template variables other than the
 * trusted ones: messages, tools, ...), sorted, disjoint and not touching: r[k] = {begin, end}.
 * Template literals have none. Operations on strings carry them along (concatenation, slices,
 * strip, split, replace, join); a transformation that cannot say which byte came from where
 * marks its whole result as data. The render returns them so that special tokens are parsed
 * only from the template's own text. */
typedef struct jspans {
    size_t n;
    size_t r[][2];
} jspans;

struct jlist;
struct jdict;
struct jmacro;
struct jloop;

typedef struct jv {
    jv_type t;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; const jspans *d; } s; /* d: data ranges or NULL */
        struct jlist *l;
        struct jdict *d;      /* JV_DICT and JV_NS (namespace: a mutable dict) */
        struct jmacro *m;
        int fn;               /* JV_FUNC: builtin id */
        struct jloop *loop;
        const char *undef_name; /* JV_UNDEF: what was undefined (for messages), may be NULL */
    } u;
    bool markup; /* JV_STR from |safe or |escape: markupsafe.Markup, whose `+` escapes the other side */
} jv;

/* What Python object a list value stands for: filters such as map/select/items return
 * generators in Jinja (always truthy, no len(), not JSON-serialisable); dict.items() and
 * range() return views (len() works, not JSON-serialisable). */
enum { JL_LIST = 0, JL_GEN = 1, JL_VIEW = 2 };

typedef struct jlist {
    size_t n;
    bool tuple;
    uint8_t kind; /* JL_* */
    jv *v;
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
} jdict;

struct jnode {
    jnode_kind kind;
    int line, col;
    int op;                /* jop for JE_BIN; for JE_CMP ops[] below */
    const char *name;      /* NAME, ATTR, FILTER, TEST, METHOD names; SET/MACRO target */
    const char *attr;      /* SET target attribute (ns.attr) */
    jnode *a, *b, *c;      /* operands: a=object/cond/lhs, b, c (slice step, cond else) */
    jlist_nodes args;      /* call/filter/test args; list/tuple items; dict keys; CMP rhs */
    jlist_nodes kwv;       /* keyword arg values; dict values */
    const char **kwn;      /* keyword arg names */
    int *ops;              /* JE_CMP: one jop per rhs */
    jv lit;                /* JE_LIT */
    const char *text;      /* JN_TEXT */
    size_t text_len;
    jlist_nodes body, els; /* statements */
    const char **targets;  /* FOR / SET tuple targets */
    size_t n_targets;
    const char **params;   /* MACRO parameter names; defaults in kwv (NULL = required) */
    size_t n_params;
};

struct rf_jinja {
    jarena arena;
    jlist_nodes body;
};

#endif
