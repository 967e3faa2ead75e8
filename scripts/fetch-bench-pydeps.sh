#!/usr/bin/env bash
# fetch-bench-pydeps.sh — downloads the `openai` client and everything it needs as wheels for
# the GPU machine (CPython 3.12, manylinux x86_64, no package registry there) into .carry/pydeps
# (git-ignored: /.carry/ is in .gitignore). scripts/serve-compare.sh installs them there
# with `pip install --no-index --find-links`. Run here, where pip reaches PyPI; then carry
# .carry/pydeps in the device call.
# usage: scripts/fetch-bench-pydeps.sh [DEST]   (default .carry/pydeps)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.carry/pydeps}
mkdir -p "$DEST"
PIP=(python3 -m pip)
[ -x .venv/bin/python ] && PIP=(.venv/bin/python -m pip)
"${PIP[@]}" download -q --disable-pip-version-check --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d "$DEST" openai
ls "$DEST"
du -sh "$DEST"
