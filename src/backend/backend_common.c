/* backend_common.c — what the CPU and GPU backends share below the op table: a backend made
 * around its zeroed state, copy_rows' range check (backend_common.h, with rf_tensor_set). */
#include "backend/backend_common.h"

#include <stdlib.h>

rf_status rf_backend_make(const rf_backend_ops *ops, size_t impl_bytes, rf_backend_init_fn init, void *arg,
                          const char *what, rf_backend **out) {
    *out = NULL;
    rf_backend *be = calloc(1, sizeof *be);
    void *impl = calloc(1, impl_bytes);
    if (!be || !impl) {
        free(be);
        free(impl);
        return rf_set_error(RF_ERR_OOM, "%s: out of memory", what);
    }
    rf_status st = init(impl, arg);
    if (st) {
        free(be);
        free(impl);
        return st;
    }
    be->ops = ops;
    be->impl = impl;
    *out = be;
    return RF_OK;
}

rf_status rf_copy_rows_check(const rf_tensor *t, int64_t dst0, int64_t src0, int64_t n) {
    if (n < 0 || dst0 < 0 || src0 < 0 || dst0 + n > t->ne[1] || src0 + n > t->ne[1] ||
        (dst0 < src0 + n && src0 < dst0 + n))
        return rf_set_error(RF_ERR_RANGE, "copy_rows %lld -> %lld (%lld rows) in a tensor of %lld rows",
                            (long long)src0, (long long)dst0, (long long)n, (long long)t->ne[1]);
    return RF_OK;
}
