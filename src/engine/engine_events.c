/* engine_events.c — what becomes of a sequence's output: sampling, forking a request's other
 * choices, log-probabilities, text with stop strings, the TOKEN and DONE events handed to the
 * request's callback, and the event accessors (rf_event_*). */
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

rf_event rf_engine_done_event(const rf_req *q, int32_t choice, int32_t n_prompt, int32_t n_cached, int32_t n_gen,
                           rf_finish_reason why, const char *error) {
    rf_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = RF_EVENT_DONE;
    ev.req = q->id;
    ev.choice = choice;
    ev.token = -1;
    ev.n_prompt = n_prompt;
    ev.n_cached = n_cached;
    ev.n_gen = n_gen;
    ev.text = "";
    ev.logprob = NAN;
    ev.finish = why;
    ev.error = error ? error : "";
    return ev;
}

bool rf_engine_emit(rf_req *q, rf_event *ev) {
    if (!q->cb) return true;
    bool go = q->cb(ev, q->user);
    if (!go) q->cancel = 1;
    return go;
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

/* Forks the other choices of s's request off s after its prompt: they share every block
 * (reference counts), so the prompt is computed and stored once; the first write into the
 * shared partial block copies it. */
static void fork_choices(rf_engine *e, rf_seq *s, const float *logits) {
    rf_req *q = s->req;
    while (s->fork_left > 0) {
        int32_t choice = q->n - s->fork_left;
        s->fork_left--;
        rf_seq *c = rf_seq_new(e->max_blocks);
        rf_status st = c ? rf_seq_append(c, s->tokens, s->n_tokens) : RF_ERR_OOM;
        if (!st) st = rf_engine_seq_setup_gen(e, c, q, choice);
        if (st) {
            rf_event ev = rf_engine_done_event(q, choice, s->n_prompt, s->n_cached, 0, RF_FINISH_ERROR,
                                     "out of memory while forking a choice");
            rf_engine_emit(q, &ev);
            q->n_done++;
            rf_seq_free(c);
            continue;
        }
        c->n_prompt = s->n_prompt;
        c->n_computed = s->n_computed;
        c->n_cached = s->n_cached;
        c->t_start = s->t_start;
        memcpy(c->blocks, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
        memcpy(c->hashes, s->hashes, (size_t)s->n_hashed * sizeof(uint64_t));
        c->n_blocks = s->n_blocks;
        c->n_hashed = s->n_hashed;
        c->lookup_done = true;
        for (int32_t i = 0; i < c->n_blocks; i++) rf_kv_pool_ref(e->pool, c->blocks[i]);
        rf_seq_state_fork(e, s, c);
        for (int32_t i = 0; i < s->n_prompt; i++) rf_sampler_accept(c->smp, s->tokens[i]);
        c->order = s->order; /* same arrival: preempted together with its siblings' rank */
        q->n_seqs++;
        if (!rf_engine_queue_running(e, c)) {
            rf_engine_finish_seq(e, c, RF_FINISH_ERROR, "out of memory while forking a choice");
            rf_seq_free(c);
            q->n_seqs--;
            continue;
        }
        rf_engine_on_output(e, c, logits); /* its first token, from the same logits */
    }
}

/* Log-probabilities (log-softmax of the raw logits) of the chosen token and the k most likely
 * ones, highest first, ties by lower id. */
static void fill_logprobs(rf_engine *e, const rf_req *q, const float *logits, int32_t id, rf_event *ev) {
    int32_t nv = e->m->hp.n_vocab, k = q->logprobs, n = 0;
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < nv; i++)
        if (logits[i] > mx) mx = logits[i];
    for (int32_t i = 0; i < nv; i++)
        if (!isnan(logits[i])) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    ev->logprob = (float)(logits[id] - lse);
    float raw[RF_MAX_TOP_LOGPROBS];
    for (int32_t i = 0; i < nv && k > 0; i++) {
        float v = logits[i];
        int32_t j;
        if (isnan(v)) continue;
        if (n < k) j = n++;
        else if (v > raw[k - 1]) j = k - 1;
        else continue;
        while (j > 0 && raw[j - 1] < v) {
            raw[j] = raw[j - 1];
            ev->top_id[j] = ev->top_id[j - 1];
            j--;
        }
        raw[j] = v;
        ev->top_id[j] = i;
    }
    for (int32_t j = 0; j < n; j++) ev->top_lp[j] = (float)(raw[j] - lse);
    ev->n_top = n;
}

bool rf_engine_pre_sample(rf_engine *e, rf_seq *s) {
    rf_req *q = s->req;
    if (q->max_tokens >= 0 && s->n_gen >= q->max_tokens) {
        rf_engine_finish_seq(e, s, RF_FINISH_LENGTH, NULL);
        return true;
    }
    return false;
}

rf_status rf_engine_on_output(rf_engine *e, rf_seq *s, const float *logits) {
    if (s->fork_left > 0) fork_choices(e, s, logits);
    if (rf_engine_pre_sample(e, s)) return RF_OK;
    if (e->logits_hook) e->logits_hook(e->hook_user, s, logits);
    rf_engine_on_token(e, s, rf_sampler_sample(s->smp, logits), logits);
    return RF_OK;
}

void rf_engine_on_token(rf_engine *e, rf_seq *s, int32_t id, const float *logits) {
    rf_req *q = s->req;
    if (id < 0) {
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "every logit is NaN");
        return;
    }
    if (s->t_first == 0) s->t_first = rf_now_ms();
    rf_status st = rf_seq_append(s, &id, 1);
    if (st) {
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "out of memory");
        return;
    }
    s->n_gen++;
    e->st_gen++;
    rf_sampler_accept(s->smp, id);
    if (!q->ignore_eos && rf_vocab_is_eog(e->m->vocab, id)) {
        rf_engine_finish_seq(e, s, RF_FINISH_EOS, NULL);
        return;
    }
    rf_event ev = rf_engine_done_event(q, s->choice, s->n_prompt, s->n_cached, s->n_gen, RF_FINISH_NONE, NULL);
    ev.kind = RF_EVENT_TOKEN;
    ev.token = id;
    if (q->logprobs >= 0 && logits) fill_logprobs(e, q, logits, id, &ev);
    bool hit = false;
    if ((st = rf_textout_push(&s->out, id, &ev.text, &ev.len, &hit))) {
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, rf_last_error());
        return;
    }
    bool go = rf_engine_emit(q, &ev);
    if (hit) rf_engine_finish_seq(e, s, RF_FINISH_STOP, NULL);
    else if (!go) rf_engine_finish_seq(e, s, RF_FINISH_CANCELLED, NULL);
    else if (s->n_tokens - 1 >= e->n_ctx) rf_engine_finish_seq(e, s, RF_FINISH_CONTEXT, NULL);
    else if (q->max_tokens >= 0 && s->n_gen >= q->max_tokens) rf_engine_finish_seq(e, s, RF_FINISH_LENGTH, NULL);
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
