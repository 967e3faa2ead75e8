/* bench.h — `rocmforge bench`'s options, result rows and run environment, shared by the command
 * (cmd_bench.c: parsing, the tests) and its output (bench_out.c: markdown, JSON, CSV, the plot). */
#ifndef RF_TOOLS_BENCH_H
#define RF_TOOLS_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "cmd_run_opts.h"
#include "gpu_monitor.h"
#include "engine/grammar.h"

typedef struct bench_opts {
    const char *model, *plot;
    bool deterministic; /* --deterministic: rf_model_set_deterministic */
    int p, n, reps, threads, batch_prompt;
    int depths[16], n_depths, batches[16], n_batches;
    rf_device device;
    int device_index, tp;
    rf_type kv_type;
    int out; /* 0 md, 1 json, 2 csv */
    rf_run_opts g; /* only its grammar fields: --grammar, --grammar-file, -j, --json-schema(-file) */
} bench_opts;

typedef struct row {
    char test[48];
    int kind;    /* 0 pp, 1 tg, 2 batched */
    int depth, batch;
    double mean, sd;   /* tok/s; batched: the steady state (NAN when no step had every sequence decoding) */
    double p50, p99;   /* ms per decode step (batched: steady steps); NAN for pp */
    double gbps;       /* achieved read bandwidth; NAN for pp */
    double agg_mean, agg_sd;   /* batched: tok/s over every decode step (the ragged aggregate); else NAN */
    double agg_p50, mixed_p50; /* batched: step p50 of every decode step / of prompt steps carrying decodes */
    int g_ended, g_first;      /* under a grammar: most sequences of a repetition that completed the
                                * document before n tokens; the fewest tokens at which one did (0: none) */
    int steady_steps, decode_steps, max_seqs; /* batched: per repetition */
} row;

typedef struct bench_env {
    bench_opts o;
    rf_model *m;
    rf_engine *e;
    rf_model_info info;
    double bw;
    char devname[256], driver[96];
    bool on_gpu;
    rf_gpu_reading before, after;
    double w_bytes;             /* bytes a decode token reads: weights, one embedding row */
    double exp_bytes, exp_frac; /* MoE: routed experts' bytes and the fraction one token reads */
    int32_t n_exp, n_exp_used;
    double kv_pos;              /* K/V bytes per position */
    int64_t kv_bytes, state_bytes; /* the engine's KV pool; a hybrid model's state slots (+ checkpoints) */
    int64_t n_slots, n_ckpt;
    rf_grammar *g; /* --grammar / -j: the tgN and batched tests' constraint, else NULL */
} bench_env;

/* The results as JSON, CSV or a markdown table on stdout (base: the model's file name, date: the
 * run's UTC time). */
void rf_bench_print_json(const bench_env *v, const row *rows, int nrows, const char *base, const char *date);
void rf_bench_print_csv(const bench_env *v, const row *rows, int nrows, const char *base);
void rf_bench_print_md(const bench_env *v, const row *rows, int nrows, const char *base, const char *date);
/* --plot: tok/s against depth and batch size through gnuplot; 0, or 1 with a message. */
int rf_bench_plot(const bench_env *v, const row *rows, int nrows, const char *base, const char *date);

#endif
