/* gpu_nccl.cu — the NCCL communicators of gpu_nccl.h: libnccl.so.2 opened at run time and the
 * eight entry points tensor parallelism uses looked up once. HIP builds (RCCL is not wired) and
 * builds without nccl.h get the stubs at the end, which fail with RF_ERR_UNSUPPORTED. */
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_nccl.h"

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

static struct {
    bool ok;
    char why[256];
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*version)(int *);
    const char *(*error_string)(ncclResult_t);
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
    g_nccl.ok = true;
}

static rf_status nccl_ready(void) {
    pthread_once(&g_nccl_once, nccl_load);
    return g_nccl.ok ? RF_OK : rf_set_error(RF_ERR_UNSUPPORTED, "%s", g_nccl.why);
}

#define RF_NCCL_TRY(call, what)                                                                       \
    do {                                                                                              \
        ncclResult_t r_ = (call);                                                                     \
        if (r_ != ncclSuccess)                                                                        \
            return rf_set_error(RF_ERR_DEVICE, "NCCL %s failed: %s", what, g_nccl.error_string(r_));  \
    } while (0)

struct rf_gpu_comm {
    int n;
    rf_gpu_ctx **ctx;
    ncclComm_t *comm;
};

extern "C" int rf_gpu_nccl_version(void) {
    int v = 0;
    if (nccl_ready() == RF_OK && g_nccl.version(&v) != ncclSuccess) v = 0;
    rf_clear_error();
    return v;
}

extern "C" rf_status rf_gpu_comm_init(rf_gpu_ctx *const *ctxs, int n, rf_gpu_comm **out) {
    *out = NULL;
    if (n < 1 || !ctxs) return rf_set_error(RF_ERR_INVALID_ARG, "NCCL: %d ranks", n);
    rf_status st = nccl_ready();
    if (st) return st;
    int *devs = (int *)malloc((size_t)n * sizeof *devs);
    rf_gpu_comm *c = (rf_gpu_comm *)calloc(1, sizeof *c);
    if (c) c->ctx = (rf_gpu_ctx **)calloc((size_t)n, sizeof *c->ctx), c->comm = (ncclComm_t *)calloc((size_t)n, sizeof *c->comm);
    if (!devs || !c || !c->ctx || !c->comm) {
        free(devs);
        rf_gpu_comm_free(c);
        return rf_set_error(RF_ERR_OOM, "NCCL: out of memory");
    }
    for (int r = 0; r < n; r++) {
        devs[r] = ctxs[r]->device;
        c->ctx[r] = ctxs[r];
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r]) {
                free(devs);
                rf_gpu_comm_free(c);
                return rf_set_error(RF_ERR_INVALID_ARG, "NCCL: ranks %d and %d are both on GPU %d (one rank per GPU)", q,
                                    r, devs[r]);
            }
    }
    ncclResult_t r = g_nccl.init_all(c->comm, n, devs);
    free(devs);
    if (r != ncclSuccess) {
        free(c->comm), c->comm = NULL;
        rf_gpu_comm_free(c);
        return rf_set_error(RF_ERR_DEVICE, "NCCL: creating %d communicator(s) failed: %s", n, g_nccl.error_string(r));
    }
    c->n = n;
    *out = c;
    return RF_OK;
}

extern "C" rf_status rf_gpu_comm_allreduce(rf_gpu_comm *c, int rank, float *buf, size_t n) {
    if (!c || rank < 0 || rank >= c->n) return rf_set_error(RF_ERR_INVALID_ARG, "NCCL all-reduce: rank %d", rank);
    RF_NCCL_TRY(g_nccl.all_reduce(buf, buf, n, ncclFloat32, ncclSum, c->comm[rank], c->ctx[rank]->stream),
                "all-reduce");
    return RF_OK;
}

extern "C" rf_status rf_gpu_comm_broadcast(rf_gpu_comm *c, int rank, float *buf, size_t n, int root) {
    if (!c || rank < 0 || rank >= c->n || root < 0 || root >= c->n)
        return rf_set_error(RF_ERR_INVALID_ARG, "NCCL broadcast: rank %d, root %d", rank, root);
    RF_NCCL_TRY(g_nccl.broadcast(buf, buf, n, ncclFloat32, root, c->comm[rank], c->ctx[rank]->stream), "broadcast");
    return RF_OK;
}

extern "C" rf_status rf_gpu_comm_group(rf_gpu_comm *c, bool begin) {
    if (!c) return rf_set_error(RF_ERR_INVALID_ARG, "NCCL group: no communicator");
    RF_NCCL_TRY(begin ? g_nccl.group_start() : g_nccl.group_end(), begin ? "group start" : "group end");
    return RF_OK;
}

extern "C" void rf_gpu_comm_free(rf_gpu_comm *c) {
    if (!c) return;
    if (c->comm)
        for (int r = 0; r < c->n; r++)
            if (c->comm[r]) g_nccl.destroy(c->comm[r]);
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

#endif
