/* textout.c — a choice's text output: token ids through the streaming detokenizer, then held
 * back while the tail could be the start of a stop string, released once it cannot. A stop
 * string found anywhere cuts the text before it. Generated text may hold NUL bytes (a byte
 * token <0x00>), so everything is by length, never strstr. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

rf_status rf_textout_init(rf_textout *t, const rf_vocab *v, bool render_special, char *const *stops,
                          const size_t *stop_len, int n_stop) {
    memset(t, 0, sizeof *t);
    rf_status st = rf_detok_new(v, render_special, &t->dt);
    if (st) return st;
    if (n_stop > 0) {
        t->stops = calloc((size_t)n_stop, sizeof *t->stops);
        t->stop_len = calloc((size_t)n_stop, sizeof *t->stop_len);
        if (!t->stops || !t->stop_len) goto oom;
        for (int i = 0; i < n_stop; i++) {
            if (!stop_len[i]) continue; /* an empty stop string matches nothing */
            t->stops[t->n_stop] = malloc(stop_len[i]);
            if (!t->stops[t->n_stop]) goto oom;
            memcpy(t->stops[t->n_stop], stops[i], stop_len[i]);
            t->stop_len[t->n_stop++] = stop_len[i];
        }
    }
    return RF_OK;
oom:
    rf_textout_free(t);
    return rf_set_error(RF_ERR_OOM, "text output: out of memory");
}

void rf_textout_free(rf_textout *t) {
    rf_detok_free(t->dt);
    free(t->buf);
    if (t->stops)
        for (int i = 0; i < t->n_stop; i++) free(t->stops[i]);
    free(t->stops);
    free(t->stop_len);
    memset(t, 0, sizeof *t);
}

static rf_status add(rf_textout *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *b = realloc(t->buf, cap);
        if (!b) return rf_set_error(RF_ERR_OOM, "text output: out of memory");
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = 0;
    return RF_OK;
}

/* Length of the longest suffix of the buffer that is a proper prefix of some stop string. */
static size_t holdback(const rf_textout *t) {
    size_t best = 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = t->stop_len[i];
        for (size_t k = sl > 1 ? sl - 1 : 0; k > best; k--)
            if (k <= t->len && !memcmp(t->buf + t->len - k, t->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Drops the bytes handed out by the previous call (the caller has read them by now). */
static void compact(rf_textout *t) {
    if (!t->rel) return;
    memmove(t->buf, t->buf + t->rel, t->len - t->rel);
    t->len -= t->rel;
    t->buf[t->len] = 0;
    t->rel = 0;
}

/* Hands out what is safe, [0, emit) of buf: the text before a stop string (setting *hit; the
 * rest is dropped, and nothing is released after), or all but the hold-back. */
static void release(rf_textout *t, bool final, const char **out, size_t *out_len, bool *hit) {
    *hit = false;
    size_t cut = t->len;
    for (int i = 0; i < t->n_stop; i++) {
        const char *f = t->len ? memmem(t->buf, t->len, t->stops[i], t->stop_len[i]) : NULL;
        if (f && (size_t)(f - t->buf) < cut) {
            cut = (size_t)(f - t->buf);
            *hit = true;
        }
    }
    size_t emit = cut;
    if (!*hit && !final) emit = t->len - holdback(t);
    if (*hit) t->len = emit;
    *out = t->buf ? t->buf : "";
    *out_len = emit;
    t->rel = emit;
}

rf_status rf_textout_push(rf_textout *t, int32_t id, const char **out, size_t *out_len, bool *hit) {
    char piece[512];
    size_t np = 0;
    compact(t);
    rf_status st = rf_detok_push(t->dt, id, piece, sizeof piece, &np);
    if (st) return st;
    if ((st = add(t, piece, np < sizeof piece ? np : sizeof piece))) return st;
    release(t, false, out, out_len, hit);
    return RF_OK;
}

rf_status rf_textout_finish(rf_textout *t, const char **out, size_t *out_len, bool *hit) {
    char piece[512];
    size_t np = 0;
    compact(t);
    if (rf_detok_flush(t->dt, piece, sizeof piece, &np) == RF_OK && np) {
        rf_status st = add(t, piece, np < sizeof piece ? np : sizeof piece);
        if (st) return st;
    }
    release(t, true, out, out_len, hit);
    return RF_OK;
}
