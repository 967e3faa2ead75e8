#!/usr/bin/env python3
"""house-sizes.py — the house rules' sizes: source files in src/ and tools/ past 800 lines, and
top-level brace blocks with a parameter list (functions, kernels) past 150 lines, from the lines
that open and close them (comments and strings blanked first). Reads the files git tracks.
   usage: scripts/house-sizes.py [--file-lines N] [--func-lines N]   (exit 1 when any is found)"""
import argparse
import re
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--file-lines", type=int, default=800)
ap.add_argument("--func-lines", type=int, default=150)
a = ap.parse_args()
files = [f for f in subprocess.run(["git", "ls-files", "src", "tools"], capture_output=True, text=True,
                                   check=True).stdout.split() if re.search(r"\.(c|h|cu|cuh)$", f)]
found = 0
for f in files:
    text = open(f, errors="replace").read()
    n = text.count("\n")
    if n > a.file_lines:
        print(f"file {n:5d} lines  {f}")
        found += 1
    blank = lambda m: re.sub(r"[^\n]", " ", m.group())
    text = re.sub(r"/\*.*?\*/", blank, text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])*'", "''", text)
    lines = text.split("\n")
    depth, start, head = 0, None, ""
    for i, line in enumerate(lines, 1):
        for ch in line:
            if ch == "{":
                if depth == 0:
                    start, j, head = i, i, line
                    while j > 1 and "(" not in head and j > i - 4:  # the head may stand above the brace
                        j -= 1
                        head = lines[j - 1] + head
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and start:
                    span = i - start + 1
                    name = head.split("(")[0].split()[-1:] if "(" in head else []
                    if span > a.func_lines and name and "=" not in head.split("(")[0]:
                        print(f"func {span:5d} lines  {f}:{start}  {name[0]}")
                        found += 1
                    start = None
sys.exit(1 if found else 0)
