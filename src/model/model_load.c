/* model_load.c — rf_model_load: architecture dispatch, hyper-parameters from GGUF metadata
 * (validated, errors name the key), the backend, the vocabulary; the weights are bound in
 * model_weights.c. Facts about key/tensor names follow the GGUF
 * conventions that llama.cpp writes (see docs/engine.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/knobs.h"
#include "model/model.h"
#include "model/model_meta.h"
#include "rocmforge/quant.h"

rf_model_params rf_model_default_params(void) {
    rf_model_params p = {RF_DEVICE_CPU, 0, NULL, NULL, 0, 0};
    return p;
}

/* ---- hyper-parameters ------------------------------------------------------------------- */

/* rope.scaling.type = yarn: the original context must be given (the ramp is measured against
 * it); ext_factor and beta_fast/slow as llama.cpp defaults them (1, 32, 1) unless the file gives
 * them; yarn_log_multiplier (DeepSeek's attention gain rule) is not built. */
static rf_status yarn_hparams(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    char k[160];
    if (rf_gguf_find_key(m->g, rf_meta_key(m, "rope.scaling.original_context_length", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: YaRN RoPE scaling needs key '%s'", k);
    hp->yarn = true;
    hp->yarn_ext_factor = 1.0f, hp->yarn_beta_fast = 32.0f, hp->yarn_beta_slow = 1.0f;
    float log_mul = 0;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.yarn_ext_factor", &hp->yarn_ext_factor))) return st;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast))) return st;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow))) return st;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.yarn_log_multiplier", &log_mul))) return st;
    if (log_mul != 0)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: %s.rope.scaling.yarn_log_multiplier = %g is not supported",
                            hp->arch_name, log_mul);
    if (!(hp->yarn_ext_factor >= 0 && hp->yarn_ext_factor <= 1) || !(hp->yarn_beta_fast > 0) || !(hp->yarn_beta_slow > 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.scaling.yarn_* out of range (ext_factor %g, beta_fast %g, beta_slow %g)",
                            hp->arch_name, hp->yarn_ext_factor, hp->yarn_beta_fast, hp->yarn_beta_slow);
    return RF_OK;
}

/* The mixture-of-experts keys (RF_AF_MOE): expert_count (1..RF_MAX_EXPERTS), expert_used_count
 * (the top-k, 1..expert_count), expert_feed_forward_length (default feed_forward_length / k, as
 * llama.cpp), expert_shared_feed_forward_length, expert_weights_norm, expert_weights_scale
 * (0 or absent: 1). The gating is the architecture's (its hook may change it and the rest). */
static rf_status load_moe_hparams(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    char k[160];
    hp->n_expert = 0;
    if (rf_gguf_find_key(m->g, rf_meta_key(m, "expert_count", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s' (a mixture-of-experts model)", k);
    if (rf_gguf_find_key(m->g, rf_meta_key(m, "expert_used_count", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s' (a mixture-of-experts model)", k);
    if ((st = rf_meta_opt_i32(m, "expert_count", &hp->n_expert))) return st;
    if (hp->n_expert <= 0 || hp->n_expert > RF_MAX_EXPERTS)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_count = %d: a mixture-of-experts model needs 1 to %d experts",
                            hp->arch_name, hp->n_expert, RF_MAX_EXPERTS);
    hp->n_expert_used = 0;
    if ((st = rf_meta_opt_i32(m, "expert_used_count", &hp->n_expert_used))) return st;
    rf_meta_key(m, "expert_used_count", k, sizeof k);
    if (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s = %d is not a top-k of %s.expert_count = %d (1 <= k <= experts)", k,
                            hp->n_expert_used, hp->arch_name, hp->n_expert);
    hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if ((st = rf_meta_opt_i32(m, "expert_feed_forward_length", &hp->n_ff_exp))) return st;
    if (hp->n_ff_exp <= 0)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_feed_forward_length = %d is out of range",
                            hp->arch_name, hp->n_ff_exp);
    hp->n_ff_shexp = 0;
    if ((st = rf_meta_opt_i32(m, "expert_shared_feed_forward_length", &hp->n_ff_shexp))) return st;
    if (hp->n_ff_shexp < 0)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_shared_feed_forward_length = %d is out of range",
                            hp->arch_name, hp->n_ff_shexp);
    hp->moe_gating = RF_MOE_SOFTMAX;
    hp->moe_norm_w = true;
    if (rf_gguf_find_key(m->g, rf_meta_key(m, "expert_weights_norm", k, sizeof k)) >= 0 &&
        (st = rf_gguf_get_bool(m->g, k, &hp->moe_norm_w)))
        return rf_set_error(st, "model metadata: %s: %s", k, rf_last_error());
    hp->moe_w_scale = 0;
    if ((st = rf_meta_opt_f32(m, "expert_weights_scale", &hp->moe_w_scale))) return st;
    if (hp->moe_w_scale == 0) hp->moe_w_scale = 1.0f;
    if (!(hp->moe_w_scale > 0 && hp->moe_w_scale < 1e4f))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.expert_weights_scale = %g is out of range", hp->arch_name,
                            hp->moe_w_scale);
    return RF_OK;
}

static rf_status load_hparams(rf_model *m) {
    rf_hparams *hp = &m->hp;
    rf_status st;
    if ((st = rf_meta_req_i32(m, "embedding_length", &hp->n_embd))) return st;
    if ((st = rf_meta_req_i32(m, "block_count", &hp->n_layer))) return st;
    if ((st = rf_meta_opt_i32(m, "feed_forward_length", &hp->n_ff))) return st;
    /* a mixture of experts may go without it (qwen35moe: the experts' and the shared expert's
     * widths have their own keys, checked in load_moe_hparams) */
    if (hp->n_ff < 0 || (hp->n_ff == 0 && !(hp->arch->flags & RF_AF_MOE)))
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s.feed_forward_length'", hp->arch_name);
    if ((st = rf_meta_req_i32(m, "attention.head_count", &hp->n_head))) return st;
    hp->n_head_kv = hp->n_head;
    /* (gemma4 gives one per layer, read by its hook) */
    if (!(hp->arch->flags & RF_AF_GEMMA4) && (st = rf_meta_opt_i32(m, "attention.head_count_kv", &hp->n_head_kv))) return st;
    hp->n_ctx_train = 2048;
    if ((st = rf_meta_opt_i32(m, "context_length", &hp->n_ctx_train))) return st;
    if (hp->n_layer > RF_MAX_LAYERS)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.block_count = %d exceeds %d", hp->arch_name, hp->n_layer, RF_MAX_LAYERS);
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.attention.head_count (%d) is not a multiple of head_count_kv (%d)",
                            hp->arch_name, hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd % hp->n_head ? 0 : hp->n_embd / hp->n_head;
    if ((st = rf_meta_opt_i32(m, "attention.key_length", &hp->head_dim))) return st;
    int32_t vlen = hp->head_dim;
    if ((st = rf_meta_opt_i32(m, "attention.value_length", &vlen))) return st;
    if (hp->head_dim <= 0 || hp->head_dim > RF_MAX_HEAD_DIM || hp->head_dim % 2)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: head size %d (%s.attention.key_length or embedding_length/head_count) is invalid",
                            hp->head_dim, hp->arch_name);
    if (vlen != hp->head_dim)
        return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: %s.attention.value_length %d != key_length %d", hp->arch_name, vlen, hp->head_dim);
    hp->n_rot = hp->head_dim;
    if ((st = rf_meta_opt_i32(m, "rope.dimension_count", &hp->n_rot))) return st;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s.rope.dimension_count = %d is invalid for head size %d",
                            hp->arch_name, hp->n_rot, hp->head_dim);
    hp->norm_eps = 1e-5f;
    char k[160];
    if (rf_gguf_find_key(m->g, rf_meta_key(m, "attention.layer_norm_rms_epsilon", k, sizeof k)) < 0)
        return rf_set_error(RF_ERR_NOT_FOUND, "model metadata: missing required key '%s'", k);
    if ((st = rf_meta_opt_f32(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps))) return st;
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s = %g is out of range", k, hp->norm_eps);

    hp->rope_base = 10000.0f;
    if ((st = rf_meta_opt_f32(m, "rope.freq_base", &hp->rope_base))) return st;
    float factor = 0;
    if ((st = rf_meta_opt_f32(m, "rope.scaling.factor", &factor))) return st;
    if (factor == 0 && (st = rf_meta_opt_f32(m, "rope.scale_linear", &factor))) return st;
    const char *stype = NULL;
    if (rf_gguf_get_str(m->g, rf_meta_key(m, "rope.scaling.type", k, sizeof k), &stype) == RF_OK &&
        strcmp(stype, "none") && strcmp(stype, "linear") && strcmp(stype, "yarn"))
        return rf_set_error(RF_ERR_UNSUPPORTED, "model metadata: %s = '%s' is not supported (none, linear, yarn)", k, stype);
    if (stype && !strcmp(stype, "yarn") && (st = yarn_hparams(m))) return st;
    if (stype && !strcmp(stype, "none")) factor = 0;
    hp->rope_scale = factor == 0 ? 1.0f : 1.0f / factor;
    if (!(hp->rope_base > 0) || !(hp->rope_scale > 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.freq_base / scaling factor out of range", hp->arch_name);
    hp->rope_base_swa = 10000.0f;
    hp->rope_scale_swa = 1.0f;
    hp->attn_scale = 0;
    if ((st = rf_meta_opt_f32(m, "attention.scale", &hp->attn_scale))) return st;
    if (!(hp->attn_scale >= 0))
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.attention.scale = %g is out of range", hp->arch_name, hp->attn_scale);
    if (hp->attn_scale == 0) hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->n_ctx_orig = hp->n_ctx_train;
    if ((st = rf_meta_opt_i32(m, "rope.scaling.original_context_length", &hp->n_ctx_orig))) return st;
    if (hp->yarn && hp->n_ctx_orig <= 0)
        return rf_set_error(RF_ERR_RANGE, "model metadata: %s.rope.scaling.original_context_length = %d is out of range",
                            hp->arch_name, hp->n_ctx_orig);

    /* the architecture's table entry: its variants, then its own keys */
    const rf_arch_desc *a = hp->arch;
    hp->rope_mode = a->rope_mode;
    hp->glu = a->glu;
    hp->embed_scale = (a->flags & RF_AF_EMBED_SCALE) ? sqrtf((float)hp->n_embd) : 1.0f;
    if ((a->flags & RF_AF_FULL_ROT) && hp->n_rot != hp->head_dim)
        return rf_set_error(RF_ERR_FORMAT, "model metadata: %s needs rope.dimension_count (%d) == head size (%d)",
                            hp->arch_name, hp->n_rot, hp->head_dim);
    if ((a->flags & RF_AF_MOE) && (st = load_moe_hparams(m))) return st;
    if (a->hparams && (st = a->hparams(m))) return st;
    return RF_OK;
}

/* The most common weight type by bytes, for rf_model_info.ftype. */
static const char *main_type(const rf_gguf *g) {
    uint64_t bytes[RF_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(g, i);
        if ((int)t->type >= 0 && t->type < RF_TYPE_COUNT && t->n_dims >= 2) bytes[t->type] += t->n_bytes;
    }
    int best = 0;
    for (int i = 1; i < RF_TYPE_COUNT; i++)
        if (bytes[i] > bytes[best]) best = i;
    return rf_type_name(best);
}

/* Touches every page of the weights so a large model loads up front with a progress bar. */
static void prefault(rf_model *m, const rf_model_params *p) {
    int64_t nt = rf_gguf_n_tensors(m->g);
    uint64_t total = 0, done = 0;
    for (int64_t i = 0; i < nt; i++) total += rf_gguf_tensor_at(m->g, i)->n_bytes;
    volatile unsigned char sink = 0;
    float last = -1;
    for (int64_t i = 0; i < nt; i++) {
        const rf_gguf_tensor *t = rf_gguf_tensor_at(m->g, i);
        const unsigned char *d = t->data;
        if (d)
            for (uint64_t off = 0; off < t->n_bytes; off += 4096) sink ^= d[off];
        done += t->n_bytes;
        float f = total ? (float)done / (float)total : 1.0f;
        if (p->progress && (f - last >= 0.01f || i == nt - 1)) {
            p->progress(f, p->progress_user);
            last = f;
        }
    }
    (void)sink;
}

/* Bytes of every tensor in the file: what a device backend will hold. */
static uint64_t file_weight_bytes(const rf_gguf *g) {
    uint64_t total = 0;
    for (int64_t i = 0; i < rf_gguf_n_tensors(g); i++) total += rf_gguf_tensor_at(g, i)->n_bytes;
    return total;
}

/* Whether the GPU attention has kernels for the model's heads: 64, 80, 96, 128, 256
 * (gpu_paged_attention.cu), or a multiple of 64 up to 512 (gpu_attention_wide.cu; Gemma 4's
 * full-attention layers). gemma4: both its head sizes (head_dim is the larger). */
static bool gpu_head_ok(int hd) {
    return hd == 64 || hd == 80 || hd == 96 || hd == 128 || hd == 256 || (hd > 256 && hd <= 512 && hd % 64 == 0);
}
static bool gpu_heads_ok(const rf_hparams *hp) {
    return gpu_head_ok(hp->head_dim) && (hp->head_dim_swa <= 0 || gpu_head_ok(hp->head_dim_swa));
}

/* Picks and opens the backend. gpu: the GPU or an error naming what is missing (no GPU, or
 * the weights' size against the device's free memory, checked before any upload). auto: the
 * GPU when one is present and the weights fit with room for a KV cache, else the CPU with a
 * one-line note saying why. */
static rf_status open_backend(rf_model *m, const rf_model_params *p) {
    uint64_t need = file_weight_bytes(m->g);
    if (!rf_gpu_built()) {
        if (p->device == RF_DEVICE_GPU)
            return rf_set_error(RF_ERR_UNSUPPORTED, "--device gpu: this build has no GPU backend (configure with -DRF_CUDA=ON)");
        if (p->device == RF_DEVICE_AUTO) RF_LOGI("running on the CPU: this build has no GPU backend");
    } else if (p->device != RF_DEVICE_CPU) {
        const char *why = NULL;
        char buf[256];
        rf_status st = RF_OK;
        int hd = m->hp.head_dim_swa > 0 && !gpu_head_ok(m->hp.head_dim_swa) ? m->hp.head_dim_swa : m->hp.head_dim;
        if (!gpu_heads_ok(&m->hp)) {
            snprintf(buf, sizeof buf,
                     "the GPU attention has no kernel for head size %d (64, 80, 96, 128, 256, multiples of 64 up to 512)",
                     hd);
            why = buf;
            st = rf_set_error(RF_ERR_UNSUPPORTED, "--device gpu: %s; use --device cpu", buf);
        } else if (rf_gpu_device_count() <= 0) {
            why = "no GPU found";
            st = rf_set_error(RF_ERR_DEVICE, "--device gpu: no GPU found (check the driver: nvidia-smi / rocminfo)");
        } else if ((st = rf_backend_gpu_new(p->device_index, &m->be))) {
            snprintf(buf, sizeof buf, "the GPU could not be opened (%s)", rf_last_error());
            why = buf;
        } else {
            rf_backend_info bi = {0};
            m->be->ops->info(m->be, true, &bi);
            size_t fr = bi.mem_free, tot = bi.mem_total;
            uint64_t reserve = need / 20 > (256u << 20) ? need / 20 : (256u << 20); /* KV + activations */
            if (need + reserve > fr) {
                snprintf(buf, sizeof buf, "the model needs %.1f MiB of weights (+%.0f MiB for a KV cache) but the GPU has %.1f MiB free",
                         need / 1048576.0, reserve / 1048576.0, fr / 1048576.0);
                why = buf;
                st = rf_set_error(RF_ERR_OOM, "%s (of %.1f MiB)", buf, tot / 1048576.0);
                m->be->ops->destroy(m->be);
                m->be = NULL;
            }
        }
        if (!why) {
            rf_backend_info bi = {0};
            m->be->ops->info(m->be, false, &bi);
            RF_LOGI("model: %.1f MiB of weights on %s", need / 1048576.0, bi.name);
            m->load_total = need;
            m->progress = p->progress;
            m->progress_user = p->progress_user;
            return RF_OK;
        }
        if (p->device == RF_DEVICE_GPU) return st;
        rf_log(rf_gpu_device_count() > 0 ? RF_LOG_WARN : RF_LOG_INFO, "running on the CPU: %s", why);
    }
    return rf_backend_cpu_new(p->n_threads, &m->be);
}

/* --tp N > 1: the split over N GPUs (model_tp_gpu.c) for --device gpu, or auto where N GPUs are
 * present; the CPU for --device cpu and auto without them; one GPU backend for every shard in
 * the tp_one_device test hook's mode (open_backend then). */
static rf_status open_tp(rf_model *m, rf_model_params *p) {
    if (p->tp > 1 && p->device == RF_DEVICE_CPU && rf_tp_cpu_ranks()) return rf_tp_open_cpu(m, p->tp, p->n_threads);
    if (p->tp <= 1 || p->device == RF_DEVICE_CPU) return RF_OK;
    int have = rf_gpu_device_count();
    if (p->device == RF_DEVICE_GPU && rf_tp_one_device()) return RF_OK;
    if (p->device == RF_DEVICE_AUTO && have < p->device_index + p->tp) {
        RF_LOGI("--tp %d: running on the CPU (%d GPUs present, the split over GPUs needs %d)", p->tp, have, p->tp);
        p->device = RF_DEVICE_CPU;
        return RF_OK;
    }
    int hd = m->hp.head_dim;
    if (!gpu_heads_ok(&m->hp))
        return rf_set_error(RF_ERR_UNSUPPORTED, "--tp %d on GPUs: the GPU attention has no kernel for head size %d", p->tp,
                            hd);
    rf_status st = rf_tp_open(m, p->tp, p->device_index);
    if (st) return st;
    RF_LOGI("model: split over %d GPUs (%d..%d), NCCL all-reduces", p->tp, p->device_index, p->device_index + p->tp - 1);
    return RF_OK;
}

rf_status rf_model_load(const char *path, const rf_model_params *params, rf_model **out) {
    *out = NULL;
    rf_model_params p = params ? *params : rf_model_default_params();
    if (!path) return rf_set_error(RF_ERR_INVALID_ARG, "model path is NULL");
    if (p.device != RF_DEVICE_CPU && p.device != RF_DEVICE_GPU && p.device != RF_DEVICE_AUTO)
        return rf_set_error(RF_ERR_INVALID_ARG, "device %d is not one of cpu, gpu, auto", (int)p.device);
    if (p.n_threads < 0) return rf_set_error(RF_ERR_INVALID_ARG, "thread count %d must be >= 1", p.n_threads);
    rf_model *m = calloc(1, sizeof *m);
    if (!m) return rf_set_error(RF_ERR_OOM, "model: out of memory");
    m->path = strdup(path);
    rf_status st = rf_gguf_open(path, &m->g);
    if (st) goto fail;
    const char *arch = NULL;
    st = rf_gguf_get_str(m->g, "general.architecture", &arch);
    if (st) {
        st = rf_set_error(st, "%s: missing or bad 'general.architecture' (%s)", path, rf_last_error());
        goto fail;
    }
    m->hp.arch = rf_arch_find(arch);
    if (!m->hp.arch) {
        st = rf_set_error(RF_ERR_UNSUPPORTED, "unsupported architecture '%s' (supported: %s)", arch,
                          rf_supported_archs());
        goto fail;
    }
    snprintf(m->hp.arch_name, sizeof m->hp.arch_name, "%s", arch);
    const char *name = "";
    rf_gguf_get_str(m->g, "general.name", &name);
    snprintf(m->name, sizeof m->name, "%s", name ? name : "");
    rf_clear_error();
    if ((st = load_hparams(m))) goto fail;
    /* RF_TP: the split for commands without a --tp option (bench, serve) */
    if ((st = rf_knobs_init())) goto fail; /* a knob that does not parse fails the load */
    if (p.tp == 0) p.tp = (int)rf_knob_int(RF_KNOB_TP);
    if (p.tp < 0 || p.tp > 64) {
        st = rf_set_error(RF_ERR_INVALID_ARG, "--tp %d: the shard count must be 1 to 64", p.tp);
        goto fail;
    }
    /* (a mixture of experts is split inside every expert: model_tp.c) */
    if ((st = open_tp(m, &p))) goto fail;
    if (!m->be && (st = open_backend(m, &p))) goto fail;
    if ((st = rf_model_load_weights(m))) goto fail;
    if (p.tp > 1 && rf_model_n_recurrent(m) > 0) {
        st = rf_set_error(RF_ERR_UNSUPPORTED, "--tp %d: %s's gated DeltaNet layers cannot be split yet", p.tp, m->hp.arch_name);
        goto fail;
    }
    if ((st = rf_model_shard(m, p.tp))) goto fail;
    if (m->tp > 1) RF_LOGI("model: layers split over %d shards (%d heads, %d KV heads each)", m->tp, m->tp_head, m->tp_head_kv);
    if (m->progress && m->load_last < 1.0f) m->progress(1.0f, m->progress_user);
    if ((st = rf_vocab_load(m->g, &m->vocab))) goto fail;
    if (rf_vocab_n_tokens(m->vocab) > m->hp.n_vocab) {
        st = rf_set_error(RF_ERR_FORMAT, "model: the vocabulary has %d tokens but token_embd.weight only %d rows",
                          rf_vocab_n_tokens(m->vocab), m->hp.n_vocab);
        goto fail;
    }
    /* Parse the chat template now so an unsupported one is reported at load, not on the first
     * chat request; a model without a usable template still loads for plain completion. */
    if (rf_chat_template_from_gguf(m->g, &m->chat) != RF_OK) {
        RF_LOGW("model: no usable chat template: %s", rf_last_error());
        m->chat = NULL;
    }
    m->ftype = main_type(m->g);
    if (!rf_backend_on_device(m->be)) prefault(m, &p);
    *out = m;
    return RF_OK;
fail:
    rf_model_free(m);
    return st;
}

void rf_model_free(rf_model *m) {
    if (!m) return;
    if (m->be) rf_model_use(m, 0), rf_model_free_weights(m);
    rf_model_unshard(m); /* views of the layers' weights, or uploaded slices */
    rf_tp_close(m);      /* GPUs 1.. of a split over several, and the communicator */
    free(m->layers);
    free(m->yarn_ff);
    if (m->vocab) rf_vocab_free(m->vocab);
    if (m->chat) rf_chat_template_free(m->chat);
    if (m->be) m->be->ops->destroy(m->be);
    if (m->g) rf_gguf_close(m->g);
    free(m->path);
    free(m);
}

rf_status rf_model_get_info(const rf_model *m, rf_model_info *o) {
    if (!m || !o) return rf_set_error(RF_ERR_INVALID_ARG, "rf_model_get_info: NULL argument");
    memset(o, 0, sizeof *o);
    const rf_hparams *hp = &m->hp;
    o->arch = hp->arch_name;
    o->name = m->name;
    o->n_layer = hp->n_layer;
    o->n_embd = hp->n_embd;
    o->n_head = hp->n_head;
    o->n_head_kv = hp->n_head_kv;
    o->head_dim = hp->head_dim;
    o->n_ff = hp->n_ff;
    o->n_vocab = hp->n_vocab;
    o->n_ctx_train = hp->n_ctx_train;
    o->n_swa = hp->n_swa;
    o->rope_freq_base = hp->rope_base;
    o->tied_embeddings = m->tied;
    o->n_params = m->n_params;
    o->weight_bytes = m->weight_bytes;
    o->ftype = m->ftype;
    rf_backend_info bi = {0};
    m->be->ops->info(m->be, false, &bi);
    o->device = bi.name;
    return RF_OK;
}

const rf_vocab *rf_model_vocab(const rf_model *m) { return m ? m->vocab : NULL; }
const rf_gguf *rf_model_gguf(const rf_model *m) { return m ? m->g : NULL; }

const rf_chat_template *rf_model_chat_template(const rf_model *m) { return m ? m->chat : NULL; }
