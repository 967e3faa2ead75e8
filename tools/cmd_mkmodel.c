/* cmd_mkmodel.c — `rocmforge mkmodel`: writes a synthetic GGUF model (real shapes, seeded random
 * weights, synthetic tokenizer, llama-quantize type mix) for tests and benchmarks. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "rocmforge/mkmodel.h"

static void mk_usage(FILE *f) {
    fprintf(f,
            "usage: rocmforge mkmodel --preset NAME [--type TYPE] [--seed N] [--layers N] [--vocab N] [--pure]\n"
            "                         -o OUT.gguf\n"
            "       rocmforge mkmodel --preset NAME [--type TYPE] [--layers N] --dry-run\n"
            "       rocmforge mkmodel --list\n\n"
            "Writes a GGUF model with the preset's real architecture and shapes, random weights\n"
            "(deterministic: the same options give a byte-identical file) and a synthetic but valid\n"
            "tokenizer. Loads in ROCmForge and llama.cpp. See docs/mkmodel.md.\n\n"
            "options:\n"
            "  --preset NAME   model to imitate (--list shows them)\n"
            "  --type TYPE     llama-quantize file type, default f16: f32 f16 bf16 q4_0 q4_1 q5_0\n"
            "                  q5_1 q8_0 q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k\n"
            "                  (q3_k/q4_k/q5_k = the _m mixes), with llama-quantize's per-tensor mix\n"
            "  --pure          no mix: every 2-D weight gets the base type (llama-quantize --pure)\n"
            "  --seed N        random seed (default 0)\n"
            "  --layers N      override the layer count (1..1024)\n"
            "  --vocab N       override the vocabulary size (tokens; at least the family's fixed ones)\n"
            "  -t, --threads N rows are made on N threads (default: all CPUs; same bytes)\n"
            "  -o, --output F  output file\n"
            "  --dry-run       print the tensors, types and sizes instead of writing\n"
            "  -q, --quiet     no progress on stderr\n"
            "  --list          list the presets\n");
}

static void list_presets(void) {
    printf("%-14s %-6s %6s %6s %6s %5s %4s %5s %7s %7s %-6s %s\n", "preset", "arch", "layers",
           "embd", "ffn", "heads", "kv", "hdim", "vocab", "ctx", "tied", "tokenizer");
    rf_mkmodel_preset_info pi;
    for (int32_t i = 0; rf_mkmodel_preset_at(i, &pi); i++) {
        printf("%-14s %-6s %6d %6d %6d %5d %4d %5d %7u %7u %-6s %s%s%s\n", pi.name, pi.arch,
               pi.n_layer, pi.n_embd, pi.n_ff, pi.n_head, pi.n_head_kv, pi.head_dim, pi.n_vocab,
               pi.n_ctx, pi.tied_embeddings ? "yes" : "no", pi.tokenizer, pi.pre ? "/" : "",
               pi.pre ? pi.pre : "");
    }
    printf("\n");
    for (int32_t i = 0; rf_mkmodel_preset_at(i, &pi); i++) printf("%-14s %s\n", pi.name, pi.description);
}

static void progress(void *user, int64_t i, int64_t n, const char *name) {
    (void)user;
    fprintf(stderr, "\r[%4" PRId64 "/%4" PRId64 "] %-40s", i + 1, n, name);
    if (i + 1 == n) fputc('\n', stderr);
    fflush(stderr);
}

static int dry_run(const rf_mkmodel_opts *o) {
    rf_mkmodel_tensor *t = NULL;
    int64_t n = 0;
    if (rf_mkmodel_plan(o, &t, &n)) return rf_cli_fail(1, "%s", rf_last_error());
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        char shape[64];
        if (t[i].n_dims == 1)
            snprintf(shape, sizeof shape, "%" PRId64, t[i].ne[0]);
        else
            snprintf(shape, sizeof shape, "%" PRId64 " x %" PRId64, t[i].ne[0], t[i].ne[1]);
        printf("%-28s %-8s %-16s %12" PRIu64 "\n", t[i].name, rf_type_name((int)t[i].type), shape,
               t[i].n_bytes);
        total += t[i].n_bytes;
    }
    printf("%" PRId64 " tensors, %.2f MiB of tensor data\n", n, total / 1048576.0);
    free(t);
    return 0;
}

int rf_cmd_mkmodel(int argc, char **argv) {
    rf_mkmodel_opts o;
    memset(&o, 0, sizeof o);
    const char *out = NULL;
    bool list = false, dry = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        long long v;
        if (rf_cli_is_help(a)) {
            mk_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--list")) {
            list = true;
        } else if (!strcmp(a, "--pure")) {
            o.pure = true;
        } else if (!strcmp(a, "--dry-run")) {
            dry = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--preset") || !strcmp(a, "--type") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--layers") || !strcmp(a, "--vocab") || !strcmp(a, "-t") || !strcmp(a, "--threads") ||
                   !strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!val) return rf_cli_fail(2, "mkmodel: %s needs a value", a);
            i++;
            if (!strcmp(a, "--preset")) {
                o.preset = val;
            } else if (!strcmp(a, "--type")) {
                o.type = val;
            } else if (!strcmp(a, "--seed")) {
                char *end;
                if (!*val || *val == '-') return rf_cli_fail(2, "mkmodel: --seed '%s' is not a non-negative integer", val);
                unsigned long long s = strtoull(val, &end, 10);
                if (*end) return rf_cli_fail(2, "mkmodel: --seed '%s' is not a non-negative integer", val);
                o.seed = s;
            } else if (!strcmp(a, "--layers")) {
                if (!rf_cli_parse_i64(val, 1, 1024, &v))
                    return rf_cli_fail(2, "mkmodel: --layers '%s' is not an integer in 1..1024", val);
                o.n_layers = (int32_t)v;
            } else if (!strcmp(a, "--vocab")) {
                if (!rf_cli_parse_i64(val, 1, INT32_MAX, &v))
                    return rf_cli_fail(2, "mkmodel: --vocab '%s' is not an integer in 1..%d", val, INT32_MAX);
                o.n_vocab = (uint32_t)v;
            } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
                if (!rf_cli_parse_i64(val, 1, 64, &v))
                    return rf_cli_fail(2, "mkmodel: --threads '%s' is not an integer in 1..64", val);
                o.n_threads = (int32_t)v;
            } else {
                out = val;
            }
        } else {
            return rf_cli_fail(2, "mkmodel: unknown option '%s' (see rocmforge mkmodel --help)", a);
        }
    }
    if (list) {
        list_presets();
        return 0;
    }
    if (!o.preset) return rf_cli_fail(2, "mkmodel: --preset is required (rocmforge mkmodel --list)");
    if (dry) return dry_run(&o);
    if (!out) return rf_cli_fail(2, "mkmodel: -o OUT.gguf is required (or --dry-run)");
    if (!quiet && isatty(2)) o.progress = progress;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (rf_mkmodel_write(&o, out)) return rf_cli_fail(1, "%s", rf_last_error());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct stat sb;
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (!quiet)
        fprintf(stderr, "wrote %s: %.2f MiB in %.2f s\n", out,
                stat(out, &sb) ? 0.0 : (double)sb.st_size / 1048576.0, secs);
    return 0;
}
