/* test_chat_template.c — renders every official template in tests/data/chat over the cases in
 * goldens.json (made by Python jinja2 as transformers renders, scripts/gen-chat-goldens.py) and
 * requires byte-identical output or the same error; checks the family fallback and the real
 * models' templates when models/ holds them. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "template/jinja.h"

static json_t *load_goldens_file(const char *rel) {
    json_error_t e;
    json_t *g = json_load_file(rf_test_data(rel), 0, &e);
    if (!g) fprintf(stderr, "cannot load %s: %s (line %d)\n", rel, e.text, e.line);
    return g;
}
static json_t *load_goldens(void) { return load_goldens_file("chat/goldens.json"); }

static char *read_template(const char *name) {
    char rel[512];
    snprintf(rel, sizeof rel, "chat/%s", name);
    size_t n;
    return rf_test_read_file(rf_test_data(rel), &n);
}

/* prints where two strings first differ, with context */
static void show_diff(const char *got, const char *want) {
    size_t k = 0;
    while (got[k] && got[k] == want[k]) k++;
    size_t from = k > 80 ? k - 80 : 0;
    fprintf(stderr, "    first difference at byte %zu\n    context: \"%.*s\"\n", k, (int)(k - from), want + from);
    fprintf(stderr, "    want:    \"%.80s\"\n    got:     \"%.80s\"\n", want + k, got + k);
}

static void run_goldens(const char *rel, size_t min_cases) {
    json_t *g = load_goldens_file(rel);
    assert_non_null(g);
    json_t *cases = json_object_get(g, "cases");
    int64_t now = json_integer_value(json_object_get(g, "now_unix"));
    assert_true(json_array_size(cases) >= min_cases);
    const char *cur_name = NULL;
    rf_chat_template *t = NULL;
    int pass = 0, total = 0, fails = 0, tpass = 0, ttotal = 0;
    for (size_t i = 0; i <= json_array_size(cases); i++) {
        json_t *c = i < json_array_size(cases) ? json_array_get(cases, i) : NULL;
        const char *name = c ? json_string_value(json_object_get(c, "template")) : NULL;
        if (!c || !cur_name || strcmp(name, cur_name) != 0) {
            if (cur_name) printf("  %-52s %d/%d byte-identical\n", cur_name, tpass, ttotal);
            rf_chat_template_free(t);
            t = NULL;
            tpass = ttotal = 0;
            if (!c) break;
            cur_name = name;
            char *src = read_template(name);
            assert_non_null(src);
            rf_status st = rf_chat_template_parse(src, &t);
            if (st) fprintf(stderr, "  %s: parse failed: %s\n", name, rf_last_error());
            free(src);
        }
        total++;
        ttotal++;
        const char *cname = json_string_value(json_object_get(c, "case"));
        bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
        char *mj = json_dumps(json_object_get(c, "messages"), JSON_COMPACT);
        json_t *tools = json_object_get(c, "tools");
        char *tj = json_is_null(tools) ? NULL : json_dumps(tools, JSON_COMPACT);
        char *ej = json_dumps(json_object_get(c, "extra"), JSON_COMPACT);
        rf_chat_render_opts o = {0};
        o.add_generation_prompt = agp;
        o.bos_token = json_string_value(json_object_get(c, "bos_token"));
        o.eos_token = json_string_value(json_object_get(c, "eos_token"));
        o.messages_json = mj;
        o.tools_json = tj;
        o.extra_json = ej;
        o.now = now;
        o.continue_final_message = json_is_true(json_object_get(c, "continue_final_message"));
        char *out = (char *)"poison";
        rf_status st = t ? rf_chat_template_render_ex(t, NULL, 0, &o, &out) : RF_ERR_UNSUPPORTED;
        json_t *err = json_object_get(c, "error");
        bool ok;
        if (json_is_null(err)) {
            const char *want = json_string_value(json_object_get(c, "expected"));
            ok = st == RF_OK && strcmp(out, want) == 0;
            if (!ok) {
                fprintf(stderr, "MISMATCH %s / %s / agp=%d: %s\n", name, cname, agp,
                        st ? rf_last_error() : "output differs");
                if (!st) show_diff(out, want);
            }
        } else {
            bool raised = json_is_true(json_object_get(err, "raised"));
            const char *msg = json_string_value(json_object_get(err, "message"));
            ok = st != RF_OK && out == NULL;
            if (ok && raised) ok = rf_chat_last_error_raised() && strcmp(rf_last_error(), msg) == 0;
            if (ok && !raised) ok = !rf_chat_last_error_raised();
            if (!ok)
                fprintf(stderr, "MISMATCH %s / %s / agp=%d: want error %s \"%s\", got st=%s \"%s\"\n", name,
                        cname, agp, json_string_value(json_object_get(err, "type")), msg, rf_status_str(st),
                        st ? rf_last_error() : "(rendered)");
        }
        if (!st) free(out);
        free(mj);
        free(tj);
        free(ej);
        if (ok) {
            pass++;
            tpass++;
        } else {
            fails++;
        }
    }
    printf("%s: %d/%d cases byte-identical or same error\n", rel, pass, total);
    json_decref(g);
    assert_int_equal(fails, 0);
}

static void test_goldens(void **state) {
    (void)state;
    run_goldens("chat/goldens.json", 400);
}

/* the other published templates of the peer snapshot (Qwen3, DeepSeek, GLM, gpt-oss, Gemma 4,
 * Granite, Hermes, ...), fewer cases each */
static void test_goldens_extra(void **state) {
    (void)state;
    run_goldens("chat/goldens-extra.json", 200);
}


/* the templates of the 2026 models (Qwen3 / Qwen3-MoE, gpt-oss harmony, Phi-4, Phi-4-mini,
 * Mistral Small 3.x / Devstral / Ministral 3, SmolLM3) over thinking on/off, reasoning in
 * history, tools, parallel tool calls and results, reasoning_effort, developer messages */
static void test_goldens_2026(void **state) {
    (void)state;
    run_goldens("chat/goldens-2026.json", 300);
}

/* one construct per template (goldens.json "features"), through the internal renderer */
static void test_features(void **state) {
    (void)state;
    json_t *g = load_goldens();
    assert_non_null(g);
    json_t *fs = json_object_get(g, "features");
    int64_t now = json_integer_value(json_object_get(g, "now_unix"));
    assert_true(json_array_size(fs) >= 40);
    int fails = 0;
    for (size_t i = 0; i < json_array_size(fs); i++) {
        json_t *f = json_array_get(fs, i);
        const char *name = json_string_value(json_object_get(f, "name"));
        const char *src = json_string_value(json_object_get(f, "template"));
        json_t *err = json_object_get(f, "error");
        rf_jinja *j = NULL;
        rf_status st = rf_jinja_parse(src, strlen(src), &j);
        char *out = NULL;
        size_t n = 0;
        if (!st) st = rf_jinja_render(j, json_object_get(f, "vars"), NULL, (time_t)now, &out, &n);
        bool ok;
        if (json_is_null(err)) {
            const char *want = json_string_value(json_object_get(f, "expected"));
            ok = st == RF_OK && n == strlen(want) && memcmp(out, want, n) == 0;
            if (!ok) {
                fprintf(stderr, "FEATURE %s: %s\n", name, st ? rf_last_error() : "output differs");
                if (!st) show_diff(out, want);
            }
        } else {
            bool raised = json_is_true(json_object_get(err, "raised"));
            ok = st != RF_OK && out == NULL;
            if (ok && raised)
                ok = rf_jinja_last_error_was_raise() &&
                     strcmp(rf_last_error(), json_string_value(json_object_get(err, "message"))) == 0;
            if (!ok) fprintf(stderr, "FEATURE %s: want error \"%s\", got %s \"%s\"\n", name,
                             json_string_value(json_object_get(err, "message")), rf_status_str(st),
                             st ? rf_last_error() : out);
        }
        if (!ok) fails++;
        free(out);
        rf_jinja_free(j);
    }
    printf("chat features: %zu/%zu match jinja2\n", json_array_size(fs) - fails, json_array_size(fs));
    json_decref(g);
    assert_int_equal(fails, 0);
}

static void test_simple_api_matches_ex(void **state) {
    (void)state;
    char *src = read_template("SmolLM2-135M-Instruct.jinja");
    assert_non_null(src);
    rf_chat_template *t;
    assert_int_equal(rf_chat_template_parse(src, &t), RF_OK);
    rf_chat_msg m[2] = {{"system", "S"}, {"user", "Hi \"you\"\n"}};
    char *out;
    assert_int_equal(rf_chat_template_render(t, m, 2, true, "<|im_start|>", "<|im_end|>", &out), RF_OK);
    assert_string_equal(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi \"you\"\n<|im_end|>\n"
                             "<|im_start|>assistant\n");
    free(out);
    rf_chat_template_free(t);
    free(src);
}

static void test_family_detect_and_builtins(void **state) {
    (void)state;
    assert_int_equal(rf_chat_family_detect("{{'<|im_start|>'}}", NULL, NULL), RF_CHAT_FAMILY_CHATML);
    assert_int_equal(rf_chat_family_detect("<|start_header_id|>", NULL, NULL), RF_CHAT_FAMILY_LLAMA3);
    assert_int_equal(rf_chat_family_detect("[INST] <<SYS>>", NULL, NULL), RF_CHAT_FAMILY_LLAMA2);
    assert_int_equal(rf_chat_family_detect("[INST]", NULL, NULL), RF_CHAT_FAMILY_MISTRAL);
    assert_int_equal(rf_chat_family_detect("<start_of_turn>", NULL, NULL), RF_CHAT_FAMILY_GEMMA);
    assert_int_equal(rf_chat_family_detect("<|user|>", NULL, NULL), RF_CHAT_FAMILY_PHI3);
    assert_int_equal(rf_chat_family_detect(NULL, "gemma3", NULL), RF_CHAT_FAMILY_GEMMA);
    assert_int_equal(rf_chat_family_detect(NULL, "qwen2", NULL), RF_CHAT_FAMILY_CHATML);
    assert_int_equal(rf_chat_family_detect(NULL, "mamba", NULL), RF_CHAT_FAMILY_UNKNOWN);
    struct { rf_chat_family f; const char *want; } ex[] = {
        {RF_CHAT_FAMILY_CHATML, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"},
        {RF_CHAT_FAMILY_LLAMA3, "<B><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
        {RF_CHAT_FAMILY_LLAMA2, "<B>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]"},
        {RF_CHAT_FAMILY_MISTRAL, "<B>[INST] S\n\nU[/INST]"},
        {RF_CHAT_FAMILY_GEMMA, "<B><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"},
        {RF_CHAT_FAMILY_PHI3, "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n"},
    };
    rf_chat_msg m[2] = {{"system", "S"}, {"user", "U"}};
    for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
        rf_chat_template *t;
        assert_int_equal(rf_chat_template_parse(rf_chat_family_template(ex[k].f), &t), RF_OK);
        char *out;
        assert_int_equal(rf_chat_template_render(t, m, 2, true, "<B>", "<E>", &out), RF_OK);
        if (strcmp(out, ex[k].want)) fprintf(stderr, "family %s: got \"%s\"\n", rf_chat_family_name(ex[k].f), out);
        assert_string_equal(out, ex[k].want);
        free(out);
        rf_chat_template_free(t);
    }
}

/* a template the subset cannot parse falls back to the family its text names, with a warning */
static void test_apply_fallback(void **state) {
    (void)state;
    const char *bad = "{% include 'x.jinja' %}{{ '<|im_start|>' }}";
    rf_chat_template *t;
    assert_int_equal(rf_chat_template_parse(bad, &t), RF_ERR_UNSUPPORTED);
    assert_non_null(strstr(rf_last_error(), "1:4"));
    assert_non_null(strstr(rf_last_error(), "include"));
    rf_chat_msg m[1] = {{"user", "hey"}};
    char *out = NULL;
    assert_int_equal(rf_chat_apply_template(NULL, bad, m, 1, true, &out), RF_OK);
    assert_string_equal(out, "<|im_start|>user\nhey<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    /* unrecognisable and unparseable: the parse error is returned */
    assert_int_equal(rf_chat_apply_template(NULL, "{% include 'x' %}", m, 1, true, &out), RF_ERR_UNSUPPORTED);
    assert_null(out);
    assert_non_null(strstr(rf_last_error(), "unsupported tag 'include'"));
    /* a render error (raise_exception) is not a reason to fall back */
    const char *raising = "{{ raise_exception('no <|im_start|> here') }}";
    assert_int_equal(rf_chat_apply_template(NULL, raising, m, 1, true, &out), RF_ERR_FORMAT);
    assert_string_equal(rf_last_error(), "no <|im_start|> here");
    assert_true(rf_chat_last_error_raised());
}

/* writes a GGUF holding only tokenizer metadata (no tensors) and opens it */
static rf_gguf *synthetic_gguf(const char *path, const char *arch, const char *tmpl, const char *const *toks, size_t nt) {
    rf_gguf_writer *w = rf_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(rf_gguf_set_str(w, "general.architecture", arch), RF_OK);
    assert_int_equal(rf_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, nt), RF_OK);
    assert_int_equal(rf_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1), RF_OK);
    assert_int_equal(rf_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2), RF_OK);
    if (tmpl) assert_int_equal(rf_gguf_set_str(w, "tokenizer.chat_template", tmpl), RF_OK);
    if (tmpl) assert_int_equal(rf_gguf_set_str(w, "tokenizer.chat_template.tool_use", "T{{ tools | length }}{{ eos_token }}"), RF_OK);
    assert_int_equal(rf_gguf_write_file(w, path), RF_OK);
    rf_gguf_writer_free(w);
    rf_gguf *g;
    assert_int_equal(rf_gguf_open(path, &g), RF_OK);
    return g;
}

static void test_from_gguf(void **state) {
    (void)state;
    char path[] = "/tmp/rf_chat_tmplXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *toks[] = {"<unk>", "<B>", "<E>", "<|start_header_id|>", "hello"};
    rf_chat_msg m[2] = {{"system", "S"}, {"user", "U"}};
    rf_log_level saved = rf_log_get_level();
    rf_log_set_level(RF_LOG_ERROR);
    /* the model's own template, with the vocabulary's BOS/EOS texts remembered */
    rf_gguf *g = synthetic_gguf(path, "llama", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}", toks, 5);
    rf_chat_template *t;
    assert_int_equal(rf_chat_template_from_gguf(g, &t), RF_OK);
    assert_false(rf_chat_template_is_fallback(t));
    char *out;
    assert_int_equal(rf_chat_template_render(t, m, 2, true, NULL, NULL, &out), RF_OK);
    assert_string_equal(out, "<B>SU<E>");
    free(out);
    rf_chat_template_free(t);
    /* a named variant */
    assert_int_equal(rf_chat_template_from_gguf_named(g, "tool_use", &t), RF_OK);
    rf_chat_render_opts o = {0};
    o.tools_json = "[{\"type\": \"function\"}, {}]";
    assert_int_equal(rf_chat_template_render_ex(t, m, 2, &o, &out), RF_OK);
    assert_string_equal(out, "T2<E>");
    free(out);
    rf_chat_template_free(t);
    assert_int_equal(rf_chat_template_from_gguf_named(g, "rag", &t), RF_ERR_NOT_FOUND);
    assert_null(t);
    rf_gguf_close(g);
    /* an unparseable template naming Gemma turns: the gemma fallback */
    g = synthetic_gguf(path, "llama", "{% include 'x' %}<start_of_turn>", toks, 5);
    assert_int_equal(rf_chat_template_from_gguf(g, &t), RF_OK);
    assert_true(rf_chat_template_is_fallback(t));
    assert_int_equal(rf_chat_template_render(t, m, 2, true, NULL, NULL, &out), RF_OK);
    assert_string_equal(out, "<B><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n");
    free(out);
    rf_chat_template_free(t);
    rf_gguf_close(g);
    /* no template: llama architecture with Llama 3 header tokens in the vocabulary */
    g = synthetic_gguf(path, "llama", NULL, toks, 5);
    assert_int_equal(rf_chat_template_from_gguf(g, &t), RF_OK);
    assert_true(rf_chat_template_is_fallback(t));
    assert_int_equal(rf_chat_template_render(t, m + 1, 1, false, NULL, NULL, &out), RF_OK);
    assert_string_equal(out, "<B><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>");
    free(out);
    rf_chat_template_free(t);
    rf_gguf_close(g);
    /* nothing to go on */
    g = synthetic_gguf(path, "mamba", NULL, toks, 3);
    assert_int_equal(rf_chat_template_from_gguf(g, &t), RF_ERR_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(rf_last_error(), "mamba"));
    rf_gguf_close(g);
    rf_log_set_level(saved);
    unlink(path);
}

static const char *golden_expected(json_t *g, const char *tmpl, const char *cname, bool agp) {
    json_t *cases = json_object_get(g, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        if (!strcmp(json_string_value(json_object_get(c, "template")), tmpl) &&
            !strcmp(json_string_value(json_object_get(c, "case")), cname) &&
            json_is_true(json_object_get(c, "add_generation_prompt")) == agp)
            return json_string_value(json_object_get(c, "expected"));
    }
    return NULL;
}

/* Real models: SmolLM2 carries its template (must match the golden of the same template);
 * the Gemma 3 file carries none, so the built-in gemma family must reproduce the official
 * Gemma 3 template's output for plain string content. */
static void test_real_models(void **state) {
    (void)state;
    char p1[1024], p2[1024];
    snprintf(p1, sizeof p1, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", RF_SOURCE_DIR);
    snprintf(p2, sizeof p2, "%s/models/gemma-3-270m-q4_k_m.gguf", RF_SOURCE_DIR);
    if (access(p1, R_OK) != 0 && access(p2, R_OK) != 0) {
        printf("models/ has neither real model (run scripts/fetch-models.sh); skipping\n");
        skip();
    }
    json_t *g = load_goldens();
    assert_non_null(g);
    json_t *cases = json_object_get(g, "cases");
    const struct { const char *path, *tmpl; } models[] = {
        {p1, "SmolLM2-135M-Instruct.jinja"}, {p2, "google-gemma-3-it.jinja"}};
    rf_log_level saved = rf_log_get_level();
    rf_log_set_level(RF_LOG_ERROR); /* the gemma fallback warns once per call */
    for (int mi = 0; mi < 2; mi++) {
        if (access(models[mi].path, R_OK) != 0) continue;
        rf_gguf *gg;
        assert_int_equal(rf_gguf_open(models[mi].path, &gg), RF_OK);
        int checked = 0;
        for (size_t i = 0; i < json_array_size(cases); i++) {
            json_t *c = json_array_get(cases, i);
            const char *cname = json_string_value(json_object_get(c, "case"));
            if (strcmp(json_string_value(json_object_get(c, "template")), models[mi].tmpl)) continue;
            if (strcmp(cname, "single") && strcmp(cname, "system_single") && strcmp(cname, "multi_turn") &&
                strcmp(cname, "system_multi"))
                continue;
            json_t *msgs = json_object_get(c, "messages");
            rf_chat_msg m[8];
            size_t n = json_array_size(msgs);
            for (size_t k = 0; k < n; k++) {
                m[k].role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
                m[k].content = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
            }
            bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
            char *out = NULL;
            assert_int_equal(rf_chat_apply_template(gg, NULL, m, n, agp, &out), RF_OK);
            const char *want = golden_expected(g, models[mi].tmpl, cname, agp);
            assert_non_null(want);
            if (strcmp(out, want)) {
                fprintf(stderr, "%s / %s / agp=%d differs\n", models[mi].path, cname, agp);
                show_diff(out, want);
            }
            assert_string_equal(out, want);
            free(out);
            checked++;
        }
        rf_chat_template *ft;
        assert_int_equal(rf_chat_template_from_gguf(gg, &ft), RF_OK);
        /* the Gemma 3 file of scripts/fetch-models.sh has no template: the fallback applies */
        assert_int_equal(rf_chat_template_is_fallback(ft), rf_gguf_find_key(gg, "tokenizer.chat_template") < 0);
        rf_chat_template_free(ft);
        printf("  %s: %d cases match the official template's goldens\n", models[mi].path, checked);
        assert_int_equal(checked, 8);
        rf_gguf_close(gg);
    }
    rf_log_set_level(saved);
    json_decref(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens),
        cmocka_unit_test(test_goldens_extra),
        cmocka_unit_test(test_goldens_2026),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_simple_api_matches_ex),
        cmocka_unit_test(test_family_detect_and_builtins),
        cmocka_unit_test(test_apply_fallback),
        cmocka_unit_test(test_from_gguf),
        cmocka_unit_test(test_real_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
