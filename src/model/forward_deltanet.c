/* forward_deltanet.c — the hybrid architectures' layer blocks (qwen35; docs/ARCHITECTURE.md
 * §4.9): the gated DeltaNet mixer and the gated attention mixer, and the per-sequence state
 * slots they read and write (the conv window and the delta-rule matrices of every DeltaNet
 * layer, rows of backend tensors). What each block computes follows llama.cpp's
 * src/models/qwen35.cpp; the ops are backend.h's (ssm_conv, gated_delta, sigmoid_mul,
 * head_split beside the common ones). */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define TRY(call)                     \
    do {                              \
        rf_status st_ = (call);       \
        if (st_) return st_;          \
    } while (0)

int32_t rf_model_n_recurrent(const rf_model *m) {
    int32_t n = 0;
    for (int il = 0; m->layers && il < m->hp.n_layer; il++) n += m->layers[il].mixer == RF_MIXER_DELTANET;
    return n;
}

/* conv window and delta-rule state of one DeltaNet layer, in f32 elements */
static int64_t conv_elems(const rf_hparams *hp) {
    return (int64_t)(hp->ssm_d_conv - 1) * (2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner);
}
static int64_t ssm_elems(const rf_hparams *hp) { return (int64_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state; }

uint64_t rf_state_slot_bytes(const rf_model *m) {
    return (uint64_t)rf_model_n_recurrent(m) * (uint64_t)(conv_elems(&m->hp) + ssm_elems(&m->hp)) * 4;
}

uint64_t rf_fwd_rec_bytes(const rf_model *m, int32_t n_batch, int32_t n_slots) {
    const rf_hparams *hp = &m->hp;
    if (rf_model_n_recurrent(m) == 0) return 0;
    const uint64_t C = 2 * (uint64_t)hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
    const uint64_t Q = (uint64_t)hp->n_head * hp->head_dim;
    /* mix, cv, z, a, b, core, qg, gate (rf_fwd_rec_init) */
    const uint64_t row = 2 * C + 2 * (uint64_t)hp->ssm_d_inner + 2 * (uint64_t)hp->ssm_dt_rank + 3 * Q;
    return (uint64_t)n_slots * rf_state_slot_bytes(m) + (uint64_t)n_batch * row * 4;
}

void rf_fwd_rec_free(rf_model *m, rf_fwd *f) {
    rf_fwd_rec *r = f->rec;
    if (!r) return;
    rf_backend *be = m->be;
    for (int il = 0; il < m->hp.n_layer; il++) {
        if (r->conv) be->ops->free(be, &r->conv[il]);
        if (r->ssm) be->ops->free(be, &r->ssm[il]);
    }
    rf_tensor *bufs[] = {&r->mix, &r->cv, &r->z, &r->a, &r->b, &r->core, &r->qg, &r->gate};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->ops->free(be, bufs[i]);
    free(r->conv);
    free(r->ssm);
    free(r);
    f->rec = NULL;
}

rf_status rf_fwd_rec_init(rf_model *m, rf_fwd *f, int32_t n_slots) {
    const rf_hparams *hp = &m->hp;
    if (rf_model_n_recurrent(m) == 0) return RF_OK;
    if (n_slots < 1) return rf_set_error(RF_ERR_INVALID_ARG, "state slots: %d", n_slots);
    rf_fwd_rec_free(m, f);
    rf_fwd_rec *r = calloc(1, sizeof *r);
    if (!r) return rf_set_error(RF_ERR_OOM, "state slots: out of memory");
    f->rec = r;
    r->n_slots = n_slots;
    r->conv = calloc((size_t)hp->n_layer, sizeof(rf_tensor));
    r->ssm = calloc((size_t)hp->n_layer, sizeof(rf_tensor));
    if (!r->conv || !r->ssm) {
        rf_fwd_rec_free(m, f);
        return rf_set_error(RF_ERR_OOM, "state slots: out of memory");
    }
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    rf_status st = RF_OK;
    for (int il = 0; il < hp->n_layer && !st; il++)
        if (m->layers[il].mixer == RF_MIXER_DELTANET)
            if ((st = op->alloc(be, RF_TYPE_F32, conv_elems(hp), n_slots, &r->conv[il])) == RF_OK)
                st = op->alloc(be, RF_TYPE_F32, ssm_elems(hp), n_slots, &r->ssm[il]);
    const int64_t B = f->n_batch, S = hp->ssm_d_state, VD = hp->ssm_d_inner, HV = hp->ssm_dt_rank;
    const int64_t C = 2 * (int64_t)hp->ssm_n_group * S + VD, Q = (int64_t)hp->n_head * hp->head_dim;
    if (st || (st = op->alloc(be, RF_TYPE_F32, C, B, &r->mix)) || (st = op->alloc(be, RF_TYPE_F32, C, B, &r->cv)) ||
        (st = op->alloc(be, RF_TYPE_F32, VD, B, &r->z)) || (st = op->alloc(be, RF_TYPE_F32, HV, B, &r->a)) ||
        (st = op->alloc(be, RF_TYPE_F32, HV, B, &r->b)) || (st = op->alloc(be, RF_TYPE_F32, VD, B, &r->core)) ||
        (st = op->alloc(be, RF_TYPE_F32, 2 * Q, B, &r->qg)) || (st = op->alloc(be, RF_TYPE_F32, Q, B, &r->gate))) {
        rf_fwd_rec_free(m, f);
        return rf_set_error(st, "state slots: %d slots of %.1f MiB: %s", n_slots, rf_state_slot_bytes(m) / 1048576.0,
                            rf_last_error());
    }
    return RF_OK;
}

rf_status rf_fwd_copy_slot(rf_model *m, rf_fwd *f, int32_t dst, int32_t src) {
    rf_fwd_rec *r = f->rec;
    if (!r) return RF_OK;
    rf_backend *be = m->be;
    for (int il = 0; il < m->hp.n_layer; il++)
        if (m->layers[il].mixer == RF_MIXER_DELTANET) {
            TRY(be->ops->copy_rows(be, &r->conv[il], dst, src, 1));
            TRY(be->ops->copy_rows(be, &r->ssm[il], dst, src, 1));
        }
    return RF_OK;
}

static rf_status check_rec(const rf_model *m, const rf_fwd *f, const rf_batch *b) {
    if (m->tp > 1) return rf_set_error(RF_ERR_UNSUPPORTED, "forward: %s layers cannot be split (--tp)", m->hp.arch_name);
    if (!f->rec) return rf_set_error(RF_ERR_INVALID_ARG, "forward: %s needs state slots (rf_fwd_rec_init)", m->hp.arch_name);
    if (!b->state_slot) return rf_set_error(RF_ERR_INVALID_ARG, "forward: %s needs the batch's state slots", m->hp.arch_name);
    return RF_OK;
}

/* The gated DeltaNet mixer: q/k/v (one product) through the causal conv with the sequence's
 * window and SiLU; the gated delta rule over the sequence's state (q, k L2-normalised, the
 * decay from alpha, dt bias and A, beta from its product); the per-head RMSNorm of the result
 * times silu(z); the output product. */
rf_status rf_mixer_deltanet(rf_model *m, rf_fwd *f, const rf_batch *b, int il, int64_t n) {
    TRY(check_rec(m, f, b));
    const rf_hparams *hp = &m->hp;
    const rf_layer *L = &m->layers[il];
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    rf_fwd_rec *r = f->rec;
    const int64_t S = hp->ssm_d_state, HK = hp->ssm_n_group, HV = hp->ssm_dt_rank, VD = hp->ssm_d_inner;
    const int64_t C = 2 * HK * S + VD;
    TRY(op->matmul(be, &r->mix, &L->wqkv, &f->h, n));
    TRY(op->matmul(be, &r->z, &L->ssm_gate, &f->h, n));
    TRY(op->matmul(be, &r->b, &L->ssm_beta, &f->h, n));
    TRY(op->matmul(be, &r->a, &L->ssm_alpha, &f->h, n));
    TRY(op->ssm_conv(be, &r->cv, &r->mix, &L->ssm_conv1d, &r->conv[il], b, C, hp->ssm_d_conv));
    TRY(op->gated_delta(be, &r->core, &r->cv, &r->a, &r->b, &L->ssm_dt, &L->ssm_a, &r->ssm[il], b, HK, HV, S,
                        hp->norm_eps));
    TRY(op->rmsnorm(be, &r->core, &r->core, &L->ssm_norm, n * HV, S, hp->norm_eps));
    TRY(op->glu(be, &r->core, &r->z, &r->core, n * VD, RF_GLU_SWIGLU)); /* silu(z) * normed */
    return op->matmul(be, &f->o, &L->ssm_out, &r->core, n);
}

/* qwen35's gated attention: one product gives each head's query and output gate side by side;
 * Q/K RMSNorm per head, (partial) NeoX RoPE, the paged cache and attention as for every
 * attention layer, the output times sigmoid(gate), the output product. */
rf_status rf_mixer_gated_attention(rf_model *m, rf_fwd *f, const rf_batch *b, int il, int64_t n) {
    TRY(check_rec(m, f, b));
    const rf_hparams *hp = &m->hp;
    const rf_layer *L = &m->layers[il];
    rf_backend *be = m->be;
    const rf_backend_ops *op = be->ops;
    rf_fwd_rec *r = f->rec;
    const int64_t H = hp->n_head, HKV = hp->n_head_kv, D = hp->head_dim;
    const rf_tensor *ff = rf_has(&m->rope_freqs) ? &m->rope_freqs : NULL;
    TRY(op->matmul(be, &r->qg, &L->wq, &f->h, n));
    TRY(op->head_split(be, &f->q, &r->gate, &r->qg, n * H, D));
    TRY(op->matmul(be, &f->k, &L->wk, &f->h, n));
    TRY(op->matmul(be, &f->v, &L->wv, &f->h, n));
    TRY(op->rmsnorm(be, &f->q, &f->q, &L->q_norm, n * H, D, hp->norm_eps));
    TRY(op->rmsnorm(be, &f->k, &f->k, &L->k_norm, n * HKV, D, hp->norm_eps));
    TRY(op->rope(be, &f->q, b, H, D, hp->n_rot, L->rope_base, L->rope_scale, ff, hp->rope_mode, hp->rope_attn_factor));
    TRY(op->rope(be, &f->k, b, HKV, D, hp->n_rot, L->rope_base, L->rope_scale, ff, hp->rope_mode, hp->rope_attn_factor));
    TRY(op->kv_store(be, &f->kc[il], &f->k, b));
    TRY(op->kv_store(be, &f->vc[il], &f->v, b));
    TRY(op->attention(be, &f->att, &f->q, &f->kc[il], &f->vc[il], b, H, HKV, D, hp->attn_scale, 0, 0.0f, NULL));
    TRY(op->sigmoid_mul(be, &f->att, &f->att, &r->gate, n * H * D));
    return op->matmul(be, &f->o, &L->wo, &f->att, n);
}
