/* gpu_p2p_cases.h — test_gpu_tp's cases of the peer-to-peer all-reduce itself (gpu_tp_p2p.h;
 * 2+ GPUs, else skipped by name): sums against the host's rank-order sum for odd and round sizes,
 * calls back to back of varying sizes, inside a replayed CUDA graph, the timeout, and the timing
 * against NCCL the lead picks RF_TP_ALLREDUCE's default from. Included by test_gpu_tp.c only (the
 * binary the 2-GPU runs execute); the split-level cases stay there. */
#ifndef RF_GPU_P2P_CASES_H
#define RF_GPU_P2P_CASES_H

#include "gpu_test_common.h"

#include <time.h>

#include "backend/gpu/gpu_nccl.h"
#include "backend/gpu/gpu_tp_p2p.h"

static double p2p_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define P2P_MAX ((size_t)256 * 8192) /* the split's scratch for an 8192-wide model */

/* every GPU (up to 8) with a context of its own, a p2p all-reduce over them and a buffer each */
typedef struct p2p_rig {
    int n;
    rf_gpu_ctx *ctx[RF_P2P_MAX_RANKS];
    rf_gpu_p2p *p;
    float *buf[RF_P2P_MAX_RANKS];
} p2p_rig;

static bool rig_open(p2p_rig *g, const char *what, int64_t timeout_ms) {
    memset(g, 0, sizeof *g);
    const int have = rf_gpu_device_count();
    if (have < 2) {
        printf("  %s: skipped, %d GPU(s) present (needs 2)\n", what, have);
        return false;
    }
    g->n = have < RF_P2P_MAX_RANKS ? have : RF_P2P_MAX_RANKS;
    for (int r = 0; r < g->n; r++) {
        if (rf_gpu_init(r, &g->ctx[r])) fail_msg("GPU %d: %s", r, rf_last_error());
        if (rf_gpu_alloc(g->ctx[r], P2P_MAX * sizeof(float), (void **)&g->buf[r])) fail_msg("%s", rf_last_error());
    }
    rf_status st = rf_gpu_p2p_new(g->ctx, g->n, P2P_MAX, timeout_ms, &g->p);
    if (st) fail_msg("%s: the p2p all-reduce over %d GPUs: %s", what, g->n, rf_last_error());
    return true;
}

static void rig_close(p2p_rig *g) {
    rf_gpu_p2p_free(g->p);
    for (int r = g->n - 1; r >= 0; r--) {
        rf_gpu_free(g->ctx[r], g->buf[r]);
        rf_gpu_destroy(g->ctx[r]);
    }
    memset(g, 0, sizeof *g);
}

static void rig_sync(p2p_rig *g) {
    for (int r = 0; r < g->n; r++) assert_int_equal(rf_gpu_sync(g->ctx[r]), RF_OK);
}

/* values of varied sign and size (2^-10..2^10), so that another summation order shows */
static void fill_varied(rf_rng *rng, float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = (rf_rng_uniform(rng) - 0.5f) * ldexpf(1.0f, (int)(rf_rng_u64(rng) % 21) - 10);
}

/* The rank-order host sum of in[r][off..off+n) against what every GPU holds (out[r]): the
 * largest |difference| (0 expected: the same adds in the same order) and whether every GPU holds
 * the same bits as GPU 0. */
static double check_sum(int nr, float *const *in, float *const *out, size_t off, size_t n, bool *same) {
    double worst = 0;
    *same = true;
    for (size_t i = 0; i < n; i++) {
        float s = in[0][off + i];
        for (int r = 1; r < nr; r++) s += in[r][off + i];
        for (int r = 0; r < nr; r++) {
            const double d = fabs((double)out[r][off + i] - (double)s);
            if (!(d <= worst)) worst = d; /* (NaN too) */
            if (memcmp(&out[r][off + i], &out[0][off + i], sizeof(float))) *same = false;
        }
    }
    return worst;
}

typedef struct p2p_host {
    float *in[RF_P2P_MAX_RANKS], *out[RF_P2P_MAX_RANKS];
} p2p_host;

static void host_new(p2p_host *h, int nr, size_t n, rf_rng *rng) {
    for (int r = 0; r < nr; r++) {
        h->in[r] = host_f32(n), h->out[r] = host_f32(n);
        fill_varied(rng, h->in[r], n);
    }
}

static void host_free(p2p_host *h, int nr) {
    for (int r = 0; r < nr; r++) free(h->in[r]), free(h->out[r]);
}

static void upload_all(p2p_rig *g, p2p_host *h, size_t n) {
    for (int r = 0; r < g->n; r++) assert_int_equal(rf_gpu_upload(g->ctx[r], g->buf[r], h->in[r], n * sizeof(float)), RF_OK);
}

static void download_all(p2p_rig *g, p2p_host *h, size_t n) {
    rig_sync(g);
    for (int r = 0; r < g->n; r++) assert_int_equal(rf_gpu_download(g->ctx[r], h->out[r], g->buf[r], n * sizeof(float)), RF_OK);
}

static void allreduce_all(p2p_rig *g, size_t off, size_t n) {
    for (int r = 0; r < g->n; r++)
        if (rf_gpu_p2p_allreduce(g->p, r, g->buf[r] + off, n)) fail_msg("rank %d: %s", r, rf_last_error());
}

/* Single calls of odd and round sizes; then 96 calls in a row of varying sizes into disjoint
 * parts of the buffers with no host wait between them and a rank held back now and then (the
 * double buffer's race: a rank a call ahead writing the scratch a peer still reads); then the
 * same calls captured into one CUDA graph over every GPU and replayed on new data, eager calls
 * between the replays (the call counters live on the GPUs, so replays and eager calls mix). */
static void p2p_allreduce_cases(void) {
    p2p_rig g;
    if (!rig_open(&g, "p2p all-reduce", 60000)) skip();
    rf_rng rng;
    rf_rng_init(&rng, rf_test_seed() ^ 0x9e3779b9u);
    p2p_host h;
    host_new(&h, g.n, P2P_MAX, &rng);
    upload_all(&g, &h, P2P_MAX);
    const size_t sizes[] = {1, 2, 3, 4, 5, 7, 4095, 4096, 4097, 8192, 8192 * 32, 8192 * 32 + 3, 100003, P2P_MAX};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        upload_all(&g, &h, sizes[k]);
        allreduce_all(&g, 0, sizes[k]);
        download_all(&g, &h, sizes[k]);
        bool same;
        const double d = check_sum(g.n, h.in, h.out, 0, sizes[k], &same);
        printf("  p2p all-reduce over %d GPUs, %zu floats: max |GPU - host rank-order sum| %g, every GPU the same bits: "
               "%s\n", g.n, sizes[k], d, same ? "yes" : "NO");
        assert_true(d == 0 && same);
    }
    /* back to back, varying sizes, disjoint parts (each call's input kept for the check) */
    enum { K = 96 };
    size_t off[K + 1], len[K];
    const size_t pick[] = {1, 5, 4096, 8192, 12289, 4, 8195};
    off[0] = 0;
    for (int k = 0; k < K; k++) {
        len[k] = k % 32 == 5 ? 8192 * 32 : k % 32 == 17 ? 100003 : pick[rf_rng_u64(&rng) % (sizeof pick / sizeof *pick)];
        off[k + 1] = (off[k] + len[k] + 3) & ~(size_t)3; /* 16-byte aligned starts */
        if (off[k + 1] > P2P_MAX - 8192) len[k] = 0, off[k + 1] = off[k]; /* (the last 8192: the eager call's) */
    }
    for (int pass = 0; pass < 2; pass++) {
        fill_varied(&rng, h.in[0], P2P_MAX); /* new inputs each pass */
        for (int r = 1; r < g.n; r++) fill_varied(&rng, h.in[r], P2P_MAX);
        upload_all(&g, &h, P2P_MAX);
        void *exec = NULL;
        if (pass == 1) { /* every rank's stream into one recording on GPU 0's (as the split's graph) */
            assert_int_equal(rf_gpu_set_current(g.ctx[0]), RF_OK);
            assert_int_equal(rf_gpu_capture_begin(g.ctx[0]), RF_OK);
            for (int r = 1; r < g.n; r++) assert_int_equal(rf_gpu_capture_fork(g.ctx[0], g.ctx[r]), RF_OK);
        }
        const double t0 = p2p_ms();
        for (int k = 0; k < K; k++) {
            if (pass == 0 && k % 7 == 3) assert_int_equal(rf_gpu_stall(g.ctx[k % g.n], 200), RF_OK);
            if (len[k]) allreduce_all(&g, off[k], len[k]);
        }
        if (pass == 1) {
            for (int r = 1; r < g.n; r++) assert_int_equal(rf_gpu_capture_join(g.ctx[0], g.ctx[r]), RF_OK);
            assert_int_equal(rf_gpu_set_current(g.ctx[0]), RF_OK);
            if (rf_gpu_capture_end(g.ctx[0], &exec)) fail_msg("capture: %s", rf_last_error());
        }
        const int reps = pass == 1 ? 3 : 1;
        for (int rep = 0; rep < reps; rep++) {
            if (pass == 1) {
                if (rep > 0) { /* new data, and an eager call in between (the counters advance on the GPUs) */
                    for (int r = 0; r < g.n; r++) fill_varied(&rng, h.in[r], off[K]);
                    upload_all(&g, &h, off[K]);
                    allreduce_all(&g, P2P_MAX - 8192, 8192);
                    rig_sync(&g);
                    upload_all(&g, &h, off[K]);
                }
                assert_int_equal(rf_gpu_set_current(g.ctx[0]), RF_OK);
                assert_int_equal(rf_gpu_graph_launch(g.ctx[0], exec), RF_OK);
            }
            download_all(&g, &h, off[K]);
            double worst = 0;
            bool all_same = true;
            for (int k = 0; k < K; k++) {
                bool same;
                const double d = check_sum(g.n, h.in, h.out, off[k], len[k], &same);
                if (d > worst || d != d) worst = d;
                all_same = all_same && same;
            }
            printf("  p2p all-reduce, %d calls in a row (sizes 1..%zu, %zu floats in all)%s: max |GPU - host| %g, "
                   "every GPU the same bits: %s (%.1f ms)\n", K, (size_t)8192 * 32, off[K],
                   pass ? " in a replayed CUDA graph" : ", a rank held back every 7th", worst, all_same ? "yes" : "NO",
                   p2p_ms() - t0);
            assert_true(worst == 0 && all_same);
        }
        rf_gpu_graph_destroy(exec);
    }
    host_free(&h, g.n);
    rig_close(&g);
}

/* the cases above for the push form (the default), then for the pull form (test hook) */
static void test_p2p_allreduce(void **state) {
    (void)state;
    printf("  the push form:\n");
    p2p_allreduce_cases();
    printf("  the pull form (test hook gpu_p2p_pull):\n");
    rf_test_hooks_set(&(rf_test_hooks){.gpu_p2p_pull = true});
    p2p_allreduce_cases();
    rf_test_hooks_set(NULL);
}

/* A peer that never comes: only rank 0 launches; its kernel must give up after the timeout, say
 * so through rf_gpu_p2p_failed naming RF_TP_TIMEOUT_MS, and every later call returns at once. */
static void test_p2p_timeout(void **state) {
    (void)state;
    p2p_rig g;
    if (!rig_open(&g, "p2p timeout", 300)) skip();
    char msg[256] = "";
    assert_false(rf_gpu_p2p_failed(g.p, msg, sizeof msg));
    double t0 = p2p_ms();
    assert_int_equal(rf_gpu_p2p_allreduce(g.p, 0, g.buf[0], 4096), RF_OK);
    assert_int_equal(rf_gpu_sync(g.ctx[0]), RF_OK);
    const double dt = p2p_ms() - t0;
    const bool failed = rf_gpu_p2p_failed(g.p, msg, sizeof msg);
    printf("  p2p timeout: rank 0 alone returned after %.0f ms (bound 300 ms): %s\n", dt, failed ? msg : "(no error)");
    assert_true(failed && strstr(msg, "RF_TP_TIMEOUT_MS"));
    assert_true(dt >= 250 && dt < 5000);
    t0 = p2p_ms();
    for (int k = 0; k < 10; k++) allreduce_all(&g, 0, 8192);
    rig_sync(&g);
    printf("  p2p timeout: 10 more calls on every rank after it: %.1f ms\n", p2p_ms() - t0);
    assert_true(p2p_ms() - t0 < 250);
    rig_close(&g);
}

/* µs per all-reduce, p2p against NCCL, eager (each call launched from the host: one thread
 * issuing every rank's launch) and in a CUDA graph of 100 calls over every GPU. Prints only:
 * the numbers pick RF_TP_ALLREDUCE's default. */
static double bench_one(p2p_rig *g, rf_gpu_comm *c, size_t n, bool graph) {
    const int calls = graph ? 100 : 1000, launches = graph ? 10 : 1;
    void *exec = NULL;
    if (graph) {
        assert_int_equal(rf_gpu_set_current(g->ctx[0]), RF_OK);
        assert_int_equal(rf_gpu_capture_begin(g->ctx[0]), RF_OK);
        for (int r = 1; r < g->n; r++) assert_int_equal(rf_gpu_capture_fork(g->ctx[0], g->ctx[r]), RF_OK);
    }
    for (int k = 0; k < (graph ? calls : 20); k++) { /* (eager: a warm-up of 20 first) */
        if (!c) allreduce_all(g, 0, n);
        else {
            assert_int_equal(rf_gpu_comm_group(c, true), RF_OK);
            for (int r = 0; r < g->n; r++) assert_int_equal(rf_gpu_comm_allreduce(c, r, g->buf[r], n), RF_OK);
            assert_int_equal(rf_gpu_comm_group(c, false), RF_OK);
        }
    }
    if (graph) {
        for (int r = 1; r < g->n; r++) assert_int_equal(rf_gpu_capture_join(g->ctx[0], g->ctx[r]), RF_OK);
        assert_int_equal(rf_gpu_set_current(g->ctx[0]), RF_OK);
        if (rf_gpu_capture_end(g->ctx[0], &exec)) fail_msg("capture: %s", rf_last_error());
        assert_int_equal(rf_gpu_graph_launch(g->ctx[0], exec), RF_OK); /* warm-up */
    }
    rig_sync(g);
    const double t0 = p2p_ms();
    for (int k = 0; k < (graph ? launches : calls); k++) {
        if (graph) assert_int_equal(rf_gpu_graph_launch(g->ctx[0], exec), RF_OK);
        else if (!c) allreduce_all(g, 0, n);
        else {
            assert_int_equal(rf_gpu_comm_group(c, true), RF_OK);
            for (int r = 0; r < g->n; r++) assert_int_equal(rf_gpu_comm_allreduce(c, r, g->buf[r], n), RF_OK);
            assert_int_equal(rf_gpu_comm_group(c, false), RF_OK);
        }
    }
    rig_sync(g);
    const double us = (p2p_ms() - t0) * 1000.0 / (double)(graph ? calls * launches : calls);
    rf_gpu_graph_destroy(exec);
    return us;
}

static void test_p2p_bench(void **state) {
    (void)state;
    p2p_rig g;
    if (!rig_open(&g, "p2p vs NCCL timing", 60000)) skip();
    rf_gpu_comm *c = NULL;
    if (rf_gpu_comm_init(g.ctx, g.n, &c)) fail_msg("NCCL over %d GPUs: %s", g.n, rf_last_error());
    for (int r = 0; r < g.n; r++) assert_int_equal(rf_gpu_memset(g.ctx[r], g.buf[r], 0, P2P_MAX * sizeof(float)), RF_OK);
    rf_gpu_info info;
    rf_gpu_get_info(g.ctx[0], &info);
    printf("  all-reduce timing over %d x %s, NCCL %d (us per all-reduce; eager: 1000 calls issued from one thread; "
           "graph: 10 launches of a graph of 100 calls):\n", g.n, info.name, rf_gpu_nccl_version());
    const size_t sizes[] = {4096, 8192, 8192 * 32, P2P_MAX};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int mode = 0; mode < 6; mode++) { /* a line each, as measured: a failure keeps the ones before */
            const int form = mode % 3; /* p2p push, p2p pull (test hook), NCCL */
            const bool graph = mode >= 3;
            rf_test_hooks_set(form == 1 ? &(rf_test_hooks){.gpu_p2p_pull = true} : NULL);
            const double us = bench_one(&g, form == 2 ? c : NULL, sizes[k], graph);
            rf_test_hooks_set(NULL);
            printf("  all-reduce of %7zu floats, %-8s %-5s: %8.2f us per call\n", sizes[k],
                   form == 0 ? "p2p push" : form == 1 ? "p2p pull" : "NCCL", graph ? "graph" : "eager", us);
        }
    rf_gpu_comm_free(c);
    rig_close(&g);
}


#endif
