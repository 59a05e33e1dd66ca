#!/usr/bin/env bash
# Queue benchmarks, with their baselines run side by side in the same run (this machine is noisy:
# compare the ratios, not the absolute numbers):
#   - durable single-record enqueue (200 B, 2 KiB) against plain SQLite inserts with the same
#     pragmas and no encryption (a minimal table, and one with the queue's due-record index),
#     and against Python persist-queue's put (installed in a venv under .build);
#   - group commit of 1,000 records per transaction against plain batched inserts;
#   - rotation of a full 20 MB queue of 1 KiB records;
#   - resident memory while enqueueing three times the 20 MB cap.
#
#   tools/bench-queue.sh [SECONDS]     (default 3 seconds per measurement)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-3}

tools/setup.sh
swift build -c release --product vault-queue-bench 2>&1 | grep -v "prohibited flag" | tail -1
bench="$(swift build -c release --show-bin-path)/vault-queue-bench"
work=$(mktemp -d /tmp/vault-queue-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

venv="$root/.build/bench-venv"
if [ ! -x "$venv/bin/python3" ] || ! "$venv/bin/python3" -c 'import persistqueue' 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q persist-queue
fi
peer_put() {  # records/s of persist-queue's SQLiteQueue.put with auto_commit (durable per put)
  "$venv/bin/python3" - "$work/peer-$1" "$1" "$seconds" <<'PY'
import sys, time, persistqueue
path, size, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
queue = persistqueue.SQLiteQueue(path, auto_commit=True)
body, count, start = b"a" * size, 0, time.monotonic()
while time.monotonic() - start < seconds:
    queue.put(body)
    count += 1
print(count / (time.monotonic() - start))
PY
}

declare -A r
while read -r name value; do r[$name]=$value; done < <("$bench" "$work" "$seconds")
r[peer_200]=$(peer_put 200)
r[peer_2048]=$(peer_put 2048)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
for size in 200 2048; do
  printf 'single enqueue %5s B: vault %8.0f/s  plain %8.0f/s (%sx)  plain+index %8.0f/s (%sx)  persist-queue %7.0f/s (%sx)  p50 %.3f ms  p99 %.3f ms\n' \
    "$size" "${r[single_${size}_vault_per_s]}" "${r[single_${size}_plain_per_s]}" \
    "$(ratio "${r[single_${size}_vault_per_s]}" "${r[single_${size}_plain_per_s]}")" \
    "${r[single_${size}_plain_indexed_per_s]}" \
    "$(ratio "${r[single_${size}_vault_per_s]}" "${r[single_${size}_plain_indexed_per_s]}")" \
    "${r[peer_$size]}" "$(ratio "${r[single_${size}_vault_per_s]}" "${r[peer_$size]}")" \
    "${r[single_${size}_vault_p50_ms]}" "${r[single_${size}_vault_p99_ms]}"
done
printf 'group commit 1000/tx:  vault %8.0f/s  plain %8.0f/s (%sx)\n' "${r[group_1000_vault_per_s]}" \
  "${r[group_1000_plain_per_s]}" "$(ratio "${r[group_1000_vault_per_s]}" "${r[group_1000_plain_per_s]}")"
printf 'rotation with a full 20 MB queue: %.0f records in %.0f containers in %.3f s (%.0f records/s)\n' "${r[rotate_records]}" "${r[rotate_containers]}" \
  "${r[rotate_seconds]}" "${r[rotate_records_per_s]}"
printf 'memory at the 20 MB cap: RSS %.1f MiB at the cap, %.1f MiB after 3x the cap (%.0f records kept, %.0f dropped)\n' \
  "${r[cap_rss_at_cap_mib]}" "${r[cap_rss_after_3x_cap_mib]}" "${r[cap_records]}" "${r[cap_dropped]}"
# The summary lines tools/bench.sh collects (names stable over time).
echo "figure enqueue-200B-vs-plain $(ratio "${r[single_200_vault_per_s]}" "${r[single_200_plain_per_s]}")"
printf 'figure enqueue-200B-p99-ms %.3f\n' "${r[single_200_vault_p99_ms]}"
