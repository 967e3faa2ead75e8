#!/usr/bin/env bash
# tp.sh — tensor parallelism over the GPUs of one machine (docs/tp.md): decode tok/s at batch 1
# and 32 for synthetic models at --tp 1, 2 and 4 (as many as the GPUs allow), and optionally the
# GPU TP test first; prints one table.
#
#   bench/tp.sh --pack [BUILD_DIR]   on the build machine: build (RF_SHARED, default build-shared/)
#                                    and collect rocmforge, test_gpu_tp, rocmforge-test, librocmforge.so
#                                    and the libraries they need into build-tp-carry/ (a carry)
#   bench/tp.sh [PHASE...]           on the GPU machine; phases in order (default: models bench):
#     test    test_gpu_tp (the split across real GPUs vs the unsplit forward), log under $OUT; then
#             `rocmforge run`/`batch` greedy text at --tp 2 (RF_TP_GRAPHS=0 eager, 1 one graph) vs --tp 1
#     models  write the models of $CASES into $MODELS_DIR with `rocmforge mkmodel` (kept when present;
#             the bytes written so far printed every 15 s)
#     bench   `rocmforge bench --tp N` for each case and N in $TPS (skipping N above the GPU count);
#             N > 1 twice: eager (RF_TP_GRAPHS=0) and one graph over every GPU (RF_TP_GRAPHS=1, the default)
#     serve   tests/cli/serve_tp.sh: `serve --tp 2` vs `--tp 1` over HTTP (graphs and eager), the
#             disconnect storms (/metrics per GPU: KV blocks back, each GPU's free memory unchanged)
#             and the hang check (a rank that stops: the request fails within RF_TP_TIMEOUT_MS)
#     table   the table again from the logs under $OUT
#     x4      the 4-GPU run in one call (nvidia-h200-x4, under 10 minutes): CASES defaults to
#             "llama3-8b:q4_0 llama3-70b:q4_0" (the 70B: ~40 GB written on the device, ~1 min),
#             TPS "1 2 4", REPS 1; then models and bench; no new bench run starts after
#             $BUDGET_S seconds (default 500) so the table always comes back
# env: BIN (dir holding rocmforge; default build-tp-carry, else build), OUT (./tp-out), MODELS_DIR
#      (/tmp/rf-models), CASES ("llama3-8b:q4_0"; add llama2-70b:q4_0 for the 70B shape, ~39 GB
#      on disk), TPS ("1 2 4"), REPS (3), NGEN (64 generated tokens per run), BATCH (32)
# NCCL: opened at run time as libnccl.so.2; this script adds the pip wheel's library directory
# (nvidia-nccl-cu12/-cu13: site-packages/nvidia/nccl/lib or nvidia/cu*/lib) to LD_LIBRARY_PATH
# when the system has none. NCCL_NVLS_ENABLE stays as the machine sets it (0), and is set to 0 if unset.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--pack" ]; then
    # RF_SHARED (as scripts/gpu-check.sh): one librocmforge.so beside three small binaries; three
    # static ones (~16 MB each) and the source tree do not fit one device call's 64 MiB carry
    B=${2:-$ROOT/build-shared}
    C=$ROOT/build-tp-carry
    [ -f "$B/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$B" -DRF_CUDA=ON -DRF_CUDA_ARCHS=90 -DRF_SHARED=ON \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null || exit 1
    cmake --build "$B" -j2 --target rocmforge_cli test_gpu_tp rocmforge_test_cli || exit 1
    rm -rf "$C" && mkdir -p "$C" || exit 1
    cp "$B"/rocmforge "$B"/tests/test_gpu_tp "$B"/tests/rocmforge-test "$C"/ || exit 1
    [ -f "$B"/librocmforge.so ] && cp "$B"/librocmforge.so "$C"/
    cp -P /usr/lib/x86_64-linux-gnu/libcmocka.so.0* "$C"/
    for l in libmicrohttpd.so.12 libjansson.so.4 libpcre2-8.so.0; do
        [ -e /usr/lib/x86_64-linux-gnu/$l ] && cp -L /usr/lib/x86_64-linux-gnu/$l "$C"/
    done
    strip --strip-debug "$C"/rocmforge "$C"/test_gpu_tp "$C"/rocmforge-test "$C"/librocmforge.so 2>/dev/null
    du -sh "$C"
    [ -f "$C"/librocmforge.so ] || echo "tp.sh --pack: $B is not an RF_SHARED build: the carry may exceed 64 MiB with the source tree"
    exit 0
fi
BIN=${BIN:-}
if [ -z "$BIN" ]; then
    if [ -x "$ROOT/build-tp-carry/rocmforge" ]; then BIN=$ROOT/build-tp-carry; else BIN=$ROOT/build; fi
fi
BIN=$(cd "$BIN" 2>/dev/null && pwd || echo "$BIN")
OUT=${OUT:-$ROOT/tp-out}
MODELS_DIR=${MODELS_DIR:-/tmp/rf-models}
if [ "${1:-}" = x4 ]; then # the 4-GPU run's defaults (each still overridable)
    CASES=${CASES:-"llama3-8b:q4_0 llama3-70b:q4_0"}
    REPS=${REPS:-1}
fi
CASES=${CASES:-"llama3-8b:q4_0"}
TPS=${TPS:-"1 2 4"}
REPS=${REPS:-3}
BUDGET_S=${BUDGET_S:-500}
T_START=$(date +%s)
elapsed() { echo $(($(date +%s) - T_START)); }
NGEN=${NGEN:-64}
BATCH=${BATCH:-32}
mkdir -p "$OUT" "$MODELS_DIR"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
# the CUDA libraries and NCCL of the pip wheels (as scripts/gpu-check.sh; NCCL: nvidia-nccl-cu12/-cu13)
for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
    /usr/local/lib/python3*/dist-packages /opt/*/.venv/lib/python3*/site-packages; do
    for l in "$d"/nvidia/cu*/lib "$d"/nvidia/nccl/lib; do
        [ -d "$l" ] && case ":$LD_LIBRARY_PATH:" in *":$l:"*) ;; *) LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$l" ;; esac
    done
done
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} # never NVLink multicast on shared machines
NCCL_LIB=$( { ldconfig -p 2>/dev/null | grep -o '/[^ ]*libnccl.so.2$'; for l in ${LD_LIBRARY_PATH//:/ }; do
    ls "$l"/libnccl.so.2 2>/dev/null; done; } | head -1)
echo "tp.sh: NCCL ${NCCL_LIB:-not found (the split over GPUs will say so)}; NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset}"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
model_path() { echo "$MODELS_DIR/${1%%:*}-${1##*:}.gguf"; }
tag() { echo "${1%%:*}-${1##*:}"; }

phase_test() {
    echo "test: test_gpu_tp on $NGPU GPU(s)"
    local rc=0
    if [ -z "${SKIP_TP_TEST:-}" ]; then # SKIP_TP_TEST=1: the CLI comparisons only
        RF_CLI=$BIN/rocmforge RF_SYNTH_DIR=${RF_SYNTH_DIR:-/tmp/rf-synth} "$BIN/test_gpu_tp" >"$OUT/test_gpu_tp.log" 2>&1
        rc=$?
    fi
    grep -E "tp [24] |refused|skipped|PASSED|FAILED|NCCL|memory free|device stats|error" "$OUT/test_gpu_tp.log" | head -150
    echo "test_gpu_tp: rc=$rc (0 pass, 77 skip)"
    [ "$NGPU" -ge 2 ] || return 0
    # the engine path (device sampler, decode graphs): greedy text at tp 2 vs tp 1
    local d=${RF_SYNTH_DIR:-/tmp/rf-synth} ok=0 bad=0
    mkdir -p "$d"
    printf 'Hello world\nThe quick brown fox\nOnce upon a time\nA B C D\nLorem ipsum\n1 2 3 4 5\n' >"$OUT/prompts.txt"
    for c in tiny:q8_0 tiny-llama2:f32 tiny-gemma3:q8_0 tiny-qwen3moe:q8_0 tiny-gpt-oss:mxfp4_moe; do
        m="$d/cli-${c%%:*}.${c##*:}.gguf" f="${c%%:*}-${c##*:}"
        [ -s "$m" ] || "$BIN/rocmforge" mkmodel --preset "${c%%:*}" --type "${c##*:}" -o "$m" -q
        for mode in run batch; do
            if [ $mode = run ]; then args=(run -m "$m" -p "Hello world, this is a test" -n 48 --ignore-eos);
            else args=(batch -m "$m" -f "$OUT/prompts.txt" -n 32 --ignore-eos -np 6); fi
            timeout 120 "$BIN/rocmforge" "${args[@]}" --device gpu --tp 1 >"$OUT/cli-$f-$mode-tp1.txt" 2>/dev/null
            for g in 0 1; do
                # a bounded run: a hang (at exit, say) shows as rc 124 instead of stopping the script
                RF_TP_GRAPHS=$g timeout 120 "$BIN/rocmforge" "${args[@]}" --device gpu --tp 2 >"$OUT/cli-$f-$mode-tp2-g$g.txt" \
                    2>"$OUT/cli-$f-$mode-tp2-g$g.err" || echo "  rc $?: $c $mode tp 2 RF_TP_GRAPHS=$g"
                # two empty outputs (a run that failed) are not an agreement
                if [ -s "$OUT/cli-$f-$mode-tp1.txt" ] && cmp -s "$OUT/cli-$f-$mode-tp1.txt" "$OUT/cli-$f-$mode-tp2-g$g.txt"; then ok=$((ok + 1));
                else bad=$((bad + 1)); echo "  differs: $c $mode tp 2 RF_TP_GRAPHS=$g (rc of run in .err)";
                    tail -2 "$OUT/cli-$f-$mode-tp2-g$g.err"; fi
            done
        done
    done
    echo "cli greedy text, tp 2 vs tp 1 (eager and RF_TP_GRAPHS=1): $ok equal, $bad differ (a difference is a near tie or a bug: see the files)"
}

phase_models() {
    for c in $CASES; do
        m=$(model_path "$c")
        [ -s "$m" ] && { echo "models: $m present ($(du -h "$m" | cut -f1)), kept"; continue; }
        echo "models: $c -> $m (at $(elapsed) s; $(df -h "$MODELS_DIR" | awk 'NR==2{print $4}') free)"
        "$BIN/rocmforge" mkmodel --preset "${c%%:*}" --type "${c##*:}" -o "$m.part" -q &
        local pid=$! t0
        t0=$(date +%s)
        local i=0
        while kill -0 $pid 2>/dev/null; do
            sleep 1
            i=$((i + 1))
            [ $((i % 15)) = 0 ] && kill -0 $pid 2>/dev/null &&
                echo "models:   $c: $(du -h "$m.part" 2>/dev/null | cut -f1) written ($(($(date +%s) - t0)) s)"
        done
        wait $pid && mv "$m.part" "$m" || { echo "mkmodel $c failed"; rm -f "$m.part"; return 1; }
        echo "models: $c written in $(($(date +%s) - t0)) s ($(du -h "$m" | cut -f1))"
    done
}

phase_serve() {
    echo "serve: tests/cli/serve_tp.sh on $NGPU GPU(s)"
    RF_TEST_CLI=$BIN/rocmforge-test timeout 400 bash "$ROOT/tests/cli/serve_tp.sh" "$BIN/rocmforge" "$ROOT" 2>&1 |
        tee "$OUT/serve_tp.log" | tail -45
    echo "serve_tp.sh: rc=${PIPESTATUS[0]} (0 pass, 77 skip)"
}

phase_bench() {
    { nvidia-smi -L; nvidia-smi topo -m; } >"$OUT/device.txt" 2>&1
    for c in $CASES; do
        m=$(model_path "$c")
        t=$(tag "$c")
        [ -s "$m" ] || { echo "bench: $m missing (run the models phase)"; continue; }
        for n in $TPS; do
            [ "$n" -le "$NGPU" ] || { echo "bench: $c tp $n skipped ($NGPU GPUs)"; continue; }
            for g in 0 1; do
                [ "$n" = 1 ] && [ $g = 1 ] && continue
                local k=$n
                [ $g = 1 ] && k=${n}g
                if [ "$(elapsed)" -ge "$BUDGET_S" ]; then
                    echo "bench: $c tp $n (RF_TP_GRAPHS=$g) not started: $(elapsed) s gone of BUDGET_S=$BUDGET_S"; continue
                fi
                echo "bench: $c tp $n$([ $g = 1 ] && echo ' RF_TP_GRAPHS=1') (at $(elapsed) s)"
                local left=$((BUDGET_S + 80 - $(elapsed)))
                [ "$left" -gt 300 ] && left=300
                RF_TP_GRAPHS=$g timeout "$left" "$BIN/rocmforge" bench -m "$m" --device gpu --tp "$n" -p 0 -n "$NGEN" -b "$BATCH" \
                    --batch-prompt 32 -r "$REPS" -o json >"$OUT/tp-$t-tp$k.json" 2>"$OUT/tp-$t-tp$k.err" ||
                    { echo "  failed:"; tail -3 "$OUT/tp-$t-tp$k.err"; }
            done
        done
    done
    phase_table
}

phase_table() {
    python3 - "$OUT" "$CASES" "$TPS" "$BATCH" <<'PY'
import json, os, sys
out, cases, tps, batch = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), int(sys.argv[4])
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
dev = open(f"{out}/device.txt").read().strip() if os.path.exists(f"{out}/device.txt") else "?"
print(f"\ndevice:\n{dev}\n")
print(f"| model | TP | decode tok/s, batch 1 | vs TP 1 | decode tok/s, batch {batch} (aggregate) | vs TP 1 |")
print("|---|---:|---:|---:|---:|---:|")
for c in cases:
    t = c.replace(":", "-")
    base = {}
    for n in [k for x in tps for k in ([x] if x == "1" else [x, x + "g"])]:
        d = load(f"{out}/tp-{t}-tp{n}.json")
        label = n[:-1] + " (graphs)" if n.endswith("g") else n + (" (eager)" if n != "1" else "")
        if not d:
            print(f"| {c} | {label} | - | | - | |")
            continue
        b1 = next((x["tok_s"] for x in d["results"] if x["test"].startswith("tg") and x.get("sequences", 1) == 1), None)
        bN = next((x["tok_s"] for x in d["results"] if x.get("sequences") == batch), None)
        if n == "1":
            base = {"b1": b1, "bN": bN}
        r1 = f"{b1 / base['b1']:.2f}x" if b1 and base.get("b1") else "-"
        rN = f"{bN / base['bN']:.2f}x" if bN and base.get("bN") else "-"
        f = lambda v: f"{v:.1f}" if v else "-"
        print(f"| {c} | {label} | {f(b1)} | {r1} | {f(bN)} | {rN} |")
PY
}

phases=("$@")
[ ${#phases[@]} = 0 ] && phases=(models bench)
for p in "${phases[@]}"; do
    case $p in
    test) phase_test ;;
    models) phase_models ;;
    bench) phase_bench ;;
    table) phase_table ;;
    serve) phase_serve ;;
    x4) echo "x4: $NGPU GPU(s), CASES=\"$CASES\" TPS=\"$TPS\" REPS=$REPS BUDGET_S=$BUDGET_S"
        phase_models && phase_bench ;;
    *) echo "unknown phase $p (test models bench serve table x4)"; exit 2 ;;
    esac
done
