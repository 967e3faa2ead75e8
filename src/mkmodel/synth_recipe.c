/* synth_recipe.c — which type each tensor gets, exactly as llama-quantize decides it
 * (peer src/llama-quant.cpp: tensor_allows_quantization, llama_tensor_get_type_impl,
 * tensor_type_fallback) for the file types mkmodel can produce. The rules are restated here
 * in C; docs/mkmodel.md lists them per type. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "rocmforge/quant.h"
#include "synth_model.h"

/* name, general.file_type (llama_ftype), base type (llama_ftype_get_default_type), alias of */
const synth_ftype synth_ftypes[] = {
    {"f32", 0, RF_TYPE_F32, NULL},      {"f16", 1, RF_TYPE_F16, NULL},
    {"bf16", 32, RF_TYPE_BF16, NULL},   {"q4_0", 2, RF_TYPE_Q4_0, NULL},
    {"q4_1", 3, RF_TYPE_Q4_1, NULL},    {"q5_0", 8, RF_TYPE_Q5_0, NULL},
    {"q5_1", 9, RF_TYPE_Q5_1, NULL},    {"q8_0", 7, RF_TYPE_Q8_0, NULL},
    {"q2_k", 10, RF_TYPE_Q2_K, NULL},   {"q3_k_s", 11, RF_TYPE_Q3_K, NULL},
    {"q3_k_m", 12, RF_TYPE_Q3_K, NULL}, {"q3_k_l", 13, RF_TYPE_Q3_K, NULL},
    {"q4_k_s", 14, RF_TYPE_Q4_K, NULL}, {"q4_k_m", 15, RF_TYPE_Q4_K, NULL},
    {"q5_k_s", 16, RF_TYPE_Q5_K, NULL}, {"q5_k_m", 17, RF_TYPE_Q5_K, NULL},
    {"q6_k", 18, RF_TYPE_Q6_K, NULL},   {"q3_k", 12, RF_TYPE_Q3_K, "q3_k_m"},
    {"q4_k", 15, RF_TYPE_Q4_K, "q4_k_m"}, {"q5_k", 17, RF_TYPE_Q5_K, "q5_k_m"},
    {"mxfp4_moe", 38, RF_TYPE_MXFP4, NULL},
};
const int32_t synth_n_ftypes = (int32_t)(sizeof synth_ftypes / sizeof synth_ftypes[0]);

enum { FT_F32 = 0, FT_F16 = 1, FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13,
       FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_MXFP4_MOE = 38 };

const synth_ftype *synth_ftype_find(const char *name) {
    if (!name) return NULL;
    for (int32_t i = 0; i < synth_n_ftypes; i++) {
        const char *a = synth_ftypes[i].name, *b = name;
        while (*a && *b && *a == tolower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return &synth_ftypes[i];
    }
    return NULL;
}

typedef enum tcat {
    CAT_TOKEN_EMBD,
    CAT_ATTN_Q,
    CAT_ATTN_V,
    CAT_ATTN_K,
    CAT_ATTN_QKV,
    CAT_ATTN_KV_B,
    CAT_ATTN_OUTPUT,
    CAT_FFN_UP,
    CAT_FFN_GATE,
    CAT_FFN_DOWN,
    CAT_OUTPUT,
    CAT_OTHER
} tcat;

/* tensor_get_category: exact names for the embedding/head, substrings for the rest, in this
 * order. */
static tcat category(const char *n) {
    if (!strcmp(n, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    if (strstr(n, "attn_qkv.weight")) return CAT_ATTN_QKV;
    if (strstr(n, "attn_kv_b.weight")) return CAT_ATTN_KV_B;
    if (strstr(n, "attn_v.weight")) return CAT_ATTN_V;
    if (strstr(n, "attn_k.weight")) return CAT_ATTN_K;
    if (strstr(n, "attn_q.weight")) return CAT_ATTN_Q;
    if (strstr(n, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(n, "ffn_up")) return CAT_FFN_UP;
    if (strstr(n, "ffn_gate")) return CAT_FFN_GATE;
    if (strstr(n, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static bool is_attn_v(tcat c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

/* tensor_allows_quantization, for the names mkmodel can produce (plus the common exclusions). */
static bool allows_quantization(const synth_tensor *t) {
    if (t->n_dims < 2) return false;
    size_t n = strlen(t->name);
    if (n < 6 || strcmp(t->name + n - 6, "weight")) return false;
    static const char *const never[] = {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel",
                                        "per_layer_model_proj", "ssm_conv1d", "attn_rel_b.weight",
                                        ".position_embd"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (strstr(t->name, never[i])) return false;
    return true;
}

void synth_qstate_init(synth_qstate *qs, const synth_ftype *ft, bool pure, bool is_70b,
                       int32_t n_gqa, int32_t n_layer, const synth_tensor_list *l) {
    memset(qs, 0, sizeof *qs);
    qs->ft = ft;
    qs->pure = pure;
    qs->is_70b = is_70b;
    qs->n_gqa = n_gqa;
    qs->tied = true; /* assumed tied until output.weight is seen (init_quantize_state_counters) */
    for (int64_t i = 0; i < l->n; i++) {
        tcat c = category(l->t[i].name);
        if (is_attn_v(c)) qs->n_attention_wv++;
        if (c == CAT_OUTPUT) qs->tied = false;
    }
    qs->n_ffn_down = qs->n_ffn_gate = qs->n_ffn_up = n_layer;
    qs->n_expert = 1;
    for (int64_t i = 0; i < l->n; i++)
        if (l->t[i].n_dims == 3 && l->t[i].ne[2] > qs->n_expert) qs->n_expert = (int32_t)l->t[i].ne[2];
}

/* layer_info: with experts (n_expert > 1) the layer of an FFN tensor is read from its name
 * (blk.N.), not the running count, since a layer may hold several ffn_down (experts, shared
 * expert); without, the count. */
static int layer_info(const synth_qstate *qs, int i_count, const char *name) {
    int il = i_count;
    if (qs->n_expert > 1 && sscanf(name, "blk.%d.", &il) != 1) il = i_count;
    return il;
}

static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 ||
           (i_layer - n_layers / 8) % 3 == 2;
}

static int64_t block_of(rf_type t) {
    const rf_type_traits *tr = rf_type_info((int)t);
    return tr ? tr->block_size : 1;
}

/* llama_tensor_get_type_impl restricted to the non-IQ file types (not Falcon). Mixtures of
 * experts: expert tensors (3-D) go by their category like the dense ones (ffn_down_exps is an
 * ffn_down), the layer of an FFN tensor from its name; models of exactly 8 experts get attn_k
 * and attn_v in q8_0 and, for Q2_K, Q3_K_S, Q3_K_M, Q4_K_S, Q4_K_M, attn_output in q5_K (and
 * not the dense attn_output rules). */
static rf_type recipe(synth_qstate *qs, rf_type new_type, const synth_tensor *t, tcat c) {
    const int ft = qs->ft->llama_ftype;
    if (ft == FT_MXFP4_MOE) /* the LM head and every 2-D weight Q8_0, the experts (3-D) MXFP4 */
        return (c == CAT_OUTPUT || (qs->tied && c == CAT_TOKEN_EMBD)) || t->ne[2] <= 1 ? RF_TYPE_Q8_0 : RF_TYPE_MXFP4;
    if (c == CAT_OUTPUT || (qs->tied && c == CAT_TOKEN_EMBD)) {
        /* the LM head: Q6_K unless the base is Q8_0; Q8_0 if a row does not fit the base block */
        if (t->ne[0] % block_of(new_type) != 0)
            new_type = RF_TYPE_Q8_0;
        else if (new_type != RF_TYPE_Q8_0)
            new_type = RF_TYPE_Q6_K;
    } else if (c == CAT_TOKEN_EMBD) {
        /* unchanged for these file types */
    } else if (is_attn_v(c)) {
        if (ft == FT_Q2_K)
            new_type = qs->n_gqa >= 4 ? RF_TYPE_Q4_K : RF_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            new_type = qs->i_attention_wv < 2 ? RF_TYPE_Q5_K : RF_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            new_type = RF_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) &&
                 use_more_bits(qs->i_attention_wv, qs->n_attention_wv))
            new_type = RF_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && qs->i_attention_wv < 4)
            new_type = RF_TYPE_Q5_K;
        /* 70B: attn_v is 8x smaller than attn_q, so it gets more bits */
        if (qs->is_70b && (new_type == RF_TYPE_Q3_K || new_type == RF_TYPE_Q4_K))
            new_type = RF_TYPE_Q5_K;
        if (qs->n_expert == 8) new_type = RF_TYPE_Q8_0;
        ++qs->i_attention_wv;
    } else if (c == CAT_ATTN_K || c == CAT_ATTN_Q) {
        /* only IQ types and 8-expert models change these */
        if (c == CAT_ATTN_K && qs->n_expert == 8) new_type = RF_TYPE_Q8_0;
    } else if (c == CAT_FFN_DOWN) {
        /* dense: the layer is the running count (tensors are visited in layer order) */
        const int i_layer = layer_info(qs, qs->i_ffn_down, t->name), n_layer = qs->n_ffn_down;
        if (ft == FT_Q2_K)
            new_type = RF_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            new_type = i_layer < n_layer / 16 ? RF_TYPE_Q5_K : RF_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            new_type = RF_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (use_more_bits(i_layer, n_layer)) new_type = RF_TYPE_Q6_K;
        } else if (ft == FT_Q5_K_M && use_more_bits(i_layer, n_layer))
            new_type = RF_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i_layer < n_layer / 8)
            new_type = RF_TYPE_Q5_K;
        ++qs->i_ffn_down;
    } else if (c == CAT_ATTN_OUTPUT && qs->n_expert == 8) {
        if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_Q4_K_S || ft == FT_Q4_K_M)
            new_type = RF_TYPE_Q5_K;
    } else if (c == CAT_ATTN_OUTPUT) {
        if (ft == FT_Q2_K)
            new_type = RF_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            new_type = RF_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            new_type = RF_TYPE_Q5_K;
    } else if (c == CAT_ATTN_QKV) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L)
            new_type = RF_TYPE_Q4_K;
        else if (ft == FT_Q4_K_M)
            new_type = RF_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M)
            new_type = RF_TYPE_Q6_K;
    } else if (c == CAT_FFN_GATE) {
        ++qs->i_ffn_gate;
    } else if (c == CAT_FFN_UP) {
        ++qs->i_ffn_up;
    }
    return new_type;
}

/* tensor_type_fallback: a row that is not a multiple of the block size gets a 32-block type,
 * and F16 if even that does not fit. */
static rf_status fallback(synth_qstate *qs, const synth_tensor *t, rf_type target, rf_type *out) {
    *out = target;
    if (t->ne[0] % block_of(target) == 0) return RF_OK;
    qs->n_fallback++;
    rf_type r;
    switch (target) {
    case RF_TYPE_Q2_K:
    case RF_TYPE_Q3_K: r = RF_TYPE_Q4_0; break;
    case RF_TYPE_Q4_K: r = RF_TYPE_Q5_0; break;
    case RF_TYPE_Q5_K: r = RF_TYPE_Q5_1; break;
    case RF_TYPE_Q6_K: r = RF_TYPE_Q8_0; break;
    default:
        return rf_set_error(RF_ERR_UNSUPPORTED,
                            "mkmodel: tensor '%s': row of %lld is not a multiple of %lld (type "
                            "%s) and llama-quantize defines no fallback for it",
                            t->name, (long long)t->ne[0], (long long)block_of(target),
                            rf_type_name((int)target));
    }
    if (t->ne[0] % block_of(r) != 0) r = RF_TYPE_F16;
    *out = r;
    return RF_OK;
}

rf_status synth_tensor_type(synth_qstate *qs, const synth_tensor *t, rf_type *out) {
    if (!allows_quantization(t)) {
        *out = RF_TYPE_F32; /* 1-D tensors (norms, biases, rope_freqs) stay as converted: F32 */
        return RF_OK;
    }
    rf_type new_type = qs->ft->base;
    const rf_type_traits *tr = rf_type_info((int)new_type);
    if (!tr || !tr->is_quantized) {
        *out = new_type;
        return RF_OK;
    }
    if (!qs->pure) new_type = recipe(qs, new_type, t, category(t->name));
    return fallback(qs, t, new_type, out);
}
