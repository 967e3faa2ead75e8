# serve_common.sh — what the tests/cli/serve_*.sh wrappers share (sourced, not run): the tool and
# the source tree from their arguments, and a skip (77) when the server is not built, the SmolLM2
# model is missing or a Python package is. Sets RF, SRC, MODEL and PY (.venv's python, else python3).
# usage: . "$2/tests/server/serve_common.sh" <rocmforge> <source-dir> [python-package ...]
RF=$(realpath "$1")
SRC=$(realpath "$2")
shift 2
"$RF" serve --help 2>&1 | grep -qi "not part of this build\|unknown command" && { echo "SKIP: built without the server"; exit 77; }
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "SKIP: $MODEL missing (make models)"; exit 77; }
PY=$SRC/.venv/bin/python
[ -x "$PY" ] || PY=python3
for p in "$@"; do
    "$PY" -c "import $p" 2>/dev/null || { echo "SKIP: the $p package is missing ($PY; scripts/setup.sh installs it)"; exit 77; }
done
