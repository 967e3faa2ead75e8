/* gpu_moe.cuh — the device functions the MoE kernels (gpu_moe.cu, gpu_moe_gemv.cu,
 * gpu_moe_ggemv.cu) share: the GLU, the int8-x dot of one unit of an expert row, split into
 * the unit's load (decode) and its dot with one token's x so that the grouped GEMV can read a
 * unit once for several tokens with the bits of the one-token kernels, and the copies of the
 * staged K-quant kernels into shared memory. (Their folded activation
 * quantization is rf_quantize_elem<1, RK>, gpu_gemv.cuh: the bits rf_k_quantize_x writes in its
 * in-order layout.) */
#ifndef RF_GPU_MOE_CUH
#define RF_GPU_MOE_CUH

#include "core/knobs.h"                 /* RF_GPU_MOE_STAGE */
#include "backend/backend.h"            /* rf_glu_kind */
#include "backend/gpu/gpu_gemv.cuh"     /* RF_QK, rf_quantize_elem */
#include "backend/gpu/gpu_gemv_dot.cuh" /* the formats' dots */

/* the GLU of the forward's ffn (rf_glu_kind), the arithmetic of the glu kernels (gpu_internal.h) */
static __device__ __forceinline__ float rf_moe_glu(int kind, float g, float u) {
    return kind == RF_GLU_SWIGLU ? rf_silu(g) * u : kind == RF_GLU_GEGLU ? rf_gelu_tanh(g) * u : rf_swiglu_oai(g, u);
}

/* the dense GEMVs' x records (rf_k_quantize_x, GB 1): (d, int sum) or (d, int sum, f32 sum or
 * q8_1 s, int sum of the first 16) */
template <int T> struct rf_moe_fmt {
    static constexpr bool K = T == RF_TYPE_Q4_K || T == RF_TYPE_Q5_K || T == RF_TYPE_Q6_K;
    static constexpr int REC = K || T == RF_TYPE_Q4_1 || T == RF_TYPE_Q5_1 ? 16 : 8;
    static constexpr int BB = T == RF_TYPE_Q4_0 ? 18 : T == RF_TYPE_Q4_1 ? 20 : T == RF_TYPE_Q5_0 ? 22
                            : T == RF_TYPE_Q5_1 ? 24 : T == RF_TYPE_Q8_0 ? 34 : T == RF_TYPE_MXFP4 ? 17
                            : T == RF_TYPE_Q4_K ? 144
                            : T == RF_TYPE_Q5_K ? 176 : 210;
    static constexpr int UE = K ? 256 : 32; /* elements per unit (a lane's step) */
};

/* N aligned words of the 2-byte-aligned bytes at p (Q6_K super-blocks sit at any even byte):
 * reads one word more when p is 2 mod 4 (within rf_gpu_alloc's tail padding at a row's end) */
template <int N>
static __device__ __forceinline__ void rf_moe_words(uint32_t *o, const uint8_t *p) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    if (((uintptr_t)p & 3) == 0) {
#pragma unroll
        for (int i = 0; i < N; i++) o[i] = a[i];
    } else {
        uint32_t prev = a[0];
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint32_t nx = a[i + 1];
            o[i] = __byte_perm(prev, nx, 0x5432u);
            prev = nx;
        }
    }
}

/* One unit (a 32-element block, or a K-quant super-block) of a weight row held in registers:
 * rf_moe_wload reads (MXFP4: and decodes) unit u of row wr; rf_moe_xload reads the same unit of
 * one token's row of the quantized x (qx: its n_in int8, rec: its records); rf_moe_xdot dots the
 * two. rf_moe_unit_dot is the three in a row; every kernel's dot of a unit is rf_moe_xdot of
 * those registers, so a unit read once for several tokens (and a token's unit for several
 * rows) gives each the bits of the one-token kernels. */
template <int T> struct rf_moe_wu {
    static constexpr int NW = T == RF_TYPE_MXFP4 ? 8 : T == RF_TYPE_Q4_K ? 36 : T == RF_TYPE_Q5_K ? 44
                            : T == RF_TYPE_Q6_K ? 53 : (rf_moe_fmt<T>::BB + 2 + 3) / 4;
    uint32_t w[NW]; /* MXFP4: the decoded int8 values (rf_mxfp4_decode); K-quants: the super-block's
                       words; else the words holding the block from its 4-byte boundary */
    int o;          /* the 32-element types: the block's byte offset in w[0] */
    float d;        /* MXFP4: the block's scale */
};

template <int T>
static __device__ __forceinline__ void rf_moe_wload(rf_moe_wu<T> &a, const uint8_t *wr, int u) {
    using F = rf_moe_fmt<T>;
    const uint8_t *bp = wr + (int64_t)u * F::BB;
    if constexpr (T == RF_TYPE_MXFP4) { /* 17-byte blocks at any byte offset */
        a.d = rf_mxfp4_decode(bp, (int *)a.w);
    } else if constexpr (!F::K) {
        const uint32_t *aw = (const uint32_t *)((uintptr_t)bp & ~(uintptr_t)3);
        a.o = (int)((uintptr_t)bp & 3);
#pragma unroll
        for (int i = 0; i < rf_moe_wu<T>::NW; i++) a.w[i] = aw[i];
    } else if constexpr (T == RF_TYPE_Q6_K) {
        rf_moe_words<rf_moe_wu<T>::NW>(a.w, bp);
    } else { /* 144 / 176-byte super-blocks in rows of them: 16-byte aligned */
        const uint4 *q = (const uint4 *)bp;
#pragma unroll
        for (int i = 0; i < rf_moe_wu<T>::NW / 4; i++) {
            const uint4 v = q[i];
            a.w[4 * i] = v.x, a.w[4 * i + 1] = v.y, a.w[4 * i + 2] = v.z, a.w[4 * i + 3] = v.w;
        }
    }
}

/* one unit of one token's quantized x (rf_moe_xload: its int8 values and records), dotted with
 * any number of weight units (rf_moe_xdot) */
template <int T> struct rf_moe_xu {
    static constexpr int NB = rf_moe_fmt<T>::K ? 8 : 1; /* 32-element blocks */
    int xi[NB][8];
    float dxd[NB], fs[NB]; /* fs: the f32 sum or q8_1's s (16-byte records), else 0 */
    int sxi[NB], slo[NB];  /* slo: the int sum of the first 16 (K-quants) */
};

template <int T>
static __device__ __forceinline__ void rf_moe_xload(rf_moe_xu<T> &x, int u, const int8_t *qx, const uint8_t *rec) {
    constexpr int NB = rf_moe_xu<T>::NB;
    const int4 *xv = (const int4 *)(qx + (int64_t)u * 32 * NB);
#pragma unroll
    for (int b = 0; b < NB; b++) {
        const int4 x0 = xv[2 * b], x1 = xv[2 * b + 1];
        x.xi[b][0] = x0.x, x.xi[b][1] = x0.y, x.xi[b][2] = x0.z, x.xi[b][3] = x0.w;
        x.xi[b][4] = x1.x, x.xi[b][5] = x1.y, x.xi[b][6] = x1.z, x.xi[b][7] = x1.w;
        if constexpr (rf_moe_fmt<T>::REC == 16) {
            const float4 r = ((const float4 *)rec)[(int64_t)u * NB + b];
            x.dxd[b] = r.x, x.sxi[b] = __float_as_int(r.y), x.fs[b] = r.z, x.slo[b] = __float_as_int(r.w);
        } else {
            const float2 r = ((const float2 *)rec)[u];
            x.dxd[b] = r.x, x.sxi[b] = __float_as_int(r.y), x.fs[b] = 0.0f, x.slo[b] = 0;
        }
    }
}

template <int T>
static __device__ __forceinline__ float rf_moe_xdot(const rf_moe_wu<T> &a, const rf_moe_xu<T> &x) {
    if constexpr (T == RF_TYPE_MXFP4) return rf_mxfp4_dot_dq((const int *)a.w, a.d, x.xi[0], x.dxd[0]);
    else if constexpr (!rf_moe_fmt<T>::K) return rf_q32_dot<T>(a.w, a.o, x.xi[0], x.dxd[0], x.sxi[0], x.fs[0]);
    else if constexpr (T == RF_TYPE_Q6_K) return rf_q6k_dot(a.w, x.xi, x.dxd, x.sxi, x.slo);
    else return rf_qk_dot<T == RF_TYPE_Q5_K>(a.w, x.xi, x.dxd, x.sxi, x.fs);
}

/* the int8-x dot of unit u of a weight row wr with token row xr of the quantized x */
template <int T>
static __device__ __forceinline__ float rf_moe_unit_dot(const uint8_t *wr, int u, const int8_t *qx,
                                                        const uint8_t *rec) {
    rf_moe_wu<T> a;
    rf_moe_xu<T> x;
    rf_moe_wload<T>(a, wr, u);
    rf_moe_xload<T>(x, u, qx, rec);
    return rf_moe_xdot<T>(a, x);
}

/* ---- staging through shared memory (the staged K-quant kernels, gpu_moe_gemv.cu and
 * gpu_moe_ggemv.cu): a lane there dots a whole super-block of 144-210 bytes, so reading it
 * straight from global memory puts a warp's 16-byte loads a super-block apart, each touching 32
 * sectors for half their bytes (L1-wavefront bound: docs/perf-gpu.md); the staged kernels copy
 * the weight runs and x units a block reads with whole-warp 16-byte copies first. */

/* Copies bytes [src, src + len) into dst as whole 16-byte words from src's 16-byte boundary
 * (reading at most 15 bytes before and after them: inside a 16-byte aligned allocation and its
 * tail padding, rf_gpu_alloc) by threads tid of nthr, uncommitted cp.async copies where there
 * are; returns the offset of src's first byte in dst. A run takes rf_moe_run_bytes(len) of dst. */
static __device__ __forceinline__ int rf_moe_stage(uint8_t *dst, const uint8_t *src, int len, int tid, int nthr) {
    const uint4 *a = (const uint4 *)((uintptr_t)src & ~(uintptr_t)15);
    const int off = (int)(src - (const uint8_t *)a), nw = (off + len + 15) / 16;
    for (int i = tid; i < nw; i += nthr) rf_cp_async16((uint4 *)dst + i, a + i);
    return off;
}
/* the shared memory of a staged run of len bytes: its words, the shift of up to 15 bytes and the
 * word rf_moe_words reads past a Q6_K super-block */
static __host__ __device__ constexpr int rf_moe_run_bytes(int len) { return (len + 15 + 4 + 15) / 16 * 16; }

/* x units in shared memory: unit u of a token row at u XS bytes, its int8 values then its records
 * (so rf_moe_xload reads unit 0 of (xs + u XS, xs + u XS + UE)); XS a multiple of 16 that is not
 * one of 128, so the 8 lanes of a 16-byte load phase reading units u..u+7 hit distinct banks */
template <int T> struct rf_moe_xs {
    using F = rf_moe_fmt<T>;
    static constexpr int RB = F::UE / 32 * F::REC, RAW = (F::UE + RB + 15) / 16 * 16;
    static constexpr int XS = RAW % 128 ? RAW : RAW + 16;
};
/* token row xr of the quantized x (qx: rows of n_in int8; rec: REC bytes per 32) into xs in that
 * layout by threads tid of nthr: uncommitted 16-byte cp.async copies (K-quants: a unit's 256 int8
 * and 8 records of 16 bytes, each 16-byte aligned), all in flight at once (plain 4-byte copies
 * in a loop waited on each load: ~1 L2 latency per pass) */
template <int T>
static __device__ __forceinline__ void rf_moe_stage_x(uint8_t *xs, const int8_t *qx, const uint8_t *rec, int xr,
                                                      int n_in, int tid, int nthr) {
    using F = rf_moe_fmt<T>;
    using X = rf_moe_xs<T>;
    static_assert(F::K, "staged x: the K-quants' layout");
    constexpr int WQ = F::UE / 16, WU = WQ + X::RB / 16; /* 16-byte words of a unit's int8, of the whole unit */
    const int nu = n_in / F::UE;
    const uint4 *q = (const uint4 *)(qx + (int64_t)xr * n_in);
    const uint4 *rc = (const uint4 *)(rec + (int64_t)xr * (n_in / 32) * F::REC);
    for (int i = tid; i < nu * WU; i += nthr) {
        const int u = i / WU, w = i % WU;
        rf_cp_async16((uint4 *)(xs + u * X::XS) + w, w < WQ ? q + u * WQ + w : rc + u * (X::RB / 16) + w - WQ);
    }
}
/* the staged forms are built for CUDA only (measured there; HIP builds run the plain kernels and
 * do not compile the staged templates) */
#if defined(RF_HIP)
#define RF_MOE_STAGED 0
#else
#define RF_MOE_STAGED 1
#endif
/* whether the staged forms take type t: the K-quants (the 32-element types' blocks of 17-34
 * bytes already lie side by side across a warp) */
static inline bool rf_moe_stages(rf_type t) {
    return RF_MOE_STAGED && (t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K) &&
           rf_knob_bool(RF_KNOB_GPU_MOE_STAGE);
}

/* lanes per row: the fewest of 2, 4, 8 covering the row's units; past 8, a warp a row, except
 * rows of 9-31 units, where a warp would idle most lanes (gemma4-26b-a4b's Q4_K gate/up: 11
 * super-blocks kept 11 of 32 lanes busy): of 4, 8 and 32 the lanes that pad the row least, ties
 * to the wider (fewer passes). The bits of a slot depend on this choice, the same in every MoE
 * GEMV kernel (per-slot, decode, grouped), so a token alone and in a batch still agree. */
static inline int rf_moe_lpr(int64_t units) {
    if (units <= 8) return units <= 2 ? 2 : units <= 4 ? 4 : 8;
    if (units >= 32) return 32;
    const int64_t p4 = (units + 3) / 4 * 4, p8 = (units + 7) / 8 * 8;
    return p8 <= p4 ? (p8 < 32 ? 8 : 32) : (p4 < 32 ? 4 : 32);
}

/* RF_MOE_F32X: the template type of the f32-x path (rf_moe_row over f32 x, any type) */
#define RF_MOE_F32X (-1)

/* The one type dispatch of the launchers: st = CALL(T) with the template type of t (the int8-x
 * types with qx, RF_MOE_F32X without), or the error naming who. */
#define RF_MOE_DISPATCH(st, t, qx, CALL, who)                                                                   \
    do {                                                                                                          \
        if (!(qx)) { st = CALL(RF_MOE_F32X); break; }                                                             \
        switch (t) {                                                                                              \
        case RF_TYPE_Q4_0: st = CALL(RF_TYPE_Q4_0); break;                                                        \
        case RF_TYPE_Q4_1: st = CALL(RF_TYPE_Q4_1); break;                                                        \
        case RF_TYPE_Q5_0: st = CALL(RF_TYPE_Q5_0); break;                                                        \
        case RF_TYPE_Q5_1: st = CALL(RF_TYPE_Q5_1); break;                                                        \
        case RF_TYPE_Q8_0: st = CALL(RF_TYPE_Q8_0); break;                                                        \
        case RF_TYPE_MXFP4: st = CALL(RF_TYPE_MXFP4); break;                                                      \
        case RF_TYPE_Q4_K: st = CALL(RF_TYPE_Q4_K); break;                                                        \
        case RF_TYPE_Q5_K: st = CALL(RF_TYPE_Q5_K); break;                                                        \
        case RF_TYPE_Q6_K: st = CALL(RF_TYPE_Q6_K); break;                                                        \
        default: st = rf_set_error(RF_ERR_INVALID_ARG, "%s: no int8-x kernel for type %d", who, (int)(t));      \
        }                                                                                                         \
    } while (0)

#endif
