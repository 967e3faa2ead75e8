/* server_out_responses.c — the answer of POST /v1/responses in OpenAI's Responses shapes: the
 * response object (one assistant message item with one output_text part) and the stream's
 * events (response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta / .done, response.content_part.done,
 * response.output_item.done, response.completed or response.incomplete), each with its
 * sequence_number; an error after the stream began is an "error" event. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

static void item_id(srv_req *r, char *buf, size_t cap) {
    const char *u = strchr(r->id, '_'); /* "resp_<hex>": the message item is "msg_<hex>" */
    snprintf(buf, cap, "msg_%s", u ? u + 1 : r->id);
}

/* Every event but the errors: type, sequence_number and the event's own fields (o consumed). */
static void event(srv_req *r, const char *type, json_t *o) {
    if (!o) {
        r->out.oom = true;
        return;
    }
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(r->api_seq++));
    srv_buf_sse_event(&r->out, type, o);
}

static bool incomplete(srv_req *r) {
    rf_finish_reason f = r->ch[0].finish;
    return f == RF_FINISH_LENGTH || f == RF_FINISH_CONTEXT;
}

static json_t *text_part(srv_req *r, bool done) {
    srv_choice *ch = &r->ch[0];
    json_t *p = json_pack("{sss[]}", "type", "output_text", "annotations");
    if (p) json_object_set_new(p, "text", done ? srv_json_bytes(ch->text.p ? ch->text.p : "", ch->text.len) : json_string(""));
    if (p) json_object_set_new(p, "logprobs", json_array());
    return p;
}

/* The message item: in progress and empty, or done with its text. */
static json_t *message_item(srv_req *r, bool done) {
    char id[64];
    item_id(r, id, sizeof id);
    json_t *o = json_pack("{ssssss}", "id", id, "type", "message", "role", "assistant");
    if (!o) return NULL;
    json_object_set_new(o, "status", json_string(!done ? "in_progress" : incomplete(r) ? "incomplete" : "completed"));
    json_t *c = json_array();
    if (done) json_array_append_new(c, text_part(r, true));
    json_object_set_new(o, "content", c);
    return o;
}

static json_t *usage(srv_req *r) {
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(r->u_prompt));
    json_object_set_new(u, "input_tokens_details", json_pack("{sI}", "cached_tokens", (json_int_t)r->u_cached));
    json_object_set_new(u, "output_tokens", json_integer(r->u_completion));
    json_object_set_new(u, "output_tokens_details", json_pack("{si}", "reasoning_tokens", 0));
    json_object_set_new(u, "total_tokens", json_integer(r->u_prompt + r->u_completion));
    return u;
}

/* The response object; `done`: with its output, status and usage. */
static json_t *response(srv_req *r, bool done) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(r->created));
    json_object_set_new(o, "status", json_string(!done ? "in_progress" : incomplete(r) ? "incomplete" : "completed"));
    if (done) json_object_set_new(o, "completed_at", json_integer((json_int_t)time(NULL)));
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details",
                        done && incomplete(r) ? json_pack("{ss}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(o, "instructions",
                        r->p.instructions ? srv_json_bytes(r->p.instructions, strlen(r->p.instructions)) : json_null());
    json_object_set_new(o, "max_output_tokens", r->p.max_tokens >= 0 ? json_integer(r->p.max_tokens) : json_null());
    json_object_set_new(o, "model", srv_json_bytes(r->s->alias, strlen(r->s->alias)));
    json_t *out = json_array();
    if (done) json_array_append_new(out, message_item(r, true));
    json_object_set_new(o, "output", out);
    json_object_set_new(o, "parallel_tool_calls", json_true());
    json_object_set_new(o, "previous_response_id", json_null());
    json_object_set_new(o, "store", json_false());
    json_object_set_new(o, "temperature", json_real(r->p.temperature));
    json_object_set_new(o, "top_p", json_real(r->p.top_p));
    json_object_set_new(o, "text", json_pack("{s{ss}}", "format", "type", "text"));
    json_object_set_new(o, "tool_choice", json_string("auto"));
    json_object_set_new(o, "tools", json_array());
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "metadata", json_object());
    json_object_set_new(o, "usage", done ? usage(r) : json_null());
    return o;
}

static json_t *part_event(srv_req *r) {
    char id[64];
    item_id(r, id, sizeof id);
    return json_pack("{sssisi}", "item_id", id, "output_index", 0, "content_index", 0);
}

void srv_responses_stream_start(srv_req *r) {
    event(r, "response.created", json_pack("{so}", "response", response(r, false)));
    event(r, "response.in_progress", json_pack("{so}", "response", response(r, false)));
    event(r, "response.output_item.added", json_pack("{siso}", "output_index", 0, "item", message_item(r, false)));
    json_t *o = part_event(r);
    if (o) json_object_set_new(o, "part", text_part(r, false));
    event(r, "response.content_part.added", o);
}

void srv_responses_text(srv_req *r, const char *text, size_t len) {
    if (!len) return;
    srv_buf_add(&r->ch[0].text, text, len); /* .done events and the final object carry it all */
    if (!r->stream) return;
    json_t *o = part_event(r);
    if (o) {
        json_object_set_new(o, "delta", srv_json_bytes(text, len));
        json_object_set_new(o, "logprobs", json_array());
    }
    event(r, "response.output_text.delta", o);
}

void srv_responses_stream_end(srv_req *r) {
    srv_choice *ch = &r->ch[0];
    json_t *o = part_event(r);
    if (o) {
        json_object_set_new(o, "text", srv_json_bytes(ch->text.p ? ch->text.p : "", ch->text.len));
        json_object_set_new(o, "logprobs", json_array());
    }
    event(r, "response.output_text.done", o);
    o = part_event(r);
    if (o) json_object_set_new(o, "part", text_part(r, true));
    event(r, "response.content_part.done", o);
    event(r, "response.output_item.done", json_pack("{siso}", "output_index", 0, "item", message_item(r, true)));
    event(r, incomplete(r) ? "response.incomplete" : "response.completed", json_pack("{so}", "response", response(r, true)));
}

void srv_responses_stream_error(srv_req *r) {
    json_t *o = json_object();
    if (!o) {
        r->out.oom = true;
        return;
    }
    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "code", r->err.code ? json_string(r->err.code) : json_string(r->err.type ? r->err.type : "server_error"));
    json_object_set_new(o, "message", srv_json_bytes(r->err.message, strlen(r->err.message)));
    json_object_set_new(o, "param", json_null());
    json_object_set_new(o, "sequence_number", json_integer(r->api_seq++));
    srv_buf_sse_event(&r->out, "error", o);
}

json_t *srv_responses_final_json(srv_req *r) { return response(r, true); }
