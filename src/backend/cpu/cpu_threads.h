/* cpu_threads.h — the CPU backend's thread pool: run one function on N threads (the caller is
 * thread 0) and wait for all. Workers spin briefly between jobs (decode issues hundreds of
 * small jobs per token) and then sleep on a condition variable so idle pools cost nothing. */
#ifndef RF_CPU_THREADS_H
#define RF_CPU_THREADS_H

#include "rocmforge/core.h"

typedef struct rf_pool rf_pool;

/* fn(ctx, ith, nth) runs once per thread, ith in [0, nth). */
typedef void (*rf_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (1 = no worker threads). RF_ERR_OOM / RF_ERR_INTERNAL if threads cannot start. */
rf_status rf_pool_new(int n_threads, rf_pool **out);
void rf_pool_free(rf_pool *p);
int rf_pool_size(const rf_pool *p);
/* Runs fn on every thread and returns when all have finished. Not reentrant. */
void rf_pool_run(rf_pool *p, rf_pool_fn fn, void *ctx);

/* Splits [0, n) evenly: the range of thread ith of nth. */
static inline void rf_pool_range(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith;
    *hi = *lo + per;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

#endif
