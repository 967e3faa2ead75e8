/* log.c — leveled logging to stderr; the level starts from the RF_LOG knob (core/knobs.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/knobs.h"
#include "rocmforge/core.h"

static int rf_log_level_cur = -1; /* -1: not yet read from RF_LOG */

static rf_log_level rf_log_level_from_env(void) {
    const char *s = rf_knob_str(RF_KNOB_LOG);
    if (!s || !*s) return RF_LOG_WARN;
    if (!strcasecmp(s, "error") || !strcmp(s, "0")) return RF_LOG_ERROR;
    if (!strcasecmp(s, "warn") || !strcasecmp(s, "warning") || !strcmp(s, "1")) return RF_LOG_WARN;
    if (!strcasecmp(s, "info") || !strcmp(s, "2")) return RF_LOG_INFO;
    if (!strcasecmp(s, "debug") || !strcmp(s, "3")) return RF_LOG_DEBUG;
    return RF_LOG_WARN;
}

void rf_log_set_level(rf_log_level level) { rf_log_level_cur = (int)level; }

rf_log_level rf_log_get_level(void) {
    if (rf_log_level_cur < 0) rf_log_level_cur = (int)rf_log_level_from_env();
    return (rf_log_level)rf_log_level_cur;
}

void rf_log(rf_log_level level, const char *fmt, ...) {
    static const char *const tags[] = {"error", "warn", "info", "debug"};
    if ((int)level > (int)rf_log_get_level()) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    /* One fputs per line keeps lines whole when threads log at once. */
    fprintf(stderr, "[%s] %s%s", tags[level], buf, (n && buf[n - 1] == '\n') ? "" : "\n");
}
