/* model_weights.c — a model's weights bound by name from the GGUF file with their shapes checked
 * (errors name the tensor): attention, feed-forward, experts, DeltaNet layers, RoPE factors,
 * tied embeddings, the joins a backend asks for; and their release. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "model/model.h"
#include "model/model_meta.h"
#include "rocmforge/quant.h"

/* ---- tensors ------------------------------------------------------------------------------ */

static rf_status bind_l(rf_model *m, rf_tensor *t, int il, const char *what, int64_t ne0, int64_t ne1,
                        bool required) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, what);
    return rf_model_bind(m, t, name, ne0, ne1, required);
}

/* ---- weights ---------------------------------------------------------------------------- */

/* YaRN: its factors (model_yarn.c) become rope_freqs and the op runs with freq_scale 1 on
 * every layer, the gain in rope_attn_factor. A file with its own rope_freqs too is refused. */
static rf_status load_yarn(rf_model *m) {
    rf_hparams *hp = &m->hp;
    if (!hp->yarn) return RF_OK;
    if (rf_has(&m->rope_freqs))
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: rope_freqs.weight together with %s.rope.scaling.type = yarn is not supported",
                            hp->arch_name);
    const int half = hp->n_rot / 2;
    m->yarn_ff = malloc((size_t)half * sizeof(float));
    if (!m->yarn_ff) return rf_set_error(RF_ERR_OOM, "model: out of memory");
    rf_yarn_freq_factors(hp->n_rot, hp->n_ctx_orig, hp->rope_base, hp->rope_scale, hp->yarn_ext_factor,
                         hp->yarn_beta_fast, hp->yarn_beta_slow, m->yarn_ff);
    hp->rope_attn_factor = rf_yarn_attn_factor(hp->rope_scale, hp->yarn_ext_factor, hp->rope_attn_factor);
    hp->rope_scale = hp->rope_scale_swa = 1.0f; /* the interpolation is in the factors */
    return m->be->ops->weight(m->be, RF_TYPE_F32, half, 1, m->yarn_ff, &m->rope_freqs);
}

/* Phi-3/Phi-4-mini long-context RoPE ("longrope"): per-dimension frequency factors for
 * contexts up to rope.scaling.original_context_length (rope_factors_short) and beyond it
 * (rope_factors_long), and rope.scaling.attn_factor, a gain on the rotated dimensions. The
 * short factors are used (llama.cpp's choice for a context within the original one); a context
 * past it would need the long ones, which are bound but not used yet. */
static rf_status load_longrope(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    const int64_t half = hp->n_rot / 2;
    if ((st = rf_model_bind(m, &m->rope_long, "rope_factors_long.weight", half, 1, false))) return st;
    if (!rf_has(&m->rope_freqs) && (st = rf_model_bind(m, &m->rope_freqs, "rope_factors_short.weight", half, 1, false))) return st;
    float af = 1.0f;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.attn_factor", &af))) return st;
    if (!(af > 0 && af < 16))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.scaling.attn_factor = %g is out of range", hp->arch_name, af);
    hp->rope_attn_factor = af;
    return RF_OK;
}

/* A tensor of the file holding several weights stacked by rows (phi3's attn_qkv and gate/up
 * ffn_up): the parts become row views into it. */
static void split_rows(rf_tensor *whole, rf_tensor **parts, const int64_t *rows, int n) {
    int64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        *parts[i] = rf_tensor_rows(whole, r0, rows[i]);
        r0 += rows[i];
    }
}

/* The attention mixer's weights of layer il: Q/K/V (apart, or one attn_qkv where the
 * architecture stores them so), the output projection, the variants the table turns on. */
static rf_status load_attention(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    const unsigned fl = hp->arch->flags;
    const int64_t E = hp->n_embd, D = hp->head_dim, Q = (int64_t)hp->n_head * D, KV = (int64_t)hp->n_head_kv * D;
    rf_status st;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
    const bool fused = (fl & RF_AF_FUSED_QKV) && rf_gguf_find_tensor(m->g, name);
    if ((st = bind_l(m, &L->attn_norm, il, "attn_norm.weight", E, 1, true))) return st;
    if (L->attn_gate) { /* qwen35: [q_h; gate_h] per head in one product, no biases */
        if ((st = bind_l(m, &L->wq, il, "attn_q.weight", E, 2 * Q, true))) return st;
        if ((st = bind_l(m, &L->wk, il, "attn_k.weight", E, KV, true))) return st;
        if ((st = bind_l(m, &L->wv, il, "attn_v.weight", E, KV, true))) return st;
    } else if (fused) {
        snprintf(name, sizeof name, "blk.%d.attn_qkv.bias", il);
        if (rf_gguf_find_tensor(m->g, name))
            return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' (a joined Q/K/V bias) is not supported", name);
        if ((st = bind_l(m, &L->wqkv, il, "attn_qkv.weight", E, Q + 2 * KV, true))) return st;
        rf_tensor *qkv[] = {&L->wq, &L->wk, &L->wv};
        const int64_t rows[] = {Q, KV, KV};
        split_rows(&L->wqkv, qkv, rows, 3);
    } else {
        if ((st = bind_l(m, &L->wq, il, "attn_q.weight", E, Q, true))) return st;
        if ((st = bind_l(m, &L->wk, il, "attn_k.weight", E, KV, true))) return st;
        if ((st = bind_l(m, &L->wv, il, "attn_v.weight", E, KV, true))) return st;
        const bool bias = fl & RF_AF_QKV_BIAS;
        if ((st = bind_l(m, &L->bq, il, "attn_q.bias", Q, 1, bias))) return st;
        if ((st = bind_l(m, &L->bk, il, "attn_k.bias", KV, 1, bias))) return st;
        if ((st = bind_l(m, &L->bv, il, "attn_v.bias", KV, 1, bias))) return st;
    }
    if ((st = bind_l(m, &L->wo, il, "attn_output.weight", Q, E, true))) return st;
    if ((st = bind_l(m, &L->bo, il, "attn_output.bias", E, 1, false))) return st;
    const bool qk_norm = fl & RF_AF_QK_NORM;
    if ((st = bind_l(m, &L->q_norm, il, "attn_q_norm.weight", D, 1, qk_norm))) return st;
    if ((st = bind_l(m, &L->k_norm, il, "attn_k_norm.weight", D, 1, qk_norm))) return st;
    if (fused && (rf_has(&L->q_norm) || rf_has(&L->k_norm)))
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: layer %d has a joined attn_qkv and Q/K norms (unsupported)", il);
    if (fl & RF_AF_DELTANET) return RF_OK; /* its post_attention_norm is the pre-FFN norm (load_ffn) */
    /* (gpt-oss's post_attention_norm is its feed-forward norm, bound there, not a post norm) */
    if (!(fl & RF_AF_FFN_NORM_POST_ATTN) &&
        (st = bind_l(m, &L->attn_post_norm, il, "post_attention_norm.weight", E, 1, fl & RF_AF_POST_NORMS)))
        return st;
    if ((st = bind_l(m, &L->attn_sinks, il, "attn_sinks.weight", hp->n_head, 1, fl & RF_AF_SINKS))) return st;
    return RF_OK;
}

/* The name of the feed-forward block's norm: gpt-oss and qwen35 store it as post_attention_norm. */
static const char *ffn_norm_name(const rf_model *m) {
    return (m->hp.arch->flags & (RF_AF_FFN_NORM_POST_ATTN | RF_AF_DELTANET)) ? "post_attention_norm.weight" : "ffn_norm.weight";
}

/* An expert tensor blk.il.<what>: GGUF's 3-D [ne0, ne1, n_expert], every dim checked (the
 * error names the tensor, its shape and the expected one), bound as one weight of
 * n_expert * ne1 rows (backend.h). */
static rf_status bind_exps(rf_model *m, rf_tensor *t, int il, const char *what, int64_t ne0, int64_t ne1) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, what);
    const int64_t ne = m->hp.n_expert;
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, name);
    if (!gt) return rf_set_error(RF_ERR_NOT_FOUND, "model: missing tensor '%s' (architecture %s)", name, m->hp.arch_name);
    if (gt->n_dims != 3 || gt->ne[0] != ne0 || gt->ne[1] != ne1 || gt->ne[2] != ne)
        return rf_set_error(RF_ERR_FORMAT,
                            "model: expert tensor '%s' has shape [%lld, %lld, %lld] (%u dims), expected [%lld, %lld, %lld] "
                            "(%s.expert_count = %lld)",
                            name, (long long)gt->ne[0], (long long)gt->ne[1], (long long)gt->ne[2], gt->n_dims,
                            (long long)ne0, (long long)ne1, (long long)ne, m->hp.arch_name, (long long)ne);
    return rf_model_bind(m, t, name, ne0, ne1 * ne, true);
}

/* An optional per-expert bias blk.il.<what> f32 [rows, n_expert] (gpt-oss). */
static rf_status bind_exps_bias(rf_model *m, rf_tensor *t, int il, const char *what, int64_t rows) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, what);
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, name);
    if (!gt) return RF_OK;
    if (gt->type != RF_TYPE_F32)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' has type %s; biases must be f32", name,
                            rf_type_name(gt->type));
    return rf_model_bind(m, t, name, rows, m->hp.n_expert, true);
}

/* A shared expert (qwen35moe, qwen3next): gate/up [n_embd -> F], down [F -> n_embd] with F =
 * expert_shared_feed_forward_length (feed_forward_length where it is 0, as llama.cpp), and its
 * sigmoid gate ffn_gate_inp_shexp f32 [n_embd]; all four or none. Not split over shards. */
static rf_status load_shared_expert(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    static const char *const shexp[] = {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
                                        "ffn_gate_inp_shexp.weight"};
    char name[96];
    int have = 0;
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", il, shexp[i]);
        have += rf_gguf_find_tensor(m->g, name) != NULL;
    }
    if (!have) return RF_OK;
    snprintf(name, sizeof name, "blk.%d.ffn_up_shexp.weight", il);
    if (m->tp_be)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: '%s' (a shared expert) cannot be split into shards (--tp)", name);
    if (!m->be->ops->moe_shared_gate)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: the %s backend has no shared-expert gate ('%s')", m->be->ops->name, name);
    const int64_t E = hp->n_embd, F = hp->n_ff_shexp > 0 ? hp->n_ff_shexp : hp->n_ff;
    if (F <= 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: '%s' needs %s.expert_shared_feed_forward_length (or "
                            "feed_forward_length)", name, hp->arch_name);
    rf_status st;
    if ((st = bind_l(m, &L->ffn_gate_shexp, il, shexp[0], E, F, true)) || (st = bind_l(m, &L->ffn_up_shexp, il, shexp[1], E, F, true)) ||
        (st = bind_l(m, &L->ffn_down_shexp, il, shexp[2], F, E, true)))
        return st;
    return bind_l(m, &L->ffn_gate_inp_shexp, il, shexp[3], E, 1, true);
}

/* The mixture-of-experts block of layer il (RF_AF_MOE): the norm, the router [n_embd ->
 * n_expert] (+ optional bias and selection bias), the three expert tensors (shapes checked
 * against expert_count and expert_feed_forward_length), optional expert biases, an optional
 * shared expert. */
static rf_status load_ffn_moe(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, NE = hp->n_expert;
    rf_status st;
    char name[96];
    L->ffn = RF_FFN_MOE;
    if ((st = load_shared_expert(m, L, il))) return st;
    if ((st = bind_l(m, &L->ffn_norm, il, ffn_norm_name(m), E, 1, true))) return st;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
    const rf_gguf_tensor *gi = rf_gguf_find_tensor(m->g, name);
    if (gi && (gi->n_dims != 2 || gi->ne[0] != E || gi->ne[1] != NE))
        return rf_set_error(RF_ERR_FORMAT, "model: router tensor '%s' has shape [%lld, %lld] (%u dims), expected [%lld, %lld] "
                            "(%s.expert_count = %lld)", name, (long long)gi->ne[0], (long long)gi->ne[1], gi->n_dims,
                            (long long)E, (long long)NE, hp->arch_name, (long long)NE);
    if ((st = bind_l(m, &L->ffn_gate_inp, il, "ffn_gate_inp.weight", E, NE, true))) return st;
    if ((st = bind_l(m, &L->ffn_gate_inp_b, il, "ffn_gate_inp.bias", NE, 1, false))) return st;
    if ((st = bind_l(m, &L->exp_probs_b, il, "exp_probs_b.bias", NE, 1, false))) return st;
    if ((st = bind_exps(m, &L->ffn_gate_exps, il, "ffn_gate_exps.weight", E, F))) return st;
    if ((st = bind_exps(m, &L->ffn_up_exps, il, "ffn_up_exps.weight", E, F))) return st;
    if ((st = bind_exps(m, &L->ffn_down_exps, il, "ffn_down_exps.weight", F, E))) return st;
    if ((st = bind_exps_bias(m, &L->ffn_gate_exps_b, il, "ffn_gate_exps.bias", F))) return st;
    if ((st = bind_exps_bias(m, &L->ffn_up_exps_b, il, "ffn_up_exps.bias", F))) return st;
    if ((st = bind_exps_bias(m, &L->ffn_down_exps_b, il, "ffn_down_exps.bias", E))) return st;
    if (!m->be->ops->moe_route || !m->be->ops->matmul_id || !m->be->ops->moe_combine)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: the %s backend has no mixture-of-experts ops (layer %d)",
                            m->be->ops->name, il);
    return bind_l(m, &L->ffn_post_norm, il, "post_ffw_norm.weight", E, 1, hp->arch->flags & RF_AF_POST_NORMS);
}

/* A gated DeltaNet layer's weights (qwen35; shapes as llama.cpp's loader checks them): the joined
 * q/k/v product (conv channels C = 2 key_dim + value_dim), the z gate, the conv taps (f32), dt
 * bias and A, beta and alpha, the per-head norm and the output product. */
static rf_status load_deltanet_grouped(rf_model *m, rf_layer *L, int il);
static rf_status load_deltanet(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, S = hp->ssm_d_state, HV = hp->ssm_dt_rank;
    const int64_t KD = S * hp->ssm_n_group, VD = S * HV, C = 2 * KD + VD, K = hp->ssm_d_conv;
    rf_status st;
    const rf_backend_ops *op = m->be->ops;
    if (m->tp_be)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: %s's gated DeltaNet layers cannot be split into shards (--tp) "
                            "yet; run it with --tp 1 (one GPU or the CPU)", hp->arch_name);
    if (!op->ssm_conv || !op->gated_delta || !op->sigmoid_mul || !op->head_split)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: the %s backend has no gated DeltaNet ops (%s needs them)", op->name,
                            hp->arch_name);
    if (hp->arch->flags & RF_AF_DN_GROUPED) return load_deltanet_grouped(m, L, il);
    if ((st = bind_l(m, &L->attn_norm, il, "attn_norm.weight", E, 1, true))) return st;
    if ((st = bind_l(m, &L->wqkv, il, "attn_qkv.weight", E, C, true))) return st;
    if ((st = bind_l(m, &L->ssm_gate, il, "attn_gate.weight", E, VD, true))) return st;
    if ((st = bind_l(m, &L->ssm_conv1d, il, "ssm_conv1d.weight", K, C, true))) return st;
    if (L->ssm_conv1d.type != RF_TYPE_F32)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor 'blk.%d.ssm_conv1d.weight' has type %s; it must be f32", il,
                            rf_type_name(L->ssm_conv1d.type));
    if ((st = bind_l(m, &L->ssm_dt, il, "ssm_dt.bias", HV, 1, true))) return st;
    if ((st = bind_l(m, &L->ssm_a, il, "ssm_a", HV, 1, true))) return st;
    if ((st = bind_l(m, &L->ssm_beta, il, "ssm_beta.weight", E, HV, true))) return st;
    if ((st = bind_l(m, &L->ssm_alpha, il, "ssm_alpha.weight", E, HV, true))) return st;
    if ((st = bind_l(m, &L->ssm_norm, il, "ssm_norm.weight", S, 1, true))) return st;
    return bind_l(m, &L->ssm_out, il, "ssm_out.weight", VD, E, true);
}

/* Binds a weight whose rows are rows of the file's tensor `name` ([ne0, file_rows], any
 * computable type) picked by map[0..rows) (repeats allowed): copied whole rows on the host, which
 * a device backend uploads (the copy freed) and the CPU borrows (kept in m->host_w). */
static rf_status bind_rows(rf_model *m, rf_tensor *t, const char *name, int64_t ne0, int64_t file_rows,
                           const int64_t *map, int64_t rows, bool count) {
    memset(t, 0, sizeof *t);
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, name);
    if (!gt) return rf_set_error(RF_ERR_NOT_FOUND, "model: missing tensor '%s' (architecture %s)", name, m->hp.arch_name);
    const int64_t g1 = gt->ne[1] * gt->ne[2] * gt->ne[3];
    if (gt->ne[0] != ne0 || g1 != file_rows)
        return rf_set_error(RF_ERR_FORMAT, "model: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", name,
                            (long long)gt->ne[0], (long long)g1, (long long)ne0, (long long)file_rows);
    const rf_type_traits *tr = rf_type_info(gt->type);
    if (!tr || (gt->type != RF_TYPE_F32 && gt->type != RF_TYPE_F16 && gt->type != RF_TYPE_BF16 && !tr->to_f32) || !gt->data)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' has type %s, which ROCmForge cannot compute with", name,
                            rf_type_name(gt->type));
    size_t rb;
    rf_status st;
    if ((st = rf_row_size(gt->type, ne0, &rb))) return st;
    void **hw = realloc(m->host_w, (size_t)(m->n_host_w + 1) * sizeof *hw);
    if (!hw) return rf_set_error(RF_ERR_OOM, "model: out of memory");
    m->host_w = hw;
    uint8_t *buf = malloc((size_t)rows * rb);
    if (!buf) return rf_set_error(RF_ERR_OOM, "model: out of memory regrouping '%s'", name);
    for (int64_t o = 0; o < rows; o++) memcpy(buf + (size_t)o * rb, (const uint8_t *)gt->data + (size_t)map[o] * rb, rb);
    if ((st = m->be->ops->weight(m->be, gt->type, ne0, rows, buf, t))) {
        free(buf);
        return rf_set_error(st, "model: tensor '%s': %s", name, rf_last_error());
    }
    if (t->data == buf) m->host_w[m->n_host_w++] = buf; /* borrowed */
    else free(buf);
    if (count) m->n_params += (uint64_t)ne0 * (uint64_t)file_rows, m->weight_bytes += gt->n_bytes;
    return RF_OK;
}

/* qwen3next's DeltaNet tensors, regrouped so the qwen35 ops compute them (RF_AF_DN_GROUPED):
 * value head h reads key head h / r (r = value heads / key heads) where the ops read h % H_k;
 * so the Q and K rows of attn_qkv and of the conv taps are repeated to one key head per value
 * head, in value-head order (the repeated heads' L2 norms and convolutions are the same
 * numbers: exact), and ssm_ba's per-key-head [beta (r rows); alpha (r rows)] is split
 * into beta and alpha in value-head order. Cost: Q/K rows of the joined product and of the conv
 * state grow r-fold (qwen3-next-80b: the product 8192 -> 12288 rows). The older joined q/k/v/z
 * layout (ssm_in) is refused by name. */
static rf_status load_deltanet_grouped(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, S = hp->ssm_d_state, HV = hp->ssm_dt_rank, HK = hp->ssm_n_group_file, r = HV / HK;
    const int64_t KD = S * HK, VD = S * HV, C = 2 * KD + VD, C2 = 2 * S * HV + VD, K = hp->ssm_d_conv;
    char name[96];
    rf_status st;
    snprintf(name, sizeof name, "blk.%d.ssm_in.weight", il);
    if (rf_gguf_find_tensor(m->g, name))
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' (qwen3next's older joined q/k/v/z layout) is not supported; "
                            "convert the model again (attn_qkv + attn_gate)", name);
    int64_t *map = malloc((size_t)(C2 > 2 * HV ? C2 : 2 * HV) * sizeof *map);
    if (!map) return rf_set_error(RF_ERR_OOM, "model: out of memory");
    for (int64_t o = 0; o < C2; o++) {
        const int64_t part = o < S * HV ? 0 : o < 2 * S * HV ? 1 : 2, w = o - part * S * HV;
        map[o] = part < 2 ? part * KD + (w / S / r) * S + w % S : 2 * KD + w;
    }
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
    st = bind_rows(m, &L->wqkv, name, E, C, map, C2, true);
    snprintf(name, sizeof name, "blk.%d.ssm_conv1d.weight", il);
    if (!st) st = bind_rows(m, &L->ssm_conv1d, name, K, C, map, C2, true);
    if (!st && L->ssm_conv1d.type != RF_TYPE_F32)
        st = rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' has type %s; it must be f32", name, rf_type_name(L->ssm_conv1d.type));
    for (int64_t h = 0; !st && h < HV; h++) map[h] = (h / r) * 2 * r + h % r, map[HV + h] = map[h] + r;
    snprintf(name, sizeof name, "blk.%d.ssm_ba.weight", il);
    if (!st) st = bind_rows(m, &L->ssm_beta, name, E, 2 * HV, map, HV, true);
    if (!st) st = bind_rows(m, &L->ssm_alpha, name, E, 2 * HV, map + HV, HV, false);
    free(map);
    if (st) return st;
    if ((st = bind_l(m, &L->attn_norm, il, "attn_norm.weight", E, 1, true))) return st;
    if ((st = bind_l(m, &L->ssm_gate, il, "attn_gate.weight", E, VD, true))) return st;
    if ((st = bind_l(m, &L->ssm_dt, il, "ssm_dt.bias", HV, 1, true))) return st;
    if ((st = bind_l(m, &L->ssm_a, il, "ssm_a", HV, 1, true))) return st;
    if ((st = bind_l(m, &L->ssm_norm, il, "ssm_norm.weight", S, 1, true))) return st;
    return bind_l(m, &L->ssm_out, il, "ssm_out.weight", VD, E, true);
}

/* The feed-forward block of layer il: a dense GLU (gate and up apart, or one ffn_up holding
 * [gate; up]); a mixture-of-experts layer is recognised and refused by name. */
static rf_status load_ffn(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    const unsigned fl = hp->arch->flags;
    const int64_t E = hp->n_embd, F = hp->n_ff;
    rf_status st;
    char name[96];
    if (fl & RF_AF_MOE) return load_ffn_moe(m, L, il);
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", il);
    if (rf_gguf_find_tensor(m->g, name)) {
        L->ffn = RF_FFN_MOE;
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: layer %d is a mixture of experts ('%s'); %s MoE layers are not supported yet",
                            il, name, hp->arch_name);
    }
    L->ffn = RF_FFN_DENSE_GLU;
    /* llama.cpp's llama-family graphs add FFN biases where a file has them (mistral3); none of
     * the supported files does, and ignoring one would be silently wrong */
    static const char *const biases[] = {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", il, biases[i]);
        if (rf_gguf_find_tensor(m->g, name))
            return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' (a feed-forward bias) is not supported", name);
    }
    if ((st = bind_l(m, &L->ffn_norm, il, ffn_norm_name(m), E, 1, true))) return st;
    if (fl & RF_AF_FUSED_GATE_UP) {
        if ((st = bind_l(m, &L->ffn_gu, il, "ffn_up.weight", E, 2 * F, true))) return st;
        rf_tensor *gu[] = {&L->ffn_gate, &L->ffn_up};
        const int64_t rows[] = {F, F};
        split_rows(&L->ffn_gu, gu, rows, 2);
    } else {
        if ((st = bind_l(m, &L->ffn_gate, il, "ffn_gate.weight", E, F, true))) return st;
        if ((st = bind_l(m, &L->ffn_up, il, "ffn_up.weight", E, F, true))) return st;
    }
    if ((st = bind_l(m, &L->ffn_down, il, "ffn_down.weight", F, E, true))) return st;
    return bind_l(m, &L->ffn_post_norm, il, "post_ffw_norm.weight", E, 1, fl & RF_AF_POST_NORMS);
}

/* Where the backend joins weights (weight_join): one product for Q/K/V and one for gate/up.
 * Q/K/V only where the layer reads them through the one fused (norm +) RoPE + store: no biases,
 * RoPE on, Q/K norms only where the backend fuses them in (norm_rope_store). Where V's type
 * differs from Q's and K's (the more-bits layers of a K-quant mix) Q and K alone are joined.
 * Weights the file already joins stay as they are. */
static rf_status join_for_backend(rf_model *m, rf_layer *L) {
    const rf_backend_ops *op = m->be->ops;
    if (!op->weight_join || m->tp_be) return RF_OK; /* several GPUs: joined per shard (model_tp.c) */
    rf_status js;
    const bool norms = rf_has(&L->q_norm) || rf_has(&L->k_norm);
    if (L->mixer == RF_MIXER_ATTENTION && !L->attn_gate && !rf_has(&L->wqkv) && !rf_has(&L->bq) &&
        !rf_has(&L->bk) && !rf_has(&L->bv) && L->rope && op->rope_store && (!norms || op->norm_rope_store)) {
        rf_tensor *qkv[] = {&L->wq, &L->wk, &L->wv};
        js = op->weight_join(m->be, qkv, 3, &L->wqkv);
        if (js == RF_ERR_UNSUPPORTED && L->wv.type != L->wq.type) {
            js = op->weight_join(m->be, qkv, 2, &L->wqkv);
            L->wqkv_qk = js == RF_OK;
        }
        if (js && js != RF_ERR_UNSUPPORTED) return js;
    }
    if (!rf_has(&L->ffn_gu)) {
        rf_tensor *gu[] = {&L->ffn_gate, &L->ffn_up};
        if ((js = m->be->ops->weight_join(m->be, gu, 2, &L->ffn_gu)) && js != RF_ERR_UNSUPPORTED) return js;
    }
    rf_clear_error();
    return RF_OK;
}

rf_status rf_model_load_weights(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    const rf_gguf_tensor *te = rf_gguf_find_tensor(m->g, "token_embd.weight");
    if (!te) return rf_set_error(RF_ERR_NOT_FOUND, "model: missing tensor 'token_embd.weight' (architecture %s)", hp->arch_name);
    /* The vocabulary size comes from the embedding (never 0), checked against the metadata. */
    int64_t nv = te->ne[1];
    if (nv <= 0 || nv > INT32_MAX || te->n_dims != 2)
        return rf_set_error(RF_ERR_FORMAT, "model: tensor 'token_embd.weight' has a bad shape");
    hp->n_vocab = (int32_t)nv;
    int32_t vs = 0;
    if ((st = rf_meta_opt_i32(m, "vocab_size", &vs))) return st;
    if (vs && vs != hp->n_vocab)
        return rf_set_error(RF_ERR_FORMAT, "model: %s.vocab_size = %d but token_embd.weight has %d rows", hp->arch_name, vs, hp->n_vocab);
    const int64_t E = hp->n_embd;
    if ((st = rf_model_bind(m, &m->tok_embd, "token_embd.weight", E, nv, true))) return st;
    if ((st = rf_model_bind(m, &m->output_norm, "output_norm.weight", E, 1, true))) return st;
    if ((st = rf_model_bind(m, &m->output, "output.weight", E, nv, false))) return st;
    m->tied = !rf_has(&m->output);
    if (m->tied) m->output = m->tok_embd;
    if ((st = rf_model_bind(m, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, 1, false))) return st;
    if ((st = load_longrope(m))) return st;
    if ((st = load_yarn(m))) return st;

    m->layers = calloc((size_t)hp->n_layer, sizeof(rf_layer));
    if (!m->layers) return rf_set_error(RF_ERR_OOM, "model: out of memory");
    const int32_t nope = hp->arch->nope_every;
    for (int il = 0; il < hp->n_layer; il++) {
        rf_layer *L = &m->layers[il];
        L->mixer = RF_MIXER_ATTENTION;
        L->rope = !(nope > 0 && (il + 1) % nope == 0);
        L->is_swa = hp->n_swa > 0 && (hp->swa_pattern == 0 || il % hp->swa_pattern < hp->swa_pattern - 1);
        L->rope_base = L->is_swa ? hp->rope_base_swa : hp->rope_base;
        L->rope_scale = L->is_swa ? hp->rope_scale_swa : hp->rope_scale;
        if (hp->arch->flags & RF_AF_GEMMA4) { /* per-layer shapes (model_gemma4.c) */
            if ((st = rf_gemma4_load_layer(m, L, il))) return st;
            continue;
        }
        const bool hybrid = hp->arch->flags & RF_AF_DELTANET;
        if (hybrid && (il + 1) % hp->full_attn_every != 0) {
            L->mixer = RF_MIXER_DELTANET;
            if ((st = load_deltanet(m, L, il))) return st;
        } else {
            L->attn_gate = hybrid;
            if ((st = load_attention(m, L, il))) return st;
        }
        if ((st = load_ffn(m, L, il))) return st;
        if ((st = join_for_backend(m, L))) return st;
    }
    if ((hp->arch->flags & RF_AF_GEMMA4) && (st = rf_gemma4_load_top(m))) return st;
    if (hp->arch->flags & RF_AF_DN_GROUPED) hp->ssm_n_group = hp->ssm_dt_rank; /* the key heads repeated at load */
    return RF_OK;
}

/* Releases the weights a device backend uploaded (on the CPU they are borrowed from the
 * mapped file and free() does nothing); a tied output shares the embedding's memory. */
void rf_model_free_weights(rf_model *m) {
    rf_backend *be = m->be;
    if (rf_has(&m->output) && m->output.data == m->tok_embd.data) memset(&m->output, 0, sizeof m->output);
    rf_tensor *top[] = {&m->tok_embd, &m->output_norm, &m->output, &m->rope_freqs, &m->rope_long,
                        &m->ple_embd, &m->ple_model_proj, &m->ple_proj_norm};
    for (size_t i = 0; i < sizeof top / sizeof *top; i++) be->ops->free(be, top[i]);
    if (!m->layers) return;
    for (int il = 0; il < m->hp.n_layer; il++) {
        rf_layer *L = &m->layers[il];
        rf_tensor *t[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv, &L->bo,
                          &L->q_norm, &L->k_norm, &L->attn_post_norm, &L->ffn_norm, &L->ffn_gate, &L->ffn_up,
                          &L->ffn_down, &L->ffn_post_norm, &L->wqkv, &L->ffn_gu, &L->ffn_gate_inp,
                          &L->ffn_gate_inp_b, &L->exp_probs_b, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps,
                          &L->ffn_gate_exps_b, &L->ffn_up_exps_b, &L->ffn_down_exps_b, &L->ffn_gate_shexp,
                          &L->ffn_up_shexp, &L->ffn_down_shexp, &L->ffn_gate_inp_shexp, &L->attn_sinks, &L->ssm_gate, &L->ssm_conv1d,
                          &L->ssm_dt, &L->ssm_a, &L->ssm_beta, &L->ssm_alpha, &L->ssm_norm, &L->ssm_out,
                          &L->ple_gate, &L->ple_proj, &L->ple_norm, &L->ffn_gate_inp_s, &L->ffn_pre_norm_2,
                          &L->ffn_post_norm_1, &L->ffn_post_norm_2};
        for (size_t i = 0; i < sizeof t / sizeof *t; i++) be->ops->free(be, t[i]);
    }
    for (int32_t i = 0; i < m->n_host_w; i++) free(m->host_w[i]);
    free(m->host_w);
    m->host_w = NULL;
    m->n_host_w = 0;
}
