#!/usr/bin/env bash
# serve-compare.sh — the serving load benchmark in ONE call on a GPU machine without network:
# writes a synthetic llama3-8b Q4_0 (`rocmforge mkmodel`), starts `rocmforge serve --device gpu
# --parallel 256`, runs scripts/bench-serve.py (the official openai client, AsyncOpenAI streaming;
# ~128-token prompts, 128 generated tokens with ignore_eos) at 1, 8, 32, 64, 128, 256 streams,
# stops it; then, when LLAMA_SERVER names a llama-server binary (built from a llama.cpp snapshot
# outside the repo, its .so files beside it), the same against llama-server on the same file
# (-np 64, -c 64 x CTX, -fa on, -ngl 99) at 1, 8, 32, 64 streams. Logs and tables go under $OUT.
#
#   scripts/serve-compare.sh --pack      here (the build machine, with nvcc and network): copies
#                                        build/rocmforge (a CUDA build: cmake -DRF_CUDA=ON) and
#                                        libmicrohttpd into .carry/serve-bin, and fetches the
#                                        openai wheels into .carry/pydeps (fetch-bench-pydeps.sh)
#   scripts/serve-compare.sh             there, with .carry/serve-bin and .carry/pydeps carried
#                                        (and the llama-server folder): installs the wheels with
#                                        pip --no-index --find-links into /tmp/bench-site, runs it all
# env: RF_BIN (rocmforge binary; default .carry/serve-bin/rocmforge, else build/rocmforge),
#      LLAMA_SERVER, STREAMS (default 1,8,32,64,128,256), LLAMA_STREAMS (default 1,8,32,64),
#      PARALLEL (256), CTX (positions per sequence, default 512), ROUNDS (requests per stream, 2),
#      PRESET (llama3-8b), TYPE (q4_0), MODEL (an existing GGUF instead of mkmodel's), PORT (8090),
#      DEVICE (gpu; cpu to try the script on a machine without one), PROMPT_TOKENS (128), GEN_TOKENS (128)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if [ "${1:-}" = "--pack" ]; then
    B=${2:-$ROOT/build}
    C=$ROOT/.carry/serve-bin
    grep -q "RF_CUDA:STRING=ON" "$B/CMakeCache.txt" 2>/dev/null ||
        echo "warning: $B is not configured with -DRF_CUDA=ON: the binary will have no GPU backend" >&2
    cmake --build "$B" -j2 --target rocmforge_cli || exit 1
    rm -rf "$C" && mkdir -p "$C"
    cp "$B/rocmforge" "$C/" && strip --strip-debug "$C/rocmforge"
    for l in libmicrohttpd.so.12 libjansson.so.4 libpcre2-8.so.0; do # in case the GPU image lacks them
        [ -e /usr/lib/x86_64-linux-gnu/$l ] && cp -L /usr/lib/x86_64-linux-gnu/$l "$C/"
    done
    bash "$ROOT/scripts/fetch-bench-pydeps.sh" "$ROOT/.carry/pydeps" >/dev/null || exit 1
    du -sh "$C" "$ROOT/.carry/pydeps"
    exit 0
fi

OUT=${OUT:-$ROOT/serve-compare-out}
mkdir -p "$OUT"
SUM=$OUT/summary.md
STREAMS=${STREAMS:-1,8,32,64,128,256}
LLAMA_STREAMS=${LLAMA_STREAMS:-1,8,32,64}
PARALLEL=${PARALLEL:-256}
CTX=${CTX:-512}
ROUNDS=${ROUNDS:-2}
PRESET=${PRESET:-llama3-8b}
TYPE=${TYPE:-q4_0}
PORT=${PORT:-8090}
DEVICE=${DEVICE:-gpu}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
GEN_TOKENS=${GEN_TOKENS:-128}
BENCH_ARGS=(--rounds "$ROUNDS" --prompt-tokens "$PROMPT_TOKENS" --gen-tokens "$GEN_TOKENS")
RF=${RF_BIN:-}
if [ -z "$RF" ]; then
    if [ -x .carry/serve-bin/rocmforge ]; then RF=.carry/serve-bin/rocmforge; else RF=build/rocmforge; fi
fi
RF=$(realpath "$RF")
export LD_LIBRARY_PATH="$(dirname "$RF"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
say() { echo "$*" | tee -a "$SUM"; }
: >"$SUM"
say "# serve-compare $(date -u +%FT%TZ)"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | sed 's/^/gpu: /'; } | tee -a "$SUM"
missing=$(ldd "$RF" 2>/dev/null | grep "not found")
[ -z "$missing" ] || say "warning: libraries missing for $RF: $missing"
say "rocmforge: $RF ($("$RF" --version 2>&1)); streams $STREAMS; parallel $PARALLEL; ctx $CTX; rounds $ROUNDS;"\
    "prompts $PROMPT_TOKENS tokens, $GEN_TOKENS generated"

# the client: openai and its needs from the carried wheels (no registry here)
PY=${PYTHON:-python3}
if ! "$PY" -c "import openai" 2>/dev/null; then
    [ -d .carry/pydeps ] || { say "error: no openai here and no .carry/pydeps (run --pack on the build machine)"; exit 1; }
    "$PY" -m pip install -q --no-index --no-compile --disable-pip-version-check --find-links .carry/pydeps \
        --target /tmp/bench-site openai >"$OUT/pip.log" 2>&1 || { say "error: pip install failed: $(tail -3 "$OUT/pip.log")"; exit 1; }
    export PYTHONPATH=/tmp/bench-site${PYTHONPATH:+:$PYTHONPATH}
fi
"$PY" -c "import openai; print('openai', openai.__version__)" | tee -a "$SUM" || exit 1

MODEL=${MODEL:-/tmp/$PRESET-$TYPE.gguf}
if [ ! -f "$MODEL" ]; then
    t=$(date +%s)
    "$RF" mkmodel --preset "$PRESET" --type "$TYPE" -o "$MODEL" -q >"$OUT/mkmodel.log" 2>&1 || { say "error: mkmodel: $(tail -3 "$OUT/mkmodel.log")"; exit 1; }
    say "model: $MODEL ($PRESET $TYPE, written in $(($(date +%s) - t)) s)"
fi

wait_health() { # url pid seconds
    local i
    for ((i = 0; i < $3 * 5; i++)); do
        "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' "$1" \
            >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}

# ---- rocmforge serve ----
say ""
say "## rocmforge serve --device $DEVICE --parallel $PARALLEL -c $CTX"
"$RF" serve -m "$MODEL" --device "$DEVICE" --port "$PORT" --parallel "$PARALLEL" -c "$CTX" --alias bench \
    --max-queue 1024 >"$OUT/rocmforge-serve.log" 2>&1 &
SP=$!
if wait_health "http://127.0.0.1:$PORT" $SP 300; then
    say "loaded: $(grep -m1 "loaded" "$OUT/rocmforge-serve.log")"
    timeout 420 "$PY" scripts/bench-serve.py --base-url "http://127.0.0.1:$PORT/v1" --streams "$STREAMS" "${BENCH_ARGS[@]}" \
        --json "$OUT/rocmforge-bench.json" --label "rocmforge serve ($DEVICE)" 2>&1 | tee -a "$SUM"
    "$PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$PORT/metrics" >"$OUT/rocmforge-metrics.txt"
else
    say "error: rocmforge serve did not become ready: $(tail -5 "$OUT/rocmforge-serve.log")"
fi
kill -TERM $SP 2>/dev/null
wait $SP 2>/dev/null
say "rocmforge serve exit: $?"

# ---- llama-server on the same file ----
if [ -n "${LLAMA_SERVER:-}" ]; then
    say ""
    say "## llama-server -np 64 -c $((64 * CTX)) -fa on -ngl 99 ($LLAMA_SERVER)"
    LD_LIBRARY_PATH="$(dirname "$(realpath "$LLAMA_SERVER")"):$LD_LIBRARY_PATH" "$LLAMA_SERVER" -m "$MODEL" --port $((PORT + 1)) \
        -np 64 -c $((64 * CTX)) -fa on -ngl 99 --alias bench >"$OUT/llama-server.log" 2>&1 &
    LP=$!
    if wait_health "http://127.0.0.1:$((PORT + 1))" $LP 300; then
        timeout 420 "$PY" scripts/bench-serve.py --base-url "http://127.0.0.1:$((PORT + 1))/v1" --streams "$LLAMA_STREAMS" \
            "${BENCH_ARGS[@]}" --json "$OUT/llama-bench.json" --label "llama-server" 2>&1 | tee -a "$SUM"
    else
        say "error: llama-server did not become ready: $(tail -5 "$OUT/llama-server.log")"
    fi
    kill -TERM $LP 2>/dev/null
    wait $LP 2>/dev/null
fi
say ""
say "done $(date -u +%FT%TZ); logs: $OUT"
