#!/usr/bin/env bash
# mkmodel_run.sh — ROCmForge itself loads and runs the synthetic models: greedy generation of a few
# tokens on tiny (llama + Llama-3 BPE), tiny-qwen2 (biases, tied, fallback types), tiny-llama2
# (SentencePiece) and tiny-gemma3 (sliding window, q/k norms, post-norms) in f32 and q4_k_m; the
# same file and prompt must give the same ids twice.
# usage: bash mkmodel_run.sh <rocmforge> <source-dir>     (exit 77 = `run` not in this build)
set -u
RF=${1:?rocmforge binary}
if "$RF" run --help 2>&1 | grep -q "not in this build"; then echo "skip: no run command"; exit 77; fi
T=$(mktemp -d /tmp/rf_mkmodel_run.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for preset in tiny tiny-qwen2 tiny-llama2 tiny-gemma3; do
    for type in f32 q4_k_m; do
        f="$T/$preset-$type.gguf"
        "$RF" mkmodel --preset "$preset" --type "$type" --seed 3 -q -o "$f" || fail "mkmodel $preset $type"
        a=$("$RF" run -m "$f" -p "The river town" -n 8 -t 2 --show-ids --no-timing 2>&1 >/dev/null | grep '^ids:') \
            || fail "run $preset $type"
        b=$("$RF" run -m "$f" -p "The river town" -n 8 -t 2 --show-ids --no-timing 2>&1 >/dev/null | grep '^ids:')
        [ "$(echo "$a" | wc -w)" -eq 9 ] || fail "$preset $type: expected 8 ids, got '$a'"
        [ "$a" = "$b" ] || fail "$preset $type: greedy run not repeatable: '$a' vs '$b'"
        echo "ok $preset $type: $a"
    done
done
