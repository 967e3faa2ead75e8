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
 * access, which this enables): per rank a peer-visible scratch of 2 x n x max_elems floats and its
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
/* Whether rf_gpu_p2p_add_rmsnorm takes rows x n: n a multiple of 32 up to 4,096 (where it was
 * measured to pay, gpu_tp_p2p.cu), rows * ceil(n / 1024) <= 128 (decode steps), a GPU with
 * thread-block clusters (sm_90). */
bool rf_gpu_p2p_norm_takes(const rf_gpu_p2p *p, int64_t rows, int64_t n);
/* Rank r's share of: s = part summed over the ranks (rank order: rf_gpu_p2p_allreduce's bits),
 * x = x + s (written back), h = rmsnorm(x) * w (w may be NULL) and, with xq (not NULL), h
 * quantized for a product of wtype as rf_gpu_rmsnorm_quantize_x writes it: that kernel's bits
 * after the all-reduce, in one kernel (a programmatic dependent launch) on ctxs[rank]'s stream.
 * part [rows, n] is only read; h must not alias x. Every rank must make the same calls (rows,
 * n) in the same order, as with rf_gpu_p2p_allreduce, whose timeout and stop it shares.
 * RF_ERR_INVALID_ARG where rf_gpu_p2p_norm_takes is false; RF_ERR_UNSUPPORTED on HIP. */
rf_status rf_gpu_p2p_add_rmsnorm(rf_gpu_p2p *p, int rank, float *h, void *xq, rf_type wtype, float *x,
                                 const float *part, const float *w, int64_t rows, int64_t n, float eps);
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
