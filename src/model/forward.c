/* forward.c — THE forward: one function, top to bottom, for every supported architecture
 * (docs/ARCHITECTURE.md §4.9): embed, then per layer a mixer and a feed-forward block chosen by the layer
 * (rf_layer.mixer / .ffn, from the architecture table in model_arch.c), then the output.
 * The attention mixer's variants are data: Q/K/V biases (qwen2), per-head Q/K RMSNorm (gemma3,
 * qwen3), RoPE on or off per layer (smollm3), a sliding window and its RoPE base per layer
 * (gemma3), Q/K/V stored joined (phi3). Feed-forward blocks: a dense GLU, or a mixture of
 * experts (qwen3moe: router, top-k, the chosen experts' GLUs, weighted sum). Extras around the blocks: embedding
 * scale, post-norms (gemma3), final soft-capping. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "rocmforge/quant.h"

/* Shards of the split (1 = unsplit) and the KV heads each holds (model_tp.c). */
static int32_t n_shards(const rf_model *m) { return m->tp > 1 ? m->tp : 1; }
static int64_t shard_head_kv(const rf_model *m) { return m->tp > 1 ? m->tp_head_kv : m->hp.n_head_kv; }

/* Several GPUs (model_tp_gpu.c): each GPU holds one shard's KV pools and buffers. */
static bool multi_gpu(const rf_model *m) { return m->tp_be != NULL; }

/* Layer il's KV row width where it differs per layer (gemma4: its own KV heads and head size;
 * 0 for a layer that reads another layer's cache), else -1: the model's. */
static int64_t layer_kv_width(const rf_model *m, int il) {
    const rf_layer *L = m->layers ? &m->layers[il] : NULL;
    if (!L || !L->head_dim) return -1;
    return L->kv_layer == il ? (int64_t)L->n_head_kv * L->head_dim : 0;
}

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
    /* every shard's pool on one backend; one shard's on each GPU of a split over several (what
     * the memory plan of each GPU needs) */
    /* (gated DeltaNet layers keep no KV: their state lives in slots, forward_deltanet.c) */
    *out = (uint64_t)row * 2 * (uint64_t)(m->hp.n_layer - rf_model_n_recurrent(m)) * (uint64_t)(multi_gpu(m) ? 1 : n_shards(m));
    if (m->hp.arch->flags & RF_AF_GEMMA4) { /* per-layer widths; shared-KV layers keep none */
        *out = 0;
        for (int il = 0; il < m->hp.n_layer; il++) {
            if (layer_kv_width(m, il) == 0) continue;
            rf_status st = kv_type == RF_TYPE_Q8_0 ? rf_row_size(kv_type, layer_kv_width(m, il), &row) : RF_OK;
            if (st) return st;
            if (kv_type != RF_TYPE_Q8_0) row = (size_t)layer_kv_width(m, il) * (kv_type == RF_TYPE_F32 ? 4 : 2);
            *out += (uint64_t)row * 2;
        }
    }
    return RF_OK;
}

uint64_t rf_fwd_buffer_bytes(const rf_model *m, int32_t n_batch, int32_t logit_rows) {
    const rf_hparams *hp = &m->hp;
    uint64_t Q = (uint64_t)hp->n_head * hp->head_dim, KV = (uint64_t)hp->n_head_kv * hp->head_dim;
    /* + the joined Q/K/V output and the second half of a joined gate/up output, where the
     * backend joins weights */
    uint64_t joined = m->be->ops->weight_join ? Q + 2 * KV + (uint64_t)hp->n_ff : 0;
    uint64_t act = (uint64_t)n_batch * (3 * (uint64_t)hp->n_embd + 2 * Q + 2 * KV + 2 * (uint64_t)(hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp) + joined) * 4 +
                   (uint64_t)(logit_rows > RF_LOGIT_ROWS ? logit_rows : RF_LOGIT_ROWS) * hp->n_vocab * 4;
    /* a product over many tokens may dequantize its whole weight to f16 in scratch */
    uint64_t big = (uint64_t)hp->n_vocab * hp->n_embd;
    uint64_t ff = (uint64_t)hp->n_ff * hp->n_embd;
    if (ff > big) big = ff;
    /* + the partial O / down outputs of shards 1.. */
    act += (uint64_t)(n_shards(m) - 1) * (uint64_t)n_batch * hp->n_embd * 4;
    if (multi_gpu(m)) { /* + a GPU's LM head slice's logits (the vocabulary split; the last GPU's is the widest) */
        int64_t v0, nv;
        rf_tp_vocab_rows(m, m->tp - 1, &v0, &nv);
        act += (uint64_t)(logit_rows > RF_LOGIT_ROWS ? logit_rows : RF_LOGIT_ROWS) * (uint64_t)nv * 4;
    }
    /* + the mixture of experts: router logits, ids and weights, each slot's gate, up and down */
    const uint64_t K = (uint64_t)hp->n_expert_used;
    if (hp->n_expert > 0)
        act += (uint64_t)n_batch * ((uint64_t)hp->n_expert + 2 * K + K * (2 * (uint64_t)hp->n_ff_exp + hp->n_embd)) * 4;
    /* + gated DeltaNet layers: a state slot per sequence (logit_rows: the engine's n_parallel) and
     * their step buffers */
    act += rf_fwd_rec_bytes(m, n_batch, logit_rows);
    /* + gemma4's per-layer inputs and their scratch */
    act += (uint64_t)n_batch * (uint64_t)hp->n_embd_ple * (uint64_t)hp->n_layer * 2 * 4;
    return act + big * 2 + (uint64_t)n_batch * (hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd) * 4;
}

/* GPU d's activation buffers: this struct's for d = 0, f->dev[d - 1]'s for the other GPUs of a
 * split over several */
static rf_fwd *act_of(rf_fwd *f, int d) { return d ? &f->dev[d - 1] : f; }

/* The step's activation buffers on one backend, for rows of n_embd and the given Q, KV and FFN
 * widths (the whole model's, or one shard's on its own GPU); gu / qkv: room for joined products. */
static rf_status alloc_acts(rf_backend *be, rf_fwd *A, int64_t E, int64_t Q, int64_t KV, int64_t F, bool gu, bool qkv,
                            int64_t B) {
    const rf_backend_ops *op = be->ops;
    rf_status st;
    if ((st = op->alloc(be, RF_TYPE_F32, E, B, &A->x)) || (st = op->alloc(be, RF_TYPE_F32, E, B, &A->h)) ||
        (st = op->alloc(be, RF_TYPE_F32, Q, B, &A->q)) || (st = op->alloc(be, RF_TYPE_F32, KV, B, &A->k)) ||
        (st = op->alloc(be, RF_TYPE_F32, KV, B, &A->v)) || (st = op->alloc(be, RF_TYPE_F32, Q, B, &A->att)) ||
        (st = op->alloc(be, RF_TYPE_F32, E, B, &A->o)) || (st = op->alloc(be, RF_TYPE_F32, F, B, &A->g)) ||
        (st = op->alloc(be, RF_TYPE_F32, gu ? 2 * F : F, B, &A->u)) ||
        (qkv && (st = op->alloc(be, RF_TYPE_F32, Q + 2 * KV, B, &A->qkv))))
        return st;
    return RF_OK;
}

static void free_acts(rf_backend *be, rf_fwd *A) {
    rf_tensor *bufs[] = {&A->x,      &A->h,          &A->q,       &A->k,       &A->v,     &A->att,
                         &A->o,      &A->g,          &A->u,       &A->qkv,     &A->logits, &A->moe_logits,
                         &A->moe_ids, &A->moe_wts,   &A->moe_g,   &A->moe_u,   &A->moe_d,
                         &A->ple,     &A->ple_g,      &A->vlogits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->ops->free(be, bufs[i]);
}

rf_status rf_fwd_init(rf_model *m, rf_fwd *f, int32_t n_blocks, int32_t block_size, int32_t n_batch,
                      rf_type kv_type, int32_t logit_rows) {
    memset(f, 0, sizeof *f);
    const rf_hparams *hp = &m->hp;
    f->n_blocks = n_blocks;
    f->block_size = block_size;
    f->n_batch = n_batch;
    f->kv_type = kv_type;
    f->logit_rows = logit_rows > RF_LOGIT_ROWS ? logit_rows : RF_LOGIT_ROWS;
    int64_t rows = (int64_t)n_blocks * block_size;
    rf_status st;
    /* one pool per shard and layer, of the shard's KV heads, on the shard's backend */
    const int32_t tp = n_shards(m), n_pools = tp * hp->n_layer, ndev = multi_gpu(m) ? tp : 1;
    const int64_t KVs = shard_head_kv(m) * hp->head_dim;
    f->kc = calloc((size_t)n_pools, sizeof(rf_tensor));
    f->vc = calloc((size_t)n_pools, sizeof(rf_tensor));
    f->part = tp > 1 && ndev == 1 ? calloc((size_t)tp - 1, sizeof(rf_tensor)) : NULL;
    f->dev = ndev > 1 ? calloc((size_t)ndev - 1, sizeof(rf_fwd)) : NULL;
    if (!f->kc || !f->vc || (tp > 1 && ndev == 1 && !f->part) || (ndev > 1 && !f->dev)) {
        rf_fwd_free(m, f);
        return rf_set_error(RF_ERR_OOM, "KV cache: out of memory");
    }
    for (int il = 0; il < n_pools; il++) {
        rf_backend *be = rf_model_be(m, il / hp->n_layer);
        /* a gated DeltaNet layer has no KV: a one-row placeholder */
        /* (so has a shared-KV layer, gemma4: it reads an earlier layer's pool) */
        const int64_t lw = layer_kv_width(m, il % hp->n_layer), lkv = lw > 0 ? lw : KVs;
        const int64_t lrows = m->layers[il % hp->n_layer].mixer == RF_MIXER_DELTANET || lw == 0 ? 1 : rows;
        if ((st = rf_model_use(m, il / hp->n_layer)) || (st = be->ops->alloc(be, kv_type, lkv, lrows, &f->kc[il])) ||
            (st = be->ops->alloc(be, kv_type, lkv, lrows, &f->vc[il]))) {
            rf_fwd_free(m, f);
            return rf_set_error(st, "KV pool of %d blocks of %d positions: %s", n_blocks, block_size, rf_last_error());
        }
    }
    /* buffers: the whole model's widths on one backend; one shard's on each GPU of a split */
    const int64_t D = hp->head_dim, W = ndev > 1 ? tp : 1;
    /* g and u also hold a shared expert's gate and up rows (one backend only: model_weights.c) */
    const int64_t F_ = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp;
    const int64_t Q = (int64_t)hp->n_head / W * D, KV = ndev > 1 ? KVs : (int64_t)hp->n_head_kv * D,
                  F = (F_ > 0 ? F_ : 1) / W;
    for (int d = 0; d < ndev; d++) {
        /* joined products (weight_join): u holds gate and up side by side, qkv the Q/K/V columns */
        bool any_gu = false, any_qkv = false;
        for (int il = 0; il < hp->n_layer; il++) {
            const rf_layer *L = ndev > 1 ? &m->shards[(size_t)d * hp->n_layer + il] : &m->layers[il];
            any_gu |= rf_has(&L->ffn_gu);
            any_qkv |= rf_has(&L->wqkv);
        }
        rf_backend *be = rf_model_be(m, d);
        int64_t v0 = 0, nv = 0; /* several GPUs: this GPU's rows of the LM head (the vocabulary split) */
        if (ndev > 1) rf_tp_vocab_rows(m, d, &v0, &nv);
        if ((st = rf_model_use(m, d)) ||
            (st = alloc_acts(be, act_of(f, d), hp->n_embd, Q, KV, F, any_gu, any_qkv, n_batch)) ||
            (d == 0 && (st = be->ops->alloc(be, RF_TYPE_F32, hp->n_vocab, f->logit_rows, &f->logits))) ||
            (ndev > 1 && (st = be->ops->alloc(be, RF_TYPE_F32, nv, f->logit_rows, &act_of(f, d)->vlogits)))) {
            rf_fwd_free(m, f);
            return st;
        }
    }
    /* mixture of experts: on each GPU of a split (the router replicated; the slots' widths one
     * shard's), else on the one backend */
    for (int d = 0; d < ndev && hp->n_expert > 0; d++) {
        const int64_t K = hp->n_expert_used, NK = (int64_t)n_batch * K, FE = hp->n_ff_exp / W;
        rf_backend *be = rf_model_be(m, d);
        rf_fwd *A = act_of(f, d);
        if ((st = rf_model_use(m, d)) || (st = be->ops->alloc(be, RF_TYPE_F32, hp->n_expert, n_batch, &A->moe_logits)) ||
            (st = be->ops->alloc(be, RF_TYPE_I32, K, n_batch, &A->moe_ids)) ||
            (st = be->ops->alloc(be, RF_TYPE_F32, K, n_batch, &A->moe_wts)) ||
            (st = be->ops->alloc(be, RF_TYPE_F32, FE, NK, &A->moe_g)) ||
            (st = be->ops->alloc(be, RF_TYPE_F32, FE, NK, &A->moe_u)) ||
            (st = be->ops->alloc(be, RF_TYPE_F32, hp->n_embd, NK, &A->moe_d))) {
            rf_fwd_free(m, f);
            return st;
        }
    }
    const int64_t NP = (int64_t)hp->n_embd_ple * hp->n_layer; /* gemma4's per-layer inputs */
    if (NP > 0 && ((st = m->be->ops->alloc(m->be, RF_TYPE_F32, NP, n_batch, &f->ple)) ||
                   (st = m->be->ops->alloc(m->be, RF_TYPE_F32, NP, n_batch, &f->ple_g)))) {
        rf_fwd_free(m, f);
        return st;
    }
    for (int s = 1; s < tp && ndev == 1; s++)
        if ((st = m->be->ops->alloc(m->be, RF_TYPE_F32, hp->n_embd, n_batch, &f->part[s - 1]))) {
            rf_fwd_free(m, f);
            return st;
        }
    return rf_model_use(m, 0);
}

void rf_fwd_free(rf_model *m, rf_fwd *f) {
    rf_fwd_rec_free(m, f);
    const int32_t tp = n_shards(m), n_pools = tp * m->hp.n_layer, ndev = multi_gpu(m) ? tp : 1;
    for (int il = 0; il < n_pools && f->kc && f->vc; il++) {
        rf_backend *be = rf_model_be(m, il / m->hp.n_layer);
        rf_model_use(m, il / m->hp.n_layer);
        be->ops->free(be, &f->kc[il]);
        be->ops->free(be, &f->vc[il]);
    }
    if (f->part)
        for (int s = 1; s < tp; s++) m->be->ops->free(m->be, &f->part[s - 1]);
    for (int d = ndev - 1; d >= 0; d--)
        if (d == 0 || f->dev) {
            rf_model_use(m, d);
            free_acts(rf_model_be(m, d), act_of(f, d));
        }
    free(f->kc);
    free(f->vc);
    free(f->part);
    free(f->dev);
    memset(f, 0, sizeof *f);
}

#define TRY(call)                     \
    do {                              \
        rf_status st_ = (call);       \
        if (st_) return st_;          \
    } while (0)

rf_status rf_fwd_copy_block(rf_model *m, rf_fwd *f, int32_t dst, int32_t src) {
    int64_t B = f->block_size;
    for (int il = 0; il < n_shards(m) * m->hp.n_layer; il++) {
        if (m->layers[il % m->hp.n_layer].mixer == RF_MIXER_DELTANET || layer_kv_width(m, il % m->hp.n_layer) == 0)
            continue; /* no KV of its own */
        rf_backend *be = rf_model_be(m, il / m->hp.n_layer);
        TRY(rf_model_use(m, il / m->hp.n_layer));
        TRY(be->ops->copy_rows(be, &f->kc[il], dst * B, src * B, B));
        TRY(be->ops->copy_rows(be, &f->vc[il], dst * B, src * B, B));
    }
    return rf_model_use(m, 0);
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

/* y = W x, plus the bias b per output column where b is not NULL: one op where the backend fuses
 * them (the GPU's GEMV adds it in its store), else matmul then add_bias (n_out: y's width). */
static rf_status matmul_bias(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, const rf_tensor *b,
                             int64_t n, int64_t n_out) {
    if (!b) return be->ops->matmul(be, y, w, x, n);
    if (be->ops->matmul_bias) return be->ops->matmul_bias(be, y, w, x, b, n);
    rf_status st = be->ops->matmul(be, y, w, x, n);
    return st ? st : be->ops->add_bias(be, y, b, n, n_out);
}

/* y = W x where only the next op reading y is the norm that adds it as the residual, or the
 * RoPE + cache store that reads its Q/K/V columns (sum_next): the backend may leave the
 * product's last sum to that op's kernel (matmul_sum_next); else matmul. */
static rf_status matmul_to(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, int64_t n,
                           bool sum_next) {
    if (sum_next && be->ops->matmul_sum_next) return be->ops->matmul_sum_next(be, y, w, x, n);
    return be->ops->matmul(be, y, w, x, n);
}

/* One step's fixed facts for the layer blocks below. Tensor parallelism (model_tp.c): each
 * layer's attention and FFN run once per shard with the shard's weights, heads and KV pool.
 * On one backend (ndev 1) shard 0 writes o, shards 1.. their partial products to f->part, the
 * in-process all-reduce sums them into o, and the ops between products (norms, residuals,
 * biases) run once. Over several GPUs (ndev = tp) every GPU keeps the whole residual stream:
 * the ops between products run on each GPU on its own buffers, shard s writes its partial
 * product to GPU s's o, and the NCCL all-reduce sums the o's in place. tp = 1 is the one shard
 * whose tensors are the layer's own: the same ops on the same tensors as an unsplit forward. */
typedef struct step {
    rf_model *m;
    rf_fwd *f;
    rf_batch **b;  /* [ndev] the batch as uploaded to each device */
    int32_t tp, ndev;
    int64_t n, E, D, Hs, HKVs, Qs, KVs, Fs;
    bool fuse;    /* several GPUs: the all-reduce may run inside the norm that reads its sum */
    bool pending; /* the last FFN's partial outputs wait for the next norm's all-reduce */
} step;

/* the layer's tensors as device d holds them (the ops between products read them) */
static const rf_layer *layer_on(const step *t, int d, int il) {
    return t->ndev > 1 ? &t->m->shards[(size_t)d * t->m->hp.n_layer + il] : &t->m->layers[il];
}
static const rf_tensor *rope_ff_on(const step *t, int d) {
    const rf_model *m = t->m;
    if (!rf_has(&m->rope_freqs)) return NULL;
    return t->ndev > 1 && m->tp_rope ? &m->tp_rope[d] : &m->rope_freqs;
}

/* the partial O / down outputs of every shard summed into o (each GPU's, or f->o) */
static rf_status reduce(const step *t) {
    if (t->tp == 1) return RF_OK;
    if (t->ndev == 1) return rf_tp_allreduce(t->m, &t->f->o, t->f->part, t->n * t->E);
    rf_tensor *o[64];
    for (int d = 0; d < t->ndev; d++) o[d] = &act_of(t->f, d)->o;
    return rf_tp_dev_allreduce(t->m, o, t->n * t->E);
}

/* whether the attention output bias joins the O product (unsplit: the product is the whole sum;
 * split, it is added once after the reduce) */
static bool o_bias_in_product(const step *t, const rf_layer *L) {
    return t->tp == 1 && rf_has(&L->bo) && L->mixer == RF_MIXER_ATTENTION && !L->attn_gate;
}

/* The attention mixer, shard s: Q/K/V products (one joined product where the weights are joined
 * and the backend fuses RoPE with the cache store), biases, per-head Q/K norms, RoPE, K/V into
 * the layer's paged cache (no RoPE on a NoPE layer), attention over the sequence (its window on
 * sliding-window layers), the
 * partial O product over the shard's heads. */
static rf_status mixer_attention(const step *t, int s, int il) {
    rf_model *m = t->m;
    const rf_hparams *hp = &m->hp;
    const int d = t->ndev > 1 ? s : 0;
    rf_backend *be = rf_model_be(m, d);
    const rf_backend_ops *op = be->ops;
    rf_fwd *A = act_of(t->f, d);
    const rf_batch *b = t->b[d];
    const int64_t n = t->n, D = t->D, Hs = t->Hs, HKVs = t->HKVs, Qs = t->Qs, KVs = t->KVs;
    const rf_layer *S = t->tp > 1 ? &m->shards[(size_t)s * hp->n_layer + il] : &m->layers[il];
    const rf_tensor *rope_ff = rope_ff_on(t, d);
    rf_tensor *kc = &t->f->kc[(size_t)s * hp->n_layer + il], *vc = &t->f->vc[(size_t)s * hp->n_layer + il];
    rf_tensor *po = t->ndev > 1 || s == 0 ? &A->o : &t->f->part[s - 1];
    rf_tensor q = shard_act(&A->q, Qs, t->tp), k = shard_act(&A->k, KVs, t->tp), v = shard_act(&A->v, KVs, t->tp),
              att = shard_act(&A->att, Qs, t->tp);
    const bool qn = rf_has(&S->q_norm), kn = rf_has(&S->k_norm);
    if (rf_has(&S->wqkv) && op->rope_store && S->rope && (!(qn || kn) || op->norm_rope_store)) {
        /* one product for Q, K and V (or Q and K, V its own: wqkv_qk); their columns are read in
         * place by the (norm +) RoPE + store, the product's rows packed at its own width */
        rf_tensor qkv = A->qkv;
        qkv.ne[0] = S->wqkv.ne[1], qkv.nb1 = (size_t)S->wqkv.ne[1] * 4, qkv.owned = false;
        TRY(matmul_to(be, &qkv, &S->wqkv, &A->h, n, true)); /* read next by the (norm +) RoPE + store */
        rf_tensor jq = joined_cols(&qkv, 0, Qs, n), jk = joined_cols(&qkv, Qs, KVs, n), jv = v;
        if (S->wqkv_qk) TRY(op->matmul(be, &v, &S->wv, &A->h, n));
        else jv = joined_cols(&qkv, Qs + KVs, KVs, n);
        if (qn || kn)
            TRY(op->norm_rope_store(be, &q, &jq, &jk, &jv, kc, vc, b, Hs, HKVs, D, hp->n_rot, S->rope_base,
                                    S->rope_scale, rope_ff, hp->rope_mode, hp->rope_attn_factor,
                                    qn ? &S->q_norm : NULL, kn ? &S->k_norm : NULL, false, hp->norm_eps));
        else
            TRY(op->rope_store(be, &q, &jq, &jk, &jv, kc, vc, b, Hs, HKVs, D, hp->n_rot, S->rope_base, S->rope_scale,
                               rope_ff, hp->rope_mode, hp->rope_attn_factor));
    } else {
        /* with their biases (qwen2, gpt-oss) */
        TRY(matmul_bias(be, &q, &S->wq, &A->h, rf_has(&S->bq) ? &S->bq : NULL, n, Qs));
        TRY(matmul_bias(be, &k, &S->wk, &A->h, rf_has(&S->bk) ? &S->bk : NULL, n, KVs));
        TRY(matmul_bias(be, &v, &S->wv, &A->h, rf_has(&S->bv) ? &S->bv : NULL, n, KVs));
        /* per-head RMSNorm (qwen3, gemma3): rows of one head; with norm_rope_store, in the RoPE + cache
         * store (one launch where three ran) */
        const bool norm_in_rope = (qn || kn) && S->rope && op->norm_rope_store;
        if (qn && !norm_in_rope) TRY(op->rmsnorm(be, &q, &q, &S->q_norm, n * Hs, D, hp->norm_eps));
        if (kn && !norm_in_rope) TRY(op->rmsnorm(be, &k, &k, &S->k_norm, n * HKVs, D, hp->norm_eps));
        if (!S->rope) { /* a NoPE layer (smollm3): positions only through the causal mask */
            TRY(op->kv_store(be, kc, &k, b));
            TRY(op->kv_store(be, vc, &v, b));
        } else if (norm_in_rope) {
            TRY(op->norm_rope_store(be, &q, &q, &k, &v, kc, vc, b, Hs, HKVs, D, hp->n_rot, S->rope_base,
                                    S->rope_scale, rope_ff, hp->rope_mode, hp->rope_attn_factor,
                                    qn ? &S->q_norm : NULL, kn ? &S->k_norm : NULL, false, hp->norm_eps));
        } else if (op->rope_store) {
            TRY(op->rope_store(be, &q, &q, &k, &v, kc, vc, b, Hs, HKVs, D, hp->n_rot, S->rope_base, S->rope_scale,
                               rope_ff, hp->rope_mode, hp->rope_attn_factor));
        } else {
            TRY(op->rope(be, &q, b, Hs, D, hp->n_rot, S->rope_base, S->rope_scale, rope_ff, hp->rope_mode,
                         hp->rope_attn_factor));
            TRY(op->rope(be, &k, b, HKVs, D, hp->n_rot, S->rope_base, S->rope_scale, rope_ff, hp->rope_mode,
                         hp->rope_attn_factor));
            TRY(op->kv_store(be, kc, &k, b));
            TRY(op->kv_store(be, vc, &v, b));
        }
    }
    TRY(op->attention(be, &att, &q, kc, vc, b, Hs, HKVs, D, hp->attn_scale, S->is_swa ? hp->n_swa : 0, 0.0f,
                      rf_has(&S->attn_sinks) ? &S->attn_sinks : NULL));
    /* a shard's: the partial sum over its heads; unsplit, with the output bias (o_bias_in_product);
     * unsplit without a bias or post-norm, read next only by the FFN norm (layer) */
    if (t->tp == 1 && !rf_has(&S->bo) && !rf_has(&S->attn_post_norm))
        return matmul_to(be, po, &S->wo, &att, n, true);
    return matmul_bias(be, po, &S->wo, &att, o_bias_in_product(t, S) ? &S->bo : NULL, n, t->E);
}

/* The dense GLU feed-forward, shard s: down(act(gate h) * up h) over the shard's slice of the FFN
 * width (one joined gate/up product where the weights are joined and the backend's GLU reads
 * both halves in place): the partial down product. */
static rf_status ffn_dense_glu(const step *t, int s, int il) {
    rf_model *m = t->m;
    const int d = t->ndev > 1 ? s : 0;
    rf_backend *be = rf_model_be(m, d);
    const rf_backend_ops *op = be->ops;
    rf_fwd *A = act_of(t->f, d);
    const int64_t n = t->n, Fs = t->Fs;
    const rf_layer *S = t->tp > 1 ? &m->shards[(size_t)s * m->hp.n_layer + il] : &m->layers[il];
    rf_tensor *po = t->ndev > 1 || s == 0 ? &A->o : &t->f->part[s - 1];
    rf_tensor g = shard_act(&A->g, Fs, t->tp), u = shard_act(&A->u, Fs, t->tp);
    if (rf_has(&S->ffn_gu) && op->glu_for) {
        /* one product for gate and up; the GLU reads both halves of each row in place */
        TRY(op->matmul(be, &A->u, &S->ffn_gu, &A->h, n));
        rf_tensor gt = joined_cols(&A->u, 0, Fs, n), ut = joined_cols(&A->u, Fs, Fs, n);
        TRY(op->glu_for(be, &g, &gt, &ut, n * Fs, m->hp.glu, &S->ffn_down));
    } else {
        TRY(op->matmul(be, &g, &S->ffn_gate, &A->h, n));
        TRY(op->matmul(be, &u, &S->ffn_up, &A->h, n));
        if (op->glu_for) TRY(op->glu_for(be, &g, &g, &u, n * Fs, m->hp.glu, &S->ffn_down));
        else TRY(op->glu(be, &g, &g, &u, n * Fs, m->hp.glu));
    }
    /* unsplit without a post-norm and not the last layer: read next only by the next layer's
     * attention norm (layer) */
    return matmul_to(be, po, &S->ffn_down, &g, n, t->tp == 1 && !rf_has(&S->ffn_post_norm) && il + 1 < m->hp.n_layer);
}

/* The shared expert (qwen35moe, qwen3next; one backend, unsplit: model_weights.c refuses it with
 * --tp): a dense GLU of n_ff_shexp over the same h, its output joining the experts' sum po
 * through its own sigmoid gate, po += sigmoid(w_g . h) down(silu(gate h) * up h). Its products
 * reuse g / u (sized for it) and moe_d (free once the experts are combined): no host round
 * trip, so a decode step stays one graph. */
static rf_status ffn_shared_expert(const step *t, int il, rf_tensor *po) {
    rf_model *m = t->m;
    rf_backend *be = rf_model_be(m, 0);
    const rf_backend_ops *op = be->ops;
    rf_fwd *A = act_of(t->f, 0);
    const rf_layer *L = &m->layers[il];
    const int64_t n = t->n, E = t->E, Fsh = L->ffn_up_shexp.ne[1];
    rf_tensor g = shard_act(&A->g, Fsh, 2), u = shard_act(&A->u, Fsh, 2); /* rows of Fsh, packed */
    TRY(op->matmul(be, &g, &L->ffn_gate_shexp, &A->h, n));
    TRY(op->matmul(be, &u, &L->ffn_up_shexp, &A->h, n));
    TRY(op->glu(be, &g, &g, &u, n * Fsh, m->hp.glu));
    TRY(op->matmul(be, &A->moe_d, &L->ffn_down_shexp, &g, n));
    return op->moe_shared_gate(be, po, &A->moe_d, &A->h, &L->ffn_gate_inp_shexp, n, E);
}

/* The mixture-of-experts feed-forward, shard s: router logits = W_r h (+ bias) -> moe_route:
 * each token's k experts and weights (the architecture's gating, renormalised and scaled as the
 * metadata says) -> the chosen experts' gate and up products of the token's h (n * k rows) ->
 * GLU -> each slot's down product of its own GLU row -> the weighted sum over the k slots. Split
 * (model_tp.c): every expert's gate/up rows and down columns are the shard's slice (Fs of F), so
 * the sum is a partial one like the dense block's, summed by the all-reduce; the router and its
 * top-k are whole, computed on each GPU of a split (the same h: the same choice), once on one
 * backend (shard 0's, read by the others). */
static rf_status ffn_moe(const step *t, int s, int il) {
    rf_model *m = t->m;
    const rf_hparams *hp = &m->hp;
    const int d = t->ndev > 1 ? s : 0;
    rf_backend *be = rf_model_be(m, d);
    const rf_backend_ops *op = be->ops;
    rf_fwd *A = act_of(t->f, d);
    const int64_t n = t->n, E = t->E, K = hp->n_expert_used, NE = hp->n_expert, Fs = hp->n_ff_exp / t->tp;
    const rf_layer *L = t->tp > 1 ? &m->shards[(size_t)s * hp->n_layer + il] : &m->layers[il];
    rf_tensor *po = t->ndev > 1 || s == 0 ? &A->o : &t->f->part[s - 1];
#define OPT(x) (rf_has(&L->x) ? &L->x : NULL)
    if (t->tp == 1) { /* unsplit: the router's bias, route, gate/up/GLU and down/sum as one op (a
                       * backend's fusions: rf_moe_ffn; the CPU runs the same ops as below) */
        TRY(op->matmul(be, &A->moe_logits, &L->ffn_gate_inp, &A->h, n));
        rf_tensor g = shard_act(&A->moe_g, Fs, 1), u = shard_act(&A->moe_u, Fs, 1);
        const rf_moe_ffn_args a = {
            .logits = &A->moe_logits, .logits_b = OPT(ffn_gate_inp_b), .sel_bias = OPT(exp_probs_b),
            .gating = hp->moe_gating, .norm = hp->moe_norm_w, .scale = hp->moe_w_scale, .ids = &A->moe_ids,
            .wts = &A->moe_wts, .x = &A->h, .w_gate = &L->ffn_gate_exps, .w_up = &L->ffn_up_exps,
            .w_down = &L->ffn_down_exps, .b_gate = OPT(ffn_gate_exps_b), .b_up = OPT(ffn_up_exps_b),
            .b_down = OPT(ffn_down_exps_b), .g = &g, .u = &u, .z = &A->moe_d, .n = n, .k = K, .n_expert = NE,
            .n_ff = Fs, .n_out = E, .glu = hp->glu};
        TRY(rf_moe_ffn(be, po, &a));
        return rf_has(&L->ffn_up_shexp) ? ffn_shared_expert(t, il, po) : RF_OK;
    }
    if (t->ndev > 1 || s == 0) {
        TRY(matmul_bias(be, &A->moe_logits, &L->ffn_gate_inp, &A->h, OPT(ffn_gate_inp_b), n, NE));
        TRY(op->moe_route(be, &A->moe_ids, &A->moe_wts, &A->moe_logits, OPT(exp_probs_b), n, NE, K, hp->moe_gating,
                          hp->moe_norm_w, hp->moe_w_scale));
    }
    rf_tensor g = shard_act(&A->moe_g, Fs, t->tp), u = shard_act(&A->moe_u, Fs, t->tp);
    /* gate and up with the GLU, then down with the router-weighted sum: one fused op each where
     * the backend has it (backend_moe.c; the decode GEMV path), else the unfused ops */
    TRY(rf_moe_gate_up(be, &g, &u, &L->ffn_gate_exps, &L->ffn_up_exps, Fs, &A->h, &A->moe_ids, OPT(ffn_gate_exps_b),
                       OPT(ffn_up_exps_b), n, K, hp->glu));
    TRY(rf_moe_down_sum(be, po, &A->moe_d, &L->ffn_down_exps, E, &g, &A->moe_ids, OPT(ffn_down_exps_b), &A->moe_wts,
                        n, K));
#undef OPT
    return rf_has(&L->ffn_up_shexp) ? ffn_shared_expert(t, il, po) : RF_OK;
}

/* The layer's mixer / feed-forward block for shard s, as the layer says (model_arch.c). */
static rf_status mixer(const step *t, int s, int il) {
    const rf_layer *L = &t->m->layers[il];
    switch (L->mixer) {
    case RF_MIXER_ATTENTION:
        if (L->attn_gate) return rf_mixer_gated_attention(t->m, t->f, t->b[0], il, t->n); /* qwen35 */
        return mixer_attention(t, s, il);
    case RF_MIXER_DELTANET: return rf_mixer_deltanet(t->m, t->f, t->b[0], il, t->n);
    }
    return rf_set_error(RF_ERR_UNSUPPORTED, "forward: layer %d: unknown mixer %d", il, (int)L->mixer);
}
static rf_status feed_forward(const step *t, int s, int il) {
    const rf_layer *L = &t->m->layers[il];
    switch (L->ffn) {
    case RF_FFN_DENSE_GLU: return ffn_dense_glu(t, s, il);
    case RF_FFN_MOE: return ffn_moe(t, s, il);
    }
    return rf_set_error(RF_ERR_UNSUPPORTED, "forward: layer %d: feed-forward kind %d is not built", il, (int)L->ffn);
}

/* The norm that starts a block on device d: [x += o, the last block's output,] h = norm(x) for
 * next's product. Where the last block's all-reduce was left to it (t->pending), GPU d's share
 * of that all-reduce runs inside the same kernel (rf_tp_dev_reduce_norm: the same bits). */
static rf_status block_norm(const step *t, int d, const rf_tensor *res, const rf_tensor *w, const rf_tensor *next) {
    rf_fwd *A = act_of(t->f, d);
    TRY(rf_model_use(t->m, d));
    if (t->pending)
        return rf_tp_dev_reduce_norm(t->m, d, &A->h, &A->x, &A->o, w, t->n, t->E, t->m->hp.norm_eps, next);
    return rmsnorm_for(rf_model_be(t->m, d), &A->h, &A->x, res, w, t->n, t->E, t->m->hp.norm_eps, next);
}

/* One layer: norm -> mixer -> (post-norm) -> residual, norm -> feed-forward -> (post-norm) ->
 * residual; each block once per shard, then the all-reduce (over GPUs, inside the next norm where
 * nothing comes between: no output bias or post-norm, t->fuse). */
static rf_status layer(step *t, int il) {
    rf_model *m = t->m;
    const rf_hparams *hp = &m->hp;
    const rf_layer *L = &m->layers[il];
    const int64_t n = t->n, E = t->E;
    /* ---- mixer ---- */
    for (int d = 0; d < t->ndev; d++) {
        /* the previous layer's FFN output joins the residual stream in this norm's kernel */
        const rf_layer *R = layer_on(t, d, il);
        TRY(block_norm(t, d, il > 0 ? &act_of(t->f, d)->o : NULL, &R->attn_norm, rf_has(&R->wqkv) ? &R->wqkv : &R->wq));
    }
    t->pending = false;
    for (int s = 0; s < t->tp; s++) {
        if (t->ndev > 1) TRY(rf_model_use(m, s));
        TRY(mixer(t, s, il));
    }
    t->pending = t->fuse && !rf_has(&L->bo) && !rf_has(&L->attn_post_norm);
    if (!t->pending) TRY(reduce(t));
    for (int d = 0; d < t->ndev; d++) {
        const rf_layer *R = layer_on(t, d, il);
        rf_backend *be = rf_model_be(m, d);
        rf_fwd *A = act_of(t->f, d);
        TRY(rf_model_use(m, d));
        if (rf_has(&R->bo) && !o_bias_in_product(t, R)) TRY(be->ops->add_bias(be, &A->o, &R->bo, n, E)); /* once, after the reduce */
        if (rf_has(&R->attn_post_norm)) TRY(be->ops->rmsnorm(be, &A->o, &A->o, &R->attn_post_norm, n, E, hp->norm_eps));
        /* (o joins the residual stream in the FFN norm) */
        /* ---- feed-forward block ---- */
        const rf_tensor *next = R->ffn == RF_FFN_MOE                      ? &R->ffn_gate_inp /* the router reads h first */
                                : rf_has(&R->ffn_gu) && be->ops->glu_for ? &R->ffn_gu
                                                                         : &R->ffn_gate;
        TRY(block_norm(t, d, &A->o, &R->ffn_norm, next));
    }
    t->pending = false;
    for (int s = 0; s < t->tp; s++) {
        if (t->ndev > 1) TRY(rf_model_use(m, s));
        TRY(feed_forward(t, s, il));
    }
    /* (the last layer's sum goes to the final norm, which takes only the wanted rows: not fused) */
    t->pending = t->fuse && !rf_has(&L->ffn_post_norm) && il + 1 < hp->n_layer;
    if (t->pending) return RF_OK;
    TRY(reduce(t));
    for (int d = 0; d < t->ndev; d++) {
        const rf_layer *R = layer_on(t, d, il);
        rf_backend *be = rf_model_be(m, d);
        rf_fwd *A = act_of(t->f, d);
        TRY(rf_model_use(m, d));
        if (rf_has(&R->ffn_post_norm)) TRY(be->ops->rmsnorm(be, &A->o, &A->o, &R->ffn_post_norm, n, E, hp->norm_eps));
        /* (o joins the residual stream in the next layer's attention norm, or below) */
    }
    return RF_OK;
}

/* Each device's copy of the batch metadata; then the embeddings (gemma: scaled by sqrt(n_embd)).
 * Over several GPUs by vocabulary rows: each GPU looks up the tokens in its rows and writes zeros
 * for the others, and the sum all-reduce gives every GPU the whole (each value is one GPU's plus
 * zeros: exact). */
static rf_status embed(step *t, rf_batch *b, rf_batch *copies) {
    rf_model *m = t->m;
    for (int d = 0; d < t->ndev; d++) {
        rf_backend *be = rf_model_be(m, d);
        if (d) copies[d] = *b, copies[d].dev = NULL, copies[d].mask_fill = NULL; /* only GPU 0 samples */
        t->b[d] = d ? &copies[d] : b;
        TRY(rf_model_use(m, d));
        if (be->ops->batch_upload) TRY(be->ops->batch_upload(be, t->b[d]));
    }
    if (t->ndev == 1) {
        TRY(rf_model_use(m, 0));
        TRY(m->be->ops->get_rows(m->be, &t->f->x, &m->tok_embd, b));
        if (m->hp.embed_scale != 1.0f) TRY(m->be->ops->scale(m->be, &t->f->x, m->hp.embed_scale, t->n * t->E));
        return RF_OK;
    }
    rf_tensor *x[64];
    for (int d = 0; d < t->ndev; d++) {
        rf_backend *be = rf_model_be(m, d);
        int64_t v0, nv;
        rf_tp_vocab_rows(m, d, &v0, &nv);
        x[d] = &act_of(t->f, d)->x;
        if (!be->ops->get_rows_part) return rf_set_error(RF_ERR_UNSUPPORTED, "--tp: the backend has no get_rows_part");
        TRY(rf_model_use(m, d));
        TRY(be->ops->get_rows_part(be, x[d], &m->tp_embd[d], t->b[d], v0, m->hp.n_vocab));
        if (m->hp.embed_scale != 1.0f) TRY(be->ops->scale(be, x[d], m->hp.embed_scale, t->n * t->E)); /* zeros stay */
    }
    return rf_tp_dev_allreduce(m, x, t->n * t->E);
}

/* Several GPUs: the final residual add, the wanted rows and the final norm on every GPU (each has
 * the same residual stream), so that each can apply its rows of the LM head. */
static rf_status final_norm_all(const step *t, rf_batch *b, int32_t n_out) {
    rf_model *m = t->m;
    for (int d = 0; d < t->ndev; d++) {
        rf_backend *be = rf_model_be(m, d);
        rf_fwd *A = act_of(t->f, d);
        TRY(rf_model_use(m, d));
        TRY(be->ops->add(be, &A->x, &A->x, &A->o, t->n * t->E));
        if (n_out == 0) continue;
        TRY(be->ops->gather_rows(be, &A->o, &A->x, d ? t->b[d] : b, t->E));
        TRY(be->ops->rmsnorm(be, &A->h, &A->o, &m->tp_onorm[d], n_out, t->E, m->hp.norm_eps));
    }
    return rf_model_use(m, 0);
}

/* Several GPUs: the LM head by vocabulary rows. GPU d's rows of the head over rows [r0, r0 + cnt)
 * of its normed stream (softcap applied to its slice: elementwise), the slices gathered into
 * GPU 0's logits rows [0, cnt) for the sampler; GPU 0's one row (a batch-1 decode) written in
 * place, the rest through its slice buffer. */
static rf_status lm_head_split(const step *t, int32_t r0, int32_t cnt) {
    rf_model *m = t->m;
    rf_fwd *f = t->f;
    for (int d = 0; d < t->ndev; d++) {
        rf_backend *be = rf_model_be(m, d);
        rf_fwd *A = act_of(f, d);
        int64_t v0, nv;
        rf_tp_vocab_rows(m, d, &v0, &nv);
        const bool direct = d == 0 && cnt == 1;
        rf_tensor hr = rf_tensor_rows(&A->h, r0, cnt), y = A->vlogits;
        if (direct) y = f->logits, y.ne[0] = nv, y.ne[1] = 1, y.nb1 = (size_t)nv * 4, y.owned = false;
        TRY(rf_model_use(m, d));
        TRY(be->ops->matmul(be, &y, &m->tp_lmhead[d], &hr, cnt));
        if (m->hp.final_softcap > 0) TRY(be->ops->softcap(be, &y, m->hp.final_softcap, (int64_t)cnt * nv));
        if (!direct) TRY(rf_tp_dev_gather(m, d, &f->logits, v0, &A->vlogits, cnt, nv));
    }
    return rf_model_use(m, 0);
}

rf_status rf_forward(rf_model *m, rf_fwd *f, rf_batch *b, float *logits_out) {
    const rf_hparams *hp = &m->hp;
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    const int64_t n = b->n_tokens;
    if (n <= 0 || n > f->n_batch || b->n_out < 0 || b->n_out > n)
        return rf_set_error(RF_ERR_INVALID_ARG, "forward: %lld tokens (batch %d), %d outputs", (long long)n,
                            f->n_batch, b->n_out);
    const int32_t tp = n_shards(m);
    if (tp > 64) return rf_set_error(RF_ERR_INVALID_ARG, "forward: %d shards (64 at most)", tp);
    rf_batch *bp[64], copies[64];
    step t = {.m = m, .f = f, .b = bp, .tp = tp, .ndev = multi_gpu(m) ? tp : 1, .n = n, .E = hp->n_embd,
              .D = hp->head_dim, .Hs = hp->n_head / tp, .HKVs = shard_head_kv(m)};
    t.Qs = t.Hs * t.D, t.KVs = t.HKVs * t.D, t.Fs = hp->n_ff / tp;
    t.fuse = t.ndev > 1 && rf_tp_dev_reduce_norm_ok(m, n, hp->n_embd);
    const int64_t E = t.E;
    b->block_size = f->block_size;
    TRY(embed(&t, b, copies));
    if (hp->arch->flags & RF_AF_GEMMA4) { /* its own layer (forward_gemma4.c): x complete after each */
        TRY(rf_gemma4_ple(m, f, b, n));
        for (int il = 0; il < hp->n_layer; il++) TRY(rf_gemma4_layer(m, f, b, il, n));
    } else {
        for (int il = 0; il < hp->n_layer; il++) TRY(layer(&t, il));
        if (t.ndev > 1) TRY(final_norm_all(&t, b, b->n_out)); /* each GPU: its rows of the LM head below */
        else {
            TRY(rf_model_use(m, 0));
            TRY(op->add(be, &f->x, &f->x, &f->o, n * E));
        }
    }

    /* ---- output: the wanted rows, gathered, then final norm and LM head ---- */
    int32_t n_out = b->n_out;
    if (n_out == 0) return RF_OK;
    if (t.ndev == 1) {
        TRY(op->gather_rows(be, &f->o, &f->x, b, E));
        TRY(op->rmsnorm(be, &f->h, &f->o, &m->output_norm, n_out, E, hp->norm_eps));
    }
    if (f->n_hidden > 0) { /* embeddings: the last n_hidden rows come out normed, without logits */
        if (f->n_hidden > n_out) return rf_set_error(RF_ERR_INVALID_ARG, "forward: %d hidden rows of %d outputs", f->n_hidden, n_out);
        n_out -= f->n_hidden;
        TRY(op->read_rows(be, &f->h, n_out, f->n_hidden, f->hidden_out));
        if (n_out == 0) return RF_OK;
    }
    if (!logits_out) { /* kept on the backend for its sampler */
        if (n_out > f->logit_rows)
            return rf_set_error(RF_ERR_INVALID_ARG, "forward: %d outputs kept on the backend, room for %d", n_out,
                                f->logit_rows);
        if (t.ndev > 1) return lm_head_split(&t, 0, n_out);
        TRY(op->matmul(be, &f->logits, &m->output, &f->h, n_out));
        if (hp->final_softcap > 0) TRY(op->softcap(be, &f->logits, hp->final_softcap, (int64_t)n_out * hp->n_vocab));
        return RF_OK;
    }
    for (int32_t r = 0; r < n_out; r += RF_LOGIT_ROWS) {
        int32_t cnt = n_out - r < RF_LOGIT_ROWS ? n_out - r : RF_LOGIT_ROWS;
        rf_tensor hr = rf_tensor_rows(&f->h, r, cnt);
        if (t.ndev > 1) {
            TRY(lm_head_split(&t, r, cnt));
        } else {
            TRY(op->matmul(be, &f->logits, &m->output, &hr, cnt));
            if (hp->final_softcap > 0) TRY(op->softcap(be, &f->logits, hp->final_softcap, (int64_t)cnt * hp->n_vocab));
        }
        TRY(op->read_rows(be, &f->logits, 0, cnt, logits_out + (size_t)r * hp->n_vocab));
    }
    return RF_OK;
}
