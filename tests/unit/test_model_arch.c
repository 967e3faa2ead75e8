/* test_model_arch.c — the architecture table and the per-layer plan it gives (model_arch.c,
 * docs/ARCHITECTURE.md §4.9), on the tiny synthetic models (written with mkmodel's API into a temporary
 * directory):
 *  - rf_supported_archs() names exactly the table's architectures, in order;
 *  - a file of an architecture not in the table is refused naming it and the supported list;
 *  - each tiny model's layers get the mixer, feed-forward and attention variants its
 *    architecture says (Q/K norms, biases, RoPE on/off, sliding window, joined tensors from the
 *    file as views), checked on the loaded rf_layer fields.
 * Whether those variants compute the right thing is test_model_golden's job (llama.cpp goldens). */
#include "test_util.h"

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
    assert_null(rf_arch_find("deepseek2"));
    assert_string_equal(rf_supported_archs(), want);
}

/* A file whose general.architecture is not in the table: the error names it and the list. */
static void test_unsupported_arch(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/moe.gguf", g_dir);
    rf_gguf_writer *w = rf_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(rf_gguf_set_str(w, "general.architecture", "deepseek2"), RF_OK);
    assert_int_equal(rf_gguf_write_file(w, path), RF_OK);
    rf_gguf_writer_free(w);
    rf_model_params mp = rf_model_default_params();
    mp.device = RF_DEVICE_CPU;
    rf_model *m = NULL;
    assert_int_equal(rf_model_load(path, &mp, &m), RF_ERR_UNSUPPORTED);
    assert_null(m);
    printf("  %s\n", rf_last_error());
    assert_non_null(strstr(rf_last_error(), "'deepseek2'"));
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_supported_list),
        cmocka_unit_test(test_unsupported_arch),
        cmocka_unit_test(test_layer_plans),
        cmocka_unit_test(test_mistral3_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
