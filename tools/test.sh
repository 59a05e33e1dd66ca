#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything with warnings as errors,
# and runs every test with a real Secret Service (gnome-keyring on a private D-Bus session).
#
#   tools/test.sh            all tests
#   tools/test.sh FILTER     only tests matching FILTER (swift test --filter)
#
# The whole run (no FILTER) also runs each fuzz target for VAULT_FUZZ_SECONDS (10; 0 skips them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tools/setup.sh
if [ -x .build/pyvenv/bin/python3 ]; then export PATH="$root/.build/pyvenv/bin:$PATH"; fi

# Warnings are errors for every target (Package.swift), so this build is the warnings gate.
status=0
swift build --build-tests || status=$?
[ "$status" -eq 0 ] || { echo "test.sh: build failed" >&2; exit "$status"; }

# Formatting is part of the build: the repository's .swift-format, strictly.
if ! swift format lint --strict -r Sources Tests Package.swift tools/bench tools/crash Fuzz; then
  echo "test.sh: swift format lint failed; run: swift format format --in-place -r Sources Tests Package.swift tools/bench tools/crash Fuzz" >&2
  exit 1
fi

export VAULT_REQUIRE_INTEROP=1
export VAULT_BINARY="$root/.build/debug/vault"
filter=()
[ $# -gt 0 ] && filter=(--filter "$1")
# Tests share one private keyring and lock/replace it in places, so they run serially.
# All tests are XCTest; Swift Testing is switched off so its empty run is not the closing line.
log=$(mktemp)
status=0
dbus-run-session -- "$root/tools/with-secret-service.sh" \
  swift test --skip-build --disable-swift-testing "${filter[@]}" 2>&1 | tee "$log" || status=$?
# XCTest's last "Executed N tests, with K tests skipped and F failures" line is the whole run.
summary=$(grep -E '^[[:space:]]*Executed [0-9]+ tests?' "$log" | tail -1)
executed=$(echo "$summary" | sed -nE 's/.*Executed ([0-9]+) tests?.*/\1/p')
skipped=$(echo "$summary" | sed -nE 's/.* ([0-9]+) tests? skipped.*/\1/p')
# XCTest's "failures" counts failed assertions; count failed test cases instead.
failed=$(grep -cE "^Test Case '.*' failed" "$log" || true)
rm -f "$log"
executed=${executed:-0} skipped=${skipped:-0} failed=${failed:-0}
if [ "$executed" -eq 0 ] && [ "$status" -eq 0 ]; then
  echo "test.sh: no test ran" >&2
  status=1
fi
echo "tests: $((executed - skipped - failed)) passed, $failed failed, $skipped skipped"
# The whole run also proves the library products from outside: a package depending on this one.
if [ $# -eq 0 ]; then
  tools/check-consumer.sh "$VAULT_BINARY" || status=1
  tools/check-notes-app.sh "$VAULT_BINARY" || status=1
  tools/check-memo-public.sh || status=1
  python3 tools/check-doc-snippets.py || status=1
fi
# And the API documentation builds without a docc warning (a broken symbol link fails it).
if [ $# -eq 0 ]; then
  tools/docs.sh >/dev/null || { echo "test.sh: tools/docs.sh failed" >&2; status=1; }
  python3 tools/doc-audit.py --check || status=1   # every public symbol documented
fi
# Every fuzz target runs briefly from its seeds (Fuzz/README.md): measured at 40 s to build them
# from nothing and 96 s to run eight for 10 s each (the ninth, bundle, came later). VAULT_FUZZ_SECONDS=0 skips this step.
fuzz_seconds=${VAULT_FUZZ_SECONDS:-10}
if [ $# -eq 0 ] && [ "$fuzz_seconds" != 0 ]; then
  tools/fuzz.sh all "$fuzz_seconds" || { echo "test.sh: tools/fuzz.sh all $fuzz_seconds failed" >&2; status=1; }
fi
exit "$status"
