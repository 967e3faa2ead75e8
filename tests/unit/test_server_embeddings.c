/* test_server_embeddings.c — /v1/embeddings without HTTP: each input shape parsed into prompts,
 * each bad body answered with its status and param, the engine requests prepared (dimensions,
 * the context, ids outside the vocabulary), and the vector's base64 (little-endian float32, as
 * the OpenAI SDKs decode it) against known strings. SmolLM2 when models/ has it, else a synthetic
 * tiny model. Skipped (77) when the server is not part of the build. */
#define _GNU_SOURCE
#include "test_util.h"

#ifndef RF_HAVE_SERVER
#include <stdio.h>
int main(void) {
    printf("test_server_embeddings: SKIPPED (built without libmicrohttpd: no server)\n");
    return RF_TEST_SKIP;
}
#else
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_server_body.h"

static rf_fuzz_srv g;
static int (*const g_unused_one)(rf_fuzz_srv *, const uint8_t *, size_t) = rf_fuzz_srv_one; /* the body's; replayed by test_server_parse */

static void parse_ok(const char *body, size_t n_prompts, srv_params *p) {
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_parse_request(SRV_ROUTE_EMBEDDINGS, body, strlen(body), p, &e)) fail_msg("%s: %s", body, e.message);
    assert_int_equal(p->route, SRV_ROUTE_EMBEDDINGS);
    assert_int_equal(p->n_prompts, n_prompts);
}

static void test_shapes(void **state) {
    (void)state;
    srv_params p;
    parse_ok("{\"input\": \"hello\"}", 1, &p);
    assert_string_equal(p.prompts[0].text, "hello");
    assert_false(p.embd_base64);
    srv_params_free(&p);
    parse_ok("{\"input\": [\"a\", \"bc\"], \"encoding_format\": \"base64\", \"model\": \"m\"}", 2, &p);
    assert_string_equal(p.prompts[1].text, "bc");
    assert_true(p.embd_base64);
    assert_string_equal(p.model, "m");
    srv_params_free(&p);
    parse_ok("{\"input\": [3, 4, 5]}", 1, &p);
    assert_int_equal(p.prompts[0].n_ids, 3);
    assert_int_equal(p.prompts[0].ids[2], 5);
    srv_params_free(&p);
    parse_ok("{\"input\": [[3], [4, 5], \"x\"], \"dimensions\": 7}", 3, &p);
    assert_int_equal(p.prompts[1].n_ids, 2);
    assert_string_equal(p.prompts[2].text, "x");
    assert_int_equal(p.dimensions, 7);
    srv_params_free(&p);
    assert_int_equal(srv_route_of("/v1/embeddings"), SRV_ROUTE_EMBEDDINGS);
    assert_int_equal(srv_route_of("/embeddings"), SRV_ROUTE_EMBEDDINGS);
    assert_true(srv_route_allows(SRV_ROUTE_EMBEDDINGS, "POST", NULL));
    assert_false(srv_route_allows(SRV_ROUTE_EMBEDDINGS, "GET", NULL));
    assert_string_equal(srv_route_name(SRV_ROUTE_EMBEDDINGS), "embeddings");
}

static void test_bad(void **state) {
    (void)state;
    static const struct {
        const char *body, *param, *msg;
    } cases[] = {
        {"{}", "input", "required"},
        {"{\"input\": null}", "input", "required"},
        {"{\"input\": \"\"}", "input", "empty string"},
        {"{\"input\": []}", "input", "empty list"},
        {"{\"input\": [\"a\", \"\"]}", "input", "'input[1]' is an empty string"},
        {"{\"input\": [[]]}", "input", "empty list of token ids"},
        {"{\"input\": 3}", "input", "string or an array"},
        {"{\"input\": [\"a\", 3]}", "input", "input[1]"},
        {"{\"input\": [1, -1]}", "input", "token id"},
        {"{\"input\": [1, \"a\"]}", "input", "token id"},
        {"{\"input\": [{}]}", "input", "string or a list of token ids"},
        {"{\"input\": \"x\", \"encoding_format\": \"int8\"}", "encoding_format", "\"float\" or \"base64\""},
        {"{\"input\": \"x\", \"dimensions\": 0}", "dimensions", ">= 1"},
        {"{\"input\": \"x\", \"dimensions\": 1.5}", "dimensions", ">= 1"},
        {"{\"input\": \"x\", \"model\": 1}", "model", "string"},
        {"{\"input\": \"x\", \"user\": 1}", "user", "string"},
        {"[1]", "", "JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        srv_params p;
        srv_error e;
        memset(&e, 0, sizeof e);
        if (!srv_parse_request(SRV_ROUTE_EMBEDDINGS, cases[i].body, strlen(cases[i].body), &p, &e))
            fail_msg("accepted: %s", cases[i].body);
        assert_int_equal(e.status, 400);
        if (strcmp(e.param, cases[i].param)) fail_msg("%s: param '%s'", cases[i].body, e.param);
        if (!strstr(e.message, cases[i].msg)) fail_msg("%s: message '%s'", cases[i].body, e.message);
    }
}

static int prepare(const char *body, srv_error *e, srv_prepared *pr) {
    srv_params p;
    memset(e, 0, sizeof *e);
    if (srv_parse_request(SRV_ROUTE_EMBEDDINGS, body, strlen(body), &p, e)) fail_msg("%s: %s", body, e->message);
    rf_model_info mi;
    assert_int_equal(rf_model_get_info(g.model, &mi), RF_OK);
    int rc = srv_embed_prepare(g.eng, g.n_ctx, rf_model_pooling(g.model), mi.n_embd, &p, pr, e);
    srv_params_free(&p);
    return rc;
}

static void test_prepare(void **state) {
    (void)state;
    srv_error e;
    srv_prepared pr;
    char body[8192];
    rf_model_info mi;
    assert_int_equal(rf_model_get_info(g.model, &mi), RF_OK);
    snprintf(body, sizeof body, "{\"input\": [\"hello world\", [1, 2, 3]], \"dimensions\": %d}", mi.n_embd);
    assert_int_equal(prepare(body, &e, &pr), 0);
    assert_int_equal(pr.n, 2);
    assert_int_equal(pr.n_prompt[1], 3);
    assert_true(pr.n_prompt[0] >= 2);
    srv_prepared_free(&pr);
    snprintf(body, sizeof body, "{\"input\": \"x\", \"dimensions\": %d}", mi.n_embd + 1);
    assert_int_equal(prepare(body, &e, &pr), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "dimensions");
    snprintf(body, sizeof body, "{\"input\": [\"ok\", [1, %d]]}", rf_engine_n_vocab(g.eng));
    assert_int_equal(prepare(body, &e, &pr), -1);
    assert_non_null(strstr(e.message, "outside the vocabulary"));
    assert_non_null(strstr(e.message, "input[1]"));
    /* one more token than the context, as ids and as text */
    size_t w = (size_t)snprintf(body, sizeof body, "{\"input\": [");
    for (int i = 0; i <= g.n_ctx && w + 8 < sizeof body; i++) w += (size_t)snprintf(body + w, sizeof body - w, "%s5", i ? "," : "");
    snprintf(body + w, sizeof body - w, "]}");
    assert_int_equal(prepare(body, &e, &pr), -1);
    assert_string_equal(e.code, "context_length_exceeded");
    w = (size_t)snprintf(body, sizeof body, "{\"input\": \"");
    for (int i = 0; i <= g.n_ctx && w + 8 < sizeof body; i++) w += (size_t)snprintf(body + w, sizeof body - w, " hi");
    snprintf(body + w, sizeof body - w, "\"}");
    assert_int_equal(prepare(body, &e, &pr), -1);
    assert_string_equal(e.code, "context_length_exceeded");
    assert_string_equal(e.param, "input");
}

static void test_base64(void **state) {
    (void)state;
    const float v[3] = {1.0f, -2.0f, 0.5f};
    static const char *want[4] = {"", "AACAPw==", "AACAPwAAAMA=", "AACAPwAAAMAAAAA/"};
    for (int n = 0; n <= 3; n++) {
        json_t *j = srv_embedding_json(v, n, true);
        assert_non_null(j);
        assert_string_equal(json_string_value(j), want[n]);
        json_decref(j);
    }
    json_t *a = srv_embedding_json(v, 3, false);
    assert_int_equal(json_array_size(a), 3);
    assert_true(json_real_value(json_array_get(a, 1)) == -2.0);
    json_decref(a);
}

int main(void) {
    char model[4096];
    snprintf(model, sizeof model, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", RF_SOURCE_DIR);
    if (rf_fuzz_srv_init(&g, model)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_prepare),
        cmocka_unit_test(test_base64),
    };
    (void)g_unused_one;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_engine_free(g.eng);
    rf_model_free(g.model);
    return rc;
}
#endif
