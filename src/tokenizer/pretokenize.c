/* pretokenize.c - BPE pre-tokenizers: the `tokenizer.ggml.pre` dispatch table (names, regex
 * chains and the flags llama.cpp ties to each name) and the splitter, run with PCRE2 (UTF,
 * Unicode properties, JIT). The regex texts are the published patterns of each model family
 * as llama.cpp's src/llama-vocab.cpp lists them (data, not code). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

/* ---- the patterns ------------------------------------------------------------------------ */

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

typedef struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *re[6];
    bool ignore_merges, clean_spaces, add_bos;
} pre_def;

/* SPM-style BPE (gemma4): spaces become U+2581 and the merges run on raw UTF-8 (no GPT-2 byte
 * encoding, byte fallback through <0xXX> tokens); BOS is always added. */
#define PRE_SPM_STYLE "gemma4|granite-embed-multi-311m"


static const pre_def k_pre[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, true, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", {RE_LLAMA3}, true, true, true},
    {"dbrx|smaug-bpe", {RE_LLAMA3}, false, true, false},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|mpt|olmo|jais|exaone4|jina-v1-en|jina-v2-code|roberta-bpe",
     {RE_GPT2}, false, true, false},
    {"trillion|granite-docling", {RE_GPT2}, false, false, false},
    {"starcoder|refact|codeshell|exaone|minerva-7b|mellum2", {"\\p{N}", RE_GPT2}, false, true, false},
    {"smollm|command-r", {"\\p{N}", RE_GPT2}, false, false, false},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|hunyuan|solar-open", {RE_QWEN2}, false, false, false},
    {"stablelm2|megrez", {RE_QWEN2}, false, true, false},
    {"qwen35", {RE_QWEN35}, false, false, false},
    {"grok-2", {RE_QWEN2}, false, false, false},
    {"gpt-4o|llama4|kanana2|talkie|minimax-m2", {RE_GPT4O}, false, false, false},
    {"tekken", {RE_TEKKEN}, true, false, true},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, true, false},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"}, false, false, false},
    {"deepseek-llm",
     {"[\r\n]",
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}+"},
     false, false, false},
    {"deepseek-v3|hunyuan-dense|joyai-llm",
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     false, false, false},
    /* gemma4: no word split beyond cutting newline runs from the rest (the whole line, spaces
     * escaped, is one merge unit) */
    {PRE_SPM_STYLE, {"[^\\n]+|[\\n]+"}, false, true, true},
    {"poro-chat", {RE_PORO}, false, false, false},
    {"bloom|gpt3-finnish", {RE_PORO}, false, true, false},
    {"viking", {RE_PORO, "\\p{N}"}, false, false, false},
    {"seed-coder",
     {CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false, false, false},
    {"bailingmoe|bailingmoe2|llada-moe",
     {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
     false, false, false},
};

/* ---- compile ----------------------------------------------------------------------------- */

struct rf_pretok {
    char name[64];
    int n_re;
    pcre2_code *re[6];
};

/* llama.cpp counts U+0085 (NEL) as whitespace in every pattern; PCRE2's \s does not. Rewrites
 * \s -> [\s\x{85}] (or adds \x{85} inside a class) and \S -> [^\s\x{85}]. */
static bool rewrite_ws(const char *in, char *out, size_t cap) {
    size_t o = 0;
    bool inside = false;
#define PUT(str)                                                                                   \
    do {                                                                                           \
        size_t l_ = strlen(str);                                                                   \
        if (o + l_ + 1 > cap) return false;                                                        \
        memcpy(out + o, str, l_);                                                                  \
        o += l_;                                                                                   \
    } while (0)
    for (size_t i = 0; in[i]; i++) {
        char c = in[i];
        if (c == '\\' && in[i + 1]) {
            char d = in[i + 1];
            if (d == 's') PUT(inside ? "\\s\\x{85}" : "[\\s\\x{85}]");
            else if (d == 'S' && !inside) PUT("[^\\s\\x{85}]");
            else {
                char tmp[3] = {c, d, 0};
                PUT(tmp);
            }
            i++;
            continue;
        }
        if (c == '[' && !inside) inside = true;
        else if (c == ']' && inside) inside = false;
        char tmp[2] = {c, 0};
        PUT(tmp);
    }
    out[o] = 0;
    return true;
#undef PUT
}

static bool name_in(const char *names, const char *name) {
    size_t nl = strlen(name);
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == nl && !memcmp(p, name, nl)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

rf_status rf_pretok_new(const char *pre, rf_pretok **out, rf_pre_flags *flags) {
    *out = NULL;
    const char *name = (pre && *pre) ? pre : "default";
    const pre_def *d = NULL;
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (name_in(k_pre[i].names, name)) d = &k_pre[i];
    if (!d)
        return rf_set_error(RF_ERR_UNSUPPORTED,
                            "tokenizer.ggml.pre: unknown pre-tokenizer type '%s' (supported: "
                            "default, llama3/llama-bpe, gpt-2, qwen2, smollm, starcoder, "
                            "deepseek-llm, deepseek-coder, deepseek-v3, falcon, gpt-4o, tekken, gemma4, "
                            "and aliases; see docs/tokenizer.md)",
                            name);
    rf_pretok *p = calloc(1, sizeof *p);
    if (!p) return rf_set_error(RF_ERR_OOM, "tokenizer: out of memory");
    snprintf(p->name, sizeof p->name, "%s", name);
    for (int i = 0; i < 6 && d->re[i]; i++) {
        char buf[4096];
        if (!rewrite_ws(d->re[i], buf, sizeof buf)) {
            rf_pretok_free(p);
            return rf_set_error(RF_ERR_INTERNAL, "pre-tokenizer '%s': regex %d too long", name, i);
        }
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)buf, PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &erroff,
                                      NULL);
        if (!c) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            rf_pretok_free(p);
            return rf_set_error(RF_ERR_INTERNAL, "pre-tokenizer '%s': regex %d does not compile at %zu: %s",
                                name, i, (size_t)erroff, (const char *)msg);
        }
        /* JIT is an optimisation: without it pcre2_match interprets the same pattern. */
        (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
        p->re[p->n_re++] = c;
    }
    if (flags) {
        flags->ignore_merges = d->ignore_merges;
        flags->clean_spaces = d->clean_spaces;
        flags->add_bos = d->add_bos;
        flags->has_add_bos = d->add_bos;
        flags->spm_style = name_in(PRE_SPM_STYLE, name);
    }
    *out = p;
    return RF_OK;
}

void rf_pretok_free(rf_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_re; i++) pcre2_code_free(p->re[i]);
    free(p);
}

const char *rf_pretok_name(const rf_pretok *p) { return p->name; }

/* ---- split ------------------------------------------------------------------------------- */

typedef struct split_ctx {
    const rf_pretok *p;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    rf_word_fn fn;
    void *user;
} split_ctx;

/* Regex `lvl` cuts s[0..n) into matches and the gaps between them (both kept, in order, as
 * llama.cpp's unicode_regex_split does); each piece goes through the next regex. */
static rf_status split_level(split_ctx *c, int lvl, const char *s, size_t n) {
    if (n == 0) return RF_OK;
    if (lvl == c->p->n_re) return c->fn(c->user, s, n);
    size_t off = 0, prev = 0;
    rf_status st;
    while (off < n) {
        int rc = pcre2_match(c->p->re[lvl], (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, c->md, c->mc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return rf_set_error(RF_ERR_INTERNAL, "pre-tokenizer '%s': regex %d failed: %s",
                                c->p->name, lvl, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { /* empty match: step over one character, it stays in the gap */
            off = ms + rf_utf8_len((unsigned char)s[ms]);
            continue;
        }
        if (ms > prev && (st = split_level(c, lvl + 1, s + prev, ms - prev))) return st;
        if ((st = split_level(c, lvl + 1, s + ms, me - ms))) return st;
        prev = off = me;
    }
    if (prev < n) return split_level(c, lvl + 1, s + prev, n - prev);
    return RF_OK;
}

rf_status rf_pretok_split(const rf_pretok *p, const char *text, size_t len, rf_word_fn fn,
                          void *user) {
    split_ctx c = {p, NULL, NULL, fn, user};
    pcre2_jit_stack *js = NULL;
    rf_status st = RF_OK;
    c.md = pcre2_match_data_create(4, NULL);
    c.mc = pcre2_match_context_create(NULL);
    if (!c.md || !c.mc) {
        st = rf_set_error(RF_ERR_OOM, "tokenizer: out of memory (regex match data)");
        goto done;
    }
    /* The JIT's default 32 KiB machine stack can run out on long runs of one class. */
    js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (js) pcre2_jit_stack_assign(c.mc, NULL, js);
    st = split_level(&c, 0, text, len);
done:
    if (js) pcre2_jit_stack_free(js);
    pcre2_match_context_free(c.mc);
    pcre2_match_data_free(c.md);
    return st;
}
