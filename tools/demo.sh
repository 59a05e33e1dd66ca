#!/usr/bin/env bash
# The README's main job: an end-to-end run of vault on an embedded default, in a temporary home.
# It installs what is missing, builds, starts a private Secret Service, and then:
#   1. for each key store (Secret Service, then keyfile): creates a vault, seals a record, opens
#      it, rotates the key, opens the old record again, and shows status and doctor;
#   2. with the memo example app: sends memos while the relay server is down, rotates the key
#      mid-way (re-sealing the queued memos), brings the relay up, and delivers every memo;
#   3. telemetry: memo's own events and a few from the shell are delivered in gzip JSON batches
#      to the mock collector (tools/telemetry_server.py), which checks their format.
#
#   4. `vault scan` over the home, with every memo and event string as a canary and --verify:
#      clean; then a debug log with a memo in it, planted next to the data, is found.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ -z "${VAULT_DEMO_INSIDE:-}" ]; then
  tools/setup.sh
  log=$(mktemp)
  { swift build --product vault && swift build --product memo; } >"$log" 2>&1 || { cat "$log"; exit 1; }
  rm -f "$log"
  export VAULT_DEMO_INSIDE=1
  exec dbus-run-session -- "$root/tools/with-secret-service.sh" "$0" "$@"
fi

bin=$(swift build --show-bin-path)
vault="$bin/vault"
memo="$bin/memo"
work=$(mktemp -d /tmp/vault-demo.XXXXXX)
relay_pid=""
collector_pid=""
trap '[ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null; [ -n "$collector_pid" ] && kill "$collector_pid" 2>/dev/null; rm -rf "$work"' EXIT
record="Embedded default record: meet at the north gate at 06:40."

step() { printf '\n== %s\n' "$*"; }

for store in secret-service keyfile; do
  home="$work/$store/home"
  step "vault init --store $store"
  if [ "$store" = keyfile ]; then
    "$vault" --home "$home" init --store keyfile --keyfile "$work/$store/keys/vault.keys"
  else
    "$vault" --home "$home" init --store secret-service
  fi

  step "seal a record (context memo:1); the envelope is binary, its first bytes are the header"
  printf '%s' "$record" | "$vault" --home "$home" seal --context memo:1 >"$work/$store/record.vlt"
  echo "envelope: $(wc -c <"$work/$store/record.vlt") bytes for a ${#record}-byte record"
  head -c 17 "$work/$store/record.vlt" | od -An -tx1 -w17 | sed 's/^/header: /'
  if grep -q "north gate" "$work/$store/record.vlt"; then echo "FAIL: plaintext visible in the envelope"; exit 1; fi

  step "open it"
  opened=$("$vault" --home "$home" open --context memo:1 <"$work/$store/record.vlt")
  [ "$opened" = "$record" ] && echo "opened: the record round-trips" || { echo "FAIL: round trip"; exit 1; }

  step "open with the wrong context (expected to fail)"
  if "$vault" --home "$home" open --context memo:2 <"$work/$store/record.vlt" >/dev/null; then
    echo "FAIL: a wrong context opened the record"; exit 1
  fi

  step "vault rotate"
  "$vault" --home "$home" rotate

  step "open the record sealed before the rotation"
  opened=$("$vault" --home "$home" open --context memo:1 <"$work/$store/record.vlt")
  [ "$opened" = "$record" ] && echo "opened: old envelope still opens under decrypt-only version 1" || exit 1

  step "vault status"
  "$vault" --home "$home" status

  step "vault doctor"
  "$vault" --home "$home" doctor
done

home="$work/keyfile/home"
step "memo: send three memos while the relay server is down"
for text in "Embedded default memo one: the boiler is fixed" "memo two: order more paper" "memo three: call Ana"; do
  "$memo" --home "$home" send "$text"
done

step "memo relay with the relay down: nothing is lost, everything waits for a retry"
"$memo" --home "$home" relay --endpoint http://127.0.0.1:9/relay
"$vault" --home "$home" queue stats

step "vault rotate while memos are queued: they are re-sealed under the new key, the old key retired"
"$vault" --home "$home" rotate
"$vault" --home "$home" queue stats

step "no plaintext in the container files"
if grep -rl "boiler is fixed" "$home"; then echo "FAIL: plaintext on disk"; exit 1; fi
echo "grep found no memo text in $(ls "$home" | tr '\n' ' ')"

step "start the relay server and deliver"
python3 tools/relay_server.py --port-file "$work/relay.port" --record "$work/relay.jsonl" &
relay_pid=$!
for _ in $(seq 1 100); do [ -s "$work/relay.port" ] && break; sleep 0.05; done
sleep 1.2  # the first retry is due within about a second (backoff with full jitter)
"$memo" --home "$home" relay --endpoint "http://127.0.0.1:$(cat "$work/relay.port")/relay"
"$memo" --home "$home" history
received=$(grep -c '"status": 200' "$work/relay.jsonl")
echo "the relay server received $received memos"
[ "$received" -eq 3 ] || { echo "FAIL: expected 3 memos at the relay"; exit 1; }

step "telemetry: log events from the shell, then deliver them and memo's own events"
for screen in home settings about; do
  "$vault" --home "$home" telemetry log screen_view --payload "{\"screen\": \"$screen\"}" --session demo
done
printf 'demo-token' >"$work/token"
python3 tools/telemetry_server.py --port-file "$work/collector.port" --record "$work/collector.jsonl" --token demo-token &
collector_pid=$!
for _ in $(seq 1 100); do [ -s "$work/collector.port" ] && break; sleep 0.05; done
"$vault" --home "$home" telemetry flush --endpoint "http://127.0.0.1:$(cat "$work/collector.port")/v1/telemetry/batch" \
  --token-file "$work/token"
python3 - "$work/collector.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
accepted = sum(len(r["ids"]) for r in rows if r["status"] == 200)
malformed = [r["malformed"] for r in rows if r["malformed"]]
print(f"the collector accepted {accepted} events in {len(rows)} gzip batches; malformed: {malformed or 'none'}")
sys.exit(1 if malformed or accepted == 0 else 0)
PY

step "vault scan: no plaintext on disk (memo texts and event screens as canaries, every envelope opened)"
"$vault" --home "$home" telemetry log screen_view --payload '{"screen": "notes-archive"}' --session demo >/dev/null
printf 'still queued: remember the gas meter' | "$vault" --home "$home" queue put --queue outbox >/dev/null
printf '%s\n' "boiler is fixed" "order more paper" "call Ana" "notes-archive" "remember the gas meter" >"$work/canaries"
"$vault" --home "$home" scan "$home" --canary-file "$work/canaries" --verify

step "vault scan after a debug log with a memo in it is left next to the data (expected: a finding, exit 1)"
printf 'DEBUG saving memo: call Ana about the boiler\n' >"$home/debug.log"
if "$vault" --home "$home" scan "$home" --canary-file "$work/canaries"; then
  echo "FAIL: the planted leak was not found"; exit 1
fi

printf '\nDemo finished: both key stores sealed, opened, rotated and reopened; every memo saved offline\nsurvived a key rotation and reached the relay; telemetry reached the collector; the scan found\nno plaintext until one was planted.\n'
