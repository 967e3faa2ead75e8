/* gpu_tp_p2p.cu — the one-shot all-reduce of gpu_tp_p2p.h: every GPU of a split in one process
 * reads its peers' memory directly (cudaDeviceEnablePeerAccess), so one kernel per rank copies its
 * buffer into a peer-visible scratch, meets every peer at a per-block barrier and sums all the
 * copies in rank order, in a few microseconds where an NCCL call inside the graph costs ~10. */
#include "backend/gpu/gpu_cluster.cuh"
#include "backend/gpu/gpu_gemv.cuh"
#include "backend/gpu/gpu_internal.h"
#include "backend/gpu/gpu_tp_p2p.h"
#include "core/test_hooks.h"

#include <stdio.h>
#include <stdlib.h>

#if defined(RF_CUDA_BUILD)

/* A FIXED grid: every call launches the same blocks of the same size on every rank, whatever n
 * is, and element chunk c (4 floats) belongs to block (c / THREADS) % BLOCKS (a grid-stride loop).
 * Two things rest on that (the race argument below): every block takes part in every call, so
 * block b's barrier count is the call count, equal on every rank; and the chunks a block reads
 * from a peer are exactly the ones the peer's block of the same index wrote before it signalled.
 * 64 blocks of 512 threads: 128 Ki floats a pass (a 32-token step of an 8192-wide model in two),
 * every block resident at once on a GPU of 64 SMs or more (a block only ever waits for the peers'
 * block of its own index, so even a GPU with fewer SMs makes progress as blocks retire in order). */
#define P2P_BLOCKS 64
#define P2P_THREADS 512
/* the flags array of a rank (u32, in its own memory): flags[b][q] (the call count peer q last
 * reached at block b's barrier, written by q), then counter[b] (this rank's calls, per block),
 * then the dead word (set when any rank's wait timed out: later kernels return at once) */
#define CTL_FLAGS 0
#define CTL_COUNT (P2P_BLOCKS * RF_P2P_MAX_RANKS)
#define CTL_DEAD (CTL_COUNT + P2P_BLOCKS)
#define CTL_WORDS (CTL_DEAD + 1)
/* the error word in mapped host memory: 0 none, STOPPED the host's abort, else TIMEOUT + rank * 256
 * + peer: rank's wait for peer outlived the bound */
#define P2P_STOPPED 1
#define P2P_TIMEOUT 0x10000

/* The fused all-reduce + norm's own channel (rf_k_p2p_add_rmsnorm): NB_NORM blocks at most, block
 * b's region of the scratch the 1,024 floats from b * 1024 in every call (whatever the row count),
 * with flags and counters per block as above; the dead word is the main channel's. Block b's
 * region and counter being its own in every call, the argument of the two halves holds per block. */
#define NB_NORM 128
#define NORM_ELEMS (NB_NORM * 1024)
#define NCTL_FLAGS 0
#define NCTL_COUNT (NB_NORM * RF_P2P_MAX_RANKS)
#define NCTL_WORDS (NCTL_COUNT + NB_NORM)

struct rf_p2p_peers {
    float *scratch[RF_P2P_MAX_RANKS]; /* rank r's scratch: 2 halves (call parity) of N slots of `half` floats */
    unsigned *ctl[RF_P2P_MAX_RANKS];  /* rank r's flags array (CTL_*) */
    float *nscratch[RF_P2P_MAX_RANKS]; /* the norm channel's: 2 halves of N slots of NORM_ELEMS floats */
    unsigned *nctl[RF_P2P_MAX_RANKS];  /* the norm channel's flags and counters (NCTL_*) */
};

struct rf_gpu_p2p {
    int n;
    rf_gpu_ctx *ctx[RF_P2P_MAX_RANKS];
    rf_p2p_peers peers; /* every rank's pointers, valid on every rank (peer access) */
    size_t half;        /* floats in one half of a scratch (the most a call takes) */
    int64_t timeout_ms;
    volatile int *err;  /* mapped pinned host memory (one word, every rank's kernels write it) */
    int *err_dev;       /* the same word as the kernels see it */
};

/* ---- device side -------------------------------------------------------------------------- */

static __device__ __forceinline__ unsigned long long p2p_now_ns(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* System-scope release store / acquire load: the release makes every write ordered before it
 * (this thread's, and the block's through the __syncthreads before it: the PTX memory model's
 * cumulativity) visible to a thread on another GPU whose acquire load sees the stored value. The
 * PTX ISA defines st.release as fence.acq_rel + the store, so no separate __threadfence_system is
 * needed (vLLM's custom all-reduce signals the same way). Before sm_70: a full system fence and
 * volatile accesses. */
static __device__ __forceinline__ void p2p_store_release(unsigned *p, unsigned v) {
#if __CUDA_ARCH__ >= 700
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
    __threadfence_system();
    *(volatile unsigned *)p = v;
#endif
}
static __device__ __forceinline__ unsigned p2p_load_acquire(const unsigned *p) {
    unsigned v;
#if __CUDA_ARCH__ >= 700
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#else
    v = *(const volatile unsigned *)p;
    __threadfence_system();
#endif
    return v;
}

/* Spins until *flag reaches call e (compared modulo 2^32: a peer is at most one call ahead, see
 * below). 0 when it did; 1 when the split is dead or the host stopped it (no report of its own);
 * 2 when this wait outlived timeout_ns (0: unbounded), by %globaltimer. The host word is read
 * once every 1024 spins only: a read over PCIe costs about a microsecond, and a healthy wait is
 * a few spins. */
static __device__ int p2p_wait(const unsigned *flag, unsigned e, const volatile unsigned *dead, const volatile int *err,
                               unsigned long long timeout_ns) {
    unsigned long long t0 = 0;
    for (unsigned it = 0;; it++) {
        if ((int)(p2p_load_acquire(flag) - e) >= 0) return 0;
        if (*dead) return 1;
        if ((it & 1023u) == 1023u && *err) return 1;
        if (timeout_ns) {
            const unsigned long long t = p2p_now_ns();
            if (it == 0) t0 = t;
            else if (t - t0 > timeout_ns) return 2;
        }
    }
}

/* Thread q of a block (q < nr, q != rank; the others return at once) meets peer q at the block's
 * barrier of call e: stores e into the peer's flags[blk][rank] (release, system scope) and spins
 * on its own flags[blk][q] until it reaches e (p2p_wait). A wait that outlived the timeout says
 * so to the host (err: which rank waited for which) and to every rank (their dead words), then
 * gives up; any failed wait sets *fail. flags: a channel's flag arrays, one per rank (p.ctl or
 * p.nctl, both with the flags at offset 0), own = flags[rank]; dead: this rank's dead word (the
 * main channel's, whichever channel meets). */
static_assert(CTL_FLAGS == 0 && NCTL_FLAGS == 0, "p2p_meet indexes a channel's flags from its start");
static __device__ __forceinline__ void p2p_meet(unsigned *const *flags, unsigned *own, const unsigned *dead,
                                                const rf_p2p_peers &p, int nr, int rank, int blk, unsigned e,
                                                unsigned long long timeout_ns, int *err, int *fail) {
    const int q = (int)threadIdx.x;
    if (q >= nr || q == rank) return;
    p2p_store_release(flags[q] + blk * RF_P2P_MAX_RANKS + rank, e);
    const int w = p2p_wait(own + blk * RF_P2P_MAX_RANKS + q, e, (const volatile unsigned *)dead, (const volatile int *)err,
                           timeout_ns);
    if (w == 2) { /* q never came: say so to the host and to every rank, then give up */
        *(volatile int *)err = P2P_TIMEOUT + rank * 256 + q;
        for (int r = 0; r < nr; r++) *(volatile unsigned *)(p.ctl[r] + CTL_DEAD) = 1u;
        __threadfence_system();
    }
    if (w) *fail = 1;
}

/* One rank's share of the all-reduce of buf[0..n) (n4 = n / 4 float4 chunks, the n % 4 tail by
 * block 0). Each block b:
 *  1. e = counter[b] + 1 (the call number, the same on every rank; stored back after the copy);
 *     parity e & 1 picks the half of the scratch; copies its chunks of buf into its own
 *     scratch[parity];
 *  2. __syncthreads, then thread q (q != rank) stores e into peer q's flags[b][rank] (release,
 *     system scope) and spins on its own flags[b][q] until it reaches e (acquire);
 *  3. __syncthreads, then sums every rank's scratch[parity] chunks in rank order, ((x0 + x1) + x2)
 *     + ..., reading with L2-only loads (ld.cg: never a stale L1 line of an earlier call), and
 *     writes the sum over buf.
 * Why one barrier per call and two halves are race-free. Reads: a peer's chunk is read in step 3
 * of call e only after the peer's block b signalled e, which it did after writing those chunks
 * (the same grid on both ranks: the same chunks). Reuse: rank q reads rank r's half (e & 1) in
 * call e; r next writes that half in call e + 2, step 1, after its block b passed barrier e + 1,
 * so after q's block b signalled e + 1; q did that in its kernel of call e + 1, which started only
 * once q's kernel of call e had finished (kernels on one stream run one after another; this one
 * is never launched as a programmatic dependent), so every read of call e on q (every block) is
 * done before r overwrites anything. Call e + 1 writes the other half, which nobody reads in call
 * e. One half would not do: after barrier e a rank may start call e + 1 and overwrite its scratch
 * while a slower peer still reads call e's values. Flags: r can be at most one call ahead of q at
 * block b (to signal e + 1 it must first have seen q's e), so q compares with >= (modulo 2^32),
 * never missing an e that was overwritten by e + 1. Counters live in device memory and advance
 * in the kernel, so a CUDA graph holding these launches replays correctly (nothing on the host
 * is frozen into it but the pointers, which never change). */
template <int N>
__global__ void __launch_bounds__(P2P_THREADS)
    rf_k_p2p_allreduce(const __grid_constant__ rf_p2p_peers p, float *buf, long long n, long long half, int rank,
                       unsigned long long timeout_ns, int *err, int trigger) {
    if (trigger) rf_pdl_trigger(); /* the next kernel (the norm) may launch and wait for this one's end */
    __shared__ int s_fail;
    const int b = blockIdx.x, tid = threadIdx.x;
    unsigned *own = p.ctl[rank];
    /* every thread reads the count (its latency overlaps the first loads of buf); thread 0 writes
     * it back after the __syncthreads below, when no thread of the block reads it any more. Only
     * block b of this rank touches counter[b]; the next call's kernel starts after this one ends. */
    const unsigned e = own[CTL_COUNT + b] + 1;
    if (tid == 0) s_fail = 0;
    const long long off = (long long)(e & 1u) * N * half, n4 = n >> 2, tail0 = n4 << 2; /* (slot 0 of the push layout) */
    const long long first = (long long)b * P2P_THREADS + tid, stride = (long long)P2P_BLOCKS * P2P_THREADS;
    float *mine = p.scratch[rank] + off;
    for (long long c = first; c < n4; c += stride) ((float4 *)mine)[c] = ((const float4 *)buf)[c];
    if (b == 0 && tid < n - tail0) mine[tail0 + tid] = buf[tail0 + tid];
    __syncthreads();
    if (tid == 0) own[CTL_COUNT + b] = e;
    p2p_meet(p.ctl, own, own + CTL_DEAD, p, N, rank, b, e, timeout_ns, err, &s_fail);
    __syncthreads();
    if (s_fail) return; /* the split is dead: buf keeps this rank's part; the host fails the step */
    const float *src[N];
#pragma unroll
    for (int r = 0; r < N; r++) src[r] = p.scratch[r] + off;
    for (long long c = first; c < n4; c += stride) {
        float4 v[N];
#pragma unroll
        for (int r = 0; r < N; r++) v[r] = __ldcg((const float4 *)src[r] + c); /* every load in flight at once */
        float4 s = v[0];
#pragma unroll
        for (int r = 1; r < N; r++) s.x += v[r].x, s.y += v[r].y, s.z += v[r].z, s.w += v[r].w;
        ((float4 *)buf)[c] = s;
    }
    if (b == 0 && tid < n - tail0) {
        float s = __ldcg(src[0] + tail0 + tid);
#pragma unroll
        for (int r = 1; r < N; r++) s += __ldcg(src[r] + tail0 + tid);
        buf[tail0 + tid] = s;
    }
}

/* The push form of the same all-reduce (the default; test hook gpu_p2p_pull times the pull form
 * above): each block stores its chunks of buf straight into every peer's scratch, in the slot of
 * this rank (rank q's scratch holds N slots a half: slot r is what rank r pushed), then signals
 * and waits as above, and sums in rank order from its own memory (its own chunks from buf). A
 * peer's store crosses the link once and the flag after it (the release orders them), where the
 * pull form pays the flag's one-way trip and then a read's round trip. The race argument is the
 * pull form's with "r writes q's slot r" for "q reads r's scratch": r writes its slot in q's half
 * (e & 1) at call e + 2 only after passing barrier e + 1, which q's block b signalled in its kernel
 * of call e + 1, started after q's kernel of call e had read everything. */
template <int N>
__global__ void __launch_bounds__(P2P_THREADS)
    rf_k_p2p_allreduce_push(const __grid_constant__ rf_p2p_peers p, float *buf, long long n, long long half, int rank,
                            unsigned long long timeout_ns, int *err, int trigger) {
    if (trigger) rf_pdl_trigger(); /* the next kernel (the norm) may launch and wait for this one's end */
    __shared__ int s_fail;
    const int b = blockIdx.x, tid = threadIdx.x;
    unsigned *own = p.ctl[rank];
    const unsigned e = own[CTL_COUNT + b] + 1;
    if (tid == 0) s_fail = 0;
    const long long off = (long long)(e & 1u) * N * half, n4 = n >> 2, tail0 = n4 << 2;
    const long long first = (long long)b * P2P_THREADS + tid, stride = (long long)P2P_BLOCKS * P2P_THREADS;
    for (long long c = first; c < n4; c += stride) {
        const float4 v = ((const float4 *)buf)[c];
#pragma unroll
        for (int q = 0; q < N; q++)
            if (q != rank) ((float4 *)(p.scratch[q] + off + (long long)rank * half))[c] = v;
    }
    if (b == 0 && tid < n - tail0) {
        const float v = buf[tail0 + tid];
#pragma unroll
        for (int q = 0; q < N; q++)
            if (q != rank) p.scratch[q][off + (long long)rank * half + tail0 + tid] = v;
    }
    __syncthreads();
    if (tid == 0) own[CTL_COUNT + b] = e;
    p2p_meet(p.ctl, own, own + CTL_DEAD, p, N, rank, b, e, timeout_ns, err, &s_fail);
    __syncthreads();
    if (s_fail) return;
    const float *src[N];
#pragma unroll
    for (int r = 0; r < N; r++) src[r] = r == rank ? buf : p.scratch[rank] + off + (long long)r * half;
    for (long long c = first; c < n4; c += stride) {
        float4 v[N];
#pragma unroll
        for (int r = 0; r < N; r++) v[r] = __ldcg((const float4 *)src[r] + c);
        float4 s = v[0];
#pragma unroll
        for (int r = 1; r < N; r++) s.x += v[r].x, s.y += v[r].y, s.z += v[r].z, s.w += v[r].w;
        ((float4 *)buf)[c] = s;
    }
    if (b == 0 && tid < n - tail0) {
        float s = __ldcg(src[0] + tail0 + tid);
#pragma unroll
        for (int r = 1; r < N; r++) s += __ldcg(src[r] + tail0 + tid);
        buf[tail0 + tid] = s;
    }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* a float of block `rank`'s shared memory in this cluster (distributed shared memory) */
static __device__ __forceinline__ float p2p_ld_cluster(const float *smem, unsigned rank) {
    unsigned a = (unsigned)__cvta_generic_to_shared(smem), r;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(r) : "memory");
    return v;
}
#else
static __device__ __forceinline__ float p2p_ld_cluster(const float *smem, unsigned rank) {
    (void)smem, (void)rank;
    RF_DEVICE_TRAP();
    return 0.0f;
}
#endif

/* The all-reduce of a decode step's partial product, the residual add and the next block's RMS
 * norm (and its int8 quantization) in one kernel per rank, where the all-reduce kernel and then
 * rf_k_rmsnorm_quantize_x(_cl) ran: the same bits as that pair. Block (part, row) of a cluster of
 * nsl = ceil(n / 1024) blocks a row holds element i = part * 1024 + threadIdx.x of its row:
 *  1. pushes its rank's partial part[row, i] into every peer's norm scratch (slot rank), signals
 *     and waits for every peer as rf_k_p2p_allreduce_push does (per block, its own counters);
 *  2. s = the partials summed in rank order (the all-reduce's bits), v = x + s (the norm's
 *     residual add);
 *  3. every block's v into shared memory; after a cluster barrier each thread gathers v[k] =
 *     element k * 1024 + threadIdx.x from block k (DSMEM), the layout rf_k_rmsnorm_quantize_x's
 *     thread holds, so rf_rms_inv<8> forms the same sum of squares (the zeros past nsl add
 *     nothing) and every block the same inv;
 *  4. a second cluster barrier (no block leaves while another reads its shared memory), then x,
 *     h = v * inv * w and, with qx, h quantized as rf_quantize_elem<GB, RK> does.
 * A failed wait (timeout, dead split) still takes both barriers and writes nothing. part is left
 * as it was. launch: grid (nsl, rows), cluster (nsl, 1, 1), 1024 threads, rows * nsl <= NB_NORM,
 * n <= 8192 (the host takes up to NORM_FUSE_MAX); a programmatic dependent launch (everything
 * after its wait). */
template <int GB, int RK>
__global__ void __launch_bounds__(1024)
    rf_k_p2p_add_rmsnorm(const __grid_constant__ rf_p2p_peers p, int nr, int rank, float *hout, int8_t *qx,
                         float4 *dx, float *x, const float *part, const float *w, int n, float eps,
                         unsigned long long timeout_ns, int *err) {
    rf_pdl_trigger();
    rf_pdl_wait();
    __shared__ float sh[1024 / 32], sv[1024];
    __shared__ int s_fail;
    const int nsl = (int)gridDim.x, pt = (int)blockIdx.x, row = (int)blockIdx.y, tid = (int)threadIdx.x;
    const int bid = row * nsl + pt, i = pt * 1024 + tid;
    const long long idx = (long long)row * n + i, slot = (long long)bid * 1024 + tid; /* slot: the block's region */
    unsigned *own = p.nctl[rank];
    const unsigned e = own[NCTL_COUNT + bid] + 1;
    if (tid == 0) s_fail = 0;
    const long long off = (long long)(e & 1u) * nr * NORM_ELEMS;
    const float mine = i < n ? part[idx] : 0.0f;
    if (i < n)
        for (int q = 0; q < nr; q++)
            if (q != rank) p.nscratch[q][off + (long long)rank * NORM_ELEMS + slot] = mine;
    __syncthreads();
    if (tid == 0) own[NCTL_COUNT + bid] = e;
    p2p_meet(p.nctl, own, p.ctl[rank] + CTL_DEAD, p, nr, rank, bid, e, timeout_ns, err, &s_fail);
    __syncthreads();
    const bool fail = s_fail != 0;
    float v = 0.0f;
    if (i < n) {
        float sum = 0.0f;
        for (int r = 0; r < nr; r++) {
            const float pr = r == rank ? mine : __ldcg(p.nscratch[rank] + off + (long long)r * NORM_ELEMS + slot);
            sum = r == 0 ? pr : sum + pr;
        }
        v = x[idx] + sum;
    }
    sv[tid] = v;
    rf_cluster_sync();
    float vk[8];
#pragma unroll
    for (int k = 0; k < 8; k++) vk[k] = k < nsl ? (k == pt ? v : p2p_ld_cluster(sv + tid, (unsigned)k)) : 0.0f;
    const float inv = rf_rms_inv<8>(vk, n, eps, sh);
    rf_cluster_sync(); /* every block's reads of the others' sv are done */
    if (fail) return;
    if (i - (tid % RF_QK) >= n) return; /* whole groups leave together */
    const float hv = v * inv * (w && i < n ? w[i] : 1.0f);
    if (i < n) x[idx] = v, hout[idx] = hv;
    if (qx) rf_quantize_elem<GB, RK>(qx, dx, hv, i, n, row, tid % RF_QK);
}

/* ---- host side ---------------------------------------------------------------------------- */

static rf_status p2p_alloc_rank(rf_gpu_p2p *p, int r) {
    const size_t sbytes = 2 * (size_t)p->n * p->half * sizeof(float), cbytes = CTL_WORDS * sizeof(unsigned);
    cudaError_t e = cudaSetDevice(p->ctx[r]->device);
    if (e == cudaSuccess) e = cudaMalloc((void **)&p->peers.scratch[r], sbytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&p->peers.ctl[r], cbytes);
    if (e == cudaSuccess) e = cudaMemset(p->peers.ctl[r], 0, cbytes);
    if (e == cudaSuccess) e = cudaMemset(p->peers.scratch[r], 0, sbytes);
    const size_t nsbytes = 2 * (size_t)p->n * NORM_ELEMS * sizeof(float), ncbytes = NCTL_WORDS * sizeof(unsigned);
    if (e == cudaSuccess) e = cudaMalloc((void **)&p->peers.nscratch[r], nsbytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&p->peers.nctl[r], ncbytes);
    if (e == cudaSuccess) e = cudaMemset(p->peers.nctl[r], 0, ncbytes);
    if (e == cudaSuccess) e = cudaDeviceSynchronize(); /* (the legacy stream: the zeros land before any use) */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rf_set_error(e == cudaErrorMemoryAllocation ? RF_ERR_OOM : RF_ERR_DEVICE,
                            "p2p all-reduce: %.1f MiB of scratch on GPU %d: %s", (sbytes + cbytes) / 1048576.0,
                            p->ctx[r]->device, cudaGetErrorString(e));
    }
    return RF_OK;
}

/* every ordered pair (a reads b): peer access possible, then enabled (NCCL may have done it) */
static rf_status p2p_enable(rf_gpu_ctx *const *ctxs, int n) {
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            if (a == b) continue;
            const int da = ctxs[a]->device, db = ctxs[b]->device;
            if (da == db)
                return rf_set_error(RF_ERR_INVALID_ARG, "p2p all-reduce: ranks %d and %d are both on GPU %d", a, b, da);
            int ok = 0;
            if (cudaDeviceCanAccessPeer(&ok, da, db) != cudaSuccess) (void)cudaGetLastError(), ok = 0;
            if (!ok)
                return rf_set_error(RF_ERR_UNSUPPORTED, "p2p all-reduce: GPU %d cannot read GPU %d's memory (no peer access)",
                                    da, db);
            cudaError_t e = cudaSetDevice(da);
            if (e == cudaSuccess) e = cudaDeviceEnablePeerAccess(db, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) e = cudaSuccess;
            (void)cudaGetLastError();
            if (e != cudaSuccess)
                return rf_set_error(RF_ERR_DEVICE, "p2p all-reduce: enabling GPU %d's access to GPU %d: %s", da, db,
                                    cudaGetErrorString(e));
        }
    return RF_OK;
}

extern "C" rf_status rf_gpu_p2p_new(rf_gpu_ctx *const *ctxs, int n, size_t max_elems, int64_t timeout_ms,
                                    rf_gpu_p2p **out) {
    *out = NULL;
    if (n < 2 || n > RF_P2P_MAX_RANKS)
        return rf_set_error(RF_ERR_UNSUPPORTED, "p2p all-reduce: %d ranks (it takes 2 to %d GPUs)", n, RF_P2P_MAX_RANKS);
    if (max_elems < 1 || max_elems > ((size_t)1 << 34))
        return rf_set_error(RF_ERR_INVALID_ARG, "p2p all-reduce: a scratch of %zu floats", max_elems);
    int dev = 0;
    (void)cudaGetDevice(&dev);
    rf_status st = p2p_enable(ctxs, n);
    rf_gpu_p2p *p = st ? NULL : (rf_gpu_p2p *)calloc(1, sizeof *p);
    if (!st && !p) st = rf_set_error(RF_ERR_OOM, "p2p all-reduce: out of memory");
    if (!st) {
        p->n = n;
        p->half = (max_elems + 63) & ~(size_t)63; /* each half 256-byte aligned: float4 loads */
        p->timeout_ms = timeout_ms;
        for (int r = 0; r < n; r++) p->ctx[r] = ctxs[r];
        void *h = NULL;
        cudaError_t e = cudaHostAlloc(&h, 64, cudaHostAllocMapped | cudaHostAllocPortable);
        if (e == cudaSuccess) {
            p->err = (volatile int *)h;
            *p->err = 0;
            e = cudaHostGetDevicePointer((void **)&p->err_dev, h, 0);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = rf_set_error(RF_ERR_DEVICE, "p2p all-reduce: mapped host memory for its error word: %s",
                              cudaGetErrorString(e));
        }
    }
    for (int r = 0; p && r < n && !st; r++) st = p2p_alloc_rank(p, r);
    (void)cudaSetDevice(dev);
    if (st) {
        rf_gpu_p2p_free(p);
        return st;
    }
    *out = p;
    return RF_OK;
}

extern "C" size_t rf_gpu_p2p_max(const rf_gpu_p2p *p) { return p ? p->half : 0; }

extern "C" bool rf_gpu_p2p_takes(const rf_gpu_p2p *p, const float *buf, size_t n) {
    return p && n <= p->half && ((uintptr_t)buf & 15) == 0;
}

extern "C" rf_status rf_gpu_p2p_allreduce(rf_gpu_p2p *p, int rank, float *buf, size_t n) {
    if (!p || rank < 0 || rank >= p->n) return rf_set_error(RF_ERR_INVALID_ARG, "p2p all-reduce: rank %d", rank);
    if (!rf_gpu_p2p_takes(p, buf, n))
        return rf_set_error(RF_ERR_INVALID_ARG, "p2p all-reduce: %zu floats at %p (at most %zu, 16-byte aligned)", n,
                            (void *)buf, p->half);
    if (n == 0) return RF_OK;
    rf_gpu_ctx *ctx = p->ctx[rank];
    int dev = 0;
    (void)cudaGetDevice(&dev);
    if (dev != ctx->device) RF_GPU_CHECK(cudaSetDevice(ctx->device)); /* a launch goes to the current device */
    const unsigned long long tns = p->timeout_ms > 0 ? (unsigned long long)p->timeout_ms * 1000000ull : 0ull;
    const dim3 grid(P2P_BLOCKS), block(P2P_THREADS);
    const long long nn = (long long)n, half = (long long)p->half;
    const rf_test_hooks *th = rf_test_hooks_get(); /* tests only: the pull form, for a side-by-side timing */
    const bool pull = th && th->gpu_p2p_pull;
    const int trigger = !(th && th->gpu_p2p_notrigger);
    switch (p->n) {
#define P2P_CASE(N)                                                                                                    \
    case N:                                                                                                            \
        if (pull) rf_k_p2p_allreduce<N><<<grid, block, 0, ctx->stream>>>(p->peers, buf, nn, half, rank, tns, p->err_dev, trigger); \
        else rf_k_p2p_allreduce_push<N><<<grid, block, 0, ctx->stream>>>(p->peers, buf, nn, half, rank, tns, p->err_dev, trigger); \
        break;
        P2P_CASE(2)
        P2P_CASE(3)
        P2P_CASE(4)
        P2P_CASE(5)
        P2P_CASE(6)
        P2P_CASE(7)
        P2P_CASE(8)
#undef P2P_CASE
    }
    /* the launch's own check only: no RF_GPU_SYNC wait or op-time flush here, since this kernel
     * finishes only once every peer's is launched too */
    ctx->last_kernel = "rf_k_p2p_allreduce";
    const cudaError_t e = cudaGetLastError();
    if (dev != ctx->device) (void)cudaSetDevice(dev);
    if (e != cudaSuccess)
        return rf_set_error(RF_ERR_DEVICE, "GPU kernel rf_k_p2p_allreduce (rank %d, GPU %d): launch failed: %s", rank,
                            ctx->device, cudaGetErrorString(e));
    return RF_OK;
}

/* Rows up to 4,096 wide only, where it was measured to pay (two H200s, TP 2, docs/tp.md):
 * llama3-8b (4,096) +8% a decode step, mistral-small-3's 5,120 -0.5% (two rounds), llama2-70b's
 * 8,192 -0.1% on 80 layers and -1.3 / -2.5% on 16. Why only the narrow rows gain was not
 * profiled (in every case the norm after the all-reduce kernel is a programmatic dependent
 * launch that the all-reduce lets start early). */
#define NORM_FUSE_MAX 4096

extern "C" bool rf_gpu_p2p_norm_takes(const rf_gpu_p2p *p, int64_t rows, int64_t n) {
    if (!p || rows < 1 || n < 32 || n > NORM_FUSE_MAX || n % 32) return false;
    if (p->ctx[0]->info.cc_major < 9) return false; /* clusters: sm_90 */
    const int64_t nsl = (n + 1023) / 1024;
    return rows * nsl <= NB_NORM;
}

extern "C" rf_status rf_gpu_p2p_add_rmsnorm(rf_gpu_p2p *p, int rank, float *h, void *xq, rf_type wtype, float *x,
                                          const float *part, const float *w, int64_t rows, int64_t n, float eps) {
    if (!p || rank < 0 || rank >= p->n) return rf_set_error(RF_ERR_INVALID_ARG, "p2p add_rmsnorm: rank %d", rank);
    if (!rf_gpu_p2p_norm_takes(p, rows, n))
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "p2p add_rmsnorm: %lld rows of %lld elements not taken (a row of 32..%d elements, a "
                            "multiple of 32; rows x ceil(elements / 1024) <= %d; sm_90)",
                            (long long)rows, (long long)n, NORM_FUSE_MAX, NB_NORM);
    if (h == x) return rf_set_error(RF_ERR_INVALID_ARG, "p2p add_rmsnorm: h must not alias x");
    rf_gpu_ctx *ctx = p->ctx[rank];
    int gb = 1, rk = 0;
    if (xq) {
        rf_status st = rf_gpu_xq_plan(ctx, wtype, rows, n, &gb, &rk);
        if (st) return st;
        if (((uintptr_t)xq & 15) != 0) return rf_set_error(RF_ERR_INVALID_ARG, "p2p add_rmsnorm: xq not 16-byte aligned");
    }
    int dev = 0;
    (void)cudaGetDevice(&dev);
    if (dev != ctx->device) RF_GPU_CHECK(cudaSetDevice(ctx->device));
    const unsigned long long tns = p->timeout_ms > 0 ? (unsigned long long)p->timeout_ms * 1000000ull : 0ull;
    const size_t tot = (size_t)rows * (size_t)n;
    int8_t *qx = (int8_t *)xq;
    float4 *dx = xq ? (float4 *)((char *)xq + ((tot + 255) & ~(size_t)255)) : NULL;
    const unsigned nsl = (unsigned)((n + 1023) / 1024);
    const dim3 grid(nsl, (unsigned)rows), block(1024), cl(nsl, 1, 1);
#define RF_PN(GB, RK)                                                                                                  \
    rf_gpu_launch_cluster_only(ctx, "rf_k_p2p_add_rmsnorm", true, rf_k_p2p_add_rmsnorm<GB, RK>, grid, block, 0, cl,     \
                               p->peers, p->n, rank, h, qx, dx, x, part, w, (int)n, eps, tns, p->err_dev)
    /* (no RF_GPU_SYNC wait or op-time mark after it, as rf_gpu_p2p_allreduce: the kernel ends only
     * once every peer's is launched too) */
    rf_status st;
    switch (gb * 4 + rk) { /* as rf_gemv_launch_rmsnorm_quantize_x */
    case 5: st = RF_PN(1, 1); break;
    case 6: st = RF_PN(1, 2); break;
    case 8: st = RF_PN(2, 0); break;
    case 9: st = RF_PN(2, 1); break;
    case 10: st = RF_PN(2, 2); break;
    case 16: st = RF_PN(4, 0); break;
    case 17: st = RF_PN(4, 1); break;
    case 18: st = RF_PN(4, 2); break;
    case 32: st = RF_PN(8, 0); break;
    case 33: st = RF_PN(8, 1); break;
    case 34: st = RF_PN(8, 2); break;
    default: st = RF_PN(1, 0); break;
    }
#undef RF_PN
    if (dev != ctx->device) (void)cudaSetDevice(dev);
    return st;
}

extern "C" bool rf_gpu_p2p_failed(const rf_gpu_p2p *p, char *msg, size_t cap) {
    const int w = p ? *p->err : 0;
    if (w < P2P_TIMEOUT) return false;
    const int rank = (w - P2P_TIMEOUT) / 256, peer = (w - P2P_TIMEOUT) % 256;
    const int dr = rank < p->n ? p->ctx[rank]->device : -1, dq = peer < p->n ? p->ctx[peer]->device : -1;
    if (msg && cap)
        snprintf(msg, cap, "the peer-to-peer all-reduce on GPU %d waited more than %lld ms (RF_TP_TIMEOUT_MS) for GPU %d",
                 dr, (long long)p->timeout_ms, dq);
    return true;
}

extern "C" void rf_gpu_p2p_stop(rf_gpu_p2p *p) {
    if (p && p->err && *p->err == 0) *p->err = P2P_STOPPED;
}

extern "C" void rf_gpu_p2p_free(rf_gpu_p2p *p) {
    if (!p) return;
    rf_gpu_p2p_stop(p); /* a kernel still waiting for a peer ends (within ~1 ms) rather than blocking the frees */
    int dev = 0;
    (void)cudaGetDevice(&dev);
    for (int r = 0; r < p->n; r++) {
        if (cudaSetDevice(p->ctx[r]->device) != cudaSuccess) continue;
        (void)cudaStreamSynchronize(p->ctx[r]->stream);
        if (p->peers.scratch[r]) cudaFree(p->peers.scratch[r]);
        if (p->peers.ctl[r]) cudaFree(p->peers.ctl[r]);
        if (p->peers.nscratch[r]) cudaFree(p->peers.nscratch[r]);
        if (p->peers.nctl[r]) cudaFree(p->peers.nctl[r]);
    }
    if (p->err) cudaFreeHost((void *)p->err);
    (void)cudaGetLastError();
    (void)cudaSetDevice(dev);
    free(p);
}

#else /* HIP: not built (no peer-access all-reduce yet); the split uses its NCCL/RCCL path */

extern "C" rf_status rf_gpu_p2p_new(rf_gpu_ctx *const *ctxs, int n, size_t max_elems, int64_t timeout_ms,
                                    rf_gpu_p2p **out) {
    (void)ctxs, (void)n, (void)max_elems, (void)timeout_ms;
    *out = NULL;
    return rf_set_error(RF_ERR_UNSUPPORTED, "p2p all-reduce: not built for HIP");
}
extern "C" size_t rf_gpu_p2p_max(const rf_gpu_p2p *p) { (void)p; return 0; }
extern "C" bool rf_gpu_p2p_takes(const rf_gpu_p2p *p, const float *buf, size_t n) {
    (void)p, (void)buf, (void)n;
    return false;
}
extern "C" rf_status rf_gpu_p2p_allreduce(rf_gpu_p2p *p, int rank, float *buf, size_t n) {
    (void)p, (void)rank, (void)buf, (void)n;
    return rf_set_error(RF_ERR_UNSUPPORTED, "p2p all-reduce: not built for HIP");
}
extern "C" bool rf_gpu_p2p_norm_takes(const rf_gpu_p2p *p, int64_t rows, int64_t n) {
    (void)p, (void)rows, (void)n;
    return false;
}
extern "C" rf_status rf_gpu_p2p_add_rmsnorm(rf_gpu_p2p *p, int rank, float *h, void *xq, rf_type wtype, float *x,
                                          const float *part, const float *w, int64_t rows, int64_t n, float eps) {
    (void)p, (void)rank, (void)h, (void)xq, (void)wtype, (void)x, (void)part, (void)w, (void)rows, (void)n, (void)eps;
    return rf_set_error(RF_ERR_UNSUPPORTED, "p2p all-reduce: not built for HIP");
}
extern "C" bool rf_gpu_p2p_failed(const rf_gpu_p2p *p, char *msg, size_t cap) {
    (void)p, (void)msg, (void)cap;
    return false;
}
extern "C" void rf_gpu_p2p_stop(rf_gpu_p2p *p) { (void)p; }
extern "C" void rf_gpu_p2p_free(rf_gpu_p2p *p) { (void)p; }

#endif
