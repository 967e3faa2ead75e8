/* oai_messages.c — Anthropic's Messages API (POST /v1/messages) on the chat path: the request
 * checked in Anthropic's terms and translated into a chat/completions body (tool_use blocks as
 * tool_calls, tool_result blocks as role "tool" messages, thinking as reasoning_content),
 * Anthropic-shaped errors, and Anthropic's stop reasons. The answer is built in server_out_messages.c. */
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

/* Text of a string or a list of text blocks (joined with "\n"): the system prompt, a tool
 * result's content. */
static int blocks_text(json_t *c, const char *param, json_t **out, srv_error *e) {
    if (json_is_string(c)) {
        *out = json_incref(c);
        return 0;
    }
    if (!json_is_array(c))
        return srv_bad(e, param, "'%s' must be a string or a list of text blocks, not %s", param, srv_json_type_name(c));
    srv_buf b = {0};
    char pp[96];
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *blk = json_array_get(c, i), *ty = json_is_object(blk) ? json_object_get(blk, "type") : NULL;
        json_t *tx = json_is_object(blk) ? json_object_get(blk, "text") : NULL;
        snprintf(pp, sizeof pp, "%s[%zu]", param, i);
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") || !json_is_string(tx)) {
            srv_buf_free(&b);
            return srv_bad(e, pp, "'%s' must be a text block {\"type\": \"text\", \"text\": ...} (other blocks are not supported here)", pp);
        }
        if (i) srv_buf_add(&b, "\n", 1);
        srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
    }
    return srv_tr_take_text(&b, out, e);
}

/* One turn's blocks in chat's terms: text blocks joined (*text), thinking blocks as the
 * assistant's reasoning_content, tool_use blocks as its tool_calls, tool_result blocks as
 * role "tool" messages (appended to msgs at once, before the turn's own text). */
typedef struct turn {
    srv_buf text, reasoning;
    bool any_text;
    json_t *calls; /* assistant tool_calls, or NULL */
} turn;

static int tool_use_call(json_t *blk, const char *pp, turn *t, srv_error *e) {
    json_t *id = json_object_get(blk, "id"), *nm = json_object_get(blk, "name"), *in = json_object_get(blk, "input");
    if (!json_is_string(id) || !json_is_string(nm))
        return srv_bad(e, pp, "'%s': a tool_use block needs string 'id' and 'name'", pp);
    if (srv_tr_present(in) && !json_is_object(in)) return srv_bad(e, pp, "'%s.input' must be an object", pp);
    char *args = srv_tr_present(in) ? json_dumps(in, JSON_COMPACT) : strdup("{}");
    json_t *c = args ? json_pack("{sOsss{sOss}}", "id", id, "type", "function", "function", "name", nm, "arguments", args) : NULL;
    free(args);
    if (!c || (!t->calls && !(t->calls = json_array())) || json_array_append_new(t->calls, c)) return srv_tr_oom(e);
    return 0;
}

static int tool_result_msg(json_t *blk, const char *pp, json_t *msgs, srv_error *e) {
    json_t *id = json_object_get(blk, "tool_use_id"), *c = json_object_get(blk, "content"), *txt = NULL;
    if (!json_is_string(id)) return srv_bad(e, pp, "'%s': a tool_result block needs a string 'tool_use_id'", pp);
    char cp[128];
    snprintf(cp, sizeof cp, "%s.content", pp);
    if (!srv_tr_present(c)) txt = json_string("");
    else if (blocks_text(c, cp, &txt, e)) return -1;
    json_t *m = txt ? json_pack("{sssOso}", "role", "tool", "tool_call_id", id, "content", txt) : NULL;
    if (!m || json_array_append_new(msgs, m)) return srv_tr_oom(e);
    return 0;
}

static int read_blocks(json_t *c, const char *param, bool assistant, json_t *msgs, turn *t, srv_error *e) {
    if (json_is_string(c)) {
        srv_buf_add(&t->text, json_string_value(c), json_string_length(c));
        t->any_text = true;
        return 0;
    }
    if (!json_is_array(c))
        return srv_bad(e, param, "'%s' must be a string or a list of content blocks, not %s", param, srv_json_type_name(c));
    char pp[96];
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *blk = json_array_get(c, i);
        snprintf(pp, sizeof pp, "%s[%zu]", param, i);
        json_t *ty = json_is_object(blk) ? json_object_get(blk, "type") : NULL;
        if (!json_is_string(ty)) return srv_bad(e, pp, "'%s' must be a content block object with a string 'type'", pp);
        const char *ts = json_string_value(ty);
        if (!strcmp(ts, "text")) {
            json_t *tx = json_object_get(blk, "text");
            if (!json_is_string(tx)) return srv_bad(e, pp, "'%s.text' must be a string, not %s", pp, srv_json_type_name(tx));
            if (t->any_text) srv_buf_add(&t->text, "\n", 1);
            srv_buf_add(&t->text, json_string_value(tx), json_string_length(tx));
            t->any_text = true;
        } else if (assistant && !strcmp(ts, "thinking")) {
            json_t *th = json_object_get(blk, "thinking");
            if (json_is_string(th)) srv_buf_add(&t->reasoning, json_string_value(th), json_string_length(th));
        } else if (assistant && !strcmp(ts, "redacted_thinking")) {
            continue; /* encrypted: nothing a local model can read */
        } else if (assistant && !strcmp(ts, "tool_use")) {
            if (tool_use_call(blk, pp, t, e)) return -1;
        } else if (!assistant && !strcmp(ts, "tool_result")) {
            if (tool_result_msg(blk, pp, msgs, e)) return -1;
        } else {
            return srv_bad(e, pp, "content blocks of type '%.40s' are not supported %s by this server", ts,
                              assistant ? "in an assistant turn" : "in a user turn");
        }
    }
    return 0;
}

static int add_turn(json_t *msgs, const char *role, turn *t, srv_error *e) {
    if (t->text.oom || t->reasoning.oom) return srv_tr_oom(e);
    bool assistant = !strcmp(role, "assistant");
    if (!assistant && !t->any_text) return 0; /* a user turn of tool results only */
    json_t *m = json_pack("{ss}", "role", role);
    if (!m) return srv_tr_oom(e);
    json_object_set_new(m, "content", t->any_text || !t->calls ? json_stringn(t->text.p ? t->text.p : "", t->text.len) : json_null());
    if (t->calls) json_object_set(m, "tool_calls", t->calls);
    if (t->reasoning.len) json_object_set_new(m, "reasoning_content", json_stringn(t->reasoning.p, t->reasoning.len));
    return json_array_append_new(msgs, m) ? srv_tr_oom(e) : 0;
}

static int read_messages(json_t *root, json_t *msgs, srv_error *e) {
    json_t *sys = json_object_get(root, "system");
    if (srv_tr_present(sys)) {
        json_t *t = NULL;
        if (blocks_text(sys, "system", &t, e)) return -1;
        if (srv_tr_add_msg(msgs, "system", t, e)) return -1;
    }
    json_t *ms = json_object_get(root, "messages");
    if (!srv_tr_present(ms)) return srv_bad(e, "messages", "'messages' is required");
    if (!json_is_array(ms)) return srv_bad(e, "messages", "'messages' must be an array, not %s", srv_json_type_name(ms));
    if (json_array_size(ms) == 0) return srv_bad(e, "messages", "'messages' must not be empty");
    if (json_array_size(ms) > SRV_MAX_MESSAGES)
        return srv_bad(e, "messages", "'messages' has %zu entries; at most %d", json_array_size(ms), SRV_MAX_MESSAGES);
    char pp[64];
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *m = json_array_get(ms, i);
        snprintf(pp, sizeof pp, "messages[%zu]", i);
        if (!json_is_object(m)) return srv_bad(e, pp, "'%s' must be an object, not %s", pp, srv_json_type_name(m));
        json_t *ro = json_object_get(m, "role");
        snprintf(pp, sizeof pp, "messages[%zu].role", i);
        if (!json_is_string(ro)) return srv_bad(e, pp, "'%s' must be a string ('user' or 'assistant'), not %s", pp, srv_json_type_name(ro));
        const char *r = json_string_value(ro);
        if (strcmp(r, "user") && strcmp(r, "assistant"))
            return srv_bad(e, pp, "'%s': unknown role '%.40s' (expected 'user' or 'assistant'; the system prompt is the top-level 'system')", pp, r);
        snprintf(pp, sizeof pp, "messages[%zu].content", i);
        json_t *c = json_object_get(m, "content");
        if (!srv_tr_present(c)) return srv_bad(e, pp, "'%s' is required", pp);
        turn t = {0};
        int rc = read_blocks(c, pp, !strcmp(r, "assistant"), msgs, &t, e);
        if (!rc) rc = add_turn(msgs, r, &t, e);
        srv_buf_free(&t.text);
        srv_buf_free(&t.reasoning);
        json_decref(t.calls);
        if (rc) return -1;
    }
    return 0;
}

/* tools [{name, description, input_schema}] and tool_choice {type: auto | any | tool | none,
 * name, disable_parallel_tool_use} in chat's terms. Anthropic's server tools (a 'type' such as
 * "web_search_20250305") run on Anthropic's side: refused. */
static int tool(json_t *t, json_t *ty, const char *pp, json_t *out, srv_error *e) {
    if (!json_is_object(t)) return srv_bad(e, pp, "'%s' must be an object, not %s", pp, srv_json_type_name(t));
    if (srv_tr_present(ty) && !(json_is_string(ty) && !strcmp(json_string_value(ty), "custom")))
        return srv_bad(e, pp, "'%s': server tools (type '%.40s') are not supported by this server; define the tool "
                                 "with a name and an input_schema", pp, json_is_string(ty) ? json_string_value(ty) : "?");
    json_t *nm = json_object_get(t, "name"), *sc = json_object_get(t, "input_schema");
    if (!json_is_string(nm)) return srv_bad(e, pp, "'%s.name' must be a string", pp);
    if (!json_is_object(sc)) return srv_bad(e, pp, "'%s.input_schema' must be an object (a JSON Schema)", pp);
    json_t *fn = json_pack("{sOsO}", "name", nm, "parameters", sc);
    if (fn) srv_tr_copy(fn, "description", t, "description");
    if (!fn || json_array_append_new(out, json_pack("{ssso}", "type", "function", "function", fn))) return srv_tr_oom(e);
    return 0;
}

static int read_tools(json_t *root, json_t *chat, srv_error *e) {
    if (srv_tr_tools(root, chat, tool, e)) return -1;
    json_t *v = json_object_get(root, "tool_choice");
    if (!srv_tr_present(v)) return 0;
    json_t *ty = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(ty)) return srv_bad(e, "tool_choice", "'tool_choice' must be an object with a string 'type'");
    const char *t = json_string_value(ty);
    if (!strcmp(t, "auto")) json_object_set_new(chat, "tool_choice", json_string("auto"));
    else if (!strcmp(t, "any")) json_object_set_new(chat, "tool_choice", json_string("required"));
    else if (!strcmp(t, "none")) json_object_set_new(chat, "tool_choice", json_string("none"));
    else if (!strcmp(t, "tool")) {
        json_t *nm = json_object_get(v, "name");
        if (!json_is_string(nm)) return srv_bad(e, "tool_choice.name", "'tool_choice' of type 'tool' needs a string 'name'");
        json_object_set_new(chat, "tool_choice", json_pack("{sss{sO}}", "type", "function", "function", "name", nm));
    } else {
        return srv_bad(e, "tool_choice.type", "'tool_choice.type' must be auto, any, tool or none (got '%.40s')", t);
    }
    json_t *dp = json_object_get(v, "disable_parallel_tool_use");
    if (srv_tr_present(dp) && !json_is_boolean(dp))
        return srv_bad(e, "tool_choice.disable_parallel_tool_use", "'disable_parallel_tool_use' must be a boolean");
    if (json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    return 0;
}

/* A number in [lo, hi] when present. */
static int check_num(json_t *root, const char *key, double lo, double hi, srv_error *e) {
    json_t *v = json_object_get(root, key);
    if (!srv_tr_present(v)) return 0;
    if (!json_is_number(v)) return srv_bad(e, key, "'%s' must be a number, not %s", key, srv_json_type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return srv_bad(e, key, "'%s' must be in [%g, %g] (got %g)", key, lo, hi, d);
    return 0;
}

/* thinking {type: enabled | adaptive | disabled, budget_tokens}: a client that asks for thinking
 * wants it back as thinking blocks, so the answer's <think> block is split off even where the
 * template does not mention <think> (chat's "reasoning_format": "deepseek"). The budget is not
 * enforced: max_tokens bounds the whole answer. */
static int read_thinking(json_t *root, json_t *chat, srv_error *e) {
    json_t *v = json_object_get(root, "thinking");
    if (!srv_tr_present(v)) return 0;
    json_t *ty = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(ty)) return srv_bad(e, "thinking", "'thinking' must be an object with a string 'type'");
    const char *t = json_string_value(ty);
    if (!strcmp(t, "enabled") || !strcmp(t, "adaptive")) json_object_set_new(chat, "reasoning_format", json_string("deepseek"));
    else if (strcmp(t, "disabled"))
        return srv_bad(e, "thinking.type", "'thinking.type' must be enabled, adaptive or disabled (got '%.40s')", t);
    return 0;
}

int srv_messages_to_chat(json_t *root, json_t *chat, srv_error *e) {
    json_t *v = json_object_get(root, "max_tokens");
    if (!srv_tr_present(v)) return srv_bad(e, "max_tokens", "'max_tokens' is required");
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return srv_bad(e, "max_tokens", "'max_tokens' must be an integer >= 1");
    json_object_set(chat, "max_tokens", v);
    if (check_num(root, "temperature", 0, 1, e) || check_num(root, "top_p", 0, 1, e)) return -1;
    v = json_object_get(root, "top_k");
    if (srv_tr_present(v) && (!json_is_integer(v) || json_integer_value(v) < 0))
        return srv_bad(e, "top_k", "'top_k' must be an integer >= 0");
    v = json_object_get(root, "stop_sequences");
    if (srv_tr_present(v)) {
        if (!json_is_array(v)) return srv_bad(e, "stop_sequences", "'stop_sequences' must be a list of strings, not %s", srv_json_type_name(v));
        if (json_array_size(v) > SRV_MAX_STOP)
            return srv_bad(e, "stop_sequences", "'stop_sequences' has %zu strings; at most %d", json_array_size(v), SRV_MAX_STOP);
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_string(json_array_get(v, i)))
                return srv_bad(e, "stop_sequences", "'stop_sequences'[%zu] must be a string", i);
        json_object_set(chat, "stop", v);
    }
    if (read_tools(root, chat, e) || read_thinking(root, chat, e)) return -1;
    v = json_object_get(root, "stream");
    if (srv_tr_present(v) && !json_is_boolean(v)) return srv_bad(e, "stream", "'stream' must be a boolean, not %s", srv_json_type_name(v));
    if (srv_tr_copy_sampling(root, chat, e)) return -1;
    json_t *msgs = json_array();
    if (!msgs) return srv_tr_oom(e);
    json_object_set_new(chat, "messages", msgs);
    return read_messages(root, msgs, e);
}
