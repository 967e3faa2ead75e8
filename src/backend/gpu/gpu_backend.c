/* gpu_backend.c — the GPU backend: backend.h's op table over the kernel library (gpu.h), so the
 * one forward (model/forward.c) runs on CUDA/HIP unchanged. Weights are uploaded once, the KV
 * pool and activations are device allocations, and a step's batch metadata goes up in one
 * pinned copy (batch_upload) that every op then reads on the device. This file: the op table,
 * memory, the plain ops, info; gpu_backend_step.c the upload, sampling and graphs;
 * gpu_backend_products.c the products; gpu_be.h the state they share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "backend/backend_common.h"
#include "backend/gpu/gpu_be.h"
#include "backend/gpu/gpu_deltanet.h"
#include "backend/gpu/gpu_route.h"
#include "rocmforge/quant.h"

static rf_status row_bytes(rf_type type, int64_t n, size_t *out) {
    if (type == RF_TYPE_F32) { *out = (size_t)n * 4; return RF_OK; }
    if (type == RF_TYPE_F16 || type == RF_TYPE_BF16) { *out = (size_t)n * 2; return RF_OK; }
    return rf_row_size(type, n, out);
}

rf_status rf_gbe_alloc(rf_backend *be, rf_type type, int64_t n, int64_t rows, rf_tensor *out) {
    memset(out, 0, sizeof *out);
    size_t rb;
    rf_status st = row_bytes(type, n, &rb);
    if (st) return st;
    uint64_t total;
    if (rf_mul_overflow_u64(rb, (uint64_t)rows, &total) || total > SIZE_MAX / 2)
        return rf_set_error(RF_ERR_RANGE, "tensor of %lld x %lld elements is too large", (long long)rows, (long long)n);
    void *p = NULL;
    if ((st = rf_gpu_alloc(GX(be)->ctx, total ? (size_t)total : 64, &p))) return st;
    if ((st = rf_gpu_memset(GX(be)->ctx, p, 0, total ? (size_t)total : 64))) {
        rf_gpu_free(GX(be)->ctx, p);
        return st;
    }
    rf_tensor_set(out, type, n, rows, rb, p, true);
    return RF_OK;
}

void rf_gbe_free(rf_backend *be, rf_tensor *t) {
    if (t && t->owned && t->data) rf_gpu_free(GX(be)->ctx, t->data);
    if (t) memset(t, 0, sizeof *t);
}

static rf_status g_weight(rf_backend *be, rf_type type, int64_t n, int64_t rows, const void *host, rf_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!rf_gpu_type_supported(type))
        return rf_set_error(RF_ERR_UNSUPPORTED, "the GPU backend cannot compute with %s weights", rf_type_name(type));
    size_t rb;
    rf_status st = row_bytes(type, n, &rb);
    if (st) return st;
    void *d = NULL;
    if ((st = rf_gpu_upload_weights(GX(be)->ctx, host, rb * (size_t)rows, "weights", false, &d))) return st;
    rf_tensor_set(out, type, n, rows, rb, d, true);
    return RF_OK;
}

static rf_status g_read_rows(rf_backend *be, const rf_tensor *t, int64_t r0, int64_t n, float *dst) {
    if (t->type != RF_TYPE_F32) return rf_set_error(RF_ERR_UNSUPPORTED, "GPU read_rows: only f32 tensors");
    G(be)->n_down++;
    return rf_gpu_download(G(be)->ctx, dst, (const char *)t->data + (size_t)r0 * t->nb1, (size_t)n * t->nb1);
}

/* lent to the op files beside this one (gpu_deltanet.h) */
rf_gpu_ctx *rf_gpu_be_op_ctx(rf_backend *be) { return GX(be)->ctx; }
rf_status rf_gpu_be_batch_dev(const rf_batch *b, const char *op, const int32_t **pos, const int32_t **seq,
                              const int32_t **state_slot) {
    if (!b->dev) return rf_set_error(RF_ERR_INVALID_ARG, "GPU %s: batch metadata was not uploaded", op);
    *pos = dev_of(b)->pos;
    *seq = dev_of(b)->seq;
    *state_slot = dev_of(b)->state_slot;
    return RF_OK;
}

static rf_status g_get_rows(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_batch *b) {
    NEED_DEV(b, "get_rows");
    return rf_gpu_get_rows(GX(be)->ctx, y->data, w->data, w->type, dev_of(b)->ids, b->n_tokens, w->ne[0], w->ne[1]);
}

static rf_status g_get_rows_part(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_batch *b, int64_t r0,
                                 int64_t n_all) {
    NEED_DEV(b, "get_rows_part");
    return rf_gpu_get_rows_part(GX(be)->ctx, y->data, w->data, w->type, dev_of(b)->ids, b->n_tokens, w->ne[0], r0,
                                w->ne[1], n_all);
}

static rf_status g_add_bias(rf_backend *be, rf_tensor *y, const rf_tensor *b, int64_t rows, int64_t n) {
    return rf_gpu_add_bias(GX(be)->ctx, y->data, b->data, rows, n);
}

static rf_status g_rmsnorm(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w, int64_t rows,
                           int64_t n, float eps) {
    return rf_gpu_rmsnorm(GX(be)->ctx, y->data, x->data, w ? w->data : NULL, rows, n, eps);
}

static rf_status g_add_norm(rf_backend *be, rf_tensor *x, rf_tensor *o, const rf_tensor *w_o, float s, rf_tensor *y,
                           const rf_tensor *w_y, float s_y, int64_t rows, int64_t n, float eps) {
    rf_gpu_ctx *ctx = GX(be)->ctx;
    float *xd = x->data, *od = o ? o->data : NULL, *yd = y ? y->data : NULL;
    const float *wo = w_o ? w_o->data : NULL, *wy = w_y ? w_y->data : NULL;
    if (n <= 16384 && GX(be)->fuse) return rf_gpu_add_norm(ctx, xd, od, wo, s, yd, wy, s_y, rows, n, eps);
    rf_status st = RF_OK; /* rows past the fused kernel's reach, or fusions off: the unfused ops */
    if (od) {
        if (!st) st = rf_gpu_rmsnorm(ctx, od, od, wo, rows, n, eps);
        if (!st) st = rf_gpu_add(ctx, xd, xd, od, rows * n);
        if (!st && s != 1.0f) st = rf_gpu_scale(ctx, xd, xd, s, rows * n);
    }
    if (yd) {
        if (!st) st = rf_gpu_rmsnorm(ctx, yd, xd, wy, rows, n, eps);
        if (!st && s_y != 1.0f) st = rf_gpu_scale(ctx, yd, yd, s_y, rows * n);
    }
    return st;
}

static rf_status g_rope(rf_backend *be, rf_tensor *x, const rf_batch *b, int64_t n_heads, int64_t head_dim,
                        int64_t n_rot, float freq_base, float freq_scale, const rf_tensor *ff, int mode,
                        float attn_factor) {
    NEED_DEV(b, "rope");
    return rf_gpu_rope(GX(be)->ctx, x->data, b->n_tokens, n_heads, head_dim, n_rot, n_heads * head_dim, head_dim,
                       dev_of(b)->pos, freq_base, freq_scale, ff ? ff->data : NULL, mode, attn_factor);
}

static rf_status g_kv_store(rf_backend *be, rf_tensor *cache, const rf_tensor *src, const rf_batch *b) {
    NEED_DEV(b, "kv_store");
    if (cache->type != RF_TYPE_F16 && cache->type != RF_TYPE_F32 && cache->type != RF_TYPE_Q8_0)
        return rf_set_error(RF_ERR_UNSUPPORTED, "the GPU KV cache holds f16, f32 or q8_0 (not %s)",
                            rf_type_name(cache->type));
    return rf_gpu_kv_store(GX(be)->ctx, cache->data, cache->type, cache->ne[1], src->data, b->n_tokens, cache->ne[0],
                           dev_of(b)->slot);
}

/* rope_store in one kernel: RoPE of Q into q_out, K roped into its cache, V stored; q, k, v
 * may be the strided columns of one joined Q/K/V product. */
static rf_status g_rope_store(rf_backend *be, rf_tensor *q_out, rf_tensor *q, rf_tensor *k, const rf_tensor *v,
                              rf_tensor *kc, rf_tensor *vc, const rf_batch *b, int64_t n_head, int64_t n_head_kv,
                              int64_t head_dim, int64_t n_rot, float freq_base, float freq_scale, const rf_tensor *ff,
                              int mode, float attn_factor) {
    NEED_DEV(b, "rope_store");
    gpu_be *g = GX(be);
    if (gbe_skip(RF_SKIP_ROPE)) {
        g->pend_y = NULL;
        return RF_OK;
    }
    if (kc->type != vc->type || (kc->type != RF_TYPE_F16 && kc->type != RF_TYPE_F32 && kc->type != RF_TYPE_Q8_0))
        return rf_set_error(RF_ERR_UNSUPPORTED, "the GPU KV cache holds f16, f32 or q8_0 (not %s)",
                            rf_type_name(kc->type));
    const int64_t sq = (int64_t)(q->nb1 / 4), sk = (int64_t)(k->nb1 / 4), sv = (int64_t)(v->nb1 / 4);
    const bool packed = sq == n_head * head_dim && sk == n_head_kv * head_dim && sv == n_head_kv * head_dim;
    const bool unfused = !g->fuse && packed && q_out->data == q->data;
    /* q, k, v may be a matmul_sum_next product's split-K sums, added as the kernel reads them */
    const float *qs = q->data, *ks = k->data, *vs = v->data;
    int np, npv;
    int64_t ps;
    rf_status st = rf_gbe_take_parts_qkv(g, !unfused && q_out->data != q->data, &qs, &ks, &vs, &np, &npv, &ps);
    if (st) return st;
    if (unfused) { /* the unfused composition, for A/B runs */
        if ((st = g_rope(be, q, b, n_head, head_dim, n_rot, freq_base, freq_scale, ff, mode, attn_factor)) ||
            (st = g_rope(be, k, b, n_head_kv, head_dim, n_rot, freq_base, freq_scale, ff, mode, attn_factor)) ||
            (st = g_kv_store(be, kc, k, b)))
            return st;
        return g_kv_store(be, vc, v, b);
    }
    return rf_gpu_norm_rope_qkv_append_parts(g->ctx, q_out->data, qs, sq, n_head, ks, sk, vs, sv, b->n_tokens,
                                             n_head_kv, head_dim, n_rot, dev_of(b)->pos, dev_of(b)->slot, freq_base,
                                             freq_scale, ff ? ff->data : NULL, mode, attn_factor, kc->data, vc->data,
                                             kc->type, kc->ne[1], NULL, NULL, 0, 0.0f, np, npv, ps);
}

/* norm_rope_store in one kernel: the per-head Q/K (and V) RMSNorms, then rope_store's work. Fusions
 * off (RF_GPU_UNFUSED), or a head past the kernel's 1024 threads: the norms, then rope_store, which
 * needs packed rows (joined Q/K/V columns come only with fusions on: rf_gbe_weight_join). */
static rf_status g_norm_rope_store(rf_backend *be, rf_tensor *q_out, rf_tensor *q, rf_tensor *k, rf_tensor *v,
                                   rf_tensor *kc, rf_tensor *vc, const rf_batch *b, int64_t n_head, int64_t n_head_kv,
                                   int64_t head_dim, int64_t n_rot, float freq_base, float freq_scale,
                                   const rf_tensor *ff, int mode, float attn_factor, const rf_tensor *q_norm,
                                   const rf_tensor *k_norm, bool v_norm, float eps) {
    NEED_DEV(b, "norm_rope_store");
    gpu_be *g = GX(be);
    const int64_t sq = (int64_t)(q->nb1 / 4), sk = (int64_t)(k->nb1 / 4), sv = (int64_t)(v->nb1 / 4);
    const bool packed = sq == n_head * head_dim && sk == n_head_kv * head_dim && sv == n_head_kv * head_dim;
    if (!g->fuse || head_dim > 1024 || kc->type != vc->type ||
        (kc->type != RF_TYPE_F16 && kc->type != RF_TYPE_F32 && kc->type != RF_TYPE_Q8_0)) {
        rf_status st = rf_gbe_flush_parts(g); /* the ops below read q, k, v as they are */
        if (st) return st;
        if (!packed) return rf_set_error(RF_ERR_UNSUPPORTED, "norm_rope_store: unfused needs packed q, k and v rows");
        if (q_norm && (st = g_rmsnorm(be, q, q, q_norm, b->n_tokens * n_head, head_dim, eps))) return st;
        if (k_norm && (st = g_rmsnorm(be, k, k, k_norm, b->n_tokens * n_head_kv, head_dim, eps))) return st;
        if (v_norm && (st = g_rmsnorm(be, v, v, NULL, b->n_tokens * n_head_kv, head_dim, eps))) return st;
        return g_rope_store(be, q_out, q, k, v, kc, vc, b, n_head, n_head_kv, head_dim, n_rot, freq_base, freq_scale,
                            ff, mode, attn_factor);
    }
    const float *qs = q->data, *ks = k->data, *vs = v->data;
    int np, npv;
    int64_t ps;
    rf_status st = rf_gbe_take_parts_qkv(g, q_out->data != q->data, &qs, &ks, &vs, &np, &npv, &ps);
    if (st) return st;
    return rf_gpu_norm_rope_qkv_append_parts(g->ctx, q_out->data, qs, sq, n_head, ks, sk, vs, sv, b->n_tokens,
                                             n_head_kv, head_dim, n_rot, dev_of(b)->pos, dev_of(b)->slot, freq_base,
                                             freq_scale, ff ? ff->data : NULL, mode, attn_factor, kc->data,
                                             vc->data, kc->type, kc->ne[1], q_norm ? q_norm->data : NULL,
                                             k_norm ? k_norm->data : NULL, v_norm, eps, np, npv, ps);
}

static rf_status g_copy_rows(rf_backend *be, rf_tensor *t, int64_t dst0, int64_t src0, int64_t n) {
    rf_status st = rf_copy_rows_check(t, dst0, src0, n);
    if (st) return st;
    return rf_gpu_copy(GX(be)->ctx, (char *)t->data + (size_t)dst0 * t->nb1, (const char *)t->data + (size_t)src0 * t->nb1,
                       (size_t)n * t->nb1);
}

/* Prompt runs (tokens of one sequence at consecutive positions, consecutive in the batch) of at
 * least this many tokens take the tensor-core prefill kernel; decode tokens and shorter runs the
 * paged-attention kernel (CUDA cores, batch-invariant bit for bit). */
#define RF_FLASH_MIN_RUN 16

/* The paged-attention kernel over tokens [t0, t1) of the batch, told whether they are decode
 * rows (graph steps are; an eager stretch is when no two consecutive tokens share a sequence).
 * Decode rows take the tensor-core decode kernel (rf_gpu_paged_attention_route), all of them,
 * where rf_gpu_attn_decode_mma says (gpu_route.c: the call's depth bucket reaches
 * RF_GPU_DECODE_MMA_MIN keys, or with an f16 cache is at most RF_GPU_DECODE_MMA_SHORT; the
 * 8,192-key bucket between them stays paged): the bucket is the power of two of at least
 * 256 that holds max_pos + 1 (a graph step's max_pos is already its bucket's bound: the engine's
 * rf_step_depth_bucket), or the window where that is smaller. One kernel for the whole call, by a
 * rule an eager step and a recorded one of the same rows answer alike; a row's split count follows
 * from its own position either way. The batch-invariant mode keeps the paged kernel's bits. */
static int64_t mma_min_keys(const gpu_be *g, const gpu_batch *d, bool decode, int64_t window, rf_type kv) {
    const rf_gpu_attn_facts f = {.decode = decode,
                                 .invariant = g->invariant,
                                 .bucket_keys = d->max_pos < 0 ? 0 : rf_depth_bucket_keys(d->max_pos),
                                 .window = window,
                                 .kv_type = kv,
                                 .mma_min = rf_knob_int(RF_KNOB_GPU_DECODE_MMA_MIN),
                                 .mma_short = rf_knob_int(RF_KNOB_GPU_DECODE_MMA_SHORT)};
    return rf_gpu_attn_decode_mma(&f) ? 1 : 0;
}

static rf_status attn_paged(gpu_be *g, float *out, const float *q, const rf_tensor *k, const rf_tensor *v,
                            const rf_batch *b, int64_t t0, int64_t t1, int64_t n_head, int64_t n_head_kv,
                            int64_t head_dim, float scale, int64_t window, float softcap, const float *sinks) {
    if (t1 <= t0) return RF_OK;
    const gpu_batch *d = dev_of(b);
    const int64_t row = n_head * head_dim;
    bool decode = g->mode != RF_GRAPH_NONE || t1 - t0 <= 64;
    if (!decode && b->seq && b->pos) {
        decode = true;
        for (int64_t t = t0 + 1; t < t1 && decode; t++)
            decode = !(b->seq[t] == b->seq[t - 1] && b->pos[t] >= 0 && b->pos[t - 1] >= 0);
    }
    const int64_t mma_min = mma_min_keys(g, d, decode, window, k->type);
    return rf_gpu_paged_attention_route(g->ctx, out + t0 * row, q + t0 * row, k->data, v->data, k->type, t1 - t0,
                                        d->pos + t0, d->seq + t0, d->table, b->max_blocks, b->block_size, n_head,
                                        n_head_kv, head_dim, scale, window, softcap, d->max_pos, sinks, decode,
                                        mma_min);
}

/* Attention of a step. An eager step (prompt chunks; graph steps are decode tokens only) finds
 * its prompt runs on the host and gives the long ones to rf_gpu_flash_prefill (head dims 64-128,
 * and 256 / 512 in place of the paged / wide kernels where the device has the shared memory),
 * the tokens between them to rf_gpu_paged_attention in one call per stretch. A token's output in a run
 * does not depend on how its prompt was chunked (the kernel's contract), but differs in rounding
 * from the same token computed by the paged kernel (docs/gpu.md, "Batch invariance"). */
static rf_status g_attention(rf_backend *be, rf_tensor *out, const rf_tensor *q, const rf_tensor *k, const rf_tensor *v,
                             const rf_batch *b, int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                             int64_t window, float softcap, const rf_tensor *sinks) {
    NEED_DEV(b, "attention");
    const float *sk = sinks ? (const float *)sinks->data : NULL;
    gpu_be *g = GX(be);
    if (gbe_skip(RF_SKIP_ATTN)) return RF_OK;
    const gpu_batch *d = dev_of(b);
    const int64_t n = b->n_tokens, row = n_head * head_dim;
    float *o = (float *)out->data;
    const float *qd = (const float *)q->data;
    if (!g->flash || g->invariant || g->mode != RF_GRAPH_NONE || n < RF_FLASH_MIN_RUN || !b->pos || !b->seq ||
        !rf_gpu_flash_prefill_supported(g->ctx, k->type, head_dim) || q->nb1 != (size_t)row * 4)
        return attn_paged(g, o, qd, k, v, b, 0, n, n_head, n_head_kv, head_dim, scale, window, softcap, sk);
    int64_t pending = 0; /* first token not yet given to a kernel */
    for (int64_t t = 0; t < n;) {
        int64_t e = t + 1;
        while (e < n && b->seq[e] == b->seq[t] && b->pos[e] == b->pos[e - 1] + 1) e++;
        if (e - t >= RF_FLASH_MIN_RUN && b->pos[t] >= 0) {
            rf_status st = attn_paged(g, o, qd, k, v, b, pending, t, n_head, n_head_kv, head_dim, scale, window,
                                      softcap, sk);
            if (!st)
                st = rf_gpu_flash_prefill(g->ctx, o + t * row, qd + t * row, k->data, v->data, k->type, e - t,
                                          b->pos[t], d->table + (int64_t)b->seq[t] * b->max_blocks, b->block_size,
                                          n_head, n_head_kv, head_dim, scale, window, softcap, sk);
            if (st) return st;
            pending = e;
        }
        t = e;
    }
    return attn_paged(g, o, qd, k, v, b, pending, n, n_head, n_head_kv, head_dim, scale, window, softcap, sk);
}

static rf_status g_gather_rows(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_batch *b, int64_t n) {
    NEED_DEV(b, "gather_rows");
    return rf_gpu_gather_rows(GX(be)->ctx, y->data, x->data, dev_of(b)->out_rows, b->n_out, n);
}

rf_status rf_gbe_glu(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up, int64_t n,
                       rf_glu_kind kind) {
    if (kind == RF_GLU_SWIGLU) return rf_gpu_swiglu(GX(be)->ctx, y->data, gate->data, up->data, n);
    if (kind == RF_GLU_SWIGLU_OAI) return rf_gpu_swiglu_oai(GX(be)->ctx, y->data, gate->data, n, up->data, n, 1, n);
    return rf_gpu_geglu(GX(be)->ctx, y->data, gate->data, up->data, n);
}

static rf_status g_add(rf_backend *be, rf_tensor *y, const rf_tensor *a, const rf_tensor *b, int64_t n) {
    return rf_gpu_add(GX(be)->ctx, y->data, a->data, b->data, n);
}

static rf_status g_scale(rf_backend *be, rf_tensor *x, float s, int64_t n) {
    return rf_gpu_scale(GX(be)->ctx, x->data, x->data, s, n);
}

static rf_status g_softcap(rf_backend *be, rf_tensor *x, float cap, int64_t n) {
    return rf_gpu_softcap(GX(be)->ctx, x->data, cap, n);
}

/* ---- mixture of experts (gpu_moe.cu): the router, the indirect product and the combine; the
 * expert ids stay on the device between them ---- */
static rf_status g_moe_route(rf_backend *be, rf_tensor *ids, rf_tensor *wts, const rf_tensor *logits,
                             const rf_tensor *sel_bias, int64_t n, int64_t n_expert, int64_t k, rf_moe_gating gating,
                             bool norm, float scale) {
    if (ids->type != RF_TYPE_I32 || wts->type != RF_TYPE_F32)
        return rf_set_error(RF_ERR_INVALID_ARG, "moe_route: ids must be i32 and wts f32 (got %s, %s)",
                            rf_type_name(ids->type), rf_type_name(wts->type));
    return rf_gpu_moe_route(GX(be)->ctx, ids->data, wts->data, logits->data, sel_bias ? sel_bias->data : NULL, n,
                            n_expert, k, (int)gating, norm, scale);
}

static rf_status g_matmul_id(rf_backend *be, rf_tensor *y, const rf_tensor *w, int64_t n_out, const rf_tensor *x,
                             bool x_per_slot, const rf_tensor *ids, const rf_tensor *bias, int64_t n, int64_t k) {
    if (n_out < 1 || w->ne[1] % n_out != 0 || ids->type != RF_TYPE_I32)
        return rf_set_error(RF_ERR_INVALID_ARG, "matmul_id: %lld weight rows are not experts of %lld rows (or ids "
                            "not i32)", (long long)w->ne[1], (long long)n_out);
    return rf_gpu_matmul_id(GX(be)->ctx, y->data, w->data, w->type, n_out, w->ne[1] / n_out, w->ne[0], x->data,
                            x_per_slot, ids->data, bias ? bias->data : NULL, n, k);
}

static rf_status g_moe_combine(rf_backend *be, rf_tensor *y, const rf_tensor *z, const rf_tensor *wts, int64_t n,
                               int64_t k, int64_t m) {
    return rf_gpu_moe_combine(GX(be)->ctx, y->data, z->data, wts->data, n, k, m);
}

/* the decode fusions (rf_gpu_matmul_id_glu / _combine); a gate and an up weight of different
 * types or shapes take the unfused ops */
static rf_status g_matmul_id_glu(rf_backend *be, rf_tensor *y, rf_tensor *u, const rf_tensor *wg, const rf_tensor *wu,
                                 int64_t n_out, const rf_tensor *x, const rf_tensor *ids, const rf_tensor *bg,
                                 const rf_tensor *bu, int64_t n, int64_t k, rf_glu_kind kind) {
    if (wg->type != wu->type || wg->ne[0] != wu->ne[0] || wg->ne[1] != wu->ne[1]) {
        rf_status st = g_matmul_id(be, y, wg, n_out, x, false, ids, bg, n, k);
        if (!st) st = g_matmul_id(be, u, wu, n_out, x, false, ids, bu, n, k);
        return st ? st : rf_gbe_glu(be, y, y, u, n * k * n_out, kind);
    }
    if (n_out < 1 || wg->ne[1] % n_out != 0 || ids->type != RF_TYPE_I32)
        return rf_set_error(RF_ERR_INVALID_ARG, "matmul_id_glu: %lld weight rows are not experts of %lld rows (or "
                            "ids not i32)", (long long)wg->ne[1], (long long)n_out);
    return rf_gpu_matmul_id_glu(GX(be)->ctx, y->data, u->data, wg->data, wu->data, wg->type, n_out, wg->ne[1] / n_out,
                                wg->ne[0], x->data, ids->data, bg ? bg->data : NULL, bu ? bu->data : NULL, n, k,
                                (int)kind);
}

static rf_status g_matmul_id_combine(rf_backend *be, rf_tensor *y, rf_tensor *z, const rf_tensor *w, int64_t n_out,
                                     const rf_tensor *x, const rf_tensor *ids, const rf_tensor *bias,
                                     const rf_tensor *wts, int64_t n, int64_t k) {
    if (n_out < 1 || w->ne[1] % n_out != 0 || ids->type != RF_TYPE_I32)
        return rf_set_error(RF_ERR_INVALID_ARG, "matmul_id_combine: %lld weight rows are not experts of %lld rows "
                            "(or ids not i32)", (long long)w->ne[1], (long long)n_out);
    return rf_gpu_matmul_id_combine(GX(be)->ctx, y->data, z->data, w->data, w->type, n_out, w->ne[1] / n_out,
                                    w->ne[0], x->data, ids->data, bias ? bias->data : NULL, wts->data, n, k);
}

/* one MoE feed-forward's experts (rf_gpu_moe_ffn); gate and up of different types or shapes
 * take the ops it stands for */
static rf_status g_moe_ffn(rf_backend *be, rf_tensor *y, const rf_moe_ffn_args *a) {
    const rf_tensor *wg = a->w_gate, *wu = a->w_up, *wd = a->w_down;
    if (wg->type != wu->type || wg->ne[0] != wu->ne[0] || wg->ne[1] != wu->ne[1]) {
        rf_status st = a->logits_b ? g_add_bias(be, a->logits, a->logits_b, a->n, a->n_expert) : RF_OK;
        if (!st)
            st = g_moe_route(be, a->ids, a->wts, a->logits, a->sel_bias, a->n, a->n_expert, a->k, a->gating, a->norm,
                             a->scale);
        if (!st)
            st = g_matmul_id_glu(be, a->g, a->u, wg, wu, a->n_ff, a->x, a->ids, a->b_gate, a->b_up, a->n, a->k, a->glu);
        return st ? st : g_matmul_id_combine(be, y, a->z, wd, a->n_out, a->g, a->ids, a->b_down, a->wts, a->n, a->k);
    }
    if (a->n_ff < 1 || a->n_out < 1 || wg->ne[1] != a->n_ff * a->n_expert || wd->ne[1] != a->n_out * a->n_expert ||
        wd->ne[0] != a->n_ff || a->ids->type != RF_TYPE_I32 || a->wts->type != RF_TYPE_F32)
        return rf_set_error(RF_ERR_INVALID_ARG, "moe_ffn: expert weights of %lld / %lld rows are not %lld experts of "
                            "%lld / %lld rows (or ids / wts not i32 / f32)", (long long)wg->ne[1], (long long)wd->ne[1],
                            (long long)a->n_expert, (long long)a->n_ff, (long long)a->n_out);
#define D_(t) ((t) ? (t)->data : NULL)
    const rf_gpu_moe_ffn_desc d = {
        .logits = a->logits->data, .lb = D_(a->logits_b), .sel_bias = D_(a->sel_bias), .gating = (int)a->gating,
        .norm = a->norm, .scale = a->scale, .ids = a->ids->data, .wts = a->wts->data, .x = a->x->data,
        .wg = wg->data, .wu = wu->data, .wd = wd->data, .tg = wg->type, .td = wd->type, .bg = D_(a->b_gate),
        .bu = D_(a->b_up), .bd = D_(a->b_down), .g = a->g->data, .u = a->u->data, .z = a->z->data, .n = a->n,
        .k = a->k, .n_expert = a->n_expert, .n_in = wg->ne[0], .n_ff = a->n_ff, .n_out = a->n_out, .glu = (int)a->glu};
#undef D_
    return rf_gpu_moe_ffn(GX(be)->ctx, y->data, &d);
}

static rf_status g_moe_shared_gate(rf_backend *be, rf_tensor *y, const rf_tensor *z, const rf_tensor *h,
                                   const rf_tensor *w, int64_t n, int64_t m) {
    if (w->type != RF_TYPE_F32 || w->ne[0] != m)
        return rf_set_error(RF_ERR_INVALID_ARG, "moe_shared_gate: the gate must be f32 [%lld]", (long long)m);
    const int64_t hs = h->nb1 ? (int64_t)(h->nb1 / 4) : m;
    return rf_gpu_moe_shared_gate(GX(be)->ctx, y->data, z->data, h->data, hs, w->data, n, m);
}

void rf_backend_gpu_counters(rf_backend *be, int64_t *uploads, int64_t *downloads, int64_t *launches) {
    gpu_be *g = G(be);
    *uploads = g->n_up;
    *downloads = g->n_down;
    *launches = g->n_launch;
}

int64_t rf_backend_gpu_parts_kept(rf_backend *be) { return G(be)->parts_kept; }

static rf_status g_info(rf_backend *be, bool memory, rf_backend_info *out) {
    gpu_be *g = G(be); /* writes nothing of g: a server's metrics thread calls this while the engine steps */
    *out = (rf_backend_info){.name = g->name, .device = g->device};
    rf_backend_gpu_counters(be, &out->uploads, &out->downloads, &out->launches);
    if (!memory) return RF_OK;
    rf_status st = rf_gpu_mem_info(g->ctx, &out->mem_free, &out->mem_total);
    if (st) return st;
    out->mem_used = out->mem_total > out->mem_free ? out->mem_total - out->mem_free : 0;
    return RF_OK;
}

static void g_destroy(rf_backend *be) {
    if (!be) return;
    gpu_be *g = G(be);
    if (g) {
        rf_gbe_drop_capture(g);
        rf_gbe_drop_graphs(g);
        if (g->ctx) rf_gpu_sync(g->ctx);
        rf_gpu_host_free(g->pin);
        rf_gpu_fence_destroy(g->pin_fence);
        if (g->ctx) {
            rf_gpu_free(g->ctx, g->dmeta);
            rf_gpu_free(g->ctx, g->xq);
            rf_gpu_free(g->ctx, g->parts);
            rf_gpu_destroy(g->ctx);
        }
        free(g);
    }
    free(be);
}

static const rf_backend_ops gpu_ops = {
    .name = "gpu",
    .info = g_info,
    .alloc = rf_gbe_alloc,
    .free = rf_gbe_free,
    .weight = g_weight,
    .weight_join = rf_gbe_weight_join,
    .read_rows = g_read_rows,
    .batch_upload = rf_gbe_batch_upload,
    .get_rows = g_get_rows,
    .get_rows_part = g_get_rows_part,
    .matmul = rf_gbe_matmul,
    .add_bias = g_add_bias,
    .matmul_bias = rf_gbe_matmul_bias,
    .matmul_sum_next = rf_gbe_matmul_sum_next,
    .rmsnorm = g_rmsnorm,
    .add_norm = g_add_norm,
    .rmsnorm_for = rf_gbe_rmsnorm_for,
    .rope = g_rope,
    .kv_store = g_kv_store,
    .rope_store = g_rope_store,
    .norm_rope_store = g_norm_rope_store,
    .copy_rows = g_copy_rows,
    .attention = g_attention,
    .gather_rows = g_gather_rows,
    .glu = rf_gbe_glu,
    .glu_for = rf_gbe_glu_for,
    .moe_route = g_moe_route,
    .matmul_id = g_matmul_id,
    .moe_combine = g_moe_combine,
    .matmul_id_glu = g_matmul_id_glu,
    .matmul_id_combine = g_matmul_id_combine,
    .moe_ffn = g_moe_ffn,
    .moe_shared_gate = g_moe_shared_gate,
    .ssm_conv = rf_gpu_op_ssm_conv, /* gated DeltaNet: gpu_backend_deltanet.c */
    .gated_delta = rf_gpu_op_gated_delta,
    .sigmoid_mul = rf_gpu_op_sigmoid_mul,
    .head_split = rf_gpu_op_head_split,
    .add = g_add,
    .scale = g_scale,
    .softcap = g_softcap,
    .sample = rf_gbe_sample,
    .graph_begin = rf_gbe_graph_begin,
    .graph_abort = rf_gbe_graph_abort,
    .set_batch_invariant = rf_gbe_set_batch_invariant,
    .destroy = g_destroy,
};

/* rf_backend_make's init: a context on device *(int *)arg, the knobs read once */
static rf_status g_init(void *impl, void *arg) {
    gpu_be *g = impl;
    const int device = *(const int *)arg;
    rf_status st = rf_gpu_init(device, &g->ctx);
    if (st) return st;
    g->device = device;
    rf_gpu_info gi;
    rf_gpu_get_info(g->ctx, &gi);
    snprintf(g->name, sizeof g->name, "%s", gi.name); /* once: op info hands it out */
    g->fuse = !rf_knob_bool(RF_KNOB_GPU_UNFUSED);
    g->flash = rf_knob_bool(RF_KNOB_GPU_FLASH);
    g->mask_late_rows = rf_knob_int(RF_KNOB_GPU_MASK_OVERLAP);
    return RF_OK;
}

rf_status rf_backend_gpu_new(int device, rf_backend **out) {
    return rf_backend_make(&gpu_ops, sizeof(gpu_be), g_init, &device, "GPU backend", out);
}

bool rf_backend_is_gpu(const rf_backend *be) { return be && be->ops == &gpu_ops; }

rf_status rf_backend_gpu_mem(rf_backend *be, size_t *free_bytes, size_t *total_bytes) {
    return rf_gpu_mem_info(G(be)->ctx, free_bytes, total_bytes);
}

rf_status rf_backend_gpu_sync(rf_backend *be) { return rf_gpu_sync(G(be)->ctx); }
rf_status rf_backend_gpu_stall(rf_backend *be, unsigned us) { return rf_gpu_stall(G(be)->ctx, us); }

const char *rf_backend_gpu_name(rf_backend *be) {
    static char name[256];
    rf_gpu_info info;
    rf_gpu_get_info(G(be)->ctx, &info);
    snprintf(name, sizeof name, "%s", info.name);
    return name;
}

rf_gpu_ctx *rf_backend_gpu_ctx(rf_backend *be) { return G(be)->ctx; }

rf_status rf_gpu_probe_read_bw(int device, char *name, size_t cap, double *gbps) {
    *gbps = 0;
    rf_gpu_ctx *ctx = NULL;
    rf_status st = rf_gpu_init(device, &ctx);
    if (st) return st;
    rf_gpu_info info;
    rf_gpu_get_info(ctx, &info);
    snprintf(name, cap, "%s", info.name);
    size_t bytes = (size_t)1 << 30;
    if (info.total_mem > ((size_t)8 << 30)) bytes = (size_t)4 << 30;
    if ((st = rf_gpu_bench_read_bw(ctx, bytes, 10, gbps))) *gbps = 0;
    rf_gpu_destroy(ctx);
    return RF_OK;
}
