/* jinja_arena.c — the bump arena every parse and render allocates from (freed as a whole; a
 * failed allocation or the memory limit jumps to the caller's error path). */
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"

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
