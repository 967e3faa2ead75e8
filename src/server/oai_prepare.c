/* oai_prepare.c — a request body to engine requests: the parser chosen by route (oai_parse.c's
 * OpenAI bodies; Anthropic Messages and OpenAI Responses bodies through their translators), the
 * chat prompt rendered through the model's template and tokenized, requests built with the
 * prompt counted against the context (/v1/embeddings' requests: oai_embed.c). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"
#include "tool_calls.h"

/* ---- the parser by route ------------------------------------------------------------------ */

int srv_parse_request(srv_route route, const char *body, size_t len, srv_params *p, srv_error *e) {
    if (route == SRV_ROUTE_MESSAGES) return srv_parse_messages(body, len, p, e);
    if (route == SRV_ROUTE_RESPONSES) return srv_parse_responses(body, len, p, e);
    if (route == SRV_ROUTE_EMBEDDINGS) return srv_parse_embeddings(body, len, p, e);
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
    bool tools = p->tools_json != NULL;
    bool reasoning = p->reasoning_split && (thinks || opens || harmony || p->reasoning_force);
    p->parse_output = tools || reasoning || harmony; /* harmony's answer is its final channel */
    /* the markers of these syntaxes are control tokens: the parser needs their text */
    p->render_special = harmony || (tools && (syn == SRV_SYNTAX_MISTRAL || syn == SRV_SYNTAX_LLAMA3));
    return 0;
}

/* ---- engine requests: checked parameters to requests, with the prompt counted against the
 * context before anything is queued: nothing is ever truncated. ----------------------------- */

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
