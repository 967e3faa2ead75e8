/* fuzz_check.h — the fuzz targets' invariant check (fuzz_*_body.h, fuzz_grammar.c): a violated
 * invariant prints itself and traps, so libFuzzer (and the corpus replay tests) report a crash. */
#ifndef RF_FUZZ_CHECK_H
#define RF_FUZZ_CHECK_H

#include <stdio.h>

#define RF_FUZZ_CHECK(c)                                                                   \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
            __builtin_trap();                                                              \
        }                                                                                  \
    } while (0)

#endif
