/* jinja.h — internal: a Jinja2 subset for chat templates (lexer, parser, evaluator) that
 * renders the way Hugging Face transformers renders chat templates (trim_blocks=True,
 * lstrip_blocks=True, loopcontrols, raise_exception, strftime_now, HF's tojson). */
#ifndef RF_TEMPLATE_JINJA_H
#define RF_TEMPLATE_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "rocmforge/core.h"
#include "rocmforge/tokenizer.h" /* rf_text_span */

typedef struct rf_jinja rf_jinja; /* a parsed template (immutable, shareable across threads) */

/* Resource limits for one render; zero fields take the defaults below. Exceeding one gives
 * RF_ERR_RANGE naming the limit, never a crash or a hang. */
typedef struct rf_jinja_limits {
    size_t max_output;     /* bytes of output (incl. captured set-blocks/macros); 16 MiB */
    size_t max_memory;     /* bytes the render may allocate; 256 MiB */
    uint64_t max_steps;    /* statements + loop iterations + calls; 20 M */
    int max_depth;         /* macro-call / nested-statement depth; 64 */
} rf_jinja_limits;

#define RF_JINJA_DEFAULT_MAX_OUTPUT (16u << 20)
#define RF_JINJA_DEFAULT_MAX_MEMORY (256u << 20)
#define RF_JINJA_DEFAULT_MAX_STEPS 20000000u
#define RF_JINJA_DEFAULT_MAX_DEPTH 64

/* Parses `len` bytes of template source. Unsupported tags, filters, tests, methods and
 * functions are reported here: RF_ERR_UNSUPPORTED ("line:col: unsupported filter 'x'"), a
 * syntax error RF_ERR_FORMAT ("line:col: expected ..."). */
rf_status rf_jinja_parse(const char *src, size_t len, rf_jinja **out);
void rf_jinja_free(rf_jinja *t);

/* Renders with the variables of the JSON object `vars` (JSON null is Python None; every
 * variable not in `vars` is undefined). `now` is the time strftime_now formats (0 = the
 * clock; a fixed time is formatted in UTC, the clock in local time). On success *out is
 * malloc'd and NUL-terminated. A raise_exception(msg) in the template gives RF_ERR_FORMAT
 * with rf_last_error() = msg exactly; other template errors give RF_ERR_FORMAT/RF_ERR_TYPE
 * with "line:col: ..." messages; exceeded limits give RF_ERR_RANGE. */
rf_status rf_jinja_render(const rf_jinja *t, const json_t *vars, const rf_jinja_limits *lim,
                          time_t now, char **out, size_t *out_len);

/* A render with the origin of its bytes: data[] are the byte ranges of text that came from
 * the caller's data (sorted, disjoint); everything else is the template's own text. */
typedef struct rf_jinja_output {
    char *text;            /* malloc'd, NUL-terminated */
    size_t len;
    rf_text_span *data;    /* malloc'd (NULL when n_data is 0) */
    size_t n_data;
} rf_jinja_output;

/* rf_jinja_render, tracking data: every string of `vars` is data except those of the
 * variables named in `trusted` (NULL-terminated list, may be NULL), which count as template
 * text (bos_token, eos_token). Strings derived from data stay data: concatenation, slices,
 * strip/split/replace/join keep byte-exact ranges, and a filter or method that transforms a
 * string holding data in another way marks its whole result as data. Numbers and booleans
 * carry no mark. On error *o is zeroed. */
rf_status rf_jinja_render_data(const rf_jinja *t, const json_t *vars, const char *const *trusted,
                               const rf_jinja_limits *lim, time_t now, rf_jinja_output *o);

/* Whether the last failing rf_jinja_render on this thread failed in raise_exception(). */
int rf_jinja_last_error_was_raise(void);

#endif
