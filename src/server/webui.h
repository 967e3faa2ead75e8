/* webui.h — the chat page of `rocmforge serve` (GET / and the files under /ui/): compiled into the
 * binary by cmake/webui.cmake, served with content types, ETags and gzip (docs/webui.md). */
#ifndef RF_WEBUI_H
#define RF_WEBUI_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct rf_webui_asset {
    const char *url;              /* "/" or "/ui/..." */
    const char *ctype;            /* Content-Type */
    const unsigned char *data;    /* the bytes */
    size_t len;
    const unsigned char *gz;      /* gzip of data, or NULL when it would not save a tenth */
    size_t gz_len;
    const char *etag;             /* quoted strong ETag: a hash of data */
} rf_webui_asset;

/* The generated table (build/generated/webui_assets.c). */
extern const rf_webui_asset rf_webui_assets[];
extern const int rf_webui_n_assets;

/* Whether url belongs to the page: "/", "/index.html" or anything under "/ui/". */
bool rf_webui_owns(const char *url);

/* The asset for url ("/index.html" is "/"), or NULL. */
const rf_webui_asset *rf_webui_find(const char *url);

/* Queues the answer to a request for url (which rf_webui_owns): the asset (200, or 304 when
 * If-None-Match names its ETag; gzip when the client accepts it), 404 for an unknown file,
 * 405 for a method other than GET or HEAD. *status receives the status sent. Returns
 * libmicrohttpd's result (MHD_NO when the response could not be created or queued). */
enum MHD_Result rf_webui_answer(struct MHD_Connection *c, const char *url, const char *method, int *status);

#endif
