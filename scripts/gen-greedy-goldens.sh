#!/usr/bin/env bash
# gen-greedy-goldens.sh — regenerates the real models' extra greedy goldens
# (tests/data/logits/{smollm2,gemma3}-greedy.*) from tests/data/logits/prompts-greedy.json with the
# peer driver logits_dump, using exactly the settings of tests/data/logits/NOTE.md (f32 KV, 40
# tokens, 2 threads). It runs an already built driver; it does not build llama.cpp.
#   usage: scripts/gen-greedy-goldens.sh [LOGITS_DUMP]   (default /work/peer/tools/logits_dump)
# gemma3's full-vocabulary .bin (1 MiB per prompt) is not kept: its manifest gets "bin": null and
# the test compares on the top-16 ids; smollm2's .bin (192 KiB per prompt) is kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dump=${1:-/work/peer/tools/logits_dump}
data=$root/tests/data/logits
[ -x "$dump" ] || { echo "error: $dump not found or not executable" >&2; exit 1; }
for m in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf; do
  [ -r "$root/models/$m" ] || { echo "error: models/$m missing (scripts/fetch-models.sh)" >&2; exit 1; }
done
export OMP_WAIT_POLICY=PASSIVE
nice -n 10 "$dump" "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$data/prompts-greedy.json" \
  "$data/smollm2-greedy" smollm2 40 f32 2
nice -n 10 "$dump" "$root/models/gemma-3-270m-q4_k_m.gguf" "$data/prompts-greedy.json" \
  "$data/gemma3-greedy" gemma3 40 f32 2
rm -f "$data/gemma3-greedy.bin"
python3 - "$data/gemma3-greedy.json" <<'PY'
import json, sys
p = sys.argv[1]
m = json.load(open(p), object_pairs_hook=dict)
m["bin"] = None  # full vectors dropped to keep the repository small; compare on top16_ids
for e in m["prompts"]:
    e["logits_offset"] = None
open(p, "w").write(json.dumps(m, indent=1, ensure_ascii=False) + "\n")
PY
echo "wrote $data/smollm2-greedy.{json,bin} and $data/gemma3-greedy.json"
