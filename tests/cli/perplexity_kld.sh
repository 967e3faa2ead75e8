#!/usr/bin/env bash
# perplexity_kld.sh — `rocmforge perplexity --kl-divergence-base / --kl-divergence`: a base we
# write and read back gives KLD ~0 and the same top token everywhere; hand-made bases (a point
# mass on a chosen token per position) give numbers known in closed form.
# usage: bash perplexity_kld.sh <rocmforge> <source-dir>
set -u
. "$2/tests/util/cli_common.sh" "$1" "$2"
command -v python3 >/dev/null || { echo "SKIPPED: no python3"; exit 77; }
"$RF" mkmodel --preset tiny --type f32 -o "$T/m.gguf" >/dev/null 2>&1 || fail "mkmodel"
for i in $(seq 1 60); do echo "The quick brown fox jumps over the lazy dog number $i, and then it rests."; done >"$T/text"
"$RF" perplexity -m "$T/m.gguf" -f "$T/text" --ctx 64 -t 2 --kl-divergence-base "$T/base" >"$T/o1" 2>"$T/e1" ||
    fail "write base: $(cat "$T/e1")"
PPL=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$T/o1")
[ -n "$PPL" ] || fail "no PPL: $(cat "$T/o1")"
# Read it back. Each stored log-prob is off by at most half a quantization step, 16/65535/2 =
# 1.22e-4 (plus f32 rounding, ~1e-6), and KLD = sum_i p_base,i * e_i with |e_i| <= that, so
# |mean KLD| <= 1.25e-4; the argmax is stored exactly (q = 65535), so the same top token holds
# everywhere except where two logits lie within half a step and both round to 65535: the base
# then names the first (the tiny model has one such position of 1178; counted below).
"$RF" perplexity -m "$T/m.gguf" --kl-divergence-base "$T/base" --kl-divergence -t 1 >"$T/o2" 2>"$T/e2" ||
    fail "read base: $(cat "$T/e2")"
python3 - "$T" "$PPL" <<'PY' || exit 1
import math, re, struct, sys
T, ppl = sys.argv[1], float(sys.argv[2])
def stat(path, name):
    m = re.search(r"^" + re.escape(name) + r"\s*:\s*(-?[0-9.]+)", open(path).read(), re.M)
    if not m: sys.exit("FAIL: no '%s' in %s:\n%s" % (name, path, open(path).read()))
    return float(m.group(1))
kld, top = stat(T + "/o2", "Mean    KLD"), stat(T + "/o2", "Same top p")
if abs(stat(T + "/o2", "Mean PPL(Q)") / ppl - 1) > 1e-4: sys.exit("FAIL: PPL(Q) differs from the plain run")
# Hand-made bases, from our file's header and token list: one record per scored position with
# scale 20/65535, min log-prob -20 and q = 65535 on one token k, 0 elsewhere: log p_base = 0 on
# k and -20 (left out, < -16) elsewhere, so KLD = -log p_ours(k). With k = the next token, mean
# KLD = ln PPL(Q) and PPL(base) = 1. With k = our argmax (from the base we wrote: the q = 65535
# entry), the same top token is 100% but for the tied positions.
raw = open(T + "/base", "rb").read()
assert raw[:8] == b"_logits_"
n_ctx, n_vocab, n_chunk = struct.unpack_from("<Iii", raw, 8)
off = 20
toks = struct.unpack_from("<%di" % (n_ctx * n_chunk), raw, off)
off += 4 * n_ctx * n_chunk
nv = 2 * ((n_vocab + 1) // 2) + 4
first = n_ctx // 2
head = raw[:off]
def record(k):
    q = [0] * (nv - 4)
    q[k] = 65535
    return struct.pack("<ff", 20 / 65535, -20.0) + struct.pack("<%dH" % (nv - 4), *q)
nxt, amax, n_tied = [], [], 0
for c in range(n_chunk):
    for pos in range(first, n_ctx - 1):
        nxt.append(record(toks[c * n_ctx + pos + 1]))
        q = struct.unpack_from("<%dH" % n_vocab, raw, off + 8)
        n_tied += sorted(q)[-2] == 65535
        amax.append(record(q.index(65535)))
        off += 2 * nv
assert off == len(raw), "base size"
n = len(nxt)
want = 100.0 * (n - n_tied) / n - 5e-4 # printed with 3 decimals
if abs(kld) > 1.25e-4 or top < want: sys.exit("FAIL: self KLD %g, same top %g%% (%d tied of %d)" % (kld, top, n_tied, n))
open(T + "/want", "w").write(str(want))
open(T + "/next", "wb").write(head + b"".join(nxt))
open(T + "/amax", "wb").write(head + b"".join(amax))
PY
"$RF" perplexity -m "$T/m.gguf" --kl-divergence-base "$T/next" --kl-divergence >"$T/o3" 2>"$T/e3" || fail "next: $(cat "$T/e3")"
"$RF" perplexity -m "$T/m.gguf" --kl-divergence-base "$T/amax" --kl-divergence >"$T/o4" 2>"$T/e4" || fail "amax: $(cat "$T/e4")"
python3 - "$T" "$PPL" <<'PY' || exit 1
import math, re, sys
T, ppl = sys.argv[1], float(sys.argv[2])
def stat(path, name):
    m = re.search(r"^" + re.escape(name) + r"\s*:\s*(-?[0-9.]+)", open(path).read(), re.M)
    if not m: sys.exit("FAIL: no '%s' in %s" % (name, path))
    return float(m.group(1))
kld, pb = stat(T + "/o3", "Mean    KLD"), stat(T + "/o3", "Mean PPL(base)")
# PPL is printed with 4 decimals: ln PPL known to 0.5e-4/PPL; the KLD is printed with 6.
if abs(kld - math.log(ppl)) > 0.5e-4 / ppl + 1e-6 or abs(pb - 1) > 1e-6:
    sys.exit("FAIL: point-mass-on-next base: KLD %g vs ln PPL %g, PPL(base) %g" % (kld, math.log(ppl), pb))
if stat(T + "/o4", "Same top p") < float(open(T + "/want").read()) or stat(T + "/o4", "Mean    KLD") < 0:
    sys.exit("FAIL: point-mass-on-argmax base: %s" % open(T + "/o4").read())
print("self KLD %.6f, next-token base KLD %.6f = ln PPL %.6f" % (stat(T + "/o2", "Mean    KLD"), kld, math.log(ppl)))
PY
# Bad input: a file that is not a base, a base of another vocabulary.
head -c 100 "$T/text" >"$T/bad"
"$RF" perplexity -m "$T/m.gguf" --kl-divergence-base "$T/bad" --kl-divergence >/dev/null 2>"$T/e5" && fail "bad base accepted"
grep -q "_logits_" "$T/e5" || fail "bad-base message: $(cat "$T/e5")"
"$RF" perplexity -m "$T/m.gguf" --kl-divergence >/dev/null 2>"$T/e6"
[ $? = 2 ] || fail "--kl-divergence without a base: $(cat "$T/e6")"
echo PASS
