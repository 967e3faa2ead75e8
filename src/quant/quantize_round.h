/* quantize_round.h — the rounding helpers the reference quantizers share (quantize.c,
 * quantize_k.c): ggml's nearest_int and a clamped truncation, both defined for any input. */
#ifndef RF_QUANTIZE_ROUND_H
#define RF_QUANTIZE_ROUND_H

#include <math.h>

#define RF_GROUP_MAX_EPS 1e-15f

/* Round half to even, as ggml's nearest_int (which is exact for |v| < 2^22; we clamp to that
 * range first so that huge or non-finite intermediates stay defined). */
static inline int nearest_int(float v) {
    if (!(v > -4194303.f)) v = -4194303.f; /* also NaN */
    if (v > 4194303.f) v = 4194303.f;
    return (int)lrintf(v);
}
/* C's float->int truncation, clamped to [lo, hi] (NaN -> lo) so that out-of-range values from
 * degenerate scales cannot invoke undefined behaviour; identical to a plain cast in range. */
static inline int trunc_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

#endif
