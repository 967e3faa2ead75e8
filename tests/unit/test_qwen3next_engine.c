/* test_qwen3next_engine.c — test_qwen35_engine.c's cases (prompt chunks of 1/3/7/16 tokens ==
 * one chunk, batch invariance with staggered arrival, n = 3 forks, preemption, cancellation,
 * the randomized engine check) on tiny-qwen3next: grouped DeltaNet value heads and the joined
 * ssm_ba, regrouped at load, with experts and a shared expert. */
#define HYBRID_PRESET "tiny-qwen3next"
#include "test_qwen35_engine.c"
