/* gpu_graph.cu — recording a stream's work into a graph and replaying it: the decode step is
 * captured once per batch-size bucket and then launched as one graph per step (docs/ARCHITECTURE.md §5.2).
 * Host glue only; the recorded kernels are the ordinary ones. */
#include "backend/gpu/gpu_internal.h"

extern "C" rf_status rf_gpu_capture_begin(rf_gpu_ctx *ctx) {
    RF_GPU_CHECK(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    return RF_OK;
}

extern "C" rf_status rf_gpu_capture_end(rf_gpu_ctx *ctx, void **exec) {
    *exec = NULL;
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

extern "C" rf_status rf_gpu_graph_launch(rf_gpu_ctx *ctx, void *exec) {
    ctx->last_kernel = "(graph of a decode step)";
    RF_GPU_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, ctx->stream));
    return RF_OK;
}

extern "C" void rf_gpu_graph_destroy(void *exec) {
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

extern "C" void *rf_gpu_scratch_base(rf_gpu_ctx *ctx) { return ctx->scratch; }
