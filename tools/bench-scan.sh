#!/usr/bin/env bash
# Scan throughput of `vault scan` on a directory of mixed containers, beside `grep -c -F` for one
# canary over the same files (the physical baseline), run in the same script. Also reports the
# scanner's peak memory, which must not grow with file size (files are streamed in 256 KiB chunks).
#
#   tools/bench-scan.sh [MEGABYTES]     (default 200)
#   VAULT_BINARY=PATH tools/bench-scan.sh …   measures that vault binary instead of building one
#   (an older build, for a before/after comparison on the same machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
megabytes=${1:-200}

if [ -n "${VAULT_BINARY:-}" ]; then
  vault=$VAULT_BINARY
else
  tools/setup.sh
  swift build -c release --product vault 2>&1 | grep -v "prohibited flag" | tail -1
  vault="$(swift build -c release --show-bin-path)/vault"
fi
work=$(mktemp -d /tmp/vault-scan-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The corpus: SQLite files with ciphertext-like blobs and text columns, WAL-mode files, gzip blobs,
# random files and one large file; about MEGABYTES in all.
python3 - "$work/corpus" "$megabytes" <<'PY'
import gzip, json, os, sqlite3, sys
root, total = sys.argv[1], int(sys.argv[2]) * 1024 * 1024
os.makedirs(root)
written, n = 0, 0
while written < total:
    n += 1
    kind = n % 4
    path = os.path.join(root, f"c{n}")
    if kind == 0:
        c = sqlite3.connect(path + ".sqlite")
        c.execute("create table records (id text, queue text, state text, envelope blob)")
        for i in range(2000):
            c.execute("insert into records values (?, 'outbox', 'pending', ?)", (f"{n:08d}-{i:06d}", b"VLT" + os.urandom(1000)))
        c.commit(); c.close()
    elif kind == 1:
        with open(path + ".bin", "wb") as f:
            f.write(os.urandom(4 * 1024 * 1024))
    elif kind == 2:
        with open(path + ".gz", "wb") as f:
            for i in range(50):
                f.write(gzip.compress(os.urandom(20000)))
            f.write(gzip.compress(json.dumps({"events": [{"id": i, "t": "x" * 50} for i in range(2000)]}).encode()))
    else:
        with open(path + ".log", "w") as f:
            for i in range(60000):
                f.write(f"2026-11-30T10:00:{i % 60:02d}Z worker {i} processed batch {i * 7} in {i % 97} ms\n")
    written = sum(os.path.getsize(os.path.join(root, name)) for name in os.listdir(root))
print(f"corpus: {len(os.listdir(root))} files, {written / 1e6:.1f} MB")
PY
bytes=$(du -sb "$work/corpus" | cut -f1)
cat "$work"/corpus/* >/dev/null  # warm the page cache for both tools alike

measure() {  # seconds and peak RSS (KiB) of a command, via Python's resource module
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
start = time.monotonic()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
elapsed = time.monotonic() - start
print(f"{elapsed:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
PY
}
read -r grep_s grep_rss < <(measure grep -r -c -F "canary-not-present-7Qz" "$work/corpus")
read -r scan_s scan_rss < <(measure "$vault" scan "$work/corpus" --canary "canary-not-present-7Qz")
read -r scan2_s _ < <(measure "$vault" scan "$work/corpus" --canary "canary-not-present-7Qz")
read -r grep2_s _ < <(measure grep -r -c -F "canary-not-present-7Qz" "$work/corpus")
awk -v b="$bytes" -v g1="$grep_s" -v g2="$grep2_s" -v s1="$scan_s" -v s2="$scan2_s" -v gr="$grep_rss" -v sr="$scan_rss" 'BEGIN {
  g = (g1 < g2 ? g1 : g2); s = (s1 < s2 ? s1 : s2)
  printf "grep -c -F:  %7.1f MB/s (%.3f s), peak RSS %d KiB\n", b / g / 1e6, g, gr
  printf "vault scan:  %7.1f MB/s (%.3f s), peak RSS %d KiB\n", b / s / 1e6, s, sr
  printf "ratio: %.2fx grep (goal >= 0.5x)\n", g / s
  printf "figure scan-vs-grep %.2f\n", g / s
}'
