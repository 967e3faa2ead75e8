/* knobs.c — the RF_* environment variables (the registry is RF_KNOBS in knobs.h): parsed once per
 * process with one rule per type, logged once when set, printed by `rocmforge --help-env`. */
#include "core/knobs.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define RF_KNOB_INFO_(id, type, def, lo, hi, meaning) {"RF_" #id, RF_KNOB_##type, def, lo, hi, meaning},
static const rf_knob_info g_info[RF_KNOB_COUNT] = {RF_KNOBS(RF_KNOB_INFO_)};
#undef RF_KNOB_INFO_

typedef struct knob_val {
    bool set; /* a valid, non-empty value came from the environment (or an override) */
    bool b;
    int64_t i;
    double f;
    char *s; /* STRING: owned copy, NULL when unset */
} knob_val;

static knob_val g_val[RF_KNOB_COUNT];
static char *g_raw[RF_KNOB_COUNT]; /* the environment's text as read (for the start-up log) */
static char g_err[256];  /* the first parse error, reported by rf_knobs_init */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_int g_logged;

const rf_knob_info *rf_knob_describe(rf_knob k) {
    return (int)k >= 0 && k < RF_KNOB_COUNT ? &g_info[k] : NULL;
}

const char *rf_knob_type_name(rf_knob_type t) {
    switch (t) {
    case RF_KNOB_BOOL: return "bool";
    case RF_KNOB_INT: return "int";
    case RF_KNOB_FLOAT: return "float";
    case RF_KNOB_STRING: return "string";
    }
    return "?";
}

/* The error text without touching the thread's last error (the lazy first read in an accessor
 * must not overwrite a caller's message). */
static bool parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *out = true, true;
        if (!strcasecmp(s, no[i])) return *out = false, true;
    }
    return false;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* The string knobs with a fixed set of spellings. */
static bool string_ok(rf_knob k, const char *s) {
    static const char *const levels[] = {"error", "warn", "warning", "info", "debug", "0", "1", "2", "3"};
    if (k == RF_KNOB_TP_ALLREDUCE) return !strcmp(s, "auto") || !strcmp(s, "nccl") || !strcmp(s, "p2p");
    if (k != RF_KNOB_LOG) return true;
    for (size_t i = 0; i < sizeof levels / sizeof *levels; i++)
        if (!strcasecmp(s, levels[i])) return true;
    return false;
}

static const char *expect_text(const rf_knob_info *in, char *buf, size_t n) {
    switch (in->type) {
    case RF_KNOB_BOOL: return "a boolean (1/true/yes/on or 0/false/no/off)";
    case RF_KNOB_INT: snprintf(buf, n, "an integer from %lld to %lld", (long long)in->lo, (long long)in->hi); return buf;
    case RF_KNOB_FLOAT: return "a finite number";
    case RF_KNOB_STRING:
        if (in == &g_info[RF_KNOB_TP_ALLREDUCE]) return "auto, nccl or p2p";
        return in == &g_info[RF_KNOB_LOG] ? "error, warn, info, debug or 0-3" : "text";
    }
    return "?";
}

/* Parses s into v with k's rule; false (and *why filled) when it does not parse. s may be NULL
 * or empty: unset, the default. */
static bool knob_set_value(rf_knob k, const char *s, knob_val *v, char *why, size_t nwhy) {
    const rf_knob_info *in = &g_info[k];
    knob_val nv = {0};
    bool ok = true;
    const char *src = s && *s ? s : in->def;
    switch (in->type) {
    case RF_KNOB_BOOL: ok = parse_bool(src, &nv.b); break;
    case RF_KNOB_INT: ok = parse_int(src, in->lo, in->hi, &nv.i); break;
    case RF_KNOB_FLOAT: ok = parse_float(src, &nv.f); break;
    case RF_KNOB_STRING:
        ok = string_ok(k, src);
        nv.s = ok && *src ? strdup(src) : NULL;
        break;
    }
    if (!ok) {
        char buf[96];
        snprintf(why, nwhy, "%s=%s: expected %s (the default is %s)", in->name, s, expect_text(in, buf, sizeof buf),
                 *in->def ? in->def : "unset");
        knob_set_value(k, NULL, v, why, 0); /* the default: it always parses */
        return false;
    }
    nv.set = s && *s;
    free(v->s);
    *v = nv;
    return true;
}

static void read_env(void) {
    char why[256];
    for (int k = 0; k < RF_KNOB_COUNT; k++) {
        const char *env = getenv(g_info[k].name);
        g_raw[k] = env && *env ? strdup(env) : NULL;
        if (!knob_set_value((rf_knob)k, env, &g_val[k], why, sizeof why) && !g_err[0])
            snprintf(g_err, sizeof g_err, "%s", why);
    }
}

static void ensure_read(void) { pthread_once(&g_once, read_env); }

rf_status rf_knobs_init(void) {
    ensure_read();
    if (!atomic_exchange(&g_logged, 1))
        for (int k = 0; k < RF_KNOB_COUNT; k++)
            if (g_raw[k])
                RF_LOGI("%s=%s (%s)", g_info[k].name, k == RF_KNOB_API_KEY ? "(hidden)" : g_raw[k], g_info[k].meaning);
    return g_err[0] ? rf_set_error(RF_ERR_INVALID_ARG, "%s", g_err) : RF_OK;
}

bool rf_knob_bool(rf_knob k) {
    ensure_read();
    return g_val[k].b;
}

int64_t rf_knob_int(rf_knob k) {
    ensure_read();
    return g_val[k].i;
}

double rf_knob_float(rf_knob k) {
    ensure_read();
    return g_val[k].f;
}

const char *rf_knob_str(rf_knob k) {
    ensure_read();
    return g_val[k].s;
}

bool rf_knob_is_set(rf_knob k) {
    ensure_read();
    return g_val[k].set;
}

rf_status rf_knob_parse_bool(rf_knob k, const char *s, bool *out) {
    if (!rf_knob_describe(k) || !s) return rf_set_error(RF_ERR_INVALID_ARG, "knob %d: no such knob or no value", (int)k);
    if (!parse_bool(s, out))
        return rf_set_error(RF_ERR_INVALID_ARG, "%s=%s: expected a boolean (1/true/yes/on or 0/false/no/off)",
                            g_info[k].name, s);
    return RF_OK;
}

rf_status rf_knob_parse_int(rf_knob k, const char *s, int64_t *out) {
    if (!rf_knob_describe(k) || !s) return rf_set_error(RF_ERR_INVALID_ARG, "knob %d: no such knob or no value", (int)k);
    const rf_knob_info *in = &g_info[k];
    if (!parse_int(s, in->lo, in->hi, out))
        return rf_set_error(RF_ERR_INVALID_ARG, "%s=%s: expected an integer from %lld to %lld", in->name, s,
                            (long long)in->lo, (long long)in->hi);
    return RF_OK;
}

rf_status rf_knob_override(rf_knob k, const char *s) {
    if (!rf_knob_describe(k)) return rf_set_error(RF_ERR_INVALID_ARG, "knob %d: no such knob", (int)k);
    ensure_read();
    char why[256];
    if (!knob_set_value(k, s, &g_val[k], why, sizeof why)) return rf_set_error(RF_ERR_INVALID_ARG, "%s", why);
    return RF_OK;
}

void rf_knobs_print(FILE *f) {
    fprintf(f, "Environment variables rocmforge reads (once, at start; docs/knobs.md):\n"
               "booleans take 1/true/yes/on or 0/false/no/off; an empty value means unset;\n"
               "a value that does not parse is an error naming the variable.\n\n");
    fprintf(f, "%-20s %-7s %-8s %-14s %s\n", "variable", "type", "default", "range", "meaning");
    for (int k = 0; k < RF_KNOB_COUNT; k++) {
        const rf_knob_info *in = &g_info[k];
        char range[48] = "-";
        if (in->type == RF_KNOB_INT) snprintf(range, sizeof range, "%lld..%lld", (long long)in->lo, (long long)in->hi);
        fprintf(f, "%-20s %-7s %-8s %-14s %s\n", in->name, rf_knob_type_name(in->type), *in->def ? in->def : "-",
                range, in->meaning);
    }
}
