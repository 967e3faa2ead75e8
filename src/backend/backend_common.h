/* backend_common.h — what the CPU and GPU backends share below the op table (backend_common.c):
 * a backend made around its zeroed state, a tensor's fields set, copy_rows' range check.
 * Included by cpu_backend.c and gpu_backend.c only (backend.h stays the table's contract). */
#ifndef RF_BACKEND_COMMON_H
#define RF_BACKEND_COMMON_H

#include "backend/backend.h"

/* Sets up a backend's state impl (zeroed) from arg; a status other than RF_OK leaves nothing to free. */
typedef rf_status (*rf_backend_init_fn)(void *impl, void *arg);

/* A backend of ops whose impl is impl_bytes of zeros set up by init(impl, arg), in *out; on
 * failure *out = NULL, both freed, and init's status or RF_ERR_OOM ("<what>: out of memory"). */
rf_status rf_backend_make(const rf_backend_ops *ops, size_t impl_bytes, rf_backend_init_fn init, void *arg,
                          const char *what, rf_backend **out);

/* A tensor of rows x n elements of type, nb1 bytes a row, at data (owned: free() releases it);
 * the fields not named here are left as they are (the callers zero the whole tensor first). */
static inline void rf_tensor_set(rf_tensor *t, rf_type type, int64_t n, int64_t rows, size_t nb1, void *data,
                                 bool owned) {
    t->type = type;
    t->ne[0] = n;
    t->ne[1] = rows;
    t->nb1 = nb1;
    t->data = data;
    t->owned = owned;
}

/* copy_rows' arguments in range for t (RF_ERR_RANGE naming them else): backend.h's contract. */
rf_status rf_copy_rows_check(const rf_tensor *t, int64_t dst0, int64_t src0, int64_t n);

#endif
