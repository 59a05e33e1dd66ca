#!/usr/bin/env bash
# Runs every benchmark, each beside its baseline in the same run (this machine is noisy: the
# ratios matter, not the absolute figures), and ends with one line per figure, exactly
#
#   figure NAME VALUE
#
# with VALUE a ratio (vault / baseline, higher is better) or a number with its unit in the name
# (`-ms`, `-mib`). The names are stable over time (issue 15).
#
#   tools/bench.sh [SECONDS]     (default 3 seconds per timed measurement)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-3}
log=$(mktemp /tmp/vault-bench.XXXXXX)
trap 'rm -f "$log"' EXIT

run() {  # run NAME COMMAND...: the benchmark's own report goes to the terminal and the log
  echo "== $1"
  shift
  # Each starts with nothing left to write back: the 1 GiB rotation left over a gigabyte of dirty
  # pages, and the telemetry benchmark after it timed its fsyncs behind that write-back (p99
  # 3-13 ms in runs where it alone took 1.8).
  sync
  "$@" 2>&1 | tee -a "$log"
  echo
}
run "seal and open beside openssl speed" tools/bench-crypto.sh "$seconds"
run "durable enqueue (1 thread, 4 threads, 2 processes) and rotation (20 MB, 1 GiB) beside plain SQLite" \
  tools/bench-queue.sh "$seconds"
run "telemetry log from 4 threads beside plain SQLite" tools/bench-telemetry.sh "$seconds"
run "scan beside grep" tools/bench-scan.sh 100

echo "== summary"
grep -E '^figure [A-Za-z0-9-]+ [0-9.]+$' "$log" || true
# Every figure the issue names, and the ones printed beside them, must be there and be a number: a
# benchmark that failed or printed nan, inf or a negative value is said, not left out in silence.
expected=(seal-16KiB-vs-openssl seal-1KiB-vs-openssl seal-64B-vs-openssl open-1KiB-vs-openssl
  seal-floor-16KiB-vs-openssl seal-floor-1KiB-vs-openssl seal-floor-64B-vs-openssl
  enqueue-200B-vs-plain enqueue-200B-p99-ms enqueue-4threads-vs-plain enqueue-4threads-p99-ms
  enqueue-2procs-vs-plain enqueue-4threads-ceiling-vs-plain enqueue-4threads-plain-ceiling-vs-plain
  enqueue-2procs-ceiling-vs-plain enqueue-2procs-plain-ceiling-vs-plain rotate-1GB-vs-plain
  rotate-1GB-peak-rss-mib log-4threads-vs-plain log-4threads-p99-ms log-4threads-ceiling-vs-plain
  log-4threads-plain-ceiling-vs-plain scan-vs-grep scan-vs-grep-cpu)
missing=0
for name in "${expected[@]}"; do
  # Another rotation size (VAULT_BENCH_ROTATE_MIB, see tools/bench-queue.sh) prints no 1 GiB figures.
  if [[ $name == rotate-1GB-* && ${VAULT_BENCH_ROTATE_MIB:-1024} != 1024 ]]; then continue; fi
  if ! grep -qE "^figure $name [0-9]+(\.[0-9]+)?$" "$log"; then
    echo "bench: figure $name missing or not a number" >&2
    missing=1
  fi
done
exit "$missing"
