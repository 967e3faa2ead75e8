/* oai_request.c — a request body to checked parameters by its route (oai.h): Anthropic Messages
 * and OpenAI Responses bodies to their translators (oai_messages.c, oai_responses.c), which hand
 * a chat body back to the OpenAI parser (oai_parse.c); chat and completions to that parser. */
#include "oai.h"

int srv_parse_request(srv_route route, const char *body, size_t len, srv_params *p, srv_error *e) {
    if (route == SRV_ROUTE_MESSAGES) return srv_parse_messages(body, len, p, e);
    if (route == SRV_ROUTE_RESPONSES) return srv_parse_responses(body, len, p, e);
    return srv_parse_openai(route, body, len, p, e);
}
