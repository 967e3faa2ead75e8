/* gpu_internal.h — what the .cu files share and callers do not see: the context struct and the
 * checking macros that turn every runtime call and launch into an rf_status naming its kernel. */
#ifndef RF_GPU_INTERNAL_H
#define RF_GPU_INTERNAL_H

#include "backend/gpu/gpu_compat.h"
#include "backend/gpu/gpu.h"

struct rf_gpu_ctx {
    int device;
    cudaStream_t stream;
    cudaEvent_t join_ev;    /* joins this stream into (or back out of) another GPU's recording */
    cudaStream_t side;      /* a host task's stream (rf_gpu_host_task), forked off and joined back */
    cudaEvent_t task_fork, task_done;
    bool task_open;         /* a task queued and not joined yet */
#if !defined(RF_GPU_NO_BLAS)
    cublasHandle_t blas;
    void *blas_ws;          /* the handle's own workspace: no allocation inside a graph capture */
#endif
    rf_gpu_info info;
    char *scratch;          /* arena */
    size_t scratch_size, scratch_used;
    const char *last_kernel; /* name of the last launch, for fault messages */
    bool sync_each;          /* RF_GPU_SYNC=1: synchronize after every launch */
    int gemv_variant;        /* 0 = default kernel variant; see gpu_matmul.cu */
    int gemv_rpw;            /* 0 = default rows per warp of q32s / q32h; else this, rounded up */
    int gemv_pad_kb;         /* KB of unused shared memory per q32s block (occupancy knob, 0..16) */
    bool pdl;                /* programmatic dependent launch usable (CUDA, sm_90+, RF_GPU_PDL!=0) */
    bool invariant;          /* batch-invariant products: MMQ for every token count (rf_gpu_set_batch_invariant) */
    unsigned trace_seq;      /* RF_GEMV_TRACE builds: q32s / mma launches so far (trace slots) */
    struct rf_gpu_comm *watch; /* tensor parallelism: the communicator this stream's waits watch (gpu_nccl.cu) */
    int watch_rank;            /* this context's rank in it */
    struct rf_gpu_op_times *op_times; /* RF_GPU_OP_TIMES: per-kernel GPU time (gpu_op_times.cu), or NULL */
};
typedef struct rf_gpu_op_times rf_gpu_op_times;
/* gpu_op_times.cu: the table's start (at context creation), one mark after each eager launch,
 * and the printed table with the table's end (at context destruction) */
extern "C" rf_status rf_gpu_op_times_new(rf_gpu_ctx *ctx);
extern "C" void rf_gpu_op_time(rf_gpu_ctx *ctx, const char *name);
extern "C" void rf_gpu_op_times_free(rf_gpu_ctx *ctx);

/* The host's wait for this stream (event NULL: a fresh mark at its end) or for an event on it,
 * polled while ctx->watch is set: gives up after RF_TP_TIMEOUT_MS, or at once when NCCL reports
 * an error, aborting the communicator (gpu_nccl.cu); `what` names the wait in the error. */
extern "C" rf_status rf_gpu_watch_wait(rf_gpu_ctx *ctx, void *event, const char *what);

/* Runtime call: on failure return RF_ERR_DEVICE naming the call and the runtime's message. */
#define RF_GPU_CHECK(call)                                                                   \
    do {                                                                                     \
        cudaError_t rf_e_ = (call);                                                          \
        if (rf_e_ != cudaSuccess)                                                            \
            return rf_set_error(RF_ERR_DEVICE, "GPU: %s failed: %s", #call,                  \
                                cudaGetErrorString(rf_e_));                                  \
    } while (0)

/* After a launch: a bad configuration shows at once; with sync_each a fault shows here too. */
static inline rf_status rf_gpu_after_launch(rf_gpu_ctx *ctx, const char *kernel) {
    ctx->last_kernel = kernel;
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return rf_set_error(RF_ERR_DEVICE, "GPU kernel %s: launch failed: %s", kernel,
                            cudaGetErrorString(e));
    if (ctx->op_times) rf_gpu_op_time(ctx, kernel);
    if (ctx->sync_each) {
        e = cudaStreamSynchronize(ctx->stream);
        if (e != cudaSuccess)
            return rf_set_error(RF_ERR_DEVICE, "GPU kernel %s: failed while running: %s", kernel,
                                cudaGetErrorString(e));
    }
    return RF_OK;
}
#define RF_GPU_LAUNCHED(ctx, name) rf_gpu_after_launch((ctx), (name))

/* Launches kernel k on the context's stream; with pdl and ctx->pdl, as a programmatic dependent
 * launch (the kernel must call rf_pdl_wait() before touching anything earlier work writes, see
 * gpu_compat.h). Returns rf_gpu_after_launch's status, naming the kernel. */
template <typename... KArgs, typename... Args>
static rf_status rf_gpu_launch(rf_gpu_ctx *ctx, const char *name, bool pdl, void (*k)(KArgs...),
                               dim3 grid, dim3 block, size_t smem, Args... args) {
#if defined(RF_CUDA_BUILD)
    if (pdl && ctx->pdl) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = ctx->stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cudaError_t e = cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return rf_set_error(RF_ERR_DEVICE, "GPU kernel %s: launch failed: %s", name,
                                cudaGetErrorString(e));
        }
        return rf_gpu_after_launch(ctx, name);
    }
#else
    (void)pdl;
#endif
    k<<<grid, block, smem, ctx->stream>>>(((KArgs)args)...);
    return rf_gpu_after_launch(ctx, name);
}

/* The dynamic shared memory a kernel may take above 48 KiB is an attribute of the kernel on one
 * device (the current one when it is set). set[] is the kernel's own record, a slot per device
 * id: a launch on another GPU (tensor parallelism) sets it there too, where a single flag would
 * leave that GPU at 48 KiB and the launch would fail with "invalid argument". static_smem: the
 * kernel's static shared memory (the default dynamic limit is 48 KiB less it). */
#define RF_GPU_MAX_DEVICES 64
static inline rf_status rf_gpu_smem_attr(rf_gpu_ctx *ctx, const void *kern, size_t smem, size_t static_smem, size_t *set,
                                         const char *name) {
    const int d = ctx->device >= 0 && ctx->device < RF_GPU_MAX_DEVICES ? ctx->device : 0;
    if (smem <= (set[d] ? set[d] : 48 * 1024 - static_smem)) return RF_OK; /* the default limit */
    const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rf_set_error(RF_ERR_DEVICE, "%s: %zu bytes of shared memory on GPU %d: %s", name, smem, ctx->device,
                            cudaGetErrorString(e));
    }
    set[d] = smem;
    return RF_OK;
}

/* The shared memory one block may opt in to on the context's GPU, asked once per device; 48 KiB
 * where it cannot be asked (a failed query, HIP builds: every kernel's default limit). */
static inline size_t rf_gpu_smem_optin(const rf_gpu_ctx *ctx) {
#if defined(RF_CUDA_BUILD)
    static int v[RF_GPU_MAX_DEVICES];
    const int d = ctx->device >= 0 && ctx->device < RF_GPU_MAX_DEVICES ? ctx->device : 0;
    if (!v[d]) {
        int x = 0;
        if (cudaDeviceGetAttribute(&x, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device) != cudaSuccess || x < 1) {
            (void)cudaGetLastError();
            x = 48 * 1024;
        }
        v[d] = x;
    }
    return (size_t)v[d];
#else
    (void)ctx;
    return 48 * 1024;
#endif
}

/* Host-side argument check: RF_ERR_INVALID_ARG naming the op. */
#define RF_GPU_REQUIRE(cond, op, fmt, ...)                                                   \
    do {                                                                                     \
        if (!(cond)) return rf_set_error(RF_ERR_INVALID_ARG, "%s: " fmt, op, ##__VA_ARGS__);  \
    } while (0)

/* Temporary device memory for one op, from the scratch arena: grows the arena when nothing else
 * is in use; the op restores ctx->scratch_used to *mark afterwards (stream order makes reuse by
 * the next op safe). */
static inline rf_status rf_gpu_tmp(rf_gpu_ctx *ctx, size_t bytes, void **p, size_t *mark) {
    *mark = ctx->scratch_used;
    if (ctx->scratch_used == 0 && bytes > ctx->scratch_size) {
        rf_status st = rf_gpu_scratch_reserve(ctx, bytes + (bytes >> 2));
        if (st) return st;
    }
    return rf_gpu_scratch_alloc(ctx, bytes, p);
}

/* ---- mixture of experts (gpu_moe.cu, gpu_moe_gemv.cu; the grouped product in gpu_mmq.cu) ---- */
#define RF_MOE_MAX_EXPERT 1024 /* experts the router takes (32 per lane of a 32-wide warp) */
#define RF_MOE_MAX_K 32        /* choices per token (one per lane) */
/* rf_k_mmq over tiles (expert, first row, end row) of x's rows sorted by expert (qx / rec:
 * rf_k_quantize_x's GB-1 layout of n_rows rows), y [n_rows, n_out] in that order; n_tiles
 * blocks along x (unused tiles: expert -1), tiles of at most 32 rows; MMQ's types and n_in
 * (rf_gpu_mmq_supported) */
extern "C" rf_status rf_gpu_mmq_grouped(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const int8_t *qx,
                                        const uint8_t *rec, const int4 *tiles, int n_tiles, int n_rows, int64_t n_in,
                                        int64_t n_out);
/* the same over tiles of at most bn rows, 32 or 64 (rf_gpu_mmq_grouped_rows: the height for nk
 * slots over n_expert experts; each output the same bits either way) */
extern "C" rf_status rf_gpu_mmq_grouped_bn(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const int8_t *qx,
                                           const uint8_t *rec, const int4 *tiles, int n_tiles, int bn, int n_rows,
                                           int64_t n_in, int64_t n_out);
extern "C" int rf_gpu_mmq_grouped_rows(int64_t nk, int64_t n_expert);
/* the record kind of the int8-x MoE GEMV for (t, n_in) (rf_k_quantize_x's rk), -1: f32 x */
extern "C" int rf_moe_gemv_rk(rf_type t, int64_t n_in);
/* the indirect GEMV: int8 x (qx / rec, from rf_k_quantize_x with rf_moe_gemv_rk's records) or,
 * qx NULL, f32 x; y [nk, n_out] */
rf_status rf_moe_gemv_launch(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, const int8_t *qx,
                             const uint8_t *rec, const float *x, const int32_t *ids, const float *bias, int64_t n_in,
                             int64_t n_out, int64_t row_bytes, int64_t k, int64_t n_expert, bool x_per_slot,
                             int64_t nk);
/* the decode fusions of the indirect GEMV (x as rf_moe_gemv_launch's, one type for wg and wu):
 * y [nk, n_out] = glu(kind)(Wg_e x_{s/k} (+ bg[e]), Wu_e x_{s/k} (+ bu[e])), the bits of two
 * rf_moe_gemv_launch and the glu kernel; and y [n, n_out] = sum over j in order of
 * wts[t k + j] (W_e x_{t k + j} (+ bias[e])), the bits of rf_moe_gemv_launch (x per slot) and
 * rf_k_moe_combine */
rf_status rf_moe_gemv_glu_launch(rf_gpu_ctx *ctx, float *y, const void *wg, const void *wu, rf_type t,
                                 const int8_t *qx, const uint8_t *rec, const float *x, const int32_t *ids,
                                 const float *bg, const float *bu, int64_t n_in, int64_t n_out, int64_t row_bytes,
                                 int64_t k, int64_t n_expert, int kind, int64_t nk);
rf_status rf_moe_gemv_comb_launch(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, const int8_t *qx,
                                  const uint8_t *rec, const float *x, const int32_t *ids, const float *bias,
                                  const float *wts, int64_t n_in, int64_t n_out, int64_t row_bytes, int64_t k,
                                  int64_t n_expert, int64_t n);
/* moe_gemv_glu over 32 rows a block with the GLU's output quantized for the down product in
 * its epilogue (xqd: rf_gpu_xq_bytes(nk, n_out), rf_k_quantize_x's GB-1 layout with record kind
 * rkd; y as rf_moe_gemv_glu_launch's), where rf_moe_gemv_gluq_takes (int8 x, rows of at most 8
 * units, n_out a multiple of 32) */
bool rf_moe_gemv_gluq_takes(rf_type t, int64_t n_in, int64_t n_out);
rf_status rf_moe_gemv_gluq_launch(rf_gpu_ctx *ctx, float *y, void *xqd, int rkd, const void *wg, const void *wu,
                                  rf_type t, const int8_t *qx, const uint8_t *rec, const int32_t *ids, const float *bg,
                                  const float *bu, int64_t n_in, int64_t n_out, int64_t row_bytes, int64_t k,
                                  int64_t n_expert, int kind, int64_t nk);
/* a part of a MoE scratch block, rounded up to 256 bytes */
static inline size_t rf_moe_al(size_t b) { return (b + 255) & ~(size_t)255; }
/* gpu_moe.cu's kernels for the grouped paths (see there): the router with h's quantization
 * (records of kind rk; xq NULL: routing only); the ids grouped by expert into pos / src and the
 * tile table (tiles of at most bn sorted rows, n_tiles entries, the unused ones expert -1); the
 * sorted products ys scattered back to their slots (+ bias) and summed with the router's
 * weights in slot order into y [n, n_out] */
struct rf_gpu_moe_ffn_desc;
rf_status rf_moe_route_q_launch(rf_gpu_ctx *ctx, const struct rf_gpu_moe_ffn_desc *d, void *xq, int rk);
rf_status rf_moe_group_launch(rf_gpu_ctx *ctx, int32_t *pos, int32_t *src, int4 *tiles, const int32_t *ids, int64_t nk,
                              int64_t k, int64_t n_expert, bool x_per_slot, int bn, int n_tiles);
rf_status rf_moe_scatter_comb_launch(rf_gpu_ctx *ctx, float *y, const float *ys, const int32_t *pos,
                                     const int32_t *ids, const float *bias, const float *wts, int64_t n, int64_t k,
                                     int64_t n_out, int64_t n_expert);
/* the grouped GEMV paths (gpu_moe_ggemv.cu): moe_ffn's whole block, matmul_id_glu's and
 * matmul_id_combine's products (arguments as those ops'; gpu_moe.cu decides when) */
rf_status rf_moe_ffn_ggemv(rf_gpu_ctx *ctx, float *y, const struct rf_gpu_moe_ffn_desc *d);
rf_status rf_moe_glu_ggemv(rf_gpu_ctx *ctx, float *y, const void *wg, const void *wu, rf_type t, int64_t n_out,
                           int64_t n_expert, int64_t n_in, const float *x, const int32_t *ids, const float *bg,
                           const float *bu, int64_t n, int64_t k, int glu);
rf_status rf_moe_comb_ggemv(rf_gpu_ctx *ctx, float *y, const void *w, rf_type t, int64_t n_out, int64_t n_expert,
                            int64_t n_in, const float *x, const int32_t *ids, const float *bias, const float *wts,
                            int64_t n, int64_t k);
/* the indirect GEMV over expert tiles (rf_k_moe_group's, RF_MOE_TILE rows each) of slots sorted
 * by expert, x qx / rec with rf_moe_gemv_rk's records, sorted row p's x row p (src NULL) or
 * src[p] / xdiv: ys [rows, n_out] in sorted order, without bias; every slot bit-identical to
 * rf_moe_gemv_launch's (gpu_moe_ggemv.cu) */
#define RF_MOE_TILE 8 /* slots per tile of the grouped GEMV */
rf_status rf_moe_gemv_tiles_launch(rf_gpu_ctx *ctx, float *ys, const void *w, rf_type t, const int8_t *qx,
                                   const uint8_t *rec, const int32_t *src, int64_t xdiv, const int4 *tiles,
                                   int64_t n_tiles, int64_t n_in, int64_t n_out, int64_t row_bytes);
/* the grouped GEMV's gate + up + GLU over the same tiles (moe_ffn's grouped GEMV path): x rows
 * qx / rec per token (rf_moe_gemv_rk's records), the token of sorted row p is src[p] / k; g [nk,
 * n_out] = the GLU in slot order src[p] (the bits of rf_moe_gemv_glu_launch), and (xqd not NULL)
 * the same values quantized as rf_k_quantize_x<1, rkd> into xqd's sorted rows
 * (rf_gpu_xq_bytes(nk, n_out); n_out a multiple of 32) for the down product; at most 65535 tiles
 * and slots */
/* whether the grouped GEMV runs its staged form for K-quant rows of n_in of type t (the knob
 * RF_GPU_MOE_STAGE on, the gate + up block's shared memory within the device's limit) */
bool rf_moe_ggemv_staged(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in);
rf_status rf_moe_ggemv_glu_launch(rf_gpu_ctx *ctx, float *g, void *xqd, int rkd, const void *wg, const void *wu,
                                  rf_type t, const int8_t *qx, const uint8_t *rec, const int32_t *src,
                                  const int4 *tiles, int64_t n_tiles, const float *bg, const float *bu, int64_t n_in,
                                  int64_t n_out, int64_t row_bytes, int64_t k, int kind, int64_t nk);

static inline unsigned rf_gpu_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > 65535LL * 1024) b = 65535LL * 1024; /* grid-stride loops cover the rest */
    return (unsigned)(b < 1 ? 1 : b);
}

/* silu / gelu_tanh: as rf_ref_silu / rf_ref_gelu_tanh, in f32 (one definition: the GLU kernel
 * and the GLU fused with the activation quantization must agree bit for bit). */
static __device__ __forceinline__ float rf_silu(float x) { return x / (1.0f + expf(-x)); }
static __device__ __forceinline__ float rf_gelu_tanh(float x) {
    const float c = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
/* swiglu_oai (gpt-oss): g = min(gate, 7), u = clamp(up, -7, 7), y = g / (1 + e^(-1.702 g)) * (u + 1),
 * ggml's order of operations (NaN passes the clamps); as rf_ref_swiglu_oai (one definition: the
 * GLU kernel and the MoE gate/up GEMV's GLU agree bit for bit). */
static __device__ __forceinline__ float rf_swiglu_oai(float gv, float uv) {
    const float lim = 7.0f, alpha = 1.702f;
    const float x = lim < gv ? lim : gv, y = uv < -lim ? -lim : (lim < uv ? lim : uv);
    return x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
}

#endif
