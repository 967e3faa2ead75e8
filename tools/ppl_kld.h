/* ppl_kld.h — the KL-divergence side of `rocmforge perplexity`: the base file llama.cpp's
 * llama-perplexity writes with --kl-divergence-base (read and written here byte-compatibly),
 * and the statistics of our logits against such a base (mean KLD, Δp, same top token). */
#ifndef RF_PPL_KLD_H
#define RF_PPL_KLD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A base file: "_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens[n_chunk*n_ctx], then
 * per chunk (n_ctx - 1 - n_ctx/2) records of rf_kld_record_len(n_vocab) uint16 each: two f32
 * (scale, min log-prob) in the first four, then one uint16 per token, log p = scale*q + min. */
size_t rf_kld_record_len(int32_t n_vocab);

int rf_kld_write_header(FILE *f, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const int32_t *tokens);

/* Quantizes one position's log-softmax into rec (rf_kld_record_len(n_vocab) uint16). The range
 * kept is [max - 16, max] in logit units; anything lower is stored as the minimum. */
void rf_kld_encode(const float *logits, int32_t n_vocab, uint16_t *rec);

/* Reads and checks the header; *tokens is malloc'd (n_chunk*n_ctx). Returns 0 or -1 with msg. */
int rf_kld_read_header(FILE *f, int32_t *n_ctx, int32_t *n_vocab, int32_t *n_chunk, int32_t **tokens, char *msg,
                       size_t msg_len);

typedef struct rf_kld_stats {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    double max_p_diff;
    int64_t n_same_top, count;
    float *kld_values, *p_diff_values; /* one per position, for the percentiles */
    int64_t cap;
} rf_kld_stats;

/* Adds one position: our logits against the base record; tok is the next (scored) token. */
int rf_kld_add(rf_kld_stats *st, const float *logits, int32_t n_vocab, const uint16_t *rec, int32_t tok);

/* Prints the running line of a chunk (as llama.cpp's table) and the final statistics. */
void rf_kld_print_header(FILE *out);
void rf_kld_print_chunk(FILE *out, const rf_kld_stats *st, int32_t chunk);
void rf_kld_print_final(FILE *out, rf_kld_stats *st);
void rf_kld_free(rf_kld_stats *st);

#endif
