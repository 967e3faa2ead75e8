/* engine_create.c — an engine's configuration (rf_engine_config_*), its memory plan (context,
 * KV pool and step buffers against the memory there is) and its construction and teardown. */
#include <stdlib.h>
#include <unistd.h>

#include "core/knobs.h"
#include "engine/engine_internal.h"
#include "rocmforge/quant.h"

rf_engine_config rf_engine_config_default(void) {
    return (rf_engine_config){.n_ctx = 0, .n_parallel = 4, .n_batch = 0, .n_blocks = 0, .block_size = 16,
                              .kv_type = RF_TYPE_F16, .prefix_cache = true, .n_threads = 0};
}

rf_engine_config *rf_engine_config_new(void) {
    rf_engine_config *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = rf_engine_config_default();
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
    switch (opt) {
    case RF_ENGINE_CTX: c->n_ctx = (int32_t)v; break;
    case RF_ENGINE_PARALLEL: c->n_parallel = (int32_t)v; break;
    case RF_ENGINE_BATCH: c->n_batch = (int32_t)v; break;
    case RF_ENGINE_KV_BLOCKS: c->n_blocks = (int32_t)v; break;
    case RF_ENGINE_BLOCK_SIZE: c->block_size = (int32_t)v; break;
    case RF_ENGINE_KV_TYPE: c->kv_type = (rf_type)v; break;
    case RF_ENGINE_PREFIX_CACHE: c->prefix_cache = v != 0; break;
    case RF_ENGINE_THREADS: c->n_threads = (int32_t)v; break;
    }
    return RF_OK;
}

static uint64_t avail_memory(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0) return (uint64_t)8 << 30;
    return (uint64_t)pages * (uint64_t)psz;
}

rf_status rf_engine_create(rf_model *m, const rf_engine_config *c, rf_engine **out) {
    *out = NULL;
    /* the plan below settles ctx, batch and blocks from what was asked */
    int32_t n_ctx = c->n_ctx, n_parallel = c->n_parallel, n_batch = c->n_batch, n_blocks = c->n_blocks;
    int32_t block_size = c->block_size, n_threads = c->n_threads;
    rf_type kv_type = c->kv_type;
    bool prefix_cache = c->prefix_cache;
    if (!m) return rf_set_error(RF_ERR_INVALID_ARG, "engine: model is NULL");
    /* a hybrid model's prefix cache resumes from state checkpoints (engine_state.c): their
     * memory is planned here, beside the slots; none, no prefix cache */
    int32_t n_ckpt = 0;
    if (rf_model_n_recurrent(m) > 0 && prefix_cache && n_parallel > 0) {
        int64_t k = rf_knob_int(RF_KNOB_STATE_CHECKPOINTS);
        n_ckpt = k < 0 ? 2 * n_parallel : (int32_t)k;
        if (n_ckpt == 0) prefix_cache = false;
    }
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
    /* the step's capacity: 0 = 512 tokens, and twice the sequences past 256, so that prompt chunks
     * still find room in a step in which every running sequence decodes (the step budget rule,
     * rf_sched_prompt_room); a smaller explicit one is kept, with a warning when it leaves none */
    if (n_batch == 0) n_batch = n_parallel > 256 ? 2 * n_parallel : 512;
    else if (n_batch <= n_parallel)
        rf_log(RF_LOG_WARN, "engine: a step of %d tokens with %d sequences leaves no room for prompt tokens while all "
               "decode (new requests wait for one to finish): raise --batch above %d", n_batch, n_parallel, n_parallel);
    /* the memory plan: what the step's buffers take comes off the budget before the pool */
    uint64_t budget = avail_memory() / 2, buffers = 0, dev_free = 0;
    if (on_dev) {
        size_t fr = 0, tot = 0;
        if ((st = rf_model_gpu_mem(m, &fr, &tot))) return st; /* the fullest GPU of a split */
        dev_free = fr;
        buffers = rf_fwd_buffer_bytes(m, n_batch, n_parallel) + (uint64_t)n_ckpt * rf_state_slot_bytes(m);
        uint64_t margin = 256u << 20;
        budget = fr > buffers + margin ? fr - buffers - margin : 0;
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
    e->s_none = calloc((size_t)n_batch, sizeof(bool));
    e->s_mask_seq = malloc((size_t)n_batch * sizeof(rf_seq *));
    e->s_mask_row = malloc((size_t)n_batch * sizeof(int32_t));
    e->s_mask_words = (int32_t)((nv + 31) / 32);
    e->lp_work = malloc((size_t)nv * sizeof(float));
    if (!e->b_ids || !e->b_pos || !e->b_seq || !e->b_slot || !e->b_out || !e->b_seqs || !e->lp_work || !e->s_rows ||
        !e->s_ids || !e->s_none || !e->s_mask_seq || !e->s_mask_row) {
        rf_engine_free(e);
        return rf_set_error(RF_ERR_OOM, "engine: out of memory");
    }
    e->n_ckpt = n_ckpt;
    if ((st = rf_kv_pool_new(n_blocks, block_size, prefix_cache, &e->pool))) {
        rf_engine_free(e);
        return st;
    }
    if ((st = rf_fwd_init(m, &e->f, n_blocks, block_size, n_batch, kv_type, on_dev ? lrows : 1)) ||
        (st = rf_engine_state_init(e))) {
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
    rf_engine_config def = rf_engine_config_default();
    return rf_engine_create(m, c ? c : &def, out);
}

void rf_engine_free(rf_engine *e) {
    if (!e) return;
    for (int32_t i = 0; i < e->running.n; i++)
        if (!e->running.v[i]->persistent) rf_seq_free(e->running.v[i]);
    for (int32_t i = 0; i < e->waiting.n; i++) rf_seq_free(e->waiting.v[i]);
    for (rf_req *r = e->active, *n; r; r = n) {
        n = r->next;
        rf_engine_req_free(r);
    }
    for (rf_req *r = e->incoming, *n; r; r = n) {
        n = r->next;
        rf_engine_req_free(r);
    }
    if (e->m) rf_fwd_free(e->m, &e->f);
    rf_kv_pool_free(e->pool);
    rf_engine_state_free(e);
    rf_seq_list_free(&e->running);
    rf_seq_list_free(&e->waiting);
    rf_step_plan_free(&e->plan);
    free(e->b_ids);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_slot);
    free(e->b_out);
    free(e->b_seqs);
    free(e->s_rows);
    free(e->s_ids);
    free(e->s_none);
    free(e->s_mask_seq);
    free(e->s_mask_row);
    free(e->pen_ids);
    free(e->pen_counts);
    free(e->b_table);
    free(e->logits);
    free(e->hid);
    free(e->lp_work);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

