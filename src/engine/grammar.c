/* grammar.c — the grammar (rules of alternatives of byte classes and rule references, built by
 * json_schema.c and grammar_gbnf.c) and its recognizer: a set of parse stacks advanced one byte
 * at a time, each stack a list of element positions whose top is the next byte class to match. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_internal.h"

void rf_gclass_set(rf_gclass *c, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi && b < 256; b++) c->bits[b >> 3] |= (uint8_t)(1u << (b & 7));
}
bool rf_gclass_has(const rf_gclass *c, unsigned b) { return (c->bits[b >> 3] >> (b & 7)) & 1; }

rf_grammar *rf_grammar_new(void) {
    rf_grammar *g = calloc(1, sizeof *g);
    if (g) {
        atomic_init(&g->refs, 1);
        g->root = -1;
        pthread_mutex_init(&g->masks_mu, NULL);
    }
    return g;
}
void rf_grammar_ref(rf_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
}
static void shared_masks_free(gshared *s) {
    if (!s) return;
    for (int i = 0; i < SHARED_CACHE; i++) {
        free(s->e[i].key);
        free(s->e[i].mask);
    }
    free(s);
}
void rf_grammar_unref(rf_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    shared_masks_free(g->masks);
    pthread_mutex_destroy(&g->masks_mu);
    free(g->el);
    free(g->rule_at);
    free(g->cls);
    free(g);
}
int32_t rf_grammar_n_rules(const rf_grammar *g) { return g->n_rules; }
void rf_grammar_set_control_text(rf_grammar *g, bool on) { g->control_text = on; }

static bool grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

int32_t rf_grammar_rule(rf_grammar *g) {
    if (g->n_rules >= RF_GRAMMAR_MAX_ELEMS / 4 || !grow((void **)&g->rule_at, &g->cap_rules, g->n_rules + 1, sizeof(int32_t)))
        return -1;
    g->rule_at[g->n_rules] = -1;
    return g->n_rules++;
}

static void seq_push(rf_gseq *s, int32_t v) {
    if (s->oom || !grow((void **)&s->e, &s->cap, s->n + 1, sizeof(int32_t))) {
        s->oom = true;
        return;
    }
    s->e[s->n++] = v;
}

/* The class's index in g (an equal class is shared); -1 when out of memory. */
static int32_t class_index(rf_grammar *g, const rf_gclass *c) {
    for (int32_t i = 0; i < g->n_cls; i++)
        if (!memcmp(g->cls[i].bits, c->bits, sizeof c->bits)) return i;
    if (g->n_cls >= RF_GRAMMAR_MAX_ELEMS / 4 || !grow((void **)&g->cls, &g->cap_cls, g->n_cls + 1, sizeof(rf_gclass))) return -1;
    g->cls[g->n_cls] = *c;
    return g->n_cls++;
}

void rf_gseq_class(rf_grammar *g, rf_gseq *s, const rf_gclass *c) {
    int32_t i = class_index(g, c);
    if (i < 0) s->oom = true;
    else seq_push(s, GE_CLASS(i));
}
void rf_gseq_lit(rf_grammar *g, rf_gseq *s, const char *text, size_t n) {
    for (size_t i = 0; i < n; i++) {
        rf_gclass c = {{0}};
        rf_gclass_set(&c, (unsigned char)text[i], (unsigned char)text[i]);
        rf_gseq_class(g, s, &c);
    }
}
void rf_gseq_ref(rf_gseq *s, int32_t rule) {
    if (rule < 0) s->oom = true;
    else seq_push(s, GE_REF(rule));
}
void rf_gseq_alt(rf_gseq *s) { seq_push(s, GE_ALT); }
void rf_gseq_append(rf_gseq *s, const rf_gseq *t) {
    if (t->oom) s->oom = true;
    for (int32_t i = 0; i < t->n; i++) seq_push(s, t->e[i]);
}
void rf_gseq_free(rf_gseq *s) {
    free(s->e);
    memset(s, 0, sizeof *s);
}

rf_status rf_grammar_define(rf_grammar *g, int32_t rule, rf_gseq *s) {
    rf_status st = RF_OK;
    if (rule < 0 || rule >= g->n_rules || g->rule_at[rule] >= 0) st = rf_set_error(RF_ERR_INVALID_ARG, "grammar: bad rule %d", rule);
    else if (s->oom || g->n_el + s->n + 1 > RF_GRAMMAR_MAX_ELEMS ||
             !grow((void **)&g->el, &g->cap_el, g->n_el + s->n + 2, sizeof(int32_t)))
        st = rf_set_error(RF_ERR_OOM, "grammar: too large or out of memory");
    if (!st) {
        g->rule_at[rule] = g->n_el;
        if (s->n) memcpy(g->el + g->n_el, s->e, (size_t)s->n * sizeof(int32_t));
        g->n_el += s->n;
        g->el[g->n_el++] = GE_END;
    }
    rf_gseq_free(s);
    return st;
}

rf_status rf_grammar_finish(rf_grammar *g, int32_t root) {
    if (root < 0 || root >= g->n_rules) return rf_set_error(RF_ERR_INVALID_ARG, "grammar: no start rule");
    for (int32_t i = 0; i < g->n_el; i++)
        if (GE_IS_REF(g->el[i]) && g->rule_at[GE_VAL(g->el[i])] < 0)
            return rf_set_error(RF_ERR_INVALID_ARG, "grammar: rule %d is used but never defined", GE_VAL(g->el[i]));
    for (int32_t r = 0; r < g->n_rules; r++)
        if (g->rule_at[r] < 0) return rf_set_error(RF_ERR_INVALID_ARG, "grammar: rule %d has no body", r);
    g->root = root;
    return RF_OK;
}

/* ---- stack sets ---- */

static void gstate_clear(rf_gstate *s) {
    s->n = 0;
    s->n_data = 0;
}
void rf_gstate_free(rf_gstate *s) {
    free(s->data);
    free(s->off);
    free(s->len);
    memset(s, 0, sizeof *s);
}

/* Adds a stack unless an equal one is there. false: out of memory or too many stacks. */
static bool gstate_add(rf_gstate *s, const int32_t *st, int32_t n) {
    for (int32_t i = 0; i < s->n; i++)
        if (s->len[i] == n && (n == 0 || !memcmp(s->data + s->off[i], st, (size_t)n * sizeof(int32_t)))) return true;
    if (s->n >= RF_GRAMMAR_MAX_STACKS) return false;
    if (!grow((void **)&s->data, &s->cap_data, s->n_data + n + 1, sizeof(int32_t)) ||
        !grow((void **)&s->off, &s->cap_n, s->n + 1, sizeof(int32_t)) || !grow((void **)&s->len, &s->cap_len, s->n + 1, sizeof(int32_t)))
        return false;
    if (n) memcpy(s->data + s->n_data, st, (size_t)n * sizeof(int32_t));
    s->off[s->n] = s->n_data;
    s->len[s->n] = n;
    s->n_data += n;
    s->n++;
    return true;
}

bool rf_gstate_copy(rf_gstate *dst, const rf_gstate *src) {
    gstate_clear(dst);
    for (int32_t i = 0; i < src->n; i++)
        if (!gstate_add(dst, src->data + src->off[i], src->len[i])) return false;
    return true;
}

/* Scratch for building stacks during expansion: offsets, not pointers, survive its growth. */
static int32_t *scratch_take(rf_gwork *w, int32_t n, int32_t *at) {
    if (!grow((void **)&w->buf, &w->cap, w->top + n, sizeof(int32_t))) return NULL;
    *at = w->top;
    w->top += n;
    return w->buf + *at;
}

/* Expands the stack at w->buf[at .. at+n) until its top is a byte class (or it is empty: a
 * finished parse) and adds the results to out. Rule references fork one stack per alternative;
 * a reference at the end of its alternative is a tail call (the caller's position is not kept),
 * so right recursion (repetition) does not deepen the stack. */
static bool expand(const rf_grammar *g, rf_gwork *w, int32_t at, int32_t n, int32_t depth, rf_gstate *out) {
    if (depth > RF_GRAMMAR_MAX_EXPAND) return false; /* left recursion or an epsilon cycle */
    if (n == 0) return gstate_add(out, NULL, 0);
    int32_t pos = w->buf[at + n - 1], e = g->el[pos];
    if (GE_IS_CLASS(e)) return gstate_add(out, w->buf + at, n);
    if (n + 1 > RF_GRAMMAR_MAX_DEPTH) return false;
    int32_t next = g->el[pos + 1];
    bool keep = !GE_IS_STOP(next);
    for (int32_t a = g->rule_at[GE_VAL(e)];;) {
        int32_t sub, saved = w->top;
        int32_t *t = scratch_take(w, n + 1, &sub);
        if (!t) return false;
        memcpy(t, w->buf + at, (size_t)(n - 1) * sizeof(int32_t));
        int32_t m = n - 1;
        if (keep) t[m++] = pos + 1;
        if (!GE_IS_STOP(g->el[a])) t[m++] = a;
        bool ok = expand(g, w, sub, m, depth + 1, out);
        w->top = saved;
        if (!ok) return false;
        while (!GE_IS_STOP(g->el[a])) a++;
        if (g->el[a] == GE_END) break;
        a++;
    }
    return true;
}

bool rf_gstate_start(const rf_grammar *g, rf_gwork *w, rf_gstate *out) {
    gstate_clear(out);
    w->top = 0;
    int32_t at;
    int32_t *t = scratch_take(w, 1, &at);
    if (!t) return false;
    *t = 0; /* a virtual position: the root is entered through the root's alternatives */
    gstate_clear(out);
    bool ok = true;
    for (int32_t a = g->rule_at[g->root]; ok;) {
        w->top = 1;
        if (!GE_IS_STOP(g->el[a])) {
            w->buf[0] = a;
            ok = expand(g, w, 0, 1, 0, out);
        } else {
            ok = gstate_add(out, NULL, 0);
        }
        while (!GE_IS_STOP(g->el[a])) a++;
        if (g->el[a] == GE_END) break;
        a++;
    }
    w->top = 0;
    return ok;
}

int rf_gstate_step(const rf_grammar *g, rf_gwork *w, const rf_gstate *in, unsigned char c, rf_gstate *out) {
    gstate_clear(out);
    for (int32_t i = 0; i < in->n; i++) {
        int32_t n = in->len[i];
        if (n == 0) continue;
        const int32_t *st = in->data + in->off[i];
        int32_t pos = st[n - 1];
        if (!rf_gclass_has(&g->cls[GE_VAL(g->el[pos])], c)) continue;
        w->top = 0;
        int32_t at;
        int32_t *t = scratch_take(w, n, &at);
        if (!t) return -1;
        memcpy(t, st, (size_t)n * sizeof(int32_t));
        int32_t m = n;
        if (GE_IS_STOP(g->el[pos + 1])) m--; /* the alternative is finished: back to the caller */
        else t[m - 1] = pos + 1;
        if (!expand(g, w, at, m, 0, out)) return -1;
    }
    return out->n > 0;
}

bool rf_gstate_accepting(const rf_gstate *s) {
    for (int32_t i = 0; i < s->n; i++)
        if (s->len[i] == 0) return true;
    return false;
}

/* ---- a match ---- */

struct rf_gmatch {
    rf_grammar *g;
    rf_gstate cur, nxt;
    rf_gstate save; /* feed's copy of cur to fall back to: kept, so a token's feed allocates nothing */
    rf_gwork w;
};

rf_status rf_gmatch_new(rf_grammar *g, rf_gmatch **out) {
    *out = NULL;
    if (!g || g->root < 0) return rf_set_error(RF_ERR_INVALID_ARG, "grammar: not finished");
    rf_gmatch *m = calloc(1, sizeof *m);
    if (!m) return rf_set_error(RF_ERR_OOM, "grammar: out of memory");
    m->g = g;
    rf_grammar_ref(g);
    if (!rf_gstate_start(g, &m->w, &m->cur)) {
        rf_gmatch_free(m);
        return rf_set_error(RF_ERR_INVALID_ARG, "grammar: the start rule is left-recursive or too ambiguous");
    }
    *out = m;
    return RF_OK;
}

void rf_gmatch_free(rf_gmatch *m) {
    if (!m) return;
    rf_gstate_free(&m->cur);
    rf_gstate_free(&m->nxt);
    rf_gstate_free(&m->save);
    free(m->w.buf);
    rf_grammar_unref(m->g);
    free(m);
}

/* Every decode step of a constrained sequence feeds its token here (rf_gconstraint_accept), on
 * the step's critical path: cur is saved into the match's own buffers (grown once, reused), not a
 * fresh copy per token. */
bool rf_gmatch_feed(rf_gmatch *m, const char *bytes, size_t n) {
    if (n == 0) return true;
    if (!rf_gstate_copy(&m->save, &m->cur)) return false;
    for (size_t i = 0; i < n; i++) {
        if (rf_gstate_step(m->g, &m->w, &m->cur, (unsigned char)bytes[i], &m->nxt) <= 0) {
            rf_gstate t = m->cur; /* back to the state before the token */
            m->cur = m->save;
            m->save = t;
            return false;
        }
        rf_gstate t = m->cur;
        m->cur = m->nxt;
        m->nxt = t;
    }
    return true;
}

bool rf_gmatch_check(rf_gmatch *m, const char *bytes, size_t n) {
    rf_gstate save = {0};
    if (!rf_gstate_copy(&save, &m->cur)) {
        rf_gstate_free(&save);
        return false;
    }
    bool ok = rf_gmatch_feed(m, bytes, n);
    rf_gstate t = m->cur;
    m->cur = save;
    rf_gstate_free(&t);
    return ok;
}

bool rf_gmatch_accepting(const rf_gmatch *m) { return rf_gstate_accepting(&m->cur); }
bool rf_gmatch_done(const rf_gmatch *m) { return m->cur.n == 1 && m->cur.len[0] == 0; }

bool rf_grammar_accepts(rf_grammar *g, const char *text, size_t n) {
    rf_gmatch *m;
    if (rf_gmatch_new(g, &m)) return false;
    bool ok = rf_gmatch_feed(m, text, n) && rf_gmatch_accepting(m);
    rf_gmatch_free(m);
    return ok;
}

const rf_gstate *rf_gmatch_state(const rf_gmatch *m) { return &m->cur; }
bool rf_gmatch_set_state(rf_gmatch *m, const rf_gstate *s) {
    if (!rf_gstate_copy(&m->save, s)) return false; /* cur stays whole when the copy fails */
    rf_gstate t = m->cur;
    m->cur = m->save;
    m->save = t;
    return true;
}
rf_grammar *rf_gmatch_grammar(const rf_gmatch *m) { return m->g; }
