/* gpu_be.h — the GPU backend's state (gpu_be) shared by its files: gpu_backend.c (the op table,
 * memory, the plain ops), gpu_backend_step.c (batch upload, sampling, graphs) and
 * gpu_backend_products.c (products and the shared quantized activation). */
#ifndef RF_GPU_BE_H
#define RF_GPU_BE_H

#include "backend/backend.h"
#include "backend/gpu/gpu.h"
#include "core/test_hooks.h"

#define RF_MAX_GRAPHS 256 /* the engine's keys: batch buckets (rf_step_graph_bucket) x depth buckets (16 x 8 at
                          * --parallel 256, -c 32768), their masked twins where grammars run */
#define RF_GRAPH_PEN 64 /* penalty entries per row a graph step carries */

/* Device copies of a step's metadata (one allocation, laid out as in the pinned buffer). */
typedef struct gpu_batch {
    int32_t *ids, *pos, *seq, *slot, *out_rows, *table;
    int32_t *state_slot; /* [n_seqs] (hybrid models), else NULL */
    int64_t max_pos;
    rf_gpu_sample_row *rows;  /* sampling records, penalties, and room for the ids */
    int32_t *pen_ids, *pen_counts, *d_ids, *h_ids;
    bool any_penalty;
    const uint32_t *masks; /* a masked step's grammar masks (rows of mask_words), else NULL */
    int64_t mask_words;
    /* a masked step's fill (rf_batch.mask_fill) and its pinned rows, mask_bytes of them sent up
     * to masks; late: the rows written by a host task while the device runs the forward, their
     * copy queued behind the task's join */
    rf_status (*mask_fill)(void *user, uint32_t *dst);
    void *mask_user;
    uint32_t *h_masks;
    size_t mask_bytes;
    bool late;
} gpu_batch;

typedef struct gpu_be {
    rf_gpu_ctx *ctx;
    int device;
    char *pin;        /* pinned staging of the metadata */
    void *pin_fence;  /* recorded behind the last eager copy out of pin */
    bool pin_busy;    /* that copy may not have run yet: wait on pin_fence before writing pin */
    char *dmeta;      /* its device copy */
    size_t meta_cap;
    gpu_batch dev;
    /* grammar masks written by a host task while the device runs the step, in steps of at least
     * this many sampled rows (RF_GPU_MASK_OVERLAP; 0: never), and that task's status (read after
     * the step's wait). A step's row count is part of its graph's key (the bucket), so a
     * recording and its replays agree. */
    int64_t mask_late_rows;
    rf_status mask_st;
    /* decode-step graphs, one per engine key (batch-size bucket, depth bucket, masked or not) */
    struct {
        int key, seen;
        void *exec;
        unsigned epoch;   /* g->epoch when recorded */
        void *scratch_at; /* the scratch arena's base when recorded */
    } graphs[RF_MAX_GRAPHS];
    int n_graphs, mode, cur;
    const void *owner;
    /* a tensor-parallel split's GPU other than the sampling one (rf_backend_gpu_set_lead): its
     * step is recorded into lead's graph (one graph over every GPU), never into its own; its
     * recorded entries then hold IN_LEAD instead of an executable graph */
    struct gpu_be *lead;
    unsigned epoch;   /* bumped when a buffer a graph recorded moves */
    int64_t n_up, n_down, n_launch; /* per-step transfer counters (RF_GPU_STEP_TRACE) */
    char name[256];                 /* the device's name (op info) */
    /* Fusions (RF_GPU_UNFUSED=1 turns them off, for A/B runs and the fused-vs-unfused test):
     * rope_store, norm_rope_store, and one activation quantization shared by consecutive products of the same
     * x (Q, K, V; gate, up). xq_src is the f32 x that xq holds quantized in the layout (xq_gb,
     * xq_rk: rf_gpu_xq_layout) for xq_nt x xq_nin; any op other than a product reading it ends
     * that (it may write x). */
    bool fuse;
    bool flash; /* prompt runs on the tensor-core prefill kernel (RF_GPU_FLASH=0: off, for A/B runs) */
    bool invariant; /* batch-invariant mode (rf_gbe_set_batch_invariant): no flash prefill */
    const void *xq_src;
    int xq_gb, xq_rk;
    int64_t xq_nt, xq_nin;
    void *xq;
    size_t xq_cap;
    /* a matmul_sum_next product's split-K partial sums, left for the next rmsnorm_for to add (their
     * sum is y = pend_y's value): pend_np arrays of pend_n floats at parts (parts_cap bytes);
     * pend_y NULL: none waits. parts_kept counts such products (rf_backend_gpu_parts_kept). */
    const void *pend_y;
    int pend_np;
    int64_t pend_n;
    void *parts;
    size_t parts_cap;
    int64_t parts_kept;
} gpu_be;

#define G(be) ((gpu_be *)(be)->impl)
/* the backend of an op that is not a product: a shared quantized x is stale from here on */
static inline gpu_be *GX(rf_backend *be) {
    gpu_be *g = G(be);
    g->xq_src = NULL;
    return g;
}

static inline const gpu_batch *dev_of(const rf_batch *b) { return (const gpu_batch *)b->dev; }

/* Tests only (core/test_hooks.h gpu_skip_ops): whether this kind of op launches nothing, so that
 * a whole step is timed without it (the values are wrong). Always false in the product. */
#define RF_SKIP_ATTN 1
#define RF_SKIP_ROPE 2
#define RF_SKIP_NORM 4
#define RF_SKIP_GLU 8
#define RF_SKIP_MATMUL 16
static inline bool gbe_skip(int what) {
    const rf_test_hooks *h = rf_test_hooks_get();
    return h && (h->gpu_skip_ops & what);
}

#define NEED_DEV(b, op) \
    if (!(b)->dev) return rf_set_error(RF_ERR_INVALID_ARG, "GPU %s: batch metadata was not uploaded", op)


/* ---- across the backend's files ---- */
/* gpu_backend.c */
rf_status rf_gbe_alloc(rf_backend *be, rf_type type, int64_t n, int64_t rows, rf_tensor *out);
void rf_gbe_free(rf_backend *be, rf_tensor *t);
rf_status rf_gbe_glu(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up, int64_t n,
                     rf_glu_kind kind);
/* gpu_backend_step.c: a step's metadata upload, device sampling and the decode-step graphs */
void rf_gbe_drop_capture(gpu_be *g);
void rf_gbe_drop_graphs(gpu_be *g);
rf_status rf_gbe_batch_upload(rf_backend *be, rf_batch *b);
rf_status rf_gbe_sample(rf_backend *be, const rf_tensor *logits, const rf_batch *b, int32_t *ids_out);
int rf_gbe_graph_begin(rf_backend *be, const void *owner, int key);
void rf_gbe_graph_abort(rf_backend *be);
rf_status rf_gbe_set_batch_invariant(rf_backend *be, bool on);
/* gpu_backend_parts.c: a matmul_sum_next product's wait (g->pend_y): rf_gbe_in_pend, whether p
 * points into its y; rf_gbe_flush_parts, its sums written into y (rf_gpu_sum_parts) and the wait
 * ended (RF_OK where none waits); rf_gbe_take_parts_qkv, for an op reading q, k, v (views): where the waiting y is
 * behind q and k and/or v and the op can take parts (can), the views become their places in the
 * first parts array, *np (q and k) / *npv (v) the counts (1 for a view outside y), *ps the
 * distance, and the wait ends; where it cannot, the sums go into y first; where it waits for
 * another op, RF_ERR_INTERNAL */
bool rf_gbe_in_pend(const gpu_be *g, const void *p);
rf_status rf_gbe_flush_parts(gpu_be *g);
rf_status rf_gbe_take_parts_qkv(gpu_be *g, bool can, const float **q, const float **k, const float **v, int *np,
                                int *npv, int64_t *ps);
/* gpu_backend_products.c: the products and the ops that prepare a product's quantized x */
rf_status rf_gbe_matmul(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, int64_t n_tokens);
rf_status rf_gbe_matmul_sum_next(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, int64_t n_tokens);
rf_status rf_gbe_matmul_bias(rf_backend *be, rf_tensor *y, const rf_tensor *w, const rf_tensor *x, const rf_tensor *b,
                             int64_t n_tokens);
rf_status rf_gbe_rmsnorm_for(rf_backend *be, rf_tensor *y, rf_tensor *x, const rf_tensor *res, const rf_tensor *w,
                             int64_t rows, int64_t n, float eps, const rf_tensor *next);
rf_status rf_gbe_glu_for(rf_backend *be, rf_tensor *y, const rf_tensor *gate, const rf_tensor *up, int64_t n,
                         rf_glu_kind kind, const rf_tensor *next);
rf_status rf_gbe_weight_join(rf_backend *be, rf_tensor **parts, int n_parts, rf_tensor *whole);

#endif
