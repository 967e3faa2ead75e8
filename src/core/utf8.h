/* utf8.h — bytes made valid UTF-8 by the Unicode standard's recommended practice: each maximal
 * invalid subpart becomes one U+FFFD (as Python's errors="replace" does). For the JSON that the
 * server and `rocmforge batch` write (utf8.c). */
#ifndef RF_CORE_UTF8_H
#define RF_CORE_UTF8_H

#include <stddef.h>

/* Writes s[0..n) to out with every maximal invalid subpart replaced by U+FFFD (EF BF BD); out
 * has room for 3 n bytes (one U+FFFD per byte at worst). Returns the bytes written. */
size_t rf_utf8_replace(const char *s, size_t n, char *out);

#endif
