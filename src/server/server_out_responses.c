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

/* Item ids from the response's: "resp_<hex>" has the message "msg_<hex>", the reasoning
 * "rs_<hex>", the k-th function call "fc_<hex>_<k>". */
static void item_id_of(srv_req *r, const char *prefix, int k, char *buf, size_t cap) {
    const char *u = strchr(r->id, '_');
    if (k < 0) snprintf(buf, cap, "%s_%s", prefix, u ? u + 1 : r->id);
    else snprintf(buf, cap, "%s_%s_%d", prefix, u ? u + 1 : r->id, k);
}

static void item_id(srv_req *r, char *buf, size_t cap) { item_id_of(r, "msg", -1, buf, cap); }

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

/* ---- answers parsed into reasoning, message and function_call items --------------------------
 * With the chat path's answer parser (tool_calls.h, when this tree has it): a reasoning item
 * (reasoning_text), the message and one function_call item per call; streamed with
 * response.reasoning_text.delta and response.function_call_arguments.delta / .done. */
static json_t *reasoning_item(srv_req *r, const char *text, size_t len, bool done) {
    char id[80];
    item_id_of(r, "rs", -1, id, sizeof id);
    json_t *o = json_pack("{sssss[]}", "id", id, "type", "reasoning", "summary");
    json_t *c = json_array();
    if (done) {
        json_t *p = json_pack("{ss}", "type", "reasoning_text");
        json_object_set_new(p, "text", srv_json_bytes(text, len));
        json_array_append_new(c, p);
    }
    json_object_set_new(o, "content", c);
    json_object_set_new(o, "status", json_string(done ? "completed" : "in_progress"));
    return o;
}

static json_t *call_item(srv_req *r, const srv_tool_call *c, int k, bool done) {
    char id[80];
    item_id_of(r, "fc", k, id, sizeof id);
    json_t *o = json_pack("{ssss}", "id", id, "type", "function_call");
    json_object_set_new(o, "call_id", srv_json_bytes(c->id, strlen(c->id)));
    json_object_set_new(o, "name", srv_json_bytes(c->name, strlen(c->name)));
    json_object_set_new(o, "arguments", done ? srv_json_bytes(c->arguments, strlen(c->arguments)) : json_string(""));
    json_object_set_new(o, "status", json_string(done ? "completed" : "in_progress"));
    return o;
}

static json_t *message_item_text(srv_req *r, const char *text, size_t len) {
    char id[80];
    item_id(r, id, sizeof id);
    json_t *o = json_pack("{ssssss}", "id", id, "type", "message", "role", "assistant");
    json_object_set_new(o, "status", json_string(incomplete(r) ? "incomplete" : "completed"));
    json_t *p = json_pack("{sss[]s[]}", "type", "output_text", "annotations", "logprobs");
    json_object_set_new(p, "text", srv_json_bytes(text, len));
    json_object_set_new(o, "content", json_pack("[o]", p));
    return o;
}

/* The final output items of a parsed answer; NULL when out of memory. */
static json_t *parsed_output(srv_req *r) {
    srv_chat_out po;
    if (srv_choice_parse(r, 0, &po)) return NULL;
    json_t *a = json_array();
    if (po.reasoning.len) json_array_append_new(a, reasoning_item(r, po.reasoning.p, po.reasoning.len, true));
    bool blank = true;
    for (size_t k = 0; k < po.content.len && blank; k++) blank = strchr(" \t\r\n", po.content.p[k]) != NULL;
    if (!blank || !po.n_calls) json_array_append_new(a, message_item_text(r, po.content.p ? po.content.p : "", po.content.len));
    for (size_t k = 0; k < po.n_calls; k++) json_array_append_new(a, call_item(r, &po.calls[k], (int)k, true));
    srv_chat_out_free(&po);
    return a;
}

static json_t *part_event(srv_req *r);

/* Closes the open reasoning or message item with its .done events. */
static void close_item(srv_req *r) {
    srv_chat_out *cur = &r->ch[0].cs.cur;
    if (r->api_open == 2) {
        char id[80];
        item_id_of(r, "rs", -1, id, sizeof id);
        json_t *o = json_pack("{sssisi}", "item_id", id, "output_index", r->api_items, "content_index", 0);
        json_object_set_new(o, "text", srv_json_bytes(cur->reasoning.p ? cur->reasoning.p : "", cur->reasoning.len));
        event(r, "response.reasoning_text.done", o);
        event(r, "response.output_item.done", json_pack("{siso}", "output_index", r->api_items, "item",
                                                        reasoning_item(r, cur->reasoning.p, cur->reasoning.len, true)));
    } else if (r->api_open == 1) {
        json_t *o = part_event(r);
        json_object_set_new(o, "text", srv_json_bytes(cur->content.p ? cur->content.p : "", cur->content.len));
        json_object_set_new(o, "logprobs", json_array());
        event(r, "response.output_text.done", o);
        json_t *p = json_pack("{sss[]s[]}", "type", "output_text", "annotations", "logprobs");
        json_object_set_new(p, "text", srv_json_bytes(cur->content.p ? cur->content.p : "", cur->content.len));
        o = part_event(r);
        json_object_set_new(o, "part", p);
        event(r, "response.content_part.done", o);
        event(r, "response.output_item.done", json_pack("{siso}", "output_index", r->api_items, "item",
                                                        message_item_text(r, cur->content.p ? cur->content.p : "", cur->content.len)));
    } else if (r->api_open == 3) {
        char id[80];
        item_id_of(r, "fc", r->api_call_idx, id, sizeof id);
        srv_tool_call c = {.id = r->api_call_id, .name = r->api_call_name, .arguments = r->api_args.p ? r->api_args.p : ""};
        json_t *o = json_pack("{sssi}", "item_id", id, "output_index", r->api_items);
        json_object_set_new(o, "name", srv_json_bytes(c.name, strlen(c.name)));
        json_object_set_new(o, "arguments", srv_json_bytes(c.arguments, r->api_args.len));
        event(r, "response.function_call_arguments.done", o);
        event(r, "response.output_item.done", json_pack("{siso}", "output_index", r->api_items, "item", call_item(r, &c, r->api_call_idx, true)));
    } else {
        return;
    }
    r->api_items++;
    r->api_open = 0;
}

/* A tool call's parts (tool_calls.h) as a function_call item: the first opens it, the rest are
 * response.function_call_arguments.delta pieces; close_item sends its .done events. */
static void call_part(srv_req *r, const srv_call_part *p) {
    if (p->name) {
        close_item(r);
        free(r->api_call_id);
        free(r->api_call_name);
        r->api_call_id = strdup(p->id);
        r->api_call_name = strdup(p->name);
        r->api_call_idx = (int)p->index;
        r->api_args.len = 0;
        if (!r->api_call_id || !r->api_call_name) {
            r->out.oom = true;
            return;
        }
        srv_tool_call c = {.id = r->api_call_id, .name = r->api_call_name, .arguments = ""};
        event(r, "response.output_item.added", json_pack("{siso}", "output_index", r->api_items, "item", call_item(r, &c, r->api_call_idx, false)));
        r->api_open = 3;
    }
    if (!p->args_len || r->api_open != 3) return;
    char id[80];
    item_id_of(r, "fc", r->api_call_idx, id, sizeof id);
    json_t *o = json_pack("{sssi}", "item_id", id, "output_index", r->api_items);
    json_object_set_new(o, "delta", srv_json_bytes(p->args, p->args_len));
    event(r, "response.function_call_arguments.delta", o);
    srv_buf_add(&r->api_args, p->args, p->args_len);
    if (r->api_args.oom) r->out.oom = true;
}

static void open_item(srv_req *r, int kind) {
    if (r->api_open == kind) return;
    close_item(r);
    r->api_open = kind;
    if (kind == 2) {
        event(r, "response.output_item.added", json_pack("{siso}", "output_index", r->api_items, "item", reasoning_item(r, "", 0, false)));
        return;
    }
    event(r, "response.output_item.added", json_pack("{siso}", "output_index", r->api_items, "item", message_item(r, false)));
    json_t *o = part_event(r);
    json_object_set_new(o, "part", text_part(r, false));
    event(r, "response.content_part.added", o);
}

static void stream_parsed(srv_req *r, const char *text, size_t len, bool final) {
    srv_chat_delta d;
    if (!srv_choice_feed(r, 0, text, len, final, &d)) return;
    size_t i = 0; /* the open call's pieces first: text in the same feed comes after them */
    for (; i < d.n_parts && !d.parts[i].name && r->api_open == 3; i++) call_part(r, &d.parts[i]);
    if (d.reasoning_len) {
        open_item(r, 2);
        char id[80];
        item_id_of(r, "rs", -1, id, sizeof id);
        json_t *o = json_pack("{sssisi}", "item_id", id, "output_index", r->api_items, "content_index", 0);
        json_object_set_new(o, "delta", srv_json_bytes(d.reasoning, d.reasoning_len));
        event(r, "response.reasoning_text.delta", o);
    }
    bool blank = true;
    for (size_t k = 0; k < d.content_len && blank; k++) blank = strchr(" \t\r\n", d.content[k]) != NULL;
    if (d.content_len && blank && r->api_open != 1) { /* no message item for the newlines between calls */
        srv_buf_add(&r->api_ws, d.content, d.content_len);
    } else if (d.content_len) {
        open_item(r, 1);
        for (int k = 0; k < 2; k++) {
            const char *t = k ? d.content : r->api_ws.p;
            size_t n = k ? d.content_len : r->api_ws.len;
            if (!n) continue;
            json_t *o = part_event(r);
            json_object_set_new(o, "delta", srv_json_bytes(t, n));
            json_object_set_new(o, "logprobs", json_array());
            event(r, "response.output_text.delta", o);
        }
        r->api_ws.len = 0;
    }
    for (; i < d.n_parts; i++) call_part(r, &d.parts[i]);
    if (final) {
        if (!r->api_items && !r->api_open) open_item(r, 1); /* an empty answer: one empty message */
        close_item(r);
    }
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
    json_t *out = NULL;
    if (done && r->p.parse_output) out = parsed_output(r);
    if (!out) {
        out = json_array();
        if (done) json_array_append_new(out, message_item(r, true));
    }
    json_object_set_new(o, "output", out);
    json_object_set_new(o, "parallel_tool_calls", json_true());
    json_object_set_new(o, "previous_response_id", json_null());
    json_object_set_new(o, "store", json_false());
    json_object_set_new(o, "temperature", json_real(r->p.sp.temperature));
    json_object_set_new(o, "top_p", json_real(r->p.sp.top_p));
    json_object_set_new(o, "text", json_pack("{s{ss}}", "format", "type", "text"));
    json_object_set_new(o, "tool_choice", json_string("auto"));
    json_object_set_new(o, "tools", json_array());
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "metadata", json_object());
    json_object_set_new(o, "usage", done ? usage(r) : json_null());
    return o;
}

/* The message's content-part and text events: output_index is the message item's place, which
 * a reasoning item (or a call) before it moves off 0 (api_items stays 0 on the plain path). */
static json_t *part_event(srv_req *r) {
    char id[80];
    item_id(r, id, sizeof id);
    return json_pack("{sssisi}", "item_id", id, "output_index", r->api_items, "content_index", 0);
}

void srv_responses_stream_start(srv_req *r) {
    event(r, "response.created", json_pack("{so}", "response", response(r, false)));
    event(r, "response.in_progress", json_pack("{so}", "response", response(r, false)));
    if (r->p.parse_output) return; /* the items open as the parse finds them */
    event(r, "response.output_item.added", json_pack("{siso}", "output_index", 0, "item", message_item(r, false)));
    json_t *o = part_event(r);
    if (o) json_object_set_new(o, "part", text_part(r, false));
    event(r, "response.content_part.added", o);
}

static void text_plain(srv_req *r, const char *text, size_t len);

void srv_responses_text(srv_req *r, const char *text, size_t len, bool final) {
    if (r->inject) { /* tests (X-RF-Test-Output): the answer is the injected text, in small pieces at the end */
        if (!final) return;
        r->ch[0].text.len = 0;
        r->ch[0].finish = RF_FINISH_STOP;
        if (!r->stream || !r->p.parse_output) {
            text_plain(r, r->inject, r->inject_len);
            return;
        }
        for (size_t o = 0; o < r->inject_len; o += 3)
            stream_parsed(r, r->inject + o, r->inject_len - o < 3 ? r->inject_len - o : 3, false);
        stream_parsed(r, "", 0, true);
        return;
    }
    if (r->stream && r->p.parse_output) {
        stream_parsed(r, text, len, final);
        return;
    }
    (void)final;
    text_plain(r, text, len);
}

static void text_plain(srv_req *r, const char *text, size_t len) {
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
    if (r->p.parse_output) {
        event(r, incomplete(r) ? "response.incomplete" : "response.completed", json_pack("{so}", "response", response(r, true)));
        return;
    }
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
