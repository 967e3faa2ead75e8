/* server_conn.h — the connection guard of `rocmforge serve` (not installed): every open TCP
 * connection with its state and deadline, the watchdog that closes slow or half-closed ones, the
 * cap on request bytes buffered across connections, and lingering close (docs/server.md,
 * "Security"). */
#ifndef RF_SERVER_CONN_H
#define RF_SERVER_CONN_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* Connections libmicrohttpd accepts beyond --max-conns: they answer /health only (503 otherwise),
 * so that a full pool can still be probed. */
#define SRV_CONN_RESERVE 16

typedef struct srv_guard srv_guard;
typedef struct srv_conn srv_conn;

typedef enum srv_conn_state {
    SRV_CONN_NEW = 0, /* accepted, no request line yet: --read-timeout from the accept */
    SRV_CONN_HEADERS, /* request line in, headers arriving: --read-timeout from the line */
    SRV_CONN_BODY,    /* headers in, body arriving: --read-timeout between two pieces */
    SRV_CONN_BUSY,    /* the request is in: answering (no deadline here; --timeout is libmicrohttpd's) */
    SRV_CONN_IDLE     /* answered, kept alive: --timeout (libmicrohttpd); closed at the client's FIN */
} srv_conn_state;

/* Starts the watchdog and lingering threads. NULL when out of memory or a thread cannot start. */
srv_guard *srv_guard_new(const rf_server_config *cfg);
/* Stops the threads and closes what still lingers. NULL is a no-op. Call after MHD_stop_daemon. */
void srv_guard_free(srv_guard *g);

/* libmicrohttpd callbacks (cls: the srv_guard). */
void srv_guard_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode code);
void *srv_guard_on_uri(void *cls, const char *uri, struct MHD_Connection *c);

/* The guard's record of c (NULL if libmicrohttpd gives none). */
srv_conn *srv_conn_of(struct MHD_Connection *c);
void srv_conn_set_state(srv_conn *k, srv_conn_state st);
/* Body bytes arrived: the body deadline restarts. */
void srv_conn_touch(srv_conn *k);
/* The connection was accepted beyond --max-conns (answers /health only). */
bool srv_conn_reserve(const srv_conn *k);
/* An answer went out before the body was read: drain the rest before closing (lingering close). */
void srv_conn_set_linger(srv_conn *k);

/* Reserves n more bytes of request body against --max-buffered; false (nothing reserved) when
 * that would pass it. */
bool srv_guard_reserve(srv_guard *g, int64_t n);
void srv_guard_release(srv_guard *g, int64_t n);

#endif
