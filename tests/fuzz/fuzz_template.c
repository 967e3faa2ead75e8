/* fuzz_template.c — libFuzzer target for the Jinja engine (parse, render, data ranges); the body
 * is shared with the corpus replay unit test. Build: make fuzz (clang, -DRF_FUZZ=ON). */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_template_body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return rf_fuzz_template_one(data, size);
}
