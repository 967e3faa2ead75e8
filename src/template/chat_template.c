/* chat_template.c — the public chat-template API: parse/render a model's Jinja template through
 * the Jinja subset (jinja_*.c), build the variables transformers passes (messages, tools,
 * bos_token, eos_token, add_generation_prompt, ...), and fall back to a recognised family's
 * built-in template when a model's template is missing or cannot be parsed. */
#include <stdlib.h>
#include <string.h>

#include "rocmforge/tokenizer.h"
#include "template/jinja.h"

struct rf_chat_template {
    rf_jinja *j;
    char *bos, *eos;  /* remembered token texts (from_gguf), NULL otherwise */
    bool fallback;
};

static _Thread_local bool g_raised;

bool rf_chat_last_error_raised(void) { return g_raised; }

rf_status rf_chat_template_parse(const char *source, rf_chat_template **out) {
    if (!source || !out) return rf_set_error(RF_ERR_INVALID_ARG, "rf_chat_template_parse: NULL argument");
    *out = NULL;
    rf_chat_template *t = calloc(1, sizeof *t);
    if (!t) return rf_set_error(RF_ERR_OOM, "chat template: out of memory");
    rf_status st = rf_jinja_parse(source, strlen(source), &t->j);
    if (st) {
        free(t);
        return st;
    }
    *out = t;
    return RF_OK;
}

void rf_chat_template_free(rf_chat_template *t) {
    if (!t) return;
    rf_jinja_free(t->j);
    free(t->bos);
    free(t->eos);
    free(t);
}

static rf_status parse_json_field(const char *text, const char *field, json_t **out) {
    json_error_t e;
    *out = json_loads(text, JSON_DECODE_ANY, &e);
    if (!*out)
        return rf_set_error(RF_ERR_INVALID_ARG, "chat template: %s is not valid JSON: %s (line %d column %d)",
                            field, e.text, e.line, e.column);
    return RF_OK;
}

/* Python's str.strip() whitespace, for continue_final_message's retry */
static bool py_ws_at(const char *s, size_t n, size_t *w) {
    unsigned char c = (unsigned char)s[0];
    if (c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f)) { *w = 1; return true; }
    uint32_t cp = 0;
    if (c >= 0xC2 && c < 0xE0 && n >= 2) { cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3F); *w = 2; }
    else if (c >= 0xE0 && c < 0xF0 && n >= 3) { cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3F); *w = 3; }
    else return false;
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static const char *rfind(const char *hay, size_t hn, const char *needle, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t k = hn - nn + 1; k-- > 0;)
        if (memcmp(hay + k, needle, nn) == 0) return hay + k;
    return NULL;
}

/* continue_final_message as transformers does it: cut after the last occurrence of the final
 * message's content (its last text part for list content), retrying with the content
 * stripped because some templates trim it. */
static rf_status cut_after_final(const json_t *messages, char *out, size_t *len) {
    size_t n = json_array_size(messages);
    if (!n) return rf_set_error(RF_ERR_INVALID_ARG, "chat template: continue_final_message needs a message");
    json_t *c = json_object_get(json_array_get(messages, n - 1), "content");
    if (json_is_array(c)) c = json_object_get(json_array_get(c, json_array_size(c) - 1), "text");
    if (!json_is_string(c))
        return rf_set_error(RF_ERR_INVALID_ARG, "chat template: continue_final_message: the last message has no text content");
    const char *fm = json_string_value(c);
    size_t fl = json_string_length(c);
    const char *at = rfind(out, *len, fm, fl);
    if (!at) {
        size_t w;
        while (fl > 0 && py_ws_at(fm, fl, &w)) { fm += w; fl -= w; }
        while (fl > 0) {
            size_t k = fl - 1, back = 0;
            while (k > 0 && back < 3 && ((unsigned char)fm[k] & 0xC0) == 0x80) { k--; back++; }
            if (!py_ws_at(fm + k, fl - k, &w) || k + w != fl) break;
            fl = k;
        }
        at = rfind(out, *len, fm, fl);
    }
    if (!at)
        return rf_set_error(RF_ERR_FORMAT, "chat template: continue_final_message: the final message's content "
                                           "does not appear in the rendered text");
    *len = (size_t)(at - out) + fl;
    out[*len] = 0;
    return RF_OK;
}

rf_status rf_chat_template_render_ex(const rf_chat_template *t, const rf_chat_msg *msgs,
                                     size_t n, const rf_chat_render_opts *opts, char **out) {
    rf_text_span *data = NULL;
    size_t nd = 0;
    rf_status st = rf_chat_template_render_data(t, msgs, n, opts, out, &data, &nd);
    free(data);
    return st;
}

rf_status rf_chat_template_render_data(const rf_chat_template *t, const rf_chat_msg *msgs, size_t n,
                                       const rf_chat_render_opts *opts, char **out,
                                       rf_text_span **data, size_t *n_data) {
    g_raised = false;
    if (data) *data = NULL;
    if (n_data) *n_data = 0;
    if (!t || !out || !opts || !data || !n_data || (n && !msgs))
        return rf_set_error(RF_ERR_INVALID_ARG, "rf_chat_template_render: NULL argument");
    *out = NULL;
    if (opts->continue_final_message && opts->add_generation_prompt)
        return rf_set_error(RF_ERR_INVALID_ARG, "chat template: continue_final_message and add_generation_prompt "
                                                "cannot both be set");
    json_t *vars = json_object();
    if (!vars) return rf_set_error(RF_ERR_OOM, "chat template: out of memory");
    rf_status st = RF_OK;
    json_t *messages = NULL;
    if (opts->messages_json) {
        st = parse_json_field(opts->messages_json, "messages", &messages);
        if (!st && !json_is_array(messages)) {
            json_decref(messages);
            messages = NULL;
            st = rf_set_error(RF_ERR_INVALID_ARG, "chat template: messages must be a JSON array");
        }
    } else {
        messages = json_array();
        for (size_t k = 0; messages && k < n; k++) {
            if (!msgs[k].role || !msgs[k].content) {
                st = rf_set_error(RF_ERR_INVALID_ARG, "chat template: message %zu has a NULL role or content", k);
                break;
            }
            json_t *m = json_object();
            json_t *r = json_stringn(msgs[k].role, strlen(msgs[k].role));
            json_t *c = json_stringn(msgs[k].content, strlen(msgs[k].content));
            if (!m || !r || !c) {
                json_decref(m);
                json_decref(r);
                json_decref(c);
                st = rf_set_error(RF_ERR_INVALID_ARG, "chat template: message %zu is not valid UTF-8", k);
                break;
            }
            json_object_set_new(m, "role", r);
            json_object_set_new(m, "content", c);
            json_array_append_new(messages, m);
        }
    }
    if (st) goto done;
    json_object_set_new(vars, "messages", messages);
    json_t *tools = json_null();
    if (opts->tools_json) {
        st = parse_json_field(opts->tools_json, "tools", &tools);
        if (st) goto done;
    }
    json_object_set_new(vars, "tools", tools);
    json_object_set_new(vars, "add_generation_prompt", json_boolean(opts->add_generation_prompt));
    const char *bos = opts->bos_token ? opts->bos_token : t->bos ? t->bos : "";
    const char *eos = opts->eos_token ? opts->eos_token : t->eos ? t->eos : "";
    json_t *jb = json_string(bos), *je = json_string(eos);
    if (!jb || !je) {
        json_decref(jb);
        json_decref(je);
        st = rf_set_error(RF_ERR_INVALID_ARG, "chat template: bos/eos token text is not valid UTF-8");
        goto done;
    }
    json_object_set_new(vars, "bos_token", jb);
    json_object_set_new(vars, "eos_token", je);
    /* the model's own token texts are template text; every other variable is the caller's */
    const char *trusted[] = {"bos_token", "eos_token", NULL};
    if (opts->extra_json) {
        json_t *extra;
        st = parse_json_field(opts->extra_json, "extra variables", &extra);
        if (st) goto done;
        if (!json_is_object(extra)) {
            json_decref(extra);
            st = rf_set_error(RF_ERR_INVALID_ARG, "chat template: extra variables must be a JSON object");
            goto done;
        }
        /* the caller's extra variables are data, also where they replace bos/eos_token */
        if (json_object_get(extra, "bos_token")) trusted[0] = "";
        if (json_object_get(extra, "eos_token")) trusted[1] = "";
        json_object_update(vars, extra);
        json_decref(extra);
    }
    rf_jinja_output o;
    st = rf_jinja_render_data(t->j, vars, trusted, NULL, (time_t)opts->now, &o);
    *out = o.text;
    size_t len = o.len;
    if (st) g_raised = rf_jinja_last_error_was_raise();
    if (!st && opts->continue_final_message) st = cut_after_final(messages, *out, &len);
    if (st) {
        free(*out);
        *out = NULL;
        free(o.data);
    } else {
        /* continue_final_message may have cut the text: ranges past the end go */
        size_t k = 0;
        while (k < o.n_data && o.data[k].begin < len) {
            if (o.data[k].end > len) o.data[k].end = len;
            k++;
        }
        *data = o.data;
        *n_data = k;
        if (!k) {
            free(o.data);
            *data = NULL;
        }
    }
done:
    json_decref(vars);
    return st;
}

rf_status rf_chat_template_render(const rf_chat_template *t, const rf_chat_msg *msgs, size_t n,
                                  bool add_generation_prompt, const char *bos_token,
                                  const char *eos_token, char **out) {
    rf_chat_render_opts o = {0};
    o.add_generation_prompt = add_generation_prompt;
    o.bos_token = bos_token;
    o.eos_token = eos_token;
    return rf_chat_template_render_ex(t, msgs, n, &o, out);
}

/* ---- families ------------------------------------------------------------------------------- */

static const char TMPL_CHATML[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static const char TMPL_LLAMA3[] =
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

static const char TMPL_LLAMA2[] =
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set sys = messages[0]['content'] %}{%- set msgs = messages[1:] %}"
    "{%- else %}{%- set sys = '' %}{%- set msgs = messages %}{%- endif %}"
    "{%- for message in msgs %}"
    "{%- if message['role'] == 'user' %}"
    "{{- bos_token + '[INST] ' + (('<<SYS>>\\n' + sys + '\\n<</SYS>>\\n\\n') if loop.first and sys else '') + message['content'] | trim + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- ' ' + message['content'] | trim + ' ' + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}";

static const char TMPL_MISTRAL[] =
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set sys = messages[0]['content'] %}{%- set msgs = messages[1:] %}"
    "{%- else %}{%- set sys = '' %}{%- set msgs = messages %}{%- endif %}"
    "{{- bos_token }}"
    "{%- for message in msgs %}"
    "{%- if message['role'] == 'user' %}"
    "{{- '[INST] ' + ((sys + '\\n\\n') if loop.first and sys else '') + message['content'] + '[/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- ' ' + message['content'] + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}";

static const char TMPL_GEMMA[] =
    "{{- bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set prefix = messages[0]['content'] + '\\n\\n' %}{%- set msgs = messages[1:] %}"
    "{%- else %}{%- set prefix = '' %}{%- set msgs = messages %}{%- endif %}"
    "{%- for message in msgs %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{- '<start_of_turn>' + role + '\\n' + (prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}";

static const char TMPL_PHI3[] =
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- else %}{{- eos_token }}{%- endif %}";

const char *rf_chat_family_name(rf_chat_family f) {
    switch (f) {
    case RF_CHAT_FAMILY_CHATML: return "chatml";
    case RF_CHAT_FAMILY_LLAMA3: return "llama3";
    case RF_CHAT_FAMILY_LLAMA2: return "llama2";
    case RF_CHAT_FAMILY_MISTRAL: return "mistral";
    case RF_CHAT_FAMILY_GEMMA: return "gemma";
    case RF_CHAT_FAMILY_PHI3: return "phi3";
    default: return "unknown";
    }
}

const char *rf_chat_family_template(rf_chat_family f) {
    switch (f) {
    case RF_CHAT_FAMILY_CHATML: return TMPL_CHATML;
    case RF_CHAT_FAMILY_LLAMA3: return TMPL_LLAMA3;
    case RF_CHAT_FAMILY_LLAMA2: return TMPL_LLAMA2;
    case RF_CHAT_FAMILY_MISTRAL: return TMPL_MISTRAL;
    case RF_CHAT_FAMILY_GEMMA: return TMPL_GEMMA;
    case RF_CHAT_FAMILY_PHI3: return TMPL_PHI3;
    default: return NULL;
    }
}

/* whether the vocabulary holds a token with exactly this text */
static bool vocab_has(const rf_gguf *g, const char *text) {
    if (!g) return false;
    uint64_t n;
    const void *data;
    if (rf_gguf_get_arr(g, "tokenizer.ggml.tokens", RF_GGUF_STRING, &n, &data)) {
        rf_clear_error();
        return false;
    }
    const rf_gguf_str *s = data;
    size_t tl = strlen(text);
    for (uint64_t k = 0; k < n; k++)
        if (s[k].len == tl && memcmp(s[k].ptr, text, tl) == 0) return true;
    return false;
}

rf_chat_family rf_chat_family_detect(const char *t, const char *arch, const rf_gguf *g) {
    if (t) {
        if (strstr(t, "<|im_start|>")) return RF_CHAT_FAMILY_CHATML;
        if (strstr(t, "<|start_header_id|>")) return RF_CHAT_FAMILY_LLAMA3;
        if (strstr(t, "<start_of_turn>")) return RF_CHAT_FAMILY_GEMMA;
        if (strstr(t, "<|user|>") || strstr(t, "<|end|>")) return RF_CHAT_FAMILY_PHI3;
        if (strstr(t, "[INST]")) return strstr(t, "<<SYS>>") ? RF_CHAT_FAMILY_LLAMA2 : RF_CHAT_FAMILY_MISTRAL;
    }
    if (arch) {
        if (!strncmp(arch, "gemma", 5)) return RF_CHAT_FAMILY_GEMMA;
        if (!strcmp(arch, "phi3")) return RF_CHAT_FAMILY_PHI3;
        if (!strncmp(arch, "qwen", 4)) return RF_CHAT_FAMILY_CHATML;
    }
    if (vocab_has(g, "<|start_header_id|>")) return RF_CHAT_FAMILY_LLAMA3;
    if (vocab_has(g, "<|im_start|>")) return RF_CHAT_FAMILY_CHATML;
    if (vocab_has(g, "<start_of_turn>")) return RF_CHAT_FAMILY_GEMMA;
    if (arch && !strcmp(arch, "llama")) return RF_CHAT_FAMILY_LLAMA2;
    return RF_CHAT_FAMILY_UNKNOWN;
}

/* text of the token whose id is stored under `key`, or "" */
static const char *token_text(const rf_gguf *g, const char *key) {
    uint32_t id;
    if (rf_gguf_get_u32(g, key, &id)) {
        rf_clear_error();
        return "";
    }
    uint64_t n;
    const void *data;
    if (rf_gguf_get_arr(g, "tokenizer.ggml.tokens", RF_GGUF_STRING, &n, &data) || id >= n) {
        rf_clear_error();
        return "";
    }
    return ((const rf_gguf_str *)data)[id].ptr;
}

bool rf_chat_template_is_fallback(const rf_chat_template *t) { return t && t->fallback; }

/* parses `src` (the model's template, may be NULL); falls back to a family on failure */
static rf_status template_for(const rf_gguf *g, const char *src, rf_chat_template **out) {
    const char *arch = NULL;
    if (g && rf_gguf_get_str(g, "general.architecture", &arch)) arch = NULL;
    rf_clear_error();
    rf_status st = RF_OK;
    if (src) {
        st = rf_chat_template_parse(src, out);
        if (!st) return RF_OK;
    }
    rf_chat_family f = rf_chat_family_detect(src, arch, g);
    if (f == RF_CHAT_FAMILY_UNKNOWN) {
        if (st) return st; /* keep the parse error */
        return rf_set_error(RF_ERR_UNSUPPORTED,
                            "the model has no tokenizer.chat_template and its family (architecture '%s') "
                            "is not one with a built-in template (chatml, llama3, llama2, mistral, gemma, phi3); "
                            "pass a template explicitly",
                            arch ? arch : "?");
    }
    if (st) RF_LOGW("%s; using the built-in %s chat template instead", rf_last_error(), rf_chat_family_name(f));
    else RF_LOGW("the model has no tokenizer.chat_template; using the built-in %s chat template", rf_chat_family_name(f));
    rf_clear_error();
    st = rf_chat_template_parse(rf_chat_family_template(f), out);
    if (!st) (*out)->fallback = true;
    return st;
}

/* The model's BOS and EOS texts copied into a parsed template (the template is freed and *out
 * cleared when out of memory). */
static rf_status with_special_tokens(const rf_gguf *g, rf_chat_template **out) {
    (*out)->bos = strdup(token_text(g, "tokenizer.ggml.bos_token_id"));
    (*out)->eos = strdup(token_text(g, "tokenizer.ggml.eos_token_id"));
    if (!(*out)->bos || !(*out)->eos) {
        rf_chat_template_free(*out);
        *out = NULL;
        return rf_set_error(RF_ERR_OOM, "chat template: out of memory");
    }
    return RF_OK;
}

rf_status rf_chat_template_from_gguf(const rf_gguf *g, rf_chat_template **out) {
    if (!g || !out) return rf_set_error(RF_ERR_INVALID_ARG, "rf_chat_template_from_gguf: NULL argument");
    *out = NULL;
    const char *src = NULL;
    if (rf_gguf_get_str(g, "tokenizer.chat_template", &src)) src = NULL;
    rf_clear_error();
    rf_status st = template_for(g, src, out);
    if (st) return st;
    return with_special_tokens(g, out);
}

rf_status rf_chat_template_from_gguf_named(const rf_gguf *g, const char *name, rf_chat_template **out) {
    if (!g || !name || !out) return rf_set_error(RF_ERR_INVALID_ARG, "rf_chat_template_from_gguf_named: NULL argument");
    *out = NULL;
    char key[256];
    if (snprintf(key, sizeof key, "tokenizer.chat_template.%s", name) >= (int)sizeof key)
        return rf_set_error(RF_ERR_INVALID_ARG, "chat template name too long");
    const char *src;
    rf_status st = rf_gguf_get_str(g, key, &src);
    if (st) return st == RF_ERR_NOT_FOUND ? rf_set_error(RF_ERR_NOT_FOUND, "the model has no '%s'", key) : st;
    st = rf_chat_template_parse(src, out);
    if (st) return st;
    return with_special_tokens(g, out);
}

rf_status rf_chat_apply_template(const rf_gguf *g, const char *tmpl, const rf_chat_msg *msgs,
                                 size_t n, bool add_generation_prompt, char **out) {
    if (!out) return rf_set_error(RF_ERR_INVALID_ARG, "rf_chat_apply_template: NULL out");
    *out = NULL;
    const char *src = tmpl;
    if (!src && g) {
        if (rf_gguf_get_str(g, "tokenizer.chat_template", &src)) src = NULL;
        rf_clear_error();
    }
    rf_chat_template *t = NULL;
    rf_status st = template_for(g, src, &t);
    if (st) return st;
    const char *bos = g ? token_text(g, "tokenizer.ggml.bos_token_id") : "";
    const char *eos = g ? token_text(g, "tokenizer.ggml.eos_token_id") : "";
    st = rf_chat_template_render(t, msgs, n, add_generation_prompt, bos, eos, out);
    rf_chat_template_free(t);
    return st;
}
