#!/usr/bin/env bash
# knobs.sh — the RF_* knob registry (src/core/knobs.h), `rocmforge --help-env` and docs/knobs.md
# list the same variables with the same type, default, range and meaning; no getenv("RF_…")
# outside src/core/knobs.c in src/ and tools/; a value that does not parse is an error naming it.
# usage: knobs.sh <rocmforge> <source-dir>
set -u
RF=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
check() { # check <description> <command...>: the command must succeed
  local d=$1; shift
  if "$@"; then echo "ok: $d"; else echo "FAIL: $d"; fails=$((fails + 1)); fi
}

"$RF" --help-env >"$TMP/help.txt"
check "--help-env exits 0" test $? -eq 0
# the registry's names, in order: the X(ID, ...) lines of RF_KNOBS
sed -n '/^#define RF_KNOBS(X)/,/^$/p' "$SRC/src/core/knobs.h" | grep -oE '^ *X\([A-Z0-9_]+' |
  sed -E 's/^ *X\(/RF_/' >"$TMP/reg.txt"
check "the registry has knobs" test -s "$TMP/reg.txt"
# --help-env rows: name|type|default|range|meaning (the table starts after the header line)
awk 'f { n=$1; t=$2; d=$3; r=$4; $1=$2=$3=$4=""; sub(/^ +/, ""); print n "|" t "|" d "|" r "|" $0 } /^variable /{f=1}' \
  "$TMP/help.txt" >"$TMP/help.rows"
# docs/knobs.md rows of the table under "## The knobs"
awk '/^## The knobs/{f=1; next} /^## /{f=0} f && /^\| `RF_/' "$SRC/docs/knobs.md" |
  sed -E 's/^\| `([A-Z0-9_]+)` \| ([^|]*) \| ([^|]*) \| ([^|]*) \| (.*) \|$/\1|\2|\3|\4|\5/' >"$TMP/docs.rows"
cut -d'|' -f1 "$TMP/help.rows" >"$TMP/help.names"
check "registry and --help-env name the same knobs, in order" diff "$TMP/reg.txt" "$TMP/help.names"
check "--help-env and docs/knobs.md agree row by row" diff "$TMP/help.rows" "$TMP/docs.rows"
# the registry's count equals its enum: every knob also has a unique name
check "no knob named twice" test "$(sort "$TMP/reg.txt" | uniq -d | wc -l)" -eq 0

# no product code reads an RF_ variable around the registry
grep -rn 'getenv *( *"RF_' "$SRC/src" "$SRC/tools" | grep -v '^[^:]*src/core/knobs\.c:' >"$TMP/getenv.txt"
check "no getenv(\"RF_…\") outside src/core/knobs.c" test ! -s "$TMP/getenv.txt"
cat "$TMP/getenv.txt"

# one rule for booleans and ints; a bad value is an error naming the knob, exit 2
F=$SRC/tests/data/gguf/tiny_llama.gguf
for v in 1 true YES on 0 false No OFF ""; do
  RF_CPU_F32_MATMUL=$v "$RF" inspect "$F" >/dev/null 2>"$TMP/err.txt"
  check "RF_CPU_F32_MATMUL='$v' is accepted" test $? -eq 0
done
RF_GPU_SYNC=maybe "$RF" inspect "$F" >/dev/null 2>"$TMP/err.txt"
check "a bad boolean exits 2" test $? -eq 2
check "the error names the knob" grep -qF 'error: RF_GPU_SYNC=maybe: expected a boolean' "$TMP/err.txt"
RF_TP=65 "$RF" inspect "$F" >/dev/null 2>"$TMP/err.txt"
check "an int out of range exits 2" test $? -eq 2
check "the error gives the range" grep -qF 'RF_TP=65: expected an integer from 0 to 64' "$TMP/err.txt"
RF_LOG=verbose "$RF" inspect "$F" >/dev/null 2>"$TMP/err.txt"
check "an unknown log level is an error" grep -qF 'RF_LOG=verbose' "$TMP/err.txt"
# logged once at info level when set; the API key's value never
RF_LOG=info RF_GPU_SYNC=1 RF_API_KEY=sekrit "$RF" inspect "$F" >/dev/null 2>"$TMP/err.txt"
check "a set knob is logged at info" grep -qF '[info] RF_GPU_SYNC=1 (' "$TMP/err.txt"
check "the API key is not logged" bash -c "! grep -q sekrit '$TMP/err.txt'"
check "each knob logged once" test "$(grep -c 'RF_GPU_SYNC=' "$TMP/err.txt")" -eq 1
RF_GPU_SYNC=1 "$RF" inspect "$F" >/dev/null 2>"$TMP/err.txt"
check "not logged at the default level" test ! -s "$TMP/err.txt"

echo "$fails failure(s)"
test $fails -eq 0
