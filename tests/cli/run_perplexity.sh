#!/usr/bin/env bash
# run_perplexity.sh — `rocmforge perplexity`: llama-perplexity's output shape on a tiny model,
# a clear error for a text shorter than two chunks, and a finite PPL that does not depend on
# the thread count. usage: bash run_perplexity.sh <rocmforge> <source-dir>
set -u
. "$2/tests/util/cli_common.sh" "$1" "$2"
"$RF" mkmodel --preset tiny --type q8_0 -o "$T/m.gguf" >/dev/null 2>&1 || fail "mkmodel"
for i in $(seq 1 60); do echo "The quick brown fox jumps over the lazy dog number $i, and then it rests."; done >"$T/text"
"$RF" perplexity -m "$T/m.gguf" -f "$T/text" --ctx 64 -t 1 >"$T/o1" 2>"$T/e1" || fail "perplexity: $(cat "$T/e1")"
grep -qE '^\[1\][0-9.]+,\[2\][0-9.]+,' "$T/o1" || fail "no running values: $(cat "$T/o1")"
grep -qE '^Final estimate: PPL = [0-9]+\.[0-9]{4} \+/- [0-9.]+$' "$T/o1" || fail "no final estimate: $(cat "$T/o1")"
"$RF" perplexity -m "$T/m.gguf" -f "$T/text" --ctx 64 -t 2 >"$T/o2" 2>/dev/null || fail "perplexity -t 2"
cmp -s "$T/o1" "$T/o2" || fail "PPL differs between -t 1 and -t 2"
echo "short text" >"$T/short"
"$RF" perplexity -m "$T/m.gguf" -f "$T/short" --ctx 64 >/dev/null 2>"$T/e3" && fail "short text accepted"
grep -q "needs at least 128" "$T/e3" || fail "short-text message: $(cat "$T/e3")"
"$RF" perplexity -m "$T/m.gguf" >/dev/null 2>"$T/e4"
[ $? = 2 ] && grep -q "missing -f TEXT" "$T/e4" || fail "missing -f: $(cat "$T/e4")"
grep Final "$T/o1"
echo PASS
