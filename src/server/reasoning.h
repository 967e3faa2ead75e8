/* reasoning.h — a model's reasoning apart from its answer (reasoning.c): <think> blocks and
 * gpt-oss's harmony channels, and the held-back tail of a marker a growing text may complete. */
#ifndef RF_SERVER_REASONING_H
#define RF_SERVER_REASONING_H

#include "chat_out.h"

/* <think> splitting of text[0..n): the reasoning [*r0, *r1) and where the rest starts (*rest);
 * in partial mode *rest may be n with text held back. Returns false when the text has no
 * reasoning (then *rest = 0). */
bool srv_think_split(const char *t, size_t n, bool open, bool final, size_t *r0, size_t *r1, size_t *rest);
/* Whether a rendered prompt leaves the model inside a <think> block (it ends with "<think>"
 * and optional whitespace, as DeepSeek-R1-style templates do). */
bool srv_prompt_opens_think(const char *prompt, size_t n);
/* Harmony (gpt-oss) text to reasoning (analysis), content (final and plain commentary) and
 * calls (commentary to=functions.NAME). */
int srv_harmony_parse(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *out);

/* The length of the longest suffix of t[0..n) that is a proper prefix of `marker` (text that
 * may become the marker once more arrives). */
size_t srv_marker_tail(const char *t, size_t n, const char *marker);

#endif
