/* server_req.c — the request objects of `rocmforge serve`: their lifetime and list, their state
 * machine, cancellation, a choice's answer fed to and parsed by the answer parser (for every
 * API's output), and the ticker that notices hang-ups of suspended clients and sends pings (the
 * engine callback that queues their events is the output's: server_out.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server_int.h"

uint64_t srv_rng_next(srv *s) {
    pthread_mutex_lock(&s->rng_mu);
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ULL);
    pthread_mutex_unlock(&s->rng_mu);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* ---- request objects ---------------------------------------------------------------------- */

void srv_req_unref(srv_req *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (srv_event *e = r->qh, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    for (int i = 0; i < r->n_choices; i++) {
        srv_buf_free(&r->ch[i].text);
        json_decref(r->ch[i].lp);
        srv_chat_stream_free(&r->ch[i].cs);
        free(r->ch[i].embd);
    }
    if (r->echo)
        for (int i = 0; i < r->n_subs; i++) free(r->echo[i]);
    free(r->echo);
    free(r->echo_len);
    free(r->sub_counted);
    free(r->ch);
    free(r->subs);
    free(r->t_last);
    srv_buf_free(&r->out);
    srv_buf_free(&r->api_raw);
    srv_buf_free(&r->api_ws);
    srv_buf_free(&r->api_args);
    free(r->api_call_id);
    free(r->api_call_name);
    free(r->inject);
    srv_params_free(&r->p);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void srv_list_add(srv *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    r->next = s->list;
    r->prev = NULL;
    if (s->list) s->list->prev = r;
    s->list = r;
    r->listed = true;
    s->n_listed++;
    srv_req_ref(r); /* the list's */
    pthread_mutex_unlock(&s->mu);
}

/* Drops r from the list (its connection is gone); returns whether it was listed. */
bool srv_list_remove(srv *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    bool was = r->listed;
    if (was) {
        if (r->prev) r->prev->next = r->next;
        else s->list = r->next;
        if (r->next) r->next->prev = r->prev;
        r->listed = false;
        r->conn = NULL;
        s->n_listed--;
    }
    pthread_mutex_unlock(&s->mu);
    if (was) srv_req_unref(r);
    return was;
}

/* Cancels r's engine submissions (those already made; later ones see srv_req_ending). */
void srv_req_cancel(srv *s, srv_req *r) {
    for (int i = 0; i < r->n_subs; i++) {
        pthread_mutex_lock(&r->mu);
        bool sub = r->subs[i].submitted;
        uint64_t id = r->subs[i].id;
        pthread_mutex_unlock(&r->mu);
        if (sub && !atomic_load(&s->engine_gone)) rf_engine_cancel(s->eng, id);
    }
}

/* ---- the request's state machine ---------------------------------------------------------- */

/* input        wait                                  end                 returns
 * WAIT         -> waiting                            -                   false
 * EVENT        waiting -> running if the request     -                   resumed
 *              streams or every choice is done
 * LOST         waiting -> running (lost is set)      -                   resumed
 * PING         waiting -> ping due                   -                   resumed
 * TAKE_PING    ping due -> running                   -                   a ping was due
 * RESUME       waiting -> running                    -                   resumed
 * CANCEL       -                                     max(end, cancelled) end rose
 * SHUTDOWN     -                                     max(end, shutdown)  end rose
 * CLIENT_GONE  -                                     client gone         first report
 * (max: the cause that ranks higher in srv_req_end stays; client gone ranks highest) */
bool srv_req_step(srv_req *r, srv_req_input in) {
    srv_req_state *st = &r->st;
    const bool waiting = st->wait == SRV_REQ_WAITING;
    srv_req_end to = SRV_END_NONE;
    switch (in) {
    case SRV_IN_WAIT:
        st->wait = SRV_REQ_WAITING;
        return false;
    case SRV_IN_EVENT:
    case SRV_IN_LOST:
    case SRV_IN_RESUME:
        if (in == SRV_IN_LOST) st->lost = true; /* a waiting connection must answer (an error) now */
        if (!waiting || (in == SRV_IN_EVENT && !r->stream && r->engine_done < r->n_choices)) return false;
        st->wait = SRV_REQ_RUNNING;
        return true;
    case SRV_IN_PING:
        if (!waiting) return false;
        st->wait = SRV_REQ_PING_DUE;
        return true;
    case SRV_IN_TAKE_PING:
        if (st->wait != SRV_REQ_PING_DUE) return false;
        st->wait = SRV_REQ_RUNNING;
        return true;
    case SRV_IN_CANCEL: to = SRV_END_CANCELLED; break;
    case SRV_IN_SHUTDOWN: to = SRV_END_SHUTDOWN; break;
    case SRV_IN_CLIENT_GONE: to = SRV_END_CLIENT_GONE; break;
    }
    const bool first = st->end < to;
    if (first) st->end = to;
    return first;
}

/* ---- building a request ------------------------------------------------------------------ */

static void make_id(srv *s, srv_req *r) {
    uint64_t a = srv_rng_next(s), b = srv_rng_next(s);
    const char *prefix = r->p.api == SRV_API_MESSAGES    ? "msg_"
                         : r->p.api == SRV_API_RESPONSES ? "resp_"
                         : r->p.route == SRV_ROUTE_CHAT  ? "chatcmpl-"
                                                         : "cmpl-";
    snprintf(r->id, sizeof r->id, "%s%016llx%08llx", prefix,
             (unsigned long long)a, (unsigned long long)(b & 0xffffffffULL));
}

/* Builds the request object for checked params (which it takes over). NULL when out of memory. */
srv_req *srv_req_new(srv *s, srv_params *p) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->s = s;
    atomic_init(&r->refs, 1);
    pthread_mutex_init(&r->mu, NULL);
    r->p = *p;
    memset(p, 0, sizeof *p);
    r->stream = r->p.stream;
    r->qt = &r->qh;
    r->t_arrival = srv_now_s();
    r->created = (int64_t)time(NULL);
    atomic_init(&r->t_write_ms, srv_now_ms());
    r->n_subs = r->p.route == SRV_ROUTE_CHAT ? 1 : (int)r->p.n_prompts;
    r->n_choices = r->n_subs * r->p.n;
    r->subs = calloc((size_t)r->n_subs, sizeof *r->subs);
    r->ch = calloc((size_t)r->n_choices, sizeof *r->ch);
    r->t_last = calloc((size_t)r->n_choices, sizeof *r->t_last);
    r->sub_counted = calloc((size_t)r->n_subs, sizeof *r->sub_counted);
    r->echo = calloc((size_t)r->n_subs, sizeof *r->echo);
    r->echo_len = calloc((size_t)r->n_subs, sizeof *r->echo_len);
    make_id(s, r);
    if (!r->subs || !r->ch || !r->t_last || !r->sub_counted || !r->echo || !r->echo_len) {
        srv_req_unref(r);
        return NULL;
    }
    for (int i = 0; i < r->n_subs; i++) {
        r->subs[i].req = r;
        r->subs[i].idx = i;
    }
    if (r->p.route == SRV_ROUTE_COMPLETIONS && r->p.echo) {
        for (int i = 0; i < r->n_subs; i++) {
            srv_prompt *sp = &r->p.prompts[i];
            if (sp->text) {
                r->echo[i] = malloc(sp->len + 1);
                if (!r->echo[i]) {
                    srv_req_unref(r);
                    return NULL;
                }
                memcpy(r->echo[i], sp->text, sp->len);
                r->echo[i][sp->len] = 0;
                r->echo_len[i] = sp->len;
            } else if (rf_detokenize(s->vocab, sp->ids, sp->n_ids, false, &r->echo[i], &r->echo_len[i])) {
                srv_req_unref(r);
                return NULL;
            }
        }
    }
    return r;
}


/* ---- a choice's answer parsed (chat, Messages, Responses) ------------------------------------ */

bool srv_choice_feed(srv_req *r, int ci, const char *text, size_t len, bool final, srv_chat_delta *d) {
    srv_choice *ch = &r->ch[ci];
    if (!ch->cs.ready) {
        ch->cs.cfg = srv_parse_cfg_for(&r->p, r->id, ci);
        ch->cs.ready = true;
    }
    srv_buf_add(&ch->text, text, len);
    if (ch->text.oom || srv_chat_stream_feed(&ch->cs, ch->text.p ? ch->text.p : "", ch->text.len, final, d)) {
        r->out.oom = true;
        return false;
    }
    return true;
}

int srv_choice_parse(const srv_req *r, int ci, srv_chat_out *po) {
    const srv_choice *ch = &r->ch[ci];
    srv_parse_cfg cfg = srv_parse_cfg_for(&r->p, r->id, ci);
    memset(po, 0, sizeof *po);
    if (srv_chat_parse(&cfg, ch->text.p ? ch->text.p : "", ch->text.len, true, po)) {
        srv_chat_out_free(po);
        return -1;
    }
    return 0;
}

/* ---- the ticker: hang-ups of suspended connections, pings ---------------------------------- */

void *srv_ticker_main(void *arg) {
    srv *s = arg;
    int cap = 0;
    struct pollfd *pfd = NULL;
    srv_req **rr = NULL, **gone = NULL, **wake = NULL;
    while (!atomic_load(&s->ticker_stop)) {
        struct timespec ts = {0, SRV_TICK_MS * 1000000L};
        nanosleep(&ts, NULL);
        int n = 0, n_gone = 0, n_wake = 0;
        long long t = srv_now_ms();
        long long ping_ms = s->cfg.ping_s > 0 ? (long long)(s->cfg.ping_s * 1000.0) : -1;
        pthread_mutex_lock(&s->mu);
        if (s->n_listed > cap) {
            int nc = s->n_listed * 2;
            struct pollfd *a = realloc(pfd, (size_t)nc * sizeof *a);
            if (a) pfd = a;
            srv_req **b = realloc(rr, (size_t)nc * sizeof *b);
            if (b) rr = b;
            srv_req **g = realloc(gone, (size_t)nc * sizeof *g);
            if (g) gone = g;
            srv_req **w = realloc(wake, (size_t)nc * sizeof *w);
            if (w) wake = w;
            if (a && b && g && w) cap = nc;
        }
        for (srv_req *r = s->list; r && n < cap && n_wake < cap; r = r->next) {
            pthread_mutex_lock(&r->mu);
            bool susp = r->st.wait == SRV_REQ_WAITING && !srv_req_ending(r);
            if (susp && r->stream && ping_ms > 0 && t - atomic_load(&r->t_write_ms) >= ping_ms) {
                srv_req_step(r, SRV_IN_PING);
                atomic_store(&r->t_write_ms, t);
                wake[n_wake++] = srv_req_ref(r);
                susp = false;
            }
            pthread_mutex_unlock(&r->mu);
            if (susp && r->fd >= 0) {
                pfd[n].fd = r->fd;
                pfd[n].events = POLLIN | POLLRDHUP;
                pfd[n].revents = 0;
                rr[n++] = r;
            }
        }
        if (n > 0 && poll(pfd, (nfds_t)n, 0) > 0) {
            for (int i = 0; i < n; i++) {
                bool hup = pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL);
                if (!hup && (pfd[i].revents & POLLIN)) {
                    char b;
                    ssize_t k = recv(pfd[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
                    hup = k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
                }
                if (hup) gone[n_gone++] = srv_req_ref(rr[i]);
            }
        }
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n_wake; i++) {
            srv_req *r = wake[i];
            MHD_resume_connection(r->conn);
            srv_req_unref(r);
        }
        for (int i = 0; i < n_gone; i++) {
            srv_req *r = gone[i];
            pthread_mutex_lock(&r->mu);
            bool first = srv_req_step(r, SRV_IN_CLIENT_GONE);
            pthread_mutex_unlock(&r->mu);
            if (first) {
                srv_req_cancel(s, r);
                pthread_mutex_lock(&s->m.mu);
                s->m.disconnects++;
                pthread_mutex_unlock(&s->m.mu);
                if (s->cfg.verbose) fprintf(stderr, "serve: client of %s went away; cancelled\n", r->id);
            }
            srv_req_unref(r);
        }
    }
    free(pfd);
    free(rr);
    free(gone);
    free(wake);
    return NULL;
}

