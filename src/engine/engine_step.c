/* engine_step.c — the engine's step: intake and cancellations, the scheduler's plan executed
 * (block copies and state restores, the batch, the forward and sampling on the backend), outputs handed to the
 * events, finished sequences retired; and the loops that drive it (run, wait, wake). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/knobs.h"
#include "engine/engine_internal.h"
#include "engine/grammar.h"

static bool cancelled(const rf_seq *s) {
    return s->req && (s->req->cancel || (s->req->ext_cancel && *s->req->ext_cancel));
}

/* Frees a sequence that left the lists; its request once all its sequences are gone. */
static void drop_seq(rf_engine *e, rf_seq *s) {
    rf_req *q = s->req;
    rf_seq_free(s);
    if (q && --q->n_seqs == 0) rf_engine_release_req(e, q);
}

/* Removes finished sequences from the running list; frees request sequences and requests whose
 * choices are all done. */
static void retire(rf_engine *e) {
    int32_t w = 0;
    for (int32_t i = 0; i < e->running.n; i++) {
        rf_seq *s = e->running.v[i];
        if (s->state == RF_SEQ_RUNNING) {
            e->running.v[w++] = s;
            continue;
        }
        if (s->persistent) continue;
        drop_seq(e, s);
    }
    e->running.n = w;
}

/* Takes in what was submitted; cancelled sequences leave the queue or the batch. */
static void intake(rf_engine *e) {
    rf_engine_intake(e);
    for (int32_t i = 0; i < e->waiting.n; i++) {
        rf_seq *s = e->waiting.v[i];
        if (!cancelled(s)) continue;
        rf_seq_list_remove(&e->waiting, s);
        i--;
        rf_engine_finish_seq(e, s, RF_FINISH_CANCELLED, NULL);
        drop_seq(e, s);
    }
    for (int32_t i = 0; i < e->running.n; i++)
        if (e->running.v[i]->state == RF_SEQ_RUNNING && cancelled(e->running.v[i]))
            rf_engine_finish_seq(e, e->running.v[i], RF_FINISH_CANCELLED, NULL);
    retire(e);
}

/* The plan's bookkeeping: its counters, its failed sequences, its copy-on-write block copies. */
static rf_status apply_plan(rf_engine *e, const rf_step_plan *p) {
    e->st_preempt += p->n_preempted;
    e->st_hits += p->prefix_hits;
    for (int32_t i = 0; i < p->n_failed; i++) {
        rf_seq *s = p->failed[i];
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, p->failed_why[i]);
        drop_seq(e, s);
    }
    rf_status st = RF_OK;
    for (int32_t i = 0; i < p->n_copies && !st; i++) {
        st = rf_fwd_copy_block(e->m, &e->f, p->copies[i].dst, p->copies[i].src);
        if (!st && e->copy_hook) e->copy_hook(e->hook_user, p->copies[i].dst, p->copies[i].src);
    }
    rf_status rst = e->spool ? rf_engine_state_restore(e, p) : RF_OK; /* drops the plan's checkpoint references */
    return st ? st : rst;
}

/* The forward over the batch (or a recorded graph's replay) and the device's sampling. */
static rf_status run_batch(rf_engine *e, rf_step_batch *sb, int32_t n_items) {
    rf_backend *be = e->m->be;
    int32_t bucket = sb->bucket;
    rf_batch b = {.n_tokens = bucket ? bucket : sb->n_tok, .ids = e->b_ids, .pos = e->b_pos, .seq = e->b_seq,
                  .slot = e->b_slot, .n_seqs = bucket ? bucket : n_items, .max_blocks = sb->max_blocks,
                  .block_size = e->block_size, .block_table = e->b_table,
                  .state_slot = e->spool ? e->b_state : NULL, .n_out = bucket ? bucket : sb->n_out,
                  .out_rows = e->b_out, .max_pos = bucket ? e->n_ctx - 1 : 0, .n_sample = sb->n_rows,
                  .n_pen = sb->n_pen, .sample_rows = e->s_rows, .pen_ids = e->pen_ids, .pen_counts = e->pen_counts,
                  .n_mask = sb->n_mask, .mask_words = e->s_mask_words, .masks = sb->masked ? e->s_masks : NULL,
                  .dev = NULL};
    rf_status st;
    if (sb->gmode == RF_GRAPH_REPLAY) st = be->ops->batch_upload(be, &b);
    else
        st = e->fwd_hook ? e->fwd_hook(e->hook_user, e, &b, e->b_seqs, e->logits)
                         : rf_forward(e->m, &e->f, &b, sb->dev_sample ? NULL : e->logits);
    if (!st) st = rf_model_graph_others(e->m, &b, sb->gmode); /* a split's other GPUs, before GPU 0 samples */
    if (!st && sb->dev_sample) st = be->ops->sample(be, &e->f.logits, &b, e->s_ids);
    return st;
}

/* After the forward: advance, publish, hand out the outputs. */
static void outputs(rf_engine *e, const rf_step_plan *p, bool dev_sample) {
    int32_t row = 0, nv = e->m->hp.n_vocab;
    for (int32_t i = 0; i < p->n_items; i++) {
        rf_seq *s = p->items[i].s;
        int32_t n = p->items[i].n;
        bool last = s->n_computed + n == s->n_tokens;
        if (s->n_computed < s->n_prompt) {
            int32_t pe = s->n_computed + n < s->n_prompt ? s->n_computed + n : s->n_prompt;
            e->st_prompt += pe - s->n_computed;
        }
        s->n_computed += n;
        if (s->pooling) { /* an embedding request: its hidden rows, not published (pooling.c) */
            rf_embed_take(e, s, n);
            continue;
        }
        rf_seq_publish_blocks(s, e->pool, e->block_size);
        if (e->spool && rf_engine_state_save(e, s, n)) rf_log(RF_LOG_WARN, "state checkpoint: %s", rf_last_error());
        int32_t rows = s->want_all ? n : ((last && (s->gen || s->logits_dst)) ? 1 : 0);
        const float *lg = e->logits + (size_t)row * nv;
        row += rows;
        if (s->logits_dst && rows) {
            memcpy(s->logits_dst, lg, (size_t)rows * nv * sizeof(float));
            s->logits_dst += (size_t)rows * nv;
        }
        if (s->gen && last && s->state == RF_SEQ_RUNNING) {
            if (!dev_sample) rf_engine_on_output(e, s, lg + (size_t)(rows - 1) * nv);
            else if (!rf_engine_pre_sample(e, s))
                rf_engine_on_token(e, s, rf_sampler_grammar_pick(s->smp, e->s_ids[row - 1], e->s_none[row - 1]), NULL);
        }
    }
}

/* The step failed: its sequences fail (a session's is left to its caller). */
static rf_status fail_step(rf_engine *e, const rf_step_plan *p, rf_seq *only, rf_status st) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s", rf_last_error());
    for (int32_t i = 0; i < p->n_items; i++)
        if (!p->items[i].s->persistent) rf_engine_finish_seq(e, p->items[i].s, RF_FINISH_ERROR, msg);
    if (!only) retire(e);
    rf_engine_snapshot(e);
    return rf_set_error(st, "%s", msg);
}

rf_status rf_engine_exec_step(rf_engine *e, rf_seq *only) {
    const double t_step = e->trace ? rf_now_ms() : 0;
    /* the model's (first) GPU current on this thread: serve steps from a thread of its own */
    rf_status ust = rf_model_use(e->m, 0);
    if (ust) return ust;
    if (!only) intake(e);
    rf_step_plan *p = &e->plan;
    rf_sched sc = {.pool = e->pool, .spool = e->spool, .running = &e->running, .waiting = &e->waiting, .block_size = e->block_size,
                   .n_batch = e->n_batch, .n_parallel = e->n_parallel,
                   .n_step = (int32_t)rf_knob_int(RF_KNOB_STEP_TOKENS), .n_prompt_min = (int32_t)rf_knob_int(RF_KNOB_STEP_PROMPT_MIN)};
    rf_status st = rf_sched_plan(&sc, only, p);
    rf_status cst = apply_plan(e, p);
    if (!st) st = cst;
    if (!st && p->n_items == 0) {
        rf_engine_snapshot(e);
        return RF_OK;
    }
    rf_step_batch sb = {.gmode = RF_GRAPH_NONE};
    if (!st) st = rf_step_build(e, p, &sb);
    if (!st) st = rf_step_embed_rows(e, p, &sb); /* embedding requests' rows (pooling.c) */
    if (!st) st = rf_step_graph_pad(e, p, &sb);
    if (!st && sb.dev_sample) st = rf_step_sample_rows(e, p, &sb);
    if (!st) st = run_batch(e, &sb, p->n_items);
    if (st && sb.gmode != RF_GRAPH_NONE) rf_model_graph_abort(e->m);
    if (st) return fail_step(e, p, only, st);
    e->st_steps++;
    if (e->trace) rf_engine_trace_step(e, &sb, p->n_items, t_step);
    outputs(e, p, sb.dev_sample);
    if (!only) retire(e);
    else if (only->state != RF_SEQ_RUNNING) rf_seq_list_remove(&e->running, only);
    rf_engine_snapshot(e);
    return RF_OK;
}

bool rf_engine_wait(rf_engine *e, int timeout_ms) {
    pthread_mutex_lock(&e->mu);
    if (timeout_ms < 0) {
        while (!e->n_active_reqs && !e->wake) pthread_cond_wait(&e->cv, &e->mu);
    } else if (!e->n_active_reqs && !e->wake) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!e->n_active_reqs && !e->wake)
            if (pthread_cond_timedwait(&e->cv, &e->mu, &ts)) break;
    }
    bool work = e->n_active_reqs > 0;
    e->wake = false;
    pthread_mutex_unlock(&e->mu);
    return work;
}

void rf_engine_wake(rf_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->wake = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

rf_status rf_engine_run(rf_engine *e) {
    for (;;) {
        pthread_mutex_lock(&e->mu);
        bool more = e->n_active_reqs > 0;
        pthread_mutex_unlock(&e->mu);
        if (!more) return RF_OK;
        rf_status st = rf_engine_step(e);
        if (st) return st;
    }
}

rf_status rf_engine_step(rf_engine *e) {
    if (!e) return rf_set_error(RF_ERR_INVALID_ARG, "step: engine is NULL");
    return rf_engine_exec_step(e, NULL);
}

