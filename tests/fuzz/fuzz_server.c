/* fuzz_server.c — libFuzzer target for the server's request parser and router (and the
 * parameters-to-engine-request step, on a real vocabulary and chat template); the body is
 * shared with the corpus replay unit test. Build: make fuzz (clang, -DRF_FUZZ=ON). The model is
 * $RF_FUZZ_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf, else a synthetic tiny one. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "fuzz_server_body.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static rf_fuzz_srv g_srv;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *m = getenv("RF_FUZZ_MODEL");
    if (rf_fuzz_srv_init(&g_srv, m ? m : RF_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf")) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rf_fuzz_srv_one(&g_srv, data, size);
    return 0;
}
