/* sampler.c — rf_sampler: penalties over the recent history (llama.cpp's rules), then the draw
 * with rf_ref_sample's contract (ref_ops.h) so the CPU and GPU samplers pick the same token for
 * the same logits and the same u. The generator is splitmix64, seeded by the caller. A grammar
 * (grammar.h) masks the logits after the penalties, before the draw. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ref/ref_ops.h"
#include "engine/grammar.h"
#include "rocmforge/engine.h"

struct rf_sampler {
    rf_sampler_params p;
    int32_t n_vocab;
    uint64_t rng;
    int32_t *hist; /* ring of the last `cap` accepted ids */
    int32_t cap, n_hist, head;
    int32_t *count; /* [n_vocab] scratch for penalties */
    float *work;    /* [n_vocab] */
    rf_gconstraint *gc; /* constrained decoding, or NULL */
};

rf_sampler_params rf_sampler_default_params(void) {
    rf_sampler_params p = {0.0f, 40, 0.95f, 0.05f, 1.0f, 64, 0.0f, 0.0f, 0};
    return p;
}

float rf_sampler_draw(rf_sampler *s);

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

rf_status rf_sampler_new(const rf_sampler_params *p, int32_t n_vocab, rf_sampler **out) {
    *out = NULL;
    if (!p || n_vocab <= 0) return rf_set_error(RF_ERR_INVALID_ARG, "sampler: bad parameters");
    if (!(p->temperature >= 0 || p->temperature < 0) || isnan(p->top_p) || isnan(p->min_p) ||
        isnan(p->repeat_penalty) || p->repeat_penalty <= 0)
        return rf_set_error(RF_ERR_INVALID_ARG, "sampler: repeat_penalty must be > 0 and values not NaN");
    rf_sampler *s = calloc(1, sizeof *s);
    if (!s) return rf_set_error(RF_ERR_OOM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rng = p->seed;
    s->cap = p->repeat_last_n < 0 ? 1 << 20 : (p->repeat_last_n > 0 ? p->repeat_last_n : 1);
    s->hist = calloc((size_t)s->cap, sizeof(int32_t));
    s->count = calloc((size_t)n_vocab, sizeof(int32_t));
    s->work = malloc((size_t)n_vocab * sizeof(float));
    if (!s->hist || !s->count || !s->work) {
        rf_sampler_free(s);
        return rf_set_error(RF_ERR_OOM, "sampler: out of memory");
    }
    *out = s;
    return RF_OK;
}

void rf_sampler_free(rf_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->count);
    free(s->work);
    rf_gconstraint_free(s->gc);
    free(s);
}

void rf_sampler_accept(rf_sampler *s, int32_t id) {
    if (!s) return;
    s->hist[s->head] = id;
    s->head = (s->head + 1) % s->cap;
    if (s->n_hist < s->cap) s->n_hist++;
}

void rf_sampler_reset(rf_sampler *s) {
    if (!s) return;
    s->n_hist = 0;
    s->head = 0;
}

int32_t rf_sampler_sample(rf_sampler *s, const float *logits) {
    const rf_sampler_params *p = &s->p;
    float *w = s->work;
    memcpy(w, logits, (size_t)s->n_vocab * sizeof(float));
    bool penalize = p->repeat_last_n != 0 &&
                    (p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0);
    if (penalize && s->n_hist > 0) {
        for (int32_t i = 0; i < s->n_hist; i++) {
            int32_t id = s->hist[i];
            if (id >= 0 && id < s->n_vocab) s->count[id]++;
        }
        for (int32_t i = 0; i < s->n_hist; i++) {
            int32_t id = s->hist[i];
            if (id < 0 || id >= s->n_vocab || s->count[id] == 0) continue;
            int32_t c = s->count[id];
            s->count[id] = 0; /* each distinct token once */
            if (w[id] > 0) w[id] /= p->repeat_penalty;
            else w[id] *= p->repeat_penalty;
            w[id] -= (float)c * p->frequency_penalty + p->presence_penalty;
        }
    }
    float u = rf_sampler_draw(s); /* [0, 1) */
    if (s->gc) {
        int32_t n_ok = 0;
        const uint8_t *mask = rf_gconstraint_mask(s->gc, &n_ok);
        if (n_ok == 0) return rf_sampler_grammar_pick(s, -1, true);
        for (int32_t i = 0; i < s->n_vocab; i++)
            if (!((mask[i >> 3] >> (i & 7)) & 1)) w[i] = -INFINITY;
    }
    rf_sample_params sp = {p->temperature, p->top_k, p->top_p, p->min_p};
    return rf_sampler_grammar_pick(s, rf_ref_sample(w, s->n_vocab, &sp, u), false);
}

bool rf_sampler_has_grammar(const rf_sampler *s) { return s->gc != NULL; }

const uint8_t *rf_sampler_grammar_mask(rf_sampler *s, int32_t *n_ok) {
    *n_ok = 0;
    return s->gc ? rf_gconstraint_mask(s->gc, n_ok) : NULL;
}

int32_t rf_sampler_grammar_pick(rf_sampler *s, int32_t id, bool none_allowed) {
    if (!s->gc) return id;
    if (none_allowed) {
        fprintf(stderr, "warning: the grammar admits no token here; the choice ends\n");
        return rf_gconstraint_eog(s->gc);
    }
    /* a refused id: the allowed logits were NaN and the draw fell on a masked token */
    if (id >= 0 && !rf_gconstraint_accept(s->gc, id)) return rf_gconstraint_eog(s->gc);
    return id;
}

rf_status rf_sampler_set_grammar(rf_sampler *s, rf_grammar *g, const rf_vocab *v) {
    rf_gconstraint_free(s->gc);
    s->gc = NULL;
    if (!g) return RF_OK;
    if (rf_vocab_n_tokens(v) != s->n_vocab) return rf_set_error(RF_ERR_INVALID_ARG, "sampler: the grammar's vocabulary differs");
    return rf_gconstraint_new(g, v, &s->gc);
}

float rf_sampler_draw(rf_sampler *s) { return (float)(splitmix64(&s->rng) >> 40) / (float)(1 << 24); }

const rf_sampler_params *rf_sampler_get_params(const rf_sampler *s) { return &s->p; }

int32_t rf_sampler_penalties(rf_sampler *s, int32_t *ids, int32_t *counts, int32_t cap) {
    const rf_sampler_params *p = &s->p;
    bool penalize = p->repeat_last_n != 0 &&
                    (p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0);
    if (!penalize || s->n_hist == 0) return 0;
    for (int32_t i = 0; i < s->n_hist; i++) {
        int32_t id = s->hist[i];
        if (id >= 0 && id < s->n_vocab) s->count[id]++;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_hist; i++) {
        int32_t id = s->hist[i];
        if (id < 0 || id >= s->n_vocab || s->count[id] == 0) continue;
        if (n < cap) {
            ids[n] = id;
            counts[n] = s->count[id];
        }
        n++;
        s->count[id] = 0;
    }
    return n;
}
