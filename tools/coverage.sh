#!/usr/bin/env bash
# Runs every test with code coverage (as tools/test.sh does, with the private Secret Service) and
# prints line coverage per module, from llvm-cov. Only the test process is measured: code that runs
# in child processes (the vault and memo binaries in end-to-end tests) is not counted.
#
#   tools/coverage.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools/setup.sh
if [ -x .build/pyvenv/bin/python3 ]; then export PATH="$root/.build/pyvenv/bin:$PATH"; fi
swift build --build-tests --enable-code-coverage >/dev/null 2>&1
export VAULT_BINARY="$root/.build/debug/vault"
dbus-run-session -- tools/with-secret-service.sh \
  swift test --skip-build --enable-code-coverage --disable-swift-testing >/dev/null 2>&1 || {
  echo "coverage.sh: tests failed; run tools/test.sh" >&2
  exit 1
}
llvm_cov="$(dirname "$(readlink -f "$(command -v swift)")")/llvm-cov"
profile=$(find .build/debug/codecov -name default.profdata | head -1)
"$llvm_cov" report .build/debug/vaultPackageTests.xctest -instr-profile="$profile" \
  -ignore-filename-regex='(Tests|tools|\.build)/' 2>/dev/null |
  awk '$1 ~ /\.swift$/ { split($1, p, "/"); lines[p[1]] += $8; missed[p[1]] += $9 }
       END { for (m in lines) printf "%-14s %6d lines %5d missed  %6.2f%%\n", m, lines[m], missed[m], 100 * (lines[m] - missed[m]) / lines[m] }' |
  sort
