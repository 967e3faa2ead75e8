#!/usr/bin/env bash
# architecture_refs.sh — the design the code cites lives in the repository: every
# "ARCHITECTURE.md §N[.M]" in src/, tools/, include/, tests/, scripts/, docs/ and README.md names a
# section heading of docs/ARCHITECTURE.md, and nothing cites DESIGN.md or a file outside the repo.
# usage: architecture_refs.sh <rocmforge> <source-dir>
set -u
SRC=$2
A=$SRC/docs/ARCHITECTURE.md
fails=0
[ -f "$A" ] || { echo "FAIL: $A missing"; exit 1; }
# section numbers of the headings: "## 4. Contracts" -> 4, "### 4.3 The batch" -> 4.3
grep -oE '^#{2,3} [0-9]+(\.[0-9]+)?' "$A" | sed -E 's/^#+ //' | sort -u >/tmp/rf-arch-secs.$$
cd "$SRC" || exit 1
n=0
while IFS= read -r hit; do
  file=${hit%%:*}
  for sec in $(grep -oE 'ARCHITECTURE\.md §[0-9]+(\.[0-9]+)?(, §[0-9]+(\.[0-9]+)?)*' <<<"$hit" | grep -oE '[0-9]+(\.[0-9]+)?'); do
    n=$((n + 1))
    grep -qx "$sec" /tmp/rf-arch-secs.$$ || { echo "FAIL: $file cites §$sec, not a section of docs/ARCHITECTURE.md"; fails=$((fails + 1)); }
  done
done < <(grep -rn 'ARCHITECTURE\.md §' src tools include tests scripts docs README.md --exclude-dir=data)
rm -f /tmp/rf-arch-secs.$$
echo "ok: $n section citations checked"
[ "$n" -ge 18 ] || { echo "FAIL: only $n citations found (expected the 18 moved from DESIGN.md)"; fails=$((fails + 1)); }
if grep -rnE 'DESIGN(\.md)? ?§|DESIGN\.md|shared/REFERENCES' src tools include tests scripts docs README.md --exclude-dir=data \
     | grep -v 'tests/cli/architecture_refs.sh'; then
  echo "FAIL: citations of a design file outside the repository (above)"; fails=$((fails + 1))
else
  echo "ok: no citation of DESIGN.md or /work/shared"
fi
echo "$fails failure(s)"
test $fails -eq 0
