/* gpu_graph.cu — recording a stream's work into a graph and replaying it: the decode step is
 * captured once per batch-size bucket and then launched as one graph per step (docs/ARCHITECTURE.md §5.2);
 * a host task forked off the stream (a host node in a graph). Host glue only; the recorded
 * kernels are the ordinary ones. */
#include "backend/gpu/gpu_internal.h"

extern "C" rf_status rf_gpu_capture_begin(rf_gpu_ctx *ctx) {
    RF_GPU_CHECK(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    return RF_OK;
}

extern "C" rf_status rf_gpu_host_task(rf_gpu_ctx *ctx, void (*fn)(void *), void *user) {
    RF_GPU_CHECK(cudaEventRecord(ctx->task_fork, ctx->stream));
    RF_GPU_CHECK(cudaStreamWaitEvent(ctx->side, ctx->task_fork, 0));
    RF_GPU_CHECK(cudaLaunchHostFunc(ctx->side, fn, user));
    RF_GPU_CHECK(cudaEventRecord(ctx->task_done, ctx->side));
    ctx->task_open = true;
    return RF_OK;
}

extern "C" rf_status rf_gpu_host_task_join(rf_gpu_ctx *ctx) {
    if (!ctx->task_open) return RF_OK;
    ctx->task_open = false;
    RF_GPU_CHECK(cudaStreamWaitEvent(ctx->stream, ctx->task_done, 0));
    return RF_OK;
}

extern "C" rf_status rf_gpu_capture_end(rf_gpu_ctx *ctx, void **exec) {
    *exec = NULL;
    (void)rf_gpu_host_task_join(ctx); /* a recording ends with every fork joined */
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(ctx->stream, &g);
    if (e != cudaSuccess || !g) {
        (void)cudaGetLastError();
        return rf_set_error(RF_ERR_DEVICE, "GPU: recording the step into a graph failed: %s",
                            cudaGetErrorString(e));
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiateWithFlags(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rf_set_error(RF_ERR_DEVICE, "GPU: instantiating the step's graph failed: %s",
                            cudaGetErrorString(e));
    }
    *exec = (void *)x;
    return RF_OK;
}

/* A recording that spans GPUs (a tensor-parallel step): ctx's stream joins the recording open on
 * lead's stream (an event recorded there, waited on here), so what ctx's stream runs next is
 * recorded into lead's graph; rf_gpu_capture_join ends that by making lead's stream wait for
 * ctx's work, which must happen before lead's recording ends (CUDA refuses a recording with a
 * stream still forked off). One graph then holds every GPU's step, NCCL's kernels included
 * (NCCL asks that the streams of one group be recorded into the same graph), and one launch on
 * lead's stream runs it. Leaves ctx's device current. */
extern "C" rf_status rf_gpu_capture_fork(rf_gpu_ctx *lead, rf_gpu_ctx *ctx) {
    RF_GPU_CHECK(cudaSetDevice(lead->device));
    RF_GPU_CHECK(cudaEventRecord(lead->join_ev, lead->stream));
    RF_GPU_CHECK(cudaSetDevice(ctx->device));
    RF_GPU_CHECK(cudaStreamWaitEvent(ctx->stream, lead->join_ev, 0));
    return RF_OK;
}

extern "C" rf_status rf_gpu_capture_join(rf_gpu_ctx *lead, rf_gpu_ctx *ctx) {
    RF_GPU_CHECK(cudaSetDevice(ctx->device));
    RF_GPU_CHECK(cudaEventRecord(ctx->join_ev, ctx->stream));
    RF_GPU_CHECK(cudaSetDevice(lead->device));
    RF_GPU_CHECK(cudaStreamWaitEvent(lead->stream, ctx->join_ev, 0));
    RF_GPU_CHECK(cudaSetDevice(ctx->device));
    return RF_OK;
}

extern "C" rf_status rf_gpu_graph_launch(rf_gpu_ctx *ctx, void *exec) {
    ctx->last_kernel = "(graph of a decode step)";
    RF_GPU_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, ctx->stream));
    return RF_OK;
}

extern "C" void rf_gpu_graph_destroy(void *exec) {
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

extern "C" void *rf_gpu_scratch_base(rf_gpu_ctx *ctx) { return ctx->scratch; }
