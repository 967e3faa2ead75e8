/* gpu_sample.cu — the sampler on the device: greedy, temperature, top-k, min-p, top-p and a
 * seeded draw, one block per sequence, one int32 per sequence back to the host. It picks the
 * token rf_ref_sample would pick for the same u (u from a counter-based generator the host can
 * recompute: rf_gpu_sample_u). Entries are ordered by a 64-bit key (value, then lower id); the
 * top-k set is found by histograms and sorted in shared memory, where min-p, top-p and the draw
 * are prefix sums; only a kept set wider than that falls back to bisection over the key. */
#include "core/knobs.h"
#include "backend/gpu/gpu_internal.h"

#define RF_SAMPLE_THREADS 1024

static __host__ __device__ inline float rf_sample_u_impl(uint64_t seed, uint64_t step, int64_t seq) {
    uint64_t z = (seed ^ (0x9E3779B97F4A7C15ull * (step + 1))) + (uint64_t)seq;
    z += 0x9E3779B97F4A7C15ull; /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) * (1.0 / 16777216.0));
}

extern "C" float rf_gpu_sample_u(uint64_t seed, uint64_t step, int64_t seq) {
    return rf_sample_u_impl(seed, step, seq);
}

/* Descending order of (value, then lower id) as one unsigned number: the float's order bits
 * above, (idmax - id) below; -0 counts as +0 (the CPU twin compares values). NaN is handled by
 * the caller (never a candidate). */
static __device__ __forceinline__ uint64_t rf_order_key(float v, int64_t id, int ib) {
    uint32_t b = __float_as_uint(v);
    b = b == 0x80000000u ? 0u : b;
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)b << ib) | (uint64_t)(((1ll << ib) - 1) - id);
}

struct rf_sample_dev {
    float temperature, top_p, min_p;
    int32_t top_k;
    float u; /* < 0: draw from (seed, step, row) */
};

/* Calls f(v, i) for every entry of the row x[0, n): 16-byte loads, four in flight per thread,
 * the misaligned head (row s starts at s * n floats) and the tail scalar. Order of calls is
 * unspecified across threads; each thread sees its own entries in increasing i (an argmax
 * keeps the first of equal values with a strict >). */
template <typename F>
static __device__ __forceinline__ void rf_row_visit(const float *x, int64_t n, F f) {
    const int tid = threadIdx.x, nt = blockDim.x;
    int64_t head = (int64_t)(((16 - ((uintptr_t)x & 15)) & 15) >> 2);
    if (head > n) head = n;
    if (tid < head) f(x[tid], (int64_t)tid);
    const float4 *x4 = (const float4 *)(x + head);
    const int64_t n4 = (n - head) >> 2;
    int64_t j = tid;
    for (; j + 3 * (int64_t)nt < n4; j += 4 * (int64_t)nt) {
        float4 a[4];
#pragma unroll
        for (int u = 0; u < 4; u++) a[u] = x4[j + u * nt];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int64_t i = head + 4 * (j + u * nt);
            f(a[u].x, i), f(a[u].y, i + 1), f(a[u].z, i + 2), f(a[u].w, i + 3);
        }
    }
    for (; j < n4; j += nt) {
        const float4 a = x4[j];
        const int64_t i = head + 4 * j;
        f(a.x, i), f(a.y, i + 1), f(a.z, i + 2), f(a.w, i + 3);
    }
    const int64_t t0 = head + 4 * n4;
    if (tid < n - t0) f(x[t0 + tid], t0 + tid);
}

static __device__ __forceinline__ uint64_t rf_shfl_xor_u64(uint64_t v, int m) {
    const uint32_t hi = RF_SHFL_XOR((uint32_t)(v >> 32), m), lo = RF_SHFL_XOR((uint32_t)v, m);
    return ((uint64_t)hi << 32) | lo;
}

/* Block-wide max (OP 0), min (1) or sum (2) of a uint64; every thread gets it (barriers: all
 * threads must call). */
template <int OP>
static __device__ __forceinline__ uint64_t rf_op_u64(uint64_t a, uint64_t b) {
    return OP == 0 ? (a > b ? a : b) : OP == 1 ? (a < b ? a : b) : a + b;
}
template <int OP>
static __device__ uint64_t rf_block_u64(uint64_t v, uint64_t *sh) {
    const int lane = threadIdx.x % RF_WARP_SIZE, warp = threadIdx.x / RF_WARP_SIZE;
    const int nw = blockDim.x / RF_WARP_SIZE;
    for (int m = RF_WARP_SIZE / 2; m > 0; m >>= 1) v = rf_op_u64<OP>(v, rf_shfl_xor_u64(v, m));
    __syncthreads(); /* sh may be in use by a previous reduction */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = sh[0];
    for (int w = 1; w < nw; w++) v = rf_op_u64<OP>(v, sh[w]);
    return v;
}

/* The value (v / temperature) a key was made from. */
static __device__ __forceinline__ float rf_key_value(uint64_t c, int ib) {
    const uint32_t hi = (uint32_t)(c >> ib);
    return __uint_as_float((hi & 0x80000000u) ? (hi & 0x7fffffffu) : ~hi);
}

/* hist[256] (bin 255 = highest keys): the bin b holding the r-th highest entry. Threads < 256
 * scan; out[0] = b (-1 when the counted bins hold fewer than r), out[1] = entries in higher
 * bins, out[2] = entries in bin b. Barriers: all threads must call. */
static __device__ void rf_hist_pick(const unsigned *hist, int64_t r, int *wt, int64_t *out) {
    const int tid = threadIdx.x, lane = tid % RF_WARP_SIZE, warp = tid / RF_WARP_SIZE;
    if (tid == 0) out[0] = -1;
    int h = 0, x = 0;
    if (tid < 256) {
        h = x = (int)hist[255 - tid];
        for (int o = 1; o < RF_WARP_SIZE; o <<= 1) {
            const int y = RF_SHFL_UP(x, o);
            if (lane >= o) x += y;
        }
        if (lane == RF_WARP_SIZE - 1) wt[warp] = x;
    }
    __syncthreads();
    if (tid < 256) {
        for (int w = 0; w < warp; w++) x += wt[w];
        const int64_t excl = x - h;
        if (excl < r && r <= x) out[0] = 255 - tid, out[1] = excl, out[2] = h;
    }
    __syncthreads();
}

/* Radix select over the 64-bit order key of the valid entries (v / T): 8 bits a pass, from the
 * top. Returns t with cnt = #{key >= t} >= r where the r-th highest key is >= t; stops as soon
 * as cnt <= cap (cap 0: exact, cnt = r). */
static __device__ uint64_t rf_sample_radix(const float *x, int64_t n, float T, int ib, int64_t r,
                                           int64_t cap, int64_t *cnt, unsigned *hist, int *wt,
                                           int64_t *pick) {
    uint64_t prefix = 0;
    int64_t above = 0;
    int shift = 32 + ib;
    for (;;) {
        const int lo = shift > 8 ? shift - 8 : 0;
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        const uint64_t hp = prefix >> shift;
        rf_row_visit(x, n, [&](float v, int64_t i) {
            if (v != v) return;
            const uint64_t c = rf_order_key(v / T, i, ib);
            if ((c >> shift) == hp) atomicAdd(&hist[(unsigned)(c >> lo) & 255u], 1u);
        });
        __syncthreads();
        rf_hist_pick(hist, r, wt, pick);
        const int64_t b = pick[0], excl = pick[1], h = pick[2];
        const int64_t ge = above + excl + h;
        if (cap > 0 && ge <= cap) {
            *cnt = ge;
            return prefix | ((uint64_t)b << lo);
        }
        r -= excl, above += excl;
        prefix |= (uint64_t)b << lo;
        if (h == r || lo == 0) {
            *cnt = above + r;
            return prefix;
        }
        shift = lo;
    }
}

/* The first pass's per-thread argmax (strict >: the first of equal values in the thread's
 * increasing i) and non-NaN count over x[0, len); ids are off + local index. Returns the order
 * key of the thread's best (0: none). */
static __device__ __forceinline__ uint64_t rf_sample_argmax(const float *x, int64_t len, int64_t off,
                                                            int ib, uint32_t *nv) {
    float bv = -INFINITY;
    int64_t bi = -1;
    uint32_t c = 0;
    rf_row_visit(x, len, [&](float v, int64_t i) {
        const bool ok = v == v;
        c += ok;
        if (v > bv || (ok && bi < 0)) bv = v, bi = i;
    });
    *nv = c;
    return bi >= 0 ? rf_order_key(bv, off + bi, ib) : 0;
}

/* The candidate histogram's bin of one entry: q = (lmax - v / T) * 16 (>= 0, monotone in the
 * key) counted in bin 254 - floor(q) when q < 255 (bin 255 = the top); -1: not counted. The
 * compaction keeps q < qcut with the same expression. */
static __device__ __forceinline__ float rf_sample_q(float v, float T, float lmax) {
    return (lmax - v / T) * 16.0f;
}

#define RF_SAMPLE_KCAP 1024 /* top_k up to this: the kept set is sorted in shared memory */
#define RF_SAMPLE_SC 2048   /* shared candidates (2 per thread) */
#define RF_SAMPLE_PRE_THREADS 256

/* Split first pass (few sequences): block (c, s) covers row s's entries [c * chunk, +chunk):
 * part[s][c] = {order key of its argmax (0: none), non-NaN count}; block 0 zeroes ghist[s]. */
__global__ void __launch_bounds__(RF_SAMPLE_PRE_THREADS)
rf_k_sample_part(uint64_t *part, unsigned *ghist, const float *logits, int64_t n, int64_t chunk, int ib) {
    __shared__ uint64_t shu[RF_SAMPLE_PRE_THREADS / 32];
    const int64_t s = blockIdx.y, c = blockIdx.x, c0 = c * chunk;
    const int64_t len = n - c0 < chunk ? n - c0 : chunk;
    uint32_t nv;
    const uint64_t k = rf_sample_argmax(logits + s * n + c0, len, c0, ib, &nv);
    const uint64_t best = rf_block_u64<0>(k, shu);
    const uint64_t cnt = rf_block_u64<2>(nv, shu);
    if (threadIdx.x == 0) {
        part[2 * (s * gridDim.x + c)] = best;
        part[2 * (s * gridDim.x + c) + 1] = cnt;
    }
    if (c == 0)
        for (int i = threadIdx.x; i < 256; i += blockDim.x) ghist[s * 256 + i] = 0;
}

/* Split candidate histogram: block (c, s) adds its chunk's bins (rf_sample_q) to ghist[s] for
 * the rows that will use it (T > 0, finite lmax, more than RF_SAMPLE_SC valid entries, the
 * shared way). Integer atomics: the sum is the same whatever the split. */
__global__ void __launch_bounds__(RF_SAMPLE_PRE_THREADS)
rf_k_sample_hist(unsigned *ghist, const uint64_t *part, const float *logits, int64_t n, int64_t chunk,
                 const rf_sample_dev *params, int ib) {
    __shared__ unsigned hist[256];
    const int64_t s = blockIdx.y, c = blockIdx.x, c0 = c * chunk;
    const rf_sample_dev P = params[s];
    const float T = P.temperature;
    if (T <= 0.0f) return; /* uniform per block */
    uint64_t best = 0, m = 0;
    for (unsigned i = 0; i < gridDim.x; i++) {
        const uint64_t k = part[2 * (s * gridDim.x + i)];
        best = k > best ? k : best;
        m += part[2 * (s * gridDim.x + i) + 1];
    }
    const bool kc = P.top_k > 0 && (uint64_t)P.top_k < m; /* rf_k_sample's shared way */
    if (best == 0 || m <= RF_SAMPLE_SC || (kc ? P.top_k > RF_SAMPLE_KCAP : P.top_p >= 1.0f && P.min_p <= 0.0f))
        return;
    const float *x = logits + s * n;
    const float lmax = x[(int64_t)(((1ull << ib) - 1) - (best & ((1ull << ib) - 1)))] / T;
    if (lmax == INFINITY || lmax == -INFINITY) return;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    const int64_t len = n - c0 < chunk ? n - c0 : chunk;
    rf_row_visit(x + c0, len, [&](float v, int64_t) {
        const float q = rf_sample_q(v, T, lmax); /* NaN: q is NaN, not < 255 */
        if (q < 255.0f) atomicAdd(&hist[255 - (int)q], 1u);
    });
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
        if (hist[i]) atomicAdd(&ghist[s * 256 + i], hist[i]);
}

/* rf_k_sample's shared memory, handed to its steps below. The steps are the kernel's own code
 * cut out as it stood (inlined, every operation and its order unchanged), so the picks are too. */
struct rf_sample_smem {
    float *sh;       /* [1024 / 32] block sums */
    uint64_t *shu;   /* [1024 / 32] block max / min / sum of keys */
    int *wt;         /* [256 / 32] histogram picks */
    int64_t *pick;   /* [4] */
    unsigned *hist;  /* [256] */
    unsigned *shcnt; /* candidates gathered */
    uint64_t *skey;  /* [RF_SAMPLE_SC] candidates' order keys */
    float *scum;     /* [RF_SAMPLE_SC] their prefix sums of p */
};

/* This thread's part of the first pass: the order key of its argmax among non-NaN entries (lowest
 * id on ties; float compares in the pass, the order key across threads) and its count of
 * non-NaN entries; from the split first pass's parts when there are any. */
static __device__ __forceinline__ void rf_sample_count(uint64_t &kb, uint64_t &nv, const float *x, int64_t n, int ib,
                                                       const uint64_t *part, int S, int64_t s) {
    const int tid = threadIdx.x;
    kb = 0, nv = 0;
    if (part)
        for (int i = tid; i < S; i += blockDim.x) {
            const uint64_t k = part[2 * (s * S + i)];
            kb = k > kb ? k : kb;
            nv += part[2 * (s * S + i) + 1];
        }
    else {
        uint32_t c;
        kb = rf_sample_argmax(x, n, 0, ib, &c);
        nv = c;
    }
}

/* The shared way's candidates: every key >= t (M <= RF_SAMPLE_SC of them) into sm.skey, found
 * by q-bins (rf_sample_q) up to a cut, or by a radix select, when the row has more valid entries
 * than fit. Returns M. */
static __device__ __forceinline__ int rf_sample_gather(const float *x, int64_t n, const rf_sample_dev &P, int64_t s,
                                                       int ib, float T, float lmax, int64_t m_valid, bool kc,
                                                       const unsigned *ghist, const rf_sample_smem &sm) {
    const int tid = threadIdx.x;
    unsigned *hist = sm.hist;
    uint64_t *skey = sm.skey;
    const int64_t r = kc ? P.top_k : (m_valid < RF_SAMPLE_KCAP ? m_valid : RF_SAMPLE_KCAP);
    int way = 0; /* 0: all valid, 1: q-bins up to qcut, 2: keys >= t */
    float qcut = 0.0f;
    uint64_t t = 0;
    if (m_valid > RF_SAMPLE_SC) {
        /* q = (lmax - l) * 16 (>= 0, monotone in the key); bins 254 - floor(q), q < 255 */
        for (int i = tid; i < 256; i += blockDim.x) hist[i] = ghist ? ghist[s * 256 + i] : 0u;
        __syncthreads();
        if (!ghist) {
            rf_row_visit(x, n, [&](float v, int64_t) {
                const float q = rf_sample_q(v, T, lmax);
                if (q < 255.0f) atomicAdd(&hist[255 - (int)q], 1u);
            });
            __syncthreads();
        }
        rf_hist_pick(hist, r, sm.wt, sm.pick);
        if (sm.pick[0] >= 0 && sm.pick[1] + sm.pick[2] <= RF_SAMPLE_SC) {
            way = 1;
            qcut = (float)(256 - sm.pick[0]); /* keep q < qcut */
        } else {
            int64_t cnt;
            t = rf_sample_radix(x, n, T, ib, r, RF_SAMPLE_SC, &cnt, hist, sm.wt, sm.pick);
            way = 2;
        }
    }
    if (tid == 0) *sm.shcnt = 0;
    __syncthreads();
    if (way == 2)
        rf_row_visit(x, n, [&](float v, int64_t i) {
            if (v != v) return;
            const uint64_t c = rf_order_key(v / T, i, ib);
            if (c >= t) skey[atomicAdd(sm.shcnt, 1u)] = c;
        });
    else
        rf_row_visit(x, n, [&](float v, int64_t i) {
            if (v != v) return;
            if (way == 0 || rf_sample_q(v, T, lmax) < qcut)
                skey[atomicAdd(sm.shcnt, 1u)] = rf_order_key(v / T, i, ib);
        });
    __syncthreads();
    return (int)*sm.shcnt;
}

/* The M candidates' keys padded with zeros to a power of two and sorted descending (bitonic). */
static __device__ __forceinline__ void rf_sample_sort(uint64_t *skey, int M) {
    const int tid = threadIdx.x;
    int P2 = 1;
    while (P2 < M) P2 <<= 1;
    for (int i = M + tid; i < P2; i += blockDim.x) skey[i] = 0;
    __syncthreads();
    for (int k = 2; k <= P2; k <<= 1) /* bitonic sort, descending */
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < P2; i += blockDim.x) {
                const int o = i ^ j;
                if (o > i) {
                    const uint64_t a = skey[i], b = skey[o];
                    if ((i & k) == 0 ? a < b : a > b) skey[i] = b, skey[o] = a;
                }
            }
            __syncthreads();
        }
}

/* The prefix sums of the candidates' p (thread tid holds candidates 2 tid and 2 tid + 1) into
 * sm.scum. */
static __device__ __forceinline__ void rf_sample_scan(float p0, float p1, int i0, int i1, const rf_sample_smem &sm) {
    const int tid = threadIdx.x;
    const int lane = tid % RF_WARP_SIZE, warp = tid / RF_WARP_SIZE;
    const int nw = blockDim.x / RF_WARP_SIZE;
    float xs = p0 + p1;
    for (int o = 1; o < RF_WARP_SIZE; o <<= 1) {
        const float y = RF_SHFL_UP(xs, o);
        if (lane >= o) xs += y;
    }
    __syncthreads();
    if (lane == RF_WARP_SIZE - 1) sm.sh[warp] = xs;
    __syncthreads();
    float base = 0.0f;
    for (int w = 0; w < warp; w++) base += sm.sh[w];
    (void)nw;
    const float ex = base + xs - (p0 + p1);
    if (i0 < RF_SAMPLE_SC) sm.scum[i0] = ex + p0;
    if (i1 < RF_SAMPLE_SC) sm.scum[i1] = ex + p0 + p1;
    __syncthreads();
}

/* The shared way: the candidates gathered and sorted in shared memory, then min-p, top-p and the
 * draw by prefix sums. Returns true when the pick is made (out[s] written), false when the
 * nucleus reaches past the candidates (the whole row's bisections decide). */
static __device__ __forceinline__ bool rf_sample_shared(int32_t *out, const float *x, int64_t n,
                                                        const rf_sample_dev &P, int64_t s, int ib, float T,
                                                        float lmax, float u, int64_t m_valid, bool kc,
                                                        const unsigned *ghist, const rf_sample_smem &sm) {
    const int tid = threadIdx.x;
    const uint64_t idmask = (1ull << ib) - 1;
    const int M = rf_sample_gather(x, n, P, s, ib, T, lmax, m_valid, kc, ghist, sm);
    uint64_t *skey = sm.skey;
    float *scum = sm.scum;
    rf_sample_sort(skey, M);
    /* the first kn (top-k) candidates: p, min-p prefix m1, prefix sums */
    const int kn = kc ? P.top_k : M;
    const int i0 = 2 * tid, i1 = i0 + 1;
    const float p0 = i0 < kn ? expf(rf_key_value(skey[i0], ib) - lmax) : 0.0f;
    const float p1 = i1 < kn ? expf(rf_key_value(skey[i1], ib) - lmax) : 0.0f;
    int m1 = kn;
    if (P.min_p > 0.0f) {
        int f = kn;
        if (i0 >= 1 && i0 < kn && p0 < P.min_p) f = i0;
        else if (i1 < kn && p1 < P.min_p) f = i1;
        m1 = (int)rf_block_u64<1>((uint64_t)f, sm.shu);
    }
    rf_sample_scan(p0, p1, i0, i1, sm);
    const bool whole = kc || M == m_valid; /* every kept entry is a candidate */
    float total_k = 0.0f;
    if (whole) total_k = scum[kn - 1];
    else if (P.top_p < 1.0f) {
        float tot = 0.0f;
        rf_row_visit(x, n, [&](float v, int64_t i) {
            if (v == v) tot += __expf(v / T - lmax);
        });
        total_k = rf_block_sum(tot, sm.sh);
    }
    /* the cuts compare in double against double targets, as the CPU twin does */
    const float mass2 = scum[m1 - 1];
    const double tp = (double)P.top_p * (double)total_k;
    const bool cut_p = P.top_p < 1.0f && (double)mass2 >= tp;
    /* complete: the kept set ends inside the candidates */
    if (whole || m1 < M || cut_p) {
        int m2 = m1;
        if (cut_p) {
            int f = m1;
            if (i0 < m1 && (double)scum[i0] >= tp) f = i0;
            else if (i1 < m1 && (double)scum[i1] >= tp) f = i1;
            m2 = (int)rf_block_u64<1>((uint64_t)f, sm.shu) + 1;
        }
        const double target = (double)u * (double)scum[m2 - 1];
        int f = m2 - 1;
        if (i0 < m2 && (double)scum[i0] > target) f = i0;
        else if (i1 < m2 && (double)scum[i1] > target) f = i1;
        const int pk = (int)rf_block_u64<1>((uint64_t)f, sm.shu);
        if (tid == 0) out[s] = (int32_t)(idmask - (skey[pk] & idmask));
        return true;
    }
    /* else: the nucleus reaches past the candidates; bisect over the whole row */
    return false;
}

/* The whole row: the top-k threshold ck (keep c >= ck) by radix select, the top-p threshold cp
 * and the draw by bisections over the order key, with vectorized passes. Returns the picked
 * entry's order key. */
static __device__ __forceinline__ uint64_t rf_sample_bisect(const float *x, int64_t n, const rf_sample_dev &P, int ib,
                                                            float T, float lmax, float u, bool kc,
                                                            const rf_sample_smem &sm) {
    float *sh = sm.sh;
    uint64_t ck = 0;
    if (kc) {
        int64_t cnt;
        ck = rf_sample_radix(x, n, T, ib, P.top_k, 0, &cnt, sm.hist, sm.wt, sm.pick);
    }
    /* kept(i): valid, c >= ck, and p >= min_p (p = e^(l - lmax), so p_max = 1) */
#define RF_P(v) __expf((v) / T - lmax)
#define RF_KEPT(v, c, p) ((c) >= ck && (P.min_p <= 0.0f || (p) >= P.min_p))
    float tot = 0.0f, m2 = 0.0f;
    rf_row_visit(x, n, [&](float v, int64_t i) {
        if (v != v) return;
        const uint64_t c = rf_order_key(v / T, i, ib);
        const float p = RF_P(v);
        if (c >= ck) tot += p;
        if (RF_KEPT(v, c, p)) m2 += p;
    });
    const float total_k = rf_block_sum(tot, sh); /* the mass top_p is measured against */
    const float mass2 = rf_block_sum(m2, sh);
    uint64_t cp = 0;
    const double tp = (double)P.top_p * (double)total_k;
    if (P.top_p < 1.0f && (double)mass2 >= tp) {
        const double target = tp;
        uint64_t prefix = 0;
        for (int bit = 31 + ib; bit >= 0; bit--) {
            const uint64_t cand = prefix | (1ull << bit);
            float mm = 0.0f;
            rf_row_visit(x, n, [&](float v, int64_t i) {
                if (v != v) return;
                const uint64_t c = rf_order_key(v / T, i, ib);
                if (c < cand) return;
                const float p = RF_P(v);
                if (RF_KEPT(v, c, p)) mm += p;
            });
            if ((double)rf_block_sum(mm, sh) >= target) prefix = cand;
        }
        cp = prefix;
    }
    /* final mass and the draw: the first entry (descending) whose cumulative mass > u * total */
    float m3 = 0.0f;
    rf_row_visit(x, n, [&](float v, int64_t i) {
        if (v != v) return;
        const uint64_t c = rf_order_key(v / T, i, ib);
        if (c < cp) return;
        const float p = RF_P(v);
        if (RF_KEPT(v, c, p)) m3 += p;
    });
    const float total3 = rf_block_sum(m3, sh);
    const double target = (double)u * (double)total3;
    uint64_t prefix = 0;
    for (int bit = 31 + ib; bit >= 0; bit--) {
        const uint64_t cand = prefix | (1ull << bit);
        float mm = 0.0f;
        rf_row_visit(x, n, [&](float v, int64_t i) {
            if (v != v) return;
            const uint64_t c = rf_order_key(v / T, i, ib);
            if (c < cand || c < cp) return;
            const float p = RF_P(v);
            if (RF_KEPT(v, c, p)) mm += p;
        });
        if ((double)rf_block_sum(mm, sh) > target) prefix = cand;
    }
    if (prefix == 0) { /* rounding: nothing exceeded the target; take the last kept entry */
        uint64_t lo = ~0ull;
        rf_row_visit(x, n, [&](float v, int64_t i) {
            if (v != v) return;
            const uint64_t c = rf_order_key(v / T, i, ib);
            if (c >= cp && RF_KEPT(v, c, RF_P(v)) && c < lo) lo = c;
        });
        prefix = rf_block_u64<1>(lo, sm.shu);
    }
#undef RF_P
#undef RF_KEPT
    return prefix;
}

/* sample: out[s] = rf_ref_sample(logits[s, :], params[s], u(seed, step, s)).
 * in: logits f32 [n_seq, n_vocab]; params [n_seq]. out: int32 [n_seq] (device).
 * launch: one block of RF_SAMPLE_THREADS threads per sequence. tolerance: the same token as the
 * CPU twin except where u lies within f32 rounding of a cumulative-probability boundary.
 * Passes over the row: argmax and count (greedy stops there); the top K = top_k (or 1024 when
 * top_k is 0) by a histogram of (lmax - l) in 1/16 steps, then at most RF_SAMPLE_SC candidates
 * (every key >= a threshold) copied to shared memory, sorted (bitonic), and min-p, top-p and
 * the draw done there by prefix sums. When the kept set may reach beyond those candidates
 * (top_k > 1024, or no top-k and a nucleus wider than them) the cuts are bisections over the
 * key, as before, with vectorized passes. part / ghist (S > 1): the first pass and the
 * histogram done by rf_k_sample_part / rf_k_sample_hist over S chunks of the row. */
__global__ void __launch_bounds__(RF_SAMPLE_THREADS)
rf_k_sample(int32_t *out, const float *logits, int64_t n, const rf_sample_dev *params,
            uint64_t seed, uint64_t step, int ib, const uint64_t *part, const unsigned *ghist, int S) {
    __shared__ float sh[1024 / 32];
    __shared__ uint64_t shu[1024 / 32];
    __shared__ int wt[256 / 32];
    __shared__ int64_t pick[4];
    __shared__ unsigned hist[256];
    __shared__ unsigned shcnt;
    __shared__ uint64_t skey[RF_SAMPLE_SC];
    __shared__ float scum[RF_SAMPLE_SC];
    const rf_sample_smem sm = {sh, shu, wt, pick, hist, &shcnt, skey, scum};
    const int64_t s = blockIdx.x;
    const float *x = logits + s * n;
    const rf_sample_dev P = params[s];
    const int tid = threadIdx.x;
    const uint64_t idmask = (1ull << ib) - 1;
    const float T = P.temperature;

    /* argmax among non-NaN entries (lowest id on ties), and the count of non-NaN entries */
    uint64_t kb, nv;
    rf_sample_count(kb, nv, x, n, ib, part, S, s);
    const uint64_t best = rf_block_u64<0>(kb, shu);
    if (best == 0) { /* all NaN */
        if (tid == 0) out[s] = -1;
        return;
    }
    const int64_t best_id = (int64_t)(idmask - (best & idmask));
    if (T <= 0.0f) {
        if (tid == 0) out[s] = (int32_t)best_id;
        return;
    }
    const float lmax = x[best_id] / T; /* division, as the CPU twin */
    if (lmax == INFINITY || lmax == -INFINITY) {
        if (tid == 0) out[s] = (int32_t)best_id;
        return;
    }
    const int64_t m_valid = (int64_t)rf_block_u64<2>(nv, shu);
    const bool kc = P.top_k > 0 && (int64_t)P.top_k < m_valid; /* a top-k cut */
    const float u = P.u >= 0.0f ? P.u : rf_sample_u_impl(seed, step, s);

    /* ---- candidates in shared memory: every key >= t, M <= RF_SAMPLE_SC of them ---- */
    const bool shared_way = kc ? P.top_k <= RF_SAMPLE_KCAP
                               : (m_valid <= RF_SAMPLE_SC || P.top_p < 1.0f || P.min_p > 0.0f);
    if (shared_way && rf_sample_shared(out, x, n, P, s, ib, T, lmax, u, m_valid, kc, ghist, sm)) return;

    /* ---- the whole row: bisections over the order key ---- */
    const uint64_t prefix = rf_sample_bisect(x, n, P, ib, T, lmax, u, kc, sm);
    if (tid == 0) out[s] = (int32_t)(idmask - (prefix & idmask));
}

/* The split of the first pass and the candidate histogram: with at most 4 rows (or any number
 * with RF_SAMPLE_SPLIT=1 set), S chunks of at least 2048 entries per row (about 4 blocks per SM
 * in all); else, for a small vocabulary or with RF_SAMPLE_NO_SPLIT=1, S = 1: one block per row
 * does every pass. H100 2026-11-25, vocab 128256 (test_gpu_sample's timing): 1 row, T0.8 k40
 * p0.95 min-p 0.05: 56 -> 43 us; 64 rows split 8 ways: 57 -> 61 us (a third launch), greedy
 * +1 to 3 us either way. Picks are the same whatever the split (integer atomics, order keys).
 * Returns S; *pre_bytes: the scratch the split needs. */
static int64_t rf_sample_split(const rf_gpu_ctx *ctx, int64_t n_seq, int64_t n_vocab, int64_t *chunk,
                               size_t *pre_bytes) {
    int64_t S = 4 * (int64_t)ctx->info.sm_count / n_seq;
    S = S > 64 ? 64 : S;
    int64_t c = S > 1 ? (n_vocab + S - 1) / S : n_vocab;
    c = c < 2048 ? 2048 : (c + 3) & ~(int64_t)3;
    S = (n_vocab + c - 1) / c;
    if ((n_seq > 4 && !rf_knob_bool(RF_KNOB_SAMPLE_SPLIT)) || rf_knob_bool(RF_KNOB_SAMPLE_NO_SPLIT)) S = 1;
    *chunk = c;
    *pre_bytes = S > 1 ? (((size_t)n_seq * (size_t)S * 16 + 255) & ~(size_t)255) + (size_t)n_seq * 1024 : 0;
    return S;
}

/* Launches the sampler over n_seq rows: with S > 1 rf_k_sample_part and rf_k_sample_hist first
 * over pre (rf_sample_split's pre_bytes of device scratch), then one block per row. */
static rf_status rf_sample_launch(rf_gpu_ctx *ctx, int32_t *dout, const float *logits, int64_t n_seq,
                                  int64_t n_vocab, const rf_sample_dev *dp, uint64_t seed, uint64_t step,
                                  int ib, void *pre, int64_t S, int64_t chunk) {
    uint64_t *part = NULL;
    unsigned *ghist = NULL;
    rf_status st = RF_OK;
    if (S > 1) {
        part = (uint64_t *)pre;
        ghist = (unsigned *)((char *)pre + (((size_t)n_seq * (size_t)S * 16 + 255) & ~(size_t)255));
        const dim3 grid((unsigned)S, (unsigned)n_seq);
        rf_k_sample_part<<<grid, RF_SAMPLE_PRE_THREADS, 0, ctx->stream>>>(part, ghist, logits, n_vocab, chunk, ib);
        st = RF_GPU_LAUNCHED(ctx, "rf_k_sample_part");
        if (!st) {
            rf_k_sample_hist<<<grid, RF_SAMPLE_PRE_THREADS, 0, ctx->stream>>>(ghist, part, logits, n_vocab, chunk,
                                                                             dp, ib);
            st = RF_GPU_LAUNCHED(ctx, "rf_k_sample_hist");
        }
    }
    if (!st) {
        rf_k_sample<<<(unsigned)n_seq, RF_SAMPLE_THREADS, 0, ctx->stream>>>(dout, logits, n_vocab, dp, seed, step,
                                                                           ib, part, ghist, (int)S);
        st = RF_GPU_LAUNCHED(ctx, "rf_k_sample");
    }
    return st;
}

extern "C" rf_status rf_gpu_sample(rf_gpu_ctx *ctx, int32_t *out, const float *logits,
                                   int64_t n_seq, int64_t n_vocab, const rf_sample_params *params,
                                   uint64_t seed, uint64_t step) {
    const char *op = "rf_gpu_sample";
    RF_GPU_REQUIRE(n_seq >= 0 && n_seq <= 65535, op, "n_seq=%lld", (long long)n_seq);
    RF_GPU_REQUIRE(n_vocab >= 1 && n_vocab < (1ll << 31), op, "n_vocab=%lld", (long long)n_vocab);
    if (n_seq == 0) return RF_OK;
    int ib = 1;
    while ((1ll << ib) <= n_vocab) ib++;
    size_t mark, pre_bytes;
    void *tmp;
    int64_t chunk;
    const int64_t S = rf_sample_split(ctx, n_seq, n_vocab, &chunk, &pre_bytes);
    const size_t pbytes = (size_t)n_seq * sizeof(rf_sample_dev);
    const size_t pre_off = (((pbytes + 255) & ~(size_t)255) + (size_t)n_seq * sizeof(int32_t) + 255) & ~(size_t)255;
    rf_status st = rf_gpu_tmp(ctx, pre_off + pre_bytes, &tmp, &mark);
    if (st) return st;
    rf_sample_dev *host = (rf_sample_dev *)malloc(pbytes);
    if (!host) {
        ctx->scratch_used = mark;
        return rf_set_error(RF_ERR_OOM, "%s: host memory", op);
    }
    for (int64_t i = 0; i < n_seq; i++) {
        host[i].temperature = params ? params[i].temperature : 0.0f;
        host[i].top_k = params ? params[i].top_k : 0;
        host[i].top_p = params ? params[i].top_p : 1.0f;
        host[i].min_p = params ? params[i].min_p : 0.0f;
        host[i].u = -1.0f;
    }
    rf_sample_dev *dp = (rf_sample_dev *)tmp;
    int32_t *dout = (int32_t *)((char *)tmp + ((pbytes + 255) & ~(size_t)255));
    cudaError_t e = cudaMemcpyAsync(dp, host, pbytes, cudaMemcpyHostToDevice, ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream); /* host buffer is freed next */
    free(host);
    if (e != cudaSuccess) {
        ctx->scratch_used = mark;
        return rf_set_error(RF_ERR_DEVICE, "%s: parameter upload failed: %s", op, cudaGetErrorString(e));
    }
    st = rf_sample_launch(ctx, dout, logits, n_seq, n_vocab, dp, seed, step, ib, (char *)tmp + pre_off, S,
                          chunk);
    if (!st) st = rf_gpu_download(ctx, out, dout, (size_t)n_seq * sizeof(int32_t));
    ctx->scratch_used = mark;
    return st;
}

/* penalize: for each row r of logits [n_rows, n_vocab] and each of its penalty entries
 * (ids[k], counts[k]) for k in [off[r], off[r] + cnt[r]): v = logit; v = v > 0 ? v / rep : v * rep;
 * v -= count * freq + pres (rf_sampler's rule, each distinct id once). In place.
 * launch: one block per row, threads over its entries (ids are distinct within a row). exact. */
__global__ void rf_k_penalize(float *logits, int64_t n_vocab, const rf_gpu_sample_row *rows,
                              const int32_t *ids, const int32_t *counts) {
    const rf_gpu_sample_row R = rows[blockIdx.x];
    float *x = logits + (int64_t)blockIdx.x * n_vocab;
    for (int k = threadIdx.x; k < R.pen_n; k += blockDim.x) {
        const int32_t id = ids[R.pen_off + k];
        if (id < 0 || id >= n_vocab) continue;
        float v = x[id];
        v = v > 0 ? v / R.repeat_penalty : v * R.repeat_penalty;
        v -= (float)counts[R.pen_off + k] * R.frequency_penalty + R.presence_penalty;
        x[id] = v;
    }
}

/* mask: for each row r whose record names a mask (mask_ref k > 0), logits the mask's row k - 1
 * leaves out (bit v % 32 of word v / 32 clear) become -inf, in place. launch: grid (chunks of
 * RF_MASK_CHUNK tokens, rows), threads over the chunk: a 128k vocabulary's row is 16 blocks on
 * as many SMs, where one block per row looped 500 times per thread on one SM, on every masked
 * step's path (one row: the step's whole mask time). exact. */
#define RF_MASK_CHUNK 8192
__global__ void rf_k_grammar_mask(float *logits, int64_t n_vocab, const rf_gpu_sample_row *rows,
                                  const uint32_t *masks, int64_t words) {
    const int32_t k = rows[blockIdx.y].mask_ref;
    if (k <= 0) return;
    const uint32_t *m = masks + (int64_t)(k - 1) * words;
    float *x = logits + (int64_t)blockIdx.y * n_vocab;
    const int64_t v1 = ((int64_t)blockIdx.x + 1) * RF_MASK_CHUNK < n_vocab ? ((int64_t)blockIdx.x + 1) * RF_MASK_CHUNK
                                                                            : n_vocab;
    for (int64_t v = (int64_t)blockIdx.x * RF_MASK_CHUNK + threadIdx.x; v < v1; v += blockDim.x)
        if (!((m[v >> 5] >> (v & 31)) & 1u)) x[v] = -INFINITY;
}

/* rows_to_params: the sample kernel's parameter records from the row records (device). */
__global__ void rf_k_sample_params(rf_sample_dev *p, const rf_gpu_sample_row *rows, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    p[i].temperature = rows[i].temperature;
    p[i].top_k = rows[i].top_k;
    p[i].top_p = rows[i].top_p;
    p[i].min_p = rows[i].min_p;
    p[i].u = rows[i].u;
}

extern "C" rf_status rf_gpu_sample_rows(rf_gpu_ctx *ctx, int32_t *d_out, float *logits, int64_t n_rows,
                                        int64_t n_vocab, const rf_gpu_sample_row *d_rows,
                                        const int32_t *d_pen_ids, const int32_t *d_pen_counts,
                                        bool any_penalty, const uint32_t *d_masks, int64_t mask_words) {
    const char *op = "rf_gpu_sample_rows";
    RF_GPU_REQUIRE(n_rows >= 0 && n_rows <= 65535, op, "n_rows=%lld", (long long)n_rows);
    RF_GPU_REQUIRE(n_vocab >= 1 && n_vocab < (1ll << 31), op, "n_vocab=%lld", (long long)n_vocab);
    if (n_rows == 0) return RF_OK;
    rf_status st;
    if (any_penalty) {
        rf_k_penalize<<<(unsigned)n_rows, 128, 0, ctx->stream>>>(logits, n_vocab, d_rows, d_pen_ids,
                                                                d_pen_counts);
        if ((st = RF_GPU_LAUNCHED(ctx, "rf_k_penalize"))) return st;
    }
    if (d_masks) {
        RF_GPU_REQUIRE(mask_words * 32 >= n_vocab, op, "masks of %lld words for %lld tokens", (long long)mask_words,
                       (long long)n_vocab);
        const dim3 grid((unsigned)((n_vocab + RF_MASK_CHUNK - 1) / RF_MASK_CHUNK), (unsigned)n_rows);
        rf_k_grammar_mask<<<grid, 256, 0, ctx->stream>>>(logits, n_vocab, d_rows, d_masks, mask_words);
        if ((st = RF_GPU_LAUNCHED(ctx, "rf_k_grammar_mask"))) return st;
    }
    int ib = 1;
    while ((1ll << ib) <= n_vocab) ib++;
    size_t mark, pre_bytes;
    void *tmp;
    int64_t chunk;
    const int64_t S = rf_sample_split(ctx, n_rows, n_vocab, &chunk, &pre_bytes);
    const size_t pre_off = ((size_t)n_rows * sizeof(rf_sample_dev) + 255) & ~(size_t)255;
    if ((st = rf_gpu_tmp(ctx, pre_off + pre_bytes, &tmp, &mark))) return st;
    rf_sample_dev *dp = (rf_sample_dev *)tmp;
    rf_k_sample_params<<<(unsigned)((n_rows + 127) / 128), 128, 0, ctx->stream>>>(dp, d_rows, n_rows);
    if (!(st = RF_GPU_LAUNCHED(ctx, "rf_k_sample_params"))) {
        st = rf_sample_launch(ctx, d_out, logits, n_rows, n_vocab, dp, 0, 0, ib, (char *)tmp + pre_off, S, chunk);
    }
    ctx->scratch_used = mark;
    return st;
}

extern "C" rf_status rf_gpu_bench_sample(rf_gpu_ctx *ctx, const float *logits, int64_t n_seq,
                                         int64_t n_vocab, const rf_sample_params *params, int reps,
                                         double *us_per_call) {
    if (n_seq < 1 || n_seq > 65535 || reps < 1 || !params)
        return rf_set_error(RF_ERR_INVALID_ARG, "bench sample: n_seq %lld reps %d", (long long)n_seq, reps);
    rf_gpu_sample_row *h = (rf_gpu_sample_row *)calloc((size_t)n_seq, sizeof *h);
    if (!h) return rf_set_error(RF_ERR_OOM, "bench sample: host memory");
    for (int64_t i = 0; i < n_seq; i++) {
        h[i].temperature = params->temperature, h[i].top_k = params->top_k;
        h[i].top_p = params->top_p, h[i].min_p = params->min_p, h[i].u = 0.5f;
        h[i].repeat_penalty = 1.0f;
    }
    void *buf;
    const size_t rb = (size_t)n_seq * sizeof *h;
    rf_status st = rf_gpu_alloc(ctx, rb + 256 + (size_t)n_seq * 4, &buf);
    if (!st) st = rf_gpu_upload(ctx, buf, h, rb);
    free(h);
    if (st) return st;
    int32_t *dout = (int32_t *)((char *)buf + ((rb + 255) & ~(size_t)255));
    cudaEvent_t e0, e1;
    RF_GPU_CHECK(cudaEventCreate(&e0));
    RF_GPU_CHECK(cudaEventCreate(&e1));
    for (int r = 0; r < 10 && !st; r++)
        st = rf_gpu_sample_rows(ctx, dout, (float *)logits, n_seq, n_vocab, (const rf_gpu_sample_row *)buf,
                                NULL, NULL, false, NULL, 0);
    (void)cudaEventRecord(e0, ctx->stream);
    for (int r = 0; r < reps && !st; r++)
        st = rf_gpu_sample_rows(ctx, dout, (float *)logits, n_seq, n_vocab, (const rf_gpu_sample_row *)buf,
                                NULL, NULL, false, NULL, 0);
    (void)cudaEventRecord(e1, ctx->stream);
    (void)cudaEventSynchronize(e1);
    float ms = 0;
    (void)cudaEventElapsedTime(&ms, e0, e1);
    if (!st) st = rf_gpu_sync(ctx);
    *us_per_call = (double)ms * 1e3 / reps;
    (void)cudaEventDestroy(e0);
    (void)cudaEventDestroy(e1);
    rf_gpu_free(ctx, buf);
    return st;
}
