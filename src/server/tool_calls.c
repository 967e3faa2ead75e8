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

/* ---- results ------------------------------------------------------------------------------- */

/* {"name": ..., "arguments"|"parameters": ...} as a call; false when it is not one. The
 * arguments go out as compact JSON text (a string value is taken as the text itself). */
static bool add_json_call(srv_chat_out *o, const srv_parse_cfg *cfg, json_t *j, const char *id, int *err) {
    if (!json_is_object(j)) return false;
    json_t *name = json_object_get(j, "name");
    json_t *args = json_object_get(j, "arguments");
    if (!args) args = json_object_get(j, "parameters");
    if (!json_is_string(name) || json_string_length(name) == 0) return false;
    char *text = NULL;
    if (!args || json_is_null(args)) text = strdup("{}");
    else if (json_is_string(args)) { /* JSON text in a string: only when it is an object */
        json_t *in = json_loads(json_string_value(args), 0, NULL);
        bool obj = json_is_object(in);
        json_decref(in);
        if (!obj) return false;
        text = strdup(json_string_value(args));
    }
    else if (json_is_object(args)) text = json_dumps(args, JSON_COMPACT);
    else return false;
    if (!text) {
        *err = -1;
        return true;
    }
    size_t before = o->n_calls;
    if (srv_chat_add_call(o, cfg, json_string_value(name), json_string_length(name), text, strlen(text))) *err = -1;
    else if (id && o->n_calls > before) {
        char *d = strdup(id);
        if (d) {
            free(o->calls[before].id);
            o->calls[before].id = d;
        }
    }
    free(text);
    return true;
}

/* ---- Hermes / Qwen: <tool_call>{json}</tool_call> ------------------------------------------ */

/* Walks the JSON object at t[i] ('{'), appending its text less the whitespace outside strings
 * to out. Returns the index just past its closing brace (*done), or where the text ends or
 * where the first byte JSON cannot have stands (*bad; nothing from it on is appended). Only the
 * bytes are checked, not the grammar: the final parse (jansson) judges the whole. */
static size_t obj_scan(const char *t, size_t n, size_t i, srv_buf *out, bool *done, bool *bad) {
    char stack[64];
    int depth = 0;
    bool in_str = false, esc = false;
    *done = *bad = false;
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
            if (depth == (int)sizeof stack) break;
            stack[depth++] = ch == '{' ? '}' : ']';
        } else if (ch == '}' || ch == ']') {
            if (!depth || stack[depth - 1] != (char)ch) break;
            depth--;
        } else if (ch == '"') {
            in_str = true;
        } else if (!strchr(":,-+.0123456789eEtrufalsn", ch) || !ch) {
            break;
        }
        srv_buf_add(out, t + i, 1);
        if (!depth) {
            *done = true;
            return i + 1;
        }
    }
    *bad = i < n;
    return i;
}

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

/* The call a Hermes block t[0..n) (the JSON after <tool_call>) is writing, as far as it goes:
 * {"name": "...", "arguments": {... in that order (how Qwen and Hermes write them). Puts the name
 * in *name and the arguments object's text so far, less the whitespace outside strings, in
 * *args; true once the name is whole and the object has begun with no byte JSON cannot have
 * (*done: the object is closed). Anything else (other keys first, escapes in the name, arguments
 * as a string) is false: such calls go out whole once they parse. */
static bool hermes_walk(const char *t, size_t n, srv_buf *name, srv_buf *args, bool *done) {
    size_t i = 0;
    bool named = false;
    *done = false;
    while (i < n && is_ws(t[i])) i++;
    if (i == n || t[i++] != '{') return false;
    for (;;) {
        while (i < n && is_ws(t[i])) i++;
        if (i == n || t[i] != '"') return false;
        size_t k0 = ++i;
        while (i < n && t[i] != '"' && t[i] != '\\') i++;
        if (i == n || t[i] != '"') return false;
        size_t k1 = i++;
        while (i < n && is_ws(t[i])) i++;
        if (i == n || t[i++] != ':') return false;
        while (i < n && is_ws(t[i])) i++;
        if (i == n) return false;
        if (!named && k1 - k0 == 4 && !memcmp(t + k0, "name", 4)) {
            if (t[i] != '"') return false;
            size_t v0 = ++i;
            while (i < n && t[i] != '"' && t[i] != '\\' && (unsigned char)t[i] >= 0x20) i++;
            if (i == n || t[i] != '"' || i == v0) return false;
            srv_buf_add(name, t + v0, i - v0);
            named = true;
            i++;
            while (i < n && is_ws(t[i])) i++;
            if (i == n || t[i++] != ',') return false;
            continue;
        }
        if (!named || k1 - k0 != 9 || memcmp(t + k0, "arguments", 9) || t[i] != '{') return false;
        bool bad;
        obj_scan(t, n, i, args, done, &bad);
        if (bad) return false;
        args->len -= utf8_cut(args->p, args->len); /* a character split across tokens waits */
        if (args->p) args->p[args->len] = 0;
        return !name->oom && !args->oom;
    }
}

/* A parsed Hermes call's arguments as the model wrote them, less insignificant whitespace, when
 * they are the same JSON as jansson's compact text: what a stream sent of them is then a prefix. */
static void hermes_raw_args(const char *t, size_t n, srv_tool_call *c) {
    srv_buf name = {0}, args = {0};
    bool done;
    if (hermes_walk(t, n, &name, &args, &done) && done) {
        json_t *a = json_loadb(args.p, args.len, 0, NULL), *b = json_loads(c->arguments, 0, NULL);
        char *d = a && b && json_equal(a, b) ? srv_dupn(args.p, args.len) : NULL;
        if (d) {
            free(c->arguments);
            c->arguments = d;
        }
        json_decref(a);
        json_decref(b);
    }
    srv_buf_free(&name);
    srv_buf_free(&args);
}

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
        size_t j0 = bi + strlen(OPEN);
        const char *c = find(t, n, j0, CLOSE);
        if (!c && !final) { /* an open call: wait for its end, and say how far it has come */
            bool done;
            if (cfg->parallel || !o->n_calls)
                o->open = hermes_walk(t + j0, n - j0, &o->open_name, &o->open_args, &done);
            o->open_at = bi;
            break;
        }
        size_t j1 = c ? (size_t)(c - t) : n, after = c ? j1 + strlen(CLOSE) : n;
        json_error_t je;
        json_t *j = json_loadb(t + j0, j1 - j0, 0, &je);
        size_t before = o->n_calls;
        if (!add_json_call(o, cfg, j, NULL, &err)) srv_buf_add(&o->content, t + bi, after - bi);
        else if (!err && o->n_calls > before) hermes_raw_args(t + j0, j1 - j0, &o->calls[before]);
        json_decref(j);
        p = after;
    }
    return err;
}

/* ---- Llama 3.x: the answer is a JSON call (or several, ';'-separated), maybe after <|python_tag|> */

static int parse_llama3(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *o) {
    static const char TAG[] = "<|python_tag|>";
    size_t i = 0;
    while (i < n && is_ws(t[i])) i++;
    bool tag = starts(t, n, i, TAG);
    bool maybe = i == n || t[i] == '{' || tag || (n - i < strlen(TAG) && !memcmp(t + i, TAG, n - i));
    if (!maybe) {
        srv_buf_add(&o->content, t, n); /* plain text: streamed as it comes */
        return 0;
    }
    if (!final) return 0; /* a call or the start of one: decided at the end */
    size_t p = tag ? i + strlen(TAG) : i;
    int err = 0;
    srv_chat_out tmp = {0};
    bool ok = true;
    size_t count = 0;
    while (ok && !err) {
        while (p < n && (is_ws(t[p]) || t[p] == ';')) p++;
        if (p == n) break;
        json_error_t je;
        json_t *j = json_loadb(t + p, n - p, JSON_DISABLE_EOF_CHECK, &je);
        if (!j) {
            ok = false;
            break;
        }
        p += (size_t)je.position;
        ok = add_json_call(&tmp, cfg, j, NULL, &err);
        json_decref(j);
        count++;
    }
    if (ok && count && !err) { /* all calls: move them over */
        for (size_t k = 0; k < tmp.n_calls && !err; k++)
            err = srv_chat_add_call(o, cfg, tmp.calls[k].name, strlen(tmp.calls[k].name), tmp.calls[k].arguments,
                                    strlen(tmp.calls[k].arguments));
    } else {
        srv_buf_add(&o->content, t, n);
    }
    srv_chat_out_free(&tmp);
    return err;
}

/* ---- Mistral: [TOOL_CALLS][{...}, ...] or [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} ----------- */

static bool mistral_calls(const srv_parse_cfg *cfg, const char *t, size_t n, size_t p, srv_chat_out *o, int *err) {
    static const char TC[] = "[TOOL_CALLS]";
    size_t any = 0;
    for (;;) {
        while (p < n && is_ws(t[p])) p++;
        if (p == n) return any > 0;
        if (starts(t, n, p, TC)) {
            p += strlen(TC);
            continue;
        }
        json_error_t je;
        if (t[p] == '[' && !starts(t, n, p, "[ARGS]")) { /* a JSON list of calls */
            json_t *a = json_loadb(t + p, n - p, JSON_DISABLE_EOF_CHECK, &je);
            if (!json_is_array(a) || !json_array_size(a)) {
                json_decref(a);
                return false;
            }
            p += (size_t)je.position;
            size_t k;
            json_t *c;
            json_array_foreach(a, k, c) {
                json_t *id = json_object_get(c, "id");
                if (!add_json_call(o, cfg, c, json_is_string(id) ? json_string_value(id) : NULL, err)) {
                    json_decref(a);
                    return false;
                }
            }
            json_decref(a);
            any++;
            continue;
        }
        const char *ar = find(t, n, p, "[ARGS]");
        if (!ar) return false;
        size_t ne = (size_t)(ar - t);
        const char *ci = find(t, ne, p, "[CALL_ID]");
        size_t name_end = ci ? (size_t)(ci - t) : ne;
        size_t a = p, b = name_end;
        while (b > a && is_ws(t[b - 1])) b--;
        if (b == a) return false;
        for (size_t k = a; k < b; k++)
            if (t[k] == '[' || t[k] == '{' || is_ws(t[k])) return false;
        p = ne + strlen("[ARGS]");
        json_t *args = json_loadb(t + p, n - p, JSON_DISABLE_EOF_CHECK, &je);
        if (!json_is_object(args)) {
            json_decref(args);
            return false;
        }
        size_t j0 = p;
        p += (size_t)je.position;
        size_t before = o->n_calls;
        if (srv_chat_add_call(o, cfg, t + a, b - a, t + j0, p - j0)) *err = -1;
        if (ci && o->n_calls > before) {
            size_t i0 = (size_t)(ci - t) + strlen("[CALL_ID]"), i1 = ne;
            while (i1 > i0 && is_ws(t[i1 - 1])) i1--;
            char *d = srv_dupn(t + i0, i1 - i0);
            if (d) {
                free(o->calls[before].id);
                o->calls[before].id = d;
            }
        }
        json_decref(args);
        any++;
    }
}

static int parse_mistral(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *o) {
    static const char TC[] = "[TOOL_CALLS]";
    const char *m = find(t, n, 0, TC);
    if (!m) {
        size_t e = final ? n : n - srv_marker_tail(t, n, TC);
        srv_buf_add(&o->content, t, e);
        return 0;
    }
    size_t mi = (size_t)(m - t);
    srv_buf_add(&o->content, t, mi);
    if (!final) return 0; /* the calls run to the end of the answer */
    int err = 0;
    srv_chat_out tmp = {0};
    bool ok = mistral_calls(cfg, t, n, mi, &tmp, &err);
    if (ok && !err) {
        for (size_t k = 0; k < tmp.n_calls && !err; k++) {
            size_t before = o->n_calls;
            err = srv_chat_add_call(o, cfg, tmp.calls[k].name, strlen(tmp.calls[k].name), tmp.calls[k].arguments,
                                    strlen(tmp.calls[k].arguments));
            if (!err && o->n_calls > before) { /* keep the model's own id */
                char *d = strdup(tmp.calls[k].id);
                if (d) {
                    free(o->calls[before].id);
                    o->calls[before].id = d;
                }
            }
        }
    } else {
        srv_buf_add(&o->content, t + mi, n - mi);
    }
    srv_chat_out_free(&tmp);
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
 * parsed (or its end when it died), calls that parsed whole, then the open call's new bytes. */
static int stream_parts(srv_chat_stream *s, srv_chat_delta *d) {
    const srv_chat_out *o = &s->cur;
    d->parts = s->parts;
    size_t k = s->sent_calls;
    int err = 0;
    if (s->head_sent && o->n_calls > k) { /* it parsed: the rest of its arguments */
        const char *a = o->calls[k].arguments;
        size_t al = strlen(a);
        /* never the case while the walk and jansson agree; else nothing more can be fixed */
        size_t sent = s->sent_args.len;
        if (al > sent && (!sent || !memcmp(a, s->sent_args.p, sent)))
            err |= add_part(s, d, k + s->dead, NULL, NULL, a + sent, al - sent);
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
            s->head_sent = true;
            s->head_at = o->open_at;
            s->sent_args.len = 0;
            srv_chat_call_id(&s->cfg, o->n_calls, s->head_id);
            err |= add_part(s, d, idx, s->head_id, o->open_name.p, NULL, 0);
        }
        size_t sent = s->sent_args.len;
        if (o->open_args.len > sent) {
            err |= add_part(s, d, idx, NULL, NULL, o->open_args.p + sent, o->open_args.len - sent);
            srv_buf_add(&s->sent_args, o->open_args.p + sent, o->open_args.len - sent);
        }
    }
    return err || s->sent_args.oom ? -1 : 0;
}

int srv_chat_stream_feed(srv_chat_stream *s, const char *t, size_t n, bool final, srv_chat_delta *d) {
    memset(d, 0, sizeof *d);
    if (srv_chat_parse(&s->cfg, t, n, final, &s->cur)) return -1;
    if (s->head_sent && s->cur.n_calls <= s->sent_calls &&
        (!s->cur.open || s->cur.open_at != s->head_at)) {
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
    srv_chat_out_free(&s->cur);
    memset(s, 0, sizeof *s);
}
