/* server.h — `rocmforge serve`: an OpenAI-compatible HTTP server (libmicrohttpd + jansson) on
 * the batching engine (docs/ARCHITECTURE.md §2.3, docs/server.md). */
#ifndef RF_SERVER_H
#define RF_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "rocmforge/engine.h"

typedef struct rf_server_config {
    const char *model_path;
    const char *host;        /* "127.0.0.1" (default); a name or an IPv4/IPv6 address */
    int port;                /* 8080 (default); 0 = any free port (printed at start) */
    const char *alias;       /* the model's id in the API; NULL = the file name without .gguf */
    const char *const *aliases; /* more names the model answers to and /v1/models lists (--alias again) */
    int32_t n_aliases;
    bool strict_model_name;  /* a request naming another model is a 404 model_not_found (else any name is served) */
    const char *api_key;     /* NULL = no key required */
    rf_device device;
    int32_t device_index;
    int32_t tp;              /* --tp N: tensor-parallel shards (0 = $RF_TP or 1) */
    int32_t n_threads;       /* CPU threads (0 = all cores) */
    int32_t n_ctx;           /* positions per sequence (0 = engine default) */
    int32_t n_parallel;      /* sequences running at once */
    int32_t n_batch;         /* token budget of a step (0 = engine default) */
    int32_t kv_blocks;       /* 0 = engine default */
    int32_t block_size;
    rf_type kv_type;
    bool no_prefix_cache;
    int32_t max_queue;       /* engine requests that may wait beyond --parallel before a 503 */
    int64_t max_body;        /* request body limit in bytes (413 above) */
    int32_t http_threads;    /* libmicrohttpd worker threads */
    double ping_s;           /* SSE comment ping after this many seconds without output (0 = never) */
    int32_t timeout_s;       /* idle (keep-alive) connection timeout */
    int32_t read_timeout_s;  /* a request's line + headers, or each gap in its body, within this (0 = none) */
    int32_t max_conns;       /* open connections (16 more are accepted for /health only) */
    int32_t max_conns_per_ip;/* open connections from one client address (0 = no cap) */
    int64_t max_buffered;    /* request body bytes buffered across connections (503 above) */
    const char *allowed_hosts;   /* comma-separated Host names accepted without a key ("*" = any) */
    const char *allowed_origins; /* comma-separated Origins accepted without a key */
    const char *cors_origin;     /* comma-separated Origins given CORS headers ("*" = any); NULL = off */
    bool verbose;            /* one line per request on stderr, libmicrohttpd's messages */
    bool no_webui;           /* no chat page at / and /ui/ (404), docs/webui.md */
    bool deterministic;      /* --deterministic: batch-invariant kernels (rf_model_set_deterministic) */
} rf_server_config;

/* The defaults listed in docs/server.md. */
void rf_server_config_defaults(rf_server_config *c);

/* Listens at once (/health answers 503 while the model loads), loads the model in the
 * background, serves until SIGINT or SIGTERM, then cancels what runs, answers what waits and
 * stops. Returns the process exit code (0, or 1 after an error it printed). */
int rf_server_main(const rf_server_config *c);

#endif
