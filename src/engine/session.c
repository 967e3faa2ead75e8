/* session.c — rf_session: a KV cache plus the forward's buffers over one model, and the eval
 * call that feeds tokens in batches. Context-length defaults and checks live here. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "rocmforge/quant.h"

struct rf_session {
    rf_model *m;
    rf_fwd f;
    int32_t *tokens; /* [n_ctx] the ids in the cache */
    int32_t n_past;
    float *logits;   /* [logits_rows, n_vocab] */
    size_t logits_cap;
    int32_t logits_first, logits_rows; /* logits of eval positions [first, first+rows) */
};

rf_session_params rf_session_default_params(void) {
    rf_session_params p = {0, 0, RF_TYPE_F16, 0};
    return p;
}

static uint64_t avail_memory(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0) return (uint64_t)8 << 30;
    return (uint64_t)pages * (uint64_t)psz;
}

rf_status rf_session_new(rf_model *m, const rf_session_params *params, rf_session **out) {
    *out = NULL;
    if (!m) return rf_set_error(RF_ERR_INVALID_ARG, "rf_session_new: model is NULL");
    rf_session_params p = params ? *params : rf_session_default_params();
    const rf_hparams *hp = &m->hp;
    if (p.kv_type != RF_TYPE_F32 && p.kv_type != RF_TYPE_F16 && p.kv_type != RF_TYPE_Q8_0)
        return rf_set_error(RF_ERR_INVALID_ARG, "KV cache type %s is not supported (f32, f16, q8_0)", rf_type_name(p.kv_type));
    if (p.kv_type == RF_TYPE_Q8_0 && hp->head_dim % 32)
        return rf_set_error(RF_ERR_INVALID_ARG, "KV cache type q8_0 needs a head size that is a multiple of 32 (it is %d)", hp->head_dim);
    if (p.n_ctx < 0) return rf_set_error(RF_ERR_INVALID_ARG, "context length %d must be >= 1", p.n_ctx);
    if (p.n_batch < 0) return rf_set_error(RF_ERR_INVALID_ARG, "batch size %d must be >= 1", p.n_batch);
    if (p.n_threads < 0) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", p.n_threads);
    size_t kv_row;
    int64_t kvdim = (int64_t)hp->n_head_kv * hp->head_dim;
    if (p.kv_type == RF_TYPE_F32) kv_row = (size_t)kvdim * 4;
    else if (p.kv_type == RF_TYPE_F16) kv_row = (size_t)kvdim * 2;
    else {
        rf_status st0 = rf_row_size(p.kv_type, kvdim, &kv_row);
        if (st0) return st0;
    }
    uint64_t per_tok = (uint64_t)kv_row * 2 * (uint64_t)hp->n_layer;
    int32_t n_ctx = p.n_ctx;
    if (n_ctx == 0) {
        n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
        uint64_t budget = avail_memory() / 2;
        if (per_tok * (uint64_t)n_ctx > budget) n_ctx = (int32_t)(budget / per_tok);
        if (n_ctx < 16) return rf_set_error(RF_ERR_OOM, "not enough memory for a KV cache of 16 tokens");
    }
    if (n_ctx > 1 << 24) return rf_set_error(RF_ERR_INVALID_ARG, "context length %d is too large", n_ctx);
    int32_t n_batch = p.n_batch ? p.n_batch : 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    if (p.n_threads) {
        rf_status st = rf_backend_cpu_set_threads(m->be, p.n_threads);
        if (st) return st;
    }
    rf_session *s = calloc(1, sizeof *s);
    if (!s) return rf_set_error(RF_ERR_OOM, "session: out of memory");
    s->m = m;
    s->tokens = calloc((size_t)n_ctx, sizeof(int32_t));
    if (!s->tokens) {
        free(s);
        return rf_set_error(RF_ERR_OOM, "session: out of memory");
    }
    rf_status st = rf_fwd_init(m, &s->f, n_ctx, n_batch, p.kv_type);
    if (st) {
        free(s->tokens);
        free(s);
        return st;
    }
    *out = s;
    return RF_OK;
}

void rf_session_free(rf_session *s) {
    if (!s) return;
    rf_fwd_free(s->m, &s->f);
    free(s->tokens);
    free(s->logits);
    free(s);
}

int32_t rf_session_n_ctx(const rf_session *s) { return s->f.n_ctx; }
int32_t rf_session_n_past(const rf_session *s) { return s->n_past; }
const int32_t *rf_session_tokens(const rf_session *s) { return s->tokens; }

rf_status rf_session_truncate(rf_session *s, int32_t n) {
    if (n < 0 || n > s->n_past)
        return rf_set_error(RF_ERR_INVALID_ARG, "truncate to %d: the session holds %d tokens", n, s->n_past);
    s->n_past = n; /* cache rows >= n are overwritten by the next eval */
    return RF_OK;
}

rf_status rf_session_eval(rf_session *s, const int32_t *ids, int32_t n, bool all_logits) {
    if (!s || (!ids && n > 0) || n < 0) return rf_set_error(RF_ERR_INVALID_ARG, "rf_session_eval: bad arguments");
    if (n == 0) return RF_OK;
    if ((int64_t)s->n_past + n > s->f.n_ctx)
        return rf_set_error(RF_ERR_RANGE, "%d tokens do not fit: %d already in the context of %d (need %lld)", n,
                            s->n_past, s->f.n_ctx, (long long)s->n_past + n);
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
    int32_t start = s->n_past;
    for (int32_t i = 0; i < n; i += s->f.n_batch) {
        int32_t cnt = n - i < s->f.n_batch ? n - i : s->f.n_batch;
        bool last = i + cnt == n;
        int32_t out0 = all_logits ? 0 : (last ? cnt - 1 : cnt);
        float *dst = all_logits ? s->logits + (size_t)i * nv : s->logits;
        rf_status st = rf_forward(s->m, &s->f, ids + i, cnt, s->n_past, out0, dst);
        if (st) {
            s->n_past = start;
            s->logits_rows = 0;
            return st;
        }
        memcpy(s->tokens + s->n_past, ids + i, (size_t)cnt * sizeof(int32_t));
        s->n_past += cnt;
    }
    s->logits_first = all_logits ? 0 : n - 1;
    s->logits_rows = rows;
    return RF_OK;
}

const float *rf_session_logits(const rf_session *s, int32_t i) {
    if (!s || i < s->logits_first || i >= s->logits_first + s->logits_rows) return NULL;
    return s->logits + (size_t)(i - s->logits_first) * s->m->hp.n_vocab;
}

/* Library-internal accessors used by generate.c. */
const rf_vocab *rf_session_vocab(const rf_session *s) { return s->m->vocab; }
int32_t rf_session_n_vocab(const rf_session *s) { return s->m->hp.n_vocab; }
