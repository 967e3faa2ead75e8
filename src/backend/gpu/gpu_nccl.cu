/* gpu_nccl.cu — the NCCL communicators of gpu_nccl.h: libnccl.so.2 opened at run time and the
 * eight entry points tensor parallelism uses looked up once. HIP builds (RCCL is not wired) and
 * builds without nccl.h get the stubs at the end, which fail with RF_ERR_UNSUPPORTED. */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_nccl.h"
#include "backend/gpu/gpu_tp_p2p.h"

#if !defined(RF_HIP) && defined(__has_include)
#if __has_include(<nccl.h>)
#define RF_NCCL_HEADER 1
#endif
#endif

#if defined(RF_NCCL_HEADER)
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/knobs.h"

static struct {
    bool ok, nonblocking; /* nonblocking: the four optional entry points below were found */
    char why[256];
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*version)(int *);
    const char *(*error_string)(ncclResult_t);
    ncclResult_t (*unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank_config)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*abort)(ncclComm_t);
} g_nccl;
static pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;

static void nccl_load(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_nccl.why, sizeof g_nccl.why, "NCCL is not installed here (dlopen libnccl.so.2: %s)", dlerror());
        return;
    }
#define RF_SYM(f, name)                                                                               \
    if (!(*(void **)&g_nccl.f = dlsym(h, name))) {                                                    \
        snprintf(g_nccl.why, sizeof g_nccl.why, "libnccl.so.2 has no %s", name);                     \
        return;                                                                                       \
    }
    RF_SYM(init_all, "ncclCommInitAll")
    RF_SYM(all_reduce, "ncclAllReduce")
    RF_SYM(broadcast, "ncclBroadcast")
    RF_SYM(group_start, "ncclGroupStart")
    RF_SYM(group_end, "ncclGroupEnd")
    RF_SYM(destroy, "ncclCommDestroy")
    RF_SYM(version, "ncclGetVersion")
    RF_SYM(error_string, "ncclGetErrorString")
#undef RF_SYM
    /* NCCL >= 2.14: non-blocking communicators (their calls return ncclInProgress and are
     * polled, so no host call waits on a peer unbounded) and abort; older: blocking ones */
    *(void **)&g_nccl.unique_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&g_nccl.init_rank_config = dlsym(h, "ncclCommInitRankConfig");
    *(void **)&g_nccl.async_error = dlsym(h, "ncclCommGetAsyncError");
    *(void **)&g_nccl.abort = dlsym(h, "ncclCommAbort");
    g_nccl.nonblocking = g_nccl.unique_id && g_nccl.init_rank_config && g_nccl.async_error && g_nccl.abort;
    g_nccl.ok = true;
}

static rf_status nccl_ready(void) {
    pthread_once(&g_nccl_once, nccl_load);
    return g_nccl.ok ? RF_OK : rf_set_error(RF_ERR_UNSUPPORTED, "%s", g_nccl.why);
}

struct rf_gpu_comm {
    int n;
    rf_gpu_ctx **ctx;
    ncclComm_t *comm;       /* NULL once aborted */
    cudaEvent_t *ev;        /* [n] a mark at the end of rank r's stream, for the polled wait */
    bool nonblocking, aborted;
    int64_t timeout_ms;     /* RF_TP_TIMEOUT_MS; 0 = unbounded waits */
    void (*on_abort)(void *);
    void *on_abort_user;
    const rf_gpu_p2p *p2p;  /* the peer-to-peer all-reduce whose error word the waits watch, or NULL */
    char why[384];          /* why it was aborted */
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Aborts every rank's communicator, once: a collective stuck on the GPU waiting for a peer
 * (NCCL's kernels watch the abort flag) ends. The recorded graphs go first (on_abort): NCCL's
 * abort waits until every graph holding its kernels is destroyed. */
static void comm_abort(rf_gpu_comm *c, const char *why) {
    if (c->aborted) return;
    c->aborted = true;
    snprintf(c->why, sizeof c->why, "%s", why);
    if (c->on_abort) c->on_abort(c->on_abort_user);
    int dev = 0;
    (void)cudaGetDevice(&dev);
    for (int r = 0; r < c->n; r++)
        if (c->comm[r]) {
            (void)cudaSetDevice(c->ctx[r]->device);
            if (g_nccl.abort) g_nccl.abort(c->comm[r]); /* (without it: left, as destroying would wait) */
            c->comm[r] = NULL;
        }
    (void)cudaSetDevice(dev);
    (void)cudaGetLastError();
}

/* The first rank whose communicator reports an error (asynchronously: a peer lost, a network
 * fault), or -1; *busy when one still has an operation in progress (non-blocking). */
static int async_failed(rf_gpu_comm *c, bool *busy, ncclResult_t *err) {
    *busy = false;
    if (!g_nccl.async_error) return -1;
    for (int r = 0; r < c->n; r++) {
        ncclResult_t a = ncclSuccess;
        if (!c->comm[r]) continue;
        if (g_nccl.async_error(c->comm[r], &a) != ncclSuccess) a = ncclInternalError;
        if (a == ncclInProgress) *busy = true;
        else if (a != ncclSuccess) {
            *err = a;
            return r;
        }
    }
    return -1;
}

/* After a non-blocking call returned ncclInProgress: polls until every rank's communicator is
 * done with it, bounded by the timeout (then the communicators are aborted). */
static rf_status settle(rf_gpu_comm *c, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return RF_OK;
    if (r != ncclInProgress) return rf_set_error(RF_ERR_DEVICE, "NCCL %s failed: %s", what, g_nccl.error_string(r));
    const double t0 = now_ms();
    for (unsigned spin = 0;; spin++) {
        bool busy = false;
        ncclResult_t err = ncclSuccess;
        const int bad = async_failed(c, &busy, &err);
        char msg[384];
        if (bad >= 0) {
            snprintf(msg, sizeof msg, "NCCL %s failed on rank %d (GPU %d): %s", what, bad, c->ctx[bad]->device,
                     g_nccl.error_string(err));
            comm_abort(c, msg);
            return rf_set_error(RF_ERR_DEVICE, "%s", msg);
        }
        if (!busy) return RF_OK;
        if (c->timeout_ms > 0 && now_ms() - t0 > (double)c->timeout_ms) {
            snprintf(msg, sizeof msg, "NCCL %s did not finish within %lld ms (RF_TP_TIMEOUT_MS): a GPU of the split is "
                     "stuck or lost; the communicators were aborted", what, (long long)c->timeout_ms);
            comm_abort(c, msg);
            return rf_set_error(RF_ERR_DEVICE, "%s", msg);
        }
        if (spin > 1000) usleep(50);
    }
}

extern "C" rf_status rf_gpu_comm_live(rf_gpu_comm *c) {
    return c->aborted ? rf_set_error(RF_ERR_DEVICE, "NCCL: the split's communicators were aborted earlier (%s); "
                                     "restart to use the GPUs again", c->why)
                      : RF_OK;
}

#define RF_NCCL_TRY(call, what)                                                                       \
    do {                                                                                              \
        ncclResult_t r_ = (call);                                                                     \
        if (r_ != ncclSuccess && r_ != ncclInProgress)                                                \
            return rf_set_error(RF_ERR_DEVICE, "NCCL %s failed: %s", what, g_nccl.error_string(r_));  \
    } while (0)

extern "C" int rf_gpu_nccl_version(void) {
    int v = 0;
    if (nccl_ready() == RF_OK && g_nccl.version(&v) != ncclSuccess) v = 0;
    rf_clear_error();
    return v;
}

/* Non-blocking communicators, one per rank, created as one group from this thread. */
static rf_status init_nonblocking(rf_gpu_comm *c, const int *devs) {
    ncclUniqueId id;
    ncclResult_t r = g_nccl.unique_id(&id);
    if (r != ncclSuccess) return rf_set_error(RF_ERR_DEVICE, "NCCL: ncclGetUniqueId failed: %s", g_nccl.error_string(r));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    int dev = 0;
    (void)cudaGetDevice(&dev);
    ncclResult_t first = g_nccl.group_start();
    for (int k = 0; k < c->n && (first == ncclSuccess || first == ncclInProgress); k++) {
        if (cudaSetDevice(devs[k]) != cudaSuccess) first = ncclUnhandledCudaError;
        else first = g_nccl.init_rank_config(&c->comm[k], c->n, id, k, &cfg);
    }
    r = g_nccl.group_end();
    (void)cudaSetDevice(dev);
    if (first != ncclSuccess && first != ncclInProgress) r = first;
    return settle(c, r, "creating the communicators");
}

/* All-reduces of a small, a middle and a large buffer over every rank right away: NCCL connects
 * the GPUs at their first collectives (runtime connect), and this keeps that out of a step's
 * graph recording, and shows GPUs that cannot talk at load, bounded by the timeout. */
static rf_status warm_up(rf_gpu_comm *c) {
    const size_t sizes[3] = {1024, 262144, 4194304}; /* 4 KiB, 1 MiB, 16 MiB: each size class's algorithm */
    float *buf[64] = {NULL};
    rf_status st = RF_OK;
    int dev = 0;
    (void)cudaGetDevice(&dev);
    for (int r = 0; r < c->n && !st; r++) {
        if (cudaSetDevice(c->ctx[r]->device) != cudaSuccess || cudaMalloc((void **)&buf[r], sizes[2] * 4) != cudaSuccess ||
            cudaMemsetAsync(buf[r], 0, sizes[2] * 4, c->ctx[r]->stream) != cudaSuccess) {
            (void)cudaGetLastError();
            st = rf_set_error(RF_ERR_OOM, "NCCL: the first all-reduce's buffer on GPU %d", c->ctx[r]->device);
        }
    }
    for (int i = 0; i < 3 && !st; i++) {
        st = rf_gpu_comm_group(c, true);
        for (int r = 0; r < c->n && !st; r++) st = rf_gpu_comm_allreduce(c, r, buf[r], sizes[i]);
        rf_status e = rf_gpu_comm_group(c, false);
        if (!st) st = e;
    }
    for (int r = 0; r < c->n && !st; r++) {
        (void)cudaSetDevice(c->ctx[r]->device);
        st = c->ctx[r]->watch ? rf_gpu_watch_wait(c->ctx[r], NULL, "the first all-reduce over the GPUs")
                              : (cudaStreamSynchronize(c->ctx[r]->stream) == cudaSuccess
                                     ? RF_OK
                                     : rf_set_error(RF_ERR_DEVICE, "NCCL: the first all-reduce failed on GPU %d",
                                                    c->ctx[r]->device));
    }
    for (int r = 0; r < c->n; r++)
        if (buf[r]) {
            (void)cudaSetDevice(c->ctx[r]->device);
            if (!st) cudaFree(buf[r]); /* (after a failure the stream may still hold it: kept) */
        }
    (void)cudaSetDevice(dev);
    return st;
}

extern "C" rf_status rf_gpu_comm_init(rf_gpu_ctx *const *ctxs, int n, rf_gpu_comm **out) {
    *out = NULL;
    if (n < 1 || n > 64 || !ctxs) return rf_set_error(RF_ERR_INVALID_ARG, "NCCL: %d ranks", n);
    rf_status st = nccl_ready();
    if (st) return st;
    int *devs = (int *)malloc((size_t)n * sizeof *devs);
    rf_gpu_comm *c = (rf_gpu_comm *)calloc(1, sizeof *c);
    if (c) {
        c->ctx = (rf_gpu_ctx **)calloc((size_t)n, sizeof *c->ctx);
        c->comm = (ncclComm_t *)calloc((size_t)n, sizeof *c->comm);
        c->ev = (cudaEvent_t *)calloc((size_t)n, sizeof *c->ev);
    }
    if (!devs || !c || !c->ctx || !c->comm || !c->ev) {
        free(devs);
        rf_gpu_comm_free(c);
        return rf_set_error(RF_ERR_OOM, "NCCL: out of memory");
    }
    c->n = n; /* rf_gpu_comm_free releases what exists from here */
    for (int r = 0; r < n; r++) {
        devs[r] = ctxs[r]->device;
        c->ctx[r] = ctxs[r];
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r]) {
                free(devs);
                c->n = 0;
                rf_gpu_comm_free(c);
                return rf_set_error(RF_ERR_INVALID_ARG, "NCCL: ranks %d and %d are both on GPU %d (one rank per GPU)", q,
                                    r, devs[r]);
            }
    }
    c->timeout_ms = rf_knob_int(RF_KNOB_TP_TIMEOUT_MS);
    /* Blocking communicators by default: NCCL (2.2x) runs every ncclGroupEnd of a non-blocking
     * one on a new thread and returns ncclInProgress, a thread per collective (two per layer per
     * step) and kernel launches from that thread into a step's graph recording. A hang shows on
     * the GPU (a collective waiting for a peer), which the polled waits below bound either way;
     * RF_TP_NCCL_NONBLOCKING=1 also bounds the host's NCCL calls (for measuring both). */
    c->nonblocking = g_nccl.nonblocking && rf_knob_bool(RF_KNOB_TP_NCCL_NONBLOCKING);
    if (c->nonblocking) {
        st = init_nonblocking(c, devs);
    } else {
        ncclResult_t r = g_nccl.init_all(c->comm, n, devs);
        if (r != ncclSuccess) st = rf_set_error(RF_ERR_DEVICE, "%s", g_nccl.error_string(r));
    }
    int dev = 0;
    (void)cudaGetDevice(&dev);
    for (int r = 0; r < n && !st; r++)
        if (cudaSetDevice(devs[r]) != cudaSuccess || cudaEventCreateWithFlags(&c->ev[r], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            st = rf_set_error(RF_ERR_DEVICE, "NCCL: an event on GPU %d", devs[r]);
        }
    (void)cudaSetDevice(dev);
    free(devs);
    /* every wait on a rank's stream is polled from here, bounded (rf_gpu_watch_wait) */
    for (int r = 0; r < n && !st && c->timeout_ms > 0; r++) ctxs[r]->watch = c, ctxs[r]->watch_rank = r;
    if (!st && n > 1) st = warm_up(c);
    if (st) {
        char msg[384];
        snprintf(msg, sizeof msg, "%s", rf_last_error());
        if (!c->aborted) comm_abort(c, msg); /* a half-made group: abort, not destroy */
        rf_gpu_comm_free(c);
        return rf_set_error(RF_ERR_DEVICE, "NCCL: creating %d communicator(s) failed: %s", n, msg);
    }
    *out = c;
    return RF_OK;
}

extern "C" void rf_gpu_comm_on_abort(rf_gpu_comm *c, void (*fn)(void *), void *user) {
    if (!c) return;
    c->on_abort = fn;
    c->on_abort_user = user;
}

extern "C" bool rf_gpu_comm_aborted(const rf_gpu_comm *c) { return c && c->aborted; }

extern "C" void rf_gpu_comm_watch_p2p(rf_gpu_comm *c, const rf_gpu_p2p *p) {
    if (c) c->p2p = p;
}

extern "C" rf_status rf_gpu_comm_allreduce(rf_gpu_comm *c, int rank, float *buf, size_t n) {
    if (!c || rank < 0 || rank >= c->n) return rf_set_error(RF_ERR_INVALID_ARG, "NCCL all-reduce: rank %d", rank);
    rf_status st = rf_gpu_comm_live(c);
    if (st) return st;
    RF_NCCL_TRY(g_nccl.all_reduce(buf, buf, n, ncclFloat32, ncclSum, c->comm[rank], c->ctx[rank]->stream),
                "all-reduce");
    return RF_OK;
}

extern "C" rf_status rf_gpu_comm_broadcast(rf_gpu_comm *c, int rank, float *buf, size_t n, int root) {
    if (!c || rank < 0 || rank >= c->n || root < 0 || root >= c->n)
        return rf_set_error(RF_ERR_INVALID_ARG, "NCCL broadcast: rank %d, root %d", rank, root);
    rf_status st = rf_gpu_comm_live(c);
    if (st) return st;
    RF_NCCL_TRY(g_nccl.broadcast(buf, buf, n, ncclFloat32, root, c->comm[rank], c->ctx[rank]->stream), "broadcast");
    return RF_OK;
}

extern "C" rf_status rf_gpu_comm_group(rf_gpu_comm *c, bool begin) {
    if (!c) return rf_set_error(RF_ERR_INVALID_ARG, "NCCL group: no communicator");
    if (begin) {
        rf_status st = rf_gpu_comm_live(c);
        if (st) return st;
        RF_NCCL_TRY(g_nccl.group_start(), "group start");
        return RF_OK;
    }
    /* the group's calls are enqueued on the ranks' streams once this returns: with non-blocking
     * communicators perhaps after polling (a first connect), bounded */
    return settle(c, g_nccl.group_end(), "collective (group end)");
}

/* A peer-to-peer all-reduce kernel gave up waiting for a peer (its error word, in host memory):
 * abort as a timed-out wait does. Its kernels return by themselves after the timeout, so the
 * stream may well finish: the word is read on every poll and once more after the wait. */
static bool p2p_timed_out(rf_gpu_comm *c, rf_gpu_ctx *ctx, const char *what) {
    char why[192], msg[384];
    if (c->aborted || !c->p2p || !rf_gpu_p2p_failed(c->p2p, why, sizeof why)) return false;
    snprintf(msg, sizeof msg, "--tp: %s on GPU %d: %s: a GPU of the split is stuck or lost; the communicators were "
             "aborted and the split runs no further steps", what, ctx->device, why);
    comm_abort(c, msg);
    return true;
}

extern "C" rf_status rf_gpu_watch_wait(rf_gpu_ctx *ctx, void *event, const char *what) {
    rf_gpu_comm *c = ctx->watch;
    cudaEvent_t ev = (cudaEvent_t)event;
    if (!ev) RF_GPU_CHECK(cudaEventRecord(ev = c->ev[ctx->watch_rank], ctx->stream));
    const double t0 = now_ms();
    double next_check = t0 + 1.0, t_abort = 0;
    for (unsigned spin = 0;; spin++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady)
            return rf_set_error(RF_ERR_DEVICE, "GPU %d fault in %s (last kernel launched: %s; set RF_GPU_SYNC=1 to pin "
                                "it): %s", ctx->device, what, ctx->last_kernel, cudaGetErrorString(e));
        const double t = now_ms();
        if (!c->aborted) {
            char msg[384];
            bool busy = false;
            ncclResult_t err = ncclSuccess;
            int bad = -1;
            if (t >= next_check) { /* NCCL's own error report (a peer lost) ends the wait early */
                next_check = t + 1.0;
                bad = async_failed(c, &busy, &err);
            }
            if (p2p_timed_out(c, ctx, what)) {
            } else if (bad >= 0) {
                snprintf(msg, sizeof msg, "--tp: %s on GPU %d: NCCL reports an error on rank %d (GPU %d): %s; the "
                         "communicators were aborted and the split runs no further steps", what, ctx->device, bad,
                         c->ctx[bad]->device, g_nccl.error_string(err));
                comm_abort(c, msg);
            } else if (c->timeout_ms > 0 && t - t0 > (double)c->timeout_ms) {
                snprintf(msg, sizeof msg, "--tp: %s on GPU %d did not finish within %lld ms (RF_TP_TIMEOUT_MS): a GPU "
                         "of the split is stuck or lost (a collective waits for a peer); the NCCL communicators were "
                         "aborted and the split runs no further steps", what, ctx->device, (long long)c->timeout_ms);
                comm_abort(c, msg);
            }
        }
        if (c->aborted && t_abort == 0) t_abort = t;
        if (c->aborted && t - t_abort > 10000.0) /* the abort did not end the stream's work */
            return rf_set_error(RF_ERR_DEVICE, "%s (GPU %d's stream still busy 10 s after the abort)", c->why,
                                ctx->device);
        /* spin while a step may still be short; then let the core go between polls */
        if (t - t0 > 20.0) usleep(t - t0 > 1000.0 ? 500 : 50);
        (void)spin;
    }
    (void)p2p_timed_out(c, ctx, what); /* the step ran to its end, but without a sum somewhere */
    return c->aborted ? rf_set_error(RF_ERR_DEVICE, "%s", c->why) : RF_OK;
}

extern "C" void rf_gpu_comm_free(rf_gpu_comm *c) {
    if (!c) return;
    int dev = 0;
    (void)cudaGetDevice(&dev);
    for (int r = 0; r < c->n; r++) {
        if (c->ctx[r] && c->ctx[r]->watch == c) c->ctx[r]->watch = NULL;
        if (c->comm[r]) g_nccl.destroy(c->comm[r]); /* (aborted ones are NULL) */
        if (c->ev && c->ev[r]) {
            (void)cudaSetDevice(c->ctx[r]->device);
            cudaEventDestroy(c->ev[r]);
        }
    }
    (void)cudaSetDevice(dev);
    free(c->ev);
    free(c->comm);
    free(c->ctx);
    free(c);
}

#else /* no NCCL in this build (HIP: RCCL not wired yet; or no nccl.h) */

extern "C" int rf_gpu_nccl_version(void) { return 0; }
extern "C" rf_status rf_gpu_comm_init(rf_gpu_ctx *const *ctxs, int n, rf_gpu_comm **out) {
    (void)ctxs, (void)n;
    *out = NULL;
    return rf_set_error(RF_ERR_UNSUPPORTED, "this build has no NCCL / RCCL (tensor parallelism over GPUs)");
}
extern "C" rf_status rf_gpu_comm_allreduce(rf_gpu_comm *c, int rank, float *buf, size_t n) {
    (void)c, (void)rank, (void)buf, (void)n;
    return rf_set_error(RF_ERR_UNSUPPORTED, "this build has no NCCL / RCCL");
}
extern "C" rf_status rf_gpu_comm_broadcast(rf_gpu_comm *c, int rank, float *buf, size_t n, int root) {
    (void)c, (void)rank, (void)buf, (void)n, (void)root;
    return rf_set_error(RF_ERR_UNSUPPORTED, "this build has no NCCL / RCCL");
}
extern "C" rf_status rf_gpu_comm_group(rf_gpu_comm *c, bool begin) {
    (void)c, (void)begin;
    return rf_set_error(RF_ERR_UNSUPPORTED, "this build has no NCCL / RCCL");
}
extern "C" void rf_gpu_comm_free(rf_gpu_comm *c) { (void)c; }
extern "C" void rf_gpu_comm_on_abort(rf_gpu_comm *c, void (*fn)(void *), void *user) { (void)c, (void)fn, (void)user; }
extern "C" bool rf_gpu_comm_aborted(const rf_gpu_comm *c) { (void)c; return false; }
extern "C" rf_status rf_gpu_comm_live(rf_gpu_comm *c) { (void)c; return RF_OK; }
extern "C" void rf_gpu_comm_watch_p2p(rf_gpu_comm *c, const struct rf_gpu_p2p *p) { (void)c, (void)p; }
/* never called here (no communicator sets ctx->watch): the plain waits */
extern "C" rf_status rf_gpu_watch_wait(rf_gpu_ctx *ctx, void *event, const char *what) {
    cudaError_t e = event ? cudaEventSynchronize((cudaEvent_t)event) : cudaStreamSynchronize(ctx->stream);
    return e == cudaSuccess ? RF_OK : rf_set_error(RF_ERR_DEVICE, "GPU fault in %s: %s", what, cudaGetErrorString(e));
}

#endif
