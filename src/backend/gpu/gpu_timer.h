/* gpu_timer.h — device-event timing of work queued on a context's stream, for host-C tests and
 * benchmarks that time single kernels (launch latency included, host overhead not): a timer is
 * two timing events, started and stopped around the work. Kept out of gpu.h so that adding it
 * rebuilt no kernel file. Implemented in gpu_timer.cu. */
#ifndef RF_GPU_TIMER_H
#define RF_GPU_TIMER_H

#include "backend/gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records the start event on ctx's stream; *timer is created on first use (NULL before). */
rf_status rf_gpu_timer_start(rf_gpu_ctx *ctx, void **timer);
/* Records the stop event, waits for it and sets *us to the microseconds between the two events
 * (the device's clock: the work queued in between, with its launch gaps). */
rf_status rf_gpu_timer_stop(rf_gpu_ctx *ctx, void *timer, double *us);
void rf_gpu_timer_destroy(void *timer); /* takes NULL */

#ifdef __cplusplus
}
#endif
#endif
