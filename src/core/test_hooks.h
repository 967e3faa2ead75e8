/* test_hooks.h — behaviours only tests may turn on (a slow model load, simulated out-of-memory
 * faults in the server, every tensor-parallel shard on one GPU), behind one pointer that only test
 * code sets. Nothing in src/ or tools/ sets it, so `rocmforge` and library users never see them;
 * the test build of the command, rocmforge-test, sets it from the environment (docs/knobs.md). */
#ifndef RF_TEST_HOOKS_H
#define RF_TEST_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

#include "rocmforge/core.h" /* rf_type */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_test_hooks {
    int serve_load_delay_ms; /* serve: the model loader waits this long first (a window for 503s) */
    bool serve_faults;       /* serve: a request's "X-RF-Test-Fault: oom-events" header is honoured, and
                                "X-RF-Test-Output: <JSON string>" replaces a chat answer's text */
    bool tp_one_device;      /* --tp N on a GPU: every shard on the one device, one after another */
    bool tp_cpu_ranks;       /* --tp N on the CPU through the several-GPU path (a backend per rank) */
    /* --tp over GPUs: from the tp_skip_from-th collective (counted from 1 per split) on, rank
     * tp_skip_rank - 1's (0 = none) stream runs a stall kernel before its share: a GPU that
     * stopped, so the other ranks' collectives wait and the step's wait must time out */
    int tp_skip_rank;
    int64_t tp_skip_from;
    /* CPU products of quantized weights (rf_cpu_matmul): RF_CPU_ACT_GGML (0) as ggml (activations
     * in the weight type's vec_dot_type); RF_CPU_ACT_GPU: activations rounded as the GPU's int8-x
     * products round them (blocks of 32, f16 scale d = amax / 127, q = rint(x * 127 / amax), for
     * every quantized type, K-quants included), then f32 products on the dequantized weights: the
     * GPU's twin, the same values summed in another order; RF_CPU_ACT_F32: f32 activations on the
     * dequantized weights (an accuracy reference). Read at every product. With RF_CPU_ACT_GPU,
     * cpu_act_rounds (when not NULL) says per product whether the GPU rounds x (its path choice:
     * rf_gpu_matmul_rounds_x); where it does not, the twin keeps x in f32. */
    int cpu_act;
    bool (*cpu_act_rounds)(rf_type wtype, int64_t n_tokens, int64_t n_in);
    /* CPU mixture-of-experts router (rf_cpu_moe_route), when not NULL: lowers *moe_gap_min to
     * the smallest gap between a token's k-th and (k+1)-th router logits, in units of that
     * token's root-mean-square router logit, over every token routed (gatings that choose by
     * logit: softmax and softmax over the top k; sigmoid routers are not measured). How near a
     * path came to a router tie, for tests that judge a changed greedy token. */
    float *moe_gap_min;
    /* CPU gated delta rule (rf_cpu_gated_delta), when not NULL: lowers *dn_cond_min to the
     * smallest |o| / (||M||_F |q|) over every token and value head, o = M q the head's output
     * before its gated RMS norm, M the state after the token's update. The norm divides by |o|, so
     * a relative perturbation e of q, k or M moves the normed output by ~e / cond: near 0 (with an
     * empty state, cond = |cos(q, k)|) the output's sign turns on float order. For tests that judge
     * two paths' distance on such a prompt. */
    float *dn_cond_min;
    /* rf_gpu_paged_attention: the kernels as before the decode speed-up (no L2 prefetch, the
     * reduce loading one unit at a time) so that a test
     * times both in one run; the values are the same bit for bit either way */
    bool gpu_pa_old;
    /* rf_gpu_paged_attention: the plain kernel where the staged one (K/V copied into shared
     * memory with cp.async) would run, for a side-by-side timing; the same bits either way */
    bool gpu_pa_nostage;
    /* rf_gpu_paged_attention: > 0 sets the rows per warp (query rows a block serves) at most: the
     * power of two at most this, for decode rows in place of the default cap (4) and for prompt
     * chunks below theirs, so that a test can time and check the kernel's other instantiations
     * (8: the former decode cap); the same bits either way */
    int gpu_pa_rows;
    /* GPU: the RoPE + KV append and the paged attention launched in stream order, not as
     * programmatic dependent launches, to time what overlapping them with the kernel before
     * gives in a whole step; the same bits either way */
    bool gpu_attn_nopdl;
    /* GPU products: > 0 sets the fewest tokens gemv_mt takes under the default route, for every
     * type (4: the route before Q8_0 and Q4_1 took it from 2 and Q4_0 from 3), for a side-by-side
     * timing */
    int gpu_mt_min;
    /* GPU products: gemv_mt's grids of one block an SM keep the format's 2-3 stage ring instead
     * of the deep one (as many stages as fit), for a side-by-side timing; the same bits either way */
    bool gpu_mt_shallow;
    /* --tp over GPUs: the peer-to-peer all-reduce in its pull form (each rank reads its peers'
     * copies after the barrier) instead of the push form (each rank stores into its peers'
     * memory before it), for a side-by-side timing; the same bits either way */
    bool gpu_p2p_pull;
    /* --tp over GPUs: the p2p all-reduce kernel does not let the next kernel (a programmatic
     * dependent launch: the norm) launch before it ends, as before that change; the same bits */
    bool gpu_p2p_notrigger;
    /* --tp over GPUs: no all-reduce is issued at all (the sums are wrong): a step's time without
     * them, the most that a cheaper or fused all-reduce could give, for timing only */
    bool tp_no_reduce;
    /* --tp over GPUs: the all-reduce kernel, then the norm, where the fused kernel would run
     * (rf_tp_comm_add_rmsnorm), to time and compare both; the same bits either way */
    bool tp_norm_unfused;
    /* GPU backend: op kinds that launch nothing (RF_SKIP_* of gpu_be.h: attention, RoPE + KV
     * append, the norms, the GLU, the products), so that a step is timed without them: what
     * each kind costs inside a whole step and its graph; the values are wrong, for timing only */
    int gpu_skip_ops;
    /* GPU: the fused norm + quantization on one block a row where the cluster of blocks (one a
     * 1,024-element slice) would run, for a side-by-side timing and to test both kernels; the
     * same bits either way */
    bool gpu_norm_nocl;
} rf_test_hooks;

#define RF_CPU_ACT_GGML 0
#define RF_CPU_ACT_GPU 1
#define RF_CPU_ACT_F32 2

/* The hooks in force, or NULL (always NULL in the product). */
const rf_test_hooks *rf_test_hooks_get(void);

/* Tests only: installs a copy of *h, or none with NULL. Call it before the code it affects runs
 * (not thread-safe against a reader in flight). */
void rf_test_hooks_set(const rf_test_hooks *h);

#ifdef __cplusplus
}
#endif

#endif
