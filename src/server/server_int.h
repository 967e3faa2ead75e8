/* server_int.h — what the parts of `rocmforge serve` share (not installed): the server and
 * request objects, their locks and lifetimes, and the functions one part calls in another.
 * server.c: start, threads, stop; server_http.c: libmicrohttpd's callbacks, routing, answers;
 * server_req.c: request objects, their state machine, the ticker; server_out.c: the engine
 * callback and events to OpenAI JSON and SSE.
 *
 * Threads:
 *  - libmicrohttpd's worker pool (epoll, suspend/resume): routes, checks and parses requests,
 *    queues them on the engine (rf_engine_submit is thread-safe and never waits for a step) and
 *    writes responses. A connection waiting for tokens is suspended, never blocked: its thread
 *    serves others.
 *  - the engine thread: rf_engine_serve (the engine steps while it has work). Its callback copies
 *    each event into the request's queue and resumes the connection; it never touches a socket.
 *  - the ticker (every 50 ms): looks for clients that hung up while their connection was
 *    suspended (libmicrohttpd does not watch suspended sockets) and cancels their requests, so
 *    their KV blocks return at the next step; and sends SSE comment pings to streams that have
 *    been quiet for --sse-ping seconds (long prefill or a long queue).
 *  - the loader: loads the model and starts the engine after the socket already listens.
 *  - the main thread waits for SIGINT / SIGTERM and shuts down.
 *
 * Lifetime of a request (srv_req): one reference (srv_req_ref / srv_req_unref) for the HTTP
 * connection (dropped when libmicrohttpd reports the request complete), one per engine
 * submission (dropped at its last DONE event), one for a streaming response object (dropped
 * when libmicrohttpd frees it), one while it is listed for the ticker, and one for as long as
 * another thread (the ticker, shutdown) works on it outside the list's lock.
 *
 * State of a request (srv_req_state, under r->mu): whether its connection waits (suspended)
 * for the engine, and whether and why the request ends. It changes only through
 * srv_req_step(r, input), which returns what the caller must then do outside the lock
 * (resume the connection, cancel the engine's work, count a disconnect); the table is at
 * srv_req_step in server_req.c.
 * Locks: s->mu (the request list, connection liveness) before r->mu (the event queue and
 * flags); no libmicrohttpd call is made under either, except MHD_suspend_connection under
 * r->mu from the connection's own callback, so that a resume cannot overtake the suspend. */
#ifndef RF_SERVER_INT_H
#define RF_SERVER_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "metrics.h"
#include "oai.h"
#include "tool_calls.h"
#include "server.h"
#include "server_conn.h"

#define SRV_TICK_MS 50

typedef struct srv srv;
typedef struct srv_req srv_req;

/* The request's connection: running (writing, or about to wait), waiting (suspended until the
 * engine, the ticker or shutdown wakes it), or woken by the ticker for an SSE ping. */
typedef enum srv_req_wait { SRV_REQ_RUNNING = 0, SRV_REQ_WAITING, SRV_REQ_PING_DUE } srv_req_wait;
/* Why the request ends, in rising precedence (a later cause replaces an earlier one only when
 * it ranks higher): not at all, cancelled by the server (a submission or the response object
 * failed), the server shutting down, the client gone. Any of them cancels the engine's work. */
typedef enum srv_req_end { SRV_END_NONE = 0, SRV_END_CANCELLED, SRV_END_SHUTDOWN, SRV_END_CLIENT_GONE } srv_req_end;
typedef struct srv_req_state {
    srv_req_wait wait;
    srv_req_end end;
    bool lost;      /* an event could not be copied (out of memory): the answer is an error */
} srv_req_state;
/* What happens to a request (srv_req_step's input). */
typedef enum srv_req_input {
    SRV_IN_WAIT,        /* its connection has nothing to do: the caller suspends it under r->mu */
    SRV_IN_EVENT,       /* the engine queued an event: wakes a waiting stream, or a waiting answer
                         * once every choice is done (the caller has counted a DONE first) */
    SRV_IN_LOST,        /* an event could not be copied: marks the request, wakes its connection */
    SRV_IN_PING,        /* the ticker: a waiting stream is due a ping: wakes it */
    SRV_IN_TAKE_PING,   /* the stream writer takes a due ping (returns whether one was due) */
    SRV_IN_RESUME,      /* shutdown: wakes the connection if it waits */
    SRV_IN_CANCEL,      /* ends: cancelled by the server */
    SRV_IN_SHUTDOWN,    /* ends: the server stops */
    SRV_IN_CLIENT_GONE, /* ends: the client hung up (returns whether it is the first to say so) */
} srv_req_input;

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
    float *embd;        /* an embedding's DONE: its vector (inline) */
    int32_t n_embd;
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
    srv_chat_stream cs; /* chat with parse_output: reasoning / tool calls split off (tool_calls.h) */
    float *embd;        /* /v1/embeddings: the input's vector (server_out.c) */
    int32_t n_embd;
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
    bool fault_oom;      /* tests: every event copy fails as if out of memory (set before submit) */
    char *inject;        /* tests: the answer's text replaced by this (X-RF-Test-Output) */
    size_t inject_len;
    /* under mu */
    srv_event *qh, **qt;
    int engine_done;     /* DONE events queued */
    srv_req_state st;    /* changed only by srv_req_step */
    atomic_llong t_write_ms; /* last bytes handed to the socket (streams) */
    /* under s->mu */
    srv_req *prev, *next;
    bool listed;
    struct MHD_Connection *conn;
    int fd;
    /* the connection's thread only */
    srv_buf out;
    size_t out_off;
    enum { SRV_OUT_NEW = 0, SRV_OUT_OPEN, SRV_OUT_ENDED } out_state; /* a stream: before its opening events, sending, ended */
    bool errored;
    int consumed_done;
    srv_error err;
    int64_t u_prompt, u_completion, u_cached;
    /* Messages / Responses answers (server_out_messages.c, server_out_responses.c) */
    int32_t api_n_prompt;  /* prompt tokens, known before the first event (message_start) */
    int64_t api_seq;       /* Responses: the next event's sequence_number */
    srv_buf api_raw;       /* Messages with several stop sequences: every token's piece, to name the one hit */
    int api_items;         /* parsed answers (tool calls, reasoning): content blocks / output items sent */
    int api_open;          /* the one open now: 0 none, 1 text / message, 2 thinking / reasoning, 3 a tool call */
    srv_buf api_ws;        /* whitespace between tool calls, held until text follows (else dropped) */
    /* Responses: the function_call item open now (api_open 3): its call id, name, stream index
     * and the arguments sent so far, for its .done events */
    char *api_call_id, *api_call_name;
    int api_call_idx;
    srv_buf api_args;
};

struct srv {
    rf_server_config cfg;
    char *alias;
    char *file_base;     /* the model file's name */
    struct MHD_Daemon *d;
    srv_guard *guard;    /* server_conn.c: connection states, read timeouts, buffered bytes, lingering */
    rf_model *model;
    rf_engine *eng;
    const rf_vocab *vocab;
    int32_t n_ctx;
    int64_t created;
    bool test_faults;    /* test hook serve_faults: requests may ask for simulated failures */
    atomic_int ready, stopping, engine_gone, load_failed;
    atomic_int ticker_stop;
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

static inline double srv_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline long long srv_now_ms(void) { return (long long)(srv_now_s() * 1000.0); }

/* ---- server_req.c: request objects, the engine callback, the ticker ---------------------- */

/* A 64-bit random number (splitmix64 over a counter seeded at start); thread-safe. */
uint64_t srv_rng_next(srv *s);
/* A request object for checked parameters, which it takes over (*p is zeroed): id, choices,
 * echo texts. One reference (the caller's). NULL when out of memory (p is then freed). */
srv_req *srv_req_new(srv *s, srv_params *p);
/* Takes a reference (for one of the owners named at the top); returns r. */
static inline srv_req *srv_req_ref(srv_req *r) {
    atomic_fetch_add(&r->refs, 1);
    return r;
}
/* Drops a reference; the last one frees the request and its queued events. NULL is a no-op. */
void srv_req_unref(srv_req *r);
/* The request's one state transition (under r->mu): applies `in` to r->st and returns whether
 * the caller must act on it: resume the connection (EVENT, LOST, PING, RESUME), the ping that
 * was due (TAKE_PING), this being the first hang-up reported (CLIENT_GONE). */
bool srv_req_step(srv_req *r, srv_req_input in);
/* Whether the request ends (any cause): the engine's work on it is being cancelled. */
static inline bool srv_req_ending(const srv_req *r) { return r->st.end != SRV_END_NONE; }
/* Lists r for the ticker (takes a reference) / unlists it (drops it; returns whether it was
 * listed). Under s->mu. */
void srv_list_add(srv *s, srv_req *r);
bool srv_list_remove(srv *s, srv_req *r);
/* Cancels r's engine submissions made so far (later ones see r->cancelled); their choices end
 * as cancelled at the next step and their KV blocks return to the pool. */
void srv_req_cancel(srv *s, srv_req *r);
/* The ticker thread's body (arg: the srv); returns when s->ticker_stop is set. */
void *srv_ticker_main(void *arg);

/* ---- server_out.c: a request's output: the engine's events queued (engine thread), then
 * turned into OpenAI JSON and SSE (the connection's thread) -------------------------------- */

/* The engine callback (engine thread): copies the event into r's queue, resumes the
 * connection when it has something to write, records latencies. Returns false once the
 * request is cancelled, so the engine stops it. A copy that fails (out of memory) marks the
 * request lost_events: its connection answers with an error. */
bool srv_on_engine_event(const rf_event *ev, void *user);
/* Takes r's queued events (under r->mu); *all: every choice's DONE is among those taken so far. */
srv_event *srv_take_events(srv_req *r, bool *all);
void srv_free_events(srv_event *e);
/* Applies events to r: stream chunks into r->out, or the choices' texts and log-probabilities.
 * An engine error or a cancellation sets r->err (and, streaming, writes the error event). */
void srv_consume(srv_req *r, srv_event *list);
/* A parsed choice's answer (chat, Messages and Responses alike; tool_calls.h parses it): text
 * added and the parse fed (its configuration made at the first text), *d what it now commits;
 * false when out of memory (r->out.oom set). srv_choice_parse: the whole text parsed at the end
 * into *po; nonzero when out of memory (po freed). */
bool srv_choice_feed(srv_req *r, int ci, const char *text, size_t len, bool final, srv_chat_delta *d);
int srv_choice_parse(const srv_req *r, int ci, srv_chat_out *po);
/* Records the request's error (the first one wins). */
void srv_set_error(srv_req *r, int status, const char *type, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
/* The whole non-streaming response; NULL when out of memory. */
json_t *srv_final_json(srv_req *r);
/* libmicrohttpd's content reader of a streaming response (cls: the srv_req): hands out what
 * r->out holds, else takes events and formats them, else suspends the connection (returns 0)
 * until the engine callback or the ticker resumes it. Ends the stream after [DONE], or with an
 * error when the client is gone or memory ran out. */
ssize_t srv_stream_reader(void *cls, uint64_t pos, char *buf, size_t max);
/* Frees the streaming response's reference. */
void srv_stream_free(void *cls);

/* ---- server_out.c: /v1/embeddings' answer --------------------------------------- */
/* A DONE event of an embeddings request: its vector kept in its choice. */
void srv_embed_consume(srv_req *r, srv_choice *ch, const srv_event *e);
/* {"object": "list", "data": [...], "model", "usage"}; NULL when out of memory. */
json_t *srv_embeddings_final_json(srv_req *r);

/* ---- server_out_messages.c, server_out_responses.c: the other API shapes' answers ---------- */

/* A streamed request's opening events (message_start ...; response.created ...). */
void srv_messages_stream_start(srv_req *r);
void srv_responses_stream_start(srv_req *r);
/* Output text of the (single) choice: delta events, or kept for the final object. The DONE
 * event's text comes last (token -1 / final): a parsed answer then commits what it held. */
void srv_messages_text(srv_req *r, const char *text, size_t len, int32_t token);
void srv_responses_text(srv_req *r, const char *text, size_t len, bool final);
/* A stream's closing events, once the choice is done without error. */
void srv_messages_stream_end(srv_req *r);
void srv_responses_stream_end(srv_req *r);
/* r->err as the shape's error event. */
void srv_messages_stream_error(srv_req *r);
void srv_responses_stream_error(srv_req *r);
/* The whole non-streaming answer; NULL when out of memory. */
json_t *srv_messages_final_json(srv_req *r);
json_t *srv_responses_final_json(srv_req *r);

/* ---- server_http.c: libmicrohttpd's callbacks --------------------------------------------- */

enum MHD_Result srv_on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls);
void srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);

#endif
