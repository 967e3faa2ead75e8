/* engine.c — rf_engine's face: configuration, the memory plan, request building and submit,
 * cancel, state, and what happens to a sequence's output (sampling, forking the choices of a
 * request, text with stop strings, events, retirement). The step itself is scheduler.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/knobs.h"
#include "engine/engine_internal.h"
#include "rocmforge/quant.h"

double rf_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

const char *rf_finish_reason_str(rf_finish_reason r) {
    switch (r) {
    case RF_FINISH_EOS: return "eos";
    case RF_FINISH_LENGTH: return "length";
    case RF_FINISH_STOP: return "stop";
    case RF_FINISH_CONTEXT: return "context";
    case RF_FINISH_CANCELLED: return "cancelled";
    case RF_FINISH_ERROR: return "error";
    default: return "none";
    }
}

/* ---- configuration ---------------------------------------------------------------------- */

rf_engine_config *rf_engine_config_new(void) {
    rf_engine_config *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->v[RF_ENGINE_PARALLEL] = 4;
    c->v[RF_ENGINE_BATCH] = 512;
    c->v[RF_ENGINE_BLOCK_SIZE] = 16;
    c->v[RF_ENGINE_KV_TYPE] = RF_TYPE_F16;
    c->v[RF_ENGINE_PREFIX_CACHE] = 1;
    return c;
}

void rf_engine_config_free(rf_engine_config *c) { free(c); }

rf_status rf_engine_config_set(rf_engine_config *c, rf_engine_opt opt, int64_t v) {
    static const char *names[] = {"ctx", "parallel", "batch", "kv_blocks", "block_size", "kv_type",
                                  "prefix_cache", "threads"};
    static const int64_t lo[] = {0, 1, 1, 0, 1, 0, 0, 0};
    static const int64_t hi[] = {1 << 24, 4096, 1 << 16, 1 << 26, 4096, 64, 1, 1024};
    if (!c || (int)opt < 0 || opt > RF_ENGINE_THREADS)
        return rf_set_error(RF_ERR_INVALID_ARG, "engine option %d is unknown", (int)opt);
    if (v < lo[opt] || v > hi[opt])
        return rf_set_error(RF_ERR_INVALID_ARG, "engine option %s = %lld is outside [%lld, %lld]", names[opt],
                            (long long)v, (long long)lo[opt], (long long)hi[opt]);
    if (opt == RF_ENGINE_KV_TYPE && v != RF_TYPE_F16 && v != RF_TYPE_F32 && v != RF_TYPE_Q8_0)
        return rf_set_error(RF_ERR_INVALID_ARG, "KV cache type %s is not supported (f32, f16, q8_0)",
                            rf_type_name((rf_type)v));
    c->v[opt] = v;
    return RF_OK;
}

static uint64_t avail_memory(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0) return (uint64_t)8 << 30;
    return (uint64_t)pages * (uint64_t)psz;
}

rf_status rf_engine_create(rf_model *m, int32_t n_ctx, int32_t n_parallel, int32_t n_batch,
                           int32_t n_blocks, int32_t block_size, rf_type kv_type, bool prefix_cache,
                           int32_t n_threads, rf_engine **out) {
    *out = NULL;
    if (!m) return rf_set_error(RF_ERR_INVALID_ARG, "engine: model is NULL");
    const rf_hparams *hp = &m->hp;
    if (kv_type != RF_TYPE_F32 && kv_type != RF_TYPE_F16 && kv_type != RF_TYPE_Q8_0)
        return rf_set_error(RF_ERR_INVALID_ARG, "KV cache type %s is not supported (f32, f16, q8_0)", rf_type_name(kv_type));
    if (kv_type == RF_TYPE_Q8_0 && hp->head_dim % 32)
        return rf_set_error(RF_ERR_INVALID_ARG, "KV cache type q8_0 needs a head size that is a multiple of 32 (it is %d)", hp->head_dim);
    if (n_ctx < 0 || n_parallel < 1 || n_batch < 0 || n_blocks < 0 || block_size < 1 || n_threads < 0)
        return rf_set_error(RF_ERR_INVALID_ARG, "engine: ctx %d, parallel %d, batch %d, blocks %d, block size %d, threads %d",
                            n_ctx, n_parallel, n_batch, n_blocks, block_size, n_threads);
    uint64_t per_pos;
    rf_status st = rf_kv_bytes_per_pos(m, kv_type, &per_pos);
    if (st) return st;
    bool on_dev = rf_backend_on_device(m->be);
    /* the memory plan: what the step's buffers take comes off the budget before the pool */
    uint64_t budget = avail_memory() / 2, buffers = 0, dev_free = 0;
    if (on_dev) {
#ifdef RF_HAVE_GPU
        size_t fr = 0, tot = 0;
        if ((st = rf_model_gpu_mem(m, &fr, &tot))) return st; /* the fullest GPU of a split */
        dev_free = fr;
        buffers = rf_fwd_buffer_bytes(m, n_batch ? n_batch : 512, n_parallel);
        uint64_t margin = 256u << 20;
        budget = fr > buffers + margin ? fr - buffers - margin : 0;
#endif
    }
    if (n_ctx == 0) {
        n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
        if (per_pos * (uint64_t)n_ctx > budget) n_ctx = (int32_t)(budget / per_pos);
        if (n_ctx < 16) return rf_set_error(RF_ERR_OOM, "not enough memory for a KV cache of 16 positions");
    }
    if (n_ctx > 1 << 24) return rf_set_error(RF_ERR_INVALID_ARG, "context length %d is too large", n_ctx);
    int32_t per_seq = (n_ctx + block_size - 1) / block_size;
    /* one sequence of n_ctx positions plus one block for a copy-on-write in flight */
    int32_t need = per_seq + 1;
    if (n_blocks == 0) {
        uint64_t want = (uint64_t)per_seq * (uint64_t)n_parallel + 1;
        uint64_t fit = budget / (per_pos * (uint64_t)block_size);
        if (want > fit) {
            rf_log(RF_LOG_WARN, "KV pool: %d sequences of %d positions need %.1f MiB; using %.1f MiB (%llu blocks)",
                   n_parallel, n_ctx, want * per_pos * block_size / 1048576.0, fit * per_pos * block_size / 1048576.0,
                   (unsigned long long)fit);
            want = fit;
        }
        if (want > (1u << 26)) want = 1u << 26;
        n_blocks = (int32_t)(want < (uint64_t)need ? (uint64_t)need : want);
    }
    if (on_dev && (uint64_t)n_blocks * block_size * per_pos > budget)
        return rf_set_error(RF_ERR_OOM,
                            "GPU memory plan: a KV pool of %d blocks (%.1f MiB) and %.1f MiB of step buffers need "
                            "%.1f MiB, the GPU has %.1f MiB free (lower --ctx, --parallel or --kv-blocks)",
                            n_blocks, (double)n_blocks * block_size * per_pos / 1048576.0, buffers / 1048576.0,
                            ((double)n_blocks * block_size * per_pos + buffers + (256u << 20)) / 1048576.0,
                            dev_free / 1048576.0);
    if (n_blocks < need)
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "a KV pool of %d blocks of %d positions cannot hold one sequence of the context of %d "
                            "(needs %d blocks: raise --kv-blocks or lower --ctx)",
                            n_blocks, block_size, n_ctx, need);
    if (n_batch == 0) n_batch = 512;
    if (n_batch < n_parallel) n_batch = n_parallel;
    int32_t lrows = 1;
    while (lrows < n_parallel) lrows *= 2; /* room for the padded decode bucket on a device */
    if (on_dev && n_batch < lrows) n_batch = lrows;
    if (n_threads && !on_dev) {
        if ((st = rf_backend_cpu_set_threads(m->be, n_threads))) return st;
    }
    rf_engine *e = calloc(1, sizeof *e);
    if (!e) return rf_set_error(RF_ERR_OOM, "engine: out of memory");
    e->m = m;
    e->n_ctx = n_ctx;
    e->n_parallel = n_parallel;
    e->n_batch = n_batch;
    e->block_size = block_size;
    e->max_blocks = per_seq;
    e->kv_type = kv_type;
    e->next_id = 1;
    /* a split over several GPUs runs eagerly unless RF_TP_GRAPHS=1 (docs/tp.md) */
    e->graphs = rf_knob_bool(RF_KNOB_GPU_GRAPHS) && rf_model_graphs_ok(m);
    e->trace = rf_knob_bool(RF_KNOB_GPU_STEP_TRACE);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->incoming_tail = &e->incoming;
    int32_t nv = hp->n_vocab;
    e->b_ids = malloc((size_t)n_batch * sizeof(int32_t));
    e->b_pos = malloc((size_t)n_batch * sizeof(int32_t));
    e->b_seq = malloc((size_t)n_batch * sizeof(int32_t));
    e->b_slot = malloc((size_t)n_batch * sizeof(int32_t));
    e->b_out = malloc((size_t)n_batch * sizeof(int32_t));
    e->b_seqs = malloc((size_t)n_batch * sizeof(rf_seq *));
    e->s_rows = malloc((size_t)n_batch * sizeof(rf_sample_row));
    e->s_ids = malloc((size_t)n_batch * sizeof(int32_t));
    e->lp_work = malloc((size_t)nv * sizeof(float));
    if (!e->b_ids || !e->b_pos || !e->b_seq || !e->b_slot || !e->b_out || !e->b_seqs || !e->lp_work || !e->s_rows ||
        !e->s_ids) {
        rf_engine_free(e);
        return rf_set_error(RF_ERR_OOM, "engine: out of memory");
    }
    if ((st = rf_kv_pool_new(n_blocks, block_size, prefix_cache, &e->pool))) {
        rf_engine_free(e);
        return st;
    }
    if ((st = rf_fwd_init(m, &e->f, n_blocks, block_size, n_batch, kv_type, on_dev ? lrows : 1))) {
        rf_engine_free(e);
        return st;
    }
    rf_log(RF_LOG_INFO, "engine: ctx %d x %d sequences, KV pool %d blocks of %d (%.1f MiB %s), batch %d", n_ctx,
           n_parallel, n_blocks, block_size, (double)per_pos * block_size * n_blocks / 1048576.0,
           rf_type_name(kv_type), n_batch);
    rf_engine_snapshot(e);
    *out = e;
    return RF_OK;
}

rf_status rf_engine_new(rf_model *m, const rf_engine_config *c, rf_engine **out) {
    rf_engine_config def;
    if (!c) {
        rf_engine_config *d = rf_engine_config_new();
        if (!d) return rf_set_error(RF_ERR_OOM, "engine: out of memory");
        def = *d;
        rf_engine_config_free(d);
        c = &def;
    }
    return rf_engine_create(m, (int32_t)c->v[RF_ENGINE_CTX], (int32_t)c->v[RF_ENGINE_PARALLEL],
                            (int32_t)c->v[RF_ENGINE_BATCH], (int32_t)c->v[RF_ENGINE_KV_BLOCKS],
                            (int32_t)c->v[RF_ENGINE_BLOCK_SIZE], (rf_type)c->v[RF_ENGINE_KV_TYPE],
                            c->v[RF_ENGINE_PREFIX_CACHE] != 0, (int32_t)c->v[RF_ENGINE_THREADS], out);
}

static void req_free(rf_req *r) {
    if (!r) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stops[i]);
    free(r);
}

void rf_seq_free(rf_seq *s) {
    if (!s) return;
    rf_sampler_free(s->smp);
    rf_textout_free(&s->out);
    free(s->tokens);
    free(s->blocks);
    free(s->hashes);
    free(s);
}

void rf_engine_free(rf_engine *e) {
    if (!e) return;
    for (int32_t i = 0; i < e->n_running; i++)
        if (!e->running[i]->persistent) rf_seq_free(e->running[i]);
    for (int32_t i = 0; i < e->n_waiting; i++) rf_seq_free(e->waiting[i]);
    for (rf_req *r = e->active, *n; r; r = n) {
        n = r->next;
        req_free(r);
    }
    for (rf_req *r = e->incoming, *n; r; r = n) {
        n = r->next;
        req_free(r);
    }
    if (e->m) rf_fwd_free(e->m, &e->f);
    rf_kv_pool_free(e->pool);
    free(e->running);
    free(e->waiting);
    free(e->b_ids);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_slot);
    free(e->b_out);
    free(e->b_seqs);
    free(e->s_rows);
    free(e->s_ids);
    free(e->pen_ids);
    free(e->pen_counts);
    free(e->b_table);
    free(e->logits);
    free(e->lp_work);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* ---- requests --------------------------------------------------------------------------- */

rf_request *rf_request_new(void) {
    rf_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->sp = rf_sampler_default_params();
    r->max_tokens = -1;
    r->n = 1;
    r->logprobs = -1;
    r->add_special = true;
    r->parse_special = true;
    return r;
}

static void request_clear_prompt(rf_request *r) {
    free(r->ids);
    free(r->text);
    for (size_t i = 0; i < r->n_msgs; i++) {
        free(r->roles[i]);
        free(r->contents[i]);
    }
    free(r->roles);
    free(r->contents);
    r->ids = NULL;
    r->text = NULL;
    r->roles = r->contents = NULL;
    r->n_ids = r->text_len = r->n_msgs = r->msgs_cap = 0;
    r->kind = 0;
}

void rf_request_free(rf_request *r) {
    if (!r) return;
    request_clear_prompt(r);
    for (int i = 0; i < r->n_stop; i++) free(r->stops[i]);
    free(r);
}

rf_status rf_request_set(rf_request *r, rf_req_opt opt, double v) {
    if (!r) return rf_set_error(RF_ERR_INVALID_ARG, "request is NULL");
    if (isnan(v)) return rf_set_error(RF_ERR_INVALID_ARG, "request option %d: value is NaN", (int)opt);
#define RANGE(name, lo, hi)                                                                              \
    if (v < (lo) || v > (hi))                                                                            \
        return rf_set_error(RF_ERR_INVALID_ARG, "%s = %g is outside [%g, %g]", name, v, (double)(lo), (double)(hi))
#define INTEGRAL(name)                                                                                   \
    if (v != floor(v)) return rf_set_error(RF_ERR_INVALID_ARG, "%s = %g is not an integer", name, v)
    switch (opt) {
    case RF_REQ_MAX_TOKENS: INTEGRAL("max_tokens"); r->max_tokens = v < 0 ? -1 : (v > INT32_MAX ? INT32_MAX : (int32_t)v); break;
    case RF_REQ_TEMPERATURE: RANGE("temperature", 0, 1e6); r->sp.temperature = (float)v; break;
    case RF_REQ_TOP_K: INTEGRAL("top_k"); RANGE("top_k", -1, INT32_MAX); r->sp.top_k = (int32_t)v; break;
    case RF_REQ_TOP_P: RANGE("top_p", 0, 1); r->sp.top_p = (float)v; break;
    case RF_REQ_MIN_P: RANGE("min_p", 0, 1); r->sp.min_p = (float)v; break;
    case RF_REQ_REPEAT_PENALTY: RANGE("repetition_penalty", 1e-6, 1e6); r->sp.repeat_penalty = (float)v; break;
    case RF_REQ_REPEAT_LAST_N: INTEGRAL("repeat_last_n"); RANGE("repeat_last_n", -1, INT32_MAX); r->sp.repeat_last_n = (int32_t)v; break;
    case RF_REQ_PRESENCE_PENALTY: RANGE("presence_penalty", -1e6, 1e6); r->sp.presence_penalty = (float)v; break;
    case RF_REQ_FREQUENCY_PENALTY: RANGE("frequency_penalty", -1e6, 1e6); r->sp.frequency_penalty = (float)v; break;
    case RF_REQ_SEED: INTEGRAL("seed"); RANGE("seed", 0, 9007199254740992.0); r->sp.seed = (uint64_t)v; break;
    case RF_REQ_IGNORE_EOS: r->ignore_eos = v != 0; break;
    case RF_REQ_RENDER_SPECIAL: r->render_special = v != 0; break;
    case RF_REQ_N: INTEGRAL("n"); RANGE("n", 1, RF_MAX_CHOICES); r->n = (int32_t)v; break;
    case RF_REQ_LOGPROBS: INTEGRAL("logprobs"); RANGE("logprobs", -1, RF_MAX_TOP_LOGPROBS); r->logprobs = (int32_t)v; break;
    case RF_REQ_ADD_SPECIAL: r->add_special = v != 0; break;
    case RF_REQ_PARSE_SPECIAL: r->parse_special = v != 0; break;
    default: return rf_set_error(RF_ERR_INVALID_ARG, "request option %d is unknown", (int)opt);
    }
#undef RANGE
#undef INTEGRAL
    return RF_OK;
}

rf_status rf_request_add_stop(rf_request *r, const char *text, size_t len) {
    if (!r || (!text && len)) return rf_set_error(RF_ERR_INVALID_ARG, "stop string: bad arguments");
    if (r->n_stop >= RF_MAX_STOPS) return rf_set_error(RF_ERR_INVALID_ARG, "at most %d stop strings", RF_MAX_STOPS);
    if (!len) return RF_OK; /* matches nothing */
    char *c = malloc(len);
    if (!c) return rf_set_error(RF_ERR_OOM, "stop string: out of memory");
    memcpy(c, text, len);
    r->stops[r->n_stop] = c;
    r->stop_len[r->n_stop++] = len;
    return RF_OK;
}

rf_status rf_request_set_prompt_ids(rf_request *r, const int32_t *ids, size_t n) {
    if (!r || (!ids && n)) return rf_set_error(RF_ERR_INVALID_ARG, "prompt ids: bad arguments");
    request_clear_prompt(r);
    r->ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!r->ids) return rf_set_error(RF_ERR_OOM, "prompt: out of memory");
    if (n) memcpy(r->ids, ids, n * sizeof(int32_t));
    r->n_ids = n;
    r->kind = 1;
    return RF_OK;
}

rf_status rf_request_set_prompt_text(rf_request *r, const char *text, size_t len) {
    if (!r || (!text && len)) return rf_set_error(RF_ERR_INVALID_ARG, "prompt text: bad arguments");
    request_clear_prompt(r);
    r->text = malloc(len + 1);
    if (!r->text) return rf_set_error(RF_ERR_OOM, "prompt: out of memory");
    if (len) memcpy(r->text, text, len);
    r->text[len] = 0;
    r->text_len = len;
    r->kind = 2;
    return RF_OK;
}

rf_status rf_request_add_message(rf_request *r, const char *role, const char *content) {
    if (!r || !role || !content) return rf_set_error(RF_ERR_INVALID_ARG, "message: role and content are required");
    if (r->kind != 3) {
        request_clear_prompt(r);
        r->kind = 3;
    }
    if (r->n_msgs == r->msgs_cap) {
        size_t cap = r->msgs_cap ? r->msgs_cap * 2 : 8;
        char **a = realloc(r->roles, cap * sizeof *a);
        if (!a) return rf_set_error(RF_ERR_OOM, "message: out of memory");
        r->roles = a;
        char **b = realloc(r->contents, cap * sizeof *b);
        if (!b) return rf_set_error(RF_ERR_OOM, "message: out of memory");
        r->contents = b;
        r->msgs_cap = cap;
    }
    char *ro = strdup(role), *co = strdup(content);
    if (!ro || !co) {
        free(ro);
        free(co);
        return rf_set_error(RF_ERR_OOM, "message: out of memory");
    }
    r->roles[r->n_msgs] = ro;
    r->contents[r->n_msgs++] = co;
    return RF_OK;
}

void rf_request_set_callback(rf_request *r, rf_event_fn fn, void *user) {
    if (!r) return;
    r->cb = fn;
    r->user = user;
}

/* Tokenizes a prompt (o: specials, plain ranges) with at most n_ctx tokens: past that it stops
 * and fails with RF_ERR_RANGE and *n = n_ctx + 1. *out malloc'd. */
static rf_status tokenize_text(const rf_engine *e, const char *text, size_t len, rf_tokenize_opts o,
                               int32_t **out, size_t *n) {
    const rf_vocab *v = e->m->vocab;
    *out = NULL;
    *n = 0;
    o.max_tokens = (size_t)e->n_ctx;
    /* one pass into a buffer that is usually big enough: tokens rarely outnumber bytes */
    size_t cap = len + 4 < o.max_tokens + 1 ? len + 4 : o.max_tokens + 1, cnt = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) return rf_set_error(RF_ERR_OOM, "tokenize: out of memory");
    rf_status st = rf_tokenize_ex(v, text, len, &o, ids, cap, &cnt);
    if (st == RF_ERR_RANGE && cnt > cap && cnt <= o.max_tokens) {
        int32_t *bigger = realloc(ids, cnt * sizeof(int32_t));
        if (!bigger) {
            free(ids);
            return rf_set_error(RF_ERR_OOM, "tokenize: out of memory");
        }
        ids = bigger;
        st = rf_tokenize_ex(v, text, len, &o, ids, cnt, &cnt);
    }
    if (st) {
        free(ids);
        if (st == RF_ERR_RANGE && cnt > o.max_tokens) {
            *n = cnt;
            return rf_set_error(RF_ERR_RANGE, "the prompt has more than %d tokens but the context holds %d (tokenizing "
                                              "stopped there)", e->n_ctx, e->n_ctx);
        }
        return st;
    }
    *out = ids;
    *n = cnt;
    return RF_OK;
}

/* The request's prompt as token ids (text tokenized, messages rendered), as submit does it. */
static rf_status request_tokens(rf_engine *e, const rf_request *r, int32_t **out, size_t *n_out) {
    int32_t *ids = NULL;
    size_t n = 0;
    rf_status st = RF_OK;
    *out = NULL;
    *n_out = 0;
    if (r->kind == 1) {
        ids = malloc((r->n_ids ? r->n_ids : 1) * sizeof(int32_t));
        if (!ids) return rf_set_error(RF_ERR_OOM, "submit: out of memory");
        if (r->n_ids) memcpy(ids, r->ids, r->n_ids * sizeof(int32_t));
        n = r->n_ids;
    } else if (r->kind == 2) {
        rf_tokenize_opts o = {.add_special = r->add_special, .parse_special = r->parse_special};
        if ((st = tokenize_text(e, r->text, r->text_len, o, &ids, n_out))) return st;
        n = *n_out;
    } else if (r->kind == 3) {
        const rf_chat_template *t = e->m->chat;
        if (!t) return rf_set_error(RF_ERR_INVALID_ARG, "this model has no usable chat template");
        rf_chat_msg *msgs = malloc((r->n_msgs ? r->n_msgs : 1) * sizeof *msgs);
        if (!msgs) return rf_set_error(RF_ERR_OOM, "submit: out of memory");
        for (size_t i = 0; i < r->n_msgs; i++) msgs[i] = (rf_chat_msg){r->roles[i], r->contents[i]};
        char *text = NULL;
        rf_text_span *data = NULL;
        size_t nd = 0;
        rf_chat_render_opts ro = {.add_generation_prompt = true};
        st = rf_chat_template_render_data(t, msgs, r->n_msgs, &ro, &text, &data, &nd);
        free(msgs);
        if (st) return rf_set_error(st, "chat template: %s", rf_last_error());
        /* the template already holds BOS where the model wants one; special tokens only from
         * its own markup, the messages' text as plain text */
        rf_tokenize_opts o = {.parse_special = true, .plain = data, .n_plain = nd};
        st = tokenize_text(e, text, strlen(text), o, &ids, n_out);
        n = *n_out;
        free(text);
        free(data);
        if (st) return st;
    } else {
        return rf_set_error(RF_ERR_INVALID_ARG, "the request has no prompt");
    }
    *out = ids;
    *n_out = n;
    return RF_OK;
}

rf_status rf_engine_prompt_tokens(rf_engine *e, const rf_request *r, int32_t *n) {
    if (n) *n = 0;
    if (!e || !r || !n) return rf_set_error(RF_ERR_INVALID_ARG, "prompt_tokens: NULL argument");
    int32_t *ids = NULL;
    size_t cnt = 0;
    rf_status st = request_tokens(e, r, &ids, &cnt);
    free(ids);
    *n = cnt > INT32_MAX ? INT32_MAX : (int32_t)cnt; /* n_ctx + 1 when tokenizing stopped at the context */
    return st;
}

int32_t rf_engine_n_vocab(const rf_engine *e) { return e ? e->m->hp.n_vocab : 0; }

rf_status rf_engine_submit(rf_engine *e, const rf_request *r, uint64_t *id) {
    if (id) *id = 0;
    if (!e || !r) return rf_set_error(RF_ERR_INVALID_ARG, "submit: engine or request is NULL");
    int32_t nv = e->m->hp.n_vocab;
    int32_t *ids = NULL;
    size_t n = 0;
    rf_status st = request_tokens(e, r, &ids, &n);
    if (st) return st;
    if (n == 0) {
        free(ids);
        return rf_set_error(RF_ERR_INVALID_ARG, "the prompt is empty");
    }
    if ((int64_t)n > e->n_ctx) {
        free(ids);
        return rf_set_error(RF_ERR_RANGE, "the prompt has %zu tokens but the context holds %d", n, e->n_ctx);
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv) {
            int32_t bad = ids[i];
            free(ids);
            return rf_set_error(RF_ERR_RANGE, "token id %d at index %zu is outside the vocabulary [0, %d)", bad, i, nv);
        }
    if (r->sp.repeat_penalty <= 0 || isnan(r->sp.repeat_penalty)) {
        free(ids);
        return rf_set_error(RF_ERR_INVALID_ARG, "repeat_penalty must be > 0");
    }
    rf_req *q = calloc(1, sizeof *q);
    if (!q) {
        free(ids);
        return rf_set_error(RF_ERR_OOM, "submit: out of memory");
    }
    q->prompt = ids;
    q->n_prompt = (int32_t)n;
    q->sp = r->sp;
    q->max_tokens = r->max_tokens;
    q->n = r->n;
    q->logprobs = r->logprobs;
    q->ignore_eos = r->ignore_eos;
    q->render_special = r->render_special;
    q->cb = r->cb;
    q->user = r->user;
    q->listed = true;
    for (int i = 0; i < r->n_stop; i++) {
        q->stops[i] = malloc(r->stop_len[i]);
        if (!q->stops[i]) {
            req_free(q);
            return rf_set_error(RF_ERR_OOM, "submit: out of memory");
        }
        memcpy(q->stops[i], r->stops[i], r->stop_len[i]);
        q->stop_len[i] = r->stop_len[i];
        q->n_stop = i + 1;
    }
    pthread_mutex_lock(&e->mu);
    q->id = e->next_id++;
    *e->incoming_tail = q;
    e->incoming_tail = &q->next;
    e->n_active_reqs++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (id) *id = q->id;
    return RF_OK;
}

rf_status rf_engine_cancel(rf_engine *e, uint64_t id) {
    if (!e) return rf_set_error(RF_ERR_INVALID_ARG, "cancel: engine is NULL");
    rf_status st = RF_OK;
    pthread_mutex_lock(&e->mu);
    rf_req *r = e->incoming;
    while (r && r->id != id) r = r->next;
    if (!r) {
        r = e->active;
        while (r && r->id != id) r = r->next;
    }
    if (r) r->cancel = 1;
    else st = rf_set_error(RF_ERR_NOT_FOUND, "no active request %llu", (unsigned long long)id);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- sequences -------------------------------------------------------------------------- */

rf_seq *rf_seq_new(rf_engine *e) {
    rf_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->blocks_cap = e->max_blocks + 1;
    s->blocks = malloc((size_t)s->blocks_cap * sizeof(int32_t));
    s->hashes = malloc((size_t)s->blocks_cap * sizeof(uint64_t));
    if (!s->blocks || !s->hashes) {
        rf_seq_free(s);
        return NULL;
    }
    return s;
}

rf_status rf_seq_append(rf_seq *s, const int32_t *ids, int32_t n) {
    if (s->n_tokens + n > s->tokens_cap) {
        int32_t cap = s->tokens_cap ? s->tokens_cap : 64;
        while (cap < s->n_tokens + n) cap *= 2;
        int32_t *t = realloc(s->tokens, (size_t)cap * sizeof(int32_t));
        if (!t) return rf_set_error(RF_ERR_OOM, "sequence: out of memory");
        s->tokens = t;
        s->tokens_cap = cap;
    }
    memcpy(s->tokens + s->n_tokens, ids, (size_t)n * sizeof(int32_t));
    s->n_tokens += n;
    return RF_OK;
}

/* Sets a sequence up to generate for request q as choice `choice`. */
static rf_status seq_setup_gen(rf_engine *e, rf_seq *s, rf_req *q, int32_t choice) {
    s->req = q;
    s->choice = choice;
    s->gen = true;
    rf_sampler_params sp = q->sp;
    sp.seed += (uint64_t)choice;
    rf_status st = rf_sampler_new(&sp, e->m->hp.n_vocab, &s->smp);
    if (st) return st;
    return rf_textout_init(&s->out, e->m->vocab, q->render_special, q->stops, q->stop_len, q->n_stop);
}

static void ensure_cap(void ***arr, int32_t *cap, int32_t need) {
    if (need <= *cap) return;
    int32_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void **a = realloc(*arr, (size_t)c * sizeof(void *));
    if (!a) return; /* the caller checks the capacity again */
    *arr = a;
    *cap = c;
}

/* Inserts s into a list kept in arrival order. false when out of memory. */
static bool list_insert(rf_seq ***list, int32_t *n, int32_t *cap, rf_seq *s) {
    ensure_cap((void ***)list, cap, *n + 1);
    if (*n + 1 > *cap) return false;
    int32_t i = *n;
    while (i > 0 && (*list)[i - 1]->order > s->order) {
        (*list)[i] = (*list)[i - 1];
        i--;
    }
    (*list)[i] = s;
    (*n)++;
    return true;
}

bool rf_engine_queue_waiting(rf_engine *e, rf_seq *s) {
    s->state = RF_SEQ_WAITING;
    return list_insert(&e->waiting, &e->n_waiting, &e->waiting_cap, s);
}

bool rf_engine_queue_running(rf_engine *e, rf_seq *s) {
    s->state = RF_SEQ_RUNNING;
    return list_insert(&e->running, &e->n_running, &e->running_cap, s);
}

static rf_event done_event(const rf_req *q, int32_t choice, int32_t n_prompt, int32_t n_cached, int32_t n_gen,
                           rf_finish_reason why, const char *error) {
    rf_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = RF_EVENT_DONE;
    ev.req = q->id;
    ev.choice = choice;
    ev.token = -1;
    ev.n_prompt = n_prompt;
    ev.n_cached = n_cached;
    ev.n_gen = n_gen;
    ev.text = "";
    ev.logprob = NAN;
    ev.finish = why;
    ev.error = error ? error : "";
    return ev;
}

static bool emit(rf_req *q, rf_event *ev) {
    if (!q->cb) return true;
    bool go = q->cb(ev, q->user);
    if (!go) q->cancel = 1;
    return go;
}

/* Moves what was submitted into the waiting queue (one sequence per request; its other
 * choices are forked after the prompt). Called by the step thread. */
void rf_engine_intake(rf_engine *e) {
    pthread_mutex_lock(&e->mu);
    rf_req *in = e->incoming;
    /* they leave the incoming list now: count them as waiting until the snapshot below, so the
     * stats never show a submitted request as neither waiting nor running */
    for (rf_req *r = in; r; r = r->next) e->snap_waiting++;
    e->incoming = NULL;
    e->incoming_tail = &e->incoming;
    pthread_mutex_unlock(&e->mu);
    while (in) {
        rf_req *q = in;
        in = in->next;
        q->next = NULL;
        rf_seq *s = rf_seq_new(e);
        rf_status st = s ? rf_seq_append(s, q->prompt, q->n_prompt) : RF_ERR_OOM;
        if (!st && s) st = seq_setup_gen(e, s, q, 0);
        pthread_mutex_lock(&e->mu);
        q->next = e->active;
        e->active = q;
        pthread_mutex_unlock(&e->mu);
        if (st || !s) {
            if (s) rf_seq_free(s);
            rf_event ev = done_event(q, 0, q->n_prompt, 0, 0, RF_FINISH_ERROR,
                                     "out of memory while queueing the request");
            if (q->cb) q->cb(&ev, q->user);
            q->n = 0;
            rf_engine_release_req(e, q);
            continue;
        }
        s->n_prompt = q->n_prompt;
        s->order = e->next_order++;
        s->fork_left = q->n - 1;
        s->t_start = rf_now_ms();
        q->n_seqs++;
        for (uint32_t i = 0; i < (uint32_t)q->n_prompt; i++) rf_sampler_accept(s->smp, q->prompt[i]);
        if (!rf_engine_queue_waiting(e, s)) {
            rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "out of memory while queueing the request");
            rf_seq_free(s);
            if (--q->n_seqs == 0) rf_engine_release_req(e, q);
        }
    }
    rf_engine_snapshot(e);
}

/* Drops a request whose choices are all done from the active list and frees it. */
void rf_engine_release_req(rf_engine *e, rf_req *q) {
    if (!q->listed) return;
    pthread_mutex_lock(&e->mu);
    rf_req **p = &e->active;
    while (*p && *p != q) p = &(*p)->next;
    if (*p) *p = q->next;
    e->n_active_reqs--;
    e->st_done++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    req_free(q);
}

void rf_engine_finish_seq(rf_engine *e, rf_seq *s, rf_finish_reason why, const char *error) {
    rf_req *q = s->req;
    const char *txt = "";
    size_t len = 0;
    if (s->gen && why != RF_FINISH_STOP && why != RF_FINISH_CANCELLED && why != RF_FINISH_ERROR) {
        bool hit = false;
        if (rf_textout_finish(&s->out, &txt, &len, &hit) == RF_OK) {
            if (hit) why = RF_FINISH_STOP;
        } else {
            txt = "";
            len = 0;
        }
    }
    s->finish = why;
    if (s->persistent) {
        s->state = RF_SEQ_IDLE;
    } else {
        s->state = RF_SEQ_DONE;
        rf_seq_release_blocks(e, s);
    }
    if (!q) return;
    rf_event ev = done_event(q, s->choice, s->n_prompt, s->n_cached, s->n_gen, why, error);
    ev.text = txt;
    ev.len = len;
    emit(q, &ev);
    q->n_done++;
    /* choices never forked (cancelled or failed before the prompt finished) end with it */
    for (int32_t c = 1; c <= s->fork_left; c++) {
        rf_event ec = ev;
        ec.choice = s->choice + c;
        ec.n_gen = 0;
        ec.text = "";
        ec.len = 0;
        emit(q, &ec);
    }
    s->fork_left = 0;
    /* the sequences are freed by the scheduler's retire pass; the request once all are done */
}

/* Forks the other choices of s's request off s after its prompt: they share every block
 * (reference counts), so the prompt is computed and stored once; the first write into the
 * shared partial block copies it. */
static void fork_choices(rf_engine *e, rf_seq *s, const float *logits) {
    rf_req *q = s->req;
    while (s->fork_left > 0) {
        int32_t choice = q->n - s->fork_left;
        s->fork_left--;
        rf_seq *c = rf_seq_new(e);
        rf_status st = c ? rf_seq_append(c, s->tokens, s->n_tokens) : RF_ERR_OOM;
        if (!st) st = seq_setup_gen(e, c, q, choice);
        if (st) {
            rf_event ev = done_event(q, choice, s->n_prompt, s->n_cached, 0, RF_FINISH_ERROR,
                                     "out of memory while forking a choice");
            emit(q, &ev);
            q->n_done++;
            rf_seq_free(c);
            continue;
        }
        c->n_prompt = s->n_prompt;
        c->n_computed = s->n_computed;
        c->n_cached = s->n_cached;
        c->t_start = s->t_start;
        memcpy(c->blocks, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
        memcpy(c->hashes, s->hashes, (size_t)s->n_hashed * sizeof(uint64_t));
        c->n_blocks = s->n_blocks;
        c->n_hashed = s->n_hashed;
        c->lookup_done = true;
        for (int32_t i = 0; i < c->n_blocks; i++) rf_kv_pool_ref(e->pool, c->blocks[i]);
        for (int32_t i = 0; i < s->n_prompt; i++) rf_sampler_accept(c->smp, s->tokens[i]);
        c->order = s->order; /* same arrival: preempted together with its siblings' rank */
        q->n_seqs++;
        if (!rf_engine_queue_running(e, c)) {
            rf_engine_finish_seq(e, c, RF_FINISH_ERROR, "out of memory while forking a choice");
            rf_seq_free(c);
            q->n_seqs--;
            continue;
        }
        rf_engine_on_output(e, c, logits); /* its first token, from the same logits */
    }
}

/* Log-probabilities (log-softmax of the raw logits) of the chosen token and the k most likely
 * ones, highest first, ties by lower id. */
static void fill_logprobs(rf_engine *e, const rf_req *q, const float *logits, int32_t id, rf_event *ev) {
    int32_t nv = e->m->hp.n_vocab, k = q->logprobs, n = 0;
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < nv; i++)
        if (logits[i] > mx) mx = logits[i];
    for (int32_t i = 0; i < nv; i++)
        if (!isnan(logits[i])) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    ev->logprob = (float)(logits[id] - lse);
    float raw[RF_MAX_TOP_LOGPROBS];
    for (int32_t i = 0; i < nv && k > 0; i++) {
        float v = logits[i];
        int32_t j;
        if (isnan(v)) continue;
        if (n < k) j = n++;
        else if (v > raw[k - 1]) j = k - 1;
        else continue;
        while (j > 0 && raw[j - 1] < v) {
            raw[j] = raw[j - 1];
            ev->top_id[j] = ev->top_id[j - 1];
            j--;
        }
        raw[j] = v;
        ev->top_id[j] = i;
    }
    for (int32_t j = 0; j < n; j++) ev->top_lp[j] = (float)(raw[j] - lse);
    ev->n_top = n;
}

bool rf_engine_pre_sample(rf_engine *e, rf_seq *s) {
    rf_req *q = s->req;
    if (q->max_tokens >= 0 && s->n_gen >= q->max_tokens) {
        rf_engine_finish_seq(e, s, RF_FINISH_LENGTH, NULL);
        return true;
    }
    return false;
}

rf_status rf_engine_on_output(rf_engine *e, rf_seq *s, const float *logits) {
    if (s->fork_left > 0) fork_choices(e, s, logits);
    if (rf_engine_pre_sample(e, s)) return RF_OK;
    if (e->logits_hook) e->logits_hook(e->hook_user, s, logits);
    rf_engine_on_token(e, s, rf_sampler_sample(s->smp, logits), logits);
    return RF_OK;
}

void rf_engine_on_token(rf_engine *e, rf_seq *s, int32_t id, const float *logits) {
    rf_req *q = s->req;
    if (id < 0) {
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "every logit is NaN");
        return;
    }
    if (s->t_first == 0) s->t_first = rf_now_ms();
    rf_status st = rf_seq_append(s, &id, 1);
    if (st) {
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, "out of memory");
        return;
    }
    s->n_gen++;
    e->st_gen++;
    rf_sampler_accept(s->smp, id);
    if (!q->ignore_eos && rf_vocab_is_eog(e->m->vocab, id)) {
        rf_engine_finish_seq(e, s, RF_FINISH_EOS, NULL);
        return;
    }
    rf_event ev = done_event(q, s->choice, s->n_prompt, s->n_cached, s->n_gen, RF_FINISH_NONE, NULL);
    ev.kind = RF_EVENT_TOKEN;
    ev.token = id;
    if (q->logprobs >= 0 && logits) fill_logprobs(e, q, logits, id, &ev);
    bool hit = false;
    if ((st = rf_textout_push(&s->out, id, &ev.text, &ev.len, &hit))) {
        rf_engine_finish_seq(e, s, RF_FINISH_ERROR, rf_last_error());
        return;
    }
    bool go = emit(q, &ev);
    if (hit) rf_engine_finish_seq(e, s, RF_FINISH_STOP, NULL);
    else if (!go) rf_engine_finish_seq(e, s, RF_FINISH_CANCELLED, NULL);
    else if (s->n_tokens - 1 >= e->n_ctx) rf_engine_finish_seq(e, s, RF_FINISH_CONTEXT, NULL);
    else if (q->max_tokens >= 0 && s->n_gen >= q->max_tokens) rf_engine_finish_seq(e, s, RF_FINISH_LENGTH, NULL);
}

/* ---- state ------------------------------------------------------------------------------ */

void rf_engine_snapshot(rf_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->snap_running = e->n_running;
    e->snap_waiting = e->n_waiting;
    e->snap_used = rf_kv_pool_n_used(e->pool);
    e->snap_free = rf_kv_pool_n_free(e->pool);
    e->snap_cached = rf_kv_pool_n_cached(e->pool);
    pthread_mutex_unlock(&e->mu);
}

int64_t rf_engine_get_stat(rf_engine *e, rf_engine_stat s) {
    if (!e) return -1;
    int64_t v;
    pthread_mutex_lock(&e->mu);
    switch (s) {
    case RF_STAT_RUNNING: v = e->snap_running; break;
    case RF_STAT_WAITING: {
        v = e->snap_waiting;
        for (rf_req *r = e->incoming; r; r = r->next) v++;
        break;
    }
    case RF_STAT_BLOCKS_TOTAL: v = rf_kv_pool_n_blocks(e->pool); break;
    case RF_STAT_BLOCKS_USED: v = e->snap_used; break;
    case RF_STAT_BLOCKS_FREE: v = e->snap_free; break;
    case RF_STAT_BLOCKS_CACHED: v = e->snap_cached; break;
    case RF_STAT_BLOCK_SIZE: v = e->block_size; break;
    case RF_STAT_CTX: v = e->n_ctx; break;
    case RF_STAT_PARALLEL: v = e->n_parallel; break;
    case RF_STAT_BATCH: v = e->n_batch; break;
    case RF_STAT_PROMPT_TOKENS: v = e->st_prompt; break;
    case RF_STAT_PREFIX_HIT_TOKENS: v = e->st_hits; break;
    case RF_STAT_GEN_TOKENS: v = e->st_gen; break;
    case RF_STAT_PREEMPTIONS: v = e->st_preempt; break;
    case RF_STAT_STEPS: v = e->st_steps; break;
    case RF_STAT_REQUESTS_DONE: v = e->st_done; break;
    default: v = -1;
    }
    pthread_mutex_unlock(&e->mu);
    return v;
}

bool rf_engine_wait(rf_engine *e, int timeout_ms) {
    pthread_mutex_lock(&e->mu);
    if (timeout_ms < 0) {
        while (!e->n_active_reqs && !e->wake) pthread_cond_wait(&e->cv, &e->mu);
    } else if (!e->n_active_reqs && !e->wake) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!e->n_active_reqs && !e->wake)
            if (pthread_cond_timedwait(&e->cv, &e->mu, &ts)) break;
    }
    bool work = e->n_active_reqs > 0;
    e->wake = false;
    pthread_mutex_unlock(&e->mu);
    return work;
}

void rf_engine_wake(rf_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->wake = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

rf_status rf_engine_run(rf_engine *e) {
    for (;;) {
        pthread_mutex_lock(&e->mu);
        bool more = e->n_active_reqs > 0;
        pthread_mutex_unlock(&e->mu);
        if (!more) return RF_OK;
        rf_status st = rf_engine_step(e);
        if (st) return st;
    }
}

rf_status rf_engine_step(rf_engine *e) {
    if (!e) return rf_set_error(RF_ERR_INVALID_ARG, "step: engine is NULL");
    return rf_sched_step(e, NULL);
}

static rf_status check_seq(rf_engine *e, const rf_seq *s, int32_t *refs, uint32_t *stamp, uint32_t mark) {
    int32_t B = e->block_size, nb = rf_kv_pool_n_blocks(e->pool);
    if (s->n_computed < 0 || s->n_computed > s->n_tokens || s->n_tokens > e->n_ctx + 1)
        return rf_set_error(RF_ERR_INTERNAL, "sequence %llu/%d: %d computed of %d tokens (context %d)",
                            (unsigned long long)(s->req ? s->req->id : 0), s->choice, s->n_computed, s->n_tokens, e->n_ctx);
    if (s->state == RF_SEQ_WAITING && s->n_blocks)
        return rf_set_error(RF_ERR_INTERNAL, "a waiting sequence holds %d blocks", s->n_blocks);
    if (s->n_blocks * B < s->n_computed || s->n_blocks > e->max_blocks || s->n_hashed > s->n_blocks)
        return rf_set_error(RF_ERR_INTERNAL, "sequence holds %d blocks (%d hashed) for %d computed positions",
                            s->n_blocks, s->n_hashed, s->n_computed);
    for (int32_t i = 0; i < s->n_blocks; i++) {
        int32_t b = s->blocks[i];
        if (b < 0 || b >= nb) return rf_set_error(RF_ERR_INTERNAL, "block id %d outside the pool", b);
        if (stamp[b] == mark) return rf_set_error(RF_ERR_INTERNAL, "block %d appears twice in one block table", b);
        stamp[b] = mark;
        refs[b]++;
    }
    return RF_OK;
}

rf_status rf_engine_check(rf_engine *e) {
    int32_t nb = rf_kv_pool_n_blocks(e->pool);
    int32_t *refs = calloc((size_t)nb, sizeof(int32_t));
    uint32_t *stamp = calloc((size_t)nb, sizeof(uint32_t));
    rf_status st = refs && stamp ? RF_OK : rf_set_error(RF_ERR_OOM, "check: out of memory");
    uint32_t mark = 0;
    for (int32_t i = 0; i < e->n_running && !st; i++) {
        if (e->running[i]->state != RF_SEQ_RUNNING)
            st = rf_set_error(RF_ERR_INTERNAL, "a sequence in the running list is in state %d", e->running[i]->state);
        else
            st = check_seq(e, e->running[i], refs, stamp, ++mark);
    }
    for (int32_t i = 0; i < e->n_waiting && !st; i++) st = check_seq(e, e->waiting[i], refs, stamp, ++mark);
    for (int32_t i = 1; i < e->n_running && !st; i++)
        if (e->running[i - 1]->order > e->running[i]->order) st = rf_set_error(RF_ERR_INTERNAL, "running list out of order");
    for (int32_t i = 1; i < e->n_waiting && !st; i++)
        if (e->waiting[i - 1]->order > e->waiting[i]->order) st = rf_set_error(RF_ERR_INTERNAL, "waiting list out of order");
    if (!st) st = rf_kv_pool_check(e->pool, refs);
    free(refs);
    free(stamp);
    return st;
}

/* ---- events ----------------------------------------------------------------------------- */

rf_event_kind rf_event_get_kind(const rf_event *ev) { return ev->kind; }
uint64_t rf_event_request(const rf_event *ev) { return ev->req; }
int32_t rf_event_choice(const rf_event *ev) { return ev->choice; }
const char *rf_event_text(const rf_event *ev, size_t *len) {
    if (len) *len = ev->len;
    return ev->text ? ev->text : "";
}
int32_t rf_event_token(const rf_event *ev) { return ev->token; }
float rf_event_logprob(const rf_event *ev) { return ev->logprob; }
int32_t rf_event_n_top(const rf_event *ev) { return ev->n_top; }
bool rf_event_top(const rf_event *ev, int32_t i, int32_t *id, float *logprob) {
    if (i < 0 || i >= ev->n_top) return false;
    if (id) *id = ev->top_id[i];
    if (logprob) *logprob = ev->top_lp[i];
    return true;
}
rf_finish_reason rf_event_finish(const rf_event *ev) { return ev->finish; }
int32_t rf_event_n_prompt(const rf_event *ev) { return ev->n_prompt; }
int32_t rf_event_n_cached(const rf_event *ev) { return ev->n_cached; }
int32_t rf_event_n_gen(const rf_event *ev) { return ev->n_gen; }
const char *rf_event_error(const rf_event *ev) { return ev->error ? ev->error : ""; }
