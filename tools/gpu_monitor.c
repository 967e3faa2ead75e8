/* gpu_monitor.c — GPU clocks, temperature, power and throttle reasons for `rocmforge bench`,
 * read through NVML (NVIDIA) or ROCm SMI (AMD), both opened with dlopen so the tool runs, and
 * says "n/a", where neither library exists. */
#include "gpu_monitor.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* NVML, the few entry points used (nvml.h's signatures; handles are opaque pointers) */
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned, void **);
typedef int (*nvml_clock_fn)(void *, int, unsigned *);
typedef int (*nvml_temp_fn)(void *, int, unsigned *);
typedef int (*nvml_power_fn)(void *, unsigned *);
typedef int (*nvml_reasons_fn)(void *, unsigned long long *);
typedef int (*nvml_driver_fn)(char *, unsigned);

/* ROCm SMI */
typedef int (*rsmi_init_fn)(unsigned long long);
typedef int (*rsmi_clk_fn)(unsigned, int, void *);
typedef int (*rsmi_temp_fn)(unsigned, unsigned, int, long long *);
typedef int (*rsmi_power_fn)(unsigned, unsigned, unsigned long long *);

static void *g_nvml, *g_rsmi;
static bool g_tried;

static void open_libs(void) {
    if (g_tried) return;
    g_tried = true;
    g_nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (g_nvml) {
        nvml_init_fn init = (nvml_init_fn)dlsym(g_nvml, "nvmlInit_v2");
        if (!init || init() != 0) {
            dlclose(g_nvml);
            g_nvml = NULL;
        }
    }
    if (!g_nvml) {
        g_rsmi = dlopen("librocm_smi64.so.7", RTLD_NOW | RTLD_LOCAL);
        if (!g_rsmi) g_rsmi = dlopen("librocm_smi64.so", RTLD_NOW | RTLD_LOCAL);
        if (g_rsmi) {
            rsmi_init_fn init = (rsmi_init_fn)dlsym(g_rsmi, "rsmi_init");
            if (!init || init(0) != 0) {
                dlclose(g_rsmi);
                g_rsmi = NULL;
            }
        }
    }
}

bool rf_gpu_monitor_read(int device, rf_gpu_reading *r) {
    memset(r, 0, sizeof *r);
    open_libs();
    if (g_nvml) {
        nvml_handle_fn handle = (nvml_handle_fn)dlsym(g_nvml, "nvmlDeviceGetHandleByIndex_v2");
        nvml_clock_fn clock = (nvml_clock_fn)dlsym(g_nvml, "nvmlDeviceGetClockInfo");
        nvml_temp_fn temp = (nvml_temp_fn)dlsym(g_nvml, "nvmlDeviceGetTemperature");
        nvml_power_fn power = (nvml_power_fn)dlsym(g_nvml, "nvmlDeviceGetPowerUsage");
        nvml_reasons_fn reasons = (nvml_reasons_fn)dlsym(g_nvml, "nvmlDeviceGetCurrentClocksEventReasons");
        if (!reasons) reasons = (nvml_reasons_fn)dlsym(g_nvml, "nvmlDeviceGetCurrentClocksThrottleReasons");
        nvml_driver_fn driver = (nvml_driver_fn)dlsym(g_nvml, "nvmlSystemGetDriverVersion");
        void *h = NULL;
        if (!handle || handle((unsigned)device, &h) != 0) return false;
        r->ok = true;
        snprintf(r->source, sizeof r->source, "NVML");
        if (clock) {
            clock(h, 1 /* NVML_CLOCK_SM */, &r->sm_mhz);
            clock(h, 2 /* NVML_CLOCK_MEM */, &r->mem_mhz);
        }
        if (temp) temp(h, 0 /* NVML_TEMPERATURE_GPU */, &r->temp_c);
        if (power) power(h, &r->power_mw);
        if (reasons) {
            unsigned long long why = 0;
            reasons(h, &why);
            /* SW power cap, HW slowdown, SW/HW thermal, HW power brake: the clocks were cut */
            r->throttled = (why & (0x4ull | 0x8ull | 0x20ull | 0x40ull | 0x80ull)) != 0;
            r->reasons = why;
        }
        if (driver) driver(r->driver, sizeof r->driver);
        return true;
    }
    if (g_rsmi) {
        rsmi_clk_fn clk = (rsmi_clk_fn)dlsym(g_rsmi, "rsmi_dev_gpu_clk_freq_get");
        rsmi_temp_fn temp = (rsmi_temp_fn)dlsym(g_rsmi, "rsmi_dev_temp_metric_get");
        rsmi_power_fn power = (rsmi_power_fn)dlsym(g_rsmi, "rsmi_dev_power_ave_get");
        r->ok = true;
        snprintf(r->source, sizeof r->source, "ROCm SMI");
        struct { unsigned num, current; unsigned long long f[32]; } fr; /* rsmi_frequencies_t */
        if (clk && clk((unsigned)device, 0 /* RSMI_CLK_TYPE_SYS */, &fr) == 0 && fr.current < 32)
            r->sm_mhz = (unsigned)(fr.f[fr.current] / 1000000ull);
        if (clk && clk((unsigned)device, 4 /* RSMI_CLK_TYPE_MEM */, &fr) == 0 && fr.current < 32)
            r->mem_mhz = (unsigned)(fr.f[fr.current] / 1000000ull);
        long long t = 0;
        if (temp && temp((unsigned)device, 0 /* edge */, 0 /* current */, &t) == 0) r->temp_c = (unsigned)(t / 1000);
        unsigned long long p = 0;
        if (power && power((unsigned)device, 0, &p) == 0) r->power_mw = (unsigned)(p / 1000);
        return true;
    }
    return false;
}
