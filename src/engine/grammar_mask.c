/* grammar_mask.c — which tokens keep the output inside a grammar: the vocabulary's byte strings
 * in a trie, walked depth-first from the current stack set so that a prefix that leaves the
 * grammar prunes every token below it; masks cached per stack set (inside a JSON string the set
 * repeats, so most steps are a lookup), per constraint and, behind it, per grammar (the requests
 * of one batch given one grammar share what any of them computed). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_internal.h"

#define TRIE_MAX_DEPTH 128 /* longer tokens are never allowed under a grammar */
#define MASK_CACHE 32
#define SHARED_CACHE 256 /* per grammar: 256 masks (4 MiB at a 128k vocabulary) */

typedef struct tnode {
    int32_t child, sibling; /* first child, next sibling: -1 none */
    int32_t tok;            /* first token ending here (-1), more in tok_next */
    unsigned char byte;
} tnode;

typedef struct vtrie {
    uint64_t uid; /* never reused: a grammar's shared masks name the trie they were made over */
    const rf_vocab *v;
    int32_t n_vocab, refs;
    tnode *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *tok_next; /* [n_vocab] the next token with the same bytes */
    int32_t *eog;
    int32_t n_eog;
} vtrie;

/* Tries shared by the live constraints of one vocabulary (built once while any is alive). */
static pthread_mutex_t g_trie_mu = PTHREAD_MUTEX_INITIALIZER;
static vtrie *g_tries[8];

static int32_t trie_child(vtrie *t, int32_t at, unsigned char b) {
    for (int32_t c = t->nodes[at].child; c >= 0; c = t->nodes[c].sibling)
        if (t->nodes[c].byte == b) return c;
    if (t->n_nodes == t->cap_nodes) {
        int32_t cap = t->cap_nodes ? t->cap_nodes * 2 : 4096;
        tnode *n = realloc(t->nodes, (size_t)cap * sizeof *n);
        if (!n) return -1;
        t->nodes = n;
        t->cap_nodes = cap;
    }
    int32_t c = t->n_nodes++;
    t->nodes[c] = (tnode){-1, t->nodes[at].child, -1, b};
    t->nodes[at].child = c;
    return c;
}

static void trie_free(vtrie *t) {
    if (!t) return;
    free(t->nodes);
    free(t->tok_next);
    free(t->eog);
    free(t);
}

static vtrie *trie_build(const rf_vocab *v) {
    vtrie *t = calloc(1, sizeof *t);
    int32_t nv = rf_vocab_n_tokens(v);
    if (!t) return NULL;
    t->v = v;
    t->n_vocab = nv;
    t->tok_next = malloc((size_t)nv * sizeof(int32_t));
    t->eog = malloc((size_t)nv * sizeof(int32_t));
    t->nodes = malloc(4096 * sizeof(tnode));
    if (!t->tok_next || !t->eog || !t->nodes) goto fail;
    t->cap_nodes = 4096;
    t->nodes[t->n_nodes++] = (tnode){-1, -1, -1, 0}; /* node 0: the root */
    char buf[TRIE_MAX_DEPTH + 1];
    for (int32_t id = 0; id < nv; id++) {
        t->tok_next[id] = -1;
        if (rf_vocab_is_eog(v, id)) t->eog[t->n_eog++] = id;
        size_t n = 0;
        if (rf_token_to_piece(v, id, false, buf, sizeof buf, &n) || n == 0 || n > TRIE_MAX_DEPTH) continue;
        int32_t at = 0;
        for (size_t i = 0; i < n && at >= 0; i++) at = trie_child(t, at, (unsigned char)buf[i]);
        if (at < 0) goto fail;
        t->tok_next[id] = t->nodes[at].tok;
        t->nodes[at].tok = id;
    }
    return t;
fail:
    trie_free(t);
    return NULL;
}

static vtrie *trie_get(const rf_vocab *v) {
    pthread_mutex_lock(&g_trie_mu);
    vtrie *t = NULL;
    int free_slot = -1;
    for (int i = 0; i < 8; i++) {
        if (g_tries[i] && g_tries[i]->v == v) t = g_tries[i];
        else if (!g_tries[i] && free_slot < 0) free_slot = i;
    }
    static uint64_t next_uid = 1;
    if (!t && free_slot >= 0 && (t = trie_build(v))) g_tries[free_slot] = t, t->uid = next_uid++;
    if (t) t->refs++;
    pthread_mutex_unlock(&g_trie_mu);
    return t;
}

static void trie_put(vtrie *t) {
    if (!t) return;
    pthread_mutex_lock(&g_trie_mu);
    if (--t->refs == 0) { /* the vocabulary may be freed after its last user: never keep a stale one */
        for (int i = 0; i < 8; i++)
            if (g_tries[i] == t) g_tries[i] = NULL;
        trie_free(t);
    }
    pthread_mutex_unlock(&g_trie_mu);
}

typedef struct centry {
    uint64_t hash;
    int32_t *key, n_key, n_allowed;
    uint8_t *mask;
} centry;

/* A grammar's shared masks: entries of one trie (uid) each, filled round robin. */
typedef struct gshared {
    centry e[SHARED_CACHE];
    uint64_t trie[SHARED_CACHE];
    int32_t next;
} gshared;

void rf_gmask_shared_free(gshared *s) {
    if (!s) return;
    for (int i = 0; i < SHARED_CACHE; i++) {
        free(s->e[i].key);
        free(s->e[i].mask);
    }
    free(s);
}

/* Copies mask (bytes) with its key and count into entry e; false (e emptied) when out of memory. */
static bool centry_set(centry *e, const int32_t *key, int32_t nk, uint64_t h, const uint8_t *mask, int32_t bytes,
                       int32_t n_allowed) {
    if (!e->mask) e->mask = malloc((size_t)bytes);
    int32_t *k = realloc(e->key, (size_t)(nk ? nk : 1) * sizeof(int32_t));
    if (k) e->key = k;
    if (!e->mask || !k) {
        free(e->mask);
        e->mask = NULL;
        return false;
    }
    memcpy(e->key, key, (size_t)nk * sizeof(int32_t));
    memcpy(e->mask, mask, (size_t)bytes);
    e->n_key = nk;
    e->hash = h;
    e->n_allowed = n_allowed;
    return true;
}

static bool centry_is(const centry *e, const int32_t *key, int32_t nk, uint64_t h) {
    return e->mask && e->hash == h && e->n_key == nk && !memcmp(e->key, key, (size_t)nk * sizeof(int32_t));
}

struct rf_gconstraint {
    rf_gmatch *m;
    vtrie *t;
    int32_t mask_bytes;
    uint8_t *mask;
    rf_gstate lv[TRIE_MAX_DEPTH + 1]; /* the stack set after each depth of the walk */
    rf_gwork w;
    centry cache[MASK_CACHE];
    int32_t cache_next;
    int32_t *key, cap_key;
    bool failed; /* past the grammar's limits during a walk: nothing allowed */
};

rf_status rf_gconstraint_new(rf_grammar *g, const rf_vocab *v, rf_gconstraint **out) {
    *out = NULL;
    rf_gconstraint *c = calloc(1, sizeof *c);
    if (!c) return rf_set_error(RF_ERR_OOM, "grammar: out of memory");
    rf_status st = rf_gmatch_new(g, &c->m);
    if (!st && !(c->t = trie_get(v))) st = rf_set_error(RF_ERR_OOM, "grammar: out of memory (vocabulary trie)");
    if (!st) {
        c->mask_bytes = (c->t->n_vocab + 7) / 8;
        if (!(c->mask = calloc((size_t)c->mask_bytes, 1))) st = rf_set_error(RF_ERR_OOM, "grammar: out of memory");
    }
    if (st) {
        rf_gconstraint_free(c);
        return st;
    }
    *out = c;
    return RF_OK;
}

void rf_gconstraint_free(rf_gconstraint *c) {
    if (!c) return;
    rf_gmatch_free(c->m);
    trie_put(c->t);
    free(c->mask);
    for (int i = 0; i <= TRIE_MAX_DEPTH; i++) rf_gstate_free(&c->lv[i]);
    free(c->w.buf);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(c->cache[i].key);
        free(c->cache[i].mask);
    }
    free(c->key);
    free(c);
}

/* The bytes any stack of s may take next. */
static void first_bytes(const rf_grammar *g, const rf_gstate *s, rf_gclass *u) {
    memset(u, 0, sizeof *u);
    for (int32_t i = 0; i < s->n; i++) {
        if (s->len[i] == 0) continue;
        const rf_gclass *k = &g->cls[GE_VAL(g->el[s->data[s->off[i] + s->len[i] - 1]])];
        for (int b = 0; b < 32; b++) u->bits[b] |= k->bits[b];
    }
}

/* Whether two stack sets hold the same stacks (in any order). */
static bool gstate_equal(const rf_gstate *a, const rf_gstate *b) {
    if (a->n != b->n || a->n_data != b->n_data) return false;
    for (int32_t i = 0; i < a->n; i++) {
        bool found = false;
        for (int32_t j = 0; j < b->n && !found; j++)
            found = a->len[i] == b->len[j] &&
                    (a->len[i] == 0 || !memcmp(a->data + a->off[i], b->data + b->off[j], (size_t)a->len[i] * sizeof(int32_t)));
        if (!found) return false;
    }
    return true;
}

/* The bytes that lead from s back to s itself (a JSON string's plain characters): below such a
 * byte the trie is walked from s again without stepping, which makes the walk of a string's
 * first step (nearly every token allowed) a byte test per trie node. tmp is scratch. */
static bool loop_bytes(rf_gconstraint *c, const rf_grammar *g, const rf_gstate *s, rf_gstate *tmp, rf_gclass *loop) {
    rf_gclass u;
    bool any = false;
    first_bytes(g, s, &u);
    memset(loop, 0, sizeof *loop);
    for (unsigned b = 0; b < 256; b++)
        if (rf_gclass_has(&u, b) && rf_gstate_step(g, &c->w, s, (unsigned char)b, tmp) > 0 && gstate_equal(tmp, s)) {
            rf_gclass_set(loop, b, b);
            any = true;
        }
    return any;
}

/* Marks the tokens below trie node `node` (at `depth` bytes) that st admits. ls / loop: the
 * nearest ancestor state with self-loop bytes, and those bytes (NULL: none known). */
static void walk(rf_gconstraint *c, const rf_grammar *g, int32_t node, int32_t depth, const rf_gstate *st,
                 const rf_gstate *ls, const rf_gclass *loop, int32_t *n_allowed) {
    if (depth >= TRIE_MAX_DEPTH) return;
    rf_gclass u, own;
    first_bytes(g, st, &u);
    int32_t width = 0;
    for (int b = 0; b < 32; b++) width += __builtin_popcount(u.bits[b]);
    /* worth the probes only near the root, where nodes fan out, and from a state that takes
     * most bytes (a string's inside) */
    if (st != ls && depth <= 2 && width >= 64) {
        int32_t kids = 0;
        for (int32_t ch = c->t->nodes[node].child; ch >= 0 && kids < 16; ch = c->t->nodes[ch].sibling) kids++;
        if (kids >= 16 && loop_bytes(c, g, st, &c->lv[depth + 1], &own)) {
            ls = st;
            loop = &own;
        }
    }
    for (int32_t ch = c->t->nodes[node].child; ch >= 0; ch = c->t->nodes[ch].sibling) {
        unsigned char b = c->t->nodes[ch].byte;
        if (!rf_gclass_has(&u, b)) continue;
        const rf_gstate *next = st;
        if (!(loop && st == ls && rf_gclass_has(loop, b))) {
            int r = rf_gstate_step(g, &c->w, st, b, &c->lv[depth + 1]);
            if (r < 0) c->failed = true;
            if (r <= 0) continue;
            next = &c->lv[depth + 1];
            if (ls && gstate_equal(next, ls)) next = ls; /* back in the loop state (after an escape) */
        }
        for (int32_t id = c->t->nodes[ch].tok; id >= 0; id = c->t->tok_next[id]) {
            c->mask[id >> 3] |= (uint8_t)(1u << (id & 7));
            (*n_allowed)++;
        }
        walk(c, g, ch, depth + 1, next, ls, loop, n_allowed);
    }
}

/* The current stack set serialized, and its hash (the cache key). */
static bool make_key(rf_gconstraint *c, const rf_gstate *s, int32_t *n, uint64_t *h) {
    int32_t need = 1 + s->n + s->n_data;
    if (need > c->cap_key) {
        int32_t *k = realloc(c->key, (size_t)need * sizeof(int32_t));
        if (!k) return false;
        c->key = k;
        c->cap_key = need;
    }
    int32_t at = 0;
    c->key[at++] = s->n;
    for (int32_t i = 0; i < s->n; i++) {
        c->key[at++] = s->len[i];
        if (s->len[i]) memcpy(c->key + at, s->data + s->off[i], (size_t)s->len[i] * sizeof(int32_t));
        at += s->len[i];
    }
    uint64_t x = 1469598103934665603ull;
    for (int32_t i = 0; i < at; i++) x = (x ^ (uint32_t)c->key[i]) * 1099511628211ull;
    *n = at;
    *h = x;
    return true;
}

/* The grammar's shared masks: a hit copied into c's own mask (and c's cache); *n the count. */
static bool shared_get(rf_gconstraint *c, rf_grammar *g, int32_t nk, uint64_t h, int32_t *n) {
    bool hit = false;
    pthread_mutex_lock(&g->masks_mu);
    for (int i = 0; g->masks && i < SHARED_CACHE && !hit; i++) {
        const centry *e = &g->masks->e[i];
        if (g->masks->trie[i] == c->t->uid && centry_is(e, c->key, nk, h)) {
            memcpy(c->mask, e->mask, (size_t)c->mask_bytes);
            *n = e->n_allowed;
            hit = true;
        }
    }
    pthread_mutex_unlock(&g->masks_mu);
    return hit;
}

static void shared_put(rf_gconstraint *c, rf_grammar *g, int32_t nk, uint64_t h, int32_t n) {
    pthread_mutex_lock(&g->masks_mu);
    if (!g->masks) g->masks = calloc(1, sizeof *g->masks);
    if (g->masks) {
        gshared *s = g->masks;
        if (centry_set(&s->e[s->next], c->key, nk, h, c->mask, c->mask_bytes, n)) {
            s->trie[s->next] = c->t->uid;
            s->next = (s->next + 1) % SHARED_CACHE;
        }
    }
    pthread_mutex_unlock(&g->masks_mu);
}

const uint8_t *rf_gconstraint_mask(rf_gconstraint *c, int32_t *n_allowed) {
    const rf_gstate *s = rf_gmatch_state(c->m);
    rf_grammar *g = (rf_grammar *)rf_gmatch_grammar(c->m); /* its shared masks are a cache */
    int32_t nk = 0;
    uint64_t h = 0;
    bool keyed = make_key(c, s, &nk, &h);
    for (int i = 0; keyed && i < MASK_CACHE; i++) {
        centry *e = &c->cache[i];
        if (centry_is(e, c->key, nk, h)) {
            *n_allowed = e->n_allowed;
            return e->mask;
        }
    }
    int32_t n = 0;
    if (keyed && shared_get(c, g, nk, h, &n)) {
        if (centry_set(&c->cache[c->cache_next], c->key, nk, h, c->mask, c->mask_bytes, n))
            c->cache_next = (c->cache_next + 1) % MASK_CACHE;
        *n_allowed = n;
        return c->mask;
    }
    memset(c->mask, 0, (size_t)c->mask_bytes);
    c->failed = false;
    if (rf_gstate_copy(&c->lv[0], s)) walk(c, g, 0, 0, &c->lv[0], NULL, NULL, &n);
    if (c->failed) { /* too ambiguous somewhere below: keep what was found, never cache it */
        keyed = false;
    }
    if (rf_gstate_accepting(s))
        for (int32_t i = 0; i < c->t->n_eog; i++) {
            int32_t id = c->t->eog[i];
            if (!((c->mask[id >> 3] >> (id & 7)) & 1)) n++;
            c->mask[id >> 3] |= (uint8_t)(1u << (id & 7));
        }
    *n_allowed = n;
    if (keyed) {
        if (centry_set(&c->cache[c->cache_next], c->key, nk, h, c->mask, c->mask_bytes, n))
            c->cache_next = (c->cache_next + 1) % MASK_CACHE;
        shared_put(c, g, nk, h, n);
    }
    return c->mask;
}

bool rf_gconstraint_accept(rf_gconstraint *c, int32_t id) {
    if (id < 0 || id >= c->t->n_vocab) return false;
    for (int32_t i = 0; i < c->t->n_eog; i++)
        if (c->t->eog[i] == id) return true;
    char buf[TRIE_MAX_DEPTH + 1];
    size_t n = 0;
    if (rf_token_to_piece(c->t->v, id, false, buf, sizeof buf, &n) || n > TRIE_MAX_DEPTH) return false;
    return rf_gmatch_feed(c->m, buf, n);
}

int32_t rf_gconstraint_eog(const rf_gconstraint *c) {
    int32_t e = rf_vocab_eos(c->t->v);
    if (e >= 0) return e;
    return c->t->n_eog > 0 ? c->t->eog[0] : -1;
}
