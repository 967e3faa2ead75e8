#!/usr/bin/env bash
# mkmodel_gguf_py.sh — `rocmforge mkmodel` files read by an independent GGUF reader (the gguf
# Python package): tensors (names, types, shapes) match `rocmforge inspect --json` and
# `mkmodel --dry-run`, metadata is consistent (vocab == tokens == embedding rows, merges valid),
# every tensor dequantizes to finite values of the intended scale; CLI determinism and errors.
# usage: bash mkmodel_gguf_py.sh <rocmforge> <source-dir>     (exit 77 = skipped)
set -u
RF=${1:?rocmforge binary}
SRC=${2:?source dir}
PY=${RF_PYTHON:-$SRC/.venv/bin/python}
if ! [ -x "$PY" ] || ! "$PY" -c 'import gguf, numpy' 2>/dev/null; then
    echo "skip: no python with the gguf package at $PY (run scripts/setup.sh)"
    exit 77
fi
T=$(mktemp -d /tmp/rf_mkmodel_cli.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- CLI behaviour ----
"$RF" mkmodel --help | grep -q -- "--preset" || fail "--help"
"$RF" mkmodel --list | grep -q "qwen2.5-7b" || fail "--list"
"$RF" mkmodel --preset nope -o "$T/x.gguf" 2>"$T/err"; rc=$?
[ $rc -ne 0 ] && grep -q "^error: .*unknown preset 'nope'" "$T/err" || fail "unknown preset: rc $rc $(cat "$T/err")"
[ ! -e "$T/x.gguf" ] || fail "a failed run left a file"
"$RF" mkmodel --preset tiny 2>/dev/null; [ $? -eq 2 ] || fail "missing -o should exit 2"
"$RF" mkmodel --preset tiny --layers 0 -o "$T/x.gguf" 2>/dev/null; [ $? -eq 2 ] || fail "--layers 0 should exit 2"

# ---- determinism through the CLI ----
"$RF" mkmodel --preset tiny --type q4_k_m --seed 42 -q -o "$T/a.gguf" || fail "write a"
"$RF" mkmodel --preset tiny --type q4_k_m --seed 42 -q -o "$T/b.gguf" || fail "write b"
"$RF" mkmodel --preset tiny --type q4_k_m --seed 43 -q -o "$T/c.gguf" || fail "write c"
cmp -s "$T/a.gguf" "$T/b.gguf" || fail "same seed, different bytes"
cmp -s "$T/a.gguf" "$T/c.gguf" && fail "different seed, same bytes"

# ---- files checked by gguf-py ----
check() { # preset type [extra args...]
    local preset=$1 type=$2; shift 2
    local f="$T/$preset-$type.gguf"
    "$RF" mkmodel --preset "$preset" --type "$type" --seed 7 -q "$@" -o "$f" || fail "write $preset $type"
    "$RF" mkmodel --preset "$preset" --type "$type" "$@" --dry-run > "$f.plan" || fail "dry-run $preset $type"
    local insp="$f.inspect.json"
    if ! "$RF" inspect "$f" --json > "$insp" 2>/dev/null; then
        echo "note: rocmforge inspect --json unavailable; comparing with --dry-run only"
        rm -f "$insp"
    fi
    "$PY" - "$f" "$f.plan" "$insp" <<'EOF' || fail "gguf-py check of $preset $type"
import json, os, sys
import numpy as np
import gguf
from gguf.quants import dequantize

path, plan_path, insp_path = sys.argv[1:4]
r = gguf.GGUFReader(path)

def field(key):
    f = r.fields.get(key)
    if f is None:
        return None
    t = f.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[-1]).decode()
    if t == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode() for i in f.data]
        return [f.parts[i][0] for i in f.data]
    return f.parts[-1][0]

tensors = [(t.name, t.tensor_type.name.lower(), [int(x) for x in t.shape]) for t in r.tensors]

# 1. the dry-run plan (our planner) and the file (our writer) agree, read by an independent reader
plan = []
for line in open(plan_path):
    parts = line.split()
    if len(parts) >= 4 and not line.startswith(tuple("0123456789")):
        shape = [int(x) for x in " ".join(parts[2:-1]).split(" x ")]
        plan.append((parts[0], parts[1].lower(), shape))
assert plan == tensors, f"plan vs file:\n{plan[:5]}\n{tensors[:5]}"

# 2. rocmforge inspect --json agrees with gguf-py
if insp_path and os.path.exists(insp_path):
    d = json.load(open(insp_path))
    it = [(t["name"], t["type"].lower(), list(t["shape"])) for t in d["tensors"]]
    assert it == tensors, "inspect --json vs gguf-py tensors differ"
    meta = {m["key"]: m for m in d["metadata"]}
    for k in r.fields:
        if k.startswith("GGUF."):
            continue
        assert k in meta, f"inspect misses key {k}"

# 3. metadata consistency
arch = field("general.architecture")
tokens = field("tokenizer.ggml.tokens")
types = field("tokenizer.ggml.token_type")
emb = [t for t in r.tensors if t.name == "token_embd.weight"][0]
n_vocab = len(tokens)
assert len(types) == n_vocab
assert int(emb.shape[1]) == n_vocab, (emb.shape, n_vocab)
assert len(set(tokens)) == n_vocab, "duplicate tokens"
if field(f"{arch}.vocab_size") is not None:
    assert field(f"{arch}.vocab_size") == n_vocab
n_layer = field(f"{arch}.block_count")
assert sum(1 for t in tensors if t[0].endswith("attn_q.weight")) == n_layer
for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
    assert 0 <= field(key) < n_vocab
assert types[field("tokenizer.ggml.eos_token_id")] == 3
assert len(field("tokenizer.chat_template")) > 50
model = field("tokenizer.ggml.model")
if model == "gpt2":
    vocab = set(tokens)
    merges = field("tokenizer.ggml.merges")
    assert len(merges) > n_vocab // 2
    for m in merges:
        a, b = m.split(" ")
        assert a in vocab and b in vocab and a + b in vocab, m
    assert field("tokenizer.ggml.pre") in ("llama-bpe", "qwen2", "smollm")
else:
    assert model == "llama"
    scores = field("tokenizer.ggml.scores")
    assert len(scores) == n_vocab
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and tokens[3 + 0x41] == "<0x41>"

# 4. weights: finite, intended scale (std = 1/sqrt(n_in) for projections, 1 for norms)
n_embd = field(f"{arch}.embedding_length")
for t in r.tensors:
    x = dequantize(t.data, t.tensor_type).astype(np.float64)
    assert np.isfinite(x).all(), t.name
    if t.name.endswith("_norm.weight"):
        # gemma3's post-attention / post-FFN norm gains are 4.0 (docs/mkmodel.md, Weights)
        assert (x == (4.0 if ".post_" in t.name else 1.0)).all(), t.name
    elif t.name.endswith(".weight") and len(t.shape) == 2:
        want = (2.0 if t.name in ("token_embd.weight", "output.weight") else 1.0) / np.sqrt(int(t.shape[0]))
        s = x.std()
        assert abs(s - want) < 0.1 * want, (t.name, s, want)
print(f"ok {os.path.basename(path)}: {len(tensors)} tensors, {n_vocab} tokens")
EOF
}

check tiny q4_k_m
check tiny f16
check tiny q2_k
check tiny-qwen2 q4_0
check tiny-qwen2 q5_k_s
check tiny-llama2 q8_0
check tiny-llama2 q6_k --pure
check tiny-gemma3 q4_k_m
check smollm2-135m q4_k_m --layers 2
# ---- rope_freqs.weight of a Llama 3.2 file against the converter's formula (numpy float32) ----
f="$T/l32.gguf"
"$RF" mkmodel --preset llama3.2-1b --type f16 --layers 1 -q -o "$f" || fail "write llama3.2-1b"
"$PY" - "$f" <<'EOF' || fail "rope_freqs check"
import math, sys
import numpy as np
import gguf
r = gguf.GGUFReader(sys.argv[1])
t = [t for t in r.tensors if t.name == "rope_freqs.weight"][0]
got = np.asarray(t.data, dtype=np.float32)
base, dim, factor, low, high, old = 500000.0, 64, 32.0, 1.0, 4.0, 8192
freqs = (1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))).astype(np.float32)
want = []
for freq in freqs:
    wavelen = np.float32(2 * math.pi) / freq
    if wavelen < old / high:
        want.append(1.0)
    elif wavelen > old / low:
        want.append(factor)
    else:
        smooth = (np.float32(old) / wavelen - np.float32(low)) / np.float32(high - low)
        want.append(1.0 / ((1.0 - smooth) / factor + smooth))
want = np.asarray(want, dtype=np.float32)
assert t.tensor_type == gguf.GGMLQuantizationType.F32 and got.shape == (32,), (t.tensor_type, got.shape)
err = np.max(np.abs(got - want) / want)
assert err < 1e-6, (err, got, want)
print(f"ok rope_freqs: 32 factors from {got.min():.3f} to {got.max():.3f}, max rel err {err:.1e}")
EOF
rm -f "$f"
echo "all mkmodel gguf-py checks passed"
