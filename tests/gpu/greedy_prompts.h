/* greedy_prompts.h — the prompts of the real-model greedy comparisons (test_gpu_forward and
 * rf_greedy_trace, which must agree on them so the CPU's own float-order noise can be set beside
 * the GPU's). */
#ifndef RF_GREEDY_PROMPTS_H
#define RF_GREEDY_PROMPTS_H

static const char *k_prompts[] = {
    "The capital of France is",
    "To make a simple tomato soup, you will need",
    "Photosynthesis is the process by which plants",
    "Here are three tips for staying productive:\n1.",
    "# Python function that reverses a string\ndef reverse_string(s):",
    "The Roman Empire was founded in",
    "Question: What is 12 plus 7?\nAnswer:",
    "Dear Sir or Madam,\n\nI am writing to",
};
enum { RF_GREEDY_PROMPTS = sizeof k_prompts / sizeof *k_prompts, RF_GREEDY_STEPS = 64 };

#endif
