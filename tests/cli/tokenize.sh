#!/usr/bin/env bash
# tokenize.sh — `rocmforge tokenize` / `rocmforge detokenize`: ids, pieces, BOS handling,
# -f FILE, special-token parsing, round trip, --help, and non-zero exits with `error:` on bad
# input. Uses the vocab-only tests/data/vocab/ggml-vocab-llama-spm.gguf (ids checked against
# its llama.cpp .out vectors: "Hello world" -> 15043 3186) and, when present, the SmolLM2 and
# Gemma 3 model files (ids from tests/data/tokenizer/*.json).
# usage: tokenize.sh <rocmforge> <source-dir>
set -u
RF=$1
SRC=$2
V=$SRC/tests/data/vocab/ggml-vocab-llama-spm.gguf
[ -f "$V" ] || { echo "skip: $V is absent"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
check() { # name expected actual
  if [ "$2" == "$3" ]; then echo "ok   $1"; else echo "FAIL $1: expected [$2] got [$3]"; fails=$((fails + 1)); fi
}
rc_of() { "$@" >"$TMP/out" 2>"$TMP/err"; echo $?; }

check "ids with BOS" "[1, 15043, 3186]" "$("$RF" tokenize -m "$V" --ids "Hello world")"
check "ids --no-special" "[15043, 3186]" "$("$RF" tokenize -m "$V" --ids --no-special "Hello world")"
check "pieces" "$(printf "'<s>'\n' Hello'\n' world'")" "$("$RF" tokenize -m "$V" --pieces "Hello world")"
check "default output" "     1 '<s>'" "$("$RF" tokenize -m "$V" "Hello world" | head -1)"
printf 'Hello world' >"$TMP/in.txt"
check "-f FILE" "[1, 15043, 3186]" "$("$RF" tokenize -m "$V" --ids -f "$TMP/in.txt")"
check "empty text" "[1]" "$("$RF" tokenize -m "$V" --ids "")"
check "empty --no-special" "[]" "$("$RF" tokenize -m "$V" --ids --no-special "")"
check "detokenize" "Hello world" "$("$RF" detokenize -m "$V" 15043 3186)"
check "detokenize list syntax" "Hello world" "$("$RF" detokenize -m "$V" "[15043, 3186]")"
check "detokenize BOS kept/dropped" " Hello world" "$("$RF" detokenize -m "$V" 1 15043 3186)"
check "detokenize --render-special" "<s> Hello world" "$("$RF" detokenize -m "$V" --render-special 1 15043 3186)"
# round trip of a multi-script text through the CLI
T='Grüße, 世界! 🚀 x=1+2; tabs	and  spaces'
IDS=$("$RF" tokenize -m "$V" --ids --no-special "$T")
check "round trip" "$T" "$("$RF" detokenize -m "$V" "$IDS")"

check "--help exit" 0 "$(rc_of "$RF" tokenize --help)"
grep -q "usage: rocmforge tokenize" "$TMP/out" || { echo "FAIL --help text"; fails=$((fails + 1)); }
check "detokenize --help exit" 0 "$(rc_of "$RF" detokenize --help)"
check "missing -m" 2 "$(rc_of "$RF" tokenize "x")"
grep -q "^error: " "$TMP/err" || { echo "FAIL missing -m message"; fails=$((fails + 1)); }
check "unknown option" 2 "$(rc_of "$RF" tokenize -m "$V" --bogus "x")"
check "missing model file" 1 "$(rc_of "$RF" tokenize -m "$TMP/nope.gguf" "x")"
grep -q "nope.gguf" "$TMP/err" || { echo "FAIL missing-file message names the file"; fails=$((fails + 1)); }
printf 'GGUF' >"$TMP/bad.gguf"
check "corrupt model file" 1 "$(rc_of "$RF" tokenize -m "$TMP/bad.gguf" "x")"
check "bad id" 2 "$(rc_of "$RF" detokenize -m "$V" 12 abc)"
check "id out of range" 1 "$(rc_of "$RF" detokenize -m "$V" 32000)"
grep -q "32000" "$TMP/err" || { echo "FAIL out-of-range message names the id"; fails=$((fails + 1)); }
check "missing file -f" 1 "$(rc_of "$RF" tokenize -m "$V" -f "$TMP/none.txt")"

S=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$S" ]; then
  check "smollm2 parse-special" "[1, 4093, 198, 19556, 17, 2, 198, 1, 520, 9531, 198]" \
    "$("$RF" tokenize -m "$S" --ids --parse-special $'<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n')"
  check "smollm2 specials as text" "44" "$("$RF" tokenize -m "$S" --ids "<|im_end|>" | tr -d '[]' | cut -d, -f1)"
else
  echo "skip: $S is absent (SmolLM2 checks)"
fi
G=$SRC/models/gemma-3-270m-q4_k_m.gguf
if [ -f "$G" ]; then
  check "gemma3 parse-special" "[2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107]" \
    "$("$RF" tokenize -m "$G" --ids --parse-special $'<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n')"
else
  echo "skip: $G is absent (Gemma 3 checks)"
fi
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all tokenize CLI checks passed"
