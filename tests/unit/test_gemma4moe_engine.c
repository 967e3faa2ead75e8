/* test_gemma4moe_engine.c — test_gemma4_engine.c's cases (prompt chunks of 1/3/7/16 tokens ==
 * one chunk, 8 staggered sequences == alone, preemption, every step checked) on tiny-gemma4moe:
 * gemma4's layers with the experts beside the dense GeGLU. The router (per token), the indirect
 * products (per token and slot) and the weighted sum keep every CPU op row-independent, so the
 * same bit identity holds. */
#define PRESET "tiny-gemma4moe"
#include "test_gemma4_engine.c"
