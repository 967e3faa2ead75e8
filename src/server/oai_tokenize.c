/* oai_tokenize.c — llama-server's /tokenize and /detokenize on the loaded vocabulary: bodies
 * checked into srv_tok_req and answered as {"tokens": [...]} / {"content": "..."} (llama-server's
 * shapes and defaults: add_special false, parse_special true, with_pieces false, special tokens
 * rendered by /detokenize). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "oai.h"
#include "oai_translate.h"

void srv_tok_req_free(srv_tok_req *t) {
    if (!t) return;
    free(t->content);
    free(t->ids);
    memset(t, 0, sizeof *t);
}

static int get_flag(json_t *root, const char *key, bool *out, srv_error *e) {
    json_t *v = json_object_get(root, key);
    if (!srv_tr_present(v)) return 0;
    if (!json_is_boolean(v)) return srv_bad(e, key, "'%s' must be a boolean, not %s", key, srv_json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int parse_body(srv_route route, json_t *root, srv_tok_req *t, srv_error *e) {
    if (route == SRV_ROUTE_TOKENIZE) {
        if (get_flag(root, "add_special", &t->add_special, e) || get_flag(root, "parse_special", &t->parse_special, e) ||
            get_flag(root, "with_pieces", &t->with_pieces, e))
            return -1;
        json_t *c = json_object_get(root, "content");
        if (!srv_tr_present(c)) return 0; /* llama-server: no content, no tokens */
        if (!json_is_string(c)) return srv_bad(e, "content", "'content' must be a string, not %s", srv_json_type_name(c));
        t->len = json_string_length(c);
        if (!(t->content = malloc(t->len + 1))) return srv_tr_oom(e);
        memcpy(t->content, json_string_value(c), t->len + 1);
        return 0;
    }
    json_t *a = json_object_get(root, "tokens");
    if (!srv_tr_present(a)) return 0; /* llama-server: no tokens, empty content */
    if (!json_is_array(a)) return srv_bad(e, "tokens", "'tokens' must be a list of token ids, not %s", srv_json_type_name(a));
    size_t n = json_array_size(a);
    if (!n) return 0;
    if (!(t->ids = malloc(n * sizeof *t->ids))) return srv_tr_oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return srv_bad(e, "tokens", "'tokens'[%zu] must be a token id (an integer >= 0)", i);
        t->ids[i] = (int32_t)json_integer_value(v);
    }
    t->n_ids = n;
    return 0;
}

int srv_parse_tokenize(srv_route route, const char *body, size_t len, srv_tok_req *t, srv_error *e) {
    memset(t, 0, sizeof *t);
    t->parse_special = true;
    if (route != SRV_ROUTE_TOKENIZE && route != SRV_ROUTE_DETOKENIZE)
        return srv_fail(e, 404, "not_found_error", NULL, NULL, "no such route");
    json_t *root = srv_body_object(body, len, e);
    if (!root) return -1;
    int rc = parse_body(route, root, t, e);
    json_decref(root);
    if (rc) srv_tok_req_free(t);
    return rc;
}

/* A piece as llama-server writes it: a string when it is valid UTF-8, else its bytes. */
static json_t *piece_json(const char *p, size_t n) {
    json_t *s = json_stringn(p, n);
    if (s) return s;
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* The bytes of token id (special tokens rendered), malloc'd in *buf (grown as needed). */
static int piece_of(const rf_vocab *v, int32_t id, char **buf, size_t *cap, size_t *n) {
    for (;;) {
        *n = 0;
        rf_status st = rf_token_to_piece(v, id, true, *buf, *cap, n);
        if (*n <= *cap) return st ? -1 : 0;
        char *b = realloc(*buf, *n);
        if (!b) return -1;
        *buf = b;
        *cap = *n;
    }
}

static json_t *tokenize(const rf_vocab *v, const srv_tok_req *t, size_t max_tokens, srv_error *e) {
    json_t *arr = json_array();
    if (!arr) return srv_tr_oom(e), NULL;
    if (!t->content) return json_pack("{so}", "tokens", arr);
    rf_tokenize_opts o;
    memset(&o, 0, sizeof o);
    o.add_special = t->add_special;
    o.parse_special = t->parse_special;
    o.max_tokens = max_tokens;
    size_t n = 0;
    rf_status st = rf_tokenize_ex(v, t->content, t->len, &o, NULL, 0, &n);
    if (st == RF_ERR_RANGE && n > max_tokens) {
        json_decref(arr);
        srv_bad(e, "content", "'content' has more than %zu tokens (the limit of /tokenize)", max_tokens);
        return NULL;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids || (n && rf_tokenize_ex(v, t->content, t->len, &o, ids, n, &n))) {
        free(ids);
        json_decref(arr);
        srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while tokenizing");
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t->with_pieces) {
            json_array_append_new(arr, json_integer(ids[i]));
            continue;
        }
        json_t *o2 = json_object();
        json_object_set_new(o2, "id", json_integer(ids[i]));
        json_object_set_new(o2, "piece", piece_of(v, ids[i], &buf, &cap, &len) ? json_string("") : piece_json(buf, len));
        json_array_append_new(arr, o2);
    }
    free(buf);
    free(ids);
    return json_pack("{so}", "tokens", arr);
}

static json_t *detokenize(const rf_vocab *v, const srv_tok_req *t, srv_error *e) {
    int32_t nv = rf_vocab_n_tokens(v);
    srv_buf out = {0};
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (size_t i = 0; i < t->n_ids; i++) {
        if (t->ids[i] >= nv) {
            free(buf);
            srv_buf_free(&out);
            srv_bad(e, "tokens", "token id %d at index %zu is outside the vocabulary [0, %d)", t->ids[i], i, nv);
            return NULL;
        }
        if (piece_of(v, t->ids[i], &buf, &cap, &len)) len = 0;
        srv_buf_add(&out, buf, len);
    }
    free(buf);
    if (out.oom) {
        srv_buf_free(&out);
        srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while detokenizing");
        return NULL;
    }
    json_t *r = json_pack("{so}", "content", srv_json_bytes(out.p ? out.p : "", out.len));
    srv_buf_free(&out);
    return r;
}

json_t *srv_tokenize_answer(const rf_vocab *v, srv_route route, const srv_tok_req *t, size_t max_tokens, srv_error *e) {
    e->status = 0;
    json_t *r = route == SRV_ROUTE_TOKENIZE ? tokenize(v, t, max_tokens, e) : detokenize(v, t, e);
    if (!r && !e->status) srv_fail(e, 503, "server_error", NULL, NULL, "out of memory");
    return r;
}
