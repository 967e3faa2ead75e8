/* unicode.c — UTF-8 decoding/encoding for the tokenizer, the invalid-byte policy (each byte
 * that does not start a valid character becomes U+FFFD, as llama.cpp does before BPE), and
 * the GPT-2 byte-level alphabet (bytes <-> printable codepoints). */
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

size_t rf_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

size_t rf_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t rf_utf8_complete_prefix(const unsigned char *s, size_t n) {
    /* Look back at most 3 bytes for a lead byte whose sequence runs past the end; hold it
     * (whether it will turn out valid is decided once the following bytes arrive). */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = s[n - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = rf_utf8_len(c);
        return need > back ? n - back : n;
    }
    return n;
}

rf_status rf_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_len) {
    /* Worst case every byte becomes 3 bytes (U+FFFD). Count first so memory stays ~n. */
    const unsigned char *u = (const unsigned char *)s;
    size_t need = 0, i = 0;
    bool clean = true;
    while (i < n) {
        uint32_t cp;
        size_t l = rf_utf8_decode(u + i, n - i, &cp);
        if (l) need += l, i += l;
        else need += 3, i += 1, clean = false;
    }
    char *b = malloc(need + 1);
    if (!b) return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (%zu bytes of text)", need);
    if (clean) {
        if (n) memcpy(b, s, n);
    } else {
        size_t o = 0;
        i = 0;
        while (i < n) {
            uint32_t cp;
            size_t l = rf_utf8_decode(u + i, n - i, &cp);
            if (l) {
                memcpy(b + o, s + i, l);
                o += l, i += l;
            } else {
                memcpy(b + o, "\xEF\xBF\xBD", 3);
                o += 3, i += 1;
            }
        }
    }
    b[need] = 0;
    *out = b;
    *out_len = need;
    return RF_OK;
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order. Built once; the table is immutable afterwards. */
static rf_bytemap g_map;
static int16_t g_inv[324]; /* codepoint (< 0x144) -> byte + 1 */
static void build_map(void) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool direct = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = direct ? (uint32_t)b : (uint32_t)(256 + n++);
        g_map.enc_len[b] = (unsigned char)rf_utf8_encode(cp, g_map.enc[b]);
        g_inv[cp] = (int16_t)(b + 1);
    }
}

#include <pthread.h>
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

const rf_bytemap *rf_gpt2_bytemap(void) {
    pthread_once(&g_once, build_map);
    return &g_map;
}

int rf_gpt2_byte_of_cp(uint32_t cp) {
    pthread_once(&g_once, build_map);
    if (cp >= sizeof g_inv / sizeof g_inv[0]) return -1;
    return g_inv[cp] - 1;
}
