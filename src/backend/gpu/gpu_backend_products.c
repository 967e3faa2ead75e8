/* gpu_backend_products.c — the GPU backend's products (matmul) and the ops that hand a product
 * its quantized activation (rmsnorm_for, glu_for: one quantization shared by the products of one
 * x), and weight_join (Q/K/V and gate/up as one weight). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gpu/gpu_be.h"
#include "backend/gpu/gpu_tp_p2p.h"
#include "core/knobs.h"
#include "rocmforge/quant.h"


/* whether the product of (type, n_in) for n_tokens has the int8-x form whose quantized x one
 * kernel can make for several products (a GEMV call or, with RF_GPU_MMQ_XQ, MMQ); gemv_only: the
 * GEMV's alone (the tensor-parallel norm, whose quantizer has no per-256 form) */
static bool shares_xq(gpu_be *g, rf_type t, int64_t n_tokens, int64_t n_in, bool gemv_only) {
    return g->fuse && rf_gpu_gemv_has_xq(g->ctx, t, n_tokens, n_in) &&
           (!gemv_only || !rf_gpu_mmq_takes(g->ctx, t, n_tokens, n_in));
}

/* a backend-owned buffer (*buf, *cap bytes) made at least need bytes (want where it grows);
 * false (and no error) where it would have to grow inside a graph recording (no allocation may be
 * recorded) */
static rf_status grow_room(gpu_be *g, void **buf, size_t *cap, size_t need, size_t want, bool *ok) {
    *ok = false;
    if (need > *cap) {
        if (g->mode == RF_GRAPH_CAPTURE) return RF_OK;
        rf_status st = rf_gpu_sync(g->ctx); /* the old buffer may still be read */
        if (st) return st;
        rf_gpu_free(g->ctx, *buf);
        *buf = NULL;
        *cap = 0;
        if ((st = rf_gpu_alloc(g->ctx, want, buf))) return st;
        *cap = want;
        g->epoch++; /* recorded graphs read the old buffer */
    }
    *ok = true;
    return RF_OK;
}

/* the xq buffer large enough for n_tokens x n_in (grow_room's false inside a recording). One GEMV
 * call takes up to 16 tokens (gemv_mt): it grows with room for them, so a step's graph recording
 * does not fall back for lack of it. */
static rf_status xq_room(gpu_be *g, int64_t n_tokens, int64_t n_in, bool *ok) {
    return grow_room(g, &g->xq, &g->xq_cap, rf_gpu_xq_bytes(n_tokens, n_in),
                     rf_gpu_xq_bytes(n_tokens > 16 ? n_tokens : 16, n_in < 16384 ? 16384 : n_in), ok);
}

/* The xq buffer a kernel that makes a product's input (a norm, the GLU) quantizes it into for a
 * product of (t, rows, n_in), or NULL where that product shares no int8 x or the buffer cannot
 * grow now (inside a recording): the product then quantizes its x itself. */
static rf_status xq_for(gpu_be *g, rf_type t, int64_t rows, int64_t n_in, bool gemv_only, void **xq) {
    *xq = NULL;
    if (!shares_xq(g, t, rows, n_in, gemv_only)) return RF_OK;
    bool ok;
    const rf_status st = xq_room(g, rows, n_in, &ok);
    if (!st && ok) *xq = g->xq;
    return st;
}

/* the xq buffer holds src quantized for products of type t (n_tokens x n_in), in the layout
 * rf_gpu_xq_layout gives, which products of other types reading the same layout reuse (Q4_K and
 * Q6_K on MMQ: x per 256) */
static rf_status xq_note(gpu_be *g, const void *src, rf_type t, int64_t n_tokens, int64_t n_in) {
    g->xq_src = NULL;
    const rf_status st = rf_gpu_xq_layout(g->ctx, t, n_tokens, n_in, &g->xq_gb, &g->xq_rk);
    if (st) return st;
    g->xq_src = src;
    g->xq_nt = n_tokens;
    g->xq_nin = n_in;
    return RF_OK;
}

/* the parts buffer large enough for an n_tokens x n_out product's split-K partial sums (at most 8
 * splits); false (and no error) for products past decode's sizes (more than 128 tokens) or
 * where it would have to grow inside a graph recording. Sized for the MMQ's most tokens at once,
 * so that a recording finds it large enough. */
static rf_status parts_room(gpu_be *g, int64_t n_tokens, int64_t n_out, bool *ok) {
    *ok = false;
    if (n_tokens > 128) return RF_OK;
    const size_t row = (size_t)8 * (size_t)n_out * sizeof(float);
    return grow_room(g, &g->parts, &g->parts_cap, row * (size_t)n_tokens, row * (size_t)(n_tokens > 96 ? n_tokens : 96),
                     ok);
}

/* A product. With fusions on, a decode product with the int8-x form quantizes x once into the
 * backend's xq buffer (or finds it there, made by rmsnorm_for) and the next products of the
 * same x (Q, K, V; gate, up) reuse it: one activation-quantization kernel where three (or two)
 * ran. A recording that would need a larger buffer falls back to the whole product. */
static rf_status matmul_b(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, const float *bias,
                          int64_t n_tokens, bool to_res) {
    gpu_be *g = G(be);
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    rf_status st;
    if (g->pend_y && (rf_gbe_in_pend(g, x->data) || rf_gbe_in_pend(g, y->data))) {
        g->pend_y = NULL;
        return rf_set_error(RF_ERR_INTERNAL, "GPU matmul: a product's split-K sums still wait for the op that "
                                             "reads them (matmul_sum_next)");
    }
    if (gbe_skip(RF_SKIP_MATMUL)) return RF_OK;
    if (shares_xq(g, w->type, n_tokens, n_in, false)) {
        int gb, rk;
        if ((st = rf_gpu_xq_layout(g->ctx, w->type, n_tokens, n_in, &gb, &rk))) return st;
        const bool hit = g->xq_src == x->data && g->xq_gb == gb && g->xq_rk == rk && g->xq_nt == n_tokens &&
                         g->xq_nin == n_in;
        if (!hit) {
            bool ok;
            g->xq_src = NULL;
            if ((st = xq_room(g, n_tokens, n_in, &ok))) return st;
            if (ok) {
                if ((st = rf_gpu_quantize_x(g->ctx, g->xq, w->type, x->data, n_tokens, n_in))) return st;
                if ((st = xq_note(g, x->data, w->type, n_tokens, n_in))) return st;
            }
        }
        if (g->xq_src && to_res && !bias && !g->pend_y && rf_knob_bool(RF_KNOB_GPU_SPLITK_FUSED)) {
            /* the split-K sums left to the op that reads y next (matmul_sum_next) */
            bool ok;
            if ((st = parts_room(g, n_tokens, n_out, &ok))) return st;
            if (ok) {
                int np = 0;
                st = rf_gpu_gemv_xq_parts(g->ctx, y->data, w->data, w->type, g->xq, n_tokens, n_in, n_out,
                                          (float *)g->parts, g->parts_cap, &np);
                if (!st && np > 0) {
                    g->pend_y = y->data;
                    g->pend_np = np;
                    g->pend_n = n_tokens * n_out;
                    g->parts_kept++;
                }
                if (y->data == g->xq_src) g->xq_src = NULL;
                return st;
            }
        }
        if (g->xq_src) {
            st = rf_gpu_gemv_xq_bias(g->ctx, y->data, w->data, w->type, g->xq, bias, n_tokens, n_in, n_out);
            if (y->data == g->xq_src) g->xq_src = NULL;
            return st;
        }
    }
    if (y->data == g->xq_src) g->xq_src = NULL;
    st = rf_gpu_matmul(g->ctx, y->data, w->data, w->type, x->data, n_tokens, n_in, n_out);
    return st || !bias ? st : rf_gpu_add_bias(g->ctx, y->data, bias, n_tokens, n_out);
}
rf_status rf_gbe_matmul(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, int64_t n_tokens) {
    return matmul_b(be, y, w, x, NULL, n_tokens, false);
}
/* the product whose y only the next rmsnorm_for (as res) or rope_store / norm_rope_store (q, k,
 * v as views of y) reads: where it runs on MMQ in splits (RF_GPU_SPLITK_FUSED on), its partial
 * sums wait in g->parts for that op's kernel (one product at a time; a product between reads
 * and writes neither y nor the parts) */
rf_status rf_gbe_matmul_sum_next(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, int64_t n_tokens) {
    return matmul_b(be, y, w, x, NULL, n_tokens, true);
}
/* the product and its bias: in the int8-x GEMV's store where the product takes that path (decode
 * with fusions on), else rf_gpu_add_bias after it */
rf_status rf_gbe_matmul_bias(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, const rf_tensor *b,
                             int64_t n_tokens) {
    if (b->type != RF_TYPE_F32 || b->ne[0] != w->ne[1])
        return rf_set_error(RF_ERR_INVALID_ARG, "matmul_bias: bias of %lld (type %d) for %lld outputs",
                            (long long)b->ne[0], (int)b->type, (long long)w->ne[1]);
    return matmul_b(be, y, w, x, (const float *)b->data, n_tokens, false);
}

/* [x += res, then] rmsnorm whose output the product of `next` reads: with fusions on and that
 * product taking int8 x, one kernel writes y and its quantization for next's type (rf_gbe_matmul
 * finds it); the residual add is always in the norm's kernel. Where res is a matmul_sum_next product
 * whose split-K sums wait (g->pend_y), that kernel adds them (in the reduce's order), else they
 * are summed into res first. */
rf_status rf_gbe_rmsnorm_for(rf_backend *be, rf_tensor *y, rf_tensor *x, const rf_tensor *res, const rf_tensor *w,
                               int64_t rows, int64_t n, float eps, const rf_tensor *next) {
    gpu_be *g = GX(be);
    const float *parts = NULL;
    int np = 1;
    if (g->pend_y) {
        const bool mine = res && res->data == g->pend_y && g->pend_n == rows * n;
        g->pend_y = NULL;
        if (!mine)
            return rf_set_error(RF_ERR_INTERNAL, "GPU rmsnorm_for: a product's split-K sums wait for a norm of "
                                                 "another residual (matmul_sum_next)");
        parts = (const float *)g->parts;
        np = g->pend_np;
    }
    if (parts && !(g->fuse && next && n <= 16384)) { /* a path below without the parts' form: their sum first */
        rf_status st = rf_gpu_sum_parts(g->ctx, res->data, parts, rows * n, np);
        if (st) return st;
        parts = NULL;
        np = 1;
    }
    if (res && !g->fuse) { /* the unfused composition, for A/B runs */
        rf_status st = rf_gpu_add(g->ctx, x->data, x->data, res->data, rows * n);
        if (st) return st;
        res = NULL;
    }
    if (next && n <= 16384) {
        void *xq;
        rf_status st = xq_for(g, next->type, rows, n, false, &xq);
        if (st) return st;
        if (xq) {
            if (!gbe_skip(RF_SKIP_NORM) &&
                (st = rf_gpu_rmsnorm_quantize_x_parts(g->ctx, y->data, xq, next->type, x->data,
                                                      parts ? parts : res ? res->data : NULL, np, w ? w->data : NULL,
                                                      rows, n, eps)))
                return st;
            return xq_note(g, y->data, next->type, rows, n);
        }
        if (parts) { /* no shared x for next: the parts summed, then the plain fused norm */
            if ((st = rf_gpu_sum_parts(g->ctx, res->data, parts, rows * n, np))) return st;
            parts = NULL;
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

/* rmsnorm_for after a split's all-reduce, both in one kernel (rf_gpu_p2p_add_rmsnorm, rank r's
 * share): x += the ranks' partials summed, y = rmsnorm(x) * w and, where next's product takes a
 * shared int8 x (as rmsnorm_for decides), its quantization; part is left as it was */
rf_status rf_gbe_p2p_rmsnorm_for(rf_backend *be, rf_gpu_p2p *p, int rank, rf_tensor *y, rf_tensor *x,
                                 const rf_tensor *part, const rf_tensor *w, int64_t rows, int64_t n, float eps,
                                 const rf_tensor *next) {
    gpu_be *g = GX(be);
    void *xq = NULL;
    rf_status st = next ? xq_for(g, next->type, rows, n, true, &xq) : RF_OK;
    if (st) return st;
    const rf_type t = next ? next->type : RF_TYPE_F32;
    st = rf_gpu_p2p_add_rmsnorm(p, rank, y->data, xq, t, x->data, part->data, w ? w->data : NULL, rows, n, eps);
    if (!st && xq) st = xq_note(g, y->data, t, rows, n);
    return st;
}

/* glu whose output the product of `next` reads: with fusions on and that product taking int8
 * x, one kernel writes y and its quantization for next's type (as rf_gbe_rmsnorm_for); gate and up
 * may be the strided halves of one joined gate/up product */
rf_status rf_gbe_glu_for(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up, int64_t n,
                           rf_glu_kind kind, const rf_tensor *next) {
    gpu_be *g = GX(be);
    const int64_t k = next ? next->ne[0] : 0, rows = k > 0 ? n / k : 0;
    const int64_t gs = (int64_t)(gate->nb1 / 4), us = (int64_t)(up->nb1 / 4);
    if (kind == RF_GLU_SWIGLU_OAI) { /* no fused quantize for it: the product quantizes y itself */
        if (k > 0 && rows * k == n && (gs != k || us != k))
            return rf_gpu_swiglu_oai(g->ctx, y->data, gate->data, gs, up->data, us, rows, k);
        return rf_gbe_glu(be, y, gate, up, n, kind);
    }
    if (k > 0 && rows * k == n) {
        void *xq;
        rf_status st = xq_for(g, next->type, rows, k, false, &xq);
        if (st) return st;
        if (xq) {
            if (!gbe_skip(RF_SKIP_GLU) &&
                (st = rf_gpu_glu_quantize_x(g->ctx, y->data, xq, next->type, kind == RF_GLU_GEGLU, gate->data, gs,
                                            up->data, us, rows, k)))
                return st;
            return xq_note(g, y->data, next->type, rows, k);
        }
    }
    if (k > 0 && rows * k == n && (gs != k || us != k))
        return rf_gpu_glu_rows(g->ctx, y->data, gate->data, gs, up->data, us, rows, k, kind == RF_GLU_GEGLU);
    return rf_gbe_glu(be, y, gate, up, n, kind);
}

/* Joins weights row-wise into one allocation (a product of the joined weight computes all of
 * them); the parts become views. Each part's bytes must keep the next part 256-byte aligned
 * (the GEMV kernels' 16-byte loads, and rf_gpu_alloc's alignment), else RF_ERR_UNSUPPORTED. */
rf_status rf_gbe_weight_join(rf_backend *be, rf_tensor **parts, int n_parts, rf_tensor *whole) {
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
    rf_status st = rf_gbe_alloc(be, parts[0]->type, parts[0]->ne[0], rows, whole);
    if (st) return st;
    size_t off = 0;
    for (int i = 0; i < n_parts && !st; i++) {
        const size_t bytes = (size_t)parts[i]->ne[1] * parts[i]->nb1;
        st = rf_gpu_copy(g->ctx, (char *)whole->data + off, parts[i]->data, bytes);
        off += bytes;
    }
    if (!st) st = rf_gpu_sync(g->ctx);
    if (st) {
        rf_gbe_free(be, whole);
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
