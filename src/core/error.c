/* error.c — rf_status names and the per-thread last-error message. */
#include <stdio.h>
#include <string.h>

#include "rocmforge/core.h"

static _Thread_local char rf_error_buf[1024];

const char *rf_status_str(rf_status st) {
    switch (st) {
    case RF_OK: return "RF_OK";
    case RF_ERR_INVALID_ARG: return "RF_ERR_INVALID_ARG";
    case RF_ERR_IO: return "RF_ERR_IO";
    case RF_ERR_FORMAT: return "RF_ERR_FORMAT";
    case RF_ERR_UNSUPPORTED: return "RF_ERR_UNSUPPORTED";
    case RF_ERR_NOT_FOUND: return "RF_ERR_NOT_FOUND";
    case RF_ERR_TYPE: return "RF_ERR_TYPE";
    case RF_ERR_RANGE: return "RF_ERR_RANGE";
    case RF_ERR_OOM: return "RF_ERR_OOM";
    case RF_ERR_DEVICE: return "RF_ERR_DEVICE";
    case RF_ERR_CANCELLED: return "RF_ERR_CANCELLED";
    case RF_ERR_INTERNAL: return "RF_ERR_INTERNAL";
    }
    return "RF_ERR_UNKNOWN";
}

const char *rf_last_error(void) { return rf_error_buf; }

void rf_clear_error(void) { rf_error_buf[0] = '\0'; }

/* Formats into a local buffer first: callers wrap the previous message
 * (rf_set_error(st, "context: %s", rf_last_error())), and vsnprintf from the buffer into itself
 * is undefined (it printed the context twice and lost the cause). */
rf_status rf_set_error(rf_status st, const char *fmt, ...) {
    char tmp[sizeof rf_error_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(rf_error_buf, tmp, sizeof tmp);
    return st;
}
