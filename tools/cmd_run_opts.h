/* cmd_run_opts.h — options shared by `rocmforge run`, `chat`, `perplexity`, `batch` and `serve`
 * (defined in cmd_run.c): model/session flags, sampling flags, loading with a progress bar. */
#ifndef RF_CMD_RUN_OPTS_H
#define RF_CMD_RUN_OPTS_H

#include "cli.h"

#define RF_MAX_STOP 16

typedef struct rf_run_opts {
    const char *model, *prompt, *prompt_file, *system, *text_file;
    int32_t n_predict; /* -1 = until EOS / context */
    rf_sampler_params sp;
    int32_t n_threads, n_ctx, n_batch;
    rf_type kv_type;
    rf_device device;
    int32_t device_index; /* --device gpu:N */
    int32_t tp;           /* --tp N: tensor-parallel shards (0 = $RF_TP or 1): N GPUs or the CPU */
    bool chat, ignore_eos, no_timing, show_ids, render_special;
    bool deterministic;     /* --deterministic: batch-invariant kernels (rf_model_set_deterministic) */
    const char *stops[RF_MAX_STOP];
    int n_stop;
    const char *logits_out; /* run: write the last-position logits of the prompt (f32) here */
    /* run and batch: constrained output (one of them): GBNF text, a GBNF file, a JSON Schema
     * (text or file; "{}" any JSON object) */
    const char *grammar, *grammar_file, *json_schema, *json_schema_file;
    int32_t chunks;         /* perplexity: max chunks (0 = all) */
    /* batch: the engine's pool and scheduling, and the output format */
    int32_t n_parallel;     /* sequences in flight (default 4) */
    int32_t kv_blocks;      /* KV pool blocks; 0 = the engine's default (ctx x parallel) */
    int32_t block_size;     /* positions per KV block (default 16) */
    bool no_prefix_cache;
    bool jsonl;             /* -o jsonl (default text) */
    /* serve: the HTTP side */
    const char *host;       /* --host (default 127.0.0.1) */
    int32_t port;           /* --port (default 8080; 0 = any free port) */
    const char *api_key;    /* --api-key, --api-key-file, or RF_API_KEY */
    const char *alias;      /* --alias: the model's id in the API */
    int32_t max_queue;      /* --max-queue */
    int32_t http_threads;   /* --http-threads */
    int64_t max_body;       /* --max-body bytes */
    double ping_s;          /* --sse-ping seconds */
    int32_t timeout_s;      /* --timeout seconds */
    bool verbose;           /* -v */
    bool no_webui;          /* --no-webui */
} rf_run_opts;

/* Which flags a subcommand accepts. */
enum { RF_OPT_PROMPT = 1, RF_OPT_SAMPLING = 2, RF_OPT_CHAT = 4, RF_OPT_PPL = 8, RF_OPT_BATCH = 16, RF_OPT_SERVE = 32 };

/* Parses argv (argv[0] = subcommand). Returns -1 when parsing succeeded, else the exit code
 * to return (0 after --help, 2 after a usage error, message printed). */
int rf_run_parse(int argc, char **argv, int which, rf_run_opts *o, const char *usage);

/* Loads the model (progress bar on a terminal for files >= 64 MiB). Returns 0 or prints the
 * error and returns 1. */
int rf_run_load(const rf_run_opts *o, rf_model **m);

/* rf_run_load, then opens a session. Returns 0 or prints the error and returns 1. */
int rf_run_open(const rf_run_opts *o, rf_model **m, rf_session **s);

/* The grammar --grammar / --grammar-file / --json-schema / --json-schema-file ask for (*g NULL
 * when none). Returns 0 or prints the error and returns 2 (a bad grammar or schema). */
int rf_run_grammar(const rf_run_opts *o, rf_grammar **g);

/* Prints "prompt: ... | generation: ..." timing to stderr. */
void rf_run_print_timing(const rf_gen_stats *st);

#endif
