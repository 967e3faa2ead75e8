/* grammar_internal.h — the grammar's encoding and stack sets, shared by grammar.c (building,
 * matching), grammar_mask.c (token masks) and grammar_gbnf.c. */
#ifndef RF_ENGINE_GRAMMAR_INTERNAL_H
#define RF_ENGINE_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/grammar.h"

/* An element is an int32: a byte class (index << 2), a rule reference (rule << 2 | 1), the end
 * of an alternative (2) or of the rule (3). */
#define GE_CLASS(i) ((int32_t)(i) << 2)
#define GE_REF(r) ((int32_t)(r) << 2 | 1)
#define GE_ALT 2
#define GE_END 3
#define GE_IS_CLASS(e) (((e) & 3) == 0)
#define GE_IS_REF(e) (((e) & 3) == 1)
#define GE_IS_STOP(e) ((e) == GE_ALT || (e) == GE_END)
#define GE_VAL(e) ((e) >> 2)
#define RF_GRAMMAR_MAX_EXPAND 256 /* rule references entered before a byte class */

struct rf_grammar {
    atomic_int refs;
    int32_t *el; /* every rule's body, each ended by GE_END */
    int32_t n_el, cap_el;
    int32_t *rule_at; /* where rule r's body starts in el; -1 until defined */
    int32_t n_rules, cap_rules;
    rf_gclass *cls;
    int32_t n_cls, cap_cls;
    int32_t root;
    bool control_text; /* control tokens match by their text (rf_grammar_set_control_text) */
    /* token masks shared by every constraint of this grammar (grammar_mask.c): the requests of
     * a batch given one grammar meet the same parse states, so one computes what the others
     * look up; freed with the grammar */
    struct gshared *masks;
    pthread_mutex_t masks_mu;
};

/* A cached token mask: the stack set it was computed for (key, hash), the mask, its count. */
typedef struct centry {
    uint64_t hash;
    int32_t *key, n_key, n_allowed;
    uint8_t *mask;
} centry;

/* A grammar's shared masks: entries of one trie (uid) each, filled round robin by
 * grammar_mask.c; the grammar owns the storage and frees it with itself (grammar.c). */
#define SHARED_CACHE 256 /* per grammar: 256 masks (4 MiB at a 128k vocabulary) */
typedef struct gshared {
    centry e[SHARED_CACHE];
    uint64_t trie[SHARED_CACHE];
    int32_t next;
} gshared;

/* A set of parse stacks (positions into el; the top, last, is a byte class). A stack of length
 * 0 is a finished parse. */
typedef struct rf_gstate {
    int32_t *data, *off, *len;
    int32_t n, n_data, cap_data, cap_n, cap_len;
} rf_gstate;

typedef struct rf_gwork { /* scratch for expansion */
    int32_t *buf;
    int32_t top, cap;
} rf_gwork;

void rf_gstate_free(rf_gstate *s);
bool rf_gstate_copy(rf_gstate *dst, const rf_gstate *src);
bool rf_gstate_start(const rf_grammar *g, rf_gwork *w, rf_gstate *out);
/* out = in after byte c: 1, 0 when c leaves the grammar, -1 past the limits. */
int rf_gstate_step(const rf_grammar *g, rf_gwork *w, const rf_gstate *in, unsigned char c, rf_gstate *out);
bool rf_gstate_accepting(const rf_gstate *s);
const rf_gstate *rf_gmatch_state(const rf_gmatch *m);
/* The match's stack set made a copy of s (what it would be after feeding the bytes that lead
 * there); false when out of memory (the state unchanged). */
bool rf_gmatch_set_state(rf_gmatch *m, const rf_gstate *s);
rf_grammar *rf_gmatch_grammar(const rf_gmatch *m);

/* grammar_mask.c, for tests and benchmarks: how a constraint computes masks. NO_CACHE: every
 * mask walked (no lookups in its own or the grammar's cache, nothing stored); NO_FAST: the
 * whole-vocabulary walk even where a loop table would do (the reference the fast path is
 * checked against). Stats: masks walked (cache misses) and how many of them took a loop table. */
#define RF_GMASK_NO_CACHE 1
#define RF_GMASK_NO_FAST 2
void rf_gconstraint_set_mode(rf_gconstraint *c, int mode);
void rf_gconstraint_stats(const rf_gconstraint *c, int64_t *walks, int64_t *fast);

#endif
