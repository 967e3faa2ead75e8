/* model_tp.c — tensor parallelism (docs/tp.md): the Megatron-style split of every layer over
 * tp shards, and the in-process all-reduce that sums the shards' partial outputs.
 *
 * Shard s holds query heads [s*Hs, (s+1)*Hs) (Hs = n_head / tp) and the KV heads they read:
 * HKV / tp of them when tp divides n_head_kv, else (tp a multiple of n_head_kv, GQA) the one
 * KV head of its query group, replicated on the tp / n_head_kv shards that share it. Q/K/V,
 * their biases and gate/up are split by output rows (contiguous rows: plain views); O and down
 * by input columns: a view that starts at the slice's first column and keeps the full row
 * stride (nb1), which the CPU matmul honours. Each shard's O and down products are therefore
 * partial sums over its columns, which the all-reduce adds. The norms stay whole (every shard
 * reads the same residual stream); so do the embedding and the LM head on one backend, while over
 * several GPUs (or CPU ranks) each holds its rows of them (the vocabulary split). A mixture of experts is split
 * inside every expert the same way (gate/up rows, down columns: each shard holds a slice of all
 * experts), the router and its top-k replicated; the attention sinks follow their heads. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/test_hooks.h"
#include "model/model.h"
#include "rocmforge/quant.h"

/* rows [r0, r0 + n) of a weight, or elements [r0, r0 + n) of a vector (ne[1] = 1) */
static rf_tensor slice_rows(const rf_tensor *t, int64_t r0, int64_t n) {
    if (!rf_has(t)) return *t;
    if (t->ne[1] == 1 && n != 1) { /* a bias: elements of its one row */
        rf_tensor v = *t;
        v.data = (char *)t->data + (size_t)r0 * 4;
        v.ne[0] = n;
        v.nb1 = (size_t)n * 4;
        v.owned = false;
        return v;
    }
    return rf_tensor_rows(t, r0, n);
}

/* input columns [c0, c0 + n) of every row: a strided view (c0 and n whole blocks, checked) */
static rf_status slice_cols(const rf_tensor *t, int64_t c0, int64_t n, const char *what, rf_tensor *out) {
    const rf_type_traits *tr = rf_type_info(t->type);
    int64_t bs = tr ? tr->block_size : 0;
    if (!tr || bs <= 0 || c0 % bs || n % bs)
        return rf_set_error(RF_ERR_UNSUPPORTED,
                            "--tp: %s (%s, blocks of %lld) cannot be cut into column slices of %lld at column %lld "
                            "(a shard's slice must be whole blocks)",
                            what, rf_type_name(t->type), (long long)bs, (long long)n, (long long)c0);
    *out = *t;
    out->data = (char *)t->data + (size_t)(c0 / bs) * tr->type_size;
    out->ne[0] = n;
    out->owned = false; /* nb1 stays the full row's */
    return RF_OK;
}

/* The same column slice uploaded as a contiguous weight of its own, for a device backend (the GPU
 * products read whole rows, not strided views): the slice of every row of the file's tensor
 * `name` gathered on the host, then be->ops->weight. out->owned as the backend sets it (freed by
 * rf_model_free). This is also the shape of the multi-GPU split: each GPU uploads its slices. */
static rf_status upload_cols(rf_model *m, rf_backend *be, const char *name, const rf_tensor *t, int64_t c0,
                             int64_t n, rf_tensor *out) {
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, name);
    const rf_type_traits *tr = rf_type_info(t->type);
    if (!gt || !gt->data || !tr || gt->type != t->type)
        return rf_set_error(RF_ERR_FORMAT, "--tp: tensor '%s' is not in the file as loaded", name);
    const int64_t bs = tr->block_size, rows = t->ne[1];
    const size_t rb = (size_t)(t->ne[0] / bs) * tr->type_size, sb = (size_t)(n / bs) * tr->type_size;
    const size_t off = (size_t)(c0 / bs) * tr->type_size;
    uint8_t *buf = malloc(sb * (size_t)rows);
    if (!buf) return rf_set_error(RF_ERR_OOM, "--tp: out of memory slicing '%s' (%zu bytes)", name, sb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) memcpy(buf + (size_t)r * sb, (const uint8_t *)gt->data + (size_t)r * rb + off, sb);
    rf_status st = be->ops->weight(be, t->type, n, rows, buf, out);
    free(buf);
    return st ? rf_set_error(st, "--tp: '%s' slice: %s", name, rf_last_error()) : RF_OK;
}

/* Whether this process may split over shards on a device backend: only the one-device test
 * mode so far (the tp_one_device test hook: every shard on the one GPU, one after another, the
 * in-process all-reduce; it proves the split on the GPU's kernels, it does not speed anything
 * up). The multi-GPU part (a device and a thread per shard, NCCL) is docs/tp.md's open work. */
bool rf_tp_one_device(void) {
    const rf_test_hooks *h = rf_test_hooks_get(); /* tests only (core/test_hooks.h) */
    return h && h->tp_one_device;
}

bool rf_tp_cpu_ranks(void) {
    const rf_test_hooks *h = rf_test_hooks_get(); /* tests only (core/test_hooks.h) */
    return h && h->tp_cpu_ranks;
}

rf_status rf_tp_open_cpu(rf_model *m, int32_t tp, int n_threads) {
    m->tp_be = calloc((size_t)tp, sizeof *m->tp_be);
    if (!m->tp_be) return rf_set_error(RF_ERR_OOM, "--tp: out of memory");
    m->tp = tp; /* rf_tp_close releases what was opened */
    for (int s = 0; s < tp; s++) {
        rf_status st = rf_backend_cpu_new(n_threads, &m->tp_be[s]);
        if (st) return st;
        if (s == 0) m->be = m->tp_be[0];
    }
    RF_LOGI("--tp %d: CPU ranks (the several-GPU code path on CPU backends, a test hook)", tp);
    return RF_OK;
}

/* Makes shard s's GPU current (one host thread issues every GPU's work); nothing on the CPU. */
rf_status rf_model_use(const rf_model *m, int s) {
    /* one GPU too: the thread that steps the engine (serve's engine thread) need not be the one
     * that loaded the model, and the runtime's current device is per thread */
    if (!m->tp_be) return m->be && rf_backend_on_device(m->be) ? rf_backend_gpu_use(m->be) : RF_OK;
    if (!rf_backend_on_device(m->tp_be[s])) return RF_OK; /* (CPU ranks: a test mode) */
    return rf_backend_gpu_use(m->tp_be[s]);
}

/* CPU ranks: the tensors are host memory */
rf_status rf_tp_host_allreduce(rf_model *m, rf_tensor *const *t, int64_t n) {
    for (int s = 1; s < m->tp; s++) {
        rf_status st = m->tp_be[0]->ops->add(m->tp_be[0], t[0], t[0], t[s], n);
        if (st) return st;
    }
    return rf_tp_host_broadcast(m, t, n);
}

rf_status rf_tp_host_broadcast(rf_model *m, rf_tensor *const *t, int64_t n) {
    for (int s = 1; s < m->tp; s++) {
        if (rf_backend_on_device(m->tp_be[s]))
            return rf_set_error(RF_ERR_UNSUPPORTED, "--tp: GPU ranks need NCCL for their collectives");
        memcpy(t[s]->data, t[0]->data, (size_t)n * sizeof(float));
    }
    return RF_OK;
}

/* every tensor slot of a layer */
#define RF_LAYER_TENSORS 29
static void layer_tensors(rf_layer *L, rf_tensor **t) {
    rf_tensor *all[RF_LAYER_TENSORS] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk,
                                        &L->bv, &L->bo, &L->q_norm, &L->k_norm, &L->attn_post_norm,
                                        &L->ffn_norm, &L->ffn_gate, &L->ffn_up, &L->ffn_down,
                                        &L->ffn_post_norm, &L->wqkv, &L->ffn_gu, &L->attn_sinks,
                                        &L->ffn_gate_inp, &L->ffn_gate_inp_b, &L->exp_probs_b,
                                        &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps,
                                        &L->ffn_gate_exps_b, &L->ffn_up_exps_b, &L->ffn_down_exps_b};
    memcpy(t, all, sizeof all);
}

/* Each expert's slice [s0, s0 + cnt) of its `per` units (a unit: one row of an expert weight of
 * NE * per rows, or one f32 of an expert bias [per, NE]), gathered from the file's tensor `name`
 * into one contiguous weight of NE * cnt units, handed to be->ops->weight as ne0 x ne1. A device
 * backend copies it up (the host copy goes); the CPU's weight is a view, so the host copy stays,
 * kept in m->tp_bufs until rf_model_unshard. */
static rf_status expert_slice(rf_model *m, rf_backend *be, const char *name, int64_t NE, int64_t per, int64_t s0,
                              int64_t cnt, size_t unit, int64_t ne0, int64_t ne1, rf_tensor *out) {
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, name);
    if (!gt || !gt->data || (uint64_t)NE * (uint64_t)per * unit > gt->n_bytes)
        return rf_set_error(RF_ERR_FORMAT, "--tp: tensor '%s' is not in the file as loaded", name);
    void **bufs = realloc(m->tp_bufs, (size_t)(m->n_tp_bufs + 1) * sizeof *bufs);
    uint8_t *buf = malloc((size_t)NE * (size_t)cnt * unit);
    if (bufs) m->tp_bufs = bufs;
    if (!bufs || !buf) {
        free(buf);
        return rf_set_error(RF_ERR_OOM, "--tp: out of memory slicing '%s'", name);
    }
    for (int64_t e = 0; e < NE; e++)
        memcpy(buf + (size_t)(e * cnt) * unit, (const uint8_t *)gt->data + (size_t)(e * per + s0) * unit,
               (size_t)cnt * unit);
    rf_status st = be->ops->weight(be, gt->type, ne0, ne1, buf, out);
    if (st || rf_backend_on_device(be)) free(buf);
    else m->tp_bufs[m->n_tp_bufs++] = buf;
    return st ? rf_set_error(st, "--tp: '%s' slice: %s", name, rf_last_error()) : RF_OK;
}

/* Shard s of a mixture-of-experts layer: every expert's gate/up rows [s*Fs, (s+1)*Fs) and their
 * biases, its down columns (a strided view on the CPU, gathered and uploaded on a device: whole
 * quantization blocks, checked, else refused by name) and the down bias on shard 0 only (the
 * partial products of every shard are summed: the bias once). The router, its biases and the
 * top-k stay whole: every shard routes the same tokens to the same experts. */
static rf_status shard_moe(rf_model *m, rf_backend *be, bool dev, int il, int s, int tp, rf_layer *S) {
    const rf_layer *L = &m->layers[il];
    const int64_t NE = m->hp.n_expert, F = m->hp.n_ff_exp, E = m->hp.n_embd, Fs = F / tp;
    char name[96], what[64];
    rf_status st;
    static const char *const gu[2] = {"ffn_gate_exps", "ffn_up_exps"};
    rf_tensor *gu_w[2] = {&S->ffn_gate_exps, &S->ffn_up_exps}, *gu_b[2] = {&S->ffn_gate_exps_b, &S->ffn_up_exps_b};
    const rf_tensor *gu_l[2] = {&L->ffn_gate_exps, &L->ffn_up_exps}, *gu_bl[2] = {&L->ffn_gate_exps_b, &L->ffn_up_exps_b};
    for (int k = 0; k < 2; k++) {
        size_t rb; /* one row: E columns of the file's type */
        if ((st = rf_row_size(gu_l[k]->type, E, &rb))) return st;
        snprintf(name, sizeof name, "blk.%d.%s.weight", il, gu[k]);
        if ((st = expert_slice(m, be, name, NE, F, s * Fs, Fs, rb, E, NE * Fs, gu_w[k]))) return st;
        if (!rf_has(gu_bl[k])) continue;
        snprintf(name, sizeof name, "blk.%d.%s.bias", il, gu[k]);
        if ((st = expert_slice(m, be, name, NE, F, s * Fs, Fs, sizeof(float), Fs, NE, gu_b[k]))) return st;
    }
    snprintf(what, sizeof what, "blk.%d.ffn_down_exps", il);
    if ((st = slice_cols(&L->ffn_down_exps, s * Fs, Fs, what, &S->ffn_down_exps))) return st;
    if (dev) {
        snprintf(name, sizeof name, "%s.weight", what);
        if ((st = upload_cols(m, be, name, &L->ffn_down_exps, s * Fs, Fs, &S->ffn_down_exps))) return st;
    }
    if (s > 0) memset(&S->ffn_down_exps_b, 0, sizeof S->ffn_down_exps_b);
    return RF_OK;
}

/* V / tp rounded down to a multiple of 16 rows (when that leaves any): every shard starts on one
 * of the CPU matmul's 16-row blocks, so its 4-row kernel groups the same rows as over the whole
 * head and a CPU rank computes every logit bit for bit as the whole head does; the last shard
 * takes the remainder (fewer than tp * 16 rows more than V / tp). */
int64_t rf_tp_vocab_step(int64_t n_vocab, int tp) {
    const int64_t step = n_vocab / (tp > 0 ? tp : 1);
    return step >= 16 ? step - step % 16 : step;
}

void rf_tp_vocab_rows(const rf_model *m, int s, int64_t *v0, int64_t *n) {
    const int tp = m->tp > 1 ? m->tp : 1;
    const int64_t V = m->hp.n_vocab, step = rf_tp_vocab_step(V, tp);
    *v0 = (int64_t)s * step;
    *n = s == tp - 1 ? V - *v0 : step;
}

/* Several GPUs (or CPU ranks): shard s's rows of the embedding and of the LM head, host views
 * into the mapped file, uploaded to its GPU (a CPU rank's weight is the view itself); a tied
 * head is the embedding's slice. Whole rows: any quantization type. */
static rf_status shard_vocab(rf_model *m) {
    m->tp_embd = calloc((size_t)m->tp, sizeof *m->tp_embd);
    m->tp_lmhead = calloc((size_t)m->tp, sizeof *m->tp_lmhead);
    m->tp_onorm = calloc((size_t)m->tp, sizeof *m->tp_onorm);
    if (!m->tp_embd || !m->tp_lmhead || !m->tp_onorm) return rf_set_error(RF_ERR_OOM, "--tp: out of memory");
    /* GPUs: the copies of the head's logit slices into GPU 0's logits (CPU ranks: host copies) */
    rf_status gs = rf_backend_on_device(m->tp_be[0]) ? rf_tp_gather_new(m->tp_be, m->tp, &m->tp_gather) : RF_OK;
    if (gs) return gs;
    const bool tied = m->output.data == m->tok_embd.data;
    for (int s = 0; s < m->tp; s++) {
        rf_backend *be = m->tp_be[s];
        int64_t v0, n;
        rf_tp_vocab_rows(m, s, &v0, &n);
        rf_status st = rf_model_use(m, s);
        const rf_tensor *src[2] = {&m->tok_embd, &m->output};
        rf_tensor *dst[2] = {&m->tp_embd[s], &m->tp_lmhead[s]};
        for (int k = 0; k < (tied ? 1 : 2) && !st; k++) {
            rf_tensor h = rf_tensor_rows(src[k], v0, n);
            if ((st = be->ops->weight(be, h.type, h.ne[0], n, h.data, dst[k])))
                st = rf_set_error(st, "--tp: rows [%lld, %lld) of the %s on shard %d: %s", (long long)v0,
                                  (long long)(v0 + n), k ? "LM head" : "embedding", s, rf_last_error());
        }
        if (!st && s == 0) m->tp_onorm[0] = m->output_norm, m->tp_onorm[0].owned = false; /* GPU 0's own */
        else if (!st) { /* every GPU applies its rows of the head to its own copy of the stream */
            const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, "output_norm.weight");
            st = gt && gt->data ? be->ops->weight(be, RF_TYPE_F32, m->output_norm.ne[0], 1, gt->data, &m->tp_onorm[s])
                                : rf_set_error(RF_ERR_FORMAT, "--tp: 'output_norm.weight' is not in the file as loaded");
        }
        if (st) return st;
        if (tied) {
            m->tp_lmhead[s] = m->tp_embd[s];
            m->tp_lmhead[s].owned = false; /* freed once, as the embedding's slice */
        }
    }
    return rf_model_use(m, 0);
}

static void unshard_vocab(rf_model *m) {
    for (int s = 0; m->tp_be && s < m->tp; s++) {
        rf_backend *be = m->tp_be[s];
        if (!be || rf_model_use(m, s)) continue;
        if (m->tp_lmhead && m->tp_lmhead[s].owned) be->ops->free(be, &m->tp_lmhead[s]);
        if (m->tp_embd && m->tp_embd[s].owned) be->ops->free(be, &m->tp_embd[s]);
        if (m->tp_onorm && m->tp_onorm[s].owned) be->ops->free(be, &m->tp_onorm[s]);
    }
    rf_tp_gather_free(m->tp_gather); /* (events only: the recorded steps keep none) */
    m->tp_gather = NULL;
    if (m->tp_be && m->tp_embd) rf_model_use(m, 0);
    free(m->tp_embd);
    free(m->tp_lmhead);
    free(m->tp_onorm);
    m->tp_embd = m->tp_lmhead = m->tp_onorm = NULL;
}

void rf_model_unshard(rf_model *m) {
    unshard_vocab(m);
    if (m->tp_rope) {
        for (int s = 1; s < m->tp; s++)
            if (m->tp_rope[s].owned && !rf_model_use(m, s)) m->tp_be[s]->ops->free(m->tp_be[s], &m->tp_rope[s]);
        free(m->tp_rope);
        m->tp_rope = NULL;
    }
    for (int i = 0; i < m->n_tp_bufs; i++) free(m->tp_bufs[i]);
    free(m->tp_bufs);
    m->tp_bufs = NULL;
    m->n_tp_bufs = 0;
    if (!m->shards) return;
    /* what a device backend uploaded: the O/down column slices (one GPU), or every tensor of a
     * shard on its own GPU (several); the rest are views */
    for (int i = 0; m->be && i < m->tp * m->hp.n_layer; i++) {
        const int s = i / m->hp.n_layer;
        rf_backend *be = rf_model_be(m, s);
        if (m->tp_be && rf_model_use(m, s)) continue;
        rf_tensor *t[RF_LAYER_TENSORS];
        layer_tensors(&m->shards[i], t);
        for (int k = 0; k < RF_LAYER_TENSORS; k++)
            if (t[k]->owned) be->ops->free(be, t[k]);
    }
    rf_model_use(m, 0);
    free(m->shards);
    m->shards = NULL;
}

/* Several GPUs: shard s's row slices (host views into the mapped file) and the layer's vectors
 * uploaded to its GPU; then Q/K/V and gate/up joined there as the unsplit GPU model joins them. */
static rf_status upload_shard_layer(rf_model *m, rf_backend *be, rf_layer *S) {
    rf_tensor *t[] = {&S->attn_norm, &S->wq,       &S->wk,          &S->wv,          &S->bq,
                      &S->bk,        &S->bv,       &S->bo,          &S->q_norm,      &S->k_norm,
                      &S->attn_post_norm, &S->ffn_norm, &S->ffn_gate, &S->ffn_up, &S->ffn_post_norm,
                      &S->attn_sinks, &S->ffn_gate_inp, &S->ffn_gate_inp_b, &S->exp_probs_b, &S->ffn_down_exps_b};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        if (!rf_has(t[i])) continue;
        rf_tensor h = *t[i];
        rf_status st = be->ops->weight(be, h.type, h.ne[0], h.ne[1], h.data, t[i]);
        if (st) return st;
    }
    (void)m;
    if (!be->ops->weight_join || !rf_has(&S->ffn_gate) || !rf_has(&S->ffn_up)) return RF_OK; /* (MoE: none) */
    rf_status js;
    if (!rf_has(&S->bq) && !rf_has(&S->q_norm) && !rf_has(&S->k_norm)) {
        rf_tensor *qkv[] = {&S->wq, &S->wk, &S->wv};
        if ((js = be->ops->weight_join(be, qkv, 3, &S->wqkv)) && js != RF_ERR_UNSUPPORTED) return js;
    }
    rf_tensor *gu[] = {&S->ffn_gate, &S->ffn_up};
    if ((js = be->ops->weight_join(be, gu, 2, &S->ffn_gu)) && js != RF_ERR_UNSUPPORTED) return js;
    rf_clear_error();
    return RF_OK;
}

/* Several GPUs: rope_freqs on every GPU (GPU 0's is the model's own). */
static rf_status upload_rope(rf_model *m) {
    if (!m->tp_be || !rf_has(&m->rope_freqs)) return RF_OK;
    m->tp_rope = calloc((size_t)m->tp, sizeof *m->tp_rope);
    if (!m->tp_rope) return rf_set_error(RF_ERR_OOM, "--tp: out of memory");
    /* the frequency factors the model bound: rope_freqs, or phi3's short longrope factors */
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, "rope_freqs.weight");
    if (!gt) gt = rf_gguf_find_tensor(m->g, "rope_factors_short.weight");
    const void *src = m->yarn_ff ? (const void *)m->yarn_ff : gt ? gt->data : NULL; /* YaRN's: computed */
    if (!src) return rf_set_error(RF_ERR_FORMAT, "--tp: the model's RoPE frequency factors are not in the file");
    m->tp_rope[0] = m->rope_freqs;
    m->tp_rope[0].owned = false;
    for (int s = 1; s < m->tp; s++) {
        rf_status st = rf_model_use(m, s);
        if (!st) st = m->tp_be[s]->ops->weight(m->tp_be[s], RF_TYPE_F32, m->rope_freqs.ne[0], 1, src, &m->tp_rope[s]);
        if (st) return st;
    }
    return rf_model_use(m, 0);
}

rf_status rf_model_shard(rf_model *m, int32_t tp) {
    const rf_hparams *hp = &m->hp;
    if (tp <= 1) {
        m->tp = 1;
        m->tp_head = hp->n_head;
        m->tp_head_kv = hp->n_head_kv;
        return RF_OK;
    }
    if (hp->arch->flags & RF_AF_GEMMA4) /* per-layer head sizes and shared-KV layers: not split */
        return rf_set_error(RF_ERR_UNSUPPORTED, "--tp %d: %s cannot be split (per-layer head sizes, shared-KV layers)", tp,
                            hp->arch_name);
    const bool dev = rf_backend_on_device(m->be), multi = m->tp_be != NULL;
    if (dev && !multi && !rf_tp_one_device())
        return rf_set_error(RF_ERR_UNSUPPORTED,
                            "--tp %d on one GPU backend: the split over several GPUs is opened at load (rf_tp_open); "
                            "every shard on one GPU is a test mode (docs/tp.md)", tp);
    /* the FFN width split: every expert's for a mixture of experts (all its layers are) */
    const int64_t H = hp->n_head, HKV = hp->n_head_kv, D = hp->head_dim, F = hp->n_expert > 0 ? hp->n_ff_exp : hp->n_ff;
    if (H % tp || F % tp)
        return rf_set_error(RF_ERR_INVALID_ARG, "--tp %d does not divide the %lld heads and the FFN width %lld%s", tp,
                            (long long)H, (long long)F, hp->n_expert > 0 ? " (of each expert)" : "");
    if (HKV % tp && tp % HKV)
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "--tp %d: the %lld KV heads can neither be split over %d shards nor replicated evenly", tp,
                            (long long)HKV, tp);
    const int64_t Hs = H / tp, HKVs = HKV % tp == 0 ? HKV / tp : 1, G = H / HKV, Fs = F / tp;
    rf_layer *sh = calloc((size_t)tp * hp->n_layer, sizeof *sh);
    if (!sh) return rf_set_error(RF_ERR_OOM, "--tp: out of memory");
    m->shards = sh, m->tp = tp; /* from here a failure releases what was uploaded */
    for (int s = 0; s < tp; s++)
        for (int il = 0; il < hp->n_layer; il++) {
            const rf_layer *L = &m->layers[il];
            rf_layer *S = &sh[(size_t)s * hp->n_layer + il];
            rf_backend *be = rf_model_be(m, s);
            *S = *L;
            rf_tensor *all[RF_LAYER_TENSORS];
            layer_tensors(S, all);
            for (int k = 0; k < RF_LAYER_TENSORS; k++) all[k]->owned = false; /* views until uploaded */
            /* the shard reads the parts apart: no joined products */
            memset(&S->wqkv, 0, sizeof S->wqkv);
            memset(&S->ffn_gu, 0, sizeof S->ffn_gu);
            S->wqkv_qk = false;
            int64_t q0 = s * Hs * D, kv0 = (HKV % tp == 0 ? s * HKVs : s * Hs / G) * D;
            S->wq = slice_rows(&L->wq, q0, Hs * D);
            S->wk = slice_rows(&L->wk, kv0, HKVs * D);
            S->wv = slice_rows(&L->wv, kv0, HKVs * D);
            S->bq = slice_rows(&L->bq, q0, Hs * D);
            S->bk = slice_rows(&L->bk, kv0, HKVs * D);
            S->bv = slice_rows(&L->bv, kv0, HKVs * D);
            S->ffn_gate = slice_rows(&L->ffn_gate, s * Fs, Fs);
            S->ffn_up = slice_rows(&L->ffn_up, s * Fs, Fs);
            if (rf_has(&L->attn_sinks)) { /* f32 [n_head]: the shard's heads' */
                S->attn_sinks.data = (char *)L->attn_sinks.data + (size_t)(s * Hs) * 4;
                S->attn_sinks.ne[0] = Hs;
                S->attn_sinks.nb1 = (size_t)Hs * 4;
            }
            rf_status st;
            char what[64], name[96];
            if (multi && (st = rf_model_use(m, s))) goto fail;
            snprintf(what, sizeof what, "blk.%d.attn_output", il);
            if ((st = slice_cols(&L->wo, q0, Hs * D, what, &S->wo))) goto fail;
            if (dev) {
                snprintf(name, sizeof name, "%s.weight", what);
                if ((st = upload_cols(m, be, name, &L->wo, q0, Hs * D, &S->wo))) goto fail;
            }
            if (L->ffn == RF_FFN_MOE) {
                if ((st = shard_moe(m, be, dev, il, s, tp, S))) goto fail;
                if (multi && (st = upload_shard_layer(m, be, S))) goto fail;
                continue;
            }
            snprintf(what, sizeof what, "blk.%d.ffn_down", il);
            if ((st = slice_cols(&L->ffn_down, s * Fs, Fs, what, &S->ffn_down))) goto fail;
            if (dev) {
                snprintf(name, sizeof name, "%s.weight", what);
                if ((st = upload_cols(m, be, name, &L->ffn_down, s * Fs, Fs, &S->ffn_down))) goto fail;
            }
            if (multi && (st = upload_shard_layer(m, be, S))) goto fail;
            continue;
        fail:
            rf_model_unshard(m); /* what was uploaded so far */
            if (!multi) m->tp = 1;
            return st;
        }
    m->tp_head = (int32_t)Hs;
    m->tp_head_kv = (int32_t)HKVs;
    rf_status st = upload_rope(m);
    if (!st && multi) st = shard_vocab(m);
    if (st) {
        rf_model_unshard(m);
        return st;
    }
    return rf_model_use(m, 0);
}

rf_status rf_tp_allreduce(rf_model *m, rf_tensor *o, rf_tensor *part, int64_t n) {
    /* Shards run one after another in this process, so the reduce is a chain of adds in shard
     * order: ((p0 + p1) + p2) + p3. Across GPUs NCCL's ring sums in its own order; that differs
     * from this only in float rounding. */
    for (int s = 1; s < m->tp; s++) {
        rf_status st = m->be->ops->add(m->be, o, o, &part[s - 1], n);
        if (st) return st;
    }
    return RF_OK;
}
