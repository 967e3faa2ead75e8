#!/usr/bin/env bash
# fidelity.sh — regenerates the table of docs/fidelity.md: llama-perplexity writes a KL-divergence
# base (its logits) over GPL-3 at ctx 512 for each model, and `rocmforge perplexity
# --kl-divergence` compares our logits against it (mean KLD, same top token). The tiny models are
# made with `rocmforge mkmodel`; their synthetic vocabularies are checked to tokenize the text to
# the same ids in both engines (the comparison itself always uses the base file's tokens).
#
# usage: scripts/fidelity.sh [--device gpu] [--only REGEX] [--work DIR]
#   ROCMFORGE (default build/rocmforge), LLAMA_PERPLEXITY (default llama-perplexity on PATH, or
#   /work/llama.cpp/build/bin/llama-perplexity), TEXT (default /usr/share/common-licenses/GPL-3),
#   THREADS (default all cores). Bases are kept in the work dir (default fidelity-work/) and
#   reused; they are large (n_tokens x n_vocab x 2 bytes) and are not committed.
set -eu
cd "$(dirname "$0")/.."
DEVICE=cpu ONLY=. WORK=fidelity-work
while [ $# -gt 0 ]; do
    case $1 in
    --device) DEVICE=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) echo "usage: $0 [--device gpu] [--only REGEX] [--work DIR]" >&2; exit 2 ;;
    esac
done
RF=${ROCMFORGE:-build/rocmforge}
LP=${LLAMA_PERPLEXITY:-$(command -v llama-perplexity || echo /work/llama.cpp/build/bin/llama-perplexity)}
TEXT=${TEXT:-/usr/share/common-licenses/GPL-3}
THREADS=${THREADS:-$(nproc)}
mkdir -p "$WORK"

# name | model file (or mkmodel:PRESET:TYPE) | chunks (0 = all)
MODELS="
SmolLM2-135M-Instruct Q4_1|models/SmolLM2-135M-Instruct.Q4_1.gguf|0
gemma-3-270m Q4_K_M|models/gemma-3-270m-q4_k_m.gguf|4
tiny-qwen3 q8_0|mkmodel:tiny-qwen3:q8_0|0
tiny-qwen3 q4_k_m|mkmodel:tiny-qwen3:q4_k_m|0
tiny-qwen3moe q8_0|mkmodel:tiny-qwen3moe:q8_0|0
tiny-qwen3moe q4_k_m|mkmodel:tiny-qwen3moe:q4_k_m|0
tiny-gpt-oss q8_0|mkmodel:tiny-gpt-oss:q8_0|0
tiny-gpt-oss q4_k_m|mkmodel:tiny-gpt-oss:q4_k_m|0
tiny-phi3 q8_0|mkmodel:tiny-phi3:q8_0|0
tiny-phi3 q4_k_m|mkmodel:tiny-phi3:q4_k_m|0
tiny-mistral3 q8_0|mkmodel:tiny-mistral3:q8_0|0
tiny-mistral3 q4_k_m|mkmodel:tiny-mistral3:q4_k_m|0
tiny-smollm3 q8_0|mkmodel:tiny-smollm3:q8_0|0
tiny-smollm3 q4_k_m|mkmodel:tiny-smollm3:q4_k_m|0
tiny-qwen35 q8_0|mkmodel:tiny-qwen35:q8_0|0
"

# "mean ± se" of a statistic printed by `rocmforge perplexity --kl-divergence`
stat() { sed -n "s/^$2 *: *\([-0-9.]*\) ± *\([0-9.]*\).*/\1 ± \2/p" "$1" | head -1; }

echo "| model | chunks | tokens same as llama.cpp | PPL llama.cpp | PPL ours | mean KLD ($DEVICE) | same top ($DEVICE) |"
echo "|---|---|---|---|---|---|---|"
echo "$MODELS" | while IFS='|' read -r name spec chunks; do
    [ -n "$name" ] || continue
    echo "$name" | grep -Eq -- "$ONLY" || continue
    tag=$(echo "$name" | tr ' ' '.')
    case $spec in
    mkmodel:*)
        IFS=: read -r _ preset type <<<"$spec"
        model=$WORK/$preset.$type.gguf
        [ -f "$model" ] || "$RF" mkmodel --preset "$preset" --type "$type" -q -o "$model"
        ;;
    *) model=$spec ;;
    esac
    base=$WORK/$tag.kld
    cflag=()
    [ "$chunks" = 0 ] || cflag=(--chunks "$chunks")
    if [ ! -s "$base" ]; then
        "$LP" -m "$model" -f "$TEXT" -c 512 -t "$THREADS" "${cflag[@]}" --kl-divergence-base "$base" \
            >"$WORK/$tag.llama.log" 2>&1 || { echo "llama-perplexity failed on $name: see $WORK/$tag.llama.log" >&2; continue; }
    fi
    "$RF" perplexity -m "$model" --kl-divergence-base "$base" --kl-divergence --device "$DEVICE" -t "$THREADS" \
        >"$WORK/$tag.$DEVICE.out" 2>"$WORK/$tag.$DEVICE.err" || { echo "rocmforge failed on $name: see $WORK/$tag.$DEVICE.err" >&2; continue; }
    "$RF" tokenize -m "$model" -f "$TEXT" --ids >"$WORK/$tag.ids"
    same=$(python3 - "$base" "$WORK/$tag.ids" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(20)
n_ctx, n_vocab, n_chunk = struct.unpack_from("<Iii", raw, 8)
with open(sys.argv[1], "rb") as f:
    f.seek(20)
    theirs = struct.unpack("<%di" % (n_ctx * n_chunk), f.read(4 * n_ctx * n_chunk))
ours = json.load(open(sys.argv[2]))[: len(theirs)]
diff = [i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b]
print("yes (%d)" % len(theirs) if not diff and len(ours) == len(theirs) else "no: %d of %d differ, first at %d" % (len(diff), len(theirs), diff[0] if diff else len(ours)))
PY
)
    nch=$(grep -c '^ *[0-9]\+ ' "$WORK/$tag.$DEVICE.out" || true)
    pl=$(stat "$WORK/$tag.$DEVICE.out" "Mean PPL(base)" | cut -d' ' -f1)
    po=$(stat "$WORK/$tag.$DEVICE.out" "Mean PPL(Q)" | cut -d' ' -f1)
    echo "| $name | $nch | $same | $pl | $po | $(stat "$WORK/$tag.$DEVICE.out" "Mean    KLD") | $(stat "$WORK/$tag.$DEVICE.out" "Same top p") % |"
done
