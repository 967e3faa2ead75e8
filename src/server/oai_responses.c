/* oai_responses.c — OpenAI's Responses API (POST /v1/responses), stateless, on the chat path:
 * `input` (a string or message, function_call and function_call_output items), `instructions`
 * and function `tools` translated into a chat/completions body; what needs stored state (store, previous_response_id, conversation, background) is
 * refused. The answer is built in server_out_responses.c. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "oai.h"
#include "oai_translate.h"

/* A message item's content: a string, or parts input_text / output_text (earlier assistant
 * turns) / refusal, joined with "\n". */
static int item_text(json_t *c, const char *param, json_t **out, srv_error *e) {
    if (json_is_string(c)) {
        *out = json_incref(c);
        return 0;
    }
    if (!json_is_array(c))
        return srv_bad(e, param, "'%s' must be a string or a list of content parts, not %s", param, srv_json_type_name(c));
    srv_buf b = {0};
    char pp[96];
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *part = json_array_get(c, i);
        snprintf(pp, sizeof pp, "%s[%zu]", param, i);
        json_t *ty = json_is_object(part) ? json_object_get(part, "type") : NULL;
        if (!json_is_string(ty)) {
            srv_buf_free(&b);
            return srv_bad(e, pp, "'%s' must be a content part object with a string 'type'", pp);
        }
        const char *t = json_string_value(ty);
        const char *key = !strcmp(t, "refusal") ? "refusal" : "text";
        if (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal")) {
            srv_buf_free(&b);
            return srv_bad(e, pp, "content parts of type '%.40s' are not supported by this server (only input_text and output_text)", t);
        }
        json_t *tx = json_object_get(part, key);
        if (!json_is_string(tx)) {
            srv_buf_free(&b);
            return srv_bad(e, pp, "'%s.%s' must be a string, not %s", pp, key, srv_json_type_name(tx));
        }
        if (i) srv_buf_add(&b, "\n", 1);
        srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
    }
    return srv_tr_take_text(&b, out, e);
}

/* A function_call item joins the assistant message just before it (or starts one) as one of
 * its tool_calls; a function_call_output item is a role "tool" message. */
static int function_item(json_t *it, const char *t, const char *pp, json_t *msgs, srv_error *e) {
    json_t *id = json_object_get(it, "call_id");
    if (!json_is_string(id)) return srv_bad(e, pp, "'%s.call_id' must be a string", pp);
    if (!strcmp(t, "function_call_output")) {
        json_t *o = json_object_get(it, "output"), *txt = NULL;
        char cp[96];
        snprintf(cp, sizeof cp, "%s.output", pp);
        if (!srv_tr_present(o)) return srv_bad(e, cp, "'%s' is required", cp);
        if (item_text(o, cp, &txt, e)) return -1;
        json_t *m = json_pack("{sssOso}", "role", "tool", "tool_call_id", id, "content", txt);
        return !m || json_array_append_new(msgs, m) ? srv_tr_oom(e) : 0;
    }
    json_t *nm = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
    if (!json_is_string(nm) || !json_is_string(args))
        return srv_bad(e, pp, "'%s': a function_call item needs string 'name' and 'arguments'", pp);
    json_t *c = json_pack("{sOsss{sOsO}}", "id", id, "type", "function", "function", "name", nm, "arguments", args);
    json_t *last = json_array_size(msgs) ? json_array_get(msgs, json_array_size(msgs) - 1) : NULL;
    json_t *ro = last ? json_object_get(last, "role") : NULL;
    if (!c) return srv_tr_oom(e);
    if (!json_is_string(ro) || strcmp(json_string_value(ro), "assistant")) {
        last = json_pack("{sssns[]}", "role", "assistant", "content", "tool_calls");
        if (!last || json_array_append_new(msgs, last)) {
            json_decref(c);
            return srv_tr_oom(e);
        }
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (!json_is_array(calls)) json_object_set_new(last, "tool_calls", calls = json_array());
    return json_array_append_new(calls, c) ? srv_tr_oom(e) : 0;
}

/* tools [{type: "function", name, description, parameters, strict}] and tool_choice ("auto",
 * "none", "required", {type: "function", name}) in chat's terms; hosted tools (web_search,
 * file_search, ...) run on OpenAI's side: refused. */
static int tool(json_t *t, json_t *ty, const char *pp, json_t *out, srv_error *e) {
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))
        return srv_bad(e, pp, "'%s': only tools of type 'function' are supported by this server", pp);
    json_t *nm = json_object_get(t, "name");
    if (!json_is_string(nm)) return srv_bad(e, pp, "'%s.name' must be a string", pp);
    json_t *fn = json_pack("{sO}", "name", nm);
    if (!fn) return srv_tr_oom(e);
    srv_tr_copy(fn, "description", t, "description");
    srv_tr_copy(fn, "parameters", t, "parameters");
    srv_tr_copy(fn, "strict", t, "strict");
    if (json_array_append_new(out, json_pack("{ssso}", "type", "function", "function", fn))) return srv_tr_oom(e);
    return 0;
}

static int read_tools(json_t *root, json_t *chat, srv_error *e) {
    if (srv_tr_tools(root, chat, tool, e)) return -1;
    srv_tr_copy(chat, "parallel_tool_calls", root, "parallel_tool_calls");
    json_t *v = json_object_get(root, "tool_choice");
    if (!srv_tr_present(v) || json_is_string(v)) {
        srv_tr_copy(chat, "tool_choice", root, "tool_choice");
        return 0;
    }
    json_t *ty = json_is_object(v) ? json_object_get(v, "type") : NULL, *nm = json_is_object(v) ? json_object_get(v, "name") : NULL;
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") || !json_is_string(nm))
        return srv_bad(e, "tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
    json_object_set_new(chat, "tool_choice", json_pack("{sss{sO}}", "type", "function", "function", "name", nm));
    return 0;
}

static int read_input(json_t *root, json_t *msgs, srv_error *e) {
    json_t *ins = json_object_get(root, "instructions");
    if (srv_tr_present(ins)) {
        if (!json_is_string(ins))
            return srv_bad(e, "instructions", "'instructions' must be a string, not %s", srv_json_type_name(ins));
        if (srv_tr_add_msg(msgs, "system", json_incref(ins), e)) return -1;
    }
    json_t *in = json_object_get(root, "input");
    if (!srv_tr_present(in)) return srv_bad(e, "input", "'input' is required");
    if (json_is_string(in)) return srv_tr_add_msg(msgs, "user", json_incref(in), e);
    if (!json_is_array(in))
        return srv_bad(e, "input", "'input' must be a string or a list of items, not %s", srv_json_type_name(in));
    if (json_array_size(in) == 0) return srv_bad(e, "input", "'input' must not be an empty list");
    if (json_array_size(in) > SRV_MAX_MESSAGES)
        return srv_bad(e, "input", "'input' has %zu items; at most %d", json_array_size(in), SRV_MAX_MESSAGES);
    char pp[64];
    size_t n_msgs = 0;
    for (size_t i = 0; i < json_array_size(in); i++) {
        json_t *it = json_array_get(in, i);
        snprintf(pp, sizeof pp, "input[%zu]", i);
        if (!json_is_object(it)) return srv_bad(e, pp, "'%s' must be an object, not %s", pp, srv_json_type_name(it));
        json_t *ty = json_object_get(it, "type");
        if (srv_tr_present(ty) && !json_is_string(ty)) return srv_bad(e, pp, "'%s.type' must be a string", pp);
        const char *t = ty && json_is_string(ty) ? json_string_value(ty) : "message";
        if (!strcmp(t, "reasoning")) continue; /* an earlier turn's reasoning: no place in the template */
        if (!strcmp(t, "item_reference"))
            return srv_bad(e, pp, "'%s': item references need stored responses; this server is stateless", pp);
        if (!strcmp(t, "function_call") || !strcmp(t, "function_call_output")) {
            if (function_item(it, t, pp, msgs, e)) return -1;
            n_msgs++;
            continue;
        }
        if (strcmp(t, "message"))
            return srv_bad(e, pp, "input items of type '%.40s' are not supported by this server (only messages)", t);
        json_t *ro = json_object_get(it, "role");
        snprintf(pp, sizeof pp, "input[%zu].role", i);
        if (!json_is_string(ro)) return srv_bad(e, pp, "'%s' must be a string, not %s", pp, srv_json_type_name(ro));
        const char *r = json_string_value(ro), *role;
        if (!strcmp(r, "system") || !strcmp(r, "developer")) role = "system";
        else if (!strcmp(r, "user")) role = "user";
        else if (!strcmp(r, "assistant")) role = "assistant";
        else return srv_bad(e, pp, "'%s': unknown role '%.40s' (expected user, assistant, system or developer)", pp, r);
        snprintf(pp, sizeof pp, "input[%zu].content", i);
        json_t *c = json_object_get(it, "content"), *txt = NULL;
        if (!srv_tr_present(c)) return srv_bad(e, pp, "'%s' is required", pp);
        if (item_text(c, pp, &txt, e)) return -1;
        if (srv_tr_add_msg(msgs, role, txt, e)) return -1;
        n_msgs++;
    }
    if (!n_msgs) return srv_bad(e, "input", "'input' holds no message");
    return 0;
}

/* text.format -> response_format (the chat parser decides what it supports). */
static int text_format(json_t *root, json_t *chat, srv_error *e) {
    json_t *t = json_object_get(root, "text");
    if (!srv_tr_present(t)) return 0;
    if (!json_is_object(t)) return srv_bad(e, "text", "'text' must be an object, not %s", srv_json_type_name(t));
    json_t *f = json_object_get(t, "format");
    if (!srv_tr_present(f)) return 0;
    if (!json_is_object(f) || !json_is_string(json_object_get(f, "type")))
        return srv_bad(e, "text.format", "'text.format' must be an object with a string 'type'");
    const char *ty = json_string_value(json_object_get(f, "type"));
    json_t *rf = json_pack("{ss}", "type", ty);
    if (!rf) return srv_tr_oom(e);
    if (!strcmp(ty, "json_schema")) {
        json_t *js = json_object();
        srv_tr_copy(js, "name", f, "name");
        srv_tr_copy(js, "schema", f, "schema");
        srv_tr_copy(js, "strict", f, "strict");
        srv_tr_copy(js, "description", f, "description");
        json_object_set_new(rf, "json_schema", js);
    }
    json_object_set_new(chat, "response_format", rf);
    return 0;
}

static int translate(json_t *root, json_t *chat, srv_error *e) {
    json_t *v = json_object_get(root, "previous_response_id");
    if (srv_tr_present(v))
        return srv_bad(e, "previous_response_id", "'previous_response_id' is not supported: this server is stateless "
                                                     "(send the whole conversation in 'input')");
    v = json_object_get(root, "conversation");
    if (srv_tr_present(v))
        return srv_bad(e, "conversation", "'conversation' is not supported: this server is stateless (send the whole "
                                             "conversation in 'input')");
    v = json_object_get(root, "store");
    if (srv_tr_present(v) && !json_is_boolean(v)) return srv_bad(e, "store", "'store' must be a boolean, not %s", srv_json_type_name(v));
    if (json_is_true(v))
        return srv_bad(e, "store", "'store': true is not supported: this server is stateless and keeps no responses "
                                      "(send 'store': false or leave it out)");
    v = json_object_get(root, "background");
    if (json_is_true(v)) return srv_bad(e, "background", "'background': true is not supported by this server");
    if (read_tools(root, chat, e)) return -1;
    v = json_object_get(root, "max_output_tokens");
    if (srv_tr_present(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return srv_bad(e, "max_output_tokens", "'max_output_tokens' must be an integer >= 1");
        json_object_set(chat, "max_tokens", v);
    }
    /* reasoning {effort, summary}: a client that asks for reasoning reads it from the reasoning
     * item, so the answer's <think> block is split off even where the template does not mention
     * <think> (chat's "reasoning_format": "deepseek") */
    v = json_object_get(root, "reasoning");
    if (srv_tr_present(v) && !json_is_object(v))
        return srv_bad(e, "reasoning", "'reasoning' must be an object, not %s", srv_json_type_name(v));
    if (json_is_object(v)) json_object_set_new(chat, "reasoning_format", json_string("deepseek"));
    if (srv_tr_copy_sampling(root, chat, e)) return -1; /* top_k: an extra, as on chat */
    srv_tr_copy(chat, "seed", root, "seed");
    if (text_format(root, chat, e)) return -1;
    json_t *msgs = json_array();
    if (!msgs) return srv_tr_oom(e);
    json_object_set_new(chat, "messages", msgs);
    return read_input(root, msgs, e);
}

/* translate, then a copy of 'instructions' in *instructions (the chat parse clears p, so the
 * dispatcher sets it after: oai_request.c) */
int srv_responses_to_chat(json_t *root, json_t *chat, char **instructions, srv_error *e) {
    int rc = translate(root, chat, e);
    json_t *iv = json_object_get(root, "instructions");
    if (!rc && json_is_string(iv) && !(*instructions = strndup(json_string_value(iv), json_string_length(iv))))
        rc = srv_tr_oom(e);
    return rc;
}
