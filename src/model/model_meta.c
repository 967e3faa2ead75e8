/* model_meta.c — "<arch>.<suffix>" hyper-parameter keys read from the GGUF metadata for the
 * loader and the architecture hooks (model_meta.h): every value range-checked, errors name the
 * key. */
#include <math.h>
#include <stdio.h>

#include "model/model_meta.h"

const char *rf_meta_key(const rf_model *m, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", m->hp.arch_name, suffix);
    return buf;
}

rf_status rf_meta_req_i32(rf_model *m, const char *suffix, int32_t *out) {
    char k[160];
    rf_meta_key(m, suffix, k, sizeof k);
    uint32_t v;
    rf_status st = rf_gguf_get_u32(m->g, k, &v);
    if (st == RF_ERR_NOT_FOUND) return rf_set_error(st, "model metadata: missing required key '%s'", k);
    if (st) return st;
    if (v == 0 || v > INT32_MAX) return rf_set_error(RF_ERR_RANGE, "model metadata: key '%s' = %u is out of range", k, v);
    *out = (int32_t)v;
    return RF_OK;
}

rf_status rf_meta_opt_i32(rf_model *m, const char *suffix, int32_t *out) {
    char k[160];
    rf_meta_key(m, suffix, k, sizeof k);
    if (rf_gguf_find_key(m->g, k) < 0) return RF_OK;
    uint32_t v;
    rf_status st = rf_gguf_get_u32(m->g, k, &v);
    if (st == RF_ERR_TYPE) {
        uint64_t n;
        const void *data;
        const rf_gguf_value *val = rf_gguf_kv_value(m->g, rf_gguf_find_key(m->g, k));
        if (val->type != RF_GGUF_ARRAY || (val->v.arr.elem_type != RF_GGUF_UINT32 && val->v.arr.elem_type != RF_GGUF_INT32))
            return st;
        rf_gguf_get_arr(m->g, k, -1, &n, &data);
        if (n == 0) return rf_set_error(RF_ERR_FORMAT, "model metadata: key '%s' is an empty array", k);
        const uint32_t *a = data;
        for (uint64_t i = 1; i < n; i++)
            if (a[i] != a[0])
                return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: per-layer values of '%s' differ (unsupported)", k);
        v = a[0];
    } else if (st) {
        return st;
    }
    if (v > INT32_MAX) return rf_set_error(RF_ERR_RANGE, "model metadata: key '%s' = %u is out of range", k, v);
    *out = (int32_t)v;
    return RF_OK;
}

rf_status rf_meta_opt_f32(rf_model *m, const char *suffix, float *out) {
    char k[160];
    rf_meta_key(m, suffix, k, sizeof k);
    if (rf_gguf_find_key(m->g, k) < 0) return RF_OK;
    rf_status st = rf_gguf_get_f32(m->g, k, out);
    if (st) return st;
    if (!isfinite(*out)) return rf_set_error(RF_ERR_RANGE, "model metadata: key '%s' is not finite", k);
    return RF_OK;
}
