#!/usr/bin/env bash
# Builds Examples/Contract — a separate package that depends on this one by path and uses only its
# library products — and runs it against a fresh keyfile vault, as an app developer would.
#
#   tools/check-consumer.sh [VAULT_BINARY]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
vault=${1:-$root/.build/debug/vault}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log="$work/build.log"
if ! swift build --package-path "$root/Examples/Contract" >"$log" 2>&1; then
  cat "$log" >&2
  echo "check-consumer: Examples/Contract does not build against the library products" >&2
  exit 1
fi
"$vault" --home "$work/home" init --store keyfile --keyfile "$work/keys/vault.keys" >/dev/null 2>&1
output=$("$(swift build --package-path "$root/Examples/Contract" --show-bin-path)/Contract" "$work/home")
if [ "$output" != "ok" ]; then
  echo "check-consumer: the contract printed '$output', not 'ok'" >&2
  exit 1
fi
echo "check-consumer: Examples/Contract built and ran: ok"
