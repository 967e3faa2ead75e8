/* gpu_tp_p2p.h — the one-shot all-reduce over GPU peer access for tensor parallelism inside one
 * process (docs/tp.md, "The peer-to-peer all-reduce"): a kernel per rank that reads every peer's
 * copy directly over NVLink / PCIe P2P and sums in rank order. CUDA only: HIP builds (and builds
 * for GPUs without peer access) get RF_ERR_UNSUPPORTED from rf_gpu_p2p_new and use NCCL. */
#ifndef RF_GPU_TP_P2P_H
#define RF_GPU_TP_P2P_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_P2P_MAX_RANKS 8

typedef struct rf_gpu_p2p rf_gpu_p2p;

/* Rank r on ctxs[r]'s device (2..RF_P2P_MAX_RANKS ranks, one per device, every pair with peer
 * access, which this enables): per rank a peer-visible scratch of 2 x max_elems floats and its
 * flags, all in that GPU's memory. timeout_ms (RF_TP_TIMEOUT_MS; 0 = unbounded) bounds each
 * kernel's wait for a peer on the GPU itself. RF_ERR_UNSUPPORTED naming why where it cannot run
 * (HIP build, rank count, no peer access), RF_ERR_OOM / RF_ERR_DEVICE otherwise. */
rf_status rf_gpu_p2p_new(rf_gpu_ctx *const *ctxs, int n, size_t max_elems, int64_t timeout_ms, rf_gpu_p2p **out);
/* The most floats one call takes. */
size_t rf_gpu_p2p_max(const rf_gpu_p2p *p);
/* Whether rf_gpu_p2p_allreduce takes this buffer: n <= max and buf 16-byte aligned. */
bool rf_gpu_p2p_takes(const rf_gpu_p2p *p, const float *buf, size_t n);
/* Rank r's share of a sum all-reduce of n floats in place at buf (device memory of rank r), one
 * kernel on ctxs[r]'s stream; every rank must make the same calls in the same order (sizes
 * equal call by call). The sum is (((x0 + x1) + x2) + ...) in rank order: the same bits on every
 * GPU, and the bits of the in-process all-reduce (rf_tp_allreduce). Returns at once (the kernel
 * waits on the GPU for its peers' kernels: issue every rank's call before waiting on any). May
 * be captured into a CUDA graph (the counters the kernel keeps live on the devices). Leaves the
 * current device as it found it. */
rf_status rf_gpu_p2p_allreduce(rf_gpu_p2p *p, int rank, float *buf, size_t n);
/* After a kernel's wait for a peer outlived the timeout (it then wrote a word in mapped host
 * memory, told every peer, and returned; every later kernel returns at once): true, and msg
 * says which GPU waited for which and names RF_TP_TIMEOUT_MS. False while none has. */
bool rf_gpu_p2p_failed(const rf_gpu_p2p *p, char *msg, size_t cap);
/* Ends every kernel waiting now or later (the host gave up on the split: an abort); they return
 * within about a millisecond without a sum. */
void rf_gpu_p2p_stop(rf_gpu_p2p *p);
/* Stops (as above), waits for each rank's stream, frees. NULL is fine. */
void rf_gpu_p2p_free(rf_gpu_p2p *p);

#ifdef __cplusplus
}
#endif
#endif
