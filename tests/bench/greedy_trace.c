/* greedy_trace.c — rf_greedy_trace MODEL cpu|gpu [LOGITS_DIR]: greedy continuation of the
 * prompts of tests/gpu/greedy_prompts.h, one line per prompt of "id:top-2-margin" per step, so
 * two runs (CPU vs GPU, or the CPU with RF_NO_SIMD=1 vs without) can be compared by
 * scripts/cmp-trace.py or test_gpu_forward. With LOGITS_DIR, each prompt's last-position
 * logits go to LOGITS_DIR/logits-<device>-<prompt>.bin (f32). Exit 1 on any library error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "rocmforge.h"
#include "../gpu/greedy_prompts.h"

static int die(void) {
    fprintf(stderr, "rf_greedy_trace: %s\n", rf_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[2], "cpu") && strcmp(argv[2], "gpu"))) {
        fprintf(stderr, "usage: rf_greedy_trace MODEL cpu|gpu [LOGITS_DIR]\n");
        return 2;
    }
    rf_model_params mp = rf_model_default_params();
    mp.device = strcmp(argv[2], "gpu") == 0 ? RF_DEVICE_GPU : RF_DEVICE_CPU;
    rf_model *m = NULL;
    if (rf_model_load(argv[1], &mp, &m)) return die();
    rf_session_params sp = rf_session_default_params();
    sp.n_ctx = 512;
    sp.n_batch = 64; /* as test_gpu_forward's sessions */
    rf_session *s = NULL;
    if (rf_session_new(m, &sp, &s)) return die();
    const int32_t nv = rf_session_n_vocab(s);
    for (int p = 0; p < RF_GREEDY_PROMPTS; p++) {
        int32_t ids[256];
        size_t n = 0;
        if (rf_tokenize(rf_model_vocab(m), k_prompts[p], strlen(k_prompts[p]), true, true, ids, 256, &n)) return die();
        rf_session_truncate(s, 0);
        if (rf_session_eval(s, ids, (int32_t)n, false)) return die();
        const float *lg = rf_session_logits(s, (int32_t)n - 1);
        if (argc > 3) {
            char fn[4096];
            snprintf(fn, sizeof fn, "%s/logits-%s-%d.bin", argv[3], argv[2], p);
            FILE *f = fopen(fn, "wb");
            if (!f || fwrite(lg, sizeof *lg, (size_t)nv, f) != (size_t)nv) {
                fprintf(stderr, "rf_greedy_trace: cannot write %s\n", fn);
                return 1;
            }
            fclose(f);
        }
        printf("prompt %d:", p);
        for (int k = 0; k < RF_GREEDY_STEPS; k++) {
            int32_t a1 = 0, a2 = -1;
            for (int32_t i = 1; i < nv; i++) {
                if (lg[i] > lg[a1]) {
                    a2 = a1;
                    a1 = i;
                } else if (a2 < 0 || lg[i] > lg[a2])
                    a2 = i;
            }
            printf(" %d:%.4f", a1, lg[a1] - lg[a2]);
            if (rf_session_eval(s, &a1, 1, false)) return die();
            lg = rf_session_logits(s, 0);
        }
        printf("\n");
    }
    rf_session_free(s);
    rf_model_free(m);
    return 0;
}
