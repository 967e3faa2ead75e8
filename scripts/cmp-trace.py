#!/usr/bin/env python3
"""cmp-trace.py REF OTHER: compare two rf_greedy_trace outputs; per prompt the first step where
the greedy tokens differ and REF's top-2 margin there (a divergence "at a near tie" has margin
< 0.1), then how many prompts stayed identical over all steps."""
import sys


def read(path):
    out = []
    for line in open(path):
        if line.startswith("prompt"):
            steps = line.split(":", 1)[1].split()
            out.append([(int(a), float(b)) for a, b in (s.split(":") for s in steps)])
    return out


ref, other = read(sys.argv[1]), read(sys.argv[2])
full = bad = 0
for p, (x, y) in enumerate(zip(ref, other)):
    k = 0
    while k < len(x) and x[k][0] == y[k][0]:
        k += 1
    if k == len(x):
        full += 1
        print("prompt %d: %d identical" % (p, len(x)))
    else:
        note = "" if x[k][1] < 0.1 else "  (not a near tie)"
        bad += x[k][1] >= 0.1
        print("prompt %d: diverges at token %d, reference top-2 margin %.4f%s" % (p, k, x[k][1], note))
print("identical %d of %d prompts; divergences not at a near tie: %d" % (full, len(ref), bad))
