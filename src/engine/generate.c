/* generate.c — rf_generate: the generation loop. Reuses the cached prefix, evaluates the rest
 * of the prompt in batches, then samples token by token, streaming UTF-8-complete text and
 * holding back text that could be the start of a stop string. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"

rf_gen_params rf_gen_default_params(void) {
    rf_gen_params p;
    memset(&p, 0, sizeof p);
    p.sampling = rf_sampler_default_params();
    p.max_tokens = -1;
    return p;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Text produced but not yet emitted (it may be the beginning of a stop string). */
typedef struct pending {
    char *buf;
    size_t len, cap;
} pending;

static rf_status pend_add(pending *p, const char *s, size_t n) {
    if (p->len + n + 1 > p->cap) {
        size_t cap = (p->len + n + 1) * 2;
        char *b = realloc(p->buf, cap);
        if (!b) return rf_set_error(RF_ERR_OOM, "generate: out of memory");
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->buf[p->len] = 0;
    return RF_OK;
}

/* Length of the longest suffix of buf[0..len) that is a proper prefix of some stop string. */
static size_t stop_holdback(const char *buf, size_t len, const rf_gen_params *gp) {
    size_t best = 0;
    for (size_t i = 0; i < gp->n_stop; i++) {
        const char *st = gp->stop[i];
        size_t sl = strlen(st);
        for (size_t k = sl > 1 ? sl - 1 : 0; k > best; k--)
            if (k <= len && !memcmp(buf + len - k, st, k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Emits what is safe; returns false if the callback asked to stop. Sets *hit when a stop string
 * is found (text before it is emitted, the rest dropped). */
static bool pend_flush(pending *p, const rf_gen_params *gp, bool final, rf_piece_fn cb, void *user,
                       bool *hit) {
    size_t cut = p->len;
    *hit = false;
    if (!p->buf) return true; /* nothing produced yet */
    for (size_t i = 0; i < gp->n_stop; i++) {
        if (!gp->stop[i] || !gp->stop[i][0]) continue;
        /* by length, not strstr: generated text may hold NUL bytes (a byte token <0x00>) */
        const char *f = memmem(p->buf, p->len, gp->stop[i], strlen(gp->stop[i]));
        if (f && (size_t)(f - p->buf) < cut) {
            cut = (size_t)(f - p->buf);
            *hit = true;
        }
    }
    size_t emit = cut;
    if (!*hit && !final) emit = p->len - stop_holdback(p->buf, p->len, gp);
    bool go = true;
    if (emit > 0 && cb) go = cb(p->buf, emit, user);
    if (*hit) {
        p->len = 0;
    } else {
        memmove(p->buf, p->buf + emit, p->len - emit);
        p->len -= emit;
    }
    if (p->buf) p->buf[p->len] = 0;
    return go;
}

rf_status rf_generate(rf_session *s, const int32_t *prompt, int32_t n_prompt, const rf_gen_params *gp_in,
                      rf_piece_fn cb, void *user, rf_gen_stats *stats) {
    rf_gen_params gp = gp_in ? *gp_in : rf_gen_default_params();
    rf_gen_stats st0;
    memset(&st0, 0, sizeof st0);
    if (stats) *stats = st0;
    if (!s || !prompt || n_prompt <= 0) return rf_set_error(RF_ERR_INVALID_ARG, "generate: empty prompt");
    int32_t n_ctx = rf_session_n_ctx(s);
    if (n_prompt > n_ctx)
        return rf_set_error(RF_ERR_RANGE, "the prompt has %d tokens but the context holds %d", n_prompt, n_ctx);
    const rf_vocab *vocab = rf_session_vocab(s);
    int32_t n_vocab = rf_session_n_vocab(s);

    /* reuse the longest cached prefix (at least the last prompt token is evaluated again) */
    const int32_t *cached = rf_session_tokens(s);
    int32_t common = 0, n_past = rf_session_n_past(s);
    while (common < n_past && common < n_prompt - 1 && cached[common] == prompt[common]) common++;
    rf_status st = rf_session_truncate(s, common);
    if (st) return st;

    rf_sampler *smp = NULL;
    rf_detok *dt = NULL;
    pending pend = {0};
    int32_t *gen = NULL;
    if ((st = rf_sampler_new(&gp.sampling, n_vocab, &smp))) goto done;
    if ((st = rf_detok_new(vocab, gp.render_special, &dt))) goto done;
    for (int32_t i = 0; i < n_prompt; i++) rf_sampler_accept(smp, prompt[i]);
    int32_t max_gen = gp.max_tokens < 0 ? n_ctx : gp.max_tokens;
    gen = malloc(((size_t)max_gen + 1) * sizeof(int32_t));
    if (!gen) {
        st = rf_set_error(RF_ERR_OOM, "generate: out of memory");
        goto done;
    }

    double t0 = now_ms();
    st = rf_session_eval(s, prompt + common, n_prompt - common, false);
    if (st) goto done;
    st0.n_prompt = n_prompt - common;
    st0.n_reused = common;
    st0.prompt_ms = now_ms() - t0;
    t0 = now_ms();
    const float *logits = rf_session_logits(s, n_prompt - common - 1);
    char piece[512];
    for (;;) {
        if (st0.n_gen >= max_gen) {
            st0.finish = RF_FINISH_LENGTH;
            break;
        }
        if (gp.cancel && *gp.cancel) {
            st0.finish = RF_FINISH_CANCELLED;
            break;
        }
        int32_t id = rf_sampler_sample(smp, logits);
        if (id < 0) {
            st = rf_set_error(RF_ERR_INTERNAL, "generate: every logit is NaN");
            goto done;
        }
        gen[st0.n_gen++] = id;
        rf_sampler_accept(smp, id);
        if (!gp.ignore_eos && rf_vocab_is_eog(vocab, id)) {
            st0.finish = RF_FINISH_EOS;
            break;
        }
        size_t np = 0;
        if ((st = rf_detok_push(dt, id, piece, sizeof piece, &np))) goto done;
        if ((st = pend_add(&pend, piece, np < sizeof piece ? np : sizeof piece))) goto done;
        bool hit = false;
        if (!pend_flush(&pend, &gp, false, cb, user, &hit)) {
            st0.finish = RF_FINISH_CANCELLED;
            break;
        }
        if (hit) {
            st0.finish = RF_FINISH_STOP;
            break;
        }
        if (rf_session_n_past(s) >= n_ctx) {
            st0.finish = RF_FINISH_CONTEXT;
            break;
        }
        if (st0.n_gen >= max_gen) {
            st0.finish = RF_FINISH_LENGTH;
            break;
        }
        if ((st = rf_session_eval(s, &id, 1, false))) goto done;
        logits = rf_session_logits(s, 0);
    }
    if (st0.finish != RF_FINISH_STOP && st0.finish != RF_FINISH_CANCELLED) {
        size_t np = 0;
        if (rf_detok_flush(dt, piece, sizeof piece, &np) == RF_OK && np)
            pend_add(&pend, piece, np < sizeof piece ? np : sizeof piece);
        bool hit;
        pend_flush(&pend, &gp, true, cb, user, &hit);
        if (hit) st0.finish = RF_FINISH_STOP;
    }
    st0.gen_ms = now_ms() - t0;
done:
    rf_sampler_free(smp);
    rf_detok_free(dt);
    free(pend.buf);
    if (st == RF_OK && stats) {
        st0.tokens = gen;
        gen = NULL;
        *stats = st0;
    }
    free(gen);
    return st;
}
