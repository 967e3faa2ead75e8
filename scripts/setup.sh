#!/usr/bin/env bash
# setup.sh — installs what ROCmForge needs to build and test, and nothing that is already there.
# Debian/Ubuntu: apt-get (as root, or through sudo). Elsewhere: names the packages and stops.
# RF_NO_INSTALL=1 skips every install (machines without a package registry).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config git python3 python3-venv python3-pip unzip
      libjansson-dev libpcre2-dev libmicrohttpd-dev libcmocka-dev
      clang libclang-rt-14-dev hipcc libamdhip64-dev gnuplot-nox
      libjs-marked libjs-highlight.js node-dompurify chromium chromium-driver)
# Optional: the HIP compile check; headless Chromium for the web UI's browser test (a
# distribution without them still builds; those tests report as skipped).
OPTIONAL=" hipcc libamdhip64-dev chromium chromium-driver "

if [ "${RF_NO_INSTALL:-0}" = 1 ]; then exit 0; fi

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
else
  echo "setup: this is not a Debian-like system; install these (or your distribution's equivalents):" >&2
  echo "  ${PKGS[*]}" >&2
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
      echo "error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  if ! $SUDO apt-get install -y -qq "${missing[@]}" >/tmp/rf-apt.log 2>&1; then
    echo "setup: some packages failed to install (see /tmp/rf-apt.log); retrying without${OPTIONAL% }" >&2
    rest=(); for p in "${missing[@]}"; do case $OPTIONAL in *" $p "*) ;; *) rest+=("$p");; esac; done
    [ ${#rest[@]} -eq 0 ] || $SUDO apt-get install -y -qq "${rest[@]}"
  fi
fi

# Python oracles used by some tests (the `gguf` reader, jinja2), Selenium (the browser test
# of the web UI), the official `openai` and `anthropic` clients (drive `rocmforge serve` in
# tests/cli/serve*.sh) and `jsonschema` with its RFC 3339 date/time checker (structured output's
# answers validated against their schemas): a private venv, git-ignored.
if [ ! -x .venv/bin/python ] ||
  ! .venv/bin/python -c 'import gguf, jinja2, numpy, selenium, openai, anthropic, jsonschema, rfc3339_validator' 2>/dev/null; then
  echo "setup: creating .venv with gguf, numpy, jinja2 (test oracles), selenium (browser test), openai, anthropic and jsonschema (server tests)"
  if [ -x .venv/bin/python ] || python3 -m venv .venv 2>/dev/null; then
    .venv/bin/python -m pip install -q --disable-pip-version-check gguf numpy jinja2 selenium openai anthropic jsonschema \
      rfc3339-validator ||
      echo "setup: warning: could not install Python oracles; tests that need them will be skipped" >&2
  else
    echo "setup: warning: python3 -m venv failed; tests that need the Python oracles will be skipped" >&2
  fi
fi
