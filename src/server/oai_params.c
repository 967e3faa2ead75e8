/* oai_params.c — the lifetimes of what every route's parser and preparation fill (oai.h): the
 * checked parameters (srv_params) freed, the engine requests of a body (srv_prepared) made room
 * for and freed. */
#include <stdlib.h>
#include <string.h>

#include "oai.h"

void srv_params_free(srv_params *p) {
    if (!p) return;
    free(p->model);
    free(p->instructions);
    for (size_t i = 0; i < p->n_msgs; i++) {
        free(p->msgs[i].role);
        free(p->msgs[i].content);
    }
    free(p->msgs);
    if (p->prompts)
        for (size_t i = 0; i < p->n_prompts; i++) {
            free(p->prompts[i].text);
            free(p->prompts[i].ids);
        }
    free(p->prompts);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->messages_json);
    free(p->tools_json);
    free(p->tmpl_vars_json);
    free(p->prompt_ids);
    rf_grammar_unref(p->grammar);
    memset(p, 0, sizeof *p);
}

/* Room for n engine requests and their prompt lengths in out; -1 (a 503 in e) when out of memory. */
int srv_prepared_alloc(srv_prepared *out, int n, srv_error *e) {
    out->reqs = calloc((size_t)n, sizeof *out->reqs);
    out->n_prompt = calloc((size_t)n, sizeof *out->n_prompt);
    if (!out->reqs || !out->n_prompt) {
        srv_prepared_free(out);
        return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while preparing the request");
    }
    out->n = n;
    return 0;
}

void srv_prepared_free(srv_prepared *pr) {
    if (!pr) return;
    for (int i = 0; i < pr->n; i++) rf_request_free(pr->reqs ? pr->reqs[i] : NULL);
    free(pr->reqs);
    free(pr->n_prompt);
    memset(pr, 0, sizeof *pr);
}
