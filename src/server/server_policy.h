/* server_policy.h — the request rules of `rocmforge serve` checked on the headers (not
 * installed): strict body framing, the Host / Origin allow-list, the JSON content type of API
 * POSTs and CORS (docs/server.md, "Security"). No socket and no state: header lookups only. */
#ifndef RF_SERVER_POLICY_H
#define RF_SERVER_POLICY_H

#include <microhttpd.h>
#include <stdbool.h>

#include "oai.h"
#include "server.h"

/* The body's framing: several differing Content-Length values, Content-Length together with
 * Transfer-Encoding, several Transfer-Encoding headers or a coding other than "chunked" are a
 * 400; a chunked body is a 411 when built against libmicrohttpd < 1.0, whose chunk parser answers
 * an over-long chunk line with a 500 of its own. Returns true when the request may go on; false
 * with *e filled. */
bool srv_policy_framing(struct MHD_Connection *c, srv_error *e);

/* The Host header names this server: no header (HTTP/1.0), localhost or *.localhost, an IP
 * literal, --host, or an --allowed-host entry ("*" = any). A DNS-rebinding page sends its own
 * name instead. */
bool srv_policy_host_ok(const rf_server_config *cfg, struct MHD_Connection *c);
/* No Origin header, or an Origin on a loopback name, on --host, on the request's own Host
 * (a page this server served), or listed in --allowed-origin / --cors-origin. "null" and other
 * sites are refused. */
bool srv_policy_origin_ok(const rf_server_config *cfg, struct MHD_Connection *c);
/* The request's Origin, when --cors-origin lists it ("*" = any); NULL otherwise. */
const char *srv_policy_cors_origin(const rf_server_config *cfg, struct MHD_Connection *c);
/* Adds Access-Control-Allow-Origin and Vary to resp when the request's Origin is a CORS origin. */
void srv_policy_add_cors(const rf_server_config *cfg, struct MHD_Connection *c, struct MHD_Response *resp);
/* Content-Type is application/json (parameters such as charset allowed). */
bool srv_policy_json_type(struct MHD_Connection *c);

#endif
