/* cmd_chat.c — `rocmforge chat -m MODEL [-s SYSTEM]`: interactive chat with history, rendered
 * with the model's own chat template every turn (the session reuses the cached prefix, so only
 * the new turn is evaluated). Ctrl-C ends the current answer, not the program; Ctrl-C at the
 * prompt, Ctrl-D, or "/exit" ends the program. "/reset" forgets the history. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/knobs.h"
#include "cmd_run_opts.h"

static const char k_chat_usage[] =
    "usage: rocmforge chat -m MODEL [-s SYSTEM] [options]\n"
    "  -m, --model FILE       GGUF model\n"
    "  -s, --system TEXT      system message\n"
    "  -n N                   max tokens per answer (default: until end of turn)\n"
    "  --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed ...   as for `rocmforge run`\n"
    "  -t N, --ctx N, --batch N, --kv-type T, --device D                  as for `rocmforge run`\n"
    "Type /exit (or Ctrl-D) to quit, /reset to clear the history. Ctrl-C stops the current answer.\n";

static volatile int g_cancel;
static volatile int g_generating;

static void on_sigint(int sig) {
    (void)sig;
    g_cancel = 1;
    if (!g_generating) {
        static const char msg[] = "\n";
        ssize_t r = write(2, msg, 1);
        (void)r;
        _exit(130);
    }
}

typedef struct answer {
    char *buf;
    size_t len, cap;
} answer;

static bool on_piece(const char *p, size_t n, void *user) {
    answer *a = user;
    fwrite(p, 1, n, stdout);
    fflush(stdout);
    if (a->len + n + 1 > a->cap) {
        size_t cap = (a->len + n + 1) * 2;
        char *b = realloc(a->buf, cap);
        if (!b) return false;
        a->buf = b;
        a->cap = cap;
    }
    memcpy(a->buf + a->len, p, n);
    a->len += n;
    a->buf[a->len] = 0;
    return true;
}

typedef struct history {
    rf_chat_msg *msgs;
    char **owned; /* strings we allocated, parallel to msgs */
    size_t n, cap;
} history;

static int hist_push(history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        rf_chat_msg *m = realloc(h->msgs, cap * sizeof *m);
        char **o = realloc(h->owned, cap * sizeof *o);
        if (!m || !o) return -1;
        h->msgs = m;
        h->owned = o;
        h->cap = cap;
    }
    char *c = strdup(content);
    if (!c) return -1;
    h->owned[h->n] = c;
    h->msgs[h->n++] = (rf_chat_msg){role, c};
    return 0;
}

/* Drops the oldest user/assistant pair after the system message (context full). */
static bool hist_drop_oldest(history *h, size_t keep_first) {
    if (h->n < keep_first + 2) return false;
    free(h->owned[keep_first]);
    free(h->owned[keep_first + 1]);
    memmove(h->msgs + keep_first, h->msgs + keep_first + 2, (h->n - keep_first - 2) * sizeof *h->msgs);
    memmove(h->owned + keep_first, h->owned + keep_first + 2, (h->n - keep_first - 2) * sizeof *h->owned);
    h->n -= 2;
    return true;
}

int rf_cmd_chat(int argc, char **argv) {
    rf_run_opts o;
    int rc = rf_run_parse(argc, argv, RF_OPT_CHAT | RF_OPT_SAMPLING, &o, k_chat_usage);
    if (rc >= 0) return rc;
    rf_model *m;
    rf_session *s;
    if ((rc = rf_run_open(&o, &m, &s))) return rc;
    const rf_vocab *vocab = rf_model_vocab(m);
    history h = {0};
    size_t keep = 0;
    if (o.system) {
        hist_push(&h, "system", o.system);
        keep = 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    bool tty = isatty(0);
    char line[16384];
    rc = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        g_generating = 0;
        if (!fgets(line, sizeof line, stdin)) break;
        size_t ll = strlen(line);
        while (ll && (line[ll - 1] == '\n' || line[ll - 1] == '\r')) line[--ll] = 0;
        if (!ll) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            while (h.n > keep) free(h.owned[--h.n]);
            rf_session_truncate(s, 0);
            continue;
        }
        if (hist_push(&h, "user", line)) {
            rc = rf_cli_fail(1, "out of memory");
            break;
        }
        char *text = NULL;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        for (;;) {
            free(text);
            free(ids);
            text = NULL;
            ids = NULL;
            if (!rf_model_chat_template(m)) {
                rc = rf_cli_fail(1, "this model has no usable chat template (see the warning above)");
                goto out;
            }
            rf_chat_render_opts ro = {.add_generation_prompt = true};
            rf_text_span *data = NULL; /* what the user typed: never special tokens */
            size_t n_data = 0;
            if (rf_chat_template_render_data(rf_model_chat_template(m), h.msgs, h.n, &ro, &text, &data, &n_data)) {
                rc = rf_cli_fail(1, "chat template: %s", rf_last_error());
                goto out;
            }
            rf_tokenize_opts to = {.parse_special = true, .plain = data, .n_plain = n_data};
            rf_tokenize_ex(vocab, text, strlen(text), &to, NULL, 0, &n_ids);
            ids = malloc((n_ids + 1) * sizeof(int32_t));
            if (!ids || rf_tokenize_ex(vocab, text, strlen(text), &to, ids, n_ids, &n_ids)) {
                rc = rf_cli_fail(1, "tokenize: %s", rf_last_error());
                free(text);
                free(ids);
                free(data);
                goto out;
            }
            free(data);
            /* leave room for an answer; drop old turns when the context is nearly full */
            if ((int64_t)n_ids + 64 <= rf_session_n_ctx(s) || !hist_drop_oldest(&h, keep)) break;
        }
        free(text);
        if ((int64_t)n_ids >= rf_session_n_ctx(s)) {
            fprintf(stderr, "error: the message has %zu tokens but the context holds %d\n", n_ids, rf_session_n_ctx(s));
            free(h.owned[--h.n]);
            free(ids);
            continue;
        }
        rf_gen_params gp = rf_gen_default_params();
        gp.sampling = o.sp;
        gp.max_tokens = o.n_predict;
        gp.stop = o.stops;
        gp.n_stop = (size_t)o.n_stop;
        gp.cancel = &g_cancel;
        answer a = {0};
        rf_gen_stats st;
        g_cancel = 0;
        g_generating = 1;
        rf_status gs = rf_generate(s, ids, (int32_t)n_ids, &gp, on_piece, &a, &st);
        g_generating = 0;
        free(ids);
        if (gs) {
            fprintf(stderr, "\nerror: %s\n", rf_last_error());
            free(h.owned[--h.n]);
            free(a.buf);
            continue;
        }
        free(st.tokens);
        fputc('\n', stdout);
        if (st.finish == RF_FINISH_CANCELLED) fputs("[stopped]\n", stderr);
        hist_push(&h, "assistant", a.buf ? a.buf : "");
        free(a.buf);
        if (!o.no_timing && rf_knob_bool(RF_KNOB_CHAT_TIMING)) rf_run_print_timing(&st);
    }
out:
    for (size_t i = 0; i < h.n; i++) free(h.owned[i]);
    free(h.msgs);
    free(h.owned);
    rf_session_free(s);
    rf_model_free(m);
    return rc;
}
