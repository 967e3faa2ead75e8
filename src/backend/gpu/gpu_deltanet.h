/* gpu_deltanet.h — the gated DeltaNet mixer on the GPU (qwen35): the C entry points of the
 * kernels in gpu_deltanet.cu, the backend ops over them (gpu_backend_deltanet.c), and the two
 * accessors gpu_backend.c lends those ops (its context and a step's device metadata). */
#ifndef RF_GPU_DELTANET_H
#define RF_GPU_DELTANET_H

#include "backend/backend.h"
#include "backend/gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernels (gpu_deltanet.cu); all pointers device memory --------------------------------
 * A step's tokens carry pos[t], seq[t] (device arrays of the batch upload); the tokens of one
 * sequence are contiguous, and sequence s's state is row sslot[s] of the state tensor (row
 * stride ld_state floats, n_slots rows). A sequence whose first token here is at position 0
 * reads its slot as zeros; a token with pos < 0 is padding (a graph bucket's): its output row
 * is zeros and its (stale) slot is neither read nor written; a slot outside [0, n_slots) reads
 * as zeros and is not written. The runs of a sequence are found on the device, so the launch
 * shapes depend on n_tokens only (graph capture: no host sync, no allocation). */

/* rf_backend_ops.ssm_conv (twin rf_ref_conv1d_batch, then SiLU): y f32 [n_tokens, C] packed,
 * x rows of C at stride ldx floats, w f32 [C, K], state rows of (K-1)*C (time-major). Two
 * kernels: the outputs (every token at once, each reading its window from x and the old
 * slot), then the slots' new windows. Sums over the K taps in order i = 0..K-1 (ggml's),
 * one thread per output: batch-invariant and chunk-invariant bit for bit. 1 <= K <= 64. */
rf_status rf_gpu_ssm_conv(rf_gpu_ctx *ctx, float *y, const float *x, int64_t ldx, const float *w, float *state,
                          int64_t ld_state, int64_t n_slots, const int32_t *pos, const int32_t *seq,
                          const int32_t *sslot, int64_t n_tokens, int64_t C, int64_t K);

/* rf_backend_ops.gated_delta (twin rf_ref_gated_delta_batch): recurrent form, one warp per
 * (sequence, value head, 4 rows of the head's S x S state), the rows held in registers over
 * the sequence's tokens of the step (a prompt chunk is a loop inside the kernel). x rows at
 * stride ldx floats; a, bt f32 [n_tokens, H_v]; dt_bias, ssm_a f32 [H_v]; state rows of
 * H_v*S*S; out f32 [n_tokens, H_v*S]; seq values in [0, n_seqs). S <= 8 x the warp size (256
 * on CUDA). A step of more than 2 tokens per sequence (prompt chunks) first tabulates where each
 * sequence starts, in the scratch arena (sized by an eager step before any graph records one). Every dot product
 * (the q and k norms, M k, M q) is a lane's strided partial sum (elements lane, lane + W, ...)
 * then the warp's butterfly: an order fixed by S and the warp size alone, so a token's outputs
 * and its sequence's state are the same bits whatever else shares the step and however its
 * prompt was chunked (the state is kept in f32 between tokens, in registers or in the slot). */
rf_status rf_gpu_gated_delta(rf_gpu_ctx *ctx, float *out, const float *x, int64_t ldx, const float *a,
                             const float *bt, const float *dt_bias, const float *ssm_a, float *state,
                             int64_t ld_state, int64_t n_slots, const int32_t *pos, const int32_t *seq,
                             const int32_t *sslot, int64_t n_seqs, int64_t n_tokens, int64_t H_k, int64_t H_v,
                             int64_t S, float eps);

/* y[i] = x[i] * sigmoid(gate[i]) over n (y may alias x); twin rf_ref_sigmoid_mul. */
rf_status rf_gpu_sigmoid_mul(rf_gpu_ctx *ctx, float *y, const float *x, const float *gate, int64_t n);
/* y0[r] = x[r, 0..n), y1[r] = x[r, n..2n) for r < rows; packed, no aliasing. */
rf_status rf_gpu_head_split(rf_gpu_ctx *ctx, float *y0, float *y1, const float *x, int64_t rows, int64_t n);

/* ---- the backend ops (gpu_backend_deltanet.c): backend.h's contracts ---------------------- */
rf_status rf_gpu_op_ssm_conv(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w, rf_tensor *state,
                             const rf_batch *b, int64_t C, int64_t K);
rf_status rf_gpu_op_gated_delta(rf_backend *be, rf_tensor *out, const rf_tensor *x, const rf_tensor *a,
                                const rf_tensor *bt, const rf_tensor *dt_bias, const rf_tensor *ssm_a,
                                rf_tensor *state, const rf_batch *b, int64_t H_k, int64_t H_v, int64_t S, float eps);
rf_status rf_gpu_op_sigmoid_mul(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *gate, int64_t n);
rf_status rf_gpu_op_head_split(rf_backend *be, rf_tensor *y0, rf_tensor *y1, const rf_tensor *x, int64_t rows,
                               int64_t n);

/* ---- lent by gpu_backend.c to the op files beside it -------------------------------------- */
/* The backend's context, for an op that is not a product (a quantized x shared between
 * products is stale afterwards: the op may write it). */
rf_gpu_ctx *rf_gpu_be_op_ctx(rf_backend *be);
/* The step's device copies of pos, seq and state_slot (NULL when the batch has none);
 * RF_ERR_INVALID_ARG naming op when the batch was not uploaded. */
rf_status rf_gpu_be_batch_dev(const rf_batch *b, const char *op, const int32_t **pos, const int32_t **seq,
                              const int32_t **state_slot);

#ifdef __cplusplus
}
#endif
#endif
