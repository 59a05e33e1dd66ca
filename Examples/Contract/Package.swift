// swift-tools-version: 6.2
// An outside package that depends on vault by path and uses only its library products: issue 12's
// contract, compiled and run by tools/check-consumer.sh as part of the test command.
import Foundation
import PackageDescription

// SwiftPM names a path dependency after its directory, which depends on where vault was checked out.
let vaultPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..")
  .standardizedFileURL.path
let vault = URL(fileURLWithPath: vaultPath).lastPathComponent.lowercased()

let libraries: [Target.Dependency] = ["Vault", "VaultQueue", "Outbox", "Telemetry", "VaultScan"].map {
  .product(name: $0, package: vault)
}

let package = Package(
  name: "Contract",
  dependencies: [.package(path: vaultPath)],
  targets: [
    .executableTarget(name: "Contract", dependencies: libraries, swiftSettings: [.treatAllWarnings(as: .error)]),
    // The DocC catalogs' code blocks, compiled (never run): Sources/DocCSnippets/main.swift.
    .executableTarget(name: "DocCSnippets", dependencies: libraries, swiftSettings: [.treatAllWarnings(as: .error)]),
  ]
)
