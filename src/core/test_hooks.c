/* test_hooks.c — the one pointer to the test hooks (test_hooks.h): NULL unless a test set it. */
#include "core/test_hooks.h"

#include <stdatomic.h>
#include <stddef.h>

static rf_test_hooks g_hooks;
static _Atomic(const rf_test_hooks *) g_in_force; /* NULL: no hooks (the product) */

const rf_test_hooks *rf_test_hooks_get(void) { return atomic_load(&g_in_force); }

void rf_test_hooks_set(const rf_test_hooks *h) {
    atomic_store(&g_in_force, NULL);
    if (!h) return;
    g_hooks = *h;
    atomic_store(&g_in_force, &g_hooks);
}
