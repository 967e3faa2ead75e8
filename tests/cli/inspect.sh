#!/usr/bin/env bash
# inspect.sh — `rocmforge inspect`: text output (summary, abbreviated arrays, tensor table,
# totals), --full, --json parsed by python3 -m json.tool, --help, and errors that exit non-zero.
# usage: inspect.sh <rocmforge> <source-dir>
set -u
RF=$1
SRC=$2
F=$SRC/tests/data/gguf/tiny_llama.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
check() { # check <description> <command...>: the command must succeed
  local d=$1; shift
  if "$@"; then echo "ok: $d"; else echo "FAIL: $d"; fails=$((fails + 1)); fi
}

"$RF" inspect "$F" >"$TMP/out.txt" 2>"$TMP/err.txt"
check "inspect exits 0" test $? -eq 0
check "version line" grep -q '^gguf: *version 3, alignment 32, 13 metadata keys, 20 tensors' "$TMP/out.txt"
check "summary line" grep -qF 'summary:   llama: layers 2, dim 64, heads 4, kv heads 2, ffn 128, vocab 5, context 256' "$TMP/out.txt"
check "abbreviated string array" grep -qF '[5 strings: "<unk>", "<s>", "</s>", ... ]' "$TMP/out.txt"
check "numeric array" grep -qF '[5 f32: 0, 0, 0, -1, -2 ]' "$TMP/out.txt"
check "tensor row" grep -qE '^  blk\.1\.ffn_down\.weight +q8_0 +\[128, 64\] +8704 +[0-9]+$' "$TMP/out.txt"
check "parameter total" grep -qF 'parameters:      74368' "$TMP/out.txt"
check "bytes per type" grep -qE '^  q4_0 +6 tensors +40960 params +23040 bytes' "$TMP/out.txt"
check "bits per weight" grep -qF 'bits per weight: 6.4303' "$TMP/out.txt"
check "no stderr" test ! -s "$TMP/err.txt"

"$RF" inspect --full "$F" >"$TMP/full.txt"
check "--full shows every token" grep -qF '[5 strings: "<unk>", "<s>", "</s>", "▁hello", "world" ]' "$TMP/full.txt"

"$RF" inspect "$F" --json --full >"$TMP/out.json"
check "--json exits 0" test $? -eq 0
check "--json parses" python3 -m json.tool "$TMP/out.json" >/dev/null
check "--json content" python3 - "$TMP/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == 3 and d["alignment"] == 32
s = d["summary"]
assert (s["arch"], s["layers"], s["dim"], s["heads"], s["kv_heads"], s["ffn"], s["vocab"], s["context"]) == \
    ("llama", 2, 64, 4, 2, 128, 5, 256), s
md = {m["key"]: m for m in d["metadata"]}
assert md["tokenizer.ggml.tokens"]["value"]["items"][3] == "\u2581hello"
assert md["tokenizer.ggml.tokens"]["value"]["n"] == 5
assert [t["name"] for t in d["tensors"]][0] == "token_embd.weight"
t = d["tensors"][0]
assert t["type"] == "f16" and t["shape"] == [64, 5] and t["bytes"] == 640 and t["offset"] == 0
assert d["totals"]["parameters"] == 74368 and d["totals"]["by_type"]["q8_0"]["tensors"] == 8
PY

"$RF" inspect "$F" --json >"$TMP/abbrev.json"
check "abbreviated --json marks truncation" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
v = {m["key"]: m for m in d["metadata"]}["tokenizer.ggml.tokens"]["value"]
assert v["truncated"] is True and len(v["items"]) == 3 and v["n"] == 5' "$TMP/abbrev.json"

"$RF" inspect --help >"$TMP/help.txt"
check "--help exits 0" test $? -eq 0
check "--help shows usage" grep -q 'usage: rocmforge inspect' "$TMP/help.txt"

"$RF" inspect "$TMP/missing.gguf" 2>"$TMP/err.txt" >/dev/null
check "missing file exits non-zero" test $? -ne 0
check "missing file says error:" grep -q '^error: .*missing.gguf' "$TMP/err.txt"

"$RF" inspect "$F" --bogus 2>"$TMP/err.txt" >/dev/null
check "unknown flag exits non-zero" test $? -ne 0
check "unknown flag says error:" grep -q "^error: .*'--bogus'" "$TMP/err.txt"

"$RF" inspect 2>"$TMP/err.txt" >/dev/null
check "no file exits non-zero" test $? -ne 0

head -c 1000 "$F" >"$TMP/trunc.gguf"
"$RF" inspect "$TMP/trunc.gguf" 2>"$TMP/err.txt" >/dev/null
check "truncated file exits non-zero" test $? -ne 0
check "truncated file names the file" grep -q "^error: gguf: '.*trunc.gguf': " "$TMP/err.txt"

# every fuzz corpus file (valid, truncated, corrupted, fuzzer-found): inspect either prints or
# exits 1 with an error, never crashes; every JSON it prints parses (NaN, invalid UTF-8, ...)
crashes=0
i=0
for c in "$SRC"/tests/fuzz/corpus/*; do
  i=$((i + 1))
  "$RF" inspect "$c" >/dev/null 2>&1; rc=$?
  "$RF" inspect --json --full "$c" >"$TMP/c$i.json" 2>/dev/null; rcj=$?
  if [ $rc -gt 1 ] || [ $rcj -gt 1 ] || [ $rc -ne $rcj ]; then
    echo "inspect on $c: exit $rc / $rcj"; crashes=$((crashes + 1))
  fi
  [ $rcj -eq 0 ] || rm -f "$TMP/c$i.json"
done
check "corpus: no crash" test $crashes -eq 0
check "corpus: every JSON parses" python3 -c '
import json, sys
for f in sys.argv[1:]:
    json.load(open(f))
print(len(sys.argv) - 1, "JSON outputs parsed")' "$TMP"/c*.json

if [ $fails -ne 0 ]; then echo "$fails check(s) failed"; exit 1; fi
echo "all inspect checks passed"
