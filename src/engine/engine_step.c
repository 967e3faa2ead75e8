/* engine_step.c — the engine's step: intake and cancellations, the scheduler's plan executed
 * (block copies and state restores; the plan laid out as the forward's batch, a decode step padded
 * to its device-graph bucket, the device's sampling rows; the forward and sampling on the backend),
 * finished sequences retired; each output's token (sampled, or taken from the device), its
 * log-probabilities and text, its TOKEN event handed to the request's callback; and the loops
 * that drive the step (rf_engine_run until idle, rf_engine_serve: an engine thread's loop until
 * stopped). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/knobs.h"
#include "engine/engine_internal.h"
#include "engine/grammar.h"

/* ---- the step's batch: the plan laid out for the forward ---- */

static rf_status grow(int32_t **p, int32_t *cap, int32_t need) {
    if (need <= *cap) return RF_OK;
    int32_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    int32_t *a = realloc(*p, (size_t)c * sizeof(int32_t));
    if (!a) return rf_set_error(RF_ERR_OOM, "step: out of memory");
    *p = a;
    *cap = c;
    return RF_OK;
}

/* Whether s's last scheduled token gives an output row (or every token does: session logits). */
static bool wants_out(const rf_seq *s, int32_t n) {
    return s->want_all || (s->n_computed + n == s->n_tokens && (s->gen || s->logits_dst));
}

/* Sample on the device (only ids come back) when every output is a plain generation step. */
static bool dev_sample_ok(const rf_engine *e, const rf_step_plan *p, int32_t n_out) {
    if (!e->m->be->ops->sample || e->fwd_hook || e->logits_hook || n_out <= 0 || n_out > e->f.logit_rows) return false;
    for (int32_t i = 0; i < p->n_items; i++) {
        const rf_seq *s = p->items[i].s;
        if (wants_out(s, p->items[i].n) &&
            (!s->gen || s->want_all || s->logits_dst || s->fork_left > 0 || s->req->logprobs >= 0))
            return false;
    }
    return true;
}

rf_status rf_step_build(rf_engine *e, const rf_step_plan *p, rf_step_batch *sb) {
    int32_t B = e->block_size, n_tok = 0, n_out = 0, max_blocks = 1;
    memset(sb, 0, sizeof *sb);
    for (int32_t i = 0; i < p->n_items; i++)
        if (p->items[i].s->n_blocks > max_blocks) max_blocks = p->items[i].s->n_blocks;
    rf_status st = grow(&e->b_table, &e->b_table_cap, p->n_items * max_blocks);
    if (st) return st;
    for (int32_t i = 0; i < p->n_items; i++) {
        rf_seq *s = p->items[i].s;
        int32_t n = p->items[i].n;
        bool last = s->n_computed + n == s->n_tokens;
        for (int32_t k = 0; k < n; k++) {
            int32_t q = s->n_computed + k;
            e->b_ids[n_tok] = s->tokens[q];
            e->b_pos[n_tok] = q;
            e->b_seq[n_tok] = i;
            e->b_slot[n_tok] = s->blocks[q / B] * B + q % B;
            if (s->want_all || (last && k == n - 1 && (s->gen || s->logits_dst))) e->b_out[n_out++] = n_tok;
            n_tok++;
        }
        memcpy(e->b_table + (size_t)i * max_blocks, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
        if (e->spool) e->b_state[i] = s->state_ref - 1; /* taken by the planner */
        e->b_seqs[i] = s;
    }
    sb->n_tok = n_tok;
    sb->n_out = n_out;
    sb->max_blocks = max_blocks;
    sb->gmode = RF_GRAPH_NONE;
    int32_t nv = e->m->hp.n_vocab;
    if ((size_t)n_out * nv > e->logits_cap) {
        float *l = realloc(e->logits, (size_t)n_out * nv * sizeof(float));
        if (!l) return rf_set_error(RF_ERR_OOM, "logits of %d rows: out of memory", n_out);
        e->logits = l;
        e->logits_cap = (size_t)n_out * nv;
    }
    sb->dev_sample = dev_sample_ok(e, p, n_out);
    for (int32_t i = 0; i < p->n_items && sb->dev_sample; i++) /* a grammar's mask goes with the step */
        if (wants_out(p->items[i].s, p->items[i].n) && rf_sampler_has_grammar(p->items[i].s->smp)) sb->masked = true;
    return RF_OK;
}

int32_t rf_step_graph_bucket(int32_t n, int32_t cap) {
    for (int64_t p = 1; p <= cap; p *= 2) {
        if (p >= n) return (int32_t)p;
        if (p >= 2 && p + p / 2 >= n) return p + p / 2 <= cap ? (int32_t)(p + p / 2) : 0;
    }
    return 0;
}

int32_t rf_step_depth_bucket(int32_t max_p, int32_t n_ctx, int32_t *index) {
    const int64_t keys = rf_depth_bucket_keys(max_p < n_ctx ? max_p : n_ctx - 1);
    int32_t i = 0;
    for (int64_t k = RF_DEPTH_BUCKET_MIN; k < keys; k *= 2) i++;
    *index = i;
    return keys < n_ctx ? (int32_t)keys : n_ctx;
}

/* A decode step (one token per sequence, all sampled on the device) runs as a recorded graph of
 * its batch-size bucket (rf_step_graph_bucket, up to the logit rows: the power of two at least
 * --parallel, so every decode step has one): padded with inert tokens (position -1, no slot) to
 * the bucket, block-table stride fixed and the position bound that of its depth bucket
 * (rf_step_depth_bucket, part of the graph's key), so the recording fits every such step.
 * Buckets between the powers of two (3, 6, 12, ..., 192, 384) keep the padding of, say,
 * 129-192 or 257-384 sequences under a third. */
rf_status rf_step_graph_pad(rf_engine *e, const rf_step_plan *p, rf_step_batch *sb) {
    int32_t n_items = p->n_items, n_tok = sb->n_tok;
    if (!sb->dev_sample || !e->m->be->ops->graph_begin || !e->graphs || n_tok != n_items || sb->n_out != n_items)
        return RF_OK;
    int32_t bucket = rf_step_graph_bucket(n_tok, e->n_batch < e->f.logit_rows ? e->n_batch : e->f.logit_rows);
    bool ok = bucket > 0;
    for (int32_t i = 0; i < n_items && ok; i++) {
        const rf_sampler_params *sp = rf_sampler_get_params(p->items[i].s->smp);
        bool pen = sp->repeat_last_n != 0 &&
                   (sp->repeat_penalty != 1.0f || sp->presence_penalty != 0 || sp->frequency_penalty != 0);
        if (pen && (sp->repeat_last_n < 0 || sp->repeat_last_n > 64)) ok = false; /* the graph carries 64 */
    }
    if (!ok) return RF_OK;
    rf_status st = grow(&e->b_table, &e->b_table_cap, bucket * e->max_blocks);
    if (st) return st;
    /* re-lay the block tables at the fixed stride, then pad */
    for (int32_t i = n_items - 1; i >= 0; i--)
        memmove(e->b_table + (size_t)i * e->max_blocks, e->b_table + (size_t)i * sb->max_blocks,
                (size_t)sb->max_blocks * sizeof(int32_t));
    for (int32_t t = n_tok; t < bucket; t++) {
        e->b_ids[t] = 0;
        e->b_pos[t] = -1;
        e->b_seq[t] = t;
        e->b_slot[t] = -1;
        e->b_out[t] = t;
        memset(e->b_table + (size_t)t * e->max_blocks, 0, (size_t)e->max_blocks * sizeof(int32_t));
    }
    int32_t max_p = 0, depth;
    for (int32_t t = 0; t < n_tok; t++)
        if (e->b_pos[t] > max_p) max_p = e->b_pos[t];
    sb->max_pos = rf_step_depth_bucket(max_p, e->n_ctx, &depth) - 1;
    sb->max_blocks = e->max_blocks;
    sb->bucket = bucket;
    /* every GPU of a split; a masked step records apart (its upload holds the masks) */
    sb->gmode = rf_model_graph_begin(e->m, &e->f,
                                     (sb->masked ? bucket + RF_STEP_MASKED_KEY : bucket) + depth * RF_STEP_DEPTH_KEY);
    return RF_OK;
}

/* Makes room for n more penalty entries. */
static rf_status pen_room(rf_engine *e, int32_t need) {
    if (need <= e->pen_cap) return RF_OK;
    int32_t cap = need * 2;
    int32_t *a = realloc(e->pen_ids, (size_t)cap * sizeof(int32_t));
    if (!a) return rf_set_error(RF_ERR_OOM, "sampling: out of memory");
    e->pen_ids = a;
    a = realloc(e->pen_counts, (size_t)cap * sizeof(int32_t));
    if (!a) return rf_set_error(RF_ERR_OOM, "sampling: out of memory");
    e->pen_counts = a;
    e->pen_cap = cap;
    return RF_OK;
}

/* Writes the step's grammar masks (rf_batch.mask_fill; user: the engine): mask k is the one
 * s_mask_seq[k]'s sampler gives for its next draw (rf_sampler_grammar_mask), the host's byte
 * mask read as little-endian words (bit i % 32 of word i / 32 is bit i % 8 of byte i / 8: a
 * plain copy on a little-endian host). A grammar that admits nothing gets a mask of every
 * token, as if unmasked, and s_none set: the pick then ends the choice
 * (rf_sampler_grammar_pick). The backend calls this once inside the step: on the engine's
 * thread, or (the GPU's overlap) on the runtime's host thread while the engine's thread waits
 * in the step; either way nothing touches a sampler between rf_step_sample_rows and the step's
 * end, so it reads the state the rows were made from. */
static rf_status mask_fill(void *user, uint32_t *dst) {
    rf_engine *e = user;
    const size_t W = (size_t)e->s_mask_words, nb = ((size_t)e->m->hp.n_vocab + 7) / 8;
    for (int32_t k = 0; k < e->s_n_mask; k++, dst += W) {
        int32_t n_ok = 0;
        const uint8_t *m = rf_sampler_grammar_mask(e->s_mask_seq[k]->smp, &n_ok);
        if (!m || n_ok == 0) {
            e->s_none[e->s_mask_row[k]] = true;
            memset(dst, 0xff, W * sizeof(uint32_t));
            continue;
        }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        dst[W - 1] = 0; /* the tail bytes past nb */
        memcpy(dst, m, nb);
#else
        memset(dst, 0, W * sizeof(uint32_t));
        for (size_t i = 0; i < nb; i++) dst[i / 4] |= (uint32_t)m[i] << (8 * (i % 4));
#endif
    }
    return RF_OK;
}

/* One sampling record per output row (the sequences' own parameters, generator draws and
 * penalty windows) for the backend to sample on the device, padded to the bucket with inert
 * rows. A sequence that finishes before sampling (max_tokens) draws nothing, as on the host. */
rf_status rf_step_sample_rows(rf_engine *e, const rf_step_plan *p, rf_step_batch *sb) {
    int32_t r = 0, n_pen = 0;
    for (int32_t i = 0; i < p->n_items; i++) {
        rf_seq *s = p->items[i].s;
        if (s->n_computed + p->items[i].n != s->n_tokens) continue;
        const rf_sampler_params *sp = rf_sampler_get_params(s->smp);
        rf_sample_row *row = &e->s_rows[r++];
        memset(row, 0, sizeof *row);
        row->temperature = sp->temperature;
        row->top_k = sp->top_k;
        row->top_p = sp->top_p;
        row->min_p = sp->min_p;
        row->repeat_penalty = sp->repeat_penalty;
        row->presence_penalty = sp->presence_penalty;
        row->frequency_penalty = sp->frequency_penalty;
        e->s_none[r - 1] = false;
        if (s->req->max_tokens >= 0 && s->n_gen >= s->req->max_tokens) continue; /* finishes unsampled */
        row->u = rf_sampler_draw(s->smp);
        if (sb->masked && rf_sampler_has_grammar(s->smp)) { /* its mask: written by mask_fill */
            e->s_mask_seq[sb->n_mask] = s;
            e->s_mask_row[sb->n_mask] = r - 1;
            row->mask_ref = ++sb->n_mask;
        }
        for (;;) {
            int32_t got = rf_sampler_penalties(s->smp, e->pen_ids ? e->pen_ids + n_pen : NULL,
                                               e->pen_counts ? e->pen_counts + n_pen : NULL, e->pen_cap - n_pen);
            if (n_pen + got <= e->pen_cap) {
                row->pen_off = n_pen;
                row->pen_n = got;
                n_pen += got;
                break;
            }
            rf_status st = pen_room(e, n_pen + got);
            if (st) return st;
        }
    }
    for (; r < sb->bucket; r++) memset(&e->s_rows[r], 0, sizeof e->s_rows[r]); /* padding: greedy, ignored */
    e->s_n_mask = sb->n_mask;
    sb->n_rows = r;
    sb->n_pen = n_pen;
    return RF_OK;
}

/* ---- the step ---- */

/* RF_GPU_STEP_TRACE=1: prints what crossed the bus in the step just run (tokens, bucket, graph
 * mode, uploads, downloads, launches), a line a step on a device backend. */
static void trace_step(rf_engine *e, const rf_step_batch *sb, int32_t n_seqs, double t_step) {
    rf_backend *be = e->m->be;
    if (!rf_backend_on_device(be)) return;
    rf_backend_info bi = {0};
    be->ops->info(be, false, &bi);
    fprintf(stderr, "[step %lld] %d tokens (%d sequences, bucket %d, %s): %lld upload(s), %lld download(s), %lld graph launch(es), %.2f ms\n",
            (long long)e->st_steps, sb->n_tok, n_seqs, sb->bucket,
            sb->gmode == RF_GRAPH_REPLAY ? "graph replayed" : sb->gmode == RF_GRAPH_CAPTURE ? "graph recorded" : "eager",
            (long long)(bi.uploads - e->tr_up), (long long)(bi.downloads - e->tr_down),
            (long long)(bi.launches - e->tr_launch), rf_now_ms() - t_step);
    e->tr_up = bi.uploads;
    e->tr_down = bi.downloads;
    e->tr_launch = bi.launches;
}

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
                  .out_rows = e->b_out, .max_pos = bucket ? sb->max_pos : 0, .n_sample = sb->n_rows,
                  .n_pen = sb->n_pen, .sample_rows = e->s_rows, .pen_ids = e->pen_ids, .pen_counts = e->pen_counts,
                  .n_mask = sb->n_mask, .mask_words = e->s_mask_words, .mask_fill = sb->masked ? mask_fill : NULL,
                  .mask_user = e, .dev = NULL};
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
    if (e->trace) trace_step(e, &sb, p->n_items, t_step);
    outputs(e, p, sb.dev_sample);
    if (!only) retire(e);
    else if (only->state != RF_SEQ_RUNNING) rf_seq_list_remove(&e->running, only);
    rf_engine_snapshot(e);
    return RF_OK;
}

/* ---- a sequence's output: the token sampled (or taken from the device), its log-probabilities
 * and text, its TOKEN event handed to the request's callback; the other choices forked off ---- */

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

/* ---- the loops that drive the step ---- */

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

static bool serve_stopped(rf_engine *e) {
    pthread_mutex_lock(&e->mu);
    bool stop = e->serve_stop;
    pthread_mutex_unlock(&e->mu);
    return stop;
}

void rf_engine_serve(rf_engine *e, void (*on_error)(void *user, rf_status st), void *user) {
    while (!serve_stopped(e)) {
        if (!rf_engine_wait(e, 200)) continue;
        if (serve_stopped(e)) break;
        const int64_t steps = e->st_steps;
        rf_status st = rf_engine_step(e);
        if (st && on_error) on_error(user, st);
        if (e->st_steps == steps) {
            struct timespec ts = {0, 500000L}; /* nothing ran (only cancellations): do not spin */
            nanosleep(&ts, NULL);
        }
    }
}

void rf_engine_stop_serving(rf_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->serve_stop = true;
    pthread_mutex_unlock(&e->mu);
    rf_engine_wake(e);
}

rf_status rf_engine_step(rf_engine *e) {
    if (!e) return rf_set_error(RF_ERR_INVALID_ARG, "step: engine is NULL");
    return rf_engine_exec_step(e, NULL);
}

