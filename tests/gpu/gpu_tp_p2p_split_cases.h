/* gpu_tp_p2p_split_cases.h — test_gpu_tp's split-level cases of the peer-to-peer kernels (2+ GPUs,
 * else skipped by name): a split with the p2p all-reduce against one with NCCL's, and the
 * all-reduce inside the next norm against the all-reduce kernel then the norm (the same bits).
 * Included by test_gpu_tp.c only, after its model helpers (load_mode, engine_tokens, k_cases). */
#ifndef RF_GPU_TP_P2P_SPLIT_CASES_H
#define RF_GPU_TP_P2P_SPLIT_CASES_H

static void test_split_p2p_vs_nccl(void **state) {
    (void)state;
    rf_test_hooks_set(NULL);
    const int have = rf_gpu_device_count();
    if (have < 2) {
        printf("  split with the p2p all-reduce: skipped, %d GPU(s) present (needs 2)\n", have);
        skip();
    }
    double worst = 0;
    int cases = 0;
    for (size_t ci = 0; ci < N_CASES; ci++) {
        char path[1200];
        model_path(path, sizeof path, k_cases[ci].preset, k_cases[ci].type);
        for (int tp = 2; tp <= 2; tp++) { /* (at tp 4 the orders differ: test_split_across_4_gpus judges p2p there) */
            rf_model *mp = NULL, *mn = NULL;
            rf_status st = load_mode(path, tp, "p2p", &mp);
            if (st == RF_ERR_INVALID_ARG) continue; /* heads not divisible: refused as in compare_splits */
            if (st) fail_msg("load %s at tp %d, RF_TP_ALLREDUCE=p2p: %s", path, tp, rf_last_error());
            if (load_mode(path, tp, "nccl", &mn)) fail_msg("load %s at tp %d, nccl: %s", path, tp, rf_last_error());
            const int32_t nv = mp->hp.n_vocab;
            float *lp = host_f32((size_t)nv), *ln = host_f32((size_t)nv), mgp[N_GEN], mgn[N_GEN];
            int32_t gp[N_GEN], gn[N_GEN], prompt[N_PROMPT];
            for (int i = 0; i < N_PROMPT; i++) prompt[i] = (i * 131 + 7) % nv;
            for (int kvi = 0; kvi < 2; kvi++) {
                const rf_type kvt = kvi ? RF_TYPE_F16 : RF_TYPE_F32;
                rf_seq_run(mp, kvt, BLOCK, prompt, N_PROMPT, N_GEN, lp, gp, mgp);
                rf_seq_run(mn, kvt, BLOCK, prompt, N_PROMPT, N_GEN, ln, gn, mgn);
                const double rel = rf_rel_l2(lp, ln, (size_t)nv);
                const double tol = k_cases[ci].quant ? TOL_Q8 : kvi ? TOL_F32_KV16 : TOL_F32;
                int same = 0;
                while (same < N_GEN && gp[same] == gn[same]) same++;
                printf("  %-13s %-9s KV %-3s tp %d: p2p vs NCCL logits rel L2 %.3g (tol %.0e; %s), greedy %d/%d equal%s\n",
                       k_cases[ci].preset, k_cases[ci].type, rf_type_name(kvt), tp, rel, tol,
                       memcmp(lp, ln, (size_t)nv * sizeof(float)) ? "not bit-equal" : "bit-equal", same, N_GEN,
                       same < N_GEN ? " (then a near tie in NCCL's run)" : "");
                assert_true(rel < tol);
                assert_true(same == N_GEN || mgn[same] < ARGMAX_TIE);
                if (rel > worst) worst = rel;
                cases++;
            }
            free(lp), free(ln);
            rf_model_free(mp);
            rf_model_free(mn);
        }
    }
    printf("  split, p2p vs NCCL all-reduce: %d cases, worst logits rel L2 %.3g\n", cases, worst);
    /* the engine with its decode graphs (one graph over every GPU, the p2p kernels inside) */
    char path[1200];
    model_path(path, sizeof path, "tiny", "q8_0");
    int32_t tok[2][4][33];
    memset(tok, 0, sizeof tok);
    for (int k = 0; k < 2; k++) {
        rf_model *m = NULL;
        if (load_mode(path, 2, k ? "nccl" : "p2p", &m)) fail_msg("load %s: %s", path, rf_last_error());
        const double t0 = wall_ms();
        engine_tokens(m, tok[k]);
        printf("  engine, tiny q8_0 tp 2, %s all-reduce, decode graphs %s: 4 x %d tokens in %.0f ms\n",
               k ? "NCCL" : "p2p", rf_knob_bool(RF_KNOB_GPU_GRAPHS) && rf_model_graphs_ok(m) ? "on" : "off", tok[k][0][0],
               wall_ms() - t0);
        rf_model_free(m);
    }
    for (int s = 0; s < 4; s++) {
        assert_int_equal(tok[0][s][0], 24);
        assert_memory_equal(tok[0][s], tok[1][s], sizeof tok[0][s]);
    }
    printf("  engine: the p2p and NCCL runs' tokens are equal (4 sequences x 24)\n");
}

/* The all-reduce inside the next norm (rf_tp_comm_add_rmsnorm) against the all-reduce kernel and
 * then the norm (test hook tp_norm_unfused): the same bits, for every tiny model at tp 2 over 2
 * GPUs (prompt rows and decode rows), and the same tokens from the engine with its decode graphs. */
static void test_split_fused_norm(void **state) {
    (void)state;
    rf_test_hooks_set(NULL);
    const int have = rf_gpu_device_count();
    if (have < 2) {
        printf("  the all-reduce inside the norm: skipped, %d GPU(s) present (needs 2)\n", have);
        skip();
    }
    int cases = 0, fused_cases = 0;
    for (size_t ci = 0; ci < N_CASES; ci++) {
        char path[1200];
        model_path(path, sizeof path, k_cases[ci].preset, k_cases[ci].type);
        rf_model *m = NULL;
        rf_status st = load_mode(path, 2, "p2p", &m);
        if (st == RF_ERR_INVALID_ARG) continue; /* heads not divisible */
        if (st) fail_msg("load %s at tp 2, p2p: %s", path, rf_last_error());
        const bool fuses = rf_tp_dev_reduce_norm_ok(m, 1, m->hp.n_embd);
        const int32_t nv = m->hp.n_vocab;
        float *lf = host_f32((size_t)nv), *lu = host_f32((size_t)nv), mgf[N_GEN], mgu[N_GEN];
        int32_t gf[N_GEN], gu[N_GEN], prompt[N_PROMPT];
        for (int i = 0; i < N_PROMPT; i++) prompt[i] = (i * 131 + 7) % nv;
        for (int kvi = 0; kvi < 2; kvi++) {
            const rf_type kvt = kvi ? RF_TYPE_F16 : RF_TYPE_F32;
            rf_seq_run(m, kvt, BLOCK, prompt, N_PROMPT, N_GEN, lf, gf, mgf);
            rf_test_hooks_set(&(rf_test_hooks){.tp_norm_unfused = true});
            rf_seq_run(m, kvt, BLOCK, prompt, N_PROMPT, N_GEN, lu, gu, mgu);
            rf_test_hooks_set(NULL);
            const bool bits = memcmp(lf, lu, (size_t)nv * sizeof(float)) == 0;
            const bool toks = memcmp(gf, gu, sizeof gf) == 0;
            printf("  %-13s %-9s KV %-3s tp 2: fused %s: logits %s, greedy tokens %s\n", k_cases[ci].preset,
                   k_cases[ci].type, rf_type_name(kvt), fuses ? "on" : "off (shape)", bits ? "bit-equal" : "DIFFER",
                   toks ? "equal" : "DIFFER");
            assert_true(bits && toks);
            cases++, fused_cases += fuses;
        }
        free(lf), free(lu);
        rf_model_free(m);
    }
    printf("  the all-reduce inside the norm: %d cases (%d fused), every one bit-equal to the unfused pair\n", cases,
           fused_cases);
    assert_true(fused_cases > 0);
    char path[1200];
    model_path(path, sizeof path, "tiny", "q8_0");
    int32_t tok[2][4][33];
    memset(tok, 0, sizeof tok);
    for (int k = 0; k < 2; k++) {
        rf_model *m = NULL;
        if (load_mode(path, 2, "p2p", &m)) fail_msg("load %s: %s", path, rf_last_error());
        if (k) rf_test_hooks_set(&(rf_test_hooks){.tp_norm_unfused = true});
        engine_tokens(m, tok[k]);
        rf_test_hooks_set(NULL);
        rf_model_free(m);
    }
    for (int s = 0; s < 4; s++) {
        assert_int_equal(tok[0][s][0], 24);
        assert_memory_equal(tok[0][s], tok[1][s], sizeof tok[0][s]);
    }
    printf("  engine with decode graphs, tiny q8_0 tp 2: fused and unfused tokens equal (4 sequences x 24)\n");
}

#endif
