/* oai_tools.c — the tool and reasoning fields of a chat request (oai.h): `tools`,
 * `tool_choice`, `parallel_tool_calls`, assistant `tool_calls` and `reasoning_content`,
 * `role: tool` results, `chat_template_kwargs`, `reasoning_effort`, `reasoning_format`;
 * checked here (a malformed tool definition is a 400 naming it) and kept as the JSON the chat
 * template renders; then the messages adjusted for the template that renders them (tools and
 * calls it would drop written into the messages). */
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
        args = json_loadb(json_string_value(a), json_string_length(a), JSON_ALLOW_NUL, &je);
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
                /* Qwen3-style templates read reasoning_content (gpt-oss's `thinking`: srv_adjust_messages below) */
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

/* ---- the messages as the template is given them ------------------------------------------- */

/* For templates that ignore `tools` (SmolLM2's, the built-in fallbacks): the tools described
 * in a system message, in the Hermes format the parser reads. */
static json_t *tools_system_text(const char *tools_json) {
    json_t *tools = json_loads(tools_json, 0, NULL);
    if (!tools) return NULL;
    srv_buf b = {0};
    static const char HEAD[] = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    static const char TAIL[] = "\n</tools>\n\nFor each function call, return a json object with function name and "
                               "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                               "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
    srv_buf_add(&b, HEAD, strlen(HEAD));
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char *s = json_dumps(t, JSON_COMPACT);
        srv_buf_add(&b, "\n", 1);
        if (s) srv_buf_add(&b, s, strlen(s));
        free(s);
    }
    srv_buf_add(&b, TAIL, strlen(TAIL));
    json_decref(tools);
    json_t *r = b.oom ? NULL : json_stringn(b.p, b.len);
    srv_buf_free(&b);
    return r;
}

/* The messages as the template is given them (oai.h); srv_chat_render (oai_request.c) asks. */
char *srv_adjust_messages(const srv_params *p, bool harmony, bool inject_tools, bool inline_calls, bool sys_field) {
    json_t *ms = json_loads(p->messages_json, 0, NULL);
    if (!ms) return NULL;
    size_t i;
    json_t *m;
    if (sys_field && p->tools_json) { /* Phi-4-mini: the functions as JSON text in the system message's `tools` */
        json_t *tools = json_loads(p->tools_json, 0, NULL), *fns = json_array();
        json_array_foreach(tools, i, m) json_array_append(fns, json_object_get(m, "function"));
        char *txt = json_dumps(fns, 0);
        json_decref(tools);
        json_decref(fns);
        json_t *first = json_array_get(ms, 0);
        json_t *role = json_object_get(first, "role");
        if (!(json_is_string(role) && !strcmp(json_string_value(role), "system"))) {
            first = json_pack("{ssss}", "role", "system", "content", "");
            json_array_insert_new(ms, 0, first);
        }
        if (txt && first) json_object_set_new(first, "tools", json_string(txt));
        free(txt);
    }
    if (inline_calls) /* the template drops tool_calls: the calls as the model wrote them (Hermes) */
        json_array_foreach(ms, i, m) {
            json_t *tc = json_object_get(m, "tool_calls");
            if (!json_is_array(tc)) continue;
            const char *c = json_string_value(json_object_get(m, "content"));
            srv_buf b = {0};
            if (c) srv_buf_add(&b, c, strlen(c));
            size_t k;
            json_t *call;
            json_array_foreach(tc, k, call) {
                json_t *f = json_object_get(call, "function");
                json_t *one = json_pack("{sOsO}", "name", json_object_get(f, "name"), "arguments", json_object_get(f, "arguments"));
                char *js = one ? json_dumps(one, 0) : NULL;
                json_decref(one);
                if (b.len) srv_buf_add(&b, "\n", 1);
                srv_buf_add(&b, "<tool_call>\n", 12);
                if (js) srv_buf_add(&b, js, strlen(js));
                srv_buf_add(&b, "\n</tool_call>", 13);
                free(js);
            }
            if (!b.oom && b.p) json_object_set_new(m, "content", json_stringn(b.p, b.len));
            srv_buf_free(&b);
            json_object_del(m, "tool_calls");
        }
    if (harmony)
        json_array_foreach(ms, i, m) {
            json_t *rc = json_object_get(m, "reasoning_content");
            if (rc) {
                json_object_set(m, "thinking", rc);
                json_object_del(m, "reasoning_content");
            }
        }
    if (inject_tools) {
        json_t *txt = tools_system_text(p->tools_json);
        if (!txt) {
            json_decref(ms);
            return NULL;
        }
        json_t *first = json_array_get(ms, 0);
        json_t *role = json_object_get(first, "role");
        if (first && json_is_string(role) && !strcmp(json_string_value(role), "system")) {
            const char *c = json_string_value(json_object_get(first, "content"));
            size_t cl = c ? strlen(c) : 0;
            char *joined = malloc(cl + 2 + json_string_length(txt) + 1);
            if (joined) {
                memcpy(joined, c ? c : "", cl);
                size_t o = cl;
                if (cl) {
                    memcpy(joined + o, "\n\n", 2);
                    o += 2;
                }
                memcpy(joined + o, json_string_value(txt), json_string_length(txt) + 1);
                json_object_set_new(first, "content", json_string(joined));
                free(joined);
            }
        } else {
            json_array_insert_new(ms, 0, json_pack("{ssso}", "role", "system", "content", json_incref(txt)));
        }
        json_decref(txt);
    }
    char *s = json_dumps(ms, JSON_COMPACT);
    json_decref(ms);
    return s;
}
