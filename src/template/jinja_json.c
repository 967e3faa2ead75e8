/* jinja_json.c — JSON into template values (the render's variables, from_json; data marks set on
 * the caller's strings) and HF's tojson out of them. */
#include <stdio.h>

#include "template/jinja_eval.h"

/* ---- JSON in and out ------------------------------------------------------------------------ */

jv jx_from_json(ctx *c, const json_t *j, int depth, bool data) {
    if (depth > 200) jx_jfail(c, NULL, RF_ERR_RANGE, "input JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = new_dict(c);
        const char *k;
        json_t *v;
        /* keys of a JSON object are unique: append without the linear search */
        size_t nk = json_object_size(j);
        d->k = ja_alloc(&c->a, (nk ? nk : 1) * sizeof(jv));
        d->v = ja_alloc(&c->a, (nk ? nk : 1) * sizeof(jv));
        d->cap = nk ? nk : 1;
        json_object_foreach((json_t *)j, k, v) {
            if (d->n == d->cap) break;
            d->k[d->n] = V_STR(ja_strndup(&c->a, k, strlen(k)), strlen(k));
            if (data) d->k[d->n] = jx_all_data(c, d->k[d->n]);
            d->v[d->n] = jx_from_json(c, v, depth + 1, data);
            d->n++;
        }
        return V_DICT(d);
    }
    case JSON_ARRAY: {
        jlist *l = new_list(c, json_array_size(j));
        for (size_t k = 0; k < l->n; k++) l->v[k] = jx_from_json(c, json_array_get(j, k), depth + 1, data);
        return V_LIST(l);
    }
    case JSON_STRING: {
        size_t n = json_string_length(j);
        jv r = V_STR(ja_strndup(&c->a, json_string_value(j), n), n);
        return data ? jx_all_data(c, r) : r;
    }
    case JSON_INTEGER: return V_INT((int64_t)json_integer_value(j));
    case JSON_REAL: return V_FLOAT(json_real_value(j));
    case JSON_TRUE: return V_BOOL(true);
    case JSON_FALSE: return V_BOOL(false);
    default: return V_NONE();
    }
}

static void json_str(ctx *c, sbuf *b, const char *p, size_t n, bool ensure_ascii) {
    jx_sb_putc(c, b, '"');
    for (size_t k = 0; k < n;) {
        unsigned char ch = (unsigned char)p[k];
        char e[16];
        if (ch == '"') { jx_sb_puts(c, b, "\\\""); k++; }
        else if (ch == '\\') { jx_sb_puts(c, b, "\\\\"); k++; }
        else if (ch == '\n') { jx_sb_puts(c, b, "\\n"); k++; }
        else if (ch == '\r') { jx_sb_puts(c, b, "\\r"); k++; }
        else if (ch == '\t') { jx_sb_puts(c, b, "\\t"); k++; }
        else if (ch == '\b') { jx_sb_puts(c, b, "\\b"); k++; }
        else if (ch == '\f') { jx_sb_puts(c, b, "\\f"); k++; }
        else if (ch < 0x20) { snprintf(e, sizeof e, "\\u%04x", ch); jx_sb_puts(c, b, e); k++; }
        else if (ch >= 0x80 && ensure_ascii) {
            size_t adv;
            uint32_t cp = jx_u8dec(p + k, n - k, &adv);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else snprintf(e, sizeof e, "\\u%04x", cp);
            jx_sb_puts(c, b, e);
            k += adv;
        } else { jx_sb_putc(c, b, (char)ch); k++; }
    }
    jx_sb_putc(c, b, '"');
}

static void json_nl(ctx *c, sbuf *b, const json_opts *o, int level) {
    jx_sb_putc(c, b, '\n');
    for (int k = 0; k < o->indent * level; k++) jx_sb_putc(c, b, ' ');
}

void jx_to_json(ctx *c, const jnode *at, sbuf *b, jv v, const json_opts *o, int level) {
    if (level > 200) jx_jfail(c, at, RF_ERR_RANGE, "tojson: value nested too deeply");
    char tmp[80];
    switch (v.t) {
    case JV_NONE: jx_sb_puts(c, b, "null"); return;
    case JV_BOOL: jx_sb_puts(c, b, v.u.b ? "true" : "false"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jx_sb_puts(c, b, tmp); return;
    case JV_FLOAT: jx_fmt_float(tmp, sizeof tmp, v.u.f, true); jx_sb_puts(c, b, tmp); return;
    case JV_STR: {
        size_t base = b->n;
        json_str(c, b, v.u.s.p, v.u.s.n, o->ensure_ascii);
        if (str_has_data(v)) jx_sb_mark(c, b, base, b->n);
        return;
    }
    case JV_LIST:
        if (v.u.l->kind != JL_LIST)
            jx_jfail(c, at, RF_ERR_TYPE, "Object of type %s is not JSON serializable", jx_type_name(v));
        if (!v.u.l->n) { jx_sb_puts(c, b, "[]"); return; }
        jx_sb_putc(c, b, '[');
        for (size_t k = 0; k < v.u.l->n; k++) {
            if (k) jx_sb_puts(c, b, o->item_sep);
            if (o->indent >= 0) json_nl(c, b, o, level + 1);
            jx_to_json(c, at, b, v.u.l->v[k], o, level + 1);
        }
        if (o->indent >= 0) json_nl(c, b, o, level);
        jx_sb_putc(c, b, ']');
        return;
    case JV_DICT: {
        jdict *d = v.u.d;
        if (!d->n) { jx_sb_puts(c, b, "{}"); return; }
        size_t *ord = ja_alloc(&c->a, d->n * sizeof(size_t));
        for (size_t k = 0; k < d->n; k++) ord[k] = k;
        if (o->sort_keys)
            for (size_t k = 1; k < d->n; k++)
                for (size_t j = k; j > 0 && jx_vcmp(c, at, d->k[ord[j - 1]], d->k[ord[j]], "<") > 0; j--) {
                    size_t t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t;
                }
        jx_sb_putc(c, b, '{');
        for (size_t k = 0; k < d->n; k++) {
            jv key = d->k[ord[k]];
            if (k) jx_sb_puts(c, b, o->item_sep);
            if (o->indent >= 0) json_nl(c, b, o, level + 1);
            if (key.t == JV_STR) jx_to_json(c, at, b, key, o, level + 1);
            else if (key.t == JV_BOOL || key.t == JV_NONE) {
                jx_sb_putc(c, b, '"');
                jx_sb_puts(c, b, key.t == JV_NONE ? "null" : key.u.b ? "true" : "false");
                jx_sb_putc(c, b, '"');
            } else if (key.t == JV_INT || key.t == JV_FLOAT) {
                jx_sb_putc(c, b, '"');
                jx_to_json(c, at, b, key, o, level + 1);
                jx_sb_putc(c, b, '"');
            } else jx_jfail(c, at, RF_ERR_TYPE, "tojson: keys must be str, int, float, bool or None, not %s", jx_type_name(key));
            jx_sb_puts(c, b, o->key_sep);
            jx_to_json(c, at, b, d->v[ord[k]], o, level + 1);
        }
        if (o->indent >= 0) json_nl(c, b, o, level);
        jx_sb_putc(c, b, '}');
        return;
    }
    default:
        jx_jfail(c, at, RF_ERR_TYPE, "Object of type %s is not JSON serializable", jx_type_name(v));
    }
}
