/* oai_error.c — an OpenAI-shaped error (oai.h): filled by every parser (srv_fail; srv_bad for a
 * 400 naming a field, with srv_json_type_name) and written as the response body
 * {"error": {"message", "type", "param", "code"}}. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "oai.h"

int srv_failv(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
              va_list ap) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    return -1;
}

int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    srv_failv(e, status, type, code, param, fmt, ap);
    va_end(ap);
    return -1;
}

int srv_bad(srv_error *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    srv_failv(e, 400, "invalid_request_error", NULL, param, fmt, ap);
    va_end(ap);
    return -1;
}

const char *srv_json_type_name(const json_t *v) {
    if (!v) return "absent";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

char *srv_error_json(const srv_error *e) {
    json_t *in = json_object();
    if (!in) return NULL;
    json_object_set_new(in, "message", srv_json_bytes(e->message, strlen(e->message)));
    json_object_set_new(in, "type", json_string(e->type ? e->type : "server_error"));
    json_object_set_new(in, "param", e->param[0] ? srv_json_bytes(e->param, strlen(e->param)) : json_null());
    json_object_set_new(in, "code", e->code ? json_string(e->code) : json_null());
    json_t *o = json_pack("{so}", "error", in);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    return s;
}
