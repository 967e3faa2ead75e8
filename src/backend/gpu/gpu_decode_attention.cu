/* gpu_decode_attention.cu — decode attention at long depth on the tensor cores: a query token's
 * rows against its sequence's paged f16 or q8_0 K/V, the query heads of a kv head (the GQA group,
 * up to 8) as the 8 columns of mma.sync m16n8k16 and 16 keys as its rows, the keys split over
 * blocks so that one sequence fills the device, the splits merged in a fixed order. CUDA sm_80+
 * only (elsewhere rf_gpu_decode_attention_supported is false). Twin: rf_ref_paged_attention. */
#include "core/knobs.h"
#include "backend/gpu/gpu_mma.cuh"
#include "backend/gpu/gpu_paged_attention.cuh"

#include <limits.h>

#define RF_DA_WARPS 4   /* a split's keys are a multiple of RF_DA_WARPS chunks (rf_da_split) */
#define RF_DA_CH 16     /* keys per chunk: the mma's 16 rows */
#define RF_DA_SMIN 256  /* keys per split at least */
#define RF_DA_ZMAX 32   /* splits per row at most */
/* Partial states a call may need at most (bytes, counting RF_DA_ZMAX splits a row whatever the
 * depth, so that the answer depends on the call's token and head counts only, the same for a
 * graph step recorded at max_pos = n_ctx - 1 and the eager step): else the paged kernel. 256 MiB:
 * ~480 decode tokens of llama3-8b's 32 heads of 128. */
#define RF_DA_SCRATCH (256u << 20)

/* Keys per split of a row that sees n keys: the fewest that leave at most RF_DA_ZMAX splits,
 * rounded up to RF_DA_WARPS chunks of RF_DA_CH keys (so the 4 warps of an f16 block get equal
 * chunks, the 8 of a q8_0 block equal or one fewer), at least RF_DA_SMIN. Not a power of two:
 * with 256 * 2^i a row just past 16,384 keys got 17 splits of 1,024 (half the device idle, each
 * block twice the keys: 56.8 us a call in the engine at 16,385 .. 16,400 keys against 34.6 us at
 * 16,384); now 29 of 576. A function of n alone, so a row's splits, and with them its arithmetic,
 * do not depend on what else is in the call. */
static __host__ __device__ __forceinline__ int rf_da_split(int n) {
    constexpr int R = RF_DA_WARPS * RF_DA_CH;
    const int S = ((n + RF_DA_ZMAX - 1) / RF_DA_ZMAX + R - 1) / R * R;
    return S > RF_DA_SMIN ? S : RF_DA_SMIN;
}

/* A block's W warps (each walking its own chunks of the block's split) and their shared memory,
 * per warp: NST stages of a chunk's K and V (f16: tiles [16][QS] halves, copied as they are; q8_0:
 * the raw head rows, RBP bytes apart, dequantized from there into registers), and the chunk's P^T
 * [8 heads][PSS] in f16. After the walk the same bytes hold the warps' states for the block's
 * merge: [W][8][D] f32 + [W][8] float2. D = 128: f16 4 warps, 106 KB; q8_0 8 warps, 111 KB: two
 * blocks an SM on sm_90 either way. One sequence at 16,384 keys is 8 kv heads x 32 splits = 256
 * blocks, about the device's 2 x 132 resident ones, so more warps a block, not more blocks an SM,
 * is what puts more warps on an SM at batch 1 (q8_0: 16 instead of 8, each with 2 chunks in
 * flight: ~140 KB an SM against the ~30 KB that ~4 TB/s x ~1 us asks for). */
template <int D, bool Q8> struct rf_da_geo {
    static constexpr int QS = D + 8; /* the 8 rows of an ldmatrix fall in different banks */
    static constexpr int TILE = 2 * RF_DA_CH * QS;      /* halves: K then V of one chunk */
    static constexpr int RB = D / 32 * 34;               /* q8_0 bytes of a head row */
    static constexpr int RBP = (RB + 15) / 16 * 16;
    static constexpr int GR = RB % 8 == 0 ? 8 : 4;       /* bytes per q8_0 copy (rows are 2-byte blocks) */
    static constexpr int W = Q8 ? 8 : 4;
    static constexpr int NST = Q8 && D == 64 ? 4 : 3;
    static constexpr int STAGE = Q8 ? 2 * RF_DA_CH * RBP : TILE * 2; /* bytes */
    static constexpr int PSS = 24;
    static constexpr int PS_OFF = NST * STAGE;
    static constexpr int WARP_BYTES = PS_OFF + 8 * PSS * 2;
    /* the merge's state rows: f16 D floats apart, dim d at d; q8_0 OMS apart, dim d at d + d / 32,
     * so that the stores of an o[mt] (dims D/8 g + 2mt of rows 2c: 16 g apart, a 16-way bank
     * conflict unpadded) hit 32 different banks */
    static constexpr int OMS = !Q8 ? D : D == 128 ? 146 : 65;
    static constexpr int MERGE_BYTES = W * (8 * OMS * 4 + 8 * 8);
    static constexpr int SMEM = W * WARP_BYTES > MERGE_BYTES ? W * WARP_BYTES : MERGE_BYTES;
    static_assert(WARP_BYTES % 16 == 0 && STAGE % 16 == 0 && (D == 64 || D == 128), "decode attention geometry");
};

#if !defined(RF_HIP)
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* rf_mma_f16, rf_pack_h2, rf_ldsm4, rf_ldsm4_t: gpu_mma.cuh */
/* N bytes global -> shared (smem address s), asynchronously; zeros when !ok (nothing read) */
template <int N> static __device__ __forceinline__ void rf_da_cp(unsigned s, const void *g, bool ok) {
    if constexpr (N == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(g), "r"(ok ? 16 : 0) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(s), "l"(g), "n"(N), "r"(ok ? N : 0)
                     : "memory");
}

/* Lane l < 16: the cache block of key kb + l from the sequence's block-table row btr (0 past k1
 * and for the other lanes): only the load, its value first used by rf_da_load a chunk later.
 * bsh: log2(bs) where bs is a power of two (no division), else -1. */
static __device__ __forceinline__ int rf_da_blk(const int32_t *btr, int bs, int bsh, int kb, int k1, int lane) {
    const int key = kb + lane;
    int blk = 0;
    if (lane < RF_DA_CH && key <= k1) blk = btr[bsh >= 0 ? key >> bsh : key / bs];
    return blk;
}

/* A warp's chunk of keys kb .. kb + 15 (those <= k1; the others zero-filled) into the stage at
 * smem address sa: K then V, each key's head row (f16: the tile rows; q8_0: the raw bytes), lane
 * l < 16's key in cache block blk (rf_da_blk, looked up a chunk earlier); every lane copies. */
template <int D, bool Q8>
static __device__ __forceinline__ void rf_da_load(unsigned sa, const void *kcv, const void *vcv, int blk, int bs,
                                                  int bsh, int kb, int k1, int n_head_kv, int hk, int lane) {
    typedef rf_da_geo<D, Q8> C;
    constexpr int CH = RF_DA_CH;
    const int key = kb + (lane & 15); /* its cache row (lanes 0 .. 15 are read) */
    const int ph = bsh >= 0 ? (blk << bsh) + (key & (bs - 1)) : blk * bs + key % bs;
    if constexpr (!Q8) {
        /* a row is PC 16-byte pieces: lane l copies piece l % PC of the K and V rows of keys
         * l / PC + RPI i (RPI = 32 / PC rows an instruction, each read whole) */
        constexpr int PC = D / 8, RPI = 32 / PC;
        const int64_t rs = (int64_t)n_head_kv * D, ho = (int64_t)hk * D;
        const int pc = lane % PC, rq = lane / PC;
#pragma unroll
        for (int i = 0; i < CH / RPI; i++) {
            const int r = rq + RPI * i;
            const int prow = __shfl_sync(0xffffffffu, ph, r);
            const bool ok = kb + r <= k1;
            const int64_t off = ok ? prow * rs + ho + pc * 8 : 0;
#pragma unroll
            for (int kv = 0; kv < 2; kv++) {
                const rf_half *src = (const rf_half *)(kv ? vcv : kcv) + off;
                rf_da_cp<16>(sa + (unsigned)(((kv * CH + r) * C::QS + pc * 8) * 2), src, ok);
            }
        }
    } else {
        /* a row is NPC = 17 pieces of GR bytes (D 128: 8, D 64: 4). Lane l copies pieces sub,
         * sub + 8 (and 16 where sub = 0; sub = l % 8) of the K and V rows of keys rq, rq + 4,
         * rq + 8, rq + 12 (rq = l / 8): so 4 shuffles a chunk, not one a copy, and each copy
         * instruction reads 4 rows of 8 GR contiguous bytes. The bytes land where they did. */
        constexpr int GR = C::GR, NPC = C::RB / GR;
        static_assert(NPC == 17, "a q8_0 head row is 17 pieces of GR bytes");
        const int64_t rs = (int64_t)n_head_kv * C::RB, ho = (int64_t)hk * C::RB; /* bytes */
        const int sub = lane & 7, rq = lane >> 3;
#pragma unroll
        for (int i = 0; i < CH / 4; i++) {
            const int r = rq + 4 * i;
            const int prow = __shfl_sync(0xffffffffu, ph, r);
            const bool ok = kb + r <= k1;
            const int64_t off = ok ? prow * rs + ho + sub * GR : 0;
#pragma unroll
            for (int kv = 0; kv < 2; kv++) {
                const unsigned char *src = (const unsigned char *)(kv ? vcv : kcv) + off;
                const unsigned dst = sa + (unsigned)((kv * CH + r) * C::RBP + sub * GR);
                rf_da_cp<GR>(dst, src, ok);
                rf_da_cp<GR>(dst + 8 * GR, src + (ok ? 8 * GR : 0), ok);
                if (sub == 0) rf_da_cp<GR>(dst + 16 * GR, src + (ok ? 16 * GR : 0), ok);
            }
        }
    }
}

/* q8_0: the 4 quants of word w (bytes in row order) times their block's scale d2, as two f16
 * pairs (lo: the first two, hi: the last two; the lower element in the low half): f16(d * q) with
 * d * q computed exactly (q as the f16 1024 + (q + 128) less 1152, exact for integers; one
 * rounding in __hmul2), the values rf_k_flash_prefill's q8_0 path puts into its tiles. */
static __device__ __forceinline__ void rf_da_deq4(uint32_t w, __half2 d2, uint32_t &lo, uint32_t &hi) {
    const __half2 bias = __floats2half2_rn(1152.0f, 1152.0f);
    const uint32_t qw = w ^ 0x80808080u;
    const uint32_t l = __byte_perm(qw, 0x64646464u, 0x4140), h = __byte_perm(qw, 0x64646464u, 0x4342);
    const __half2 x = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&l), bias), d2);
    const __half2 y = __hmul2(__hsub2(*reinterpret_cast<const __half2 *>(&h), bias), d2);
    lo = *reinterpret_cast<const uint32_t *>(&x), hi = *reinterpret_cast<const uint32_t *>(&y);
}

/* One chunk of a warp (keys kb .. kb + 15, those > k1 masked; st: its stage):
 * S^T = K Q^T on the tensor cores (thread (g, c) holds keys g and g + 8 of heads 2c and 2c + 1),
 * scaled, softcapped and masked; the running maxima (m0, m1) and this thread's partial sums
 * (l0, l1) of its two heads and the accumulator o rescaled; P rounded to f16, through Ps into the
 * B fragment of P^T; O^T += V^T P^T. o[mt] holds O^T rows (dims) A and B of heads 2c, 2c + 1:
 * f16 (tiles K, V [16][QS] in the stage, read by ldmatrix): A = mt * 16 + g, B = A + 8; q8_0 (the
 * raw rows in the stage, dequantized straight into the A fragments, no f16 tile): A = D/8 * g + 2mt,
 * B = A + 1, so that a thread's V elements are D/8 consecutive quants of a key (one block). The
 * fragments hold the same f16 values at the same k positions as the f16 tile's ldmatrix would
 * (S: dims in order; P^T V: keys in order, only the dims' rows permuted): the same arithmetic. */
template <int D, bool Q8>
static __device__ __forceinline__ void rf_da_chunk(float (&o)[D / 16][4], float &m0, float &m1, float &l0, float &l1,
                                                   const uint32_t (&qb)[D / 16][2], const unsigned char *st,
                                                   rf_half *Ps, int kb, int k1, float scale, float softcap, int lane) {
    constexpr int QS = D + 8, NK = D / 16, PSS = 24, CH = RF_DA_CH;
    constexpr int RBP = rf_da_geo<D, Q8>::RBP, DG = D / 8, NW = DG / 4;
    const int g = lane >> 2, c = lane & 3;
    const rf_half *Ks = reinterpret_cast<const rf_half *>(st), *Vs = Ks + CH * QS; /* f16 */
    const unsigned char *Kr = st, *Vr = st + CH * RBP;                           /* q8_0 rows */
    /* q8_0 V: keys 2c, 2c + 1, 2c + 8, 2c + 9 (j = 0..3), quants DG * g .. + DG - 1 (of block vbk,
     * at byte vo of the row: 2-byte aligned, read as NW + 1 words from vo & ~3 and shifted by
     * vsh), loaded before S so that their latency hides behind it */
    const int vbk = DG * g / 32, vo = 34 * vbk + 2 + DG * g % 32, vsh = (vo & 2) * 8;
    uint32_t vw[4][NW + 1];
    __half2 vd[4];
    if constexpr (Q8) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const unsigned char *row = Vr + (2 * c + (j & 1) + 8 * (j >> 1)) * RBP;
            vd[j] = __half2half2(*reinterpret_cast<const __half *>(row + 34 * vbk));
            const uint32_t *w = reinterpret_cast<const uint32_t *>(row + (vo & ~3));
#pragma unroll
            for (int i = 0; i <= NW; i++) vw[j][i] = w[i];
        }
    }
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (Q8) {
        /* K: rows g, g + 8 (r = 0, 1), block b's quants 2c, 2c + 1 (+ 8, + 16, + 24): the A
         * fragments of k-steps 2b (the first two pairs) and 2b + 1 */
#pragma unroll
        for (int b = 0; b < D / 32; b++) {
            uint32_t a0[4], a1[4];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const unsigned char *row = Kr + (g + 8 * r) * RBP + 34 * b;
                const __half2 d2 = __half2half2(*reinterpret_cast<const __half *>(row));
                const unsigned short *q = reinterpret_cast<const unsigned short *>(row + 2 + 2 * c);
                const uint32_t w01 = (uint32_t)q[0] | (uint32_t)q[4] << 16;
                const uint32_t w23 = (uint32_t)q[8] | (uint32_t)q[12] << 16;
                rf_da_deq4(w01, d2, a0[r], a0[2 + r]);
                rf_da_deq4(w23, d2, a1[r], a1[2 + r]);
            }
            rf_mma_f16(s, a0, qb[2 * b][0], qb[2 * b][1]);
            rf_mma_f16(s, a1, qb[2 * b + 1][0], qb[2 * b + 1][1]);
        }
    } else {
#pragma unroll
        for (int ks = 0; ks < NK; ks++) {
            uint32_t a[4];
            rf_ldsm4(a, Ks + ((lane & 7) + ((lane >> 3) & 1) * 8) * QS + ks * 16 + (lane >> 4) * 8);
            rf_mma_f16(s, a, qb[ks][0], qb[ks][1]);
        }
    }
    const bool va = kb + g <= k1, vb = kb + g + 8 <= k1; /* key kb <= k1 always: the maxima are finite */
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float x = s[e] * scale;
        if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
        s[e] = (e < 2 ? va : vb) ? x : -INFINITY;
    }
    float x0 = fmaxf(s[0], s[2]), x1 = fmaxf(s[1], s[3]);
#pragma unroll
    for (int m = 4; m < 32; m *= 2) {
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, m));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, m));
    }
    const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
    const float f0 = __expf(m0 - n0), f1 = __expf(m1 - n1); /* m = -inf (nothing yet): 0 */
    m0 = n0, m1 = n1;
    const float p0 = __expf(s[0] - n0), p1 = __expf(s[1] - n1), p2 = __expf(s[2] - n0), p3 = __expf(s[3] - n1);
    l0 = l0 * f0 + (p0 + p2);
    l1 = l1 * f1 + (p1 + p3);
    /* past the first chunks the maxima rarely move: skip the rescale where every factor is 1
     * (a multiplication by 1 changes no bit) */
    if (__any_sync(0xffffffffu, f0 != 1.0f || f1 != 1.0f)) {
#pragma unroll
        for (int mt = 0; mt < NK; mt++) o[mt][0] *= f0, o[mt][1] *= f1, o[mt][2] *= f0, o[mt][3] *= f1;
    }
    Ps[(2 * c) * PSS + g] = __float2half_rn(p0);
    Ps[(2 * c + 1) * PSS + g] = __float2half_rn(p1);
    Ps[(2 * c) * PSS + g + 8] = __float2half_rn(p2);
    Ps[(2 * c + 1) * PSS + g + 8] = __float2half_rn(p3);
    __syncwarp();
    const uint32_t b0 = *reinterpret_cast<const uint32_t *>(Ps + g * PSS + 2 * c);
    const uint32_t b1 = *reinterpret_cast<const uint32_t *>(Ps + g * PSS + 2 * c + 8);
    if constexpr (Q8) {
        /* word i of the 4 keys: quants 4i .. 4i + 3 of the thread's DG, i.e. rows A, B of mt = 2i
         * (lo) and mt = 2i + 1 (hi); a key pair's f16 pairs regrouped per dim */
#pragma unroll
        for (int i = 0; i < NW; i++) {
            uint32_t lo[4], hi[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                rf_da_deq4(__funnelshift_r(vw[j][i], vw[j][i + 1], vsh), vd[j], lo[j], hi[j]);
            uint32_t a[4];
            a[0] = __byte_perm(lo[0], lo[1], 0x5410), a[1] = __byte_perm(lo[0], lo[1], 0x7632);
            a[2] = __byte_perm(lo[2], lo[3], 0x5410), a[3] = __byte_perm(lo[2], lo[3], 0x7632);
            rf_mma_f16(o[2 * i], a, b0, b1);
            a[0] = __byte_perm(hi[0], hi[1], 0x5410), a[1] = __byte_perm(hi[0], hi[1], 0x7632);
            a[2] = __byte_perm(hi[2], hi[3], 0x5410), a[3] = __byte_perm(hi[2], hi[3], 0x7632);
            rf_mma_f16(o[2 * i + 1], a, b0, b1);
        }
    } else {
#pragma unroll
        for (int mt = 0; mt < NK; mt++) {
            uint32_t a[4];
            rf_ldsm4_t(a, Vs + ((lane & 7) + (lane >> 4) * 8) * QS + mt * 16 + ((lane >> 3) & 1) * 8);
            rf_mma_f16(o[mt], a, b0, b1);
        }
    }
}
#endif

/* The kernel's arguments that every work item reads. */
struct rf_da_args {
    float *part;
    float2 *pml;
    const float *q;
    const void *k, *v;
    const int32_t *pos, *seq, *bt;
    int n_tokens, max_blocks, bs, bsh, n_head, n_head_kv, G;
    float scale;
    int window;
    float softcap;
    int pmax, kmin, ZS;
    /* out not NULL (ZS 1: one split a row): the items write the rows' results there, with head
     * h's sink (sinks NULL: none), and the kernel the padding rows' zeros and the invalid rows'
     * NaN, as rf_k_decode_merge would (the same bits), which is then not launched */
    float *out;
    const float *sinks;
};

/* The split of a work item (t, hk, z) for its row, or false where the item has no work: the
 * token's row is not this kernel's (p < 0, p + 1 < kmin, p > pmax, seq < 0) or has fewer splits.
 * k0, k1: the split's first and last key; sq: the sequence. */
static __device__ __forceinline__ bool rf_da_split_of(const rf_da_args &a, int t, int z, int &k0, int &k1, int &sq) {
    const int p = a.pos[t];
    if (p < 0 || p + 1 < a.kmin || p > a.pmax) return false;
    sq = a.seq[t];
    if (sq < 0) return false;
    const int lo = a.window > 0 && p >= a.window ? p - a.window + 1 : 0, n = p - lo + 1, S = rf_da_split(n);
    if ((long long)z * S >= n) return false;
    k0 = lo + z * S, k1 = min(p, k0 + S - 1);
    return true;
}

#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* One work item: split z (keys k0 .. k1) of token t's row for kv head hk, the block's W warps
 * each walking chunks w, w + W, ... of 16 keys with cp.async NST - 1 chunks ahead and an online
 * softmax of its own; then the warps' states merged in warp order (rf_pa_factors / rf_pa_apply)
 * and the split's state written: (max, sum) to pml[(t * n_head + h) * ZS + z], the numerator to
 * part[that * D + d], for the query heads h = hk * G .. hk * G + G - 1. Ends with a block barrier
 * (the shared memory is free for the next item). */
template <int D, bool Q8>
static __device__ __forceinline__ void rf_da_item(const rf_da_args &a, unsigned char *sm, int t, int hk, int z,
                                                  int k0, int k1, int sq) {
    typedef rf_da_geo<D, Q8> C;
    constexpr int NK = D / 16, CH = RF_DA_CH, W = C::W, NST = C::NST;
    const int nch = (k1 - k0) / CH + 1;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    unsigned char *wsm = sm + warp * C::WARP_BYTES;
    rf_half *Ps = reinterpret_cast<rf_half *>(wsm + C::PS_OFF);
    const unsigned sa0 = rf_smem_addr(wsm);
    const int64_t head0 = (int64_t)t * a.n_head + (int64_t)hk * a.G;
    const int32_t *btr = a.bt + (int64_t)sq * a.max_blocks;

    /* B fragments of Q^T (k = dims, n = heads): head g's dims ks * 16 + 2c, + 1, + 8, + 9 in f16 */
    uint32_t qb[NK][2];
#pragma unroll
    for (int ks = 0; ks < NK; ks++) {
        qb[ks][0] = qb[ks][1] = 0u;
        if (g < a.G) {
            const float *qr = a.q + (head0 + g) * D + ks * 16 + 2 * c;
            const float2 x = *reinterpret_cast<const float2 *>(qr), y = *reinterpret_cast<const float2 *>(qr + 8);
            qb[ks][0] = rf_pack_h2(x.x, x.y), qb[ks][1] = rf_pack_h2(y.x, y.y);
        }
    }
    float o[NK][4];
#pragma unroll
    for (int mt = 0; mt < NK; mt++) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    const int nit = warp < nch ? (nch - warp + W - 1) / W : 0; /* this warp's chunks */
    /* the cache rows of the first NST chunks looked up together, then each chunk's a chunk before
     * its copies (the look-up's latency behind a chunk's work, not in front of the copies) */
    int blk[NST];
#pragma unroll
    for (int i = 0; i < NST; i++) blk[i] = rf_da_blk(btr, a.bs, a.bsh, k0 + (warp + W * i) * CH, k1, lane);
#pragma unroll
    for (int i = 0; i < NST - 1; i++) { /* the first NST - 1 chunks in flight (empty groups past the end) */
        if (i < nit)
            rf_da_load<D, Q8>(sa0 + i * C::STAGE, a.k, a.v, blk[i], a.bs, a.bsh, k0 + (warp + W * i) * CH, k1,
                              a.n_head_kv, hk, lane);
        rf_cp_async_commit();
    }
    int blkn = blk[NST - 1];
    for (int it = 0; it < nit; it++) {
        const int nx = it + NST - 1; /* its stage was read in iteration it - 1 (closed by a __syncwarp) */
        if (nx < nit)
            rf_da_load<D, Q8>(sa0 + (nx % NST) * C::STAGE, a.k, a.v, blkn, a.bs, a.bsh, k0 + (warp + W * nx) * CH,
                              k1, a.n_head_kv, hk, lane);
        if (nx + 1 < nit) blkn = rf_da_blk(btr, a.bs, a.bsh, k0 + (warp + W * (nx + 1)) * CH, k1, lane);
        rf_cp_async_commit();
        rf_cp_async_wait<NST - 1>(); /* chunk it is in (this thread's copies) */
        __syncwarp();                /* ... and every lane's */
        rf_da_chunk<D, Q8>(o, m0, m1, l0, l1, qb, wsm + (it % NST) * C::STAGE, Ps, k0 + (warp + W * it) * CH, k1,
                           a.scale, a.softcap, lane);
        __syncwarp(); /* the stage and Ps are read */
    }
    rf_cp_async_wait<0>();
#pragma unroll
    for (int m = 4; m < 32; m *= 2) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, m);
        l1 += __shfl_xor_sync(0xffffffffu, l1, m);
    }

    /* the block's merge: the warps' states in warp order (a warp without chunks: an empty state) */
    __syncthreads(); /* every warp is done with its stages: the bytes now hold the states */
    float *Om = reinterpret_cast<float *>(sm);
    float2 *MLm = reinterpret_cast<float2 *>(sm + W * 8 * C::OMS * 4);
#pragma unroll
    for (int mt = 0; mt < NK; mt++) { /* rows A and B of o[mt] (rf_da_chunk) */
        const int dA = Q8 ? D / 8 * g + 2 * mt : mt * 16 + g, dB = Q8 ? dA + 1 : dA + 8;
        const int pA = Q8 ? dA + dA / 32 : dA, pB = Q8 ? dB + dB / 32 : dB, OMS = C::OMS;
        float *ob = Om + (warp * 8 + 2 * c) * OMS;
        ob[pA] = o[mt][0], ob[OMS + pA] = o[mt][1], ob[pB] = o[mt][2], ob[OMS + pB] = o[mt][3];
    }
    if (g == 0) MLm[warp * 8 + 2 * c] = make_float2(m0, l0), MLm[warp * 8 + 2 * c + 1] = make_float2(m1, l1);
    __syncthreads();
    for (int idx = tid; idx < a.G * D; idx += W * 32) {
        const int h = idx / D, d = idx % D;
        float M = -INFINITY, den = 0.0f, num = 0.0f, fa, fb;
#pragma unroll
        for (int w = 0; w < W; w++) {
            const float2 ml = MLm[w * 8 + h];
            const int md = rf_pa_factors(M, den, ml.x, ml.y, fa, fb);
            num = rf_pa_apply(num, Om[(w * 8 + h) * C::OMS + (Q8 ? d + d / 32 : d)], md, fa, fb);
        }
        if (a.out) { /* the row's one split: rf_k_decode_merge's fold of one state is (M, den, num) itself */
            a.out[(head0 + h) * D + d] = rf_pa_final_sink(M, den, num, a.sinks, (int64_t)hk * a.G + h);
            continue;
        }
        const int64_t si = (head0 + h) * a.ZS + z;
        a.part[si * D + d] = num;
        if (d == 0) a.pml[si] = make_float2(M, den);
    }
    __syncthreads(); /* the states are read: the next item may fill the stages */
}
#endif

/* decode_attn: the work items (t, hk, z) — split z of token t's keys for the query heads of kv
 *   head hk — numbered z fastest, then hk, then t; block b takes items b, b + gridDim.x, ...:
 *   each round its W * 32 threads look W * 32 of them up at once (rf_da_split_of: the token's position
 *   decides whether the row is this kernel's and how many splits it has) and the block works
 *   through those with work (rf_da_item), so items without work cost one look-up each (a graph
 *   step recorded for a long context launches for every split of every token). Token t at position
 *   p = pos[t] of sequence seq[t] sees the keys lo .. p (lo = p - window + 1 when window > 0 and
 *   p >= window, else 0), n = p - lo + 1 of them, cut into splits of S = rf_da_split(n) keys from
 *   lo. The order in which a block takes its items changes no value.
 * in: q f32 [n_tokens, n_head, D] (16-byte aligned; rounded to f16 for the tensor cores), k, v
 *   [rows, n_head_kv, D] f16 or q8_0 (16-byte aligned), pos, seq int32 [n_tokens], bt int32
 *   [*, max_blocks].
 * launch: a grid of at most the resident blocks (two an SM), rf_da_geo::W * 32 threads,
 *   rf_da_geo::SMEM bytes of dynamic shared memory; ZS >= the splits of any row
 *   (rf_gpu_decode_attention). */
template <int D, bool Q8>
__global__ void __launch_bounds__(rf_da_geo<D, Q8>::W * 32, 2) rf_k_decode_attn(rf_da_args a) {
#if defined(RF_CUDA_BUILD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) unsigned char rf_da_sm[];
    __shared__ int s_item[rf_da_geo<D, Q8>::W * 32], s_n;
    rf_pdl_trigger(); /* the merge (a dependent launch) may be scheduled; it waits */
    const int tid = threadIdx.x, NTH = rf_da_geo<D, Q8>::W * 32;
    if (a.out) { /* rows without work written as rf_k_decode_merge writes them */
        const int64_t rd = (int64_t)a.n_head * D;
        for (int64_t i = (int64_t)blockIdx.x * NTH + tid; i < (int64_t)a.n_tokens * rd; i += (int64_t)gridDim.x * NTH) {
            const int t = (int)(i / rd), p = a.pos[t];
            if (p < 0 && a.kmin <= 1) a.out[i] = 0.0f;
            else if (p >= 0 && p + 1 >= a.kmin && (p > a.pmax || a.seq[t] < 0)) a.out[i] = __int_as_float(0x7fc00000);
        }
    }
    const int64_t total = (int64_t)a.n_tokens * a.n_head_kv * a.ZS, B = gridDim.x;
    for (int64_t r0 = 0; (int64_t)blockIdx.x + B * r0 < total; r0 += NTH) {
        const int64_t item = (int64_t)blockIdx.x + B * (r0 + tid);
        if (tid == 0) s_n = 0;
        __syncthreads();
        int k0 = 0, k1 = -1, sq = -1;
        if (item < total &&
            rf_da_split_of(a, (int)(item / ((int64_t)a.n_head_kv * a.ZS)), (int)(item % a.ZS), k0, k1, sq))
            s_item[atomicAdd(&s_n, 1)] = tid;
        __syncthreads();
        const int na = s_n;
        for (int i = 0; i < na; i++) {
            const int64_t it = (int64_t)blockIdx.x + B * (r0 + s_item[i]);
            const int t = (int)(it / ((int64_t)a.n_head_kv * a.ZS)), hk = (int)(it / a.ZS % a.n_head_kv);
            const int z = (int)(it % a.ZS);
            rf_da_split_of(a, t, z, k0, k1, sq); /* true: it was found so above */
            rf_da_item<D, Q8>(a, rf_da_sm, t, hk, z, k0, k1, sq);
        }
        __syncthreads(); /* s_item and s_n are read */
    }
#else
    (void)a;
    RF_DEVICE_TRAP();
#endif
}
#endif /* !RF_HIP */

/* decode_merge: row (t, h) of rf_k_decode_attn's tokens: its splits' states folded in split order
 *   (their loads issued together), head h's sink last (rf_pa_final_sink), out = num / den. Rows
 *   with p + 1 >= kmin that are invalid (p > pmax or seq < 0) are written as NaN; rows with
 *   p + 1 < kmin are left alone (the paged kernel's), except padding rows (p < 0) when kmin <= 1:
 *   then no paged kernel runs in the call (rf_gpu_paged_attention_route) and they are written as
 *   its zeros.
 * launch: grid (n_tokens, n_head), D threads (a multiple of 32); a programmatic dependent launch
 *   after rf_k_decode_attn (waits for it before reading part / pml). */
__global__ void __launch_bounds__(128)
rf_k_decode_merge(float *out, const float *__restrict__ part, const float2 *__restrict__ pml,
                  const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, int n_head, int D, int window,
                  int pmax, int kmin, int ZS, const float *__restrict__ sinks) {
    rf_pdl_trigger();
    rf_pdl_wait();
    const int64_t t = blockIdx.x;
    const int h = blockIdx.y, d = threadIdx.x;
    const int p = pos[t];
    if (d >= D) return;
    const int64_t orow = t * n_head + h;
    if (p < 0 && kmin <= 1) {
        out[orow * D + d] = 0.0f;
        return;
    }
    if (p < 0 || p + 1 < kmin) return;
    if (p > pmax || seq[t] < 0) {
        out[orow * D + d] = __int_as_float(0x7fc00000);
        return;
    }
    const int lo = window > 0 && p >= window ? p - window + 1 : 0, n = p - lo + 1, S = rf_da_split(n);
    const int cnt = (n + S - 1) / S;
    float2 ml[RF_DA_ZMAX];
    float a[RF_DA_ZMAX];
#pragma unroll
    for (int i = 0; i < RF_DA_ZMAX; i++) {
        ml[i] = make_float2(-INFINITY, 0.0f), a[i] = 0.0f;
        if (i < cnt) ml[i] = pml[orow * ZS + i], a[i] = part[(orow * ZS + i) * D + d];
    }
    float M = -INFINITY, den = 0.0f, num = 0.0f, fa, fb;
#pragma unroll
    for (int i = 0; i < RF_DA_ZMAX; i++) {
        const int md = rf_pa_factors(M, den, ml[i].x, ml[i].y, fa, fb); /* past cnt: empty, skipped */
        num = rf_pa_apply(num, a[i], md, fa, fb);
    }
    out[orow * D + d] = rf_pa_final_sink(M, den, num, sinks, h);
}

/* ---- host ------------------------------------------------------------------------------- */

#if !defined(RF_HIP)
template <int D, bool Q8> static rf_status rf_da_go(rf_gpu_ctx *ctx, const rf_da_args &a) {
    static size_t attr[RF_GPU_MAX_DEVICES];
    const size_t smem = rf_da_geo<D, Q8>::SMEM;
    rf_status st = rf_gpu_smem_attr(ctx, reinterpret_cast<const void *>(rf_k_decode_attn<D, Q8>), smem,
                                    (rf_da_geo<D, Q8>::W * 32 + 1) * sizeof(int), attr, "rf_k_decode_attn");
    if (st) return st;
    /* the grid below is the resident blocks: ask for the largest shared-memory carveout first (a
     * hint; without it the driver may keep more L1 and fit one block of ~110 KB an SM, not two) */
    static int per_sm[RF_GPU_MAX_DEVICES]; /* resident blocks an SM; 0: not asked yet */
    const int dv = ctx->device >= 0 && ctx->device < RF_GPU_MAX_DEVICES ? ctx->device : 0;
    if (!per_sm[dv]) {
        if (cudaFuncSetAttribute(reinterpret_cast<const void *>(rf_k_decode_attn<D, Q8>),
                                 cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared) != cudaSuccess)
            (void)cudaGetLastError(); /* a hint only */
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, rf_k_decode_attn<D, Q8>, rf_da_geo<D, Q8>::W * 32,
                                                          smem) != cudaSuccess) {
            (void)cudaGetLastError();
            n = 2;
        }
        per_sm[dv] = n >= 1 ? n : 1;
    }
    /* every item once, in at most one wave of resident blocks (two an SM on sm_90, one on A100 at D = 128) */
    const int64_t total = (int64_t)a.n_tokens * a.n_head_kv * a.ZS;
    const int64_t res = per_sm[dv] * (int64_t)(ctx->info.sm_count > 0 ? ctx->info.sm_count : 1);
    const unsigned blocks = (unsigned)(total < res ? total : res);
    return rf_gpu_launch(ctx, "rf_k_decode_attn", false, rf_k_decode_attn<D, Q8>, dim3(blocks),
                         dim3(rf_da_geo<D, Q8>::W * 32), smem, a);
}
#endif

extern "C" bool rf_gpu_decode_attention_supported(rf_gpu_ctx *ctx, rf_type kv_type, int64_t head_dim, int64_t n_head,
                                                  int64_t n_head_kv) {
#if defined(RF_HIP)
    (void)ctx, (void)kv_type, (void)head_dim, (void)n_head, (void)n_head_kv;
    return false; /* mma.sync: the HIP build keeps rf_gpu_paged_attention */
#else
    if (ctx->info.cc_major < 8 || (ctx->info.warp_size > 0 && ctx->info.warp_size != 32)) return false;
    if ((kv_type != RF_TYPE_F16 && kv_type != RF_TYPE_Q8_0) || (head_dim != 64 && head_dim != 128)) return false;
    if (n_head_kv < 1 || n_head < n_head_kv || n_head % n_head_kv != 0 || n_head / n_head_kv > 8) return false;
    const size_t smem = head_dim == 64 ? (kv_type == RF_TYPE_Q8_0 ? rf_da_geo<64, true>::SMEM : rf_da_geo<64, false>::SMEM)
                                       : (kv_type == RF_TYPE_Q8_0 ? rf_da_geo<128, true>::SMEM : rf_da_geo<128, false>::SMEM);
    return rf_gpu_smem_optin(ctx) >= smem;
#endif
}

/* the key span a call's rows can have (pmax: the last position the call may hold) */
static int64_t rf_da_span(int64_t pmax, int64_t window) {
    const int64_t span = pmax + 1;
    return window > 0 && window < span ? window : span;
}

extern "C" bool rf_gpu_decode_attention_wanted(rf_gpu_ctx *ctx, rf_type kv_type, int64_t n_tokens, int64_t head_dim,
                                               int64_t n_head, int64_t n_head_kv, int64_t window, int64_t pmax,
                                               int64_t min_keys) {
    if (min_keys < 1 || pmax < 0 || rf_da_span(pmax, window) < min_keys) return false;
    if (!rf_gpu_decode_attention_supported(ctx, kv_type, head_dim, n_head, n_head_kv)) return false;
    const double bytes = (double)n_tokens * (double)n_head * RF_DA_ZMAX * ((double)head_dim * 4 + 8);
    return bytes <= (double)RF_DA_SCRATCH;
}

extern "C" rf_status rf_gpu_decode_attention(rf_gpu_ctx *ctx, float *out, const float *q, const void *k, const void *v,
                                             rf_type kv_type, int64_t n_tokens, const int32_t *pos, const int32_t *seq,
                                             const int32_t *block_table, int64_t max_blocks, int64_t block_size,
                                             int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale,
                                             int64_t window, float softcap, int64_t max_pos, const float *sinks,
                                             int64_t min_keys) {
    const char *op = "rf_gpu_decode_attention";
    RF_GPU_REQUIRE(rf_gpu_decode_attention_supported(ctx, kv_type, head_dim, n_head, n_head_kv), op,
                   "not available for K/V type %d, head_dim %lld, %lld / %lld heads on this device", (int)kv_type,
                   (long long)head_dim, (long long)n_head, (long long)n_head_kv);
    RF_GPU_REQUIRE(n_tokens >= 0 && n_tokens <= INT_MAX && n_head <= 65535, op, "n_tokens=%lld n_head=%lld",
                   (long long)n_tokens, (long long)n_head);
    RF_GPU_REQUIRE(block_size >= 1 && block_size <= INT_MAX && max_blocks >= 1 && max_blocks <= INT_MAX, op,
                   "block_size=%lld max_blocks=%lld", (long long)block_size, (long long)max_blocks);
    RF_GPU_REQUIRE(window >= 0 && window <= INT_MAX && max_pos < (1LL << 30) && min_keys >= 1 && min_keys < (1LL << 30),
                   op, "window=%lld max_pos=%lld min_keys=%lld", (long long)window, (long long)max_pos,
                   (long long)min_keys);
    if (n_tokens == 0) return RF_OK;
    RF_GPU_REQUIRE(out && q && k && v && pos && seq && block_table, op, "NULL pointer argument");
    RF_GPU_REQUIRE((((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) == 0, op, "q, k and v must be 16-byte aligned");
#if defined(RF_HIP)
    (void)out, (void)sinks, (void)scale, (void)softcap;
    return rf_set_error(RF_ERR_INVALID_ARG, "%s: not built for HIP", op);
#else
    const int D = (int)head_dim, G = (int)(n_head / n_head_kv);
    const int64_t cap = max_blocks * block_size - 1, pmax64 = max_pos < cap ? max_pos : cap;
    const int pmax = pmax64 < 0 ? -1 : (int)pmax64;
    const int64_t span = pmax < 0 ? 1 : rf_da_span(pmax, window), zs0 = (span + RF_DA_SMIN - 1) / RF_DA_SMIN;
    const int ZS = (int)(zs0 < RF_DA_ZMAX ? zs0 : RF_DA_ZMAX);
    const size_t rows = (size_t)n_tokens * (size_t)n_head * (size_t)ZS;
    const size_t pbytes = rows * (size_t)D * sizeof(float);
    size_t mark;
    void *tmp;
    rf_status st = rf_gpu_tmp(ctx, pbytes + 256 + rows * sizeof(float2), &tmp, &mark);
    if (st) return st;
    float *part = (float *)tmp;
    float2 *pml = (float2 *)((char *)tmp + ((pbytes + 255) & ~(size_t)255));
    rf_da_args a;
    a.part = part, a.pml = pml, a.q = q, a.k = k, a.v = v, a.pos = pos, a.seq = seq, a.bt = block_table;
    a.n_tokens = (int)n_tokens, a.max_blocks = (int)max_blocks, a.bs = (int)block_size, a.n_head = (int)n_head;
    a.bsh = -1;
    for (int i = 0; i < 31; i++)
        if (block_size == (int64_t)1 << i) a.bsh = i;
    a.n_head_kv = (int)n_head_kv, a.G = G, a.scale = scale, a.window = (int)window, a.softcap = softcap;
    a.pmax = pmax, a.kmin = (int)min_keys, a.ZS = ZS;
    /* one split a row (a depth bucket of 256 keys): no merge kernel (RF_GPU_DECODE_MMA_DIRECT, read at
     * every call: a test compares both ways) */
    const bool direct = ZS == 1 && rf_knob_bool(RF_KNOB_GPU_DECODE_MMA_DIRECT);
    a.out = direct ? out : NULL, a.sinks = sinks;
    if (kv_type == RF_TYPE_Q8_0)
        st = D == 64 ? rf_da_go<64, true>(ctx, a) : rf_da_go<128, true>(ctx, a);
    else
        st = D == 64 ? rf_da_go<64, false>(ctx, a) : rf_da_go<128, false>(ctx, a);
    if (!st && !direct)
        st = rf_gpu_launch(ctx, "rf_k_decode_merge", true, rf_k_decode_merge, dim3((unsigned)n_tokens, (unsigned)n_head),
                           dim3((unsigned)D), 0, out, (const float *)part, (const float2 *)pml, pos, seq, a.n_head, D,
                           a.window, pmax, a.kmin, ZS, sinks);
    ctx->scratch_used = mark;
    return st;
#endif
}
