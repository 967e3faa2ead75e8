/* chat_out.h — what the output parsers (tool_calls.c, reasoning.c) make of a chat model's text:
 * the tool-call syntax and the parser's settings, and the parsed message (reasoning, content,
 * tool calls with their stable ids; chat_out.c). */
#ifndef RF_SERVER_CHAT_OUT_H
#define RF_SERVER_CHAT_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oai.h"

/* How a model writes tool calls (and, for harmony, its reasoning): from its chat template. */
typedef enum srv_tool_syntax {
    SRV_SYNTAX_NONE = 0, /* no known tool-call syntax: the text is content */
    SRV_SYNTAX_HERMES,   /* <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen, Hermes, SmolLM3) */
    SRV_SYNTAX_LLAMA3,   /* the answer opens with {"name": ..., "parameters": {...}} calls, maybe after <|python_tag|> */
    SRV_SYNTAX_MISTRAL,  /* [TOOL_CALLS][{"name", "arguments"}...] or [TOOL_CALLS]name[ARGS]{...}, to the end */
    SRV_SYNTAX_HARMONY   /* gpt-oss: <|channel|>analysis / final / commentary to=functions.NAME */
} srv_tool_syntax;

/* What the parser looks for. */
typedef struct srv_parse_cfg {
    srv_tool_syntax syntax;
    bool tools;          /* parse tool calls (tools given and tool_choice is not "none") */
    bool reasoning;      /* split <think> blocks / the analysis channel off as reasoning */
    bool think_open;     /* the prompt ended inside <think> (the answer starts as reasoning) */
    bool parallel;       /* false: only the first tool call is kept */
    uint64_t id_seed;    /* tool-call ids are derived from it and the call's index (stable) */
    size_t id_skip;      /* added to a call's index for its id: a stream's calls that died after
                          * their first part went out, so that ids follow the stream's index and
                          * none repeats (0 elsewhere) */
} srv_parse_cfg;

typedef struct srv_tool_call {
    char *id;            /* "call_..." (9 alphanumerics for Mistral, whose template checks that) */
    char *name;
    char *arguments;     /* JSON text of the arguments object */
    size_t at;           /* where the call starts in the answer: a stream tells by it whether the
                          * call it began streaming is the one that parsed */
} srv_tool_call;

typedef struct srv_chat_out {
    srv_buf reasoning;   /* reasoning text (empty: none) */
    srv_buf content;     /* the answer */
    srv_tool_call *calls;
    size_t n_calls, cap_calls;
    /* partial parses (every syntax): the call being written, once its name is whole and its
     * arguments object has begun (srv_chat_open_call); open_args is that object's text so far
     * less the whitespace outside strings (what no later text changes), open_at where the call
     * starts in the answer, open_id the model's own id for it (empty: derived) */
    bool open;
    size_t open_at;
    srv_buf open_name, open_args, open_id;
} srv_chat_out;

/* Appends a call (a copy of name and args) starting at `at` in the answer, with the model's id
 * id[0..id_len) or, id NULL, one derived from cfg->id_seed and its index (9 alphanumerics for
 * Mistral, "call_" + 24 otherwise); with cfg->parallel false only the first call is kept.
 * Returns 0, or -1 when out of memory. */
int srv_chat_add_call(srv_chat_out *o, const srv_parse_cfg *cfg, size_t at, const char *id, size_t id_len,
                      const char *name, size_t name_len, const char *args, size_t args_len);

/* The one way every syntax streams a call's arguments: the arguments object at t[at] ('{') as
 * the model writes it, less the whitespace outside strings (appended to out unless NULL; a
 * multi-byte character the text has not finished is left off). A final parse takes a call's
 * arguments as this text of the whole object, so what a stream sent of it is a prefix. Returns
 * 1 once the object closed (*end: just past it), 0 when the text ends first, -1 when a byte JSON
 * cannot have stands in it (nothing from it on is appended). Only the bytes are checked, not the
 * grammar: a closed object is judged by jansson. */
int srv_args_scan(const char *t, size_t n, size_t at, srv_buf *out, size_t *end);
/* srv_chat_add_call with the arguments the object at t[args_at] (closed within t[0..n), and
 * parsed as an object by the caller) as srv_args_scan writes it. */
int srv_chat_add_call_at(srv_chat_out *o, const srv_parse_cfg *cfg, size_t at, const char *id, size_t id_len,
                         const char *name, size_t name_len, const char *t, size_t n, size_t args_at);
/* A partial parse's call being written, from `at`, named name[0..name_len) (whole) with its
 * arguments object begun at t[args_at] (the text seen so far is t[0..n): less any marker tail
 * that may yet end the call); id as in srv_chat_add_call. Sets o->open unless cfg->parallel is
 * false and a call was already kept, or the arguments hold a byte JSON cannot have. Returns 0,
 * or -1 when out of memory. */
int srv_chat_open_call(srv_chat_out *o, const srv_parse_cfg *cfg, size_t at, const char *id, size_t id_len,
                       const char *name, size_t name_len, const char *t, size_t n, size_t args_at);
/* The id of the call with this index in an answer (char[32]; see srv_chat_add_call). */
void srv_chat_call_id(const srv_parse_cfg *cfg, size_t index, char id[32]);
/* Empties o (no call, empty texts) and keeps its memory; srv_chat_out_free releases it. */
void srv_chat_out_reset(srv_chat_out *o);
void srv_chat_out_free(srv_chat_out *o);
/* A NUL-terminated copy of s[0..n) (NULL when out of memory). */
char *srv_dupn(const char *s, size_t n);

#endif
