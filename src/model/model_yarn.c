/* model_yarn.c — YaRN RoPE scaling (rope.scaling.type = yarn: gpt-oss) expressed as what the
 * rope op already takes: per-dimension frequency factors and a gain on the rotated dimensions.
 * Facts follow ggml's rope (ggml_rope_yarn_corr_dims, rope_yarn, rope_yarn_ramp) and llama.cpp's
 * context set-up of yarn_attn_factor; the arithmetic here is our own. */
#include <math.h>

#include "model/model.h"

/* The dimension pair index at which a wavelength makes `n_rot_turns` turns over the original
 * context: n_dims * ln(n_ctx_orig / (turns * 2 pi)) / (2 ln base), in f32 as ggml evaluates it
 * (its floor/ceil decide the ramp's integer ends, so the precision matters at the edges). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float turns, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (turns * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

void rf_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]) {
    const float lo = floorf(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
    const float hi = ceilf(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
    dims[0] = lo > 0 ? lo : 0;
    dims[1] = hi < (float)(n_dims - 1) ? hi : (float)(n_dims - 1);
}

/* YaRN rotates pair i by theta_i = p b^(-2i/n) (s (1 - r_i) + r_i) with s = freq_scale and the
 * ramp r_i = ext_factor * (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)): a mix of the
 * interpolated (s) and the extrapolated (1) angle that does not depend on the position. So the
 * rope op's theta = p * 1 * b^(-2i/n) / ff_i computes it with ff_i = 1 / (s (1 - r_i) + r_i)
 * and freq_scale 1 (equal in exact arithmetic; ff_i rounds to f32, a relative 2^-24 on theta). */
void rf_yarn_freq_factors(int n_rot, int n_ctx_orig, float freq_base, float freq_scale, float ext_factor,
                          float beta_fast, float beta_slow, float *ff) {
    float dims[2];
    rf_yarn_corr_dims(n_rot, n_ctx_orig, freq_base, beta_fast, beta_slow, dims);
    const float span = dims[1] - dims[0] > 0.001f ? dims[1] - dims[0] : 0.001f;
    for (int i = 0; i < n_rot / 2; i++) {
        /* ggml indexes the ramp by i0 / 2 with i0 = 2i the even element: i itself */
        float y = ((float)i - dims[0]) / span;
        y = y < 0 ? 0 : y > 1 ? 1 : y;
        const double mix = (double)((1 - y) * ext_factor);
        ff[i] = (float)(1.0 / ((double)freq_scale * (1.0 - mix) + mix));
    }
}

/* The gain ggml applies to cos and sin: llama.cpp sets yarn_attn_factor = get_mscale(1/s) *
 * (1 / (1 + 0.1 ln(1/s))) * rope.scaling.attn_factor (the second factor cancels ggml's own
 * magnitude correction for files without yarn_log_multiplier), and ggml's rope multiplies it by
 * 1 + 0.1 ln(1/s) when ext_factor != 0. Evaluated in f32 in that order. */
float rf_yarn_attn_factor(float freq_scale, float ext_factor, float attn_factor) {
    float af = 1.0f;
    if (ext_factor != 0.0f) {
        const float factor = 1.0f / freq_scale;
        af = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
        af *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    af *= attn_factor;
    if (ext_factor != 0.0f) af *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    return af;
}
