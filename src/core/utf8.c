/* utf8.c — bytes made valid UTF-8, each maximal invalid subpart one U+FFFD (utf8.h). */
#include "core/utf8.h"

#include <string.h>

/* Length of the valid UTF-8 sequence at s[0..n) (1-4), or 0 when s[0] starts none; then *bad is
 * the length of the maximal invalid subpart (>= 1) that becomes one U+FFFD. */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *bad = 1;
        return 0;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n) break;
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (s[i] < l || s[i] > h) break;
    }
    if (i == need + 1) return need + 1;
    *bad = i;
    return 0;
}

size_t rf_utf8_replace(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t badn = 0, k = utf8_seq((const unsigned char *)s + i, n - i, &badn);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += badn;
        }
    }
    return o;
}
