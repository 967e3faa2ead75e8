#!/usr/bin/env python3
"""plot-gemv.py: bar chart of the default GEMV kernels' share of measured read bandwidth, from
the output of rf_gpu_bench (scripts/gpu-check.sh puts it in $OUT/bench.log); where the log holds
several runs, the first one's.
usage: plot-gemv.py BENCH_LOG OUT_PNG [TITLE]   (needs matplotlib)"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

log, out = sys.argv[1], sys.argv[2]
title = sys.argv[3] if len(sys.argv) > 3 else "quantized GEMV, decode (1 token)"
bw, rows, prod, order = None, {}, {}, []
for line in open(log):
    m = re.match(r"read bandwidth .*: (\d+) GB/s", line)
    if m and bw is None:  # a log of several runs: the first run's figures
        bw = int(m.group(1))
    # type  n_in->n_out v0  tok  [x]  pdl  MB  us  GB/s  of_bw  (x: f32 whole call, int8 product)
    m = re.match(r"(\S+)\s+(\d+->\d+) v0\s+\d+\s+(?:(f32|int8)\s+)?on\s+\S+\s+\S+\s+\S+\s+([\d.]+)%", line)
    if m:
        t, shape, x, pct = m.group(1).upper(), m.group(2), m.group(3) or "f32", float(m.group(4))
        if t not in rows:
            rows[t], prod[t], order = {}, {}, order + [t]
        (rows if x == "f32" else prod)[t].setdefault(shape, pct)
shapes = ["4096->4096", "4096->14336", "14336->4096"]
fig, ax = plt.subplots(figsize=(10, 4.5))
w = 0.27
colors = ["C0", "C1", "C2"]
for i, s in enumerate(shapes):
    xs = [k + (i - 1) * w for k in range(len(order))]
    # the product kernel alone on an x quantized beforehand (32-element formats), light, behind
    ax.bar(xs, [prod[t].get(s, 0) for t in order], w, color=colors[i], alpha=0.3)
    ax.bar(xs, [rows[t].get(s, 0) for t in order], w, color=colors[i], label=s)
ax.axhline(85, color="k", ls="--", lw=1)
ax.text(-0.6, 86.5, "aim 85%", ha="left")
ax.set_xticks(range(len(order)), order)
ax.set_ylim(0, 105)
ax.set_ylabel(f"% of measured read bandwidth ({bw} GB/s)")
ax.set_title(title)
ax.legend(title="n_in -> n_out (light: product kernel alone,\nx quantized beforehand)", fontsize=8, title_fontsize=8, loc="lower right", framealpha=0.95)
fig.tight_layout()
fig.savefig(out, dpi=90)
