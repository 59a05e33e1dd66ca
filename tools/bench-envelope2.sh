#!/usr/bin/env bash
# Per-record seal cost of the envelope format 2 candidates (issue 11) beside format 1, measured in
# one run with OpenSSL's libcrypto (see tools/bench-envelope2/bench.c for what each candidate does).
# The XAES-256-GCM derivation is checked against the C2SP test vector before anything is timed.
#
#   tools/bench-envelope2.sh [ITERATIONS]     (default 200000; three rounds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/tools
"$tools/setup.sh" >/dev/null
binary=$(mktemp /tmp/vault-bench-envelope2.XXXXXX)
trap 'rm -f "$binary"' EXIT
gcc -O2 -Wall -Werror -o "$binary" "$tools/bench-envelope2/bench.c" -lcrypto
for round in 1 2 3; do
  echo "round $round:"
  "$binary" "${1:-200000}"
done
