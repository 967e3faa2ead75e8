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

#endif
