#!/usr/bin/env bash
# Runs the XCTest suite under AddressSanitizer (with LeakSanitizer) and/or ThreadSanitizer.
#
#   tools/sanitize.sh                     address, then thread, whole suite
#   tools/sanitize.sh address|thread|all [FILTER]
#
# Each sanitizer builds into its own scratch path (.build/sanitize-address, .build/sanitize-thread),
# so the normal build in .build/debug is never touched. The tests run as tools/test.sh runs them:
# serially, with a real Secret Service (gnome-keyring on a private D-Bus session), and with
# VAULT_BINARY set to the sanitized `vault`, so the CLI processes the tests spawn (vault, memo, the
# workers beside it) are sanitized too, and VAULT_SANITIZER set to the sanitizer's name, so the
# tests that cannot pass under it by design skip, each with its reason.
#
# Every sanitized process writes its reports to a file (log_path) under the scratch path's
# reports/ directory rather than to its stderr, so tests that compare a child's stderr still see
# only the child's own output, and no report can hide in a test's captured output. The run fails
# (exit 1) when any report file exists, when a test failed, or when no test ran; it prints each
# report. Known reports that are not ours are suppressed in tools/sanitize/*.supp, one commented
# entry each (never a frame in our own modules).
#
# The summary line per sanitizer: "sanitize SAN: N passed, F failed, S skipped, R reports, T s".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() {
  echo "usage: tools/sanitize.sh [address|thread|all] [FILTER]" >&2
  exit 64
}

which=${1:-all}
case "$which" in
  address) sanitizers=(address) ;;
  thread) sanitizers=(thread) ;;
  all) sanitizers=(address thread) ;;
  -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) usage ;;
esac
[ $# -le 2 ] || usage
filter=()
[ $# -eq 2 ] && filter=(--filter "$2")

tools/setup.sh
if [ -x .build/pyvenv/bin/python3 ]; then export PATH="$root/.build/pyvenv/bin:$PATH"; fi

supp="$root/tools/sanitize"

# Runs one sanitizer; sets `result` to its exit status and prints its summary line.
run() {
  local san=$1 scratch="$root/.build/sanitize-$1" log reports status=0 started=$SECONDS
  local flags=(--sanitize="$san" --scratch-path "$scratch" -Xswiftc -warnings-as-errors)
  reports="$scratch/reports"
  log=$(mktemp)
  if ! swift build --build-tests "${flags[@]}" >"$log" 2>&1; then
    cat "$log" >&2 || true
    rm -f "$log"
    echo "tools/sanitize.sh: the $san build failed" >&2
    result=1
    return
  fi
  rm -f "$log"
  rm -rf "$reports"
  mkdir -p "$reports"

  # Options common to both: reports to files named after the sanitizer and the pid; symbolized.
  local common="log_path=$reports/$san:log_exe_name=1:symbolize=1:strip_path_prefix=$root/"
  # VAULT_SANITIZER: the few tests that cannot pass under this sanitizer by design of the test
  # skip with their reason (Tests/VaultTestSupport/Sanitizer.swift); nothing else sets it.
  local env=(VAULT_REQUIRE_INTEROP=1 VAULT_BINARY="$scratch/debug/vault" VAULT_SANITIZER="$san")
  if [ "$san" = address ]; then
    # detect_leaks: LeakSanitizer at each process's exit. halt_on_error stays on (the default):
    # a process that corrupted memory must not go on.
    env+=(ASAN_OPTIONS="$common:detect_leaks=1:suppressions=$supp/asan.supp"
      LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0")
  else
    # halt_on_error=0: every race is reported, not just the first; the process exits 66 if any was.
    env+=(TSAN_OPTIONS="$common:halt_on_error=0:second_deadlock_stack=1:suppressions=$supp/tsan.supp:print_suppressions=0")
  fi

  log="$scratch/test.log"
  env "${env[@]}" dbus-run-session -- "$root/tools/with-secret-service.sh" \
    swift test --skip-build --disable-swift-testing "${flags[@]}" "${filter[@]}" >"$log" 2>&1 || status=$?
  local summary executed skipped failed count
  summary=$(grep -E '^[[:space:]]*Executed [0-9]+ tests?' "$log" | tail -1 || true)
  executed=$(echo "$summary" | sed -nE 's/.*Executed ([0-9]+) tests?.*/\1/p')
  skipped=$(echo "$summary" | sed -nE 's/.* ([0-9]+) tests? skipped.*/\1/p')
  failed=$(grep -cE "^Test Case '.*' failed" "$log" || true)
  executed=${executed:-0} skipped=${skipped:-0} failed=${failed:-0}
  grep -E "^Test Case '.*' failed|error: |^Fatal error" "$log" >&2 || true
  count=$(find "$reports" -type f | wc -l)
  if [ "$count" -gt 0 ]; then
    echo "tools/sanitize.sh: $count $san report file(s) in $reports:" >&2
    local file
    for file in "$reports"/*; do
      echo "==== $file" >&2
      cat "$file" >&2
    done
  fi
  if [ "$executed" -eq 0 ] || [ "$failed" -gt 0 ] || [ "$count" -gt 0 ]; then
    [ "$status" -ne 0 ] || status=1
  fi
  # XCTest exits non-zero on a failure; a sanitizer at exit (LeakSanitizer 23, ThreadSanitizer 66)
  # also does, with its report in a file already counted above.
  echo "sanitize $san: $((executed - skipped - failed)) passed, $failed failed, $skipped skipped," \
    "$count reports, $((SECONDS - started)) s (log: $log)"
  result=$status
}

overall=0
for san in "${sanitizers[@]}"; do
  result=0
  run "$san"
  [ "$result" -eq 0 ] || overall=1
done
exit "$overall"
