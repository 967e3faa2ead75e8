/* oai_request.c — a request body to engine requests (oai.h; the errors in oai_error.c): the
 * route of a path, the parser chosen by route (Anthropic Messages and OpenAI Responses bodies
 * through their translators, which come back here as chat bodies; /v1/embeddings: oai_embed.c),
 * the body loaded as a JSON object (every route's parser), OpenAI's chat and completions bodies
 * to checked parameters, the chat prompt rendered through the model's template and tokenized,
 * and the engine requests built with the prompt counted against the context. Every field is
 * checked for its JSON type and range here, so that what reaches the engine is valid and a bad
 * request is a 400 naming the field; the fuzz target runs the parsers on random bodies. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"
#include "tool_calls.h"

/* ---- routes ------------------------------------------------------------------------------- */

srv_route srv_route_of(const char *path) {
    if (!path) return SRV_ROUTE_NONE;
    size_t n = strcspn(path, "?");
    static const struct {
        const char *path;
        srv_route r;
    } tab[] = {
        {"/health", SRV_ROUTE_HEALTH},
        {"/v1/health", SRV_ROUTE_HEALTH},
        {"/v1/models", SRV_ROUTE_MODELS},
        {"/models", SRV_ROUTE_MODELS},
        {"/metrics", SRV_ROUTE_METRICS},
        {"/v1/chat/completions", SRV_ROUTE_CHAT},
        {"/chat/completions", SRV_ROUTE_CHAT},
        {"/v1/completions", SRV_ROUTE_COMPLETIONS},
        {"/completions", SRV_ROUTE_COMPLETIONS},
        {"/v1/messages", SRV_ROUTE_MESSAGES},
        {"/v1/responses", SRV_ROUTE_RESPONSES},
        {"/responses", SRV_ROUTE_RESPONSES},
        {"/tokenize", SRV_ROUTE_TOKENIZE},
        {"/detokenize", SRV_ROUTE_DETOKENIZE},
        {"/v1/embeddings", SRV_ROUTE_EMBEDDINGS},
        {"/embeddings", SRV_ROUTE_EMBEDDINGS},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strlen(tab[i].path) == n && !memcmp(tab[i].path, path, n)) return tab[i].r;
    return SRV_ROUTE_NONE;
}

bool srv_route_allows(srv_route r, const char *method, const char **allow) {
    bool post = r == SRV_ROUTE_CHAT || r == SRV_ROUTE_COMPLETIONS || r == SRV_ROUTE_MESSAGES || r == SRV_ROUTE_RESPONSES ||
                r == SRV_ROUTE_TOKENIZE || r == SRV_ROUTE_DETOKENIZE || r == SRV_ROUTE_EMBEDDINGS;
    if (allow) *allow = post ? "POST" : "GET, HEAD";
    if (!method) return false;
    if (post) return !strcmp(method, "POST");
    return !strcmp(method, "GET") || !strcmp(method, "HEAD");
}

const char *srv_route_name(srv_route r) {
    switch (r) {
    case SRV_ROUTE_HEALTH: return "health";
    case SRV_ROUTE_MODELS: return "models";
    case SRV_ROUTE_METRICS: return "metrics";
    case SRV_ROUTE_CHAT: return "chat";
    case SRV_ROUTE_COMPLETIONS: return "completions";
    case SRV_ROUTE_MESSAGES: return "messages";
    case SRV_ROUTE_RESPONSES: return "responses";
    case SRV_ROUTE_TOKENIZE: return "tokenize";
    case SRV_ROUTE_DETOKENIZE: return "detokenize";
    case SRV_ROUTE_EMBEDDINGS: return "embeddings";
    default: return "other";
    }
}

/* ---- the body ----------------------------------------------------------------------------- */

json_t *srv_body_object(const char *body, size_t len, srv_error *e) {
    if (!body || len == 0) {
        srv_bad(e, NULL, "the request body is empty (expected a JSON object)");
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root) {
        if (strstr(jerr.text, "NUL") || strstr(jerr.text, "\\u0000"))
            srv_bad(e, NULL, "invalid JSON: strings may not hold \\u0000 (line %d, column %d)", jerr.line, jerr.column);
        else
            srv_bad(e, NULL, "invalid JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        srv_bad(e, NULL, "the request body must be a JSON object, not %s", srv_json_type_name(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- field readers: absent or null = keep the default ------------------------------------- */

static int get_bool(json_t *o, const char *key, bool *out, srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return srv_bad(e, key, "'%s' must be a boolean, not %s", key, srv_json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int get_num(json_t *o, const char *key, double lo, double hi, double *out, srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return srv_bad(e, key, "'%s' must be a number, not %s", key, srv_json_type_name(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return srv_bad(e, key, "'%s' must be in [%g, %g] (got %g)", key, lo, hi, d);
    *out = d;
    return 0;
}

/* An integer (a JSON integer, or a number with no fraction) in [lo, hi]. */
static int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *given, srv_error *e) {
    json_t *v = json_object_get(o, key);
    if (given) *given = false;
    if (!v || json_is_null(v)) return 0;
    int64_t x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || !(d >= -9.2e18 && d <= 9.2e18))
            return srv_bad(e, key, "'%s' must be an integer (got %g)", key, d);
        x = (int64_t)d;
    } else {
        return srv_bad(e, key, "'%s' must be an integer, not %s", key, srv_json_type_name(v));
    }
    if (x < lo || x > hi) return srv_bad(e, key, "'%s' must be in [%lld, %lld] (got %lld)", key, (long long)lo, (long long)hi, (long long)x);
    *out = x;
    if (given) *given = true;
    return 0;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static int oom(srv_error *e) {
    return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while reading the request");
}

/* ---- chat messages ------------------------------------------------------------------------ */

/* content: a string, or a list of parts {"type": "text", "text": "..."} joined with "\n". */
static int read_content(json_t *c, const char *param, bool null_ok, char **out, srv_error *e) {
    if (!c || json_is_null(c)) {
        if (!null_ok) return srv_bad(e, param, "'%s' is required (a string or a list of text parts)", param);
        *out = dup_n("", 0);
        return *out ? 0 : oom(e);
    }
    if (json_is_string(c)) {
        *out = dup_n(json_string_value(c), json_string_length(c));
        return *out ? 0 : oom(e);
    }
    if (!json_is_array(c))
        return srv_bad(e, param, "'%s' must be a string or a list of text parts, not %s", param, srv_json_type_name(c));
    srv_buf b = {0};
    size_t i;
    json_t *part;
    char pp[128];
    json_array_foreach(c, i, part) {
        snprintf(pp, sizeof pp, "%s[%zu]", param, i);
        if (json_is_string(part)) { /* a bare string part: accepted as text */
            if (i) srv_buf_add(&b, "\n", 1);
            srv_buf_add(&b, json_string_value(part), json_string_length(part));
            continue;
        }
        if (!json_is_object(part)) {
            srv_buf_free(&b);
            return srv_bad(e, pp, "'%s' must be an object {\"type\": \"text\", \"text\": ...}, not %s", pp, srv_json_type_name(part));
        }
        json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
        if (!json_is_string(ty)) {
            srv_buf_free(&b);
            return srv_bad(e, pp, "'%s.type' must be a string", pp);
        }
        if (strcmp(json_string_value(ty), "text")) {
            srv_buf_free(&b);
            return srv_bad(e, pp, "content parts of type '%.40s' are not supported (only 'text')", json_string_value(ty));
        }
        if (!json_is_string(tx)) {
            srv_buf_free(&b);
            return srv_bad(e, pp, "'%s.text' must be a string", pp);
        }
        if (i) srv_buf_add(&b, "\n", 1);
        srv_buf_add(&b, json_string_value(tx), json_string_length(tx));
    }
    srv_buf_add(&b, "", 1); /* NUL */
    if (b.oom) {
        srv_buf_free(&b);
        return oom(e);
    }
    *out = b.p;
    return 0;
}

static int read_messages(json_t *root, srv_params *p, srv_error *e) {
    json_t *ms = json_object_get(root, "messages");
    if (!ms || json_is_null(ms)) return srv_bad(e, "messages", "'messages' is required");
    if (!json_is_array(ms)) return srv_bad(e, "messages", "'messages' must be an array, not %s", srv_json_type_name(ms));
    size_t n = json_array_size(ms);
    if (n == 0) return srv_bad(e, "messages", "'messages' must not be empty");
    if (n > SRV_MAX_MESSAGES) return srv_bad(e, "messages", "'messages' has %zu entries; at most %d", n, SRV_MAX_MESSAGES);
    p->msgs = calloc(n, sizeof *p->msgs);
    if (!p->msgs) return oom(e);
    char pp[64];
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(ms, i);
        snprintf(pp, sizeof pp, "messages[%zu]", i);
        if (!json_is_object(m)) return srv_bad(e, pp, "'%s' must be an object, not %s", pp, srv_json_type_name(m));
        json_t *ro = json_object_get(m, "role");
        snprintf(pp, sizeof pp, "messages[%zu].role", i);
        if (!ro || json_is_null(ro)) return srv_bad(e, pp, "'%s' is required", pp);
        if (!json_is_string(ro)) return srv_bad(e, pp, "'%s' must be a string, not %s", pp, srv_json_type_name(ro));
        const char *r = json_string_value(ro);
        const char *role;
        if (!strcmp(r, "system") || !strcmp(r, "developer")) role = "system";
        else if (!strcmp(r, "user")) role = "user";
        else if (!strcmp(r, "assistant")) role = "assistant";
        else if (!strcmp(r, "tool")) role = "tool"; /* tool results (oai_tools.c reads the rest) */
        else if (!strcmp(r, "function"))
            return srv_bad(e, pp, "'%s': role 'function' (the deprecated function calling) is not supported; use 'tool'", pp);
        else
            return srv_bad(e, pp, "'%s': unknown role '%.40s' (expected system, user, assistant, tool or developer)", pp, r);
        snprintf(pp, sizeof pp, "messages[%zu].content", i);
        if (read_content(json_object_get(m, "content"), pp, role[0] == 'a' /* assistant: may be null */, &p->msgs[i].content, e)) return -1;
        p->n_msgs = i + 1;
        if (!(p->msgs[i].role = dup_n(role, strlen(role)))) return oom(e);
    }
    return 0;
}

/* ---- completion prompts ------------------------------------------------------------------- */

static int read_ids(json_t *a, const char *param, srv_prompt *out, srv_error *e) {
    size_t n = json_array_size(a);
    if (n == 0) return srv_bad(e, param, "'%s' is an empty list of token ids", param);
    out->ids = malloc(n * sizeof(int32_t));
    if (!out->ids) return oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v))
            return srv_bad(e, param, "'%s'[%zu] must be a token id (an integer), not %s", param, i, srv_json_type_name(v));
        json_int_t x = json_integer_value(v);
        if (x < 0 || x > INT32_MAX) return srv_bad(e, param, "'%s'[%zu] = %lld is not a token id", param, i, (long long)x);
        out->ids[i] = (int32_t)x;
    }
    out->n_ids = n;
    return 0;
}

static int read_prompts(json_t *root, srv_params *p, srv_error *e) {
    json_t *pr = json_object_get(root, "prompt");
    if (!pr || json_is_null(pr)) return srv_bad(e, "prompt", "'prompt' is required");
    if (json_is_string(pr)) {
        p->prompts = calloc(1, sizeof *p->prompts);
        if (!p->prompts) return oom(e);
        p->n_prompts = 1;
        if (!(p->prompts[0].text = dup_n(json_string_value(pr), json_string_length(pr)))) return oom(e);
        p->prompts[0].len = json_string_length(pr);
        return 0;
    }
    if (!json_is_array(pr))
        return srv_bad(e, "prompt", "'prompt' must be a string, a list of strings or a list of token ids, not %s", srv_json_type_name(pr));
    size_t n = json_array_size(pr);
    if (n == 0) return srv_bad(e, "prompt", "'prompt' must not be an empty list");
    json_t *first = json_array_get(pr, 0);
    if (json_is_integer(first)) { /* one prompt of token ids */
        p->prompts = calloc(1, sizeof *p->prompts);
        if (!p->prompts) return oom(e);
        p->n_prompts = 1;
        return read_ids(pr, "prompt", &p->prompts[0], e);
    }
    if (n > SRV_MAX_PROMPTS) return srv_bad(e, "prompt", "'prompt' holds %zu prompts; at most %d per request", n, SRV_MAX_PROMPTS);
    p->prompts = calloc(n, sizeof *p->prompts);
    if (!p->prompts) return oom(e);
    p->n_prompts = n;
    char pp[64];
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(pr, i);
        snprintf(pp, sizeof pp, "prompt[%zu]", i);
        if (json_is_string(v)) {
            if (!(p->prompts[i].text = dup_n(json_string_value(v), json_string_length(v)))) return oom(e);
            p->prompts[i].len = json_string_length(v);
        } else if (json_is_array(v)) {
            if (read_ids(v, pp, &p->prompts[i], e)) return -1;
        } else {
            return srv_bad(e, pp, "'%s' must be a string or a list of token ids, not %s", pp, srv_json_type_name(v));
        }
    }
    return 0;
}

/* ---- the request -------------------------------------------------------------------------- */

static int read_stop(json_t *root, srv_params *p, srv_error *e) {
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s)) return 0;
    if (json_is_string(s)) {
        if (json_string_length(s) == 0) return 0; /* matches nothing */
        if (!(p->stop[0] = dup_n(json_string_value(s), json_string_length(s)))) return oom(e);
        p->stop_len[0] = json_string_length(s);
        p->n_stop = 1;
        return 0;
    }
    if (!json_is_array(s)) return srv_bad(e, "stop", "'stop' must be a string or a list of strings, not %s", srv_json_type_name(s));
    if (json_array_size(s) > SRV_MAX_STOP)
        return srv_bad(e, "stop", "'stop' has %zu strings; at most %d", json_array_size(s), SRV_MAX_STOP);
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v) {
        if (!json_is_string(v)) return srv_bad(e, "stop", "'stop'[%zu] must be a string, not %s", i, srv_json_type_name(v));
        if (json_string_length(v) == 0) continue;
        if (!(p->stop[p->n_stop] = dup_n(json_string_value(v), json_string_length(v)))) return oom(e);
        p->stop_len[p->n_stop++] = json_string_length(v);
    }
    return 0;
}

/* Fields that would change the output and that this server cannot honour: refused, not dropped. */
static int refuse_unsupported(json_t *root, srv_params *p, srv_error *e) {
    json_t *v;
    if ((v = json_object_get(root, "logit_bias")) && !json_is_null(v)) {
        if (!json_is_object(v)) return srv_bad(e, "logit_bias", "'logit_bias' must be an object, not %s", srv_json_type_name(v));
        if (json_object_size(v)) return srv_bad(e, "logit_bias", "'logit_bias' is not supported by this server");
    }
    if (p->route == SRV_ROUTE_COMPLETIONS && (v = json_object_get(root, "tools")) && !json_is_null(v) &&
        !(json_is_array(v) && !json_array_size(v)))
        return srv_bad(e, "tools", "'tools' needs /v1/chat/completions");
    if ((v = json_object_get(root, "functions")) && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
        return srv_bad(e, "functions", "'functions' (function calling) is not supported by this server");
    if (srv_read_structured(root, p, e)) return -1; /* response_format, grammar (oai_structured.c) */
    if (p->route == SRV_ROUTE_COMPLETIONS) {
        if ((v = json_object_get(root, "suffix")) && !json_is_null(v)) {
            if (!json_is_string(v)) return srv_bad(e, "suffix", "'suffix' must be a string, not %s", srv_json_type_name(v));
            if (json_string_length(v)) return srv_bad(e, "suffix", "'suffix' (insertion) is not supported by this server");
        }
        int64_t best_of = 1;
        bool given;
        if (get_int(root, "best_of", 1, SRV_MAX_N, &best_of, &given, e)) return -1;
        if (given && best_of > p->n) return srv_bad(e, "best_of", "'best_of' > n is not supported by this server (best_of %lld, n %d)", (long long)best_of, p->n);
    }
    return 0;
}

/* The sampling fields into p->sp (defaults already there). */
static int parse_sampling(json_t *root, srv_params *p, srv_error *e) {
    double temperature = p->sp.temperature, top_p = p->sp.top_p, min_p = p->sp.min_p;
    double presence = p->sp.presence_penalty, frequency = p->sp.frequency_penalty, rep = p->sp.repeat_penalty;
    if (get_num(root, "temperature", 0, 2, &temperature, e)) return -1;
    if (get_num(root, "top_p", 0, 1, &top_p, e)) return -1;
    if (get_num(root, "min_p", 0, 1, &min_p, e)) return -1;
    int64_t k = 0;
    bool given;
    if (get_int(root, "top_k", -1, INT32_MAX, &k, &given, e)) return -1;
    if (given) p->sp.top_k = k > 0 ? (int32_t)k : 0; /* -1 and 0: off */
    if (get_num(root, "presence_penalty", -2, 2, &presence, e)) return -1;
    if (get_num(root, "frequency_penalty", -2, 2, &frequency, e)) return -1;
    json_t *v = json_object_get(root, "repetition_penalty");
    if (v && !json_is_null(v)) {
        if (get_num(root, "repetition_penalty", 0, 100, &rep, e)) return -1;
        if (rep <= 0) return srv_bad(e, "repetition_penalty", "'repetition_penalty' must be > 0 (got %g)", rep);
    }
    int64_t seed;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &p->has_seed, e)) return -1;
    if (p->has_seed) p->sp.seed = (uint64_t)seed;
    p->sp.temperature = (float)temperature;
    p->sp.top_p = (float)top_p;
    p->sp.min_p = (float)min_p;
    p->sp.presence_penalty = (float)presence;
    p->sp.frequency_penalty = (float)frequency;
    p->sp.repeat_penalty = (float)rep;
    return 0;
}

int srv_parse_openai(srv_route route, const char *body, size_t len, srv_params *p, srv_error *e) {
    memset(p, 0, sizeof *p);
    p->route = route;
    p->max_tokens = -1;
    /* OpenAI's defaults: temperature 1, top_p 1, no top_k / min_p, no penalties (over the last
     * 64 tokens when asked for) */
    p->sp = rf_sampler_default_params();
    p->sp.temperature = 1.0f;
    p->sp.top_p = 1.0f;
    p->sp.top_k = 0;
    p->sp.min_p = 0.0f;
    p->sp.repeat_penalty = 1.0f;
    p->sp.repeat_last_n = 64;
    p->n = 1;
    p->logprobs = -1;
    if (route != SRV_ROUTE_CHAT && route != SRV_ROUTE_COMPLETIONS)
        return srv_fail(e, 404, "not_found_error", NULL, NULL, "no such route");
    json_t *root = srv_body_object(body, len, e);
    if (!root) {
        srv_params_free(p);
        return -1;
    }
    int rc = -1;
    json_t *v = json_object_get(root, "model");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) {
            srv_bad(e, "model", "'model' must be a string, not %s", srv_json_type_name(v));
            goto out;
        }
        if (!(p->model = dup_n(json_string_value(v), json_string_length(v)))) {
            oom(e);
            goto out;
        }
    }
    if (route == SRV_ROUTE_CHAT ? read_messages(root, p, e) : read_prompts(root, p, e)) goto out;

    if (get_bool(root, "stream", &p->stream, e)) goto out;
    /* chat messages never become special tokens (the template's markup alone does) */
    if (route == SRV_ROUTE_COMPLETIONS && get_bool(root, "parse_special", &p->parse_special, e)) goto out;
    v = json_object_get(root, "stream_options");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v)) {
            srv_bad(e, "stream_options", "'stream_options' must be an object, not %s", srv_json_type_name(v));
            goto out;
        }
        json_t *iu = json_object_get(v, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu)) {
            srv_bad(e, "stream_options.include_usage", "'stream_options.include_usage' must be a boolean, not %s", srv_json_type_name(iu));
            goto out;
        }
        p->include_usage = json_is_true(iu);
    }
    /* max_completion_tokens (chat's current name) wins over max_tokens */
    int64_t mt;
    bool given;
    int64_t mt_lo = route == SRV_ROUTE_CHAT ? 1 : 0;
    if (get_int(root, "max_tokens", mt_lo, INT32_MAX, &mt, &given, e)) goto out;
    if (given) p->max_tokens = mt;
    if (get_int(root, "max_completion_tokens", mt_lo, INT32_MAX, &mt, &given, e)) goto out;
    if (given) p->max_tokens = mt;
    if (parse_sampling(root, p, e)) goto out;
    int64_t n = 1;
    if (get_int(root, "n", 1, SRV_MAX_N, &n, NULL, e)) goto out;
    p->n = (int32_t)n;
    if (get_bool(root, "ignore_eos", &p->ignore_eos, e)) goto out;
    if (read_stop(root, p, e)) goto out;

    if (route == SRV_ROUTE_CHAT) {
        bool lp = false;
        if (get_bool(root, "logprobs", &lp, e)) goto out;
        int64_t top = 0;
        if (get_int(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top, &given, e)) goto out;
        if (given && !lp) {
            srv_bad(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
            goto out;
        }
        p->logprobs = lp ? (int32_t)top : -1;
    } else {
        int64_t lp = -1;
        v = json_object_get(root, "logprobs");
        if (json_is_boolean(v)) { /* a chat-style boolean on the completions route: be lenient */
            p->logprobs = json_is_true(v) ? 0 : -1;
        } else {
            if (get_int(root, "logprobs", 0, SRV_MAX_TOP_LOGPROBS, &lp, &given, e)) goto out;
            if (given) p->logprobs = (int32_t)lp;
        }
        if (get_bool(root, "echo", &p->echo, e)) goto out;
        if (p->echo && p->logprobs >= 0) {
            srv_bad(e, "echo", "'echo' together with 'logprobs' is not supported (prompt log-probabilities are not computed)");
            goto out;
        }
    }
    if (refuse_unsupported(root, p, e)) goto out;
    if (route == SRV_ROUTE_CHAT && srv_read_chat_extras(root, p, e)) goto out;
    rc = 0;
out:
    json_decref(root);
    if (rc) srv_params_free(p);
    return rc;
}

/* ---- the parser by route: the other API shapes translated into chat bodies, then parsed as
 * chat; /v1/embeddings read by oai_embed.c ---------------------------------------------------- */

/* A Messages or Responses body: loaded, translated by its translator (oai_messages.c,
 * oai_responses.c) into a new chat body, then parsed as chat with the API set. */
static int parse_translated(srv_route route, const char *body, size_t len, srv_params *p, srv_error *e) {
    memset(p, 0, sizeof *p);
    json_t *root = srv_body_object(body, len, e);
    if (!root) return -1;
    json_t *chat = json_object();
    char *ins = NULL;
    int rc = !chat                         ? oom(e)
             : route == SRV_ROUTE_MESSAGES ? srv_messages_to_chat(root, chat, e)
                                           : srv_responses_to_chat(root, chat, &ins, e);
    json_decref(root);
    if (rc) {
        json_decref(chat);
        free(ins);
        return -1;
    }
    char *s = json_dumps(chat, JSON_COMPACT);
    json_decref(chat);
    if (!s) {
        free(ins);
        return oom(e);
    }
    rc = srv_parse_openai(SRV_ROUTE_CHAT, s, strlen(s), p, e);
    free(s);
    if (rc) {
        free(ins);
        return -1;
    }
    p->api = route == SRV_ROUTE_MESSAGES ? SRV_API_MESSAGES : SRV_API_RESPONSES;
    p->instructions = ins;
    return 0;
}

int srv_parse_request(srv_route route, const char *body, size_t len, srv_params *p, srv_error *e) {
    if (route == SRV_ROUTE_MESSAGES || route == SRV_ROUTE_RESPONSES) return parse_translated(route, body, len, p, e);
    if (route == SRV_ROUTE_EMBEDDINGS) {
        memset(p, 0, sizeof *p);
        json_t *root = srv_body_object(body, len, e);
        if (!root) return -1;
        int rc = srv_parse_embeddings(root, p, e);
        json_decref(root);
        return rc;
    }
    return srv_parse_openai(route, body, len, p, e);
}

/* ---- the chat prompt: rendered by the server (not the engine) because it carries more than
 * roles and texts: tools, assistant tool calls, tool results, reasoning and template variables.
 * Tokenized as the engine tokenizes chat messages (only the template's own markup becomes
 * special tokens); also decides how the answer will be parsed. ---------------------------- */

int srv_chat_render(const rf_model *m, int32_t n_ctx, srv_params *p, srv_error *e) {
    const rf_chat_template *t = m ? rf_model_chat_template(m) : NULL;
    if (!t || !p->n_msgs) return 0; /* the engine reports a model without a template */
    const char *src = NULL;
    const rf_gguf *g = rf_model_gguf(m);
    if (!g || rf_gguf_get_str(g, "tokenizer.chat_template", &src)) src = NULL;
    rf_clear_error();
    if (rf_chat_template_is_fallback(t)) src = NULL;
    bool thinks = false;
    srv_tool_syntax syn = srv_tool_syntax_detect(src, &thinks);
    if (!src) { /* a built-in family template: its family's tool syntax */
        const char *arch = NULL;
        if (g && rf_gguf_get_str(g, "general.architecture", &arch)) arch = NULL;
        rf_clear_error();
        syn = srv_tool_syntax_detect(rf_chat_family_template(rf_chat_family_detect(NULL, arch, g)), &thinks);
    }
    bool harmony = syn == SRV_SYNTAX_HARMONY;
    bool inject = p->tools_json && (!src || !strstr(src, "tools")) && syn != SRV_SYNTAX_HARMONY;
    if (inject && syn == SRV_SYNTAX_NONE) syn = SRV_SYNTAX_HERMES; /* the format the injected text asks for */
    bool inline_calls = !src || !strstr(src, "tool_calls");
    bool sys_field = src && strstr(src, "message['tools']");
    /* roles and texts only: rendered from p->msgs as the engine would */
    char *msgs = NULL;
    rf_chat_msg *plain = NULL;
    if (p->messages_json) {
        msgs = srv_adjust_messages(p, harmony, inject, inline_calls, sys_field);
        if (!msgs) return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while rendering the chat template");
    } else {
        plain = malloc(p->n_msgs * sizeof *plain);
        if (!plain) return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while rendering the chat template");
        for (size_t i = 0; i < p->n_msgs; i++) plain[i] = (rf_chat_msg){p->msgs[i].role, p->msgs[i].content};
    }
    rf_chat_render_opts ro = {0};
    ro.add_generation_prompt = true;
    ro.messages_json = msgs;
    ro.tools_json = inject ? NULL : p->tools_json;
    ro.extra_json = p->tmpl_vars_json;
    char *text = NULL;
    rf_text_span *data = NULL;
    size_t nd = 0;
    rf_status st = rf_chat_template_render_data(t, plain, plain ? p->n_msgs : 0, &ro, &text, &data, &nd);
    free(msgs);
    free(plain);
    if (st) {
        if (st == RF_ERR_OOM) return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while rendering the chat template");
        return srv_fail(e, 400, "invalid_request_error", NULL, "messages", "the model's chat template refused the request: %s",
                        rf_last_error());
    }
    size_t len = strlen(text);
    const rf_vocab *v = rf_model_vocab(m);
    rf_tokenize_opts o = {.parse_special = true, .plain = data, .n_plain = nd, .max_tokens = (size_t)n_ctx};
    size_t cap = len + 4 < (size_t)n_ctx + 1 ? len + 4 : (size_t)n_ctx + 1, cnt = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    st = ids ? rf_tokenize_ex(v, text, len, &o, ids, cap, &cnt) : RF_ERR_OOM;
    if (st == RF_ERR_RANGE && cnt > cap && cnt <= (size_t)n_ctx) {
        int32_t *bigger = realloc(ids, cnt * sizeof *ids);
        if (bigger) {
            ids = bigger;
            st = rf_tokenize_ex(v, text, len, &o, ids, cnt, &cnt);
        } else {
            st = RF_ERR_OOM;
        }
    }
    bool opens = srv_prompt_opens_think(text, len);
    free(text);
    free(data);
    if (st) {
        free(ids);
        if (st == RF_ERR_RANGE && cnt > (size_t)n_ctx)
            return srv_fail(e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                            "This model's maximum context length is %d tokens. However, the messages have more than %d "
                            "tokens (tokenizing stopped there). Please reduce the length of the messages.",
                            n_ctx, n_ctx);
        if (st == RF_ERR_OOM) return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while tokenizing the prompt");
        return srv_fail(e, 400, "invalid_request_error", NULL, "messages", "%s", rf_last_error());
    }
    p->prompt_ids = ids;
    p->n_prompt_ids = cnt;
    p->syntax = syn;
    p->think_open = opens;
    p->thinks = thinks;
    bool tools = p->tools_json != NULL;
    bool reasoning = p->reasoning_split && (thinks || opens || harmony || p->reasoning_force);
    p->parse_output = tools || reasoning || harmony; /* harmony's answer is its final channel */
    /* the markers of these syntaxes are control tokens: the parser needs their text */
    p->render_special = harmony || (tools && (syn == SRV_SYNTAX_MISTRAL || syn == SRV_SYNTAX_LLAMA3));
    return 0;
}

/* ---- engine requests: checked parameters to requests, with the prompt counted against the
 * context before anything is queued: nothing is ever truncated. ----------------------------- */

/* An engine status from a request call as an HTTP error. */
static int engine_error(srv_error *e, rf_status st, const char *param) {
    const char *msg = rf_last_error();
    if (st == RF_ERR_OOM)
        return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while preparing the request: %s", msg);
    if (st == RF_ERR_INTERNAL || st == RF_ERR_DEVICE)
        return srv_fail(e, 500, "server_error", NULL, NULL, "%s", msg);
    return srv_fail(e, 400, "invalid_request_error", NULL, param, "%s", msg && *msg ? msg : "invalid request");
}

static rf_status set_options(rf_request *r, const srv_params *p, uint64_t seed) {
    rf_status st = RF_OK;
    rf_sampler_params sp = p->sp;
    if (!p->has_seed) sp.seed = seed;
    st = st ? st : rf_request_set_sampling(r, &sp);
    st = st ? st : rf_request_set(r, RF_REQ_IGNORE_EOS, p->ignore_eos);
    st = st ? st : rf_request_set(r, RF_REQ_N, p->n);
    st = st ? st : rf_request_set(r, RF_REQ_LOGPROBS, p->logprobs);
    st = st ? st : rf_request_set(r, RF_REQ_PARSE_SPECIAL, p->parse_special);
    for (int i = 0; i < p->n_stop && !st; i++) st = rf_request_add_stop(r, p->stop[i], p->stop_len[i]);
    if (!st && p->grammar) rf_request_set_grammar(r, p->grammar);
    return st;
}

int srv_prepare(rf_engine *eng, int32_t n_ctx, const srv_params *p, uint64_t seed, srv_prepared *out, srv_error *e) {
    memset(out, 0, sizeof *out);
    bool chat = p->route == SRV_ROUTE_CHAT;
    int n = chat ? 1 : (int)p->n_prompts;
    const char *pparam = chat ? "messages" : "prompt";
    if (n < 1) return srv_fail(e, 400, "invalid_request_error", NULL, pparam, "the request has no prompt");
    if (srv_prepared_alloc(out, n, e)) return -1;
    out->max_tokens = p->max_tokens;
    int32_t nv = rf_engine_n_vocab(eng);
    char pp[64];
    rf_grammar *tool_g = NULL; /* tool_choice required / named, enforced (oai_structured.c) */
    if (chat && srv_tool_grammar(p, &tool_g, e)) {
        srv_prepared_free(out);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        rf_request *r = out->reqs[i] = rf_request_new();
        if (r && tool_g) rf_request_set_grammar(r, tool_g);
        if (!r) {
            srv_prepared_free(out);
            rf_grammar_unref(tool_g);
            return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while preparing the request");
        }
        rf_status st = set_options(r, p, seed);
        if (st) goto fail_st;
        if (chat && p->prompt_ids) { /* rendered by srv_chat_render (tools, tool results, variables) */
            st = rf_request_set_prompt_ids(r, p->prompt_ids, p->n_prompt_ids);
            if (!st && p->render_special) st = rf_request_set(r, RF_REQ_RENDER_SPECIAL, 1);
        } else if (chat) {
            for (size_t k = 0; k < p->n_msgs && !st; k++) st = rf_request_add_message(r, p->msgs[k].role, p->msgs[k].content);
        } else if (p->prompts[i].ids) {
            const srv_prompt *sp = &p->prompts[i];
            for (size_t k = 0; k < sp->n_ids; k++)
                if (sp->ids[k] < 0 || sp->ids[k] >= nv) {
                    snprintf(pp, sizeof pp, n > 1 ? "prompt[%d]" : "prompt", i);
                    srv_fail(e, 400, "invalid_request_error", NULL, pp,
                             "token id %d at index %zu of '%s' is outside the vocabulary [0, %d)", sp->ids[k], k, pp, nv);
                    srv_prepared_free(out);
                    rf_grammar_unref(tool_g);
                    return -1;
                }
            st = rf_request_set_prompt_ids(r, sp->ids, sp->n_ids);
        } else {
            st = rf_request_set_prompt_text(r, p->prompts[i].text, p->prompts[i].len);
        }
        if (st) goto fail_st;
        int32_t np = 0;
        st = rf_engine_prompt_tokens(eng, r, &np);
        snprintf(pp, sizeof pp, n > 1 ? "%s[%d]" : "%s", pparam, i);
        if (st == RF_ERR_RANGE && np > n_ctx) {
            /* the engine stopped tokenizing once the count passed the context */
            srv_fail(e, 400, "invalid_request_error", "context_length_exceeded", pp,
                     "This model's maximum context length is %d tokens. However, the %s has more than %d tokens "
                     "(tokenizing stopped there). Please reduce the length of the %s.",
                     n_ctx, chat ? "messages" : "prompt", np - 1, chat ? "messages" : "prompt");
            srv_prepared_free(out);
            rf_grammar_unref(tool_g);
            return -1;
        }
        if (st) goto fail_st;
        out->n_prompt[i] = np;
        if (np <= 0) {
            srv_fail(e, 400, "invalid_request_error", NULL, pp, "the prompt is empty (it has no tokens)");
            srv_prepared_free(out);
            rf_grammar_unref(tool_g);
            return -1;
        }
        int64_t max = p->max_tokens;
        if (max >= 0 && (int64_t)np + max > n_ctx) {
            srv_fail(e, 400, "invalid_request_error", "context_length_exceeded", pp,
                     "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                     "(%d in the %s, %lld in the completion). Please reduce the length of the %s or max_tokens.",
                     n_ctx, (long long)(np + max), np, chat ? "messages" : "prompt", (long long)max, chat ? "messages" : "prompt");
            srv_prepared_free(out);
            rf_grammar_unref(tool_g);
            return -1;
        }
        if (max < 0) {
            if (np >= n_ctx) {
                srv_fail(e, 400, "invalid_request_error", "context_length_exceeded", pp,
                         "This model's maximum context length is %d tokens. However, the %s has %d tokens, which "
                         "leaves no room for the completion. Please reduce the length of the %s.",
                         n_ctx, chat ? "messages" : "prompt", np, chat ? "messages" : "prompt");
                srv_prepared_free(out);
                rf_grammar_unref(tool_g);
                return -1;
            }
            max = n_ctx - np;
        }
        if ((st = rf_request_set(r, RF_REQ_MAX_TOKENS, (double)max))) goto fail_st;
        continue;
    fail_st:
        snprintf(pp, sizeof pp, n > 1 ? "%s[%d]" : "%s", pparam, i);
        engine_error(e, st, pp);
        srv_prepared_free(out);
        rf_grammar_unref(tool_g);
        return -1;
    }
    rf_grammar_unref(tool_g);
    return 0;
}
