/* cmd_serve.c — `rocmforge serve`: the OpenAI-compatible HTTP server (src/server/,
 * docs/server.md). Built when libmicrohttpd is found (RF_HAVE_SERVER); otherwise the command
 * says it is not part of the build. */
#ifdef RF_HAVE_SERVER
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_run_opts.h"
#include "server/server.h"

static const char k_serve_usage[] =
    "usage: rocmforge serve -m MODEL [options]\n"
    "OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,\n"
    "GET /health, GET /metrics (docs/server.md). Listens at once; /health answers 503 while the model loads.\n"
    "  -m, --model FILE        GGUF model\n"
    "  --host ADDR             address to listen on (default 127.0.0.1; 0.0.0.0 or :: for every interface)\n"
    "  --port N                TCP port (default 8080; 0 = any free port, printed at start)\n"
    "  --alias NAME            the model's id in the API (default: the file name without .gguf)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' (not on /health and /v1/models);\n"
    "                          also --api-key-file FILE, or the RF_API_KEY environment variable\n"
    "  --parallel N            sequences generated at once (default 4); more requests wait, first come first served\n"
    "  --max-queue N           requests that may wait beyond --parallel before a 503 (default 256)\n"
    "  -c, --ctx N             positions per sequence: prompt + max_tokens must fit (default: trained length, capped to 4096)\n"
    "  -b, --batch N           token budget of one engine step (default 512, at least --parallel)\n"
    "  --kv-blocks N           KV pool size in blocks (default: ctx x parallel positions)\n"
    "  --block-size N          positions per KV block (default 16)\n"
    "  --kv-type T             KV cache type: f16 (default), f32, q8_0\n"
    "  --no-prefix-cache       do not reuse the KV blocks of shared prompt prefixes\n"
    "  --device D              auto (default), cpu, gpu or gpu:N\n"
    "  --tp N                  split each layer over N GPUs (tensor parallelism; docs/tp.md)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  --http-threads N        HTTP worker threads (default 4)\n"
    "  --max-body BYTES        request body limit, 413 above (default 8388608)\n"
    "  --sse-ping S            SSE comment ping after S seconds without output (default 15; 0 = never)\n"
    "  --timeout S             idle connection timeout in seconds (default 300; 0 = none)\n"
    "  --no-webui              no chat page at / (docs/webui.md)\n"
    "  -v, --verbose           one line per request on stderr\n"
    "Ctrl-C or SIGTERM stops: running requests are cancelled (streams end with an error event), then it exits.\n";

int rf_cmd_serve(int argc, char **argv) {
    rf_run_opts o;
    int rc = rf_run_parse(argc, argv, RF_OPT_SERVE, &o, k_serve_usage);
    if (rc >= 0) return rc;
    rf_server_config c;
    rf_server_config_defaults(&c);
    c.model_path = o.model;
    c.host = o.host;
    c.port = o.port;
    c.alias = o.alias;
    c.api_key = o.api_key;
    if (!c.api_key) {
        const char *env = getenv("RF_API_KEY");
        if (env && *env) c.api_key = env;
    }
    c.device = o.device;
    c.device_index = o.device_index;
    c.tp = o.tp;
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
    return rf_server_main(&c);
}
#endif
