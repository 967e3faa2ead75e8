/* test_tp.c — tensor parallelism on the CPU backend (model_tp.c, docs/tp.md): the tiny
 * synthetic models of every architecture (llama with GQA, llama 2 without, qwen2 with biases
 * and 3 query heads per KV head, gemma3 with Q/K norms, post-norms and sliding windows, and the
 * tiny presets of the later architectures in k_presets), in f32 and q8_0, loaded unsplit and
 * split over 2 and 4 shards where the heads allow:
 *  - the last prompt position's logits: rel. L2 vs the unsplit forward below TOL_F32 / TOL_Q8
 *    (the split changes only the order of the sums in O and down: each shard's partial product,
 *    then the all-reduce; q8_0 activations are quantized per 32-element block, and the slices
 *    start on block boundaries, so the quantized inputs are the same bytes. With f32 weights
 *    the differences are float rounding (~1e-7..1e-5). With q8_0 weights every product's input
 *    is requantized to 8 bits, which absorbs them: the logits are mostly bit-identical, and
 *    where one activation's rounding flips, ~1e-2);
 *  - 32 greedy tokens after the prompt: equal, or equal up to a near tie of the unsplit run
 *    (margin < ARGMAX_TIE, as test_model_golden; tiny q8_0 meets one at token 17);
 *  - both with an f32 and an f16 KV cache (f16 rounds K, V, q and the probabilities, which
 *    turns a last-bit difference into an f16 half-ulp now and then: a looser tolerance);
 *  - the KV pool: one per shard and layer, of the shard's KV heads (replicated where
 *    n_head_kv < tp), and rf_kv_bytes_per_pos counts them all;
 *  - errors: a shard count that does not divide the heads (qwen2: 6 heads, tp 4) and a column
 *    split inside a quantization block (q4_K's 256-element blocks at tp 2) are refused at load
 *    with a message naming why. */
#include "core/test_hooks.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_seq.h"

#define TOL_F32 2e-4     /* f32 weights, f32 KV cache: seen <= 6e-5 (gemma3) */
#define TOL_F32_KV16 2e-3 /* f32 weights, f16 KV cache: seen <= 3.2e-4 (gemma3) */
#define TOL_Q8 3e-2       /* q8_0 weights: 0 in 24 of 28 cases, 6.8e-3..1.2e-2 in 4 (f16 cache) */
#define N_PROMPT 24
#define N_GEN 32
#define BLOCK 16
#define ARGMAX_TIE 0.1f /* as test_model_golden */

static char g_dir[1024];

/* (the mixtures of experts: every expert split inside, the router replicated) */
/* "tiny-v2047": tiny with a vocabulary of 2047 tokens (mkmodel --vocab), which no shard count
 * divides: the vocabulary split's last shard takes the remainder (every tiny preset's own size,
 * 2048 or 3072, divides evenly at 2 and 4) */
static const char *const k_presets[] = {"tiny",       "tiny-qwen2",    "tiny-gemma3",   "tiny-llama2",
                                         "tiny-qwen3", "tiny-smollm3",  "tiny-mistral3", "tiny-phi3",
                                         "tiny-qwen3moe", "tiny-gpt-oss", "tiny-v2047"};
#define ODD_VOCAB "tiny-v2047"
#define ODD_VOCAB_ARGS "--preset tiny --vocab 2047"

static const char *const k_types[] = {"f32", "q8_0"};

static void model_path(char *buf, size_t cap, const char *preset, const char *type) {
    snprintf(buf, cap, "%s/tp-%s.%s.gguf", g_dir, preset, type);
}

static int setup(void **state) {
    (void)state;
    const char *cli = getenv("RF_CLI");
    if (!cli) return -1;
    snprintf(g_dir, sizeof g_dir, "%s/synth-models", RF_BINARY_DIR);
    for (size_t p = 0; p < sizeof k_presets / sizeof *k_presets; p++)
        for (size_t t = 0; t < sizeof k_types / sizeof *k_types; t++) {
            char path[1200], cmd[4096];
            model_path(path, sizeof path, k_presets[p], k_types[t]);
            char args[128];
            if (strcmp(k_presets[p], ODD_VOCAB) == 0) snprintf(args, sizeof args, "%s", ODD_VOCAB_ARGS);
            else snprintf(args, sizeof args, "--preset %s", k_presets[p]);
            snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel %s --type %s -o '%s' >/dev/null 2>&1", g_dir, cli,
                     args, k_types[t], path);
            if (system(cmd) != 0) return -1;
        }
    char path[1200], cmd[4096];
    model_path(path, sizeof path, "tiny", "q4_k_m");
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset tiny --type q4_k_m -o '%s' >/dev/null 2>&1", cli, path);
    return system(cmd) != 0 ? -1 : 0;
}

static rf_status load(const char *path, int tp, rf_model **m) {
    rf_model_params mp = rf_model_default_params();
    mp.n_threads = 2;
    mp.tp = tp;
    return rf_model_load(path, &mp, m);
}

/* The prompts: ids spread over the vocabulary, and "Hello world, this is a test" as the tiny
 * llama vocabulary encodes it (BOS 2032 first: `rocmforge run`'s prompt, on which tiny q8_0 at
 * tp 2 with an f16 cache shows a nonzero difference). Ids are taken modulo each vocabulary. */
static const int32_t k_text_prompt[] = {2032, 39, 308, 445, 483, 296, 11, 256, 370, 360, 259, 256, 407};

/* One model file, split at tp vs unsplit (m1's results given), with one KV type and prompt. */
static void compare(const char *preset, const char *type, rf_model *m1, int tp, rf_type kvt, int prompt_i,
                    const int32_t *prompt, int np, const float *lg1, const int32_t *gen1, const float *margin1) {
    char path[1200];
    model_path(path, sizeof path, preset, type);
    const int32_t nv = m1->hp.n_vocab;
    rf_model *mN = NULL;
    rf_status st = load(path, tp, &mN);
    if (m1->hp.n_head % tp) { /* qwen2's 6 heads at tp 4: refused, by name */
        assert_int_equal(st, RF_ERR_INVALID_ARG);
        assert_non_null(strstr(rf_last_error(), "does not divide"));
        if (kvt == RF_TYPE_F32 && prompt_i == 0) printf("  %-12s %-5s tp %d: refused: %s\n", preset, type, tp, rf_last_error());
        return;
    }
    if (st) fail_msg("load %s at tp %d: %s", path, tp, rf_last_error());
    assert_int_equal(mN->tp, tp);
    assert_int_equal(mN->tp_head * tp, m1->hp.n_head);
    /* KV pools: the shard's heads, replicated where there are fewer KV heads than shards */
    int32_t want_kv = m1->hp.n_head_kv >= tp ? m1->hp.n_head_kv / tp : 1;
    assert_int_equal(mN->tp_head_kv, want_kv);
    uint64_t kv1, kvN;
    assert_int_equal(rf_kv_bytes_per_pos(m1, RF_TYPE_F32, &kv1), RF_OK);
    assert_int_equal(rf_kv_bytes_per_pos(mN, RF_TYPE_F32, &kvN), RF_OK);
    assert_true(kvN == kv1 / (uint64_t)m1->hp.n_head_kv * (uint64_t)want_kv * (uint64_t)tp);
    assert_null(mN->tp_be); /* one backend runs every shard */
    float *lgN = malloc((size_t)nv * 4), marginN[N_GEN];
    int32_t genN[N_GEN];
    rf_seq_run(mN, kvt, BLOCK, prompt, np, N_GEN, lgN, genN, marginN);
    double rel = rf_rel_l2(lgN, lg1, (size_t)nv), mad = rf_max_abs_diff(lgN, lg1, (size_t)nv);
    double tol = strcmp(type, "f32") ? TOL_Q8 : kvt == RF_TYPE_F16 ? TOL_F32_KV16 : TOL_F32;
    int same = 0;
    while (same < N_GEN && gen1[same] == genN[same]) same++;
    printf("  %-12s %-5s KV %-3s prompt %d tp %d: logits rel L2 %.3g (max abs %.3g, tol %.0e), greedy %d/%d equal",
           preset, type, rf_type_name(kvt), prompt_i, tp, rel, mad, tol, same, N_GEN);
    if (same < N_GEN) printf(" (then a near tie: unsplit margin %.3g)", margin1[same]);
    printf("\n");
    assert_true(rel < tol);
    /* greedy: equal, or equal up to a step where the unsplit pick led by less than ARGMAX_TIE
     * (a rounding flip meeting a near tie; after it the sequences differ by construction) */
    assert_true(same == N_GEN || margin1[same] < ARGMAX_TIE);
    free(lgN);
    rf_model_free(mN);
}

static void test_sharded_vs_unsharded(void **state) {
    (void)state;
    for (size_t pi = 0; pi < sizeof k_presets / sizeof *k_presets; pi++)
        for (size_t ti = 0; ti < sizeof k_types / sizeof *k_types; ti++) {
            char path[1200];
            model_path(path, sizeof path, k_presets[pi], k_types[ti]);
            rf_model *m1 = NULL;
            if (load(path, 1, &m1)) fail_msg("load %s: %s", path, rf_last_error());
            const int32_t nv = m1->hp.n_vocab;
            float *lg1 = malloc((size_t)nv * 4), margin1[N_GEN];
            int32_t gen1[N_GEN];
            for (int prompt_i = 0; prompt_i < 2; prompt_i++) {
                int32_t prompt[N_PROMPT];
                int np = prompt_i ? (int)(sizeof k_text_prompt / sizeof *k_text_prompt) : N_PROMPT;
                for (int i = 0; i < np; i++) prompt[i] = (prompt_i ? k_text_prompt[i] : i * 131 + 7) % nv;
                for (int kvi = 0; kvi < 2; kvi++) {
                    const rf_type kvt = kvi ? RF_TYPE_F16 : RF_TYPE_F32;
                    rf_seq_run(m1, kvt, BLOCK, prompt, np, N_GEN, lg1, gen1, margin1);
                    for (int tp = 2; tp <= 4; tp *= 2)
                        compare(k_presets[pi], k_types[ti], m1, tp, kvt, prompt_i, prompt, np, lg1, gen1, margin1);
                }
            }
            free(lg1);
            rf_model_free(m1);
        }
}

/* The vocabulary split of a model on CPU ranks: rank s holds rows rf_tp_vocab_rows(s) of the
 * embedding and the LM head, views at those rows of the whole (a tied head: the embedding's
 * slice), the ranks' rows covering the vocabulary once, each about 1/tp of it (V / tp rounded
 * down to 16 rows; the last rank takes the remainder). Prints each rank's bytes of embedding +
 * head and their share of the whole. */
static void check_vocab_split(const rf_model *m, const char *preset, const char *type, int tp) {
    const int64_t V = m->hp.n_vocab;
    int64_t next = 0;
    const bool tied = m->output.data == m->tok_embd.data;
    const uint64_t whole = (uint64_t)m->tok_embd.nb1 * (uint64_t)V + (tied ? 0 : (uint64_t)m->output.nb1 * (uint64_t)V);
    printf("  %-12s %-5s tp %d: vocabulary %lld%s, embedding + LM head %.1f KiB whole; per rank:", preset, type, tp,
           (long long)V, V % tp ? " (not divisible)" : "", whole / 1024.0);
    for (int s = 0; s < tp; s++) {
        int64_t v0, n;
        rf_tp_vocab_rows(m, s, &v0, &n);
        assert_int_equal(v0, next);
        next = v0 + n;
        if (s < tp - 1) { /* V / tp rounded down to 16 rows */
            assert_int_equal(n % 16, 0);
            assert_true(n <= V / tp && V / tp - n < 16);
        } else { /* the rest: fewer than tp * 16 rows over V / tp */
            assert_true(n >= V / tp && n - V / tp < (int64_t)tp * 16);
        }
        assert_int_equal(m->tp_embd[s].ne[1], n);
        assert_ptr_equal(m->tp_embd[s].data, (const char *)m->tok_embd.data + (size_t)v0 * m->tok_embd.nb1);
        assert_int_equal(m->tp_lmhead[s].ne[1], n);
        assert_ptr_equal(m->tp_lmhead[s].data, (const char *)m->output.data + (size_t)v0 * m->output.nb1);
        const uint64_t bytes = (uint64_t)m->tp_embd[s].nb1 * (uint64_t)n +
                               (tied ? 0 : (uint64_t)m->tp_lmhead[s].nb1 * (uint64_t)n);
        printf(" %lld rows %.1f KiB (%.3f)", (long long)n, bytes / 1024.0, (double)bytes / (double)whole);
    }
    printf("\n");
    assert_int_equal(next, V);
}

/* Every prompt position's logits from one step (n_out = N_PROMPT: the LM head over several rows,
 * on CPU ranks each rank's slice gathered into rank 0's logits), kept on the backend as for a
 * device sampler (kept) or written to host memory, into out [N_PROMPT, n_vocab]. */
static void prompt_rows_logits(rf_model *m, rf_type kvt, const int32_t *prompt, bool kept, float *out) {
    enum { NB = (N_PROMPT + BLOCK - 1) / BLOCK };
    rf_fwd f;
    if (rf_fwd_init(m, &f, NB, BLOCK, N_PROMPT, kvt, N_PROMPT)) fail_msg("fwd init: %s", rf_last_error());
    int32_t table[NB], pos[N_PROMPT], seq[N_PROMPT], slot[N_PROMPT], rows[N_PROMPT];
    for (int i = 0; i < NB; i++) table[i] = i;
    for (int i = 0; i < N_PROMPT; i++) pos[i] = i, seq[i] = 0, slot[i] = i, rows[i] = i;
    rf_batch b = {0};
    b.n_tokens = N_PROMPT, b.ids = prompt, b.pos = pos, b.seq = seq, b.slot = slot, b.n_seqs = 1;
    b.max_blocks = NB, b.block_size = BLOCK, b.block_table = table, b.n_out = N_PROMPT, b.out_rows = rows;
    if (rf_forward(m, &f, &b, kept ? NULL : out)) fail_msg("forward: %s", rf_last_error());
    if (kept && m->be->ops->read_rows(m->be, &f.logits, 0, N_PROMPT, out)) fail_msg("read: %s", rf_last_error());
    rf_fwd_free(m, &f);
}

/* The tp_cpu_ranks test hook (RF_TP_CPU_RANKS=1 for rocmforge-test): the several-GPU code path (a backend, buffers and KV pools per rank, the
 * ops between products on every rank, the all-reduces between ranks, the embedding and the LM
 * head split by vocabulary rows with the logits gathered on rank 0) on CPU backends. Its all-reduce sums in rank order as the one-backend split does and
 * every rank computes the same ops on the same inputs, so the logits and greedy tokens must be
 * bit-identical to the one-backend split's (which test_sharded_vs_unsharded compares with the
 * unsplit model), also for every prompt row's logits from one step (kept on the backend or
 * written to host memory: the LM head's slices gathered over several rows). */
static void test_cpu_ranks_vs_one_backend(void **state) {
    (void)state;
    int cases = 0, odd = 0;
    for (size_t pi = 0; pi < sizeof k_presets / sizeof *k_presets; pi++)
        for (size_t ti = 0; ti < sizeof k_types / sizeof *k_types; ti++) {
            char path[1200];
            model_path(path, sizeof path, k_presets[pi], k_types[ti]);
            for (int tp = 2; tp <= 4; tp *= 2) {
                rf_model *mS = NULL, *mR = NULL;
                rf_test_hooks_set(NULL);
                rf_status st = load(path, tp, &mS);
                rf_test_hooks_set(&(rf_test_hooks){.tp_cpu_ranks = true});
                rf_status sr = load(path, tp, &mR);
                rf_test_hooks_set(NULL);
                if (st) { /* refused (qwen2 at tp 4): refused the same way with ranks */
                    assert_int_equal(sr, st);
                    assert_null(mR);
                    continue;
                }
                if (sr) fail_msg("load %s at tp %d with CPU ranks: %s", path, tp, rf_last_error());
                assert_non_null(mR->tp_be);
                assert_int_equal(mR->tp, tp);
                check_vocab_split(mR, k_presets[pi], k_types[ti], tp);
                if (mR->hp.n_vocab % tp) odd++;
                const int32_t nv = mS->hp.n_vocab;
                float *lgS = malloc((size_t)nv * 4), *lgR = malloc((size_t)nv * 4), mgS[N_GEN], mgR[N_GEN];
                float *rowsS = malloc((size_t)nv * N_PROMPT * 4), *rowsR = malloc((size_t)nv * N_PROMPT * 4);
                int32_t genS[N_GEN], genR[N_GEN], prompt[N_PROMPT];
                for (int i = 0; i < N_PROMPT; i++) prompt[i] = (i * 131 + 7) % nv;
                for (int kvi = 0; kvi < 2; kvi++) {
                    const rf_type kvt = kvi ? RF_TYPE_F16 : RF_TYPE_F32;
                    rf_seq_run(mS, kvt, BLOCK, prompt, N_PROMPT, N_GEN, lgS, genS, mgS);
                    rf_seq_run(mR, kvt, BLOCK, prompt, N_PROMPT, N_GEN, lgR, genR, mgR);
                    assert_memory_equal(lgR, lgS, (size_t)nv * 4);
                    assert_memory_equal(genR, genS, sizeof genS);
                    for (int kept = 0; kept < 2; kept++) { /* every prompt row: the head's slices over 24 rows */
                        prompt_rows_logits(mS, kvt, prompt, kept, rowsS);
                        prompt_rows_logits(mR, kvt, prompt, kept, rowsR);
                        assert_memory_equal(rowsR, rowsS, (size_t)nv * N_PROMPT * 4);
                    }
                    cases++;
                }
                free(lgS);
                free(lgR);
                free(rowsS);
                free(rowsR);
                rf_model_free(mS);
                rf_model_free(mR);
            }
        }
    printf("  CPU ranks (the several-GPU code path): %d cases bit-identical to the one-backend split (%d splits with a "
           "vocabulary no shard count divides)\n", cases, odd);
    assert_true(odd > 0);
}

static void test_refused_splits(void **state) {
    (void)state;
    char path[1200];
    rf_model *m = NULL;
    /* q4_K: 256-element blocks; O's input (4 heads of 64) cannot be cut in two on a block */
    model_path(path, sizeof path, "tiny", "q4_k_m");
    rf_status st = load(path, 2, &m);
    if (st == RF_OK) { /* the recipe kept O in a 32-block type: then the split must be there */
        assert_int_equal(m->tp, 2);
        rf_model_free(m);
    } else {
        assert_int_equal(st, RF_ERR_UNSUPPORTED);
        assert_non_null(strstr(rf_last_error(), "blocks of 256"));
        assert_null(m);
    }
    model_path(path, sizeof path, "tiny", "f32");
    assert_int_equal(load(path, 3, &m), RF_ERR_INVALID_ARG); /* 4 heads */
    assert_null(m);
    assert_int_equal(load(path, -1, &m), RF_ERR_INVALID_ARG);
    assert_null(m);
    assert_int_equal(load(path, 1, &m), RF_OK); /* tp 1: the unsplit model */
    assert_int_equal(m->tp, 1);
    assert_null(m->shards);
    rf_model_free(m);
}

/* What the engine reports of a split (the server's /metrics): RF_STAT_TP_SIZE; RF_STAT_KV_BYTES
 * the same unsplit, split on one backend and split over CPU ranks (the same KV heads, held in one
 * pool per shard on one backend or one pool per rank), and no GPU in any of them. */
static void test_engine_stats(void **state) {
    (void)state;
    char path[1200];
    model_path(path, sizeof path, "tiny", "f32");
    int64_t kv1 = -1;
    for (int c = 0; c < 3; c++) {
        const int tp = c == 0 ? 1 : 2;
        rf_model *m = NULL;
        rf_test_hooks_set(c == 2 ? &(rf_test_hooks){.tp_cpu_ranks = true} : NULL);
        rf_status st = load(path, tp, &m);
        rf_test_hooks_set(NULL);
        if (st) fail_msg("load %s at tp %d: %s", path, tp, rf_last_error());
        assert_true(c == 2 ? m->tp_be != NULL : m->tp_be == NULL);
        rf_engine_config *cfg = rf_engine_config_new();
        assert_int_equal(rf_engine_config_set(cfg, RF_ENGINE_CTX, 256), RF_OK);
        assert_int_equal(rf_engine_config_set(cfg, RF_ENGINE_PARALLEL, 2), RF_OK);
        rf_engine *e = NULL;
        if (rf_engine_new(m, cfg, &e)) fail_msg("engine at tp %d: %s", tp, rf_last_error());
        rf_engine_config_free(cfg);
        assert_int_equal(rf_engine_get_stat(e, RF_STAT_TP_SIZE), tp);
        const int64_t kv = rf_engine_get_stat(e, RF_STAT_KV_BYTES);
        assert_true(kv > 0);
        if (c == 0) kv1 = kv;
        assert_int_equal(kv, kv1);
        assert_int_equal(rf_engine_n_devices(e), 0);
        assert_int_equal(rf_engine_get_device_stat(e, 0, RF_DEVSTAT_MEM_FREE), -1);
        assert_int_equal(rf_engine_get_device_stat(e, -1, RF_DEVSTAT_KV_BYTES), -1);
        rf_engine_free(e);
        rf_model_free(m);
    }
    printf("  engine stats: tp size 1 / 2 / 2 (CPU ranks), KV pool %lld bytes in each, no GPU\n", (long long)kv1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharded_vs_unsharded),
        cmocka_unit_test(test_cpu_ranks_vs_one_backend),
        cmocka_unit_test(test_refused_splits),
        cmocka_unit_test(test_engine_stats),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
