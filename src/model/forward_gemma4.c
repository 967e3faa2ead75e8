/* forward_gemma4.c — gemma4's layer (docs/ARCHITECTURE.md §4.9): attention with the layer's own
 * head size, KV heads and RoPE (partial on full layers through rope_freqs), V RMS-normed, shared-KV
 * layers reading an earlier layer's cache; post-norms; the GeGLU feed-forward; the per-layer
 * embedding block; the layer output scale. What is computed follows llama.cpp's
 * src/models/gemma4.cpp; every step is a backend.h op. */
#include <math.h>

#include "model/model.h"
#include "rocmforge/quant.h"

#define TRY(call)                     \
    do {                              \
        rf_status st_ = (call);       \
        if (st_) return st_;          \
    } while (0)

/* the first n rows of t as packed rows of w floats (t holds at least n * w) */
static rf_tensor packed(const rf_tensor *t, int64_t w, int64_t n) {
    rf_tensor v = *t;
    v.ne[0] = w;
    v.ne[1] = n;
    v.nb1 = (size_t)w * 4;
    v.owned = false;
    return v;
}

/* rows [r0, r0 + n) of f32 t as packed rows of w */
static rf_tensor rows_of(const rf_tensor *t, int64_t r0, int64_t w, int64_t n) {
    rf_tensor v = packed(t, w, n);
    v.data = (char *)t->data + (size_t)r0 * w * 4;
    return v;
}

/* Per-layer inputs (gemma4's get_per_layer_inputs + project_per_layer_inputs): for layer il,
 * the token's slice il of per_layer_token_embd times sqrt(P), plus the RMS-normed slice il of
 * per_layer_model_proj . x / sqrt(n_embd) (x: the scaled embeddings), all times 1/sqrt(2). The
 * embedding slice is read as a strided view of the table (rows of n_layer * P, columns
 * [il * P, (il + 1) * P)): the CPU's get_rows reads rows at w->nb1; a device backend's does not
 * (yet), so a device is refused. */
rf_status rf_gemma4_ple(rf_model *m, rf_fwd *f, const rf_batch *b, int64_t n) {
    const rf_hparams *hp = &m->hp;
    const int64_t P = hp->n_embd_ple, E = hp->n_embd;
    if (P == 0) return RF_OK;
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    if (rf_backend_on_device(be))
        return rf_set_error(RF_ERR_UNSUPPORTED, "forward: gemma4's per-layer embeddings are not built on %s yet", op->name);
    size_t col;
    TRY(rf_row_size(m->ple_embd.type, P, &col));
    rf_tensor g = packed(&f->ple_g, P, n);
    for (int il = 0; il < hp->n_layer; il++) {
        rf_tensor pl = rows_of(&f->ple, (int64_t)il * f->n_batch, P, n);
        rf_tensor emb = m->ple_embd; /* columns of layer il, rows of the whole table's stride */
        emb.data = (char *)emb.data + (size_t)il * col;
        emb.ne[0] = P;
        emb.owned = false;
        TRY(op->get_rows(be, &pl, &emb, b));
        TRY(op->scale(be, &pl, sqrtf((float)P), n * P));
        rf_tensor w = rf_tensor_rows(&m->ple_model_proj, (int64_t)il * P, P);
        TRY(op->matmul(be, &g, &w, &f->x, n));
        TRY(op->scale(be, &g, 1.0f / sqrtf((float)E), n * P));
        TRY(op->rmsnorm(be, &g, &g, &m->ple_proj_norm, n, P, hp->norm_eps));
        TRY(op->add(be, &pl, &pl, &g, n * P));
        TRY(op->scale(be, &pl, 1.0f / sqrtf(2.0f), n * P));
    }
    return RF_OK;
}

/* Attention: Q (per-head RMSNorm, RoPE); on a layer with its own KV, K (norm, RoPE) and V (the
 * V product, or the K product where the file has no attn_v; RMS-normed without a gain) into the
 * layer's cache; attention over the cache of L->kv_layer (scale 1, the window on sliding layers),
 * the output product into f->o. */
static rf_status attention(rf_model *m, rf_fwd *f, const rf_batch *b, int il, int64_t n) {
    const rf_hparams *hp = &m->hp;
    const rf_layer *L = &m->layers[il];
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    const int64_t H = hp->n_head, HKV = L->n_head_kv, D = L->head_dim;
    /* full layers: rope_freqs makes the rotation partial (its factors past the rotated pairs
     * are huge, so those pairs stay still) */
    const rf_tensor *ff = !L->is_swa && rf_has(&m->rope_freqs) ? &m->rope_freqs : NULL;
    rf_tensor q = packed(&f->q, H * D, n), att = packed(&f->att, H * D, n);
    TRY(op->matmul(be, &q, &L->wq, &f->h, n));
    TRY(op->rmsnorm(be, &q, &q, &L->q_norm, n * H, D, hp->norm_eps));
    TRY(op->rope(be, &q, b, H, D, L->n_rot, L->rope_base, L->rope_scale, ff, hp->rope_mode, 1.0f));
    if (L->kv_layer == il) {
        rf_tensor k = packed(&f->k, HKV * D, n), v = packed(&f->v, HKV * D, n);
        TRY(op->matmul(be, &k, &L->wk, &f->h, n));
        TRY(op->matmul(be, &v, rf_has(&L->wv) ? &L->wv : &L->wk, &f->h, n));
        TRY(op->rmsnorm(be, &k, &k, &L->k_norm, n * HKV, D, hp->norm_eps));
        TRY(op->rmsnorm(be, &v, &v, NULL, n * HKV, D, hp->norm_eps));
        TRY(op->rope(be, &k, b, HKV, D, L->n_rot, L->rope_base, L->rope_scale, ff, hp->rope_mode, 1.0f));
        TRY(op->kv_store(be, &f->kc[il], &k, b));
        TRY(op->kv_store(be, &f->vc[il], &v, b));
    }
    TRY(op->attention(be, &att, &q, &f->kc[L->kv_layer], &f->vc[L->kv_layer], b, H, HKV, D, hp->attn_scale,
                      L->is_swa ? hp->n_swa : 0, 0.0f, NULL));
    return op->matmul(be, &f->o, &L->wo, &att, n);
}

rf_status rf_gemma4_layer(rf_model *m, rf_fwd *f, const rf_batch *b, int il, int64_t n) {
    const rf_hparams *hp = &m->hp;
    const rf_layer *L = &m->layers[il];
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    const int64_t E = hp->n_embd, F = hp->n_ff, P = hp->n_embd_ple;
    if (m->tp > 1) return rf_set_error(RF_ERR_UNSUPPORTED, "forward: gemma4 cannot be split (--tp)");
    /* attention block: x += post_norm(attn(norm(x))) */
    TRY(op->rmsnorm(be, &f->h, &f->x, &L->attn_norm, n, E, hp->norm_eps));
    TRY(attention(m, f, b, il, n));
    TRY(op->rmsnorm(be, &f->o, &f->o, &L->attn_post_norm, n, E, hp->norm_eps));
    TRY(op->add(be, &f->x, &f->x, &f->o, n * E));
    /* feed-forward: x += post_norm(down(gelu(gate h) * up h)), h = norm(x) */
    rf_tensor g = packed(&f->g, F, n), u = packed(&f->u, F, n);
    TRY(op->rmsnorm(be, &f->h, &f->x, &L->ffn_norm, n, E, hp->norm_eps));
    TRY(op->matmul(be, &g, &L->ffn_gate, &f->h, n));
    TRY(op->matmul(be, &u, &L->ffn_up, &f->h, n));
    TRY(op->glu(be, &g, &g, &u, n * F, RF_GLU_GEGLU));
    TRY(op->matmul(be, &f->o, &L->ffn_down, &g, n));
    TRY(op->rmsnorm(be, &f->o, &f->o, &L->ffn_post_norm, n, E, hp->norm_eps));
    TRY(op->add(be, &f->x, &f->x, &f->o, n * E));
    /* per-layer embedding: x += norm(proj(gelu(gate x) * per-layer input)) */
    if (P > 0) {
        rf_tensor pg = packed(&f->ple_g, P, n), pl = rows_of(&f->ple, (int64_t)il * f->n_batch, P, n);
        TRY(op->matmul(be, &pg, &L->ple_gate, &f->x, n));
        TRY(op->glu(be, &pg, &pg, &pl, n * P, RF_GLU_GEGLU));
        TRY(op->matmul(be, &f->o, &L->ple_proj, &pg, n));
        TRY(op->rmsnorm(be, &f->o, &f->o, &L->ple_norm, n, E, hp->norm_eps));
        TRY(op->add(be, &f->x, &f->x, &f->o, n * E));
    }
    if (L->out_scale != 1.0f) TRY(op->scale(be, &f->x, L->out_scale, n * E));
    return RF_OK;
}
