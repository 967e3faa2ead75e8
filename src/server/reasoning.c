/* reasoning.c — a model's reasoning apart from its answer: `<think>...</think>` blocks (Qwen3,
 * DeepSeek-R1 style, also a block the prompt already opened) and gpt-oss's harmony channels
 * (analysis = reasoning, final = answer, commentary to=functions.NAME = a tool call). */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "reasoning.h"

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static const char *find(const char *t, size_t n, size_t from, const char *needle) {
    size_t k = strlen(needle);
    if (from > n || n - from < k) return NULL;
    const char *p = memmem(t + from, n - from, needle, k);
    return p;
}

size_t srv_marker_tail(const char *t, size_t n, const char *marker) {
    size_t m = strlen(marker);
    for (size_t k = m - 1; k > 0; k--)
        if (k <= n && memcmp(t + n - k, marker, k) == 0) return k;
    return 0;
}

bool srv_think_split(const char *t, size_t n, bool open, bool final, size_t *r0, size_t *r1, size_t *rest) {
    static const char OPEN[] = "<think>", CLOSE[] = "</think>";
    size_t start;
    *r0 = *r1 = *rest = 0;
    if (open) {
        start = 0;
    } else {
        size_t i = 0;
        while (i < n && is_ws(t[i])) i++;
        if (n - i >= 7 && !memcmp(t + i, OPEN, 7)) {
            start = i + 7;
        } else if (!final && (i == n || (n - i < 7 && !memcmp(t + i, OPEN, n - i)))) {
            *rest = n; /* whitespace or the start of "<think>": hold it */
            return true;
        } else {
            return false;
        }
    }
    const char *close = find(t, n, start, CLOSE);
    size_t end;
    if (close) {
        end = (size_t)(close - t);
        size_t r = end + 8;
        while (r < n && is_ws(t[r])) r++;
        *rest = r;
    } else {
        end = final ? n : n - srv_marker_tail(t, n, CLOSE);
        *rest = n;
    }
    size_t a = start, b = end;
    while (a < b && is_ws(t[a])) a++;
    while (b > a && is_ws(t[b - 1])) b--;
    *r0 = a;
    *r1 = b;
    return true;
}

bool srv_prompt_opens_think(const char *p, size_t n) {
    while (n > 0 && is_ws(p[n - 1])) n--;
    return n >= 7 && !memcmp(p + n - 7, "<think>", 7);
}

/* ---- harmony ------------------------------------------------------------------------------ */

static const char *const H_ENDS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

/* The first message terminator at or after `from`: its position (n when none) and length. */
static size_t harmony_body_end(const char *t, size_t n, size_t from, size_t *term_len) {
    size_t best = n;
    *term_len = 0;
    for (size_t k = 0; k < sizeof H_ENDS / sizeof H_ENDS[0]; k++) {
        const char *p = find(t, n, from, H_ENDS[k]);
        if (p && (size_t)(p - t) < best) {
            best = (size_t)(p - t);
            *term_len = strlen(H_ENDS[k]);
        }
    }
    return best;
}

/* bytes at the end of t[0..n) that may start a harmony marker */
static size_t harmony_hold(const char *t, size_t n) {
    size_t h = 0;
    for (size_t k = 0; k < sizeof H_ENDS / sizeof H_ENDS[0]; k++) {
        size_t x = srv_marker_tail(t, n, H_ENDS[k]);
        if (x > h) h = x;
    }
    size_t x = srv_marker_tail(t, n, "<|channel|>");
    return x > h ? x : h;
}

static void add_reasoning(srv_chat_out *o, const char *s, size_t n, bool new_msg) {
    if (new_msg && o->reasoning.len) srv_buf_add(&o->reasoning, "\n", 1);
    srv_buf_add(&o->reasoning, s, n);
}

/* The header between a message's start and <|message|>: channel and recipient. */
static void harmony_header(const char *h, size_t n, const char **ch, size_t *ch_len, const char **to, size_t *to_len) {
    *ch = *to = NULL;
    *ch_len = *to_len = 0;
    const char *c = find(h, n, 0, "<|channel|>");
    if (c) {
        size_t i = (size_t)(c - h) + 11, j = i;
        while (j < n && !is_ws(h[j]) && h[j] != '<') j++;
        *ch = h + i;
        *ch_len = j - i;
    }
    const char *r = find(h, n, 0, "to=");
    if (r) {
        size_t i = (size_t)(r - h) + 3, j = i;
        while (j < n && !is_ws(h[j]) && h[j] != '<') j++;
        *to = h + i;
        *to_len = j - i;
    }
}

static bool eq(const char *s, size_t n, const char *lit) { return n == strlen(lit) && !memcmp(s, lit, n); }

int srv_harmony_parse(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *o) {
    size_t p = 0;
    bool first = true;
    while (p < n) {
        /* plain text before any marker (a model that does not use channels): content */
        if (t[p] != '<' || (n - p >= 2 && t[p + 1] != '|')) {
            const char *m = find(t, n, p, "<|");
            size_t e = m ? (size_t)(m - t) : n;
            if (!m && !final) e = n - (t[n - 1] == '<' ? 1 : 0);
            srv_buf_add(&o->content, t + p, e - p);
            if (e == p) break;
            p = e;
            continue;
        }
        const char *msg = find(t, n, p, "<|message|>");
        if (!msg) {
            if (final) { /* a header cut off: nothing of the answer in it */
                if (!find(t, n, p, "<|channel|>") && !find(t, n, p, "<|start|>")) srv_buf_add(&o->content, t + p, n - p);
            }
            break;
        }
        const char *ch, *to;
        size_t chl, tol;
        harmony_header(t + p, (size_t)(msg - t) - p, &ch, &chl, &to, &tol);
        size_t b = (size_t)(msg - t) + 11, tl = 0;
        bool call = to && tol > 10 && !memcmp(to, "functions.", 10);
        /* a call's JSON object may hold a terminator's text ("<|end|>") in its strings: its
         * message ends at the first terminator after the object (none yet while it is open) */
        size_t k = b, oend = b;
        while (call && k < n && is_ws(t[k])) k++;
        const int sc = call && k < n && t[k] == '{' ? srv_args_scan(t, n, k, NULL, &oend) : -1;
        size_t e = sc == 0 ? n : harmony_body_end(t, n, sc == 1 ? oend : b, &tl);
        bool closed = e < n || tl;
        if (call) {
            size_t a0 = k < e ? k : e, a1 = e; /* k: past the body's leading whitespace */
            while (a1 > a0 && is_ws(t[a1 - 1])) a1--;
            if (!closed && !final) { /* an open call: its arguments stream as they come */
                if (cfg->tools && a0 < n && t[a0] == '{' &&
                    srv_chat_open_call(o, cfg, p, NULL, 0, to + 10, tol - 10, t, n - harmony_hold(t, n), a0))
                    return -1;
                break;
            }
            json_t *j = cfg->tools ? json_loadb(t + a0, a1 - a0, JSON_ALLOW_NUL, NULL) : NULL;
            bool obj = json_is_object(j);
            json_decref(j);
            if (obj) { /* the arguments as a stream sent them (srv_args_scan) */
                if (srv_chat_add_call_at(o, cfg, p, NULL, 0, to + 10, tol - 10, t, a1, a0)) return -1;
            } else {
                srv_buf_add(&o->content, t + b, e - b); /* not a call we can return: its text */
            }
        } else {
            size_t end = e;
            if (!closed && !final) end = n - harmony_hold(t, n);
            if (end < b) end = b;
            if (chl && eq(ch, chl, "analysis") && cfg->reasoning) add_reasoning(o, t + b, end - b, !first);
            else srv_buf_add(&o->content, t + b, end - b);
            if (!closed) break;
        }
        first = false;
        p = e + tl;
    }
    return o->content.oom || o->reasoning.oom ? -1 : 0;
}
