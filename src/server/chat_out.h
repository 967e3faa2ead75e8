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
    SRV_SYNTAX_LLAMA3,   /* the whole answer is {"name": ..., "parameters": {...}}, maybe after <|python_tag|> */
    SRV_SYNTAX_MISTRAL,  /* [TOOL_CALLS][{"name", "arguments"}...] or [TOOL_CALLS]name[ARGS]{...} */
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
} srv_tool_call;

typedef struct srv_chat_out {
    srv_buf reasoning;   /* reasoning text (empty: none) */
    srv_buf content;     /* the answer */
    srv_tool_call *calls;
    size_t n_calls, cap_calls;
    /* partial parses (Hermes): the call being written, once its name is whole and its arguments
     * object has begun; open_args is that object's text so far less the whitespace outside
     * strings (what no later text changes), open_at where its block starts in the answer */
    bool open;
    size_t open_at;
    srv_buf open_name, open_args;
} srv_chat_out;

/* Appends a call (a copy of name and args) with its id derived from cfg->id_seed and its index
 * (9 alphanumerics for Mistral, "call_" + 24 otherwise); with cfg->parallel false only the first
 * call is kept. Returns 0, or -1 when out of memory. */
int srv_chat_add_call(srv_chat_out *o, const srv_parse_cfg *cfg, const char *name, size_t name_len,
                      const char *args, size_t args_len);
/* The id of the call with this index in an answer (char[32]; see srv_chat_add_call). */
void srv_chat_call_id(const srv_parse_cfg *cfg, size_t index, char id[32]);
/* Empties o (no call, empty texts) and keeps its memory; srv_chat_out_free releases it. */
void srv_chat_out_reset(srv_chat_out *o);
void srv_chat_out_free(srv_chat_out *o);
/* A NUL-terminated copy of s[0..n) (NULL when out of memory). */
char *srv_dupn(const char *s, size_t n);

#endif
