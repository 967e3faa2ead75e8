#!/usr/bin/env bash
# embed.sh — `rocmforge embed`: JSON of unit vectors (n_embd floats each, in -p order), the
# file's pooling by default (last: SmolLM2 has no pooling_type) and --pooling, a text alone equal
# to the same text among others, and usage errors (exit 2, `error:`). Needs SmolLM2 in models/.
# usage: embed.sh <rocmforge> <source-dir>
set -u
RF=$1
M=$2/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$M" ] || { echo "skip: $M is absent"; exit 77; }
PY=python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$RF" embed -m "$M" -t 2 -p "The quick brown fox" -p "café 日本語" -p "x" >"$TMP/three.json" 2>"$TMP/err" || { cat "$TMP/err"; exit 1; }
"$RF" embed -m "$M" -t 2 -p "café 日本語" >"$TMP/one.json" 2>/dev/null || exit 1
"$RF" embed -m "$M" -t 2 --pooling mean -p "café 日本語" >"$TMP/mean.json" 2>/dev/null || exit 1
"$PY" - "$TMP" <<'PYEOF' || exit 1
import json, math, sys
d = sys.argv[1]
three, one, mean = (json.load(open(f"{d}/{n}.json")) for n in ("three", "one", "mean"))
assert three["pooling"] == "last" and mean["pooling"] == "mean", (three["pooling"], mean["pooling"])
assert [x["index"] for x in three["data"]] == [0, 1, 2]
for x in three["data"] + mean["data"]:
    v = x["embedding"]
    assert len(v) == three["n_embd"] == 576 and x["n_tokens"] > 0, len(v)
    # unit length up to float32 rounding (~6e-8 from the elements' rounding; embeddings_test.py)
    assert abs(math.sqrt(sum(t * t for t in v)) - 1) < 1e-5
assert three["data"][1]["embedding"] == one["data"][0]["embedding"], "a text among others differs from alone"
assert mean["data"][0]["embedding"] != one["data"][0]["embedding"], "mean equals last"
print("ok   json, norms, batch = alone, --pooling")
PYEOF
fails=0
for args in "" "-m $M" "-m $M -p x --pooling max" "-m $M -p x --device tpu" "-p x"; do
  # shellcheck disable=SC2086
  "$RF" embed $args >/dev/null 2>"$TMP/err"; rc=$?
  if [ $rc -eq 2 ] && grep -q '^error: ' "$TMP/err"; then echo "ok   usage error: [$args]"; else echo "FAIL [$args]: rc $rc"; fails=$((fails + 1)); fi
done
"$RF" embed -m "$TMP/none.gguf" -p x >/dev/null 2>"$TMP/err"; rc=$?
if [ $rc -eq 1 ] && grep -q '^error: ' "$TMP/err"; then echo "ok   missing file"; else echo "FAIL missing file: rc $rc"; fails=$((fails + 1)); fi
[ $fails -eq 0 ] && echo PASS
exit $fails
