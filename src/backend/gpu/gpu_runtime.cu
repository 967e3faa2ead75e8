/* gpu_runtime.cu — host glue of the GPU backend: device init, allocations with OOM messages that
 * say needed vs free, weight upload with a progress bar, the scratch arena, synchronization with
 * fault reporting. No kernels here. */
#include "core/knobs.h"
#include "backend/gpu/gpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" int rf_gpu_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

extern "C" rf_status rf_gpu_init(int device, rf_gpu_ctx **out) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return rf_set_error(RF_ERR_DEVICE,
                            "no GPU found (%s): check the driver (nvidia-smi / rocminfo) or use "
                            "the CPU backend",
                            e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    }
    if (device < 0 || device >= n)
        return rf_set_error(RF_ERR_DEVICE, "GPU device %d requested but only %d present", device, n);
    rf_gpu_ctx *c = (rf_gpu_ctx *)calloc(1, sizeof *c);
    if (!c) return rf_set_error(RF_ERR_OOM, "GPU: out of host memory for the context");
    c->device = device;
    c->sync_each = rf_knob_bool(RF_KNOB_GPU_SYNC);
    c->last_kernel = "(none)";
    rf_status st = RF_OK;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->join_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->task_fork, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->task_done, cudaEventDisableTiming)) != cudaSuccess) {
        if (c->task_fork) cudaEventDestroy(c->task_fork);
        if (c->side) cudaStreamDestroy(c->side);
        if (c->join_ev) cudaEventDestroy(c->join_ev);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
        return rf_set_error(RF_ERR_DEVICE, "GPU %d: init failed: %s", device, cudaGetErrorString(e));
    }
    snprintf(c->info.name, sizeof c->info.name, "%s", prop.name);
    c->info.warp_size = prop.warpSize;
    c->info.sm_count = prop.multiProcessorCount;
    c->info.cc_major = prop.major;
    c->info.cc_minor = prop.minor;
    c->info.total_mem = prop.totalGlobalMem;
    c->info.l2_bytes = (size_t)prop.l2CacheSize;
#if defined(RF_CUDA_BUILD)
    /* programmatic dependent launch needs sm_90; RF_GPU_PDL=0 turns it off (for comparisons) */
    c->pdl = prop.major >= 9 && rf_knob_bool(RF_KNOB_GPU_PDL);
#endif
#if !defined(RF_GPU_NO_BLAS)
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
        st = rf_set_error(RF_ERR_DEVICE, "GPU %d: cuBLAS handle creation failed", device);
    } else if (cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        st = rf_set_error(RF_ERR_DEVICE, "GPU %d: cublasSetStream failed", device);
    }
#if defined(RF_CUDA_BUILD)
    /* a fixed workspace, so a product recorded into a graph never allocates */
    if (!st) {
        const size_t ws = (size_t)32 << 20;
        if (cudaMalloc(&c->blas_ws, ws) != cudaSuccess) {
            (void)cudaGetLastError();
            c->blas_ws = NULL;
            st = rf_set_error(RF_ERR_OOM, "GPU %d: 32 MiB cuBLAS workspace: out of memory", device);
        } else if (cublasSetWorkspace(c->blas, c->blas_ws, ws) != CUBLAS_STATUS_SUCCESS) {
            st = rf_set_error(RF_ERR_DEVICE, "GPU %d: cublasSetWorkspace failed", device);
        }
    }
#endif
#endif
    if (!st && rf_knob_bool(RF_KNOB_GPU_OP_TIMES)) st = rf_gpu_op_times_new(c);
    if (st) {
        rf_gpu_destroy(c);
        return st;
    }
    *out = c;
    return RF_OK;
}

extern "C" void rf_gpu_destroy(rf_gpu_ctx *ctx) {
    if (!ctx) return;
    if (ctx->stream) cudaStreamSynchronize(ctx->stream);
    rf_gpu_op_times_free(ctx);
    if (ctx->scratch) cudaFree(ctx->scratch);
#if !defined(RF_GPU_NO_BLAS)
    if (ctx->blas) cublasDestroy(ctx->blas);
    if (ctx->blas_ws) cudaFree(ctx->blas_ws);
#endif
    if (ctx->side) cudaStreamSynchronize(ctx->side);
    if (ctx->task_fork) cudaEventDestroy(ctx->task_fork);
    if (ctx->task_done) cudaEventDestroy(ctx->task_done);
    if (ctx->side) cudaStreamDestroy(ctx->side);
    if (ctx->join_ev) cudaEventDestroy(ctx->join_ev);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    free(ctx);
}

extern "C" void rf_gpu_get_info(const rf_gpu_ctx *ctx, rf_gpu_info *info) { *info = ctx->info; }
extern "C" void *rf_gpu_stream(rf_gpu_ctx *ctx) { return (void *)ctx->stream; }

extern "C" rf_status rf_gpu_alloc(rf_gpu_ctx *ctx, size_t bytes, void **d_out) {
    *d_out = NULL;
    if (bytes > SIZE_MAX - 16)
        return rf_set_error(RF_ERR_RANGE, "GPU alloc: %zu bytes is too large", bytes);
    cudaError_t e = cudaMalloc(d_out, bytes + 16);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        (void)cudaGetLastError();
        *d_out = NULL;
        return rf_set_error(RF_ERR_OOM,
                            "GPU out of memory: needed %.1f MiB, device has %.1f MiB free of "
                            "%.1f MiB (%s); use a smaller model, context or batch",
                            bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0,
                            cudaGetErrorString(e));
    }
    return RF_OK;
}

extern "C" void rf_gpu_free(rf_gpu_ctx *ctx, void *d_ptr) {
    (void)ctx;
    if (d_ptr) cudaFree(d_ptr);
}

extern "C" rf_status rf_gpu_upload(rf_gpu_ctx *ctx, void *d_dst, const void *src, size_t bytes) {
    RF_GPU_CHECK(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
    if (ctx->watch) return rf_gpu_watch_wait(ctx, NULL, "an upload"); /* a split's: bounded */
    RF_GPU_CHECK(cudaStreamSynchronize(ctx->stream));
    return RF_OK;
}

/* whether the host memory at p is pinned (registered or cudaMallocHost'ed) */
static bool host_pinned(const void *p) {
#if defined(RF_HIP) /* the attribute's field name differs across ROCm releases: wait first always */
    (void)p;
    return false;
#else
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return at.type == cudaMemoryTypeHost;
#endif
}

extern "C" rf_status rf_gpu_download(rf_gpu_ctx *ctx, void *dst, const void *d_src, size_t bytes) {
    /* A copy into pageable memory returns only once it has run, so on a split's stuck GPU the
     * host would block inside cudaMemcpyAsync, before any polled wait: the stream is drained by
     * the bounded wait first (test_gpu_tp's collective timeout downloads into malloc'ed memory) */
    if (ctx->watch && !host_pinned(dst)) {
        rf_status st = rf_gpu_watch_wait(ctx, NULL, "a download of a step's results");
        if (st) return st;
    }
    cudaError_t e = cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, ctx->stream);
    if (e == cudaSuccess && ctx->watch) return rf_gpu_watch_wait(ctx, NULL, "a download of a step's results");
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess)
        return rf_set_error(RF_ERR_DEVICE, "GPU download failed (last kernel %s): %s",
                            ctx->last_kernel, cudaGetErrorString(e));
    return RF_OK;
}

extern "C" rf_status rf_gpu_memset(rf_gpu_ctx *ctx, void *d_dst, int byte, size_t bytes) {
    RF_GPU_CHECK(cudaMemsetAsync(d_dst, byte, bytes, ctx->stream));
    return RF_OK;
}

extern "C" rf_status rf_gpu_sync(rf_gpu_ctx *ctx) {
    rf_status jst = rf_gpu_host_task_join(ctx); /* a task left open (a failed step) is waited for too */
    if (jst) return jst;
    if (ctx->watch) return rf_gpu_watch_wait(ctx, NULL, "a wait for a step"); /* a split's: bounded */
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess)
        return rf_set_error(RF_ERR_DEVICE,
                            "GPU fault (last kernel launched: %s; set RF_GPU_SYNC=1 to pin it): %s",
                            ctx->last_kernel, cudaGetErrorString(e));
    return RF_OK;
}

extern "C" rf_status rf_gpu_fence_record(rf_gpu_ctx *ctx, void **fence) {
    if (!*fence) {
        cudaEvent_t ev;
        RF_GPU_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        *fence = (void *)ev;
    }
    RF_GPU_CHECK(cudaEventRecord((cudaEvent_t)*fence, ctx->stream));
    return RF_OK;
}

extern "C" rf_status rf_gpu_fence_wait(rf_gpu_ctx *ctx, void *fence) {
    if (ctx->watch) return rf_gpu_watch_wait(ctx, fence, "a wait for a step's batch copy");
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)fence);
    if (e != cudaSuccess)
        return rf_set_error(RF_ERR_DEVICE,
                            "GPU fault (last kernel launched: %s; set RF_GPU_SYNC=1 to pin it): %s",
                            ctx->last_kernel, cudaGetErrorString(e));
    return RF_OK;
}

extern "C" void rf_gpu_fence_destroy(void *fence) {
    if (fence) cudaEventDestroy((cudaEvent_t)fence);
}

static void rf_sleep_host_fn(void *arg) {
    const unsigned us = (unsigned)(uintptr_t)arg;
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

extern "C" rf_status rf_gpu_stall(rf_gpu_ctx *ctx, unsigned us) {
    RF_GPU_CHECK(cudaLaunchHostFunc(ctx->stream, rf_sleep_host_fn, (void *)(uintptr_t)us));
    return RF_OK;
}

static void rf_progress(const char *name, size_t done, size_t total) {
    const int width = 40;
    int fill = total ? (int)((double)done / (double)total * width) : width;
    fprintf(stderr, "\r%-24.24s [", name ? name : "weights");
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %6.1f / %.1f MiB", done / 1048576.0, total / 1048576.0);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

extern "C" rf_status rf_gpu_upload_weights(rf_gpu_ctx *ctx, const void *src, size_t bytes,
                                           const char *name, bool progress, void **d_out) {
    rf_status st = rf_gpu_alloc(ctx, bytes, d_out);
    if (st) return st;
    /* Pinned staging buffers: mapped pages are pageable, and pageable copies are synchronous
     * and slow; two buffers let the next memcpy into pinned memory overlap the DMA. */
    const size_t chunk = (size_t)64 << 20;
    char *stage[2] = {NULL, NULL};
    cudaEvent_t ev[2] = {NULL, NULL};
    bool pinned = bytes > chunk;
    if (pinned) {
        for (int i = 0; i < 2; i++) {
            if (cudaMallocHost((void **)&stage[i], chunk) != cudaSuccess ||
                cudaEventCreate(&ev[i]) != cudaSuccess) {
                (void)cudaGetLastError();
                pinned = false;
            }
        }
    }
    const char *s = (const char *)src;
    cudaError_t e = cudaSuccess;
    size_t done = 0;
    int k = 0;
    while (done < bytes && e == cudaSuccess) {
        size_t n = bytes - done < chunk ? bytes - done : chunk;
        if (pinned) {
            e = cudaEventSynchronize(ev[k]); /* the previous copy out of stage[k] is done */
            if (e != cudaSuccess) break;
            memcpy(stage[k], s + done, n);
            e = cudaMemcpyAsync((char *)*d_out + done, stage[k], n, cudaMemcpyHostToDevice,
                                ctx->stream);
            if (e == cudaSuccess) e = cudaEventRecord(ev[k], ctx->stream);
            k ^= 1;
        } else {
            e = cudaMemcpyAsync((char *)*d_out + done, s + done, n, cudaMemcpyHostToDevice,
                                ctx->stream);
            if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
        }
        done += n;
        if (progress) rf_progress(name, done, bytes);
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    for (int i = 0; i < 2; i++) {
        if (stage[i]) cudaFreeHost(stage[i]);
        if (ev[i]) cudaEventDestroy(ev[i]);
    }
    if (e != cudaSuccess) {
        cudaFree(*d_out);
        *d_out = NULL;
        return rf_set_error(RF_ERR_DEVICE, "GPU: uploading weights '%s' (%zu bytes) failed: %s",
                            name ? name : "?", bytes, cudaGetErrorString(e));
    }
    return RF_OK;
}

extern "C" rf_status rf_gpu_scratch_reserve(rf_gpu_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->scratch_size) return RF_OK;
    if (ctx->watch) { /* old scratch may still be read; a split's wait is bounded */
        rf_status st = rf_gpu_watch_wait(ctx, NULL, "a wait before the scratch arena grows");
        if (st) return st;
    } else {
        RF_GPU_CHECK(cudaStreamSynchronize(ctx->stream)); /* old scratch may still be read */
    }
    if (ctx->scratch) cudaFree(ctx->scratch);
    ctx->scratch = NULL;
    ctx->scratch_size = ctx->scratch_used = 0;
    void *p;
    rf_status st = rf_gpu_alloc(ctx, bytes, &p);
    if (st) return st;
    ctx->scratch = (char *)p;
    ctx->scratch_size = bytes;
    return RF_OK;
}

extern "C" rf_status rf_gpu_scratch_alloc(rf_gpu_ctx *ctx, size_t bytes, void **d_out) {
    size_t off = (ctx->scratch_used + 255) & ~(size_t)255;
    if (off > ctx->scratch_size || bytes > ctx->scratch_size - off)
        return rf_set_error(RF_ERR_OOM,
                            "GPU scratch arena: needed %zu more bytes, %zu of %zu in use "
                            "(reserve more with rf_gpu_scratch_reserve)",
                            bytes, ctx->scratch_used, ctx->scratch_size);
    *d_out = ctx->scratch + off;
    ctx->scratch_used = off + bytes;
    return RF_OK;
}

extern "C" void rf_gpu_scratch_reset(rf_gpu_ctx *ctx) { ctx->scratch_used = 0; }

extern "C" bool rf_gpu_set_pdl(rf_gpu_ctx *ctx, bool on) {
#if defined(RF_CUDA_BUILD)
    ctx->pdl = on && ctx->info.cc_major >= 9;
#else
    (void)on;
    ctx->pdl = false;
#endif
    return ctx->pdl;
}
