import Foundation
import Outbox
import Telemetry
import Vault
import VaultQueue

/// What the app's unit tests use (kept here so the guide's test setup compiles with the app).
enum TestSupport {
  // guide:in-memory
  /// A vault whose keys live in memory only: for unit tests, never for data that must survive.
  static func makeTestVault(in directory: String) throws -> (Vault, QueueContainer) {
    let vault = try Vault.create(
      home: directory + "/home", store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(
      path: directory + "/home/queue.sqlite", vault: vault,
      configuration: QueueConfiguration(attemptCeiling: 2))  // parked after two refusals, for a short test
    return (vault, container)
  }
  // guide:end

  // guide:test-doubles
  /// A server as a test wants it: every message answered with `result`.
  struct AnsweringTransport: SynchronousTransport {
    let result: DeliveryResult
    func deliverSynchronously(id: UUID, payload: Data) -> DeliveryResult { result }
  }

  /// A collector that accepts every batch, and a token that never changes.
  struct AcceptingCollector: BatchSender {
    func send(_ batch: TelemetryBatch, token: String) -> SendResult { .status(200, retryAfter: nil) }
  }

  struct FixedToken: TokenProvider {
    func token(refresh: Bool) throws -> String { "test-token" }
  }
  // guide:end

  // guide:rotate-in-app
  /// What `vault rotate --if-due` does, from inside the app (for apps without a systemd timer).
  static func rotateIfDue(_ vault: Vault) throws {
    if vault.rotationSchedule(maxAgeDays: 90).due {
      let report = try vault.rotate()
      for (version, reasons) in report.keptBecause { print("kept key version \(version): \(reasons.joined(separator: "; "))") }
    }
  }
  // guide:end
}
