/* test_mkmodel.c — rf_mkmodel_write / rf_mkmodel_plan: byte-identical files for the same seed,
 * different files for different seeds, read-back with rf_gguf_open (every planned tensor, type,
 * shape; metadata consistent with the vocabulary and the embedding), weight statistics, and the
 * llama-quantize type recipes checked against expectations derived by hand from llama-quant.cpp's
 * rules (use_more_bits layer lists written out, fallbacks, tied heads, 70B attn_v). */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkmodel/synth_model.h"

static char g_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/rf_mkmodel_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name) {
    static char buf[4][160];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static rf_mkmodel_opts opts(const char *preset, const char *type, uint64_t seed) {
    rf_mkmodel_opts o;
    memset(&o, 0, sizeof o);
    o.preset = preset;
    o.type = type;
    o.seed = seed;
    return o;
}

/* ---- plan helpers ------------------------------------------------------------------------- */

typedef struct planned {
    rf_mkmodel_tensor *t;
    int64_t n;
} planned;

static planned plan_of(const rf_mkmodel_opts *o) {
    planned p = {0};
    rf_status st = rf_mkmodel_plan(o, &p.t, &p.n);
    if (st) fail_msg("plan %s/%s: %s", o->preset, o->type, rf_last_error());
    return p;
}

static const rf_mkmodel_tensor *find(const planned *p, const char *name) {
    for (int64_t i = 0; i < p->n; i++)
        if (!strcmp(p->t[i].name, name)) return &p->t[i];
    return NULL;
}

static rf_type type_of(const planned *p, const char *name) {
    const rf_mkmodel_tensor *t = find(p, name);
    if (!t) fail_msg("tensor %s missing from plan", name);
    return t->type;
}

static rf_type layer_type(const planned *p, int layer, const char *what) {
    char nm[64];
    snprintf(nm, sizeof nm, "blk.%d.%s", layer, what);
    return type_of(p, nm);
}

#define ASSERT_TYPE(p, name, ty)                                                                  \
    do {                                                                                          \
        rf_type got_ = type_of(p, name);                                                          \
        if (got_ != (ty))                                                                         \
            fail_msg("%s: got %s, want %s", name, rf_type_name((int)got_), rf_type_name((int)(ty))); \
    } while (0)

/* ---- file-level tests --------------------------------------------------------------------- */

static void test_determinism(void **state) {
    (void)state;
    rf_mkmodel_opts o = opts("tiny", "q4_k_m", 1234);
    o.n_threads = 1;
    const char *a = tmp_path("a.gguf"), *b = tmp_path("b.gguf"), *c = tmp_path("c.gguf");
    assert_int_equal(rf_mkmodel_write(&o, a), RF_OK);
    o.n_threads = 3; /* rows made on threads in another split: still the same bytes */
    assert_int_equal(rf_mkmodel_write(&o, b), RF_OK);
    o.n_threads = 1;
    o.seed = 1235;
    assert_int_equal(rf_mkmodel_write(&o, c), RF_OK);
    size_t na, nb, nc;
    char *da = rf_test_read_file(a, &na), *db = rf_test_read_file(b, &nb), *dc = rf_test_read_file(c, &nc);
    assert_non_null(da);
    assert_non_null(db);
    assert_non_null(dc);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    assert_int_equal(na, nc); /* same layout ... */
    /* ... but different weights: count differing bytes in the data section */
    size_t diff = 0;
    for (size_t i = 0; i < na; i++) diff += da[i] != dc[i];
    print_message("seed 1234 vs 1235: %zu of %zu bytes differ\n", diff, na);
    assert_true(diff > na / 2);
    free(da);
    free(db);
    free(dc);
}

/* Checks the file against the plan and the metadata contract. */
static void check_file(const rf_mkmodel_opts *o, const char *path) {
    planned p = plan_of(o);
    rf_gguf *g = NULL;
    if (rf_gguf_open(path, &g)) fail_msg("open %s: %s", path, rf_last_error());
    assert_int_equal(rf_gguf_n_tensors(g), p.n);
    for (int64_t i = 0; i < p.n; i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        assert_string_equal(t->name, p.t[i].name); /* same order as planned */
        assert_int_equal(t->type, p.t[i].type);
        assert_int_equal(t->n_dims, p.t[i].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], p.t[i].ne[d]);
        assert_int_equal(t->n_bytes, p.t[i].n_bytes);
    }
    const synth_preset *pr = synth_preset_find(o->preset);
    assert_non_null(pr);
    const char *arch;
    assert_int_equal(rf_gguf_get_str(g, "general.architecture", &arch), RF_OK);
    char key[128];
    uint32_t u;
    snprintf(key, sizeof key, "%s.block_count", arch);
    assert_int_equal(rf_gguf_get_u32(g, key, &u), RF_OK);
    assert_int_equal(u, o->n_layers ? o->n_layers : pr->n_layer);
    snprintf(key, sizeof key, "%s.embedding_length", arch);
    assert_int_equal(rf_gguf_get_u32(g, key, &u), RF_OK);
    assert_int_equal(u, pr->n_embd);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    assert_int_equal(rf_gguf_get_u32(g, key, &u), RF_OK);
    assert_int_equal(u, pr->n_head_kv);
    assert_int_equal(rf_gguf_get_u32(g, "general.file_type", &u), RF_OK);
    assert_int_equal(u, synth_ftype_find(o->type)->llama_ftype);
    /* vocab size == tokens == token types == embedding rows (== head rows) */
    uint64_t n_tok, n_types;
    const void *toks, *types;
    assert_int_equal(rf_gguf_get_arr(g, "tokenizer.ggml.tokens", RF_GGUF_STRING, &n_tok, &toks), RF_OK);
    assert_int_equal(rf_gguf_get_arr(g, "tokenizer.ggml.token_type", RF_GGUF_INT32, &n_types, &types), RF_OK);
    assert_int_equal(n_tok, pr->vocab.n_vocab);
    assert_int_equal(n_types, n_tok);
    const rf_gguf_tensor *emb = rf_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->ne[1], n_tok);
    const rf_gguf_tensor *out = rf_gguf_find_tensor(g, "output.weight");
    assert_true(pr->tied ? out == NULL : out != NULL);
    if (out) assert_int_equal(out->ne[1], n_tok);
    assert_int_equal(rf_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u), RF_OK);
    assert_true(u < n_tok);
    assert_int_equal(rf_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u), RF_OK);
    assert_true(u < n_tok);
    const rf_gguf_str *ts = toks;
    const int32_t *ty = types;
    assert_int_equal(ty[u], 3); /* eos is a control token */
    assert_non_null(strstr(ts[u].ptr, "<"));
    const char *model;
    assert_int_equal(rf_gguf_get_str(g, "tokenizer.ggml.model", &model), RF_OK);
    if (!strcmp(model, "gpt2")) {
        uint64_t n_merges;
        const void *m;
        assert_int_equal(rf_gguf_get_arr(g, "tokenizer.ggml.merges", RF_GGUF_STRING, &n_merges, &m), RF_OK);
        assert_true(n_merges > n_tok / 2);
        const char *pre;
        assert_int_equal(rf_gguf_get_str(g, "tokenizer.ggml.pre", &pre), RF_OK);
        assert_string_equal(pre, pr->pre);
    } else {
        uint64_t n_scores;
        const void *sc;
        assert_int_equal(rf_gguf_get_arr(g, "tokenizer.ggml.scores", RF_GGUF_FLOAT32, &n_scores, &sc), RF_OK);
        assert_int_equal(n_scores, n_tok);
    }
    const char *tmpl;
    assert_int_equal(rf_gguf_get_str(g, "tokenizer.chat_template", &tmpl), RF_OK);
    assert_true(strlen(tmpl) > 50);
    rf_gguf_close(g);
    free(p.t);
}

static void test_readback_all_types_tiny(void **state) {
    (void)state;
    const char *presets[] = {"tiny", "tiny-qwen2"};
    for (size_t pi = 0; pi < 2; pi++) {
        for (int32_t i = 0; rf_mkmodel_type_at(i, NULL); i++) {
            rf_mkmodel_opts o = opts(presets[pi], rf_mkmodel_type_at(i, NULL), 7);
            const char *path = tmp_path("rb.gguf");
            if (rf_mkmodel_write(&o, path)) fail_msg("%s %s: %s", o.preset, o.type, rf_last_error());
            check_file(&o, path);
            unlink(path);
        }
    }
}

static void test_layers_override(void **state) {
    (void)state;
    rf_mkmodel_opts o = opts("tiny", "f32", 99);
    const char *a = tmp_path("l4.gguf"), *b = tmp_path("l2.gguf");
    assert_int_equal(rf_mkmodel_write(&o, a), RF_OK);
    o.n_layers = 2;
    assert_int_equal(rf_mkmodel_write(&o, b), RF_OK);
    check_file(&o, b);
    rf_gguf *ga, *gb;
    assert_int_equal(rf_gguf_open(a, &ga), RF_OK);
    assert_int_equal(rf_gguf_open(b, &gb), RF_OK);
    assert_null(rf_gguf_find_tensor(gb, "blk.2.attn_q.weight"));
    /* every tensor has its own stream keyed by name: layer 0 is the same in both files */
    const rf_gguf_tensor *ta = rf_gguf_find_tensor(ga, "blk.1.ffn_down.weight");
    const rf_gguf_tensor *tb = rf_gguf_find_tensor(gb, "blk.1.ffn_down.weight");
    assert_int_equal(ta->n_bytes, tb->n_bytes);
    assert_memory_equal(ta->data, tb->data, ta->n_bytes);
    rf_gguf_close(ga);
    rf_gguf_close(gb);
}

static double std_of(const float *x, int64_t n, double *mean_out) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return NAN;
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    double m = s / n;
    if (mean_out) *mean_out = m;
    return sqrt(s2 / n - m * m);
}

static void test_weight_statistics(void **state) {
    (void)state;
    rf_mkmodel_opts o = opts("tiny-qwen2", "f32", 5);
    const char *path = tmp_path("stats.gguf");
    assert_int_equal(rf_mkmodel_write(&o, path), RF_OK);
    rf_gguf *g;
    assert_int_equal(rf_gguf_open(path, &g), RF_OK);
    struct {
        const char *name;
        double std;
    } want[] = {
        {"token_embd.weight", 2.0 / sqrt(384.0)}, {"blk.0.attn_q.weight", 1.0 / sqrt(384.0)},
        {"blk.1.ffn_down.weight", 1.0 / sqrt(1024.0)}, {"blk.0.attn_q.bias", 0.02},
        {"blk.1.attn_output.weight", 1.0 / sqrt(384.0)},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const rf_gguf_tensor *t = rf_gguf_find_tensor(g, want[i].name);
        assert_non_null(t);
        int64_t n = t->ne[0] * t->ne[1];
        double mean = 0, s = std_of(t->data, n, &mean);
        print_message("%-26s std %.5f (want %.5f) mean %+.5f\n", want[i].name, s, want[i].std, mean);
        assert_true(fabs(s - want[i].std) < 0.05 * want[i].std);
        assert_true(fabs(mean) < 4.0 * want[i].std / sqrt((double)n) + 1e-7);
    }
    const rf_gguf_tensor *norm = rf_gguf_find_tensor(g, "blk.0.ffn_norm.weight");
    for (int64_t i = 0; i < norm->ne[0]; i++) assert_true(((const float *)norm->data)[i] == 1.0f);
    /* rows differ from each other (no repeated stream) */
    const rf_gguf_tensor *q = rf_gguf_find_tensor(g, "blk.0.attn_q.weight");
    const float *qd = q->data;
    assert_memory_not_equal(qd, qd + q->ne[0], (size_t)q->ne[0] * sizeof(float));
    rf_gguf_close(g);
}

static void test_errors(void **state) {
    (void)state;
    rf_mkmodel_opts o = opts("no-such-model", "q4_0", 0);
    const char *path = tmp_path("err.gguf");
    assert_int_equal(rf_mkmodel_write(&o, path), RF_ERR_NOT_FOUND);
    assert_non_null(strstr(rf_last_error(), "no-such-model"));
    assert_non_null(strstr(rf_last_error(), "llama3-8b")); /* lists the presets */
    o = opts("tiny", "q9_9", 0);
    assert_int_equal(rf_mkmodel_write(&o, path), RF_ERR_NOT_FOUND);
    assert_non_null(strstr(rf_last_error(), "q4_k_m"));
    o = opts("tiny", "q4_0", 0);
    o.n_layers = 5000;
    assert_int_equal(rf_mkmodel_write(&o, path), RF_ERR_INVALID_ARG);
    assert_int_equal(access(path, F_OK), -1);
    o.n_layers = 0;
    assert_int_equal(rf_mkmodel_write(&o, "/nonexistent-dir/x.gguf"), RF_ERR_IO);
    rf_mkmodel_tensor *t;
    int64_t n;
    o = opts("tiny", "Q4_K_M", 0); /* names are case-insensitive */
    assert_int_equal(rf_mkmodel_plan(&o, &t, &n), RF_OK);
    free(t);
}

/* ---- recipes ------------------------------------------------------------------------------ */

/* use_more_bits layers written out by hand for 4 and 32 layers:
 * i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2. */
static const int MORE_BITS_4[] = {2, 3};
static const int MORE_BITS_32[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};

static bool in_list(const int *l, size_t n, int x) {
    for (size_t i = 0; i < n; i++)
        if (l[i] == x) return true;
    return false;
}

static void test_recipe_q4_k_m(void **state) {
    (void)state;
    rf_mkmodel_opts o = opts("tiny", "q4_k_m", 0);
    planned p = plan_of(&o);
    ASSERT_TYPE(&p, "output.weight", RF_TYPE_Q6_K);
    ASSERT_TYPE(&p, "token_embd.weight", RF_TYPE_Q4_K); /* untied: the base type */
    ASSERT_TYPE(&p, "output_norm.weight", RF_TYPE_F32);
    for (int i = 0; i < 4; i++) {
        rf_type more = in_list(MORE_BITS_4, 2, i) ? RF_TYPE_Q6_K : RF_TYPE_Q4_K;
        assert_int_equal(layer_type(&p, i, "attn_v.weight"), more);
        assert_int_equal(layer_type(&p, i, "ffn_down.weight"), more);
        assert_int_equal(layer_type(&p, i, "attn_q.weight"), RF_TYPE_Q4_K);
        assert_int_equal(layer_type(&p, i, "attn_k.weight"), RF_TYPE_Q4_K);
        assert_int_equal(layer_type(&p, i, "attn_output.weight"), RF_TYPE_Q4_K);
        assert_int_equal(layer_type(&p, i, "ffn_gate.weight"), RF_TYPE_Q4_K);
        assert_int_equal(layer_type(&p, i, "ffn_up.weight"), RF_TYPE_Q4_K);
        assert_int_equal(layer_type(&p, i, "attn_norm.weight"), RF_TYPE_F32);
    }
    free(p.t);

    o = opts("llama3-8b", "q4_k_m", 0);
    p = plan_of(&o);
    int n6 = 0;
    for (int i = 0; i < 32; i++) {
        rf_type more = in_list(MORE_BITS_32, 16, i) ? RF_TYPE_Q6_K : RF_TYPE_Q4_K;
        assert_int_equal(layer_type(&p, i, "attn_v.weight"), more);
        assert_int_equal(layer_type(&p, i, "ffn_down.weight"), more);
        n6 += more == RF_TYPE_Q6_K;
    }
    assert_int_equal(n6, 16);
    ASSERT_TYPE(&p, "output.weight", RF_TYPE_Q6_K);
    ASSERT_TYPE(&p, "token_embd.weight", RF_TYPE_Q4_K);
    /* the file order is llama-quantize's: non-layer tensors by name, then layers */
    assert_string_equal(p.t[0].name, "output.weight");
    assert_string_equal(p.t[1].name, "output_norm.weight");
    assert_string_equal(p.t[2].name, "token_embd.weight");
    assert_string_equal(p.t[3].name, "blk.0.attn_k.weight");
    assert_string_equal(p.t[p.n - 1].name, "blk.31.ffn_up.weight");
    free(p.t);
}

static void test_recipe_fallbacks_and_tied(void **state) {
    (void)state;
    /* Qwen2.5-0.5B: dim 896 is not a multiple of 256. Tied head: the embedding is the head and
     * gets Q8_0 (row not a multiple of Q4_K's 256); Q4_K rows of 896 fall back to Q5_0, Q6_K to
     * Q8_0; ffn_down rows (4864 = 19 * 256) keep K-quants. */
    rf_mkmodel_opts o = opts("qwen2.5-0.5b", "q4_k_m", 0);
    planned p = plan_of(&o);
    assert_null(find(&p, "output.weight"));
    ASSERT_TYPE(&p, "token_embd.weight", RF_TYPE_Q8_0);
    ASSERT_TYPE(&p, "blk.0.attn_q.weight", RF_TYPE_Q5_0);
    ASSERT_TYPE(&p, "blk.0.attn_q.bias", RF_TYPE_F32);
    ASSERT_TYPE(&p, "blk.0.attn_v.weight", RF_TYPE_Q8_0);  /* Q6_K (more bits) -> Q8_0 */
    ASSERT_TYPE(&p, "blk.4.attn_v.weight", RF_TYPE_Q5_0);  /* Q4_K -> Q5_0 ((4-3)%3 != 2) */
    ASSERT_TYPE(&p, "blk.5.attn_v.weight", RF_TYPE_Q8_0);  /* (5-24/8)%3 == 2: more bits */
    ASSERT_TYPE(&p, "blk.0.ffn_down.weight", RF_TYPE_Q6_K);
    ASSERT_TYPE(&p, "blk.4.ffn_down.weight", RF_TYPE_Q4_K);
    ASSERT_TYPE(&p, "blk.5.ffn_gate.weight", RF_TYPE_Q5_0);
    free(p.t);

    /* SmolLM2 Q4_0, tied, dim 576: the embedding would be Q6_K, 576 % 256 != 0 -> Q8_0 */
    o = opts("smollm2-135m", "q4_0", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "token_embd.weight", RF_TYPE_Q8_0);
    ASSERT_TYPE(&p, "blk.29.ffn_down.weight", RF_TYPE_Q4_0);
    free(p.t);

    /* Q5_K_M on SmolLM2: Q5_K rows of 576 fall back to Q5_1 */
    o = opts("smollm2-135m", "q5_k_m", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.4.attn_q.weight", RF_TYPE_Q5_1);
    ASSERT_TYPE(&p, "blk.4.ffn_down.weight", RF_TYPE_Q5_K); /* 1536 = 6 * 256 */
    free(p.t);

    /* tied + Q4_K_M with a 256-multiple dim: the embedding becomes Q6_K */
    o = opts("llama3.2-1b", "q4_k_m", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "token_embd.weight", RF_TYPE_Q6_K);
    ASSERT_TYPE(&p, "rope_freqs.weight", RF_TYPE_F32);
    assert_int_equal(find(&p, "rope_freqs.weight")->ne[0], 32);
    free(p.t);
}

/* mxfp4_moe (llama-quantize's MOSTLY_MXFP4_MOE): experts MXFP4, every other 2-D weight and the
 * head Q8_0, router / norms / biases / sinks F32 */
static void test_recipe_mxfp4_moe(void **state) {
    (void)state;
    rf_mkmodel_opts o = opts("gpt-oss-20b", "mxfp4_moe", 0);
    planned p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.3.ffn_gate_exps.weight", RF_TYPE_MXFP4);
    ASSERT_TYPE(&p, "blk.3.ffn_up_exps.weight", RF_TYPE_MXFP4);
    ASSERT_TYPE(&p, "blk.3.ffn_down_exps.weight", RF_TYPE_MXFP4);
    ASSERT_TYPE(&p, "blk.3.attn_q.weight", RF_TYPE_Q8_0);
    ASSERT_TYPE(&p, "blk.3.attn_output.weight", RF_TYPE_Q8_0);
    ASSERT_TYPE(&p, "output.weight", RF_TYPE_Q8_0);
    ASSERT_TYPE(&p, "token_embd.weight", RF_TYPE_Q8_0);
    ASSERT_TYPE(&p, "blk.3.ffn_gate_inp.weight", RF_TYPE_F32);
    ASSERT_TYPE(&p, "blk.3.ffn_down_exps.bias", RF_TYPE_F32);
    ASSERT_TYPE(&p, "blk.3.attn_sinks.weight", RF_TYPE_F32);
    free(p.t);
}

static void test_recipe_other_types(void **state) {
    (void)state;
    rf_mkmodel_opts o = opts("llama3-8b", "q2_k", 0);
    planned p = plan_of(&o);
    ASSERT_TYPE(&p, "output.weight", RF_TYPE_Q6_K);
    ASSERT_TYPE(&p, "token_embd.weight", RF_TYPE_Q2_K);
    ASSERT_TYPE(&p, "blk.7.attn_v.weight", RF_TYPE_Q4_K); /* n_gqa = 4 */
    ASSERT_TYPE(&p, "blk.7.ffn_down.weight", RF_TYPE_Q3_K);
    ASSERT_TYPE(&p, "blk.7.attn_output.weight", RF_TYPE_Q3_K);
    ASSERT_TYPE(&p, "blk.7.attn_q.weight", RF_TYPE_Q2_K);
    ASSERT_TYPE(&p, "blk.7.ffn_up.weight", RF_TYPE_Q2_K);
    free(p.t);

    o = opts("llama3-8b", "q3_k_m", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.0.attn_v.weight", RF_TYPE_Q5_K);
    ASSERT_TYPE(&p, "blk.1.attn_v.weight", RF_TYPE_Q5_K);
    ASSERT_TYPE(&p, "blk.2.attn_v.weight", RF_TYPE_Q4_K);
    ASSERT_TYPE(&p, "blk.1.ffn_down.weight", RF_TYPE_Q5_K); /* i < 32/16 */
    ASSERT_TYPE(&p, "blk.2.ffn_down.weight", RF_TYPE_Q4_K);
    ASSERT_TYPE(&p, "blk.2.attn_output.weight", RF_TYPE_Q4_K);
    ASSERT_TYPE(&p, "blk.2.ffn_gate.weight", RF_TYPE_Q3_K);
    free(p.t);

    o = opts("llama3-8b", "q3_k", 0); /* alias of q3_k_m */
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.1.ffn_down.weight", RF_TYPE_Q5_K);
    free(p.t);

    o = opts("llama3-8b", "q3_k_l", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.9.attn_v.weight", RF_TYPE_Q5_K);
    ASSERT_TYPE(&p, "blk.9.ffn_down.weight", RF_TYPE_Q5_K);
    ASSERT_TYPE(&p, "blk.9.attn_output.weight", RF_TYPE_Q5_K);
    ASSERT_TYPE(&p, "blk.9.attn_k.weight", RF_TYPE_Q3_K);
    free(p.t);

    o = opts("llama3-8b", "q3_k_s", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.0.attn_v.weight", RF_TYPE_Q3_K);
    ASSERT_TYPE(&p, "blk.0.ffn_down.weight", RF_TYPE_Q3_K);
    ASSERT_TYPE(&p, "output.weight", RF_TYPE_Q6_K);
    free(p.t);

    o = opts("llama3-8b", "q4_k_s", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.3.attn_v.weight", RF_TYPE_Q5_K);
    ASSERT_TYPE(&p, "blk.4.attn_v.weight", RF_TYPE_Q4_K);
    ASSERT_TYPE(&p, "blk.3.ffn_down.weight", RF_TYPE_Q5_K); /* i < 32/8 */
    ASSERT_TYPE(&p, "blk.4.ffn_down.weight", RF_TYPE_Q4_K);
    free(p.t);

    o = opts("llama3-8b", "q5_k_m", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.6.attn_v.weight", RF_TYPE_Q6_K);
    ASSERT_TYPE(&p, "blk.7.attn_v.weight", RF_TYPE_Q5_K);
    ASSERT_TYPE(&p, "blk.31.ffn_down.weight", RF_TYPE_Q6_K);
    free(p.t);

    o = opts("llama3-8b", "q8_0", 0);
    p = plan_of(&o);
    for (int64_t i = 0; i < p.n; i++)
        assert_int_equal(p.t[i].type, p.t[i].n_dims == 1 ? RF_TYPE_F32 : RF_TYPE_Q8_0);
    free(p.t);

    const char *floats[] = {"f32", "f16", "bf16"};
    const rf_type ftypes[] = {RF_TYPE_F32, RF_TYPE_F16, RF_TYPE_BF16};
    for (int k = 0; k < 3; k++) {
        o = opts("qwen2.5-0.5b", floats[k], 0);
        p = plan_of(&o);
        for (int64_t i = 0; i < p.n; i++)
            assert_int_equal(p.t[i].type, p.t[i].n_dims == 1 ? RF_TYPE_F32 : ftypes[k]);
        free(p.t);
    }

    /* --pure: one type for every 2-D weight, fallbacks still apply */
    o = opts("tiny", "q4_k", 0);
    o.pure = true;
    p = plan_of(&o);
    for (int64_t i = 0; i < p.n; i++)
        assert_int_equal(p.t[i].type, p.t[i].n_dims == 1 ? RF_TYPE_F32 : RF_TYPE_Q4_K);
    free(p.t);
}

static void test_recipe_70b(void **state) {
    (void)state;
    /* LLM_TYPE_70B (80 layers, GQA): attn_v Q3_K/Q4_K become Q5_K */
    rf_mkmodel_opts o = opts("llama2-70b", "q4_k_m", 0);
    planned p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.10.attn_v.weight", RF_TYPE_Q5_K); /* (10-10)%3 = 0: not more bits */
    ASSERT_TYPE(&p, "blk.12.attn_v.weight", RF_TYPE_Q6_K); /* (12-10)%3 = 2 */
    ASSERT_TYPE(&p, "blk.10.ffn_down.weight", RF_TYPE_Q4_K);
    free(p.t);
    o = opts("llama2-70b", "q3_k_m", 0);
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.40.attn_v.weight", RF_TYPE_Q5_K);
    free(p.t);
    /* the same preset cut to 40 layers is no longer a 70B */
    o = opts("llama2-70b", "q4_k_m", 0);
    o.n_layers = 40;
    p = plan_of(&o);
    ASSERT_TYPE(&p, "blk.11.attn_v.weight", RF_TYPE_Q4_K); /* (11-5)%3 = 0 */
    ASSERT_TYPE(&p, "blk.10.attn_v.weight", RF_TYPE_Q6_K); /* (10-5)%3 = 2 */
    free(p.t);
}

static void test_rope_freqs(void **state) {
    (void)state;
    /* Llama 3.2: factor 32, low 1, high 4, original context 8192, base 500000, head_dim 64 */
    const synth_preset *p = synth_preset_find("llama3.2-1b");
    assert_non_null(p);
    float got[32];
    synth_llama3_rope_factors(p, got);
    int n_one = 0, n_full = 0, n_mid = 0;
    for (int i = 0; i < 32; i++) {
        double freq = pow(500000.0, -(2.0 * i) / 64.0);
        double wl = 2.0 * M_PI / freq, want;
        if (wl < 8192.0 / 4.0)
            want = 1.0, n_one++;
        else if (wl > 8192.0 / 1.0)
            want = 32.0, n_full++;
        else {
            double smooth = (8192.0 / wl - 1.0) / (4.0 - 1.0);
            want = 1.0 / ((1.0 - smooth) / 32.0 + smooth);
            n_mid++;
        }
        if (fabs(got[i] - want) > 1e-4 * want) fail_msg("rope factor %d: %g, want %g", i, got[i], want);
    }
    print_message("rope factors: %d x 1, %d smooth, %d x 32\n", n_one, n_mid, n_full);
    assert_true(n_one > 0 && n_full > 0 && n_mid > 0);
}

static void test_preset_table(void **state) {
    (void)state;
    rf_mkmodel_preset_info pi;
    int n = 0;
    const char *must[] = {"tiny", "tiny-qwen2", "smollm2-135m", "llama3.2-1b", "llama3-8b",
                          "qwen2.5-0.5b", "qwen2.5-7b", "llama2-70b"};
    for (size_t k = 0; k < sizeof must / sizeof must[0]; k++) assert_non_null(synth_preset_find(must[k]));
    for (int32_t i = 0; rf_mkmodel_preset_at(i, &pi); i++, n++) {
        assert_true(pi.n_head * pi.head_dim > 0);
        assert_int_equal(pi.n_head % pi.n_head_kv, 0);
        assert_int_equal(pi.n_embd % 32, 0);
        if (!strcmp(pi.arch, "qwen2")) assert_int_equal(pi.n_head * pi.head_dim, pi.n_embd);
    }
    assert_int_equal(n, rf_mkmodel_preset_count());
    assert_false(rf_mkmodel_preset_at(n, &pi));
    /* real numbers for two of them (config.json of the originals) */
    const synth_preset *q = synth_preset_find("qwen2.5-7b");
    assert_int_equal(q->n_layer, 28);
    assert_int_equal(q->n_ff, 18944);
    assert_int_equal(q->n_head_kv, 4);
    assert_int_equal(q->vocab.n_vocab, 152064);
    const synth_preset *l = synth_preset_find("llama3-8b");
    assert_int_equal(l->n_ff, 14336);
    assert_true(l->rope_base == 500000.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_table),
        cmocka_unit_test(test_rope_freqs),
        cmocka_unit_test(test_recipe_q4_k_m),
        cmocka_unit_test(test_recipe_fallbacks_and_tied),
        cmocka_unit_test(test_recipe_other_types),
        cmocka_unit_test(test_recipe_mxfp4_moe),
        cmocka_unit_test(test_recipe_70b),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_layers_override),
        cmocka_unit_test(test_weight_statistics),
        cmocka_unit_test(test_readback_all_types_tiny),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
