/* cmd_bench.c — `rocmforge bench`: prompt processing (ppN), generation (tgN, also at a KV depth)
 * and batched generation of B sequences at once, through the batching engine, in the spirit of
 * llama-bench and llama-batched-bench: warm-up excluded, repetitions with mean ± stddev,
 * per-token latency p50/p99, and for generation the bytes read per token against the device's
 * read bandwidth, which bench measures itself first. GPU clocks, temperature and power are
 * read before and after (NVML / ROCm SMI); a throttled run is flagged. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "gpu_monitor.h"
#include "rocmforge/gguf.h"
#include "backend/backend.h"

static const char k_bench_usage[] =
    "usage: rocmforge bench -m MODEL [options]\n"
    "  -m, --model FILE        GGUF model\n"
    "  -p, --n-prompt N        prompt tokens of the ppN test (default 512; 0 = no ppN)\n"
    "  -n, --n-gen N           generated tokens of the tgN and batched tests (default 128)\n"
    "  -d, --depth D,D,...     KV depths for tgN (default 0): tgN @ dD first fills D positions\n"
    "  -b, --batch B,B,...     batched generation of B sequences at once (default 1,8,32,64; 0 = none)\n"
    "  --batch-prompt N        prompt tokens of each batched sequence (default 128)\n"
    "  -r, --reps N            timed repetitions per test (default 5; one warm-up run is excluded)\n"
    "  --device D              auto (default), cpu, gpu or gpu:N\n"
    "  --tp N                  split each layer over N GPUs (tensor parallelism; docs/tp.md)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  --kv-type T             KV cache f16 (default), f32, q8_0\n"
    "  -o, --output F          md (default), json or csv\n"
    "  --plot FILE.png         tok/s against depth and batch size (gnuplot)\n"
    "  --deterministic         batch-invariant kernels (rocmforge run --help)\n";

typedef struct bench_opts {
    const char *model, *plot;
    bool deterministic; /* --deterministic: rf_model_set_deterministic */
    int p, n, reps, threads, batch_prompt;
    int depths[16], n_depths, batches[16], n_batches;
    rf_device device;
    int device_index, tp;
    rf_type kv_type;
    int out; /* 0 md, 1 json, 2 csv */
} bench_opts;

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

typedef struct run_result {
    double prompt_s, decode_s;
    int64_t prompt_tok, decode_tok;
    double *lat;  /* decode step durations, ms */
    int n_lat, cap_lat;
    int done;
} run_result;

static bool on_event(const rf_event *ev, void *user) {
    run_result *r = user;
    if (rf_event_get_kind(ev) == RF_EVENT_DONE) r->done++;
    return true;
}

/* Submits nreq requests of plen random tokens generating ngen tokens each, steps the engine
 * until all are done, and splits the time into steps that computed prompt tokens and decode
 * steps (whose durations are the per-token latencies). */
static int run_once(rf_engine *e, int nreq, int plen, int ngen, uint64_t *rng, run_result *r) {
    int32_t nv = rf_engine_n_vocab(e);
    int32_t *ids = malloc((size_t)(plen > 0 ? plen : 1) * sizeof(int32_t));
    if (!ids) return rf_cli_fail(1, "out of memory");
    r->done = 0;
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
        rf_status st = rf_engine_submit(e, rq, NULL);
        rf_request_free(rq);
        if (st) {
            free(ids);
            return rf_cli_fail(1, "%s", rf_last_error());
        }
    }
    free(ids);
    while (r->done < nreq) {
        int64_t p0 = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS), g0 = rf_engine_get_stat(e, RF_STAT_GEN_TOKENS);
        double t0 = now_s();
        if (rf_engine_step(e)) return rf_cli_fail(1, "step failed: %s", rf_last_error());
        double dt = now_s() - t0;
        int64_t dp = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS) - p0, dg = rf_engine_get_stat(e, RF_STAT_GEN_TOKENS) - g0;
        if (dp > 0) {
            r->prompt_s += dt;
            r->prompt_tok += dp;
        } else if (dg > 0) {
            r->decode_s += dt;
            r->decode_tok += dg;
            if (r->n_lat == r->cap_lat) {
                int cap = r->cap_lat ? r->cap_lat * 2 : 256;
                double *l = realloc(r->lat, (size_t)cap * sizeof(double));
                if (!l) return rf_cli_fail(1, "out of memory");
                r->lat = l;
                r->cap_lat = cap;
            }
            r->lat[r->n_lat++] = dt * 1e3;
        }
    }
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct row {
    char test[48];
    int kind;    /* 0 pp, 1 tg, 2 batched */
    int depth, batch;
    double mean, sd;   /* tok/s */
    double p50, p99;   /* ms per decode step; NAN for pp */
    double gbps;       /* achieved read bandwidth; NAN for pp */
} row;

/* ---- the command ------------------------------------------------------------------------ */

int rf_cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    int maxb = 1, maxd = 0;
    for (int i = 0; i < o.n_batches; i++) maxb = o.batches[i] > maxb ? o.batches[i] : maxb;
    for (int i = 0; i < o.n_depths; i++) maxd = o.depths[i] > maxd ? o.depths[i] : maxd;

    /* the device's read bandwidth first, while its memory is still free */
    double bw = 0;
    char devname[256] = "cpu", driver[96] = "";
    bool on_gpu = false;
    if (o.device != RF_DEVICE_CPU && rf_gpu_device_count() > 0)
        on_gpu = rf_gpu_probe_read_bw(o.device_index, devname, sizeof devname, &bw) == RF_OK;
    fprintf(stderr, "bench: measuring read bandwidth...\n");
    if (!on_gpu) bw = cpu_read_bw(o.threads ? o.threads : ncpu());
    rf_gpu_reading before = {0}, after = {0};
    if (on_gpu) {
        rf_gpu_monitor_read(o.device_index, &before);
        if (before.driver[0]) snprintf(driver, sizeof driver, "%s", before.driver);
    }

    rf_model_params mp = rf_model_default_params();
    mp.device = o.device;
    mp.device_index = o.device_index;
    mp.tp = o.tp;
    mp.n_threads = o.threads;
    rf_model *m = NULL;
    if (rf_model_load(o.model, &mp, &m)) return rf_cli_fail(1, "%s", rf_last_error());
    if (o.deterministic && rf_model_set_deterministic(m, true)) {
        rf_model_free(m);
        return rf_cli_fail(1, "%s", rf_last_error());
    }
    rf_model_info info;
    rf_model_get_info(m, &info);
    if (on_gpu && strcmp(info.device, "cpu") == 0) { /* auto fell back to the CPU: its bandwidth, then */
        on_gpu = false;
        before.ok = false;
        driver[0] = 0;
        bw = cpu_read_bw(o.threads ? o.threads : ncpu());
    }
    if (!on_gpu) snprintf(devname, sizeof devname, "cpu (%d threads)", o.threads ? o.threads : ncpu());
    /* bytes a decode token reads: every weight, except that an untied embedding gives one row */
    double w_bytes = (double)info.weight_bytes;
    const rf_gguf_tensor *te = rf_gguf_find_tensor(rf_model_gguf(m), "token_embd.weight");
    if (te && !info.tied_embeddings) w_bytes -= (double)te->n_bytes * (1.0 - 1.0 / info.n_vocab);
    /* MoE: a decode step of B sequences reads each layer's routed experts in proportion to the
     * experts its tokens pick: k of E for one token; for B tokens, with the router's picks taken as
     * independent and uniform (random synthetic routers come close; real routers pick fewer
     * distinct experts, so this is an upper bound), E (1 - (1 - k/E)^B) distinct experts */
    double exp_bytes = 0, exp_frac = 1;
    int32_t n_exp = 0, n_exp_used = 0;
    {
        char key[128];
        snprintf(key, sizeof key, "%s.expert_count", info.arch);
        uint32_t u = 0;
        if (!rf_gguf_get_u32(rf_model_gguf(m), key, &u)) n_exp = (int32_t)u;
        snprintf(key, sizeof key, "%s.expert_used_count", info.arch);
        if (!rf_gguf_get_u32(rf_model_gguf(m), key, &u)) n_exp_used = (int32_t)u;
        for (int64_t i = 0; n_exp > 0 && i < rf_gguf_n_tensors(rf_model_gguf(m)); i++) {
            const rf_gguf_tensor *t = rf_gguf_tensor_at(rf_model_gguf(m), i);
            if (strstr(t->name, "_exps.")) exp_bytes += (double)t->n_bytes;
        }
        if (n_exp > 0 && n_exp_used > 0 && n_exp_used <= n_exp) exp_frac = (double)n_exp_used / n_exp;
        else exp_bytes = 0;
    }
    double kv_pos = (double)info.n_layer * 2 * info.n_head_kv * info.head_dim * (o.kv_type == RF_TYPE_F32 ? 4 : o.kv_type == RF_TYPE_F16 ? 2 : 34.0 / 32);

    int ctx = o.p > maxd + o.n ? o.p : maxd + o.n;
    if (o.batch_prompt + o.n > ctx && o.n_batches && o.batches[0]) ctx = o.batch_prompt + o.n;
    ctx += 16;
    rf_engine_config *c = rf_engine_config_new();
    rf_engine *e = NULL;
    int nb = o.p > 512 ? o.p : 512;
    if (nb < maxb) nb = maxb;
    if (!c || rf_engine_config_set(c, RF_ENGINE_CTX, ctx) || rf_engine_config_set(c, RF_ENGINE_PARALLEL, maxb) ||
        rf_engine_config_set(c, RF_ENGINE_BATCH, nb > 65536 ? 65536 : nb) || rf_engine_config_set(c, RF_ENGINE_PREFIX_CACHE, 0) ||
        rf_engine_config_set(c, RF_ENGINE_KV_TYPE, o.kv_type) || rf_engine_config_set(c, RF_ENGINE_THREADS, o.threads) ||
        rf_engine_new(m, c, &e)) {
        rf_engine_config_free(c);
        rf_model_free(m);
        return rf_cli_fail(1, "%s", rf_last_error());
    }
    rf_engine_config_free(c);

    /* the tests */
    row rows[40];
    int nrows = 0;
    uint64_t rng = 0x5eed;
    int total = (o.p ? 1 : 0) + o.n_depths;
    for (int i = 0; i < o.n_batches; i++) total += o.batches[i] > 0;
    int done_tests = 0;
    bool tty = isatty(2);
    rc = 0;
    for (int kind = 0; kind < 3 && !rc; kind++) {
        int count = kind == 0 ? (o.p ? 1 : 0) : kind == 1 ? o.n_depths : o.n_batches;
        for (int ti = 0; ti < count && !rc; ti++) {
            int depth = kind == 1 ? o.depths[ti] : 0, batch = kind == 2 ? o.batches[ti] : 1;
            if (kind == 2 && batch == 0) continue;
            row *R = &rows[nrows];
            memset(R, 0, sizeof *R);
            R->kind = kind, R->depth = depth, R->batch = batch;
            if (kind == 0) snprintf(R->test, sizeof R->test, "pp%d", o.p);
            else if (kind == 1) snprintf(R->test, sizeof R->test, depth ? "tg%d @ d%d" : "tg%d", o.n, depth);
            else snprintf(R->test, sizeof R->test, "tg%d x %d seqs", o.n, batch);
            double *ts = calloc((size_t)o.reps, sizeof(double));
            run_result all = {0};
            for (int rep = -1; rep < o.reps && !rc; rep++) { /* rep -1: warm-up, not counted */
                run_result r = {0};
                if (tty)
                    fprintf(stderr, "\rbench: %-22s %s %d/%d  (test %d of %d)   ", R->test, rep < 0 ? "warm-up" : "rep",
                            rep < 0 ? 0 : rep + 1, o.reps, done_tests + 1, total);
                else if (rep < 0)
                    fprintf(stderr, "bench: %s (test %d of %d)\n", R->test, done_tests + 1, total);
                if (kind == 0) rc = run_once(e, 1, o.p, 1, &rng, &r);
                else if (kind == 1) rc = run_once(e, 1, depth > 0 ? depth : 1, o.n, &rng, &r);
                else rc = run_once(e, batch, o.batch_prompt, o.n, &rng, &r);
                if (!rc && rep >= 0) {
                    ts[rep] = kind == 0 ? (r.prompt_s > 0 ? r.prompt_tok / r.prompt_s : 0)
                                        : (r.decode_s > 0 ? r.decode_tok / r.decode_s : 0);
                    for (int k = 0; k < r.n_lat; k++) {
                        if (all.n_lat == all.cap_lat) {
                            int cap = all.cap_lat ? all.cap_lat * 2 : 1024;
                            double *l = realloc(all.lat, (size_t)cap * sizeof(double));
                            if (!l) break;
                            all.lat = l;
                            all.cap_lat = cap;
                        }
                        all.lat[all.n_lat++] = r.lat[k];
                    }
                }
                free(r.lat);
            }
            done_tests++;
            if (rc) {
                free(ts);
                free(all.lat);
                break;
            }
            double s = 0, s2 = 0;
            for (int k = 0; k < o.reps; k++) s += ts[k];
            R->mean = s / o.reps;
            for (int k = 0; k < o.reps; k++) s2 += (ts[k] - R->mean) * (ts[k] - R->mean);
            R->sd = o.reps > 1 ? sqrt(s2 / (o.reps - 1)) : 0;
            R->p50 = R->p99 = R->gbps = NAN;
            if (kind && all.n_lat) {
                qsort(all.lat, (size_t)all.n_lat, sizeof(double), cmp_d);
                R->p50 = all.lat[all.n_lat / 2];
                R->p99 = all.lat[(int)((all.n_lat - 1) * 0.99)];
                /* a decode step reads the weights once and each sequence's K/V (depth + the
                 * tokens generated so far, n/2 on average) */
                double kv = kv_pos * (depth + (kind == 2 ? o.batch_prompt : 1) + o.n / 2.0);
                const double wb = w_bytes - exp_bytes * (1 - (1 - pow(1 - exp_frac, batch)));
                R->gbps = (wb + batch * kv) * (R->mean / batch) / 1e9;
            }
            free(ts);
            free(all.lat);
            nrows++;
        }
    }
    if (tty) fprintf(stderr, "\r%78s\r", "");
    if (on_gpu) rf_gpu_monitor_read(o.device_index, &after);
    rf_engine_free(e);
    rf_model_free(m);
    if (rc) return rc;

    /* ---- output ---- */
    const char *base = strrchr(o.model, '/');
    base = base ? base + 1 : o.model;
    char ctime_s[64];
    time_t now = time(NULL);
    strftime(ctime_s, sizeof ctime_s, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    if (o.out == 1) {
        printf("{\"model\": \"%s\", \"ftype\": \"%s\", \"params\": %llu, \"weight_bytes\": %llu, \"device\": \"%s\", "
               "\"driver\": \"%s\", \"read_bw_gbs\": %.1f, \"date\": \"%s\", \"reps\": %d,\n \"gpu_before\": ",
               base, info.ftype, (unsigned long long)info.n_params, (unsigned long long)info.weight_bytes, devname, driver,
               bw, ctime_s, o.reps);
        for (int k = 0; k < 2; k++) {
            const rf_gpu_reading *g = k ? &after : &before;
            if (!g->ok) printf("null");
            else printf("{\"sm_mhz\": %u, \"mem_mhz\": %u, \"temp_c\": %u, \"power_w\": %.1f, \"throttled\": %s}", g->sm_mhz,
                        g->mem_mhz, g->temp_c, g->power_mw / 1000.0, g->throttled ? "true" : "false");
            if (!k) printf(", \"gpu_after\": ");
        }
        printf(",\n \"results\": [\n");
        for (int i = 0; i < nrows; i++) {
            const row *R = &rows[i];
            printf("  {\"test\": \"%s\", \"depth\": %d, \"sequences\": %d, \"tok_s\": %.2f, \"tok_s_sd\": %.2f", R->test, R->depth,
                   R->batch, R->mean, R->sd);
            if (!isnan(R->p50)) printf(", \"ms_p50\": %.3f, \"ms_p99\": %.3f, \"gb_s\": %.1f, \"bw_frac\": %.3f", R->p50, R->p99, R->gbps,
                                       bw > 0 ? R->gbps / bw : 0.0);
            printf("}%s\n", i + 1 < nrows ? "," : "");
        }
        printf(" ]}\n");
    } else if (o.out == 2) {
        printf("model,ftype,device,test,depth,sequences,tok_s,tok_s_sd,ms_p50,ms_p99,gb_s,bw_frac\n");
        for (int i = 0; i < nrows; i++) {
            const row *R = &rows[i];
            printf("%s,%s,\"%s\",%s,%d,%d,%.2f,%.2f", base, info.ftype, devname, R->test, R->depth, R->batch, R->mean, R->sd);
            if (isnan(R->p50)) printf(",,,,\n");
            else printf(",%.3f,%.3f,%.1f,%.3f\n", R->p50, R->p99, R->gbps, bw > 0 ? R->gbps / bw : 0.0);
        }
    } else {
        printf("device: %s%s%s | read bandwidth %.1f GB/s (measured) | %s\n", devname, driver[0] ? " | driver " : "", driver, bw,
               ctime_s);
        printf("model: %s | %s | %.1f MiB of weights | %.1f M params | %.1f MiB read per decode token (+ K/V)\n\n", base,
               info.ftype, info.weight_bytes / 1048576.0, info.n_params / 1e6,
               (w_bytes - exp_bytes * (1 - exp_frac)) / 1048576.0);
        if (exp_bytes > 0)
            printf("experts: %d of %d per token, %.1f MiB of expert weights (a step of B sequences counts the "
                   "experts B uniform picks would reach: an upper bound for real routers)\n\n", n_exp_used, n_exp,
                   exp_bytes / 1048576.0);
        printf("| test | t/s | ms/step p50 | p99 | GB/s | of bw |\n|---|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < nrows; i++) {
            const row *R = &rows[i];
            printf("| %s | %.2f ± %.2f |", R->test, R->mean, R->sd);
            if (isnan(R->p50)) printf(" - | - | - | - |\n");
            else printf(" %.2f | %.2f | %.1f | %.0f%% |\n", R->p50, R->p99, R->gbps, bw > 0 ? 100 * R->gbps / bw : 0.0);
        }
        if (before.ok)
            printf("\ngpu (%s): before %u/%u MHz (sm/mem) %u C %.0f W | after %u/%u MHz %u C %.0f W\n", before.source, before.sm_mhz,
                   before.mem_mhz, before.temp_c, before.power_mw / 1000.0, after.sm_mhz, after.mem_mhz, after.temp_c,
                   after.power_mw / 1000.0);
    }
    if (after.ok && after.throttled)
        fprintf(stderr, "warning: the GPU's clocks were cut during the run (reasons 0x%llx: power cap or thermal)\n", after.reasons);

    if (o.plot) {
        char tmp[] = "/tmp/rf-bench-XXXXXX";
        int fd = mkstemp(tmp);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) return rf_cli_fail(1, "--plot: cannot write a temporary file");
        fprintf(f, "# kind x tok/s sd\n");
        for (int i = 0; i < nrows; i++)
            if (rows[i].kind) fprintf(f, "%d %d %.3f %.3f\n", rows[i].kind, rows[i].kind == 1 ? rows[i].depth : rows[i].batch, rows[i].mean, rows[i].sd);
        fclose(f);
        FILE *g = popen("gnuplot 2>&1", "w");
        if (!g) {
            unlink(tmp);
            return rf_cli_fail(1, "--plot needs gnuplot (apt-get install gnuplot-nox)");
        }
        fprintf(g,
                "set terminal pngcairo noenhanced size 1100,450 font ',10'\nset output '%s'\n" /* noenhanced: '_' in a file name is not a subscript */
                "set multiplot layout 1,2 title '%s on %s (tg%d, %s)'\n"
                "set grid\nset ylabel 'tokens/s'\nset yrange [0:*]\n"
                "set xlabel 'KV depth (positions)'\nset title 'one sequence'\n"
                "plot '%s' using ($1==1?$2:1/0):3:4 with yerrorlines lw 2 pt 7 title 'tg tok/s'\n"
                "set xlabel 'sequences at once'\nset title 'batched generation (aggregate)'\nset logscale x 2\n"
                "plot '%s' using ($1==2?$2:1/0):3:4 with yerrorlines lw 2 pt 7 title 'tok/s'\n"
                "unset multiplot\n",
                o.plot, base, devname, o.n, ctime_s, tmp, tmp);
        int prc = pclose(g);
        unlink(tmp);
        if (prc != 0) return rf_cli_fail(1, "--plot: gnuplot failed (exit %d); is gnuplot installed (apt-get install gnuplot-nox)?", prc);
        fprintf(stderr, "bench: wrote %s\n", o.plot);
    }
    return 0;
}
