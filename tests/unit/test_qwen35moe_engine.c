/* test_qwen35moe_engine.c — test_qwen35_engine.c's cases (prompt chunks of 1/3/7/16 tokens ==
 * one chunk, batch invariance with staggered arrival, n = 3 forks, preemption, cancellation,
 * the randomized engine check) on tiny-qwen35moe: the hybrid layers with a mixture of experts
 * and a sigmoid-gated shared expert. Every CPU op stays row-independent (the router, the
 * indirect products and the shared expert's gate are per token), so the same bit identity holds. */
#define HYBRID_PRESET "tiny-qwen35moe"
#include "test_qwen35_engine.c"
