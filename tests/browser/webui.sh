#!/usr/bin/env bash
# webui.sh — the chat page in a real browser: headless Chromium (Debian's chromium and
# chromium-driver) driven by Selenium (in .venv) against `rocmforge serve --device cpu` on
# SmolLM2 (tests/browser/test_webui.py says what is checked). Screenshots and the page's
# weight / first-paint numbers go to $RF_WEBUI_SHOTS (default: <build>/webui-shots).
# usage: webui.sh <rocmforge> <source-dir>; exit 77 (skip) without Chromium, chromedriver,
# Selenium or the model, or in a build without the server.
set -u
RF=$1
SRC=$2
PY=$SRC/.venv/bin/python
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
skip() { echo "skip: $*"; exit 77; }
CHROME=${RF_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
DRIVER=${RF_CHROMEDRIVER:-$(command -v chromedriver || true)}
[ -n "$CHROME" ] && [ -x "$CHROME" ] || skip "no chromium (Debian package chromium; scripts/setup.sh installs it)"
[ -n "$DRIVER" ] && [ -x "$DRIVER" ] || skip "no chromedriver (Debian package chromium-driver; scripts/setup.sh installs it)"
[ -x "$PY" ] && "$PY" -c 'import selenium' 2>/dev/null || skip "$PY with selenium is missing (run scripts/setup.sh)"
[ -f "$MODEL" ] || skip "$MODEL is missing (make models)"
"$RF" serve --help 2>&1 | grep -q -- --no-webui || skip "this rocmforge has no server or no web UI (libmicrohttpd missing at build?)"
export RF_WEBUI_SHOTS=${RF_WEBUI_SHOTS:-$(dirname "$RF")/webui-shots}
exec "$PY" "$SRC/tests/browser/test_webui.py" --rocmforge "$RF" --model "$MODEL" --chromium "$CHROME" \
  --chromedriver "$DRIVER" --out "$RF_WEBUI_SHOTS"
