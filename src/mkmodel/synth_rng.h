/* synth_rng.h — the small, fast, seedable generator behind `rocmforge mkmodel` (splitmix64).
 * Random access by construction: every row of every tensor gets its own stream derived from
 * (seed, tensor name, row), so any byte range of a tensor can be regenerated independently. */
#ifndef RF_SYNTH_RNG_H
#define RF_SYNTH_RNG_H

#include <stdint.h>
#include <string.h>

typedef struct synth_rng {
    uint64_t s;
} synth_rng;

/* splitmix64 finaliser: a bijective 64-bit mix (Steele, Lea, Flood 2014). */
static inline uint64_t synth_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t synth_rng_next(synth_rng *r) {
    r->s += 0x9e3779b97f4a7c15ull;
    return synth_mix64(r->s);
}

/* FNV-1a over a NUL-terminated string, then mixed: the per-tensor stream key. */
static inline uint64_t synth_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return synth_mix64(h);
}

/* Stream of row `row` of the tensor whose name hashes to `name_hash`, for a user seed. */
static inline synth_rng synth_rng_for_row(uint64_t seed, uint64_t name_hash, uint64_t row) {
    synth_rng r;
    r.s = synth_mix64(seed ^ 0x5851f42d4c957f2dull) ^ name_hash;
    r.s = synth_mix64(r.s + row * 0xd1342543de82ef95ull);
    return r;
}

/* Uniform integer in [0, n) (n > 0); the tiny modulo bias is irrelevant here. */
static inline uint32_t synth_rng_below(synth_rng *r, uint32_t n) {
    return (uint32_t)(((synth_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Fills x[0..n) with uniform values in [-a, a): two 24-bit draws per 64-bit output. */
static inline void synth_rng_fill_uniform(synth_rng *r, float *x, int64_t n, float a) {
    const float k = 2.0f * a / 16777216.0f; /* 2a / 2^24 */
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t v = synth_rng_next(r);
        x[i] = (float)(uint32_t)(v >> 40) * k - a;
        x[i + 1] = (float)(uint32_t)((v >> 8) & 0xffffff) * k - a;
    }
    if (i < n) x[i] = (float)(uint32_t)(synth_rng_next(r) >> 40) * k - a;
}

#endif
