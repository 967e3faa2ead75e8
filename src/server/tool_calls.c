/* tool_calls.c — tool calls in a model's text, per template family (tool_calls.h): Hermes/Qwen
 * `<tool_call>` blocks, Llama 3.x JSON answers, Mistral `[TOOL_CALLS]`; harmony is in
 * reasoning.c. Also the streaming differ and the OpenAI `tool_calls` JSON. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_calls.h"

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static const char *find(const char *t, size_t n, size_t from, const char *needle) {
    size_t k = strlen(needle);
    if (from > n || n - from < k) return NULL;
    return memmem(t + from, n - from, needle, k);
}

static bool starts(const char *t, size_t n, size_t at, const char *lit) {
    size_t k = strlen(lit);
    return at <= n && n - at >= k && !memcmp(t + at, lit, k);
}

srv_tool_syntax srv_tool_syntax_detect(const char *src, bool *thinks) {
    if (thinks) *thinks = src && strstr(src, "<think>");
    if (!src) return SRV_SYNTAX_NONE;
    if (strstr(src, "<|channel|>")) return SRV_SYNTAX_HARMONY;
    if (strstr(src, "[TOOL_CALLS]")) return SRV_SYNTAX_MISTRAL;
    if (strstr(src, "<tool_call>")) return SRV_SYNTAX_HERMES;
    if (strstr(src, "<|python_tag|>") || strstr(src, "<|start_header_id|>")) return SRV_SYNTAX_LLAMA3;
    if (strstr(src, "<|im_start|>")) return SRV_SYNTAX_HERMES; /* ChatML: Hermes is its tool format */
    return SRV_SYNTAX_NONE;
}

const char *srv_tool_syntax_name(srv_tool_syntax s) {
    switch (s) {
    case SRV_SYNTAX_HERMES: return "hermes";
    case SRV_SYNTAX_LLAMA3: return "llama3-json";
    case SRV_SYNTAX_MISTRAL: return "mistral";
    case SRV_SYNTAX_HARMONY: return "harmony";
    default: return "none";
    }
}

srv_parse_cfg srv_parse_cfg_for(const srv_params *p, const char *req_id, int choice) {
    srv_parse_cfg c = {0};
    c.syntax = (srv_tool_syntax)p->syntax;
    c.tools = p->tools_json != NULL;
    c.reasoning = p->reasoning_split;
    c.think_open = p->think_open;
    c.parallel = p->parallel_tool_calls;
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the request id, then the choice */
    for (const char *k = req_id ? req_id : ""; *k; k++) h = (h ^ (unsigned char)*k) * 1099511628211ull;
    c.id_seed = h ^ (uint64_t)choice;
    return c;
}

/* ---- calls as JSON objects: {"name": ..., "arguments"|"parameters": ...} --------------------
 * (Hermes blocks, Llama 3.x answers, Mistral lists) */

/* Skips whitespace, "key", whitespace, ':' and whitespace at t[*i] when the key is lit. */
static bool key_is(const char *t, size_t n, size_t *i, const char *lit) {
    size_t j = *i, k = strlen(lit);
    while (j < n && is_ws(t[j])) j++;
    if (!starts(t, n, j, "\"") || !starts(t, n, j + 1, lit) || !starts(t, n, j + 1 + k, "\"")) return false;
    j += k + 2;
    while (j < n && is_ws(t[j])) j++;
    if (j == n || t[j] != ':') return false;
    j++;
    while (j < n && is_ws(t[j])) j++;
    *i = j;
    return true;
}

/* Whether the object at t[i] (after whitespace) begins {"name": "NAME", "arguments"|"parameters":
 * { — the order models write: then the name, with no escapes, is t[*n0..*n1) and the arguments
 * object starts at *args_at, and a stream can send the call in pieces. A call written otherwise
 * (other keys first, escapes in the name, arguments as a string) goes out whole once it parses. */
static bool call_head(const char *t, size_t n, size_t i, size_t *n0, size_t *n1, size_t *args_at) {
    while (i < n && is_ws(t[i])) i++;
    if (i == n || t[i++] != '{' || !key_is(t, n, &i, "name") || i == n || t[i] != '"') return false;
    size_t v0 = ++i;
    while (i < n && t[i] != '"' && t[i] != '\\' && (unsigned char)t[i] >= 0x20) i++;
    if (i == n || t[i] != '"' || i == v0) return false;
    *n0 = v0;
    *n1 = i++;
    while (i < n && is_ws(t[i])) i++;
    if (i == n || t[i++] != ',') return false;
    if (!key_is(t, n, &i, "arguments") && !key_is(t, n, &i, "parameters")) return false;
    if (i == n || t[i] != '{') return false;
    *args_at = i;
    return true;
}

/* The JSON call object in t[p..e) (whitespace around it allowed), starting at `at` in the answer,
 * added to o (id: the model's, NULL: derived). False when it is no call: not an object, no name,
 * arguments neither an object nor an object's JSON text in a string, or, written as call_head
 * reads it, a key repeated so that jansson's call is not the one a stream sent (the stream's
 * call then dies, as one that does not parse). Its arguments are the text a stream sends
 * (srv_args_scan) when it has an arguments object, else jansson's compact text. */
static bool json_call(srv_chat_out *o, const srv_parse_cfg *cfg, const char *t, size_t p, size_t e, size_t at, int *err) {
    json_t *j = json_loadb(t + p, e - p, JSON_ALLOW_NUL, NULL); /* \u0000 is JSON */
    json_t *name = json_object_get(j, "name"), *args = json_object_get(j, "arguments");
    if (!args) args = json_object_get(j, "parameters");
    bool ok = json_is_string(name) && json_string_length(name) > 0;
    size_t nl = ok ? json_string_length(name) : 0, n0, n1, a;
    if (ok && call_head(t, e, p, &n0, &n1, &a)) { /* what a stream sent must be what parsed */
        ok = json_is_object(args) && n1 - n0 == nl && !memcmp(t + n0, json_string_value(name), nl);
        srv_buf raw = {0};
        size_t end;
        if (ok) ok = srv_args_scan(t, e, a, &raw, &end) == 1;
        json_t *r = ok ? json_loadb(raw.p, raw.len, JSON_ALLOW_NUL, NULL) : NULL;
        ok = ok && json_equal(r, args);
        json_decref(r);
        if (ok && srv_chat_add_call(o, cfg, at, NULL, 0, json_string_value(name), nl, raw.p, raw.len)) *err = -1;
        if (raw.oom) *err = -1;
        srv_buf_free(&raw);
    } else if (ok) {
        char *text = NULL;
        if (!args || json_is_null(args)) {
            text = strdup("{}");
        } else if (json_is_string(args)) { /* JSON text in a string: only when it is an object */
            json_t *in = json_loadb(json_string_value(args), json_string_length(args), JSON_ALLOW_NUL, NULL);
            ok = json_is_object(in);
            if (ok) text = json_dumps(in, JSON_COMPACT); /* as the docs say; and whole: the string may hold a NUL */
            json_decref(in);
        } else if (json_is_object(args)) {
            text = json_dumps(args, JSON_COMPACT);
        } else {
            ok = false;
        }
        if (ok && (!text || srv_chat_add_call(o, cfg, at, NULL, 0, json_string_value(name), nl, text, strlen(text))))
            *err = -1;
        free(text);
    }
    json_decref(j);
    return ok;
}

/* A partial parse's JSON call object at t[p], not closed yet: open when call_head reads it. */
static int json_open(srv_chat_out *o, const srv_parse_cfg *cfg, const char *t, size_t n, size_t p) {
    size_t n0, n1, a;
    return call_head(t, n, p, &n0, &n1, &a) ? srv_chat_open_call(o, cfg, p, NULL, 0, t + n0, n1 - n0, t, n, a) : 0;
}

/* A JSON call object that is one item of a sequence (Llama 3 answers, Mistral lists) at t[p]
 * ('{'): 1 when it is a call (added; *end past it), 0 when it may still become one (open, when
 * streamable), -1 when it is none (then no continuation makes it one). */
static int json_item(srv_chat_out *o, const srv_parse_cfg *cfg, const char *t, size_t n, size_t p, bool final,
                     size_t *end, int *err) {
    int st = srv_args_scan(t, n, p, NULL, end);
    if (st == 0 && !final) {
        if (json_open(o, cfg, t, n, p)) *err = -1;
        return 0;
    }
    return st == 1 && json_call(o, cfg, t, p, *end, p, err) ? 1 : -1;
}

/* ---- Hermes / Qwen: <tool_call>{json}</tool_call> ------------------------------------------ */

static int parse_hermes(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *o) {
    static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
    size_t p = 0;
    int err = 0;
    while (p < n && !err) {
        const char *b = find(t, n, p, OPEN);
        if (!b) {
            size_t e = final ? n : n - srv_marker_tail(t, n, OPEN);
            srv_buf_add(&o->content, t + p, e - p);
            break;
        }
        size_t bi = (size_t)(b - t);
        srv_buf_add(&o->content, t + p, bi - p);
        size_t j0 = bi + strlen(OPEN), k = j0, oend;
        while (k < n && is_ws(t[k])) k++;
        /* a JSON object's strings may hold "</tool_call>" as data: the block ends at the first
         * closing tag after the object (none yet while the object is open) */
        const int sc = k < n && t[k] == '{' ? srv_args_scan(t, n, k, NULL, &oend) : -1;
        const char *c = sc == 0 ? NULL : find(t, n, sc == 1 ? oend : j0, CLOSE);
        if (!c && !final) { /* an open call: wait for its end, streaming its arguments */
            size_t m = n - srv_marker_tail(t, n, CLOSE), n0, n1, a;
            if (call_head(t, m, j0, &n0, &n1, &a)) err = srv_chat_open_call(o, cfg, bi, NULL, 0, t + n0, n1 - n0, t, m, a);
            break;
        }
        size_t j1 = c ? (size_t)(c - t) : n, after = c ? j1 + strlen(CLOSE) : n;
        if (!json_call(o, cfg, t, j0, j1, bi, &err)) srv_buf_add(&o->content, t + bi, after - bi);
        p = after;
    }
    return err;
}

/* ---- Llama 3.x: the answer is a JSON call (or several, ';'-separated), maybe after <|python_tag|>.
 * The calls run from the start; the first thing that is no call ends them, and it and all after
 * it are content (all of the answer when no call came first). So a call is final once its object
 * closes, and a stream can send calls as they come. */

static int parse_llama3(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *o) {
    static const char TAG[] = "<|python_tag|>";
    size_t i = 0;
    while (i < n && is_ws(t[i])) i++;
    bool tag = starts(t, n, i, TAG);
    if (!tag && i < n && t[i] != '{') { /* plain text (streamed as it comes), or a tag begun */
        if (final || n - i >= strlen(TAG) || memcmp(t + i, TAG, n - i)) srv_buf_add(&o->content, t, n);
        return 0;
    }
    size_t p = tag ? i + strlen(TAG) : i, q = 0; /* q: where the content starts if no call follows */
    int err = 0;
    while (!err) {
        while (p < n && (is_ws(t[p]) || t[p] == ';')) p++;
        if (o->n_calls) q = p;
        if (p == n) break;
        size_t end;
        int st = t[p] == '{' ? json_item(o, cfg, t, n, p, final, &end, &err) : -1;
        if (st < 0) srv_buf_add(&o->content, t + q, n - q);
        if (st <= 0) break;
        p = end;
    }
    return err;
}

/* ---- Mistral: [TOOL_CALLS][{...}, ...] or [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} ------------
 * Calls run from the first [TOOL_CALLS] to the end of the answer; as with Llama 3, the first
 * thing that is no call ends them and is content from there on. */

/* The list at t[*p] ('['): its calls added as they close (*q: past the last one and its comma).
 * 1: the list closed (*p past it); 0: it may go on; -1: it went wrong. The model's "id"s are
 * not kept: a stream sends a call's id before its later keys are written. */
static int mistral_list(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, size_t *p, size_t *q,
                        srv_chat_out *o, int *err) {
    size_t i = *p + 1;
    for (bool first = true;; first = false) {
        while (i < n && is_ws(t[i])) i++;
        if (i < n && !first && t[i] == ']') {
            *p = i + 1;
            return 1;
        }
        if (i < n && !first) {
            if (t[i] != ',') return -1;
            i++;
            while (i < n && is_ws(t[i])) i++;
            *q = i;
        }
        if (i == n) return final ? -1 : 0;
        size_t end;
        int st = t[i] == '{' ? json_item(o, cfg, t, n, i, final, &end, err) : -1;
        if (st <= 0) return st;
        *q = i = end;
    }
}

/* name[CALL_ID]id[ARGS]{...} at t[*p]: as mistral_list. */
static int mistral_named(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, size_t *p, srv_chat_out *o,
                         int *err) {
    const char *ar = find(t, n, *p, "[ARGS]");
    if (!ar) return final ? -1 : 0;
    size_t ne = (size_t)(ar - t);
    const char *ci = find(t, ne, *p, "[CALL_ID]");
    size_t a = *p, b = ci ? (size_t)(ci - t) : ne;
    while (b > a && is_ws(t[b - 1])) b--;
    if (b == a) return -1;
    for (size_t k = a; k < b; k++)
        if (t[k] == '[' || t[k] == '{' || is_ws(t[k])) return -1;
    size_t i0 = ci ? (size_t)(ci - t) + strlen("[CALL_ID]") : 0, i1 = ne;
    while (ci && i1 > i0 && is_ws(t[i1 - 1])) i1--;
    const char *id = ci && i1 > i0 ? t + i0 : NULL; /* the model's own id */
    size_t i = ne + strlen("[ARGS]"), end;
    while (i < n && is_ws(t[i])) i++;
    if (i == n) return final ? -1 : 0;
    if (t[i] != '{') return -1;
    int st = srv_args_scan(t, n, i, NULL, &end);
    if (st == 0 && !final) {
        *err = srv_chat_open_call(o, cfg, *p, id, i1 - i0, t + a, b - a, t, n, i);
        return 0;
    }
    json_t *args = st == 1 ? json_loadb(t + i, end - i, JSON_ALLOW_NUL, NULL) : NULL;
    bool obj = json_is_object(args);
    json_decref(args);
    if (!obj) return -1;
    if (srv_chat_add_call_at(o, cfg, *p, id, i1 - i0, t + a, b - a, t, end, i)) *err = -1;
    *p = end;
    return 1;
}

static int parse_mistral(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *o) {
    static const char TC[] = "[TOOL_CALLS]";
    const char *m = find(t, n, 0, TC);
    if (!m) {
        size_t e = final ? n : n - srv_marker_tail(t, n, TC);
        srv_buf_add(&o->content, t, e);
        return 0;
    }
    size_t p = (size_t)(m - t), q = p; /* q: where the content starts if no call follows */
    srv_buf_add(&o->content, t, p);
    int err = 0;
    while (!err) {
        while (p < n && is_ws(t[p])) p++;
        if (starts(t, n, p, TC)) {
            p += strlen(TC);
            continue;
        }
        if (p == n || (!final && n - p < strlen(TC) && !memcmp(t + p, TC, n - p))) break; /* the end, or a marker begun */
        int st = t[p] == '[' && !starts(t, n, p, "[ARGS]") ? mistral_list(cfg, t, n, final, &p, &q, o, &err)
                                                           : mistral_named(cfg, t, n, final, &p, o, &err);
        if (st < 0) srv_buf_add(&o->content, t + q, n - q);
        if (st <= 0) break;
        q = p;
    }
    return err;
}

/* ---- the whole answer ---------------------------------------------------------------------- */

int srv_chat_parse(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *o) {
    srv_chat_out_reset(o);
    if (cfg->syntax == SRV_SYNTAX_HARMONY && (cfg->tools || cfg->reasoning)) return srv_harmony_parse(cfg, t, n, final, o);
    size_t r0, r1, rest = 0;
    if (cfg->reasoning && srv_think_split(t, n, cfg->think_open, final, &r0, &r1, &rest))
        srv_buf_add(&o->reasoning, t + r0, r1 - r0);
    const char *c = t + rest;
    size_t cn = n - rest;
    int err = 0;
    if (!cfg->tools) {
        srv_buf_add(&o->content, c, cn);
    } else {
        switch (cfg->syntax) {
        case SRV_SYNTAX_HERMES:
        case SRV_SYNTAX_NONE: err = parse_hermes(cfg, c, cn, final, o); break;
        case SRV_SYNTAX_LLAMA3: err = parse_llama3(cfg, c, cn, final, o); break;
        case SRV_SYNTAX_MISTRAL: err = parse_mistral(cfg, c, cn, final, o); break;
        default: srv_buf_add(&o->content, c, cn); break;
        }
    }
    /* whitespace around calls is no content */
    if (final && o->n_calls) {
        size_t k = 0;
        while (k < o->content.len && is_ws(o->content.p[k])) k++;
        if (k == o->content.len) o->content.len = 0;
        if (o->content.p) o->content.p[o->content.len] = 0;
    }
    /* partial: trailing whitespace waits (it may end the answer before a call) */
    if (!final) {
        while (o->content.len && is_ws(o->content.p[o->content.len - 1])) o->content.len--;
        if (o->content.p) o->content.p[o->content.len] = 0;
    }
    return err || o->content.oom || o->reasoning.oom ? -1 : 0;
}

json_t *srv_tool_calls_json(const srv_chat_out *o) {
    if (!o->n_calls) return NULL;
    json_t *a = json_array();
    for (size_t i = 0; a && i < o->n_calls; i++) {
        json_t *f = json_object();
        json_object_set_new(f, "name", srv_json_bytes(o->calls[i].name, strlen(o->calls[i].name)));
        json_object_set_new(f, "arguments", srv_json_bytes(o->calls[i].arguments, strlen(o->calls[i].arguments)));
        json_t *c = json_object();
        json_object_set_new(c, "id", srv_json_bytes(o->calls[i].id, strlen(o->calls[i].id)));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", f);
        json_array_append_new(a, c);
    }
    return a;
}

/* ---- streaming ------------------------------------------------------------------------------ */

static int add_part(srv_chat_stream *s, srv_chat_delta *d, size_t index, const char *id, const char *name,
                    const char *args, size_t args_len) {
    if (d->n_parts == s->cap_parts) {
        size_t cap = s->cap_parts ? 2 * s->cap_parts : 8;
        srv_call_part *p = realloc(s->parts, cap * sizeof *p);
        if (!p) return -1;
        s->parts = p;
        s->cap_parts = cap;
        d->parts = p;
    }
    s->parts[d->n_parts++] = (srv_call_part){index, id, name, args, args_len};
    return 0;
}

/* The calls' parts since the last feed (srv_chat_delta): the streamed call's rest once it
 * parsed, calls that parsed whole, then the open call's new bytes. */
static int stream_parts(srv_chat_stream *s, srv_chat_delta *d) {
    const srv_chat_out *o = &s->cur;
    d->parts = s->parts;
    size_t k = s->sent_calls;
    int err = 0;
    if (s->head_sent && o->n_calls > k) { /* it parsed (stream_head_dead said so): the rest */
        const char *a = o->calls[k].arguments;
        size_t al = strlen(a), sent = s->sent_args.len;
        /* the parsers take the arguments as srv_args_scan sends them: a prefix, always */
        if (al > sent && !memcmp(a, s->sent_args.p, sent)) err |= add_part(s, d, k + s->dead, NULL, NULL, a + sent, al - sent);
        s->head_sent = false;
        k++;
    }
    for (; k < o->n_calls; k++) {
        const srv_tool_call *c = &o->calls[k];
        err |= add_part(s, d, k + s->dead, c->id, c->name, NULL, 0);
        err |= add_part(s, d, k + s->dead, NULL, NULL, c->arguments, strlen(c->arguments));
    }
    s->sent_calls = o->n_calls;
    if (o->open) {
        size_t idx = o->n_calls + s->dead;
        if (!s->head_sent) {
            char id[32];
            srv_chat_call_id(&s->cfg, o->n_calls, id);
            s->head_sent = true;
            s->head_at = o->open_at;
            s->sent_args.len = s->head_id.len = 0;
            if (o->open_id.len) srv_buf_add(&s->head_id, o->open_id.p, o->open_id.len);
            else srv_buf_add(&s->head_id, id, strlen(id));
            srv_buf_add(&s->sent_args, "", 0);
            if (s->head_id.oom) return -1;
            err |= add_part(s, d, idx, s->head_id.p, o->open_name.p, NULL, 0);
        }
        size_t sent = s->sent_args.len;
        if (o->open_args.len > sent) {
            err |= add_part(s, d, idx, NULL, NULL, o->open_args.p + sent, o->open_args.len - sent);
            srv_buf_add(&s->sent_args, o->open_args.p + sent, o->open_args.len - sent);
        }
    }
    return err || s->sent_args.oom ? -1 : 0;
}

/* Whether the call being streamed died: it is neither the next call the parse holds (the same
 * start) nor still open. A later call may have parsed in the same feed: the start tells. */
static bool stream_head_dead(const srv_chat_stream *s) {
    const srv_chat_out *o = &s->cur;
    if (!s->head_sent) return false;
    if (o->n_calls > s->sent_calls) return o->calls[s->sent_calls].at != s->head_at;
    return !o->open || o->open_at != s->head_at;
}

int srv_chat_stream_feed(srv_chat_stream *s, const char *t, size_t n, bool final, srv_chat_delta *d) {
    memset(d, 0, sizeof *d);
    if (srv_chat_parse(&s->cfg, t, n, final, &s->cur)) return -1;
    if (stream_head_dead(s)) {
        /* the streamed call did not parse: it keeps its stream index, and the calls after it
         * take their ids from theirs (parsed again with the shift before anything is sent, or
         * a call parsed in this same feed would repeat the dead one's id) */
        s->head_sent = false;
        s->dead++;
        s->cfg.id_skip = s->dead;
        if (srv_chat_parse(&s->cfg, t, n, final, &s->cur)) return -1;
    }
    const srv_chat_out *o = &s->cur;
    /* what was sent is a prefix of what the parse now holds (partial parses only commit text
     * no continuation changes); never send less than before */
    if (o->reasoning.len > s->sent_reasoning) {
        d->reasoning = o->reasoning.p + s->sent_reasoning;
        d->reasoning_len = o->reasoning.len - s->sent_reasoning;
        s->sent_reasoning = o->reasoning.len;
    }
    if (o->content.len > s->sent_content) {
        d->content = o->content.p + s->sent_content;
        d->content_len = o->content.len - s->sent_content;
        s->sent_content = o->content.len;
    }
    return stream_parts(s, d);
}

void srv_chat_stream_free(srv_chat_stream *s) {
    if (!s) return;
    free(s->parts);
    srv_buf_free(&s->sent_args);
    srv_buf_free(&s->head_id);
    srv_chat_out_free(&s->cur);
    memset(s, 0, sizeof *s);
}
