/* test_batch_engine.c — the batching engine on real forwards (tiny synthetic models of every
 * architecture, and SmolLM2 / Gemma-3 from models/ when present):
 *  - batch invariance: 10 prompts generated greedily one at a time, then all together with
 *    staggered arrival (some join while others decode) and a step budget that splits prompts
 *    into chunks: identical tokens, and every logits row bit-identical (a hash of the full row);
 *  - the prefix cache: a second request sharing a ~200-token prefix computes only its new
 *    tokens (counted by the engine) and yields the same tokens as with the cache off;
 *  - n = 3 choices share the prompt's blocks (computed once) and equal three requests run alone
 *    with seeds s, s+1, s+2;
 *  - cancellation while queued, during a chunked prompt and mid-decode returns every block;
 *  - bad input: prompt longer than the context, a pool too small for one sequence, an empty
 *    prompt; logprobs are sorted, <= 0, and greedy picks the first;
 *  - rf_engine_serve on a thread of its own (requests submitted from another) gives the tokens
 *    rf_engine_run gives, and rf_engine_stop_serving ends it while it waits for work.
 * The CPU kernels are row-independent, so bit identity is the expected result, not luck.
 * Under the sanitizer build (RF_TEST_QUICK) the real models run fewer prompts and tokens. */
#include "test_util.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "test_engine_run.h"

#ifdef RF_TEST_QUICK
#define REAL_PROMPTS 4
#define REAL_TOKENS 8
#else
#define REAL_PROMPTS 10
#define REAL_TOKENS 24
#endif

static char g_dir[1024];

static int setup(void **state) {
    (void)state;
    const char *cli = getenv("RF_CLI");
    if (!cli) return -1;
    snprintf(g_dir, sizeof g_dir, "%s/synth-models", RF_BINARY_DIR);
    const char *presets[][2] = {{"tiny", "q4_0"}, {"tiny-qwen2", "q8_0"}, {"tiny-llama2", "f16"}, {"tiny-gemma3", "q4_k_m"}};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --preset %s --type %s -o '%s/batch-%s.%s.gguf' >/dev/null 2>&1",
                 g_dir, cli, presets[i][0], presets[i][1], g_dir, presets[i][0], presets[i][1]);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

static rf_engine *engine(rf_model *m, int ctx, int par, int batch, bool prefix) {
    rf_engine_config *c = rf_engine_config_new();
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_CTX, ctx), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_PARALLEL, par), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_BATCH, batch), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_PREFIX_CACHE, prefix), RF_OK);
    rf_engine *e = NULL;
    if (rf_engine_new(m, c, &e)) fail_msg("engine: %s", rf_last_error());
    rf_engine_config_free(c);
    return e;
}

/* ---- one request's output --------------------------------------------------------------- */

#define MAXT 64
typedef struct out {
    uint64_t id;
    int32_t choices, done;
    int32_t n[4];
    int32_t tok[4][MAXT];
    uint64_t lhash[4][MAXT]; /* hash of the full logits row each token was sampled from */
    rf_finish_reason fin[4];
    int32_t n_cached;
    char text[4][2048];
    size_t tlen[4];
} out;

static bool on_ev(const rf_event *ev, void *user) {
    out *o = user;
    int c = rf_event_choice(ev);
    size_t len;
    const char *t = rf_event_text(ev, &len);
    if (o->tlen[c] + len < sizeof o->text[c]) {
        memcpy(o->text[c] + o->tlen[c], t, len);
        o->tlen[c] += len;
    }
    if (rf_event_get_kind(ev) == RF_EVENT_TOKEN) {
        if (o->n[c] < MAXT) o->tok[c][o->n[c]++] = rf_event_token(ev);
    } else {
        o->fin[c] = rf_event_finish(ev);
        o->n_cached = rf_event_n_cached(ev);
        o->done++;
    }
    return true;
}

typedef struct hook_ctx {
    out *outs;
    int n;
} hook_ctx;

static uint64_t hash_row(const float *lg, int32_t nv) {
    uint64_t z = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)lg;
    for (size_t k = 0; k < (size_t)nv * sizeof(float); k++) z = (z ^ p[k]) * 1099511628211ull;
    return z;
}

static int32_t g_nv;
static void on_logits_hash(void *user, const rf_seq *s, const float *lg) {
    hook_ctx *h = user;
    for (int i = 0; i < h->n; i++)
        if (h->outs[i].id == s->req->id) {
            int c = s->choice, k = s->n_gen;
            if (k < MAXT) h->outs[i].lhash[c][k] = hash_row(lg, g_nv);
        }
}

static rf_request *req_ids(const int32_t *ids, int n, int max_tokens, out *o) {
    rf_request *q = rf_request_new();
    assert_int_equal(rf_request_set_prompt_ids(q, ids, (size_t)n), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_MAX_TOKENS, max_tokens), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_IGNORE_EOS, 1), RF_OK);
    memset(o, 0, sizeof *o);
    o->choices = 1;
    rf_request_set_callback(q, on_ev, o);
    return q;
}

/* ---- batch invariance ------------------------------------------------------------------- */

static void invariance(const char *path, int n_prompts, int n_tokens, int batch) {
    rf_model *m = rf_eng_load(path);
    g_nv = m->hp.n_vocab;
    rf_rng rng;
    rf_rng_init(&rng, rf_test_seed());
    enum { MAXP = 12 };
    int32_t prompts[MAXP][80];
    int plen[MAXP];
    for (int i = 0; i < n_prompts; i++) {
        plen[i] = 5 + (int)(rf_rng_u64(&rng) % 60); /* 5..64 tokens: several chunks of `batch` */
        for (int k = 0; k < plen[i]; k++) prompts[i][k] = 5 + (int32_t)(rf_rng_u64(&rng) % (uint64_t)(g_nv - 10));
    }
    out alone[MAXP], crowd[MAXP];
    /* alone: one at a time, whole prompt in one step */
    rf_engine *e = engine(m, 256, 1, 512, false);
    hook_ctx h = {alone, n_prompts};
    e->logits_hook = on_logits_hash;
    e->hook_user = &h;
    for (int i = 0; i < n_prompts; i++) {
        rf_request *q = req_ids(prompts[i], plen[i], n_tokens, &alone[i]);
        assert_int_equal(rf_engine_submit(e, q, &alone[i].id), RF_OK);
        rf_request_free(q);
        assert_int_equal(rf_engine_run(e), RF_OK);
    }
    rf_engine_free(e);
    /* together: staggered arrivals, a small step budget (prompts in chunks), 6 in parallel */
    e = engine(m, 256, 6, batch, false);
    h.outs = crowd;
    e->logits_hook = on_logits_hash;
    e->hook_user = &h;
    int submitted = 0, steps = 0;
    int64_t max_running = 0;
    while (submitted < n_prompts || rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0) {
        if (submitted < n_prompts && (steps % 3 == 0 || submitted < 2)) {
            rf_request *q = req_ids(prompts[submitted], plen[submitted], n_tokens, &crowd[submitted]);
            assert_int_equal(rf_engine_submit(e, q, &crowd[submitted].id), RF_OK);
            rf_request_free(q);
            submitted++;
        }
        assert_int_equal(rf_engine_step(e), RF_OK);
        assert_int_equal(rf_engine_check(e), RF_OK);
        int64_t r = rf_engine_get_stat(e, RF_STAT_RUNNING);
        if (r > max_running) max_running = r;
        steps++;
    }
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    rf_engine_free(e);
    int same_logits = 0;
    for (int i = 0; i < n_prompts; i++) {
        assert_int_equal(crowd[i].done, 1);
        if (crowd[i].n[0] != alone[i].n[0] || memcmp(crowd[i].tok[0], alone[i].tok[0], (size_t)alone[i].n[0] * 4))
            fail_msg("%s prompt %d: tokens differ alone vs together", path, i);
        for (int k = 0; k < alone[i].n[0]; k++) {
            if (crowd[i].lhash[0][k] != alone[i].lhash[0][k])
                fail_msg("%s prompt %d token %d: logits not bit-identical alone vs together", path, i, k);
            same_logits++;
        }
    }
    const char *base = strrchr(path, '/');
    printf("  %-34s %d prompts x %d tokens: identical tokens, %d logits rows bit-identical (%d steps, up to %lld running, budget %d)\n",
           base ? base + 1 : path, n_prompts, n_tokens, same_logits, steps, (long long)max_running, batch);
    rf_model_free(m);
}

static void test_invariance_tiny(void **state) {
    (void)state;
    const char *names[] = {"batch-tiny.q4_0.gguf", "batch-tiny-qwen2.q8_0.gguf", "batch-tiny-llama2.f16.gguf",
                           "batch-tiny-gemma3.q4_k_m.gguf"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
        invariance(p, 10, 40, 16); /* gemma3: 40+ positions pass its 32-position window */
    }
}

static bool have_model(const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/models/%s", RF_SOURCE_DIR, name);
    return access(path, R_OK) == 0;
}

static void test_invariance_real(void **state) {
    (void)state;
    char p[1200];
    int ran = 0;
    if (have_model("SmolLM2-135M-Instruct.Q4_1.gguf", p, sizeof p)) {
        invariance(p, REAL_PROMPTS, REAL_TOKENS, 24);
        ran++;
    }
    if (have_model("gemma-3-270m-q4_k_m.gguf", p, sizeof p)) {
        invariance(p, REAL_PROMPTS / 2, REAL_TOKENS / 2, 24);
        ran++;
    }
    if (!ran) skip();
}

/* ---- prefix cache ----------------------------------------------------------------------- */

static void test_prefix_cache(void **state) {
    (void)state;
    char p[1200];
    snprintf(p, sizeof p, "%s/batch-tiny.q4_0.gguf", g_dir);
    rf_model *m = rf_eng_load(p);
    int32_t nv = m->hp.n_vocab;
    enum { PRE = 203, SUF = 17 };
    int32_t a[PRE + SUF], b[PRE + SUF];
    rf_rng rng;
    rf_rng_init(&rng, rf_test_seed());
    for (int k = 0; k < PRE + SUF; k++) a[k] = b[k] = 5 + (int32_t)(rf_rng_u64(&rng) % (uint64_t)(nv - 10));
    for (int k = PRE; k < PRE + SUF; k++) b[k] = 5 + (int32_t)(rf_rng_u64(&rng) % (uint64_t)(nv - 10));
    out oa, ob, ob_off;
    for (int cache = 1; cache >= 0; cache--) {
        rf_engine *e = engine(m, 512, 2, 512, cache);
        rf_request *q = req_ids(a, PRE + SUF, 16, &oa);
        assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
        rf_request_free(q);
        assert_int_equal(rf_engine_run(e), RF_OK);
        int64_t before = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS);
        out *ob_ = cache ? &ob : &ob_off;
        q = req_ids(b, PRE + SUF, 16, ob_);
        assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
        rf_request_free(q);
        assert_int_equal(rf_engine_run(e), RF_OK);
        int64_t computed = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS) - before;
        int32_t B = (int32_t)rf_engine_get_stat(e, RF_STAT_BLOCK_SIZE), shared = PRE / B * B;
        printf("  prefix cache %s: second prompt of %d tokens (%d shared) computed %lld, %d from the cache\n",
               cache ? "on " : "off", PRE + SUF, PRE, (long long)computed, ob_->n_cached);
        if (cache) {
            assert_int_equal(ob_->n_cached, shared);
            assert_int_equal(computed, PRE + SUF - shared);
            assert_true(rf_engine_get_stat(e, RF_STAT_BLOCKS_CACHED) > 0);
        } else {
            assert_int_equal(ob_->n_cached, 0);
            assert_int_equal(computed, PRE + SUF);
        }
        assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
        rf_engine_free(e);
    }
    assert_int_equal(ob.n[0], ob_off.n[0]);
    assert_memory_equal(ob.tok[0], ob_off.tok[0], (size_t)ob.n[0] * 4);
    /* the whole prompt cached (a multiple of the block size): the last token is recomputed
     * into a private copy of the shared block, and the tokens stay the same */
    rf_engine *e = engine(m, 512, 2, 512, true);
    out o1, o2;
    rf_request *q = req_ids(a, 64, 8, &o1);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
    assert_int_equal(rf_engine_run(e), RF_OK);
    rf_request_free(q);
    q = req_ids(a, 64, 8, &o2);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
    assert_int_equal(rf_engine_run(e), RF_OK);
    rf_request_free(q);
    assert_int_equal(o2.n_cached, 63);
    assert_int_equal(o1.n[0], o2.n[0]);
    assert_memory_equal(o1.tok[0], o2.tok[0], (size_t)o1.n[0] * 4);
    assert_int_equal(rf_engine_check(e), RF_OK);
    rf_engine_free(e);
    rf_model_free(m);
}

/* ---- n choices share the prompt ---------------------------------------------------------- */

static void test_choices(void **state) {
    (void)state;
    char p[1200];
    snprintf(p, sizeof p, "%s/batch-tiny-qwen2.q8_0.gguf", g_dir);
    rf_model *m = rf_eng_load(p);
    int32_t ids[37];
    for (int k = 0; k < 37; k++) ids[k] = 100 + 7 * k;
    out all, one[3];
    rf_engine *e = engine(m, 256, 4, 512, false);
    rf_request *q = req_ids(ids, 37, 20, &all);
    all.choices = 3;
    assert_int_equal(rf_request_set(q, RF_REQ_N, 3), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_TEMPERATURE, 0.9), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_SEED, 41), RF_OK);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
    rf_request_free(q);
    assert_int_equal(rf_engine_run(e), RF_OK);
    assert_int_equal(all.done, 3);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS), 37); /* computed once */
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    rf_engine_free(e);
    e = engine(m, 256, 1, 512, false);
    int differ = 0;
    for (int c = 0; c < 3; c++) {
        q = req_ids(ids, 37, 20, &one[c]);
        assert_int_equal(rf_request_set(q, RF_REQ_TEMPERATURE, 0.9), RF_OK);
        assert_int_equal(rf_request_set(q, RF_REQ_SEED, 41 + c), RF_OK);
        assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
        rf_request_free(q);
        assert_int_equal(rf_engine_run(e), RF_OK);
        assert_int_equal(one[c].n[0], all.n[c]);
        assert_memory_equal(one[c].tok[0], all.tok[c], (size_t)all.n[c] * 4);
        if (c && memcmp(all.tok[c], all.tok[0], (size_t)all.n[0] * 4)) differ++;
    }
    assert_true(differ > 0); /* the choices really sample differently */
    printf("  n=3: prompt computed once, each choice equals a lone request with seed 41+i\n");
    rf_engine_free(e);
    rf_model_free(m);
}

/* ---- cancellation and bad input --------------------------------------------------------- */

static void test_cancel(void **state) {
    (void)state;
    char p[1200];
    snprintf(p, sizeof p, "%s/batch-tiny.q4_0.gguf", g_dir);
    rf_model *m = rf_eng_load(p);
    int32_t ids[120];
    for (int k = 0; k < 120; k++) ids[k] = 50 + k;
    rf_engine *e = engine(m, 256, 2, 32, true);
    out o[4];
    uint64_t id[4];
    for (int i = 0; i < 4; i++) {
        rf_request *q = req_ids(ids + i, 100, 40, &o[i]);
        assert_int_equal(rf_engine_submit(e, q, &id[i]), RF_OK);
        rf_request_free(q);
    }
    assert_int_equal(rf_engine_step(e), RF_OK); /* request 0 in its prompt (32-token budget) */
    assert_int_equal(rf_engine_cancel(e, id[0]), RF_OK); /* during its prompt */
    assert_int_equal(rf_engine_cancel(e, id[3]), RF_OK); /* while queued */
    for (int s = 0; s < 12; s++) assert_int_equal(rf_engine_step(e), RF_OK);
    assert_true(o[1].n[0] > 0 && o[1].done == 0);
    assert_int_equal(rf_engine_cancel(e, id[1]), RF_OK); /* mid-decode */
    assert_int_equal(rf_engine_run(e), RF_OK);
    assert_int_equal(o[0].fin[0], RF_FINISH_CANCELLED);
    assert_int_equal(o[0].n[0], 0);
    assert_int_equal(o[1].fin[0], RF_FINISH_CANCELLED);
    assert_int_equal(o[2].fin[0], RF_FINISH_LENGTH);
    assert_int_equal(o[3].fin[0], RF_FINISH_CANCELLED);
    assert_int_equal(rf_engine_cancel(e, id[2]), RF_ERR_NOT_FOUND); /* finished */
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_FREE) + rf_engine_get_stat(e, RF_STAT_BLOCKS_CACHED),
                     rf_engine_get_stat(e, RF_STAT_BLOCKS_TOTAL));
    assert_int_equal(rf_engine_check(e), RF_OK);
    rf_engine_free(e);
    rf_model_free(m);
}

/* ---- the serve loop ---------------------------------------------------------------------- */

typedef struct serve_ctx {
    rf_engine *e;
    int errors; /* written by the serving thread, read after the join */
} serve_ctx;

static void on_serve_error(void *user, rf_status st) {
    (void)st;
    ((serve_ctx *)user)->errors++;
}

static void *serve_main(void *arg) {
    serve_ctx *c = arg;
    rf_engine_serve(c->e, on_serve_error, c);
    return NULL;
}

static void test_serve(void **state) {
    (void)state;
    char p[1200];
    snprintf(p, sizeof p, "%s/batch-tiny.q4_0.gguf", g_dir);
    rf_model *m = rf_eng_load(p);
    enum { NR = 3 };
    int32_t ids[40];
    for (int k = 0; k < 40; k++) ids[k] = 60 + 3 * k;
    out a[NR], b[NR];
    rf_engine *e = engine(m, 128, 4, 32, false);
    for (int i = 0; i < NR; i++) {
        rf_request *q = req_ids(ids + i, 20 + 5 * i, 12, &a[i]);
        assert_int_equal(rf_engine_submit(e, q, &a[i].id), RF_OK);
        rf_request_free(q);
    }
    assert_int_equal(rf_engine_run(e), RF_OK);
    rf_engine_free(e);

    serve_ctx c = {engine(m, 128, 4, 32, false), 0};
    pthread_t thr;
    assert_int_equal(pthread_create(&thr, NULL, serve_main, &c), 0);
    for (int i = 0; i < NR; i++) {
        rf_request *q = req_ids(ids + i, 20 + 5 * i, 12, &b[i]);
        assert_int_equal(rf_engine_submit(c.e, q, &b[i].id), RF_OK);
        rf_request_free(q);
    }
    /* the serving thread finishes them; stats are thread-safe (60 s at most) */
    for (int t = 0; t < 6000 && rf_engine_get_stat(c.e, RF_STAT_REQUESTS_DONE) < NR; t++) {
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(rf_engine_get_stat(c.e, RF_STAT_REQUESTS_DONE), NR);
    rf_engine_stop_serving(c.e); /* it waits for work now: the stop wakes it */
    assert_int_equal(pthread_join(thr, NULL), 0);
    assert_int_equal(c.errors, 0);
    for (int i = 0; i < NR; i++) {
        assert_int_equal(b[i].done, 1);
        assert_int_equal(b[i].n[0], 12);
        assert_memory_equal(b[i].tok[0], a[i].tok[0], sizeof a[i].tok[0]);
    }
    assert_int_equal(rf_engine_get_stat(c.e, RF_STAT_BLOCKS_USED), 0);
    rf_engine_free(c.e);
    rf_model_free(m);
}

static void test_bad_input(void **state) {
    (void)state;
    char p[1200];
    snprintf(p, sizeof p, "%s/batch-tiny.q4_0.gguf", g_dir);
    rf_model *m = rf_eng_load(p);
    rf_engine_config *c = rf_engine_config_new();
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_CTX, 256), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_KV_BLOCKS, 10), RF_OK);
    rf_engine *e = NULL;
    assert_int_equal(rf_engine_new(m, c, &e), RF_ERR_INVALID_ARG);
    printf("  pool too small: %s\n", rf_last_error());
    assert_non_null(strstr(rf_last_error(), "10 blocks"));
    assert_non_null(strstr(rf_last_error(), "256"));
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_PARALLEL, 0), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_KV_TYPE, RF_TYPE_Q4_0), RF_ERR_INVALID_ARG);
    rf_engine_config_free(c);
    e = engine(m, 64, 2, 64, true);
    int32_t ids[70];
    for (int k = 0; k < 70; k++) ids[k] = 60 + k;
    out o;
    rf_request *q = req_ids(ids, 70, 4, &o);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_ERR_RANGE);
    printf("  too long: %s\n", rf_last_error());
    assert_non_null(strstr(rf_last_error(), "70"));
    assert_non_null(strstr(rf_last_error(), "64"));
    assert_int_equal(rf_request_set_prompt_ids(q, ids, 0), RF_OK);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_ERR_INVALID_ARG);
    ids[0] = 1 << 20;
    assert_int_equal(rf_request_set_prompt_ids(q, ids, 3), RF_OK);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_ERR_RANGE);
    assert_int_equal(rf_request_set(q, RF_REQ_N, 0), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_request_set(q, RF_REQ_TOP_P, 1.5), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_request_set(q, RF_REQ_TEMPERATURE, NAN), RF_ERR_INVALID_ARG);
    /* a prompt exactly as long as the context gives one token, then stops: context full */
    ids[0] = 60;
    assert_int_equal(rf_request_set_prompt_ids(q, ids, 64), RF_OK);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
    assert_int_equal(rf_engine_run(e), RF_OK);
    assert_int_equal(o.n[0], 1);
    assert_int_equal(o.fin[0], RF_FINISH_CONTEXT);
    /* logprobs: sorted, <= 0, and the greedy token is the most likely */
    out lp;
    rf_request_free(q);
    q = req_ids(ids, 10, 1, &lp);
    assert_int_equal(rf_request_set(q, RF_REQ_LOGPROBS, 5), RF_OK);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
    rf_request_free(q);
    assert_int_equal(rf_engine_run(e), RF_OK);
    rf_engine_free(e);
    rf_model_free(m);
}

static float g_lp[8];
static int32_t g_top[8], g_tok, g_ntop;
static bool on_lp(const rf_event *ev, void *user) {
    (void)user;
    if (rf_event_get_kind(ev) != RF_EVENT_TOKEN) return true;
    g_tok = rf_event_token(ev);
    g_lp[0] = rf_event_logprob(ev);
    g_ntop = rf_event_n_top(ev);
    for (int i = 0; i < g_ntop && i < 7; i++) rf_event_top(ev, i, &g_top[i], &g_lp[i + 1]);
    return true;
}

static void test_logprobs(void **state) {
    (void)state;
    char p[1200];
    snprintf(p, sizeof p, "%s/batch-tiny.q4_0.gguf", g_dir);
    rf_model *m = rf_eng_load(p);
    rf_engine *e = engine(m, 64, 1, 64, true);
    rf_request *q = rf_request_new();
    assert_int_equal(rf_request_set_prompt_text(q, "Hello there, how", 16), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_MAX_TOKENS, 1), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_LOGPROBS, 5), RF_OK);
    rf_request_set_callback(q, on_lp, NULL);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
    rf_request_free(q);
    assert_int_equal(rf_engine_run(e), RF_OK);
    assert_int_equal(g_ntop, 5);
    assert_int_equal(g_top[0], g_tok);
    assert_true(g_lp[0] <= 0 && g_lp[0] == g_lp[1]);
    for (int i = 1; i < 5; i++) assert_true(g_lp[i + 1] <= g_lp[i]);
    rf_engine_free(e);
    rf_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariance_tiny), cmocka_unit_test(test_invariance_real),
        cmocka_unit_test(test_prefix_cache),    cmocka_unit_test(test_choices),
        cmocka_unit_test(test_cancel),          cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_logprobs),        cmocka_unit_test(test_serve),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
