/* rocmforge.c — the `rocmforge` command: dispatches to one subcommand per file (cmd_*.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/knobs.h"

#ifdef RF_TEST_HOOKS
void rf_test_hooks_from_env(void); /* tests/util/test_hooks_env.c: rocmforge-test only */
#endif

#pragma weak rf_cmd_inspect
#pragma weak rf_cmd_mkmodel
#pragma weak rf_cmd_tokenize
#pragma weak rf_cmd_detokenize
#pragma weak rf_cmd_run
#pragma weak rf_cmd_batch
#pragma weak rf_cmd_chat
#pragma weak rf_cmd_perplexity
#pragma weak rf_cmd_bench
#pragma weak rf_cmd_serve
#pragma weak rf_cmd_embed

typedef struct rf_cmd {
    const char *name;
    rf_cmd_fn fn;
    const char *summary;
} rf_cmd;

int rf_cli_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int rf_cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

int rf_cli_parse_i64(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static void usage(FILE *f, const rf_cmd *cmds, size_t n) {
    fprintf(f, "rocmforge %s — GGUF LLM inference on AMD and NVIDIA GPUs and the CPU\n\n"
               "usage: rocmforge <command> [options]   (rocmforge <command> --help for details)\n"
               "       rocmforge --help-env                the RF_* environment variables it reads\n\n"
               "commands:\n", RF_VERSION_STRING);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "  %-12s %s%s\n", cmds[i].name, cmds[i].summary,
                cmds[i].fn ? "" : " (not in this build yet)");
}

/* --tp N over several GPUs: every kernel loaded when the GPUs' contexts are made
 * (CUDA_MODULE_LOADING=EAGER, unless the environment sets it). With CUDA's lazy loading a
 * kernel's first launch loads it and waits for its device; on a split whose other GPU is stuck in
 * a collective that wait never ends, and it comes before any of the split's bounded waits
 * (docs/tp.md, "A GPU that stops"). Must run before the first CUDA call of the process. */
static void tp_eager_modules(int argc, char **argv) {
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--tp") && atoi(argv[i + 1]) > 1) {
            setenv("CUDA_MODULE_LOADING", "EAGER", 0);
            return;
        }
}

int main(int argc, char **argv) {
    const rf_cmd cmds[] = {
        {"run", rf_cmd_run, "generate text from a prompt"},
        {"batch", rf_cmd_batch, "generate for every prompt of a file, many at once (continuous batching)"},
        {"chat", rf_cmd_chat, "interactive chat with the model's template"},
        {"serve", rf_cmd_serve, "OpenAI-compatible HTTP server"},
        {"embed", rf_cmd_embed, "embeddings of texts as JSON (pooled as the model file says)"},
        {"bench", rf_cmd_bench, "prompt/generation speed and memory bandwidth"},
        {"perplexity", rf_cmd_perplexity, "perplexity of a model over a text file"},
        {"inspect", rf_cmd_inspect, "show a GGUF file's metadata and tensors"},
        {"mkmodel", rf_cmd_mkmodel, "write a synthetic GGUF model (random weights, real shapes)"},
        {"tokenize", rf_cmd_tokenize, "text to token ids with a model's vocabulary"},
        {"detokenize", rf_cmd_detokenize, "token ids to text"},
    };
    const size_t n = sizeof cmds / sizeof cmds[0];
    if (argc < 2) {
        usage(stderr, cmds, n);
        return 2;
    }
    if (rf_cli_is_help(argv[1]) || !strcmp(argv[1], "help")) {
        usage(stdout, cmds, n);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("rocmforge %s\n", RF_VERSION_STRING);
        return 0;
    }
    if (!strcmp(argv[1], "--help-env")) {
        rf_knobs_print(stdout);
        return 0;
    }
    if (rf_knobs_init()) return rf_cli_fail(2, "%s", rf_last_error()); /* a knob that does not parse */
    tp_eager_modules(argc, argv);
#ifdef RF_TEST_HOOKS
    rf_test_hooks_from_env();
#endif
    for (size_t i = 0; i < n; i++) {
        if (strcmp(argv[1], cmds[i].name)) continue;
        if (!cmds[i].fn) {
            if (argc > 2 && rf_cli_is_help(argv[2])) {
                printf("rocmforge %s — %s\n\nNot part of this build of rocmforge yet.\n",
                       cmds[i].name, cmds[i].summary);
                return 0;
            }
            return rf_cli_fail(2, "'%s' is not part of this build of rocmforge yet", cmds[i].name);
        }
        return cmds[i].fn(argc - 1, argv + 1);
    }
    usage(stderr, cmds, n);
    return rf_cli_fail(2, "unknown command '%s'", argv[1]);
}
