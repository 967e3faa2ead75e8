/* gpu.h — the C-callable face of the GPU backend (CUDA or HIP): device context, memory, and one
 * entry point per kernel. Every pointer argument named d_* (or documented "device") is device
 * memory; every call checks its shapes on the host (RF_ERR_INVALID_ARG naming the op) and turns
 * runtime failures into RF_ERR_DEVICE / RF_ERR_OOM with a message naming the kernel or size.
 * Each op's contract is the contract of its CPU twin in backend/ref/ref_ops.h unless stated. */
#ifndef RF_BACKEND_GPU_H
#define RF_BACKEND_GPU_H

#include "rocmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/ref/ref_ops.h" /* rf_sample_params, RF_ROPE_*; a C header without guards */

typedef struct rf_gpu_ctx rf_gpu_ctx;

/* Number of usable devices; 0 (and RF_OK) when the runtime finds none or has no driver. */
int rf_gpu_device_count(void);

/* Opens device `device` with one non-blocking stream and (CUDA) a cuBLAS handle.
 * RF_ERR_DEVICE with a message saying no GPU / driver was found, or naming the runtime error. */
rf_status rf_gpu_init(int device, rf_gpu_ctx **out);
void rf_gpu_destroy(rf_gpu_ctx *ctx);

/* Device facts read at init. */
typedef struct rf_gpu_info {
    char name[256];
    int warp_size, sm_count, cc_major, cc_minor;
    size_t total_mem, l2_bytes;
} rf_gpu_info;
void rf_gpu_get_info(const rf_gpu_ctx *ctx, rf_gpu_info *info);
/* The context's stream as an opaque handle (cudaStream_t / hipStream_t). */
void *rf_gpu_stream(rf_gpu_ctx *ctx);
/* Makes the context's device the calling thread's current one (one thread driving several GPUs:
 * work for a stream goes out with its device current; gpu_tp.cu). */
rf_status rf_gpu_set_current(rf_gpu_ctx *ctx);

/* ---- memory ----------------------------------------------------------------------------- */
/* Allocates `bytes` (+16 bytes of tail padding so 16-byte loads may over-read a row end).
 * RF_ERR_OOM says how much was needed and how much the device had free. */
rf_status rf_gpu_alloc(rf_gpu_ctx *ctx, size_t bytes, void **d_out);
void rf_gpu_free(rf_gpu_ctx *ctx, void *d_ptr);
rf_status rf_gpu_upload(rf_gpu_ctx *ctx, void *d_dst, const void *src, size_t bytes);
rf_status rf_gpu_download(rf_gpu_ctx *ctx, void *dst, const void *d_src, size_t bytes);
rf_status rf_gpu_memset(rf_gpu_ctx *ctx, void *d_dst, int byte, size_t bytes);
/* Waits for the stream; a fault in an earlier kernel is reported here as RF_ERR_DEVICE naming
 * the last kernel launched (set RF_GPU_SYNC=1 to sync after every launch and pin it exactly). */
rf_status rf_gpu_sync(rf_gpu_ctx *ctx);

/* Weight upload: copies `bytes` from host memory (typically a mapped GGUF file) into a fresh
 * device allocation in 64 MiB chunks through a pinned staging buffer, drawing a progress bar
 * on stderr when `progress` is true. `name` labels messages. */
rf_status rf_gpu_upload_weights(rf_gpu_ctx *ctx, const void *src, size_t bytes, const char *name,
                                bool progress, void **d_out);

/* Scratch arena: one device buffer, bump-allocated, reset per step. Reserve grows it (the old
 * contents are lost). Alloc returns 256-byte aligned pieces or RF_ERR_OOM naming the shortfall. */
rf_status rf_gpu_scratch_reserve(rf_gpu_ctx *ctx, size_t bytes);
rf_status rf_gpu_scratch_alloc(rf_gpu_ctx *ctx, size_t bytes, void **d_out);
void rf_gpu_scratch_reset(rf_gpu_ctx *ctx);

/* Free and total device memory now (cudaMemGetInfo). */
rf_status rf_gpu_mem_info(rf_gpu_ctx *ctx, size_t *free_bytes, size_t *total_bytes);
/* Pinned (page-locked) host memory, for uploads that overlap compute; RF_ERR_OOM on failure. */
rf_status rf_gpu_host_alloc(size_t bytes, void **p);
void rf_gpu_host_free(void *p);
/* A host task beside the stream: fn(user) runs on the runtime's own host thread once the work
 * queued on ctx's stream so far has run, while what is queued after it runs on the device;
 * rf_gpu_host_task_join makes the stream's later work wait for the task. Recorded into a graph
 * it is a host node beside the kernels that follow, run at every launch of the graph. fn makes
 * no GPU call (the runtime forbids it there) and shares nothing with the caller's thread until
 * the join has been waited for (rf_gpu_sync joins a task left open). One task at a time. */
rf_status rf_gpu_host_task(rf_gpu_ctx *ctx, void (*fn)(void *), void *user);
rf_status rf_gpu_host_task_join(rf_gpu_ctx *ctx);
/* Asynchronous copies on the context's stream (src of an upload should be pinned). */
rf_status rf_gpu_upload_async(rf_gpu_ctx *ctx, void *d_dst, const void *src, size_t bytes);
rf_status rf_gpu_copy(rf_gpu_ctx *ctx, void *d_dst, const void *d_src, size_t bytes);
rf_status rf_gpu_download_async(rf_gpu_ctx *ctx, void *dst, const void *d_src, size_t bytes);
/* Fences: an event recorded behind the work queued so far; waiting blocks the host until the
 * stream has reached it (a fault before it is reported as by rf_gpu_sync). A pinned buffer given
 * to rf_gpu_upload_async may be rewritten only once a fence recorded behind that upload has been
 * waited for: the copy runs when the stream reaches it, which can be after the host has moved on
 * to the next step. record creates *fence on first use; destroy takes NULL. */
rf_status rf_gpu_fence_record(rf_gpu_ctx *ctx, void **fence);
rf_status rf_gpu_fence_wait(rf_gpu_ctx *ctx, void *fence);
void rf_gpu_fence_destroy(void *fence);
/* Holds the stream for about `us` microseconds (a host function that sleeps, queued on it), so
 * the host runs ahead of the device: tests of what the host may reuse while work is queued. */
rf_status rf_gpu_stall(rf_gpu_ctx *ctx, unsigned us);

/* Graphs (gpu_graph.cu): begin recording the stream's work; end it and instantiate an
 * executable graph (*exec, opaque); launch one on the stream; destroy one. The scratch arena's
 * base, so a caller can tell when recorded scratch addresses went stale. */
rf_status rf_gpu_capture_begin(rf_gpu_ctx *ctx);
rf_status rf_gpu_capture_end(rf_gpu_ctx *ctx, void **exec);
rf_status rf_gpu_graph_launch(rf_gpu_ctx *ctx, void *exec);
/* A recording over several GPUs: ctx's stream joins (fork) the recording open on lead's stream,
 * and later rejoins it (join) before lead's recording ends; gpu_graph.cu says more. */
rf_status rf_gpu_capture_fork(rf_gpu_ctx *lead, rf_gpu_ctx *ctx);
rf_status rf_gpu_capture_join(rf_gpu_ctx *lead, rf_gpu_ctx *ctx);
void rf_gpu_graph_destroy(void *exec);
void *rf_gpu_scratch_base(rf_gpu_ctx *ctx);

/* ---- batched-forward helpers (gpu_batch_ops.cu; twins in backend/cpu/cpu_backend.c) ------ */
/* cache row slot[t] = src row t (f32 [n_tokens, n]) converted to cache_type (f16, f32 or q8_0),
 * for t < n_tokens; slot is a device array; slots outside [0, cache_rows) are skipped (padding). */
rf_status rf_gpu_kv_store(rf_gpu_ctx *ctx, void *cache, rf_type cache_type, int64_t cache_rows,
                          const float *src, int64_t n_tokens, int64_t n, const int32_t *slot);
/* The same into a q8_0 cache (n % 32 == 0; rows of n / 32 blocks of 34 bytes, ggml's layout),
 * src row t at src + t * ss floats; the bytes of the CPU backend's kv_store exactly. */
rf_status rf_gpu_kv_store_q8(rf_gpu_ctx *ctx, void *cache, int64_t cache_rows, const float *src, int64_t ss,
                             int64_t n_tokens, int64_t n, const int32_t *slot);
/* y[i,:] = x[idx[i],:] for i < n_idx, rows of n f32; idx a device array. */
rf_status rf_gpu_gather_rows(rf_gpu_ctx *ctx, float *y, const float *x, const int32_t *idx,
                             int64_t n_idx, int64_t n);
/* y[r,i] += b[i] over rows x n. */
rf_status rf_gpu_add_bias(rf_gpu_ctx *ctx, float *y, const float *b, int64_t rows, int64_t n);
/* x[i] = cap * tanh(x[i] / cap) in place, cap > 0. */
rf_status rf_gpu_softcap(rf_gpu_ctx *ctx, float *x, float cap, int64_t n);

/* ---- elementwise / norms (f32, device pointers; outputs may alias inputs) ------------------ */
rf_status rf_gpu_scale(rf_gpu_ctx *ctx, float *y, const float *x, float s, int64_t n);
rf_status rf_gpu_add(rf_gpu_ctx *ctx, float *y, const float *a, const float *b, int64_t n);
rf_status rf_gpu_mul(rf_gpu_ctx *ctx, float *y, const float *a, const float *b, int64_t n);
rf_status rf_gpu_causal_mask(rf_gpu_ctx *ctx, float *x, int64_t n_q, int64_t n_kv, int64_t pos0,
                             int64_t window);
rf_status rf_gpu_softmax(rf_gpu_ctx *ctx, float *y, const float *x, int64_t rows, int64_t n,
                         float scale);
rf_status rf_gpu_rmsnorm(rf_gpu_ctx *ctx, float *y, const float *x, const float *w, int64_t rows,
                         int64_t n, float eps);
rf_status rf_gpu_layernorm(rf_gpu_ctx *ctx, float *y, const float *x, const float *w,
                           const float *b, int64_t rows, int64_t n, float eps);
rf_status rf_gpu_swiglu(rf_gpu_ctx *ctx, float *y, const float *gate, const float *up, int64_t n);
rf_status rf_gpu_geglu(rf_gpu_ctx *ctx, float *y, const float *gate, const float *up, int64_t n);
/* gpt-oss's clamped SwiGLU (rf_ref_swiglu_oai) over rows of n at strides gs, us (floats) into y
 * packed [rows, n]; rows = 1 takes a packed vector of any length (y may alias then). */
rf_status rf_gpu_swiglu_oai(rf_gpu_ctx *ctx, float *y, const float *gate, int64_t gs, const float *up, int64_t us,
                            int64_t rows, int64_t n);

/* ---- RoPE ------------------------------------------------------------------------------- */
/* rf_ref_rope's contract, the rotated dims then times attn_factor (cos and sin scaled, as
 * ggml; 1 = plain, bit for bit); pos and freq_factors (may be NULL) are device arrays. */
rf_status rf_gpu_rope(rf_gpu_ctx *ctx, float *x, int64_t n_tokens, int64_t n_heads,
                      int64_t head_dim, int64_t n_rot, int64_t stride_t, int64_t stride_h,
                      const int32_t *pos, float freq_base, float freq_scale,
                      const float *freq_factors, int mode, float attn_factor);
/* Fused RoPE + KV append. k, v: f32 [n_tokens, n_head_kv, head_dim] (not modified).
 * For each token t: k_cache[slot[t], h, :] = rope(k[t,h,:] at pos[t]) and
 * v_cache[slot[t], h, :] = v[t,h,:], stored as cache_type (RF_TYPE_F16, RF_TYPE_F32, or
 * RF_TYPE_Q8_0: whole rows quantized as rf_gpu_kv_store_q8 does).
 * Caches are [cache_rows, n_head_kv, head_dim]; slot ids outside [0, cache_rows) are skipped
 * (never written). Twin: rf_ref_rope + conversion. */
/* The same with the query, in the same kernel: qout f32 [n_tokens, n_head, head_dim] packed =
 * RoPE of qin (row t at qin + t * sq) as rf_gpu_rope computes it (bit-identical; qout may be
 * qin with sq = n_head * head_dim); k and v rows at strides sk, sv (floats) — the columns of
 * one joined Q/K/V product. n_head 0 and qin NULL: rf_gpu_rope_kv_append. */
rf_status rf_gpu_rope_qkv_append(rf_gpu_ctx *ctx, float *qout, const float *qin, int64_t sq, int64_t n_head,
                                 const float *k, int64_t sk, const float *v, int64_t sv, int64_t n_tokens,
                                 int64_t n_head_kv, int64_t head_dim, int64_t n_rot, const int32_t *pos,
                                 const int32_t *slot, float freq_base, float freq_scale,
                                 const float *freq_factors, int mode, float attn_factor, void *k_cache,
                                 void *v_cache, rf_type cache_type, int64_t cache_rows);
/* rf_gpu_rope_qkv_append with the per-head RMSNorms first (qwen3's and gemma3's attn_q_norm /
 * attn_k_norm): each [head_dim] row of qin is rf_gpu_rmsnorm(row, q_norm, eps) before its RoPE, each
 * row of k rf_gpu_rmsnorm(row, k_norm, eps) (q_norm or k_norm NULL: not normed), with v_norm each
 * row of v rf_gpu_rmsnorm(row, NULL, eps) (gemma4's V; none of the three: rf_gpu_rope_qkv_append
 * itself), in one kernel; Q, K and V bit-identical to those rf_gpu_rmsnorm calls, then
 * rf_gpu_rope_qkv_append. With a norm, head_dim <= 1024. */
rf_status rf_gpu_norm_rope_qkv_append(rf_gpu_ctx *ctx, float *qout, const float *qin, int64_t sq, int64_t n_head,
                                      const float *k, int64_t sk, const float *v, int64_t sv, int64_t n_tokens,
                                      int64_t n_head_kv, int64_t head_dim, int64_t n_rot, const int32_t *pos,
                                      const int32_t *slot, float freq_base, float freq_scale,
                                      const float *freq_factors, int mode, float attn_factor, void *k_cache,
                                      void *v_cache, rf_type cache_type, int64_t cache_rows, const float *q_norm,
                                      const float *k_norm, int v_norm, float eps);
/* rf_gpu_norm_rope_qkv_append_parts: the same with qin and k (np arrays) and v (npv arrays) views of a
 * product's split-K partial sums ps floats apart (rf_gpu_mmq_xq_parts), each value summed in
 * order as it is read: the bits of rf_gpu_sum_parts then rf_gpu_norm_rope_qkv_append (np, npv
 * 1..8; with np > 1 not in place). */
rf_status rf_gpu_norm_rope_qkv_append_parts(rf_gpu_ctx *ctx, float *qout, const float *qin, int64_t sq, int64_t n_head,
                                            const float *k, int64_t sk, const float *v, int64_t sv, int64_t n_tokens,
                                            int64_t n_head_kv, int64_t head_dim, int64_t n_rot, const int32_t *pos,
                                            const int32_t *slot, float freq_base, float freq_scale,
                                            const float *freq_factors, int mode, float attn_factor, void *k_cache,
                                            void *v_cache, rf_type cache_type, int64_t cache_rows,
                                            const float *q_norm, const float *k_norm, int v_norm, float eps, int np,
                                            int npv, int64_t ps);
rf_status rf_gpu_rope_kv_append(rf_gpu_ctx *ctx, const float *k, const float *v,
                                int64_t n_tokens, int64_t n_head_kv, int64_t head_dim,
                                int64_t n_rot, const int32_t *pos, const int32_t *slot,
                                float freq_base, float freq_scale, const float *freq_factors,
                                int mode, float attn_factor, void *k_cache, void *v_cache,
                                rf_type cache_type, int64_t cache_rows);

/* ---- quantized weights ------------------------------------------------------------------ */
/* Types the GPU can dequantize (rf_gpu_dequantize / get_rows / GEMM). */
bool rf_gpu_type_supported(rf_type t);
/* Types with a quantized GEMV kernel. */
bool rf_gpu_gemv_supported(rf_type t);
/* dst = dequantize(src): n_rows rows of n_in elements (n_in a multiple of the block size),
 * dst_type RF_TYPE_F32 or RF_TYPE_F16, dst row-major [n_rows, n_in]. Twin: rf_dequantize_row. */
rf_status rf_gpu_dequantize(rf_gpu_ctx *ctx, void *dst, rf_type dst_type, const void *src,
                            rf_type type, int64_t n_rows, int64_t n_in);
/* rf_ref_get_rows's contract with device ids; an id outside [0, n_rows) gives a row of NaN
 * (the host cannot see device ids without a round trip). */
rf_status rf_gpu_get_rows(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                          const int32_t *ids, int64_t n_ids, int64_t n_in, int64_t n_rows);
/* rf_ref_get_rows_part's contract with device ids (a shard's part of a lookup split by rows: W
 * rows [r0, r0 + n_rows) of n_all; zeros for ids elsewhere); an id outside [0, n_all): NaNs. */
rf_status rf_gpu_get_rows_part(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const int32_t *ids,
                               int64_t n_ids, int64_t n_in, int64_t r0, int64_t n_rows, int64_t n_all);
/* y = W x (rf_ref_matmul's contract). n_tokens <= 8 and a GEMV type: quantized GEMV kernel
 * (x quantized to int8 per 32 for quantized W); otherwise GEMM: W dequantized to f16 in scratch,
 * x to f16, cuBLAS GemmEx with f32 accumulation. W must come from rf_gpu_alloc (tail padding).
 * The GEMV kernels may start (programmatic dependent launch) and read W before earlier kernels on
 * the stream have finished: W must not be written by work still in flight (x and y may be). */
rf_status rf_gpu_matmul(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                        int64_t n_tokens, int64_t n_in, int64_t n_out);
rf_status rf_gpu_gemv(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                      int64_t n_tokens, int64_t n_in, int64_t n_out);
rf_status rf_gpu_gemm(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                      int64_t n_tokens, int64_t n_in, int64_t n_out);
/* MMQ (gpu_mmq.cu): y = W x (rf_ref_matmul's contract) for any n_tokens (1..65535) on the int8
 * tensor cores, x quantized once per call as the GEMVs quantize it (int8 per 32, ggml's
 * rounding), each weight read once per 64 tokens; a token's result is bit-identical whatever
 * the call's token count (batch invariant) and from call to call. W from rf_gpu_alloc, read
 * possibly before earlier kernels end (as rf_gpu_matmul). rf_gpu_mmq_supported: whether
 * (wtype, n_in) has the kernel: CUDA only (compute capability 8.0+ checked by the call), Q4_0,
 * Q8_0, Q4_K, Q5_K with n_in a multiple of 256, Q6_K of 512; else RF_ERR_INVALID_ARG. */
rf_status rf_gpu_mmq(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                     int64_t n_tokens, int64_t n_in, int64_t n_out);
bool rf_gpu_mmq_supported(rf_type wtype, int64_t n_in);
/* rf_gpu_mmq_xq: rf_gpu_mmq from x already quantized (rf_gpu_quantize_x, the fused norm and GLU
 * quantizers, where rf_gpu_xq_layout says the product runs on MMQ): xq in order with records rk,
 * rf_gpu_mmq_rk(wtype) at the time x was quantized (K-quants 3 or 1, the others 0; another rk:
 * RF_ERR_INVALID_ARG). The same y as rf_gpu_mmq on the x xq was made from. */
rf_status rf_gpu_mmq_xq(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq, int rk,
                        int64_t n_tokens, int64_t n_in, int64_t n_out);
/* rf_gpu_mmq_xq_parts: rf_gpu_mmq_xq, except that where the product runs in split-K splits whose
 * partial sums fit in parts (cap bytes, device memory) it leaves them there unsummed: *np = the
 * splits, split j's [n_tokens, n_out] at parts + j * n_tokens * n_out, and y is not written (its
 * value is those parts summed in order: rf_gpu_sum_parts, or a norm that takes them,
 * rf_gpu_rmsnorm_quantize_x_parts). Else *np = 0 and y is written as rf_gpu_mmq_xq writes it.
 * rf_gpu_sum_parts: y[i] = parts[0][i] + ... + parts[np - 1][i] in that order (i < n, parts n
 * apart, np 1..8): the sum rf_gpu_mmq_xq would have written. */
rf_status rf_gpu_mmq_xq_parts(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq, int rk,
                              int64_t n_tokens, int64_t n_in, int64_t n_out, float *parts, size_t cap, int *np);
rf_status rf_gpu_sum_parts(rf_gpu_ctx *ctx, float *y, const float *parts, int64_t n, int np);
int rf_gpu_mmq_rk(rf_type wtype);
/* W4A16 (gpu_w4a16.cu): y = W x on the f16 tensor cores, W dequantized to f16 in registers per
 * fragment (never whole), x rounded as rf_gpu_gemm rounds it (int8 per 32, then f16) or, with
 * _f16x, given in f16 [n_tokens, n_in]. rf_gpu_w4a16_supported: CUDA (cc 8.0+ checked by the
 * call), Q4_0, Q4_K, Q5_K, Q8_0 with n_in a multiple of 256. Contract and error model: gpu_w4a16.cu. */
rf_status rf_gpu_w4a16(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                       int64_t n_tokens, int64_t n_in, int64_t n_out);
rf_status rf_gpu_w4a16_f16x(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *x16,
                            int64_t n_tokens, int64_t n_in, int64_t n_out);
bool rf_gpu_w4a16_supported(rf_type wtype, int64_t n_in);
/* Whether rf_gpu_matmul sends a product of n_tokens to MMQ (the router's answer, gpu_route.h:
 * RF_GPU_MMQ_MIN .. MAX tokens, default 17 .. 96, or every count in deterministic mode). */
bool rf_gpu_mmq_takes(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in);
/* Whether rf_gpu_matmul's product of n_tokens rounds x to int8 blocks of 32 (MMQ, the int8-x
 * GEMVs, the BLAS path of quantized weights) or takes it as f32 / f16; for the CPU twin of tests. */
bool rf_gpu_matmul_rounds_x(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in);
/* The two halves of rf_gpu_gemv for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; and
 * Q4_K, Q5_K, Q6_K in CUDA builds for n_in a multiple of 256 up to 16384), so the
 * op producing x can quantize it once for every product that reads it (and the products run as
 * one kernel each). rf_gpu_quantize_x: x f32 [n_tokens, n_in] -> xq, rf_gpu_xq_bytes(n_tokens,
 * n_in) bytes of device memory (16-byte aligned), int8 per 32 plus scales in the order the
 * product kernel for (wtype, n_in, n_tokens) and the context's variant reads them.
 * rf_gpu_gemv_xq: y = W x from such an xq, for the same wtype, n_tokens and n_in (and variant).
 * Where the router sends the product to MMQ (17..96 tokens by default) and RF_GPU_MMQ_XQ is on, the
 * pair is the MMQ's (x in order, rf_gpu_mmq_rk's records; the product rf_gpu_mmq_xq).
 * rf_gpu_xq_layout: the order (gb) and records (rk) of that xq, so that a caller may reuse one
 * quantized x for products of several types that read the same layout.
 * Shapes and types are checked as in rf_gpu_gemv; other types: RF_ERR_INVALID_ARG. */
rf_status rf_gpu_xq_layout(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in, int *gb, int *rk);
size_t rf_gpu_xq_bytes(int64_t n_tokens, int64_t n_in);
rf_status rf_gpu_quantize_x(rf_gpu_ctx *ctx, void *xq, rf_type wtype, const float *x,
                            int64_t n_tokens, int64_t n_in);
/* rf_gpu_rmsnorm_quantize_x: h f32 [n_tokens, n_in] = rf_gpu_rmsnorm(x, w, eps) (h may alias
 * x; n_in <= 16384) and the xq of h for wtype, as rf_gpu_quantize_x would make it, in one
 * kernel; with res (not NULL) x = x + res is formed first and written back (rf_gpu_add_rmsnorm). rf_gpu_gemv_has_xq:
 * whether the product of (wtype, n_tokens, n_in) takes such an xq (one GEMV call, or MMQ as above). */
/* rf_gpu_add_rmsnorm: x = x + res (res not NULL; written back, as rf_gpu_add), then y =
 * rf_gpu_rmsnorm(x, w, eps), in one kernel; n <= 16384; y must not alias x with res. */
rf_status rf_gpu_add_rmsnorm(rf_gpu_ctx *ctx, float *y, float *x, const float *res, const float *w, int64_t rows,
                             int64_t n, float eps);
/* rf_gpu_add_norm: over rows x n (n <= 16384), with o (not NULL) o = rf_gpu_rmsnorm(o, wo) and x = (x + o) * s
 * (both written back; without o, s must be 1 and x is only read); with y (not NULL) y = rf_gpu_rmsnorm(x, wy)
 * * sy; y aliases neither x nor o. One kernel (gemma4's post-norm, residual add, layer scale and next norm). */
rf_status rf_gpu_add_norm(rf_gpu_ctx *ctx, float *x, float *o, const float *wo, float s, float *y, const float *wy,
                          float sy, int64_t rows, int64_t n, float eps);
rf_status rf_gpu_rmsnorm_quantize_x(rf_gpu_ctx *ctx, float *h, void *xq, rf_type wtype, float *x, const float *res,
                                    const float *w, int64_t n_tokens, int64_t n_in, float eps);
/* rf_gpu_rmsnorm_quantize_x_parts: the same with the residual given as np (1..8) arrays of
 * [n_tokens, n_in], n_tokens * n_in apart (a product's split-K partial sums, rf_gpu_mmq_xq_parts),
 * summed in order before the add: the bits of rf_gpu_sum_parts then rf_gpu_rmsnorm_quantize_x. */
rf_status rf_gpu_rmsnorm_quantize_x_parts(rf_gpu_ctx *ctx, float *h, void *xq, rf_type wtype, float *x,
                                          const float *res, int np, const float *w, int64_t n_tokens, int64_t n_in,
                                          float eps);
bool rf_gpu_gemv_has_xq(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in);
/* rf_gpu_glu_quantize_x: y f32 [n_tokens, n_in] packed = act(gate) * up as rf_gpu_swiglu /
 * geglu, gate and up rows at strides gs, us (floats; y may alias them when packed), and the xq
 * of y for wtype, in one kernel. */
rf_status rf_gpu_glu_quantize_x(rf_gpu_ctx *ctx, float *y, void *xq, rf_type wtype, bool geglu, const float *gate,
                                int64_t gs, const float *up, int64_t us, int64_t n_tokens, int64_t n_in);
/* rf_gpu_glu_rows: y [rows, n] packed = act(gate) * up over rows at strides gs, us (floats),
 * the arithmetic of rf_gpu_swiglu / geglu. */
rf_status rf_gpu_glu_rows(rf_gpu_ctx *ctx, float *y, const float *gate, int64_t gs, const float *up, int64_t us,
                          int64_t rows, int64_t n, bool geglu);
rf_status rf_gpu_gemv_xq(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq,
                         int64_t n_tokens, int64_t n_in, int64_t n_out);
/* rf_gpu_gemv_xq_bias: the same with y[t, o] = (W x)[t, o] + bias[o] (bias f32 [n_out] on the
 * device, or NULL: rf_gpu_gemv_xq), the bias added in the product kernel's store where it has
 * that epilogue (gemv_q32, q32s, q32h), else by rf_gpu_add_bias after it: the same y either way,
 * one f32 add per output. */
rf_status rf_gpu_gemv_xq_bias(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq,
                              const float *bias, int64_t n_tokens, int64_t n_in, int64_t n_out);
/* rf_gpu_gemv_xq_parts: rf_gpu_gemv_xq, leaving the split-K partial sums unsummed in parts (cap
 * bytes, 16-byte aligned) where the product runs on MMQ in splits that fit (*np > 0, y not
 * written: rf_gpu_mmq_xq_parts); else *np = 0 and y written. */
rf_status rf_gpu_gemv_xq_parts(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq,
                               int64_t n_tokens, int64_t n_in, int64_t n_out, float *parts, size_t cap, int *np);
/* Selects a GEMV kernel variant (0 = default, 1..30 = the variants listed in gpu_matmul.cu); for
 * the benchmark's sweep and tests. */
void rf_gpu_set_gemv_variant(rf_gpu_ctx *ctx, int variant);
/* Rows of W per warp for the q32s / q32h kernels (variants 4..23 and their defaults): 0 = the
 * default (the fewest that let the grid fit on the device at once), else rpw (at most 1024)
 * rounded up to what the kernel needs; for the benchmark's occupancy sweep. No effect on HIP. */
void rf_gpu_set_gemv_rpw(rf_gpu_ctx *ctx, int rpw);
/* Unused shared memory per q32s block, in KB (0..16; 0, the default, = none), to cap the blocks
 * resident per SM; for the benchmark's occupancy sweep. No effect on HIP. */
void rf_gpu_set_gemv_pad(rf_gpu_ctx *ctx, int kb);
/* Turns programmatic dependent launch of the GEMV kernels on or off (default: on where the device
 * supports it, sm_90+ under CUDA, unless RF_GPU_PDL=0); returns whether it is on now. */
bool rf_gpu_set_pdl(rf_gpu_ctx *ctx, bool on);
/* Batch-invariant products: with `on`, rf_gpu_matmul takes MMQ for every token count (a token's
 * outputs are the same bits in a call of 1 or 512 tokens: test_gpu_mmq), and a weight type MMQ
 * does not take (or a device below sm_80) fails the product with RF_ERR_UNSUPPORTED. */
void rf_gpu_set_batch_invariant(rf_gpu_ctx *ctx, bool on);

/* ---- mixture of experts (gpu_moe.cu; the contracts of backend.h's moe_route, matmul_id and
 * moe_combine, twins rf_ref_moe_route / rf_ref_matmul_id / rf_ref_moe_combine) ------------- */
/* Router: ids int32 [n, k], wts f32 [n, k] from logits f32 [n, n_expert] (gating: rf_moe_gating);
 * n_expert <= 1024, k <= 32 (RF_ERR_INVALID_ARG beyond). */
rf_status rf_gpu_moe_route(rf_gpu_ctx *ctx, int32_t *ids, float *wts, const float *logits, const float *sel_bias,
                           int64_t n, int64_t n_expert, int64_t k, int gating, bool norm, float scale);
/* y [n k, n_out] = W_e x_r (+ bias[e]) with e = ids[t, j] (clamped to [0, n_expert)); W n_expert
 * * n_out rows of n_in elements of type t (calls of 65535 slots at most, whole tokens, where n k
 * is larger). Few slots: a GEMV per slot (every type
 * the GPU decodes); from RF_GPU_MOE_GROUPED_MIN slots (or always, batch-invariant mode) where MMQ
 * takes the type: grouped by expert on the device, one grouped MMQ. Batch invariant either way. */
rf_status rf_gpu_matmul_id(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, int64_t n_out, int64_t n_expert,
                           int64_t n_in, const float *x, bool x_per_slot, const int32_t *ids, const float *bias,
                           int64_t n, int64_t k);
/* Whether rf_gpu_matmul_id takes the grouped path for these shapes on this device. */
bool rf_gpu_moe_grouped_takes(rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n, int64_t k);
/* The decode fusions (backend.h's matmul_id_glu / matmul_id_combine): where rf_gpu_matmul_id
 * takes the GEMV per slot, one kernel (x quantized once) computes y [n k, n_out] = glu(gate
 * product, up product) (glu: rf_glu_kind; wg, wu of type t) or y [n, n_out] = the wts-weighted
 * sum of each token's k down products of x [n k, n_in]; elsewhere the unfused ops, with u / z
 * ([n k, n_out]) their intermediate. Bit-identical to the unfused ops either way. */
rf_status rf_gpu_matmul_id_glu(rf_gpu_ctx *ctx, float *y, float *u, const void *wg, const void *wu, rf_type t,
                               int64_t n_out, int64_t n_expert, int64_t n_in, const float *x, const int32_t *ids,
                               const float *bg, const float *bu, int64_t n, int64_t k, int glu);
rf_status rf_gpu_matmul_id_combine(rf_gpu_ctx *ctx, float *y, float *z, const void *w, rf_type t, int64_t n_out,
                                   int64_t n_expert, int64_t n_in, const float *x, const int32_t *ids,
                                   const float *bias, const float *wts, int64_t n, int64_t k);
/* One MoE feed-forward's experts from the router's logits (backend.h's moe_ffn): logits (+ lb,
 * the router's bias, added in place on the unfused path) -> route -> gate and up with the GLU
 * (g [n k, n_ff]; u scratch) -> down (z scratch) summed with the router weights into y [n, n_out].
 * With RF_GPU_MOE_FUSE >= 3 on the per-slot path (int8-x types for both products): three kernels
 * (route with the bias and x's quantization; gate+up+GLU with the down input's quantization;
 * down+sum); with few slots per expert past it (RF_GPU_MOE_GGEMV) the grouped GEMV (each token's
 * bits those of the three kernels for it alone); with many, the grouped MMQ; else the ops above
 * (rf_gpu_add_bias, rf_gpu_moe_route, rf_gpu_matmul_id_glu, rf_gpu_matmul_id_combine).
 * Bit-identical to those ops on each path. */
typedef struct rf_gpu_moe_ffn_desc {
    float *logits;                 /* [n, n_expert] */
    const float *lb, *sel_bias;    /* NULL or [n_expert] each */
    int gating;                    /* rf_moe_gating */
    bool norm;
    float scale;
    int32_t *ids;                  /* out [n, k] */
    float *wts;                    /* out [n, k] */
    const float *x;                /* [n, n_in] */
    const void *wg, *wu, *wd;      /* [n_expert n_ff, n_in] of tg (both), [n_expert n_out, n_ff] of td */
    rf_type tg, td;
    const float *bg, *bu, *bd;     /* NULL or [n_expert, n_ff] / [n_expert, n_out] */
    float *g, *u, *z;              /* [n k, n_ff], [n k, n_ff], [n k, n_out] */
    int64_t n, k, n_expert, n_in, n_ff, n_out;
    int glu;                       /* rf_glu_kind */
} rf_gpu_moe_ffn_desc;
rf_status rf_gpu_moe_ffn(rf_gpu_ctx *ctx, float *y, const rf_gpu_moe_ffn_desc *d);
/* y [n, m] = sum over j = 0..k-1 (in order) of wts[t, j] z[t k + j] */
rf_status rf_gpu_moe_combine(rf_gpu_ctx *ctx, float *y, const float *z, const float *wts, int64_t n, int64_t k,
                             int64_t m);
/* y[t] += z[t] * sigmoid(w . h[t]) over t < n: y, z [n, m] packed, h rows of m with stride
 * h_stride floats, w f32 [m] (twin rf_ref_moe_shared_gate; the dot summed as a block tree). */
rf_status rf_gpu_moe_shared_gate(rf_gpu_ctx *ctx, float *y, const float *z, const float *h, int64_t h_stride,
                                 const float *w, int64_t n, int64_t m);

/* ---- attention -------------------------------------------------------------------------- */
/* rf_ref_attention's contract with K/V in a cache: q f32 [n_q, n_head, head_dim];
 * k, v [n_kv, n_head_kv, head_dim] as kv_type (RF_TYPE_F16 or RF_TYPE_F32); out f32.
 * head_dim in {64, 80, 96, 128, 256}. Online-softmax flash attention; when n_q is small and
 * n_kv long the keys are split across blocks (split-K) and a second kernel reduces. sinks:
 * device f32 [n_head] or NULL (rf_ref_attention's attention sinks). */
rf_status rf_gpu_attention(rf_gpu_ctx *ctx, float *out, const float *q, const void *k,
                           const void *v, rf_type kv_type, int64_t n_q, int64_t n_kv,
                           int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                           bool causal, int64_t pos0, int64_t window, float softcap,
                           const float *sinks);
/* Same, forcing the number of key splits (1 = plain flash attention); for tests. */
rf_status rf_gpu_attention_splits(rf_gpu_ctx *ctx, float *out, const float *q, const void *k,
                                  const void *v, rf_type kv_type, int64_t n_q, int64_t n_kv,
                                  int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                  float scale, bool causal, int64_t pos0, int64_t window,
                                  float softcap, int n_splits, const float *sinks);

/* Paged attention (the contract of rf_backend_ops.attention in backend/backend.h; twin:
 * rf_ref_paged_attention). For each token t < n_tokens, with device arrays pos[t] and seq[t]:
 * query q[t] f32 [n_head, head_dim] attends to the keys of its sequence at positions
 * kmin..pos[t] (kmin = pos[t] - window + 1 when window > 0, else 0); position j is row
 * block_table[seq[t] * max_blocks + j / block_size] * block_size + j % block_size of the caches
 * k, v [rows, n_head_kv, head_dim] (kv_type RF_TYPE_F16, RF_TYPE_F32, or RF_TYPE_Q8_0 with head_dim
 * % 32 == 0: rows of ggml q8_0 blocks, read dequantized to d * q in registers); scores scale * q.k,
 * softcap (c * tanh(s / c)) when > 0, softmax, out[t] f32 [n_head, head_dim] = P v; with an f16
 * cache the query is first rounded to f16 (the CPU backend's and llama.cpp's rule). A token with
 * pos[t] < 0 is padding: its output row is zeros and nothing is read for it. max_pos is a host
 * upper bound of pos over the batch (sizes the split of the keys). Batch-invariant: a token's
 * output does not depend on which other tokens share the call (the keys are split at fixed
 * absolute positions). head_dim in {64, 80, 96, 128, 256}, or past 256: rf_gpu_attention_wide. sinks: device f32 [n_head] or NULL
 * (attention sinks: head h's logit joins each row's max and denominator once, no value). */
rf_status rf_gpu_paged_attention(rf_gpu_ctx *ctx, float *out, const float *q, const void *k,
                                 const void *v, rf_type kv_type, int64_t n_tokens,
                                 const int32_t *pos, const int32_t *seq,
                                 const int32_t *block_table, int64_t max_blocks,
                                 int64_t block_size, int64_t n_head, int64_t n_head_kv,
                                 int64_t head_dim, float scale, int64_t window, float softcap,
                                 int64_t max_pos, const float *sinks);
/* Same, with the host's word on the batch's shape: decode when no two consecutive tokens of the
 * call belong to one sequence (decode rows of many sequences: one token per block whatever
 * n_tokens is), else prompt chunks (consecutive tokens of a sequence share each K/V load).
 * rf_gpu_paged_attention takes decode for n_tokens <= 64. Only the speed depends on it: the
 * output is the same bit for bit, and correct for any batch, either way. */
rf_status rf_gpu_paged_attention_hint(rf_gpu_ctx *ctx, float *out, const float *q, const void *k,
                                      const void *v, rf_type kv_type, int64_t n_tokens,
                                      const int32_t *pos, const int32_t *seq,
                                      const int32_t *block_table, int64_t max_blocks,
                                      int64_t block_size, int64_t n_head, int64_t n_head_kv,
                                      int64_t head_dim, float scale, int64_t window, float softcap,
                                      int64_t max_pos, const float *sinks, bool decode);

/* Same, and with min_keys >= 1 (0: as rf_gpu_paged_attention_hint) a decode call (decode true)
 * gives its rows at positions >= min_keys - 1 to rf_gpu_decode_attention where that kernel takes
 * the call (rf_gpu_decode_attention_wanted), the rest to the paged kernel. Which kernel a row takes
 * follows from its own position (and the call's decode word and shape), so its bits do not depend
 * on the other rows of a decode call; they differ in rounding from the paged kernel's (f16
 * softmax weights), so the batch-invariant mode passes 0. min_keys 1: every row the decode
 * kernel's, the paged kernel not launched (the decode merge writes padding rows' zeros). */
rf_status rf_gpu_paged_attention_route(rf_gpu_ctx *ctx, float *out, const float *q, const void *k,
                                       const void *v, rf_type kv_type, int64_t n_tokens,
                                       const int32_t *pos, const int32_t *seq,
                                       const int32_t *block_table, int64_t max_blocks,
                                       int64_t block_size, int64_t n_head, int64_t n_head_kv,
                                       int64_t head_dim, float scale, int64_t window, float softcap,
                                       int64_t max_pos, const float *sinks, bool decode, int64_t min_keys);

/* Decode attention on the tensor cores (gpu_decode_attention.cu): the rf_gpu_paged_attention
 * contract for the tokens at positions pos[t] >= min_keys - 1 (min_keys >= 1); other rows are
 * not touched (padding rows neither, except with min_keys 1: zeros). Made for one query token per
 * sequence at long depth: the GQA group's query heads (n_head / n_head_kv <= 8) share each K/V
 * tile on mma.sync, the keys of a row are split over up to 32 blocks (splits of
 * max(256, ceil(n / 32) rounded up to 64) keys, fixed by the row's key count n) and
 * merged in split order: batch-invariant bit for bit. q is rounded to f16 and the softmax weights
 * enter P.V in f16 (q8_0: K and V dequantized to f16(d * q), as rf_gpu_flash_prefill): rel. L2 <
 * 1e-3 (q8_0: 2e-3) against rf_ref_paged_attention on the same f16 q and K/V values.
 * Supported: CUDA sm_80+ with the shared memory (106-110 KB a block at head_dim 128), f16 or q8_0
 * cache, head_dim 64 or 128, GQA ratio <= 8. _wanted: supported, and a row of the call can see
 * min_keys keys, and n_tokens x n_head x 32 splits x (head_dim + 2) floats fit 256 MiB (else the
 * paged kernel; independent of max_pos, so a graph step and its eager twin route alike). */
bool rf_gpu_decode_attention_supported(rf_gpu_ctx *ctx, rf_type kv_type, int64_t head_dim, int64_t n_head,
                                       int64_t n_head_kv);
bool rf_gpu_decode_attention_wanted(rf_gpu_ctx *ctx, rf_type kv_type, int64_t n_tokens, int64_t head_dim,
                                    int64_t n_head, int64_t n_head_kv, int64_t window, int64_t pmax,
                                    int64_t min_keys);
rf_status rf_gpu_decode_attention(rf_gpu_ctx *ctx, float *out, const float *q, const void *k, const void *v,
                                  rf_type kv_type, int64_t n_tokens, const int32_t *pos, const int32_t *seq,
                                  const int32_t *block_table, int64_t max_blocks, int64_t block_size,
                                  int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, int64_t window,
                                  float softcap, int64_t max_pos, const float *sinks, int64_t min_keys);

/* The paged-attention contract for heads wider than 256 (gpu_attention_wide.cu; the two calls
 * above send head_dim > 256 here): head_dim a multiple of 64 up to 512, an f16 or q8_0 cache (f32
 * too on CUDA); batch-invariant (its own fixed order of sums, not the bits of the <= 256 kernels);
 * decode: as rf_gpu_paged_attention_hint's, a speed hint only. */
bool rf_gpu_attention_wide_supported(rf_type kv_type, int64_t head_dim);
rf_status rf_gpu_attention_wide(rf_gpu_ctx *ctx, float *out, const float *q, const void *k, const void *v,
                                rf_type kv_type, int64_t n_tokens, const int32_t *pos, const int32_t *seq,
                                const int32_t *block_table, int64_t max_blocks, int64_t block_size, int64_t n_head,
                                int64_t n_head_kv, int64_t head_dim, float scale, int64_t window, float softcap,
                                int64_t max_pos, const float *sinks, bool decode);

/* Flash-attention prefill (gpu_flash_prefill.cu): the n tokens of one sequence at positions
 * pos0..pos0+n-1 against its keys, on the tensor cores; the contract of rf_gpu_paged_attention
 * for those tokens (q f32 [n, n_head, head_dim], out likewise, bt_row the sequence's device
 * block-table row) with the softmax weights rounded to f16 in P.V (rel. L2 < 1e-3 against
 * rf_ref_paged_attention; q8_0 caches: < 2e-3). Supported: CUDA sm_80+; f16 cache with head_dim
 * 64/80/96/128, q8_0 with 64/96/128; both with 256 and 512 where the device gives a block
 * 168 / 150 KB of shared memory (H100/H200; A100: 512 only). */
bool rf_gpu_flash_prefill_supported(rf_gpu_ctx *ctx, rf_type kv_type, int64_t head_dim);
rf_status rf_gpu_flash_prefill(rf_gpu_ctx *ctx, float *out, const float *q, const void *k, const void *v,
                               rf_type kv_type, int64_t n, int64_t pos0, const int32_t *bt_row,
                               int64_t block_size, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                               float scale, int64_t window, float softcap, const float *sinks);

/* ---- sampling --------------------------------------------------------------------------- */
/* u for sequence `seq` at step `step`: splitmix64(seed ^ golden*(step+1) + seq) -> [0,1),
 * computed identically on host and device so tests reproduce the draw. */
float rf_gpu_sample_u(uint64_t seed, uint64_t step, int64_t seq);
/* For each of n_seq rows of device logits [n_seq, n_vocab] picks rf_ref_sample(row, params[s],
 * rf_gpu_sample_u(seed, step, s)) on the device and copies one int32 per sequence to the host
 * array out. params is a host array of n_seq entries. */
rf_status rf_gpu_sample(rf_gpu_ctx *ctx, int32_t *out, const float *logits, int64_t n_seq,
                        int64_t n_vocab, const rf_sample_params *params, uint64_t seed,
                        uint64_t step);

/* One output row's sampling in the engine's device path: rf_sample_params' fields, the draw u
 * in [0, 1) from the sequence's own generator, and its penalties (rf_sampler's rule) over the
 * entries [pen_off, pen_off + pen_n) of the penalty arrays. */
typedef struct rf_gpu_sample_row {
    float temperature, top_p, min_p, u;
    int32_t top_k;
    float repeat_penalty, presence_penalty, frequency_penalty;
    int32_t pen_off, pen_n;
    int32_t mask_ref; /* 0: none; k > 0: row k - 1 of the masks */
} rf_gpu_sample_row;
/* Applies each row's penalties to logits [n_rows, n_vocab] in place (when any_penalty), then
 * (when d_masks is not NULL) sets to -inf every logit its mask (row mask_ref - 1 of d_masks,
 * mask_words words, bit i % 32 of word i / 32: token i allowed) leaves out, then d_out[r] =
 * rf_ref_sample(row r, params, u) on the device. All pointers are device memory; nothing is
 * copied to the host. */
rf_status rf_gpu_sample_rows(rf_gpu_ctx *ctx, int32_t *d_out, float *logits, int64_t n_rows,
                             int64_t n_vocab, const rf_gpu_sample_row *d_rows,
                             const int32_t *d_pen_ids, const int32_t *d_pen_counts,
                             bool any_penalty, const uint32_t *d_masks, int64_t mask_words);

/* ---- measurement (gpu_bench.cu) ------------------------------------------------------ */
/* Device read bandwidth: median of `reps` passes of 16-byte loads over a fresh buffer of
 * `bytes` (use >> L2), in GB/s (1e9 bytes per second). */
rf_status rf_gpu_bench_read_bw(rf_gpu_ctx *ctx, size_t bytes, int reps, double *gbps);
/* Median microseconds per rf_gpu_gemv call (xq: per rf_gpu_gemv_xq call on an x quantized once
 * beforehand; 32-element formats only), weights rotating among matrices totalling at least
 * min_bytes, replayed from a graph; *weight_bytes is one matrix's size. */
rf_status rf_gpu_bench_gemv(rf_gpu_ctx *ctx, rf_type type, int64_t n_tokens, int64_t n_in,
                            int64_t n_out, size_t min_bytes, int reps, bool xq,
                            double *us_per_call, size_t *weight_bytes);
/* Timeline trace of the q32s GEMV kernel (builds with -DRF_GEMV_TRACE=ON; elsewhere both return
 * RF_ERR_UNSUPPORTED): reset restarts the call count; read copies the last max_calls calls (at
 * most 256) as out[call][2048 blocks][4 words]: global timer in ns at the block's start, past
 * its dependency wait and at its end, then SM << 32 | grid size; sets *ncalls and *grid. */
rf_status rf_gpu_trace_reset(rf_gpu_ctx *ctx);
rf_status rf_gpu_trace_read(rf_gpu_ctx *ctx, uint64_t *out, int max_calls, int *ncalls, int *grid);
/* Mean microseconds per rf_gpu_sample_rows call (no penalties) over `reps` back-to-back calls
 * timed with device events (after 10 warm-up calls): every row of logits [n_seq, n_vocab]
 * (device) sampled with *params and u = 0.5. */
rf_status rf_gpu_bench_sample(rf_gpu_ctx *ctx, const float *logits, int64_t n_seq, int64_t n_vocab,
                              const rf_sample_params *params, int reps, double *us_per_call);
/* Median milliseconds per rf_gpu_gemm call (dequantize + BLAS). */
rf_status rf_gpu_bench_gemm(rf_gpu_ctx *ctx, rf_type type, int64_t n_tokens, int64_t n_in,
                            int64_t n_out, int reps, double *ms_per_call);

#ifdef __cplusplus
}
#endif
#endif
