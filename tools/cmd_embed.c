/* cmd_embed.c — `rocmforge embed`: each -p text's embedding through the batching engine (pooled
 * as the model file says, or --pooling), printed as JSON in the shape of /v1/embeddings' data. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char USAGE[] =
    "usage: rocmforge embed -m MODEL.gguf -p TEXT [-p TEXT ...] [options]\n\n"
    "Prints each text's embedding (final-norm hidden rows pooled, L2-normalized) as JSON:\n"
    "{\"model\", \"pooling\", \"n_embd\", \"data\": [{\"index\", \"n_tokens\", \"embedding\": [...]}]}.\n\n"
    "options:\n"
    "  -m, --model PATH        GGUF model (required)\n"
    "  -p, --prompt TEXT       a text to embed (repeatable; all run together, batched)\n"
    "  --pooling P             mean, cls or last (default: the file's <arch>.pooling_type, last without it)\n"
    "  --device D              cpu (default), gpu or gpu:N\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  -c, --ctx N             positions per sequence: the longest text must fit (default: trained length, capped to 4096)\n"
    "  -h, --help              this help\n";

#define MAX_TEXTS 256

typedef struct emb_out {
    float *v;
    int32_t n, n_prompt;
    rf_finish_reason fin;
    char err[256];
} emb_out;

static bool on_event(const rf_event *ev, void *user) {
    emb_out *o = user;
    if (rf_event_get_kind(ev) != RF_EVENT_DONE) return true;
    o->fin = rf_event_finish(ev);
    o->n_prompt = rf_event_n_prompt(ev);
    snprintf(o->err, sizeof o->err, "%s", rf_event_error(ev));
    int32_t n = 0;
    const float *v = rf_event_embedding(ev, &n);
    if (v && n > 0 && (o->v = malloc((size_t)n * sizeof(float)))) {
        memcpy(o->v, v, (size_t)n * sizeof(float));
        o->n = n;
    }
    return true;
}

static int parse_args(int argc, char **argv, const char **model, const char **texts, int *n_texts, rf_pooling *pool,
                      rf_model_params *mp, long long *ctx) {
    long long x;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (rf_cli_is_help(a)) {
            fputs(USAGE, stdout);
            return -1;
        }
        if (!v) return rf_cli_fail(2, "option %s needs a value (see --help)", a);
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) *model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (*n_texts == MAX_TEXTS) return rf_cli_fail(2, "at most %d texts", MAX_TEXTS);
            texts[(*n_texts)++] = v;
        } else if (!strcmp(a, "--pooling")) {
            if (!strcmp(v, "mean")) *pool = RF_POOLING_MEAN;
            else if (!strcmp(v, "cls")) *pool = RF_POOLING_CLS;
            else if (!strcmp(v, "last")) *pool = RF_POOLING_LAST;
            else return rf_cli_fail(2, "option --pooling: '%s' is not one of mean, cls, last", v);
        } else if (!strcmp(a, "--device")) {
            if (!strcmp(v, "cpu")) mp->device = RF_DEVICE_CPU;
            else if (!strcmp(v, "gpu")) mp->device = RF_DEVICE_GPU;
            else if (!strncmp(v, "gpu:", 4) && rf_cli_parse_i64(v + 4, 0, 1023, &x)) {
                mp->device = RF_DEVICE_GPU;
                mp->device_index = (int32_t)x;
            } else
                return rf_cli_fail(2, "option --device: '%s' is not one of cpu, gpu, gpu:N", v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!rf_cli_parse_i64(v, 1, 1024, &x)) return rf_cli_fail(2, "option %s: thread count must be in [1, 1024]", a);
            mp->n_threads = (int32_t)x;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (!rf_cli_parse_i64(v, 1, 1 << 24, ctx)) return rf_cli_fail(2, "option %s: '%s' must be an integer >= 1", a, v);
        } else
            return rf_cli_fail(2, "unknown option '%s' (see --help)", a);
    }
    if (!*model) return rf_cli_fail(2, "missing -m MODEL (see --help)");
    if (!*n_texts) return rf_cli_fail(2, "missing -p TEXT (see --help)");
    return 0;
}

/* Submits every text and steps the engine until all are done; out[i] gets text i's vector. */
static int run_texts(rf_engine *e, const char **texts, int n, rf_pooling pool, emb_out *out) {
    for (int i = 0; i < n; i++) {
        rf_request *r = rf_request_new();
        if (!r) return rf_cli_fail(1, "out of memory");
        rf_status st = rf_request_set(r, RF_REQ_EMBED, pool);
        if (!st) st = rf_request_set_prompt_text(r, texts[i], strlen(texts[i]));
        rf_request_set_callback(r, on_event, &out[i]);
        if (!st) st = rf_engine_submit(e, r, NULL);
        rf_request_free(r);
        if (st) return rf_cli_fail(1, "text %d: %s", i + 1, rf_last_error());
    }
    if (rf_engine_run(e)) return rf_cli_fail(1, "%s", rf_last_error());
    for (int i = 0; i < n; i++)
        if (!out[i].v) return rf_cli_fail(1, "text %d: no embedding (%s%s%s)", i + 1, rf_finish_reason_str(out[i].fin),
                                          out[i].err[0] ? ": " : "", out[i].err);
    return 0;
}

static int print_json(rf_model *m, rf_pooling pool, emb_out *out, int n) {
    rf_model_info mi;
    if (rf_model_get_info(m, &mi)) return rf_cli_fail(1, "%s", rf_last_error());
    json_t *data = json_array();
    for (int i = 0; i < n; i++) {
        json_t *v = json_array();
        for (int32_t j = 0; j < out[i].n; j++) json_array_append_new(v, json_real(out[i].v[j]));
        json_array_append_new(data, json_pack("{sisiso}", "index", i, "n_tokens", out[i].n_prompt, "embedding", v));
    }
    json_t *o = json_pack("{sssssiso}", "model", mi.name && *mi.name ? mi.name : mi.arch, "pooling", rf_pooling_str(pool),
                          "n_embd", mi.n_embd, "data", data);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    if (!s) return rf_cli_fail(1, "out of memory");
    puts(s);
    free(s);
    return 0;
}

int rf_cmd_embed(int argc, char **argv) {
    const char *model = NULL, *texts[MAX_TEXTS];
    int n = 0;
    rf_pooling pool = RF_POOLING_NONE;
    rf_model_params mp = rf_model_default_params();
    long long ctx = 0;
    int rc = parse_args(argc, argv, &model, texts, &n, &pool, &mp, &ctx);
    if (rc) return rc < 0 ? 0 : rc;
    rf_model *m = NULL;
    if (rf_model_load(model, &mp, &m)) return rf_cli_fail(1, "%s", rf_last_error());
    if (pool == RF_POOLING_NONE) pool = rf_model_pooling(m);
    if (pool == RF_POOLING_NONE) {
        rf_model_free(m);
        return rf_cli_fail(1, "%s: its pooling type cannot give embeddings (give --pooling)", model);
    }
    rf_engine_config *c = rf_engine_config_new();
    rf_engine *e = NULL;
    rf_status st = c ? RF_OK : RF_ERR_OOM;
    if (!st) st = rf_engine_config_set(c, RF_ENGINE_CTX, ctx);
    if (!st) st = rf_engine_config_set(c, RF_ENGINE_PARALLEL, n < 16 ? n : 16);
    if (!st) st = rf_engine_new(m, c, &e);
    rf_engine_config_free(c);
    emb_out *out = calloc((size_t)n, sizeof *out);
    if (st || !out) rc = rf_cli_fail(1, "%s", st ? rf_last_error() : "out of memory");
    if (!rc) rc = run_texts(e, texts, n, pool, out);
    if (!rc) rc = print_json(m, pool, out, n);
    for (int i = 0; out && i < n; i++) free(out[i].v);
    free(out);
    rf_engine_free(e);
    rf_model_free(m);
    return rc;
}
