/* cpu_threads.c — the CPU thread pool (see cpu_threads.h). A job is published by bumping a
 * generation counter; workers spin on it for a short while, then sleep on a condvar; the caller
 * waits for the workers the same way (spin, then sleep until the last worker wakes it). */
#define _GNU_SOURCE /* sched_getcpu */
#include "backend/cpu/cpu_threads.h"
#include "core/knobs.h"

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
    atomic_int sleepers; /* workers blocked (or about to block) on cv */
    pthread_mutex_t done_mu;
    pthread_cond_t done_cv;
    atomic_int caller_sleeping; /* rf_pool_run's caller is blocked (or about to block) on done_cv */
    atomic_int caller_cpu;      /* CPU the caller last ran on (sched_getcpu), -1 unknown */
    atomic_int *worker_cpu;     /* [n]: CPU each worker last ran on */
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

/* A waiting thread spins RF_SPIN_ITERS pauses (tens of microseconds: back-to-back decode jobs
 * are closer than that), then sleeps. No sched_yield phase: on a shared machine a yielding
 * thread stays runnable behind the other jobs (EEVDF pushes its deadline back) and is only
 * picked again at their next tick, milliseconds later, while a sleeping thread that is woken
 * preempts them at once. The flags `sleepers` / `caller_sleeping` are set (seq_cst) before the
 * sleeper re-checks its condition, and the waker changes the condition (seq_cst) before reading
 * the flag, so either the sleeper sees the change or the waker sees the flag: no lost wakeup. */
#define RF_SPIN_ITERS_DEFAULT 2000
static int g_spin_iters = RF_SPIN_ITERS_DEFAULT; /* RF_POOL_SPIN=N overrides (tuning; read at pool creation) */
#define RF_SPIN_ITERS g_spin_iters

/* Spinning only helps when the thread being waited for runs on another CPU. On an oversubscribed
 * machine the scheduler can put the caller and a worker on one CPU (a wakee goes next to its
 * waker); a spinner there only delays the thread it waits for, by up to a time slice. So every
 * 64 pauses a spinner compares CPUs and sleeps at once when it shares one with the other side. */
static inline int my_cpu(void) { return sched_getcpu(); }
static bool shares_cpu_with_caller(rf_pool *p, int ith) {
    int c = my_cpu();
    atomic_store_explicit(&p->worker_cpu[ith], c, memory_order_relaxed);
    return c >= 0 && c == atomic_load_explicit(&p->caller_cpu, memory_order_relaxed);
}
static bool caller_shares_cpu(rf_pool *p) {
    int c = my_cpu();
    atomic_store_explicit(&p->caller_cpu, c, memory_order_relaxed);
    for (int i = 1; i < p->n; i++)
        if (c >= 0 && atomic_load_explicit(&p->worker_cpu[i], memory_order_relaxed) == c) return true;
    return false;
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    rf_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0; /* the generation at creation: a job published before this thread first runs is not missed */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->quit)) {
            if (++spins < RF_SPIN_ITERS && ((spins & 63) || !shares_cpu_with_caller(p, ith))) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = g;
        atomic_store_explicit(&p->worker_cpu[ith], my_cpu(), memory_order_relaxed);
        p->fn(p->ctx, ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->done_mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->done_mu);
        }
    }
}

rf_status rf_pool_new(int n_threads, rf_pool **out) {
    *out = NULL;
    if (n_threads < 1) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", n_threads);
    rf_pool *p = calloc(1, sizeof *p);
    if (!p) return rf_set_error(RF_ERR_OOM, "thread pool: out of memory");
    p->n = n_threads;
    g_spin_iters = (int)rf_knob_int(RF_KNOB_POOL_SPIN);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_mutex_init(&p->done_mu, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_sleeping, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->quit, 0);
    atomic_init(&p->caller_cpu, -1);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
        p->worker_cpu = calloc((size_t)n_threads, sizeof(atomic_int));
        if (!p->threads || !p->worker_cpu) {
            free(p->threads);
            free(p->worker_cpu);
            free(p);
            return rf_set_error(RF_ERR_OOM, "thread pool: out of memory");
        }
        for (int i = 0; i < n_threads; i++) atomic_init(&p->worker_cpu[i], -1);
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
    pthread_mutex_destroy(&p->done_mu);
    pthread_cond_destroy(&p->done_cv);
    free(p->threads);
    free(p->worker_cpu);
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
    atomic_fetch_add(&p->gen, 1); /* seq_cst: before reading `sleepers` */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n);
    atomic_store_explicit(&p->caller_cpu, my_cpu(), memory_order_relaxed);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        if (++spins < RF_SPIN_ITERS && ((spins & 63) || !caller_shares_cpu(p))) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->done_mu);
        atomic_store(&p->caller_sleeping, 1);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done_cv, &p->done_mu);
        atomic_store(&p->caller_sleeping, 0);
        pthread_mutex_unlock(&p->done_mu);
    }
}
