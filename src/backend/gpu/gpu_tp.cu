/* gpu_tp.cu — what tensor parallelism over several GPUs needs of the GPU backends (docs/tp.md):
 * making a backend's GPU the host thread's current device (one thread issues every GPU's work),
 * the peer-access check between the GPUs of a split, and the communicator over their backends
 * (NCCL, gpu_nccl.cu; the peer-to-peer all-reduce, gpu_tp_p2p.cu, for the steps it can take)
 * with the all-reduce and broadcast the forward calls. */
#include "backend/backend.h"
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_nccl.h"
#include "backend/gpu/gpu_tp_p2p.h"
#include "core/knobs.h"
#include "core/test_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(RF_HIP) /* the mapped pinned-memory names gpu_compat.h does not carry (the stall hook's word) */
#define cudaHostAlloc hipHostMalloc
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#endif

struct rf_tp_comm {
    int n;
    rf_gpu_comm *c;
    rf_gpu_p2p *p2p;   /* the peer-to-peer all-reduce (RF_TP_ALLREDUCE), or NULL: NCCL for every size */
    rf_backend **bes;  /* [n] the split's backends: their recorded steps go before an abort */
    int64_t issued;    /* collectives issued so far (the tp_skip test hook counts them) */
    volatile int *stall_release; /* tp_skip test hook: mapped host word that ends the stall kernels */
    int *stall_dev;              /* the same word as the kernels see it */
};
typedef struct rf_tp_comm rf_tp_comm;
extern "C" rf_gpu_ctx *rf_backend_gpu_ctx(rf_backend *be); /* gpu_backend.c */
extern "C" void rf_backend_gpu_drop_graphs(rf_backend *be);  /* gpu_backend.c */
extern "C" rf_status rf_gbe_p2p_rmsnorm_for(rf_backend *be, rf_gpu_p2p *p, int rank, rf_tensor *y, rf_tensor *x,
                                            const rf_tensor *part, const rf_tensor *w, int64_t rows, int64_t n,
                                            float eps, const rf_tensor *next); /* gpu_backend_products.c */

extern "C" rf_status rf_backend_gpu_use(rf_backend *be) {
    rf_gpu_ctx *ctx = rf_backend_gpu_ctx(be);
    RF_GPU_CHECK(cudaSetDevice(ctx->device));
    return RF_OK;
}

extern "C" rf_status rf_gpu_set_current(rf_gpu_ctx *ctx) {
    RF_GPU_CHECK(cudaSetDevice(ctx->device));
    return RF_OK;
}

extern "C" int rf_backend_gpu_device(rf_backend *be) { return rf_backend_gpu_ctx(be)->device; }

extern "C" rf_status rf_tp_peer_check(rf_backend *const *bes, int n) {
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            if (a == b) continue;
            const int da = rf_backend_gpu_ctx(bes[a])->device, db = rf_backend_gpu_ctx(bes[b])->device;
            int ok = 0;
            cudaError_t e = cudaDeviceCanAccessPeer(&ok, da, db);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                return rf_set_error(RF_ERR_DEVICE, "--tp %d: cannot ask whether GPU %d reaches GPU %d: %s", n, da, db,
                                    cudaGetErrorString(e));
            }
            if (!ok)
                return rf_set_error(RF_ERR_DEVICE,
                                    "--tp %d: GPU %d cannot reach GPU %d directly (no peer access: no NVLink or PCIe "
                                    "P2P between them); RF_TP_NO_PEER_OK=1 lets NCCL go through host memory (slow)",
                                    n, da, db);
        }
    return RF_OK;
}

/* Before NCCL's abort (a wait on the split timed out): every GPU's recorded steps destroyed,
 * followers first (their part lives in GPU 0's graph); NCCL's abort waits for every graph that
 * holds its kernels, and a graph still in flight is released once the abort ends its kernels. */
static void drop_all_graphs(void *user) {
    rf_tp_comm *t = (rf_tp_comm *)user;
    if (t->stall_release) *t->stall_release = 1; /* the test hook's stalled rank runs again */
    rf_gpu_p2p_stop(t->p2p); /* its kernels waiting for a peer end, as NCCL's abort ends NCCL's */
    for (int s = t->n - 1; s >= 0; s--) {
        (void)rf_backend_gpu_use(t->bes[s]);
        rf_backend_gpu_drop_graphs(t->bes[s]);
    }
    (void)rf_backend_gpu_use(t->bes[0]);
}

/* The peer-to-peer all-reduce where RF_TP_ALLREDUCE lets it (auto: where it can run; p2p: it
 * must, or the load fails naming why; nccl: never), for steps of up to p2p_max floats. */
static rf_status p2p_open(rf_tp_comm *t, rf_gpu_ctx *const *ctxs, size_t p2p_max) {
    const char *mode = rf_knob_str(RF_KNOB_TP_ALLREDUCE);
    if (!mode) mode = "auto";
    if (t->n < 2 || strcmp(mode, "nccl") == 0 || p2p_max == 0) return RF_OK;
    rf_status st = rf_gpu_p2p_new(ctxs, t->n, p2p_max, rf_knob_int(RF_KNOB_TP_TIMEOUT_MS), &t->p2p);
    if (st && strcmp(mode, "p2p") == 0)
        return rf_set_error(st, "--tp %d: RF_TP_ALLREDUCE=p2p, but %s", t->n, rf_last_error());
    if (st) {
        RF_LOGI("--tp %d: every all-reduce through NCCL (%s)", t->n, rf_last_error());
        rf_clear_error();
        return RF_OK;
    }
    rf_gpu_comm_watch_p2p(t->c, t->p2p);
    RF_LOGI("--tp %d: all-reduces of up to %zu floats peer to peer (RF_TP_ALLREDUCE=%s), larger ones through NCCL",
            t->n, rf_gpu_p2p_max(t->p2p), mode);
    return RF_OK;
}

extern "C" rf_status rf_tp_comm_new(rf_backend *const *bes, int n, size_t p2p_max, rf_tp_comm **out) {
    *out = NULL;
    rf_gpu_ctx **ctxs = (rf_gpu_ctx **)calloc((size_t)n, sizeof *ctxs);
    rf_tp_comm *t = (rf_tp_comm *)calloc(1, sizeof *t);
    rf_backend **keep = (rf_backend **)calloc((size_t)n, sizeof *keep);
    if (!ctxs || !t || !keep) {
        free(ctxs);
        free(t);
        free(keep);
        return rf_set_error(RF_ERR_OOM, "--tp: out of memory");
    }
    for (int i = 0; i < n; i++) ctxs[i] = rf_backend_gpu_ctx(bes[i]), keep[i] = bes[i];
    rf_status st = rf_gpu_comm_init(ctxs, n, &t->c);
    if (st) {
        free(ctxs);
        free(t);
        free(keep);
        return rf_set_error(st, "--tp %d: the GPUs cannot be joined for the all-reduce: %s", n, rf_last_error());
    }
    t->n = n;
    t->bes = keep;
    rf_gpu_comm_on_abort(t->c, drop_all_graphs, t);
    st = p2p_open(t, ctxs, p2p_max);
    free(ctxs);
    if (st) {
        rf_tp_comm_free(t);
        return st;
    }
    *out = t;
    return RF_OK;
}

extern "C" bool rf_tp_comm_aborted(const rf_tp_comm *t) { return t && rf_gpu_comm_aborted(t->c); }

/* The tp_skip test hook: from the skip_from-th collective on, rank skip_rank - 1's stream first
 * runs a stall kernel, then its share of the collective: a GPU that stopped making progress.
 * Every host call is still made, as it would be with a stuck GPU (one host thread issues every
 * rank's work, and a call left out can block the host inside NCCL's group launch, where no wait
 * of ours is polled); so the other ranks' collectives wait on their GPUs, and the step's polled
 * wait must time out. The stall ends when the split is aborted (drop_all_graphs sets the word),
 * when the communicator is freed, or after 300 s of %globaltimer (a test that lost the thread). */
__global__ void rf_k_tp_stall(const volatile int *release) {
#if defined(RF_CUDA_BUILD)
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(100000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (!*release && t - t0 < 300000000000ull);
#else /* HIP: bounded by sleeps of ~8k cycles each (about 300 s at 2 GHz) */
    for (long long i = 0; !*release && i < 75000000ll; i++) __builtin_amdgcn_s_sleep(127);
#endif
}

static bool skipped(int64_t issued, int r) {
    const rf_test_hooks *h = rf_test_hooks_get(); /* tests only (core/test_hooks.h) */
    return h && h->tp_skip_rank > 0 && r == h->tp_skip_rank - 1 && issued >= h->tp_skip_from;
}

/* Rank r's stall kernel where the hook says this collective stalls it (nothing otherwise). */
static rf_status maybe_stall(rf_tp_comm *t, int r) {
    if (!skipped(t->issued, r)) return RF_OK;
    if (!t->stall_release) {
        void *h = NULL;
        RF_GPU_CHECK(cudaHostAlloc(&h, 64, cudaHostAllocMapped | cudaHostAllocPortable));
        t->stall_release = (volatile int *)h;
        *t->stall_release = 0;
        RF_GPU_CHECK(cudaHostGetDevicePointer((void **)&t->stall_dev, h, 0));
    }
    rf_gpu_ctx *ctx = rf_backend_gpu_ctx(t->bes[r]);
    int dev = 0;
    RF_GPU_CHECK(cudaGetDevice(&dev));
    RF_GPU_CHECK(cudaSetDevice(ctx->device));
    rf_k_tp_stall<<<1, 1, 0, ctx->stream>>>(t->stall_dev);
    const cudaError_t e = cudaGetLastError();
    (void)cudaSetDevice(dev);
    if (e != cudaSuccess) return rf_set_error(RF_ERR_DEVICE, "tp_skip test hook: stall kernel: %s", cudaGetErrorString(e));
    return RF_OK;
}

/* one collective over every rank, grouped: one host thread drives them all, and NCCL needs every
 * rank's call enqueued before any of them can finish */
static rf_status collective(rf_tp_comm *t, rf_tensor *const *bufs, size_t n, bool reduce) {
    rf_status st = rf_gpu_comm_group(t->c, true);
    if (st) return st;
    t->issued++;
    for (int r = 0; r < t->n && !st; r++) {
        st = maybe_stall(t, r);
        if (!st)
            st = reduce ? rf_gpu_comm_allreduce(t->c, r, (float *)bufs[r]->data, n)
                        : rf_gpu_comm_broadcast(t->c, r, (float *)bufs[r]->data, n, 0);
    }
    rf_status end = rf_gpu_comm_group(t->c, false);
    return st ? st : end;
}

/* The all-reduce through the peer-to-peer kernels: one launch per rank, no group (each kernel
 * waits for its peers on the GPU); fails as NCCL's calls do once the split was aborted. */
static rf_status p2p_allreduce(rf_tp_comm *t, rf_tensor *const *bufs, size_t n) {
    rf_status st = rf_gpu_comm_live(t->c);
    if (st) return st;
    t->issued++;
    for (int r = 0; r < t->n && !st; r++) {
        st = maybe_stall(t, r);
        if (!st) st = rf_gpu_p2p_allreduce(t->p2p, r, (float *)bufs[r]->data, n);
    }
    return st;
}

extern "C" rf_status rf_tp_comm_allreduce(rf_tp_comm *t, rf_tensor *const *bufs, size_t n) {
    const rf_test_hooks *th = rf_test_hooks_get(); /* tests only: a step timed without its all-reduces */
    if (th && th->tp_no_reduce) return RF_OK;
    bool p2p = t->p2p != NULL;
    for (int r = 0; r < t->n && p2p; r++) p2p = rf_gpu_p2p_takes(t->p2p, (const float *)bufs[r]->data, n);
    return p2p ? p2p_allreduce(t, bufs, n) : collective(t, bufs, n, true);
}

extern "C" bool rf_tp_comm_norm_takes(const rf_tp_comm *t, int64_t rows, int64_t n) {
    const rf_test_hooks *th = rf_test_hooks_get(); /* tests only: the all-reduce, then the norm */
    if (th && (th->tp_no_reduce || th->tp_norm_unfused)) return false;
    return t && t->p2p && rf_gpu_p2p_norm_takes(t->p2p, rows, n);
}

extern "C" rf_status rf_tp_comm_add_rmsnorm(rf_tp_comm *t, int rank, rf_backend *be, rf_tensor *y, rf_tensor *x,
                                            const rf_tensor *part, const rf_tensor *w, int64_t rows, int64_t n,
                                            float eps, const rf_tensor *next) {
    if (!t->p2p) return rf_set_error(RF_ERR_INVALID_ARG, "--tp: the fused all-reduce + norm needs the p2p kernels");
    rf_status st = rf_gpu_comm_live(t->c);
    if (st) return st;
    if (rank == 0) t->issued++; /* one collective (the tp_skip hook counts them) */
    if ((st = maybe_stall(t, rank))) return st;
    return rf_gbe_p2p_rmsnorm_for(be, t->p2p, rank, y, x, part, w, rows, n, eps, next);
}

extern "C" rf_status rf_tp_comm_broadcast(rf_tp_comm *t, rf_tensor *const *bufs, size_t n) {
    return collective(t, bufs, n, false);
}

extern "C" void rf_tp_comm_free(rf_tp_comm *t) {
    if (!t) return;
    if (t->stall_release) *t->stall_release = 1;
    rf_gpu_p2p_free(t->p2p); /* (its kernels stopped first: none is left waiting) */
    rf_gpu_comm_free(t->c);
    if (t->stall_release) { /* the stall kernels saw the word (set above) and ended */
        int dev = 0;
        (void)cudaGetDevice(&dev);
        for (int r = 0; r < t->n; r++)
            if (cudaSetDevice(rf_backend_gpu_ctx(t->bes[r])->device) == cudaSuccess)
                (void)cudaStreamSynchronize(rf_backend_gpu_ctx(t->bes[r])->stream);
        (void)cudaFreeHost((void *)t->stall_release);
        (void)cudaGetLastError();
        (void)cudaSetDevice(dev);
    }
    free(t->bes);
    free(t);
}
