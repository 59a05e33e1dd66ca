#!/usr/bin/env bash
# The README's main job: an end-to-end run of vault on an embedded default, in a temporary home.
# It installs what is missing, builds, starts a private Secret Service, and then, for each key
# store (Secret Service, then keyfile): creates a vault, seals a record, opens it, rotates the key,
# opens the old record again, and shows the vault's status and doctor report.
#
# What it does not show yet: queues, delivery and `vault scan` (later issues).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ -z "${VAULT_DEMO_INSIDE:-}" ]; then
  tools/setup.sh
  log=$(mktemp)
  swift build --product vault >"$log" 2>&1 || { cat "$log"; exit 1; }
  rm -f "$log"
  export VAULT_DEMO_INSIDE=1
  exec dbus-run-session -- "$root/tools/with-secret-service.sh" "$0" "$@"
fi

vault="$(swift build --show-bin-path)/vault"
work=$(mktemp -d /tmp/vault-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
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

printf '\nDemo finished: both key stores sealed, opened, rotated and reopened.\n'
