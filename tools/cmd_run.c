/* cmd_run.c — `rocmforge run`: generate text from a prompt and stream it to stdout, ending with
 * a timing line on stderr. Also defines the option parsing and model opening shared with
 * `chat`, `perplexity` and `batch` (cmd_run_opts.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd_run_opts.h"
#include "engine/grammar.h"
#include "rocmforge/quant.h"
#include "server/json_schema.h"

static const char k_run_usage[] =
    "usage: rocmforge run -m MODEL (-p TEXT | -f FILE) [options]\n"
    "  -m, --model FILE        GGUF model\n"
    "  -p, --prompt TEXT       prompt text (-f FILE reads it from a file)\n"
    "  -n, --n-predict N       tokens to generate (default: until end of text or full context)\n"
    "  --chat                  wrap the prompt in the model's chat template (-s SYSTEM adds a system message)\n"
    "  --temp T                temperature (default 0 = greedy)\n"
    "  --top-k K, --top-p P, --min-p M   sampling filters (defaults 40, 0.95, 0.05; used when T > 0)\n"
    "  --repeat-penalty R      (default 1 = off), --repeat-last-n N (default 64, -1 = all)\n"
    "  --presence-penalty P, --frequency-penalty F   (default 0)\n"
    "  --seed S                sampling seed (default 0; 64-bit)\n"
    "  --stop TEXT             stop string (repeatable, not printed)\n"
    "  --ignore-eos            keep generating after end-of-text tokens\n"
    "  --grammar GBNF, --grammar-file FILE   constrain the output to a GBNF grammar (llama.cpp's syntax)\n"
    "  -j, --json-schema JSON, --json-schema-file FILE   constrain the output to JSON of a schema ('{}': any object)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  -c, --ctx N             context length (default: trained length, capped to 4096 and memory)\n"
    "  -b, --batch N           prompt tokens per forward pass (default 512)\n"
    "  --kv-type T             KV cache type: f16 (default), f32, q8_0\n"
    "  --device D              auto (default: the GPU when present and the model fits), cpu, gpu or gpu:N\n"
    "  --tp N                  split each layer over N shards (tensor parallelism: over N GPUs, or the CPU)\n"
    "  --deterministic         batch-invariant kernels: the same tokens alone or among others (slower on the GPU)\n"
    "  --show-ids              print the generated token ids to stderr\n"
    "  --logits-out FILE       write the prompt's last-position logits (f32) to FILE\n"
    "  --no-timing             no timing line\n";

static int need_arg(int argc, char **argv, int i) {
    if (i + 1 >= argc) return rf_cli_fail(2, "option %s needs a value", argv[i]);
    return 0;
}

static int parse_float(const char *opt, const char *s, float *out) {
    char *end;
    float v = strtof(s, &end);
    if (!*s || *end || !isfinite(v)) return rf_cli_fail(2, "option %s: '%s' is not a number", opt, s);
    *out = v;
    return 0;
}

static int parse_int(const char *opt, const char *s, long long lo, long long hi, int32_t *out) {
    long long v;
    if (!rf_cli_parse_i64(s, lo, hi, &v))
        return rf_cli_fail(2, "option %s: '%s' must be an integer in [%lld, %lld]", opt, s, lo, hi);
    *out = (int32_t)v;
    return 0;
}

#define NOT_MINE (-2) /* an option group's answer: the option is not one of the group's */

/* The sampling options of run, chat, batch and serve: 0 (taken), an exit code, or NOT_MINE. */
static int sampling_opt(int argc, char **argv, int *pi, rf_run_opts *o) {
    const char *a = argv[*pi], *v;
    int rc = 0;
#define ARG() (need_arg(argc, argv, *pi) ? NULL : argv[++*pi])
#define IS(x) (!strcmp(a, x))
    if ((IS("-n") || IS("--n-predict"))) {
        if (!(v = ARG())) return 2;
        long long n;
        if (!rf_cli_parse_i64(v, -(1LL << 40), 1LL << 40, &n))
            return rf_cli_fail(2, "option %s: '%s' is not an integer", a, v);
        if (n < 0) return rf_cli_fail(2, "option %s: the number of tokens to generate must be >= 0 (got %lld)", a, n);
        if (n > INT32_MAX) n = INT32_MAX;
        o->n_predict = (int32_t)n;
        return 0;
    }
    if (IS("--temp")) {
        if (!(v = ARG())) return 2;
        if ((rc = parse_float(a, v, &o->sp.temperature))) return rc;
        if (o->sp.temperature < 0) return rf_cli_fail(2, "option --temp must be >= 0");
        return 0;
    }
    if (IS("--top-k")) {
        if (!(v = ARG()) || (rc = parse_int(a, v, 0, INT32_MAX, &o->sp.top_k))) return rc ? rc : 2;
        return 0;
    }
    if (IS("--top-p")) {
        if (!(v = ARG()) || (rc = parse_float(a, v, &o->sp.top_p))) return rc ? rc : 2;
        if (o->sp.top_p <= 0 || o->sp.top_p > 1) return rf_cli_fail(2, "option --top-p must be in (0, 1]");
        return 0;
    }
    if (IS("--min-p")) {
        if (!(v = ARG()) || (rc = parse_float(a, v, &o->sp.min_p))) return rc ? rc : 2;
        if (o->sp.min_p < 0 || o->sp.min_p > 1) return rf_cli_fail(2, "option --min-p must be in [0, 1]");
        return 0;
    }
    if (IS("--repeat-penalty")) {
        if (!(v = ARG()) || (rc = parse_float(a, v, &o->sp.repeat_penalty))) return rc ? rc : 2;
        if (o->sp.repeat_penalty <= 0) return rf_cli_fail(2, "option --repeat-penalty must be > 0");
        return 0;
    }
    if (IS("--repeat-last-n")) {
        if (!(v = ARG()) || (rc = parse_int(a, v, -1, INT32_MAX, &o->sp.repeat_last_n))) return rc ? rc : 2;
        return 0;
    }
    if (IS("--presence-penalty")) {
        if (!(v = ARG()) || (rc = parse_float(a, v, &o->sp.presence_penalty))) return rc ? rc : 2;
        return 0;
    }
    if (IS("--frequency-penalty")) {
        if (!(v = ARG()) || (rc = parse_float(a, v, &o->sp.frequency_penalty))) return rc ? rc : 2;
        return 0;
    }
    if (IS("--seed")) {
        if (!(v = ARG())) return 2;
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (!*v || *end || *v == '-' || errno)
            return rf_cli_fail(2, "option --seed: '%s' is not a non-negative integer", v);
        o->sp.seed = s;
        return 0;
    }
    if (IS("--stop")) {
        if (!(v = ARG())) return 2;
        if (o->n_stop >= RF_MAX_STOP) return rf_cli_fail(2, "at most %d --stop strings", RF_MAX_STOP);
        if (!*v) return rf_cli_fail(2, "option --stop: empty string");
        o->stops[o->n_stop++] = v;
        return 0;
    }
    if (IS("--ignore-eos")) {
        o->ignore_eos = true;
        return 0;
    }
#undef ARG
#undef IS
    return NOT_MINE;
}

/* The options of serve alone: 0 (taken), an exit code, or NOT_MINE. */
static int serve_opt(int argc, char **argv, int *pi, rf_run_opts *o) {
    const char *a = argv[*pi], *v;
    int rc = 0;
#define ARG() (need_arg(argc, argv, *pi) ? NULL : argv[++*pi])
#define IS(x) (!strcmp(a, x))
    if (IS("--host")) {
        if (!(v = ARG())) return 2;
        if (!*v) return rf_cli_fail(2, "option --host: empty address");
        o->host = v;
        return 0;
    }
    if (IS("--port")) {
        if (!(v = ARG()) || (rc = parse_int(a, v, 0, 65535, &o->port))) return rc ? rc : 2;
        return 0;
    }
    if (IS("--api-key")) {
        if (!(v = ARG())) return 2;
        if (!*v) return rf_cli_fail(2, "option --api-key: empty key");
        o->api_key = v;
        return 0;
    }
    if (IS("--api-key-file")) {
        if (!(v = ARG())) return 2;
        static char key[4096];
        FILE *f = fopen(v, "r");
        if (!f) return rf_cli_fail(2, "option --api-key-file: cannot read '%s': %s", v, strerror(errno));
        size_t n = fread(key, 1, sizeof key - 1, f);
        fclose(f);
        key[n] = 0;
        while (n && (key[n - 1] == '\n' || key[n - 1] == '\r' || key[n - 1] == ' ' || key[n - 1] == '\t')) key[--n] = 0;
        if (!n) return rf_cli_fail(2, "option --api-key-file: '%s' holds no key", v);
        o->api_key = key;
        return 0;
    }
    if (IS("--alias")) {
        if (!(v = ARG())) return 2;
        if (!*v) return rf_cli_fail(2, "option --alias: empty name");
        o->alias = v;
        return 0;
    }
    if (IS("--max-queue")) {
        if (!(v = ARG()) || (rc = parse_int(a, v, 0, 1 << 20, &o->max_queue))) return rc ? rc : 2;
        return 0;
    }
    if (IS("--http-threads")) {
        if (!(v = ARG()) || (rc = parse_int(a, v, 1, 256, &o->http_threads))) return rc ? rc : 2;
        return 0;
    }
    if (IS("--max-body")) {
        if (!(v = ARG())) return 2;
        long long n;
        if (!rf_cli_parse_i64(v, 1024, 1LL << 32, &n))
            return rf_cli_fail(2, "option --max-body: '%s' must be an integer in [1024, 4294967296] (bytes)", v);
        o->max_body = n;
        return 0;
    }
    if (IS("--sse-ping")) {
        float f = 0;
        if (!(v = ARG()) || (rc = parse_float(a, v, &f))) return rc ? rc : 2;
        if (f < 0 || f > 86400) return rf_cli_fail(2, "option --sse-ping must be in [0, 86400] seconds (0 = never)");
        o->ping_s = f;
        return 0;
    }
    if (IS("--timeout")) {
        if (!(v = ARG()) || (rc = parse_int(a, v, 0, 86400, &o->timeout_s))) return rc ? rc : 2;
        return 0;
    }
    if (IS("--no-webui")) {
        o->no_webui = true;
        return 0;
    }
    if ((IS("-v") || IS("--verbose"))) {
        o->verbose = true;
        return 0;
    }
#undef ARG
#undef IS
    return NOT_MINE;
}

int rf_run_parse(int argc, char **argv, int which, rf_run_opts *o, const char *usage) {
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->sp = rf_sampler_default_params();
    o->kv_type = RF_TYPE_F16;
    o->device = RF_DEVICE_AUTO;
    o->n_parallel = 4;
    o->block_size = 16;
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_queue = 256;
    o->http_threads = 4;
    o->max_body = 8 << 20;
    o->ping_s = 15;
    o->timeout_s = 300;
    bool engine = which & (RF_OPT_BATCH | RF_OPT_SERVE), serve = which & RF_OPT_SERVE;
    bool samp = which & RF_OPT_SAMPLING;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define ARG() (need_arg(argc, argv, i) ? NULL : argv[++i])
#define IS(x) (!strcmp(a, x))
        const char *v;
        int rc = 0;
        if (rf_cli_is_help(a)) {
            fputs(usage, stdout);
            return 0;
        } else if (IS("-m") || IS("--model")) {
            if (!(v = ARG())) return 2;
            o->model = v;
        } else if ((which & RF_OPT_PROMPT) && (IS("-p") || IS("--prompt"))) {
            if (!(v = ARG())) return 2;
            o->prompt = v;
        } else if ((which & (RF_OPT_PROMPT | RF_OPT_PPL | RF_OPT_BATCH)) && (IS("-f") || IS("--file"))) {
            if (!(v = ARG())) return 2;
            o->prompt_file = v;
        } else if ((which & (RF_OPT_PROMPT | RF_OPT_CHAT)) && (IS("-s") || IS("--system"))) {
            if (!(v = ARG())) return 2;
            o->system = v;
        } else if ((which & RF_OPT_PROMPT) && IS("--chat")) {
            o->chat = true;
        } else if ((which & (RF_OPT_PROMPT | RF_OPT_BATCH)) &&
                   (IS("--grammar") || IS("--grammar-file") || IS("-j") || IS("--json-schema") || IS("--json-schema-file"))) {
            if (!(v = ARG())) return 2;
            if (o->grammar || o->grammar_file || o->json_schema || o->json_schema_file)
                return rf_cli_fail(2, "one of --grammar, --grammar-file, --json-schema, --json-schema-file");
            if (IS("--grammar")) o->grammar = v;
            else if (IS("--grammar-file")) o->grammar_file = v;
            else if (IS("--json-schema-file")) o->json_schema_file = v;
            else o->json_schema = v;
        } else if (samp && (rc = sampling_opt(argc, argv, &i, o)) != NOT_MINE) {
            if (rc) return rc;
        } else if (IS("--deterministic")) {
            o->deterministic = true;
        } else if (IS("-t") || IS("--threads")) {
            if (!(v = ARG())) return 2;
            long long n;
            if (!rf_cli_parse_i64(v, -(1LL << 31), 1LL << 31, &n)) return rf_cli_fail(2, "option %s: '%s' is not an integer", a, v);
            if (n < 1 || n > 1024) return rf_cli_fail(2, "option %s: thread count must be in [1, 1024] (got %lld)", a, n);
            o->n_threads = (int32_t)n;
        } else if (IS("-c") || IS("--ctx") || IS("--ctx-size")) {
            if (!(v = ARG()) || (rc = parse_int(a, v, 1, 1 << 24, &o->n_ctx))) return rc ? rc : 2;
        } else if (IS("-b") || IS("--batch")) {
            if (!(v = ARG()) || (rc = parse_int(a, v, 1, 1 << 16, &o->n_batch))) return rc ? rc : 2;
        } else if (IS("--kv-type")) {
            if (!(v = ARG())) return 2;
            if (!strcmp(v, "f32")) o->kv_type = RF_TYPE_F32;
            else if (!strcmp(v, "f16")) o->kv_type = RF_TYPE_F16;
            else if (!strcmp(v, "q8_0")) o->kv_type = RF_TYPE_Q8_0;
            else return rf_cli_fail(2, "option --kv-type: '%s' is not one of f32, f16, q8_0", v);
        } else if (IS("--device")) {
            if (!(v = ARG())) return 2;
            long long idx = 0;
            if (!strcmp(v, "cpu")) o->device = RF_DEVICE_CPU;
            else if (!strcmp(v, "auto")) o->device = RF_DEVICE_AUTO;
            else if (!strcmp(v, "gpu")) o->device = RF_DEVICE_GPU;
            else if (!strncmp(v, "gpu:", 4) && rf_cli_parse_i64(v + 4, 0, 1023, &idx)) {
                o->device = RF_DEVICE_GPU;
                o->device_index = (int32_t)idx;
            } else
                return rf_cli_fail(2, "option --device: '%s' is not one of auto, cpu, gpu, gpu:N", v);
        } else if (IS("--tp")) {
            if (!(v = ARG()) || (rc = parse_int(a, v, 1, 64, &o->tp))) return rc ? rc : 2;
        } else if ((which & RF_OPT_PROMPT) && IS("--show-ids")) {
            o->show_ids = true;
        } else if ((which & RF_OPT_PROMPT) && IS("--logits-out")) {
            if (!(v = ARG())) return 2;
            o->logits_out = v;
        } else if (engine && (IS("--parallel") || IS("-np"))) {
            if (!(v = ARG()) || (rc = parse_int(a, v, 1, 4096, &o->n_parallel))) return rc ? rc : 2;
        } else if (engine && IS("--kv-blocks")) {
            if (!(v = ARG()) || (rc = parse_int(a, v, 0, 1 << 26, &o->kv_blocks))) return rc ? rc : 2;
        } else if (engine && IS("--block-size")) {
            if (!(v = ARG()) || (rc = parse_int(a, v, 1, 4096, &o->block_size))) return rc ? rc : 2;
        } else if (engine && IS("--no-prefix-cache")) {
            o->no_prefix_cache = true;
        } else if ((which & RF_OPT_BATCH) && (IS("-o") || IS("--output"))) {
            if (!(v = ARG())) return 2;
            if (!strcmp(v, "text")) o->jsonl = false;
            else if (!strcmp(v, "jsonl")) o->jsonl = true;
            else return rf_cli_fail(2, "option %s: '%s' is not one of text, jsonl", a, v);
        } else if (serve && (rc = serve_opt(argc, argv, &i, o)) != NOT_MINE) {
            if (rc) return rc;
        } else if ((which & RF_OPT_PPL) && IS("--chunks")) {
            if (!(v = ARG()) || (rc = parse_int(a, v, 0, INT32_MAX, &o->chunks))) return rc ? rc : 2;
        } else if (IS("--no-timing")) {
            o->no_timing = true;
        } else if (IS("--render-special")) {
            o->render_special = true;
        } else {
            fputs(usage, stderr);
            return rf_cli_fail(2, "unknown option '%s' for '%s'", a, argv[0]);
        }
#undef ARG
#undef IS
    }
    if (!o->model) {
        fputs(usage, stderr);
        return rf_cli_fail(2, "missing -m MODEL");
    }
    return -1;
}

static void progress_bar(float f, void *user) {
    int w = 40, done = (int)(f * w + 0.5f);
    fprintf(stderr, "\rloading %s [", (const char *)user);
    for (int i = 0; i < w; i++) fputc(i < done ? '#' : '.', stderr);
    fprintf(stderr, "] %3d%%%s", (int)(f * 100 + 0.5f), f >= 1.0f ? "\n" : "");
    fflush(stderr);
}

int rf_run_load(const rf_run_opts *o, rf_model **m) {
    *m = NULL;
    rf_model_params mp = rf_model_default_params();
    mp.device = o->device;
    mp.device_index = o->device_index;
    mp.tp = o->tp;
    mp.n_threads = o->n_threads;
    struct stat sb;
    if (isatty(2) && stat(o->model, &sb) == 0 && sb.st_size >= (64 << 20)) {
        mp.progress = progress_bar;
        const char *base = strrchr(o->model, '/');
        mp.progress_user = (void *)(base ? base + 1 : o->model);
    }
    if (rf_model_load(o->model, &mp, m)) {
        *m = NULL;
        return rf_cli_fail(1, "%s", rf_last_error());
    }
    if (o->deterministic && rf_model_set_deterministic(*m, true)) {
        rf_model_free(*m);
        *m = NULL;
        return rf_cli_fail(1, "%s", rf_last_error());
    }
    return 0;
}

int rf_run_open(const rf_run_opts *o, rf_model **m, rf_session **s) {
    *s = NULL;
    int rc = rf_run_load(o, m);
    if (rc) return rc;
    rf_session_params sp = rf_session_default_params();
    sp.n_ctx = o->n_ctx;
    sp.n_batch = o->n_batch;
    sp.kv_type = o->kv_type;
    sp.n_threads = o->n_threads;
    if (rf_session_new(*m, &sp, s)) {
        rf_model_free(*m);
        *m = NULL;
        return rf_cli_fail(1, "%s", rf_last_error());
    }
    return 0;
}

void rf_run_print_timing(const rf_gen_stats *st) {
    double pt = st->prompt_ms > 0 ? st->n_prompt / (st->prompt_ms / 1e3) : 0;
    double gt = st->gen_ms > 0 ? st->n_gen / (st->gen_ms / 1e3) : 0;
    fprintf(stderr, "\nprompt: %d token%s in %.1f ms (%.2f tok/s) | generation: %d token%s in %.1f ms (%.2f tok/s)\n",
            st->n_prompt, st->n_prompt == 1 ? "" : "s", st->prompt_ms, pt, st->n_gen,
            st->n_gen == 1 ? "" : "s", st->gen_ms, gt);
}

static bool print_piece(const char *p, size_t n, void *user) {
    fwrite(p, 1, n, stdout);
    fflush(stdout);
    return true;
}

static char *read_text_file(const char *path);

int rf_run_grammar(const rf_run_opts *o, rf_grammar **g) {
    *g = NULL;
    const char *file = o->grammar_file ? o->grammar_file : o->json_schema_file;
    char *text = file ? read_text_file(file) : NULL;
    if (file && !text) return rf_cli_fail(2, "cannot read '%s'", file);
    const char *src = text ? text : o->grammar ? o->grammar : o->json_schema;
    int rc = 0;
    if (!src) return 0;
    if (o->grammar || o->grammar_file) {
        if (rf_grammar_parse_gbnf(src, strlen(src), g)) rc = rf_cli_fail(2, "grammar: %s", rf_last_error());
    } else {
        json_error_t je;
        json_t *schema = json_loads(src, 0, &je);
        char err[256] = "";
        if (!schema) rc = rf_cli_fail(2, "JSON schema: %s (line %d)", je.text, je.line);
        else if (srv_json_grammar(json_object_size(schema) ? schema : NULL, g, err, sizeof err))
            rc = rf_cli_fail(2, "JSON schema: %s", err);
        json_decref(schema);
    }
    free(text);
    return rc;
}

static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            } else {
                b = nb;
            }
        }
    }
    fclose(f);
    if (b) b[len] = 0;
    return b;
}

int rf_cmd_run(int argc, char **argv) {
    rf_run_opts o;
    int rc = rf_run_parse(argc, argv, RF_OPT_PROMPT | RF_OPT_SAMPLING, &o, k_run_usage);
    if (rc >= 0) return rc;
    if (!o.prompt && !o.prompt_file) {
        fputs(k_run_usage, stderr);
        return rf_cli_fail(2, "missing -p TEXT or -f FILE");
    }
    char *file_text = NULL;
    if (o.prompt_file) {
        file_text = read_text_file(o.prompt_file);
        if (!file_text) return rf_cli_fail(1, "cannot read prompt file '%s'", o.prompt_file);
        o.prompt = file_text;
    }
    rf_model *m;
    rf_session *s;
    if ((rc = rf_run_open(&o, &m, &s))) {
        free(file_text);
        return rc;
    }
    const rf_vocab *vocab = rf_model_vocab(m);
    char *text = NULL;
    rf_text_span *data = NULL; /* --chat: the message bytes of text */
    size_t n_data = 0;
    int32_t *ids = NULL;
    rf_gen_stats stats = {0};
    rf_grammar *grammar = NULL;
    rc = 1;
    const char *ptext = o.prompt;
    if (o.chat) {
        rf_chat_msg msgs[2];
        size_t nm = 0;
        if (o.system) msgs[nm++] = (rf_chat_msg){"system", o.system};
        msgs[nm++] = (rf_chat_msg){"user", o.prompt};
        const rf_chat_template *tmpl = rf_model_chat_template(m);
        if (!tmpl) {
            rf_cli_fail(1, "this model has no usable chat template (see the warning above); run without --chat");
            goto out;
        }
        rf_chat_render_opts ro = {.add_generation_prompt = true};
        if (rf_chat_template_render_data(tmpl, msgs, nm, &ro, &text, &data, &n_data)) {
            rf_cli_fail(1, "chat template: %s", rf_last_error());
            goto out;
        }
        ptext = text;
    }
    size_t n_ids = 0, len = strlen(ptext);
    /* A chat template already holds BOS where the model wants one. -p text parses special
     * tokens (the operator's own prompt); with --chat only the template's markup does. */
    rf_tokenize_opts to = {.add_special = !o.chat, .parse_special = true, .plain = data, .n_plain = n_data};
    rf_tokenize_ex(vocab, ptext, len, &to, NULL, 0, &n_ids);
    ids = malloc((n_ids + 1) * sizeof(int32_t));
    if (!ids || rf_tokenize_ex(vocab, ptext, len, &to, ids, n_ids, &n_ids)) {
        rf_cli_fail(1, "tokenize: %s", rf_last_error());
        goto out;
    }
    if (n_ids == 0) {
        rf_cli_fail(2, "the prompt is empty");
        goto out;
    }
    if ((int64_t)n_ids > rf_session_n_ctx(s)) {
        rf_cli_fail(1, "the prompt has %zu tokens but the context holds %d (use --ctx)", n_ids, rf_session_n_ctx(s));
        goto out;
    }
    if (o.logits_out) {
        /* evaluate the prompt alone and save its last-position logits (golden comparisons) */
        if (rf_session_eval(s, ids, (int32_t)n_ids, false)) {
            rf_cli_fail(1, "%s", rf_last_error());
            goto out;
        }
        rf_model_info info;
        rf_model_get_info(m, &info);
        FILE *f = fopen(o.logits_out, "wb");
        const float *lg = rf_session_logits(s, (int32_t)n_ids - 1);
        if (!f || fwrite(lg, sizeof(float), (size_t)info.n_vocab, f) != (size_t)info.n_vocab) {
            if (f) fclose(f);
            rf_cli_fail(1, "cannot write '%s'", o.logits_out);
            goto out;
        }
        fclose(f);
    }
    rf_gen_params gp = rf_gen_default_params();
    gp.sampling = o.sp;
    gp.max_tokens = o.n_predict;
    gp.stop = o.stops;
    gp.n_stop = (size_t)o.n_stop;
    gp.ignore_eos = o.ignore_eos;
    gp.render_special = o.render_special;
    if (rf_run_grammar(&o, &grammar)) {
        rc = 2;
        goto out;
    }
    gp.grammar = grammar;
    if (rf_generate(s, ids, (int32_t)n_ids, &gp, print_piece, NULL, &stats)) {
        fflush(stdout);
        rf_cli_fail(1, "%s", rf_last_error());
        goto out;
    }
    fflush(stdout);
    if (o.show_ids) {
        fprintf(stderr, "\nids:");
        for (int32_t i = 0; i < stats.n_gen; i++) fprintf(stderr, " %d", stats.tokens[i]);
        fputc('\n', stderr);
    }
    if (!o.no_timing) rf_run_print_timing(&stats);
    else if (isatty(1)) putchar('\n');
    rc = 0;
out:
    rf_grammar_unref(grammar);
    free(stats.tokens);
    free(ids);
    free(text);
    free(data);
    free(file_text);
    rf_session_free(s);
    rf_model_free(m);
    return rc;
}
