/* chat_out.c — the parsed chat message the output parsers fill (chat_out.h): tool calls with
 * ids derived from the request (stable across a stream and its final parse), reset and free. */
#define _GNU_SOURCE
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

int srv_chat_add_call(srv_chat_out *o, const srv_parse_cfg *cfg, const char *name, size_t name_len,
                      const char *args, size_t args_len) {
    if (!cfg->parallel && o->n_calls) return 0;
    if (o->n_calls == o->cap_calls) {
        size_t cap = o->cap_calls ? 2 * o->cap_calls : 4;
        srv_tool_call *c = realloc(o->calls, cap * sizeof *c);
        if (!c) return -1;
        o->calls = c;
        o->cap_calls = cap;
    }
    char id[32];
    srv_chat_call_id(cfg, o->n_calls, id);
    srv_tool_call *c = &o->calls[o->n_calls];
    c->id = strdup(id);
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

void srv_chat_out_reset(srv_chat_out *o) {
    for (size_t i = 0; i < o->n_calls; i++) {
        free(o->calls[i].id);
        free(o->calls[i].name);
        free(o->calls[i].arguments);
    }
    o->n_calls = 0;
    o->open = false;
    o->open_at = o->open_name.len = o->open_args.len = 0;
    o->open_name.oom = o->open_args.oom = false;
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
    memset(o, 0, sizeof *o);
}
