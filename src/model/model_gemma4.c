/* model_gemma4.c — gemma4's hyper-parameters and weights (docs/ARCHITECTURE.md §4.9): per-layer
 * window pattern, head sizes and KV heads, shared-KV layers, per-layer token embeddings, the
 * mixture-of-experts layers (26B-A4B). Facts
 * (key and tensor names, which layer's cache a shared layer reads) follow llama.cpp's
 * src/models/gemma4.cpp and its KV-cache reuse rule; the forward is forward_gemma4.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "model/model_meta.h"

/* The per-layer array `suffix` (bool or u32/i32, n_layer entries), or a scalar for every layer
 * (def when absent): element il into *out. */
static rf_status layer_value(rf_model *m, const char *suffix, int il, int32_t def, int32_t *out) {
    char k[160];
    rf_meta_key(m, suffix, k, sizeof k);
    *out = def;
    int64_t ki = rf_gguf_find_key(m->g, k);
    if (ki < 0) return RF_OK;
    const rf_gguf_value *v = rf_gguf_kv_value(m->g, ki);
    if (v->type != RF_GGUF_ARRAY) {
        uint32_t u;
        bool b;
        if (v->type == RF_GGUF_BOOL && rf_gguf_get_bool(m->g, k, &b) == RF_OK) return *out = b, RF_OK;
        rf_status st = rf_gguf_get_u32(m->g, k, &u);
        if (st || u > INT32_MAX) return rf_set_error(RF_ERR_FORMAT, "model metadata: key '%s' is not a count", k);
        return *out = (int32_t)u, RF_OK;
    }
    uint64_t n = 0;
    const void *data = NULL;
    int et = v->v.arr.elem_type;
    if ((et != RF_GGUF_BOOL && et != RF_GGUF_UINT32 && et != RF_GGUF_INT32) || rf_gguf_get_arr(m->g, k, -1, &n, &data) ||
        n != (uint64_t)m->hp.n_layer)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: '%s' must be %d booleans or integers (one per layer)", k,
                            m->hp.n_layer);
    if (et == RF_GGUF_BOOL) *out = ((const uint8_t *)data)[il] != 0;
    else if (((const int32_t *)data)[il] < 0) return rf_set_error(RF_ERR_RANGE, "model metadata: '%s'[%d] < 0", k, il);
    else *out = ((const int32_t *)data)[il];
    return RF_OK;
}

/* gemma4's mixture of experts (26B-A4B), where expert_count is present: expert_used_count (the
 * top-k) and expert_feed_forward_length required; softmax over all experts, the top-k weights
 * renormalised, no scale (llama.cpp's gemma4 graph fixes these, whatever the file says). */
static rf_status moe_hparams(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    char k[160];
    hp->n_expert = 0;
    if (rf_gguf_find_key(m->g, rf_meta_key(m, "expert_count", k, sizeof k)) < 0) return RF_OK;
    if ((st = rf_meta_req_i32(m, "expert_count", &hp->n_expert)) ||
        (st = rf_meta_req_i32(m, "expert_used_count", &hp->n_expert_used)) ||
        (st = rf_meta_req_i32(m, "expert_feed_forward_length", &hp->n_ff_exp)))
        return st;
    if (hp->n_expert <= 0 || hp->n_expert > RF_MAX_EXPERTS)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_count = %d: a mixture-of-experts model needs 1 to %d experts",
                            hp->arch_name, hp->n_expert, RF_MAX_EXPERTS);
    if (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_used_count = %d is not a top-k of %d experts",
                            hp->arch_name, hp->n_expert_used, hp->n_expert);
    if (hp->n_ff_exp <= 0)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_feed_forward_length = %d is out of range", hp->arch_name,
                            hp->n_ff_exp);
    hp->n_ff_shexp = 0;
    hp->moe_gating = RF_MOE_SOFTMAX;
    hp->moe_norm_w = true;
    hp->moe_w_scale = 1.0f;
    return RF_OK;
}

/* gemma4: sliding-window layers where attention.sliding_window_pattern (one boolean per layer)
 * says so, with their own head size (key_length_swa), rotated dims (rope.dimension_count_swa)
 * and RoPE base (rope.freq_base_swa); full layers use key_length and rope.dimension_count (with
 * rope_freqs.weight making the rotation partial); KV heads per layer (head_count_kv may be an
 * array); the last attention.shared_kv_layers layers keep no KV; attention scale 1 (the Q/K
 * norms take its place); optional per-layer embeddings and final soft-capping. */
rf_status rf_gemma4_hparams(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    char k[160];
    hp->attn_scale = 1.0f;
    if ((st = moe_hparams(m))) return st;
    if ((st = rf_meta_req_i32(m, "attention.sliding_window", &hp->n_swa))) return st;
    if (rf_gguf_find_key(m->g, rf_meta_key(m, "attention.sliding_window_pattern", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s'", k);
    hp->swa_pattern = 0; /* per layer: rf_gemma4_load_layer reads the array */
    hp->head_dim_full = hp->head_dim;
    hp->head_dim_swa = hp->head_dim;
    int32_t vswa = -1;
    if ((st = rf_meta_opt_i32(m, "attention.key_length_swa", &hp->head_dim_swa)) ||
        (st = rf_meta_opt_i32(m, "attention.value_length_swa", &vswa)))
        return st;
    if (hp->head_dim_swa <= 0 || hp->head_dim_swa > RF_MAX_HEAD_DIM || hp->head_dim_swa % 2 ||
        (vswa >= 0 && vswa != hp->head_dim_swa))
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.attention.key_length_swa %d / value_length_swa %d invalid",
                            hp->arch_name, hp->head_dim_swa, vswa);
    hp->n_rot_swa = hp->head_dim_swa < hp->n_rot ? hp->head_dim_swa : hp->n_rot;
    if ((st = rf_meta_opt_i32(m, "rope.dimension_count_swa", &hp->n_rot_swa))) return st;
    if (hp->n_rot_swa <= 0 || hp->n_rot_swa > hp->head_dim_swa || hp->n_rot_swa % 2)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.rope.dimension_count_swa = %d for head size %d",
                            hp->arch_name, hp->n_rot_swa, hp->head_dim_swa);
    hp->rope_base_swa = hp->rope_base;
    hp->rope_scale_swa = 1.0f;
    if ((st = rf_meta_opt_f32(m, "rope.freq_base_swa", &hp->rope_base_swa))) return st;
    if (!(hp->rope_base_swa > 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.freq_base_swa out of range", hp->arch_name);
    if ((st = rf_meta_opt_i32(m, "embedding_length_per_layer_input", &hp->n_embd_ple))) return st;
    if (hp->n_embd_ple < 0 || (int64_t)hp->n_embd_ple * hp->n_layer > (1 << 24))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.embedding_length_per_layer_input = %d", hp->arch_name, hp->n_embd_ple);
    if ((st = rf_meta_opt_i32(m, "attention.shared_kv_layers", &hp->n_kv_shared))) return st;
    if (hp->n_kv_shared < 0 || (hp->n_kv_shared > 0 && hp->n_layer - hp->n_kv_shared < 2))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.attention.shared_kv_layers = %d of %d layers", hp->arch_name,
                            hp->n_kv_shared, hp->n_layer);
    if ((st = rf_meta_opt_f32(m, "final_logit_softcapping", &hp->final_softcap))) return st;
    /* KV heads and window per layer: checked here; the buffers take the largest */
    int32_t kv_max = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        int32_t kv, swa;
        if ((st = layer_value(m, "attention.head_count_kv", il, hp->n_head, &kv)) ||
            (st = layer_value(m, "attention.sliding_window_pattern", il, 0, &swa)))
            return st;
        if (kv <= 0 || hp->n_head % kv)
            return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.attention.head_count_kv[%d] = %d does not divide %d heads",
                                hp->arch_name, il, kv, hp->n_head);
        if (kv > kv_max) kv_max = kv;
    }
    hp->n_head_kv = kv_max;
    if (hp->head_dim_swa > hp->head_dim) hp->head_dim = hp->head_dim_swa; /* the buffers' row: the larger head */
    return RF_OK;
}

#define BIND(t, what, ne0, ne1, req)                                   \
    do {                                                               \
        snprintf(name, sizeof name, "blk.%d.%s", il, what);            \
        if ((st = rf_model_bind(m, t, name, ne0, ne1, req))) return st; \
    } while (0)

/* An expert tensor blk.il.<what>, GGUF [ne0, ne1, n_expert], bound as one weight of
 * n_expert * ne1 rows (backend.h). */
static rf_status bind_exps(rf_model *m, rf_tensor *t, int il, const char *what, int64_t ne0, int64_t ne1) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, what);
    const int64_t ne = m->hp.n_expert;
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, name);
    if (!gt) return rf_set_error(RF_ERR_NOT_FOUND, "model: missing tensor '%s' (architecture gemma4)", name);
    if (gt->n_dims != 3 || gt->ne[0] != ne0 || gt->ne[1] != ne1 || gt->ne[2] != ne)
        return rf_set_error(RF_ERR_FORMAT, "model: expert tensor '%s' has shape [%lld, %lld, %lld] (%u dims), expected "
                            "[%lld, %lld, %lld]", name, (long long)gt->ne[0], (long long)gt->ne[1], (long long)gt->ne[2],
                            gt->n_dims, (long long)ne0, (long long)ne1, (long long)ne);
    return rf_model_bind(m, t, name, ne0, ne1 * ne, true);
}

/* A gemma4 MoE layer (the layers that have blk.il.ffn_gate_inp.weight): beside the dense GeGLU
 * (its weights bound by the caller), the router and its input gain, the experts' pre-norm,
 * the two branch post-norms and the experts. Refused by name: the joined gate_up experts and
 * per-expert scales some converters write (not built). */
static rf_status load_moe(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    rf_status st;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
    if (!rf_gguf_find_tensor(m->g, name)) return RF_OK; /* a dense layer of a MoE model */
    static const char *const refused[] = {"ffn_gate_up_exps.weight", "ffn_gate_exps.scale", "ffn_up_exps.scale",
                                          "ffn_down_exps.scale"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", il, refused[i]);
        if (rf_gguf_find_tensor(m->g, name))
            return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' (gemma4) is not supported", name);
    }
    if (!m->be->ops->moe_route || !m->be->ops->matmul_id || !m->be->ops->moe_combine)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: the %s backend has no mixture-of-experts ops (layer %d)",
                            m->be->ops->name, il);
    const int64_t E = hp->n_embd, FE = hp->n_ff_exp, NE = hp->n_expert;
    L->ffn = RF_FFN_MOE;
    BIND(&L->ffn_gate_inp, "ffn_gate_inp.weight", E, NE, true);
    BIND(&L->ffn_gate_inp_s, "ffn_gate_inp.scale", E, 1, true);
    BIND(&L->ffn_pre_norm_2, "pre_ffw_norm_2.weight", E, 1, true);
    BIND(&L->ffn_post_norm_1, "post_ffw_norm_1.weight", E, 1, true);
    BIND(&L->ffn_post_norm_2, "post_ffw_norm_2.weight", E, 1, true);
    if ((st = bind_exps(m, &L->ffn_gate_exps, il, "ffn_gate_exps.weight", E, FE)) ||
        (st = bind_exps(m, &L->ffn_up_exps, il, "ffn_up_exps.weight", E, FE)) ||
        (st = bind_exps(m, &L->ffn_down_exps, il, "ffn_down_exps.weight", FE, E)))
        return st;
    return RF_OK;
}

rf_status rf_gemma4_load_layer(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    rf_status st;
    char name[96];
    int32_t swa, kv;
    if ((st = layer_value(m, "attention.sliding_window_pattern", il, 0, &swa)) ||
        (st = layer_value(m, "attention.head_count_kv", il, hp->n_head, &kv)))
        return st;
    L->is_swa = swa != 0;
    L->head_dim = L->is_swa ? hp->head_dim_swa : hp->head_dim_full;
    L->n_rot = L->is_swa ? hp->n_rot_swa : hp->n_rot;
    L->n_head_kv = kv;
    L->rope_base = L->is_swa ? hp->rope_base_swa : hp->rope_base;
    L->rope_scale = L->is_swa ? hp->rope_scale_swa : hp->rope_scale;
    /* shared-KV layers read the last own-KV layer of their kind: first_shared - 2 (sliding) or
     * first_shared - 1 (full), llama.cpp's rule; that layer must be of the same kind and shape */
    const int first_shared = hp->n_layer - hp->n_kv_shared;
    L->kv_layer = il;
    if (hp->n_kv_shared > 0 && il >= first_shared) {
        L->kv_layer = first_shared - (L->is_swa ? 2 : 1);
        const rf_layer *S = &m->layers[L->kv_layer];
        if (S->is_swa != L->is_swa || S->head_dim != L->head_dim || S->n_head_kv != L->n_head_kv)
            return rf_set_error(RF_ERR_FORMAT, "model: gemma4 layer %d would read layer %d's KV, of another kind or shape", il,
                                L->kv_layer);
    }
    const bool own_kv = L->kv_layer == il;
    const int64_t E = hp->n_embd, D = L->head_dim, Q = (int64_t)hp->n_head * D, KV = (int64_t)kv * D;
    const int64_t F = hp->n_ff, P = hp->n_embd_ple;
    BIND(&L->attn_norm, "attn_norm.weight", E, 1, true);
    BIND(&L->wq, "attn_q.weight", E, Q, true);
    BIND(&L->wk, "attn_k.weight", E, KV, own_kv);
    BIND(&L->wv, "attn_v.weight", E, KV, false); /* absent: V is the K product */
    if (own_kv && !rf_has(&L->wk))
        return rf_set_error(RF_ERR_NOT_FOUND, "model: missing tensor 'blk.%d.attn_k.weight' (architecture gemma4)", il);
    BIND(&L->wo, "attn_output.weight", Q, E, true);
    BIND(&L->q_norm, "attn_q_norm.weight", D, 1, true);
    BIND(&L->k_norm, "attn_k_norm.weight", D, 1, own_kv);
    BIND(&L->attn_post_norm, "post_attention_norm.weight", E, 1, true);
    BIND(&L->ffn_norm, "ffn_norm.weight", E, 1, true);
    BIND(&L->ffn_gate, "ffn_gate.weight", E, F, true);
    BIND(&L->ffn_up, "ffn_up.weight", E, F, true);
    BIND(&L->ffn_down, "ffn_down.weight", F, E, true);
    BIND(&L->ffn_post_norm, "post_ffw_norm.weight", E, 1, true);
    if (hp->n_expert > 0 && (st = load_moe(m, L, il))) return st;
    L->out_scale = 1.0f;
    snprintf(name, sizeof name, "blk.%d.layer_output_scale.weight", il);
    const rf_gguf_tensor *gs = rf_gguf_find_tensor(m->g, name);
    if (gs) { /* a scalar, read once at load (every backend multiplies by the host value) */
        if (gs->type != RF_TYPE_F32 || gs->ne[0] * gs->ne[1] * gs->ne[2] * gs->ne[3] != 1 || !gs->data)
            return rf_set_error(RF_ERR_FORMAT, "model: tensor '%s' must be one f32", name);
        memcpy(&L->out_scale, gs->data, 4);
        if (!isfinite(L->out_scale)) return rf_set_error(RF_ERR_RANGE, "model: tensor '%s' is not finite", name);
    }
    if (P > 0) {
        BIND(&L->ple_gate, "inp_gate.weight", E, P, true);
        BIND(&L->ple_proj, "proj.weight", P, E, true);
        BIND(&L->ple_norm, "post_norm.weight", E, 1, true);
    }
    return RF_OK;
}

rf_status rf_gemma4_load_top(rf_model *m) {
    const rf_hparams *hp = &m->hp;
    const int64_t P = hp->n_embd_ple, NP = P * hp->n_layer;
    if (P == 0) return RF_OK;
    rf_status st;
    if ((st = rf_model_bind(m, &m->ple_embd, "per_layer_token_embd.weight", NP, hp->n_vocab, true)) ||
        (st = rf_model_bind(m, &m->ple_model_proj, "per_layer_model_proj.weight", hp->n_embd, NP, true)) ||
        (st = rf_model_bind(m, &m->ple_proj_norm, "per_layer_proj_norm.weight", P, 1, true)))
        return st;
    return RF_OK;
}
