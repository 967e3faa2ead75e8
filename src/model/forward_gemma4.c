/* forward_gemma4.c — gemma4's layer (docs/ARCHITECTURE.md §4.9): attention with the layer's own
 * head size, KV heads and RoPE (partial on full layers through rope_freqs), V RMS-normed, shared-KV
 * layers reading an earlier layer's cache; post-norms; the GeGLU feed-forward (on MoE layers with
 * the experts beside it); the per-layer embedding block; the layer output scale. What is computed
 * follows llama.cpp's src/models/gemma4.cpp; every step is a backend.h op. */
#include <math.h>

#include "model/model.h"

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

/* With o (not NULL): o = rmsnorm(o) * w_o, x = (x + o) * s; with y (not NULL): y = rmsnorm(x) * w_y * s_y
 * (w_y NULL: no gain). One op where the backend fuses them (the GPU: one kernel per row), else
 * the ops in that order, so the CPU computes what the unfused layer did. */
static rf_status add_norm(rf_model *m, rf_tensor *x, rf_tensor *o, const rf_tensor *w_o, float s, rf_tensor *y,
                          const rf_tensor *w_y, float s_y, int64_t n) {
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    const int64_t E = m->hp.n_embd;
    const float eps = m->hp.norm_eps;
    if (op->add_norm) return op->add_norm(be, x, o, w_o, s, y, w_y, s_y, n, E, eps);
    if (o) {
        TRY(op->rmsnorm(be, o, o, w_o, n, E, eps));
        TRY(op->add(be, x, x, o, n * E));
        if (s != 1.0f) TRY(op->scale(be, x, s, n * E));
    }
    if (y) {
        TRY(op->rmsnorm(be, y, x, w_y, n, E, eps));
        if (s_y != 1.0f) TRY(op->scale(be, y, s_y, n * E));
    }
    return RF_OK;
}

/* Per-layer inputs (gemma4's get_per_layer_inputs + project_per_layer_inputs), token-major
 * in f->ple [n, n_layer * P] (layer il: columns [il * P, (il + 1) * P)): the token's row of
 * per_layer_token_embd times sqrt(P), plus per_layer_model_proj . x / sqrt(n_embd) (x: the
 * scaled embeddings) RMS-normed per layer slice, all times 1/sqrt(2). Whole rows are read, so a
 * slice need not hold whole quantization blocks. */
rf_status rf_gemma4_ple(rf_model *m, rf_fwd *f, const rf_batch *b, int64_t n) {
    const rf_hparams *hp = &m->hp;
    const int64_t P = hp->n_embd_ple, NP = P * hp->n_layer, E = hp->n_embd;
    if (P == 0) return RF_OK;
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    rf_tensor pl = packed(&f->ple, NP, n), g = packed(&f->ple_g, NP, n);
    TRY(op->get_rows(be, &pl, &m->ple_embd, b));
    TRY(op->scale(be, &pl, sqrtf((float)P), n * NP));
    TRY(op->matmul(be, &g, &m->ple_model_proj, &f->x, n));
    TRY(op->scale(be, &g, 1.0f / sqrtf((float)E), n * NP));
    TRY(op->rmsnorm(be, &g, &g, &m->ple_proj_norm, n * hp->n_layer, P, hp->norm_eps));
    TRY(op->add(be, &pl, &pl, &g, n * NP));
    return op->scale(be, &pl, 1.0f / sqrtf(2.0f), n * NP);
}

/* y = gelu(y) * (layer il's slice of the per-layer inputs): glu_for reads the slice in place
 * (a row view of stride n_layer * P) where the backend has it; else one packed row at a time. */
static rf_status ple_gate(rf_model *m, rf_fwd *f, rf_tensor *y, int il, int64_t n) {
    const rf_backend_ops *op = m->be->ops;
    const int64_t P = m->hp.n_embd_ple, NP = P * m->hp.n_layer;
    rf_tensor sl = packed(&f->ple, P, n);
    sl.data = (char *)f->ple.data + (size_t)il * P * 4;
    sl.nb1 = (size_t)NP * 4;
    if (op->glu_for) return op->glu_for(m->be, y, y, &sl, n * P, RF_GLU_GEGLU, &m->layers[il].ple_proj);
    for (int64_t t = 0; t < n; t++) {
        rf_tensor yt = rows_of(y, t, P, 1), ut = packed(&f->ple, P, 1);
        ut.data = (char *)f->ple.data + ((size_t)t * NP + (size_t)il * P) * 4;
        TRY(op->glu(m->be, &yt, &yt, &ut, P, RF_GLU_GEGLU));
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
    if (L->kv_layer == il && op->norm_rope_store) {
        /* the Q, K and V norms, both RoPEs and the cache stores in one op (one GPU launch for seven) */
        rf_tensor k = packed(&f->k, HKV * D, n), v = packed(&f->v, HKV * D, n);
        TRY(op->matmul(be, &k, &L->wk, &f->h, n));
        TRY(op->matmul(be, &v, rf_has(&L->wv) ? &L->wv : &L->wk, &f->h, n));
        TRY(op->norm_rope_store(be, &q, &q, &k, &v, &f->kc[il], &f->vc[il], b, H, HKV, D, L->n_rot, L->rope_base,
                                L->rope_scale, ff, hp->rope_mode, 1.0f, &L->q_norm, &L->k_norm, true, hp->norm_eps));
    } else {
        TRY(op->rmsnorm(be, &q, &q, &L->q_norm, n * H, D, hp->norm_eps));
        TRY(op->rope(be, &q, b, H, D, L->n_rot, L->rope_base, L->rope_scale, ff, hp->rope_mode, 1.0f));
    }
    if (L->kv_layer == il && !op->norm_rope_store) {
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

/* The experts' branch of a MoE layer (llama.cpp's gemma4 graph), added to f->o: the router
 * reads x RMS-normed without a gain, times ffn_gate_inp.scale / sqrt(n_embd) (one rmsnorm with
 * that gain, then the scale); softmax over all experts, the top k renormalised (moe_route); the
 * chosen experts' GeGLU of x normed with pre_ffw_norm_2; their weighted sum, normed with
 * post_ffw_norm_2. f->h is free here (the dense branch is done) and holds the inputs, then the
 * sum. */
static rf_status experts(rf_model *m, rf_fwd *f, int il, int64_t n) {
    const rf_hparams *hp = &m->hp;
    const rf_layer *L = &m->layers[il];
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    const int64_t E = hp->n_embd, K = hp->n_expert_used, NE = hp->n_expert, FE = hp->n_ff_exp;
    TRY(add_norm(m, &f->x, NULL, NULL, 1.0f, &f->h, &L->ffn_gate_inp_s, 1.0f / sqrtf((float)E), n));
    TRY(op->matmul(be, &f->moe_logits, &L->ffn_gate_inp, &f->h, n));
    TRY(op->moe_route(be, &f->moe_ids, &f->moe_wts, &f->moe_logits, NULL, n, NE, K, hp->moe_gating, hp->moe_norm_w,
                      hp->moe_w_scale));
    TRY(op->rmsnorm(be, &f->h, &f->x, &L->ffn_pre_norm_2, n, E, hp->norm_eps));
    TRY(rf_moe_gate_up(be, &f->moe_g, &f->moe_u, &L->ffn_gate_exps, &L->ffn_up_exps, FE, &f->h, &f->moe_ids, NULL,
                       NULL, n, K, RF_GLU_GEGLU));
    TRY(rf_moe_down_sum(be, &f->h, &f->moe_d, &L->ffn_down_exps, E, &f->moe_g, &f->moe_ids, NULL, &f->moe_wts, n, K));
    return add_norm(m, &f->o, &f->h, &L->ffn_post_norm_2, 1.0f, NULL, NULL, 1.0f, n); /* o += post_norm_2(h) */
}

rf_status rf_gemma4_layer(rf_model *m, rf_fwd *f, const rf_batch *b, int il, int64_t n) {
    const rf_hparams *hp = &m->hp;
    const rf_layer *L = &m->layers[il];
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    const int64_t E = hp->n_embd, F = hp->n_ff, P = hp->n_embd_ple;
    if (m->tp > 1) return rf_set_error(RF_ERR_UNSUPPORTED, "forward: gemma4 cannot be split (--tp)");
    /* the next layer's attention norm is made with this layer's last residual add (below): a
     * layer past the first finds h = attn_norm(x) made by the one before it */
    const rf_tensor *next_norm = il + 1 < hp->n_layer ? &m->layers[il + 1].attn_norm : NULL;
    /* attention block: x += post_norm(attn(norm(x))), then h = ffn_norm(x) in the same op */
    if (il == 0) TRY(op->rmsnorm(be, &f->h, &f->x, &L->attn_norm, n, E, hp->norm_eps));
    TRY(attention(m, f, b, il, n));
    TRY(add_norm(m, &f->x, &f->o, &L->attn_post_norm, 1.0f, &f->h, &L->ffn_norm, 1.0f, n));
    /* feed-forward: x += post_norm(down(gelu(gate h) * up h)); on a MoE layer the dense branch
     * gets its own post-norm and the experts' branch is added before post_norm */
    rf_tensor g = packed(&f->g, F, n), u = packed(&f->u, F, n);
    TRY(op->matmul(be, &g, &L->ffn_gate, &f->h, n));
    TRY(op->matmul(be, &u, &L->ffn_up, &f->h, n));
    TRY(op->glu(be, &g, &g, &u, n * F, RF_GLU_GEGLU));
    TRY(op->matmul(be, &f->o, &L->ffn_down, &g, n));
    if (L->ffn == RF_FFN_MOE) {
        TRY(op->rmsnorm(be, &f->o, &f->o, &L->ffn_post_norm_1, n, E, hp->norm_eps));
        TRY(experts(m, f, il, n));
    }
    /* the last residual add of the layer takes the output scale and makes the next layer's h */
    if (P == 0)
        return add_norm(m, &f->x, &f->o, &L->ffn_post_norm, L->out_scale, next_norm ? &f->h : NULL, next_norm, 1.0f,
                        n);
    TRY(add_norm(m, &f->x, &f->o, &L->ffn_post_norm, 1.0f, NULL, NULL, 1.0f, n));
    /* per-layer embedding: x += norm(proj(gelu(gate x) * per-layer input)) */
    rf_tensor pg = packed(&f->ple_g, P, n);
    TRY(op->matmul(be, &pg, &L->ple_gate, &f->x, n));
    TRY(ple_gate(m, f, &pg, il, n));
    TRY(op->matmul(be, &f->o, &L->ple_proj, &pg, n));
    return add_norm(m, &f->x, &f->o, &L->ple_norm, L->out_scale, next_norm ? &f->h : NULL, next_norm, 1.0f, n);
}
