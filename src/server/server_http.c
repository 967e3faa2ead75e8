/* server_http.c — libmicrohttpd's side of `rocmforge serve`: the access handler (routing,
 * method, API key, body limit), answers and errors with their headers, /health, /v1/models and
 * /metrics, queueing a completion request on the engine, and the end of a connection. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server_int.h"
#include "server_policy.h"
#include "webui.h"

/* Compares a client's key with ours in time that depends only on our key's length. */
static bool key_equal(const char *a, size_t na, const char *b, size_t nb) {
    volatile unsigned char d = (unsigned char)(na != nb);
    for (size_t i = 0; i < nb; i++) d |= (unsigned char)(b[i] ^ (na ? a[i % na] : 0));
    return d == 0;
}

/* ---- responses ---------------------------------------------------------------------------- */

static void log_request(srv *s, struct MHD_Connection *c, srv_route route, int status) {
    srv_metrics_http(&s->m, route, status);
    (void)c;
}

/* close: the connection ends after this answer (it went out before the body was read). */
static enum MHD_Result send_body_x(srv *s, struct MHD_Connection *c, srv_route route, int status, const char *ctype,
                                   const char *body, size_t len, const char *h1, const char *v1, const char *h2,
                                   const char *v2, bool close) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    if (ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (h1) MHD_add_response_header(resp, h1, v1);
    if (h2) MHD_add_response_header(resp, h2, v2);
    /* a connection from the reserve (beyond --max-conns) is not kept alive: its slot is for the next probe */
    if (close || srv_conn_reserve(srv_conn_of(c))) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    srv_policy_add_cors(&s->cfg, c, resp);
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

static enum MHD_Result send_body(srv *s, struct MHD_Connection *c, srv_route route, int status, const char *ctype,
                                 const char *body, size_t len, const char *h1, const char *v1, const char *h2,
                                 const char *v2) {
    return send_body_x(s, c, route, status, ctype, body, len, h1, v1, h2, v2, false);
}

static enum MHD_Result send_json(srv *s, struct MHD_Connection *c, srv_route route, int status, json_t *j) {
    char *b = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (!b) return MHD_NO;
    enum MHD_Result ret = send_body(s, c, route, status, "application/json", b, strlen(b), NULL, NULL, NULL, NULL);
    free(b);
    return ret;
}

static enum MHD_Result send_error_x(srv *s, struct MHD_Connection *c, srv_route route, const srv_error *e, bool close) {
    char *b = route == SRV_ROUTE_MESSAGES ? srv_anthropic_error_json(e) : srv_error_json(e); /* each API its shape */
    if (!b) return MHD_NO;
    const char *h1 = NULL, *v1 = NULL;
    if (e->status == 503) h1 = MHD_HTTP_HEADER_RETRY_AFTER, v1 = "1";
    if (e->status == 401) h1 = MHD_HTTP_HEADER_WWW_AUTHENTICATE, v1 = "Bearer";
    enum MHD_Result ret = send_body_x(s, c, route, e->status, "application/json", b, strlen(b), h1, v1, NULL, NULL, close);
    free(b);
    return ret;
}

static enum MHD_Result send_error(srv *s, struct MHD_Connection *c, srv_route route, const srv_error *e) {
    return send_error_x(s, c, route, e, false);
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

/* A /v1/models entry for one more name (--alias given again). */
static json_t *alias_json(srv *s, const char *name) {
    json_t *m = json_object();
    json_object_set_new(m, "id", srv_json_bytes(name, strlen(name)));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(s->created));
    json_object_set_new(m, "owned_by", json_string("rocmforge"));
    json_object_set_new(m, "alias_of", srv_json_bytes(s->alias, strlen(s->alias)));
    return m;
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
    for (int32_t i = 0; i < s->cfg.n_aliases; i++)
        if (s->cfg.aliases[i] && strcmp(s->cfg.aliases[i], s->alias)) json_array_append_new(arr, alias_json(s, s->cfg.aliases[i]));
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
        g.state_slots = rf_engine_get_stat(e, RF_STAT_STATE_SLOTS);
        g.state_slots_used = rf_engine_get_stat(e, RF_STAT_STATE_SLOTS_USED);
        g.ckpt_total = rf_engine_get_stat(e, RF_STAT_STATE_CKPT_TOTAL);
        g.ckpt_used = rf_engine_get_stat(e, RF_STAT_STATE_CKPT_USED);
        g.ckpt_hits = rf_engine_get_stat(e, RF_STAT_STATE_CKPT_HITS);
        g.state_bytes = rf_engine_get_stat(e, RF_STAT_STATE_BYTES);
        g.kv_bytes = rf_engine_get_stat(e, RF_STAT_KV_BYTES);
        g.tp_size = rf_engine_get_stat(e, RF_STAT_TP_SIZE);
        /* each GPU's memory now: the driver is asked from this thread, on the GPU's device, while
         * the engine thread may be stepping on its own (rf_engine_get_device_stat) */
        g.n_gpu = rf_engine_n_devices(e);
        if (g.n_gpu > SRV_GPU_MAX) g.n_gpu = SRV_GPU_MAX;
        for (int i = 0; i < g.n_gpu; i++) {
            srv_gpu_gauges *d = &g.gpu[i];
            d->device = rf_engine_get_device_stat(e, i, RF_DEVSTAT_ORDINAL);
            d->kv_bytes = rf_engine_get_device_stat(e, i, RF_DEVSTAT_KV_BYTES);
            d->mem_total = rf_engine_get_device_stat(e, i, RF_DEVSTAT_MEM_TOTAL);
            d->mem_free = rf_engine_get_device_stat(e, i, RF_DEVSTAT_MEM_FREE);
            if (d->mem_free < 0) d->mem_total = -1; /* not read: left out (metrics.c) */
        }
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

/* ---- the access handler ------------------------------------------------------------------- */

typedef struct conn_ctx {
    srv_route route;
    srv_buf body;
    srv_req *req;
    bool responded;    /* an answer is queued */
    srv_error refused; /* status != 0: refused (headers, size), answered after the body */
    uint64_t dropped;  /* body bytes of a refused request read and dropped */
    const char *allow; /* the Allow header of a 405 */
    bool webui;        /* the chat page (webui.c): answered once the body is read */
    bool preflight;    /* a CORS preflight from a --cors-origin: 204 once the body is read */
    srv_conn *conn;    /* the connection guard's record (server_conn.c); may be NULL */
    int64_t reserved;  /* body bytes counted against --max-buffered */
} conn_ctx;

/* The body is parsed or dropped: its memory and its share of --max-buffered go back. */
static void body_release(srv *s, conn_ctx *cc) {
    srv_buf_free(&cc->body);
    srv_guard_release(s->guard, cc->reserved);
    cc->reserved = 0;
}

/* Any name is served by the loaded model (agent clients send their own names), unless
 * --strict-model-name: then only its names (aliases, path, file name with or without .gguf). */
static bool model_matches(srv *s, const char *name) {
    if (!s->cfg.strict_model_name) return true;
    for (int32_t i = 0; i < s->cfg.n_aliases; i++)
        if (s->cfg.aliases[i] && !strcmp(name, s->cfg.aliases[i])) return true;
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
    if (!h) { /* Anthropic's clients send the key as x-api-key */
        const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
        if (!x) {
            *missing = true;
            return false;
        }
        return key_equal(x, strlen(x), s->cfg.api_key, strlen(s->cfg.api_key));
    }
    while (*h == ' ') h++;
    if (strncasecmp(h, "Bearer", 6) || (h[6] != ' ' && h[6] != '\t')) return false;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    return key_equal(h, n, s->cfg.api_key, strlen(s->cfg.api_key));
}


static enum MHD_Result finish_request(srv *s, struct MHD_Connection *c, conn_ctx *cc);

/* /v1/embeddings' engine requests, pooled as the model's file says (oai_embed.c). */
static int embed_prepare(srv *s, const srv_params *p, srv_prepared *pr, srv_error *e) {
    rf_model_info mi;
    memset(pr, 0, sizeof *pr);
    if (rf_model_get_info(s->model, &mi)) return srv_fail(e, 503, "server_error", NULL, NULL, "%s", rf_last_error());
    return srv_embed_prepare(s->eng, s->n_ctx, rf_model_pooling(s->model), mi.n_embd, p, pr, e);
}

/* The body has arrived: parse, check, queue on the engine and answer (streams at once). */
static enum MHD_Result start_request(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    srv_route route = cc->route;
    srv_params p;
    srv_error e;
    int parsed = srv_parse_request(route, cc->body.p, cc->body.len, &p, &e);
    body_release(s, cc);
    if (parsed) return send_error(s, c, route, &e);
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
    int n_subs = p.route == SRV_ROUTE_CHAT ? 1 : (int)p.n_prompts;
    int64_t limit = (int64_t)s->cfg.n_parallel + s->cfg.max_queue;
    if (p.route == SRV_ROUTE_EMBEDDINGS && n_subs > limit) { /* could never be queued: not a retry later */
        srv_params_free(&p);
        return fail(s, c, route, 400, "invalid_request_error", NULL, "input",
                    "'input' has %d entries; this server queues at most %lld at once (--parallel + --max-queue)", n_subs,
                    (long long)limit);
    }
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
    if (p.route == SRV_ROUTE_CHAT && srv_chat_render(s->model, s->n_ctx, &p, &e)) {
        srv_params_free(&p);
        return send_error(s, c, route, &e);
    }
    if (p.route == SRV_ROUTE_EMBEDDINGS ? embed_prepare(s, &p, &pr, &e) : srv_prepare(s->eng, s->n_ctx, &p, srv_rng_next(s), &pr, &e)) {
        srv_params_free(&p);
        return send_error(s, c, route, &e);
    }
    srv_req *r = srv_req_new(s, &p);
    if (!r) {
        srv_params_free(&p);
        srv_prepared_free(&pr);
        return fail(s, c, route, 503, "server_error", NULL, NULL, "out of memory");
    }
    if (s->test_faults) { /* tests: "X-RF-Test-Fault: oom-events" makes this request's event copies fail */
        const char *f = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-RF-Test-Fault");
        r->fault_oom = f && !strcmp(f, "oom-events");
        /* "X-RF-Test-Output: <JSON string>": the answer's text is this instead of the model's */
        const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-RF-Test-Output");
        json_t *j = o ? json_loads(o, JSON_DECODE_ANY, NULL) : NULL;
        if (json_is_string(j) && (r->inject = malloc(json_string_length(j) + 1))) {
            memcpy(r->inject, json_string_value(j), json_string_length(j) + 1);
            r->inject_len = json_string_length(j);
        }
        json_decref(j);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->conn = c;
    r->fd = ci ? ci->connect_fd : -1;
    r->api_n_prompt = pr.n_prompt[0];
    cc->req = r; /* the connection's reference */
    srv_list_add(s, r);
    /* queue every prompt; a failure cancels those already queued */
    for (int i = 0; i < pr.n; i++) {
        rf_request_set_callback(pr.reqs[i], srv_on_engine_event, &r->subs[i]);
        srv_req_ref(r); /* the submission's, dropped at its last DONE event */
        atomic_fetch_add(&s->active, 1);
        uint64_t id = 0;
        rf_status st = rf_engine_submit(s->eng, pr.reqs[i], &id);
        if (st) {
            atomic_fetch_sub(&s->active, 1);
            srv_req_unref(r); /* never submitted (the connection's reference remains) */
            srv_error se;
            if (st == RF_ERR_OOM) srv_fail(&se, 503, "server_error", NULL, NULL, "out of memory while queueing: %s", rf_last_error());
            else srv_fail(&se, 400, "invalid_request_error", NULL, r->p.route == SRV_ROUTE_CHAT ? "messages" : "prompt", "%s", rf_last_error());
            pthread_mutex_lock(&r->mu);
            srv_req_step(r, SRV_IN_CANCEL);
            /* the choices never queued count as done */
            r->engine_done += (pr.n - i) * r->p.n;
            pthread_mutex_unlock(&r->mu);
            srv_req_cancel(s, r);
            srv_prepared_free(&pr);
            cc->responded = true;
            return send_error(s, c, route, &se);
        }
        pthread_mutex_lock(&r->mu);
        r->subs[i].id = id;
        r->subs[i].submitted = true;
        bool cancelled = srv_req_ending(r);
        pthread_mutex_unlock(&r->mu);
        if (cancelled) rf_engine_cancel(s->eng, id);
    }
    srv_prepared_free(&pr);
    if (r->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, srv_stream_reader, r, srv_stream_free);
        if (!resp) {
            pthread_mutex_lock(&r->mu);
            srv_req_step(r, SRV_IN_CANCEL);
            pthread_mutex_unlock(&r->mu);
            srv_req_cancel(s, r);
            return MHD_NO;
        }
        srv_req_ref(r); /* the response's */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        srv_policy_add_cors(&s->cfg, c, resp);
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        log_request(s, c, route, 200);
        cc->responded = true;
        return ret;
    }
    /* non-streaming: wait (suspended) for every choice */
    pthread_mutex_lock(&r->mu);
    if (r->engine_done < r->n_choices && !r->st.lost) {
        srv_req_step(r, SRV_IN_WAIT);
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->mu);
    return finish_request(s, c, cc); /* every choice already done: answer now */
}

/* A suspended non-streaming request was resumed: answer when every choice is done. */
static enum MHD_Result finish_request(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    srv_req *r = cc->req;
    pthread_mutex_lock(&r->mu);
    bool all;
    srv_event *l = srv_take_events(r, &all);
    bool lost = r->st.lost, gone = r->st.end == SRV_END_CLIENT_GONE, shut = r->st.end == SRV_END_SHUTDOWN;
    bool engine_gone = atomic_load(&s->engine_gone);
    if (!all && !lost && !engine_gone) {
        srv_req_step(r, SRV_IN_WAIT);
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        srv_consume(r, l);
        srv_free_events(l);
        return MHD_YES;
    }
    pthread_mutex_unlock(&r->mu);
    srv_consume(r, l);
    srv_free_events(l);
    cc->responded = true;
    if (gone) return MHD_NO; /* nobody to answer */
    if (lost || !all) { /* an event could not be copied (out of memory): the output is incomplete */
        if (lost) srv_set_error(r, 503, "server_error", NULL, "out of memory while collecting the response");
        else srv_set_error(r, 503, "unavailable_error", "shutting_down", "the server is shutting down");
        srv_req_cancel(s, r);
    }
    if (shut && !r->errored) srv_set_error(r, 503, "unavailable_error", "shutting_down", "the server is shutting down");
    if (r->errored) return send_error(s, c, cc->route, &r->err);
    for (int i = 0; i < r->n_choices; i++)
        if (r->ch[i].text.oom) return fail(s, c, cc->route, 503, "server_error", NULL, NULL, "out of memory");
    json_t *j = srv_final_json(r);
    if (!j) return fail(s, c, cc->route, 503, "server_error", NULL, NULL, "out of memory");
    return send_json(s, c, cc->route, 200, j);
}

/* /tokenize and /detokenize: answered on the HTTP thread from the vocabulary (no engine step).
 * A text is tokenized up to a limit of tokens, so a huge body costs no more than that. */
#define SRV_MAX_TOKENIZE 262144
static enum MHD_Result answer_tokenize(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    srv_tok_req t;
    srv_error e;
    memset(&e, 0, sizeof e);
    cc->responded = true;
    int parsed = srv_parse_tokenize(cc->route, cc->body.p, cc->body.len, &t, &e);
    body_release(s, cc);
    if (parsed) return send_error(s, c, cc->route, &e);
    json_t *j = srv_tokenize_answer(s->vocab, cc->route, &t, SRV_MAX_TOKENIZE, &e);
    srv_tok_req_free(&t);
    if (!j) return send_error(s, c, cc->route, &e);
    return send_json(s, c, cc->route, 200, j);
}

/* The answer to a request that was refused before its body (404, 405, 401), given once the
 * body is read (and dropped), so that the connection can stay open. */
static enum MHD_Result answer_refused(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    cc->responded = true;
    if (cc->refused.status == 405) {
        char *b = cc->route == SRV_ROUTE_MESSAGES ? srv_anthropic_error_json(&cc->refused) : srv_error_json(&cc->refused);
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
    if (route == SRV_ROUTE_TOKENIZE || route == SRV_ROUTE_DETOKENIZE) return answer_tokenize(s, c, cc);
    enum MHD_Result ret = start_request(s, c, cc);
    if (!cc->req) cc->responded = true; /* refused: an error is queued */
    return ret;
}

/* The chat page: GET / and the files under /ui/ (webui.c, docs/webui.md). */
static enum MHD_Result answer_webui(srv *s, struct MHD_Connection *c, conn_ctx *cc, const char *url, const char *method) {
    int status = 0;
    cc->responded = true;
    enum MHD_Result ret = rf_webui_answer(c, url, method, &status);
    srv_metrics_http(&s->m, SRV_ROUTE_NONE, status); /* counted as route "other" */
    if (s->cfg.verbose) fprintf(stderr, "serve: %.20s %.200s %d\n", method, url, status);
    return ret;
}

/* An answer given at once, before the body is read: the connection closes after it, and the
 * guard drains what the client still sends so that it can read the answer (lingering close). */
static enum MHD_Result answer_now(srv *s, struct MHD_Connection *c, conn_ctx *cc, const srv_error *e) {
    cc->responded = true;
    srv_conn_set_state(cc->conn, SRV_CONN_BUSY);
    srv_conn_set_linger(cc->conn);
    return send_error_x(s, c, cc->route, e, true);
}

/* A CORS preflight from a --cors-origin: 204 with what the browser asked to send. */
static enum MHD_Result answer_preflight(srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    cc->responded = true;
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", srv_policy_cors_origin(&s->cfg, c));
    MHD_add_response_header(resp, "Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    bool plain = h && strlen(h) <= 1024;
    for (const char *p = h; plain && *p; p++) /* header names, commas and spaces only */
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-_, ", *p);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", plain ? h : "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    enum MHD_Result ret = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    log_request(s, c, cc->route, 204);
    return ret;
}

/* The headers are in: framing, connection reserve, Host / Origin, route, method, key, content
 * type and size are checked now. A framing error, a body over --max-body or --max-buffered and a
 * connection from the reserve are answered at once (and the connection closes); the other
 * refusals wait for the body (read and dropped), so the connection can stay open. */
static enum MHD_Result check_headers(srv *s, struct MHD_Connection *c, conn_ctx *cc, const char *url, const char *method) {
    srv_route route = cc->route;
    srv_error e;
    if (!srv_policy_framing(c, &e)) return answer_now(s, c, cc, &e);
    if (srv_conn_reserve(cc->conn) && route != SRV_ROUTE_HEALTH) {
        srv_fail(&e, 503, "unavailable_error", "too_many_connections", NULL,
                 "the server has %d connections open (--max-conns); retry later", s->cfg.max_conns);
        return answer_now(s, c, cc, &e);
    }
    bool keyless = !s->cfg.api_key, missing;
    bool options = !strcmp(method, MHD_HTTP_METHOD_OPTIONS) &&
                   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
    if (keyless && route != SRV_ROUTE_HEALTH && !srv_policy_host_ok(&s->cfg, c)) {
        srv_fail(&cc->refused, 403, "invalid_request_error", "host_not_allowed", NULL,
                 "Host '%.100s' is not this server's (without --api-key only loopback names, IP addresses, --host "
                 "and --allowed-host are accepted)", MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST));
    } else if (options && route != SRV_ROUTE_NONE) {
        if (srv_policy_cors_origin(&s->cfg, c)) cc->preflight = true;
        else
            srv_fail(&cc->refused, 403, "invalid_request_error", "origin_not_allowed", NULL,
                     "cross-origin requests from this origin are not allowed (see --cors-origin)");
    } else if (keyless && route != SRV_ROUTE_HEALTH && !srv_policy_origin_ok(&s->cfg, c)) {
        srv_fail(&cc->refused, 403, "invalid_request_error", "origin_not_allowed", NULL,
                 "Origin '%.100s' may not call this server (without --api-key: same-origin, loopback, --allowed-origin "
                 "or --cors-origin only)", MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"));
    } else if (route == SRV_ROUTE_NONE && !s->cfg.no_webui && rf_webui_owns(url)) {
        cc->webui = true;
    } else if (route == SRV_ROUTE_NONE) {
        srv_fail(&cc->refused, 404, "not_found_error", NULL, NULL, "no route %.20s %.200s (see docs/server.md)", method, url);
    } else if (!srv_route_allows(route, method, &cc->allow)) {
        srv_fail(&cc->refused, 405, "invalid_request_error", "method_not_allowed", NULL,
                 "method %.20s is not allowed on %.200s (allowed: %s)", method, url, cc->allow);
    } else if (route != SRV_ROUTE_HEALTH && route != SRV_ROUTE_MODELS && !auth_ok(s, c, &missing)) {
        srv_fail(&cc->refused, 401, "authentication_error", "invalid_api_key", NULL, "%s",
                 missing ? "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'" : "Incorrect API key provided");
    } else if (route != SRV_ROUTE_HEALTH && route != SRV_ROUTE_MODELS && route != SRV_ROUTE_METRICS && !srv_policy_json_type(c)) {
        /* a browser sends text/plain and form types cross-site without a preflight; JSON needs one */
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        srv_fail(&cc->refused, 415, "invalid_request_error", "unsupported_media_type", NULL,
                 "Content-Type must be application/json (got '%.80s')", ct ? ct : "none");
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno || end == cl || v > (unsigned long long)s->cfg.max_body) {
            srv_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                     "the request body (%.40s bytes) is over the limit of %lld bytes", cl, (long long)s->cfg.max_body);
            return answer_now(s, c, cc, &e);
        }
        if (!cc->refused.status && !cc->preflight && v > 0) {
            if (!srv_guard_reserve(s->guard, (int64_t)v)) {
                srv_fail(&e, 503, "unavailable_error", "server_busy", NULL,
                         "request bodies being read hold the buffer limit (--max-buffered %lld bytes); retry later",
                         (long long)s->cfg.max_buffered);
                return answer_now(s, c, cc, &e);
            }
            cc->reserved = (int64_t)v;
        }
    }
    return MHD_YES;
}

/* A piece of the body: kept (counted against --max-body and --max-buffered) or, for a refused
 * request, dropped. libmicrohttpd cannot queue an answer while a body is still arriving: a
 * refused body is answered at its end; a client that keeps sending far past the limit is cut
 * off (no answer: it would never read one). */
static enum MHD_Result take_upload(srv *s, conn_ctx *cc, const char *upload, size_t *upload_size) {
    srv_conn_touch(cc->conn);
    if (cc->refused.status || cc->preflight) {
        cc->dropped += *upload_size;
        *upload_size = 0;
        uint64_t cap = (uint64_t)s->cfg.max_body * 4 > (64u << 20) ? (uint64_t)s->cfg.max_body * 4 : (64u << 20);
        return cc->dropped > cap ? MHD_NO : MHD_YES;
    }
    size_t n = *upload_size;
    *upload_size = 0;
    if (cc->body.len + n > (size_t)s->cfg.max_body) {
        body_release(s, cc);
        srv_fail(&cc->refused, 413, "invalid_request_error", "request_too_large", NULL,
                 "the request body is over the limit of %lld bytes", (long long)s->cfg.max_body);
        return MHD_YES;
    }
    int64_t need = (int64_t)(cc->body.len + n) - cc->reserved;
    if (need > 0) { /* a body without Content-Length grows its share as it comes */
        if (!srv_guard_reserve(s->guard, need)) {
            body_release(s, cc);
            srv_fail(&cc->refused, 503, "unavailable_error", "server_busy", NULL,
                     "request bodies being read hold the buffer limit (--max-buffered %lld bytes); retry later",
                     (long long)s->cfg.max_buffered);
            return MHD_YES;
        }
        cc->reserved += need;
    }
    srv_buf_add(&cc->body, upload, n);
    if (cc->body.oom) {
        body_release(s, cc);
        srv_fail(&cc->refused, 503, "server_error", NULL, NULL, "out of memory while reading the request");
    }
    return MHD_YES;
}

enum MHD_Result srv_on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    (void)version;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        cc->route = srv_route_of(url);
        cc->conn = srv_conn_of(c);
        srv_conn_set_state(cc->conn, SRV_CONN_BODY);
        return check_headers(s, c, cc, url, method);
    }
    if (cc->req && !cc->responded) return finish_request(s, c, cc);
    if (cc->responded) {
        *upload_size = 0; /* answered already (413, or a stream): drop what comes */
        return MHD_YES;
    }
    if (cc->webui && !cc->refused.status) { /* the chat page; it takes no body */
        if (!*upload_size) {
            srv_conn_set_state(cc->conn, SRV_CONN_BUSY);
            return answer_webui(s, c, cc, url, method);
        }
        cc->allow = "GET, HEAD"; /* refused like any request: its body is dropped below */
        srv_fail(&cc->refused, 405, "invalid_request_error", "method_not_allowed", NULL,
                 "the web UI (%.200s) answers GET and HEAD, without a body", url);
    }
    if (*upload_size) return take_upload(s, cc, upload, upload_size);
    srv_conn_set_state(cc->conn, SRV_CONN_BUSY);
    if (cc->preflight) return answer_preflight(s, c, cc);
    if (cc->refused.status) return answer_refused(s, c, cc);
    return answer(s, c, cc);
}

void srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    srv_conn_set_state(srv_conn_of(c), SRV_CONN_IDLE); /* kept alive, or about to close */
    if (!cc) return;
    *con_cls = NULL;
    srv_req *r = cc->req;
    if (r) {
        srv_list_remove(s, r);
        pthread_mutex_lock(&r->mu);
        bool unfinished = r->engine_done < r->n_choices;
        /* the ticker may have seen the hang-up first */
        bool first = unfinished && srv_req_step(r, SRV_IN_CLIENT_GONE);
        r->conn = NULL;
        pthread_mutex_unlock(&r->mu);
        if (unfinished) {
            srv_req_cancel(s, r);
            if (first && toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN) {
                pthread_mutex_lock(&s->m.mu);
                s->m.disconnects++;
                pthread_mutex_unlock(&s->m.mu);
            }
        }
        srv_req_unref(r);
    }
    body_release(s, cc);
    free(cc);
}

