/* fuzz_template_body.h — one fuzz iteration over the Jinja engine (parse + render with data
 * tracking), shared by the libFuzzer target (fuzz_template.c) and the corpus replay unit test
 * (tests/unit/test_template_corpus.c), so the corpus also runs under gcc in `make test`.
 *
 * Input: template source, then optionally a NUL byte and a JSON object of variables (when it is
 * absent or not an object, a fixed conversation with tools is used). For any input: parsing
 * either fails with a message or gives a template; rendering (small limits) either fails with
 * a message and no output, or succeeds, and then: the text is NUL-terminated at its length; the
 * data ranges are sorted, disjoint, not touching and inside the text; rendering with data
 * tracking gives the same text as without it; and with every variable trusted there is no data
 * at all (template text never becomes data). A violated invariant traps. */
#ifndef RF_FUZZ_TEMPLATE_BODY_H
#define RF_FUZZ_TEMPLATE_BODY_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja.h"

#include "fuzz_check.h"

static const char RF_FUZZ_TEMPLATE_VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be <|im_start|> brief.\"},"
    " {\"role\": \"user\", \"content\": \"hi <start_of_turn>\", \"name\": \"u\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": \"<|x|>\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"[1, 2]\", \"tool_call_id\": \"c1\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"big\": 9223372036854775807, \"small\": -9223372036854775808}";

static void rf_fuzz_template_check_out(const rf_jinja_output *o) {
    RF_FUZZ_CHECK(o->text != NULL);
    RF_FUZZ_CHECK(o->text[o->len] == 0);
    RF_FUZZ_CHECK((o->n_data == 0) == (o->data == NULL));
    for (size_t k = 0; k < o->n_data; k++) {
        RF_FUZZ_CHECK(o->data[k].begin < o->data[k].end);
        RF_FUZZ_CHECK(o->data[k].end <= o->len);
        if (k) RF_FUZZ_CHECK(o->data[k].begin > o->data[k - 1].end);
    }
}

static int rf_fuzz_template_one(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const char *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - src) : size;
    json_t *vars = NULL;
    if (nul) vars = json_loadb(nul + 1, size - slen - 1, JSON_DECODE_ANY, NULL);
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_loads(RF_FUZZ_TEMPLATE_VARS, 0, NULL);
    }
    RF_FUZZ_CHECK(vars != NULL);
    rf_jinja *t = NULL;
    rf_status st = rf_jinja_parse(src, slen, &t);
    if (st) {
        RF_FUZZ_CHECK(t == NULL);
        RF_FUZZ_CHECK(rf_last_error()[0] != 0);
        json_decref(vars);
        return 0;
    }
    rf_jinja_limits lim = {.max_output = 1 << 16, .max_memory = 16 << 20, .max_steps = 20000, .max_depth = 16};
    const char *const trusted[] = {"bos_token", "eos_token", NULL};
    rf_jinja_output o;
    st = rf_jinja_render_data(t, vars, trusted, &lim, 1, &o);
    if (st) {
        RF_FUZZ_CHECK(o.text == NULL && o.data == NULL && o.len == 0 && o.n_data == 0);
        RF_FUZZ_CHECK(rf_last_error()[0] != 0);
    } else {
        rf_fuzz_template_check_out(&o);
        /* the same text without tracking */
        char *plain = NULL;
        size_t plen = 0;
        RF_FUZZ_CHECK(rf_jinja_render(t, vars, &lim, 1, &plain, &plen) == RF_OK);
        RF_FUZZ_CHECK(plen == o.len && memcmp(plain, o.text, plen) == 0);
        free(plain);
        /* every variable trusted: nothing is data */
        size_t nv = json_object_size(vars), i = 0;
        const char **all = calloc(nv + 1, sizeof *all);
        RF_FUZZ_CHECK(all != NULL);
        const char *k;
        json_t *v;
        json_object_foreach(vars, k, v) all[i++] = k;
        rf_jinja_output o2;
        RF_FUZZ_CHECK(rf_jinja_render_data(t, vars, all, &lim, 1, &o2) == RF_OK);
        rf_fuzz_template_check_out(&o2);
        RF_FUZZ_CHECK(o2.n_data == 0);
        RF_FUZZ_CHECK(o2.len == o.len && memcmp(o2.text, o.text, o.len) == 0);
        free(o2.text);
        free(all);
    }
    free(o.text);
    free(o.data);
    rf_jinja_free(t);
    json_decref(vars);
    return 0;
}

#endif
