/* oai_translate.h — small helpers shared by the request translators of the other API shapes
 * (oai_messages.c, oai_responses.c): fields copied, the tools list walked, text parts joined,
 * chat messages appended. The body is loaded before and the chat body parsed after, by the
 * parser by route (oai_request.c). Static inline: each translator stays one file. */
#ifndef RF_SERVER_OAI_TRANSLATE_H
#define RF_SERVER_OAI_TRANSLATE_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"

static inline int srv_tr_oom(srv_error *e) {
    return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while reading the request");
}

static inline bool srv_tr_present(const json_t *v) { return v && !json_is_null(v); }

/* Copies root[from] into out[to] when present (the chat parser checks it). */
static inline void srv_tr_copy(json_t *out, const char *to, json_t *root, const char *from) {
    json_t *v = json_object_get(root, from);
    if (srv_tr_present(v)) json_object_set(out, to, v);
}

/* The fields chat takes as they are: 'model' (checked to be a string), 'stream', 'temperature',
 * 'top_p', 'top_k' (the chat parser checks the others' types and ranges). */
static inline int srv_tr_copy_sampling(json_t *root, json_t *chat, srv_error *e) {
    json_t *v = json_object_get(root, "model");
    if (srv_tr_present(v) && !json_is_string(v)) return srv_bad(e, "model", "'model' must be a string, not %s", srv_json_type_name(v));
    srv_tr_copy(chat, "model", root, "model");
    srv_tr_copy(chat, "stream", root, "stream");
    srv_tr_copy(chat, "temperature", root, "temperature");
    srv_tr_copy(chat, "top_p", root, "top_p");
    srv_tr_copy(chat, "top_k", root, "top_k");
    return 0;
}

/* Appends {"role": role, "content": content} to msgs, taking content (NULL: out of memory). */
static inline int srv_tr_add_msg(json_t *msgs, const char *role, json_t *content, srv_error *e) {
    json_t *m = json_object();
    if (!m || !content) {
        json_decref(m);
        json_decref(content);
        return srv_tr_oom(e);
    }
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", content);
    return json_array_append_new(msgs, m) ? srv_tr_oom(e) : 0;
}

/* Text parts joined in b, as a JSON string in *out; b is freed either way. */
static inline int srv_tr_take_text(srv_buf *b, json_t **out, srv_error *e) {
    if (b->oom) {
        srv_buf_free(b);
        return srv_tr_oom(e);
    }
    *out = json_stringn(b->p ? b->p : "", b->len);
    srv_buf_free(b);
    return *out ? 0 : srv_tr_oom(e);
}

/* Turns one entry of the request's 'tools' (t; ty its 'type' when t is an object; pp "tools[i]")
 * into chat's tools, appended to out. */
typedef int (*srv_tr_tool_fn)(json_t *t, json_t *ty, const char *pp, json_t *out, srv_error *e);

/* The request's 'tools' when present: a list (else refused), chat's "tools" made, each entry
 * given to one. */
static inline int srv_tr_tools(json_t *root, json_t *chat, srv_tr_tool_fn one, srv_error *e) {
    json_t *v = json_object_get(root, "tools");
    if (!srv_tr_present(v)) return 0;
    if (!json_is_array(v)) return srv_bad(e, "tools", "'tools' must be a list, not %s", srv_json_type_name(v));
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    char pp[48];
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *t = json_array_get(v, i), *ty = json_is_object(t) ? json_object_get(t, "type") : NULL;
        snprintf(pp, sizeof pp, "tools[%zu]", i);
        if (one(t, ty, pp, out, e)) return -1;
    }
    return 0;
}

#endif
