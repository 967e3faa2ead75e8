/* forward.c — THE forward: one function, top to bottom, for every supported architecture.
 * llama is the base; qwen2 adds Q/K/V biases; gemma3 scales embeddings by sqrt(n_embd), adds
 * Q/K RMS norms, post-attention and post-FFN norms, GeGLU, and sliding-window attention with
 * its own RoPE base on local layers. Each variation is a flag or an optional tensor here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "rocmforge/quant.h"

/* Shards of the split (1 = unsplit) and the KV heads each holds (model_tp.c). */
static int32_t n_shards(const rf_model *m) { return m->tp > 1 ? m->tp : 1; }
static int64_t shard_head_kv(const rf_model *m) { return m->tp > 1 ? m->tp_head_kv : m->hp.n_head_kv; }

rf_status rf_kv_bytes_per_pos(const rf_model *m, rf_type kv_type, uint64_t *out) {
    int64_t kvdim = shard_head_kv(m) * m->hp.head_dim; /* one shard's */
    size_t row;
    if (kv_type == RF_TYPE_F32) row = (size_t)kvdim * 4;
    else if (kv_type == RF_TYPE_F16) row = (size_t)kvdim * 2;
    else if (kv_type == RF_TYPE_Q8_0) {
        rf_status st = rf_row_size(kv_type, kvdim, &row);
        if (st) return st;
    } else
        return rf_set_error(RF_ERR_INVALID_ARG, "KV cache type %s is not supported (f32, f16, q8_0)", rf_type_name(kv_type));
    *out = (uint64_t)row * 2 * (uint64_t)m->hp.n_layer * (uint64_t)n_shards(m);
    return RF_OK;
}

uint64_t rf_fwd_buffer_bytes(const rf_model *m, int32_t n_batch, int32_t logit_rows) {
    const rf_hparams *hp = &m->hp;
    uint64_t Q = (uint64_t)hp->n_head * hp->head_dim, KV = (uint64_t)hp->n_head_kv * hp->head_dim;
    /* + the joined Q/K/V output and the second half of a joined gate/up output, where the
     * backend joins weights */
    uint64_t joined = m->be->ops->weight_join ? Q + 2 * KV + (uint64_t)hp->n_ff : 0;
    uint64_t act = (uint64_t)n_batch * (3 * (uint64_t)hp->n_embd + 2 * Q + 2 * KV + 2 * (uint64_t)hp->n_ff + joined) * 4 +
                   (uint64_t)(logit_rows > RF_LOGIT_ROWS ? logit_rows : RF_LOGIT_ROWS) * hp->n_vocab * 4;
    /* a product over many tokens may dequantize its whole weight to f16 in scratch */
    uint64_t big = (uint64_t)hp->n_vocab * hp->n_embd;
    uint64_t ff = (uint64_t)hp->n_ff * hp->n_embd;
    if (ff > big) big = ff;
    /* + the partial O / down outputs of shards 1.. */
    act += (uint64_t)(n_shards(m) - 1) * (uint64_t)n_batch * hp->n_embd * 4;
    return act + big * 2 + (uint64_t)n_batch * (hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd) * 4;
}

rf_status rf_fwd_init(rf_model *m, rf_fwd *f, int32_t n_blocks, int32_t block_size, int32_t n_batch,
                      rf_type kv_type, int32_t logit_rows) {
    memset(f, 0, sizeof *f);
    const rf_hparams *hp = &m->hp;
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    f->n_blocks = n_blocks;
    f->block_size = block_size;
    f->n_batch = n_batch;
    f->kv_type = kv_type;
    f->logit_rows = logit_rows > RF_LOGIT_ROWS ? logit_rows : RF_LOGIT_ROWS;
    int64_t Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t rows = (int64_t)n_blocks * block_size;
    rf_status st;
    /* one pool per shard and layer, of the shard's KV heads */
    const int32_t tp = n_shards(m), n_pools = tp * hp->n_layer;
    const int64_t KVs = shard_head_kv(m) * hp->head_dim;
    f->kc = calloc((size_t)n_pools, sizeof(rf_tensor));
    f->vc = calloc((size_t)n_pools, sizeof(rf_tensor));
    f->part = tp > 1 ? calloc((size_t)tp - 1, sizeof(rf_tensor)) : NULL;
    if (!f->kc || !f->vc || (tp > 1 && !f->part)) {
        rf_fwd_free(m, f);
        return rf_set_error(RF_ERR_OOM, "KV cache: out of memory");
    }
    for (int il = 0; il < n_pools; il++) {
        if ((st = op->alloc(be, kv_type, KVs, rows, &f->kc[il])) ||
            (st = op->alloc(be, kv_type, KVs, rows, &f->vc[il]))) {
            rf_fwd_free(m, f);
            return rf_set_error(st, "KV pool of %d blocks of %d positions: %s", n_blocks, block_size, rf_last_error());
        }
    }
    int64_t B = n_batch;
    /* joined products (weight_join): u holds gate and up side by side, qkv the Q/K/V columns */
    bool any_gu = false, any_qkv = false;
    for (int il = 0; il < hp->n_layer; il++) {
        any_gu |= rf_has(&m->layers[il].ffn_gu);
        any_qkv |= rf_has(&m->layers[il].wqkv);
    }
    if ((st = op->alloc(be, RF_TYPE_F32, hp->n_embd, B, &f->x)) ||
        (st = op->alloc(be, RF_TYPE_F32, hp->n_embd, B, &f->h)) ||
        (st = op->alloc(be, RF_TYPE_F32, Q, B, &f->q)) ||
        (st = op->alloc(be, RF_TYPE_F32, KV, B, &f->k)) ||
        (st = op->alloc(be, RF_TYPE_F32, KV, B, &f->v)) ||
        (st = op->alloc(be, RF_TYPE_F32, Q, B, &f->att)) ||
        (st = op->alloc(be, RF_TYPE_F32, hp->n_embd, B, &f->o)) ||
        (st = op->alloc(be, RF_TYPE_F32, hp->n_ff, B, &f->g)) ||
        (st = op->alloc(be, RF_TYPE_F32, any_gu ? 2 * (int64_t)hp->n_ff : hp->n_ff, B, &f->u)) ||
        (any_qkv && (st = op->alloc(be, RF_TYPE_F32, Q + 2 * KV, B, &f->qkv))) ||
        (st = op->alloc(be, RF_TYPE_F32, hp->n_vocab, f->logit_rows, &f->logits))) {
        rf_fwd_free(m, f);
        return st;
    }
    for (int s = 1; s < tp; s++)
        if ((st = op->alloc(be, RF_TYPE_F32, hp->n_embd, B, &f->part[s - 1]))) {
            rf_fwd_free(m, f);
            return st;
        }
    return RF_OK;
}

void rf_fwd_free(rf_model *m, rf_fwd *f) {
    rf_backend *be = m->be;
    const int32_t n_pools = n_shards(m) * m->hp.n_layer;
    if (f->kc)
        for (int il = 0; il < n_pools; il++) be->ops->free(be, &f->kc[il]);
    if (f->vc)
        for (int il = 0; il < n_pools; il++) be->ops->free(be, &f->vc[il]);
    if (f->part)
        for (int s = 1; s < n_shards(m); s++) be->ops->free(be, &f->part[s - 1]);
    free(f->kc);
    free(f->vc);
    free(f->part);
    rf_tensor *bufs[] = {&f->x, &f->h, &f->q, &f->k, &f->v, &f->att, &f->o, &f->g, &f->u, &f->qkv, &f->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->ops->free(be, bufs[i]);
    memset(f, 0, sizeof *f);
}

#define TRY(call)                     \
    do {                              \
        rf_status st_ = (call);       \
        if (st_) return st_;          \
    } while (0)

rf_status rf_fwd_copy_block(rf_model *m, rf_fwd *f, int32_t dst, int32_t src) {
    rf_backend *be = m->be;
    int64_t B = f->block_size;
    for (int il = 0; il < n_shards(m) * m->hp.n_layer; il++) {
        TRY(be->ops->copy_rows(be, &f->kc[il], dst * B, src * B, B));
        TRY(be->ops->copy_rows(be, &f->vc[il], dst * B, src * B, B));
    }
    return RF_OK;
}

/* columns [c0, c0 + w) of the first n rows of t (f32) as a view with t's row stride */
static rf_tensor joined_cols(const rf_tensor *t, int64_t c0, int64_t w, int64_t n) {
    rf_tensor v = *t;
    v.data = (char *)t->data + (size_t)c0 * 4;
    v.ne[0] = w;
    v.ne[1] = n;
    v.owned = false;
    return v;
}

/* A shard's activation buffer: the first rows * w elements of t packed as rows of w (tp 1: t
 * itself, so the unsplit forward hands the ops exactly the tensors it always did). */
static rf_tensor shard_act(const rf_tensor *t, int64_t w, int32_t tp) {
    if (tp == 1) return *t;
    rf_tensor v = *t;
    v.ne[0] = w;
    v.nb1 = (size_t)w * 4;
    v.owned = false;
    return v;
}

/* The residual add (when res is not NULL: x += res) and the norm before a product, fused with
 * that product's input preparation where the backend can. */
static rf_status rmsnorm_for(rf_backend *be, rf_tensor *y, rf_tensor *x, const rf_tensor *res, const rf_tensor *w,
                             int64_t rows, int64_t n, float eps, const rf_tensor *next) {
    if (be->ops->rmsnorm_for) return be->ops->rmsnorm_for(be, y, x, res, w, rows, n, eps, next);
    if (res) {
        rf_status st = be->ops->add(be, x, x, res, rows * n);
        if (st) return st;
    }
    return be->ops->rmsnorm(be, y, x, w, rows, n, eps);
}

rf_status rf_forward(rf_model *m, rf_fwd *f, rf_batch *b, float *logits_out) {
    const rf_hparams *hp = &m->hp;
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    const int64_t n = b->n_tokens;
    if (n <= 0 || n > f->n_batch || b->n_out < 0 || b->n_out > n)
        return rf_set_error(RF_ERR_INVALID_ARG, "forward: %lld tokens (batch %d), %d outputs", (long long)n,
                            f->n_batch, b->n_out);
    const int64_t E = hp->n_embd, D = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv, F = hp->n_ff;
    const int64_t Q = H * D, KV = HKV * D;
    const rf_tensor *rope_ff = rf_has(&m->rope_freqs) ? &m->rope_freqs : NULL;
    b->block_size = f->block_size;
    if (op->batch_upload) TRY(op->batch_upload(be, b));

    /* embeddings (gemma: scaled by sqrt(n_embd)) */
    TRY(op->get_rows(be, &f->x, &m->tok_embd, b));
    if (hp->embed_scale != 1.0f) TRY(op->scale(be, &f->x, hp->embed_scale, n * E));

    /* tensor parallelism (model_tp.c): each layer's attention and FFN run once per shard with
     * the shard's weights, heads and KV pool; shard 0 writes o, shards 1.. their partial
     * products to f->part, and the all-reduce sums them into o. tp = 1 is the one shard whose
     * tensors are the layer's own: the same ops on the same tensors as an unsplit forward. */
    const int32_t tp = n_shards(m);
    const int64_t Hs = H / tp, HKVs = shard_head_kv(m), Qs = Hs * D, KVs = HKVs * D, Fs = F / tp;
    for (int il = 0; il < hp->n_layer; il++) {
        const rf_layer *L = &m->layers[il];

        /* ---- attention block ---- */
        /* the previous layer's FFN output joins the residual stream in this norm's kernel */
        TRY(rmsnorm_for(be, &f->h, &f->x, il > 0 ? &f->o : NULL, &L->attn_norm, n, E, hp->norm_eps,
                        rf_has(&L->wqkv) ? &L->wqkv : &L->wq));
        for (int s = 0; s < tp; s++) {
            const rf_layer *S = tp > 1 ? &m->shards[(size_t)s * hp->n_layer + il] : L;
            rf_tensor *kc = &f->kc[(size_t)s * hp->n_layer + il], *vc = &f->vc[(size_t)s * hp->n_layer + il];
            rf_tensor *po = s == 0 ? &f->o : &f->part[s - 1];
            rf_tensor q = shard_act(&f->q, Qs, tp), k = shard_act(&f->k, KVs, tp), v = shard_act(&f->v, KVs, tp),
                      att = shard_act(&f->att, Qs, tp);
            if (rf_has(&S->wqkv) && op->rope_store) {
                /* one product for Q, K and V; their columns are read in place by rope_store */
                TRY(op->matmul(be, &f->qkv, &S->wqkv, &f->h, n));
                rf_tensor jq = joined_cols(&f->qkv, 0, Q, n), jk = joined_cols(&f->qkv, Q, KV, n),
                          jv = joined_cols(&f->qkv, Q + KV, KV, n);
                TRY(op->rope_store(be, &q, &jq, &jk, &jv, kc, vc, b, H, HKV, D, hp->n_rot, S->rope_base,
                                   S->rope_scale, rope_ff, hp->rope_mode));
                goto attend;
            }
            TRY(op->matmul(be, &q, &S->wq, &f->h, n));
            TRY(op->matmul(be, &k, &S->wk, &f->h, n));
            TRY(op->matmul(be, &v, &S->wv, &f->h, n));
            if (rf_has(&S->bq)) TRY(op->add_bias(be, &q, &S->bq, n, Qs)); /* qwen2 */
            if (rf_has(&S->bk)) TRY(op->add_bias(be, &k, &S->bk, n, KVs));
            if (rf_has(&S->bv)) TRY(op->add_bias(be, &v, &S->bv, n, KVs));
            if (rf_has(&S->q_norm)) TRY(op->rmsnorm(be, &q, &q, &S->q_norm, n * Hs, D, hp->norm_eps)); /* gemma3 */
            if (rf_has(&S->k_norm)) TRY(op->rmsnorm(be, &k, &k, &S->k_norm, n * HKVs, D, hp->norm_eps));
            if (op->rope_store) {
                TRY(op->rope_store(be, &q, &q, &k, &v, kc, vc, b, Hs, HKVs, D, hp->n_rot, S->rope_base, S->rope_scale,
                                   rope_ff, hp->rope_mode));
            } else {
                TRY(op->rope(be, &q, b, Hs, D, hp->n_rot, S->rope_base, S->rope_scale, rope_ff, hp->rope_mode));
                TRY(op->rope(be, &k, b, HKVs, D, hp->n_rot, S->rope_base, S->rope_scale, rope_ff, hp->rope_mode));
                TRY(op->kv_store(be, kc, &k, b));
                TRY(op->kv_store(be, vc, &v, b));
            }
        attend:
            TRY(op->attention(be, &att, &q, kc, vc, b, Hs, HKVs, D, hp->attn_scale, S->is_swa ? hp->n_swa : 0, 0.0f));
            TRY(op->matmul(be, po, &S->wo, &att, n)); /* a shard's: the partial sum over its heads */
        }
        if (tp > 1) TRY(rf_tp_allreduce(m, &f->o, f->part, n * E));
        if (rf_has(&L->bo)) TRY(op->add_bias(be, &f->o, &L->bo, n, E)); /* once, after the reduce */
        if (rf_has(&L->attn_post_norm)) TRY(op->rmsnorm(be, &f->o, &f->o, &L->attn_post_norm, n, E, hp->norm_eps));
        /* (o joins the residual stream in the FFN norm below) */

        /* ---- feed-forward block ---- */
        if (rf_has(&L->ffn_gu) && op->glu_for)
            TRY(rmsnorm_for(be, &f->h, &f->x, &f->o, &L->ffn_norm, n, E, hp->norm_eps, &L->ffn_gu));
        else
            TRY(rmsnorm_for(be, &f->h, &f->x, &f->o, &L->ffn_norm, n, E, hp->norm_eps, &L->ffn_gate));
        for (int s = 0; s < tp; s++) {
            const rf_layer *S = tp > 1 ? &m->shards[(size_t)s * hp->n_layer + il] : L;
            rf_tensor *po = s == 0 ? &f->o : &f->part[s - 1];
            rf_tensor g = shard_act(&f->g, Fs, tp), u = shard_act(&f->u, Fs, tp);
            if (rf_has(&S->ffn_gu) && op->glu_for) {
                /* one product for gate and up; the GLU reads both halves of each row in place */
                TRY(op->matmul(be, &f->u, &S->ffn_gu, &f->h, n));
                rf_tensor gt = joined_cols(&f->u, 0, F, n), ut = joined_cols(&f->u, F, F, n);
                TRY(op->glu_for(be, &g, &gt, &ut, n * F, hp->glu, &S->ffn_down));
            } else {
                TRY(op->matmul(be, &g, &S->ffn_gate, &f->h, n));
                TRY(op->matmul(be, &u, &S->ffn_up, &f->h, n));
                if (op->glu_for) TRY(op->glu_for(be, &g, &g, &u, n * Fs, hp->glu, &S->ffn_down));
                else TRY(op->glu(be, &g, &g, &u, n * Fs, hp->glu));
            }
            TRY(op->matmul(be, po, &S->ffn_down, &g, n));
        }
        if (tp > 1) TRY(rf_tp_allreduce(m, &f->o, f->part, n * E));
        if (rf_has(&L->ffn_post_norm)) TRY(op->rmsnorm(be, &f->o, &f->o, &L->ffn_post_norm, n, E, hp->norm_eps));
        /* (o joins the residual stream in the next layer's attention norm, or below) */
    }
    TRY(op->add(be, &f->x, &f->x, &f->o, n * E));

    /* ---- output: the wanted rows, gathered, then final norm and LM head ---- */
    int32_t n_out = b->n_out;
    if (n_out == 0) return RF_OK;
    TRY(op->gather_rows(be, &f->o, &f->x, b, E));
    TRY(op->rmsnorm(be, &f->h, &f->o, &m->output_norm, n_out, E, hp->norm_eps));
    if (!logits_out) { /* kept on the backend for its sampler */
        if (n_out > f->logit_rows)
            return rf_set_error(RF_ERR_INVALID_ARG, "forward: %d outputs kept on the backend, room for %d", n_out,
                                f->logit_rows);
        TRY(op->matmul(be, &f->logits, &m->output, &f->h, n_out));
        if (hp->final_softcap > 0) TRY(op->softcap(be, &f->logits, hp->final_softcap, (int64_t)n_out * hp->n_vocab));
        return RF_OK;
    }
    for (int32_t r = 0; r < n_out; r += RF_LOGIT_ROWS) {
        int32_t cnt = n_out - r < RF_LOGIT_ROWS ? n_out - r : RF_LOGIT_ROWS;
        rf_tensor hr = rf_tensor_rows(&f->h, r, cnt);
        TRY(op->matmul(be, &f->logits, &m->output, &hr, cnt));
        if (hp->final_softcap > 0) TRY(op->softcap(be, &f->logits, hp->final_softcap, (int64_t)cnt * hp->n_vocab));
        TRY(op->read_rows(be, &f->logits, 0, cnt, logits_out + (size_t)r * hp->n_vocab));
    }
    return RF_OK;
}
