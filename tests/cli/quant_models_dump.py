#!/usr/bin/env python3
"""quant_models_dump.py — for tests/cli/quant_models.sh: from each real GGUF model given, takes one
tensor per quantized type (first <= 64 rows) and writes <out>/<k>.raw (block bytes) and <k>.f32
(gguf-py's dequantization), plus <out>/list.txt lines "<ggml type id> <n_per_row> <rows> <k> <name>".
usage: quant_models_dump.py <out_dir> <model.gguf>..."""
import os
import sys

import numpy as np
import gguf
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

out = sys.argv[1]
k = 0
with open(os.path.join(out, "list.txt"), "w") as lst:
    for path in sys.argv[2:]:
        r = gguf.GGUFReader(path)
        seen = set()
        for t in r.tensors:
            qt = t.tensor_type
            if qt in seen or qt in (gguf.GGMLQuantizationType.F32,):
                continue
            seen.add(qt)
            n = int(t.shape[0])
            rows = min(int(np.prod(t.shape[1:])), 64)
            bs, ts = GGML_QUANT_SIZES[qt]
            raw = np.asarray(t.data).view(np.uint8).reshape(-1)[: n // bs * ts * rows]
            dequantize(raw, qt).astype("<f4").tofile(os.path.join(out, f"{k}.f32"))
            raw.tofile(os.path.join(out, f"{k}.raw"))
            lst.write(f"{int(qt)} {n} {rows} {k} {os.path.basename(path)}:{t.name}\n")
            k += 1
print(f"dumped {k} tensors")
