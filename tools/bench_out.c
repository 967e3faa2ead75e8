/* bench_out.c — `rocmforge bench`'s results as a markdown table (the default), JSON or CSV, and
 * the --plot of tok/s against depth and batch size (gnuplot). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* A number or JSON's null. */
static void json_num(const char *key, const char *fmt, double x) {
    printf(", \"%s\": ", key);
    if (isnan(x)) printf("null");
    else printf(fmt, x);
}

/* Which constraint the tgN and batched tests ran under, as a JSON value. */
static const char *grammar_kind(const bench_opts *o) {
    if (o->g.grammar || o->g.grammar_file) return "\"gbnf\"";
    if (o->g.json_schema || o->g.json_schema_file) return "\"json_schema\"";
    return "null";
}

void rf_bench_print_json(const bench_env *v, const row *rows, int nrows, const char *base, const char *date) {
    printf("{\"model\": \"%s\", \"ftype\": \"%s\", \"params\": %llu, \"weight_bytes\": %llu, \"device\": \"%s\", "
           "\"driver\": \"%s\", \"read_bw_gbs\": %.1f, \"date\": \"%s\", \"reps\": %d, \"kv_bytes\": %lld, "
           "\"state_bytes\": %lld, \"state_slots\": %lld, \"grammar\": %s,\n \"gpu_before\": ",
           base, v->info.ftype, (unsigned long long)v->info.n_params, (unsigned long long)v->info.weight_bytes, v->devname,
           v->driver, v->bw, date, v->o.reps, (long long)v->kv_bytes, (long long)v->state_bytes, (long long)v->n_slots,
           grammar_kind(&v->o));
    for (int k = 0; k < 2; k++) {
        const rf_gpu_reading *g = k ? &v->after : &v->before;
        if (!g->ok) printf("null");
        else printf("{\"sm_mhz\": %u, \"mem_mhz\": %u, \"temp_c\": %u, \"power_w\": %.1f, \"throttled\": %s}", g->sm_mhz,
                    g->mem_mhz, g->temp_c, g->power_mw / 1000.0, g->throttled ? "true" : "false");
        if (!k) printf(", \"gpu_after\": ");
    }
    printf(",\n \"results\": [\n");
    for (int i = 0; i < nrows; i++) {
        const row *R = &rows[i];
        printf("  {\"test\": \"%s\", \"depth\": %d, \"sequences\": %d", R->test, R->depth, R->batch);
        json_num("tok_s", "%.2f", R->mean);
        json_num("tok_s_sd", "%.2f", R->sd);
        if (R->kind) {
            json_num("ms_p50", "%.3f", R->p50);
            json_num("ms_p99", "%.3f", R->p99);
            json_num("gb_s", "%.1f", R->gbps);
            json_num("bw_frac", "%.3f", v->bw > 0 ? R->gbps / v->bw : NAN);
        }
        if (R->kind == 2) {
            json_num("tok_s_aggregate", "%.2f", R->agg_mean);
            json_num("tok_s_aggregate_sd", "%.2f", R->agg_sd);
            json_num("ms_p50_aggregate", "%.3f", R->agg_p50);
            json_num("ms_p50_prompt_steps", "%.3f", R->mixed_p50);
            printf(", \"steady_steps\": %d, \"decode_steps\": %d, \"max_seqs_per_step\": %d", R->steady_steps,
                   R->decode_steps, R->max_seqs);
        }
        if (R->kind && v->g) printf(", \"grammar_ended\": %d, \"grammar_first_end\": %d", R->g_ended, R->g_first);
        printf("}%s\n", i + 1 < nrows ? "," : "");
    }
    printf(" ]}\n");
}

/* A CSV cell: the number, or nothing. */
static void csv_num(const char *fmt, double x) {
    putchar(',');
    if (!isnan(x)) printf(fmt, x);
}

void rf_bench_print_csv(const bench_env *v, const row *rows, int nrows, const char *base) {
    printf("model,ftype,device,test,depth,sequences,tok_s,tok_s_sd,ms_p50,ms_p99,gb_s,bw_frac,tok_s_aggregate,"
           "tok_s_aggregate_sd,steady_steps,decode_steps\n");
    for (int i = 0; i < nrows; i++) {
        const row *R = &rows[i];
        printf("%s,%s,\"%s\",%s,%d,%d", base, v->info.ftype, v->devname, R->test, R->depth, R->batch);
        csv_num("%.2f", R->mean);
        csv_num("%.2f", R->sd);
        csv_num("%.3f", R->p50);
        csv_num("%.3f", R->p99);
        csv_num("%.1f", R->gbps);
        csv_num("%.3f", v->bw > 0 && !isnan(R->gbps) ? R->gbps / v->bw : NAN);
        csv_num("%.2f", R->agg_mean);
        csv_num("%.2f", R->agg_sd);
        if (R->kind == 2) printf(",%d,%d\n", R->steady_steps, R->decode_steps);
        else printf(",,\n");
    }
}

void rf_bench_print_md(const bench_env *v, const row *rows, int nrows, const char *base, const char *date) {
    printf("device: %s%s%s | read bandwidth %.1f GB/s (measured) | %s\n", v->devname, v->driver[0] ? " | driver " : "",
           v->driver, v->bw, date);
    printf("model: %s | %s | %.1f MiB of weights | %.1f M params | %.1f MiB read per decode token (+ K/V)\n", base,
           v->info.ftype, v->info.weight_bytes / 1048576.0, v->info.n_params / 1e6,
           (v->w_bytes - v->exp_bytes * (1 - v->exp_frac)) / 1048576.0);
    printf("memory: KV pool %.1f MiB", v->kv_bytes / 1048576.0);
    if (v->n_slots > 0) /* a hybrid model: its recurrent state beside the KV */
        printf(" | recurrent state %.1f MiB (%lld slots + %lld checkpoints of %.2f MiB)", v->state_bytes / 1048576.0,
               (long long)v->n_slots, (long long)v->n_ckpt, v->state_bytes / 1048576.0 / (double)(v->n_slots + v->n_ckpt));
    printf("\n\n");
    if (v->g) { /* the constraint on one line (a GBNF text's rules joined by spaces) */
        const char *src = v->o.g.grammar_file ? v->o.g.grammar_file : v->o.g.json_schema_file ? v->o.g.json_schema_file
                          : v->o.g.grammar ? v->o.g.grammar : v->o.g.json_schema;
        printf("constrained: the tgN and batched tests generate under the %s ",
               v->o.g.grammar || v->o.g.grammar_file ? "GBNF grammar" : "JSON schema");
        for (const char *c = src; *c; c++) putchar(*c == '\n' || *c == '\r' ? ' ' : *c);
        printf(" (a mask every step)\n\n");
    }
    if (v->exp_bytes > 0)
        printf("experts: %d of %d per token, %.1f MiB of expert weights (a step of B sequences counts the "
               "experts B uniform picks would reach: an upper bound for real routers)\n\n", v->n_exp_used, v->n_exp,
               v->exp_bytes / 1048576.0);
    printf("| test | t/s | ms/step p50 | p99 | GB/s | of bw | all decode steps t/s |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n");
    bool any_b = false;
    for (int i = 0; i < nrows; i++) {
        const row *R = &rows[i];
        if (isnan(R->mean)) printf("| %s | - |", R->test);
        else printf("| %s | %.2f ± %.2f |", R->test, R->mean, R->sd);
        if (isnan(R->p50)) printf(" - | - | - | - |");
        else printf(" %.2f | %.2f | %.1f | %.0f%% |", R->p50, R->p99, R->gbps, v->bw > 0 ? 100 * R->gbps / v->bw : 0.0);
        if (R->kind == 2) printf(" %.2f ± %.2f |\n", R->agg_mean, R->agg_sd);
        else printf(" - |\n");
        any_b |= R->kind == 2;
    }
    for (int i = 0; i < nrows && v->g; i++)
        if (rows[i].g_ended)
            printf("\n%s: %d sequence(s) completed the grammar's document before %d tokens (the first at token %d):\n"
                   "they kept decoding (ignore-eos), end-of-generation tokens under the finished document's masks, so\n"
                   "those steps were not all open documents; a grammar with no end (docs/PERFORMANCE.md) measures it\n",
                   rows[i].test, rows[i].g_ended, v->o.n, rows[i].g_first);
    if (any_b) {
        printf("\nbatched (tgN x B seqs): t/s and its step p50/p99 are the steady state, steps in which all B sequences\n"
               "decode (llama-batched-bench's S_TG); 'all decode steps' is every step without prompt tokens, prompts\n"
               "streaming in first and sequences finishing one by one after.\n");
        for (int i = 0; i < nrows; i++) {
            const row *R = &rows[i];
            if (R->kind != 2) continue;
            printf("  %s: %d of %d decode steps had all %d sequences (most in one step: %d); step p50 %.2f ms over "
                   "all decode steps", R->test, R->steady_steps, R->decode_steps, R->batch, R->max_seqs, R->agg_p50);
            if (isnan(R->mixed_p50)) printf(", no prompt step carried decodes\n");
            else printf(", %.2f ms over the prompt steps that carried decodes\n", R->mixed_p50);
            if (isnan(R->mean))
                printf("  %s: no step had every sequence decoding (the first finished before the last prompt was in): "
                       "raise -n\n", R->test);
        }
    }
    if (v->before.ok)
        printf("\ngpu (%s): before %u/%u MHz (sm/mem) %u C %.0f W | after %u/%u MHz %u C %.0f W\n", v->before.source,
               v->before.sm_mhz, v->before.mem_mhz, v->before.temp_c, v->before.power_mw / 1000.0, v->after.sm_mhz,
               v->after.mem_mhz, v->after.temp_c, v->after.power_mw / 1000.0);
}

/* --plot: tok/s against depth and batch size (gnuplot). */
int rf_bench_plot(const bench_env *v, const row *rows, int nrows, const char *base, const char *date) {
    char tmp[] = "/tmp/rf-bench-XXXXXX";
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) return rf_cli_fail(1, "--plot: cannot write a temporary file");
    fprintf(f, "# kind x tok/s sd aggregate\n");
    for (int i = 0; i < nrows; i++) { /* '?': no figure (a batched test without its steady state) */
        const row *R = &rows[i];
        if (!R->kind) continue;
        fprintf(f, "%d %d", R->kind, R->kind == 1 ? R->depth : R->batch);
        if (isnan(R->mean)) fprintf(f, " ? ?");
        else fprintf(f, " %.3f %.3f", R->mean, R->sd);
        fprintf(f, " %.3f\n", isnan(R->agg_mean) ? (isnan(R->mean) ? 0.0 : R->mean) : R->agg_mean);
    }
    fclose(f);
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) {
        unlink(tmp);
        return rf_cli_fail(1, "--plot needs gnuplot (apt-get install gnuplot-nox)");
    }
    fprintf(g,
            "set terminal pngcairo noenhanced size 1100,450 font ',10'\nset output '%s'\n" /* noenhanced: '_' in a file name is not a subscript */
            "set multiplot layout 1,2 title '%s on %s (tg%d, %s)'\n"
            "set grid\nset ylabel 'tokens/s'\nset yrange [0:*]\nset datafile missing '?'\n"
            "set xlabel 'KV depth (positions)'\nset title 'one sequence'\n"
            "plot '%s' using ($1==1?$2:1/0):3:4 with yerrorlines lw 2 pt 7 title 'tg tok/s'\n"
            "set xlabel 'sequences at once'\nset title 'batched generation'\nset logscale x 2\n"
            "plot '%s' using ($1==2?$2:1/0):3:4 with yerrorlines lw 2 pt 7 title 'all decoding (steady)', "
            "'' using ($1==2?$2:1/0):5 with linespoints lw 1 pt 6 title 'all decode steps'\n"
            "unset multiplot\n",
            v->o.plot, base, v->devname, v->o.n, date, tmp, tmp);
    int prc = pclose(g);
    unlink(tmp);
    if (prc != 0) return rf_cli_fail(1, "--plot: gnuplot failed (exit %d); is gnuplot installed (apt-get install gnuplot-nox)?", prc);
    fprintf(stderr, "bench: wrote %s\n", v->o.plot);
    return 0;
}
