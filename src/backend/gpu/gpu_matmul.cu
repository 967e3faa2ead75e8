/* gpu_matmul.cu — the GPU product's one entry: rf_gpu_matmul takes the kernel family that the
 * router's rule (gpu_route.c) picks from this context's facts (rf_gpu_route_for: the device,
 * the mode, the knobs), and within the GEMV family the kernel and variant for the type, width
 * and tokens (rf_gpu_gemv; the int8-x halves rf_gpu_quantize_x / rf_gpu_gemv_xq that the
 * backend's shared activations use). Only the choice and the argument checks live here; the
 * kernels and their launchers live in their families' files: gpu_gemv_{xq,q32,q32s,mt,f16,k,
 * generic}.cu (shared pieces: gpu_gemv.cuh, gpu_gemv_dot.cuh), gpu_mmq.cu, gpu_w4a16.cu and
 * gpu_gemm.cu (BLAS). Twin: rf_ref_matmul (dequantize row, accumulate in double). */
#include "core/knobs.h"
#include "backend/gpu/gpu_gemv.cuh"
#include "backend/gpu/gpu_route.h"
#include "core/test_hooks.h"
#include "rocmforge/quant.h"

/* ---- the GEMV family: 1..8 tokens (1..16 where gemv_mt takes them), each weight read once ---- */

extern "C" void rf_gpu_set_gemv_variant(rf_gpu_ctx *ctx, int variant) { ctx->gemv_variant = variant; }
extern "C" void rf_gpu_set_gemv_rpw(rf_gpu_ctx *ctx, int rpw) { ctx->gemv_rpw = rpw > 0 ? (rpw < 1024 ? rpw : 1024) : 0; }
extern "C" void rf_gpu_set_gemv_pad(rf_gpu_ctx *ctx, int kb) { ctx->gemv_pad_kb = kb < 0 ? 0 : kb < 16 ? kb : 16; }

extern "C" bool rf_gpu_gemv_supported(rf_type t) {
    switch (t) {
    case RF_TYPE_F16: case RF_TYPE_BF16: case RF_TYPE_Q8_0: case RF_TYPE_Q4_0: case RF_TYPE_Q4_1:
    case RF_TYPE_Q5_0: case RF_TYPE_Q5_1: case RF_TYPE_Q4_K: case RF_TYPE_Q5_K: case RF_TYPE_Q6_K:
        return true;
    default: return false;
    }
}

/* Kernel variants, chosen per call by ctx->gemv_variant (0 = default; the benchmark sweeps
 * some of 1..23), all launched as programmatic dependent launches where ctx->pdl:
 * q32 (rows per warp group, ring stages, warps per group; RF_Q32_WARPS warps per block) =
 *   1: (4, 2, 4), 2: (2, 2, 4), 3: (4, 2, 2); HIP: (2, 2, 2) always;
 * q32s (32-element formats, rows of whole 16-byte groups, CUDA) = 4..7, see rf_launch_q32s;
 * q32h (two lanes per group, one token, Q4_0/Q5_0/Q8_0 rows of 16 groups or fewer, CUDA) = 8,
 *   else as 7; 9..12: v7 compiled for at least 1, 3, 4, 5 blocks per SM (register budgets: ptxas
 *   gives v7 itself ~80; one token, else as 7; see docs/perf-gpu.md); 13..20: x in registers
 *   (XR: rows of 16 or 32 groups, one token, else as 7) with (ring stages, warps per block at
 *   most) = 13: (2, 4), 14: (3, 4), 15: (4, 4), 16: (2, 2), 17: (4, 1), 18: (6, 1), 19: (3, 2),
 *   20: (2, 1); 21..23: v7 in one-warp blocks at register budgets 128, ~255 and ptxas's own;
 *   24: as 7 (was gemv_mma, 2..8 tokens of Q4_0 / Q8_0 on the tensor cores, which gemv_mt
 *   replaced); 27..30: 2..16 tokens of the int8-x types on gemv_mt with 1, 2, 4, 8
 *   warps along a row (the default: gemv_mt with the count rf_mt_ks picks by shape; one token
 *   as the default);
 * f16 (warps per row, loads in flight) = 1: (1, 4), 2: (4, 4), 3: (4, 2); 25, 26: 2..8 tokens of
 *   F16 / BF16 on the tensor cores (gemv_tc, rows a multiple of 32 wide; 4 and 2 chunks in
 *   flight per warp; 25 is their default; one token as the default);
 * K-quants: 1 = one warp per row, 2 and 3 = four warps per row.
 * Defaults from the H100 sweeps in docs/perf-gpu.md. */
#define RF_GEMV_DEFAULT_F16 3
static int rf_gemv_rows_per_block(int variant) { return variant == 1 ? RF_GEMV_WARPS : 1; }

/* ---- the 32-element formats: x quantized once, then the product ---------------------- */

/* the product kernel for (type, n_in, n_tokens) and the context's variant: q32 variants 1..3,
 * q32s 4..7, 9..23 and q32h 8 (rows of whole 16-byte groups, n_in <= 16384, CUDA); default from the H100 sweeps
 * in docs/perf-gpu.md */
static int rf_q32_variant(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n_out) {
    const int gb = rf_q32s_gb(t, n_in);
#if defined(RF_HIP)
    const bool fits = false; /* wave64 rings of 64 groups would not fit */
    (void)gb;
#else
    /* x in 24 KB; Q6_K rows of any count of super-blocks (rows of 8k are whole 16-byte words;
     * others take a multiple of the rows that are, rf_launch_q32s_k), Q4_0 / Q8_0 rows of an even
     * count of blocks (not a multiple of 8: groups of 2, gpt-oss's 2880); the rings' cp.async
     * needs sm_80 (older GPUs take gemv_q32, whose copies fall back to loads) */
    const bool fits = gb > 0 && n_in / RF_QK % gb == 0 && n_in <= 16384 && ctx->info.cc_major >= 8;
#endif
    int v = ctx->gemv_variant >= 1 && ctx->gemv_variant <= 24 ? ctx->gemv_variant : 0;
    /* q32s (x through L1; its register budget and rows per warp tuned by shape, rf_q32s_tune)
     * wherever it takes the rows, except Q5_0 rows wider than 8192, which decode faster in
     * gemv_q32 (H100, product at 14336->4096: 78.6% vs 72-77% for q32s). The kernel family may
     * depend on the type and n_in only, never n_out: x's order follows it, and one quantized x
     * serves products of several heights (rf_gpu_quantize_x). */
    if (!v) v = fits && (t != RF_TYPE_Q5_0 || n_in <= 8192) ? 7 : n_in <= 4096 && n_out <= 4096 ? 3 : 2;
    if (v >= 4 && !fits) v = 2; /* a forced q32s variant on rows it cannot take */
    return v;
}

/* the records quantize_x writes for weights of type t: 0 (d, int sum), 1 (+ the f32 sum of x and
 * the int sum of the first 16: the K-quants), 2 (Q4_1 / Q5_1: the sum is ggml's q8_1 s =
 * f16(amax / 127 * sum q), as the CPU twin's minimum term takes it) */
static int rf_xq_records(rf_type t) {
    if (t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_1) return 2;
    return t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K ? 1 : 0;
}

/* whether (t, n_in) has an int8-x product: the 32-element formats always, Q4_K / Q5_K / Q6_K
 * where the q32s kernel takes the rows (CUDA, n_in a multiple of 256 up to 16384) and the context's variant
 * is not one of the K kernels' (1..3) */
static bool rf_has_xq(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in) {
    if (t == RF_TYPE_Q4_K || t == RF_TYPE_Q5_K || t == RF_TYPE_Q6_K) return rf_q32_variant(ctx, t, n_in, 1) >= 4;
    return t == RF_TYPE_Q4_0 || t == RF_TYPE_Q4_1 || t == RF_TYPE_Q5_0 || t == RF_TYPE_Q5_1 ||
           t == RF_TYPE_Q8_0;
}

/* whether gemv_mt (gpu_gemv_mt.cu) takes nt tokens of (t, n_in): 2..16 tokens of a type it
 * decodes, where the int8-x GEMV takes the rows at all (so the rounding of x, and the CPU twin's
 * answer rf_gpu_gemv_rounds_x, do not change with it), under the default variant or one of its
 * own (27..30) */
static bool rf_mt_takes(const rf_gpu_ctx *ctx, rf_type t, int64_t nt, int64_t n_in) {
#if defined(RF_HIP)
    (void)ctx, (void)t, (void)nt, (void)n_in;
    return false;
#else
    /* the default from 4 tokens: on the H200 (2026-11-29, RF_GEMVN_BENCH) 2 tokens through q32s
     * took 1.2-1.7x one token's time and through gemv_mt 1.8-2.5x (Q4_0 4096 -> 14336: 17.2
     * against 24.5 us; 8B step at 2 sequences 4.22 ms through gemv_mt); from 4 gemv_mt wins in
     * most shapes (Q4_0 4096 -> 28672 at 4: 31.9 against 39.9). Since gemv_mt's copy plans
     * (2026-11-30): Q8_0 and Q4_1 from 2 (same table, us at 2 tokens, Q/K/V + gate/up + down of
     * llama3-8b, q32s -> gemv_mt: Q8_0 95.6 -> 73.5, Q4_1 82.4 -> 74.2; the 8B Q8_0 step, tok/s
     * at 2 / 3 sequences: 478 / 577 -> 587 / 868), Q4_0 from 3 (a tie at 2, 58.9 -> 59.1; the
     * 8B Q4_0 step at 3 sequences 822 -> 1,004); the K-quants, Q5_0 / Q5_1 and Q6_K were slower
     * at 2 (Q4_K 53.8 -> 83.0) and 3 was not measured. Since gemv_mt's deep ring for grids of
     * one block an SM (2026-11-30, H200, rocmforge-test with the hook below against the
     * default, two rounds): Q4_0 from 2 (8B Q4_0 at 2 sequences 680 -> 734 tok/s, the Q6_K LM
     * head also through gemv_mt at 2 in that run), Q4_K and Q6_K from 3 (8B Q4_K_M at 3: 780 ->
     * 811); Q4_1 as Q8_0; Q5_0, Q5_1 and Q5_K still from 4 (3 not measured). The test hook
     * gpu_mt_min sets the bound for every type, for a side-by-side timing. */
    const int v = ctx->gemv_variant;
    const rf_test_hooks *th = rf_test_hooks_get();
    int64_t lo = v != 0                                                           ? 2
                 : t == RF_TYPE_Q8_0 || t == RF_TYPE_Q4_1 || t == RF_TYPE_Q4_0 ? 2
                 : t == RF_TYPE_Q4_K || t == RF_TYPE_Q6_K                       ? 3
                                                                                : 4;
    if (v == 0 && th && th->gpu_mt_min > 0) lo = th->gpu_mt_min;
    return nt >= lo && nt <= 16 && (v == 0 || (v >= 27 && v <= 30)) && rf_has_xq(ctx, t, n_in) &&
           rf_gemv_mt_ok(ctx, t, n_in);
#endif
}
/* the most tokens one rf_gpu_gemv call takes for (t, n_in): 16 where gemv_mt takes them, else 8 */
static int rf_gemv_max_nt(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in) {
    return rf_mt_takes(ctx, t, 16, n_in) ? 16 : 8;
}
extern "C" int rf_gpu_gemv_max_tokens(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in) {
    return rf_gemv_max_nt(ctx, t, n_in);
}
extern "C" int rf_gpu_gemv_mt_ks(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in, int64_t n_out) {
#if defined(RF_HIP)
    (void)ctx, (void)t, (void)n_in, (void)n_out;
    return 0;
#else
    return rf_mt_takes(ctx, t, 16, n_in) ? rf_gemv_mt_warps_per_row(ctx, t, n_in, n_out) : 0;
#endif
}

/* whether one GEMV call takes nt tokens of (t, n_in) on int8 x */
static bool rf_xq_gemv_takes(const rf_gpu_ctx *ctx, rf_type t, int64_t nt, int64_t n_in) {
    return nt <= rf_gemv_max_nt(ctx, t, n_in) && rf_has_xq(ctx, t, n_in);
}
/* the x order (gb) and records (rk) of the product rf_q32_variant picks; n_out does not change
 * the order, only the variant's kernel among 1..3, which share it */
static void rf_xq_layout(const rf_gpu_ctx *ctx, rf_type t, int64_t nt, int64_t n_in, int *gb, int *rk) {
    const int v = rf_q32_variant(ctx, t, n_in, 1);
    *gb = v >= 4 && !rf_mt_takes(ctx, t, nt, n_in) ? rf_q32s_gb(t, n_in) : 1; /* gemv_mt: in order */
    *rk = rf_xq_records(t);
}
/* quantize_x into xq for that product */
static rf_status rf_q32_quantize(rf_gpu_ctx *ctx, void *xq, rf_type t, const float *x, int nt,
                                 int64_t n_in) {
    int gb, rk;
    rf_xq_layout(ctx, t, nt, n_in, &gb, &rk);
    return rf_gemv_launch_quantize_x(ctx, xq, gb, rk, x, nt, n_in);
}
/* whole: x was quantized by the kernel right before (rf_gpu_gemv), which the default tuning
 * takes into account; bias (not NULL): y += bias per output row, in the product's store */
static rf_status rf_q32_product(rf_gpu_ctx *ctx, float *y, const uint8_t *w, rf_type t,
                                const void *xq, int nt, int64_t n_in, int64_t n_out, bool whole,
                                const float *bias) {
    const int v = rf_q32_variant(ctx, t, n_in, n_out);
    (void)whole; /* HIP: q32 only, not tuned by shape */
    const int64_t rb = n_in / rf_gq_block((int)t) * rf_gq_bytes((int)t);
    const size_t n = (size_t)nt * (size_t)n_in;
    const int8_t *qx = (const int8_t *)xq;
    const float4 *dx = (const float4 *)((const char *)xq + ((n + 255) & ~(size_t)255));
#if !defined(RF_HIP)
    if (rf_mt_takes(ctx, t, nt, n_in)) { /* gemv_mt has no bias epilogue: the bias kernel after it */
        const rf_status st = rf_gemv_launch_mt(ctx, t, y, w, xq, nt, n_in, n_out, rb);
        return st || !bias ? st : rf_gpu_add_bias(ctx, y, bias, nt, n_out);
    }
    if (v >= 4) return rf_gemv_launch_q32s(ctx, v, y, w, t, qx, dx, nt, n_in, n_out, rb, whole, bias);
#endif
    return rf_gemv_launch_q32(ctx, v, y, w, t, qx, dx, nt, n_in, n_out, rb, bias);
}

/* Where x is quantized before the product (rf_gpu_quantize_x, the norm's and the GLU's fused
 * quantizers) and in which layout, for a product of (t, n_tokens, n_in): the GEMV's, where one
 * call takes n_tokens and the type has the int8-x form (rf_gpu_gemv's two halves); else MMQ's, where
 * the router sends the product there (rf_gpu_route_for) and RF_GPU_MMQ_XQ is on, in order with
 * rf_gpu_mmq_rk's records (*mmq true), so that the op making x quantizes it for the product as
 * rf_gpu_mmq would, one kernel fewer. RF_ERR_INVALID_ARG (op names the caller) where neither:
 * that product takes f32 x. */
static rf_status rf_xq_plan(rf_gpu_ctx *ctx, const char *op, rf_type wtype, int64_t n_tokens, int64_t n_in, int *gb,
                            int *rk, bool *mmq) {
    RF_GPU_REQUIRE(n_tokens >= 1 && n_tokens <= 65535 && n_in >= RF_QK && n_in % RF_QK == 0 &&
                       n_in <= ((int64_t)1 << 28) && n_tokens * n_in <= 0x7fffffff, op,
                   "n_tokens=%lld, n_in=%lld (n_in a multiple of 32 in 32..2^28)", (long long)n_tokens, (long long)n_in);
    *mmq = false;
    if (rf_xq_gemv_takes(ctx, wtype, n_tokens, n_in)) {
        rf_xq_layout(ctx, wtype, n_tokens, n_in, gb, rk);
        return RF_OK;
    }
    *mmq = rf_knob_bool(RF_KNOB_GPU_MMQ_XQ) && rf_gpu_mmq_supported(wtype, n_in) &&
           rf_gpu_route_for(ctx, wtype, n_tokens, n_in, 1) == RF_ROUTE_MMQ;
    RF_GPU_REQUIRE(*mmq, op,
                   "weight type %d with n_tokens=%lld, n_in=%lld has no int8-x product: the GEMV's (%d tokens at most; "
                   "32-element formats; Q4_K, Q5_K, Q6_K with CUDA and n_in a multiple of 256 up to 16384) or MMQ's "
                   "(where the router sends the product there, RF_GPU_MMQ_XQ on)", (int)wtype, (long long)n_tokens,
                   (long long)n_in, rf_gemv_max_nt(ctx, wtype, n_in));
    *gb = 1;
    *rk = rf_gpu_mmq_rk(wtype);
    return RF_OK;
}

/* the whole int8-x product: x quantized into scratch, then the product kernel */
static rf_status rf_xq_gemv(rf_gpu_ctx *ctx, float *y, const uint8_t *w, rf_type t, const float *x,
                            int nt, int64_t n_in, int64_t n_out) {
    size_t mark;
    void *xq;
    rf_status st = rf_gpu_tmp(ctx, rf_gpu_xq_bytes(nt, n_in), &xq, &mark);
    if (!st) st = rf_q32_quantize(ctx, xq, t, x, nt, n_in);
    if (!st) st = rf_q32_product(ctx, y, w, t, xq, nt, n_in, n_out, true, NULL);
    ctx->scratch_used = mark; /* stream order (and rf_pdl_wait) protects the reuse */
    return st;
}

extern "C" rf_status rf_gpu_quantize_x(rf_gpu_ctx *ctx, void *xq, rf_type wtype, const float *x,
                                       int64_t n_tokens, int64_t n_in) {
    const char *op = "rf_gpu_quantize_x";
    int gb, rk;
    bool mmq;
    const rf_status st = rf_xq_plan(ctx, op, wtype, n_tokens, n_in, &gb, &rk, &mmq);
    if (st) return st;
    RF_GPU_REQUIRE(xq && x && ((uintptr_t)xq & 15) == 0 && ((uintptr_t)x & 15) == 0, op,
                   "x and xq must be 16-byte aligned device memory (rf_gpu_alloc)");
    return rf_gemv_launch_quantize_x(ctx, xq, gb, rk, x, (int)n_tokens, n_in);
}

/* the GEMV's layout only (the tensor-parallel norm's quantizer, which has no per-256 form) */
rf_status rf_gpu_xq_plan(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in, int *gb, int *rk) {
    bool mmq;
    const rf_status st = rf_xq_plan(ctx, "rf_gpu_xq_plan", wtype, n_tokens, n_in, gb, rk, &mmq);
    if (!st && mmq) return rf_set_error(RF_ERR_INVALID_ARG, "rf_gpu_xq_plan: %lld tokens of type %d run on MMQ",
                                        (long long)n_tokens, (int)wtype);
    return st;
}
extern "C" rf_status rf_gpu_xq_layout(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in, int *gb, int *rk) {
    bool mmq;
    return rf_xq_plan(ctx, "rf_gpu_xq_layout", wtype, n_tokens, n_in, gb, rk, &mmq);
}
extern "C" rf_status rf_gpu_rmsnorm_quantize_x_parts(rf_gpu_ctx *ctx, float *h, void *xq, rf_type wtype, float *x,
                                                     const float *res, int np, const float *w, int64_t n_tokens,
                                                     int64_t n_in, float eps) {
    const char *op = "rf_gpu_rmsnorm_quantize_x";
    int gb, rk;
    bool mmq;
    const rf_status st = rf_xq_plan(ctx, op, wtype, n_tokens, n_in, &gb, &rk, &mmq);
    if (st) return st;
    RF_GPU_REQUIRE(n_in <= 16384, op, "n_in=%lld above 16384", (long long)n_in);
    RF_GPU_REQUIRE(((uintptr_t)xq & 15) == 0, op, "xq must be 16-byte aligned (rf_gpu_alloc memory)");
    RF_GPU_REQUIRE(!res || h != x, op, "h must not alias x with a residual");
    RF_GPU_REQUIRE(np >= 1 && np <= 8, op, "%d residual parts (1..8)", np);
    return rf_gemv_launch_rmsnorm_quantize_x(ctx, h, xq, gb, rk, x, res, np, w, (int)n_tokens, n_in, eps);
}
extern "C" rf_status rf_gpu_rmsnorm_quantize_x(rf_gpu_ctx *ctx, float *h, void *xq, rf_type wtype, float *x,
                                               const float *res, const float *w, int64_t n_tokens, int64_t n_in,
                                               float eps) {
    return rf_gpu_rmsnorm_quantize_x_parts(ctx, h, xq, wtype, x, res, 1, w, n_tokens, n_in, eps);
}

extern "C" rf_status rf_gpu_glu_quantize_x(rf_gpu_ctx *ctx, float *y, void *xq, rf_type wtype, bool geglu,
                                           const float *gate, int64_t gs, const float *up, int64_t us,
                                           int64_t n_tokens, int64_t n_in) {
    const char *op = "rf_gpu_glu_quantize_x";
    int gb, rk;
    bool mmq;
    const rf_status st = rf_xq_plan(ctx, op, wtype, n_tokens, n_in, &gb, &rk, &mmq);
    if (st) return st;
    RF_GPU_REQUIRE(((uintptr_t)xq & 15) == 0, op, "xq must be 16-byte aligned (rf_gpu_alloc memory)");
    RF_GPU_REQUIRE(gs >= n_in && us >= n_in, op, "row strides %lld, %lld below n_in=%lld", (long long)gs,
                   (long long)us, (long long)n_in);
    return rf_gemv_launch_glu_quantize_x(ctx, y, xq, gb, rk, geglu, gate, gs, up, us, (int)n_tokens, n_in);
}

extern "C" bool rf_gpu_gemv_has_xq(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in) {
    /* where the router sends the product to one GEMV call, or to MMQ with RF_GPU_MMQ_XQ on (not
     * where it quantizes inside a larger path: the BLAS, W4A16, the GEMV groups) */
    if (n_tokens < 1 || n_tokens > 65535 || n_in < RF_QK || n_in % RF_QK || n_in > ((int64_t)1 << 28)) return false;
    const rf_gpu_route_kind r = rf_gpu_route_for(ctx, wtype, n_tokens, n_in, 1);
    const bool gemv = rf_xq_gemv_takes(ctx, wtype, n_tokens, n_in); /* rf_xq_plan's first choice */
    if (r == RF_ROUTE_GEMV) return gemv;
    return r == RF_ROUTE_MMQ && !gemv && rf_knob_bool(RF_KNOB_GPU_MMQ_XQ) && rf_gpu_mmq_supported(wtype, n_in);
}

extern "C" bool rf_gpu_gemv_rounds_x(const rf_gpu_ctx *ctx, rf_type t, int64_t n_in) {
    return n_in >= RF_QK && n_in % RF_QK == 0 && rf_has_xq(ctx, t, n_in);
}

extern "C" rf_status rf_gpu_gemv_xq(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                    const void *xq, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    return rf_gpu_gemv_xq_bias(ctx, y, w, wtype, xq, NULL, n_tokens, n_in, n_out);
}

/* rf_gpu_gemv_xq_bias, or with parts (not NULL, no bias) the split-K partial sums left there
 * unsummed where the product runs on MMQ in splits that fit in cap bytes (*np = the splits; else
 * 0 and y written) */
static rf_status rf_gemv_xq_run(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq,
                                const float *bias, int64_t n_tokens, int64_t n_in, int64_t n_out, float *parts,
                                size_t cap, int *np) {
    const char *op = "rf_gpu_gemv_xq";
    int gb, rk;
    bool mmq;
    rf_status st = rf_xq_plan(ctx, op, wtype, n_tokens, n_in, &gb, &rk, &mmq);
    if (st) return st;
    RF_GPU_REQUIRE(n_out >= 1 && n_out <= 0x7fffffff, op, "n_out=%lld", (long long)n_out);
    RF_GPU_REQUIRE(w && xq && y && ((uintptr_t)w & 15) == 0 && ((uintptr_t)xq & 15) == 0 && ((uintptr_t)y & 3) == 0,
                   op, "w and xq must be 16-byte aligned device memory (rf_gpu_alloc)");
    if (mmq) { /* the MMQ has no bias epilogue: the bias kernel after it */
        st = parts && !bias ? rf_gpu_mmq_xq_parts(ctx, y, w, wtype, xq, rk, n_tokens, n_in, n_out, parts, cap, np)
                            : rf_gpu_mmq_xq(ctx, y, w, wtype, xq, rk, n_tokens, n_in, n_out);
        return st || !bias ? st : rf_gpu_add_bias(ctx, y, bias, n_tokens, n_out);
    }
    return rf_q32_product(ctx, y, (const uint8_t *)w, wtype, xq, (int)n_tokens, n_in, n_out, false, bias);
}

extern "C" rf_status rf_gpu_gemv_xq_bias(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                         const void *xq, const float *bias, int64_t n_tokens, int64_t n_in,
                                         int64_t n_out) {
    return rf_gemv_xq_run(ctx, y, w, wtype, xq, bias, n_tokens, n_in, n_out, NULL, 0, NULL);
}

extern "C" rf_status rf_gpu_gemv_xq_parts(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const void *xq,
                                          int64_t n_tokens, int64_t n_in, int64_t n_out, float *parts, size_t cap,
                                          int *np) {
    *np = 0;
    RF_GPU_REQUIRE(parts && ((uintptr_t)parts & 15) == 0, "rf_gpu_gemv_xq_parts", "parts must be 16-byte aligned");
    return rf_gemv_xq_run(ctx, y, w, wtype, xq, NULL, n_tokens, n_in, n_out, parts, cap, np);
}

extern "C" rf_status rf_gpu_gemv(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                 const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const char *op = "rf_gpu_gemv";
    RF_GPU_REQUIRE(rf_gpu_type_supported(wtype), op, "weight type %d has no GPU decoder",
                   (int)wtype);
    RF_GPU_REQUIRE(n_tokens >= 1 && n_tokens <= rf_gemv_max_nt(ctx, wtype, n_in), op, "n_tokens=%lld outside 1..%d",
                   (long long)n_tokens, rf_gemv_max_nt(ctx, wtype, n_in));
    const int bs = rf_gq_block((int)wtype), bb = rf_gq_bytes((int)wtype);
    RF_GPU_REQUIRE(n_in >= 1 && n_in % bs == 0, op, "n_in=%lld not a multiple of block size %d",
                   (long long)n_in, bs);
    RF_GPU_REQUIRE(n_out >= 1 && n_out <= 0x7fffffff, op,
                   "n_out=%lld", (long long)n_out);
    RF_GPU_REQUIRE(n_in <= ((int64_t)1 << 28), op, "n_in=%lld above 2^28", (long long)n_in);
    RF_GPU_REQUIRE(((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 3) == 0,
                   op, "w and x must be 16-byte aligned (rf_gpu_alloc memory)");
    const int64_t rb = n_in / bs * bb;
    const int nt = (int)n_tokens;
    const unsigned threads = RF_GEMV_WARPS * ctx->info.warp_size;
    const unsigned grid = (unsigned)((n_out + RF_GEMV_WARPS - 1) / RF_GEMV_WARPS);
    /* variants 4..7 are the q32s kernel's only: the other kernels take their default */
    const int vsel = ctx->gemv_variant >= 1 && ctx->gemv_variant <= 3 ? ctx->gemv_variant : 0;
    const int v = vsel ? vsel : RF_GEMV_DEFAULT_F16; /* F16/BF16 */
    const int rpb = rf_gemv_rows_per_block(v);
    const unsigned vgrid = (unsigned)((n_out + rpb - 1) / rpb); /* n_out < 2^31 checked above */
    /* K-quant default: one warp per row for Q4_K/Q5_K, four for Q6_K */
    const int vk = vsel ? vsel : wtype == RF_TYPE_Q6_K ? 2 : 1;
    const unsigned kgrid = (unsigned)((n_out + rf_gemv_rows_per_block(vk) - 1) / rf_gemv_rows_per_block(vk));
    const uint8_t *wp = (const uint8_t *)w;
    /* the 32-element formats, and Q4_K / Q5_K where q32s takes them: x -> int8 per 32 (+ scale
     * and sums) in scratch, then the dp4a kernel */
    if (rf_has_xq(ctx, wtype, n_in)) return rf_xq_gemv(ctx, y, wp, wtype, x, nt, n_in, n_out);
    switch (wtype) {
    case RF_TYPE_F16: case RF_TYPE_BF16:
#if !defined(RF_HIP)
        /* 2..8 tokens on the tensor cores (variants 25 and 26; 25 is the default) */
        if (nt >= 2 && n_in % 32 == 0 && ctx->info.cc_major >= 8 &&
            (ctx->gemv_variant == 0 || ctx->gemv_variant == 25 || ctx->gemv_variant == 26)) {
            return rf_gemv_launch_tc(ctx, wtype, y, wp, x, nt, n_in, n_out);
        }
#endif
        if (n_in % 8 == 0) return rf_gemv_launch_f16(ctx, v, vgrid, threads, wtype, y, wp, x, nt, n_in, n_out);
        /* fall through: unaligned rows take the generic kernel */
    default:
        /* f32 weights (MoE routers: one per layer, 43 us a call through gemv_generic on an H200
         * at 128 x 2048) through gemv_f16's loop, 4 floats per 16-byte word */
        if (wtype == RF_TYPE_F32 && n_in % 4 == 0)
            return rf_gemv_launch_f16(ctx, v, vgrid, threads, wtype, y, wp, x, nt, n_in, n_out);
        if (wtype == RF_TYPE_Q4_K || wtype == RF_TYPE_Q5_K || wtype == RF_TYPE_Q6_K)
            return rf_gemv_launch_k(ctx, vk, kgrid, threads, wtype, y, wp, x, nt, n_in, n_out, rb);
        return rf_gemv_launch_generic(ctx, grid, threads, wtype, y, wp, x, nt, n_in, n_out, rb, bs, bb);
    }
}

/* ---- the route: which family takes a product of n tokens, and the dispatch on it ---------- */

/* The knobs of the route (read once): RF_GPU_GEMV_MAX (default 64), RF_GPU_MMQ_MAX (96, 0 =
 * never), RF_GPU_MMQ_MIN (17); what each threshold rests on: gpu_route.c */
static void rf_route_knobs(int64_t *gemv_max, int64_t *mmq_min, int64_t *mmq_max) {
    static int64_t g = -1, lo = -1, hi = -1;
    if (g < 0) {
        hi = rf_knob_int(RF_KNOB_GPU_MMQ_MAX);
        lo = rf_knob_int(RF_KNOB_GPU_MMQ_MIN);
        if (lo < 1) lo = 1;
        g = rf_knob_int(RF_KNOB_GPU_GEMV_MAX);
    }
    *gemv_max = g, *mmq_min = lo, *mmq_max = hi;
}

/* the router's facts for this context and product (gpu_route.h) */
extern "C" rf_gpu_route_kind rf_gpu_route_for(const rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in,
                                     int64_t n_out) {
    rf_gpu_route_facts f;
    f.type = wtype, f.n_tokens = n_tokens, f.n_in = n_in, f.n_out = n_out;
    f.invariant = ctx->invariant;
    f.mmq = ctx->info.cc_major >= 8 && rf_gpu_mmq_supported(wtype, n_in);
    f.gemv = rf_gpu_gemv_supported(wtype);
    f.gemv_n = rf_gpu_gemv_max_tokens(ctx, wtype, n_in);
#if defined(RF_GPU_NO_BLAS)
    f.blas = false;
#else
    f.blas = true;
#endif
    rf_route_knobs(&f.gemv_max, &f.mmq_min, &f.mmq_max);
    f.mmq_wide = rf_knob_int(RF_KNOB_GPU_MMQ_WIDE);
    /* RF_GPU_W4A16 read per call, so a test may turn it: 1 from the minimum up, 2 (auto, the
     * default) up to RF_GPU_W4A16_MAX as well */
    const int w4 = (int)rf_knob_int(RF_KNOB_GPU_W4A16);
    f.w4a16 = w4 != 0 && ctx->info.cc_major >= 8 && rf_gpu_w4a16_supported(wtype, n_in);
    f.w4a16_min = rf_knob_int(RF_KNOB_GPU_W4A16_MIN);
    f.w4a16_max = w4 == 2 ? rf_knob_int(RF_KNOB_GPU_W4A16_MAX) : 0;
    return rf_gpu_route(&f);
}

extern "C" void rf_gpu_set_batch_invariant(rf_gpu_ctx *ctx, bool on) { ctx->invariant = on; }

extern "C" bool rf_gpu_mmq_takes(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in) {
    return rf_gpu_route_for(ctx, wtype, n_tokens, n_in, 1) == RF_ROUTE_MMQ;
}

/* Whether rf_gpu_matmul (and the backend's shared-x products, which take the GEMV's rule) rounds
 * x to int8 blocks of 32 for this product: by the route, asked by the CPU twin in tests
 * (core/test_hooks.h, cpu_act). MMQ and the BLAS path of quantized weights round; the GEMVs
 * (one call or groups of 8) round where their kernel takes int8 x (rf_gpu_gemv_rounds_x: the 32-element
 * formats, K-quants where q32s takes the rows), not in the f32-x kernels; unquantized weights never. */
extern "C" bool rf_gpu_matmul_rounds_x(rf_gpu_ctx *ctx, rf_type wtype, int64_t n_tokens, int64_t n_in) {
    if (wtype == RF_TYPE_F32 || wtype == RF_TYPE_F16 || wtype == RF_TYPE_BF16) return false;
    switch (rf_gpu_route_for(ctx, wtype, n_tokens, n_in, 1)) {
    case RF_ROUTE_GEMV: case RF_ROUTE_GEMV_GROUPS: return rf_gpu_gemv_rounds_x(ctx, wtype, n_in);
    case RF_ROUTE_NONE: return false;
    default: return true; /* MMQ; BLAS: x through ggml's int8 rounding, then f16 */
    }
}

/* y = W x for any n_tokens through the GEMV kernels, as many tokens per call as one takes (8, or
 * 16 where gemv_mt takes the type) */
static rf_status rf_gemv_groups(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype, const float *x,
                                int64_t n_tokens, int64_t n_in, int64_t n_out) {
    const int64_t g = rf_gpu_gemv_max_tokens(ctx, wtype, n_in); /* 16 where gemv_mt takes them, else 8 */
    for (int64_t t = 0; t < n_tokens; t += g) {
        const int64_t nt = n_tokens - t < g ? n_tokens - t : g;
        const rf_status st = rf_gpu_gemv(ctx, y + t * n_out, w, wtype, x + t * n_in, nt, n_in, n_out);
        if (st) return st;
    }
    return RF_OK;
}

/* y = W x for any n_tokens: the kernel family rf_gpu_route picks */
extern "C" rf_status rf_gpu_matmul(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                   const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    switch (rf_gpu_route_for(ctx, wtype, n_tokens, n_in, n_out)) {
    case RF_ROUTE_MMQ: return rf_gpu_mmq(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    case RF_ROUTE_GEMV: return rf_gpu_gemv(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    case RF_ROUTE_GEMV_GROUPS: return rf_gemv_groups(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    case RF_ROUTE_BLAS: return rf_gpu_gemm(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    case RF_ROUTE_W4A16: return rf_gpu_w4a16(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
    default:
        return rf_set_error(RF_ERR_UNSUPPORTED, "deterministic mode: no batch-invariant GPU product for %s weights with "
                            "%lld inputs (it has q4_0, q5_0, q8_0, mxfp4, q4_K, q5_K and q6_K on sm_80 and newer); use the CPU or "
                            "leave the mode off", rf_type_name(wtype), (long long)n_in);
    }
}

#if defined(RF_GPU_NO_BLAS)
/* no BLAS in this build (HIP without hipBLAS): the BLAS entry runs the GEMV groups */
extern "C" rf_status rf_gpu_gemm(rf_gpu_ctx *ctx, float *y, const void *w, rf_type wtype,
                                 const float *x, int64_t n_tokens, int64_t n_in, int64_t n_out) {
    return rf_gemv_groups(ctx, y, w, wtype, x, n_tokens, n_in, n_out);
}
#endif

/* ---- the GEMV timeline trace (RF_GEMV_TRACE builds; else RF_ERR_UNSUPPORTED) -------------- */

extern "C" rf_status rf_gpu_trace_reset(rf_gpu_ctx *ctx) {
#if defined(RF_GEMV_TRACE)
    RF_GPU_CHECK(cudaStreamSynchronize(ctx->stream));
    ctx->trace_seq = 0;
    return RF_OK;
#else
    (void)ctx;
    return rf_set_error(RF_ERR_UNSUPPORTED, "GEMV trace: build with -DRF_GEMV_TRACE=ON");
#endif
}
#if defined(RF_GEMV_TRACE)
/* the last min(max_calls, cap, launches) calls' slots of a trace buffer (sym: cap slots of per
 * bytes), oldest first, into out; *ncalls = their number */
rf_status rf_trace_copy(rf_gpu_ctx *ctx, const void *sym, int cap, size_t per, uint64_t *out,
                        int max_calls, int *ncalls) {
    RF_GPU_CHECK(cudaStreamSynchronize(ctx->stream));
    int n = (int)ctx->trace_seq < max_calls ? (int)ctx->trace_seq : max_calls;
    if (n > cap) n = cap;
    for (int i = 0; i < n; i++) {
        const unsigned c = (ctx->trace_seq - (unsigned)n + (unsigned)i) % (unsigned)cap;
        RF_GPU_CHECK(cudaMemcpyFromSymbol((char *)out + i * per, sym, per, c * per));
    }
    *ncalls = n;
    return RF_OK;
}
#endif
