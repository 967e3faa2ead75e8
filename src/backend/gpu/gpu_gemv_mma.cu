/* gpu_gemv_mma.cu — gemv_mma: 2..8 tokens of Q4_0 / Q8_0 on the int8 tensor cores (CUDA sm_80+,
 * variant 24 and the default from 4 tokens or rows wider than 8192), and its trace. Twin: rf_cpu_matmul with test_hooks cpu_act = RF_CPU_ACT_GPU (x rounded as rf_k_quantize_x rounds it). */
#include "backend/gpu/gpu_gemv.cuh"

#if defined(RF_GEMV_TRACE)
__device__ unsigned long long rf_trace_mma[RF_TRACE_MMA_CALLS][RF_TRACE_MMA_BLOCKS][16];
#endif

#if !defined(RF_HIP) /* mma.sync, cp.async: CUDA only */
/* gemv_mma: the product for 2..8 tokens on the tensor cores, for Q4_0 and Q8_0 rows of whole
 * 8-block groups (n_in a multiple of 256). One mma.m16n8k32 (int8 in, int32 out) takes one
 * 32-element block of 16 rows against the same block of all 8 token columns of x, so a weight
 * block is decoded once whatever the token count (gemv_q32s loops over the tokens, decoding and
 * loading x again for each: 2-8 tokens ran at 22-63% of the bandwidth). A block of NW warps owns
 * 16 rows; warp w takes chunks w, w + NW, ... of 8 blocks (per row 8 BB contiguous bytes, whole
 * 16-byte words), each staged with cp.async in one slot of a ring of S: the 16 rows' chunks
 * (SROW bytes apart, an odd number of 16-byte words, so the 8 rows one load touches fall on
 * distinct banks), the int8 x of the nt tokens for those 8 blocks (token stride XT = 272 bytes,
 * likewise conflict-free) and their records, token-minor (the two tokens a lane scales by are
 * one 16-byte load). The weights of the first S chunks are requested before rf_pdl_wait() (w
 * must not be written by work in flight), their x after it.
 * Fragments (PTX m16n8k32, 8-bit A row-major, B column-major): lane (g, t) = (lane / 4,
 * lane % 4) holds word t and word 4 + t of a block of rows g and g + 8 (Q4_0: the low and high
 * nibbles of quant word t, u8 0..15, the -8 taken off in exact integers with the int sum of x as
 * gemv_q32 does), words t and 4 + t of token g's x (zero for g >= nt), and gets the int32 sums of
 * rows g, g + 8 by tokens 2t, 2t + 1, scaled per block in f32 (d_w d_x). The warps' sums are
 * added in warp order (deterministic). x: rf_k_quantize_x with gb = 8 (block b = 8 gg + j: int8
 * halves at 16-byte units (2 j + h) ng + gg, record at j ng + gg).
 * launch: NW warps per block, ceil(n_out / 16) blocks, NW * S * rf_mma_slot(BB, nt) bytes of
 * dynamic shared memory; rows past n_out read the last row and are not stored. tolerance as
 * gemv_q32. */
#define RF_MMA_XT 272 /* bytes per token of a slot's x: 8 blocks of 32, plus 16 (banks) */
static __host__ __device__ constexpr int rf_mma_srow(int bb) { return 8 * bb + (8 * bb / 16 % 2 ? 0 : 16); }
/* bytes of a slot for nt tokens: rows (plus 16 a realigned word may read past the last), x,
 * records (8 blocks x 8 tokens x 8 bytes) */
static __host__ __device__ constexpr int rf_mma_slot(int bb, int nt) { return 16 * rf_mma_srow(bb) + 16 + nt * RF_MMA_XT + 512; }
template <int T, int S, int NW>
__global__ void __launch_bounds__(NW * 32)
rf_k_gemv_mma(float *y, const uint8_t *w, const int8_t *qx, const float2 *dx, int nt,
              int64_t n_in, int64_t n_out, int64_t row_bytes) {
    static_assert(T == RF_TYPE_Q4_0 || T == RF_TYPE_Q8_0, "Q4_0 or Q8_0");
    static_assert(RF_WARP_SIZE == 32, "mma.sync: 32-lane warps");
    constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : 34;
    constexpr int CB = 8 * BB, CW = CB / 16, SROW = rf_mma_srow(BB);
    constexpr int XO = 16 * SROW + 16;   /* x in a slot */
    constexpr int NCP = (16 * CW + 31) / 32; /* weight copies per lane per chunk */
    extern __shared__ __align__(16) uint8_t rf_mma_ring[];
    __shared__ float red[NW][16][8];
#if defined(RF_GEMV_TRACE)
    const unsigned rf_tr_call = (unsigned)nt >> 8; /* the launch's call number (trace builds) */
    nt &= 0xff;
#endif
    RF_TRACE_MMA(0);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int slotb = rf_mma_slot(BB, nt), ro = XO + nt * RF_MMA_XT; /* records in a slot */
    uint8_t *ring = rf_mma_ring + (size_t)warp * S * slotb;
    const int64_t r0 = (int64_t)blockIdx.x * 16;
    const int nb = (int)(n_in / 32), nch = nb / 8, ng = nch;
    const char *src[NCP]; /* this lane's weight copies: the same (row, word) in every chunk */
    unsigned dst[NCP];
    const unsigned base = rf_smem_addr(ring);
#pragma unroll
    for (int m = 0; m < NCP; m++) {
        const int i = lane + 32 * m, row = i < 16 * CW ? i / CW : 0, col = i % CW;
        const int64_t r = r0 + row < n_out ? r0 + row : n_out - 1;
        src[m] = (const char *)w + r * row_bytes + col * 16;
        dst[m] = base + (unsigned)(row * SROW + col * 16);
    }
    const int nk = warp < nch ? (nch - warp + NW - 1) / NW : 0; /* this warp's chunks */
    auto issue_w = [&](int k, int slot) { /* the weights of chunk k */
        if (k >= nk) return;
        const int64_t off = (int64_t)(warp + k * NW) * CB;
        const unsigned so = (unsigned)(slot * slotb);
#pragma unroll
        for (int m = 0; m < NCP; m++)
            if ((m + 1) * 32 <= 16 * CW || lane + 32 * m < 16 * CW) rf_cp_async16_s(dst[m] + so, src[m] + off);
    };
    /* this lane's x copies (the same in every chunk but for the group gg = c): int8 halves
     * i = lane + 32 m of token i / 16, unit i % 16 (= 2 j + h); records i = lane + 32 m of token
     * i / 8, block i % 8, at (8 j + n) * 8 in the slot */
    const int8_t *xsrc[4];
    unsigned xdst[4];
    const float2 *rsrc[2];
    unsigned rdst[2];
#pragma unroll
    for (int m = 0; m < 4; m++) {
        const int i = lane + 32 * m, n = i / 16, u = i % 16;
        xsrc[m] = qx + (int64_t)(i < nt * 16 ? n : 0) * n_in + (int64_t)u * ng * 16;
        xdst[m] = (unsigned)(XO + n * RF_MMA_XT + u * 16);
    }
#pragma unroll
    for (int m = 0; m < 2; m++) {
        const int i = lane + 32 * m, n = i / 8, j = i % 8;
        rsrc[m] = dx + (int64_t)(i < nt * 8 ? n : 0) * nb + (int64_t)j * ng;
        rdst[m] = (unsigned)(ro + (8 * j + n) * 8);
    }
    auto issue_x = [&](int k, int slot) { /* x of chunk k */
        if (k >= nk) return;
        const int c = warp + k * NW; /* = gg of its blocks */
        const unsigned s = base + (unsigned)(slot * slotb);
#pragma unroll
        for (int m = 0; m < 4; m++)
            if (lane + 32 * m < nt * 16) rf_cp_async16_s(s + xdst[m], xsrc[m] + c * 16);
#pragma unroll
        for (int m = 0; m < 2; m++)
            if (lane + 32 * m < nt * 8) rf_cp_async8_s(s + rdst[m], rsrc[m] + c);
    };
    /* the records of tokens nt..7 are zero in every slot (never copied), so the scaling needs no
     * token test: their columns of x are zero, their scales zero too */
    for (int i = lane; i < S * 64; i += 32) {
        const int sl = i / 64, j = i % 64 / 8, n = i % 8;
        if (n >= nt) *(float2 *)(ring + sl * slotb + ro + (8 * j + n) * 8) = make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int k = 0; k < S; k++) {
        issue_w(k, k);
        rf_cp_async_commit();
    }
    rf_pdl_trigger();
    rf_pdl_wait();
    RF_TRACE_MMA(1);
#pragma unroll
    for (int k = 0; k < S; k++) { /* groups W0..W(S-1), X0..X(S-1), then W+X per chunk: after
                                   * the issue for chunk k + S - 1, wait<S - 1> leaves chunk k */
        issue_x(k, k);
        rf_cp_async_commit();
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* rows g, g + 8 by tokens 2t, 2t + 1 */
    const bool xon = g < nt;
    int slot = 0;
    for (int k = 0; k < nk; k++) {
        rf_cp_async_wait<S - 1>(); /* this lane's copies of chunk k have landed */
        RF_SYNCWARP();             /* ... and every lane's are visible */
        if (k < 6) RF_TRACE_MMA(2 + 2 * k);
        const uint8_t *sl = ring + slot * slotb;
        const uint8_t *ra = sl + g * SROW, *rb = ra + 8 * SROW, *xs = sl + XO + g * RF_MMA_XT;
        /* every operand of the chunk first (independent shared loads in flight together: with
         * ~4 warps per scheduler the decode is bound by their latency), then the 8 products */
        uint32_t A[8][4];
        int X[8][2];
        float4 Q[8];
        float D[8][2];
#pragma unroll
        for (int b = 0; b < 8; b++) {
            /* the 4 bytes at offset o of block b of row r (even: 2-byte aligned in the slot) */
            auto word = [&](const uint8_t *r, int o) -> uint32_t {
                const int p = b * BB + o; /* compile-time once unrolled */
                if (p % 4 == 0) return *(const uint32_t *)(r + p);
                return __byte_perm(*(const uint32_t *)(r + p - 2), *(const uint32_t *)(r + p + 2), 0x5432u);
            };
            X[b][0] = xon ? *(const int *)(xs + b * 32 + 4 * t) : 0;
            X[b][1] = xon ? *(const int *)(xs + b * 32 + 16 + 4 * t) : 0;
            Q[b] = *(const float4 *)(sl + ro + (8 * b + 2 * t) * 8); /* tokens 2t, 2t + 1 */
            D[b][0] = rf_h2f_bits(*(const uint16_t *)(ra + b * BB));
            D[b][1] = rf_h2f_bits(*(const uint16_t *)(rb + b * BB));
            if (T == RF_TYPE_Q4_0) {
                const uint32_t wa = word(ra, 2 + 4 * t), wb = word(rb, 2 + 4 * t);
                A[b][0] = wa & 0x0F0F0F0Fu, A[b][2] = (wa >> 4) & 0x0F0F0F0Fu;
                A[b][1] = wb & 0x0F0F0F0Fu, A[b][3] = (wb >> 4) & 0x0F0F0F0Fu;
            } else {
                A[b][0] = word(ra, 2 + 4 * t), A[b][2] = word(ra, 18 + 4 * t);
                A[b][1] = word(rb, 2 + 4 * t), A[b][3] = word(rb, 18 + 4 * t);
            }
        }
#pragma unroll
        for (int b = 0; b < 8; b++) {
            int sv[4];
            rf_mma_i8<T == RF_TYPE_Q4_0>(sv, A[b], X[b]);
            int s0 = sv[0], s1 = sv[1], s2 = sv[2], s3 = sv[3];
            const float dx0 = Q[b].x, dx1 = Q[b].z;
            if (T == RF_TYPE_Q4_0) { /* centre q on 8: sum (q - 8) x = sum q x - 8 sum x */
                const int sx0 = __float_as_int(Q[b].y), sx1 = __float_as_int(Q[b].w);
                s0 -= 8 * sx0, s1 -= 8 * sx1, s2 -= 8 * sx0, s3 -= 8 * sx1;
            }
            acc[0] += D[b][0] * dx0 * (float)s0, acc[1] += D[b][0] * dx1 * (float)s1;
            acc[2] += D[b][1] * dx0 * (float)s2, acc[3] += D[b][1] * dx1 * (float)s3;
        }
        RF_SYNCWARP(); /* the slot is read by all lanes before it is refilled */
        if (k < 6) RF_TRACE_MMA(3 + 2 * k);
        issue_w(k + S, slot);
        issue_x(k + S, slot);
        rf_cp_async_commit();
        slot = slot + 1 == S ? 0 : slot + 1;
    }
    rf_mma_tile_store<NW>(red, acc, y, nt, r0, n_out);
    RF_TRACE_MMA(14);
#if defined(RF_GEMV_TRACE)
    if (threadIdx.x == 0 && blockIdx.x < RF_TRACE_MMA_BLOCKS)
        rf_trace_mma[rf_tr_call % RF_TRACE_MMA_CALLS][blockIdx.x][15] = gridDim.x;
#endif
}

/* gemv_mma (2..8 tokens, Q4_0 / Q8_0, n_in a multiple of 256): 8 warps per 16 rows, 3 ring
 * stages (4 and 6 measured the same on the H100, 2 lower: docs/perf-gpu.md, session 8); the
 * dynamic shared memory (up to 169 KB for 8 tokens of Q8_0) allowed once it passes 48 KB */
template <int T>
static rf_status rf_launch_mma(rf_gpu_ctx *ctx, float *y, const uint8_t *w, const int8_t *qx,
                               const float4 *dx, int nt, int64_t n_in, int64_t n_out, int64_t rb) {
    constexpr int S = 3, NW = 8;
    auto kern = rf_k_gemv_mma<T, S, NW>;
    const size_t smem = (size_t)NW * S * rf_mma_slot(T == RF_TYPE_Q4_0 ? 18 : 34, nt);
    static size_t attr[RF_GPU_MAX_DEVICES];
    const rf_status ast = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(kern), smem, (size_t)NW * 16 * 8 * sizeof(float), attr, "rf_k_gemv_mma");
    if (ast) return ast;
#if defined(RF_GEMV_TRACE)
    const int nt_arg = nt | (int)((ctx->trace_seq++ & 0x7fffu) << 8); /* the call's trace slot */
#else
    const int nt_arg = nt;
#endif
    return rf_gpu_launch(ctx, "rf_k_gemv_mma", true, kern, dim3((unsigned)((n_out + 15) / 16)),
                         dim3(NW * 32), smem, y, w, qx, (const float2 *)dx, nt_arg, n_in, n_out, rb);
}
rf_status rf_gemv_launch_mma(rf_gpu_ctx *ctx, rf_type t, float *y, const uint8_t *w,
                             const int8_t *qx, const float4 *dx, int nt, int64_t n_in,
                             int64_t n_out, int64_t rb) {
    if (t == RF_TYPE_Q4_0) return rf_launch_mma<RF_TYPE_Q4_0>(ctx, y, w, qx, dx, nt, n_in, n_out, rb);
    return rf_launch_mma<RF_TYPE_Q8_0>(ctx, y, w, qx, dx, nt, n_in, n_out, rb);
}
#endif

extern "C" rf_status rf_gpu_trace_read_mma(rf_gpu_ctx *ctx, uint64_t *out, int max_calls,
                                           int *ncalls, int *grid) {
#if defined(RF_GEMV_TRACE)
    const rf_status st = rf_trace_copy(ctx, rf_trace_mma, RF_TRACE_MMA_CALLS,
                                       (size_t)RF_TRACE_MMA_BLOCKS * 16 * sizeof(uint64_t), out,
                                       max_calls, ncalls);
    *grid = !st && *ncalls ? (int)out[15] : 0;
    return st;
#else
    (void)ctx, (void)out, (void)max_calls;
    *ncalls = *grid = 0;
    return rf_set_error(RF_ERR_UNSUPPORTED, "GEMV trace: build with -DRF_GEMV_TRACE=ON");
#endif
}
