/* grammar.h — constrained decoding: a context-free grammar over bytes (rules of alternatives of
 * byte classes and rule references), its pushdown recognizer (a set of stacks, as GBNF engines
 * run them), and the per-step token mask over a vocabulary (grammar_mask.c). */
#ifndef RF_ENGINE_GRAMMAR_H
#define RF_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rocmforge/engine.h"
#include "rocmforge/tokenizer.h"

/* Limits that bound one step's cost and memory (docs/server.md, "Structured output"). */
#define RF_GRAMMAR_MAX_STACKS 256 /* parallel parses of one prefix; more is an error */
#define RF_GRAMMAR_MAX_DEPTH 512  /* nesting depth of one parse stack */
#define RF_GRAMMAR_MAX_ELEMS (1 << 20)

typedef struct rf_grammar rf_grammar; /* compiled, immutable once built, reference counted */

/* ---- building (json_schema.c, grammar_gbnf.c) ---- */

/* A byte class: bit b set when byte b is in it. */
typedef struct rf_gclass {
    uint8_t bits[32];
} rf_gclass;
void rf_gclass_set(rf_gclass *c, unsigned lo, unsigned hi); /* [lo, hi] inclusive */
bool rf_gclass_has(const rf_gclass *c, unsigned b);

/* One alternative or a whole rule body under construction: elements, with rf_gseq_alt
 * separating alternatives. */
typedef struct rf_gseq {
    int32_t *e; /* encoded elements (grammar.c) */
    int32_t n, cap;
    bool oom;
} rf_gseq;

rf_grammar *rf_grammar_new(void);
void rf_grammar_ref(rf_grammar *g);
void rf_grammar_unref(rf_grammar *g);
/* A new rule id (its body is defined later); -1 when out of memory or past the limits. */
int32_t rf_grammar_rule(rf_grammar *g);
void rf_gseq_lit(rf_grammar *g, rf_gseq *s, const char *text, size_t n); /* bytes, in order */
void rf_gseq_class(rf_grammar *g, rf_gseq *s, const rf_gclass *c);
void rf_gseq_ref(rf_gseq *s, int32_t rule);
void rf_gseq_alt(rf_gseq *s);
void rf_gseq_append(rf_gseq *s, const rf_gseq *t); /* t's elements after s's */
void rf_gseq_free(rf_gseq *s);
/* Sets rule's body to s (consumed: s is emptied). */
rf_status rf_grammar_define(rf_grammar *g, int32_t rule, rf_gseq *s);
/* Checks every referenced rule has a body and sets the start rule. */
rf_status rf_grammar_finish(rf_grammar *g, int32_t root);
int32_t rf_grammar_n_rules(const rf_grammar *g);
/* Whether control tokens (other than end-of-generation ones) are matched by their text (default
 * false: they are never allowed). Set it, before the grammar is used, for a grammar over output
 * that renders control tokens, whose markers are control tokens the model must be able to emit
 * (the server's tool-call grammars for Mistral's [TOOL_CALLS] and harmony's <|channel|>). */
void rf_grammar_set_control_text(rf_grammar *g, bool on);

/* GBNF text (llama.cpp's grammar syntax) -> a grammar whose root is the rule named "root". */
rf_status rf_grammar_parse_gbnf(const char *text, size_t len, rf_grammar **out);

/* ---- matching ---- */

typedef struct rf_gmatch rf_gmatch; /* one parse in progress */

rf_status rf_gmatch_new(rf_grammar *g, rf_gmatch **out);
void rf_gmatch_free(rf_gmatch *m);
/* Feeds bytes; false (and the match unchanged) when they leave the grammar. */
bool rf_gmatch_feed(rf_gmatch *m, const char *bytes, size_t n);
/* Whether the bytes could be fed (the match unchanged either way). */
bool rf_gmatch_check(rf_gmatch *m, const char *bytes, size_t n);
bool rf_gmatch_accepting(const rf_gmatch *m); /* the text so far is a whole sentence */
bool rf_gmatch_done(const rf_gmatch *m);      /* accepting and nothing may follow */
/* Whether the whole text is a sentence of g (tests). */
bool rf_grammar_accepts(rf_grammar *g, const char *text, size_t n);

/* ---- token masks (grammar_mask.c) ---- */

typedef struct rf_gconstraint rf_gconstraint; /* a match plus the vocabulary and a mask cache */

rf_status rf_gconstraint_new(rf_grammar *g, const rf_vocab *v, rf_gconstraint **out);
void rf_gconstraint_free(rf_gconstraint *c);
/* The tokens allowed next (bit id of mask, (n_vocab + 7) / 8 bytes, owned by c and valid until
 * the next call); *n_allowed their count. End-of-generation tokens are allowed only in an
 * accepting state. */
const uint8_t *rf_gconstraint_mask(rf_gconstraint *c, int32_t *n_allowed);
/* Advances past a sampled token (end-of-generation tokens: nothing). false: the token left the
 * grammar (it was not allowed). */
bool rf_gconstraint_accept(rf_gconstraint *c, int32_t id);
/* An end-of-generation token to end a choice whose grammar admits no token. */
int32_t rf_gconstraint_eog(const rf_gconstraint *c);

/* ---- the sampler (sampler.c) ---- */

/* Constrains s's draws to g from now on: disallowed tokens get -inf before temperature, top-k,
 * top-p and min-p; a sampled token advances the grammar. When no token is allowed the sampler
 * returns an end-of-generation token (the choice ends with "stop"). */
rf_status rf_sampler_set_grammar(rf_sampler *s, rf_grammar *g, const rf_vocab *v);
/* For sampling on the device: whether s has a grammar; its mask for the next draw (bit i % 8
 * of byte i / 8: token i allowed, (n_vocab + 7) / 8 bytes, valid until the next call on s) and
 * the number of allowed tokens in *n_ok (0: none; the choice must end with rf_sampler_grammar_pick's
 * fallback). */
bool rf_sampler_has_grammar(const rf_sampler *s);
const uint8_t *rf_sampler_grammar_mask(rf_sampler *s, int32_t *n_ok);
/* The token a draw under s's mask gives (on the host or the device): id advances the grammar and is returned; when
 * the grammar admitted nothing (n_ok was 0) or refuses id (every allowed logit was NaN) it is
 * an end-of-generation token (the choice ends with "stop"), as rf_sampler_sample does. */
int32_t rf_sampler_grammar_pick(rf_sampler *s, int32_t id, bool none_allowed);

#endif
