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

measure() {  # seconds, peak RSS (KiB) and CPU seconds (user and system) of a command
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
# Python's own start-up has children already (about 40 ms of CPU here): counted out.
before = resource.getrusage(resource.RUSAGE_CHILDREN)
start = time.monotonic()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
elapsed = time.monotonic() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
print(f"{elapsed:.3f} {usage.ru_maxrss} {cpu:.3f}")
PY
}
read -r grep_s grep_rss grep_cpu < <(measure grep -r -c -F "canary-not-present-7Qz" "$work/corpus")
read -r scan_s scan_rss scan_cpu < <(measure "$vault" scan "$work/corpus" --canary "canary-not-present-7Qz")
read -r scan2_s _ scan2_cpu < <(measure "$vault" scan "$work/corpus" --canary "canary-not-present-7Qz")
read -r grep2_s _ grep2_cpu < <(measure grep -r -c -F "canary-not-present-7Qz" "$work/corpus")
# The goal is in wall-clock time ("both cores may be used"; the scan reads files on two threads,
# grep on one); the CPU-time ratio is printed beside it, so that what the second core gave is seen.
awk -v b="$bytes" -v g1="$grep_s" -v g2="$grep2_s" -v s1="$scan_s" -v s2="$scan2_s" -v gr="$grep_rss" -v sr="$scan_rss" \
  -v gc1="$grep_cpu" -v gc2="$grep2_cpu" -v sc1="$scan_cpu" -v sc2="$scan2_cpu" 'BEGIN {
  g = (g1 < g2 ? g1 : g2); s = (s1 < s2 ? s1 : s2)
  gc = (gc1 < gc2 ? gc1 : gc2); sc = (sc1 < sc2 ? sc1 : sc2)
  printf "grep -c -F:  %7.1f MB/s (%.3f s, %.3f s of CPU), peak RSS %d KiB\n", b / g / 1e6, g, gc, gr
  printf "vault scan:  %7.1f MB/s (%.3f s, %.3f s of CPU), peak RSS %d KiB\n", b / s / 1e6, s, sc, sr
  printf "ratio: %.2fx grep in wall-clock time (goal >= 0.5x), %.2fx in CPU time\n", g / s, gc / sc
  printf "figure scan-vs-grep %.2f\n", g / s
  printf "figure scan-vs-grep-cpu %.2f\n", gc / sc
}'
