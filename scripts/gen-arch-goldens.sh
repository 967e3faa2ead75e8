#!/bin/bash
# gen-arch-goldens.sh — regenerates the mk-<preset>-<type> logits goldens of the issue-30
# architectures (tests/data/logits/NOTE.md) with llama.cpp: writes each tiny model with this
# build's mkmodel, runs the logits_dump driver (a small program against llama.cpp's C API,
# built outside the repository; see NOTE.md for its settings) on prompts-arch.json, and puts
# the mkmodel command and the file's sha256 in front of the manifest.
#   LOGITS_DUMP=/path/to/logits_dump scripts/gen-arch-goldens.sh build/rocmforge tiny-qwen3 f32 q8_0 ...
set -euo pipefail
cli=$1 preset=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/tests/data/logits
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$out/prompts-arch.json" > "$work/prompts.tsv" <<'PY'
import json, sys
for p in json.load(open(sys.argv[1]))["prompts"]:
    t = p["text"].replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    print(f'{p["name"]}\t{p["n_tokens"]}\t{t}')
PY
for type in "$@"; do
  file=$preset-$type.gguf
  mk="rocmforge mkmodel --preset $preset --type $type --seed 0 -o $file"
  (cd "$work" && "$cli" ${mk#rocmforge } >/dev/null)
  OMP_WAIT_POLICY=PASSIVE "${LOGITS_DUMP:?set LOGITS_DUMP}" "$work/$file" "$work/prompts.tsv" "$work/mk-$preset-$type" 32
  python3 - "$work/mk-$preset-$type.json" "$out/mk-$preset-$type.json" "$mk" "$work/$file" <<'PY'
import hashlib, json, os, sys
src, dst, mk, gguf = sys.argv[1:5]
# greedy_text may end inside a UTF-8 sequence (a token is a byte piece): U+FFFD for those bytes
man = json.loads(open(src, "rb").read().decode("utf-8", "replace"))
# a greedy piece may be the byte 0 (a byte token): U+FFFD too, since jansson refuses \u0000
for p in man["prompts"]:
    if "greedy_text" in p: p["greedy_text"] = p["greedy_text"].replace("\x00", "\ufffd")
head = {"mkmodel": mk, "gguf_sha256": hashlib.sha256(open(gguf, "rb").read()).hexdigest(),
        "gguf_bytes": os.path.getsize(gguf)}
with open(dst, "w") as f:
    f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in {**head, **{k: v for k, v in man.items() if k != "prompts"}}.items()))
    f.write(',\n "prompts": [\n' + ",\n".join("  " + json.dumps(p, ensure_ascii=False) for p in man["prompts"]) + "\n ]\n}\n")
PY
  cp "$work/mk-$preset-$type.bin" "$out/"
  echo "wrote $out/mk-$preset-$type.{json,bin}"
done
