/* test_engine_sched.c — the KV pool and the scheduler under a randomized workload: thousands of
 * steps of random arrivals (prompts sharing prefixes, 1-3 choices, greedy or seeded sampling),
 * random output lengths and cancellations, on a pool small enough to run out (preemption).
 * After every step every invariant is checked (rf_engine_check: no block owned twice,
 * reference counts exact, lists consistent); at the end every block is back (free or cached).
 *
 * The forward is replaced by a fake one that keeps, per pool row, the hash of the token prefix
 * that should be stored there, verifies before each step that every position a sequence reads
 * holds its own prefix's hash (so prefix sharing, copy-on-write and preemption never hand a
 * sequence someone else's K/V), and derives the logits from that hash: outputs are a function
 * of the prompt and seed only, so each finished request is re-run alone and must match.
 * A shorter run does the same with the real forward of a tiny model. Skips (77) without RF_CLI.
 *
 * The hybrid runs (tiny-qwen35: gated DeltaNet layers) add the recurrent-state slots and the
 * prefix cache's state checkpoints: the fake forward also keeps, per state row (slots, then
 * checkpoints), the hash of the prefix whose state it holds, follows every slot copy (forks,
 * checkpoint saves and restores), and verifies that a sequence resuming at position p > 0 reads
 * a slot holding its own first p tokens' state; every step checks slots and checkpoint
 * reference counts (rf_engine_check), and at the end every slot and checkpoint is back. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "engine/engine_internal.h"

static char g_model[1024], g_hybrid[1024];

static int setup(void **state) {
    (void)state;
    const char *cli = getenv("RF_CLI");
    if (!cli) return -1;
    snprintf(g_model, sizeof g_model, "%s/synth-models/sched-tiny.q8_0.gguf", RF_BINARY_DIR);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/synth-models' && '%s' mkmodel --preset tiny --type q8_0 -o '%s' >/dev/null 2>&1",
             RF_BINARY_DIR, cli, g_model);
    if (system(cmd) != 0) return -1;
    snprintf(g_hybrid, sizeof g_hybrid, "%s/synth-models/sched-tiny-qwen35.q8_0.gguf", RF_BINARY_DIR);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset tiny-qwen35 --type q8_0 -o '%s' >/dev/null 2>&1", cli, g_hybrid);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- the fake forward ------------------------------------------------------------------- */

typedef struct fake {
    uint64_t *shadow; /* per pool row: hash of the prefix stored there, 0 = never written */
    int64_t rows;
    int32_t nv, bs;
    int64_t checked;  /* positions verified */
    /* the planner's view before the step (snap_plan): running sequences with one token left
     * (decodes) and the prompt tokens the running prompts still need; preemptions so far */
    rf_seq *dec[4096];
    int32_t n_dec;
    int64_t prompt_need, preempt0;
    int32_t n_step, n_prompt_min; /* the knobs' values in this run */
    int64_t plans, decode_tok, prompt_tok, max_step; /* what the plans held */
    uint64_t *sshadow; /* hybrid: per state row (slot, then checkpoint): its prefix's hash */
    int64_t srows, resumed; /* state rows; sequences that resumed at p > 0 with a checked state */
    int64_t slotless_need; /* hybrid: prompt tokens of running sequences without a slot yet */
} fake;

static bool is_cancelled(const rf_seq *s) {
    return s->req && (s->req->cancel || (s->req->ext_cancel && *s->req->ext_cancel));
}

/* Before a step: what the planner will see (cancelled sequences leave before it plans). */
static void snap_plan(fake *f, const rf_engine *e) {
    f->n_dec = 0;
    f->prompt_need = f->slotless_need = 0;
    f->preempt0 = rf_engine_get_stat((rf_engine *)e, RF_STAT_PREEMPTIONS);
    for (int32_t i = 0; i < e->running.n; i++) {
        rf_seq *s = e->running.v[i];
        if (s->state != RF_SEQ_RUNNING || is_cancelled(s)) continue;
        int32_t need = s->n_tokens - s->n_computed;
        if (need == 1 && f->n_dec < 4096) f->dec[f->n_dec++] = s;
        else if (need > 1) f->prompt_need += need;
        if (need > 1 && !s->state_ref) f->slotless_need += need;
    }
}

/* The plan against the rule (scheduler.h): every sequence at most once with 1..need tokens,
 * at most --batch tokens; every decoding sequence still running holds the plan's first items
 * with one token each (a decode is never deferred); the prompt tokens after them fit the prompt
 * room of that many decodes, and, when nothing was preempted, fill it as far as the running
 * prompts need (admissions may add more, never past the room). */
static rf_status check_plan(fake *f, rf_engine *e) {
    const rf_step_plan *p = &e->plan;
    int64_t total = 0, prompt = 0;
    int32_t d = 0;
    for (int32_t i = 0; i < f->n_dec; i++)
        for (int32_t k = 0; k < e->running.n; k++)
            if (e->running.v[k] == f->dec[i]) d++;
    for (int32_t i = 0; i < p->n_items; i++) {
        const rf_seq *s = p->items[i].s;
        int32_t n = p->items[i].n, need = s->n_tokens - s->n_computed;
        if (n < 1 || n > need) return rf_set_error(RF_ERR_INTERNAL, "plan item %d: %d tokens of %d needed", i, n, need);
        for (int32_t k = 0; k < i; k++)
            if (p->items[k].s == s) return rf_set_error(RF_ERR_INTERNAL, "plan: a sequence twice (items %d, %d)", k, i);
        total += n;
        if (i < d) {
            bool dec = false;
            for (int32_t k = 0; k < f->n_dec && !dec; k++) dec = f->dec[k] == s;
            if (!dec || n != 1) return rf_set_error(RF_ERR_INTERNAL, "plan item %d of %d decodes is not a decode", i, d);
        } else
            prompt += n;
    }
    if (p->n_items < d) return rf_set_error(RF_ERR_INTERNAL, "plan: %d items for %d decodes", p->n_items, d);
    if (total > e->n_batch) return rf_set_error(RF_ERR_INTERNAL, "plan: %lld tokens, budget %d", (long long)total, e->n_batch);
    int32_t room = rf_sched_prompt_room(e->n_batch, f->n_step, f->n_prompt_min, d);
    if (prompt > room) return rf_set_error(RF_ERR_INTERNAL, "plan: %lld prompt tokens beside %d decodes, room %d", (long long)prompt, d, room);
    int64_t want = f->prompt_need < room ? f->prompt_need : room;
    if (e->spool) { /* hybrid: chunks cut at block boundaries, sequences without a slot sit out (scheduler.h) */
        want -= (int64_t)(e->block_size - 1) * (p->n_items - d + 1) + f->slotless_need;
    }
    if (rf_engine_get_stat(e, RF_STAT_PREEMPTIONS) == f->preempt0 && prompt < want)
        return rf_set_error(RF_ERR_INTERNAL, "plan: %lld prompt tokens beside %d decodes, room %d, running prompts need %lld",
                            (long long)prompt, d, room, (long long)f->prompt_need);
    f->plans++;
    f->decode_tok += d;
    f->prompt_tok += prompt;
    if (total > f->max_step) f->max_step = total;
    return RF_OK;
}


static uint64_t chain(uint64_t prev, int32_t tok, int32_t pos) {
    uint64_t z = prev ^ ((uint64_t)(uint32_t)tok * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)pos << 40);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) | 1; /* never 0 */
}

static int64_t row_of(const rf_seq *s, int32_t B, int32_t p) { return (int64_t)s->blocks[p / B] * B + p % B; }

static rf_status fake_forward(void *user, rf_engine *e, rf_batch *b, rf_seq *const *seqs, float *logits) {
    fake *f = user;
    rf_status pst = check_plan(f, e);
    if (pst) return pst;
    int32_t B = b->block_size, t = 0, out = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const rf_seq *s = seqs[i];
        int32_t p0 = b->pos[t], n = 0;
        while (t + n < b->n_tokens && b->seq[t + n] == i) n++;
        if (p0 != s->n_computed || p0 + n > s->n_tokens)
            return rf_set_error(RF_ERR_INTERNAL, "batch sequence %d: positions %d.. but %d computed", i, p0, s->n_computed);
        int64_t srow = -1;
        if (f->sshadow) {
            srow = b->state_slot ? b->state_slot[i] : -1;
            if (srow < 0 || srow >= e->n_parallel || srow != s->state_ref - 1)
                return rf_set_error(RF_ERR_INTERNAL, "batch sequence %d: state slot %lld, it holds %d", i, (long long)srow,
                                    s->state_ref - 1);
        }
        uint64_t h = 0;
        for (int32_t p = 0; p < p0 + n; p++) {
            h = chain(h, s->tokens[p], p);
            int64_t r = row_of(s, B, p);
            if (r < 0 || r >= f->rows) return rf_set_error(RF_ERR_INTERNAL, "row %lld outside the pool", (long long)r);
            if (p == p0 - 1 && srow >= 0) { /* the state it resumes from is its own prefix's */
                if (f->sshadow[srow] != h)
                    return rf_set_error(RF_ERR_INTERNAL, "a sequence resumes at %d from a state of another prefix", p0);
                f->resumed++;
            }
            if (p < p0) {
                if (f->shadow[r] != h)
                    return rf_set_error(RF_ERR_INTERNAL, "position %d of a sequence reads row %lld holding another prefix", p,
                                        (long long)r);
                f->checked++;
                continue;
            }
            int32_t k = t + (p - p0);
            if (b->pos[k] != p || b->ids[k] != s->tokens[p] || b->slot[k] != r)
                return rf_set_error(RF_ERR_INTERNAL, "token %d: position/id/slot do not match its sequence", k);
            f->shadow[r] = h;
            if (srow >= 0 && p == p0 + n - 1) f->sshadow[srow] = h;
            if (out < b->n_out && b->out_rows[out] == k) {
                float *lg = logits + (size_t)out * f->nv;
                uint64_t z = h;
                for (int32_t v = 0; v < f->nv; v++) {
                    z = z * 6364136223846793005ull + 1442695040888963407ull;
                    lg[v] = (float)((z >> 40) & 0xffff) / 8192.0f - 4.0f;
                }
                out++;
            }
        }
        t += n;
    }
    if (t != b->n_tokens || out != b->n_out) return rf_set_error(RF_ERR_INTERNAL, "batch layout: %d/%d tokens, %d/%d outputs",
                                                                 t, b->n_tokens, out, b->n_out);
    return RF_OK;
}

static void fake_state_copy(void *user, int32_t dst, int32_t src) {
    fake *f = user;
    if (dst >= 0 && dst < f->srows && src >= 0 && src < f->srows) f->sshadow[dst] = f->sshadow[src];
    else f->srows = -1; /* reported after the run */
}

static void fake_copy(void *user, int32_t dst, int32_t src) {
    fake *f = user;
    for (int32_t i = 0; i < f->bs; i++) f->shadow[(int64_t)dst * f->bs + i] = f->shadow[(int64_t)src * f->bs + i];
}

/* ---- requests and their results ---------------------------------------------------------- */

#define MAX_REQ 4096
#define MAX_GEN 64

typedef struct result {
    uint64_t id;
    int32_t n, done, prompt_n;
    int32_t prompt[160];
    double temp;
    uint64_t seed;
    int32_t max_tokens;
    bool ignore_eos, cancelled;
    int32_t ntok[3];
    int32_t tok[3][MAX_GEN + 2];
    rf_finish_reason finish[3];
} result;

static result g_res[MAX_REQ];
static int g_nres;

static bool on_ev(const rf_event *ev, void *user) {
    result *r = user;
    int c = rf_event_choice(ev);
    if (c < 0 || c >= r->n) fail_msg("event for choice %d of %d", c, r->n);
    if (rf_event_get_kind(ev) == RF_EVENT_TOKEN) {
        if (r->ntok[c] >= MAX_GEN + 2) fail_msg("more tokens than max_tokens");
        r->tok[c][r->ntok[c]++] = rf_event_token(ev);
    } else {
        r->finish[c] = rf_event_finish(ev);
        r->done++;
        if (r->done > r->n) fail_msg("request %llu: %d DONE events for %d choices", (unsigned long long)r->id, r->done, r->n);
    }
    return true;
}

static rf_engine *make_engine(rf_model *m, int ctx, int par, int batch, int blocks, int bs, bool prefix, fake *f) {
    rf_engine_config *c = rf_engine_config_new();
    rf_engine_config_set(c, RF_ENGINE_CTX, ctx);
    rf_engine_config_set(c, RF_ENGINE_PARALLEL, par);
    rf_engine_config_set(c, RF_ENGINE_BATCH, batch);
    rf_engine_config_set(c, RF_ENGINE_KV_BLOCKS, blocks);
    rf_engine_config_set(c, RF_ENGINE_BLOCK_SIZE, bs);
    rf_engine_config_set(c, RF_ENGINE_PREFIX_CACHE, prefix);
    rf_engine *e = NULL;
    if (rf_engine_new(m, c, &e)) fail_msg("engine: %s", rf_last_error());
    rf_engine_config_free(c);
    if (f) {
        f->rows = (int64_t)rf_engine_get_stat(e, RF_STAT_BLOCKS_TOTAL) * bs;
        f->shadow = calloc((size_t)f->rows, sizeof(uint64_t));
        f->nv = e->m->hp.n_vocab;
        e->fwd_hook = fake_forward;
        e->copy_hook = fake_copy;
        e->hook_user = f;
        f->bs = bs;
        if (e->spool) {
            f->srows = rf_engine_get_stat(e, RF_STAT_STATE_SLOTS) + rf_engine_get_stat(e, RF_STAT_STATE_CKPT_TOTAL);
            f->sshadow = calloc((size_t)f->srows, sizeof(uint64_t));
            e->state_copy_hook = fake_state_copy;
        }
    }
    return e;
}

/* One step with the plan checked (fake forward) and every invariant after it. */
static void step_checked(rf_engine *e, fake *f, const char *what, int step) {
    if (f) snap_plan(f, e);
    if (rf_engine_step(e)) fail_msg("%s step %d: %s", what, step, rf_last_error());
    if (rf_engine_check(e)) fail_msg("%s step %d: %s", what, step, rf_last_error());
}

static bool busy(rf_engine *e) {
    return rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0;
}

static rf_request *build(const result *r) {
    rf_request *q = rf_request_new();
    rf_request_set_prompt_ids(q, r->prompt, (size_t)r->prompt_n);
    rf_request_set(q, RF_REQ_MAX_TOKENS, r->max_tokens);
    rf_request_set(q, RF_REQ_N, r->n);
    rf_request_set(q, RF_REQ_TEMPERATURE, r->temp);
    rf_request_set(q, RF_REQ_SEED, (double)r->seed);
    rf_request_set(q, RF_REQ_IGNORE_EOS, r->ignore_eos);
    return q;
}

/* Random workload over `steps` steps on an engine of `par` sequences and a step of `batch`
 * tokens, with RF_STEP_TOKENS = n_step and RF_STEP_PROMPT_MIN = prompt_min; returns
 * preemptions and prefix hits through the stats. */
static void run_random(rf_model *m, int steps, bool fake_fwd, int bs, int blocks, int par, int batch, int n_step,
                       int prompt_min) {
    char v1[16], v2[16];
    snprintf(v1, sizeof v1, "%d", n_step);
    snprintf(v2, sizeof v2, "%d", prompt_min);
    if (rf_knob_override(RF_KNOB_STEP_TOKENS, v1) || rf_knob_override(RF_KNOB_STEP_PROMPT_MIN, v2))
        fail_msg("knobs: %s", rf_last_error());
    rf_rng rng;
    rf_rng_init(&rng, rf_test_seed());
    enum { NBASE = 4 };
    int32_t base[NBASE][128];
    int32_t nv = m->hp.n_vocab;
    for (int i = 0; i < NBASE; i++)
        for (int k = 0; k < 128; k++) base[i][k] = 10 + (int32_t)(rf_rng_u64(&rng) % (uint64_t)(nv - 20));
    static fake f;
    memset(&f, 0, sizeof f);
    f.n_step = n_step;
    f.n_prompt_min = prompt_min;
    const int ctx = 128;
    rf_engine *e = make_engine(m, ctx, par, batch, blocks, bs, true, fake_fwd ? &f : NULL);
    g_nres = 0;
    int n_cancel = 0, n_reject = 0;
    for (int step = 0; step < steps; step++) {
        int arrivals = (rf_rng_u64(&rng) % 100) < 35 ? 1 + (int)(rf_rng_u64(&rng) % 2) : 0;
        if (step > steps - 200) arrivals = 0; /* drain */
        for (int a = 0; a < arrivals && g_nres < MAX_REQ; a++) {
            result *r = &g_res[g_nres];
            memset(r, 0, sizeof *r);
            int b = (int)(rf_rng_u64(&rng) % NBASE);
            int shared = (int)(rf_rng_u64(&rng) % 100), extra = (int)(rf_rng_u64(&rng) % 24);
            r->prompt_n = shared + extra;
            if (r->prompt_n == 0) r->prompt_n = 1;
            if (rf_rng_u64(&rng) % 50 == 0) r->prompt_n = ctx + 1 + (int)(rf_rng_u64(&rng) % 20); /* too long */
            for (int k = 0; k < r->prompt_n; k++)
                r->prompt[k] = k < shared ? base[b][k] : 10 + (int32_t)(rf_rng_u64(&rng) % (uint64_t)(nv - 20));
            r->n = rf_rng_u64(&rng) % 6 == 0 ? 2 + (int)(rf_rng_u64(&rng) % 2) : 1;
            r->temp = rf_rng_u64(&rng) % 2 ? 0.0 : 0.9;
            r->seed = rf_rng_u64(&rng) % 1000;
            r->max_tokens = (int32_t)(rf_rng_u64(&rng) % (MAX_GEN + 1));
            r->ignore_eos = rf_rng_u64(&rng) % 2;
            rf_request *q = build(r);
            rf_request_set_callback(q, on_ev, r);
            rf_status st = rf_engine_submit(e, q, &r->id);
            rf_request_free(q);
            if (r->prompt_n > ctx) {
                if (st != RF_ERR_RANGE) fail_msg("a prompt of %d tokens in a context of %d: status %d", r->prompt_n, ctx, st);
                n_reject++;
                continue;
            }
            if (st) fail_msg("submit: %s", rf_last_error());
            g_nres++;
        }
        if (g_nres > 0 && rf_rng_u64(&rng) % 100 < 4) { /* cancel a random request (maybe finished) */
            result *r = &g_res[rf_rng_u64(&rng) % (uint64_t)g_nres];
            if (r->done < r->n && rf_engine_cancel(e, r->id) == RF_OK) {
                r->cancelled = true;
                n_cancel++;
            }
        }
        step_checked(e, fake_fwd ? &f : NULL, "random", step);
    }
    for (int step = 0; busy(e); step++) step_checked(e, fake_fwd ? &f : NULL, "drain", step);
    int64_t total = rf_engine_get_stat(e, RF_STAT_BLOCKS_TOTAL), used = rf_engine_get_stat(e, RF_STAT_BLOCKS_USED),
            fr = rf_engine_get_stat(e, RF_STAT_BLOCKS_FREE), ca = rf_engine_get_stat(e, RF_STAT_BLOCKS_CACHED);
    int64_t pre = rf_engine_get_stat(e, RF_STAT_PREEMPTIONS), hits = rf_engine_get_stat(e, RF_STAT_PREFIX_HIT_TOKENS);
    printf("  %s (parallel %d, batch %d, step tokens %d, prompt min %d): %d steps, %d requests (%d cancelled, %d "
           "refused), %lld preemptions, %lld prefix-hit tokens, %lld positions verified; blocks %lld used / %lld free / "
           "%lld cached of %lld\n",
           fake_fwd ? "fake forward" : "real forward", par, batch, n_step, prompt_min, steps, g_nres, n_cancel, n_reject,
           (long long)pre, (long long)hits, (long long)f.checked, (long long)used, (long long)fr, (long long)ca,
           (long long)total);
    if (fake_fwd)
        printf("    %lld plans checked: %lld decode and %lld prompt tokens, at most %lld in a step\n", (long long)f.plans,
               (long long)f.decode_tok, (long long)f.prompt_tok, (long long)f.max_step);
    assert_int_equal(used, 0);
    assert_int_equal(fr + ca, total);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_RUNNING), 0);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_WAITING), 0);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_REQUESTS_DONE), g_nres);
    assert_true(pre > 0);
    assert_true(hits > 0);
    if (e->spool) {
        int64_t ck = rf_engine_get_stat(e, RF_STAT_STATE_CKPT_HITS);
        printf("    state: %lld slots, %lld checkpoints (%lld holding a state), %lld resumed from one; %lld steps read a "
               "state, each its own prefix's\n",
               (long long)rf_engine_get_stat(e, RF_STAT_STATE_SLOTS), (long long)rf_engine_get_stat(e, RF_STAT_STATE_CKPT_TOTAL),
               (long long)rf_engine_get_stat(e, RF_STAT_STATE_CKPT_USED), (long long)ck, (long long)f.resumed);
        if (fake_fwd && f.srows < 0) fail_msg("a state copy outside the slots and checkpoints");
        assert_int_equal(rf_engine_get_stat(e, RF_STAT_STATE_SLOTS_USED), 0);
        assert_int_equal(rf_state_pool_n_free(e->spool), rf_state_pool_n_slots(e->spool));
        assert_true(ck > 0);
        if (rf_engine_check(e)) fail_msg("after the run: %s", rf_last_error()); /* no checkpoint referenced */
    }
    for (int i = 0; i < g_nres; i++) {
        result *r = &g_res[i];
        if (r->done != r->n) fail_msg("request %d: %d of %d choices finished", i, r->done, r->n);
        for (int c = 0; c < r->n && !r->cancelled; c++) {
            if (r->finish[c] == RF_FINISH_LENGTH && r->ntok[c] != r->max_tokens)
                fail_msg("request %d choice %d: length finish after %d of %d tokens", i, c, r->ntok[c], r->max_tokens);
            if (r->finish[c] == RF_FINISH_CANCELLED || r->finish[c] == RF_FINISH_ERROR)
                fail_msg("request %d choice %d: finish %s without a cancel", i, c, rf_finish_reason_str(r->finish[c]));
        }
    }
    rf_engine_free(e);

    /* every finished, uncancelled request alone (a roomy pool, one at a time) gives the same */
    if (fake_fwd) {
        static fake f2;
        memset(&f2, 0, sizeof f2);
        f2.n_step = n_step;
        f2.n_prompt_min = prompt_min;
        rf_engine *e1 = make_engine(m, ctx, 1, 32, 0, bs, false, &f2);
        int compared = 0;
        for (int i = 0; i < g_nres && compared < 60; i++) {
            result *r = &g_res[i];
            if (r->cancelled) continue;
            result alone = *r;
            memset(alone.ntok, 0, sizeof alone.ntok);
            alone.done = 0;
            rf_request *q = build(&alone);
            rf_request_set_callback(q, on_ev, &alone);
            if (rf_engine_submit(e1, q, NULL)) fail_msg("alone: %s", rf_last_error());
            for (int step = 0; busy(e1); step++) step_checked(e1, &f2, "alone", step);
            rf_request_free(q);
            for (int c = 0; c < r->n; c++) {
                if (alone.ntok[c] != r->ntok[c] || memcmp(alone.tok[c], r->tok[c], (size_t)r->ntok[c] * 4) ||
                    alone.finish[c] != r->finish[c])
                    fail_msg("request %d choice %d: %d tokens (%s) in the crowd, %d (%s) alone", i, c, r->ntok[c],
                             rf_finish_reason_str(r->finish[c]), alone.ntok[c], rf_finish_reason_str(alone.finish[c]));
            }
            compared++;
        }
        printf("  %d requests re-run alone: identical tokens and finish reasons\n", compared);
        rf_engine_free(e1);
        free(f2.shadow);
        free(f2.sshadow);
    }
    free(f.shadow);
    free(f.sshadow);
}

static rf_model *load_path(const char *path) {
    rf_model_params mp = rf_model_default_params();
    mp.n_threads = 2;
    rf_model *m = NULL;
    if (rf_model_load(path, &mp, &m)) fail_msg("load: %s", rf_last_error());
    return m;
}
static rf_model *load(void) { return load_path(g_model); }

static void test_random_fake(void **state) {
    (void)state;
    rf_model *m = load();
    /* block size 4: a 128-position sequence needs 32 blocks; 60 blocks run out often */
    run_random(m, 4000, true, 4, 60, 8, 32, 0, 32);
    run_random(m, 1500, true, 16, 17, 8, 32, 0, 32);
    /* a step budget below --batch: decodes fill it, prompts keep their floor (4 tokens) */
    run_random(m, 3000, true, 4, 60, 8, 32, 10, 4);
    /* as many sequences as the step holds: decodes can fill --batch itself (no prompt room) */
    run_random(m, 2000, true, 8, 40, 16, 16, 12, 3);
    rf_knob_override(RF_KNOB_STEP_TOKENS, NULL);
    rf_knob_override(RF_KNOB_STEP_PROMPT_MIN, NULL);
    rf_model_free(m);
}

/* The same randomized workload on a hybrid model: state slots (n_parallel of them; forks copy
 * them, preemption gives them back) and the prefix cache's checkpoints, a few so that they are
 * evicted often (RF_STATE_CHECKPOINTS = 6 and 3), with block sizes 4 and 8. */
static void test_random_hybrid(void **state) {
    (void)state;
    rf_model *m = load_path(g_hybrid);
    assert_true(rf_model_n_recurrent(m) > 0);
    assert_int_equal(rf_knob_override(RF_KNOB_STATE_CHECKPOINTS, "6"), RF_OK);
    run_random(m, 4000, true, 4, 60, 8, 32, 0, 32);
    run_random(m, 2000, true, 4, 60, 8, 32, 10, 4);
    assert_int_equal(rf_knob_override(RF_KNOB_STATE_CHECKPOINTS, "3"), RF_OK);
    run_random(m, 2000, true, 8, 40, 16, 16, 12, 3);
    rf_knob_override(RF_KNOB_STATE_CHECKPOINTS, NULL);
    rf_knob_override(RF_KNOB_STEP_TOKENS, NULL);
    rf_knob_override(RF_KNOB_STEP_PROMPT_MIN, NULL);
    rf_model_free(m);
}

static void test_random_real(void **state) {
    (void)state;
    rf_model *m = load();
    run_random(m, 300, false, 8, 24, 8, 32, 0, 32);
    rf_knob_override(RF_KNOB_STEP_TOKENS, NULL);
    rf_knob_override(RF_KNOB_STEP_PROMPT_MIN, NULL);
    rf_model_free(m);
}

/* The budget rule alone (scheduler.h), over every small case: a step without decodes gives
 * prompts all of --batch; with decodes the room never passes --batch - d, is at least the floor
 * while --batch has it, fills n_step - d when that is more, and shrinks as decodes grow; the
 * defaults (n_step 0 or >= --batch) give --batch - d, the rule before n_step existed. */
static void test_prompt_room(void **state) {
    (void)state;
    for (int32_t nb = 1; nb <= 40; nb++)
        for (int32_t ns = 0; ns <= 45; ns++)
            for (int32_t pm = 0; pm <= 12; pm++) {
                int32_t prev = nb;
                for (int32_t d = 0; d <= nb; d++) {
                    int32_t r = rf_sched_prompt_room(nb, ns, pm, d);
                    int32_t step = ns > 0 && ns < nb ? ns : nb;
                    if (d == 0) {
                        assert_int_equal(r, nb);
                        continue;
                    }
                    assert_true(r >= 0 && r <= nb - d);
                    assert_true(r >= (pm < nb - d ? pm : nb - d));
                    assert_true(r >= (step - d < nb - d ? step - d : nb - d));
                    assert_true(d + r <= (step > d + pm ? step : d + pm) || r == 0);
                    assert_true(r <= prev);
                    if (ns == 0 || ns >= nb) assert_int_equal(r, nb - d);
                    prev = r;
                }
            }
}

/* The decode-step graph buckets (engine_step.c): the smallest 2^k or 3 * 2^k at least n, never
 * past the cap, padding under a third of the step; a cap that is a power of two at least P
 * (the engine's logit rows for --parallel P) gives every decode step of up to P sequences a
 * bucket; up to 65536 tokens there are 32 of them (the GPU backend's RF_MAX_GRAPHS). */
static void test_graph_bucket(void **state) {
    (void)state;
    for (int32_t cap = 1; cap <= 1100; cap++)
        for (int32_t n = 1; n <= cap + 5; n++) {
            int32_t b = rf_step_graph_bucket(n, cap), lo = 0;
            for (int32_t x = n; x <= cap && !lo; x++) { /* the smallest ladder value in [n, cap] */
                int32_t y = x;
                while (y % 2 == 0) y /= 2;
                if (y == 1 || y == 3) lo = x;
            }
            if (b != lo) fail_msg("bucket of %d under %d: %d, expected %d", n, cap, b, lo);
            if (b && 2 * b >= 3 * n && b != n) fail_msg("bucket %d pads %d by a third or more", b, n);
        }
    for (int32_t par = 1; par <= 4096; par++) {
        int32_t rows = 1;
        while (rows < par) rows *= 2;
        for (int32_t n = 1; n <= par; n++)
            if (!rf_step_graph_bucket(n, rows)) fail_msg("no bucket for %d of --parallel %d", n, par);
    }
    int32_t distinct = 0, last = 0;
    for (int32_t n = 1; n <= 65536; n++) {
        int32_t b = rf_step_graph_bucket(n, 65536);
        if (b != last) distinct++, last = b;
    }
    assert_int_equal(distinct, 32);
    /* depth buckets: the smallest power of two >= 256 holding max_p + 1 keys, n_ctx at most;
     * the index is its log2 over 256; every key (batch bucket, masked, depth) stays distinct */
    for (int32_t n_ctx = 1; n_ctx <= (1 << 20); n_ctx = n_ctx * 3 / 2 + 1)
        for (int32_t max_p = 0; max_p < n_ctx; max_p += 1 + max_p / 7) {
            int32_t idx = -1, k = rf_step_depth_bucket(max_p, n_ctx, &idx);
            int64_t want = RF_DEPTH_BUCKET_MIN;
            int32_t wi = 0;
            while (want < (int64_t)max_p + 1 && want < n_ctx) want *= 2, wi++;
            if (want > n_ctx) want = n_ctx;
            if (k != want || idx != wi || k - 1 < max_p)
                fail_msg("depth bucket of %d under n_ctx %d: %d (index %d), expected %lld (%d)", max_p, n_ctx, k, idx,
                         (long long)want, wi);
            if ((int64_t)65536 + RF_STEP_MASKED_KEY + (int64_t)idx * RF_STEP_DEPTH_KEY > INT32_MAX)
                fail_msg("graph key overflows at depth index %d", idx);
        }
    int32_t i0, i1, i2, i3, i4;
    assert_int_equal(rf_step_depth_bucket(0, 16384, &i0), 256);
    assert_int_equal(rf_step_depth_bucket(255, 16384, &i3), 256);
    assert_int_equal(rf_step_depth_bucket(256, 16384, &i4), 512);
    assert_int_equal(rf_step_depth_bucket(1024, 16384, &i1), 2048);
    assert_int_equal(rf_step_depth_bucket(16383, 20000, &i2), 16384);
    assert_int_equal(i0, 0);
    assert_int_equal(i3, 0);
    assert_int_equal(i4, 1);
    assert_int_equal(i1, 3);
    assert_int_equal(i2, 6);
    assert_true(RF_STEP_MASKED_KEY > 65536 && RF_STEP_DEPTH_KEY > RF_STEP_MASKED_KEY);
}

/* The pool alone: publish, lookup, eviction order, copy-on-write predicate, check. */
static void test_pool(void **state) {
    (void)state;
    rf_kv_pool *p;
    assert_int_equal(rf_kv_pool_new(0, 4, true, &p), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_kv_pool_new(4, 2, true, &p), RF_OK);
    int32_t t1[2] = {5, 6}, t2[2] = {7, 8};
    int32_t a = rf_kv_pool_alloc(p), b = rf_kv_pool_alloc(p);
    assert_true(rf_kv_pool_writable(p, a));
    assert_true(rf_kv_pool_publish(p, a, 0, t1));
    assert_false(rf_kv_pool_writable(p, a)); /* published blocks are immutable */
    uint64_t h1 = rf_kv_block_hash(0, t1, 2);
    assert_true(rf_kv_pool_publish(p, b, h1, t2));
    assert_false(rf_kv_pool_publish(p, b, h1, t2)); /* already */
    assert_int_equal(rf_kv_pool_lookup(p, 0, t1), a);
    assert_int_equal(rf_kv_pool_refcount(p, a), 2);
    assert_int_equal(rf_kv_pool_lookup(p, 0, t2), -1); /* wrong parent */
    rf_kv_pool_unref(p, a);
    rf_kv_pool_unref(p, b);
    rf_kv_pool_unref(p, a);
    assert_int_equal(rf_kv_pool_n_cached(p), 2);
    assert_int_equal(rf_kv_pool_n_free(p), 2);
    int32_t refs[4] = {0, 0, 0, 0};
    assert_int_equal(rf_kv_pool_check(p, refs), RF_OK);
    /* two fresh blocks come from the free list, the third evicts the least recently used (b) */
    int32_t c = rf_kv_pool_alloc(p), d = rf_kv_pool_alloc(p), x = rf_kv_pool_alloc(p);
    assert_true(c != a && c != b && d != a && d != b);
    assert_int_equal(x, b);
    assert_int_equal(rf_kv_pool_lookup(p, h1, t2), -1); /* b left the cache */
    assert_int_equal(rf_kv_pool_lookup(p, 0, t1), a);   /* a is still there */
    assert_int_equal(rf_kv_pool_alloc(p), -1);
    refs[a] = refs[c] = refs[d] = refs[x] = 1;
    assert_int_equal(rf_kv_pool_check(p, refs), RF_OK);
    refs[c] = 2;
    assert_int_equal(rf_kv_pool_check(p, refs), RF_ERR_INTERNAL);
    rf_kv_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_prompt_room),
        cmocka_unit_test(test_graph_bucket),
        cmocka_unit_test(test_random_fake),
        cmocka_unit_test(test_random_hybrid),
        cmocka_unit_test(test_random_real),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
