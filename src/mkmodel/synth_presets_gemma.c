/* synth_presets_gemma.c — mkmodel's Gemma family: the metadata keys and tensors llama.cpp's
 * gemma3 and gemma4 load (src/models/gemma3.cpp, gemma4.cpp; keys as conversion/gemma.py writes
 * them), and the gemma4-specific shapes of its presets (a side table by preset name; the MoE
 * presets' experts are in synth_presets.c's synth_moe_table). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "synth_model.h"

/* What a gemma4 preset adds to its synth_preset row (head_dim there is the sliding layers'):
 * the layer kinds (one letter per layer, S sliding / F full), the full layers' head size, KV
 * heads and rotated pairs (the rest of rope_freqs is 1e30: still), the sliding layers' RoPE base,
 * shared-KV layers, per-layer embedding width, layers without attn_v (V = the K product),
 * final soft-cap, the layer output scale. */
typedef struct gemma4_shape {
    const char *preset;
    const char *kinds;
    int32_t head_dim_full, n_head_kv_full, rot_pairs_full;
    float rope_base_swa;
    int32_t n_kv_shared, n_embd_ple;
    bool full_no_v;
    float softcap, out_scale;
} gemma4_shape;

static const gemma4_shape k_shapes[] = {
    {"tiny-gemma4", "SSFSSFSF", 128, 1, 16, 10000.0f, 2, 64, true, 30.0f, 0.8f},
    /* the MoE layout (26B-A4B's kind): every layer's feed-forward is a dense GeGLU beside the
     * experts (synth_moe_table); no per-layer embeddings or shared-KV layers */
    {"tiny-gemma4-wide", "SSFSSFSF", 512, 1, 64, 10000.0f, 2, 64, true, 30.0f, 0.8f},
    {"tiny-gemma4moe", "SSFSSF", 128, 1, 16, 10000.0f, 0, 0, true, 30.0f, 0.8f},
    /* Gemma 4 26B-A4B (docs/models.md names the sources): 25 sliding + 5 full layers (5:1),
     * full layers 2 KV heads of 512, RoPE on 0.25 of them (64 pairs), V = K; no per-layer
     * embeddings or shared KV. The output scale is synthetic data (the trained value is not
     * a shape). */
    {"gemma4-26b-a4b", "SSSSSFSSSSSFSSSSSFSSSSSFSSSSSF", 512, 2, 64, 10000.0f, 0, 0, true, 30.0f, 0.8f},
};

static const gemma4_shape *shape_of(const synth_preset *p) {
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if (!strcmp(k_shapes[i].preset, p->name)) return &k_shapes[i];
    return NULL;
}

static float mat_std(int64_t n_in) { return 1.0f / sqrtf((float)n_in); }

#define ADD(...)                                           \
    do {                                                   \
        if (!synth_list_add(l, __VA_ARGS__)) return false; \
    } while (0)
#define LADD(suffix, ...)                              \
    do {                                               \
        snprintf(nm, sizeof nm, "blk.%d." suffix, i);  \
        ADD(nm, __VA_ARGS__);                          \
    } while (0)

/* gemma3 (peer src/models/gemma3.cpp): the llama tensors plus per-head q/k RMS norms and the
 * post-attention / post-FFN norms. Gemma GGUFs store norm weights with the (1 + w) already
 * folded in, so 1.0 is the neutral value. The post-norm gains are 4.0, not 1.0: Gemma scales the
 * (tied) embedding by sqrt(n_embd), so with gains of 1 the input token's own embedding dominates
 * the final state and its logit is ~sqrt(n_embd)*|e|^2/rms(x) = 16 against a logit std of 2 (the
 * model only repeats its input). With 2·n_layer block outputs of rms 4 it is ~2.3 std: elevated
 * but not winning. */
bool synth_tensors_gemma3(synth_tensor_list *l, const synth_preset *p, int32_t n_layer,
                           uint32_t n_vocab) {
    if (!synth_tensors_llama_like(l, p, n_layer, n_vocab, false)) return false;
    char nm[64];
    for (int32_t i = 0; i < n_layer; i++) {
        snprintf(nm, sizeof nm, "blk.%d.attn_q_norm.weight", i);
        ADD(nm, 1, p->head_dim, 1, SYNTH_GEN_ONES, 0);
        snprintf(nm, sizeof nm, "blk.%d.attn_k_norm.weight", i);
        ADD(nm, 1, p->head_dim, 1, SYNTH_GEN_ONES, 0);
        snprintf(nm, sizeof nm, "blk.%d.post_attention_norm.weight", i);
        ADD(nm, 1, p->n_embd, 1, SYNTH_GEN_CONST, 4.0f);
        snprintf(nm, sizeof nm, "blk.%d.post_ffw_norm.weight", i);
        ADD(nm, 1, p->n_embd, 1, SYNTH_GEN_CONST, 4.0f);
    }
    return true;
}

/* The keys convert_hf_to_gguf writes for Gemma 3 (no rope.dimension_count, no vocab_size). */
rf_status synth_write_kv_gemma3(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    rf_status st = synth_write_kv_common(w, p, n_layer, "gemma3", KV_HEAD_LEN);
    if (st) return st;
    if (p->n_swa > 0) st = rf_gguf_set_u32(w, "gemma3.attention.sliding_window", (uint32_t)p->n_swa);
    return st;
}

/* Norm gains: 1 for the pre-norms, near 1 for the K norms (so a skipped norm shows), 4 for the
 * post-norms (gemma3's reason: the scaled embedding must not dominate the output). The Q norm
 * gain is 2/sqrt(head size): gemma4 scores q.k unscaled, and with unit gains the scores of
 * these random weights have std ~sqrt(head size) (8..11), a softmax so peaked that float
 * rounding differences grow ~2.5x per layer (measured: 3.8e-3 rel. L2 vs llama.cpp after 8
 * layers at 100 tokens, f32); trained gains keep scores moderate, as this does (std ~2). */
/* A layer count the preset's kinds allow: all of them, or (--layers) the first n where no layer
 * reads another's KV. */
static bool layers_ok(const gemma4_shape *x, int32_t n_layer) {
    const int32_t n = (int32_t)strlen(x->kinds);
    return n_layer == n || (n_layer >= 1 && n_layer < n && x->n_kv_shared == 0);
}

bool synth_tensors_gemma4(synth_tensor_list *l, const synth_preset *p, int32_t n_layer, uint32_t n_vocab) {
    const gemma4_shape *x = shape_of(p);
    if (!x || !layers_ok(x, n_layer)) return false;
    const int64_t E = p->n_embd, F = p->n_ff, H = p->n_head, P = x->n_embd_ple;
    const float emb_std = 2.0f / sqrtf((float)E);
    char nm[64];
    ADD("token_embd.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    ADD("output_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
    if (!p->tied) ADD("output.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    /* only with a full layer: llama.cpp loads rope_freqs from the full layers and refuses a file
     * with a tensor it did not load (--layers taking sliding layers only) */
    if (memchr(x->kinds, 'F', (size_t)n_layer))
        ADD("rope_freqs.weight", 1, x->head_dim_full / 2, 1, SYNTH_GEN_PROP_ROPE, (float)x->rot_pairs_full);
    if (P > 0) {
        ADD("per_layer_token_embd.weight", 2, P * n_layer, n_vocab, SYNTH_GEN_RANDOM, 1.0f);
        ADD("per_layer_model_proj.weight", 2, E, P * n_layer, SYNTH_GEN_RANDOM, mat_std(E));
        ADD("per_layer_proj_norm.weight", 1, P, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
    }
    const int first_shared = n_layer - x->n_kv_shared;
    const synth_moe *moe = synth_moe_of(p);
    for (int32_t i = 0; i < n_layer; i++) {
        const bool full = x->kinds[i] == 'F';
        const int64_t D = full ? x->head_dim_full : p->head_dim, KV = (full ? x->n_head_kv_full : p->n_head_kv) * D;
        const bool own_kv = i < first_shared;
        LADD("attn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        LADD("attn_q.weight", 2, E, H * D, SYNTH_GEN_RANDOM, mat_std(E));
        LADD("attn_q_norm.weight", 1, D, 1, SYNTH_GEN_CONST, 1.0f / sqrtf((float)D));
        if (own_kv) {
            LADD("attn_k.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
            LADD("attn_k_norm.weight", 1, D, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
            if (!(full && x->full_no_v)) LADD("attn_v.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
        }
        LADD("attn_output.weight", 2, H * D, E, SYNTH_GEN_RANDOM, mat_std(H * D));
        LADD("post_attention_norm.weight", 1, E, 1, SYNTH_GEN_CONST, 4.0f);
        LADD("ffn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        LADD("ffn_gate.weight", 2, E, F, SYNTH_GEN_RANDOM, mat_std(E));
        LADD("ffn_up.weight", 2, E, F, SYNTH_GEN_RANDOM, mat_std(E));
        LADD("ffn_down.weight", 2, F, E, SYNTH_GEN_RANDOM, mat_std(F));
        LADD("post_ffw_norm.weight", 1, E, 1, SYNTH_GEN_CONST, 4.0f);
        LADD("layer_output_scale.weight", 1, 1, 1, SYNTH_GEN_CONST, x->out_scale);
        if (moe) {
            /* the router reads rmsnorm(x) * scale / sqrt(E) (entries of rms 1/sqrt(E)): std 4
             * gives logits of std ~4, top-k mostly well apart (qwen3moe's reason; at std 2 one of
             * the 4 golden prompts met a router near tie, tests/data/logits/NOTE.md) */
            const int64_t FE = moe->n_ff_exp, NE = moe->n_expert;
            LADD("ffn_gate_inp.weight", 2, E, NE, SYNTH_GEN_RANDOM, 3.0f);
            LADD("ffn_gate_inp.scale", 1, E, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
            LADD("pre_ffw_norm_2.weight", 1, E, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
            LADD("post_ffw_norm_1.weight", 1, E, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
            LADD("post_ffw_norm_2.weight", 1, E, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
            snprintf(nm, sizeof nm, "blk.%d.ffn_gate_exps.weight", i);
            if (!synth_list_add3(l, nm, E, FE, NE, SYNTH_GEN_RANDOM, mat_std(E))) return false;
            snprintf(nm, sizeof nm, "blk.%d.ffn_up_exps.weight", i);
            if (!synth_list_add3(l, nm, E, FE, NE, SYNTH_GEN_RANDOM, mat_std(E))) return false;
            snprintf(nm, sizeof nm, "blk.%d.ffn_down_exps.weight", i);
            if (!synth_list_add3(l, nm, FE, E, NE, SYNTH_GEN_RANDOM, mat_std(FE))) return false;
        }
        if (P > 0) {
            LADD("inp_gate.weight", 2, E, P, SYNTH_GEN_RANDOM, mat_std(E));
            LADD("proj.weight", 2, P, E, SYNTH_GEN_RANDOM, mat_std(P));
            LADD("post_norm.weight", 1, E, 1, SYNTH_GEN_CONST, 2.0f);
        }
    }
    return true;
}

rf_status synth_write_kv_gemma4(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    const gemma4_shape *x = shape_of(p);
    if (!x) return rf_set_error(RF_ERR_INTERNAL, "mkmodel: preset '%s' has no gemma4 shapes", p->name);
    if (!layers_ok(x, n_layer) || n_layer > 512)
        return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: preset '%s' has %d layers (its layer kinds are fixed%s)", p->name,
                            (int)strlen(x->kinds), x->n_kv_shared ? ", shared-KV layers last" : "; fewer take the first ones");
    rf_status st;
    uint8_t swa[512];
    uint32_t kv[512];
    for (int32_t i = 0; i < n_layer; i++) {
        swa[i] = x->kinds[i] == 'S';
        kv[i] = (uint32_t)(swa[i] ? p->n_head_kv : x->n_head_kv_full);
    }
#define U32(k, v) \
    if ((st = rf_gguf_set_u32(w, "gemma4." k, (uint32_t)(v)))) return st
#define F32(k, v) \
    if ((st = rf_gguf_set_f32(w, "gemma4." k, (v)))) return st
    U32("block_count", n_layer);
    U32("context_length", p->n_ctx);
    U32("embedding_length", p->n_embd);
    U32("feed_forward_length", p->n_ff);
    U32("attention.head_count", p->n_head);
    if ((st = rf_gguf_set_arr(w, "gemma4.attention.head_count_kv", RF_GGUF_UINT32, kv, (uint64_t)n_layer))) return st;
    F32("rope.freq_base", p->rope_base);
    F32("rope.freq_base_swa", x->rope_base_swa);
    F32("attention.layer_norm_rms_epsilon", p->rms_eps);
    U32("attention.key_length", x->head_dim_full);
    U32("attention.value_length", x->head_dim_full);
    U32("attention.key_length_swa", p->head_dim);
    U32("attention.value_length_swa", p->head_dim);
    U32("rope.dimension_count", x->head_dim_full);
    U32("rope.dimension_count_swa", p->n_rot ? p->n_rot : p->head_dim);
    U32("attention.sliding_window", p->n_swa);
    if ((st = rf_gguf_set_arr(w, "gemma4.attention.sliding_window_pattern", RF_GGUF_BOOL, swa, (uint64_t)n_layer)))
        return st;
    U32("attention.shared_kv_layers", x->n_kv_shared);
    U32("embedding_length_per_layer_input", x->n_embd_ple);
    if (x->softcap > 0) F32("final_logit_softcapping", x->softcap);
    const synth_moe *moe = synth_moe_of(p);
    if (moe) {
        U32("expert_count", moe->n_expert);
        U32("expert_used_count", moe->n_expert_used);
        U32("expert_feed_forward_length", moe->n_ff_exp);
    }
#undef U32
#undef F32
    return RF_OK;
}
