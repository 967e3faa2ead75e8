/* backend.h — the op table the model's forward is written against (docs/ARCHITECTURE.md §4.6): a small set
 * of ops over backend-owned tensors. The CPU backend (src/backend/cpu) implements it; a GPU
 * backend implements the same table, so architecture code never sees CUDA/HIP.
 *
 * Conventions for every op: activations are f32, row-major [rows, n] (ne[0] = n contiguous);
 * a weight of GGUF shape [n_in, n_out] is n_out rows of n_in elements of its own type.
 * Tensors passed to an op belong to the backend (device memory on a GPU). Ops return RF_OK or
 * a status with rf_set_error's message; they never abort. Outputs may alias inputs only where
 * the op says so. */
#ifndef RF_BACKEND_H
#define RF_BACKEND_H

#include "rocmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_backend rf_backend;

/* A backend tensor: up to 2 used dims here (rows of ne[0] elements). `data` is backend memory.
 * `nb1` is the stride between rows in bytes. `owned` says whether free() releases data. */
typedef struct rf_tensor {
    rf_type type;
    int64_t ne[2];
    size_t nb1;
    void *data;
    bool owned;
} rf_tensor;

/* Rows [r0, r0 + n) of t as a view (no copy). */
static inline rf_tensor rf_tensor_rows(const rf_tensor *t, int64_t r0, int64_t n) {
    rf_tensor v = *t;
    v.ne[1] = n;
    v.data = (char *)t->data + (size_t)r0 * t->nb1;
    v.owned = false;
    return v;
}

/* One step's batch (docs/ARCHITECTURE.md §4.3): tokens of one or more sequences, each with its position and
 * KV slot, the block table of every sequence in the step, and which tokens' outputs are wanted.
 * Tokens of one sequence are contiguous and in position order. The arrays are host memory owned
 * by the caller for the duration of the step; a device backend copies them once per step
 * (batch_upload) into `dev`, which its ops then read. Every op that needs positions, slots or
 * block tables takes the batch instead of a scalar, so one sequence decoding one token is just
 * a batch of size one.
 *
 * KV pool layout: each layer's K and V cache is a tensor of n_blocks * block_size rows of
 * n_head_kv * head_dim elements; position j of batch sequence s lives at row
 * block_table[s * max_blocks + j / block_size] * block_size + j % block_size. */
typedef struct rf_batch {
    int32_t n_tokens;
    const int32_t *ids;         /* [n_tokens] token ids */
    const int32_t *pos;         /* [n_tokens] absolute positions in their sequence */
    const int32_t *seq;         /* [n_tokens] index of the token's sequence in [0, n_seqs) */
    const int32_t *slot;        /* [n_tokens] KV row this token's K/V is stored to */
    int32_t n_seqs;
    int32_t max_blocks;         /* row stride of block_table */
    int32_t block_size;         /* rows per KV block */
    const int32_t *block_table; /* [n_seqs, max_blocks] physical block ids */
    const int32_t *state_slot;  /* [n_seqs] each sequence's recurrent-state slot (models with gated
                                 * DeltaNet layers; NULL otherwise): row of the ssm_conv /
                                 * gated_delta state tensors */
    int32_t n_out;
    const int32_t *out_rows;    /* [n_out] increasing token indices whose outputs are wanted */
    int32_t max_pos;            /* > 0: a fixed upper bound of pos (graphs: the last position of
                                 * the step's depth bucket, rf_depth_bucket_keys); else computed */
    /* device sampling (ops.sample), given before the forward so one upload carries it all:
     * a row per output, and the penalty entries the rows point into */
    int32_t n_sample, n_pen;
    const struct rf_sample_row *sample_rows;
    const int32_t *pen_ids, *pen_counts;
    /* grammar masks (structured output) for device sampling: mask_fill not NULL makes a masked
     * step (a recorded graph of one keeps room for a mask per sample row) of n_mask rows of
     * mask_words words, bit i % 32 of word i / 32 set where token i is allowed; a row's mask_ref
     * names its mask. The backend calls mask_fill(mask_user, dst) once in the step to have the
     * n_mask rows written to dst (host memory it owns), before the sampler reads them: a GPU
     * backend, in steps of many rows, from the runtime's host thread while the device runs the
     * forward (the masks are the step's host work; the caller's thread is then inside the
     * step's ops, touching no sampler). A failed fill fails the step. Masks apply after the penalties, before the draw, as
     * rf_sampler does on the host. */
    int32_t n_mask, mask_words;
    rf_status (*mask_fill)(void *user, uint32_t *dst);
    void *mask_user;
    void *dev;                  /* backend copy of the above (NULL on the CPU) */
} rf_batch;

/* A decode step's depth bucket: the smallest power of two of at least RF_DEPTH_BUCKET_MIN keys
 * that holds max_pos + 1 keys. The engine records a graph per bucket (capped at n_ctx; its
 * max_pos is the bucket's last position) and a backend that picks an attention kernel by depth
 * picks it by this bucket, so an eager step and a recorded one of the same rows take the same
 * kernel. Rounding is the same at both ends: a capped bucket (n_ctx) rounds to the pow2 above it.
 * 256: the GPU's paged attention walks rows of fewer than 256 keys in one block a row group
 * (RF_GPU_PA_ONE_BLOCK), which a graph step can only know from its bucket. */
#define RF_DEPTH_BUCKET_MIN 256
static inline int64_t rf_depth_bucket_keys(int64_t max_pos) {
    int64_t keys = RF_DEPTH_BUCKET_MIN;
    while (keys < max_pos + 1) keys *= 2;
    return keys;
}

/* One output row's sampling, for backends that sample on the device (see ops.sample). */
struct rf_sample_row;
typedef struct rf_sample_row {
    float temperature, top_p, min_p, u; /* u: the sequence generator's draw in [0, 1) */
    int32_t top_k;
    float repeat_penalty, presence_penalty, frequency_penalty;
    int32_t pen_off, pen_n;             /* its entries in the penalty arrays */
    int32_t mask_ref;                   /* 0: no grammar mask; k > 0: row k - 1 of the batch's masks */
} rf_sample_row;

typedef enum rf_glu_kind {
    RF_GLU_SWIGLU = 0,    /* y = silu(gate) * up */
    RF_GLU_GEGLU = 1,     /* y = gelu_tanh(gate) * up */
    RF_GLU_SWIGLU_OAI = 2 /* gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7),
                           * y = g * sigmoid(1.702 g) * (u + 1) */
} rf_glu_kind;

/* How a mixture-of-experts router turns its logits into the k chosen experts and their weights
 * (op moe_route). */
typedef enum rf_moe_gating {
    RF_MOE_SOFTMAX = 0,      /* p = softmax over all experts; choose the k largest p (qwen3moe) */
    RF_MOE_SIGMOID = 1,      /* p = sigmoid(logit); choose the k largest p + sel_bias */
    RF_MOE_SOFTMAX_TOPK = 2  /* choose the k largest logits; p = softmax over those k (gpt-oss) */
} rf_moe_gating;

/* What a backend says about itself (op info), so that code outside src/backend/ needs no
 * knowledge of the device: its name, its memory and its counters. */
typedef struct rf_backend_info {
    const char *name;     /* "cpu", or the device's name ("NVIDIA H100 80GB HBM3"); the
                           * backend's storage, valid while it lives */
    int device;           /* the GPU's ordinal; -1 on the CPU */
    /* device memory now (asked with memory true; 0 on the CPU): the device's total, what is
     * free on it, and total - free */
    size_t mem_total, mem_free, mem_used;
    /* host<->device transfers and graph launches so far (0 on the CPU); a step's are the
     * difference of two reads (RF_GPU_STEP_TRACE) */
    int64_t uploads, downloads, launches;
} rf_backend_info;

struct rf_moe_ffn_args; /* op moe_ffn's arguments (below, with rf_moe_ffn) */

typedef struct rf_backend_ops {
    const char *name;

    /* Fills *out (every field; memory only when `memory`, since reading it waits on the
     * driver). A device backend reads its own device's memory whichever device is current on
     * the calling thread, and leaves that thread's current device as it was. It writes nothing
     * of the backend, so another thread (a server's /metrics) may call it while this one steps
     * (the counters are then the stepping thread's latest, read without a lock). */
    rf_status (*info)(rf_backend *be, bool memory, rf_backend_info *out);

    /* ---- memory ---- */
    /* Allocates rows x n elements of `type` (zeroed). RF_ERR_OOM names the size. */
    rf_status (*alloc)(rf_backend *be, rf_type type, int64_t n, int64_t rows, rf_tensor *out);
    void (*free)(rf_backend *be, rf_tensor *t);
    /* Wraps host memory holding a weight (mmapped file). A GPU backend copies it to the device;
     * the CPU backend borrows the pointer. */
    rf_status (*weight)(rf_backend *be, rf_type type, int64_t n, int64_t rows, const void *host,
                        rf_tensor *out);
    /* Optional (NULL: weights stay apart): joins weights of the same type and row width row-wise
     * into one tensor *whole (parts[0]'s rows first), so one product computes them all; each
     * part becomes a view into it (owned false) and keeps working alone. RF_ERR_UNSUPPORTED
     * (nothing changed) where the backend would rather not (types, alignment). */
    rf_status (*weight_join)(rf_backend *be, rf_tensor **parts, int n_parts, rf_tensor *whole);
    /* Copies f32 rows [r0, r0+n) of t to host memory. */
    rf_status (*read_rows)(rf_backend *be, const rf_tensor *t, int64_t r0, int64_t n, float *dst);

    /* ---- compute ---- */
    /* Prepares a step's batch for the ops below (a device backend copies the metadata in one
     * upload and sets b->dev); NULL when the ops read the host arrays directly. */
    rf_status (*batch_upload)(rf_backend *be, rf_batch *b);
    /* y[t,:] = dequantize(row b->ids[t] of w) for t < b->n_tokens; y f32 [n_tokens, w.ne[0]].
     * RF_ERR_RANGE if an id is outside [0, w.ne[1]). */
    rf_status (*get_rows)(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_batch *b);
    /* A shard's part of get_rows over rows split by vocabulary (tensor parallelism: w holds rows
     * [r0, r0 + w.ne[1]) of a table of n_all rows): y[t,:] = dequantize(row b->ids[t] - r0 of w)
     * where the id falls in w's rows, else zeros, so the shards' sum is get_rows of the whole.
     * An id outside [0, n_all): as get_rows (RF_ERR_RANGE; NaNs on a device). */
    rf_status (*get_rows_part)(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_batch *b, int64_t r0,
                               int64_t n_all);
    /* y[t,o] = sum_i w[o,i] x[t,i] for t < n_tokens; x f32 [n_tokens, w.ne[0]],
     * y f32 [n_tokens, w.ne[1]] (no aliasing). Quantized weights may quantize x the way ggml
     * does (Q8_0/Q8_1/Q8_K activations): tolerance vs rf_ref_matmul rel. L2 < 1e-2. */
    rf_status (*matmul)(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x,
                        int64_t n_tokens);
    /* y[r,i] += b[i] for r < rows, b f32 [n] (a bias). */
    rf_status (*add_bias)(rf_backend *be, rf_tensor *y, const rf_tensor *b, int64_t rows, int64_t n);
    /* Optional fusion (NULL: the forward calls matmul, then add_bias): matmul, then y[t,o] += b[o]
     * (b f32 [w.ne[1]]), one f32 add per output as add_bias does; the GPU adds it in the GEMV's
     * store (one launch where two ran). */
    rf_status (*matmul_bias)(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, const rf_tensor *b,
                             int64_t n_tokens);
    /* Optional (NULL: the forward calls matmul): matmul for a y whose only reader is the next
     * rmsnorm_for, as its res (the attention output and the FFN down product, which join the
     * residual stream in the next block's norm), or the next rope_store / norm_rope_store, as the
     * q, k (and v) views of a joined Q/K/V product. The backend may leave y unsummed until that
     * op reads it (the GPU's split-K partial sums, added by that op's kernel in the order its
     * reduce adds them: the same bits). No op in between may read or write y, and that op must
     * come before the next matmul_sum_next. */
    rf_status (*matmul_sum_next)(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, int64_t n_tokens);
    /* rf_ref_rmsnorm over rows x n (w f32 [n] or NULL); y may alias x. */
    rf_status (*rmsnorm)(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w,
                         int64_t rows, int64_t n, float eps);
    /* Optional fusion (NULL: the forward calls add and rmsnorm): with res (not NULL) first
     * x[r,i] += res[r,i] as op add does (the residual add the norm follows; y must not alias x
     * then), then rmsnorm as above, told the weight of the product that reads y next, so the
     * backend may prepare y for it in the same kernel (the GPU quantizes y the way that product
     * takes it). */
    rf_status (*rmsnorm_for)(rf_backend *be, rf_tensor *y, rf_tensor *x, const rf_tensor *res, const rf_tensor *w,
                             int64_t rows, int64_t n, float eps, const rf_tensor *next);
    /* Optional fusion (NULL: the forward calls rmsnorm, add, scale, rmsnorm, scale; gemma4's post-norms with the
     * residual add, the layer scale and the next norm): over rows x n, with o (not NULL) o = rmsnorm(o) * w_o
     * and x = (x + o) * s, both written back (without o, s is 1 and x only read); with y (not NULL) y =
     * rmsnorm(x) * w_y * s_y. y aliases neither x nor o. Each step as the op it replaces computes it. */
    rf_status (*add_norm)(rf_backend *be, rf_tensor *x, rf_tensor *o, const rf_tensor *w_o, float s, rf_tensor *y,
                          const rf_tensor *w_y, float s_y, int64_t rows, int64_t n, float eps);
    /* RoPE in place over x [b->n_tokens, n_heads, head_dim], token t at position b->pos[t]
     * (rf_ref_rope's rule; freq_factors f32 [n_rot/2] or NULL), the rotated dims then
     * multiplied by attn_factor (ggml's attn_factor: cos and sin times it; the n_rot..head_dim
     * pass-through dims are not scaled; 1 = plain RoPE, bit for bit; phi3's longrope gain). */
    rf_status (*rope)(rf_backend *be, rf_tensor *x, const rf_batch *b, int64_t n_heads,
                      int64_t head_dim, int64_t n_rot, float freq_base, float freq_scale,
                      const rf_tensor *freq_factors, int mode, float attn_factor);
    /* Stores f32 row t of src [b->n_tokens, cache.ne[0]] into cache row b->slot[t], converting
     * to the cache's type (f32, f16 or q8_0). RF_ERR_RANGE for a slot outside the cache. */
    rf_status (*kv_store)(rf_backend *be, rf_tensor *cache, const rf_tensor *src, const rf_batch *b);
    /* Optional fusion (NULL: the forward composes rope, rope, kv_store, kv_store): q_out =
     * RoPE of q [b->n_tokens, n_head, head_dim] as op rope computes it (q_out packed; it may be
     * q itself); K cache row b->slot[t] = rope(k[t]) and V cache row b->slot[t] = v[t],
     * converted to the caches' type. q, k, v may be row views with their own strides (nb1: the
     * columns of one joined Q/K/V product); k is left unspecified afterwards. Same errors as
     * rope and kv_store. */
    rf_status (*rope_store)(rf_backend *be, rf_tensor *q_out, rf_tensor *q, rf_tensor *k, const rf_tensor *v,
                            rf_tensor *kc, rf_tensor *vc, const rf_batch *b, int64_t n_head,
                            int64_t n_head_kv, int64_t head_dim, int64_t n_rot, float freq_base,
                            float freq_scale, const rf_tensor *freq_factors, int mode, float attn_factor);
    /* Optional fusion (NULL: the forward calls rmsnorm on q, k (and v), then rope_store, or rope and
     * kv_store): rope_store with the per-head RMSNorms first (qwen3's, gemma3's and gemma4's
     * attn_q_norm / attn_k_norm): each head_dim row of q is rmsnorm(row, q_norm, eps) before its
     * RoPE, each row of k rmsnorm(row, k_norm, eps) (q_norm or k_norm NULL: that one not normed), with
     * v_norm each row of v rmsnorm(row, NULL, eps) before its store (gemma4), as op rmsnorm computes
     * them; k and v are left unspecified afterwards. q, k, v may be row views as rope_store's
     * (the columns of one joined product). Same errors as rope_store. */
    rf_status (*norm_rope_store)(rf_backend *be, rf_tensor *q_out, rf_tensor *q, rf_tensor *k, rf_tensor *v,
                                 rf_tensor *kc, rf_tensor *vc, const rf_batch *b, int64_t n_head, int64_t n_head_kv,
                                 int64_t head_dim, int64_t n_rot, float freq_base, float freq_scale,
                                 const rf_tensor *freq_factors, int mode, float attn_factor, const rf_tensor *q_norm,
                                 const rf_tensor *k_norm, bool v_norm, float eps);
    /* Copies n rows of a cache from row src0 to row dst0 (non-overlapping): copy-on-write of a
     * shared KV block. */
    rf_status (*copy_rows)(rf_backend *be, rf_tensor *t, int64_t dst0, int64_t src0, int64_t n);
    /* Paged causal grouped-query attention: for each token t of the batch, query
     * q[t] f32 [n_head, head_dim] attends to the keys and values of its own sequence
     * b->seq[t] at positions kmin..b->pos[t] (kmin = pos - window + 1 when window > 0, else 0),
     * read through that sequence's block table from the caches k, v (their own type); scores
     * scale * q.k, softcap when > 0, softmax, out[t] f32 [n_head, head_dim] = P v.
     * sinks (NULL: none; else f32 [n_head], gpt-oss's attn_sinks): head h's learned logit
     * sinks[h] joins the softmax's max and denominator once per query and has no value row, so
     * P sums to less than 1. rf_ref_paged_attention is the reference (rf_ref_attention per
     * token). */
    rf_status (*attention)(rf_backend *be, rf_tensor *out, const rf_tensor *q, const rf_tensor *k,
                           const rf_tensor *v, const rf_batch *b, int64_t n_head,
                           int64_t n_head_kv, int64_t head_dim, float scale, int64_t window,
                           float softcap, const rf_tensor *sinks);
    /* y[i,:] = x[b->out_rows[i],:] for i < b->n_out; x, y f32 rows of n (no aliasing). */
    rf_status (*gather_rows)(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_batch *b,
                             int64_t n);
    /* y[i] = act(gate[i]) * up[i] over n elements (y may alias gate or up). */
    rf_status (*glu)(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up,
                     int64_t n, rf_glu_kind kind);
    /* Optional fusion (NULL: the forward calls glu): glu as above over rows of next->ne[0]
     * elements, told the weight of the product that reads y next (as rmsnorm_for). gate and up
     * may be row views with their own stride (nb1: the halves of one joined gate/up product);
     * y is packed. */
    rf_status (*glu_for)(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up,
                         int64_t n, rf_glu_kind kind, const rf_tensor *next);
    /* ---- mixture of experts (docs/ARCHITECTURE.md §4.9); optional: NULL where not built ----
     * Expert weights are GGUF's 3-D [n_in, n_out, n_expert] tensors held as one weight of
     * n_expert * n_out rows: expert e is rows [e * n_out, (e + 1) * n_out). Expert ids are
     * backend tensors of type RF_TYPE_I32, [n tokens, k] (k ids per row), written by
     * moe_route and read by matmul_id on the backend (no host round-trip, so a step with
     * experts stays one graph). */
    /* Router: for each token t < n, logits[t] f32 [n_expert] -> the k chosen experts,
     * ids[t, 0..k) in descending order of the choosing score (ties: the lower id first), and
     * their weights wts[t, 0..k) f32: each chosen expert's p (gating), divided by the sum of
     * the k when norm (that sum clamped below at 6.103515625e-5, llama.cpp's guard), times scale. sel_bias (NULL, or f32 [n_expert]) is added to p only to
     * choose (RF_MOE_SIGMOID), never to the weights. 1 <= k <= n_expert; RF_ERR_INVALID_ARG
     * otherwise. rf_ref_moe_route is the reference. */
    rf_status (*moe_route)(rf_backend *be, rf_tensor *ids, rf_tensor *wts, const rf_tensor *logits,
                           const rf_tensor *sel_bias, int64_t n, int64_t n_expert, int64_t k,
                           rf_moe_gating gating, bool norm, float scale);
    /* Indirect product: for token t < n and slot j < k, with e = ids[t, j],
     * y[t * k + j] = W_e x_r (+ bias[e] when bias is not NULL: f32 [n_expert, n_out]),
     * where x_r = x[t * k + j] when x_per_slot (x has n * k rows: the down product after the
     * GLU), else x[t] (x has n rows). w as above with n_out rows per expert; y f32 [n * k, n_out]
     * (no aliasing). Same tolerance as matmul. RF_ERR_RANGE for an id outside [0, n_expert) is
     * the CPU's; a device backend clamps instead (the ids are its own router's). */
    rf_status (*matmul_id)(rf_backend *be, rf_tensor *y, const rf_tensor *w, int64_t n_out, const rf_tensor *x,
                           bool x_per_slot, const rf_tensor *ids, const rf_tensor *bias, int64_t n, int64_t k);
    /* y[t] = sum_j wts[t, j] * z[t * k + j] over t < n: y f32 [n, m], z f32 [n * k, m],
     * wts f32 [n, k]; the sum runs over j in order 0..k-1 (no aliasing). */
    rf_status (*moe_combine)(rf_backend *be, rf_tensor *y, const rf_tensor *z, const rf_tensor *wts, int64_t n,
                             int64_t k, int64_t m);
    /* Optional decode fusions (NULL: the unfused ops; callers use rf_moe_gate_up /
     * rf_moe_down_sum below, which fall back). matmul_id_glu: y[t * k + j] = glu(kind) of
     * matmul_id(w_gate, x, b_gate) and matmul_id(w_up, x, b_up) (x_per_slot false), as those two
     * calls and glu compute them (same tolerance); u f32 [n * k, n_out] is scratch the op may
     * overwrite. y, u packed (a shard's slice of wider buffers is a packed view). */
    rf_status (*matmul_id_glu)(rf_backend *be, rf_tensor *y, rf_tensor *u, const rf_tensor *w_gate,
                               const rf_tensor *w_up, int64_t n_out, const rf_tensor *x, const rf_tensor *ids,
                               const rf_tensor *b_gate, const rf_tensor *b_up, int64_t n, int64_t k,
                               rf_glu_kind kind);
    /* matmul_id_combine: y [n, n_out] = moe_combine of matmul_id(w, x, bias) with x per slot
     * (x [n * k, n_in]), as those two calls compute it; z f32 [n * k, n_out] is scratch. */
    rf_status (*matmul_id_combine)(rf_backend *be, rf_tensor *y, rf_tensor *z, const rf_tensor *w, int64_t n_out,
                                   const rf_tensor *x, const rf_tensor *ids, const rf_tensor *bias,
                                   const rf_tensor *wts, int64_t n, int64_t k);
    /* Optional (NULL: rf_moe_ffn below runs the ops it stands for): one MoE feed-forward's
     * experts from the router's logits, y [n, a->n_out] = add_bias (a->logits_b, in place),
     * moe_route, matmul_id_glu, matmul_id_combine of rf_moe_ffn_args, as those calls compute it
     * (logits may be left with or without the bias added; g holds the GLU's output, u and z are
     * scratch). */
    rf_status (*moe_ffn)(rf_backend *be, rf_tensor *y, const struct rf_moe_ffn_args *a);
    /* Optional (NULL: no shared-expert models): the shared expert's output z joins the experts'
     * sum y through its sigmoid gate, y[t] += z[t] * sigmoid(w . h[t]) over t < n; y, z f32 [n, m]
     * packed, h f32 rows of m (stride h->nb1), w f32 [m] (no aliasing). The gate's dot product
     * is a sum of m products (a device may sum in another order: rel. 1e-6 of sum |w h|).
     * rf_ref_moe_shared_gate is the twin. */
    rf_status (*moe_shared_gate)(rf_backend *be, rf_tensor *y, const rf_tensor *z, const rf_tensor *h,
                                 const rf_tensor *w, int64_t n, int64_t m);
    /* ---- gated DeltaNet (qwen35, qwen3next; docs/ARCHITECTURE.md §4.9); optional: NULL where
     * not built. The references are in backend/ref/ref_deltanet.h. A sequence's state lives in
     * row b->state_slot[s] of a state tensor (f32, one row per slot); the ops read a slot as
     * zeros when the sequence's first token in the batch is at position 0 (a new or recomputed
     * sequence), so a slot never needs clearing. Tokens of one sequence are contiguous. ---- */
    /* Causal depthwise conv1d with its carried window, then SiLU: for sequence s with tokens
     * t0..t1, win = [K-1 rows of state slot; x[t0..t1]] (rows of C), y[t, c] = silu(sum_{i<K}
     * win[t - t0 + i, c] w[c, i]); the slot keeps the last K-1 rows of win. x f32 rows of C with
     * its own stride (x->nb1: a column slice of a joined product), w f32 [C rows of K], state
     * rows of (K-1)*C f32 (time-major), y f32 [n_tokens, C] packed (no aliasing). Sums in
     * order i = 0..K-1 (ggml's ssm_conv). rf_ref_conv1d_batch is the twin; rel. L2 < 1e-5. */
    rf_status (*ssm_conv)(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w, rf_tensor *state,
                          const rf_batch *b, int64_t C, int64_t K);
    /* The gated delta rule over the batch: row t of x (stride x->nb1) = [q (H_k heads of S),
     * k (H_k heads), v (H_v heads)]; a, bt f32 [n_tokens, H_v] (the alpha and beta products);
     * dt_bias, ssm_a f32 [H_v]. Per token and value head h (key head h % H_k):
     * q, k L2-normalised (eps), g = softplus(a + dt_bias[h]) * ssm_a[h], beta = sigmoid(bt);
     * M = exp(g) M; d = beta (v - M k); M += d k^T; out[t, h] = M q / sqrt(S), M the head's
     * S x S state (row j: value index) in the sequence's slot of state (rows of H_v*S*S f32).
     * out f32 [n_tokens, H_v*S] packed. Recurrent form per token, threaded over (sequence, head)
     * pairs: batch-invariant. rf_ref_gated_delta_batch is the twin; rel. L2 < 1e-5. */
    rf_status (*gated_delta)(rf_backend *be, rf_tensor *out, const rf_tensor *x, const rf_tensor *a,
                             const rf_tensor *bt, const rf_tensor *dt_bias, const rf_tensor *ssm_a, rf_tensor *state,
                             const rf_batch *b, int64_t H_k, int64_t H_v, int64_t S, float eps);
    /* y[i] = x[i] * sigmoid(gate[i]) over n elements (qwen35's gated attention output); y may
     * alias x. Twin rf_ref_sigmoid_mul. */
    rf_status (*sigmoid_mul)(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *gate, int64_t n);
    /* Splits rows of 2n into their halves: y0[r] = x[r, 0..n), y1[r] = x[r, n..2n) for r < rows
     * (qwen35's joined per-head query and gate); x, y0, y1 f32 packed, no aliasing. */
    rf_status (*head_split)(rf_backend *be, rf_tensor *y0, rf_tensor *y1, const rf_tensor *x, int64_t rows, int64_t n);

    /* y[i] = a[i] + b[i] over n elements (y may alias a or b). */
    rf_status (*add)(rf_backend *be, rf_tensor *y, const rf_tensor *a, const rf_tensor *b, int64_t n);
    /* x[i] *= s over n elements. */
    rf_status (*scale)(rf_backend *be, rf_tensor *x, float s, int64_t n);
    /* y[i] = cap * tanh(x[i] / cap) in place over n elements. */
    rf_status (*softcap)(rf_backend *be, rf_tensor *x, float cap, int64_t n);

    /* Optional (NULL: the engine samples on the host): one token per row of the logits the last
     * forward left on the backend (rf_forward with logits_out NULL), with the sampling rows of
     * that forward's batch (b->sample_rows: row i's penalties over pen_ids/pen_counts
     * [pen_off, pen_off + pen_n), distinct ids, rf_sampler's rule; then rf_ref_sample's draw
     * with u). Only the ids come back: ids_out host [b->n_sample]. */
    rf_status (*sample)(rf_backend *be, const rf_tensor *logits, const rf_batch *b, int32_t *ids_out);

    /* Optional (device backends): decode steps as graphs. Called before a step whose shapes are
     * fixed by `key` (the padded batch size; block-table stride and max_pos fixed by the caller)
     * for the buffers of `owner` (the forward's state). Returns RF_GRAPH_NONE: run eagerly;
     * RF_GRAPH_CAPTURE: run eagerly, the backend records the forward and the sample into a
     * graph that the sample op then launches; RF_GRAPH_REPLAY: skip the forward, call
     * batch_upload and sample only: they fill the pinned buffers and sample launches the
     * recorded graph. graph_abort ends a capture after a failed step. */
    int (*graph_begin)(rf_backend *be, const void *owner, int key);
    void (*graph_abort)(rf_backend *be);

    /* Optional: batch-invariant mode on or off. On, a token's results must not depend on which
     * other tokens share its step (every reduction in an order fixed by the token alone). A
     * backend whose kernels always are (the CPU's) leaves it NULL. A product that has no such
     * kernel then fails with RF_ERR_UNSUPPORTED naming the weight type. */
    rf_status (*set_batch_invariant)(rf_backend *be, bool on);

    void (*destroy)(rf_backend *be);
} rf_backend_ops;

enum { RF_GRAPH_NONE = 0, RF_GRAPH_CAPTURE = 1, RF_GRAPH_REPLAY = 2 };

struct rf_backend {
    const rf_backend_ops *ops;
    void *impl;
};

/* The MoE feed-forward's products through a backend (backend_moe.c): its fused op where it has
 * one (matmul_id_glu / matmul_id_combine), else the unfused calls it stands for (matmul_id
 * twice and glu into y, the up product in u; matmul_id into z and moe_combine), so a backend
 * without the fusion (the CPU oracle) computes exactly what it did before. */
rf_status rf_moe_gate_up(rf_backend *be, rf_tensor *y, rf_tensor *u, const rf_tensor *w_gate, const rf_tensor *w_up,
                         int64_t n_out, const rf_tensor *x, const rf_tensor *ids, const rf_tensor *b_gate,
                         const rf_tensor *b_up, int64_t n, int64_t k, rf_glu_kind kind);
rf_status rf_moe_down_sum(rf_backend *be, rf_tensor *y, rf_tensor *z, const rf_tensor *w, int64_t n_out,
                          const rf_tensor *x, const rf_tensor *ids, const rf_tensor *bias, const rf_tensor *wts,
                          int64_t n, int64_t k);
/* One MoE feed-forward's experts, from the router's logits to the weighted sum (op moe_ffn). */
typedef struct rf_moe_ffn_args {
    rf_tensor *logits;                       /* f32 [n, n_expert]: the router's product W h */
    const rf_tensor *logits_b, *sel_bias;    /* NULL or f32 [n_expert]: router bias; moe_route's */
    rf_moe_gating gating;
    bool norm;
    float scale;
    rf_tensor *ids, *wts;                    /* out: moe_route's */
    const rf_tensor *x;                      /* h f32 [n, n_in] */
    const rf_tensor *w_gate, *w_up, *w_down; /* experts: [n_in, n_ff], [n_in, n_ff], [n_ff, n_out] each */
    const rf_tensor *b_gate, *b_up, *b_down; /* NULL or f32 [n_expert, n_ff / n_out] */
    rf_tensor *g, *u, *z;                    /* [n k, n_ff] (g: the GLU's output), [n k, n_ff], [n k, n_out] */
    int64_t n, k, n_expert, n_ff, n_out;
    rf_glu_kind glu;
} rf_moe_ffn_args;
/* op moe_ffn where the backend has it, else add_bias, moe_route, rf_moe_gate_up, rf_moe_down_sum */
rf_status rf_moe_ffn(rf_backend *be, rf_tensor *y, const rf_moe_ffn_args *a);

/* The CPU backend with n_threads workers (0 = number of cores). */
rf_status rf_backend_cpu_new(int n_threads, rf_backend **out);
int rf_backend_cpu_n_threads(const rf_backend *be);
/* Changes the worker count (>= 1). */
rf_status rf_backend_cpu_set_threads(rf_backend *be, int n_threads);

/* Number of online CPU cores (>= 1). */
int rf_cpu_count(void);

/* True for a backend whose tensors live in device memory (the GPU backend). */
static inline bool rf_backend_on_device(const rf_backend *be) { return be->ops->batch_upload != NULL; }

/* ---- GPU entry points: declared in every build; a build without the GPU backend has stubs
 * (backend_nogpu.c) that report RF_ERR_UNSUPPORTED, 0 devices, or do nothing ---- */
/* True when this build holds the GPU backend. */
bool rf_gpu_built(void);
/* The GPU backend on device `device` (backend/gpu/gpu_backend.c): RF_ERR_DEVICE when there is no
 * GPU or it cannot be opened. */
rf_status rf_backend_gpu_new(int device, rf_backend **out);
/* Devices the runtime sees (0 without a driver). */
int rf_gpu_device_count(void);
/* The device's read bandwidth in GB/s (the bench's roof; a buffer of 1 GiB, 4 GiB on a device
 * of more than 8 GiB) and its name into name[cap], on a context of its own. */
rf_status rf_gpu_probe_read_bw(int device, char *name, size_t cap, double *gbps);

/* Tensor parallelism over several GPUs (gpu_tp.cu, docs/tp.md): one host thread issues every
 * GPU's work, so each GPU's ops follow rf_backend_gpu_use (its device made current). */
rf_status rf_backend_gpu_use(rf_backend *be);
/* After a step recorded (graph_begin's RF_GRAPH_CAPTURE) or replayed on a GPU that does not
 * sample: ends the recording and launches it, or launches the recorded step (gpu_backend.c). */
rf_status rf_backend_gpu_graph_run(rf_backend *be);
/* Makes be a follower of lead (both GPU backends of one split; lead NULL: on its own again): its
 * decode steps are recorded into lead's graph, one graph over every GPU launched by lead's
 * sample. Drops be's recorded steps. */
void rf_backend_gpu_set_lead(rf_backend *be, rf_backend *lead);
/* Ends a recording in progress and destroys every recorded step (before a split's communicator
 * goes: graphs with NCCL kernels hold it). */
void rf_backend_gpu_drop_graphs(rf_backend *be);
/* Waits for the backend's last batch copy, before graph_begin (gpu_backend.c). */
rf_status rf_backend_gpu_settle(rf_backend *be);
/* RF_ERR_DEVICE naming the first pair of GPUs without peer access. */
rf_status rf_tp_peer_check(rf_backend *const *bes, int n);
/* The communicator over n GPU backends (rank r = bes[r]), created once: NCCL; RF_ERR_UNSUPPORTED
 * naming libnccl.so.2 where NCCL is missing, RF_ERR_DEVICE with NCCL's message where its init
 * fails. The collectives are in place over f32 tensors bufs[r] on rank r's GPU, enqueued on each
 * backend's stream as one NCCL group: a sum all-reduce, and a broadcast from rank 0. All-reduces
 * of up to p2p_max floats go through the peer-to-peer kernels instead (gpu_tp_p2p.h) where
 * RF_TP_ALLREDUCE and the GPUs allow (RF_TP_ALLREDUCE=p2p where they do not: the error says why). */
typedef struct rf_tp_comm rf_tp_comm;
#define RF_TP_P2P_MAX_TOKENS 256 /* the peer-to-peer all-reduce takes steps of up to this many tokens */
rf_status rf_tp_comm_new(rf_backend *const *bes, int n, size_t p2p_max, rf_tp_comm **out);
rf_status rf_tp_comm_allreduce(rf_tp_comm *t, rf_tensor *const *bufs, size_t n);
rf_status rf_tp_comm_broadcast(rf_tp_comm *t, rf_tensor *const *bufs, size_t n);
/* Whether rf_tp_comm_add_rmsnorm takes a step of rows x n (the peer-to-peer kernels are in use
 * and their fused norm takes the shape): the same answer for every rank. */
bool rf_tp_comm_norm_takes(const rf_tp_comm *t, int64_t rows, int64_t n);
/* Rank r's share of the all-reduce of part (each rank's partial product, left as it was) joined
 * to the residual stream and normed for next's product: x = x + the sum, y = rmsnorm(x) * w, as
 * rmsnorm_for with res = the sum (its bits), in one kernel on be's GPU (be = rank r's backend).
 * Every rank makes the call, in rank order, where rf_tp_comm_norm_takes said yes; it fails as
 * the all-reduce does once the split was aborted. */
rf_status rf_tp_comm_add_rmsnorm(rf_tp_comm *t, int rank, rf_backend *be, rf_tensor *y, rf_tensor *x,
                                 const rf_tensor *part, const rf_tensor *w, int64_t rows, int64_t n, float eps,
                                 const rf_tensor *next);
void rf_tp_comm_free(rf_tp_comm *t);
/* True once a wait on the split timed out (RF_TP_TIMEOUT_MS) or NCCL reported an error: the
 * communicators were aborted (every backend's recorded steps dropped first) and every later
 * collective fails with the reason (gpu_nccl.h). */
bool rf_tp_comm_aborted(const rf_tp_comm *t);
/* The LM head's vocabulary slices gathered into GPU 0's logits (gpu_tp_gather.cu, docs/tp.md):
 * created once per split over n GPU backends (peer access enabled from each GPU to GPU 0 where
 * the GPUs allow it). rf_tp_gather_cols copies rows x width f32 of src (GPU s's, rows of width)
 * into dst (GPU 0's, rows of dst->ne[0]) at column col0: on GPU s's stream after GPU 0's work so
 * far, and GPU 0's stream waits for it (events: capturable into the split's one graph); s = 0
 * is a copy on GPU 0's own stream. */
typedef struct rf_tp_gather rf_tp_gather;
rf_status rf_tp_gather_new(rf_backend *const *bes, int n, rf_tp_gather **out);
rf_status rf_tp_gather_cols(rf_tp_gather *g, int s, rf_tensor *dst, int64_t col0, const rf_tensor *src, int64_t rows,
                            int64_t width);
void rf_tp_gather_free(rf_tp_gather *g);

#ifdef RF_HAVE_GPU
/* Device-only helpers for the GPU backend's own files and the GPU tests. */
struct rf_gpu_ctx *rf_backend_gpu_ctx(rf_backend *be);
/* Waits for the device; a fault is reported as RF_ERR_DEVICE naming the last kernel. */
rf_status rf_backend_gpu_sync(rf_backend *be);
/* Holds the device's stream for about `us` microseconds, so the host runs ahead of the device
 * (tests of what the host may reuse while work is still queued). */
rf_status rf_backend_gpu_stall(rf_backend *be, unsigned us);
/* Free and total device memory now (as op info's memory). */
rf_status rf_backend_gpu_mem(rf_backend *be, size_t *free_bytes, size_t *total_bytes);
/* The device's name (as op info's name). */
const char *rf_backend_gpu_name(rf_backend *be);
/* Host<->device transfers and graph launches so far (as op info's counters). */
void rf_backend_gpu_counters(rf_backend *be, int64_t *uploads, int64_t *downloads, int64_t *launches);
/* Products whose split-K sums were left to the next norm (matmul_sum_next) so far. */
int64_t rf_backend_gpu_parts_kept(rf_backend *be);
/* The device's ordinal (as op info's device). */
int rf_backend_gpu_device(rf_backend *be);
#endif

#ifdef __cplusplus
}
#endif

#endif
