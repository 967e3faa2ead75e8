/* cmd_bench.c — `rocmforge bench`: prompt processing (ppN), generation (tgN, also at a KV depth)
 * and batched generation of B sequences at once (the steps with all B decoding, as
 * llama-batched-bench's S_TG, and every decode step), through the batching engine, in the spirit of
 * llama-bench and llama-batched-bench: warm-up excluded, repetitions with mean ± stddev,
 * per-token latency p50/p99, and for generation the bytes read per token against the device's
 * read bandwidth, which bench measures itself first. GPU clocks, temperature and power are
 * read before and after (NVML / ROCm SMI); a throttled run is flagged. Under --grammar / -j
 * (constrained decoding's cost per step) the tgN and batched tests generate under a grammar, and
 * sequences that complete the grammar's document before n tokens are counted and reported. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "cmd_run_opts.h"
#include "gpu_monitor.h"
#include "rocmforge/gguf.h"
#include "backend/backend.h"
#include "engine/grammar.h"

static const char k_bench_usage[] =
    "usage: rocmforge bench -m MODEL [options]\n"
    "  -m, --model FILE        GGUF model\n"
    "  -p, --n-prompt N        prompt tokens of the ppN test (default 512; 0 = no ppN)\n"
    "  -n, --n-gen N           generated tokens of the tgN and batched tests (default 128)\n"
    "  -d, --depth D,D,...     KV depths for tgN (default 0): tgN @ dD first fills D positions\n"
    "  -b, --batch B,B,...     batched generation of B sequences at once (default 1,8,32,64; 0 = none):\n"
    "                          tok/s of the steps in which all B decode, and of every decode step\n"
    "  --batch-prompt N        prompt tokens of each batched sequence (default 128)\n"
    "  -r, --reps N            timed repetitions per test (default 5; one warm-up run is excluded)\n"
    "  --device D              auto (default), cpu, gpu or gpu:N\n"
    "  --tp N                  split each layer over N GPUs (tensor parallelism; docs/tp.md)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  --kv-type T             KV cache f16 (default), f32, q8_0\n"
    "  -o, --output F          md (default), json or csv\n"
    "  --plot FILE.png         tok/s against depth and batch size (gnuplot)\n"
    "  --deterministic         batch-invariant kernels (rocmforge run --help)\n"
    "  --grammar GBNF, --grammar-file FILE, -j, --json-schema JSON, --json-schema-file FILE\n"
    "                          the tgN and batched tests generate under a grammar or JSON schema (as\n"
    "                          `run` / `batch`): constrained decoding's cost per step. A sequence that\n"
    "                          completes the grammar's document before n tokens is reported (it keeps\n"
    "                          decoding, end-of-generation tokens, its masks then the finished document's)\n";


static int parse_list(const char *opt, const char *s, int *out, int cap, int *n, long long hi) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char buf[32];
        size_t k = 0;
        while (p[k] && p[k] != ',' && k < sizeof buf - 1) buf[k] = p[k], k++;
        buf[k] = 0;
        long long v;
        if (!rf_cli_parse_i64(buf, 0, hi, &v) || *n == cap)
            return rf_cli_fail(2, "option %s: '%s' is not a list of at most %d integers in [0, %lld]", opt, s, cap, hi);
        out[(*n)++] = (int)v;
        p += k;
        if (*p == ',') p++;
    }
    if (!*n) return rf_cli_fail(2, "option %s: empty list", opt);
    return 0;
}

static int parse(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->p = 512, o->n = 128, o->reps = 5, o->batch_prompt = 128;
    o->n_depths = 1;
    int def_b[4] = {1, 8, 32, 64};
    memcpy(o->batches, def_b, sizeof def_b);
    o->n_batches = 4;
    o->device = RF_DEVICE_AUTO;
    o->kv_type = RF_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
#define NEEDV() \
    if (!v) return rf_cli_fail(2, "option %s needs a value", a); \
    i++
        if (rf_cli_is_help(a)) {
            fputs(k_bench_usage, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            NEEDV();
            o->model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            NEEDV();
            if (!rf_cli_parse_i64(v, 0, 1 << 20, &x)) return rf_cli_fail(2, "option %s: '%s' must be an integer in [0, 1048576]", a, v);
            o->p = (int)x;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            NEEDV();
            if (!rf_cli_parse_i64(v, 1, 1 << 20, &x)) return rf_cli_fail(2, "option %s: '%s' must be an integer in [1, 1048576]", a, v);
            o->n = (int)x;
        } else if (!strcmp(a, "--batch-prompt")) {
            NEEDV();
            if (!rf_cli_parse_i64(v, 1, 1 << 20, &x)) return rf_cli_fail(2, "option %s: '%s' must be an integer in [1, 1048576]", a, v);
            o->batch_prompt = (int)x;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--reps")) {
            NEEDV();
            if (!rf_cli_parse_i64(v, 1, 1000, &x)) return rf_cli_fail(2, "option %s: '%s' must be an integer in [1, 1000]", a, v);
            o->reps = (int)x;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) {
            NEEDV();
            int rc = parse_list(a, v, o->depths, 16, &o->n_depths, 1 << 24);
            if (rc) return rc;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
            NEEDV();
            int rc = parse_list(a, v, o->batches, 16, &o->n_batches, 4096);
            if (rc) return rc;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            NEEDV();
            if (!rf_cli_parse_i64(v, 1, 1024, &x)) return rf_cli_fail(2, "option %s: thread count must be in [1, 1024]", a);
            o->threads = (int)x;
        } else if (!strcmp(a, "--device")) {
            NEEDV();
            if (!strcmp(v, "cpu")) o->device = RF_DEVICE_CPU;
            else if (!strcmp(v, "auto")) o->device = RF_DEVICE_AUTO;
            else if (!strcmp(v, "gpu")) o->device = RF_DEVICE_GPU;
            else if (!strncmp(v, "gpu:", 4) && rf_cli_parse_i64(v + 4, 0, 1023, &x)) {
                o->device = RF_DEVICE_GPU;
                o->device_index = (int)x;
            } else
                return rf_cli_fail(2, "option --device: '%s' is not one of auto, cpu, gpu, gpu:N", v);
        } else if (!strcmp(a, "--tp")) {
            NEEDV();
            if (!rf_cli_parse_i64(v, 1, 64, &x)) return rf_cli_fail(2, "option --tp: '%s' must be an integer in [1, 64]", v);
            o->tp = (int)x;
        } else if (!strcmp(a, "--kv-type")) {
            NEEDV();
            if (!strcmp(v, "f16")) o->kv_type = RF_TYPE_F16;
            else if (!strcmp(v, "f32")) o->kv_type = RF_TYPE_F32;
            else if (!strcmp(v, "q8_0")) o->kv_type = RF_TYPE_Q8_0;
            else return rf_cli_fail(2, "option --kv-type: '%s' is not one of f32, f16, q8_0", v);
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            NEEDV();
            if (!strcmp(v, "md")) o->out = 0;
            else if (!strcmp(v, "json")) o->out = 1;
            else if (!strcmp(v, "csv")) o->out = 2;
            else return rf_cli_fail(2, "option %s: '%s' is not one of md, json, csv", a, v);
        } else if (!strcmp(a, "--plot")) {
            NEEDV();
            o->plot = v;
        } else if (!strcmp(a, "--deterministic")) {
            o->deterministic = true;
        } else if (!strcmp(a, "--grammar") || !strcmp(a, "--grammar-file") || !strcmp(a, "-j") ||
                   !strcmp(a, "--json-schema") || !strcmp(a, "--json-schema-file")) {
            NEEDV();
            if (o->g.grammar || o->g.grammar_file || o->g.json_schema || o->g.json_schema_file)
                return rf_cli_fail(2, "one of --grammar, --grammar-file, --json-schema, --json-schema-file");
            if (!strcmp(a, "--grammar")) o->g.grammar = v;
            else if (!strcmp(a, "--grammar-file")) o->g.grammar_file = v;
            else if (!strcmp(a, "--json-schema-file")) o->g.json_schema_file = v;
            else o->g.json_schema = v;
        } else {
            fputs(k_bench_usage, stderr);
            return rf_cli_fail(2, "unknown option '%s' for 'bench'", a);
        }
#undef NEEDV
    }
    if (!o->model) {
        fputs(k_bench_usage, stderr);
        return rf_cli_fail(2, "missing -m MODEL");
    }
    return -1;
}

static int ncpu(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- read bandwidth --------------------------------------------------------------------- */

typedef struct bw_job {
    const uint64_t *buf;
    size_t n;
    uint64_t sum;
} bw_job;

static void *bw_thread(void *arg) {
    bw_job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) s0 += j->buf[i], s1 += j->buf[i + 1], s2 += j->buf[i + 2], s3 += j->buf[i + 3];
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* CPU read bandwidth: the best of 5 passes of `threads` threads summing a 512 MiB buffer. */
static double cpu_read_bw(int threads) {
    size_t bytes = (size_t)512 << 20, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[64];
        bw_job jobs[64];
        double t0 = now_s();
        for (int t = 0; t < threads; t++) {
            jobs[t].buf = buf + n / threads * t;
            jobs[t].n = n / threads;
            pthread_create(&th[t], NULL, bw_thread, &jobs[t]);
        }
        uint64_t s = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            s += jobs[t].sum;
        }
        double gbps = bytes / (now_s() - t0) / 1e9;
        if (s == 42) gbps += 1e-9; /* keeps the sum alive */
        if (gbps > best) best = gbps;
    }
    free(buf);
    return best;
}

/* ---- one test ----------------------------------------------------------------------------- */

/* A growing list of step durations (ms). */
typedef struct lat_vec {
    double *v;
    int n, cap;
} lat_vec;

static bool lat_push(lat_vec *l, double ms) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 256;
        double *a = realloc(l->v, (size_t)cap * sizeof(double));
        if (!a) return false;
        l->v = a;
        l->cap = cap;
    }
    l->v[l->n++] = ms;
    return true;
}

static bool lat_append(lat_vec *l, const lat_vec *src) {
    for (int k = 0; k < src->n; k++)
        if (!lat_push(l, src->v[k])) return false;
    return true;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts l; its p-quantile (0 <= p <= 1), NAN when empty. */
static double lat_quantile(lat_vec *l, double p) {
    if (!l->n) return NAN;
    qsort(l->v, (size_t)l->n, sizeof(double), cmp_d);
    return l->v[p == 0.5 ? l->n / 2 : (int)((l->n - 1) * p)];
}

/* One run's steps, split three ways. A step that computed prompt tokens is a prompt step
 * (prompt_s/tok). A step without prompt tokens that gave tokens is a decode step: all of them
 * make the aggregate (decode_s/tok, lat), and those in which every one of the run's sequences
 * decoded make the steady state (steady_s/tok, steady_lat), the figure llama-batched-bench's
 * S_TG measures (all sequences decoding in lockstep after every prompt). A prompt step that also
 * carried decode tokens goes to mixed_lat (what a running sequence waits while prompts stream
 * in). */
typedef struct run_result {
    double prompt_s, decode_s, steady_s;
    int64_t prompt_tok, decode_tok, steady_tok;
    lat_vec lat, steady_lat, mixed_lat;
    int max_seqs;        /* most decode tokens in one step */
    int64_t ev_first, ev_dec; /* TOKEN events: first tokens (from a prompt step), later ones */
    int done;
    /* under a grammar: the requests that drew an end-of-generation token (the grammar's document
     * complete: its mask admits it only then), and the earliest token count at which one did */
    const rf_vocab *voc;   /* NULL: no grammar */
    uint64_t *ended;
    int n_ended, cap_ended, first_end;
} run_result;

static void run_result_free(run_result *r) {
    free(r->ended);
    free(r->lat.v);
    free(r->steady_lat.v);
    free(r->mixed_lat.v);
}

static bool on_event(const rf_event *ev, void *user) {
    run_result *r = user;
    rf_event_kind k = rf_event_get_kind(ev);
    if (k == RF_EVENT_DONE) r->done++;
    else if (k == RF_EVENT_TOKEN) {
        if (rf_event_n_gen(ev) > 1) r->ev_dec++;
        else r->ev_first++;
        if (r->voc && rf_vocab_is_eog(r->voc, rf_event_token(ev))) { /* ignore-eos: it goes on */
            uint64_t id = rf_event_request(ev);
            int i = 0;
            while (i < r->n_ended && r->ended[i] != id) i++;
            if (i == r->n_ended) {
                if (r->n_ended == r->cap_ended) {
                    int cap = r->cap_ended ? 2 * r->cap_ended : 64;
                    uint64_t *a = realloc(r->ended, (size_t)cap * sizeof *a);
                    if (!a) return true; /* the count is a report only */
                    r->ended = a;
                    r->cap_ended = cap;
                }
                r->ended[r->n_ended++] = id;
                int n = (int)rf_event_n_gen(ev);
                if (!r->first_end || n < r->first_end) r->first_end = n;
            }
        }
    }
    return true;
}

/* Submits nreq requests of plen random tokens generating ngen tokens each (under g, when not
 * NULL). */
static int submit_all(rf_engine *e, rf_grammar *g, int nreq, int plen, int ngen, uint64_t *rng, run_result *r) {
    int32_t nv = rf_engine_n_vocab(e);
    int32_t *ids = malloc((size_t)(plen > 0 ? plen : 1) * sizeof(int32_t));
    if (!ids) return rf_cli_fail(1, "out of memory");
    for (int q = 0; q < nreq; q++) {
        for (int i = 0; i < plen; i++) {
            *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = 5 + (int32_t)((*rng >> 33) % (uint64_t)(nv > 20 ? nv - 10 : 1));
        }
        rf_request *rq = rf_request_new();
        if (!rq || rf_request_set_prompt_ids(rq, ids, (size_t)plen) || rf_request_set(rq, RF_REQ_MAX_TOKENS, ngen) ||
            rf_request_set(rq, RF_REQ_IGNORE_EOS, 1)) {
            rf_request_free(rq);
            free(ids);
            return rf_cli_fail(1, "%s", rf_last_error());
        }
        rf_request_set_callback(rq, on_event, r);
        if (g) rf_request_set_grammar(rq, g);
        rf_status st = rf_engine_submit(e, rq, NULL);
        rf_request_free(rq);
        if (st) {
            free(ids);
            return rf_cli_fail(1, "%s", rf_last_error());
        }
    }
    free(ids);
    return 0;
}

/* Submits the requests, steps the engine until all are done and sorts each step (run_result). */
static int run_once(rf_engine *e, rf_grammar *g, int nreq, int plen, int ngen, uint64_t *rng, run_result *r) {
    r->done = 0;
    int rc = submit_all(e, g, nreq, plen, ngen, rng, r);
    if (rc) return rc;
    while (r->done < nreq) {
        int64_t p0 = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS), g0 = rf_engine_get_stat(e, RF_STAT_GEN_TOKENS);
        int64_t d0 = r->ev_dec;
        double t0 = now_s();
        if (rf_engine_step(e)) return rf_cli_fail(1, "step failed: %s", rf_last_error());
        double dt = now_s() - t0;
        int64_t dp = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS) - p0, dg = rf_engine_get_stat(e, RF_STAT_GEN_TOKENS) - g0;
        int64_t dd = r->ev_dec - d0;
        if (dd > r->max_seqs) r->max_seqs = (int)dd;
        bool ok = true;
        if (dp > 0) {
            r->prompt_s += dt;
            r->prompt_tok += dp;
            if (dd > 0) ok = lat_push(&r->mixed_lat, dt * 1e3);
        } else if (dg > 0) {
            r->decode_s += dt;
            r->decode_tok += dg;
            ok = lat_push(&r->lat, dt * 1e3);
            if (ok && dd == nreq) {
                r->steady_s += dt;
                r->steady_tok += dd;
                ok = lat_push(&r->steady_lat, dt * 1e3);
            }
        }
        if (!ok) return rf_cli_fail(1, "out of memory");
    }
    return 0;
}


/* ---- the model, the device and the engine ------------------------------------------------ */


/* The device's read bandwidth, measured first while its memory is still free. */
static void measure_device(bench_env *v) {
    const bench_opts *o = &v->o;
    snprintf(v->devname, sizeof v->devname, "cpu");
    if (o->device != RF_DEVICE_CPU && rf_gpu_device_count() > 0)
        v->on_gpu = rf_gpu_probe_read_bw(o->device_index, v->devname, sizeof v->devname, &v->bw) == RF_OK;
    fprintf(stderr, "bench: measuring read bandwidth...\n");
    if (!v->on_gpu) v->bw = cpu_read_bw(o->threads ? o->threads : ncpu());
    if (v->on_gpu) {
        rf_gpu_monitor_read(o->device_index, &v->before);
        if (v->before.driver[0]) snprintf(v->driver, sizeof v->driver, "%s", v->before.driver);
    }
}

/* Bytes a decode step reads, from the model's tensors: every weight except that an untied
 * embedding gives one row; MoE: a decode step of B sequences reads each layer's routed experts
 * in proportion to the experts its tokens pick: k of E for one token; for B tokens, with the
 * router's picks taken as independent and uniform (random synthetic routers come close; real
 * routers pick fewer distinct experts, so this is an upper bound), E (1 - (1 - k/E)^B). */
static void model_bytes(bench_env *v) {
    const rf_gguf *g = rf_model_gguf(v->m);
    v->w_bytes = (double)v->info.weight_bytes;
    const rf_gguf_tensor *te = rf_gguf_find_tensor(g, "token_embd.weight");
    if (te && !v->info.tied_embeddings) v->w_bytes -= (double)te->n_bytes * (1.0 - 1.0 / v->info.n_vocab);
    v->exp_bytes = 0;
    v->exp_frac = 1;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_count", v->info.arch);
    uint32_t u = 0;
    if (!rf_gguf_get_u32(g, key, &u)) v->n_exp = (int32_t)u;
    snprintf(key, sizeof key, "%s.expert_used_count", v->info.arch);
    if (!rf_gguf_get_u32(g, key, &u)) v->n_exp_used = (int32_t)u;
    for (int64_t i = 0; v->n_exp > 0 && i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        if (strstr(t->name, "_exps.")) v->exp_bytes += (double)t->n_bytes;
    }
    if (v->n_exp > 0 && v->n_exp_used > 0 && v->n_exp_used <= v->n_exp) v->exp_frac = (double)v->n_exp_used / v->n_exp;
    else v->exp_bytes = 0;
    rf_type kt = v->o.kv_type;
    v->kv_pos = (double)v->info.n_layer * 2 * v->info.n_head_kv * v->info.head_dim *
                (kt == RF_TYPE_F32 ? 4 : kt == RF_TYPE_F16 ? 2 : 34.0 / 32);
}

/* Loads the model and makes the engine every test runs on. Its step holds max(-p, 512) tokens,
 * and B + 512 for the largest batched test of B sequences, so prompts stream in at 512 tokens a
 * step beside B decodes (as llama-batched-bench's 512-token micro-batches) and the batched test
 * reaches the state where all B decode; --parallel is that B. */
static int load_env(bench_env *v) {
    const bench_opts *o = &v->o;
    int maxb = 1, maxd = 0;
    for (int i = 0; i < o->n_batches; i++) maxb = o->batches[i] > maxb ? o->batches[i] : maxb;
    for (int i = 0; i < o->n_depths; i++) maxd = o->depths[i] > maxd ? o->depths[i] : maxd;
    rf_model_params mp = rf_model_default_params();
    mp.device = o->device;
    mp.device_index = o->device_index;
    mp.tp = o->tp;
    mp.n_threads = o->threads;
    if (rf_model_load(o->model, &mp, &v->m)) return rf_cli_fail(1, "%s", rf_last_error());
    if (o->deterministic && rf_model_set_deterministic(v->m, true)) return rf_cli_fail(1, "%s", rf_last_error());
    rf_model_get_info(v->m, &v->info);
    if (v->on_gpu && strcmp(v->info.device, "cpu") == 0) { /* auto fell back to the CPU: its bandwidth, then */
        v->on_gpu = false;
        v->before.ok = false;
        v->driver[0] = 0;
        v->bw = cpu_read_bw(o->threads ? o->threads : ncpu());
    }
    if (!v->on_gpu) snprintf(v->devname, sizeof v->devname, "cpu (%d threads)", o->threads ? o->threads : ncpu());
    model_bytes(v);
    int ctx = o->p > maxd + o->n ? o->p : maxd + o->n;
    if (o->batch_prompt + o->n > ctx && o->n_batches && o->batches[0]) ctx = o->batch_prompt + o->n;
    ctx += 16;
    int nb = o->p > 512 ? o->p : 512;
    if (maxb > 1 && nb < maxb + 512) nb = maxb + 512;
    rf_engine_config *c = rf_engine_config_new();
    if (!c || rf_engine_config_set(c, RF_ENGINE_CTX, ctx) || rf_engine_config_set(c, RF_ENGINE_PARALLEL, maxb) ||
        rf_engine_config_set(c, RF_ENGINE_BATCH, nb > 65536 ? 65536 : nb) || rf_engine_config_set(c, RF_ENGINE_PREFIX_CACHE, 0) ||
        rf_engine_config_set(c, RF_ENGINE_KV_TYPE, o->kv_type) || rf_engine_config_set(c, RF_ENGINE_THREADS, o->threads) ||
        rf_engine_new(v->m, c, &v->e)) {
        rf_engine_config_free(c);
        return rf_cli_fail(1, "%s", rf_last_error());
    }
    rf_engine_config_free(c);
    v->kv_bytes = rf_engine_get_stat(v->e, RF_STAT_KV_BYTES);
    v->state_bytes = rf_engine_get_stat(v->e, RF_STAT_STATE_BYTES);
    v->n_slots = rf_engine_get_stat(v->e, RF_STAT_STATE_SLOTS);
    v->n_ckpt = rf_engine_get_stat(v->e, RF_STAT_STATE_CKPT_TOTAL);
    return 0;
}

/* ---- the tests ---------------------------------------------------------------------------- */

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (int k = 0; k < n; k++) s += x[k];
    *mean = s / n;
    for (int k = 0; k < n; k++) s2 += (x[k] - *mean) * (x[k] - *mean);
    *sd = n > 1 ? sqrt(s2 / (n - 1)) : 0;
}

/* Every repetition's figures and the steps of all of them (for the quantiles). */
typedef struct reps_acc {
    double *ts, *agg;          /* [reps] tok/s: the row's figure, the batched aggregate */
    lat_vec lat, steady, mixed;
    bool no_steady;            /* a repetition had no step with every sequence decoding */
} reps_acc;

static int run_reps(bench_env *v, row *R, int done_tests, int total, uint64_t *rng, reps_acc *a) {
    const bench_opts *o = &v->o;
    bool tty = isatty(2);
    int rc = 0;
    for (int rep = -1; rep < o->reps && !rc; rep++) { /* rep -1: warm-up, not counted */
        run_result r = {0};
        if (tty)
            fprintf(stderr, "\rbench: %-22s %s %d/%d  (test %d of %d)   ", R->test, rep < 0 ? "warm-up" : "rep",
                    rep < 0 ? 0 : rep + 1, o->reps, done_tests + 1, total);
        else if (rep < 0)
            fprintf(stderr, "bench: %s (test %d of %d)\n", R->test, done_tests + 1, total);
        if (R->kind && v->g) r.voc = rf_model_vocab(v->m);
        if (R->kind == 0) rc = run_once(v->e, NULL, 1, o->p, 1, rng, &r);
        else if (R->kind == 1) rc = run_once(v->e, v->g, 1, R->depth > 0 ? R->depth : 1, o->n, rng, &r);
        else rc = run_once(v->e, v->g, R->batch, o->batch_prompt, o->n, rng, &r);
        if (!rc && rep >= 0) {
            if (r.n_ended > R->g_ended) R->g_ended = r.n_ended;
            if (r.first_end && (!R->g_first || r.first_end < R->g_first)) R->g_first = r.first_end;
            double agg = r.decode_s > 0 ? r.decode_tok / r.decode_s : 0;
            a->agg[rep] = agg;
            if (R->kind == 0) a->ts[rep] = r.prompt_s > 0 ? r.prompt_tok / r.prompt_s : 0;
            else if (R->kind == 1) a->ts[rep] = agg;
            else {
                a->ts[rep] = r.steady_s > 0 ? r.steady_tok / r.steady_s : 0;
                a->no_steady |= r.steady_lat.n == 0;
                R->steady_steps = r.steady_lat.n;
                R->decode_steps = r.lat.n;
                R->max_seqs = r.max_seqs;
            }
            if (!lat_append(&a->lat, &r.lat) || !lat_append(&a->steady, &r.steady_lat) || !lat_append(&a->mixed, &r.mixed_lat))
                rc = rf_cli_fail(1, "out of memory");
        }
        run_result_free(&r);
    }
    return rc;
}

/* Runs one test (its warm-up and repetitions) and fills its row. */
static int run_test(bench_env *v, row *R, int done_tests, int total, uint64_t *rng) {
    const bench_opts *o = &v->o;
    reps_acc a = {0};
    a.ts = calloc((size_t)o->reps, sizeof(double));
    a.agg = calloc((size_t)o->reps, sizeof(double));
    int rc = a.ts && a.agg ? run_reps(v, R, done_tests, total, rng, &a) : rf_cli_fail(1, "out of memory");
    R->p50 = R->p99 = R->gbps = R->agg_mean = R->agg_sd = R->agg_p50 = R->mixed_p50 = NAN;
    if (!rc) {
        mean_sd(a.ts, o->reps, &R->mean, &R->sd);
        lat_vec *steps = R->kind == 2 ? &a.steady : &a.lat;
        if (R->kind == 2) {
            mean_sd(a.agg, o->reps, &R->agg_mean, &R->agg_sd);
            R->agg_p50 = lat_quantile(&a.lat, 0.5);
            R->mixed_p50 = lat_quantile(&a.mixed, 0.5);
            if (a.no_steady) R->mean = R->sd = NAN;
        }
        if (R->kind && steps->n && !isnan(R->mean)) {
            R->p50 = lat_quantile(steps, 0.5);
            R->p99 = lat_quantile(steps, 0.99);
            /* a decode step reads the weights once and each sequence's K/V (depth + the tokens
             * generated so far, n/2 on average) */
            double kv = v->kv_pos * (R->depth + (R->kind == 2 ? o->batch_prompt : 1) + o->n / 2.0);
            const double wb = v->w_bytes - v->exp_bytes * (1 - (1 - pow(1 - v->exp_frac, R->batch)));
            R->gbps = (wb + R->batch * kv) * (R->mean / R->batch) / 1e9;
        }
    }
    free(a.ts);
    free(a.agg);
    free(a.lat.v);
    free(a.steady.v);
    free(a.mixed.v);
    return rc;
}

/* Every test in order: ppN, tgN at each depth, each batched size. */
static int run_tests(bench_env *v, row *rows, int *nrows) {
    const bench_opts *o = &v->o;
    uint64_t rng = 0x5eed;
    int total = (o->p ? 1 : 0) + o->n_depths, done_tests = 0, rc = 0;
    for (int i = 0; i < o->n_batches; i++) total += o->batches[i] > 0;
    for (int kind = 0; kind < 3 && !rc; kind++) {
        int count = kind == 0 ? (o->p ? 1 : 0) : kind == 1 ? o->n_depths : o->n_batches;
        for (int ti = 0; ti < count && !rc; ti++) {
            int depth = kind == 1 ? o->depths[ti] : 0, batch = kind == 2 ? o->batches[ti] : 1;
            if (kind == 2 && batch == 0) continue;
            row *R = &rows[*nrows];
            memset(R, 0, sizeof *R);
            R->kind = kind, R->depth = depth, R->batch = batch;
            if (kind == 0) snprintf(R->test, sizeof R->test, "pp%d", o->p);
            else if (kind == 1) snprintf(R->test, sizeof R->test, depth ? "tg%d @ d%d" : "tg%d", o->n, depth);
            else snprintf(R->test, sizeof R->test, "tg%d x %d seqs", o->n, batch);
            rc = run_test(v, R, done_tests, total, &rng);
            done_tests++;
            if (!rc) (*nrows)++;
        }
    }
    if (isatty(2)) fprintf(stderr, "\r%78s\r", "");
    return rc;
}

/* ---- the command ------------------------------------------------------------------------ */

int rf_cmd_bench(int argc, char **argv) {
    bench_env v;
    memset(&v, 0, sizeof v);
    int rc = parse(argc, argv, &v.o);
    if (rc >= 0) return rc;
    if (rf_run_grammar(&v.o.g, &v.g)) return 2;
    measure_device(&v);
    rc = load_env(&v);
    row rows[40];
    int nrows = 0;
    if (!rc) rc = run_tests(&v, rows, &nrows);
    if (v.on_gpu) rf_gpu_monitor_read(v.o.device_index, &v.after);
    rf_engine_free(v.e);
    rf_model_free(v.m);
    rf_grammar_unref(v.g);
    if (rc) return rc;
    for (int i = 0; i < nrows; i++) /* whatever the format: the batch was not what was asked */
        if (rows[i].g_ended)
            fprintf(stderr, "bench: %s: %d sequence(s) completed the grammar's document before %d tokens (the first at "
                    "token %d); they kept decoding (end-of-generation tokens, the finished document's masks)\n",
                    rows[i].test, rows[i].g_ended, v.o.n, rows[i].g_first);

    const char *base = strrchr(v.o.model, '/');
    base = base ? base + 1 : v.o.model;
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    if (v.o.out == 1) rf_bench_print_json(&v, rows, nrows, base, date);
    else if (v.o.out == 2) rf_bench_print_csv(&v, rows, nrows, base);
    else rf_bench_print_md(&v, rows, nrows, base, date);
    if (v.after.ok && v.after.throttled)
        fprintf(stderr, "warning: the GPU's clocks were cut during the run (reasons 0x%llx: power cap or thermal)\n",
                v.after.reasons);
    return v.o.plot ? rf_bench_plot(&v, rows, nrows, base, date) : 0;
}
