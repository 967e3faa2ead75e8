/* server_out_embeddings.c — the answer of POST /v1/embeddings: each input's vector (from its DONE
 * event) in input order, as numbers or base64, the model name and the prompt tokens used. */
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

void srv_embed_consume(srv_req *r, srv_choice *ch, const srv_event *e) {
    if (!e->embd || e->n_embd <= 0) {
        srv_set_error(r, 503, "server_error", NULL, "the engine gave no embedding for an input");
        return;
    }
    free(ch->embd);
    ch->embd = malloc((size_t)e->n_embd * sizeof(float));
    if (!ch->embd) {
        ch->n_embd = 0;
        srv_set_error(r, 503, "server_error", NULL, "out of memory while collecting the response");
        return;
    }
    memcpy(ch->embd, e->embd, (size_t)e->n_embd * sizeof(float));
    ch->n_embd = e->n_embd;
    ch->finish = e->finish;
}

json_t *srv_embeddings_final_json(srv_req *r) {
    json_t *o = json_object(), *data = json_array();
    if (!o || !data) {
        json_decref(o);
        json_decref(data);
        return NULL;
    }
    json_object_set_new(o, "object", json_string("list"));
    for (int i = 0; i < r->n_choices; i++) {
        json_t *v = srv_embedding_json(r->ch[i].embd, r->ch[i].n_embd, r->p.embd_base64);
        json_t *d = v ? json_object() : NULL;
        if (!d || json_object_set_new(d, "embedding", v) || json_array_append_new(data, d)) {
            if (!d) json_decref(v);
            json_decref(data);
            json_decref(o);
            return NULL;
        }
        json_object_set_new(d, "object", json_string("embedding"));
        json_object_set_new(d, "index", json_integer(i));
    }
    json_object_set_new(o, "data", data);
    /* the server's name for its model (--alias or the file name), as the chat answers give it */
    json_object_set_new(o, "model", srv_json_bytes(r->s->alias, strlen(r->s->alias)));
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(r->u_prompt));
    json_object_set_new(u, "total_tokens", json_integer(r->u_prompt));
    json_object_set_new(o, "usage", u);
    return o;
}
