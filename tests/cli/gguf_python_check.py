#!/usr/bin/env python3
"""gguf_python_check.py — checks a GGUF file with the independent `gguf` Python package.

usage: gguf_python_check.py FILE.gguf [--manifest M.json] [--inspect I.json]

--manifest: what a writer was asked to write ({"kv": {key: {type, value}}, "tensors":
            [{name, type, shape, hex}]}, as `test_gguf_write --emit` makes it); every key, type,
            value, tensor name, shape, type id and data byte must match what GGUFReader reads.
--inspect:  the output of `rocmforge inspect --json --full FILE`: our reader's view of every
            key, value, tensor shape, type, size and offset must match GGUFReader's.
Either or both; exits 1 with the differences listed, 0 if all match. Reusable for any writer
(e.g. mkmodel) through --inspect.
"""
import json
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType

TYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
              "u64", "i64", "f64"]
errors = []


def err(msg):
    errors.append(msg)


def decode(parts, i, t):
    """Decodes one value of GGUF type t from ReaderField.parts starting at parts[i].
    Returns (type name, value, next index); arrays give {"elem_type", "items"}."""
    t = int(t)
    if t == GGUFValueType.STRING:
        return "string", bytes(parts[i + 1]).decode("utf-8", errors="replace"), i + 2
    if t == GGUFValueType.ARRAY:
        et, n = int(parts[i][0]), int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(n):
            if et == GGUFValueType.ARRAY:
                # nested: each element is itself (elem type, count, items)
                _, v, i = decode(parts, i, GGUFValueType.ARRAY)
            else:
                _, v, i = decode(parts, i, et)
            items.append(v)
        return "array", {"elem_type": TYPE_NAMES[et], "items": items}, i
    x = parts[i][0]
    if t == GGUFValueType.BOOL:
        v = bool(x)
    elif t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        v = float(x)
    else:
        v = int(x)
    return TYPE_NAMES[t], v, i + 1


def same(a, b):
    """Equality where floats compare exactly (NaN equal to NaN) and big ints may be strings."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.get("elem_type") == b.get("elem_type") and same(a["items"], b["items"])
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, str) and isinstance(b, (int, float)) or isinstance(b, str) and isinstance(a, (int, float)):
        try:
            return float(a) == float(b) if "." in str(a) + str(b) else int(a) == int(b)
        except ValueError:
            return str(a) in ("nan", "inf", "-inf") and str(a) == str(float(b))
    if isinstance(a, float) or isinstance(b, float):
        return a == b or (a != a and b != b)
    return a == b


def reader_view(path):
    r = GGUFReader(path)
    kv = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue  # header pseudo-fields
        ty, v, end = decode(f.parts, 3, f.types[0])
        if end != len(f.parts):
            err(f"{name}: decoded {end} of {len(f.parts)} parts")
        kv[name] = (ty, v)
    return r, kv


def check_manifest(r, kv, m):
    if list(m["kv"].keys()) != list(kv.keys()):
        err(f"key order/set differs: manifest {list(m['kv'])} vs file {list(kv)}")
    for key, want in m["kv"].items():
        if key not in kv:
            err(f"key {key} missing")
            continue
        ty, v = kv[key]
        if ty != want["type"]:
            err(f"{key}: type {ty}, manifest {want['type']}")
        if not same(v, want["value"]):
            err(f"{key}: value {v!r}, manifest {want['value']!r}")
    ts = {t.name: t for t in r.tensors}
    if [t.name for t in r.tensors] != [t["name"] for t in m["tensors"]]:
        err("tensor names/order differ")
    for want in m["tensors"]:
        t = ts.get(want["name"])
        if t is None:
            err(f"tensor {want['name']} missing")
            continue
        if int(t.tensor_type) != want["type"]:
            err(f"{t.name}: type {int(t.tensor_type)}, manifest {want['type']}")
        if [int(x) for x in t.shape] != want["shape"]:
            err(f"{t.name}: shape {list(t.shape)}, manifest {want['shape']}")
        data = np.ascontiguousarray(t.data).tobytes()
        if data.hex() != want["hex"]:
            err(f"{t.name}: data bytes differ ({len(data)} bytes read, {len(want['hex']) // 2} written)")


def check_inspect(r, kv, ins):
    keys = [m["key"] for m in ins["metadata"]]
    if keys != list(kv.keys()):
        err(f"inspect keys {keys} vs gguf-py {list(kv)}")
    for m in ins["metadata"]:
        if m["key"] not in kv:
            continue
        ty, v = kv[m["key"]]
        if m["type"] != ty:
            err(f"{m['key']}: inspect type {m['type']}, gguf-py {ty}")
        if not same(m["value"], v):
            err(f"{m['key']}: inspect value {str(m['value'])[:200]}, gguf-py {str(v)[:200]}")
        if ty == "array" and m["value"].get("truncated"):
            err(f"{m['key']}: inspect output is abbreviated; run inspect with --full")
    if len(ins["tensors"]) != len(r.tensors):
        err(f"inspect has {len(ins['tensors'])} tensors, gguf-py {len(r.tensors)}")
    for a, t in zip(ins["tensors"], r.tensors):
        if a["name"] != t.name:
            err(f"tensor name {a['name']} vs {t.name}")
        if a["type_id"] != int(t.tensor_type):
            err(f"{t.name}: type {a['type_id']} vs {int(t.tensor_type)}")
        if a["shape"] != [int(x) for x in t.shape]:
            err(f"{t.name}: shape {a['shape']} vs {list(t.shape)}")
        if a["n_elements"] != int(t.n_elements):
            err(f"{t.name}: n_elements {a['n_elements']} vs {t.n_elements}")
        if a["bytes"] != int(t.n_bytes):
            err(f"{t.name}: bytes {a['bytes']} vs {t.n_bytes}")
        if ins["data_offset"] + a["offset"] != int(t.data_offset):
            err(f"{t.name}: data at {ins['data_offset'] + a['offset']} vs {t.data_offset}")
    if ins["alignment"] != r.alignment:
        err(f"alignment {ins['alignment']} vs {r.alignment}")


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    path, manifest, inspect = argv[1], None, None
    i = 2
    while i < len(argv):
        if argv[i] == "--manifest":
            manifest = json.load(open(argv[i + 1]))
        elif argv[i] == "--inspect":
            inspect = json.load(open(argv[i + 1]))
        else:
            print(f"error: unknown argument {argv[i]}", file=sys.stderr)
            return 2
        i += 2
    r, kv = reader_view(path)
    if manifest is not None:
        check_manifest(r, kv, manifest)
    if inspect is not None:
        check_inspect(r, kv, inspect)
    for e in errors:
        print("MISMATCH:", e)
    print(f"{path}: {len(kv)} keys, {len(r.tensors)} tensors checked with gguf-py; "
          f"{len(errors)} mismatch(es)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
