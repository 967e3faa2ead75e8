/* detok.h — what the tokenizer gives the engine beyond the public API (detok.c): rf_textout, a
 * choice's text output (the streaming detokenizer, then stop strings held back). */
#ifndef RF_DETOK_H
#define RF_DETOK_H

#include <stdbool.h>
#include <stddef.h>

#include "rocmforge/tokenizer.h"

#define RF_MAX_STOPS 16

typedef struct rf_textout {
    rf_detok *dt;
    char *buf;       /* produced, not yet released (may begin a stop string) */
    size_t len, cap;
    size_t rel;      /* leading bytes handed out by the last call, dropped at the next */
    char **stops;    /* owned copies */
    size_t *stop_len;
    int n_stop;
} rf_textout;

rf_status rf_textout_init(rf_textout *t, const rf_vocab *v, bool render_special, char *const *stops,
                          const size_t *stop_len, int n_stop);
void rf_textout_free(rf_textout *t);
/* Feeds a token; *out / *out_len receive the text now safe to release (pointer into t, valid
 * until the next call); *hit is set when a stop string appeared (text before it is released,
 * the rest dropped). */
rf_status rf_textout_push(rf_textout *t, int32_t id, const char **out, size_t *out_len, bool *hit);
/* End of generation: releases what was held back (the detokenizer's tail too). */
rf_status rf_textout_finish(rf_textout *t, const char **out, size_t *out_len, bool *hit);

#endif
