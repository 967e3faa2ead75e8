/* oai_buf.c — the server's output primitives (oai.h): a growable byte buffer, the named SSE
 * event frame of the Messages and Responses streams, and JSON strings of any bytes (invalid
 * UTF-8 made U+FFFD). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "oai.h"

json_t *srv_json_bytes(const char *s, size_t n) {
    if (!s) return json_string("");
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *b = malloc(3 * n + 1);
    if (!b) return NULL;
    j = json_stringn(b, rf_utf8_replace(s, n, b));
    free(b);
    return j;
}

void srv_buf_add(srv_buf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        srv_buf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    srv_buf_add(b, big, (size_t)n);
    free(big);
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void srv_buf_sse_event(srv_buf *b, const char *name, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!s) {
        b->oom = true;
        return;
    }
    srv_buf_printf(b, "event: %s\ndata: ", name);
    srv_buf_add(b, s, strlen(s));
    srv_buf_add(b, "\n\n", 2);
    free(s);
}
