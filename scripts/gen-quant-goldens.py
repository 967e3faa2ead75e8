#!/usr/bin/env python3
"""gen-quant-goldens.py — golden data for ROCmForge's block formats from an independent oracle,
the `gguf` Python package (gguf.quants, numpy). Writes tests/data/quant/<type>.bin (random blocks +
their dequantized f32 values) and <type>.quant.bin (f32 inputs + gguf's quantized bytes, for the
types gguf can quantize), plus NOTE.md. Deterministic (fixed seed). Usage:

    .venv/bin/python scripts/gen-quant-goldens.py [out_dir]

File layout (little-endian): magic b"RFQG", u32 version=1, u32 kind (0 = dequant golden,
1 = quant golden), u32 ggml type id, u32 n_blocks, u32 block_size (elements), u32 type_size
(bytes), then
  kind 0: n_blocks*type_size block bytes, then n_blocks*block_size f32 values (gguf dequantize)
  kind 1: n_blocks*block_size f32 inputs, then n_blocks*type_size bytes (gguf quantize)
"""
import os
import importlib.metadata
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "quant")
rng = np.random.default_rng(20261121)


def rand_f16(n, lo=-6.0, hi=1.0):
    """Finite, non-NaN f16 scales: sign * 2^U(lo, hi), a few exact zeros and subnormals."""
    v = (np.sign(rng.standard_normal(n)) * np.exp2(rng.uniform(lo, hi, n))).astype(np.float16)
    if n >= 4:
        v[0] = np.float16(0.0)
        v[1] = np.float16(6e-8)  # subnormal
    return v.view(np.uint8).reshape(n, 2)


def rand_e8m0(n):
    e = rng.integers(110, 140, n, dtype=np.uint8)
    e[:4] = [0, 1, 2, 254][: min(4, n)]
    return e.reshape(n, 1)


def rand_ue4m3(n):
    """NVFP4 scales: anything except the NaN-ish 0xFF / 0x7F region is fine; keep 0..0x7E."""
    return rng.integers(0, 0x7F, n, dtype=np.uint8)


# per type: (n_blocks, list of (byte offset, kind)) where kind 'h' = f16 scale, 'e' = e8m0,
# 'u' = 4 ue4m3 bytes, 'f' = f32 scale (Q8_K)
LAYOUT = {
    T.Q4_0: (32, [(0, "h")]),
    T.Q4_1: (32, [(0, "h"), (2, "h")]),
    T.Q5_0: (32, [(0, "h")]),
    T.Q5_1: (32, [(0, "h"), (2, "h")]),
    T.Q8_0: (32, [(0, "h")]),
    T.Q2_K: (4, [(80, "h"), (82, "h")]),
    T.Q3_K: (4, [(108, "h")]),
    T.Q4_K: (4, [(0, "h"), (2, "h")]),
    T.Q5_K: (4, [(0, "h"), (2, "h")]),
    T.Q6_K: (4, [(208, "h")]),
    T.IQ4_NL: (32, [(0, "h")]),
    T.IQ4_XS: (4, [(0, "h")]),
    T.TQ1_0: (4, [(52, "h")]),
    T.TQ2_0: (4, [(64, "h")]),
    T.MXFP4: (32, [(0, "e")]),
    T.NVFP4: (16, [(0, "u")]),
}


def header(kind, t, nb, bs, ts):
    return b"RFQG" + struct.pack("<6I", 1, kind, int(t), nb, bs, ts)


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def dequant_golden(t, nb, fields):
    bs, ts = GGML_QUANT_SIZES[t]
    blocks = rng.integers(0, 256, (nb, ts), dtype=np.uint8)
    for off, kind in fields:
        if kind == "h":
            blocks[:, off:off + 2] = rand_f16(nb)
        elif kind == "e":
            blocks[:, off:off + 1] = rand_e8m0(nb)
        elif kind == "u":
            blocks[:, off:off + 4] = rand_ue4m3(nb * 4).reshape(nb, 4)
    with np.errstate(over="ignore"):  # MXFP4 e=254 times 12 overflows to inf (same in C)
        vals = dequantize(blocks.reshape(-1), t).astype(np.float32).reshape(-1)
    assert vals.size == nb * bs
    write(f"{t.name.lower()}.bin", header(0, t, nb, bs, ts) + blocks.tobytes() + vals.astype("<f4").tobytes())


def float_goldens():
    # F16: random finite halves, subnormals, +-0, +-inf (no NaN: compared separately in C)
    h = rng.integers(0, 0x10000, 1024, dtype=np.uint16)
    h = h[(h & 0x7C00) != 0x7C00][:512]
    h[:6] = [0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00]
    vals = dequantize(h.view(np.uint8), T.F16).astype(np.float32)
    write("f16.bin", header(0, T.F16, h.size, 1, 2) + h.tobytes() + vals.astype("<f4").tobytes())
    b = rng.integers(0, 0x10000, 512, dtype=np.uint16)
    b = b[(b & 0x7F80) != 0x7F80]
    vals = dequantize(b.view(np.uint8), T.BF16).astype(np.float32)
    write("bf16.bin", header(0, T.BF16, b.size, 1, 2) + b.tobytes() + vals.astype("<f4").tobytes())


def quant_inputs(nb, bs):
    x = (rng.standard_normal((nb, bs)) * np.exp2(rng.uniform(-8, 4, (nb, 1)))).astype(np.float32)
    x[0] = 0.0                                        # all-zero block
    if nb > 2:
        x[1] = 0.5                                    # constant block
        x[2] = np.round(x[2] * 4) / 4                 # many exact ties
    if nb > 3:
        x[3, 5] = 1000.0                              # one outlier
    return x


def float_inputs(n):
    """f32 values for the F16/BF16 rounding goldens: wide exponent range (overflow to inf,
    subnormal results), exact halfway ties of both formats, random bit patterns, +-inf."""
    x = (rng.standard_normal(n) * np.exp2(rng.uniform(-30, 18, n))).astype(np.float32)
    h = rng.integers(0, 0x7BFF, n // 4, dtype=np.uint16).view(np.float16).astype(np.float32)
    x[: n // 4] = h * np.float32(1 + 2.0 ** -11)       # f16 halfway (or near) cases
    bits = rng.integers(0, 0xFF000000, n // 4, dtype=np.uint32)
    bits[::2] = (bits[::2] & 0xFFFF0000) | 0x8000      # bf16 exact ties
    x[n // 4: n // 2] = bits.view(np.float32)
    x[-2:] = [np.inf, -np.inf]
    return x.reshape(n, 1)


def quant_golden(t, nb):
    bs, ts = GGML_QUANT_SIZES[t]
    x = float_inputs(nb) if bs == 1 else quant_inputs(nb, bs)
    with np.errstate(over="ignore"):
        q = quantize(x.reshape(-1, bs), t)
    q = np.asarray(q).view(np.uint8).reshape(-1)
    assert q.size == nb * ts, (t, q.size)
    write(f"{t.name.lower()}.quant.bin", header(1, t, nb, bs, ts) + x.astype("<f4").tobytes() + q.tobytes())


def main():
    os.makedirs(OUT, exist_ok=True)
    float_goldens()
    for t, (nb, fields) in LAYOUT.items():
        dequant_golden(t, nb, fields)
    quant_golden(T.F16, 256)
    quant_golden(T.BF16, 256)
    for t in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4):
        quant_golden(t, 16)
    for t in (T.TQ1_0, T.TQ2_0):
        quant_golden(t, 2)
    with open(os.path.join(OUT, "NOTE.md"), "w") as f:
        f.write(f"""# Quantization goldens

Produced by `scripts/gen-quant-goldens.py` with the `gguf` Python package version
{importlib.metadata.version('gguf')} (gguf.quants, numpy {np.__version__}),
installed by scripts/setup.sh into /work/main/.venv. Command:

    .venv/bin/python scripts/gen-quant-goldens.py

Deterministic (numpy default_rng seed 20261121). `<type>.bin`: random block bytes (scale fields
replaced by finite f16 values incl. 0 and a subnormal; E8M0/UE4M3 scales in range) and gguf's
dequantized f32 values. `<type>.quant.bin`: f32 inputs (normal rows at random scales, an all-zero
block, a constant block, exact ties, an outlier) and gguf's quantized bytes. File layout: see the
script's docstring. Checked by tests/unit/test_quant_golden.c.
""")


if __name__ == "__main__":
    main()
