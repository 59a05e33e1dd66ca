// swift-tools-version: 6.2
// A small notes app that depends on vault by path and uses only its library products: it keeps
// its notes sealed (Vault), sends each new note to a server through the outbox instead of
// posting it directly (Outbox, VaultQueue), and logs telemetry (Telemetry). docs/INTEGRATING.md
// walks through it; tools/check-consumer.sh builds it and runs it against the test servers.
import Foundation
import PackageDescription

// SwiftPM names a path dependency after its directory, which depends on where vault was checked out.
let vaultPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..")
  .standardizedFileURL.path
let vault = URL(fileURLWithPath: vaultPath).lastPathComponent.lowercased()

let package = Package(
  name: "NotesApp",
  dependencies: [.package(path: vaultPath)],
  targets: [
    .executableTarget(
      name: "notes",
      dependencies: [
        .product(name: "Vault", package: vault), .product(name: "VaultQueue", package: vault),
        .product(name: "Outbox", package: vault), .product(name: "Telemetry", package: vault),
        .product(name: "VaultScan", package: vault),
      ], swiftSettings: [.treatAllWarnings(as: .error)])
  ]
)
