/* synth_write.c — rf_mkmodel_plan / rf_mkmodel_write: builds the tensor list of a preset, types
 * it with the llama-quantize recipe, writes metadata + tokenizer and streams every tensor through
 * the GGUF writer's fill callback, one generated-and-quantized row at a time. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rocmforge/gguf.h"
#include "rocmforge/mkmodel.h"
#include "rocmforge/quant.h"
#include "synth_model.h"
#include "synth_rng.h"

#define RF_MKMODEL_MAX_THREADS 64

/* ---- public tables ------------------------------------------------------------------------ */

int32_t rf_mkmodel_preset_count(void) { return synth_n_presets; }

bool rf_mkmodel_preset_at(int32_t i, rf_mkmodel_preset_info *out) {
    if (i < 0 || i >= synth_n_presets || !out) return false;
    const synth_preset *p = &synth_presets[i];
    memset(out, 0, sizeof *out);
    out->name = p->name;
    out->arch = synth_arch_get(p->arch)->name;
    out->description = p->description;
    out->n_layer = p->n_layer;
    out->n_embd = p->n_embd;
    out->n_ff = p->n_ff;
    out->n_head = p->n_head;
    out->n_head_kv = p->n_head_kv;
    out->head_dim = p->head_dim;
    out->n_vocab = p->vocab.n_vocab;
    out->n_ctx = p->n_ctx;
    out->tied_embeddings = p->tied;
    out->tokenizer = p->vocab.family == SYNTH_VOCAB_LLAMA2 ? "llama" : p->vocab.family == SYNTH_VOCAB_GEMMA4 ? "gemma4" : "gpt2";
    out->pre = p->vocab.family == SYNTH_VOCAB_GEMMA4 ? "gemma4" : p->pre;
    return true;
}

const char *rf_mkmodel_type_at(int32_t i, const char **alias_of) {
    if (i < 0 || i >= synth_n_ftypes) return NULL;
    if (alias_of) *alias_of = synth_ftypes[i].alias_of;
    return synth_ftypes[i].name;
}

/* ---- planning ----------------------------------------------------------------------------- */

typedef struct plan {
    const synth_preset *p; /* the table's, or own with another vocabulary size (--vocab) */
    synth_preset own;
    const synth_ftype *ft;
    int32_t n_layer;
    synth_tensor_list l;
    int32_t n_fallback;
} plan;

static void plan_free(plan *pl) {
    free(pl->l.t);
    memset(pl, 0, sizeof *pl);
}

static rf_status unknown_name_error(const char *what, const char *name, bool preset) {
    char list[1024];
    size_t k = 0;
    list[0] = 0;
    int32_t n = preset ? synth_n_presets : synth_n_ftypes;
    for (int32_t i = 0; i < n && k + 40 < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "",
                              preset ? synth_presets[i].name : synth_ftypes[i].name);
    return rf_set_error(RF_ERR_NOT_FOUND, "mkmodel: unknown %s '%s' (known: %s)", what,
                        name ? name : "(none)", list);
}

static rf_status make_plan(const rf_mkmodel_opts *o, plan *pl) {
    memset(pl, 0, sizeof *pl);
    if (!o) return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: NULL options");
    pl->p = synth_preset_find(o->preset);
    if (!pl->p) return unknown_name_error("preset", o->preset, true);
    const char *type = o->type ? o->type : "f16";
    pl->ft = synth_ftype_find(type);
    if (!pl->ft) return unknown_name_error("type", type, false);
    if (o->n_layers < 0 || o->n_layers > 1024)
        return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: layer count %" PRId32 " outside 1..1024",
                            o->n_layers);
    pl->n_layer = o->n_layers ? o->n_layers : pl->p->n_layer;
    if (o->n_vocab) {
        if (o->n_vocab > (uint32_t)INT32_MAX)
            return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: vocabulary size %" PRIu32 " is too large", o->n_vocab);
        pl->own = *pl->p;
        pl->own.vocab.n_vocab = o->n_vocab;
        pl->p = &pl->own;
    }
    const synth_arch_info *ai = synth_arch_get(pl->p->arch);
    if (!ai->tensors(&pl->l, pl->p, pl->n_layer, pl->p->vocab.n_vocab)) {
        plan_free(pl);
        return rf_set_error(RF_ERR_OOM, "mkmodel: out of memory (tensor list)");
    }
    synth_list_sort(&pl->l);
    synth_qstate qs;
    synth_qstate_init(&qs, pl->ft, o->pure, ai->is_70b(pl->p, pl->n_layer),
                      pl->p->n_head / pl->p->n_head_kv, pl->n_layer, &pl->l);
    for (int64_t i = 0; i < pl->l.n; i++) {
        rf_status st = synth_tensor_type(&qs, &pl->l.t[i], &pl->l.t[i].type);
        if (st) {
            plan_free(pl);
            return st;
        }
        const rf_type_traits *tr = rf_type_info((int)pl->l.t[i].type);
        if (!tr || !tr->from_f32) {
            rf_type bad = pl->l.t[i].type;
            char name[64];
            snprintf(name, sizeof name, "%s", pl->l.t[i].name);
            plan_free(pl);
            return rf_set_error(RF_ERR_UNSUPPORTED,
                                "mkmodel: tensor '%s' needs type %s, which ROCmForge cannot "
                                "quantize", name, rf_type_name((int)bad));
        }
    }
    pl->n_fallback = qs.n_fallback;
    return RF_OK;
}

static uint64_t tensor_bytes(const synth_tensor *t) {
    size_t row = 0;
    if (rf_row_size(t->type, t->ne[0], &row)) return 0;
    return (uint64_t)row * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

rf_status rf_mkmodel_plan(const rf_mkmodel_opts *o, rf_mkmodel_tensor **out, int64_t *n_out) {
    if (!out || !n_out) return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: NULL output");
    *out = NULL;
    *n_out = 0;
    plan pl;
    rf_status st = make_plan(o, &pl);
    if (st) return st;
    rf_mkmodel_tensor *r = calloc((size_t)pl.l.n, sizeof *r);
    if (!r) {
        plan_free(&pl);
        return rf_set_error(RF_ERR_OOM, "mkmodel: out of memory");
    }
    for (int64_t i = 0; i < pl.l.n; i++) {
        const synth_tensor *t = &pl.l.t[i];
        snprintf(r[i].name, sizeof r[i].name, "%s", t->name);
        r[i].type = t->type;
        r[i].n_dims = t->n_dims;
        memcpy(r[i].ne, t->ne, sizeof r[i].ne);
        r[i].n_bytes = tensor_bytes(t);
    }
    *out = r;
    *n_out = pl.l.n;
    plan_free(&pl);
    return RF_OK;
}

/* ---- tensor data -------------------------------------------------------------------------- */

/* Every row has its own random stream (seed, tensor name, row), so rows can be made in any order
 * and on any thread with byte-identical results. */
typedef struct filler {
    const plan *pl;
    uint64_t seed;
    int32_t n_threads;
    float **rowf;        /* per thread: one row of f32 values */
    uint8_t *chunk;      /* converted rows covering the current fill request */
    size_t chunk_cap;
    float *rope;         /* rope_freqs values */
    const rf_mkmodel_opts *o;
} filler;

typedef struct row_job {
    const filler *f;
    const synth_tensor *t;
    uint64_t name_hash;
    size_t row_bytes;
    int64_t r_begin, r_end; /* rows to make */
    int64_t r_base;         /* row stored at chunk offset 0 */
    float *rowf;
    rf_status st;
    pthread_t tid;
} row_job;

static void *make_rows(void *arg) {
    row_job *j = arg;
    const synth_tensor *t = j->t;
    const int64_t n = t->ne[0];
    for (int64_t row = j->r_begin; row < j->r_end; row++) {
        switch (t->gen) {
        case SYNTH_GEN_RANDOM: {
            synth_rng r = synth_rng_for_row(j->f->seed, j->name_hash, (uint64_t)row);
            synth_rng_fill_uniform(&r, j->rowf, n, t->std * 1.7320508f /* sqrt(3): uniform std */);
            break;
        }
        case SYNTH_GEN_ONES:
            for (int64_t i = 0; i < n; i++) j->rowf[i] = 1.0f;
            break;
        case SYNTH_GEN_CONST:
            for (int64_t i = 0; i < n; i++) j->rowf[i] = t->std;
            break;
        case SYNTH_GEN_ROPE_FREQS:
            memcpy(j->rowf, j->f->rope, (size_t)n * sizeof(float));
            break;
        case SYNTH_GEN_NEAR_ONE: {
            synth_rng r = synth_rng_for_row(j->f->seed, j->name_hash, (uint64_t)row);
            synth_rng_fill_uniform(&r, j->rowf, n, t->std * 1.7320508f);
            for (int64_t i = 0; i < n; i++) j->rowf[i] += 1.0f;
            break;
        }
        case SYNTH_GEN_LONGROPE_SHORT:
        case SYNTH_GEN_LONGROPE_LONG:
            synth_longrope_factors(j->f->pl->p, t->gen == SYNTH_GEN_LONGROPE_LONG, j->rowf);
            break;
        case SYNTH_GEN_PROP_ROPE:
            for (int64_t i = 0; i < n; i++) j->rowf[i] = i < (int64_t)t->std ? 1.0f : 1e30f;
            break;
        }
        uint8_t *dst = j->f->chunk + (size_t)(row - j->r_base) * j->row_bytes;
        if (t->type == RF_TYPE_F32) {
            memcpy(dst, j->rowf, (size_t)n * sizeof(float));
        } else if ((j->st = rf_quantize_row(t->type, j->rowf, dst, n))) {
            break;
        }
    }
    return NULL;
}

/* rf_gguf_fill_fn: bytes [offset, offset+size) of tensor `index`: the rows covering the range
 * are generated and converted (split over threads), then the requested slice is copied. */
static rf_status fill_tensor(void *user, int64_t index, uint64_t offset, void *dst, uint64_t size) {
    filler *f = user;
    const synth_tensor *t = &f->pl->l.t[index];
    if (offset == 0 && f->o->progress) f->o->progress(f->o->progress_user, index, f->pl->l.n, t->name);
    if (size == 0) return RF_OK;
    size_t rb = 0;
    rf_status st = rf_row_size(t->type, t->ne[0], &rb);
    if (st) return st;
    const int64_t r0 = (int64_t)(offset / rb), r1 = (int64_t)((offset + size - 1) / rb) + 1;
    const size_t need = (size_t)(r1 - r0) * rb;
    if (need > f->chunk_cap) {
        uint8_t *c = realloc(f->chunk, need);
        if (!c) return rf_set_error(RF_ERR_OOM, "mkmodel: out of memory (%zu-byte chunk)", need);
        f->chunk = c;
        f->chunk_cap = need;
    }
    row_job jobs[RF_MKMODEL_MAX_THREADS];
    int64_t nrows = r1 - r0;
    int nt = (int)(nrows < f->n_threads ? nrows : f->n_threads);
    const uint64_t h = synth_hash_str(t->name);
    for (int k = 0; k < nt; k++) {
        jobs[k] = (row_job){.f = f, .t = t, .name_hash = h, .row_bytes = rb, .r_base = r0,
                            .r_begin = r0 + nrows * k / nt, .r_end = r0 + nrows * (k + 1) / nt,
                            .rowf = f->rowf[k], .st = RF_OK};
    }
    int started = 1;
    for (int k = 1; k < nt; k++, started++)
        if (pthread_create(&jobs[k].tid, NULL, make_rows, &jobs[k])) break;
    for (int k = started; k < nt; k++) make_rows(&jobs[k]); /* threads unavailable: do it here */
    make_rows(&jobs[0]);
    for (int k = 1; k < started; k++) pthread_join(jobs[k].tid, NULL);
    for (int k = 0; k < nt; k++)
        if (jobs[k].st)
            return rf_set_error(jobs[k].st, "mkmodel: tensor '%s': cannot convert a row to %s",
                                t->name, rf_type_name((int)t->type));
    memcpy(dst, f->chunk + (offset - (uint64_t)r0 * rb), (size_t)size);
    return RF_OK;
}

/* ---- metadata ----------------------------------------------------------------------------- */

static rf_status write_tokenizer(rf_gguf_writer *w, const synth_vocab *v) {
    rf_status st;
    if ((st = rf_gguf_set_str(w, "tokenizer.ggml.model", v->model))) return st;
    if (v->pre && (st = rf_gguf_set_str(w, "tokenizer.ggml.pre", v->pre))) return st;
    if ((st = rf_gguf_set_arr_str(w, "tokenizer.ggml.tokens", v->tokens, v->n_tokens))) return st;
    if (v->scores &&
        (st = rf_gguf_set_arr(w, "tokenizer.ggml.scores", RF_GGUF_FLOAT32, v->scores, v->n_tokens)))
        return st;
    if ((st = rf_gguf_set_arr(w, "tokenizer.ggml.token_type", RF_GGUF_INT32, v->types, v->n_tokens)))
        return st;
    if (!v->is_spm &&
        (st = rf_gguf_set_arr_str(w, "tokenizer.ggml.merges", v->merges, v->n_merges)))
        return st;
    struct {
        const char *key;
        int32_t id;
    } ids[] = {{"tokenizer.ggml.bos_token_id", v->bos},
               {"tokenizer.ggml.eos_token_id", v->eos},
               {"tokenizer.ggml.unknown_token_id", v->unk},
               {"tokenizer.ggml.padding_token_id", v->pad}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].id >= 0 && (st = rf_gguf_set_u32(w, ids[i].key, (uint32_t)ids[i].id))) return st;
    if ((st = rf_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos))) return st;
    if ((st = rf_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos))) return st;
    return rf_gguf_set_str(w, "tokenizer.chat_template", v->chat_template);
}

static rf_status write_metadata(rf_gguf_writer *w, const plan *pl, const rf_mkmodel_opts *o,
                                const synth_vocab *v) {
    const synth_preset *p = pl->p;
    const synth_arch_info *ai = synth_arch_get(p->arch);
    rf_status st;
    char desc[256], vocab[32] = "";
    if (o->n_vocab) snprintf(vocab, sizeof vocab, " --vocab %" PRIu32, o->n_vocab);
    snprintf(desc, sizeof desc,
             "synthetic random weights: rocmforge mkmodel --preset %s --type %s --seed %" PRIu64
             " --layers %" PRId32 "%s%s",
             p->name, pl->ft->name, o->seed, pl->n_layer, o->pure ? " --pure" : "", vocab);
    if ((st = rf_gguf_set_str(w, "general.architecture", ai->name))) return st;
    if ((st = rf_gguf_set_str(w, "general.type", "model"))) return st;
    if ((st = rf_gguf_set_str(w, "general.name", p->model_name))) return st;
    if ((st = rf_gguf_set_str(w, "general.description", desc))) return st;
    if ((st = rf_gguf_set_str(w, "general.size_label", p->size_label))) return st;
    if ((st = ai->write_kv(w, p, pl->n_layer))) return st;
    if ((st = rf_gguf_set_u32(w, "general.file_type", (uint32_t)pl->ft->llama_ftype))) return st;
    if ((st = rf_gguf_set_u32(w, "general.quantization_version", 2))) return st;
    return write_tokenizer(w, v);
}

static int32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > RF_MKMODEL_MAX_THREADS ? RF_MKMODEL_MAX_THREADS : (int32_t)n;
}

rf_status rf_mkmodel_write(const rf_mkmodel_opts *o, const char *path) {
    if (!path) return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: NULL path");
    plan pl;
    rf_status st = make_plan(o, &pl);
    if (st) return st;
    if (o->n_threads < 0) {
        plan_free(&pl);
        return rf_set_error(RF_ERR_INVALID_ARG, "mkmodel: thread count %" PRId32 " < 0", o->n_threads);
    }
    synth_vocab v;
    rf_gguf_writer *w = NULL;
    filler f = {.pl = &pl, .seed = o->seed, .o = o};
    f.n_threads = o->n_threads ? o->n_threads : online_cpus();
    if (f.n_threads > RF_MKMODEL_MAX_THREADS) f.n_threads = RF_MKMODEL_MAX_THREADS;
    if ((st = synth_vocab_build(&pl.p->vocab, pl.p->pre, &v))) {
        plan_free(&pl);
        return st;
    }
    int64_t max_row = 1;
    for (int64_t i = 0; i < pl.l.n; i++)
        if (pl.l.t[i].ne[0] > max_row) max_row = pl.l.t[i].ne[0];
    f.rowf = calloc((size_t)f.n_threads, sizeof *f.rowf);
    f.rope = malloc(((size_t)pl.p->head_dim / 2 + 1) * sizeof(float));
    w = rf_gguf_writer_new();
    if (!f.rowf || !f.rope || !w) {
        st = rf_set_error(RF_ERR_OOM, "mkmodel: out of memory");
        goto done;
    }
    for (int32_t k = 0; k < f.n_threads; k++) {
        if (!(f.rowf[k] = malloc((size_t)max_row * sizeof(float)))) {
            st = rf_set_error(RF_ERR_OOM, "mkmodel: out of memory");
            goto done;
        }
    }
    if (pl.p->rope_factor > 0) synth_llama3_rope_factors(pl.p, f.rope);
    if ((st = write_metadata(w, &pl, o, &v))) goto done;
    for (int64_t i = 0; i < pl.l.n; i++) {
        const synth_tensor *t = &pl.l.t[i];
        if ((st = rf_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL, fill_tensor, &f)))
            goto done;
    }
    st = rf_gguf_write_file(w, path);
done:
    rf_gguf_writer_free(w);
    if (f.rowf)
        for (int32_t k = 0; k < f.n_threads; k++) free(f.rowf[k]);
    free(f.rowf);
    free(f.chunk);
    free(f.rope);
    synth_vocab_free(&v);
    plan_free(&pl);
    return st;
}
