#!/usr/bin/env bash
# CPU cost of waiting and of sending, for the HTTP client shared by telemetry and the outbox, with
# curl(1) run side by side as the baseline (an event-driven client: it sleeps in poll(2)):
#   - idle: `vault telemetry watch` against a collector that accepts and never answers, for
#     SECONDS of wall time (default 60); CPU seconds used by the process, and by `curl` waiting on
#     the same collector for the same time;
#   - per batch: `vault telemetry flush` of one batch to a collector that answers after 5 s; CPU
#     seconds of the whole command (open, claim, gzip, POST, ack), and of `curl` doing the POST.
#
#   tools/bench-http-cpu.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-60}

tools/setup.sh
swift build -c release --product vault 2>&1 | grep -v "prohibited flag" | tail -1
vault="$(swift build -c release --show-bin-path)/vault"
work=$(mktemp -d /tmp/vault-http-cpu.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

start_server() {  # start_server NAME MODE -> port in $work/NAME.port
  python3 tools/telemetry_server.py --port-file "$work/$1.port" --record "$work/$1.jsonl" --mode "$2" &
  pids+=($!)
  for _ in $(seq 1 100); do [ -s "$work/$1.port" ] && break; sleep 0.05; done
}
# utime + stime of a live process, in seconds (clock ticks from /proc/PID/stat).
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

start_server hung hang
start_server slow slow
hung="http://127.0.0.1:$(cat "$work/hung.port")/v1/telemetry/batch"
slow="http://127.0.0.1:$(cat "$work/slow.port")/v1/telemetry/batch"
printf 'test-token\n' >"$work/token"
home="$work/home"
"$vault" --home "$home" init --store keyfile --keyfile "$work/keys/vault.keys" >/dev/null
"$vault" --home "$home" telemetry log bench --payload '{"n": 1}' >/dev/null

# Idle: the watcher sends its one event and waits for an answer that never comes.
"$vault" --home "$home" telemetry watch --endpoint "$hung" --token-file "$work/token" --interval 3600 \
  >/dev/null 2>&1 &
watcher=$!
pids+=($watcher)
curl -s -o /dev/null --max-time "$((seconds + 5))" -X POST -H 'Content-Type: application/json' --data '{}' "$hung" &
curler=$!
pids+=($curler)
sleep "$seconds"
watch_cpu=$(cpu_of "$watcher")
curl_cpu=$(cpu_of "$curler")
kill "$watcher" "$curler" 2>/dev/null || true
wait "$watcher" "$curler" 2>/dev/null || true
printf 'idle %ss against a hung collector: telemetry watch %.2f s CPU (%.1f%% of a core), curl %.2f s CPU\n' \
  "$seconds" "$watch_cpu" "$(awk -v c="$watch_cpu" -v s="$seconds" 'BEGIN { print 100 * c / s }')" "$curl_cpu"

# Per batch: 50 events in one batch to a collector that answers 200 after 5 s; CPU of the whole
# `telemetry flush` command, beside curl POSTing to the same collector.
for i in $(seq 1 50); do
  "$vault" --home "$home" telemetry log bench --payload "{\"i\": $i}" >/dev/null
done
/usr/bin/time -f '%U %S' -o "$work/flush.time" "$vault" --home "$home" telemetry flush --endpoint "$slow" \
  --token-file "$work/token" --json >"$work/flush.json"
/usr/bin/time -f '%U %S' -o "$work/curl.time" curl -s -o /dev/null --max-time 30 -X POST --data '{}' "$slow"
sum() { awk '{ print $1 + $2 }' "$1"; }
batches=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["batches"])' "$work/flush.json")
delivered=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["delivered"])' "$work/flush.json")
printf 'one batch answered after 5 s: telemetry flush %.2f s CPU (%s events, %s batch), curl %.2f s CPU\n' \
  "$(sum "$work/flush.time")" "$delivered" "$batches" "$(sum "$work/curl.time")"
