/* gpu_backend.c — the GPU backend: backend.h's op table over the kernel library (gpu.h), so the
 * one forward (model/forward.c) runs on CUDA/HIP unchanged. Weights are uploaded once, the KV
 * pool and activations are device allocations, and a step's batch metadata goes up in one
 * pinned copy (batch_upload) that every op then reads on the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "backend/backend.h"
#include "backend/gpu/gpu.h"
#include "backend/gpu/gpu_deltanet.h"
#include "rocmforge/quant.h"



#define RF_MAX_GRAPHS 16
#define RF_GRAPH_PEN 64 /* penalty entries per row a graph step carries */

/* Device copies of a step's metadata (one allocation, laid out as in the pinned buffer). */
typedef struct gpu_batch {
    int32_t *ids, *pos, *seq, *slot, *out_rows, *table;
    int32_t *state_slot; /* [n_seqs] (hybrid models), else NULL */
    int64_t max_pos;
    rf_gpu_sample_row *rows;  /* sampling records, penalties, and room for the ids */
    int32_t *pen_ids, *pen_counts, *d_ids, *h_ids;
    bool any_penalty;
} gpu_batch;

typedef struct gpu_be {
    rf_gpu_ctx *ctx;
    int device;
    char *pin;        /* pinned staging of the metadata */
    void *pin_fence;  /* recorded behind the last eager copy out of pin */
    bool pin_busy;    /* that copy may not have run yet: wait on pin_fence before writing pin */
    char *dmeta;      /* its device copy */
    size_t meta_cap;
    gpu_batch dev;
    /* decode-step graphs, one per batch-size bucket */
    struct {
        int key, seen;
        void *exec;
        unsigned epoch;   /* g->epoch when recorded */
        void *scratch_at; /* the scratch arena's base when recorded */
    } graphs[RF_MAX_GRAPHS];
    int n_graphs, mode, cur;
    const void *owner;
    /* a tensor-parallel split's GPU other than the sampling one (rf_backend_gpu_set_lead): its
     * step is recorded into lead's graph (one graph over every GPU), never into its own; its
     * recorded entries then hold IN_LEAD instead of an executable graph */
    struct gpu_be *lead;
    unsigned epoch;   /* bumped when a buffer a graph recorded moves */
    int64_t n_up, n_down, n_launch; /* per-step transfer counters (RF_GPU_STEP_TRACE) */
    /* Fusions (RF_GPU_UNFUSED=1 turns them off, for A/B runs and the fused-vs-unfused test):
     * rope_store, and one activation quantization shared by consecutive products of the same
     * x (Q, K, V; gate, up). xq_src is the f32 x that xq holds quantized for (xq_type, xq_nt,
     * xq_nin); any op other than a product reading it ends that (it may write x). */
    bool fuse;
    bool flash; /* prompt runs on the tensor-core prefill kernel (RF_GPU_FLASH=0: off, for A/B runs) */
    bool invariant; /* batch-invariant mode (g_set_batch_invariant): no flash prefill */
    const void *xq_src;
    rf_type xq_type;
    int64_t xq_nt, xq_nin;
    void *xq;
    size_t xq_cap;
} gpu_be;

#define G(be) ((gpu_be *)(be)->impl)
/* the backend of an op that is not a product: a shared quantized x is stale from here on */
static gpu_be *GX(rf_backend *be) {
    gpu_be *g = G(be);
    g->xq_src = NULL;
    return g;
}

static rf_status row_bytes(rf_type type, int64_t n, size_t *out) {
    if (type == RF_TYPE_F32) { *out = (size_t)n * 4; return RF_OK; }
    if (type == RF_TYPE_F16 || type == RF_TYPE_BF16) { *out = (size_t)n * 2; return RF_OK; }
    return rf_row_size(type, n, out);
}

static rf_status g_alloc(rf_backend *be, rf_type type, int64_t n, int64_t rows, rf_tensor *out) {
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
    out->type = type;
    out->ne[0] = n;
    out->ne[1] = rows;
    out->nb1 = rb;
    out->data = p;
    out->owned = true;
    return RF_OK;
}

static void g_free(rf_backend *be, rf_tensor *t) {
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
    out->type = type;
    out->ne[0] = n;
    out->ne[1] = rows;
    out->nb1 = rb;
    out->data = d;
    out->owned = true;
    return RF_OK;
}

static rf_status g_read_rows(rf_backend *be, const rf_tensor *t, int64_t r0, int64_t n, float *dst) {
    if (t->type != RF_TYPE_F32) return rf_set_error(RF_ERR_UNSUPPORTED, "GPU read_rows: only f32 tensors");
    G(be)->n_down++;
    return rf_gpu_download(G(be)->ctx, dst, (const char *)t->data + (size_t)r0 * t->nb1, (size_t)n * t->nb1);
}

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* the graph of a follower's recorded step lives in its lead's */
static char in_lead_mark;
#define IN_LEAD ((void *)&in_lead_mark)

static void graph_free(void *x) {
    if (x != IN_LEAD) rf_gpu_graph_destroy(x);
}

/* Ends a recording in progress without keeping it. A follower's stream is joined back into its
 * lead's recording (which its lead then ends: drop the followers first). */
static void drop_capture(gpu_be *g) {
    if (g->mode == RF_GRAPH_CAPTURE) {
        if (g->lead) {
            (void)rf_gpu_capture_join(g->lead->ctx, g->ctx);
        } else {
            void *x = NULL;
            rf_gpu_capture_end(g->ctx, &x);
            rf_gpu_graph_destroy(x);
        }
    }
    g->mode = RF_GRAPH_NONE;
}

/* Waits until the last eager copy out of the pinned buffer has run. The copy runs when the
 * stream reaches it; a step that returns nothing (a prompt chunk without logits) does not wait
 * for the device, so the host can come to pack the next step while the previous step's copy is
 * still queued behind earlier chunks' kernels: rewriting pin then would send this step's ids,
 * positions and slots to that step (wrong K/V slots, and for a chunk of another length a misread
 * block table: out-of-bounds writes). Called before a recording begins too: no host wait may
 * happen inside one. */
static rf_status pin_settle(gpu_be *g) {
    if (!g->pin_busy) return RF_OK;
    rf_status st = rf_gpu_fence_wait(g->ctx, g->pin_fence);
    if (!st) g->pin_busy = false;
    return st;
}

/* Packs the step's metadata (ids, positions, sequences, slots, output rows, block tables, and
 * the sampling records with their penalties) into the pinned buffer and sends it up in one copy;
 * in a replayed step the recorded graph makes that copy. The layout depends only on the sizes,
 * so a recording fits every step of its bucket: in graph modes the penalty room is a fixed
 * RF_GRAPH_PEN entries per row. */
static rf_status g_batch_upload(rf_backend *be, rf_batch *b) {
    gpu_be *g = GX(be);
    size_t nt = (size_t)b->n_tokens, tab = (size_t)b->n_seqs * (size_t)b->max_blocks;
    size_t ns = (size_t)b->n_sample, nss = b->state_slot ? (size_t)b->n_seqs : 0;
    size_t pen_room = g->mode != RF_GRAPH_NONE ? ns * RF_GRAPH_PEN : (size_t)b->n_pen;
    if ((size_t)b->n_pen > pen_room) {
        drop_capture(g);
        return rf_set_error(RF_ERR_INTERNAL, "GPU graph step with %d penalty entries (room for %zu)", b->n_pen, pen_room);
    }
    size_t o_meta = 0, meta = up256((4 * nt + (size_t)b->n_out + tab + nss) * 4);
    size_t o_rows = meta, o_pid = o_rows + up256(ns * sizeof(rf_gpu_sample_row));
    size_t o_pcnt = o_pid + up256(pen_room * 4), o_ids = o_pcnt + up256(pen_room * 4);
    size_t up = o_ids, bytes = o_ids + up256(ns * 4);
    rf_status st;
    if ((st = pin_settle(g))) {
        drop_capture(g);
        return st;
    }
    if (bytes > g->meta_cap) {
        if (g->mode == RF_GRAPH_REPLAY) return rf_set_error(RF_ERR_INTERNAL, "GPU graph step with a larger batch");
        drop_capture(g); /* no allocation inside a recording: this step runs eagerly */
        size_t cap = bytes * 2 < 65536 ? 65536 : bytes * 2;
        rf_gpu_sync(g->ctx); /* the old buffers may still be read */
        rf_gpu_host_free(g->pin);
        rf_gpu_free(g->ctx, g->dmeta);
        g->pin = g->dmeta = NULL;
        g->meta_cap = 0;
        g->epoch++;
        if ((st = rf_gpu_host_alloc(cap, (void **)&g->pin))) return st;
        if ((st = rf_gpu_alloc(g->ctx, cap, (void **)&g->dmeta))) return st;
        g->meta_cap = cap;
    }
    /* the pinned buffer is reused every step: the previous step's copy has finished (each step
     * ends by waiting for its ids or logits) */
    int32_t *h = (int32_t *)(g->pin + o_meta), *d = (int32_t *)(g->dmeta + o_meta);
    int64_t max_pos = 0;
    memcpy(h, b->ids, nt * 4);
    memcpy(h + nt, b->pos, nt * 4);
    memcpy(h + 2 * nt, b->seq, nt * 4);
    memcpy(h + 3 * nt, b->slot, nt * 4);
    if (b->n_out) memcpy(h + 4 * nt, b->out_rows, (size_t)b->n_out * 4);
    if (tab) memcpy(h + 4 * nt + b->n_out, b->block_table, tab * 4);
    if (nss) memcpy(h + 4 * nt + b->n_out + tab, b->state_slot, nss * 4);
    if (b->max_pos > 0) max_pos = b->max_pos;
    else
        for (size_t i = 0; i < nt; i++)
            if (b->pos[i] > max_pos) max_pos = b->pos[i];
    rf_gpu_sample_row *hr = (rf_gpu_sample_row *)(g->pin + o_rows);
    bool any = g->mode != RF_GRAPH_NONE; /* a recording serves steps with and without penalties */
    for (size_t i = 0; i < ns; i++) {
        const rf_sample_row *r = &b->sample_rows[i];
        hr[i].temperature = r->temperature;
        hr[i].top_p = r->top_p;
        hr[i].min_p = r->min_p;
        hr[i].u = r->u;
        hr[i].top_k = r->top_k;
        hr[i].repeat_penalty = r->repeat_penalty;
        hr[i].presence_penalty = r->presence_penalty;
        hr[i].frequency_penalty = r->frequency_penalty;
        hr[i].pen_off = r->pen_off;
        hr[i].pen_n = r->pen_n;
        any |= r->pen_n > 0;
    }
    if (b->n_pen) {
        memcpy(g->pin + o_pid, b->pen_ids, (size_t)b->n_pen * 4);
        memcpy(g->pin + o_pcnt, b->pen_counts, (size_t)b->n_pen * 4);
    }
    g->dev.ids = d;
    g->dev.pos = d + nt;
    g->dev.seq = d + 2 * nt;
    g->dev.slot = d + 3 * nt;
    g->dev.out_rows = d + 4 * nt;
    g->dev.table = d + 4 * nt + b->n_out;
    g->dev.state_slot = nss ? d + 4 * nt + b->n_out + tab : NULL;
    g->dev.max_pos = max_pos;
    g->dev.rows = (rf_gpu_sample_row *)(g->dmeta + o_rows);
    g->dev.pen_ids = (int32_t *)(g->dmeta + o_pid);
    g->dev.pen_counts = (int32_t *)(g->dmeta + o_pcnt);
    g->dev.d_ids = (int32_t *)(g->dmeta + o_ids);
    g->dev.h_ids = (int32_t *)(g->pin + o_ids);
    g->dev.any_penalty = any;
    b->dev = &g->dev;
    if (g->mode == RF_GRAPH_REPLAY) return RF_OK;
    g->n_up++;
    if ((st = rf_gpu_upload_async(g->ctx, g->dmeta, g->pin, up))) return st;
    /* a recording's copy runs when its graph is launched, and that step waits for its ids */
    if (g->mode == RF_GRAPH_CAPTURE) return RF_OK;
    if ((st = rf_gpu_fence_record(g->ctx, &g->pin_fence))) return st;
    g->pin_busy = true;
    return RF_OK;
}

static const gpu_batch *dev_of(const rf_batch *b) { return (const gpu_batch *)b->dev; }

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

#define NEED_DEV(b, op) \
    if (!(b)->dev) return rf_set_error(RF_ERR_INVALID_ARG, "GPU %s: batch metadata was not uploaded", op)

static rf_status g_get_rows(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_batch *b) {
    NEED_DEV(b, "get_rows");
    return rf_gpu_get_rows(GX(be)->ctx, y->data, w->data, w->type, dev_of(b)->ids, b->n_tokens, w->ne[0], w->ne[1]);
}

/* whether the product of (type, n_in) for n_tokens has the int8-x form whose quantized x one
 * kernel can make for several products */
static bool shares_xq(gpu_be *g, rf_type t, int64_t n_tokens, int64_t n_in) {
    return g->fuse && rf_gpu_gemv_has_xq(g->ctx, t, n_tokens, n_in);
}

/* the xq buffer large enough for n_tokens x n_in; false (and no error) where it would have to
 * grow inside a graph recording (no allocation may be recorded) */
static rf_status xq_room(gpu_be *g, int64_t n_tokens, int64_t n_in, bool *ok) {
    *ok = false;
    size_t need = rf_gpu_xq_bytes(n_tokens, n_in);
    if (need > g->xq_cap) {
        if (g->mode == RF_GRAPH_CAPTURE) return RF_OK;
        rf_status st = rf_gpu_sync(g->ctx); /* the old buffer may still be read */
        if (st) return st;
        rf_gpu_free(g->ctx, g->xq);
        g->xq = NULL;
        g->xq_cap = 0;
        size_t cap = rf_gpu_xq_bytes(8, n_in < 16384 ? 16384 : n_in);
        if ((st = rf_gpu_alloc(g->ctx, cap, &g->xq))) return st;
        g->xq_cap = cap;
        g->epoch++; /* recorded graphs read the old buffer */
    }
    *ok = true;
    return RF_OK;
}

static void xq_note(gpu_be *g, const void *src, rf_type t, int64_t n_tokens, int64_t n_in) {
    g->xq_src = src;
    g->xq_type = t;
    g->xq_nt = n_tokens;
    g->xq_nin = n_in;
}

/* A product. With fusions on, a decode product with the int8-x form quantizes x once into the
 * backend's xq buffer (or finds it there, made by rmsnorm_for) and the next products of the
 * same x (Q, K, V; gate, up) reuse it: one activation-quantization kernel where three (or two)
 * ran. A recording that would need a larger buffer falls back to the whole product. */
static rf_status g_matmul(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, int64_t n_tokens) {
    gpu_be *g = G(be);
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    rf_status st;
    if (shares_xq(g, w->type, n_tokens, n_in)) {
        const bool hit = g->xq_src == x->data && g->xq_type == w->type && g->xq_nt == n_tokens && g->xq_nin == n_in;
        if (!hit) {
            bool ok;
            g->xq_src = NULL;
            if ((st = xq_room(g, n_tokens, n_in, &ok))) return st;
            if (ok) {
                if ((st = rf_gpu_quantize_x(g->ctx, g->xq, w->type, x->data, n_tokens, n_in))) return st;
                xq_note(g, x->data, w->type, n_tokens, n_in);
            }
        }
        if (g->xq_src) {
            st = rf_gpu_gemv_xq(g->ctx, y->data, w->data, w->type, g->xq, n_tokens, n_in, n_out);
            if (y->data == g->xq_src) g->xq_src = NULL;
            return st;
        }
    }
    if (y->data == g->xq_src) g->xq_src = NULL;
    return rf_gpu_matmul(g->ctx, y->data, w->data, w->type, x->data, n_tokens, n_in, n_out);
}

static rf_status g_add_bias(rf_backend *be, rf_tensor *y, const rf_tensor *b, int64_t rows, int64_t n) {
    return rf_gpu_add_bias(GX(be)->ctx, y->data, b->data, rows, n);
}

static rf_status g_rmsnorm(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w, int64_t rows,
                           int64_t n, float eps) {
    return rf_gpu_rmsnorm(GX(be)->ctx, y->data, x->data, w ? w->data : NULL, rows, n, eps);
}

/* [x += res, then] rmsnorm whose output the product of `next` reads: with fusions on and that
 * product taking int8 x, one kernel writes y and its quantization for next's type (g_matmul
 * finds it); the residual add is always in the norm's kernel */
static rf_status g_rmsnorm_for(rf_backend *be, rf_tensor *y, rf_tensor *x, const rf_tensor *res, const rf_tensor *w,
                               int64_t rows, int64_t n, float eps, const rf_tensor *next) {
    gpu_be *g = GX(be);
    if (res && !g->fuse) { /* the unfused composition, for A/B runs */
        rf_status st = rf_gpu_add(g->ctx, x->data, x->data, res->data, rows * n);
        if (st) return st;
        res = NULL;
    }
    if (next && n <= 16384 && shares_xq(g, next->type, rows, n)) {
        bool ok;
        rf_status st = xq_room(g, rows, n, &ok);
        if (st) return st;
        if (ok) {
            if ((st = rf_gpu_rmsnorm_quantize_x(g->ctx, y->data, g->xq, next->type, x->data, res ? res->data : NULL,
                                                w ? w->data : NULL, rows, n, eps)))
                return st;
            xq_note(g, y->data, next->type, rows, n);
            return RF_OK;
        }
    }
    if (res && n <= 16384)
        return rf_gpu_add_rmsnorm(g->ctx, y->data, x->data, res->data, w ? w->data : NULL, rows, n, eps);
    if (res) {
        rf_status st = rf_gpu_add(g->ctx, x->data, x->data, res->data, rows * n);
        if (st) return st;
    }
    return rf_gpu_rmsnorm(g->ctx, y->data, x->data, w ? w->data : NULL, rows, n, eps);
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
    if (kc->type != vc->type || (kc->type != RF_TYPE_F16 && kc->type != RF_TYPE_F32 && kc->type != RF_TYPE_Q8_0))
        return rf_set_error(RF_ERR_UNSUPPORTED, "the GPU KV cache holds f16, f32 or q8_0 (not %s)",
                            rf_type_name(kc->type));
    const int64_t sq = (int64_t)(q->nb1 / 4), sk = (int64_t)(k->nb1 / 4), sv = (int64_t)(v->nb1 / 4);
    const bool packed = sq == n_head * head_dim && sk == n_head_kv * head_dim && sv == n_head_kv * head_dim;
    if (!g->fuse && packed && q_out->data == q->data) { /* the unfused composition, for A/B runs */
        rf_status st;
        if ((st = g_rope(be, q, b, n_head, head_dim, n_rot, freq_base, freq_scale, ff, mode, attn_factor)) ||
            (st = g_rope(be, k, b, n_head_kv, head_dim, n_rot, freq_base, freq_scale, ff, mode, attn_factor)) ||
            (st = g_kv_store(be, kc, k, b)))
            return st;
        return g_kv_store(be, vc, v, b);
    }
    return rf_gpu_rope_qkv_append(g->ctx, q_out->data, q->data, sq, n_head, k->data, sk, v->data, sv, b->n_tokens,
                                  n_head_kv, head_dim, n_rot, dev_of(b)->pos, dev_of(b)->slot, freq_base, freq_scale,
                                  ff ? ff->data : NULL, mode, attn_factor, kc->data, vc->data, kc->type, kc->ne[1]);
}

static rf_status g_copy_rows(rf_backend *be, rf_tensor *t, int64_t dst0, int64_t src0, int64_t n) {
    if (n < 0 || dst0 < 0 || src0 < 0 || dst0 + n > t->ne[1] || src0 + n > t->ne[1] ||
        (dst0 < src0 + n && src0 < dst0 + n))
        return rf_set_error(RF_ERR_RANGE, "copy_rows %lld -> %lld (%lld rows) in a tensor of %lld rows",
                            (long long)src0, (long long)dst0, (long long)n, (long long)t->ne[1]);
    return rf_gpu_copy(GX(be)->ctx, (char *)t->data + (size_t)dst0 * t->nb1, (const char *)t->data + (size_t)src0 * t->nb1,
                       (size_t)n * t->nb1);
}

/* Prompt runs (tokens of one sequence at consecutive positions, consecutive in the batch) of at
 * least this many tokens take the tensor-core prefill kernel; decode tokens and shorter runs the
 * paged-attention kernel (CUDA cores, batch-invariant bit for bit). */
#define RF_FLASH_MIN_RUN 16

/* The paged-attention kernel over tokens [t0, t1) of the batch. */
static rf_status attn_paged(gpu_be *g, float *out, const float *q, const rf_tensor *k, const rf_tensor *v,
                            const rf_batch *b, int64_t t0, int64_t t1, int64_t n_head, int64_t n_head_kv,
                            int64_t head_dim, float scale, int64_t window, float softcap, const float *sinks) {
    if (t1 <= t0) return RF_OK;
    const gpu_batch *d = dev_of(b);
    const int64_t row = n_head * head_dim;
    return rf_gpu_paged_attention(g->ctx, out + t0 * row, q + t0 * row, k->data, v->data, k->type, t1 - t0,
                                  d->pos + t0, d->seq + t0, d->table, b->max_blocks, b->block_size, n_head,
                                  n_head_kv, head_dim, scale, window, softcap, d->max_pos, sinks);
}

/* Attention of a step. An eager step (prompt chunks; graph steps are decode tokens only) finds
 * its prompt runs on the host and gives the long ones to rf_gpu_flash_prefill, the tokens
 * between them to rf_gpu_paged_attention in one call per stretch. A token's output in a run
 * does not depend on how its prompt was chunked (the kernel's contract), but differs in rounding
 * from the same token computed by the paged kernel (docs/gpu.md, "Batch invariance"). */
static rf_status g_attention(rf_backend *be, rf_tensor *out, const rf_tensor *q, const rf_tensor *k, const rf_tensor *v,
                             const rf_batch *b, int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                             int64_t window, float softcap, const rf_tensor *sinks) {
    NEED_DEV(b, "attention");
    const float *sk = sinks ? (const float *)sinks->data : NULL;
    gpu_be *g = GX(be);
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

static rf_status g_glu(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up, int64_t n,
                       rf_glu_kind kind) {
    if (kind == RF_GLU_SWIGLU) return rf_gpu_swiglu(GX(be)->ctx, y->data, gate->data, up->data, n);
    if (kind == RF_GLU_SWIGLU_OAI) return rf_gpu_swiglu_oai(GX(be)->ctx, y->data, gate->data, n, up->data, n, 1, n);
    return rf_gpu_geglu(GX(be)->ctx, y->data, gate->data, up->data, n);
}

/* glu whose output the product of `next` reads: with fusions on and that product taking int8
 * x, one kernel writes y and its quantization for next's type (as g_rmsnorm_for); gate and up
 * may be the strided halves of one joined gate/up product */
static rf_status g_glu_for(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up, int64_t n,
                           rf_glu_kind kind, const rf_tensor *next) {
    gpu_be *g = GX(be);
    const int64_t k = next ? next->ne[0] : 0, rows = k > 0 ? n / k : 0;
    const int64_t gs = (int64_t)(gate->nb1 / 4), us = (int64_t)(up->nb1 / 4);
    if (kind == RF_GLU_SWIGLU_OAI) { /* no fused quantize for it: the product quantizes y itself */
        if (k > 0 && rows * k == n && (gs != k || us != k))
            return rf_gpu_swiglu_oai(g->ctx, y->data, gate->data, gs, up->data, us, rows, k);
        return g_glu(be, y, gate, up, n, kind);
    }
    if (k > 0 && rows * k == n && shares_xq(g, next->type, rows, k)) {
        bool ok;
        rf_status st = xq_room(g, rows, k, &ok);
        if (st) return st;
        if (ok) {
            if ((st = rf_gpu_glu_quantize_x(g->ctx, y->data, g->xq, next->type, kind == RF_GLU_GEGLU, gate->data, gs,
                                            up->data, us, rows, k)))
                return st;
            xq_note(g, y->data, next->type, rows, k);
            return RF_OK;
        }
    }
    if (k > 0 && rows * k == n && (gs != k || us != k))
        return rf_gpu_glu_rows(g->ctx, y->data, gate->data, gs, up->data, us, rows, k, kind == RF_GLU_GEGLU);
    return g_glu(be, y, gate, up, n, kind);
}

/* Joins weights row-wise into one allocation (a product of the joined weight computes all of
 * them); the parts become views. Each part's bytes must keep the next part 256-byte aligned
 * (the GEMV kernels' 16-byte loads, and rf_gpu_alloc's alignment), else RF_ERR_UNSUPPORTED. */
static rf_status g_weight_join(rf_backend *be, rf_tensor **parts, int n_parts, rf_tensor *whole) {
    gpu_be *g = GX(be);
    memset(whole, 0, sizeof *whole);
    if (!g->fuse || n_parts < 2) return RF_ERR_UNSUPPORTED;
    int64_t rows = 0;
    for (int i = 0; i < n_parts; i++) {
        const rf_tensor *p = parts[i];
        if (!p->data || !p->owned || p->type != parts[0]->type || p->ne[0] != parts[0]->ne[0] ||
            p->nb1 != parts[0]->nb1 || ((size_t)p->ne[1] * p->nb1) % 256)
            return RF_ERR_UNSUPPORTED;
        rows += p->ne[1];
    }
    rf_status st = g_alloc(be, parts[0]->type, parts[0]->ne[0], rows, whole);
    if (st) return st;
    size_t off = 0;
    for (int i = 0; i < n_parts && !st; i++) {
        const size_t bytes = (size_t)parts[i]->ne[1] * parts[i]->nb1;
        st = rf_gpu_copy(g->ctx, (char *)whole->data + off, parts[i]->data, bytes);
        off += bytes;
    }
    if (!st) st = rf_gpu_sync(g->ctx);
    if (st) {
        g_free(be, whole);
        return st;
    }
    off = 0;
    for (int i = 0; i < n_parts; i++) {
        const size_t bytes = (size_t)parts[i]->ne[1] * parts[i]->nb1;
        rf_gpu_free(g->ctx, parts[i]->data);
        parts[i]->data = (char *)whole->data + off;
        parts[i]->owned = false;
        off += bytes;
    }
    return RF_OK;
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

/* Penalizes and samples on the device with the records batch_upload sent, and brings back only
 * the ids. In a recorded step all of it (and the forward before it) is one graph: recorded
 * the first time, launched every time. */
static rf_status g_sample(rf_backend *be, const rf_tensor *logits, const rf_batch *b, int32_t *ids_out) {
    gpu_be *g = GX(be);
    NEED_DEV(b, "sample");
    const gpu_batch *d = dev_of(b);
    size_t n = (size_t)b->n_sample;
    rf_status st;
    if (g->mode == RF_GRAPH_REPLAY) {
        g->n_launch++;
        g->n_down++; /* inside the graph */
        if ((st = rf_gpu_graph_launch(g->ctx, g->graphs[g->cur].exec))) return st;
    } else {
        if ((st = rf_gpu_sample_rows(g->ctx, d->d_ids, logits->data, (int64_t)n, logits->ne[0], d->rows, d->pen_ids,
                                     d->pen_counts, d->any_penalty))) {
            drop_capture(g);
            return st;
        }
        g->n_down++;
        if (g->mode == RF_GRAPH_NONE) return rf_gpu_download(g->ctx, ids_out, d->d_ids, n * 4);
        /* recording: the ids go to pinned memory inside the graph; then run it for this step */
        if ((st = rf_gpu_download_async(g->ctx, d->h_ids, d->d_ids, n * 4))) {
            drop_capture(g);
            return st;
        }
        void *x = NULL;
        g->mode = RF_GRAPH_NONE;
        if ((st = rf_gpu_capture_end(g->ctx, &x))) return st;
        g->graphs[g->cur].exec = x;
        g->graphs[g->cur].epoch = g->epoch;
        g->graphs[g->cur].scratch_at = rf_gpu_scratch_base(g->ctx);
        g->n_launch++;
        if ((st = rf_gpu_graph_launch(g->ctx, x))) return st;
    }
    g->mode = RF_GRAPH_NONE;
    if ((st = rf_gpu_sync(g->ctx))) return st;
    memcpy(ids_out, d->h_ids, n * 4);
    return RF_OK;
}

static void drop_graphs(gpu_be *g) {
    for (int i = 0; i < g->n_graphs; i++) graph_free(g->graphs[i].exec);
    g->n_graphs = 0;
}

static int g_graph_begin(rf_backend *be, const void *owner, int key) {
    gpu_be *g = GX(be);
    drop_capture(g);
    if (owner != g->owner) { /* another engine's buffers */
        drop_graphs(g);
        g->owner = owner;
    }
    int i = 0;
    while (i < g->n_graphs && g->graphs[i].key != key) i++;
    if (i == g->n_graphs) {
        if (g->n_graphs == RF_MAX_GRAPHS) return RF_GRAPH_NONE;
        memset(&g->graphs[i], 0, sizeof g->graphs[i]);
        g->graphs[i].key = key;
        g->n_graphs++;
    }
    if (g->graphs[i].exec &&
        (g->graphs[i].epoch != g->epoch || g->graphs[i].scratch_at != rf_gpu_scratch_base(g->ctx))) {
        graph_free(g->graphs[i].exec); /* buffers it recorded have moved */
        g->graphs[i].exec = NULL;
        g->graphs[i].seen = 0;
    }
    g->cur = i;
    if (g->graphs[i].exec) return g->mode = RF_GRAPH_REPLAY;
    /* the first step of a shape runs eagerly (it sizes the scratch arena and the buffers);
     * the second is recorded */
    if (g->graphs[i].seen++ == 0) return g->mode = RF_GRAPH_NONE;
    if (pin_settle(g)) return g->mode = RF_GRAPH_NONE;
    if (g->lead ? g->lead->mode != RF_GRAPH_CAPTURE || rf_gpu_capture_fork(g->lead->ctx, g->ctx)
                : rf_gpu_capture_begin(g->ctx) != RF_OK)
        return g->mode = RF_GRAPH_NONE;
    return g->mode = RF_GRAPH_CAPTURE;
}

static void g_graph_abort(rf_backend *be) { drop_capture(G(be)); }

/* Batch-invariant mode: every product on MMQ (rf_gpu_set_batch_invariant) and attention on the
 * paged kernel only (the flash prefill's rounding differs from the decode step's); the
 * recorded graphs hold the other routing, so they go. */
static rf_status g_set_batch_invariant(rf_backend *be, bool on) {
    gpu_be *g = GX(be);
    drop_capture(g);
    drop_graphs(g);
    rf_gpu_set_batch_invariant(g->ctx, on);
    g->invariant = on;
    return RF_OK;
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

void rf_backend_gpu_counters(rf_backend *be, int64_t *uploads, int64_t *downloads, int64_t *launches) {
    gpu_be *g = G(be);
    *uploads = g->n_up;
    *downloads = g->n_down;
    *launches = g->n_launch;
}

static void g_destroy(rf_backend *be) {
    if (!be) return;
    gpu_be *g = G(be);
    if (g) {
        drop_capture(g);
        drop_graphs(g);
        if (g->ctx) rf_gpu_sync(g->ctx);
        rf_gpu_host_free(g->pin);
        rf_gpu_fence_destroy(g->pin_fence);
        if (g->ctx) {
            rf_gpu_free(g->ctx, g->dmeta);
            rf_gpu_free(g->ctx, g->xq);
            rf_gpu_destroy(g->ctx);
        }
        free(g);
    }
    free(be);
}

static const rf_backend_ops gpu_ops = {
    .name = "gpu",
    .alloc = g_alloc,
    .free = g_free,
    .weight = g_weight,
    .weight_join = g_weight_join,
    .read_rows = g_read_rows,
    .batch_upload = g_batch_upload,
    .get_rows = g_get_rows,
    .matmul = g_matmul,
    .add_bias = g_add_bias,
    .rmsnorm = g_rmsnorm,
    .rmsnorm_for = g_rmsnorm_for,
    .rope = g_rope,
    .kv_store = g_kv_store,
    .rope_store = g_rope_store,
    .copy_rows = g_copy_rows,
    .attention = g_attention,
    .gather_rows = g_gather_rows,
    .glu = g_glu,
    .glu_for = g_glu_for,
    .moe_route = g_moe_route,
    .matmul_id = g_matmul_id,
    .moe_combine = g_moe_combine,
    .ssm_conv = rf_gpu_op_ssm_conv, /* gated DeltaNet: gpu_backend_deltanet.c */
    .gated_delta = rf_gpu_op_gated_delta,
    .sigmoid_mul = rf_gpu_op_sigmoid_mul,
    .head_split = rf_gpu_op_head_split,
    .add = g_add,
    .scale = g_scale,
    .softcap = g_softcap,
    .sample = g_sample,
    .graph_begin = g_graph_begin,
    .graph_abort = g_graph_abort,
    .set_batch_invariant = g_set_batch_invariant,
    .destroy = g_destroy,
};

rf_status rf_backend_gpu_new(int device, rf_backend **out) {
    *out = NULL;
    rf_backend *be = calloc(1, sizeof *be);
    gpu_be *g = calloc(1, sizeof *g);
    if (!be || !g) {
        free(be);
        free(g);
        return rf_set_error(RF_ERR_OOM, "GPU backend: out of memory");
    }
    rf_status st = rf_gpu_init(device, &g->ctx);
    if (st) {
        free(be);
        free(g);
        return st;
    }
    g->device = device;
    g->fuse = !rf_knob_bool(RF_KNOB_GPU_UNFUSED);
    g->flash = rf_knob_bool(RF_KNOB_GPU_FLASH);
    be->ops = &gpu_ops;
    be->impl = g;
    *out = be;
    return RF_OK;
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

/* A split over several GPUs (docs/tp.md): the GPUs other than the sampling one have no sample
 * op to end their part of a recorded step; this does, right before the sampling GPU's sample.
 * A follower (rf_backend_gpu_set_lead): CAPTURE joins its stream back into the lead's
 * recording, so the lead's graph holds its step; REPLAY does nothing (batch_upload has filled
 * the pinned buffer the lead's graph copies from; the lead's sample launches it all). A GPU with
 * graphs of its own: CAPTURE ends the recording and launches it, REPLAY launches it. */
rf_status rf_backend_gpu_graph_run(rf_backend *be) {
    gpu_be *g = G(be);
    const int mode = g->mode;
    g->mode = RF_GRAPH_NONE;
    if (g->lead) {
        if (mode != RF_GRAPH_CAPTURE) return RF_OK;
        rf_status st = rf_gpu_capture_join(g->lead->ctx, g->ctx);
        if (st) return st;
        g->graphs[g->cur].exec = IN_LEAD;
        g->graphs[g->cur].epoch = g->epoch;
        g->graphs[g->cur].scratch_at = rf_gpu_scratch_base(g->ctx);
        return RF_OK;
    }
    if (mode == RF_GRAPH_CAPTURE) {
        void *x = NULL;
        rf_status st = rf_gpu_capture_end(g->ctx, &x);
        if (st) return st;
        g->graphs[g->cur].exec = x;
        g->graphs[g->cur].epoch = g->epoch;
        g->graphs[g->cur].scratch_at = rf_gpu_scratch_base(g->ctx);
    } else if (mode != RF_GRAPH_REPLAY) {
        return RF_OK;
    }
    g->n_launch++;
    return rf_gpu_graph_launch(g->ctx, g->graphs[g->cur].exec);
}

void rf_backend_gpu_drop_graphs(rf_backend *be) {
    gpu_be *g = G(be);
    drop_capture(g);
    drop_graphs(g);
}

void rf_backend_gpu_set_lead(rf_backend *be, rf_backend *lead) {
    gpu_be *g = G(be);
    drop_capture(g);
    drop_graphs(g);
    g->lead = lead ? G(lead) : NULL;
}

/* Waits for the last eager copy out of the pinned buffer (pin_settle), so that graph_begin on
 * several GPUs makes no host wait while another GPU's recording is open in this thread. */
rf_status rf_backend_gpu_settle(rf_backend *be) { return pin_settle(G(be)); }
