/* cpu_threads.c — the CPU thread pool (see cpu_threads.h). A job is published by bumping a
 * generation counter; workers spin on it for a short while, then wait on a condvar. */
#include "backend/cpu/cpu_threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

struct rf_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;     /* job generation; workers run when it changes */
    atomic_int pending;  /* workers still running the current job */
    atomic_int quit;
    rf_pool_fn fn;
    void *ctx;
};

typedef struct worker_arg {
    rf_pool *p;
    int ith;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* A waiting thread spins RF_SPIN_ITERS pauses (a few microseconds: back-to-back decode jobs),
 * then yields the core (a shared or oversubscribed machine), and a worker sleeps on the
 * condvar after RF_YIELD_ITERS yields so an idle pool costs nothing. */
#define RF_SPIN_ITERS 2000
#define RF_YIELD_ITERS 2000

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    rf_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0; /* the generation at creation: a job published before this thread first runs is not missed */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->quit)) {
            if (++spins < RF_SPIN_ITERS) {
                cpu_relax();
            } else if (spins < RF_SPIN_ITERS + RF_YIELD_ITERS) {
                sched_yield();
            } else {
                pthread_mutex_lock(&p->mu);
                while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
                    pthread_cond_wait(&p->cv, &p->mu);
                pthread_mutex_unlock(&p->mu);
            }
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = g;
        p->fn(p->ctx, ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

rf_status rf_pool_new(int n_threads, rf_pool **out) {
    *out = NULL;
    if (n_threads < 1) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", n_threads);
    rf_pool *p = calloc(1, sizeof *p);
    if (!p) return rf_set_error(RF_ERR_OOM, "thread pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->quit, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
        if (!p->threads) {
            free(p);
            return rf_set_error(RF_ERR_OOM, "thread pool: out of memory");
        }
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa ? (wa->p = p, wa->ith = i, wa) : NULL)) {
                free(wa);
                p->n = i; /* join what started */
                rf_pool_free(p);
                return rf_set_error(RF_ERR_INTERNAL, "thread pool: cannot start thread %d", i);
            }
        }
    }
    *out = p;
    return RF_OK;
}

void rf_pool_free(rf_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int rf_pool_size(const rf_pool *p) { return p ? p->n : 1; }

void rf_pool_run(rf_pool *p, rf_pool_fn fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        if (++spins < RF_SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
}
