#!/usr/bin/env bash
# Precision of `vault scan`'s heuristic detectors on ordinary trees (files that hold no leak), and
# recall on the leak corpus (tools/leak-corpus.py), with the release CLI and default settings.
#
# For each tree: files scanned, and per detector the files with at least one finding (count and %)
# plus the scan time. The goal (issue 10 item 5) is under 1 % per detector on every tree while the
# corpus is found whole.
#
#   tools/bench-scan-precision.sh [VAULT_BINARY]   (default: builds and uses the release vault)
#   KEEP_REPORTS=DIR keeps each tree's JSON report there.
#
# Trees: /usr/share/doc, /usr/lib/x86_64-linux-gnu, and 3,000 .pyc files compiled here from the
# .py files of the system's and pyenv's Python libraries (deterministic: sorted, every n-th file).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ $# -gt 0 ]; then
  vault=$1
else
  swift build -c release --product vault 2>&1 | grep -v "prohibited flag" | tail -1
  vault="$(swift build -c release --show-bin-path)/vault"
fi
work=$(mktemp -d /tmp/vault-precision-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

python3 - "$work/pyc" <<'PY'
import glob, os, py_compile, sys, warnings
warnings.simplefilter("ignore")
out = sys.argv[1]
os.makedirs(out)
sources = sorted(set(glob.glob("/usr/lib/python3*/**/*.py", recursive=True)
                     + glob.glob("/root/.pyenv/versions/*/lib/python3*/**/*.py", recursive=True)))
sources = [s for s in sources if os.path.isfile(s) and not os.path.islink(s)]
step = max(1, len(sources) // 3300)
made = 0
for index, source in enumerate(sources[::step]):
    target = os.path.join(out, f"{index // 500:02d}", f"{index:05d}-{os.path.basename(source)}c")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        # Hash-checked pycs do not depend on the source's mtime: the tree is the same every run.
        py_compile.compile(source, cfile=target, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    except (py_compile.PyCompileError, SyntaxError, ValueError, UnicodeDecodeError, OSError):
        continue
    made += 1
    if made == 3000:
        break
print(f"pyc tree: {made} files compiled from {len(sources)} sources", file=sys.stderr)
PY

summarise() {  # NAME JSON SECONDS
  python3 - "$@" <<'PY'
import json, sys
name, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
report = json.load(open(path))
files = report["files_scanned"]
by = {}
for finding in report["findings"]:
    by.setdefault(finding["detector"], set()).add(finding["file"])
line = f"{name:<28} files {files:>6}  {seconds:7.2f} s"
for detector in ["natural-language", "key-value-text", "json-text", "key-material", "canary"]:
    count = len(by.get(detector, ()))
    line += f"  {detector} {count} ({100 * count / max(files, 1):.2f} %)"
print(line)
PY
}

scan_tree() {  # NAME PATH LABEL
  local start end status=0
  start=$(date +%s.%N)
  "$vault" scan --json "$2" >"$work/$1.json" 2>/dev/null || status=$?
  end=$(date +%s.%N)
  [ "$status" -le 2 ] || { echo "bench: vault scan failed on $2 ($status)" >&2; exit 1; }
  summarise "$3" "$work/$1.json" "$(echo "$end - $start" | bc)"
  [ -z "${KEEP_REPORTS:-}" ] || cp "$work/$1.json" "$KEEP_REPORTS/$1.json"
}

echo "precision (files with a finding, per detector; default settings, no canary):"
scan_tree doc /usr/share/doc /usr/share/doc
scan_tree lib /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu
scan_tree pyc "$work/pyc" "3,000 .pyc files"

echo "leak corpus (found / total per class):"
if [ -f tools/leak-corpus.py ]; then
  python3 tools/leak-corpus.py "$work/corpus" >/dev/null
  python3 tools/leak-corpus.py --check "$work/corpus" --vault "$vault" || true
else
  echo "  (tools/leak-corpus.py not present in this tree)"
fi
