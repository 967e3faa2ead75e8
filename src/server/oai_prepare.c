/* oai_prepare.c — checked parameters (oai_parse.c) to engine requests, with the prompt counted
 * against the context before anything is queued: nothing is ever truncated. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"

void srv_prepared_free(srv_prepared *pr) {
    if (!pr) return;
    for (int i = 0; i < pr->n; i++) rf_request_free(pr->reqs ? pr->reqs[i] : NULL);
    free(pr->reqs);
    free(pr->n_prompt);
    memset(pr, 0, sizeof *pr);
}

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
    out->reqs = calloc((size_t)n, sizeof *out->reqs);
    out->n_prompt = calloc((size_t)n, sizeof *out->n_prompt);
    if (!out->reqs || !out->n_prompt) {
        srv_prepared_free(out);
        return srv_fail(e, 503, "server_error", NULL, NULL, "out of memory while preparing the request");
    }
    out->n = n;
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
