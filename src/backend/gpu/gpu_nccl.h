/* gpu_nccl.h — NCCL (RCCL on AMD, not built yet) communicators for tensor parallelism over the
 * GPUs of one process: created once, a sum all-reduce of f32 enqueued on a rank's stream (so a
 * captured decode step may hold it). NCCL is loaded at run time (dlopen), so binaries start and
 * work on machines without it; only these calls then fail, naming the library. */
#ifndef RF_GPU_NCCL_H
#define RF_GPU_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_gpu_comm rf_gpu_comm;

/* One communicator per rank, rank r on the device of ctxs[r] (ncclCommInitAll: one process drives
 * every rank). Fails with RF_ERR_UNSUPPORTED where NCCL cannot be loaded (the message names
 * libnccl.so.2) or this build has no NCCL header, RF_ERR_INVALID_ARG for n < 1 or two ranks on
 * one device, RF_ERR_DEVICE with NCCL's message otherwise. */
rf_status rf_gpu_comm_init(rf_gpu_ctx *const *ctxs, int n, rf_gpu_comm **out);
/* Rank r's share of a sum all-reduce of n floats in place at buf (device memory of rank r),
 * enqueued on ctxs[r]'s stream; with several ranks driven from one thread, call it for every
 * rank between rf_gpu_comm_group(c, true) and rf_gpu_comm_group(c, false). May be captured
 * into a CUDA graph. */
rf_status rf_gpu_comm_allreduce(rf_gpu_comm *c, int rank, float *buf, size_t n);
rf_status rf_gpu_comm_group(rf_gpu_comm *c, bool begin);
/* Rank r's share of a broadcast of n floats from rank root's buf into every rank's buf (in place),
 * on ctxs[r]'s stream; grouped as the all-reduce. */
rf_status rf_gpu_comm_broadcast(rf_gpu_comm *c, int rank, float *buf, size_t n, int root);
/* Hang detection (RF_TP_TIMEOUT_MS, docs/tp.md): the communicators are blocking ones unless
 * RF_TP_NCCL_NONBLOCKING=1 (NCCL >= 2.14: every call that would wait on a peer returns
 * ncclInProgress and is polled, bounded; NCCL then runs each group end on a thread), and while one
 * exists every host wait on a rank's stream (rf_gpu_sync, rf_gpu_download, rf_gpu_fence_wait) is
 * a polled wait (rf_gpu_watch_wait) that gives up after the timeout, or as soon as NCCL reports
 * an error, and then aborts every rank's communicator, after calling fn(user) (which must
 * destroy every graph holding this communicator's kernels: NCCL's abort waits for them). From
 * then on every collective and wait fails with the reason (rf_gpu_comm_aborted). */
void rf_gpu_comm_on_abort(rf_gpu_comm *c, void (*fn)(void *), void *user);
bool rf_gpu_comm_aborted(const rf_gpu_comm *c);
/* RF_OK, or (after an abort) RF_ERR_DEVICE with the reason: for collectives that do not go
 * through NCCL (the peer-to-peer all-reduce) and must fail as NCCL's do. */
rf_status rf_gpu_comm_live(rf_gpu_comm *c);
/* The polled waits also watch the peer-to-peer all-reduce's error word (gpu_tp_p2p.h): a kernel
 * whose wait for a peer timed out on the GPU aborts the split as a timed-out wait does. */
struct rf_gpu_p2p;
void rf_gpu_comm_watch_p2p(rf_gpu_comm *c, const struct rf_gpu_p2p *p);
/* NCCL's version as major * 10000 + minor * 100 + patch (0 where it cannot be loaded). */
int rf_gpu_nccl_version(void);
void rf_gpu_comm_free(rf_gpu_comm *c);

#ifdef __cplusplus
}
#endif
#endif
