/* server_policy.c — the header rules of `rocmforge serve`: strict body framing (RFC 9112 §6),
 * the Host / Origin allow-list that stops DNS rebinding and cross-site requests when no key is
 * set, the JSON content type of API POSTs, and CORS when --cors-origin asks for it. */
#define _GNU_SOURCE
#include "server_policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- framing ------------------------------------------------------------------------------ */

typedef struct framing {
    int n_cl, n_te;
    const char *cl; /* the first Content-Length */
    bool cl_differ;
    const char *te;
} framing;

static enum MHD_Result framing_visit(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    framing *f = cls;
    (void)kind;
    if (!key) return MHD_YES;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (f->n_cl++ == 0) f->cl = value;
        else if (!value || !f->cl || strcmp(value, f->cl)) f->cl_differ = true;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        if (f->n_te++ == 0) f->te = value;
    }
    return MHD_YES;
}

bool srv_policy_framing(struct MHD_Connection *c, srv_error *e) {
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_visit, &f);
    if (f.cl_differ) {
        srv_fail(e, 400, "invalid_request_error", "invalid_framing", NULL,
                 "the request has %d Content-Length headers that differ", f.n_cl);
        return false;
    }
    if (f.n_te && f.n_cl) {
        srv_fail(e, 400, "invalid_request_error", "invalid_framing", NULL,
                 "the request has both Content-Length and Transfer-Encoding");
        return false;
    }
    if (f.n_te > 1 || (f.n_te && (!f.te || strcasecmp(f.te, "chunked")))) {
        srv_fail(e, 400, "invalid_request_error", "invalid_framing", NULL,
                 "Transfer-Encoding '%.60s' is not supported (only a single 'chunked')", f.te ? f.te : "");
        return false;
    }
#if MHD_VERSION < 0x01000000
    if (f.n_te) {
        /* refused at the headers, before libmicrohttpd 0.9's chunk parser (which answers a long
         * chunk-extension line with its own 500): every chunked body, well formed or not, gets
         * the 400 a bad framing gets (411 would say the same; the rule is one 400) */
        srv_fail(e, 400, "invalid_request_error", "invalid_framing", NULL,
                 "chunked request bodies are not accepted by this build (libmicrohttpd older than 1.0): send the "
                 "body with a Content-Length");
        return false;
    }
#endif
    return true;
}

/* ---- Host and Origin ---------------------------------------------------------------------- */

/* Splits "host[:port]" / "[v6]:port" into the host part (brackets removed) in out. */
static bool host_part(const char *v, size_t n, char *out, size_t cap) {
    const char *b = v, *e = v + n;
    if (n && *v == '[') {
        const char *r = memchr(v, ']', n);
        if (!r) return false;
        b = v + 1;
        e = r;
    } else {
        const char *colon = memchr(v, ':', n);
        if (colon && !memchr(colon + 1, ':', (size_t)(v + n - colon - 1))) e = colon;
    }
    size_t len = (size_t)(e - b);
    if (len == 0 || len >= cap) return false;
    for (size_t i = 0; i < len; i++) out[i] = (char)tolower((unsigned char)b[i]);
    out[len] = 0;
    if (len > 1 && out[len - 1] == '.') out[len - 1] = 0; /* "localhost." is localhost */
    return true;
}

static bool is_ip_literal(const char *h) {
    unsigned char a[16];
    return inet_pton(AF_INET, h, a) == 1 || inet_pton(AF_INET6, h, a) == 1;
}

static bool is_loopback_name(const char *h) {
    size_t n = strlen(h);
    if (!strcmp(h, "localhost") || (n > 10 && !strcmp(h + n - 10, ".localhost"))) return true;
    unsigned char a[16];
    if (inet_pton(AF_INET, h, a) == 1) return a[0] == 127;
    if (inet_pton(AF_INET6, h, a) == 1) {
        static const unsigned char one[16] = {[15] = 1};
        return !memcmp(a, one, 16);
    }
    return false;
}

/* Is item (n bytes) one of the comma-separated entries of list ("*" matches all)? */
static bool list_has(const char *list, const char *item, size_t n) {
    if (!list) return false;
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ') p++;
        const char *q = p;
        while (*q && *q != ',') q++;
        const char *t = q;
        while (t > p && t[-1] == ' ') t--;
        size_t len = (size_t)(t - p);
        if (len == 1 && *p == '*') return true;
        if (len && len == n && !strncasecmp(p, item, n)) return true;
        p = q;
    }
    return false;
}

static bool bound_host_is(const rf_server_config *cfg, const char *h) {
    char b[256];
    if (!cfg->host || !host_part(cfg->host, strlen(cfg->host), b, sizeof b)) return false;
    return !strcmp(b, h);
}

bool srv_policy_host_ok(const rf_server_config *cfg, struct MHD_Connection *c) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!v) return true;
    char h[256];
    if (!host_part(v, strlen(v), h, sizeof h)) return list_has(cfg->allowed_hosts, "*", 1);
    return is_loopback_name(h) || is_ip_literal(h) || bound_host_is(cfg, h) || list_has(cfg->allowed_hosts, h, strlen(h));
}

bool srv_policy_origin_ok(const rf_server_config *cfg, struct MHD_Connection *c) {
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!o) return true;
    size_t n = strlen(o);
    if (list_has(cfg->allowed_origins, o, n) || list_has(cfg->cors_origin, o, n)) return true;
    const char *rest;
    if (!strncasecmp(o, "http://", 7)) rest = o + 7;
    else if (!strncasecmp(o, "https://", 8)) rest = o + 8;
    else return false; /* "null", file:, extensions */
    char h[256];
    if (strchr(rest, '/') || !host_part(rest, strlen(rest), h, sizeof h)) return false;
    if (is_loopback_name(h) || bound_host_is(cfg, h)) return true;
    const char *hv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    char hh[256];
    return hv && host_part(hv, strlen(hv), hh, sizeof hh) && !strcmp(hh, h); /* a page served from here */
}

const char *srv_policy_cors_origin(const rf_server_config *cfg, struct MHD_Connection *c) {
    if (!cfg->cors_origin) return NULL;
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!o || !strcmp(o, "null")) return NULL;
    return list_has(cfg->cors_origin, o, strlen(o)) ? o : NULL;
}

void srv_policy_add_cors(const rf_server_config *cfg, struct MHD_Connection *c, struct MHD_Response *resp) {
    const char *o = srv_policy_cors_origin(cfg, c);
    if (!o) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", o);
    MHD_add_response_header(resp, "Vary", "Origin");
}

bool srv_policy_json_type(struct MHD_Connection *c) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!v) return false;
    while (*v == ' ' || *v == '\t') v++;
    if (strncasecmp(v, "application/json", 16)) return false;
    v += 16;
    while (*v == ' ' || *v == '\t') v++;
    return *v == 0 || *v == ';';
}
