/* session.c — rf_session: one persistent sequence over a batching engine of its own (one
 * sequence, no prefix cache), so `run`, `chat`, `perplexity` and the golden tests go through
 * the same batch, paged KV cache and step as the server. Eval feeds tokens and keeps logits. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

struct rf_session {
    rf_model *m;
    rf_engine *e;
    rf_seq *seq;
    float *logits;   /* [logits_rows, n_vocab] */
    size_t logits_cap;
    int32_t logits_first, logits_rows; /* logits of eval positions [first, first+rows) */
};

rf_session_params rf_session_default_params(void) {
    rf_session_params p = {0, 0, RF_TYPE_F16, 0};
    return p;
}

rf_status rf_session_new(rf_model *m, const rf_session_params *params, rf_session **out) {
    *out = NULL;
    if (!m) return rf_set_error(RF_ERR_INVALID_ARG, "rf_session_new: model is NULL");
    rf_session_params p = params ? *params : rf_session_default_params();
    if (p.n_ctx < 0) return rf_set_error(RF_ERR_INVALID_ARG, "context length %d must be >= 1", p.n_ctx);
    if (p.n_batch < 0) return rf_set_error(RF_ERR_INVALID_ARG, "batch size %d must be >= 1", p.n_batch);
    if (p.n_threads < 0) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", p.n_threads);
    rf_session *s = calloc(1, sizeof *s);
    if (!s) return rf_set_error(RF_ERR_OOM, "session: out of memory");
    s->m = m;
    /* the batch is capped to the context, as a prompt chunk never spans more */
    int32_t n_batch = p.n_batch ? p.n_batch : 512;
    if (p.n_ctx && n_batch > p.n_ctx) n_batch = p.n_ctx;
    /* one sequence, no prefix cache (the session keeps its own prefix) */
    rf_engine_config c = {.n_ctx = p.n_ctx, .n_parallel = 1, .n_batch = n_batch, .n_blocks = 0, .block_size = 16,
                          .kv_type = p.kv_type, .prefix_cache = false, .n_threads = p.n_threads};
    rf_status st = rf_engine_create(m, &c, &s->e);
    if (!st && !p.n_ctx && s->e->n_batch > s->e->n_ctx) s->e->n_batch = s->e->n_ctx;
    if (!st && !(s->seq = rf_seq_new(s->e->max_blocks))) st = rf_set_error(RF_ERR_OOM, "session: out of memory");
    if (st) {
        rf_engine_free(s->e);
        free(s);
        return st;
    }
    s->seq->persistent = true;
    s->seq->state = RF_SEQ_IDLE;
    *out = s;
    return RF_OK;
}

void rf_session_free(rf_session *s) {
    if (!s) return;
    rf_seq_free(s->seq);
    rf_engine_free(s->e);
    free(s->logits);
    free(s);
}

int32_t rf_session_n_ctx(const rf_session *s) { return s->e->n_ctx; }
int32_t rf_session_n_past(const rf_session *s) { return s->seq->n_computed; }
const int32_t *rf_session_tokens(const rf_session *s) { return s->seq->tokens; }

/* Drops positions >= n: the tokens, and the blocks that hold only such positions. */
static void seq_truncate(rf_engine *e, rf_seq *q, int32_t n) {
    /* a recurrent state cannot be rewound: a hybrid model's sequence is recomputed */
    if (e->spool && n < q->n_computed) rf_seq_release_blocks(q, e->pool, e->spool);
    int32_t keep = (n + e->block_size - 1) / e->block_size;
    while (q->n_blocks > keep) rf_kv_pool_unref(e->pool, q->blocks[--q->n_blocks]);
    q->n_tokens = n;
    if (q->n_computed > n) q->n_computed = n;
}

rf_status rf_session_truncate(rf_session *s, int32_t n) {
    if (n < 0 || n > s->seq->n_computed)
        return rf_set_error(RF_ERR_INVALID_ARG, "truncate to %d: the session holds %d tokens", n, s->seq->n_computed);
    seq_truncate(s->e, s->seq, n);
    return RF_OK;
}

rf_status rf_session_eval(rf_session *s, const int32_t *ids, int32_t n, bool all_logits) {
    if (!s || (!ids && n > 0) || n < 0) return rf_set_error(RF_ERR_INVALID_ARG, "rf_session_eval: bad arguments");
    if (n == 0) return RF_OK;
    rf_seq *q = s->seq;
    rf_engine *e = s->e;
    if ((int64_t)q->n_computed + n > e->n_ctx)
        return rf_set_error(RF_ERR_RANGE, "%d tokens do not fit: %d already in the context of %d (need %lld)", n,
                            q->n_computed, e->n_ctx, (long long)q->n_computed + n);
    int32_t nv = s->m->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv)
            return rf_set_error(RF_ERR_RANGE, "token id %d at index %d is outside the vocabulary [0, %d)", ids[i], i, nv);
    int32_t rows = all_logits ? n : 1;
    size_t need = (size_t)rows * (size_t)nv;
    if (need > s->logits_cap) {
        float *p = realloc(s->logits, need * sizeof(float));
        if (!p) return rf_set_error(RF_ERR_OOM, "logits for %d positions: out of memory", rows);
        s->logits = p;
        s->logits_cap = need;
    }
    int32_t start = q->n_computed;
    seq_truncate(e, q, start); /* tokens sampled but never evaluated are dropped */
    rf_status st = rf_seq_append(q, ids, n);
    if (st) return st;
    q->want_all = all_logits;
    q->logits_dst = s->logits;
    q->state = RF_SEQ_RUNNING;
    while (!st && q->n_computed < q->n_tokens) st = rf_engine_exec_step(e, q);
    q->state = RF_SEQ_IDLE;
    q->want_all = false;
    q->logits_dst = NULL;
    if (st) {
        seq_truncate(e, q, start);
        s->logits_rows = 0;
        return st;
    }
    s->logits_first = all_logits ? 0 : n - 1;
    s->logits_rows = rows;
    return RF_OK;
}

const float *rf_session_logits(const rf_session *s, int32_t i) {
    if (!s || i < s->logits_first || i >= s->logits_first + s->logits_rows) return NULL;
    return s->logits + (size_t)(i - s->logits_first) * s->m->hp.n_vocab;
}

const rf_vocab *rf_session_vocab(const rf_session *s) { return s->m->vocab; }
int32_t rf_session_n_vocab(const rf_session *s) { return s->m->hp.n_vocab; }
rf_engine *rf_session_engine(rf_session *s) { return s->e; }
rf_seq *rf_session_seq(rf_session *s) { return s->seq; }
