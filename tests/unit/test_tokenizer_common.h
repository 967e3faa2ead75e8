/* test_tokenizer_common.h — helpers shared by the tokenizer tests: load a vocabulary from a
 * GGUF path or from metadata written in memory, tokenize into a malloc'd array, validate UTF-8,
 * and the two real-model paths (tests using them skip with 77 when the file is absent). */
#ifndef RF_TEST_TOKENIZER_COMMON_H
#define RF_TEST_TOKENIZER_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define RF_SMOLLM2_PATH RF_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define RF_GEMMA3_PATH RF_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf"

static inline int tk_file_exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    fclose(f);
    return 1;
}

/* Vocabulary of a GGUF file; NULL (with the error printed) on failure. */
static inline rf_vocab *tk_load(const char *path) {
    rf_gguf *g = NULL;
    if (rf_gguf_open(path, &g)) {
        fprintf(stderr, "open %s: %s\n", path, rf_last_error());
        return NULL;
    }
    rf_vocab *v = NULL;
    if (rf_vocab_load(g, &v)) fprintf(stderr, "vocab %s: %s\n", path, rf_last_error());
    rf_gguf_close(g);
    return v;
}

/* Writes the writer's file to memory and loads the vocabulary from it; returns the status. */
static inline rf_status tk_load_writer(rf_gguf_writer *w, rf_vocab **out) {
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f) return RF_ERR_IO;
    rf_status st = rf_gguf_write_stream(w, f);
    fclose(f);
    if (st) {
        free(buf);
        return st;
    }
    rf_gguf *g = NULL;
    st = rf_gguf_open_memory(buf, size, &g);
    if (!st) {
        st = rf_vocab_load(g, out);
        rf_gguf_close(g);
    }
    free(buf);
    return st;
}

/* Tokenizes into a malloc'd array (*n ids); NULL on failure. */
static inline int32_t *tk_tokenize(const rf_vocab *v, const char *s, size_t len, bool add_special,
                                   bool parse_special, size_t *n) {
    size_t need = 0;
    rf_status st = rf_tokenize(v, s, len, add_special, parse_special, NULL, 0, &need);
    if (st && st != RF_ERR_RANGE) return NULL;
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids) return NULL;
    if (rf_tokenize(v, s, len, add_special, parse_special, ids, need, n)) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* Strict UTF-8 validity (no overlongs, no surrogates, <= U+10FFFF). */
static inline int tk_valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t l;
        uint32_t v, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) l = 2, v = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) l = 3, v = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) l = 4, v = c & 0x07, min = 0x10000;
        else return 0;
        if (i + l > n) return 0;
        for (size_t k = 1; k < l; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            v = (v << 6) | (s[i + k] & 0x3F);
        }
        if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
        i += l;
    }
    return 1;
}

/* Appends the UTF-8 of cp to buf (cap >= *n + 4). */
static inline void tk_put_cp(char *buf, size_t *n, uint32_t cp) {
    if (cp < 0x80) buf[(*n)++] = (char)cp;
    else if (cp < 0x800) {
        buf[(*n)++] = (char)(0xC0 | (cp >> 6));
        buf[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        buf[(*n)++] = (char)(0xE0 | (cp >> 12));
        buf[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        buf[(*n)++] = (char)(0xF0 | (cp >> 18));
        buf[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        buf[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* The same text with every byte that does not start a valid character as U+FFFD (what the
 * streaming detokenizer promises to emit for invalid UTF-8). */
static inline char *tk_sanitize(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(3 * n + 1);
    size_t k = 0, i = 0;
    while (i < n) {
        size_t l = 1;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) l = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (l && i + l <= n && tk_valid_utf8((const unsigned char *)s + i, l)) {
            memcpy(o + k, s + i, l);
            k += l, i += l;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3, i += 1;
        }
    }
    o[k] = 0;
    *out_n = k;
    return o;
}

/* GPT-2 bytes_to_unicode(), written out from its definition (independent of the library). */
static inline void gpt2_char(int b, char *out) {
    int n = 0, cp = -1;
    for (int x = 0; x < 256; x++) {
        int direct = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
        int c = direct ? x : 256 + n++;
        if (x == b) cp = c;
    }
    size_t k = 0;
    tk_put_cp(out, &k, (uint32_t)cp);
    out[k] = 0;
}

#endif
