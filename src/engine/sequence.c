/* sequence.c — a sequence's storage (tokens, block table, hash chain), its blocks given back to
 * or published in the KV pool, and the arrival-ordered lists the engine keeps sequences in. */
#include <stdlib.h>
#include <string.h>

#include "engine/sequence.h"

rf_seq *rf_seq_new(int32_t max_blocks) {
    rf_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->blocks_cap = max_blocks + 1;
    s->blocks = malloc((size_t)s->blocks_cap * sizeof(int32_t));
    s->hashes = malloc((size_t)s->blocks_cap * sizeof(uint64_t));
    if (!s->blocks || !s->hashes) {
        rf_seq_free(s);
        return NULL;
    }
    return s;
}

void rf_seq_free(rf_seq *s) {
    if (!s) return;
    rf_sampler_free(s->smp);
    rf_textout_free(&s->out);
    free(s->tokens);
    free(s->blocks);
    free(s->hashes);
    free(s->pool_acc);
    free(s);
}

rf_status rf_seq_append(rf_seq *s, const int32_t *ids, int32_t n) {
    if (s->n_tokens + n > s->tokens_cap) {
        int32_t cap = s->tokens_cap ? s->tokens_cap : 64;
        while (cap < s->n_tokens + n) cap *= 2;
        int32_t *t = realloc(s->tokens, (size_t)cap * sizeof(int32_t));
        if (!t) return rf_set_error(RF_ERR_OOM, "sequence: out of memory");
        s->tokens = t;
        s->tokens_cap = cap;
    }
    memcpy(s->tokens + s->n_tokens, ids, (size_t)n * sizeof(int32_t));
    s->n_tokens += n;
    return RF_OK;
}

void rf_seq_release_blocks(rf_seq *s, rf_kv_pool *pool, rf_state_pool *spool) {
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) rf_kv_pool_unref(pool, s->blocks[i]);
    s->n_blocks = 0;
    s->n_hashed = 0;
    s->n_computed = 0;
    s->lookup_done = false;
    /* the recurrent state goes with the KV: the sequence recomputes from its start */
    if (spool && s->state_ref) rf_state_pool_release(spool, s->state_ref - 1);
    if (spool && s->ckpt_ref) rf_state_ckpt_unref(spool, s->ckpt_ref - 1);
    s->state_ref = s->ckpt_ref = 0;
}

bool rf_seq_take_state(rf_seq *s, rf_state_pool *spool) {
    if (s->state_ref) return true;
    int32_t slot = rf_state_pool_alloc(spool);
    if (slot < 0) return false;
    s->state_ref = slot + 1;
    return true;
}

void rf_seq_publish_blocks(rf_seq *s, rf_kv_pool *pool, int32_t B) {
    if (!rf_kv_pool_prefix_cache(pool)) return;
    while ((s->n_hashed + 1) * B <= s->n_computed) {
        int32_t bi = s->n_hashed;
        uint64_t parent = bi ? s->hashes[bi - 1] : 0;
        s->hashes[bi] = rf_kv_block_hash(parent, s->tokens + bi * B, B);
        rf_kv_pool_publish(pool, s->blocks[bi], parent, s->tokens + bi * B);
        s->n_hashed++;
    }
}

bool rf_seq_list_insert(rf_seq_list *l, rf_seq *s) {
    if (l->n + 1 > l->cap) {
        int32_t c = l->cap ? l->cap * 2 : 16;
        while (c < l->n + 1) c *= 2;
        rf_seq **a = realloc(l->v, (size_t)c * sizeof *a);
        if (!a) return false;
        l->v = a;
        l->cap = c;
    }
    int32_t i = l->n;
    while (i > 0 && l->v[i - 1]->order > s->order) {
        l->v[i] = l->v[i - 1];
        i--;
    }
    l->v[i] = s;
    l->n++;
    return true;
}

void rf_seq_list_remove(rf_seq_list *l, rf_seq *s) {
    for (int32_t i = 0; i < l->n; i++)
        if (l->v[i] == s) {
            memmove(l->v + i, l->v + i + 1, (size_t)(l->n - i - 1) * sizeof *l->v);
            l->n--;
            return;
        }
}

void rf_seq_list_free(rf_seq_list *l) {
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}
