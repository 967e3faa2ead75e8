/* test_server_parse.c — the server's request-to-params path without HTTP: replays the fuzz
 * seed corpus (tests/fuzz/corpus-server) through the fuzz target's body and its invariants, and
 * pins the answer to each kind of bad body (status, type, code, param) and the context check
 * (prompt + max_tokens over the context names both numbers). Uses SmolLM2 when models/ has it,
 * else a synthetic tiny model. Skipped (77) when the server is not part of the build. */
#define _GNU_SOURCE
#include "test_util.h"

#ifndef RF_HAVE_SERVER
#include <stdio.h>
int main(void) {
    printf("test_server_parse: SKIPPED (built without libmicrohttpd: no server)\n");
    return RF_TEST_SKIP;
}
#else
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_server_body.h"

static rf_fuzz_srv g;

static void test_corpus_replay(void **state) {
    (void)state;
    rf_test_corpus c;
    rf_test_corpus_open(&c, "corpus-server");
    int n = 0, counts[3] = {0, 0, 0};
    size_t size;
    uint8_t *copy;
    while ((copy = rf_test_corpus_next(&c, &size))) {
        counts[rf_fuzz_srv_one(&g, copy, size)]++;
        free(copy);
        n++;
    }
    printf("replayed %d server corpus files: %d refused by the parser, %d when preparing, %d prepared\n", n,
           counts[0], counts[1], counts[2]);
    assert_true(n >= 10);
    assert_true(counts[0] >= 3);
    assert_true(counts[2] >= 3);
}

typedef struct bad_case {
    srv_route route;
    const char *body;
    int status;
    const char *param; /* "" = null */
    const char *code;  /* NULL = null */
    const char *msg;   /* a substring of the message */
} bad_case;

static void test_bad_bodies(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {SRV_ROUTE_CHAT, "", 400, "", NULL, "empty"},
        {SRV_ROUTE_CHAT, "{\"messages\": [", 400, "", NULL, "invalid JSON"},
        {SRV_ROUTE_CHAT, "[1, 2]", 400, "", NULL, "must be a JSON object"},
        {SRV_ROUTE_CHAT, "{}", 400, "messages", NULL, "'messages' is required"},
        {SRV_ROUTE_CHAT, "{\"messages\": []}", 400, "messages", NULL, "must not be empty"},
        {SRV_ROUTE_CHAT, "{\"messages\": \"hi\"}", 400, "messages", NULL, "must be an array"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 400, "messages[0].role", NULL, "unknown role"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", 400, "messages[0].role", NULL, "is required"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "messages[0].content", NULL, "must be a string"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", 400, "messages[0].content", NULL, "is required"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 400, "messages[0].content[0]", NULL, "not supported"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"n\": 0}", 400, "n", NULL, "[1, 64]"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"n\": 65}", 400, "n", NULL, "[1, 64]"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"n\": 1.5}", 400, "n", NULL, "integer"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": \"hot\"}", 400, "temperature", NULL, "must be a number"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": 3}", 400, "temperature", NULL, "[0, 2]"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 0}", 400, "max_tokens", NULL, "[1,"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": \"yes\"}", 400, "stream", NULL, "boolean"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": 5}", 400, "stop", NULL, "string or a list"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}", 400, "stop", NULL, "at most 16"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 3}", 400, "top_logprobs", NULL, "needs 'logprobs'"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, \"top_logprobs\": 21}", 400, "top_logprobs", NULL, "[0, 20]"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"yaml\"}}", 400, "response_format.type", NULL, "must be one of"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"model\": 7}", 400, "model", NULL, "must be a string"},
        {SRV_ROUTE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream_options\": {\"include_usage\": 1}}", 400, "stream_options.include_usage", NULL, "boolean"},
        {SRV_ROUTE_COMPLETIONS, "{}", 400, "prompt", NULL, "'prompt' is required"},
        {SRV_ROUTE_COMPLETIONS, "{\"prompt\": []}", 400, "prompt", NULL, "empty list"},
        {SRV_ROUTE_COMPLETIONS, "{\"prompt\": {\"a\": 1}}", 400, "prompt", NULL, "must be a string"},
        {SRV_ROUTE_COMPLETIONS, "{\"prompt\": [\"a\", 5]}", 400, "prompt[1]", NULL, "must be a string or a list of token ids"},
        {SRV_ROUTE_COMPLETIONS, "{\"prompt\": [1, -2]}", 400, "prompt", NULL, "is not a token id"},
        {SRV_ROUTE_COMPLETIONS, "{\"prompt\": \"x\", \"logprobs\": 30}", 400, "logprobs", NULL, "[0, 20]"},
        {SRV_ROUTE_COMPLETIONS, "{\"prompt\": \"x\", \"echo\": true, \"logprobs\": 1}", 400, "echo", NULL, "not supported"},
        /* Anthropic Messages: its own field names and ranges */
        {SRV_ROUTE_MESSAGES, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 400, "max_tokens", NULL, "'max_tokens' is required"},
        {SRV_ROUTE_MESSAGES, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", 400, "messages[0].role", NULL, "top-level 'system'"},
        {SRV_ROUTE_MESSAGES, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": 1.5}", 400, "temperature", NULL, "[0, 1]"},
        {SRV_ROUTE_MESSAGES, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_use\"}]}]}", 400, "messages[0].content[0]", NULL, "tool_use"},
        {SRV_ROUTE_MESSAGES, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop_sequences\": \"x\"}", 400, "stop_sequences", NULL, "list of strings"},
        {SRV_ROUTE_MESSAGES, "{\"max_tokens\": 4, \"system\": [{\"type\": \"image\"}], \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 400, "system[0]", NULL, "not supported"},
        /* OpenAI Responses: stateless */
        {SRV_ROUTE_RESPONSES, "{\"input\": \"x\", \"previous_response_id\": \"resp_1\"}", 400, "previous_response_id", NULL, "stateless"},
        {SRV_ROUTE_RESPONSES, "{\"input\": \"x\", \"store\": true}", 400, "store", NULL, "stateless"},
        {SRV_ROUTE_RESPONSES, "{}", 400, "input", NULL, "'input' is required"},
        {SRV_ROUTE_RESPONSES, "{\"input\": [{\"type\": \"function_call_output\"}]}", 400, "input[0]", NULL, "call_id"},
        {SRV_ROUTE_RESPONSES, "{\"input\": [{\"type\": \"computer_call\"}]}", 400, "input[0]", NULL, "not supported"},
        {SRV_ROUTE_RESPONSES, "{\"input\": \"x\", \"tools\": [{\"type\": \"web_search\"}]}", 400, "tools[0]", NULL, "only tools of type"},
        {SRV_ROUTE_MESSAGES, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"web_search_20250305\", \"name\": \"w\"}]}", 400, "tools[0]", NULL, "server tools"},
        {SRV_ROUTE_MESSAGES, "{\"max_tokens\": 4, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": {\"type\": \"maybe\"}}", 400, "tool_choice.type", NULL, "auto, any"},
        {SRV_ROUTE_RESPONSES, "{\"input\": \"x\", \"max_output_tokens\": 0}", 400, "max_output_tokens", NULL, ">= 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        srv_params p;
        srv_error e;
        memset(&e, 0, sizeof e);
        int rc = srv_parse_request(c->route, c->body, strlen(c->body), &p, &e);
        if (rc == 0) {
            print_error("case %zu accepted: %s\n", i, c->body);
            srv_params_free(&p);
            fail();
        }
        if (e.status != c->status || strcmp(e.param, c->param) || (c->code ? !e.code || strcmp(e.code, c->code) : e.code != NULL) ||
            !strstr(e.message, c->msg) || strcmp(e.type, "invalid_request_error")) {
            print_error("case %zu (%s): status %d type %s param '%s' code %s message '%s'\n", i, c->body, e.status, e.type,
                        e.param, e.code ? e.code : "null", e.message);
            fail();
        }
        rf_fuzz_srv_check_error(&e);
    }
}

/* Accepted oddities: unknown fields, null values, content parts, developer role, empty stop. */
static void test_good_bodies(void **state) {
    (void)state;
    const char *body =
        "{\"messages\": [{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, \"b\"]},"
        " {\"role\": \"user\", \"content\": \"hi\", \"name\": \"x\"}, {\"role\": \"assistant\", \"content\": null}],"
        " \"mirostat\": 2, \"user\": \"u\", \"temperature\": null, \"stop\": \"\", \"max_completion_tokens\": 7,"
        " \"max_tokens\": 3, \"seed\": -1, \"logit_bias\": {}, \"tools\": [], \"n\": 3.0}";
    srv_params p;
    srv_error e;
    assert_int_equal(srv_parse_request(SRV_ROUTE_CHAT, body, strlen(body), &p, &e), 0);
    assert_int_equal(p.n_msgs, 3);
    assert_string_equal(p.msgs[0].role, "system");
    assert_string_equal(p.msgs[0].content, "a\nb");
    assert_string_equal(p.msgs[2].content, "");
    assert_int_equal(p.max_tokens, 7); /* max_completion_tokens wins */
    assert_int_equal(p.n, 3);
    assert_int_equal(p.n_stop, 0);
    assert_true(p.sp.temperature == 1.0f);
    assert_true(p.has_seed);
    assert_true(p.sp.seed == UINT64_MAX); /* -1: its two's complement, all 64 bits */
    srv_params_free(&p);
}

/* A seed past 2^53 (a double cannot hold it) reaches the engine's request unchanged: from the
 * JSON through srv_params to the rf_request's sampling parameters. */
static void test_seed_64bit(void **state) {
    (void)state;
    const uint64_t seeds[] = {9007199254740993ULL /* 2^53 + 1 */, 9223372036854775807ULL /* 2^63 - 1 */,
                              18446744073709551615ULL /* as -1 */};
    const char *bodies[] = {"{\"prompt\": \"Once\", \"seed\": 9007199254740993}",
                            "{\"prompt\": \"Once\", \"seed\": 9223372036854775807}",
                            "{\"prompt\": \"Once\", \"seed\": -1}"};
    for (int i = 0; i < 3; i++) {
        srv_params p;
        srv_error e;
        assert_int_equal(srv_parse_request(SRV_ROUTE_COMPLETIONS, bodies[i], strlen(bodies[i]), &p, &e), 0);
        assert_true(p.has_seed);
        assert_true(p.sp.seed == seeds[i]);
        srv_prepared pr;
        assert_int_equal(srv_prepare(g.eng, g.n_ctx, &p, 1, &pr, &e), 0);
        assert_int_equal(pr.n, 1);
        assert_true(rf_request_sampling(pr.reqs[0])->seed == seeds[i]);
        srv_prepared_free(&pr);
        srv_params_free(&p);
    }
    /* no seed in the body: the server's own, all 64 bits of it */
    const char *none = "{\"prompt\": \"Once\"}";
    srv_params p;
    srv_error e;
    assert_int_equal(srv_parse_request(SRV_ROUTE_COMPLETIONS, none, strlen(none), &p, &e), 0);
    assert_false(p.has_seed);
    srv_prepared pr;
    assert_int_equal(srv_prepare(g.eng, g.n_ctx, &p, 0xF00DFACEC0FFEE01ULL, &pr, &e), 0);
    assert_true(rf_request_sampling(pr.reqs[0])->seed == 0xF00DFACEC0FFEE01ULL);
    srv_prepared_free(&pr);
    srv_params_free(&p);
}

/* Messages and Responses bodies become the chat request they mean. */
static void test_translated_bodies(void **state) {
    (void)state;
    const char *m = "{\"model\": \"claude\", \"max_tokens\": 9, \"system\": [{\"type\": \"text\", \"text\": \"S1\"}, "
                    "{\"type\": \"text\", \"text\": \"S2\"}], \"messages\": [{\"role\": \"user\", \"content\": \"a\"}, "
                    "{\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"t\"}, {\"type\": \"text\", "
                    "\"text\": \"b\"}]}], \"stop_sequences\": [\"X\", \"\"], \"top_k\": 5, \"temperature\": 0.5, \"stream\": true}";
    srv_params p;
    srv_error e;
    assert_int_equal(srv_parse_request(SRV_ROUTE_MESSAGES, m, strlen(m), &p, &e), 0);
    assert_int_equal(p.api, SRV_API_MESSAGES);
    assert_int_equal(p.route, SRV_ROUTE_CHAT);
    assert_int_equal(p.n_msgs, 3);
    assert_string_equal(p.msgs[0].role, "system");
    assert_string_equal(p.msgs[0].content, "S1\nS2");
    assert_string_equal(p.msgs[2].role, "assistant");
    assert_string_equal(p.msgs[2].content, "b"); /* the thinking block dropped */
    assert_int_equal(p.max_tokens, 9);
    assert_int_equal(p.n_stop, 1);
    assert_string_equal(p.stop[0], "X");
    assert_int_equal(p.sp.top_k, 5);
    assert_true(p.sp.temperature == 0.5 && p.stream);
    assert_string_equal(p.model, "claude");
    srv_params_free(&p);
    const char *r = "{\"instructions\": \"I\", \"input\": [{\"role\": \"developer\", \"content\": \"D\"}, {\"type\": \"message\", "
                    "\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"u1\"}, {\"type\": \"input_text\", "
                    "\"text\": \"u2\"}]}, {\"type\": \"reasoning\"}], \"max_output_tokens\": 5, \"store\": false}";
    assert_int_equal(srv_parse_request(SRV_ROUTE_RESPONSES, r, strlen(r), &p, &e), 0);
    assert_int_equal(p.api, SRV_API_RESPONSES);
    assert_int_equal(p.n_msgs, 3);
    assert_string_equal(p.msgs[0].content, "I");
    assert_string_equal(p.msgs[1].role, "system");
    assert_string_equal(p.msgs[2].content, "u1\nu2");
    assert_int_equal(p.max_tokens, 5);
    assert_string_equal(p.instructions, "I");
    srv_params_free(&p);
    /* an Anthropic error body */
    srv_fail(&e, 413, "invalid_request_error", NULL, NULL, "too big");
    char *j = srv_anthropic_error_json(&e);
    assert_string_equal(j, "{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\",\"message\":\"too big\"}}");
    free(j);
}

static void test_context_check(void **state) {
    (void)state;
    char body[256];
    /* the prompt alone is several tokens; max_tokens = the whole context cannot fit */
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time\", \"max_tokens\": %d}", g.n_ctx);
    srv_params p;
    srv_error e;
    assert_int_equal(srv_parse_request(SRV_ROUTE_COMPLETIONS, body, strlen(body), &p, &e), 0);
    srv_prepared pr;
    assert_int_equal(srv_prepare(g.eng, g.n_ctx, &p, 1, &pr, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "context_length_exceeded");
    assert_string_equal(e.param, "prompt");
    char num[32];
    snprintf(num, sizeof num, "%d tokens", g.n_ctx);
    assert_non_null(strstr(e.message, num)); /* the context ... */
    snprintf(num, sizeof num, "%d in the completion", g.n_ctx);
    assert_non_null(strstr(e.message, num)); /* ... and what was asked */
    srv_params_free(&p);
    /* one token less than the room left is accepted, and nothing is truncated */
    snprintf(body, sizeof body, "{\"prompt\": [1, 2, 3], \"max_tokens\": %d}", g.n_ctx - 3);
    assert_int_equal(srv_parse_request(SRV_ROUTE_COMPLETIONS, body, strlen(body), &p, &e), 0);
    assert_int_equal(srv_prepare(g.eng, g.n_ctx, &p, 1, &pr, &e), 0);
    assert_int_equal(pr.n_prompt[0], 3);
    srv_prepared_free(&pr);
    srv_params_free(&p);
    /* a token id outside the vocabulary names it */
    snprintf(body, sizeof body, "{\"prompt\": [1, %d]}", rf_engine_n_vocab(g.eng));
    assert_int_equal(srv_parse_request(SRV_ROUTE_COMPLETIONS, body, strlen(body), &p, &e), 0);
    assert_int_equal(srv_prepare(g.eng, g.n_ctx, &p, 1, &pr, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "outside the vocabulary"));
    srv_params_free(&p);
}

int main(void) {
    char model[4096];
    snprintf(model, sizeof model, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", RF_SOURCE_DIR);
    if (rf_fuzz_srv_init(&g, model)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus_replay),
        cmocka_unit_test(test_translated_bodies),
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_good_bodies),
        cmocka_unit_test(test_seed_64bit),
        cmocka_unit_test(test_context_check),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_engine_free(g.eng);
    rf_model_free(g.model);
    return rc;
}
#endif
