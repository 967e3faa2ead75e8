# cli_common.sh — what the tests/cli/*.sh scripts share (sourced, not run): RF and SRC from their
# arguments, a temporary directory T removed at exit, `fail MESSAGE` (prints FAIL, exits 1) and
# `expect CODE PATTERN -- command...` (the command's exit code and a substring of its stderr).
# usage (after set -u): . "$2/tests/util/cli_common.sh" "$1" "$2"
RF=$1
SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

expect() {
    local code=$1 pat=$2
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ "$rc" = "$code" ] || fail "'$*' exited $rc, expected $code; stderr: $(cat "$T/err")"
    grep -qF -- "$pat" "$T/err" || fail "'$*' stderr lacks '$pat': $(cat "$T/err")"
}
