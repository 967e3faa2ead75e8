/* gpu_gemv_q32s.cu — gemv_q32s and gemv_q32h: the int8-x products over warps' runs of whole
 * groups (32-element formats and Q4_K / Q5_K / Q6_K), CUDA sm_80+; variants 4..23, their tuning
 * by shape (rf_q32s_tune), and the trace of their blocks (RF_GEMV_TRACE builds). Twin: rf_cpu_matmul with test_hooks cpu_act = RF_CPU_ACT_GPU (x rounded as rf_k_quantize_x rounds it). */
#include "backend/gpu/gpu_gemv_dot.cuh"

#if defined(RF_GEMV_TRACE)
__device__ unsigned long long rf_trace_buf[RF_TRACE_CALLS][RF_TRACE_BLOCKS][4];
#endif

#if !defined(RF_HIP) /* cp.async with converted addresses, 32-lane ballots: CUDA only */
/* A warp's weight ring (gemv_q32s, gemv_q32h): the warp streams a contiguous run of `words`
 * 16-byte words in stages of SLOT words through S shared-memory slots with cp.async, lane l
 * copying words l, l + WS, ... of each stage. issue() sends the next stage to the next slot and
 * commits one cp.async group, an empty one past the run, so after each issue()
 * rf_cp_async_wait<S - 1>() means the stage issued S calls earlier has landed. The run must not
 * be written by work in flight (the first S stages are issued before rf_pdl_wait()). */
template <int SLOT, int S> struct rf_wring {
    const char *src; /* this lane's first word of the next stage */
    unsigned sa;     /* its word in slot 0 (shared-memory address) */
    int lane, left, slot; /* words left from the next stage on, and its slot */
    int tail;        /* bytes of a last partial word after the whole ones (even, < 16; Q6_K) */
    __device__ __forceinline__ rf_wring(const void *run, uint4 *slot0, int words, int lane_, int tail_ = 0)
        : src((const char *)run + lane_ * 16), sa(rf_smem_addr(slot0) + (unsigned)lane_ * 16),
          lane(lane_), left(words), slot(0), tail(tail_) {}
    __device__ __forceinline__ void issue() {
        constexpr int WS = RF_WARP_SIZE, NC = (SLOT + WS - 1) / WS;
        const unsigned s = sa + (unsigned)(slot * SLOT * 16);
        if (left >= SLOT) { /* a whole stage: no per-copy test where SLOT is a multiple of WS */
#pragma unroll
            for (int m = 0; m < NC; m++)
                if ((m + 1) * WS <= SLOT || lane + m * WS < SLOT) rf_cp_async16_s(s + m * WS * 16, src + m * WS * 16);
        } else {
#pragma unroll
            for (int m = 0; m < NC; m++)
                if (lane + m * WS < left) rf_cp_async16_s(s + m * WS * 16, src + m * WS * 16);
            /* the run's last bytes, short of a word (a run of Q6_K super-blocks ends at any even
             * byte): copied with 2-byte loads by the lane of word `left`, the rest of the word
             * zero, so nothing past the run is read. A plain shared store: the warp barrier
             * before the stage is read makes it visible as it does the async copies. */
            if (tail > 0 && left >= 0 && left < SLOT && lane == left % WS) {
                const int m = left / WS;
                const uint16_t *p = (const uint16_t *)(src + m * WS * 16);
                uint32_t u[4] = {0, 0, 0, 0};
#pragma unroll
                for (int i = 0; i < 7; i++)
                    if (2 * i < tail) u[i / 2] |= (uint32_t)__ldg(p + i) << (16 * (i % 2));
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(s + (unsigned)(m * WS * 16)),
                             "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3])
                             : "memory");
            }
        }
        rf_cp_async_commit();
        src += SLOT * 16;
        left -= SLOT;
        slot = slot + 1 == S ? 0 : slot + 1;
    }
};

/* ---- the pieces of rf_k_gemv_q32s (below), each inlined into it ---- */

/* XS: the block copies x of its one token into shared memory xs: qx (n_in bytes), then the nb
 * records (16 bytes with the f32 sums, FS, else 8), and waits for every thread's copies */
template <int NW, bool FS>
static __device__ __forceinline__ void rf_q32s_stage_x(uint4 *xs, const int8_t *qx, const float4 *dx,
                                                       int64_t n_in, int nb) {
    constexpr int WS = RF_WARP_SIZE;
    const int nq = (int)(n_in / 16);
    const uint4 *qx4 = (const uint4 *)qx;
    for (int i = threadIdx.x; i < nq; i += NW * WS) xs[i] = qx4[i];
    const int nr = FS ? nb : nb / 2; /* records of 16 or 8 bytes (nb is even: GB >= 2) */
    for (int i = threadIdx.x; i < nr; i += NW * WS) xs[nq + i] = ((const uint4 *)dx)[i];
    __syncthreads();
}

/* x block j of group gg (token t) in rf_k_quantize_x's order (ng groups a row, nb blocks): 8
 * int words, the scale, the int sum, the f32 sum and the int sum of the first 16 (the last two
 * where the records carry them, FS; xd: records of 16 bytes, else 8) */
template <bool FS>
static __device__ __forceinline__ void rf_q32s_load_x(const int8_t *xq, const char *xd, int64_t n_in, int nb,
                                                      int ng, int t, int j, int gg, int *xi, float &dxd,
                                                      int &sxi, float &fsum, int &slo) {
    constexpr int DXB = FS ? 16 : 8; /* bytes per record of xd */
    const int4 *xp = (const int4 *)(xq + t * n_in) + 2 * j * ng + gg;
    const int4 x0 = xp[0], x1 = xp[ng];
    xi[0] = x0.x, xi[1] = x0.y, xi[2] = x0.z, xi[3] = x0.w;
    xi[4] = x1.x, xi[5] = x1.y, xi[6] = x1.z, xi[7] = x1.w;
    const char *dp = xd + ((int64_t)t * nb + j * ng + gg) * DXB;
    if (FS) {
        const float4 q = *(const float4 *)dp;
        dxd = q.x, sxi = __float_as_int(q.y), fsum = q.z, slo = __float_as_int(q.w);
    } else { /* the sum of the f32 x is not needed: one 8-byte load */
        const float2 q = *(const float2 *)dp;
        dxd = q.x, sxi = __float_as_int(q.y), fsum = 0.0f, slo = 0;
    }
}

/* 4-byte words of a q32s group (T as rf_q32_group), plus the zero word rf_q32_dot may read */
template <int T> struct rf_q32s_cw {
    static constexpr int N = RF_Q32_WT(T) == RF_TYPE_Q6_K ? 53 : rf_q32_group<T>::G2 ? rf_q32_group<T>::N4 + 1
                                                                                    : rf_q32_group<T>::NU * 4 + 1;
};
/* this lane's group of the stage in slot (lane * GBYTES bytes in) as 4-byte words cw:
 * NU aligned 16-byte loads; G2: N4 aligned 4-byte loads; Q6_K: its 210 bytes at an even byte,
 * realigned from the 53 aligned words that hold them */
template <int T>
static __device__ __forceinline__ void rf_q32s_group_words(uint32_t *cw, const uint4 *slot, int lane) {
    using G = rf_q32_group<T>;
    if constexpr (G::W == RF_TYPE_Q6_K) {
        const int off = lane * G::GBYTES; /* in the stage */
        const uint32_t *sw = (const uint32_t *)slot + off / 4;
        const unsigned sel = (off & 2) ? 0x5432u : 0x3210u;
        uint32_t a[54];
#pragma unroll
        for (int u = 0; u < 53; u++) a[u] = sw[u];
        a[53] = 0;
#pragma unroll
        for (int u = 0; u < 53; u++) cw[u] = __byte_perm(a[u], a[u + 1], sel);
    } else if constexpr (G::G2) {
        const uint32_t *sw = (const uint32_t *)slot + lane * G::N4;
#pragma unroll
        for (int u = 0; u < G::N4; u++) cw[u] = sw[u];
        cw[G::N4] = 0;
    } else {
        const uint4 *src = slot + lane * G::NU;
#pragma unroll
        for (int u = 0; u < G::NU; u++) {
            const uint4 q = src[u];
            cw[4 * u] = q.x, cw[4 * u + 1] = q.y, cw[4 * u + 2] = q.z, cw[4 * u + 3] = q.w;
        }
        cw[G::NU * 4] = 0;
    }
}

/* x as q32s reads it: quantized x and its records (global or, XS, shared memory), ng groups and
 * nb blocks a row; XR: one group's x in registers (xr ... xlr: XN blocks) */
template <int XN> struct rf_q32s_x {
    const int8_t *xq;
    const char *xd;
    int64_t n_in;
    int nb, ng;
    int xr[XN][8], xsr[XN], xlr[XN];
    float xdr[XN], xfr[XN];
};

/* v[t] += the dot of this lane's group (cw) with x group g of token t, t < nt */
template <int T, int NTMAX, bool XR, int XN>
static __device__ __forceinline__ void rf_q32s_decode(float *v, const uint32_t *cw, const rf_q32s_x<XN> &x,
                                                      int nt, int g) {
    using G = rf_q32_group<T>;
    constexpr int W = G::W, BB = G::BB, GB = G::GB;
    constexpr bool FS = G::FS;
    if constexpr (W == RF_TYPE_Q4_K || W == RF_TYPE_Q5_K || W == RF_TYPE_Q6_K) {
#pragma unroll
        for (int t = 0; t < NTMAX; t++) { /* one super-block per group, 8 blocks of x */
            if (NTMAX > 1 && t >= nt) break;
            int xi[8][8], sxi[8], slo[8];
            float dxd[8], fsum[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                if constexpr (XR) {
#pragma unroll
                    for (int u = 0; u < 8; u++) xi[j][u] = x.xr[j][u];
                    dxd[j] = x.xdr[j], sxi[j] = x.xsr[j], fsum[j] = x.xfr[j], slo[j] = x.xlr[j];
                } else
                    rf_q32s_load_x<FS>(x.xq, x.xd, x.n_in, x.nb, x.ng, t, j, g, xi[j], dxd[j], sxi[j], fsum[j], slo[j]);
            }
            if constexpr (W == RF_TYPE_Q6_K) v[t] += rf_q6k_dot(cw, xi, dxd, sxi, slo);
            else v[t] += rf_qk_dot<W == RF_TYPE_Q5_K>(cw, xi, dxd, sxi, fsum);
        }
    } else
#pragma unroll
    for (int j = 0; j < GB; j++) {
#pragma unroll
        for (int t = 0; t < NTMAX; t++) {
            if (NTMAX > 1 && t >= nt) break; /* NTMAX 1: nt is 1 */
            int xi[8], sxi, slo;
            float dxd, fsum;
            if constexpr (XR) {
#pragma unroll
                for (int u = 0; u < 8; u++) xi[u] = x.xr[j][u];
                dxd = x.xdr[j], sxi = x.xsr[j], fsum = x.xfr[j], slo = x.xlr[j];
            } else
                rf_q32s_load_x<FS>(x.xq, x.xd, x.n_in, x.nb, x.ng, t, j, g, xi, dxd, sxi, fsum, slo);
            (void)slo;
            /* the block's offset in its word, 0 or 2, is fixed for each j */
            if (j * BB % 4 == 0) v[t] += rf_q32_dot<W, 0, true>(&cw[j * BB / 4], 0, xi, dxd, sxi, fsum);
            else v[t] += rf_q32_dot<W, 2, true>(&cw[j * BB / 4], 2, xi, dxd, sxi, fsum);
        }
    }
}

/* the row sums of a stage k whose lanes' dots are v (groups gid < ngr of the warp's run, this
 * lane's row r and group g in it), stored to y (+ bias) as rows end; then r and g step to the
 * next stage. The output row o of token t is y[t * n_out + o]. */
/* ng >= WS: a stage holds parts of at most two rows and ends at most one: lanes keep the open
 * row's sum (accA) and the next one's (accB) */
template <int NTMAX>
static __device__ __forceinline__ void rf_q32s_sum_long(float *y, const float *v, float *accA, float *accB, int nt,
                                                        int k, int ng, int rows, int64_t row0, int64_t n_out,
                                                        const float *bias, int lane, int &r, int &g) {
    constexpr int WS = RF_WARP_SIZE;
    const int ra = RF_SHFL(r, 0); /* the open row */
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (r == ra) accA[t] += v[t];
        else accB[t] += v[t];
    }
    if ((ra + 1) * ng - 1 < (k + 1) * WS) { /* the open row ends here */
#pragma unroll
        for (int t = 0; t < NTMAX; t++) {
            if (NTMAX > 1 && t >= nt) break;
            const float tot = rf_warp_sum(accA[t]);
            if (lane == 0 && ra < rows) y[t * n_out + row0 + ra] = bias ? tot + bias[row0 + ra] : tot;
            accA[t] = accB[t], accB[t] = 0.0f;
        }
    }
    g += WS;
    if (g >= ng) g -= ng, r++;
}
/* otherwise: lanes of one row are consecutive; after the shuffles the first lane of each row's
 * segment holds the segment's sum (lanes past the run: row rows); the last row of the stage, if
 * it runs on, is carried to the next in carry */
template <int NTMAX>
static __device__ __forceinline__ void rf_q32s_sum_seg(float *y, float *v, float *carry, int nt, int k, int gid,
                                                       int ngr, int ng, int rows, int64_t row0, int64_t n_out,
                                                       const float *bias, int lane, int &r, int &g) {
    constexpr int WS = RF_WARP_SIZE;
    const int rr = gid < ngr ? r : rows;
#pragma unroll
    for (int m = 1; m < WS; m <<= 1) {
        const int ro = RF_SHFL_DOWN(rr, m);
#pragma unroll
        for (int t = 0; t < NTMAX; t++) {
            const float o = RF_SHFL_DOWN(v[t], m);
            if (lane + m < WS && ro == rr) v[t] += o;
        }
    }
    const int rprev = RF_SHFL_UP(rr, 1);
    const bool head = lane == 0 || rprev != rr;      /* first lane of its row here */
    const int glast = (rr + 1) * ng - 1;              /* the row's last group in the run */
    const bool ends = glast < (k + 1) * WS;           /* ... lies in this stage */
    const int r31 = RF_SHFL(rr, WS - 1);
    const int hl = __ffs(RF_BALLOT(rr == r31)) - 1; /* head lane of the last row here */
#pragma unroll
    for (int t = 0; t < NTMAX; t++) {
        if (NTMAX > 1 && t >= nt) break;
        float tot = v[t] + (lane == 0 ? carry[t] : 0.0f); /* lane 0's row may run on */
        if (head && rr < rows && ends) y[t * n_out + row0 + rr] = bias ? tot + bias[row0 + rr] : tot;
        /* the last row here, if it runs on, is carried: its head lane's total */
        const float c = RF_SHFL(tot, hl);
        carry[t] = ((r31 + 1) * ng - 1 < (k + 1) * WS || r31 >= rows) ? 0.0f : c;
    }
    g += WS; /* this lane's group in the next stage */
    while (g >= ng) g -= ng, r++;
}

/* gemv_q32s: the same product as gemv_q32 for rows of whole groups (rf_q32_group; rf_gpu_gemv
 * checks row_bytes % 16 == 0). Such rows lie back to back as one run of groups, so warp w takes
 * rows [w * rpw, w * rpw + rpw) as one contiguous run of rpw * ng groups (ng per row) and streams
 * it in stages of RF_WARP_SIZE groups, one per lane: coalesced 16-byte cp.async copies into a
 * ring of S slots per warp (the first S stages issued before rf_pdl_wait(): w must not be written
 * by work in flight on the stream), each lane decoding its group from shared memory. No lane
 * idles whatever ng is, except in a warp's last stage. Row sums, all in a fixed order
 * (deterministic): stages of whole rows (ng divides 32) sum each row over its ng lanes; with
 * ng >= 32 a stage holds parts of at most two rows, which each lane keeps apart until the first
 * ends (then one warp sum); otherwise a segmented shuffle reduction sums each row's lanes in the
 * stage, a row running on into the next stage is carried over in a register.
 * Q4_K / Q5_K: a group is one super-block, decoded by rf_qk_dot against its 8 blocks of x;
 * Q6_K likewise (rf_q6k_dot), its 210-byte super-blocks read with aligned 32-bit shared loads
 * and one byte_perm per word (a group starts at an even byte; rows of any count of super-blocks,
 * each warp's run starting 16-byte aligned and the last one ending at any even byte).
 * G2 (T = RF_Q32_G2 + Q4_0 / Q8_0: rows of an even count of blocks, not a multiple of 8, as
 * gpt-oss's 2880 = 90): groups of 2 blocks, 36 / 68 bytes, read with aligned 4-byte shared loads;
 * runs as Q6_K's (rows per warp a multiple of 4 at 2880, whole words; the last run ends at any
 * 4-byte word, copied by rf_wring's tail).
 * x is int8 per 32 from rf_k_quantize_x with gb = GB (lanes taking the j-th block of
 * consecutive groups read consecutive 16-byte words of it). With XS (one token) each block first
 * copies x into shared memory (rf_q32s_smem: after the rings; per block of 32 the scale and int
 * sum, plus the f32 sum for Q4_1 / Q5_1), so the decode waits on shared-memory loads only;
 * otherwise x is read from global memory. The rings are static shared memory (<= 48 KB), x
 * dynamic (the launch passes its size).
 * (Quantizing x in every block instead, from the f32 x, was measured: 1.3-2x slower.)
 * XR (one token, NG dividing the warp): a lane's group is the same in every stage, so its x is
 * loaded into registers once, before the loop. MINB: __launch_bounds__'s blocks per SM (0: none).
 * launch: NW warps per block, any grid with grid * NW * rpw >= n_out; NG = n_in / 32 / GB or 0.
 * bias (not NULL): y[t, o] += bias[o] in the store, as gemv_q32. tolerance as gemv_q32. */
template <int T, int NTMAX, int S, int NW, bool XS, int NG, int MINB = 0, bool XR = false>
__global__ void __launch_bounds__(NW * RF_WARP_SIZE, MINB)
rf_k_gemv_q32s(float *y, const uint8_t *w, const int8_t *qx, const float4 *dx, int nt,
               int64_t n_in, int64_t n_out, int64_t row_bytes, int rpw, const float *bias) {
    using G = rf_q32_group<T>;
    constexpr int GB = G::GB, WS = RF_WARP_SIZE;
    constexpr int SLOT = WS * G::GBYTES / 16; /* 16-byte words per stage */
    constexpr bool FS = G::FS; /* the x records carry the f32 sum */
    __shared__ uint4 ring[NW][S][SLOT];
    extern __shared__ uint4 rf_dyn[]; /* XS: x */
    RF_TRACE_START();
    const int lane = threadIdx.x % WS, warp = threadIdx.x / WS;
    /* NG: groups per row known at compile time (0: not), so x's offsets are immediates */
    const int nb = NG ? NG * GB : (int)(n_in / RF_QK), ng = NG ? NG : nb / GB;
    const int64_t row0 = ((int64_t)blockIdx.x * NW + warp) * rpw;
    const int rows = n_out - row0 < rpw ? (int)(n_out > row0 ? n_out - row0 : 0) : rpw;
    const int ngr = rows * ng;              /* groups of this warp (< 2^31: rpw * ng small) */
    const int nk = (ngr + WS - 1) / WS;     /* its stages */
    /* the run starts 16-byte aligned: rows of whole 16-byte words, or (Q6_K, 210-byte groups;
     * G2, 36 / 68) rpw a multiple of the rows that make whole words (the launch); such a run may
     * then end short of a word in the last warp only */
    rf_wring<SLOT, S> wr(w + row0 * row_bytes, ring[warp][0], ngr * G::GBYTES / 16, lane,
                         G::GBYTES % 16 ? ngr * G::GBYTES % 16 : 0);
    for (int k = 0; k < S; k++) wr.issue();
    rf_pdl_trigger();
    rf_pdl_wait();
    RF_TRACE_WAITED();
    uint4 *xs = rf_dyn; /* XS: qx (n_in bytes), then nb records */
    if (XS) rf_q32s_stage_x<NW, FS>(xs, qx, dx, n_in, nb);
    constexpr bool KQ = G::W == RF_TYPE_Q4_K || G::W == RF_TYPE_Q5_K || G::W == RF_TYPE_Q6_K;
    /* XR: ng divides the warp, so a lane's group is the same in every stage: its x (the blocks
     * of one group, 8 for the super-block formats) is loaded into registers once */
    static_assert(!XR || (NTMAX == 1 && !XS && NG > 0 && WS % (NG > 0 ? NG : 1) == 0), "XR: one token, ng | WS");
    constexpr int XN = XR ? (KQ ? 8 : GB) : 1;
    rf_q32s_x<XN> x;
    x.xq = XS ? (const int8_t *)xs : qx;
    x.xd = XS ? (const char *)(xs + n_in / 16) : (const char *)dx;
    x.n_in = n_in, x.nb = nb, x.ng = ng;
    if constexpr (XR) {
#pragma unroll
        for (int j = 0; j < XN; j++)
            rf_q32s_load_x<FS>(x.xq, x.xd, n_in, nb, ng, 0, j, lane % NG, x.xr[j], x.xdr[j], x.xsr[j], x.xfr[j], x.xlr[j]);
    }
    float carry[NTMAX]; /* the partial sum of the row running on from the previous stage */
    float accA[NTMAX], accB[NTMAX]; /* ng >= 32: this lane's share of the open and next rows */
#pragma unroll
    for (int t = 0; t < NTMAX; t++) carry[t] = accA[t] = accB[t] = 0.0f;
    int r = lane / ng, g = lane % ng; /* this lane's row (in the warp's run) and group */
    /* stages of whole rows: ng divides the warp, rpw is a multiple of WS / ng (the launch) */
    const int rps = ng <= WS ? WS / ng : 1; /* rows per stage when whole */
    const bool whole = ng <= WS && WS % ng == 0 && rpw % rps == 0;
    int slot = 0;
    for (int k = 0; k < nk; k++) {
        const int gid = k * WS + lane;
        rf_cp_async_wait<S - 1>(); /* this lane's copies of stage k have landed */
        RF_SYNCWARP();             /* ... and every lane's are visible */
        float v[NTMAX];
#pragma unroll
        for (int t = 0; t < NTMAX; t++) v[t] = 0.0f;
        if (gid < ngr) {
            uint32_t cw[rf_q32s_cw<T>::N];
            rf_q32s_group_words<T>(cw, &ring[warp][slot][0], lane);
            rf_q32s_decode<T, NTMAX, XR, XN>(v, cw, x, nt, g);
        }
        RF_SYNCWARP(); /* the slot is read by all lanes before it is refilled */
        wr.issue(); /* stage k + S (an empty group past the run) */
        slot = slot + 1 == S ? 0 : slot + 1;
        if (whole) { /* the stage is 32 / ng whole rows: a butterfly over each row's ng lanes */
#pragma unroll
            for (int t = 0; t < NTMAX; t++) {
                if (NTMAX > 1 && t >= nt) break;
#pragma unroll
                for (int m = 1; m < WS; m <<= 1)
                    if (m < ng) v[t] += RF_SHFL_XOR(v[t], m);
                if (g == 0 && gid < ngr) y[t * n_out + row0 + r] = bias ? v[t] + bias[row0 + r] : v[t];
            }
            r += WS / ng;
        } else if (ng >= WS)
            rf_q32s_sum_long<NTMAX>(y, v, accA, accB, nt, k, ng, rows, row0, n_out, bias, lane, r, g);
        else
            rf_q32s_sum_seg<NTMAX>(y, v, carry, nt, k, gid, ngr, ng, rows, row0, n_out, bias, lane, r, g);
    }
    RF_TRACE_END();
}

/* the formats gemv_q32h takes: 8-block groups whose records carry no f32 sum (Q4_0, Q5_0, Q8_0;
 * Q4_K / Q5_K have the sums) */
template <int T> struct rf_q32h_ok {
    static constexpr bool value = rf_q32_group<T>::GB == 8 && !rf_q32_group<T>::FS;
};

/* gemv_q32h: gemv_q32s for one token with two lanes per group, each decoding 4 of its 8 blocks,
 * so a stage is WS / 2 groups and a warp's serial decode per stage is half as long. Meant for
 * the shapes where q32s gives each warp a single stage, all of it decoded after the PDL wait
 * (4096x4096 Q4_0: 2 rows per warp): twice as many warps, each half as long, share that work.
 * For Q4_0, Q5_0, Q8_0 (rf_q32h_ok) and rows of ng groups with ng dividing WS / 2, so every
 * stage holds whole rows of 2 ng lanes (4096-wide rows and narrower powers of two). A half group
 * (4 BB bytes) starts 8 bytes past a 16-byte boundary in the odd half, so lanes read it with
 * 4 BB / 8 8-byte shared loads; a half-warp's 16 lanes then hit 16 distinct 8-byte bank pairs
 * (NU = 9, 11, 17). x as for q32s (rf_k_quantize_x, gb = 8).
 * launch: NW warps per block, any grid with grid * NW * rpw >= n_out (rpw a multiple of
 * (WS / 2) / ng keeps every warp's stages whole); NG = n_in / 256 or 0. tolerance as gemv_q32. */
template <int T, int S, int NW, int NG>
__global__ void __launch_bounds__(NW * RF_WARP_SIZE)
rf_k_gemv_q32h(float *y, const uint8_t *w, const int8_t *qx, const float4 *dx, int64_t n_in,
               int64_t n_out, int64_t row_bytes, int rpw, const float *bias) {
    using G = rf_q32_group<T>;
    constexpr int BB = G::BB, GB = G::GB, NU = G::NU, WS = RF_WARP_SIZE, HS = WS / 2;
    static_assert(rf_q32h_ok<T>::value && 4 * BB % 8 == 0, "8-block groups without f32 sums");
    constexpr int SLOT = HS * NU; /* 16-byte words per stage */
    constexpr int HL = 4 * BB / 8; /* 8-byte words per half group */
    __shared__ uint4 ring[NW][S][SLOT];
    const int lane = threadIdx.x % WS, warp = threadIdx.x / WS;
    const int hf = lane & 1, gi = lane >> 1; /* this lane's half and its group in the stage */
    const int ng = NG ? NG : (int)(n_in / RF_QK / GB);
    const int rps = HS / ng; /* whole rows per stage */
    const int64_t row0 = ((int64_t)blockIdx.x * NW + warp) * rpw;
    const int rows = n_out - row0 < rpw ? (int)(n_out > row0 ? n_out - row0 : 0) : rpw;
    const int ngr = rows * ng;          /* groups of this warp */
    const int nk = (ngr + HS - 1) / HS; /* its stages */
    rf_wring<SLOT, S> wr(w + row0 * row_bytes, ring[warp][0], ngr * NU, lane);
    for (int k = 0; k < S; k++) wr.issue();
    rf_pdl_trigger();
    rf_pdl_wait();
    /* this lane's group in its row is the same in every stage; its blocks are j = 4 hf + jj:
     * x halves at 16-byte units (2 j) ng + g and (2 j + 1) ng + g, records at j ng + g */
    const int g = gi % ng;
    const int4 *xp = (const int4 *)qx + 8 * hf * ng + g;
    const float2 *dp = (const float2 *)dx + 4 * hf * ng + g;
    /* ... so its x (4 blocks) is loaded once, all in flight together, and serves every stage */
    int xi[GB / 2][8];
    float2 xd[GB / 2];
#pragma unroll
    for (int jj = 0; jj < GB / 2; jj++) {
        const int4 x0 = xp[2 * jj * ng], x1 = xp[(2 * jj + 1) * ng];
        xi[jj][0] = x0.x, xi[jj][1] = x0.y, xi[jj][2] = x0.z, xi[jj][3] = x0.w;
        xi[jj][4] = x1.x, xi[jj][5] = x1.y, xi[jj][6] = x1.z, xi[jj][7] = x1.w;
        xd[jj] = dp[jj * ng];
    }
    int slot = 0;
    for (int k = 0; k < nk; k++) {
        const int gid = k * HS + gi;
        rf_cp_async_wait<S - 1>(); /* this lane's copies of stage k have landed */
        RF_SYNCWARP();             /* ... and every lane's are visible */
        float v = 0.0f;
        if (gid < ngr) {
            const uint2 *src = (const uint2 *)&ring[warp][slot][gi * NU] + hf * HL;
            uint32_t cw[2 * HL + 1]; /* the half group as words, plus a zero word */
#pragma unroll
            for (int u = 0; u < HL; u++) {
                const uint2 q = src[u];
                cw[2 * u] = q.x, cw[2 * u + 1] = q.y;
            }
            cw[2 * HL] = 0;
#pragma unroll
            for (int jj = 0; jj < GB / 2; jj++) {
                const float2 q = xd[jj];
                /* a half starts 4-byte aligned: block jj's offset in its word is fixed */
                if (jj * BB % 4 == 0)
                    v += rf_q32_dot<T, 0, true>(&cw[jj * BB / 4], 0, xi[jj], q.x, __float_as_int(q.y), 0.0f);
                else
                    v += rf_q32_dot<T, 2, true>(&cw[jj * BB / 4], 2, xi[jj], q.x, __float_as_int(q.y), 0.0f);
            }
        }
        RF_SYNCWARP(); /* the slot is read by all lanes before it is refilled */
        wr.issue(); /* stage k + S (an empty group past the run) */
        slot = slot + 1 == S ? 0 : slot + 1;
        /* rps whole rows of 2 ng lanes (2 ng divides the warp): a butterfly over each row's lanes */
#pragma unroll
        for (int m = 1; m < WS; m <<= 1)
            if (m < 2 * ng) v += RF_SHFL_XOR(v, m);
        if (lane % (2 * ng) == 0 && gid < ngr) {
            const int64_t o = row0 + k * rps + gi / ng;
            y[o] = bias ? v + bias[o] : v;
        }
    }
}

/* resident blocks per SM of kern at `threads` and `smem` dynamic bytes, from the runtime (1 when it
 * cannot say) */
template <typename K>
static int rf_blocks_per_sm(K kern, int threads, size_t smem) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, threads, smem) != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = 1;
    }
    return n;
}
/* rows per warp for a grid of nw-warp blocks, per_sm of them resident per SM: rpw_req where not
 * 0, else the fewest that let the grid fit on the device at once; rounded up to a multiple of
 * unit (whole stages) */
static int64_t rf_rows_per_warp(const rf_gpu_ctx *ctx, int per_sm, int nw, int64_t n_out,
                                int rpw_req, int unit) {
    const int64_t warps = (int64_t)per_sm * ctx->info.sm_count * nw;
    const int64_t rpw = rpw_req ? rpw_req : (n_out + warps - 1) / warps;
    return (rpw + unit - 1) / unit * unit;
}
/* q32s variants (ring stages per warp, x of one token in shared memory): 4: (2, yes),
 * 5: (3, yes), 6: (1, yes), 7: (2, no: x read through L1); 9..12: 7 compiled for at least MINB =
 * 1, 3, 4, 5 resident blocks per SM (ptxas's register budget; 0: its own choice). Warps per
 * block: 4, fewer where the rings would pass 48 KB (Q8_0: 2 with 2 stages). Rows per warp:
 * rpw_req where not 0 (rounded up to whole stages), else the fewest that let the grid fit on the
 * device at once (resident blocks per SM from the runtime, asked once per kernel and KB of x). */
template <int T, int NTM, int S, int NW, bool XS, int NG, int MINB = 0, bool XR = false>
static rf_status rf_launch_q32s_k(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                                  const float4 *dx, int nt, int64_t n_in, int64_t n_out,
                                  int64_t rb, int rpw_req, const float *bias) {
    constexpr int SLOT = RF_WARP_SIZE * rf_q32_group<T>::GBYTES;
    constexpr bool FS = rf_q32_group<T>::FS;
    auto kern = rf_k_gemv_q32s<T, NTM, S, NW, XS, NG, MINB, XR>;
    /* x: n_in bytes of int8 + 8 (16 with the f32 sum) bytes per 32 (n_in <= 16384) */
    const size_t ring = (size_t)NW * S * SLOT;
    const size_t pad = (size_t)ctx->gemv_pad_kb * 1024; /* <= 16 KB */
    const size_t smem = (XS ? (size_t)n_in + (size_t)n_in / RF_QK * (FS ? 16 : 8) : 0) + pad;
    static int per_sm[48]; /* by KB of x and pad (<= 25 + 16) */
    static size_t attr[RF_GPU_MAX_DEVICES]; /* dynamic bytes the kernel may take, per GPU */
    const int kb = (int)((smem + 1023) / 1024);
    if (kb > (int)((48 * 1024 - ring) / 1024)) { /* raised only when needed: it can cost L1 */
        const rf_status ast = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(kern), (size_t)kb * 1024, ring, attr,
                                               "rf_k_gemv_q32s");
        if (ast) return ast;
    }
    if (!per_sm[kb]) per_sm[kb] = rf_blocks_per_sm(kern, NW * ctx->info.warp_size, (size_t)kb * 1024);
    const int ng = (int)(n_in / RF_QK / rf_q32_group<T>::GB);
    /* whole stages where ng divides the warp: a multiple of 32 / ng rows; Q6_K rows whose bytes
     * are not a multiple of 16 (2816 wide: 11 super-blocks, 2310 bytes): a multiple of the rows
     * that are (8 there), so every warp's run starts 16-byte aligned */
    int unit = ng < 32 && 32 % ng == 0 ? 32 / ng : 1;
    while ((int64_t)unit * ng * rf_q32_group<T>::GBYTES % 16) unit++;
    const int64_t rpw = rf_rows_per_warp(ctx, per_sm[kb], NW, n_out, rpw_req, unit);
    const int64_t blocks = (n_out + rpw * NW - 1) / (rpw * NW);
#if defined(RF_GEMV_TRACE)
    const int rpw_arg = (int)rpw | (int)((ctx->trace_seq++ & 0x7fffu) << 16); /* the call's slot */
#else
    const int rpw_arg = (int)rpw;
#endif
    return rf_gpu_launch(ctx, "rf_k_gemv_q32s", true, kern, dim3((unsigned)blocks),
                         dim3(NW * ctx->info.warp_size), smem, y, w, qx, dx, nt, n_in, n_out, rb,
                         rpw_arg, bias);
}
/* q32h (variant 8): 4 warps per block, 2 ring stages; rows per warp as for q32s, a multiple of
 * the rows per stage */
template <int T, int NG>
static rf_status rf_launch_q32h(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                                const float4 *dx, int64_t n_in, int64_t n_out, int64_t rb,
                                int rpw_req, const float *bias) {
    constexpr int NW = 4, S = 2;
    auto kern = rf_k_gemv_q32h<T, S, NW, NG>;
    static int per_sm = 0;
    if (!per_sm) per_sm = rf_blocks_per_sm(kern, NW * ctx->info.warp_size, 0);
    const int ng = (int)(n_in / RF_QK / rf_q32_group<T>::GB), rps = RF_WARP_SIZE / 2 / ng;
    const int64_t rpw = rf_rows_per_warp(ctx, per_sm, NW, n_out, rpw_req, rps);
    const int64_t blocks = (n_out + rpw * NW - 1) / (rpw * NW);
    return rf_gpu_launch(ctx, "rf_k_gemv_q32h", true, kern, dim3((unsigned)blocks),
                         dim3(NW * ctx->info.warp_size), 0, y, w, qx, dx, n_in, n_out, rb, (int)rpw, bias);
}
/* The default q32s configuration for one token, from the H100 occupancy sweeps of 2026-11-22
 * (docs/perf-gpu.md, sessions 6 and 7): the variant (7: ptxas's own register budget, ~80 for the
 * 4/5-bit formats; 9: at least one block per SM, ~140, more loads of x in flight; 11: at least 4
 * blocks per SM, 128; 13..20: x in registers (XR) with S ring stages and NW warps per block; 21:
 * one-warp blocks at 128 registers), and the rows per warp (0: the fewest that let the grid fit
 * on the device at once). Small products (4096x4096) gain from more resident warps, long ones
 * from more registers; Q8_0 (~148 registers whatever the budget) from 3 ring stages per warp,
 * but not right after the x quantization kernel (whole: rf_gpu_gemv), whose own latency then
 * adds to the product's tail; there Q4_0, Q4_K and Q5_K rows wider than 8192 take 4 rows per
 * warp (Q4_1, Q5_1 and Q8_0 lost 7-31 points with it on the H100). Rows of 16 or 32 groups
 * (4096 wide, where it was measured; narrower rows whose groups divide the warp take the same
 * rows per warp, and v7 in place of XR) keep x in registers where that won by more than ~2
 * points, mostly in one-warp blocks, which pack around the next call's blocks. */
static void rf_q32s_tune(rf_type t, int64_t n_in, int64_t n_out, bool whole, int *v, int *rpw) {
    const int64_t ng = n_in / RF_QK / rf_q32s_gb(t, n_in);
    *v = n_in > 8192 ? 11 : n_out > 8192 ? 9 : 7;
    *rpw = whole && n_in > 8192 && (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K) ? 4 : 0;
    if (t == RF_TYPE_Q6_K && n_out <= 8192) *v = 11; /* ~150 registers at 4096x4096 too: 75% vs 56% */
    /* one-warp blocks at 128 registers, products only (14336->4096: 88% -> 90%, 84% -> 85%) */
    if (!whole && n_in > 8192 && (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_K)) *v = 21;
    if (t == RF_TYPE_Q8_0) {
        *v = 7;
        *rpw = whole || ng < 16 ? 0 : ng <= RF_WARP_SIZE && RF_WARP_SIZE % ng == 0 ? 3 * (RF_WARP_SIZE / (int)ng) : 2;
    }
    if (n_in > 4096 || ng > RF_WARP_SIZE || RF_WARP_SIZE % ng) return;
    /* x in registers: {variant, rows per warp} at n_out <= 8192 and above (4096 -> 14336), for
     * the product and the whole call alike (whole_only: the whole call only); the comments:
     * product, then whole call, at 4096x4096 and 4096->14336, before -> after, H100 */
    static const struct { rf_type t; bool whole_only; int v, rpw, v_tall, rpw_tall; } xr[] = {
        {RF_TYPE_Q4_0, false, 17, 0, 17, 12}, /* 81 -> 85%, 90 -> 96%; 62 -> 65%, 83 -> 89% */
        {RF_TYPE_Q4_1, false, 20, 0, 17, 0},  /* 76 -> 89%, 90 -> 94% */
        {RF_TYPE_Q8_0, true, 20, 0, 17, 0},   /* whole call: 79 -> 83%, 91 -> 93% */
        {RF_TYPE_Q4_K, false, 17, 0, 17, 12}, /* 72 -> 88%, 89 -> 95% */
        {RF_TYPE_Q5_K, false, 20, 0, 9, 0},   /* 70 -> 76%; (v13, 4 rows: 92% in the sweep, 87% after) */
        {RF_TYPE_Q6_K, false, 11, 0, 17, 16}, /* -, 91 -> 96% */
    };
    for (size_t i = 0; i < sizeof xr / sizeof xr[0]; i++)
        if (xr[i].t == t && (whole || !xr[i].whole_only)) {
            *v = n_out > 8192 ? xr[i].v_tall : xr[i].v;
            *rpw = n_out > 8192 ? xr[i].rpw_tall : xr[i].rpw;
        }
    /* 4096 < n_out <= 8192 (Q, K and V as one product: 4096 -> 6144): v20 at about 1024 warps,
     * as the default gives 4096x4096 (H100 products, 4096 -> 5120 / 6144 / 8192: Q4_0 82 / 79 /
     * 84 -> 86 / 87 / 89%, Q4_K 77 / 77 / 76 -> 75 / 88 / 91%; docs/data, session 8) */
    if (!whole && n_out > 4096 && n_out <= 8192 && (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_K))
        *v = 20, *rpw = (int)((n_out + 1023) / 1024 + 1) / 2 * 2;
}
/* q32s warps per block for S ring stages: nmax (4 unless asked), fewer where the rings would pass
 * 48 KB */
template <int T> static constexpr int rf_q32s_warps(int s, int nmax = 4) {
    return 49152 / (s * RF_WARP_SIZE * rf_q32_group<T>::GBYTES) >= nmax ? nmax
         : 49152 / (s * RF_WARP_SIZE * rf_q32_group<T>::GBYTES) >= 1 ? 49152 / (s * RF_WARP_SIZE * rf_q32_group<T>::GBYTES) : 1;
}
/* v7 for one token at register budget MB (0: ptxas's own): the common widths' group counts
 * compiled in, so x's offsets are immediates */
template <int T, int MB, int S = 2, int NWR = 4>
static rf_status rf_launch_q32s_ng(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                                   const float4 *dx, int64_t n_in, int64_t n_out, int64_t rb,
                                   int rpw, const float *bias) {
    constexpr int NW = rf_q32s_warps<T>(S, NWR);
    const int64_t ng = n_in / RF_QK / rf_q32_group<T>::GB;
    if constexpr (rf_q32_group<T>::G2) { /* groups of 2 blocks: gpt-oss's 2880 (45 groups) compiled in */
        if constexpr (MB == 0)
            if (ng == 45) return rf_launch_q32s_k<T, 1, S, NW, false, 45, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
        return rf_launch_q32s_k<T, 1, S, NW, false, 0, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
    } else {
        if (ng == 16) /* 4096 wide (Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K) */
            return rf_launch_q32s_k<T, 1, S, NW, false, 16, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
        if (ng == 32) /* 4096 wide (Q4_1, Q5_1), 8192 (Q4_0 ...) */
            return rf_launch_q32s_k<T, 1, S, NW, false, 32, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
        if (ng == 56) /* 14336 wide */
            return rf_launch_q32s_k<T, 1, S, NW, false, 56, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
        return rf_launch_q32s_k<T, 1, S, NW, false, 0, MB>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
    }
}
/* XR (x in registers; rows of 16 or 32 groups, else v7; G2: x through L1 with these S and NWR)
 * with S ring stages and up to NWR warps per block (fewer where the rings would pass 48 KB) */
template <int T, int S, int NWR>
static rf_status rf_launch_q32s_xr(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                                   const float4 *dx, int64_t n_in, int64_t n_out, int64_t rb,
                                   int rpw, const float *bias) {
    constexpr int SB = RF_WARP_SIZE * rf_q32_group<T>::GBYTES; /* bytes per slot */
    constexpr int SS = S * SB > 49152 ? 49152 / SB : S;
    constexpr int NW = rf_q32s_warps<T>(SS, NWR);
    const int64_t ng = n_in / RF_QK / rf_q32_group<T>::GB;
    if constexpr (rf_q32_group<T>::G2) /* ng never divides the warp: no XR, the ring depth and warps alone */
        return rf_launch_q32s_k<T, 1, SS, NW, false, 0>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
    else {
        if (ng == 16)
            return rf_launch_q32s_k<T, 1, SS, NW, false, 16, 0, true>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
        if (ng == 32)
            return rf_launch_q32s_k<T, 1, SS, NW, false, 32, 0, true>(ctx, y, w, qx, dx, 1, n_in, n_out, rb, rpw, bias);
        return rf_launch_q32s_ng<T, 0>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
    }
}
template <int T>
static rf_status rf_launch_q32s(rf_gpu_ctx *ctx, int v, float *y, const uint8_t *w,
                                const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                                int64_t n_out, int64_t rb, bool whole, const float *bias) {
#define RF_Q32S(NTM, S, XS) rf_launch_q32s_k<T, NTM, S, rf_q32s_warps<T>(S), XS, 0>(ctx, y, w, qx, dx, nt, n_in, n_out, rb, rpw, bias)
    int rpw = ctx->gemv_rpw;
    if (nt == 1 && ctx->gemv_variant == 0) { /* the default: tuned by shape */
        int tv = 7, trpw = 0;
        rf_q32s_tune((rf_type)RF_Q32_WT(T), n_in, n_out, whole, &tv, &trpw);
        v = tv;
        if (!rpw) rpw = trpw;
    }
    if (nt == 1) {
        if constexpr (rf_q32h_ok<T>::value) { /* v8: q32h where each stage holds whole rows */
            const int64_t ng = n_in / RF_QK / rf_q32_group<T>::GB;
            if (v == 8 && ng == 16) return rf_launch_q32h<T, 16>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
            if (v == 8 && RF_WARP_SIZE / 2 % ng == 0) return rf_launch_q32h<T, 0>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        }
        if (v == 5) return RF_Q32S(1, 3, true);
        if (v == 6) return RF_Q32S(1, 1, true);
        switch (v) { /* v7 (and v8 where its kernel does not apply); 9..12: at least MB blocks
                      * per SM */
        case 9: return rf_launch_q32s_ng<T, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 10: return rf_launch_q32s_ng<T, 3>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 11: return rf_launch_q32s_ng<T, 4>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 12: return rf_launch_q32s_ng<T, 5>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 13: return rf_launch_q32s_xr<T, 2, 4>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 14: return rf_launch_q32s_xr<T, 3, 4>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 15: return rf_launch_q32s_xr<T, 4, 4>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 16: return rf_launch_q32s_xr<T, 2, 2>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 17: return rf_launch_q32s_xr<T, 4, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 18: return rf_launch_q32s_xr<T, 6, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 19: return rf_launch_q32s_xr<T, 3, 2>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 20: return rf_launch_q32s_xr<T, 2, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 21: return rf_launch_q32s_ng<T, 16, 2, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 22: return rf_launch_q32s_ng<T, 1, 2, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 23: return rf_launch_q32s_ng<T, 0, 2, 1>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        case 7: case 8: case 24: return rf_launch_q32s_ng<T, 0>(ctx, y, w, qx, dx, n_in, n_out, rb, rpw, bias);
        default: break;
        }
        return RF_Q32S(1, 2, true);
    }
    /* 2..8 tokens here: the 32-element formats gemv_mt does not take (Q4_1, Q5_0, Q5_1), rows it
     * does not take, and variant 7 forced (the tests' and the timing table's baseline) */
    if (v == 5) return RF_Q32S(8, 3, false);
    if (v == 6) return RF_Q32S(8, 1, false);
    return RF_Q32S(8, 2, false);
#undef RF_Q32S
}

rf_status rf_gemv_launch_q32s(rf_gpu_ctx *ctx, int v, float *y, const uint8_t *w, rf_type t,
                              const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                              int64_t n_out, int64_t rb, bool whole, const float *bias) {
    if (rf_q32s_gb(t, n_in) == 2 && (t == RF_TYPE_Q4_0 || t == RF_TYPE_Q8_0)) /* G2 rows (2880 wide) */
        return t == RF_TYPE_Q4_0
                 ? rf_launch_q32s<RF_Q32_G2 + RF_TYPE_Q4_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias)
                 : rf_launch_q32s<RF_Q32_G2 + RF_TYPE_Q8_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    switch (t) {
    case RF_TYPE_Q4_0: return rf_launch_q32s<RF_TYPE_Q4_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    case RF_TYPE_Q4_1: return rf_launch_q32s<RF_TYPE_Q4_1>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    case RF_TYPE_Q5_0: return rf_launch_q32s<RF_TYPE_Q5_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    case RF_TYPE_Q5_1: return rf_launch_q32s<RF_TYPE_Q5_1>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    case RF_TYPE_Q4_K: return rf_launch_q32s<RF_TYPE_Q4_K>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    case RF_TYPE_Q5_K: return rf_launch_q32s<RF_TYPE_Q5_K>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    case RF_TYPE_Q6_K: return rf_launch_q32s<RF_TYPE_Q6_K>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    default: return rf_launch_q32s<RF_TYPE_Q8_0>(ctx, v, y, w, qx, dx, nt, n_in, n_out, rb, whole, bias);
    }
}
#endif

extern "C" rf_status rf_gpu_trace_read(rf_gpu_ctx *ctx, uint64_t *out, int max_calls, int *ncalls,
                                       int *grid) {
#if defined(RF_GEMV_TRACE)
    const rf_status st = rf_trace_copy(ctx, rf_trace_buf, RF_TRACE_CALLS,
                                       (size_t)RF_TRACE_BLOCKS * 4 * sizeof(uint64_t), out,
                                       max_calls, ncalls);
    *grid = !st && *ncalls ? (int)(out[3] & 0xffffffffu) : 0;
    return st;
#else
    (void)ctx, (void)out, (void)max_calls;
    *ncalls = *grid = 0;
    return rf_set_error(RF_ERR_UNSUPPORTED, "GEMV trace: build with -DRF_GEMV_TRACE=ON");
#endif
}
