/* test_hooks.h — behaviours only tests may turn on (a slow model load, simulated out-of-memory
 * faults in the server, every tensor-parallel shard on one GPU), behind one pointer that only test
 * code sets. Nothing in src/ or tools/ sets it, so `rocmforge` and library users never see them;
 * the test build of the command, rocmforge-test, sets it from the environment (docs/knobs.md). */
#ifndef RF_TEST_HOOKS_H
#define RF_TEST_HOOKS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_test_hooks {
    int serve_load_delay_ms; /* serve: the model loader waits this long first (a window for 503s) */
    bool serve_faults;       /* serve: a request's "X-RF-Test-Fault: oom-events" header is honoured, and
                                "X-RF-Test-Output: <JSON string>" replaces a chat answer's text */
    bool tp_one_device;      /* --tp N on a GPU: every shard on the one device, one after another */
    bool tp_cpu_ranks;       /* --tp N on the CPU through the several-GPU path (a backend per rank) */
} rf_test_hooks;

/* The hooks in force, or NULL (always NULL in the product). */
const rf_test_hooks *rf_test_hooks_get(void);

/* Tests only: installs a copy of *h, or none with NULL. Call it before the code it affects runs
 * (not thread-safe against a reader in flight). */
void rf_test_hooks_set(const rf_test_hooks *h);

#ifdef __cplusplus
}
#endif

#endif
