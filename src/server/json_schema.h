/* json_schema.h — JSON Schema (a common subset) compiled to a grammar for constrained decoding
 * (json_schema.c); the tool-call grammars are in tool_grammar.h. */
#ifndef RF_SERVER_JSON_SCHEMA_H
#define RF_SERVER_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>

#include "engine/grammar.h"

/* A grammar of the JSON texts a schema admits (NULL schema: any JSON object), with bounded
 * whitespace between tokens. Supported: type (one or a list) object/array/string/number/
 * integer/boolean/null, properties (emitted in the schema's order), required, enum, const,
 * items, additionalProperties false/true, anyOf (and oneOf, read as anyOf), minItems/maxItems
 * (up to 64), minLength/maxLength, pattern (a regex subset), format (date, time, date-time,
 * uuid, email, ipv4), minimum/maximum/exclusive* (json_schema_kw.c), $ref into the document,
 * and the annotations title/description/default/examples/$schema/$comment. Any other keyword or
 * construct: -1 with err naming it ("unsupported JSON Schema keyword 'not'"). */
int srv_json_grammar(json_t *schema, rf_grammar **out, char *err, size_t errlen);
#endif
