/* cli.h — the rocmforge subcommands and the small conventions they share:
 * `error: <message>` on stderr and a non-zero exit (2 for usage errors, 1 for failures). */
#ifndef RF_CLI_H
#define RF_CLI_H

#include "rocmforge.h"

/* Each subcommand gets argv with argv[0] = its own name ("inspect"). Returns the exit code.
 * Subcommands are weak so a build without one still links and says so. */
typedef int (*rf_cmd_fn)(int argc, char **argv);

int rf_cmd_inspect(int argc, char **argv);
int rf_cmd_mkmodel(int argc, char **argv);
int rf_cmd_tokenize(int argc, char **argv);
int rf_cmd_detokenize(int argc, char **argv);
int rf_cmd_run(int argc, char **argv);
int rf_cmd_batch(int argc, char **argv);
int rf_cmd_chat(int argc, char **argv);
int rf_cmd_perplexity(int argc, char **argv);
int rf_cmd_bench(int argc, char **argv);
int rf_cmd_serve(int argc, char **argv);
int rf_cmd_embed(int argc, char **argv);

/* Prints "error: <msg>\n" to stderr; returns `code` for `return rf_cli_fail(2, ...)`. */
int rf_cli_fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* True if argv[i] is -h or --help. */
int rf_cli_is_help(const char *arg);

/* Parses a whole decimal integer in [lo, hi]; false (no message) if it is not one. */
int rf_cli_parse_i64(const char *s, long long lo, long long hi, long long *out);

#endif
