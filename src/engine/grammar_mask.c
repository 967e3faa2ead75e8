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

typedef struct tnode {
    int32_t child, sibling; /* first child, next sibling: -1 none */
    int32_t tok;            /* first token ending here (-1), more in tok_next */
    unsigned char byte;
} tnode;

/* A loop table (per vocabulary and byte set L, built once): a state that every byte of L leads
 * back to itself (inside a JSON string: the plain characters) admits every token made only of
 * L's bytes, and whether it admits the others depends only on their bytes from the first one
 * outside L on. So a mask from such a state is `all` plus a walk of the suffix trie (those
 * tokens' bytes from their first byte outside L), not of the whole vocabulary. */
typedef struct ltable {
    rf_gclass loop;
    uint8_t *all; /* bit id: every byte of token id is in loop */
    int32_t n_all;
    tnode *nodes; /* the suffix trie, node 0 its root */
    int32_t n_nodes, cap_nodes;
    int32_t *tok_next; /* [n_vocab] the next token ending at the same suffix node */
} ltable;

#define MAX_LTABLES 16 /* per vocabulary; past it, masks take the whole walk */

typedef struct vtrie {
    uint64_t uid; /* never reused: a grammar's shared masks name the trie they were made over */
    const rf_vocab *v;
    bool control; /* control tokens in the trie by their text (rf_grammar_set_control_text) */
    int32_t n_vocab, refs;
    tnode *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *tok_next; /* [n_vocab] the next token with the same bytes */
    int32_t *eog;
    int32_t n_eog;
    unsigned char *bytes; /* token id's bytes at bytes + boff[id] (none when not in the trie) */
    int32_t *boff;        /* [n_vocab + 1] */
    ltable *lt[MAX_LTABLES]; /* built on first use under g_trie_mu, immutable after */
    int32_t n_lt;
} vtrie;

/* Tries shared by the live constraints of one vocabulary (built once while any is alive). */
static pthread_mutex_t g_trie_mu = PTHREAD_MUTEX_INITIALIZER;
static vtrie *g_tries[8];

/* Node at's child of byte b in a node array, made when missing; -1 when out of memory. */
static int32_t node_child(tnode **nodes, int32_t *n_nodes, int32_t *cap_nodes, int32_t at, unsigned char b) {
    for (int32_t c = (*nodes)[at].child; c >= 0; c = (*nodes)[c].sibling)
        if ((*nodes)[c].byte == b) return c;
    if (*n_nodes == *cap_nodes) {
        int32_t cap = *cap_nodes ? *cap_nodes * 2 : 4096;
        tnode *n = realloc(*nodes, (size_t)cap * sizeof *n);
        if (!n) return -1;
        *nodes = n;
        *cap_nodes = cap;
    }
    int32_t c = (*n_nodes)++;
    (*nodes)[c] = (tnode){-1, (*nodes)[at].child, -1, b};
    (*nodes)[at].child = c;
    return c;
}

static int32_t trie_child(vtrie *t, int32_t at, unsigned char b) { return node_child(&t->nodes, &t->n_nodes, &t->cap_nodes, at, b); }

static void ltable_free(ltable *l) {
    if (!l) return;
    free(l->all);
    free(l->nodes);
    free(l->tok_next);
    free(l);
}

static void trie_free(vtrie *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_lt; i++) ltable_free(t->lt[i]);
    free(t->nodes);
    free(t->bytes);
    free(t->boff);
    free(t->tok_next);
    free(t->eog);
    free(t);
}

/* Copies the subtree of old's node `at` into nw in depth-first order (children in their order):
 * a walk then reads the node array mostly forward instead of jumping through it. */
static int32_t relayout(const tnode *old, tnode *nw, int32_t at, int32_t *n) {
    int32_t me = (*n)++, prev = -1;
    nw[me] = old[at];
    nw[me].child = nw[me].sibling = -1;
    for (int32_t ch = old[at].child; ch >= 0; ch = old[ch].sibling) {
        int32_t c = relayout(old, nw, ch, n);
        if (prev < 0) nw[me].child = c;
        else nw[prev].sibling = c;
        prev = c;
    }
    return me;
}

static vtrie *trie_build(const rf_vocab *v, bool control) {
    vtrie *t = calloc(1, sizeof *t);
    int32_t nv = rf_vocab_n_tokens(v);
    if (!t) return NULL;
    t->v = v;
    t->control = control;
    t->n_vocab = nv;
    t->tok_next = malloc((size_t)nv * sizeof(int32_t));
    t->eog = malloc((size_t)nv * sizeof(int32_t));
    t->nodes = malloc(4096 * sizeof(tnode));
    t->boff = malloc(((size_t)nv + 1) * sizeof(int32_t));
    size_t cap_bytes = 1 << 20, n_bytes = 0;
    t->bytes = malloc(cap_bytes);
    if (!t->tok_next || !t->eog || !t->nodes || !t->boff || !t->bytes) goto fail;
    t->cap_nodes = 4096;
    t->nodes[t->n_nodes++] = (tnode){-1, -1, -1, 0}; /* node 0: the root */
    char buf[TRIE_MAX_DEPTH + 1];
    for (int32_t id = 0; id < nv; id++) {
        t->tok_next[id] = -1;
        t->boff[id] = (int32_t)n_bytes;
        bool eog = rf_vocab_is_eog(v, id);
        if (eog) t->eog[t->n_eog++] = id;
        if (eog && control) continue; /* only ever allowed where the grammar may end (the mask) */
        size_t n = 0;
        if (rf_token_to_piece(v, id, control, buf, sizeof buf, &n) || n == 0 || n > TRIE_MAX_DEPTH) continue;
        if (n_bytes + n > cap_bytes) {
            unsigned char *nb = realloc(t->bytes, cap_bytes *= 2);
            if (!nb || n_bytes + n > (size_t)INT32_MAX) goto fail;
            t->bytes = nb;
        }
        memcpy(t->bytes + n_bytes, buf, n);
        n_bytes += n;
        int32_t at = 0;
        for (size_t i = 0; i < n && at >= 0; i++) at = trie_child(t, at, (unsigned char)buf[i]);
        if (at < 0) goto fail;
        t->tok_next[id] = t->nodes[at].tok;
        t->nodes[at].tok = id;
    }
    t->boff[nv] = (int32_t)n_bytes;
    tnode *nw = malloc((size_t)t->n_nodes * sizeof *nw);
    if (nw) { /* without the memory, the insertion order serves */
        int32_t n = 0;
        relayout(t->nodes, nw, 0, &n);
        free(t->nodes);
        t->nodes = nw;
        t->cap_nodes = t->n_nodes;
    }
    return t;
fail:
    trie_free(t);
    return NULL;
}

static vtrie *trie_get(const rf_vocab *v, bool control) {
    pthread_mutex_lock(&g_trie_mu);
    vtrie *t = NULL;
    int free_slot = -1;
    for (int i = 0; i < 8; i++) {
        if (g_tries[i] && g_tries[i]->v == v && g_tries[i]->control == control) t = g_tries[i];
        else if (!g_tries[i] && free_slot < 0) free_slot = i;
    }
    static uint64_t next_uid = 1;
    if (!t && free_slot >= 0 && (t = trie_build(v, control))) g_tries[free_slot] = t, t->uid = next_uid++;
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

/* Token by token: made only of loop bytes, into `all`; else its bytes from the first one outside
 * the loop on, into the suffix trie. */
static bool ltable_fill(ltable *l, const vtrie *t) {
    bool in[256];
    for (unsigned b = 0; b < 256; b++) in[b] = rf_gclass_has(&l->loop, b);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const unsigned char *p = t->bytes + t->boff[id];
        int32_t n = t->boff[id + 1] - t->boff[id], k = 0;
        if (n == 0) continue; /* not in the trie: never allowed by a walk either */
        while (k < n && in[p[k]]) k++;
        if (k == n) {
            l->all[id >> 3] |= (uint8_t)(1u << (id & 7));
            l->n_all++;
            continue;
        }
        int32_t at = 0;
        for (; k < n && at >= 0; k++) at = node_child(&l->nodes, &l->n_nodes, &l->cap_nodes, at, p[k]);
        if (at < 0) return false;
        l->tok_next[id] = l->nodes[at].tok;
        l->nodes[at].tok = id;
    }
    return true;
}

/* t's loop table of byte set `loop`, built on first use; NULL when out of memory or when t
 * holds MAX_LTABLES already (the caller then walks the whole trie). */
static const ltable *ltable_get(vtrie *t, const rf_gclass *loop) {
    pthread_mutex_lock(&g_trie_mu);
    ltable *l = NULL;
    for (int32_t i = 0; i < t->n_lt && !l; i++)
        if (!memcmp(t->lt[i]->loop.bits, loop->bits, sizeof loop->bits)) l = t->lt[i];
    if (!l && t->n_lt < MAX_LTABLES && (l = calloc(1, sizeof *l))) {
        l->loop = *loop;
        l->all = calloc(((size_t)t->n_vocab + 7) / 8, 1);
        l->tok_next = malloc((size_t)(t->n_vocab ? t->n_vocab : 1) * sizeof(int32_t));
        l->nodes = malloc(4096 * sizeof(tnode));
        bool ok = l->all && l->tok_next && l->nodes;
        if (ok) {
            l->cap_nodes = 4096;
            l->nodes[l->n_nodes++] = (tnode){-1, -1, -1, 0};
            ok = ltable_fill(l, t);
        }
        if (ok) t->lt[t->n_lt++] = l;
        else {
            ltable_free(l);
            l = NULL;
        }
    }
    pthread_mutex_unlock(&g_trie_mu);
    return l;
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

/* The stack sets a constraint's walks meet, interned, with their transitions by byte computed
 * once each: a walk then costs a table lookup per trie node instead of a recognizer step (a
 * bounded string, maxLength, has no self-loop: each of its states is met once per walk at
 * every trie node). Kept across walks (the grammar does not change), emptied when half full. */
#define DFA_MAX 4096
#define DFA_SLOTS 8192 /* open addressing, a power of 2 above 2 * DFA_MAX */
typedef struct gdfa {
    rf_gstate *st; /* [cap] */
    rf_gclass *u;  /* [cap] the bytes st[i] takes */
    uint64_t *hash;
    int32_t *next; /* [cap * 256] the state after a byte: -2 not computed, -1 none */
    int32_t n, cap;
    int32_t *slot; /* [DFA_SLOTS] id + 1, 0 empty */
    bool full;     /* a walk met more than DFA_MAX states: it is redone as the plain walk */
    uint32_t gen;  /* bumped by every reset: ids of an older generation name nothing */
} gdfa;

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
    int mode;    /* RF_GMASK_NO_CACHE | RF_GMASK_NO_FAST (tests, benchmarks) */
    int64_t n_walks, n_fast;
    gdfa d;
    int32_t cur_id;   /* the match's state's id in d (dfa_accept put it there), -1 unknown */
    uint32_t cur_gen; /* d's generation when cur_id was taken */
};

void rf_gconstraint_set_mode(rf_gconstraint *c, int mode) { c->mode = mode; }
void rf_gconstraint_stats(const rf_gconstraint *c, int64_t *walks, int64_t *fast) {
    *walks = c->n_walks;
    *fast = c->n_fast;
}

rf_status rf_gconstraint_new(rf_grammar *g, const rf_vocab *v, rf_gconstraint **out) {
    *out = NULL;
    rf_gconstraint *c = calloc(1, sizeof *c);
    if (!c) return rf_set_error(RF_ERR_OOM, "grammar: out of memory");
    c->cur_id = -1;
    rf_status st = rf_gmatch_new(g, &c->m);
    if (!st && !(c->t = trie_get(v, g->control_text))) st = rf_set_error(RF_ERR_OOM, "grammar: out of memory (vocabulary trie)");
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
    for (int32_t i = 0; i < c->d.cap; i++) rf_gstate_free(&c->d.st[i]);
    free(c->d.st);
    free(c->d.u);
    free(c->d.hash);
    free(c->d.next);
    free(c->d.slot);
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

/* A state with self-loop bytes met during a walk: the state, those bytes, and the bytes it
 * takes (computed once: most nodes of a walk inside a string are visited in this state). */
typedef struct loopctx {
    const rf_gstate *ls;
    rf_gclass loop, u;
} loopctx;

/* Marks the tokens below node `node` (at `depth` bytes) of a trie (nodes, tok_next) that st
 * admits. lc: the nearest ancestor state with self-loop bytes (NULL: none known). */
static void walk(rf_gconstraint *c, const rf_grammar *g, const tnode *nodes, const int32_t *tok_next, int32_t node,
                 int32_t depth, const rf_gstate *st, const loopctx *lc, int32_t *n_allowed) {
    if (depth >= TRIE_MAX_DEPTH) return;
    rf_gclass u;
    loopctx own;
    bool in_loop = lc && st == lc->ls;
    if (in_loop) u = lc->u;
    else {
        first_bytes(g, st, &u);
        int32_t width = 0;
        for (int b = 0; b < 32; b++) width += __builtin_popcount(u.bits[b]);
        /* worth the probes only near the root, where nodes fan out, and from a state that takes
         * most bytes (a string's inside) */
        if (depth <= 2 && width >= 64) {
            int32_t kids = 0;
            for (int32_t ch = nodes[node].child; ch >= 0 && kids < 16; ch = nodes[ch].sibling) kids++;
            if (kids >= 16 && loop_bytes(c, g, st, &c->lv[depth + 1], &own.loop)) {
                own.ls = st;
                own.u = u;
                lc = &own;
                in_loop = true;
            }
        }
    }
    for (int32_t ch = nodes[node].child; ch >= 0; ch = nodes[ch].sibling) {
        unsigned char b = nodes[ch].byte;
        if (!rf_gclass_has(&u, b)) continue;
        const rf_gstate *next = st;
        if (!(in_loop && rf_gclass_has(&lc->loop, b))) {
            int r = rf_gstate_step(g, &c->w, st, b, &c->lv[depth + 1]);
            if (r < 0) c->failed = true;
            if (r <= 0) continue;
            next = &c->lv[depth + 1];
            if (lc && gstate_equal(next, lc->ls)) next = lc->ls; /* back in the loop state (after an escape) */
        }
        for (int32_t id = nodes[ch].tok; id >= 0; id = tok_next[id]) {
            c->mask[id >> 3] |= (uint8_t)(1u << (id & 7));
            (*n_allowed)++;
        }
        walk(c, g, nodes, tok_next, ch, depth + 1, next, lc, n_allowed);
    }
}

/* A hash of a stack set that does not depend on the order of its stacks. */
static uint64_t gstate_hash(const rf_gstate *s) {
    uint64_t h = 0;
    for (int32_t i = 0; i < s->n; i++) {
        uint64_t x = 1469598103934665603ull ^ (uint64_t)s->len[i];
        for (int32_t k = 0; k < s->len[i]; k++) x = (x ^ (uint32_t)s->data[s->off[i] + k]) * 1099511628211ull;
        x ^= x >> 29;
        h += x * 0xbf58476d1ce4e5b9ull;
    }
    return h ^ (uint64_t)s->n;
}

static void dfa_reset(gdfa *d) {
    d->gen++;
    d->n = 0;
    d->full = false;
    if (d->slot) memset(d->slot, 0, DFA_SLOTS * sizeof(int32_t));
}

/* s's id in d (added when new); -1 when d is full or out of memory (d->full set). */
static int32_t dfa_intern(const rf_grammar *g, gdfa *d, const rf_gstate *s) {
    if (!d->slot && !(d->slot = calloc(DFA_SLOTS, sizeof(int32_t)))) return d->full = true, -1;
    uint64_t h = gstate_hash(s);
    uint32_t at = (uint32_t)(h ^ (h >> 32)) & (DFA_SLOTS - 1);
    for (; d->slot[at]; at = (at + 1) & (DFA_SLOTS - 1)) {
        int32_t id = d->slot[at] - 1;
        if (d->hash[id] == h && gstate_equal(&d->st[id], s)) return id;
    }
    if (d->n >= DFA_MAX) return d->full = true, -1;
    if (d->n == d->cap) {
        int32_t cap = d->cap ? d->cap * 2 : 64;
        rf_gstate *st = realloc(d->st, (size_t)cap * sizeof *st);
        if (st) d->st = st;
        rf_gclass *u = realloc(d->u, (size_t)cap * sizeof *u);
        if (u) d->u = u;
        uint64_t *hh = realloc(d->hash, (size_t)cap * sizeof *hh);
        if (hh) d->hash = hh;
        int32_t *nx = realloc(d->next, (size_t)cap * 256 * sizeof *nx);
        if (nx) d->next = nx;
        if (!st || !u || !hh || !nx) return d->full = true, -1;
        memset(d->st + d->cap, 0, (size_t)(cap - d->cap) * sizeof *st);
        d->cap = cap;
    }
    int32_t id = d->n;
    if (!rf_gstate_copy(&d->st[id], s)) return d->full = true, -1;
    first_bytes(g, s, &d->u[id]);
    d->hash[id] = h;
    for (int k = 0; k < 256; k++) d->next[(size_t)id * 256 + k] = -2;
    d->n++;
    d->slot[at] = id + 1;
    return id;
}

/* walk's twin over interned states: the same tokens (each step is the same set function of the
 * same set), each (state, byte) stepped once. */
static void walk_dfa(rf_gconstraint *c, const rf_grammar *g, const tnode *nodes, const int32_t *tok_next, int32_t node,
                     int32_t depth, int32_t id, int32_t *n_allowed) {
    gdfa *d = &c->d;
    if (depth >= TRIE_MAX_DEPTH || d->full) return;
    for (int32_t ch = nodes[node].child; ch >= 0; ch = nodes[ch].sibling) {
        unsigned char b = nodes[ch].byte;
        if (!rf_gclass_has(&d->u[id], b)) continue;
        int32_t nx = d->next[(size_t)id * 256 + b];
        if (nx == -2) {
            int r = rf_gstate_step(g, &c->w, &d->st[id], b, &c->lv[1]);
            if (r < 0) c->failed = true;
            nx = r > 0 ? dfa_intern(g, d, &c->lv[1]) : -1;
            if (d->full) return;
            d->next[(size_t)id * 256 + b] = nx;
        }
        if (nx < 0) continue;
        for (int32_t t = nodes[ch].tok; t >= 0; t = tok_next[t]) {
            c->mask[t >> 3] |= (uint8_t)(1u << (t & 7));
            (*n_allowed)++;
        }
        walk_dfa(c, g, nodes, tok_next, ch, depth + 1, nx, n_allowed);
    }
}

/* The interned walk from st over a trie (the whole one or a loop table's suffix trie); false
 * when it met too many states (the mask is then partial: the caller redoes it). */
static bool dfa_walk(rf_gconstraint *c, const rf_grammar *g, const tnode *nodes, const int32_t *tok_next,
                     const rf_gstate *st, int32_t *n_allowed) {
    if (c->d.n > DFA_MAX / 2) dfa_reset(&c->d);
    c->d.full = false;
    int32_t id = dfa_intern(g, &c->d, st);
    if (id >= 0) walk_dfa(c, g, nodes, tok_next, 0, 0, id, n_allowed);
    if (c->d.full) {
        dfa_reset(&c->d);
        return false;
    }
    return true;
}

/* The mask from stack set st (c->lv[0]) through a loop table: when st takes most bytes and
 * many of them lead back to st itself (a JSON string's inside), the tokens made of those bytes
 * are a copy of the table's bitset and only the suffix trie (the other tokens from their first
 * byte outside the loop) is walked. The same tokens as the whole walk: a token is admitted iff
 * every step along its bytes succeeds, and a loop byte's step from st is st again. false: not
 * such a state (or no table); nothing written. */
static bool fast_walk(rf_gconstraint *c, const rf_grammar *g, const rf_gstate *st, int32_t *n_allowed) {
    loopctx lc = {st, {{0}}, {{0}}};
    first_bytes(g, st, &lc.u);
    int32_t width = 0, n_loop = 0;
    for (int b = 0; b < 32; b++) width += __builtin_popcount(lc.u.bits[b]);
    if (width < 64 || !loop_bytes(c, g, st, &c->lv[1], &lc.loop)) return false;
    for (int b = 0; b < 32; b++) n_loop += __builtin_popcount(lc.loop.bits[b]);
    const ltable *l = n_loop >= 32 ? ltable_get(c->t, &lc.loop) : NULL;
    if (!l) return false;
    memcpy(c->mask, l->all, (size_t)c->mask_bytes);
    *n_allowed = l->n_all;
    if (!dfa_walk(c, g, l->nodes, l->tok_next, st, n_allowed)) {
        memcpy(c->mask, l->all, (size_t)c->mask_bytes); /* too many states: the plain walk */
        *n_allowed = l->n_all;
        c->failed = false;
        walk(c, g, l->nodes, l->tok_next, 0, 0, st, &lc, n_allowed);
    }
    c->n_fast++;
    return true;
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
    bool keyed = !(c->mode & RF_GMASK_NO_CACHE) && make_key(c, s, &nk, &h);
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
    c->failed = false;
    c->n_walks++;
    if (rf_gstate_copy(&c->lv[0], s)) {
        bool done = !(c->mode & RF_GMASK_NO_FAST) && fast_walk(c, g, &c->lv[0], &n);
        if (!done && !(c->mode & RF_GMASK_NO_FAST)) { /* the whole trie, interned */
            memset(c->mask, 0, (size_t)c->mask_bytes);
            n = 0;
            done = dfa_walk(c, g, c->t->nodes, c->t->tok_next, &c->lv[0], &n);
            if (!done) c->failed = false;
        }
        if (!done) {
            memset(c->mask, 0, (size_t)c->mask_bytes);
            n = 0;
            walk(c, g, c->t->nodes, c->t->tok_next, 0, 0, &c->lv[0], NULL, &n);
        }
    } else memset(c->mask, 0, (size_t)c->mask_bytes);
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

/* The token's bytes fed through the interned states (the mask walks' table, the same set function
 * of the same sets as rf_gmatch_feed): a table lookup per byte once a (state, byte) was stepped,
 * where the recognizer copies and expands every stack per byte. 1 taken, 0 refused (the match
 * unchanged), -1 not decided here (the table full or out of memory: the caller feeds the bytes). */
static int dfa_accept(rf_gconstraint *c, const unsigned char *p, int32_t n) {
    const rf_grammar *g = rf_gmatch_grammar(c->m);
    gdfa *d = &c->d;
    if (d->n > DFA_MAX / 2) dfa_reset(d);
    d->full = false;
    /* the state the last accept left is interned already: no hash and compare of it */
    int32_t id = c->cur_id >= 0 && c->cur_gen == d->gen ? c->cur_id : dfa_intern(g, d, rf_gmatch_state(c->m));
    for (int32_t k = 0; k < n && id >= 0; k++) {
        if (!rf_gclass_has(&d->u[id], p[k])) return 0;
        int32_t nx = d->next[(size_t)id * 256 + p[k]];
        if (nx == -2) {
            int r = rf_gstate_step(g, &c->w, &d->st[id], p[k], &c->lv[1]);
            if (r < 0) return -1; /* past the limits: the recognizer says so itself */
            nx = r > 0 ? dfa_intern(g, d, &c->lv[1]) : -1;
            if (d->full) break;
            d->next[(size_t)id * 256 + p[k]] = nx;
        }
        if (nx < 0) return 0;
        id = nx;
    }
    if (d->full || id < 0) {
        dfa_reset(d);
        return -1;
    }
    if (!rf_gmatch_set_state(c->m, &d->st[id])) return -1;
    c->cur_id = id;
    c->cur_gen = d->gen;
    return 1;
}

bool rf_gconstraint_accept(rf_gconstraint *c, int32_t id) {
    if (id < 0 || id >= c->t->n_vocab) return false;
    for (int32_t i = 0; i < c->t->n_eog; i++)
        if (c->t->eog[i] == id) return true;
    const int32_t nb = c->t->boff[id + 1] - c->t->boff[id];
    if (nb > 0) { /* the bytes the trie holds (every step's token: no detokenizing on the step's path) */
        const unsigned char *p = c->t->bytes + c->t->boff[id];
        int r = c->mode & RF_GMASK_NO_FAST ? -1 : dfa_accept(c, p, nb);
        if (r >= 0) return r == 1;
        c->cur_id = -1; /* the recognizer moves the state past what d knows */
        return rf_gmatch_feed(c->m, (const char *)p, (size_t)nb);
    }
    c->cur_id = -1;
    char buf[TRIE_MAX_DEPTH + 1]; /* not in the trie: empty, too long, or no piece */
    size_t n = 0;
    if (rf_token_to_piece(c->t->v, id, c->t->control, buf, sizeof buf, &n) || n > TRIE_MAX_DEPTH) return false;
    return rf_gmatch_feed(c->m, buf, n);
}

int32_t rf_gconstraint_eog(const rf_gconstraint *c) {
    int32_t e = rf_vocab_eos(c->t->v);
    if (e >= 0) return e;
    return c->t->n_eog > 0 ? c->t->eog[0] : -1;
}
