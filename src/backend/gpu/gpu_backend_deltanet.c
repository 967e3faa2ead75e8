/* gpu_backend_deltanet.c — the GPU backend's gated DeltaNet ops (backend.h: ssm_conv,
 * gated_delta, sigmoid_mul, head_split) over the kernels of gpu_deltanet.cu: shape checks on the
 * host, the step's device metadata (positions, sequences, state slots) from the batch upload. */
#include "backend/gpu/gpu_deltanet.h"

/* The host check of the slots, where the host arrays are there (every eager step and the step a
 * graph records): each sequence's slot inside the state tensor, padding (pos < 0) aside. The
 * kernels skip a slot outside it too (a replayed graph's steps are not seen by the host). */
static rf_status check_slots(const rf_batch *b, const rf_tensor *state, const char *op) {
    if (!b->state_slot) return rf_set_error(RF_ERR_INVALID_ARG, "%s: the batch has no state slots", op);
    if (!b->pos || !b->seq) return RF_OK;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        if (b->pos[t] < 0 || (t > 0 && b->seq[t] == b->seq[t - 1])) continue;
        const int32_t s = b->seq[t];
        if (s < 0 || s >= b->n_seqs || b->state_slot[s] < 0 || b->state_slot[s] >= state->ne[1])
            return rf_set_error(RF_ERR_RANGE, "%s: sequence %d's state slot is outside the %lld slots", op, s,
                                (long long)state->ne[1]);
    }
    return RF_OK;
}

static bool f32_rows(const rf_tensor *t) { return t->type == RF_TYPE_F32 && t->nb1 % 4 == 0; }

rf_status rf_gpu_op_ssm_conv(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *w, rf_tensor *state,
                             const rf_batch *b, int64_t C, int64_t K) {
    if (K < 1 || K > 64 || !f32_rows(x) || !f32_rows(state) || w->type != RF_TYPE_F32 || w->ne[0] != K ||
        w->ne[1] != C || state->ne[0] != (K - 1) * C || x->ne[0] < C)
        return rf_set_error(RF_ERR_INVALID_ARG, "GPU ssm_conv: kernel %lld x %lld channels (f32, K <= 64) against "
                            "weight [%lld, %lld] and state rows of %lld", (long long)K, (long long)C,
                            (long long)w->ne[0], (long long)w->ne[1], (long long)state->ne[0]);
    const int32_t *pos, *seq, *ss;
    rf_status st = rf_gpu_be_batch_dev(b, "ssm_conv", &pos, &seq, &ss);
    if (st || (st = check_slots(b, state, "GPU ssm_conv"))) return st;
    if (!ss) return rf_set_error(RF_ERR_INVALID_ARG, "GPU ssm_conv: the upload has no state slots");
    return rf_gpu_ssm_conv(rf_gpu_be_op_ctx(be), y->data, x->data, (int64_t)(x->nb1 / 4), w->data, state->data,
                           (int64_t)(state->nb1 / 4), state->ne[1], pos, seq, ss, b->n_tokens, C, K);
}

rf_status rf_gpu_op_gated_delta(rf_backend *be, rf_tensor *out, const rf_tensor *x, const rf_tensor *a,
                                const rf_tensor *bt, const rf_tensor *dt_bias, const rf_tensor *ssm_a,
                                rf_tensor *state, const rf_batch *b, int64_t H_k, int64_t H_v, int64_t S, float eps) {
    if (H_k < 1 || H_v < 1 || H_v % H_k || S < 1 || state->ne[0] != H_v * S * S || !f32_rows(x) ||
        !f32_rows(state) || x->ne[0] < (2 * H_k + H_v) * S)
        return rf_set_error(RF_ERR_INVALID_ARG, "GPU gated_delta: %lld key heads, %lld value heads of %lld, state rows "
                            "of %lld", (long long)H_k, (long long)H_v, (long long)S, (long long)state->ne[0]);
    const int32_t *pos, *seq, *ss;
    rf_status st = rf_gpu_be_batch_dev(b, "gated_delta", &pos, &seq, &ss);
    if (st || (st = check_slots(b, state, "GPU gated_delta"))) return st;
    if (!ss) return rf_set_error(RF_ERR_INVALID_ARG, "GPU gated_delta: the upload has no state slots");
    return rf_gpu_gated_delta(rf_gpu_be_op_ctx(be), out->data, x->data, (int64_t)(x->nb1 / 4), a->data, bt->data,
                              dt_bias->data, ssm_a->data, state->data, (int64_t)(state->nb1 / 4), state->ne[1], pos,
                              seq, ss, b->n_seqs, b->n_tokens, H_k, H_v, S, eps);
}

rf_status rf_gpu_op_sigmoid_mul(rf_backend *be, rf_tensor *y, const rf_tensor *x, const rf_tensor *gate, int64_t n) {
    return rf_gpu_sigmoid_mul(rf_gpu_be_op_ctx(be), y->data, x->data, gate->data, n);
}

rf_status rf_gpu_op_head_split(rf_backend *be, rf_tensor *y0, rf_tensor *y1, const rf_tensor *x, int64_t rows,
                               int64_t n) {
    return rf_gpu_head_split(rf_gpu_be_op_ctx(be), y0->data, y1->data, x->data, rows, n);
}
