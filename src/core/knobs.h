/* knobs.h — every RF_* environment variable the product reads, declared once (RF_KNOBS below:
 * name, type, default, range, meaning) and read once per process by knobs.c. `rocmforge
 * --help-env` prints this table and docs/knobs.md lists it; tests/cli/knobs.sh checks they agree.
 * Test-only variables (RF_TEST_*, the test hooks) are not knobs: code under tests/ reads them. */
#ifndef RF_KNOBS_H
#define RF_KNOBS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "rocmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(ID, TYPE, DEFAULT, LO, HI, MEANING): the variable is RF_<ID>. DEFAULT is a string in the
 * knob's own syntax ("" = unset for STRING). LO/HI bound INT values (inclusive). */
#define RF_KNOBS(X)                                                                                 \
    X(LOG, STRING, "warn", 0, 0, "log level on stderr: error, warn, info, debug (or 0-3)")           \
    X(API_KEY, STRING, "", 0, 0, "serve: the key clients must send when --api-key is not given (never logged)") \
    X(TP, INT, "0", 0, 64, "tensor-parallel shards for commands without --tp (bench, serve); 0 = no split") \
    X(TP_GRAPHS, BOOL, "on", 0, 0, "--tp over several GPUs: decode steps as one graph over every GPU (0: eager)")  \
    X(TP_NO_PEER_OK, BOOL, "off", 0, 0, "--tp over GPUs without peer access: NCCL through host memory (slow)") \
    X(TP_TIMEOUT_MS, INT, "60000", 0, 86400000, "--tp over GPUs: a wait on a step gives up after this many ms and aborts NCCL (0 = never)") \
    X(TP_ALLREDUCE, STRING, "auto", 0, 0, "--tp over GPUs: the all-reduce of steps up to 256 tokens: auto (the default: peer-to-peer kernels where every pair of GPUs has peer access, else NCCL), p2p (those kernels or the load fails), nccl") \
    X(TP_NCCL_NONBLOCKING, BOOL, "off", 0, 0, "--tp over GPUs: non-blocking NCCL communicators (each collective then costs a thread)") \
    X(CHAT_TIMING, BOOL, "off", 0, 0, "chat: print the timing line after each answer")               \
    X(STEP_TOKENS, INT, "0", 0, 65536, "engine: token budget of a step that carries decode tokens (0 = --batch; docs/engine.md)") \
    X(STEP_PROMPT_MIN, INT, "32", 0, 65536, "engine: prompt tokens such a step keeps room for when decodes fill RF_STEP_TOKENS") \
    X(STATE_CHECKPOINTS, INT, "-1", -1, 65536, "engine, hybrid models: recurrent-state checkpoints of the prefix cache (-1: 2 x --parallel; 0: no prefix cache; docs/engine.md)") \
    X(NO_SIMD, BOOL, "off", 0, 0, "CPU: scalar dot kernels only (no AVX2, no VNNI)")                 \
    X(NO_VNNI, BOOL, "off", 0, 0, "CPU: AVX2 dot kernels where AVX-VNNI ones exist (A/B timing)")    \
    X(GGML_ORDER, BOOL, "off", 0, 0, "CPU: ggml's x86 float order for Q8_0 (VNNI), Q4_K and Q6_K dots") \
    X(VNNI, BOOL, "off", 0, 0, "older name of RF_GGML_ORDER")                                       \
    X(CPU_F32_MATMUL, BOOL, "off", 0, 0, "CPU: products in f32 on dequantized weights (exact-mode checks)") \
    X(POOL_SPIN, INT, "2000", 1, 1000000000, "CPU thread pool: spin iterations before a worker sleeps") \
    X(GPU_GRAPHS, BOOL, "on", 0, 0, "GPU: decode steps replayed as CUDA/HIP graphs (off: kernel by kernel)") \
    X(GPU_MASK_OVERLAP, INT, "32", 0, 1000000000, "GPU: fewest sampled rows a structured-output step has for its grammar masks to be written by a host task while the device runs the forward (fewer: before the step is sent; 0 = never; docs/server.md)") \
    X(GPU_STEP_TRACE, BOOL, "off", 0, 0, "engine on a GPU: one stderr line per step (tokens, copies, graph launches)") \
    X(GPU_OP_TIMES, BOOL, "off", 0, 0, "GPU: time every eager kernel by name, table on stderr at exit (with RF_GPU_GRAPHS=0)") \
    X(GPU_SYNC, BOOL, "off", 0, 0, "GPU: synchronize after every kernel so a fault names it (slow)") \
    X(GPU_PDL, BOOL, "on", 0, 0, "GPU (sm_90+): programmatic dependent launch")                      \
    X(GPU_UNFUSED, BOOL, "off", 0, 0, "GPU: the unfused decode ops (fused-vs-unfused A/B)")          \
    X(GPU_FLASH, BOOL, "on", 0, 0, "GPU: prompt attention on the tensor-core flash prefill kernel")  \
    X(GPU_PA_ONE_BLOCK, INT, "256", 0, 1000000000, "GPU: a decode call whose depth bucket (the power of two of at least 256 holding its deepest row) is at most this many keys walks each row group's keys in one block (no split states, no second kernel; the same bits) where a kv head's query heads fit one block (up to 4) and the split form would not fill the GPU better (docs/gpu.md); deeper calls split the keys over blocks (0 = always split)") \
    X(GPU_DECODE_MMA_MIN, INT, "16384", 0, 1000000000, "GPU: a decode call takes the tensor-core decode attention for all its rows where its depth bucket (the power of two of at least 256 holding its deepest row, or the window) reaches this many keys: 16384, the default, from rows past 8,192 keys, where it is faster on the H200 (0 = never by depth; RF_GPU_DECODE_MMA_SHORT still sends short ones)") \
    X(GPU_DECODE_MMA_SHORT, INT, "4096", 0, 1000000000, "GPU, f16 K/V cache: decode calls whose depth bucket is at most this many keys take the tensor-core decode attention too (beside RF_GPU_DECODE_MMA_MIN's deep ones): 4096, the default: on the H200 faster for 1-256 sequences at 128-191 keys (at 32 since its rows of one split skip the merge kernel: qwen3-8b 2026-12-02, 1 / 32 / 64 sequences +5% / +3% / +5% over the paged kernel) and one sequence at 0-2,048; the 8,192-key bucket stays on the paged kernel, which leads there for one sequence (docs/gpu.md; 0 = off)") \
    X(GPU_DECODE_MMA_DIRECT, BOOL, "on", 0, 0, "GPU tensor-core decode attention: calls of one split a row (a depth bucket of 256 keys) write their rows from the attention kernel (off: through the merge kernel; the same bits)") \
    X(GPU_GEMV_MAX, INT, "64", 0, 1000000000, "GPU: most tokens a quantized product runs as GEMVs") \
    X(GPU_MMQ_MAX, INT, "96", 0, 1000000000, "GPU: most tokens a product runs on MMQ (0 = never)") \
    X(GPU_MMQ_MIN, INT, "17", 1, 1000000000, "GPU: fewest tokens a product runs on MMQ")            \
    X(GPU_MMQ_XQ, BOOL, "on", 0, 0, "GPU: MMQ products take x quantized by the kernel that makes it (the norm's, the GLU's), shared by the products of one x (off: each MMQ product quantizes its own x; the same bits)") \
    X(GPU_SPLITK_FUSED, BOOL, "on", 0, 0, "GPU: an MMQ product in split-K splits whose output only the next op reads (Q/K/V: the RoPE + cache store; the attention output and the FFN down product: the next norm) leaves its partial sums to that op's kernel, which adds them in the reduce's order (off: rf_k_mmq_reduce sums them first; the same bits)") \
    X(GPU_MMQ_WIDE, INT, "12288", 0, 1000000000, "GPU: Q5_0 / Q5_K products with rows at least this wide (the feed-forward's down product) run on MMQ at 4..8 tokens, where the multi-token GEMV would take them (0 = never)") \
    X(GPU_W4A16, INT, "2", 0, 2, "GPU: W4A16 tensor-core products (weights dequantized in registers): 0 off, 1 from RF_GPU_W4A16_MIN tokens up, 2 auto (RF_GPU_W4A16_MIN..RF_GPU_W4A16_MAX tokens)") \
    X(GPU_W4A16_MIN, INT, "33", 1, 1000000000, "GPU: fewest tokens a product runs on W4A16") \
    X(GPU_W4A16_MAX, INT, "192", 1, 1000000000, "GPU: most tokens a product runs on W4A16 in auto mode (past it dequantize + cuBLAS wins on an H200)") \
    X(GPU_W4A16_TMA, INT, "1", 0, 1, "GPU: W4A16 stages filled by the tensor memory accelerator where the GPU has it (sm_90): 1 on, 0 the per-thread copy loops") \
    X(GPU_MOE_GROUPED_MIN, INT, "96", 1, 1000000000, "GPU: fewest token-expert slots a MoE product groups by expert (MMQ)") \
    X(GPU_MOE_FUSE, INT, "3", 0, 3, "GPU: MoE decode fusions on the per-slot GEMV path: 0 none, 1 gate+up+GLU in one kernel, 2 also down+weighted sum in one kernel, 3 also the router bias and the activation quantizations folded into the route and GLU kernels, and on the grouped path one grouping for the three products with the scatter and sum in one kernel") \
    X(GPU_MOE_STAGE, BOOL, "on", 0, 0, "GPU: the per-slot MoE decode kernels of K-quant experts (gate+up+GLU, down+sum) copy their weight rows and x into shared memory with whole-warp loads before the dots (off: each lane reads its super-block from global memory; same bits)") \
    X(GPU_MOE_GGEMV, INT, "-1", -1, 1024, "GPU: most token-expert slots per expert (on average) a MoE feed-forward runs on the grouped GEMV (each chosen expert's rows read once per 8 slots, the bits of one token alone) where the per-slot GEMV stops; past it the grouped MMQ (0 = never; -1, the default: 4 for MXFP4 experts, 3 for K-quant experts on its staged form (RF_GPU_MOE_STAGE) and for Q5_0 / Q8_0 experts of rows of 9-31 blocks, where it measured faster, never for the others, where the grouped MMQ is: docs/perf-gpu.md)") \
    X(GPU_MOE_GGEMV_MIN, INT, "0", 0, 1000000000, "GPU: fewest token-expert slots a MoE feed-forward runs on the grouped GEMV (0: from where the per-slot GEMV stops)") \
    X(MMQ_CFG, INT, "0", 0, 5, "GPU MMQ tiles: 0 auto, 1 32-token, 2 64-token 2-stage, 3 64-token, 4 128-token, 5 128-token 2-stage") \
    X(W4A16_CFG, INT, "0", 0, 3, "GPU W4A16 tiles: 0 auto (64 tokens up to 64, Q4_0 / Q8_0 split along the row; else 128), 1 64-token, 2 128-token, 3 64-token with the warps split along the row") \
    X(MMQ_SLOTS, INT, "2", 1, 4, "GPU MMQ split-K: blocks per SM the splits aim to fill")           \
    X(MMQ_X256, BOOL, "on", 0, 0, "GPU MMQ: the K-quants' (Q4_K, Q5_K, Q6_K) dense products take x quantized per 256 and scale once a super-block (off: per 32 and once a block, the earlier kernels, in the default tiles)") \
    X(SAMPLE_SPLIT, BOOL, "off", 0, 0, "GPU sampler: split the vocabulary over blocks above 4 rows too") \
    X(SAMPLE_NO_SPLIT, BOOL, "off", 0, 0, "GPU sampler: never split the vocabulary (one block a row)") \
    X(BENCH_CALLS, INT, "64", 1, 1000000, "GPU micro-benchmark: fewest product calls per captured graph")

typedef enum rf_knob_type { RF_KNOB_BOOL, RF_KNOB_INT, RF_KNOB_FLOAT, RF_KNOB_STRING } rf_knob_type;

#define RF_KNOB_ENUM_(id, type, def, lo, hi, meaning) RF_KNOB_##id,
typedef enum rf_knob { RF_KNOBS(RF_KNOB_ENUM_) RF_KNOB_COUNT } rf_knob;
#undef RF_KNOB_ENUM_

typedef struct rf_knob_info {
    const char *name;    /* "RF_GPU_SYNC" */
    rf_knob_type type;
    const char *def;     /* the default, in the knob's syntax ("" = unset) */
    int64_t lo, hi;      /* INT only: the accepted range */
    const char *meaning; /* one line */
} rf_knob_info;

/* The registry's entry for k (NULL outside 0..RF_KNOB_COUNT-1). */
const rf_knob_info *rf_knob_describe(rf_knob k);
/* "bool", "int", "float", "string". */
const char *rf_knob_type_name(rf_knob_type t);

/* Reads every knob from the environment (once per process), logs each one that is set at info
 * level (once), and returns RF_ERR_INVALID_ARG naming the first knob whose value does not parse
 * (such a knob keeps its default). The CLI calls it before a command, rf_model_load before it
 * loads; the accessors below read the environment themselves if nothing did yet. */
rf_status rf_knobs_init(void);

/* Values: the environment's when set and valid, else the default. */
bool rf_knob_bool(rf_knob k);
int64_t rf_knob_int(rf_knob k);
double rf_knob_float(rf_knob k);
const char *rf_knob_str(rf_knob k); /* NULL when unset (or empty) */
bool rf_knob_is_set(rf_knob k);     /* the variable has a valid, non-empty value */

/* Parses a value with the knob's rule: RF_OK and *_out, or RF_ERR_INVALID_ARG naming the knob.
 * Booleans: 1/true/yes/on and 0/false/no/off, any case. Ints: decimal within [lo, hi]. */
rf_status rf_knob_parse_bool(rf_knob k, const char *s, bool *out);
rf_status rf_knob_parse_int(rf_knob k, const char *s, int64_t *out);

/* For tests only: gives knob k the value s as if the environment had it (NULL = unset), since
 * the environment is read once. Not thread-safe against readers; call it between runs. */
rf_status rf_knob_override(rf_knob k, const char *s);

/* The table `rocmforge --help-env` prints: one line per knob, name, type, default, meaning. */
void rf_knobs_print(FILE *f);

#ifdef __cplusplus
}
#endif

#endif
