/* oai.h — the OpenAI request/response mapping of `rocmforge serve`, apart from HTTP: routing,
 * request bodies (JSON) to checked parameters, parameters to engine requests, and the JSON of
 * responses, stream chunks and errors. Nothing here touches a socket, so the request parser
 * can be fuzzed on its own (tests/fuzz/fuzz_server.c) and unit-tested (test_server_parse.c). */
#ifndef RF_SERVER_OAI_H
#define RF_SERVER_OAI_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rocmforge/engine.h"
#include "engine/grammar.h"

/* ---- limits (the engine's, engine.h) ------------------------------------------------------ */

#define SRV_MAX_N 64          /* RF_REQ_N: choices per prompt */
#define SRV_MAX_STOP 16       /* rf_request_add_stop */
#define SRV_MAX_TOP_LOGPROBS 20
#define SRV_MAX_PROMPTS 64    /* prompts in one /v1/completions request */
#define SRV_MAX_MESSAGES 4096

/* ---- routes ------------------------------------------------------------------------------- */

typedef enum srv_route {
    SRV_ROUTE_NONE = 0, /* unknown path: 404 */
    SRV_ROUTE_HEALTH,
    SRV_ROUTE_MODELS,
    SRV_ROUTE_METRICS,
    SRV_ROUTE_CHAT,
    SRV_ROUTE_COMPLETIONS,
    SRV_ROUTE_MESSAGES,   /* Anthropic's /v1/messages (oai_messages.c) */
    SRV_ROUTE_RESPONSES,  /* OpenAI's /v1/responses, stateless (oai_responses.c) */
    SRV_ROUTE_TOKENIZE,   /* llama-server's /tokenize and /detokenize (oai_tokenize.c) */
    SRV_ROUTE_DETOKENIZE,
    SRV_ROUTE_EMBEDDINGS, /* OpenAI's /v1/embeddings (oai_embed.c) */
    SRV_ROUTE_COUNT
} srv_route;

/* The route a path names ("/v1/chat/completions", also without "/v1"; a query string is
 * ignored, a trailing slash is another path). */
srv_route srv_route_of(const char *path);
/* Whether `method` is allowed on the route (GET and HEAD for health/models/metrics, POST for
 * the two completions routes); *allow gets the Allow header's value. */
bool srv_route_allows(srv_route r, const char *method, const char **allow);
/* "chat", "completions", "models", "health", "metrics" or "other" (metric labels). */
const char *srv_route_name(srv_route r);

/* ---- errors ------------------------------------------------------------------------------- */

/* An OpenAI-shaped error: {"error": {"message", "type", "param", "code"}}. */
typedef struct srv_error {
    int status;           /* HTTP status */
    const char *type;     /* invalid_request_error, authentication_error, not_found_error,
                             server_error, unavailable_error */
    const char *code;     /* context_length_exceeded, model_not_found, invalid_api_key, ... or NULL */
    char param[64];       /* the field at fault ("messages[2].role") or "" (null) */
    char message[512];
} srv_error;

/* Fills *e; returns -1 (for `return srv_fail(...)`). */
int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* srv_fail with the arguments as a va_list. */
int srv_failv(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
              va_list ap);
/* The error's JSON body (malloc'd, NUL-terminated); NULL when out of memory. */
char *srv_error_json(const srv_error *e);
/* A 400 invalid_request_error naming param (srv_fail's shape); returns -1. */
int srv_bad(srv_error *e, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* A JSON value's type in an error message ("an object", "a string", ...; NULL: "absent"). */
const char *srv_json_type_name(const json_t *v);

/* ---- parsed requests ---------------------------------------------------------------------- */

typedef struct srv_prompt {
    char *text;        /* a text prompt (NULL for token ids) */
    size_t len;
    int32_t *ids;      /* token ids */
    size_t n_ids;
} srv_prompt;

typedef struct srv_msg {
    char *role;        /* system, user, assistant or tool ("developer" is read as system) */
    char *content;     /* text parts joined with "\n" */
} srv_msg;

/* The API shape a chat request came in and is answered in. */
typedef enum srv_api {
    SRV_API_OPENAI = 0, /* chat/completions, completions */
    SRV_API_MESSAGES,   /* Anthropic Messages: parsed into a chat request, answered as a message */
    SRV_API_RESPONSES   /* OpenAI Responses: likewise, answered as a response object */
} srv_api;

typedef struct srv_params {
    srv_route route;            /* SRV_ROUTE_CHAT or SRV_ROUTE_COMPLETIONS (Messages and Responses: CHAT) */
    srv_api api;                /* the shape of the answer */
    char *instructions;         /* Responses: 'instructions', echoed in the response object */
    char *model;                /* NULL when not given */
    srv_msg *msgs;              /* chat */
    size_t n_msgs;
    srv_prompt *prompts;        /* completions: one or more */
    size_t n_prompts;
    bool stream, include_usage, echo, ignore_eos;
    bool parse_special;         /* completions: control-token texts in the prompt become those
                                   tokens (llama.cpp's name); default false: the prompt is text */
    int64_t max_tokens;         /* -1: not given (until EOS or the context is full) */
    rf_sampler_params sp;       /* sampling, built once here and handed to the engine by pointer;
                                   sp.seed: the client's seed (64-bit; a negative one as its
                                   two's complement) when has_seed */
    bool has_seed;
    int32_t n;
    int32_t logprobs;           /* -1: none; else top alternatives wanted (0..20) */
    char *stop[SRV_MAX_STOP];
    size_t stop_len[SRV_MAX_STOP];
    int n_stop;
    /* chat: tools and reasoning (oai_tools.c, oai_request.c) */
    char *messages_json;        /* the messages as the template renders them (tool_calls, tool results) */
    char *tools_json;           /* the tools offered (NULL: none, or tool_choice "none") */
    char *tmpl_vars_json;       /* chat_template_kwargs + reasoning_effort (NULL: none) */
    int tool_choice;            /* SRV_TOOL_CHOICE_* */
    bool parallel_tool_calls;   /* default true */
    bool reasoning_split;       /* default true; "reasoning_format": "none" turns it off */
    bool reasoning_force;       /* "reasoning_format": "deepseek": split <think> whatever the template */
    /* set by srv_chat_render: the rendered prompt and how to read the answer */
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    bool render_special;        /* the answer's control tokens are text the parser needs */
    int syntax;                 /* srv_tool_syntax (tool_calls.h) */
    bool parse_output;          /* split reasoning / parse tool calls out of the answer */
    bool think_open;            /* the prompt ends inside <think> */
    bool thinks;                /* the template's answers may open with a <think> block */
    rf_grammar *grammar;        /* response_format json_object / json_schema or 'grammar' (owned) */
    /* embeddings (oai_embed.c): the inputs are `prompts` */
    bool embd_base64;           /* encoding_format "base64" (else "float") */
    int64_t dimensions;         /* 'dimensions' as asked (0: not given) */
} srv_params;

enum { SRV_TOOL_CHOICE_AUTO = 0, SRV_TOOL_CHOICE_NONE, SRV_TOOL_CHOICE_REQUIRED, SRV_TOOL_CHOICE_NAMED };

/* The chat request's tool and reasoning fields (oai_tools.c), after its messages were read:
 * checks tools (400 naming a malformed one), tool_choice, parallel_tool_calls,
 * chat_template_kwargs, reasoning_effort, reasoning_format, and builds p->messages_json. */
int srv_read_chat_extras(json_t *root, srv_params *p, srv_error *e);
/* p->messages_json adjusted for the template (oai_tools.c): harmony reads reasoning as
 * `thinking`; for a template that drops them, assistant tool calls inlined as the model wrote
 * them (Hermes) and the tools put in the system message (as text, or as the system message's
 * `tools` field where the template reads that). A JSON string to free, NULL when out of memory. */
char *srv_adjust_messages(const srv_params *p, bool harmony, bool inject_tools, bool inline_calls, bool sys_field);
/* Renders p's chat through the model's template (tools and variables included) and tokenizes
 * it as the engine would (the messages' text plain): sets p->prompt_ids and how the answer is
 * parsed (oai_request.c). A template error (raise_exception) is a 400; a prompt longer than
 * the context a 400 context_length_exceeded. A model without a template: 0, nothing set. */
int srv_chat_render(const rf_model *m, int32_t n_ctx, srv_params *p, srv_error *e);

/* response_format (json_object, json_schema) and 'grammar' (GBNF) compiled into p->grammar;
 * a schema outside the supported subset is a 400 naming the keyword (oai_structured.c). */
int srv_read_structured(json_t *root, srv_params *p, srv_error *e);
/* tool_choice "required" or a named function on a chat whose answer is parsed (srv_chat_render):
 * the grammar that forces a call in the template's syntax, after the reasoning its answers may
 * open with (tool_grammar.h); NULL when nothing is enforced. */
int srv_tool_grammar(const srv_params *p, rf_grammar **out, srv_error *e);

/* Parses and checks a request body for a completions route. Returns 0 and fills *p (free with
 * srv_params_free), or -1 with a 400 in *e naming the field. Unknown fields are ignored (as
 * the peers do); fields this server cannot honour (tools, logit_bias, json response formats,
 * suffix, best_of > n, echo with logprobs) are refused rather than silently dropped. */
int srv_parse_request(srv_route route, const char *body, size_t len, srv_params *p, srv_error *e);
/* A request body that must be a JSON object (oai_request.c; every route's parser loads through
 * it): NULL with a 400 in *e when it is empty, not JSON (or holds U+0000) or not an object. */
json_t *srv_body_object(const char *body, size_t len, srv_error *e);
/* The chat and completions routes' parser that srv_parse_request and the translated
 * Messages/Responses bodies use (oai_request.c, as srv_parse_request). */
int srv_parse_openai(srv_route route, const char *body, size_t len, srv_params *p, srv_error *e);
void srv_params_free(srv_params *p);

/* ---- other API shapes on the same engine (oai_messages.c, oai_responses.c) ---------------- */

/* Anthropic Messages (POST /v1/messages) and OpenAI Responses (POST /v1/responses) bodies
 * (root, loaded by srv_parse_request): checked in their own terms (a 400 names their field) and
 * translated into the chat body `chat` (an empty object given), which srv_parse_request then
 * parses with srv_parse_openai, so that every sampling check is the same; *p comes back with
 * route SRV_ROUTE_CHAT, n 1, no logprobs and api set. Responses' 'instructions' are copied into
 * *instructions (to free). 0, or -1 with *e. */
int srv_messages_to_chat(json_t *root, json_t *chat, srv_error *e);
int srv_responses_to_chat(json_t *root, json_t *chat, char **instructions, srv_error *e);
/* An Anthropic-shaped error: {"type":"error","error":{"type","message"}} with Anthropic's type
 * for the HTTP status (invalid_request_error, authentication_error, permission_error,
 * not_found_error, request_too_large, rate_limit_error, api_error, overloaded_error). */
char *srv_anthropic_error_json(const srv_error *e);
const char *srv_anthropic_error_type(int status);
/* Anthropic's stop_reason for a finish: end_turn, max_tokens, stop_sequence,
 * model_context_window_exceeded. */
const char *srv_anthropic_stop_reason(rf_finish_reason f);

/* ---- /tokenize and /detokenize (oai_tokenize.c) -------------------------------------------- */

typedef struct srv_tok_req {
    char *content;      /* tokenize: the text */
    size_t len;
    bool add_special;   /* BOS/EOS as the model adds them (default false, as llama-server) */
    bool parse_special; /* control-token texts become those tokens (default true, as llama-server) */
    bool with_pieces;   /* answer [{"id", "piece"}] instead of ids */
    int32_t *ids;       /* detokenize: the ids */
    size_t n_ids;
} srv_tok_req;

/* Parses a /tokenize (route SRV_ROUTE_TOKENIZE) or /detokenize body. 0, or -1 with a 400. */
int srv_parse_tokenize(srv_route route, const char *body, size_t len, srv_tok_req *t, srv_error *e);
void srv_tok_req_free(srv_tok_req *t);
/* The answer: {"tokens": [...]} or {"content": "..."}. Token ids outside the vocabulary and a
 * text of more than max_tokens tokens are 400s. NULL with *e on failure. */
json_t *srv_tokenize_answer(const rf_vocab *v, srv_route route, const srv_tok_req *t, size_t max_tokens, srv_error *e);

/* ---- parameters to engine requests -------------------------------------------------------- */

typedef struct srv_prepared {
    rf_request **reqs;          /* one per prompt (chat: one) */
    int32_t *n_prompt;          /* prompt tokens of each */
    int n;
    int64_t max_tokens;         /* tokens each choice may generate (after the context check) */
} srv_prepared;

/* Builds the engine requests of p (without callbacks) and checks each prompt against the
 * context: prompt + max_tokens > n_ctx is a 400 context_length_exceeded naming both numbers;
 * with no max_tokens a choice may fill the context. `seed` is used when p has none. Prompt
 * ids outside [0, n_vocab) are a 400. Returns 0, or -1 with *e. */
int srv_prepare(rf_engine *eng, int32_t n_ctx, const srv_params *p, uint64_t seed, srv_prepared *out, srv_error *e);
void srv_prepared_free(srv_prepared *pr);
/* Room for n engine requests and their prompt lengths in out; -1 (a 503 in e) when out of memory. */
int srv_prepared_alloc(srv_prepared *out, int n, srv_error *e);

/* ---- /v1/embeddings (oai_embed.c) ------------------------------------------------------------ */

#define SRV_MAX_EMBED_INPUTS 2048 /* inputs in one /v1/embeddings request (OpenAI's limit) */

/* Reads a /v1/embeddings body (root, loaded by srv_parse_request): 'input' (a string, an array of
 * strings, an array of token ids or an array of arrays of ids) into p->prompts,
 * 'encoding_format', 'dimensions', 'model'. 0, or -1 with a 400 naming the field (p freed). */
int srv_parse_embeddings(json_t *root, srv_params *p, srv_error *e);
/* The engine requests of an embeddings body: one per input, pooled as `pooling` (the model's);
 * 'dimensions' other than n_embd, a pooling the model cannot do, an input with no tokens or one
 * longer than the context (context_length_exceeded) are 400s. 0, or -1 with *e. */
int srv_embed_prepare(rf_engine *eng, int32_t n_ctx, rf_pooling pooling, int32_t n_embd, const srv_params *p,
                      srv_prepared *out, srv_error *e);
/* An embedding as the answer writes it: a JSON array of numbers, or base64 of its little-endian
 * float32 bytes (what the OpenAI SDKs decode). NULL when out of memory. */
json_t *srv_embedding_json(const float *v, int32_t n, bool base64);

/* ---- output helpers ----------------------------------------------------------------------- */

/* A JSON string of any bytes: invalid UTF-8 becomes U+FFFD (one per maximal invalid subpart). */
json_t *srv_json_bytes(const char *s, size_t n);

/* A growable byte buffer. */
typedef struct srv_buf {
    char *p;
    size_t len, cap;
    bool oom;
} srv_buf;
void srv_buf_add(srv_buf *b, const void *s, size_t n);
void srv_buf_printf(srv_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void srv_buf_free(srv_buf *b);
/* Appends "event: <name>\ndata: <compact json>\n\n" and consumes j. */
void srv_buf_sse_event(srv_buf *b, const char *name, json_t *j);

#endif
