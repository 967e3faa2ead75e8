/* gpu_tp_gather.cu — the LM head split by vocabulary rows over several GPUs (docs/tp.md): each
 * GPU's logit slice written into GPU 0's [rows x n_vocab] logits by a copy kernel on that GPU
 * (stores over NVLink through peer access), ordered by events so that the copy follows GPU 0's
 * work so far and GPU 0's sampler follows the copy. A kernel, not a peer memcpy: kernel nodes on
 * every GPU are what the split's one graph already holds (NCCL's included), while peer copies
 * are not reliably capturable; without peer access the runtime's staged copy (eager steps). */
#include "backend/backend.h"
#include "backend/gpu/gpu_internal.h"

#include <stdlib.h>

struct rf_tp_gather {
    int n;
    rf_backend **bes; /* [n] the split's backends (rank s = bes[s]) */
    cudaEvent_t *lead; /* [n] on GPU 0: GPU 0's stream up to the copy of slice s */
    cudaEvent_t *done; /* [n] on GPU s: slice s copied */
    bool *peer;        /* [n] GPU s may store into GPU 0's memory */
};

/* dst[r * dld + c] = src[r * sld + c] for r < rows, c < width (f32; dst on another GPU through
 * peer access). One thread per element, grid-stride. Exact (a copy). */
__global__ void rf_k_gather_cols(float *dst, int64_t dld, const float *src, int64_t sld, int64_t rows,
                                 int64_t width) {
    const int64_t total = rows * width;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / width, c = e % width;
        dst[r * dld + c] = src[r * sld + c];
    }
}
extern "C" rf_gpu_ctx *rf_backend_gpu_ctx(rf_backend *be); /* gpu_backend.c */

extern "C" void rf_tp_gather_free(rf_tp_gather *g) {
    if (!g) return;
    for (int s = 1; s < g->n; s++) {
        if (g->lead && g->lead[s]) {
            (void)cudaSetDevice(rf_backend_gpu_ctx(g->bes[0])->device);
            (void)cudaEventDestroy(g->lead[s]);
        }
        if (g->done && g->done[s]) {
            (void)cudaSetDevice(rf_backend_gpu_ctx(g->bes[s])->device);
            (void)cudaEventDestroy(g->done[s]);
        }
    }
    if (g->n > 0) (void)cudaSetDevice(rf_backend_gpu_ctx(g->bes[0])->device);
    free(g->lead);
    free(g->done);
    free(g->peer);
    free(g->bes);
    free(g);
}

/* GPU s may write GPU 0's memory directly (NVLink / PCIe P2P) where the pair allows it; NCCL may
 * have enabled it already, which is no error. Without it the runtime stages the copy. */
static rf_status enable_peer(int from, int to, bool *on) {
    int ok = 0;
    *on = false;
    if (cudaDeviceCanAccessPeer(&ok, from, to) != cudaSuccess || !ok) {
        (void)cudaGetLastError();
        return RF_OK;
    }
    RF_GPU_CHECK(cudaSetDevice(from));
    cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
    else if (e != cudaSuccess)
        return rf_set_error(RF_ERR_DEVICE, "--tp: enabling GPU %d's access to GPU %d: %s", from, to,
                            cudaGetErrorString(e));
    *on = true;
    return RF_OK;
}

static rf_status gather_init(rf_tp_gather *g) {
    const int d0 = rf_backend_gpu_ctx(g->bes[0])->device;
    for (int s = 1; s < g->n; s++) {
        const int ds = rf_backend_gpu_ctx(g->bes[s])->device;
        rf_status st = enable_peer(ds, d0, &g->peer[s]);
        if (st) return st;
        RF_GPU_CHECK(cudaSetDevice(d0));
        RF_GPU_CHECK(cudaEventCreateWithFlags(&g->lead[s], cudaEventDisableTiming));
        RF_GPU_CHECK(cudaSetDevice(ds));
        RF_GPU_CHECK(cudaEventCreateWithFlags(&g->done[s], cudaEventDisableTiming));
    }
    RF_GPU_CHECK(cudaSetDevice(d0));
    return RF_OK;
}

extern "C" rf_status rf_tp_gather_new(rf_backend *const *bes, int n, rf_tp_gather **out) {
    *out = NULL;
    rf_tp_gather *g = (rf_tp_gather *)calloc(1, sizeof *g);
    if (g) {
        g->bes = (rf_backend **)calloc((size_t)n, sizeof *g->bes);
        g->lead = (cudaEvent_t *)calloc((size_t)n, sizeof *g->lead);
        g->done = (cudaEvent_t *)calloc((size_t)n, sizeof *g->done);
        g->peer = (bool *)calloc((size_t)n, sizeof *g->peer);
    }
    if (!g || !g->bes || !g->lead || !g->done || !g->peer) {
        if (g) free(g->bes), free(g->lead), free(g->done), free(g->peer);
        free(g);
        return rf_set_error(RF_ERR_OOM, "--tp: out of memory");
    }
    g->n = n;
    for (int s = 0; s < n; s++) g->bes[s] = bes[s];
    rf_status st = gather_init(g);
    if (st) {
        rf_tp_gather_free(g);
        return st;
    }
    *out = g;
    return RF_OK;
}

extern "C" rf_status rf_tp_gather_cols(rf_tp_gather *g, int s, rf_tensor *dst, int64_t col0, const rf_tensor *src,
                                       int64_t rows, int64_t width) {
    if (!g || s < 0 || s >= g->n || rows < 0 || width <= 0 || col0 < 0 || col0 + width > dst->ne[0] ||
        rows > dst->ne[1] || rows > src->ne[1] || width > src->ne[0])
        return rf_set_error(RF_ERR_INVALID_ARG, "--tp: gathering %lld x %lld logits of GPU %d at column %lld: bad shape",
                            (long long)rows, (long long)width, s, (long long)col0);
    if (rows == 0) return RF_OK;
    rf_gpu_ctx *c0 = rf_backend_gpu_ctx(g->bes[0]), *cs = rf_backend_gpu_ctx(g->bes[s]);
    float *d = (float *)dst->data + col0;
    const size_t dpitch = (size_t)dst->ne[0] * sizeof(float), spitch = (size_t)src->ne[0] * sizeof(float);
    const size_t wb = (size_t)width * sizeof(float);
    RF_GPU_CHECK(cudaSetDevice(c0->device));
    if (s == 0) { /* GPU 0's own slice: in its stream's order already */
        RF_GPU_CHECK(cudaMemcpy2DAsync(d, dpitch, src->data, spitch, wb, (size_t)rows, cudaMemcpyDefault, c0->stream));
        return RF_OK;
    }
    /* the copy writes GPU 0's logits: after GPU 0's work so far (its previous step's sampler read
     * them); GPU 0's next work (the sampler) after the copy */
    RF_GPU_CHECK(cudaEventRecord(g->lead[s], c0->stream));
    RF_GPU_CHECK(cudaSetDevice(cs->device));
    RF_GPU_CHECK(cudaStreamWaitEvent(cs->stream, g->lead[s], 0));
    if (g->peer[s]) {
        rf_k_gather_cols<<<rf_gpu_blocks(rows * width, 256), 256, 0, cs->stream>>>(d, dst->ne[0], (const float *)src->data,
                                                                                   src->ne[0], rows, width);
        rf_status st = RF_GPU_LAUNCHED(cs, "rf_k_gather_cols");
        if (st) return st;
    } else {
        RF_GPU_CHECK(cudaMemcpy2DAsync(d, dpitch, src->data, spitch, wb, (size_t)rows, cudaMemcpyDefault, cs->stream));
    }
    RF_GPU_CHECK(cudaEventRecord(g->done[s], cs->stream));
    RF_GPU_CHECK(cudaSetDevice(c0->device));
    RF_GPU_CHECK(cudaStreamWaitEvent(c0->stream, g->done[s], 0));
    return RF_OK;
}
