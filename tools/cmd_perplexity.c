/* cmd_perplexity.c — `rocmforge perplexity -m MODEL -f TEXT [--ctx N]`, computed the way
 * llama.cpp's llama-perplexity does: tokenize the whole text (with BOS if the model adds one),
 * cut it into chunks of n_ctx tokens, put BOS at the start of each chunk when the model uses
 * one, evaluate each chunk from an empty cache, and score only the second half of each chunk
 * (positions n_ctx/2 .. n_ctx-2 predicting the next token). Prints [i]running-ppl values and
 * "Final estimate: PPL = X +/- Y". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd_run_opts.h"

static const char k_ppl_usage[] =
    "usage: rocmforge perplexity -m MODEL -f TEXT [options]\n"
    "  -m, --model FILE   GGUF model\n"
    "  -f, --file FILE    text to score\n"
    "  -c, --ctx N        tokens per chunk (default 512)\n"
    "  --chunks N         score at most N chunks (default all)\n"
    "  -b, --batch N      tokens per forward pass (default min(ctx, 512))\n"
    "  -t, --threads N    CPU threads (default: all cores)\n"
    "  --kv-type T        f16 (default), f32, q8_0\n"
    "  --device D         cpu (default) or gpu\n";

/* Piece of a chunk evaluated per call (bounds the logits buffer to 128 x n_vocab floats). */
#define PPL_PIECE 128

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

int rf_cmd_perplexity(int argc, char **argv) {
    rf_run_opts o;
    int rc = rf_run_parse(argc, argv, RF_OPT_PPL, &o, k_ppl_usage);
    if (rc >= 0) return rc;
    if (!o.prompt_file) {
        fputs(k_ppl_usage, stderr);
        return rf_cli_fail(2, "missing -f TEXT");
    }
    if (!o.n_ctx) o.n_ctx = 512;
    size_t len = 0;
    char *text = slurp(o.prompt_file, &len);
    if (!text) return rf_cli_fail(1, "cannot read '%s'", o.prompt_file);
    rf_model *m;
    rf_session *s;
    if ((rc = rf_run_open(&o, &m, &s))) {
        free(text);
        return rc;
    }
    const rf_vocab *vocab = rf_model_vocab(m);
    int32_t n_vocab = 0;
    rf_model_info info;
    rf_model_get_info(m, &info);
    n_vocab = info.n_vocab;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    rc = 1;
    rf_tokenize(vocab, text, len, true, false, NULL, 0, &n_ids);
    ids = malloc((n_ids + 1) * sizeof(int32_t));
    if (!ids || rf_tokenize(vocab, text, len, true, false, ids, n_ids, &n_ids)) {
        rf_cli_fail(1, "tokenize: %s", rf_last_error());
        goto out;
    }
    int32_t n_ctx = o.n_ctx;
    if ((int64_t)n_ids < 2 * (int64_t)n_ctx) {
        rf_cli_fail(1, "the text has %zu tokens; perplexity with a context of %d needs at least %d", n_ids, n_ctx,
                    2 * n_ctx);
        goto out;
    }
    int32_t n_chunk = (int32_t)(n_ids / (size_t)n_ctx);
    if (o.chunks > 0 && o.chunks < n_chunk) n_chunk = o.chunks;
    bool add_bos = rf_vocab_add_bos(vocab) && rf_vocab_bos(vocab) >= 0;
    int32_t first = n_ctx / 2;
    fprintf(stderr, "perplexity: %zu tokens, %d chunks of %d, scoring positions %d..%d of each\n", n_ids, n_chunk,
            n_ctx, first, n_ctx - 2);
    double nll = 0, nll2 = 0;
    int64_t count = 0;
    int32_t *chunk = malloc((size_t)n_ctx * sizeof(int32_t));
    if (!chunk) {
        rf_cli_fail(1, "out of memory");
        goto out;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int32_t c = 0; c < n_chunk; c++) {
        memcpy(chunk, ids + (size_t)c * n_ctx, (size_t)n_ctx * sizeof(int32_t));
        if (add_bos) chunk[0] = rf_vocab_bos(vocab);
        rf_session_truncate(s, 0);
        for (int32_t p0 = 0; p0 < n_ctx; p0 += PPL_PIECE) {
            int32_t cnt = n_ctx - p0 < PPL_PIECE ? n_ctx - p0 : PPL_PIECE;
            bool need = p0 + cnt - 1 >= first;
            if (rf_session_eval(s, chunk + p0, cnt, need)) {
                free(chunk);
                rf_cli_fail(1, "%s", rf_last_error());
                goto out;
            }
            if (!need) continue;
            for (int32_t i = 0; i < cnt; i++) {
                int32_t pos = p0 + i;
                if (pos < first || pos >= n_ctx - 1) continue;
                const float *lg = rf_session_logits(s, i);
                int32_t next = ids[(size_t)c * n_ctx + pos + 1];
                double mx = -INFINITY, sum = 0;
                for (int32_t v = 0; v < n_vocab; v++) mx = lg[v] > mx ? lg[v] : mx;
                for (int32_t v = 0; v < n_vocab; v++) sum += exp(lg[v] - mx);
                double lp = lg[next] - mx - log(sum);
                nll -= lp;
                nll2 += lp * lp;
                count++;
            }
        }
        if (c == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double sec = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
            fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", sec, sec * n_chunk / 60.0);
        }
        printf("[%d]%.4f,", c + 1, exp(nll / count));
        fflush(stdout);
    }
    printf("\n");
    free(chunk);
    {
        double av = nll / count, av2 = nll2 / count - av * av;
        double ppl = exp(av);
        double err = av2 > 0 ? sqrt(av2 / (count - 1)) * ppl : 0;
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    }
    rc = 0;
out:
    free(ids);
    free(text);
    rf_session_free(s);
    rf_model_free(m);
    return rc;
}
