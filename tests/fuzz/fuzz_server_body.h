/* fuzz_server_body.h — one fuzz iteration over the server's request-to-params path (routing,
 * srv_parse_request, srv_chat_render, srv_prepare: tokenizing, chat-template rendering with tools,
 * the context check; and the answer parsers on the same bytes),
 * shared by the libFuzzer target (fuzz_server.c) and the corpus replay unit test
 * (tests/unit/test_server_parse.c). Include after defining _GNU_SOURCE.
 *
 * Input: byte 0 picks the route (bits 2-3: 0 = bit 0 picks chat or completions, 1 = Anthropic
 * messages, 2 = OpenAI responses, 3 = bit 0 picks /tokenize or /detokenize, answered from the
 * model's vocabulary; bit 1: also try the rest as a URL path and a method; bit 4: /v1/embeddings
 * instead, parsed and prepared as embedding requests), the rest is the request body. Invariants (a violation traps): a refused
 * body is a 400 or 404 with a type, a message and valid JSON for its error; never a 5xx other
 * than 503 for out-of-memory; an accepted body's parameters are in the ranges the engine takes;
 * prepared requests are counted against the context (prompt + max_tokens <= n_ctx). */
#ifndef RF_FUZZ_SERVER_BODY_H
#define RF_FUZZ_SERVER_BODY_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rocmforge/engine.h"
#include "rocmforge/mkmodel.h"
#include "server/oai.h"
#include "server/tool_calls.h"

#include "fuzz_check.h"

typedef struct rf_fuzz_srv {
    rf_model *model;
    rf_engine *eng;
    int32_t n_ctx;
} rf_fuzz_srv;

/* Loads `model_path` (or, when NULL or unreadable, writes mkmodel's "tiny" preset to a
 * temporary file and loads that) on the CPU and makes an engine with a small context, so that
 * srv_prepare can tokenize and render against a real vocabulary and template. Returns 0, or -1
 * with a message on stderr. Nothing is ever submitted: no forward runs. */
static int rf_fuzz_srv_init(rf_fuzz_srv *f, const char *model_path) {
    memset(f, 0, sizeof *f);
    rf_log_set_level(RF_LOG_ERROR);
    char tmp[] = "/tmp/rf-fuzz-server-XXXXXX.gguf";
    const char *path = model_path;
    FILE *probe = path ? fopen(path, "rb") : NULL;
    if (probe) fclose(probe);
    else {
        int fd = mkstemps(tmp, 5);
        if (fd < 0) return -1;
        close(fd);
        rf_mkmodel_opts o;
        memset(&o, 0, sizeof o);
        o.preset = "tiny";
        o.type = "q8_0";
        o.seed = 1;
        if (rf_mkmodel_write(&o, tmp)) {
            fprintf(stderr, "fuzz_server: mkmodel: %s\n", rf_last_error());
            return -1;
        }
        path = tmp;
    }
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    mp.n_threads = 1;
    if (rf_model_load(path, &mp, &f->model)) {
        fprintf(stderr, "fuzz_server: load %s: %s\n", path, rf_last_error());
        return -1;
    }
    if (path == tmp) unlink(tmp);
    rf_engine_config *c = rf_engine_config_new();
    rf_engine_config_set(c, RF_ENGINE_CTX, 512);
    rf_engine_config_set(c, RF_ENGINE_PARALLEL, 1);
    rf_engine_config_set(c, RF_ENGINE_THREADS, 1);
    rf_status st = rf_engine_new(f->model, c, &f->eng);
    rf_engine_config_free(c);
    if (st) {
        fprintf(stderr, "fuzz_server: engine: %s\n", rf_last_error());
        return -1;
    }
    f->n_ctx = (int32_t)rf_engine_get_stat(f->eng, RF_STAT_CTX);
    return 0;
}

/* The Anthropic shape of the same error: {"type":"error","error":{"type","message"}}. */
static void rf_fuzz_srv_check_anthropic(const srv_error *e) {
    char *j = srv_anthropic_error_json(e);
    RF_FUZZ_CHECK(j != NULL);
    json_error_t jerr;
    json_t *o = json_loads(j, 0, &jerr);
    RF_FUZZ_CHECK(o && json_is_object(json_object_get(o, "error")));
    RF_FUZZ_CHECK(!strcmp(json_string_value(json_object_get(o, "type")), "error"));
    json_t *in = json_object_get(o, "error");
    RF_FUZZ_CHECK(json_is_string(json_object_get(in, "message")) && json_is_string(json_object_get(in, "type")));
    json_decref(o);
    free(j);
}

static void rf_fuzz_srv_check_error(const srv_error *e) {
    RF_FUZZ_CHECK(e->status == 400 || e->status == 404 || e->status == 503);
    if (e->status == 503) RF_FUZZ_CHECK(strstr(e->message, "out of memory") != NULL);
    RF_FUZZ_CHECK(e->type && *e->type);
    RF_FUZZ_CHECK(e->message[0]);
    char *j = srv_error_json(e);
    RF_FUZZ_CHECK(j != NULL);
    json_error_t jerr;
    json_t *o = json_loads(j, 0, &jerr);
    RF_FUZZ_CHECK(o && json_is_object(json_object_get(o, "error")));
    json_t *in = json_object_get(o, "error");
    RF_FUZZ_CHECK(json_is_string(json_object_get(in, "message")));
    RF_FUZZ_CHECK(json_is_string(json_object_get(in, "type")));
    json_t *code = json_object_get(in, "code"), *param = json_object_get(in, "param");
    RF_FUZZ_CHECK(code && (json_is_null(code) || json_is_string(code)));
    RF_FUZZ_CHECK(param && (json_is_null(param) || json_is_string(param)));
    json_decref(o);
    free(j);
}

/* A stream of t[0..n) fed at cuts[0..nc) (the last is n) against its final parse o: the texts
 * add up to the final parse's; calls start in index order, pieces only for started calls; the
 * final calls come in order among the started ones, each with its name and exactly its arguments
 * (what the stream sent of a call is a prefix of the final parse, in every syntax); a started
 * call's id is its final call's, or its stream index's after one that died. */
static void rf_fuzz_srv_stream(const srv_parse_cfg *cfg, const char *t, size_t n, const srv_chat_out *o,
                               const size_t *cuts, size_t nc) {
    enum { MAXC = 16 };
    srv_buf id[MAXC] = {{0}}, name[MAXC] = {{0}}, args[MAXC] = {{0}};
    srv_chat_stream s = {.ready = true, .cfg = *cfg};
    size_t r = 0, c = 0, started = 0;
    for (size_t i = 0; i < nc; i++) {
        srv_chat_delta d;
        RF_FUZZ_CHECK(srv_chat_stream_feed(&s, t, cuts[i], i + 1 == nc, &d) == 0);
        r += d.reasoning_len;
        c += d.content_len;
        for (size_t k = 0; k < d.n_parts; k++) {
            const srv_call_part *p = &d.parts[k];
            if (p->name) {
                RF_FUZZ_CHECK(p->index == started++ && p->id);
                if (p->index < MAXC) {
                    srv_buf_add(&id[p->index], p->id, strlen(p->id));
                    srv_buf_add(&name[p->index], p->name, strlen(p->name));
                }
            }
            RF_FUZZ_CHECK(p->index < started);
            if (p->index < MAXC) srv_buf_add(&args[p->index], p->args ? p->args : "", p->args_len);
        }
    }
    RF_FUZZ_CHECK(r == o->reasoning.len && c == o->content.len && started >= o->n_calls);
    size_t m = 0;
    for (size_t k = 0; k < started && k < MAXC; k++) {
        bool match = m < o->n_calls && !strcmp(name[k].p, o->calls[m].name) &&
                     args[k].len == strlen(o->calls[m].arguments) &&
                     !memcmp(args[k].p ? args[k].p : "", o->calls[m].arguments, args[k].len);
        char gen[32];
        srv_chat_call_id(cfg, k, gen);
        /* Mistral: an id the model wrote ([CALL_ID]) is the call's, after a dead call too */
        RF_FUZZ_CHECK(!strcmp(id[k].p, match && k == m ? o->calls[m].id : gen) ||
                      (cfg->syntax == SRV_SYNTAX_MISTRAL && !(match && k == m)));
        if (match) m++;
    }
    RF_FUZZ_CHECK(started > MAXC || m == o->n_calls);
    for (size_t k = 0; k < MAXC; k++) {
        srv_buf_free(&id[k]);
        srv_buf_free(&name[k]);
        srv_buf_free(&args[k]);
    }
    srv_chat_stream_free(&s);
}

/* The answer parsers (tool_calls.h) on the same bytes as a model's text, in every syntax:
 * never an error but out of memory, call arguments always a JSON object, and streamed (in three
 * growing pieces, and for short texts in steps of 1 to 5 bytes) as rf_fuzz_srv_stream checks. */
static void rf_fuzz_srv_answer(const char *t, size_t n) {
    size_t step = 1 + n % 5, nc = n <= 2048 ? (n + step - 1) / step + 1 : 0;
    size_t *steps = nc ? malloc(nc * sizeof *steps) : NULL;
    if (steps) {
        for (size_t i = 0; i + 1 < nc; i++) steps[i] = i * step;
        steps[nc - 1] = n;
    }
    for (int syn = SRV_SYNTAX_NONE; syn <= SRV_SYNTAX_HARMONY; syn++) {
        srv_parse_cfg cfg = {.syntax = (srv_tool_syntax)syn, .tools = true, .reasoning = true, .parallel = true,
                             .think_open = (n & 1) != 0, .id_seed = 1};
        srv_chat_out o = {0};
        RF_FUZZ_CHECK(srv_chat_parse(&cfg, t, n, true, &o) == 0);
        for (size_t k = 0; k < o.n_calls; k++) {
            json_t *a = json_loads(o.calls[k].arguments, JSON_ALLOW_NUL, NULL); /* \u0000 is JSON */
            RF_FUZZ_CHECK(json_is_object(a));
            json_decref(a);
        }
        size_t cut[3] = {n / 3, 2 * n / 3, n};
        rf_fuzz_srv_stream(&cfg, t, n, &o, cut, 3);
        if (steps) rf_fuzz_srv_stream(&cfg, t, n, &o, steps, nc);
        srv_chat_out_free(&o);
    }
    free(steps);
}

/* /v1/embeddings: parse, prepare with the model's pooling (every input counted against the
 * context, none empty), and the vector written both ways (base64: 4 bytes a float). */
static int rf_fuzz_srv_embed(rf_fuzz_srv *f, const char *body, size_t len) {
    srv_params p;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_parse_request(SRV_ROUTE_EMBEDDINGS, body, len, &p, &e)) {
        rf_fuzz_srv_check_error(&e);
        return 0;
    }
    RF_FUZZ_CHECK(p.route == SRV_ROUTE_EMBEDDINGS && p.n == 1 && !p.stream);
    RF_FUZZ_CHECK(p.n_prompts >= 1 && p.n_prompts <= SRV_MAX_EMBED_INPUTS);
    for (size_t i = 0; i < p.n_prompts; i++) RF_FUZZ_CHECK(p.prompts[i].text ? p.prompts[i].len > 0 : p.prompts[i].n_ids > 0);
    rf_model_info mi;
    RF_FUZZ_CHECK(rf_model_get_info(f->model, &mi) == RF_OK);
    srv_prepared pr;
    memset(&e, 0, sizeof e);
    int rc = 2;
    if (srv_embed_prepare(f->eng, f->n_ctx, rf_model_pooling(f->model), mi.n_embd, &p, &pr, &e)) {
        rf_fuzz_srv_check_error(&e);
        rc = 1;
    } else {
        RF_FUZZ_CHECK(pr.n == (int)p.n_prompts);
        RF_FUZZ_CHECK(!p.dimensions || p.dimensions == mi.n_embd);
        for (int i = 0; i < pr.n; i++) RF_FUZZ_CHECK(pr.n_prompt[i] > 0 && pr.n_prompt[i] <= f->n_ctx);
        srv_prepared_free(&pr);
    }
    float v[5] = {1.0f, -0.5f, 0.25f, 3e-39f, (float)len};
    int32_t n = (int32_t)(len % 6);
    json_t *j = srv_embedding_json(v, n, p.embd_base64);
    RF_FUZZ_CHECK(j != NULL);
    if (p.embd_base64) RF_FUZZ_CHECK(json_is_string(j) && json_string_length(j) == (size_t)(4 * n + 2) / 3 * 4);
    else RF_FUZZ_CHECK(json_is_array(j) && json_array_size(j) == (size_t)n);
    json_decref(j);
    srv_params_free(&p);
    return rc;
}

/* One input; returns 0 when the body was refused by the parser, 1 when refused while preparing
 * (context, vocabulary, template), 2 when engine requests were built. */
static int rf_fuzz_srv_one(rf_fuzz_srv *f, const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    static const srv_route kind_route[4] = {SRV_ROUTE_CHAT, SRV_ROUTE_MESSAGES, SRV_ROUTE_RESPONSES, SRV_ROUTE_TOKENIZE};
    int kind = (data[0] >> 2) & 3;
    srv_route route = kind_route[kind];
    if (kind == 0 && (data[0] & 1)) route = SRV_ROUTE_COMPLETIONS;
    if (kind == 3 && (data[0] & 1)) route = SRV_ROUTE_DETOKENIZE;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] & 2) { /* the router: the body as a path, its first word as a method */
        char *path = malloc(len + 1);
        if (!path) return 0;
        memcpy(path, body, len);
        path[len] = 0;
        srv_route r = srv_route_of(path);
        RF_FUZZ_CHECK(r >= SRV_ROUTE_NONE && r < SRV_ROUTE_COUNT);
        const char *allow = NULL;
        (void)srv_route_allows(r, path, &allow);
        RF_FUZZ_CHECK(allow != NULL);
        RF_FUZZ_CHECK(srv_route_name(r) != NULL);
        json_t *j = srv_json_bytes(path, len); /* any bytes make a valid JSON string */
        RF_FUZZ_CHECK(j != NULL);
        json_decref(j);
        free(path);
    }
    rf_fuzz_srv_answer(body, len);
    srv_params p;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (data[0] & 16) return rf_fuzz_srv_embed(f, body, len);
    if (kind == 3) { /* /tokenize, /detokenize: parse and answer (no engine) */
        srv_tok_req t;
        if (srv_parse_tokenize(route, body, len, &t, &e)) {
            rf_fuzz_srv_check_error(&e);
            return 0;
        }
        memset(&e, 0, sizeof e);
        json_t *a = srv_tokenize_answer(rf_model_vocab(f->model), route, &t, 4096, &e);
        int rc = 2;
        if (!a) {
            rf_fuzz_srv_check_error(&e);
            rc = 1;
        } else {
            RF_FUZZ_CHECK(json_is_array(json_object_get(a, "tokens")) || json_is_string(json_object_get(a, "content")));
            char *d = json_dumps(a, JSON_COMPACT);
            RF_FUZZ_CHECK(d != NULL);
            free(d);
            json_decref(a);
        }
        srv_tok_req_free(&t);
        return rc;
    }
    if (srv_parse_request(route, body, len, &p, &e)) {
        rf_fuzz_srv_check_error(&e);
        if (route == SRV_ROUTE_MESSAGES) rf_fuzz_srv_check_anthropic(&e);
        return 0;
    }
    /* Messages and Responses come back as one-choice chat requests in their own answer shape */
    if (kind == 1 || kind == 2) {
        RF_FUZZ_CHECK(p.route == SRV_ROUTE_CHAT && p.n == 1 && p.logprobs == -1);
        RF_FUZZ_CHECK(p.api == (kind == 1 ? SRV_API_MESSAGES : SRV_API_RESPONSES));
        if (kind == 1) RF_FUZZ_CHECK(p.max_tokens >= 1);
    }
    /* what the parser accepts is in the engine's ranges */
    RF_FUZZ_CHECK(p.n >= 1 && p.n <= SRV_MAX_N);
    RF_FUZZ_CHECK(p.logprobs >= -1 && p.logprobs <= SRV_MAX_TOP_LOGPROBS);
    RF_FUZZ_CHECK(p.n_stop >= 0 && p.n_stop <= SRV_MAX_STOP);
    RF_FUZZ_CHECK(p.sp.temperature >= 0 && p.sp.temperature <= 2);
    RF_FUZZ_CHECK(p.sp.top_p >= 0 && p.sp.top_p <= 1);
    RF_FUZZ_CHECK(p.max_tokens >= -1);
    RF_FUZZ_CHECK(p.route == SRV_ROUTE_CHAT ? p.n_msgs >= 1 : p.n_prompts >= 1);
    srv_prepared pr;
    memset(&e, 0, sizeof e);
    int rc = 2;
    /* chat: rendered with its tools and tool results as the server renders it */
    if (route == SRV_ROUTE_CHAT && srv_chat_render(f->model, f->n_ctx, &p, &e)) {
        rf_fuzz_srv_check_error(&e);
        srv_params_free(&p);
        return 1;
    }
    if (route == SRV_ROUTE_CHAT) RF_FUZZ_CHECK(p.prompt_ids != NULL && p.n_prompt_ids <= (size_t)f->n_ctx);
    if (srv_prepare(f->eng, f->n_ctx, &p, 42, &pr, &e)) {
        rf_fuzz_srv_check_error(&e);
        rc = 1;
    } else {
        RF_FUZZ_CHECK(pr.n == (p.route == SRV_ROUTE_CHAT ? 1 : (int)p.n_prompts));
        for (int i = 0; i < pr.n; i++) {
            RF_FUZZ_CHECK(pr.n_prompt[i] > 0 && pr.n_prompt[i] <= f->n_ctx);
            if (p.max_tokens >= 0) RF_FUZZ_CHECK(pr.n_prompt[i] + p.max_tokens <= f->n_ctx);
        }
        srv_prepared_free(&pr);
    }
    srv_params_free(&p);
    return rc;
}

#endif
