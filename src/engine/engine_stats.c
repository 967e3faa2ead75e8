/* engine_stats.c — the engine's state seen from outside: the counters' snapshot after each step,
 * rf_engine_get_stat, the clock, and the bookkeeping check the tests run (rf_engine_check). */
#include <stdlib.h>
#include <time.h>

#include "engine/engine_internal.h"

double rf_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void rf_engine_snapshot(rf_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->snap_running = e->running.n;
    e->snap_waiting = e->waiting.n;
    e->snap_used = rf_kv_pool_n_used(e->pool);
    e->snap_free = rf_kv_pool_n_free(e->pool);
    e->snap_cached = rf_kv_pool_n_cached(e->pool);
    e->snap_slots_used = rf_state_pool_n_slots(e->spool) - rf_state_pool_n_free(e->spool);
    e->snap_ckpt_used = rf_state_pool_n_ckpt_used(e->spool);
    pthread_mutex_unlock(&e->mu);
}

/* The bytes of one rank's KV pool: a split over GPUs (or CPU ranks) has one per rank, each of its
 * shard's KV heads (one GPU: every shard's), which is what rf_kv_bytes_per_pos counts; the pool's
 * size is fixed when the engine is made. -1 (rf_last_error says why) if the model's K/V row size
 * cannot be worked out. */
static int64_t kv_pool_bytes(const rf_engine *e) {
    uint64_t per_pos = 0;
    if (rf_kv_bytes_per_pos(e->m, e->kv_type, &per_pos)) return -1;
    return (int64_t)(per_pos * (uint64_t)e->block_size * (uint64_t)rf_kv_pool_n_blocks(e->pool));
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
    case RF_STAT_STATE_SLOTS: v = rf_state_pool_n_slots(e->spool); break;
    case RF_STAT_STATE_SLOTS_USED: v = e->snap_slots_used; break;
    case RF_STAT_STATE_CKPT_TOTAL: v = rf_state_pool_n_ckpt(e->spool); break;
    case RF_STAT_STATE_CKPT_USED: v = e->snap_ckpt_used; break;
    case RF_STAT_STATE_CKPT_HITS: v = e->st_ckpt_hits; break;
    case RF_STAT_STATE_BYTES:
        v = e->spool ? (int64_t)(rf_state_pool_n_slots(e->spool) + rf_state_pool_n_ckpt(e->spool)) *
                           (int64_t)rf_state_slot_bytes(e->m)
                     : 0;
        break;
    case RF_STAT_KV_BYTES: {
        /* a split over GPUs (or CPU ranks) has a pool per rank: every rank's together here */
        const int64_t ranks = e->m->tp_be ? e->m->tp : 1, one = kv_pool_bytes(e);
        v = one < 0 ? -1 : one * ranks;
        break;
    }
    case RF_STAT_TP_SIZE: v = e->m->tp > 1 ? e->m->tp : 1; break;
    default: v = -1;
    }
    pthread_mutex_unlock(&e->mu);
    return v;
}

int32_t rf_engine_n_devices(rf_engine *e) { return e ? rf_model_n_gpus(e->m) : 0; }

int64_t rf_engine_get_device_stat(rf_engine *e, int32_t i, rf_engine_device_stat s) {
    if (!e || i < 0 || i >= rf_model_n_gpus(e->m)) {
        rf_set_error(RF_ERR_RANGE, "GPU %d of the engine: it runs on %d GPU(s)", i, rf_engine_n_devices(e));
        return -1;
    }
    if (s == RF_DEVSTAT_KV_BYTES) return kv_pool_bytes(e); /* each GPU holds one pool */
    if (s != RF_DEVSTAT_ORDINAL && s != RF_DEVSTAT_MEM_TOTAL && s != RF_DEVSTAT_MEM_FREE) {
        rf_set_error(RF_ERR_RANGE, "unknown device stat %d", (int)s);
        return -1;
    }
    /* no engine lock: the driver's answer may take a while, and nothing of the engine is read */
    rf_backend_info bi;
    const rf_status st = rf_model_gpu_info(e->m, i, s != RF_DEVSTAT_ORDINAL, &bi);
    if (s == RF_DEVSTAT_ORDINAL) return bi.device; /* filled before the memory is asked */
    if (st) return -1;
    return (int64_t)(s == RF_DEVSTAT_MEM_TOTAL ? bi.mem_total : bi.mem_free);
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
    for (int32_t i = 0; i < e->running.n && !st; i++) {
        if (e->running.v[i]->state != RF_SEQ_RUNNING)
            st = rf_set_error(RF_ERR_INTERNAL, "a sequence in the running list is in state %d", e->running.v[i]->state);
        else
            st = check_seq(e, e->running.v[i], refs, stamp, ++mark);
    }
    for (int32_t i = 0; i < e->waiting.n && !st; i++) st = check_seq(e, e->waiting.v[i], refs, stamp, ++mark);
    for (int32_t i = 1; i < e->running.n && !st; i++)
        if (e->running.v[i - 1]->order > e->running.v[i]->order) st = rf_set_error(RF_ERR_INTERNAL, "running list out of order");
    for (int32_t i = 1; i < e->waiting.n && !st; i++)
        if (e->waiting.v[i - 1]->order > e->waiting.v[i]->order) st = rf_set_error(RF_ERR_INTERNAL, "waiting list out of order");
    if (!st) st = rf_kv_pool_check(e->pool, refs);
    if (!st) st = rf_engine_state_check(e);
    free(refs);
    free(stamp);
    return st;
}

