/* backend_nogpu.c — backend.h's GPU entry points in a build without the GPU backend: stubs that
 * say so (RF_ERR_UNSUPPORTED, no devices), so that code outside src/backend/ is the same in every
 * build. In a GPU build the GPU backend's files define them and this file holds rf_gpu_built. */
#include "backend/backend.h"

#ifdef RF_HAVE_GPU

bool rf_gpu_built(void) { return true; }

#else

static rf_status no_gpu(void) { return rf_set_error(RF_ERR_UNSUPPORTED, "this build has no GPU backend"); }

bool rf_gpu_built(void) { return false; }
rf_status rf_backend_gpu_new(int device, rf_backend **out) {
    (void)device;
    *out = NULL;
    return no_gpu();
}
int rf_gpu_device_count(void) { return 0; }
rf_status rf_gpu_probe_read_bw(int device, char *name, size_t cap, double *gbps) {
    (void)device, (void)name, (void)cap;
    *gbps = 0;
    return no_gpu();
}
rf_status rf_backend_gpu_use(rf_backend *be) {
    (void)be;
    return RF_OK;
}
rf_status rf_backend_gpu_graph_run(rf_backend *be) {
    (void)be;
    return no_gpu();
}
void rf_backend_gpu_set_lead(rf_backend *be, rf_backend *lead) { (void)be, (void)lead; }
void rf_backend_gpu_drop_graphs(rf_backend *be) { (void)be; }
rf_status rf_backend_gpu_settle(rf_backend *be) {
    (void)be;
    return RF_OK;
}
rf_status rf_tp_peer_check(rf_backend *const *bes, int n) {
    (void)bes, (void)n;
    return no_gpu();
}
rf_status rf_tp_comm_new(rf_backend *const *bes, int n, size_t p2p_max, rf_tp_comm **out) {
    (void)bes, (void)n, (void)p2p_max;
    *out = NULL;
    return no_gpu();
}
rf_status rf_tp_comm_allreduce(rf_tp_comm *t, rf_tensor *const *bufs, size_t n) {
    (void)t, (void)bufs, (void)n;
    return no_gpu();
}
rf_status rf_tp_comm_broadcast(rf_tp_comm *t, rf_tensor *const *bufs, size_t n) {
    (void)t, (void)bufs, (void)n;
    return no_gpu();
}
bool rf_tp_comm_norm_takes(const rf_tp_comm *t, int64_t rows, int64_t n) {
    (void)t, (void)rows, (void)n;
    return false;
}
rf_status rf_tp_comm_add_rmsnorm(rf_tp_comm *t, int rank, rf_backend *be, rf_tensor *y, rf_tensor *x,
                                 const rf_tensor *part, const rf_tensor *w, int64_t rows, int64_t n, float eps,
                                 const rf_tensor *next) {
    (void)t, (void)rank, (void)be, (void)y, (void)x, (void)part, (void)w, (void)rows, (void)n, (void)eps, (void)next;
    return no_gpu();
}
void rf_tp_comm_free(rf_tp_comm *t) { (void)t; }
bool rf_tp_comm_aborted(const rf_tp_comm *t) {
    (void)t;
    return false;
}
rf_status rf_tp_gather_new(rf_backend *const *bes, int n, rf_tp_gather **out) {
    (void)bes, (void)n;
    *out = NULL;
    return no_gpu();
}
rf_status rf_tp_gather_cols(rf_tp_gather *g, int s, rf_tensor *dst, int64_t col0, const rf_tensor *src, int64_t rows,
                            int64_t width) {
    (void)g, (void)s, (void)dst, (void)col0, (void)src, (void)rows, (void)width;
    return no_gpu();
}
void rf_tp_gather_free(rf_tp_gather *g) { (void)g; }

#endif
