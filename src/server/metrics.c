/* metrics.c — Prometheus text exposition (version 0.0.4) of the server's state. */
#define _GNU_SOURCE
#include <stddef.h>
#include <string.h>

#include "metrics.h"

static void hist_init(srv_hist *h, const double *le, int nb) {
    memset(h, 0, sizeof *h);
    h->nb = nb;
    memcpy(h->le, le, (size_t)nb * sizeof *le);
}

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    static const double ttft[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
    static const double itl[] = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5};
    static const double e2e[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
    hist_init(&m->ttft, ttft, sizeof ttft / sizeof *ttft);
    hist_init(&m->itl, itl, sizeof itl / sizeof *itl);
    hist_init(&m->e2e, e2e, sizeof e2e / sizeof *e2e);
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void srv_metrics_http(srv_metrics *m, srv_route r, int status) {
    if ((unsigned)r >= SRV_ROUTE_COUNT || status < 0 || status >= 600) return;
    pthread_mutex_lock(&m->mu);
    m->http[r][status]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_observe(srv_metrics *m, srv_hist *h, double v) {
    if (!(v >= 0)) v = 0;
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < h->nb && v > h->le[i]) i++;
    h->bucket[i]++;
    h->sum += v;
    h->count++;
    pthread_mutex_unlock(&m->mu);
}

static void render_hist(srv_buf *b, const char *name, const char *help, const srv_hist *h) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->nb; i++) {
        cum += h->bucket[i];
        srv_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    cum += h->bucket[h->nb];
    srv_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name,
                   h->sum, name, (unsigned long long)h->count);
}

static void one(srv_buf *b, const char *name, const char *type, const char *help, long long v) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type, name, v);
}

/* A gauge with a sample per GPU, labelled by the GPU's ordinal; the field at byte offset off of
 * srv_gpu_gauges; GPUs whose memory was not read are left out of the memory gauges. */
static void per_gpu(srv_buf *b, const char *name, const char *help, const srv_gauges *g, size_t off, bool mem) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (int i = 0; i < g->n_gpu; i++) {
        const srv_gpu_gauges *d = &g->gpu[i];
        if (mem && d->mem_total < 0) continue;
        srv_buf_printf(b, "%s{gpu=\"%lld\"} %lld\n", name, (long long)d->device,
                       (long long)*(const int64_t *)((const char *)d + off));
    }
}

void srv_metrics_render(srv_metrics *m, const srv_gauges *g, srv_buf *b) {
    pthread_mutex_lock(&m->mu);
    srv_buf_printf(b, "# HELP rocmforge_http_requests_total HTTP responses by route and status code.\n"
                      "# TYPE rocmforge_http_requests_total counter\n");
    for (int r = 0; r < SRV_ROUTE_COUNT; r++)
        for (int s = 0; s < 600; s++)
            if (m->http[r][s])
                srv_buf_printf(b, "rocmforge_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                               srv_route_name((srv_route)r), s, (unsigned long long)m->http[r][s]);
    srv_buf_printf(b, "# HELP rocmforge_choices_finished_total Choices finished, by reason.\n"
                      "# TYPE rocmforge_choices_finished_total counter\n");
    static const char *reasons[] = {"none", "eos", "length", "stop", "context", "cancelled", "error"};
    for (int i = 1; i < 7; i++)
        srv_buf_printf(b, "rocmforge_choices_finished_total{reason=\"%s\"} %llu\n", reasons[i], (unsigned long long)m->finish[i]);
    one(b, "rocmforge_prompt_tokens_total", "counter", "Prompt tokens of finished requests (prefix-cache hits included).",
        (long long)m->prompt_tokens);
    one(b, "rocmforge_generation_tokens_total", "counter", "Tokens generated for finished requests.",
        (long long)m->completion_tokens);
    one(b, "rocmforge_client_disconnects_total", "counter", "Requests cancelled because the client went away.",
        (long long)m->disconnects);
    one(b, "rocmforge_queue_full_total", "counter", "Requests refused (503) because the queue was full.",
        (long long)m->queue_full);
    render_hist(b, "rocmforge_time_to_first_token_seconds", "Time from a request's arrival to its first generated token.",
                &m->ttft);
    render_hist(b, "rocmforge_inter_token_latency_seconds", "Time between consecutive generated tokens of a choice.",
                &m->itl);
    render_hist(b, "rocmforge_request_duration_seconds", "Time from a request's arrival to the end of its last choice.",
                &m->e2e);
    pthread_mutex_unlock(&m->mu);

    one(b, "rocmforge_model_loaded", "gauge", "1 once the model is loaded and the engine runs.", g->loaded);
    one(b, "rocmforge_requests_active", "gauge", "Engine requests queued or running (server view).", g->active_requests);
    one(b, "rocmforge_max_queue", "gauge", "Requests that may wait beyond the running ones before a 503.", g->max_queue);
    if (!g->loaded) return;
    one(b, "rocmforge_sequences_running", "gauge", "Sequences running (prompt or generation).", g->running);
    one(b, "rocmforge_sequences_waiting", "gauge", "Sequences queued (preempted ones included).", g->waiting);
    one(b, "rocmforge_kv_blocks_total", "gauge", "Blocks in the KV pool.", g->blocks_total);
    one(b, "rocmforge_kv_blocks_used", "gauge", "KV blocks referenced by a sequence.", g->blocks_used);
    one(b, "rocmforge_kv_blocks_free", "gauge", "KV blocks free.", g->blocks_free);
    one(b, "rocmforge_kv_blocks_cached", "gauge", "KV blocks held only by the prefix cache (evictable).", g->blocks_cached);
    one(b, "rocmforge_kv_block_size", "gauge", "Positions per KV block.", g->block_size);
    one(b, "rocmforge_context_size", "gauge", "Positions per sequence.", g->ctx);
    one(b, "rocmforge_parallel", "gauge", "Sequences that may run at once.", g->parallel);
    one(b, "rocmforge_prompt_tokens_computed_total", "counter", "Prompt tokens computed by the engine.", g->prompt_computed);
    one(b, "rocmforge_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
        g->prefix_hits);
    one(b, "rocmforge_engine_generated_tokens_total", "counter", "Tokens sampled by the engine.", g->gen_tokens);
    one(b, "rocmforge_preemptions_total", "counter", "Sequences preempted because the KV pool ran out.", g->preemptions);
    one(b, "rocmforge_engine_steps_total", "counter", "Engine steps that ran a forward.", g->steps);
    one(b, "rocmforge_engine_requests_finished_total", "counter", "Engine requests finished.", g->requests_done);
    one(b, "rocmforge_kv_bytes", "gauge", "Memory of the KV pool (K and V of every attention layer).", g->kv_bytes);
    one(b, "rocmforge_state_slots_total", "gauge", "Recurrent-state slots (hybrid models; one per running sequence).",
        g->state_slots);
    one(b, "rocmforge_state_slots_used", "gauge", "Recurrent-state slots held by a sequence.", g->state_slots_used);
    one(b, "rocmforge_state_checkpoints_total", "gauge", "Recurrent-state checkpoints of the prefix cache (hybrid models).",
        g->ckpt_total);
    one(b, "rocmforge_state_checkpoints_used", "gauge", "State checkpoints holding a prefix's state.", g->ckpt_used);
    one(b, "rocmforge_state_checkpoint_hits_total", "counter", "Requests resumed from a state checkpoint.", g->ckpt_hits);
    one(b, "rocmforge_state_bytes", "gauge", "Memory of the state slots and checkpoints.", g->state_bytes);
    one(b, "rocmforge_tp_size", "gauge", "Shards the model is split into (--tp; 1 = not split).", g->tp_size);
    if (g->n_gpu <= 0) return; /* the CPU */
    per_gpu(b, "rocmforge_gpu_memory_total_bytes", "Memory of each GPU the model runs on.", g,
            offsetof(srv_gpu_gauges, mem_total), true);
    per_gpu(b, "rocmforge_gpu_memory_free_bytes", "Free memory of each GPU now (the driver's count, every process's use).",
            g, offsetof(srv_gpu_gauges, mem_free), true);
    per_gpu(b, "rocmforge_gpu_kv_bytes", "Memory of each GPU's KV pool (its shard's KV heads; allocated at load).", g,
            offsetof(srv_gpu_gauges, kv_bytes), false);
}
