/* tokenizer_internal.h — what the tokenizer's files share (none of them owns it): the
 * vocabulary's layout that vocab.c fills and the others read, a string->id hash map (strmap.c),
 * UTF-8 helpers (unicode.c), the pre-tokenizer (pretokenize.c), the SPM and BPE sessions, the
 * piece cache (detok.c). */
#ifndef RF_TOKENIZER_INTERNAL_H
#define RF_TOKENIZER_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>

#include "rocmforge/tokenizer.h"

/* Token attributes, as llama.cpp derives them from tokenizer.ggml.token_type (bit flags so that
 * a token can be e.g. CONTROL|UNUSED). */
enum {
    RF_TOK_UNDEFINED = 0,
    RF_TOK_UNKNOWN = 1 << 0,
    RF_TOK_UNUSED = 1 << 1,
    RF_TOK_NORMAL = 1 << 2,
    RF_TOK_CONTROL = 1 << 3,
    RF_TOK_USER_DEFINED = 1 << 4,
    RF_TOK_BYTE = 1 << 5,
    RF_TOK_LSTRIP = 1 << 7,
    RF_TOK_RSTRIP = 1 << 8,
};

typedef enum rf_vocab_type { RF_VOCAB_SPM = 1, RF_VOCAB_BPE = 2 } rf_vocab_type;

/* ---- string -> int32 hash map (open addressing, keys borrowed) ------------------------- */

/* Slots are 8 bytes (a 32-bit hash tag and the value) so a probe touches one cache line; the
 * keys live in parallel arrays and are compared only when the tag matches. */
typedef struct rf_strmap_slot {
    uint32_t tag;  /* 0 = empty (tags are forced non-zero) */
    int32_t value;
} rf_strmap_slot;

typedef struct rf_strmap_key {
    const char *ptr;
    uint32_t len, aux;
} rf_strmap_key;

typedef struct rf_strmap {
    rf_strmap_slot *slots;
    rf_strmap_key *keys; /* parallel to slots */
    size_t cap; /* power of two */
    size_t n;
} rf_strmap;

uint64_t rf_tok_hash(const char *s, size_t len, uint32_t aux);
/* Inserts or overwrites (the last insert of a key wins, as in llama.cpp's token_to_id).
 * The key bytes are borrowed and must outlive the map. RF_ERR_OOM on allocation failure. */
rf_status rf_strmap_put(rf_strmap *m, const char *key, size_t len, uint32_t aux, int32_t value);
/* Value for the key or -1. */
int32_t rf_strmap_get(const rf_strmap *m, const char *key, size_t len, uint32_t aux);
void rf_strmap_free(rf_strmap *m);

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Length of the UTF-8 sequence a lead byte announces (1 for continuation/invalid bytes), the
 * same table llama.cpp uses to cut text into symbols. */
static inline size_t rf_utf8_len(unsigned char c) {
    static const unsigned char lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}
/* Decodes one strictly valid UTF-8 character at s[0..n) (n >= 1): returns its length and sets
 * *cp, or returns 0 for an invalid/truncated/overlong/surrogate sequence. */
size_t rf_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Encodes cp (<= 0x10FFFF) into out[4]; returns the length. */
size_t rf_utf8_encode(uint32_t cp, char *out);
/* Length of the longest prefix of s[0..n) that is complete, valid UTF-8 ends exactly there;
 * i.e. n minus the bytes of a trailing incomplete (but so far valid) sequence. */
size_t rf_utf8_complete_prefix(const unsigned char *s, size_t n);
/* Copies s with every byte that does not start a valid UTF-8 character replaced by U+FFFD
 * (llama.cpp's unicode_cpts_from_utf8 behaviour). *out is malloc'd (NUL-terminated). */
rf_status rf_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_len);

/* GPT-2 byte-level mapping: byte -> UTF-8 of its printable stand-in (1-2 bytes). */
typedef struct rf_bytemap {
    char enc[256][3];
    unsigned char enc_len[256];
} rf_bytemap;
const rf_bytemap *rf_gpt2_bytemap(void);
/* Inverse: the byte a stand-in codepoint maps back to, or -1. */
int rf_gpt2_byte_of_cp(uint32_t cp);

/* ---- pre-tokenizer ----------------------------------------------------------------------- */

typedef struct rf_pretok rf_pretok;
/* Pre-tokenizer for a `tokenizer.ggml.pre` value (NULL/empty = "default"). Also reports the
 * flags llama.cpp ties to it. RF_ERR_UNSUPPORTED naming an unknown value. */
typedef struct rf_pre_flags {
    bool ignore_merges, clean_spaces, add_bos, has_add_bos;
    bool spm_style; /* gemma4: escaped spaces, raw UTF-8 merges, <0xXX> byte fallback */
} rf_pre_flags;
rf_status rf_pretok_new(const char *pre, rf_pretok **out, rf_pre_flags *flags);
void rf_pretok_free(rf_pretok *p);
const char *rf_pretok_name(const rf_pretok *p);

/* Splits valid UTF-8 text into words, calling fn(user, start, len) for each in order. */
typedef rf_status (*rf_word_fn)(void *user, const char *word, size_t len);
rf_status rf_pretok_split(const rf_pretok *p, const char *text, size_t len, rf_word_fn fn,
                          void *user);

/* ---- the vocabulary ---------------------------------------------------------------------- */

/* A growable id list used by the sessions. */
typedef struct rf_idvec {
    int32_t *v;
    size_t n, cap;
    size_t limit; /* 0 = none; else a push past `limit` ids fails (RF_ERR_RANGE) and sets over */
    bool over;
} rf_idvec;
rf_status rf_idvec_push(rf_idvec *iv, int32_t id);
/* Whether `bytes` more bytes of (escaped/encoded) text, which need at least bytes /
 * max_token_len tokens, would pass the limit: then sets over and returns RF_ERR_RANGE, so a
 * giant word or piece is refused before it is merged. */
rf_status rf_idvec_room(rf_idvec *iv, size_t bytes, size_t max_token_len);

/* A per-call cache of pieces already tokenized (words, SPM pieces): text -> ids. Keys are
 * copied into chunks that never move. */
typedef struct rf_pcache_blk rf_pcache_blk;
typedef struct rf_pcache {
    rf_strmap map;      /* text -> offset in ids: count, ids... */
    struct { int32_t *v; size_t n, cap; } ids;
    rf_pcache_blk *blk;
} rf_pcache;
/* Appends the cached ids of key to out and returns true, or returns false on a miss. */
bool rf_pcache_get(const rf_pcache *c, const char *key, size_t len, rf_idvec *out, rf_status *st);
rf_status rf_pcache_put(rf_pcache *c, const char *key, size_t len, const int32_t *ids, size_t n);
void rf_pcache_free(rf_pcache *c);


struct rf_vocab {
    rf_vocab_type type;
    int32_t n_tokens;
    char *pool;        /* all token texts, NUL-separated */
    uint64_t *off;     /* text of id i: pool + off[i], len[i] bytes */
    uint32_t *len;
    float *scores;
    uint16_t *attr;
    uint8_t *is_eog;
    rf_strmap tok;     /* text -> id */
    rf_strmap merges;  /* (left ++ right, |left|) -> rank */
    char *merge_pool;
    size_t max_token_len;

    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix, clean_spaces, ignore_merges, escape_whitespaces;
    bool remove_extra_ws;
    /* BPE with SPM-style text (gemma4 pre-tokenizer): spaces -> U+2581 before the merges, no
     * byte encoding, words of newlines only taken whole when a token, bytes as <0xXX>, BOS
     * forced on */
    bool bpe_spm_style;

    int32_t *special;  /* control/user-defined/unknown ids, longest text first */
    size_t n_special;
    /* trie over the special token texts (for splitting them out of the text) */
    struct rf_trie_node *trie;
    size_t trie_n;
    int32_t trie_root[256]; /* first node per first byte, -1 if none */

    /* bit (a << 8 | b) set when some token's text contains byte a followed by byte b: where
     * it is clear no merge can ever join the two sides, so SPM works on such pieces alone */
    uint8_t pair_bits[8192];

    char *piece_pool;  /* token_to_piece(id, render_special=true) for every id */
    uint64_t *piece_off;
    uint32_t *piece_len;

    rf_pretok *pre;
    char model_name[32];
    char pre_name[64];
};

typedef struct rf_trie_node {
    int32_t first_child, next_sibling;
    int32_t token; /* -1 if no token ends here */
    unsigned char byte;
} rf_trie_node;

static inline const char *rf_tok_text(const rf_vocab *v, int32_t id) { return v->pool + v->off[id]; }
static inline int32_t rf_text_to_token(const rf_vocab *v, const char *s, size_t n) {
    return rf_strmap_get(&v->tok, s, n, 0);
}
/* SPM/UGM byte token for a raw byte: "<0xXX>", else the 1-byte text; -1 if neither exists. */
int32_t rf_vocab_byte_to_token(const rf_vocab *v, unsigned char c);

/* Tokenizes one raw-text fragment (special tokens already split out) and appends ids. */
/* SPM: prefix with " " when `space_prefix`, escape spaces to U+2581, then merge. */
rf_status rf_spm_tokenize(const rf_vocab *v, const char *text, size_t len, bool space_prefix,
                         rf_pcache *cache, rf_idvec *out);

typedef struct rf_bpe_session rf_bpe_session;
rf_status rf_bpe_session_new(const rf_vocab *v, rf_bpe_session **out);
void rf_bpe_session_free(rf_bpe_session *s);
rf_status rf_bpe_tokenize(rf_bpe_session *s, const char *text, size_t len, rf_idvec *out);

/* Builds the piece cache (called by rf_vocab_load once attributes are final). */
rf_status rf_detok_build_cache(rf_vocab *v);

#endif
