/* server.c — `rocmforge serve` from start to stop (docs/ARCHITECTURE.md §2.3; the parts and their threads
 * are described in server_int.h): the listening socket, the loader and engine threads, the
 * signals, and a shutdown that cancels what runs and answers what waits. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/test_hooks.h"
#include "server_int.h"

/* ---- engine and loader threads ------------------------------------------------------------ */

static void on_step_error(void *user, rf_status st) {
    (void)user;
    (void)st;
    fprintf(stderr, "serve: engine step failed (its requests get an error): %s\n", rf_last_error());
}

/* the engine thread: the engine's own loop (rf_engine_serve) until shutdown */
static void *engine_main(void *arg) {
    srv *s = arg;
    rf_engine_serve(s->eng, on_step_error, s);
    return NULL;
}

static void *loader_main(void *arg) {
    srv *s = arg;
    const rf_test_hooks *th = rf_test_hooks_get(); /* tests: a window to see 503s in */
    if (th && th->serve_load_delay_ms > 0) {
        long ms = th->serve_load_delay_ms;
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    rf_model_params mp = rf_model_default_params();
    mp.device = s->cfg.device;
    mp.device_index = s->cfg.device_index;
    mp.tp = s->cfg.tp;
    mp.n_threads = s->cfg.n_threads;
    rf_engine_config *ec = NULL;
    rf_status st = rf_model_load(s->cfg.model_path, &mp, &s->model);
    if (st) {
        s->model = NULL;
        goto fail;
    }
    if (s->cfg.deterministic && (st = rf_model_set_deterministic(s->model, true))) goto fail;
    ec = rf_engine_config_new();
    if (!ec) {
        st = rf_set_error(RF_ERR_OOM, "out of memory");
        goto fail;
    }
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_CTX, s->cfg.n_ctx);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_PARALLEL, s->cfg.n_parallel);
    if (s->cfg.n_batch) st = st ? st : rf_engine_config_set(ec, RF_ENGINE_BATCH, s->cfg.n_batch);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_KV_BLOCKS, s->cfg.kv_blocks);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_BLOCK_SIZE, s->cfg.block_size);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_KV_TYPE, s->cfg.kv_type);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_PREFIX_CACHE, !s->cfg.no_prefix_cache);
    st = st ? st : rf_engine_config_set(ec, RF_ENGINE_THREADS, s->cfg.n_threads);
    st = st ? st : rf_engine_new(s->model, ec, &s->eng);
    rf_engine_config_free(ec);
    if (st) {
        s->eng = NULL;
        goto fail;
    }
    s->vocab = rf_model_vocab(s->model);
    s->n_ctx = (int32_t)rf_engine_get_stat(s->eng, RF_STAT_CTX);
    if (pthread_create(&s->engine_thr, NULL, engine_main, s)) {
        st = rf_set_error(RF_ERR_OOM, "cannot start the engine thread");
        goto fail;
    }
    s->engine_started = true;
    rf_model_info info;
    rf_model_get_info(s->model, &info);
    fprintf(stderr, "serve: model '%s' loaded (%s, %s, %s): ctx %d per sequence, parallel %lld, KV pool %lld blocks of %lld\n",
            s->alias, info.arch, info.ftype, info.device, s->n_ctx, (long long)rf_engine_get_stat(s->eng, RF_STAT_PARALLEL),
            (long long)rf_engine_get_stat(s->eng, RF_STAT_BLOCKS_TOTAL), (long long)rf_engine_get_stat(s->eng, RF_STAT_BLOCK_SIZE));
    atomic_store(&s->ready, 1);
    atomic_store(&s->loader_done, 1);
    return NULL;
fail:
    snprintf(s->load_error, sizeof s->load_error, "%s", rf_last_error());
    if (s->eng) rf_engine_free(s->eng);
    s->eng = NULL;
    rf_model_free(s->model);
    s->model = NULL;
    atomic_store(&s->load_failed, 1);
    atomic_store(&s->loader_done, 1);
    kill(getpid(), SIGUSR1);
    return NULL;
}

/* ---- main --------------------------------------------------------------------------------- */

void rf_server_config_defaults(rf_server_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->device = RF_DEVICE_AUTO;
    c->n_parallel = 4;
    c->block_size = 16;
    c->kv_type = RF_TYPE_F16;
    c->max_queue = 256;
    c->max_body = 8 << 20;
    c->http_threads = 4;
    c->ping_s = 15;
    c->timeout_s = 300;
    c->read_timeout_s = 10;
    c->max_conns = 1000;
    c->max_conns_per_ip = 512;
    c->max_buffered = (int64_t)256 << 20;
}

/* Every connection is a descriptor (a lingering one briefly two): the soft limit (often 1024)
 * is raised towards --max-conns + the reserve + room for files, within the hard limit. */
static void raise_fd_limit(const rf_server_config *cfg) {
    struct rlimit rl;
    rlim_t need = (rlim_t)(cfg->max_conns > 0 ? cfg->max_conns : 1) + SRV_CONN_RESERVE + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= need) return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    if (want > rl.rlim_cur) {
        rl.rlim_cur = want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need)
        fprintf(stderr, "serve: warning: the open-file limit (%llu) is below --max-conns + %d; lower --max-conns or "
                        "raise it (ulimit -n)\n", (unsigned long long)rl.rlim_cur, SRV_CONN_RESERVE + 256);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    srv *s = cls;
    if (!s->cfg.verbose) return;
    fputs("serve: libmicrohttpd: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static void shutdown_all(srv *s) {
    /* cancel everything; queued and running requests answer 503 / end their streams */
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (srv_req *r = s->list; r; r = r->next) n++;
    srv_req **v = calloc((size_t)n + 1, sizeof *v);
    int k = 0;
    for (srv_req *r = s->list; r && v; r = r->next) {
        pthread_mutex_lock(&r->mu);
        srv_req_step(r, SRV_IN_SHUTDOWN);
        pthread_mutex_unlock(&r->mu);
        v[k++] = srv_req_ref(r);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k; i++) {
        srv_req_cancel(s, v[i]);
        srv_req_unref(v[i]);
    }
    free(v);
}

static void resume_all(srv *s) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (srv_req *r = s->list; r; r = r->next) n++;
    struct MHD_Connection **cv = calloc((size_t)n + 1, sizeof *cv);
    int k = 0;
    for (srv_req *r = s->list; r && cv; r = r->next) {
        pthread_mutex_lock(&r->mu);
        if (r->conn && srv_req_step(r, SRV_IN_RESUME)) cv[k++] = r->conn;
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k; i++) MHD_resume_connection(cv[i]);
    free(cv);
}

static int wait_until(int (*cond)(srv *), srv *s, int ms) {
    for (int t = 0; t < ms; t += 20) {
        if (cond(s)) return 1;
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
    }
    return cond(s);
}

static int no_active(srv *s) { return atomic_load(&s->active) == 0; }
static int no_listed(srv *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->n_listed;
    pthread_mutex_unlock(&s->mu);
    return n == 0;
}

/* Resolves --host, starts the connection watchdog and the HTTP daemon, and says where it
 * listens; false (with the message printed) when any of it fails. */
static bool start_daemon(srv *s, const rf_server_config *cfg) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai || !ai) {
        fprintf(stderr, "error: cannot resolve --host '%s': %s\n", cfg->host, gai ? gai_strerror(gai) : "no address");
        return false;
    }
    raise_fd_limit(cfg);
    s->guard = srv_guard_new(cfg);
    if (!s->guard) {
        fprintf(stderr, "error: cannot start the connection watchdog\n");
        freeaddrinfo(ai);
        return false;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, srv_on_access, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->http_threads > 0 ? cfg->http_threads : 1),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(cfg->max_conns > 0 ? cfg->max_conns : 1) + SRV_CONN_RESERVE,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(cfg->max_conns_per_ip > 0 ? cfg->max_conns_per_ip : 0),
                            MHD_OPTION_NOTIFY_CONNECTION, srv_guard_on_connection, s->guard,
                            MHD_OPTION_URI_LOG_CALLBACK, srv_guard_on_uri, s->guard,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(cfg->timeout_s > 0 ? cfg->timeout_s : 0),
                            MHD_OPTION_NOTIFY_COMPLETED, srv_on_completed, s,
                            /* no MHD_OPTION_LISTENING_ADDRESS_REUSE: it sets SO_REUSEPORT, with which
                             * a second server on a busy port started silently and the kernel split the
                             * connections between the two; libmicrohttpd's default (SO_REUSEADDR)
                             * still lets a restart bind while old connections sit in TIME_WAIT */
                            MHD_OPTION_END);
    char host[INET6_ADDRSTRLEN] = "?";
    if (ai->ai_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, host, sizeof host);
    else inet_ntop(AF_INET6, &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, host, sizeof host);
    bool v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (!s->d) {
        fprintf(stderr, "error: cannot listen on %s port %d: %s\n", cfg->host, cfg->port,
                errno ? strerror(errno) : "libmicrohttpd failed to start");
        return false;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    int bound = di ? di->port : cfg->port;
    fprintf(stderr, "serve: listening on http://%s%s%s:%d (model loading: /health answers 503 until it is ready)\n",
            v6 ? "[" : "", host, v6 ? "]" : "", bound);
    fflush(stderr);
    return true;
}

int rf_server_main(const rf_server_config *cfg) {
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    s->cfg = *cfg;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->rng_mu, NULL);
    srv_metrics_init(&s->m);
    s->created = (int64_t)time(NULL);
    s->test_faults = rf_test_hooks_get() && rf_test_hooks_get()->serve_faults;
    s->rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)getpid() << 32 ^ (uint64_t)srv_now_ms();
    const char *base = strrchr(cfg->model_path, '/');
    s->file_base = strdup(base ? base + 1 : cfg->model_path);
    if (cfg->alias && *cfg->alias) {
        s->alias = strdup(cfg->alias);
    } else if (s->file_base) {
        s->alias = strdup(s->file_base);
        size_t n = s->alias ? strlen(s->alias) : 0;
        if (n > 5 && !strcasecmp(s->alias + n - 5, ".gguf")) s->alias[n - 5] = 0;
    }
    int rc = 1;
    if (!s->file_base || !s->alias) {
        fprintf(stderr, "error: out of memory\n");
        goto out_free;
    }

    /* signals: waited for by the main thread; every other thread inherits the mask */
    signal(SIGPIPE, SIG_IGN);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, &old);

    if (!start_daemon(s, cfg)) goto out_mask;

    if (pthread_create(&s->ticker, NULL, srv_ticker_main, s) == 0) s->ticker_started = true;
    if (pthread_create(&s->loader, NULL, loader_main, s)) {
        fprintf(stderr, "error: cannot start the loader thread\n");
        goto out_stop;
    }

    int sig = 0;
    for (;;) {
        if (sigwait(&set, &sig)) continue;
        if (sig == SIGUSR1 && !atomic_load(&s->load_failed)) continue;
        break;
    }
    if (sig == SIGUSR1) {
        fprintf(stderr, "error: %s\n", s->load_error);
        pthread_join(s->loader, NULL);
        rc = 1;
    } else {
        fprintf(stderr, "serve: %s: shutting down\n", sig == SIGINT ? "interrupt" : "terminated");
        rc = 0;
        if (!atomic_load(&s->loader_done)) {
            /* a load cannot be interrupted: stop listening and leave; the process ends it */
            atomic_store(&s->stopping, 1);
            if (s->ticker_started) {
                atomic_store(&s->ticker_stop, 1);
                pthread_join(s->ticker, NULL);
                s->ticker_started = false;
            }
            MHD_stop_daemon(s->d);
            fprintf(stderr, "serve: stopped while the model was loading\n");
            fflush(stderr);
            _exit(0);
        }
        pthread_join(s->loader, NULL);
    }

out_stop:
    atomic_store(&s->stopping, 1);
    if (s->eng) {
        for (int i = 0; i < 100 && !no_active(s); i++) { /* up to 10 s for cancellations to land */
            shutdown_all(s);
            wait_until(no_active, s, 100);
        }
        rf_engine_stop_serving(s->eng);
        if (s->engine_started) pthread_join(s->engine_thr, NULL);
        s->engine_started = false;
    }
    atomic_store(&s->engine_gone, 1);
    if (s->ticker_started) {
        atomic_store(&s->ticker_stop, 1);
        pthread_join(s->ticker, NULL);
        s->ticker_started = false;
    }
    resume_all(s);
    wait_until(no_listed, s, 2000);
    resume_all(s);
    MHD_stop_daemon(s->d);
    s->d = NULL;
    srv_guard_free(s->guard);
    s->guard = NULL;
    if (s->eng) rf_engine_free(s->eng);
    rf_model_free(s->model);
    if (rc == 0) fprintf(stderr, "serve: stopped\n");
out_mask:
    srv_guard_free(s->guard);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
out_free:
    srv_metrics_destroy(&s->m);
    free(s->alias);
    free(s->file_base);
    free(s);
    return rc;
}
