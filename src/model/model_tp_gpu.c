/* model_tp_gpu.c — the split over several GPUs (docs/tp.md): opening a GPU backend per shard with
 * the checks that say why a split cannot run (GPU count, heads, each GPU's free memory against
 * its shard, peer access, NCCL), the communicator, and the collectives the forward calls over
 * the GPUs' buffers. One host thread issues every GPU's work (asynchronous launches on each
 * GPU's own stream); the NCCL calls of all ranks go out as one group. The same code in every
 * build: without the GPU backend, backend_nogpu.c's stubs make a split say so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "model/model.h"

rf_status rf_model_gpu_mem(const rf_model *m, size_t *free_bytes, size_t *total_bytes) {
    const int n = m->tp_be ? m->tp : 1;
    *free_bytes = SIZE_MAX;
    *total_bytes = 0;
    for (int s = 0; s < n; s++) {
        size_t fr = 0, tot = 0;
        if (!rf_backend_on_device(rf_model_be(m, s)))
            return rf_set_error(RF_ERR_UNSUPPORTED, "rf_model_gpu_mem: not on a GPU");
        rf_status st = rf_model_use(m, s); /* the runtime reads the current device's */
        rf_backend *be = rf_model_be(m, s);
        rf_backend_info bi = {0};
        if (!st) st = be->ops->info(be, true, &bi);
        if (st) return st;
        fr = bi.mem_free, tot = bi.mem_total;
        if (fr < *free_bytes) *free_bytes = fr, *total_bytes = tot;
    }
    return rf_model_use(m, 0);
}

int rf_model_n_gpus(const rf_model *m) {
    if (!m || !m->be) return 0;
    if (m->tp_be) return rf_backend_on_device(m->tp_be[0]) ? m->tp : 0;
    return rf_backend_on_device(m->be) ? 1 : 0;
}

rf_status rf_model_gpu_info(const rf_model *m, int s, bool memory, rf_backend_info *out) {
    memset(out, 0, sizeof *out);
    if (s < 0 || s >= rf_model_n_gpus(m))
        return rf_set_error(RF_ERR_RANGE, "GPU %d of the model: it runs on %d GPU(s)", s, rf_model_n_gpus(m));
    /* no rf_model_use: the op reads the backend's own device and leaves the caller's current one
     * (the engine thread's is its own: a per-thread setting) */
    rf_backend *be = rf_model_be(m, s);
    return be->ops->info(be, memory, out);
}

/* Bytes of weights shard s's GPU will hold: a 1/tp share of every layer matrix (K and V: the
 * shard's KV heads, replicated ones counted on each GPU), every layer vector whole, rope_freqs
 * and the final norm on each GPU, its rows of the embedding and of the LM head (the vocabulary
 * split: whole rows, rf_tp_vocab_rows), any other top-level tensor on GPU 0. */
static uint64_t shard_bytes(const rf_model *m, int s, int tp, int64_t hkv_s) {
    uint64_t total = 0;
    for (int64_t i = 0; i < rf_gguf_n_tensors(m->g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(m->g, i);
        const char *nm = t->name;
        if (strncmp(nm, "blk.", 4) == 0) {
            if (t->ne[1] <= 1) total += t->n_bytes;
            else if (strstr(nm, ".attn_k.") || strstr(nm, ".attn_v."))
                total += t->n_bytes / (uint64_t)m->hp.n_head_kv * (uint64_t)hkv_s;
            else total += t->n_bytes / (uint64_t)tp;
        } else if ((strcmp(nm, "token_embd.weight") == 0 || strcmp(nm, "output.weight") == 0) && t->ne[1] > 0) {
            const int64_t V = t->ne[1], step = rf_tp_vocab_step(V, tp), v0 = s * step, n = s == tp - 1 ? V - v0 : step;
            total += t->n_bytes / (uint64_t)V * (uint64_t)n;
        } else if (s == 0 || strcmp(nm, "rope_freqs.weight") == 0 || strcmp(nm, "output_norm.weight") == 0) {
            total += t->n_bytes;
        }
    }
    return total;
}

/* each GPU's free memory against what its shard needs (+ a KV cache reserve, as for one GPU) */
static rf_status check_memory(rf_model *m, int tp) {
    const int64_t HKV = m->hp.n_head_kv, hkv_s = HKV % tp == 0 ? HKV / tp : 1;
    for (int s = 0; s < tp; s++) {
        rf_backend *be = m->tp_be[s];
        rf_backend_info bi = {0};
        rf_status st = rf_backend_gpu_use(be); /* the runtime reads the current device's */
        if (!st) st = be->ops->info(be, true, &bi);
        if (st) return st;
        const size_t fr = bi.mem_free, tot = bi.mem_total;
        const uint64_t need = shard_bytes(m, s, tp, hkv_s);
        const uint64_t reserve = need / 20 > (256u << 20) ? need / 20 : (256u << 20);
        if (need + reserve > fr)
            return rf_set_error(RF_ERR_OOM,
                                "--tp %d: shard %d needs %.1f MiB of weights (+%.0f MiB for a KV cache) but GPU %d has "
                                "%.1f MiB free (of %.1f MiB); use more GPUs or a smaller model",
                                tp, s, need / 1048576.0, reserve / 1048576.0, bi.device, fr / 1048576.0,
                                tot / 1048576.0);
        RF_LOGI("--tp %d: shard %d: %.1f MiB of weights on GPU %d (%s)", tp, s, need / 1048576.0, bi.device, bi.name);
    }
    return RF_OK;
}

rf_status rf_tp_open(rf_model *m, int32_t tp, int first) {
    const rf_hparams *hp = &m->hp;
    if (!rf_gpu_built()) return rf_set_error(RF_ERR_UNSUPPORTED, "--tp %d over GPUs: this build has no GPU backend (--device cpu runs the split on the CPU)", tp);
    const int have = rf_gpu_device_count();
    if (first < 0 || first + tp > have)
        return rf_set_error(RF_ERR_DEVICE,
                            "--tp %d: the split over several GPUs needs %d GPUs (from GPU %d), %d present "
                            "(--device cpu runs the split on the CPU)", tp, tp, first, have);
    const int ff = hp->n_expert > 0 ? hp->n_ff_exp : hp->n_ff; /* each expert's, for a mixture of experts */
    if (hp->n_head % tp || ff % tp)
        return rf_set_error(RF_ERR_INVALID_ARG, "--tp %d does not divide the %d heads and the FFN width %d%s", tp,
                            hp->n_head, ff, hp->n_expert > 0 ? " (of each expert)" : "");
    if (hp->n_head_kv % tp && tp % hp->n_head_kv)
        return rf_set_error(RF_ERR_INVALID_ARG,
                            "--tp %d: the %d KV heads can neither be split over %d shards nor replicated evenly", tp,
                            hp->n_head_kv, tp);
    m->tp_be = calloc((size_t)tp, sizeof *m->tp_be);
    if (!m->tp_be) return rf_set_error(RF_ERR_OOM, "--tp: out of memory");
    m->tp = tp; /* rf_tp_close releases what was opened */
    rf_status st;
    for (int s = 0; s < tp; s++)
        if ((st = rf_backend_gpu_new(first + s, &m->tp_be[s])))
            return rf_set_error(st, "--tp %d: GPU %d: %s", tp, first + s, rf_last_error());
        else if (s == 0)
            m->be = m->tp_be[0]; /* released by rf_model_free from here */
    if ((st = check_memory(m, tp))) return st;
    if (!rf_knob_bool(RF_KNOB_TP_NO_PEER_OK)) {
        if ((st = rf_tp_peer_check(m->tp_be, tp))) return st;
    }
    /* all-reduces of n_embd floats a token: decode steps of up to 256 tokens peer to peer */
    if ((st = rf_tp_comm_new(m->tp_be, tp, (size_t)RF_TP_P2P_MAX_TOKENS * (size_t)hp->n_embd, &m->tp_comm))) return st;
    /* a recorded step is one graph over every GPU, launched by GPU 0's sample (docs/tp.md) */
    for (int s = 1; s < tp; s++) {
        if ((st = rf_model_use(m, s))) return st;
        rf_backend_gpu_set_lead(m->tp_be[s], m->tp_be[0]);
    }
    return rf_model_use(m, 0);
}

rf_status rf_tp_dev_allreduce(rf_model *m, rf_tensor *const *t, int64_t n) {
    if (!m->tp_comm) return rf_tp_host_allreduce(m, t, n);
    return rf_tp_comm_allreduce(m->tp_comm, t, (size_t)n);
}

rf_status rf_tp_dev_broadcast(rf_model *m, rf_tensor *const *t, int64_t n) {
    if (!m->tp_comm) return rf_tp_host_broadcast(m, t, n);
    return rf_tp_comm_broadcast(m->tp_comm, t, (size_t)n);
}

bool rf_tp_dev_reduce_norm_ok(const rf_model *m, int64_t rows, int64_t n) {
    return m->tp_comm && rf_tp_comm_norm_takes(m->tp_comm, rows, n);
}

rf_status rf_tp_dev_reduce_norm(rf_model *m, int d, rf_tensor *y, rf_tensor *x, const rf_tensor *part,
                                const rf_tensor *w, int64_t rows, int64_t n, float eps, const rf_tensor *next) {
    return rf_tp_comm_add_rmsnorm(m->tp_comm, d, m->tp_be[d], y, x, part, w, rows, n, eps, next);
}

/* the LM head's logit slices into GPU 0's logits: a peer copy across GPUs, a host copy on CPU ranks */
rf_status rf_tp_dev_gather(rf_model *m, int s, rf_tensor *dst, int64_t col0, const rf_tensor *src, int64_t rows,
                           int64_t width) {
    if (m->tp_gather) return rf_tp_gather_cols(m->tp_gather, s, dst, col0, src, rows, width);
    if (rf_backend_on_device(m->tp_be[s]))
        return rf_set_error(RF_ERR_UNSUPPORTED, "--tp: GPU ranks need the gather of their logits");
    if (col0 < 0 || col0 + width > dst->ne[0] || rows > dst->ne[1] || rows > src->ne[1] || width > src->ne[0])
        return rf_set_error(RF_ERR_INVALID_ARG, "--tp: gathering %lld x %lld logits of rank %d: bad shape",
                            (long long)rows, (long long)width, s);
    for (int64_t r = 0; r < rows; r++)
        memcpy((float *)dst->data + r * dst->ne[0] + col0, (const float *)src->data + r * src->ne[0],
               (size_t)width * sizeof(float));
    return RF_OK;
}

static bool tp_graphs_optin(void) {
    return rf_knob_bool(RF_KNOB_TP_GRAPHS);
}

bool rf_model_graphs_ok(const rf_model *m) {
    return !m->tp_be || (m->tp_comm && tp_graphs_optin() && !rf_tp_comm_aborted(m->tp_comm));
}

int rf_model_graph_begin(rf_model *m, const void *owner, int key) {
    if (!m->tp_be) return m->be->ops->graph_begin(m->be, owner, key);
    /* a split whose communicators were aborted (a wait timed out) records and replays nothing:
     * its steps run eagerly and fail at their first collective, naming why */
    if (m->tp_comm && rf_tp_comm_aborted(m->tp_comm)) return RF_GRAPH_NONE;
    int mode = RF_GRAPH_NONE;
    bool same = true;
    /* every host wait before the first recording opens: none may happen while one is open */
    for (int s = 0; s < m->tp; s++)
        if (rf_model_use(m, s) || rf_backend_gpu_settle(m->tp_be[s])) same = false;
    for (int s = 0; s < m->tp && same; s++) {
        rf_backend *be = m->tp_be[s];
        if (rf_model_use(m, s)) same = false;
        int md = be->ops->graph_begin(be, owner, key);
        if (s == 0) mode = md;
        else if (md != mode) same = false;
    }
    if (!same) {
        /* the GPUs disagree (one's buffers moved, so its recording was dropped): this step runs
         * eagerly everywhere, and every GPU drops all its recordings (a graph_begin for another
         * owner does that), so they record again in step with each other; the followers first,
         * since their streams must rejoin GPU 0's recording before it ends */
        for (int s = m->tp - 1; s >= 0; s--) {
            rf_backend *be = m->tp_be[s];
            rf_model_use(m, s);
            be->ops->graph_begin(be, m, -1);
            if (be->ops->graph_abort) be->ops->graph_abort(be);
        }
        mode = RF_GRAPH_NONE;
    }
    rf_model_use(m, 0);
    return mode;
}

rf_status rf_model_graph_others(rf_model *m, const rf_batch *b, int mode) {
    if (!m->tp_be || mode == RF_GRAPH_NONE) return RF_OK;
    rf_status st = RF_OK;
    for (int s = 1; s < m->tp && !st; s++) {
        rf_backend *be = m->tp_be[s];
        rf_batch copy = *b;
        copy.dev = NULL;
        copy.mask_fill = NULL; /* only GPU 0 samples */
        if ((st = rf_model_use(m, s))) break;
        if (mode == RF_GRAPH_REPLAY && (st = be->ops->batch_upload(be, &copy))) break; /* the pinned buffer */
        st = rf_backend_gpu_graph_run(be);
    }
    rf_status u = rf_model_use(m, 0);
    return st ? st : u;
}

void rf_model_graph_abort(rf_model *m) {
    const int n = m->tp_be ? m->tp : 1;
    for (int s = n - 1; s >= 0; s--) { /* followers rejoin GPU 0's recording before it ends */
        rf_backend *be = rf_model_be(m, s);
        rf_model_use(m, s);
        if (be->ops->graph_abort) be->ops->graph_abort(be);
    }
    rf_model_use(m, 0);
}

void rf_tp_close(rf_model *m) {
    if (!m->tp_be) return;
    /* every recorded step first: a graph holding NCCL kernels keeps a reference on the
     * communicator, and destroying the communicator waits for it (a hang at exit otherwise) */
    for (int s = m->tp - 1; s >= 0; s--)
        if (m->tp_be[s] && rf_backend_on_device(m->tp_be[s])) {
            rf_model_use(m, s);
            rf_backend_gpu_drop_graphs(m->tp_be[s]);
        }
    rf_tp_comm_free(m->tp_comm);
    m->tp_comm = NULL;
    for (int s = 1; s < m->tp; s++)
        if (m->tp_be[s]) {
            rf_model_use(m, s);
            m->tp_be[s]->ops->destroy(m->tp_be[s]);
            m->tp_be[s] = NULL;
        }
    if (m->tp_be[0]) rf_model_use(m, 0);
    free(m->tp_be);
    m->tp_be = NULL;
}
