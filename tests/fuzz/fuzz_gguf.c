/* fuzz_gguf.c — libFuzzer target for the GGUF reader (and writer round trip); the body is
 * shared with the corpus replay unit test. Build: make fuzz (clang, -DRF_FUZZ=ON). */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>

#include "fuzz_gguf_body.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return rf_fuzz_gguf_one(data, size);
}
