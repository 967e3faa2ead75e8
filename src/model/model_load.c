/* model_load.c — rf_model_load: architecture dispatch, hyper-parameters from GGUF metadata
 * (validated, errors name the key), weights bound by name with their shapes checked (errors
 * name the tensor), tied embeddings, vocabulary. Facts about key/tensor names follow the GGUF
 * conventions that llama.cpp writes (see docs/engine.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "model/model.h"
#include "model/model_meta.h"
#include "rocmforge/quant.h"

rf_model_params rf_model_default_params(void) {
    rf_model_params p = {RF_DEVICE_CPU, 0, NULL, NULL, 0, 0};
    return p;
}

/* ---- metadata helpers: "<arch>.<suffix>" ------------------------------------------------- */

static const char *akey(const rf_model *m, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", m->hp.arch_name, suffix);
    return buf;
}

rf_status rf_meta_req_i32(rf_model *m, const char *suffix, int32_t *out) {
    char k[160];
    akey(m, suffix, k, sizeof k);
    uint32_t v;
    rf_status st = rf_gguf_get_u32(m->g, k, &v);
    if (st == RF_ERR_NOT_FOUND) return rf_set_error(st, "model metadata: missing required key '%s'", k);
    if (st) return st;
    if (v == 0 || v > INT32_MAX) return rf_set_error(RF_ERR_RANGE, "model metadata: key '%s' = %u is out of range", k, v);
    *out = (int32_t)v;
    return RF_OK;
}

rf_status rf_meta_opt_i32(rf_model *m, const char *suffix, int32_t *out) {
    char k[160];
    akey(m, suffix, k, sizeof k);
    if (rf_gguf_find_key(m->g, k) < 0) return RF_OK;
    uint32_t v;
    rf_status st = rf_gguf_get_u32(m->g, k, &v);
    if (st == RF_ERR_TYPE) {
        uint64_t n;
        const void *data;
        const rf_gguf_value *val = rf_gguf_kv_value(m->g, rf_gguf_find_key(m->g, k));
        if (val->type != RF_GGUF_ARRAY || (val->v.arr.elem_type != RF_GGUF_UINT32 && val->v.arr.elem_type != RF_GGUF_INT32))
            return st;
        rf_gguf_get_arr(m->g, k, -1, &n, &data);
        if (n == 0) return rf_set_error(RF_ERR_FORMAT, "model metadata: key '%s' is an empty array", k);
        const uint32_t *a = data;
        for (uint64_t i = 1; i < n; i++)
            if (a[i] != a[0])
                return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: per-layer values of '%s' differ (unsupported)", k);
        v = a[0];
    } else if (st) {
        return st;
    }
    if (v > INT32_MAX) return rf_set_error(RF_ERR_RANGE, "model metadata: key '%s' = %u is out of range", k, v);
    *out = (int32_t)v;
    return RF_OK;
}

rf_status rf_meta_opt_f32(rf_model *m, const char *suffix, float *out) {
    char k[160];
    akey(m, suffix, k, sizeof k);
    if (rf_gguf_find_key(m->g, k) < 0) return RF_OK;
    rf_status st = rf_gguf_get_f32(m->g, k, out);
    if (st) return st;
    if (!isfinite(*out)) return rf_set_error(RF_ERR_RANGE, "model metadata: key '%s' is not finite", k);
    return RF_OK;
}

/* ---- tensors ------------------------------------------------------------------------------ */

/* Binds tensor `name` with expected shape [ne0, ne1] (ne1 = 1 for vectors). Missing and
 * required: RF_ERR_NOT_FOUND naming it. Norms and biases must be f32. */
static rf_status bind(rf_model *m, rf_tensor *t, const char *name, int64_t ne0, int64_t ne1,
                      bool required) {
    memset(t, 0, sizeof *t);
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, name);
    if (!gt) {
        if (!required) return RF_OK;
        return rf_set_error(RF_ERR_NOT_FOUND, "model: missing tensor '%s' (architecture %s)", name,
                            m->hp.arch_name);
    }
    int64_t g1 = gt->ne[1] * gt->ne[2] * gt->ne[3];
    if (gt->ne[0] != ne0 || g1 != ne1)
        return rf_set_error(RF_ERR_FORMAT, "model: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                            name, (long long)gt->ne[0], (long long)g1, (long long)ne0, (long long)ne1);
    if (ne1 == 1 && gt->type != RF_TYPE_F32)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' has type %s; vectors must be f32", name,
                            rf_type_name(gt->type));
    const rf_type_traits *tr = rf_type_info(gt->type);
    if (!tr || (gt->type != RF_TYPE_F32 && gt->type != RF_TYPE_F16 && gt->type != RF_TYPE_BF16 && !tr->to_f32))
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' has type %s, which ROCmForge cannot compute with",
                            name, rf_type_name(gt->type));
    if (!gt->data) return rf_set_error(RF_ERR_FORMAT, "model: tensor '%s' has no data", name);
    rf_status st;
    if (m->tp_be && strncmp(name, "blk.", 4) == 0) {
        /* split over several GPUs: a host view into the mapped file; each GPU uploads its slices
         * of it (model_tp.c), none the whole layer */
        size_t rb;
        if ((st = rf_row_size(gt->type, ne0, &rb))) return st;
        *t = (rf_tensor){.type = gt->type, .ne = {ne0, ne1}, .nb1 = rb, .data = (void *)gt->data, .owned = false};
    } else {
        st = m->be->ops->weight(m->be, gt->type, ne0, ne1, gt->data, t);
    }
    if (st) return rf_set_error(st, "model: tensor '%s': %s", name, rf_last_error());
    if (m->progress && m->load_total) { /* a device backend uploads here: show it */
        m->load_done += gt->n_bytes;
        float f = (float)m->load_done / (float)m->load_total;
        if (f - m->load_last >= 0.01f || f >= 1.0f) {
            m->progress(f > 1.0f ? 1.0f : f, m->progress_user);
            m->load_last = f;
        }
    }
    m->n_params += (uint64_t)ne0 * (uint64_t)ne1;
    m->weight_bytes += gt->n_bytes;
    return RF_OK;
}

static rf_status bind_l(rf_model *m, rf_tensor *t, int il, const char *what, int64_t ne0, int64_t ne1,
                        bool required) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, what);
    return bind(m, t, name, ne0, ne1, required);
}

/* ---- hyper-parameters ------------------------------------------------------------------- */

/* rope.scaling.type = yarn: the original context must be given (the ramp is measured against
 * it); ext_factor and beta_fast/slow as llama.cpp defaults them (1, 32, 1) unless the file gives
 * them; yarn_log_multiplier (DeepSeek's attention gain rule) is not built. */
static rf_status yarn_hparams(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    char k[160];
    if (rf_gguf_find_key(m->g, akey(m, "rope.scaling.original_context_length", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: YaRN RoPE scaling needs key '%s'", k);
    hp->yarn = true;
    hp->yarn_ext_factor = 1.0f, hp->yarn_beta_fast = 32.0f, hp->yarn_beta_slow = 1.0f;
    float log_mul = 0;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.yarn_ext_factor", &hp->yarn_ext_factor))) return st;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast))) return st;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow))) return st;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.yarn_log_multiplier", &log_mul))) return st;
    if (log_mul != 0)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: %s.rope.scaling.yarn_log_multiplier = %g is not supported",
                            hp->arch_name, log_mul);
    if (!(hp->yarn_ext_factor >= 0 && hp->yarn_ext_factor <= 1) || !(hp->yarn_beta_fast > 0) || !(hp->yarn_beta_slow > 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.scaling.yarn_* out of range (ext_factor %g, beta_fast %g, beta_slow %g)",
                            hp->arch_name, hp->yarn_ext_factor, hp->yarn_beta_fast, hp->yarn_beta_slow);
    return RF_OK;
}

/* The mixture-of-experts keys (RF_AF_MOE): expert_count (1..RF_MAX_EXPERTS), expert_used_count
 * (the top-k, 1..expert_count), expert_feed_forward_length (default feed_forward_length / k, as
 * llama.cpp), expert_shared_feed_forward_length, expert_weights_norm, expert_weights_scale
 * (0 or absent: 1). The gating is the architecture's (its hook may change it and the rest). */
static rf_status load_moe_hparams(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    char k[160];
    hp->n_expert = 0;
    if (rf_gguf_find_key(m->g, akey(m, "expert_count", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s' (a mixture-of-experts model)", k);
    if (rf_gguf_find_key(m->g, akey(m, "expert_used_count", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s' (a mixture-of-experts model)", k);
    if ((st = rf_meta_opt_i32(m, "expert_count", &hp->n_expert))) return st;
    if (hp->n_expert <= 0 || hp->n_expert > RF_MAX_EXPERTS)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_count = %d: a mixture-of-experts model needs 1 to %d experts",
                            hp->arch_name, hp->n_expert, RF_MAX_EXPERTS);
    hp->n_expert_used = 0;
    if ((st = rf_meta_opt_i32(m, "expert_used_count", &hp->n_expert_used))) return st;
    akey(m, "expert_used_count", k, sizeof k);
    if (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s = %d is not a top-k of %s.expert_count = %d (1 <= k <= experts)", k,
                            hp->n_expert_used, hp->arch_name, hp->n_expert);
    hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if ((st = rf_meta_opt_i32(m, "expert_feed_forward_length", &hp->n_ff_exp))) return st;
    if (hp->n_ff_exp <= 0)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_feed_forward_length = %d is out of range",
                            hp->arch_name, hp->n_ff_exp);
    hp->n_ff_shexp = 0;
    if ((st = rf_meta_opt_i32(m, "expert_shared_feed_forward_length", &hp->n_ff_shexp))) return st;
    hp->moe_gating = RF_MOE_SOFTMAX;
    hp->moe_norm_w = true;
    if (rf_gguf_find_key(m->g, akey(m, "expert_weights_norm", k, sizeof k)) >= 0 &&
        (st = rf_gguf_get_bool(m->g, k, &hp->moe_norm_w)))
        return rf_set_error(st, "model metadata: %s: %s", k, rf_last_error());
    hp->moe_w_scale = 0;
    if ((st = rf_meta_opt_f32(m, "expert_weights_scale", &hp->moe_w_scale))) return st;
    if (hp->moe_w_scale == 0) hp->moe_w_scale = 1.0f;
    if (!(hp->moe_w_scale > 0 && hp->moe_w_scale < 1e4f))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_weights_scale = %g is out of range", hp->arch_name,
                            hp->moe_w_scale);
    return RF_OK;
}

static rf_status load_hparams(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    if ((st = rf_meta_req_i32(m, "embedding_length", &hp->n_embd))) return st;
    if ((st = rf_meta_req_i32(m, "block_count", &hp->n_layer))) return st;
    if ((st = rf_meta_opt_i32(m, "feed_forward_length", &hp->n_ff))) return st;
    if (hp->n_ff <= 0) return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s.feed_forward_length'", hp->arch_name);
    if ((st = rf_meta_req_i32(m, "attention.head_count", &hp->n_head))) return st;
    hp->n_head_kv = hp->n_head;
    if ((st = rf_meta_opt_i32(m, "attention.head_count_kv", &hp->n_head_kv))) return st;
    hp->n_ctx_train = 2048;
    if ((st = rf_meta_opt_i32(m, "context_length", &hp->n_ctx_train))) return st;
    if (hp->n_layer > RF_MAX_LAYERS)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.block_count = %d exceeds %d", hp->arch_name, hp->n_layer, RF_MAX_LAYERS);
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.attention.head_count (%d) is not a multiple of head_count_kv (%d)",
                            hp->arch_name, hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd % hp->n_head ? 0 : hp->n_embd / hp->n_head;
    if ((st = rf_meta_opt_i32(m, "attention.key_length", &hp->head_dim))) return st;
    int32_t vlen = hp->head_dim;
    if ((st = rf_meta_opt_i32(m, "attention.value_length", &vlen))) return st;
    if (hp->head_dim <= 0 || hp->head_dim > RF_MAX_HEAD_DIM || hp->head_dim % 2)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: head size %d (%s.attention.key_length or embedding_length/head_count) is invalid",
                            hp->head_dim, hp->arch_name);
    if (vlen != hp->head_dim)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: %s.attention.value_length %d != key_length %d", hp->arch_name, vlen, hp->head_dim);
    hp->n_rot = hp->head_dim;
    if ((st = rf_meta_opt_i32(m, "rope.dimension_count", &hp->n_rot))) return st;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.rope.dimension_count = %d is invalid for head size %d",
                            hp->arch_name, hp->n_rot, hp->head_dim);
    hp->norm_eps = 1e-5f;
    char k[160];
    if (rf_gguf_find_key(m->g, akey(m, "attention.layer_norm_rms_epsilon", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s'", k);
    if ((st = rf_meta_opt_f32(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps))) return st;
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s = %g is out of range", k, hp->norm_eps);

    hp->rope_base = 10000.0f;
    if ((st = rf_meta_opt_f32(m, "rope.freq_base", &hp->rope_base))) return st;
    float factor = 0;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.factor", &factor))) return st;
    if (factor == 0 && (st = rf_meta_opt_f32(m, "rope.scale_linear", &factor))) return st;
    const char *stype = NULL;
    if (rf_gguf_get_str(m->g, akey(m, "rope.scaling.type", k, sizeof k), &stype) == RF_OK &&
        strcmp(stype, "none") && strcmp(stype, "linear") && strcmp(stype, "yarn"))
        return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: %s = '%s' is not supported (none, linear, yarn)", k, stype);
    if (stype && !strcmp(stype, "yarn") && (st = yarn_hparams(m))) return st;
    if (stype && !strcmp(stype, "none")) factor = 0;
    hp->rope_scale = factor == 0 ? 1.0f : 1.0f / factor;
    if (!(hp->rope_base > 0) || !(hp->rope_scale > 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.freq_base / scaling factor out of range", hp->arch_name);
    hp->rope_base_swa = 10000.0f;
    hp->rope_scale_swa = 1.0f;
    hp->attn_scale = 0;
    if ((st = rf_meta_opt_f32(m, "attention.scale", &hp->attn_scale))) return st;
    if (!(hp->attn_scale >= 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.attention.scale = %g is out of range", hp->arch_name, hp->attn_scale);
    if (hp->attn_scale == 0) hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->n_ctx_orig = hp->n_ctx_train;
    if ((st = rf_meta_opt_i32(m, "rope.scaling.original_context_length", &hp->n_ctx_orig))) return st;
    if (hp->yarn && hp->n_ctx_orig <= 0)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.scaling.original_context_length = %d is out of range",
                            hp->arch_name, hp->n_ctx_orig);

    /* the architecture's table entry: its variants, then its own keys */
    const rf_arch_desc *a = hp->arch;
    hp->rope_mode = a->rope_mode;
    hp->glu = a->glu;
    hp->embed_scale = (a->flags & RF_AF_EMBED_SCALE) ? sqrtf((float)hp->n_embd) : 1.0f;
    if ((a->flags & RF_AF_FULL_ROT) && hp->n_rot != hp->head_dim)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s needs rope.dimension_count (%d) == head size (%d)",
                            hp->arch_name, hp->n_rot, hp->head_dim);
    if ((a->flags & RF_AF_MOE) && (st = load_moe_hparams(m))) return st;
    if (a->hparams && (st = a->hparams(m))) return st;
    return RF_OK;
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
    if ((st = bind(m, &m->rope_long, "rope_factors_long.weight", half, 1, false))) return st;
    if (!rf_has(&m->rope_freqs) && (st = bind(m, &m->rope_freqs, "rope_factors_short.weight", half, 1, false))) return st;
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
    return bind(m, t, name, ne0, ne1 * ne, true);
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
    return bind(m, t, name, rows, m->hp.n_expert, true);
}

/* The mixture-of-experts block of layer il (RF_AF_MOE): the norm, the router [n_embd ->
 * n_expert] (+ optional bias and selection bias), the three expert tensors (shapes checked
 * against expert_count and expert_feed_forward_length), optional expert biases. A shared expert
 * (qwen2moe style; model.h has its slots) is refused by name until its forward is built. */
static rf_status load_ffn_moe(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, NE = hp->n_expert;
    rf_status st;
    char name[96];
    L->ffn = RF_FFN_MOE;
    static const char *const shexp[] = {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
                                        "ffn_gate_inp_shexp.weight"};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", il, shexp[i]);
        if (rf_gguf_find_tensor(m->g, name))
            return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' (a shared expert) is not supported yet", name);
    }
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
static rf_status load_deltanet(rf_model *m, rf_layer *L, int il) {
    const rf_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, S = hp->ssm_d_state, HV = hp->ssm_dt_rank;
    const int64_t KD = S * hp->ssm_n_group, VD = S * HV, C = 2 * KD + VD, K = hp->ssm_d_conv;
    rf_status st;
    const rf_backend_ops *op = m->be->ops;
    if (!op->ssm_conv || !op->gated_delta || !op->sigmoid_mul || !op->head_split || m->tp_be)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: %s's gated DeltaNet layers run on the CPU only for now (--device cpu, no --tp)",
                            hp->arch_name);
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
 * Q/K/V only where the layer reads them through the one fused RoPE + store (no biases, no Q/K
 * norms, RoPE on); weights the file already joins stay as they are. */
static rf_status join_for_backend(rf_model *m, rf_layer *L) {
    if (!m->be->ops->weight_join || m->tp_be) return RF_OK; /* several GPUs: joined per shard (model_tp.c) */
    rf_status js;
    if (!rf_has(&L->wqkv) && !rf_has(&L->bq) && !rf_has(&L->q_norm) && !rf_has(&L->k_norm) && L->rope) {
        rf_tensor *qkv[] = {&L->wq, &L->wk, &L->wv};
        if ((js = m->be->ops->weight_join(m->be, qkv, 3, &L->wqkv)) && js != RF_ERR_UNSUPPORTED) return js;
    }
    if (!rf_has(&L->ffn_gu)) {
        rf_tensor *gu[] = {&L->ffn_gate, &L->ffn_up};
        if ((js = m->be->ops->weight_join(m->be, gu, 2, &L->ffn_gu)) && js != RF_ERR_UNSUPPORTED) return js;
    }
    rf_clear_error();
    return RF_OK;
}

static rf_status load_weights(rf_model *m) {
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
    if ((st = bind(m, &m->tok_embd, "token_embd.weight", E, nv, true))) return st;
    if ((st = bind(m, &m->output_norm, "output_norm.weight", E, 1, true))) return st;
    if ((st = bind(m, &m->output, "output.weight", E, nv, false))) return st;
    m->tied = !rf_has(&m->output);
    if (m->tied) m->output = m->tok_embd;
    if ((st = bind(m, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, 1, false))) return st;
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
    return RF_OK;
}

/* The most common weight type by bytes, for rf_model_info.ftype. */
static const char *main_type(const rf_gguf *g) {
    uint64_t bytes[RF_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        if ((int)t->type >= 0 && t->type < RF_TYPE_COUNT && t->n_dims >= 2) bytes[t->type] += t->n_bytes;
    }
    int best = 0;
    for (int i = 1; i < RF_TYPE_COUNT; i++)
        if (bytes[i] > bytes[best]) best = i;
    return rf_type_name(best);
}

/* Touches every page of the weights so a large model loads up front with a progress bar. */
static void prefault(rf_model *m, const rf_model_params *p) {
    int64_t nt = rf_gguf_n_tensors(m->g);
    uint64_t total = 0, done = 0;
    for (int64_t i = 0; i < nt; i++) total += rf_gguf_tensor_at(m->g, i)->n_bytes;
    volatile unsigned char sink = 0;
    float last = -1;
    for (int64_t i = 0; i < nt; i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(m->g, i);
        const unsigned char *d = t->data;
        if (d)
            for (uint64_t off = 0; off < t->n_bytes; off += 4096) sink ^= d[off];
        done += t->n_bytes;
        float f = total ? (float)done / (float)total : 1.0f;
        if (p->progress && (f - last >= 0.01f || i == nt - 1)) {
            p->progress(f, p->progress_user);
            last = f;
        }
    }
    (void)sink;
}

/* Bytes of every tensor in the file: what a device backend will hold. */
static uint64_t file_weight_bytes(const rf_gguf *g) {
    uint64_t total = 0;
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) total += rf_gguf_tensor_at(g, i)->n_bytes;
    return total;
}

/* Picks and opens the backend. gpu: the GPU or an error naming what is missing (no GPU, or
 * the weights' size against the device's free memory, checked before any upload). auto: the
 * GPU when one is present and the weights fit with room for a KV cache, else the CPU with a
 * one-line note saying why. */
static rf_status open_backend(rf_model *m, const rf_model_params *p) {
    uint64_t need = file_weight_bytes(m->g);
#ifdef RF_HAVE_GPU
    if (p->device != RF_DEVICE_CPU) {
        const char *why = NULL;
        char buf[256];
        rf_status st = RF_OK;
        int hd = m->hp.head_dim;
        if (hd != 64 && hd != 80 && hd != 96 && hd != 128 && hd != 256) {
            snprintf(buf, sizeof buf, "the GPU attention has no kernel for head size %d (64, 80, 96, 128, 256)", hd);
            why = buf;
            st = rf_set_error(RF_ERR_UNSUPPORTED, "--device gpu: %s; use --device cpu", buf);
        } else if (rf_gpu_device_count() <= 0) {
            why = "no GPU found";
            st = rf_set_error(RF_ERR_DEVICE, "--device gpu: no GPU found (check the driver: nvidia-smi / rocminfo)");
        } else if ((st = rf_backend_gpu_new(p->device_index, &m->be))) {
            snprintf(buf, sizeof buf, "the GPU could not be opened (%s)", rf_last_error());
            why = buf;
        } else {
            size_t fr = 0, tot = 0;
            rf_backend_gpu_mem(m->be, &fr, &tot);
            uint64_t reserve = need / 20 > (256u << 20) ? need / 20 : (256u << 20); /* KV + activations */
            if (need + reserve > fr) {
                snprintf(buf, sizeof buf, "the model needs %.1f MiB of weights (+%.0f MiB for a KV cache) but the GPU has %.1f MiB free",
                         need / 1048576.0, reserve / 1048576.0, fr / 1048576.0);
                why = buf;
                st = rf_set_error(RF_ERR_OOM, "%s (of %.1f MiB)", buf, tot / 1048576.0);
                m->be->ops->destroy(m->be);
                m->be = NULL;
            }
        }
        if (!why) {
            RF_LOGI("model: %.1f MiB of weights on %s", need / 1048576.0, rf_backend_gpu_name(m->be));
            m->load_total = need;
            m->progress = p->progress;
            m->progress_user = p->progress_user;
            return RF_OK;
        }
        if (p->device == RF_DEVICE_GPU) return st;
        rf_log(rf_gpu_device_count() > 0 ? RF_LOG_WARN : RF_LOG_INFO, "running on the CPU: %s", why);
    }
#else
    if (p->device == RF_DEVICE_GPU)
        return rf_set_error(RF_ERR_UNSUPPORTED, "--device gpu: this build has no GPU backend (configure with -DRF_CUDA=ON)");
    if (p->device == RF_DEVICE_AUTO) RF_LOGI("running on the CPU: this build has no GPU backend");
#endif
    (void)need;
    return rf_backend_cpu_new(p->n_threads, &m->be);
}

/* --tp N > 1: the split over N GPUs (model_tp_gpu.c) for --device gpu, or auto where N GPUs are
 * present; the CPU for --device cpu and auto without them; one GPU backend for every shard in
 * the tp_one_device test hook's mode (open_backend then). */
static rf_status open_tp(rf_model *m, rf_model_params *p) {
    if (p->tp > 1 && p->device == RF_DEVICE_CPU && rf_tp_cpu_ranks()) return rf_tp_open_cpu(m, p->tp, p->n_threads);
    if (p->tp <= 1 || p->device == RF_DEVICE_CPU) return RF_OK;
    int have = 0;
#ifdef RF_HAVE_GPU
    have = rf_gpu_device_count();
#endif
    if (p->device == RF_DEVICE_GPU && rf_tp_one_device()) return RF_OK;
    if (p->device == RF_DEVICE_AUTO && have < p->device_index + p->tp) {
        RF_LOGI("--tp %d: running on the CPU (%d GPUs present, the split over GPUs needs %d)", p->tp, have, p->tp);
        p->device = RF_DEVICE_CPU;
        return RF_OK;
    }
    int hd = m->hp.head_dim;
    if (hd != 64 && hd != 80 && hd != 96 && hd != 128 && hd != 256)
        return rf_set_error(RF_ERR_UNSUPPORTED, "--tp %d on GPUs: the GPU attention has no kernel for head size %d", p->tp,
                            hd);
    rf_status st = rf_tp_open(m, p->tp, p->device_index);
    if (st) return st;
    RF_LOGI("model: split over %d GPUs (%d..%d), NCCL all-reduces", p->tp, p->device_index, p->device_index + p->tp - 1);
    return RF_OK;
}

rf_status rf_model_load(const char *path, const rf_model_params *params, rf_model **out) {
    *out = NULL;
    rf_model_params p = params ? *params : rf_model_default_params();
    if (!path) return rf_set_error(RF_ERR_INVALID_ARG, "model path is NULL");
    if (p.device != RF_DEVICE_CPU && p.device != RF_DEVICE_GPU && p.device != RF_DEVICE_AUTO)
        return rf_set_error(RF_ERR_INVALID_ARG, "device %d is not one of cpu, gpu, auto", (int)p.device);
    if (p.n_threads < 0) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", p.n_threads);
    rf_model *m = calloc(1, sizeof *m);
    if (!m) return rf_set_error(RF_ERR_OOM, "model: out of memory");
    m->path = strdup(path);
    rf_status st = rf_gguf_open(path, &m->g);
    if (st) goto fail;
    const char *arch = NULL;
    st = rf_gguf_get_str(m->g, "general.architecture", &arch);
    if (st) {
        st = rf_set_error(st, "%s: missing or bad 'general.architecture' (%s)", path, rf_last_error());
        goto fail;
    }
    m->hp.arch = rf_arch_find(arch);
    if (!m->hp.arch) {
        st = rf_set_error(RF_ERR_UNSUPPORTED, "unsupported architecture '%s' (supported: %s)", arch,
                          rf_supported_archs());
        goto fail;
    }
    snprintf(m->hp.arch_name, sizeof m->hp.arch_name, "%s", arch);
    const char *name = "";
    rf_gguf_get_str(m->g, "general.name", &name);
    snprintf(m->name, sizeof m->name, "%s", name ? name : "");
    rf_clear_error();
    if ((st = load_hparams(m))) goto fail;
    /* RF_TP: the split for commands without a --tp option (bench, serve) */
    if ((st = rf_knobs_init())) goto fail; /* a knob that does not parse fails the load */
    if (p.tp == 0) p.tp = (int)rf_knob_int(RF_KNOB_TP);
    if (p.tp < 0 || p.tp > 64) {
        st = rf_set_error(RF_ERR_INVALID_ARG, "--tp %d: the shard count must be 1 to 64", p.tp);
        goto fail;
    }
    /* (a mixture of experts is split inside every expert: model_tp.c) */
    if ((st = open_tp(m, &p))) goto fail;
    if (!m->be && (st = open_backend(m, &p))) goto fail;
    if ((st = load_weights(m))) goto fail;
    if (p.tp > 1 && rf_model_n_recurrent(m) > 0) {
        st = rf_set_error(RF_ERR_UNSUPPORTED, "--tp %d: %s's gated DeltaNet layers cannot be split yet", p.tp, m->hp.arch_name);
        goto fail;
    }
    if ((st = rf_model_shard(m, p.tp))) goto fail;
    if (m->tp > 1) RF_LOGI("model: layers split over %d shards (%d heads, %d KV heads each)", m->tp, m->tp_head, m->tp_head_kv);
    if (m->progress && m->load_last < 1.0f) m->progress(1.0f, m->progress_user);
    if ((st = rf_vocab_load(m->g, &m->vocab))) goto fail;
    if (rf_vocab_n_tokens(m->vocab) > m->hp.n_vocab) {
        st = rf_set_error(RF_ERR_FORMAT, "model: the vocabulary has %d tokens but token_embd.weight only %d rows",
                          rf_vocab_n_tokens(m->vocab), m->hp.n_vocab);
        goto fail;
    }
    /* Parse the chat template now so an unsupported one is reported at load, not on the first
     * chat request; a model without a usable template still loads for plain completion. */
    if (rf_chat_template_from_gguf(m->g, &m->chat) != RF_OK) {
        RF_LOGW("model: no usable chat template: %s", rf_last_error());
        m->chat = NULL;
    }
    m->ftype = main_type(m->g);
    if (!rf_backend_on_device(m->be)) prefault(m, &p);
    *out = m;
    return RF_OK;
fail:
    rf_model_free(m);
    return st;
}

/* Releases the weights a device backend uploaded (on the CPU they are borrowed from the
 * mapped file and free() does nothing); a tied output shares the embedding's memory. */
static void free_weights(rf_model *m) {
    rf_backend *be = m->be;
    if (rf_has(&m->output) && m->output.data == m->tok_embd.data) memset(&m->output, 0, sizeof m->output);
    rf_tensor *top[] = {&m->tok_embd, &m->output_norm, &m->output, &m->rope_freqs, &m->rope_long};
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
                          &L->ssm_dt, &L->ssm_a, &L->ssm_beta, &L->ssm_alpha, &L->ssm_norm, &L->ssm_out};
        for (size_t i = 0; i < sizeof t / sizeof *t; i++) be->ops->free(be, t[i]);
    }
}

void rf_model_free(rf_model *m) {
    if (!m) return;
    if (m->be) rf_model_use(m, 0), free_weights(m);
    rf_model_unshard(m); /* views of the layers' weights, or uploaded slices */
    rf_tp_close(m);      /* GPUs 1.. of a split over several, and the communicator */
    free(m->layers);
    free(m->yarn_ff);
    if (m->vocab) rf_vocab_free(m->vocab);
    if (m->chat) rf_chat_template_free(m->chat);
    if (m->be) m->be->ops->destroy(m->be);
    if (m->g) rf_gguf_close(m->g);
    free(m->path);
    free(m);
}

rf_status rf_model_get_info(const rf_model *m, rf_model_info *o) {
    if (!m || !o) return rf_set_error(RF_ERR_INVALID_ARG, "rf_model_get_info: NULL argument");
    memset(o, 0, sizeof *o);
    const rf_hparams *hp = &m->hp;
    o->arch = hp->arch_name;
    o->name = m->name;
    o->n_layer = hp->n_layer;
    o->n_embd = hp->n_embd;
    o->n_head = hp->n_head;
    o->n_head_kv = hp->n_head_kv;
    o->head_dim = hp->head_dim;
    o->n_ff = hp->n_ff;
    o->n_vocab = hp->n_vocab;
    o->n_ctx_train = hp->n_ctx_train;
    o->n_swa = hp->n_swa;
    o->rope_freq_base = hp->rope_base;
    o->tied_embeddings = m->tied;
    o->n_params = m->n_params;
    o->weight_bytes = m->weight_bytes;
    o->ftype = m->ftype;
    o->device = "cpu";
#ifdef RF_HAVE_GPU
    if (rf_backend_on_device(m->be)) o->device = rf_backend_gpu_name(m->be);
#endif
    return RF_OK;
}

const rf_vocab *rf_model_vocab(const rf_model *m) { return m ? m->vocab : NULL; }
const rf_gguf *rf_model_gguf(const rf_model *m) { return m ? m->g : NULL; }

const rf_chat_template *rf_model_chat_template(const rf_model *m) { return m ? m->chat : NULL; }
