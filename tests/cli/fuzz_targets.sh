#!/usr/bin/env bash
# fuzz_targets.sh — the libFuzzer targets (tests/fuzz, `make fuzz`) still build and run: each is
# built with clang + libFuzzer + ASan + UBSan in a build directory beside this one, replays its
# corpus and runs a short fuzz (RUNS inputs, default 2000). A target's source list that misses a
# file the code now needs fails here, not weeks later in someone's fuzz session. Skips (77) where
# clang or libFuzzer is missing. The long runs stay manual (tests/fuzz/CMakeLists.txt).
#   usage: bash fuzz_targets.sh <rocmforge-binary> <source-dir>
set -u
SRC=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
B=${RF_FUZZ_BUILD:-$(cd "$(dirname "$1")" && pwd)/fuzz-targets}
RUNS=${RUNS:-2000}
JOBS=${JOBS:-2}
CLANG=$(command -v clang || true)
if [ -z "$CLANG" ]; then echo "fuzz_targets: skipped, clang not found (scripts/setup.sh installs it)"; exit 77; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$TMP/p.c"
if ! "$CLANG" -fsanitize=fuzzer "$TMP/p.c" -o "$TMP/p" >"$TMP/log" 2>&1; then
    echo "fuzz_targets: skipped, clang cannot link libFuzzer (libclang-rt-*-dev):"; head -3 "$TMP/log"; exit 77
fi
echo "fuzz_targets: $("$CLANG" --version | head -1); build directory $B"
start=$(date +%s)
if ! CC=$CLANG cmake -S "$SRC" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRF_FUZZ=ON -DRF_CUDA=OFF >"$TMP/cfg" 2>&1; then
    echo "FAIL: configure"; tail -20 "$TMP/cfg"; exit 1
fi
TARGETS="fuzz_gguf fuzz_template fuzz_grammar fuzz_tool_grammar fuzz_server"
if ! nice cmake --build "$B" -j"$JOBS" --target $TARGETS >"$TMP/build" 2>&1; then
    echo "FAIL: build"; grep -E "error|undefined reference" "$TMP/build" | head -20; exit 1
fi
echo "built $TARGETS in $(($(date +%s) - start)) s"
fails=0
run() { # run <target> <max_len> <corpus dir or ''>: replay the corpus, then RUNS fresh inputs
    local t=$1 len=$2 corpus=$3 s=$(date +%s)
    mkdir -p "$TMP/$t"
    [ -n "$corpus" ] && cp "$corpus"/* "$TMP/$t/" 2>/dev/null
    if nice "$B/tests/fuzz/$t" -runs="$RUNS" -max_len="$len" -rss_limit_mb=2048 -timeout=60 -seed=1 \
        "$TMP/$t" >"$TMP/$t.log" 2>&1; then
        echo "ok: $t ($(ls "$corpus" 2>/dev/null | wc -l) corpus files + $RUNS inputs, $(($(date +%s) - s)) s)"
    else
        echo "FAIL: $t"; grep -E "ERROR|SUMMARY|runtime error|abort|Test unit written" "$TMP/$t.log" | head -10
        fails=$((fails + 1))
    fi
}
run fuzz_gguf 65536 "$SRC/tests/fuzz/corpus"
run fuzz_template 16384 "$SRC/tests/fuzz/corpus-template"
run fuzz_grammar 4096 ""
run fuzz_tool_grammar 2048 ""
if [ -f "$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    run fuzz_server 8192 "$SRC/tests/fuzz/corpus-server"
else
    echo "skip: fuzz_server (needs models/SmolLM2-135M-Instruct.Q4_1.gguf: make models)"
fi
[ $fails = 0 ] && echo "fuzz_targets: all ran clean" || echo "fuzz_targets: $fails FAILED"
exit $((fails > 0))
