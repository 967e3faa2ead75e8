/* model_bind.c — one weight bound by name from the GGUF file (rf_model_bind): its shape and type
 * checked, uploaded through the backend or viewed for a tensor-parallel split, counted. The layer
 * loaders (model_weights.c, model_gemma4.c) build on it. */
#include <string.h>

#include "model/model.h"
#include "rocmforge/quant.h"

/* Binds tensor `name` with expected shape [ne0, ne1] (ne1 = 1 for vectors). Missing and
 * required: RF_ERR_NOT_FOUND naming it. Norms and biases must be f32. */
rf_status rf_model_bind(rf_model *m, rf_tensor *t, const char *name, int64_t ne0, int64_t ne1, bool required) {
    memset(t, 0, sizeof *t);
    const rf_gguf_tensor *gt = rf_gguf_find_tensor(m->g, name);
    if (!gt) {
        if (!required) return RF_OK;
        return rf_set_error(RF_ERR_NOT_FOUND, "model: missing tensor '%s' (architecture %s)", name,
                            m->hp.arch_name);
    }
    int64_t g1 = gt->ne[1] * gt->ne[2] * gt->ne[3];
    if (gt->ne[0] != ne0 || g1 != ne1)
        return rf_set_error(RF_ERR_FORMAT, "model: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                            name, (long long)gt->ne[0], (long long)g1, (long long)ne0, (long long)ne1);
    if (ne1 == 1 && gt->type != RF_TYPE_F32)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' has type %s; vectors must be f32", name,
                            rf_type_name(gt->type));
    const rf_type_traits *tr = rf_type_info(gt->type);
    if (!tr || (gt->type != RF_TYPE_F32 && gt->type != RF_TYPE_F16 && gt->type != RF_TYPE_BF16 && !tr->to_f32))
        return rf_set_error(RF_ERR_UNSUPPORTED, "model: tensor '%s' has type %s, which ROCmForge cannot compute with",
                            name, rf_type_name(gt->type));
    if (!gt->data) return rf_set_error(RF_ERR_FORMAT, "model: tensor '%s' has no data", name);
    rf_status st;
    if (m->tp_be && (strncmp(name, "blk.", 4) == 0 || !strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight"))) {
        /* split over several GPUs: a host view into the mapped file; each GPU uploads its slices
         * of it (model_tp.c), none the whole layer, embedding or LM head */
        size_t rb;
        if ((st = rf_row_size(gt->type, ne0, &rb))) return st;
        *t = (rf_tensor){.type = gt->type, .ne = {ne0, ne1}, .nb1 = rb, .data = (void *)gt->data, .owned = false};
    } else {
        st = m->be->ops->weight(m->be, gt->type, ne0, ne1, gt->data, t);
    }
    if (st) return rf_set_error(st, "model: tensor '%s': %s", name, rf_last_error());
    if (m->progress && m->load_total) { /* a device backend uploads here: show it */
        m->load_done += gt->n_bytes;
        float f = (float)m->load_done / (float)m->load_total;
        if (f - m->load_last >= 0.01f || f >= 1.0f) {
            m->progress(f > 1.0f ? 1.0f : f, m->progress_user);
            m->load_last = f;
        }
    }
    m->n_params += (uint64_t)ne0 * (uint64_t)ne1;
    m->weight_bytes += gt->n_bytes;
    return RF_OK;
}
