/* gpu_backend_step.c — the GPU backend's step plumbing: the step's metadata packed into pinned
 * memory and sent up in one copy (batch_upload), device sampling (sample), and decode steps
 * recorded as graphs and replayed (graph_begin/abort, a split's lead and followers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gpu/gpu_be.h"
#include "rocmforge/quant.h"


static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* the graph of a follower's recorded step lives in its lead's */
static char in_lead_mark;
#define IN_LEAD ((void *)&in_lead_mark)

static void graph_free(void *x) {
    if (x != IN_LEAD) rf_gpu_graph_destroy(x);
}

/* Ends a recording in progress without keeping it. A follower's stream is joined back into its
 * lead's recording (which its lead then ends: drop the followers first). */
void rf_gbe_drop_capture(gpu_be *g) {
    if (g->mode == RF_GRAPH_CAPTURE) {
        if (g->lead) {
            (void)rf_gpu_capture_join(g->lead->ctx, g->ctx);
        } else {
            void *x = NULL;
            rf_gpu_capture_end(g->ctx, &x);
            rf_gpu_graph_destroy(x);
        }
    }
    g->mode = RF_GRAPH_NONE;
}

/* Waits until the last eager copy out of the pinned buffer has run. The copy runs when the
 * stream reaches it; a step that returns nothing (a prompt chunk without logits) does not wait
 * for the device, so the host can come to pack the next step while the previous step's copy is
 * still queued behind earlier chunks' kernels: rewriting pin then would send this step's ids,
 * positions and slots to that step (wrong K/V slots, and for a chunk of another length a misread
 * block table: out-of-bounds writes). Called before a recording begins too: no host wait may
 * happen inside one. */
static rf_status pin_settle(gpu_be *g) {
    if (!g->pin_busy) return RF_OK;
    rf_status st = rf_gpu_fence_wait(g->ctx, g->pin_fence);
    if (!st) g->pin_busy = false;
    return st;
}

/* The step's host task (rf_gpu_host_task) of a late-filled masked step: its masks written into
 * the pinned rows while the device runs the forward; the status read after the step's wait. */
static void late_fill(void *p) {
    gpu_be *g = p;
    g->mask_st = g->dev.mask_fill(g->dev.mask_user, g->dev.h_masks);
}

/* Packs the step's metadata (ids, positions, sequences, slots, output rows, block tables, and
 * the sampling records with their penalties) into the pinned buffer and sends it up in one copy;
 * in a replayed step the recorded graph makes that copy. The layout depends only on the sizes,
 * so a recording fits every step of its bucket: in graph modes the penalty room is a fixed
 * RF_GRAPH_PEN entries per row. A masked step's grammar masks are written into it here, or
 * (mask_late_rows) by a host task forked off the stream here, which runs while the device runs the
 * forward (a host node of a recorded step's graph); they then go up in a copy of their own
 * just before the sampler. */
rf_status rf_gbe_batch_upload(rf_backend *be, rf_batch *b) {
    gpu_be *g = GX(be);
    g->pend_y = NULL; /* a step that failed between a matmul_sum_next and its norm left nothing to add */
    size_t nt = (size_t)b->n_tokens, tab = (size_t)b->n_seqs * (size_t)b->max_blocks;
    size_t ns = (size_t)b->n_sample, nss = b->state_slot ? (size_t)b->n_seqs : 0;
    size_t pen_room = g->mode != RF_GRAPH_NONE ? ns * RF_GRAPH_PEN : (size_t)b->n_pen;
    if ((size_t)b->n_pen > pen_room) {
        rf_gbe_drop_capture(g);
        return rf_set_error(RF_ERR_INTERNAL, "GPU graph step with %d penalty entries (room for %zu)", b->n_pen, pen_room);
    }
    /* a masked step: room for every row's mask in graph modes (the layout depends on sizes only) */
    const bool masked = b->mask_fill != NULL;
    const bool late = masked && g->mask_late_rows > 0 && (int64_t)ns >= g->mask_late_rows;
    const size_t words = masked ? (size_t)b->mask_words : 0;
    const size_t mask_room = !masked ? 0 : g->mode != RF_GRAPH_NONE ? ns : (size_t)b->n_mask;
    if (masked && ((size_t)b->n_mask > ns || b->mask_words < 1)) {
        rf_gbe_drop_capture(g);
        return rf_set_error(RF_ERR_INTERNAL, "GPU step with %d grammar masks of %d words for %zu rows", b->n_mask,
                            b->mask_words, ns);
    }
    size_t o_meta = 0, meta = up256((4 * nt + (size_t)b->n_out + tab + nss) * 4);
    size_t o_rows = meta, o_pid = o_rows + up256(ns * sizeof(rf_gpu_sample_row));
    /* the masks last of what goes up: written later, they go up on their own (late) */
    size_t o_pcnt = o_pid + up256(pen_room * 4), o_mask = o_pcnt + up256(pen_room * 4);
    size_t o_ids = o_mask + up256(mask_room * words * 4);
    size_t up = late ? o_mask : o_ids, bytes = o_ids + up256(ns * 4);
    rf_status st;
    if ((st = pin_settle(g))) {
        rf_gbe_drop_capture(g);
        return st;
    }
    if (bytes > g->meta_cap) {
        if (g->mode == RF_GRAPH_REPLAY) return rf_set_error(RF_ERR_INTERNAL, "GPU graph step with a larger batch");
        rf_gbe_drop_capture(g); /* no allocation inside a recording: this step runs eagerly */
        size_t cap = bytes * 2 < 65536 ? 65536 : bytes * 2;
        rf_gpu_sync(g->ctx); /* the old buffers may still be read */
        rf_gpu_host_free(g->pin);
        rf_gpu_free(g->ctx, g->dmeta);
        g->pin = g->dmeta = NULL;
        g->meta_cap = 0;
        g->epoch++;
        if ((st = rf_gpu_host_alloc(cap, (void **)&g->pin))) return st;
        if ((st = rf_gpu_alloc(g->ctx, cap, (void **)&g->dmeta))) return st;
        g->meta_cap = cap;
    }
    /* the pinned buffer is reused every step: the previous step's copy has finished (each step
     * ends by waiting for its ids or logits) */
    int32_t *h = (int32_t *)(g->pin + o_meta), *d = (int32_t *)(g->dmeta + o_meta);
    int64_t max_pos = 0;
    memcpy(h, b->ids, nt * 4);
    memcpy(h + nt, b->pos, nt * 4);
    memcpy(h + 2 * nt, b->seq, nt * 4);
    memcpy(h + 3 * nt, b->slot, nt * 4);
    if (b->n_out) memcpy(h + 4 * nt, b->out_rows, (size_t)b->n_out * 4);
    if (tab) memcpy(h + 4 * nt + b->n_out, b->block_table, tab * 4);
    if (nss) memcpy(h + 4 * nt + b->n_out + tab, b->state_slot, nss * 4);
    if (b->max_pos > 0) max_pos = b->max_pos;
    else
        for (size_t i = 0; i < nt; i++)
            if (b->pos[i] > max_pos) max_pos = b->pos[i];
    rf_gpu_sample_row *hr = (rf_gpu_sample_row *)(g->pin + o_rows);
    bool any = g->mode != RF_GRAPH_NONE; /* a recording serves steps with and without penalties */
    for (size_t i = 0; i < ns; i++) {
        const rf_sample_row *r = &b->sample_rows[i];
        hr[i].temperature = r->temperature;
        hr[i].top_p = r->top_p;
        hr[i].min_p = r->min_p;
        hr[i].u = r->u;
        hr[i].top_k = r->top_k;
        hr[i].repeat_penalty = r->repeat_penalty;
        hr[i].presence_penalty = r->presence_penalty;
        hr[i].frequency_penalty = r->frequency_penalty;
        hr[i].pen_off = r->pen_off;
        hr[i].pen_n = r->pen_n;
        hr[i].mask_ref = masked ? r->mask_ref : 0;
        any |= r->pen_n > 0;
    }
    /* the masks now, or by the step's host task (late) */
    if (masked && !late && (st = b->mask_fill(b->mask_user, (uint32_t *)(g->pin + o_mask)))) {
        rf_gbe_drop_capture(g);
        return st;
    }
    if (b->n_pen) {
        memcpy(g->pin + o_pid, b->pen_ids, (size_t)b->n_pen * 4);
        memcpy(g->pin + o_pcnt, b->pen_counts, (size_t)b->n_pen * 4);
    }
    g->dev.ids = d;
    g->dev.pos = d + nt;
    g->dev.seq = d + 2 * nt;
    g->dev.slot = d + 3 * nt;
    g->dev.out_rows = d + 4 * nt;
    g->dev.table = d + 4 * nt + b->n_out;
    g->dev.state_slot = nss ? d + 4 * nt + b->n_out + tab : NULL;
    g->dev.max_pos = max_pos;
    g->dev.rows = (rf_gpu_sample_row *)(g->dmeta + o_rows);
    g->dev.pen_ids = (int32_t *)(g->dmeta + o_pid);
    g->dev.pen_counts = (int32_t *)(g->dmeta + o_pcnt);
    g->dev.d_ids = (int32_t *)(g->dmeta + o_ids);
    g->dev.h_ids = (int32_t *)(g->pin + o_ids);
    g->dev.any_penalty = any;
    g->dev.masks = masked ? (const uint32_t *)(g->dmeta + o_mask) : NULL;
    g->dev.mask_words = (int64_t)words;
    g->dev.mask_fill = b->mask_fill;
    g->dev.mask_user = b->mask_user;
    g->dev.h_masks = (uint32_t *)(g->pin + o_mask);
    g->dev.mask_bytes = mask_room * words * 4;
    g->dev.late = late;
    b->dev = &g->dev;
    g->mask_st = RF_OK;
    if (g->mode == RF_GRAPH_REPLAY) return RF_OK; /* the graph runs the copy and the task */
    g->n_up++;
    if ((st = rf_gpu_upload_async(g->ctx, g->dmeta, g->pin, up))) return st;
    if (late && (st = rf_gpu_host_task(g->ctx, late_fill, g))) {
        rf_gbe_drop_capture(g);
        return st;
    }
    /* a recording's copy runs when its graph is launched, and that step waits for its ids */
    if (g->mode == RF_GRAPH_CAPTURE) return RF_OK;
    if ((st = rf_gpu_fence_record(g->ctx, &g->pin_fence))) return st;
    g->pin_busy = true;
    return RF_OK;
}

/* Penalizes and samples on the device with the records batch_upload sent, and brings back only
 * the ids. In a recorded step all of it (and the forward before it) is one graph: recorded
 * the first time, launched every time. */
rf_status rf_gbe_sample(rf_backend *be, const rf_tensor *logits, const rf_batch *b, int32_t *ids_out) {
    gpu_be *g = GX(be);
    NEED_DEV(b, "sample");
    const gpu_batch *d = dev_of(b);
    size_t n = (size_t)b->n_sample;
    rf_status st;
    if (g->mode == RF_GRAPH_REPLAY) {
        g->n_launch++;
        g->n_down++; /* inside the graph */
        g->n_up += d->late;
        if ((st = rf_gpu_graph_launch(g->ctx, g->graphs[g->cur].exec))) return st;
    } else {
        /* late masks: their copy waits for the host task that writes them */
        if (d->late) {
            g->n_up++;
            st = rf_gpu_host_task_join(g->ctx);
            if (!st && d->mask_bytes) st = rf_gpu_upload_async(g->ctx, (void *)d->masks, d->h_masks, d->mask_bytes);
            if (st) {
                rf_gbe_drop_capture(g);
                return st;
            }
        }
        if ((st = rf_gpu_sample_rows(g->ctx, d->d_ids, logits->data, (int64_t)n, logits->ne[0], d->rows, d->pen_ids,
                                     d->pen_counts, d->any_penalty, d->masks, d->mask_words))) {
            rf_gbe_drop_capture(g);
            return st;
        }
        g->n_down++;
        if (g->mode == RF_GRAPH_NONE) return rf_gpu_download(g->ctx, ids_out, d->d_ids, n * 4);
        /* recording: the ids go to pinned memory inside the graph; then run it for this step */
        if ((st = rf_gpu_download_async(g->ctx, d->h_ids, d->d_ids, n * 4))) {
            rf_gbe_drop_capture(g);
            return st;
        }
        void *x = NULL;
        g->mode = RF_GRAPH_NONE;
        if ((st = rf_gpu_capture_end(g->ctx, &x))) return st;
        g->graphs[g->cur].exec = x;
        g->graphs[g->cur].epoch = g->epoch;
        g->graphs[g->cur].scratch_at = rf_gpu_scratch_base(g->ctx);
        g->n_launch++;
        if ((st = rf_gpu_graph_launch(g->ctx, x))) return st;
    }
    g->mode = RF_GRAPH_NONE;
    if ((st = rf_gpu_sync(g->ctx))) return st;
    if (d->late && g->mask_st) return rf_set_error(g->mask_st, "GPU step: its grammar masks could not be written");
    memcpy(ids_out, d->h_ids, n * 4);
    return RF_OK;
}

void rf_gbe_drop_graphs(gpu_be *g) {
    for (int i = 0; i < g->n_graphs; i++) graph_free(g->graphs[i].exec);
    g->n_graphs = 0;
}

int rf_gbe_graph_begin(rf_backend *be, const void *owner, int key) {
    gpu_be *g = GX(be);
    rf_gbe_drop_capture(g);
    if (owner != g->owner) { /* another engine's buffers */
        rf_gbe_drop_graphs(g);
        g->owner = owner;
    }
    int i = 0;
    while (i < g->n_graphs && g->graphs[i].key != key) i++;
    if (i == g->n_graphs) {
        if (g->n_graphs == RF_MAX_GRAPHS) { /* all go: every GPU of a split sees the same keys, so all */
            rf_gbe_drop_graphs(g);           /* of them drop together and their tables stay alike */
            i = 0;
        }
        memset(&g->graphs[i], 0, sizeof g->graphs[i]);
        g->graphs[i].key = key;
        g->n_graphs++;
    }
    if (g->graphs[i].exec &&
        (g->graphs[i].epoch != g->epoch || g->graphs[i].scratch_at != rf_gpu_scratch_base(g->ctx))) {
        graph_free(g->graphs[i].exec); /* buffers it recorded have moved */
        g->graphs[i].exec = NULL;
        g->graphs[i].seen = 0;
    }
    g->cur = i;
    if (g->graphs[i].exec) return g->mode = RF_GRAPH_REPLAY;
    /* the first step of a shape runs eagerly (it sizes the scratch arena and the buffers);
     * the second is recorded */
    if (g->graphs[i].seen++ == 0) return g->mode = RF_GRAPH_NONE;
    if (pin_settle(g)) return g->mode = RF_GRAPH_NONE;
    if (g->lead ? g->lead->mode != RF_GRAPH_CAPTURE || rf_gpu_capture_fork(g->lead->ctx, g->ctx)
                : rf_gpu_capture_begin(g->ctx) != RF_OK)
        return g->mode = RF_GRAPH_NONE;
    return g->mode = RF_GRAPH_CAPTURE;
}

void rf_gbe_graph_abort(rf_backend *be) { rf_gbe_drop_capture(G(be)); }

/* Batch-invariant mode: every product on MMQ (rf_gpu_set_batch_invariant) and attention on the
 * paged kernel only (the flash prefill's rounding differs from the decode step's); the
 * recorded graphs hold the other routing, so they go. */
rf_status rf_gbe_set_batch_invariant(rf_backend *be, bool on) {
    gpu_be *g = GX(be);
    rf_gbe_drop_capture(g);
    rf_gbe_drop_graphs(g);
    rf_gpu_set_batch_invariant(g->ctx, on);
    g->invariant = on;
    return RF_OK;
}

/* A split over several GPUs (docs/tp.md): the GPUs other than the sampling one have no sample
 * op to end their part of a recorded step; this does, right before the sampling GPU's sample.
 * A follower (rf_backend_gpu_set_lead): CAPTURE joins its stream back into the lead's
 * recording, so the lead's graph holds its step; REPLAY does nothing (batch_upload has filled
 * the pinned buffer the lead's graph copies from; the lead's sample launches it all). A GPU with
 * graphs of its own: CAPTURE ends the recording and launches it, REPLAY launches it. */
rf_status rf_backend_gpu_graph_run(rf_backend *be) {
    gpu_be *g = G(be);
    const int mode = g->mode;
    g->mode = RF_GRAPH_NONE;
    if (g->lead) {
        if (mode != RF_GRAPH_CAPTURE) return RF_OK;
        rf_status st = rf_gpu_capture_join(g->lead->ctx, g->ctx);
        if (st) return st;
        g->graphs[g->cur].exec = IN_LEAD;
        g->graphs[g->cur].epoch = g->epoch;
        g->graphs[g->cur].scratch_at = rf_gpu_scratch_base(g->ctx);
        return RF_OK;
    }
    if (mode == RF_GRAPH_CAPTURE) {
        void *x = NULL;
        rf_status st = rf_gpu_capture_end(g->ctx, &x);
        if (st) return st;
        g->graphs[g->cur].exec = x;
        g->graphs[g->cur].epoch = g->epoch;
        g->graphs[g->cur].scratch_at = rf_gpu_scratch_base(g->ctx);
    } else if (mode != RF_GRAPH_REPLAY) {
        return RF_OK;
    }
    g->n_launch++;
    return rf_gpu_graph_launch(g->ctx, g->graphs[g->cur].exec);
}

void rf_backend_gpu_drop_graphs(rf_backend *be) {
    gpu_be *g = G(be);
    rf_gbe_drop_capture(g);
    rf_gbe_drop_graphs(g);
}

void rf_backend_gpu_set_lead(rf_backend *be, rf_backend *lead) {
    gpu_be *g = G(be);
    rf_gbe_drop_capture(g);
    rf_gbe_drop_graphs(g);
    g->lead = lead ? G(lead) : NULL;
}

/* Waits for the last eager copy out of the pinned buffer (pin_settle), so that graph_begin on
 * several GPUs makes no host wait while another GPU's recording is open in this thread. */
rf_status rf_backend_gpu_settle(rf_backend *be) { return pin_settle(G(be)); }
