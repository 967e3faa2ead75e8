/* model_meta.h — reading "<arch>.<suffix>" hyper-parameter keys for the loader and the
 * architecture hooks (model_meta.c): every value range-checked, errors name the key. */
#ifndef RF_MODEL_META_H
#define RF_MODEL_META_H

#include "model/model.h"

/* "<arch>.<suffix>" into buf[cap]; returns buf. */
const char *rf_meta_key(const rf_model *m, const char *suffix, char *buf, size_t cap);
/* Required positive integer key (RF_ERR_NOT_FOUND / RF_ERR_RANGE naming it). */
rf_status rf_meta_req_i32(rf_model *m, const char *suffix, int32_t *out);
/* Optional integer key: keeps *out when absent; an array of equal values counts as one, an
 * array of different values is RF_ERR_UNSUPPORTED. */
rf_status rf_meta_opt_i32(rf_model *m, const char *suffix, int32_t *out);
/* Optional finite float key: keeps *out when absent. */
rf_status rf_meta_opt_f32(rf_model *m, const char *suffix, float *out);

#endif
