/* gpu_route.c — the GPU product router's rule (rf_gpu_route): the one place that decides which
 * kernel family a product of n tokens takes, a pure function of its facts (plain C, tested in
 * every build). gpu_matmul.cu gathers the facts (rf_gpu_route_for) and dispatches on the answer;
 * the backend's shared-activation products (gpu_backend_products.c) and the tests' CPU twin ask
 * it through rf_gpu_gemv_has_xq / rf_gpu_matmul_rounds_x. Measurements behind each threshold:
 * docs/PERFORMANCE.md and docs/perf-gpu.md. */
#include "backend/gpu/gpu_route.h"

static bool quantized(rf_type t) { return t != RF_TYPE_F32 && t != RF_TYPE_F16 && t != RF_TYPE_BF16; }

rf_gpu_route_kind rf_gpu_route(const rf_gpu_route_facts *f) {
    const int64_t n = f->n_tokens;
    /* batch invariance: only MMQ's reduction order is independent of the token count */
    if (f->invariant) return f->mmq && n >= 1 ? RF_ROUTE_MMQ : RF_ROUTE_NONE;
    /* W4A16 from RF_GPU_W4A16_MIN tokens (default 33 since its stages are filled by tensor copies:
     * the 48-sequence 8B Q4_0 step 8.23 -> 6.06 ms on an H200, 2026-11-30, 32 sequences
     * unchanged; before them it was 64: the 64-sequence step 8.45 -> 8.06 ms with it from 33,
     * 2026-11-29, while 32 sequences lost 1.2%) up to
     * w4a16_max (auto: RF_GPU_W4A16_MAX, default 192). Measured on an H200 (2026-11-29,
     * tests/gpu/test_gpu_w4a16.c's RF_W4A16_BENCH table, llama3-8b shapes): at 128 tokens W4A16
     * beats MMQ and dequantize + cuBLAS in every type and shape (Q4_0 4096 -> 14336: 72 us against
     * 96 and 94), at 256 cuBLAS wins everywhere (137 against 109); the 128-sequence 8B Q4_0 step
     * 13.9 -> 12.3 ms, the 256-sequence one 18.9 -> 22.4 ms with no upper limit. */
    if (f->w4a16 && n >= (f->w4a16_min < 1 ? 1 : f->w4a16_min) && (f->w4a16_max <= 0 || n <= f->w4a16_max))
        return RF_ROUTE_W4A16;
    /* MMQ from RF_GPU_MMQ_MIN (default 17: past the 16 tokens gemv_mt takes in one call, which
     * reads each weight once for all of them where MMQ reads it once per 32 and pays a split-K
     * reduction; on the H100 with the older GEMVs, 2 and 4 sequences of 8B Q4_0 lost with MMQ
     * (3.34 -> 6.00, 5.27 -> 6.07 ms a step) and 8 gained (6.52 -> 6.11), so 5 was the default
     * then); up to RF_GPU_MMQ_MAX (default 96: on an H200 it beats dequantize + cuBLAS at 64
     * tokens and loses at 128 in every type and shape measured, docs/PERFORMANCE.md 2026-11-29;
     * the 128-sequence step 20.9 -> 18.8 ms). Where gemv_mt does not take the type and width (one
     * GEMV call takes 8: the q32s loop or the f32-x kernels), MMQ from 5 at the latest, the
     * routing before gemv_mt; past what one GEMV call takes, MMQ whatever RF_GPU_MMQ_MIN says. */
    const int64_t gemv_n = f->gemv_n < 8 ? 8 : f->gemv_n;
    int64_t mmq_min = f->mmq_min < 1 ? 1 : f->mmq_min;
    if (gemv_n < 16 && mmq_min > 5) mmq_min = 5;
    /* Wide rows (the down product, 14336 -> 4096 on llama3-8b) of Q5_0 / Q5_K: MMQ at 4..8
     * tokens where gemv_mt would take them (its 8-token tile), gemv_mt from 9. gemv_mt gives such
     * a product few blocks (128 of 8 warps on 132 SMs); MMQ splits the row. Per product on an
     * H200 (2026-11-30, RF_GEMVN_BENCH=mt test_gpu_gemvn, us at 4 / 8 / 16 tokens, gemv_mt ->
     * MMQ, before gemv_mt's copy plans): Q4_K 40.5 / 41.0 / 39.2 -> 28.6 / 32.0 / 32.4, Q5_K
     * 44.4 / 44.7 / 40.8 -> 30.5 / 34.5 / 34.4, Q5_0 46.0 / 45.1 / 39.7 -> 30.0 / 29.4 / 30.6;
     * not Q8_0 (MMQ slower at 4-8) nor Q6_K (47.7 against 30.3 at 8). In the step after the copy
     * plans (llama3-8b, bench -b 4,8,16, 07:09 UTC, knob 0 against 12288 at every count, two
     * rounds): Q4_K_M MMQ +0.9% at 4, +2.0% at 8, -0.9% at 16, hence 4..8; Q4_0 (then at 16
     * only) -2.1% at 16, hence none. Q4_K left the rule with gemv_mt's deep ring (grids of one
     * block an SM): the 8B Q4_K_M step with the knob off against 12288, 4 / 8 sequences 1,034 /
     * 2,015 -> 1,079 / 2,077 tok/s (H200, 2026-11-30); Q5_0 and Q5_K were not re-measured. By
     * n_in alone: the route's askers that know no n_out (rf_gpu_mmq_takes,
     * rf_gpu_matmul_rounds_x) get the same answer. docs/perf-gpu.md. */
    const bool wide = f->mmq_wide > 0 && f->n_in >= f->mmq_wide && (f->type == RF_TYPE_Q5_0 || f->type == RF_TYPE_Q5_K);
    if (wide && gemv_n >= 16 && f->mmq && n >= 4 && n <= 8 && n <= f->mmq_max) return RF_ROUTE_MMQ;
    if (f->mmq && n >= mmq_min && n <= f->mmq_max) return RF_ROUTE_MMQ;
    if (n <= gemv_n) return RF_ROUTE_GEMV;
    if (f->mmq && n <= f->mmq_max) return RF_ROUTE_MMQ;
    /* groups of gemv_n read a quantized weight once per 8 or 16 tokens, where BLAS writes and
     * reads it whole as f16 every call (8B Q4_0 at 32 sequences: 49 ms a step through BLAS) */
    if (!f->blas || (quantized(f->type) && f->gemv && n <= f->gemv_max)) return RF_ROUTE_GEMV_GROUPS;
    return RF_ROUTE_BLAS;
}

const char *rf_gpu_route_name(rf_gpu_route_kind k) {
    switch (k) {
    case RF_ROUTE_GEMV: return "gemv";
    case RF_ROUTE_GEMV_GROUPS: return "gemv-groups";
    case RF_ROUTE_MMQ: return "mmq";
    case RF_ROUTE_BLAS: return "blas";
    case RF_ROUTE_W4A16: return "w4a16";
    default: return "none";
    }
}

bool rf_gpu_attn_decode_mma(const rf_gpu_attn_facts *f) {
    if (!f->decode || f->invariant || f->bucket_keys <= 0) return false;
    const int64_t keys = f->window > 0 && f->window < f->bucket_keys ? f->window : f->bucket_keys;
    /* measured on the H200 (docs/gpu.md, "Routing"): with an f16 cache the decode kernel is faster
     * for buckets up to 4,096 keys at 1-256 sequences and from 16,384, the paged kernel for one
     * sequence in the 8,192-key bucket; with q8_0 the paged kernel leads below 16,384 at 1-32
     * sequences */
    if (f->mma_min > 0 && keys >= f->mma_min) return true;
    return f->kv_type == RF_TYPE_F16 && keys <= f->mma_short;
}
