/* webui.c — serves the chat page compiled into the binary (webui.h). The page is public (it
 * holds no data; the API it calls checks the key), and strict: a Content-Security-Policy
 * allows only its own scripts, so even markup that slipped past the sanitizer cannot run. */
#include "webui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* script-src 'self': no inline script or event handler runs; img-src without remote hosts:
 * a reply's Markdown image cannot call out to another server. */
static const char k_csp[] = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                            "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'";

bool rf_webui_owns(const char *url) {
    if (!url) return false;
    return !strcmp(url, "/") || !strcmp(url, "/index.html") || !strncmp(url, "/ui/", 4);
}

const rf_webui_asset *rf_webui_find(const char *url) {
    if (!url) return NULL;
    if (!strcmp(url, "/index.html")) url = "/";
    for (int i = 0; i < rf_webui_n_assets; i++)
        if (!strcmp(rf_webui_assets[i].url, url)) return &rf_webui_assets[i];
    return NULL;
}

/* Whether an Accept-Encoding value admits gzip: a "gzip" (or "*") element without q=0. */
static bool accepts_gzip(const char *ae) {
    if (!ae) return false;
    const char *p = ae;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        const char *tok = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ' && *p != '\t') p++;
        size_t n = (size_t)(p - tok);
        bool name = (n == 4 && !strncasecmp(tok, "gzip", 4)) || (n == 1 && *tok == '*');
        bool zero = false;
        while (*p && *p != ',') { /* parameters: only q matters */
            if ((*p == 'q' || *p == 'Q') && p[1] == '=') {
                char *end;
                zero = strtod(p + 2, &end) <= 0.0;
                p = end;
                continue;
            }
            p++;
        }
        if (name && !zero) return true;
    }
    return false;
}

/* Whether an If-None-Match value names etag (or is "*"). */
static bool etag_matches(const char *inm, const char *etag) {
    if (!inm) return false;
    size_t n = strlen(etag);
    for (const char *p = inm; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (*p == '*') return true;
        if (!strncmp(p, "W/", 2)) p += 2; /* weak comparison, as RFC 9110 asks for GET */
        if (!strncmp(p, etag, n) && (p[n] == 0 || p[n] == ',' || p[n] == ' ' || p[n] == '\t')) return true;
        while (*p && *p != ',') p++;
    }
    return false;
}

static enum MHD_Result queue_text(struct MHD_Connection *c, int status, const char *text, const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result rf_webui_answer(struct MHD_Connection *c, const char *url, const char *method, int *status) {
    bool head = method && !strcmp(method, "HEAD");
    if (!head && !(method && !strcmp(method, "GET"))) {
        *status = 405;
        return queue_text(c, 405, "the web UI answers GET and HEAD only\n", "GET, HEAD");
    }
    const rf_webui_asset *a = rf_webui_find(url);
    if (!a) {
        *status = 404;
        return queue_text(c, 404, "no such file in the web UI (docs/webui.md)\n", NULL);
    }
    /* a versioned URL (the page adds ?v=<etag>) never changes: cache it for good; the page
     * itself and unversioned URLs are revalidated each time (a 304 costs a round trip only) */
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "v");
    bool versioned = v && strlen(v) + 2 == strlen(a->etag) && !strncmp(v, a->etag + 1, strlen(v));
    const char *cache = versioned ? "public, max-age=31536000, immutable" : "no-cache";
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    bool not_modified = etag_matches(inm, a->etag);
    bool gz = a->gz && accepts_gzip(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING));
    struct MHD_Response *r;
    if (not_modified) r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    else r = MHD_create_response_from_buffer(gz ? a->gz_len : a->len, (void *)(gz ? a->gz : a->data), MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    if (!not_modified) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->ctype);
    if (gz && !not_modified) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    if (a->gz) MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Accept-Encoding");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, a->etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, cache);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (!strcmp(a->url, "/")) {
        MHD_add_response_header(r, "Content-Security-Policy", k_csp);
        MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    }
    *status = not_modified ? 304 : 200;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)*status, r);
    MHD_destroy_response(r);
    return ret;
}
