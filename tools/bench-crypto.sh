#!/usr/bin/env bash
# Seal/open throughput of vault envelopes against OpenSSL's own AES-256-GCM speed, side by side in
# one run on this machine (absolute numbers are noisy here; the ratios are what to compare).
#
#   tools/bench-crypto.sh [SECONDS]      (default 2 seconds per measurement)
#
# Targets (issue 2): seal and open ≥ 0.8× OpenSSL at 16 KiB and ≥ 0.5× at 1 KiB.
# OpenSSL 3.0's `speed -evp aes-256-gcm` times one whole message per buffer: EVP_CipherInit_ex with
# the key and IV (a GCM key schedule each time), one EVP_EncryptUpdate, EVP_EncryptFinal_ex and the
# tag, no AAD (seen with perf). vault's figure is a format-2 seal through Vault.seal: the shared
# manifest lock and stat that keep a seal safe across rotation, a getrandom(2) call, two SHA-256
# hashes, the XAES key derivation and a GCM re-key, the 89-byte envelope and its allocation.
# Both rates are bytes per second of CPU time (OpenSSL's: user time; vault-bench's: user and system
# time of its thread), so other builds sharing the machine do not move the ratio.
# Beside them, the floor: the same format-2 work written in C with nothing else (getrandom, the two
# hashes through OpenSSL's low-level SHA-256, the derivation, GCM into a ready buffer, a context as
# long as vault-bench's; tools/bench-envelope2/bench.c --floor): what format 2 costs here through
# OpenSSL with no lock, no manifest check and no allocation. It is not a hard ceiling: an outside
# review sealed with libsodium's AES-256-GCM faster still at 64 B and 1 KiB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-2}
sizes=(64 1024 16384)

tools/setup.sh
swift build -c release --product vault-bench 2>&1 | grep -v "prohibited flag" | tail -1
bench="$(swift build -c release --show-bin-path)/vault-bench"

declare -A openssl_rate
for size in "${sizes[@]}"; do
  # `openssl speed` reports thousands of bytes per second, e.g. "aes-256-gcm  1712345.67k".
  line=$(openssl speed -evp aes-256-gcm -bytes "$size" -seconds "$seconds" 2>/dev/null | grep -E '^(aes-256-gcm|AES-256-GCM)' | tail -1)
  k=$(echo "$line" | awk '{print $NF}' | tr -d 'k')
  openssl_rate[$size]=$(awk -v k="$k" 'BEGIN { printf "%.0f", k * 1000 }')
done

declare -A vault_rate
context=""
while read -r op size rate; do
  if [ "$op" = context ]; then context=$size; else vault_rate[$op-$size]=$rate; fi
done < <("$bench" "$seconds" "${sizes[@]}")
[ -n "$context" ] || { echo "bench-crypto: vault-bench did not say its context's length" >&2; exit 1; }

floor_binary=$(mktemp /tmp/vault-bench-floor.XXXXXX)
trap 'rm -f "$floor_binary"' EXIT
"$(command -v gcc || command -v clang)" -O2 -Wall -Werror -o "$floor_binary" tools/bench-envelope2/bench.c -lcrypto
while read -r op size rate; do
  vault_rate[$op-$size]=$rate
done < <("$floor_binary" --floor "$seconds" "$context" "${sizes[@]}")

printf '%-6s %8s %14s %14s %14s %14s %8s %8s %8s\n' size "" "openssl MB/s" "seal MB/s" "open MB/s" "floor MB/s" \
  "seal/x" "open/x" "floor/x"
for size in "${sizes[@]}"; do
  awk -v s="$size" -v o="${openssl_rate[$size]}" -v se="${vault_rate[seal-$size]}" -v op="${vault_rate[open-$size]}" \
    -v f="${vault_rate[floor-$size]}" \
    'BEGIN { printf "%-6s %8s %14.1f %14.1f %14.1f %14.1f %8.2f %8.2f %8.2f\n", s, "bytes", o/1e6, se/1e6, op/1e6, f/1e6, se/o, op/o, f/o }'
done
# The summary lines tools/bench.sh collects (names stable over time).
figure() { awk -v v="$2" -v o="$3" -v n="$1" 'BEGIN { printf "figure %s %.2f\n", n, v / o }'; }
figure seal-16KiB-vs-openssl "${vault_rate[seal-16384]}" "${openssl_rate[16384]}"
figure seal-1KiB-vs-openssl "${vault_rate[seal-1024]}" "${openssl_rate[1024]}"
figure seal-64B-vs-openssl "${vault_rate[seal-64]}" "${openssl_rate[64]}"
figure open-1KiB-vs-openssl "${vault_rate[open-1024]}" "${openssl_rate[1024]}"
figure seal-floor-16KiB-vs-openssl "${vault_rate[floor-16384]}" "${openssl_rate[16384]}"
figure seal-floor-1KiB-vs-openssl "${vault_rate[floor-1024]}" "${openssl_rate[1024]}"
figure seal-floor-64B-vs-openssl "${vault_rate[floor-64]}" "${openssl_rate[64]}"
