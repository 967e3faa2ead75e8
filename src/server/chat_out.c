/* chat_out.c — the parsed chat message the output parsers fill (chat_out.h): tool calls with
 * ids derived from the request (stable across a stream and its final parse), reset and free. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "chat_out.h"

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

char *srv_dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

void srv_chat_call_id(const srv_parse_cfg *cfg, size_t index, char id[32]) {
    static const char AL[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t h = mix64(cfg->id_seed ^ mix64(index + cfg->id_skip + 1));
    if (cfg->syntax == SRV_SYNTAX_MISTRAL) {
        for (int i = 0; i < 9; i++, h /= 62) id[i] = AL[h % 62];
        id[9] = 0;
    } else {
        uint64_t h2 = mix64(h);
        memcpy(id, "call_", 5);
        for (int i = 0; i < 24; i++) {
            uint64_t *src = i < 12 ? &h : &h2;
            id[5 + i] = AL[*src % 62];
            *src /= 62;
        }
        id[29] = 0;
    }
}

int srv_chat_add_call(srv_chat_out *o, const srv_parse_cfg *cfg, size_t at, const char *id, size_t id_len,
                      const char *name, size_t name_len, const char *args, size_t args_len) {
    if (!cfg->parallel && o->n_calls) return 0;
    if (o->n_calls == o->cap_calls) {
        size_t cap = o->cap_calls ? 2 * o->cap_calls : 4;
        srv_tool_call *c = realloc(o->calls, cap * sizeof *c);
        if (!c) return -1;
        o->calls = c;
        o->cap_calls = cap;
    }
    char gen[32];
    srv_chat_call_id(cfg, o->n_calls, gen);
    srv_tool_call *c = &o->calls[o->n_calls];
    c->id = id ? srv_dupn(id, id_len) : strdup(gen);
    c->at = at;
    c->name = srv_dupn(name, name_len);
    c->arguments = srv_dupn(args, args_len);
    if (!c->id || !c->name || !c->arguments) {
        free(c->id);
        free(c->name);
        free(c->arguments);
        return -1;
    }
    o->n_calls++;
    return 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Bytes at the end of s[0..n) that begin a UTF-8 sequence the text has not finished. */
static size_t utf8_cut(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

int srv_args_scan(const char *t, size_t n, size_t i, srv_buf *out, size_t *end) {
    /* jansson's own depth limit: deeper text fails its parse too, so -1 says the same */
    char stack[2048];
    size_t depth = 0, from = out ? out->len : 0;
    bool in_str = false, esc = false;
    int r = 0;
    for (; i < n; i++) {
        unsigned char ch = (unsigned char)t[i];
        if (in_str) {
            if (ch < 0x20) break;
            if (esc) esc = false;
            else if (ch == '\\') esc = true;
            else if (ch == '"') in_str = false;
        } else if (is_ws((char)ch)) {
            continue;
        } else if (ch == '{' || ch == '[') {
            if (depth == sizeof stack || (!depth && ch != '{')) break;
            stack[depth++] = ch == '{' ? '}' : ']';
        } else if (ch == '}' || ch == ']') {
            if (!depth || stack[depth - 1] != (char)ch) break;
            depth--;
        } else if (ch == '"') {
            in_str = true;
        } else if (!depth || !ch || !strchr(":,-+.0123456789eEtrufalsn", ch)) {
            break;
        }
        if (out) srv_buf_add(out, t + i, 1);
        if (!depth) {
            r = 1;
            i++;
            break;
        }
    }
    if (!r && i < n) r = -1;
    *end = i;
    if (out && r == 0) { /* a character split across tokens waits */
        size_t cut = utf8_cut(out->p + from, out->len - from);
        out->len -= cut;
        if (out->p) out->p[out->len] = 0;
    }
    return r;
}

int srv_chat_add_call_at(srv_chat_out *o, const srv_parse_cfg *cfg, size_t at, const char *id, size_t id_len,
                         const char *name, size_t name_len, const char *t, size_t n, size_t args_at) {
    srv_buf a = {0};
    size_t end;
    int err;
    if (srv_args_scan(t, n, args_at, &a, &end) == 1) err = a.oom ? -1 : srv_chat_add_call(o, cfg, at, id, id_len, name, name_len, a.p, a.len);
    else /* nested past the scan's depth where jansson still parsed it: the text as written */
        err = srv_chat_add_call(o, cfg, at, id, id_len, name, name_len, t + args_at, n - args_at);
    srv_buf_free(&a);
    return err;
}

int srv_chat_open_call(srv_chat_out *o, const srv_parse_cfg *cfg, size_t at, const char *id, size_t id_len,
                       const char *name, size_t name_len, const char *t, size_t n, size_t args_at) {
    if (!cfg->parallel && o->n_calls) return 0;
    size_t end;
    o->open_args.len = 0;
    if (srv_args_scan(t, n, args_at, &o->open_args, &end) < 0) return 0;
    o->open_name.len = o->open_id.len = 0;
    srv_buf_add(&o->open_name, name, name_len);
    srv_buf_add(&o->open_id, id, id ? id_len : 0);
    srv_buf_add(&o->open_args, "", 0); /* never NULL */
    o->open = true;
    o->open_at = at;
    return o->open_name.oom || o->open_id.oom || o->open_args.oom ? -1 : 0;
}

void srv_chat_out_reset(srv_chat_out *o) {
    for (size_t i = 0; i < o->n_calls; i++) {
        free(o->calls[i].id);
        free(o->calls[i].name);
        free(o->calls[i].arguments);
    }
    o->n_calls = 0;
    o->open = false;
    o->open_at = o->open_name.len = o->open_args.len = o->open_id.len = 0;
    o->open_name.oom = o->open_args.oom = o->open_id.oom = false;
    o->reasoning.len = o->content.len = 0;
    o->reasoning.oom = o->content.oom = false;
    if (o->reasoning.p) o->reasoning.p[0] = 0;
    if (o->content.p) o->content.p[0] = 0;
}

void srv_chat_out_free(srv_chat_out *o) {
    if (!o) return;
    srv_chat_out_reset(o);
    free(o->calls);
    srv_buf_free(&o->reasoning);
    srv_buf_free(&o->content);
    srv_buf_free(&o->open_name);
    srv_buf_free(&o->open_args);
    srv_buf_free(&o->open_id);
    memset(o, 0, sizeof *o);
}
