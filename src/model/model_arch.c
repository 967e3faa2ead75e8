/* model_arch.c — the architecture table (docs/ARCHITECTURE.md §4.9): for each supported
 * general.architecture, which attention variants and feed-forward its layers use and the hook
 * that reads its own metadata keys (checked before use, errors name the key). Facts about each
 * architecture (key names, what is computed) follow llama.cpp's src/models/<arch>.cpp. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "model/model_meta.h"

/* llama: RoPE over the whole head (llama.cpp asserts n_rot == head size). */

/* gemma3: sliding window on 5 of every 6 layers with their own RoPE base, attention scale
 * 1/sqrt(head size) whatever attention.scale says, optional final logit soft-capping. */
static rf_status hp_gemma3(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if ((st = rf_meta_opt_i32(m, "attention.sliding_window", &hp->n_swa))) return st;
    hp->swa_pattern = 6;
    if ((st = rf_meta_opt_i32(m, "attention.sliding_window_pattern", &hp->swa_pattern))) return st;
    if ((st = rf_meta_opt_f32(m, "rope.freq_base_swa", &hp->rope_base_swa))) return st;
    if (!(hp->rope_base_swa > 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: gemma3.rope.freq_base_swa = %g is out of range", hp->rope_base_swa);
    return rf_meta_opt_f32(m, "final_logit_softcapping", &hp->final_softcap);
}

/* mistral3 (Mistral Small 3.x text): llama's layers. Files converted from Ministral 3 add YaRN
 * (model_yarn.c; yarn_log_multiplier refused) and a Llama-4 style attention temperature, which
 * is not built: refused by name rather than computed wrongly past the original context. */
static rf_status hp_mistral3(rf_model *m) {
    float t = 0;
    rf_status st = rf_meta_opt_f32(m, "attention.temperature_scale", &t);
    if (st) return st;
    if (t != 0)
        return rf_set_error(RF_ERR_UNSUPPORTED,
                            "model metadata: mistral3.attention.temperature_scale = %g (Llama-4 style attention "
                            "temperature, Ministral 3) is not supported", t);
    return RF_OK;
}

/* phi3 (Phi-3, Phi-4, Phi-4-mini): llama.cpp ignores attention.sliding_window for phi3 (its
 * SWA is disabled there), so it is ignored here too. The longrope factors and
 * rope.scaling.attn_factor are read with the weights (model_load.c). */

/* qwen3moe (Qwen3-30B-A3B, 235B-A22B): qwen3's attention (per-head Q/K RMSNorm, NeoX RoPE over
 * the whole head) and a mixture of experts in every layer, read by the common MoE keys
 * (model_load.c). llama.cpp's qwen3moe routes by a softmax over all experts and always
 * renormalises the top-k weights, with no scale: it reads neither expert_weights_norm nor
 * expert_weights_scale, so neither is honoured here either (a file saying otherwise is warned
 * about, then computed as llama.cpp computes it). */
static rf_status hp_qwen3moe(rf_model *m) {
    rf_hparams *hp = &m->hp;
    if (!hp->moe_norm_w || hp->moe_w_scale != 1.0f)
        RF_LOGW("model metadata: qwen3moe.expert_weights_norm / expert_weights_scale ignored (qwen3moe always "
                "renormalises the top-%d weights, unscaled, as llama.cpp does)", hp->n_expert_used);
    hp->moe_gating = RF_MOE_SOFTMAX;
    hp->moe_norm_w = true;
    hp->moe_w_scale = 1.0f;
    return RF_OK;
}

/* gpt-oss's experts: llama.cpp's openai-moe passes norm_w false and its expert_weights_scale is
 * never read (0: no scale); the gating takes the top-k logits and softmaxes those k. */
static rf_status gpt_oss_moe(rf_model *m) {
    rf_hparams *hp = &m->hp;
    if (hp->moe_norm_w != true || hp->moe_w_scale != 1.0f)
        RF_LOGW("model metadata: gpt-oss.expert_weights_norm / expert_weights_scale ignored (llama.cpp reads neither)");
    hp->moe_gating = RF_MOE_SOFTMAX_TOPK;
    hp->moe_norm_w = false;
    hp->moe_w_scale = 1.0f;
    return RF_OK;
}

/* gpt-oss (openai-moe in llama.cpp): sliding window (attention.sliding_window, required) on the
 * even layers (il % 2 == 0, llama.cpp's pattern 2 unless attention.sliding_window_pattern says
 * otherwise), the same RoPE base on both kinds unless rope.freq_base_swa is given, YaRN from the
 * rope.scaling keys (model_load.c), attention sinks, Q/K/V/O biases. Its experts: the k largest
 * router logits (after the router's bias), softmax over those k, no renormalisation and no scale
 * (llama.cpp reads no expert_weights_* key for it), the clamped SwiGLU. */
static rf_status hp_gpt_oss(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    char k[160];
    snprintf(k, sizeof k, "%s.attention.sliding_window", hp->arch_name);
    if (rf_gguf_find_key(m->g, k) < 0) return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s'", k);
    if ((st = rf_meta_opt_i32(m, "attention.sliding_window", &hp->n_swa))) return st;
    if (hp->n_swa <= 0) return rf_set_error(RF_ERR_RANGE, "model metadata: %s = %d is out of range", k, hp->n_swa);
    hp->swa_pattern = 2;
    if ((st = rf_meta_opt_i32(m, "attention.sliding_window_pattern", &hp->swa_pattern))) return st;
    if (hp->swa_pattern < 0 || hp->swa_pattern > hp->n_layer)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.attention.sliding_window_pattern = %d is out of range",
                            hp->arch_name, hp->swa_pattern);
    hp->rope_base_swa = hp->rope_base;
    if ((st = rf_meta_opt_f32(m, "rope.freq_base_swa", &hp->rope_base_swa))) return st;
    if (!(hp->rope_base_swa > 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.freq_base_swa = %g is out of range", hp->arch_name,
                            hp->rope_base_swa);
    if (hp->rope_base_swa != hp->rope_base && hp->yarn)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: %s.rope.freq_base_swa != rope.freq_base with YaRN is not supported",
                            hp->arch_name);
    hp->rope_scale_swa = hp->rope_scale;
    hp->attn_scale = 1.0f / sqrtf((float)hp->n_rot); /* llama.cpp: 1/sqrt(n_rot), whatever attention.scale says */
    return gpt_oss_moe(m);
}

/* qwen35 (Qwen3.5 dense): gated DeltaNet layers with every full_attention_interval-th layer
 * (default 4) gated full attention. The DeltaNet sizes: ssm.conv_kernel, ssm.state_size (the
 * key and value head size), ssm.group_count (key heads), ssm.time_step_rank (value heads),
 * ssm.inner_size (= value heads x state size). RoPE is llama.cpp's interleaved M-RoPE; for text
 * every position component is the token's position, so wherever rope.dimension_sections
 * assigns each rotated pair to the t/h/w components it is NeoX RoPE over rope.dimension_count
 * dimensions (the pairs of the 4th component would not rotate: refused). MTP blocks
 * (nextn_predict_layers) follow the main layers and are not run. */
static rf_status hp_qwen35(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    if ((st = rf_meta_req_i32(m, "ssm.conv_kernel", &hp->ssm_d_conv)) || (st = rf_meta_req_i32(m, "ssm.state_size", &hp->ssm_d_state)) ||
        (st = rf_meta_req_i32(m, "ssm.group_count", &hp->ssm_n_group)) ||
        (st = rf_meta_req_i32(m, "ssm.time_step_rank", &hp->ssm_dt_rank)) ||
        (st = rf_meta_req_i32(m, "ssm.inner_size", &hp->ssm_d_inner)))
        return st;
    if (hp->ssm_d_conv > 64 || hp->ssm_d_state > 1024 || hp->ssm_n_group > 4096 || hp->ssm_dt_rank > 4096 ||
        hp->ssm_dt_rank % hp->ssm_n_group || (int64_t)hp->ssm_dt_rank * hp->ssm_d_state != hp->ssm_d_inner)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.ssm: conv %d, state %d, %d key heads, %d value heads, "
                            "inner %d do not fit (value heads a multiple of key heads, inner = value heads x state)",
                            hp->arch_name, hp->ssm_d_conv, hp->ssm_d_state, hp->ssm_n_group, hp->ssm_dt_rank, hp->ssm_d_inner);
    hp->full_attn_every = 4;
    if ((st = rf_meta_opt_i32(m, "full_attention_interval", &hp->full_attn_every))) return st;
    if (hp->full_attn_every < 1)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.full_attention_interval = %d", hp->arch_name, hp->full_attn_every);
    char k[96];
    snprintf(k, sizeof k, "%s.attention.recurrent_layers", hp->arch_name);
    if (rf_gguf_find_key(m->g, k) >= 0)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: '%s' (an explicit layer pattern) is not supported", k);
    int32_t nextn = 0;
    if ((st = rf_meta_opt_i32(m, "nextn_predict_layers", &nextn))) return st;
    if (nextn >= hp->n_layer)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.nextn_predict_layers = %d of %d blocks", hp->arch_name, nextn, hp->n_layer);
    hp->n_layer -= nextn;
    /* M-RoPE sections: with text positions (t = h = w = pos, e = 0) llama.cpp's interleaved rule
     * gives pair i the component of sector i % sum(sections): t, h or w (pos) unless it falls to e */
    snprintf(k, sizeof k, "%s.rope.dimension_sections", hp->arch_name);
    if (rf_gguf_find_key(m->g, k) >= 0) {
        uint64_t n = 0;
        const void *data = NULL;
        const rf_gguf_value *val = rf_gguf_kv_value(m->g, rf_gguf_find_key(m->g, k));
        if (val->type != RF_GGUF_ARRAY || (val->v.arr.elem_type != RF_GGUF_INT32 && val->v.arr.elem_type != RF_GGUF_UINT32) ||
            rf_gguf_get_arr(m->g, k, -1, &n, &data) || n < 3 || n > 4)
            return rf_set_error(RF_ERR_FORMAT, "model metadata: '%s' must be 3 or 4 integers", k);
        const int32_t *sec = data;
        int64_t s[4] = {sec[0], sec[1], sec[2], n > 3 ? sec[3] : 0}, sum = 0;
        for (int i = 0; i < 4; i++) {
            if (s[i] < 0 || s[i] > 1024) return rf_set_error(RF_ERR_FORMAT, "model metadata: '%s' out of range", k);
            sum += s[i];
        }
        if (sum <= 0 || sum > hp->head_dim / 2) return rf_set_error(RF_ERR_FORMAT, "model metadata: '%s' sums to %lld", k, (long long)sum);
        for (int64_t i = 0; i < hp->n_rot / 2; i++) {
            int64_t sct = i % sum;
            bool pos = (sct % 3 == 0 && sct < 3 * s[0]) || (sct % 3 == 1 && sct < 3 * s[1]) || (sct % 3 == 2 && sct < 3 * s[2]);
            if (!pos)
                return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: '%s' leaves rotated pair %lld to the 4th M-RoPE component (not supported)",
                                    k, (long long)i);
        }
    }
    return RF_OK;
}

/* qwen35moe (Qwen3.5/3.6 MoE, e.g. Qwen3.6-35B-A3B): qwen35's layers (gated DeltaNet, every
 * full_attention_interval-th layer gated attention, M-RoPE sections) with a mixture of experts
 * in every layer plus a shared expert behind a sigmoid gate. llama.cpp's qwen35moe routes by a
 * softmax over all experts, always renormalises the top-k weights (expert_weights_norm is not
 * read: a file saying false is warned about) and scales them by expert_weights_scale where the
 * file gives one. feed_forward_length may be absent (model_load.c). */
static rf_status hp_qwen35moe(rf_model *m) {
    rf_hparams *hp = &m->hp;
    if (!hp->moe_norm_w)
        RF_LOGW("model metadata: %s.expert_weights_norm = false ignored (llama.cpp's %s always renormalises the top-%d "
                "weights)", hp->arch_name, hp->arch_name, hp->n_expert_used);
    hp->moe_gating = RF_MOE_SOFTMAX;
    hp->moe_norm_w = true;
    return hp_qwen35(m);
}

/* qwen3next (Qwen3-Next-80B-A3B): qwen35moe's layers with three differences in the file, as
 * llama.cpp's qwen3next reads them: the DeltaNet value heads are grouped by key head (value head
 * h reads key head h / (value heads / key heads)) and beta/alpha come as one ssm_ba,
 * both regrouped at load (model_weights.c, RF_AF_DN_GROUPED); RoPE is plain NeoX over
 * rope.dimension_count (no M-RoPE sections); feed_forward_length is written (unused: every layer
 * is a mixture of experts; a layer without a router is refused by its missing tensor). */
static rf_status hp_qwen3next(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st = hp_qwen35moe(m);
    if (st) return st;
    hp->ssm_n_group_file = hp->ssm_n_group;
    return RF_OK;
}

static const rf_arch_desc k_archs[] = {
    {"llama", RF_ROPE_NORMAL, RF_GLU_SWIGLU, RF_AF_FULL_ROT, 0, NULL},
    {"qwen2", RF_ROPE_NEOX, RF_GLU_SWIGLU, RF_AF_QKV_BIAS, 0, NULL},
    {"gemma3", RF_ROPE_NEOX, RF_GLU_GEGLU, RF_AF_QK_NORM | RF_AF_POST_NORMS | RF_AF_EMBED_SCALE, 0, hp_gemma3},
    {"qwen3", RF_ROPE_NEOX, RF_GLU_SWIGLU, RF_AF_QK_NORM | RF_AF_FULL_ROT, 0, NULL},
    /* smollm3: llama.cpp fixes the NoPE step at 4 (n_no_rope_layer_step); no metadata key */
    {"smollm3", RF_ROPE_NORMAL, RF_GLU_SWIGLU, RF_AF_FULL_ROT, 4, NULL},
    {"mistral3", RF_ROPE_NORMAL, RF_GLU_SWIGLU, RF_AF_FULL_ROT, 0, hp_mistral3},
    {"phi3", RF_ROPE_NEOX, RF_GLU_SWIGLU, RF_AF_FUSED_QKV | RF_AF_FUSED_GATE_UP, 0, NULL},
    {"qwen3moe", RF_ROPE_NEOX, RF_GLU_SWIGLU, RF_AF_QK_NORM | RF_AF_FULL_ROT | RF_AF_MOE, 0, hp_qwen3moe},
    {"gpt-oss", RF_ROPE_NEOX, RF_GLU_SWIGLU_OAI, RF_AF_QKV_BIAS | RF_AF_SINKS | RF_AF_FFN_NORM_POST_ATTN | RF_AF_MOE, 0,
     hp_gpt_oss},
    {"qwen35", RF_ROPE_NEOX, RF_GLU_SWIGLU, RF_AF_QK_NORM | RF_AF_DELTANET, 0, hp_qwen35},
    {"qwen35moe", RF_ROPE_NEOX, RF_GLU_SWIGLU, RF_AF_QK_NORM | RF_AF_DELTANET | RF_AF_MOE, 0, hp_qwen35moe},
    {"qwen3next", RF_ROPE_NEOX, RF_GLU_SWIGLU, RF_AF_QK_NORM | RF_AF_DELTANET | RF_AF_MOE | RF_AF_DN_GROUPED, 0,
     hp_qwen3next},
    /* gemma4: model_gemma4.c (hyper-parameters, weights) and forward_gemma4.c (its layer) */
    {"gemma4", RF_ROPE_NEOX, RF_GLU_GEGLU, RF_AF_QK_NORM | RF_AF_POST_NORMS | RF_AF_EMBED_SCALE | RF_AF_GEMMA4, 0,
     rf_gemma4_hparams},
};
#define N_ARCHS ((int)(sizeof k_archs / sizeof k_archs[0]))

const rf_arch_desc *rf_arch_find(const char *name) {
    for (int i = 0; name && i < N_ARCHS; i++)
        if (!strcmp(k_archs[i].name, name)) return &k_archs[i];
    return NULL;
}

/* The table's names in order (a constant, so callers on any thread may print it; test_model_arch
 * checks it against the table). */
const char *rf_supported_archs(void) { return "llama, qwen2, gemma3, qwen3, smollm3, mistral3, phi3, qwen3moe, gpt-oss, qwen35, qwen35moe, qwen3next, gemma4"; }

int rf_arch_count(void) { return N_ARCHS; }
const rf_arch_desc *rf_arch_at(int i) { return i >= 0 && i < N_ARCHS ? &k_archs[i] : NULL; }
