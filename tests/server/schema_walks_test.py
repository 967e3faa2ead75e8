#!/usr/bin/env python3
"""schema_walks_test.py — the JSON Schema compiler against an independent validator: for each
schema of structured_test.py (and a few more), random texts its grammar admits
(tests/tools/schema_walks.c: walks through the grammar, steered by a seed) must parse as JSON and
validate (schema_cases.valid: the `jsonschema` package with its format checker, and the
strict validator of the subset).
A grammar that admits an invalid document would let a model write one under response_format.
usage: schema_walks_test.py RF_SCHEMA_WALKS [SEED]   (SEED: default fresh, printed)
Exit 0 = pass, 1 = fail, 77 = skipped (no jsonschema)."""
import json
import os
import subprocess
import sys
import time

try:
    import jsonschema  # noqa: F401 (structured_test.valid uses it)
except ImportError:
    print("SKIP: the jsonschema package is missing (scripts/setup.sh's .venv)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schema_cases as st  # noqa: E402
from server_suite import Fail  # noqa: E402

S = st.S
MORE = [
    ("strings with escapes", st.OBJ({"s": S("string"), "t": S("string", maxLength=3)})),
    ("numbers", st.OBJ({"i": S("integer"), "x": S("number"), "b": S("integer", minimum=-5, maximum=5)})),
    ("free array", S("array")),
    ("anything", {}),
]
WALKS = 40


def main():
    tool = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else time.time_ns() % (1 << 62)
    print(f"seed {seed} (schema_walks_test.py {tool} {seed} replays it)")
    schemas = st.SCHEMAS + MORE
    lines = "".join(json.dumps(sc) + "\n" for _, sc in schemas)
    r = subprocess.run([tool, str(seed), str(WALKS)], input=lines.encode(), capture_output=True, timeout=600)
    if r.returncode:
        print(f"FAIL: {tool} exited {r.returncode}: {r.stderr.decode(errors='replace')[:500]}")
        return 1
    counts = [0] * len(schemas)
    bad = 0
    for ln in r.stdout.decode().split("\n")[:-1]:  # not splitlines: it splits at U+2028 too
        i, text = ln.split("\t", 1)
        name, sc = schemas[int(i)]
        if text.startswith("ERROR"):
            print(f"FAIL {name}: the schema does not compile: {text}")
            bad += 1
            continue
        if text == "UNFINISHED":
            print(f"FAIL {name}: a walk reached RF_TW_CAP (fuzz_tool_walk_body.h: a finish that does not converge)")
            bad += 1
            continue
        doc = json.loads(text)
        try:
            v = json.loads(doc)
            st.valid(v, sc)
            counts[int(i)] += 1
        except (ValueError, Fail) as e:
            bad += 1
            if bad <= 10:
                print(f"FAIL {name}: {e}: {doc!r}")
    short = [schemas[i][0] for i, c in enumerate(counts) if c != WALKS]
    for i, c in enumerate(counts):
        print(f"  {schemas[i][0]}: {c} walks valid")
    if short:
        print(f"FAIL: not all {WALKS} walks whole and valid for {short}")
        bad += 1
    total = sum(counts)
    print(f"schema_walks_test: {total} documents over {len(schemas)} schemas validate, {bad} failures -> "
          f"{'FAIL' if bad else 'PASS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
