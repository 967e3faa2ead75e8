/* test_engine_embed.c — embedding requests (RF_REQ_EMBED) in the batching engine on the CPU (a
 * tiny synthetic llama, and SmolLM2 from models/ when present):
 *  - the row each pooling takes: a causal model's row at position q is the last row of the prompt
 *    cut after q, so cls(P) = last(P[:1]) and mean(P[:1]) = last(P[:1]), bit for bit; mean(P) lies
 *    in the positive cone of last(P[:q+1]) over every q (least squares: residual under 1e-4 and
 *    every coefficient positive; a row missed or a chunk lost leaves a zero coefficient);
 *  - chunking and batching: a prompt split into 5-token chunks, many embedding requests at once,
 *    beside generation requests, and after a preemption mid-prompt (mean, cls) give the same
 *    bits as one request alone with the whole prompt in one step; unit L2 norm;
 *  - no KV kept: after the run no block is used or cached (embeddings publish nothing), also when
 *    requests are cancelled while queued or mid-prompt (DONE cancelled, no vector);
 *  - the model's pooling: last for a file without <arch>.pooling_type; bad RF_REQ_EMBED values;
 *  - the pooling read from <arch>.pooling_type (copies of the tiny model with the key written:
 *    u32 0..4, i32 1): cls gives the first token's row (last(P[:1]) of the file without the key),
 *    mean gives the mean (in the positive cone of the rows, as above) and not the last row. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "test_engine_run.h"
#include "rocmforge/gguf.h"
#include "test_embed.h"

static char g_tiny[1200];

static int setup(void **state) {
    (void)state;
    const char *cli = getenv("RF_CLI");
    if (!cli) return -1;
    char dir[1024], cmd[4096];
    snprintf(dir, sizeof dir, "%s/synth-models", RF_BINARY_DIR);
    snprintf(g_tiny, sizeof g_tiny, "%s/embed-tiny.f16.gguf", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --preset tiny --type f16 -o '%s' >/dev/null 2>&1", dir, cli, g_tiny);
    return system(cmd) == 0 ? 0 : -1;
}

static rf_engine *engine(rf_model *m, int ctx, int par, int batch, int blocks) {
    rf_engine_config *c = rf_engine_config_new();
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_CTX, ctx), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_PARALLEL, par), RF_OK);
    assert_int_equal(rf_engine_config_set(c, RF_ENGINE_BATCH, batch), RF_OK);
    if (blocks) assert_int_equal(rf_engine_config_set(c, RF_ENGINE_KV_BLOCKS, blocks), RF_OK);
    rf_engine *e = NULL;
    if (rf_engine_new(m, c, &e)) fail_msg("engine: %s", rf_last_error());
    rf_engine_config_free(c);
    return e;
}

/* One prompt alone, whole in one step. */
static void embed1(rf_model *m, const int32_t *ids, int n, rf_pooling pool, rf_emb_vec *o) {
    rf_engine *e = engine(m, 256, 1, 256, 0);
    rf_emb_submit(e, ids, n, pool, o);
    assert_int_equal(rf_engine_run(e), RF_OK);
    assert_int_equal(o->done, 1);
    assert_int_equal(o->fin, RF_FINISH_EOS);
    assert_int_equal(o->n_prompt, n);
    rf_engine_free(e);
}

static void no_kv_left(rf_engine *e) {
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_CACHED), 0);
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_FREE), rf_engine_get_stat(e, RF_STAT_BLOCKS_TOTAL));
    assert_int_equal(rf_engine_check(e), RF_OK);
}

static void unit_norm(const rf_emb_vec *o, int32_t n_embd) {
    assert_int_equal(o->n, n_embd);
    double ss = 0;
    for (int32_t j = 0; j < o->n; j++) ss += (double)o->v[j] * o->v[j];
    /* n_embd float32 roundings of a unit vector's elements: |ss - 1| <= n_embd * 2^-23 */
    if (fabs(ss - 1) > o->n * 0x1p-23) fail_msg("squared norm %.9f", ss);
}

static void same(const rf_emb_vec *a, const rf_emb_vec *b, const char *what) {
    if (a->n != b->n || memcmp(a->v, b->v, (size_t)a->n * sizeof(float))) {
        int32_t j = 0;
        while (j < a->n && a->v[j] == b->v[j]) j++;
        fail_msg("%s: vectors differ (n %d vs %d; first at %d: %g vs %g)", what, a->n, b->n, j, j < a->n ? a->v[j] : 0,
                 j < b->n ? b->v[j] : 0);
    }
}

#define NP 12
static void prompt(int32_t *ids, int n, int salt) {
    for (int k = 0; k < n; k++) ids[k] = 3 + (k * 37 + salt * 101) % 200;
}

/* Solves the normal equations of min |U c - v| (U: n columns of dimension E) by Gaussian
 * elimination with partial pivoting; returns the residual's norm. */
static double lsq(const rf_emb_vec *u, int n, const rf_emb_vec *v, double *c) {
    int32_t E = v->n;
    double G[NP][NP + 1];
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) {
            double s = 0;
            for (int32_t j = 0; j < E; j++) s += (double)u[a].v[j] * u[b].v[j];
            G[a][b] = s;
        }
        double s = 0;
        for (int32_t j = 0; j < E; j++) s += (double)u[a].v[j] * v->v[j];
        G[a][n] = s;
    }
    for (int k = 0; k < n; k++) {
        int p = k;
        for (int r = k + 1; r < n; r++)
            if (fabs(G[r][k]) > fabs(G[p][k])) p = r;
        for (int j = 0; j <= n; j++) {
            double t = G[k][j];
            G[k][j] = G[p][j];
            G[p][j] = t;
        }
        for (int r = k + 1; r < n; r++) {
            double f = G[r][k] / G[k][k];
            for (int j = k; j <= n; j++) G[r][j] -= f * G[k][j];
        }
    }
    for (int k = n - 1; k >= 0; k--) {
        double s = G[k][n];
        for (int j = k + 1; j < n; j++) s -= G[k][j] * c[j];
        c[k] = s / G[k][k];
    }
    double rr = 0;
    for (int32_t j = 0; j < E; j++) {
        double s = v->v[j];
        for (int a = 0; a < n; a++) s -= c[a] * u[a].v[j];
        rr += s * s;
    }
    return sqrt(rr);
}

static void rows_of(const char *path) {
    rf_model *m = rf_eng_load(path);
    rf_model_info mi;
    assert_int_equal(rf_model_get_info(m, &mi), RF_OK);
    int32_t ids[NP];
    prompt(ids, NP, 1);
    static rf_emb_vec last[NP], mean, cls, mean1;
    for (int q = 0; q < NP; q++) {
        embed1(m, ids, q + 1, RF_POOLING_LAST, &last[q]);
        unit_norm(&last[q], mi.n_embd);
    }
    embed1(m, ids, NP, RF_POOLING_CLS, &cls);
    same(&cls, &last[0], "cls(P) vs last(P[:1])");
    embed1(m, ids, 1, RF_POOLING_MEAN, &mean1);
    same(&mean1, &last[0], "mean(P[:1]) vs last(P[:1])");
    embed1(m, ids, NP, RF_POOLING_MEAN, &mean);
    unit_norm(&mean, mi.n_embd);
    double c[NP];
    double res = lsq(last, NP, &mean, c);
    /* v and the u's are unit vectors rounded to float32 (2^-24 relative per element); the
     * residual of an exact combination is then ~ sqrt(E) * 2^-24 times the coefficients' size,
     * far below 1e-4, while a vector outside the span leaves ~ sqrt(1 - NP / E) */
    if (res > 1e-4) fail_msg("mean is not a combination of the rows: residual %g", res);
    double mx = 0;
    for (int q = 0; q < NP; q++) mx = c[q] > mx ? c[q] : mx;
    for (int q = 0; q < NP; q++)
        if (!(c[q] > 0.05 * mx)) fail_msg("row %d's weight in the mean is %g (largest %g): a row was missed", q, c[q], mx);
    rf_model_free(m);
}

static void test_rows_tiny(void **state) {
    (void)state;
    rows_of(g_tiny);
}

static bool have_model(const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/models/%s", RF_SOURCE_DIR, name);
    return access(path, R_OK) == 0;
}

static void gen_req(rf_engine *e, const int32_t *ids, int n, int max_tokens, rf_emb_vec *o) {
    memset(o, 0, sizeof *o);
    rf_request *q = rf_request_new();
    assert_int_equal(rf_request_set_prompt_ids(q, ids, (size_t)n), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_MAX_TOKENS, max_tokens), RF_OK);
    assert_int_equal(rf_request_set(q, RF_REQ_IGNORE_EOS, 1), RF_OK);
    rf_request_set_callback(q, rf_emb_on_event, o);
    assert_int_equal(rf_engine_submit(e, q, NULL), RF_OK);
    rf_request_free(q);
}

/* Many prompts in chunks, among generation requests and preemptions, against each alone. */
static void batched(const char *path) {
    rf_model *m = rf_eng_load(path);
    enum { N = 6 };
    static int32_t ids[N][80];
    int len[N] = {80, 7, 33, 1, 64, 50};
    rf_pooling pool[N] = {RF_POOLING_MEAN, RF_POOLING_LAST, RF_POOLING_CLS, RF_POOLING_MEAN, RF_POOLING_LAST, RF_POOLING_MEAN};
    static rf_emb_vec alone[N], got[N], gen[2];
    for (int i = 0; i < N; i++) {
        prompt(ids[i], len[i], i + 2);
        embed1(m, ids[i], len[i], pool[i], &alone[i]);
    }
    /* a 5-token step budget and 3 sequences at once */
    rf_engine *e = engine(m, 128, 3, 5, 0);
    for (int i = 0; i < N; i++) {
        rf_emb_submit(e, ids[i], len[i], pool[i], &got[i]);
        if (i == 1) /* generation requests between the embeddings */
            for (int g = 0; g < 2; g++) gen_req(e, ids[0] + g, 20, 6, &gen[g]);
    }
    assert_int_equal(rf_engine_run(e), RF_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(got[i].fin, RF_FINISH_EOS);
        assert_int_equal(got[i].tokens, 0);
        same(&got[i], &alone[i], "chunked and batched");
    }
    for (int g = 0; g < 2; g++) assert_int_equal(gen[g].tokens, 6);
    /* generation publishes its blocks (cached); embeddings hold none */
    assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
    assert_int_equal(rf_engine_check(e), RF_OK);
    rf_engine_free(e);
    /* preempted mid-prompt: a pool of 8 blocks of 16, one prompt token per step beside a
     * generation (older) growing from 30 to 110 positions; the embedding (60 tokens, newer) is
     * the victim when the pool runs out, recomputes once the generation is done, and pools
     * the rows it had before only once */
    for (int k = 0; k < 2; k++) {
        rf_pooling pk = k ? RF_POOLING_CLS : RF_POOLING_MEAN;
        rf_emb_vec ref;
        embed1(m, ids[0], 60, pk, &ref);
        e = engine(m, 112, 2, 2, 8);
        gen_req(e, ids[1], 30, 80, &gen[0]);
        rf_emb_submit(e, ids[0], 60, pk, &got[0]);
        assert_int_equal(rf_engine_run(e), RF_OK);
        if (rf_engine_get_stat(e, RF_STAT_PREEMPTIONS) == 0) fail_msg("no preemption happened");
        assert_int_equal(gen[0].tokens, 80);
        same(&got[0], &ref, k ? "cls after a preemption" : "mean after a preemption");
        assert_int_equal(rf_engine_get_stat(e, RF_STAT_BLOCKS_USED), 0);
        assert_int_equal(rf_engine_check(e), RF_OK);
        rf_engine_free(e);
    }
    rf_model_free(m);
}

static void test_batched_tiny(void **state) {
    (void)state;
    batched(g_tiny);
}

static void test_real(void **state) {
    (void)state;
    char p[1200];
    if (!have_model("SmolLM2-135M-Instruct.Q4_1.gguf", p, sizeof p)) skip();
    rf_model *m = rf_eng_load(p);
    assert_int_equal(rf_model_pooling(m), RF_POOLING_LAST); /* the file has no pooling_type */
    rf_model_free(m);
    rows_of(p);
    batched(p);
}

static void test_cancel_and_kv(void **state) {
    (void)state;
    rf_model *m = rf_eng_load(g_tiny);
    assert_int_equal(rf_model_pooling(m), RF_POOLING_LAST);
    assert_string_equal(rf_pooling_str(RF_POOLING_MEAN), "mean");
    rf_engine *e = engine(m, 128, 2, 8, 0);
    int32_t ids[100];
    prompt(ids, 100, 9);
    static rf_emb_vec o[4];
    uint64_t id[4];
    for (int i = 0; i < 4; i++) id[i] = rf_emb_submit(e, ids, 100 - i, RF_POOLING_MEAN, &o[i]);
    assert_int_equal(rf_engine_step(e), RF_OK); /* request 0 mid-prompt */
    assert_int_equal(rf_engine_cancel(e, id[0]), RF_OK);
    assert_int_equal(rf_engine_cancel(e, id[3]), RF_OK); /* queued */
    assert_int_equal(rf_engine_run(e), RF_OK);
    assert_int_equal(o[0].fin, RF_FINISH_CANCELLED);
    assert_int_equal(o[0].n, 0);
    assert_int_equal(o[3].fin, RF_FINISH_CANCELLED);
    assert_int_equal(o[1].fin, RF_FINISH_EOS);
    assert_int_equal(o[2].fin, RF_FINISH_EOS);
    no_kv_left(e); /* nothing published, nothing held */
    rf_engine_free(e);
    rf_request *q = rf_request_new();
    assert_int_equal(rf_request_set(q, RF_REQ_EMBED, 4), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_request_set(q, RF_REQ_EMBED, -1), RF_ERR_INVALID_ARG);
    assert_int_equal(rf_request_set(q, RF_REQ_EMBED, 1.5), RF_ERR_INVALID_ARG);
    rf_request_free(q);
    int32_t n = 7;
    assert_null(rf_event_embedding(NULL, &n));
    assert_int_equal(n, 0);
    rf_model_free(m);
}

/* A copy of the tiny model with <arch>.pooling_type written (as u32, or i32 when i32 is set). */
static void with_pooling(const char *dst, int32_t v, bool i32) {
    rf_gguf *g = NULL;
    assert_int_equal(rf_gguf_open(g_tiny, &g), RF_OK);
    const char *arch = NULL;
    assert_int_equal(rf_gguf_get_str(g, "general.architecture", &arch), RF_OK);
    char key[96];
    snprintf(key, sizeof key, "%s.pooling_type", arch);
    rf_gguf_writer *w = rf_gguf_writer_new();
    assert_non_null(w);
    for (int64_t i = 0; i < rf_gguf_n_kv(g); i++)
        assert_int_equal(rf_gguf_set_value(w, rf_gguf_kv_key(g, i), rf_gguf_kv_value(g, i)), RF_OK);
    assert_int_equal(i32 ? rf_gguf_set_i32(w, key, v) : rf_gguf_set_u32(w, key, (uint32_t)v), RF_OK);
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        assert_int_equal(rf_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL), RF_OK);
    }
    assert_int_equal(rf_gguf_write_file(w, dst), RF_OK);
    rf_gguf_writer_free(w);
    rf_gguf_close(g);
}

static rf_pooling pooling_of(int32_t v, bool i32, const char *path) {
    with_pooling(path, v, i32);
    rf_model *m = rf_eng_load(path);
    rf_pooling p = rf_model_pooling(m);
    rf_model_free(m);
    return p;
}

/* The model's pooling from its metadata, and the vectors an embedding request pooled that way
 * gives (the request's pooling taken from rf_model_pooling, as the server does). */
static void test_pooling_metadata(void **state) {
    (void)state;
    char path[1300];
    snprintf(path, sizeof path, "%s.pooling.gguf", g_tiny);
    assert_int_equal(pooling_of(0, false, path), RF_POOLING_LAST);
    assert_int_equal(pooling_of(3, false, path), RF_POOLING_LAST);
    assert_int_equal(pooling_of(4, false, path), RF_POOLING_NONE); /* rank: needs a classifier head */
    assert_int_equal(pooling_of(1, true, path), RF_POOLING_MEAN);
    assert_int_equal(pooling_of(-1, true, path), RF_POOLING_NONE);
    int32_t ids[NP];
    prompt(ids, NP, 3);
    rf_model *m0 = rf_eng_load(g_tiny); /* no pooling_type: the rows are taken one by one here */
    rf_model_info mi;
    assert_int_equal(rf_model_get_info(m0, &mi), RF_OK);
    static rf_emb_vec last[NP], got, want;
    for (int q = 0; q < NP; q++) embed1(m0, ids, q + 1, RF_POOLING_LAST, &last[q]);
    /* cls: the first token's row, whatever follows it */
    assert_int_equal(pooling_of(2, false, path), RF_POOLING_CLS);
    rf_model *m = rf_eng_load(path);
    embed1(m, ids, NP, rf_model_pooling(m), &got);
    same(&got, &last[0], "cls from the metadata vs the first row");
    rf_model_free(m);
    /* mean: a positive combination of every row (rows_of's check), the same bits as a mean asked
     * of the file without the key, and not the last row */
    assert_int_equal(pooling_of(1, false, path), RF_POOLING_MEAN);
    m = rf_eng_load(path);
    embed1(m, ids, NP, rf_model_pooling(m), &got);
    rf_model_free(m);
    unit_norm(&got, mi.n_embd);
    embed1(m0, ids, NP, RF_POOLING_MEAN, &want);
    same(&got, &want, "mean from the metadata vs a mean request");
    assert_true(memcmp(got.v, last[NP - 1].v, (size_t)got.n * sizeof(float)) != 0);
    double c[NP];
    double res = lsq(last, NP, &got, c);
    if (res > 1e-4) fail_msg("mean from the metadata is not a combination of the rows: residual %g", res);
    double mx = 0;
    for (int q = 0; q < NP; q++) mx = c[q] > mx ? c[q] : mx;
    for (int q = 0; q < NP; q++)
        if (!(c[q] > 0.05 * mx)) fail_msg("row %d's weight in the metadata's mean is %g (largest %g)", q, c[q], mx);
    rf_model_free(m0);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_tiny),
        cmocka_unit_test(test_batched_tiny),
        cmocka_unit_test(test_cancel_and_kv),
        cmocka_unit_test(test_pooling_metadata),
        cmocka_unit_test(test_real),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
