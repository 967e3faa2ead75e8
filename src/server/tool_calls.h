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

#include "chat_out.h"
#include "oai.h"
#include "reasoning.h"

/* The syntax a chat template's source implies (NULL: none), and whether its answers may open
 * with a <think> block. */
srv_tool_syntax srv_tool_syntax_detect(const char *tmpl_src, bool *thinks);
const char *srv_tool_syntax_name(srv_tool_syntax s);

/* The parser settings of a rendered chat request (srv_chat_render set p->syntax, think_open;
 * srv_read_chat_extras the rest); tool-call ids are derived from req_id and the choice. Use
 * only when p->parse_output is true (otherwise the answer is plain content). */
srv_parse_cfg srv_parse_cfg_for(const srv_params *p, const char *req_id, int choice);

/* Parses text[0..n). final = false: a prefix of a growing text; only what no continuation can
 * change is put in *out (text that may start a marker, an open tool call, trailing whitespace
 * are held back). final = true: everything; a tool call that does not parse (bad JSON, cut
 * off) stays in the content as the model wrote it, never an error. *out is reset first.
 * Returns 0, or -1 when out of memory. */
int srv_chat_parse(const srv_parse_cfg *cfg, const char *text, size_t n, bool final, srv_chat_out *out);

/* The OpenAI chat message's tool_calls array for o (NULL when it has none). */
json_t *srv_tool_calls_json(const srv_chat_out *o);

/* Streaming: what a growing text adds. Feed the whole text so far; *delta gets the new
 * reasoning and content bytes and the calls' new parts. Callers send them as deltas; final =
 * true at the end of the text.
 *
 * A call's first part has its id and name, the next ones bytes to append to its arguments, sent
 * as the model writes them, in every syntax (Hermes, Llama 3.x JSON, Mistral, harmony): the
 * first part once the name is whole and the arguments object has begun (each parser reports
 * that call as chat_out's open call; srv_args_scan gives its bytes so far), with the model's own
 * id where it wrote one before the arguments (Mistral [CALL_ID]). Only a JSON call object
 * written with other keys before "name" or arguments as a string goes out in one piece once it
 * parses. The final parse takes the arguments as srv_args_scan's text, so the parts add up to
 * exactly its arguments. A call whose final parse fails after parts went out ends with what was
 * sent (its text is content then, as in the final parse); later calls' stream indices then run
 * one ahead of their index in the final parse, and their derived ids follow the stream index. */
typedef struct srv_call_part {
    size_t index;            /* the call's index in the stream */
    const char *id, *name;   /* the call's first part: its id and name (else NULL) */
    const char *args;        /* bytes to append to its arguments */
    size_t args_len;
} srv_call_part;
typedef struct srv_chat_stream {
    bool ready;          /* cfg set */
    srv_parse_cfg cfg;
    size_t sent_reasoning, sent_content, sent_calls;
    srv_chat_out cur;
    /* the call being streamed (its first part is out; head_at: where it starts, as the parse's
     * srv_tool_call.at and open_at say), and the calls that died */
    bool head_sent;
    size_t head_at, dead;
    srv_buf head_id;     /* its id (the model's own, or derived from its stream index) */
    srv_buf sent_args;   /* its arguments sent so far */
    srv_call_part *parts;
    size_t cap_parts;
} srv_chat_stream;
typedef struct srv_chat_delta {
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
    const srv_call_part *parts; /* the calls' new parts, in order */
    size_t n_parts;
} srv_chat_delta;
int srv_chat_stream_feed(srv_chat_stream *s, const char *text, size_t n, bool final, srv_chat_delta *delta);
void srv_chat_stream_free(srv_chat_stream *s);

#endif
