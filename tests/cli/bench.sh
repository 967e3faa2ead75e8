#!/usr/bin/env bash
# bench.sh — `rocmforge bench` on the CPU with a tiny model: every test kind appears (ppN, tgN,
# tgN @ dD, batched), -o json is valid JSON with the fields a reader needs (batched: the steady
# state and the aggregate), -o csv has one row per test, a batched test without a step of every
# sequence decoding reports no steady figure, --plot writes a PNG (when gnuplot is installed),
# -j / --grammar run the generation tests constrained (early document ends reported), and bad
# options fail with a message.
# usage: bash bench.sh <rocmforge> <source-dir>
set -u
. "$2/tests/util/cli_common.sh" "$1" "$2"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the JSON output"; exit 77; }

"$RF" mkmodel --preset tiny --type q8_0 -o "$T/tiny.gguf" >/dev/null 2>&1 || fail "mkmodel"
B=("$RF" bench -m "$T/tiny.gguf" --device cpu -t 1 -p 32 -n 8 -d 0,16 -b 1,4 --batch-prompt 8 -r 2)

"${B[@]}" >"$T/md" 2>"$T/err" || fail "bench md: $(cat "$T/err")"
for row in "pp32" "tg8" "tg8 @ d16" "tg8 x 4 seqs"; do
    grep -qF "$row" "$T/md" || fail "markdown lacks a '$row' row: $(cat "$T/md")"
done
grep -q "GB/s" "$T/md" || fail "markdown lacks the bandwidth column"
grep -q "all decode steps t/s" "$T/md" || fail "markdown lacks the aggregate column: $(cat "$T/md")"
grep -q "decode steps had all 4 sequences" "$T/md" || fail "markdown lacks the batched steps line: $(cat "$T/md")"

"${B[@]}" -o json >"$T/json" 2>"$T/err" || fail "bench json: $(cat "$T/err")"
python3 - "$T/json" <<'EOF' || fail "bench json does not hold what it should: $(cat "$T/json")"
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"] if isinstance(d, dict) else d
assert len(rows) >= 5, rows
for r in rows:
    assert r["tok_s"] > 0, r
    assert r["tok_s_sd"] >= 0, r
    if " x " in r["test"]:
        # the steady state (every sequence decoding) and the aggregate over every decode step
        assert r["tok_s_aggregate"] > 0 and r["tok_s_aggregate_sd"] >= 0, r
        assert 0 < r["steady_steps"] <= r["decode_steps"], r
        assert r["max_seqs_per_step"] == r["sequences"], r
        assert r["ms_p50"] > 0 and r["ms_p99"] >= r["ms_p50"], r
EOF

"${B[@]}" -o csv >"$T/csv" 2>"$T/err" || fail "bench csv: $(cat "$T/err")"
[ "$(grep -c . "$T/csv")" -ge 6 ] || fail "csv should hold a header and 5 rows: $(cat "$T/csv")"
head -1 "$T/csv" | grep -q ",tok_s_aggregate,tok_s_aggregate_sd,steady_steps,decode_steps$" || fail "csv header: $(head -1 "$T/csv")"
[ "$(awk -F, '{print NF}' "$T/csv" | sort -u | wc -l)" = 1 ] || fail "csv rows of different widths: $(cat "$T/csv")"

# prompts longer than a step's prompt room: the last prompt is in only after the first sequence
# finished, so no step has every sequence decoding: the steady figure is absent, not made up
"$RF" bench -m "$T/tiny.gguf" --device cpu -t 1 -p 0 -n 2 -b 4 --batch-prompt 600 -r 1 -o json >"$T/ns" 2>"$T/err" ||
    fail "bench without a steady state: $(cat "$T/err")"
python3 - "$T/ns" <<'EOF' || fail "bench without a steady state: $(cat "$T/ns")"
import json, sys
r = [x for x in json.load(open(sys.argv[1]))["results"] if " x " in x["test"]][0]
assert r["tok_s"] is None and r["ms_p50"] is None and r["steady_steps"] == 0, r
assert r["tok_s_aggregate"] > 0 and r["max_seqs_per_step"] < 4, r
EOF

if command -v gnuplot >/dev/null; then
    "${B[@]}" --plot "$T/p.png" >/dev/null 2>"$T/err" || fail "bench --plot: $(cat "$T/err")"
    head -c 8 "$T/p.png" | od -An -tx1 | grep -q "89 50 4e 47" || fail "--plot did not write a PNG"
else
    echo "note: gnuplot not installed, --plot not checked"
fi

# under a grammar (constrained decoding's cost): the tgN and batched tests carry it and say how
# many sequences completed the document early; a grammar with no end (an array of strings that
# never closes: the measurement's grammar, docs/PERFORMANCE.md) completes none; ppN is unconstrained
S='{"type":"object","properties":{"items":{"type":"array","items":{"type":"string"}}},"required":["items"]}'
G='root ::= "[" items
items ::= str ", " items
str ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] )* "\""'
"${B[@]}" -d 0 -j "$S" -o json >"$T/gj" 2>"$T/err" || fail "bench -j: $(cat "$T/err")"
"${B[@]}" -d 0 --grammar "$G" -o json >"$T/gg" 2>"$T/err" || fail "bench --grammar: $(cat "$T/err")"
"${B[@]}" -d 0 --grammar "$G" >"$T/gm" 2>"$T/err" || fail "bench --grammar md: $(cat "$T/err")"
grep -q "^constrained: the tgN and batched tests generate under the GBNF grammar root ::= " "$T/gm" ||
    fail "markdown does not name the grammar: $(cat "$T/gm")"
python3 - "$T/gj" "$T/gg" <<'EOF' || fail "bench under a grammar: $(cat "$T/gj" "$T/gg")"
import json, sys
j, g = (json.load(open(f)) for f in sys.argv[1:3])
assert j["grammar"] == "json_schema" and g["grammar"] == "gbnf", (j["grammar"], g["grammar"])
for d, endless in ((j, False), (g, True)):
    for r in d["results"]:
        if r["test"].startswith("pp"):
            assert "grammar_ended" not in r, r
            continue
        assert r["tok_s"] > 0 and 0 <= r["grammar_ended"] <= r["sequences"], r
        assert (r["grammar_ended"] > 0) == (r["grammar_first_end"] > 0), r
        if endless:
            assert r["grammar_ended"] == 0, r
        if " x " in r["test"]:
            assert r["max_seqs_per_step"] == r["sequences"] and r["steady_steps"] > 0, r
EOF
"$RF" bench -m "$T/tiny.gguf" -j '{"type":' >/dev/null 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "JSON schema" "$T/err" || fail "bench: a bad schema: rc $rc, $(cat "$T/err")"
"$RF" bench -m "$T/tiny.gguf" -j '{}' --grammar 'root ::= "a"' >/dev/null 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "one of --grammar" "$T/err" || fail "bench: two constraints: rc $rc, $(cat "$T/err")"

"$RF" bench -m "$T/tiny.gguf" -o yaml >/dev/null 2>"$T/err" && fail "-o yaml accepted"
grep -q "yaml" "$T/err" || fail "-o yaml: no message naming it"
"$RF" bench -m "$T/none.gguf" >/dev/null 2>"$T/err" && fail "a missing model accepted"
"$RF" bench -m "$T/tiny.gguf" -r 0 >/dev/null 2>"$T/err" && fail "-r 0 accepted"
echo "bench.sh: all checks passed"
