/* engine_request.c — requests: the public builder (rf_request_*), its prompt turned into
 * tokens (text tokenized, messages rendered), submit and cancel from any thread, and the step
 * thread's intake of what was submitted and release of what is done. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/grammar.h"

void rf_engine_req_free(rf_req *r) {
    if (!r) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stops[i]);
    rf_grammar_unref(r->grammar);
    free(r);
}


rf_request *rf_request_new(void) {
    rf_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->sp = rf_sampler_default_params();
    r->max_tokens = -1;
    r->n = 1;
    r->logprobs = -1;
    r->add_special = true;
    r->parse_special = true;
    return r;
}

static void request_clear_prompt(rf_request *r) {
    free(r->ids);
    free(r->text);
    for (size_t i = 0; i < r->n_msgs; i++) {
        free(r->roles[i]);
        free(r->contents[i]);
    }
    free(r->roles);
    free(r->contents);
    r->ids = NULL;
    r->text = NULL;
    r->roles = r->contents = NULL;
    r->n_ids = r->text_len = r->n_msgs = r->msgs_cap = 0;
    r->kind = 0;
}

void rf_request_free(rf_request *r) {
    if (!r) return;
    request_clear_prompt(r);
    for (int i = 0; i < r->n_stop; i++) free(r->stops[i]);
    rf_grammar_unref(r->grammar);
    free(r);
}

void rf_request_set_grammar(rf_request *r, rf_grammar *g) {
    if (!r) return;
    rf_grammar_ref(g);
    rf_grammar_unref(r->grammar);
    r->grammar = g;
}

#define RANGE(name, lo, hi)                                                                              \
    if (!(v >= (lo) && v <= (hi)))                                                                       \
        return rf_set_error(RF_ERR_INVALID_ARG, "%s = %g is outside [%g, %g]", name, v, (double)(lo), (double)(hi))
#define INTEGRAL(name)                                                                                   \
    if (v != floor(v)) return rf_set_error(RF_ERR_INVALID_ARG, "%s = %g is not an integer", name, v)

/* Checks one sampling field (the ranges rf_request_set and rf_request_set_sampling share). */
static rf_status check_sampling(rf_req_opt opt, double v) {
    if (isnan(v)) return rf_set_error(RF_ERR_INVALID_ARG, "request option %d: value is NaN", (int)opt);
    switch (opt) {
    case RF_REQ_TEMPERATURE: RANGE("temperature", 0, 1e6); break;
    case RF_REQ_TOP_K: INTEGRAL("top_k"); RANGE("top_k", -1, INT32_MAX); break;
    case RF_REQ_TOP_P: RANGE("top_p", 0, 1); break;
    case RF_REQ_MIN_P: RANGE("min_p", 0, 1); break;
    case RF_REQ_REPEAT_PENALTY: RANGE("repetition_penalty", 1e-6, 1e6); break;
    case RF_REQ_REPEAT_LAST_N: INTEGRAL("repeat_last_n"); RANGE("repeat_last_n", -1, INT32_MAX); break;
    case RF_REQ_PRESENCE_PENALTY: RANGE("presence_penalty", -1e6, 1e6); break;
    case RF_REQ_FREQUENCY_PENALTY: RANGE("frequency_penalty", -1e6, 1e6); break;
    default: break;
    }
    return RF_OK;
}

rf_status rf_request_set(rf_request *r, rf_req_opt opt, double v) {
    if (!r) return rf_set_error(RF_ERR_INVALID_ARG, "request is NULL");
    if (isnan(v)) return rf_set_error(RF_ERR_INVALID_ARG, "request option %d: value is NaN", (int)opt);
    rf_status st = check_sampling(opt, v);
    if (st) return st;
    switch (opt) {
    case RF_REQ_MAX_TOKENS: INTEGRAL("max_tokens"); r->max_tokens = v < 0 ? -1 : (v > INT32_MAX ? INT32_MAX : (int32_t)v); break;
    case RF_REQ_TEMPERATURE: r->sp.temperature = (float)v; break;
    case RF_REQ_TOP_K: r->sp.top_k = (int32_t)v; break;
    case RF_REQ_TOP_P: r->sp.top_p = (float)v; break;
    case RF_REQ_MIN_P: r->sp.min_p = (float)v; break;
    case RF_REQ_REPEAT_PENALTY: r->sp.repeat_penalty = (float)v; break;
    case RF_REQ_REPEAT_LAST_N: r->sp.repeat_last_n = (int32_t)v; break;
    case RF_REQ_PRESENCE_PENALTY: r->sp.presence_penalty = (float)v; break;
    case RF_REQ_FREQUENCY_PENALTY: r->sp.frequency_penalty = (float)v; break;
    case RF_REQ_SEED: INTEGRAL("seed"); RANGE("seed", 0, 9007199254740992.0); r->sp.seed = (uint64_t)v; break;
    case RF_REQ_IGNORE_EOS: r->ignore_eos = v != 0; break;
    case RF_REQ_RENDER_SPECIAL: r->render_special = v != 0; break;
    case RF_REQ_N: INTEGRAL("n"); RANGE("n", 1, RF_MAX_CHOICES); r->n = (int32_t)v; break;
    case RF_REQ_LOGPROBS: INTEGRAL("logprobs"); RANGE("logprobs", -1, RF_MAX_TOP_LOGPROBS); r->logprobs = (int32_t)v; break;
    case RF_REQ_ADD_SPECIAL: r->add_special = v != 0; break;
    case RF_REQ_PARSE_SPECIAL: r->parse_special = v != 0; break;
    case RF_REQ_EMBED: INTEGRAL("embed"); RANGE("embed", 0, 3); r->pooling = (int32_t)v; break;
    default: return rf_set_error(RF_ERR_INVALID_ARG, "request option %d is unknown", (int)opt);
    }
    return RF_OK;
}
#undef RANGE
#undef INTEGRAL

rf_status rf_request_set_sampling(rf_request *r, const rf_sampler_params *p) {
    if (!r || !p) return rf_set_error(RF_ERR_INVALID_ARG, "sampling: request or parameters are NULL");
    const struct {
        rf_req_opt opt;
        double v;
    } f[] = {{RF_REQ_TEMPERATURE, p->temperature},       {RF_REQ_TOP_K, p->top_k},
             {RF_REQ_TOP_P, p->top_p},                   {RF_REQ_MIN_P, p->min_p},
             {RF_REQ_REPEAT_PENALTY, p->repeat_penalty}, {RF_REQ_REPEAT_LAST_N, p->repeat_last_n},
             {RF_REQ_PRESENCE_PENALTY, p->presence_penalty}, {RF_REQ_FREQUENCY_PENALTY, p->frequency_penalty}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        rf_status st = check_sampling(f[i].opt, f[i].v);
        if (st) return st;
    }
    r->sp = *p;
    return RF_OK;
}

const rf_sampler_params *rf_request_sampling(const rf_request *r) { return r ? &r->sp : NULL; }

rf_status rf_request_add_stop(rf_request *r, const char *text, size_t len) {
    if (!r || (!text && len)) return rf_set_error(RF_ERR_INVALID_ARG, "stop string: bad arguments");
    if (r->n_stop >= RF_MAX_STOPS) return rf_set_error(RF_ERR_INVALID_ARG, "at most %d stop strings", RF_MAX_STOPS);
    if (!len) return RF_OK; /* matches nothing */
    char *c = malloc(len);
    if (!c) return rf_set_error(RF_ERR_OOM, "stop string: out of memory");
    memcpy(c, text, len);
    r->stops[r->n_stop] = c;
    r->stop_len[r->n_stop++] = len;
    return RF_OK;
}

rf_status rf_request_set_prompt_ids(rf_request *r, const int32_t *ids, size_t n) {
    if (!r || (!ids && n)) return rf_set_error(RF_ERR_INVALID_ARG, "prompt ids: bad arguments");
    request_clear_prompt(r);
    r->ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!r->ids) return rf_set_error(RF_ERR_OOM, "prompt: out of memory");
    if (n) memcpy(r->ids, ids, n * sizeof(int32_t));
    r->n_ids = n;
    r->kind = 1;
    return RF_OK;
}

rf_status rf_request_set_prompt_text(rf_request *r, const char *text, size_t len) {
    if (!r || (!text && len)) return rf_set_error(RF_ERR_INVALID_ARG, "prompt text: bad arguments");
    request_clear_prompt(r);
    r->text = malloc(len + 1);
    if (!r->text) return rf_set_error(RF_ERR_OOM, "prompt: out of memory");
    if (len) memcpy(r->text, text, len);
    r->text[len] = 0;
    r->text_len = len;
    r->kind = 2;
    return RF_OK;
}

rf_status rf_request_add_message(rf_request *r, const char *role, const char *content) {
    if (!r || !role || !content) return rf_set_error(RF_ERR_INVALID_ARG, "message: role and content are required");
    if (r->kind != 3) {
        request_clear_prompt(r);
        r->kind = 3;
    }
    if (r->n_msgs == r->msgs_cap) {
        size_t cap = r->msgs_cap ? r->msgs_cap * 2 : 8;
        char **a = realloc(r->roles, cap * sizeof *a);
        if (!a) return rf_set_error(RF_ERR_OOM, "message: out of memory");
        r->roles = a;
        char **b = realloc(r->contents, cap * sizeof *b);
        if (!b) return rf_set_error(RF_ERR_OOM, "message: out of memory");
        r->contents = b;
        r->msgs_cap = cap;
    }
    char *ro = strdup(role), *co = strdup(content);
    if (!ro || !co) {
        free(ro);
        free(co);
        return rf_set_error(RF_ERR_OOM, "message: out of memory");
    }
    r->roles[r->n_msgs] = ro;
    r->contents[r->n_msgs++] = co;
    return RF_OK;
}

void rf_request_set_callback(rf_request *r, rf_event_fn fn, void *user) {
    if (!r) return;
    r->cb = fn;
    r->user = user;
}

/* Tokenizes a prompt (o: specials, plain ranges) with at most n_ctx tokens: past that it stops
 * and fails with RF_ERR_RANGE and *n = n_ctx + 1. *out malloc'd. */
static rf_status tokenize_text(const rf_engine *e, const char *text, size_t len, rf_tokenize_opts o,
                               int32_t **out, size_t *n) {
    const rf_vocab *v = e->m->vocab;
    *out = NULL;
    *n = 0;
    o.max_tokens = (size_t)e->n_ctx;
    /* one pass into a buffer that is usually big enough: tokens rarely outnumber bytes */
    size_t cap = len + 4 < o.max_tokens + 1 ? len + 4 : o.max_tokens + 1, cnt = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) return rf_set_error(RF_ERR_OOM, "tokenize: out of memory");
    rf_status st = rf_tokenize_ex(v, text, len, &o, ids, cap, &cnt);
    if (st == RF_ERR_RANGE && cnt > cap && cnt <= o.max_tokens) {
        int32_t *bigger = realloc(ids, cnt * sizeof(int32_t));
        if (!bigger) {
            free(ids);
            return rf_set_error(RF_ERR_OOM, "tokenize: out of memory");
        }
        ids = bigger;
        st = rf_tokenize_ex(v, text, len, &o, ids, cnt, &cnt);
    }
    if (st) {
        free(ids);
        if (st == RF_ERR_RANGE && cnt > o.max_tokens) {
            *n = cnt;
            return rf_set_error(RF_ERR_RANGE, "the prompt has more than %d tokens but the context holds %d (tokenizing "
                                              "stopped there)", e->n_ctx, e->n_ctx);
        }
        return st;
    }
    *out = ids;
    *n = cnt;
    return RF_OK;
}

/* The request's prompt as token ids (text tokenized, messages rendered), as submit does it. */
static rf_status request_tokens(rf_engine *e, const rf_request *r, int32_t **out, size_t *n_out) {
    int32_t *ids = NULL;
    size_t n = 0;
    rf_status st = RF_OK;
    *out = NULL;
    *n_out = 0;
    if (r->kind == 1) {
        ids = malloc((r->n_ids ? r->n_ids : 1) * sizeof(int32_t));
        if (!ids) return rf_set_error(RF_ERR_OOM, "submit: out of memory");
        if (r->n_ids) memcpy(ids, r->ids, r->n_ids * sizeof(int32_t));
        n = r->n_ids;
    } else if (r->kind == 2) {
        rf_tokenize_opts o = {.add_special = r->add_special, .parse_special = r->parse_special};
        if ((st = tokenize_text(e, r->text, r->text_len, o, &ids, n_out))) return st;
        n = *n_out;
    } else if (r->kind == 3) {
        const rf_chat_template *t = e->m->chat;
        if (!t) return rf_set_error(RF_ERR_INVALID_ARG, "this model has no usable chat template");
        rf_chat_msg *msgs = malloc((r->n_msgs ? r->n_msgs : 1) * sizeof *msgs);
        if (!msgs) return rf_set_error(RF_ERR_OOM, "submit: out of memory");
        for (size_t i = 0; i < r->n_msgs; i++) msgs[i] = (rf_chat_msg){r->roles[i], r->contents[i]};
        char *text = NULL;
        rf_text_span *data = NULL;
        size_t nd = 0;
        rf_chat_render_opts ro = {.add_generation_prompt = true};
        st = rf_chat_template_render_data(t, msgs, r->n_msgs, &ro, &text, &data, &nd);
        free(msgs);
        if (st) return rf_set_error(st, "chat template: %s", rf_last_error());
        /* the template already holds BOS where the model wants one; special tokens only from
         * its own markup, the messages' text as plain text */
        rf_tokenize_opts o = {.parse_special = true, .plain = data, .n_plain = nd};
        st = tokenize_text(e, text, strlen(text), o, &ids, n_out);
        n = *n_out;
        free(text);
        free(data);
        if (st) return st;
    } else {
        return rf_set_error(RF_ERR_INVALID_ARG, "the request has no prompt");
    }
    *out = ids;
    *n_out = n;
    return RF_OK;
}

rf_status rf_engine_prompt_tokens(rf_engine *e, const rf_request *r, int32_t *n) {
    if (n) *n = 0;
    if (!e || !r || !n) return rf_set_error(RF_ERR_INVALID_ARG, "prompt_tokens: NULL argument");
    int32_t *ids = NULL;
    size_t cnt = 0;
    rf_status st = request_tokens(e, r, &ids, &cnt);
    free(ids);
    *n = cnt > INT32_MAX ? INT32_MAX : (int32_t)cnt; /* n_ctx + 1 when tokenizing stopped at the context */
    return st;
}

int32_t rf_engine_n_vocab(const rf_engine *e) { return e ? e->m->hp.n_vocab : 0; }

rf_status rf_engine_submit(rf_engine *e, const rf_request *r, uint64_t *id) {
    if (id) *id = 0;
    if (!e || !r) return rf_set_error(RF_ERR_INVALID_ARG, "submit: engine or request is NULL");
    int32_t nv = e->m->hp.n_vocab;
    int32_t *ids = NULL;
    size_t n = 0;
    rf_status st = request_tokens(e, r, &ids, &n);
    if (st) return st;
    if (n == 0) {
        free(ids);
        return rf_set_error(RF_ERR_INVALID_ARG, "the prompt is empty");
    }
    if ((int64_t)n > e->n_ctx) {
        free(ids);
        return rf_set_error(RF_ERR_RANGE, "the prompt has %zu tokens but the context holds %d", n, e->n_ctx);
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv) {
            int32_t bad = ids[i];
            free(ids);
            return rf_set_error(RF_ERR_RANGE, "token id %d at index %zu is outside the vocabulary [0, %d)", bad, i, nv);
        }
    if (r->sp.repeat_penalty <= 0 || isnan(r->sp.repeat_penalty)) {
        free(ids);
        return rf_set_error(RF_ERR_INVALID_ARG, "repeat_penalty must be > 0");
    }
    rf_req *q = calloc(1, sizeof *q);
    if (!q) {
        free(ids);
        return rf_set_error(RF_ERR_OOM, "submit: out of memory");
    }
    q->prompt = ids;
    q->n_prompt = (int32_t)n;
    q->sp = r->sp;
    q->max_tokens = r->max_tokens;
    q->n = r->n;
    q->logprobs = r->logprobs;
    q->ignore_eos = r->ignore_eos;
    q->render_special = r->render_special;
    q->pooling = r->pooling;
    if (q->pooling) q->n = 1;
    q->grammar = r->grammar;
    rf_grammar_ref(q->grammar);
    q->cb = r->cb;
    q->user = r->user;
    q->listed = true;
    for (int i = 0; i < r->n_stop; i++) {
        q->stops[i] = malloc(r->stop_len[i]);
        if (!q->stops[i]) {
            rf_engine_req_free(q);
            return rf_set_error(RF_ERR_OOM, "submit: out of memory");
        }
        memcpy(q->stops[i], r->stops[i], r->stop_len[i]);
        q->stop_len[i] = r->stop_len[i];
        q->n_stop = i + 1;
    }
    pthread_mutex_lock(&e->mu);
    q->id = e->next_id++;
    *e->incoming_tail = q;
    e->incoming_tail = &q->next;
    e->n_active_reqs++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (id) *id = q->id;
    return RF_OK;
}

rf_status rf_engine_cancel(rf_engine *e, uint64_t id) {
    if (!e) return rf_set_error(RF_ERR_INVALID_ARG, "cancel: engine is NULL");
    rf_status st = RF_OK;
    pthread_mutex_lock(&e->mu);
    rf_req *r = e->incoming;
    while (r && r->id != id) r = r->next;
    if (!r) {
        r = e->active;
        while (r && r->id != id) r = r->next;
    }
    if (r) r->cancel = 1;
    else st = rf_set_error(RF_ERR_NOT_FOUND, "no active request %llu", (unsigned long long)id);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return st;
}


/* Moves what was submitted into the waiting queue (one sequence per request; its other
 * choices are forked after the prompt). Called by the step thread. */
void rf_engine_intake(rf_engine *e) {
    pthread_mutex_lock(&e->mu);
    rf_req *in = e->incoming;
    /* they leave the incoming list now: count them as waiting until the snapshot below, so the
     * stats never show a submitted request as neither waiting nor running */
    for (rf_req *r = in; r; r = r->next) e->snap_waiting++;
    e->incoming = NULL;
    e->incoming_tail = &e->incoming;
    pthread_mutex_unlock(&e->mu);
    while (in) {
        rf_req *q = in;
        in = in->next;
        q->next = NULL;
        rf_seq *s = rf_seq_new(e->max_blocks);
        rf_status st = s ? rf_seq_append(s, q->prompt, q->n_prompt) : RF_ERR_OOM;
        if (!st && s) st = rf_engine_seq_setup_gen(e, s, q, 0);
        pthread_mutex_lock(&e->mu);
        q->next = e->active;
        e->active = q;
        pthread_mutex_unlock(&e->mu);
        if (st || !s) {
            if (s) rf_seq_free(s);
            rf_event ev = rf_engine_done_event(q, 0, q->n_prompt, 0, 0, RF_FINISH_ERROR,
                                     "out of memory while queueing the request");
            if (q->cb) q->cb(&ev, q->user);
            q->n = 0;
            rf_engine_release_req(e, q);
            continue;
        }
        s->n_prompt = q->n_prompt;
        s->order = e->next_order++;
        s->fork_left = q->n - 1;
        if (q->pooling && (st = rf_embed_seq_setup(e, s))) {
            rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "out of memory while queueing the request");
            q->n_seqs++;
            rf_seq_free(s);
            if (--q->n_seqs == 0) rf_engine_release_req(e, q);
            continue;
        }
        s->t_start = rf_now_ms();
        q->n_seqs++;
        for (uint32_t i = 0; i < (uint32_t)q->n_prompt; i++) rf_sampler_accept(s->smp, q->prompt[i]);
        if (!rf_engine_queue_waiting(e, s)) {
            rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "out of memory while queueing the request");
            rf_seq_free(s);
            if (--q->n_seqs == 0) rf_engine_release_req(e, q);
        }
    }
    rf_engine_snapshot(e);
}

/* Drops a request whose choices are all done from the active list and frees it. */
void rf_engine_release_req(rf_engine *e, rf_req *q) {
    if (!q->listed) return;
    pthread_mutex_lock(&e->mu);
    rf_req **p = &e->active;
    while (*p && *p != q) p = &(*p)->next;
    if (*p) *p = q->next;
    e->n_active_reqs--;
    e->st_done++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    rf_engine_req_free(q);
}

