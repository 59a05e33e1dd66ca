#!/usr/bin/env bash
# Runs every benchmark, each beside its baseline in the same run (this machine is noisy: the
# ratios matter, not the absolute figures), and ends with one line per figure, exactly
#
#   figure NAME VALUE
#
# with VALUE a ratio (vault / baseline, higher is better) or a number with its unit in the name
# (`-ms`). The names are stable over time (issue 15). Figures not measured yet are listed on a
# comment line after them.
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
  "$@" 2>&1 | tee -a "$log"
  echo
}
run "seal and open beside openssl speed" tools/bench-crypto.sh "$seconds"
run "durable enqueue beside plain SQLite" tools/bench-queue.sh "$seconds"
run "telemetry log from 4 threads beside plain SQLite" tools/bench-telemetry.sh "$seconds"
run "scan beside grep" tools/bench-scan.sh 100

echo "== summary"
grep -E '^figure [A-Za-z0-9-]+ [0-9.]+$' "$log"
echo "# not measured yet: enqueue-4threads-vs-plain enqueue-2procs-vs-plain rotate-1GB-vs-plain"
