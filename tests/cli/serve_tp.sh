#!/usr/bin/env bash
# serve_tp.sh — `rocmforge serve --tp N` (docs/tp.md): the option parses (bad values exit 2);
# without N GPUs the server refuses the split with a message naming the GPU count and
# --device cpu (exit 1); `serve --tp 2 --device cpu` (the split on the CPU) answers greedy chat
# requests, three at once, with the text `serve --tp 1` gives. Where 2 GPUs are present (the
# lead's run on nvidia-h200-x2), the same comparison on the GPUs: `serve --device gpu --tp 2`,
# with the decode graphs (the default) and eager (RF_TP_GRAPHS=0), against `--tp 1`.
# A disconnect storm (serve_tp_storm.py: 24 streams on 16 slots, all cut mid-stream) on the CPU
# split (one backend, and CPU ranks through rocmforge-test: the several-GPU code path) and, where
# GPUs are present, on one GPU and on the split over 2: afterwards /metrics must show no KV
# block used and no sequence running, rocmforge_tp_size and the per-GPU series
# (rocmforge_gpu_memory_*_bytes, rocmforge_gpu_kv_bytes; none on the CPU), each GPU's free memory
# unchanged by a storm after a warm-up one, and a normal request must be answered. The same storm
# on a hybrid model (tiny-qwen35moe, CPU and one GPU) must give back every recurrent-state slot.
# Needs curl and python3; skipped (77) without them or without the server in the build.
# usage: bash serve_tp.sh <rocmforge> <source-dir>
set -u
RF=$1
T=$(mktemp -d)
SERVERS=()
cleanup() {
    for p in "${SERVERS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${SERVERS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
"$RF" serve --help >"$T/help" 2>&1
if grep -qi "not part of this build\|unknown command" "$T/help"; then
    echo "SKIP: rocmforge was built without the server (libmicrohttpd missing)"; exit 77
fi
grep -q -- "--tp N" "$T/help" || fail "serve --help does not list --tp: $(cat "$T/help")"

expect() { # expect CODE PATTERN -- command...: exit code and a stderr substring
    local code=$1 pat=$2
    shift 3
    timeout 120 "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ "$rc" = "$code" ] || fail "'$*' exited $rc, expected $code; stderr: $(cat "$T/err")"
    grep -qF -- "$pat" "$T/err" || fail "'$*' stderr lacks '$pat': $(cat "$T/err")"
}

M=$T/tiny.gguf
"$RF" mkmodel --preset tiny --type q8_0 -o "$M" >/dev/null 2>&1 || fail "mkmodel"

# ---- the option ----
expect 2 "option --tp" -- "$RF" serve -m "$M" --tp 0
expect 2 "option --tp" -- "$RF" serve -m "$M" --tp 65
expect 2 "option --tp" -- "$RF" serve -m "$M" --tp two
expect 2 "option --tp needs a value" -- "$RF" serve -m "$M" --tp

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$NGPU" -lt 2 ]; then
    # refused, not quietly run on the CPU: the load fails and the server exits 1 naming why
    for dev in "" "--device gpu"; do
        # shellcheck disable=SC2086
        expect 1 "--tp 2" -- "$RF" serve -m "$M" --port 0 --tp 2 $dev
        grep -q "^error: .*GPU" "$T/err" || fail "serve --tp 2 $dev without 2 GPUs: no error naming the GPUs: $(cat "$T/err")"
        grep -qF -- "--device cpu" "$T/err" || fail "serve --tp 2 $dev: the error does not name --device cpu: $(cat "$T/err")"
        echo "serve --tp 2 $dev on $NGPU GPU(s): $(grep '^error: ' "$T/err")"
    done
fi

# start_server NAME ENV... -- ARGS...: a server on a free loopback port, ready (/health 200);
# its port in $T/NAME.port, its log in $T/NAME.log
start_server() {
    local name=$1 envs=()
    shift
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$RF" serve -m "$M" --host 127.0.0.1 --port 0 --parallel 4 "$@" 2>"$T/$name.log" &
    local pid=$! port=""
    SERVERS+=("$pid")
    for _ in $(seq 1 600); do
        kill -0 "$pid" 2>/dev/null || fail "server $name ($*) exited: $(cat "$T/$name.log")"
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/$name.log" | head -1)
        if [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]; then
            echo "$port" >"$T/$name.port"
            echo "$pid" >"$T/$name.pid"
            return 0
        fi
        sleep 0.2
    done
    fail "server $name ($*) not ready after 120 s: $(cat "$T/$name.log")"
}
stop_server() {
    local pid
    pid=$(cat "$T/$1.pid")
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

PROMPTS=("Write a short story about a fox." "What is the capital of France?" "Count from one to ten.")
# chat NAME: the three prompts at once (a batch of three in the engine), greedy, 32 tokens each;
# the answers' text in $T/NAME.0 .. .2
chat() {
    local name=$1 port i pids=()
    port=$(cat "$T/$name.port")
    for i in 0 1 2; do
        python3 -c 'import json,sys; print(json.dumps({"model": "m", "max_tokens": 32, "temperature": 0,
            "logprobs": True, "top_logprobs": 2,
            "messages": [{"role": "user", "content": sys.argv[1]}]}))' "${PROMPTS[$i]}" >"$T/req$i.json"
        curl -s --max-time 120 -H 'Content-Type: application/json' --data-binary "@$T/req$i.json" \
            "http://127.0.0.1:$port/v1/chat/completions" >"$T/$name.resp$i" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail "$name: a chat request failed (curl $?)"; done
    for i in 0 1 2; do
        python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.stdout.write(r["choices"][0]["message"]["content"] or "")' \
            "$T/$name.resp$i" >"$T/$name.$i" 2>"$T/$name.perr" || fail "$name: answer $i: $(cat "$T/$name.resp$i")"
    done
}
# parted A B I: whether answer I of A and B part at a near tie: the tokens equal up to the first
# difference (or up to where one answer ended), and there the top two log-probabilities of a run
# that has that position are within ARGMAX_TIE (0.1, as test_tp / test_gpu_tp / test_model_golden:
# the split sums a layer's partial products in another order, so logits move by about the
# q8_0 tolerance, which can swap two candidates only where they were that close). Prints the margin.
parted() {
    python3 - "$T/$1.resp$3" "$T/$2.resp$3" <<'PY'
import json, sys
def toks(f):
    lp = (json.load(open(f))["choices"][0].get("logprobs") or {}).get("content") or []
    return [(e["token"], [t["logprob"] for t in e.get("top_logprobs", [])]) for e in lp]
a, b = toks(sys.argv[1]), toks(sys.argv[2])
p = 0
while p < len(a) and p < len(b) and a[p][0] == b[p][0]:
    p += 1
margins = [x[p][1][0] - x[p][1][1] for x in (a, b) if p < len(x) and len(x[p][1]) >= 2]
if not margins:
    print("no top-2 log-probabilities at token %d" % p); sys.exit(1)
m = min(margins)
print("parting at token %d, top-2 margin %.4g" % (p, m))
sys.exit(0 if m < 0.1 else 1)
PY
}
# same A B: every answer of B equals A's or parts from it at a near tie (parted), and A's are not
# all empty (a failed run is no agreement)
same() {
    local i nonempty=0 why
    for i in 0 1 2; do
        [ -s "$T/$1.$i" ] && nonempty=1
        cmp -s "$T/$1.$i" "$T/$2.$i" && continue
        why=$(parted "$1" "$2" "$i") ||
            fail "$2 answered prompt $i differently from $1 ($why): '$(cat "$T/$1.$i")' vs '$(cat "$T/$2.$i")'"
        echo "$2: prompt $i parts from $1 at a near tie ($why)"
    done
    [ $nonempty = 1 ] || fail "$1: every answer is empty"
    echo "$2: the 3 answers equal $1's (up to a near tie)"
}

# ---- the split on the CPU serves what the unsplit model serves ----
start_server cpu1 -- --device cpu --tp 1
chat cpu1
stop_server cpu1
start_server cpu2 -- --device cpu --tp 2
grep -q "loaded" "$T/cpu2.log" || fail "cpu2: no load line: $(cat "$T/cpu2.log")"
chat cpu2
stop_server cpu2
same cpu1 cpu2

RFT=${RF_TEST_CLI:-$(dirname "$RF")/tests/rocmforge-test}

# ---- across GPUs (2 present): the decode graphs (default) and eager ----
if [ "$NGPU" -ge 2 ]; then
    start_server gpu1 -- --device gpu --tp 1
    chat gpu1
    stop_server gpu1
    for g in 1 0; do
        start_server "gpu2g$g" RF_TP_GRAPHS=$g -- --device gpu --tp 2
        grep -q "split over 2 GPUs\|loaded" "$T/gpu2g$g.log" || fail "gpu2g$g: $(cat "$T/gpu2g$g.log")"
        chat "gpu2g$g"
        same gpu1 "gpu2g$g"
        chat "gpu2g$g" # a second round: the recorded decode steps replayed
        same gpu1 "gpu2g$g"
        stop_server "gpu2g$g"
    done
    # a GPU that stops taking part (rank 1 leaves out every collective: the tp_skip test hook,
    # rocmforge-test): the request fails within RF_TP_TIMEOUT_MS (+ slack), the server lives on
    if [ -x "$RFT" ]; then
        RF_SAVE=$RF
        RF=$RFT
        start_server hang RF_TP_SKIP_RANK=2 RF_TP_SKIP_FROM=1 RF_TP_TIMEOUT_MS=3000 -- --device gpu --tp 2
        RF=$RF_SAVE
        port=$(cat "$T/hang.port")
        t0=$(date +%s)
        code=$(curl -s -o "$T/hang.body" -w '%{http_code}' --max-time 60 -H 'Content-Type: application/json' \
            --data-binary "@$T/req0.json" "http://127.0.0.1:$port/v1/chat/completions")
        dt=$(($(date +%s) - t0))
        echo "hang: HTTP $code after ${dt}s: $(head -c 400 "$T/hang.body")"
        [ "$dt" -le 25 ] || fail "hang: the request took ${dt}s (RF_TP_TIMEOUT_MS=3000)"
        { [ "$code" != 200 ] || grep -q '"error"' "$T/hang.body"; } || fail "hang: the request succeeded"
        grep -q "RF_TP_TIMEOUT_MS" "$T/hang.log" "$T/hang.body" || fail "hang: no error naming RF_TP_TIMEOUT_MS: $(tail -5 "$T/hang.log")"
        h=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/health")
        [ -n "$h" ] && [ "$h" != 000 ] || fail "hang: /health does not answer after the failed step"
        # /metrics asks each GPU's driver for its free memory: it must answer on the aborted split too
        mc=$(curl -s -o "$T/hang.metrics" -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/metrics")
        [ "$mc" = 200 ] || fail "hang: /metrics answered '$mc' after the failed step"
        echo "hang: /metrics $mc: $(grep '^rocmforge_gpu_memory_free_bytes' "$T/hang.metrics" | tr '\n' ' ')"
        t0=$(date +%s)
        stop_server hang
        echo "hang: /health $h; stopped in $(($(date +%s) - t0))s"
    else
        echo "hang check: skipped (rocmforge-test not found: $RFT)"
    fi
else
    echo "serve --tp 2 across GPUs: skipped ($NGPU GPU(s) present)"
fi

# ---- a disconnect storm: every KV block back, each GPU's memory as it was (serve_tp_storm.py) ----
STORM=$(dirname "$0")/serve_tp_storm.py
# storm NAME TP GPUS ENV... -- ARGS...: a server (--parallel 16, -c 1024), the storm, the server stopped
storm() {
    local name=$1 tp=$2 gpus=$3
    shift 3
    start_server "$name" "$@" --parallel 16 -c 1024
    python3 "$STORM" "$(cat "$T/$name.port")" "$name" --tp "$tp" --gpus "$gpus" ${STORM_ARGS:-} ||
        fail "storm $name: $(tail -5 "$T/$name.log")"
    stop_server "$name"
}
storm storm-cpu2 2 0 -- --device cpu --tp 2
if [ -x "$RFT" ]; then # CPU ranks: a backend and a KV pool per rank, as over GPUs (tp_cpu_ranks)
    RF_SAVE=$RF
    RF=$RFT
    storm storm-ranks2 2 0 RF_TP_CPU_RANKS=1 -- --device cpu --tp 2
    RF=$RF_SAVE
else
    echo "storm on CPU ranks: skipped (rocmforge-test not found: $RFT)"
fi
if [ "$NGPU" -ge 1 ]; then
    storm storm-gpu1 1 1 -- --device gpu --tp 1
fi
if [ "$NGPU" -ge 2 ]; then
    storm storm-gpu2 2 2 -- --device gpu --tp 2
fi
# a hybrid model (qwen35moe: DeltaNet layers hold a recurrent-state slot per sequence beside the
# KV blocks of its attention layers): the storm must give every slot back too
MH="$T/tiny-qwen35moe-q8_0.gguf"
"$RF" mkmodel --preset tiny-qwen35moe --type q8_0 -o "$MH" >/dev/null 2>&1 || fail "mkmodel tiny-qwen35moe"
M_SAVE=$M
M=$MH
STORM_ARGS="--max-tokens 896" # its chat template's prompt is longer: stay inside -c 1024
storm storm-hybrid-cpu 1 0 -- --device cpu
if [ "$NGPU" -ge 1 ]; then
    storm storm-hybrid-gpu1 1 1 -- --device gpu
fi
STORM_ARGS=""
M=$M_SAVE
echo "PASS"
