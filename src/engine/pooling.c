/* pooling.c — embedding requests (RF_REQ_EMBED): the model's pooling from its metadata, the
 * final-norm hidden rows a step asks of the forward for them, their pooling (mean / cls / last,
 * summed across prompt chunks) and the L2-normalized vector handed out by the DONE event. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

const char *rf_pooling_str(rf_pooling p) {
    switch (p) {
    case RF_POOLING_MEAN: return "mean";
    case RF_POOLING_CLS: return "cls";
    case RF_POOLING_LAST: return "last";
    default: return "none";
    }
}

rf_pooling rf_model_pooling(const rf_model *m) {
    if (!m) return RF_POOLING_NONE;
    char key[96];
    snprintf(key, sizeof key, "%s.pooling_type", m->hp.arch_name);
    uint32_t v = 0;
    int32_t vi = 0;
    /* converters write it as u32; accept i32 too */
    if (rf_gguf_get_u32(m->g, key, &v) != RF_OK) {
        if (rf_gguf_get_i32(m->g, key, &vi) != RF_OK) return RF_POOLING_LAST; /* absent */
        if (vi < 0) return RF_POOLING_NONE;
        v = (uint32_t)vi;
    }
    switch (v) {
    case 0: return RF_POOLING_LAST; /* "none" (per-token rows): a causal decoder's last row pools it all */
    case 1: return RF_POOLING_MEAN;
    case 2: return RF_POOLING_CLS;
    case 3: return RF_POOLING_LAST;
    default: return RF_POOLING_NONE; /* rank (4) needs a classifier head; others are unknown */
    }
}

rf_status rf_embed_seq_setup(rf_engine *e, rf_seq *s) {
    rf_req *q = s->req;
    s->pooling = q->pooling;
    s->gen = false;
    s->fork_left = 0;
    s->pool_upto = 0;
    s->pool_acc = calloc((size_t)e->m->hp.n_embd, sizeof(double));
    if (!s->pool_acc) return rf_set_error(RF_ERR_OOM, "embedding: out of memory");
    return RF_OK;
}

/* Whether position q of s (computed in this step) gives a row to its pooling. */
static bool wants_row(const rf_seq *s, int32_t q) {
    if (q < s->pool_upto) return false; /* recomputed after a preemption: already pooled */
    switch (s->pooling) {
    case RF_POOLING_MEAN: return true;
    case RF_POOLING_CLS: return q == 0;
    case RF_POOLING_LAST: return q == s->n_tokens - 1;
    default: return false;
    }
}

rf_status rf_step_embed_rows(rf_engine *e, const rf_step_plan *p, rf_step_batch *sb) {
    e->f.n_hidden = 0;
    e->f.hidden_out = NULL;
    e->hid_row = 0;
    int32_t tok = 0, n_hid = 0;
    for (int32_t i = 0; i < p->n_items; i++) {
        const rf_seq *s = p->items[i].s;
        int32_t n = p->items[i].n;
        for (int32_t k = 0; k < n && s->pooling; k++)
            if (wants_row(s, s->n_computed + k)) e->b_out[sb->n_out + n_hid++] = tok + k;
        tok += n;
    }
    if (!n_hid) return RF_OK;
    const size_t E = (size_t)e->m->hp.n_embd, need = (size_t)n_hid * E;
    if (need > e->hid_cap) {
        float *h = realloc(e->hid, need * sizeof(float));
        if (!h) return rf_set_error(RF_ERR_OOM, "embedding rows (%d): out of memory", n_hid);
        e->hid = h;
        e->hid_cap = need;
    }
    sb->n_out += n_hid;
    /* hidden rows come back to the host: the step's samples too (no recorded graph) */
    sb->dev_sample = false;
    sb->masked = false;
    e->f.n_hidden = n_hid;
    e->f.hidden_out = e->hid;
    return RF_OK;
}

/* The vector of a finished sequence (mean: the sum over its positions divided by their count),
 * L2-normalized into out; a zero vector stays zero. */
static void finish_vector(const rf_seq *s, int32_t E, float *out) {
    double scale = s->pooling == RF_POOLING_MEAN ? 1.0 / (double)s->n_tokens : 1.0, ss = 0;
    for (int32_t j = 0; j < E; j++) {
        double v = s->pool_acc[j] * scale;
        ss += v * v;
    }
    double inv = ss > 0 ? 1.0 / sqrt(ss) : 0;
    for (int32_t j = 0; j < E; j++) out[j] = (float)(s->pool_acc[j] * scale * inv);
}

void rf_embed_take(rf_engine *e, rf_seq *s, int32_t n) {
    const int32_t E = e->m->hp.n_embd, q0 = s->n_computed - n;
    for (int32_t k = 0; k < n; k++) {
        if (!wants_row(s, q0 + k)) continue;
        const float *h = e->hid + (size_t)e->hid_row++ * E;
        for (int32_t j = 0; j < E; j++) s->pool_acc[j] += h[j];
    }
    if (q0 + n > s->pool_upto) s->pool_upto = q0 + n;
    if (s->n_computed < s->n_tokens || s->state != RF_SEQ_RUNNING) return;
    float *v = malloc((size_t)E * sizeof(float));
    if (!v) {
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "embedding: out of memory");
        return;
    }
    finish_vector(s, E, v);
    rf_req *q = s->req;
    s->finish = RF_FINISH_EOS;
    s->state = RF_SEQ_DONE;
    rf_seq_release_blocks(s, e->pool, e->spool); /* no KV kept after */
    rf_event ev = rf_engine_done_event(q, s->choice, s->n_prompt, s->n_cached, 0, RF_FINISH_EOS, NULL);
    ev.embd = v;
    ev.n_embd = E;
    rf_engine_emit(q, &ev);
    q->n_done++;
    free(v);
}

const float *rf_event_embedding(const rf_event *ev, int32_t *n) {
    if (n) *n = ev && ev->embd ? ev->n_embd : 0;
    return ev ? ev->embd : NULL;
}
