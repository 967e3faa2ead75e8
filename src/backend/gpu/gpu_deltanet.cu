/* gpu_deltanet.cu — the gated DeltaNet kernels (qwen35): the causal conv1d over a sequence's
 * carried window, the gated delta rule (recurrent form over a step's tokens, per-sequence state
 * slots), the sigmoid gate and the head split. Contracts and reduction orders: gpu_deltanet.h;
 * CPU twins: backend/ref/ref_deltanet.h. f32 throughout, state in f32. */
#include "backend/gpu/gpu_deltanet.h"
#include "backend/gpu/gpu_internal.h"

#define RF_DN_THREADS 256
#define RF_DN_WARPS 4 /* warps per block of the delta rule */
#define RF_DN_ROWS 4  /* state rows per warp */

/* The number of tokens of t's sequence before t in this step, counted up to cap. */
static __device__ __forceinline__ int rf_dn_before(const int32_t *seq, int64_t t, int cap) {
    int p = 0;
    while (p < cap && t - p - 1 >= 0 && seq[t - p - 1] == seq[t]) p++;
    return p;
}

/* A sequence's slot row, or NULL where it reads as zeros (its first token at position 0, or a
 * slot outside the state). */
static __device__ __forceinline__ float *rf_dn_slot(float *state, int64_t ld, int64_t n_slots, const int32_t *sslot,
                                                    int32_t s) {
    const int32_t sl = sslot[s];
    return sl >= 0 && sl < n_slots ? state + (int64_t)sl * ld : NULL;
}

/* ---- conv1d ------------------------------------------------------------------------------
 * outputs: grid (n_tokens, ceil(C / 256)), 256 threads; thread (t, c): token t's local index p
 * in its run (counted up to W = K - 1: past that the window lies in x alone), its window rows
 * win[p .. p + W] of [slot (W rows); the run's x rows], y = silu(sum_i win[p + i] w[c, i]). */
__global__ void rf_k_ssm_conv_out(float *y, const float *x, int64_t ldx, const float *w, const float *state,
                                  int64_t ld_state, int64_t n_slots, const int32_t *pos, const int32_t *seq,
                                  const int32_t *sslot, int64_t C, int K) {
    const int64_t t = blockIdx.x, c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (pos[t] < 0) { /* padding */
        y[t * C + c] = 0.0f;
        return;
    }
    const int W = K - 1, p = rf_dn_before(seq, t, W);
    const float *st = NULL;
    if (p < W && pos[t - p] != 0) st = rf_dn_slot((float *)state, ld_state, n_slots, sslot, seq[t]);
    float acc = 0.0f;
    for (int i = 0; i < K; i++) {
        const int r = p + i; /* row of the run's window */
        const float v = r < W ? (st ? st[(int64_t)r * C + c] : 0.0f) : x[(t - W + i) * ldx + c];
        acc += v * w[c * K + i];
    }
    y[t * C + c] = rf_silu(acc);
}

/* new windows: same grid; thread (t, c) acts when t is the last token of its run (n_t tokens,
 * counted up to W + 1): the slot's rows r < W become win[n_t + r], read in increasing r before
 * row r is written (win[n_t + r] is an older slot row n_t + r > r, or an x row). After
 * rf_k_ssm_conv_out on the stream (which reads the old rows). */
__global__ void rf_k_ssm_conv_state(const float *x, int64_t ldx, float *state, int64_t ld_state, int64_t n_slots,
                                    const int32_t *pos, const int32_t *seq, const int32_t *sslot, int64_t n_tokens,
                                    int64_t C, int K) {
    const int64_t t = blockIdx.x, c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
    const int W = K - 1;
    if (c >= C || W == 0 || pos[t] < 0 || (t + 1 < n_tokens && seq[t + 1] == seq[t])) return;
    float *st = rf_dn_slot(state, ld_state, n_slots, sslot, seq[t]);
    if (!st) return;
    const int p = rf_dn_before(seq, t, W), n_t = p + 1; /* n_t > W: the window lies in x alone */
    const bool zero = n_t <= W && pos[t - p] == 0;
    for (int r = 0; r < W; r++) {
        const int s = n_t + r;
        const float v = s < W ? (zero ? 0.0f : st[(int64_t)s * C + c]) : x[(t + 1 + r - W) * ldx + c];
        st[(int64_t)r * C + c] = v;
    }
}

/* ---- gated delta rule ---------------------------------------------------------------------
 * One token's inputs as a warp of the delta rule holds them: lane l's elements l + W e of the
 * key head's q and k, the value of each of its rows j0 + r, the alpha and beta logits. */
template <int E, int R>
struct rf_dn_in {
    float q[E], k[E], v[R], a, b;
};
template <int E, int R>
static __device__ __forceinline__ void rf_dn_load(rf_dn_in<E, R> &in, const float *x, int64_t ldx, const float *a,
                                                  const float *bt, int64_t t, int64_t KS, int kh, int h, int H_v,
                                                  int S, int lane, int j0) {
    const float *xr = x + t * ldx;
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int i = lane + RF_WARP_SIZE * e;
        in.q[e] = i < S ? xr[(int64_t)kh * S + i] : 0.0f;
        in.k[e] = i < S ? xr[KS + (int64_t)kh * S + i] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < R; r++) in.v[r] = j0 + r < S ? xr[2 * KS + (int64_t)h * S + j0 + r] : 0.0f;
    in.a = a[t * H_v + h];
    in.b = bt[t * H_v + h];
}

/* starts[seq[t]] = t for each token t that starts its sequence's run (seq outside [0, n_seqs)
 * ignored); the entries of sequences without tokens stay as the caller set them (-1). */
__global__ void rf_k_run_starts(int32_t *starts, const int32_t *seq, int64_t n_tokens, int64_t n_seqs) {
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= n_tokens || (t > 0 && seq[t - 1] == seq[t])) return;
    const int32_t s = seq[t];
    if (s >= 0 && s < n_seqs) starts[s] = (int32_t)t;
}

/* ---- gated delta rule (kernel) -------------------------------------------------------------
 * grid (n, H_v, ceil(S / (RF_DN_WARPS * RF_DN_ROWS))), RF_DN_WARPS warps. Without starts
 * (decode steps: n = n_tokens), the block of token t0 = x works only when t0 starts its
 * sequence's run (else it returns at once); with starts (prompt chunks, many tokens per
 * sequence: n = n_seqs), block x takes sequence x's run from starts[x] (-1: no tokens). Either
 * way it computes the whole run t0..t1. Lane l of a warp holds elements i = l + W e (e < E) of its RF_DN_ROWS rows
 * j of the head's state M (row j: value index), of q and of k. Per token, as the CPU twin:
 * q, k L2-normalised; M *= exp(g); d_j = beta (v_j - M_j.k); M_j += d_j k; out_j = M_j.q / sqrt(S).
 * S <= E W. The next token's inputs are loaded while the current one is computed (the loop
 * is latency-bound on them in a prompt chunk). */
template <int E>
__global__ void __launch_bounds__(RF_DN_WARPS *RF_WARP_SIZE)
    rf_k_gated_delta(float *out, const float *x, int64_t ldx, const float *a, const float *bt, const float *dt_bias,
                     const float *ssm_a, float *state, int64_t ld_state, int64_t n_slots, const int32_t *pos,
                     const int32_t *seq, const int32_t *sslot, const int32_t *starts, int64_t n_tokens, int H_k,
                     int H_v, int S, float eps) {
    constexpr int WS = RF_WARP_SIZE, R = RF_DN_ROWS;
    const int h = blockIdx.y, kh = h % H_k, lane = threadIdx.x % WS, warp = threadIdx.x / WS;
    const int j0 = (blockIdx.z * RF_DN_WARPS + warp) * R;
    const int64_t t0 = starts ? (int64_t)starts[blockIdx.x] : (int64_t)blockIdx.x;
    if (j0 >= S || t0 < 0 || (!starts && t0 > 0 && seq[t0 - 1] == seq[t0])) return;
    const int64_t od = (int64_t)H_v * S;
    if (pos[t0] < 0) { /* padding: zeros */
        if (lane < R && j0 + lane < S) out[t0 * od + (int64_t)h * S + j0 + lane] = 0.0f;
        return;
    }
    int64_t t1 = t0 + 1;
    while (t1 < n_tokens && seq[t1] == seq[t0]) t1++;
    float *slot = rf_dn_slot(state, ld_state, n_slots, sslot, seq[t0]);
    float *M = slot ? slot + (int64_t)h * S * S : NULL;
    float m[R][E];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int i = lane + WS * e, j = j0 + r;
            m[r][e] = M && pos[t0] != 0 && i < S && j < S ? M[(int64_t)j * S + i] : 0.0f;
        }
    const float scale = 1.0f / sqrtf((float)S);
    const int64_t KS = (int64_t)H_k * S;
    rf_dn_in<E, R> cur, nxt;
    rf_dn_load<E, R>(cur, x, ldx, a, bt, t0, KS, kh, h, H_v, S, lane, j0);
    nxt = cur;
    for (int64_t t = t0; t < t1; t++) {
        if (t + 1 < t1) rf_dn_load<E, R>(nxt, x, ldx, a, bt, t + 1, KS, kh, h, H_v, S, lane, j0);
        float q[E], k[E], sq = 0.0f, sk = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            q[e] = cur.q[e];
            k[e] = cur.k[e];
            sq += q[e] * q[e];
            sk += k[e] * k[e];
        }
        sq = rf_warp_sum(sq);
        sk = rf_warp_sum(sk);
        const float qs = 1.0f / fmaxf(sqrtf(sq), eps), ks = 1.0f / fmaxf(sqrtf(sk), eps);
#pragma unroll
        for (int e = 0; e < E; e++) q[e] *= qs, k[e] *= ks;
        const float ab = cur.a + dt_bias[h];
        const float sp = ab > 20.0f ? ab : logf(1.0f + expf(ab));
        const float decay = expf(sp * ssm_a[h]), beta = 1.0f / (1.0f + expf(-cur.b));
        float mk[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            mk[r] = 0.0f;
#pragma unroll
            for (int e = 0; e < E; e++) {
                m[r][e] *= decay;
                mk[r] += m[r][e] * k[e];
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) mk[r] = rf_warp_sum(mk[r]);
        float o[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float d = (cur.v[r] - mk[r]) * beta;
            o[r] = 0.0f;
#pragma unroll
            for (int e = 0; e < E; e++) {
                m[r][e] += d * k[e];
                o[r] += m[r][e] * q[e];
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            o[r] = rf_warp_sum(o[r]);
            if (lane == r && j0 + r < S) out[t * od + (int64_t)h * S + j0 + r] = o[r] * scale;
        }
        cur = nxt;
    }
    if (!M) return;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int i = lane + WS * e, j = j0 + r;
            if (i < S && j < S) M[(int64_t)j * S + i] = m[r][e];
        }
}

/* ---- elementwise -------------------------------------------------------------------------- */
__global__ void rf_k_sigmoid_mul(float *y, const float *x, const float *g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i] * (1.0f / (1.0f + expf(-g[i])));
}

__global__ void rf_k_head_split(float *y0, float *y1, const float *x, int64_t rows, int64_t n) {
    const int64_t tot = rows * n;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < tot; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / n, i = e % n;
        y0[e] = x[r * 2 * n + i];
        y1[e] = x[r * 2 * n + n + i];
    }
}

/* ---- host entry points -------------------------------------------------------------------- */

extern "C" rf_status rf_gpu_ssm_conv(rf_gpu_ctx *ctx, float *y, const float *x, int64_t ldx, const float *w,
                                     float *state, int64_t ld_state, int64_t n_slots, const int32_t *pos,
                                     const int32_t *seq, const int32_t *sslot, int64_t n_tokens, int64_t C,
                                     int64_t K) {
    RF_GPU_REQUIRE(K >= 1 && K <= 64 && C >= 1 && ldx >= C && n_tokens >= 0 && n_tokens <= INT32_MAX &&
                       ld_state >= (K - 1) * C && n_slots >= 0,
                   "ssm_conv", "kernel %lld over %lld channels (x stride %lld, state rows of %lld)", (long long)K,
                   (long long)C, (long long)ldx, (long long)ld_state);
    if (n_tokens == 0) return RF_OK;
    const dim3 grid((unsigned)n_tokens, (unsigned)((C + RF_DN_THREADS - 1) / RF_DN_THREADS));
    rf_status st = rf_gpu_launch(ctx, "rf_k_ssm_conv_out", false, rf_k_ssm_conv_out, grid, dim3(RF_DN_THREADS), 0, y,
                                 x, ldx, w, (const float *)state, ld_state, n_slots, pos, seq, sslot, C, (int)K);
    if (st || K == 1) return st;
    return rf_gpu_launch(ctx, "rf_k_ssm_conv_state", false, rf_k_ssm_conv_state, grid, dim3(RF_DN_THREADS), 0, x, ldx,
                         state, ld_state, n_slots, pos, seq, sslot, n_tokens, C, (int)K);
}

extern "C" rf_status rf_gpu_gated_delta(rf_gpu_ctx *ctx, float *out, const float *x, int64_t ldx, const float *a,
                                        const float *bt, const float *dt_bias, const float *ssm_a, float *state,
                                        int64_t ld_state, int64_t n_slots, const int32_t *pos, const int32_t *seq,
                                        const int32_t *sslot, int64_t n_seqs, int64_t n_tokens, int64_t H_k,
                                        int64_t H_v, int64_t S, float eps) {
    const int ws = ctx->info.warp_size > 0 ? ctx->info.warp_size : RF_WARP_SIZE;
    RF_GPU_REQUIRE(H_k >= 1 && H_v >= 1 && H_v % H_k == 0 && H_v <= 65535 && S >= 1 && S <= 8 * ws &&
                       ldx >= (2 * H_k + H_v) * S && ld_state >= H_v * S * S && n_tokens >= 0 &&
                       n_tokens <= INT32_MAX && n_slots >= 0 && n_seqs >= 1 && n_seqs <= INT32_MAX,
                   "gated_delta", "%lld key heads, %lld value heads of %lld (at most %d), x stride %lld, state rows "
                   "of %lld", (long long)H_k, (long long)H_v, (long long)S, 8 * ws, (long long)ldx,
                   (long long)ld_state);
    if (n_tokens == 0) return RF_OK;
    /* prompt chunks: a table of where each sequence starts, so the grid runs over sequences
     * (a grid over tokens would launch a block per token, all but the runs' first returning) */
    int32_t *starts = NULL;
    size_t mark = 0;
    rf_status st = RF_OK;
    if (n_tokens > 2 * n_seqs) {
        void *p = NULL;
        if ((st = rf_gpu_tmp(ctx, (size_t)n_seqs * sizeof(int32_t), &p, &mark))) return st;
        starts = (int32_t *)p;
        if (cudaMemsetAsync(starts, 0xFF, (size_t)n_seqs * sizeof(int32_t), ctx->stream) != cudaSuccess) {
            ctx->scratch_used = mark;
            return rf_set_error(RF_ERR_DEVICE, "gated_delta: cudaMemsetAsync failed: %s",
                                cudaGetErrorString(cudaGetLastError()));
        }
        st = rf_gpu_launch(ctx, "rf_k_run_starts", false, rf_k_run_starts, dim3(rf_gpu_blocks(n_tokens, RF_DN_THREADS)),
                           dim3(RF_DN_THREADS), 0, starts, seq, n_tokens, n_seqs);
    }
    const int per_block = RF_DN_WARPS * RF_DN_ROWS;
    const dim3 grid((unsigned)(starts ? n_seqs : n_tokens), (unsigned)H_v, (unsigned)((S + per_block - 1) / per_block));
    const dim3 block((unsigned)(RF_DN_WARPS * ws));
    const int e = (int)((S + ws - 1) / ws);
#define RF_DN_LAUNCH(EE)                                                                                             \
    rf_gpu_launch(ctx, "rf_k_gated_delta", false, rf_k_gated_delta<EE>, grid, block, 0, out, x, ldx, a, bt, dt_bias, \
                  ssm_a, state, ld_state, n_slots, pos, seq, sslot, (const int32_t *)starts, n_tokens, (int)H_k,     \
                  (int)H_v, (int)S, eps)
    if (!st) st = e <= 1 ? RF_DN_LAUNCH(1) : e <= 2 ? RF_DN_LAUNCH(2) : e <= 4 ? RF_DN_LAUNCH(4) : RF_DN_LAUNCH(8);
#undef RF_DN_LAUNCH
    if (starts) ctx->scratch_used = mark;
    return st;
}

extern "C" rf_status rf_gpu_sigmoid_mul(rf_gpu_ctx *ctx, float *y, const float *x, const float *gate, int64_t n) {
    RF_GPU_REQUIRE(n >= 0, "sigmoid_mul", "n = %lld", (long long)n);
    if (n == 0) return RF_OK;
    return rf_gpu_launch(ctx, "rf_k_sigmoid_mul", false, rf_k_sigmoid_mul, dim3(rf_gpu_blocks(n, RF_DN_THREADS)),
                         dim3(RF_DN_THREADS), 0, y, x, gate, n);
}

extern "C" rf_status rf_gpu_head_split(rf_gpu_ctx *ctx, float *y0, float *y1, const float *x, int64_t rows,
                                       int64_t n) {
    RF_GPU_REQUIRE(rows >= 0 && n >= 1, "head_split", "%lld rows of 2 x %lld", (long long)rows, (long long)n);
    if (rows == 0) return RF_OK;
    return rf_gpu_launch(ctx, "rf_k_head_split", false, rf_k_head_split, dim3(rf_gpu_blocks(rows * n, RF_DN_THREADS)),
                         dim3(RF_DN_THREADS), 0, y0, y1, x, rows, n);
}
