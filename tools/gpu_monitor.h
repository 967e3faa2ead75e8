/* gpu_monitor.h — what `rocmforge bench` records about the GPU before and after a run: clocks,
 * temperature, power and whether the clocks were cut (power cap, thermal). */
#ifndef RF_GPU_MONITOR_H
#define RF_GPU_MONITOR_H

#include <stdbool.h>

typedef struct rf_gpu_reading {
    bool ok;                  /* false: no NVML / ROCm SMI, or the device was not found */
    char source[16];          /* "NVML" or "ROCm SMI" */
    unsigned sm_mhz, mem_mhz, temp_c, power_mw;
    bool throttled;           /* NVIDIA: a power-cap or thermal clock reason was active */
    unsigned long long reasons; /* NVML's clock event reason bits */
    char driver[80];
} rf_gpu_reading;

/* Reads device `device` now; false (and r->ok false) when nothing can be read. */
bool rf_gpu_monitor_read(int device, rf_gpu_reading *r);

#endif
