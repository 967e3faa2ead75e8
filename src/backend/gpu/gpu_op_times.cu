/* gpu_op_times.cu — RF_GPU_OP_TIMES: GPU time per kernel name, from an event recorded after every
 * eager launch (with RF_GPU_GRAPHS=0), summed per name and printed as a table when the context
 * goes; the "where does a step's time go" of a machine without a profiler. */
#include "backend/gpu/gpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OT_EVENTS 8192 /* events in flight before a flush (one wait on the last) */
#define OT_NAMES 256

typedef struct ot_name {
    const char *name;
    long calls, dropped;
    double ms;
} ot_name;

struct rf_gpu_op_times {
    cudaEvent_t ev[OT_EVENTS];
    const char *name[OT_EVENTS]; /* the launch each event closes; NULL: no interval (idle before) */
    int n;                       /* events recorded since the last flush */
    ot_name names[OT_NAMES];
    int n_names;
};

static ot_name *ot_find(rf_gpu_op_times *t, const char *name) {
    for (int i = 0; i < t->n_names; i++)
        if (t->names[i].name == name || !strcmp(t->names[i].name, name)) return &t->names[i];
    if (t->n_names == OT_NAMES) return NULL;
    ot_name *o = &t->names[t->n_names++];
    o->name = name;
    return o;
}

/* sums the recorded intervals (waits for the last event), keeps the last event as the next base */
static void ot_flush(rf_gpu_op_times *t) {
    if (t->n < 2) return;
    if (cudaEventSynchronize(t->ev[t->n - 1]) != cudaSuccess) {
        (void)cudaGetLastError();
        t->n = 0;
        return;
    }
    for (int i = 1; i < t->n; i++) {
        ot_name *o = t->name[i] ? ot_find(t, t->name[i]) : NULL;
        float ms = 0;
        if (o && cudaEventElapsedTime(&ms, t->ev[i - 1], t->ev[i]) == cudaSuccess) o->ms += ms, o->calls++;
    }
    cudaEvent_t last = t->ev[t->n - 1];
    t->ev[t->n - 1] = t->ev[0];
    t->ev[0] = last;
    t->name[0] = NULL;
    t->n = 1;
}

extern "C" rf_status rf_gpu_op_times_new(rf_gpu_ctx *ctx) {
    rf_gpu_op_times *t = (rf_gpu_op_times *)calloc(1, sizeof *t);
    if (!t) return rf_set_error(RF_ERR_OOM, "RF_GPU_OP_TIMES: out of host memory");
    for (int i = 0; i < OT_EVENTS; i++)
        if (cudaEventCreate(&t->ev[i]) != cudaSuccess) {
            (void)cudaGetLastError();
            for (int k = 0; k < i; k++) cudaEventDestroy(t->ev[k]);
            free(t);
            return rf_set_error(RF_ERR_DEVICE, "RF_GPU_OP_TIMES: cannot create events");
        }
    ctx->op_times = t;
    return RF_OK;
}

extern "C" void rf_gpu_op_time(rf_gpu_ctx *ctx, const char *name) {
    rf_gpu_op_times *t = ctx->op_times;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(ctx->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return;
    if (t->n == OT_EVENTS) ot_flush(t);
    /* the previous mark already passed: the GPU sat idle before this launch (a host wait), so the
     * interval would hold host time: the launch is counted as dropped, not timed */
    const bool idle = t->n == 0 || cudaEventQuery(t->ev[t->n - 1]) == cudaSuccess;
    (void)cudaGetLastError(); /* cudaErrorNotReady is the busy answer */
    if (cudaEventRecord(t->ev[t->n], ctx->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    t->name[t->n] = idle ? NULL : name;
    if (idle && t->n > 0) {
        ot_name *o = ot_find(t, name);
        if (o) o->dropped++;
    }
    t->n++;
}

static int ot_cmp(const void *a, const void *b) {
    const double x = ((const ot_name *)a)->ms, y = ((const ot_name *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

extern "C" void rf_gpu_op_times_free(rf_gpu_ctx *ctx) {
    rf_gpu_op_times *t = ctx->op_times;
    if (!t) return;
    ot_flush(t);
    double total = 0;
    for (int i = 0; i < t->n_names; i++) total += t->names[i].ms;
    qsort(t->names, (size_t)t->n_names, sizeof *t->names, ot_cmp);
    fprintf(stderr, "\nGPU %d kernel time by name (RF_GPU_OP_TIMES; eager launches; %.3f ms in all)\n", ctx->device, total);
    fprintf(stderr, "| kernel | calls | ms | share | us/call | dropped |\n|---|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < t->n_names; i++) {
        const ot_name *o = &t->names[i];
        fprintf(stderr, "| %s | %ld | %.3f | %.1f%% | %.2f | %ld |\n", o->name, o->calls, o->ms,
                total > 0 ? 100.0 * o->ms / total : 0.0, o->calls ? 1e3 * o->ms / (double)o->calls : 0.0, o->dropped);
    }
    for (int i = 0; i < OT_EVENTS; i++) cudaEventDestroy(t->ev[i]);
    free(t);
    ctx->op_times = NULL;
}
