/* scheduler.c — the step planner of continuous batching (docs/ARCHITECTURE.md §4.4): give every
 * running sequence's next token a place in the step's token budget (decodes first, then prompt
 * chunks within the prompt room, the rule in scheduler.h), admit waiting sequences first come
 * first served (their prompt's full blocks looked up in the prefix cache; a hybrid model's
 * resumed where a state checkpoint exists), find KV blocks for
 * every scheduled position (copy-on-write of a shared block; when the pool is empty the newest
 * sequence is preempted). It books blocks in the pool and moves sequences between the lists;
 * running the step is the engine's (engine_step.c). */
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"

static bool grow_arr(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *a = realloc(*p, (size_t)c * elem);
    if (!a) return false;
    *p = a;
    *cap = c;
    return true;
}

static rf_status add_item(rf_step_plan *p, rf_seq *s, int32_t n) {
    if (!grow_arr((void **)&p->items, &p->items_cap, p->n_items + 1, sizeof *p->items))
        return rf_set_error(RF_ERR_OOM, "step: out of memory");
    p->items[p->n_items++] = (rf_plan_item){s, n};
    return RF_OK;
}

/* s leaves both lists and is failed by the engine. */
static void add_failed(rf_step_plan *p, rf_seq *s, const char *why) {
    int32_t cap = p->failed_cap;
    if (!grow_arr((void **)&p->failed, &p->failed_cap, p->n_failed + 1, sizeof *p->failed)) return;
    if (p->failed_cap != cap) {
        const char **w = realloc(p->failed_why, (size_t)p->failed_cap * sizeof *w);
        if (!w) return;
        p->failed_why = w;
    }
    p->failed[p->n_failed] = s;
    p->failed_why[p->n_failed++] = why;
}

/* The newest running sequence (the preemption victim), or NULL. */
static rf_seq *newest_running(const rf_sched *sc) {
    for (int32_t i = sc->running->n - 1; i >= 0; i--)
        if (!sc->running->v[i]->persistent) return sc->running->v[i];
    return NULL;
}

/* Frees a running sequence's blocks and queues it again; it recomputes everything it holds
 * (prompt and generated tokens) when readmitted, the prefix cache permitting less. */
static void preempt(const rf_sched *sc, rf_seq *s, rf_step_plan *p) {
    rf_seq_release_blocks(s, sc->pool, sc->spool);
    rf_seq_list_remove(sc->running, s);
    p->n_preempted++;
    s->state = RF_SEQ_WAITING;
    if (!rf_seq_list_insert(sc->waiting, s)) add_failed(p, s, "out of memory while preempting");
}

/* Blocks for positions [s->n_computed, upto): a private copy of a shared partial block (the
 * copy itself is the engine's, before the forward), then fresh blocks. false when the pool has
 * none left (what was taken stays with s). */
static bool ensure_blocks(const rf_sched *sc, rf_seq *s, int32_t upto, rf_step_plan *p, rf_status *st) {
    int32_t B = sc->block_size, bi = s->n_computed / B;
    if (bi < s->n_blocks && !rf_kv_pool_writable(sc->pool, s->blocks[bi])) {
        if (!grow_arr((void **)&p->copies, &p->copies_cap, p->n_copies + 1, sizeof *p->copies)) {
            *st = rf_set_error(RF_ERR_OOM, "step: out of memory");
            return true; /* the caller sees *st */
        }
        int32_t nb = rf_kv_pool_alloc(sc->pool);
        if (nb < 0) return false;
        p->copies[p->n_copies].dst = nb;
        p->copies[p->n_copies++].src = s->blocks[bi];
        rf_kv_pool_unref(sc->pool, s->blocks[bi]);
        s->blocks[bi] = nb;
    }
    while (s->n_blocks * B < upto) {
        int32_t nb = rf_kv_pool_alloc(sc->pool);
        if (nb < 0) return false;
        s->blocks[s->n_blocks++] = nb;
    }
    return true;
}

/* A hybrid model with state checkpoints and a prefix cache (scheduler.h). */
static bool ckpt_on(const rf_sched *sc) {
    return sc->spool && rf_state_pool_n_ckpt(sc->spool) > 0 && rf_kv_pool_prefix_cache(sc->pool);
}

/* A hybrid model resumes only where a state checkpoint exists: the longest found prefix of
 * bi blocks (bi * B < n_tokens) with a checkpoint keyed by its hash chain keeps its blocks and
 * a reference to the checkpoint (restored before the step, rf_sched_plan); the blocks past it
 * go back (their positions are recomputed, the state has to pass through them). */
static void ckpt_resume(const rf_sched *sc, rf_seq *s) {
    int32_t B = sc->block_size, bi = s->n_blocks;
    while (bi > 0 && bi * B > s->n_tokens - 1) bi--;
    int32_t c = -1;
    for (; bi > 0 && c < 0; bi--)
        if ((c = rf_state_ckpt_lookup(sc->spool, s->hashes[bi - 1], bi * B)) >= 0) break;
    if (c < 0) bi = 0;
    for (int32_t i = s->n_blocks - 1; i >= bi; i--) rf_kv_pool_unref(sc->pool, s->blocks[i]);
    s->n_blocks = s->n_hashed = bi;
    s->ckpt_ref = c + 1;
}

/* Looks the prompt's leading full blocks up in the prefix cache (once per admission). At
 * least the last token is left to compute, so its logits come out of the step. */
static void prefix_lookup(const rf_sched *sc, rf_seq *s, rf_step_plan *p) {
    if (s->lookup_done) return;
    s->lookup_done = true;
    /* an embedding pools rows of every position it computes: none may come from the cache */
    if (!rf_kv_pool_prefix_cache(sc->pool) || s->n_blocks > 0 || s->pooling) return;
    int32_t B = sc->block_size;
    for (int32_t bi = 0; (bi + 1) * B <= s->n_tokens; bi++) {
        uint64_t parent = bi ? s->hashes[bi - 1] : 0;
        int32_t blk = rf_kv_pool_lookup(sc->pool, parent, s->tokens + bi * B);
        if (blk < 0) break;
        s->blocks[s->n_blocks++] = blk;
        s->hashes[bi] = rf_kv_block_hash(parent, s->tokens + bi * B, B);
        s->n_hashed = bi + 1;
    }
    if (sc->spool) ckpt_resume(sc, s);
    int32_t hit = s->n_blocks * B;
    if (hit > s->n_tokens - 1) hit = s->n_tokens - 1;
    s->n_computed = hit;
    if (!s->admitted) { /* a re-admitted (preempted) sequence's hits are recomputation saved, not prompt */
        s->n_cached = hit;
        p->prefix_hits += hit;
    }
}

/* A prompt chunk of `take` tokens cut at a block boundary (hybrid prefix cache, scheduler.h). */
static int32_t ckpt_cut(const rf_sched *sc, const rf_seq *s, int32_t take) {
    if (!ckpt_on(sc)) return take;
    int32_t B = sc->block_size, end = s->n_computed + take;
    if (end == s->n_tokens && end % B == 0) return take;
    int32_t a = (end == s->n_tokens ? end - 1 : end) / B * B;
    return a > s->n_computed ? a - s->n_computed : take;
}

/* Admits the head of the waiting queue if the pool can take its remaining prompt with a block
 * of headroom per running sequence. */
static bool admit(const rf_sched *sc, rf_seq *s, rf_step_plan *p) {
    prefix_lookup(sc, s, p);
    int32_t B = sc->block_size;
    int32_t need = (s->n_tokens + B - 1) / B - s->n_blocks;
    int32_t bi = s->n_computed / B;
    if (bi < s->n_blocks && !rf_kv_pool_writable(sc->pool, s->blocks[bi])) need++;
    if (rf_kv_pool_available(sc->pool) < need + sc->running->n) {
        if (sc->running->n > 0) { /* give the looked-up blocks back; retry next step */
            rf_seq_release_blocks(s, sc->pool, sc->spool);
            return false;
        }
    }
    rf_seq_list_remove(sc->waiting, s);
    s->admitted = true;
    s->state = RF_SEQ_RUNNING;
    if (!rf_seq_list_insert(sc->running, s)) {
        rf_seq_release_blocks(s, sc->pool, sc->spool);
        add_failed(p, s, "out of memory while admitting");
        return false;
    }
    return true;
}

int32_t rf_sched_prompt_room(int32_t n_batch, int32_t n_step, int32_t n_prompt_min, int32_t d) {
    if (d <= 0) return n_batch;
    int32_t cap = n_batch - d;
    if (cap <= 0) return 0;
    int32_t step = n_step > 0 && n_step < n_batch ? n_step : n_batch;
    int32_t want = step - d > n_prompt_min ? step - d : n_prompt_min;
    return want < cap ? (want > 0 ? want : 0) : cap;
}

/* The step's tokens: decodes first, then prompt chunks and admissions within the prompt room
 * (rf_sched_prompt_room). */
static rf_status choose(const rf_sched *sc, rf_seq *only, rf_step_plan *p) {
    int32_t budget = sc->n_batch;
    rf_status st = RF_OK;
    if (only) {
        int32_t need = only->n_tokens - only->n_computed;
        return add_item(p, only, need < budget ? need : budget);
    }
    int32_t d = 0;
    for (int32_t i = 0; i < sc->running->n && d < budget && !st; i++) {
        rf_seq *s = sc->running->v[i];
        if (s->n_tokens - s->n_computed != 1) continue;
        st = add_item(p, s, 1);
        d++;
    }
    budget = rf_sched_prompt_room(sc->n_batch, sc->n_step, sc->n_prompt_min, d);
    for (int32_t i = 0; i < sc->running->n && budget > 0 && !st; i++) {
        rf_seq *s = sc->running->v[i];
        int32_t need = s->n_tokens - s->n_computed;
        if (need <= 1) continue;
        int32_t take = ckpt_cut(sc, s, need < budget ? need : budget);
        st = add_item(p, s, take);
        budget -= take;
    }
    while (!st && budget > 0 && sc->waiting->n > 0 && sc->running->n < sc->n_parallel) {
        rf_seq *s = sc->waiting->v[0];
        if (!admit(sc, s, p)) break;
        int32_t need = s->n_tokens - s->n_computed;
        int32_t take = ckpt_cut(sc, s, need < budget ? need : budget);
        st = add_item(p, s, take);
        budget -= take;
    }
    return st;
}

rf_status rf_sched_plan(const rf_sched *sc, rf_seq *only, rf_step_plan *p) {
    p->n_items = p->n_copies = p->n_failed = p->n_preempted = 0;
    p->n_restores = 0;
    p->prefix_hits = p->ckpt_hits = 0;
    rf_status st = choose(sc, only, p);
    /* recurrent-state slots (hybrid models): one per sequence, or it sits this step out; taken
     * before the KV blocks, so a sequence that cannot run takes none (else slot-less forks could
     * hoard the pool and preempt the sequences that hold slots) */
    for (int32_t i = 0; i < p->n_items && sc->spool; i++)
        if (p->items[i].n && !rf_seq_take_state(p->items[i].s, sc->spool)) p->items[i].n = 0;
    /* a resumed sequence's checkpoint goes into its slot before the step (the plan now holds
     * the reference; a sequence preempted below was given its slot back, a harmless copy) */
    for (int32_t i = 0; i < p->n_items && sc->spool && !st; i++) {
        rf_seq *s = p->items[i].s;
        if (!p->items[i].n || !s->ckpt_ref) continue;
        if (!grow_arr((void **)&p->restores, &p->restores_cap, p->n_restores + 1, sizeof *p->restores)) {
            st = rf_set_error(RF_ERR_OOM, "step: out of memory");
            break;
        }
        p->restores[p->n_restores].slot = s->state_ref - 1;
        p->restores[p->n_restores++].ckpt = s->ckpt_ref - 1;
        s->ckpt_ref = 0;
        p->ckpt_hits++;
    }
    /* KV blocks for every scheduled position, preempting the newest when out */
    for (int32_t i = 0; i < p->n_items && !st; i++) {
        rf_seq *s = p->items[i].s;
        if (!p->items[i].n) continue;
        while (!ensure_blocks(sc, s, s->n_computed + p->items[i].n, p, &st)) {
            rf_seq *victim = newest_running(sc);
            if (!victim) {
                st = rf_set_error(RF_ERR_OOM, "the KV pool of %d blocks is exhausted", rf_kv_pool_n_blocks(sc->pool));
                break;
            }
            preempt(sc, victim, p);
            for (int32_t k = 0; k < p->n_items; k++)
                if (p->items[k].s == victim) p->items[k].n = 0;
            if (victim == s) break;
        }
    }
    int32_t w = 0; /* drop the preempted */
    for (int32_t i = 0; i < p->n_items; i++)
        if (p->items[i].n) p->items[w++] = p->items[i];
    p->n_items = w;
    return st;
}

void rf_step_plan_free(rf_step_plan *p) {
    free(p->items);
    free(p->copies);
    free(p->restores);
    free(p->failed);
    free(p->failed_why);
    memset(p, 0, sizeof *p);
}
