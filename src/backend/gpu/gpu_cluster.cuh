/* gpu_cluster.cuh — thread-block clusters (CUDA, sm_90+): a launch with a cluster dimension and
 * the cluster-wide barrier, for kernels whose blocks hand work to each other inside one launch
 * (the RMS norm over a cluster of blocks in gpu_gemv_xq.cu). */
#ifndef RF_GPU_CLUSTER_CUH
#define RF_GPU_CLUSTER_CUH

#include "backend/gpu/gpu_internal.h"

/* Every thread of every block of the cluster arrives; the writes each made before it (shared
 * and global memory) are visible to all of them after it (release / acquire at cluster scope).
 * Never reached below sm_90: the hosts launch these kernels as clusters only there. */
static __device__ __forceinline__ void rf_cluster_sync(void) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    RF_DEVICE_TRAP();
#endif
}

#if defined(RF_CUDA_BUILD)
/* The launch of rf_gpu_launch_cluster without what follows every launch (rf_gpu_after_launch:
 * RF_GPU_SYNC's wait, the op-time mark): for kernels that end only once kernels on other GPUs
 * are launched too (gpu_tp_p2p.cu), which a wait right after the launch would never see end. */
template <typename... KArgs, typename... Args>
static rf_status rf_gpu_launch_cluster_only(rf_gpu_ctx *ctx, const char *name, bool pdl, void (*k)(KArgs...),
                                            dim3 grid, dim3 block, size_t smem, dim3 cl, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cudaLaunchAttribute attr[2];
    unsigned na = 0;
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = cl.x;
    attr[na].val.clusterDim.y = cl.y;
    attr[na].val.clusterDim.z = cl.z;
    na++;
    if (pdl && ctx->pdl) {
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = na;
    ctx->last_kernel = name;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rf_set_error(RF_ERR_DEVICE, "GPU kernel %s: launch failed: %s", name, cudaGetErrorString(e));
    }
    return RF_OK;
}

/* rf_gpu_launch with clusters of cl blocks (cudaLaunchKernelEx's cluster dimension; the grid a
 * multiple of it), as a programmatic dependent launch where pdl and the context allow it. */
template <typename... KArgs, typename... Args>
static rf_status rf_gpu_launch_cluster(rf_gpu_ctx *ctx, const char *name, bool pdl, void (*k)(KArgs...), dim3 grid,
                                       dim3 block, size_t smem, dim3 cl, Args... args) {
    const rf_status st = rf_gpu_launch_cluster_only(ctx, name, pdl, k, grid, block, smem, cl, args...);
    return st ? st : rf_gpu_after_launch(ctx, name);
}
#endif

#endif
