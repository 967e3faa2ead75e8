/* test_model_arch.c — the architecture table and the per-layer plan it gives (model_arch.c,
 * docs/ARCHITECTURE.md §4.9), on the tiny synthetic models (written with mkmodel's API into a temporary
 * directory):
 *  - rf_supported_archs() names exactly the table's architectures, in order;
 *  - a file of an architecture not in the table is refused naming it and the supported list;
 *  - each tiny model's layers get the mixer, feed-forward and attention variants its
 *    architecture says (Q/K norms, biases, RoPE on/off, sliding window, joined tensors from the
 *    file as views), checked on the loaded rf_layer fields;
 *  - qwen3moe's mixture-of-experts layers, and files with inconsistent expert counts, top-k or
 *    expert tensor shapes refused with one line naming the key or tensor;
 *  - qwen35moe / qwen3next: the hybrid plan with experts and shared experts, qwen3next's
 *    regrouped key heads, inconsistent shared-expert / DeltaNet keys and tensors refused.
 * Whether those variants compute the right thing is test_model_golden's job (llama.cpp goldens). */
#include "test_util.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "rocmforge/gguf.h"
#include "rocmforge/mkmodel.h"

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/rf_test_model_arch_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static rf_model *load_preset(const char *preset, const char *type) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s.gguf", g_dir, preset, type);
    if (access(path, R_OK) != 0) {
        rf_mkmodel_opts o = {.preset = preset, .type = type, .seed = 0};
        if (rf_mkmodel_write(&o, path)) fail_msg("mkmodel %s %s: %s", preset, type, rf_last_error());
    }
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    mp.n_threads = 1;
    rf_model *m = NULL;
    if (rf_model_load(path, &mp, &m)) fail_msg("load %s: %s", path, rf_last_error());
    return m;
}

static void test_supported_list(void **state) {
    (void)state;
    char want[512] = "";
    assert_true(rf_arch_count() >= 3);
    for (int i = 0; i < rf_arch_count(); i++) {
        const rf_arch_desc *a = rf_arch_at(i);
        assert_non_null(a);
        assert_ptr_equal(rf_arch_find(a->name), a);
        if (i) strcat(want, ", ");
        strcat(want, a->name);
    }
    assert_null(rf_arch_at(rf_arch_count()));
    assert_null(rf_arch_find("qwen2moe"));
    assert_string_equal(rf_supported_archs(), want);
}

/* A file whose general.architecture is not in the table: the error names it and the list. */
static void test_unsupported_arch(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/moe.gguf", g_dir);
    rf_gguf_writer *w = rf_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(rf_gguf_set_str(w, "general.architecture", "qwen2moe"), RF_OK);
    assert_int_equal(rf_gguf_write_file(w, path), RF_OK);
    rf_gguf_writer_free(w);
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    rf_model *m = NULL;
    assert_int_equal(rf_model_load(path, &mp, &m), RF_ERR_UNSUPPORTED);
    assert_null(m);
    printf("  %s\n", rf_last_error());
    assert_non_null(strstr(rf_last_error(), "'qwen2moe'"));
    assert_non_null(strstr(rf_last_error(), rf_supported_archs()));
}

/* A metadata-only mistral3 file with one extra key: refused at load with status want, the error
 * naming `names` (the key itself when NULL). */
static void check_mistral3_refused(const char *key, bool is_str, const char *sval, float fval, rf_status want,
                                   const char *names) {
    char path[512];
    snprintf(path, sizeof path, "%s/m3.gguf", g_dir);
    rf_gguf_writer *w = rf_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(rf_gguf_set_str(w, "general.architecture", "mistral3"), RF_OK);
    const char *u[] = {"mistral3.embedding_length", "mistral3.block_count", "mistral3.feed_forward_length",
                       "mistral3.attention.head_count"};
    const uint32_t uv[] = {256, 2, 768, 4};
    for (int i = 0; i < 4; i++) assert_int_equal(rf_gguf_set_u32(w, u[i], uv[i]), RF_OK);
    assert_int_equal(rf_gguf_set_f32(w, "mistral3.attention.layer_norm_rms_epsilon", 1e-5f), RF_OK);
    if (is_str) assert_int_equal(rf_gguf_set_str(w, key, sval), RF_OK);
    else assert_int_equal(rf_gguf_set_f32(w, key, fval), RF_OK);
    assert_int_equal(rf_gguf_write_file(w, path), RF_OK);
    rf_gguf_writer_free(w);
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    rf_model *m = NULL;
    assert_int_equal(rf_model_load(path, &mp, &m), want);
    printf("  %s\n", rf_last_error());
    assert_non_null(strstr(rf_last_error(), names ? names : key));
}

/* Ministral 3 files (mistral3 with a Llama-4 attention temperature) are refused by key; YaRN
 * without its original context length is refused naming that key. */
static void test_mistral3_refusals(void **state) {
    (void)state;
    check_mistral3_refused("mistral3.rope.scaling.type", true, "yarn", 0, RF_ERR_NOT_FOUND,
                           "mistral3.rope.scaling.original_context_length");
    check_mistral3_refused("mistral3.attention.temperature_scale", false, NULL, 0.1f, RF_ERR_UNSUPPORTED, NULL);
}

/* Every layer: attention mixer, dense GLU; the flags of the table entry. */
static void check_common(const rf_model *m, const char *arch) {
    assert_string_equal(m->hp.arch->name, arch);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const rf_layer *L = &m->layers[il];
        assert_int_equal(L->mixer, RF_MIXER_ATTENTION);
        assert_int_equal(L->ffn, RF_FFN_DENSE_GLU);
        assert_true(rf_has(&L->wq) && rf_has(&L->wk) && rf_has(&L->wv) && rf_has(&L->wo));
        assert_true(rf_has(&L->ffn_gate) && rf_has(&L->ffn_up) && rf_has(&L->ffn_down));
        assert_int_equal(rf_has(&L->q_norm), (m->hp.arch->flags & RF_AF_QK_NORM) != 0);
        assert_int_equal(rf_has(&L->bq), (m->hp.arch->flags & RF_AF_QKV_BIAS) != 0);
    }
}

static void test_layer_plans(void **state) {
    (void)state;
    rf_model *m = load_preset("tiny", "f32");
    check_common(m, "llama");
    for (int il = 0; il < m->hp.n_layer; il++) assert_true(m->layers[il].rope && !m->layers[il].is_swa);
    assert_int_equal(m->hp.rope_mode, RF_ROPE_NORMAL);
    rf_model_free(m);

    m = load_preset("tiny-qwen2", "f32");
    check_common(m, "qwen2");
    assert_int_equal(m->hp.rope_mode, RF_ROPE_NEOX);
    rf_model_free(m);

    m = load_preset("tiny-gemma3", "f32"); /* sliding window on 5 of every 6 layers */
    check_common(m, "gemma3");
    for (int il = 0; il < m->hp.n_layer; il++) {
        assert_int_equal(m->layers[il].is_swa, il % 6 < 5);
        assert_true(rf_has(&m->layers[il].attn_post_norm) && rf_has(&m->layers[il].ffn_post_norm));
    }
    assert_int_equal(m->hp.glu, RF_GLU_GEGLU);
    rf_model_free(m);

    m = load_preset("tiny-qwen3", "f32"); /* per-head Q/K norms of head_dim, no biases, Q != E */
    check_common(m, "qwen3");
    assert_int_equal(m->hp.rope_mode, RF_ROPE_NEOX);
    assert_int_equal(m->layers[0].q_norm.ne[0], m->hp.head_dim);
    assert_true(m->hp.n_head * m->hp.head_dim != m->hp.n_embd);
    rf_model_free(m);

    m = load_preset("tiny-smollm3", "f32"); /* NoPE on layers 3, 7, ... */
    check_common(m, "smollm3");
    for (int il = 0; il < m->hp.n_layer; il++) assert_int_equal(m->layers[il].rope, (il + 1) % 4 != 0);
    rf_model_free(m);

    m = load_preset("tiny-mistral3", "f32");
    check_common(m, "mistral3");
    assert_int_equal(m->hp.rope_mode, RF_ROPE_NORMAL);
    rf_model_free(m);

    /* phi3: Q/K/V rows of attn_qkv and gate/up rows of ffn_up as views; partial RoPE; the
     * short longrope factors and the converter's gain */
    m = load_preset("tiny-phi3", "q8_0");
    check_common(m, "phi3");
    const rf_layer *L = &m->layers[1];
    const int64_t Q = (int64_t)m->hp.n_head * m->hp.head_dim, KV = (int64_t)m->hp.n_head_kv * m->hp.head_dim;
    assert_true(rf_has(&L->wqkv) && !L->wq.owned && !L->wk.owned && !L->wv.owned);
    assert_ptr_equal(L->wq.data, L->wqkv.data);
    assert_ptr_equal(L->wk.data, (char *)L->wqkv.data + (size_t)Q * L->wqkv.nb1);
    assert_ptr_equal(L->wv.data, (char *)L->wqkv.data + (size_t)(Q + KV) * L->wqkv.nb1);
    assert_int_equal(L->wv.ne[1], KV);
    assert_ptr_equal(L->ffn_up.data, (char *)L->ffn_gu.data + (size_t)m->hp.n_ff * L->ffn_gu.nb1);
    assert_int_equal(m->hp.n_rot, m->hp.head_dim / 2);
    assert_true(rf_has(&m->rope_freqs) && rf_has(&m->rope_long));
    assert_true(m->hp.rope_attn_factor > 1.08f && m->hp.rope_attn_factor < 1.081f); /* sqrt(1 + ln 4 / ln 4096) */
    rf_model_free(m);
}

/* qwen3moe: every layer a mixture of experts with the file's expert count, top-k and expert
 * width; the experts bound as one weight of n_expert * rows (backend.h); qwen3's Q/K norms. */
static void test_moe_plan(void **state) {
    (void)state;
    rf_model *m = load_preset("tiny-qwen3moe", "q4_k_m");
    const rf_hparams *hp = &m->hp;
    assert_string_equal(hp->arch->name, "qwen3moe");
    assert_int_equal(hp->n_expert, 8);
    assert_int_equal(hp->n_expert_used, 2);
    assert_int_equal(hp->n_ff_exp, 128);
    assert_int_equal(hp->moe_gating, RF_MOE_SOFTMAX);
    assert_true(hp->moe_norm_w && hp->moe_w_scale == 1.0f);
    assert_int_equal(hp->rope_mode, RF_ROPE_NEOX);
    for (int il = 0; il < hp->n_layer; il++) {
        const rf_layer *L = &m->layers[il];
        assert_int_equal(L->mixer, RF_MIXER_ATTENTION);
        assert_int_equal(L->ffn, RF_FFN_MOE);
        assert_true(rf_has(&L->q_norm) && rf_has(&L->k_norm));
        assert_false(rf_has(&L->ffn_gate) || rf_has(&L->ffn_up) || rf_has(&L->ffn_down));
        assert_int_equal(L->ffn_gate_inp.ne[0], hp->n_embd);
        assert_int_equal(L->ffn_gate_inp.ne[1], 8);
        assert_int_equal(L->ffn_gate_exps.ne[0], hp->n_embd);
        assert_int_equal(L->ffn_gate_exps.ne[1], 8 * 128);
        assert_int_equal(L->ffn_up_exps.ne[1], 8 * 128);
        assert_int_equal(L->ffn_down_exps.ne[0], 128);
        assert_int_equal(L->ffn_down_exps.ne[1], 8 * hp->n_embd);
        assert_false(rf_has(&L->ffn_gate_inp_b) || rf_has(&L->exp_probs_b) || rf_has(&L->ffn_gate_exps_b));
    }
    rf_model_free(m);
    /* --tp 2: every expert split like the dense FFN (test_tp compares the split's text) */
    char path[512];
    snprintf(path, sizeof path, "%s/tiny-qwen3moe.q4_k_m.gguf", g_dir);
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    mp.tp = 2;
    m = NULL;
    if (rf_model_load(path, &mp, &m)) fail_msg("tp 2: %s", rf_last_error());
    assert_int_equal(m->tp, 2);
    rf_model_free(m);
}

/* gpt-oss: sliding window on layers 0 and 2 (pattern 2), YaRN as rope_freqs factors with
 * freq_scale 1 and the gain 1 + 0.1 ln 32, sinks per head, Q/K/V/O biases, post_attention_norm
 * as the MoE norm, router and expert biases, top-k-then-softmax gating, the clamped SwiGLU. */
static void test_gpt_oss_plan(void **state) {
    (void)state;
    rf_model *m = load_preset("tiny-gpt-oss", "mxfp4_moe");
    const rf_hparams *hp = &m->hp;
    assert_string_equal(hp->arch->name, "gpt-oss");
    assert_int_equal(hp->n_expert, 16);
    assert_int_equal(hp->n_expert_used, 4);
    assert_int_equal(hp->n_ff_exp, 128);
    assert_int_equal(hp->moe_gating, RF_MOE_SOFTMAX_TOPK);
    assert_true(!hp->moe_norm_w && hp->moe_w_scale == 1.0f);
    assert_int_equal(hp->glu, RF_GLU_SWIGLU_OAI);
    assert_int_equal(hp->rope_mode, RF_ROPE_NEOX);
    assert_int_equal(hp->n_swa, 16);
    assert_true(hp->yarn && hp->n_ctx_orig == 4096);
    assert_true(hp->rope_scale == 1.0f && hp->rope_scale_swa == 1.0f && hp->rope_base_swa == hp->rope_base);
    assert_true(fabsf(hp->rope_attn_factor - 1.3465736f) < 1e-6f);
    assert_true(rf_has(&m->rope_freqs) && m->rope_freqs.ne[0] == hp->n_rot / 2);
    assert_true(m->yarn_ff[0] == 1.0f && m->yarn_ff[hp->n_rot / 2 - 1] == 32.0f);
    assert_true(hp->attn_scale == 0.125f);
    for (int il = 0; il < hp->n_layer; il++) {
        const rf_layer *L = &m->layers[il];
        assert_int_equal(L->is_swa, il % 2 == 0);
        assert_int_equal(L->ffn, RF_FFN_MOE);
        assert_true(rf_has(&L->bq) && rf_has(&L->bk) && rf_has(&L->bv) && rf_has(&L->bo));
        assert_true(rf_has(&L->attn_sinks) && L->attn_sinks.ne[0] == hp->n_head);
        assert_true(rf_has(&L->ffn_norm) && !rf_has(&L->attn_post_norm));
        assert_true(rf_has(&L->ffn_gate_inp_b) && rf_has(&L->ffn_gate_exps_b) && rf_has(&L->ffn_up_exps_b) &&
                    rf_has(&L->ffn_down_exps_b));
        assert_int_equal(L->ffn_gate_exps.type, RF_TYPE_MXFP4);
        assert_int_equal(L->ffn_down_exps.type, RF_TYPE_MXFP4);
        assert_int_equal(L->wq.type, RF_TYPE_Q8_0);
    }
    rf_model_free(m);
}

/* The tiny f32 file of mkmodel preset `preset` rewritten with one change: key `key` set to u32
 * `val` (or removed when val < 0), or tensor `tname` given the shape ne[0..n_dims) (its bytes
 * are the original's prefix: the new shape is never larger). Loading must fail with `want`, the
 * message naming `needle`, in one line. */
static void check_refused_in(const char *preset, const char *key, int64_t val, const char *tname, uint32_t n_dims,
                             const int64_t *ne, rf_status want, const char *needle) {
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s.f32.gguf", g_dir, preset);
    if (access(src, R_OK) != 0) {
        rf_mkmodel_opts o = {.preset = preset, .type = "f32", .seed = 0};
        if (rf_mkmodel_write(&o, src)) fail_msg("mkmodel: %s", rf_last_error());
    }
    snprintf(dst, sizeof dst, "%s/refused.gguf", g_dir);
    rf_gguf *g = NULL;
    assert_int_equal(rf_gguf_open(src, &g), RF_OK);
    rf_gguf_writer *w = rf_gguf_writer_new();
    assert_non_null(w);
    for (int64_t i = 0; i < rf_gguf_n_kv(g); i++) {
        const char *k = rf_gguf_kv_key(g, i);
        if (key && !strcmp(k, key)) continue;
        assert_int_equal(rf_gguf_set_value(w, k, rf_gguf_kv_value(g, i)), RF_OK);
    }
    if (key && val >= 0) assert_int_equal(rf_gguf_set_u32(w, key, (uint32_t)val), RF_OK);
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        if (tname && !strcmp(t->name, tname))
            assert_int_equal(rf_gguf_add_tensor(w, t->name, t->type, n_dims, ne, t->data, NULL, NULL), RF_OK);
        else
            assert_int_equal(rf_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL), RF_OK);
    }
    assert_int_equal(rf_gguf_write_file(w, dst), RF_OK);
    rf_gguf_writer_free(w);
    rf_gguf_close(g);
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    mp.n_threads = 1;
    rf_model *m = NULL;
    rf_status st = rf_model_load(dst, &mp, &m);
    printf("  %s\n", rf_last_error());
    assert_int_equal(st, want);
    assert_null(m);
    assert_non_null(strstr(rf_last_error(), needle));
    assert_null(strchr(rf_last_error(), '\n')); /* one line */
}

/* gpt-oss files missing what its layers need, or with sinks / expert biases of the wrong shape. */
static void test_gpt_oss_refusals(void **state) {
    (void)state;
    check_refused_in("tiny-gpt-oss", "gpt-oss.attention.sliding_window", -1, NULL, 0, NULL, RF_ERR_NOT_FOUND,
                     "gpt-oss.attention.sliding_window");
    check_refused_in("tiny-gpt-oss", "gpt-oss.attention.sliding_window", 0, NULL, 0, NULL, RF_ERR_RANGE,
                     "gpt-oss.attention.sliding_window");
    check_refused_in("tiny-gpt-oss", "gpt-oss.rope.scaling.original_context_length", -1, NULL, 0, NULL,
                     RF_ERR_NOT_FOUND, "gpt-oss.rope.scaling.original_context_length");
    const int64_t sk[1] = {4}, eb[2] = {128, 8};
    check_refused_in("tiny-gpt-oss", NULL, 0, "blk.1.attn_sinks.weight", 1, sk, RF_ERR_FORMAT,
                     "blk.1.attn_sinks.weight");
    check_refused_in("tiny-gpt-oss", NULL, 0, "blk.0.ffn_up_exps.bias", 2, eb, RF_ERR_FORMAT, "blk.0.ffn_up_exps.bias");
}

static void check_moe_refused(const char *key, int64_t val, const char *tname, uint32_t n_dims, const int64_t *ne,
                              rf_status want, const char *needle) {
    check_refused_in("tiny-qwen3moe", key, val, tname, n_dims, ne, want, needle);
}

/* Inconsistent expert counts, top-k and expert shapes: each a one-line error naming the key or
 * tensor, never a crash. */
static void test_moe_refusals(void **state) {
    (void)state;
    check_moe_refused("qwen3moe.expert_used_count", 9, NULL, 0, NULL, RF_ERR_RANGE, "qwen3moe.expert_used_count");
    check_moe_refused("qwen3moe.expert_used_count", 0, NULL, 0, NULL, RF_ERR_RANGE, "qwen3moe.expert_used_count");
    check_moe_refused("qwen3moe.expert_used_count", -1, NULL, 0, NULL, RF_ERR_NOT_FOUND, "qwen3moe.expert_used_count");
    check_moe_refused("qwen3moe.expert_count", 0, NULL, 0, NULL, RF_ERR_RANGE, "qwen3moe.expert_count");
    check_moe_refused("qwen3moe.expert_count", -1, NULL, 0, NULL, RF_ERR_NOT_FOUND, "qwen3moe.expert_count");
    check_moe_refused("qwen3moe.expert_count", 100000, NULL, 0, NULL, RF_ERR_RANGE, "qwen3moe.expert_count");
    /* the count disagrees with the tensors: the router is the first to say so */
    check_moe_refused("qwen3moe.expert_count", 4, NULL, 0, NULL, RF_ERR_FORMAT, "blk.0.ffn_gate_inp.weight");
    check_moe_refused("qwen3moe.expert_feed_forward_length", 64, NULL, 0, NULL, RF_ERR_FORMAT,
                      "blk.0.ffn_gate_exps.weight");
    const int64_t fewer[3] = {256, 128, 4}, flat[2] = {128, 2048}, swapped[3] = {256, 128, 8};
    check_moe_refused(NULL, 0, "blk.1.ffn_up_exps.weight", 3, fewer, RF_ERR_FORMAT, "blk.1.ffn_up_exps.weight");
    check_moe_refused(NULL, 0, "blk.2.ffn_down_exps.weight", 2, flat, RF_ERR_FORMAT, "blk.2.ffn_down_exps.weight");
    check_moe_refused(NULL, 0, "blk.0.ffn_down_exps.weight", 3, swapped, RF_ERR_FORMAT, "blk.0.ffn_down_exps.weight");
}

/* qwen35moe / qwen3next: DeltaNet layers 0-2 and gated attention at 3, every layer a mixture of
 * experts with its shared expert bound (width expert_shared_feed_forward_length); qwen3next's key
 * heads repeated to one per value head once loaded (its joined rows regrouped). */
static void test_hybrid_moe_plan(void **state) {
    (void)state;
    const char *presets[] = {"tiny-qwen35moe", "tiny-qwen3next"};
    for (int p = 0; p < 2; p++) {
        rf_model *m = load_preset(presets[p], "q8_0");
        const rf_hparams *hp = &m->hp;
        assert_int_equal(hp->n_expert, 8);
        assert_int_equal(hp->n_expert_used, 2);
        assert_int_equal(hp->n_ff_shexp, 192);
        assert_true(hp->moe_norm_w);
        assert_int_equal(hp->moe_gating, RF_MOE_SOFTMAX);
        assert_int_equal(hp->ssm_n_group, p ? hp->ssm_dt_rank : 2);
        for (int il = 0; il < hp->n_layer; il++) {
            const rf_layer *L = &m->layers[il];
            assert_int_equal(L->mixer, il == 3 ? RF_MIXER_ATTENTION : RF_MIXER_DELTANET);
            assert_int_equal(L->ffn, RF_FFN_MOE);
            assert_true(rf_has(&L->ffn_up_shexp) && rf_has(&L->ffn_gate_inp_shexp));
            assert_int_equal(L->ffn_up_shexp.ne[1], 192);
            if (il != 3) assert_int_equal(L->wqkv.ne[1], 2 * 64 * hp->ssm_n_group + 4 * 64);
        }
        rf_model_free(m);
    }
}

/* Inconsistent qwen35moe / qwen3next files: one line naming the key or tensor. */
static void test_hybrid_moe_refusals(void **state) {
    (void)state;
    check_refused_in("tiny-qwen35moe", "qwen35moe.expert_shared_feed_forward_length", 64, NULL, 0, NULL, RF_ERR_FORMAT,
                     "blk.0.ffn_gate_shexp.weight");
    /* no feed_forward_length in this file: the experts' width has no fallback */
    check_refused_in("tiny-qwen35moe", "qwen35moe.expert_feed_forward_length", -1, NULL, 0, NULL, RF_ERR_RANGE,
                     "qwen35moe.expert_feed_forward_length");
    check_refused_in("tiny-qwen35moe", "qwen35moe.ssm.group_count", 3, NULL, 0, NULL, RF_ERR_FORMAT, "qwen35moe.ssm");
    const int64_t gate[1] = {128}, ba[2] = {256, 4};
    check_refused_in("tiny-qwen35moe", NULL, 0, "blk.2.ffn_gate_inp_shexp.weight", 1, gate, RF_ERR_FORMAT,
                     "blk.2.ffn_gate_inp_shexp.weight");
    check_refused_in("tiny-qwen3next", NULL, 0, "blk.1.ssm_ba.weight", 2, ba, RF_ERR_FORMAT, "blk.1.ssm_ba.weight");
    check_refused_in("tiny-qwen3next", "qwen3next.ssm.time_step_rank", 6, NULL, 0, NULL, RF_ERR_FORMAT, "qwen3next.ssm");
}

/* gemma4: the layer kinds and per-layer sizes from the per-layer keys, the shared-KV map
 * (llama.cpp's rule: a trailing sliding layer reads the last own-KV sliding layer, a full one the
 * last own-KV full layer), the KV plan per position (own-KV layers only, each its own width), and
 * refusals naming the key or tensor. */
static void test_gemma4_plan(void **state) {
    (void)state;
    rf_model *m = load_preset("tiny-gemma4", "f32");
    assert_string_equal(m->hp.arch->name, "gemma4"); /* (not check_common: shared layers lack K/V) */
    const char *kinds = "SSFSSFSF";
    for (int il = 0; il < 8; il++) {
        const rf_layer *L = &m->layers[il];
        const bool swa = kinds[il] == 'S';
        assert_int_equal(L->is_swa, swa);
        assert_int_equal(L->head_dim, swa ? 64 : 128);
        assert_int_equal(L->n_head_kv, swa ? 2 : 1);
        assert_int_equal(L->n_rot, swa ? 64 : 128);
        assert_int_equal(L->kv_layer, il < 6 ? il : (swa ? 4 : 5));
        assert_true(rf_has(&L->ple_gate) && rf_has(&L->ple_proj) && rf_has(&L->ple_norm));
        assert_true(L->out_scale > 0.79f && L->out_scale < 0.81f);
        assert_true(L->mixer == RF_MIXER_ATTENTION && rf_has(&L->q_norm) && rf_has(&L->attn_post_norm));
        assert_int_equal(rf_has(&L->wk), il < 6);
        assert_int_equal(rf_has(&L->wv), il < 6 && swa); /* full layers: V is the K product */
    }
    assert_true(m->hp.attn_scale == 1.0f && m->hp.final_softcap == 30.0f && m->hp.n_swa == 16);
    assert_int_equal(m->hp.n_embd_ple, 64);
    assert_true(rf_has(&m->ple_embd) && rf_has(&m->rope_freqs));
    uint64_t kvb = 0;
    assert_int_equal(rf_kv_bytes_per_pos(m, RF_TYPE_F32, &kvb), RF_OK);
    assert_int_equal(kvb, (4 * 2 * 64 + 2 * 1 * 128) * 4 * 2); /* 6 own-KV layers, K and V */
    rf_model_free(m);
    check_refused_in("tiny-gemma4", "gemma4.attention.sliding_window_pattern", -1, NULL, 0, NULL, RF_ERR_NOT_FOUND,
                     "gemma4.attention.sliding_window_pattern");
    check_refused_in("tiny-gemma4", "gemma4.attention.shared_kv_layers", 7, NULL, 0, NULL, RF_ERR_RANGE,
                     "gemma4.attention.shared_kv_layers");
    check_refused_in("tiny-gemma4", "gemma4.attention.head_count_kv", 3, NULL, 0, NULL, RF_ERR_FORMAT,
                     "gemma4.attention.head_count_kv");
    check_refused_in("tiny-gemma4", "gemma4.attention.key_length_swa", 63, NULL, 0, NULL, RF_ERR_FORMAT,
                     "gemma4.attention.key_length_swa");
    /* expert_count makes it a MoE model, which needs the top-k key */
    check_refused_in("tiny-gemma4", "gemma4.expert_count", 4, NULL, 0, NULL, RF_ERR_NOT_FOUND, "gemma4.expert_used_count");
    const int64_t k[2] = {256, 64};
    check_refused_in("tiny-gemma4", NULL, 0, "blk.2.attn_k.weight", 2, k, RF_ERR_FORMAT, "blk.2.attn_k.weight");
    /* --tp: refused at load, naming the architecture */
    char path[512];
    snprintf(path, sizeof path, "%s/tiny-gemma4.f32.gguf", g_dir);
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    mp.n_threads = 1;
    mp.tp = 2;
    rf_model *mt = NULL;
    assert_int_equal(rf_model_load(path, &mp, &mt), RF_ERR_UNSUPPORTED);
    assert_null(mt);
    assert_non_null(strstr(rf_last_error(), "gemma4 cannot be split"));
}

/* gemma4 MoE (tiny-gemma4moe): every layer a dense GeGLU beside the experts, the router's gain
 * and the branch norms bound, softmax routing with the top-k renormalised; refusals naming the
 * key or tensor. */
static void test_gemma4moe_plan(void **state) {
    (void)state;
    rf_model *m = load_preset("tiny-gemma4moe", "f32");
    assert_string_equal(m->hp.arch->name, "gemma4");
    assert_int_equal(m->hp.n_expert, 8);
    assert_int_equal(m->hp.n_expert_used, 2);
    assert_int_equal(m->hp.n_ff_exp, 128);
    assert_true(m->hp.moe_gating == RF_MOE_SOFTMAX && m->hp.moe_norm_w && m->hp.moe_w_scale == 1.0f);
    assert_int_equal(m->hp.n_embd_ple, 0);
    for (int il = 0; il < 6; il++) {
        const rf_layer *L = &m->layers[il];
        assert_int_equal(L->ffn, RF_FFN_MOE);
        assert_int_equal(L->kv_layer, il);
        assert_true(rf_has(&L->ffn_gate) && rf_has(&L->ffn_gate_inp) && rf_has(&L->ffn_gate_inp_s) &&
                    rf_has(&L->ffn_pre_norm_2) && rf_has(&L->ffn_post_norm_1) && rf_has(&L->ffn_post_norm_2));
        assert_true(rf_has(&L->ffn_gate_exps) && rf_has(&L->ffn_up_exps) && rf_has(&L->ffn_down_exps));
        assert_int_equal(L->ffn_down_exps.ne[1], 8 * 256);
    }
    rf_model_free(m);
    check_refused_in("tiny-gemma4moe", "gemma4.expert_used_count", 9, NULL, 0, NULL, RF_ERR_RANGE, "gemma4.expert_used_count");
    check_refused_in("tiny-gemma4moe", "gemma4.expert_feed_forward_length", -1, NULL, 0, NULL, RF_ERR_NOT_FOUND,
                     "gemma4.expert_feed_forward_length");
    const int64_t d[3] = {128, 256, 4};
    check_refused_in("tiny-gemma4moe", NULL, 0, "blk.1.ffn_down_exps.weight", 3, d, RF_ERR_FORMAT, "blk.1.ffn_down_exps.weight");
    const int64_t sc[1] = {128};
    check_refused_in("tiny-gemma4moe", NULL, 0, "blk.0.ffn_gate_inp.scale", 1, sc, RF_ERR_FORMAT, "blk.0.ffn_gate_inp.scale");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_supported_list),
        cmocka_unit_test(test_unsupported_arch),
        cmocka_unit_test(test_layer_plans),
        cmocka_unit_test(test_mistral3_refusals),
        cmocka_unit_test(test_moe_plan),
        cmocka_unit_test(test_moe_refusals),
        cmocka_unit_test(test_gpt_oss_plan),
        cmocka_unit_test(test_gpt_oss_refusals),
        cmocka_unit_test(test_hybrid_moe_plan),
        cmocka_unit_test(test_hybrid_moe_refusals),
        cmocka_unit_test(test_gemma4_plan),
        cmocka_unit_test(test_gemma4moe_plan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
