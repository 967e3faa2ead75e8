/* jinja_arena.c — the bump arena every parse and render allocates from (freed as a whole; a
 * failed allocation or the memory limit jumps to the caller's error path). */
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"

/* ---- arena ---------------------------------------------------------------------------------- */

void *ja_alloc(jarena *a, size_t n) {
    rf_arena_fail why;
    void *p = rf_arena_alloc(&a->ar, n, &why);
    if (!p) {
        a->fail_code = (int)why;
        longjmp(*a->fail, 1);
    }
    memset(p, 0, n);
    return p;
}

char *ja_strndup(jarena *a, const char *s, size_t n) {
    char *p = ja_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void ja_free(jarena *a) { rf_arena_free(&a->ar); }
