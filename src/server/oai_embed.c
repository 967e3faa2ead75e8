/* oai_embed.c — OpenAI's /v1/embeddings (oai.h): the body to checked parameters, one engine
 * embedding request per input pooled as the model's file says, and the vector as the answer
 * writes it (numbers or base64). The events and the answer object: the end of server_out.c. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"

static int oom(srv_error *e) {
    return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while reading the request");
}

/* ---- the body ----------------------------------------------------------------------------- */

/* An array of token ids into *sp (param names the field in errors). */
static int read_input_ids(json_t *a, srv_prompt *sp, const char *param, srv_error *e) {
    size_t n = json_array_size(a);
    if (!n) return srv_bad(e, "input", "'%s' is an empty list of token ids", param);
    if (!(sp->ids = malloc(n * sizeof *sp->ids))) return oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return srv_bad(e, "input", "'%s'[%zu] must be a token id (an integer >= 0)", param, i);
        sp->ids[i] = (int32_t)json_integer_value(v);
    }
    sp->n_ids = n;
    return 0;
}

static int read_input_text(json_t *v, srv_prompt *sp, const char *param, srv_error *e) {
    size_t n = json_string_length(v);
    if (!n) return srv_bad(e, "input", "'%s' is an empty string", param);
    if (!(sp->text = malloc(n + 1))) return oom(e);
    memcpy(sp->text, json_string_value(v), n + 1);
    sp->len = n;
    return 0;
}

/* 'input': a string, a list of strings, a list of token ids, or a list of lists of ids. */
static int read_inputs(json_t *in, srv_params *p, srv_error *e) {
    if (!(in && !json_is_null(in))) return srv_bad(e, "input", "'input' is required");
    if (!json_is_string(in) && !json_is_array(in))
        return srv_bad(e, "input", "'input' must be a string or an array, not %s", srv_json_type_name(in));
    size_t n = json_is_string(in) ? 1 : json_array_size(in);
    if (!n) return srv_bad(e, "input", "'input' is an empty list");
    bool ids = json_is_array(in) && json_is_integer(json_array_get(in, 0)); /* one prompt of ids */
    if (ids) n = 1;
    if (n > SRV_MAX_EMBED_INPUTS) return srv_bad(e, "input", "'input' has %zu entries; at most %d", n, SRV_MAX_EMBED_INPUTS);
    if (!(p->prompts = calloc(n, sizeof *p->prompts))) return oom(e);
    p->n_prompts = n;
    if (json_is_string(in)) return read_input_text(in, &p->prompts[0], "input", e);
    if (ids) return read_input_ids(in, &p->prompts[0], "input", e);
    char param[32];
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(in, i);
        snprintf(param, sizeof param, "input[%zu]", i);
        int rc = json_is_string(v)  ? read_input_text(v, &p->prompts[i], param, e)
                 : json_is_array(v) ? read_input_ids(v, &p->prompts[i], param, e)
                                    : srv_bad(e, "input", "'%s' must be a string or a list of token ids, not %s",
                                                 param, srv_json_type_name(v));
        if (rc) return rc;
    }
    return 0;
}

static int read_embed_body(json_t *root, srv_params *p, srv_error *e) {
    json_t *v = json_object_get(root, "model");
    if ((v && !json_is_null(v))) {
        if (!json_is_string(v)) return srv_bad(e, "model", "'model' must be a string, not %s", srv_json_type_name(v));
        if (!(p->model = strndup(json_string_value(v), json_string_length(v)))) return oom(e);
    }
    v = json_object_get(root, "encoding_format");
    if ((v && !json_is_null(v))) {
        const char *f = json_string_value(v);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return srv_bad(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        p->embd_base64 = !strcmp(f, "base64");
    }
    v = json_object_get(root, "dimensions");
    if ((v && !json_is_null(v))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return srv_bad(e, "dimensions", "'dimensions' must be an integer >= 1");
        p->dimensions = json_integer_value(v);
    }
    v = json_object_get(root, "user");
    if ((v && !json_is_null(v)) && !json_is_string(v))
        return srv_bad(e, "user", "'user' must be a string, not %s", srv_json_type_name(v));
    return read_inputs(json_object_get(root, "input"), p, e);
}

int srv_parse_embeddings(json_t *root, srv_params *p, srv_error *e) {
    memset(p, 0, sizeof *p);
    p->route = SRV_ROUTE_EMBEDDINGS;
    p->n = 1;
    p->max_tokens = -1;
    p->logprobs = -1;
    p->sp = rf_sampler_default_params();
    int rc = read_embed_body(root, p, e);
    if (rc) srv_params_free(p);
    return rc;
}

/* ---- engine requests ---------------------------------------------------------------------- */
static int prepare_one(rf_engine *eng, int32_t n_ctx, rf_pooling pooling, const srv_prompt *sp, const char *pp,
                       rf_request **out, int32_t *n_prompt, srv_error *e) {
    rf_request *r = *out = rf_request_new();
    if (!r) return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while preparing the request");
    int32_t nv = rf_engine_n_vocab(eng);
    for (size_t k = 0; k < sp->n_ids; k++)
        if (sp->ids[k] < 0 || sp->ids[k] >= nv)
            return srv_fail(e, 400, "invalid_request_error", NULL, "input",
                            "token id %d at index %zu of '%s' is outside the vocabulary [0, %d)", sp->ids[k], k, pp, nv);
    rf_status st = rf_request_set(r, RF_REQ_EMBED, (double)pooling);
    if (!st) st = sp->text ? rf_request_set_prompt_text(r, sp->text, sp->len) : rf_request_set_prompt_ids(r, sp->ids, sp->n_ids);
    if (st) return srv_fail(e, 503, "server_error", NULL, NULL, "preparing '%s': %s", pp, rf_last_error());
    int32_t np = 0;
    st = rf_engine_prompt_tokens(eng, r, &np);
    if ((st == RF_ERR_RANGE && np > n_ctx) || (!st && np > n_ctx))
        return srv_fail(e, 400, "invalid_request_error", "context_length_exceeded", "input",
                        "This model's maximum context length is %d tokens. However, '%s' has %s%d tokens. Please "
                        "reduce the length of the input.", n_ctx, pp, st ? "more than " : "", st ? np - 1 : np);
    if (st) return srv_fail(e, 400, "invalid_request_error", NULL, "input", "'%s': %s", pp, rf_last_error());
    if (np <= 0) return srv_fail(e, 400, "invalid_request_error", NULL, "input", "'%s' has no tokens", pp);
    *n_prompt = np;
    return 0;
}

int srv_embed_prepare(rf_engine *eng, int32_t n_ctx, rf_pooling pooling, int32_t n_embd, const srv_params *p,
                      srv_prepared *out, srv_error *e) {
    memset(out, 0, sizeof *out);
    if (pooling == RF_POOLING_NONE)
        return srv_fail(e, 400, "invalid_request_error", "model_not_supported", "model",
                        "this model cannot give embeddings: its pooling type (the file's <arch>.pooling_type) is "
                        "not mean, cls or last");
    if (p->dimensions && p->dimensions != n_embd)
        return srv_fail(e, 400, "invalid_request_error", NULL, "dimensions",
                        "'dimensions' is %lld but this model's embeddings have %d (no other size is offered)",
                        (long long)p->dimensions, n_embd);
    int n = (int)p->n_prompts;
    if (n < 1) return srv_fail(e, 400, "invalid_request_error", NULL, "input", "the request has no input");
    if (srv_prepared_alloc(out, n, e)) return -1;
    out->max_tokens = 0;
    char pp[32];
    for (int i = 0; i < n; i++) {
        snprintf(pp, sizeof pp, n > 1 ? "input[%d]" : "input", i);
        if (prepare_one(eng, n_ctx, pooling, &p->prompts[i], pp, &out->reqs[i], &out->n_prompt[i], e)) {
            srv_prepared_free(out);
            return -1;
        }
    }
    return 0;
}

/* ---- the vector ---------------------------------------------------------------------------- */

json_t *srv_embedding_json(const float *v, int32_t n, bool base64) {
    if (!base64) {
        json_t *a = json_array();
        for (int32_t i = 0; a && i < n; i++)
            if (json_array_append_new(a, json_real((double)v[i]))) {
                json_decref(a);
                return NULL;
            }
        return a;
    }
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = (size_t)n * 4, no = (nb + 2) / 3 * 4;
    unsigned char *b = malloc(nb ? nb : 1);
    char *o = malloc(no + 1);
    if (!b || !o) {
        free(b);
        free(o);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) { /* little-endian float32, whatever the host */
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[(size_t)i * 4 + k] = (unsigned char)(u >> (8 * k));
    }
    size_t w = 0;
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < nb ? b[i + 2] : 0);
        o[w++] = tab[x >> 18 & 63];
        o[w++] = tab[x >> 12 & 63];
        o[w++] = i + 1 < nb ? tab[x >> 6 & 63] : '=';
        o[w++] = i + 2 < nb ? tab[x & 63] : '=';
    }
    o[w] = 0;
    json_t *s = json_stringn(o, w);
    free(b);
    free(o);
    return s;
}
