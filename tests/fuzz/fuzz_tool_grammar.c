/* fuzz_tool_grammar.c — libFuzzer target for the tool-call grammars (tool_choice "required" /
 * named) against the answer parser: byte 0 picks the syntax, the reasoning shape, parallel calls,
 * a named function and which tool list; the rest steers a walk through the grammar and the
 * stream's cuts (invariants in fuzz_tool_walk_body.h). Build: make fuzz. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_tool_walk_body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    rf_tw_src src = {.p = data + 1, .n = size - 1};
    RF_FUZZ_CHECK(rf_tw_case(data[0], &src) >= 0); /* a walk finishes within RF_TW_CAP */
    return 0;
}
