/* scheduler.c — one step of continuous batching (docs/ARCHITECTURE.md §4.4): cancel what was
 * cancelled, give every running sequence's next token a place in the step's token budget (decodes first, then
 * prompt chunks), admit waiting sequences first come first served (their prompt's full blocks
 * looked up in the prefix cache), find KV blocks for every scheduled position (copy-on-write
 * of a shared block; when the pool is empty the newest sequence is preempted), run the one
 * forward over the batch, then sample, publish full blocks, and retire finished sequences. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

typedef struct item {
    rf_seq *s;
    int32_t n; /* tokens of s in this step; 0 = dropped (preempted) */
} item;

void rf_seq_release_blocks(rf_engine *e, rf_seq *s) {
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) rf_kv_pool_unref(e->pool, s->blocks[i]);
    s->n_blocks = 0;
    s->n_hashed = 0;
    s->n_computed = 0;
    s->lookup_done = false;
    rf_seq_state_release(e, s);
}

static void list_remove(rf_seq **list, int32_t *n, rf_seq *s) {
    for (int32_t i = 0; i < *n; i++)
        if (list[i] == s) {
            memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
            (*n)--;
            return;
        }
}

/* The newest running sequence (the preemption victim), or NULL. */
static rf_seq *newest_running(rf_engine *e) {
    for (int32_t i = e->n_running - 1; i >= 0; i--)
        if (!e->running[i]->persistent) return e->running[i];
    return NULL;
}

/* Frees a running sequence's blocks and queues it again; it recomputes everything it holds
 * (prompt and generated tokens) when readmitted, the prefix cache permitting less. */
static void preempt(rf_engine *e, rf_seq *s) {
    rf_seq_release_blocks(e, s);
    list_remove(e->running, &e->n_running, s);
    e->st_preempt++;
    if (!rf_engine_queue_waiting(e, s)) rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "out of memory while preempting");
}

/* Blocks for positions [s->n_computed, upto): a private copy of a shared partial block, then
 * fresh blocks. false when the pool has none left (what was taken stays with s). */
static bool ensure_blocks(rf_engine *e, rf_seq *s, int32_t upto, rf_status *st) {
    int32_t B = e->block_size, bi = s->n_computed / B;
    if (bi < s->n_blocks && !rf_kv_pool_writable(e->pool, s->blocks[bi])) {
        int32_t nb = rf_kv_pool_alloc(e->pool);
        if (nb < 0) return false;
        if ((*st = rf_fwd_copy_block(e->m, &e->f, nb, s->blocks[bi]))) {
            rf_kv_pool_unref(e->pool, nb);
            return true; /* the caller sees *st */
        }
        if (e->copy_hook) e->copy_hook(e->hook_user, nb, s->blocks[bi]);
        rf_kv_pool_unref(e->pool, s->blocks[bi]);
        s->blocks[bi] = nb;
    }
    while (s->n_blocks * B < upto) {
        int32_t nb = rf_kv_pool_alloc(e->pool);
        if (nb < 0) return false;
        s->blocks[s->n_blocks++] = nb;
    }
    return true;
}

/* Looks the prompt's leading full blocks up in the prefix cache (once per admission). At
 * least the last token is left to compute, so its logits come out of the step. */
static void prefix_lookup(rf_engine *e, rf_seq *s) {
    if (s->lookup_done) return;
    s->lookup_done = true;
    if (!rf_kv_pool_prefix_cache(e->pool) || s->n_blocks > 0) return;
    int32_t B = e->block_size;
    for (int32_t bi = 0; (bi + 1) * B <= s->n_tokens; bi++) {
        uint64_t parent = bi ? s->hashes[bi - 1] : 0;
        int32_t blk = rf_kv_pool_lookup(e->pool, parent, s->tokens + bi * B);
        if (blk < 0) break;
        s->blocks[s->n_blocks++] = blk;
        s->hashes[bi] = rf_kv_block_hash(parent, s->tokens + bi * B, B);
        s->n_hashed = bi + 1;
    }
    int32_t hit = s->n_blocks * B;
    if (hit > s->n_tokens - 1) hit = s->n_tokens - 1;
    s->n_computed = hit;
    if (!s->admitted) { /* a re-admitted (preempted) sequence's hits are recomputation saved, not prompt */
        s->n_cached = hit;
        e->st_hits += hit;
    }
}

/* Admits the head of the waiting queue if the pool can take its remaining prompt with a block
 * of headroom per running sequence. */
static bool admit(rf_engine *e, rf_seq *s) {
    prefix_lookup(e, s);
    int32_t B = e->block_size;
    int32_t need = (s->n_tokens + B - 1) / B - s->n_blocks;
    int32_t bi = s->n_computed / B;
    if (bi < s->n_blocks && !rf_kv_pool_writable(e->pool, s->blocks[bi])) need++;
    if (rf_kv_pool_available(e->pool) < need + e->n_running) {
        if (e->n_running > 0) { /* give the looked-up blocks back; retry next step */
            rf_seq_release_blocks(e, s);
            return false;
        }
    }
    list_remove(e->waiting, &e->n_waiting, s);
    s->admitted = true;
    if (!rf_engine_queue_running(e, s)) {
        rf_seq_release_blocks(e, s);
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "out of memory while admitting");
        return false;
    }
    return true;
}

static bool cancelled(const rf_seq *s) {
    return s->req && (s->req->cancel || (s->req->ext_cancel && *s->req->ext_cancel));
}

/* Publishes the full blocks s has completed, so later prompts can share them. */
static void publish_blocks(rf_engine *e, rf_seq *s) {
    if (!rf_kv_pool_prefix_cache(e->pool)) return;
    int32_t B = e->block_size;
    while ((s->n_hashed + 1) * B <= s->n_computed) {
        int32_t bi = s->n_hashed;
        uint64_t parent = bi ? s->hashes[bi - 1] : 0;
        s->hashes[bi] = rf_kv_block_hash(parent, s->tokens + bi * B, B);
        rf_kv_pool_publish(e->pool, s->blocks[bi], parent, s->tokens + bi * B);
        s->n_hashed++;
    }
}

/* Removes finished sequences from the running list; frees request sequences and requests whose
 * choices are all done. */
static void retire(rf_engine *e) {
    int32_t w = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        rf_seq *s = e->running[i];
        if (s->state == RF_SEQ_RUNNING) {
            e->running[w++] = s;
            continue;
        }
        if (s->persistent) continue;
        rf_req *q = s->req;
        rf_seq_free(s);
        if (q && --q->n_seqs == 0) rf_engine_release_req(e, q);
    }
    e->n_running = w;
}

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

/* One sampling record per output row (the sequences' own parameters, generator draws and
 * penalty windows) for the backend to sample on the device, padded to pad_to inert rows. A
 * sequence that finishes before sampling (max_tokens) draws nothing, as on the host. Returns
 * the number of rows. */
static rf_status sample_rows(rf_engine *e, const item *items, int32_t n_items, int32_t pad_to, int32_t *n_rows,
                             int32_t *n_pen_out) {
    int32_t r = 0, n_pen = 0;
    for (int32_t i = 0; i < n_items; i++) {
        rf_seq *s = items[i].s;
        if (s->n_computed + items[i].n != s->n_tokens) continue;
        const rf_sampler_params *p = rf_sampler_get_params(s->smp);
        rf_sample_row *row = &e->s_rows[r++];
        memset(row, 0, sizeof *row);
        row->temperature = p->temperature;
        row->top_k = p->top_k;
        row->top_p = p->top_p;
        row->min_p = p->min_p;
        row->repeat_penalty = p->repeat_penalty;
        row->presence_penalty = p->presence_penalty;
        row->frequency_penalty = p->frequency_penalty;
        if (s->req->max_tokens >= 0 && s->n_gen >= s->req->max_tokens) continue; /* finishes unsampled */
        row->u = rf_sampler_draw(s->smp);
        for (;;) {
            int32_t got = rf_sampler_penalties(s->smp, e->pen_ids ? e->pen_ids + n_pen : NULL,
                                               e->pen_counts ? e->pen_counts + n_pen : NULL, e->pen_cap - n_pen);
            if (n_pen + got <= e->pen_cap) {
                row->pen_off = n_pen;
                row->pen_n = got;
                n_pen += got;
                break;
            }
            int32_t cap = (n_pen + got) * 2;
            int32_t *a = realloc(e->pen_ids, (size_t)cap * sizeof(int32_t));
            if (!a) return rf_set_error(RF_ERR_OOM, "sampling: out of memory");
            e->pen_ids = a;
            a = realloc(e->pen_counts, (size_t)cap * sizeof(int32_t));
            if (!a) return rf_set_error(RF_ERR_OOM, "sampling: out of memory");
            e->pen_counts = a;
            e->pen_cap = cap;
        }
    }
    for (; r < pad_to; r++) memset(&e->s_rows[r], 0, sizeof e->s_rows[r]); /* padding: greedy, ignored */
    *n_rows = r;
    *n_pen_out = n_pen;
    return RF_OK;
}

rf_status rf_sched_step(rf_engine *e, rf_seq *only) {
    int32_t B = e->block_size;
    rf_status st = RF_OK;
    const double t_step = e->trace ? rf_now_ms() : 0;
    if (!only) {
        rf_engine_intake(e);
        /* cancellations: queued ones leave the queue, running ones the batch */
        for (int32_t i = 0; i < e->n_waiting; i++) {
            rf_seq *s = e->waiting[i];
            if (!cancelled(s)) continue;
            list_remove(e->waiting, &e->n_waiting, s);
            i--;
            rf_engine_finish_seq(e, s, RF_FINISH_CANCELLED, NULL);
            rf_req *q = s->req;
            rf_seq_free(s);
            if (q && --q->n_seqs == 0) rf_engine_release_req(e, q);
        }
        for (int32_t i = 0; i < e->n_running; i++)
            if (e->running[i]->state == RF_SEQ_RUNNING && cancelled(e->running[i]))
                rf_engine_finish_seq(e, e->running[i], RF_FINISH_CANCELLED, NULL);
        retire(e);
    }

    /* ---- choose the step's tokens ---- */
    int32_t cap_items = e->n_running + e->n_waiting + 1;
    item *items = malloc((size_t)cap_items * sizeof *items);
    if (!items) return rf_set_error(RF_ERR_OOM, "step: out of memory");
    int32_t n_items = 0, budget = e->n_batch;
    if (only) {
        int32_t need = only->n_tokens - only->n_computed;
        items[n_items++] = (item){only, need < budget ? need : budget};
    } else {
        for (int pass = 0; pass < 2; pass++) /* decodes first, then prompt chunks */
            for (int32_t i = 0; i < e->n_running && budget > 0; i++) {
                rf_seq *s = e->running[i];
                int32_t need = s->n_tokens - s->n_computed;
                if (need <= 0 || (pass == 0) != (need == 1)) continue;
                int32_t take = need < budget ? need : budget;
                items[n_items++] = (item){s, take};
                budget -= take;
            }
        while (budget > 0 && e->n_waiting > 0 && e->n_running < e->n_parallel) {
            rf_seq *s = e->waiting[0];
            if (!admit(e, s)) break;
            int32_t need = s->n_tokens - s->n_computed;
            int32_t take = need < budget ? need : budget;
            items[n_items++] = (item){s, take};
            budget -= take;
        }
    }

    /* ---- recurrent-state slots (hybrid models): one per sequence, or it sits this step out
     * (before the KV blocks, so a sequence that cannot run takes none) ---- */
    for (int32_t i = 0; i < n_items && e->spool; i++)
        if (items[i].n && rf_seq_state_slot(e, items[i].s) == -2) items[i].n = 0;

    /* ---- KV blocks for every scheduled position, preempting the newest when out ---- */
    for (int32_t i = 0; i < n_items && !st; i++) {
        rf_seq *s = items[i].s;
        if (!items[i].n) continue;
        while (!ensure_blocks(e, s, s->n_computed + items[i].n, &st)) {
            rf_seq *victim = newest_running(e);
            if (!victim) {
                st = rf_set_error(RF_ERR_OOM, "the KV pool of %d blocks is exhausted", rf_kv_pool_n_blocks(e->pool));
                break;
            }
            preempt(e, victim);
            for (int32_t k = 0; k < n_items; k++)
                if (items[k].s == victim) items[k].n = 0;
            if (victim == s) break;
        }
    }

    /* ---- the batch ---- */
    int32_t n_tok = 0, n_out = 0, n_seqs = 0, max_blocks = 1;
    for (int32_t i = 0; i < n_items; i++)
        if (items[i].n) {
            items[n_seqs++] = items[i];
            if (items[i].s->n_blocks > max_blocks) max_blocks = items[i].s->n_blocks;
        }
    n_items = n_seqs;
    if (!st && n_items == 0) {
        free(items);
        rf_engine_snapshot(e);
        return RF_OK;
    }
    if (!st) st = grow(&e->b_table, &e->b_table_cap, n_items * max_blocks);
    for (int32_t i = 0; i < n_items && !st; i++) {
        rf_seq *s = items[i].s;
        bool last = s->n_computed + items[i].n == s->n_tokens;
        for (int32_t k = 0; k < items[i].n; k++) {
            int32_t p = s->n_computed + k;
            e->b_ids[n_tok] = s->tokens[p];
            e->b_pos[n_tok] = p;
            e->b_seq[n_tok] = i;
            e->b_slot[n_tok] = s->blocks[p / B] * B + p % B;
            if (s->want_all || (last && k == items[i].n - 1 && (s->gen || s->logits_dst))) e->b_out[n_out++] = n_tok;
            n_tok++;
        }
        memcpy(e->b_table + (size_t)i * max_blocks, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
        if (e->spool) e->b_state[i] = s->state_ref - 1;
        e->b_seqs[i] = s;
    }
    int32_t nv = e->m->hp.n_vocab;
    if (!st && (size_t)n_out * nv > e->logits_cap) {
        float *l = realloc(e->logits, (size_t)n_out * nv * sizeof(float));
        if (!l) st = rf_set_error(RF_ERR_OOM, "logits of %d rows: out of memory", n_out);
        else {
            e->logits = l;
            e->logits_cap = (size_t)n_out * nv;
        }
    }
    /* sample on the device (only ids come back) when every output is a plain generation step */
    bool dev_sample = e->m->be->ops->sample && !e->fwd_hook && !e->logits_hook && n_out > 0 && n_out <= e->f.logit_rows;
    for (int32_t i = 0; i < n_items && dev_sample; i++) {
        rf_seq *s = items[i].s;
        bool out = s->want_all || (s->n_computed + items[i].n == s->n_tokens && (s->gen || s->logits_dst));
        if (out && (!s->gen || s->want_all || s->logits_dst || s->fork_left > 0 || s->req->logprobs >= 0))
            dev_sample = false;
    }
    /* a decode step (one token per sequence, all sampled on the device) runs as a recorded graph
     * of its batch-size bucket: padded with inert tokens (position -1, no slot) to the bucket,
     * block-table stride and position bound fixed, so the recording fits every such step */
    rf_backend *be = e->m->be;
    int32_t bucket = 0, gmode = RF_GRAPH_NONE, n_real = n_items;
    if (!st && dev_sample && be->ops->graph_begin && e->graphs && n_tok == n_items && n_out == n_items) {
        bucket = 1;
        while (bucket < n_tok) bucket *= 2;
        bool ok = bucket <= e->n_batch && bucket <= e->f.logit_rows;
        for (int32_t i = 0; i < n_items && ok; i++) {
            const rf_sampler_params *p = rf_sampler_get_params(items[i].s->smp);
            bool pen = p->repeat_last_n != 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0 ||
                                                 p->frequency_penalty != 0);
            if (pen && (p->repeat_last_n < 0 || p->repeat_last_n > 64)) ok = false; /* the graph carries 64 */
        }
        if (ok && (st = grow(&e->b_table, &e->b_table_cap, bucket * e->max_blocks)) == RF_OK) {
            /* re-lay the block tables at the fixed stride, then pad */
            for (int32_t i = n_items - 1; i >= 0; i--) {
                memmove(e->b_table + (size_t)i * e->max_blocks, e->b_table + (size_t)i * max_blocks,
                        (size_t)max_blocks * sizeof(int32_t));
            }
            for (int32_t t = n_tok; t < bucket; t++) {
                e->b_ids[t] = 0;
                e->b_pos[t] = -1;
                e->b_seq[t] = t;
                e->b_slot[t] = -1;
                e->b_out[t] = t;
                memset(e->b_table + (size_t)t * e->max_blocks, 0, (size_t)e->max_blocks * sizeof(int32_t));
            }
            max_blocks = e->max_blocks;
            gmode = rf_model_graph_begin(e->m, &e->f, bucket); /* every GPU of a split */
        } else {
            bucket = 0;
        }
    }
    int32_t n_rows = 0, n_pen = 0;
    if (!st && dev_sample) st = sample_rows(e, items, n_real, bucket, &n_rows, &n_pen);
    if (!st) {
        int32_t nb = bucket ? bucket : n_tok;
        rf_batch b = {.n_tokens = nb, .ids = e->b_ids, .pos = e->b_pos, .seq = e->b_seq, .slot = e->b_slot,
                      .n_seqs = bucket ? bucket : n_items, .max_blocks = max_blocks, .block_size = B,
                      .block_table = e->b_table, .state_slot = e->spool ? e->b_state : NULL, .n_out = bucket ? bucket : n_out, .out_rows = e->b_out,
                      .max_pos = bucket ? e->n_ctx - 1 : 0, .n_sample = n_rows, .n_pen = n_pen,
                      .sample_rows = e->s_rows, .pen_ids = e->pen_ids, .pen_counts = e->pen_counts, .dev = NULL};
        if (gmode == RF_GRAPH_REPLAY) st = be->ops->batch_upload(be, &b);
        else
            st = e->fwd_hook ? e->fwd_hook(e->hook_user, e, &b, e->b_seqs, e->logits)
                             : rf_forward(e->m, &e->f, &b, dev_sample ? NULL : e->logits);
        if (!st) st = rf_model_graph_others(e->m, &b, gmode); /* a split's other GPUs, before GPU 0 samples */
        if (!st && dev_sample) st = be->ops->sample(be, &e->f.logits, &b, e->s_ids);
    }
    if (st && gmode != RF_GRAPH_NONE) rf_model_graph_abort(e->m);
    if (st) {
        /* the step failed: its sequences fail (a session's is left to its caller) */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", rf_last_error());
        for (int32_t i = 0; i < n_items; i++)
            if (!items[i].s->persistent) rf_engine_finish_seq(e, items[i].s, RF_FINISH_ERROR, msg);
        free(items);
        if (!only) retire(e);
        rf_engine_snapshot(e);
        return rf_set_error(st, "%s", msg);
    }
    e->st_steps++;
    (void)t_step; /* read by the GPU step trace only */
#ifdef RF_HAVE_GPU
    if (e->trace && rf_backend_on_device(be)) { /* RF_GPU_STEP_TRACE=1: what crossed the bus */
        int64_t up, down, launch;
        rf_backend_gpu_counters(be, &up, &down, &launch);
        fprintf(stderr, "[step %lld] %d tokens (%d sequences, bucket %d, %s): %lld upload(s), %lld download(s), %lld graph launch(es), %.2f ms\n",
                (long long)e->st_steps, n_tok, n_real, bucket,
                gmode == RF_GRAPH_REPLAY ? "graph replayed" : gmode == RF_GRAPH_CAPTURE ? "graph recorded" : "eager",
                (long long)(up - e->tr_up), (long long)(down - e->tr_down), (long long)(launch - e->tr_launch),
                rf_now_ms() - t_step);
        e->tr_up = up;
        e->tr_down = down;
        e->tr_launch = launch;
    }
#endif

    /* ---- after the forward: advance, publish, hand out the outputs ---- */
    int32_t row = 0;
    for (int32_t i = 0; i < n_items; i++) {
        rf_seq *s = items[i].s;
        int32_t n = items[i].n;
        bool last = s->n_computed + n == s->n_tokens;
        if (s->n_computed < s->n_prompt) {
            int32_t pe = s->n_computed + n < s->n_prompt ? s->n_computed + n : s->n_prompt;
            e->st_prompt += pe - s->n_computed;
        }
        s->n_computed += n;
        publish_blocks(e, s);
        int32_t rows = s->want_all ? n : ((last && (s->gen || s->logits_dst)) ? 1 : 0);
        const float *lg = e->logits + (size_t)row * nv;
        row += rows;
        if (s->logits_dst && rows) {
            memcpy(s->logits_dst, lg, (size_t)rows * nv * sizeof(float));
            s->logits_dst += (size_t)rows * nv;
        }
        if (s->gen && last && s->state == RF_SEQ_RUNNING) {
            if (!dev_sample) rf_engine_on_output(e, s, lg + (size_t)(rows - 1) * nv);
            else if (!rf_engine_pre_sample(e, s)) rf_engine_on_token(e, s, e->s_ids[row - 1], NULL);
        }
    }
    free(items);
    if (!only) retire(e);
    else if (only->state != RF_SEQ_RUNNING) list_remove(e->running, &e->n_running, only);
    rf_engine_snapshot(e);
    return RF_OK;
}
