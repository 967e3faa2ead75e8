/* server_out_messages.c — the answer of POST /v1/messages in Anthropic's shapes: the message
 * object, the stream's named events (message_start, content_block_start, ping,
 * content_block_delta, content_block_stop, message_delta, message_stop), error events, and
 * which stop sequence ended the text. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

/* The stop sequence that ended the text: the only one, or, of several, the one whose first
 * occurrence in the generated pieces ends first (the engine stops at the first completed
 * match). NULL when none is found. */
static const char *stop_hit(srv_req *r) {
    if (r->ch[0].finish != RF_FINISH_STOP || r->p.n_stop == 0) return NULL;
    if (r->p.n_stop == 1) return r->p.stop[0];
    const char *best = NULL;
    size_t best_end = (size_t)-1;
    for (int i = 0; i < r->p.n_stop; i++) {
        const char *hit = r->api_raw.p ? memmem(r->api_raw.p, r->api_raw.len, r->p.stop[i], r->p.stop_len[i]) : NULL;
        if (!hit) continue;
        size_t end = (size_t)(hit - r->api_raw.p) + r->p.stop_len[i];
        if (end < best_end) best_end = end, best = r->p.stop[i];
    }
    return best;
}

/* ---- answers parsed into thinking, text and tool_use blocks --------------------------------
 * With the chat path's answer parser (tool_calls.h, when this tree has it) a request whose
 * template has a tool-call syntax or reasoning gets Anthropic's blocks: thinking, text and
 * tool_use (input_json_delta when streamed), stop_reason tool_use. Without it, one text block. */
static bool parsed(const srv_req *r) { return r->p.parse_output; }

static size_t n_calls(srv_req *r) { return parsed(r) ? r->ch[0].cs.cur.n_calls : 0; }

static json_t *tool_use_block(const srv_tool_call *c, bool with_input) {
    json_t *b = json_pack("{ss}", "type", "tool_use");
    if (!b) return NULL;
    json_object_set_new(b, "id", srv_json_bytes(c->id, strlen(c->id)));
    json_object_set_new(b, "name", srv_json_bytes(c->name, strlen(c->name)));
    json_t *in = with_input ? json_loads(c->arguments, JSON_ALLOW_NUL, NULL) : NULL;
    json_object_set_new(b, "input", json_is_object(in) ? in : (json_decref(in), json_object()));
    return b;
}

/* The final content blocks of a parsed answer; NULL when out of memory. */
static json_t *parsed_blocks(srv_req *r, size_t *calls) {
    srv_chat_out po;
    if (srv_choice_parse(r, 0, &po)) return NULL;
    json_t *a = json_array();
    if (po.reasoning.len) {
        json_t *b = json_pack("{ssss}", "type", "thinking", "signature", "");
        json_object_set_new(b, "thinking", srv_json_bytes(po.reasoning.p, po.reasoning.len));
        json_array_append_new(a, b);
    }
    bool blank = true;
    for (size_t k = 0; k < po.content.len && blank; k++) blank = strchr(" \t\r\n", po.content.p[k]) != NULL;
    if (!blank || !po.n_calls) {
        json_t *b = json_pack("{ss}", "type", "text");
        json_object_set_new(b, "text", srv_json_bytes(po.content.p ? po.content.p : "", po.content.len));
        json_array_append_new(a, b);
    }
    for (size_t k = 0; k < po.n_calls; k++) json_array_append_new(a, tool_use_block(&po.calls[k], true));
    *calls = po.n_calls;
    srv_chat_out_free(&po);
    return a;
}

static void close_block(srv_req *r) {
    if (!r->api_open) return;
    srv_buf_sse_event(&r->out, "content_block_stop", json_pack("{sssi}", "type", "content_block_stop", "index", r->api_items));
    r->api_items++;
    r->api_open = 0;
}

/* kind 1: a text block, 2: a thinking block */
static void open_block(srv_req *r, int kind) {
    if (r->api_open == kind) return;
    close_block(r);
    json_t *b = kind == 1 ? json_pack("{ssss}", "type", "text", "text", "")
                          : json_pack("{ssssss}", "type", "thinking", "thinking", "", "signature", "");
    srv_buf_sse_event(&r->out, "content_block_start",
                      json_pack("{sssiso}", "type", "content_block_start", "index", r->api_items, "content_block", b));
    r->api_open = kind;
}

static void block_delta(srv_req *r, const char *type, const char *key, const char *text, size_t len) {
    json_t *d = json_pack("{ss}", "type", type);
    if (d) json_object_set_new(d, key, srv_json_bytes(text, len));
    srv_buf_sse_event(&r->out, "content_block_delta",
                      json_pack("{sssiso}", "type", "content_block_delta", "index", r->api_items, "delta", d));
}

/* A tool call's parts (tool_calls.h) as tool_use blocks: the first opens the block, the rest
 * are input_json_delta pieces of its input. */
static void call_part(srv_req *r, const srv_call_part *p) {
    if (p->name) {
        close_block(r);
        srv_tool_call c = {.id = (char *)p->id, .name = (char *)p->name};
        srv_buf_sse_event(&r->out, "content_block_start",
                          json_pack("{sssiso}", "type", "content_block_start", "index", r->api_items, "content_block",
                                    tool_use_block(&c, false)));
        r->api_open = 3;
    }
    if (p->args_len && r->api_open == 3) block_delta(r, "input_json_delta", "partial_json", p->args, p->args_len);
}

/* Streams what the parse of the text so far commits (final: all of it, and the blocks closed).
 * The open tool_use block's pieces go first: text in the same feed comes after them. */
static void stream_parsed(srv_req *r, const char *text, size_t len, bool final) {
    srv_chat_delta d;
    if (!srv_choice_feed(r, 0, text, len, final, &d)) return;
    size_t i = 0;
    for (; i < d.n_parts && !d.parts[i].name && r->api_open == 3; i++) call_part(r, &d.parts[i]);
    if (d.reasoning_len) {
        open_block(r, 2);
        block_delta(r, "thinking_delta", "thinking", d.reasoning, d.reasoning_len);
    }
    if (d.content_len) {
        bool blank = true;
        for (size_t k = 0; k < d.content_len && blank; k++) blank = strchr(" \t\r\n", d.content[k]) != NULL;
        if (blank && r->api_open != 1) { /* no text block for the newlines between calls */
            srv_buf_add(&r->api_ws, d.content, d.content_len);
        } else {
            open_block(r, 1);
            if (r->api_ws.len) block_delta(r, "text_delta", "text", r->api_ws.p, r->api_ws.len);
            r->api_ws.len = 0;
            block_delta(r, "text_delta", "text", d.content, d.content_len);
        }
    }
    for (; i < d.n_parts; i++) call_part(r, &d.parts[i]);
    if (final) {
        if (!r->api_items && !r->api_open) open_block(r, 1); /* an empty answer: one empty text block */
        close_block(r);
    }
}

static const char *stop_reason(srv_req *r, size_t calls) {
    rf_finish_reason f = r->ch[0].finish;
    if (calls && (f == RF_FINISH_EOS || f == RF_FINISH_STOP)) return "tool_use";
    return srv_anthropic_stop_reason(f);
}

static json_t *usage(srv_req *r, bool start) {
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(start || !r->u_prompt ? r->api_n_prompt : r->u_prompt));
    json_object_set_new(u, "output_tokens", json_integer(start ? 0 : r->u_completion));
    return u;
}

/* The message object; `done`: with its text, stop reason and usage (else as message_start has it). */
static json_t *message(srv_req *r, bool done) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "type", json_string("message"));
    json_object_set_new(o, "role", json_string("assistant"));
    json_object_set_new(o, "model", srv_json_bytes(r->s->alias, strlen(r->s->alias)));
    json_t *content = json_array();
    if (done) {
        srv_choice *ch = &r->ch[0];
        size_t calls = 0;
        if (parsed(r)) {
            json_decref(content);
            if (!(content = parsed_blocks(r, &calls))) {
                json_decref(o);
                return NULL;
            }
        } else
        {
            json_t *b = json_pack("{ss}", "type", "text");
            if (b) json_object_set_new(b, "text", srv_json_bytes(ch->text.p ? ch->text.p : "", ch->text.len));
            json_array_append_new(content, b);
        }
        json_object_set_new(o, "content", content);
        json_object_set_new(o, "stop_reason", json_string(stop_reason(r, calls)));
        const char *hit = stop_hit(r);
        json_object_set_new(o, "stop_sequence", hit ? srv_json_bytes(hit, strlen(hit)) : json_null());
    } else {
        json_object_set_new(o, "content", content);
        json_object_set_new(o, "stop_reason", json_null());
        json_object_set_new(o, "stop_sequence", json_null());
    }
    json_object_set_new(o, "usage", usage(r, !done));
    return o;
}

void srv_messages_stream_start(srv_req *r) {
    srv_buf_sse_event(&r->out, "message_start", json_pack("{ssso}", "type", "message_start", "message", message(r, false)));
    if (parsed(r)) { /* the blocks open as the parse finds them */
        srv_buf_sse_event(&r->out, "ping", json_pack("{ss}", "type", "ping"));
        return;
    }
    srv_buf_sse_event(&r->out, "content_block_start",
                      json_pack("{sssis{ssss}}", "type", "content_block_start", "index", 0, "content_block", "type", "text",
                                "text", ""));
    srv_buf_sse_event(&r->out, "ping", json_pack("{ss}", "type", "ping"));
}

void srv_messages_text(srv_req *r, const char *text, size_t len, int32_t token) {
    if (token >= 0 && r->p.n_stop > 1) { /* to name the stop sequence hit */
        char buf[256];
        size_t n = 0;
        if (!rf_token_to_piece(r->s->vocab, token, false, buf, sizeof buf, &n) && n <= sizeof buf) srv_buf_add(&r->api_raw, buf, n);
    }
    if (r->inject) { /* tests (X-RF-Test-Output): the answer is the injected text, in small pieces at the end */
        if (token >= 0) return;
        r->ch[0].text.len = 0;
        for (size_t o = 0; r->stream && parsed(r) && o < r->inject_len; o += 3)
            stream_parsed(r, r->inject + o, r->inject_len - o < 3 ? r->inject_len - o : 3, false);
        if (!r->stream || !parsed(r)) srv_buf_add(&r->ch[0].text, r->inject, r->inject_len);
        if (r->stream && !parsed(r)) {
            json_t *d = json_pack("{ss}", "type", "text_delta");
            if (d) json_object_set_new(d, "text", srv_json_bytes(r->inject, r->inject_len));
            srv_buf_sse_event(&r->out, "content_block_delta", json_pack("{sssiso}", "type", "content_block_delta", "index", 0, "delta", d));
        }
        if (r->stream && parsed(r)) stream_parsed(r, "", 0, true);
        r->ch[0].finish = RF_FINISH_STOP;
        return;
    }
    if (r->stream && parsed(r)) {
        stream_parsed(r, text, len, token < 0);
        return;
    }
    if (!len) return;
    if (!r->stream) {
        srv_buf_add(&r->ch[0].text, text, len);
        return;
    }
    json_t *d = json_pack("{ss}", "type", "text_delta");
    if (d) json_object_set_new(d, "text", srv_json_bytes(text, len));
    srv_buf_sse_event(&r->out, "content_block_delta", json_pack("{sssiso}", "type", "content_block_delta", "index", 0, "delta", d));
}

void srv_messages_stream_end(srv_req *r) {
    if (!parsed(r)) srv_buf_sse_event(&r->out, "content_block_stop", json_pack("{sssi}", "type", "content_block_stop", "index", 0));
    const char *hit = stop_hit(r);
    json_t *d = json_object();
    json_object_set_new(d, "stop_reason", json_string(stop_reason(r, n_calls(r))));
    json_object_set_new(d, "stop_sequence", hit ? srv_json_bytes(hit, strlen(hit)) : json_null());
    srv_buf_sse_event(&r->out, "message_delta",
                      json_pack("{sssoso}", "type", "message_delta", "delta", d, "usage", usage(r, false)));
    srv_buf_sse_event(&r->out, "message_stop", json_pack("{ss}", "type", "message_stop"));
}

void srv_messages_stream_error(srv_req *r) {
    char *j = srv_anthropic_error_json(&r->err);
    if (!j) {
        r->out.oom = true;
        return;
    }
    srv_buf_add(&r->out, "event: error\ndata: ", 19);
    srv_buf_add(&r->out, j, strlen(j));
    srv_buf_add(&r->out, "\n\n", 2);
    free(j);
}

json_t *srv_messages_final_json(srv_req *r) { return message(r, true); }
