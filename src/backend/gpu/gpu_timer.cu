/* gpu_timer.cu — device-event timers (gpu_timer.h): a pair of timing events per timer, recorded on
 * the context's stream. */
#include "backend/gpu/gpu_timer.h"
#include "backend/gpu/gpu_internal.h"

#include <stdlib.h>

struct rf_gpu_timer {
    cudaEvent_t e0, e1;
};

extern "C" rf_status rf_gpu_timer_start(rf_gpu_ctx *ctx, void **timer) {
    if (!*timer) {
        rf_gpu_timer *t = (rf_gpu_timer *)calloc(1, sizeof *t);
        if (!t) return rf_set_error(RF_ERR_OOM, "rf_gpu_timer_start: out of host memory");
        cudaError_t e = cudaEventCreate(&t->e0);
        if (e == cudaSuccess) {
            e = cudaEventCreate(&t->e1);
            if (e != cudaSuccess) (void)cudaEventDestroy(t->e0);
        }
        if (e != cudaSuccess) {
            free(t);
            return rf_set_error(RF_ERR_DEVICE, "GPU: cudaEventCreate failed: %s", cudaGetErrorString(e));
        }
        *timer = t;
    }
    RF_GPU_CHECK(cudaEventRecord(((rf_gpu_timer *)*timer)->e0, ctx->stream));
    return RF_OK;
}

extern "C" rf_status rf_gpu_timer_stop(rf_gpu_ctx *ctx, void *timer, double *us) {
    rf_gpu_timer *t = (rf_gpu_timer *)timer;
    float ms = 0.0f;
    RF_GPU_CHECK(cudaEventRecord(t->e1, ctx->stream));
    cudaError_t e = cudaEventSynchronize(t->e1);
    if (e != cudaSuccess)
        return rf_set_error(RF_ERR_DEVICE, "GPU fault (last kernel launched: %s): %s", ctx->last_kernel,
                            cudaGetErrorString(e));
    RF_GPU_CHECK(cudaEventElapsedTime(&ms, t->e0, t->e1));
    *us = (double)ms * 1e3;
    return RF_OK;
}

extern "C" void rf_gpu_timer_destroy(void *timer) {
    rf_gpu_timer *t = (rf_gpu_timer *)timer;
    if (!t) return;
    (void)cudaEventDestroy(t->e0);
    (void)cudaEventDestroy(t->e1);
    free(t);
}
