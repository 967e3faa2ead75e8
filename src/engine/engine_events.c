/* engine_events.c — a request's events around its tokens: a sequence set up to generate (its
 * sampler, its text output), a sequence finished (the text held back released, its blocks given
 * back, the DONE event of its choice and of choices never forked), and the event accessors
 * (rf_event_*). A generated token's own TOKEN event is the step's (engine_step.c); an event made
 * and handed to the callback: engine_internal.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/grammar.h"

const char *rf_finish_reason_str(rf_finish_reason r) {
    switch (r) {
    case RF_FINISH_EOS: return "eos";
    case RF_FINISH_LENGTH: return "length";
    case RF_FINISH_STOP: return "stop";
    case RF_FINISH_CONTEXT: return "context";
    case RF_FINISH_CANCELLED: return "cancelled";
    case RF_FINISH_ERROR: return "error";
    default: return "none";
    }
}

/* Sets a sequence up to generate for request q as choice `choice`. */
rf_status rf_engine_seq_setup_gen(rf_engine *e, rf_seq *s, rf_req *q, int32_t choice) {
    s->req = q;
    s->choice = choice;
    s->gen = true;
    rf_sampler_params sp = q->sp;
    sp.seed += (uint64_t)choice;
    rf_status st = rf_sampler_new(&sp, e->m->hp.n_vocab, &s->smp);
    if (!st && q->grammar) st = rf_sampler_set_grammar(s->smp, q->grammar, e->m->vocab);
    if (st) return st;
    return rf_textout_init(&s->out, e->m->vocab, q->render_special, q->stops, q->stop_len, q->n_stop);
}

void rf_engine_finish_seq(rf_engine *e, rf_seq *s, rf_finish_reason why, const char *error) {
    rf_req *q = s->req;
    const char *txt = "";
    size_t len = 0;
    if (s->gen && why != RF_FINISH_STOP && why != RF_FINISH_CANCELLED && why != RF_FINISH_ERROR) {
        bool hit = false;
        if (rf_textout_finish(&s->out, &txt, &len, &hit) == RF_OK) {
            if (hit) why = RF_FINISH_STOP;
        } else {
            txt = "";
            len = 0;
        }
    }
    s->finish = why;
    if (s->persistent) {
        s->state = RF_SEQ_IDLE;
    } else {
        s->state = RF_SEQ_DONE;
        rf_seq_release_blocks(s, e->pool, e->spool);
    }
    if (!q) return;
    rf_event ev = rf_engine_done_event(q, s->choice, s->n_prompt, s->n_cached, s->n_gen, why, error);
    ev.text = txt;
    ev.len = len;
    rf_engine_emit(q, &ev);
    q->n_done++;
    /* choices never forked (cancelled or failed before the prompt finished) end with it */
    for (int32_t c = 1; c <= s->fork_left; c++) {
        rf_event ec = ev;
        ec.choice = s->choice + c;
        ec.n_gen = 0;
        ec.text = "";
        ec.len = 0;
        rf_engine_emit(q, &ec);
    }
    s->fork_left = 0;
    /* the sequences are freed by the scheduler's retire pass; the request once all are done */
}

rf_event_kind rf_event_get_kind(const rf_event *ev) { return ev->kind; }
uint64_t rf_event_request(const rf_event *ev) { return ev->req; }
int32_t rf_event_choice(const rf_event *ev) { return ev->choice; }
const char *rf_event_text(const rf_event *ev, size_t *len) {
    if (len) *len = ev->len;
    return ev->text ? ev->text : "";
}
int32_t rf_event_token(const rf_event *ev) { return ev->token; }
float rf_event_logprob(const rf_event *ev) { return ev->logprob; }
int32_t rf_event_n_top(const rf_event *ev) { return ev->n_top; }
bool rf_event_top(const rf_event *ev, int32_t i, int32_t *id, float *logprob) {
    if (i < 0 || i >= ev->n_top) return false;
    if (id) *id = ev->top_id[i];
    if (logprob) *logprob = ev->top_lp[i];
    return true;
}
rf_finish_reason rf_event_finish(const rf_event *ev) { return ev->finish; }
int32_t rf_event_n_prompt(const rf_event *ev) { return ev->n_prompt; }
int32_t rf_event_n_cached(const rf_event *ev) { return ev->n_cached; }
int32_t rf_event_n_gen(const rf_event *ev) { return ev->n_gen; }
const char *rf_event_error(const rf_event *ev) { return ev->error ? ev->error : ""; }
