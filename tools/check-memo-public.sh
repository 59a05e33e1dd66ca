#!/usr/bin/env bash
# Builds memo's sources (Sources/memo/*.swift) as an outside package would: a temporary package,
# outside this repository, that depends on it by path and sees only its library products (Vault,
# VaultQueue, Outbox, Telemetry), with warnings as errors. (The target is MemoPublic: target names
# are unique across a package graph, and vault has a `memo`.) Fails when memo needs anything that is
# not public API.
#
#   tools/check-memo-public.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# SwiftPM names a path dependency after its directory, lowercased (as Examples/Contract/Package.swift
# computes it), so the name depends on where vault was checked out.
name=$(basename "$root" | tr '[:upper:]' '[:lower:]')
mkdir -p "$work/MemoPublic/Sources/MemoPublic"
for source in "$root"/Sources/memo/*.swift; do ln -s "$source" "$work/MemoPublic/Sources/MemoPublic/"; done
cat >"$work/MemoPublic/Package.swift" <<PACKAGE
// swift-tools-version: 6.2
import PackageDescription

let package = Package(
  name: "MemoPublic",
  dependencies: [.package(path: "$root")],
  targets: [
    .executableTarget(
      name: "MemoPublic",
      dependencies: [
        .product(name: "Vault", package: "$name"), .product(name: "VaultQueue", package: "$name"),
        .product(name: "Outbox", package: "$name"), .product(name: "Telemetry", package: "$name"),
      ], swiftSettings: [.treatAllWarnings(as: .error)])
  ],
  swiftLanguageModes: [.v6]
)
PACKAGE

log="$work/build.log"
if ! swift build --package-path "$work/MemoPublic" >"$log" 2>&1; then
  cat "$log" >&2
  echo "check-memo-public: memo does not build from vault's public API alone" >&2
  exit 1
fi
echo "check-memo-public: memo builds against vault's library products alone (public API, warnings as errors)"
