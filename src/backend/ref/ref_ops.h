/* ref_ops.h — scalar reference ops: plain, obviously-right C, single-threaded, f32 in and out.
 * They are the oracle of the oracle chain (docs/ARCHITECTURE.md §6): the CPU backend's fast paths and every
 * GPU kernel are tested against these. Each contract here is the contract of the twins. */
#ifndef RF_REF_OPS_H
#define RF_REF_OPS_H

#include "backend/backend.h" /* rf_moe_gating */
#include "rocmforge/core.h"

/* y[r,i] = x[r,i] / sqrt(mean_i(x[r,:]^2) + eps) * w[i]
 * in: x f32 [rows, n], w f32 [n] (NULL = all ones); out: y f32 [rows, n] (may alias x); n >= 1 */
void rf_ref_rmsnorm(float *y, const float *x, const float *w, int64_t rows, int64_t n, float eps);

/* y[r,i] = (x[r,i] - mean) / sqrt(var + eps) * w[i] + b[i]   (var: population variance)
 * w, b may be NULL (ones / zeros); y may alias x; n >= 1 */
void rf_ref_layernorm(float *y, const float *x, const float *w, const float *b, int64_t rows,
                      int64_t n, float eps);

/* Row-wise stable softmax of x*scale: y[r,i] = exp(s*x[r,i] - max) / sum.
 * -inf entries get probability 0; a row of all -inf gives all zeros (not NaN); a NaN anywhere in
 * the row gives NaN for the whole row. y may alias x. */
void rf_ref_softmax(float *y, const float *x, int64_t rows, int64_t n, float scale);

/* y[i] = x[i] * s ;  y[i] = a[i] + b[i] ;  y[i] = a[i] * b[i]   (outputs may alias inputs) */
void rf_ref_scale(float *y, const float *x, float s, int64_t n);
void rf_ref_add(float *y, const float *a, const float *b, int64_t n);
void rf_ref_mul(float *y, const float *a, const float *b, int64_t n);

/* Causal mask in place over scores x [n_q, n_kv]: query row i sits at absolute position
 * pos0 + i; key column j is at position j. x[i,j] = -inf where j > pos0 + i, or (window > 0)
 * where j <= pos0 + i - window (sliding window of `window` positions including itself). */
void rf_ref_causal_mask(float *x, int64_t n_q, int64_t n_kv, int64_t pos0, int64_t window);

/* Activations. silu(x) = x / (1 + exp(-x));
 * gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
float rf_ref_silu(float x);
float rf_ref_gelu_tanh(float x);
/* y[i] = silu(gate[i]) * up[i] ;  y[i] = gelu_tanh(gate[i]) * up[i]   (y may alias either) */
void rf_ref_swiglu(float *y, const float *gate, const float *up, int64_t n);
void rf_ref_geglu(float *y, const float *gate, const float *up, int64_t n);
/* gpt-oss's clamped SwiGLU (RF_GLU_SWIGLU_OAI; llama.cpp's ggml_swiglu_oai with its constants):
 * g = min(gate, 7), u = clamp(up, -7, 7), y = g / (1 + exp(-1.702 g)) * (u + 1) */
#define RF_OAI_SWIGLU_ALPHA 1.702f
#define RF_OAI_SWIGLU_LIMIT 7.0f
void rf_ref_swiglu_oai(float *y, const float *gate, const float *up, int64_t n);

/* RoPE in place. x holds n_tokens x n_heads vectors of head_dim floats; vector (t, h) starts at
 * x + t*stride_t + h*stride_h (elements), so [t,h,d] has stride_t = n_heads*head_dim,
 * stride_h = head_dim and [h,t,d] has stride_t = head_dim, stride_h = n_tokens*head_dim.
 * The first n_rot dims (even, <= head_dim) rotate; the rest pass through.
 * theta_i = pos[t] * freq_scale * base^(-2i/n_rot) / (freq_factors ? freq_factors[i] : 1),
 * for i in [0, n_rot/2).
 * RF_ROPE_NORMAL (llama.cpp mode 0, GPT-J style): pairs (x[2i], x[2i+1]).
 * RF_ROPE_NEOX (HF half-split):                 pairs (x[i], x[i + n_rot/2]).
 * (a, b) -> (a cos - b sin, a sin + b cos). */
enum { RF_ROPE_NORMAL = 0, RF_ROPE_NEOX = 2 };
void rf_ref_rope(float *x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                 int64_t stride_t, int64_t stride_h, const int32_t *pos, float freq_base,
                 float freq_scale, const float *freq_factors, int mode);

/* y[t,o] = sum_i W[o,i] * x[t,i]. W is n_out rows of n_in elements stored as `wtype` (any type
 * with a dequantizer; n_in a multiple of its block size); x f32 [n_tokens, n_in];
 * y f32 [n_tokens, n_out]. Dequantizes row by row and accumulates in double.
 * Returns RF_ERR_INVALID_ARG for an unsupported type or bad n_in. */
rf_status rf_ref_matmul(float *y, const void *w, rf_type wtype, const float *x, int64_t n_tokens,
                        int64_t n_in, int64_t n_out);

/* Embedding lookup: y[t,:] = dequantize(row ids[t] of W), W is n_rows rows of n_in elements.
 * RF_ERR_RANGE if an id is outside [0, n_rows). */
rf_status rf_ref_get_rows(float *y, const void *w, rf_type wtype, const int32_t *ids,
                          int64_t n_ids, int64_t n_in, int64_t n_rows);
/* A shard's part of a lookup split by rows (tensor parallelism): w holds rows [r0, r0 + n_rows)
 * of a table of n_all rows; y[t] = row ids[t] - r0 of w where the id falls there, else zeros.
 * RF_ERR_RANGE for an id outside [0, n_all). */
rf_status rf_ref_get_rows_part(float *y, const void *w, rf_type wtype, const int32_t *ids, int64_t n_ids,
                               int64_t n_in, int64_t r0, int64_t n_rows, int64_t n_all);

/* Attention, grouped-query. q [n_q, n_head, head_dim]; k, v [n_kv, n_head_kv, head_dim]
 * (all f32, row-major); out [n_q, n_head, head_dim]. Query head h reads kv head
 * h / (n_head / n_head_kv) (n_head a multiple of n_head_kv).
 * scores = scale * q.k ; if softcap > 0: scores = softcap * tanh(scores / softcap);
 * if causal: rf_ref_causal_mask(scores, n_q, n_kv, pos0, window); softmax; out = P v.
 * A query whose every key is masked gets zeros. sinks (NULL or f32 [n_head], gpt-oss): head
 * h's softmax also counts a logit sinks[h] with no value row: P_j = exp(s_j - M) /
 * (exp(sinks[h] - M) + sum_i exp(s_i - M)), M the max over the keys and the sink. */
void rf_ref_attention(float *out, const float *q, const float *k, const float *v, int64_t n_q,
                      int64_t n_kv, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                      float scale, bool causal, int64_t pos0, int64_t window, float softcap,
                      const float *sinks);

/* Paged attention (the contract of rf_backend_ops.attention, backend.h): token t of n_tokens,
 * of sequence seq[t] at position pos[t], attends to keys 0..pos[t] (sliding window as in
 * rf_ref_causal_mask) of its sequence, position j read from row
 * block_table[seq[t] * max_blocks + j / block_size] * block_size + j % block_size of the f32
 * caches k, v [rows, n_head_kv * head_dim]. Gathers each token's keys and calls
 * rf_ref_attention with n_q = 1 (sinks as there). RF_ERR_OOM if the gather buffers cannot be allocated. */
rf_status rf_ref_paged_attention(float *out, const float *q, const float *k, const float *v,
                                 int64_t n_tokens, const int32_t *pos, const int32_t *seq,
                                 const int32_t *block_table, int64_t max_blocks, int64_t block_size,
                                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                                 int64_t window, float softcap, const float *sinks);

/* Index of the largest logit (lowest index on ties; NaN entries are never chosen; -1 if
 * all are NaN). */
int32_t rf_ref_argmax(const float *logits, int64_t n);

/* Sampling, shared by the CPU sampler and the GPU sampler's tests so they pick the same token.
 * temperature <= 0 means greedy (argmax). Otherwise, in this order: logits / temperature;
 * top_k (> 0) keeps the k largest; softmax; min_p (> 0) drops p < min_p * p_max; top_p (< 1)
 * keeps the smallest prefix of the descending order whose mass reaches top_p; renormalise;
 * pick the first token (descending probability, ties by lower id) whose cumulative probability
 * exceeds u * total, u in [0, 1) supplied by the caller's seeded generator. */
typedef struct rf_sample_params {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
} rf_sample_params;
int32_t rf_ref_sample(const float *logits, int64_t n, const rf_sample_params *p, float u);
/* The interval [*lo, *hi) of u for which rf_ref_sample(logits, n, p, u) picks id (up to the
 * double rounding of its cumulative sums); false when id is never picked (filtered out, NaN,
 * or not the argmax for temperature <= 0, where the interval is [0, 1)). For tests comparing a
 * sampler whose sums round differently. */
bool rf_ref_sample_interval(const float *logits, int64_t n, const rf_sample_params *p,
                            int32_t id, double *lo, double *hi);

/* ---- mixture of experts (the contracts of rf_backend_ops.moe_route / matmul_id / moe_combine,
 * backend.h; expert weights are n_expert * n_out rows, expert e at rows [e n_out, (e+1) n_out)) */

/* Router: logits f32 [n, n_expert] -> ids [n, k] and wts f32 [n, k]. p = softmax(logits row)
 * (RF_MOE_SOFTMAX), sigmoid(logit) (RF_MOE_SIGMOID), or the logit itself (RF_MOE_SOFTMAX_TOPK);
 * the k largest of p + sel_bias (sel_bias NULL or f32 [n_expert], added only to choose) in
 * descending order, ties to the lower id; wts = their p (RF_MOE_SOFTMAX_TOPK: softmax over the k
 * chosen logits); norm: divided by their sum, the sum clamped below at 6.103515625e-5 (the
 * smallest normal f16, as llama.cpp does, so a row of near-zero sigmoids does not blow up);
 * then times scale. RF_ERR_INVALID_ARG unless 1 <= k <= n_expert and gating is known. */
rf_status rf_ref_moe_route(int32_t *ids, float *wts, const float *logits, const float *sel_bias, int64_t n,
                           int64_t n_expert, int64_t k, rf_moe_gating gating, bool norm, float scale);

/* Indirect product: y[t k + j] = W_e x_r (+ bias[e n_out ..] when bias is not NULL) with
 * e = ids[t k + j], x_r = x[t k + j] (x_per_slot, x [n k, n_in]) or x[t] (x [n, n_in]); W
 * n_expert * n_out rows of n_in elements of wtype; y f32 [n k, n_out]. Double accumulators as
 * rf_ref_matmul. RF_ERR_RANGE for an id outside [0, n_expert). */
rf_status rf_ref_matmul_id(float *y, const void *w, rf_type wtype, int64_t n_in, int64_t n_out, int64_t n_expert,
                           const float *x, bool x_per_slot, const int32_t *ids, const float *bias, int64_t n,
                           int64_t k);

/* y[t] = sum over j = 0..k-1 in order of wts[t k + j] * z[t k + j]: y f32 [n, m], z [n k, m]. */
void rf_ref_moe_combine(float *y, const float *z, const float *wts, int64_t n, int64_t k, int64_t m);

/* The sigmoid-gated shared expert joining the experts' sum (qwen35moe, qwen3next): for t < n,
 * g = sum over i = 0..m-1 in order of w[i] h[t m + i] (f32), y[t] += z[t] / (1 + exp(-g)),
 * i.e. y[t, i] = y[t, i] + z[t, i] * sigmoid(g): y, z, h f32 [n, m], w f32 [m]. */
void rf_ref_moe_shared_gate(float *y, const float *z, const float *h, const float *w, int64_t n, int64_t m);

#endif
