/* generate.c — rf_generate: a session's sequence keeps the longest cached prefix of the prompt,
 * takes the rest, and runs through the batching engine's step as a one-choice request until it
 * finishes; the text streams through the caller's piece callback. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/grammar.h"

rf_gen_params rf_gen_default_params(void) {
    rf_gen_params p;
    memset(&p, 0, sizeof p);
    p.sampling = rf_sampler_default_params();
    p.max_tokens = -1;
    return p;
}

typedef struct gen_ctx {
    rf_piece_fn cb;
    void *user;
} gen_ctx;

static bool on_event(const rf_event *ev, void *user) {
    gen_ctx *g = user;
    size_t len;
    const char *t = rf_event_text(ev, &len);
    if (len && g->cb) return g->cb(t, len, g->user);
    return true;
}

rf_status rf_generate(rf_session *ss, const int32_t *prompt, int32_t n_prompt, const rf_gen_params *gp_in,
                      rf_piece_fn cb, void *user, rf_gen_stats *stats) {
    rf_gen_params gp = gp_in ? *gp_in : rf_gen_default_params();
    rf_gen_stats st0;
    memset(&st0, 0, sizeof st0);
    if (stats) *stats = st0;
    if (!ss || !prompt || n_prompt <= 0) return rf_set_error(RF_ERR_INVALID_ARG, "generate: empty prompt");
    rf_engine *e = rf_session_engine(ss);
    rf_seq *s = rf_session_seq(ss);
    if (n_prompt > e->n_ctx)
        return rf_set_error(RF_ERR_RANGE, "the prompt has %d tokens but the context holds %d", n_prompt, e->n_ctx);
    int32_t nv = e->m->hp.n_vocab;
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= nv)
            return rf_set_error(RF_ERR_RANGE, "token id %d at index %d is outside the vocabulary [0, %d)", prompt[i], i, nv);
    if (gp.n_stop > RF_MAX_STOPS) return rf_set_error(RF_ERR_INVALID_ARG, "at most %d stop strings", RF_MAX_STOPS);

    /* reuse the longest cached prefix (at least the last prompt token is evaluated again) */
    int32_t common = 0;
    while (common < s->n_computed && common < n_prompt - 1 && s->tokens[common] == prompt[common]) common++;
    rf_status st = rf_session_truncate(ss, common);
    if (st) return st;
    s->n_tokens = common;
    if ((st = rf_seq_append(s, prompt + common, n_prompt - common))) return st;

    rf_req q;
    memset(&q, 0, sizeof q);
    q.sp = gp.sampling;
    q.max_tokens = gp.max_tokens < 0 ? -1 : gp.max_tokens;
    q.n = 1;
    q.logprobs = -1;
    q.ignore_eos = gp.ignore_eos;
    q.render_special = gp.render_special;
    q.ext_cancel = gp.cancel;
    gen_ctx g = {cb, user};
    q.cb = on_event;
    q.user = &g;
    for (size_t i = 0; i < gp.n_stop; i++) {
        if (!gp.stop[i]) continue;
        q.stops[q.n_stop] = (char *)gp.stop[i]; /* copied by the text output; never freed here */
        q.stop_len[q.n_stop++] = strlen(gp.stop[i]);
    }
    if ((st = rf_sampler_new(&q.sp, nv, &s->smp))) return st;
    if (gp.grammar && (st = rf_sampler_set_grammar(s->smp, gp.grammar, e->m->vocab))) {
        rf_sampler_free(s->smp);
        s->smp = NULL;
        return st;
    }
    if ((st = rf_textout_init(&s->out, e->m->vocab, q.render_special, q.stops, q.stop_len, q.n_stop))) {
        rf_sampler_free(s->smp);
        s->smp = NULL;
        return st;
    }
    for (int32_t i = 0; i < n_prompt; i++) rf_sampler_accept(s->smp, prompt[i]);
    s->req = &q;
    s->gen = true;
    s->n_prompt = n_prompt;
    s->n_gen = 0;
    s->n_cached = common;
    s->finish = RF_FINISH_NONE;
    s->order = e->next_order++;
    s->t_start = rf_now_ms();
    s->t_first = 0;
    if (!rf_engine_queue_running(e, s)) st = rf_set_error(RF_ERR_OOM, "generate: out of memory");
    while (!st && s->state == RF_SEQ_RUNNING) st = rf_engine_exec_step(e, NULL);
    double t_end = rf_now_ms();
    if (st && s->state == RF_SEQ_RUNNING) { /* the step failed: take the sequence out of the batch */
        rf_seq_list_remove(&e->running, s);
        s->state = RF_SEQ_IDLE;
    }
    st0.n_prompt = n_prompt - common;
    st0.n_reused = common;
    st0.n_gen = s->n_gen;
    st0.finish = s->finish;
    double t_first = s->t_first ? s->t_first : t_end;
    st0.prompt_ms = t_first - s->t_start;
    st0.gen_ms = t_end - t_first;
    if (!st && stats) {
        st0.tokens = malloc(((size_t)s->n_gen + 1) * sizeof(int32_t));
        if (st0.tokens) memcpy(st0.tokens, s->tokens + n_prompt, (size_t)s->n_gen * sizeof(int32_t));
        *stats = st0;
    }
    rf_sampler_free(s->smp);
    s->smp = NULL;
    rf_textout_free(&s->out);
    s->req = NULL;
    s->gen = false;
    return st;
}
