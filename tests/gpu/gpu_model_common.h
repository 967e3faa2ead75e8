/* gpu_model_common.h — helpers of the GPU tests that run whole models: synthetic models made
 * once per test directory with `rocmforge mkmodel`, loading on a device, sessions, random
 * prompts, and the logits comparison every whole-model test states its tolerances on. */
#ifndef RF_GPU_MODEL_COMMON_H
#define RF_GPU_MODEL_COMMON_H

#include "gpu_test_common.h"

#include <math.h>
#include <unistd.h>

#include "engine/engine_internal.h"

static char g_dir[1024];

/* The directory synthetic models go to: RF_SYNTH_DIR (on a device machine the build tree may be
 * read-only), else the build tree. */
static inline void gpu_model_dirs(void) {
    const char *sd = getenv("RF_SYNTH_DIR");
    snprintf(g_dir, sizeof g_dir, "%s", sd && *sd ? sd : RF_BINARY_DIR "/synth-models");
}

static inline void mkmodel(const char *preset, const char *type, char *path, size_t n) {
    const char *cli = getenv("RF_CLI");
    if (!cli) fail_msg("RF_CLI is not set");
    snprintf(path, n, "%s/gpufwd-%s.%s.gguf", g_dir, preset, type);
    if (access(path, R_OK) == 0) return;
    /* written under a name of this process, then renamed: a test running beside this one (ctest
     * -j, gpu-check.sh's lanes) never sees a half-written file under the final name */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && '%s' mkmodel --preset %s --type %s --pure -o '%s.%d' >/dev/null 2>&1 && mv -f '%s.%d' '%s'",
             g_dir, cli, preset, type, path, (int)getpid(), path, (int)getpid(), path);
    if (system(cmd) != 0) fail_msg("mkmodel %s %s failed", preset, type);
}

static inline rf_model *load(const char *path, rf_device dev) {
    rf_model_params mp = rf_model_default_params();
    mp.device = dev;
    rf_model *m = NULL;
    if (rf_model_load(path, &mp, &m)) fail_msg("load %s on %s: %s", path, dev ? "gpu" : "cpu", rf_last_error());
    return m;
}

static inline rf_session *session(rf_model *m, int ctx) {
    rf_session_params sp = rf_session_default_params();
    sp.n_ctx = ctx;
    sp.n_batch = 64; /* a 100-token prompt runs in two steps */
    rf_session *s = NULL;
    if (rf_session_new(m, &sp, &s)) fail_msg("session: %s", rf_last_error());
    return s;
}

/* rel. L2 of the mean-removed vectors; *margin = CPU top-2 gap, *same = same argmax, *rms (may
 * be NULL) = root mean square of the mean-removed difference */
static inline double compare_rms(const float *cpu, const float *gpu, int32_t n, float *margin, bool *same, double *rms) {
    double ma = 0, mb = 0;
    int32_t a1 = 0, a2 = -1, g1 = 0;
    for (int32_t i = 0; i < n; i++) {
        ma += cpu[i];
        mb += gpu[i];
        if (gpu[i] > gpu[g1]) g1 = i;
        if (cpu[i] > cpu[a1]) {
            a2 = a1;
            a1 = i;
        } else if (i != a1 && (a2 < 0 || cpu[i] > cpu[a2]))
            a2 = i;
    }
    ma /= n;
    mb /= n;
    double num = 0, den = 0;
    for (int32_t i = 0; i < n; i++) {
        double d = (gpu[i] - mb) - (cpu[i] - ma);
        num += d * d;
        den += (cpu[i] - ma) * (cpu[i] - ma);
        if (isnan(gpu[i])) return INFINITY;
    }
    *margin = a2 >= 0 ? cpu[a1] - cpu[a2] : INFINITY;
    *same = a1 == g1;
    if (rms) *rms = sqrt(num / n);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline double compare(const float *cpu, const float *gpu, int32_t n, float *margin, bool *same) {
    return compare_rms(cpu, gpu, n, margin, same, NULL);
}

static inline void random_prompt(rf_rng *r, int32_t *ids, int n, int32_t nv) {
    for (int i = 0; i < n; i++) ids[i] = 5 + (int32_t)(rf_rng_u64(r) % (uint64_t)(nv - 10));
}

/* A request's streamed tokens (the first 64) and whether it finished. */
typedef struct gen_out {
    int32_t n, tok[64];
    int done;
} gen_out;

static inline bool on_ev(const rf_event *ev, void *user) {
    gen_out *o = user;
    if (rf_event_get_kind(ev) == RF_EVENT_TOKEN && o->n < 64) o->tok[o->n++] = rf_event_token(ev);
    if (rf_event_get_kind(ev) == RF_EVENT_DONE) o->done = 1;
    return true;
}

static inline void submit(rf_engine *e, const int32_t *ids, int n, int max_tokens, gen_out *o) {
    memset(o, 0, sizeof *o);
    rf_request *q = rf_request_new();
    rf_request_set_prompt_ids(q, ids, (size_t)n);
    rf_request_set(q, RF_REQ_MAX_TOKENS, max_tokens);
    rf_request_set(q, RF_REQ_IGNORE_EOS, 1);
    rf_request_set_callback(q, on_ev, o);
    if (rf_engine_submit(e, q, NULL)) fail_msg("submit: %s", rf_last_error());
    rf_request_free(q);
}

#endif
