/* gpu_backend_parts.c — the wait of a product's split-K partial sums (matmul_sum_next): the
 * backend's record of which output they stand for, and its end, where the op that reads that
 * output next takes them into its kernel or they are summed into it first. */
#include "backend/gpu/gpu_be.h"

bool rf_gbe_in_pend(const gpu_be *g, const void *p) {
    const char *y = (const char *)g->pend_y, *c = (const char *)p;
    return y && c >= y && c < y + g->pend_n * (int64_t)sizeof(float);
}

rf_status rf_gbe_flush_parts(gpu_be *g) {
    if (!g->pend_y) return RF_OK;
    float *y = (float *)g->pend_y;
    g->pend_y = NULL;
    return rf_gpu_sum_parts(g->ctx, y, (const float *)g->parts, g->pend_n, g->pend_np);
}

rf_status rf_gbe_take_parts_qkv(gpu_be *g, bool can, const float **q, const float **k, const float **v, int *np,
                                int *npv, int64_t *ps) {
    *np = *npv = 1;
    *ps = 0;
    if (!g->pend_y) return RF_OK;
    const bool iq = rf_gbe_in_pend(g, *q), ik = rf_gbe_in_pend(g, *k), iv = rf_gbe_in_pend(g, *v);
    if (!iq && !ik && !iv) {
        g->pend_y = NULL;
        return rf_set_error(RF_ERR_INTERNAL, "GPU rope_store: a product's split-K sums wait for another op "
                                             "(matmul_sum_next)");
    }
    if (!can || iq != ik) return rf_gbe_flush_parts(g);
    const char *y = (const char *)g->pend_y, *pp = (const char *)g->parts;
    if (iq) *q = (const float *)(pp + ((const char *)*q - y)), *k = (const float *)(pp + ((const char *)*k - y));
    if (iv) *v = (const float *)(pp + ((const char *)*v - y));
    *np = iq ? g->pend_np : 1;
    *npv = iv ? g->pend_np : 1;
    *ps = g->pend_n;
    g->pend_y = NULL;
    return RF_OK;
}
