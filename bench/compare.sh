#!/usr/bin/env bash
# compare.sh — ROCmForge beside llama.cpp on one GPU, same synthetic GGUF files: makes the models
# with `rocmforge mkmodel`, runs `rocmforge bench`, and where a llama.cpp build is present runs
# llama-bench and llama-batched-bench on the same files; prints one table of both and the ratios.
#
#   bench/compare.sh [PHASE...]     phases, in order given (default: models bench):
#     peer    build llama.cpp's CUDA backend from the snapshot tarball $LLAMA_SRC into
#             $LLAMA_DIR (bench, batched-bench, server; ~5 min on 16 cores)
#     models  write the models of $CASES into $MODELS_DIR (kept when present)
#     bench   ours, then the peer's (when $LLAMA_DIR/bin/llama-bench exists), then the table
#     table   the table again from the logs under $OUT
# The snapshot tarball (git archive of github:unslothai/llama.cpp, outside this repository):
#   tar -cJf .carry/peer/llama-src.tar.xz CMakeLists.txt CMakePresets.json cmake ggml src common \
#       include tools vendor licenses LICENSE AUTHORS examples pocs scripts/ui-assets.cmake
#   (the other ggml backends may be left out); carried to the device with the run's `carry`.
# env: BIN (dir holding rocmforge; default build-gpu-carry, else build), OUT (logs; default
#      ./bench-out), MODELS_DIR (/tmp/rf-models), LLAMA_SRC (.carry/peer/llama-src.tar.xz),
#      LLAMA_DIR (/tmp/llama.cpp), CASES ("preset:type[:layers] ...": layers, where given, is
#      mkmodel's --layers), REPS (3), BATCHED (the cases that also get depths and batch sizes;
#      llama3-8b:q4_0), DEPTH (4096; empty: depth 0 only), NPL (1,8,32,64)
# llama.cpp is built on the machine from a fetched snapshot and never committed here. Built
# elsewhere instead (a build VM without a driver: configure as phase_peer does, with
# -DGGML_NATIVE=OFF -DGGML_AVX2=ON and -DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,DIR where DIR holds
# libcuda.so.1 -> the toolkit's stubs/libcuda.so), carry build/bin's executables and libraries and
# point LLAMA_DIR at the folder holding build/bin (a stripped sm_90 libggml-cuda is ~58 MB, ~38 MB
# under xz: with the tree, within a call's 64 MiB only in a call of its own).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-}
if [ -z "$BIN" ]; then
    if [ -x "$ROOT/build-gpu-carry/rocmforge" ]; then BIN=$ROOT/build-gpu-carry; else BIN=$ROOT/build; fi
fi
BIN=$(cd "$BIN" 2>/dev/null && pwd || echo "$BIN")
OUT=${OUT:-$ROOT/bench-out}
MODELS_DIR=${MODELS_DIR:-/tmp/rf-models}
LLAMA_SRC=${LLAMA_SRC:-$ROOT/.carry/peer/llama-src.tar.xz}
LLAMA_DIR=${LLAMA_DIR:-/tmp/llama.cpp}
CASES=${CASES:-"llama3-8b:f16 llama3-8b:q8_0 llama3-8b:q4_0 llama3-8b:q4_k_m llama3.2-1b:f16 llama3.2-1b:q4_0"}
REPS=${REPS:-3}
BATCHED=${BATCHED:-llama3-8b:q4_0}
DEPTH=${DEPTH-4096}   # set and empty: depth 0 only
NPL=${NPL:-1,8,32,64}
mkdir -p "$OUT" "$MODELS_DIR"
export LD_LIBRARY_PATH="$BIN:$LLAMA_DIR/build/bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# a case preset:type[:layers] -> its fields, its tag (preset-type[-Llayers]) and its file
case_fields() { IFS=: read -r C_PRESET C_TYPE C_LAYERS <<<"$1"; }
tag() { case_fields "$1"; echo "$C_PRESET-$C_TYPE${C_LAYERS:+-L$C_LAYERS}"; }
model_path() { echo "$MODELS_DIR/$(tag "$1").gguf"; }
is_batched() { case " $BATCHED " in *" $1 "*) return 0 ;; esac; return 1; }

phase_peer() {
    [ -s "$LLAMA_SRC" ] || { echo "peer: no snapshot tarball at $LLAMA_SRC"; return 1; }
    local t0
    t0=$(date +%s)
    rm -rf "$LLAMA_DIR" && mkdir -p "$LLAMA_DIR"
    tar -xJf "$LLAMA_SRC" -C "$LLAMA_DIR" || return 1
    # the snapshot's CMake includes scripts/ui-assets.cmake; carried beside the tarball when the
    # tarball was made without it
    local ui
    ui="$(dirname "$LLAMA_SRC")/ui-assets.cmake"
    [ -e "$LLAMA_DIR/scripts/ui-assets.cmake" ] || [ ! -e "$ui" ] || { mkdir -p "$LLAMA_DIR/scripts" && cp "$ui" "$LLAMA_DIR/scripts/"; }
    cmake -S "$LLAMA_DIR" -B "$LLAMA_DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$OUT/peer-cmake.log" 2>&1 || { tail -20 "$OUT/peer-cmake.log"; return 1; }
    cmake --build "$LLAMA_DIR/build" -j"$(nproc)" --target llama-bench llama-batched-bench llama-server \
        >"$OUT/peer-build.log" 2>&1 || { grep -m5 -i error "$OUT/peer-build.log"; return 1; }
    echo "peer: llama.cpp built in $(($(date +%s) - t0)) s ($LLAMA_DIR/build/bin)"
}

phase_models() {
    local c m t0
    for c in $CASES; do
        m=$(model_path "$c")
        [ -s "$m" ] && continue
        t0=$(date +%s)
        case_fields "$c"
        "$BIN/rocmforge" mkmodel --preset "$C_PRESET" --type "$C_TYPE" ${C_LAYERS:+--layers "$C_LAYERS"} \
            -o "$m.part" -q && mv "$m.part" "$m" ||
            { echo "mkmodel $c failed"; return 1; }
        echo "models: $c in $(($(date +%s) - t0)) s, $(du -h "$m" | cut -f1)"
    done
}

phase_bench() {
    local c m t extra peer=0
    [ -x "$LLAMA_DIR/build/bin/llama-bench" ] && peer=1
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >"$OUT/device.txt" 2>&1
    # a snapshot unpacked without .git reports no commit: say which one it was (LLAMA_COMMIT)
    [ $peer = 1 ] && echo "llama.cpp ${LLAMA_COMMIT:-d32676d77426540327835040d5d3279728f0b4c8} (unslothai/llama.cpp snapshot), CUDA sm_90, -fa 1, -ngl 99" >"$OUT/peer-version.txt"
    for c in $CASES; do
        m=$(model_path "$c")
        t=$(tag "$c")
        [ -s "$m" ] || { echo "bench: $m missing (run the models phase)"; continue; }
        extra=(-b 0)
        is_batched "$c" && extra=(-d "0${DEPTH:+,$DEPTH}" -b "$NPL")
        echo "bench: rocmforge $c"
        "$BIN/rocmforge" bench -m "$m" --device gpu -p 512 -n 128 -r "$REPS" "${extra[@]}" -o json \
            >"$OUT/rf-$t.json" 2>"$OUT/rf-$t.err" || { echo "  failed:"; tail -3 "$OUT/rf-$t.err"; }
        [ $peer = 1 ] || continue
        echo "bench: llama-bench $c"
        local d=()
        is_batched "$c" && [ -n "$DEPTH" ] && d=(-d "0,$DEPTH")
        "$LLAMA_DIR/build/bin/llama-bench" -m "$m" -ngl 99 -fa 1 -p 512 -n 128 -r "$REPS" "${d[@]}" -o json \
            >"$OUT/peer-$t.json" 2>"$OUT/peer-$t.err" || { echo "  failed:"; tail -3 "$OUT/peer-$t.err"; }
        if is_batched "$c"; then
            echo "bench: llama-batched-bench $c"
            # the context holds every sequence's 128 + 128 positions (at least the 20480 used before)
            local maxpl ctx
            maxpl=$(echo "$NPL" | tr ',' '\n' | sort -n | tail -1)
            ctx=$((maxpl * 256 > 20480 ? maxpl * 256 : 20480))
            "$LLAMA_DIR/build/bin/llama-batched-bench" -m "$m" -ngl 99 -fa 1 -c "$ctx" -b 2048 -ub 512 \
                -npp 128 -ntg 128 -npl "$NPL" --output-format jsonl >"$OUT/peer-batched-$t.jsonl" \
                2>"$OUT/peer-batched-$t.err" || { echo "  failed:"; tail -3 "$OUT/peer-batched-$t.err"; }
        fi
    done
    phase_table
}

phase_table() {
    python3 - "$OUT" "$CASES" "$BATCHED" <<'EOF'
import json, os, sys
out, cases, batched = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def tag(c):
    f = c.split(":") + ["", ""]
    return f"{f[0]}-{f[1]}" + (f"-L{f[2]}" if f[2] else "")
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
def peer_rows(t):
    d = load(f"{out}/peer-{t}.json") or []
    r = {}
    for x in d:
        n_p, n_g, dep = x.get("n_prompt", 0), x.get("n_gen", 0), x.get("n_depth", 0)
        k = (f"pp{n_p}" if n_p and not n_g else f"tg{n_g}") + (f" @ d{dep}" if dep else "")
        r[k] = x.get("avg_ts")
    return r
dev = open(f"{out}/device.txt").read().strip() if os.path.exists(f"{out}/device.txt") else "?"
ver = open(f"{out}/peer-version.txt").read().strip().replace("\n", "; ") if os.path.exists(f"{out}/peer-version.txt") else "no peer"
print(f"\ndevice: {dev}\nllama.cpp: {ver}")
# bytes a token: what one decode token read, GB/s over tok/s (the weights, of a MoE file only its
# k experts, and the KV cache at that depth)
print("\n| model | test | rocmforge tok/s | GB/s (of bw) | bytes a token | llama.cpp tok/s | ratio |")
print("|---|---|---:|---:|---:|---:|---:|")
for c in cases:
    t = tag(c)
    d = load(f"{out}/rf-{t}.json")
    pr = peer_rows(t)
    if not d:
        print(f"| {c} | - | failed | | | |")
        continue
    bw = d.get("read_bw_gbs", 0)
    for x in d["results"]:
        if x.get("sequences", 1) > 1 or " x " in x["test"]:
            continue
        p = pr.get(x["test"])
        gb = f"{x['gb_s']:.0f} ({100 * x['bw_frac']:.0f}%)" if x.get("gb_s") else "-"
        bt = f"{x['gb_s'] / x['tok_s']:.3f} GB" if x.get("gb_s") and x.get("tok_s") else "-"
        ratio = f"{x['tok_s'] / p:.2f}" if p else "-"
        ps = f"{p:.1f}" if p else "-"
        print(f"| {c} | {x['test']} | {x['tok_s']:.1f} ± {x['tok_s_sd']:.1f} | {gb} | {bt} | {ps} | {ratio} |")
def f1(x, fmt=".1f"):
    return "-" if x is None else format(x, fmt)
for bc in batched:
    t = tag(bc)
    d = load(f"{out}/rf-{t}.json")
    peer = {}
    if os.path.exists(f"{out}/peer-batched-{t}.jsonl"):
        for line in open(f"{out}/peer-batched-{t}.jsonl"):
            try:
                x = json.loads(line)
                peer[x["pl"]] = x["speed_tg"]
            except Exception:
                pass
    if d:
        # like with like: ours with all B sequences decoding (steady) beside llama-batched-bench's
        # S_TG (B sequences decoding in lockstep after every prompt); our aggregate over every decode
        # step (prompts streaming in first, sequences finishing one by one) is shown apart
        print(f"\nbatched generation, {bc}: tok/s with all B sequences decoding")
        print("| sequences | rocmforge steady tok/s | step p50 ms | p99 ms | llama-batched-bench S_TG | ratio | rocmforge all decode steps tok/s |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for x in d["results"]:
            if " x " not in x["test"]:
                continue
            s = x["sequences"]
            p = peer.get(s)
            st = x.get("tok_s")
            ratio = f"{st / p:.2f}" if p and st else "-"
            print(f"| {s} | {f1(st)} | {f1(x.get('ms_p50'), '.2f')} | {f1(x.get('ms_p99'), '.2f')} | {f1(p)} | {ratio} | "
                  f"{f1(x.get('tok_s_aggregate'))} |")
EOF
}

phases=("$@")
[ ${#phases[@]} = 0 ] && phases=(models bench)
for p in "${phases[@]}"; do
    case $p in
    peer) phase_peer ;;
    models) phase_models ;;
    bench) phase_bench ;;
    table) phase_table ;;
    *) echo "unknown phase '$p' (peer, models, bench, table)"; exit 2 ;;
    esac
done
