/* rocmforge/core.h — status codes, the last-error message, logging and the tensor type ids.
 * Everything else in the API builds on these. */
#ifndef ROCMFORGE_CORE_H
#define ROCMFORGE_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RF_VERSION_STRING "0.1.0"

/* Every fallible call returns one of these; RF_OK is 0 so `if (st)` means "failed".
 * The human-readable cause is in rf_last_error() (per thread). */
typedef enum rf_status {
    RF_OK = 0,
    RF_ERR_INVALID_ARG,   /* a caller passed something outside the contract */
    RF_ERR_IO,            /* open/read/write/mmap failed */
    RF_ERR_FORMAT,        /* a file or request is malformed (truncated, corrupt, hostile) */
    RF_ERR_UNSUPPORTED,   /* well-formed but not supported (arch, type, big-endian file) */
    RF_ERR_NOT_FOUND,     /* a named key, tensor or token is missing */
    RF_ERR_TYPE,          /* a value exists but has the wrong type */
    RF_ERR_RANGE,         /* a value is out of range (too long, too large, overflow) */
    RF_ERR_OOM,           /* host or device allocation failed */
    RF_ERR_DEVICE,        /* GPU runtime error, no device, kernel fault */
    RF_ERR_CANCELLED,     /* the caller asked to stop */
    RF_ERR_INTERNAL       /* a bug in ROCmForge: please report */
} rf_status;

/* Name of a status code ("RF_ERR_FORMAT"); never NULL. */
const char *rf_status_str(rf_status st);

/* Message of the last failing call on this thread ("" if none). Valid until the next failing
 * call on the same thread. */
const char *rf_last_error(void);

/* Records a printf-style message as this thread's last error and returns `st`, so that
 * `return rf_set_error(RF_ERR_FORMAT, "tensor '%s': ...", name);` is the idiom. */
rf_status rf_set_error(rf_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clears this thread's last error. */
void rf_clear_error(void);

/* ---- logging --------------------------------------------------------------------------- */

typedef enum rf_log_level {
    RF_LOG_ERROR = 0,
    RF_LOG_WARN = 1,
    RF_LOG_INFO = 2,
    RF_LOG_DEBUG = 3
} rf_log_level;

/* Messages at or below the level are printed to stderr. The initial level comes from the
 * RF_LOG environment variable (error|warn|info|debug or 0-3), default warn. */
void rf_log_set_level(rf_log_level level);
rf_log_level rf_log_get_level(void);
void rf_log(rf_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define RF_LOGE(...) rf_log(RF_LOG_ERROR, __VA_ARGS__)
#define RF_LOGW(...) rf_log(RF_LOG_WARN, __VA_ARGS__)
#define RF_LOGI(...) rf_log(RF_LOG_INFO, __VA_ARGS__)
#define RF_LOGD(...) rf_log(RF_LOG_DEBUG, __VA_ARGS__)

/* ---- tensor element types -------------------------------------------------------------- */

/* Tensor types with ggml's numeric ids (they are stored in GGUF files as-is).
 * Ids 4, 5, 31-33 and 36-38 were removed from ggml and are invalid. */
typedef enum rf_type {
    RF_TYPE_F32 = 0,
    RF_TYPE_F16 = 1,
    RF_TYPE_Q4_0 = 2,
    RF_TYPE_Q4_1 = 3,
    RF_TYPE_Q5_0 = 6,
    RF_TYPE_Q5_1 = 7,
    RF_TYPE_Q8_0 = 8,
    RF_TYPE_Q8_1 = 9,
    RF_TYPE_Q2_K = 10,
    RF_TYPE_Q3_K = 11,
    RF_TYPE_Q4_K = 12,
    RF_TYPE_Q5_K = 13,
    RF_TYPE_Q6_K = 14,
    RF_TYPE_Q8_K = 15,
    RF_TYPE_IQ2_XXS = 16,
    RF_TYPE_IQ2_XS = 17,
    RF_TYPE_IQ3_XXS = 18,
    RF_TYPE_IQ1_S = 19,
    RF_TYPE_IQ4_NL = 20,
    RF_TYPE_IQ3_S = 21,
    RF_TYPE_IQ2_S = 22,
    RF_TYPE_IQ4_XS = 23,
    RF_TYPE_I8 = 24,
    RF_TYPE_I16 = 25,
    RF_TYPE_I32 = 26,
    RF_TYPE_I64 = 27,
    RF_TYPE_F64 = 28,
    RF_TYPE_IQ1_M = 29,
    RF_TYPE_BF16 = 30,
    RF_TYPE_TQ1_0 = 34,
    RF_TYPE_TQ2_0 = 35,
    RF_TYPE_MXFP4 = 39,
    RF_TYPE_NVFP4 = 40,
    RF_TYPE_Q1_0 = 41,
    RF_TYPE_Q2_0 = 42,
    RF_TYPE_COUNT = 43
} rf_type;

/* Overflow-checked size arithmetic: return true on overflow (like __builtin_mul_overflow),
 * false when *out holds the exact result. */
static inline bool rf_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool rf_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

#ifdef __cplusplus
}
#endif
#endif
