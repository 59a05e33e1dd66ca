// swift-tools-version: 6.2
import PackageDescription

// Every Swift target is built in Swift 6 language mode with all warnings treated as errors.
let strict: [SwiftSetting] = [.treatAllWarnings(as: .error)]

/// The libFuzzer target `fuzz-NAME`, its one source file in Fuzz/fuzz-NAME (Fuzz/README.md).
func fuzzTarget(_ name: String, _ dependencies: [Target.Dependency]) -> Target {
  .executableTarget(
    name: "fuzz-\(name)", dependencies: ["FuzzSupport"] + dependencies, path: "Fuzz/fuzz-\(name)",
    swiftSettings: strict)
}

let package = Package(
  name: "vault",
  products: [
    // One library product per capability an app uses; each is one `import`.
    .library(name: "Vault", targets: ["Vault"]),
    .library(name: "VaultQueue", targets: ["VaultQueue"]),
    .library(name: "Outbox", targets: ["Outbox"]),
    .library(name: "Telemetry", targets: ["Telemetry"]),
    .library(name: "VaultScan", targets: ["VaultScan"]),
    .library(name: "VaultBackup", targets: ["VaultBackup"]),
    .executable(name: "vault", targets: ["vault"]),
    .executable(name: "memo", targets: ["memo"]),
  ],
  targets: [
    // C libraries from Debian, one system-library target each (module.modulemap + shim.h only),
    // except the two loaded with dlopen on first use (a C target each, with its loader).
    .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
    .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
    .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
    .systemLibrary(name: "CCompression", providers: [.apt(["liblzma-dev", "libbz2-dev", "libzstd-dev"])]),
    .systemLibrary(name: "CNetlink"),
    // glibc only (prctl, sigaction): the async-signal-safe crash handler behind ProcessHardening.
    .systemLibrary(name: "CProcessHardening"),
    // VaultScan's AVX2 pre-filter: C in a header (Swift cannot target AVX2 per function).
    .systemLibrary(name: "CScanKernels"),
    // libcurl, loaded with dlopen on first use (headers from libcurl4-openssl-dev): Sources/CCurl.
    .target(name: "CCurl", dependencies: ["CDynamicLibrary"]),
    // libsecret (with GLib and GIO), loaded with dlopen on first use, declared without its headers:
    // Sources/CLibSecret.
    .target(name: "CLibSecret", dependencies: ["CDynamicLibrary"], exclude: ["abi.h"]),
    // What both loaders share: one attempt at a time, success kept, the reason of a failure kept.
    .target(name: "CDynamicLibrary"),

    .target(name: "VaultCrypto", dependencies: ["COpenSSL"], swiftSettings: strict),
    .target(name: "VaultKeys", dependencies: ["VaultCrypto", "CLibSecret"], swiftSettings: strict),
    .target(name: "Vault", dependencies: ["VaultCrypto", "VaultKeys", "CProcessHardening"], swiftSettings: strict),
    .target(name: "VaultQueue", dependencies: ["Vault", "VaultKeys", "VaultCrypto", "CSQLite"], swiftSettings: strict),
    .target(name: "Outbox", dependencies: ["Vault", "VaultQueue", "VaultCrypto", "CCurl"], swiftSettings: strict),
    .target(
      name: "Telemetry", dependencies: ["Outbox", "Vault", "VaultQueue", "VaultCrypto", "CZlib", "CNetlink"],
      swiftSettings: strict),
    // The scan audits vault's containers itself (one walk, one reader): it reads them through VaultQueue.
    .target(
      name: "VaultScan",
      dependencies: [
        "Vault", "VaultKeys", "VaultQueue", "VaultCrypto", "CZlib", "CCompression", "CScanKernels", "CProcessHardening",
      ],
      swiftSettings: strict),
    // Backup bundles: keys wrapped under a passphrase and container snapshots in one file.
    .target(
      name: "VaultBackup", dependencies: ["Vault", "VaultKeys", "VaultQueue", "VaultCrypto"], swiftSettings: strict),
    .target(
      name: "VaultCLI",
      dependencies: [
        "Vault", "VaultKeys", "VaultCrypto", "VaultQueue", "Outbox", "Telemetry", "VaultScan", "VaultBackup",
        "CProcessHardening",
      ],
      swiftSettings: strict),
    .executableTarget(name: "vault", dependencies: ["VaultCLI", "Vault"], swiftSettings: strict),
    .executableTarget(
      name: "memo", dependencies: ["Outbox", "Telemetry", "VaultQueue", "Vault", "VaultKeys"], swiftSettings: strict),

    // Benchmarks live under tools/; the scripts beside them run the baselines.
    .executableTarget(
      name: "vault-bench", dependencies: ["Vault", "VaultCrypto"], path: "tools/bench/vault-bench",
      swiftSettings: strict),

    // Fuzz targets (Fuzz/README.md). tools/fuzz.sh builds each with libFuzzer and AddressSanitizer
    // (-sanitize=fuzzer,address -DFUZZING) in its own scratch path; this plain build makes each a
    // replayer of input files, so the targets always compile against the library they test.
    .target(name: "FuzzSupport", path: "Fuzz/FuzzSupport", swiftSettings: strict),
    fuzzTarget("envelope", ["Vault", "VaultKeys", "VaultCrypto"]),
    fuzzTarget("armor", ["VaultCLI"]),
    fuzzTarget("manifest", ["VaultKeys", "VaultCrypto"]),
    fuzzTarget("keyfile", ["VaultKeys", "VaultCrypto"]),
    fuzzTarget("scan", ["VaultScan"]),
    fuzzTarget("json", ["Telemetry"]),
    fuzzTarget("http", ["Outbox"]),
    fuzzTarget("arguments", ["VaultCLI"]),
    fuzzTarget("bundle", ["VaultBackup", "Vault", "VaultKeys", "VaultCrypto", "VaultQueue"]),

    // Helpers shared by the test targets (temporary directories, spawning daemons, the test keyring).
    .target(
      name: "VaultTestSupport", dependencies: ["VaultKeys", "VaultCrypto"], path: "Tests/VaultTestSupport",
      swiftSettings: strict),
    .executableTarget(
      name: "vault-queue-bench",
      dependencies: ["Vault", "VaultCrypto", "VaultKeys", "VaultQueue", "Telemetry", "CSQLite"],
      path: "tools/bench/vault-queue-bench", swiftSettings: strict),
    .executableTarget(
      name: "vault-crash-worker", dependencies: ["Vault", "VaultQueue"], path: "tools/crash/vault-crash-worker",
      swiftSettings: strict),
    // Holds a known secret and crashes, for the crash-output tests (Tests/VaultCLITests/CrashOutputTests.swift).
    .executableTarget(
      name: "vault-trap-worker", dependencies: ["Vault", "VaultCrypto", "VaultTestSupport"],
      path: "tools/crash/vault-trap-worker", swiftSettings: strict),
    .testTarget(name: "VaultCryptoTests", dependencies: ["VaultCrypto", "VaultTestSupport"], swiftSettings: strict),
    .testTarget(
      name: "VaultKeysTests", dependencies: ["VaultKeys", "VaultCrypto", "VaultTestSupport"], swiftSettings: strict),
    .testTarget(
      name: "VaultTests", dependencies: ["Vault", "VaultKeys", "VaultCrypto", "VaultTestSupport"], swiftSettings: strict
    ),
    .testTarget(
      name: "VaultQueueTests", dependencies: ["VaultQueue", "Vault", "VaultKeys", "VaultCrypto", "VaultTestSupport"],
      swiftSettings: strict),
    .testTarget(
      name: "OutboxTests", dependencies: ["Outbox", "VaultQueue", "Vault", "VaultKeys", "VaultTestSupport"],
      swiftSettings: strict),
    .testTarget(
      name: "TelemetryTests",
      dependencies: ["Telemetry", "Outbox", "VaultQueue", "Vault", "VaultKeys", "VaultCrypto", "VaultTestSupport"],
      swiftSettings: strict),
    .testTarget(
      name: "VaultScanTests",
      dependencies: [
        "VaultScan", "VaultQueue", "Vault", "VaultKeys", "VaultCrypto", "CProcessHardening", "VaultTestSupport",
      ],
      swiftSettings: strict),
    .testTarget(
      name: "VaultBackupTests",
      dependencies: ["VaultBackup", "VaultQueue", "Vault", "VaultKeys", "VaultCrypto", "VaultTestSupport"],
      swiftSettings: strict),
    .testTarget(
      name: "VaultCLITests",
      dependencies: ["VaultCLI", "Vault", "VaultBackup", "VaultCrypto", "VaultKeys", "VaultQueue", "VaultTestSupport"],
      exclude: ["Golden", "Fixtures"],
      swiftSettings: strict),
  ],
  swiftLanguageModes: [.v6]
)
