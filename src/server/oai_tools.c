/* oai_tools.c — the tool and reasoning fields of a chat request (oai.h): `tools`,
 * `tool_choice`, `parallel_tool_calls`, assistant `tool_calls` and `reasoning_content`,
 * `role: tool` results, `chat_template_kwargs`, `reasoning_effort`, `reasoning_format`;
 * checked here (a malformed tool definition is a 400 naming it) and kept as the JSON the chat
 * template renders. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"

static int oom(srv_error *e) {
    return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while reading the request");
}

/* function names as OpenAI allows them: [A-Za-z0-9_.-]{1,64} (dots for harmony's namespaces) */
static bool name_ok(const char *s, size_t n) {
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

static int check_tools(json_t *tools, srv_error *e) {
    if (!json_is_array(tools)) return srv_bad(e, "tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    if (json_array_size(tools) > 512) return srv_bad(e, "tools", "'tools' has %zu entries; at most 512", json_array_size(tools));
    size_t i;
    json_t *t;
    char pp[64];
    json_array_foreach(tools, i, t) {
        snprintf(pp, sizeof pp, "tools[%zu]", i);
        if (!json_is_object(t)) return srv_bad(e, pp, "'%s' must be an object", pp);
        json_t *ty = json_object_get(t, "type");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))
            return srv_bad(e, pp, "'%s.type' must be \"function\"", pp);
        json_t *f = json_object_get(t, "function");
        if (!json_is_object(f)) return srv_bad(e, pp, "'%s.function' must be an object with a 'name'", pp);
        json_t *nm = json_object_get(f, "name");
        if (!json_is_string(nm) || !name_ok(json_string_value(nm), json_string_length(nm)))
            return srv_bad(e, pp, "'%s.function.name' must be a string of 1 to 64 letters, digits, '_', '-' or '.'", pp);
        json_t *d = json_object_get(f, "description");
        if (d && !json_is_null(d) && !json_is_string(d)) return srv_bad(e, pp, "'%s.function.description' must be a string", pp);
        json_t *pa = json_object_get(f, "parameters");
        if (pa && !json_is_null(pa) && !json_is_object(pa))
            return srv_bad(e, pp, "'%s.function.parameters' must be a JSON Schema object", pp);
        for (size_t k = 0; k < i; k++) {
            json_t *o = json_object_get(json_object_get(json_array_get(tools, k), "function"), "name");
            if (json_equal(o, nm)) return srv_bad(e, pp, "'%s': the function name '%s' is defined twice", pp, json_string_value(nm));
        }
    }
    return 0;
}

/* One assistant tool call, normalized for templates: {id, type, function: {name, arguments}}
 * with the arguments as an object when they are JSON text of one (transformers' convention,
 * which templates such as gpt-oss's and Mistral's assume). */
static json_t *norm_call(json_t *c, const char *pp, srv_error *e) {
    if (!json_is_object(c)) return srv_bad(e, pp, "'%s' must be an object", pp), NULL;
    json_t *f = json_object_get(c, "function");
    if (!json_is_object(f)) return srv_bad(e, pp, "'%s.function' must be an object with 'name' and 'arguments'", pp), NULL;
    json_t *nm = json_object_get(f, "name");
    if (!json_is_string(nm) || !json_string_length(nm)) return srv_bad(e, pp, "'%s.function.name' must be a non-empty string", pp), NULL;
    json_t *a = json_object_get(f, "arguments");
    json_t *args;
    if (!a || json_is_null(a)) {
        args = json_object();
    } else if (json_is_string(a)) {
        json_error_t je;
        args = json_loadb(json_string_value(a), json_string_length(a), 0, &je);
        if (!json_is_object(args)) {
            json_decref(args);
            args = json_incref(a); /* not an object: passed on as the text it is */
        }
    } else if (json_is_object(a)) {
        args = json_incref(a);
    } else {
        return srv_bad(e, pp, "'%s.function.arguments' must be a JSON string", pp), NULL;
    }
    json_t *id = json_object_get(c, "id");
    if (id && !json_is_null(id) && !json_is_string(id)) {
        json_decref(args);
        return srv_bad(e, pp, "'%s.id' must be a string", pp), NULL;
    }
    json_t *fn = json_pack("{sOso}", "name", nm, "arguments", args);
    json_t *o = fn ? json_pack("{sssO}", "type", "function", "function", fn) : NULL;
    json_decref(fn);
    if (o && json_is_string(id)) json_object_set(o, "id", id);
    return o;
}

/* The messages as the template sees them; p->msgs holds each one's role and joined content. */
static int norm_messages(json_t *root, srv_params *p, srv_error *e) {
    json_t *ms = json_object_get(root, "messages");
    json_t *out = json_array();
    if (!out) return oom(e);
    char pp[96];
    for (size_t i = 0; i < p->n_msgs; i++) {
        json_t *m = json_array_get(ms, i);
        const char *role = p->msgs[i].role;
        json_t *o = json_pack("{ssss}", "role", role, "content", p->msgs[i].content);
        if (!o) { /* invalid UTF-8 cannot come from jansson's parse */
            json_decref(out);
            return oom(e);
        }
        json_array_append_new(out, o);
        if (!strcmp(role, "assistant")) {
            json_t *tc = json_object_get(m, "tool_calls");
            if (tc && !json_is_null(tc)) {
                snprintf(pp, sizeof pp, "messages[%zu].tool_calls", i);
                if (!json_is_array(tc)) {
                    json_decref(out);
                    return srv_bad(e, pp, "'%s' must be an array", pp);
                }
                if (json_array_size(tc)) {
                    json_t *a = json_array();
                    size_t k;
                    json_t *c;
                    json_array_foreach(tc, k, c) {
                        snprintf(pp, sizeof pp, "messages[%zu].tool_calls[%zu]", i, k);
                        json_t *nc = norm_call(c, pp, e);
                        if (!nc) {
                            json_decref(a);
                            json_decref(out);
                            return -1;
                        }
                        json_array_append_new(a, nc);
                    }
                    json_object_set_new(o, "tool_calls", a);
                }
            }
            json_t *rc = json_object_get(m, "reasoning_content");
            if (rc && !json_is_null(rc)) {
                snprintf(pp, sizeof pp, "messages[%zu].reasoning_content", i);
                if (!json_is_string(rc)) {
                    json_decref(out);
                    return srv_bad(e, pp, "'%s' must be a string", pp);
                }
                /* Qwen3-style templates read reasoning_content (gpt-oss's `thinking`: oai_prepare.c) */
                json_object_set(o, "reasoning_content", rc);
            }
        } else if (!strcmp(role, "tool")) {
            json_t *id = json_object_get(m, "tool_call_id"), *nm = json_object_get(m, "name");
            snprintf(pp, sizeof pp, "messages[%zu].tool_call_id", i);
            if (id && !json_is_null(id) && !json_is_string(id)) {
                json_decref(out);
                return srv_bad(e, pp, "'%s' must be a string", pp);
            }
            if (json_is_string(id)) json_object_set(o, "tool_call_id", id);
            if (json_is_string(nm)) json_object_set(o, "name", nm);
        }
    }
    p->messages_json = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    return p->messages_json ? 0 : oom(e);
}

int srv_read_chat_extras(json_t *root, srv_params *p, srv_error *e) {
    p->tool_choice = SRV_TOOL_CHOICE_AUTO;
    p->parallel_tool_calls = true;
    p->reasoning_split = true;
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools) && check_tools(tools, e)) return -1;
    bool have_tools = json_is_array(tools) && json_array_size(tools) > 0;
    json_t *tc = json_object_get(root, "tool_choice");
    const char *named = NULL;
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (!strcmp(s, "auto")) p->tool_choice = SRV_TOOL_CHOICE_AUTO;
            else if (!strcmp(s, "none")) p->tool_choice = SRV_TOOL_CHOICE_NONE;
            else if (!strcmp(s, "required")) p->tool_choice = SRV_TOOL_CHOICE_REQUIRED;
            else return srv_bad(e, "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}} (got '%.40s')", s);
        } else if (json_is_object(tc)) {
            json_t *nm = json_object_get(json_object_get(tc, "function"), "name");
            if (!json_is_string(nm)) return srv_bad(e, "tool_choice", "'tool_choice.function.name' must be a string");
            named = json_string_value(nm);
            p->tool_choice = SRV_TOOL_CHOICE_NAMED;
        } else {
            return srv_bad(e, "tool_choice", "'tool_choice' must be a string or an object");
        }
        if (p->tool_choice != SRV_TOOL_CHOICE_NONE && p->tool_choice != SRV_TOOL_CHOICE_AUTO && !have_tools)
            return srv_bad(e, "tool_choice", "'tool_choice' \"required\" or a named function needs a non-empty 'tools'");
    }
    json_t *par = json_object_get(root, "parallel_tool_calls");
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par)) return srv_bad(e, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        p->parallel_tool_calls = json_is_true(par);
    }
    if (have_tools && p->tool_choice != SRV_TOOL_CHOICE_NONE) {
        json_t *use = tools;
        if (named) { /* only the named function is offered */
            use = NULL;
            size_t i;
            json_t *t;
            json_array_foreach(tools, i, t) {
                json_t *nm = json_object_get(json_object_get(t, "function"), "name");
                if (!strcmp(json_string_value(nm), named)) use = json_pack("[O]", t);
            }
            if (!use) return srv_bad(e, "tool_choice", "'tool_choice' names the function '%.64s', which 'tools' does not define", named);
        }
        p->tools_json = json_dumps(use, JSON_COMPACT);
        if (use != tools) json_decref(use);
        if (!p->tools_json) return oom(e);
    }
    /* template variables: chat_template_kwargs, then reasoning_effort */
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    json_t *vars = json_object();
    if (!vars) return oom(e);
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) {
            json_decref(vars);
            return srv_bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        }
        static const char *const reserved[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};
        for (size_t k = 0; k < sizeof reserved / sizeof reserved[0]; k++)
            if (json_object_get(kw, reserved[k])) {
                json_decref(vars);
                return srv_bad(e, "chat_template_kwargs", "'chat_template_kwargs' may not set '%s'", reserved[k]);
            }
        json_object_update(vars, kw);
    }
    json_t *re = json_object_get(root, "reasoning_effort");
    if (re && !json_is_null(re)) {
        const char *s = json_is_string(re) ? json_string_value(re) : "";
        if (strcmp(s, "minimal") && strcmp(s, "low") && strcmp(s, "medium") && strcmp(s, "high")) {
            json_decref(vars);
            return srv_bad(e, "reasoning_effort", "'reasoning_effort' must be \"minimal\", \"low\", \"medium\" or \"high\"");
        }
        json_object_set(vars, "reasoning_effort", re);
    }
    if (json_object_size(vars)) p->tmpl_vars_json = json_dumps(vars, JSON_COMPACT);
    json_decref(vars);
    if (json_object_size(kw) + (re && !json_is_null(re)) && !p->tmpl_vars_json) return oom(e);
    json_t *rf = json_object_get(root, "reasoning_format");
    if (rf && !json_is_null(rf)) {
        if (!json_is_string(rf)) return srv_bad(e, "reasoning_format", "'reasoning_format' must be a string");
        const char *s = json_string_value(rf);
        if (!strcmp(s, "none")) p->reasoning_split = false;
        else if (!strcmp(s, "deepseek") || !strcmp(s, "parsed")) p->reasoning_force = true;
        else if (strcmp(s, "auto"))
            return srv_bad(e, "reasoning_format", "'reasoning_format' must be \"none\", \"auto\" or \"deepseek\"");
    }
    /* messages of roles and texts only render from p->msgs (no JSON round trip of big texts) */
    bool extras = p->tools_json != NULL;
    json_t *ms = json_object_get(root, "messages");
    for (size_t i = 0; i < p->n_msgs && !extras; i++) {
        json_t *m = json_array_get(ms, i), *tc = json_object_get(m, "tool_calls"), *rc = json_object_get(m, "reasoning_content");
        extras = !strcmp(p->msgs[i].role, "tool") || (json_is_array(tc) && json_array_size(tc)) ||
                 (rc && !json_is_null(rc)) || (tc && !json_is_null(tc) && !json_is_array(tc));
    }
    return extras ? norm_messages(root, p, e) : 0;
}
