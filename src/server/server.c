/* server.c — the HTTP side of `rocmforge serve` (DESIGN.md §11).
 *
 * Threads:
 *  - libmicrohttpd's worker pool (epoll, suspend/resume): routes, checks and parses requests,
 *    queues them on the engine (rf_engine_submit is thread-safe) and writes responses. A
 *    connection waiting for tokens is suspended, never blocked: its thread serves others.
 *  - the engine thread: rf_engine_wait / rf_engine_step over and over. Its callback copies
 *    each event into the request's queue and resumes the connection; it never touches a socket.
 *  - the ticker (every 50 ms): looks for clients that hung up while their connection was
 *    suspended (libmicrohttpd does not watch suspended sockets) and cancels their requests, so
 *    their KV blocks return at the next step; and sends SSE comment pings to streams that have
 *    been quiet for --sse-ping seconds (long prefill or a long queue).
 *  - the loader: loads the model and starts the engine after the socket already listens.
 *  - the main thread waits for SIGINT / SIGTERM and shuts down.
 *
 * Lifetime of a request (srv_req): one reference for the HTTP connection (dropped when
 * libmicrohttpd reports the request complete), one per engine submission (dropped at its last
 * DONE event) and one for a streaming response object (dropped when libmicrohttpd frees it).
 * Locks: s->mu (the request list, connection liveness) before r->mu (the event queue and
 * flags); no libmicrohttpd call is made under either, except MHD_suspend_connection under
 * r->mu from the connection's own callback, so that a resume cannot overtake the suspend. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "metrics.h"
#include "oai.h"
#include "server.h"

#define SRV_TICK_MS 50

typedef struct srv srv;
typedef struct srv_req srv_req;

/* One engine event, copied out of the callback (text and alternatives inline). */
typedef struct srv_event {
    struct srv_event *next;
    rf_event_kind kind;
    int32_t sub, choice;
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t *top_id;
    float *top_lp;
    rf_finish_reason finish;
    int32_t n_prompt, n_cached, n_gen;
    char *text;
    size_t len;
    char *error;
} srv_event;

typedef struct srv_sub {
    srv_req *req;
    int idx;
    uint64_t id;     /* engine request id (under req->mu) */
    bool submitted;  /* under req->mu */
    int32_t n_done;  /* DONE events seen (engine thread) */
} srv_sub;

typedef struct srv_choice {
    srv_buf text;       /* non-streaming: the output */
    json_t *lp;         /* chat: logprobs "content" array; completions: the logprobs object */
    size_t offset;      /* bytes of text so far (echo included): completions' text_offset */
    rf_finish_reason finish;
    bool done;
} srv_choice;

struct srv_req {
    srv *s;
    atomic_int refs;
    pthread_mutex_t mu;
    srv_params p;
    bool stream;
    char id[48];
    int64_t created;
    double t_arrival;
    int n_subs, n_choices;
    srv_sub *subs;
    srv_choice *ch;
    char **echo;
    size_t *echo_len;
    bool *sub_counted;
    /* engine thread only */
    double *t_last;
    bool first_token;
    /* under mu */
    srv_event *qh, **qt;
    int engine_done;     /* DONE events queued */
    bool suspended, cancelled, client_gone, shutdown, ping_due, lost_events;
    atomic_llong t_write_ms; /* last bytes handed to the socket (streams) */
    /* under s->mu */
    srv_req *prev, *next;
    bool listed;
    struct MHD_Connection *conn;
    int fd;
    /* the connection's thread only */
    srv_buf out;
    size_t out_off;
    bool started, ended, errored;
    int consumed_done;
    srv_error err;
    int64_t u_prompt, u_completion, u_cached;
};

struct srv {
    rf_server_config cfg;
    char *alias;
    char *file_base;     /* the model file's name */
    struct MHD_Daemon *d;
    rf_model *model;
    rf_engine *eng;
    const rf_vocab *vocab;
    int32_t n_ctx;
    int64_t created;
    atomic_int ready, stopping, engine_gone, load_failed;
    atomic_int engine_stop, ticker_stop;
    atomic_int active;   /* engine submissions not yet finished */
    char load_error[512];
    pthread_t loader, engine_thr, ticker;
    bool engine_started, ticker_started;
    atomic_int loader_done;
    pthread_mutex_t mu;
    srv_req *list;
    int n_listed;
    pthread_mutex_t rng_mu;
    uint64_t rng;
    srv_metrics m;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long now_ms(void) { return (long long)(now_s() * 1000.0); }

static uint64_t rng_next(srv *s) {
    pthread_mutex_lock(&s->rng_mu);
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ULL);
    pthread_mutex_unlock(&s->rng_mu);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Compares a client's key with ours in time that depends only on our key's length. */
static bool key_equal(const char *a, size_t na, const char *b, size_t nb) {
    volatile unsigned char d = (unsigned char)(na != nb);
    for (size_t i = 0; i < nb; i++) d |= (unsigned char)(b[i] ^ (na ? a[i % na] : 0));
    return d == 0;
}

/* ---- request objects ---------------------------------------------------------------------- */

static void req_unref(srv_req *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (srv_event *e = r->qh, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    for (int i = 0; i < r->n_choices; i++) {
        srv_buf_free(&r->ch[i].text);
        json_decref(r->ch[i].lp);
    }
    if (r->echo)
        for (int i = 0; i < r->n_subs; i++) free(r->echo[i]);
    free(r->echo);
    free(r->echo_len);
    free(r->sub_counted);
    free(r->ch);
    free(r->subs);
    free(r->t_last);
    srv_buf_free(&r->out);
    srv_params_free(&r->p);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void list_add(srv *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    r->next = s->list;
    r->prev = NULL;
    if (s->list) s->list->prev = r;
    s->list = r;
    r->listed = true;
    s->n_listed++;
    atomic_fetch_add(&r->refs, 1);
    pthread_mutex_unlock(&s->mu);
}

/* Drops r from the list (its connection is gone); returns whether it was listed. */
static bool list_remove(srv *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    bool was = r->listed;
    if (was) {
        if (r->prev) r->prev->next = r->next;
        else s->list = r->next;
        if (r->next) r->next->prev = r->prev;
        r->listed = false;
        r->conn = NULL;
        s->n_listed--;
    }
    pthread_mutex_unlock(&s->mu);
    if (was) req_unref(r);
    return was;
}

/* Cancels r's engine submissions (those already made; later ones see r->cancelled). */
static void req_cancel(srv *s, srv_req *r) {
    for (int i = 0; i < r->n_subs; i++) {
        pthread_mutex_lock(&r->mu);
        bool sub = r->subs[i].submitted;
        uint64_t id = r->subs[i].id;
        pthread_mutex_unlock(&r->mu);
        if (sub && !atomic_load(&s->engine_gone)) rf_engine_cancel(s->eng, id);
    }
}

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
    size_t sz = sizeof(srv_event) + (size_t)n_top * (sizeof(int32_t) + sizeof(float)) + len + 1 + (err ? elen + 1 : 0);
    srv_event *e = malloc(sz);
    if (!e) return NULL;
    memset(e, 0, sizeof *e);
    char *p = (char *)(e + 1);
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

static bool on_engine_event(const rf_event *ev, void *user) {
    srv_sub *sb = user;
    srv_req *r = sb->req;
    srv *s = r->s;
    rf_event_kind kind = rf_event_get_kind(ev);
    int32_t choice = rf_event_choice(ev);
    if (choice < 0 || choice >= r->p.n) choice = 0;
    int ci = sb->idx * r->p.n + choice;
    double t = now_s();
    if (kind == RF_EVENT_TOKEN) {
        if (!r->first_token) {
            r->first_token = true;
            srv_metrics_observe(&s->m, &s->m.ttft, t - r->t_arrival);
        }
        if (r->t_last[ci] > 0) srv_metrics_observe(&s->m, &s->m.itl, t - r->t_last[ci]);
        r->t_last[ci] = t;
    }
    srv_event *e = event_copy(ev, sb->idx);
    bool done = kind == RF_EVENT_DONE;
    pthread_mutex_lock(&r->mu);
    if (e) {
        *r->qt = e;
        r->qt = &e->next;
    } else {
        r->lost_events = true;
    }
    if (done) r->engine_done++;
    bool all = r->engine_done >= r->n_choices;
    bool wake = r->suspended && (r->stream || all || !e);
    if (wake) r->suspended = false;
    bool go = !r->cancelled && e;
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
            req_unref(r);
        }
    }
    return go;
}

/* ---- turning events into output (the connection's thread) -------------------------------- */

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

static void emit_error_chunk(srv_req *r) {
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
    for (int i = 0; i < r->n_choices; i++) {
        if (r->p.route == SRV_ROUTE_CHAT) {
            emit_chunk(r, i, json_pack("{ss}", "role", "assistant"), NULL, 0, NULL, NULL);
        } else if (r->p.echo) {
            int sub = i / r->p.n;
            emit_chunk(r, i, NULL, r->echo[sub], r->echo_len[sub], NULL, NULL);
        }
    }
}

static void set_error(srv_req *r, int status, const char *type, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
static void set_error(srv_req *r, int status, const char *type, const char *code, const char *fmt, ...) {
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
static void consume(srv_req *r, srv_event *list) {
    srv *s = r->s;
    bool chat = r->p.route == SRV_ROUTE_CHAT;
    for (srv_event *e = list; e; e = e->next) {
        int ci = e->sub * r->p.n + (e->choice >= 0 && e->choice < r->p.n ? e->choice : 0);
        if (ci < 0 || ci >= r->n_choices) continue;
        srv_choice *ch = &r->ch[ci];
        if (e->kind == RF_EVENT_TOKEN) {
            if (r->errored || ch->done) continue;
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
            if (r->stream) {
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
                set_error(r, 503, "server_error", NULL, "the engine failed this request: %s", e->error ? e->error : "unknown error");
                if (r->stream) emit_error_chunk(r);
                req_cancel(s, r); /* the other choices are of no use now */
            }
            continue;
        }
        if (e->finish == RF_FINISH_CANCELLED) {
            bool shut;
            pthread_mutex_lock(&r->mu);
            shut = r->shutdown;
            pthread_mutex_unlock(&r->mu);
            if (!r->errored) {
                if (shut) set_error(r, 503, "unavailable_error", "shutting_down", "the server is shutting down");
                else set_error(r, 503, "server_error", NULL, "the request was cancelled");
                if (r->stream) emit_error_chunk(r);
            }
            continue;
        }
        if (r->errored) continue;
        ch->finish = e->finish;
        if (r->stream) {
            if (e->len) emit_chunk(r, ci, chat ? delta_content(e->text, e->len) : NULL, e->text, e->len, NULL, NULL);
            emit_chunk(r, ci, chat ? json_object() : NULL, "", 0, NULL, srv_finish_str(e->finish));
        } else {
            srv_buf_add(&ch->text, e->text, e->len);
        }
        ch->offset += e->len;
    }
}

static void free_events(srv_event *e) {
    while (e) {
        srv_event *n = e->next;
        free(e);
        e = n;
    }
}

/* Takes the queued events; *all: every choice's DONE is queued. Under r->mu. */
static srv_event *take_events(srv_req *r, bool *all) {
    srv_event *l = r->qh;
    r->qh = NULL;
    r->qt = &r->qh;
    *all = r->engine_done >= r->n_choices;
    return l;
}

/* ---- responses ---------------------------------------------------------------------------- */

static void log_request(srv *s, struct MHD_Connection *c, srv_route route, int status) {
    srv_metrics_http(&s->m, route, status);
    (void)c;
}

static enum MHD_Result send_body(srv *s, struct MHD_Connection *c, srv_route route, int status, const char *ctype,
                                 const char *body, size_t len, const char *h1, const char *v1, const char *h2,
                                 const char *v2) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (h1) MHD_add_response_header(resp, h1, v1);
    if (h2) MHD_add_response_header(resp, h2, v2);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    log_request(s, c, route, status);
    if (s->cfg.verbose) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        char addr[64] = "?";
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof addr);
            else if (sa->sa_family == AF_INET6) inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr, sizeof addr);
        }
        fprintf(stderr, "serve: %s %s %d\n", addr, srv_route_name(route), status);
    }
    return ret;
}

static enum MHD_Result send_json(srv *s, struct MHD_Connection *c, srv_route route, int status, json_t *j) {
    char *b = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!b) return MHD_NO;
    enum MHD_Result ret = send_body(s, c, route, status, "application/json", b, strlen(b), NULL, NULL, NULL, NULL);
    free(b);
    return ret;
}

static enum MHD_Result send_error(srv *s, struct MHD_Connection *c, srv_route route, const srv_error *e) {
    char *b = srv_error_json(e);
    if (!b) return MHD_NO;
    const char *h1 = NULL, *v1 = NULL;
    if (e->status == 503) h1 = MHD_HTTP_HEADER_RETRY_AFTER, v1 = "1";
    if (e->status == 401) h1 = MHD_HTTP_HEADER_WWW_AUTHENTICATE, v1 = "Bearer";
    enum MHD_Result ret = send_body(s, c, route, e->status, "application/json", b, strlen(b), h1, v1, NULL, NULL);
    free(b);
    return ret;
}

static enum MHD_Result fail(srv *s, struct MHD_Connection *c, srv_route route, int status, const char *type,
                            const char *code, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 8, 9)))
#endif
    ;
static enum MHD_Result fail(srv *s, struct MHD_Connection *c, srv_route route, int status, const char *type,
                            const char *code, const char *param, const char *fmt, ...) {
    srv_error e;
    e.status = status;
    e.type = type;
    e.code = code;
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return send_error(s, c, route, &e);
}

static json_t *models_json(srv *s) {
    json_t *m = json_object();
    json_object_set_new(m, "id", srv_json_bytes(s->alias, strlen(s->alias)));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(s->created));
    json_object_set_new(m, "owned_by", json_string("rocmforge"));
    if (atomic_load(&s->ready)) {
        rf_model_info info;
        json_object_set_new(m, "max_model_len", json_integer(s->n_ctx));
        if (!rf_model_get_info(s->model, &info)) {
            json_t *meta = json_object();
            json_object_set_new(meta, "arch", srv_json_bytes(info.arch, strlen(info.arch)));
            json_object_set_new(meta, "n_vocab", json_integer(info.n_vocab));
            json_object_set_new(meta, "n_ctx_train", json_integer(info.n_ctx_train));
            json_object_set_new(meta, "n_params", json_integer((json_int_t)info.n_params));
            json_object_set_new(meta, "size", json_integer((json_int_t)info.weight_bytes));
            json_object_set_new(meta, "ftype", srv_json_bytes(info.ftype, strlen(info.ftype)));
            json_object_set_new(meta, "device", srv_json_bytes(info.device, strlen(info.device)));
            json_object_set_new(m, "meta", meta);
        }
    }
    json_t *arr = json_array();
    json_array_append_new(arr, m);
    return json_pack("{ssso}", "object", "list", "data", arr);
}

static enum MHD_Result send_metrics(srv *s, struct MHD_Connection *c) {
    srv_gauges g;
    memset(&g, 0, sizeof g);
    g.loaded = atomic_load(&s->ready) && !atomic_load(&s->engine_gone);
    g.active_requests = atomic_load(&s->active);
    g.max_queue = s->cfg.max_queue;
    if (g.loaded) {
        rf_engine *e = s->eng;
        g.running = rf_engine_get_stat(e, RF_STAT_RUNNING);
        g.waiting = rf_engine_get_stat(e, RF_STAT_WAITING);
        g.blocks_total = rf_engine_get_stat(e, RF_STAT_BLOCKS_TOTAL);
        g.blocks_used = rf_engine_get_stat(e, RF_STAT_BLOCKS_USED);
        g.blocks_free = rf_engine_get_stat(e, RF_STAT_BLOCKS_FREE);
        g.blocks_cached = rf_engine_get_stat(e, RF_STAT_BLOCKS_CACHED);
        g.block_size = rf_engine_get_stat(e, RF_STAT_BLOCK_SIZE);
        g.ctx = rf_engine_get_stat(e, RF_STAT_CTX);
        g.parallel = rf_engine_get_stat(e, RF_STAT_PARALLEL);
        g.prompt_computed = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS);
        g.prefix_hits = rf_engine_get_stat(e, RF_STAT_PREFIX_HIT_TOKENS);
        g.gen_tokens = rf_engine_get_stat(e, RF_STAT_GEN_TOKENS);
        g.preemptions = rf_engine_get_stat(e, RF_STAT_PREEMPTIONS);
        g.steps = rf_engine_get_stat(e, RF_STAT_STEPS);
        g.requests_done = rf_engine_get_stat(e, RF_STAT_REQUESTS_DONE);
    }
    srv_buf b = {0};
    srv_metrics_render(&s->m, &g, &b);
    if (b.oom) {
        srv_buf_free(&b);
        return MHD_NO;
    }
    enum MHD_Result ret = send_body(s, c, SRV_ROUTE_METRICS, 200, "text/plain; version=0.0.4; charset=utf-8", b.p,
                                    b.len, NULL, NULL, NULL, NULL);
    srv_buf_free(&b);
    return ret;
}

/* The whole non-streaming response. */
static json_t *final_json(srv_req *r) {
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
            json_object_set_new(msg, "content", srv_json_bytes(ch->text.p ? ch->text.p : "", ch->text.len));
            json_object_set_new(c, "message", msg);
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
        json_object_set_new(c, "finish_reason", json_string(srv_finish_str(ch->finish)));
        json_array_append_new(arr, c);
    }
    json_object_set_new(o, "choices", arr);
    json_object_set_new(o, "usage", usage_json(r));
    return o;
}

/* ---- streaming ---------------------------------------------------------------------------- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
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
            atomic_store(&r->t_write_ms, now_ms());
            return (ssize_t)n;
        }
        if (r->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!r->started) {
            r->started = true;
            stream_start(r);
            continue;
        }
        pthread_mutex_lock(&r->mu);
        if (r->client_gone) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        bool all;
        srv_event *l = take_events(r, &all);
        bool ping = r->ping_due;
        r->ping_due = false;
        bool lost = r->lost_events;
        bool gone = atomic_load(&s->engine_gone);
        if (!l && !ping && !all && !lost && !gone) {
            r->suspended = true;
            MHD_suspend_connection(r->conn);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        pthread_mutex_unlock(&r->mu);
        if (ping) srv_buf_add(&r->out, ": ping\n\n", 8);
        consume(r, l);
        free_events(l);
        if (lost && !r->errored) {
            set_error(r, 503, "server_error", NULL, "out of memory while streaming the response");
            emit_error_chunk(r);
            req_cancel(s, r);
        }
        if (gone && !all && !r->errored) {
            set_error(r, 503, "unavailable_error", "shutting_down", "the server is shutting down");
            emit_error_chunk(r);
        }
        /* the end: every choice done, or an error (sent above; what the other choices still
         * produce is dropped with the request) */
        if (all || r->errored) {
            if (r->p.include_usage && !r->errored) {
                json_t *o = chunk_frame(r, json_array());
                json_object_set_new(o, "usage", usage_json(r));
                srv_buf_sse(&r->out, o);
            }
            srv_buf_add(&r->out, "data: [DONE]\n\n", 14);
            r->ended = true;
        }
    }
}

static void stream_free(void *cls) { req_unref(cls); }

/* ---- the access handler ------------------------------------------------------------------- */

typedef struct conn_ctx {
    srv_route route;
    srv_buf body;
    srv_req *req;
    bool responded;    /* an answer is queued */
    srv_error refused; /* status != 0: refused on its headers, answered after the body */
    const char *allow; /* the Allow header of a 405 */
} conn_ctx;

static bool model_matches(srv *s, const char *name) {
    if (!strcmp(name, s->alias) || !strcmp(name, s->cfg.model_path) || !strcmp(name, s->file_base)) return true;
    size_t n = strlen(s->file_base);
    if (n > 5 && !strcasecmp(s->file_base + n - 5, ".gguf") && strlen(name) == n - 5 && !strncmp(name, s->file_base, n - 5))
        return true;
    return false;
}

static bool auth_ok(srv *s, struct MHD_Connection *c, bool *missing) {
    *missing = false;
    if (!s->cfg.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h) {
        *missing = true;
        return false;
    }
    while (*h == ' ') h++;
    if (strncasecmp(h, "Bearer", 6) || (h[6] != ' ' && h[6] != '\t')) return false;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    return key_equal(h, n, s->cfg.api_key, strlen(s->cfg.api_key));
}

static void make_id(srv *s, srv_req *r) {
    uint64_t a = rng_next(s), b = rng_next(s);
    snprintf(r->id, sizeof r->id, "%s%016llx%08llx", r->p.route == SRV_ROUTE_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)a, (unsigned long long)(b & 0xffffffffULL));
}

/* Builds the request object for checked params (which it takes over). NULL when out of memory. */
static srv_req *req_new(srv *s, srv_params *p) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->s = s;
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->mu, NULL);
    r->p = *p;
    memset(p, 0, sizeof *p);
    r->stream = r->p.stream;
    r->qt = &r->qh;
    r->t_arrival = now_s();
    r->created = (int64_t)time(NULL);
    atomic_init(&r->t_write_ms, now_ms());
    r->n_subs = r->p.route == SRV_ROUTE_CHAT ? 1 : (int)r->p.n_prompts;
    r->n_choices = r->n_subs * r->p.n;
    r->subs = calloc((size_t)r->n_subs, sizeof *r->subs);
    r->ch = calloc((size_t)r->n_choices, sizeof *r->ch);
    r->t_last = calloc((size_t)r->n_choices, sizeof *r->t_last);
    r->sub_counted = calloc((size_t)r->n_subs, sizeof *r->sub_counted);
    r->echo = calloc((size_t)r->n_subs, sizeof *r->echo);
    r->echo_len = calloc((size_t)r->n_subs, sizeof *r->echo_len);
    make_id(s, r);
    if (!r->subs || !r->ch || !r->t_last || !r->sub_counted || !r->echo || !r->echo_len) {
        req_unref(r);
        return NULL;
    }
    for (int i = 0; i < r->n_subs; i++) {
        r->subs[i].req = r;
        r->subs[i].idx = i;
    }
    if (r->p.route == SRV_ROUTE_COMPLETIONS && r->p.echo) {
        for (int i = 0; i < r->n_subs; i++) {
            srv_prompt *sp = &r->p.prompts[i];
            if (sp->text) {
                r->echo[i] = malloc(sp->len + 1);
                if (!r->echo[i]) {
                    req_unref(r);
                    return NULL;
                }
                memcpy(r->echo[i], sp->text, sp->len);
                r->echo[i][sp->len] = 0;
                r->echo_len[i] = sp->len;
            } else if (rf_detokenize(s->vocab, sp->ids, sp->n_ids, false, &r->echo[i], &r->echo_len[i])) {
                req_unref(r);
                return NULL;
            }
        }
    }
    return r;
}

/* The body has arrived: parse, check, queue on the engine and answer (streams at once). */
static enum MHD_Result start_request(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    srv_route route = cc->route;
    srv_params p;
    srv_error e;
    if (srv_parse_request(route, cc->body.p, cc->body.len, &p, &e)) return send_error(s, c, route, &e);
    srv_buf_free(&cc->body);
    if (p.model && !model_matches(s, p.model)) {
        enum MHD_Result ret = fail(s, c, route, 404, "not_found_error", "model_not_found", "model",
                                   "The model '%.200s' does not exist; this server serves '%.200s'", p.model, s->alias);
        srv_params_free(&p);
        return ret;
    }
    if (atomic_load(&s->stopping)) {
        srv_params_free(&p);
        return fail(s, c, route, 503, "unavailable_error", "shutting_down", NULL, "the server is shutting down");
    }
    int n_subs = route == SRV_ROUTE_CHAT ? 1 : (int)p.n_prompts;
    int64_t limit = (int64_t)s->cfg.n_parallel + s->cfg.max_queue;
    if (atomic_load(&s->active) + n_subs > limit) {
        srv_params_free(&p);
        pthread_mutex_lock(&s->m.mu);
        s->m.queue_full++;
        pthread_mutex_unlock(&s->m.mu);
        return fail(s, c, route, 503, "unavailable_error", "queue_full", NULL,
                    "the server is busy: %d requests are running or queued (--parallel %d + --max-queue %d); retry later",
                    atomic_load(&s->active), s->cfg.n_parallel, s->cfg.max_queue);
    }
    srv_prepared pr;
    if (srv_prepare(s->eng, s->n_ctx, &p, rng_next(s) & SRV_SEED_MASK, &pr, &e)) {
        srv_params_free(&p);
        return send_error(s, c, route, &e);
    }
    srv_req *r = req_new(s, &p);
    if (!r) {
        srv_params_free(&p);
        srv_prepared_free(&pr);
        return fail(s, c, route, 503, "server_error", NULL, NULL, "out of memory");
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->conn = c;
    r->fd = ci ? ci->connect_fd : -1;
    cc->req = r; /* the connection's reference */
    list_add(s, r);
    /* queue every prompt; a failure cancels those already queued */
    for (int i = 0; i < pr.n; i++) {
        rf_request_set_callback(pr.reqs[i], on_engine_event, &r->subs[i]);
        atomic_fetch_add(&r->refs, 1);
        atomic_fetch_add(&s->active, 1);
        uint64_t id = 0;
        rf_status st = rf_engine_submit(s->eng, pr.reqs[i], &id);
        if (st) {
            atomic_fetch_sub(&s->active, 1);
            atomic_fetch_sub(&r->refs, 1);
            srv_error se;
            if (st == RF_ERR_OOM) srv_fail(&se, 503, "server_error", NULL, NULL, "out of memory while queueing: %s", rf_last_error());
            else srv_fail(&se, 400, "invalid_request_error", NULL, route == SRV_ROUTE_CHAT ? "messages" : "prompt", "%s", rf_last_error());
            pthread_mutex_lock(&r->mu);
            r->cancelled = true;
            /* the choices never queued count as done */
            r->engine_done += (pr.n - i) * r->p.n;
            pthread_mutex_unlock(&r->mu);
            req_cancel(s, r);
            srv_prepared_free(&pr);
            cc->responded = true;
            return send_error(s, c, route, &se);
        }
        pthread_mutex_lock(&r->mu);
        r->subs[i].id = id;
        r->subs[i].submitted = true;
        bool cancelled = r->cancelled;
        pthread_mutex_unlock(&r->mu);
        if (cancelled) rf_engine_cancel(s->eng, id);
    }
    srv_prepared_free(&pr);
    if (r->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, stream_free);
        if (!resp) {
            pthread_mutex_lock(&r->mu);
            r->cancelled = true;
            pthread_mutex_unlock(&r->mu);
            req_cancel(s, r);
            return MHD_NO;
        }
        atomic_fetch_add(&r->refs, 1); /* the response's */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        log_request(s, c, route, 200);
        cc->responded = true;
        return ret;
    }
    /* non-streaming: wait (suspended) for every choice */
    pthread_mutex_lock(&r->mu);
    if (r->engine_done < r->n_choices && !r->lost_events) {
        r->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->mu);
    return MHD_YES; /* called again at once: finish_request answers */
}

/* A suspended non-streaming request was resumed: answer when every choice is done. */
static enum MHD_Result finish_request(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    srv_req *r = cc->req;
    pthread_mutex_lock(&r->mu);
    bool all;
    srv_event *l = take_events(r, &all);
    bool lost = r->lost_events, gone = r->client_gone, shut = r->shutdown;
    bool engine_gone = atomic_load(&s->engine_gone);
    if (!all && !lost && !engine_gone) {
        r->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        consume(r, l);
        free_events(l);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->mu);
    consume(r, l);
    free_events(l);
    cc->responded = true;
    if (gone) return MHD_NO; /* nobody to answer */
    if (!all) {
        if (lost) set_error(r, 503, "server_error", NULL, "out of memory while collecting the response");
        else set_error(r, 503, "unavailable_error", "shutting_down", "the server is shutting down");
        req_cancel(s, r);
    }
    if (shut && !r->errored) set_error(r, 503, "unavailable_error", "shutting_down", "the server is shutting down");
    if (r->errored) return send_error(s, c, cc->route, &r->err);
    for (int i = 0; i < r->n_choices; i++)
        if (r->ch[i].text.oom) return fail(s, c, cc->route, 503, "server_error", NULL, NULL, "out of memory");
    json_t *j = final_json(r);
    if (!j) return fail(s, c, cc->route, 503, "server_error", NULL, NULL, "out of memory");
    return send_json(s, c, cc->route, 200, j);
}

/* The answer to a request that was refused before its body (404, 405, 401), given once the
 * body is read (and dropped), so that the connection can stay open. */
static enum MHD_Result answer_refused(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    cc->responded = true;
    if (cc->refused.status == 405) {
        char *b = srv_error_json(&cc->refused);
        if (!b) return MHD_NO;
        enum MHD_Result ret = send_body(s, c, cc->route, 405, "application/json", b, strlen(b), MHD_HTTP_HEADER_ALLOW,
                                        cc->allow, NULL, NULL);
        free(b);
        return ret;
    }
    return send_error(s, c, cc->route, &cc->refused);
}

/* A GET route, or the start of a completions request once its body is in. */
static enum MHD_Result answer(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    srv_route route = cc->route;
    if (route == SRV_ROUTE_HEALTH) {
        cc->responded = true;
        if (atomic_load(&s->stopping))
            return fail(s, c, route, 503, "unavailable_error", "shutting_down", NULL, "the server is shutting down");
        if (!atomic_load(&s->ready)) return fail(s, c, route, 503, "unavailable_error", "model_loading", NULL, "Loading model");
        return send_json(s, c, route, 200, json_pack("{ss}", "status", "ok"));
    }
    if (route == SRV_ROUTE_MODELS) {
        cc->responded = true;
        return send_json(s, c, route, 200, models_json(s));
    }
    if (route == SRV_ROUTE_METRICS) {
        cc->responded = true;
        return send_metrics(s, c);
    }
    if (atomic_load(&s->stopping)) {
        cc->responded = true;
        return fail(s, c, route, 503, "unavailable_error", "shutting_down", NULL, "the server is shutting down");
    }
    if (!atomic_load(&s->ready)) {
        cc->responded = true;
        return fail(s, c, route, 503, "unavailable_error", "model_loading", NULL, "Loading model");
    }
    enum MHD_Result ret = start_request(s, c, cc);
    if (!cc->req) cc->responded = true; /* refused: an error is queued */
    return ret;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    (void)version;
    if (!cc) {
        /* the headers are in: route, method and key are checked now, the answer waits for the
         * body (read and dropped when refused); only a body over the limit is answered at once */
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        srv_route route = cc->route = srv_route_of(url);
        bool missing;
        if (route == SRV_ROUTE_NONE) {
            srv_fail(&cc->refused, 404, "not_found_error", NULL, NULL, "no route %.20s %.200s (see docs/server.md)", method, url);
        } else if (!srv_route_allows(route, method, &cc->allow)) {
            srv_fail(&cc->refused, 405, "invalid_request_error", "method_not_allowed", NULL,
                     "method %.20s is not allowed on %.200s (allowed: %s)", method, url, cc->allow);
        } else if (route != SRV_ROUTE_HEALTH && route != SRV_ROUTE_MODELS && !auth_ok(s, c, &missing)) {
            srv_fail(&cc->refused, 401, "authentication_error", "invalid_api_key", NULL, "%s",
                     missing ? "Missing API key: send it as 'Authorization: Bearer <key>'" : "Incorrect API key provided");
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || end == cl || v > (unsigned long long)s->cfg.max_body) {
                cc->responded = true;
                return fail(s, c, route, 413, "invalid_request_error", "request_too_large", NULL,
                            "the request body (%.40s bytes) is over the limit of %lld bytes", cl, (long long)s->cfg.max_body);
            }
        }
        return MHD_YES;
    }
    if (cc->req && !cc->responded) return finish_request(s, c, cc);
    if (cc->responded) {
        *upload_size = 0; /* answered already (413, or a stream): drop what comes */
        return MHD_YES;
    }
    if (*upload_size) {
        if (cc->refused.status) {
            *upload_size = 0;
            return MHD_YES;
        }
        if (cc->body.len + *upload_size > (size_t)s->cfg.max_body) {
            *upload_size = 0;
            cc->responded = true;
            srv_buf_free(&cc->body);
            return fail(s, c, cc->route, 413, "invalid_request_error", "request_too_large", NULL,
                        "the request body is over the limit of %lld bytes", (long long)s->cfg.max_body);
        }
        srv_buf_add(&cc->body, upload, *upload_size);
        *upload_size = 0;
        if (cc->body.oom) {
            cc->responded = true;
            srv_buf_free(&cc->body);
            return fail(s, c, cc->route, 503, "server_error", NULL, NULL, "out of memory while reading the request");
        }
        return MHD_YES;
    }
    if (cc->refused.status) return answer_refused(s, c, cc);
    return answer(s, c, cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    (void)c;
    if (!cc) return;
    *con_cls = NULL;
    srv_req *r = cc->req;
    if (r) {
        list_remove(s, r);
        pthread_mutex_lock(&r->mu);
        bool unfinished = r->engine_done < r->n_choices;
        if (unfinished) {
            r->cancelled = true;
            r->client_gone = true;
        }
        r->conn = NULL;
        pthread_mutex_unlock(&r->mu);
        if (unfinished) {
            req_cancel(s, r);
            if (toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN) {
                pthread_mutex_lock(&s->m.mu);
                s->m.disconnects++;
                pthread_mutex_unlock(&s->m.mu);
            }
        }
        req_unref(r);
    }
    srv_buf_free(&cc->body);
    free(cc);
}

/* ---- the ticker: hang-ups of suspended connections, pings ---------------------------------- */

static void *ticker_main(void *arg) {
    srv *s = arg;
    int cap = 0;
    struct pollfd *pfd = NULL;
    srv_req **rr = NULL, **gone = NULL, **wake = NULL;
    while (!atomic_load(&s->ticker_stop)) {
        struct timespec ts = {0, SRV_TICK_MS * 1000000L};
        nanosleep(&ts, NULL);
        int n = 0, n_gone = 0, n_wake = 0;
        long long t = now_ms();
        long long ping_ms = s->cfg.ping_s > 0 ? (long long)(s->cfg.ping_s * 1000.0) : -1;
        pthread_mutex_lock(&s->mu);
        if (s->n_listed > cap) {
            int nc = s->n_listed * 2;
            struct pollfd *a = realloc(pfd, (size_t)nc * sizeof *a);
            if (a) pfd = a;
            srv_req **b = realloc(rr, (size_t)nc * sizeof *b);
            if (b) rr = b;
            srv_req **g = realloc(gone, (size_t)nc * sizeof *g);
            if (g) gone = g;
            srv_req **w = realloc(wake, (size_t)nc * sizeof *w);
            if (w) wake = w;
            if (a && b && g && w) cap = nc;
        }
        for (srv_req *r = s->list; r && n < cap && n_wake < cap; r = r->next) {
            pthread_mutex_lock(&r->mu);
            bool susp = r->suspended && !r->cancelled;
            if (susp && r->stream && ping_ms > 0 && t - atomic_load(&r->t_write_ms) >= ping_ms) {
                r->ping_due = true;
                r->suspended = false;
                atomic_store(&r->t_write_ms, t);
                atomic_fetch_add(&r->refs, 1);
                wake[n_wake++] = r;
                susp = false;
            }
            pthread_mutex_unlock(&r->mu);
            if (susp && r->fd >= 0) {
                pfd[n].fd = r->fd;
                pfd[n].events = POLLIN | POLLRDHUP;
                pfd[n].revents = 0;
                rr[n++] = r;
            }
        }
        if (n > 0 && poll(pfd, (nfds_t)n, 0) > 0) {
            for (int i = 0; i < n; i++) {
                bool hup = pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL);
                if (!hup && (pfd[i].revents & POLLIN)) {
                    char b;
                    ssize_t k = recv(pfd[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
                    hup = k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
                }
                if (hup) {
                    atomic_fetch_add(&rr[i]->refs, 1);
                    gone[n_gone++] = rr[i];
                }
            }
        }
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n_wake; i++) {
            srv_req *r = wake[i];
            MHD_resume_connection(r->conn);
            req_unref(r);
        }
        for (int i = 0; i < n_gone; i++) {
            srv_req *r = gone[i];
            pthread_mutex_lock(&r->mu);
            bool first = !r->client_gone;
            r->cancelled = true;
            r->client_gone = true;
            pthread_mutex_unlock(&r->mu);
            if (first) {
                req_cancel(s, r);
                pthread_mutex_lock(&s->m.mu);
                s->m.disconnects++;
                pthread_mutex_unlock(&s->m.mu);
                if (s->cfg.verbose) fprintf(stderr, "serve: client of %s went away; cancelled\n", r->id);
            }
            req_unref(r);
        }
    }
    free(pfd);
    free(rr);
    free(gone);
    free(wake);
    return NULL;
}

/* ---- engine and loader threads ------------------------------------------------------------ */

static void *engine_main(void *arg) {
    srv *s = arg;
    while (!atomic_load(&s->engine_stop)) {
        if (!rf_engine_wait(s->eng, 200)) continue;
        if (atomic_load(&s->engine_stop)) break;
        int64_t steps = rf_engine_get_stat(s->eng, RF_STAT_STEPS);
        rf_status st = rf_engine_step(s->eng);
        if (st) fprintf(stderr, "serve: engine step failed (its requests get an error): %s\n", rf_last_error());
        if (rf_engine_get_stat(s->eng, RF_STAT_STEPS) == steps) {
            struct timespec ts = {0, 500000L}; /* nothing ran (only cancellations): do not spin */
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static void *loader_main(void *arg) {
    srv *s = arg;
    const char *delay = getenv("RF_SERVE_LOAD_DELAY_MS"); /* tests: a window to see 503s in */
    if (delay && atoi(delay) > 0) {
        long ms = atol(delay);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    rf_model_params mp = rf_model_default_params();
    mp.device = s->cfg.device;
    mp.device_index = s->cfg.device_index;
    mp.n_threads = s->cfg.n_threads;
    rf_engine_config *ec = NULL;
    rf_status st = rf_model_load(s->cfg.model_path, &mp, &s->model);
    if (st) {
        s->model = NULL;
        goto fail;
    }
    ec = rf_engine_config_new();
    if (!ec) {
        st = rf_set_error(RF_ERR_OOM, "out of memory");
        goto fail;
    }
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_CTX, s->cfg.n_ctx);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_PARALLEL, s->cfg.n_parallel);
    if (s->cfg.n_batch) st = st ? st : rf_engine_config_set(ec, RF_ENGINE_BATCH, s->cfg.n_batch);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_KV_BLOCKS, s->cfg.kv_blocks);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_BLOCK_SIZE, s->cfg.block_size);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_KV_TYPE, s->cfg.kv_type);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_PREFIX_CACHE, !s->cfg.no_prefix_cache);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_THREADS, s->cfg.n_threads);
    st = st ? st : rf_engine_new(s->model, ec, &s->eng);
    rf_engine_config_free(ec);
    if (st) {
        s->eng = NULL;
        goto fail;
    }
    s->vocab = rf_model_vocab(s->model);
    s->n_ctx = (int32_t)rf_engine_get_stat(s->eng, RF_STAT_CTX);
    if (pthread_create(&s->engine_thr, NULL, engine_main, s)) {
        st = rf_set_error(RF_ERR_OOM, "cannot start the engine thread");
        goto fail;
    }
    s->engine_started = true;
    rf_model_info info;
    rf_model_get_info(s->model, &info);
    fprintf(stderr, "serve: model '%s' loaded (%s, %s, %s): ctx %d per sequence, parallel %lld, KV pool %lld blocks of %lld\n",
            s->alias, info.arch, info.ftype, info.device, s->n_ctx, (long long)rf_engine_get_stat(s->eng, RF_STAT_PARALLEL),
            (long long)rf_engine_get_stat(s->eng, RF_STAT_BLOCKS_TOTAL), (long long)rf_engine_get_stat(s->eng, RF_STAT_BLOCK_SIZE));
    atomic_store(&s->ready, 1);
    atomic_store(&s->loader_done, 1);
    return NULL;
fail:
    snprintf(s->load_error, sizeof s->load_error, "%s", rf_last_error());
    if (s->eng) rf_engine_free(s->eng);
    s->eng = NULL;
    rf_model_free(s->model);
    s->model = NULL;
    atomic_store(&s->load_failed, 1);
    atomic_store(&s->loader_done, 1);
    kill(getpid(), SIGUSR1);
    return NULL;
}

/* ---- main --------------------------------------------------------------------------------- */

void rf_server_config_defaults(rf_server_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->device = RF_DEVICE_AUTO;
    c->n_parallel = 4;
    c->block_size = 16;
    c->kv_type = RF_TYPE_F16;
    c->max_queue = 256;
    c->max_body = 8 << 20;
    c->http_threads = 4;
    c->ping_s = 15;
    c->timeout_s = 300;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    srv *s = cls;
    if (!s->cfg.verbose) return;
    fputs("serve: libmicrohttpd: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static void shutdown_all(srv *s) {
    /* cancel everything; queued and running requests answer 503 / end their streams */
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (srv_req *r = s->list; r; r = r->next) n++;
    srv_req **v = calloc((size_t)n + 1, sizeof *v);
    int k = 0;
    for (srv_req *r = s->list; r && v; r = r->next) {
        pthread_mutex_lock(&r->mu);
        r->shutdown = true;
        r->cancelled = true;
        pthread_mutex_unlock(&r->mu);
        atomic_fetch_add(&r->refs, 1);
        v[k++] = r;
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k; i++) {
        req_cancel(s, v[i]);
        req_unref(v[i]);
    }
    free(v);
}

static void resume_all(srv *s) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (srv_req *r = s->list; r; r = r->next) n++;
    struct MHD_Connection **cv = calloc((size_t)n + 1, sizeof *cv);
    int k = 0;
    for (srv_req *r = s->list; r && cv; r = r->next) {
        pthread_mutex_lock(&r->mu);
        if (r->suspended && r->conn) {
            r->suspended = false;
            cv[k++] = r->conn;
        }
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k; i++) MHD_resume_connection(cv[i]);
    free(cv);
}

static int wait_until(int (*cond)(srv *), srv *s, int ms) {
    for (int t = 0; t < ms; t += 20) {
        if (cond(s)) return 1;
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
    }
    return cond(s);
}

static int no_active(srv *s) { return atomic_load(&s->active) == 0; }
static int no_listed(srv *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->n_listed;
    pthread_mutex_unlock(&s->mu);
    return n == 0;
}

int rf_server_main(const rf_server_config *cfg) {
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    s->cfg = *cfg;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->rng_mu, NULL);
    srv_metrics_init(&s->m);
    s->created = (int64_t)time(NULL);
    s->rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)getpid() << 32 ^ (uint64_t)now_ms();
    const char *base = strrchr(cfg->model_path, '/');
    s->file_base = strdup(base ? base + 1 : cfg->model_path);
    if (cfg->alias && *cfg->alias) {
        s->alias = strdup(cfg->alias);
    } else if (s->file_base) {
        s->alias = strdup(s->file_base);
        size_t n = s->alias ? strlen(s->alias) : 0;
        if (n > 5 && !strcasecmp(s->alias + n - 5, ".gguf")) s->alias[n - 5] = 0;
    }
    int rc = 1;
    if (!s->file_base || !s->alias) {
        fprintf(stderr, "error: out of memory\n");
        goto out_free;
    }

    /* signals: waited for by the main thread; every other thread inherits the mask */
    signal(SIGPIPE, SIG_IGN);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, &old);

    /* the listening socket */
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai || !ai) {
        fprintf(stderr, "error: cannot resolve --host '%s': %s\n", cfg->host, gai ? gai_strerror(gai) : "no address");
        goto out_mask;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_access, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->http_threads > 0 ? cfg->http_threads : 1),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(cfg->timeout_s > 0 ? cfg->timeout_s : 0),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                            MHD_OPTION_END);
    char host[INET6_ADDRSTRLEN] = "?";
    if (ai->ai_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, host, sizeof host);
    else inet_ntop(AF_INET6, &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, host, sizeof host);
    bool v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (!s->d) {
        fprintf(stderr, "error: cannot listen on %s port %d: %s\n", cfg->host, cfg->port,
                errno ? strerror(errno) : "libmicrohttpd failed to start");
        goto out_mask;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    int bound = di ? di->port : cfg->port;
    fprintf(stderr, "serve: listening on http://%s%s%s:%d (model loading: /health answers 503 until it is ready)\n",
            v6 ? "[" : "", host, v6 ? "]" : "", bound);
    fflush(stderr);

    if (pthread_create(&s->ticker, NULL, ticker_main, s) == 0) s->ticker_started = true;
    if (pthread_create(&s->loader, NULL, loader_main, s)) {
        fprintf(stderr, "error: cannot start the loader thread\n");
        goto out_stop;
    }

    int sig = 0;
    for (;;) {
        if (sigwait(&set, &sig)) continue;
        if (sig == SIGUSR1 && !atomic_load(&s->load_failed)) continue;
        break;
    }
    if (sig == SIGUSR1) {
        fprintf(stderr, "error: %s\n", s->load_error);
        pthread_join(s->loader, NULL);
        rc = 1;
    } else {
        fprintf(stderr, "serve: %s: shutting down\n", sig == SIGINT ? "interrupt" : "terminated");
        rc = 0;
        if (!atomic_load(&s->loader_done)) {
            /* a load cannot be interrupted: stop listening and leave; the process ends it */
            atomic_store(&s->stopping, 1);
            if (s->ticker_started) {
                atomic_store(&s->ticker_stop, 1);
                pthread_join(s->ticker, NULL);
                s->ticker_started = false;
            }
            MHD_stop_daemon(s->d);
            fprintf(stderr, "serve: stopped while the model was loading\n");
            fflush(stderr);
            _exit(0);
        }
        pthread_join(s->loader, NULL);
    }

out_stop:
    atomic_store(&s->stopping, 1);
    if (s->eng) {
        for (int i = 0; i < 100 && !no_active(s); i++) { /* up to 10 s for cancellations to land */
            shutdown_all(s);
            wait_until(no_active, s, 100);
        }
        atomic_store(&s->engine_stop, 1);
        rf_engine_wake(s->eng);
        if (s->engine_started) pthread_join(s->engine_thr, NULL);
        s->engine_started = false;
    }
    atomic_store(&s->engine_gone, 1);
    if (s->ticker_started) {
        atomic_store(&s->ticker_stop, 1);
        pthread_join(s->ticker, NULL);
        s->ticker_started = false;
    }
    resume_all(s);
    wait_until(no_listed, s, 2000);
    resume_all(s);
    MHD_stop_daemon(s->d);
    s->d = NULL;
    if (s->eng) rf_engine_free(s->eng);
    rf_model_free(s->model);
    if (rc == 0) fprintf(stderr, "serve: stopped\n");
out_mask:
    pthread_sigmask(SIG_SETMASK, &old, NULL);
out_free:
    srv_metrics_destroy(&s->m);
    free(s->alias);
    free(s->file_base);
    free(s);
    return rc;
}
