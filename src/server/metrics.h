/* metrics.h — the server's counters and latency histograms, rendered as Prometheus text. */
#ifndef RF_SERVER_METRICS_H
#define RF_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "oai.h"

#define SRV_HIST_MAX 16

typedef struct srv_hist {
    int nb;                         /* finite upper bounds; one more bucket is +Inf */
    double le[SRV_HIST_MAX];
    uint64_t bucket[SRV_HIST_MAX + 1]; /* not cumulative; rendered cumulatively */
    double sum;
    uint64_t count;
} srv_hist;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t http[SRV_ROUTE_COUNT][600]; /* responses by route and status */
    srv_hist ttft;  /* seconds from the request's arrival to its first generated token */
    srv_hist itl;   /* seconds between consecutive tokens of a choice */
    srv_hist e2e;   /* seconds from arrival to the last choice's end */
    uint64_t finish[8];              /* choices by rf_finish_reason */
    uint64_t prompt_tokens;          /* prompt tokens of finished requests (cached ones included) */
    uint64_t completion_tokens;      /* tokens generated for finished requests */
    uint64_t disconnects;            /* requests cancelled because the client went away */
    uint64_t queue_full;             /* requests refused with 503 because the queue was full */
} srv_metrics;

#define SRV_GPU_MAX 64 /* GPUs /metrics lists at most (--tp's bound) */

/* One GPU of the model (rf_engine_get_device_stat; mem_total < 0: its memory could not be read). */
typedef struct srv_gpu_gauges {
    int64_t device, mem_total, mem_free, kv_bytes;
} srv_gpu_gauges;

/* Engine-side values sampled when /metrics is read (-1: not loaded yet). */
typedef struct srv_gauges {
    int loaded;
    int64_t running, waiting, blocks_total, blocks_used, blocks_free, blocks_cached, block_size;
    int64_t prompt_computed, prefix_hits, gen_tokens, preemptions, steps, requests_done;
    int64_t ctx, parallel, active_requests, max_queue;
    /* hybrid models' recurrent state (0 otherwise): slots, prefix checkpoints, their memory */
    int64_t state_slots, state_slots_used, ckpt_total, ckpt_used, ckpt_hits, state_bytes, kv_bytes;
    /* tensor parallelism: the shards (--tp; 1 unsplit), and the GPUs the model runs on (none on
     * the CPU): a series per GPU */
    int64_t tp_size;
    int n_gpu;
    srv_gpu_gauges gpu[SRV_GPU_MAX];
} srv_gauges;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_metrics_http(srv_metrics *m, srv_route r, int status);
/* Adds an observation (seconds) under m->mu. */
void srv_metrics_observe(srv_metrics *m, srv_hist *h, double v);
/* Appends the Prometheus text exposition to b. */
void srv_metrics_render(srv_metrics *m, const srv_gauges *g, srv_buf *b);

#endif
