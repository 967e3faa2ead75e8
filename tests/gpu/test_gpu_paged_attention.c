/* test_gpu_paged_attention.c — rf_gpu_paged_attention against rf_ref_paged_attention: batches that
 * mix decode tokens of several sequences with prompt chunks of others (grouped or shuffled in
 * the batch) and padding tokens, K/V blocks scattered over the pool in a shuffled order, block
 * sizes 1 / 7 / 16 / 32, head dims 64/80/96/128/256, GQA groups 1..12 (32/8, 9/3, 4/1, 14/2,
 * 8/8, 4/2, 16/2, 12/1), sliding window and softcap, f32, f16 and q8_0 caches (q8_0: head dims
 * that are multiples of 32), positions up to ~4200 (keys
 * split over many blocks and reduced), batches of <= 64 tokens (one token per block) and > 64
 * (several tokens per warp). Pool rows that hold no position of their sequence are NaN and
 * block-table entries past a sequence's blocks point far outside the pool, so reading a key a
 * token must not see shows as NaN or a fault. The reference runs on the same (f16-rounded) K/V
 * values, so the tolerance is rel. L2 < 1e-5 for every cache type (q8_0: the reference on the
 * dequantized values d * q, exact in f32; the query unrounded, as the CPU's q8_0 path); padding
 * rows must be exact zeros. q8_0 against the unquantized K/V: per element the bound
 * check_q8_bound derives from the rounding of K and V (below). Batch invariance: every output row must be bit-identical when the token runs alone
 * (n_tokens = 1, its own max_pos), when max_pos is larger, and when the batch is reversed.
 * Every case also runs the kernels as before the decode speed-up (test hook gpu_pa_old), the
 * plain kernel where the staged one runs (test hook gpu_pa_nostage: K/V read from memory, not
 * from shared-memory stages, another grid) and with the other shape hint
 * (rf_gpu_paged_attention_hint: decode rows / prompt chunks) and with at most 1, 2 or 4 rows per
 * warp (test hook gpu_pa_rows): the same bits. Then a timing table
 * for the llama3-8b shape (32 heads, 8 kv heads, head_dim 128, blocks of 16): decode rows, f16
 * and q8_0 cache, 1 sequence at depth 512/4096/16384 and 64/128/256 sequences at depth
 * 256/1024, old, plain and new (staged) kernels side by side; short-depth decode (time_short:
 * 8b and 70b shapes, depths 16-1024, max_pos at the graph bucket's bound and at the real depth,
 * device events: back to back, alone, after an L2 eviction); a 512-token prompt chunk.
 * Inputs are fresh each run (seed printed; RF_TEST_SEED=<n> replays). Skips (77) without a GPU. */
#if !defined(RF_HAVE_GPU)
#include <stdio.h>
int main(void) {
    fprintf(stderr, "test_gpu_paged_attention: skipped, built without the GPU backend (RF_CUDA=OFF or no nvcc)\n");
    return 77;
}
#else
#include "gpu_test_common.h"

#include <stdbool.h>
#include <time.h>

#include "backend/gpu/gpu_timer.h"
#include "backend/ref/ref_ops.h"
#include "core/test_hooks.h"

#define FAR_BLOCK (1 << 22) /* table entry past a sequence's blocks: a read there faults */
#define TABLE_SPAN 300000   /* positions a block table can address (as an engine's n_ctx) */

typedef struct pa_case {
    int64_t D, nh, nhkv, bs, window;
    float softcap;
    bool f16;
    bool q8; /* q8_0 cache (f16 ignored) */
    int n_seq;
    int32_t len[12]; /* positions 0..len-1 of each sequence are in the cache */
    int32_t nq[12];  /* the sequence's last nq positions are tokens of the batch */
    int n_pad;       /* padding tokens (pos < 0) mixed in */
    bool shuffle;    /* tokens in random order (else grouped by sequence) */
    float qscale;    /* query magnitude (large: peaky softmax) */
    bool sinks;      /* random attention-sink logits per head (gpt-oss) */
} pa_case;

static const float *g_dsinks; /* the device sinks of the case run_case is running (call_pa) */

static int32_t rnd_int(rf_rng *r, int32_t lo, int32_t hi) { /* [lo, hi] */
    return lo + (int32_t)(rf_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

static void shuffle_i32(rf_rng *r, int32_t *a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rf_rng_u64(r) % (uint64_t)(i + 1));
        int32_t t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

static void describe(char *buf, size_t n, const pa_case *c, int64_t nt, int64_t max_pos) {
    snprintf(buf, n, "D%lld h%lld/%lld bs%lld %s%s%s%s t%lld maxpos%lld", (long long)c->D,
             (long long)c->nh, (long long)c->nhkv, (long long)c->bs, c->q8 ? "q8_0" : c->f16 ? "f16" : "f32",
             c->window ? " win" : "", c->softcap > 0 ? " cap" : "", c->shuffle ? " shuf" : "",
             (long long)nt, (long long)max_pos);
}

static rf_status call_pa(const pa_case *c, float *dout, const float *dq, const void *dk, const void *dv,
                         int64_t nt, const int32_t *dpos, const int32_t *dseq, const int32_t *dtab,
                         int64_t maxb, int64_t max_pos) {
    const float scale = 1.0f / sqrtf((float)c->D);
    const rf_type kt = c->q8 ? RF_TYPE_Q8_0 : c->f16 ? RF_TYPE_F16 : RF_TYPE_F32;
    rf_status st = rf_gpu_paged_attention(g_ctx, dout, dq, dk, dv, kt, nt,
                                          dpos, dseq, dtab, maxb, c->bs, c->nh, c->nhkv, c->D, scale,
                                          c->window, c->softcap, max_pos, c->sinks ? g_dsinks : NULL);
    if (st) fprintf(stderr, "  error: %s\n", rf_last_error());
    return st;
}

/* q8_0 against the unquantized cache. For a row (token, head) with keys j, the quantization moves
 * each score by at most delta = scale * max_j sum_i |q_i| |k_ji - kq_ji| (the softcap is
 * 1-Lipschitz, so it only shrinks that), hence every softmax weight by a factor within
 * [e^-2delta, e^2delta] and the weights' total change sum_j |p'_j - p_j| <= e^2delta - 1; so
 * output element d moves by at most
 *     |sum p'_j v'_jd - sum p_j v_jd| <= max_j |v_jd - vq_jd| + (e^2delta - 1) max_j |v_jd|.
 * q8_0's rounding (|x - d16 q| <= d/2 + 127 |d - d16| <= 0.56 d, d = amax / 127 of the block)
 * sets the sizes of |k - kq| and |v - vq| that enter it; the test takes them from the data. On
 * top: the kernel's own float error against the reference on the dequantized values (checked at
 * rel. L2 1e-5 before), allowed here as 1e-4 * max_j |v_jd| per element. A sink (gpt-oss) is one
 * more logit that no quantization moves: it only joins the denominator; the bound holds as stated. */
static void check_q8_bound(const pa_case *c, const float *got, const float *q, const float *ko, const float *vo,
                           const float *kd, const float *vd, const int32_t *pos, const int32_t *seq,
                           const int32_t *tab, int64_t maxb, int64_t nt, const float *sk) {
    const int64_t D = c->D, nh = c->nh, nhkv = c->nhkv, kvd = nhkv * D, qd = nh * D, G = nh / nhkv;
    const float scale = 1.0f / sqrtf((float)D);
    float *want0 = host_f32((size_t)qd);
    double *dvm = malloc((size_t)D * sizeof(double)), *vmax = malloc((size_t)D * sizeof(double));
    double worst = 0, e2 = 0, w2 = 0;
    for (int64_t t = 0; t < nt; t++) {
        if (pos[t] < 0) continue;
        assert_int_equal(rf_ref_paged_attention(want0, q + t * qd, ko, vo, 1, pos + t, seq + t, tab, maxb, c->bs, nh,
                                                 nhkv, D, scale, c->window, c->softcap, sk),
                         RF_OK);
        const int32_t kmin = c->window > 0 && pos[t] - c->window + 1 > 0 ? pos[t] - (int32_t)c->window + 1 : 0;
        for (int64_t h = 0; h < nh; h++) {
            const int64_t hk = h / G;
            const float *qh = q + t * qd + h * D;
            double delta = 0;
            for (int64_t d = 0; d < D; d++) dvm[d] = vmax[d] = 0;
            for (int32_t j = kmin; j <= pos[t]; j++) {
                const int64_t row = (int64_t)tab[seq[t] * maxb + j / c->bs] * c->bs + j % c->bs;
                const int64_t o = row * kvd + hk * D;
                double s = 0;
                for (int64_t d = 0; d < D; d++) {
                    s += fabs((double)qh[d]) * fabs((double)ko[o + d] - kd[o + d]);
                    const double dv = fabs((double)vo[o + d] - vd[o + d]);
                    if (dv > dvm[d]) dvm[d] = dv;
                    if (fabs((double)vo[o + d]) > vmax[d]) vmax[d] = fabs((double)vo[o + d]);
                }
                if (s * scale > delta) delta = s * scale;
            }
            for (int64_t d = 0; d < D; d++) {
                const double g = got[t * qd + h * D + d], w = want0[h * D + d];
                const double bound = dvm[d] + expm1(2 * delta) * vmax[d] + 1e-4 * vmax[d];
                const double r = fabs(g - w) / bound;
                if (!(r <= 1.0)) {
                    fprintf(stderr, "  q8_0 bound broken: token %lld head %lld dim %lld: got %.7g want %.7g, bound %.3g "
                                    "(delta %.3g)\n", (long long)t, (long long)h, (long long)d, g, w, bound, delta);
                    fail();
                }
                if (r > worst) worst = r;
                e2 += (g - w) * (g - w), w2 += w * w;
            }
        }
    }
    fprintf(stderr, "  %-48s vs unquantized K/V: rel_l2=%.3g, worst element at %.2f of its bound\n", "q8_0",
            w2 > 0 ? sqrt(e2 / w2) : 0.0, worst);
    free(want0), free(dvm), free(vmax);
}

/* Builds the pool, the tables and the batch of case c, checks the GPU against the reference and
 * the batch invariance. */
static void run_case(rf_rng *r, const pa_case *c) {
    const int64_t D = c->D, nh = c->nh, nhkv = c->nhkv, bs = c->bs, kvd = nhkv * D, qd = nh * D;
    /* block tables over a shuffled pool; a table row addresses TABLE_SPAN positions, the
     * entries past a sequence's blocks point far outside the pool */
    int64_t maxb = (TABLE_SPAN + bs - 1) / bs, nblk = 2;
    for (int s = 0; s < c->n_seq; s++) nblk += (c->len[s] + bs - 1) / bs;
    int32_t *perm = malloc((size_t)nblk * sizeof(int32_t)), *tab = malloc((size_t)(c->n_seq * maxb) * sizeof(int32_t));
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
            for (int64_t i = 0; i < kvd; i++) {
                kf[row * kvd + i] = rf_rng_normal(r);
                vf[row * kvd + i] = rf_rng_normal(r);
            }
        }
    }
    for (int64_t i = 0; i < rows * kvd; i++) {
        k16[i] = rf_f32_to_fp16(kf[i]), v16[i] = rf_f32_to_fp16(vf[i]);
        if (c->f16 && !c->q8) kf[i] = rf_fp16_to_f32(k16[i]), vf[i] = rf_fp16_to_f32(v16[i]);
    }
    /* q8_0: rows quantized (rows nobody owns: all bytes 0xFF, a NaN scale); kf / vf become the
     * dequantized values the reference reads, ko / vo keep the unquantized ones */
    const size_t qrb = (size_t)kvd / 32 * 34;
    uint8_t *kq = NULL, *vq = NULL;
    float *ko = NULL, *vo = NULL;
    if (c->q8) {
        kq = malloc((size_t)rows * qrb), vq = malloc((size_t)rows * qrb);
        ko = host_f32((size_t)(rows * kvd)), vo = host_f32((size_t)(rows * kvd));
        memcpy(ko, kf, (size_t)(rows * kvd) * 4), memcpy(vo, vf, (size_t)(rows * kvd) * 4);
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
    int64_t nt = c->n_pad;
    for (int s = 0; s < c->n_seq; s++) nt += c->nq[s];
    int32_t *pos = malloc((size_t)nt * 4), *seq = malloc((size_t)nt * 4), *order = malloc((size_t)nt * 4);
    int64_t n = 0, max_pos = 0;
    for (int s = 0; s < c->n_seq; s++)
        for (int32_t p = c->len[s] - c->nq[s]; p < c->len[s]; p++) {
            pos[n] = p, seq[n] = s, n++;
            if (p > max_pos) max_pos = p;
        }
    for (int i = 0; i < c->n_pad; i++) { /* padding at random slots; its seq is garbage */
        int64_t at = rnd_int(r, 0, (int32_t)n);
        memmove(pos + at + 1, pos + at, (size_t)(n - at) * 4);
        memmove(seq + at + 1, seq + at, (size_t)(n - at) * 4);
        pos[at] = -1 - rnd_int(r, 0, 2), seq[at] = 1 << 20;
        n++;
    }
    if (c->shuffle) {
        for (int64_t i = 0; i < nt; i++) order[i] = (int32_t)i;
        shuffle_i32(r, order, nt);
        int32_t *p2 = malloc((size_t)nt * 4), *s2 = malloc((size_t)nt * 4);
        for (int64_t i = 0; i < nt; i++) p2[i] = pos[order[i]], s2[i] = seq[order[i]];
        memcpy(pos, p2, (size_t)nt * 4), memcpy(seq, s2, (size_t)nt * 4);
        free(p2), free(s2);
    }
    float *q = host_f32((size_t)(nt * qd)), *want = host_f32((size_t)(nt * qd)), *got = host_f32((size_t)(nt * qd));
    float *alt = host_f32((size_t)(nt * qd));
    rf_rng_fill_normal(r, q, (size_t)(nt * qd), c->qscale);
    const float scale = 1.0f / sqrtf((float)D);
    float *sk = NULL;
    if (c->sinks) { /* sink logits as large as the scores, so they move the result */
        sk = host_f32((size_t)nh);
        rf_rng_fill_normal(r, sk, (size_t)nh, 2.0f);
        g_dsinks = dev_from(sk, (size_t)nh * 4);
    }
    /* an f16 cache's query is rounded to f16 (the CPU backend's and llama.cpp's convention) */
    float *qref = host_f32((size_t)(nt * qd));
    for (int64_t i = 0; i < nt * qd; i++) qref[i] = c->f16 && !c->q8 ? rf_fp16_to_f32(rf_f32_to_fp16(q[i])) : q[i];
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
    void *dk = c->q8 ? dev_from(kq, (size_t)rows * qrb)
               : c->f16 ? dev_from(k16, (size_t)(rows * kvd) * 2) : dev_from(kf, (size_t)(rows * kvd) * 4);
    void *dv = c->q8 ? dev_from(vq, (size_t)rows * qrb)
               : c->f16 ? dev_from(v16, (size_t)(rows * kvd) * 2) : dev_from(vf, (size_t)(rows * kvd) * 4);
    int32_t *dpos = dev_from(pos, (size_t)nt * 4), *dseq = dev_from(seq, (size_t)nt * 4);
    int32_t *dtab = dev_from(tab, (size_t)(c->n_seq * maxb) * 4);
    assert_int_equal(call_pa(c, dout, dq, dk, dv, nt, dpos, dseq, dtab, maxb, max_pos), RF_OK);
    dev_to(got, dout, (size_t)(nt * qd) * 4);
    char what[200];
    describe(what, sizeof what, c, nt, max_pos);
    check_rel(what, got, want, (size_t)(nt * qd), 1e-5);
    if (c->q8) check_q8_bound(c, got, q, ko, vo, kf, vf, pos, seq, tab, maxb, nt, sk);
    for (int64_t t = 0; t < nt; t++) /* padding: exact (+0) zeros */
        if (pos[t] < 0)
            for (int64_t i = 0; i < qd; i++) assert_true(((const uint32_t *)got)[t * qd + i] == 0u);

    /* batch invariance, 1: larger max_pos (more key splits planned; far larger ones move the
     * partial states to one per group of splits, or to none: the blocks walk all splits) */
    const int64_t more[3] = {max_pos + 1 + rnd_int(r, 0, 1000), max_pos + 100000 + rnd_int(r, 0, 1000), 1 << 29};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(call_pa(c, dalt, dq, dk, dv, nt, dpos, dseq, dtab, maxb, more[i]), RF_OK);
        dev_to(alt, dalt, (size_t)(nt * qd) * 4);
        assert_true(memcmp(alt, got, (size_t)(nt * qd) * 4) == 0);
    }
    /* 2: every token alone, with its own max_pos */
    for (int64_t t = 0; t < nt; t++) {
        assert_int_equal(call_pa(c, dalt, dq + t * qd, dk, dv, 1, dpos + t, dseq + t, dtab, maxb,
                                 pos[t] > 0 ? pos[t] : 0),
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
    /* 3: the batch reversed */
    int32_t *rpos = malloc((size_t)nt * 4), *rseq = malloc((size_t)nt * 4);
    float *rq = host_f32((size_t)(nt * qd));
    for (int64_t t = 0; t < nt; t++) {
        rpos[t] = pos[nt - 1 - t], rseq[t] = seq[nt - 1 - t];
        memcpy(rq + t * qd, q + (nt - 1 - t) * qd, (size_t)qd * 4);
    }
    int32_t *drpos = dev_from(rpos, (size_t)nt * 4), *drseq = dev_from(rseq, (size_t)nt * 4);
    float *drq = dev_from(rq, (size_t)(nt * qd) * 4);
    assert_int_equal(call_pa(c, dalt, drq, dk, dv, nt, drpos, drseq, dtab, maxb, max_pos), RF_OK);
    dev_to(alt, dalt, (size_t)(nt * qd) * 4);
    for (int64_t t = 0; t < nt; t++) assert_true(memcmp(alt + t * qd, got + (nt - 1 - t) * qd, (size_t)qd * 4) == 0);
    /* 4: the kernels as before the decode speed-up (test hook gpu_pa_old: no prefetch, the reduce
     * one unit at a time): the same bits */
    const rf_test_hooks old_hooks = {.gpu_pa_old = true};
    rf_test_hooks_set(&old_hooks);
    rf_status ost = call_pa(c, dalt, dq, dk, dv, nt, dpos, dseq, dtab, maxb, max_pos);
    rf_test_hooks_set(NULL);
    assert_int_equal(ost, RF_OK);
    dev_to(alt, dalt, (size_t)(nt * qd) * 4);
    assert_true(memcmp(alt, got, (size_t)(nt * qd) * 4) == 0);
    /* 4b: the plain kernel where the staged one runs (test hook gpu_pa_nostage: the K/V pieces
     * read from memory, not from the warps' shared-memory stages, another schedule): the same bits */
    const rf_test_hooks ns_hooks = {.gpu_pa_nostage = true};
    rf_test_hooks_set(&ns_hooks);
    ost = call_pa(c, dalt, dq, dk, dv, nt, dpos, dseq, dtab, maxb, max_pos);
    rf_test_hooks_set(NULL);
    assert_int_equal(ost, RF_OK);
    dev_to(alt, dalt, (size_t)(nt * qd) * 4);
    assert_true(memcmp(alt, got, (size_t)(nt * qd) * 4) == 0);
    /* 4c: other rows per warp (test hook gpu_pa_rows: at most 1, 2, 4 or 8 query rows a block, by
     * the token count; 8: the former decode cap, fewer blocks per kv head): the same bits */
    const int rcap = 1 << (int)(nt % 4);
    const rf_test_hooks rw_hooks = {.gpu_pa_rows = rcap};
    rf_test_hooks_set(&rw_hooks);
    ost = call_pa(c, dalt, dq, dk, dv, nt, dpos, dseq, dtab, maxb, max_pos);
    rf_test_hooks_set(NULL);
    assert_int_equal(ost, RF_OK);
    dev_to(alt, dalt, (size_t)(nt * qd) * 4);
    assert_true(memcmp(alt, got, (size_t)(nt * qd) * 4) == 0);
    /* 5: the other shape hint (decode rows <-> prompt chunks: other rows per warp and tokens per
     * block; correct for any batch, the same bits) */
    assert_int_equal(rf_gpu_paged_attention_hint(g_ctx, dalt, dq, dk, dv,
                                                 c->q8 ? RF_TYPE_Q8_0 : c->f16 ? RF_TYPE_F16 : RF_TYPE_F32, nt, dpos,
                                                 dseq, dtab, maxb, c->bs, c->nh, c->nhkv, c->D,
                                                 1.0f / sqrtf((float)c->D), c->window, c->softcap, max_pos,
                                                 c->sinks ? g_dsinks : NULL, nt > 64),
                     RF_OK);
    dev_to(alt, dalt, (size_t)(nt * qd) * 4);
    assert_true(memcmp(alt, got, (size_t)(nt * qd) * 4) == 0);
    fprintf(stderr, "  %-48s bit-identical alone / reversed / old / unstaged kernels / rows <= %d / other hint / max_pos "
                    "%lld, %lld, %lld\n",
            "", rcap, (long long)more[0], (long long)more[1], (long long)more[2]);

    rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dout), rf_gpu_free(g_ctx, dalt), rf_gpu_free(g_ctx, dk);
    rf_gpu_free(g_ctx, dv), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq), rf_gpu_free(g_ctx, dtab);
    rf_gpu_free(g_ctx, drpos), rf_gpu_free(g_ctx, drseq), rf_gpu_free(g_ctx, drq);
    free(perm), free(tab), free(kf), free(vf), free(k16), free(v16), free(pos), free(seq), free(order);
    free(q), free(qref), free(want), free(got), free(alt), free(rpos), free(rseq), free(rq), free(sk);
    free(kq), free(vq), free(ko), free(vo);
    if (c->sinks) rf_gpu_free(g_ctx, (void *)g_dsinks), g_dsinks = NULL;
}

static const int64_t g_dims[5] = {64, 80, 96, 128, 256};
static const int64_t g_shapes[8][2] = {{32, 8}, {9, 3}, {4, 1}, {14, 2}, {8, 8}, {4, 2}, {16, 2}, {12, 1}};
static const int64_t g_bss[4] = {1, 16, 32, 7};

/* Batches of <= 64 tokens (one token per block): every head dim x cache type, the GQA shapes,
 * block sizes, window / softcap in turn; three decode tokens (one at position 0), a 5-token
 * prompt chunk, a chunk crossing a split boundary, padding. */
static void test_mixed(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed());
    int i = 0;
    for (int di = 0; di < 5; di++)
        for (int f = 0; f < 3; f++) /* f32, f16, q8_0 (head dims that are multiples of 32; two variants) */
            for (int var = 0; var < 4; var++, i++) {
                /* RF_TEST_QUICK (sanitizer runs): one variant of each head dim and cache type */
                if (getenv("RF_TEST_QUICK") && var != (di + f) % 4) continue;
                if (f == 2 && (g_dims[di] % 32 || var % 2 != di % 2)) continue;
                pa_case c = {0};
                c.D = g_dims[di], c.f16 = f == 1, c.q8 = f == 2;
                /* every shape meets every head dim, feature and block size over the 40 cases */
                const int sh = (i / 4 + var * 2 + di) % 8;
                c.nh = g_shapes[sh][0], c.nhkv = g_shapes[sh][1];
                c.bs = g_bss[(i / 4 + var * 2) % 4];
                c.window = var & 1 ? rnd_int(&r, 1, 300) : 0;
                c.softcap = var & 2 ? 20.0f + 10.0f * rf_rng_uniform(&r) : 0.0f;
                c.n_seq = 5;
                const int32_t len[5] = {rnd_int(&r, 300, 700), 1, 40, rnd_int(&r, 2, 9), 250 + rnd_int(&r, 0, 12)};
                const int32_t nq[5] = {1, 1, 5, 1, 9};
                memcpy(c.len, len, sizeof len), memcpy(c.nq, nq, sizeof nq);
                c.n_pad = 2;
                c.shuffle = i % 3 == 0;
                c.qscale = i % 5 == 4 ? 8.0f : 1.0f;
                run_case(&r, &c);
            }
}

/* Batches of more than 64 tokens (several tokens per warp, blocks that walk all their splits):
 * prompt chunks next to decode tokens, shuffled or grouped, windows, every row width. */
static void test_prefill_batches(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 1);
    pa_case cs[6] = {0};
    /* llama3-8b shape: a chunk deep in a long prompt, a first chunk, three decodes, padding */
    cs[0] = (pa_case){.D = 128, .nh = 32, .nhkv = 8, .bs = 16, .f16 = true, .n_seq = 5,
                      .len = {1048, 20, 3001, 300, 1}, .nq = {48, 20, 1, 1, 1}, .n_pad = 3, .qscale = 1.0f};
    cs[1] = (pa_case){.D = 64, .nh = 14, .nhkv = 2, .bs = 1, .window = 100, .softcap = 30.0f, .n_seq = 3,
                      .len = {240, 530, 900}, .nq = {40, 30, 2}, .n_pad = 2, .shuffle = true, .qscale = 1.0f};
    cs[2] = (pa_case){.D = 256, .nh = 9, .nhkv = 3, .bs = 32, .f16 = true, .n_seq = 2,
                      .len = {70, 601}, .nq = {70, 1}, .n_pad = 1, .qscale = 1.0f};
    cs[3] = (pa_case){.D = 80, .nh = 4, .nhkv = 1, .bs = 16, .window = 37, .n_seq = 3,
                      .len = {33, 290, 1000}, .nq = {33, 33, 1}, .n_pad = 0, .qscale = 1.0f};
    cs[4] = (pa_case){.D = 96, .nh = 8, .nhkv = 8, .bs = 7, .f16 = true, .n_seq = 2,
                      .len = {80, 513}, .nq = {80, 3}, .n_pad = 2, .shuffle = true, .qscale = 4.0f};
    cs[5] = (pa_case){.D = 128, .nh = 16, .nhkv = 2, .bs = 32, .window = 300, .softcap = 50.0f, .n_seq = 4,
                      .len = {700, 66, 1200, 5}, .nq = {33, 66, 1, 5}, .n_pad = 4, .shuffle = true, .qscale = 1.0f};
    for (int i = 0; i < 6; i++) run_case(&r, &cs[i]);
    /* q8_0 caches: the llama3-8b chunk and the windowed, softcapped mix */
    cs[0].q8 = true, cs[5].q8 = true;
    run_case(&r, &cs[0]);
    run_case(&r, &cs[5]);
}

/* Long contexts: a single decode token (17 splits), 8 sequences of different depths, a window
 * over deep positions (split-relative partial states), one sequence of block size 1. */
static void test_long(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 2);
    pa_case c = {.D = 128, .nh = 32, .nhkv = 8, .bs = 16, .f16 = true, .n_seq = 1, .len = {4200}, .nq = {1},
                 .qscale = 1.0f};
    run_case(&r, &c);
    pa_case c8 = {.D = 128, .nh = 32, .nhkv = 8, .bs = 32, .n_seq = 8, .n_pad = 1, .qscale = 2.0f};
    for (int s = 0; s < 8; s++) c8.len[s] = rnd_int(&r, 900, 4200), c8.nq[s] = 1;
    run_case(&r, &c8);
    pa_case cw = {.D = 64, .nh = 4, .nhkv = 2, .bs = 1, .window = 700, .softcap = 40.0f, .f16 = true, .n_seq = 3,
                  .len = {3100, 2600, 800}, .nq = {1, 4, 1}, .n_pad = 1, .qscale = 1.0f};
    run_case(&r, &cw);
    pa_case cg = {.D = 256, .nh = 8, .nhkv = 1, .bs = 16, .n_seq = 2, .len = {2500, 1700}, .nq = {2, 1},
                  .qscale = 1.0f};
    run_case(&r, &cg);
    /* q8_0: the single deep decode token and the 8 sequences */
    c.q8 = true, c8.q8 = true;
    run_case(&r, &c);
    run_case(&r, &c8);
    /* short decode rows, one and two splits (depths < 256): one block a row group walks them
     * (RF_GPU_PA_ONE_BLOCK), where a larger max_pos (run_case's first invariance check) spreads
     * them over blocks and reduces; 70b-shaped (16 blocks a token) and 8b-shaped, f16 and q8_0 */
    pa_case cs = {.D = 128, .nh = 64, .nhkv = 8, .bs = 16, .f16 = true, .n_seq = 4, .len = {256, 129, 200, 17},
                  .nq = {1, 1, 1, 1}, .n_pad = 1, .qscale = 2.0f};
    run_case(&r, &cs);
    cs.nh = 32, cs.q8 = true, cs.len[0] = 255;
    run_case(&r, &cs);
}

/* Attention sinks: decode tokens of long sequences (keys split over blocks and reduced, per split
 * and per group), prompt chunks with padding, a sliding window; the same invariance checks. */
static void test_sinks(void **state) {
    (void)state;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 4);
    pa_case c8 = {.D = 64, .nh = 64, .nhkv = 8, .bs = 16, .f16 = true, .n_seq = 4, .n_pad = 1, .qscale = 1.0f,
                  .sinks = true};
    for (int s = 0; s < 4; s++) c8.len[s] = rnd_int(&r, 200, 4200), c8.nq[s] = 1;
    run_case(&r, &c8);
    pa_case cp = {.D = 64, .nh = 8, .nhkv = 2, .bs = 16, .f16 = true, .n_seq = 3, .len = {300, 90, 5},
                  .nq = {70, 1, 5}, .n_pad = 2, .shuffle = true, .qscale = 1.0f, .sinks = true};
    run_case(&r, &cp);
    pa_case cw = {.D = 64, .nh = 16, .nhkv = 2, .bs = 32, .window = 128, .n_seq = 3, .len = {3100, 200, 129},
                  .nq = {1, 4, 1}, .n_pad = 1, .qscale = 2.0f, .sinks = true};
    run_case(&r, &cw);
    pa_case cl = {.D = 128, .nh = 32, .nhkv = 8, .bs = 16, .f16 = true, .n_seq = 1, .len = {4200}, .nq = {1},
                  .qscale = 1.0f, .sinks = true};
    run_case(&r, &cl);
}

/* Only padding; a token past max_pos (contract violation: a NaN row, nothing read); no tokens;
 * bad arguments. */
static void test_edges(void **state) {
    (void)state;
    const int64_t D = 64, nh = 4, nhkv = 2, qd = nh * D;
    int32_t pos[3] = {-1, 5, -3}, seq[3] = {1 << 20, 0, 1 << 20}, tab[2] = {0, FAR_BLOCK};
    float q[3 * 4 * 64], got[3 * 4 * 64];
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 3);
    rf_rng_fill_normal(&r, q, 3 * qd, 1.0f);
    float kv[16 * 2 * 64];
    rf_rng_fill_normal(&r, kv, 16 * 2 * 64, 1.0f);
    float *dq = dev_from(q, sizeof q), *dout = dev_poison(sizeof got), *dk = dev_from(kv, sizeof kv);
    int32_t *dpos = dev_from(pos, sizeof pos), *dseq = dev_from(seq, sizeof seq), *dtab = dev_from(tab, sizeof tab);
    /* max_pos 4 < pos 5: token 1 gets NaN, the padding rows zeros */
    assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dk, RF_TYPE_F32, 3, dpos, dseq, dtab, 2, 16, nh,
                                            nhkv, D, 0.125f, 0, 0.0f, 4, NULL),
                     RF_OK);
    dev_to(got, dout, sizeof got);
    for (int64_t i = 0; i < qd; i++) {
        assert_true(((uint32_t *)got)[i] == 0u && ((uint32_t *)got)[2 * qd + i] == 0u);
        assert_true(isnan(got[qd + i]));
    }
    /* max_pos 5: token 1 is computed; rows of the others still zeros */
    assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dk, RF_TYPE_F32, 3, dpos, dseq, dtab, 2, 16, nh,
                                            nhkv, D, 0.125f, 0, 0.0f, 5, NULL),
                     RF_OK);
    dev_to(got, dout, sizeof got);
    float want[4 * 64];
    assert_int_equal(rf_ref_paged_attention(want, q + qd, kv, kv, 1, pos + 1, seq + 1, tab, 2, 16, nh, nhkv, D,
                                            0.125f, 0, 0.0f, NULL),
                     RF_OK);
    check_rel("edge: one token among padding", got + qd, want, (size_t)qd, 1e-5);
    for (int64_t i = 0; i < qd; i++) assert_true(((uint32_t *)got)[i] == 0u && ((uint32_t *)got)[2 * qd + i] == 0u);
    /* no tokens: nothing to do, nothing touched */
    assert_int_equal(rf_gpu_paged_attention(g_ctx, NULL, NULL, NULL, NULL, RF_TYPE_F32, 0, NULL, NULL, NULL, 1, 16,
                                            nh, nhkv, D, 0.125f, 0, 0.0f, 0, NULL),
                     RF_OK);
    /* bad arguments */
    assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dk, RF_TYPE_F32, 3, dpos, dseq, dtab, 2, 16, nh,
                                            nhkv, 72, 0.125f, 0, 0.0f, 5, NULL),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dk, RF_TYPE_F32, 3, dpos, dseq, dtab, 2, 16, 3,
                                            2, D, 0.125f, 0, 0.0f, 5, NULL),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dk, RF_TYPE_Q4_0, 3, dpos, dseq, dtab, 2, 16, nh,
                                            nhkv, D, 0.125f, 0, 0.0f, 5, NULL),
                     RF_ERR_INVALID_ARG);
    assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dk, RF_TYPE_Q8_0, 3, dpos, dseq, dtab, 2, 16, nh,
                                            nhkv, 80, 0.125f, 0, 0.0f, 5, NULL),
                     RF_ERR_INVALID_ARG); /* q8_0 blocks of 32 do not tile a head of 80 */
    assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dk, RF_TYPE_F32, 3, dpos, dseq, dtab, 2, 0, nh,
                                            nhkv, D, 0.125f, 0, 0.0f, 5, NULL),
                     RF_ERR_INVALID_ARG);
    rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dout), rf_gpu_free(g_ctx, dk);
    rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq), rf_gpu_free(g_ctx, dtab);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Short-depth decode timing (informative, never fails): llama3-8b (32 heads / 8 kv heads) and
 * llama2-70b (64 / 8) shapes, head 128, f16 and q8_0 caches, 1 and 8 sequences at depths 16 / 64
 * / 256 / 1024, each call with max_pos = 1023 (a graph step's bound in the 1,024-key depth
 * bucket, rf_depth_bucket_keys: 8 splits over gridDim.z, then the reduce kernel) and with max_pos
 * = depth - 1 (in the 256-key bucket, depths up to 256: one block a row group walks the row,
 * RF_GPU_PA_ONE_BLOCK, mode TOTAL; 1,024: the split form again); the 70b shape also with 8 rows
 * per warp (70b8, the former decode cap: test hook gpu_pa_rows). Microseconds per call
 * (rf_k_paged_attn and its reduce when launched), by device events:
 *   b2b  200 calls back to back, total / 200 (the kernels' device time with launch gaps);
 *   one  a call alone between two events, the stream idle before it (median of 30);
 *   cold the same after a call of the other cache type's kernel (f16 <-> q8_0: ~80-130 KB of other
 *        code through the SMs' instruction caches) and a 256 MiB memset that evicts L2 (the
 *        kernels' code and the K/V with it), as a step's other kernels and weight reads do
 *        between two layers' attention; median of 10. The kernels are 5-8k instructions (R = 4:
 *        ~79 KB, R = 8: ~122 KB of code, sm_90), much of it run once on a short row's path;
 *   wall host time of the launch and a sync (median of 30).
 * Floor rows: the same four for one and for two 1-element rf_gpu_scale launches (an empty kernel's
 * fixed cost), so the rows above read as floor + the kernel's own chain. dk/dv (f16) and qk/qv
 * (q8_0, NULL: skipped) are pools of pool_pos positions for 8 kv heads x 128, perm nblk shuffled
 * blocks of 16. */
static void time_short(void *dk, void *dv, void *qk, void *qv, const int32_t *perm, int64_t nblk, const float *dq,
                       float *dout) {
    const int64_t D = 128, nhkv = 8, bs = 16, maxb = 1024 / bs; /* a table of 1024 keys: pmax up to 1023 */
    enum { NB2B = 200, NONE = 30, NCOLD = 10 };
    void *tm = NULL, *flush = NULL;
    const size_t fbytes = (size_t)256 << 20;
    if (rf_gpu_alloc(g_ctx, fbytes, &flush)) flush = NULL; /* no room: no cold column */
    double v[NONE];
    float *fx = dev_poison(64), *fy = dev_poison(64);
    assert_int_equal(rf_gpu_memset(g_ctx, fx, 0, 64), RF_OK);
    fprintf(stderr, "  short-depth decode, head 128, blocks of 16: us per call (kernel + reduce), device events; "
                    "bucket: max_pos 1023 (a graph step), real: max_pos depth - 1 (eager)\n");
    fprintf(stderr, "  %-5s %-4s %4s %5s | %7s %7s %7s %7s | %7s %7s %7s %7s\n", "short", "kv", "seqs", "depth",
            "bkt b2b", "one", "cold", "wall", "real b2b", "one", "cold", "wall");
    /* floor: one / two empty kernels */
    for (int nk = 1; nk <= 2; nk++) {
        double col[4];
        for (int w = 0; w < 5; w++) assert_int_equal(rf_gpu_scale(g_ctx, fy, fx, 1.0f, 1), RF_OK);
        assert_int_equal(rf_gpu_timer_start(g_ctx, &tm), RF_OK);
        for (int i = 0; i < NB2B; i++)
            for (int k = 0; k < nk; k++) assert_int_equal(rf_gpu_scale(g_ctx, fy, fx, 1.0f, 1), RF_OK);
        assert_int_equal(rf_gpu_timer_stop(g_ctx, tm, &col[0]), RF_OK);
        col[0] /= NB2B;
        for (int c = 1; c < 4; c++) {
            const int n = c == 2 ? NCOLD : NONE;
            col[c] = -1;
            if (c == 2 && !flush) continue;
            for (int i = 0; i < n; i++) {
                if (c == 2) assert_int_equal(rf_gpu_memset(g_ctx, flush, i & 0xff, fbytes), RF_OK);
                assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                const double t0 = now_s();
                if (c != 3) assert_int_equal(rf_gpu_timer_start(g_ctx, &tm), RF_OK);
                for (int k = 0; k < nk; k++) assert_int_equal(rf_gpu_scale(g_ctx, fy, fx, 1.0f, 1), RF_OK);
                if (c != 3) {
                    assert_int_equal(rf_gpu_timer_stop(g_ctx, tm, &v[i]), RF_OK);
                } else {
                    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                    v[i] = (now_s() - t0) * 1e6;
                }
            }
            qsort(v, (size_t)n, sizeof(double), cmp_double);
            col[c] = v[n / 2];
        }
        fprintf(stderr, "  %-5s %-4s %4d %5s | %7.1f %7.1f %7.1f %7.1f |\n", nk == 1 ? "floor" : "floor2", "-", nk, "-",
                col[0], col[1], col[2], col[3]);
    }
    /* shapes: 8b (R 4 rows per warp), 70b8 (R 8: the former decode cap, test hook gpu_pa_rows), 70b
     * (the default cap 4: two blocks per kv head, the R = 4 kernel's code, ~2/3 of R = 8's; the
     * same bits) */
    const int shapes[3] = {32, 64, 64}, nss[2] = {1, 8}, depths[4] = {16, 64, 256, 1024};
    const char *sname[3] = {"8b", "70b8", "70b"};
    int32_t hpos[8], hsq[8];
    for (int si = 0; si < 3; si++)
        for (int ti = 0; ti < 2; ti++) {
            if (ti && !qk) continue;
            const rf_test_hooks r8 = {.gpu_pa_rows = 8};
            rf_test_hooks_set(si == 1 ? &r8 : NULL);
            const rf_type kt = ti ? RF_TYPE_Q8_0 : RF_TYPE_F16;
            void *k = ti ? qk : dk, *vv = ti ? qv : dv;
            const int64_t nh = shapes[si];
            const float scale = 1.0f / sqrtf((float)D);
            for (int bi = 0; bi < 2; bi++) {
                const int ns = nss[bi];
                const int64_t need = ns * maxb;
                int64_t nrot = nblk / need;
                if (nrot > 128) nrot = 128;
                int32_t *dtab = dev_from(perm, (size_t)(nrot * need) * 4);
                for (int s = 0; s < ns; s++) hsq[s] = s;
                int32_t *dseq = dev_from(hsq, (size_t)ns * 4);
                for (int di = 0; di < 4; di++) {
                    const int depth = depths[di];
                    for (int s = 0; s < ns; s++) hpos[s] = depth - 1;
                    int32_t *dpos = dev_from(hpos, (size_t)ns * 4);
                    double col[2][4];
                    int call = 0;
#define RF_SHORT_CALL(mp)                                                                                          \
    assert_int_equal(rf_gpu_paged_attention_hint(g_ctx, dout, dq, k, vv, kt, ns, dpos, dseq,                       \
                                                 dtab + (call++ % nrot) * need, maxb, bs, nh, nhkv, D, scale, 0,   \
                                                 0.0f, (mp), NULL, true),                                          \
                     RF_OK)
                    for (int mi = 0; mi < 2; mi++) {
                        const int64_t mp = mi ? depth - 1 : 1023;
                        for (int w = 0; w < 5; w++) RF_SHORT_CALL(mp);
                        assert_int_equal(rf_gpu_timer_start(g_ctx, &tm), RF_OK);
                        for (int i = 0; i < NB2B; i++) RF_SHORT_CALL(mp);
                        assert_int_equal(rf_gpu_timer_stop(g_ctx, tm, &col[mi][0]), RF_OK);
                        col[mi][0] /= NB2B;
                        for (int c = 1; c < 4; c++) {
                            const int n = c == 2 ? NCOLD : NONE;
                            col[mi][c] = -1;
                            if (c == 2 && !flush) continue;
                            for (int i = 0; i < n; i++) {
                                if (c == 2 && qk) /* the other cache type's kernel: other code in the SMs' caches */
                                    assert_int_equal(rf_gpu_paged_attention_hint(g_ctx, dout, dq, ti ? dk : qk,
                                                                                 ti ? dv : qv,
                                                                                 ti ? RF_TYPE_F16 : RF_TYPE_Q8_0, ns,
                                                                                 dpos, dseq, dtab, maxb, bs, nh, nhkv,
                                                                                 D, scale, 0, 0.0f, mp, NULL, true),
                                                     RF_OK);
                                if (c == 2) assert_int_equal(rf_gpu_memset(g_ctx, flush, i & 0xff, fbytes), RF_OK);
                                assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                                const double t0 = now_s();
                                if (c != 3) assert_int_equal(rf_gpu_timer_start(g_ctx, &tm), RF_OK);
                                RF_SHORT_CALL(mp);
                                if (c != 3) {
                                    assert_int_equal(rf_gpu_timer_stop(g_ctx, tm, &v[i]), RF_OK);
                                } else {
                                    assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                                    v[i] = (now_s() - t0) * 1e6;
                                }
                            }
                            qsort(v, (size_t)n, sizeof(double), cmp_double);
                            col[mi][c] = v[n / 2];
                        }
                    }
#undef RF_SHORT_CALL
                    fprintf(stderr, "  %-5s %-4s %4d %5d | %7.1f %7.1f %7.1f %7.1f | %7.1f %7.1f %7.1f %7.1f\n",
                            sname[si], ti ? "q8_0" : "f16", ns, depth, col[0][0], col[0][1], col[0][2],
                            col[0][3], col[1][0], col[1][1], col[1][2], col[1][3]);
                    rf_gpu_free(g_ctx, dpos);
                }
                rf_gpu_free(g_ctx, dtab), rf_gpu_free(g_ctx, dseq);
            }
            rf_test_hooks_set(NULL);
        }
    rf_gpu_timer_destroy(tm);
    if (flush) rf_gpu_free(g_ctx, flush);
    rf_gpu_free(g_ctx, fx), rf_gpu_free(g_ctx, fy);
}

/* Timing (informative, never fails): llama3-8b attention shape over a pool of 64 x 4096
 * positions (1 GiB of K/V); each call of a decode case reads a different set of blocks (block
 * tables rotate over the pool) so that small cases do not run from L2; the largest (256 x 1024)
 * covers the whole pool, 1 GiB, far past L2. Microseconds per call are
 * wall time of back-to-back calls (two launches when the keys are split and reduced). */
static void test_timing(void **state) {
    if (getenv("RF_TEST_QUICK")) skip(); /* timing means nothing under a sanitizer */
    (void)state;
    const int64_t D = 128, nh = 32, nhkv = 8, bs = 16, kvd = nhkv * D;
    const int64_t pool_pos = 64 * 4096, nblk = pool_pos / bs;
    void *dk = NULL, *dv = NULL;
    if (rf_gpu_alloc(g_ctx, (size_t)(pool_pos * kvd) * 2, &dk) || rf_gpu_alloc(g_ctx, (size_t)(pool_pos * kvd) * 2, &dv)) {
        fprintf(stderr, "  timing skipped: no room for a 1 GiB K/V pool (%s)\n", rf_last_error());
        if (dk) rf_gpu_free(g_ctx, dk);
        return;
    }
    assert_int_equal(rf_gpu_memset(g_ctx, dk, 0x2c, (size_t)(pool_pos * kvd) * 2), RF_OK); /* f16 ~0.07 */
    assert_int_equal(rf_gpu_memset(g_ctx, dv, 0x3c, (size_t)(pool_pos * kvd) * 2), RF_OK); /* f16 ~1.06 */
    double bw = 0;
    if (rf_gpu_bench_read_bw(g_ctx, (size_t)1 << 30, 5, &bw)) bw = 0;
    rf_rng r;
    rf_rng_init(&r, rf_test_seed() + 4);
    int32_t *perm = malloc((size_t)nblk * 4);
    for (int64_t i = 0; i < nblk; i++) perm[i] = (int32_t)i;
    shuffle_i32(&r, perm, nblk);
    float *q = host_f32((size_t)(512 * nh * D));
    rf_rng_fill_normal(&r, q, (size_t)(512 * nh * D), 1.0f);
    float *dq = dev_from(q, (size_t)(512 * nh * D) * 4), *dout = dev_poison((size_t)(512 * nh * D) * 4);
    const float scale = 1.0f / sqrtf((float)D);
    double t_start = 0;
    fprintf(stderr, "  paged attention, llama3-8b shape (32 heads / 8 kv heads x 128, f16 K/V, blocks of 16)%s\n",
            bw > 0 ? "" : " (read bandwidth not measured)");
    if (bw > 0) fprintf(stderr, "  device read bandwidth %.0f GB/s\n", bw);
    void *qk = NULL, *qv = NULL;
    const size_t qbytes = (size_t)pool_pos * (size_t)(kvd / 32 * 34);
    if (rf_gpu_alloc(g_ctx, qbytes, &qk) || rf_gpu_alloc(g_ctx, qbytes, &qv)) {
        fprintf(stderr, "  q8_0 timing skipped: no room for the q8_0 pool (%s)\n", rf_last_error());
        if (qk) rf_gpu_free(g_ctx, qk);
        qk = qv = NULL;
    } else {
        assert_int_equal(rf_gpu_memset(g_ctx, qk, 0x2c, qbytes), RF_OK); /* d ~0.065, q 44 */
        assert_int_equal(rf_gpu_memset(g_ctx, qv, 0x1c, qbytes), RF_OK); /* d ~0.004, q 28 */
    }
    /* decode rows (one token per sequence, every sequence at the same depth; the hint decode, as
     * the engine gives it), f16 and q8_0 K/V (q8_0 reads 34 bytes per 32 elements where f16 reads
     * 64), the kernels as now ("new") and as before the decode speed-up ("old": test hook
     * gpu_pa_old, which also ignores the hint as the former host did; the same bits) */
    fprintf(stderr, "  %-6s %5s %6s %9s %9s %9s %9s %7s %7s\n", "decode", "seqs", "depth", "old us", "plain us", "new us",
            "new GB/s", "old bw", "new bw");
    const int dcase[9][2] = {{1, 512}, {1, 4096}, {1, 16384}, {64, 256}, {128, 256}, {256, 256},
                             {64, 1024}, {128, 1024}, {256, 1024}};
    int32_t *hpos = malloc(256 * 4), *hsq = malloc(256 * 4);
    for (int ti = 0; ti < 2; ti++) {
        if (ti && !qk) break;
        const rf_type kt = ti ? RF_TYPE_Q8_0 : RF_TYPE_F16;
        void *k = ti ? qk : dk, *v = ti ? qv : dv;
        for (int ci = 0; ci < 9; ci++) {
            const int ns = dcase[ci][0], depth = dcase[ci][1];
            const int64_t maxb = depth / bs, need = ns * maxb;
            int64_t nrot = nblk / need;
            if (nrot > 128) nrot = 128;
            int32_t *dtab = dev_from(perm, (size_t)(nrot * need) * 4);
            for (int s = 0; s < ns; s++) hpos[s] = depth - 1, hsq[s] = s;
            int32_t *dpos = dev_from(hpos, (size_t)ns * 4), *dseq = dev_from(hsq, (size_t)ns * 4);
            const double bytes = (double)ns * depth * kvd * 2 * (ti ? 34.0 / 32.0 : 2.0);
            int reps = (int)(4e9 / bytes);
            if (reps < 50) reps = 50;
            if (reps > 2000) reps = 2000;
            double us[3];
            for (int oi = 0; oi < 3; oi++) { /* 0: old, 1: plain (unstaged, with L2 prefetch), 2: new */
                const rf_test_hooks oh = {.gpu_pa_old = true}, ph = {.gpu_pa_nostage = true};
                rf_test_hooks_set(oi == 0 ? &oh : oi == 1 ? &ph : NULL);
                for (int i = 0; i < reps + 3; i++) {
                    if (i == 3) {
                        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                        t_start = now_s();
                    }
                    assert_int_equal(rf_gpu_paged_attention_hint(g_ctx, dout, dq, k, v, kt, ns, dpos, dseq,
                                                                 dtab + (i % nrot) * need, maxb, bs, nh, nhkv, D,
                                                                 scale, 0, 0.0f, depth - 1, NULL, true),
                                     RF_OK);
                }
                assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
                us[oi] = (now_s() - t_start) / reps * 1e6;
            }
            rf_test_hooks_set(NULL);
            const double gbs = bytes / (us[2] * 1e-6) / 1e9, gbo = bytes / (us[0] * 1e-6) / 1e9;
            char fo[16] = "-", fn[16] = "-";
            if (bw > 0) snprintf(fo, sizeof fo, "%.0f%%", 100.0 * gbo / bw), snprintf(fn, sizeof fn, "%.0f%%", 100.0 * gbs / bw);
            fprintf(stderr, "  %-6s %5d %6d %9.1f %9.1f %9.1f %9.0f %7s %7s\n", ti ? "q8_0" : "f16", ns, depth, us[0],
                    us[1], us[2], gbs, fo, fn);
            rf_gpu_free(g_ctx, dtab), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq);
        }
    }
    free(hpos), free(hsq);
    time_short(dk, dv, qk, qv, perm, nblk, dq, dout);
    if (qk) rf_gpu_free(g_ctx, qk), rf_gpu_free(g_ctx, qv);
    /* one 512-token prompt chunk of one sequence: positions 0..511 and 3584..4095 */
    for (int di = 0; di < 2; di++) {
        const int depth = di ? 4096 : 512, nt = 512;
        const int64_t maxb = depth / bs;
        int32_t *pos = malloc(nt * 4), *sq = malloc(nt * 4);
        for (int t = 0; t < nt; t++) pos[t] = depth - nt + t, sq[t] = 0;
        int32_t *dtab = dev_from(perm, (size_t)maxb * 4), *dpos = dev_from(pos, (size_t)nt * 4);
        int32_t *dseq = dev_from(sq, (size_t)nt * 4);
        double flops = 0;
        for (int t = 0; t < nt; t++) flops += 4.0 * nh * D * (pos[t] + 1);
        const int reps = 10;
        assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dv, RF_TYPE_F16, nt, dpos, dseq, dtab, maxb, bs,
                                                nh, nhkv, D, scale, 0, 0.0f, depth - 1, NULL),
                         RF_OK);
        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
        const double t0 = now_s();
        for (int i = 0; i < reps; i++)
            assert_int_equal(rf_gpu_paged_attention(g_ctx, dout, dq, dk, dv, RF_TYPE_F16, nt, dpos, dseq, dtab, maxb,
                                                    bs, nh, nhkv, D, scale, 0, 0.0f, depth - 1, NULL),
                             RF_OK);
        assert_int_equal(rf_gpu_sync(g_ctx), RF_OK);
        const double us = (now_s() - t0) / reps * 1e6;
        fprintf(stderr, "  %-8s %5d %6d %10.1f   (%d tokens, %.1f TFLOP/s)\n", "prefill", 1, depth, us, nt,
                flops / (us * 1e-6) / 1e12);
        rf_gpu_free(g_ctx, dtab), rf_gpu_free(g_ctx, dpos), rf_gpu_free(g_ctx, dseq);
        free(pos), free(sq);
    }
    rf_gpu_free(g_ctx, dk), rf_gpu_free(g_ctx, dv), rf_gpu_free(g_ctx, dq), rf_gpu_free(g_ctx, dout);
    free(perm), free(q);
}

int main(void) {
    gpu_test_init_or_skip("test_gpu_paged_attention");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_prefill_batches),
        cmocka_unit_test(test_long),
        cmocka_unit_test(test_sinks),
        cmocka_unit_test(test_timing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rf_gpu_destroy(g_ctx);
    return rc;
}
#endif
