/* synth_presets.c — mkmodel's preset table (hyper-parameters of real models, from their HF
 * config.json) and the per-architecture metadata keys and tensor lists llama.cpp loads
 * (src/models/llama.cpp, src/models/qwen2.cpp in the peer). One table row per preset; one
 * synth_arch_info per architecture. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth_model.h"

/* name, description, general.name, size label, arch, n_layer, n_embd, n_ff, n_head, n_head_kv,
 * head_dim, n_ctx, rope_base, rms_eps, tied, rope factor/low/high/orig ctx, vocab, pre, sliding
 * window (gemma3, phi3), partial RoPE dims (phi3), longrope (phi3) */
const synth_preset synth_presets[] = {
    {"tiny", "4-layer llama, dim 256, 2048-token Llama-3-style BPE vocabulary (for tests)",
     "Tiny Llama (synthetic)", "6M", SYNTH_ARCH_LLAMA, 4, 256, 512, 4, 2, 64, 2048, 10000.0f,
     1e-5f, false, 0, 0, 0, 0, {SYNTH_VOCAB_LLAMA3, 2048, 16}, "llama-bpe", 0, 0, false},
    {"tiny-qwen2", "2-layer qwen2 (q/k/v biases, tied), dim 384, 3072-token ChatML vocabulary",
     "Tiny Qwen2 (synthetic)", "4M", SYNTH_ARCH_QWEN2, 2, 384, 1024, 6, 2, 64, 4096, 1000000.0f,
     1e-6f, true, 0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 3072, 3000}, "qwen2", 0, 0, false},
    {"tiny-llama2", "2-layer llama, dim 256, 2048-token SentencePiece vocabulary (Llama 2 style)",
     "Tiny Llama 2 (synthetic)", "3M", SYNTH_ARCH_LLAMA, 2, 256, 768, 4, 4, 64, 4096, 10000.0f,
     1e-5f, false, 0, 0, 0, 0, {SYNTH_VOCAB_LLAMA2, 2048, 0}, NULL, 0, 0, false},
    /* tiny-llama3: tiny's shapes and vocabulary with Llama 3.2's rope (base 500000, llama3 scaling
     * factor 32, low 1, high 4, original context 8192), context and tied head, so the logits
     * goldens exercise rope_freqs.weight. At head dim 64 those parameters give 15 factors of 1,
     * 3 smoothed (1.65, 3.29, 9.67) and 14 of 32, as in the real Llama 3.2 1B (also head dim 64). */
    {"tiny-llama3", "4-layer llama, dim 256, Llama 3.2 rope (base 500000, llama3 scaling: rope_freqs), tied, 2048-token Llama-3-style BPE vocabulary",
     "Tiny Llama 3.2 (synthetic)", "3M", SYNTH_ARCH_LLAMA, 4, 256, 512, 4, 2, 64, 131072, 500000.0f,
     1e-5f, true, 32.0f, 1.0f, 4.0f, 8192, {SYNTH_VOCAB_LLAMA3, 2048, 16}, "llama-bpe", 0, 0, false},
    {"smollm2-135m", "SmolLM2-135M-Instruct shapes", "SmolLM2 135M Instruct (synthetic)", "135M",
     SYNTH_ARCH_LLAMA, 30, 576, 1536, 9, 3, 64, 8192, 100000.0f, 1e-5f, true, 0, 0, 0, 0,
     {SYNTH_VOCAB_SMOLLM, 49152, 0}, "smollm", 0, 0, false},
    {"llama3.2-1b", "Llama-3.2-1B-Instruct shapes (llama3 rope scaling, rope_freqs)",
     "Llama 3.2 1B Instruct (synthetic)", "1.2B", SYNTH_ARCH_LLAMA, 16, 2048, 8192, 32, 8, 64,
     131072, 500000.0f, 1e-5f, true, 32.0f, 1.0f, 4.0f, 8192, {SYNTH_VOCAB_LLAMA3, 128256, 256},
     "llama-bpe", 0, 0, false},
    {"llama3-8b", "Meta-Llama-3-8B-Instruct shapes", "Meta Llama 3 8B Instruct (synthetic)", "8.0B",
     SYNTH_ARCH_LLAMA, 32, 4096, 14336, 32, 8, 128, 8192, 500000.0f, 1e-5f, false, 0, 0, 0, 0,
     {SYNTH_VOCAB_LLAMA3, 128256, 256}, "llama-bpe", 0, 0, false},
    {"llama3.1-8b", "Llama-3.1-8B-Instruct shapes (llama3 rope scaling, rope_freqs)",
     "Llama 3.1 8B Instruct (synthetic)", "8.0B", SYNTH_ARCH_LLAMA, 32, 4096, 14336, 32, 8, 128,
     131072, 500000.0f, 1e-5f, false, 8.0f, 1.0f, 4.0f, 8192, {SYNTH_VOCAB_LLAMA3, 128256, 256},
     "llama-bpe", 0, 0, false},
    {"qwen2.5-0.5b", "Qwen2.5-0.5B-Instruct shapes (dim 896: K-quants fall back)",
     "Qwen2.5 0.5B Instruct (synthetic)", "494M", SYNTH_ARCH_QWEN2, 24, 896, 4864, 14, 2, 64,
     32768, 1000000.0f, 1e-6f, true, 0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 151936, 151643}, "qwen2", 0, 0, false},
    {"qwen2.5-7b", "Qwen2.5-7B-Instruct shapes", "Qwen2.5 7B Instruct (synthetic)", "7.6B",
     SYNTH_ARCH_QWEN2, 28, 3584, 18944, 28, 4, 128, 32768, 1000000.0f, 1e-6f, false, 0, 0, 0, 0,
     {SYNTH_VOCAB_QWEN2, 152064, 151643}, "qwen2", 0, 0, false},
    {"llama2-70b", "Llama-2-70b-chat shapes (SentencePiece vocabulary)",
     "Llama 2 70B Chat (synthetic)", "69B", SYNTH_ARCH_LLAMA, 80, 8192, 28672, 64, 8, 128, 4096,
     10000.0f, 1e-5f, false, 0, 0, 0, 0, {SYNTH_VOCAB_LLAMA2, 32000, 0}, NULL, 0, 0, false},
    /* the tensor-parallel benchmark's 70B shape with Llama 3's vocabulary (bench/tp.sh): ~40 GB
     * at Q4_0, one H200 holds it, so TP 1 is the baseline for TP 2 and 4 */
    {"llama3-70b", "Meta-Llama-3-70B-Instruct shapes", "Meta Llama 3 70B Instruct (synthetic)", "70B",
     SYNTH_ARCH_LLAMA, 80, 8192, 28672, 64, 8, 128, 8192, 500000.0f, 1e-5f, false, 0, 0, 0, 0,
     {SYNTH_VOCAB_LLAMA3, 128256, 256}, "llama-bpe", 0, 0, false},
    /* gemma3: tied, q/k norms, post-norms, sliding window 512 on 5 of every 6 layers (layer 5, 11,
     * 17 global). The vocabulary is the SentencePiece family of tiny-llama2 (Gemma's real one is
     * SPM too, with other special ids). Shapes from gemma-3-270m's GGUF. */
    {"tiny-gemma3", "6-layer gemma3 (layer 5 global, sliding window 32), dim 256, 2048-token SPM vocabulary",
     "Tiny Gemma 3 (synthetic)", "5M", SYNTH_ARCH_GEMMA3, 6, 256, 512, 4, 2, 64, 2048, 1000000.0f,
     1e-6f, true, 0, 0, 0, 0, {SYNTH_VOCAB_LLAMA2, 2048, 0}, NULL, 32, 0, false},
    {"gemma3-270m", "Gemma-3-270M shapes (head dim 256, sliding window 512)",
     "Gemma 3 270M (synthetic)", "270M", SYNTH_ARCH_GEMMA3, 18, 640, 2048, 4, 1, 256, 32768,
     1000000.0f, 1e-6f, true, 0, 0, 0, 0, {SYNTH_VOCAB_LLAMA2, 262144, 0}, NULL, 512, 0, false},
    /* qwen3: per-head Q/K RMSNorm before RoPE, no biases, head dim 128 with n_head * 128 !=
     * n_embd (attention.key_length). Shapes from Qwen3-0.6B / Qwen3-8B config.json. */
    {"tiny-qwen3", "3-layer qwen3 (per-head Q/K RMSNorm, 8 heads of 64 over dim 256), tied, 3072-token ChatML vocabulary",
     "Tiny Qwen3 (synthetic)", "5M", SYNTH_ARCH_QWEN3, 3, 256, 768, 8, 4, 64, 40960, 1000000.0f,
     1e-6f, true, 0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 3072, 3000}, "qwen2", 0, 0, false},
    {"qwen3-0.6b", "Qwen3-0.6B shapes (16 heads of 128 over dim 1024, tied)", "Qwen3 0.6B (synthetic)", "0.6B",
     SYNTH_ARCH_QWEN3, 28, 1024, 3072, 16, 8, 128, 40960, 1000000.0f, 1e-6f, true, 0, 0, 0, 0,
     {SYNTH_VOCAB_QWEN2, 151936, 151643}, "qwen2", 0, 0, false},
    {"qwen3-8b", "Qwen3-8B shapes", "Qwen3 8B (synthetic)", "8.2B", SYNTH_ARCH_QWEN3, 36, 4096, 12288, 32, 8,
     128, 40960, 1000000.0f, 1e-6f, false, 0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 151936, 151643}, "qwen2", 0, 0, false},
    /* smollm3: llama layers with no RoPE on every 4th (layers 3, 7, ...). SmolLM3-3B config.json;
     * its tokenizer is Llama 3's (llama-bpe). */
    {"tiny-smollm3", "4-layer smollm3 (layer 3 without RoPE), dim 256, tied, 2048-token Llama-3-style BPE vocabulary",
     "Tiny SmolLM3 (synthetic)", "3M", SYNTH_ARCH_SMOLLM3, 4, 256, 512, 4, 2, 64, 65536, 5000000.0f,
     1e-6f, true, 0, 0, 0, 0, {SYNTH_VOCAB_LLAMA3, 2048, 16}, "llama-bpe", 0, 0, false},
    {"smollm3-3b", "SmolLM3-3B shapes (no RoPE on every 4th layer, tied)", "SmolLM3 3B (synthetic)", "3.1B",
     SYNTH_ARCH_SMOLLM3, 36, 2048, 11008, 16, 4, 128, 65536, 5000000.0f, 1e-6f, true, 0, 0, 0, 0,
     {SYNTH_VOCAB_LLAMA3, 128256, 256}, "llama-bpe", 0, 0, false},
    /* mistral3: Mistral-Small-3.x-24B's text model (llama layers, 32 heads of 128 over dim 5120,
     * rope base 1e9, tekken pre-tokenizer). The vocabulary is the Llama-3-style family with
     * tekken's pre-tokenizer name (Mistral's own specials are not imitated). */
    {"tiny-mistral3", "2-layer mistral3 (8 heads of 64 over dim 256), 2048-token BPE vocabulary (tekken pre-tokenizer)",
     "Tiny Mistral 3 (synthetic)", "4M", SYNTH_ARCH_MISTRAL3, 2, 256, 768, 8, 2, 64, 131072, 1000000000.0f,
     1e-5f, false, 0, 0, 0, 0, {SYNTH_VOCAB_LLAMA3, 2048, 16}, "tekken", 0, 0, false},
    {"mistral-small-3", "Mistral-Small-3.1/3.2-24B text shapes (rope base 1e9)", "Mistral Small 3 24B (synthetic)", "24B",
     SYNTH_ARCH_MISTRAL3, 40, 5120, 32768, 32, 8, 128, 131072, 1000000000.0f, 1e-5f, false, 0, 0, 0, 0,
     {SYNTH_VOCAB_LLAMA3, 131072, 256}, "tekken", 0, 0, false},
    /* phi3 (Phi-4-mini): Q/K/V in one attn_qkv, gate and up in one ffn_up, RoPE on 3/4 of the head
     * (NEOX), longrope factors with original context 4096 and the converter's attn_factor. */
    {"tiny-phi3", "2-layer phi3 (joined QKV and gate/up, RoPE on 32 of 64 dims, longrope: original context 4096 of 16384), tied, 2048-token BPE vocabulary (gpt-4o pre-tokenizer)",
     "Tiny Phi 3 (synthetic)", "3M", SYNTH_ARCH_PHI3, 2, 256, 512, 4, 2, 64, 16384, 10000.0f, 1e-5f, true,
     0, 0, 0, 4096, {SYNTH_VOCAB_LLAMA3, 2048, 16}, "gpt-4o", 0, 32, true},
    {"phi4-mini", "Phi-4-mini-instruct shapes (24 heads of 128, RoPE on 96 dims, longrope 4096 -> 131072, tied)",
     "Phi 4 Mini Instruct (synthetic)", "3.8B", SYNTH_ARCH_PHI3, 32, 3072, 8192, 24, 8, 128, 131072, 10000.0f,
     1e-5f, true, 0, 0, 0, 4096, {SYNTH_VOCAB_LLAMA3, 200064, 256}, "gpt-4o", 262144, 96, true},
    /* qwen3moe: qwen3's attention (per-head Q/K norms, head dim 128 != n_embd / n_head in the
     * real one) and a mixture of experts in every layer (softmax router, top-k renormalised).
     * Shapes of Qwen3-30B-A3B from its config.json: 48 layers, dim 2048, 32 heads / 4 KV heads of
     * 128, 128 experts of 768, top 8, feed_forward_length 6144 (the converter writes it; no layer
     * uses it), vocabulary 151936. The tiny one has 8 experts of 128 (the 8-expert rules of
     * llama-quantize apply: attn_k / attn_v in q8_0) and routes top-2. */
    {"tiny-qwen3moe", "3-layer qwen3moe (8 experts of 128, top-2; 8 heads of 64 over dim 256), tied, 3072-token ChatML vocabulary",
     "Tiny Qwen3 MoE (synthetic)", "8M", SYNTH_ARCH_QWEN3MOE, 3, 256, 768, 8, 4, 64, 40960, 1000000.0f,
     1e-6f, true, 0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 3072, 3000}, "qwen2", 0, 0, false},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B shapes (128 experts of 768, top-8; 32 heads / 4 KV of 128 over dim 2048)",
     "Qwen3 30B A3B (synthetic)", "30B-A3B", SYNTH_ARCH_QWEN3MOE, 48, 2048, 6144, 32, 4, 128, 40960, 1000000.0f,
     1e-6f, false, 0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 151936, 151643}, "qwen2", 0, 0, false},
    /* gpt-oss: attention with Q/K/V/O biases and per-head sinks, sliding window on the even
     * layers, YaRN (factor 32 over an original context of 4096: rope factor / orig ctx below), a
     * mixture of experts with router and expert biases and the clamped SwiGLU in every layer.
     * gpt-oss-20b's config.json: 24 layers, dim 2880, 64 heads / 8 KV heads of 64, 32 experts
     * of 2880, top 4, window 128, rope base 150000, vocabulary 201088 (o200k_harmony, gpt-4o
     * pre-tokenizer), not tied. The tiny one keeps head dim 64 with n_head * 64 != n_embd, 16
     * experts of 128 (top 4, as the real one's ratio of chosen experts), window 16. */
    {"tiny-gpt-oss", "4-layer gpt-oss (sinks, window 16 on layers 0 and 2, YaRN, 16 experts of 128, top-4; 8 heads of 64 over dim 256), 2048-token BPE vocabulary (gpt-4o pre-tokenizer)",
     "Tiny gpt-oss (synthetic)", "9M", SYNTH_ARCH_GPT_OSS, 4, 256, 128, 8, 2, 64, 131072, 150000.0f,
     1e-5f, false, 32.0f, 0, 0, 4096, {SYNTH_VOCAB_LLAMA3, 2048, 16}, "gpt-4o", 16, 0, false},
    {"gpt-oss-20b", "gpt-oss-20b shapes (32 experts of 2880, top-4; 64 heads / 8 KV of 64 over dim 2880; window 128; YaRN 32 x 4096)",
     "gpt-oss 20b (synthetic)", "20B", SYNTH_ARCH_GPT_OSS, 24, 2880, 2880, 64, 8, 64, 131072, 150000.0f,
     1e-5f, false, 32.0f, 0, 0, 4096, {SYNTH_VOCAB_LLAMA3, 201088, 256}, "gpt-4o", 128, 0, false},
    /* qwen35 (Qwen3.5 dense, src/models/qwen35.cpp): three gated DeltaNet layers for every gated
     * attention layer (Q product with a per-head output gate, RoPE on a quarter of the head as
     * M-RoPE sections), value heads a multiple of the key heads. Qwen3.5-9B: 32 layers of 4096,
     * 16 attention heads of 256 (4 KV), RoPE on 64 dims in sections [11, 11, 10], DeltaNet 16 key
     * and 32 value heads of 128, conv 4, FFN 12288, 248320-token vocabulary (pre-tokenizer qwen35). */
    {"tiny-qwen35", "4-layer qwen35 (3 gated DeltaNet layers: 2 key / 4 value heads of 64, conv 4; 1 gated attention layer: 4 heads of 64, RoPE on 16 dims), tied, 3072-token ChatML vocabulary",
     "Tiny Qwen3.5 (synthetic)", "4M", SYNTH_ARCH_QWEN35, 4, 256, 512, 4, 2, 64, 262144, 10000000.0f, 1e-6f, true,
     0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 3072, 3000}, "qwen35", 0, 16, false},
    {"qwen3.5-9b", "Qwen3.5-9B shapes (24 gated DeltaNet + 8 gated attention layers)", "Qwen3.5 9B (synthetic)", "9B",
     SYNTH_ARCH_QWEN35, 32, 4096, 12288, 16, 4, 256, 262144, 10000000.0f, 1e-6f, false, 0, 0, 0, 0,
     {SYNTH_VOCAB_QWEN2, 248320, 248044}, "qwen35", 0, 64, false},
    /* qwen35moe (src/models/qwen35moe.cpp): qwen35's layers with a mixture of experts plus a
     * sigmoid-gated shared expert in every layer. Qwen3.6-35B-A3B (= Qwen3.5-35B-A3B shapes),
     * config.json text_config as conversion/qwen.py (Qwen3_5MoeTextModel) maps it: 40 layers of
     * 2048, 16 attention heads of 256 (2 KV), partial_rotary_factor 0.25 (RoPE on 64 dims,
     * mrope_section [11, 11, 10]), DeltaNet 16 key / 32 value heads of 128, conv 4, 256 experts
     * of 512 (moe_intermediate_size), top 8, shared expert 512
     * (shared_expert_intermediate_size), no intermediate_size (so no feed_forward_length),
     * rope_theta 1e7, 248320-token vocabulary, not tied (llama.cpp's snapshot names the 40-layer
     * file 35B.A3B and its kernels' comments 16 Q / 2 KV heads and 256 experts). The tiny one:
     * 8 experts of 128, top 2, a shared expert of 192 (a width of its own, so a mix-up shows). */
    {"tiny-qwen35moe", "4-layer qwen35moe (3 gated DeltaNet layers: 2 key / 4 value heads of 64; 1 gated attention layer; 8 experts of 128, top-2, shared expert of 192), tied, 3072-token ChatML vocabulary",
     "Tiny Qwen3.5 MoE (synthetic)", "8M", SYNTH_ARCH_QWEN35MOE, 4, 256, 0, 4, 2, 64, 262144, 10000000.0f, 1e-6f, true,
     0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 3072, 3000}, "qwen35", 0, 16, false},
    {"qwen3.6-35b-a3b", "Qwen3.6-35B-A3B shapes (30 gated DeltaNet + 10 gated attention layers; 256 experts of 512, top-8, shared expert 512)",
     "Qwen3.6 35B A3B (synthetic)", "35B-A3B", SYNTH_ARCH_QWEN35MOE, 40, 2048, 0, 16, 2, 256, 262144, 10000000.0f, 1e-6f,
     false, 0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 248320, 248044}, "qwen35", 0, 64, false},
    /* qwen3next (src/models/qwen3next.cpp; conversion/qwen.py Qwen3NextModel): qwen35moe's
     * layers, but the DeltaNet's value heads grouped by key head (no V reordering in its
     * converter), beta and alpha joined per key head in ssm_ba, plain NeoX RoPE on
     * rope.dimension_count (no sections), feed_forward_length written (intermediate_size).
     * Qwen3-Next-80B-A3B's config.json: 48 layers of 2048, 16 heads of 256 (2 KV),
     * partial_rotary_factor 0.25 (64 dims), DeltaNet 16 key / 32 value heads of 128, conv 4, 512
     * experts of 512, top 10, shared expert 512, intermediate_size 5120, rope_theta 1e7, Qwen2's
     * 151936-token vocabulary, not tied (llama.cpp's snapshot names the 48-layer file 80B.A3B). */
    {"tiny-qwen3next", "4-layer qwen3next (3 gated DeltaNet layers: 2 key / 4 value heads of 64, grouped; 1 gated attention layer; 8 experts of 128, top-2, shared expert of 192), tied, 3072-token ChatML vocabulary",
     "Tiny Qwen3 Next (synthetic)", "8M", SYNTH_ARCH_QWEN3NEXT, 4, 256, 512, 4, 2, 64, 262144, 10000000.0f, 1e-6f, true,
     0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 3072, 3000}, "qwen2", 0, 16, false},
    {"qwen3-next-80b-a3b", "Qwen3-Next-80B-A3B shapes (36 gated DeltaNet + 12 gated attention layers; 512 experts of 512, top-10, shared expert 512)",
     "Qwen3 Next 80B A3B (synthetic)", "80B-A3B", SYNTH_ARCH_QWEN3NEXT, 48, 2048, 5120, 16, 2, 256, 262144, 10000000.0f,
     1e-6f, false, 0, 0, 0, 0, {SYNTH_VOCAB_QWEN2, 151936, 151643}, "qwen2", 0, 64, false},
    /* gemma4 (synth_presets_gemma.c has the rest of its shape): sliding and full layers with
     * different head sizes and KV heads, the last two layers reading earlier layers' KV,
     * per-layer token embeddings, partial proportional RoPE on full layers, soft-capping. */
    {"tiny-gemma4", "8-layer gemma4 (sliding window 16: 4 heads of 64, 2 KV; full: 4 heads of 128, 1 KV, RoPE on 32 dims, V = K; 2 shared-KV layers; per-layer embeddings of 64), dim 256, tied, 2048-token gemma4 vocabulary (BPE over SPM-style text)",
     "Tiny Gemma 4 (synthetic)", "6M", SYNTH_ARCH_GEMMA4, 8, 256, 512, 4, 2, 64, 131072, 1000000.0f, 1e-6f, true,
     0, 0, 0, 0, {SYNTH_VOCAB_GEMMA4, 2048, 0}, NULL, 16, 0, false},
    /* gemma4 with 26B-A4B's head sizes at a tiny width: sliding layers 2 KV heads of 256, full
     * layers 1 KV head of 512 (the GPU's wide-head attention, gpu_attention_wide.cu); otherwise
     * tiny-gemma4's layout (shared-KV layers, per-layer embeddings) */
    {"tiny-gemma4-wide", "8-layer gemma4 with wide heads (sliding window 16: 4 heads of 256, 2 KV; full: 4 heads of 512, 1 KV, RoPE on 128 dims, V = K; 2 shared-KV layers; per-layer embeddings of 64), dim 256, tied, 2048-token gemma4 vocabulary",
     "Tiny Gemma 4 wide heads (synthetic)", "14M", SYNTH_ARCH_GEMMA4, 8, 256, 512, 4, 2, 256, 131072, 1000000.0f, 1e-6f, true,
     0, 0, 0, 0, {SYNTH_VOCAB_GEMMA4, 2048, 0}, NULL, 16, 0, false},
    /* gemma4 MoE (26B-A4B's layout): every layer a dense GeGLU of 256 beside 8 experts of 128,
     * top 2; no per-layer embeddings, no shared-KV layers */
    {"tiny-gemma4moe", "6-layer gemma4 MoE (sliding window 16: 4 heads of 64, 2 KV; full: 4 heads of 128, 1 KV, RoPE on 32 dims, V = K; dense GeGLU of 256 beside 8 experts of 128, top-2), dim 256, tied, 2048-token gemma4 vocabulary",
     "Tiny Gemma 4 MoE (synthetic)", "7M", SYNTH_ARCH_GEMMA4, 6, 256, 256, 4, 2, 64, 131072, 1000000.0f, 1e-6f, true,
     0, 0, 0, 0, {SYNTH_VOCAB_GEMMA4, 2048, 0}, NULL, 16, 0, false},
    /* Gemma 4 26B-A4B (sources in docs/models.md): 30 layers of 2816, 16 heads; sliding layers
     * 8 KV heads of 256, window 1024, RoPE base 1e4; full layers (synth_presets_gemma.c) 2 KV
     * heads of 512, base 1e6; a dense GeGLU of 2112 beside 128 experts of 704, top 8; soft-cap
     * 30; tied; 262144-token vocabulary */
    {"gemma4-26b-a4b", "Gemma-4-26B-A4B shapes (30 layers, 25 sliding + 5 full; 128 experts of 704, top-8, beside a dense GeGLU of 2112)",
     "Gemma 4 26B A4B (synthetic)", "26B-A4B", SYNTH_ARCH_GEMMA4, 30, 2816, 2112, 16, 8, 256, 262144, 1000000.0f, 1e-6f, true,
     0, 0, 0, 0, {SYNTH_VOCAB_GEMMA4, 262144, 0}, NULL, 1024, 0, false},
};
const int32_t synth_n_presets = (int32_t)(sizeof synth_presets / sizeof synth_presets[0]);

static const synth_moe synth_moe_table[] = {
    {"tiny-qwen3moe", 8, 2, 128, 0},
    {"qwen3-30b-a3b", 128, 8, 768, 0},
    {"tiny-gpt-oss", 16, 4, 128, 0},
    {"gpt-oss-20b", 32, 4, 2880, 0},
    {"tiny-qwen35moe", 8, 2, 128, 192},
    {"qwen3.6-35b-a3b", 256, 8, 512, 512},
    {"tiny-qwen3next", 8, 2, 128, 192},
    {"qwen3-next-80b-a3b", 512, 10, 512, 512},
    {"tiny-gemma4moe", 8, 2, 128, 0},
    {"gemma4-26b-a4b", 128, 8, 704, 0},
};

const synth_moe *synth_moe_of(const synth_preset *p) {
    for (size_t i = 0; p && i < sizeof synth_moe_table / sizeof synth_moe_table[0]; i++)
        if (!strcmp(synth_moe_table[i].preset, p->name)) return &synth_moe_table[i];
    return NULL;
}

const synth_preset *synth_preset_find(const char *name) {
    if (!name) return NULL;
    for (int32_t i = 0; i < synth_n_presets; i++)
        if (!strcmp(synth_presets[i].name, name)) return &synth_presets[i];
    return NULL;
}

/* ---- tensor lists ------------------------------------------------------------------------- */

bool synth_list_add(synth_tensor_list *l, const char *name, uint32_t n_dims, int64_t ne0,
                    int64_t ne1, synth_gen gen, float std) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 64;
        synth_tensor *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (!t) return false;
        l->t = t;
        l->cap = cap;
    }
    synth_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = t->ne[3] = 1;
    t->gen = gen;
    t->std = std;
    t->type = RF_TYPE_F32;
    return true;
}

bool synth_list_add3(synth_tensor_list *l, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                     synth_gen gen, float std) {
    if (!synth_list_add(l, name, 2, ne0, ne1, gen, std)) return false;
    l->t[l->n - 1].n_dims = 3;
    l->t[l->n - 1].ne[2] = ne2;
    return true;
}

static int layer_of(const char *name) {
    int l = -1;
    if (!strncmp(name, "blk.", 4)) l = atoi(name + 4);
    return l;
}

static int cmp_tensor(const void *a, const void *b) {
    const synth_tensor *x = a, *y = b;
    int lx = layer_of(x->name), ly = layer_of(y->name);
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

void synth_list_sort(synth_tensor_list *l) {
    if (l->n > 1) qsort(l->t, (size_t)l->n, sizeof *l->t, cmp_tensor);
}

/* Weight scales: a matrix of GGUF shape [n_in, n_out] gets std 1/sqrt(n_in), so every projection
 * keeps unit variance and attention scores / activations stay O(1) through any depth; the
 * embedding and LM head get 2/sqrt(n_embd), so logits have std ~2 (peaked but not one-hot). */
static float mat_std(int64_t n_in) { return 1.0f / sqrtf((float)n_in); }

#define ADD(...)                                          \
    do {                                                  \
        if (!synth_list_add(l, __VA_ARGS__)) return false; \
    } while (0)

/* The llama-family tensors (llama, qwen2): embeddings, head, norms, attention, SwiGLU FFN. */
bool synth_tensors_llama_like(synth_tensor_list *l, const synth_preset *p, int32_t n_layer,
                               uint32_t n_vocab, bool qkv_bias) {
    const int64_t E = p->n_embd, F = p->n_ff, Q = (int64_t)p->n_head * p->head_dim,
                  KV = (int64_t)p->n_head_kv * p->head_dim;
    const float emb_std = 2.0f / sqrtf((float)E);
    ADD("token_embd.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    ADD("output_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
    if (!p->tied) ADD("output.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    if (p->rope_factor > 0) ADD("rope_freqs.weight", 1, p->head_dim / 2, 1, SYNTH_GEN_ROPE_FREQS, 0);
    char nm[64];
#define LADD(suffix, ...)                                \
    do {                                                 \
        snprintf(nm, sizeof nm, "blk.%d." suffix, i);    \
        ADD(nm, __VA_ARGS__);                            \
    } while (0)
    for (int32_t i = 0; i < n_layer; i++) {
        LADD("attn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        LADD("attn_q.weight", 2, E, Q, SYNTH_GEN_RANDOM, mat_std(E));
        LADD("attn_k.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
        LADD("attn_v.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
        if (qkv_bias) {
            LADD("attn_q.bias", 1, Q, 1, SYNTH_GEN_RANDOM, 0.02f);
            LADD("attn_k.bias", 1, KV, 1, SYNTH_GEN_RANDOM, 0.02f);
            LADD("attn_v.bias", 1, KV, 1, SYNTH_GEN_RANDOM, 0.02f);
        }
        LADD("attn_output.weight", 2, Q, E, SYNTH_GEN_RANDOM, mat_std(Q));
        LADD("ffn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        LADD("ffn_gate.weight", 2, E, F, SYNTH_GEN_RANDOM, mat_std(E));
        LADD("ffn_up.weight", 2, E, F, SYNTH_GEN_RANDOM, mat_std(E));
        LADD("ffn_down.weight", 2, F, E, SYNTH_GEN_RANDOM, mat_std(F));
    }
#undef LADD
    return true;
}

/* qwen3 (peer src/models/qwen3.cpp): the llama tensors plus per-head Q/K norm gains (head_dim
 * each), near 1 but not 1 so that a forward that skips them or mixes them up differs. */
static bool tensors_qwen3(synth_tensor_list *l, const synth_preset *p, int32_t n_layer,
                          uint32_t n_vocab) {
    if (!synth_tensors_llama_like(l, p, n_layer, n_vocab, false)) return false;
    char nm[64];
    for (int32_t i = 0; i < n_layer; i++) {
        snprintf(nm, sizeof nm, "blk.%d.attn_q_norm.weight", i);
        ADD(nm, 1, p->head_dim, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
        snprintf(nm, sizeof nm, "blk.%d.attn_k_norm.weight", i);
        ADD(nm, 1, p->head_dim, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
    }
    return true;
}

/* phi3 (peer src/models/phi3.cpp): Q, K, V as one attn_qkv [n_embd, Q + 2 KV] (Q = n_embd),
 * gate and up as one ffn_up [n_embd, 2 n_ff] (gate rows first), the longrope factors. */
static bool tensors_phi3(synth_tensor_list *l, const synth_preset *p, int32_t n_layer,
                         uint32_t n_vocab) {
    const int64_t E = p->n_embd, F = p->n_ff, Q = (int64_t)p->n_head * p->head_dim,
                  KV = (int64_t)p->n_head_kv * p->head_dim, R = p->n_rot ? p->n_rot : p->head_dim;
    const float emb_std = 2.0f / sqrtf((float)E);
    ADD("token_embd.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    ADD("output_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
    if (!p->tied) ADD("output.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    if (p->longrope) {
        ADD("rope_factors_long.weight", 1, R / 2, 1, SYNTH_GEN_LONGROPE_LONG, 0);
        ADD("rope_factors_short.weight", 1, R / 2, 1, SYNTH_GEN_LONGROPE_SHORT, 0);
    }
    char nm[64];
    for (int32_t i = 0; i < n_layer; i++) {
#define PADD(suffix, ...)                                \
    do {                                                 \
        snprintf(nm, sizeof nm, "blk.%d." suffix, i);    \
        ADD(nm, __VA_ARGS__);                            \
    } while (0)
        PADD("attn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        PADD("attn_qkv.weight", 2, E, Q + 2 * KV, SYNTH_GEN_RANDOM, mat_std(E));
        PADD("attn_output.weight", 2, Q, E, SYNTH_GEN_RANDOM, mat_std(Q));
        PADD("ffn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        PADD("ffn_up.weight", 2, E, 2 * F, SYNTH_GEN_RANDOM, mat_std(E));
        PADD("ffn_down.weight", 2, F, E, SYNTH_GEN_RANDOM, mat_std(F));
#undef PADD
    }
    return true;
}

/* qwen3moe (peer src/models/qwen3moe.cpp): qwen3's embeddings, head and attention (with the
 * per-head Q/K norm gains), and per layer the router ffn_gate_inp [n_embd, n_expert] (F32:
 * llama-quantize never quantizes it) and the experts ffn_{gate,up}_exps [n_embd, n_ff_exp,
 * n_expert], ffn_down_exps [n_ff_exp, n_embd, n_expert]. The router's std 2/sqrt(n_embd) gives
 * logits of std ~2, so the top-k are mostly well apart (random ties would make every engine's
 * routing a coin toss). */
static bool tensors_qwen3moe(synth_tensor_list *l, const synth_preset *p, int32_t n_layer, uint32_t n_vocab) {
    const synth_moe *x = synth_moe_of(p);
    if (!x) return false;
    const int64_t E = p->n_embd, F = x->n_ff_exp, NE = x->n_expert, Q = (int64_t)p->n_head * p->head_dim,
                  KV = (int64_t)p->n_head_kv * p->head_dim;
    const float emb_std = 2.0f / sqrtf((float)E);
    ADD("token_embd.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    ADD("output_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
    if (!p->tied) ADD("output.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    char nm[64];
    for (int32_t i = 0; i < n_layer; i++) {
#define MADD(suffix, ...)                             \
    do {                                              \
        snprintf(nm, sizeof nm, "blk.%d." suffix, i); \
        ADD(nm, __VA_ARGS__);                         \
    } while (0)
#define MADD3(suffix, ...)                                                  \
    do {                                                                    \
        snprintf(nm, sizeof nm, "blk.%d." suffix, i);                       \
        if (!synth_list_add3(l, nm, __VA_ARGS__)) return false;             \
    } while (0)
        MADD("attn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        MADD("attn_q.weight", 2, E, Q, SYNTH_GEN_RANDOM, mat_std(E));
        MADD("attn_k.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
        MADD("attn_v.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
        MADD("attn_output.weight", 2, Q, E, SYNTH_GEN_RANDOM, mat_std(Q));
        MADD("attn_q_norm.weight", 1, p->head_dim, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
        MADD("attn_k_norm.weight", 1, p->head_dim, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
        MADD("ffn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        MADD("ffn_gate_inp.weight", 2, E, NE, SYNTH_GEN_RANDOM, 2.0f * mat_std(E));
        MADD3("ffn_gate_exps.weight", E, F, NE, SYNTH_GEN_RANDOM, mat_std(E));
        MADD3("ffn_up_exps.weight", E, F, NE, SYNTH_GEN_RANDOM, mat_std(E));
        MADD3("ffn_down_exps.weight", F, E, NE, SYNTH_GEN_RANDOM, mat_std(F));
#undef MADD
#undef MADD3
    }
    return true;
}

/* gpt-oss (peer src/models/openai-moe.cpp): per layer attn_norm, Q/K/V/O with biases, the
 * sinks attn_sinks [n_head] (learned logits: std 1.5, the order of the scores), the MoE norm
 * post_attention_norm, the router ffn_gate_inp [n_embd, n_expert] with its bias, the experts as
 * 3-D tensors and their biases [rows, n_expert] (ffn_gate_exps.bias, ...). Expert gate/up
 * weights get a larger std so the clamps at +-7 of the SwiGLU are reached now and then. */
static bool tensors_gpt_oss(synth_tensor_list *l, const synth_preset *p, int32_t n_layer, uint32_t n_vocab) {
    const synth_moe *x = synth_moe_of(p);
    if (!x) return false;
    const int64_t E = p->n_embd, F = x->n_ff_exp, NE = x->n_expert, Q = (int64_t)p->n_head * p->head_dim,
                  KV = (int64_t)p->n_head_kv * p->head_dim;
    const float emb_std = 2.0f / sqrtf((float)E);
    ADD("token_embd.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    ADD("output_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
    if (!p->tied) ADD("output.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    char nm[64];
    for (int32_t i = 0; i < n_layer; i++) {
#define GADD(suffix, ...)                             \
    do {                                              \
        snprintf(nm, sizeof nm, "blk.%d." suffix, i); \
        ADD(nm, __VA_ARGS__);                         \
    } while (0)
#define GADD3(suffix, ...)                                                  \
    do {                                                                    \
        snprintf(nm, sizeof nm, "blk.%d." suffix, i);                       \
        if (!synth_list_add3(l, nm, __VA_ARGS__)) return false;             \
    } while (0)
        GADD("attn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        GADD("attn_q.weight", 2, E, Q, SYNTH_GEN_RANDOM, mat_std(E));
        GADD("attn_k.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
        GADD("attn_v.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
        GADD("attn_q.bias", 1, Q, 1, SYNTH_GEN_RANDOM, 0.1f);
        GADD("attn_k.bias", 1, KV, 1, SYNTH_GEN_RANDOM, 0.1f);
        GADD("attn_v.bias", 1, KV, 1, SYNTH_GEN_RANDOM, 0.1f);
        GADD("attn_output.weight", 2, Q, E, SYNTH_GEN_RANDOM, mat_std(Q));
        GADD("attn_output.bias", 1, E, 1, SYNTH_GEN_RANDOM, 0.1f);
        GADD("attn_sinks.weight", 1, p->n_head, 1, SYNTH_GEN_RANDOM, 1.5f);
        GADD("post_attention_norm.weight", 1, E, 1, SYNTH_GEN_NEAR_ONE, 0.1f);
        GADD("ffn_gate_inp.weight", 2, E, NE, SYNTH_GEN_RANDOM, 2.0f * mat_std(E));
        GADD("ffn_gate_inp.bias", 1, NE, 1, SYNTH_GEN_RANDOM, 0.5f);
        GADD3("ffn_gate_exps.weight", E, F, NE, SYNTH_GEN_RANDOM, 2.0f * mat_std(E));
        GADD3("ffn_up_exps.weight", E, F, NE, SYNTH_GEN_RANDOM, 2.0f * mat_std(E));
        GADD3("ffn_down_exps.weight", F, E, NE, SYNTH_GEN_RANDOM, mat_std(F));
        GADD("ffn_gate_exps.bias", 2, F, NE, SYNTH_GEN_RANDOM, 0.1f);
        GADD("ffn_up_exps.bias", 2, F, NE, SYNTH_GEN_RANDOM, 0.1f);
        GADD("ffn_down_exps.bias", 2, E, NE, SYNTH_GEN_RANDOM, 0.1f);
#undef GADD
#undef GADD3
    }
    return true;
}

/* qwen35 (src/models/qwen35.cpp's loader): per layer attn_norm and post_attention_norm (the
 * pre-FFN norm), the SwiGLU FFN, and either gated attention (attn_q of 2 x heads x head_dim:
 * query and gate per head; Q/K norms) or the DeltaNet tensors (attn_qkv, attn_gate, ssm_*). A is
 * stored as -exp(A_log) (negative: a decay); -0.5 keeps the decay moderate. */
typedef struct qwen35_shape {
    const char *preset;
    int32_t ssm_conv, ssm_state, ssm_k_heads, ssm_v_heads, full_attn; /* DeltaNet sizes, attention every n-th */
    int32_t rope_sections[3];                                         /* M-RoPE sections (rotated pairs) */
} qwen35_shape;
static const qwen35_shape k_qwen35[] = {
    {"tiny-qwen35", 4, 64, 2, 4, 4, {3, 3, 2}},
    {"qwen3.5-9b", 4, 128, 16, 32, 4, {11, 11, 10}},
    {"tiny-qwen35moe", 4, 64, 2, 4, 4, {3, 3, 2}},
    {"qwen3.6-35b-a3b", 4, 128, 16, 32, 4, {11, 11, 10}},
    {"tiny-qwen3next", 4, 64, 2, 4, 4, {0, 0, 0}},
    {"qwen3-next-80b-a3b", 4, 128, 16, 32, 4, {0, 0, 0}},
};
static const qwen35_shape *qwen35_of(const synth_preset *p) {
    for (size_t i = 0; i < sizeof k_qwen35 / sizeof *k_qwen35; i++)
        if (!strcmp(k_qwen35[i].preset, p->name)) return &k_qwen35[i];
    return &k_qwen35[0];
}

static bool tensors_qwen35(synth_tensor_list *l, const synth_preset *pp, int32_t n_layer, uint32_t n_vocab) {
    const synth_preset *p = pp;
    const qwen35_shape *x = qwen35_of(pp);
    const synth_moe *moe = synth_moe_of(pp); /* qwen35moe */
    if (p->arch != SYNTH_ARCH_QWEN35 && (!moe || moe->n_ff_shexp <= 0)) return false;
    const bool next = p->arch == SYNTH_ARCH_QWEN3NEXT; /* beta and alpha joined per key head */
    const int64_t E = p->n_embd, F = p->n_ff, D = p->head_dim, Q = (int64_t)p->n_head * D, KV = (int64_t)p->n_head_kv * D;
    const int64_t S = x->ssm_state, KD = S * x->ssm_k_heads, VD = S * x->ssm_v_heads, C = 2 * KD + VD;
    const float emb_std = 2.0f / sqrtf((float)E);
    ADD("token_embd.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    ADD("output_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
    if (!p->tied) ADD("output.weight", 2, E, n_vocab, SYNTH_GEN_RANDOM, emb_std);
    char nm[64];
    for (int32_t i = 0; i < n_layer; i++) {
#define QADD(suffix, ...)                             \
    do {                                              \
        snprintf(nm, sizeof nm, "blk.%d." suffix, i); \
        ADD(nm, __VA_ARGS__);                         \
    } while (0)
        QADD("attn_norm.weight", 1, E, 1, SYNTH_GEN_ONES, 0);
        QADD("post_attention_norm.weight", 1, E, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
        if ((i + 1) % x->full_attn == 0) {
            QADD("attn_q.weight", 2, E, 2 * Q, SYNTH_GEN_RANDOM, mat_std(E));
            QADD("attn_k.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
            QADD("attn_v.weight", 2, E, KV, SYNTH_GEN_RANDOM, mat_std(E));
            QADD("attn_output.weight", 2, Q, E, SYNTH_GEN_RANDOM, mat_std(Q));
            QADD("attn_q_norm.weight", 1, D, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
            QADD("attn_k_norm.weight", 1, D, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
        } else {
            QADD("attn_qkv.weight", 2, E, C, SYNTH_GEN_RANDOM, mat_std(E));
            QADD("attn_gate.weight", 2, E, VD, SYNTH_GEN_RANDOM, mat_std(E));
            QADD("ssm_conv1d.weight", 2, x->ssm_conv, C, SYNTH_GEN_RANDOM, mat_std(x->ssm_conv));
            QADD("ssm_dt.bias", 1, x->ssm_v_heads, 1, SYNTH_GEN_RANDOM, 0.5f);
            QADD("ssm_a", 1, x->ssm_v_heads, 1, SYNTH_GEN_CONST, -0.5f);
            if (next) {
                QADD("ssm_ba.weight", 2, E, 2 * x->ssm_v_heads, SYNTH_GEN_RANDOM, mat_std(E));
            } else {
                QADD("ssm_beta.weight", 2, E, x->ssm_v_heads, SYNTH_GEN_RANDOM, mat_std(E));
                QADD("ssm_alpha.weight", 2, E, x->ssm_v_heads, SYNTH_GEN_RANDOM, mat_std(E));
            }
            QADD("ssm_norm.weight", 1, S, 1, SYNTH_GEN_NEAR_ONE, 0.2f);
            QADD("ssm_out.weight", 2, VD, E, SYNTH_GEN_RANDOM, mat_std(VD));
        }
        if (!moe) {
            QADD("ffn_gate.weight", 2, E, F, SYNTH_GEN_RANDOM, mat_std(E));
            QADD("ffn_up.weight", 2, E, F, SYNTH_GEN_RANDOM, mat_std(E));
            QADD("ffn_down.weight", 2, F, E, SYNTH_GEN_RANDOM, mat_std(F));
            continue;
        }
        /* qwen35moe: the router (F32, std as qwen3moe's), the experts, the shared expert and
         * its gate (1-D, so F32; logits of std ~1: the gate is neither shut nor wide open) */
        const int64_t FE = moe->n_ff_exp, NE = moe->n_expert, FS = moe->n_ff_shexp;
        QADD("ffn_gate_inp.weight", 2, E, NE, SYNTH_GEN_RANDOM, 2.0f * mat_std(E));
        snprintf(nm, sizeof nm, "blk.%d.ffn_gate_exps.weight", i);
        if (!synth_list_add3(l, nm, E, FE, NE, SYNTH_GEN_RANDOM, mat_std(E))) return false;
        snprintf(nm, sizeof nm, "blk.%d.ffn_up_exps.weight", i);
        if (!synth_list_add3(l, nm, E, FE, NE, SYNTH_GEN_RANDOM, mat_std(E))) return false;
        snprintf(nm, sizeof nm, "blk.%d.ffn_down_exps.weight", i);
        if (!synth_list_add3(l, nm, FE, E, NE, SYNTH_GEN_RANDOM, mat_std(FE))) return false;
        QADD("ffn_gate_inp_shexp.weight", 1, E, 1, SYNTH_GEN_RANDOM, mat_std(E));
        QADD("ffn_gate_shexp.weight", 2, E, FS, SYNTH_GEN_RANDOM, mat_std(E));
        QADD("ffn_up_shexp.weight", 2, E, FS, SYNTH_GEN_RANDOM, mat_std(E));
        QADD("ffn_down_shexp.weight", 2, FS, E, SYNTH_GEN_RANDOM, mat_std(FS));
#undef QADD
    }
    return true;
}

static bool tensors_llama(synth_tensor_list *l, const synth_preset *p, int32_t n_layer,
                          uint32_t n_vocab) {
    return synth_tensors_llama_like(l, p, n_layer, n_vocab, false);
}

static bool tensors_qwen2(synth_tensor_list *l, const synth_preset *p, int32_t n_layer,
                          uint32_t n_vocab) {
    return synth_tensors_llama_like(l, p, n_layer, n_vocab, true);
}

/* ---- metadata ----------------------------------------------------------------------------- */

/* The {arch}.* keys llama.cpp's converter writes for the llama-family architectures. */
rf_status synth_write_kv_common(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer,
                                 const char *arch, unsigned flags) {
    char k[128];
    rf_status st = RF_OK;
#define U32(key, v)                                               \
    do {                                                          \
        snprintf(k, sizeof k, "%s." key, arch);                   \
        if ((st = rf_gguf_set_u32(w, k, (uint32_t)(v)))) return st; \
    } while (0)
#define F32(key, v)                                               \
    do {                                                          \
        snprintf(k, sizeof k, "%s." key, arch);                   \
        if ((st = rf_gguf_set_f32(w, k, (v)))) return st;         \
    } while (0)
    U32("block_count", n_layer);
    U32("context_length", p->n_ctx);
    U32("embedding_length", p->n_embd);
    if (p->n_ff > 0) U32("feed_forward_length", p->n_ff); /* 0: the config has none (qwen35moe) */
    U32("attention.head_count", p->n_head);
    U32("attention.head_count_kv", p->n_head_kv);
    F32("rope.freq_base", p->rope_base);
    F32("attention.layer_norm_rms_epsilon", p->rms_eps);
    if (flags & KV_HEAD_LEN) {
        U32("attention.key_length", p->head_dim);
        U32("attention.value_length", p->head_dim);
    }
    if (flags & KV_VOCAB_SIZE) U32("vocab_size", p->vocab.n_vocab);
    if (flags & KV_ROPE_DIM) U32("rope.dimension_count", p->head_dim);
#undef U32
#undef F32
    return st;
}

static rf_status write_kv_llama(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    return synth_write_kv_common(w, p, n_layer, "llama", KV_VOCAB_SIZE | KV_ROPE_DIM | KV_HEAD_LEN);
}

static rf_status write_kv_qwen2(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    return synth_write_kv_common(w, p, n_layer, "qwen2", 0);
}

/* qwen3 (Qwen2Model's converter): key/value length, no vocab_size or rope.dimension_count. */
static rf_status write_kv_qwen3(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    return synth_write_kv_common(w, p, n_layer, "qwen3", KV_HEAD_LEN);
}

/* smollm3 (LlamaModel's converter, no head_dim in its config): vocab_size and
 * rope.dimension_count. The NoPE step has no key: llama.cpp fixes it at 4. */
static rf_status write_kv_smollm3(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    return synth_write_kv_common(w, p, n_layer, "smollm3", KV_VOCAB_SIZE | KV_ROPE_DIM);
}

/* mistral3 (LlamaModel's converter; Mistral Small 3's config has head_dim 128). */
static rf_status write_kv_mistral3(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    return synth_write_kv_common(w, p, n_layer, "mistral3", KV_VOCAB_SIZE | KV_ROPE_DIM | KV_HEAD_LEN);
}

/* phi3 (conversion/phi.py Phi3MiniModel): partial rope.dimension_count, the original context,
 * the sliding window it writes, and rope.scaling.attn_factor with longrope factors. */
static rf_status write_kv_phi3(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    rf_status st = synth_write_kv_common(w, p, n_layer, "phi3", 0);
    if (st) return st;
    const uint32_t rot = (uint32_t)(p->n_rot ? p->n_rot : p->head_dim);
    if ((st = rf_gguf_set_u32(w, "phi3.rope.dimension_count", rot))) return st;
    if ((st = rf_gguf_set_u32(w, "phi3.rope.scaling.original_context_length",
                              p->rope_orig_ctx ? p->rope_orig_ctx : p->n_ctx)))
        return st;
    if ((st = rf_gguf_set_u32(w, "phi3.attention.sliding_window", (uint32_t)p->n_swa))) return st;
    if (p->longrope) st = rf_gguf_set_f32(w, "phi3.rope.scaling.attn_factor", synth_longrope_attn_factor(p));
    return st;
}

/* qwen3moe (Qwen3MoeModel's converter): qwen3's keys plus expert_count, expert_used_count and
 * expert_feed_forward_length (no expert_weights_norm: llama.cpp's qwen3moe always renormalises). */
static rf_status write_kv_qwen3moe(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    const synth_moe *x = synth_moe_of(p);
    if (!x) return rf_set_error(RF_ERR_INTERNAL, "mkmodel: preset '%s' has no expert shapes", p->name);
    rf_status st = synth_write_kv_common(w, p, n_layer, "qwen3moe", KV_HEAD_LEN);
    if (st) return st;
    if ((st = rf_gguf_set_u32(w, "qwen3moe.expert_count", (uint32_t)x->n_expert))) return st;
    if ((st = rf_gguf_set_u32(w, "qwen3moe.expert_used_count", (uint32_t)x->n_expert_used))) return st;
    return rf_gguf_set_u32(w, "qwen3moe.expert_feed_forward_length", (uint32_t)x->n_ff_exp);
}

/* gpt-oss (conversion/gpt_oss.py and the base converter): the common keys with key/value
 * length, the experts' count, top-k and width, the sliding window, and YaRN (rope.scaling.type,
 * factor, original_context_length). */
static rf_status write_kv_gpt_oss(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    const synth_moe *x = synth_moe_of(p);
    if (!x) return rf_set_error(RF_ERR_INTERNAL, "mkmodel: preset '%s' has no expert shapes", p->name);
    rf_status st = synth_write_kv_common(w, p, n_layer, "gpt-oss", KV_HEAD_LEN);
    if (st) return st;
    if ((st = rf_gguf_set_u32(w, "gpt-oss.expert_count", (uint32_t)x->n_expert))) return st;
    if ((st = rf_gguf_set_u32(w, "gpt-oss.expert_used_count", (uint32_t)x->n_expert_used))) return st;
    if ((st = rf_gguf_set_u32(w, "gpt-oss.expert_feed_forward_length", (uint32_t)x->n_ff_exp))) return st;
    if ((st = rf_gguf_set_u32(w, "gpt-oss.attention.sliding_window", (uint32_t)p->n_swa))) return st;
    if ((st = rf_gguf_set_str(w, "gpt-oss.rope.scaling.type", "yarn"))) return st;
    if ((st = rf_gguf_set_f32(w, "gpt-oss.rope.scaling.factor", p->rope_factor))) return st;
    return rf_gguf_set_u32(w, "gpt-oss.rope.scaling.original_context_length", p->rope_orig_ctx);
}

/* qwen35 (conversion/qwen.py Qwen3_5TextModel): key/value length, partial rope.dimension_count,
 * the M-RoPE sections, the ssm.* sizes and the attention interval. */
static rf_status write_kv_hybrid(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer, const char *a) {
    rf_status st = synth_write_kv_common(w, p, n_layer, a, KV_HEAD_LEN);
    if (st) return st;
    const qwen35_shape *x = qwen35_of(p);
    const int32_t sec[4] = {x->rope_sections[0], x->rope_sections[1], x->rope_sections[2], 0};
    char k[128];
#define K(key) (snprintf(k, sizeof k, "%s." key, a), k)
    if ((st = rf_gguf_set_u32(w, K("rope.dimension_count"), (uint32_t)(p->n_rot ? p->n_rot : p->head_dim))) ||
        (sec[0] && (st = rf_gguf_set_arr(w, K("rope.dimension_sections"), RF_GGUF_INT32, sec, 4))) ||
        (st = rf_gguf_set_u32(w, K("ssm.conv_kernel"), (uint32_t)x->ssm_conv)) ||
        (st = rf_gguf_set_u32(w, K("ssm.state_size"), (uint32_t)x->ssm_state)) ||
        (st = rf_gguf_set_u32(w, K("ssm.group_count"), (uint32_t)x->ssm_k_heads)) ||
        (st = rf_gguf_set_u32(w, K("ssm.time_step_rank"), (uint32_t)x->ssm_v_heads)) ||
        (st = rf_gguf_set_u32(w, K("ssm.inner_size"), (uint32_t)(x->ssm_state * x->ssm_v_heads))))
        return st;
    const synth_moe *m = synth_moe_of(p);
    if (m && ((st = rf_gguf_set_u32(w, K("expert_count"), (uint32_t)m->n_expert)) ||
              (st = rf_gguf_set_u32(w, K("expert_used_count"), (uint32_t)m->n_expert_used)) ||
              (st = rf_gguf_set_u32(w, K("expert_feed_forward_length"), (uint32_t)m->n_ff_exp)) ||
              (st = rf_gguf_set_u32(w, K("expert_shared_feed_forward_length"), (uint32_t)m->n_ff_shexp))))
        return st;
    st = rf_gguf_set_u32(w, K("full_attention_interval"), (uint32_t)x->full_attn);
#undef K
    return st;
}
static rf_status write_kv_qwen35(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    return write_kv_hybrid(w, p, n_layer, "qwen35");
}
/* qwen35moe (conversion/qwen.py Qwen3_5MoeTextModel): qwen35's keys plus the experts' count,
 * top-k and width and the shared expert's width (Qwen2MoeModel's keys). */
static rf_status write_kv_qwen35moe(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    return write_kv_hybrid(w, p, n_layer, "qwen35moe");
}
/* qwen3next (conversion/qwen.py Qwen3NextModel): the same keys without M-RoPE sections. */
static rf_status write_kv_qwen3next(rf_gguf_writer *w, const synth_preset *p, int32_t n_layer) {
    return write_kv_hybrid(w, p, n_layer, "qwen3next");
}

/* src/models/gemma3.cpp has no 70B type. */
static bool is_70b_never(const synth_preset *p, int32_t n_layer) {
    (void)p;
    (void)n_layer;
    return false;
}

/* llama.cpp src/models/llama.cpp: 80 layers is LLM_TYPE_70B when n_head != n_head_kv. */
static bool is_70b_llama(const synth_preset *p, int32_t n_layer) {
    return n_layer == 80 && p->n_head != p->n_head_kv;
}

/* src/models/qwen2.cpp: 80 layers is LLM_TYPE_70B. */
static bool is_70b_qwen2(const synth_preset *p, int32_t n_layer) {
    (void)p;
    return n_layer == 80;
}

static const synth_arch_info synth_arch_table[SYNTH_ARCH_COUNT] = {
    [SYNTH_ARCH_LLAMA] = {"llama", write_kv_llama, tensors_llama, is_70b_llama},
    [SYNTH_ARCH_QWEN2] = {"qwen2", write_kv_qwen2, tensors_qwen2, is_70b_qwen2},
    [SYNTH_ARCH_GEMMA3] = {"gemma3", synth_write_kv_gemma3, synth_tensors_gemma3, is_70b_never},
    [SYNTH_ARCH_QWEN3] = {"qwen3", write_kv_qwen3, tensors_qwen3, is_70b_never},
    [SYNTH_ARCH_SMOLLM3] = {"smollm3", write_kv_smollm3, tensors_llama, is_70b_never},
    [SYNTH_ARCH_MISTRAL3] = {"mistral3", write_kv_mistral3, tensors_llama, is_70b_never},
    [SYNTH_ARCH_PHI3] = {"phi3", write_kv_phi3, tensors_phi3, is_70b_never},
    [SYNTH_ARCH_QWEN3MOE] = {"qwen3moe", write_kv_qwen3moe, tensors_qwen3moe, is_70b_never},
    [SYNTH_ARCH_GPT_OSS] = {"gpt-oss", write_kv_gpt_oss, tensors_gpt_oss, is_70b_never},
    [SYNTH_ARCH_QWEN35] = {"qwen35", write_kv_qwen35, tensors_qwen35, is_70b_never},
    [SYNTH_ARCH_QWEN35MOE] = {"qwen35moe", write_kv_qwen35moe, tensors_qwen35, is_70b_never},
    [SYNTH_ARCH_QWEN3NEXT] = {"qwen3next", write_kv_qwen3next, tensors_qwen35, is_70b_never},
    [SYNTH_ARCH_GEMMA4] = {"gemma4", synth_write_kv_gemma4, synth_tensors_gemma4, is_70b_never},
};

const synth_arch_info *synth_arch_get(synth_arch a) {
    return (a >= 0 && a < SYNTH_ARCH_COUNT) ? &synth_arch_table[a] : NULL;
}

/* convert_hf_to_gguf (conversion/llama.py, generate_extra_tensors) in float32 like torch:
 * freq_i = 1 / base^(2i/d); wavelen = 2*pi/freq; factor 1 above high_freq_wavelen, `factor`
 * below low_freq_wavelen, else 1 / ((1 - smooth)/factor + smooth) with
 * smooth = (orig_ctx/wavelen - low) / (high - low). */
void synth_llama3_rope_factors(const synth_preset *p, float *out) {
    const int d = p->head_dim;
    const float base = p->rope_base, factor = p->rope_factor, lo = p->rope_low_freq,
                hi = p->rope_high_freq, old_ctx = (float)p->rope_orig_ctx;
    const float low_wl = old_ctx / lo, high_wl = old_ctx / hi;
    for (int i = 0; i < d / 2; i++) {
        float freq = 1.0f / powf(base, (float)(2 * i) / (float)d);
        float wavelen = (float)(2.0 * 3.14159265358979323846) / freq;
        if (wavelen < high_wl) {
            out[i] = 1.0f;
        } else if (wavelen > low_wl) {
            out[i] = factor;
        } else {
            float smooth = (old_ctx / wavelen - lo) / (hi - lo);
            out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}

void synth_longrope_factors(const synth_preset *p, bool long_factors, float *out) {
    const int half = (p->n_rot ? p->n_rot : p->head_dim) / 2;
    const float top = long_factors ? (float)p->n_ctx / (float)(p->rope_orig_ctx ? p->rope_orig_ctx : p->n_ctx) : 1.5f;
    for (int i = 0; i < half; i++) {
        float t = half > 1 ? (float)i / (float)(half - 1) : 0.0f;
        out[i] = 1.0f + (top - 1.0f) * t * t; /* slow (late) dimensions stretched most */
    }
}

float synth_longrope_attn_factor(const synth_preset *p) {
    const double orig = p->rope_orig_ctx ? p->rope_orig_ctx : p->n_ctx, s = (double)p->n_ctx / orig;
    return s > 1.0 ? (float)sqrt(1.0 + log(s) / log(orig)) : 1.0f;
}
