/* quant/vec_dot_vnni512.c — the VNNI dot kernels of vec_dot_vnni.c for CPUs with the EVEX form of
 * `vpdpbusd` (AVX512-VNNI + AVX512VL on 256-bit vectors: Ice Lake, Sapphire Rapids, Zen 4) rather
 * than AVX-VNNI: the same source compiled again as *_vnni512, bit-identical results. */
#define RF_VNNI_EVEX 1
#include "vec_dot_vnni.c"

#if defined(__x86_64__) || defined(__i386__)
/* CPUID.(7,0): EBX bit 16 AVX512F, bit 31 AVX512VL, ECX bit 11 AVX512_VNNI; and the OS saving the
 * opmask and upper-ZMM state (XCR0 bits 5-7) besides SSE/AVX (bits 1-2). */
bool rf_cpu_has_avx512vnni(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((b >> 16) & 1u) || !((b >> 31) & 1u) || !((c >> 11) & 1u)) return false;
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1u)) return false; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0xE6u) == 0xE6u;
}
#else
bool rf_cpu_has_avx512vnni(void) { return false; }
#endif
