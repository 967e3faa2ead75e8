/* gpu_route.h — the GPU product router: which kernel family takes a product y = W x of n tokens
 * (rf_gpu_route), as a pure function of the facts below, so the one decision can be read, logged
 * and tested in one place. Plain C: no device code, no context. */
#ifndef RF_GPU_ROUTE_H
#define RF_GPU_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "rocmforge/core.h"
#include "backend/gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rf_gpu_route_kind {
    RF_ROUTE_GEMV = 0,    /* rf_gpu_gemv: 1..gemv_n tokens in one call, each weight read once per call */
    RF_ROUTE_GEMV_GROUPS, /* rf_gpu_gemv in groups of gemv_n tokens (past one call, up to RF_GPU_GEMV_MAX, quantized) */
    RF_ROUTE_MMQ,         /* rf_gpu_mmq: int8 tensor cores, weight read once per 64 tokens */
    RF_ROUTE_BLAS,        /* rf_gpu_gemm: W dequantized to f16 in scratch, then cuBLAS / hipBLAS */
    RF_ROUTE_W4A16,       /* rf_gpu_w4a16: f16 tensor cores, W dequantized in registers (RF_GPU_W4A16) */
    RF_ROUTE_NONE,        /* deterministic mode without a batch-invariant kernel: an error */
} rf_gpu_route_kind;

/* What the route depends on, and nothing else (the caller fills it from the context and knobs) */
typedef struct rf_gpu_route_facts {
    rf_type type;
    int64_t n_tokens, n_in, n_out;
    bool invariant; /* --deterministic (RF_DETERMINISTIC): batch-invariant products only */
    bool mmq;       /* MMQ has a kernel for (type, n_in) on this device (rf_gpu_mmq_supported, sm_80+) */
    bool gemv;      /* the GEMV family decodes the type (rf_gpu_gemv_supported) */
    bool blas;      /* this build has a vendor BLAS (not HIP without hipBLAS) */
    int64_t gemv_n; /* the most tokens one GEMV call takes (rf_gpu_gemv_max_tokens: 16 where the
                     * multi-token kernel gemv_mt takes the type and width, else 8) */
    int64_t mmq_min, mmq_max; /* RF_GPU_MMQ_MIN, RF_GPU_MMQ_MAX (0: never) */
    int64_t gemv_max;         /* RF_GPU_GEMV_MAX */
    int64_t mmq_wide;         /* RF_GPU_MMQ_WIDE: rows at least this wide take MMQ at 4..8 tokens (0: never) */
    bool w4a16;               /* RF_GPU_W4A16 on and W4A16 has a kernel for (type, n_in) on this device */
    int64_t w4a16_min;        /* RF_GPU_W4A16_MIN: fewest tokens it takes */
    int64_t w4a16_max;        /* most tokens it takes (auto: RF_GPU_W4A16_MAX); <= 0: no limit */
} rf_gpu_route_facts;

/* The route: deterministic mode takes MMQ for every token count where it has a kernel (its
 * result for a token does not depend on the call's token count), else NONE; otherwise MMQ inside
 * [mmq_min, mmq_max] (mmq_min at most 5 where gemv_n is 8: no gemv_mt; where gemv_n is 16, MMQ
 * also at 4..8 tokens for Q5_0 / Q5_K with rows of mmq_wide or more), then 1..gemv_n tokens
 * one GEMV call, MMQ past that up to mmq_max, quantized types up to gemv_max in GEMV groups of
 * 8, the rest BLAS (GEMV groups where the build has no BLAS). With w4a16, W4A16 from w4a16_min
 * tokens on (outside deterministic mode), ahead of MMQ and BLAS. */
rf_gpu_route_kind rf_gpu_route(const rf_gpu_route_facts *f);
/* the most tokens one rf_gpu_gemv call takes for (type, n_in) on this context (gpu_matmul.cu) */
int rf_gpu_gemv_max_tokens(const rf_gpu_ctx *ctx, rf_type type, int64_t n_in);
/* the warps gemv_mt puts along a row of an n_out x n_in product of type (1, 2, 4 or 8; 0 where
 * it does not take the type): for traces and the tests' timing table */
int rf_gpu_gemv_mt_ks(const rf_gpu_ctx *ctx, rf_type type, int64_t n_in, int64_t n_out);
/* the route of a product on this context, its facts from the device, the mode and the knobs
 * (gpu_matmul.cu); what rf_gpu_matmul takes, rf_gpu_mmq_takes, rf_gpu_matmul_rounds_x and
 * rf_gpu_gemv_has_xq answer from it */
rf_gpu_route_kind rf_gpu_route_for(const rf_gpu_ctx *ctx, rf_type type, int64_t n_tokens, int64_t n_in,
                                   int64_t n_out);
/* whether rf_gpu_gemv (one call or groups) takes (type, n_in) through int8 x rounded per 32
 * (gpu_matmul.cu: the 32-element formats, K-quants where q32s takes the rows), else f32 x */
bool rf_gpu_gemv_rounds_x(const rf_gpu_ctx *ctx, rf_type type, int64_t n_in);
/* the route's name, for traces and test messages */
const char *rf_gpu_route_name(rf_gpu_route_kind k);

/* What a decode call's attention kernel depends on: the tensor-core decode kernel
 * (gpu_decode_attention.cu) for all the call's rows, or the paged kernel (gpu_paged_attention.cu) */
typedef struct rf_gpu_attn_facts {
    bool decode;         /* a decode call (graph steps; eager stretches of one token a sequence) */
    bool invariant;      /* --deterministic: the paged kernel's bits, always */
    int64_t bucket_keys; /* rf_depth_bucket_keys(max_pos) of the call's deepest row; <= 0: no row */
    int64_t window;      /* the layer's sliding window (0: none) */
    rf_type kv_type;     /* the cache's type */
    int64_t mma_min;     /* RF_GPU_DECODE_MMA_MIN: buckets of at least this many keys (0: none) */
    int64_t mma_short;   /* RF_GPU_DECODE_MMA_SHORT: f16 caches' buckets of at most this many (0: none) */
} rf_gpu_attn_facts;

/* Whether a decode call takes the decode kernel: its keys (the bucket, or the window where that is
 * smaller) reach mma_min or, with an f16 cache, are at most mma_short; never outside decode calls
 * nor in the batch-invariant mode. A function of the bucket, not of the rows' own positions, so
 * an eager step and a recorded one of the same rows take the same kernel. Where the decode kernel
 * has no variant for the call's shape, rf_gpu_paged_attention_route still takes the paged one. */
bool rf_gpu_attn_decode_mma(const rf_gpu_attn_facts *f);

#ifdef __cplusplus
}
#endif
#endif
