#!/usr/bin/env bash
# gpu-knob-ab.sh — an A/B of one RF_* knob on one model: `rocmforge bench` with each value in turn,
# the values alternating within each round so that both sides see the same machine drift, then one
# markdown table (tok/s of every round per value, and each value's median over the first's).
#   scripts/gpu-knob-ab.sh MODEL KNOB "VALUE..."   a value of `-` leaves the knob unset (its default)
#   env: BIN (dir holding rocmforge; default build-gpu-carry, else build), DEVICE (gpu), ROUNDS (2),
#        BATCH (bench -b: 0,8,32; 0 = the single-sequence tg only), N (tokens generated: 128),
#        PROMPT (the prompt of each batched sequence: 128), EXTRA (more bench arguments),
#        OUT (./knob-ab-out: one JSON per run and the table, table.md)
# Example: scripts/gpu-knob-ab.sh /tmp/q8b.gguf RF_GPU_W4A16_MIN "- 17 9"
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 3 ] || { sed -n 2,9p "$0"; exit 2; }
MODEL=$1 KNOB=$2 VALUES=$3
case $KNOB in RF_*) ;; *) echo "gpu-knob-ab: $KNOB is not an RF_* knob"; exit 2 ;; esac
BIN=${BIN:-}
if [ -z "$BIN" ]; then
    if [ -x "$ROOT/build-gpu-carry/rocmforge" ]; then BIN=$ROOT/build-gpu-carry; else BIN=$ROOT/build; fi
fi
[ -x "$BIN/rocmforge" ] || { echo "gpu-knob-ab: no rocmforge in $BIN"; exit 1; }
[ -s "$MODEL" ] || { echo "gpu-knob-ab: no model at $MODEL"; exit 1; }
DEVICE=${DEVICE:-gpu} ROUNDS=${ROUNDS:-2} BATCH=${BATCH:-0,8,32} N=${N:-128} PROMPT=${PROMPT:-128}
OUT=${OUT:-$ROOT/knob-ab-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for r in $(seq 1 "$ROUNDS"); do
    for v in $VALUES; do
        f="$OUT/v${v}-r$r.json"
        echo "gpu-knob-ab: round $r of $ROUNDS, $KNOB=$v"
        if [ "$v" = - ]; then knob=(-u "$KNOB"); else knob=("$KNOB=$v"); fi
        # shellcheck disable=SC2086 # EXTRA is a list of arguments
        env "${knob[@]}" "$BIN/rocmforge" bench -m "$MODEL" --device "$DEVICE" -p 0 -n "$N" -b "$BATCH" \
            --batch-prompt "$PROMPT" -r 1 -o json ${EXTRA:-} >"$f" 2>"$f.err" ||
            { echo "  failed:"; tail -3 "$f.err"; }
    done
done
python3 - "$OUT" "$KNOB" "$VALUES" "$ROUNDS" "$MODEL" <<'EOF' | tee "$OUT/table.md"
import json, os, statistics, sys
out, knob, values, rounds, model = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4]), sys.argv[5]
runs, tests, meta = {}, [], {}
for v in values:
    for r in range(1, rounds + 1):
        try:
            d = json.load(open(f"{out}/v{v}-r{r}.json"))
        except Exception:
            continue
        meta = meta or d
        for x in d.get("results", []):
            runs.setdefault((x["test"], v), []).append(x["tok_s"])
            if x["test"] not in tests:
                tests.append(x["test"])
name = lambda v: "unset" if v == "-" else v
print(f"\n{os.path.basename(model)} on {meta.get('device', '?')}, {meta.get('date', '?')}: tok/s of each round, {knob}")
print("| test | " + " | ".join(name(v) for v in values) + " | " + " | ".join(f"{name(v)} / {name(values[0])}" for v in values[1:]) + " |")
print("|---|" + "---:|" * (2 * len(values) - 1))
for t in tests:
    cells, ratios = [], []
    base = runs.get((t, values[0]))
    for v in values:
        xs = runs.get((t, v))
        cells.append(" / ".join(f"{x:,.1f}" for x in xs) if xs else "-")
        if v != values[0]:
            ratios.append(f"{statistics.median(xs) / statistics.median(base):.3f}" if xs and base else "-")
    print(f"| {t} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
EOF
