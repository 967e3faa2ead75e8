/* tool_calls.h — a chat model's generated text to OpenAI's message parts: reasoning
 * (`<think>` blocks, harmony's analysis channel; reasoning.c), the answer, and tool calls in
 * each template family's syntax (Hermes/Qwen `<tool_call>`, Llama 3.x JSON, Mistral
 * `[TOOL_CALLS]`, gpt-oss harmony channels; tool_calls.c). One parser serves the whole text
 * (non-streaming) and a growing text (streaming): a partial parse commits only what no later
 * text can change, so what a stream has sent is always a prefix of the final parse. Nothing
 * here knows HTTP or an API shape: the chat, Anthropic and Responses formatters share it. */
#ifndef RF_SERVER_TOOL_CALLS_H
#define RF_SERVER_TOOL_CALLS_H

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

/* The syntax a chat template's source implies (NULL: none), and whether its answers may open
 * with a <think> block. */
srv_tool_syntax srv_tool_syntax_detect(const char *tmpl_src, bool *thinks);
const char *srv_tool_syntax_name(srv_tool_syntax s);

/* What the parser looks for. */
typedef struct srv_parse_cfg {
    srv_tool_syntax syntax;
    bool tools;          /* parse tool calls (tools given and tool_choice is not "none") */
    bool reasoning;      /* split <think> blocks / the analysis channel off as reasoning */
    bool think_open;     /* the prompt ended inside <think> (the answer starts as reasoning) */
    bool parallel;       /* false: only the first tool call is kept */
    uint64_t id_seed;    /* tool-call ids are derived from it and the call's index (stable) */
} srv_parse_cfg;

/* The parser settings of a rendered chat request (srv_chat_render set p->syntax, think_open;
 * srv_read_chat_extras the rest); tool-call ids are derived from req_id and the choice. Use
 * only when p->parse_output is true (otherwise the answer is plain content). */
srv_parse_cfg srv_parse_cfg_for(const srv_params *p, const char *req_id, int choice);

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
} srv_chat_out;

/* Parses text[0..n). final = false: a prefix of a growing text; only what no continuation can
 * change is put in *out (text that may start a marker, an open tool call, trailing whitespace
 * are held back). final = true: everything; a tool call that does not parse (bad JSON, cut
 * off) stays in the content as the model wrote it, never an error. *out is reset first.
 * Returns 0, or -1 when out of memory. */
int srv_chat_parse(const srv_parse_cfg *cfg, const char *text, size_t n, bool final, srv_chat_out *out);
void srv_chat_out_free(srv_chat_out *o);

/* The OpenAI chat message's tool_calls array for o (NULL when it has none). */
json_t *srv_tool_calls_json(const srv_chat_out *o);

/* Streaming: what a growing text adds. Feed the whole text so far; *delta gets the new
 * reasoning and content bytes and the calls completed since the last call (indices from
 * `first_call`). Callers send them as deltas; final = true at the end of the text. */
typedef struct srv_chat_stream {
    bool ready;          /* cfg set */
    srv_parse_cfg cfg;
    size_t sent_reasoning, sent_content, sent_calls;
    srv_chat_out cur;
} srv_chat_stream;
typedef struct srv_chat_delta {
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
    const srv_tool_call *calls; /* new complete calls */
    size_t n_calls, first_call;
} srv_chat_delta;
int srv_chat_stream_feed(srv_chat_stream *s, const char *text, size_t n, bool final, srv_chat_delta *delta);
void srv_chat_stream_free(srv_chat_stream *s);

/* ---- pieces (reasoning.c) ------------------------------------------------------------------ */

/* <think> splitting of text[0..n): the reasoning [*r0, *r1) and where the rest starts (*rest);
 * in partial mode *rest may be n with text held back. Returns false when the text has no
 * reasoning (then *rest = 0). */
bool srv_think_split(const char *t, size_t n, bool open, bool final, size_t *r0, size_t *r1, size_t *rest);
/* Whether a rendered prompt leaves the model inside a <think> block (it ends with "<think>"
 * and optional whitespace, as DeepSeek-R1-style templates do). */
bool srv_prompt_opens_think(const char *prompt, size_t n);
/* Harmony (gpt-oss) text to reasoning (analysis), content (final and plain commentary) and
 * calls (commentary to=functions.NAME). */
int srv_harmony_parse(const srv_parse_cfg *cfg, const char *t, size_t n, bool final, srv_chat_out *out);

/* shared by the parsers (tool_calls.c) */
int srv_chat_add_call(srv_chat_out *o, const srv_parse_cfg *cfg, const char *name, size_t name_len,
                      const char *args, size_t args_len);
/* The length of the longest suffix of t[0..n) that is a proper prefix of `marker` (text that
 * may become the marker once more arrives). */
size_t srv_marker_tail(const char *t, size_t n, const char *marker);

#endif
