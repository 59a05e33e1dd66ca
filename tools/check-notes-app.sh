#!/usr/bin/env bash
# Builds Examples/NotesApp (a separate package using only the library products) and runs it as a
# user would: notes saved while the server is down, then a sync that delivers them to the relay
# (tools/relay_server.py, POST /notes) and their telemetry to the collector
# (tools/telemetry_server.py), and finally `vault scan --verify` over its home with every note as
# a canary: nothing readable on disk; then the same audit in-process (`notes HOME audit`), and the
# guide's test set-up (`notes DIR selftest`).
#
#   tools/check-notes-app.sh [VAULT_BINARY]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
vault=${1:-$root/.build/debug/vault}
work=$(mktemp -d)
relay_pid="" collector_pid=""
trap '[ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null; [ -n "$collector_pid" ] && kill "$collector_pid" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "check-notes-app: $*" >&2; exit 1; }

log="$work/build.log"
swift build --package-path "$root/Examples/NotesApp" >"$log" 2>&1 ||
  { cat "$log" >&2; fail "Examples/NotesApp does not build"; }
notes="$(swift build --package-path "$root/Examples/NotesApp" --show-bin-path)/notes"
home="$work/home"
"$vault" --home "$home" init --store keyfile --keyfile "$work/keys/vault.keys" >/dev/null 2>&1

texts=("canary-note-one: buy saffron" "canary-note-two: call the plumber at nine" "canary-note-three: ship it")
for text in "${texts[@]}"; do "$notes" "$home" add "$text" >/dev/null; done

python3 "$root/tools/relay_server.py" --port-file "$work/relay.port" --record "$work/relay.jsonl" &
relay_pid=$!
printf 'notes-token\n' >"$work/token"
python3 "$root/tools/telemetry_server.py" --port-file "$work/collector.port" --record "$work/collector.jsonl" \
  --token notes-token &
collector_pid=$!
for _ in $(seq 1 100); do [ -s "$work/relay.port" ] && [ -s "$work/collector.port" ] && break; sleep 0.1; done
relay="http://127.0.0.1:$(cat "$work/relay.port")/notes"
collector="http://127.0.0.1:$(cat "$work/collector.port")/v1/telemetry/batch"

output=$("$notes" "$home" sync "$relay" "$collector" "$work/token")
echo "$output" | grep -q "notes delivered 3, retrying 0, parked 0, rejected 0" || fail "sync said: $output"
echo "$output" | grep -q "events delivered 3 in 1 batches" || fail "sync said: $output"
for text in "${texts[@]}"; do
  python3 - "$work/relay.jsonl" "$text" <<'PY' || fail "the relay did not get '$2' as a text/plain body"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert any(r.get("body") == sys.argv[2] and r.get("content_type", "").startswith("text/plain") and r.get("id") for r in rows)
PY
done
[ "$("$notes" "$home" list | wc -l)" -eq 3 ] || fail "list did not show three notes"
canaries=()
for text in "${texts[@]}"; do canaries+=(--canary "$text"); done
scan=$("$vault" --home "$home" scan "$home" "${canaries[@]}" --verify) || fail "vault scan found something: $scan"
# The same audit in-process, with the app's container open: it must find nothing, and the app then
# sends through the same container (InProcessScanTests shows its SQLite locks are kept).
audit=$("$notes" "$home" audit "${texts[@]}") || fail "the in-process audit failed: $audit"
echo "$audit" | grep -q "clean and complete" || fail "the in-process audit said: $audit"
# The guide's test set-up (docs/INTEGRATING.md, "test doubles"), run: two refusals park a message.
mkdir "$work/selftest"
selftest=$("$notes" "$work/selftest" selftest) || fail "notes selftest failed: $selftest"
[ "$selftest" = "selftest: retrying 1, parked 1, rejected 1" ] || fail "notes selftest said: $selftest"
echo "check-notes-app: Examples/NotesApp saved 3 notes offline, delivered them and their telemetry, and left nothing readable; its test set-up parks and rejects as the guide says"
