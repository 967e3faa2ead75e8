/* test_gpu_attention_wide.c — the wide-head paged attention (gpu_attention_wide.cu: head sizes past
 * 256, Gemma 4's 512-wide full layers) against rf_ref_paged_attention, and Gemma 4 with 512-wide
 * heads on the GPU against the CPU engine.
 *  - Kernel: head dims 320, 384, 512 through rf_gpu_paged_attention (which sends them there) and
 *    256 through rf_gpu_attention_wide itself, cross-checked against the <= 256 kernel; depths 1,
 *    17, 600, 4100 (one key tile up to 33 units over gridDim.z and reduced); GQA ratios 1, 2, 8;
 *    sliding window on / off, softcap, sinks; f16 and q8_0 caches (and f32 where the device takes
 *    it); decode batches and prompt chunks of 1, 37 and 512 tokens behind a prefix in the cache,
 *    mixed with decode tokens and padding, K/V blocks scattered over a shuffled pool whose rows
 *    nobody owns are NaN (a key read that a token must not see shows).
 *    Error model (tolerance rel. L2 < 1e-5): both sides read the same K/V values (f16-rounded, or
 *    q8_0's d * q, exact in f32) and the same query (f16 cache: rounded to f16 on both sides), so
 *    the difference is arithmetic only: the reference sums in double, the kernel in f32 in its own
 *    order (a score as D sequential fmas of (scale q_d) k_d, the weights e^(s - m) by tiles, P.V
 *    by keys, tiles and units folded). A score's f32 error is a random walk of D roundings of
 *    partial sums of r.m.s. ~ qs sqrt(i / D) (query r.m.s. qs, unit K, scale 1/sqrt(D)):
 *    r.m.s. ~ u qs sqrt(D / 6) (u = 2^-24), 2.2e-6 at D = 512, qs = 4 (the largest here); a
 *    weight moves by that relative amount and the output, a convex mix of the V rows, by about
 *    as much relative; the P.V and fold roundings add ~u sqrt(keys / tile) << that. 1e-5 is
 *    ~4.5x the largest predicted. D = 256: the wide kernel and the <= 256 kernel each within
 *    1e-5 of the reference, so within 2e-5 of each other (triangle).
 *    Batch invariance, bit for bit: every token alone (its own max_pos), a larger max_pos (other
 *    splits over gridDim.z, or none), the other shape hint (decode rows / prompt chunks).
 *  - Whole model (tiny-gemma4-wide: sliding layers of 256, full layers of 512, shared-KV layers):
 *    the prompts of 33 and 100 tokens take the flash prefill at 256 and 512 where the device has
 *    it (gpu_flash_prefill.cu), decode and shorter runs this file's kernels;
 *    last-position logits GPU vs CPU over prompts of 1, 7, 33, 100 tokens with f32 and f16 weights,
 *    f16 KV (tol 1e-2) and q8_0 KV (5e-2): test_gpu_forward.c's error model and argmax rule
 *    (near-tie bound), and greedy continuation of 32 tokens equal up to a step where the CPU's
 *    top-2 margin is below that near-tie bound.
 * Inputs are fresh each run (seed printed; RF_TEST_SEED=<n> replays). Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_attention_wide: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_model_common.h"

#include <stdbool.h>

#include "backend/ref/ref_ops.h"

#define FAR_BLOCK (1 << 22) /* table entry past a sequence's blocks: a read there faults */
#define TABLE_SPAN 300000   /* positions a block table can address */
#define TOL 1e-5

enum { KV_F32, KV_F16, KV_Q8 };

typedef struct aw_case {
    int64_t D, nh, nhkv, bs, window;
    float softcap;
    int kv;
    int n_seq;
    int32_t len[8]; /* positions 0..len-1 of each sequence are in the cache */
    int32_t nq[8];  /* the sequence's last nq positions are tokens of the batch */
    int n_pad;      /* padding tokens (pos < 0) mixed in */
    bool shuffle;   /* tokens in random order (else grouped by sequence) */
    float qscale;   /* query r.m.s. */
    bool sinks;
} aw_case;

static int32_t rnd_int(rf_rng *r, int32_t lo, int32_t hi) { return lo + (int32_t)(rf_rng_u64(r) % (uint64_t)(hi - lo + 1)); }

static void shuffle_i32(rf_rng *r, int32_t *a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rf_rng_u64(r) % (uint64_t)(i + 1));
        int32_t t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

static rf_type kv_type_of(const aw_case *c) {
    return c->kv == KV_Q8 ? RF_TYPE_Q8_0 : c->kv == KV_F16 ? RF_TYPE_F16 : RF_TYPE_F32;
}

/* which: 0 rf_gpu_paged_attention (head dims > 256 go to the wide kernel), 1 rf_gpu_attention_wide
 * with the decode hint as rf_gpu_paged_attention takes it, 2 the same with the other hint */
static rf_status call(const aw_case *c, int which, float *dout, const float *dq, const void *dk, const void *dv,
                      int64_t nt, const int32_t *dpos, const int32_t *dseq, const int32_t *dtab, int64_t maxb,
                      int64_t max_pos, const float *dsk) {
    const float scale = 1.0f / sqrtf((float)c->D);
    rf_status st = which == 0 ? rf_gpu_paged_attention(g_ctx, dout, dq, dk, dv, kv_type_of(c), nt, dpos, dseq, dtab,
                                                       maxb, c->bs, c->nh, c->nhkv, c->D, scale, c->window,
                                                       c->softcap, max_pos, dsk)
                              : rf_gpu_attention_wide(g_ctx, dout, dq, dk, dv, kv_type_of(c), nt, dpos, dseq, dtab,
                                                      maxb, c->bs, c->nh, c->nhkv, c->D, scale, c->window, c->softcap,
                                                      max_pos, dsk, (nt <= 64) == (which == 1));
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    return st;
}

static void run_case(rf_rng *r, const aw_case *c) {
    const int64_t D = c->D, nh = c->nh, nhkv = c->nhkv, bs = c->bs, kvd = nhkv * D, qd = nh * D;
    if (!rf_gpu_attention_wide_supported(kv_type_of(c), D)) {
        fprintf(stderr, "  D%lld %s: not on this device, skipped\n", (long long)D, rf_type_name(kv_type_of(c)));
        return;
    }
    const int64_t maxb = (TABLE_SPAN + bs - 1) / bs;
    int64_t nblk = 2;
    for (int s = 0; s < c->n_seq; s++) nblk += (c->len[s] + bs - 1) / bs;
    int32_t *perm = malloc((size_t)nblk * 4), *tab = malloc((size_t)(c->n_seq * maxb) * 4);
    for (int64_t i = 0; i < nblk; i++) perm[i] = (int32_t)i;
    shuffle_i32(r, perm, nblk);
    const int64_t rows = nblk * bs;
    float *kf = host_f32((size_t)(rows * kvd)), *vf = host_f32((size_t)(rows * kvd));
    uint16_t *k16 = malloc((size_t)(rows * kvd) * 2), *v16 = malloc((size_t)(rows * kvd) * 2);
    for (int64_t i = 0; i < rows * kvd; i++) kf[i] = vf[i] = NAN; /* rows nobody owns */
    for (int s = 0, u = 0; s < c->n_seq; s++) {
        for (int64_t b = 0; b < maxb; b++) tab[s * maxb + b] = FAR_BLOCK;
        for (int64_t b = 0; b < (c->len[s] + bs - 1) / bs; b++) tab[s * maxb + b] = perm[u++];
        for (int32_t p = 0; p < c->len[s]; p++) {
            const int64_t row = (int64_t)tab[s * maxb + p / bs] * bs + p % bs;
            for (int64_t i = 0; i < kvd; i++) kf[row * kvd + i] = rf_rng_normal(r), vf[row * kvd + i] = rf_rng_normal(r);
        }
    }
    for (int64_t i = 0; i < rows * kvd; i++) {
        k16[i] = rf_f32_to_fp16(kf[i]), v16[i] = rf_f32_to_fp16(vf[i]);
        if (c->kv == KV_F16) kf[i] = rf_fp16_to_f32(k16[i]), vf[i] = rf_fp16_to_f32(v16[i]);
    }
    /* q8_0: rows quantized (rows nobody owns: 0xFF bytes, a NaN scale); kf / vf become d * q */
    const size_t qrb = (size_t)kvd / 32 * 34;
    uint8_t *kq = NULL, *vq = NULL;
    if (c->kv == KV_Q8) {
        kq = malloc((size_t)rows * qrb), vq = malloc((size_t)rows * qrb);
        for (int64_t row = 0; row < rows; row++) {
            float *kr = kf + row * kvd, *vr = vf + row * kvd;
            if (isnan(kr[0])) {
                memset(kq + row * qrb, 0xFF, qrb), memset(vq + row * qrb, 0xFF, qrb);
                continue;
            }
            assert_int_equal(rf_quantize_row(RF_TYPE_Q8_0, kr, kq + row * qrb, kvd), RF_OK);
            assert_int_equal(rf_quantize_row(RF_TYPE_Q8_0, vr, vq + row * qrb, kvd), RF_OK);
            assert_int_equal(rf_dequantize_row(RF_TYPE_Q8_0, kq + row * qrb, kr, kvd), RF_OK);
            assert_int_equal(rf_dequantize_row(RF_TYPE_Q8_0, vq + row * qrb, vr, kvd), RF_OK);
        }
    }
    /* the batch */
    int64_t nt = c->n_pad, n = 0, max_pos = 0;
    for (int s = 0; s < c->n_seq; s++) nt += c->nq[s];
    int32_t *pos = malloc((size_t)nt * 4), *seq = malloc((size_t)nt * 4);
    for (int s = 0; s < c->n_seq; s++)
        for (int32_t p = c->len[s] - c->nq[s]; p < c->len[s]; p++) {
            pos[n] = p, seq[n] = s, n++;
            if (p > max_pos) max_pos = p;
        }
    for (int i = 0; i < c->n_pad; i++) {
        int64_t at = rnd_int(r, 0, (int32_t)n);
        memmove(pos + at + 1, pos + at, (size_t)(n - at) * 4), memmove(seq + at + 1, seq + at, (size_t)(n - at) * 4);
        pos[at] = -1 - rnd_int(r, 0, 2), seq[at] = 1 << 20;
        n++;
    }
    if (c->shuffle) {
        int32_t *order = malloc((size_t)nt * 4), *p2 = malloc((size_t)nt * 4), *s2 = malloc((size_t)nt * 4);
        for (int64_t i = 0; i < nt; i++) order[i] = (int32_t)i;
        shuffle_i32(r, order, nt);
        for (int64_t i = 0; i < nt; i++) p2[i] = pos[order[i]], s2[i] = seq[order[i]];
        memcpy(pos, p2, (size_t)nt * 4), memcpy(seq, s2, (size_t)nt * 4);
        free(order), free(p2), free(s2);
    }
    float *q = host_f32((size_t)(nt * qd)), *want = host_f32((size_t)(nt * qd)), *got = host_f32((size_t)(nt * qd));
    float *alt = host_f32((size_t)(nt * qd)), *qref = host_f32((size_t)(nt * qd));
    rf_rng_fill_normal(r, q, (size_t)(nt * qd), c->qscale);
    float *sk = NULL, *dsk = NULL;
    if (c->sinks) {
        sk = host_f32((size_t)nh);
        rf_rng_fill_normal(r, sk, (size_t)nh, 2.0f);
        dsk = dev_from(sk, (size_t)nh * 4);
    }
    for (int64_t i = 0; i < nt * qd; i++) qref[i] = c->kv == KV_F16 ? rf_fp16_to_f32(rf_f32_to_fp16(q[i])) : q[i];
    const float scale = 1.0f / sqrtf((float)D);
    for (int64_t t = 0; t < nt; t++) {
        if (pos[t] < 0) {
            memset(want + t * qd, 0, (size_t)qd * 4);
            continue;
        }
        assert_int_equal(rf_ref_paged_attention(want + t * qd, qref + t * qd, kf, vf, 1, pos + t, seq + t, tab, maxb,
                                                 bs, nh, nhkv, D, scale, c->window, c->softcap, sk),
                         RF_OK);
    }
    /* device */
    float *dq = dev_from(q, (size_t)(nt * qd) * 4), *dout = dev_poison((size_t)(nt * qd) * 4);
    float *dalt = dev_poison((size_t)(nt * qd) * 4);
    void *dk = c->kv == KV_Q8 ? dev_from(kq, (size_t)rows * qrb)
               : c->kv == KV_F16 ? dev_from(k16, (size_t)(rows * kvd) * 2) : dev_from(kf, (size_t)(rows * kvd) * 4);
    void *dv = c->kv == KV_Q8 ? dev_from(vq, (size_t)rows * qrb)
               : c->kv == KV_F16 ? dev_from(v16, (size_t)(rows * kvd) * 2) : dev_from(vf, (size_t)(rows * kvd) * 4);
    int32_t *dpos = dev_from(pos, (size_t)nt * 4), *dseq = dev_from(seq, (size_t)nt * 4);
    int32_t *dtab = dev_from(tab, (size_t)(c->n_seq * maxb) * 4);
    const int main_call = D > 256 ? 0 : 1; /* D = 256: the wide kernel itself, the <= 256 one beside it */
    assert_int_equal(call(c, main_call, dout, dq, dk, dv, nt, dpos, dseq, dtab, maxb, max_pos, dsk), RF_OK);
    dev_to(got, dout, (size_t)(nt * qd) * 4);
    char what[160];
    snprintf(what, sizeof what, "D%lld h%lld/%lld bs%lld %s%s%s%s t%lld maxpos%lld", (long long)D, (long long)nh,
             (long long)nhkv, (long long)bs, rf_type_name(kv_type_of(c)), c->window ? " win" : "",
             c->softcap > 0 ? " cap" : "", c->sinks ? " sinks" : "", (long long)nt, (long long)max_pos);
    check_rel(what, got, want, (size_t)(nt * qd), TOL);
    for (int64_t t = 0; t < nt; t++) /* padding: exact (+0) zeros */
        if (pos[t] < 0)
            for (int64_t i = 0; i < qd; i++) assert_true(((const uint32_t *)got)[t * qd + i] == 0u);
    if (D == 256) { /* the <= 256 kernel on the same inputs: both within TOL of the reference */
        assert_int_equal(call(c, 0, dalt, dq, dk, dv, nt, dpos, dseq, dtab, maxb, max_pos, dsk), RF_OK);
        dev_to(alt, dalt, (size_t)(nt * qd) * 4);
        check_rel("  the <= 256 kernel vs the reference", alt, want, (size_t)(nt * qd), TOL);
        check_rel("  the wide kernel vs the <= 256 kernel", got, alt, (size_t)(nt * qd), 2 * TOL);
    }
    /* batch invariance: larger max_pos (other splits over blocks, or none), the other hint,
     * every token alone with its own max_pos */
    const int64_t more[2] = {max_pos + 1 + rnd_int(r, 0, 1000), 1 << 29};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(call(c, main_call, dalt, dq, dk, dv, nt, dpos, dseq, dtab, maxb, more[i], dsk), RF_OK);
        dev_to(alt, dalt, (size_t)(nt * qd) * 4);
        assert_true(memcmp(alt, got, (size_t)(nt * qd) * 4) == 0);
    }
    assert_int_equal(call(c, 2, dalt, dq, dk, dv, nt, dpos, dseq, dtab, maxb, max_pos, dsk), RF_OK);
    dev_to(alt, dalt, (size_t)(nt * qd) * 4);
    assert_true(memcmp(alt, got, (size_t)(nt * qd) * 4) == 0);
    for (int64_t t = 0; t < nt; t++) {
        assert_int_equal(call(c, main_call, dalt, dq + t * qd, dk, dv, 1, dpos + t, dseq + t, dtab, maxb,
                              pos[t] > 0 ? pos[t] : 0, dsk),
                         RF_OK);
        dev_to(alt, dalt, (size_t)qd * 4);
        if (memcmp(alt, got + t * qd, (size_t)qd * 4)) {
            for (int64_t i = 0; i < qd; i++)
                if (memcmp(alt + i, got + t * qd + i, 4)) {
                    fprintf(stderr, "  token %lld (pos %d seq %d) alone differs at %lld: %.9g vs %.9g in the batch\n",
                            (long long)t, pos[t], seq[t], (long long)i, alt[i], got[t * qd + i]);
                    break;
                }
            fail();
        }
    }
    fprintf(stderr, "  %-48s bit-identical alone / other hint / max_pos %lld, %lld\n", "", (long long)more[0],
            (long long)more[1]);

    rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dout), rf_gpu_free(g_ctx, dalt), rf_gpu_free(g_ctx, dk);
    rf_gpu_free(g_ctx, dv), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq), rf_gpu_free(g_ctx, dtab);
    if (dsk) rf_gpu_free(g_ctx, dsk);
    free(perm), free(tab), free(kf), free(vf), free(k16), free(v16), free(kq), free(vq), free(pos), free(seq);
    free(q), free(qref), free(want), free(got), free(alt), free(sk);
}

static const int64_t g_dims[4] = {256, 320, 384, 512};
static const int64_t g_shapes[3][2] = {{4, 4}, {8, 4}, {16, 2}}; /* GQA ratios 1, 2, 8 */
static const int64_t g_bss[4] = {16, 7, 32, 1};

/* Decode batches: a token at depth 1, 17, 600 and 4100 of four sequences and two padding tokens,
 * every head dim x cache type x GQA ratio; window (300 or Gemma 4's 1024), softcap, sinks and a
 * larger query in turn. */
static void test_decode(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    int i = 0;
    for (int di = 0; di < 4; di++)
        for (int kv = KV_F16; kv <= KV_Q8; kv++)
            for (int sh = 0; sh < 3; sh++, i++) {
                aw_case c = {.D = g_dims[di], .nh = g_shapes[sh][0], .nhkv = g_shapes[sh][1], .bs = g_bss[i % 4],
                             .kv = kv, .n_seq = 4, .len = {1, 17, 600, 4100}, .nq = {1, 1, 1, 1}, .n_pad = 2,
                             .shuffle = i % 2 == 1, .qscale = i % 4 == 3 ? 4.0f : 1.0f, .sinks = i % 5 == 2};
                c.window = i % 2 ? (i % 4 == 1 ? 300 : 1024) : 0;
                c.softcap = i % 3 == 0 ? 30.0f : 0.0f;
                run_case(&r, &c);
            }
}

/* Prompt chunks of 1, 37 and 512 tokens behind prefixes of 0, 17, 600 and 4100 positions, beside
 * decode tokens and padding; Gemma 4 26B-A4B's full-layer shape (16 heads, 2 KV heads of 512). */
static void test_prompt(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 1);
    aw_case cs[] = {
        {.D = 512, .nh = 16, .nhkv = 2, .bs = 16, .kv = KV_F16, .n_seq = 3, .len = {4137, 601, 18},
         .nq = {37, 1, 1}, .n_pad = 1, .qscale = 1.0f},
        {.D = 512, .nh = 8, .nhkv = 1, .bs = 32, .kv = KV_F16, .n_seq = 2, .len = {1112, 50}, .nq = {512, 1},
         .qscale = 1.0f},
        {.D = 512, .nh = 8, .nhkv = 1, .bs = 32, .window = 300, .softcap = 30.0f, .kv = KV_Q8, .n_seq = 2,
         .len = {1112, 50}, .nq = {512, 1}, .n_pad = 2, .qscale = 2.0f},
        {.D = 384, .nh = 8, .nhkv = 4, .bs = 7, .window = 128, .kv = KV_Q8, .n_seq = 2, .len = {54, 512},
         .nq = {37, 512}, .n_pad = 2, .shuffle = true, .qscale = 1.0f},
        {.D = 320, .nh = 4, .nhkv = 4, .bs = 16, .softcap = 30.0f, .kv = KV_F16, .n_seq = 2, .len = {637, 1},
         .nq = {37, 1}, .qscale = 1.0f, .sinks = true},
        {.D = 256, .nh = 8, .nhkv = 2, .bs = 16, .kv = KV_F16, .n_seq = 2, .len = {637, 4100}, .nq = {37, 1},
         .n_pad = 1, .qscale = 1.0f},
        {.D = 256, .nh = 8, .nhkv = 2, .bs = 16, .window = 200, .kv = KV_Q8, .n_seq = 2, .len = {637, 4100},
         .nq = {37, 1}, .qscale = 1.0f},
        {.D = 512, .nh = 4, .nhkv = 2, .bs = 16, .kv = KV_F32, .n_seq = 2, .len = {700, 4100}, .nq = {37, 1},
         .qscale = 1.0f},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) run_case(&r, &cs[i]);
}

/* Arguments the wide kernel refuses; no tokens. */
static void test_edges(void **state) {
    (void)state;
    float *d = dev_poison(4096);
    const int32_t *di = (const int32_t *)d;
    assert_false(rf_gpu_attention_wide_supported(RF_TYPE_F16, 576));
    assert_false(rf_gpu_attention_wide_supported(RF_TYPE_F16, 288));
    assert_false(rf_gpu_attention_wide_supported(RF_TYPE_Q4_0, 512));
    assert_true(rf_gpu_attention_wide_supported(RF_TYPE_Q8_0, 512));
    assert_int_equal(rf_gpu_attention_wide(g_ctx, d, d, d, d, RF_TYPE_F16, 1, di, di, di, 1, 16, 4, 2, 576, 1.0f, 0,
                                           0.0f, 0, NULL, true),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_paged_attention(g_ctx, d, d, d, d, RF_TYPE_F16, 1, di, di, di, 1, 16, 4, 2, 288, 1.0f, 0,
                                            0.0f, 0, NULL),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_attention_wide(g_ctx, d, d, d, d, RF_TYPE_F16, 1, di, di, di, 1, 16, 3, 2, 512, 1.0f, 0,
                                           0.0f, 0, NULL, true),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_attention_wide(g_ctx, NULL, NULL, NULL, NULL, RF_TYPE_F16, 0, NULL, NULL, NULL, 1, 16, 4,
                                           2, 512, 1.0f, 0, 0.0f, 0, NULL, true),
                     RF_OK);
    rf_gpu_free(g_ctx, d);
}

/* ---- the whole model: tiny-gemma4-wide on the GPU against the CPU ---------------------------- */

static double l2_centered(const float *x, int32_t n) {
    double m = 0, s = 0;
    for (int32_t i = 0; i < n; i++) m += x[i];
    m /= n;
    for (int32_t i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
    return sqrt(s);
}

/* test_gpu_forward.c's argmax rule: a differing argmax fails unless the CPU's top-2 margin is
 * below 6 sqrt(2) tol rms(l) */
static double near_tie(const float *l, int32_t nv, double tol) {
    return 6 * sqrt(2.0) * tol * l2_centered(l, nv) / sqrt((double)nv);
}

static rf_session *session_kv(rf_model *m, int ctx, rf_type kv) {
    rf_session_params sp = rf_session_default_params();
    sp.n_ctx = ctx;
    sp.n_batch = 64; /* a 100-token prompt runs in two steps */
    sp.kv_type = kv;
    rf_session *s = NULL;
    if (rf_session_new(m, &sp, &s)) fail_msg("session: %s", rf_last_error());
    return s;
}

static void model_case(const char *wtype, rf_type kv, double tol) {
    char path[1200], label[96];
    mkmodel("tiny-gemma4-wide", wtype, path, sizeof path);
    snprintf(label, sizeof label, "tiny-gemma4-wide %s, %s KV", wtype, rf_type_name(kv));
    rf_model *mc = load(path, RF_DEVICE_CPU), *mg = load(path, RF_DEVICE_GPU);
    assert_int_equal(mg->hp.head_dim, 512); /* the full layers' heads: the wide kernel in decode and short
                                              * runs, the flash prefill for runs of >= 16 (sm_80+) */
    const int32_t nv = mc->hp.n_vocab;
    rf_session *sc = session_kv(mc, 256, kv), *sg = session_kv(mg, 256, kv);
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 7);
    const int lens[] = {1, 7, 33, 100};
    int32_t ids[128];
    double worst = 0;
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        random_prompt(&r, ids, lens[k], nv);
        rf_session_truncate(sc, 0), rf_session_truncate(sg, 0);
        if (rf_session_eval(sc, ids, lens[k], false)) fail_msg("cpu eval: %s", rf_last_error());
        if (rf_session_eval(sg, ids, lens[k], false)) fail_msg("gpu eval: %s", rf_last_error());
        const float *lc = rf_session_logits(sc, lens[k] - 1), *lg = rf_session_logits(sg, lens[k] - 1);
        float margin = INFINITY;
        bool same = false;
        const double e = compare(lc, lg, nv, &margin, &same);
        if (!(e < tol)) fail_msg("%s prompt of %d: rel. L2 %.3e >= %.0e", label, lens[k], e, tol);
        const double tie = near_tie(lc, nv, tol);
        if (!same && margin >= tie)
            fail_msg("%s prompt of %d: argmax differs at a top-2 margin %.3f >= near-tie bound %.3f", label, lens[k],
                     margin, tie);
        if (e > worst) worst = e;
    }
    /* greedy: 32 tokens after a 7-token prompt, the same up to a near tie of the CPU's */
    random_prompt(&r, ids, 7, nv);
    rf_session_truncate(sc, 0), rf_session_truncate(sg, 0);
    if (rf_session_eval(sc, ids, 7, false) || rf_session_eval(sg, ids, 7, false)) fail_msg("eval: %s", rf_last_error());
    const float *lc = rf_session_logits(sc, 6), *lg = rf_session_logits(sg, 6);
    int same_steps = 0;
    for (int step = 0; step < 32; step++) {
        const int32_t a = rf_ref_argmax(lc, nv), b = rf_ref_argmax(lg, nv);
        if (a != b) {
            float margin = INFINITY;
            bool same = false;
            compare(lc, lg, nv, &margin, &same);
            const double tie = near_tie(lc, nv, tol);
            if (margin >= tie)
                fail_msg("%s greedy step %d: GPU %d vs CPU %d at a top-2 margin %.3f >= near-tie bound %.3f", label,
                         step, b, a, margin, tie);
            printf("  %s greedy: parted at step %d at a near tie (margin %.3f < %.3f)\n", label, step, margin, tie);
            break;
        }
        same_steps++;
        if (rf_session_eval(sc, &a, 1, false) || rf_session_eval(sg, &a, 1, false)) fail_msg("eval: %s", rf_last_error());
        lc = rf_session_logits(sc, 0), lg = rf_session_logits(sg, 0);
    }
    printf("  %-36s max rel. L2 %.2e (tol %.0e), greedy %d/32 tokens equal\n", label, worst, tol, same_steps);
    rf_session_free(sc), rf_session_free(sg);
    rf_model_free(mc), rf_model_free(mg);
}

/* f32 / f16 weights (no int8 activations: test_gpu_forward.c's 1e-2 for f16 operands in the
 * many-token products, f16 KV on both sides); a q8_0 KV cache on both sides: its 5e-2 (K/V
 * elements near a rounding boundary of the block may round one step apart, test_kv_q8) */
static void test_model(void **state) {
    (void)state;
    model_case("f32", RF_TYPE_F16, 1e-2);
    model_case("f16", RF_TYPE_F16, 1e-2);
    model_case("f16", RF_TYPE_Q8_0, 5e-2);
}

int main(void) {
    gpu_test_init_or_skip("test_gpu_attention_wide");
    gpu_model_dirs();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_prompt),
        cmocka_unit_test(test_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
