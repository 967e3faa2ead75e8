/* tool_grammar.h — the grammar that enforces tool_choice "required" or a named function: the
 * answer is one call (or several) of the offered tools in the syntax the server's parser reads
 * for the template (tool_calls.h), after the reasoning the template's answers may open with
 * (tool_grammar.c). Whatever the grammar admits, srv_chat_parse turns into exactly those calls. */
#ifndef RF_SERVER_TOOL_GRAMMAR_H
#define RF_SERVER_TOOL_GRAMMAR_H

#include <jansson.h>
#include <stdbool.h>

#include "chat_out.h"
#include "engine/grammar.h"

/* The reasoning before the calls (not harmony's: its analysis message is always optional). */
typedef enum srv_think_shape {
    SRV_THINK_NONE = 0, /* the calls come first */
    SRV_THINK_OPTIONAL, /* "<think>" text "</think>" may come first (the template's answers may open with it) */
    SRV_THINK_OPEN      /* the prompt opened <think>: text "</think>" comes first */
} srv_think_shape;

typedef struct srv_tool_grammar_opts {
    srv_tool_syntax syntax; /* NONE: Hermes, which the parser reads for it */
    const char *only;       /* only this function (NULL: any of the tools) */
    bool parallel;          /* one call or more (harmony: still one; its turn ends with the call) */
    srv_think_shape think;
    bool control_text;      /* the output renders control tokens: the mask matches them by their text
                             * (rf_grammar_set_control_text), as the parser reads them */
} srv_tool_grammar_opts;

/* The grammar of the calls of `tools` (a chat-completions tools array) that opts allows. Each
 * call's arguments follow its tool's `parameters` (any object when the schema is outside the
 * subset of srv_json_grammar). The forms, per syntax (N the name as a JSON string, A the
 * arguments, n the bare name):
 *   Hermes   <tool_call>\n{"name": N, "arguments": A}\n</tool_call>, several joined by "\n"
 *   Llama 3  {"name": N, "parameters": A}, several joined by "; "
 *   Mistral  [TOOL_CALLS][{"name": N, "arguments": A}, ...]  or  [TOOL_CALLS]n[ARGS]A, repeated
 *   harmony  (<|channel|>analysis<|message|>R<|end|><|start|>assistant)?
 *            <|channel|>commentary to=functions.n <|constrain|>json<|message|>A
 * R is any text without "<|"; a <think> block's text any without "</think>". Returns 0, or -1
 * with err set (no tool to call, out of memory, the grammar too large). */
int srv_tool_call_grammar(json_t *tools, const srv_tool_grammar_opts *opts, rf_grammar **out, char *err, size_t errlen);

#endif
