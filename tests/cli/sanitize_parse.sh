#!/usr/bin/env bash
# sanitize_parse.sh — CTest wrapper: the code that reads what a client sends, built with
# AddressSanitizer + UndefinedBehaviorSanitizer (any report fails) and run on its tests: the
# template fuzz corpus replay, the template data-range and hostile-template tests, the server's
# request parsing, the GGUF corpus. A separate CPU-only build tree (build-sanitize-parse).
#   usage: bash sanitize_parse.sh <rocmforge-binary> <source-dir>
set -u
SRC=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
B=${RF_SANITIZE_BUILD:-$SRC/build-sanitize-parse}
TESTS="test_template_corpus test_chat_template_data test_chat_template_hostile test_server_parse test_gguf"
command -v cc >/dev/null || { echo "sanitize_parse: skipped, no C compiler"; exit 77; }
mkdir -p "$B" || exit 1
cmake -S "$SRC" -B "$B" -DCMAKE_BUILD_TYPE=Debug -DRF_SANITIZE=ON -DRF_CUDA=OFF >"$B/configure.log" 2>&1 ||
    { cat "$B/configure.log"; exit 1; }
cmake --build "$B" -j"${RF_SANITIZE_JOBS:-2}" --target $TESTS >"$B/build.log" 2>&1 ||
    { tail -40 "$B/build.log"; exit 1; }
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
fail=0
for t in $TESTS; do
    if [ ! -x "$B/tests/$t" ]; then echo "sanitize_parse: $t was not built"; fail=1; continue; fi
    (cd "$B/tests" && "./$t") >"$B/$t.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then fail=1; echo "sanitize_parse: $t FAILED (rc=$rc)"; tail -30 "$B/$t.log"
    else echo "sanitize_parse: $t passed under ASan+UBSan (rc=$rc)"; fi
done
exit $fail
