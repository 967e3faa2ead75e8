/* ref_deltanet.h — scalar references of the gated DeltaNet mixer (qwen35, qwen3next): the causal
 * conv1d with a carried window, the gated delta rule in its recurrent and its chunked form, the
 * sigmoid output gate, and the whole mixer-core op over a step's batch with per-sequence state
 * slots (the contracts of rf_backend_ops.ssm_conv and .gated_delta, backend.h). Plain loops,
 * double accumulators, single-threaded: the oracle of the CPU and GPU twins. */
#ifndef RF_REF_DELTANET_H
#define RF_REF_DELTANET_H

#include "rocmforge/core.h"

/* softplus(x) = log(1 + exp(x)), and x itself past 20 (ggml's threshold, where the two agree to
 * f32 rounding); sigmoid(x) = 1 / (1 + exp(-x)). */
float rf_ref_softplus(float x);
float rf_ref_sigmoid(float x);

/* y[r,i] = x[r,i] / max(sqrt(sum_i x[r,i]^2), eps) over rows x n; y may alias x. */
void rf_ref_l2norm(float *y, const float *x, int64_t rows, int64_t n, float eps);

/* y[i] = x[i] * sigmoid(gate[i]) over n (qwen35's gated attention output); y may alias x. */
void rf_ref_sigmoid_mul(float *y, const float *x, const float *gate, int64_t n);

/* Causal depthwise conv1d of one sequence's n_t new rows with its carried window (the short
 * convolution before a DeltaNet layer). x f32 [n_t, C] with row stride ldx (elements); w f32
 * [C, K] (GGUF ssm_conv1d: channel c's K taps, oldest first); state f32 [K-1, C], time-major: the
 * K-1 input rows before x (zeros at a sequence's start). The window is win = [state; x]
 * ([K-1+n_t, C]); y[t,c] = sum_{i<K} win[t+i,c] * w[c,i], then silu(y) when silu. Afterwards
 * state = the last K-1 rows of win (so a prompt fed in pieces equals one piece). y f32 [n_t, C]
 * packed, must not alias x or state. K >= 1; n_t >= 0. */
void rf_ref_conv1d_state(float *y, const float *x, int64_t ldx, const float *w, float *state, int64_t n_t,
                         int64_t C, int64_t K, bool silu);

/* The gated delta rule over one sequence's n_t tokens, recurrent form (one token at a time).
 * Per value head h < H_v, with key head kh = h % H_k (llama.cpp's broadcast of key heads), and
 * the head's state M_h f32 [S, S] (row j: value index, column i: key index; M = S^T in the
 * usual notation where S maps keys to values):
 *   M_h = exp(g[t,h]) M_h;  d = beta[t,h] (v[t,h] - M_h k[t,kh]);  M_h += d k[t,kh]^T;
 *   out[t,h] = scale * M_h q[t,kh].
 * q, k [n_t, H_k, S] with row stride ldqk, v [n_t, H_v, S] with row stride ldv (elements:
 * row t of q starts at q + t*ldqk); g, beta [n_t, H_v] packed (g the log-decay, beta in use
 * as given); state [H_v, S, S] in/out; out [n_t, H_v, S] packed. q, k are used as given (the
 * caller normalises them). */
void rf_ref_gated_delta(float *out, const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv,
                        const float *g, const float *beta, float *state, int64_t n_t, int64_t H_k, int64_t H_v,
                        int64_t S, float scale);

/* The same rule in chunked form: tokens in chunks of `chunk` (>= 1), each chunk at once from the
 * state at its start (per head, G_t = cumulative sum of g over the chunk up to t):
 *   U = (I + A)^-1 B (V - diag(e^G) K M0^T),  A[t,s] = B_t e^{G_t - G_s} k_t.k_s for s < t,
 *   out_t = scale (e^{G_t} M0 q_t + sum_{s<=t} e^{G_t - G_s} (k_s.q_t) u_s),
 *   M_end = e^{G_last} M0 + sum_s e^{G_last - G_s} u_s k_s^T,
 * the triangular system solved by forward substitution. Algebraically equal to
 * rf_ref_gated_delta; the state is rounded to f32 once per chunk instead of once per token
 * (the test's tolerance says how far apart that lets them be). RF_ERR_OOM if the chunk's
 * scratch cannot be allocated. */
rf_status rf_ref_gated_delta_chunked(float *out, const float *q, const float *k, int64_t ldqk, const float *v,
                                     int64_t ldv, const float *g, const float *beta, float *state, int64_t n_t,
                                     int64_t H_k, int64_t H_v, int64_t S, float scale, int64_t chunk);

/* The DeltaNet mixer core over a step's batch (the contract of rf_backend_ops.gated_delta): the
 * tokens of sequence s are contiguous (seq[t] = s), their state is row slot[s] of `state`
 * (rows of H_v*S*S f32), read as zeros when the sequence's first token here is at position 0.
 * Row t of x (row stride ldx) holds the conv output [q heads (H_k*S), k heads (H_k*S), v heads
 * (H_v*S)]; per token and value head: q, k = l2norm(., eps), scale 1/sqrt(S),
 * beta = sigmoid(b[t,h]), g = softplus(a[t,h] + dt_bias[h]) * ssm_a[h]; then
 * rf_ref_gated_delta. out f32 [n_tokens, H_v*S]. RF_ERR_OOM for scratch. */
rf_status rf_ref_gated_delta_batch(float *out, const float *x, int64_t ldx, const float *a, const float *b,
                                   const float *dt_bias, const float *ssm_a, float *state, int64_t n_tokens,
                                   const int32_t *pos, const int32_t *seq, const int32_t *slot, int64_t H_k,
                                   int64_t H_v, int64_t S, float eps);

/* The conv over a step's batch (the contract of rf_backend_ops.ssm_conv): sequence s's tokens
 * (contiguous) through rf_ref_conv1d_state with its window, row slot[s] of `state` (rows of
 * (K-1)*C f32), read as zeros when its first token here is at position 0. */
void rf_ref_conv1d_batch(float *y, const float *x, int64_t ldx, const float *w, float *state, int64_t n_tokens,
                         const int32_t *pos, const int32_t *seq, const int32_t *slot, int64_t C, int64_t K,
                         bool silu);

#endif
