#!/usr/bin/env bash
# Builds the libFuzzer targets (Fuzz/README.md) and runs them.
#
#   tools/fuzz.sh --list              the targets
#   tools/fuzz.sh TARGET SECONDS      build fuzz-TARGET and fuzz it for SECONDS
#   tools/fuzz.sh all SECONDS         each target in turn, SECONDS each
#   tools/fuzz.sh --build [TARGET…]   build only (all targets when none is named)
#
# Each target is an executable target of this package, built with -sanitize=fuzzer,address and
# -DFUZZING into its own scratch path (.build/fuzz), so the normal build is never touched. A run
# fuzzes a scratch copy of the checked-in corpus (Fuzz/corpus/TARGET), so the corpus in the tree
# does not grow; a crashing input is kept in .build/fuzz/artifacts/TARGET/. Prints one line per
# target: "fuzz TARGET: N execs in S s (R exec/s): clean" or "...: CRASH <artifact>".
# Exits 1 when any target crashed, 64 on a usage error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

targets=(envelope armor manifest keyfile scan json http arguments bundle)
scratch="$root/.build/fuzz"
flags=(-Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DFUZZING)

usage() {
  echo "usage: tools/fuzz.sh --list | TARGET SECONDS | all SECONDS | --build [TARGET...]" >&2
  exit 64
}

known() {
  local target
  for target in "${targets[@]}"; do [ "$target" = "$1" ] && return 0; done
  echo "tools/fuzz.sh: unknown target '$1' (tools/fuzz.sh --list)" >&2
  exit 64
}

build() {
  local log status=0
  log=$(mktemp)
  # One build at a time in the scratch path: runs started side by side (one per core) each build
  # first, and two SwiftPM builds in one scratch path broke each other's runs.
  mkdir -p "$scratch"
  (
    flock 9
    swift build -c debug --product "fuzz-$1" --scratch-path "$scratch" "${flags[@]}"
  ) 9>"$scratch.lock" >"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    cat "$log" >&2 || true
    rm -f "$log"
    echo "tools/fuzz.sh: building fuzz-$1 failed" >&2
    exit "$status"
  fi
  rm -f "$log"
}

# Runs fuzz-TARGET for SECONDS on a scratch copy of its corpus; prints the summary line.
run() {
  local target=$1 seconds=$2 work binary status=0 execs rate artifacts crash
  binary="$scratch/debug/fuzz-$target"
  artifacts="$scratch/artifacts/$target"
  mkdir -p "$artifacts"
  work=$(mktemp -d)
  mkdir "$work/corpus" "$work/tmp"
  if [ -d "Fuzz/corpus/$target" ]; then cp -R "Fuzz/corpus/$target/." "$work/corpus/"; fi
  local options=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
    -detect_leaks=0 -artifact_prefix="$artifacts/")
  if [ -f "Fuzz/dict/$target.dict" ]; then options+=(-dict="Fuzz/dict/$target.dict"); fi
  local started=$SECONDS
  TMPDIR="$work/tmp" "$binary" "${options[@]}" "$work/corpus" >"$work/log" 2>&1 || status=$?
  local elapsed=$((SECONDS - started))
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$work/log" | tail -1)
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$work/log" | tail -1)
  if [ "$status" -eq 0 ]; then
    echo "fuzz $target: ${execs:-0} execs in ${elapsed} s (${rate:-0} exec/s): clean"
  else
    crash=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$work/log" | tail -1)
    # The sanitizer's or Swift's report, without the input's bytes (an input may hold anything).
    grep -E "ERROR: (AddressSanitizer|libFuzzer)|Fatal error|SUMMARY|^ *#[0-9]+ " "$work/log" | head -30 >&2 || true
    echo "fuzz $target: ${execs:-?} execs in ${elapsed} s: CRASH ${crash:-(no artifact; see above)}"
    cp "$work/log" "$artifacts/last-crash.log"
  fi
  rm -rf "$work"
  return "$status"
}

[ $# -ge 1 ] || usage
case "$1" in
--list)
  printf '%s\n' "${targets[@]}"
  ;;
--build)
  shift
  [ $# -gt 0 ] || set -- "${targets[@]}"
  for target in "$@"; do
    known "$target"
    build "$target"
  done
  ;;
all)
  [ $# -eq 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || usage
  failed=0
  for target in "${targets[@]}"; do build "$target"; done
  for target in "${targets[@]}"; do run "$target" "$2" || failed=1; done
  exit "$failed"
  ;;
*)
  [ $# -eq 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || usage
  known "$1"
  build "$1"
  run "$1" "$2" || exit 1
  ;;
esac
