#!/usr/bin/env bash
# Queue benchmarks, with their baselines run side by side in the same run (this machine is noisy:
# compare the ratios, not the absolute numbers):
#   - durable single-record enqueue (200 B, 2 KiB) against plain SQLite inserts with the same
#     pragmas and no encryption (a minimal table, and one with the queue's due-record index),
#     and against Python persist-queue's put (installed in a venv under .build);
#   - group commit of 1,000 records per transaction against plain batched inserts;
#   - rotation of a full 20 MB queue of 1 KiB records;
#   - resident memory while enqueueing three times the 20 MB cap;
#   - durable enqueue of 200 B from 4 threads on one container (group commit) against 4 threads of
#     plain SQLite, each with its own connection, every insert its own durable commit (and one
#     plain thread, for what the disk gives a single writer in the same run);
#   - the same from 2 processes on one container file against 2 plain-SQLite processes on one
#     file (no group commit across processes: each commit holds one record); CPU per record too;
#   - beside both, their ceilings: each caller waits for its record to be durable before it makes
#     the next, so 4 threads (2 processes) put at most 4 (2) records in one commit; one thread
#     committing 4 (2) at a time with no hand-off is about the most a commit shared by them can
#     give (plain SQLite's rows: a design on one SQLite file with this table; vault's
#     `enqueue(contentsOf:)`: vault's seal and table), as ratios taken round by round, the order
#     of the measurements rotated from round to round; a warning when the figure passed its
#     ceiling in a round (only other work on the machine can make it);
#   - rotation of a 1 GiB container (1,048,576 records of 1 KiB, built 10,000 per transaction
#     with the byte cap raised: the default cap is 20 MB) against plain SQLite rewriting as many
#     1 KiB blobs (read each, write a changed one of the same size, 500 per transaction as
#     re-sealing does, same pragmas, then a TRUNCATE checkpoint; once before the rotation and once
#     after, the mean compared, as the load drifts over minutes); with the rotation's peak resident
#     memory (VmHWM, reset just before it) and at its first and last progress report.
#     VAULT_BENCH_ROTATE_MIB sets another size (its figure is then not printed). Needs about
#     3 GB free under /tmp and several minutes.
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
# Each mode makes its own vault in its own directory.
mkdir "$work/threads" "$work/procs" "$work/rotate"
while read -r name value; do r[$name]=$value; done < <("$bench" "$work/threads" "$seconds" threads)
while read -r name value; do r[$name]=$value; done < <("$bench" "$work/procs" "$seconds" procs)
rotate_mib=${VAULT_BENCH_ROTATE_MIB:-1024}
while read -r name value; do r[$name]=$value; done < <(
  /usr/bin/time -o "$work/rotate.time" -f '%M' "$bench" "$work/rotate" "$seconds" rotate "$rotate_mib")
r[rotate_big_process_max_rss_mib]=$(awk '{ printf "%.1f", $1 / 1024 }' "$work/rotate.time")
r[peer_200]=$(peer_put 200)
r[peer_2048]=$(peer_put 2048)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
# Against the faster of the two plain runs: four plain connections on one file sometimes sleep in
# SQLite's busy handler (an outside review saw 433/s beside 4,289/s from one plain thread), and a
# collapsed baseline would pass the goal for nothing.
plain_4=$(awk -v a="${r[threads_4_plain_per_s]}" -v b="${r[threads_1_plain_per_s]}" 'BEGIN { print (a > b ? a : b) }')
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
printf 'enqueue from 4 threads (200 B): vault %6.0f/s  plain, 4 connections %6.0f/s (%sx)  plain, 1 thread %6.0f/s (the figure divides by the faster)  vault p50 %.3f ms p99 %.3f ms  plain p99 %.3f ms\n' \
  "${r[threads_4_vault_per_s]}" "${r[threads_4_plain_per_s]}" \
  "$(ratio "${r[threads_4_vault_per_s]}" "${r[threads_4_plain_per_s]}")" "${r[threads_1_plain_per_s]}" \
  "${r[threads_4_vault_p50_ms]}" "${r[threads_4_vault_p99_ms]}" "${r[threads_4_plain_p99_ms]}"
printf 'enqueue from 2 processes (200 B): vault %6.0f/s  plain %6.0f/s (%sx)  vault p50 %.3f ms p99 %.3f ms  plain p99 %.3f ms  CPU per record: vault %.0f us, plain %.0f us\n' \
  "${r[procs_2_vault_per_s]}" "${r[procs_2_plain_per_s]}" \
  "$(ratio "${r[procs_2_vault_per_s]}" "${r[procs_2_plain_per_s]}")" "${r[procs_2_vault_p50_ms]}" \
  "${r[procs_2_vault_p99_ms]}" "${r[procs_2_plain_p99_ms]}" "${r[procs_2_vault_cpu_us_per_record]}" \
  "${r[procs_2_plain_cpu_us_per_record]}"
# Ceilings: each caller waits for its record to be durable before it makes the next, so N callers
# put at most N records in a commit; one thread committing N at a time, with no hand-off, is the
# most such a group commit can give (plain SQLite's N rows: any design on one SQLite file with
# this table; vault's N records: vault's). Ratios taken round by round, against the figure's own
# baseline in that round.
printf 'ceilings of a commit shared by synchronous callers: 4 threads: vault 4 records a commit %.2fx, plain 4 rows a commit %.2fx (the figure %.2fx by round); 2 processes: vault 2 records a commit %.2fx, plain 2 rows a commit %.2fx (the figure %.2fx by round)\n' \
  "${r[threads_4_ceiling_vs_plain]}" "${r[threads_4_plain_ceiling_vs_plain]}" "${r[threads_4_vs_plain_by_round]}" \
  "${r[procs_2_ceiling_vs_plain]}" "${r[procs_2_plain_ceiling_vs_plain]}" "${r[procs_2_vs_plain_by_round]}"
for prefix in threads_4 procs_2; do
  if [ "${r[${prefix}_rounds_above_ceiling]%.*}" != 0 ]; then
    echo "warning: in ${r[${prefix}_rounds_above_ceiling]%.*} of 3 rounds ($prefix) the figure passed vault's ceiling, which only other work on the machine can do: rerun on a quiet machine" >&2
  fi
done
printf 'rotation of %s MiB (%.0f records of 1 KiB, file %.0f MiB, built in %.1f s): vault %.1f s  plain rewrite %.1f s (%.1f s before, %.1f s after) (%sx); in the rotation: %.1f s after the last batch (counting alone: %.1f s); opening and sealing alone: %.1f s\n' \
  "$rotate_mib" "${r[rotate_big_records]}" "${r[rotate_big_vault_file_mib]}" "${r[rotate_big_build_seconds]}" \
  "${r[rotate_big_vault_seconds]}" "${r[rotate_big_plain_seconds]}" "${r[rotate_big_plain_before_seconds]}" \
  "${r[rotate_big_plain_after_seconds]}" \
  "$(ratio "${r[rotate_big_plain_seconds]}" "${r[rotate_big_vault_seconds]}")" \
  "${r[rotate_big_vault_after_last_batch_seconds]}" "${r[rotate_big_count_seconds]}" \
  "${r[rotate_big_crypto_only_seconds]}"
printf 'rotation memory: RSS %.1f MiB before, %.1f MiB at the first batch, %.1f MiB at the last sampled (%.0f progress reports), peak %.1f MiB; whole process max %.1f MiB\n' \
  "${r[rotate_big_rss_before_mib]}" "${r[rotate_big_rss_first_batch_mib]}" "${r[rotate_big_rss_last_batch_mib]}" \
  "${r[rotate_big_progress_reports]}" "${r[rotate_big_rss_peak_mib]}" "${r[rotate_big_process_max_rss_mib]}"
# The summary lines tools/bench.sh collects (names stable over time).
echo "figure enqueue-200B-vs-plain $(ratio "${r[single_200_vault_per_s]}" "${r[single_200_plain_per_s]}")"
printf 'figure enqueue-200B-p99-ms %.3f\n' "${r[single_200_vault_p99_ms]}"
echo "figure enqueue-4threads-vs-plain $(ratio "${r[threads_4_vault_per_s]}" "$plain_4")"
printf 'figure enqueue-4threads-p99-ms %.3f\n' "${r[threads_4_vault_p99_ms]}"
echo "figure enqueue-2procs-vs-plain $(ratio "${r[procs_2_vault_per_s]}" "${r[procs_2_plain_per_s]}")"
printf 'figure enqueue-4threads-ceiling-vs-plain %.2f\n' "${r[threads_4_ceiling_vs_plain]}"
printf 'figure enqueue-4threads-plain-ceiling-vs-plain %.2f\n' "${r[threads_4_plain_ceiling_vs_plain]}"
printf 'figure enqueue-2procs-ceiling-vs-plain %.2f\n' "${r[procs_2_ceiling_vs_plain]}"
printf 'figure enqueue-2procs-plain-ceiling-vs-plain %.2f\n' "${r[procs_2_plain_ceiling_vs_plain]}"
if [ "$rotate_mib" = 1024 ]; then
  echo "figure rotate-1GB-vs-plain $(ratio "${r[rotate_big_plain_seconds]}" "${r[rotate_big_vault_seconds]}")"
  printf 'figure rotate-1GB-peak-rss-mib %.1f\n' "${r[rotate_big_rss_peak_mib]}"
fi
