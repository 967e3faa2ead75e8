/* backend_moe.c — the MoE feed-forward's expert products through a backend: its decode fusions
 * (moe_ffn; matmul_id_glu, matmul_id_combine) where it has them, else the unfused ops (backend.h). */
#include "backend/backend.h"

rf_status rf_moe_gate_up(rf_backend *be, rf_tensor *y, rf_tensor *u, const rf_tensor *w_gate, const rf_tensor *w_up,
                         int64_t n_out, const rf_tensor *x, const rf_tensor *ids, const rf_tensor *b_gate,
                         const rf_tensor *b_up, int64_t n, int64_t k, rf_glu_kind kind) {
    const rf_backend_ops *op = be->ops;
    if (op->matmul_id_glu) return op->matmul_id_glu(be, y, u, w_gate, w_up, n_out, x, ids, b_gate, b_up, n, k, kind);
    rf_status st = op->matmul_id(be, y, w_gate, n_out, x, false, ids, b_gate, n, k);
    if (!st) st = op->matmul_id(be, u, w_up, n_out, x, false, ids, b_up, n, k);
    return st ? st : op->glu(be, y, y, u, n * k * n_out, kind);
}

rf_status rf_moe_down_sum(rf_backend *be, rf_tensor *y, rf_tensor *z, const rf_tensor *w, int64_t n_out,
                          const rf_tensor *x, const rf_tensor *ids, const rf_tensor *bias, const rf_tensor *wts,
                          int64_t n, int64_t k) {
    const rf_backend_ops *op = be->ops;
    if (op->matmul_id_combine) return op->matmul_id_combine(be, y, z, w, n_out, x, ids, bias, wts, n, k);
    rf_status st = op->matmul_id(be, z, w, n_out, x, true, ids, bias, n, k);
    return st ? st : op->moe_combine(be, y, z, wts, n, k, n_out);
}

rf_status rf_moe_ffn(rf_backend *be, rf_tensor *y, const rf_moe_ffn_args *a) {
    const rf_backend_ops *op = be->ops;
    if (op->moe_ffn) return op->moe_ffn(be, y, a);
    rf_status st = RF_OK;
    if (a->logits_b) st = op->add_bias(be, a->logits, a->logits_b, a->n, a->n_expert);
    if (!st)
        st = op->moe_route(be, a->ids, a->wts, a->logits, a->sel_bias, a->n, a->n_expert, a->k, a->gating, a->norm,
                           a->scale);
    if (!st)
        st = rf_moe_gate_up(be, a->g, a->u, a->w_gate, a->w_up, a->n_ff, a->x, a->ids, a->b_gate, a->b_up, a->n, a->k,
                            a->glu);
    return st ? st : rf_moe_down_sum(be, y, a->z, a->w_down, a->n_out, a->g, a->ids, a->b_down, a->wts, a->n, a->k);
}
