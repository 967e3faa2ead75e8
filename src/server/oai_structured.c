/* oai_structured.c — structured output on the chat and completions routes: `response_format`
 * (json_object, json_schema) and llama-server's `grammar` (GBNF) read into a compiled grammar
 * (json_schema.c, engine/grammar_gbnf.c), and the tool-call grammar (tool_grammar.c) that
 * enforces tool_choice "required" or a named function. */
#include <stdio.h>
#include <string.h>

#include "json_schema.h"
#include "oai.h"
#include "tool_calls.h"
#include "tool_grammar.h"

int srv_read_structured(json_t *root, srv_params *p, srv_error *e) {
    json_t *v = json_object_get(root, "response_format"), *gr = json_object_get(root, "grammar");
    char err[256] = "";
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return srv_fail(e, 400, "invalid_request_error", NULL, "response_format", "'response_format' must be an object, not %s",
                            json_is_array(v) ? "an array" : "a scalar");
        json_t *t = json_object_get(v, "type");
        if (!json_is_string(t)) return srv_fail(e, 400, "invalid_request_error", NULL, "response_format.type", "'response_format.type' must be a string");
        const char *ts = json_string_value(t);
        if (!strcmp(ts, "text")) {
            /* free text */
        } else if (!strcmp(ts, "json_object")) {
            if (srv_json_grammar(NULL, &p->grammar, err, sizeof err)) /* only out of memory */
                return srv_fail(e, 503, "server_error", NULL, "response_format", "%s", err);
        } else if (!strcmp(ts, "json_schema")) {
            json_t *js = json_object_get(v, "json_schema");
            if (js && !json_is_null(js) && !json_is_object(js))
                return srv_fail(e, 400, "invalid_request_error", NULL, "response_format.json_schema", "'response_format.json_schema' must be an object");
            json_t *sc = json_object_get(js, "schema");
            if (sc && !json_is_object(sc) && !json_is_boolean(sc))
                return srv_fail(e, 400, "invalid_request_error", NULL, "response_format.json_schema.schema", "'response_format.json_schema.schema' must be an object");
            if (srv_json_grammar(sc && json_is_object(sc) ? sc : NULL, &p->grammar, err, sizeof err))
                return srv_fail(e, 400, "invalid_request_error", "unsupported_schema", "response_format.json_schema.schema", "%s", err);
        } else {
            return srv_fail(e, 400, "invalid_request_error", NULL, "response_format.type",
                            "'response_format.type' must be one of text, json_object, json_schema (got '%.40s')", ts);
        }
    }
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr)) return srv_fail(e, 400, "invalid_request_error", NULL, "grammar", "'grammar' must be a string (GBNF)");
        if (p->grammar) return srv_fail(e, 400, "invalid_request_error", NULL, "grammar", "'grammar' and a JSON 'response_format' exclude each other");
        if (json_string_length(gr) && rf_grammar_parse_gbnf(json_string_value(gr), json_string_length(gr), &p->grammar))
            return srv_fail(e, 400, "invalid_request_error", "invalid_grammar", "grammar", "%s", rf_last_error());
    }
    return 0;
}

int srv_tool_grammar(const srv_params *p, rf_grammar **out, srv_error *e) {
    *out = NULL;
    if (p->grammar || !p->tools_json || !p->parse_output ||
        (p->tool_choice != SRV_TOOL_CHOICE_REQUIRED && p->tool_choice != SRV_TOOL_CHOICE_NAMED))
        return 0;
    srv_tool_grammar_opts o = {0};
    o.syntax = (srv_tool_syntax)p->syntax;
    o.parallel = p->parallel_tool_calls;
    o.control_text = p->render_special; /* the parser reads the markers the output renders */
    /* the think block the model may write first, where the parser splits it off; a prompt that
     * opened one leaves the model inside it whatever the split */
    if (p->think_open) o.think = SRV_THINK_OPEN;
    else if (p->reasoning_split && (p->thinks || p->reasoning_force)) o.think = SRV_THINK_OPTIONAL;
    /* unsplit, the block would be the start of a Llama 3 answer, which must be all calls */
    if (o.think == SRV_THINK_OPEN && !p->reasoning_split && o.syntax == SRV_SYNTAX_LLAMA3) return 0;
    json_error_t je;
    json_t *tools = json_loads(p->tools_json, 0, &je);
    char err[256] = "";
    int r = tools ? srv_tool_call_grammar(tools, &o, out, err, sizeof err) : -1; /* tools_json: named tool only */
    json_decref(tools);
    if (r) return srv_fail(e, 503, "server_error", NULL, "tool_choice", "the tool-call grammar failed: %s", err);
    return 0;
}
