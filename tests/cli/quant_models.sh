#!/usr/bin/env bash
# quant_models.sh — our dequantizers and dot kernels on the real models' tensors (one tensor per
# quantized type of each model in models/: SmolLM2 Q4_1/Q8_0, Gemma-3 Q4_K/Q6_K/Q5_0/Q8_0):
# dequantization must be bit-identical to gguf-py's, and a matvec with the table's vec_dot must be
# within rel. L2 1.5e-2 of the double-precision product of the dequantized weights with f32
# activations (see tests/unit/test_quant_dot.c for the bound).
# usage: quant_models.sh <rocmforge> <source-dir>; exit 77 (skip) without the models or .venv.
set -u
RF=$1
SRC=$2
PY=$SRC/.venv/bin/python
CHK=$(dirname "$RF")/tests/test_quant_golden
MODELS=()
for m in "$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$SRC/models/gemma-3-270m-q4_k_m.gguf"; do
  [ -f "$m" ] && MODELS+=("$m")
done
if [ ${#MODELS[@]} -eq 0 ]; then echo "skip: no models in $SRC/models (scripts/fetch-models.sh)"; exit 77; fi
if ! [ -x "$PY" ] || ! "$PY" -c 'import gguf, numpy' 2>/dev/null; then
  echo "skip: $PY with the gguf package is missing (run scripts/setup.sh)"; exit 77
fi
if ! [ -x "$CHK" ]; then echo "error: $CHK not built"; exit 1; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
set -e
"$PY" "$SRC/tests/cli/quant_models_dump.py" "$TMP" "${MODELS[@]}"
"$CHK" --check-raw "$TMP"
