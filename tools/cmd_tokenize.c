/* cmd_tokenize.c — `rocmforge tokenize` (text -> ids/pieces, with a --bench mode for
 * tokenizer throughput) and `rocmforge detokenize` (ids -> text) over a model's vocabulary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/mapped_file.h"

static void tok_usage(FILE *f) {
    fputs("usage: rocmforge tokenize -m MODEL.gguf [options] \"text\"\n"
          "       rocmforge tokenize -m MODEL.gguf [options] -f FILE\n\n"
          "Prints the token ids of the text with the model's vocabulary.\n\n"
          "options:\n"
          "  -m, --model PATH     GGUF file whose tokenizer.ggml.* metadata is used (required)\n"
          "  -f, --file PATH      read the text from a file instead of the command line\n"
          "  --ids                print only the ids, as [1, 2, 3]\n"
          "  --pieces             print only the pieces, one quoted piece per line\n"
          "  --no-special         do not add BOS/EOS even if the model asks for them\n"
          "  --parse-special      map control-token texts in the input (<|im_start|>) to their ids\n"
          "  --bench              measure throughput (MB/s of input, one thread) instead of printing\n"
          "  -h, --help           this help\n\n"
          "default output: one line per token, `<id> '<piece>'` (special tokens rendered).\n",
          f);
}

static void detok_usage(FILE *f) {
    fputs("usage: rocmforge detokenize -m MODEL.gguf [--render-special] ID [ID ...]\n\n"
          "Prints the text of the token ids (commas and brackets between ids are accepted).\n\n"
          "options:\n"
          "  -m, --model PATH     GGUF file with the vocabulary (required)\n"
          "  --render-special     print control tokens (<|im_end|>) instead of dropping them\n"
          "  -h, --help           this help\n",
          f);
}

static int load_vocab(const char *path, rf_vocab **v) {
    rf_gguf *g = NULL;
    if (rf_gguf_open(path, &g)) return rf_cli_fail(1, "%s", rf_last_error());
    rf_status st = rf_vocab_load(g, v);
    rf_gguf_close(g);
    if (st) return rf_cli_fail(1, "%s: %s", path, rf_last_error());
    return 0;
}

/* Prints a piece with C-style escapes for quotes, backslashes and control bytes. */
static void print_escaped(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\'' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
}

static double now_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int rf_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL;
    bool ids_only = false, pieces_only = false, add_special = true, parse_special = false, bench = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (rf_cli_is_help(a)) {
            tok_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--ids")) ids_only = true;
        else if (!strcmp(a, "--pieces")) pieces_only = true;
        else if (!strcmp(a, "--no-special")) add_special = false;
        else if (!strcmp(a, "--parse-special")) parse_special = true;
        else if (!strcmp(a, "--bench")) bench = true;
        else if (a[0] == '-' && a[1] && strcmp(a, "--")) {
            tok_usage(stderr);
            return rf_cli_fail(2, "tokenize: unknown option or missing value '%s'", a);
        } else {
            if (!strcmp(a, "--") && i + 1 < argc) a = argv[++i];
            if (text) return rf_cli_fail(2, "tokenize: give the text as one argument (quote it)");
            text = a;
        }
    }
    if (!model) {
        tok_usage(stderr);
        return rf_cli_fail(2, "tokenize: -m MODEL is required");
    }
    if (!!text + !!file != 1) return rf_cli_fail(2, "tokenize: give either a text argument or -f FILE");
    if (ids_only && pieces_only) return rf_cli_fail(2, "tokenize: --ids and --pieces exclude each other");

    rf_mapped_file mf = {0};
    size_t len;
    if (file) {
        if (rf_mapped_file_open(file, &mf)) return rf_cli_fail(1, "%s", rf_last_error());
        text = mf.data ? mf.data : "";
        len = mf.size;
    } else {
        len = strlen(text);
    }
    rf_vocab *v = NULL;
    int rc = load_vocab(model, &v);
    if (rc) {
        rf_mapped_file_close(&mf);
        return rc;
    }
    size_t n = 0;
    int32_t *ids = NULL;
    rf_status st = rf_tokenize(v, text, len, add_special, parse_special, NULL, 0, &n);
    if (st == RF_ERR_RANGE || st == RF_OK) {
        ids = malloc((n ? n : 1) * sizeof *ids);
        st = ids ? rf_tokenize(v, text, len, add_special, parse_special, ids, n, &n) : RF_ERR_OOM;
    }
    if (st) {
        rc = rf_cli_fail(1, "tokenize: %s", rf_last_error());
        goto out;
    }
    if (bench) {
        /* Repeat until ~2 s have passed (at least 3 runs) and report the best run, by wall
         * clock and by this thread's CPU time (the better measure on a busy machine). */
        double best = 1e30, best_cpu = 1e30, t_all = 0;
        int runs = 0;
        while (runs < 3 || t_all < 2.0) {
            double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
            size_t m;
            if (rf_tokenize(v, text, len, add_special, parse_special, ids, n, &m)) {
                rc = rf_cli_fail(1, "tokenize: %s", rf_last_error());
                goto out;
            }
            double dt = now_s(CLOCK_MONOTONIC) - t0, dc = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
            t_all += dt;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
            runs++;
        }
        printf("bytes %zu tokens %zu runs %d | wall best %.3f s %.2f MB/s | cpu best %.3f s %.2f MB/s "
               "%.0f tokens/s\n",
               len, n, runs, best, len / best / 1e6, best_cpu, len / best_cpu / 1e6, n / best_cpu);
        goto out;
    }
    if (ids_only) {
        putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        puts("]");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char buf[256];
        size_t pl;
        char *big = NULL;
        const char *p = buf;
        if (rf_token_to_piece(v, ids[i], true, buf, sizeof buf, &pl) == RF_ERR_RANGE) {
            big = malloc(pl);
            if (!big || rf_token_to_piece(v, ids[i], true, big, pl, &pl)) {
                free(big);
                rc = rf_cli_fail(1, "tokenize: out of memory");
                goto out;
            }
            p = big;
        }
        if (!pieces_only) printf("%6d ", ids[i]);
        putchar('\'');
        print_escaped(p, pl);
        puts("'");
        free(big);
    }
out:
    free(ids);
    rf_vocab_free(v);
    rf_mapped_file_close(&mf);
    return rc;
}

int rf_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    bool render = false;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (rf_cli_is_help(a)) {
            detok_usage(stdout);
            free(ids);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model = argv[++i];
        else if (!strcmp(a, "--render-special")) render = true;
        else if (a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
            detok_usage(stderr);
            free(ids);
            return rf_cli_fail(2, "detokenize: unknown option or missing value '%s'", a);
        } else {
            /* ids separated by spaces, commas or brackets: "1 2", "[1, 2]" */
            char *copy = strdup(a);
            if (!copy) return rf_cli_fail(1, "out of memory");
            for (char *tok = strtok(copy, " ,[]\t\n"); tok; tok = strtok(NULL, " ,[]\t\n")) {
                long long x;
                if (!rf_cli_parse_i64(tok, INT32_MIN, INT32_MAX, &x)) {
                    rc = rf_cli_fail(2, "detokenize: '%s' is not a token id", tok);
                    free(copy);
                    goto out;
                }
                if (n == cap) {
                    cap = cap ? cap * 2 : 64;
                    int32_t *nv = realloc(ids, cap * sizeof *nv);
                    if (!nv) {
                        free(copy);
                        rc = rf_cli_fail(1, "out of memory");
                        goto out;
                    }
                    ids = nv;
                }
                ids[n++] = (int32_t)x;
            }
            free(copy);
        }
    }
    if (!model) {
        detok_usage(stderr);
        rc = rf_cli_fail(2, "detokenize: -m MODEL is required");
        goto out;
    }
    rf_vocab *v = NULL;
    if ((rc = load_vocab(model, &v))) goto out;
    char *text = NULL;
    size_t tl = 0;
    if (rf_detokenize(v, ids, n, render, &text, &tl)) rc = rf_cli_fail(1, "%s", rf_last_error());
    else {
        fwrite(text, 1, tl, stdout);
        putchar('\n');
    }
    free(text);
    rf_vocab_free(v);
out:
    free(ids);
    return rc;
}
