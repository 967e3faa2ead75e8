/* server_out_messages.c — the answer of POST /v1/messages in Anthropic's shapes: the message
 * object, the stream's named events (message_start, content_block_start, ping,
 * content_block_delta, content_block_stop, message_delta, message_stop), error events, and
 * which stop sequence ended the text. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

void srv_buf_sse_event(srv_buf *b, const char *name, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!s) {
        b->oom = true;
        return;
    }
    srv_buf_printf(b, "event: %s\ndata: ", name);
    srv_buf_add(b, s, strlen(s));
    srv_buf_add(b, "\n\n", 2);
    free(s);
}

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
        json_t *b = json_pack("{ss}", "type", "text");
        if (b) json_object_set_new(b, "text", srv_json_bytes(ch->text.p ? ch->text.p : "", ch->text.len));
        json_array_append_new(content, b);
        json_object_set_new(o, "content", content);
        json_object_set_new(o, "stop_reason", json_string(srv_anthropic_stop_reason(ch->finish)));
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
    srv_buf_sse_event(&r->out, "content_block_stop", json_pack("{sssi}", "type", "content_block_stop", "index", 0));
    const char *hit = stop_hit(r);
    json_t *d = json_object();
    json_object_set_new(d, "stop_reason", json_string(srv_anthropic_stop_reason(r->ch[0].finish)));
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
