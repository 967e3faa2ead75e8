/* cmd_batch.c — `rocmforge batch`: a continuation for every prompt of a file through the
 * batching engine (docs/ARCHITECTURE.md §4.4), P sequences in flight at a time. Each result goes to stdout
 * as soon as it finishes (text blocks or JSON lines, in completion order); the aggregate
 * statistics go to stderr last. Prompts are plain text (one per line) or JSON lines with a
 * "prompt" string or chat "messages"; the whole file is checked before the model loads. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd_run_opts.h"
#include "core/utf8.h"
#include "engine/grammar.h"

static const char k_batch_usage[] =
    "usage: rocmforge batch -m MODEL -f PROMPTS [options]\n"
    "  -m, --model FILE        GGUF model\n"
    "  -f, --file FILE         prompts: one per line (blank lines skipped), or JSON lines\n"
    "                          ({\"prompt\": \"...\"} or {\"messages\": [{\"role\": ..., \"content\": ...}]})\n"
    "                          when the first non-blank character is '{'; - reads stdin\n"
    "  -n, --n-predict N       tokens to generate per prompt (default: until end of text or full context)\n"
    "  --parallel P            sequences in flight at once (default 4); the rest wait their turn\n"
    "  -o, --output F          text (default): '### [i] n_prompt=.. n_gen=.. finish=..', the text, a blank line;\n"
    "                          jsonl: one JSON object per prompt, in completion order\n"
    "  --temp T                temperature (default 0 = greedy)\n"
    "  --top-k K, --top-p P, --min-p M   sampling filters (defaults 40, 0.95, 0.05; used when T > 0)\n"
    "  --repeat-penalty R      (default 1 = off), --repeat-last-n N (default 64, -1 = all)\n"
    "  --presence-penalty P, --frequency-penalty F   (default 0)\n"
    "  --seed S                sampling seed of every prompt (default 0; 64-bit)\n"
    "  --stop TEXT             stop string (repeatable, not printed)\n"
    "  --ignore-eos            keep generating after end-of-text tokens\n"
    "  --grammar GBNF, --grammar-file FILE   constrain every output to a GBNF grammar (llama.cpp's syntax)\n"
    "  -j, --json-schema JSON, --json-schema-file FILE   constrain every output to JSON of a schema ('{}': any object)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  -c, --ctx N             positions per sequence (default: trained length, capped to 4096 and memory)\n"
    "  -b, --batch N           token budget of one engine step (default 512, 2 x P past 256)\n"
    "  --kv-type T             KV cache type: f16 (default), f32, q8_0\n"
    "  --kv-blocks N           KV pool size in blocks (default: ctx x parallel positions, capped to memory)\n"
    "  --block-size N          positions per KV block (default 16)\n"
    "  --no-prefix-cache       do not share the KV blocks of common prompt prefixes\n"
    "  --render-special        emit control tokens' text\n"
    "  --device D              auto (default), cpu, gpu or gpu:N\n"
    "  --tp N                  split each layer over N shards (tensor parallelism: over N GPUs, or the CPU)\n"
    "  --deterministic         batch-invariant kernels: each prompt's tokens as if it ran alone\n"
    "  --no-timing             no aggregate statistics line\n";

/* ---- the prompt file -------------------------------------------------------------------- */

typedef struct bprompt {
    int line;        /* 1-based line in the file */
    char *text;      /* text prompt (NULL for messages) */
    size_t len;
    json_t *msgs;    /* [{"role", "content"}, ...] for chat prompts */
    /* the result */
    char *out;
    size_t out_len, out_cap;
    bool done, oom;
    rf_finish_reason finish;
    int32_t n_prompt, n_gen;
    char *error;
} bprompt;

typedef struct bstate {
    bprompt *p;
    size_t n;
    size_t *finished; /* indices finished during the current step, in order */
    size_t n_finished, n_done;
} bstate;

static char *read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
        if (cap - n < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    bool err = ferror(f);
    if (f != stdin) fclose(f);
    if (!b || err) {
        free(b);
        if (!b) errno = ENOMEM;
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

static bool is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\v' && s[i] != '\f') return false;
    return true;
}

/* Checks one JSON line and fills *p; returns 0, or prints "error: FILE:LINE: ..." and returns 1. */
static int parse_json_line(const char *name, int line, const char *s, size_t n, bprompt *p) {
    json_error_t jerr;
    json_t *o = json_loadb(s, n, 0, &jerr);
    if (!o && strstr(jerr.text, "JSON_ALLOW_NUL"))
        return rf_cli_fail(1, "%s:%d: a string holds \\u0000, which prompts cannot (column %d)", name, line, jerr.column);
    if (!o) return rf_cli_fail(1, "%s:%d: invalid JSON: %s (column %d)", name, line, jerr.text, jerr.column);
    int rc = 0;
    json_t *pr = json_object_get(o, "prompt"), *ms = json_object_get(o, "messages");
    if (!json_is_object(o)) {
        rc = rf_cli_fail(1, "%s:%d: expected a JSON object", name, line);
    } else if (pr && ms) {
        rc = rf_cli_fail(1, "%s:%d: has both 'prompt' and 'messages' (give one)", name, line);
    } else if (!pr && !ms) {
        rc = rf_cli_fail(1, "%s:%d: needs 'prompt' (a string) or 'messages' (an array)", name, line);
    } else if (pr) {
        if (!json_is_string(pr)) rc = rf_cli_fail(1, "%s:%d: 'prompt' must be a string", name, line);
        else if (json_string_length(pr) == 0) rc = rf_cli_fail(1, "%s:%d: 'prompt' is empty", name, line);
        else {
            p->len = json_string_length(pr);
            p->text = malloc(p->len + 1);
            if (!p->text) rc = rf_cli_fail(1, "out of memory");
            else memcpy(p->text, json_string_value(pr), p->len + 1);
        }
    } else if (!json_is_array(ms)) {
        rc = rf_cli_fail(1, "%s:%d: 'messages' must be an array", name, line);
    } else if (json_array_size(ms) == 0) {
        rc = rf_cli_fail(1, "%s:%d: 'messages' is empty", name, line);
    } else {
        p->msgs = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(ms, i, m) {
            json_t *ro = json_object_get(m, "role"), *co = json_object_get(m, "content");
            if (!json_is_object(m)) rc = rf_cli_fail(1, "%s:%d: 'messages'[%zu] must be an object", name, line, i);
            else if (!json_is_string(ro)) rc = rf_cli_fail(1, "%s:%d: 'messages'[%zu] needs a string 'role'", name, line, i);
            else if (!json_is_string(co)) rc = rf_cli_fail(1, "%s:%d: 'messages'[%zu] needs a string 'content'", name, line, i);
            if (rc) break;
            json_t *c = json_pack("{sOsO}", "role", ro, "content", co);
            if (!c || json_array_append_new(p->msgs, c)) {
                rc = rf_cli_fail(1, "out of memory");
                break;
            }
        }
    }
    json_decref(o);
    return rc;
}

/* Reads the prompt file into *out (*n prompts). Returns 0 or the exit code after a message. */
static int load_prompts(const char *path, bprompt **out, size_t *n_out) {
    const char *name = strcmp(path, "-") ? path : "<stdin>";
    size_t len;
    char *buf = read_all(path, &len);
    if (!buf) return rf_cli_fail(1, "cannot read prompt file '%s': %s", name, strerror(errno));
    char *s = buf;
    /* a UTF-8 byte order mark is not part of the first prompt */
    if (len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) s += 3, len -= 3;
    size_t k = 0;
    while (k < len && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r' || s[k] == '\n' || s[k] == '\v' || s[k] == '\f')) k++;
    bool jsonl = k < len && s[k] == '{';
    size_t cap = 64, n = 0;
    bprompt *p = calloc(cap, sizeof *p);
    int rc = p ? 0 : rf_cli_fail(1, "out of memory");
    int line = 0;
    for (size_t at = 0; at < len && !rc;) {
        line++;
        const char *nl = memchr(s + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - s) : len, ln = end - at;
        const char *l = s + at;
        at = end + 1;
        if (ln && l[ln - 1] == '\r') ln--; /* CRLF files */
        if (is_blank(l, ln)) continue;
        if (n == cap) {
            bprompt *np = realloc(p, 2 * cap * sizeof *p);
            if (!np) {
                rc = rf_cli_fail(1, "out of memory");
                break;
            }
            memset(np + cap, 0, cap * sizeof *p);
            p = np;
            cap *= 2;
        }
        bprompt *q = &p[n++];
        q->line = line;
        if (jsonl) {
            rc = parse_json_line(name, line, l, ln, q);
        } else {
            q->text = malloc(ln + 1);
            if (!q->text) {
                rc = rf_cli_fail(1, "out of memory");
                break;
            }
            memcpy(q->text, l, ln);
            q->text[ln] = 0;
            q->len = ln;
        }
    }
    free(buf);
    if (!rc && n == 0) rc = rf_cli_fail(2, "the prompt file '%s' holds no prompts", name);
    if (rc) {
        for (size_t i = 0; p && i < n; i++) {
            free(p[i].text);
            json_decref(p[i].msgs);
        }
        free(p);
        return rc;
    }
    *out = p;
    *n_out = n;
    return 0;
}

/* ---- output ----------------------------------------------------------------------------- */

/* A JSON string of any bytes: invalid UTF-8 becomes U+FFFD. NULL when out of memory. */
static json_t *json_bytes(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *b = malloc(3 * n + 1); /* each invalid byte at most 3 bytes out */
    if (!b) return NULL;
    j = json_stringn(b, rf_utf8_replace(s, n, b)); /* as Python's errors="replace" */
    free(b);
    return j;
}

static int emit_result(const rf_run_opts *o, const bprompt *p, size_t idx) {
    if (!o->jsonl) {
        printf("### [%zu] n_prompt=%d n_gen=%d finish=%s\n", idx, p->n_prompt, p->n_gen,
               rf_finish_reason_str(p->finish));
        fwrite(p->out ? p->out : "", 1, p->out_len, stdout);
        fputs("\n\n", stdout);
    } else {
        json_t *j = json_object();
        int bad = !j;
        if (!bad) {
            bad |= json_object_set_new(j, "index", json_integer((json_int_t)idx));
            bad |= p->msgs ? json_object_set(j, "prompt", p->msgs) : json_object_set_new(j, "prompt", json_bytes(p->text, p->len));
            bad |= json_object_set_new(j, "text", json_bytes(p->out ? p->out : "", p->out_len));
            bad |= json_object_set_new(j, "n_prompt", json_integer(p->n_prompt));
            bad |= json_object_set_new(j, "n_gen", json_integer(p->n_gen));
            bad |= json_object_set_new(j, "finish_reason", json_string(rf_finish_reason_str(p->finish)));
            if (p->finish == RF_FINISH_ERROR) bad |= json_object_set_new(j, "error", json_bytes(p->error ? p->error : "", p->error ? strlen(p->error) : 0));
        }
        char *d = bad ? NULL : json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (!d) return rf_cli_fail(1, "out of memory while writing result %zu", idx);
        puts(d);
        free(d);
    }
    fflush(stdout);
    return 0;
}

/* ---- the engine's events ---------------------------------------------------------------- */

typedef struct bref {
    bstate *st;
    size_t idx;
} bref;

static bool on_event(const rf_event *ev, void *user) {
    bref *r = user;
    bprompt *p = &r->st->p[r->idx];
    size_t len;
    const char *t = rf_event_text(ev, &len);
    if (len && !p->oom) {
        if (p->out_len + len > p->out_cap) {
            size_t cap = p->out_cap ? p->out_cap : 256;
            while (cap < p->out_len + len) cap *= 2;
            char *nb = realloc(p->out, cap);
            if (!nb) {
                p->oom = true;
                return false; /* cancels the request: its output is incomplete */
            }
            p->out = nb;
            p->out_cap = cap;
        }
        memcpy(p->out + p->out_len, t, len);
        p->out_len += len;
    }
    if (rf_event_get_kind(ev) == RF_EVENT_DONE && !p->done) {
        p->done = true;
        p->finish = rf_event_finish(ev);
        p->n_prompt = rf_event_n_prompt(ev);
        p->n_gen = rf_event_n_gen(ev);
        if (p->finish == RF_FINISH_ERROR) p->error = strdup(rf_event_error(ev));
        if (p->oom) {
            p->finish = RF_FINISH_ERROR;
            free(p->error);
            p->error = strdup("out of memory while collecting the output");
        }
        r->st->finished[r->st->n_finished++] = r->idx;
        r->st->n_done++;
    }
    return true;
}

/* ---- the command ------------------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A request with the command line's generation options and grammar g (may be NULL; no prompt
 * yet); NULL after a message. */
static rf_request *make_request(const rf_run_opts *o, rf_grammar *g) {
    rf_request *r = rf_request_new();
    if (!r) {
        rf_cli_fail(1, "out of memory");
        return NULL;
    }
    rf_status st = RF_OK;
    st = st ? st : rf_request_set(r, RF_REQ_MAX_TOKENS, o->n_predict);
    st = st ? st : rf_request_set_sampling(r, &o->sp); /* built once by rf_run_parse, seed 64-bit */
    st = st ? st : rf_request_set(r, RF_REQ_IGNORE_EOS, o->ignore_eos);
    st = st ? st : rf_request_set(r, RF_REQ_RENDER_SPECIAL, o->render_special);
    for (int i = 0; i < o->n_stop && !st; i++) st = rf_request_add_stop(r, o->stops[i], strlen(o->stops[i]));
    if (!st && g) rf_request_set_grammar(r, g);
    if (st) {
        rf_cli_fail(2, "%s", rf_last_error());
        rf_request_free(r);
        return NULL;
    }
    return r;
}

static rf_status engine_open(const rf_run_opts *o, rf_model *m, rf_engine **e) {
    rf_engine_config *c = rf_engine_config_new();
    if (!c) return rf_set_error(RF_ERR_OOM, "out of memory");
    rf_status st = RF_OK;
    st = st ? st : rf_engine_config_set(c, RF_ENGINE_CTX, o->n_ctx);
    st = st ? st : rf_engine_config_set(c, RF_ENGINE_PARALLEL, o->n_parallel);
    if (o->n_batch) st = st ? st : rf_engine_config_set(c, RF_ENGINE_BATCH, o->n_batch);
    st = st ? st : rf_engine_config_set(c, RF_ENGINE_KV_BLOCKS, o->kv_blocks);
    st = st ? st : rf_engine_config_set(c, RF_ENGINE_BLOCK_SIZE, o->block_size);
    st = st ? st : rf_engine_config_set(c, RF_ENGINE_KV_TYPE, o->kv_type);
    st = st ? st : rf_engine_config_set(c, RF_ENGINE_PREFIX_CACHE, !o->no_prefix_cache);
    st = st ? st : rf_engine_new(m, c, e);
    rf_engine_config_free(c);
    return st;
}

static void progress(bool tty, size_t done, size_t total) {
    if (tty) {
        fprintf(stderr, "\r\033[Kbatch: %zu/%zu done", done, total);
        fflush(stderr);
    }
}

static void progress_clear(bool tty) {
    if (tty) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}

int rf_cmd_batch(int argc, char **argv) {
    rf_run_opts o;
    int rc = rf_run_parse(argc, argv, RF_OPT_SAMPLING | RF_OPT_BATCH, &o, k_batch_usage);
    if (rc >= 0) return rc;
    if (!o.prompt_file) {
        fputs(k_batch_usage, stderr);
        return rf_cli_fail(2, "missing -f PROMPTS");
    }
    /* everything the command line and the file can get wrong, before the model loads */
    rf_grammar *grammar = NULL;
    if (rf_run_grammar(&o, &grammar)) return 2;
    rf_request *probe = make_request(&o, grammar);
    if (!probe) {
        rf_grammar_unref(grammar);
        return 2;
    }
    rf_request_free(probe);
    const char *fname = strcmp(o.prompt_file, "-") ? o.prompt_file : "<stdin>";
    bstate S = {0};
    if ((rc = load_prompts(o.prompt_file, &S.p, &S.n))) {
        rf_grammar_unref(grammar);
        return rc;
    }
    rf_model *m = NULL;
    rf_engine *e = NULL;
    bref *refs = NULL;
    rc = 1;
    S.finished = malloc(S.n * sizeof *S.finished);
    refs = malloc(S.n * sizeof *refs);
    if (!S.finished || !refs) {
        rf_cli_fail(1, "out of memory");
        goto out;
    }
    if (rf_run_load(&o, &m)) goto out;
    if (engine_open(&o, m, &e)) {
        rf_cli_fail(1, "%s", rf_last_error());
        goto out;
    }

    /* submit everything: the engine tokenizes (or renders the chat template) here, so a prompt
     * it cannot take is an error before any step runs */
    double t0 = now_s();
    int64_t prompt0 = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS);
    int64_t gen0 = rf_engine_get_stat(e, RF_STAT_GEN_TOKENS);
    for (size_t i = 0; i < S.n; i++) {
        bprompt *p = &S.p[i];
        rf_request *r = make_request(&o, grammar);
        if (!r) goto out;
        rf_status st = RF_OK;
        if (p->msgs) {
            size_t k;
            json_t *msg;
            json_array_foreach(p->msgs, k, msg) {
                if (st) break;
                st = rf_request_add_message(r, json_string_value(json_object_get(msg, "role")),
                                            json_string_value(json_object_get(msg, "content")));
            }
        } else {
            st = rf_request_set_prompt_text(r, p->text, p->len);
        }
        refs[i] = (bref){&S, i};
        rf_request_set_callback(r, on_event, &refs[i]);
        if (!st) st = rf_engine_submit(e, r, NULL);
        rf_request_free(r);
        if (st) {
            rf_cli_fail(1, "%s:%d: %s%s", fname, p->line, rf_last_error(),
                        st == RF_ERR_RANGE && strstr(rf_last_error(), "context") ? " (use --ctx)" : "");
            goto out;
        }
    }

    /* step until every request is done; a step that computed prompt tokens is prompt time */
    bool tty = isatty(2);
    double t_prompt = 0, t_gen = 0;
    int64_t max_running = 0;
    size_t n_failed = 0;
    rf_status step_err = RF_OK;
    progress(tty, 0, S.n);
    for (;;) {
        if (S.n_done == S.n) break;
        if (rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) == 0) {
            progress_clear(tty);
            rf_cli_fail(1, "internal: the engine is idle but %zu of %zu prompts never finished", S.n - S.n_done, S.n);
            goto out;
        }
        int64_t pt = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS);
        double ts = now_s();
        rf_status st = rf_engine_step(e);
        double dt = now_s() - ts;
        if (rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS) > pt) t_prompt += dt;
        else t_gen += dt;
        /* the sequences of this step: those still running and those it finished */
        int64_t running = rf_engine_get_stat(e, RF_STAT_RUNNING) + (int64_t)S.n_finished;
        if (running > max_running) max_running = running;
        if (st) {
            /* the step's requests finished with RF_FINISH_ERROR (their events say why); the
             * engine stays usable, so the rest go on */
            progress_clear(tty);
            fprintf(stderr, "error: step failed: %s\n", rf_last_error());
            step_err = st;
        }
        if (S.n_finished) {
            progress_clear(tty);
            for (size_t k = 0; k < S.n_finished; k++) {
                bprompt *p = &S.p[S.finished[k]];
                if (p->finish == RF_FINISH_ERROR) {
                    n_failed++;
                    fprintf(stderr, "error: %s:%d: %s\n", fname, p->line, p->error ? p->error : "failed");
                }
                if (emit_result(&o, p, S.finished[k])) goto out;
            }
            S.n_finished = 0;
        }
        progress(tty, S.n_done, S.n);
    }
    progress_clear(tty);
    double wall = now_s() - t0;

    if (!o.no_timing) {
        int64_t np = rf_engine_get_stat(e, RF_STAT_PROMPT_TOKENS) - prompt0;
        int64_t ng = rf_engine_get_stat(e, RF_STAT_GEN_TOKENS) - gen0;
        fprintf(stderr,
                "batch: %zu prompts | prompt: %lld tokens in %.1f ms (%.2f tok/s) | generation: %lld tokens in %.1f ms "
                "(%.2f tok/s) | total: %lld tokens in %.1f ms (%.2f tok/s) | steps %lld, preemptions %lld, "
                "prefix-cache hits %lld tokens, max running %lld\n",
                S.n, (long long)np, t_prompt * 1e3, t_prompt > 0 ? np / t_prompt : 0.0, (long long)ng, t_gen * 1e3,
                t_gen > 0 ? ng / t_gen : 0.0, (long long)(np + ng), wall * 1e3, wall > 0 ? (np + ng) / wall : 0.0,
                (long long)rf_engine_get_stat(e, RF_STAT_STEPS), (long long)rf_engine_get_stat(e, RF_STAT_PREEMPTIONS),
                (long long)rf_engine_get_stat(e, RF_STAT_PREFIX_HIT_TOKENS), (long long)max_running);
    }
    if (n_failed || step_err) {
        rf_cli_fail(1, "%zu of %zu prompts failed", n_failed, S.n);
        goto out;
    }
    rc = 0;
out:
    rf_engine_free(e);
    rf_model_free(m);
    rf_grammar_unref(grammar);
    for (size_t i = 0; i < S.n; i++) {
        free(S.p[i].text);
        free(S.p[i].out);
        free(S.p[i].error);
        json_decref(S.p[i].msgs);
    }
    free(S.p);
    free(S.finished);
    free(refs);
    return rc;
}
