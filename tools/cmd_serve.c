/* cmd_serve.c — `rocmforge serve`: the OpenAI-compatible HTTP server (src/server/,
 * docs/server.md). Built when libmicrohttpd is found (RF_HAVE_SERVER); otherwise the command
 * says it is not part of the build. */
#ifdef RF_HAVE_SERVER
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/knobs.h"
#include "cmd_run_opts.h"
#include "server/server.h"

static const char k_serve_usage[] =
    "usage: rocmforge serve -m MODEL [options]\n"
    "OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions, POST /v1/messages\n"
    "(Anthropic), POST /v1/responses, POST /tokenize, POST /detokenize, GET /v1/models, GET /health,\n"
    "GET /metrics (docs/server.md). Listens at once; /health answers 503 while the model loads.\n"
    "  -m, --model FILE        GGUF model\n"
    "  --host ADDR             address to listen on (default 127.0.0.1; 0.0.0.0 or :: for every interface)\n"
    "  --port N                TCP port (default 8080; 0 = any free port, printed at start)\n"
    "  --alias NAME            the model's id in the API (default: the file name without .gguf); repeatable:\n"
    "                          the other names are listed by /v1/models too\n"
    "  --strict-model-name     a request naming a model this server does not list is a 404 (default: any\n"
    "                          requested name is served by the loaded model)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (not on /health and /v1/models);\n"
    "                          also --api-key-file FILE, or the RF_API_KEY environment variable\n"
    "  --parallel N            sequences generated at once (default 4); more requests wait, first come first served\n"
    "  --max-queue N           requests that may wait beyond --parallel before a 503 (default 256)\n"
    "  -c, --ctx N             positions per sequence: prompt + max_tokens must fit (default: trained length, capped to 4096)\n"
    "  -b, --batch N           token budget of one engine step (default 512, 2 x --parallel past 256)\n"
    "  --kv-blocks N           KV pool size in blocks (default: ctx x parallel positions)\n"
    "  --block-size N          positions per KV block (default 16)\n"
    "  --kv-type T             KV cache type: f16 (default), f32, q8_0\n"
    "  --no-prefix-cache       do not reuse the KV blocks of shared prompt prefixes\n"
    "  --device D              auto (default), cpu, gpu or gpu:N\n"
    "  --tp N                  split each layer over N GPUs (tensor parallelism; docs/tp.md): refused without\n"
    "                          N GPUs (--device cpu runs the split on the CPU: a check of it, not faster)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  --http-threads N        HTTP worker threads (default 4)\n"
    "  --max-body BYTES        request body limit, 413 above (default 8388608)\n"
    "  --sse-ping S            SSE comment ping after S seconds without output (default 15; 0 = never)\n"
    "  --timeout S             idle keep-alive connection timeout in seconds (default 300; 0 = none)\n"
    "  --read-timeout S        a request line + headers, and each gap in a body, within S seconds, else the\n"
    "                          connection is closed (default 10; 0 = none)\n"
    "  --max-conns N           open connections (default 1000; 16 more answer /health only)\n"
    "  --max-conns-per-ip N    open connections from one client address (default 512; 0 = no cap)\n"
    "  --max-buffered BYTES    request bytes buffered across connections, 503 above (default 268435456)\n"
    "  --allowed-host H[,H..]  without --api-key, Host names accepted besides loopback names, IP addresses\n"
    "                          and --host (repeatable; '*' = any)\n"
    "  --allowed-origin O[,O..] without --api-key, Origins (scheme://host[:port]) accepted besides loopback\n"
    "                          and same-origin pages (repeatable)\n"
    "  --cors-origin O[,O..]   answer CORS preflights and add Access-Control-Allow-Origin for these Origins\n"
    "                          ('*' = any; default: no CORS)\n"
    "  --no-webui              no chat page at / (docs/webui.md)\n"
    "  --deterministic         batch-invariant kernels: a request's tokens do not depend on the others\n"
    "  -v, --verbose           one line per request on stderr\n"
    "Ctrl-C or SIGTERM stops: running requests are cancelled (streams end with an error event), then it exits.\n";

/* The options only `serve` has (docs/server.md, "Security"); taken out of argv before the shared
 * parser sees the rest. A list option given twice keeps both lists (joined with a comma). */
#define SERVE_MAX_ALIASES 64

typedef struct serve_opts {
    long long read_timeout, max_conns, max_conns_per_ip, max_buffered;
    char *lists[3]; /* allowed hosts, allowed origins, CORS origins */
    const char *aliases[SERVE_MAX_ALIASES]; /* every --alias, in order */
    int n_aliases;
    bool strict_model_name;
} serve_opts;

static int take_serve_opts(int *argc, char **argv, serve_opts *so) {
    static const char *const list_names[3] = {"--allowed-host", "--allowed-origin", "--cors-origin"};
    static const struct { const char *name; long long lo, hi; } nums[4] = {
        {"--read-timeout", 0, 86400}, {"--max-conns", 1, 1000000}, {"--max-conns-per-ip", 0, 1000000},
        {"--max-buffered", 1024, 1LL << 40}};
    long long *num_out[4] = {&so->read_timeout, &so->max_conns, &so->max_conns_per_ip, &so->max_buffered};
    int w = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        int k = -1, l = -1;
        if (!strcmp(a, "--strict-model-name")) {
            so->strict_model_name = true;
            continue;
        }
        if (!strcmp(a, "--alias")) {
            if (i + 1 >= *argc) return rf_cli_fail(2, "option --alias needs a value");
            if (!*argv[i + 1]) return rf_cli_fail(2, "option --alias: empty value");
            if (so->n_aliases == SERVE_MAX_ALIASES) return rf_cli_fail(2, "option --alias: at most %d names", SERVE_MAX_ALIASES);
            so->aliases[so->n_aliases++] = argv[++i];
            continue;
        }
        for (int j = 0; j < 4; j++)
            if (!strcmp(a, nums[j].name)) k = j;
        for (int j = 0; j < 3; j++)
            if (!strcmp(a, list_names[j])) l = j;
        if (k < 0 && l < 0) {
            argv[w++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) return rf_cli_fail(2, "option %s needs a value", a);
        const char *v = argv[++i];
        if (k >= 0) {
            if (!rf_cli_parse_i64(v, nums[k].lo, nums[k].hi, num_out[k]))
                return rf_cli_fail(2, "option %s: '%s' must be an integer in [%lld, %lld]", a, v, nums[k].lo, nums[k].hi);
            continue;
        }
        if (!*v) return rf_cli_fail(2, "option %s: empty value", a);
        char *old = so->lists[l];
        size_t n = (old ? strlen(old) + 1 : 0) + strlen(v) + 1;
        char *j = malloc(n);
        if (!j) return rf_cli_fail(1, "out of memory");
        snprintf(j, n, "%s%s%s", old ? old : "", old ? "," : "", v);
        free(old);
        so->lists[l] = j;
    }
    argv[w] = NULL;
    *argc = w;
    return -1;
}

static int serve_with(rf_server_config *cfg, const rf_run_opts *opts, const serve_opts *so);

int rf_cmd_serve(int argc, char **argv) {
    rf_server_config c;
    rf_server_config_defaults(&c);
    serve_opts so = {c.read_timeout_s, c.max_conns, c.max_conns_per_ip, c.max_buffered, {NULL, NULL, NULL}, {NULL}, 0, false};
    int rc = take_serve_opts(&argc, argv, &so);
    if (rc < 0) {
        rf_run_opts o;
        rc = rf_run_parse(argc, argv, RF_OPT_SERVE, &o, k_serve_usage);
        if (rc < 0) rc = serve_with(&c, &o, &so);
    }
    for (int i = 0; i < 3; i++) free(so.lists[i]);
    return rc;
}

static int serve_with(rf_server_config *cfg, const rf_run_opts *opts, const serve_opts *so) {
    rf_server_config c = *cfg;
    const rf_run_opts o = *opts;
    c.read_timeout_s = (int32_t)so->read_timeout;
    c.max_conns = (int32_t)so->max_conns;
    c.max_conns_per_ip = (int32_t)so->max_conns_per_ip;
    c.max_buffered = so->max_buffered;
    c.allowed_hosts = so->lists[0];
    c.allowed_origins = so->lists[1];
    c.cors_origin = so->lists[2];
    c.model_path = o.model;
    c.host = o.host;
    c.port = o.port;
    c.alias = so->n_aliases ? so->aliases[0] : o.alias;
    c.aliases = so->n_aliases > 1 ? so->aliases + 1 : NULL;
    c.n_aliases = so->n_aliases > 1 ? so->n_aliases - 1 : 0;
    c.strict_model_name = so->strict_model_name;
    c.api_key = o.api_key;
    if (!c.api_key) {
        c.api_key = rf_knob_str(RF_KNOB_API_KEY); /* NULL when unset */
    }
    c.device = o.device;
    c.device_index = o.device_index;
    c.tp = o.tp;
    /* A server asked for --tp N > 1 is asked for N GPUs: `run` with --device auto falls back to
     * the split on the CPU (a check, slower than no split), which a server must not do quietly.
     * So auto means gpu here, and the load refuses without N GPUs, naming the counts and
     * --device cpu (docs/tp.md). */
    if (c.tp > 1 && c.device == RF_DEVICE_AUTO) c.device = RF_DEVICE_GPU;
    c.n_threads = o.n_threads;
    c.n_ctx = o.n_ctx;
    c.n_parallel = o.n_parallel;
    c.n_batch = o.n_batch;
    c.kv_blocks = o.kv_blocks;
    c.block_size = o.block_size;
    c.kv_type = o.kv_type;
    c.no_prefix_cache = o.no_prefix_cache;
    c.max_queue = o.max_queue;
    c.max_body = o.max_body;
    c.http_threads = o.http_threads;
    c.ping_s = o.ping_s;
    c.timeout_s = o.timeout_s;
    c.verbose = o.verbose;
    c.no_webui = o.no_webui;
    c.deterministic = o.deterministic;
    return rf_server_main(&c);
}
#endif
