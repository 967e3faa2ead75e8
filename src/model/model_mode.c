/* model_mode.c — switches of a loaded model that change how its backend computes, not what:
 * deterministic (batch-invariant) mode. */
#include "model/model.h"

rf_status rf_model_set_deterministic(rf_model *m, bool on) {
    if (!m) return rf_set_error(RF_ERR_INVALID_ARG, "rf_model_set_deterministic: no model");
    if (m->tp > 1 && on)
        return rf_set_error(RF_ERR_UNSUPPORTED, "deterministic mode with --tp %d: not available yet (use --tp 1)", m->tp);
    if (!m->be->ops->set_batch_invariant) return RF_OK; /* always batch-invariant (the CPU backend) */
    return m->be->ops->set_batch_invariant(m->be, on);
}
