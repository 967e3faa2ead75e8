/* test_hooks_env.c — rocmforge-test's start: the test hooks (src/core/test_hooks.h) from the test
 * variables RF_SERVE_LOAD_DELAY_MS, RF_SERVE_TEST_FAULTS, RF_TP_ONE_DEVICE, RF_TP_CPU_RANKS and
 * RF_TP_SKIP_RANK / RF_TP_SKIP_FROM (a rank that stops taking part in collectives), RF_PA_ROWS
 * (the paged attention's rows per warp, to time another cap in a whole step) and RF_ATTN_NOPDL
 * (RoPE and attention launched in stream order, for the same kind of timing), RF_P2P_PULL, RF_P2P_NOTRIGGER,
 * RF_TP_UNFUSED and RF_TP_NO_REDUCE (the p2p all-reduce's pull form, its launch without the early trigger; no all-reduce at all: timings only) and
 * RF_SKIP_OPS (GPU op kinds that launch nothing: timings only).
 * Linked only into rocmforge-test (tests/CMakeLists.txt), never into rocmforge, which ignores them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/test_hooks.h"

void rf_test_hooks_from_env(void);

static bool env_on(const char *name) {
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

void rf_test_hooks_from_env(void) {
    rf_test_hooks h = {0};
    const char *d = getenv("RF_SERVE_LOAD_DELAY_MS");
    h.serve_load_delay_ms = d ? atoi(d) : 0;
    h.serve_faults = env_on("RF_SERVE_TEST_FAULTS");
    h.tp_one_device = env_on("RF_TP_ONE_DEVICE");
    h.tp_cpu_ranks = env_on("RF_TP_CPU_RANKS");
    const char *sr = getenv("RF_TP_SKIP_RANK"), *sf = getenv("RF_TP_SKIP_FROM");
    h.tp_skip_rank = sr ? atoi(sr) : 0;
    h.tp_skip_from = sf ? atoll(sf) : 1;
    const char *pr = getenv("RF_PA_ROWS");
    h.gpu_pa_rows = pr ? atoi(pr) : 0;
    h.gpu_attn_nopdl = env_on("RF_ATTN_NOPDL");
    const char *mm = getenv("RF_MT_MIN");
    h.gpu_mt_min = mm ? atoi(mm) : 0;
    h.gpu_mt_shallow = env_on("RF_MT_SHALLOW");
    h.gpu_p2p_pull = env_on("RF_P2P_PULL");
    h.gpu_p2p_notrigger = env_on("RF_P2P_NOTRIGGER");
    h.tp_no_reduce = env_on("RF_TP_NO_REDUCE");
    h.tp_norm_unfused = env_on("RF_TP_UNFUSED");
    h.gpu_norm_nocl = env_on("RF_NORM_NOCL");
    const char *so = getenv("RF_SKIP_OPS"); /* a comma list of attn, rope, norm, glu, matmul */
    if (so) {
        static const char *const names[] = {"attn", "rope", "norm", "glu", "matmul"};
        for (int i = 0; i < 5; i++)
            if (strstr(so, names[i])) h.gpu_skip_ops |= 1 << i;
    }
    if (h.serve_load_delay_ms <= 0 && !h.serve_faults && !h.tp_one_device && !h.tp_cpu_ranks && h.tp_skip_rank <= 0 &&
        h.gpu_pa_rows <= 0 && !h.gpu_attn_nopdl && h.gpu_mt_min <= 0 &&
        !h.gpu_mt_shallow && !h.gpu_p2p_pull && !h.gpu_p2p_notrigger && !h.tp_no_reduce && !h.tp_norm_unfused && !h.gpu_skip_ops &&
        !h.gpu_norm_nocl)
        return;
    fprintf(stderr, "rocmforge-test: test hooks in force (load delay %d ms, serve faults %s, tp on one device %s, "
            "tp on CPU ranks %s, tp rank %d skipping collectives from the %lldth, paged attention rows %d, "
            "rope/attention in stream order %s, gemv_mt from %d tokens, gemv_mt's shallow ring %s, p2p pull %s, p2p no trigger %s, no tp reduce %s, tp norm unfused %s, skipped GPU ops %#x, norm on one block a row %s)\n", h.serve_load_delay_ms,
            h.serve_faults ? "on" : "off", h.tp_one_device ? "on" : "off", h.tp_cpu_ranks ? "on" : "off", h.tp_skip_rank - 1,
            (long long)h.tp_skip_from, h.gpu_pa_rows, h.gpu_attn_nopdl ? "on" : "off", h.gpu_mt_min,
            h.gpu_mt_shallow ? "on" : "off", h.gpu_p2p_pull ? "on" : "off", h.gpu_p2p_notrigger ? "on" : "off", h.tp_no_reduce ? "on" : "off", h.tp_norm_unfused ? "on" : "off", h.gpu_skip_ops, h.gpu_norm_nocl ? "on" : "off");
    rf_test_hooks_set(&h);
}
