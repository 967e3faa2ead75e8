/* bench_grammar_mask.c — the host's cost of constrained decoding's token masks, per step, over a
 * model file's real vocabulary: B sequences under one JSON schema each draw a token per step
 * uniformly among those their mask allows (what a model of random weights does under a grammar:
 * the constrained runs of docs/PERFORMANCE.md), and the mask calls of a step are timed together.
 * Prints p50 / p99 / max / mean per step (the thread's CPU time) and the walks (cache misses);
 * then the rest of a masked step's host work, per step: each masked row's mask copied into the
 * step's mask rows (engine_step.c's grammar_row: a words-wide row), those rows copied again into
 * the upload buffer (gpu_backend_step.c's batch_upload packs them into pinned memory; here plain
 * memory), and the sampled tokens accepted (rf_sampler_grammar_pick: the matcher fed the bytes);
 * --old takes the plain walk at every miss (no loop tables, no interned states), --check
 * compares every mask against the plain walk bit for bit (slow), -v prints each walk (its time, what the state admits,
 * the text before it).
 *   rf_bench_grammar_mask MODEL.gguf [-n SEQS] [-s STEPS] [-j SCHEMA] [--seed N] [--old] [--check] [-v] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/grammar.h"
#include "engine/grammar_internal.h"
#include "rocmforge/gguf.h"
#include "rocmforge/tokenizer.h"
#include "server/json_schema.h"

/* the cost measurement's schema (docs/PERFORMANCE.md): an object holding an array of strings */
static const char *DEFAULT_SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"items\"]}";

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* the thread's own time: the VM is shared */
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The k-th allowed token (k uniform in [0, n_ok)), or -1. */
static int32_t pick(const uint8_t *mask, int32_t nv, int32_t n_ok, uint32_t *x) {
    if (n_ok <= 0) return -1;
    *x = *x * 1664525u + 1013904223u;
    uint64_t r = ((uint64_t)*x << 16) ^ (*x >> 7);
    int32_t k = (int32_t)(r % (uint64_t)n_ok);
    for (int32_t id = 0; id < nv; id++)
        if ((mask[id >> 3] >> (id & 7)) & 1 && k-- == 0) return id;
    return -1;
}

int main(int argc, char **argv) {
    const char *model = NULL, *js = DEFAULT_SCHEMA;
    int n_seq = 1, steps = 128, old = 0, check = 0, verbose = 0;
    uint32_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n_seq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-j") && i + 1 < argc) js = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--old")) old = 1;
        else if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "-v")) verbose = 1;
        else if (argv[i][0] != '-' && !model) model = argv[i];
        else {
            fprintf(stderr, "usage: rf_bench_grammar_mask MODEL.gguf [-n SEQS] [-s STEPS] [-j SCHEMA] [--seed N] [--old] [--check] [-v]\n");
            return 2;
        }
    }
    if (!model || n_seq < 1 || n_seq > 256 || steps < 1) {
        fprintf(stderr, "rf_bench_grammar_mask: a model file, 1..256 sequences and steps > 0\n");
        return 2;
    }
    rf_gguf *gf;
    rf_vocab *v;
    if (rf_gguf_open(model, &gf) || rf_vocab_load(gf, &v)) {
        fprintf(stderr, "rf_bench_grammar_mask: %s\n", rf_last_error());
        return 1;
    }
    json_error_t je;
    json_t *sc = json_loads(js, 0, &je);
    rf_grammar *g = NULL;
    char err[256];
    if (!sc || srv_json_grammar(sc, &g, err, sizeof err)) {
        fprintf(stderr, "rf_bench_grammar_mask: bad schema: %s\n", sc ? err : je.text);
        return 2;
    }
    json_decref(sc);
    int32_t nv = rf_vocab_n_tokens(v), mb = (nv + 7) / 8;
    rf_gconstraint **c = calloc((size_t)n_seq, sizeof *c), **ref = calloc((size_t)n_seq, sizeof *ref);
    uint32_t *x = calloc((size_t)n_seq, sizeof *x);
    bool *done = calloc((size_t)n_seq, sizeof *done);
    double *t = calloc((size_t)steps, sizeof *t), *tc = calloc((size_t)steps, sizeof *tc),
           *ta = calloc((size_t)steps, sizeof *ta);
    uint8_t *copy = malloc((size_t)mb);
    /* the step's mask rows and the upload buffer, as the engine and the GPU backend hold them */
    const size_t W = ((size_t)nv + 31) / 32;
    uint32_t *rows = calloc((size_t)n_seq * W, 4), *up = calloc((size_t)n_seq * W, 4);
    int32_t *ids = calloc((size_t)n_seq, sizeof *ids);
    char **text = calloc((size_t)n_seq, sizeof *text);
    size_t *tlen = calloc((size_t)n_seq, sizeof *tlen);
    double t0 = now_ms();
    for (int i = 0; i < n_seq; i++) {
        if (rf_gconstraint_new(g, v, &c[i])) return 1;
        if (old) rf_gconstraint_set_mode(c[i], RF_GMASK_NO_FAST);
        if (check && rf_gconstraint_new(g, v, &ref[i])) return 1;
        if (check) rf_gconstraint_set_mode(ref[i], RF_GMASK_NO_FAST | RF_GMASK_NO_CACHE);
        x[i] = seed * 7919u + (uint32_t)i * 104729u;
        text[i] = calloc(steps * 130 + 1, 1);
    }
    int64_t mism = 0;
    int s_done = 0;
    for (int s = 0; s < steps; s++) {
        int live = 0;
        double a = now_ms();
        for (int i = 0; i < n_seq; i++) { /* the step's masks, as rf_step_sample_rows asks them */
            if (done[i]) continue;
            int32_t n_ok = 0;
            int64_t w0, f0, w1, f1;
            rf_gconstraint_stats(c[i], &w0, &f0);
            double b = verbose ? now_ms() : 0;
            const uint8_t *m = rf_gconstraint_mask(c[i], &n_ok);
            rf_gconstraint_stats(c[i], &w1, &f1);
            if (verbose && w1 > w0) /* a walk: what it cost and what the state admits */
                fprintf(stderr, "step %d seq %d: walk %.3f ms%s, %d allowed, after \"%.*s\"\n", s, i, now_ms() - b,
                        f1 > f0 ? " (loop table)" : "", n_ok, (int)(tlen[i] < 12 ? tlen[i] : 12),
                        text[i] + (tlen[i] < 12 ? 0 : tlen[i] - 12));
            (void)m;
            live++;
        }
        t[s] = now_ms() - a;
        if (verbose) fprintf(stderr, "step %d: %.3f ms\n", s, t[s]);
        if (!live) break;
        s_done = s + 1;
        a = now_ms();
        int nm = 0;
        for (int i = 0; i < n_seq; i++) { /* grammar_row: the mask (a hit now) into the step's rows */
            if (done[i]) continue;
            int32_t n_ok = 0;
            const uint8_t *m = rf_gconstraint_mask(c[i], &n_ok);
            uint32_t *dst = rows + (size_t)nm++ * W;
            dst[W - 1] = 0;
            memcpy(dst, m, (size_t)mb);
        }
        memcpy(up, rows, (size_t)nm * W * 4); /* batch_upload: into the buffer sent up */
        tc[s] = now_ms() - a;
        for (int i = 0; i < n_seq; i++) {
            if (done[i]) continue;
            int32_t n_ok = 0;
            const uint8_t *m = rf_gconstraint_mask(c[i], &n_ok); /* a cache hit: the same state */
            if (check) { /* the reference walk from the same state, bit for bit */
                int32_t n_ref = 0;
                memcpy(copy, m, (size_t)mb);
                const uint8_t *r = rf_gconstraint_mask(ref[i], &n_ref);
                if (memcmp(copy, r, (size_t)mb) || n_ref != n_ok) mism++;
                m = copy;
            }
            int32_t id = pick(m, nv, n_ok, &x[i]);
            if (id < 0 || rf_vocab_is_eog(v, id)) {
                done[i] = true;
                continue;
            }
            char buf[256];
            size_t len = 0;
            if (!rf_token_to_piece(v, id, false, buf, sizeof buf, &len) && tlen[i] + len < (size_t)steps * 130) {
                memcpy(text[i] + tlen[i], buf, len);
                tlen[i] += len;
            }
            if (check && !rf_gconstraint_accept(ref[i], id)) mism++;
            ids[i] = id;
        }
        a = now_ms(); /* the step's accepts timed together (a clock read costs as much as one) */
        for (int i = 0; i < n_seq; i++)
            if (!done[i] && !rf_gconstraint_accept(c[i], ids[i])) {
                fprintf(stderr, "sequence %d step %d: token %d allowed by the mask but refused\n", i, s, ids[i]);
                return 1;
            }
        ta[s] = now_ms() - a;
    }
    double total = now_ms() - t0;
    int64_t walks = 0, fast = 0;
    for (int i = 0; i < n_seq; i++) {
        int64_t w, f;
        rf_gconstraint_stats(c[i], &w, &f);
        walks += w;
        fast += f;
    }
    double sum = 0, scp = 0, sa = 0;
    for (int s = 0; s < s_done; s++) sum += t[s], scp += tc[s], sa += ta[s];
    qsort(t, (size_t)s_done, sizeof *t, cmp_d);
    qsort(tc, (size_t)s_done, sizeof *tc, cmp_d);
    qsort(ta, (size_t)s_done, sizeof *ta, cmp_d);
    printf("vocab %d, %d sequence(s), %d steps, %s walk: per step (all sequences' masks) p50 %.3f ms, p99 %.3f ms, max "
           "%.3f ms, mean %.3f ms; walks (misses) %lld, by loop table %lld; wall %.0f ms\n",
           nv, n_seq, s_done, old ? "plain" : "fast", t[s_done / 2], t[(s_done * 99) / 100],
           t[s_done - 1], sum / s_done, (long long)walks, (long long)fast, total);
    printf("per step, the rest of the host's masked work: mask rows copied twice (%zu bytes a row) p50 %.4f ms, "
           "mean %.4f ms; tokens accepted p50 %.4f ms, mean %.4f ms\n",
           W * 4, tc[s_done / 2], scp / s_done, ta[s_done / 2], sa / s_done);
    if (check) printf("masks checked against the whole-vocabulary walk: %lld differ\n", (long long)mism);
    printf("sequence 0: %.*s\n", (int)(tlen[0] < 300 ? tlen[0] : 300), text[0]);
    for (int i = 0; i < n_seq; i++) {
        rf_gconstraint_free(c[i]);
        rf_gconstraint_free(ref[i]);
        free(text[i]);
    }
    rf_grammar_unref(g);
    rf_vocab_free(v);
    rf_gguf_close(gf);
    free(c), free(ref), free(x), free(done), free(t), free(tc), free(ta), free(copy), free(text), free(tlen);
    free(rows), free(up), free(ids);
    return mism ? 1 : 0;
}
