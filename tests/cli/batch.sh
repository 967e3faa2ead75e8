#!/usr/bin/env bash
# batch.sh — `rocmforge batch` from the outside: text and JSON-lines prompt files, text and jsonl
# output, chat messages, the aggregate line, every input error (exit code, and the line named),
# and that the batching changes nothing: each prompt's output is byte-identical at --parallel 1
# and 8, with a step budget that splits prompts into chunks, with a pool so small that
# sequences are preempted, and with the prefix cache off; greedy and seeded sampling alike, and
# equal to `rocmforge run` on the same prompt. With models/SmolLM2-135M-Instruct.Q4_1.gguf: 64
# different prompts at --parallel 64 against 64 separate `run`s, compared exactly.
# Under the sanitizer build (the binary holds __asan_init, or RF_TEST_QUICK=1 is set) the SmolLM2
# part runs 4 prompts of 8 tokens instead of 64 of 16: an -O0 ASan build makes ~4 tokens/s.
# Every run pins --device cpu: the default (auto) takes a GPU when one is present, where the
# kernels need not be batch-invariant.
# usage: bash batch.sh <rocmforge> <source-dir>
set -u
. "$2/tests/util/cli_common.sh" "$1" "$2"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to check the JSON output"; exit 77; }

B=("$RF" batch --device cpu)
R=("$RF" run --device cpu)
QUICK=${RF_TEST_QUICK:-0}
if [ "$QUICK" = 0 ] && command -v nm >/dev/null && nm "$RF" 2>/dev/null | grep -q __asan_init; then QUICK=1; fi

"$RF" mkmodel --preset tiny --type q8_0 -o "$T/tiny.gguf" >/dev/null 2>&1 || fail "mkmodel"
M=$T/tiny.gguf
"$RF" inspect "$M" | grep -q "tokenizer.chat_template" || fail "the tiny preset has no chat template"

# ---- the command line ----
"${B[@]}" --help >"$T/help" || fail "--help exited $?"
grep -q "usage: rocmforge batch" "$T/help" || fail "--help: $(cat "$T/help")"
"$RF" --help | grep -q "^  batch " || fail "batch is not in rocmforge's command list"
printf 'Once upon a time\n' >"$T/one.txt"
expect 2 "missing -f PROMPTS" -- "${B[@]}" -m "$M"
expect 2 "missing -m MODEL" -- "${B[@]}" -f "$T/one.txt"
expect 2 "unknown option '--bogus'" -- "${B[@]}" -m "$M" -f "$T/one.txt" --bogus
expect 2 "unknown option '-p'" -- "${B[@]}" -m "$M" -f "$T/one.txt" -p hi
expect 2 "'xml' is not one of text, jsonl" -- "${B[@]}" -m "$M" -f "$T/one.txt" -o xml
expect 2 "option --parallel: '0' must be an integer in [1, 4096]" -- "${B[@]}" -m "$M" -f "$T/one.txt" --parallel 0
expect 2 "must be >= 0 (got -5)" -- "${B[@]}" -m "$M" -f "$T/one.txt" -n -5
expect 2 "is not a non-negative integer" -- "${B[@]}" -m "$M" -f "$T/one.txt" --seed 18446744073709551616
# seeds are 64-bit end to end (no double on the way): 2^53 + 1 is not 2^53, 2^64 - 1 is taken,
# and batch and run draw the same text from the same seed
for S in 9007199254740992 9007199254740993 18446744073709551615; do
    "${B[@]}" -m "$M" -f "$T/one.txt" -n 24 --temp 2 --top-k 0 --top-p 1 --min-p 0 --seed $S -o jsonl \
        >"$T/seed$S.out" 2>"$T/seed.err" || fail "--seed $S: $(cat "$T/seed.err")"
    "${R[@]}" -m "$M" -p "Once upon a time" -n 24 --temp 2 --top-k 0 --top-p 1 --min-p 0 --seed $S --no-timing \
        >"$T/seedrun$S" 2>/dev/null || fail "run --seed $S"
    python3 -c 'import json,sys; o=json.loads(open(sys.argv[1]).read()); t=open(sys.argv[2],"rb").read().decode("utf-8","replace"); sys.exit(o["text"] != t)' \
        "$T/seed$S.out" "$T/seedrun$S" || fail "--seed $S: batch and run differ"
done
cmp -s "$T/seed9007199254740992.out" "$T/seed9007199254740993.out" && fail "--seed 2^53 + 1 drew what 2^53 drew"
expect 2 "'fp8' is not one of f32, f16, q8_0" -- "${B[@]}" -m "$M" -f "$T/one.txt" --kv-type fp8
expect 1 "/nonexistent.gguf" -- "${B[@]}" -m /nonexistent.gguf -f "$T/one.txt"
expect 1 "cannot hold one sequence" -- "${B[@]}" -m "$M" -f "$T/one.txt" -c 64 --kv-blocks 3
# --device gpu: the same error as run's (from the model load), when run has one
"$RF" run -m "$M" -p hi -n 1 --device gpu >/dev/null 2>"$T/gpu_run"
if [ $? = 1 ]; then
    expect 1 "$(grep '^error: ' "$T/gpu_run" | head -1 | sed 's/^error: //')" -- "$RF" batch -m "$M" -f "$T/one.txt" --device gpu
fi

# ---- input errors, before anything runs: exit code and FILE:LINE ----
expect 1 "cannot read prompt file '$T/missing.txt'" -- "${B[@]}" -m "$M" -f "$T/missing.txt"
: >"$T/empty.txt"
expect 2 "holds no prompts" -- "${B[@]}" -m "$M" -f "$T/empty.txt"
printf '\n   \n\t\n' >"$T/blank.txt"
expect 2 "holds no prompts" -- "${B[@]}" -m "$M" -f "$T/blank.txt"
bad() { # bad LINE-TEXT PATTERN: the JSON line sits on line 3 after a good line and a blank one
    printf '{"prompt": "fine"}\n\n%s\n{"prompt": "also fine"}\n' "$1" >"$T/bad.jsonl"
    expect 1 "$T/bad.jsonl:3: $2" -- "${B[@]}" -m "$M" -f "$T/bad.jsonl"
    [ ! -s "$T/out" ] || fail "output before the input was checked: $(cat "$T/out")"
}
bad '{"messages": "hi"}' "'messages' must be an array"
bad '{"messages": []}' "'messages' is empty"
bad '{"messages": [{"role": "user"}]}' "'messages'[0] needs a string 'content'"
bad '{"messages": [{"role": "user", "content": "a"}, {"content": "b"}]}' "'messages'[1] needs a string 'role'"
bad '{"messages": ["hi"]}' "'messages'[0] must be an object"
bad '{"prompt": 7}' "'prompt' must be a string"
bad '{"prompt": ""}' "'prompt' is empty"
bad '{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}' "has both 'prompt' and 'messages'"
bad '{"text": "a"}' "needs 'prompt' (a string) or 'messages' (an array)"
bad '{"prompt": "unterminated}' "invalid JSON"
bad 'plain text in a JSON-lines file' "invalid JSON"
bad '["prompt"]' "expected a JSON object"
bad '{"prompt": "nul \u0000 byte"}' "a string holds \\u0000"
# a prompt longer than the context: refused at submit, the line and both numbers named
{ echo "short one"; echo; echo "short two"; printf 'word %.0s' $(seq 1 200); echo; } >"$T/long.txt"
expect 1 "$T/long.txt:4: the prompt has" -- "${B[@]}" -m "$M" -f "$T/long.txt" -c 64
grep -qE "prompt has (more than )?[0-9]+ tokens but the context holds 64" "$T/err" || fail "context message: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "output before every prompt was accepted"

# ---- text input, both outputs ----
# blank lines are skipped; a literal \n is two characters of its line, not a line break
printf 'Once upon a time\n\nThe quick brown fox\n   \nHello\\nworld, a literal backslash-n\nA\n' >"$T/p.txt"
"${B[@]}" -m "$M" -f "$T/p.txt" -n 12 >"$T/text.out" 2>"$T/text.err" || fail "batch text: $(cat "$T/text.err")"
[ "$(grep -c '^### \[' "$T/text.out")" = 4 ] || fail "expected 4 results: $(cat "$T/text.out")"
grep -qE '^### \[[0-3]\] n_prompt=[0-9]+ n_gen=12 finish=length$' "$T/text.out" || fail "header: $(head -1 "$T/text.out")"
AGG='^batch: [0-9]+ prompts \| prompt: [0-9]+ tokens in [0-9.]+ ms \([0-9.]+ tok/s\) \| generation: [0-9]+ tokens in [0-9.]+ ms \([0-9.]+ tok/s\) \| total: [0-9]+ tokens in [0-9.]+ ms \([0-9.]+ tok/s\) \| steps [0-9]+, preemptions [0-9]+, prefix-cache hits [0-9]+ tokens, max running [0-9]+$'
tail -1 "$T/text.err" | grep -qE "$AGG" || fail "no aggregate line last: $(cat "$T/text.err")"
tail -1 "$T/text.err" | grep -qE "^batch: 4 prompts .* generation: 48 tokens " || fail "aggregate counts: $(tail -1 "$T/text.err")"
"${B[@]}" -m "$M" -f "$T/p.txt" -n 12 -o jsonl >"$T/p.jsonl.out" 2>"$T/p.jsonl.err" || fail "batch jsonl: $(cat "$T/p.jsonl.err")"
# --no-timing drops the aggregate line; -f - reads stdin
"${B[@]}" -m "$M" -f - -n 12 -o jsonl --no-timing <"$T/p.txt" >"$T/stdin.out" 2>"$T/stdin.err" || fail "batch -f -"
cmp -s "$T/p.jsonl.out" "$T/stdin.out" || fail "-f - gave other output"
! grep -q "^batch: " "$T/stdin.err" || fail "--no-timing printed the aggregate"

# check_jsonl OUT PROMPTS N: one object per prompt with the documented keys, indices a
# permutation, each prompt echoed, n_gen <= N, and (text output given) the same texts
check_jsonl() {
    python3 - "$@" <<'PYEOF' || fail "jsonl check of $1"
import json, re, sys
out, pfile, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
text_out = sys.argv[4] if len(sys.argv) > 4 else None
raw = open(pfile, "rb").read().decode("utf-8", "replace")  # as batch echoes invalid bytes
if raw.lstrip().startswith("{"):
    prompts = [json.loads(l) for l in raw.split("\n") if l.strip()]
    prompts = [p["prompt"] if "prompt" in p else p["messages"] for p in prompts]
else:
    prompts = [l.rstrip("\r") for l in raw.split("\n") if l.strip()]
recs = []
for ln in open(out, "rb").read().decode("utf-8").splitlines():
    o = json.loads(ln)
    assert list(o) == ["index", "prompt", "text", "n_prompt", "n_gen", "finish_reason"], list(o)
    assert o["finish_reason"] in ("stop", "length", "eos", "context", "cancelled"), o
    assert isinstance(o["n_prompt"], int) and o["n_prompt"] > 0, o
    assert 0 <= o["n_gen"] <= n, o
    assert o["prompt"] == prompts[o["index"]], (o["prompt"], prompts[o["index"]])
    recs.append(o)
assert sorted(r["index"] for r in recs) == list(range(len(prompts))), [r["index"] for r in recs]
if text_out:  # the text output, in the same completion order, holds the same results
    want = "".join("### [%d] n_prompt=%d n_gen=%d finish=%s\n%s\n\n"
                   % (r["index"], r["n_prompt"], r["n_gen"], r["finish_reason"], r["text"]) for r in recs)
    got = open(text_out, "rb").read().decode("utf-8", "replace")
    assert got == want, (got[:400], want[:400])
PYEOF
}
check_jsonl "$T/p.jsonl.out" "$T/p.txt" 12 "$T/text.out"
grep -qF '"prompt":"Hello\\nworld, a literal backslash-n"' "$T/p.jsonl.out" || fail "literal \\n prompt: $(cat "$T/p.jsonl.out")"

# text prompts are bytes: invalid UTF-8 is tokenized as it is, and echoed in the jsonl "prompt"
# with U+FFFD for each maximal invalid subpart (Python's errors="replace" agrees)
printf 'caf\xe9 in latin-1\ncut \xe2\x82 short, a lone \x80 and \xff\nsurrogate \xed\xa0\x80 and too high \xf4\x90\x80\x80 end\nfine \xf0\x9f\x98\x80\n' >"$T/utf8.txt"
"${B[@]}" -m "$M" -f "$T/utf8.txt" -n 4 -o jsonl >"$T/utf8.out" 2>"$T/utf8.err" || fail "invalid UTF-8 prompts: $(cat "$T/utf8.err")"
check_jsonl "$T/utf8.out" "$T/utf8.txt" 4
[ "$(grep -o $'\xef\xbf\xbd' "$T/utf8.out" | wc -l)" -ge 8 ] || fail "no U+FFFD in the echoed prompts: $(cat "$T/utf8.out")"

# per_index OUT: "index<TAB>finish<TAB>n_gen<TAB>text as JSON" lines sorted by index
per_index() {
    python3 -c '
import json, sys
for o in sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda o: o["index"]):
    print(o["index"], o["finish_reason"], o["n_gen"], json.dumps(o["text"]), sep="\t")' "$1"
}

# same_as_run MODEL OUT PROMPTS N [run options...]: each text equals `run -p PROMPT` (run's raw
# bytes decoded as batch's jsonl writes them: invalid UTF-8 -> U+FFFD)
same_as_run() {
    local model=$1 out=$2 pfile=$3 n=$4
    shift 4
    python3 - "$RF" "$model" "$out" "$pfile" "$n" "$@" <<'PYEOF' || fail "batch differs from run ($out)"
import json, subprocess, sys
rf, model, out, pfile, n = sys.argv[1:6]
extra = sys.argv[6:]
prompts = [l.rstrip("\r") for l in open(pfile, encoding="utf-8").read().split("\n") if l.strip()]
recs = {o["index"]: o for o in map(json.loads, open(out, encoding="utf-8"))}
bad = 0
for i, p in enumerate(prompts):
    r = subprocess.run([rf, "run", "--device", "cpu", "-m", model, "-p", p, "-n", n, "--no-timing"] + extra,
                       capture_output=True)
    t = r.stdout.decode("utf-8", "replace")
    if r.returncode or t != recs[i]["text"]:
        bad += 1
        print("prompt %d %r:\n  batch %r\n  run   %r %s" % (i, p, recs[i]["text"], t, r.stderr.decode()[-200:]))
print("%d of %d prompts equal to run" % (len(prompts) - bad, len(prompts)))
sys.exit(1 if bad else 0)
PYEOF
}
same_as_run "$M" "$T/p.jsonl.out" "$T/p.txt" 12

# ---- batching changes nothing: per-index outputs across parallelism, chunking, preemption ----
{
    echo "Once upon a time"
    echo "The quick brown fox jumps over the lazy dog"
    echo "A"
    echo "In a hole in the ground there lived a hobbit. Not a nasty, dirty, wet hole"
    echo "It was the best of times, it was the worst of times"
    echo "Call me Ishmael."
    echo "Tokens <|begin_of_text|> with a special one inside"
    echo "Numbers 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"
    echo "The quick brown fox jumps over the lazy dog"
    echo "Short"
    echo "All happy families are alike; each unhappy family is unhappy in its own way."
    echo "Hello, world"
} >"$T/v.txt"
variants() { # variants TAG [sampling options...]: the same prompts under several engine shapes
    local tag=$1
    shift
    local base=(-m "$M" -f "$T/v.txt" -n 24 -c 64 -o jsonl "$@")
    "${B[@]}" "${base[@]}" --parallel 1 >"$T/$tag.p1" 2>"$T/$tag.p1.err" || fail "$tag parallel 1: $(cat "$T/$tag.p1.err")"
    check_jsonl "$T/$tag.p1" "$T/v.txt" 24
    grep -qE "max running 1$" "$T/$tag.p1.err" || fail "$tag: parallel 1 ran more: $(tail -1 "$T/$tag.p1.err")"
    per_index "$T/$tag.p1" >"$T/$tag.ref"
    local shape
    for shape in "--parallel 8" "--parallel 8 -b 8" "--parallel 8 --kv-blocks 8" "--parallel 8 --no-prefix-cache --block-size 4" \
                 "--parallel 3 -b 5 --kv-type f16"; do
        # shellcheck disable=SC2086
        "${B[@]}" "${base[@]}" $shape >"$T/$tag.pn" 2>"$T/$tag.pn.err" || fail "$tag $shape: $(cat "$T/$tag.pn.err")"
        check_jsonl "$T/$tag.pn" "$T/v.txt" 24
        per_index "$T/$tag.pn" >"$T/$tag.got"
        cmp -s "$T/$tag.ref" "$T/$tag.got" || fail "$tag: '$shape' differs from --parallel 1: $(diff "$T/$tag.ref" "$T/$tag.got" | head -6)"
        tail -1 "$T/$tag.pn.err" | grep -qE "$AGG" || fail "$tag $shape aggregate: $(tail -1 "$T/$tag.pn.err")"
        case $shape in
        *kv-blocks*) grep -qE "preemptions [1-9][0-9]*," "$T/$tag.pn.err" || fail "$tag: a pool of 8 blocks preempted nothing: $(tail -1 "$T/$tag.pn.err")" ;;
        "--parallel 8") grep -qE "max running ([2-8])$" "$T/$tag.pn.err" || fail "$tag: --parallel 8 ran one at a time: $(tail -1 "$T/$tag.pn.err")"
                        grep -qE "prefix-cache hits [1-9][0-9]* tokens" "$T/$tag.pn.err" || fail "$tag: the repeated prompt hit no cache: $(tail -1 "$T/$tag.pn.err")" ;;
        *no-prefix-cache*) grep -qE "prefix-cache hits 0 tokens" "$T/$tag.pn.err" || fail "$tag: cache off but hits: $(tail -1 "$T/$tag.pn.err")" ;;
        esac
    done
}
variants greedy
variants sampled --temp 0.8 --seed 5
cmp -s "$T/greedy.ref" "$T/sampled.ref" && fail "--temp 0.8 gave the greedy output"
same_as_run "$M" "$T/greedy.p1" "$T/v.txt" 24 -c 64
same_as_run "$M" "$T/sampled.p1" "$T/v.txt" 24 -c 64 --temp 0.8 --seed 5

# stop strings: cut a greedy output in its middle and stop there
STOP=$(python3 -c '
import json, sys
for o in map(json.loads, open(sys.argv[1])):
    t = o["text"]
    if o["index"] == 0 and len(t) >= 12 and "\ufffd" not in t[4:10]: print(t[4:10]); break' "$T/greedy.p1")
if [ -n "$STOP" ]; then
    "${B[@]}" -m "$M" -f "$T/v.txt" -n 24 -c 64 -o jsonl --parallel 4 --stop "$STOP" >"$T/stop.out" 2>/dev/null || fail "--stop"
    python3 - "$T/stop.out" "$T/greedy.p1" "$STOP" <<'PYEOF' || fail "--stop result"
import json, sys
got = {o["index"]: o for o in map(json.loads, open(sys.argv[1]))}
ref = {o["index"]: o for o in map(json.loads, open(sys.argv[2]))}
stop = sys.argv[3]
for i, r in ref.items():
    t = r["text"]
    if stop in t:
        assert got[i]["finish_reason"] == "stop" and got[i]["text"] == t[: t.index(stop)], (i, got[i], t)
    else:
        assert got[i]["text"] == t, (i, got[i], t)
PYEOF
fi

# ---- chat messages ----
python3 - "$T/chat.jsonl" <<'PYEOF'
import json, sys
rows = [{"messages": [{"role": "user", "content": "Hello there"}]},
        {"prompt": "A plain prompt among messages"},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why is the sky blue?"}], "id": "ignored"},
        {"messages": [{"role": "user", "content": "Unicode: caf\u00e9 \u65e5\u672c \U0001F600 and \"quotes\""}]}]
with open(sys.argv[1], "w") as f:
    f.write("\n")  # the first non-blank character decides the format
    for r in rows: f.write(json.dumps(r, ensure_ascii=False) + "\n")
PYEOF
"${B[@]}" -m "$M" -f "$T/chat.jsonl" -n 10 -o jsonl --parallel 2 >"$T/chat.out" 2>"$T/chat.err" || fail "chat batch: $(cat "$T/chat.err")"
check_jsonl "$T/chat.out" "$T/chat.jsonl" 10
# the same as run --chat (the model's template, the assistant's turn opened)
"${R[@]}" -m "$M" --chat -p "Hello there" -n 10 --no-timing >"$T/c0" 2>/dev/null || fail "run --chat"
"${R[@]}" -m "$M" --chat -s "Be brief." -p "Why is the sky blue?" -n 10 --no-timing >"$T/c2" 2>/dev/null || fail "run --chat -s"
"${R[@]}" -m "$M" -p "A plain prompt among messages" -n 10 --no-timing >"$T/c1" 2>/dev/null || fail "run"
python3 - "$T/chat.out" "$T/c0" "$T/c1" "$T/c2" <<'PYEOF' || fail "chat output differs from run --chat"
import json, sys
recs = {o["index"]: o for o in map(json.loads, open(sys.argv[1]))}
for i in range(3):
    want = open(sys.argv[2 + i], "rb").read().decode("utf-8", "replace")
    assert recs[i]["text"] == want, (i, recs[i]["text"], want)
assert recs[0]["n_prompt"] > 5, recs[0]  # the template's tokens around "Hello there"
PYEOF

# ---- a real model: 64 prompts at once, each equal to its own `run` ----
SMOL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$SMOL" ]; then
    NP=64 NG=16
    [ "$QUICK" = 1 ] && NP=4 NG=8
    python3 - "$NP" >"$T/smol.txt" <<'PYEOF'
import sys
topics = ["the ocean", "volcanoes", "the history of Rome", "quantum computers", "honey bees", "the Moon landing",
    "jazz music", "photosynthesis", "the French Revolution", "black holes", "coffee", "the Great Wall of China",
    "electric cars", "the human heart", "chess", "the Amazon rainforest", "ancient Egypt", "machine learning",
    "penguins", "the printing press", "mountain climbing", "the stock market", "dinosaurs", "the Olympic Games",
    "bread baking", "the internet", "Mars", "classical music", "earthquakes", "the Renaissance", "tea ceremonies",
    "sharks", "solar power", "the Roman Empire", "origami", "glaciers", "the violin", "the Industrial Revolution",
    "butterflies", "deserts", "the Eiffel Tower", "vaccines", "hurricanes", "Shakespeare", "the periodic table",
    "rainbows", "wolves", "the Silk Road", "coral reefs", "the telephone", "pyramids", "comets", "cheese making",
    "the Arctic", "bicycles", "gravity", "the Vikings", "elephants", "the piano", "tornadoes", "libraries",
    "the Sahara", "owls", "lighthouses"]
forms = ["Tell me about {}.", "Write one sentence about {}:", "{} is", "Here is a short story about {}. Once upon a time,",
    "The most interesting fact about {} is that", "Q: What do you know about {}? A:", "Explain {} to a child in simple words.",
    "In the year 1900, people who studied {} believed that the world was very different from what we know today, because"]
for i, t in enumerate(topics[: int(sys.argv[1])]):
    s = forms[i % len(forms)].format(t)
    if i % 5 == 0:
        s += " Please give plenty of detail and keep the answer accurate and well organized for a general audience."
    print(s[0].upper() + s[1:])
PYEOF
    # --ctx 512: the pool is allocated up front, and 64 sequences of the default 4096 positions
    # would take 5.8 GiB for prompts of at most 50 tokens
    "${B[@]}" -m "$SMOL" -f "$T/smol.txt" --parallel 64 -n $NG --ctx 512 -o jsonl >"$T/smol.out" 2>"$T/smol.err" ||
        fail "SmolLM2 batch: $(cat "$T/smol.err")"
    tail -1 "$T/smol.err" | grep -qE "$AGG" || fail "SmolLM2 aggregate: $(cat "$T/smol.err")"
    echo "SmolLM2 --parallel 64: $(tail -1 "$T/smol.err")"
    check_jsonl "$T/smol.out" "$T/smol.txt" $NG
    same_as_run "$SMOL" "$T/smol.out" "$T/smol.txt" $NG
else
    echo "note: models/SmolLM2-135M-Instruct.Q4_1.gguf absent: real-model part skipped"
fi
echo "PASS"
