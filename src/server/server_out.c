/* server_out.c — a request's output, from the engine's event to the bytes sent: the engine
 * callback that queues events, OpenAI chat and completion objects, SSE chunks exactly as the
 * OpenAI SDKs parse them, log-probabilities, usage, errors after a stream began, and the content
 * reader that feeds a stream to libmicrohttpd (other API shapes: server_out_messages.c,
 * server_out_responses.c; embeddings at the end). */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

/* ---- the engine thread's callback --------------------------------------------------------- */

static srv_event *event_copy(const rf_event *ev, int sub) {
    size_t len = 0;
    const char *t = rf_event_text(ev, &len);
    int32_t n_top = rf_event_n_top(ev);
    if (n_top < 0) n_top = 0;
    if (n_top > SRV_MAX_TOP_LOGPROBS) n_top = SRV_MAX_TOP_LOGPROBS;
    rf_event_kind kind = rf_event_get_kind(ev);
    rf_finish_reason fin = rf_event_finish(ev);
    const char *err = kind == RF_EVENT_DONE && fin == RF_FINISH_ERROR ? rf_event_error(ev) : NULL;
    size_t elen = err ? strlen(err) : 0;
    int32_t n_embd = 0;
    const float *embd = rf_event_embedding(ev, &n_embd); /* an embedding's vector, first (aligned) */
    size_t sz = sizeof(srv_event) + (size_t)n_embd * sizeof(float) + (size_t)n_top * (sizeof(int32_t) + sizeof(float)) +
                len + 1 + (err ? elen + 1 : 0);
    srv_event *e = malloc(sz);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    char *p = (char *)(e + 1);
    if (embd && n_embd > 0) {
        e->embd = (float *)p;
        e->n_embd = n_embd;
        memcpy(p, embd, (size_t)n_embd * sizeof(float));
        p += (size_t)n_embd * sizeof(float);
    }
    e->top_id = (int32_t *)p;
    p += (size_t)n_top * sizeof(int32_t);
    e->top_lp = (float *)p;
    p += (size_t)n_top * sizeof(float);
    e->text = p;
    if (len) memcpy(p, t, len);
    p[len] = 0;
    e->len = len;
    p += len + 1;
    if (err) {
        memcpy(p, err, elen + 1);
        e->error = p;
    }
    e->kind = kind;
    e->sub = sub;
    e->choice = rf_event_choice(ev);
    e->token = rf_event_token(ev);
    e->logprob = rf_event_logprob(ev);
    int32_t k = 0;
    for (int32_t i = 0; i < n_top; i++)
        if (rf_event_top(ev, i, &e->top_id[k], &e->top_lp[k])) k++;
    e->n_top = k;
    e->finish = fin;
    e->n_prompt = rf_event_n_prompt(ev);
    e->n_cached = rf_event_n_cached(ev);
    e->n_gen = rf_event_n_gen(ev);
    return e;
}

bool srv_on_engine_event(const rf_event *ev, void *user) {
    srv_sub *sb = user;
    srv_req *r = sb->req;
    srv *s = r->s;
    rf_event_kind kind = rf_event_get_kind(ev);
    int32_t choice = rf_event_choice(ev);
    if (choice < 0 || choice >= r->p.n) choice = 0;
    int ci = sb->idx * r->p.n + choice;
    double t = srv_now_s();
    if (kind == RF_EVENT_TOKEN) {
        if (!r->first_token) {
            r->first_token = true;
            srv_metrics_observe(&s->m, &s->m.ttft, t - r->t_arrival);
        }
        if (r->t_last[ci] > 0) srv_metrics_observe(&s->m, &s->m.itl, t - r->t_last[ci]);
        r->t_last[ci] = t;
    }
    srv_event *e = r->fault_oom ? NULL : event_copy(ev, sb->idx);
    bool done = kind == RF_EVENT_DONE;
    pthread_mutex_lock(&r->mu);
    if (e) {
        *r->qt = e;
        r->qt = &e->next;
    }
    if (done) r->engine_done++;
    bool all = r->engine_done >= r->n_choices;
    bool wake = srv_req_step(r, e ? SRV_IN_EVENT : SRV_IN_LOST);
    bool go = !srv_req_ending(r) && e;
    struct MHD_Connection *conn = r->conn;
    pthread_mutex_unlock(&r->mu);
    if (wake) MHD_resume_connection(conn);
    if (done) {
        pthread_mutex_lock(&s->m.mu);
        rf_finish_reason f = rf_event_finish(ev);
        if ((unsigned)f < 8) s->m.finish[f]++;
        s->m.completion_tokens += (uint64_t)(rf_event_n_gen(ev) > 0 ? rf_event_n_gen(ev) : 0);
        if (sb->n_done == 0) s->m.prompt_tokens += (uint64_t)(rf_event_n_prompt(ev) > 0 ? rf_event_n_prompt(ev) : 0);
        pthread_mutex_unlock(&s->m.mu);
        if (all) srv_metrics_observe(&s->m, &s->m.e2e, t - r->t_arrival);
        if (++sb->n_done == r->p.n) {
            atomic_fetch_sub(&s->active, 1);
            srv_req_unref(r);
        }
    }
    return go;
}

/* ---- turning events into output (the connection's thread) -------------------------------- */

/* A log-probability as JSON: -9999.0 for -inf or NaN (JSON has no infinities). */
static json_t *srv_json_logprob(float lp) {
    if (!isfinite(lp)) return json_real(-9999.0);
    return json_real((double)lp);
}

/* The finish reason OpenAI clients know: eos/stop -> "stop", length/context -> "length". */
static const char *srv_finish_str(rf_finish_reason f) {
    switch (f) {
    case RF_FINISH_EOS:
    case RF_FINISH_STOP: return "stop";
    case RF_FINISH_LENGTH:
    case RF_FINISH_CONTEXT: return "length";
    default: return "stop";
    }
}

/* Appends the SSE frame "data: <compact json>\n\n" and consumes j (decref). */
static void srv_buf_sse(srv_buf *b, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!s) {
        b->oom = true;
        return;
    }
    srv_buf_add(b, "data: ", 6);
    srv_buf_add(b, s, strlen(s));
    srv_buf_add(b, "\n\n", 2);
    free(s);
}

static void piece_of(srv *s, int32_t id, char *buf, size_t cap, size_t *n) {
    *n = 0;
    if (rf_token_to_piece(s->vocab, id, true, buf, cap, n) || *n > cap) *n = *n > cap ? cap : 0;
}

static json_t *bytes_array(const char *p, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* chat: {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]} */
static json_t *chat_logprob(srv *s, const srv_event *e) {
    char buf[256];
    size_t n;
    piece_of(s, e->token, buf, sizeof buf, &n);
    json_t *o = json_object();
    json_object_set_new(o, "token", srv_json_bytes(buf, n));
    json_object_set_new(o, "logprob", srv_json_logprob(e->logprob));
    json_object_set_new(o, "bytes", bytes_array(buf, n));
    json_t *top = json_array();
    for (int32_t i = 0; i < e->n_top; i++) {
        piece_of(s, e->top_id[i], buf, sizeof buf, &n);
        json_t *t = json_object();
        json_object_set_new(t, "token", srv_json_bytes(buf, n));
        json_object_set_new(t, "logprob", srv_json_logprob(e->top_lp[i]));
        json_object_set_new(t, "bytes", bytes_array(buf, n));
        json_array_append_new(top, t);
    }
    json_object_set_new(o, "top_logprobs", top);
    return o;
}

/* completions: appends one token to {"tokens", "token_logprobs", "top_logprobs", "text_offset"} */
static void text_logprob_add(srv *s, json_t *lp, const srv_event *e, size_t offset) {
    char buf[256];
    size_t n;
    piece_of(s, e->token, buf, sizeof buf, &n);
    json_array_append_new(json_object_get(lp, "tokens"), srv_json_bytes(buf, n));
    json_array_append_new(json_object_get(lp, "token_logprobs"), srv_json_logprob(e->logprob));
    json_t *top = json_object();
    if (e->n_top == 0) {
        json_t *k = srv_json_bytes(buf, n);
        if (k) json_object_set_new(top, json_string_value(k), srv_json_logprob(e->logprob));
        json_decref(k);
    }
    for (int32_t i = 0; i < e->n_top; i++) {
        piece_of(s, e->top_id[i], buf, sizeof buf, &n);
        json_t *k = srv_json_bytes(buf, n);
        if (k && !json_object_get(top, json_string_value(k)))
            json_object_set_new(top, json_string_value(k), srv_json_logprob(e->top_lp[i]));
        json_decref(k);
    }
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
}

static json_t *text_logprob_new(void) {
    return json_pack("{s[]s[]s[]s[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

static const char *k_fingerprint = "fp_rocmforge_" RF_VERSION_STRING;

/* The frame every chunk shares; `choices` is consumed. */
static json_t *chunk_frame(srv_req *r, json_t *choices) {
    bool chat = r->p.route == SRV_ROUTE_CHAT;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(chat ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", srv_json_bytes(r->s->alias, strlen(r->s->alias)));
    json_object_set_new(o, "system_fingerprint", json_string(k_fingerprint));
    json_object_set_new(o, "choices", choices);
    if (r->p.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* One streamed chunk for choice `index`: chat `delta` (consumed) or completions `text`. */
static void emit_chunk(srv_req *r, int index, json_t *delta, const char *text, size_t len, json_t *logprobs,
                       const char *finish) {
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(index));
    if (r->p.route == SRV_ROUTE_CHAT) json_object_set_new(c, "delta", delta ? delta : json_object());
    else json_object_set_new(c, "text", srv_json_bytes(text ? text : "", text ? len : 0));
    json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *arr = json_array();
    json_array_append_new(arr, c);
    srv_buf_sse(&r->out, chunk_frame(r, arr));
}

static json_t *usage_json(srv_req *r) {
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(r->u_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(r->u_completion));
    json_object_set_new(u, "total_tokens", json_integer(r->u_prompt + r->u_completion));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(r->u_cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

static json_t *delta_content(const char *text, size_t len) {
    json_t *d = json_object();
    json_object_set_new(d, "content", srv_json_bytes(text, len));
    return d;
}

/* ---- chat answers with reasoning and tool calls (tool_calls.h) ---------------------------- */

/* "finish_reason": tool_calls when the answer ended with calls */
static const char *finish_of(const srv_req *r, rf_finish_reason f, size_t n_calls) {
    if (n_calls && (f == RF_FINISH_EOS || f == RF_FINISH_STOP) && r->p.route == SRV_ROUTE_CHAT) return "tool_calls";
    return srv_finish_str(f);
}

/* The streamed tool-call deltas as the OpenAI SDKs accumulate them: a call's first delta names
 * it (index, id, type, function.name, empty arguments), the next ones carry pieces of its
 * arguments that the client concatenates (tool_calls.h: srv_call_part). */
static void emit_calls(srv_req *r, int ci, const srv_chat_delta *d) {
    for (size_t k = 0; k < d->n_parts; k++) {
        const srv_call_part *c = &d->parts[k];
        if (!c->name && !c->args_len) continue;
        json_t *f = json_object(), *tc = json_object(), *a = json_array(), *dl = json_object();
        if (c->name) json_object_set_new(f, "name", srv_json_bytes(c->name, strlen(c->name)));
        json_object_set_new(f, "arguments", srv_json_bytes(c->args ? c->args : "", c->args_len));
        json_object_set_new(tc, "index", json_integer((json_int_t)c->index));
        if (c->name) {
            json_object_set_new(tc, "id", srv_json_bytes(c->id, strlen(c->id)));
            json_object_set_new(tc, "type", json_string("function"));
        }
        json_object_set_new(tc, "function", f);
        json_array_append_new(a, tc);
        json_object_set_new(dl, "tool_calls", a);
        emit_chunk(r, ci, dl, NULL, 0, NULL, NULL);
    }
}

/* Adds text to a parsed chat choice and streams what the parse now commits; lp is consumed. */
static void stream_parsed(srv_req *r, int ci, const char *text, size_t len, json_t *lp, bool final) {
    srv_chat_delta d;
    if (!srv_choice_feed(r, ci, text, len, final, &d)) {
        json_decref(lp);
        return;
    }
    if (d.reasoning_len) {
        json_t *dl = json_object();
        json_object_set_new(dl, "reasoning_content", srv_json_bytes(d.reasoning, d.reasoning_len));
        emit_chunk(r, ci, dl, NULL, 0, lp, NULL);
        lp = NULL;
    }
    if (d.content_len) {
        emit_chunk(r, ci, delta_content(d.content, d.content_len), NULL, 0, lp, NULL);
        lp = NULL;
    }
    emit_calls(r, ci, &d);
    if (lp) emit_chunk(r, ci, json_object(), NULL, 0, lp, NULL);
}

/* tests (X-RF-Test-Output): the injected answer, streamed in small pieces so that markers
 * straddle chunks as model tokens do */
static void stream_injected(srv_req *r, int ci) {
    for (size_t o = 0; o < r->inject_len; o += 3) {
        size_t k = r->inject_len - o < 3 ? r->inject_len - o : 3;
        stream_parsed(r, ci, r->inject + o, k, NULL, false);
    }
}

static void emit_error_chunk(srv_req *r) {
    if (r->p.api == SRV_API_MESSAGES) {
        srv_messages_stream_error(r);
        return;
    }
    if (r->p.api == SRV_API_RESPONSES) {
        srv_responses_stream_error(r);
        return;
    }
    char *j = srv_error_json(&r->err);
    if (!j) {
        r->out.oom = true;
        return;
    }
    srv_buf_add(&r->out, "data: ", 6);
    srv_buf_add(&r->out, j, strlen(j));
    srv_buf_add(&r->out, "\n\n", 2);
    free(j);
}

/* The stream's opening: chat choices get their {"role": "assistant"} delta, echoed
 * completions their prompt. */
static void stream_start(srv_req *r) {
    if (r->p.api == SRV_API_MESSAGES) {
        srv_messages_stream_start(r);
        return;
    }
    if (r->p.api == SRV_API_RESPONSES) {
        srv_responses_stream_start(r);
        return;
    }
    for (int i = 0; i < r->n_choices; i++) {
        if (r->p.route == SRV_ROUTE_CHAT) {
            emit_chunk(r, i, json_pack("{ss}", "role", "assistant"), NULL, 0, NULL, NULL);
        } else if (r->p.echo) {
            int sub = i / r->p.n;
            emit_chunk(r, i, NULL, r->echo[sub], r->echo_len[sub], NULL, NULL);
        }
    }
}

void srv_set_error(srv_req *r, int status, const char *type, const char *code, const char *fmt, ...) {
    if (r->errored) return;
    r->errored = true;
    r->err.status = status;
    r->err.type = type;
    r->err.code = code;
    r->err.param[0] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err.message, sizeof r->err.message, fmt, ap);
    va_end(ap);
}

/* Applies a list of events to the request: stream chunks into r->out, or the outputs. */
void srv_consume(srv_req *r, srv_event *list) {
    srv *s = r->s;
    bool chat = r->p.route == SRV_ROUTE_CHAT;
    for (srv_event *e = list; e; e = e->next) {
        int ci = e->sub * r->p.n + (e->choice >= 0 && e->choice < r->p.n ? e->choice : 0);
        if (ci < 0 || ci >= r->n_choices) continue;
        srv_choice *ch = &r->ch[ci];
        if (e->kind == RF_EVENT_TOKEN) {
            if (r->errored || ch->done) continue;
            if (r->p.api) { /* Messages / Responses: one choice, no logprobs */
                if (r->p.api == SRV_API_MESSAGES) srv_messages_text(r, e->text, e->len, e->token);
                else srv_responses_text(r, e->text, e->len, false);
                ch->offset += e->len;
                continue;
            }
            json_t *lp = NULL;
            if (r->p.logprobs >= 0 && e->token >= 0) {
                if (chat) {
                    if (r->stream) {
                        lp = json_object();
                        json_t *arr = json_array();
                        json_array_append_new(arr, chat_logprob(s, e));
                        json_object_set_new(lp, "content", arr);
                    } else {
                        if (!ch->lp) ch->lp = json_array();
                        json_array_append_new(ch->lp, chat_logprob(s, e));
                    }
                } else {
                    json_t *dst = r->stream ? (lp = text_logprob_new()) : (ch->lp ? ch->lp : (ch->lp = text_logprob_new()));
                    text_logprob_add(s, dst, e, ch->offset);
                }
            }
            if (r->inject) {
                json_decref(lp); /* the model's own text is replaced at the end */
            } else if (r->stream && chat && r->p.parse_output) {
                stream_parsed(r, ci, e->text, e->len, lp, false);
            } else if (r->stream) {
                if (e->len || lp) emit_chunk(r, ci, chat ? delta_content(e->text, e->len) : NULL, e->text, e->len, lp, NULL);
            } else {
                srv_buf_add(&ch->text, e->text, e->len);
            }
            ch->offset += e->len;
            continue;
        }
        /* DONE */
        if (ch->done) continue;
        ch->done = true;
        r->consumed_done++;
        r->u_completion += e->n_gen > 0 ? e->n_gen : 0;
        if (!r->sub_counted[e->sub]) {
            r->sub_counted[e->sub] = true;
            r->u_prompt += e->n_prompt > 0 ? e->n_prompt : 0;
            r->u_cached += e->n_cached > 0 ? e->n_cached : 0;
        }
        if (e->finish == RF_FINISH_ERROR) {
            if (!r->errored) {
                srv_set_error(r, 503, "server_error", NULL, "the engine failed this request: %s", e->error ? e->error : "unknown error");
                if (r->stream) emit_error_chunk(r);
                srv_req_cancel(s, r); /* the other choices are of no use now */
            }
            continue;
        }
        if (e->finish == RF_FINISH_CANCELLED) {
            bool shut;
            pthread_mutex_lock(&r->mu);
            shut = r->st.end == SRV_END_SHUTDOWN;
            pthread_mutex_unlock(&r->mu);
            if (!r->errored) {
                if (shut) srv_set_error(r, 503, "unavailable_error", "shutting_down", "the server is shutting down");
                else srv_set_error(r, 503, "server_error", NULL, "the request was cancelled");
                if (r->stream) emit_error_chunk(r);
            }
            continue;
        }
        if (r->errored) continue;
        if (r->p.route == SRV_ROUTE_EMBEDDINGS) {
            srv_embed_consume(r, ch, e);
            continue;
        }
        if (r->p.api) { /* Messages / Responses: their own output (the test hook's answer included) */
            ch->finish = e->finish;
            if (r->p.api == SRV_API_MESSAGES) srv_messages_text(r, e->text, e->len, -1);
            else srv_responses_text(r, e->text, e->len, true);
            ch->offset += e->len;
            continue;
        }
        ch->finish = r->inject ? RF_FINISH_STOP : e->finish; /* tests: the injected answer is whole */
        const char *dtext = r->inject ? r->inject : e->text;
        size_t dlen = r->inject ? r->inject_len : e->len;
        if (r->inject && r->stream && chat) {
            if (!r->p.parse_output) emit_chunk(r, ci, delta_content(dtext, dlen), NULL, 0, NULL, NULL);
            else stream_injected(r, ci);
        }
        if (r->stream && chat && r->p.parse_output) {
            if (!r->inject) stream_parsed(r, ci, e->text, e->len, NULL, true);
            else stream_parsed(r, ci, "", 0, NULL, true);
            emit_chunk(r, ci, json_object(), NULL, 0, NULL, finish_of(r, ch->finish, ch->cs.cur.n_calls));
        } else if (r->stream && r->inject && chat) {
            emit_chunk(r, ci, json_object(), NULL, 0, NULL, srv_finish_str(ch->finish));
        } else if (!r->stream && r->inject) {
            ch->text.len = 0;
            srv_buf_add(&ch->text, dtext, dlen);
        } else if (r->stream) {
            if (e->len) emit_chunk(r, ci, chat ? delta_content(e->text, e->len) : NULL, e->text, e->len, NULL, NULL);
            emit_chunk(r, ci, chat ? json_object() : NULL, "", 0, NULL, srv_finish_str(e->finish));
        } else {
            srv_buf_add(&ch->text, e->text, e->len);
        }
        ch->offset += e->len;
    }
}

void srv_free_events(srv_event *e) {
    while (e) {
        srv_event *n = e->next;
        free(e);
        e = n;
    }
}

/* Takes the queued events; *all: every choice's DONE is queued. Under r->mu. */
srv_event *srv_take_events(srv_req *r, bool *all) {
    srv_event *l = r->qh;
    r->qh = NULL;
    r->qt = &r->qh;
    *all = r->engine_done >= r->n_choices;
    return l;
}


json_t *srv_final_json(srv_req *r) {
    if (r->p.api == SRV_API_MESSAGES) return srv_messages_final_json(r);
    if (r->p.api == SRV_API_RESPONSES) return srv_responses_final_json(r);
    if (r->p.route == SRV_ROUTE_EMBEDDINGS) return srv_embeddings_final_json(r);
    bool chat = r->p.route == SRV_ROUTE_CHAT;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(chat ? "chat.completion" : "text_completion"));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", srv_json_bytes(r->s->alias, strlen(r->s->alias)));
    json_object_set_new(o, "system_fingerprint", json_string(k_fingerprint));
    json_t *arr = json_array();
    for (int i = 0; i < r->n_choices; i++) {
        srv_choice *ch = &r->ch[i];
        json_t *c = json_object();
        json_object_set_new(c, "index", json_integer(i));
        if (chat) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            size_t n_calls = 0;
            if (r->p.parse_output) {
                srv_chat_out po;
                if (srv_choice_parse(r, i, &po)) {
                    json_decref(msg);
                    json_decref(c);
                    json_decref(arr);
                    json_decref(o);
                    return NULL;
                }
                n_calls = po.n_calls;
                bool blank = true;
                for (size_t k = 0; k < po.content.len && blank; k++) blank = strchr(" \t\r\n", po.content.p[k]) != NULL;
                json_object_set_new(msg, "content", n_calls && blank ? json_null()
                                                                     : srv_json_bytes(po.content.p ? po.content.p : "", po.content.len));
                if (po.reasoning.len) json_object_set_new(msg, "reasoning_content", srv_json_bytes(po.reasoning.p, po.reasoning.len));
                json_t *tc = srv_tool_calls_json(&po);
                if (tc) json_object_set_new(msg, "tool_calls", tc);
                srv_chat_out_free(&po);
            } else {
                json_object_set_new(msg, "content", srv_json_bytes(ch->text.p ? ch->text.p : "", ch->text.len));
            }
            json_object_set_new(c, "message", msg);
            json_object_set_new(c, "finish_reason", json_string(finish_of(r, ch->finish, n_calls)));
            if (r->p.logprobs >= 0) {
                json_t *lp = json_object();
                json_object_set_new(lp, "content", ch->lp ? json_incref(ch->lp) : json_array());
                json_object_set_new(c, "logprobs", lp);
            } else {
                json_object_set_new(c, "logprobs", json_null());
            }
        } else {
            srv_buf t = {0};
            int sub = i / r->p.n;
            if (r->p.echo) srv_buf_add(&t, r->echo[sub], r->echo_len[sub]);
            srv_buf_add(&t, ch->text.p ? ch->text.p : "", ch->text.len);
            json_object_set_new(c, "text", srv_json_bytes(t.p ? t.p : "", t.len));
            srv_buf_free(&t);
            if (r->p.logprobs >= 0) json_object_set_new(c, "logprobs", ch->lp ? json_incref(ch->lp) : text_logprob_new());
            else json_object_set_new(c, "logprobs", json_null());
        }
        if (!chat) json_object_set_new(c, "finish_reason", json_string(srv_finish_str(ch->finish)));
        json_array_append_new(arr, c);
    }
    json_object_set_new(o, "choices", arr);
    json_object_set_new(o, "usage", usage_json(r));
    return o;
}

/* ---- streaming ---------------------------------------------------------------------------- */

ssize_t srv_stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_req *r = cls;
    srv *s = r->s;
    (void)pos;
    for (;;) {
        if (r->out_off < r->out.len) {
            size_t n = r->out.len - r->out_off;
            if (n > max) n = max;
            memcpy(buf, r->out.p + r->out_off, n);
            r->out_off += n;
            if (r->out_off == r->out.len) r->out_off = r->out.len = 0;
            atomic_store(&r->t_write_ms, srv_now_ms());
            return (ssize_t)n;
        }
        if (r->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r->out_state == SRV_OUT_ENDED) return MHD_CONTENT_READER_END_OF_STREAM;
        if (r->out_state == SRV_OUT_NEW) {
            r->out_state = SRV_OUT_OPEN;
            stream_start(r);
            continue;
        }
        pthread_mutex_lock(&r->mu);
        if (r->st.end == SRV_END_CLIENT_GONE) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        bool all;
        srv_event *l = srv_take_events(r, &all);
        bool ping = srv_req_step(r, SRV_IN_TAKE_PING);
        bool lost = r->st.lost;
        bool gone = atomic_load(&s->engine_gone);
        if (!l && !ping && !all && !lost && !gone) {
            srv_req_step(r, SRV_IN_WAIT);
            MHD_suspend_connection(r->conn);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        pthread_mutex_unlock(&r->mu);
        if (ping) srv_buf_add(&r->out, ": ping\n\n", 8);
        srv_consume(r, l);
        srv_free_events(l);
        if (lost && !r->errored) {
            srv_set_error(r, 503, "server_error", NULL, "out of memory while streaming the response");
            emit_error_chunk(r);
            srv_req_cancel(s, r);
        }
        if (gone && !all && !r->errored) {
            srv_set_error(r, 503, "unavailable_error", "shutting_down", "the server is shutting down");
            emit_error_chunk(r);
        }
        /* the end: every choice done, or an error (sent above; what the other choices still
         * produce is dropped with the request) */
        if ((all || r->errored) && r->p.api) { /* their own closing events, no [DONE] */
            if (!r->errored) {
                if (r->p.api == SRV_API_MESSAGES) srv_messages_stream_end(r);
                else srv_responses_stream_end(r);
            }
            r->out_state = SRV_OUT_ENDED;
        } else if (all || r->errored) {
            if (r->p.include_usage && !r->errored) {
                json_t *o = chunk_frame(r, json_array());
                json_object_set_new(o, "usage", usage_json(r));
                srv_buf_sse(&r->out, o);
            }
            srv_buf_add(&r->out, "data: [DONE]\n\n", 14);
            r->out_state = SRV_OUT_ENDED;
        }
    }
}

void srv_stream_free(void *cls) { srv_req_unref(cls); }

/* ---- POST /v1/embeddings: each input's vector (from its DONE event) in input order, as numbers
 * or base64, the model name and the prompt tokens used ------------------------------------- */

void srv_embed_consume(srv_req *r, srv_choice *ch, const srv_event *e) {
    if (!e->embd || e->n_embd <= 0) {
        srv_set_error(r, 503, "server_error", NULL, "the engine gave no embedding for an input");
        return;
    }
    free(ch->embd);
    ch->embd = malloc((size_t)e->n_embd * sizeof(float));
    if (!ch->embd) {
        ch->n_embd = 0;
        srv_set_error(r, 503, "server_error", NULL, "out of memory while collecting the response");
        return;
    }
    memcpy(ch->embd, e->embd, (size_t)e->n_embd * sizeof(float));
    ch->n_embd = e->n_embd;
    ch->finish = e->finish;
}

json_t *srv_embeddings_final_json(srv_req *r) {
    json_t *o = json_object(), *data = json_array();
    if (!o || !data) {
        json_decref(o);
        json_decref(data);
        return NULL;
    }
    json_object_set_new(o, "object", json_string("list"));
    for (int i = 0; i < r->n_choices; i++) {
        json_t *v = srv_embedding_json(r->ch[i].embd, r->ch[i].n_embd, r->p.embd_base64);
        json_t *d = v ? json_object() : NULL;
        if (!d || json_object_set_new(d, "embedding", v) || json_array_append_new(data, d)) {
            if (!d) json_decref(v);
            json_decref(data);
            json_decref(o);
            return NULL;
        }
        json_object_set_new(d, "object", json_string("embedding"));
        json_object_set_new(d, "index", json_integer(i));
    }
    json_object_set_new(o, "data", data);
    /* the server's name for its model (--alias or the file name), as the chat answers give it */
    json_object_set_new(o, "model", srv_json_bytes(r->s->alias, strlen(r->s->alias)));
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(r->u_prompt));
    json_object_set_new(u, "total_tokens", json_integer(r->u_prompt));
    json_object_set_new(o, "usage", u);
    return o;
}
