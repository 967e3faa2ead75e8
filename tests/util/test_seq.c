/* test_seq.c — test_seq.h's sequence driver. */
#include "test_seq.h"

#include <math.h>
#include <stdlib.h>

int32_t rf_seq_argmax(const float *lg, int32_t nv, float *margin) {
    int32_t best = 0;
    for (int32_t v = 1; v < nv; v++)
        if (lg[v] > lg[best]) best = v;
    float second = -INFINITY;
    for (int32_t v = 0; v < nv; v++)
        if (v != best && lg[v] > second) second = lg[v];
    *margin = lg[best] - second;
    return best;
}

enum { SEQ_MAX = 256 };

/* One step of one sequence: tokens ids[0..n) at positions p0.., the last one's logits to lg. */
static void seq_step(rf_model *m, rf_fwd *f, const int32_t *table, int32_t n_blocks, int32_t block,
                     const int32_t *ids, int n, int p0, float *lg) {
    int32_t pos[SEQ_MAX], seq[SEQ_MAX], slot[SEQ_MAX];
    for (int i = 0; i < n; i++) {
        pos[i] = p0 + i;
        seq[i] = 0;
        slot[i] = table[(p0 + i) / block] * block + (p0 + i) % block;
    }
    int32_t out_row = n - 1;
    rf_batch b = {0};
    b.n_tokens = n;
    b.ids = ids;
    b.pos = pos;
    b.seq = seq;
    b.slot = slot;
    b.n_seqs = 1;
    b.max_blocks = n_blocks;
    b.block_size = block;
    b.block_table = table;
    b.n_out = 1;
    b.out_rows = &out_row;
    if (rf_forward(m, f, &b, lg)) fail_msg("forward: %s", rf_last_error());
}

void rf_seq_run(rf_model *m, rf_type kv_type, int32_t block, const int32_t *prompt, int n_prompt, int n_gen,
                float *lg0, int32_t *gen, float *margin) {
    if (n_prompt < 1 || n_prompt > SEQ_MAX) fail_msg("rf_seq_run: prompt of %d tokens (1..%d)", n_prompt, SEQ_MAX);
    const int32_t nv = m->hp.n_vocab, n_blocks = (n_prompt + n_gen + block - 1) / block;
    rf_fwd f;
    if (rf_fwd_init(m, &f, n_blocks, block, n_prompt, kv_type, 1)) fail_msg("fwd_init: %s", rf_last_error());
    int32_t *table = malloc((size_t)n_blocks * sizeof *table);
    float *lg = malloc((size_t)nv * sizeof *lg);
    if (!table || !lg) fail_msg("rf_seq_run: out of memory");
    for (int i = 0; i < n_blocks; i++) table[i] = n_blocks - 1 - i; /* not the identity: paging is read */
    seq_step(m, &f, table, n_blocks, block, prompt, n_prompt, 0, lg0);
    gen[0] = rf_seq_argmax(lg0, nv, &margin[0]);
    for (int g = 1; g < n_gen; g++) {
        seq_step(m, &f, table, n_blocks, block, &gen[g - 1], 1, n_prompt + g - 1, lg);
        gen[g] = rf_seq_argmax(lg, nv, &margin[g]);
    }
    free(lg);
    free(table);
    rf_fwd_free(m, &f);
}

void rf_seq_replay(rf_model *m, rf_type kv_type, int32_t block, const int32_t *prompt, int n_prompt,
                   const int32_t *tokens, int n_tokens) {
    if (n_prompt < 1 || n_prompt > SEQ_MAX) fail_msg("rf_seq_replay: prompt of %d tokens (1..%d)", n_prompt, SEQ_MAX);
    const int32_t nv = m->hp.n_vocab, n_blocks = (n_prompt + n_tokens + block) / block;
    rf_fwd f;
    if (rf_fwd_init(m, &f, n_blocks, block, n_prompt, kv_type, 1)) fail_msg("fwd_init: %s", rf_last_error());
    int32_t *table = malloc((size_t)n_blocks * sizeof *table);
    float *lg = malloc((size_t)nv * sizeof *lg);
    if (!table || !lg) fail_msg("rf_seq_replay: out of memory");
    for (int i = 0; i < n_blocks; i++) table[i] = n_blocks - 1 - i;
    seq_step(m, &f, table, n_blocks, block, prompt, n_prompt, 0, lg);
    for (int g = 0; g < n_tokens; g++) seq_step(m, &f, table, n_blocks, block, &tokens[g], 1, n_prompt + g, lg);
    free(lg);
    free(table);
    rf_fwd_free(m, &f);
}
