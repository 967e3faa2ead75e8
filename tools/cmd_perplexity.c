/* cmd_perplexity.c — `rocmforge perplexity -m MODEL -f TEXT [--ctx N]`, computed the way
 * llama.cpp's llama-perplexity does: tokenize the whole text (with BOS if the model adds one),
 * cut it into chunks of n_ctx tokens, put BOS at the start of each chunk when the model uses
 * one, evaluate each chunk from an empty cache, and score only the second half of each chunk
 * (positions n_ctx/2 .. n_ctx-2 predicting the next token). Prints [i]running-ppl values and
 * "Final estimate: PPL = X +/- Y". With --kl-divergence-base FILE it also writes our log-probs in
 * llama-perplexity's base-file format; with --kl-divergence as well it reads such a file instead
 * (from llama.cpp or from us), evaluates its tokens and prints KL-divergence statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd_run_opts.h"
#include "ppl_kld.h"

static const char k_ppl_usage[] =
    "usage: rocmforge perplexity -m MODEL -f TEXT [options]\n"
    "  -m, --model FILE   GGUF model\n"
    "  -f, --file FILE    text to score\n"
    "  -c, --ctx N        tokens per chunk (default 512)\n"
    "  --chunks N         score at most N chunks (default all)\n"
    "  -b, --batch N      tokens per forward pass (default min(ctx, 512))\n"
    "  -t, --threads N    CPU threads (default: all cores)\n"
    "  --kv-type T        f16 (default), f32, q8_0\n"
    "  --device D         cpu (default) or gpu\n"
    "  --kl-divergence-base FILE  write our log-probs to FILE (llama-perplexity's format)\n"
    "  --kl-divergence    read FILE instead (written by llama-perplexity or by us) and print\n"
    "                     KL divergence, delta-p and same-top-token statistics against it\n";

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

/* One perplexity run: the chunks to evaluate and what to do with each scored position. */
typedef struct ppl_run {
    rf_session *s;
    int32_t n_vocab, n_ctx, n_chunk, bos; /* bos < 0: the chunks start with their own token */
    const int32_t *ids;
    FILE *base_out, *base_in; /* --kl-divergence-base without / with --kl-divergence */
    uint16_t *rec;
    size_t rec_len;
    rf_kld_stats st;
    double nll, nll2;
    int64_t count;
} ppl_run;

/* Scores one position (logits lg predicting next): NLL, then the base record out or in. */
static int score_position(ppl_run *r, const float *lg, int32_t next) {
    double mx = -INFINITY, sum = 0;
    for (int32_t v = 0; v < r->n_vocab; v++) mx = lg[v] > mx ? lg[v] : mx;
    for (int32_t v = 0; v < r->n_vocab; v++) sum += exp(lg[v] - mx);
    double lp = lg[next] - mx - log(sum);
    r->nll -= lp;
    r->nll2 += lp * lp;
    r->count++;
    if (r->base_out) {
        rf_kld_encode(lg, r->n_vocab, r->rec);
        if (fwrite(r->rec, sizeof(uint16_t), r->rec_len, r->base_out) != r->rec_len)
            return rf_cli_fail(1, "writing the base file failed");
    } else if (r->base_in) {
        if (fread(r->rec, sizeof(uint16_t), r->rec_len, r->base_in) != r->rec_len)
            return rf_cli_fail(1, "the base file ends early (chunk data truncated)");
        if (rf_kld_add(&r->st, lg, r->n_vocab, r->rec, next)) return rf_cli_fail(1, "out of memory");
    }
    return 0;
}

/* Evaluates chunk c from an empty cache and scores positions n_ctx/2 .. n_ctx-2. */
static int eval_chunk(ppl_run *r, int32_t c, int32_t *chunk) {
    int32_t n_ctx = r->n_ctx, first = n_ctx / 2;
    const int32_t *src = r->ids + (size_t)c * n_ctx;
    memcpy(chunk, src, (size_t)n_ctx * sizeof(int32_t));
    if (r->bos >= 0) chunk[0] = r->bos;
    rf_session_truncate(r->s, 0);
    for (int32_t p0 = 0; p0 < n_ctx; p0 += PPL_PIECE) {
        int32_t cnt = n_ctx - p0 < PPL_PIECE ? n_ctx - p0 : PPL_PIECE;
        bool need = p0 + cnt - 1 >= first;
        if (rf_session_eval(r->s, chunk + p0, cnt, need)) return rf_cli_fail(1, "%s", rf_last_error());
        if (!need) continue;
        for (int32_t i = 0; i < cnt; i++) {
            int32_t pos = p0 + i;
            if (pos < first || pos >= n_ctx - 1) continue;
            if (score_position(r, rf_session_logits(r->s, i), src[pos + 1])) return 1;
        }
    }
    return 0;
}

static int run_chunks(ppl_run *r) {
    int32_t *chunk = malloc((size_t)r->n_ctx * sizeof(int32_t));
    if (!chunk) return rf_cli_fail(1, "out of memory");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int32_t c = 0; c < r->n_chunk; c++) {
        if (eval_chunk(r, c, chunk)) {
            free(chunk);
            return 1;
        }
        if (c == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double sec = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
            fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", sec, sec * r->n_chunk / 60.0);
            if (r->base_in) rf_kld_print_header(stdout);
        }
        if (r->base_in)
            rf_kld_print_chunk(stdout, &r->st, c + 1);
        else
            printf("[%d]%.4f,", c + 1, exp(r->nll / r->count));
        fflush(stdout);
    }
    free(chunk);
    if (r->base_in) {
        printf("\n");
        rf_kld_print_final(stdout, &r->st);
        return 0;
    }
    printf("\n");
    double av = r->nll / r->count, av2 = r->nll2 / r->count - av * av;
    double ppl = exp(av);
    double err = av2 > 0 ? sqrt(av2 / (r->count - 1)) * ppl : 0;
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    return 0;
}

/* Takes --kl-divergence-base FILE and --kl-divergence out of argv (the shared parser does not
 * know them). Returns -1, or 2 after a usage error. */
static int take_kld_args(int *argc, char **argv, const char **base, bool *read) {
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strcmp(argv[i], "--kl-divergence-base")) {
            if (i + 1 >= *argc) return rf_cli_fail(2, "option --kl-divergence-base needs a FILE");
            *base = argv[++i];
        } else if (!strcmp(argv[i], "--kl-divergence")) {
            *read = true;
        } else {
            argv[n++] = argv[i];
        }
    }
    *argc = n;
    if (*read && !*base) return rf_cli_fail(2, "--kl-divergence needs --kl-divergence-base FILE (the base to read)");
    return -1;
}

/* --kl-divergence: the chunks come from the base file (its n_ctx, its tokens). */
static int open_base_in(ppl_run *r, const char *path, rf_run_opts *o) {
    char msg[256];
    int32_t *tokens = NULL;
    r->base_in = fopen(path, "rb");
    if (!r->base_in) return rf_cli_fail(1, "cannot read '%s'", path);
    if (rf_kld_read_header(r->base_in, &r->n_ctx, &r->n_vocab, &r->n_chunk, &tokens, msg, sizeof msg))
        return rf_cli_fail(1, "%s: %s", path, msg);
    if (o->n_ctx && o->n_ctx != r->n_ctx)
        fprintf(stderr, "perplexity: the base was computed with a context of %d; using it, not %d\n", r->n_ctx,
                o->n_ctx);
    o->n_ctx = r->n_ctx;
    r->ids = tokens;
    if (o->chunks > 0 && o->chunks < r->n_chunk) r->n_chunk = o->chunks;
    return 0;
}

int rf_cmd_perplexity(int argc, char **argv) {
    rf_run_opts o;
    const char *base = NULL;
    bool kld = false;
    int rc = take_kld_args(&argc, argv, &base, &kld);
    if (rc >= 0) return rc;
    rc = rf_run_parse(argc, argv, RF_OPT_PPL, &o, k_ppl_usage);
    if (rc >= 0) return rc;
    if (!o.prompt_file && !kld) {
        fputs(k_ppl_usage, stderr);
        return rf_cli_fail(2, "missing -f TEXT");
    }
    ppl_run r = {0};
    char *text = NULL;
    rf_model *m = NULL;
    rf_session *s = NULL;
    int32_t *ids = NULL;
    size_t text_len = 0;
    rc = 1;
    if (kld && open_base_in(&r, base, &o)) goto out;
    if (!kld) {
        text = slurp(o.prompt_file, &text_len);
        if (!text) {
            rf_cli_fail(1, "cannot read '%s'", o.prompt_file);
            goto out;
        }
        if (!o.n_ctx) o.n_ctx = 512;
        r.n_ctx = o.n_ctx;
    }
    if (rf_run_open(&o, &m, &s)) goto out;
    r.s = s;
    const rf_vocab *vocab = rf_model_vocab(m);
    rf_model_info info;
    rf_model_get_info(m, &info);
    if (kld && r.n_vocab != info.n_vocab) {
        rf_cli_fail(1, "%s: the base has a vocabulary of %d tokens, the model %d", base, r.n_vocab, info.n_vocab);
        goto out;
    }
    r.n_vocab = info.n_vocab;
    r.bos = rf_vocab_add_bos(vocab) && rf_vocab_bos(vocab) >= 0 ? rf_vocab_bos(vocab) : -1;
    if (!kld) {
        size_t n_ids = 0, len = text_len;
        rf_tokenize(vocab, text, len, true, false, NULL, 0, &n_ids);
        ids = malloc((n_ids + 1) * sizeof(int32_t));
        if (!ids || rf_tokenize(vocab, text, len, true, false, ids, n_ids, &n_ids)) {
            rf_cli_fail(1, "tokenize: %s", rf_last_error());
            goto out;
        }
        if ((int64_t)n_ids < 2 * (int64_t)r.n_ctx) {
            rf_cli_fail(1, "the text has %zu tokens; perplexity with a context of %d needs at least %d", n_ids,
                        r.n_ctx, 2 * r.n_ctx);
            goto out;
        }
        r.ids = ids;
        r.n_chunk = (int32_t)(n_ids / (size_t)r.n_ctx);
        if (o.chunks > 0 && o.chunks < r.n_chunk) r.n_chunk = o.chunks;
        fprintf(stderr, "perplexity: %zu tokens, ", n_ids);
        if (base) {
            r.base_out = fopen(base, "wb");
            if (!r.base_out || rf_kld_write_header(r.base_out, r.n_ctx, r.n_vocab, r.n_chunk, ids)) {
                rf_cli_fail(1, "cannot write '%s'", base);
                goto out;
            }
        }
    }
    fprintf(stderr, "%d chunks of %d, scoring positions %d..%d of each\n", r.n_chunk, r.n_ctx, r.n_ctx / 2,
            r.n_ctx - 2);
    r.rec_len = rf_kld_record_len(r.n_vocab);
    r.rec = malloc(r.rec_len * sizeof(uint16_t));
    if (!r.rec) {
        rf_cli_fail(1, "out of memory");
        goto out;
    }
    rc = run_chunks(&r);
    if (r.base_out) {
        if (fclose(r.base_out) && !rc) rc = rf_cli_fail(1, "writing '%s' failed", base);
        r.base_out = NULL;
    }
out:
    if (r.base_out) fclose(r.base_out);
    if (r.base_in) fclose(r.base_in);
    if (kld) free((void *)r.ids);
    rf_kld_free(&r.st);
    free(r.rec);
    free(ids);
    free(text);
    rf_session_free(s);
    rf_model_free(m);
    return rc;
}
