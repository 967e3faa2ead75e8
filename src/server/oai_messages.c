/* oai_messages.c — Anthropic's Messages API (POST /v1/messages) on the chat path: the request
 * checked in Anthropic's terms and translated into a chat/completions body, Anthropic-shaped
 * errors, and Anthropic's stop reasons. The answer is built in server_out_messages.c. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "oai.h"
#include "oai_translate.h"

const char *srv_anthropic_error_type(int status) {
    switch (status) {
    case 400:
    case 405:
    case 415: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *srv_anthropic_error_json(const srv_error *e) {
    json_t *in = json_object();
    if (!in) return NULL;
    json_object_set_new(in, "type", json_string(srv_anthropic_error_type(e->status)));
    json_object_set_new(in, "message", srv_json_bytes(e->message, strlen(e->message)));
    json_t *o = json_pack("{ssso}", "type", "error", "error", in);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

const char *srv_anthropic_stop_reason(rf_finish_reason f) {
    switch (f) {
    case RF_FINISH_STOP: return "stop_sequence";
    case RF_FINISH_LENGTH: return "max_tokens";
    case RF_FINISH_CONTEXT: return "model_context_window_exceeded";
    default: return "end_turn";
    }
}

/* Text of a string or a list of blocks, joined with "\n" (as chat's text parts are). Blocks
 * other than text are refused by name, except thinking blocks of earlier assistant turns,
 * which are dropped (agents send them back; the template has no place for them). */
static int blocks_text(json_t *c, const char *param, bool system, json_t **out, srv_error *e) {
    if (json_is_string(c)) {
        *out = json_incref(c);
        return 0;
    }
    if (!json_is_array(c))
        return srv_tr_bad(e, param, "'%s' must be a string or a list of content blocks, not %s", param, srv_tr_type_name(c));
    srv_buf b = {0};
    bool any = false;
    char pp[96];
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *blk = json_array_get(c, i);
        snprintf(pp, sizeof pp, "%s[%zu]", param, i);
        if (!json_is_object(blk)) {
            srv_buf_free(&b);
            return srv_tr_bad(e, pp, "'%s' must be a content block object, not %s", pp, srv_tr_type_name(blk));
        }
        json_t *ty = json_object_get(blk, "type");
        if (!json_is_string(ty)) {
            srv_buf_free(&b);
            return srv_tr_bad(e, pp, "'%s.type' must be a string", pp);
        }
        const char *t = json_string_value(ty);
        if (!system && (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking"))) continue;
        if (strcmp(t, "text")) {
            srv_buf_free(&b);
            if (!strcmp(t, "tool_use") || !strcmp(t, "tool_result"))
                return srv_tr_bad(e, pp, "content blocks of type '%s' are not supported by this server yet (no tool use on /v1/messages)", t);
            return srv_tr_bad(e, pp, "content blocks of type '%.40s' are not supported by this server (%s)", t,
                              system ? "'system' takes text blocks" : "only text, and thinking blocks which are dropped");
        }
        json_t *tx = json_object_get(blk, "text");
        if (!json_is_string(tx)) {
            srv_buf_free(&b);
            return srv_tr_bad(e, pp, "'%s.text' must be a string, not %s", pp, srv_tr_type_name(tx));
        }
        if (any) srv_buf_add(&b, "\n", 1);
        srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
        any = true;
    }
    if (b.oom) {
        srv_buf_free(&b);
        return srv_tr_oom(e);
    }
    *out = json_stringn(b.p ? b.p : "", b.len);
    srv_buf_free(&b);
    return *out ? 0 : srv_tr_oom(e);
}

static int add_msg(json_t *msgs, const char *role, json_t *content, srv_error *e) {
    json_t *m = json_object();
    if (!m || !content) {
        json_decref(m);
        json_decref(content);
        return srv_tr_oom(e);
    }
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", content);
    return json_array_append_new(msgs, m) ? srv_tr_oom(e) : 0;
}

static int read_messages(json_t *root, json_t *msgs, srv_error *e) {
    json_t *sys = json_object_get(root, "system");
    if (srv_tr_present(sys)) {
        json_t *t = NULL;
        if (blocks_text(sys, "system", true, &t, e)) return -1;
        if (add_msg(msgs, "system", t, e)) return -1;
    }
    json_t *ms = json_object_get(root, "messages");
    if (!srv_tr_present(ms)) return srv_tr_bad(e, "messages", "'messages' is required");
    if (!json_is_array(ms)) return srv_tr_bad(e, "messages", "'messages' must be an array, not %s", srv_tr_type_name(ms));
    if (json_array_size(ms) == 0) return srv_tr_bad(e, "messages", "'messages' must not be empty");
    if (json_array_size(ms) > SRV_MAX_MESSAGES)
        return srv_tr_bad(e, "messages", "'messages' has %zu entries; at most %d", json_array_size(ms), SRV_MAX_MESSAGES);
    char pp[64];
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *m = json_array_get(ms, i);
        snprintf(pp, sizeof pp, "messages[%zu]", i);
        if (!json_is_object(m)) return srv_tr_bad(e, pp, "'%s' must be an object, not %s", pp, srv_tr_type_name(m));
        json_t *ro = json_object_get(m, "role");
        snprintf(pp, sizeof pp, "messages[%zu].role", i);
        if (!json_is_string(ro)) return srv_tr_bad(e, pp, "'%s' must be a string ('user' or 'assistant'), not %s", pp, srv_tr_type_name(ro));
        const char *r = json_string_value(ro);
        if (strcmp(r, "user") && strcmp(r, "assistant"))
            return srv_tr_bad(e, pp, "'%s': unknown role '%.40s' (expected 'user' or 'assistant'; the system prompt is the top-level 'system')", pp, r);
        snprintf(pp, sizeof pp, "messages[%zu].content", i);
        json_t *c = json_object_get(m, "content"), *t = NULL;
        if (!srv_tr_present(c)) return srv_tr_bad(e, pp, "'%s' is required", pp);
        if (blocks_text(c, pp, false, &t, e)) return -1;
        if (add_msg(msgs, r, t, e)) return -1;
    }
    return 0;
}

/* A number in [lo, hi] when present. */
static int check_num(json_t *root, const char *key, double lo, double hi, srv_error *e) {
    json_t *v = json_object_get(root, key);
    if (!srv_tr_present(v)) return 0;
    if (!json_is_number(v)) return srv_tr_bad(e, key, "'%s' must be a number, not %s", key, srv_tr_type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return srv_tr_bad(e, key, "'%s' must be in [%g, %g] (got %g)", key, lo, hi, d);
    return 0;
}

static int translate(json_t *root, json_t *chat, srv_error *e) {
    json_t *v = json_object_get(root, "max_tokens");
    if (!srv_tr_present(v)) return srv_tr_bad(e, "max_tokens", "'max_tokens' is required");
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return srv_tr_bad(e, "max_tokens", "'max_tokens' must be an integer >= 1");
    json_object_set(chat, "max_tokens", v);
    if (check_num(root, "temperature", 0, 1, e) || check_num(root, "top_p", 0, 1, e)) return -1;
    v = json_object_get(root, "top_k");
    if (srv_tr_present(v) && (!json_is_integer(v) || json_integer_value(v) < 0))
        return srv_tr_bad(e, "top_k", "'top_k' must be an integer >= 0");
    v = json_object_get(root, "stop_sequences");
    if (srv_tr_present(v)) {
        if (!json_is_array(v)) return srv_tr_bad(e, "stop_sequences", "'stop_sequences' must be a list of strings, not %s", srv_tr_type_name(v));
        if (json_array_size(v) > SRV_MAX_STOP)
            return srv_tr_bad(e, "stop_sequences", "'stop_sequences' has %zu strings; at most %d", json_array_size(v), SRV_MAX_STOP);
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_string(json_array_get(v, i)))
                return srv_tr_bad(e, "stop_sequences", "'stop_sequences'[%zu] must be a string", i);
        json_object_set(chat, "stop", v);
    }
    v = json_object_get(root, "tools");
    if (srv_tr_present(v) && !(json_is_array(v) && json_array_size(v) == 0))
        return srv_tr_bad(e, "tools", "'tools' (tool use) is not supported on /v1/messages by this server yet");
    v = json_object_get(root, "stream");
    if (srv_tr_present(v) && !json_is_boolean(v)) return srv_tr_bad(e, "stream", "'stream' must be a boolean, not %s", srv_tr_type_name(v));
    v = json_object_get(root, "model");
    if (srv_tr_present(v) && !json_is_string(v)) return srv_tr_bad(e, "model", "'model' must be a string, not %s", srv_tr_type_name(v));
    srv_tr_copy(chat, "model", root, "model");
    srv_tr_copy(chat, "stream", root, "stream");
    srv_tr_copy(chat, "temperature", root, "temperature");
    srv_tr_copy(chat, "top_p", root, "top_p");
    srv_tr_copy(chat, "top_k", root, "top_k");
    json_t *msgs = json_array();
    if (!msgs) return srv_tr_oom(e);
    json_object_set_new(chat, "messages", msgs);
    return read_messages(root, msgs, e);
}

int srv_parse_messages(const char *body, size_t len, srv_params *p, srv_error *e) {
    memset(p, 0, sizeof *p);
    json_t *root = srv_tr_load(body, len, e);
    if (!root) return -1;
    json_t *chat = json_object();
    if (!chat) {
        json_decref(root);
        return srv_tr_oom(e);
    }
    int rc = translate(root, chat, e);
    json_decref(root);
    if (rc) {
        json_decref(chat);
        return -1;
    }
    return srv_tr_parse_chat(chat, SRV_API_MESSAGES, p, e);
}
